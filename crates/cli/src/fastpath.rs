//! The HTTP face's pass-through for tool calls (`FastPath`), and the idle expiry of its
//! sessions (`SessionClock`).
//!
//! A `tools/call` POSTed on a live session is relayed as JSON text: the request's params go to
//! the hub with only the tool's name rewritten (when prefixed), the result comes back as text,
//! and the answer is one `application/json` body. rmcp's typed server stack (parse into MCP
//! types, session worker, SSE framing) is skipped; the call path, its deadline and its recovery
//! rules are the same as for every other call. A `notifications/cancelled` naming one of these
//! calls cancels it.
//!
//! A call that carries a progress token is answered the same way while no progress comes: if the
//! result comes first, it is one `application/json` body; if a progress notification comes
//! first, the answer becomes an event stream (`text/event-stream`): each progress notification
//! (with the client's own token) as an event, then the result as the last one.
//!
//! Everything else, and every call it cannot serve exactly as rmcp would (no session, an
//! unknown session, a name the registry does not hold, a malformed message, a protocol version
//! without sessions), goes to rmcp's service unchanged.
//! This module must never answer a message it has not fully understood.
//!
//! Because these calls never reach rmcp's session worker, rmcp's own idle timer would expire a
//! session that is busy with them. So rmcp's keep-alive is off, and this module expires a
//! session after `SESSION_IDLE` without any request and without an open stream.

use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use mcp_supervisor::{CallArgs, CallError};
use rmcp::model::{CallToolResult, ContentBlock, ProgressNotificationParam, ProtocolVersion};
use rmcp::transport::streamable_http_server::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::value::RawValue;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::proxy::Proxy;

/// A session with no request and no open stream for this long is closed (rmcp's default).
pub const SESSION_IDLE: Duration = Duration::from_secs(300);

const SESSION_HEADER: &str = "mcp-session-id";
const VERSION_HEADER: &str = "mcp-protocol-version";
/// The first protocol version without sessions: its calls go to rmcp.
const SESSIONLESS_SINCE: &str = "2026-07-28";

/// The pass-through and the sessions' activity.
pub struct FastPath {
    proxy: Arc<Proxy>,
    sessions: Arc<LocalSessionManager>,
    /// Ends with the HTTP face: no new call is taken after it.
    shutdown: CancellationToken,
    /// The calls under way here, by session and request id, for `notifications/cancelled`.
    calls: Mutex<HashMap<(String, String), CancellationToken>>,
    /// A call under way keeps its session from expiring.
    clock: Arc<SessionClock>,
}

/// When each session was last used, and the expiry of idle ones.
pub struct SessionClock {
    sessions: Arc<LocalSessionManager>,
    /// Per session: the last request, and how many of its streams are open.
    activity: Mutex<HashMap<String, Activity>>,
}

#[derive(Clone, Copy)]
struct Activity {
    last: Instant,
    open_streams: usize,
}

/// A JSON-RPC message, looked at without building it.
#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow)]
    jsonrpc: Cow<'a, str>,
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(borrow)]
    method: Cow<'a, str>,
    #[serde(borrow, default)]
    params: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct CallParams<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(borrow, default)]
    arguments: Option<&'a RawValue>,
    #[serde(rename = "_meta", borrow, default)]
    meta: Option<Meta<'a>>,
}

#[derive(Deserialize)]
struct Meta<'a> {
    #[serde(rename = "progressToken", borrow, default)]
    progress_token: Option<&'a RawValue>,
    #[serde(rename = "io.modelcontextprotocol/protocolVersion", default)]
    protocol_version: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct CancelParams<'a> {
    #[serde(rename = "requestId", borrow)]
    request_id: &'a RawValue,
}

/// What the answer needs to know of a result.
#[derive(Deserialize)]
struct ResultPeek {
    #[serde(rename = "isError", default)]
    is_error: Option<bool>,
    #[serde(rename = "resultType", default)]
    result_type: Option<IgnoredAny>,
}

