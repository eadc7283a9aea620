//! `peers`: the latency and throughput of one `echo` call (1 KiB message) through each of several
//! fronts of the same stdio fault server, in the same run, alternating targets block by block:
//!
//! | id | what | driven with |
//! |---|---|---|
//! | `baseline` | the fault server over stdio, no hop | rmcp client |
//! | `ours` | `mcp-supervisor wrap --http` | rmcp streamable-HTTP client |
//! | `ours-raw` | the same | plain JSON-RPC POSTs (reqwest) |
//! | `mcp-proxy` | mcp-proxy 0.13.0 (PyPI), streamable HTTP at /mcp | rmcp streamable-HTTP client |
//! | `supergateway` | supergateway 4.0.0 (npm), `--outputTransport streamableHttp --stateful` | rmcp streamable-HTTP client |
//! | `supergateway-stateless` | the same without `--stateful` (its default: a new server process per request) | rmcp streamable-HTTP client |
//! | `relay` | this binary's `relay` (the cost floor of a hop) | rmcp streamable-HTTP client |
//! | `baseline-raw` | the fault server over stdio, no hop | plain JSON-RPC lines (`rawstdio`) |
//! | `mcp-proxy-raw`, `supergateway-raw` | as above | plain JSON-RPC POSTs (reqwest), SSE read to its end |
//! | `relay-raw` | the same | plain JSON-RPC POSTs (reqwest) |
//! | `ours-stdio` | `mcp-supervisor wrap` (the stdio face) | rmcp client over its stdin/stdout |
//! | `ours-stdio-raw` | the same | plain JSON-RPC lines (`rawstdio`) |
//! | `pipe-relay` | this binary's `pipe-relay` (bytes copied both ways: the cost floor of a stdio hop) | rmcp client |
//! | `pipe-relay-raw` | the same | plain JSON-RPC lines (`rawstdio`) |
//! | `pipe-relay-tokio-raw` | the same with `--tokio-stdio`: its own stdin/stdout through tokio's blocking threads, as our stdio face's | plain JSON-RPC lines (`rawstdio`) |
//!
//! Targets form two families by their client: rmcp's clients, and plain JSON-RPC (`-raw`). Each
//! family has its own baseline, and "added" and the verdicts compare within a family only: the
//! rmcp family includes the cost of rmcp's client on every hop, the raw family is the proxies
//! alone.
//!
//! The verdicts: for the HTTP face (`ours`), its added median against the best peer's (≤ 1/5) and
//! the bare relay's (≤ 1.1×), its throughput against the best peer's (≥ 5× at 64) and the bare
//! relay's (≥ 0.9×); for the stdio face (`ours-stdio`), its median against the direct baseline's at
//! concurrency 1 (≤ 1.5×) and its throughput at 64 (≥ 0.8×), with the pipe relay's beside.
//!
//! Every front's fault server carries `--pid-file RUNDIR/ID.pid`, so that every process of the run
//! can be found in `/proc` and none is left behind.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use rmcp::model::{CallToolRequestParams, JsonObject};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::procs::{self, RunDir, Spawned};
use crate::rawstdio::RawStdio;
use crate::util::{self, Stats};
use mcp_supervisor_testkit::rawhttp::RawHttp;

const CALL_LIMIT: Duration = Duration::from_secs(30);
const START_LIMIT: Duration = Duration::from_secs(60);
/// The bound of the first call to each target, before the run.
const PROBE_LIMIT: Duration = Duration::from_secs(10);
/// Every target, in the order of the tables.
pub const ALL: [&str; 16] = [
    "baseline",
    "ours",
    "mcp-proxy",
    "supergateway",
    "supergateway-stateless",
    "relay",
    "ours-stdio",
    "pipe-relay",
    "baseline-raw",
    "ours-raw",
    "mcp-proxy-raw",
    "supergateway-raw",
    "relay-raw",
    "ours-stdio-raw",
    "pipe-relay-raw",
    "pipe-relay-tokio-raw",
];
/// The targets that run under `--profile-prefix`: our proxy's faces and the bare relays.
const PROFILED: [&str; 9] = [
    "ours",
    "ours-raw",
    "relay",
    "relay-raw",
    "ours-stdio",
    "ours-stdio-raw",
    "pipe-relay",
    "pipe-relay-raw",
    "pipe-relay-tokio-raw",
];
/// The targets that are peers (third-party proxies) for the "best peer" comparisons.
const PEERS: [&str; 5] = [
    "mcp-proxy",
    "supergateway",
    "supergateway-stateless",
    "mcp-proxy-raw",
    "supergateway-raw",
];

