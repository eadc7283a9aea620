//! mcp-supervisor keeps Model Context Protocol servers usable when they crash, hang or lose
//! their HTTP session. Embed a [`Hub`] to hold a set of MCP connections: each server gets a
//! supervisor that reconnects it with bounded backoff, and every tool call gets a deadline and
//! safe recovery.
//!
//! The pure rules (config, reconnect policy, naming, failure classification) live in
//! `mcp-supervisor-core` and are re-exported here as [`core`].

#![forbid(unsafe_code)]

pub mod catalog;
pub mod error;
pub mod hub;
pub mod link;
pub mod registry;
pub mod routes;
pub mod supervisor;
pub mod trace;
pub mod upstream;

pub use error::{CallError, Error, Restored};
pub use hub::{CallArgs, Hub, HubEvent, HubOptions, ReloadSummary, ServerStatus};
pub use link::{Downstream, Refuse, RpcError};
pub use mcp_supervisor_core as core;
pub use registry::{PublishedTool, UpstreamTool};
pub use supervisor::{Phase, ServerState, Snapshot, ToolList};
