//! # mcp-fault-server
//!
//! A deliberately misbehaving MCP server, built on rmcp's server side, for the end-to-end tests and
//! benchmarks of mcp-supervisor (and for anyone who wants to see how an MCP client copes with a
//! server that crashes, hangs, stalls, lies or forgets its sessions). It serves MCP over stdio by
//! default, or over streamable HTTP at `/mcp` with `--http ADDR`. Logs go to stderr only
//! (`RUST_LOG` overrides the default filter); stdout carries nothing but MCP in stdio mode.
//!
//! ## Tools
//!
//! | tool | arguments | behaviour |
//! |---|---|---|
//! | `add` | `a: number, b: number` | replies with the sum as text; `readOnlyHint: true` |
//! | `echo` | `message: string` | replies with `message`; `readOnlyHint: true` |
//! | `crash` | – | replies `crashing`, then exits with code 7 after 25 ms |
//! | `hang` | – | never answers; ends only when the call is cancelled |
//! | `sleep` | `ms: integer` | sleeps, replies `slept N ms`; progress every 100 ms if the request has a progress token |
//! | `count` | `id: string, crash_before_reply?: bool` | appends `id` + newline to the `--ledger` file (one write, synced), replies with `id`; `idempotentHint: false`. With `crash_before_reply: true` it writes the line, then exits with code 7 without replying, the first time an id is seen (a replay of the same id succeeds). Without `--ledger`: an `isError` result |
//! | `count_idempotent` | same as `count` | same as `count`, annotated `idempotentHint: true` |
//! | `set_tools` | `tools: [string], description?: string` | the names become the dynamic tools (each echoes its arguments as JSON text, described by `description` when given), replacing earlier ones; then `notifications/tools/list_changed` is sent (legacy sessions directly, 2026-07-28 clients on their `subscriptions/listen` stream) |
//! | `drop_sessions` | – | HTTP only: replies, then forgets every session, so an old `Mcp-Session-Id` gets HTTP 404 (their workers are closed 200 ms later). Over stdio: an `isError` result |
//! | `block` | `ms: integer` | blocks the whole (current-thread) runtime for `ms`: not even ping is answered; then replies `blocked N ms` |
//! | `garbage` | – | stdio only: writes a non-JSON line to stdout and never replies (ends only when cancelled). Over HTTP: an `isError` result |
//! | `pid` | – | replies with the process id |
//! | `whoami` | – | replies with the client's `initialize` params as this process saw them; `readOnlyHint: true` |
//! | `roots` | – | asks the client for its roots (`roots/list`) and replies with the answer |
//! | `elicit` | – | asks the client for input (`elicitation/create`) and replies with the answer |
//! | `meta` | – | replies with this request's `_meta` as JSON text (e.g. a proxy's `traceparent`); `readOnlyHint: true` |
//! | `tool_0001` … | any | with `--tools N`: N extra tools that echo their arguments as JSON text |
//!
//! An unknown tool gets a JSON-RPC error (-32602). Resources: `fault://status` (JSON status) and
//! the template `fault://ledger/{name}` (how many ledger lines equal `name`). Prompt: `greet
//! {name}` (answers `Hello, {name}!`). Capabilities: tools (`listChanged: true`), resources, prompts.
//!
//! ## Flags
//!
//! | flag | effect |
//! |---|---|
//! | `--http ADDR` | serve streamable HTTP at `http://ADDR/mcp` instead of stdio |
//! | `--ledger PATH` | ledger file of `count` / `count_idempotent` |
//! | `--headers-ledger PATH` | `--http` only: appends a JSON line per HTTP request: `{"http": METHOD, "authorization": its Authorization header or null, "rpc": the JSON-RPC method of a POST's body or null, "name": its params.name or null}` (what an upstream saw of the caller) |
//! | `--fail-first N --state-file F` | each start reads a counter from F (missing = 0), increments and writes it back; while it is ≤ N, prints `fault-server: failing start k of N` to stderr and exits with code 3 before serving |
//! | `--exit-after-ms N` | exits with code 5, N ms after it started serving |
//! | `--tools N` | adds N extra echo tools `tool_0001` … |
//! | `--page-size N` | pages `tools/list` N tools at a time (cursor); 0 (default) = one page |
//! | `--startup-delay-ms N` | sleeps N ms before serving |
//! | `--no-ping` | answers `ping` with JSON-RPC error -32601 (method not found) |
//! | `--stderr-lines N` | writes `fault-server stderr line k`, k = 1..N, to stderr at start |
//! | `--pid-file PATH` | writes the process id to PATH at start |
//! | `--greeting WORD` | `greet` answers `WORD, {name}!` instead of `Hello, {name}!` (tells servers apart) |
//! | `--ignore-stdin-eof` | stdio mode: keeps running after stdin ends (the session is over, the process is not) until a signal ends it, like a server that never watches its stdin |
//! | `--probes` | also serves the sandbox's probe tools: `probe_read {path}` and `probe_read_child {path}` (through `cat`) reply with the file's content, `probe_write {path}` writes "probe" to it, `probe_connect {port}` connects to 127.0.0.1:port, `probe_env {name}` replies with a variable; each replies "ok" (or the content) or an `isError` result with what the system said |
//! | `--conformance` | also serves the fixtures of the official conformance suite's server scenarios (`test_*` tools, `test://` resources, `test_*` prompts, completion, logging, subscriptions, `input_required` rounds); unknown resources then get -32602 with the URI in `data` (SEP-2164) |
//!
//! Order at start: pid file, stderr lines, fail-first check, startup delay, serve.
//! At end of stdin (stdio mode), calls in `hang`, `garbage` and `sleep` end with an error reply and
//! the process exits at once (unless `--ignore-stdin-eof`); `block` holds it until the block is over.
//! Exit codes: 0 after the client went away, 3 failed start (`--fail-first`), 5 `--exit-after-ms`,
//! 7 `crash` / `crash_before_reply`, 1 any other error.

