//! End to end through the real binary: the HTTP face's fast path for `tools/call` (a JSON
//! answer on a live legacy session; with a progress token, JSON until progress comes and then an
//! event stream), what it leaves to rmcp (unknown names, unknown sessions, per-request protocol
//! metadata), cancellation by notification and by a client that goes away, recovery across a
//! crash, and the call metrics.

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use support::*;
use tokio::time::Instant;

const VERSION: &str = "2025-06-18";
const ACCEPT: &str = "application/json, text/event-stream";

/// The `data:` payloads of an SSE body, one per event (multi-line data joined by `\n`), without
/// the empty ones (priming events).
fn sse_data(body: &str) -> Vec<String> {
    let mut events = Vec::new();
    let mut current: Option<String> = None;
    for line in body.lines() {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.is_empty() {
            events.extend(current.take());
            continue;
        }
        if let Some(rest) = line.strip_prefix("data:") {
            let rest = rest.strip_prefix(' ').unwrap_or(rest);
            match &mut current {
                Some(data) => {
                    data.push('\n');
                    data.push_str(rest);
                }
                None => current = Some(rest.to_string()),
            }
        }
    }
    events.extend(current);
    events.retain(|d| !d.trim().is_empty());
    events
}

/// The JSON-RPC messages of an SSE body.
fn sse_messages(body: &str) -> Vec<Value> {
    sse_data(body)
        .iter()
        .map(|d| {
            serde_json::from_str(d).unwrap_or_else(|e| panic!("SSE data is not JSON ({e}): {d}"))
        })
        .collect()
}

/// One HTTP answer to a POST on `/mcp`.
#[derive(Debug)]
struct Answer {
    status: u16,
    content_type: String,
    body: String,
}

impl Answer {
    fn is_json(&self) -> bool {
        self.content_type.starts_with("application/json")
    }

    fn is_sse(&self) -> bool {
        self.content_type.starts_with("text/event-stream")
    }

    /// The JSON-RPC response carrying `id`, whether the body is JSON or SSE.
    fn response(&self, id: &Value) -> Value {
        let messages = if self.is_json() {
            vec![
                serde_json::from_str::<Value>(&self.body).unwrap_or_else(|e| {
                    panic!("the JSON answer does not parse ({e}): {}", self.body)
                }),
            ]
        } else if self.is_sse() {
            sse_messages(&self.body)
        } else {
            panic!("unexpected answer: {self:?}");
        };
        messages
            .into_iter()
            .find(|m| {
                m.get("id") == Some(id) && (m.get("result").is_some() || m.get("error").is_some())
            })
            .unwrap_or_else(|| panic!("no response with id {id} in: {self:?}"))
    }
}

/// A legacy (2025-06-18) session on the proxy's `/mcp`.
#[derive(Clone)]
struct Session {
    client: reqwest::Client,
    url: String,
    id: String,
}

