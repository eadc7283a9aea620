//! The MCP face over streamable HTTP (transport revisions 2025-03-26 to 2025-11-25) at `/mcp`:
//! its sessions and its routes.
//!
//! - `POST` carries one JSON-RPC message, read whole, to the message face ([`mcp_supervisor_front::proxy`]) as
//!   text. An `initialize` without a session opens one (`Mcp-Session-Id`). A request is answered
//!   as one `application/json` body while nothing related to it comes first; when something
//!   does (progress, a server's request the call caused), the answer becomes an event stream:
//!   each related message as an event, then the answer, then the end. A notification or a
//!   response gets `202`. A client that goes away mid-call drops the call, which cancels it
//!   upstream.
//! - `GET` opens the session's standalone stream: what belongs to no request. Its events carry
//!   ids; the last [`KEPT_EVENTS`] are kept, for replay after `Last-Event-ID` and for delivery
//!   once a stream opens. One at a time per session. A stream whose client does not read
//!   ends once it holds [`KEPT_EVENTS`] unread, so the client resumes it from the kept events
//!   rather than the proxy queueing without bound.
//! - `DELETE` ends a session: its calls are cancelled and its streams end.
//! - When the proxy stops (at the end of its drain window, [`crate::drain`]), a call still
//!   running is answered with the stopping error (and so cancelled upstream), and every event
//!   stream ends with a last event that carries only a `retry` hint.
//!
//! A session ends after [`SESSION_IDLE`] with no request, no call under way and no open stream.
//! - A session has at most [`SESSION_IN_FLIGHT`] requests in flight, and the face at most
//!   [`SESSIONLESS_IN_FLIGHT`] sessionless ones: past either, a request is refused at once (429
//!   with a JSON-RPC error), never queued.
//! - A client of protocol 2026-07-28 has no session: each of its POSTs is checked as that era's
//!   transport asks (`MCP-Protocol-Version` against the body's `_meta`, `Mcp-Method` and
//!   `Mcp-Name` against the body) and goes to the message face as one request of a client of its
//!   own; the answer comes as JSON (an error of that era with its HTTP status: 400 for a header
//!   mismatch, an unsupported version or malformed `_meta`, 404 for a method not found), or as
//!   an event stream when something related comes first (a subscription's notifications).
//!
//! It reads no message beyond its envelope (and, for that era, the members its headers mirror),
//! never answers in the proxy's place, and never touches the hub. It never holds a lock across an await. Who may call it (Host, Origin,
//! token) is [`crate::http`]'s to check.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot};
use tokio::task::AbortHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use mcp_supervisor::hub::SessionEnd;
use mcp_supervisor_front::proxy::{
    Client, Kind, Message as ClientMessage, OUTBOX, Proxy, SESSION_VERSIONS, STATELESS_VERSION,
    error_text, string_of,
};
use mcp_supervisor_front::seal;

use crate::drain::{Drain, STOPPING_RETRY, stopping_error};

/// A session with no request, no call under way and no open stream for this long is ended.
pub const SESSION_IDLE: Duration = Duration::from_secs(300);

/// How many ended sessions' ids are remembered, so that they answer 404 here.
const ENDED_KEPT: usize = 65_536;

/// The most sessions held at once; past it the longest idle are let go (their ids resume them).
const MAX_HELD: usize = 4096;

/// How many standalone-stream events a session keeps (for replay, and while no stream is open).
const KEPT_EVENTS: usize = 256;

/// How long a request may still take to be answered once its session has ended (its calls are
/// cancelled then, so their answers come at once).
const ENDING_GRACE: Duration = Duration::from_secs(1);

const SESSION_HEADER: &str = "mcp-session-id";
const VERSION_HEADER: &str = "mcp-protocol-version";
const LAST_EVENT_HEADER: &str = "last-event-id";
/// The largest POST body read.
const MAX_BODY: usize = 4 * 1024 * 1024;
/// The most requests one session has in flight at once (as on the stdio face). Past it a
/// request is refused at once (HTTP 429 with a JSON-RPC error) rather than held: a POST that
/// waited would hold its connection and body, and the client could not tell it from a slow
/// call; refused, it knows to wait for its answers.
const SESSION_IN_FLIGHT: usize = mcp_supervisor_front::stdio::MAX_IN_FLIGHT;
/// The most sessionless (2026-07-28) requests in flight at once over the whole face: each is a
/// client of its own, so the bound is the face's.
const SESSIONLESS_IN_FLIGHT: usize = 16 * SESSION_IN_FLIGHT;
/// The JSON-RPC error code of a request refused for a bound of requests in flight.
const TOO_MANY_IN_FLIGHT: i64 = -32000;
const METHOD_HEADER: &str = "mcp-method";
const NAME_HEADER: &str = "mcp-name";
/// The JSON-RPC error of a request whose headers do not match its body.
const HEADER_MISMATCH: i64 = -32020;
/// The reconnection delay a priming event asks a client for (SEP-1699).
const PRIMING_RETRY: std::time::Duration = std::time::Duration::from_millis(1000);
const JSON: &str = "application/json";
const EVENT_STREAM: &str = "text/event-stream";

/// How session ids are sealed and for how long they open (SPEC §12).
pub struct Sealing {
    pub keys: seal::Keys,
    /// An id older than this opens no session (`sessionMaxAgeMs`).
    pub max_age: Duration,
}

/// The `/mcp` routes' shared state.
struct McpHttp {
    proxy: Arc<Proxy>,
    sessions: Arc<Sessions>,
    /// When the proxy stops: calls still running are answered as stopping, streams end.
    drain: Drain,
    /// The largest POST body read.
    limit: usize,
    /// Numbers the event streams of sessionless requests.
    next_stream: AtomicU64,
    /// Places of the sessionless requests in flight ([`SESSIONLESS_IN_FLIGHT`]).
    sessionless: Arc<Semaphore>,
}

/// The `/mcp` routes. `shutdown` ends every session and stream; `drain` says when the proxy
/// stops.
pub fn router(
    proxy: Arc<Proxy>,
    sealing: Arc<Sealing>,
    shutdown: CancellationToken,
    drain: Drain,
) -> Router {
    let sessions = Sessions::new(proxy.clone(), sealing, shutdown);
    sessions.spawn_expiry(SESSION_IDLE);
    let face = Arc::new(McpHttp {
        proxy,
        sessions,
        drain,
        limit: MAX_BODY,
        next_stream: AtomicU64::new(1),
        sessionless: Arc::new(Semaphore::new(SESSIONLESS_IN_FLIGHT)),
    });
    Router::new()
        .route("/mcp", get(open_stream).post(post).delete(delete))
        .with_state(face)
}

// === Routes ===

