//! The seam between a supervisor and one generation of a server: what a live connection can do
//! (`Link`) and how one is opened (`Connector`).
//!
//! The supervisor drives generations only through these traits, so its state machine is tested
//! with a scripted fake on a paused clock. This module must never spawn, connect or sleep itself.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::Duration;

use mcp_supervisor_core::classify::Failure;
use mcp_supervisor_core::headers::ParamHeader;
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::error::{HandshakeError, OpenError};

/// A boxed, sendable future.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Opens generations of one server.
pub trait Connector: Send + Sync + 'static {
    /// Start generation `generation`: spawn the process or prepare the HTTP client. It does not
    /// wait for the server; [`Link::initialize`] does. Events of the generation go to `events`.
    fn open(&self, generation: u64, events: LinkEvents) -> Result<Arc<dyn Link>, OpenError>;

    /// For a server with OAuth: `Some(why)` while it needs `mcp-supervisor login`, `None` once
    /// it has a usable token again. `None` here: the server has no OAuth.
    fn auth_status(&self) -> Option<tokio::sync::watch::Receiver<Option<String>>> {
        None
    }

    /// After a failed connection attempt: whether the server refused it for authorization, in
    /// which case it now needs a login ([`Connector::auth_status`] says why).
    fn auth_refused_attempt(&self) -> bool {
        false
    }
}

/// One generation: a fresh transport and a fresh JSON-RPC peer. Messages are JSON text: a link
/// decodes only the ids it owns, never the MCP model.
pub trait Link: Send + Sync + 'static {
    /// The MCP handshake: `initialize` with `params` as given (the client's identity), then
    /// `notifications/initialized`. Returns the server's `initialize` result as it came.
    /// Bounded by the caller.
    fn initialize<'a>(
        &'a self,
        params: &'a RawValue,
    ) -> BoxFuture<'a, Result<Box<RawValue>, HandshakeError>>;
    /// One request: `method` with `params` (JSON text, passed as they are, except a progress
    /// token, which the link replaces with one of its own and maps back), answered with the
    /// `result` as JSON text. Ended by `opts.timeout` or `opts.cancel`, and by dropping the
    /// future: each sends `notifications/cancelled` upstream.
    fn request<'a>(
        &'a self,
        method: &'a str,
        params: Option<&'a RawValue>,
        opts: CallOptions,
    ) -> BoxFuture<'a, Result<Box<RawValue>, Failure>>;
    /// Whether [`Link::request`] surely ends by `opts.timeout`: then the call path sets no
    /// timer of its own around it. A link that cannot promise it keeps the default, and the call
    /// path ends its requests a little past their deadline itself.
    fn keeps_deadlines(&self) -> bool {
        false
    }
    /// A notification upstream (`notifications/roots/list_changed`, ...), best effort.
    fn notify(&self, method: &str, params: Option<&RawValue>);
    /// Begin closing. `Graceful` closes stdin, then signals; `Kill` kills the process group at
    /// once. Completion is seen through [`Link::closed`].
    fn close(&self, how: CloseHow);
    /// Resolves once the generation is fully closed: client ended, process group gone.
    fn closed(&self) -> BoxFuture<'static, ()>;
    /// The last lines the server wrote to stderr, oldest first.
    fn stderr_tail(&self) -> Vec<String>;
    /// The process id of a stdio server.
    fn pid(&self) -> Option<u32>;
    /// The upstream session id of a streamable-HTTP generation, once the server gave one.
    fn session_id(&self) -> Option<String> {
        None
    }
}

/// The word an input-required result holds.
static INPUT_REQUIRED: mcp_supervisor_core::skim::Word =
    mcp_supervisor_core::skim::Word::new("input_required");

/// Whether a result is an input-required one (SEP-2322: `resultType` is `input_required`): the
/// server needs the client's answers before the request can finish. Most results are complete;
/// only those that mention the type are read further.
pub fn is_input_required(result: &RawValue) -> bool {
    #[derive(Deserialize)]
    struct Kind<'a> {
        #[serde(rename = "resultType", borrow)]
        result_type: Option<std::borrow::Cow<'a, str>>,
    }
    INPUT_REQUIRED.in_text(result.get())
        && serde_json::from_str::<Kind<'_>>(result.get())
            .is_ok_and(|k| k.result_type.as_deref() == Some("input_required"))
}

