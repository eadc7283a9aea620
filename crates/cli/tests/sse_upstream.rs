//! `wrap --sse` in front of the official Python SDK's HTTP+SSE server (protocol 2024-11-05),
//! end to end over the stdio face: a call goes through; the server is killed with a
//! non-idempotent call in flight and started again on the same port; the call in flight fails as
//! "may have run" and is never run twice, and the next call heals on a new stream, a new
//! endpoint and the same handshake.
//!
//! `serve` and `call` take the same server from a config (`"type": "sse"`).
//!
//! Every wait is bounded; the Python server counts its own runs in a file.

mod interop_support;
mod support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use interop_support::{Proc, python};
use serde_json::{Value, json};
use support::{
    free_port, kill9, serve_config, state_is, status_until, supervisor_bin, temp_dir, write_config,
};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

/// The bound on one answer (a call that waits for the healed server included).
const ANSWER_LIMIT: Duration = Duration::from_secs(45);
/// How long the Python server may take to listen.
const LISTEN_LIMIT: Duration = Duration::from_secs(30);

fn sse_server(port: u16, runs: &Path, dir: &Path, what: &str) -> Proc {
    let mut cmd = Command::new(python());
    cmd.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/sse_server.py"))
        .arg(port.to_string())
        .arg(runs);
    let mut server = Proc::spawn(what, cmd, dir);
    server.wait_listening(port, LISTEN_LIMIT);
    server
}

/// The proxy over its stdio face: JSON-RPC lines in and out.
struct Stdio_ {
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    next: u64,
}

impl Stdio_ {
    fn wrap(args: &[&str], stderr: &Path) -> Self {
        let mut child = tokio::process::Command::new(supervisor_bin())
            .args(args)
            .env("MCP_SUPERVISOR_LOG", "info")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(stderr).expect("create the proxy's stderr log"))
            .kill_on_drop(true)
            .spawn()
            .expect("spawn mcp-supervisor wrap");
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        Self {
            child,
            stdin,
            lines: BufReader::new(stdout).lines(),
            next: 1,
        }
    }

    async fn write(&mut self, message: &Value) {
        let mut line = message.to_string();
        line.push('\n');
        self.stdin
            .write_all(line.as_bytes())
            .await
            .expect("write to the proxy");
        self.stdin.flush().await.expect("flush to the proxy");
    }

    /// Send a request without waiting; its id.
    async fn start(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next;
        self.next += 1;
        self.write(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }))
            .await;
        id
    }

    /// The answer to `id`, skipping notifications and other answers.
    async fn answer(&mut self, id: u64) -> Value {
        let read = async {
            loop {
                let line = self
                    .lines
                    .next_line()
                    .await
                    .expect("read the proxy's stdout")
                    .expect("the proxy closed its stdout");
                let message: Value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("not JSON on stdout ({e}): {line}"));
                if message.get("method").is_none() && message["id"] == json!(id) {
                    return message;
                }
            }
        };
        tokio::time::timeout(ANSWER_LIMIT, read)
            .await
            .unwrap_or_else(|_| panic!("no answer to request {id} within {ANSWER_LIMIT:?}"))
    }

    async fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.start(method, params).await;
        self.answer(id).await
    }

    async fn call(&mut self, tool: &str, arguments: Value) -> Value {
        self.request(
            "tools/call",
            json!({ "name": tool, "arguments": arguments }),
        )
        .await
    }
}

