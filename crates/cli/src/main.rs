//! The `mcp-supervisor` binary: parses the command line, sets up logging, and hands each
//! command to its module. It holds no supervision logic of its own.
//!
//! Exit codes: 0 success, 1 runtime failure, 2 bad usage or an invalid config.

#![forbid(unsafe_code)]

mod adopt;
mod approve;
mod cli;
mod commands;
mod config_file;
mod control;
mod dashboard;
mod drain;
mod http;
mod logging;
mod login;
mod mcp_http;
mod registry;
mod reload;
mod serve;
mod telemetry;
mod wrap;

use std::process::ExitCode;

/// mimalloc rather than the system's allocator: a relayed message is a few allocations of about
/// its size, and glibc's malloc spent about a sixth of the proxy's CPU on them.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::Parser;

fn main() -> ExitCode {
    // This binary also starts sandboxed servers (SPEC §16): in that role, before any thread
    // exists, it confines itself and executes the server.
    if let Some(code) = mcp_supervisor::sandbox::run_if_asked() {
        return code;
    }
    // This binary is also its own orphan guard (one per proxy, see docs/operations.md): in that
    // role it does nothing else; otherwise the stdio servers it spawns are guarded.
    if let Some(code) = mcp_supervisor::guard::run_if_asked() {
        return code;
    }
    let args = cli::Cli::parse();
    let telemetry = logging::init(&args.log);
    // `wrap` serving only stdio, which is how every desktop host starts it, relays one client
    // to one server: one thread does that with no hand-off between threads on a message's way,
    // which is most of the relay's cost (docs/BENCHMARKS.md, "the stdio face").
    let mut builder = if args.command.is_stdio_wrap() {
        let mut builder = tokio::runtime::Builder::new_current_thread();
        // With many calls in flight, the client and the server go on first, and the face takes
        // what they wrote in one pass (mcp_supervisor_front::stdio::busy).
        builder.on_thread_park(|| {
            if mcp_supervisor_front::stdio::busy() {
                std::thread::yield_now();
            }
        });
        builder
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    let runtime = match builder.enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("mcp-supervisor: could not start the async runtime: {error}");
            return ExitCode::from(1);
        }
    };
    let outcome = runtime.block_on(commands::run(args.command));
    // A blocking read of stdin (the stdio face) never returns while stdin stays open: do not
    // wait for it, every child process is already gone by now.
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    // Every server is stopped: the guard has nothing left to do and exits.
    mcp_supervisor::guard::shutdown();
    // What is left of the traces goes out now (bounded), off the runtime.
    drop(telemetry);
    match outcome {
        Ok(code) => code,
        Err(error) => {
            eprintln!("mcp-supervisor: {error:#}");
            ExitCode::from(1)
        }
    }
}
