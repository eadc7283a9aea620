//! The front's example (`examples/stdio_host.rs`) serves a hub over stdio as its docs say: a
//! client lists the prefixed tools and calls one, the server is killed with SIGKILL and the next
//! call is answered by a fresh process, and the end of stdin stops it with no server left. It
//! runs the example's own binary, as a user would.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use mcp_supervisor_testkit::{alive, example_bin, fault_bin, gone_within, kill9, temp_dir};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{ChildStdin, ChildStdout};

/// The bound of every wait.
const LIMIT: Duration = Duration::from_secs(20);

struct Client {
    stdin: Option<ChildStdin>,
    lines: Lines<BufReader<ChildStdout>>,
    next: u64,
}

impl Client {
    async fn send(&mut self, message: Value) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        stdin
            .write_all(format!("{message}\n").as_bytes())
            .await
            .expect("write");
        stdin.flush().await.expect("flush");
    }

    /// Send a request and read lines (bounded) until its answer.
    async fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next;
        self.next += 1;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        let answer = tokio::time::timeout(LIMIT, async {
            while let Ok(Some(line)) = self.lines.next_line().await {
                let message: Value = serde_json::from_str(&line).expect("a JSON line on stdout");
                if message["id"] == json!(id) {
                    return Some(message);
                }
            }
            None
        })
        .await;
        match answer {
            Ok(Some(message)) => message,
            other => panic!("no answer to {method}: {other:?}"),
        }
    }
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

fn echo_text(answer: &Value) -> &str {
    answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
}

#[tokio::test]
async fn the_stdio_host_example_serves_heals_and_stops_cleanly() {
    let dir = temp_dir("stdio-host-example");
    let pid_file = dir.join("fault.pid");
    let config = dir.join("servers.json");
    let servers = json!({ "mcpServers": { "fault": {
        "command": fault_bin(),
        "args": ["--pid-file", pid_file],
        "reconnect": { "initialDelayMs": 50 },
    }}});
    std::fs::write(&config, servers.to_string()).expect("write the config");

    let mut child = tokio::process::Command::new(example_bin("mcp-supervisor-front", "stdio_host"))
        .arg(&config)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn the example");
    let mut client = Client {
        stdin: child.stdin.take(),
        lines: BufReader::new(child.stdout.take().expect("stdout is piped")).lines(),
        next: 1,
    };

    let init = client
        .request(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "example-test", "version": "1"}}),
        )
        .await;
    assert!(
        init["result"]["capabilities"]["tools"].is_object(),
        "{init}"
    );
    client
        .send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;

    let listed = client.request("tools/list", json!({})).await;
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
    let first = client.request("tools/call", call("before")).await;
    assert_eq!(echo_text(&first), "before", "{first}");

    let killed = new_pid(&pid_file, None).await;
    kill9(killed);
    let healed = client.request("tools/call", call("after")).await;
    assert_eq!(echo_text(&healed), "after", "{healed}");
    let fresh = new_pid(&pid_file, Some(killed)).await;

    // The end of stdin stops the example, and its server with it.
    drop(client.stdin.take());
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
