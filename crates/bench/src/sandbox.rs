//! `sandbox` (issue 33, SPEC §16): what the sandbox costs a stdio server, side by side with the
//! same fault server unsandboxed, in one run whose rounds alternate which goes first.
//!
//! - **Cold start**: from a hub's start to its one server ready (spawned, `initialize` answered
//!   and `tools/list` listed), a new hub each start; the sandboxed server goes through the
//!   helper (`mcp-supervisor __mcp-supervisor-sandbox`, the binary beside this one) with
//!   `read` and `write` a folder of the run and `"network": "none"` (a network namespace).
//!   Target: the sandbox adds ≤ 5 ms to the median.
//! - **Calls at c=1**: `echo` of 1 KiB through one hub holding both and a second unsandboxed
//!   twin (the A/A control: how far two identical processes lie apart here), in blocks, each
//!   going first in turn. Target: the sandboxed median ≤ 1.02× the unsandboxed one.
//!
//! Every hub is stopped before the next; the run's processes are swept by their marker at the
//! end.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use mcp_supervisor::core::config::Config;
use mcp_supervisor::{CallArgs, Hub, HubOptions};
use rmcp::model::JsonObject;
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::procs::{self, RunDir};
use crate::util::{self, STATS_HEADER, Stats, stats_row};

const BOXED: &str = "boxed";
const OPEN: &str = "open";
/// A second unsandboxed server beside the two in the calls' hub: the A/A control that shows
/// how far two identical processes' medians lie apart on this machine.
const TWIN: &str = "twin";
const LIMIT: Duration = Duration::from_secs(30);
/// The targets of issue 33.
const START_ADDED_MS: f64 = 5.0;
const CALL_RATIO: f64 = 1.02;

#[derive(clap::Args, Debug)]
pub struct Options {
    /// Cold starts of each per round.
    #[arg(long, default_value_t = 40, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub starts: u32,
    /// Calls to each per round.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub calls: u32,
    /// Calls in a row to one before the other's turn.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub block: u32,
    /// Warm-up calls to each, before the first round's.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(0..=100_000))]
    pub warmup: u32,
    /// Rounds, their order alternating.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub rounds: u32,
    /// The mcp-supervisor binary, the sandbox's helper (default: beside this binary).
    #[arg(long)]
    pub supervisor: Option<PathBuf>,
}

pub async fn run(fault: &Path, opts: Options) -> Result<Value> {
    let helper = match &opts.supervisor {
        Some(path) => path.clone(),
        None => util::supervisor_beside()?,
    };
    let run = RunDir::new("sandbox")?;
    procs::measured(&run, measure(fault, &helper, &run, &opts)).await
}

/// The fault server, sandboxed (reading and writing `data`, no network) or not.
fn server(fault: &Path, data: &Path, name: &str, boxed: bool) -> Value {
    let mut server = json!({
        "command": fault,
        // The run's marker in its command line, so that a leftover is found and swept; in the
        // folder the sandbox may write.
        "args": ["--pid-file", data.join(format!("{name}.pid"))],
        "health": { "intervalMs": 0 },
    });
    if boxed {
        server["sandbox"] = json!({ "read": [data], "write": [data], "network": "none" });
    }
    server
}

fn options(helper: &Path) -> HubOptions {
    HubOptions {
        sandbox_helper: Some(helper.to_path_buf()),
        ..HubOptions::default()
    }
}

/// Each order in turn (the cold starts): an even round plus start puts `boxed` first, an odd `open`.
fn order(index: u32) -> [bool; 2] {
    if index.is_multiple_of(2) {
        [true, false]
    } else {
        [false, true]
    }
}