/// The two families of targets, by the client that drives them: (suffix, baseline id).
const FAMILIES: [(&str, &str); 2] = [("", "baseline"), ("-raw", "baseline-raw")];

/// The family (its suffix) a target belongs to.
fn family(id: &str) -> &'static str {
    if id.ends_with("-raw") { "-raw" } else { "" }
}

pub struct Options {
    pub calls: u32,
    pub concurrency: Vec<u32>,
    pub block: u32,
    pub warmup: u32,
    pub stateless_calls: u32,
    pub targets: Vec<String>,
    pub mcp_proxy: PathBuf,
    pub supergateway: PathBuf,
    pub node: PathBuf,
    pub svg: Option<PathBuf>,
    /// A command prefix (e.g. `valgrind --tool=callgrind`) for our proxy's and the relay's
    /// processes, for profiling.
    pub profile_prefix: Option<String>,
}

enum Driver {
    Rmcp(RunningService<RoleClient, ()>),
    Raw(RawHttp),
    RawStdio(RawStdio),
}

impl Driver {
    async fn call(&self, arguments: &JsonObject, message: &str) -> Result<()> {
        match self {
            Driver::Rmcp(client) => {
                let params = CallToolRequestParams::new("echo").with_arguments(arguments.clone());
                let result = tokio::time::timeout(CALL_LIMIT, client.call_tool(params))
                    .await
                    .map_err(|_| anyhow!("no answer within {CALL_LIMIT:?}"))?
                    .map_err(|e| anyhow!("{e}"))?;
                util::check_echo(&result, message)
            }
            Driver::Raw(client) => {
                let params = json!({ "name": "echo", "arguments": arguments });
                check_raw_echo(&client.request("tools/call", params).await?.0, message)
            }
            Driver::RawStdio(client) => {
                let params = json!({ "name": "echo", "arguments": arguments });
                check_raw_echo(&client.request("tools/call", params).await?, message)
            }
        }
    }

    async fn close(self) {
        if let Driver::Rmcp(client) = self {
            let _ = tokio::time::timeout(Duration::from_secs(5), client.cancel()).await;
        }
    }
}

/// The `echo` result, as JSON, carries `message` back.
fn check_raw_echo(result: &Value, message: &str) -> Result<()> {
    if result.get("isError") == Some(&Value::Bool(true)) {
        bail!("echo returned an error result: {result}");
    }
    let text = result
        .pointer("/content/0/text")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if text != message {
        bail!(
            "echo returned {} characters instead of {}",
            text.len(),
            message.len()
        );
    }
    Ok(())
}

struct Target {
    id: &'static str,
    label: String,
    calls: u32,
    driver: Arc<Driver>,
    procs: Vec<Spawned>,
}

/// What one target measured at one concurrency.
#[derive(Default)]
pub struct Measured {
    pub latencies_ms: Vec<f64>,
    wall: Duration,
    errors: u32,
    first_error: Option<String>,
}

struct Setup<'a> {
    fault: &'a Path,
    run: &'a RunDir,
    opts: &'a Options,
}