async fn post(State(face): State<Arc<McpHttp>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    if !(accepts(&parts.headers, JSON) && accepts(&parts.headers, EVENT_STREAM)) {
        return refuse(
            StatusCode::NOT_ACCEPTABLE,
            "Not Acceptable: the client must accept both application/json and text/event-stream",
        );
    }
    if !is_json_body(&parts.headers) {
        return refuse(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "Unsupported Media Type: Content-Type must be application/json",
        );
    }
    let bytes = match read_body(body, face.limit).await {
        Ok(bytes) => bytes,
        Err((status, why)) => return refuse(status, &why),
    };
    let Ok(text) = std::str::from_utf8(&bytes) else {
        return rejected(error_text(
            None,
            -32700,
            "Parse error: the request body is not UTF-8",
        ));
    };
    // The envelope is read here, once: everything after takes its parts from `message`.
    let message = match ClientMessage::read(text) {
        Ok(message) => message,
        Err(answer) => return rejected(answer),
    };
    match session_id(&parts.headers) {
        SessionId::Unreadable => unreadable_session(),
        SessionId::Given(id) => {
            let Some(session) = face.sessions.get_or_resume(id) else {
                return session_not_found();
            };
            if let Some(response) = version_refused(&parts.headers) {
                return response;
            }
            session.touch();
            match message.kind() {
                Kind::Request { .. } => {
                    face.call(&session, message, stream_first(&parts.headers))
                        .await
                }
                // An answer to a server's request that this process did not send or no longer
                // waits for (the session moved to this replica after the request was sent):
                // refused, said so, never silently dropped.
                Kind::Response
                    if !message.id().is_some_and(|id| session.client.waits_for(id)) =>
                {
                    (
                        StatusCode::CONFLICT,
                        [(header::CONTENT_TYPE, JSON)],
                        error_text(
                            None,
                            -32600,
                            "this answers a server request that this replica is not waiting for: it was sent by another replica of the service (the session moved), or it was already answered or timed out; the server's request fails there, so retry the call that caused it",
                        ),
                    )
                        .into_response()
                }
                _ => {
                    // A notification, or the client's answer to a server's request.
                    let _ = face.proxy.handle_message(&session.client, &message, None).await;
                    StatusCode::ACCEPTED.into_response()
                }
            }
        }
        SessionId::Missing => match message.kind() {
            // Protocol 2026-07-28 removed `initialize`: a client that speaks it (by its header)
            // gets "method not found", as the spec asks of a server without the method.
            Kind::Request { method }
                if method == "initialize" && sessionless_version(&parts.headers) =>
            {
                (
                    StatusCode::NOT_FOUND,
                    [(header::CONTENT_TYPE, JSON)],
                    error_text(
                        message.id(),
                        -32601,
                        "Method not found: initialize was removed in protocol 2026-07-28; use server/discover",
                    ),
                )
                    .into_response()
            }
            Kind::Request { method } if method == "initialize" => face.initialize(&message).await,
            _ if message.is_sessionless() || sessionless_version(&parts.headers) => {
                face.stateless(&parts.headers, message).await
            }
            _ => session_required(),
        },
    }
}

async fn open_stream(State(face): State<Arc<McpHttp>>, request: Request) -> Response {
    let (parts, _) = request.into_parts();
    if parts.method == axum::http::Method::HEAD {
        // axum routes HEAD to GET: a stream whose body is never read would swallow events.
        return (
            StatusCode::METHOD_NOT_ALLOWED,
            [(header::ALLOW, "GET, POST, DELETE")],
        )
            .into_response();
    }
    if !accepts(&parts.headers, EVENT_STREAM) {
        return refuse(
            StatusCode::NOT_ACCEPTABLE,
            "Not Acceptable: the client must accept text/event-stream",
        );
    }
    let session = match session_id(&parts.headers) {
        SessionId::Unreadable => return unreadable_session(),
        // That era has no standalone stream: its notifications ride `subscriptions/listen`.
        SessionId::Missing if sessionless_version(&parts.headers) => {
            return (StatusCode::METHOD_NOT_ALLOWED, [(header::ALLOW, "POST")]).into_response();
        }
        SessionId::Missing => return session_required(),
        SessionId::Given(id) => match face.sessions.get_or_resume(id) {
            Some(session) => session,
            None => return session_not_found(),
        },
    };
    if let Some(response) = version_refused(&parts.headers) {
        return response;
    }
    session.touch();
    let last = parts
        .headers
        .get(LAST_EVENT_HEADER)
        .and_then(|v| v.to_str().ok());
    let Some((replay, live)) = session.attach(last) else {
        return refuse(
            StatusCode::CONFLICT,
            "Conflict: this session's stream is already open (one GET stream at a time; resume a lost one with Last-Event-ID)",
        );
    };
    let held = session.hold();
    let live = futures::stream::unfold(live, |mut live| async move {
        live.recv().await.map(|event| (event, live))
    });
    let events = futures::stream::iter(replay)
        .chain(live)
        .map(move |(id, text)| {
            let _held = &held;
            Ok::<_, Infallible>(message_event(id.to_string(), &text))
        })
        .take_until(session.ended.clone().cancelled_owned())
        .take_until(face.drain.stopping().clone().cancelled_owned())
        .chain(stopping_hint(face.drain.clone()));
    Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response()
}

async fn delete(State(face): State<Arc<McpHttp>>, headers: HeaderMap) -> Response {
    match session_id(&headers) {
        SessionId::Unreadable => unreadable_session(),
        SessionId::Missing => session_required(),
        SessionId::Given(id) => {
            if let Some(response) = version_refused(&headers) {
                return response;
            }
            if face.sessions.end(id) {
                StatusCode::OK.into_response()
            } else {
                session_not_found()
            }
        }
    }
}

impl McpHttp {
    /// `initialize` without a session: a new client; a session for it once its answer is not an
    /// error (a refused `initialize` opens none: 400 with the error).
    async fn initialize(&self, message: &ClientMessage) -> Response {
        let (out, messages) = mpsc::channel(OUTBOX);
        let client = self.proxy.connect(out);
        let mut opening = Opening {
            proxy: &self.proxy,
            client: Some(client.clone()),
        };
        let answer = self.proxy.handle_message(&client, message, None).await;
        let Some(answer) = answer else {
            return refuse(
                StatusCode::INTERNAL_SERVER_ERROR,
                "initialize was not answered",
            );
        };
        if is_error_answer(&answer) {
            return (
                StatusCode::BAD_REQUEST,
                [(header::CONTENT_TYPE, JSON)],
                answer,
            )
                .into_response();
        }
        opening.client = None;
        let session = self.sessions.open_new(client, messages);
        tracing::debug!(session = %short(&session.id), "session opened");
        (
            StatusCode::OK,
            [
                (header::CONTENT_TYPE.as_str(), JSON.to_string()),
                (SESSION_HEADER, session.id.clone()),
            ],
            answer,
        )
            .into_response()
    }

    /// A request on a session, handled in a task of its own: its answer as JSON while nothing
    /// related comes first, else an event stream. Dropping the response (the client went away)
    /// aborts the task, which cancels the call upstream.
    async fn call(
        &self,
        session: &Arc<Session>,
        message: ClientMessage,
        stream_first: bool,
    ) -> Response {
        let id = message.id().map(ToOwned::to_owned);
        let Ok(place) = session.in_flight.clone().try_acquire_owned() else {
            return too_many_in_flight(
                id.as_deref(),
                &format!("this session has {SESSION_IN_FLIGHT} requests unanswered"),
            );
        };
        let (related_tx, related) = mpsc::channel(OUTBOX);
        let (answer_tx, answer_rx) = oneshot::channel();
        let task = tokio::spawn({
            let (proxy, client) = (self.proxy.clone(), session.client.clone());
            let (stopping, id) = (self.drain.stopping().clone(), id.clone());
            async move {
                let handled = proxy.handle_message(&client, &message, Some(related_tx));
                let answer = until_stopping(handled, &stopping, id.as_deref()).await;
                let _ = answer_tx.send(answer);
            }
        });
        let call = Call {
            task: task.abort_handle(),
            _held: Some(session.hold()),
            _place: place,
        };
        let ended = session.ended.clone();
        let answer = async move {
            let ending = async {
                ended.cancelled().await;
                tokio::time::sleep(ENDING_GRACE).await;
            };
            let not_answered = |why: &str| Some(error_text(id.as_deref(), -32603, why));
            tokio::select! {
                biased;
                // `None`: its client cancelled it, and it gets no answer.
                answer = answer_rx => answer.unwrap_or_else(|_| not_answered("the request was not answered")),
                () = ending => not_answered("the session ended before the request was answered"),
            }
        }
        .boxed();
        let mut messages = CallMessages {
            pending: VecDeque::new(),
            related: Some(related),
            answer: Some(answer),
            _call: call,
        };
        // A client that puts the event stream first in `Accept` gets one from the start, opened
        // with a priming event (an id, the reconnection delay, no data: SEP-1699); any other
        // gets JSON unless something related to the request comes before its answer.
        let first = if stream_first {
            None
        } else {
            match messages.next().await {
                Some(Message::Answer(answer)) => {
                    return (StatusCode::OK, [(header::CONTENT_TYPE, JSON)], answer)
                        .into_response();
                }
                Some(related) => Some(related),
                // Its client cancelled it before anything came: an event stream that ends
                // without an answer (the client expects none).
                None => None,
            }
        };
        let stream = session.next_stream.fetch_add(1, Ordering::Relaxed);
        event_stream(stream, first, messages, true, &self.drain)
    }

