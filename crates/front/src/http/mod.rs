//! The MCP face over streamable HTTP (transport revisions 2025-03-26 to 2025-11-25, and the
//! sessionless POSTs of 2026-07-28) at `/mcp`, for any host that serves a [`Proxy`]: its
//! sessions, its event streams and that era's POST checks, as one [`router`].
//!
//! - `POST` carries one JSON-RPC message, read whole, to the message face ([`crate::proxy`]) as
//!   text. An `initialize` without a session opens one (`Mcp-Session-Id`). A request is answered
//!   as one `application/json` body while nothing related to it comes first; when something
//!   does (progress, a server's request the call caused), the answer becomes an event stream:
//!   each related message as an event, then the answer, then the end (`ordering`). A
//!   notification or a response gets `202`. A client that goes away mid-call drops the call,
//!   which cancels it upstream.
//! - `GET` opens the session's standalone stream: what belongs to no request. Its events carry
//!   ids; the last [`KEPT_EVENTS`] are kept, for replay after `Last-Event-ID` and for delivery
//!   once a stream opens. One at a time per session. A stream whose client does not read
//!   ends once it holds [`KEPT_EVENTS`] unread, so the client resumes it from the kept events
//!   rather than the proxy queueing without bound.
//! - `DELETE` ends a session: its calls are cancelled and its streams end.
//! - When the host stops taking part ([`Stopping`], e.g. at the end of a drain window), a call
//!   still running is answered with the stopping error (and so cancelled upstream), and every
//!   event stream ends with a last event that carries only a `retry` hint.
//!
//! Sessions (`store`, `session`) are a bounded cache of sealed ids: a session ends after
//! [`Options::session_idle`] with no request, no call under way and no open stream, and its id
//! resumes it later, here or on any replica with the key.
//! - A session has at most [`SESSION_IN_FLIGHT`] requests in flight, and the face at most
//!   [`SESSIONLESS_IN_FLIGHT`] sessionless ones: past either, a request is refused at once (429
//!   with a JSON-RPC error), never queued.
//! - A client of protocol 2026-07-28 has no session: each of its POSTs is checked as that era's
//!   transport asks (`checks`: `MCP-Protocol-Version` against the body's `_meta`, `Mcp-Method`
//!   and `Mcp-Name` against the body) and goes to the message face as one request of a client of
//!   its own; the answer comes as JSON (an error of that era with its HTTP status: 400 for a
//!   header mismatch, an unsupported version or malformed `_meta`, 404 for a method not found),
//!   or as an event stream when something related comes first.
//!
//! It reads no message beyond its envelope (and, for that era, the members its headers mirror),
//! never answers in the proxy's place, never touches the hub, and never holds a lock across an
//! await. Who may call it (Host, Origin, a token) and where it listens are the host's: it
//! neither guards nor binds.
//!
//! Serving a hub over HTTP is a few lines (`examples/http_host.rs`):
//!
//! ```no_run
//! # async fn serve(proxy: std::sync::Arc<mcp_supervisor_front::Proxy>) -> Result<(), Box<dyn std::error::Error>> {
//! use mcp_supervisor_front::{http, seal};
//! let sealing = http::Sealing { keys: seal::Keys::random()?, max_age: std::time::Duration::from_secs(86_400) };
//! let app = http::router(proxy, http::Options::new(sealing));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! axum::serve(listener, app).await?;
//! # Ok(()) }
//! ```

mod calls;
mod checks;
mod ordering;
mod routes;
mod session;
mod store;

use std::sync::Arc;
use std::time::Duration;

use serde_json::value::RawValue;
use tokio_util::sync::CancellationToken;

use crate::seal;
use crate::{Proxy, error_text};

/// The path the routes answer at.
pub const PATH: &str = "/mcp";

/// A session with no request, no call under way and no open stream for this long is ended
/// (the default of [`Options::session_idle`]).
pub const SESSION_IDLE: Duration = Duration::from_secs(300);

/// The largest POST body read (the default of [`Options::max_body`]).
pub const MAX_BODY: usize = 4 * 1024 * 1024;

/// How many standalone-stream events a session keeps (for replay, and while no stream is open).
pub const KEPT_EVENTS: usize = 256;

