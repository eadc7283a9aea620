//! Shared pieces: locating the fault server, configs, the hub guard, bare rmcp clients, HTTP
//! fault servers, process accounting, statistics and output.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use mcp_supervisor::core::config::{Config, parse_config};
use mcp_supervisor::{Hub, ServerState, Snapshot};
use rmcp::model::{CallToolResult, JsonObject};
use rmcp::service::RunningService;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};
use tokio::process::{Child, Command};
use tokio::time::Instant;

/// The fault server binary: `--fault-server PATH`, or `mcp-fault-server` beside this binary.
pub fn fault_server(explicit: Option<&Path>) -> Result<PathBuf> {
    let bin = match explicit {
        Some(path) => path.to_path_buf(),
        None => {
            let exe = std::env::current_exe().context("cannot tell where this binary is")?;
            let dir = exe
                .parent()
                .context("this binary has no parent directory")?;
            dir.join("mcp-fault-server")
        }
    };
    if !bin.is_file() {
        bail!(
            "{} is missing: build it with `cargo build --release -p mcp-supervisor-bench -p mcp-fault-server`, \
             or pass --fault-server PATH",
            bin.display()
        );
    }
    Ok(bin)
}

/// `mcp-supervisor` beside this binary (built by `cargo build --release --workspace --bins`).
pub fn supervisor_beside() -> Result<PathBuf> {
    let here = std::env::current_exe().context("cannot tell where this binary is")?;
    let supervisor = here
        .parent()
        .context("this binary has no directory")?
        .join("mcp-supervisor");
    if !supervisor.is_file() {
        bail!(
            "{} is missing (cargo build --release --workspace --bins)",
            supervisor.display()
        );
    }
    Ok(supervisor)
}

/// `mcp-supervisor wrap --http LISTEN --` as the benches start it, the server's command to
/// follow: quiet, and with no drain window (it is stopped by SIGTERM).
pub fn wrap_http_args(listen: &str) -> Vec<String> {
    let head = ["wrap", "--log-level", "warn", "--http", listen];
    let tail = ["--drain-ms", "0", "--"];
    head.iter().chain(&tail).map(|s| s.to_string()).collect()
}

/// A validated config from an `mcpServers` object.
pub fn hub_config(servers: Value) -> Result<Config> {
    let text = json!({ "mcpServers": servers }).to_string();
    parse_config(&text, &|_| None).map_err(|e| anyhow!("the bench config is invalid:\n{e}"))
}

/// Run `body` with `hub`, then stop the hub whatever happened (error, Ctrl-C), so that every
/// server process it started is gone when this returns.
pub async fn with_hub<T>(hub: Hub, body: impl AsyncFnOnce(&Hub) -> Result<T>) -> Result<T> {
    let result = tokio::select! {
        result = body(&hub) => result,
        _ = tokio::signal::ctrl_c() => Err(anyhow!("interrupted")),
    };
    if tokio::time::timeout(Duration::from_secs(30), hub.stop())
        .await
        .is_err()
    {
        eprintln!("warning: the hub did not stop within 30 s");
    }
    result
}

/// Wait until `server` is ready on a generation newer than `after`.
pub async fn ready_after(hub: &Hub, server: &str, after: u64, limit: Duration) -> Result<Snapshot> {
    let mut watch = hub
        .watch(server)
        .with_context(|| format!("server {server} is not configured"))?;
    let waited = tokio::time::timeout(
        limit,
        watch.wait_for(|s| s.state() == ServerState::Ready && s.generation > after),
    )
    .await
    .map(|r| r.map(|snapshot| snapshot.clone()));
    match waited {
        Ok(Ok(snapshot)) => Ok(snapshot),
        Ok(Err(_)) => bail!("server {server} stopped while waiting for it to be ready"),
        Err(_) => bail!(
            "server {server} was not ready on a generation after {after} within {limit:?}; now {:?}",
            watch.borrow().clone()
        ),
    }
}

/// A JSON object of arguments.
pub fn object(value: Value) -> Result<JsonObject> {
    match value {
        Value::Object(map) => Ok(map),
        other => bail!("arguments must be a JSON object, not {other}"),
    }
}

/// The text of a tool result's first content item.
pub fn text(result: &CallToolResult) -> Option<&str> {
    result
        .content
        .first()
        .and_then(|c| c.as_text())
        .map(|t| t.text.as_str())
}

/// Check that an `echo` result is a success carrying `expected`.
pub fn check_echo(result: &CallToolResult, expected: &str) -> Result<()> {
    if result.is_error == Some(true) {
        bail!("echo returned an error result: {:?}", text(result));
    }
    match text(result) {
        Some(got) if got == expected => Ok(()),
        got => bail!(
            "echo returned {} characters instead of {}",
            got.map_or(0, str::len),
            expected.len()
        ),
    }
}

// === heal ===

