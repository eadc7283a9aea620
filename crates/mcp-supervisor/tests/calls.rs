//! The call path (SPEC §5) and health probes (SPEC §6) against a scripted fake on a paused clock:
//! one test per sentence of the spec, each checking what the caller gets and, in the fake's log,
//! how often the call was sent, on which generation, and what was probed or reconnected.

#[path = "support/fake.rs"]
mod fake;

use std::sync::Arc;
use std::time::Duration;

use fake::*;
use mcp_supervisor::core::classify::Failure;
use mcp_supervisor::core::config::ServerConfig;
use mcp_supervisor::link::CloseHow;
use mcp_supervisor::{CallArgs, CallError, Restored, ServerState};
use rmcp::model::Tool;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// "read" is read-only, "idem" idempotent, "write" neither.
fn offered() -> Vec<Tool> {
    vec![
        read_only_tool("read"),
        idempotent_tool("idem"),
        tool("write"),
    ]
}

/// "srv" with default policies and no idle probes (so the log holds only the probes calls cause).
fn config() -> ServerConfig {
    let mut s = server();
    s.health.interval = None;
    s
}

/// A healthy generation whose kill takes 10 ms, like a real process group.
fn healthy() -> Gen {
    Gen::ok(offered()).close_after(ms(10))
}

fn call(tool: &str) -> (String, CallArgs) {
    (format!("srv__{tool}"), CallArgs::default())
}

async fn call_with(
    hub: &mcp_supervisor::Hub,
    tool: &str,
    timeout: Option<Duration>,
) -> Result<String, CallError> {
    let (name, mut args) = call(tool);
    args.timeout = timeout;
    bounded("the call", hub.call(&name, args))
        .await
        .map(|r| result_text(&r))
}

fn since(fake: &Fake) -> Duration {
    Instant::now() - fake.start()
}

#[tokio::test(start_paused = true)]
async fn a_dead_transport_reconnects_and_retries_on_the_fresh_generation() {
    let fake = Fake::new(
        vec![
            // Not delivered: any tool is sent again.
            healthy().call_to("write", Reply::Now(Err(Failure::TransportClosedBeforeSend))),
            // Outcome unknown: a read-only tool is sent again…
            healthy().call_to("read", Reply::Now(Err(Failure::ConnectionLostAfterSend))),
            // …and so is an idempotent one.
            healthy().call_to("idem", Reply::Now(Err(Failure::ConnectionLostAfterSend))),
            healthy(),
        ],
        Gen::open_fails("no fifth generation was scripted"),
    );
    let hub = start(config(), &fake);
    ready(&hub, 1).await;

    assert_eq!(
        call_with(&hub, "write", None).await,
        Ok("write on generation 2".into())
    );
    assert_eq!(
        call_with(&hub, "read", None).await,
        Ok("read on generation 3".into())
    );
    assert_eq!(
        call_with(&hub, "idem", None).await,
        Ok("idem on generation 4".into())
    );
    let sent: Vec<(u64, String)> = [
        (1, "write"),
        (2, "write"),
        (2, "read"),
        (3, "read"),
        (3, "idem"),
        (4, "idem"),
    ]
    .map(|(g, t)| (g, t.to_string()))
    .to_vec();
    assert_eq!(
        fake.calls(),
        sent,
        "each sent once more, on the fresh generation"
    );
    assert_eq!(fake.opens().len(), 4);
    assert!(fake.pings().is_empty(), "a dead transport is not probed");
    for generation in 1..=3 {
        assert_eq!(fake.count(Some(generation), &Op::Close(CloseHow::Kill)), 1);
    }
    stop(&hub).await;
}

