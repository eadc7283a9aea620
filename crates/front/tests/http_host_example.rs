//! The front's HTTP example (`examples/http_host.rs`) serves a hub over streamable HTTP as its
//! docs say: a client initializes a session, lists the prefixed tools and calls one; the server
//! is killed with SIGKILL and the next call is answered by a fresh process; a 2026-07-28 client
//! calls a tool without a session; the session ends with DELETE; and SIGTERM stops the example
//! with no server left. It runs the example's own binary, built with its feature, as a user
//! would, and talks to it as a plain HTTP client.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use mcp_supervisor_testkit::{alive, fault_bin, gone_within, kill9, temp_dir};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

/// The bound of every wait.
const LIMIT: Duration = Duration::from_secs(20);

const ACCEPT: &str = "application/json, text/event-stream";

/// The example's binary, built with the `http` feature it needs (`cargo test` builds it only
/// when that feature is on and no test is singled out; building it here keeps it fresh).
fn http_host_bin() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    // target/<profile>/deps/<test> → target/<profile>
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .map(PathBuf::from)
        .unwrap_or_default();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = std::process::Command::new(cargo);
    command.args([
        "build",
        "-p",
        "mcp-supervisor-front",
        "--features",
        "http",
        "--example",
        "http_host",
    ]);
    if profile_dir.file_name().is_some_and(|p| p == "release") {
        command.arg("--release");
    }
    let status = command.status();
    assert!(
        matches!(status, Ok(s) if s.success()),
        "building the example http_host failed: {status:?}"
    );
    let bin = profile_dir.join("examples").join("http_host");
    assert!(bin.exists(), "{} is missing", bin.display());
    bin
}

/// A plain HTTP client of one session (or none, for protocol 2026-07-28).
struct Client {
    http: reqwest::Client,
    url: String,
    session: Option<String>,
}

