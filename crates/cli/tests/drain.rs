//! End to end through the real binary: the probes and SIGTERM's drain (SPEC §12, §7). `/livez`
//! and `/readyz` answer on every listener without the token and whatever the Host and Origin,
//! while `/healthz` still refuses; on SIGTERM `/readyz` says 503 at once, `/livez` stays 200 and
//! new calls are served through the window; a call still running at its end is answered with
//! the stopping error and cancelled upstream, event streams end with a `retry` hint, and the
//! process exits soon after with no server left; a second SIGTERM or a SIGINT during the window
//! stops at once; a stdio-only proxy stops at once; `wrap --http` drains like `serve`. Every wait
//! is bounded.

mod support;

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use support::*;
use tokio::time::Instant;

const VERSION: &str = "2025-06-18";
const ACCEPT: &str = "application/json, text/event-stream";
/// How long one HTTP exchange may take.
const LIMIT: Duration = Duration::from_secs(20);
/// How long a stop may take once it is due (SPEC §7's 5 s, and slack for a loaded machine).
const STOP: Duration = Duration::from_secs(8);
/// The token of the proxies that require one.
const TOKEN: &str = "drain-s3cret";
/// A Host and an Origin the guard refuses (a pod address, a browser page).
const FOREIGN_HOST: &str = "10.1.2.3:8080";
const FOREIGN_ORIGIN: &str = "https://evil.example";

/// One stdio fault server named `fault`, with a ledger and a long call deadline.
fn one_fault(ledger: &Path) -> Value {
    json!({ "fault": {
        "command": fault_bin(),
        "args": ["--ledger", ledger],
        "toolCallTimeoutMs": 60000,
    } })
}

/// `mcp-supervisor serve --config DIR/servers.json ARGS… --http ADDR --drain-ms DRAIN_MS` with
/// the bearer token required, once its fault server is ready: (proxy, the server's pid).
async fn serve(dir: &Path, drain_ms: u64, extra: &[&str]) -> (Running, u32) {
    let path = dir.join("servers.json");
    write_config(&path, one_fault(&dir.join("ledger")));
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let drain = drain_ms.to_string();
    let mut args = vec![
        "serve",
        "--config",
        path.to_str().unwrap_or_default(),
        "--no-catalog",
        "--auth-token-env",
        "DRAIN_TEST_TOKEN",
        "--drain-ms",
        &drain,
        "--http",
        &addr,
    ];
    args.extend_from_slice(extra);
    let proxy = Running::start(&args, port, &[("DRAIN_TEST_TOKEN", TOKEN)]).await;
    let pid = server_pid(&proxy).await;
    (proxy, pid)
}

