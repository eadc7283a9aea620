//! The supervisor's state machine (SPEC §2, §3, §4, §7) against a scripted fake on a paused
//! clock: one test per sentence of the spec, each checking the hub's status and tools, the fake's
//! log of opens and closes with their times, and the hub's events.

#[path = "support/fake.rs"]
mod fake;

use std::time::Duration;

use fake::*;
use mcp_supervisor::link::{CloseHow, LinkEvent};
use mcp_supervisor::{CallArgs, CallError, ServerState};
use rmcp::model::Tool;

/// "srv" with a quick schedule: 100, 200, 400, 800, 1000 … ms; stability window 1 s; no idle
/// probes.
fn quick(max_attempts: u32) -> mcp_supervisor::core::config::ServerConfig {
    let mut s = server();
    s.reconnect.initial_delay = ms(100);
    s.reconnect.max_delay = ms(1000);
    s.reconnect.max_attempts = max_attempts;
    s.health.interval = None;
    s
}

fn tools(names: &[&str]) -> Vec<Tool> {
    names.iter().map(|n| tool(n)).collect()
}

/// srv's lifecycle events as (kind, generation), oldest first.
fn timeline(hub: &mcp_supervisor::Hub) -> Vec<(mcp_supervisor::history::EventKind, u64)> {
    hub.events("srv")
        .iter()
        .map(|e| (e.kind, e.generation))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn recovery_swaps_the_generation_without_duplicate_or_leaked_tools_and_serves_calls_afterwards()
 {
    let fake = Fake::new(
        vec![
            Gen::ok(tools(&["echo", "old"])),
            Gen::ok(tools(&["echo", "new"])),
        ],
        Gen::open_fails("no third generation was scripted"),
    );
    let hub = start(server(), &fake);
    let mut events = hub.subscribe();
    ready(&hub, 1).await;
    assert_eq!(tool_names(&hub), ["srv__echo", "srv__old"]);

    until(&fake, ms(1000)).await;
    fake.die(1);
    until(&fake, ms(1200)).await;
    // During the outage the old tools stay registered.
    assert_eq!(state_now(&hub), ServerState::Reconnecting);
    assert_eq!(tool_names(&hub), ["srv__echo", "srv__old"]);

    ready(&hub, 2).await;
    assert_eq!(fake.opens(), [(1, ms(0)), (2, ms(1500))]);
    // Swapped at once: no duplicate of "echo", nothing left of "old".
    assert_eq!(tool_names(&hub), ["srv__echo", "srv__new"]);
    let status = &hub.status()[0];
    assert_eq!(
        (
            status.generation,
            status.restarts,
            status.attempts,
            status.tools
        ),
        (2, 1, 0, 2)
    );

    let result = bounded("the call", hub.call("srv__new", CallArgs::default()))
        .await
        .expect("served after recovery");
    assert_eq!(result_text(&result), "new on generation 2");
    let result = bounded("the call", hub.call("srv__echo", CallArgs::default()))
        .await
        .expect("served after recovery");
    assert_eq!(result_text(&result), "echo on generation 2");
    assert!(matches!(
        bounded("the call", hub.call("srv__old", CallArgs::default())).await,
        Err(CallError::UnknownTool { .. })
    ));
    assert_eq!(
        fake.calls(),
        [(2, "new".to_string()), (2, "echo".to_string())]
    );

    let seen = drain(&mut events);
    assert_eq!(
        tools_changed(&seen),
        2,
        "first publish and the swap: {seen:?}"
    );
    let states = states(&seen);
    assert!(states.contains(&(ServerState::Ready, 1)), "{states:?}");
    assert!(
        states.contains(&(ServerState::Reconnecting, 1)),
        "{states:?}"
    );
    assert_eq!(states.last(), Some(&(ServerState::Ready, 2)));
    stop(&hub).await;
}

#[tokio::test(start_paused = true)]
async fn a_recovery_with_the_same_tools_changes_nothing_downstream() {
    let fake = Fake::new(vec![], Gen::ok(tools(&["echo", "add"])));
    let hub = start(server(), &fake);
    let mut events = hub.subscribe();
    ready(&hub, 1).await;
    let before = hub.tools();
    fake.die(1);
    ready(&hub, 2).await;
    let after = hub.tools();
    assert_eq!(tool_names(&hub), ["srv__echo", "srv__add"]);
    for (a, b) in before.iter().zip(after.iter()) {
        assert_eq!(
            a.definition.get(),
            b.definition.get(),
            "the same upstream list yields the same definitions"
        );
    }
    assert_eq!(
        tools_changed(&drain(&mut events)),
        1,
        "only the first publish is a change"
    );
    stop(&hub).await;
}

#[tokio::test(start_paused = true)]
async fn the_failure_cap_withdraws_the_tools_and_stops() {
    let fake = Fake::new(
        vec![Gen::ok(tools(&["echo"]))],
        Gen::open_fails("spawn failed: no such file"),
    );
    let hub = start(quick(3), &fake);
    let mut events = hub.subscribe();
    ready(&hub, 1).await;
    until(&fake, ms(1000)).await;
    fake.die(1);

    let snapshot = state(&hub, ServerState::GaveUp).await;
    // A loss of a generation up for the window, then exactly maxAttempts reconnect attempts:
    // the first at once (a stable server restarts at once), then 200 and 400 ms apart.
    assert_eq!(
        fake.opens(),
        [(1, ms(0)), (2, ms(1000)), (3, ms(1200)), (4, ms(1600))]
    );
    assert_eq!(
        tokio::time::Instant::now() - fake.start(),
        ms(1600),
        "gave up as the last attempt failed"
    );
    assert!(
        snapshot
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("spawn failed: no such file"))
    );
    assert!(hub.tools().is_empty(), "the tools are withdrawn");
    assert_eq!(hub.status()[0].tools, 0);
    assert!(matches!(
        bounded("the call", hub.call("srv__echo", CallArgs::default())).await,
        Err(CallError::UnknownTool { .. })
    ));

    // It stays stopped: nothing more is tried.
    until(&fake, Duration::from_secs(3600)).await;
    assert_eq!(fake.opens().len(), 4);
    assert_eq!(state_now(&hub), ServerState::GaveUp);
    let seen = drain(&mut events);
    assert_eq!(tools_changed(&seen), 2, "published, then withdrawn");
    assert_eq!(states(&seen).last(), Some(&(ServerState::GaveUp, 4)));
    stop(&hub).await;
}