    /// A request of protocol 2026-07-28 (no session): checked against its headers, then
    /// handled as the one request of a client of its own. A notification or a response has
    /// nothing to go to (no request of that client is open): 202.
    async fn stateless(&self, headers: &HeaderMap, message: ClientMessage) -> Response {
        let Kind::Request { method } = message.kind().clone() else {
            return StatusCode::ACCEPTED.into_response();
        };
        let id = message.id().map(ToOwned::to_owned);
        let meta = stateless_meta(message.params());
        if let Some(refused) = stateless_refused(headers, &method, &meta, id.as_deref()) {
            return refused;
        }
        let Ok(place) = self.sessionless.clone().try_acquire_owned() else {
            return too_many_in_flight(
                id.as_deref(),
                &format!("{SESSIONLESS_IN_FLIGHT} requests without a session are unanswered"),
            );
        };
        let (out, _unrelated) = mpsc::channel(OUTBOX);
        let client = self.proxy.connect(out);
        client.set_stateless();
        let (related_tx, related) = mpsc::channel(OUTBOX);
        let (answer_tx, answer_rx) = oneshot::channel();
        let task = tokio::spawn({
            let proxy = self.proxy.clone();
            let (stopping, id) = (self.drain.stopping().clone(), id.clone());
            async move {
                let handled = proxy.handle_message(&client, &message, Some(related_tx));
                let answer = until_stopping(handled, &stopping, id.as_deref()).await;
                proxy.disconnect(&client);
                let _ = answer_tx.send(answer);
            }
        });
        let answer = async move {
            Some(answer_rx.await.ok().flatten().unwrap_or_else(|| {
                error_text(id.as_deref(), -32603, "the request was not answered")
            }))
        }
        .boxed();
        let mut messages = CallMessages {
            pending: VecDeque::new(),
            related: Some(related),
            answer: Some(answer),
            _call: Call {
                task: task.abort_handle(),
                _held: None,
                _place: place,
            },
        };
        let first = match messages.next().await {
            Some(Message::Answer(answer)) => {
                // An error of that era's own (a refusal) as JSON with its status; any other
                // answer as an event stream, as a server of that era sends it.
                let status = stateless_status(&answer, meta.malformed());
                if status != StatusCode::OK {
                    return (status, [(header::CONTENT_TYPE, JSON)], answer).into_response();
                }
                Message::Answer(answer)
            }
            Some(related) => related,
            None => {
                return refuse(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "the request was not answered",
                );
            }
        };
        let stream = self.next_stream.fetch_add(1, Ordering::Relaxed);
        event_stream(stream, Some(first), messages, false, &self.drain)
    }
}

/// A request's messages as an event stream, each with id `STREAM/N`: `first` and the rest,
/// after a priming event when `priming` (an id, the reconnection delay, no data: SEP-1699; a
/// request of a session may be resumed, one of protocol 2026-07-28 is not). One cut short by the
/// proxy's stop (its answer is then the stopping error) ends with the stopping hint.
fn event_stream(
    stream: u64,
    first: Option<Message>,
    messages: CallMessages,
    priming: bool,
    drain: &Drain,
) -> Response {
    let priming = priming.then(|| {
        Event::default()
            .id(format!("{stream}/p"))
            .retry(PRIMING_RETRY)
            .data("")
    });
    let events = futures::stream::unfold(
        (first, messages, 0u64),
        move |(first, mut messages, n)| async move {
            let message = match first {
                Some(message) => message,
                None => messages.next().await?,
            };
            let (Message::Related(text) | Message::Answer(text)) = message;
            let event = message_event(format!("{stream}/{n}"), &text);
            Some((Ok::<_, Infallible>(event), (None, messages, n + 1)))
        },
    );
    let events = futures::stream::iter(priming.map(Ok))
        .chain(events)
        .chain(stopping_hint(drain.clone()));
    Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// A request's handling, unless the proxy stops first: then it is dropped on the spot (which
/// cancels it upstream, before the stop closes the servers) and the answer is the stopping error.
/// The stop is looked at first: the sessions end right after it, and a call cut short by that
/// must still say that the proxy stops.
async fn until_stopping(
    handled: impl std::future::Future<Output = Option<String>>,
    stopping: &CancellationToken,
    id: Option<&RawValue>,
) -> Option<String> {
    tokio::select! {
        biased;
        () = stopping.cancelled() => Some(stopping_error(id)),
        answer = handled => answer,
    }
}

/// The last event of a stream that ends because the proxy stops: no data, only the delay
/// before the client reconnects (by then to another replica). Nothing for a stream that ended
/// otherwise.
fn stopping_hint(
    drain: Drain,
) -> impl futures::Stream<Item = Result<Event, Infallible>> + Send + 'static {
    futures::stream::once(async move {
        drain
            .is_stopping()
            .then(|| Ok(Event::default().comment("stopping").retry(STOPPING_RETRY)))
    })
    .filter_map(std::future::ready)
}

/// A client whose `initialize` is under way: disconnected if it opens no session (refused, or
/// the POST dropped).
struct Opening<'a> {
    proxy: &'a Arc<Proxy>,
    client: Option<Arc<Client>>,
}

impl Drop for Opening<'_> {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            self.proxy.disconnect(&client);
        }
    }
}

/// A request's task: aborted when dropped (a no-op once it has ended); keeps its session alive.
struct Call {
    task: AbortHandle,
    _held: Option<Hold>,
    /// Its place among the requests in flight, given back when the call is over.
    _place: OwnedSemaphorePermit,
}

impl Drop for Call {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What a request's response carries, in order.
enum Message {
    Related(String),
    Answer(String),
}

/// The messages of one request: the related ones as they come, then the answer, then none.
struct CallMessages {
    pending: VecDeque<Message>,
    /// `None` once closed (after the answer) or once every sender is gone.
    related: Option<mpsc::Receiver<String>>,
    /// `None` once the answer is queued.
    /// Its text resolves `None` for a request its client cancelled: the stream ends without one.
    answer: Option<BoxFuture<'static, Option<String>>>,
    _call: Call,
}

impl CallMessages {
    async fn next(&mut self) -> Option<Message> {
        loop {
            if let Some(message) = self.pending.pop_front() {
                return Some(message);
            }
            let Self {
                pending,
                related,
                answer,
                ..
            } = self;
            let waiting = answer.as_mut()?;
            tokio::select! {
                // The answer first: what came before it is drained, in order, ahead of it.
                biased;
                text = waiting => {
                    *answer = None;
                    if let Some(mut receiver) = related.take() {
                        // Closed first: what relates to the request from now on goes to the
                        // session's own stream instead.
                        receiver.close();
                        while let Ok(message) = receiver.try_recv() {
                            pending.push_back(Message::Related(message));
                        }
                    }
                    if let Some(text) = text {
                        pending.push_back(Message::Answer(text));
                    }
                }
                message = recv(related) => match message {
                    Some(message) => return Some(Message::Related(message)),
                    None => *related = None,
                },
            }
        }
    }
}

/// The next message of a receiver that may be gone (then never).
async fn recv(receiver: &mut Option<mpsc::Receiver<String>>) -> Option<String> {
    match receiver {
        Some(receiver) => receiver.recv().await,
        None => std::future::pending().await,
    }
}

// === Sessions ===

/// Every open session, by id.
struct Sessions {
    proxy: Arc<Proxy>,
    sealing: Arc<Sealing>,
    map: Mutex<HashMap<String, Arc<Session>>>,
    /// Sessions a client ended here (DELETE), so that their ids are not resumed: the last
    /// [`ENDED_KEPT`] of them, by a keyed hash of the id.
    ended: Mutex<Ended>,
    /// Ends every session (each one's `ended` is a child of it).
    shutdown: CancellationToken,
}

/// One client's session.
struct Session {
    id: String,
    /// When its id was sealed (ms since the epoch).
    issued_ms: u64,
    client: Arc<Client>,
    /// Cancelled when the session ends (DELETE, expiry, shutdown): its streams end.
    ended: CancellationToken,
    events: Mutex<Events>,
    activity: Mutex<Activity>,
    /// Numbers the event streams of its POSTs (their event ids are `STREAM/N`).
    next_stream: AtomicU64,
    /// Places of its requests in flight ([`SESSION_IN_FLIGHT`]).
    in_flight: Arc<Semaphore>,
}

/// The session's standalone stream: ids `1, 2, …`, the last [`KEPT_EVENTS`] of them kept.
struct Events {
    next: u64,
    kept: VecDeque<(u64, Arc<str>)>,
    /// The highest id handed to a GET stream.
    delivered: u64,
    /// The open stream's queue, bounded at [`KEPT_EVENTS`].
    stream: Option<mpsc::Sender<(u64, Arc<str>)>>,
}

/// When the session was last used, and how many calls and streams keep it alive.
struct Activity {
    last: Instant,
    holds: usize,
}

impl Sessions {
    fn new(proxy: Arc<Proxy>, sealing: Arc<Sealing>, shutdown: CancellationToken) -> Arc<Self> {
        Arc::new(Self {
            proxy,
            sealing,
            map: Mutex::new(HashMap::new()),
            ended: Mutex::new(Ended::default()),
            shutdown,
        })
    }

