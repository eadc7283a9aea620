//! The pure logic of mcp-supervisor: the config, the reconnect and health policies, public tool
//! names, pinned tool definitions and the failure classifier, as plain values and functions. It must never depend on tokio,
//! rmcp or anything that does I/O, reads a clock or draws a random number.

#![forbid(unsafe_code)]

pub mod authorize;
pub mod classify;
pub mod config;
pub mod filter;
pub mod headers;
pub mod members;
pub mod naming;
pub mod pin;
pub mod policy;
pub mod result_cap;
pub mod skim;
pub mod tool_search;
pub mod versions;

pub use classify::{
    AfterProbe, Failure, Recovery, ToolSafety, Verdict, after_probe, classify, recovery,
};
pub use config::{
    Config, ConfigErrors, Problem, Secret, ServerConfig, TransportConfig, parse_config,
};
pub use naming::{NameKind, NamingConfig, NamingMode, assign, prefixed_name};
pub use policy::{Budget, Decision, HealthPolicy, ReconnectPolicy};
