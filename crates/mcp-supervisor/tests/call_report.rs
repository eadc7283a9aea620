//! What a call says of itself (SPEC §5, §14's audit): whether it was sent, how often, on which
//! generations, and whether the server may have run it, against the scripted fake on a paused
//! clock. The fake's log is the truth each report is held against.

#[path = "support/fake.rs"]
mod fake;

use std::time::Duration;

use fake::*;
use mcp_supervisor::core::classify::Failure;
use mcp_supervisor::core::config::ServerConfig;
use mcp_supervisor::{CallArgs, CallError};
use rmcp::model::Tool;

/// "read" is read-only, "write" is not.
fn offered() -> Vec<Tool> {
    vec![read_only_tool("read"), tool("write")]
}

/// "srv" with default policies and no idle probes.
fn config() -> ServerConfig {
    let mut s = server();
    s.health.interval = None;
    s
}

fn healthy() -> Gen {
    Gen::ok(offered()).close_after(ms(10))
}

/// A transport error with the connection still open: the call path pings to learn more.
fn blip() -> Failure {
    Failure::TransportError {
        message: "stream reset".into(),
        connection_closed: false,
    }
}

/// SPEC §5: after an unclear failure with the server alive, the call is sent again in place;
/// when its generation is lost before that and no new one comes within the deadline, the call
/// went out once, so the error must not say that nothing was sent (`NotReady`): it names the
/// first failure and the failed reconnect.
#[tokio::test(start_paused = true)]
async fn a_call_sent_once_whose_resend_finds_no_generation_does_not_say_nothing_was_sent() {
    let fake = Fake::new(
        vec![
            healthy()
                .call_to("read", Reply::Now(Err(blip())))
                // The ping answers (alive), but the process dies while it is on its way.
                .ping(Reply::After(ms(100), Ok(()))),
        ],
        Gen::open_fails("spawn failed: no such file"),
    );
    let hub = start(config(), &fake);
    ready(&hub, 1).await;
    let args = CallArgs {
        timeout: Some(Duration::from_secs(2)),
        ..CallArgs::default()
    };
    let (outcome, ()) = tokio::join!(bounded("the call", hub.call("srv__read", args)), async {
        until(&fake, since_start(&fake) + ms(50)).await;
        fake.die(1);
    });
    assert_eq!(
        fake.calls(),
        [(1, "read".to_string())],
        "sent once, never again"
    );
    assert_eq!(fake.pings().len(), 1);
    match outcome {
        Err(error @ CallError::ReconnectFailed { .. }) => {
            let text = error.to_string();
            assert!(text.contains("stream reset"), "the first failure: {text}");
            assert!(
                text.contains("spawn failed: no such file"),
                "the reconnect's error: {text}"
            );
        }
        other => panic!("expected a failed reconnect after one send, got {other:?}"),
    }
    stop(&hub).await;
}

/// How long since the fake was made.
fn since_start(fake: &Fake) -> Duration {
    tokio::time::Instant::now() - fake.start()
}
