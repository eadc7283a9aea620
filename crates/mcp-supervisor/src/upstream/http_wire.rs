//! The streamable-HTTP wire of one generation (MCP streamable HTTP, 2025-03-26 .. 2025-11-25):
//! each message is POSTed as JSON text, and what comes back (a JSON body, or an event stream on
//! the POST, on a resumption GET or on the standalone GET) is handed to the peer as it came, as
//! [`Incoming`] text.
//!
//! It owns the HTTP client, the session id and the negotiated protocol version of its
//! generation, and every task reading an event stream (all stopped by [`Wire::close`]). It never
//! parses a message beyond framing (batch arrays, and the `id` of an answer on a request's own
//! stream), never resends a POST, never classifies a failure from error text, and never treats
//! the standalone GET stream ending as the generation being lost.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use mcp_supervisor_core::classify::{Failure, mentions_stale_session};
use reqwest::header::{
    ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, WWW_AUTHENTICATE,
};
use reqwest::{Response, StatusCode, Url};
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::value::RawValue;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::http_common::{
    configured_headers, describe, describe_sse, error_body, http_client, http_url, lock,
    media_type, send_failure, sse_events,
};
use super::wire::{Incoming, IncomingTx, Wire};
use crate::auth::Credentials;
use crate::link::BoxFuture;

/// The largest JSON body of a POST response.
const MAX_JSON_BODY: usize = 16 * 1024 * 1024;
/// How long a GET may take to answer with its headers.
const GET_HEADERS_LIMIT: Duration = Duration::from_secs(10);
/// How long the DELETE of [`Wire::close`] may take.
const DELETE_LIMIT: Duration = Duration::from_secs(1);
/// The waits before each resumption of a request's stream that ended before its answer; one try
/// per entry, counted afresh after a resumed stream delivered a message.
const RESUME_BACKOFF: [Duration; 3] = [
    Duration::from_millis(200),
    Duration::from_millis(400),
    Duration::from_millis(800),
];
/// How many times the standalone GET stream is reopened without it delivering a message.
const GET_REOPENS: u32 = 5;
/// The first wait before reopening the standalone GET stream (doubled each time, up to 5 s).
const GET_REOPEN_BASE: Duration = Duration::from_millis(200);
const GET_REOPEN_MAX: Duration = Duration::from_secs(5);
/// How long the first request after the handshake waits for the standalone GET to be answered
/// (opened, refused or failed), so that the stream is in place before anything it may carry.
const GET_SETTLE_LIMIT: Duration = Duration::from_secs(2);
/// The longest wait a server's SSE `retry` field can ask for before a reconnection.
const MAX_SERVER_RETRY: Duration = Duration::from_secs(30);

const SESSION_ID: &str = "mcp-session-id";
const PROTOCOL_VERSION: &str = "mcp-protocol-version";
const LAST_EVENT_ID: &str = "last-event-id";
const JSON: &str = "application/json";
const EVENT_STREAM: &str = "text/event-stream";
const POST_ACCEPT: &str = "application/json, text/event-stream";

/// Headers the wire sets itself; configuring them is an error. `MCP-Protocol-Version` may be
/// configured: it is sent until the handshake agrees on one.
const RESERVED: [&str; 5] = [
    "accept",
    "content-type",
    "content-length",
    SESSION_ID,
    LAST_EVENT_ID,
];

// === impl HttpWire ===

/// One generation's streamable-HTTP transport.
pub struct HttpWire {
    inner: Arc<Inner>,
}