impl FastPath {
    pub fn new(
        proxy: Arc<Proxy>,
        sessions: Arc<LocalSessionManager>,
        clock: Arc<SessionClock>,
        shutdown: CancellationToken,
    ) -> Arc<Self> {
        Arc::new(Self {
            proxy,
            sessions,
            shutdown,
            calls: Mutex::new(HashMap::new()),
            clock,
        })
    }

    /// The session was closed (`DELETE`): its calls under way here are cancelled, as rmcp ends
    /// the streams of its own.
    pub fn end_session(&self, session: &str) {
        if let Ok(calls) = self.calls.lock() {
            for ((owner, _), token) in calls.iter() {
                if owner == session {
                    token.cancel();
                }
            }
        }
    }

    /// Answer a POST to `/mcp` here, or `None` to leave it to rmcp.
    pub async fn post(self: &Arc<Self>, parts: &Parts, body: &[u8]) -> Option<Response> {
        let session = header_text(&parts.headers, SESSION_HEADER)?;
        if self.shutdown.is_cancelled() || !plain_json_request(&parts.headers) {
            return None;
        }
        let message: Message<'_> = serde_json::from_slice(body).ok()?;
        if message.jsonrpc != "2.0" {
            return None;
        }
        match (message.method.as_ref(), message.id) {
            ("tools/call", Some(id)) => {
                let key = id_key(id)?;
                self.call(session, id, key, message.params?).await
            }
            ("notifications/cancelled", None) => self.cancel(session, message.params?),
            _ => None,
        }
    }

    async fn call(
        self: &Arc<Self>,
        session: &str,
        id: &RawValue,
        key: String,
        params: &RawValue,
    ) -> Option<Response> {
        let call: CallParams<'_> = serde_json::from_str(params.get()).ok()?;
        if call.arguments.is_some_and(|a| !a.get().starts_with('{')) {
            return None; // rmcp's error for arguments that are not an object
        }
        if call
            .meta
            .as_ref()
            .is_some_and(|m| m.protocol_version.is_some())
        {
            return None; // per-request protocol metadata is rmcp's to check
        }
        let progress_token = call.meta.as_ref().and_then(|m| m.progress_token);
        if progress_token.is_some_and(|t| id_key(t).is_none()) {
            return None; // rmcp's error for a token that is neither a string nor an integer
        }
        let hub = self.proxy.hub();
        if !hub.registry().contains(&call.name) {
            return None; // rmcp's answer (or, under wrap, the server's own)
        }
        if !self.sessions.sessions.read().await.contains_key(session) {
            return None; // rmcp answers 404
        }

        let cancel = CancellationToken::new();
        // The same id twice in flight is the client's mistake: rmcp's path sorts it out.
        let registered = self.register(session, key, cancel.clone())?;
        let held = self.clock.hold(session);
        let mut args = CallArgs {
            cancel: Some(cancel),
            ..CallArgs::default()
        };
        let Some(token) = progress_token else {
            return Some(json_response(
                self.answer(id, &call.name, params, args).await,
            ));
        };

        // With a progress token: JSON while no progress comes, an event stream once one does.
        let (progress_tx, mut progress) = mpsc::unbounded_channel();
        args.progress = Some(progress_tx);
        let fast = self.clone();
        let (id, name, params) = (id.to_owned(), call.name.into_owned(), params.to_owned());
        let mut answer: AnswerFuture = Box::pin(async move {
            let body = fast.answer(&id, &name, &params, args).await;
            drop((registered, held));
            body
        });
        let first = tokio::select! {
            biased;
            body = &mut answer => return Some(json_response(body)),
            first = progress.recv() => first,
        };
        let mut events = VecDeque::new();
        match first {
            Some(update) => events.push_back(progress_event(token, update)),
            // No progress can come any more: the answer is all there is.
            None => return Some(json_response(answer.await)),
        }
        let stream = ProgressStream {
            token: token.to_owned(),
            progress: Some(progress),
            answer: Some(answer),
            events,
        };
        let body = Body::from_stream(futures::stream::unfold(stream, ProgressStream::next));
        Some(
            (
                StatusCode::OK,
                [
                    (header::CONTENT_TYPE, "text/event-stream"),
                    (header::CACHE_CONTROL, "no-cache"),
                ],
                body,
            )
                .into_response(),
        )
    }