/// How the calls after a restart went.
pub struct Heal {
    /// The first call's time, when it succeeded.
    pub first: Option<Duration>,
    /// The time until a call succeeded, calling again on failure.
    pub until_success: Duration,
    /// The first call's error, when it failed.
    pub failure: Option<String>,
}

/// Call `echo` (`tool`) with `message` through the hub until it succeeds, each call bounded by
/// `call_limit`, for at most `retry_limit` after the first one failed.
pub async fn time_heal(
    hub: &Hub,
    tool: &str,
    message: &str,
    call_limit: Duration,
    retry_limit: Duration,
) -> Result<Heal> {
    let arguments = Some(object(json!({ "message": message }))?);
    let call = async || -> Result<()> {
        let args = mcp_supervisor::CallArgs {
            arguments: arguments.clone(),
            timeout: Some(call_limit),
            ..Default::default()
        };
        let result = hub.call(tool, args).await?;
        check_echo(&result, message)
    };
    let start = Instant::now();
    let failure = match call().await {
        Ok(()) => {
            let elapsed = start.elapsed();
            return Ok(Heal {
                first: Some(elapsed),
                until_success: elapsed,
                failure: None,
            });
        }
        Err(e) => format!("{e:#}"),
    };
    loop {
        match call().await {
            Ok(()) => {
                return Ok(Heal {
                    first: None,
                    until_success: start.elapsed(),
                    failure: Some(failure),
                });
            }
            Err(e) if start.elapsed() >= retry_limit => {
                bail!("no call succeeded within {retry_limit:?}: {e:#}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(1)).await,
        }
    }
}

// === bare rmcp clients ===

/// A fault server over stdio driven by a plain rmcp client, with no supervisor in between.
pub struct BareServer {
    child: Child,
    pub client: RunningService<RoleClient, ()>,
}

impl BareServer {
    /// Spawn the server (own process group, killed on drop) and initialize an rmcp client.
    pub async fn start(fault: &Path, args: &[&str]) -> Result<Self> {
        let mut command = Command::new(fault);
        command
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .process_group(0)
            .kill_on_drop(true);
        let mut child = command
            .spawn()
            .with_context(|| format!("cannot start {}", fault.display()))?;
        let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
            let _ = child.kill().await;
            bail!("the fault server's stdio was not piped");
        };
        match tokio::time::timeout(Duration::from_secs(30), ().serve((stdout, stdin))).await {
            Ok(Ok(client)) => Ok(Self { child, client }),
            Ok(Err(e)) => {
                let _ = child.kill().await;
                Err(anyhow!("initialize with the bare fault server failed: {e}"))
            }
            Err(_) => {
                let _ = child.kill().await;
                bail!("initialize with the bare fault server took over 30 s")
            }
        }
    }

    /// Close the client and make sure the process is gone (killed and reaped).
    pub async fn shutdown(mut self) {
        let _ = tokio::time::timeout(Duration::from_secs(2), self.client.cancel()).await;
        let _ = self.child.kill().await;
    }
}

// === HTTP fault servers ===

/// A fault server over streamable HTTP on a loopback port; killed and reaped on drop at the latest.
pub struct HttpServer {
    child: Child,
}

impl HttpServer {
    /// Start it on `port` and wait (at most 10 s) until the port accepts connections.
    pub async fn start(fault: &Path, port: u16) -> Result<Self> {
        let deadline = Instant::now() + Duration::from_secs(10);
        // The port may still be held for a moment after the previous server died: retry the start.
        loop {
            let mut command = Command::new(fault);
            command
                .args(["--http", &format!("127.0.0.1:{port}")])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .process_group(0)
                .kill_on_drop(true);
            let child = command
                .spawn()
                .with_context(|| format!("cannot start {}", fault.display()))?;
            let mut server = Self { child };
            loop {
                if tokio::net::TcpStream::connect(("127.0.0.1", port))
                    .await
                    .is_ok()
                {
                    return Ok(server);
                }
                if let Ok(Some(_)) = server.child.try_wait() {
                    break; // exited: probably could not bind yet
                }
                if Instant::now() >= deadline {
                    server.kill().await;
                    bail!(
                        "the HTTP fault server did not accept connections on 127.0.0.1:{port} within 10 s"
                    );
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            if Instant::now() >= deadline {
                bail!("the HTTP fault server could not listen on 127.0.0.1:{port} within 10 s");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// SIGKILL and reap.
    pub async fn kill(&mut self) {
        let _ = self.child.kill().await;
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
        for _ in 0..200 {
            if !matches!(self.child.try_wait(), Ok(None)) {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// A loopback port that was free a moment ago.
pub fn free_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")
        .context("cannot bind an ephemeral loopback port")?;
    Ok(listener.local_addr().context("no local address")?.port())
}

// === processes ===

/// Send SIGKILL to one process.
pub fn kill9(pid: u32) -> Result<()> {
    let raw = i32::try_from(pid).context("pid out of range")?;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(raw),
        nix::sys::signal::Signal::SIGKILL,
    )
    .with_context(|| format!("kill -9 {pid}"))
}

/// Live (non-zombie) child processes of this process.
pub fn live_children() -> Vec<u32> {
    let me = std::process::id().to_string();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut children = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // pid (comm) state ppid ...
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let mut fields = rest.split_whitespace();
        let state = fields.next();
        let ppid = fields.next();
        if ppid == Some(me.as_str()) && !matches!(state, Some("Z") | Some("X")) {
            children.push(pid);
        }
    }
    children
}

/// Wait (at most 5 s) until no child process is left; returns those that still are.
pub async fn leftover_children() -> Vec<u32> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = live_children();
        if left.is_empty() || Instant::now() >= deadline {
            return left;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// VmRSS and VmHWM of this process, in KiB.
pub fn rss_kib() -> Result<(u64, u64)> {
    rss_kib_of("self")
}

/// VmRSS and VmHWM of process `pid` (a number, or `self`), in KiB.
pub fn rss_kib_of(pid: &str) -> Result<(u64, u64)> {
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path).with_context(|| format!("cannot read {path}"))?;
    let field = |key: &str| -> Result<u64> {
        let line = status
            .lines()
            .find(|l| l.starts_with(key))
            .with_context(|| format!("{path} has no {key}"))?;
        line[key.len()..]
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .with_context(|| format!("cannot parse {line:?}"))
    };
    Ok((field("VmRSS:")?, field("VmHWM:")?))
}

// === statistics and output ===

/// Order statistics of a sample, in milliseconds (nearest-rank percentiles).
#[derive(Clone, Copy, Debug)]
pub struct Stats {
    pub n: usize,
    pub min: f64,
    pub p10: f64,
    pub median: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
    pub mean: f64,
}

impl Stats {
    pub fn of_ms(mut values: Vec<f64>) -> Result<Self> {
        if values.is_empty() {
            bail!("no samples");
        }
        values.sort_by(f64::total_cmp);
        let n = values.len();
        let rank = |q: f64| values[((q * n as f64).ceil() as usize).clamp(1, n) - 1];
        let median = if n % 2 == 1 {
            values[n / 2]
        } else {
            (values[n / 2 - 1] + values[n / 2]) / 2.0
        };
        Ok(Self {
            n,
            min: values[0],
            p10: rank(0.10),
            median,
            p90: rank(0.90),
            p99: rank(0.99),
            max: values[n - 1],
            mean: values.iter().sum::<f64>() / n as f64,
        })
    }

    pub fn of(durations: &[Duration]) -> Result<Self> {
        Self::of_ms(durations.iter().map(|d| d.as_secs_f64() * 1000.0).collect())
    }

    pub fn json(&self) -> Value {
        json!({
            "n": self.n,
            "min": round3(self.min),
            "median": round3(self.median),
            "p90": round3(self.p90),
            "p99": round3(self.p99),
            "max": round3(self.max),
            "mean": round3(self.mean),
        })
    }
}

pub fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// The 1-minute load average (other work on the machine skews the figures).
pub fn loadavg() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// The machine the figures were taken on; `load` is the load average when the bench started.
pub fn machine(load: Option<f64>) -> Value {
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    json!({
        "cpus": cpus,
        "arch": std::env::consts::ARCH,
        "os": std::env::consts::OS,
        "loadavg_1m_at_start": load,
    })
}

/// A plain text table: a header row and rows, columns padded to fit.
pub fn print_table(title: &str, header: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if i < widths.len() {
                widths[i] = widths[i].max(cell.len());
            }
        }
    }
    println!("\n{title}");
    let line = |cells: Vec<String>| {
        let padded: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| {
                if i == 0 {
                    format!("{c:<w$}", w = widths[i])
                } else {
                    format!("{c:>w$}", w = widths[i])
                }
            })
            .collect();
        println!("  {}", padded.join("  "));
    };
    line(header.iter().map(|h| h.to_string()).collect());
    line(widths.iter().map(|w| "-".repeat(*w)).collect());
    for row in rows {
        line(row.clone());
    }
}

/// A row of a statistics table: label, then min, median, p90, p99, max, mean (ms).
pub fn stats_row(label: &str, s: &Stats) -> Vec<String> {
    let f = |x: f64| format!("{x:.3}");
    vec![
        label.to_string(),
        s.n.to_string(),
        f(s.min),
        f(s.median),
        f(s.p90),
        f(s.p99),
        f(s.max),
        f(s.mean),
    ]
}

/// The header of a table of targets side by side at one concurrency (`peers`, `ts-peers`).
pub const TARGETS_HEADER: [&str; 8] = [
    "target",
    "n",
    "median ms",
    "p99 ms",
    "added median ms",
    "added p99 ms",
    "calls/s",
    "errors",
];

pub const STATS_HEADER: [&str; 8] = [
    "",
    "n",
    "min ms",
    "median ms",
    "p90 ms",
    "p99 ms",
    "max ms",
    "mean ms",
];