struct Inner {
    url: Url,
    client: reqwest::Client,
    /// The configured extra headers.
    headers: HeaderMap,
    /// `Mcp-Session-Id`, once a response carried one (or from the start, when the wire resumes
    /// a session another process opened).
    session: Mutex<Option<HeaderValue>>,
    /// Whether [`Wire::close`] ends the session with DELETE: always, except for a session that
    /// another process may resume (a client session's own instance that was only let go of).
    ends_session: Arc<AtomicBool>,
    /// `MCP-Protocol-Version`, once the handshake agreed on one.
    protocol: Mutex<Option<HeaderValue>>,
    /// Taken by `close`: once the tasks holding clones are gone, the peer sees no more messages.
    incoming: Mutex<Option<IncomingTx>>,
    listening: AtomicBool,
    /// Turns true once the standalone GET has been answered (or will not be sent): requests
    /// wait for it, bounded, so a server never sees a request before the stream it may use
    /// to answer or to speak of it.
    get_settled: watch::Sender<bool>,
    closed: AtomicBool,
    /// Stops every task of this wire, and any send in flight.
    ct: CancellationToken,
    /// Where each request's bearer token comes from (OAuth), if the server has one.
    auth: Option<Arc<dyn Credentials>>,
}

impl HttpWire {
    /// A wire to the MCP endpoint at `url` (http or https). `headers`: extra headers from config
    /// (e.g. `Authorization`), each checked here; an invalid or reserved one is an error naming
    /// it. `incoming` gets every message the server sends.
    pub fn new(
        url: &str,
        headers: &[(String, String)],
        incoming: IncomingTx,
    ) -> Result<Self, crate::error::OpenError> {
        Self::with_auth(url, headers, incoming, None)
    }

    /// As [`HttpWire::new`], with every request carrying `Authorization: Bearer` from `auth`. A
    /// 401 asks `auth` for a new token and sends the request once more (the server did not run
    /// it); a second refusal is [`Failure::Unauthorized`], never a broken connection.
    pub fn with_auth(
        url: &str,
        headers: &[(String, String)],
        incoming: IncomingTx,
        auth: Option<Arc<dyn Credentials>>,
    ) -> Result<Self, crate::error::OpenError> {
        let url = http_url(url)?;
        let map = configured_headers(headers, &RESERVED)?;
        let client = http_client()?;
        Ok(Self {
            inner: Arc::new(Inner {
                url,
                client,
                headers: map,
                session: Mutex::new(None),
                ends_session: Arc::new(AtomicBool::new(true)),
                protocol: Mutex::new(None),
                incoming: Mutex::new(Some(incoming)),
                listening: AtomicBool::new(false),
                get_settled: watch::channel(false).0,
                closed: AtomicBool::new(false),
                ct: CancellationToken::new(),
                auth,
            }),
        })
    }
}

impl HttpWire {
    /// The wire of a client session's own instance (SPEC §11, §12): it starts on the upstream
    /// session `resume` when given (opened by another process; no handshake is sent again), and
    /// its close ends the session with DELETE only once `ends_session` is true (the client ended
    /// its session), so that a session this process only lets go of stays for another to resume.
    pub fn for_session(mut self, resume: Option<&str>, ends_session: Arc<AtomicBool>) -> Self {
        let Some(inner) = Arc::get_mut(&mut self.inner) else {
            // Only a wire no task holds yet is set up; a new one always is.
            tracing::debug!("the HTTP wire is already in use; its session is not set");
            return self;
        };
        if let Some(id) = resume {
            match HeaderValue::from_str(id) {
                Ok(value) => *lock(&inner.session) = Some(value),
                Err(_) => tracing::warn!(
                    "the upstream session id to resume is not a valid header value; opening a new session"
                ),
            }
        }
        inner.ends_session = ends_session;
        self
    }
}

impl Wire for HttpWire {
    fn session_id(&self) -> Option<String> {
        self.inner
            .session()
            .and_then(|v| v.to_str().ok().map(str::to_string))
    }