/// The fault server's pid, once it is ready.
async fn server_pid(proxy: &Running) -> u32 {
    let client = reqwest::Client::new();
    let deadline = Instant::now() + LIMIT;
    loop {
        if let Ok(response) = client
            .get(proxy.url("/status"))
            .bearer_auth(TOKEN)
            .send()
            .await
            && let Ok(status) = response.json::<Value>().await
            && state_is(&status, "fault", "ready")
            && let Some(pid) = pid_of(&status, "fault")
        {
            return pid;
        }
        assert!(Instant::now() < deadline, "the fault server became ready");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// GET `path` on `port` with no token, a foreign Host and a foreign Origin: (status, body).
async fn probe(port: u16, path: &str) -> (u16, String) {
    let response = reqwest::Client::new()
        .get(format!("http://127.0.0.1:{port}{path}"))
        .header("host", FOREIGN_HOST)
        .header("origin", FOREIGN_ORIGIN)
        .timeout(LIMIT)
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {path}: {e}"));
    let status = response.status().as_u16();
    (status, response.text().await.unwrap_or_default())
}

/// Probe `path` until it answers `status` (bounded by `limit`); its body then.
async fn probe_until(port: u16, path: &str, status: u16, limit: Duration) -> String {
    let deadline = Instant::now() + limit;
    loop {
        let (now, body) = probe(port, path).await;
        if now == status {
            return body;
        }
        assert!(
            Instant::now() < deadline,
            "{path} stayed at {now} ({body:?}), want {status}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A session on the proxy's `/mcp`, with the token.
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
        let (_, id) = post_initialize(&client, &url, Some(TOKEN), json!({}), "drain-test").await;
        let session = Self { client, url, id };
        let (status, _) = session
            .post(
                &json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }),
                ACCEPT,
            )
            .await;
        assert_eq!(status, 202);
        session
    }

    /// POST `body` with `accept`: (status, whole body).
    async fn post(&self, body: &Value, accept: &str) -> (u16, String) {
        let response = self
            .client
            .post(&self.url)
            .bearer_auth(TOKEN)
            .header("content-type", "application/json")
            .header("accept", accept)
            .header("mcp-protocol-version", VERSION)
            .header("mcp-session-id", &self.id)
            .body(body.to_string())
            .timeout(LIMIT)
            .send()
            .await
            .unwrap_or_else(|e| panic!("POST {body}: {e}"));
        let status = response.status().as_u16();
        (status, response.text().await.unwrap_or_default())
    }

    /// `tools/call` of `name` with `id`; `stream` asks for an event stream from the start.
    async fn call(&self, id: u64, name: &str, arguments: Value, stream: bool) -> (u16, String) {
        let body = json!({
            "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": { "name": name, "arguments": arguments }
        });
        let accept = if stream {
            "text/event-stream, application/json"
        } else {
            ACCEPT
        };
        self.post(&body, accept).await
    }

    /// `fault__hang` with `id`, under way in a task of its own.
    fn spawn_hang(&self, id: u64, stream: bool) -> tokio::task::JoinHandle<(u16, String)> {
        let session = self.clone();
        tokio::spawn(async move { session.call(id, "fault__hang", json!({}), stream).await })
    }

    /// The standalone GET stream, read whole in a task of its own (it ends with the proxy).
    async fn spawn_stream(&self) -> tokio::task::JoinHandle<String> {
        let response = self
            .client
            .get(&self.url)
            .bearer_auth(TOKEN)
            .header("accept", "text/event-stream")
            .header("mcp-protocol-version", VERSION)
            .header("mcp-session-id", &self.id)
            .send()
            .await
            .expect("GET /mcp");
        assert_eq!(response.status().as_u16(), 200, "{response:?}");
        tokio::spawn(async move { response.text().await.unwrap_or_default() })
    }
}

/// A `fault__hang` call of protocol 2026-07-28 (no session) with `id`, under way in a task of
/// its own.
fn spawn_sessionless_hang(proxy: &Running, id: u64) -> tokio::task::JoinHandle<(u16, String)> {
    let body = json!({
        "jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {
            "name": "fault__hang", "arguments": {},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {}
            }
        }
    });
    let request = reqwest::Client::new()
        .post(proxy.url("/mcp"))
        .bearer_auth(TOKEN)
        .header("content-type", "application/json")
        .header("accept", ACCEPT)
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "fault__hang")
        .body(body.to_string())
        .timeout(LIMIT);
    tokio::spawn(async move {
        let response = request.send().await.expect("POST a sessionless call");
        let status = response.status().as_u16();
        (status, response.text().await.unwrap_or_default())
    })
}

/// The JSON-RPC message with `id` in a body, JSON or SSE (`data:` lines).
fn message_with_id(body: &str, id: u64) -> Value {
    let candidates = std::iter::once(body.trim())
        .chain(body.lines().filter_map(|l| l.strip_prefix("data:")))
        .filter_map(|text| serde_json::from_str::<Value>(text.trim()).ok());
    candidates
        .into_iter()
        .find(|m| m["id"] == id)
        .unwrap_or_else(|| panic!("no message with id {id} in: {body}"))
}

