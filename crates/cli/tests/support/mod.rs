//! Helpers for end-to-end tests of the `mcp-supervisor` binary with real fault servers.
#![allow(dead_code)] // each test binary uses a different part

#[allow(unused_imports)] // each test binary uses a different part
pub use mcp_supervisor_testkit::{alive, fault_bin, free_port, gone_within, kill9, temp_dir};

mod balancer;
mod fake_home;
mod frozen;
mod mcp_http;
mod pins;
mod stdio_proxy;
#[allow(unused_imports)] // each test binary uses a different part
pub use balancer::*;
#[allow(unused_imports)] // each test binary uses a different part
pub use fake_home::*;
#[allow(unused_imports)] // each test binary uses a different part
pub use frozen::*;
#[allow(unused_imports)] // each test binary uses a different part
pub use mcp_http::*;
#[allow(unused_imports)] // each test binary uses a different part
pub use pins::*;
#[allow(unused_imports)] // each test binary uses a different part
pub use stdio_proxy::*;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

pub fn supervisor_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_mcp-supervisor"))
}

pub fn write_config(path: &Path, servers: Value) {
    let text = serde_json::json!({ "mcpServers": servers }).to_string();
    std::fs::write(path, text).expect("write config");
}

/// `mcp-supervisor serve --config PATH FACE 127.0.0.1:PORT` on a free port (`FACE` is `--http`
/// or `--admin`), once it listens.
pub async fn serve_config(path: &Path, face: &str) -> Running {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let config = path.to_str().unwrap_or_default();
    Running::start(&["serve", "--config", config, face, &addr], port, &[]).await
}

/// `mcp-supervisor serve --config PATH --http 127.0.0.1:PORT --no-catalog` on a free port, once
/// it listens: no saved catalog from another test can stand in for a server's own lists.
pub async fn serve_http_without_catalog(path: &Path) -> Running {
    serve_http_on(path, free_port()).await
}

/// As [`serve_http_without_catalog`], on `port` (a config that names its own URL, as `auth`'s
/// `audience` does, needs the port first).
pub async fn serve_http_on(path: &Path, port: u16) -> Running {
    let addr = format!("127.0.0.1:{port}");
    let config = path.to_str().unwrap_or_default();
    Running::start(
        &["serve", "--config", config, "--http", &addr, "--no-catalog"],
        port,
        &[],
    )
    .await
}

/// `argv` as a grandchild under `sh -c` (the `; true` keeps `sh` from exec'ing it), `sh` and
/// the server ignoring SIGTERM (`trap '' TERM` is inherited): only SIGKILL ends them.
pub fn under_sh(argv: &[String]) -> Vec<String> {
    let line = argv
        .iter()
        .map(|a| format!("'{a}'"))
        .collect::<Vec<_>>()
        .join(" ");
    vec![
        "sh".into(),
        "-c".into(),
        format!("trap '' TERM; {line}; true"),
    ]
}

/// The text of `/metrics` on the admin `port`.
pub async fn metrics_text(port: u16) -> String {
    reqwest::get(format!("http://127.0.0.1:{port}/metrics"))
        .await
        .expect("GET /metrics")
        .text()
        .await
        .expect("metrics text")
}

/// `/metrics` on the admin `port` counts `cuts` results of `server` cut to `maxResultBytes`.
pub async fn assert_cuts(port: u16, server: &str, cuts: u64) {
    let metrics = metrics_text(port).await;
    let line = format!("mcp_supervisor_results_cut_total{{server=\"{server}\"}} {cuts}");
    assert!(metrics.lines().any(|l| l == line), "{line} in:\n{metrics}");
}

/// A running proxy; on drop it gets SIGINT (so it stops its servers at once: SIGTERM would
/// first drain an HTTP face for `--drain-ms`), then SIGKILL.
pub struct Running {
    pub child: Child,
    pub port: u16,
}