    fn send(&self, text: String, request: Option<u64>) -> BoxFuture<'_, Result<(), Failure>> {
        self.send_with(text, request, Vec::new())
    }

    fn takes_headers(&self) -> bool {
        true
    }

    fn send_with(
        &self,
        text: String,
        request: Option<u64>,
        headers: Vec<(String, String)>,
    ) -> BoxFuture<'_, Result<(), Failure>> {
        Box::pin(async move {
            let inner = &self.inner;
            let Some(tx) = inner.sender() else {
                return Err(Failure::TransportClosedBeforeSend);
            };
            if inner.ct.is_cancelled() {
                return Err(Failure::TransportClosedBeforeSend);
            }
            if request.is_some() {
                inner.settle_get().await;
            }
            tokio::select! {
                biased;
                () = inner.ct.cancelled() => Err(Failure::TransportError {
                    message: "the HTTP transport was closed while the POST was in flight".into(),
                    connection_closed: true,
                }),
                outcome = inner.post(text, request, headers, tx) => outcome,
            }
        })
    }

    fn protocol(&self, version: Option<&str>) {
        let value = version.and_then(|v| match HeaderValue::from_str(v) {
            Ok(value) => Some(value),
            Err(_) => {
                tracing::debug!(v, "protocol version is not a valid header value; not sent");
                None
            }
        });
        *lock(&self.inner.protocol) = value;
    }

    fn initialized(&self, protocol_version: &str) {
        self.protocol(Some(protocol_version));
        if self.inner.listening.swap(true, Ordering::SeqCst) {
            return;
        }
        let Some(tx) = self.inner.sender() else {
            self.inner.get_settled.send_replace(true);
            return;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(self.inner.clone().listen(tx));
            }
            Err(_) => {
                tracing::debug!("no runtime: the standalone event stream is not opened");
                self.inner.get_settled.send_replace(true);
            }
        }
    }

    fn close(&self) {
        let inner = &self.inner;
        if inner.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        inner.ct.cancel();
        lock(&inner.incoming).take();
        if inner.session().is_none() {
            return;
        }
        if !inner.ends_session.load(Ordering::SeqCst) {
            tracing::debug!("the upstream session is let go of, not ended: another may resume it");
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::debug!("no runtime: the session is not ended with DELETE");
            return;
        };
        let delete = inner
            .client
            .delete(inner.url.clone())
            // With the session id, as every request.
            .headers(inner.headers_with(None));
        runtime.spawn(async move {
            match tokio::time::timeout(DELETE_LIMIT, delete.send()).await {
                Ok(Ok(response)) => {
                    tracing::debug!(status = %response.status(), "session ended with DELETE")
                }
                Ok(Err(error)) => {
                    tracing::debug!(error = %describe(&error), "DELETE of the session failed")
                }
                Err(_) => tracing::debug!("DELETE of the session took more than 1 s"),
            }
        });
    }
}

impl Drop for HttpWire {
    fn drop(&mut self) {
        self.inner.ct.cancel();
    }
}

/// `Bearer TOKEN`, marked sensitive so it never shows in debug output.
fn bearer_value(token: &str) -> Result<HeaderValue, Failure> {
    let mut value =
        HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| Failure::Unauthorized {
            message: "the access token is not a valid header value; sign in again".into(),
        })?;
    value.set_sensitive(true);
    Ok(value)
}

// === impl Inner ===

/// How a GET for an event stream turned out.
enum Opened {
    Stream(Response),
    /// The server offers no stream here (405, a lost session, not an event stream): stop.
    NotOffered(String),
    /// Worth another try later.
    Failed(String),
    Cancelled,
}

/// Why reading an event stream stopped.
enum StreamEnd {
    /// The answer to the stream's request came.
    Answered,
    /// The stream ended (cleanly, or `Broken`) before any answer.
    Ended,
    Broken(String),
    /// The wire was closed, or the peer is gone.
    Stopped,
}

impl Inner {
    fn sender(&self) -> Option<IncomingTx> {
        lock(&self.incoming).clone()
    }

    fn session(&self) -> Option<HeaderValue> {
        lock(&self.session).clone()
    }

    /// The configured headers, `Accept`, and the session and version once known.
    fn headers_with(&self, accept: Option<&'static str>) -> HeaderMap {
        let mut headers = self.headers.clone();
        if let Some(accept) = accept {
            headers.insert(ACCEPT, HeaderValue::from_static(accept));
        }
        if let Some(session) = self.session() {
            headers.insert(HeaderName::from_static(SESSION_ID), session);
        }
        if let Some(version) = lock(&self.protocol).clone() {
            headers.insert(HeaderName::from_static(PROTOCOL_VERSION), version);
        }
        headers
    }

