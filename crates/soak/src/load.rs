//! The load driver: a few MCP clients over streamable HTTP to the proxy, each sending calls with
//! unique ids one after another until the run ends.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{Peer, RoleClient, ServiceExt};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::{CLIENT_TIMEOUT, CallKind, CallRecord, categorize, ms_since};

/// A connected downstream MCP client.
pub type Client = RunningService<RoleClient, ()>;

/// How long a client may take to initialize with the proxy.
const CONNECT_LIMIT: Duration = Duration::from_secs(10);
/// Upper bound of calls per client, whatever the duration.
const MAX_CALLS_PER_CLIENT: u64 = 5_000_000;
/// Upper bound of (re)connects per client.
const MAX_CONNECTS: u32 = 1_000;

/// Open an MCP session with the proxy.
pub async fn connect(url: &str) -> Result<Client> {
    let transport = StreamableHttpClientTransport::from_uri(url.to_owned());
    tokio::time::timeout(CONNECT_LIMIT, ().serve(transport))
        .await
        .map_err(|_| anyhow!("initialize with {url} took over {CONNECT_LIMIT:?}"))?
        .with_context(|| format!("initialize with {url}"))
}

/// Close a client, bounded.
pub async fn close(client: Client) {
    let _ = tokio::time::timeout(Duration::from_secs(2), client.cancel()).await;
}

/// What one call came back with, seen from the client.
pub enum Outcome {
    /// A result without `isError`: its first text.
    Ok(String),
    /// A result with `isError: true`: its text (the proxy's errors come back this way).
    ToolError(String),
    /// The client's request failed (transport, JSON-RPC error): its message.
    ClientError(String),
    /// No answer within [`CLIENT_TIMEOUT`].
    ClientTimeout,
}

fn first_text(result: &rmcp::model::CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Call `tool` with `arguments` on `peer`, bounded by [`CLIENT_TIMEOUT`].
pub async fn call(peer: &Peer<RoleClient>, tool: &str, arguments: Value) -> Outcome {
    let params = CallToolRequestParams::new(tool.to_owned())
        .with_arguments(arguments.as_object().cloned().unwrap_or_default());
    match tokio::time::timeout(CLIENT_TIMEOUT, peer.call_tool(params)).await {
        Err(_) => Outcome::ClientTimeout,
        Ok(Err(error)) => Outcome::ClientError(error.to_string()),
        Ok(Ok(result)) if result.is_error == Some(true) => Outcome::ToolError(first_text(&result)),
        Ok(Ok(result)) => Outcome::Ok(first_text(&result)),
    }
}

/// Turn an outcome into a record; `expected` is the text a success must carry, if any.
#[allow(clippy::too_many_arguments)]
pub fn record(
    client: &str,
    kind: CallKind,
    server: &str,
    id: &str,
    start_ms: f64,
    end_ms: f64,
    outcome: &Outcome,
    expected: Option<&str>,
) -> CallRecord {
    let (ok, category, error) = match outcome {
        Outcome::Ok(text) => match expected {
            Some(want) if text != want => (
                false,
                "wrong_result".to_owned(),
                Some(format!("expected {want:?}, got {text:?}")),
            ),
            _ => (true, "ok".to_owned(), None),
        },
        Outcome::ToolError(text) => (false, categorize(text).to_owned(), Some(clip(text))),
        Outcome::ClientError(text) => (false, "client_error".to_owned(), Some(clip(text))),
        Outcome::ClientTimeout => (
            false,
            "client_timeout".to_owned(),
            Some(format!(
                "no answer within {} ms",
                CLIENT_TIMEOUT.as_millis()
            )),
        ),
    };
    CallRecord {
        client: client.to_owned(),
        kind,
        server: server.to_owned(),
        id: id.to_owned(),
        start_ms: round1(start_ms),
        end_ms: round1(end_ms),
        ok,
        category,
        error,
    }
}

fn round1(ms: f64) -> f64 {
    (ms * 10.0).round() / 10.0
}

fn clip(text: &str) -> String {
    const MAX: usize = 600;
    if text.len() <= MAX {
        text.to_owned()
    } else {
        let mut end = MAX;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}…", &text[..end])
    }
}

/// What one load client did.
pub struct ClientRun {
    pub calls: Vec<CallRecord>,
    /// Sessions opened with the proxy beyond the first (after a client-side failure).
    pub reconnects: u32,
    pub connect_failures: u32,
}

/// Settings of one load client.
pub struct LoadClient {
    pub index: usize,
    pub url: String,
    pub servers: Arc<Vec<String>>,
    pub t0: Instant,
    pub end: Instant,
    pub pause: Duration,
    pub seed: u64,
}

impl LoadClient {
    /// Send calls until `end`: a random server, a random kind, a unique id each.
    pub async fn run(self) -> ClientRun {
        let name = format!("load-{}", self.index);
        let mut rng = fastrand::Rng::with_seed(
            self.seed
                .wrapping_add((self.index as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)),
        );
        let mut run = ClientRun {
            calls: Vec::new(),
            reconnects: 0,
            connect_failures: 0,
        };
        let mut client: Option<Client> = None;
        let mut connects = 0u32;
        let mut seq = 0u64;
        while Instant::now() < self.end && seq < MAX_CALLS_PER_CLIENT && connects < MAX_CONNECTS {
            let Some(live) = &client else {
                connects += 1;
                match connect(&self.url).await {
                    Ok(c) => {
                        if connects > 1 {
                            run.reconnects += 1;
                        }
                        client = Some(c);
                    }
                    Err(_) => {
                        run.connect_failures += 1;
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                }
                continue;
            };
            seq += 1;
            let server = &self.servers[rng.usize(..self.servers.len())];
            let kind = match rng.u8(0..3) {
                0 => CallKind::Count,
                1 => CallKind::CountIdempotent,
                _ => CallKind::Echo,
            };
            let id = format!("{}-c{}-{seq}", kind.id_prefix(), self.index);
            let arguments = match kind {
                CallKind::Echo => json!({ "message": id }),
                _ => json!({ "id": id }),
            };
            let tool = format!("{server}__{}", kind.tool());
            let start = ms_since(self.t0);
            let outcome = call(live.peer(), &tool, arguments).await;
            let end = ms_since(self.t0);
            let broken = matches!(outcome, Outcome::ClientError(_));
            run.calls.push(record(
                &name,
                kind,
                server,
                &id,
                start,
                end,
                &outcome,
                Some(&id),
            ));
            if broken && let Some(old) = client.take() {
                // The session with the proxy failed: open a fresh one.
                close(old).await;
            }
            if !self.pause.is_zero() {
                tokio::time::sleep(self.pause).await;
            }
        }
        if let Some(c) = client {
            close(c).await;
        }
        run
    }
}
