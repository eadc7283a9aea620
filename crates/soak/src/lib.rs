//! # mcp-supervisor-soak
//!
//! A chaos soak of the `mcp-supervisor` proxy, on loopback only. One `mcp-supervisor serve --http`
//! supervises 8 real `mcp-fault-server` upstreams (5 over stdio, started by the proxy; 3 over
//! streamable HTTP, started by the harness) with a fast reconnect policy. While a few MCP clients
//! call tools through the proxy with unique ids (`count`, `count_idempotent`, `echo`), a seeded
//! chaos driver kills, hangs, restarts and drops the sessions of random upstreams every 1–3 s.
//! Afterwards it checks what the proxy promises (SPEC §2–7):
//!
//! - (a) every call returned within its deadline (`toolCallTimeoutMs` + 2 s);
//! - (b) every success carried the right result;
//! - (c) no non-idempotent id is in any ledger twice; (c2) the ledgers agree with the outcomes;
//! - (d) idempotent calls to a server that no chaos touched in the 5 s before them (nor during
//!   them) all succeeded; (d2) no call failed as "not ready" / "reconnect failed" although the
//!   attempt it had to wait for (the one under way, or the next one due within its deadline)
//!   connected within its deadline (attempt ends read from the proxy's log);
//! - (e) after 10 s of calm, one process per stdio server and every server ready;
//! - (f) the proxy's RSS at the end is within 10% (25% for runs under 2 min) of an early mark;
//! - (g) two processes of one stdio server were never seen at once (sampled every 250 ms);
//! - (h) the proxy stops on SIGTERM and leaves no server process behind.
//!
//! Everything it starts is ended when it returns, also on error or panic (guards with `Drop`).

pub mod analysis;
pub mod attempts;
pub mod chaos;
pub mod load;
pub mod plot;
pub mod procs;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::procs::{HttpFault, Proxy};

/// Stdio upstreams, started by the proxy.
pub const STDIO_SERVERS: usize = 5;
/// Streamable-HTTP upstreams, started by the harness.
pub const HTTP_SERVERS: usize = 3;
/// `toolCallTimeoutMs` of every server.
pub const TOOL_CALL_TIMEOUT_MS: u64 = 5_000;
/// What a call may take beyond `toolCallTimeoutMs`, for the client side.
pub const CLIENT_MARGIN_MS: u64 = 2_000;
/// The client gives up on a call after this long: a call that hits it hung.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(15);
/// How long a `hang` blocks its server.
pub const HANG_MS: u64 = 3_000;
/// A server counts as untouched by chaos when no action hit it this long before a call.
pub const QUIET_MS: f64 = 5_000.0;
/// Window of the per-window counts, and period of the RSS samples.
pub const WINDOW_SECS: u64 = 5;
/// Period of the scan for two processes of one stdio server.
const OVERLAP_SCAN: Duration = Duration::from_millis(250);
/// How long the proxy may take to have every server ready at start.
const READY_LIMIT: Duration = Duration::from_secs(30);
/// How long the proxy may take to stop on SIGTERM.
const STOP_LIMIT: Duration = Duration::from_secs(10);

/// What to run.
#[derive(Clone, Debug)]
pub struct Options {
    pub duration: Duration,
    pub seed: u64,
    /// Concurrent MCP clients of the load driver: even indices rmcp's client, odd ones a plain
    /// session client (see `load`).
    pub clients: usize,
    /// Pause of each load client between two calls.
    pub pause: Duration,
    /// Calm after the chaos stops, before the end state is checked.
    pub calm: Duration,
    /// Folder of `mcp-supervisor` and `mcp-fault-server`.
    pub bin_dir: PathBuf,
    /// Folder for the config, ledgers and logs (default: a fresh one under the temp dir).
    pub work_dir: Option<PathBuf>,
}

impl Options {
    pub fn new(duration: Duration, seed: u64, bin_dir: PathBuf) -> Self {
        Self {
            duration,
            seed,
            clients: 4,
            pause: Duration::from_millis(10),
            calm: Duration::from_secs(10),
            bin_dir,
            work_dir: None,
        }
    }
}

/// The folder of the running executable's build output: beside it, or one up from `deps/`
/// (where cargo puts test executables).
pub fn default_bin_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    let dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir.parent().map(Path::to_path_buf).unwrap_or(dir)
    } else {
        dir
    }
}

/// A seed from the clock.
pub fn clock_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
        ^ u64::from(std::process::id())
}