    async fn post(
        self: &Arc<Self>,
        text: String,
        request: Option<u64>,
        mirrored: Vec<(String, String)>,
        tx: IncomingTx,
    ) -> Result<(), Failure> {
        let with_session = self.session().is_some();
        let mut headers = self.headers_with(Some(POST_ACCEPT));
        headers.insert(CONTENT_TYPE, HeaderValue::from_static(JSON));
        for (name, value) in mirrored {
            // Names are tokens by construction and values encoded to visible ASCII; anything
            // else is left out rather than failing the message.
            match (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_str(&value),
            ) {
                (Ok(name), Ok(value)) => {
                    headers.insert(name, value);
                }
                _ => tracing::debug!(name, "a mirrored header is not valid HTTP; left out"),
            }
        }
        let mut response = self.send_authorized(headers, text).await?;
        let status = response.status();
        if !status.is_success() {
            tracing::debug!(%status, ?request, "POST refused");
            if status == StatusCode::NOT_FOUND && with_session {
                return Err(Failure::SessionExpired);
            }
            let body = error_body(response).await;
            // A server of protocol 2026-07-28 sends some JSON-RPC errors with a 4xx status
            // (a missing client capability is 400): that is its answer to the request, not a
            // broken transport. Unless it refuses a request that carried a session in the
            // words of a stale session: that is the transport's evidence (SPEC §5).
            let stale = with_session && mentions_stale_session(&body);
            if let Some(id) = request
                && status.is_client_error()
                && !stale
                && answers(&body, id)
            {
                return match deliver(&tx, body, request).await {
                    Ok(_) => Ok(()),
                    Err(PeerGone) => Err(Failure::TransportClosedBeforeSend),
                };
            }
            return Err(Failure::HttpStatus {
                status: status.as_u16(),
                body,
                with_session,
            });
        }
        if let Some(session) = response.headers().get(SESSION_ID) {
            *lock(&self.session) = Some(session.clone());
        }
        if status == StatusCode::ACCEPTED || status == StatusCode::NO_CONTENT {
            return accepted(request);
        }
        match media_type(&response).as_deref() {
            Some(EVENT_STREAM) => {
                tokio::spawn(self.clone().follow(response, request, tx));
                Ok(())
            }
            Some(JSON) | None => {
                let body = read_json_body(&mut response).await?;
                if body.trim().is_empty() {
                    return accepted(request);
                }
                match deliver(&tx, body, request).await {
                    Ok(true) => Ok(()),
                    Ok(false) => match request {
                        None => Ok(()),
                        Some(id) => {
                            tracing::debug!(id, "JSON body without the answer to its request");
                            Err(Failure::UnexpectedResponse)
                        }
                    },
                    // The peer is gone: nobody waits for an answer.
                    Err(PeerGone) => Ok(()),
                }
            }
            Some(other) => {
                tracing::debug!(
                    content_type = other,
                    ?request,
                    "POST answered with an unknown content type"
                );
                match request {
                    None => Ok(()),
                    Some(_) => Err(Failure::TransportError {
                        message: format!(
                            "the server answered the request with content type `{other}`, \
                             neither JSON nor an event stream"
                        ),
                        connection_closed: false,
                    }),
                }
            }
        }
    }