#[tokio::test(start_paused = true)]
async fn a_live_but_failed_call_retries_in_place() {
    let blip = || Failure::TransportError {
        message: "stream reset".into(),
        connection_closed: false,
    };
    let fake = Fake::new(
        vec![
            healthy()
                .call_to("read", Reply::Now(Err(blip())))
                .call_to("write", Reply::Now(Err(blip()))),
        ],
        Gen::open_fails("no second generation was scripted"),
    );
    let hub = start(config(), &fake);
    ready(&hub, 1).await;

    // A safe tool: one ping, then sent again on the same generation.
    assert_eq!(
        call_with(&hub, "read", None).await,
        Ok("read on generation 1".into())
    );
    assert_eq!(
        fake.calls(),
        [(1, "read".to_string()), (1, "read".to_string())]
    );
    assert_eq!(fake.pings().len(), 1);

    // An unsafe tool: the same ping, but not sent again; the connection is fine.
    match call_with(&hub, "write", None).await {
        Err(CallError::OutcomeUnknown { restored, .. }) => {
            assert_eq!(restored, Restored::Yes { generation: 1 })
        }
        other => panic!("expected outcome unknown, got {other:?}"),
    }
    assert_eq!(fake.count(None, &Op::Call("write".into())), 1);
    assert_eq!(fake.pings().len(), 2);
    assert_eq!(fake.opens().len(), 1, "no reconnect");
    assert_eq!(fake.count(Some(1), &Op::Close(CloseHow::Kill)), 0);
    stop(&hub).await;
}

#[tokio::test(start_paused = true)]
async fn a_server_answered_error_is_returned_with_no_probe_and_no_reconnect() {
    let answered = Failure::ServerError {
        code: -32602,
        message: "bad arguments".into(),
        data: Some(r#"{"argument":"path"}"#.into()),
    };
    let fake = Fake::new(
        vec![healthy().call(Reply::Now(Err(answered)))],
        Gen::ok(offered()),
    );
    let hub = start(config(), &fake);
    ready(&hub, 1).await;
    let error = call_with(&hub, "read", None)
        .await
        .expect_err("the server's error");
    assert_eq!(
        error,
        CallError::ServerError {
            server: "srv".into(),
            tool: "read".into(),
            code: -32602,
            message: "bad arguments".into(),
            data: Some(r#"{"argument":"path"}"#.into()),
        }
    );
    assert!(error.to_string().contains("\"srv\""), "{error}");
    until(&fake, ms(60_000)).await;
    assert_eq!(fake.calls().len(), 1, "not retried");
    assert!(fake.pings().is_empty(), "not probed");
    assert_eq!(fake.opens().len(), 1, "not reconnected");
    assert_eq!(state_now(&hub), ServerState::Ready);
    stop(&hub).await;
}

#[tokio::test(start_paused = true)]
/// SPEC §5: a call whose reconnect attempt fails keeps waiting for the next attempt that is due
/// within its deadline (60 s here): attempts at 0.51, 1.51, 3.51, 7.51, 15.51 and 31.51 s all
/// fail, the next would come at 63.51 s, past the deadline, so the call ends at 31.51 s.
async fn a_failed_reconnect_waits_out_attempts_due_within_the_deadline_then_surfaces_both_errors() {
    let fake = Fake::new(
        vec![healthy().call(Reply::Now(Err(Failure::TransportClosedBeforeSend)))],
        Gen::open_fails("spawn failed: no such file"),
    );
    let hub = start(config(), &fake);
    ready(&hub, 1).await;
    match call_with(&hub, "write", None).await {
        Err(error @ CallError::ReconnectFailed { .. }) => {
            let text = error.to_string();
            assert!(
                text.contains("closed before the request went out"),
                "the first error: {text}"
            );
            assert!(
                text.contains("spawn failed: no such file"),
                "the reconnect's error: {text}"
            );
            assert!(text.contains("\"srv\""), "{text}");
        }
        other => panic!("expected a failed reconnect, got {other:?}"),
    }
    assert_eq!(
        since(&fake),
        ms(31_510),
        "after the kill (10 ms) and six failed attempts (500 ms … 16 s of backoff)"
    );
    assert_eq!(
        fake.calls(),
        [(1, "write".to_string())],
        "the call did not run again"
    );
    assert_eq!(
        fake.opens().len(),
        7,
        "six reconnect attempts, each waited for"
    );
    stop(&hub).await;
}

#[tokio::test(start_paused = true)]
async fn a_malformed_result_is_returned_not_retried() {
    let fake = Fake::new(
        vec![healthy().call(Reply::Now(Err(Failure::UnexpectedResponse)))],
        Gen::ok(offered()),
    );
    let hub = start(config(), &fake);
    ready(&hub, 1).await;
    assert!(matches!(
        call_with(&hub, "read", None).await,
        Err(CallError::Malformed { .. })
    ));
    until(&fake, ms(60_000)).await;
    assert_eq!(fake.calls().len(), 1, "not retried");
    assert!(fake.pings().is_empty());
    assert_eq!(fake.opens().len(), 1);
    stop(&hub).await;
}

#[tokio::test(start_paused = true)]
async fn an_aborted_call_does_not_reconnect() {
    let fake = Fake::new(vec![healthy().call(Reply::Hang)], Gen::ok(offered()));
    let hub = start(config(), &fake);
    ready(&hub, 1).await;
    let cancel = CancellationToken::new();
    let canceller = {
        let cancel = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(ms(1000)).await;
            cancel.cancel();
        })
    };
    let args = CallArgs {
        cancel: Some(cancel),
        ..CallArgs::default()
    };
    let outcome = bounded("the call", hub.call("srv__read", args)).await;
    assert!(
        matches!(outcome, Err(CallError::Cancelled { .. })),
        "{outcome:?}"
    );
    assert_eq!(since(&fake), ms(1000));
    canceller.await.expect("the canceller ran");
    until(&fake, ms(60_000)).await;
    assert_eq!(fake.calls().len(), 1, "not retried");
    assert!(fake.pings().is_empty(), "not probed");
    assert_eq!(fake.opens().len(), 1, "not reconnected");
    assert_eq!(state_now(&hub), ServerState::Ready);
    stop(&hub).await;
}