/// A JSON-RPC error object, as a client or server sent it.
#[derive(Clone, Debug)]
pub struct RpcError {
    /// The JSON-RPC error code (`-32601` method not found, `-32603` internal error, …).
    pub code: i64,
    /// A short description, for a person.
    pub message: String,
    /// More about the error, as JSON text, when there is any.
    pub data: Option<Box<RawValue>>,
}

impl RpcError {
    /// An error with `code` and `message` and no `data`.
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
        }
    }

    /// A JSON-RPC error object as it came (`data` kept as text); `None` when it is not one.
    pub fn from_json(error: &RawValue) -> Option<Self> {
        #[derive(Deserialize)]
        struct Object {
            code: i64,
            #[serde(default)]
            message: String,
            #[serde(default)]
            data: Option<Box<RawValue>>,
        }
        serde_json::from_str::<Object>(error.get())
            .ok()
            .map(|o| Self {
                code: o.code,
                message: o.message,
                data: o.data,
            })
    }

    /// The error object as JSON text.
    pub fn to_json(&self) -> String {
        #[derive(serde::Serialize)]
        struct Object<'a> {
            code: i64,
            message: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            data: Option<&'a RawValue>,
        }
        serde_json::to_string(&Object {
            code: self.code,
            message: &self.message,
            data: self.data.as_deref(),
        })
        .unwrap_or_else(|_| format!(r#"{{"code":{},"message":"error"}}"#, self.code))
    }
}

/// The client side of the proxy, as a server's messages see it: where a server's requests
/// (`roots/list`, `sampling/createMessage`, `elicitation/create`, `ping`) and the notifications
/// of one call (progress) go. A proxy face implements it per downstream client; an embedding
/// host gives the [`crate::Hub`] one to answer servers itself.
pub trait Downstream: Send + Sync + 'static {
    /// A server's request for this client. Resolves with the client's `result` as JSON text, or
    /// the error it answered. The caller bounds it with a deadline; dropping the future means
    /// the server gave up on it.
    fn request(
        &self,
        method: &str,
        params: Option<Box<RawValue>>,
    ) -> BoxFuture<'static, Result<Box<RawValue>, RpcError>>;
    /// A notification for this client (a call's progress, with the client's own token).
    fn notify(&self, method: &str, params: Option<Box<RawValue>>);
    /// When this is one call of a client that may have several in flight: a key that is the
    /// same for every call of that client and only for them, and the client as a whole (not
    /// one call's stream). A server's request that its transport cannot tie to one call (stdio
    /// says nothing of the relation) goes to that client while every call in flight is its
    /// own. `None` (the default): nothing is known beyond this one call.
    fn client(&self) -> Option<(usize, Arc<dyn Downstream>)> {
        None
    }
    /// The client session this request belongs to, as [`Downstream::client`] gives it: a
    /// server isolated per session (SPEC §11) serves it with that session's own instance.
    /// `None` (what a client of the sessionless 2026-07-28 era gives): the shared instance.
    fn session(&self) -> Option<(usize, Arc<dyn Downstream>)> {
        self.client()
    }
    /// Who the client is, as its transport vouched (SPEC §14: an identity's key, issuer and
    /// subject): a server isolated per user serves all of that identity's sessions with one
    /// instance. `None` (the default): no one vouched, and such a server serves this session
    /// alone.
    fn identity(&self) -> Option<String> {
        None
    }
    /// Why the client cancelled the call this is the origin of, in its own words (the `reason`
    /// of its `notifications/cancelled`): the server is told the same. `None` (the default):
    /// the link says "cancelled by the caller".
    fn cancel_reason(&self) -> Option<String> {
        None
    }
}

/// A client that has nothing to offer a server: `ping` is answered, every other request is
/// refused with "method not found", notifications are dropped. The hub's default.
pub struct Refuse;

impl Downstream for Refuse {
    fn request(
        &self,
        method: &str,
        _params: Option<Box<RawValue>>,
    ) -> BoxFuture<'static, Result<Box<RawValue>, RpcError>> {
        let answer = if method == "ping" {
            Ok(empty_object())
        } else {
            Err(RpcError::new(
                -32601,
                format!(
                    "this client does not handle `{method}` (no handler was given to mcp-supervisor)"
                ),
            ))
        };
        Box::pin(async move { answer })
    }

    fn notify(&self, _method: &str, _params: Option<Box<RawValue>>) {}
}