    /// POSTs `text`, with the bearer token when the server has OAuth: a refusal (401, or 403
    /// for scope) asks for a new token and sends once more; the server ran neither.
    async fn send_authorized(&self, headers: HeaderMap, text: String) -> Result<Response, Failure> {
        let Some(auth) = &self.auth else {
            return self
                .client
                .post(self.url.clone())
                .headers(headers)
                .body(text)
                .send()
                .await
                .map_err(|e| send_failure(&e));
        };
        let mut renewed = false;
        loop {
            let mut headers = headers.clone();
            let used = auth.bearer().await?;
            if let Some(token) = &used {
                headers.insert(AUTHORIZATION, bearer_value(token)?);
            }
            let response = self
                .client
                .post(self.url.clone())
                .headers(headers)
                .body(text.clone())
                .send()
                .await
                .map_err(|e| send_failure(&e))?;
            let status = response.status();
            if status != StatusCode::UNAUTHORIZED && status != StatusCode::FORBIDDEN {
                return Ok(response);
            }
            let challenge = response
                .headers()
                .get_all(WWW_AUTHENTICATE)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .find(|v| v.to_ascii_lowercase().contains("bearer"))
                .map(str::to_string);
            if status == StatusCode::FORBIDDEN
                && !challenge
                    .as_deref()
                    .is_some_and(|c| c.contains("insufficient_scope"))
            {
                // A plain 403: not about the token.
                return Ok(response);
            }
            if renewed {
                return Err(Failure::Unauthorized {
                    message: format!(
                        "the server refused the renewed token too (HTTP {})",
                        status.as_u16()
                    ),
                });
            }
            tracing::debug!(%status, "the server refused the token; renewing");
            auth.rejected(status.as_u16(), challenge.as_deref(), used.as_deref())
                .await?;
            renewed = true;
        }
    }

    /// Reads a request's event stream (and its resumptions) until the answer to `request` came,
    /// or reports the request lost.
    async fn follow(self: Arc<Self>, response: Response, request: Option<u64>, tx: IncomingTx) {
        let mut last_event_id = None;
        let mut retry = None;
        let mut response = response;
        let mut tries = 0;
        loop {
            let (end, delivered) = self
                .read_stream(response, request, &tx, &mut last_event_id, &mut retry)
                .await;
            let why = match end {
                StreamEnd::Answered | StreamEnd::Stopped => return,
                StreamEnd::Ended => "the event stream ended".to_string(),
                StreamEnd::Broken(why) => why,
            };
            // A notification's stream has nothing to wait for.
            let Some(id) = request else {
                return;
            };
            tracing::debug!(id, %why, ?last_event_id, "request stream stopped before its answer");
            if delivered {
                tries = 0;
            }
            match self
                .resume(&mut tries, last_event_id.as_deref(), retry)
                .await
            {
                Some(resumed) => response = resumed,
                None => {
                    if !self.ct.is_cancelled() {
                        let _ = tx
                            .send(Incoming::Lost {
                                id,
                                failure: Failure::ConnectionLostAfterSend,
                            })
                            .await;
                    }
                    return;
                }
            }
        }
    }

    /// Reopens a request's stream after `last_event_id`, while tries are left. Each wait is the
    /// server's `retry` where it sent one, else ours.
    async fn resume(
        &self,
        tries: &mut usize,
        last_event_id: Option<&str>,
        retry: Option<Duration>,
    ) -> Option<Response> {
        let last_event_id = last_event_id?;
        while let Some(wait) = RESUME_BACKOFF.get(*tries) {
            *tries += 1;
            let wait = retry.unwrap_or(*wait);
            tokio::select! {
                () = self.ct.cancelled() => return None,
                () = tokio::time::sleep(wait) => {}
            }
            match self.open_stream(Some(last_event_id)).await {
                Opened::Stream(response) => return Some(response),
                Opened::Cancelled => return None,
                Opened::NotOffered(why) => {
                    tracing::debug!(%why, "the stream cannot be resumed");
                    return None;
                }
                Opened::Failed(why) => tracing::debug!(%why, try_ = *tries, "resumption failed"),
            }
        }
        None
    }

    /// Waits, at most [`GET_SETTLE_LIMIT`] and only while the wire is open, until the standalone
    /// GET has been answered. Free once it has been (or was never asked for).
    async fn settle_get(&self) {
        if !self.listening.load(Ordering::SeqCst) || *self.get_settled.borrow() {
            return;
        }
        let mut settled = self.get_settled.subscribe();
        tokio::select! {
            () = self.ct.cancelled() => {}
            _ = tokio::time::timeout(GET_SETTLE_LIMIT, settled.wait_for(|done| *done)) => {}
        }
    }