    /// The session of `id`: held here, or resumed from the id's seal (opened elsewhere, or
    /// let go here). `None` for an id that is not ours or is past its maximum age (each
    /// counted). An id whose session was ended (DELETE) is resumed if it comes again: ending
    /// it on every replica would need a store they share, and the client chose to end it.
    fn get_or_resume(&self, id: &str) -> Option<Arc<Session>> {
        let now = seal::now_ms();
        if lock(&self.ended).contains(id) {
            return None;
        }
        let held = lock(&self.map).get(id).cloned();
        if let Some(session) = held {
            let age = now.saturating_sub(session.issued_ms);
            if u128::from(age) <= self.sealing.max_age.as_millis() {
                return Some(session);
            }
            tracing::info!(session = %short(&session.id), "ending a session past its maximum age");
            self.close(id, SessionEnd::Ended);
            self.metrics()
                .sessions_expired
                .fetch_add(1, Ordering::Relaxed);
            return None;
        }
        match self.sealing.keys.open(id, now, self.sealing.max_age) {
            Ok((sealed, issued_ms)) => {
                let (out, messages) = mpsc::channel(OUTBOX);
                let client = self.proxy.resume(out, sealed);
                let session = self.open(id.to_string(), issued_ms, client, messages);
                self.metrics()
                    .sessions_resumed
                    .fetch_add(1, Ordering::Relaxed);
                tracing::info!(session = %short(id), "resumed a session from its sealed id");
                Some(session)
            }
            Err(seal::Refused::Expired) => {
                self.metrics()
                    .sessions_expired
                    .fetch_add(1, Ordering::Relaxed);
                None
            }
            Err(seal::Refused::Forged) => {
                self.metrics()
                    .sessions_forged
                    .fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    fn metrics(&self) -> &mcp_supervisor_front::metrics::Metrics {
        self.proxy.metrics()
    }

    /// A new session for `client` (its `initialize` was just answered). Its id seals what that
    /// `initialize` fixed, so any replica with the key resumes it; failing that (a client with
    /// nothing fixed, or the crypto library failing), a random UUID only this process knows.
    fn open_new(&self, client: Arc<Client>, messages: mpsc::Receiver<String>) -> Arc<Session> {
        let now = seal::now_ms();
        let sealed = client
            .session()
            .and_then(|fixed| self.sealing.keys.seal(&fixed, now));
        let id = sealed.unwrap_or_else(|| {
            tracing::warn!(
                "could not seal a session id; this session cannot move to another replica"
            );
            uuid::Uuid::new_v4().to_string()
        });
        self.open(id, now, client, messages)
    }

    /// The session `id` for `client`, whose messages for no request arrive on `messages`; if a
    /// request resumed the same id at the same moment, that one (and `client` is let go).
    fn open(
        &self,
        id: String,
        issued_ms: u64,
        client: Arc<Client>,
        mut messages: mpsc::Receiver<String>,
    ) -> Arc<Session> {
        let session = Arc::new(Session {
            id,
            issued_ms,
            client,
            ended: self.shutdown.child_token(),
            events: Mutex::new(Events {
                next: 1,
                kept: VecDeque::new(),
                delivered: 0,
                stream: None,
            }),
            activity: Mutex::new(Activity {
                last: Instant::now(),
                holds: 0,
            }),
            next_stream: AtomicU64::new(1),
            in_flight: Arc::new(Semaphore::new(SESSION_IN_FLIGHT)),
        });
        self.make_room();
        {
            let mut map = lock(&self.map);
            if let Some(existing) = map.get(&session.id).cloned() {
                drop(map);
                // Resumed twice at once: the other one holds its upstream sessions.
                self.proxy.let_go(&session.client);
                return existing;
            }
            map.insert(session.id.clone(), session.clone());
        }
        let pump = session.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    message = messages.recv() => match message {
                        Some(message) => pump.push(message),
                        None => return,
                    },
                    () = pump.ended.cancelled() => return,
                }
            }
        });
        session
    }

    /// A client ends session `id` (DELETE), held here or not: it is ended, and its id opens
    /// nothing here any more. False when the id opens no session.
    fn end(&self, id: &str) -> bool {
        if self.get_or_resume(id).is_none() {
            return false;
        }
        lock(&self.ended).insert(id);
        self.close(id, SessionEnd::Ended)
    }

    /// End session `id` here: its calls are cancelled, the servers' requests waiting for it
    /// get an error, its streams end. Ended by its client, its upstream sessions end too; let
    /// go of (evicted, idle, stopping), they stay for its sealed id to resume. False when there
    /// is no such session.
    fn close(&self, id: &str, how: SessionEnd) -> bool {
        let Some(session) = lock(&self.map).remove(id) else {
            return false;
        };
        tracing::debug!(session = %short(&session.id), ?how, "session closed here; its calls are cancelled");
        session.ended.cancel();
        self.proxy.forget(&session.client, how);
        true
    }

    /// With [`MAX_HELD`] sessions held, let go of the eighth of them idle the longest (no call
    /// under way, no open stream): a sealed id resumes its session when it comes again, so the
    /// map is a bounded cache and memory stays flat however many clients come.
    fn make_room(&self) {
        let now = Instant::now();
        let oldest: Vec<String> = {
            let map = lock(&self.map);
            if map.len() < MAX_HELD {
                return;
            }
            let mut idle: Vec<(Duration, &String)> = map
                .iter()
                .filter_map(|(id, s)| s.idle_since(now).map(|d| (d, id)))
                .collect();
            idle.sort_unstable_by_key(|(d, _)| std::cmp::Reverse(*d));
            idle.into_iter()
                .take(MAX_HELD / 8)
                .map(|(_, id)| id.clone())
                .collect()
        };
        tracing::debug!(
            "letting go of {} idle sessions to keep at most {MAX_HELD}",
            oldest.len()
        );
        for id in oldest {
            self.close(&id, SessionEnd::LetGo);
        }
    }

    /// End every session idle for `idle`. Returns how many were ended.
    fn expire_idle(&self, idle: Duration) -> usize {
        let now = Instant::now();
        let idle_ones: Vec<String> = lock(&self.map)
            .values()
            .filter(|s| s.idle_since(now).is_some_and(|d| d >= idle))
            .map(|s| s.id.clone())
            .collect();
        let mut ended = 0;
        for id in idle_ones {
            tracing::info!(session = %short(&id), "ending a session idle for {} s", idle.as_secs());
            ended += usize::from(self.close(&id, SessionEnd::LetGo));
        }
        ended
    }

