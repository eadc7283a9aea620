//! Interop over streamable HTTP with real third-party servers (SPEC §5, "not delivered"): a server
//! restarted mid-session forgets our session, and the next call must still succeed, on exactly one
//! fresh generation, which the server's timeline shows as its session recovered. The peers are pinned and installed by `scripts/install-test-deps.sh`.

mod interop;
mod real;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use interop::*;
use mcp_supervisor::history::EventKind;
use mcp_supervisor::{CallArgs, Hub, ServerState};
use real::{args, config, temp_dir, text, wait_ready};
use serde_json::json;

/// How long a spawned server may take to listen.
const LISTEN_LIMIT: Duration = Duration::from_secs(30);
/// The server's own call deadline; the test's outer bound is above it.
const CALL_TIMEOUT_MS: u64 = 15_000;
const CALL_LIMIT: Duration = Duration::from_secs(30);

/// A Hub on one HTTP server at `port`, with a fast reconnect policy and no idle probe (so that
/// only the call can find the restart).
fn hub_for(name: &str, port: u16) -> Hub {
    Hub::start(config(json!({
        name: {
            "url": format!("http://127.0.0.1:{port}/mcp"),
            "reconnect": { "initialDelayMs": 50, "maxDelayMs": 400, "maxAttempts": 3 },
            "health": { "intervalMs": 0 },
            "toolCallTimeoutMs": CALL_TIMEOUT_MS,
            "connectTimeoutMs": 20_000
        }
    })))
}

async fn echo(hub: &Hub, public_name: &str, message: &str) -> String {
    let call = hub.call(
        public_name,
        CallArgs {
            arguments: args(json!({ "message": message })),
            ..Default::default()
        },
    );
    match tokio::time::timeout(CALL_LIMIT, call).await {
        Ok(Ok(result)) => {
            assert_ne!(
                result.is_error,
                Some(true),
                "{public_name} answered with an error result: {result:?}"
            );
            text(&result)
        }
        Ok(Err(error)) => panic!("{public_name}(\"{message}\") failed: {error}"),
        Err(_) => panic!("{public_name}(\"{message}\") did not return within {CALL_LIMIT:?}"),
    }
}

/// Start a server, call its echo, restart it on the same port, call again: the second call must
/// succeed on generation + 1.
async fn restart_mid_session(
    name: &str,
    spawn: impl Fn(u16, &Path) -> Server,
    expected: impl Fn(&str) -> String,
) {
    let dir = temp_dir(name);
    let port = free_port();
    let mut first_server = spawn(port, &dir.join("first.log"));
    first_server.wait_listening(port, LISTEN_LIMIT).await;

    let hub = hub_for(name, port);
    let first = wait_ready(&hub, name, 0).await;
    let public = format!("{name}__echo");
    let names: Vec<String> = hub.tools().iter().map(|t| t.public_name.clone()).collect();
    assert!(
        names.contains(&public),
        "{public} is published; got {names:?}"
    );
    assert_eq!(echo(&hub, &public, "before").await, expected("before"));

    // Restart: the new process knows none of the old sessions.
    first_server.kill();
    wait_port_closed(port, Duration::from_secs(5)).await;
    let mut second_server = spawn(port, &dir.join("second.log"));
    second_server.wait_listening(port, LISTEN_LIMIT).await;

    let answer = echo(&hub, &public, "after").await;
    assert_eq!(
        answer,
        expected("after"),
        "the call after the restart is answered by the new process"
    );
    let now = hub.watch(name).expect("configured").borrow().clone();
    assert_eq!(now.state(), ServerState::Ready, "{now:?}");
    assert_eq!(
        now.generation,
        first.generation + 1,
        "the stale session is re-established once, at once: {now:?}\nserver log:\n{}",
        second_server.log_tail()
    );
    // The timeline says so as one `session_recovered` on the new generation, never a loss
    // (the history follows the state watch: looked at until it has, within a bound).
    let recovered = (EventKind::SessionRecovered, first.generation + 1);
    let mut seen = Vec::new();
    for _ in 0..100 {
        seen = hub
            .events(name)
            .iter()
            .map(|e| (e.kind, e.generation))
            .collect();
        if seen.contains(&recovered) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        seen.contains(&recovered) && !seen.iter().any(|(kind, _)| *kind == EventKind::Lost),
        "the timeline shows the session recovered, not a loss: {seen:?}"
    );
    assert!(
        tokio::time::timeout(Duration::from_secs(10), hub.stop())
            .await
            .is_ok(),
        "the hub stops within 10 s"
    );
    drop(second_server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_python_sdk_server_restarted_mid_session_recovers_from_its_404() {
    let python = python();
    let script = fixture("py_server.py");
    restart_mid_session(
        "py",
        |port, log| {
            let mut cmd = Command::new(&python);
            cmd.arg(&script).arg(port.to_string());
            Server::spawn("the Python SDK server", cmd, log)
        },
        |message| message.to_string(),
    )
    .await;
}

#[tokio::test]
async fn server_everything_restarted_mid_session_recovers_from_its_400() {
    let bin = tool("mcp-server-everything");
    restart_mid_session(
        "everything",
        |port, log| {
            let mut cmd = Command::new(&bin);
            cmd.arg("streamableHttp").env("PORT", port.to_string());
            Server::spawn("server-everything", cmd, log)
        },
        |message| format!("Echo: {message}"),
    )
    .await;
}