#[tokio::test(start_paused = true)]
async fn giving_up_behind_an_in_flight_re_sync_removes_what_that_sync_publishes() {
    // Generation 1's re-sync answers 2 s after it was asked, long after the supervisor gave up.
    let gen1 = Gen::ok(tools(&["a", "b"]))
        .list(Reply::Now(Ok(tools(&["a"]))))
        .list(Reply::After(ms(2000), Ok(tools(&["a", "b"]))));
    let fake = Fake::new(vec![gen1], Gen::open_fails("refused"));
    let hub = start(quick(1), &fake);
    ready(&hub, 1).await;
    assert_eq!(tool_names(&hub), ["srv__a"]);

    until(&fake, ms(1000)).await;
    fake.send(1, LinkEvent::ToolListChanged);
    until(&fake, ms(1500)).await;
    assert_eq!(
        fake.count(Some(1), &Op::ListTools),
        2,
        "the re-sync is in flight"
    );
    fake.die(1);
    state(&hub, ServerState::GaveUp).await;
    // Up 1.5 s (past the window): its one attempt at once, which fails.
    assert_eq!(tokio::time::Instant::now() - fake.start(), ms(1500));
    assert!(hub.tools().is_empty());

    // The re-sync answers at 3 s: what it brings is not published.
    until(&fake, ms(10_000)).await;
    assert!(hub.tools().is_empty(), "leaked: {:?}", tool_names(&hub));
    assert_eq!(state_now(&hub), ServerState::GaveUp);
    stop(&hub).await;
}

#[tokio::test(start_paused = true)]
async fn no_replacement_starts_until_the_failed_generation_reports_its_close() {
    // A failed connect whose close takes 3 s.
    let fake = Fake::new(
        vec![
            Gen::init_fails("handshake refused").close_after(ms(3000)),
            Gen::ok(tools(&["echo"])).close_after(ms(2000)),
            Gen::ok(tools(&["echo"])),
        ],
        Gen::open_fails("no fourth generation was scripted"),
    );
    let hub = start(server(), &fake);
    until(&fake, ms(2999)).await;
    assert_eq!(fake.count(Some(1), &Op::Closed), 0);
    assert_eq!(fake.opens().len(), 1);
    until(&fake, ms(3499)).await;
    assert_eq!(
        fake.opens().len(),
        1,
        "the backoff starts only once the close is reported"
    );
    ready(&hub, 2).await;
    let closed = fake.entries(|op| *op == Op::Closed);
    assert_eq!((closed[0].generation, closed[0].at), (1, ms(3000)));
    assert_eq!(fake.opens(), [(1, ms(0)), (2, ms(3500))]);

    // A ready generation replaced on request: its close takes 2 s, and generation 3 waits for it.
    until(&fake, ms(5000)).await;
    hub.reconnect("srv").expect("srv is configured");
    until(&fake, ms(6999)).await;
    assert_eq!(fake.opens().len(), 2);
    ready(&hub, 3).await;
    let closes: Vec<_> = fake
        .log()
        .into_iter()
        .filter(|e| e.generation == 2)
        .map(|e| (e.op, e.at))
        .collect();
    assert!(
        closes.contains(&(Op::Close(CloseHow::Graceful), ms(5000))),
        "{closes:?}"
    );
    assert!(closes.contains(&(Op::Closed, ms(7000))), "{closes:?}");
    assert_eq!(fake.opens()[2], (3, ms(7000)));
    stop(&hub).await;
}

