//! What a call says of itself (SPEC §5, §14's audit): whether it was sent, how often, on which
//! generations, and whether the server may have run it, against the scripted fake on a paused
//! clock. The fake's log is the truth each report is held against.

#[path = "support/fake.rs"]
mod fake;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use fake::*;
use mcp_supervisor::core::classify::Failure;
use mcp_supervisor::core::config::ServerConfig;
use mcp_supervisor::{CallArgs, CallError, CallReport, ServerState};
use rmcp::model::Tool;
use tokio_util::sync::CancellationToken;

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
    let (mut args, sink) = reporting();
    args.timeout = Some(Duration::from_secs(2));
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
    // Sent once, on generation 1, and lost unclearly: it may have run.
    assert_eq!(left(&sink), report(1, &[1], true));
    stop(&hub).await;
}

/// Call args that ask for a report, and where it comes.
fn reporting() -> (CallArgs, Arc<OnceLock<CallReport>>) {
    let report = Arc::new(OnceLock::new());
    let args = CallArgs {
        report: Some(report.clone()),
        ..CallArgs::default()
    };
    (args, report)
}

/// The report a call left, once it ended.
fn left(report: &OnceLock<CallReport>) -> CallReport {
    report.get().cloned().expect("the call left its report")
}

fn report(attempts: u32, generations: &[u64], may_have_run: bool) -> CallReport {
    CallReport {
        attempts,
        replayed: attempts > 1,
        generations: generations.to_vec(),
        may_have_run,
    }
}

#[tokio::test(start_paused = true)]
async fn a_call_answered_at_once_reports_one_send_on_its_generation() {
    let fake = Fake::new(vec![healthy()], healthy());
    let hub = start(config(), &fake);
    ready(&hub, 1).await;
    let (args, sink) = reporting();
    let result = bounded("the call", hub.call("srv__write", args)).await;
    assert_eq!(
        result.map(|r| result_text(&r)),
        Ok("write on generation 1".into())
    );
    assert_eq!(left(&sink), report(1, &[1], true));
    // Any request through the hub reports alike.
    let (args, sink) = reporting();
    let params =
        serde_json::value::to_raw_value(&serde_json::json!({ "name": "read" })).expect("params");
    let sent = bounded(
        "the send",
        hub.send("srv", "tools/call", Some(&params), args),
    )
    .await;
    assert!(sent.is_ok(), "{sent:?}");
    assert_eq!(left(&sink), report(1, &[1], true));
    stop(&hub).await;
}

#[tokio::test(start_paused = true)]
async fn a_call_sent_again_after_a_reconnect_reports_both_generations() {
    let fake = Fake::new(
        vec![
            healthy().call_to("write", Reply::Now(Err(Failure::TransportClosedBeforeSend))),
            healthy(),
        ],
        Gen::open_fails("no third generation was scripted"),
    );
    let hub = start(config(), &fake);
    ready(&hub, 1).await;
    let (args, sink) = reporting();
    let result = bounded("the call", hub.call("srv__write", args)).await;
    assert_eq!(
        result.map(|r| result_text(&r)),
        Ok("write on generation 2".into())
    );
    assert_eq!(fake.calls(), [(1, "write".into()), (2, "write".into())]);
    assert_eq!(left(&sink), report(2, &[1, 2], true));
    stop(&hub).await;
}

#[tokio::test(start_paused = true)]
async fn a_call_sent_again_in_place_reports_the_same_generation_twice() {
    let fake = Fake::new(
        vec![healthy().call_to("read", Reply::Now(Err(blip())))],
        Gen::open_fails("no second generation was scripted"),
    );
    let hub = start(config(), &fake);
    ready(&hub, 1).await;
    let (args, sink) = reporting();
    let result = bounded("the call", hub.call("srv__read", args)).await;
    assert_eq!(
        result.map(|r| result_text(&r)),
        Ok("read on generation 1".into())
    );
    assert_eq!(left(&sink), report(2, &[1, 1], true));
    stop(&hub).await;
}

