//! mcp-supervisor keeps Model Context Protocol servers usable when they crash, hang or lose
//! their HTTP session. Embed a [`Hub`] to hold a set of MCP connections: each server gets a
//! supervisor that reconnects it with bounded backoff, and every tool call gets a deadline and
//! safe recovery.
//!
//! The pure rules (config, reconnect policy, naming, failure classification) live in
//! `mcp-supervisor-core` and are re-exported here as [`core`].
//!
//! A host's whole use of it: a config in the familiar `mcpServers` shape, a hub, calls by public
//! name (`<server>__<tool>`), and a stop that ends every server process.
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use mcp_supervisor::core::config::parse_config;
//! use mcp_supervisor::{CallArgs, CallError, Hub};
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let config = parse_config(
//!     r#"{ "mcpServers": { "files": { "command": "my-mcp-server", "args": ["--root", "."] } } }"#,
//!     &|name| std::env::var(name).ok(),
//! )?;
//! let hub = Hub::start(config);
//! hub.wait_ready(Duration::from_secs(10)).await;
//! for tool in hub.tools().iter() {
//!     println!("{} (from {})", tool.public_name, tool.server);
//! }
//! let args = CallArgs {
//!     arguments: serde_json::json!({ "path": "README.md" }).as_object().cloned(),
//!     timeout: Some(Duration::from_secs(30)),
//!     ..CallArgs::default()
//! };
//! match hub.call("files__read", args).await {
//!     Ok(result) => println!("{:?}", result.content),
//!     // The error says whether the tool ran, and what to do next.
//!     Err(error @ CallError::OutcomeUnknown { .. }) => eprintln!("may have run: {error}"),
//!     Err(error) => eprintln!("{error}"),
//! }
//! hub.stop().await;
//! # Ok(())
//! # }
//! ```
//!
//! A host binary that calls [`guard::run_if_asked`] first thing in `main` (and
//! [`guard::shutdown`] at its end) also gets the orphan guard: its stdio servers are ended even if
//! the host is killed with SIGKILL. One that also calls [`sandbox::run_if_asked`] there can
//! run servers with a `sandbox` in their config (SPEC §16).
//!
//! `examples/host.rs` is a runnable host loop (two servers, a deadline, a `kill -9` healed by the
//! next call, a clean stop); `examples/client_handler.rs` answers the servers' own requests.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod auth;
pub mod catalog;
pub mod error;
mod groups;
pub mod guard;
pub mod history;
pub mod hub;
pub mod link;
pub mod pins;
pub mod registry;
pub mod routes;
pub mod sandbox;
pub mod supervisor;
pub mod trace;
pub mod upstream;
mod users;

pub use error::{CallError, Error, HandshakeError, OpenError, Restored};
pub use hub::{CallArgs, Health, Hub, HubEvent, HubOptions, ReloadSummary, ServerStatus};
pub use link::{Downstream, Refuse, RpcError};
pub use mcp_supervisor_core as core;
pub use registry::{PublishedTool, UpstreamTool};
pub use supervisor::{CallReport, Loss, LossKind, Phase, ServerState, Snapshot, ToolList};