/// `{}` as JSON text.
pub fn empty_object() -> Box<RawValue> {
    RawValue::from_string("{}".to_string()).unwrap_or_else(|_| unreachable_raw())
}

fn unreachable_raw() -> Box<RawValue> {
    // `{}` always parses; this only satisfies the type without a panic path.
    serde_json::value::to_raw_value(&serde_json::Map::new()).unwrap_or_default()
}

/// Every tool of a generation, as JSON text each: `tools/list`, every page, each page bounded
/// by `timeout`.
pub(crate) async fn list_tools(
    link: &dyn Link,
    timeout: Duration,
) -> Result<Vec<Box<RawValue>>, Failure> {
    list_items(link, "tools/list", "tools", timeout).await
}

/// Every item of one list (`tools/list`, `prompts/list`, ...) under `field`, as JSON text each:
/// every page, each page bounded by `timeout`.
pub(crate) async fn list_items(
    link: &dyn Link,
    method: &str,
    field: &str,
    timeout: Duration,
) -> Result<Vec<Box<RawValue>>, Failure> {
    let mut items = Vec::new();
    let mut cursor: Option<String> = None;
    // Bounded: a server that keeps handing out cursors cannot keep us here forever.
    for _ in 0..10_000 {
        let params = match &cursor {
            Some(cursor) => {
                serde_json::value::to_raw_value(&serde_json::json!({ "cursor": cursor }))
                    .map_err(|_| Failure::UnexpectedResponse)?
            }
            None => empty_object(),
        };
        let opts = CallOptions::new(timeout);
        let page = link.request(method, Some(&params), opts).await?;
        let mut page: std::collections::HashMap<String, Box<RawValue>> =
            serde_json::from_str(page.get()).map_err(|_| Failure::UnexpectedResponse)?;
        if let Some(list) = page.remove(field) {
            let list: Vec<Box<RawValue>> =
                serde_json::from_str(list.get()).map_err(|_| Failure::UnexpectedResponse)?;
            items.extend(list);
        }
        let next = page.remove("nextCursor").and_then(|c| {
            serde_json::from_str::<Option<String>>(c.get())
                .ok()
                .flatten()
        });
        match next {
            Some(next) if !next.is_empty() => cursor = Some(next),
            _ => return Ok(items),
        }
    }
    Err(Failure::TransportError {
        message: format!("{method} returned more than 10000 pages"),
        connection_closed: false,
    })
}

/// `ping`, bounded by `timeout`.
pub(crate) async fn ping(link: &dyn Link, timeout: Duration) -> Result<(), Failure> {
    link.request("ping", None, CallOptions::new(timeout))
        .await
        .map(|_| ())
}

/// How to end a generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CloseHow {
    /// Close stdin, then SIGTERM, then SIGKILL the group (bounded).
    Graceful,
    /// SIGKILL the group now: the server is hung or already lost.
    Kill,
}

/// Per-request options.
#[derive(Clone)]
pub struct CallOptions {
    /// How long the request may take; past it the link sends `notifications/cancelled` and
    /// fails with [`Failure::DeadlinePassed`].
    pub timeout: Duration,
    /// Cancelled by the caller: the link sends `notifications/cancelled` and fails with
    /// [`Failure::CancelledByCaller`].
    pub cancel: CancellationToken,
    /// The client this request is for: a server's requests related to it, and its progress,
    /// go there.
    pub origin: Option<Arc<dyn Downstream>>,
    /// The arguments a `tools/call` mirrors into `Mcp-Param-*` HTTP headers (SEP-2243).
    pub headers: Arc<[ParamHeader]>,
    /// A stateless server's input-required result is the answer, as it came: the caller (a
    /// client of that era) answers it with its own retry. Otherwise the link asks `origin`.
    pub relays_input: bool,
}

impl CallOptions {
    /// Bounded by `timeout`, with no origin and a cancel token of its own.
    pub fn new(timeout: Duration) -> Self {
        Self {
            timeout,
            cancel: CancellationToken::new(),
            origin: None,
            headers: Arc::from([]),
            relays_input: false,
        }
    }
}

impl std::fmt::Debug for CallOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallOptions")
            .field("timeout", &self.timeout)
            .field("origin", &self.origin.is_some())
            .finish()
    }
}

