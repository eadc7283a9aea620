//! Servers on demand and the idle timeout (SPEC §13) against the scripted fake on a paused clock:
//! an on-demand server is not opened before a client's first request and is opened by it; one
//! with no saved catalog is opened once to learn its lists, then closed; `idleTimeoutMs` closes a
//! server that no client asked for that long (health probes do not count), and that is state
//! `idle`, not an outage (no budget, no restart, tools kept); the next call opens it again.

#[path = "support/fake.rs"]
mod fake;
#[path = "support/saved.rs"]
mod saved;

use fake::*;
use mcp_supervisor::core::config::{ServerConfig, Start};
use mcp_supervisor::link::CloseHow;
use mcp_supervisor::{CallArgs, Phase, ServerState, ToolList};
use saved::*;

fn on_demand() -> ServerConfig {
    let mut s = quick();
    s.start = Start::OnDemand;
    s
}

/// The times (since the fake's start) at which generations were closed, and how.
fn closes(fake: &Fake) -> Vec<(u64, std::time::Duration, CloseHow)> {
    fake.log()
        .into_iter()
        .filter_map(|e| match e.op {
            Op::Close(how) => Some((e.generation, e.at, how)),
            _ => None,
        })
        .collect()
}

async fn call_echo(hub: &mcp_supervisor::Hub) -> String {
    let result = bounded("the call", hub.call("srv__echo", CallArgs::default()))
        .await
        .expect("the call starts the server and succeeds");
    result_text(&result)
}

#[tokio::test(start_paused = true)]
async fn an_on_demand_server_is_not_started_before_the_first_request_and_is_started_by_it() {
    let dir = StateDir::new("on-demand");
    save_once(&dir, &["echo", "add"]).await;
    let fake = Fake::new(
        vec![Gen::ok(tools(&["echo", "add"])).init(Reply::After(ms(300), Ok(())))],
        Gen::open_fails("unscripted"),
    );
    let hub = start_saving(on_demand(), &fake, &dir);
    // The saved tools are listed at once; nothing runs.
    assert_eq!(tool_names(&hub), ["srv__echo", "srv__add"]);
    let status = &hub.status()[0];
    assert_eq!(
        (
            status.state,
            status.tool_list,
            status.pid,
            status.generation
        ),
        (ServerState::Idle, ToolList::Cache, None, 0)
    );
    bounded("wait_listed", hub.wait_listed(ms(10_000))).await;
    assert!(
        hub.wait_ready(ms(10)).await.is_empty(),
        "idle is in service"
    );
    until(&fake, ms(60_000)).await;
    assert_eq!(fake.opens(), [], "nothing was started before a request");
    assert_eq!(state_now(&hub), ServerState::Idle);

    // The first call starts it and waits for it within its deadline.
    assert_eq!(call_echo(&hub).await, "echo on generation 1");
    assert_eq!(fake.opens(), [(1, ms(60_000))]);
    let status = &hub.status()[0];
    assert_eq!(
        (status.state, status.restarts, status.attempts),
        (ServerState::Ready, 0, 0)
    );
    // With no idleTimeoutMs it stays.
    until(&fake, ms(600_000)).await;
    assert_eq!(state_now(&hub), ServerState::Ready);
    assert_eq!(fake.opens().len(), 1);
    stop(&hub).await;
}

#[tokio::test(start_paused = true)]
async fn without_a_saved_catalog_it_starts_once_to_learn_its_lists_then_stops() {
    let fake = Fake::new(
        vec![Gen::ok(tools(&["echo"])), Gen::ok(tools(&["echo"]))],
        Gen::open_fails("unscripted"),
    );
    let hub = start(on_demand(), &fake);
    let idle = wait_until(&hub, "idle after learning", |s| {
        s.state() == ServerState::Idle && matches!(s.phase, Phase::Idle)
    })
    .await;
    assert_eq!(idle.generation, 1);
    assert_eq!(fake.opens(), [(1, ms(0))]);
    assert_eq!(closes(&fake), [(1, ms(0), CloseHow::Graceful)]);
    // The learned list stays published.
    assert_eq!(tool_names(&hub), ["srv__echo"]);
    until(&fake, ms(30_000)).await;
    assert_eq!(fake.opens().len(), 1, "not started again without a request");

    assert_eq!(call_echo(&hub).await, "echo on generation 2");
    assert_eq!(fake.opens(), [(1, ms(0)), (2, ms(30_000))]);
    assert_eq!(hub.status()[0].restarts, 0);
    stop(&hub).await;
}

