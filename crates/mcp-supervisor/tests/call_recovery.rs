//! End to end: calls that survive crashes, restarts, dropped sessions and hangs, through real
//! fault-server processes over stdio and streamable HTTP on loopback (SPEC §5, §6).

mod real;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use mcp_supervisor::{CallArgs, CallError, Hub, Restored, ServerState};
use real::*;
use serde_json::json;

/// A fault server over HTTP that is killed when the test ends, however it ends.
struct HttpServer {
    child: Child,
    port: u16,
}

impl HttpServer {
    async fn start(port: u16, extra: &[&str]) -> Self {
        let child = Command::new(fault_bin())
            .args(["--http", &format!("127.0.0.1:{port}")])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the fault server");
        let server = Self { child, port };
        for _ in 0..500 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return server;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the fault server did not listen on port {port}");
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.kill();
    }
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    listener.local_addr().expect("local addr").port()
}

fn policy() -> serde_json::Value {
    json!({ "initialDelayMs": 50, "maxDelayMs": 400, "maxAttempts": 10 })
}

#[tokio::test]
async fn an_http_server_restarted_mid_session_answers_the_next_call() {
    let port = free_port();
    let mut server = HttpServer::start(port, &[]).await;
    let hub = Hub::start(config(
        json!({ "web": { "url": server.url(), "reconnect": policy() } }),
    ));
    let first = wait_ready(&hub, "web", 0).await;
    assert_eq!(
        text(
            &hub.call("web__echo", echo("one"))
                .await
                .expect("first call")
        ),
        "one"
    );

    server.kill();
    let _server = HttpServer::start(port, &[]).await;
    let result = hub
        .call("web__echo", echo("two"))
        .await
        .expect("the next call heals");
    assert_eq!(text(&result), "two");
    let now = hub.watch("web").expect("server").borrow().clone();
    assert_eq!(
        now.generation,
        first.generation + 1,
        "exactly one reconnect"
    );
    hub.stop().await;
}

#[tokio::test]
async fn a_dropped_http_session_404_is_re_established_at_once() {
    let port = free_port();
    let _server = HttpServer::start(port, &[]).await;
    let hub = Hub::start(config(
        json!({ "web": { "url": format!("http://127.0.0.1:{port}/mcp"), "reconnect": policy() } }),
    ));
    let first = wait_ready(&hub, "web", 0).await;
    hub.call("web__drop_sessions", CallArgs::default())
        .await
        .expect("drop_sessions replies");
    let result = hub
        .call("web__echo", echo("after drop"))
        .await
        .expect("recovers from 404");
    assert_eq!(text(&result), "after drop");
    let now = hub.watch("web").expect("server").borrow().clone();
    assert_eq!(now.generation, first.generation + 1);
    assert_eq!(now.state(), ServerState::Ready);
    hub.stop().await;
}

#[tokio::test]
async fn a_down_http_server_fails_calls_fast_keeps_its_tools_and_heals_when_back() {
    let port = free_port();
    let mut server = HttpServer::start(port, &[]).await;
    let hub = Hub::start(config(json!({
        "web": { "url": server.url(), "reconnect": { "initialDelayMs": 300, "maxDelayMs": 1000, "maxAttempts": 20 } }
    })));
    wait_ready(&hub, "web", 0).await;
    let tools_before = hub.tools().len();
    server.kill();

    let failed = hub
        .call(
            "web__echo",
            CallArgs {
                timeout: Some(Duration::from_millis(200)),
                ..echo("down")
            },
        )
        .await
        .expect_err("the server is down");
    let message = failed.to_string();
    assert!(
        message.contains("\"web\""),
        "the error names the server: {message}"
    );
    assert!(
        matches!(
            failed,
            CallError::ReconnectFailed { .. }
                | CallError::NotReady { .. }
                | CallError::NotDelivered { .. }
        ),
        "a refused connection did not run the call: {failed:?}"
    );
    assert_eq!(
        hub.tools().len(),
        tools_before,
        "tools stay registered during the outage"
    );

    let _server = HttpServer::start(port, &[]).await;
    let result = hub
        .call("web__echo", echo("back"))
        .await
        .expect("the next call heals");
    assert_eq!(text(&result), "back");
    hub.stop().await;
}