/// Whether the answer to `id` in `body` is the stopping error.
fn is_stopping_error(body: &str, id: u64) -> bool {
    let message = message_with_id(body, id);
    message["error"]["code"] == -32000
        && message["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("stopping"))
}

/// Wait (bounded) for `task`'s outcome.
async fn outcome<T>(task: tokio::task::JoinHandle<T>, what: &str) -> T {
    tokio::time::timeout(LIMIT, task)
        .await
        .unwrap_or_else(|_| panic!("{what} ended in time"))
        .unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// Wait (bounded) until the proxy counts `n` calls in flight.
async fn in_flight_is(proxy: &Running, n: f64) {
    let client = reqwest::Client::new();
    let deadline = Instant::now() + LIMIT;
    loop {
        let text = match client
            .get(proxy.url("/metrics"))
            .bearer_auth(TOKEN)
            .send()
            .await
        {
            Ok(response) => response.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        let now = text
            .lines()
            .find_map(|l| l.strip_prefix("mcp_supervisor_calls_in_flight "))
            .and_then(|v| v.trim().parse::<f64>().ok());
        if now == Some(n) {
            return;
        }
        assert!(Instant::now() < deadline, "in flight stayed at {now:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn probes_answer_without_the_token_and_whatever_the_host_while_healthz_refuses() {
    let dir = temp_dir("drain-probes");
    let admin_port = free_port();
    let admin = format!("127.0.0.1:{admin_port}");
    let (proxy, _) = serve(&dir, 1500, &["--admin", &admin]).await;

    for port in [proxy.port, admin_port] {
        let (status, body) = probe(port, "/livez").await;
        assert_eq!((status, body.as_str()), (200, "ok\n"), "/livez on {port}");
        let body = probe_until(port, "/readyz", 200, LIMIT).await;
        assert_eq!(body, "ready\n", "/readyz on {port} says one word");
        // The guard still stands in front of everything else.
        let (status, _) = probe(port, "/healthz").await;
        assert_eq!(status, 403, "/healthz refuses a foreign Host on {port}");
        let local = reqwest::get(format!("http://127.0.0.1:{port}/healthz"))
            .await
            .expect("GET /healthz");
        assert_eq!(local.status().as_u16(), 401, "/healthz wants the token");
    }
    // A HEAD probe too (some load balancers send one).
    let head = reqwest::Client::new()
        .head(proxy.url("/readyz"))
        .header("host", FOREIGN_HOST)
        .send()
        .await
        .expect("HEAD /readyz");
    assert_eq!(head.status().as_u16(), 200);
    drop(proxy);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn sigterm_turns_readyz_503_at_once_and_the_window_still_serves() {
    let dir = temp_dir("drain-window");
    let admin_port = free_port();
    let admin = format!("127.0.0.1:{admin_port}");
    // A window long enough for the checks below (on a loaded machine too); the stop after it is
    // checked as well.
    let (mut proxy, server) = serve(&dir, 6000, &["--admin", &admin]).await;
    let session = Session::open(&proxy).await;
    probe_until(proxy.port, "/readyz", 200, LIMIT).await;

    proxy.signal("TERM");
    let signalled = Instant::now();
    for port in [proxy.port, admin_port] {
        let body = probe_until(port, "/readyz", 503, Duration::from_secs(2)).await;
        assert_eq!(body, "draining\n", "/readyz on {port}");
        assert_eq!(probe(port, "/livez").await, (200, "ok\n".into()), "{port}");
    }
    // Requests are still served: a call on the open session, and a new session's call.
    let (status, body) = session
        .call(1, "fault__echo", json!({ "message": "during" }), false)
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        message_with_id(&body, 1)["result"]["content"][0]["text"],
        "during"
    );
    let newcomer = Session::open(&proxy).await;
    let (status, body) = newcomer
        .call(2, "fault__echo", json!({ "message": "new" }), false)
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        message_with_id(&body, 2)["result"]["content"][0]["text"],
        "new"
    );
    assert!(
        proxy.child.try_wait().ok().flatten().is_none(),
        "still running inside the window ({:?} after SIGTERM)",
        signalled.elapsed()
    );
    // /livez stays 200 until the process stops serving.
    assert_eq!(probe(proxy.port, "/livez").await.0, 200);

    let code = proxy.wait_exit(Duration::from_secs(6) + STOP).await;
    assert_eq!(code, Some(0), "it exits after the window");
    assert!(
        signalled.elapsed() >= Duration::from_millis(5900),
        "not before the window was over ({:?})",
        signalled.elapsed()
    );
    assert!(gone_within(server, Duration::from_secs(2)).await);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_call_running_at_the_windows_end_gets_the_stopping_error_and_is_cancelled_upstream() {
    let dir = temp_dir("drain-end");
    let (mut proxy, server) = serve(&dir, 1500, &[]).await;
    let session = Session::open(&proxy).await;
    let standalone = session.spawn_stream().await;
    let json_call = session.spawn_hang(7, false);
    let streamed_call = session.spawn_hang(8, true);
    let sessionless_call = spawn_sessionless_hang(&proxy, 9);
    in_flight_is(&proxy, 3.0).await;

    proxy.signal("TERM");
    let signalled = Instant::now();
    probe_until(proxy.port, "/readyz", 503, Duration::from_secs(2)).await;
    assert!(
        !json_call.is_finished() && !streamed_call.is_finished(),
        "calls in flight are not ended by the drain's start"
    );

    let (status, body) = outcome(json_call, "the JSON call").await;
    assert_eq!(status, 200, "{body}");
    assert!(is_stopping_error(&body, 7), "the stopping error: {body}");
    assert!(
        signalled.elapsed() >= Duration::from_millis(1400),
        "answered at the window's end, not before ({:?})",
        signalled.elapsed()
    );
    let (status, body) = outcome(streamed_call, "the streamed call").await;
    assert_eq!(status, 200, "{body}");
    assert!(is_stopping_error(&body, 8), "the stopping error: {body}");
    let retry = |body: &str| body.lines().any(|l| l.starts_with("retry:"));
    let last = body.rsplit("data:").next().unwrap_or_default();
    assert!(
        retry(last),
        "the call's stream ends with a retry hint after its answer: {body}"
    );
    let (status, body) = outcome(sessionless_call, "the sessionless call").await;
    assert_eq!(status, 200, "{body}");
    assert!(is_stopping_error(&body, 9), "the stopping error: {body}");
    let last = body.rsplit("data:").next().unwrap_or_default();
    assert!(retry(last), "its stream ends with a retry hint: {body}");
    let body = outcome(standalone, "the standalone stream").await;
    assert!(
        retry(&body),
        "the standalone stream ends with a retry hint: {body}"
    );

    let code = proxy.wait_exit(STOP).await;
    assert_eq!(code, Some(0), "it exits soon after the window");
    assert!(gone_within(server, Duration::from_secs(2)).await);
    let ledger = std::fs::read_to_string(dir.join("ledger")).unwrap_or_default();
    assert_eq!(
        ledger
            .lines()
            .filter(|l| l.trim() == "hang cancelled")
            .count(),
        3,
        "the server was told every call is cancelled: {ledger:?}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_second_sigterm_or_a_sigint_during_the_window_stops_at_once() {
    for second in ["TERM", "INT"] {
        let dir = temp_dir("drain-again");
        // A window far longer than the bound below.
        let (mut proxy, server) = serve(&dir, 120_000, &[]).await;
        let session = Session::open(&proxy).await;
        let call = session.spawn_hang(9, false);
        in_flight_is(&proxy, 1.0).await;

        proxy.signal("TERM");
        probe_until(proxy.port, "/readyz", 503, Duration::from_secs(2)).await;
        proxy.signal(second);
        let (status, body) = outcome(call, "the call").await;
        assert_eq!(status, 200, "{body}");
        assert!(is_stopping_error(&body, 9), "SIG{second}: {body}");
        let code = proxy.wait_exit(STOP).await;
        assert_eq!(code, Some(0), "SIG{second} during the window stops at once");
        assert!(gone_within(server, Duration::from_secs(2)).await);
        let _ = std::fs::remove_dir_all(dir);
    }
}

#[tokio::test]
async fn a_stdio_only_proxy_stops_at_once_on_sigterm() {
    let dir = temp_dir("drain-stdio");
    let path = dir.join("servers.json");
    write_config(&path, one_fault(&dir.join("ledger")));
    let port = free_port();
    let admin = format!("127.0.0.1:{port}");
    // The stdio face (stdin stays open) and the admin endpoints; a window it must not wait for.
    let mut proxy = Running::start(
        &[
            "serve",
            "--config",
            path.to_str().unwrap_or_default(),
            "--no-catalog",
            "--drain-ms",
            "120000",
            "--admin",
            &admin,
        ],
        port,
        &[],
    )
    .await;
    let status = status_until(&proxy, LIMIT, |s| state_is(s, "fault", "ready")).await;
    let server = pid_of(&status, "fault").expect("the server's pid");
    assert_eq!(probe_until(port, "/readyz", 200, LIMIT).await, "ready\n");

    proxy.signal("TERM");
    let code = proxy.wait_exit(STOP).await;
    assert_eq!(code, Some(0), "no drain without an MCP HTTP face");
    assert!(gone_within(server, Duration::from_secs(2)).await);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn wrap_with_an_http_face_drains_too() {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let fault = fault_bin();
    let mut proxy = Running::start(
        &[
            "wrap",
            "--no-catalog",
            "--drain-ms",
            "1500",
            "--http",
            &addr,
            "--",
            fault.to_str().unwrap_or_default(),
        ],
        port,
        &[],
    )
    .await;
    assert_eq!(probe_until(port, "/readyz", 200, LIMIT).await, "ready\n");
    proxy.signal("TERM");
    let signalled = Instant::now();
    assert_eq!(
        probe_until(port, "/readyz", 503, Duration::from_secs(2)).await,
        "draining\n"
    );
    let code = proxy.wait_exit(Duration::from_millis(1500) + STOP).await;
    assert_eq!(code, Some(0));
    assert!(
        signalled.elapsed() >= Duration::from_millis(1400),
        "wrap waited for its window ({:?})",
        signalled.elapsed()
    );
}
