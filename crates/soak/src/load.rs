//! The load driver: a few MCP clients over streamable HTTP to the proxy, each sending calls with
//! unique ids one after another until the run ends.
//!
//! Two kinds of client, alternating by index: rmcp's client (it gets a 2025-11-25 session and
//! puts a progress token on every call) and a plain client (initialize on protocol 2025-06-18,
//! keep the session, `tools/call` without a progress token, as the TypeScript and Python SDKs
//! do). The proxy's pass-through answers both, with and without a progress token.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use mcp_supervisor_testkit::rawhttp::RawHttp;
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
    initialize_within_limit(url, ().serve(transport)).await
}

/// `initialize`, bounded by [`CONNECT_LIMIT`].
async fn initialize_within_limit<T, E>(
    url: &str,
    initialize: impl Future<Output = std::result::Result<T, E>>,
) -> Result<T>
where
    std::result::Result<T, E>: Context<T, E>,
{
    tokio::time::timeout(CONNECT_LIMIT, initialize)
        .await
        .map_err(|_| anyhow!("initialize with {url} took over {CONNECT_LIMIT:?}"))?
        .with_context(|| format!("initialize with {url}"))
}

/// Close a client, bounded.
pub async fn close(client: Client) {
    let _ = tokio::time::timeout(Duration::from_secs(2), client.cancel()).await;
}

/// A load client's session with the proxy, of either kind.
enum Session {
    Rmcp(Client),
    Plain(RawHttp),
}

impl Session {
    async fn open(url: &str, plain: bool) -> Result<Self> {
        if !plain {
            return connect(url).await.map(Session::Rmcp);
        }
        initialize_within_limit(url, RawHttp::connect(url, PLAIN_HTTP_LIMIT))
            .await
            .map(Session::Plain)
    }

    async fn call(&self, tool: &str, arguments: Value) -> Outcome {
        match self {
            Session::Rmcp(client) => call(client.peer(), tool, arguments).await,
            Session::Plain(raw) => call_plain(raw, tool, arguments).await,
        }
    }

    /// Answers that came as one JSON body: the proxy's pass-through.
    fn json_answers(&self) -> u64 {
        match self {
            Session::Rmcp(_) => 0,
            Session::Plain(raw) => raw.json_answers(),
        }
    }

    async fn close(self) {
        match self {
            Session::Rmcp(client) => close(client).await,
            Session::Plain(raw) => {
                let _ = tokio::time::timeout(Duration::from_secs(2), raw.close()).await;
            }
        }
    }
}

/// reqwest's own limit for a plain client's exchange; the call is bounded by [`CLIENT_TIMEOUT`]
/// before it.
const PLAIN_HTTP_LIMIT: Duration = Duration::from_secs(30);

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

/// Call `tool` with `arguments` by a plain `tools/call` POST, bounded by [`CLIENT_TIMEOUT`]; the
/// answer is read the way rmcp's client reads it (a JSON-RPC error is the client's error).
async fn call_plain(raw: &RawHttp, tool: &str, arguments: Value) -> Outcome {
    let params = json!({ "name": tool, "arguments": arguments });
    match tokio::time::timeout(CLIENT_TIMEOUT, raw.answer("tools/call", params)).await {
        Err(_) => Outcome::ClientTimeout,
        Ok(Err(error)) => Outcome::ClientError(format!("{error:#}")),
        Ok(Ok((answer, _))) => plain_outcome(&answer),
    }
}

/// What a JSON-RPC answer to `tools/call` means for the load.
fn plain_outcome(answer: &Value) -> Outcome {
    let Some(result) = answer.get("result") else {
        return Outcome::ClientError(match answer.get("error") {
            Some(error) => format!("JSON-RPC error: {error}"),
            None => format!("an answer with neither result nor error: {answer}"),
        });
    };
    let text = result
        .get("content")
        .and_then(Value::as_array)
        .map(|content| {
            content
                .iter()
                .filter(|c| c.get("type").and_then(Value::as_str) == Some("text"))
                .filter_map(|c| c.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default();
    if result.get("isError").and_then(Value::as_bool) == Some(true) {
        Outcome::ToolError(text)
    } else {
        Outcome::Ok(text)
    }
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
    /// Calls of a plain client answered as one JSON body (the proxy's pass-through).
    pub json_answers: u64,
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
    /// A plain client (the proxy's pass-through) rather than rmcp's (its typed path).
    pub plain: bool,
}

impl LoadClient {
    /// Send calls until `end`: a random server, a random kind, a unique id each.
    pub async fn run(self) -> ClientRun {
        let name = format!(
            "{}-{}",
            if self.plain { "plain" } else { "rmcp" },
            self.index
        );
        let mut rng = fastrand::Rng::with_seed(
            self.seed
                .wrapping_add((self.index as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)),
        );
        let mut run = ClientRun {
            calls: Vec::new(),
            reconnects: 0,
            connect_failures: 0,
            json_answers: 0,
        };
        let mut client: Option<Session> = None;
        let mut connects = 0u32;
        let mut seq = 0u64;
        while Instant::now() < self.end && seq < MAX_CALLS_PER_CLIENT && connects < MAX_CONNECTS {
            let Some(live) = &client else {
                connects += 1;
                match Session::open(&self.url, self.plain).await {
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
            let outcome = live.call(&tool, arguments).await;
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
                run.json_answers += old.json_answers();
                old.close().await;
            }
            if !self.pause.is_zero() {
                tokio::time::sleep(self.pause).await;
            }
        }
        if let Some(c) = client {
            run.json_answers += c.json_answers();
            c.close().await;
        }
        run
    }
}
