//! Helpers for end-to-end tests with real processes of the fault server.
#![allow(dead_code)]

use std::path::PathBuf;
use std::time::Duration;

use mcp_supervisor::core::config::{Config, parse_config};
use mcp_supervisor::{Hub, ServerState, Snapshot};

/// The fault server built beside this test binary (`cargo build --workspace` builds it).
pub fn fault_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let dir = exe.parent().and_then(|d| d.parent()).expect("target dir");
    let bin = dir.join("mcp-fault-server");
    assert!(
        bin.exists(),
        "{} is missing: run `cargo build --workspace` before the tests",
        bin.display()
    );
    bin
}

/// A config from a JSON `mcpServers` object.
pub fn config(servers: serde_json::Value) -> Config {
    let text = serde_json::json!({ "mcpServers": servers }).to_string();
    match parse_config(&text, &|name| std::env::var(name).ok()) {
        Ok(config) => config,
        Err(errors) => panic!("test config is invalid: {errors}"),
    }
}

/// A fresh temporary directory for one test.
pub fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "mcp-supervisor-test-{tag}-{}-{}",
        std::process::id(),
        fastrand_suffix()
    ));
    std::fs::create_dir_all(&dir).expect("create temp dir");
    dir
}

fn fastrand_suffix() -> u64 {
    use std::time::{SystemTime, UNIX_EPOCH};
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
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
        s.state == ServerState::Ready && s.generation > after_generation
    })
    .await
}

/// Whether process `pid` exists and is not a zombie.
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat
                .rfind(')')
                .and_then(|i| stat[i + 1..].split_whitespace().next());
            !matches!(state, Some("Z") | Some("X") | None)
        }
        Err(_) => false,
    }
}

/// Poll (bounded) until `pid` is gone; processes die asynchronously after SIGKILL.
pub async fn gone_within(pid: u32, limit: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline {
        if !alive(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    !alive(pid)
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