/// What a call was.
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum CallKind {
    /// `count`: not idempotent.
    Count,
    /// `count_idempotent`: `idempotentHint: true`.
    CountIdempotent,
    /// `echo`: `readOnlyHint: true`.
    Echo,
    /// `block {ms}` sent by chaos (a hang).
    Block,
    /// `drop_sessions` sent by chaos.
    DropSessions,
}

impl CallKind {
    pub fn tool(self) -> &'static str {
        match self {
            CallKind::Count => "count",
            CallKind::CountIdempotent => "count_idempotent",
            CallKind::Echo => "echo",
            CallKind::Block => "block",
            CallKind::DropSessions => "drop_sessions",
        }
    }

    /// Prefix of the ids of this kind (`n-` non-idempotent, `i-` idempotent, `e-` echo).
    pub fn id_prefix(self) -> &'static str {
        match self {
            CallKind::Count => "n",
            CallKind::CountIdempotent => "i",
            CallKind::Echo => "e",
            CallKind::Block => "b",
            CallKind::DropSessions => "d",
        }
    }

    /// The proxy may send it again after an unclear failure.
    pub fn replayable(self) -> bool {
        matches!(self, CallKind::CountIdempotent | CallKind::Echo)
    }
}

/// One call through the proxy. Times in ms since the load started.
#[derive(Clone, Debug, Serialize)]
pub struct CallRecord {
    pub client: String,
    pub kind: CallKind,
    pub server: String,
    pub id: String,
    pub start_ms: f64,
    pub end_ms: f64,
    pub ok: bool,
    /// `ok`, or the kind of error (see [`categorize`]), `client_error`, `client_timeout`,
    /// `wrong_result`.
    pub category: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl CallRecord {
    pub fn duration_ms(&self) -> f64 {
        self.end_ms - self.start_ms
    }
}

/// One thing chaos did (or the harness did to an HTTP server). Time in ms since the load started.
#[derive(Clone, Debug, Serialize)]
pub struct ChaosEvent {
    pub t_ms: f64,
    pub server: String,
    /// `kill9`, `hang`, `restart`, `drop_sessions`, `start` (end of a kill's downtime), `restore`.
    pub action: String,
    pub ok: bool,
    pub detail: String,
}

/// The kind of an error the proxy returned, from its text (SPEC §5 outcomes).
pub fn categorize(text: &str) -> &'static str {
    if text.contains("timed out after") {
        "timed_out"
    } else if text.contains("may have run") {
        "outcome_unknown"
    } else if text.contains("is not ready to run") {
        "not_ready"
    } else if text.contains("reconnecting failed too") {
        "reconnect_failed"
    } else if text.contains("did not run:") {
        "not_delivered"
    } else if text.contains("answered") && text.contains("with error") {
        "server_error"
    } else {
        "other_error"
    }
}

/// Milliseconds since `t0`.
pub fn ms_since(t0: Instant) -> f64 {
    Instant::now().saturating_duration_since(t0).as_secs_f64() * 1000.0
}

/// One upstream of the run.
#[derive(Clone, Debug, Serialize)]
pub struct Upstream {
    pub name: String,
    pub transport: &'static str,
    pub ledger: PathBuf,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

/// One RSS sample of the proxy.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct RssSample {
    pub t_s: f64,
    pub rss_kib: u64,
}

/// Two (or more) live processes of one stdio server seen at once.
#[derive(Clone, Debug, Serialize)]
pub struct Overlap {
    pub t_ms: f64,
    pub server: String,
    pub pids: Vec<u32>,
    pub processes: Vec<procs::ProcInfo>,
}

/// What the harness saw at the end, after the calm.
#[derive(Clone, Debug, Serialize)]
pub struct EndState {
    pub status: Value,
    /// Live fault-server processes per server (by ledger path).
    pub processes: BTreeMap<String, Vec<u32>>,
    /// Children of the proxy that are zombies (exited, not reaped).
    pub zombie_children: Vec<u32>,
    /// One `echo` per server after the calm.
    pub final_calls: Vec<CallRecord>,
    pub stop: Option<procs::ProxyStop>,
    /// Fault-server processes of the proxy's (stdio) servers still alive after it stopped.
    pub leftover_after_stop: Vec<procs::ProcInfo>,
}

