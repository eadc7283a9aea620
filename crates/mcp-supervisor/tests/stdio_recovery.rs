//! End to end with real fault-server processes over stdio (SPEC §2–4, §7).

mod real;

use std::time::Duration;

use mcp_supervisor::{CallArgs, Hub, HubEvent, ServerState};
use real::*;
use serde_json::json;

fn fast_policy() -> serde_json::Value {
    json!({ "initialDelayMs": 50, "maxDelayMs": 400, "maxAttempts": 3 })
}

#[tokio::test]
async fn a_stdio_crash_recovers_and_the_same_public_tool_answers_again_exactly_once() {
    let bin = fault_bin();
    let hub = Hub::start(config(json!({
        "fault": { "command": bin, "reconnect": fast_policy() }
    })));
    let first = wait_ready(&hub, "fault", 0).await;
    let before: Vec<_> = hub
        .tools()
        .iter()
        .map(|t| t.definition.get().to_string())
        .collect();
    let pid1 = first.pid().expect("stdio server has a pid");

    let crashed = hub
        .call("fault__crash", CallArgs::default())
        .await
        .expect("crash replies first");
    assert_eq!(text(&crashed), "crashing");

    let second = wait_ready(&hub, "fault", first.generation).await;
    assert_ne!(
        second.pid(),
        Some(pid1),
        "a fresh process serves the new generation"
    );
    assert!(
        gone_within(pid1, Duration::from_secs(5)).await,
        "the crashed process is gone"
    );
    assert_eq!(second.restarts, 1);

    let echo = hub
        .call(
            "fault__echo",
            CallArgs {
                arguments: args(json!({"message": "again"})),
                ..Default::default()
            },
        )
        .await
        .expect("the same public tool answers again");
    assert_eq!(text(&echo), "again");
    let after: Vec<_> = hub
        .tools()
        .iter()
        .map(|t| t.definition.get().to_string())
        .collect();
    assert_eq!(
        before, after,
        "same names and definitions, byte for byte, no duplicates"
    );
    assert_eq!(
        hub.tools()
            .iter()
            .filter(|t| t.public_name == "fault__echo")
            .count(),
        1
    );
    hub.stop().await;
    assert!(gone_within(second.pid().unwrap_or(0), Duration::from_secs(5)).await);
}

