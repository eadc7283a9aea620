//! The front: the client-facing half of mcp-supervisor, as a library. It serves a supervised
//! [`mcp_supervisor::Hub`] to MCP clients of both protocol eras (the `initialize` handshake, and
//! 2026-07-28 with the client's identity in each request's `_meta`), one JSON-RPC message in and
//! its answer out, whatever carries it.
//!
//! It owns:
//! - client sessions and the dispatch of their requests ([`proxy`]); the 2026-07-28 era's own
//!   methods and input rounds ([`stateless`], [`rounds`]);
//! - naming on the way out (`serve`'s prefixes for tools, prompts and task ids; none in `wrap`),
//!   aggregation of lists, and routing of what servers send back to the client that caused it;
//! - what each client asked of a server it shares with others, its subscriptions and log level
//!   ([`asked`]), so that each gets what it asked for;
//! - sealed session ids ([`seal`]): a client's [`Session`] sealed with a key replicas share, so
//!   that any of them resumes it;
//! - the `search` tool exposure ([`exposure`]) and the call counters ([`metrics`]);
//! - one framing, stdio lines ([`stdio`]), so that a host serves its hub in a few lines
//!   (`examples/stdio_host.rs`).
//! - with the `http` feature, streamable HTTP at `/mcp` (`http`: its session store of sealed
//!   ids, related messages ordered before the answer, the 2026-07-28 POST checks), so that a
//!   host serves its hub over HTTP in a few lines too (`examples/http_host.rs`).
//!
//! It never supervises: servers, generations, retries and the registry are the hub's. It never
//! opens a socket: the host binds, listens and guards (Host, Origin, tokens), and only serves
//! what this crate hands it. A host that only calls tools does not depend on this crate.

#![forbid(unsafe_code)]

pub mod access;
pub mod asked;
pub mod audit;
#[cfg(feature = "http")]
pub mod auth;
pub mod caller;
pub mod client;
mod declared;
mod dispatch;
mod events;
pub mod exposure;
mod face;
mod fan_out;
mod handshake;
#[cfg(feature = "http")]
pub mod http;
mod json;
mod listen;
pub mod message;
pub mod metrics;
mod owners;
mod prompts;
pub mod proxy;
mod quiet;
pub mod rate;
mod reload;
mod resources;
pub mod rounds;
mod rules;
pub mod seal;
pub mod session;
mod shared;
pub mod stateless;
pub mod stdio;
mod tasks;
mod tools;
mod trail;

pub use client::{Client, OUTBOX, Scope, Undelivered};
pub use handshake::{SESSION_VERSIONS, STATELESS_VERSION, routed_capabilities};
pub use json::string_of;
pub use message::{Kind, Message, error_text};
pub use proxy::Proxy;
pub use reload::Reloaded;
pub use session::Session;

use std::sync::Arc;

use mcp_supervisor::core::config::Config;
use mcp_supervisor::hub::default_handshake;
use mcp_supervisor::{Hub, HubOptions};

/// Whether the proxy fronts many servers (`serve`) or stands in for one (`wrap`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Many servers behind one: names prefixed, lists aggregated, what the proxy owns answered
    /// by it.
    Aggregate,
    /// Fully transparent: what the proxy does not own goes to the server as it came.
    Transparent,
}

/// Start a hub on `config` and its front, as `serve` ([`Mode::Aggregate`]) or `wrap`
/// ([`Mode::Transparent`]) does. `options` gives the catalogs' folder and the trace context; its
/// `client` and `handshake` are the front's to set: a server's request that no client's call
/// caused goes to the only client, and the servers are opened in the handshake era in `serve`
/// (its clients' resource subscriptions live on the servers' sessions) or in the client's own
/// era in `wrap` (their handshakes wait for the client's `initialize`). The tool exposure is the
/// config's. Serve it with [`stdio::run`] or a transport of the host's own over
/// [`Proxy::handle`]; stop it with `proxy.hub().stop()`.
pub fn start(config: Config, mode: Mode, options: HubOptions) -> Arc<Proxy> {
    let unrelated = events::Unrelated::new();
    let options = HubOptions {
        client: unrelated.clone(),
        handshake: match mode {
            Mode::Transparent => None,
            Mode::Aggregate => Some(default_handshake(&routed_capabilities())),
        },
        ..options
    };
    let exposure = config.tool_exposure;
    let rules = crate::rules::Rules::of(&config);
    let hub = Arc::new(Hub::start_with_options(config, options));
    let proxy = Proxy::new(hub, mode);
    proxy.set_exposure(exposure);
    *crate::json::lock(&proxy.access) = Arc::new(rules);
    unrelated.attach(&proxy);
    proxy
}
