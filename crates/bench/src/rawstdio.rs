//! A minimal JSON-RPC-over-stdio client: lines written to a child's stdin and read from its
//! stdout, answers matched by id, no MCP library. It is the baseline for the targets driven with
//! plain POSTs (`mcp_supervisor_testkit::rawhttp`), so that "added" compares like with like: the
//! same kind of lean client on both sides, and the hop is all that differs.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{ChildStdin, ChildStdout};
use tokio::sync::oneshot;

const PROTOCOL: &str = "2025-06-18";

/// Waiters for answers, by request id.
pub type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Value>>>>;

pub struct RawStdio {
    stdin: tokio::sync::Mutex<ChildStdin>,
    pending: Pending,
    next_id: AtomicU64,
    limit: Duration,
    reader: tokio::task::JoinHandle<()>,
}

impl RawStdio {
    /// Start reading `stdout`, then initialize + notifications/initialized.
    pub async fn connect(stdout: ChildStdout, stdin: ChildStdin, limit: Duration) -> Result<Self> {
        let pending: Pending = Arc::default();
        let reader = tokio::spawn(read_answers(stdout, pending.clone()));
        let client = Self {
            stdin: tokio::sync::Mutex::new(stdin),
            pending,
            next_id: AtomicU64::new(1),
            limit,
            reader,
        };
        let params = json!({
            "protocolVersion": PROTOCOL,
            "capabilities": {},
            "clientInfo": { "name": "mcp-supervisor-bench", "version": env!("CARGO_PKG_VERSION") }
        });
        client.request("initialize", params).await?;
        client
            .write(&json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }))
            .await?;
        Ok(client)
    }

    async fn write(&self, message: &Value) -> Result<()> {
        let mut line = serde_json::to_vec(message)?;
        line.push(b'\n');
        let mut stdin = self.stdin.lock().await;
        stdin
            .write_all(&line)
            .await
            .context("writing to the server")?;
        stdin.flush().await.context("writing to the server")
    }

    /// One request; the JSON-RPC `result` (an error answer is an error).
    pub async fn request(&self, method: &str, params: Value) -> Result<Value> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.pending
            .lock()
            .map_err(|_| anyhow!("pending map poisoned"))?
            .insert(id, tx);
        let message = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
        if let Err(e) = self.write(&message).await {
            self.forget(id);
            return Err(e);
        }
        let answer = match tokio::time::timeout(self.limit, rx).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => bail!("the server closed its stdout before answering {method}"),
            Err(_) => {
                self.forget(id);
                bail!("no answer to {method} within {:?}", self.limit)
            }
        };
        match answer {
            Value::Object(mut map) => match map.remove("result") {
                Some(result) => Ok(result),
                None => bail!("{method} failed: {}", Value::Object(map)),
            },
            other => bail!("{method}: not an object: {other}"),
        }
    }

    fn forget(&self, id: u64) {
        if let Ok(mut pending) = self.pending.lock() {
            pending.remove(&id);
        }
    }
}

impl Drop for RawStdio {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// Answers by id to their waiters; notifications and server requests are ignored (the fault
/// server sends none for `echo`). Ends with the child's stdout.
pub async fn read_answers(stdout: ChildStdout, pending: Pending) {
    let mut lines = BufReader::new(stdout).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let Ok(message) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        if message.get("method").is_some() {
            continue;
        }
        let Some(id) = message.get("id").and_then(Value::as_u64) else {
            continue;
        };
        let waiter = pending.lock().ok().and_then(|mut p| p.remove(&id));
        if let Some(waiter) = waiter {
            let _ = waiter.send(message);
        }
    }
    // Dropping the senders tells every waiter the stream ended.
    if let Ok(mut pending) = pending.lock() {
        pending.clear();
    }
}
