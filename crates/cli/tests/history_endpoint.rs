//! End to end: `GET /history` on the admin endpoints (SPEC §15), the data a dashboard plots,
//! from the real binary over a real fault server: after a `kill -9` it shows the server ready
//! with its first pid, lost with why, and ready again with the new pid, and it counts the tool
//! calls made through `/mcp`. Every wait is bounded.

mod interop_support;
mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::*;

const LIMIT: Duration = Duration::from_secs(20);

async fn history(running: &Running) -> Value {
    reqwest::get(running.url("/history"))
        .await
        .expect("GET /history")
        .json()
        .await
        .expect("JSON")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_shows_a_kill_and_the_recovery_with_both_pids_and_counts_the_calls() {
    let dir = temp_dir("history-endpoint");
    let path = dir.join("servers.json");
    write_config(&path, json!({ "f": { "command": fault_bin() } }));
    let proxy = serve_http_without_catalog(&path).await;
    let ready = status_until(&proxy, LIMIT, |s| state_is(s, "f", "ready")).await;
    let first = pid_of(&ready, "f").expect("a pid");
    kill9(first);
    let again = status_until(&proxy, LIMIT, |s| {
        state_is(s, "f", "ready") && pid_of(s, "f").is_some_and(|p| p != first)
    })
    .await;
    let second = pid_of(&again, "f").expect("a new pid");

    // Two calls through /mcp.
    let http = reqwest::Client::new();
    let url = proxy.url("/mcp");
    let (response, session) = post_initialize(&http, &url, None, json!({}), "history").await;
    drop(response);
    for id in 1..=2 {
        let answer = http
            .post(&url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-06-18")
            .header("mcp-session-id", &session)
            .timeout(LIMIT)
            .json(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                          "params": {"name": "f__echo", "arguments": {"message": "hi"}}}))
            .send()
            .await
            .expect("tools/call");
        assert_eq!(answer.status().as_u16(), 200);
        let body = answer.text().await.unwrap_or_default();
        assert!(answer_of(&body).get("result").is_some(), "{body}");
    }

    let body = history(&proxy).await;
    let f = &body["servers"][0];
    assert_eq!(f["name"], "f");
    let events = f["events"].as_array().expect("events");
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["kind"].as_str()).collect();
    let ready_at = |pid: u32| {
        events
            .iter()
            .position(|e| e["kind"] == "ready" && e["pid"] == json!(pid))
            .unwrap_or_else(|| panic!("no ready event with pid {pid}: {kinds:?}"))
    };
    let lost = events
        .iter()
        .position(|e| e["kind"] == "lost")
        .unwrap_or_else(|| panic!("no lost event: {kinds:?}"));
    assert!(
        ready_at(first) < lost && lost < ready_at(second),
        "{kinds:?}"
    );
    assert!(
        events[lost]["detail"]
            .as_str()
            .is_some_and(|d| !d.is_empty()),
        "the loss says why: {}",
        events[lost]
    );
    assert!(
        events
            .iter()
            .all(|e| e["at"].as_u64().is_some_and(|t| t > 0))
    );
    let hour = &f["calls"]["hour"];
    assert_eq!(hour["calls"], 2, "{hour}");
    assert_eq!(hour["errors"], 0, "{hour}");
    assert!(
        hour["median_ms"].as_f64().is_some_and(|m| m > 0.0),
        "{hour}"
    );
    let minutes = f["calls"]["minutes"].as_array().expect("minutes");
    let counted: u64 = minutes.iter().filter_map(|m| m["calls"].as_u64()).sum();
    assert_eq!(counted, 2);
}

/// The official Python SDK server, frozen with SIGSTOP, stops answering its health probes: it is
/// judged hung, killed and replaced, and `/history` says `hung` (with what timed out) on its
/// generation, then `ready` with the new pid, and no `lost` for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_shows_a_frozen_python_sdk_server_as_hung_then_ready_again() {
    let dir = temp_dir("history-hung");
    let path = dir.join("servers.json");
    let python = interop_support::python();
    let script = interop_support::py_script("strict_server.py");
    write_config(
        &path,
        json!({ "py": {
            "command": interop_support::path_str(&python),
            "args": [interop_support::path_str(&script)],
            "health": { "intervalMs": 300, "timeoutMs": 300, "failures": 1 }
        } }),
    );
    let proxy = serve_http_without_catalog(&path).await;
    let ready = status_until(&proxy, LIMIT, |s| state_is(s, "py", "ready")).await;
    let first = pid_of(&ready, "py").expect("a pid");
    let generation = server(&ready, "py")["generation"].clone();
    let _frozen = Frozen::new(first);
    let again = status_until(&proxy, LIMIT, |s| {
        state_is(s, "py", "ready") && pid_of(s, "py").is_some_and(|p| p != first)
    })
    .await;
    let second = pid_of(&again, "py").expect("a new pid");

    let body = history(&proxy).await;
    let events = body["servers"][0]["events"].as_array().expect("events");
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["kind"].as_str()).collect();
    let hung = events
        .iter()
        .position(|e| e["kind"] == "hung" && e["generation"] == generation)
        .unwrap_or_else(|| panic!("no hung event for generation {generation}: {kinds:?}"));
    assert!(
        events[hung]["detail"]
            .as_str()
            .is_some_and(|d| !d.is_empty()),
        "the hung event says what timed out: {}",
        events[hung]
    );
    let back = events
        .iter()
        .position(|e| e["kind"] == "ready" && e["pid"] == json!(second))
        .unwrap_or_else(|| panic!("no ready event with pid {second}: {kinds:?}"));
    assert!(hung < back, "{kinds:?}");
    assert!(
        !kinds.contains(&"lost"),
        "a hang is hung, not lost: {kinds:?}"
    );
}
