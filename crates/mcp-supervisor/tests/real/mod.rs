//! Helpers for end-to-end tests with real processes of the fault server.
#![allow(dead_code)] // each test binary uses a different part

#[allow(unused_imports)] // each test binary uses a different part
pub use mcp_supervisor_testkit::{alive, fault_bin, gone_within, temp_dir};

use std::time::Duration;

use mcp_supervisor::core::config::{Config, parse_config};
use mcp_supervisor::{Hub, ServerState, Snapshot};

/// A config from a JSON `mcpServers` object.
pub fn config(servers: serde_json::Value) -> Config {
    let text = serde_json::json!({ "mcpServers": servers }).to_string();
    match parse_config(&text, &|name| std::env::var(name).ok()) {
        Ok(config) => config,
        Err(errors) => panic!("test config is invalid: {errors}"),
    }
}

/// Wait until `server`'s snapshot satisfies `pred`, at most `limit`.
pub async fn wait_for(
    hub: &Hub,
    server: &str,
    limit: Duration,
    pred: impl Fn(&Snapshot) -> bool,
) -> Snapshot {
    let mut watch = hub.watch(server).expect("server is configured");
    let found = match tokio::time::timeout(limit, watch.wait_for(|s| pred(s))).await {
        Ok(Ok(snapshot)) => Some(snapshot.clone()),
        _ => None,
    };
    match found {
        Some(snapshot) => snapshot,
        None => panic!(
            "server {server} did not reach the expected state within {limit:?}; now {:?}",
            watch.borrow().clone()
        ),
    }
}

pub async fn wait_ready(hub: &Hub, server: &str, after_generation: u64) -> Snapshot {
    wait_for(hub, server, Duration::from_secs(20), |s| {
        s.state() == ServerState::Ready && s.generation > after_generation
    })
    .await
}

/// The text of a tool result's first content item.
pub fn text(result: &rmcp::model::CallToolResult) -> String {
    result
        .content
        .first()
        .and_then(|c| c.as_text())
        .map(|t| t.text.clone())
        .unwrap_or_default()
}

pub fn args(value: serde_json::Value) -> Option<rmcp::model::JsonObject> {
    match value {
        serde_json::Value::Object(map) => Some(map),
        _ => None,
    }
}

/// `CallArgs` for `echo` with `message`.
pub fn echo(message: &str) -> mcp_supervisor::CallArgs {
    mcp_supervisor::CallArgs {
        arguments: args(serde_json::json!({ "message": message })),
        ..Default::default()
    }
}

/// The lines of a fault server's ledger (none when it does not exist yet).
pub fn ledger_lines(path: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}
