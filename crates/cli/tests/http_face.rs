//! End to end through the real binary: the HTTP face at `/mcp` (`mcp_http.rs`). Calls on a
//! session answered as JSON; with something related first (progress with the client's own
//! token, a server's request the call caused), as an event stream that ends with the answer;
//! the client's POSTed answer to a server's request reaching the server; public names routed;
//! cancellation by `notifications/cancelled`, by DELETE and by a client that goes away, each
//! reaching the server; the standalone GET stream (list_changed, one at a time, delivery of what
//! came while none was open, resumption after `Last-Event-ID`, the end at shutdown); unknown
//! sessions; recovery across a crash; the call metrics and the in-flight gauge; rmcp's own
//! streamable HTTP client. Every wait is bounded.

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use support::*;
use tokio::time::Instant;

const VERSION: &str = "2025-06-18";
const ACCEPT: &str = "application/json, text/event-stream";
/// How long one HTTP exchange, or one wait for an event, may take.
const LIMIT: Duration = Duration::from_secs(20);

/// The `data:` payloads of an SSE body, one per event (multi-line data joined by `\n`), without
/// the empty ones.
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

/// One HTTP answer to a request on `/mcp`, read whole.
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

async fn read(response: reqwest::Response) -> Answer {
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let body = tokio::time::timeout(LIMIT, response.text())
        .await
        .expect("the body ends in time")
        .expect("read the answer's body");
    Answer {
        status,
        content_type,
        body,
    }
}

/// An event stream read as it comes: `(event id, JSON-RPC message)` at a time.
struct Events {
    response: reqwest::Response,
    buffer: String,
}

impl Events {
    fn new(response: reqwest::Response) -> Self {
        Self {
            response,
            buffer: String::new(),
        }
    }

    /// The next event with data, or `None` once the stream has ended; panics after `LIMIT`.
    async fn next(&mut self) -> Option<(Option<String>, Value)> {
        let deadline = Instant::now() + LIMIT;
        loop {
            while let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let mut id = None;
                let mut data = Vec::new();
                for line in block.lines() {
                    if let Some(rest) = line.strip_prefix("id:") {
                        id = Some(rest.trim().to_string());
                    } else if let Some(rest) = line.strip_prefix("data:") {
                        data.push(rest.strip_prefix(' ').unwrap_or(rest));
                    }
                }
                if data.is_empty() {
                    continue; // a keep-alive comment
                }
                let text = data.join("\n");
                let message = serde_json::from_str(&text)
                    .unwrap_or_else(|e| panic!("SSE data is not JSON ({e}): {text}"));
                return Some((id, message));
            }
            let chunk = tokio::time::timeout_at(deadline, self.response.chunk())
                .await
                .expect("an event within the time limit")
                .expect("the stream reads");
            match chunk {
                Some(bytes) => self
                    .buffer
                    .push_str(&String::from_utf8_lossy(&bytes).replace("\r\n", "\n")),
                None => return None,
            }
        }
    }

    /// The next message (its event id dropped), which must come.
    async fn message(&mut self) -> Value {
        self.next().await.expect("an event, not the end").1
    }
}

/// A session on the proxy's `/mcp`.
#[derive(Clone)]
struct Session {
    client: reqwest::Client,
    url: String,
    id: String,
}

impl Session {
    async fn open(proxy: &Running) -> Self {
        Self::open_with(proxy, json!({})).await
    }