impl Session {
    async fn open(proxy: &Running) -> Self {
        let client = reqwest::Client::new();
        let url = proxy.url("/mcp");
        let response = client
            .post(&url)
            .header("content-type", "application/json")
            .header("accept", ACCEPT)
            .json(&json!({
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {
                    "protocolVersion": VERSION,
                    "capabilities": {},
                    "clientInfo": { "name": "fastpath-test", "version": "0" }
                }
            }))
            .timeout(Duration::from_secs(20))
            .send()
            .await
            .expect("POST initialize");
        assert_eq!(response.status().as_u16(), 200, "initialize is accepted");
        let id = response
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .expect("initialize answers with an Mcp-Session-Id")
            .to_string();
        let body = response.text().await.expect("initialize body");
        let messages = sse_messages(&body);
        assert!(
            messages
                .iter()
                .any(|m| m["id"] == 0 && m["result"]["protocolVersion"] == VERSION),
            "initialize result: {body}"
        );
        let session = Self { client, url, id };
        let initialized = session
            .post(&json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }))
            .await;
        assert_eq!(initialized.status, 202, "initialized: {initialized:?}");
        session
    }

    fn request(&self, body: &Value) -> reqwest::RequestBuilder {
        self.client
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", ACCEPT)
            .header("mcp-protocol-version", VERSION)
            .header("mcp-session-id", &self.id)
            .body(body.to_string())
    }

    /// POST `body` and read the whole answer (bounded by 20 s).
    async fn post(&self, body: &Value) -> Answer {
        let response = self
            .request(body)
            .timeout(Duration::from_secs(20))
            .send()
            .await
            .unwrap_or_else(|e| panic!("POST {body}: {e}"));
        read(response).await
    }

    async fn call(&self, id: Value, name: &str, arguments: Value) -> Answer {
        self.post(&call_body(id, name, arguments)).await
    }

    /// A `fault__hang` call with `id`, under way in its own task.
    fn spawn_hang(&self, id: Value) -> tokio::task::JoinHandle<Answer> {
        let caller = self.clone();
        tokio::spawn(async move { caller.call(id, "fault__hang", json!({})).await })
    }

    /// `fault__echo` of `message` takes the fast path and answers it.
    async fn echoes(&self, id: Value, message: &str) {
        let text = self
            .fast_text(id, "fault__echo", json!({ "message": message }))
            .await;
        assert_eq!(text, message);
    }

    /// A call that must take the fast path and succeed: its text.
    async fn fast_text(&self, id: Value, name: &str, arguments: Value) -> String {
        let answer = self.call(id.clone(), name, arguments).await;
        assert_eq!(answer.status, 200, "{name}: {answer:?}");
        assert!(answer.is_json(), "{name} is answered as JSON: {answer:?}");
        let response = answer.response(&id);
        assert_eq!(response["jsonrpc"], "2.0", "{response}");
        assert!(
            response["result"].get("resultType").is_none(),
            "a session's protocol version has no resultType, as on rmcp's path: {response}"
        );
        assert_ne!(response["result"]["isError"], true, "{name}: {response}");
        response["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("{name}: no text content in {response}"))
            .to_string()
    }
}

async fn read(response: reqwest::Response) -> Answer {
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let body = response.text().await.expect("read the answer's body");
    Answer {
        status,
        content_type,
        body,
    }
}

fn cancel_body(request: Value) -> Value {
    json!({
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": { "requestId": request, "reason": "test" }
    })
}

fn call_body(id: Value, name: &str, arguments: Value) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": id,
        "method": "tools/call",
        "params": { "name": name, "arguments": arguments }
    })
}

/// `mcp-supervisor serve --http` over `servers`, once every one of them is ready.
async fn serve(dir: &Path, servers: Value) -> Running {
    let names: Vec<String> = servers
        .as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default();
    let path = dir.join("servers.json");
    write_config(&path, servers);
    let proxy = serve_config(&path, "--http").await;
    status_until(&proxy, Duration::from_secs(20), |s| {
        names.iter().all(|n| state_is(s, n, "ready"))
    })
    .await;
    proxy
}

/// `mcp-supervisor wrap --http` in front of the fault server, once it is ready.
async fn wrap_fault() -> Running {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let fault = fault_bin();
    let proxy = Running::start(
        &[
            "wrap",
            "--http",
            &addr,
            "--",
            fault.to_str().unwrap_or_default(),
        ],
        port,
        &[],
    )
    .await;
    status_until(&proxy, Duration::from_secs(20), |s| {
        s["servers"]
            .as_array()
            .is_some_and(|a| a.len() == 1 && a[0]["state"] == "ready")
    })
    .await;
    proxy
}

/// One stdio fault server named `fault`, with a ledger and a long call deadline.
fn one_fault(ledger: &Path) -> Value {
    json!({ "fault": {
        "command": fault_bin(),
        "args": ["--ledger", ledger],
        "toolCallTimeoutMs": 60000,
        "reconnect": { "initialDelayMs": 50, "maxDelayMs": 400, "maxAttempts": 5 }
    } })
}

/// A proxy in front of [`one_fault`] and a session on it: (dir, ledger, proxy, session).
async fn one_fault_session(tag: &str) -> (PathBuf, PathBuf, Running, Session) {
    let dir = temp_dir(tag);
    let ledger = dir.join("ledger");
    let proxy = serve(&dir, one_fault(&ledger)).await;
    let session = Session::open(&proxy).await;
    (dir, ledger, proxy, session)
}

