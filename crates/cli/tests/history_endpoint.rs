//! End to end: `GET /history` on the admin endpoints (SPEC §15), the data a dashboard plots,
//! from the real binary over a real fault server: after a `kill -9` it shows the server ready
//! with its first pid, lost with why, and ready again with the new pid, and it counts the tool
//! calls made through `/mcp`. Every wait is bounded.

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
