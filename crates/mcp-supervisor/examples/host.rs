//! An agent host's loop around a [`Hub`]: start two MCP servers from a config, list their
//! tools, call them with a deadline turn after turn, print what the hub reports as it happens,
//! live through a `kill -9` of one server (the next call heals on a fresh process), and stop
//! with no server process left behind.
//!
//! It runs the workspace's fault server, so it needs nothing outside this repository:
//!
//! ```sh
//! cargo build -p mcp-fault-server
//! cargo run -p mcp-supervisor --example host
//! ```
//!
//! The fault server is looked for next to the example's target folder (`target/debug/`), or
//! given as the first argument or in `MCP_FAULT_SERVER`.

use std::collections::BTreeSet;
use std::error::Error;
use std::path::{Path, PathBuf};
use std::time::Duration;

use mcp_supervisor::core::config::parse_config;
use mcp_supervisor::{CallArgs, CallError, Hub, HubEvent, ServerStatus};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::json;
use tokio::sync::broadcast::error::RecvError;

/// How long one tool call may take, readiness wait and any recovery included.
const DEADLINE: Duration = Duration::from_secs(10);

/// The turn before which the example kills `beta`.
const KILL_AT_TURN: u32 = 3;

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let server = fault_server()?;
    println!("fault server: {}", server.display());

    // 1. Two servers from a config, as a host would read it from its settings file. `beta`
    //    reconnects after 200 ms instead of the default 500 ms.
    let config = json!({ "mcpServers": {
        "alpha": { "command": server },
        "beta": { "command": server, "reconnect": { "initialDelayMs": 200 } },
    }});
    let config = parse_config(&config.to_string(), &|name| std::env::var(name).ok())
        .map_err(|errors| format!("the config is invalid:\n{errors}"))?;
    let hub = Hub::start(config);

    // 2. What the hub reports, printed as it happens: state changes and tool-list changes. The
    //    task ends when the hub is gone (its event channel closes).
    let mut events = hub.subscribe();
    let printer = tokio::spawn(async move {
        loop {
            match events.recv().await {
                Ok(HubEvent::State {
                    server,
                    state,
                    generation,
                }) => println!("  event: {server} is {state} (generation {generation})"),
                Ok(HubEvent::ToolsChanged) => println!("  event: the tool list changed"),
                Ok(HubEvent::Notification(_)) => {}
                Err(RecvError::Lagged(missed)) => println!("  event: {missed} events missed"),
                Err(RecvError::Closed) => break,
            }
        }
    });

    // Every process the servers ran, to check at the end that none is left.
    let mut pids = BTreeSet::new();
    let outcome = host_loop(&hub, &mut pids).await;

    // 6. Stop, whatever happened: every process ends, and the hub waits until it has.
    hub.stop().await;
    drop(hub);
    printer.await?;
    outcome?;
    let left: Vec<u32> = pids.iter().copied().filter(|&pid| running(pid)).collect();
    if !left.is_empty() {
        return Err(format!("server processes left running: {left:?}").into());
    }
    println!("stopped cleanly: no server process left (pids {pids:?})");
    Ok(())
}

/// The host's work: wait for the servers, list the tools, then call them turn after turn.
async fn host_loop(hub: &Hub, pids: &mut BTreeSet<u32>) -> Result<(), Box<dyn Error>> {
    let not_ready = hub.wait_ready(Duration::from_secs(10)).await;
    if !not_ready.is_empty() {
        return Err(format!("not ready within 10 s: {not_ready:?}").into());
    }

    // 3. The tools, under their public names (`<server>__<tool>`).
    let tools = hub.tools();
    for name in hub.servers() {
        let names: Vec<&str> = tools
            .iter()
            .filter(|t| t.server == name)
            .map(|t| t.public_name.as_str())
            .collect();
        println!("{name}: {} tools ({})", names.len(), names.join(", "));
    }

    pids.extend(hub.status().iter().filter_map(|s| s.pid));

    // 4. A deadline is the call's whole budget: a tool that takes longer ends with `TimedOut`
    //    (the server gets `notifications/cancelled`).
    let slow = with_args(json!({ "ms": 5_000 }), Duration::from_millis(300));
    match hub.call("alpha__sleep", slow).await {
        Err(error @ CallError::TimedOut { .. }) => println!("alpha__sleep: {error}"),
        other => return Err(format!("expected a timeout, got {other:?}").into()),
    }

    // 5. The host's loop: each turn calls a tool of each server.
    for turn in 1..=4 {
        if turn == KILL_AT_TURN {
            // Something outside the host kills a server: the host does nothing about it.
            let beta = status_of(hub, "beta")?;
            let pid = beta.pid.ok_or("beta has no process id")?;
            kill(Pid::from_raw(i32::try_from(pid)?), Signal::SIGKILL)?;
            println!(
                "turn {turn}: killed beta with SIGKILL (pid {pid}, generation {})",
                beta.generation
            );
        }
        let sum = hub
            .call(
                "alpha__add",
                with_args(json!({ "a": turn, "b": 10 }), DEADLINE),
            )
            .await?;
        let message = format!("turn {turn}");
        let echo = hub
            .call(
                "beta__echo",
                with_args(json!({ "message": message }), DEADLINE),
            )
            .await?;
        let beta = status_of(hub, "beta")?;
        pids.extend(beta.pid);
        println!(
            "turn {turn}: alpha__add = {}, beta__echo = {:?} (beta generation {}, pid {}, restarts {})",
            text(&sum),
            text(&echo),
            beta.generation,
            beta.pid.map_or("-".into(), |p| p.to_string()),
            beta.restarts,
        );
        if turn == KILL_AT_TURN && beta.restarts > 0 {
            println!("turn {turn}: healed: beta answered on a fresh process");
        }
    }
    Ok(())
}

/// The fault server: the first argument, `MCP_FAULT_SERVER`, or the one built next to this
/// example (`target/<profile>/examples/host` → `target/<profile>/mcp-fault-server`).
fn fault_server() -> Result<PathBuf, Box<dyn Error>> {
    if let Some(path) = std::env::args_os()
        .nth(1)
        .or_else(|| std::env::var_os("MCP_FAULT_SERVER"))
    {
        return Ok(PathBuf::from(path));
    }
    let exe = std::env::current_exe()?;
    match exe.parent().and_then(Path::parent) {
        Some(dir) if dir.join("mcp-fault-server").exists() => Ok(dir.join("mcp-fault-server")),
        _ => Err(
            "mcp-fault-server not found: build it (cargo build -p mcp-fault-server), \
                  or give its path as the first argument or in MCP_FAULT_SERVER"
                .into(),
        ),
    }
}

/// Call arguments with a deadline.
fn with_args(arguments: serde_json::Value, deadline: Duration) -> CallArgs {
    CallArgs {
        arguments: arguments.as_object().cloned(),
        timeout: Some(deadline),
        ..CallArgs::default()
    }
}

/// One server's status.
fn status_of(hub: &Hub, name: &str) -> Result<ServerStatus, Box<dyn Error>> {
    hub.status()
        .into_iter()
        .find(|s| s.name == name)
        .ok_or_else(|| format!("no server named {name}").into())
}

/// The text of a tool result's first content item.
fn text(result: &rmcp::model::CallToolResult) -> String {
    result
        .content
        .first()
        .and_then(|c| c.as_text())
        .map(|t| t.text.clone())
        .unwrap_or_default()
}

/// Whether a process with this id still exists (a zombie counts: nobody reaped it).
fn running(pid: u32) -> bool {
    i32::try_from(pid).is_ok_and(|pid| kill(Pid::from_raw(pid), None).is_ok())
}