mod conformance;
mod probes;
mod server;

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    pin::Pin,
    process::ExitCode,
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};

use clap::Parser;
use rmcp::{
    ServiceExt,
    service::ServerInitializeError,
    transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
    },
};
use tokio::{
    io::{AsyncBufReadExt, AsyncRead, AsyncWriteExt, BufReader, DuplexStream, ReadBuf},
    sync::mpsc,
};
use tokio_util::sync::CancellationToken;
use tracing_subscriber::EnvFilter;

use crate::server::{FaultServer, Mode, Options, Shared};

/// Exit code of a start refused by `--fail-first`.
const FAIL_FIRST_EXIT_CODE: u8 = 3;
/// Exit code of `--exit-after-ms`.
const EXIT_AFTER_EXIT_CODE: i32 = 5;

/// A fault-injection MCP server for testing MCP clients and proxies.
#[derive(Parser, Debug)]
#[command(name = "mcp-fault-server", version, about)]
struct Cli {
    /// Serve streamable HTTP at http://ADDR/mcp instead of stdio.
    #[arg(long, value_name = "ADDR")]
    http: Option<SocketAddr>,
    /// Ledger file that `count` and `count_idempotent` append to.
    #[arg(long, value_name = "PATH")]
    ledger: Option<PathBuf>,
    /// With --http: append a JSON line per HTTP request (its method, Authorization header,
    /// JSON-RPC method and params.name) to this file.
    #[arg(long, value_name = "PATH", requires = "http")]
    headers_ledger: Option<PathBuf>,
    /// Fail the first N starts (exit code 3), counted in --state-file.
    #[arg(long, value_name = "N", requires = "state_file")]
    fail_first: Option<u64>,
    /// Counter file of --fail-first.
    #[arg(long, value_name = "F", requires = "fail_first")]
    state_file: Option<PathBuf>,
    /// Exit with code 5 this many milliseconds after serving started.
    #[arg(long, value_name = "N")]
    exit_after_ms: Option<u64>,
    /// Add N extra echo tools named tool_0001 … tool_NNNN.
    #[arg(long, value_name = "N", default_value_t = 0)]
    tools: usize,
    /// Page tools/list this many tools at a time (0 = no paging).
    #[arg(long, value_name = "N", default_value_t = 0)]
    page_size: usize,
    /// Sleep this many milliseconds before serving.
    #[arg(long, value_name = "N")]
    startup_delay_ms: Option<u64>,
    /// Answer ping with JSON-RPC error -32601 (method not found).
    #[arg(long)]
    no_ping: bool,
    /// Write N numbered lines to stderr at start.
    #[arg(long, value_name = "N", default_value_t = 0)]
    stderr_lines: u64,
    /// Write the process id to this file at start.
    #[arg(long, value_name = "PATH")]
    pid_file: Option<PathBuf>,
    /// Also serve the fixtures of the official conformance suite's server scenarios.
    #[arg(long)]
    conformance: bool,
    /// Stdio mode: keep running after stdin ends, until a signal ends the process.
    #[arg(long)]
    ignore_stdin_eof: bool,
    /// The first word of the prompt greet's answer.
    #[arg(long, value_name = "WORD", default_value = "Hello")]
    greeting: String,
    /// Also serve the probe tools (probe_read, probe_read_child, probe_write, probe_connect,
    /// probe_env), for the sandbox's tests.
    #[arg(long)]
    probes: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing();