/// Wait (bounded) until the ledger holds a `hang cancelled` line.
async fn ledger_shows_cancel(ledger: &Path, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        let text = std::fs::read_to_string(ledger).unwrap_or_default();
        if text.lines().any(|l| l.trim() == "hang cancelled") {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// The proxy's `/metrics` text.
async fn metrics_text(proxy: &Running) -> String {
    reqwest::get(proxy.url("/metrics"))
        .await
        .expect("GET /metrics")
        .text()
        .await
        .expect("read /metrics")
}

/// The value of `mcp_supervisor_calls_total{outcome}` in a scrape.
fn calls_total_in(text: &str, outcome: &str) -> f64 {
    let lines = text.lines().map(|l| Ok(l.to_string()));
    let scrape = prometheus_parse::Scrape::parse(lines).expect("valid Prometheus text");
    let sample = scrape
        .samples
        .iter()
        .find(|s| {
            s.metric == "mcp_supervisor_calls_total" && s.labels.get("outcome") == Some(outcome)
        })
        .unwrap_or_else(|| panic!("no calls_total for outcome {outcome} in:\n{text}"));
    match sample.value {
        prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Untyped(v) => v,
        ref other => panic!("calls_total is not a counter: {other:?}"),
    }
}

/// The value of `mcp_supervisor_calls_total{outcome}`.
async fn calls_total(proxy: &Running, outcome: &str) -> f64 {
    calls_total_in(&metrics_text(proxy).await, outcome)
}

/// Wait (bounded by `limit`) until `read` finds at least `n` in the proxy's metrics.
async fn metric_reaches(
    proxy: &Running,
    what: &str,
    n: f64,
    limit: Duration,
    read: impl Fn(&str) -> f64,
) {
    let deadline = Instant::now() + limit;
    loop {
        let now = read(&metrics_text(proxy).await);
        if now >= n {
            return;
        }
        assert!(Instant::now() < deadline, "{what} stayed at {now}, not {n}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Wait (bounded) until the proxy has counted `n` calls as cancelled.
async fn cancelled_reaches(proxy: &Running, n: f64) {
    let what = "cancelled calls (an abandoned call was not counted)";
    metric_reaches(proxy, what, n, Duration::from_secs(5), |text| {
        calls_total_in(text, "cancelled")
    })
    .await;
}

/// Wait (bounded) until `mcp_supervisor_calls_in_flight` reaches `n`.
async fn in_flight_reaches(proxy: &Running, n: f64) {
    metric_reaches(
        proxy,
        "calls in flight",
        n,
        Duration::from_secs(10),
        |text| {
            text.lines()
                .find_map(|l| l.strip_prefix("mcp_supervisor_calls_in_flight "))
                .and_then(|v| v.trim().parse::<f64>().ok())
                .unwrap_or_else(|| panic!("no calls_in_flight gauge in:\n{text}"))
        },
    )
    .await;
}

fn cleanup(dir: PathBuf) {
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_call_on_a_live_session_is_answered_as_json_and_the_rest_goes_to_rmcp() {
    let dir = temp_dir("fast-basic");
    let proxy = serve(&dir, one_fault(&dir.join("ledger"))).await;
    let session = Session::open(&proxy).await;

    let message = "say \"hi\" \\ back: héllo, 世界 ✓";
    for id in [json!(7), json!("req-7"), json!("7")] {
        let answer = session
            .call(id.clone(), "fault__echo", json!({ "message": message }))
            .await;
        assert_eq!(answer.status, 200, "{answer:?}");
        assert!(
            answer.is_json(),
            "the fast path answers application/json: {answer:?}"
        );
        let response: Value = serde_json::from_str(&answer.body).expect("one JSON-RPC response");
        assert_eq!(response["jsonrpc"], "2.0");
        assert_eq!(response["id"], id, "the same id, of the same type");
        assert_eq!(response["result"]["content"][0]["text"], message);
        assert!(response["result"].get("resultType").is_none(), "{response}");
        assert_ne!(response["result"]["isError"], true);
        assert!(response.get("error").is_none(), "{response}");
    }

    // A server's JSON-RPC error comes back as the same error rmcp's path gives (a request
    // with per-request protocol metadata goes to rmcp).
    let fast = session
        .call(json!(12), "fault__echo", json!({ "wrong": 1 }))
        .await;
    assert!(fast.is_json(), "{fast:?}");
    let fast = fast.response(&json!(12));
    let slow = session
        .post(&json!({
            "jsonrpc": "2.0",
            "id": 13,
            "method": "tools/call",
            "params": {
                "name": "fault__echo",
                "arguments": { "wrong": 1 },
                "_meta": { "io.modelcontextprotocol/protocolVersion": VERSION }
            }
        }))
        .await;
    assert!(slow.is_sse(), "{slow:?}");
    let slow = slow.response(&json!(13));
    assert!(fast["error"]["code"].is_i64(), "an error: {fast}");
    assert_eq!(fast["error"], slow["error"], "the same error on both paths");

    // An unknown name is rmcp's to answer, and it is not a success.
    let answer = session
        .call(json!(9), "fault__nope", json!({ "message": "x" }))
        .await;
    assert_eq!(answer.status, 200, "{answer:?}");
    assert!(
        !answer.is_json(),
        "an unknown name is left to rmcp: {answer:?}"
    );
    let response = answer.response(&json!(9));
    assert!(
        response.get("error").is_some() || response["result"]["isError"] == true,
        "an unknown tool does not succeed: {response}"
    );

    // An unknown session is rmcp's 404.
    let bogus = Session {
        id: "no-such-session".to_string(),
        ..session.clone()
    };
    let answer = bogus
        .call(json!(10), "fault__echo", json!({ "message": "x" }))
        .await;
    assert_eq!(answer.status, 404, "{answer:?}");

    // The session still works after all that.
    session.echoes(json!(11), "again").await;
    drop(proxy);
    cleanup(dir);
}

#[tokio::test]
async fn a_public_name_is_routed_to_its_server_under_its_upstream_name() {
    let dir = temp_dir("fast-two");
    let proxy = serve(
        &dir,
        json!({
            "a": { "command": fault_bin() },
            "b": { "command": fault_bin() }
        }),
    )
    .await;
    let status = status_until(&proxy, Duration::from_secs(5), |s| {
        pid_of(s, "a").is_some() && pid_of(s, "b").is_some()
    })
    .await;
    let session = Session::open(&proxy).await;

    assert_eq!(
        session
            .fast_text(json!(1), "b__add", json!({ "a": 2, "b": 3 }))
            .await,
        "5"
    );
    assert_eq!(
        session
            .fast_text(json!(2), "a__echo", json!({ "message": "from a" }))
            .await,
        "from a"
    );
    // Each name reaches its own server's process.
    for name in ["a", "b"] {
        let pid = session
            .fast_text(
                json!(format!("pid-{name}")),
                &format!("{name}__pid"),
                json!({}),
            )
            .await;
        assert_eq!(
            pid.parse::<u32>().ok(),
            pid_of(&status, name),
            "{name}__pid is answered by server {name}"
        );
    }
    drop(proxy);
    cleanup(dir);
}

#[tokio::test]
async fn notifications_cancelled_ends_a_fast_path_call_and_reaches_the_server() {
    let (dir, ledger, proxy, session) = one_fault_session("fast-cancel").await;

    let call = session.spawn_hang(json!(41));
    let cancel = cancel_body(json!(41));
    in_flight_reaches(&proxy, 1.0).await;
    let answer = session.post(&cancel).await;
    assert_eq!(
        answer.status, 202,
        "the notification is accepted: {answer:?}"
    );
    let ended = tokio::time::timeout(Duration::from_secs(5), call).await;
    assert!(
        ended.is_ok(),
        "the hang call ended within 5 s of its cancellation"
    );
    let answer = ended.expect("ended");
    let answer = answer.expect("the call task");
    assert_eq!(answer.status, 200, "{answer:?}");
    assert!(
        answer.is_json(),
        "the call was on the fast path: {answer:?}"
    );
    let response = answer.response(&json!(41));
    let text = if response["result"]["isError"] == true {
        response["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    } else {
        response["error"]["message"]
            .as_str()
            .unwrap_or_else(|| panic!("neither isError nor an error: {response}"))
            .to_string()
    };
    assert!(text.contains("cancel"), "the answer says why: {response}");
    assert!(
        ledger_shows_cancel(&ledger, Duration::from_secs(5)).await,
        "the server saw the cancellation"
    );
    assert!(
        calls_total(&proxy, "cancelled").await >= 1.0,
        "counted as cancelled"
    );
    // The session goes on.
    session.echoes(json!(42), "after").await;
    drop(proxy);
    cleanup(dir);
}

#[tokio::test]
async fn a_client_that_goes_away_cancels_its_fast_path_call_upstream() {
    let (dir, ledger, proxy, session) = one_fault_session("fast-gone").await;

    // Its own client, so that the abandoned connection is the hang call's alone.
    let leaving = Session {
        client: reqwest::Client::new(),
        ..session.clone()
    };
    let request = leaving
        .request(&call_body(json!(51), "fault__hang", json!({})))
        .send();
    let outcome = tokio::time::timeout(Duration::from_millis(500), request).await;
    assert!(outcome.is_err(), "hang does not answer: {outcome:?}");
    drop(leaving);

    assert!(
        ledger_shows_cancel(&ledger, Duration::from_secs(5)).await,
        "the server was told the call is cancelled"
    );
    // The abandoned call is counted, as cancelled.
    cancelled_reaches(&proxy, 1.0).await;
    session.echoes(json!(52), "still here").await;
    drop(proxy);
    cleanup(dir);
}

#[tokio::test]
async fn a_fast_path_call_waits_for_the_reconnect_after_a_crash() {
    let dir = temp_dir("fast-crash");
    let proxy = serve(&dir, one_fault(&dir.join("ledger"))).await;
    let before = status_until(&proxy, Duration::from_secs(5), |s| {
        pid_of(s, "fault").is_some()
    })
    .await;
    let first_pid = pid_of(&before, "fault");
    assert_eq!(server(&before, "fault")["generation"], 1, "{before}");
    let session = Session::open(&proxy).await;

    assert_eq!(
        session.fast_text(json!(1), "fault__crash", json!({})).await,
        "crashing"
    );
    // Calls right after the crash, and on through the outage, all succeed.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut id = 2;
    loop {
        let message = format!("call {id}");
        assert_eq!(
            session
                .fast_text(json!(id), "fault__echo", json!({ "message": message }))
                .await,
            message
        );
        id += 1;
        let (_, status) = get_json(&proxy.url("/status")).await;
        let server = server(&status, "fault");
        if server["generation"].as_u64() >= Some(2) && server["state"] == "ready" {
            assert_ne!(pid_of(&status, "fault"), first_pid, "a new process");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no reconnect within 10 s: {status}"
        );
    }
    assert_eq!(
        session
            .fast_text(json!("last"), "fault__add", json!({ "a": 1, "b": 1 }))
            .await,
        "2"
    );
    drop(proxy);
    cleanup(dir);
}

#[tokio::test]
async fn fast_path_calls_are_counted_in_the_metrics() {
    let dir = temp_dir("fast-metrics");
    // No ledger: `count` answers with an isError result.
    let proxy = serve(&dir, json!({ "fault": { "command": fault_bin() } })).await;
    let session = Session::open(&proxy).await;
    let ok_before = calls_total(&proxy, "ok").await;
    let tool_error_before = calls_total(&proxy, "tool_error").await;

    let n = 6;
    for i in 0..n {
        let message = format!("m{i}");
        assert_eq!(
            session
                .fast_text(json!(i), "fault__echo", json!({ "message": message }))
                .await,
            message
        );
    }
    let answer = session
        .call(json!("count"), "fault__count", json!({ "id": "x" }))
        .await;
    assert!(answer.is_json(), "{answer:?}");
    let response = answer.response(&json!("count"));
    assert_eq!(response["result"]["isError"], true, "{response}");

    let ok_after = calls_total(&proxy, "ok").await;
    assert!(
        ok_after >= ok_before + f64::from(n),
        "ok went from {ok_before} to {ok_after} after {n} calls"
    );
    let tool_error_after = calls_total(&proxy, "tool_error").await;
    assert!(
        tool_error_after > tool_error_before,
        "an isError result counts as tool_error ({tool_error_before} -> {tool_error_after})"
    );
    drop(proxy);
    cleanup(dir);
}

#[tokio::test]
async fn under_wrap_the_fast_path_uses_the_names_unchanged() {
    let dir = temp_dir("fast-wrap");
    let proxy = wrap_fault().await;
    let session = Session::open(&proxy).await;
    assert_eq!(
        session
            .fast_text(json!(1), "echo", json!({ "message": "wrapped" }))
            .await,
        "wrapped"
    );
    assert_eq!(
        session
            .fast_text(json!(2), "add", json!({ "a": 40, "b": 2 }))
            .await,
        "42"
    );
    drop(proxy);
    cleanup(dir);
}

#[tokio::test]
async fn closing_a_session_cancels_its_fast_path_calls() {
    let (dir, ledger, proxy, session) = one_fault_session("fast-delete").await;
    let call = session.spawn_hang(json!(61));
    in_flight_reaches(&proxy, 1.0).await;
    let deleted = session
        .client
        .delete(&session.url)
        .header("mcp-session-id", &session.id)
        .header("mcp-protocol-version", VERSION)
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .expect("DELETE /mcp");
    assert!(
        deleted.status().is_success(),
        "DELETE: {}",
        deleted.status()
    );
    let answer = tokio::time::timeout(Duration::from_secs(5), call)
        .await
        .expect("the call ended with its session")
        .expect("the call task");
    assert!(answer.is_json(), "it was a fast-path call: {answer:?}");
    assert!(
        ledger_shows_cancel(&ledger, Duration::from_secs(5)).await,
        "the server was told the call is cancelled"
    );
    let after = session
        .call(json!(62), "fault__echo", json!({ "message": "x" }))
        .await;
    assert_eq!(after.status, 404, "the session is gone: {after:?}");
    drop(proxy);
    cleanup(dir);
}

#[tokio::test]
async fn a_second_call_with_an_id_already_in_flight_goes_to_rmcp_and_stays_cancellable() {
    let (dir, ledger, proxy, session) = one_fault_session("fast-dup").await;
    let first = session.clone();
    let first = tokio::spawn(async move {
        first
            .call(json!(40), "fault__sleep", json!({ "ms": 600 }))
            .await
    });
    in_flight_reaches(&proxy, 1.0).await;
    // The same id while the first is under way: a client's mistake, left to rmcp's path.
    let second = session
        .request(&call_body(json!(40), "fault__hang", json!({})))
        .timeout(Duration::from_secs(20))
        .send()
        .await
        .expect("the second call's headers");
    let content_type = second
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    assert!(
        content_type.starts_with("text/event-stream"),
        "the duplicate went to rmcp's path: {content_type}"
    );
    let first = first.await.expect("the first call task");
    assert!(first.is_json(), "the first was a fast-path call: {first:?}");
    assert_ne!(
        first.response(&json!(40))["result"]["isError"],
        true,
        "{first:?}"
    );
    // Now the id names the second call only; cancelling it reaches the server.
    let cancel = cancel_body(json!(40));
    assert_eq!(session.post(&cancel).await.status, 202);
    assert!(
        ledger_shows_cancel(&ledger, Duration::from_secs(5)).await,
        "the second call was cancelled upstream"
    );
    drop(second);
    drop(proxy);
    cleanup(dir);
}

/// A `fault__sleep` call with a progress token.
fn sleep_with_progress(id: Value, ms: u64, token: Value) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": id,
        "method": "tools/call",
        "params": {
            "name": "fault__sleep",
            "arguments": { "ms": ms },
            "_meta": { "progressToken": token }
        }
    })
}

#[tokio::test]
async fn a_call_with_a_progress_token_is_json_until_progress_comes_then_an_event_stream() {
    let (dir, _ledger, proxy, session) = one_fault_session("fast-progress").await;

    // No progress comes: one JSON body, as without a token.
    let answer = session
        .post(&json!({
            "jsonrpc": "2.0",
            "id": 20,
            "method": "tools/call",
            "params": {
                "name": "fault__echo",
                "arguments": { "message": "no progress" },
                "_meta": { "progressToken": "t-20" }
            }
        }))
        .await;
    assert_eq!(answer.status, 200, "{answer:?}");
    assert!(answer.is_json(), "no progress, so JSON: {answer:?}");
    assert_eq!(
        answer.response(&json!(20))["result"]["content"][0]["text"],
        "no progress"
    );

    // Progress comes: an event stream of the progress, with the client's own token (a string
    // or an integer, as sent), then the result as the last event.
    for (id, token) in [(json!(21), json!(4242)), (json!("r-22"), json!("t-22"))] {
        let answer = session
            .post(&sleep_with_progress(id.clone(), 350, token.clone()))
            .await;
        assert_eq!(answer.status, 200, "{answer:?}");
        assert!(answer.is_sse(), "progress came, so SSE: {answer:?}");
        // Ours, not rmcp's: no event ids and no priming event (rmcp's stream has both).
        assert!(
            !answer.body.lines().any(|l| l.starts_with("id:")),
            "{answer:?}"
        );
        let messages = sse_messages(&answer.body);
        let (last, progress) = messages.split_last().expect("events");
        assert_eq!(last["id"], id, "the result is the last event: {messages:?}");
        assert_eq!(last["result"]["content"][0]["text"], "slept 350 ms");
        assert!(progress.len() >= 2, "progress events: {messages:?}");
        let mut before = f64::MIN;
        for event in progress {
            assert_eq!(event["method"], "notifications/progress", "{event}");
            assert_eq!(
                event["params"]["progressToken"], token,
                "the client's token"
            );
            let value = event["params"]["progress"]
                .as_f64()
                .expect("a progress value");
            assert!(value > before, "progress rises: {messages:?}");
            before = value;
        }
    }

    // A client that goes away mid-stream cancels the call.
    let cancelled_before = calls_total(&proxy, "cancelled").await;
    let leaving = Session {
        client: reqwest::Client::new(),
        ..session.clone()
    };
    let response = leaving
        .request(&sleep_with_progress(json!(23), 5_000, json!("t-23")))
        .timeout(Duration::from_secs(20))
        .send()
        .await
        .expect("the stream starts");
    assert!(
        response
            .headers()
            .get("content-type")
            .is_some_and(|t| t.as_bytes().starts_with(b"text/event-stream")),
        "{response:?}"
    );
    drop(response);
    drop(leaving);
    cancelled_reaches(&proxy, cancelled_before + 1.0).await;
    session.echoes(json!(24), "still here").await;
    drop(proxy);
    cleanup(dir);
}

/// An rmcp client handler that keeps the progress values it is sent.
#[derive(Clone, Default)]
struct ProgressSeen(std::sync::Arc<std::sync::Mutex<Vec<f64>>>);

impl rmcp::ClientHandler for ProgressSeen {
    async fn on_progress(
        &self,
        params: rmcp::model::ProgressNotificationParam,
        _context: rmcp::service::NotificationContext<rmcp::RoleClient>,
    ) {
        if let Ok(mut seen) = self.0.lock() {
            seen.push(params.progress);
        }
    }
}

#[tokio::test]
async fn rmcp_s_client_reads_the_pass_through_s_json_answers_and_event_streams() {
    use rmcp::ServiceExt;
    use rmcp::model::CallToolRequestParams;

    // rmcp's client puts a progress token on every call, and calls `wrap` on a session.
    let proxy = wrap_fault().await;
    let seen = ProgressSeen::default();
    let transport = rmcp::transport::StreamableHttpClientTransport::from_uri(proxy.url("/mcp"));
    let client = tokio::time::timeout(Duration::from_secs(20), seen.clone().serve(transport))
        .await
        .expect("initialize in time")
        .expect("initialize");
    // A session protocol version, so that its calls are the pass-through's to answer.
    let version = client
        .peer_info()
        .map(|info| info.protocol_version.to_string())
        .unwrap_or_default();
    assert!(
        !version.is_empty() && version.as_str() < "2026-07-28",
        "wrap answered with its server's session version: {version:?}"
    );
    let call = |name: &str, arguments: Value| {
        let params = CallToolRequestParams::new(name.to_string())
            .with_arguments(arguments.as_object().cloned().unwrap_or_default());
        let peer = client.peer().clone();
        async move {
            tokio::time::timeout(Duration::from_secs(20), peer.call_tool(params))
                .await
                .expect("answered in time")
                .expect("a result")
        }
    };
    let text = |result: &rmcp::model::CallToolResult| {
        result.content[0]
            .as_text()
            .map(|t| t.text.clone())
            .unwrap_or_default()
    };

    // No progress: a JSON answer.
    let echo = call("echo", json!({ "message": "from rmcp" })).await;
    assert_eq!(text(&echo), "from rmcp");
    // Progress: the event stream, progress first, then the result.
    let slept = call("sleep", json!({ "ms": 350 })).await;
    assert_eq!(text(&slept), "slept 350 ms");
    let progress = seen.0.lock().map(|p| p.clone()).unwrap_or_default();
    assert!(
        progress.len() >= 2 && progress.windows(2).all(|w| w[0] < w[1]),
        "rising progress reached rmcp's client: {progress:?}"
    );
    let _ = tokio::time::timeout(Duration::from_secs(5), client.cancel()).await;
    drop(proxy);
}
