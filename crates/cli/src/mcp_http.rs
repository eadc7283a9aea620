//! The MCP face over streamable HTTP at `/mcp`: the library's routes
//! ([`mcp_supervisor_front::http`]: sessions of sealed ids, event streams, the 2026-07-28 POST
//! checks), wired to this binary's shutdown and drain ([`crate::drain`]): when the drain window
//! is over, a call still running is answered with [`stopping_error`] and every event stream
//! ends with a last event that asks the client to reconnect after [`STOPPING_RETRY`].
//!
//! It only wires: it reads no message and holds no session. Who may call it (Host, Origin,
//! token) is [`crate::http`]'s to check.

use std::sync::Arc;

use axum::Router;
use tokio_util::sync::CancellationToken;

use mcp_supervisor_front::Proxy;
use mcp_supervisor_front::http::{self, Options, Stopping};

use crate::drain::{Drain, STOPPING_RETRY, stopping_error};

pub use mcp_supervisor_front::http::Sealing;

/// The `/mcp` routes. `shutdown` ends every session and stream; `drain` says when the proxy
/// stops.
/// With `auth`, the face is an OAuth resource server (SPEC §14).
pub fn router(
    proxy: Arc<Proxy>,
    sealing: Arc<Sealing>,
    auth: Option<Arc<mcp_supervisor_front::auth::Verifier>>,
    shutdown: CancellationToken,
    drain: Drain,
) -> Router {
    let stopping = Stopping {
        token: drain.stopping().clone(),
        answer: stopping_error,
        retry: STOPPING_RETRY,
    };
    let options = Options {
        shutdown,
        stopping: Some(stopping),
        auth,
        ..Options::new(sealing)
    };
    http::router(proxy, options)
}