/// The most requests one session has in flight at once (as on the stdio face). Past it a
/// request is refused at once (HTTP 429 with a JSON-RPC error) rather than held: a POST that
/// waited would hold its connection and body, and the client could not tell it from a slow
/// call; refused, it knows to wait for its answers.
pub const SESSION_IN_FLIGHT: usize = crate::stdio::MAX_IN_FLIGHT;

/// The most sessionless (2026-07-28) requests in flight at once over the whole face: each is a
/// client of its own, so the bound is the face's.
pub const SESSIONLESS_IN_FLIGHT: usize = 16 * SESSION_IN_FLIGHT;

/// The most requests in flight at once over the whole face, sessions and sessionless together
/// (the default of [`Options::max_in_flight`]): each is a task, and sessions alone (up to 4,096
/// held, [`SESSION_IN_FLIGHT`] each) could make a million. Past it a request is refused at once
/// (HTTP 429), as past a session's own bound.
pub const FACE_IN_FLIGHT: usize = 32 * SESSION_IN_FLIGHT;

/// The reconnection delay an event stream asks for as it ends because the host stops (the
/// default of [`Stopping::retry`]).
pub const STOPPING_RETRY: Duration = Duration::from_millis(1000);

/// How session ids are sealed and for how long they open (SPEC §12).
pub struct Sealing {
    pub keys: seal::Keys,
    /// An id older than this opens no session (`sessionMaxAgeMs`).
    pub max_age: Duration,
}

/// When the host stops taking part (the end of its drain window, or its stop): calls still
/// running are answered with `answer(id)` and cancelled upstream, and event streams end with a
/// last event that asks the client to reconnect after `retry` (by then, to another replica).
#[derive(Clone, Debug)]
pub struct Stopping {
    /// Cancelled when the host stops taking part.
    pub token: CancellationToken,
    /// The answer to request `id` still running then.
    pub answer: fn(Option<&RawValue>) -> String,
    /// The reconnection delay of the streams' last event.
    pub retry: Duration,
}

impl Stopping {
    /// Stopping when `token` is cancelled, with the default answer and [`STOPPING_RETRY`].
    pub fn new(token: CancellationToken) -> Self {
        Self {
            token,
            answer: stopping_error,
            retry: STOPPING_RETRY,
        }
    }

    pub(crate) fn is_stopping(&self) -> bool {
        self.token.is_cancelled()
    }
}

/// The default answer to request `id` still running when the host stops.
pub fn stopping_error(id: Option<&RawValue>) -> String {
    error_text(
        id,
        -32000,
        "this server is stopping: the call was cancelled upstream and its outcome is unknown; \
         send it again if it is safe to repeat",
    )
}

/// How the face serves.
pub struct Options {
    /// How session ids are sealed, and for how long they open.
    pub sealing: Arc<Sealing>,
    /// Ends every session and stream when cancelled (the host's shutdown). Once it is, the
    /// routes' connections close and a server with graceful shutdown can finish.
    pub shutdown: CancellationToken,
    /// When calls still running are cut short; `None`: at `shutdown`.
    pub stopping: Option<Stopping>,
    /// A session idle this long is ended ([`SESSION_IDLE`]).
    pub session_idle: Duration,
    /// The largest POST body read ([`MAX_BODY`]); past it 413.
    pub max_body: usize,
    /// The most requests in flight at once over the face ([`FACE_IN_FLIGHT`]); past it 429.
    pub max_in_flight: usize,
}

impl Options {
    /// Sessions sealed with `sealing`, a shutdown token of their own, and the defaults.
    pub fn new(sealing: impl Into<Arc<Sealing>>) -> Self {
        Self {
            sealing: sealing.into(),
            shutdown: CancellationToken::new(),
            stopping: None,
            session_idle: SESSION_IDLE,
            max_body: MAX_BODY,
            max_in_flight: FACE_IN_FLIGHT,
        }
    }
}

/// The `/mcp` routes ([`PATH`]) serving `proxy`, as the module says. Merge them into the host's
/// router, put its guard in front, and serve them on its listener. They need a tokio runtime
/// (the idle expiry runs in a task of its own, until [`Options::shutdown`]).
pub fn router(proxy: Arc<Proxy>, options: Options) -> axum::Router {
    routes::router(proxy, options)
}
