//! A client of `mcp-supervisor` over stdio for end-to-end tests: the proxy as a child process,
//! spoken to line by line, every wait bounded; stopped by closing its stdin, then SIGKILL by pid.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use super::{kill9, supervisor_bin};

/// The bound of any wait for an answer or a notification.
pub const ANSWER_LIMIT: Duration = Duration::from_secs(20);

/// `mcp-supervisor ARGS` spoken to over stdio, line by line.
pub struct Proxy {
    pub child: Child,
    stdin: Option<ChildStdin>,
    lines: Lines<BufReader<ChildStdout>>,
    next: u64,
    /// Every notification seen so far, by method.
    pub notifications: Vec<String>,
}

impl Proxy {
    pub fn start(args: &[String]) -> Self {
        Self::spawn(args, Stdio::null())
    }

    /// As [`Proxy::start`], its stderr (the log, at `warn`) written to `log`.
    pub fn start_logged(args: &[String], log: &Path) -> Self {
        let file = std::fs::File::create(log).expect("create the log file");
        Self::spawn(args, Stdio::from(file))
    }

    fn spawn(args: &[String], stderr: Stdio) -> Self {
        let mut child = Command::new(supervisor_bin())
            .args(args)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("spawn mcp-supervisor");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("stdout is piped");
        Self {
            child,
            stdin,
            lines: BufReader::new(stdout).lines(),
            next: 1,
            notifications: Vec::new(),
        }
    }

    pub async fn send(&mut self, message: Value) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        let line = format!("{message}\n");
        stdin.write_all(line.as_bytes()).await.expect("write");
        stdin.flush().await.expect("flush");
    }

    /// `text` as it is (one or more whole lines), in one write.
    pub async fn send_raw(&mut self, text: &str) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        stdin.write_all(text.as_bytes()).await.expect("write");
        stdin.flush().await.expect("flush");
    }

    /// One line from the proxy, bounded.
    pub async fn read(&mut self) -> Value {
        let line = tokio::time::timeout(ANSWER_LIMIT, self.lines.next_line())
            .await
            .expect("the proxy answered in time")
            .expect("read")
            .expect("the proxy's stdout is open");
        serde_json::from_str(&line).expect("a JSON-RPC line")
    }

    /// A request, answered: its `result` (or the whole answer when it is an error).
    pub async fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next;
        self.next += 1;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        loop {
            let message = self.read().await;
            if message["id"] == id {
                return match message.get("result") {
                    Some(result) => result.clone(),
                    None => message,
                };
            }
            if let Some(method) = message["method"].as_str() {
                self.notifications.push(method.to_string());
            }
        }
    }

    /// Read until a notification of `method` has been seen (bounded); returns how many.
    pub async fn until_notified(&mut self, method: &str) -> usize {
        while !self.notifications.iter().any(|m| m == method) {
            let message = self.read().await;
            if let Some(m) = message["method"].as_str() {
                self.notifications.push(m.to_string());
            }
        }
        self.count(method)
    }

    pub fn count(&self, method: &str) -> usize {
        self.notifications.iter().filter(|m| *m == method).count()
    }

    pub async fn initialize(&mut self) -> Value {
        let result = self
            .request(
                "initialize",
                json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "catalog-test", "version": "1"}}),
            )
            .await;
        self.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        result
    }

    pub async fn tool_names(&mut self) -> Vec<String> {
        let result = self.request("tools/list", json!({})).await;
        let mut names: Vec<String> = result["tools"]
            .as_array()
            .expect("a tools array")
            .iter()
            .filter_map(|t| t["name"].as_str().map(str::to_string))
            .collect();
        names.sort();
        names
    }

    /// Close stdin (the proxy stops its servers and exits), then SIGKILL by pid if it has not.
    pub async fn stop(mut self) {
        drop(self.stdin.take());
        let exited = tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await;
        if exited.is_err() {
            if let Some(pid) = self.child.id() {
                kill9(pid);
            }
            let _ = self.child.wait().await;
            panic!("the proxy did not exit within 10 s of the end of its stdin");
        }
    }
}

/// Wait (bounded) until the log holds every one of `needles`; returns it.
pub async fn log_until(log: &Path, needles: &[&str]) -> String {
    let deadline = std::time::Instant::now() + ANSWER_LIMIT;
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if needles.iter().all(|n| text.contains(n)) {
            return text;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the log never said {needles:?}; it says:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `serve --config CONFIG --state-dir STATE [--admin 127.0.0.1:PORT]`.
pub fn serve_args(config: &Path, state: &Path, admin: Option<u16>) -> Vec<String> {
    let mut list = args(&["serve", "--config", &path_str(config)]);
    list.extend(args(&["--state-dir", &path_str(state)]));
    if let Some(port) = admin {
        list.extend(args(&["--admin", &format!("127.0.0.1:{port}")]));
    }
    list
}

/// `wrap --on-demand --idle-timeout-ms IDLE_MS [EXTRA…] --admin 127.0.0.1:PORT --state-dir STATE
/// -- SERVER…`.
pub fn wrap_on_demand_args(
    port: u16,
    state: &Path,
    idle_ms: u64,
    extra: &[&str],
    server: &[String],
) -> Vec<String> {
    let mut list = args(&[
        "wrap",
        "--on-demand",
        "--idle-timeout-ms",
        &idle_ms.to_string(),
    ]);
    list.extend(args(extra));
    list.extend(args(&["--admin", &format!("127.0.0.1:{port}")]));
    list.extend(args(&["--state-dir", &path_str(state), "--"]));
    list.extend(server.iter().cloned());
    list
}

pub fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

pub fn path_str(path: &Path) -> String {
    path.to_str().expect("a UTF-8 path").to_string()
}