#[tokio::test(start_paused = true)]
async fn connection_closed_skips_the_probe() {
    let closed = Failure::TransportError {
        message: "stream ended".into(),
        connection_closed: true,
    };
    let fake = Fake::new(
        vec![
            healthy().call_to("read", Reply::Now(Err(Failure::ConnectionLostAfterSend))),
            healthy().call_to("idem", Reply::Now(Err(closed))),
            healthy(),
        ],
        Gen::open_fails("no fourth generation was scripted"),
    );
    let hub = start(config(), &fake);
    ready(&hub, 1).await;
    assert_eq!(
        call_with(&hub, "read", None).await,
        Ok("read on generation 2".into())
    );
    assert_eq!(
        call_with(&hub, "idem", None).await,
        Ok("idem on generation 3".into())
    );
    assert!(fake.pings().is_empty(), "a closed connection is not pinged");
    assert_eq!(fake.opens().len(), 3);
    stop(&hub).await;
}

#[tokio::test(start_paused = true)]
async fn a_non_idempotent_tool_whose_outcome_is_unknown_is_sent_exactly_once() {
    let fake = Fake::new(
        vec![
            healthy().call(Reply::Now(Err(Failure::ConnectionLostAfterSend))),
            healthy(),
        ],
        Gen::open_fails("no third generation was scripted"),
    );
    let hub = start(config(), &fake);
    ready(&hub, 1).await;
    let error = call_with(&hub, "write", None)
        .await
        .expect_err("outcome unknown");
    match &error {
        CallError::OutcomeUnknown {
            server,
            tool,
            restored,
            ..
        } => {
            assert_eq!((server.as_str(), tool.as_str()), ("srv", "write"));
            assert_eq!(*restored, Restored::Yes { generation: 2 });
        }
        other => panic!("expected outcome unknown, got {other:?}"),
    }
    let text = error.to_string();
    assert!(text.contains("may have run"), "{text}");
    assert!(text.contains("restored"), "{text}");
    until(&fake, Duration::from_secs(3600)).await;
    assert_eq!(
        fake.calls(),
        [(1, "write".to_string())],
        "never run twice by us"
    );
    assert_eq!(fake.opens().len(), 2, "the connection was restored");
    stop(&hub).await;
}

#[tokio::test(start_paused = true)]
async fn fifty_concurrent_failing_calls_cause_exactly_one_reconnect() {
    let fake = Fake::new(
        vec![
            healthy().calls_default(Reply::After(
                ms(100),
                Err(Failure::TransportClosedBeforeSend),
            )),
            healthy(),
        ],
        Gen::open_fails("no third generation was scripted"),
    );
    let hub = Arc::new(start(config(), &fake));
    ready(&hub, 1).await;
    let calls: Vec<_> = (0..50)
        .map(|_| {
            let hub = hub.clone();
            tokio::spawn(async move { call_with(&hub, "write", None).await })
        })
        .collect();
    for call in calls {
        let outcome = tokio::time::timeout(WAIT_LIMIT, call)
            .await
            .expect("bounded")
            .expect("the call task ran");
        assert_eq!(outcome, Ok("write on generation 2".into()));
    }
    let calls = fake.calls();
    assert_eq!(calls.iter().filter(|(g, _)| *g == 1).count(), 50);
    assert_eq!(calls.iter().filter(|(g, _)| *g == 2).count(), 50);
    assert_eq!(fake.opens().len(), 2, "one shared reconnect");
    assert_eq!(fake.count(Some(1), &Op::Close(CloseHow::Kill)), 1);
    assert_eq!(
        since(&fake),
        ms(610),
        "100 ms to fail, 10 ms to close, 500 ms of backoff"
    );
    until(&fake, Duration::from_secs(3600)).await;
    assert_eq!(fake.opens().len(), 2);
    stop(&hub).await;
}