    /// Run the call and build the JSON-RPC answer to request `id`. Never fails: once the call
    /// has run, its answer must reach the client (sending it to rmcp would run it again).
    async fn answer(&self, id: &RawValue, name: &str, params: &RawValue, args: CallArgs) -> String {
        let hub = self.proxy.hub();
        let record = self.proxy.metrics().start();
        let outcome = hub.call_json(name, params, args).await;
        let peek = outcome
            .as_ref()
            .ok()
            .and_then(|r| serde_json::from_str::<ResultPeek>(r.get()).ok());
        let is_error = peek.as_ref().and_then(|p| p.is_error) == Some(true);
        record.finish(crate::metrics::outcome(outcome.as_ref().map(|_| is_error)));
        match outcome {
            Ok(result) => {
                // Sessions are legacy protocol versions: no `resultType` (rmcp strips it too).
                let has_type = peek.is_some_and(|p| p.result_type.is_some());
                if !has_type {
                    return answer_result(id, &result);
                }
                match without_result_type(&result) {
                    Ok(result) => answer_result(id, &result),
                    Err(error) => answer_error(
                        id,
                        -32603,
                        &format!("the server's result could not be relayed: {error}"),
                    ),
                }
            }
            Err(CallError::ServerError { code, message, .. }) => answer_error(id, code, &message),
            Err(CallError::UnknownTool { name }) => answer_error(
                id,
                -32602,
                &format!(
                    "no server offers a tool named \"{name}\"; list the tools to see what is published"
                ),
            ),
            Err(error) => {
                let result = CallToolResult::error(vec![ContentBlock::text(error.to_string())]);
                match serde_json::value::to_raw_value(&result) {
                    Ok(result) => answer_result(id, &result),
                    Err(_) => answer_error(id, -32603, &error.to_string()),
                }
            }
        }
    }

    /// `notifications/cancelled` for one of our calls: cancel it and accept the notification.
    fn cancel(&self, session: &str, params: &RawValue) -> Option<Response> {
        let params: CancelParams<'_> = serde_json::from_str(params.get()).ok()?;
        let key = (session.to_string(), id_key(params.request_id)?);
        let token = self.calls.lock().ok()?.get(&key).cloned()?;
        token.cancel();
        Some(StatusCode::ACCEPTED.into_response())
    }

    /// Note a call under way; `None` when one with the same id is already under way.
    fn register(
        self: &Arc<Self>,
        session: &str,
        key: String,
        token: CancellationToken,
    ) -> Option<Registered> {
        let key = (session.to_string(), key);
        let mut calls = self.calls.lock().ok()?;
        if calls.contains_key(&key) {
            return None;
        }
        calls.insert(key.clone(), token);
        Some(Registered {
            fast: self.clone(),
            key,
        })
    }
}

impl SessionClock {
    pub fn new(sessions: Arc<LocalSessionManager>) -> Arc<Self> {
        Arc::new(Self {
            sessions,
            activity: Mutex::new(HashMap::new()),
        })
    }

    /// A request on `session` (any method, either path).
    pub fn touch(&self, session: &str) {
        if let Ok(mut activity) = self.activity.lock() {
            Self::update(&mut activity, session, |seen| seen.last = Instant::now());
        }
    }

    /// Keep `session` from expiring while the returned guard lives (a stream or a call is open).
    pub fn hold(self: &Arc<Self>, session: &str) -> StreamGuard {
        if let Ok(mut activity) = self.activity.lock() {
            Self::update(&mut activity, session, |seen| seen.open_streams += 1);
        }
        StreamGuard {
            clock: self.clone(),
            session: session.to_string(),
        }
    }

