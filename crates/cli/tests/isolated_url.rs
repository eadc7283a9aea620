//! An isolated `url` server across replicas (SPEC §11, §12): each client session's own upstream
//! session is opened at its `initialize` and carried in its sealed session id, so a replica
//! that did not open the session goes on with the same upstream session. The upstream is the
//! official Python SDK (`mcp` 2.3.0) over streamable HTTP, keeping state per session
//! (`tests/py/session_server.py`):
//! - two client sessions on one replica have two upstream sessions: one never sees the other's
//!   state;
//! - a session that moves to another replica finds its upstream state there, on the same
//!   upstream session id;
//! - a replica that stops (SIGTERM, drain) lets go of its sessions without ending their
//!   upstream sessions, which another replica resumes;
//! - a client's DELETE ends its upstream session too (the Python server then refuses the id),
//!   and no other;
//! - a replica that resumes a session before its own connection to the server is up (the
//!   server frozen by SIGSTOP) goes on with the upstream session at the session's first need.

mod interop_support;
mod support;

use std::process::Command;
use std::time::Duration;

use base64::Engine;
use interop_support::{Proc, py_script, python};
use mcp_supervisor_testkit::rawhttp::RawHttp;
use mcp_supervisor_testkit::{free_port, temp_dir};
use serde_json::{Value, json};
use support::*;

const LIMIT: Duration = Duration::from_secs(30);

fn signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status();
    assert!(
        matches!(status, Ok(s) if s.success()),
        "kill -{signal} {pid}"
    );
}

async fn replica(config: &std::path::Path, key: &str) -> Running {
    let proxy = start_replica(config, key).await;
    status_until(&proxy, LIMIT, |s| state_is(s, "notes", "ready")).await;
    proxy
}

/// A replica, listening (its servers may not be ready yet).
async fn start_replica(config: &std::path::Path, key: &str) -> Running {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    Running::start(
        &[
            "serve",
            "--config",
            &path_str(config),
            "--http",
            &addr,
            "--no-catalog",
            "--drain-ms",
            "200",
        ],
        port,
        &[("MCP_SUPERVISOR_SESSION_KEY", key)],
    )
    .await
}

/// A tool of the isolated server, called on `client`'s session: its text.
async fn call(client: &RawHttp, tool: &str, arguments: Value) -> String {
    let (result, _) = client
        .request(
            "tools/call",
            json!({ "name": format!("notes__{tool}"), "arguments": arguments }),
        )
        .await
        .unwrap_or_else(|e| panic!("notes__{tool}: {e}"));
    assert_ne!(result["isError"], true, "notes__{tool}: {result}");
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text in {result}"))
        .to_string()
}

/// The HTTP status the Python server gives a `ping` on upstream session `id`.
async fn upstream_status(port: u16, id: &str) -> u16 {
    reqwest::Client::new()
        .post(format!("http://127.0.0.1:{port}/mcp"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .header("mcp-session-id", id)
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#)
        .send()
        .await
        .expect("POST to the Python server")
        .status()
        .as_u16()
}

fn resumed(proxy: &Running) -> f64 {
    let port = proxy.port;
    interop_support::http_get(port, "/metrics")
        .and_then(|text| interop_support::metric(&text, "mcp_supervisor_sessions_resumed_total"))
        .unwrap_or(-1.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_isolated_url_servers_upstream_session_moves_with_its_client_session() {
    let dir = temp_dir("isolated-url");
    let upstream_port = free_port();
    let mut cmd = Command::new(python());
    cmd.arg(py_script("session_server.py"))
        .arg(upstream_port.to_string());
    let mut upstream = Proc::spawn("python session server", cmd, &dir);
    upstream.wait_listening(upstream_port, LIMIT);

    let config = dir.join("servers.json");
    write_config(
        &config,
        json!({ "notes": {
            "url": format!("http://127.0.0.1:{upstream_port}/mcp"),
            "isolation": "session",
            // The handshake era: the 2026-07-28 era has no sessions to carry.
            "protocolVersion": "2025-11-25",
        } }),
    );
    let key = base64::engine::general_purpose::STANDARD.encode([42u8; 32]);
    let mut a = replica(&config, &key).await;
    let b = replica(&config, &key).await;

    // Two sessions on replica A: two upstream sessions, each with its own state.
    let one = RawHttp::connect(&a.url("/mcp"), LIMIT)
        .await
        .expect("session one");
    let two = RawHttp::connect(&a.url("/mcp"), LIMIT)
        .await
        .expect("session two");
    let (u1, u2) = (
        call(&one, "session", json!({})).await,
        call(&two, "session", json!({})).await,
    );
    assert!(u1 != "none" && u2 != "none", "{u1} {u2}");
    assert_ne!(u1, u2, "two client sessions, two upstream sessions");
    assert_eq!(
        call(&one, "remember", json!({ "value": "alpha" })).await,
        "ok"
    );
    assert_eq!(
        call(&two, "remember", json!({ "value": "beta" })).await,
        "ok"
    );
    assert_eq!(call(&one, "recall", json!({})).await, "alpha");
    assert_eq!(call(&two, "recall", json!({})).await, "beta");
    // Its id carries the upstream session: sealed, it says nothing of it in clear.
    let id = one.session().expect("a session id").to_string();
    assert!(!id.contains(&u1), "the upstream id is sealed");

    // Session one moves to replica B: the same upstream session, its state there.
    let one_b = one.moved_to(&b.url("/mcp"));
    assert_eq!(call(&one_b, "session", json!({})).await, u1);
    assert_eq!(call(&one_b, "recall", json!({})).await, "alpha");
    assert!(resumed(&b) >= 1.0, "B counts the resumption");

    // Replica A stops (drains): it lets go of session two without ending its upstream session,
    // which B resumes with its state.
    a.signal("TERM");
    assert!(a.wait_exit(LIMIT).await.is_some(), "replica A stops");
    assert_eq!(
        upstream_status(upstream_port, &u2).await,
        200,
        "A left u2 open"
    );
    let two_b = two.moved_to(&b.url("/mcp"));
    assert_eq!(call(&two_b, "session", json!({})).await, u2);
    assert_eq!(call(&two_b, "recall", json!({})).await, "beta");

    // Session one ends (DELETE on B): its upstream session ends too, and session two's stays.
    one_b.close().await.expect("DELETE session one");
    let mut status = 0;
    for _ in 0..100 {
        status = upstream_status(upstream_port, &u1).await;
        if status == 404 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        status, 404,
        "the client's DELETE ended its upstream session"
    );
    assert_eq!(upstream_status(upstream_port, &u2).await, 200);
    assert_eq!(call(&two_b, "recall", json!({})).await, "beta");

    // A replica that resumes a session before it knows the server (its own connection to it
    // is not up yet: the server is frozen) resumes the upstream session at the session's first
    // need of it.
    signal(upstream.pid(), "STOP");
    let c = start_replica(&config, &key).await;
    let two_c = two.moved_to(&c.url("/mcp"));
    two_c
        .request("ping", json!({}))
        .await
        .expect("ping on replica C, the server still frozen");
    signal(upstream.pid(), "CONT");
    status_until(&c, LIMIT, |s| state_is(s, "notes", "ready")).await;
    assert_eq!(call(&two_c, "session", json!({})).await, u2);
    assert_eq!(call(&two_c, "recall", json!({})).await, "beta");

    drop((b, c));
    upstream.stop();
    let _ = std::fs::remove_dir_all(dir);
}
