//! `ts-peers`: the targets of issue 17 measured from outside with the TypeScript SDK's client
//! (`@modelcontextprotocol/sdk`, pinned in `tools/package.json`, the client of Electron hosts):
//! `echo` of a 1 KiB message to `@modelcontextprotocol/server-everything` (stdio), through
//!
//! | id | what | the client connects with |
//! |---|---|---|
//! | `direct` | server-everything, spawned by the client itself (no hop) | `StdioClientTransport` |
//! | `ours-stdio` | `mcp-supervisor wrap -- server-everything` | `StdioClientTransport` |
//! | `pipe-relay-c` | `pipe-relay-c server-everything`: the C relay of `crates/bench/c/pipe_relay.c` (`poll()`, 64 KiB `read`/`write`), built with `cc -O2` at the start of the run | `StdioClientTransport` |
//! | `pipe-relay` | `mcp-supervisor-bench pipe-relay -- server-everything` (bytes copied both ways by `tokio::io::copy`) | `StdioClientTransport` |
//! | `parse-relay` | `mcp-supervisor-bench pipe-relay --map-ids -- server-everything`: lines framed, each envelope read, request ids swapped both ways, on one thread (the floor of a hop that parses; run only when named) | `StdioClientTransport` |
//! | `ours-http` | `mcp-supervisor wrap --http 127.0.0.1:PORT -- server-everything` | `StreamableHTTPClientTransport` |
//! | `relay-http` | `mcp-supervisor-bench relay --listen 127.0.0.1:PORT -- server-everything` | `StreamableHTTPClientTransport` |
//!
//! Each target has its own long-lived client process (`crates/bench/ts/ts-client.mjs` under the
//! pinned node), connected once; the bench asks each in turn for a block of calls (`{"calls":N,
//! "concurrency":C}` on its stdin) and reads back every call's latency and the block's wall time,
//! in rounds A B C D E A B C D E ... Throughput is the successful calls over the summed wall time
//! of the blocks. Beside it, the hop's CPU per call (`hop_cpu_us_per_call`): what the process
//! between the client and the server (our proxy, or the relay) used from the first measured
//! round to the last (`/proc/PID/task/*/schedstat`), over the calls. It is the steadier figure:
//! on two cores, CPU the hop takes is CPU the client and the server do not get.
//!
//! The stdio face has two floors, shown side by side (`stdio floors` under each table,
//! `stdio_floors` in the JSON): the C relay (the target's floor, the one measured from outside)
//! and the tokio relay (kept as a second floor: it costs as much CPU per call as `wrap`, so alone
//! it flatters the stdio face). The verdicts: the stdio face's median at concurrency 1 at most
//! 1.15x the C relay's (and, beside it, the same ratio to the tokio relay), its throughput at 64
//! at least 0.9x each relay's; the HTTP face's added median (its median minus `direct`'s) at
//! concurrency 1 at most 1.1x the relay's added median, its throughput at 64 at least 0.9x the
//! relay's. Each verdict also gives the range and the median of the same ratio over the rounds.
//!
//! Every process of the run carries the run's directory in its command line (`--marker` of the
//! client, `--diagnostic-dir` of each server-everything's node), so none is left behind: each
//! client is closed (which stops its stdio target), then stopped by pid with its process group,
//! each HTTP front likewise, then whatever still carries the marker is killed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{ChildStdin, ChildStdout};
use tokio::time::Instant;

use crate::procs::{self, RunDir, Spawned};
use crate::util::{self, Stats};

/// Every target, in the order of the rounds and tables. `ours-stdio-b` (another build's
/// `wrap`, given with `--ours-b`) is for comparing two builds in one run, round by round; it is
/// not run unless asked for.
pub const ALL: [&str; 8] = [
    "direct",
    "ours-stdio",
    "ours-stdio-b",
    "pipe-relay-c",
    "pipe-relay",
    "parse-relay",
    "ours-http",
    "relay-http",
];
/// The targets run when none are named: all but `ours-stdio-b` and `parse-relay`.
pub const DEFAULT: [&str; 6] = [
    "direct",
    "ours-stdio",
    "pipe-relay-c",
    "pipe-relay",
    "ours-http",
    "relay-http",
];
/// The stdio face's floors: (target, what it is), the target's own floor first.
const STDIO_FLOORS: [(&str, &str); 2] = [
    ("pipe-relay-c", "the C pipe relay"),
    ("pipe-relay", "the tokio pipe relay"),
];
/// The floors shown side by side when they ran: the two of the verdicts, and the floor of a hop
/// that parses (no verdict of its own: it says how much of the gap any parsing hop pays).
const SHOWN_FLOORS: [&str; 3] = ["pipe-relay-c", "pipe-relay", "parse-relay"];
/// Bound of a target's start (front listening, client connected, first call answered).
const START_LIMIT: Duration = Duration::from_secs(60);
/// Bound of one call inside the client (`--call-ms`).
const CALL_LIMIT_MS: u64 = 30_000;
/// Bound of one block of calls, whatever its size.
const BLOCK_LIMIT: Duration = Duration::from_secs(600);