    /// `initialize` declaring `capabilities`, then `notifications/initialized`.
    async fn open_with(proxy: &Running, capabilities: Value) -> Self {
        let client = reqwest::Client::new();
        let url = proxy.url("/mcp");
        let (response, id) =
            post_initialize(&client, &url, None, capabilities, "http-face-test").await;
        let answer = read(response).await;
        assert!(answer.is_json(), "{answer:?}");
        let result = answer.response(&json!(0));
        assert_eq!(result["result"]["protocolVersion"], VERSION, "{result}");
        let session = Self { client, url, id };
        let initialized = session
            .post(&json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }))
            .await;
        assert_eq!(initialized.status, 202, "initialized: {initialized:?}");
        assert!(initialized.body.is_empty(), "{initialized:?}");
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

    /// POST `body` and read the whole answer.
    async fn post(&self, body: &Value) -> Answer {
        let response = self
            .request(body)
            .timeout(LIMIT)
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

    /// `fault__echo` of `message` is answered with it.
    async fn echoes(&self, id: Value, message: &str) {
        let text = self
            .text(id, "fault__echo", json!({ "message": message }))
            .await;
        assert_eq!(text, message);
    }

    /// A call that must succeed with a JSON answer: its text.
    async fn text(&self, id: Value, name: &str, arguments: Value) -> String {
        let answer = self.call(id.clone(), name, arguments).await;
        assert_eq!(answer.status, 200, "{name}: {answer:?}");
        assert!(answer.is_json(), "{name} is answered as JSON: {answer:?}");
        let response = answer.response(&id);
        assert_eq!(response["jsonrpc"], "2.0", "{response}");
        assert_ne!(response["result"]["isError"], true, "{name}: {response}");
        response["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("{name}: no text content in {response}"))
            .to_string()
    }

    /// GET the standalone stream, with `Last-Event-ID` when given.
    async fn get(&self, last_event_id: Option<&str>) -> reqwest::Response {
        let mut request = self
            .client
            .get(&self.url)
            .header("accept", "text/event-stream")
            .header("mcp-protocol-version", VERSION)
            .header("mcp-session-id", &self.id);
        if let Some(id) = last_event_id {
            request = request.header("last-event-id", id);
        }
        tokio::time::timeout(LIMIT, request.send())
            .await
            .expect("GET answered in time")
            .expect("GET /mcp")
    }

    /// The standalone stream, which must open.
    async fn stream(&self, last_event_id: Option<&str>) -> Events {
        let response = self.get(last_event_id).await;
        assert_eq!(response.status().as_u16(), 200, "GET: {response:?}");
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        assert!(
            content_type.starts_with("text/event-stream"),
            "{response:?}"
        );
        Events::new(response)
    }

    async fn delete(&self) -> u16 {
        self.client
            .delete(&self.url)
            .header("mcp-session-id", &self.id)
            .header("mcp-protocol-version", VERSION)
            .timeout(LIMIT)
            .send()
            .await
            .expect("DELETE /mcp")
            .status()
            .as_u16()
    }

    /// Replace the fault server's dynamic tools (it then sends tools/list_changed).
    async fn set_tools(&self, id: Value, tools: &[&str]) {
        let text = self
            .text(id, "fault__set_tools", json!({ "tools": tools }))
            .await;
        assert!(text.contains("dynamic tools"), "{text}");
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
    status_until(&proxy, LIMIT, |s| {
        names.iter().all(|n| state_is(s, n, "ready"))
    })
    .await;
    proxy
}

/// `mcp-supervisor wrap --http` in front of the fault server, listening (the server is opened
/// with the first client's own handshake).
async fn wrap_fault() -> Running {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let fault = fault_bin();
    Running::start(
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
    .await
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
/// The server saw the call cancelled (`what` says how it learned), the proxy counted it, and
/// nothing is in flight any more.
async fn cancelled_upstream(ledger: &Path, proxy: &Running, what: &str) {
    assert!(
        ledger_shows_cancel(ledger, Duration::from_secs(5)).await,
        "{what}"
    );
    cancelled_reaches(proxy, 1.0).await;
    in_flight_is(proxy, 0.0).await;
}

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

/// The `mcp_supervisor_calls_in_flight` gauge in a scrape.
fn in_flight_in(text: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix("mcp_supervisor_calls_in_flight "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no calls_in_flight gauge in:\n{text}"))
}

/// Wait (bounded by `limit`) until `done` holds of the value `read` finds in the metrics.
async fn metric_until(
    proxy: &Running,
    what: &str,
    limit: Duration,
    read: impl Fn(&str) -> f64,
    done: impl Fn(f64) -> bool,
) {
    let deadline = Instant::now() + limit;
    loop {
        let now = read(&metrics_text(proxy).await);
        if done(now) {
            return;
        }
        assert!(Instant::now() < deadline, "{what} stayed at {now}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Wait (bounded) until the proxy has counted `n` calls as cancelled.
async fn cancelled_reaches(proxy: &Running, n: f64) {
    let what = format!("cancelled calls (want {n}: an abandoned call was not counted)");
    let read = |text: &str| calls_total_in(text, "cancelled");
    metric_until(proxy, &what, Duration::from_secs(5), read, |v| v >= n).await;
}

/// Wait (bounded) until `mcp_supervisor_calls_in_flight` is `n`.
async fn in_flight_is(proxy: &Running, n: f64) {
    let what = format!("calls in flight (want {n})");
    let limit = Duration::from_secs(10);
    metric_until(proxy, &what, limit, in_flight_in, |v| v == n).await;
}

fn cleanup(dir: PathBuf) {
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_call_on_a_session_is_answered_as_json_with_its_own_id() {
    let dir = temp_dir("face-basic");
    let proxy = serve(&dir, one_fault(&dir.join("ledger"))).await;
    let session = Session::open(&proxy).await;

    let message = "say \"hi\" \\ back: héllo, 世界 ✓";
    for id in [json!(7), json!("req-7"), json!("7")] {
        let answer = session
            .call(id.clone(), "fault__echo", json!({ "message": message }))
            .await;
        assert_eq!(answer.status, 200, "{answer:?}");
        assert!(answer.is_json(), "{answer:?}");
        let response: Value = serde_json::from_str(&answer.body).expect("one JSON-RPC response");
        assert_eq!(response["jsonrpc"], "2.0");
        assert_eq!(response["id"], id, "the same id, of the same type");
        assert_eq!(response["result"]["content"][0]["text"], message);
        assert!(response["result"].get("resultType").is_none(), "{response}");
        assert_ne!(response["result"]["isError"], true);
        assert!(response.get("error").is_none(), "{response}");
    }

    // The server's own JSON-RPC error comes back as an error.
    let answer = session
        .call(json!(12), "fault__echo", json!({ "wrong": 1 }))
        .await;
    assert!(answer.is_json(), "{answer:?}");
    assert!(
        answer.response(&json!(12))["error"]["code"].is_i64(),
        "{answer:?}"
    );

    // An unknown name is not a success.
    let answer = session
        .call(json!(9), "fault__nope", json!({ "message": "x" }))
        .await;
    assert_eq!(answer.status, 200, "{answer:?}");
    let response = answer.response(&json!(9));
    assert!(
        response.get("error").is_some() || response["result"]["isError"] == true,
        "an unknown tool does not succeed: {response}"
    );

    // Other requests and notifications of the session.
    let answer = session
        .post(&json!({ "jsonrpc": "2.0", "id": "list", "method": "tools/list" }))
        .await;
    assert!(answer.is_json(), "{answer:?}");
    let tools = answer.response(&json!("list"))["result"]["tools"].clone();
    assert!(
        tools
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t["name"] == "fault__elicit")),
        "{tools}"
    );
    let ping = session
        .post(&json!({ "jsonrpc": "2.0", "id": 13, "method": "ping" }))
        .await;
    assert_eq!(ping.response(&json!(13))["result"], json!({}));
    // A response to nothing this proxy asked is refused with a JSON-RPC error (SPEC §12: an
    // answer the holding replica did not send is never silently dropped), and changes nothing.
    let stray = session
        .post(&json!({ "jsonrpc": "2.0", "id": 999, "result": {} }))
        .await;
    assert_eq!(stray.status, 409, "{stray:?}");
    assert!(stray.body.contains("not waiting for"), "{stray:?}");

    // The session still works after all that.
    session.echoes(json!(11), "again").await;
    drop(proxy);
    cleanup(dir);
}

#[tokio::test]
async fn sessions_are_required_known_and_of_a_session_protocol_version() {
    let dir = temp_dir("face-sessions");
    let proxy = serve(&dir, one_fault(&dir.join("ledger"))).await;
    let session = Session::open(&proxy).await;
    let other = Session::open(&proxy).await;
    assert_ne!(session.id, other.id, "every session its own id");
    assert!(
        session.id.len() >= 32,
        "a session id is not guessable: {}",
        session.id
    );

    // An unknown session: 404, with a JSON-RPC error, for every method.
    let bogus = Session {
        id: "no-such-session".to_string(),
        ..session.clone()
    };
    let answer = bogus
        .call(json!(10), "fault__echo", json!({ "message": "x" }))
        .await;
    assert_eq!(answer.status, 404, "{answer:?}");
    let error: Value = serde_json::from_str(&answer.body).expect("a JSON-RPC error body");
    assert!(error["error"]["code"].is_i64(), "{error}");
    assert_eq!(bogus.get(None).await.status().as_u16(), 404);
    assert_eq!(bogus.delete().await, 404);

    // HEAD would open a stream nobody reads.
    let head = session
        .client
        .head(&session.url)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &session.id)
        .timeout(LIMIT)
        .send()
        .await
        .expect("HEAD");
    assert_eq!(head.status().as_u16(), 405);

    // No session on anything but initialize: 400.
    let client = reqwest::Client::new();
    let url = proxy.url("/mcp");
    let no_session = client
        .post(&url)
        .header("content-type", "application/json")
        .header("accept", ACCEPT)
        .body(call_body(json!(1), "fault__echo", json!({ "message": "x" })).to_string())
        .timeout(LIMIT)
        .send()
        .await
        .expect("POST");
    let no_session = read(no_session).await;
    assert_eq!(no_session.status, 400, "{no_session:?}");
    assert!(no_session.body.contains("Mcp-Session-Id"), "{no_session:?}");
    let get = client
        .get(&url)
        .header("accept", "text/event-stream")
        .timeout(LIMIT)
        .send()
        .await
        .expect("GET");
    assert_eq!(get.status().as_u16(), 400);

    // A protocol version without sessions, or an unknown one, on a session: 400.
    for version in ["2026-07-28", "1999-01-01"] {
        let body = call_body(json!(2), "fault__echo", json!({ "message": "x" }));
        let answer = session
            .client
            .post(&session.url)
            .header("content-type", "application/json")
            .header("accept", ACCEPT)
            .header("mcp-protocol-version", version)
            .header("mcp-session-id", &session.id)
            .body(body.to_string())
            .timeout(LIMIT)
            .send()
            .await
            .expect("POST");
        assert_eq!(answer.status().as_u16(), 400, "{version}");
    }

    // Each session is its own: ending one leaves the other.
    assert_eq!(other.delete().await, 200);
    assert_eq!(other.delete().await, 404, "ended already");
    let after = other
        .call(json!(3), "fault__echo", json!({ "message": "x" }))
        .await;
    assert_eq!(after.status, 404, "the session is gone: {after:?}");
    session.echoes(json!(4), "still here").await;
    drop(proxy);
    cleanup(dir);
}

#[tokio::test]
async fn a_public_name_is_routed_to_its_server_under_its_upstream_name() {
    let dir = temp_dir("face-two");
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
            .text(json!(1), "b__add", json!({ "a": 2, "b": 3 }))
            .await,
        "5"
    );
    assert_eq!(
        session
            .text(json!(2), "a__echo", json!({ "message": "from a" }))
            .await,
        "from a"
    );
    for name in ["a", "b"] {
        let pid = session
            .text(
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
async fn notifications_cancelled_ends_a_call_and_reaches_the_server() {
    let (dir, ledger, proxy, session) = one_fault_session("face-cancel").await;

    let call = session.spawn_hang(json!(41));
    in_flight_is(&proxy, 1.0).await;
    let answer = session.post(&cancel_body(json!(41))).await;
    assert_eq!(
        answer.status, 202,
        "the notification is accepted: {answer:?}"
    );
    let answer = tokio::time::timeout(Duration::from_secs(5), call)
        .await
        .expect("the hang call ended within 5 s of its cancellation")
        .expect("the call task");
    // No answer (MCP: the receiver of a cancellation does not respond): the POST's event
    // stream ends without one.
    assert_eq!(answer.status, 200, "{answer:?}");
    assert!(answer.is_sse(), "{answer:?}");
    assert!(
        sse_data(&answer.body).is_empty(),
        "nothing answers the cancelled call: {answer:?}"
    );
    cancelled_upstream(&ledger, &proxy, "the server saw the cancellation").await;
    session.echoes(json!(42), "after").await;
    drop(proxy);
    cleanup(dir);
}

#[tokio::test]
async fn a_client_that_goes_away_cancels_its_call_upstream() {
    let (dir, ledger, proxy, session) = one_fault_session("face-gone").await;

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

    cancelled_upstream(&ledger, &proxy, "the server was told the call is cancelled").await;
    session.echoes(json!(52), "still here").await;
    drop(proxy);
    cleanup(dir);
}

#[tokio::test]
async fn deleting_a_session_cancels_its_calls() {
    let (dir, ledger, proxy, session) = one_fault_session("face-delete").await;
    let call = session.spawn_hang(json!(61));
    in_flight_is(&proxy, 1.0).await;
    let mut stream = session.stream(None).await;
    assert_eq!(session.delete().await, 200);
    let answer = tokio::time::timeout(Duration::from_secs(5), call)
        .await
        .expect("the call ended with its session")
        .expect("the call task");
    assert_eq!(answer.status, 200, "{answer:?}");
    assert!(
        ledger_shows_cancel(&ledger, Duration::from_secs(5)).await,
        "the server was told the call is cancelled"
    );
    assert!(
        stream.next().await.is_none(),
        "the session's stream ended with it"
    );
    in_flight_is(&proxy, 0.0).await;
    let after = session
        .call(json!(62), "fault__echo", json!({ "message": "x" }))
        .await;
    assert_eq!(after.status, 404, "the session is gone: {after:?}");
    drop(proxy);
    cleanup(dir);
}

#[tokio::test]
async fn a_call_waits_for_the_reconnect_after_a_crash() {
    let dir = temp_dir("face-crash");
    let proxy = serve(&dir, one_fault(&dir.join("ledger"))).await;
    let before = status_until(&proxy, Duration::from_secs(5), |s| {
        pid_of(s, "fault").is_some()
    })
    .await;
    let first_pid = pid_of(&before, "fault");
    assert_eq!(server(&before, "fault")["generation"], 1, "{before}");
    let session = Session::open(&proxy).await;

    assert_eq!(
        session.text(json!(1), "fault__crash", json!({})).await,
        "crashing"
    );
    // Calls right after the crash, and on through the outage, all succeed.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut id = 2;
    loop {
        let message = format!("call {id}");
        assert_eq!(
            session
                .text(json!(id), "fault__echo", json!({ "message": message }))
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
            .text(json!("last"), "fault__add", json!({ "a": 1, "b": 1 }))
            .await,
        "2"
    );
    drop(proxy);
    cleanup(dir);
}

#[tokio::test]
async fn calls_are_counted_in_the_metrics_and_leave_the_in_flight_gauge_at_zero() {
    let dir = temp_dir("face-metrics");
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
                .text(json!(i), "fault__echo", json!({ "message": message }))
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

    let text = metrics_text(&proxy).await;
    let ok_after = calls_total_in(&text, "ok");
    assert!(
        ok_after >= ok_before + f64::from(n),
        "ok went from {ok_before} to {ok_after} after {n} calls"
    );
    let tool_error_after = calls_total_in(&text, "tool_error");
    assert!(
        tool_error_after > tool_error_before,
        "an isError result counts as tool_error ({tool_error_before} -> {tool_error_after})"
    );
    assert_eq!(in_flight_in(&text), 0.0, "{text}");
    drop(proxy);
    cleanup(dir);
}

#[tokio::test]
async fn under_wrap_the_names_are_unchanged() {
    let proxy = wrap_fault().await;
    let session = Session::open(&proxy).await;
    assert_eq!(
        session
            .text(json!(1), "echo", json!({ "message": "wrapped" }))
            .await,
        "wrapped"
    );
    assert_eq!(
        session
            .text(json!(2), "add", json!({ "a": 40, "b": 2 }))
            .await,
        "42"
    );
    drop(proxy);
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
async fn a_call_is_json_until_progress_comes_then_an_event_stream_with_the_clients_token() {
    let (dir, _ledger, proxy, session) = one_fault_session("face-progress").await;

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
    assert!(answer.is_json(), "no progress, so JSON: {answer:?}");
    assert_eq!(
        answer.response(&json!(20))["result"]["content"][0]["text"],
        "no progress"
    );

    // Progress comes: an event stream of the progress, with the client's own token (a string
    // or an integer, as sent), then the result as the last event; every event has an id.
    for (id, token) in [(json!(21), json!(4242)), (json!("r-22"), json!("t-22"))] {
        let answer = session
            .post(&sleep_with_progress(id.clone(), 350, token.clone()))
            .await;
        assert_eq!(answer.status, 200, "{answer:?}");
        assert!(answer.is_sse(), "progress came, so SSE: {answer:?}");
        let ids: Vec<&str> = answer
            .body
            .lines()
            .filter_map(|l| l.strip_prefix("id:"))
            .map(str::trim)
            .collect();
        let messages = sse_messages(&answer.body);
        // The stream opens with a priming event (an id and a reconnection delay, no data:
        // SEP-1699), then one event per message.
        assert!(
            answer.body.starts_with("id: ") && answer.body.contains("\nretry: "),
            "the stream opens with a priming event: {answer:?}"
        );
        assert_eq!(
            ids.len(),
            messages.len() + 1,
            "each event has an id: {answer:?}"
        );
        let unique: std::collections::HashSet<_> = ids.iter().collect();
        assert_eq!(unique.len(), ids.len(), "event ids are unique: {ids:?}");
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
        .timeout(LIMIT)
        .send()
        .await
        .expect("the stream starts");
    let mut events = Events::new(response);
    let first = events.message().await;
    assert_eq!(first["method"], "notifications/progress", "{first}");
    drop(events);
    drop(leaving);
    cancelled_reaches(&proxy, cancelled_before + 1.0).await;
    in_flight_is(&proxy, 0.0).await;
    session.echoes(json!(24), "still here").await;
    drop(proxy);
    cleanup(dir);
}

#[tokio::test]
async fn a_servers_request_rides_the_calls_stream_and_the_clients_answer_reaches_the_server() {
    let dir = temp_dir("face-elicit");
    let proxy = serve(&dir, one_fault(&dir.join("ledger"))).await;
    let session = Session::open_with(&proxy, json!({ "elicitation": {} })).await;

    let response = session
        .request(&call_body(
            json!("ask"),
            "fault__elicit",
            json!({ "message": "Your name?" }),
        ))
        .timeout(LIMIT)
        .send()
        .await
        .expect("the call's answer starts");
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    assert!(
        content_type.starts_with("text/event-stream"),
        "a server's request came first, so SSE: {content_type}"
    );
    let mut events = Events::new(response);
    let (event_id, request) = events.next().await.expect("the server's request");
    assert!(event_id.is_some(), "events carry ids");
    assert_eq!(request["method"], "elicitation/create", "{request}");
    assert_eq!(request["params"]["message"], "Your name?", "{request}");
    let request_id = request["id"].clone();
    assert!(!request_id.is_null(), "a request: {request}");

    // The client answers with a POST of its own, on the same session.
    let answered = session
        .post(&json!({
            "jsonrpc": "2.0",
            "id": request_id,
            "result": { "action": "accept", "content": { "answer": "Ada" } }
        }))
        .await;
    assert_eq!(answered.status, 202, "{answered:?}");

    let (_, answer) = events.next().await.expect("the call's answer");
    assert_eq!(answer["id"], "ask", "{answer}");
    assert_ne!(answer["result"]["isError"], true, "{answer}");
    let text = answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    let seen: Value = serde_json::from_str(text).expect("the server's reply is JSON");
    assert_eq!(
        seen,
        json!({ "action": "accept", "content": { "answer": "Ada" } }),
        "the server got the client's answer"
    );
    assert!(
        events.next().await.is_none(),
        "the stream ends after the answer"
    );

    // A client that did not declare elicitation is not asked: the call fails, nothing hangs.
    let plain = Session::open(&proxy).await;
    let answer = plain
        .call(json!(2), "fault__elicit", json!({ "message": "?" }))
        .await;
    assert!(answer.is_json(), "{answer:?}");
    assert_eq!(
        answer.response(&json!(2))["result"]["isError"],
        true,
        "{answer:?}"
    );
    drop(proxy);
    cleanup(dir);
}

#[tokio::test]
async fn the_standalone_stream_gets_list_changed_one_at_a_time_and_replays_after_an_id() {
    let (dir, _ledger, proxy, session) = one_fault_session("face-get").await;

    // Before any stream is open, what comes is kept, and delivered when one opens.
    session.set_tools(json!(1), &["one"]).await;
    let mut stream = session.stream(None).await;
    let (first_id, message) = stream.next().await.expect("the kept list_changed");
    assert_eq!(message["method"], "notifications/tools/list_changed");
    let first_id = first_id.expect("an event id");
    // One stream at a time per session.
    let second = session.get(None).await;
    assert_eq!(second.status().as_u16(), 409, "{second:?}");

    // Live.
    session.set_tools(json!(2), &["two"]).await;
    let (second_id, message) = stream.next().await.expect("a live list_changed");
    assert_eq!(message["method"], "notifications/tools/list_changed");
    let second_id = second_id.expect("an event id");
    assert_ne!(first_id, second_id, "event ids are unique");

    // The stream is lost; what comes meanwhile is kept; resumed after an id, the stream replays
    // what followed it (whether or not the server noticed the loss yet), then goes on live.
    // Resumed after the first id: the second event comes again, with its id, and then the one
    // kept while no stream was open. (One change while the stream is lost: changes that come
    // together may be told as one list_changed, which is all a client needs.)
    drop(stream);
    session.set_tools(json!(3), &["three"]).await;
    let mut stream = session.stream(Some(&first_id)).await;
    let mut replayed = Vec::new();
    for _ in 0..2 {
        let (id, message) = stream.next().await.expect("replayed");
        assert_eq!(message["method"], "notifications/tools/list_changed");
        replayed.push(id.expect("an event id"));
    }
    assert_eq!(replayed[0], second_id, "a replayed event keeps its id");
    let ids = [first_id.as_str(), second_id.as_str(), &replayed[1]];
    let unique: std::collections::HashSet<_> = ids.iter().collect();
    assert_eq!(unique.len(), 3, "event ids are unique: {ids:?}");
    session.set_tools(json!(5), &[]).await;
    let (_, message) = stream.next().await.expect("live again");
    assert_eq!(message["method"], "notifications/tools/list_changed");

    // Shutdown ends the open stream (SIGINT: at once, with no drain window).
    proxy.signal("INT");
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        while stream.next().await.is_some() {}
    })
    .await;
    assert!(ended.is_ok(), "the stream ended at shutdown");
    drop(proxy);
    cleanup(dir);
}

/// An rmcp client handler that keeps the progress values and counts tools/list_changed.
#[derive(Clone, Default)]
struct Seen {
    progress: std::sync::Arc<std::sync::Mutex<Vec<f64>>>,
    list_changed: std::sync::Arc<tokio::sync::Notify>,
}

impl rmcp::ClientHandler for Seen {
    async fn on_progress(
        &self,
        params: rmcp::model::ProgressNotificationParam,
        _context: rmcp::service::NotificationContext<rmcp::RoleClient>,
    ) {
        if let Ok(mut seen) = self.progress.lock() {
            seen.push(params.progress);
        }
    }

    async fn on_tool_list_changed(
        &self,
        _context: rmcp::service::NotificationContext<rmcp::RoleClient>,
    ) {
        self.list_changed.notify_one();
    }
}

#[tokio::test]
async fn rmcp_s_client_uses_the_face_json_answers_event_streams_and_the_get_stream() {
    use rmcp::ServiceExt;
    use rmcp::model::CallToolRequestParams;

    // rmcp's client puts a progress token on every call.
    let proxy = wrap_fault().await;
    let seen = Seen::default();
    let transport = rmcp::transport::StreamableHttpClientTransport::from_uri(proxy.url("/mcp"));
    let client = tokio::time::timeout(LIMIT, seen.clone().serve(transport))
        .await
        .expect("initialize in time")
        .expect("initialize");
    let version = client
        .peer_info()
        .map(|info| info.protocol_version.to_string())
        .unwrap_or_default();
    assert!(
        !version.is_empty() && version.as_str() < "2026-07-28",
        "a session protocol version: {version:?}"
    );
    let call = |name: &str, arguments: Value| {
        let params = CallToolRequestParams::new(name.to_string())
            .with_arguments(arguments.as_object().cloned().unwrap_or_default());
        let peer = client.peer().clone();
        async move {
            tokio::time::timeout(LIMIT, peer.call_tool(params))
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
    let progress = seen.progress.lock().map(|p| p.clone()).unwrap_or_default();
    assert!(
        progress.len() >= 2 && progress.windows(2).all(|w| w[0] < w[1]),
        "rising progress reached rmcp's client: {progress:?}"
    );
    // tools/list_changed reaches it on its GET stream.
    let changed = call("set_tools", json!({ "tools": ["new_one"] })).await;
    assert!(text(&changed).contains("new_one"), "{changed:?}");
    tokio::time::timeout(LIMIT, seen.list_changed.notified())
        .await
        .expect("tools/list_changed reached rmcp's client");
    let _ = tokio::time::timeout(Duration::from_secs(5), client.cancel()).await;
    drop(proxy);
}