    /// Run [`Sessions::expire_idle`] every tenth of `idle`; at shutdown end every session.
    fn spawn_expiry(self: &Arc<Self>, idle: Duration) {
        let sessions = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(idle / 10);
            loop {
                tokio::select! {
                    _ = tick.tick() => { sessions.expire_idle(idle); }
                    () = sessions.shutdown.cancelled() => break,
                }
            }
            let ids: Vec<String> = lock(&sessions.map).keys().cloned().collect();
            for id in ids {
                sessions.close(&id, SessionEnd::LetGo);
            }
        });
    }
}

impl Session {
    /// A request on the session.
    fn touch(&self) {
        lock(&self.activity).last = Instant::now();
    }

    /// Keep the session from expiring while the returned guard lives (a call or a stream).
    fn hold(self: &Arc<Self>) -> Hold {
        lock(&self.activity).holds += 1;
        Hold(self.clone())
    }

    /// How long the session has been idle at `now`; `None` while a call or a stream holds it.
    fn idle_since(&self, now: Instant) -> Option<Duration> {
        let activity = lock(&self.activity);
        (activity.holds == 0).then(|| now.saturating_duration_since(activity.last))
    }

    /// A message for the standalone stream: kept, and sent on when a stream is open.
    fn push(&self, text: String) {
        let mut events = lock(&self.events);
        let id = events.next;
        events.next += 1;
        let text: Arc<str> = text.into();
        events.kept.push_back((id, text.clone()));
        if events.kept.len() > KEPT_EVENTS {
            events.kept.pop_front();
        }
        if let Some(stream) = &events.stream {
            match stream.try_send((id, text)) {
                Ok(()) => events.delivered = id,
                Err(mpsc::error::TrySendError::Full(_)) => {
                    // Its client does not read: the stream ends after what it holds, and the
                    // client resumes it with `Last-Event-ID`, from the kept events, which still
                    // hold this one and everything after what the stream held.
                    tracing::debug!(id, "the standalone stream is not read: it ends, to resume");
                    events.stream = None;
                }
                Err(mpsc::error::TrySendError::Closed(_)) => events.stream = None,
            }
        }
    }

    /// Open the standalone stream: the kept events after `last_event_id` (one of ours), or, without
    /// one, those no stream has had yet; then the live ones. `None` while another is open, unless
    /// this one resumes (`Last-Event-ID`): a client resumes a stream it lost, which the server may
    /// not have noticed yet, so the old one ends.
    #[allow(clippy::type_complexity)]
    fn attach(
        &self,
        last_event_id: Option<&str>,
    ) -> Option<(Vec<(u64, Arc<str>)>, mpsc::Receiver<(u64, Arc<str>)>)> {
        let mut events = lock(&self.events);
        if last_event_id.is_none() && events.stream.as_ref().is_some_and(|s| !s.is_closed()) {
            return None;
        }
        let after = last_event_id
            .and_then(|id| id.trim().parse::<u64>().ok())
            .filter(|id| *id < events.next)
            .unwrap_or(events.delivered);
        let replay: Vec<_> = events
            .kept
            .iter()
            .filter(|(id, _)| *id > after)
            .cloned()
            .collect();
        if let Some((id, _)) = replay.last() {
            events.delivered = events.delivered.max(*id);
        }
        let (tx, rx) = mpsc::channel(KEPT_EVENTS);
        events.stream = Some(tx);
        Some((replay, rx))
    }
}

/// Ids of sessions ended by their client, as keyed hashes (8 bytes each, whatever the id's
/// length), the oldest forgotten past [`ENDED_KEPT`].
struct Ended {
    hasher: std::collections::hash_map::RandomState,
    set: std::collections::HashSet<u64>,
    order: VecDeque<u64>,
}

impl Default for Ended {
    fn default() -> Self {
        Self {
            hasher: std::collections::hash_map::RandomState::new(),
            set: std::collections::HashSet::new(),
            order: VecDeque::new(),
        }
    }
}

impl Ended {
    fn key(&self, id: &str) -> u64 {
        use std::hash::BuildHasher;
        self.hasher.hash_one(id)
    }

    fn contains(&self, id: &str) -> bool {
        self.set.contains(&self.key(id))
    }

    fn insert(&mut self, id: &str) {
        let key = self.key(id);
        if self.set.insert(key) {
            self.order.push_back(key);
        }
        while self.order.len() > ENDED_KEPT {
            if let Some(old) = self.order.pop_front() {
                self.set.remove(&old);
            }
        }
    }
}

/// Keeps a session from expiring; when dropped, its idle clock starts again.
struct Hold(Arc<Session>);

impl Drop for Hold {
    fn drop(&mut self) {
        let mut activity = lock(&self.0.activity);
        activity.holds = activity.holds.saturating_sub(1);
        activity.last = Instant::now();
    }
}

// === Small helpers ===

/// The start of a session id, for logs (a sealed id is a few hundred characters).
fn short(id: &str) -> String {
    match id.char_indices().nth(16) {
        Some((at, _)) => format!("{}…", &id[..at]),
        None => id.to_string(),
    }
}

/// The `Mcp-Session-Id` header.
enum SessionId<'h> {
    Missing,
    Unreadable,
    Given(&'h str),
}

fn session_id(headers: &HeaderMap) -> SessionId<'_> {
    match headers.get(SESSION_HEADER).map(|v| v.to_str()) {
        None => SessionId::Missing,
        Some(Ok(id)) => SessionId::Given(id),
        Some(Err(_)) => SessionId::Unreadable,
    }
}

/// A session's `MCP-Protocol-Version`, when given, must be one that has sessions: 400 if not.
fn version_refused(headers: &HeaderMap) -> Option<Response> {
    let value = headers.get(VERSION_HEADER)?;
    match value.to_str() {
        Ok(version) if SESSION_VERSIONS.contains(&version) => None,
        Ok(version) => Some(refuse(
            StatusCode::BAD_REQUEST,
            &format!(
                "Bad Request: unsupported MCP-Protocol-Version {version:?} for a session (supported: {})",
                SESSION_VERSIONS.join(", ")
            ),
        )),
        Err(_) => Some(refuse(
            StatusCode::BAD_REQUEST,
            "Bad Request: the MCP-Protocol-Version header is not visible ASCII",
        )),
    }
}

/// Whether the request names a protocol version without sessions (2026-07-28 and later).
fn sessionless_version(headers: &HeaderMap) -> bool {
    headers
        .get(VERSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v >= STATELESS_VERSION)
}

/// What a sessionless request's body says that its headers must match.
#[derive(Default)]
struct StatelessMeta {
    /// `_meta`'s protocol version, when it is a string.
    version: Option<String>,
    /// Whether `_meta` has client capabilities (an object).
    capabilities: bool,
    /// `params.name` (or `params.uri` for `resources/read`), for `Mcp-Name`.
    name: Option<String>,
    uri: Option<String>,
}

impl StatelessMeta {
    fn malformed(&self) -> bool {
        self.version.is_none() || !self.capabilities
    }
}

/// What a sessionless request's params say of it, read from the params alone (the envelope was
/// read once already): members other than these are skipped, never built.
fn stateless_meta(params: Option<&RawValue>) -> StatelessMeta {
    #[derive(Deserialize)]
    struct Meta<'a> {
        #[serde(rename = "io.modelcontextprotocol/protocolVersion", borrow, default)]
        version: Option<&'a RawValue>,
        #[serde(rename = "io.modelcontextprotocol/clientCapabilities", borrow, default)]
        capabilities: Option<&'a RawValue>,
    }
    #[derive(Deserialize)]
    struct Params<'a> {
        #[serde(rename = "_meta", borrow, default)]
        meta: Option<Meta<'a>>,
        #[serde(borrow, default)]
        name: Option<&'a RawValue>,
        #[serde(borrow, default)]
        uri: Option<&'a RawValue>,
    }
    let Some(params) = params.and_then(|p| serde_json::from_str::<Params<'_>>(p.get()).ok()) else {
        return StatelessMeta::default();
    };
    let as_string = |v: Option<&RawValue>| v.and_then(string_of);
    let (version, capabilities) = match params.meta {
        Some(meta) => (
            as_string(meta.version),
            meta.capabilities.is_some_and(|c| c.get().starts_with('{')),
        ),
        None => (None, false),
    };
    StatelessMeta {
        version,
        capabilities,
        name: as_string(params.name),
        uri: as_string(params.uri),
    }
}

