//! `startup`: time from starting `mcp-supervisor serve` (stdio face) to a complete aggregate
//! `tools/list` answer, with N fault servers that each take D ms before they serve
//! (`--startup-delay-ms`), with and without saved catalogs. The runs alternate: one without (a
//! fresh state directory each time), one with (a state directory that an earlier run filled).
//!
//! A list is complete when every server's tools are in it, each as many as a warm run lists. It
//! never leaves a process behind: each proxy is stopped (SIGTERM, which stops its servers; then
//! SIGKILL to its group), and the run's processes are swept by their marker at the end.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::procs::{self, RunDir, Spawned};
use crate::rawstdio::RawStdio;
use crate::util::{self, STATS_HEADER, Stats};

pub struct Options {
    pub servers: u32,
    pub delay_ms: u64,
    pub runs: u32,
}

pub async fn run(fault: &Path, opts: Options) -> Result<Value> {
    let supervisor = crate::util::supervisor_beside()?;
    let run = RunDir::new("startup")?;
    procs::measured(&run, measure(fault, &supervisor, &run, &opts)).await
}

/// One start of the proxy: how long until its first complete tools/list answer.
struct Start {
    /// Until `initialize` was answered (the proxy is up and reading its stdin).
    initialized: Duration,
    elapsed: Duration,
    tools: usize,
}

async fn measure(fault: &Path, supervisor: &Path, run: &RunDir, opts: &Options) -> Result<Value> {
    let config = write_config(fault, run, opts)?;
    let limit = Duration::from_millis(opts.delay_ms * 3 + 30_000);
    // A first run fills the warm state directory (and tells how many tools a complete list has).
    let warm = run.file("state-warm");
    let first = start_once(supervisor, &config, &warm, None, run, limit).await?;
    wait_for_catalogs(&warm, opts.servers as usize, limit).await?;
    let expected = first.tools;
    let (mut cold, mut cached, mut up) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..opts.runs {
        let fresh = run.file(&format!("state-cold-{i}"));
        let without = start_once(supervisor, &config, &fresh, Some(expected), run, limit).await?;
        cold.push(without.elapsed);
        up.push(without.initialized);
        let with = start_once(supervisor, &config, &warm, Some(expected), run, limit).await?;
        cached.push(with.elapsed);
        up.push(with.initialized);
    }
    let (cold, cached, up) = (Stats::of(&cold)?, Stats::of(&cached)?, Stats::of(&up)?);
    util::print_table(
        &format!(
            "proxy start to a complete tools/list answer: {} servers that each take {} ms to start, {expected} tools",
            opts.servers, opts.delay_ms
        ),
        &STATS_HEADER,
        &[
            util::stats_row("without a saved catalog", &cold),
            util::stats_row("with saved catalogs", &cached),
            util::stats_row("(initialize answered, both)", &up),
        ],
    );
    Ok(json!({
        "bench": "startup",
        "servers": opts.servers,
        "startup_delay_ms": opts.delay_ms,
        "tools": expected,
        "without_catalog_ms": cold.json(),
        "with_catalog_ms": cached.json(),
        "initialize_answered_ms": up.json(),
    }))
}

fn write_config(fault: &Path, run: &RunDir, opts: &Options) -> Result<PathBuf> {
    let mut entries = serde_json::Map::new();
    for i in 0..opts.servers {
        let name = format!("s{i}");
        entries.insert(
            name.clone(),
            json!({
                "command": fault,
                "args": ["--startup-delay-ms", opts.delay_ms.to_string(), "--pid-file", run.file(&format!("{name}.pid"))],
                "health": { "intervalMs": 0 },
            }),
        );
    }
    procs::write_config(run, entries)
}

/// Start the proxy with `state` as its state directory, initialize, list the tools once; stop
/// it. With `expected`, a list of another size is an error (the answer was not complete).
async fn start_once(
    supervisor: &Path,
    config: &Path,
    state: &Path,
    expected: Option<usize>,
    run: &RunDir,
    limit: Duration,
) -> Result<Start> {
    let began = Instant::now();
    let (mut process, client) = serve_stdio(supervisor, config, state, run, &[], limit).await?;
    let listed = async {
        let initialized = began.elapsed();
        let result = client.request("tools/list", json!({})).await?;
        let elapsed = began.elapsed();
        let tools = result["tools"].as_array().map_or(0, Vec::len);
        Ok::<_, anyhow::Error>(Start {
            initialized,
            elapsed,
            tools,
        })
    }
    .await;
    process.stop(Duration::from_secs(10)).await;
    let start = listed?;
    if let Some(expected) = expected
        && start.tools != expected
    {
        bail!(
            "the first tools/list had {} tools, a complete one has {expected}",
            start.tools
        );
    }
    Ok(start)
}

/// `mcp-supervisor serve` on stdio with `config`, `state` and `extra` arguments, initialized.
pub async fn serve_stdio(
    supervisor: &Path,
    config: &Path,
    state: &Path,
    run: &RunDir,
    extra: &[String],
    limit: Duration,
) -> Result<(Spawned, RawStdio)> {
    serve_stdio_env(supervisor, config, state, run, extra, &[], limit).await
}

/// [`serve_stdio`] with `envs` added to the proxy's environment.
pub async fn serve_stdio_env(
    supervisor: &Path,
    config: &Path,
    state: &Path,
    run: &RunDir,
    extra: &[String],
    envs: &[(&str, &str)],
    limit: Duration,
) -> Result<(Spawned, RawStdio)> {
    let mut args: Vec<String> = [
        "serve",
        "--log-level",
        "warn",
        "--config",
        &config.display().to_string(),
        "--state-dir",
        &state.display().to_string(),
    ]
    .map(str::to_string)
    .to_vec();
    args.extend_from_slice(extra);
    let mut process = Spawned::start_env(
        "mcp-supervisor serve",
        supervisor,
        &args,
        envs,
        Some(&run.file("proxy.log")),
        true,
    )?;
    let (stdout, stdin) = process
        .take_pipes()
        .context("the proxy's pipes were taken")?;
    let client = RawStdio::connect(stdout, stdin, limit).await;
    match client {
        Ok(client) => Ok((process, client)),
        Err(e) => {
            process.stop(Duration::from_secs(10)).await;
            Err(e)
        }
    }
}

/// Wait until every server's catalog is saved in `dir`.
pub async fn wait_for_catalogs(dir: &Path, servers: usize, limit: Duration) -> Result<()> {
    let deadline = Instant::now() + limit;
    loop {
        let saved = std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .filter_map(Result::ok)
                    .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
                    .count()
            })
            .unwrap_or(0);
        if saved >= servers {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "only {saved} of {servers} catalogs were saved in {}",
                dir.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