async fn measure(fault: &Path, helper: &Path, run: &RunDir, opts: &Options) -> Result<Value> {
    let data = run.file("data");
    std::fs::create_dir_all(&data).context("the run's data folder")?;
    let alone = |boxed: bool| {
        let name = if boxed { BOXED } else { OPEN };
        util::hub_config(json!({ name: server(fault, &data, name, boxed) }))
    };
    let (boxed_alone, open_alone) = (alone(true)?, alone(false)?);
    let all = util::hub_config(json!({
        BOXED: server(fault, &data, BOXED, true),
        OPEN: server(fault, &data, OPEN, false),
        TWIN: server(fault, &data, TWIN, false),
    }))?;
    let message = "x".repeat(1024);
    let arguments = util::object(json!({ "message": message }))?;

    // One start of each first: the kernel's probe and the page cache, not counted.
    cold_start(&boxed_alone, BOXED, helper).await?;
    cold_start(&open_alone, OPEN, helper).await?;
    let (mut starts, mut calls) = (
        [Vec::new(), Vec::new()],
        [Vec::new(), Vec::new(), Vec::new()],
    );
    let mut per_round = Vec::new();
    for round in 0..opts.rounds {
        let (mut round_starts, mut round_calls) = (
            [Vec::new(), Vec::new()],
            [Vec::new(), Vec::new(), Vec::new()],
        );
        for i in 0..opts.starts {
            for boxed in order(round + i) {
                let (config, name) = if boxed {
                    (&boxed_alone, BOXED)
                } else {
                    (&open_alone, OPEN)
                };
                let took = cold_start(config, name, helper)
                    .await
                    .with_context(|| format!("round {round}, start {i} of {name}"))?;
                round_starts[usize::from(!boxed)].push(took);
            }
        }
        let hub = Hub::start_with_options(all.clone(), options(helper));
        let warmup = if round == 0 { opts.warmup } else { 0 };
        util::with_hub(hub, async |hub: &Hub| {
            for name in CALLED {
                util::ready_after(hub, name, 0, LIMIT).await?;
                for _ in 0..warmup {
                    call(hub, name, &arguments, &message).await?;
                }
            }
            let mut done = 0;
            let mut block = 0;
            while done < opts.calls {
                let n = opts.block.min(opts.calls - done);
                // Each of the three goes first in turn.
                for k in 0..CALLED.len() {
                    let which = (round + block + k as u32) as usize % CALLED.len();
                    let name = CALLED[which];
                    for _ in 0..n {
                        let took = call(hub, name, &arguments, &message)
                            .await
                            .with_context(|| format!("round {round}, a call to {name}"))?;
                        round_calls[which].push(took);
                    }
                }
                done += n;
                block += 1;
            }
            Ok(())
        })
        .await?;
        let start = [Stats::of(&round_starts[0])?, Stats::of(&round_starts[1])?];
        let call = [
            Stats::of(&round_calls[0])?,
            Stats::of(&round_calls[1])?,
            Stats::of(&round_calls[2])?,
        ];
        per_round.push(Round {
            start_added: start[0].median - start[1].median,
            ratio: call[0].median / call[1].median,
            twin_ratio: call[2].median / call[1].median,
        });
        for k in 0..2 {
            starts[k].append(&mut round_starts[k]);
        }
        for k in 0..3 {
            calls[k].append(&mut round_calls[k]);
        }
    }
    report(opts, &starts, &calls, &per_round)
}

/// The servers called, in the order of the calls' figures.
const CALLED: [&str; 3] = [BOXED, OPEN, TWIN];

/// One round's figures: the median cold start's added ms, the calls' median ratios (sandboxed
/// and the twin, each to the unsandboxed).
struct Round {
    start_added: f64,
    ratio: f64,
    twin_ratio: f64,
}

/// A new hub with `config`'s one server `name`: how long from its start until that server is
/// ready (spawned, initialized, listed); then the hub is stopped.
async fn cold_start(config: &Config, name: &str, helper: &Path) -> Result<Duration> {
    let began = Instant::now();
    let hub = Hub::start_with_options(config.clone(), options(helper));
    util::with_hub(hub, async |hub: &Hub| {
        util::ready_after(hub, name, 0, LIMIT).await?;
        Ok(began.elapsed())
    })
    .await
}

async fn call(hub: &Hub, name: &str, arguments: &JsonObject, message: &str) -> Result<Duration> {
    let args = CallArgs {
        arguments: Some(arguments.clone()),
        timeout: Some(LIMIT),
        ..Default::default()
    };
    let tool = format!("{name}__echo");
    let began = Instant::now();
    let result = hub.call(&tool, args).await.map_err(|e| anyhow!("{e}"))?;
    let took = began.elapsed();
    util::check_echo(&result, message)?;
    Ok(took)
}

