//! `relay`: the cost floor of any extra hop in front of a stdio MCP server. HTTP `POST /mcp`
//! carries one JSON-RPC message; a request is written as one line to one stdio child (its id
//! replaced by the relay's own, so concurrent clients cannot collide) and the matching answer line
//! goes back as `application/json`. A notification or a response is written and answered 202. No
//! sessions, no SSE, no GET stream, no supervision, no MCP types: parse, swap the id, write, read,
//! swap back.
//!
//! It runs until SIGTERM/SIGINT, until its child exits, until `--max-secs`, or until its parent
//! dies (PR_SET_PDEATHSIG), and then kills its child.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::Value;
use tokio::io::AsyncWriteExt;
use tokio::process::ChildStdin;
use tokio::sync::oneshot;

/// How long one request waits for its answer line.
const ANSWER_LIMIT: Duration = Duration::from_secs(60);

struct Relay {
    stdin: tokio::sync::Mutex<ChildStdin>,
    pending: crate::rawstdio::Pending,
    next: AtomicU64,
}

impl Relay {
    async fn write(&self, message: &Value) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(message)?;
        line.push(b'\n');
        let mut stdin = self.stdin.lock().await;
        stdin.write_all(&line).await?;
        stdin.flush().await
    }
}

pub async fn run(listen: SocketAddr, command: &[String], max_secs: u64) -> Result<()> {
    if !listen.ip().is_loopback() {
        bail!("the relay listens on loopback only, not {listen}");
    }
    let (mut child, stdin, stdout) = crate::procs::relayed_child(command)?;
    let relay = Arc::new(Relay {
        stdin: tokio::sync::Mutex::new(stdin),
        pending: Default::default(),
        next: AtomicU64::new(1),
    });

    // Answers from the child: matched by id; anything else (notifications, requests) is dropped.
    let reader = crate::rawstdio::read_answers(stdout, relay.pending.clone());

    let app = Router::new()
        .route("/mcp", post(handle))
        .with_state(relay.clone());
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let outcome = tokio::select! {
        served = axum::serve(listener, app) => served.context("serving HTTP"),
        _ = reader => Err(anyhow::anyhow!("the child closed its stdout")),
        _ = term.recv() => Ok(()),
        _ = tokio::signal::ctrl_c() => Ok(()),
        _ = tokio::time::sleep(Duration::from_secs(max_secs)) => Ok(()),
    };
    let _ = child.start_kill();
    let _ = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
    outcome
}

async fn handle(State(relay): State<Arc<Relay>>, body: Bytes) -> Response {
    let Ok(mut message) = serde_json::from_slice::<Value>(&body) else {
        return (StatusCode::BAD_REQUEST, "not a JSON-RPC message").into_response();
    };
    let is_request = message.get("method").is_some() && message.get("id").is_some();
    if !is_request {
        return match relay.write(&message).await {
            Ok(()) => StatusCode::ACCEPTED.into_response(),
            Err(_) => StatusCode::BAD_GATEWAY.into_response(),
        };
    }
    let id = relay.next.fetch_add(1, Ordering::Relaxed);
    let original = std::mem::replace(&mut message["id"], Value::from(id));
    let (tx, rx) = oneshot::channel();
    if let Ok(mut pending) = relay.pending.lock() {
        pending.insert(id, tx);
    }
    if relay.write(&message).await.is_err() {
        if let Ok(mut pending) = relay.pending.lock() {
            pending.remove(&id);
        }
        return StatusCode::BAD_GATEWAY.into_response();
    }
    match tokio::time::timeout(ANSWER_LIMIT, rx).await {
        Ok(Ok(mut answer)) => {
            answer["id"] = original;
            match serde_json::to_vec(&answer) {
                Ok(bytes) => ([(header::CONTENT_TYPE, "application/json")], bytes).into_response(),
                Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
            }
        }
        _ => {
            if let Ok(mut pending) = relay.pending.lock() {
                pending.remove(&id);
            }
            StatusCode::GATEWAY_TIMEOUT.into_response()
        }
    }
}
