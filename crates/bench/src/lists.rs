//! `lists`: how fast `serve --http` answers every list with N fault servers, all up and with one
//! of them frozen (SIGSTOP), side by side in one run: rounds alternate between the lists, and
//! the frozen phase follows the free one on the same proxy. The lists come from what each
//! supervisor holds (SPEC §9), so a frozen server must cost nothing; `tasks/list`, which cannot
//! be held, is shown beside them (each server has its short deadline, all at once).
//!
//! It never leaves a process behind: the frozen server is continued before the proxy is
//! stopped, and the run's processes are swept by their marker at the end.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use mcp_supervisor_testkit::rawhttp::RawHttp;
use nix::sys::signal::Signal;
use serde_json::{Value, json};

use crate::procs::{self, RunDir};
use crate::util::{self, STATS_HEADER, Stats};

pub struct Options {
    pub servers: u32,
    pub rounds: u32,
}

const LISTS: [&str; 4] = [
    "tools/list",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
];

pub async fn run(fault: &Path, opts: Options) -> Result<Value> {
    let supervisor = util::supervisor_beside()?;
    let run = RunDir::new("lists")?;
    procs::measured(&run, measure(fault, &supervisor, &run, &opts)).await
}

async fn measure(fault: &Path, supervisor: &Path, run: &RunDir, opts: &Options) -> Result<Value> {
    let config = write_config(fault, run, opts.servers)?;
    let port = util::free_port()?;
    let mut proxy = procs::serve_http(supervisor, &config, port, run)?;
    let outcome = async {
        proxy.wait_listening(port, Duration::from_secs(30)).await?;
        let url = format!("http://127.0.0.1:{port}");
        wait_all_ready(&url, opts.servers as usize, Duration::from_secs(60)).await?;
        let client = RawHttp::connect(&format!("{url}/mcp"), Duration::from_secs(30)).await?;
        for method in LISTS {
            client.request(method, json!({})).await?; // warm-up
        }
        let free = rounds(&client, opts.rounds).await?;
        let frozen_pid = pid_of(&run.file("s0.pid"))?;
        if !procs::signal(frozen_pid, Signal::SIGSTOP) {
            bail!("could not stop server s0 ({frozen_pid})");
        }
        let frozen = rounds(&client, opts.rounds).await;
        let tasks = timed(&client, "tasks/list", 3).await;
        procs::signal(frozen_pid, Signal::SIGCONT);
        Ok::<_, anyhow::Error>((free, frozen?, tasks?))
    }
    .await;
    proxy.stop(Duration::from_secs(10)).await;
    let (free, frozen, tasks) = outcome?;
    let mut rows = Vec::new();
    let mut report = serde_json::Map::new();
    for (i, method) in LISTS.iter().enumerate() {
        let (a, b) = (Stats::of(&free[i])?, Stats::of(&frozen[i])?);
        rows.push(util::stats_row(&format!("{method}, all up"), &a));
        rows.push(util::stats_row(&format!("{method}, s0 frozen"), &b));
        report.insert(
            (*method).to_string(),
            json!({ "all_up_ms": a.json(), "one_frozen_ms": b.json() }),
        );
    }
    let tasks = Stats::of(&tasks)?;
    rows.push(util::stats_row("tasks/list, s0 frozen (not held)", &tasks));
    util::print_table(
        &format!(
            "serve --http with {} fault servers: each list, all up and with one frozen (SIGSTOP)",
            opts.servers
        ),
        &STATS_HEADER,
        &rows,
    );
    Ok(json!({
        "bench": "lists",
        "servers": opts.servers,
        "rounds": opts.rounds,
        "lists": report,
        "tasks_list_one_frozen_ms": tasks.json(),
    }))
}

/// `rounds` rounds, each list once per round in turn: the latencies per list.
async fn rounds(client: &RawHttp, rounds: u32) -> Result<Vec<Vec<Duration>>> {
    let mut out = vec![Vec::new(); LISTS.len()];
    for _ in 0..rounds {
        for (i, method) in LISTS.iter().enumerate() {
            let began = Instant::now();
            client.request(method, json!({})).await?;
            out[i].push(began.elapsed());
        }
    }
    Ok(out)
}

async fn timed(client: &RawHttp, method: &str, n: u32) -> Result<Vec<Duration>> {
    let mut out = Vec::new();
    for _ in 0..n {
        let began = Instant::now();
        client.answer(method, json!({})).await?;
        out.push(began.elapsed());
    }
    Ok(out)
}

fn write_config(fault: &Path, run: &RunDir, servers: u32) -> Result<PathBuf> {
    let mut entries = serde_json::Map::new();
    for i in 0..servers {
        let name = format!("s{i}");
        entries.insert(
            name.clone(),
            json!({
                "command": fault,
                "args": ["--pid-file", run.file(&format!("{name}.pid"))],
                "health": { "intervalMs": 0 },
            }),
        );
    }
    procs::write_config(run, entries)
}

fn pid_of(path: &Path) -> Result<u32> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    text.trim()
        .parse()
        .with_context(|| format!("{} holds no pid", path.display()))
}

/// Poll `/status` until every server is ready.
pub async fn wait_all_ready(url: &str, servers: usize, limit: Duration) -> Result<()> {
    let http = reqwest::Client::builder().no_proxy().build()?;
    let deadline = Instant::now() + limit;
    loop {
        let ready = match http.get(format!("{url}/status")).send().await {
            Ok(response) => response
                .json::<Value>()
                .await
                .ok()
                .and_then(|s| {
                    s["servers"]
                        .as_array()
                        .map(|a| a.iter().filter(|s| s["state"] == "ready").count())
                })
                .unwrap_or(0),
            Err(_) => 0,
        };
        if ready >= servers {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("only {ready} of {servers} servers were ready within {limit:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