#[tokio::test(start_paused = true)]
async fn the_health_probe_finds_a_hung_server_and_recovers_it() {
    let mut config = config();
    config.health.interval = Some(ms(1000));
    config.health.timeout = ms(500);
    config.health.failures = 3;
    let fake = Fake::new(
        vec![
            Gen::ok(offered()).pings_default(Reply::Hang),
            Gen::ok(offered()),
        ],
        Gen::open_fails("no third generation was scripted"),
    );
    let hub = start(config, &fake);
    ready(&hub, 1).await;
    until(&fake, ms(3499)).await;
    assert_eq!(hub.status()[0].generation, 1, "two misses are not enough");
    assert_eq!(state_now(&hub), ServerState::Ready);
    ready(&hub, 2).await;
    let pings: Vec<_> = fake.pings().into_iter().filter(|(g, _)| *g == 1).collect();
    assert_eq!(pings, [(1, ms(1000)), (1, ms(2000)), (1, ms(3000))]);
    assert!(fake.log().contains(&Entry {
        at: ms(3500),
        generation: 1,
        op: Op::Close(CloseHow::Kill)
    }));
    assert_eq!(fake.opens(), [(1, ms(0)), (2, ms(4000))]);
    assert_eq!(
        call_with(&hub, "read", None).await,
        Ok("read on generation 2".into())
    );
    stop(&hub).await;
}

#[tokio::test(start_paused = true)]
async fn a_call_past_its_deadline_triggers_a_probe_at_once_and_counts_with_missed_probes() {
    // Idle probes every 10 s would come far too late; the timed-out calls bring the probe forward.
    let mut config = config();
    config.health.interval = Some(ms(10_000));
    config.health.timeout = ms(500);
    config.health.failures = 3;
    let fake = Fake::new(
        vec![
            Gen::ok(offered())
                .calls_default(Reply::Hang)
                .pings_default(Reply::Hang),
            Gen::ok(offered()),
        ],
        Gen::open_fails("no third generation was scripted"),
    );
    let hub = start(config, &fake);
    ready(&hub, 1).await;

    let error = call_with(&hub, "read", Some(ms(1000)))
        .await
        .expect_err("timed out");
    assert!(
        matches!(error, CallError::TimedOut { after_ms: 1000, .. }),
        "{error:?}"
    );
    assert!(
        error.to_string().contains("timed out after 1000 ms"),
        "{error}"
    );
    assert_eq!(since(&fake), ms(1000));
    tokio::task::yield_now().await;
    until(&fake, ms(2000)).await;
    assert_eq!(fake.pings(), [(1, ms(1000))], "probed at once");
    assert_eq!(
        state_now(&hub),
        ServerState::Ready,
        "a timed-out call and a missed probe are 2 of 3"
    );

    // The second timed-out call is the third miss.
    let error = call_with(&hub, "read", Some(ms(1000)))
        .await
        .expect_err("timed out");
    assert!(matches!(error, CallError::TimedOut { .. }), "{error:?}");
    ready(&hub, 2).await;
    assert!(fake.log().contains(&Entry {
        at: ms(3000),
        generation: 1,
        op: Op::Close(CloseHow::Kill)
    }));
    assert_eq!(fake.opens(), [(1, ms(0)), (2, ms(3500))]);
    assert_eq!(fake.calls().len(), 2, "timed-out calls are not sent again");
    stop(&hub).await;
}