impl Running {
    /// Start `mcp-supervisor ARGS` with stdin piped (kept open) and wait until `port` listens.
    pub async fn start(args: &[&str], port: u16, envs: &[(&str, &str)]) -> Self {
        let child = Command::new(supervisor_bin())
            .args(args)
            .envs(envs.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn mcp-supervisor");
        let running = Self { child, port };
        for _ in 0..1000 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return running;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("mcp-supervisor did not listen on {port}");
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &self.child.id().to_string()])
            .status();
        assert!(matches!(status, Ok(s) if s.success()), "kill -{signal}");
    }

    /// Wait (bounded) for the process to exit; returns its exit code.
    pub async fn wait_exit(&mut self, limit: Duration) -> Option<i32> {
        let deadline = tokio::time::Instant::now() + limit;
        while tokio::time::Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status.code().unwrap_or(-1));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        None
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = Command::new("kill")
                .args(["-INT", &self.child.id().to_string()])
                .status();
            for _ in 0..400 {
                if let Ok(Some(_)) = self.child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

pub async fn get_json(url: &str) -> (u16, Value) {
    let response = reqwest::get(url).await.expect("GET");
    let status = response.status().as_u16();
    let body = response.json().await.unwrap_or(Value::Null);
    (status, body)
}

/// GET /status until `pred` holds on it (bounded).
pub async fn status_until(
    running: &Running,
    limit: Duration,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = tokio::time::Instant::now() + limit;
    let mut last = Value::Null;
    while tokio::time::Instant::now() < deadline {
        if let Ok(response) = reqwest::get(running.url("/status")).await
            && let Ok(body) = response.json::<Value>().await
        {
            if pred(&body) {
                return body;
            }
            last = body;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("status did not reach the expected state within {limit:?}; last: {last}");
}

pub fn server<'a>(status: &'a Value, name: &str) -> &'a Value {
    status["servers"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["name"] == name))
        .unwrap_or(&Value::Null)
}

pub fn state_is(status: &Value, name: &str, state: &str) -> bool {
    server(status, name)["state"] == state
}

pub fn pid_of(status: &Value, name: &str) -> Option<u32> {
    server(status, name)["pid"].as_u64().map(|p| p as u32)
}

/// `wrap`'s arguments, up to its server's command, with the stdio face's debug lines logged.
pub const WRAP_LOGGING_STDIO: [&str; 4] = [
    "wrap",
    "--log-level",
    "info,mcp_supervisor_front::stdio=debug",
    "--",
];

/// Panics unless `log` (of a `wrap` run with [`WRAP_LOGGING_STDIO`]) says both stdin and stdout
/// were stream sockets, stdin read on the reactor and stdout written straight (on the reactor
/// only while a write would block).
pub fn assert_stdio_sockets_on_reactor(log: &str) {
    for line in [
        "stdin is a stream socket, used on the reactor",
        "stdout is a stream socket, written straight",
    ] {
        assert!(log.contains(line), "no {line:?} in wrap's log:\n{log}");
    }
}

/// A raw JSON-RPC client of `mcp-supervisor ARGS` over its stdio: requests and their answers as
/// JSON values, the notifications it saw kept. Every wait is bounded by [`STDIO_LIMIT`]; a
/// server's request to the client is refused with a JSON-RPC error.
pub struct StdioClient {
    child: tokio::process::Child,
    stdin: Option<tokio::process::ChildStdin>,
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
    next: u64,
    pub notifications: Vec<Value>,
}

/// How long a [`StdioClient`] waits for any one answer.
pub const STDIO_LIMIT: Duration = Duration::from_secs(30);

