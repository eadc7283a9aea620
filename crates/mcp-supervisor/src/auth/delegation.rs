//! Tokens that carry a caller's identity to a `url` server (`credentials`, SPEC §14): the hook a
//! host that vouches for its callers (an HTTP face with `auth`) gives the hub, and the hub asks
//! once per connection it opens to such a server.
//!
//! The library knows no caller's token and never makes one: it only asks the host for the
//! [`Credentials`] of a connection, by the key of the identity it serves (as
//! [`crate::Downstream::identity`] gives it), and the connection's wire takes each request's
//! bearer token from them.

use std::sync::Arc;

use mcp_supervisor_core::config::ServerConfig;

use super::Credentials;

/// Gives the credentials of a connection to a server that has `credentials`.
pub trait Delegation: Send + Sync + 'static {
    /// The credentials of a connection to `server` that serves `identity` (an identity's own
    /// instance), or, for `None`, the connection the hub holds in its own name (it lists the
    /// server's tools; no caller's call goes on it). `None` back: the server's requests carry
    /// no token.
    fn credentials(
        &self,
        server: &ServerConfig,
        identity: Option<&str>,
    ) -> Option<Arc<dyn Credentials>>;
}
