//! Helpers shared by the integration tests: spawn the built binary and talk raw JSON-RPC lines.

#![allow(dead_code, reason = "each test file uses a different subset")]

use std::{
    path::PathBuf,
    process::Stdio,
    sync::atomic::{AtomicU32, Ordering},
    time::Duration,
};

use serde_json::{Value, json};
use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines},
    process::{Child, ChildStdin, ChildStdout, Command},
};

pub const BIN: &str = env!("CARGO_BIN_EXE_mcp-fault-server");
/// Upper bound for any single wait in these tests.
pub const STEP: Duration = Duration::from_secs(10);

/// A fresh, empty directory under the system temp dir.
pub fn temp_dir(tag: &str) -> PathBuf {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "mcp-fault-server-test-{}-{tag}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create temp dir");
    dir
}

/// The fault server on stdio. Killed when dropped.
pub struct StdioServer {
    pub child: Child,
    stdin: Option<ChildStdin>,
    stdout: Lines<BufReader<ChildStdout>>,
}

impl StdioServer {
    pub fn spawn(args: &[&str]) -> Self {
        let mut child = Command::new(BIN)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn mcp-fault-server");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("stdout")).lines();
        Self {
            child,
            stdin,
            stdout,
        }
    }

    /// Spawn and complete the legacy initialize handshake.
    pub async fn start(args: &[&str]) -> Self {
        let mut server = Self::spawn(args);
        server.initialize().await;
        server
    }

    pub async fn send(&mut self, message: Value) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        let mut line = message.to_string();
        line.push('\n');
        stdin.write_all(line.as_bytes()).await.expect("write stdin");
        stdin.flush().await.expect("flush stdin");
    }

    /// Next stdout line, raw.
    pub async fn next_line(&mut self) -> Option<String> {
        tokio::time::timeout(STEP, self.stdout.next_line())
            .await
            .expect("timed out waiting for stdout")
            .expect("read stdout")
    }

    /// Next JSON-RPC message (panics on a non-JSON line).
    pub async fn next_message(&mut self) -> Option<Value> {
        let line = self.next_line().await?;
        Some(serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
    }

    /// Read messages until the response with this id; returns it and what came before it.
    pub async fn response(&mut self, id: u64) -> (Value, Vec<Value>) {
        let mut before = Vec::new();
        loop {
            let message = self
                .next_message()
                .await
                .unwrap_or_else(|| panic!("stdout closed before response {id}"));
            if message.get("id") == Some(&json!(id)) && message.get("method").is_none() {
                return (message, before);
            }
            before.push(message);
        }
    }

    pub async fn request(&mut self, id: u64, method: &str, params: Value) -> Value {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        self.response(id).await.0
    }

    pub async fn call(&mut self, id: u64, tool: &str, arguments: Value) -> Value {
        self.request(
            id,
            "tools/call",
            json!({"name": tool, "arguments": arguments}),
        )
        .await
    }

    pub async fn initialize(&mut self) {
        let response = self
            .request(
                0,
                "initialize",
                json!({
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "fault-server-test", "version": "0"}
                }),
            )
            .await;
        assert_eq!(
            response["result"]["serverInfo"]["name"], "mcp-fault-server",
            "{response}"
        );
        self.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
    }

    /// Wait for the process to exit and return its code.
    pub async fn exit_code(&mut self) -> Option<i32> {
        let status = tokio::time::timeout(STEP, self.child.wait())
            .await
            .expect("timed out waiting for exit")
            .expect("wait");
        status.code()
    }

    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }
}

/// The text of the first content block of a tools/call response.
pub fn result_text(response: &Value) -> &str {
    response["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text in {response}"))
}

pub fn is_error(response: &Value) -> bool {
    response["result"]["isError"] == json!(true)
}