/// Everything the run saw, before it is judged.
pub struct Observed {
    pub options: Options,
    pub work_dir: PathBuf,
    pub proxy_log: PathBuf,
    pub config: Value,
    pub upstreams: Vec<Upstream>,
    pub calls: Vec<CallRecord>,
    pub chaos_calls: Vec<CallRecord>,
    pub events: Vec<ChaosEvent>,
    pub rss: Vec<RssSample>,
    pub overlaps: Vec<Overlap>,
    pub overlap_scans: u64,
    pub downstream_reconnects: u32,
    pub downstream_connect_failures: u32,
    /// Calls of the plain clients answered as one JSON body (the proxy's pass-through).
    pub plain_json_answers: u64,
    /// Wall clock (Unix seconds) at the start of the load, to place the proxy's log lines.
    pub t0_unix: f64,
    pub end: EndState,
}

fn default_work_dir() -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    std::env::temp_dir().join(format!(
        "mcp-supervisor-soak-{}-{nanos}",
        std::process::id()
    ))
}

fn find_bin(dir: &Path, name: &str) -> Result<PathBuf> {
    let path = dir.join(name);
    if !path.is_file() {
        bail!(
            "{} is missing: build the workspace's binaries first (`cargo build --workspace --bins`, \
             or with --release), or give the folder with --bin-dir",
            path.display()
        );
    }
    Ok(path)
}

/// The proxy's config: one `defaults` block with the fast policy, 5 stdio + 3 HTTP servers.
pub fn proxy_config(fault: &Path, upstreams: &[Upstream]) -> Value {
    let mut servers = serde_json::Map::new();
    for upstream in upstreams {
        let entry = match &upstream.url {
            Some(url) => json!({ "url": url }),
            None => json!({ "command": fault, "args": ["--ledger", upstream.ledger] }),
        };
        servers.insert(upstream.name.clone(), entry);
    }
    json!({
        "defaults": {
            "reconnect": { "initialDelayMs": 50, "maxDelayMs": 1000, "maxAttempts": 1000 },
            "health": { "intervalMs": 500, "timeoutMs": 500, "failures": 2 },
            "toolCallTimeoutMs": TOOL_CALL_TIMEOUT_MS,
        },
        "mcpServers": servers,
    })
}

async fn get_status(web: &reqwest::Client, url: &str) -> Option<Value> {
    let response = web.get(url).send().await.ok()?;
    serde_json::from_str(&response.text().await.ok()?).ok()
}

fn all_ready(status: &Value, names: &[String]) -> bool {
    names.iter().all(|name| {
        status["servers"]
            .as_array()
            .and_then(|s| s.iter().find(|s| s["name"] == name.as_str()))
            .is_some_and(|s| s["state"] == "ready")
    })
}

