//! # mcp-supervisor-bench
//!
//! Benchmarks of the mcp-supervisor library against real `mcp-fault-server` processes, on
//! loopback only. Each subcommand prints its figures as a table, then one JSON line (last line of
//! stdout) with the same figures. Every run is bounded in count and time, and every process it
//! starts is gone when it ends, also on error or Ctrl-C (the JSON reports `leftover_children`).
//!
//! | subcommand | measures |
//! |---|---|
//! | `recovery` | time from `kill -9` of a stdio server to the next successful call through the hub |
//! | `memory` | this process's RSS with N supervised stdio servers |
//! | `callpath` | added latency of a call through the hub over a bare rmcp client |
//! | `http-heal` | time of the first call through the hub after an HTTP server was restarted |
//!
//! Set `RUST_LOG` (e.g. `mcp_supervisor=debug`) to see the library's logs on stderr.
//!
//! The fault server is looked up beside this binary (`cargo build --release -p
//! mcp-supervisor-bench -p mcp-fault-server`), or given with `--fault-server PATH`.

mod callpath;
mod http_heal;
mod memory;
mod recovery;
mod util;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Benchmarks of mcp-supervisor against real fault-server processes (loopback only).
#[derive(Parser, Debug)]
#[command(name = "mcp-supervisor-bench", version, about)]
struct Cli {
    /// The mcp-fault-server binary (default: beside this binary).
    #[arg(long, global = true, value_name = "PATH")]
    fault_server: Option<PathBuf>,
    #[command(subcommand)]
    bench: Bench,
}

#[derive(Subcommand, Debug)]
enum Bench {
    /// kill -9 a supervised stdio server, time until a call through the hub succeeds again.
    Recovery {
        /// How many kills.
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=500))]
        kills: u32,
        /// `reconnect.initialDelayMs` of the supervised server.
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=10_000))]
        initial_delay_ms: u64,
        /// How many bare cold starts (spawn + initialize + tools/list) to take the median of.
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=500))]
        cold_starts: u32,
    },
    /// RSS of this process with N supervised stdio servers (children excluded).
    Memory {
        /// How many servers.
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=500))]
        servers: u32,
        /// Calls spread round-robin over the servers after they are ready.
        #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(0..=100_000))]
        calls: u32,
    },
    /// Added latency of the hub's call path over a bare rmcp client.
    Callpath {
        /// Measured calls per client (after the warm-up).
        #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(100..=1_000_000))]
        calls: u32,
        /// Warm-up calls per client.
        #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u32).range(0..=100_000))]
        warmup: u32,
        /// Calls per block; the two clients alternate block by block.
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=10_000))]
        block: u32,
    },
    /// Restart an HTTP server behind the hub, time the next call through the hub.
    HttpHeal {
        /// How many restarts.
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=500))]
        restarts: u32,
    },
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    // Library and rmcp logs to stderr only when asked for (RUST_LOG=mcp_supervisor=debug).
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }
    let fault = match util::fault_server(cli.fault_server.as_deref()) {
        Ok(path) => path,
        Err(error) => {
            eprintln!("error: {error:#}");
            return ExitCode::FAILURE;
        }
    };
    let load = util::loadavg();
    let outcome = match cli.bench {
        Bench::Recovery {
            kills,
            initial_delay_ms,
            cold_starts,
        } => recovery::run(&fault, kills, initial_delay_ms, cold_starts).await,
        Bench::Memory { servers, calls } => memory::run(&fault, servers, calls).await,
        Bench::Callpath {
            calls,
            warmup,
            block,
        } => callpath::run(&fault, calls, warmup, block).await,
        Bench::HttpHeal { restarts } => http_heal::run(&fault, restarts).await,
    };
    let leftover = util::leftover_children().await;
    for pid in &leftover {
        let _ = util::kill9(*pid);
    }
    match outcome {
        Ok(mut report) => {
            report["machine"] = util::machine(load);
            report["leftover_children"] = leftover.len().into();
            println!("\n{report}");
            if leftover.is_empty() {
                ExitCode::SUCCESS
            } else {
                eprintln!(
                    "error: {} child process(es) were still alive at the end: {leftover:?}",
                    leftover.len()
                );
                ExitCode::FAILURE
            }
        }
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}
