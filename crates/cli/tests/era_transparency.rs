//! Losslessness for clients of protocol 2026-07-28: raw JSON-RPC against a server of that era
//! (`tests/py/raw_stateless_server.py`, whose answers carry members no SDK knows) directly and
//! through `wrap`, whose answers to `server/discover`, `tools/list` and `tools/call` must be
//! equal as JSON; and `serve`, whose aggregate tool list must keep a tool's unknown members.
//! It owns these transcripts; it must never compare less than whole answers.

mod support;

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{Value, json};
use support::{supervisor_bin, temp_dir, write_config};

/// How long one answer may take (the first waits for the server to start).
const ANSWER_LIMIT: Duration = Duration::from_secs(30);

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/py/raw_stateless_server.py")
}

fn python() -> PathBuf {
    mcp_supervisor_testkit::python("import json")
}

fn identity() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": { "name": "era-test", "version": "1.0.0" },
        "io.modelcontextprotocol/clientCapabilities": { "x-client-capability": {} },
    })
}

/// One peer over stdio: lines in, lines out; killed on drop.
struct Peer {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
    next: u64,
    /// The notifications seen while waiting for answers.
    seen: Vec<Value>,
}

impl Peer {
    fn spawn(mut cmd: Command) -> Self {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the peer");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Self {
            child,
            stdin,
            lines,
            next: 1,
            seen: Vec::new(),
        }
    }

    /// A request of this era (its identity in `_meta`); the whole answer.
    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.open(method, params);
        loop {
            let line = self
                .lines
                .recv_timeout(ANSWER_LIMIT)
                .unwrap_or_else(|_| panic!("no answer to {method} within {ANSWER_LIMIT:?}"));
            let answer: Value = serde_json::from_str(&line).expect("a JSON line");
            if answer["id"] == json!(id) {
                return answer;
            }
            if answer.get("id").is_none() {
                self.seen.push(answer);
            }
        }
    }

    /// A request of this era whose answer is not waited for (it stays open); its id.
    fn open(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next;
        self.next += 1;
        let mut params = params;
        params["_meta"] = identity();
        let message = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
        writeln!(self.stdin, "{message}").expect("write a request");
        self.stdin.flush().expect("flush");
        id
    }

    /// The first notification of `method` (seen already, or the next to come), bounded.
    fn notification(&mut self, method: &str) -> Value {
        loop {
            if let Some(at) = self.seen.iter().position(|n| n["method"] == method) {
                return self.seen.remove(at);
            }
            let line = self
                .lines
                .recv_timeout(ANSWER_LIMIT)
                .unwrap_or_else(|_| panic!("no {method} within {ANSWER_LIMIT:?}"));
            let message: Value = serde_json::from_str(&line).expect("a JSON line");
            if message.get("id").is_none() {
                self.seen.push(message);
            }
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn direct() -> Command {
    let mut cmd = Command::new(python());
    cmd.arg(fixture());
    cmd
}

fn wrapped() -> Command {
    let mut cmd = Command::new(supervisor_bin());
    cmd.args(["wrap", "--"]).arg(python()).arg(fixture());
    cmd
}

/// The transcript every peer is asked: discovery, the list, a call.
fn transcript(peer: &mut Peer) -> Vec<(String, Value)> {
    [
        ("server/discover", json!({})),
        ("tools/list", json!({})),
        (
            "tools/call",
            json!({ "name": "echo", "arguments": { "text": "whole" } }),
        ),
    ]
    .into_iter()
    .map(|(method, params)| (method.to_string(), peer.request(method, params)))
    .collect()
}

#[test]
fn wrap_on_stdio_relays_a_stateless_servers_answers_whole() {
    let direct = transcript(&mut Peer::spawn(direct()));
    // The fixture's unknown members are there to be lost.
    let discover = &direct[0].1["result"];
    assert_eq!(discover["x-unknown-discover-key"], json!({ "a": 1 }));
    assert_eq!(
        direct[1].1["result"]["tools"][0]["x-unknown-tool-key"]["nested"][1],
        2.5
    );
    let wrapped = transcript(&mut Peer::spawn(wrapped()));
    for ((method, direct), (_, wrapped)) in direct.iter().zip(&wrapped) {
        assert_eq!(
            direct["result"], wrapped["result"],
            "{method}: direct and through wrap differ\ndirect: {direct}\nwrap:   {wrapped}"
        );
    }
}

#[test]
fn serve_keeps_a_tools_unknown_members_for_a_stateless_client() {
    let dir = temp_dir("era-serve");
    let config = dir.join("servers.json");
    write_config(
        &config,
        json!({ "raw": { "command": python(), "args": [fixture()] } }),
    );
    let mut cmd = Command::new(supervisor_bin());
    cmd.args(["serve", "--config"]).arg(&config);
    let mut serve = Peer::spawn(cmd);
    let discover = serve.request("server/discover", json!({}));
    assert_eq!(discover["result"]["resultType"], "complete", "{discover}");
    assert_eq!(
        discover["result"]["supportedVersions"],
        json!(["2026-07-28"])
    );
    let list = serve.request("tools/list", json!({}));
    let tools = list["result"]["tools"].as_array().expect("a tool list");
    let echo = tools
        .iter()
        .find(|t| t["name"] == "raw__echo")
        .unwrap_or_else(|| panic!("no raw__echo in {list}"));
    assert_eq!(
        echo["x-unknown-tool-key"],
        json!({ "nested": [1, 2.5, "three"] })
    );
    assert_eq!(echo["execution"], json!({ "taskSupport": "forbidden" }));
    assert_eq!(list["result"]["resultType"], "complete");
    let call = serve.request(
        "tools/call",
        json!({ "name": "raw__echo", "arguments": { "text": "hi" } }),
    );
    assert_eq!(call["result"]["x-unknown-call-key"], "kept", "{call}");
    assert_eq!(call["result"]["content"][0]["x-unknown-content-key"], 1);
    assert_eq!(call["result"]["resultType"], "complete");
}

/// The same transcript as raw POSTs of that era to `wrap --http` (no session; the headers the
/// era asks for).
async fn http_transcript(port: u16) -> Vec<(String, Value)> {
    let client = reqwest::Client::new();
    let url = format!("http://127.0.0.1:{port}/mcp");
    let mut out = Vec::new();
    for (id, (method, mut params)) in [
        ("server/discover", json!({})),
        ("tools/list", json!({})),
        (
            "tools/call",
            json!({ "name": "echo", "arguments": { "text": "whole" } }),
        ),
    ]
    .into_iter()
    .enumerate()
    {
        params["_meta"] = identity();
        let body = json!({ "jsonrpc": "2.0", "id": id + 1, "method": method, "params": params });
        let mut request = client
            .post(&url)
            .header("Accept", "application/json, text/event-stream")
            .header("Content-Type", "application/json")
            .header("MCP-Protocol-Version", "2026-07-28")
            .header("Mcp-Method", method);
        if method == "tools/call" {
            request = request.header("Mcp-Name", "echo");
        }
        let response = tokio::time::timeout(ANSWER_LIMIT, request.json(&body).send())
            .await
            .unwrap_or_else(|_| panic!("no answer to {method}"))
            .expect("POST");
        assert_eq!(response.status(), 200, "{method}");
        // JSON, or an event stream whose message is the answer.
        let text = response.text().await.expect("a body");
        let answer: Value = serde_json::from_str(&text)
            .ok()
            .or_else(|| {
                text.lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
                    .find(|m| m.get("id").is_some())
            })
            .unwrap_or_else(|| panic!("{method}: no answer in {text}"));
        out.push((method.to_string(), answer));
    }
    out
}

#[tokio::test]
async fn wrap_on_http_relays_a_stateless_servers_answers_whole() {
    let direct = transcript(&mut Peer::spawn(direct()));
    let port = support::free_port();
    let addr = format!("127.0.0.1:{port}");
    let python = python();
    let fixture = fixture();
    let (python, fixture) = (
        python.to_str().expect("utf-8"),
        fixture.to_str().expect("utf-8"),
    );
    let _wrap =
        support::Running::start(&["wrap", "--http", &addr, "--", python, fixture], port, &[]).await;
    let wrapped = http_transcript(port).await;
    for ((method, direct), (_, wrapped)) in direct.iter().zip(&wrapped) {
        assert_eq!(
            direct["result"], wrapped["result"],
            "{method}: direct and through wrap --http differ\ndirect: {direct}\nwrap:   {wrapped}"
        );
    }
}

#[test]
fn wrap_relays_a_stateless_servers_own_list_changes() {
    // The fault server over stdio speaks 2026-07-28 to this client (rmcp's stateless era): its
    // `set_tools` tells its listeners that the list changed, and only on their listen stream.
    let mut cmd = Command::new(supervisor_bin());
    cmd.args(["wrap", "--no-catalog", "--"])
        .arg(support::fault_bin());
    let mut client = Peer::spawn(cmd);
    let subscription = client.open(
        "subscriptions/listen",
        json!({ "notifications": { "toolsListChanged": true } }),
    );
    let ack = client.notification("notifications/subscriptions/acknowledged");
    assert_eq!(
        ack["params"]["notifications"]["toolsListChanged"], true,
        "{ack}"
    );
    let changed = client.request(
        "tools/call",
        json!({ "name": "set_tools", "arguments": { "tools": ["added_later"] } }),
    );
    assert!(changed.get("result").is_some(), "{changed}");
    // The server said so on wrap's own listen upstream; the client hears it on its own.
    let told = client.notification("notifications/tools/list_changed");
    assert_eq!(
        told["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        json!(subscription),
        "{told}"
    );
    let listed = client.request("tools/list", json!({}));
    assert!(
        listed["result"]["tools"]
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t["name"] == "added_later")),
        "{listed}"
    );
}