pub struct Options {
    /// Measured calls per target at concurrency 1.
    pub calls: u32,
    /// Measured calls per target at each concurrency above 1.
    pub calls_concurrent: u32,
    pub concurrency: Vec<u32>,
    /// Rounds at concurrency 1.
    pub rounds: u32,
    /// Rounds at each concurrency above 1.
    pub rounds_concurrent: u32,
    pub warmup: u32,
    pub targets: Vec<String>,
    pub node: PathBuf,
    pub script: PathBuf,
    pub modules: PathBuf,
    pub everything: PathBuf,
    /// A built C relay to use for `pipe-relay-c`; without it the bench builds its own.
    pub c_relay: Option<PathBuf>,
    /// Another build of `mcp-supervisor`, for the target `ours-stdio-b`.
    pub ours_b: Option<PathBuf>,
}

impl Options {
    /// Measured calls per target at `concurrency`.
    pub(crate) fn calls_at(&self, concurrency: u32) -> u32 {
        match concurrency {
            0 | 1 => self.calls,
            _ => self.calls_concurrent,
        }
    }

    /// Rounds at `concurrency` (never more than calls).
    pub(crate) fn rounds_at(&self, concurrency: u32) -> u32 {
        let rounds = match concurrency {
            0 | 1 => self.rounds,
            _ => self.rounds_concurrent,
        };
        rounds.clamp(1, self.calls_at(concurrency))
    }
}

/// What the client answers for one block.
struct Block {
    latencies_ms: Vec<f64>,
    wall_ms: f64,
    errors: u32,
    first_error: Option<String>,
}

/// One target: its client process (and the HTTP front, if any).
pub(crate) struct Target {
    pub(crate) id: &'static str,
    pub(crate) label: String,
    pub(crate) ready: Value,
    client: Spawned,
    stdin: Option<ChildStdin>,
    lines: Lines<BufReader<ChildStdout>>,
    front: Option<Spawned>,
    /// The process between the client and the server, whose CPU is measured: the HTTP front, or
    /// the stdio hop (the client's one child); `None` for `direct`.
    hop: Option<u32>,
}

impl Target {
    /// `calls` calls with `concurrency` in flight, bounded by [`BLOCK_LIMIT`].
    async fn block(&mut self, calls: u32, concurrency: u32) -> Result<Block> {
        let stdin = self
            .stdin
            .as_mut()
            .context("the client's stdin is closed")?;
        let ask = format!(
            "{}\n",
            json!({ "calls": calls, "concurrency": concurrency })
        );
        stdin
            .write_all(ask.as_bytes())
            .await
            .with_context(|| format!("{}: cannot write to the client", self.id))?;
        stdin.flush().await?;
        let line = tokio::time::timeout(BLOCK_LIMIT, self.lines.next_line())
            .await
            .map_err(|_| anyhow!("{}: no answer within {BLOCK_LIMIT:?}", self.id))?
            .with_context(|| format!("{}: cannot read the client", self.id))?
            .with_context(|| format!("{}: the client ended{}", self.id, self.client.log_tail()))?;
        let value: Value = serde_json::from_str(&line)
            .with_context(|| format!("{}: not JSON: {line:.200}", self.id))?;
        let latencies_ms = value["latencies_ms"]
            .as_array()
            .with_context(|| format!("{}: no latencies_ms in {line:.200}", self.id))?
            .iter()
            .map(|v| v.as_f64().context("a latency is not a number"))
            .collect::<Result<Vec<f64>>>()?;
        Ok(Block {
            latencies_ms,
            wall_ms: value["wall_ms"]
                .as_f64()
                .with_context(|| format!("{}: no wall_ms in {line:.200}", self.id))?,
            errors: value["errors"]
                .as_u64()
                .and_then(|e| u32::try_from(e).ok())
                .unwrap_or(0),
            first_error: value["first_error"].as_str().map(String::from),
        })
    }

    /// Close the client (it closes its transport, which stops a stdio target), then stop it and
    /// the front by pid, with their process groups.
    pub(crate) async fn shut_down(mut self) {
        drop(self.stdin.take());
        let _ = self.client.wait_exit(Duration::from_secs(8)).await;
        self.client.stop(Duration::from_secs(5)).await;
        if let Some(front) = &mut self.front {
            front.stop(Duration::from_secs(5)).await;
        }
    }
}