    /// Change `session`'s activity, made (its clock starting now) when first seen; no
    /// allocation for a session already known.
    fn update(
        activity: &mut HashMap<String, Activity>,
        session: &str,
        change: impl FnOnce(&mut Activity),
    ) {
        if let Some(seen) = activity.get_mut(session) {
            change(seen);
            return;
        }
        let mut seen = Activity {
            last: Instant::now(),
            open_streams: 0,
        };
        change(&mut seen);
        activity.insert(session.to_string(), seen);
    }

    /// Count `response`'s body as an open stream of `session` until it ends or is dropped.
    pub fn track_stream(self: &Arc<Self>, session: &str, response: Response) -> Response {
        let guard = self.hold(session);
        let (parts, body) = response.into_parts();
        let body = Body::from_stream(body.into_data_stream().map(move |chunk| {
            let _held = &guard;
            chunk
        }));
        Response::from_parts(parts, body)
    }

    /// Close every session idle for `idle`; forget sessions that are gone. Returns how many
    /// were closed.
    pub async fn expire_idle(&self, idle: Duration) -> usize {
        let live: Vec<Arc<str>> = self
            .sessions
            .sessions
            .read()
            .await
            .keys()
            .cloned()
            .collect();
        let now = Instant::now();
        let mut expired = Vec::new();
        if let Ok(mut activity) = self.activity.lock() {
            activity.retain(|id, _| live.iter().any(|l| **l == **id));
            for id in &live {
                // A session first seen now starts its clock now.
                let seen = activity.entry(id.to_string()).or_insert(Activity {
                    last: now,
                    open_streams: 0,
                });
                if seen.open_streams == 0 && now.duration_since(seen.last) >= idle {
                    expired.push(id.clone());
                }
            }
            for id in &expired {
                activity.remove(&**id);
            }
        }
        for id in &expired {
            tracing::info!(session = %id, "closing a session idle for {} s", idle.as_secs());
            let _ = self.sessions.close_session(id).await;
        }
        expired.len()
    }

    /// Run [`SessionClock::expire_idle`] every tenth of `idle` until `shutdown`.
    pub fn spawn_expiry(self: &Arc<Self>, idle: Duration, shutdown: CancellationToken) {
        let clock = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(idle / 10);
            loop {
                tokio::select! {
                    _ = tick.tick() => { clock.expire_idle(idle).await; }
                    () = shutdown.cancelled() => return,
                }
            }
        });
    }
}

/// Unregisters a call when it ends, however it ends.
struct Registered {
    fast: Arc<FastPath>,
    key: (String, String),
}

impl Drop for Registered {
    fn drop(&mut self) {
        if let Ok(mut calls) = self.fast.calls.lock() {
            calls.remove(&self.key);
        }
    }
}

/// Counts a stream (or a call) closed when dropped.
pub struct StreamGuard {
    clock: Arc<SessionClock>,
    session: String,
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        if let Ok(mut activity) = self.clock.activity.lock()
            && let Some(seen) = activity.get_mut(&self.session)
        {
            seen.open_streams = seen.open_streams.saturating_sub(1);
            seen.last = Instant::now();
        }
    }
}

/// A call's answer, once it has run: the JSON-RPC message as text.
type AnswerFuture = Pin<Box<dyn Future<Output = String> + Send>>;

/// The event stream of a call whose progress came before its result: progress events as they
/// come, then the answer, then the end. Dropping it (the client went away) drops the call,
/// which cancels it upstream.
struct ProgressStream {
    /// The client's progress token, as it sent it.
    token: Box<RawValue>,
    /// `None` once every sender is gone (the call has ended).
    progress: Option<mpsc::UnboundedReceiver<ProgressNotificationParam>>,
    /// `None` once the answer is queued.
    answer: Option<AnswerFuture>,
    events: VecDeque<String>,
}