#[tokio::test(start_paused = true)]
async fn a_server_without_ping_is_probed_with_tools_list() {
    let mut config = config();
    config.health.interval = Some(ms(1000));
    config.health.timeout = ms(500);
    config.health.failures = 3;
    let no_ping = Failure::ServerError {
        code: -32601,
        message: "Method not found".into(),
        data: None,
    };
    let fake = Fake::new(
        vec![
            Gen::ok(offered()).pings_default(Reply::Now(Err(no_ping))),
            Gen::ok(offered()),
        ],
        Gen::open_fails("no third generation was scripted"),
    );
    let hub = start(config, &fake);
    ready(&hub, 1).await;
    until(&fake, ms(10_500)).await;
    assert_eq!(
        fake.pings(),
        [(1, ms(1000))],
        "ping is asked once, then no more"
    );
    assert_eq!(
        fake.count(Some(1), &Op::ListTools),
        1 + 10,
        "the first sync, then a tools/list probe per tick"
    );
    assert_eq!(state_now(&hub), ServerState::Ready);
    assert_eq!(fake.opens().len(), 1, "method-not-found is not a miss");

    // The tools/list probe is what is judged: when it stops answering, the server is recovered.
    for _ in 0..3 {
        fake.push_list(1, Reply::Hang);
    }
    ready(&hub, 2).await;
    assert!(fake.log().contains(&Entry {
        at: ms(13_500),
        generation: 1,
        op: Op::Close(CloseHow::Kill)
    }));
    assert_eq!(fake.opens(), [(1, ms(0)), (2, ms(14_000))]);
    assert_eq!(fake.count(Some(1), &Op::Ping), 1);
    stop(&hub).await;
}

#[tokio::test(start_paused = true)]
async fn a_call_waiting_for_a_server_that_is_not_ready_respects_its_deadline() {
    // Generation 2's handshake hangs (until connectTimeoutMs, 30 s).
    let fake = Fake::new(
        vec![Gen::ok(offered()), Gen::ok(offered()).init(Reply::Hang)],
        Gen::open_fails("no third generation was scripted"),
    );
    let hub = start(config(), &fake);
    ready(&hub, 1).await;
    until(&fake, ms(1000)).await;
    fake.die(1);
    until(&fake, ms(2000)).await;
    assert!(
        hub.watch("srv").expect("srv").borrow().attempting(),
        "generation 2's attempt is under way"
    );

    let error = call_with(&hub, "read", Some(ms(2000)))
        .await
        .expect_err("not ready");
    assert_eq!(
        since(&fake),
        ms(4000),
        "waited for the attempt, up to the deadline and no longer"
    );
    match error {
        CallError::NotReady { server, state, .. } => {
            assert_eq!((server.as_str(), state.as_str()), ("srv", "reconnecting"))
        }
        other => panic!("expected not ready, got {other:?}"),
    }
    assert!(fake.calls().is_empty());
    stop(&hub).await;
}

#[tokio::test(start_paused = true)]
async fn a_call_whose_deadline_comes_before_the_next_attempt_fails_at_once() {
    let mut config = config();
    config.reconnect.initial_delay = ms(5000);
    let fake = Fake::new(
        vec![Gen::ok(offered()), Gen::ok(offered())],
        Gen::open_fails("no third generation was scripted"),
    );
    let hub = start(config, &fake);
    ready(&hub, 1).await;
    until(&fake, ms(1000)).await;
    fake.die(1);
    until(&fake, ms(2000)).await;

    // The next attempt is due at 6 s, after this call's deadline (3 s): it fails at once.
    let error = call_with(&hub, "read", Some(ms(1000)))
        .await
        .expect_err("not ready");
    assert_eq!(since(&fake), ms(2000), "at once");
    match &error {
        CallError::NotReady {
            server,
            state,
            next_attempt_in,
            last_error,
            ..
        } => {
            assert_eq!((server.as_str(), state.as_str()), ("srv", "reconnecting"));
            assert_eq!(*next_attempt_in, Some(ms(4000)));
            assert!(last_error.is_some(), "the last cause is given");
        }
        other => panic!("expected not ready, got {other:?}"),
    }
    let text = error.to_string();
    assert!(
        text.contains("reconnecting") && text.contains("next attempt in 4000 ms"),
        "{text}"
    );

    // A call whose deadline reaches the next attempt waits for it.
    assert_eq!(
        call_with(&hub, "read", Some(ms(10_000))).await,
        Ok("read on generation 2".into())
    );
    assert_eq!(since(&fake), ms(6000));
    assert_eq!(fake.calls(), [(2, "read".to_string())]);
    stop(&hub).await;
}