/// Per target: every latency, summed wall time, errors, and each round's (median, calls/s).
#[derive(Default)]
pub(crate) struct Measured {
    pub(crate) latencies_ms: Vec<f64>,
    pub(crate) wall_ms: f64,
    pub(crate) errors: u32,
    pub(crate) first_error: Option<String>,
    pub(crate) rounds: Vec<(f64, f64)>,
    /// CPU the hop used over the measured rounds (other targets' rounds included, when it idles).
    pub(crate) hop_cpu_ns: Option<u64>,
}

impl Measured {
    fn add(&mut self, block: Block) -> Result<()> {
        let ok = block.latencies_ms.len() as f64;
        if !block.latencies_ms.is_empty() {
            let median = Stats::of_ms(block.latencies_ms.clone())?.median;
            self.rounds
                .push((median, ok * 1000.0 / block.wall_ms.max(f64::MIN_POSITIVE)));
        }
        self.latencies_ms.extend(block.latencies_ms);
        self.wall_ms += block.wall_ms;
        self.errors += block.errors;
        if self.first_error.is_none() {
            self.first_error = block.first_error;
        }
        Ok(())
    }

    pub(crate) fn per_sec(&self) -> f64 {
        self.latencies_ms.len() as f64 * 1000.0 / self.wall_ms.max(f64::MIN_POSITIVE)
    }

    /// The hop's CPU per measured call, in microseconds.
    pub(crate) fn hop_us_per_call(&self) -> Option<f64> {
        let calls = self.latencies_ms.len() + self.errors as usize;
        (calls > 0).then_some(())?;
        Some(self.hop_cpu_ns? as f64 / 1000.0 / calls as f64)
    }
}

pub(crate) type Results = BTreeMap<u32, BTreeMap<&'static str, Measured>>;

impl Options {
    /// The client, its script and server-everything are installed, and each concurrency level
    /// is in range; an error names the flag.
    pub(crate) fn check(&self) -> Result<()> {
        for (what, path) in [
            ("--node", &self.node),
            ("--script", &self.script),
            ("--everything", &self.everything),
        ] {
            if !path.is_file() {
                bail!(
                    "{what} {} is missing (scripts/install-test-deps.sh installs tools/node_modules)",
                    path.display()
                );
            }
        }
        if let Some(bad) = self.concurrency.iter().find(|&&c| !(1..=4096).contains(&c)) {
            bail!("--concurrency {bad}: each level must be in 1..=4096");
        }
        Ok(())
    }
}