impl ProgressStream {
    async fn next(mut self) -> Option<(Result<String, Infallible>, Self)> {
        loop {
            if let Some(event) = self.events.pop_front() {
                return Some((Ok(event), self));
            }
            let answer = self.answer.as_mut()?;
            let body = match self.progress.as_mut() {
                Some(progress) => tokio::select! {
                    // Progress first: what was sent before the result goes out before it.
                    biased;
                    update = progress.recv() => {
                        match update {
                            Some(update) => self.events.push_back(progress_event(&self.token, update)),
                            None => self.progress = None,
                        }
                        continue;
                    }
                    body = answer => body,
                },
                None => answer.await,
            };
            if let Some(progress) = self.progress.as_mut() {
                while let Ok(update) = progress.try_recv() {
                    self.events.push_back(progress_event(&self.token, update));
                }
            }
            self.events.push_back(sse_event(&body));
            self.answer = None;
        }
    }
}

/// One SSE event carrying `message` (a line of its own per line of it, though JSON text from
/// a server is one line).
fn sse_event(message: &str) -> String {
    let mut event = String::with_capacity(message.len() + 32);
    event.push_str("event: message\n");
    for line in message.split('\n') {
        event.push_str("data: ");
        event.push_str(line.strip_suffix('\r').unwrap_or(line));
        event.push('\n');
    }
    event.push('\n');
    event
}

/// A `notifications/progress` event with the client's own token.
fn progress_event(token: &RawValue, update: ProgressNotificationParam) -> String {
    let mut params = serde_json::to_value(&update).unwrap_or_default();
    if let Some(params) = params.as_object_mut() {
        let token = serde_json::from_str(token.get()).unwrap_or_default();
        params.insert("progressToken".to_string(), token);
    }
    let message = serde_json::json!({
        "jsonrpc": "2.0",
        "method": "notifications/progress",
        "params": params,
    });
    sse_event(&message.to_string())
}

/// The answer as one `application/json` body.
fn json_response(body: String) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}

pub fn header_text<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// Whether the request says its body is `application/json` (parameters aside), as rmcp checks it.
pub fn is_json_media_type(headers: &HeaderMap) -> bool {
    header_text(headers, header::CONTENT_TYPE.as_str()).is_some_and(|value| {
        let essence = value.split_once(';').map_or(value, |(essence, _)| essence);
        essence.trim().eq_ignore_ascii_case("application/json")
    })
}

/// The headers rmcp requires of a POST (JSON body; JSON and SSE accepted), and a protocol
/// version that has sessions.
fn plain_json_request(headers: &HeaderMap) -> bool {
    let json_body = is_json_media_type(headers);
    let accept = header_text(headers, header::ACCEPT.as_str()).unwrap_or("");
    let version_ok = match headers.get(VERSION_HEADER).map(|v| v.to_str()) {
        None => true,
        Some(Err(_)) => false,
        Some(Ok(version)) => {
            version < SESSIONLESS_SINCE
                && ProtocolVersion::KNOWN_VERSIONS
                    .iter()
                    .any(|v| v.as_str() == version)
        }
    };
    json_body
        && accepts(accept, "application/json")
        && accepts(accept, "text/event-stream")
        && version_ok
}

/// Whether an `Accept` value lists `media` (or a wildcard for it) with a weight above zero.
fn accepts(accept: &str, media: &str) -> bool {
    let (kind, _) = media.split_once('/').unwrap_or((media, ""));
    accept.split(',').any(|entry| {
        let mut fields = entry.split(';');
        let Some(range) = fields.next().map(str::trim) else {
            return false;
        };
        let matches = range.eq_ignore_ascii_case(media)
            || range == "*/*"
            || range
                .strip_suffix("/*")
                .is_some_and(|k| k.eq_ignore_ascii_case(kind));
        let zero = fields.any(|f| {
            f.trim()
                .strip_prefix("q=")
                .and_then(|q| q.trim().parse::<f32>().ok())
                .is_some_and(|q| q <= 0.0)
        });
        matches && !zero
    })
}