    if let Some(path) = &cli.pid_file
        && let Err(error) = std::fs::write(path, format!("{}\n", std::process::id()))
    {
        eprintln!(
            "fault-server: cannot write pid file {}: {error}",
            path.display()
        );
        return ExitCode::FAILURE;
    }
    for k in 1..=cli.stderr_lines {
        eprintln!("fault-server stderr line {k}");
    }
    if let (Some(n), Some(state_file)) = (cli.fail_first, &cli.state_file) {
        match bump_counter(state_file) {
            Ok(k) if k <= n => {
                eprintln!("fault-server: failing start {k} of {n}");
                return ExitCode::from(FAIL_FIRST_EXIT_CODE);
            }
            Ok(k) => tracing::info!(
                start = k,
                fail_first = n,
                "fail-first budget used up; starting"
            ),
            Err(error) => {
                eprintln!(
                    "fault-server: cannot update state file {}: {error}",
                    state_file.display()
                );
                return ExitCode::FAILURE;
            }
        }
    }

    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("fault-server: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let code = runtime.block_on(run(cli));
    // stdin is read on a blocking thread that may never return: do not wait for it.
    runtime.shutdown_timeout(Duration::from_millis(100));
    code
}

fn init_tracing() {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("mcp_fault_server=info,rmcp=warn,warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        // A lost stderr reader (the client died) must not end the process: tracing-subscriber
        // would report the failed write with `eprintln!`, which panics on a broken stderr.
        .log_internal_errors(false)
        .init();
}

/// Read the start counter from `path` (missing or unreadable as a number = 0), add one, write it
/// back and return it.
fn bump_counter(path: &Path) -> std::io::Result<u64> {
    let previous = match std::fs::read_to_string(path) {
        Ok(content) => content.trim().parse::<u64>().unwrap_or_else(|_| {
            tracing::warn!(path = %path.display(), "state file holds no number; counting from 0");
            0
        }),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => 0,
        Err(error) => return Err(error),
    };
    let current = previous.saturating_add(1);
    std::fs::write(path, format!("{current}\n"))?;
    Ok(current)
}

async fn run(cli: Cli) -> ExitCode {
    if let Some(ms) = cli.startup_delay_ms {
        tracing::info!(ms, "startup delay");
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    let options = Options {
        ledger: cli.ledger,
        extra_tools: cli.tools,
        no_ping: cli.no_ping,
        page_size: cli.page_size,
        conformance: cli.conformance,
        greeting: cli.greeting,
        probes: cli.probes,
    };
    match cli.http {
        Some(addr) => serve_http(addr, options, cli.exit_after_ms, cli.headers_ledger).await,
        None => {
            let code = serve_stdio(options, cli.exit_after_ms).await;
            if cli.ignore_stdin_eof {
                tracing::info!("stdin ended; --ignore-stdin-eof keeps this process running");
                std::future::pending::<()>().await;
            }
            code
        }
    }
}

fn schedule_exit_after(exit_after_ms: Option<u64>) {
    if let Some(ms) = exit_after_ms {
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            tracing::info!(ms, "exit-after-ms reached; exiting with code 5");
            std::process::exit(EXIT_AFTER_EXIT_CODE);
        });
    }
}

async fn serve_stdio(options: Options, exit_after_ms: Option<u64>) -> ExitCode {
    // Every byte for stdout goes through one writer task, line by line, so that `garbage` lines
    // never interleave with rmcp's messages.
    let (raw_tx, raw_rx) = mpsc::unbounded_channel();
    let (rmcp_side, pump_side) = tokio::io::duplex(64 * 1024);
    let pump = tokio::spawn(stdout_pump(pump_side, raw_rx));
    let stdin_closed = CancellationToken::new();
    let stdin = EofSignal {
        inner: tokio::io::stdin(),
        on_eof: stdin_closed.clone(),
    };
    let shared = Shared::new(
        Mode::Stdio {
            raw_stdout: raw_tx,
            stdin_closed,
        },
        options,
    );
    tracing::info!(pid = std::process::id(), "serving MCP over stdio");
    schedule_exit_after(exit_after_ms);

    let code = match FaultServer::new(shared).serve((stdin, rmcp_side)).await {
        Ok(service) => match service.waiting().await {
            Ok(reason) => {
                tracing::info!(?reason, "client went away");
                ExitCode::SUCCESS
            }
            Err(error) => {
                tracing::error!(%error, "server task failed");
                ExitCode::FAILURE
            }
        },
        Err(ServerInitializeError::ConnectionClosed(during)) => {
            tracing::info!(%during, "client went away before initializing");
            ExitCode::SUCCESS
        }
        Err(error) => {
            tracing::error!(%error, "no MCP session");
            ExitCode::FAILURE
        }
    };
    if tokio::time::timeout(Duration::from_secs(1), pump)
        .await
        .is_err()
    {
        tracing::warn!("stdout writer did not finish in time");
    }
    code
}

/// A reader that cancels a token when it reaches end of file.
struct EofSignal<R> {
    inner: R,
    on_eof: CancellationToken,
}

impl<R: AsyncRead + Unpin> AsyncRead for EofSignal<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let poll = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(poll, Poll::Ready(Ok(())))
            && buf.filled().len() == before
            && buf.remaining() > 0
        {
            self.on_eof.cancel();
        }
        poll
    }
}