#[tokio::test(start_paused = true)]
async fn idle_timeout_stops_the_server_without_an_outage_and_probes_do_not_count() {
    let mut server = quick();
    server.idle_timeout = Some(ms(5_000));
    server.health.interval = Some(ms(1_000));
    let fake = Fake::new(
        vec![Gen::ok(tools(&["echo"])), Gen::ok(tools(&["echo"]))],
        Gen::open_fails("unscripted"),
    );
    let hub = start(server, &fake);
    let mut events = hub.subscribe();
    ready(&hub, 1).await;

    let idle = state(&hub, ServerState::Idle).await;
    // Probed every second meanwhile; the probes kept nothing alive.
    let pings: Vec<_> = fake.pings().into_iter().map(|(_, at)| at).collect();
    assert_eq!(pings, [ms(1_000), ms(2_000), ms(3_000), ms(4_000)]);
    assert_eq!(closes(&fake), [(1, ms(5_000), CloseHow::Graceful)]);
    assert_eq!(
        (idle.attempt, idle.restarts, idle.last_error.clone()),
        (0, 0, None)
    );
    assert_eq!(tool_names(&hub), ["srv__echo"], "its tools stay published");
    assert!(
        hub.server_info("srv").is_some(),
        "its last initialize answer stays known while idle"
    );
    let seen = states(&drain(&mut events));
    assert!(
        !seen.iter().any(|(s, _)| matches!(
            s,
            ServerState::Reconnecting | ServerState::Retrying | ServerState::GaveUp
        )),
        "no outage was reported: {seen:?}"
    );
    assert!(ServerState::Idle.in_service() && !ServerState::Idle.is_final());
    // No probes while idle.
    until(&fake, ms(20_000)).await;
    assert_eq!(fake.pings().len(), 4);

    // The next call starts it again, with a fresh budget and no restart counted.
    assert_eq!(call_echo(&hub).await, "echo on generation 2");
    assert_eq!(fake.opens(), [(1, ms(0)), (2, ms(20_000))]);
    let status = &hub.status()[0];
    assert_eq!(
        (status.state, status.restarts, status.attempts),
        (ServerState::Ready, 0, 0)
    );
    stop(&hub).await;
}

#[tokio::test(start_paused = true)]
async fn a_request_restarts_the_idle_clock_and_one_under_way_keeps_the_server_up() {
    let mut server = quick();
    server.idle_timeout = Some(ms(5_000));
    let fake = Fake::new(
        vec![
            Gen::ok(tools(&["echo", "slow"]))
                .call_to("slow", Reply::After(ms(12_000), Ok(text_result("done")))),
        ],
        Gen::open_fails("unscripted"),
    );
    let hub = start(server, &fake);
    ready(&hub, 1).await;
    until(&fake, ms(3_000)).await;
    assert_eq!(call_echo(&hub).await, "echo on generation 1");
    // 5 s after that call, not after the start.
    until(&fake, ms(7_500)).await;
    assert_eq!(state_now(&hub), ServerState::Ready);
    let idle = state(&hub, ServerState::Idle).await;
    assert_eq!(closes(&fake), [(1, ms(8_000), CloseHow::Graceful)]);
    assert_eq!(idle.generation, 1);

    // A call of 12 s on generation 2: the server stays up while it runs, and 5 s after it.
    fake.push(
        Gen::ok(tools(&["echo", "slow"]))
            .call_to("slow", Reply::After(ms(12_000), Ok(text_result("done")))),
    );
    let result = bounded("the slow call", hub.call("srv__slow", CallArgs::default()))
        .await
        .expect("the slow call succeeds");
    assert_eq!(result_text(&result), "done");
    let began = fake.opens()[1].1;
    assert_eq!(began, ms(8_000));
    assert_eq!(state_now(&hub), ServerState::Ready);
    state(&hub, ServerState::Idle).await;
    assert_eq!(
        closes(&fake)[1],
        (2, began + ms(12_000) + ms(5_000), CloseHow::Graceful)
    );
    stop(&hub).await;
}

#[tokio::test(start_paused = true)]
async fn a_call_shorter_than_the_start_fails_with_the_state_and_the_server_still_starts() {
    let dir = StateDir::new("on-demand-deadline");
    save_once(&dir, &["echo"]).await;
    let fake = Fake::new(
        vec![Gen::ok(tools(&["echo"])).init(Reply::After(ms(2_000), Ok(())))],
        Gen::open_fails("unscripted"),
    );
    let hub = start_saving(on_demand(), &fake, &dir);
    let args = CallArgs {
        timeout: Some(ms(500)),
        ..CallArgs::default()
    };
    let began = tokio::time::Instant::now();
    let error = bounded("the short call", hub.call("srv__echo", args))
        .await
        .expect_err("the start takes longer than the call's deadline");
    assert_eq!(began.elapsed(), ms(500), "it waited its whole deadline");
    assert!(error.to_string().contains("connecting"), "{error}");
    ready(&hub, 1).await;
    assert_eq!(fake.opens().len(), 1);
    stop(&hub).await;
}
