//! `mcp-supervisor-soak`: the chaos soak of the mcp-supervisor proxy (see the library docs).
//!
//! ```text
//! cargo build --release --workspace --bins
//! target/release/mcp-supervisor-soak --duration-secs 300 --report /tmp/soak.json
//! ```
//!
//! Exit code: 0 when every verdict passed, 1 when one failed, 2 when the run itself failed.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use mcp_supervisor_soak::{Options, clock_seed, default_bin_dir, run, write_outputs};

/// Chaos soak of mcp-supervisor: 8 real fault servers behind one proxy, kills, hangs, restarts
/// and dropped sessions under load; loopback only.
#[derive(Parser, Debug)]
#[command(name = "mcp-supervisor-soak", version, about)]
struct Cli {
    /// How long the load and the chaos run, in seconds.
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(5..=86_400))]
    duration_secs: u64,
    /// Seed of the chaos and load choices (default: from the clock; printed).
    #[arg(long)]
    seed: Option<u64>,
    /// Write the report as JSON here.
    #[arg(long, value_name = "FILE.json")]
    report: Option<PathBuf>,
    /// Write an SVG chart here (default: beside the report, as .svg).
    #[arg(long, value_name = "FILE.svg")]
    svg: Option<PathBuf>,
    /// Concurrent MCP clients of the load driver.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=32))]
    clients: u64,
    /// Pause of each client between two calls, in ms.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(0..=10_000))]
    pause_ms: u64,
    /// Calm after the chaos before the end state is checked, in seconds.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=600))]
    calm_secs: u64,
    /// Folder of mcp-supervisor and mcp-fault-server (default: beside this binary).
    #[arg(long, value_name = "DIR")]
    bin_dir: Option<PathBuf>,
    /// Folder for the config, ledgers and logs (default: a fresh one in the temp dir).
    #[arg(long, value_name = "DIR")]
    work_dir: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let seed = cli.seed.unwrap_or_else(clock_seed);
    let mut options = Options::new(
        Duration::from_secs(cli.duration_secs),
        seed,
        cli.bin_dir.unwrap_or_else(default_bin_dir),
    );
    options.clients = cli.clients as usize;
    options.pause = Duration::from_millis(cli.pause_ms);
    options.calm = Duration::from_secs(cli.calm_secs);
    options.work_dir = cli.work_dir;
    eprintln!(
        "soak: {} s, seed {seed}; every process it starts is stopped when it ends (also on Ctrl-C)",
        cli.duration_secs
    );
    let outcome = tokio::select! {
        outcome = run(&options) => outcome,
        _ = tokio::signal::ctrl_c() => {
            eprintln!("soak: interrupted; stopping everything it started");
            return ExitCode::from(2);
        }
    };
    let mut report = match outcome {
        Ok(report) => report,
        Err(error) => {
            eprintln!("soak: the run failed: {error:#}");
            return ExitCode::from(2);
        }
    };
    let svg = cli
        .svg
        .or_else(|| cli.report.as_ref().map(|r| r.with_extension("svg")));
    if let Err(error) = write_outputs(&mut report, cli.report.as_deref(), svg.as_deref()) {
        eprintln!("soak: {error:#}");
        print!("{}", report.summary());
        return ExitCode::from(2);
    }
    print!("{}", report.summary());
    if report.passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