impl StdioClient {
    /// Start `mcp-supervisor ARGS` and do the handshake (protocol 2025-11-25).
    pub async fn start(args: &[&str]) -> Self {
        use tokio::io::AsyncBufReadExt;
        let mut child = tokio::process::Command::new(supervisor_bin())
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn mcp-supervisor");
        let stdin = child.stdin.take();
        let lines = tokio::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
        let mut client = Self {
            child,
            stdin,
            lines,
            next: 1,
            notifications: Vec::new(),
        };
        let init = client
            .request(
                "initialize",
                serde_json::json!({
                    "protocolVersion": "2025-11-25",
                    "capabilities": {},
                    "clientInfo": { "name": "stdio-test", "version": "1.0.0" },
                }),
            )
            .await;
        assert!(init.get("result").is_some(), "initialize: {init}");
        client
            .write(&serde_json::json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }))
            .await;
        client
    }

    async fn write(&mut self, message: &Value) {
        use tokio::io::AsyncWriteExt;
        let mut line = message.to_string();
        line.push('\n');
        let stdin = self.stdin.as_mut().expect("stdin is open");
        stdin.write_all(line.as_bytes()).await.expect("write");
        stdin.flush().await.expect("flush");
    }

    /// Send a request; its whole answer (`result` or `error`).
    pub async fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next;
        self.next += 1;
        self.write(
            &serde_json::json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }),
        )
        .await;
        tokio::time::timeout(STDIO_LIMIT, self.answer_to(id))
            .await
            .unwrap_or_else(|_| panic!("no answer to {method} within {STDIO_LIMIT:?}"))
    }

    async fn answer_to(&mut self, id: u64) -> Value {
        loop {
            let line = self
                .lines
                .next_line()
                .await
                .expect("read")
                .expect("the proxy closed its stdout");
            let message: Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("not JSON on stdout ({e}): {line}"));
            match (message.get("method"), message.get("id")) {
                (Some(_), Some(asked)) => {
                    let refusal = serde_json::json!({ "jsonrpc": "2.0", "id": asked,
                        "error": { "code": -32601, "message": "this test client answers nothing" } });
                    self.write(&refusal).await;
                }
                (Some(_), None) => self.notifications.push(message),
                (None, Some(got)) if *got == serde_json::json!(id) => return message,
                _ => {}
            }
        }
    }

    /// Wait (bounded) for a notification with `method`, reading what comes meanwhile.
    pub async fn notification(&mut self, method: &str) -> Value {
        let wait = async {
            loop {
                if let Some(i) = self
                    .notifications
                    .iter()
                    .position(|n| n["method"] == method)
                {
                    return self.notifications.remove(i);
                }
                // A ping answers at once; any notification before it is kept.
                self.request("ping", serde_json::json!({})).await;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        };
        tokio::time::timeout(STDIO_LIMIT, wait)
            .await
            .unwrap_or_else(|_| panic!("no {method} within {STDIO_LIMIT:?}"))
    }

    /// End stdin and wait (bounded) for the proxy to stop its servers and exit.
    pub async fn close(mut self) {
        self.stdin = None;
        let exited = tokio::time::timeout(STDIO_LIMIT, self.child.wait()).await;
        assert!(exited.is_ok(), "the proxy did not exit after stdin closed");
    }
}

/// POST a 2025-06-18 `initialize` to `url` (with a bearer `token` when given), declaring
/// `capabilities`, as client `name`; checks it was accepted and returns the response (its body
/// unread) and the session id it gave.
pub async fn post_initialize(
    client: &reqwest::Client,
    url: &str,
    token: Option<&str>,
    capabilities: Value,
    name: &str,
) -> (reqwest::Response, String) {
    let mut request = client
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request
        .json(&serde_json::json!({
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": capabilities,
                "clientInfo": { "name": name, "version": "0" }
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
    (response, id)
}

/// The JSON-RPC message of a JSON body or of an SSE body's last event.
pub fn answer_of(body: &str) -> Value {
    if let Ok(value) = serde_json::from_str(body) {
        return value;
    }
    body.lines()
        .rev()
        .filter_map(|l| l.strip_prefix("data:"))
        .find_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .unwrap_or_else(|| panic!("no JSON-RPC message in: {body}"))
}