pub async fn run(fault: &Path, opts: Options) -> Result<Value> {
    let run = RunDir::new("peers")?;
    let ctx = Setup {
        fault,
        run: &run,
        opts: &opts,
    };
    let mut targets = Vec::new();
    let mut skipped: Vec<(String, String)> = Vec::new();
    for id in ALL {
        if !opts.targets.iter().any(|t| t == id) {
            continue;
        }
        let started = match start_target(&ctx, id).await {
            Ok(target) => probe(target).await,
            Err(e) => Err(e),
        };
        match started {
            Ok(target) => {
                eprintln!("started {id}: {}", target.label);
                targets.push(target);
            }
            Err(e) => {
                eprintln!("skipped {id}: {e:#}");
                skipped.push((id.to_string(), format!("{e:#}")));
            }
        }
    }
    let outcome = tokio::select! {
        outcome = measure(&opts, &targets) => outcome,
        _ = tokio::signal::ctrl_c() => Err(anyhow!("interrupted")),
    };
    // Shut everything down whatever happened.
    for target in targets.drain(..) {
        shut_down(target).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let swept = procs::sweep(&run.marker());
    let (results, labels, loads) = outcome?;
    report(&opts, &results, &labels, &loads, &skipped, swept)
}

/// One `echo` call, bounded by [`PROBE_LIMIT`]: a front that cannot answer it is skipped, with
/// the reason, rather than costing [`CALL_LIMIT`] per call for the whole run.
async fn probe(target: Target) -> Result<Target> {
    let message = "probe";
    let answered = match util::object(json!({ "message": message })) {
        Ok(arguments) => tokio::time::timeout(PROBE_LIMIT, target.driver.call(&arguments, message))
            .await
            .unwrap_or_else(|_| Err(anyhow!("no answer within {PROBE_LIMIT:?}"))),
        Err(e) => Err(e),
    };
    match answered {
        Ok(()) => Ok(target),
        Err(e) => {
            shut_down(target).await;
            Err(e.context("the first echo call failed"))
        }
    }
}

/// Close a target's client and stop its processes.
async fn shut_down(mut target: Target) {
    if let Ok(driver) = Arc::try_unwrap(target.driver) {
        driver.close().await;
    }
    for process in &mut target.procs {
        process.stop(Duration::from_secs(5)).await;
    }
}

type Results = BTreeMap<u32, BTreeMap<&'static str, Measured>>;
type Outcome = (
    Results,
    BTreeMap<&'static str, String>,
    BTreeMap<u32, (f64, f64)>,
);

async fn measure(opts: &Options, targets: &[Target]) -> Result<Outcome> {
    if targets.is_empty() {
        bail!("no target could be started");
    }
    let message: Arc<str> = "x".repeat(1024).into();
    let arguments = Arc::new(util::object(json!({ "message": &*message }))?);
    let mut results: Results = BTreeMap::new();
    let mut loads = BTreeMap::new();
    let rounds = opts.calls.div_ceil(opts.block).max(1);
    for &concurrency in &opts.concurrency {
        let load_start = procs::load_now();
        eprintln!(
            "concurrency {concurrency}: warm-up ({} calls per target)",
            opts.warmup
        );
        for target in targets {
            let warm = run_block(target, opts.warmup, concurrency, &arguments, &message).await;
            if warm.errors > 0 {
                eprintln!(
                    "  warning: {} of {} warm-up calls to {} failed: {}",
                    warm.errors,
                    opts.warmup,
                    target.id,
                    warm.first_error.unwrap_or_default()
                );
            }
        }
        let per = results.entry(concurrency).or_default();
        for round in 0..rounds {
            // Rotate the order, so no target always follows the same other one.
            for k in 0..targets.len() {
                let target = &targets[(k + round as usize) % targets.len()];
                let block = target.calls.div_ceil(rounds);
                let done = per
                    .get(target.id)
                    .map_or(0, |m| m.latencies_ms.len() as u32 + m.errors);
                let n = block.min(target.calls.saturating_sub(done));
                if n == 0 {
                    continue;
                }
                let measured = run_block(target, n, concurrency, &arguments, &message).await;
                let entry = per.entry(target.id).or_default();
                entry.latencies_ms.extend(measured.latencies_ms);
                entry.wall += measured.wall;
                entry.errors += measured.errors;
                if entry.first_error.is_none() {
                    entry.first_error = measured.first_error;
                }
            }
            eprintln!("  concurrency {concurrency}: round {}/{rounds}", round + 1);
        }
        loads.insert(concurrency, (load_start, procs::load_now()));
    }
    let labels = targets.iter().map(|t| (t.id, t.label.clone())).collect();
    Ok((results, labels, loads))
}

/// `n` calls to `target` with `concurrency` in flight; each worker is its own task.
async fn run_block(
    target: &Target,
    n: u32,
    concurrency: u32,
    arguments: &Arc<JsonObject>,
    message: &Arc<str>,
) -> Measured {
    let next = Arc::new(AtomicU32::new(0));
    let mut workers = tokio::task::JoinSet::new();
    let start = Instant::now();
    for _ in 0..concurrency.min(n) {
        let next = next.clone();
        let driver = target.driver.clone();
        let arguments = arguments.clone();
        let message = message.clone();
        workers.spawn(async move {
            let mut latencies = Vec::new();
            let mut errors = Vec::new();
            while next.fetch_add(1, Ordering::Relaxed) < n {
                let begin = Instant::now();
                match driver.call(&arguments, &message).await {
                    Ok(()) => latencies.push(begin.elapsed().as_secs_f64() * 1000.0),
                    Err(e) => errors.push(format!("{e:#}")),
                }
            }
            (latencies, errors)
        });
    }
    let mut measured = Measured::default();
    while let Some(joined) = workers.join_next().await {
        match joined {
            Ok((latencies, errors)) => {
                measured.latencies_ms.extend(latencies);
                measured.errors += errors.len() as u32;
                if measured.first_error.is_none() {
                    measured.first_error = errors.into_iter().next();
                }
            }
            Err(e) => {
                measured.errors += 1;
                measured
                    .first_error
                    .get_or_insert(format!("worker failed: {e}"));
            }
        }
    }
    measured.wall = start.elapsed();
    measured
}

async fn start_target(ctx: &Setup<'_>, id: &'static str) -> Result<Target> {
    let fault = ctx.fault.display().to_string();
    let pid_file = ctx.run.file(&format!("{id}.pid")).display().to_string();
    let fault_args = vec![fault.clone(), "--pid-file".to_string(), pid_file.clone()];
    let log = ctx.run.file(&format!("{id}.log"));
    let calls = ctx.opts.calls;
    let port = util::free_port()?;
    let listen = format!("127.0.0.1:{port}");
    let url = format!("http://{listen}/mcp");
    let here = std::env::current_exe().context("cannot tell where this binary is")?;
    let dir = here.parent().context("this binary has no directory")?;

    let (program, args, label): (PathBuf, Vec<String>, String) = match id {
        "baseline" | "baseline-raw" => {
            let label = "fault server over stdio (no hop)";
            return start_stdio(
                ctx,
                id,
                ctx.fault.to_path_buf(),
                fault_args[1..].to_vec(),
                label,
            )
            .await;
        }
        "ours-stdio" | "ours-stdio-raw" => {
            let mut args: Vec<String> = ["wrap", "--log-level", "warn", "--"]
                .map(String::from)
                .to_vec();
            args.extend(fault_args.clone());
            let label = "mcp-supervisor wrap, the stdio face (this build)";
            return start_stdio(ctx, id, supervisor_path(dir)?, args, label).await;
        }
        "pipe-relay" | "pipe-relay-raw" => {
            let mut args = vec!["pipe-relay".to_string(), "--".to_string()];
            args.extend(fault_args.clone());
            let label = "bare pipe relay (mcp-supervisor-bench pipe-relay: bytes copied both ways)";
            return start_stdio(ctx, id, here.clone(), args, label).await;
        }
        "pipe-relay-tokio-raw" => {
            let mut args: Vec<String> = ["pipe-relay", "--tokio-stdio", "--"]
                .map(String::from)
                .to_vec();
            args.extend(fault_args.clone());
            let label =
                "bare pipe relay with --tokio-stdio (its stdin/stdout on tokio's blocking threads)";
            return start_stdio(ctx, id, here.clone(), args, label).await;
        }
        "ours" | "ours-raw" => {
            let supervisor = supervisor_path(dir)?;
            let mut args = util::wrap_http_args(&listen);
            args.extend(fault_args.clone());
            (
                supervisor,
                args,
                "mcp-supervisor wrap --http (this build)".into(),
            )
        }
        "mcp-proxy" | "mcp-proxy-raw" => {
            if !ctx.opts.mcp_proxy.is_file() {
                bail!(
                    "{} is missing: python3 -m venv .venv-bench && .venv-bench/bin/pip install mcp-proxy==0.13.0",
                    ctx.opts.mcp_proxy.display()
                );
            }
            let mut args: Vec<String> = [
                "--log-level",
                "WARNING",
                "--host",
                "127.0.0.1",
                "--port",
                &port.to_string(),
                "--",
            ]
            .map(String::from)
            .to_vec();
            args.extend(fault_args.clone());
            (
                ctx.opts.mcp_proxy.clone(),
                args,
                "mcp-proxy 0.13.0 (PyPI), streamable HTTP /mcp".into(),
            )
        }
        "supergateway" | "supergateway-raw" | "supergateway-stateless" => {
            if !ctx.opts.supergateway.is_file() {
                bail!(
                    "{} is missing: npm ci --prefix tools-bench",
                    ctx.opts.supergateway.display()
                );
            }
            let mut args = vec![
                ctx.opts.supergateway.display().to_string(),
                "--stdio".into(),
                fault_args.join(" "),
                "--outputTransport".into(),
                "streamableHttp".into(),
                "--port".into(),
                port.to_string(),
                "--logLevel".into(),
                "none".into(),
            ];
            let label = if id != "supergateway-stateless" {
                args.push("--stateful".into());
                "supergateway 4.0.0 (npm), streamableHttp --stateful"
            } else {
                "supergateway 4.0.0 (npm), streamableHttp (default: stateless, a server process per request)"
            };
            (ctx.opts.node.clone(), args, label.into())
        }
        "relay" | "relay-raw" => {
            let mut args: Vec<String> = ["relay", "--listen", &listen, "--"]
                .map(String::from)
                .to_vec();
            args.extend(fault_args.clone());
            (
                here.clone(),
                args,
                "bare relay (mcp-supervisor-bench relay)".into(),
            )
        }
        other => bail!("unknown target {other}"),
    };
    let (program, args) = profiled(ctx.opts, id, program, args)?;
    let mut process = Spawned::start(id, &program, &args, Some(&log), false)?;
    process.wait_listening(port, START_LIMIT).await?;
    let raw = id.ends_with("-raw");
    let label = format!(
        "{label}; driven with {}",
        if raw {
            "plain JSON-RPC POSTs (reqwest), SSE read to its end"
        } else {
            "rmcp's streamable-HTTP client"
        }
    );
    // A front may listen before its server is ready: try to connect for a while.
    let deadline = Instant::now() + START_LIMIT;
    let driver = loop {
        let attempt = if raw {
            RawHttp::connect(&url, CALL_LIMIT).await.map(Driver::Raw)
        } else {
            let transport = StreamableHttpClientTransport::from_uri(url.clone());
            match tokio::time::timeout(CALL_LIMIT, ().serve(transport)).await {
                Ok(Ok(client)) => Ok(Driver::Rmcp(client)),
                Ok(Err(e)) => Err(anyhow!("initialize: {e}")),
                Err(_) => Err(anyhow!("initialize took over {CALL_LIMIT:?}")),
            }
        };
        match attempt {
            Ok(driver) => break driver,
            Err(e) if Instant::now() >= deadline => {
                return Err(e.context(format!("{id} at {url}{}", process.log_tail())));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    };
    let calls = if id == "supergateway-stateless" {
        ctx.opts.stateless_calls.min(calls)
    } else {
        calls
    };
    Ok(Target {
        id,
        label,
        calls,
        driver: Arc::new(driver),
        procs: vec![process],
    })
}

/// `mcp-supervisor` beside this binary.
fn supervisor_path(dir: &Path) -> Result<PathBuf> {
    let supervisor = dir.join("mcp-supervisor");
    if !supervisor.is_file() {
        bail!(
            "{} is missing (cargo build --release --workspace --bins)",
            supervisor.display()
        );
    }
    Ok(supervisor)
}

/// `program args` under `--profile-prefix` when `id` is one of [`PROFILED`].
fn profiled(
    opts: &Options,
    id: &str,
    program: PathBuf,
    args: Vec<String>,
) -> Result<(PathBuf, Vec<String>)> {
    match &opts.profile_prefix {
        Some(prefix) if PROFILED.contains(&id) => {
            let mut words = prefix.split_whitespace().map(String::from);
            let first = words.next().context("--profile-prefix is empty")?;
            let mut all: Vec<String> = words.collect();
            all.push(program.display().to_string());
            all.extend(args);
            Ok((PathBuf::from(first), all))
        }
        _ => Ok((program, args)),
    }
}

/// A target driven over the stdin and stdout of `program args`: rmcp's client, or plain JSON-RPC
/// lines for a `-raw` id.
async fn start_stdio(
    ctx: &Setup<'_>,
    id: &'static str,
    program: PathBuf,
    args: Vec<String>,
    label: &str,
) -> Result<Target> {
    let log = ctx.run.file(&format!("{id}.log"));
    let (program, args) = profiled(ctx.opts, id, program, args)?;
    let mut process = Spawned::start(id, &program, &args, Some(&log), true)?;
    let (stdout, stdin) = process.take_pipes().context("stdio not piped")?;
    let raw = id.ends_with("-raw");
    let driver = if raw {
        tokio::time::timeout(START_LIMIT, RawStdio::connect(stdout, stdin, CALL_LIMIT))
            .await
            .map_err(|_| anyhow!("initialize took over {START_LIMIT:?}"))
            .and_then(|connected| connected)
            .map(Driver::RawStdio)
    } else {
        match tokio::time::timeout(START_LIMIT, ().serve((stdout, stdin))).await {
            Ok(Ok(client)) => Ok(Driver::Rmcp(client)),
            Ok(Err(e)) => Err(anyhow!("initialize: {e}")),
            Err(_) => Err(anyhow!("initialize took over {START_LIMIT:?}")),
        }
    };
    let driver = driver.map_err(|e| e.context(format!("{id}{}", process.log_tail())))?;
    let client = if raw {
        "plain JSON-RPC lines over its stdin/stdout"
    } else {
        "rmcp's client over its stdin/stdout"
    };
    Ok(Target {
        id,
        label: format!("{label}; driven with {client}"),
        calls: ctx.opts.calls,
        driver: Arc::new(driver),
        procs: vec![process],
    })
}

struct Row {
    id: &'static str,
    stats: Stats,
    added_median: f64,
    added_p99: f64,
    per_sec: f64,
    errors: u32,
}

fn report(
    opts: &Options,
    results: &Results,
    labels: &BTreeMap<&'static str, String>,
    loads: &BTreeMap<u32, (f64, f64)>,
    skipped: &[(String, String)],
    swept: usize,
) -> Result<Value> {
    println!(
        "peers: echo with a 1 KiB message; {} calls per target per concurrency ({} for supergateway-stateless), alternating in {} rounds, {} warm-up calls",
        opts.calls,
        opts.stateless_calls.min(opts.calls),
        opts.calls.div_ceil(opts.block),
        opts.warmup
    );
    for (id, label) in labels {
        println!("  {id:<24} {label}");
    }
    for (id, why) in skipped {
        println!("  {id:<24} SKIPPED: {why}");
    }
    let mut json_levels = serde_json::Map::new();
    let mut rows_by_level: BTreeMap<u32, Vec<Row>> = BTreeMap::new();
    for (&concurrency, per) in results {
        let mut baselines = BTreeMap::new();
        for (suffix, baseline_id) in FAMILIES {
            if let Some(m) = per.get(baseline_id).filter(|m| !m.latencies_ms.is_empty()) {
                baselines.insert(suffix, Stats::of_ms(m.latencies_ms.clone())?);
            }
        }
        let mut rows = Vec::new();
        for id in ALL {
            let Some(m) = per.get(id) else { continue };
            if m.latencies_ms.is_empty() {
                continue;
            }
            let stats = Stats::of_ms(m.latencies_ms.clone())?;
            let (added_median, added_p99) =
                baselines.get(family(id)).map_or((f64::NAN, f64::NAN), |b| {
                    (stats.median - b.median, stats.p99 - b.p99)
                });
            rows.push(Row {
                id,
                stats,
                added_median,
                added_p99,
                per_sec: m.latencies_ms.len() as f64 / m.wall.as_secs_f64(),
                errors: m.errors,
            });
        }
        let (load_start, load_end) = loads.get(&concurrency).copied().unwrap_or_default();
        let table: Vec<Vec<String>> = rows
            .iter()
            .map(|r| {
                vec![
                    r.id.to_string(),
                    r.stats.n.to_string(),
                    format!("{:.3}", r.stats.median),
                    format!("{:.3}", r.stats.p99),
                    format!("{:+.3}", r.added_median),
                    format!("{:+.3}", r.added_p99),
                    format!("{:.0}", r.per_sec),
                    r.errors.to_string(),
                ]
            })
            .collect();
        util::print_table(
            &format!(
                "concurrency {concurrency} (load average {load_start:.2} at the start, {load_end:.2} at the end)"
            ),
            &util::TARGETS_HEADER,
            &table,
        );
        for (id, m) in per {
            if let Some(error) = &m.first_error {
                println!("  {id}: first error: {error}");
            }
        }
        let mut level = serde_json::Map::new();
        for r in &rows {
            level.insert(
                r.id.to_string(),
                json!({
                    "ms": r.stats.json(),
                    "added_median_ms": util::round3(r.added_median),
                    "added_p99_ms": util::round3(r.added_p99),
                    "calls_per_sec": r.per_sec.round(),
                    "errors": r.errors,
                }),
            );
        }
        level.insert(
            "loadavg".into(),
            json!({ "start": load_start, "end": load_end }),
        );
        json_levels.insert(concurrency.to_string(), Value::Object(level));
        rows_by_level.insert(concurrency, rows);
    }
    let verdicts = verdicts(&rows_by_level);
    println!("\ntargets");
    for v in &verdicts {
        println!(
            "  {}: {} — {}",
            v["target"].as_str().unwrap_or_default(),
            v["verdict"].as_str().unwrap_or_default(),
            v["figures"].as_str().unwrap_or_default()
        );
    }
    if let Some(path) = &opts.svg {
        match crate::plot::peers_cdf(path, results) {
            Ok(()) => println!("\n  latency distributions: {}", path.display()),
            Err(e) => println!("\n  no chart: {e:#}"),
        }
    }
    if swept > 0 {
        println!(
            "\n  warning: {swept} process(es) of the run were still alive at the end and were killed"
        );
    }
    Ok(json!({
        "bench": "peers",
        "calls": opts.calls,
        "stateless_calls": opts.stateless_calls.min(opts.calls),
        "warmup": opts.warmup,
        "message_bytes": 1024,
        "levels": json_levels,
        "skipped": skipped.iter().map(|(id, why)| json!({ "target": id, "why": why })).collect::<Vec<_>>(),
        "verdicts": verdicts,
        "leftover_processes_killed": swept,
    }))
}

/// The targets of the issue, at each concurrency, within each family of clients.
fn verdicts(levels: &BTreeMap<u32, Vec<Row>>) -> Vec<Value> {
    let mut out = Vec::new();
    let verdict = |ok: bool| if ok { "met" } else { "missed" };
    for (&concurrency, rows) in levels {
        for (suffix, _) in FAMILIES {
            let rows: Vec<&Row> = rows.iter().filter(|r| family(r.id) == suffix).collect();
            let get = |id: &str| rows.iter().copied().find(|r| r.id == id);
            let peers = || rows.iter().copied().filter(|r| PEERS.contains(&r.id));
            let best_added = peers().min_by(|a, b| a.added_median.total_cmp(&b.added_median));
            let best_rate = peers().max_by(|a, b| a.per_sec.total_cmp(&b.per_sec));
            let ours_id = format!("ours{suffix}");
            let relay_id = format!("relay{suffix}");
            let Some(ours) = get(&ours_id) else { continue };
            if let Some(best) = best_added {
                let ok = ours.added_median <= best.added_median / 5.0;
                out.push(json!({
                    "target": format!("c={concurrency}: {ours_id} added median <= 1/5 of the best peer's"),
                    "verdict": verdict(ok),
                    "figures": format!(
                        "{ours_id} +{:.3} ms, best peer {} +{:.3} ms (1/5 = {:.3} ms; ratio {:.1}x)",
                        ours.added_median, best.id, best.added_median, best.added_median / 5.0,
                        best.added_median / ours.added_median
                    ),
                }));
            }
            if let Some(best) = best_rate {
                let ok = ours.per_sec >= 5.0 * best.per_sec;
                // The issue sets this target at 64; lower levels are shown for reference.
                let reference = if concurrency < 64 {
                    " (reference; the target is at 64)"
                } else {
                    ""
                };
                out.push(json!({
                    "target": format!("c={concurrency}: {ours_id} throughput >= 5x the best peer's{reference}"),
                    "verdict": verdict(ok),
                    "figures": format!(
                        "{ours_id} {:.0} calls/s, best peer {} {:.0} calls/s (ratio {:.2}x)",
                        ours.per_sec, best.id, best.per_sec, ours.per_sec / best.per_sec
                    ),
                }));
            }
            if let Some(relay) = get(&relay_id) {
                let ok = ours.added_median <= 1.1 * relay.added_median;
                out.push(json!({
                    "target": format!("c={concurrency}: {ours_id} added median <= 1.1x {relay_id}'s"),
                    "verdict": verdict(ok),
                    "figures": format!(
                        "{ours_id} +{:.3} ms, {relay_id} +{:.3} ms (ratio {:.2}x); p99: +{:.3} vs +{:.3} ms",
                        ours.added_median, relay.added_median,
                        ours.added_median / relay.added_median,
                        ours.added_p99, relay.added_p99
                    ),
                }));
                let ok = ours.per_sec >= 0.9 * relay.per_sec;
                out.push(json!({
                    "target": format!("c={concurrency}: {ours_id} throughput >= 0.9x {relay_id}'s"),
                    "verdict": verdict(ok),
                    "figures": format!(
                        "{ours_id} {:.0} calls/s, {relay_id} {:.0} calls/s (ratio {:.2}x)",
                        ours.per_sec, relay.per_sec, ours.per_sec / relay.per_sec
                    ),
                }));
            }
        }
        out.extend(stdio_verdicts(concurrency, rows));
    }
    out
}

/// The stdio face's targets, within each family: its median at concurrency 1 at most 1.5x the
/// direct baseline's, its throughput at 64 at least 0.8x the baseline's; the pipe relay (the
/// floor of a stdio hop) beside. Other levels are shown for reference.
fn stdio_verdicts(concurrency: u32, rows: &[Row]) -> Vec<Value> {
    let mut out = Vec::new();
    let verdict = |ok: bool| if ok { "met" } else { "missed" };
    let reference = |at: u32| {
        if concurrency == at {
            String::new()
        } else {
            format!(" (reference; the target is at {at})")
        }
    };
    for (suffix, baseline_id) in FAMILIES {
        let get = |id: &str| rows.iter().find(|r| r.id == id);
        let ours_id = format!("ours-stdio{suffix}");
        let (Some(ours), Some(base)) = (get(&ours_id), get(baseline_id)) else {
            continue;
        };
        let pipes: Vec<&Row> = [
            format!("pipe-relay{suffix}"),
            format!("pipe-relay-tokio{suffix}"),
        ]
        .iter()
        .filter_map(|id| get(id))
        .collect();
        let ratio = ours.stats.median / base.stats.median;
        let beside: String = pipes
            .iter()
            .map(|p| {
                format!(
                    "; {} {:.3} ms ({:.2}x)",
                    p.id,
                    p.stats.median,
                    p.stats.median / base.stats.median
                )
            })
            .collect();
        out.push(json!({
            "target": format!(
                "c={concurrency}: {ours_id} median <= 1.5x {baseline_id}'s{}",
                reference(1)
            ),
            "verdict": verdict(ratio <= 1.5),
            "figures": format!(
                "{ours_id} {:.3} ms, {baseline_id} {:.3} ms (ratio {ratio:.2}x){beside}",
                ours.stats.median, base.stats.median
            ),
        }));
        let ratio = ours.per_sec / base.per_sec;
        let beside: String = pipes
            .iter()
            .map(|p| {
                format!(
                    "; {} {:.0} calls/s ({:.2}x)",
                    p.id,
                    p.per_sec,
                    p.per_sec / base.per_sec
                )
            })
            .collect();
        out.push(json!({
            "target": format!(
                "c={concurrency}: {ours_id} throughput >= 0.8x {baseline_id}'s{}",
                reference(64)
            ),
            "verdict": verdict(ratio >= 0.8),
            "figures": format!(
                "{ours_id} {:.0} calls/s, {baseline_id} {:.0} calls/s (ratio {ratio:.2}x){beside}",
                ours.per_sec, base.per_sec
            ),
        }));
    }
    out
}