#[tokio::test]
async fn a_stdio_crash_mid_call_of_a_non_idempotent_tool_runs_it_once_and_says_the_outcome_is_unknown()
 {
    let dir = temp_dir("count");
    let ledger = dir.join("ledger");
    let hub = Hub::start(config(json!({
        "fault": { "command": fault_bin(), "args": ["--ledger", ledger], "reconnect": policy() }
    })));
    let first = wait_ready(&hub, "fault", 0).await;
    let error = hub
        .call(
            "fault__count",
            CallArgs {
                arguments: args(json!({"id": "call-1", "crash_before_reply": true})),
                ..Default::default()
            },
        )
        .await
        .expect_err("the server died before replying");
    match &error {
        CallError::OutcomeUnknown { restored, .. } => {
            assert!(
                matches!(restored, Restored::Yes { generation } if *generation > first.generation),
                "{error}"
            );
        }
        other => panic!("expected outcome unknown, got {other:?}"),
    }
    assert!(error.to_string().contains("may have run"), "{error}");
    assert_eq!(
        ledger_lines(&ledger),
        ["call-1"],
        "a non-idempotent tool is never run twice by us"
    );
    hub.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_stdio_crash_mid_call_of_an_idempotent_tool_is_replayed_and_succeeds() {
    let dir = temp_dir("count-idem");
    let ledger = dir.join("ledger");
    let hub = Hub::start(config(json!({
        "fault": { "command": fault_bin(), "args": ["--ledger", ledger], "reconnect": policy() }
    })));
    wait_ready(&hub, "fault", 0).await;
    let result = hub
        .call(
            "fault__count_idempotent",
            CallArgs {
                arguments: args(json!({"id": "call-2", "crash_before_reply": true})),
                ..Default::default()
            },
        )
        .await
        .expect("replayed on the fresh generation");
    assert_eq!(text(&result), "call-2");
    assert_eq!(
        ledger_lines(&ledger),
        ["call-2", "call-2"],
        "ran once before the crash and once on replay"
    );
    hub.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_hung_call_times_out_at_its_deadline_and_the_probe_recovers_the_server() {
    let hub = Hub::start(config(json!({
        "fault": {
            "command": fault_bin(),
            "reconnect": policy(),
            "health": { "intervalMs": 200, "timeoutMs": 200, "failures": 2 }
        }
    })));
    let first = wait_ready(&hub, "fault", 0).await;
    let error = hub
        .call(
            "fault__block",
            CallArgs {
                arguments: args(json!({"ms": 60000})),
                timeout: Some(Duration::from_millis(300)),
                ..Default::default()
            },
        )
        .await
        .expect_err("the blocked server cannot answer");
    assert!(
        matches!(error, CallError::TimedOut { after_ms: 300, .. }),
        "{error:?}"
    );
    assert!(
        error.to_string().contains("timed out after 300 ms"),
        "{error}"
    );
    // The timeout triggered a probe at once; with the idle probe, 2 misses end the generation.
    let second = wait_ready(&hub, "fault", first.generation).await;
    assert!(
        gone_within(first.pid().unwrap_or(0), Duration::from_secs(5)).await,
        "the hung process was killed"
    );
    let result = hub
        .call("fault__echo", echo("alive"))
        .await
        .expect("recovered");
    assert_eq!(text(&result), "alive");
    assert!(second.generation > first.generation);
    hub.stop().await;
}

#[tokio::test]
async fn a_server_that_blocks_its_event_loop_while_calls_keep_arriving_is_found_dead() {
    let hub = Hub::start(config(json!({
        "fault": {
            "command": fault_bin(),
            "reconnect": policy(),
            // The idle probe is off: only the calls' own timeouts can find it.
            "health": { "intervalMs": 0, "timeoutMs": 200, "failures": 3 }
        }
    })));
    let first = wait_ready(&hub, "fault", 0).await;
    let blocked = hub.call(
        "fault__block",
        CallArgs {
            arguments: args(json!({"ms": 60000})),
            timeout: Some(Duration::from_millis(200)),
            ..Default::default()
        },
    );
    let _ = blocked.await;
    // Back-to-back calls, each timing out: with the probes they trigger, three misses in a row.
    let mut recovered = false;
    for _ in 0..20 {
        match hub
            .call(
                "fault__echo",
                CallArgs {
                    timeout: Some(Duration::from_millis(200)),
                    ..echo("x")
                },
            )
            .await
        {
            Ok(_) => {
                recovered = true;
                break;
            }
            Err(_) => continue,
        }
    }
    assert!(
        recovered,
        "the blocked server was replaced and answers again"
    );
    let now = hub.watch("fault").expect("server").borrow().clone();
    assert!(now.generation > first.generation);
    hub.stop().await;
}

/// SPEC §5: words are evidence only where the transport speaks. A JSON-RPC error that answers the
/// call's own id is outcome 2 whatever it says: a tool that did its work and then says "Session
/// not found" (of a browser, tmux or database session of its own) is not run again, its server
/// is not restarted, and the caller gets its answer.
async fn an_answered_error_that_mentions_a_session_is_the_servers_answer(
    server: serde_json::Value,
    ledger: &std::path::Path,
) {
    let hub = Hub::start(config(json!({ "fault": server })));
    let first = wait_ready(&hub, "fault", 0).await;
    for (n, words) in [
        "Session not found",
        "Bad Request: No valid session ID provided",
        "Server not initialized",
    ]
    .into_iter()
    .enumerate()
    {
        let error = hub
            .call(
                "fault__count",
                CallArgs {
                    arguments: args(json!({"id": format!("call-{n}"), "fail_with": words})),
                    ..Default::default()
                },
            )
            .await
            .expect_err("the tool answered with an error");
        match &error {
            CallError::ServerError { message, .. } => {
                assert!(message.contains(words), "{error}")
            }
            other => panic!("expected the server's own error, got {other:?}"),
        }
        assert!(!error.to_string().contains("did not run"), "{error}");
    }
    assert_eq!(
        ledger_lines(ledger),
        ["call-0", "call-1", "call-2"],
        "each call ran exactly once"
    );
    let now = hub.status();
    let fault = now
        .iter()
        .find(|s| s.name == "fault")
        .expect("fault listed");
    assert_eq!(
        fault.generation, first.generation,
        "an answered error never restarts the server"
    );
    hub.stop().await;
}

#[tokio::test]
async fn a_stdio_tools_error_that_says_session_not_found_is_not_run_twice() {
    let dir = temp_dir("session-words-stdio");
    let ledger = dir.join("ledger");
    an_answered_error_that_mentions_a_session_is_the_servers_answer(
        json!({ "command": fault_bin(), "args": ["--ledger", ledger], "reconnect": policy() }),
        &ledger,
    )
    .await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn an_http_tools_error_that_says_session_not_found_is_not_run_twice() {
    let dir = temp_dir("session-words-http");
    let ledger = dir.join("ledger");
    let port = free_port();
    let ledger_arg = ledger.to_string_lossy().into_owned();
    let server = HttpServer::start(port, &["--ledger", &ledger_arg]).await;
    an_answered_error_that_mentions_a_session_is_the_servers_answer(
        json!({ "url": server.url(), "reconnect": policy() }),
        &ledger,
    )
    .await;
    drop(server);
    let _ = std::fs::remove_dir_all(dir);
}
