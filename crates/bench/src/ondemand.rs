//! `ondemand`: what `"start": "onDemand"` and `idleTimeoutMs` save and cost (SPEC §13).
//!
//! 1. At rest: `mcp-supervisor serve` (stdio face) with N fault servers of which U are used (one
//!    call each), all `always`, then all `onDemand` (saved catalogs filled by the first run):
//!    the fault processes alive, the proxy's RSS and the servers' summed RSS, a second after the
//!    calls.
//! 2. The first call to an idle server: one `onDemand` server with `idleTimeoutMs`; each sample
//!    waits until `/status` says `idle`, then times one `tools/call` (the cold start plus our
//!    part), beside the server's bare cold start (spawn, initialize, tools/list) with the same
//!    lean client.
//!
//! Every process carries the run's directory in its command line and is swept at the end.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::procs::{self, RunDir, Spawned};
use crate::rawstdio::RawStdio;
use crate::util::{self, STATS_HEADER, Stats};

pub struct Options {
    pub servers: u32,
    pub used: u32,
    pub samples: u32,
    pub idle_ms: u64,
}

/// The bound of every wait for an answer or a state.
const LIMIT: Duration = Duration::from_secs(60);

pub async fn run(fault: &Path, opts: Options) -> Result<Value> {
    let supervisor = util::supervisor_beside()?;
    let run = RunDir::new("ondemand")?;
    procs::measured(&run, measure(fault, &supervisor, &run, &opts)).await
}

/// What runs at rest in one mode.
struct AtRest {
    processes: usize,
    proxy_kib: u64,
    servers_kib: u64,
}

async fn measure(fault: &Path, supervisor: &Path, run: &RunDir, opts: &Options) -> Result<Value> {
    if opts.used > opts.servers {
        bail!(
            "--used ({}) is more than --servers ({})",
            opts.used,
            opts.servers
        );
    }
    let state = run.file("state");
    let always = at_rest(fault, supervisor, run, opts, &state, "always").await?;
    let lazy = at_rest(fault, supervisor, run, opts, &state, "onDemand").await?;
    let row = |label: &str, r: &AtRest| {
        vec![
            label.to_string(),
            r.processes.to_string(),
            r.proxy_kib.to_string(),
            r.servers_kib.to_string(),
            (r.proxy_kib + r.servers_kib).to_string(),
        ]
    };
    util::print_table(
        &format!(
            "at rest: {} servers configured, {} used (one call each)",
            opts.servers, opts.used
        ),
        &[
            "start",
            "server processes",
            "proxy RSS KiB",
            "servers RSS KiB",
            "total KiB",
        ],
        &[row("always", &always), row("onDemand", &lazy)],
    );

    let cold = Stats::of(&bare_cold_starts(fault, run, opts.samples).await?)?;
    let first = Stats::of(&first_calls(fault, supervisor, run, opts).await?)?;
    util::print_table(
        &format!(
            "the first call to an idle onDemand server (idleTimeoutMs {}), {} samples",
            opts.idle_ms, opts.samples
        ),
        &STATS_HEADER,
        &[
            util::stats_row("first call to an idle server", &first),
            util::stats_row("bare cold start (spawn+initialize+tools/list)", &cold),
        ],
    );
    println!(
        "  our part (median first call - median bare cold start): {:.3} ms",
        first.median - cold.median
    );
    let json_of = |r: &AtRest| json!({ "server_processes": r.processes, "proxy_rss_kib": r.proxy_kib, "servers_rss_kib": r.servers_kib });
    Ok(json!({
        "bench": "ondemand",
        "servers": opts.servers,
        "used": opts.used,
        "always": json_of(&always),
        "on_demand": json_of(&lazy),
        "idle_timeout_ms": opts.idle_ms,
        "first_call_ms": first.json(),
        "bare_cold_start_ms": cold.json(),
    }))
}

/// The config of `servers` fault servers started `start`, each marked by its pid file.
fn write_config(
    fault: &Path,
    run: &RunDir,
    name: &str,
    servers: u32,
    defaults: Value,
) -> Result<PathBuf> {
    let mut entries = serde_json::Map::new();
    for i in 0..servers {
        let server = format!("s{i:02}");
        entries.insert(
            server.clone(),
            json!({
                "command": fault,
                "args": ["--pid-file", run.file(&format!("{server}.pid"))],
                "health": { "intervalMs": 0 },
            }),
        );
    }
    let path = run.file(name);
    std::fs::write(
        &path,
        serde_json::to_vec_pretty(&json!({ "defaults": defaults, "mcpServers": entries }))?,
    )?;
    Ok(path)
}

