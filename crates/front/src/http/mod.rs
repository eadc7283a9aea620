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
mod identity;
mod options;
mod ordering;
mod routes;
mod session;
mod store;

use std::sync::Arc;

use crate::Proxy;
pub use identity::{metadata_url_of, refused};
pub use options::{
    FACE_IN_FLIGHT, KEPT_EVENTS, MAX_BODY, Options, PATH, SESSION_IDLE, SESSION_IN_FLIGHT,
    SESSIONLESS_IN_FLIGHT, STOPPING_RETRY, Sealing, Stopping, stopping_error,
};

/// The `/mcp` routes ([`PATH`]) serving `proxy`, as the module says. Merge them into the host's
/// router, put its guard in front, and serve them on its listener. They need a tokio runtime
/// (the idle expiry runs in a task of its own, until [`Options::shutdown`]).
pub fn router(proxy: Arc<Proxy>, options: Options) -> axum::Router {
    routes::router(proxy, options)
}