    /// The standalone GET stream: server messages not tied to a request. Reopened when it ends,
    /// a bounded number of times; its end never ends the generation.
    async fn listen(self: Arc<Self>, tx: IncomingTx) {
        let mut last_event_id: Option<String> = None;
        let mut retry = None;
        let mut failures = 0u32;
        loop {
            let opened = self.open_stream(last_event_id.as_deref()).await;
            self.get_settled.send_replace(true);
            match opened {
                Opened::Stream(response) => {
                    let (end, delivered) = self
                        .read_stream(response, None, &tx, &mut last_event_id, &mut retry)
                        .await;
                    match end {
                        StreamEnd::Stopped => return,
                        StreamEnd::Broken(why) => tracing::debug!(%why, "standalone stream broke"),
                        StreamEnd::Answered | StreamEnd::Ended => {
                            tracing::debug!("standalone stream ended")
                        }
                    }
                    if delivered {
                        failures = 0;
                    }
                }
                Opened::NotOffered(why) => {
                    tracing::debug!(%why, "no standalone event stream");
                    return;
                }
                Opened::Failed(why) => tracing::debug!(%why, "standalone stream not opened"),
                Opened::Cancelled => return,
            }
            failures += 1;
            if failures > GET_REOPENS {
                tracing::debug!("standalone stream: giving up after {GET_REOPENS} reopenings");
                return;
            }
            let wait = retry.unwrap_or_else(|| {
                GET_REOPEN_BASE
                    .saturating_mul(1 << (failures - 1).min(8))
                    .min(GET_REOPEN_MAX)
            });
            tokio::select! {
                () = self.ct.cancelled() => return,
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// GET an event stream: the standalone one, or (with `last_event_id`) a resumption.
    async fn open_stream(&self, last_event_id: Option<&str>) -> Opened {
        let mut headers = self.headers_with(Some(EVENT_STREAM));
        if let Some(id) = last_event_id {
            match HeaderValue::from_str(id) {
                Ok(value) => {
                    headers.insert(HeaderName::from_static(LAST_EVENT_ID), value);
                }
                Err(_) => {
                    return Opened::NotOffered("the last event id is not a header value".into());
                }
            }
        }
        if let Some(auth) = &self.auth {
            match auth.bearer().await {
                Ok(Some(token)) => match bearer_value(&token) {
                    Ok(value) => {
                        headers.insert(AUTHORIZATION, value);
                    }
                    Err(_) => return Opened::NotOffered("the token is not a header value".into()),
                },
                Ok(None) => {}
                Err(_) => return Opened::NotOffered("no token for the GET stream".into()),
            }
        }
        let get = self.client.get(self.url.clone()).headers(headers).send();
        let response = tokio::select! {
            () = self.ct.cancelled() => return Opened::Cancelled,
            response = tokio::time::timeout(GET_HEADERS_LIMIT, get) => response,
        };
        let response = match response {
            Ok(Ok(response)) => response,
            Ok(Err(error)) => return Opened::Failed(describe(&error)),
            Err(_) => return Opened::Failed("no answer to the GET within 10 s".into()),
        };
        let status = response.status();
        if status.is_success() {
            return match media_type(&response).as_deref() {
                Some(EVENT_STREAM) => Opened::Stream(response),
                other => {
                    Opened::NotOffered(format!("GET answered {status} with content type {other:?}"))
                }
            };
        }
        let transient = status.is_server_error()
            || matches!(
                status,
                StatusCode::REQUEST_TIMEOUT | StatusCode::CONFLICT | StatusCode::TOO_MANY_REQUESTS
            );
        if transient {
            Opened::Failed(format!("GET answered {status}"))
        } else {
            Opened::NotOffered(format!("GET answered {status}"))
        }
    }

    /// Hands every message of one event stream to the peer, related to `request`, and notes the
    /// last event id. Returns why it stopped, and whether it delivered a message. A request's
    /// stream stops at the request's answer.
    async fn read_stream(
        &self,
        response: Response,
        request: Option<u64>,
        tx: &IncomingTx,
        last_event_id: &mut Option<String>,
        retry: &mut Option<Duration>,
    ) -> (StreamEnd, bool) {
        let pending = Arc::new(AtomicUsize::new(0));
        let mut events = Box::pin(sse_events(response, pending.clone()));
        let mut delivered = false;
        loop {
            let next = tokio::select! {
                () = self.ct.cancelled() => return (StreamEnd::Stopped, delivered),
                next = events.next() => next,
            };
            let event = match next {
                None => return (StreamEnd::Ended, delivered),
                Some(Err(error)) => return (StreamEnd::Broken(describe_sse(&error)), delivered),
                Some(Ok(event)) => event,
            };
            pending.store(0, Ordering::Relaxed);
            if let Some(id) = event.id {
                *last_event_id = Some(id);
            }
            if let Some(ms) = event.retry {
                // The server's wait before a reconnection, bounded by ours.
                *retry = Some(Duration::from_millis(ms).min(MAX_SERVER_RETRY));
            }
            if !matches!(event.event.as_deref(), None | Some("message")) {
                tracing::debug!(event = ?event.event, "event of another type ignored");
                continue;
            }
            // Priming events (an id, no data) only mark where to resume.
            let Some(data) = event.data.filter(|d| !d.is_empty()) else {
                continue;
            };
            delivered = true;
            match deliver(tx, data, request).await {
                Ok(true) => return (StreamEnd::Answered, delivered),
                Ok(false) => {}
                Err(PeerGone) => return (StreamEnd::Stopped, delivered),
            }
        }
    }
}

// === helpers ===

/// A 202 (or an empty 2xx) to a POST: right for a notification or a response; a request would
/// never get its answer.
fn accepted(request: Option<u64>) -> Result<(), Failure> {
    match request {
        None => Ok(()),
        Some(id) => {
            tracing::debug!(id, "a request was accepted without an answer");
            Err(Failure::UnexpectedResponse)
        }
    }
}

/// A JSON body, at most [`MAX_JSON_BODY`] bytes.
async fn read_json_body(response: &mut Response) -> Result<String, Failure> {
    let too_large = || Failure::TransportError {
        message: format!(
            "the JSON response body exceeds {} MiB",
            MAX_JSON_BODY / (1024 * 1024)
        ),
        connection_closed: false,
    };
    if response
        .content_length()
        .is_some_and(|length| length > MAX_JSON_BODY as u64)
    {
        return Err(too_large());
    }
    let mut body = Vec::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                if body.len() + chunk.len() > MAX_JSON_BODY {
                    return Err(too_large());
                }
                body.extend_from_slice(&chunk);
            }
            Ok(None) => break,
            Err(error) => {
                return Err(Failure::TransportError {
                    message: format!("the JSON response body broke off: {}", describe(&error)),
                    connection_closed: true,
                });
            }
        }
    }
    String::from_utf8(body).map_err(|_| Failure::TransportError {
        message: "the JSON response body is not UTF-8".into(),
        connection_closed: false,
    })
}

