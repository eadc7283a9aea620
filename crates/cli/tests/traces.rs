//! Traces end to end: `mcp-supervisor serve --otlp URL` in front of the fault server, a local OTLP
//! receiver run by the test, and one call that crashes the server and is replayed on the next
//! generation. What arrives is decoded (OTLP/HTTP JSON) and its spans asserted: the call's (with
//! its attempts, the replay, the outcome, and the client's trace as its parent), the recovery's
//! (generation, cause, backoff, time to ready); and the server saw the call's `traceparent` in
//! its `_meta`. Also: with an unreachable endpoint calls still succeed, and the lost spans are
//! counted in `/metrics`.

mod interop_support;
mod support;

use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::post;
use interop_support::Proc;
use mcp_supervisor_testkit::rawhttp::RawHttp;
use serde_json::{Value, json};
use support::{fault_bin, free_port, temp_dir, write_config};

const LIMIT: Duration = Duration::from_secs(30);
/// The client's own trace: the call's span must be its child.
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_SPAN: &str = "00f067aa0ba902b7";

/// Everything the receiver got, one JSON body per export.
type Received = Arc<Mutex<Vec<Value>>>;

/// An OTLP/HTTP receiver on a free loopback port.
async fn receiver() -> (u16, Received) {
    let received: Received = Arc::default();
    let app = Router::new().route(
        "/v1/traces",
        post({
            let received = received.clone();
            move |body: String| {
                let received = received.clone();
                async move {
                    if let Ok(value) = serde_json::from_str::<Value>(&body)
                        && let Ok(mut all) = received.lock()
                    {
                        all.push(value);
                    }
                    "{}"
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the OTLP receiver");
    let port = listener.local_addr().expect("address").port();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (port, received)
}

/// Every span received so far, flattened out of resourceSpans/scopeSpans.
fn spans(received: &Received) -> Vec<Value> {
    let all = received.lock().map(|a| a.clone()).unwrap_or_default();
    all.iter()
        .flat_map(|body| {
            body["resourceSpans"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .flat_map(|rs| rs["scopeSpans"].as_array().cloned().unwrap_or_default())
        .flat_map(|ss| ss["spans"].as_array().cloned().unwrap_or_default())
        .collect()
}

/// An attribute's value as JSON (`stringValue`, `intValue` (a string in OTLP JSON), `boolValue`).
fn attribute(span: &Value, key: &str) -> Value {
    let Some(found) = span["attributes"]
        .as_array()
        .and_then(|a| a.iter().find(|kv| kv["key"] == key))
    else {
        return Value::Null;
    };
    let value = &found["value"];
    for kind in ["stringValue", "boolValue", "doubleValue"] {
        if let Some(v) = value.get(kind) {
            return v.clone();
        }
    }
    match value.get("intValue") {
        Some(Value::String(s)) => s.parse::<i64>().map(Value::from).unwrap_or(Value::Null),
        Some(v) => v.clone(),
        None => Value::Null,
    }
}

fn start_serve(dir: &Path, config: &Path, otlp: &str) -> (Proc, u16) {
    let port = free_port();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mcp-supervisor"));
    cmd.args(["serve", "--config"])
        .arg(config)
        .args(["--http", &format!("127.0.0.1:{port}"), "--otlp", otlp])
        // Stopped by SIGTERM: no drain window to wait for.
        .args(["--drain-ms", "0"])
        // Export batches quickly, so the test does not wait the default 5 s.
        .env("OTEL_BSP_SCHEDULE_DELAY", "100");
    let mut proc = Proc::spawn("serve --otlp", cmd, dir);
    proc.wait_listening(port, LIMIT);
    (proc, port)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_and_replay_shows_as_a_call_span_and_a_recovery_span_under_the_clients_trace() {
    let dir = temp_dir("traces");
    let (otlp_port, received) = receiver().await;
    let config = dir.join("servers.json");
    write_config(
        &config,
        json!({ "fault": {
            "command": fault_bin(),
            "args": ["--ledger", dir.join("ledger.txt")],
            "reconnect": { "initialDelayMs": 50 }
        }}),
    );
    let (mut proxy, port) = start_serve(&dir, &config, &format!("http://127.0.0.1:{otlp_port}"));
    let url = format!("http://127.0.0.1:{port}/mcp");
    let client = RawHttp::connect(&url, LIMIT).await.expect("connect");

    // The server records the context it was given.
    let traceparent = format!("00-{TRACE_ID}-{PARENT_SPAN}-01");
    let (meta, _) = client
        .request(
            "tools/call",
            json!({ "name": "fault__meta", "arguments": {}, "_meta": { "traceparent": traceparent } }),
        )
        .await
        .expect("meta");
    let seen: Value = serde_json::from_str(meta["content"][0]["text"].as_str().unwrap_or("{}"))
        .expect("the server's _meta as JSON");
    let upstream = seen["traceparent"].as_str().unwrap_or_default().to_string();
    assert!(
        upstream.starts_with(&format!("00-{TRACE_ID}-")) && !upstream.contains(PARENT_SPAN),
        "the server must get the call's own span in the client's trace, got {seen}"
    );

    // A call whose first attempt crashes the server; replayed (idempotent) on the next one.
    let (result, _) = client
        .request(
            "tools/call",
            json!({
                "name": "fault__count_idempotent",
                "arguments": { "id": "traced", "crash_before_reply": true },
                "_meta": { "traceparent": traceparent }
            }),
        )
        .await
        .expect("the replayed call");
    assert_eq!(result["content"][0]["text"], "traced", "{result}");

    // Wait (bounded) for both spans to arrive.
    let started = Instant::now();
    let (call, recovery) = loop {
        let all = spans(&received);
        let call = all
            .iter()
            .find(|s| s["name"] == "mcp.call" && attribute(s, "tool") == "count_idempotent");
        let recovery = all.iter().find(|s| s["name"] == "mcp.recovery");
        if let (Some(call), Some(recovery)) = (call, recovery) {
            break (call.clone(), recovery.clone());
        }
        assert!(
            started.elapsed() < LIMIT,
            "spans did not arrive within {LIMIT:?}: {all:?}\n{}",
            proxy.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };

    assert_eq!(attribute(&call, "server"), "fault", "{call}");
    assert_eq!(attribute(&call, "method"), "tools/call", "{call}");
    assert_eq!(attribute(&call, "outcome"), "ok", "{call}");
    assert_eq!(attribute(&call, "attempts"), 2, "{call}");
    assert_eq!(attribute(&call, "replayed"), true, "{call}");
    assert_eq!(
        call["traceId"].as_str().map(str::to_lowercase).as_deref(),
        Some(TRACE_ID)
    );
    assert_eq!(
        call["parentSpanId"]
            .as_str()
            .map(str::to_lowercase)
            .as_deref(),
        Some(PARENT_SPAN)
    );

    assert_eq!(attribute(&recovery, "server"), "fault", "{recovery}");
    assert_eq!(attribute(&recovery, "lost_generation"), 1, "{recovery}");
    assert_eq!(attribute(&recovery, "generation"), 2, "{recovery}");
    assert_eq!(attribute(&recovery, "outcome"), "ready", "{recovery}");
    assert!(
        attribute(&recovery, "cause")
            .as_str()
            .is_some_and(|c| !c.is_empty()),
        "{recovery}"
    );
    assert!(
        attribute(&recovery, "backoff_ms").as_i64().is_some(),
        "{recovery}"
    );
    assert!(
        attribute(&recovery, "ready_ms")
            .as_i64()
            .is_some_and(|ms| ms >= 0),
        "{recovery}"
    );

    let _ = client.close().await;
    proxy.stop();
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_collector_never_fails_a_call_and_its_spans_are_counted_as_dropped() {
    let dir = temp_dir("traces-dropped");
    let config = dir.join("servers.json");
    write_config(&config, json!({ "fault": { "command": fault_bin() } }));
    // A port nobody listens on: every export is refused.
    let dead = format!("http://127.0.0.1:{}", free_port());
    let (mut proxy, port) = start_serve(&dir, &config, &dead);
    let url = format!("http://127.0.0.1:{port}/mcp");
    let client = RawHttp::connect(&url, LIMIT).await.expect("connect");
    for i in 0..5 {
        let (result, _) = client
            .request(
                "tools/call",
                json!({ "name": "fault__echo", "arguments": { "message": format!("m{i}") } }),
            )
            .await
            .expect("a call with the collector down");
        assert_eq!(result["content"][0]["text"], format!("m{i}"));
    }
    // The exports fail in the background; the count shows on /metrics (bounded wait).
    let metrics_url = format!("http://127.0.0.1:{port}/metrics");
    let http = reqwest::Client::new();
    let started = Instant::now();
    loop {
        let text = http
            .get(&metrics_url)
            .send()
            .await
            .expect("GET /metrics")
            .text()
            .await
            .unwrap_or_default();
        let dropped = text
            .lines()
            .find_map(|l| l.strip_prefix("mcp_supervisor_trace_spans_dropped_total "))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0);
        if dropped >= 5 {
            break;
        }
        assert!(
            started.elapsed() < LIMIT,
            "dropped spans not counted within {LIMIT:?}:\n{text}\n{}",
            proxy.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = client.close().await;
    proxy.stop();
    let _ = std::fs::remove_dir_all(dir);
}