async fn wait_all_ready(web: &reqwest::Client, url: &str, names: &[String]) -> Result<()> {
    let deadline = Instant::now() + READY_LIMIT;
    let mut last = Value::Null;
    while Instant::now() < deadline {
        if let Some(status) = get_status(web, url).await {
            if all_ready(&status, names) {
                return Ok(());
            }
            last = status;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("not every server was ready within {READY_LIMIT:?}; last status: {last}")
}

async fn sample_rss(pid: u32, t0: Instant, mut stop: watch::Receiver<bool>) -> Vec<RssSample> {
    let mut samples = Vec::new();
    let mut tick = tokio::time::interval_at(t0, Duration::from_secs(WINDOW_SECS));
    // Bounded: one sample per period for at most a day.
    for _ in 0..(86_400 / WINDOW_SECS) {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => break,
        }
        if *stop.borrow() {
            break;
        }
        if let Some(rss_kib) = procs::rss_kib(pid) {
            let t_s = (ms_since(t0) / 10.0).round() / 100.0;
            samples.push(RssSample { t_s, rss_kib });
        }
    }
    samples
}

async fn watch_overlaps(
    stdio: Vec<(String, PathBuf)>,
    t0: Instant,
    mut stop: watch::Receiver<bool>,
) -> (Vec<Overlap>, u64) {
    let mut found = Vec::new();
    let mut scans = 0u64;
    // Bounded: one scan per period for at most a day.
    for _ in 0..(86_400_000 / OVERLAP_SCAN.as_millis() as u64) {
        if *stop.borrow() {
            break;
        }
        let procs = tokio::task::spawn_blocking(procs::scan)
            .await
            .unwrap_or_default();
        scans += 1;
        for (name, ledger) in &stdio {
            let pids = procs::fault_servers_of(&procs, ledger);
            if pids.len() > 1 {
                // A scan reads one process after another: confirm that they are alive together.
                let alive: Vec<u32> = pids
                    .into_iter()
                    .filter(|pid| procs::still_fault_server_of(*pid, ledger))
                    .collect();
                if alive.len() > 1 {
                    found.push(Overlap {
                        t_ms: ms_since(t0),
                        server: name.clone(),
                        processes: procs
                            .iter()
                            .filter(|p| alive.contains(&p.pid))
                            .cloned()
                            .collect(),
                        pids: alive,
                    });
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(OVERLAP_SCAN) => {}
            _ = stop.changed() => break,
        }
    }
    (found, scans)
}

/// Run the soak: start everything, drive load and chaos for `options.duration`, let it calm
/// down, check the end state, stop everything, and judge.
pub async fn run(options: &Options) -> Result<analysis::Report> {
    let observed = observe(options).await?;
    Ok(analysis::judge(observed))
}

async fn observe(options: &Options) -> Result<Observed> {
    let supervisor = find_bin(&options.bin_dir, "mcp-supervisor")?;
    let fault = find_bin(&options.bin_dir, "mcp-fault-server")?;
    let dir = options.work_dir.clone().unwrap_or_else(default_work_dir);
    std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
    let dir = dir.canonicalize().unwrap_or(dir);

    // The upstreams: ledgers are fresh files of this run.
    let mut upstreams = Vec::new();
    for i in 0..STDIO_SERVERS {
        let name = format!("stdio{i}");
        let ledger = dir.join(format!("{name}.ledger"));
        let _ = std::fs::remove_file(&ledger);
        upstreams.push(Upstream {
            name,
            transport: "stdio",
            ledger,
            url: None,
        });
    }
    let mut http = Vec::new();
    for i in 0..HTTP_SERVERS {
        let name = format!("http{i}");
        let ledger = dir.join(format!("{name}.ledger"));
        let _ = std::fs::remove_file(&ledger);
        let mut server = HttpFault::new(
            &name,
            &fault,
            procs::free_port()?,
            &ledger,
            &dir.join(format!("{name}.log")),
        );
        server.start().await?;
        upstreams.push(Upstream {
            name,
            transport: "http",
            ledger,
            url: Some(server.url()),
        });
        http.push(server);
    }
    let names: Vec<String> = upstreams.iter().map(|u| u.name.clone()).collect();
    let stdio_ledgers: Vec<(String, PathBuf)> = upstreams
        .iter()
        .filter(|u| u.transport == "stdio")
        .map(|u| (u.name.clone(), u.ledger.clone()))
        .collect();

    let config = proxy_config(&fault, &upstreams);
    let config_path = dir.join("config.json");
    std::fs::write(&config_path, serde_json::to_string_pretty(&config)?)
        .with_context(|| format!("write {}", config_path.display()))?;
    let proxy_log = dir.join("proxy.log");
    let mut proxy =
        Proxy::start(&supervisor, &config_path, procs::free_port()?, &proxy_log).await?;
    let web = reqwest::Client::builder()
        .timeout(Duration::from_secs(3))
        .build()
        .context("HTTP client")?;
    let status_url = proxy.url("/status");
    let mcp_url = proxy.url("/mcp");
    wait_all_ready(&web, &status_url, &names).await?;

    // Load and chaos.
    let t0 = Instant::now();
    let t0_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    let end = t0 + options.duration;
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut rss_task = JoinSet::new();
    rss_task.spawn(sample_rss(proxy.pid(), t0, stop_rx.clone()));
    let mut overlap_task = JoinSet::new();
    overlap_task.spawn(watch_overlaps(stdio_ledgers.clone(), t0, stop_rx));

    let servers = Arc::new(names.clone());
    let mut load_tasks = JoinSet::new();
    for index in 0..options.clients {
        load_tasks.spawn(
            load::LoadClient {
                index,
                url: mcp_url.clone(),
                servers: Arc::clone(&servers),
                t0,
                end,
                pause: options.pause,
                seed: options.seed,
                plain: index % 2 == 1,
            }
            .run(),
        );
    }
    let chaos_client = load::connect(&mcp_url).await?;
    let mut chaos = chaos::Chaos::new(
        t0,
        end,
        options.seed,
        stdio_ledgers.iter().map(|(n, _)| n.clone()).collect(),
        &mut http,
        chaos_client.peer().clone(),
        status_url.clone(),
        web.clone(),
    );
    chaos.run().await;

    let mut calls = Vec::new();
    let mut downstream_reconnects = 0;
    let mut downstream_connect_failures = 0;
    let mut plain_json_answers = 0;
    let collect_limit = CLIENT_TIMEOUT + Duration::from_secs(30);
    let _ = tokio::time::timeout(collect_limit, async {
        while let Some(joined) = load_tasks.join_next().await {
            if let Ok(run) = joined {
                calls.extend(run.calls);
                downstream_reconnects += run.reconnects;
                downstream_connect_failures += run.connect_failures;
                plain_json_answers += run.json_answers;
            }
        }
    })
    .await;
    load_tasks.abort_all();
    chaos.restore().await;
    let mut chaos_calls = Vec::new();
    let _ = tokio::time::timeout(collect_limit, async {
        while let Some(joined) = chaos.calls.join_next().await {
            if let Ok(record) = joined {
                chaos_calls.push(record);
            }
        }
    })
    .await;
    chaos.calls.abort_all();
    let events = std::mem::take(&mut chaos.events);
    drop(chaos);
    load::close(chaos_client).await;

    // Calm, then the end state.
    tokio::time::sleep(options.calm).await;
    let status = get_status(&web, &status_url).await.unwrap_or(Value::Null);
    let scan = procs::scan();
    let mut processes = BTreeMap::new();
    for upstream in &upstreams {
        processes.insert(
            upstream.name.clone(),
            procs::fault_servers_of(&scan, &upstream.ledger),
        );
    }
    let proxy_pid = proxy.pid();
    let zombie_children = scan
        .iter()
        .filter(|p| p.ppid == proxy_pid && p.state == "Z")
        .map(|p| p.pid)
        .collect();
    let mut final_calls = Vec::new();
    match load::connect(&mcp_url).await {
        Ok(client) => {
            for name in &names {
                let id = format!("final-{name}");
                let start = ms_since(t0);
                let outcome = load::call(
                    client.peer(),
                    &format!("{name}__echo"),
                    json!({ "message": id }),
                )
                .await;
                final_calls.push(load::record(
                    "final",
                    CallKind::Echo,
                    name,
                    &id,
                    start,
                    ms_since(t0),
                    &outcome,
                    Some(&id),
                ));
            }
            load::close(client).await;
        }
        Err(error) => final_calls.push(CallRecord {
            client: "final".to_owned(),
            kind: CallKind::Echo,
            server: String::new(),
            id: "final-connect".to_owned(),
            start_ms: ms_since(t0),
            end_ms: ms_since(t0),
            ok: false,
            category: "client_error".to_owned(),
            error: Some(format!("{error:#}")),
        }),
    }
    let _ = stop_tx.send(true);
    let rss = rss_task
        .join_next()
        .await
        .and_then(Result::ok)
        .unwrap_or_default();
    let (overlaps, overlap_scans) = overlap_task
        .join_next()
        .await
        .and_then(Result::ok)
        .unwrap_or_default();

    // Stop: the proxy on SIGTERM stops its stdio servers; the HTTP ones are ours.
    let stop = proxy.stop(STOP_LIMIT).await;
    for server in &mut http {
        server.kill();
    }
    let mut leftover_after_stop = Vec::new();
    for _ in 0..30 {
        let scan = procs::scan();
        leftover_after_stop = stdio_ledgers
            .iter()
            .flat_map(|(_, ledger)| {
                scan.iter()
                    .filter(|p| procs::is_fault_server_of(p, ledger))
                    .cloned()
                    .collect::<Vec<_>>()
            })
            .collect();
        if leftover_after_stop.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Reported above; do not leave them running.
    for leftover in &leftover_after_stop {
        procs::signal(leftover.pid, nix::sys::signal::Signal::SIGKILL);
    }

    Ok(Observed {
        options: options.clone(),
        work_dir: dir,
        proxy_log,
        config,
        upstreams,
        calls,
        chaos_calls,
        events,
        rss,
        overlaps,
        overlap_scans,
        downstream_reconnects,
        downstream_connect_failures,
        plain_json_answers,
        t0_unix,
        end: EndState {
            status,
            processes,
            zombie_children,
            final_calls,
            stop: Some(stop),
            leftover_after_stop,
        },
    })
}

/// Write the report JSON to `report_path` and the chart to `svg_path` (when given), and note
/// both in the report.
pub fn write_outputs(
    report: &mut analysis::Report,
    report_path: Option<&Path>,
    svg_path: Option<&Path>,
) -> Result<()> {
    if let Some(path) = svg_path {
        match plot::write_svg(report, path) {
            Ok(()) => report.svg_file = Some(path.to_path_buf()),
            Err(error) => report.svg_note = Some(format!("no SVG: {error:#}")),
        }
    } else {
        report.svg_note = Some("no SVG asked for".to_owned());
    }
    if let Some(path) = report_path {
        report.report_file = Some(path.to_path_buf());
        report.write_json(path)?;
    }
    Ok(())
}