/// The peer dropped its receiver.
struct PeerGone;

/// Hands `text` (one message, or each element of a batch array) to the peer, waiting while its
/// queue is full. Returns whether one of them is the answer to `request`.
async fn deliver(tx: &IncomingTx, text: String, request: Option<u64>) -> Result<bool, PeerGone> {
    let mut answered = false;
    let batch = if text.trim_start().starts_with('[') {
        serde_json::from_str::<Vec<&RawValue>>(&text)
            .ok()
            .map(|items| items.iter().map(|m| m.get().to_owned()).collect::<Vec<_>>())
    } else {
        None
    };
    let messages = batch.unwrap_or_else(|| vec![text]);
    for message in messages {
        if let Some(id) = request {
            answered |= answers(&message, id);
        }
        tx.send(Incoming::Message {
            text: message,
            related: request,
        })
        .await
        .map_err(|_| PeerGone)?;
    }
    Ok(answered)
}

/// A field that is there, whatever its value (even `null`).
#[derive(Default)]
struct Present(bool);

impl<'de> Deserialize<'de> for Present {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        IgnoredAny::deserialize(deserializer).map(|_| Present(true))
    }
}

/// Just enough of a JSON-RPC message to tell an answer and its id.
#[derive(Deserialize)]
struct Peek<'a> {
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(default)]
    method: Present,
    #[serde(default)]
    result: Present,
    #[serde(default)]
    error: Present,
}