/// What a generation reports on its own, tagged with its number by [`LinkEvents`].
#[derive(Clone, Debug)]
pub enum LinkEvent {
    /// `notifications/tools/list_changed`.
    ToolListChanged,
    /// Any sign that the server is alive (a progress notification, a log message).
    SignOfLife,
    /// A notification to pass downstream (resources, prompts, logging, tasks), as it came.
    Notification {
        /// The notification's method.
        method: String,
        /// Its params, as JSON text.
        params: Option<Box<RawValue>>,
    },
}

/// How many events of one server wait for its supervisor at most ([`LinkEvents`]). The
/// supervisor takes them as they come while the generation is ready; they wait only while it is
/// busy elsewhere (an attempt, a backoff), or when a server notifies faster than they are
/// taken.
pub const EVENTS: usize = 1024;

/// The events a full queue owes rather than leaves out: each says only that something changed
/// (or that the server lives), so one sent later, once, stands for all that were left out. In
/// this order: a sign of life, then the list changes (tools, prompts, resources).
const OWED: usize = 4;

/// Which owed event `event` is (its bit), when it is one.
fn owed_bit(event: &LinkEvent) -> Option<u8> {
    match event {
        LinkEvent::SignOfLife => Some(0),
        LinkEvent::ToolListChanged => Some(1),
        LinkEvent::Notification { method, .. } => match method.as_str() {
            "notifications/prompts/list_changed" => Some(2),
            "notifications/resources/list_changed" => Some(3),
            _ => None,
        },
    }
}

/// The owed event of bit `bit` (see [`owed_bit`]).
fn owed_event(bit: u8) -> LinkEvent {
    let changed = |method: &str| LinkEvent::Notification {
        method: method.to_string(),
        params: None,
    };
    match bit {
        0 => LinkEvent::SignOfLife,
        1 => LinkEvent::ToolListChanged,
        2 => changed("notifications/prompts/list_changed"),
        _ => changed("notifications/resources/list_changed"),
    }
}

/// The supervisor's end of one server's events: the bounded queue ([`EVENTS`]) that every
/// generation's [`LinkEvents`] feed, and how many notifications were left out.
pub(crate) struct EventQueue {
    tx: mpsc::Sender<(u64, LinkEvent)>,
    server: Arc<str>,
    dropped: Arc<AtomicU64>,
}

impl EventQueue {
    /// A queue of `capacity` events of `server`, and the supervisor's receiving end.
    pub(crate) fn new(
        server: Arc<str>,
        capacity: usize,
    ) -> (Self, mpsc::Receiver<(u64, LinkEvent)>) {
        let (tx, rx) = mpsc::channel(capacity);
        let dropped = Arc::new(AtomicU64::new(0));
        (
            Self {
                tx,
                server,
                dropped,
            },
            rx,
        )
    }

    /// Where generation `generation` sends its events.
    pub(crate) fn for_generation(&self, generation: u64) -> LinkEvents {
        LinkEvents {
            generation,
            tx: self.tx.clone(),
            owed: Arc::new(AtomicU8::new(0)),
            server: self.server.clone(),
            dropped: self.dropped.clone(),
        }
    }

    /// How many notifications a full queue left out, over every generation.
    #[cfg(test)]
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

/// Where a generation sends its events; each one carries the generation number so a
/// supervisor can ignore a replaced generation (the fence).
///
/// The queue is bounded ([`EVENTS`]) and a sender never waits for room (the server's reader
/// must go on reading answers). When it is full, an event is not queued: a sign of life or a
/// list change (tools, prompts, resources) is owed, and sent once as soon as there is room (the
/// lists are read again, the missed probes cleared: nothing goes stale without a word); any
/// other notification (a log message, a resource update, a task status) is left out, counted
/// and logged.
#[derive(Clone, Debug)]
pub struct LinkEvents {
    generation: u64,
    tx: mpsc::Sender<(u64, LinkEvent)>,
    /// The events this generation owes (bits of [`owed_bit`]); not zero while a task waits for
    /// room to send them.
    owed: Arc<AtomicU8>,
    server: Arc<str>,
    /// Notifications left out, for the whole server.
    dropped: Arc<AtomicU64>,
}

impl LinkEvents {
    /// The generation these events belong to.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Send an event; a supervisor that has gone away simply does not hear it. Never waits: a
    /// full queue owes the event or leaves it out (see [`LinkEvents`]).
    pub fn send(&self, event: LinkEvent) {
        let event = match self.tx.try_send((self.generation, event)) {
            Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => return,
            Err(mpsc::error::TrySendError::Full((_, event))) => event,
        };
        match owed_bit(&event) {
            Some(bit) => self.owe(bit),
            None => self.left_out(&event),
        }
    }