pub async fn run(opts: Options) -> Result<Value> {
    opts.check()?;
    if let Some(unknown) = opts.targets.iter().find(|t| !ALL.contains(&t.as_str())) {
        bail!("unknown target {unknown} (the targets: {})", ALL.join(", "));
    }
    let run = RunDir::new("ts-peers")?;
    let c_relay = match opts.targets.iter().any(|t| t == "pipe-relay-c") {
        true => {
            let relay = crate::c_relay::resolve(opts.c_relay.as_deref(), &run.path)?;
            eprintln!("C pipe relay: {}", relay.display());
            Some(relay)
        }
        false => None,
    };
    let mut targets = Vec::new();
    let mut failed = None;
    for id in ALL {
        if !opts.targets.iter().any(|t| t == id) {
            continue;
        }
        match start(&opts, &run, id, c_relay.as_deref()).await {
            Ok(target) => {
                eprintln!("started {id}: {}", target.label);
                targets.push(target);
            }
            Err(e) => {
                failed = Some(e.context(format!("cannot start {id}")));
                break;
            }
        }
    }
    let outcome = match failed {
        Some(e) => Err(e),
        None => tokio::select! {
            outcome = measure(&opts, &mut targets) => outcome,
            _ = tokio::signal::ctrl_c() => Err(anyhow!("interrupted")),
        },
    };
    let labels: Vec<(&'static str, String)> =
        targets.iter().map(|t| (t.id, t.label.clone())).collect();
    let ready = targets.first().map(|t| t.ready.clone()).unwrap_or_default();
    for target in targets.drain(..) {
        target.shut_down().await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let swept = procs::sweep(&run.marker());
    let (results, loads) = outcome?;
    report(&opts, &results, &labels, &ready, &loads, swept)
}

/// Start one target: its front (HTTP) and its client, which connects and makes a first call.
pub(crate) async fn start(
    opts: &Options,
    run: &RunDir,
    id: &'static str,
    c_relay: Option<&Path>,
) -> Result<Target> {
    let here = std::env::current_exe().context("cannot tell where this binary is")?;
    let supervisor = util::supervisor_beside()?;
    let everything = everything_command(opts, run);
    let with = |head: &[&str], tail: &[String]| -> Vec<String> {
        let mut all: Vec<String> = head.iter().map(|s| s.to_string()).collect();
        all.extend(tail.iter().cloned());
        all
    };
    let supervisor_s = supervisor.display().to_string();
    let here_s = here.display().to_string();
    let (stdio, http, label): (Option<Vec<String>>, Http, &str) = match id {
        "direct" => (
            Some(everything.clone()),
            None,
            "server-everything spawned by the client (no hop)",
        ),
        "ours-stdio" => (
            Some(with(
                &[&supervisor_s, "wrap", "--log-level", "warn", "--"],
                &everything,
            )),
            None,
            "mcp-supervisor wrap (the stdio face, this build)",
        ),
        "ours-stdio-b" => {
            let other = opts.ours_b.as_ref().context(
                "the target ours-stdio-b needs --ours-b PATH (another build of mcp-supervisor)",
            )?;
            (
                Some(with(
                    &[
                        &other.display().to_string(),
                        "wrap",
                        "--log-level",
                        "warn",
                        "--",
                    ],
                    &everything,
                )),
                None,
                "mcp-supervisor wrap of another build (--ours-b)",
            )
        }
        "pipe-relay-c" => {
            let relay = c_relay.context("the C pipe relay was not built")?;
            (
                Some(with(&[&relay.display().to_string()], &everything)),
                None,
                "C pipe relay (crates/bench/c/pipe_relay.c, cc -O2: poll() and 64 KiB read/write)",
            )
        }
        "pipe-relay" => (
            Some(with(&[&here_s, "pipe-relay", "--"], &everything)),
            None,
            "tokio pipe relay (mcp-supervisor-bench pipe-relay: tokio::io::copy both ways)",
        ),
        "parse-relay" => (
            Some(with(
                &[&here_s, "pipe-relay", "--map-ids", "--"],
                &everything,
            )),
            None,
            "parsing relay (mcp-supervisor-bench pipe-relay --map-ids: lines, envelopes, ids swapped, one thread)",
        ),
        "ours-http" | "relay-http" => {
            let port = util::free_port()?;
            let listen = format!("127.0.0.1:{port}");
            let (program, args, label) = if id == "ours-http" {
                (
                    supervisor.clone(),
                    [util::wrap_http_args(&listen), everything.clone()].concat(),
                    "mcp-supervisor wrap --http (this build)",
                )
            } else {
                (
                    here.clone(),
                    with(&["relay", "--listen", &listen, "--"], &everything),
                    "bare HTTP->stdio relay (mcp-supervisor-bench relay)",
                )
            };
            (None, Some((program, args, port)), label)
        }
        other => bail!("unknown target {other}"),
    };
    launch(opts, run, id, label, stdio, http, &[]).await
}

/// server-everything over stdio, as a command line; the run's marker rides in node's (unused)
/// diagnostic directory.
pub(crate) fn everything_command(opts: &Options, run: &RunDir) -> Vec<String> {
    vec![
        opts.node.display().to_string(),
        format!("--diagnostic-dir={}", run.marker()),
        opts.everything.display().to_string(),
        "stdio".into(),
    ]
}

/// An HTTP front to start: its program, its arguments and the port it listens on.
pub(crate) type Http = Option<(PathBuf, Vec<String>, u16)>;

/// Start one target: its HTTP front (if any: `http`), then its client, on `stdio` (a command
/// the client spawns) or on the front's `/mcp`, with `client_extra` added to the client's
/// options; the client connects and makes a first call.
pub(crate) async fn launch(
    opts: &Options,
    run: &RunDir,
    id: &'static str,
    label: &str,
    stdio: Option<Vec<String>>,
    http: Http,
    client_extra: &[String],
) -> Result<Target> {
    let marker = run.marker();
    let log = run.file(&format!("{id}.log"));
    let with = |head: &[&str], tail: &[String]| -> Vec<String> {
        let mut all: Vec<String> = head.iter().map(|s| s.to_string()).collect();
        all.extend(tail.iter().cloned());
        all
    };
    let mut front = None;
    let mut client_tail = vec!["--stdio".to_string(), "--".to_string()];
    if let Some(command) = stdio {
        client_tail.extend(command);
    }
    if let Some((program, args, port)) = http {
        let mut process = Spawned::start(id, &program, &args, Some(&log), false)?;
        process.wait_listening(port, START_LIMIT).await?;
        front = Some(process);
        client_tail = vec!["--url".into(), format!("http://127.0.0.1:{port}/mcp")];
    }
    let client_args = with(
        &[
            &opts.script.display().to_string(),
            "--modules",
            &opts.modules.display().to_string(),
            "--marker",
            &marker,
            "--call-ms",
            &CALL_LIMIT_MS.to_string(),
        ],
        &[client_extra, &client_tail].concat(),
    );
    // A front may listen before its server is ready: start the client again for a while.
    let deadline = Instant::now() + START_LIMIT;
    loop {
        let attempt = start_client(opts, id, &client_args, &log).await;
        match attempt {
            Ok((client, stdin, lines, ready)) => {
                let hop = match (&front, stdio_hop(id)) {
                    (Some(front), _) => Some(front.pid()),
                    (None, true) => {
                        match mcp_supervisor_testkit::children_of(client.pid()).as_slice() {
                            [one] => Some(*one),
                            other => {
                                eprintln!(
                                    "  warning: {id}: the client has {} children, not one; its hop's CPU is not measured",
                                    other.len()
                                );
                                None
                            }
                        }
                    }
                    (None, false) => None,
                };
                let label = format!(
                    "{label}; TypeScript SDK {} on node {}",
                    ready["sdk"].as_str().unwrap_or("?"),
                    ready["node"].as_str().unwrap_or("?")
                );
                return Ok(Target {
                    id,
                    label,
                    ready,
                    client,
                    stdin: Some(stdin),
                    lines,
                    front,
                    hop,
                });
            }
            Err(e) if Instant::now() >= deadline || front.is_none() => {
                let tail = front.as_ref().map(Spawned::log_tail).unwrap_or_default();
                if let Some(front) = &mut front {
                    front.stop(Duration::from_secs(5)).await;
                }
                return Err(e.context(tail));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// Whether the target's client starts a hop (a proxy or relay) rather than the server itself.
fn stdio_hop(id: &str) -> bool {
    matches!(
        id,
        "ours-stdio" | "ours-stdio-b" | "pipe-relay-c" | "pipe-relay" | "parse-relay"
    )
}

type Client = (Spawned, ChildStdin, Lines<BufReader<ChildStdout>>, Value);

/// The node client, connected (its `ready` line read).
async fn start_client(opts: &Options, id: &str, args: &[String], log: &Path) -> Result<Client> {
    let mut client = Spawned::start(&format!("{id} client"), &opts.node, args, Some(log), true)?;
    let (stdout, stdin) = client.take_pipes().context("stdio not piped")?;
    let mut lines = BufReader::new(stdout).lines();
    let line = match tokio::time::timeout(START_LIMIT, lines.next_line()).await {
        Ok(Ok(Some(line))) => line,
        Ok(Ok(None)) => {
            let tail = client.log_tail();
            client.stop(Duration::from_secs(5)).await;
            bail!("{id}: the client ended before it was ready{tail}");
        }
        Ok(Err(e)) => {
            client.stop(Duration::from_secs(5)).await;
            bail!("{id}: cannot read the client: {e}");
        }
        Err(_) => {
            let tail = client.log_tail();
            client.stop(Duration::from_secs(5)).await;
            bail!("{id}: the client was not ready within {START_LIMIT:?}{tail}");
        }
    };
    let ready: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
    if ready["ready"] != Value::Bool(true) {
        client.stop(Duration::from_secs(5)).await;
        bail!("{id}: unexpected first line from the client: {line:.200}");
    }
    Ok((client, stdin, lines, ready))
}

pub(crate) type Outcome = (Results, BTreeMap<u32, (f64, f64)>);

pub(crate) async fn measure(opts: &Options, targets: &mut [Target]) -> Result<Outcome> {
    if targets.is_empty() {
        bail!("no target selected (--targets)");
    }
    let mut results: Results = BTreeMap::new();
    let mut loads = BTreeMap::new();
    for &concurrency in &opts.concurrency {
        let (calls, rounds) = (opts.calls_at(concurrency), opts.rounds_at(concurrency));
        let load_start = procs::load_now();
        eprintln!(
            "concurrency {concurrency}: warm-up ({} calls per target)",
            opts.warmup
        );
        for target in targets.iter_mut() {
            if opts.warmup > 0 {
                let warm = target.block(opts.warmup, concurrency).await?;
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
        }
        let per = results.entry(concurrency).or_default();
        let cpu_at_start: Vec<Option<u64>> = targets
            .iter()
            .map(|t| t.hop.and_then(procs::cpu_ns))
            .collect();
        for round in 0..rounds {
            // This round's share of the calls: the remainder goes to the first rounds.
            let n = calls / rounds + u32::from(round < calls % rounds);
            for target in targets.iter_mut() {
                let block = target.block(n, concurrency).await?;
                per.entry(target.id).or_default().add(block)?;
            }
            eprintln!("  concurrency {concurrency}: round {}/{rounds}", round + 1);
        }
        for (target, start) in targets.iter().zip(cpu_at_start) {
            let end = target.hop.and_then(procs::cpu_ns);
            if let (Some(start), Some(end), Some(measured)) = (start, end, per.get_mut(target.id)) {
                measured.hop_cpu_ns = Some(end.saturating_sub(start));
            }
        }
        loads.insert(concurrency, (load_start, procs::load_now()));
    }
    Ok((results, loads))
}

/// One target at one concurrency: its latencies, and what it adds over `direct`'s.
pub(crate) struct Row<'a> {
    pub(crate) id: &'static str,
    pub(crate) stats: Stats,
    pub(crate) measured: &'a Measured,
    pub(crate) added_median: f64,
    pub(crate) added_p99: f64,
}

/// The rows of the targets `ids` (in that order) that measured something at one level.
pub(crate) fn level_rows<'a>(
    per: &'a BTreeMap<&'static str, Measured>,
    ids: &[&'static str],
) -> Result<Vec<Row<'a>>> {
    let direct = per
        .get("direct")
        .filter(|m| !m.latencies_ms.is_empty())
        .map(|m| Stats::of_ms(m.latencies_ms.clone()))
        .transpose()?;
    let mut rows = Vec::new();
    for &id in ids {
        let Some(measured) = per.get(id).filter(|m| !m.latencies_ms.is_empty()) else {
            continue;
        };
        let stats = Stats::of_ms(measured.latencies_ms.clone())?;
        let (added_median, added_p99) = direct.map_or((f64::NAN, f64::NAN), |d| {
            (stats.median - d.median, stats.p99 - d.p99)
        });
        rows.push(Row {
            id,
            stats,
            measured,
            added_median,
            added_p99,
        });
    }
    Ok(rows)
}

/// One level's table, its hop CPU and first errors; `load`: the load average at its start and
/// end.
pub(crate) fn print_level(concurrency: u32, rows: &[Row], (load_start, load_end): (f64, f64)) {
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
                format!("{:.0}", r.measured.per_sec()),
                r.measured.errors.to_string(),
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
    let hop_cpu: Vec<String> = rows
        .iter()
        .filter_map(|r| Some(format!("{} {:.1}", r.id, r.measured.hop_us_per_call()?)))
        .collect();
    if !hop_cpu.is_empty() {
        println!("  hop CPU per call, µs: {}", hop_cpu.join(", "));
    }
    for r in rows {
        if let Some(error) = &r.measured.first_error {
            println!("  {}: first error: {error}", r.id);
        }
    }
}

/// One level's figures as JSON, by target, with its load average.
pub(crate) fn level_json(
    rows: &[Row],
    (load_start, load_end): (f64, f64),
) -> serde_json::Map<String, Value> {
    let mut level = serde_json::Map::new();
    for r in rows {
        level.insert(
            r.id.to_string(),
            json!({
                "ms": r.stats.json(),
                "added_median_ms": util::round3(r.added_median),
                "added_p99_ms": util::round3(r.added_p99),
                "calls_per_sec": r.measured.per_sec().round(),
                "hop_cpu_us_per_call": r.measured.hop_us_per_call().map(util::round3),
                "errors": r.measured.errors,
            }),
        );
    }
    level.insert(
        "loadavg".into(),
        json!({ "start": load_start, "end": load_end }),
    );
    level
}

fn report(
    opts: &Options,
    results: &Results,
    labels: &[(&'static str, String)],
    ready: &Value,
    loads: &BTreeMap<u32, (f64, f64)>,
    swept: usize,
) -> Result<Value> {
    println!(
        "ts-peers: echo of a 1 KiB message to server-everything {}, from the TypeScript SDK's client {} on node {}; per target {} calls at c=1 in {} alternating rounds and {} at each higher concurrency in {}, {} warm-up calls",
        ready["server"]["version"].as_str().unwrap_or("?"),
        ready["sdk"].as_str().unwrap_or("?"),
        ready["node"].as_str().unwrap_or("?"),
        opts.calls,
        opts.rounds,
        opts.calls_concurrent,
        opts.rounds_concurrent,
        opts.warmup
    );
    for (id, label) in labels {
        println!("  {id:<12} {label}");
    }
    let mut json_levels = serde_json::Map::new();
    let mut verdicts = Vec::new();
    for (&concurrency, per) in results {
        let rows = level_rows(per, &ALL)?;
        let load = loads.get(&concurrency).copied().unwrap_or_default();
        print_level(concurrency, &rows, load);
        let floors = stdio_floors(&rows);
        if let Some(line) = floors.get("line").and_then(Value::as_str) {
            println!("  {line}");
        }
        let builds = two_builds(&rows);
        if let Some(line) = builds
            .as_ref()
            .and_then(|b| b.get("line"))
            .and_then(Value::as_str)
        {
            println!("  {line}");
        }
        let mut level = level_json(&rows, load);
        level.insert("stdio_floors".into(), floors);
        if let Some(builds) = builds {
            level.insert("two_builds".into(), builds);
        }
        json_levels.insert(concurrency.to_string(), Value::Object(level));
        verdicts.extend(level_verdicts(concurrency, &rows));
    }
    println!("\ntargets (issue 17, TypeScript SDK client)");
    for v in &verdicts {
        println!(
            "  {}: {} — {}",
            v["target"].as_str().unwrap_or_default(),
            v["verdict"].as_str().unwrap_or_default(),
            v["figures"].as_str().unwrap_or_default()
        );
    }
    if swept > 0 {
        println!(
            "\n  warning: {swept} process(es) of the run were still alive at the end and were killed"
        );
    }
    Ok(json!({
        "bench": "ts-peers",
        "client": format!("@modelcontextprotocol/sdk {}", ready["sdk"].as_str().unwrap_or("?")),
        "node": ready["node"],
        "server": ready["server"],
        "calls": opts.calls,
        "calls_concurrent": opts.calls_concurrent,
        "rounds": opts.rounds,
        "rounds_concurrent": opts.rounds_concurrent,
        "warmup": opts.warmup,
        "message_bytes": 1024,
        "levels": json_levels,
        "verdicts": verdicts,
        "leftover_processes_killed": swept,
    }))
}

/// The stdio face's floors side by side at one level: each relay's median, p99, throughput and
/// CPU per call, and ours-stdio's ratios to each (median and throughput); `line` says it in one
/// line. Null when no floor ran.
fn stdio_floors(rows: &[Row]) -> Value {
    let ours = rows.iter().find(|r| r.id == "ours-stdio");
    let mut out = serde_json::Map::new();
    let mut parts = Vec::new();
    for floor_id in SHOWN_FLOORS {
        let Some(floor) = rows.iter().find(|r| r.id == floor_id) else {
            continue;
        };
        let cpu = floor.measured.hop_us_per_call();
        let median_ratio = ours.map(|o| o.stats.median / floor.stats.median);
        let throughput_ratio = ours.map(|o| o.measured.per_sec() / floor.measured.per_sec());
        parts.push(format!(
            "{floor_id} median {:.3} ms, {:.0} calls/s, {} µs CPU/call (ours-stdio: median {}, throughput {})",
            floor.stats.median,
            floor.measured.per_sec(),
            cpu.map_or("?".into(), |c| format!("{c:.1}")),
            median_ratio.map_or("?".into(), |r| format!("{r:.2}x")),
            throughput_ratio.map_or("?".into(), |r| format!("{r:.2}x")),
        ));
        out.insert(
            floor_id.to_string(),
            json!({
                "median_ms": util::round3(floor.stats.median),
                "p99_ms": util::round3(floor.stats.p99),
                "calls_per_sec": floor.measured.per_sec().round(),
                "hop_cpu_us_per_call": cpu.map(util::round3),
                "ours_stdio_median_ratio": median_ratio.map(util::round3),
                "ours_stdio_throughput_ratio": throughput_ratio.map(util::round3),
            }),
        );
    }
    if parts.is_empty() {
        return Value::Null;
    }
    out.insert(
        "line".into(),
        Value::String(format!("stdio floors: {}", parts.join("; "))),
    );
    Value::Object(out)
}

/// This build's stdio face (`ours-stdio`) against another's (`ours-stdio-b`), when both ran:
/// medians, throughputs, hop CPU per call, and the median ratio round by round.
fn two_builds(rows: &[Row]) -> Option<Value> {
    let get = |id: &str| rows.iter().find(|r| r.id == id);
    let (a, b) = (get("ours-stdio")?, get("ours-stdio-b")?);
    let ratio = a.stats.median / b.stats.median;
    let range = round_range(a.measured, b.measured, |i| {
        Some(a.measured.rounds[i].0 / b.measured.rounds[i].0)
    });
    let cpu = |r: &Row| {
        r.measured
            .hop_us_per_call()
            .map_or("?".into(), |c| format!("{c:.1}"))
    };
    Some(json!({
        "median_ratio": util::round3(ratio),
        "line": format!(
            "two builds: ours-stdio median {:.3} ms, {:.0} calls/s, {} µs CPU/call; ours-stdio-b median {:.3} ms, {:.0} calls/s, {} µs CPU/call (ours-stdio / ours-stdio-b: median {ratio:.3}x; per round {range})",
            a.stats.median, a.measured.per_sec(), cpu(a), b.stats.median, b.measured.per_sec(), cpu(b)
        ),
    }))
}

/// "min..max (median m)" of `f` over the rounds both targets measured.
pub(crate) fn round_range(a: &Measured, b: &Measured, f: impl Fn(usize) -> Option<f64>) -> String {
    let ratios: Vec<f64> = (0..a.rounds.len().min(b.rounds.len()))
        .filter_map(f)
        .collect();
    match Stats::of_ms(ratios) {
        Ok(s) => format!(
            "{:.2}..{:.2}x, median {:.2}x, over {} rounds",
            s.min, s.max, s.median, s.n
        ),
        Err(_) => "no rounds".into(),
    }
}

/// The targets of the issue: latency at concurrency 1, throughput at 64, the stdio face against
/// each of its floors (the C relay's line first) and the HTTP face against the bare relay (levels
/// that were not run have no verdict).
fn level_verdicts(concurrency: u32, rows: &[Row]) -> Vec<Value> {
    let get = |id: &str| rows.iter().find(|r| r.id == id);
    let verdict = |ok: bool| if ok { "met" } else { "missed" };
    let mut out = Vec::new();
    for (floor_id, floor_name) in STDIO_FLOORS {
        let (Some(ours), Some(floor)) = (get("ours-stdio"), get(floor_id)) else {
            continue;
        };
        if concurrency == 1 {
            let ratio = ours.stats.median / floor.stats.median;
            let range = round_range(ours.measured, floor.measured, |i| {
                Some(ours.measured.rounds[i].0 / floor.measured.rounds[i].0)
            });
            out.push(json!({
                "target": format!("stdio c=1: ours-stdio median <= 1.15x {floor_name}'s ({floor_id})"),
                "floor": floor_id,
                "verdict": verdict(ratio <= 1.15),
                "ratio": util::round3(ratio),
                "figures": format!(
                    "ours-stdio {:.3} ms, {floor_id} {:.3} ms (ratio {ratio:.2}x; per round {range}); p99 {:.3} vs {:.3} ms",
                    ours.stats.median, floor.stats.median, ours.stats.p99, floor.stats.p99
                ),
            }));
        }
        if concurrency == 64 {
            let ratio = ours.measured.per_sec() / floor.measured.per_sec();
            let range = round_range(ours.measured, floor.measured, |i| {
                Some(ours.measured.rounds[i].1 / floor.measured.rounds[i].1)
            });
            out.push(json!({
                "target": format!("stdio c=64: ours-stdio throughput >= 0.9x {floor_name}'s ({floor_id})"),
                "floor": floor_id,
                "verdict": verdict(ratio >= 0.9),
                "ratio": util::round3(ratio),
                "figures": format!(
                    "ours-stdio {:.0} calls/s, {floor_id} {:.0} calls/s (ratio {ratio:.2}x; per round {range})",
                    ours.measured.per_sec(), floor.measured.per_sec()
                ),
            }));
        }
    }
    if let (Some(ours), Some(relay)) = (get("ours-http"), get("relay-http")) {
        if let (1, Some(direct)) = (concurrency, get("direct")) {
            let ratio = ours.added_median / relay.added_median;
            let range = round_range(ours.measured, relay.measured, |i| {
                let d = direct.measured.rounds.get(i)?.0;
                Some((ours.measured.rounds[i].0 - d) / (relay.measured.rounds[i].0 - d))
            });
            out.push(json!({
                "target": "HTTP c=1: ours-http added median <= 1.1x relay-http's",
                "verdict": verdict(ratio <= 1.1),
                "ratio": util::round3(ratio),
                "figures": format!(
                    "ours-http {:+.3} ms, relay-http {:+.3} ms over direct {:.3} ms (ratio {ratio:.2}x; per round {range}); added p99 {:+.3} vs {:+.3} ms",
                    ours.added_median, relay.added_median, direct.stats.median, ours.added_p99, relay.added_p99
                ),
            }));
        }
        if concurrency == 64 {
            let ratio = ours.measured.per_sec() / relay.measured.per_sec();
            let range = round_range(ours.measured, relay.measured, |i| {
                Some(ours.measured.rounds[i].1 / relay.measured.rounds[i].1)
            });
            out.push(json!({
                "target": "HTTP c=64: ours-http throughput >= 0.9x relay-http's",
                "verdict": verdict(ratio >= 0.9),
                "ratio": util::round3(ratio),
                "figures": format!(
                    "ours-http {:.0} calls/s, relay-http {:.0} calls/s (ratio {ratio:.2}x; per round {range})",
                    ours.measured.per_sec(), relay.measured.per_sec()
                ),
            }));
        }
    }
    out
}