/// The refusal of a sessionless request whose headers do not agree with its body, as that
/// era's transport has it: an `MCP-Protocol-Version` no revision has (400, unless the body
/// names its own version), `Mcp-Method` and `Mcp-Name` that are missing or differ from the
/// body (400, -32020), a `_meta` without a protocol version where one is required (400,
/// -32602), and a header version that differs from the body's (400, -32020).
fn stateless_refused(
    headers: &HeaderMap,
    method: &str,
    meta: &StatelessMeta,
    id: Option<&RawValue>,
) -> Option<Response> {
    let error = |status: StatusCode, code: i64, message: &str| {
        Some(
            (
                status,
                [(header::CONTENT_TYPE, JSON)],
                error_text(id, code, message),
            )
                .into_response(),
        )
    };
    let version = match headers.get(VERSION_HEADER).map(|v| v.to_str()) {
        Some(Err(_)) => {
            return Some(refuse(
                StatusCode::BAD_REQUEST,
                "Bad Request: Invalid MCP-Protocol-Version header encoding",
            ));
        }
        Some(Ok(version)) => Some(version),
        None => None,
    };
    if let Some(version) = version
        && meta.version.is_none()
        && version != STATELESS_VERSION
        && !SESSION_VERSIONS.contains(&version)
    {
        return Some(refuse(
            StatusCode::BAD_REQUEST,
            &format!("Bad Request: Unsupported MCP-Protocol-Version: {version}"),
        ));
    }
    if version.is_some_and(|v| v >= STATELESS_VERSION) {
        let single = |name: &str| -> Result<Option<&str>, String> {
            let mut values = headers.get_all(name).iter();
            let Some(value) = values.next() else {
                return Ok(None);
            };
            if values.next().is_some() {
                return Err(format!("duplicate {name} header"));
            }
            value
                .to_str()
                .map(Some)
                .map_err(|_| format!("{name} header contains invalid characters"))
        };
        let mismatch = match single(METHOD_HEADER) {
            Err(why) => Some(why),
            Ok(None) => Some("missing required Mcp-Method header".to_string()),
            Ok(Some(value)) if value != method => Some(format!(
                "Mcp-Method header `{value}` does not match body method `{method}`"
            )),
            Ok(Some(_)) => None,
        };
        let expected = match method {
            "tools/call" | "prompts/get" => meta.name.as_deref(),
            "resources/read" => meta.uri.as_deref(),
            _ => None,
        };
        let mismatch = mismatch.or_else(|| {
            let expected = expected?;
            match single(NAME_HEADER) {
                Err(why) => Some(why),
                Ok(None) => Some(format!("missing required Mcp-Name header for `{method}`")),
                Ok(Some(value)) => {
                    let encoded = mcp_supervisor::core::headers::encode_value(&expected.into());
                    (value != expected && encoded.as_deref() != Some(value)).then(|| {
                        format!("Mcp-Name header `{value}` does not match body value `{expected}`")
                    })
                }
            }
        });
        if let Some(why) = mismatch {
            return error(StatusCode::BAD_REQUEST, HEADER_MISMATCH, &why);
        }
    }
    match (&meta.version, version) {
        (None, header)
            if method == "server/discover" || header.is_some_and(|v| v >= STATELESS_VERSION) =>
        {
            let mut missing = vec!["io.modelcontextprotocol/protocolVersion"];
            if !meta.capabilities {
                missing.push("io.modelcontextprotocol/clientCapabilities");
            }
            error(
                StatusCode::BAD_REQUEST,
                -32602,
                &format!(
                    "Invalid params: request _meta is missing or has malformed required fields: {}",
                    missing.join(", ")
                ),
            )
        }
        (None, _) => None,
        (Some(_), None) => error(
            StatusCode::BAD_REQUEST,
            HEADER_MISMATCH,
            "request _meta protocolVersion requires MCP-Protocol-Version header",
        ),
        (Some(body), Some(header)) if body != header => error(
            StatusCode::BAD_REQUEST,
            HEADER_MISMATCH,
            &format!(
                "MCP-Protocol-Version header ({header}) does not match request _meta protocolVersion ({body})"
            ),
        ),
        (Some(_), Some(_)) => None,
    }
}

/// The HTTP status of a sessionless request's answer: 400 for an unsupported version, a
/// missing client capability, a header mismatch and malformed `_meta`; 404 for a method not
/// found; else 200 (an error of the call itself included).
fn stateless_status(answer: &str, meta_malformed: bool) -> StatusCode {
    #[derive(Deserialize)]
    struct Error {
        code: i64,
    }
    #[derive(Deserialize)]
    struct Answer {
        #[serde(default)]
        error: Option<Error>,
    }
    match serde_json::from_str::<Answer>(answer)
        .ok()
        .and_then(|a| a.error)
        .map(|e| e.code)
    {
        Some(-32022 | -32021 | HEADER_MISMATCH) => StatusCode::BAD_REQUEST,
        Some(-32602) if meta_malformed => StatusCode::BAD_REQUEST,
        Some(-32601) => StatusCode::NOT_FOUND,
        _ => StatusCode::OK,
    }
}

/// Whether an `Accept` header names `media` itself with a weight above zero.
fn accepts(headers: &HeaderMap, media: &str) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|entry| {
            let mut fields = entry.split(';');
            let range = fields.next().unwrap_or_default().trim();
            let zero = fields.any(|f| {
                f.trim()
                    .strip_prefix("q=")
                    .and_then(|q| q.trim().parse::<f32>().ok())
                    .is_some_and(|q| q <= 0.0)
            });
            range.eq_ignore_ascii_case(media) && !zero
        })
}

/// Whether the client lists `text/event-stream` before `application/json` in `Accept` (its
/// preference, when it gives no weights).
fn stream_first(headers: &HeaderMap) -> bool {
    let ranges: Vec<String> = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(|entry| {
            entry
                .split(';')
                .next()
                .unwrap_or_default()
                .trim()
                .to_ascii_lowercase()
        })
        .collect();
    let at = |media: &str| ranges.iter().position(|r| r == media);
    matches!((at(EVENT_STREAM), at(JSON)), (Some(s), Some(j)) if s < j)
}

/// Whether the body is said to be `application/json` (parameters aside).
fn is_json_body(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|value| {
            let essence = value.split_once(';').map_or(value, |(essence, _)| essence);
            essence.trim().eq_ignore_ascii_case(JSON)
        })
}

/// Read a body whole, up to `limit` bytes: past it 413 (without reading on), and 400 for one
/// that cannot be read (broken chunked framing, a connection cut mid-body).
async fn read_body(body: Body, limit: usize) -> Result<Bytes, (StatusCode, String)> {
    let mut stream = body.into_data_stream();
    let mut bytes = Vec::new();
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(chunk) if chunk.len() > limit.saturating_sub(bytes.len()) => {
                return Err((
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("Payload Too Large: the request body exceeds {limit} bytes"),
                ));
            }
            Ok(chunk) => bytes.extend_from_slice(&chunk),
            Err(error) => {
                return Err((
                    StatusCode::BAD_REQUEST,
                    format!("Bad Request: cannot read the request body: {error}"),
                ));
            }
        }
    }
    Ok(Bytes::from(bytes))
}