    /// Owe the event of `bit`. The first debt starts a task that waits for room (while the
    /// supervisor does not take its events; it ends with the supervisor) and then sends each
    /// event owed by then, once; a debt after that starts the next task.
    fn owe(&self, bit: u8) {
        if self.owed.fetch_or(1 << bit, Ordering::SeqCst) != 0 {
            return; // its task is waiting
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.owed.store(0, Ordering::SeqCst);
            return;
        };
        let (owed, tx, generation) = (self.owed.clone(), self.tx.clone(), self.generation);
        runtime.spawn(async move {
            let Ok(room) = tx.reserve().await else {
                return;
            };
            let bits = owed.swap(0, Ordering::SeqCst);
            let mut events = (0..OWED as u8)
                .filter(|bit| bits & (1 << bit) != 0)
                .map(owed_event);
            if let Some(event) = events.next() {
                room.send((generation, event));
            }
            for event in events {
                if tx.send((generation, event)).await.is_err() {
                    return;
                }
            }
        });
    }

    /// A notification a full queue left out: counted, and logged at the first and then at each
    /// power of two.
    fn left_out(&self, event: &LinkEvent) {
        let dropped = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
        if dropped.is_power_of_two() {
            let method = match event {
                LinkEvent::Notification { method, .. } => method.as_str(),
                LinkEvent::ToolListChanged | LinkEvent::SignOfLife => "an event",
            };
            tracing::warn!(
                server = %self.server,
                dropped,
                "{method} from the server was left out: {EVENTS} of its events wait for its supervisor (the server notifies faster than they are taken); {dropped} left out so far"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note(method: &str) -> LinkEvent {
        LinkEvent::Notification {
            method: method.to_string(),
            params: None,
        }
    }

    fn what(event: &LinkEvent) -> String {
        match event {
            LinkEvent::SignOfLife => "sign of life".to_string(),
            LinkEvent::ToolListChanged => "tools changed".to_string(),
            LinkEvent::Notification { method, .. } => method.clone(),
        }
    }

    /// The next `n` events the supervisor takes, each checked for its generation.
    async fn take(
        rx: &mut mpsc::Receiver<(u64, LinkEvent)>,
        generation: u64,
        n: usize,
    ) -> Vec<String> {
        let mut taken = Vec::new();
        for _ in 0..n {
            let (g, event) = rx.recv().await.expect("the queue is open");
            assert_eq!(g, generation);
            taken.push(what(&event));
        }
        taken
    }

    #[tokio::test]
    async fn a_full_event_queue_owes_list_changes_once_and_counts_the_notifications_it_leaves_out()
    {
        let (queue, mut rx) = EventQueue::new("srv".into(), 2);
        let events = queue.for_generation(7);
        events.send(note("notifications/message"));
        events.send(note("notifications/resources/updated"));
        // Full, and the sender does not wait: list changes and signs of life are owed, each
        // once however often it comes ...
        events.send(LinkEvent::ToolListChanged);
        events.send(note("notifications/prompts/list_changed"));
        events.send(LinkEvent::ToolListChanged);
        events.send(LinkEvent::SignOfLife);
        // ... and other notifications are left out, counted.
        events.send(note("notifications/message"));
        events.send(note("notifications/tasks/status"));
        assert_eq!(queue.dropped(), 2);

        // Once the supervisor takes what waits, what was owed comes after it, once.
        let taken = take(&mut rx, 7, 5).await;
        assert_eq!(
            taken,
            [
                "notifications/message",
                "notifications/resources/updated",
                "sign of life",
                "tools changed",
                "notifications/prompts/list_changed",
            ]
        );
        tokio::task::yield_now().await;
        assert!(rx.try_recv().is_err(), "each owed event is sent once");

        // A debt after that is owed again, and paid again.
        events.send(note("notifications/message"));
        events.send(note("notifications/message"));
        events.send(note("notifications/resources/list_changed"));
        assert_eq!(
            queue.dropped(),
            2,
            "an owed event is not counted as left out"
        );
        let taken = take(&mut rx, 7, 3).await;
        assert_eq!(taken[2], "notifications/resources/list_changed");
        tokio::task::yield_now().await;
        assert!(rx.try_recv().is_err());
    }
}