async fn echo(client: &RawStdio, tool: &str) -> Result<()> {
    let result = client
        .request(
            "tools/call",
            json!({ "name": tool, "arguments": { "message": "hi" } }),
        )
        .await?;
    if result["content"][0]["text"] != "hi" {
        bail!("{tool} answered {result}");
    }
    Ok(())
}

/// The live fault-server processes of this run: (pid, RSS KiB).
fn fault_processes(fault: &Path, run: &RunDir) -> Vec<(u32, u64)> {
    let fault = fault.display().to_string();
    procs::with_marker(&run.marker())
        .into_iter()
        .filter(|p| p.alive() && p.args.first() == Some(&fault))
        .map(|p| (p.pid, rss_kib(p.pid).unwrap_or(0)))
        .collect()
}

fn rss_kib(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .context("no VmRSS")
}

async fn at_rest(
    fault: &Path,
    supervisor: &Path,
    run: &RunDir,
    opts: &Options,
    state: &Path,
    start: &str,
) -> Result<AtRest> {
    let config = write_config(
        fault,
        run,
        &format!("{start}.json"),
        opts.servers,
        json!({ "start": start }),
    )?;
    let (mut process, client) =
        crate::startup::serve_stdio(supervisor, &config, state, run, &[], LIMIT).await?;
    let measured = async {
        let listed = client.request("tools/list", json!({})).await?;
        let tools = listed["tools"].as_array().map_or(0, Vec::len);
        if tools == 0 {
            bail!("the proxy listed no tools");
        }
        for i in 0..opts.used {
            echo(&client, &format!("s{i:02}__echo")).await?;
        }
        // Until every catalog is saved (the onDemand run needs them), then a second of rest.
        crate::startup::wait_for_catalogs(state, opts.servers as usize, LIMIT).await?;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let servers = fault_processes(fault, run);
        Ok(AtRest {
            processes: servers.len(),
            proxy_kib: rss_kib(process.pid())?,
            servers_kib: servers.iter().map(|(_, kib)| kib).sum(),
        })
    }
    .await;
    process.stop(Duration::from_secs(10)).await;
    measured
}

/// The fault server alone: spawn, initialize and tools/list with the same lean client.
async fn bare_cold_starts(fault: &Path, run: &RunDir, samples: u32) -> Result<Vec<Duration>> {
    let args = vec![
        "--pid-file".to_string(),
        run.file("bare.pid").display().to_string(),
    ];
    let mut times = Vec::new();
    for _ in 0..samples {
        let began = Instant::now();
        let mut process = Spawned::start("fault server", fault, &args, None, true)?;
        let listed = async {
            let (stdout, stdin) = process.take_pipes().context("the server's pipes")?;
            let client = RawStdio::connect(stdout, stdin, LIMIT).await?;
            client.request("tools/list", json!({})).await
        }
        .await;
        times.push(began.elapsed());
        process.stop(Duration::from_secs(10)).await;
        listed?;
    }
    Ok(times)
}

/// One onDemand server with `idleTimeoutMs`: each sample waits for `idle`, then times a call.
async fn first_calls(
    fault: &Path,
    supervisor: &Path,
    run: &RunDir,
    opts: &Options,
) -> Result<Vec<Duration>> {
    let config = write_config(
        fault,
        run,
        "idle.json",
        1,
        json!({ "start": "onDemand", "idleTimeoutMs": opts.idle_ms }),
    )?;
    let port = util::free_port()?;
    let admin = vec!["--admin".to_string(), format!("127.0.0.1:{port}")];
    let state = run.file("state");
    let (mut process, client) =
        crate::startup::serve_stdio(supervisor, &config, &state, run, &admin, LIMIT).await?;
    let http = reqwest::Client::builder().no_proxy().build()?;
    let measured = async {
        let mut times = Vec::new();
        for _ in 0..opts.samples {
            wait_idle(&http, port).await?;
            let began = Instant::now();
            echo(&client, "s00__echo").await?;
            times.push(began.elapsed());
        }
        Ok(times)
    }
    .await;
    process.stop(Duration::from_secs(10)).await;
    measured
}

/// Poll `/status` until the one server is idle with no process.
async fn wait_idle(http: &reqwest::Client, port: u16) -> Result<()> {
    let deadline = Instant::now() + LIMIT;
    loop {
        let status: Value = http
            .get(format!("http://127.0.0.1:{port}/status"))
            .send()
            .await?
            .json()
            .await?;
        let server = &status["servers"][0];
        if server["state"] == "idle" && server["pid"].is_null() {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the server never became idle: {server}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