fn met(ok: bool) -> &'static str {
    if ok { "met" } else { "MISSED" }
}

fn report(
    opts: &Options,
    starts: &[Vec<Duration>; 2],
    calls: &[Vec<Duration>; 3],
    per_round: &[Round],
) -> Result<Value> {
    let start = [Stats::of(&starts[0])?, Stats::of(&starts[1])?];
    let call = [
        Stats::of(&calls[0])?,
        Stats::of(&calls[1])?,
        Stats::of(&calls[2])?,
    ];
    println!(
        "sandbox: the fault server sandboxed (read and write a folder, network none) and not, {} rounds alternating which goes first; {} cold starts and {} echo calls (1 KiB, c=1, blocks of {}) of each per round",
        opts.rounds, opts.starts, opts.calls, opts.block
    );
    util::print_table(
        "cold start: a hub's start to its one server ready (spawned, initialize answered, tools/list listed)",
        &STATS_HEADER,
        &[
            stats_row("sandboxed", &start[0]),
            stats_row("unsandboxed", &start[1]),
        ],
    );
    util::print_table(
        "calls at c=1 through the hub (echo, 1 KiB); the twin is a second unsandboxed one (A/A)",
        &STATS_HEADER,
        &[
            stats_row("sandboxed", &call[0]),
            stats_row("unsandboxed", &call[1]),
            stats_row("twin (unsandboxed)", &call[2]),
        ],
    );
    let added = start[0].median - start[1].median;
    let added_p90 = start[0].p90 - start[1].p90;
    let ratio = call[0].median / call[1].median;
    let twin = call[2].median / call[1].median;
    let range = |f: fn(&Round) -> f64| {
        let values: Vec<f64> = per_round.iter().map(f).collect();
        let low = values.iter().copied().fold(f64::INFINITY, f64::min);
        let high = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        (low, high)
    };
    let (added_low, added_high) = range(|r| r.start_added);
    let (ratio_low, ratio_high) = range(|r| r.ratio);
    let (twin_low, twin_high) = range(|r| r.twin_ratio);
    util::print_table(
        "targets",
        &["target", "figure", "per round", "verdict"],
        &[
            vec![
                format!("cold start: the sandbox adds <= {START_ADDED_MS} ms (median)"),
                format!("{added:+.3} ms (p90 {added_p90:+.3} ms)"),
                format!("{added_low:+.3}..{added_high:+.3} ms"),
                met(added <= START_ADDED_MS).into(),
            ],
            vec![
                format!("calls: sandboxed median <= {CALL_RATIO}x unsandboxed"),
                format!("{ratio:.4}x"),
                format!("{ratio_low:.4}..{ratio_high:.4}x"),
                met(ratio <= CALL_RATIO).into(),
            ],
            vec![
                "(A/A: the twin's median / unsandboxed)".into(),
                format!("{twin:.4}x"),
                format!("{twin_low:.4}..{twin_high:.4}x"),
                String::new(),
            ],
        ],
    );
    Ok(json!({
        "bench": "sandbox",
        "rounds": opts.rounds,
        "starts_per_round": opts.starts,
        "calls_per_round": opts.calls,
        "block": opts.block,
        "message_bytes": 1024,
        "start_sandboxed_ms": start[0].json(),
        "start_unsandboxed_ms": start[1].json(),
        "start_added_median_ms": util::round3(added),
        "start_added_p90_ms": util::round3(added_p90),
        "start_target_met": added <= START_ADDED_MS,
        "call_sandboxed_ms": call[0].json(),
        "call_unsandboxed_ms": call[1].json(),
        "call_twin_ms": call[2].json(),
        "call_ratio_median": ratio4(ratio),
        "call_twin_ratio_median": ratio4(twin),
        "call_target_met": ratio <= CALL_RATIO,
        "per_round": per_round
            .iter()
            .map(|r| json!({
                "start_added_median_ms": util::round3(r.start_added),
                "call_ratio_median": ratio4(r.ratio),
                "call_twin_ratio_median": ratio4(r.twin_ratio),
            }))
            .collect::<Vec<_>>(),
    }))
}

fn ratio4(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}