fn text_of(answer: &Value) -> String {
    answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn runs(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// Wait (bounded, polling) until `path` holds `line`.
async fn until_run(path: &Path, line: &str) {
    let deadline = tokio::time::Instant::now() + ANSWER_LIMIT;
    while !runs(path).iter().any(|l| l == line) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{line} did not run within {ANSWER_LIMIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn wrap_sse_heals_after_the_python_server_restarts_and_never_runs_a_call_twice() {
    let dir = temp_dir("sse-upstream");
    let port = free_port();
    let runs_file = dir.join("runs.txt");
    let mut first = sse_server(port, &runs_file, &dir, "python sse server 1");
    let url = format!("http://127.0.0.1:{port}/sse");
    let proxy_log = dir.join("proxy.stderr");
    let mut proxy = Stdio_::wrap(
        &[
            "wrap",
            "--sse",
            &url,
            "--initial-delay-ms",
            "50",
            "--max-delay-ms",
            "400",
            "--max-attempts",
            "200",
            "--health-interval-ms",
            "0",
        ],
        &proxy_log,
    );
    let logs = || std::fs::read_to_string(&proxy_log).unwrap_or_default();

    let init = proxy
        .request(
            "initialize",
            json!({
                "protocolVersion": "2024-11-05",
                "capabilities": {},
                "clientInfo": { "name": "sse-upstream-test", "version": "0" }
            }),
        )
        .await;
    assert_eq!(
        init["result"]["serverInfo"]["name"], "py-sse",
        "the Python server's own identity comes through: {init}"
    );
    proxy
        .write(&json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }))
        .await;
    let tools = proxy.request("tools/list", json!({})).await;
    let mut names: Vec<&str> = tools["result"]["tools"]
        .as_array()
        .map(|t| t.iter().filter_map(|t| t["name"].as_str()).collect())
        .unwrap_or_default();
    names.sort_unstable();
    assert_eq!(names, ["append", "echo"], "{tools}");

    let before = proxy.call("echo", json!({ "message": "before" })).await;
    assert_eq!(text_of(&before), "before", "{before}");
    let once = proxy.call("append", json!({ "token": "first" })).await;
    assert_eq!(text_of(&once), "first", "{once}");

    // A non-idempotent call in flight when the server is killed. It holds for 8 s, so that a
    // replay (which must not happen) would answer, and fail the assertions below, in time.
    let in_flight = proxy
        .start(
            "tools/call",
            json!({ "name": "append", "arguments": { "token": "in-flight", "hold": 8 } }),
        )
        .await;
    until_run(&runs_file, "in-flight").await;
    kill9(first.pid());
    first.stop();
    // Started again on the same port (the call in flight waits for the reconnect to learn
    // whether the connection was restored).
    let second = sse_server(port, &runs_file, &dir, "python sse server 2");
    let lost = proxy.answer(in_flight).await;
    let lost_text = text_of(&lost);
    assert_eq!(
        lost["result"]["isError"],
        json!(true),
        "the call in flight fails: {lost}"
    );
    assert!(
        lost_text.contains("may have run") && lost_text.contains("not sent again"),
        "it says the outcome is unknown and that it was not repeated: {lost_text}"
    );

    // The next call heals: a new stream, a new endpoint, the same handshake.
    let after = proxy.call("echo", json!({ "message": "after" })).await;
    assert_eq!(
        text_of(&after),
        "after",
        "the call after the restart is answered: {after}\n{}",
        logs()
    );
    let again = proxy.call("append", json!({ "token": "second" })).await;
    assert_eq!(text_of(&again), "second", "{again}");
    assert_eq!(
        runs(&runs_file),
        ["first", "in-flight", "second"],
        "each run exactly once: the call in flight at the crash was never sent again"
    );
    assert!(
        logs().contains("connection lost"),
        "the lost stream was seen as a lost connection:\n{}",
        logs()
    );

    // End of stdin stops the proxy.
    drop(proxy.stdin);
    let exited = tokio::time::timeout(Duration::from_secs(10), proxy.child.wait()).await;
    assert!(
        matches!(exited, Ok(Ok(status)) if status.success()),
        "the proxy exits cleanly at the end of stdin: {exited:?}\n{}",
        logs()
    );
    drop(second);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn serve_and_call_take_an_sse_server_from_the_config() {
    let dir = temp_dir("sse-config");
    let port = free_port();
    let runs_file = dir.join("runs.txt");
    let server = sse_server(port, &runs_file, &dir, "python sse server");
    let config = dir.join("servers.json");
    write_config(
        &config,
        json!({ "legacy": { "type": "sse", "url": format!("http://127.0.0.1:{port}/sse") } }),
    );

    let serve = serve_config(&config, "--admin").await;
    let status = status_until(&serve, LISTEN_LIMIT, |s| state_is(s, "legacy", "ready")).await;
    assert_eq!(
        status["servers"][0]["tools"],
        json!(2),
        "serve publishes the SSE server's two tools: {status}"
    );
    drop(serve);

    let call = tokio::time::timeout(
        ANSWER_LIMIT,
        tokio::process::Command::new(supervisor_bin())
            .args(["call", "--config"])
            .arg(&config)
            .args(["legacy__append", "--args", r#"{"token":"from-call"}"#])
            .stdin(Stdio::null())
            .output(),
    )
    .await
    .expect("call returns within the bound")
    .expect("run mcp-supervisor call");
    assert!(
        call.status.success(),
        "call succeeds: {}",
        String::from_utf8_lossy(&call.stderr)
    );
    assert!(String::from_utf8_lossy(&call.stdout).contains("from-call"));
    assert_eq!(runs(&runs_file), ["from-call"], "the tool ran once");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
