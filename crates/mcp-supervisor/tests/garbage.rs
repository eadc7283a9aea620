//! A stdio server that writes a non-JSON line to stdout and never replies (the fault server's
//! `garbage` tool), through a real `Hub`, on both call paths (rmcp's typed client, and the
//! pass-through lane of `Hub::call_json`): the call must end with "timed out after 1000 ms" (its
//! `toolCallTimeoutMs`), nothing may panic, and the server must answer again afterwards, on the
//! same generation or a recovered one.

mod real;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use mcp_supervisor::{CallArgs, CallError, Hub, ServerState};
use real::*;
use serde_json::{Value, json};

/// A bound on the whole call, far above its 1000 ms deadline: the call must come back at all.
const CALL_BOUND: Duration = Duration::from_secs(10);

/// Panics anywhere in this process (a spawned task's panic does not fail the test by itself).
static PANICS: AtomicUsize = AtomicUsize::new(0);

fn count_panics() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        PANICS.fetch_add(1, Ordering::SeqCst);
        previous(info);
    }));
}

/// Which way a call goes to the server.
#[derive(Clone, Copy, Debug)]
enum Way {
    /// `Hub::call`: rmcp's typed client.
    Typed,
    /// `Hub::call_json`: the stdio lane, JSON text in and out.
    Json,
}

/// Call `tool` the given way; the text of its result.
async fn call(hub: &Hub, way: Way, tool: &str, arguments: Value) -> Result<String, CallError> {
    match way {
        Way::Typed => {
            let args = CallArgs {
                arguments: args(arguments),
                ..Default::default()
            };
            hub.call(tool, args).await.map(|result| text(&result))
        }
        Way::Json => {
            let params = json!({ "name": tool, "arguments": arguments });
            let params = serde_json::value::to_raw_value(&params).expect("params");
            let result = hub.call_json(tool, &params, CallArgs::default()).await?;
            let result: Value = serde_json::from_str(result.get()).expect("a JSON result");
            Ok(result["content"][0]["text"]
                .as_str()
                .unwrap_or_default()
                .to_owned())
        }
    }
}

#[tokio::test]
async fn garbage_on_stdout_ends_the_call_at_its_deadline_and_the_server_stays_usable() {
    garbage_call_ends_at_its_deadline(Way::Typed).await;
}

#[tokio::test]
async fn garbage_on_stdout_ends_a_pass_through_call_at_its_deadline_too() {
    garbage_call_ends_at_its_deadline(Way::Json).await;
}

async fn garbage_call_ends_at_its_deadline(way: Way) {
    count_panics();
    let hub = Hub::start(config(json!({
        "fault": {
            "command": fault_bin(),
            "toolCallTimeoutMs": 1000,
            "reconnect": { "initialDelayMs": 50, "maxDelayMs": 400, "maxAttempts": 5 }
        }
    })));
    let first = wait_ready(&hub, "fault", 0).await;

    let outcome = tokio::time::timeout(CALL_BOUND, call(&hub, way, "fault__garbage", json!({})))
        .await
        .expect("the garbage call returned (it must end at its 1000 ms deadline)");
    match outcome {
        Err(CallError::TimedOut {
            server,
            tool,
            after_ms,
        }) => {
            assert_eq!(server, "fault");
            assert_eq!(tool, "garbage");
            assert_eq!(after_ms, 1000, "the deadline is toolCallTimeoutMs");
        }
        other => panic!("{way:?}: expected TimedOut after 1000 ms, got {other:?}"),
    }

    // Usable afterwards: the same generation if the garbage line was skipped, or a recovered one
    // if it ended the connection. Either way `echo` answers, and the server is ready.
    let echo = tokio::time::timeout(
        Duration::from_secs(20),
        call(
            &hub,
            way,
            "fault__echo",
            json!({"message": "after garbage"}),
        ),
    )
    .await
    .expect("echo returned in time")
    .expect("echo answers after the garbage call");
    assert_eq!(echo, "after garbage");
    let now = wait_for(&hub, "fault", Duration::from_secs(20), |s| {
        s.state() == ServerState::Ready
    })
    .await;
    assert!(now.generation >= first.generation);
    println!(
        "garbage ({way:?}): timed out after 1000 ms; generation {} -> {}",
        first.generation, now.generation
    );

    // A second garbage call behaves the same (nothing was left half-broken by the first).
    let again = tokio::time::timeout(CALL_BOUND, call(&hub, way, "fault__garbage", json!({})))
        .await
        .expect("the second garbage call returned");
    assert!(
        matches!(again, Err(CallError::TimedOut { after_ms: 1000, .. })),
        "{again:?}"
    );
    hub.stop().await;
    assert_eq!(PANICS.load(Ordering::SeqCst), 0, "nothing panicked");
    if let Some(pid) = now.pid() {
        assert!(
            gone_within(pid, Duration::from_secs(5)).await,
            "stop ends the server"
        );
    }
}