impl Client {
    /// POST `message` with `headers`; the status, the response's headers and its body.
    async fn post(
        &self,
        message: &Value,
        headers: &[(&str, &str)],
    ) -> (u16, reqwest::header::HeaderMap, String) {
        let mut request = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", ACCEPT)
            .body(message.to_string());
        if let Some(session) = &self.session {
            request = request
                .header("mcp-session-id", session)
                .header("mcp-protocol-version", "2025-11-25");
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = request.send().await.expect("POST /mcp");
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        (
            status,
            headers,
            response.text().await.expect("read the body"),
        )
    }

    /// A request of the session; its answer, from a JSON body or an event stream.
    async fn request(&self, id: u64, method: &str, params: Value) -> Value {
        let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let (status, _, body) = self.post(&message, &[]).await;
        assert_eq!(status, 200, "{method}: {body}");
        answer(&body, id)
    }
}

/// The JSON-RPC answer with `id` in a body, JSON or SSE (`data:` lines).
fn answer(body: &str, id: u64) -> Value {
    std::iter::once(body.trim())
        .chain(body.lines().filter_map(|l| l.strip_prefix("data:")))
        .filter_map(|text| serde_json::from_str::<Value>(text.trim()).ok())
        .find(|m| m["id"] == id && m.get("method").is_none())
        .unwrap_or_else(|| panic!("no answer with id {id} in: {body}"))
}

fn echo_text(answer: &Value) -> &str {
    answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
}

fn pid_in(file: &Path) -> Option<u32> {
    std::fs::read_to_string(file).ok()?.trim().parse().ok()
}

/// Wait (bounded) until `file` names a live process other than `not`.
async fn new_pid(file: &Path, not: Option<u32>) -> u32 {
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        if let Some(pid) = pid_in(file).filter(|p| Some(*p) != not && alive(*p)) {
            return pid;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no fresh server in {}",
            file.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn the_http_host_example_serves_sessions_and_sessionless_calls_heals_and_stops_cleanly() {
    let dir = temp_dir("http-host-example");
    let pid_file = dir.join("fault.pid");
    let config = dir.join("servers.json");
    let servers = json!({ "mcpServers": { "fault": {
        "command": fault_bin(),
        "args": ["--pid-file", pid_file],
        "reconnect": { "initialDelayMs": 50 },
    }}});
    std::fs::write(&config, servers.to_string()).expect("write the config");

    let mut child = tokio::process::Command::new(http_host_bin())
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn the example");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout is piped")).lines();
    let url = tokio::time::timeout(LIMIT, stdout.next_line())
        .await
        .expect("the example says its URL in time")
        .expect("read stdout")
        .expect("a URL line");
    assert!(
        url.starts_with("http://127.0.0.1:") && url.ends_with("/mcp"),
        "{url}"
    );
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(LIMIT)
        .build()
        .expect("an HTTP client");
    let mut client = Client {
        http,
        url,
        session: None,
    };

    // initialize opens a session.
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "example-test", "version": "1"}}});
    let (status, headers, body) = client.post(&init, &[]).await;
    assert_eq!(status, 200, "{body}");
    let init = answer(&body, 1);
    assert!(
        init["result"]["capabilities"]["tools"].is_object(),
        "{init}"
    );
    let session = headers
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .expect("a session id");
    client.session = Some(session.to_string());
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(client.post(&initialized, &[]).await.0, 202);

    // tools/list and tools/call on the session.
    let listed = client.request(2, "tools/list", json!({})).await;
    let names: Vec<&str> = listed["result"]["tools"]
        .as_array()
        .expect("a tools array")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    let echo = names
        .iter()
        .find(|n| n.starts_with("fault") && n.ends_with("echo"))
        .unwrap_or_else(|| panic!("no prefixed echo tool in {names:?}"))
        .to_string();
    let call = |message: &str| json!({"name": echo, "arguments": {"message": message}});
    let first = client.request(3, "tools/call", call("before")).await;
    assert_eq!(echo_text(&first), "before", "{first}");

    // The hub heals a killed server under the HTTP face too.
    let killed = new_pid(&pid_file, None).await;
    kill9(killed);
    let healed = client.request(4, "tools/call", call("after")).await;
    assert_eq!(echo_text(&healed), "after", "{healed}");
    let fresh = new_pid(&pid_file, Some(killed)).await;

    // A client of protocol 2026-07-28 calls without a session, its headers mirroring its body.
    let sessionless = Client {
        http: client.http.clone(),
        url: client.url.clone(),
        session: None,
    };
    let mut params = call("no session");
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}
    });
    let message = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": params});
    let era = [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", echo.as_str()),
    ];
    let (status, _, body) = sessionless.post(&message, &era).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(echo_text(&answer(&body, 5)), "no session", "{body}");
    // Its headers are checked against its body: a name that differs is refused.
    let (status, _, body) = sessionless
        .post(&message, &[era[0], era[1], ("mcp-name", "other")])
        .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(answer(&body, 5)["error"]["code"], -32020, "{body}");

    // DELETE ends the session: its id opens nothing any more.
    let deleted = client
        .http
        .delete(&client.url)
        .header("mcp-session-id", session)
        .send()
        .await
        .expect("DELETE /mcp");
    assert_eq!(deleted.status().as_u16(), 200);
    let (status, _, body) = client
        .post(
            &json!({"jsonrpc": "2.0", "id": 6, "method": "tools/list"}),
            &[],
        )
        .await;
    assert_eq!(status, 404, "{body}");

    // SIGTERM stops the example, and its server with it.
    let pid = child.id().expect("the example runs");
    kill(Pid::from_raw(pid as i32), Signal::SIGTERM).expect("SIGTERM the example");
    let status = tokio::time::timeout(LIMIT, child.wait()).await;
    assert!(
        matches!(status, Ok(Ok(s)) if s.success()),
        "the example did not exit cleanly: {status:?}"
    );
    assert!(
        gone_within(fresh, LIMIT).await,
        "server {fresh} outlived the example"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
