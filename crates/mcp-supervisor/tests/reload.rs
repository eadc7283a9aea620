//! Reloads with real processes (SPEC §9 "applied one at a time", §3 "two processes of one server
//! never run at once"): reloads, and a stop, that arrive while a reload is held inside the stop
//! of a server slow to die.

mod real;

use std::time::Duration;

use mcp_supervisor::Hub;
use mcp_supervisor::core::config::Config;
use mcp_supervisor_testkit::ledger::Ledger;
use mcp_supervisor_testkit::poll_until;
use real::*;
use serde_json::json;

/// One server, `slow`, with `tools` extra tools, whose instances linger `linger` s when stopped.
fn slow(ledger: &Ledger, tools: u32, linger: u32) -> Config {
    config(json!({ "slow": ledger.server(tools, linger) }))
}

/// Start `slow` lingering 30 s (only the SIGKILL, about 2 s into its stop, ends it); returns the
/// hub and the first instance's pid.
async fn start_lingering(ledger: &Ledger) -> (Hub, u32) {
    let hub = Hub::start(slow(ledger, 0, 30));
    let first = wait_ready(&hub, "slow", 0).await;
    let pid = first.pid().expect("a stdio server has a pid");
    assert_eq!(ledger.alive(), vec![pid]);
    (hub, pid)
}

/// Wait until `pid`'s stdin was closed (its stop has begun) and check that it lingers.
async fn stopping(ledger: &Ledger, pid: u32) {
    poll_until(
        "the first instance's stdin is closed",
        Duration::from_secs(10),
        || ledger.closing().contains(&pid),
    )
    .await;
    assert!(alive(pid), "the first instance lingers");
}

#[tokio::test]
async fn reloads_arriving_during_a_slow_stop_never_run_two_processes_of_a_server() {
    let ledger = Ledger::new("reload");
    let (hub, first) = start_lingering(&ledger).await;

    // Reload 1 changes the server: it is held inside the stop of the lingering first instance.
    // Later instances exit when their stdin closes.
    let one = hub.reload(slow(&ledger, 1, 0));
    let rest = async {
        stopping(&ledger, first).await;
        // Two more reloads arrive while reload 1 still waits for the first instance to die.
        tokio::join!(
            hub.reload(slow(&ledger, 2, 0)),
            hub.reload(slow(&ledger, 3, 0))
        )
    };
    let (one, (two, three)) =
        tokio::time::timeout(Duration::from_secs(30), async { tokio::join!(one, rest) })
            .await
            .expect("the reloads end");

    assert_eq!(
        ledger.overlaps(),
        "",
        "two instances of `slow` were alive at once"
    );
    for summary in [&one, &two, &three] {
        assert_eq!(summary.changed, vec!["slow".to_string()], "{summary:?}");
    }
    // The last config is the one in force: its tools are published, its process runs alone.
    let last = wait_for(&hub, "slow", Duration::from_secs(20), |s| {
        s.state() == mcp_supervisor::ServerState::Ready
    })
    .await;
    poll_until(
        "the published tools are the last config's",
        Duration::from_secs(10),
        || {
            hub.tools()
                .iter()
                .any(|t| t.public_name == "slow__tool_0003")
        },
    )
    .await;
    let extra = hub
        .tools()
        .iter()
        .filter(|t| t.public_name.starts_with("slow__tool_"))
        .count();
    assert_eq!(extra, 3, "the last config's three extra tools");
    assert_eq!(
        ledger.alive(),
        vec![last.pid().unwrap_or(0)],
        "one live instance"
    );
    hub.stop().await;
    assert_eq!(ledger.alive(), Vec::<u32>::new(), "stop leaves no instance");
}

#[tokio::test]
async fn a_stop_during_a_reload_waits_for_its_stops_and_nothing_starts_after_it() {
    let ledger = Ledger::new("reload-stop");
    let (hub, first) = start_lingering(&ledger).await;

    let reload = hub.reload(slow(&ledger, 1, 0));
    let stop = async {
        stopping(&ledger, first).await;
        hub.stop().await;
        // Stop returns once the reload's own stop is done: the lingering instance is gone.
        assert!(!alive(first), "stop waited for the reload's stop");
    };
    tokio::time::timeout(Duration::from_secs(30), async {
        tokio::join!(reload, stop)
    })
    .await
    .expect("the reload and the stop end");

    assert_eq!(
        ledger.started(),
        vec![first],
        "nothing started after the stop"
    );
    assert_eq!(ledger.alive(), Vec::<u32>::new());
    assert_eq!(hub.reload(slow(&ledger, 2, 0)).await, Default::default());
    assert_eq!(
        ledger.started(),
        vec![first],
        "a reload after stop starts nothing"
    );
}