/// Whether `message` is the answer (result or error) to request `id`.
fn answers(message: &str, id: u64) -> bool {
    let Ok(peek) = serde_json::from_str::<Peek<'_>>(message) else {
        return false;
    };
    !peek.method.0
        && (peek.result.0 || peek.error.0)
        && peek
            .id
            .is_some_and(|raw| serde_json::from_str::<u64>(raw.get()).ok() == Some(id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_is_told_by_its_integer_id_and_result_or_error() {
        assert!(answers(r#"{"jsonrpc":"2.0","id":7,"result":{}}"#, 7));
        assert!(answers(r#"{"jsonrpc":"2.0","id":7,"result":null}"#, 7));
        assert!(answers(
            r#"{"jsonrpc":"2.0","id":7,"error":{"code":1,"message":"x"}}"#,
            7
        ));
        assert!(!answers(r#"{"jsonrpc":"2.0","id":8,"result":{}}"#, 7));
        assert!(!answers(r#"{"jsonrpc":"2.0","id":"7","result":{}}"#, 7));
        assert!(!answers(
            r#"{"jsonrpc":"2.0","id":null,"error":{"code":1,"message":"x"}}"#,
            7
        ));
        // A server's request that reuses the number is not an answer.
        assert!(!answers(
            r#"{"jsonrpc":"2.0","id":7,"method":"ping","result":{}}"#,
            7
        ));
        assert!(!answers(
            r#"{"jsonrpc":"2.0","method":"notifications/progress"}"#,
            7
        ));
        assert!(!answers("not json", 7));
    }

    #[tokio::test]
    async fn a_batch_is_delivered_element_by_element_as_written() {
        let (tx, mut rx) = super::super::wire::incoming();
        let batch = r#"[{"jsonrpc":"2.0","method":"a"} , {"jsonrpc":"2.0","id":3,"result":{ }}]"#;
        assert!(matches!(
            deliver(&tx, batch.into(), Some(3)).await,
            Ok(true)
        ));
        let mut texts = Vec::new();
        while let Ok(Incoming::Message { text, related }) = rx.try_recv() {
            assert_eq!(related, Some(3));
            texts.push(text);
        }
        assert_eq!(
            texts,
            [
                r#"{"jsonrpc":"2.0","method":"a"}"#,
                r#"{"jsonrpc":"2.0","id":3,"result":{ }}"#
            ]
        );
    }

    #[test]
    fn reserved_and_invalid_headers_are_refused_by_name() {
        let (tx, _rx) = super::super::wire::incoming();
        let url = "http://127.0.0.1:1/mcp";
        let err = |h: &[(&str, &str)]| {
            let h: Vec<(String, String)> = h
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            HttpWire::new(url, &h, tx.clone())
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        assert!(err(&[("Mcp-Session-Id", "x")]).contains("Mcp-Session-Id"));
        assert!(err(&[("bad name", "x")]).contains("bad name"));
        assert!(err(&[("X-Token", "a\nb")]).contains("X-Token"));
        assert_eq!(err(&[("Authorization", "Bearer t")]), "");
        assert!(HttpWire::new("ftp://x/", &[], tx.clone()).is_err());
    }
}