/// A request id as a key: strings by their value, integers by their digits; anything else
/// (null, fractions, objects) is not a valid id and goes to rmcp.
fn id_key(id: &RawValue) -> Option<String> {
    let text = id.get();
    if text.starts_with('"') {
        let value: String = serde_json::from_str(text).ok()?;
        Some(format!("s:{value}"))
    } else {
        let value: i64 = serde_json::from_str(text).ok()?;
        Some(format!("n:{value}"))
    }
}

/// `{"jsonrpc":"2.0","id":ID,"result":RESULT}`.
fn answer_result(id: &RawValue, result: &RawValue) -> String {
    let result = result.get();
    let mut body = String::with_capacity(result.len() + id.get().len() + 40);
    body.push_str(r#"{"jsonrpc":"2.0","id":"#);
    body.push_str(id.get());
    body.push_str(r#","result":"#);
    body.push_str(result);
    body.push('}');
    body
}

/// A result without its `resultType` member, which clients of session protocol versions do not
/// know (an upstream on 2026-07-28 sends it).
fn without_result_type(result: &RawValue) -> Result<Box<RawValue>, serde_json::Error> {
    let mut members: std::collections::BTreeMap<String, &RawValue> =
        serde_json::from_str(result.get())?;
    members.remove("resultType");
    serde_json::value::to_raw_value(&members)
}

fn answer_error(id: &RawValue, code: i32, message: &str) -> String {
    serde_json::json!({
        "jsonrpc": "2.0",
        "id": serde_json::from_str::<serde_json::Value>(id.get()).unwrap_or_default(),
        "error": { "code": code, "message": message },
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(text: &str) -> Box<RawValue> {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn events_carry_each_line_as_data_and_progress_the_clients_token() {
        assert_eq!(
            sse_event(r#"{"a":1}"#),
            "event: message\ndata: {\"a\":1}\n\n"
        );
        assert_eq!(
            sse_event("{\r\n\"a\": 1\n}"),
            "event: message\ndata: {\ndata: \"a\": 1\ndata: }\n\n"
        );

        let update: ProgressNotificationParam = serde_json::from_value(serde_json::json!({
            "progressToken": 7, "progress": 0.5, "total": 1.0, "message": "half"
        }))
        .unwrap();
        let event = progress_event(&raw(r#""client-token""#), update);
        let data = event
            .lines()
            .find_map(|l| l.strip_prefix("data: "))
            .unwrap();
        let message: serde_json::Value = serde_json::from_str(data).unwrap();
        assert_eq!(message["method"], "notifications/progress");
        assert_eq!(message["params"]["progressToken"], "client-token");
        assert_eq!(message["params"]["progress"], 0.5);
        assert_eq!(message["params"]["total"], 1.0);
        assert_eq!(message["params"]["message"], "half");
        assert!(message.get("id").is_none(), "a notification has no id");
    }

    #[test]
    fn answers_keep_the_id_and_the_result_as_it_came_but_its_result_type() {
        let id = raw("7");
        let answer = answer_result(&id, &raw(r#"{"content":[],"isError":false}"#));
        assert_eq!(
            answer,
            r#"{"jsonrpc":"2.0","id":7,"result":{"content":[],"isError":false}}"#
        );
        let stripped = without_result_type(&raw(
            r#"{"resultType":"complete","content":[{"type":"text","text":"a"}]}"#,
        ))
        .unwrap();
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&answer_result(&raw(r#""a""#), &stripped))
                .unwrap(),
            serde_json::json!({"jsonrpc":"2.0","id":"a","result":{"content":[{"type":"text","text":"a"}]}})
        );
        let error = answer_error(&raw(r#""x""#), -32602, "bad \"name\"");
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&error).unwrap(),
            serde_json::json!({"jsonrpc":"2.0","id":"x","error":{"code":-32602,"message":"bad \"name\""}})
        );
    }

    #[test]
    fn ids_are_keyed_by_value_and_only_strings_and_integers_count() {
        assert_eq!(id_key(&raw("12")).as_deref(), Some("n:12"));
        assert_eq!(id_key(&raw(r#""12""#)).as_deref(), Some("s:12"));
        assert_eq!(id_key(&raw(r#""\u0031""#)).as_deref(), Some("s:1"));
        for bad in ["null", "1.5", "{}", "[]", "true"] {
            assert_eq!(id_key(&raw(bad)), None, "{bad}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn idle_sessions_close_and_busy_or_streaming_ones_stay() {
        let mut manager = LocalSessionManager::default();
        manager.session_config.keep_alive = None;
        manager.session_config.init_timeout = None;
        let sessions = Arc::new(manager);
        let mut ids = Vec::new();
        let mut workers = Vec::new();
        for _ in 0..3 {
            let (id, worker) = sessions.create_session().await.unwrap();
            ids.push(id);
            workers.push(worker);
        }
        let [idle, busy, streaming] = [ids[0].clone(), ids[1].clone(), ids[2].clone()];
        let live = |id: &Arc<str>| {
            let sessions = sessions.clone();
            let id = id.clone();
            async move { sessions.has_session(&id).await.unwrap() }
        };
        let clock = SessionClock::new(sessions.clone());
        let limit = Duration::from_secs(300);
        // First seen now: every clock starts now.
        assert_eq!(clock.expire_idle(limit).await, 0);
        tokio::time::advance(Duration::from_secs(200)).await;
        clock.touch(&busy);
        let stream = clock.track_stream(&streaming, Response::new(Body::from("x")));
        tokio::time::advance(Duration::from_secs(99)).await;
        assert_eq!(clock.expire_idle(limit).await, 0, "299 s is not idle yet");
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(clock.expire_idle(limit).await, 1);
        assert!(!live(&idle).await);
        assert!(live(&busy).await && live(&streaming).await);

        // An open stream keeps its session however long; once it ends, the clock runs again.
        tokio::time::advance(Duration::from_secs(1000)).await;
        assert_eq!(
            clock.expire_idle(limit).await,
            1,
            "only the busy one, now idle"
        );
        assert!(!live(&busy).await && live(&streaming).await);
        drop(stream);
        tokio::time::advance(Duration::from_secs(299)).await;
        assert_eq!(clock.expire_idle(limit).await, 0);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(clock.expire_idle(limit).await, 1);
        assert!(!live(&streaming).await);
        // Sessions that are gone are forgotten.
        assert!(clock.activity.lock().unwrap().is_empty());
    }

    #[test]
    fn accept_needs_both_media_types_with_a_weight() {
        let both = "application/json, text/event-stream";
        assert!(accepts(both, "application/json") && accepts(both, "text/event-stream"));
        assert!(accepts("*/*", "text/event-stream"));
        assert!(accepts("application/*;q=0.5", "application/json"));
        assert!(!accepts("application/json;q=0", "application/json"));
        assert!(!accepts("text/event-stream", "application/json"));
        assert!(!accepts("", "application/json"));
    }

    #[test]
    fn only_session_protocol_versions_and_json_posts_qualify() {
        let mut headers = HeaderMap::new();
        headers.insert(header::CONTENT_TYPE, "application/json".parse().unwrap());
        headers.insert(
            header::ACCEPT,
            "application/json, text/event-stream".parse().unwrap(),
        );
        assert!(plain_json_request(&headers));
        headers.insert(VERSION_HEADER, "2025-06-18".parse().unwrap());
        assert!(plain_json_request(&headers));
        headers.insert(VERSION_HEADER, "2026-07-28".parse().unwrap());
        assert!(!plain_json_request(&headers));
        headers.insert(VERSION_HEADER, "1999-01-01".parse().unwrap());
        assert!(!plain_json_request(&headers));
        headers.insert(
            VERSION_HEADER,
            axum::http::HeaderValue::from_bytes(b"\xff2025").unwrap(),
        );
        assert!(!plain_json_request(&headers));
        headers.remove(VERSION_HEADER);
        headers.insert(header::CONTENT_TYPE, "text/plain".parse().unwrap());
        assert!(!plain_json_request(&headers));
    }
}