#[tokio::test]
async fn a_crash_loop_exhausts_the_budget_and_the_tools_are_withdrawn() {
    let bin = fault_bin();
    let dir = temp_dir("crashloop");
    let state = dir.join("starts");
    // Up once (tools registered), then every later start fails.
    let hub = Hub::start(config(json!({
        "loop": {
            "command": bin,
            "args": ["--exit-after-ms", "100"],
            "reconnect": fast_policy()
        }
    })));
    // Brief successes do not launder the budget: each connect succeeds, then dies within the
    // stability window (= maxDelayMs 400), so the count never resets.
    let end = wait_for(&hub, "loop", Duration::from_secs(30), |s| {
        s.state() == ServerState::GaveUp
    })
    .await;
    assert!(
        end.generation >= 4,
        "one loss plus exactly maxAttempts attempts; got generation {}",
        end.generation
    );
    assert_eq!(
        end.generation, 4,
        "exactly maxAttempts (3) reconnects follow the first loss"
    );
    assert!(hub.tools().is_empty(), "giving up withdraws the tools");
    hub.stop().await;

    // A server that never comes up: first attempt + 3 retries = 4 starts, then gave_up.
    let hub = Hub::start(config(json!({
        "never": {
            "command": bin,
            "args": ["--fail-first", "100", "--state-file", state],
            "reconnect": fast_policy()
        }
    })));
    let end = wait_for(&hub, "never", Duration::from_secs(30), |s| {
        s.state() == ServerState::GaveUp
    })
    .await;
    let starts: u32 = std::fs::read_to_string(&state)
        .unwrap_or_default()
        .trim()
        .parse()
        .unwrap_or(0);
    assert_eq!(
        starts, 4,
        "the failed first attempt counts as failure 1, then 3 retries"
    );
    let error = end.last_error.unwrap_or_default();
    assert!(
        error.contains("failing start"),
        "the last stderr lines are in the error: {error}"
    );
    assert!(hub.tools().is_empty());
    hub.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn stopping_during_an_outage_returns_promptly_and_nothing_restarts() {
    let bin = fault_bin();
    let dir = temp_dir("stop-outage");
    let state = dir.join("starts");
    let hub = Hub::start(config(json!({
        "down": {
            "command": bin,
            "args": ["--fail-first", "100", "--state-file", state],
            "reconnect": { "initialDelayMs": 60000, "maxDelayMs": 60000, "maxAttempts": 5 }
        }
    })));
    wait_for(&hub, "down", Duration::from_secs(10), |s| {
        s.state() == ServerState::Retrying && !s.attempting()
    })
    .await;
    let starts_before = std::fs::read_to_string(&state).unwrap_or_default();
    tokio::time::timeout(Duration::from_secs(3), hub.stop())
        .await
        .expect("stop returns promptly during a 60 s backoff");
    let status = hub.status();
    assert_eq!(status[0].state, ServerState::Stopped);
    // The supervisor task has ended (stop awaited it), so nothing can start the server again.
    assert_eq!(
        std::fs::read_to_string(&state).unwrap_or_default(),
        starts_before
    );
    assert!(
        hub.reconnect("down").is_err(),
        "a stopped hub takes no more reconnects"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// `sh -c 'server; true'` keeps the shell as the group leader and the server as its child, like
/// an `npx` wrapper and its node process.
fn wrapped(bin: &std::path::Path, pid_file: &std::path::Path) -> serde_json::Value {
    json!({
        "command": "sh",
        "args": ["-c", format!("'{}' --pid-file '{}'; true", bin.display(), pid_file.display())],
        "reconnect": fast_policy()
    })
}

async fn read_pid(path: &std::path::Path) -> u32 {
    for _ in 0..200 {
        if let Ok(text) = std::fs::read_to_string(path)
            && let Ok(pid) = text.trim().parse()
        {
            return pid;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no pid in {}", path.display());
}

#[tokio::test]
async fn a_wrapped_server_leaves_no_process_behind_after_a_crash_or_a_stop() {
    let bin = fault_bin();
    let dir = temp_dir("wrapped");
    let pid_file = dir.join("pid");
    let hub = Hub::start(config(json!({ "wrapped": wrapped(&bin, &pid_file) })));
    let first = wait_ready(&hub, "wrapped", 0).await;
    let leader1 = first.pid().expect("leader pid");
    let server1 = read_pid(&pid_file).await;
    assert_ne!(leader1, server1, "the server is the wrapper's child");
    let _ = std::fs::remove_file(&pid_file);

    // Kill only the wrapper: its child still holds stdout open, so only the group kill ends it.
    nix_kill(leader1);
    let second = wait_ready(&hub, "wrapped", first.generation).await;
    assert!(
        gone_within(server1, Duration::from_secs(5)).await,
        "the orphaned server was killed with its group"
    );
    let server2 = read_pid(&pid_file).await;
    assert!(alive(server2));

    hub.stop().await;
    assert!(
        gone_within(server2, Duration::from_secs(5)).await,
        "stop leaves no server process"
    );
    assert!(
        gone_within(second.pid().unwrap_or(0), Duration::from_secs(5)).await,
        "nor the wrapper"
    );
    let _ = std::fs::remove_dir_all(dir);
}

fn nix_kill(pid: u32) {
    let status = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status();
    assert!(matches!(status, Ok(s) if s.success()), "kill -9 {pid}");
}

#[tokio::test]
async fn a_tool_list_change_upstream_reaches_the_registry() {
    let bin = fault_bin();
    let hub = Hub::start(config(json!({ "fault": { "command": bin } })));
    wait_ready(&hub, "fault", 0).await;
    let mut events = hub.subscribe();
    hub.call(
        "fault__set_tools",
        CallArgs {
            arguments: args(json!({"tools": ["extra_one"]})),
            ..Default::default()
        },
    )
    .await
    .expect("set_tools");
    let changed = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match events.recv().await {
                Ok(HubEvent::ToolsChanged)
                    if hub.registry().resolve("fault__extra_one").is_some() =>
                {
                    return true;
                }
                Ok(_) => continue,
                Err(_) => return false,
            }
        }
    })
    .await;
    assert_eq!(changed, Ok(true), "the new tool is published");
    let result = hub
        .call(
            "fault__extra_one",
            CallArgs {
                arguments: args(json!({"x": 1})),
                ..Default::default()
            },
        )
        .await
        .expect("the new tool answers");
    assert!(!text(&result).is_empty());
    hub.stop().await;
}

#[tokio::test]
async fn killing_a_stdio_server_is_seen_at_once_and_healed() {
    let bin = fault_bin();
    let hub = Hub::start(config(
        json!({ "fault": { "command": bin, "reconnect": fast_policy() } }),
    ));
    let first = wait_ready(&hub, "fault", 0).await;
    nix_kill(first.pid().expect("pid"));
    // The exit is observed (not polled), the generation is replaced, and calls work again.
    let second = wait_ready(&hub, "fault", first.generation).await;
    assert_eq!(
        second.generation,
        first.generation + 1,
        "one loss, one reconnect"
    );
    let result = hub
        .call(
            "fault__add",
            CallArgs {
                arguments: args(json!({"a": 2, "b": 3})),
                ..Default::default()
            },
        )
        .await
        .expect("add after recovery");
    assert_eq!(text(&result), "5");
    hub.stop().await;
}

#[tokio::test]
async fn a_paged_upstream_tool_list_is_read_to_the_end() {
    let bin = fault_bin();
    let hub = Hub::start(config(json!({
        "whole": { "command": bin, "args": ["--tools", "25"] },
        "paged": { "command": bin, "args": ["--tools", "25", "--page-size", "4"] }
    })));
    wait_ready(&hub, "whole", 0).await;
    wait_ready(&hub, "paged", 0).await;
    let count = |server: &str| hub.tools().iter().filter(|t| t.server == server).count();
    assert!(count("whole") >= 39, "14 built-in tools and 25 extra");
    assert_eq!(
        count("paged"),
        count("whole"),
        "every page is read, cursor after cursor"
    );
    assert!(
        hub.registry().resolve("paged__tool_0025").is_some(),
        "the last page is there"
    );
    hub.stop().await;
}

#[tokio::test]
async fn an_attempt_that_outlasts_connect_timeout_fails_and_leaves_no_process() {
    let bin = fault_bin();
    let dir = temp_dir("slow-start");
    let pid_file = dir.join("pid");
    let hub = Hub::start(config(json!({
        "slow": {
            "command": bin,
            "args": ["--startup-delay-ms", "60000", "--pid-file", pid_file],
            "connectTimeoutMs": 300,
            "reconnect": { "initialDelayMs": 60000, "maxDelayMs": 60000, "maxAttempts": 3 }
        }
    })));
    let snapshot = wait_for(&hub, "slow", Duration::from_secs(10), |s| {
        s.state() == ServerState::Retrying && !s.attempting()
    })
    .await;
    let error = snapshot.last_error.unwrap_or_default();
    assert!(error.contains("connectTimeoutMs (300 ms)"), "{error}");
    let pid: u32 = std::fs::read_to_string(&pid_file)
        .ok()
        .and_then(|p| p.trim().parse().ok())
        .expect("the server wrote its pid");
    assert!(
        gone_within(pid, Duration::from_secs(2)).await,
        "the timed-out attempt's process is gone before the backoff"
    );
    hub.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}