/// `Cancelled` says the tool may have run; the report tells a call cancelled while it waited
/// for its server (never sent) from one cancelled on its way.
#[tokio::test(start_paused = true)]
async fn a_call_cancelled_before_it_was_sent_reports_no_send() {
    let fake = Fake::new(vec![healthy()], Gen::ok(offered()).init(Reply::Hang));
    let hub = start(config(), &fake);
    ready(&hub, 1).await;
    fake.die(1);
    state(&hub, ServerState::Reconnecting).await;
    let (mut args, sink) = reporting();
    let cancel = CancellationToken::new();
    args.cancel = Some(cancel.clone());
    let (outcome, ()) = tokio::join!(bounded("the call", hub.call("srv__write", args)), async {
        tokio::time::sleep(ms(100)).await;
        cancel.cancel();
    });
    assert!(
        matches!(outcome, Err(CallError::Cancelled { .. })),
        "{outcome:?}"
    );
    assert!(fake.calls().is_empty());
    assert_eq!(left(&sink), report(0, &[], false));
    stop(&hub).await;
}

/// `ReconnectFailed` after a first send that did not reach the server did not run; after one
/// lost on its way (a read-only tool, to be sent again) it may have.
#[tokio::test(start_paused = true)]
async fn a_failed_reconnect_reports_whether_the_first_send_may_have_run() {
    for (tool, first, may_have_run) in [
        ("write", Failure::TransportClosedBeforeSend, false),
        ("read", Failure::ConnectionLostAfterSend, true),
    ] {
        let fake = Fake::new(
            vec![healthy().call_to(tool, Reply::Now(Err(first)))],
            Gen::open_fails("spawn failed: no such file"),
        );
        let hub = start(config(), &fake);
        ready(&hub, 1).await;
        let (mut args, sink) = reporting();
        args.timeout = Some(Duration::from_secs(2));
        let outcome = bounded("the call", hub.call(&format!("srv__{tool}"), args)).await;
        assert!(
            matches!(outcome, Err(CallError::ReconnectFailed { .. })),
            "{tool}: {outcome:?}"
        );
        assert_eq!(left(&sink), report(1, &[1], may_have_run), "{tool}");
        stop(&hub).await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_call_refused_for_want_of_authorization_did_not_run() {
    let refused = Failure::Unauthorized {
        message: "sign in again".into(),
    };
    let fake = Fake::new(vec![healthy().call(Reply::Now(Err(refused)))], healthy());
    let hub = start(config(), &fake);
    ready(&hub, 1).await;
    let (args, sink) = reporting();
    let outcome = bounded("the call", hub.call("srv__write", args)).await;
    assert!(
        matches!(outcome, Err(CallError::NotAuthorized { .. })),
        "{outcome:?}"
    );
    assert_eq!(left(&sink), report(1, &[1], false));
    stop(&hub).await;
}

/// A caller that goes away mid-call (its future dropped) still gets the report: the call went
/// out and may have run.
#[tokio::test(start_paused = true)]
async fn a_call_whose_future_is_dropped_still_reports() {
    let fake = Fake::new(vec![healthy().call(Reply::Hang)], healthy());
    let hub = start(config(), &fake);
    ready(&hub, 1).await;
    let (args, sink) = reporting();
    let gone = tokio::time::timeout(ms(100), hub.call("srv__write", args)).await;
    assert!(gone.is_err(), "the call was still waiting");
    assert_eq!(left(&sink), report(1, &[1], true));
    stop(&hub).await;
}

/// A call that never reached a supervisor leaves no report: its error says it was not sent.
#[tokio::test(start_paused = true)]
async fn an_unknown_tool_leaves_no_report() {
    let fake = Fake::new(vec![healthy()], healthy());
    let hub = start(config(), &fake);
    ready(&hub, 1).await;
    let (args, sink) = reporting();
    let outcome = bounded("the call", hub.call("srv__nothing", args)).await;
    assert!(
        matches!(outcome, Err(CallError::UnknownTool { .. })),
        "{outcome:?}"
    );
    assert_eq!(sink.get(), None);
    stop(&hub).await;
}

/// How long since the fake was made.
fn since_start(fake: &Fake) -> Duration {
    tokio::time::Instant::now() - fake.start()
}