/// Whether a JSON-RPC answer is an error.
fn is_error_answer(text: &str) -> bool {
    #[derive(Deserialize)]
    struct Answer {
        #[serde(default)]
        error: Option<serde::de::IgnoredAny>,
    }
    serde_json::from_str::<Answer>(text).is_ok_and(|a| a.error.is_some())
}

/// A request refused for a bound of requests in flight (`why`): 429, with a JSON-RPC error that
/// says to wait for answers; nothing of it ran.
fn too_many_in_flight(id: Option<&RawValue>, why: &str) -> Response {
    (
        StatusCode::TOO_MANY_REQUESTS,
        [(header::CONTENT_TYPE, JSON)],
        error_text(
            id,
            TOO_MANY_IN_FLIGHT,
            &format!(
                "Too many requests in flight: {why}; wait for their answers before sending more (the request did not run)"
            ),
        ),
    )
        .into_response()
}

/// One SSE event carrying a JSON-RPC message.
fn message_event(id: String, text: &str) -> Event {
    Event::default().event("message").id(id).data(text)
}

/// `status` with a JSON-RPC error (null id) that says why.
fn refuse(status: StatusCode, message: &str) -> Response {
    let code = if status == StatusCode::NOT_FOUND {
        -32001
    } else {
        -32000
    };
    (
        status,
        [(header::CONTENT_TYPE, JSON)],
        error_text(None, code, message),
    )
        .into_response()
}

/// 400 with the JSON-RPC error answer for a body that is not a message.
fn rejected(answer: String) -> Response {
    (
        StatusCode::BAD_REQUEST,
        [(header::CONTENT_TYPE, JSON)],
        answer,
    )
        .into_response()
}

fn session_required() -> Response {
    refuse(
        StatusCode::BAD_REQUEST,
        "Bad Request: Mcp-Session-Id header is required",
    )
}

fn unreadable_session() -> Response {
    refuse(
        StatusCode::BAD_REQUEST,
        "Bad Request: the Mcp-Session-Id header is not visible ASCII",
    )
}

