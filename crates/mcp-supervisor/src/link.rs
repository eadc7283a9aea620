//! The seam between a supervisor and one generation of a server: what a live connection can do
//! (`Link`) and how one is opened (`Connector`).
//!
//! The supervisor drives generations only through these traits, so its state machine is tested
//! with a scripted fake on a paused clock. This module must never spawn, connect or sleep itself.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
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

/// Whether a result is an input-required one (SEP-2322: `resultType` is `input_required`): the
/// server needs the client's answers before the request can finish. Most results are complete;
/// only those that mention the type are read further.
pub fn is_input_required(result: &RawValue) -> bool {
    #[derive(Deserialize)]
    struct Kind<'a> {
        #[serde(rename = "resultType", borrow)]
        result_type: Option<std::borrow::Cow<'a, str>>,
    }
    result.get().contains("input_required")
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

/// Where a generation sends its events; each one carries the generation number so a
/// supervisor can ignore a replaced generation (the fence).
#[derive(Clone, Debug)]
pub struct LinkEvents {
    generation: u64,
    tx: mpsc::UnboundedSender<(u64, LinkEvent)>,
}

impl LinkEvents {
    pub(crate) fn new(generation: u64, tx: mpsc::UnboundedSender<(u64, LinkEvent)>) -> Self {
        Self { generation, tx }
    }

    /// The generation these events belong to.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Send an event; a supervisor that has gone away simply does not hear it.
    pub fn send(&self, event: LinkEvent) {
        let _ = self.tx.send((self.generation, event));
    }
}

/// A failure in words, for logs and errors.
pub(crate) fn describe(failure: &Failure) -> String {
    match failure {
        Failure::NoLiveGeneration => "there is no live connection".into(),
        Failure::ConnectRefused => "the connection was refused".into(),
        Failure::SessionExpired => "the server no longer knows our session (HTTP 404)".into(),
        Failure::HttpStatus { status, body, .. } if body.is_empty() => format!("HTTP {status}"),
        Failure::HttpStatus { status, body, .. } => format!("HTTP {status}: {body}"),
        Failure::ServerError { code, message, .. } => format!("error {code}: {message}"),
        Failure::TransportClosedBeforeSend => {
            "the connection was closed before the request went out".into()
        }
        Failure::ConnectionLostAfterSend => {
            "the connection broke after the request went out".into()
        }
        Failure::TransportError { message, .. } => format!("transport error: {message}"),
        Failure::DeadlinePassed => "the deadline passed".into(),
        Failure::CancelledByCaller => "cancelled by the caller".into(),
        Failure::UnexpectedResponse => "the reply was of the wrong type".into(),
        Failure::Unauthorized { message } => format!("not authorized: {message}"),
    }
}