/// Copy rmcp's output (read from `from`) to stdout one whole line at a time, interleaved with
/// raw lines from `raw`. Ends when rmcp's side of the pipe is closed.
async fn stdout_pump(from: DuplexStream, mut raw: mpsc::UnboundedReceiver<Vec<u8>>) {
    let mut stdout = tokio::io::stdout();
    let mut from = BufReader::new(from);
    let mut line = Vec::new();
    let mut raw_open = true;
    loop {
        tokio::select! {
            read = from.read_until(b'\n', &mut line) => match read {
                Ok(0) => break,
                Ok(_) => {
                    if write_line(&mut stdout, &line).await.is_err() {
                        break;
                    }
                    line.clear();
                }
                Err(error) => {
                    tracing::error!(%error, "reading rmcp output");
                    break;
                }
            },
            garbage = raw.recv(), if raw_open => match garbage {
                Some(bytes) => {
                    if write_line(&mut stdout, &bytes).await.is_err() {
                        break;
                    }
                }
                None => raw_open = false,
            },
        }
    }
}

async fn write_line(stdout: &mut tokio::io::Stdout, bytes: &[u8]) -> std::io::Result<()> {
    let result = async {
        stdout.write_all(bytes).await?;
        stdout.flush().await
    }
    .await;
    if let Err(error) = &result {
        tracing::warn!(%error, "cannot write to stdout");
    }
    result
}

/// The largest body `--headers-ledger` reads for its JSON-RPC method.
const LEDGER_BODY_LIMIT: usize = 16 * 1024 * 1024;

/// `--headers-ledger`: one JSON line for `request` (see the flag), then the request as it came.
async fn record_headers(
    path: Arc<PathBuf>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use std::io::Write;
    let (parts, body) = request.into_parts();
    let bytes = match axum::body::to_bytes(body, LEDGER_BODY_LIMIT).await {
        Ok(bytes) => bytes,
        Err(error) => {
            tracing::warn!(%error, "cannot read a request body for the headers ledger");
            axum::body::Bytes::new()
        }
    };
    let message: Option<serde_json::Value> = serde_json::from_slice(&bytes).ok();
    let field = |f: &dyn Fn(&serde_json::Value) -> Option<&serde_json::Value>| {
        message.as_ref().and_then(f).cloned().unwrap_or_default()
    };
    let line = serde_json::json!({
        "http": parts.method.as_str(),
        "authorization": parts
            .headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok()),
        "rpc": field(&|m| m.get("method")),
        "name": field(&|m| m.get("params")?.get("name")),
    });
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path.as_path())
        .and_then(|mut file| file.write_all(format!("{line}\n").as_bytes()));
    if let Err(error) = written {
        tracing::warn!(%error, path = %path.display(), "cannot append to the headers ledger");
    }
    let request = axum::extract::Request::from_parts(parts, axum::body::Body::from(bytes));
    next.run(request).await
}

async fn serve_http(
    addr: SocketAddr,
    options: Options,
    exit_after_ms: Option<u64>,
    headers_ledger: Option<PathBuf>,
) -> ExitCode {
    let sessions = Arc::new(LocalSessionManager::default());
    let shared = Shared::new(
        Mode::Http {
            sessions: Arc::clone(&sessions),
        },
        options,
    );
    let config = StreamableHttpServerConfig::default().with_allowed_hosts([
        "localhost".to_owned(),
        "127.0.0.1".to_owned(),
        "::1".to_owned(),
        addr.ip().to_string(),
    ]);
    let service = StreamableHttpService::new(
        move || Ok(FaultServer::new(Arc::clone(&shared))),
        sessions,
        config,
    );
    let mut router = axum::Router::new().nest_service("/mcp", service);
    if let Some(path) = headers_ledger {
        let path = Arc::new(path);
        router = router.layer(axum::middleware::from_fn(move |request, next| {
            record_headers(path.clone(), request, next)
        }));
    }
    let listener = match tokio::net::TcpListener::bind(addr).await {
        Ok(listener) => listener,
        Err(error) => {
            tracing::error!(%addr, %error, "cannot bind");
            return ExitCode::FAILURE;
        }
    };
    let local = listener.local_addr().unwrap_or(addr);
    tracing::info!(pid = std::process::id(), url = %format!("http://{local}/mcp"), "serving MCP over streamable HTTP");
    schedule_exit_after(exit_after_ms);
    match axum::serve(listener, router).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(%error, "HTTP server failed");
            ExitCode::FAILURE
        }
    }
}