#[tokio::test(start_paused = true)]
async fn reconnecting_stops_when_that_close_never_comes() {
    let fake = Fake::new(
        vec![Gen::init_fails("handshake refused").close_never()],
        Gen::ok(tools(&["echo"])),
    );
    let hub = start(server(), &fake);
    let snapshot = state(&hub, ServerState::GaveUp).await;
    assert_eq!(
        tokio::time::Instant::now() - fake.start(),
        Duration::from_secs(5),
        "the 5 s barrier"
    );
    let error = snapshot.last_error.expect("the error says why");
    assert!(error.contains("did not close within 5 s"), "{error}");
    until(&fake, Duration::from_secs(3600)).await;
    assert_eq!(
        fake.opens().len(),
        1,
        "no second copy of the server is started"
    );
    assert_eq!(state_now(&hub), ServerState::GaveUp);
}

#[tokio::test(start_paused = true)]
async fn reconnecting_stops_when_a_lost_generation_never_closes() {
    // Found hung by the health probe (one miss is enough here), killed, and never gone.
    let mut config = server();
    config.health.interval = Some(ms(1000));
    config.health.timeout = ms(500);
    config.health.failures = 1;
    let fake = Fake::new(
        vec![
            Gen::ok(tools(&["echo"]))
                .pings_default(Reply::Hang)
                .close_never(),
        ],
        Gen::ok(tools(&["echo"])),
    );
    let hub = start(config, &fake);
    ready(&hub, 1).await;
    let snapshot = state(&hub, ServerState::GaveUp).await;
    assert_eq!(
        tokio::time::Instant::now() - fake.start(),
        ms(6500),
        "probe at 1 s, miss at 1.5 s, 5 s barrier"
    );
    assert!(fake.log().contains(&Entry {
        at: ms(1500),
        generation: 1,
        op: Op::Close(CloseHow::Kill)
    }));
    assert!(
        snapshot
            .last_error
            .is_some_and(|e| e.contains("did not close within 5 s"))
    );
    assert!(hub.tools().is_empty(), "the tools are withdrawn");
    until(&fake, Duration::from_secs(3600)).await;
    assert_eq!(fake.opens().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn stop_during_backoff_cancels_the_pending_attempt() {
    let mut config = server();
    config.reconnect.initial_delay = ms(5000);
    let fake = Fake::new(vec![Gen::ok(tools(&["echo"]))], Gen::ok(tools(&["echo"])));
    let hub = start(config, &fake);
    let watch = hub.watch("srv").expect("srv is running");
    ready(&hub, 1).await;
    until(&fake, ms(1000)).await;
    fake.die(1);
    until(&fake, ms(2000)).await;
    let snapshot = watch.borrow().clone();
    assert_eq!(snapshot.state(), ServerState::Reconnecting);
    assert_eq!(snapshot.next_attempt_at(), Some(fake.start() + ms(6000)));

    stop(&hub).await;
    assert_eq!(
        tokio::time::Instant::now() - fake.start(),
        ms(2000),
        "stop does not wait out the backoff"
    );
    assert_eq!(watch.borrow().state(), ServerState::Stopped);
    assert!(hub.tools().is_empty());
    until(&fake, Duration::from_secs(3600)).await;
    assert_eq!(fake.opens().len(), 1, "the pending attempt never runs");
}

#[tokio::test(start_paused = true)]
async fn stop_is_bounded_when_the_close_never_comes() {
    let fake = Fake::new(
        vec![Gen::ok(tools(&["echo"])).close_never()],
        Gen::ok(tools(&["echo"])),
    );
    let hub = start(server(), &fake);
    let watch = hub.watch("srv").expect("srv is running");
    ready(&hub, 1).await;
    until(&fake, ms(1000)).await;
    stop(&hub).await;
    assert_eq!(
        tokio::time::Instant::now() - fake.start(),
        ms(6000),
        "the 5 s barrier, then stopped anyway"
    );
    assert!(fake.log().contains(&Entry {
        at: ms(1000),
        generation: 1,
        op: Op::Close(CloseHow::Graceful)
    }));
    assert_eq!(watch.borrow().state(), ServerState::Stopped);
    assert!(hub.tools().is_empty());
    until(&fake, Duration::from_secs(3600)).await;
    assert_eq!(fake.opens().len(), 1, "nothing restarts after stop");
}

#[tokio::test(start_paused = true)]
async fn a_close_after_stop_schedules_nothing() {
    let fake = Fake::new(
        vec![Gen::ok(tools(&["echo"])).close_after(ms(1000))],
        Gen::ok(tools(&["echo"])),
    );
    let hub = start(server(), &fake);
    let watch = hub.watch("srv").expect("srv is running");
    ready(&hub, 1).await;
    until(&fake, ms(1000)).await;
    stop(&hub).await;
    // Stop waits for the close, which comes after the stop began.
    assert_eq!(tokio::time::Instant::now() - fake.start(), ms(2000));
    assert!(fake.log().contains(&Entry {
        at: ms(2000),
        generation: 1,
        op: Op::Closed
    }));
    assert_eq!(watch.borrow().state(), ServerState::Stopped);

    // Late signals of the stopped generation change nothing.
    fake.send(1, LinkEvent::ToolListChanged);
    fake.die(1);
    until(&fake, Duration::from_secs(3600)).await;
    assert_eq!(fake.opens().len(), 1);
    assert_eq!(fake.count(Some(1), &Op::ListTools), 1);
    assert!(hub.tools().is_empty());
    assert_eq!(watch.borrow().state(), ServerState::Stopped);
}

#[tokio::test(start_paused = true)]
async fn with_reconnect_disabled_a_lost_connection_keeps_its_tools_and_is_down() {
    let mut config = server();
    config.reconnect.enabled = false;
    let fake = Fake::new(vec![Gen::ok(tools(&["echo"]))], Gen::ok(tools(&["echo"])));
    let hub = start(config, &fake);
    ready(&hub, 1).await;
    until(&fake, ms(1000)).await;
    fake.die(1);
    state(&hub, ServerState::Down).await;
    until(&fake, Duration::from_secs(3600)).await;
    assert_eq!(fake.opens().len(), 1, "not retried");
    assert_eq!(state_now(&hub), ServerState::Down);
    assert_eq!(tool_names(&hub), ["srv__echo"], "the tools stay registered");
    match bounded("the call", hub.call("srv__echo", CallArgs::default())).await {
        Err(CallError::NotReady { server, state, .. }) => {
            assert_eq!((server.as_str(), state.as_str()), ("srv", "down"))
        }
        other => panic!("expected a not-ready error, got {other:?}"),
    }
    // Recovery by hand.
    hub.reconnect("srv").expect("srv is configured");
    ready(&hub, 2).await;
    stop(&hub).await;
}

#[tokio::test(start_paused = true)]
async fn with_reconnect_disabled_a_failed_first_connect_is_down() {
    let mut config = server();
    config.reconnect.enabled = false;
    let fake = Fake::new(vec![], Gen::open_fails("spawn failed: no such file"));
    let hub = start(config, &fake);
    let snapshot = state(&hub, ServerState::Down).await;
    assert!(
        snapshot
            .last_error
            .is_some_and(|e| e.contains("spawn failed"))
    );
    until(&fake, Duration::from_secs(3600)).await;
    assert_eq!(fake.opens().len(), 1, "not retried");
    assert_eq!(state_now(&hub), ServerState::Down);
    assert!(hub.tools().is_empty(), "nothing was ever published");
    stop(&hub).await;
}

#[tokio::test(start_paused = true)]
async fn the_stability_window_resets_the_budget() {
    // maxAttempts 2, window 1 s. Generation 3 stays up exactly the window: its loss starts a fresh
    // count. Without the reset it would be failure 3 of 2 and the supervisor would give up.
    let fake = Fake::new(
        vec![
            Gen::ok(tools(&["echo"])).dies_after(ms(2000)),
            Gen::open_fails("refused"),
            Gen::ok(tools(&["echo"])).dies_after(ms(1000)),
            Gen::ok(tools(&["echo"])),
        ],
        Gen::open_fails("no fifth generation was scripted"),
    );
    let hub = start(quick(2), &fake);
    ready(&hub, 4).await;
    assert_eq!(
        fake.opens(),
        // Each loss of a generation up for the window is retried at once.
        [(1, ms(0)), (2, ms(2000)), (3, ms(2200)), (4, ms(3200))]
    );
    assert_eq!(hub.status()[0].restarts, 2);
    stop(&hub).await;
}

#[tokio::test(start_paused = true)]
async fn a_crash_loop_with_brief_successes_still_exhausts_the_budget() {
    // Every generation connects, then crashes 300 ms later (under the 1 s window).
    let fake = Fake::new(vec![], Gen::ok(tools(&["echo"])).dies_after(ms(300)));
    let hub = start(quick(3), &fake);
    state(&hub, ServerState::GaveUp).await;
    assert_eq!(
        fake.opens(),
        [(1, ms(0)), (2, ms(400)), (3, ms(900)), (4, ms(1600))]
    );
    assert_eq!(tokio::time::Instant::now() - fake.start(), ms(1900));
    assert!(hub.tools().is_empty());
    assert_eq!(hub.status()[0].restarts, 3);
    until(&fake, Duration::from_secs(3600)).await;
    assert_eq!(fake.opens().len(), 4, "no restart storm");
}

#[tokio::test(start_paused = true)]
async fn a_connect_rejection_racing_its_own_close_schedules_exactly_one_retry() {
    // Generation 1's handshake fails at 100 ms, the very moment its process exits. Generation 2
    // is lost at 1100 ms by a call and by its process exiting, both at once.
    let fake = Fake::new(
        vec![
            Gen::ok(Vec::new())
                .init(Reply::After(ms(100), Err("handshake refused".into())))
                .dies_after(ms(100)),
            Gen::ok(tools(&["write"]))
                .call(Reply::After(
                    ms(100),
                    Err(mcp_supervisor::core::classify::Failure::ConnectionLostAfterSend),
                ))
                .dies_after(ms(500)),
            Gen::ok(tools(&["write"])),
        ],
        Gen::open_fails("no fourth generation was scripted"),
    );
    let hub = start(server(), &fake);
    let snapshot = wait_until(&hub, "the first backoff", |s| {
        s.state() == ServerState::Retrying && !s.attempting()
    })
    .await;
    assert_eq!(snapshot.attempt, 1);
    assert_eq!(
        snapshot.next_attempt_at(),
        Some(fake.start() + ms(600)),
        "attempt 1's delay, counted once"
    );
    ready(&hub, 2).await;
    assert_eq!(fake.opens(), [(1, ms(0)), (2, ms(600))]);

    until(&fake, ms(1000)).await;
    let call = bounded("the call", hub.call("srv__write", CallArgs::default())).await;
    match call {
        Err(CallError::OutcomeUnknown { restored, .. }) => {
            assert_eq!(restored, mcp_supervisor::Restored::Yes { generation: 3 });
        }
        other => panic!("expected outcome unknown, got {other:?}"),
    }
    // Generation 2 was up for 0.5 s, under the stability window: its loss is failure 2 of the
    // outage (delay 1000 ms). Counted twice, it would be failure 3 (2000 ms) or two opens.
    until(&fake, Duration::from_secs(3600)).await;
    assert_eq!(
        fake.opens(),
        [(1, ms(0)), (2, ms(600)), (3, ms(2100))],
        "one retry, counted once"
    );
    assert_eq!(state_now(&hub), ServerState::Ready);
    stop(&hub).await;
}

#[tokio::test(start_paused = true)]
async fn a_close_during_a_resolving_connect_registers_nothing() {
    // Generation 1 dies at 500 ms while its handshake is still on its way; the handshake and the
    // first tools/list then succeed at 1 s. That dead generation must not publish.
    let fake = Fake::new(
        vec![
            Gen::ok(tools(&["stale"]))
                .init(Reply::After(ms(1000), Ok(())))
                .dies_after(ms(500)),
            Gen::ok(tools(&["fresh"])),
        ],
        Gen::open_fails("no third generation was scripted"),
    );
    let hub = start(server(), &fake);
    let mut events = hub.subscribe();
    until(&fake, ms(1001)).await;
    assert!(
        !tool_names(&hub).contains(&"srv__stale".to_string()),
        "registered a dead generation's tools: {:?}",
        tool_names(&hub)
    );
    ready(&hub, 2).await;
    assert_eq!(tool_names(&hub), ["srv__fresh"]);
    let seen = drain(&mut events);
    assert_eq!(
        tools_changed(&seen),
        1,
        "only generation 2 published: {seen:?}"
    );
    let states = states(&seen);
    assert!(!states.contains(&(ServerState::Ready, 1)), "{states:?}");
    // Never established, so a failed connect: retrying, not reconnecting.
    assert!(states.contains(&(ServerState::Retrying, 1)), "{states:?}");
    assert!(
        !states.iter().any(|(s, _)| *s == ServerState::Reconnecting),
        "{states:?}"
    );
    stop(&hub).await;
}

#[tokio::test(start_paused = true)]
async fn stop_during_an_in_flight_sync_quiesces_without_leaking_tools() {
    let gen1 = Gen::ok(tools(&["a", "b"]))
        .list(Reply::Now(Ok(tools(&["a"]))))
        .list(Reply::After(ms(3000), Ok(tools(&["a", "b"]))));
    let fake = Fake::new(vec![gen1], Gen::ok(tools(&["a"])));
    let hub = start(server(), &fake);
    let watch = hub.watch("srv").expect("srv is running");
    ready(&hub, 1).await;
    until(&fake, ms(1000)).await;
    fake.send(1, LinkEvent::ToolListChanged);
    until(&fake, ms(2000)).await;
    assert_eq!(
        fake.count(Some(1), &Op::ListTools),
        2,
        "the re-sync is in flight"
    );

    stop(&hub).await;
    assert_eq!(
        tokio::time::Instant::now() - fake.start(),
        ms(4000),
        "stop waits for the sync in flight"
    );
    assert_eq!(watch.borrow().state(), ServerState::Stopped);
    assert!(hub.tools().is_empty(), "leaked: {:?}", tool_names(&hub));
    until(&fake, Duration::from_secs(3600)).await;
    assert!(hub.tools().is_empty(), "leaked: {:?}", tool_names(&hub));
    assert_eq!(fake.opens().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn list_changes_while_a_re_sync_waits_its_turn_are_covered_by_it() {
    // The first re-sync answers 1 s after it was asked; the lists after it, at once.
    let gen1 = Gen::ok(tools(&["a", "b", "c"]))
        .list(Reply::Now(Ok(tools(&["a"]))))
        .list(Reply::After(ms(1000), Ok(tools(&["a", "b"]))));
    let fake = Fake::new(vec![gen1], Gen::open_fails("no second generation"));
    let hub = start(quick(1), &fake);
    ready(&hub, 1).await;
    until(&fake, ms(1000)).await;
    fake.send(1, LinkEvent::ToolListChanged);
    until(&fake, ms(1100)).await;
    assert_eq!(
        fake.count(Some(1), &Op::ListTools),
        2,
        "the re-sync is listing"
    );
    // A server that repeats itself: one re-sync waits behind the one listing, and covers all.
    for _ in 0..5 {
        fake.send(1, LinkEvent::ToolListChanged);
    }
    until(&fake, ms(1500)).await;
    assert_eq!(fake.count(Some(1), &Op::ListTools), 2, "nothing overtakes");
    until(&fake, ms(2100)).await;
    assert_eq!(
        fake.count(Some(1), &Op::ListTools),
        3,
        "one list after the changes"
    );
    assert_eq!(tool_names(&hub), ["srv__a", "srv__b", "srv__c"]);
    // A change after that one began listing gets a list of its own.
    fake.send(1, LinkEvent::ToolListChanged);
    until(&fake, ms(2200)).await;
    assert_eq!(fake.count(Some(1), &Op::ListTools), 4);
    stop(&hub).await;
}

#[tokio::test(start_paused = true)]
async fn a_stale_list_changed_from_a_replaced_generation_is_ignored() {
    // Each generation's later tools/list differs from its first, so any re-sync shows.
    let gen1 = Gen::ok(tools(&["a", "stale"])).list(Reply::Now(Ok(tools(&["a"]))));
    let gen2 = Gen::ok(tools(&["a", "b"])).list(Reply::Now(Ok(tools(&["a"]))));
    let fake = Fake::new(
        vec![gen1, gen2],
        Gen::open_fails("no third generation was scripted"),
    );
    let hub = start(server(), &fake);
    ready(&hub, 1).await;
    until(&fake, ms(1000)).await;
    fake.die(1);
    ready(&hub, 2).await;

    fake.send(1, LinkEvent::ToolListChanged);
    until(&fake, ms(5000)).await;
    assert_eq!(
        fake.count(None, &Op::ListTools),
        2,
        "only the two first syncs ran"
    );
    assert_eq!(tool_names(&hub), ["srv__a"]);

    // The current generation's signal is heard.
    fake.send(2, LinkEvent::ToolListChanged);
    until(&fake, ms(5001)).await;
    assert_eq!(fake.count(Some(2), &Op::ListTools), 2);
    assert_eq!(tool_names(&hub), ["srv__a", "srv__b"]);
    stop(&hub).await;
}

#[tokio::test(start_paused = true)]
async fn the_exact_delays_and_attempt_counts() {
    // Defaults: 500, 1000, 2000, 4000, 8000, 16000, 30000 × 4 ms, then give up: 151.5 s in all.
    let fake = Fake::new(
        vec![Gen::ok(tools(&["echo"]))],
        Gen::open_fails("connection refused"),
    );
    let hub = start(server(), &fake);
    let watch = hub.watch("srv").expect("srv is running");
    ready(&hub, 1).await;
    let lost = ms(1000);
    until(&fake, lost).await;
    fake.die(1);

    let delays = [
        500, 1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000, 30000,
    ];
    let mut due = lost;
    let mut expected = vec![(1, ms(0))];
    for (i, delay) in delays.into_iter().enumerate() {
        let attempt = i as u32 + 1;
        let started = due;
        due += ms(delay);
        // Half-way and 1 ms before the attempt is due: nothing has happened yet.
        for at in [started + ms(delay / 2), due - ms(1)] {
            until(&fake, at).await;
            assert_eq!(fake.opens(), expected, "at {at:?}");
            let snapshot = watch.borrow().clone();
            assert_eq!(snapshot.state(), ServerState::Reconnecting, "at {at:?}");
            assert!(!snapshot.attempting(), "at {at:?}");
            assert_eq!(
                (snapshot.attempt, snapshot.max_attempts),
                (attempt, 10),
                "at {at:?}"
            );
            assert_eq!(
                snapshot.next_attempt_at(),
                Some(fake.start() + due),
                "at {at:?}"
            );
        }
        expected.push((attempt as u64 + 1, due));
    }
    until(&fake, due + ms(1)).await;
    assert_eq!(
        fake.opens(),
        expected,
        "exactly maxAttempts reconnect attempts, each when due"
    );
    assert_eq!(due - lost, ms(151_500));
    assert_eq!(watch.borrow().state(), ServerState::GaveUp);
    until(&fake, Duration::from_secs(3600)).await;
    assert_eq!(fake.opens().len(), 11);
    stop(&hub).await;
}

#[tokio::test(start_paused = true)]
async fn an_explicit_reconnect_brings_a_gave_up_server_back_with_a_fresh_budget() {
    let fake = Fake::new(
        vec![
            Gen::ok(tools(&["echo"])),
            Gen::open_fails("refused"),
            Gen::open_fails("refused"),
            // After the explicit reconnect: two failures fit a fresh budget of 2, not a spent one.
            Gen::open_fails("refused"),
            Gen::open_fails("refused"),
            Gen::ok(tools(&["echo"])),
        ],
        Gen::open_fails("no seventh generation was scripted"),
    );
    let hub = start(quick(2), &fake);
    ready(&hub, 1).await;
    until(&fake, ms(1000)).await;
    fake.die(1);
    state(&hub, ServerState::GaveUp).await;
    assert!(hub.tools().is_empty());
    assert_eq!(fake.opens().len(), 3);

    until(&fake, ms(2000)).await;
    hub.reconnect("srv").expect("srv is configured");
    ready(&hub, 6).await;
    assert_eq!(
        fake.opens(),
        [
            (1, ms(0)),
            // Up for the window: at once, then 200 ms later.
            (2, ms(1000)),
            (3, ms(1200)),
            (4, ms(2000)),
            (5, ms(2100)),
            (6, ms(2300))
        ]
    );
    assert_eq!(tool_names(&hub), ["srv__echo"], "the tools are back");
    stop(&hub).await;
}

#[tokio::test(start_paused = true)]
async fn a_reload_that_changes_the_naming_renames_every_tool_and_touches_no_server() {
    use mcp_supervisor::core::config::Config;
    use mcp_supervisor::core::naming::{NamingConfig, NamingMode};
    let fake = Fake::new(vec![], Gen::ok(vec![tool("echo")]));
    let hub = start(server(), &fake);
    ready(&hub, 1).await;
    assert_eq!(tool_names(&hub), ["srv__echo"]);
    let config = Config {
        servers: vec![server()],
        naming: NamingConfig {
            mode: NamingMode::Original,
            separator: "__".into(),
        },
        ..Config::default()
    };
    let summary = bounded("reload", hub.reload(config)).await;
    assert!(summary.naming_changed, "{summary:?}");
    assert_eq!(summary.unchanged, ["srv"]);
    assert_eq!(tool_names(&hub), ["echo"]);
    assert_eq!(fake.opens().len(), 1, "the server was not restarted");
    stop(&hub).await;
}

#[tokio::test(start_paused = true)]
async fn the_hub_keeps_each_servers_lifecycle_events_and_counts_its_calls() {
    use mcp_supervisor::history::EventKind;
    let fake = Fake::new(
        vec![Gen::ok(tools(&["echo"])), Gen::open_fails("refused")],
        Gen::ok(tools(&["echo"])),
    );
    let hub = start(quick(5), &fake);
    ready(&hub, 1).await;
    // Lost before the window: attempt 1 after the delay, which fails; then a backoff, then ready.
    until(&fake, ms(200)).await;
    fake.die(1);
    ready(&hub, 3).await;
    assert_eq!(
        timeline(&hub),
        [
            (EventKind::Ready, 1),
            (EventKind::Lost, 1),
            (EventKind::Backoff, 1),
            (EventKind::Backoff, 2),
            (EventKind::Ready, 3),
        ]
    );
    let events = hub.events("srv");
    assert!(
        events[1].detail.as_deref().is_some_and(|d| !d.is_empty()),
        "the loss says why: {:?}",
        events[1]
    );
    assert_eq!(events[2].attempt, Some(1));
    assert_eq!(events[3].attempt, Some(2));
    assert!(
        events[3]
            .detail
            .as_deref()
            .unwrap_or_default()
            .contains("refused"),
        "{:?}",
        events[3]
    );
    assert!(hub.events("nope").is_empty());

    // Calls: two that answer, one to a tool no server has (not a server's call: not counted).
    for _ in 0..2 {
        hub.call("srv__echo", CallArgs::default())
            .await
            .expect("echo answers");
    }
    assert!(hub.call("srv__nope", CallArgs::default()).await.is_err());
    let (minutes, hour) = hub.calls("srv");
    assert_eq!((hour.calls, hour.errors), (2, 0));
    assert_eq!(minutes.iter().map(|m| m.calls).sum::<u32>(), 2);
    assert!(hour.median_ms.is_some());
    stop(&hub).await;
}

#[tokio::test(start_paused = true)]
async fn a_generation_found_hung_is_hung_on_the_timeline_then_ready() {
    use mcp_supervisor::history::EventKind;
    // Probed at 200 ms, no answer by 300 ms: one miss is enough here; killed, and (up for less
    // than the 1 s window) replaced after a 100 ms backoff.
    let mut config = quick(5);
    config.health.interval = Some(ms(200));
    config.health.timeout = ms(100);
    config.health.failures = 1;
    let fake = Fake::new(
        vec![Gen::ok(tools(&["echo"])).pings_default(Reply::Hang)],
        Gen::ok(tools(&["echo"])),
    );
    let hub = start(config, &fake);
    ready(&hub, 1).await;
    ready(&hub, 2).await;
    until(&fake, ms(450)).await;
    assert_eq!(fake.opens(), [(1, ms(0)), (2, ms(400))]);
    assert!(fake.log().contains(&Entry {
        at: ms(300),
        generation: 1,
        op: Op::Close(CloseHow::Kill)
    }));
    let events = hub.events("srv");
    assert_eq!(
        timeline(&hub),
        [
            (EventKind::Ready, 1),
            (EventKind::Hung, 1),
            (EventKind::Backoff, 1),
            (EventKind::Ready, 2),
        ]
    );
    assert!(
        events[1]
            .detail
            .as_deref()
            .is_some_and(|d| d.contains("last: ping failed: the deadline passed")),
        "hung says what timed out: {:?}",
        events[1]
    );
    stop(&hub).await;
}

#[tokio::test(start_paused = true)]
async fn a_stale_session_re_established_at_once_is_session_recovered_on_the_timeline() {
    use mcp_supervisor::core::classify::Failure;
    use mcp_supervisor::history::EventKind;
    let fake = Fake::new(
        vec![
            Gen::ok(tools(&["echo"]))
                .call_to("echo", Reply::Now(Err(Failure::SessionExpired)))
                .close_after(ms(10)),
        ],
        Gen::ok(tools(&["echo"])),
    );
    let hub = start(quick(5), &fake);
    ready(&hub, 1).await;
    let answer = bounded("the call", hub.call("srv__echo", CallArgs::default())).await;
    assert_eq!(
        answer.map(|r| result_text(&r)),
        Ok("echo on generation 2".to_string()),
        "sent again on the fresh session"
    );
    until(&fake, ms(100)).await;
    let events = hub.events("srv");
    // One event: no loss, no backoff, no second "ready".
    assert_eq!(
        timeline(&hub),
        [(EventKind::Ready, 1), (EventKind::SessionRecovered, 2)]
    );
    assert_eq!(
        events[1].detail.as_deref(),
        Some("the server no longer knows our session (HTTP 404)"),
        "it says what the server answered"
    );
    stop(&hub).await;
}