fn session_not_found() -> Response {
    refuse(
        StatusCode::NOT_FOUND,
        "Session not found: it ended or never existed; start a new one with initialize",
    )
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcp_supervisor::Hub;
    use mcp_supervisor::core::config::Config;
    use mcp_supervisor_front::proxy::Mode;

    fn sessions_aged(max_age: Duration) -> (Arc<Sessions>, CancellationToken) {
        let hub = Arc::new(Hub::start(Config::default()));
        let proxy = Proxy::new(hub, Mode::Aggregate);
        let shutdown = CancellationToken::new();
        let sealing = Arc::new(Sealing {
            keys: seal::Keys::random().unwrap(),
            max_age,
        });
        (Sessions::new(proxy, sealing, shutdown.clone()), shutdown)
    }

    fn sessions() -> (Arc<Sessions>, CancellationToken) {
        sessions_aged(Duration::from_secs(86_400))
    }

    fn open(sessions: &Sessions) -> (Arc<Session>, mpsc::Sender<String>) {
        let (out, messages) = mpsc::channel(OUTBOX);
        let client = sessions.proxy.connect(out.clone());
        let id = uuid::Uuid::new_v4().to_string();
        (sessions.open(id, seal::now_ms(), client, messages), out)
    }

    fn fixed() -> mcp_supervisor_front::Session {
        mcp_supervisor_front::Session {
            protocol_version: "2025-06-18".into(),
            capabilities: RawValue::from_string(r#"{"roots":{}}"#.into()).ok(),
            client_info: None,
            upstream: Default::default(),
        }
    }

    fn count(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    #[tokio::test]
    async fn a_sealed_id_not_held_here_resumes_its_session_and_others_are_refused() {
        let (sessions, _shutdown) = sessions();
        let id = sessions
            .sealing
            .keys
            .seal(&fixed(), seal::now_ms())
            .unwrap();
        let resumed = sessions.get_or_resume(&id).expect("resumed from its seal");
        assert_eq!(resumed.id, id);
        let session = resumed.client.session().expect("its fixed part");
        assert_eq!(session.protocol_version, "2025-06-18");
        assert_eq!(count(&sessions.metrics().sessions_resumed), 1);
        // Held now: the same session again, not a second resumption.
        let again = sessions.get_or_resume(&id).unwrap();
        assert!(Arc::ptr_eq(&again, &resumed));
        assert_eq!(count(&sessions.metrics().sessions_resumed), 1);
        // Another process's key, a made-up id, a plain UUID: 404, counted as forged.
        let foreign = seal::Keys::random().unwrap().seal(&fixed(), 0).unwrap();
        for bad in [
            foreign.as_str(),
            "1.AAAA",
            "0b7f6c9e-3c1e-4c8e-9b1a-2f4d5e6a7b8c",
        ] {
            assert!(sessions.get_or_resume(bad).is_none(), "{bad}");
        }
        assert_eq!(count(&sessions.metrics().sessions_forged), 3);
        // Ended by its client: its id opens nothing here any more, held or not.
        assert!(sessions.end(&id));
        assert!(resumed.ended.is_cancelled());
        assert!(sessions.get_or_resume(&id).is_none());
        let elsewhere = sessions
            .sealing
            .keys
            .seal(&fixed(), seal::now_ms())
            .unwrap();
        assert!(
            sessions.end(&elsewhere),
            "a session opened on another replica ends here too"
        );
        assert!(sessions.get_or_resume(&elsewhere).is_none());
        assert!(!sessions.end("1.AAAA"));
    }

    #[tokio::test]
    async fn an_id_past_its_maximum_age_opens_nothing_held_or_not() {
        let (sessions, _shutdown) = sessions_aged(Duration::from_secs(60));
        let old = seal::now_ms() - 61_000;
        let id = sessions.sealing.keys.seal(&fixed(), old).unwrap();
        assert!(sessions.get_or_resume(&id).is_none());
        assert_eq!(count(&sessions.metrics().sessions_expired), 1);
        // Held, but issued too long ago: ended, and refused.
        let (out, messages) = mpsc::channel(OUTBOX);
        let client = sessions.proxy.connect(out);
        let held = sessions.open(id.clone(), old, client, messages);
        assert!(sessions.get_or_resume(&id).is_none());
        assert!(held.ended.is_cancelled());
        assert_eq!(count(&sessions.metrics().sessions_expired), 2);
    }

    #[tokio::test]
    async fn the_held_sessions_are_a_bounded_cache_of_the_idle_ones() {
        let (sessions, _shutdown) = sessions();
        let (busy, _) = open(&sessions);
        let _call = busy.hold();
        let mut kept = Vec::new();
        for _ in 0..MAX_HELD + 100 {
            kept.push(open(&sessions));
        }
        let held = lock(&sessions.map).len();
        assert!(held <= MAX_HELD, "{held} held");
        assert!(held >= MAX_HELD - MAX_HELD / 8, "{held} held");
        assert!(
            lock(&sessions.map).contains_key(&busy.id),
            "a busy session is never let go"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn idle_sessions_end_and_busy_or_streaming_ones_stay() {
        let (sessions, _shutdown) = sessions();
        let (idle, _) = open(&sessions);
        let (busy, _) = open(&sessions);
        let (streaming, _) = open(&sessions);
        let live = |s: &Arc<Session>| lock(&sessions.map).contains_key(&s.id);
        let limit = Duration::from_secs(300);
        assert_eq!(sessions.expire_idle(limit), 0);
        tokio::time::advance(Duration::from_secs(200)).await;
        busy.touch();
        let stream = streaming.hold();
        tokio::time::advance(Duration::from_secs(99)).await;
        assert_eq!(sessions.expire_idle(limit), 0, "299 s is not idle yet");
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(sessions.expire_idle(limit), 1);
        assert!(!live(&idle) && idle.ended.is_cancelled());
        assert!(live(&busy) && live(&streaming));

        // A call or a stream keeps its session however long; once it ends, the clock runs again.
        tokio::time::advance(Duration::from_secs(1000)).await;
        assert_eq!(
            sessions.expire_idle(limit),
            1,
            "only the busy one, now idle"
        );
        assert!(!live(&busy) && live(&streaming));
        drop(stream);
        tokio::time::advance(Duration::from_secs(299)).await;
        assert_eq!(sessions.expire_idle(limit), 0);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(sessions.expire_idle(limit), 1);
        assert!(!live(&streaming));
        assert!(lock(&sessions.map).is_empty());
    }

    #[tokio::test]
    async fn the_standalone_stream_keeps_the_last_events_and_replays_after_an_id() {
        let (sessions, shutdown) = sessions();
        let (session, _) = open(&sessions);
        for n in 1..=300 {
            session.push(format!("m{n}"));
        }
        // No stream was open: the newest kept ones are delivered when one opens.
        let (replay, live) = session.attach(None).expect("the first stream");
        let ids: Vec<u64> = replay.iter().map(|(id, _)| *id).collect();
        assert_eq!(ids.first(), Some(&(300 - KEPT_EVENTS as u64 + 1)));
        assert_eq!(ids.last(), Some(&300));
        assert_eq!(&*replay[replay.len() - 1].1, "m300");
        assert!(session.attach(None).is_none(), "one stream at a time");
        session.push("live".into());
        drop(live);
        // Resumption after an id of ours; an id not ours replays only what no stream has had.
        let (replay, live) = session.attach(Some("297")).expect("a stream again");
        let ids: Vec<u64> = replay.iter().map(|(id, _)| *id).collect();
        assert_eq!(ids, [298, 299, 300, 301]);
        // Resuming again while that one looks open: it takes over, and the old one ends.
        let (replay, _taken_over) = session.attach(Some("300")).expect("resumed");
        assert_eq!(replay.len(), 1);
        let mut live = live;
        assert_eq!(live.recv().await, None, "the old stream ended");
        drop(live);
        let (replay, mut live) = session.attach(Some("3/1")).expect("a stream again");
        assert!(replay.is_empty(), "{replay:?}");
        session.push("next".into());
        assert_eq!(live.recv().await.map(|(id, _)| id), Some(302));
        // Shutdown ends the session.
        shutdown.cancel();
        session.ended.cancelled().await;
    }

    #[tokio::test]
    async fn a_standalone_stream_not_read_ends_and_resumes_without_a_gap() {
        let (sessions, _shutdown) = sessions();
        let (session, _) = open(&sessions);
        let (replay, mut live) = session.attach(None).expect("a stream");
        assert!(replay.is_empty());
        // The client reads nothing while more than its stream holds arrive.
        let sent = KEPT_EVENTS as u64 + 40;
        for n in 1..=sent {
            session.push(format!("m{n}"));
        }
        // It gets what the stream held, and then the end of the stream.
        let mut last = 0;
        while let Some((id, text)) = live.recv().await {
            assert_eq!((id, &*text), (last + 1, &*format!("m{}", last + 1)));
            last = id;
        }
        assert_eq!(last, KEPT_EVENTS as u64, "the stream held its bound");
        // It resumes after the last id it read, and gets the rest, with no gap.
        let resume = last.to_string();
        let (replay, _live) = session.attach(Some(&resume)).expect("resumed");
        let ids: Vec<u64> = replay.iter().map(|(id, _)| *id).collect();
        assert_eq!(ids, (last + 1..=sent).collect::<Vec<_>>());
    }

    #[test]
    fn accept_must_name_both_media_types() {
        let headers = |accept: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::ACCEPT, accept.parse().unwrap());
            headers
        };
        let both = headers("application/json, text/event-stream");
        assert!(accepts(&both, JSON) && accepts(&both, EVENT_STREAM));
        let weighted = headers("application/json;q=0.9, Text/Event-Stream; q=0.5");
        assert!(accepts(&weighted, JSON) && accepts(&weighted, EVENT_STREAM));
        assert!(!accepts(&headers("*/*"), JSON));
        assert!(!accepts(&headers("application/json;q=0"), JSON));
        assert!(!accepts(&headers("text/event-stream"), JSON));
        assert!(!accepts(&HeaderMap::new(), JSON));
    }

    #[test]
    fn a_session_speaks_only_the_versions_with_sessions() {
        let mut headers = HeaderMap::new();
        assert!(version_refused(&headers).is_none());
        for version in SESSION_VERSIONS {
            headers.insert(VERSION_HEADER, version.parse().unwrap());
            assert!(version_refused(&headers).is_none(), "{version}");
        }
        for version in ["2026-07-28", "1999-01-01", ""] {
            headers.insert(VERSION_HEADER, version.parse().unwrap());
            let refused = version_refused(&headers).map(|r| r.status());
            assert_eq!(refused, Some(StatusCode::BAD_REQUEST), "{version}");
        }
        headers.insert(
            VERSION_HEADER,
            axum::http::HeaderValue::from_bytes(b"\xff2025").unwrap(),
        );
        assert!(version_refused(&headers).is_some());
        headers.insert(VERSION_HEADER, "2026-07-28".parse().unwrap());
        assert!(sessionless_version(&headers));
        headers.insert(VERSION_HEADER, "2025-11-25".parse().unwrap());
        assert!(!sessionless_version(&headers));
    }

    #[test]
    fn a_sessionless_requests_headers_must_match_its_body() {
        let body = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"add","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#;
        let message = ClientMessage::read(body).unwrap();
        let meta = stateless_meta(message.params());
        assert!(!meta.malformed());
        assert_eq!(meta.name.as_deref(), Some("add"));
        let headers = |pairs: &[(&str, &str)]| {
            let mut headers = HeaderMap::new();
            for (name, value) in pairs {
                headers.insert(
                    axum::http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                    value.parse().unwrap(),
                );
            }
            headers
        };
        let v = (VERSION_HEADER, "2026-07-28");
        let m = (METHOD_HEADER, "tools/call");
        let n = (NAME_HEADER, "add");
        assert!(stateless_refused(&headers(&[v, m, n]), "tools/call", &meta, None).is_none());
        for bad in [
            vec![v, (METHOD_HEADER, "tools/list"), n],
            vec![v, m],
            vec![v, m, (NAME_HEADER, "other")],
            vec![m, n],
            vec![(VERSION_HEADER, "2025-11-25"), m, n],
        ] {
            let refused = stateless_refused(&headers(&bad), "tools/call", &meta, None);
            assert_eq!(
                refused.map(|r| r.status()),
                Some(StatusCode::BAD_REQUEST),
                "{bad:?}"
            );
        }
        let bare = stateless_meta(None);
        assert!(bare.malformed());
        let refused = stateless_refused(
            &headers(&[v, (METHOD_HEADER, "server/discover")]),
            "server/discover",
            &bare,
            None,
        );
        assert_eq!(refused.map(|r| r.status()), Some(StatusCode::BAD_REQUEST));
        let error = |code: i64| {
            format!(r#"{{"jsonrpc":"2.0","id":1,"error":{{"code":{code},"message":"m"}}}}"#)
        };
        assert_eq!(
            stateless_status(&error(-32601), false),
            StatusCode::NOT_FOUND
        );
        assert_eq!(
            stateless_status(&error(-32022), false),
            StatusCode::BAD_REQUEST
        );
        assert_eq!(
            stateless_status(&error(-32602), true),
            StatusCode::BAD_REQUEST
        );
        assert_eq!(stateless_status(&error(-32602), false), StatusCode::OK);
        assert_eq!(
            stateless_status(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#, false),
            StatusCode::OK
        );
    }

    #[test]
    fn answers_are_told_apart_and_ids_kept_as_they_came() {
        assert!(is_error_answer(
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":-1,"message":"x"}}"#
        ));
        assert!(!is_error_answer(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#));
        let message = ClientMessage::read(r#"{"jsonrpc":"2.0","id":"a\"b","method":"x"}"#).unwrap();
        assert_eq!(message.id().map(RawValue::get), Some(r#""a\"b""#));
    }
}