#[tokio::test(start_paused = true)]
async fn a_call_arriving_while_a_lost_generation_closes_waits_for_the_next_attempt() {
    // Generation 1 is lost at 1 s and takes 1 s to close; the next attempt is due 500 ms after
    // that, well within the deadline of a call that arrives during the close.
    let fake = Fake::new(
        vec![
            Gen::ok(offered())
                .close_after(ms(1000))
                .call_to("write", Reply::Now(Err(Failure::ConnectionLostAfterSend))),
            Gen::ok(offered()),
        ],
        Gen::open_fails("no third generation was scripted"),
    );
    let hub = Arc::new(start(config(), &fake));
    ready(&hub, 1).await;
    until(&fake, ms(1000)).await;
    let lost = {
        let hub = hub.clone();
        tokio::spawn(async move { call_with(&hub, "write", None).await })
    };
    until(&fake, ms(1100)).await;
    let snapshot = hub.watch("srv").expect("srv").borrow().clone();
    assert_eq!(
        (snapshot.state(), snapshot.generation),
        (ServerState::Reconnecting, 1),
        "generation 1 is closing"
    );
    assert_eq!(
        call_with(&hub, "read", None).await,
        Ok("read on generation 2".into())
    );
    assert_eq!(since(&fake), ms(2500));
    let lost = tokio::time::timeout(WAIT_LIMIT, lost)
        .await
        .expect("bounded")
        .expect("the call task ran");
    assert!(
        matches!(
            lost,
            Err(CallError::OutcomeUnknown {
                restored: Restored::Yes { generation: 2 },
                ..
            })
        ),
        "{lost:?}"
    );
    stop(&hub).await;
}

#[tokio::test(start_paused = true)]
async fn a_stale_session_found_by_a_call_is_re_established_at_once() {
    let fake = Fake::new(
        vec![
            healthy().call_to("write", Reply::Now(Err(Failure::SessionExpired))),
            healthy(),
        ],
        Gen::open_fails("no third generation was scripted"),
    );
    let hub = start(config(), &fake);
    ready(&hub, 1).await;
    until(&fake, ms(1000)).await;
    // Not delivered, so even a non-idempotent tool is sent again; no 500 ms backoff first.
    assert_eq!(
        call_with(&hub, "write", None).await,
        Ok("write on generation 2".into())
    );
    assert_eq!(
        fake.opens(),
        [(1, ms(0)), (2, ms(1010))],
        "right after the 10 ms close"
    );
    assert_eq!(
        fake.calls(),
        [(1, "write".to_string()), (2, "write".to_string())]
    );
    stop(&hub).await;
}

#[tokio::test(start_paused = true)]
async fn the_idle_timer_does_not_probe_a_connection_with_a_call_in_flight() {
    let mut config = config();
    config.health.interval = Some(ms(1000));
    let fake = Fake::new(
        vec![Gen::ok(offered()).call_to("read", Reply::After(ms(4500), Ok(text_result("slow"))))],
        Gen::open_fails("no second generation was scripted"),
    );
    let hub = start(config, &fake);
    ready(&hub, 1).await;
    assert_eq!(call_with(&hub, "read", None).await, Ok("slow".into()));
    assert_eq!(since(&fake), ms(4500));
    assert!(
        fake.pings().is_empty(),
        "ticks at 1 to 4 s found the call in flight"
    );
    until(&fake, ms(5500)).await;
    assert_eq!(fake.pings(), [(1, ms(5000))], "idle again: probed");
    stop(&hub).await;
}

#[tokio::test(start_paused = true)]
async fn any_sign_of_life_resets_the_count_of_misses() {
    let mut config = config();
    config.health.interval = Some(ms(1000));
    config.health.timeout = ms(500);
    config.health.failures = 3;
    let fake = Fake::new(
        vec![
            Gen::ok(offered()).pings_default(Reply::Hang),
            Gen::ok(offered()),
        ],
        Gen::open_fails("no third generation was scripted"),
    );
    let hub = start(config, &fake);
    ready(&hub, 1).await;
    // Misses at 1.5 s and 2.5 s; then a progress notification; three more misses are needed.
    until(&fake, ms(2600)).await;
    fake.send(1, mcp_supervisor::link::LinkEvent::SignOfLife);
    until(&fake, ms(5499)).await;
    assert_eq!(hub.status()[0].generation, 1, "the count started again");
    ready(&hub, 2).await;
    assert!(fake.log().contains(&Entry {
        at: ms(5500),
        generation: 1,
        op: Op::Close(CloseHow::Kill)
    }));
    stop(&hub).await;
}
