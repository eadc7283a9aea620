//! The commands: each one loads what it needs, drives the library, prints, and returns an exit
//! code. Errors reach the user with what to do next.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use mcp_supervisor::core::config::{Config, parse_config};
use mcp_supervisor::{CallArgs, Hub};

use crate::cli::Command;

/// Exit code for bad usage or an invalid config.
const USAGE: u8 = 2;

pub async fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Check { config } => check(&config),
        Command::Tools { config, json, wait_ms } => tools(&config, json, wait_ms).await,
        Command::Call { config, tool, args, timeout_ms } => call(&config, &tool, &args, timeout_ms).await,
    }
}

/// Read and validate a config file, printing every problem on failure.
fn load(path: &Path) -> Result<Config, ExitCode> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) => {
            eprintln!("mcp-supervisor: cannot read config {}: {error}", path.display());
            return Err(ExitCode::from(USAGE));
        }
    };
    parse_config(&text, &|name| std::env::var(name).ok()).map_err(|errors| {
        eprintln!("{}: {} problem(s):", path.display(), errors.problems.len());
        for problem in &errors.problems {
            eprintln!("  - {problem}");
        }
        ExitCode::from(USAGE)
    })
}

fn check(path: &Path) -> anyhow::Result<ExitCode> {
    let config = match load(path) {
        Ok(config) => config,
        Err(code) => return Ok(code),
    };
    println!("{}: valid, {} server(s)", path.display(), config.servers.len());
    for server in &config.servers {
        let enabled = if server.enabled { "" } else { " (disabled)" };
        println!("  {}: {}{enabled}", server.name, server.describe());
    }
    Ok(ExitCode::SUCCESS)
}

async fn start(path: &Path, wait_ms: u64) -> Result<Hub, ExitCode> {
    let config = load(path)?;
    let hub = Hub::start(config);
    let pending = hub.wait_ready(Duration::from_millis(wait_ms)).await;
    for name in pending {
        let status = hub.status().into_iter().find(|s| s.name == name);
        if let Some(status) = status {
            eprintln!(
                "mcp-supervisor: server \"{name}\" is not ready ({}){}",
                status.state,
                status.last_error.map(|e| format!(": {e}")).unwrap_or_default()
            );
        }
    }
    Ok(hub)
}

async fn tools(path: &Path, json: bool, wait_ms: u64) -> anyhow::Result<ExitCode> {
    let hub = match start(path, wait_ms).await {
        Ok(hub) => hub,
        Err(code) => return Ok(code),
    };
    let tools = hub.tools();
    if json {
        let list: Vec<_> = tools.iter().map(|t| &t.tool).collect();
        println!("{}", serde_json::to_string_pretty(&list)?);
    } else {
        let width = tools.iter().map(|t| t.public_name.len()).max().unwrap_or(4).max(4);
        println!("{:<width$}  {:<12}  DESCRIPTION", "TOOL", "SERVER");
        for tool in tools.iter() {
            let description = tool.tool.description.as_deref().unwrap_or("");
            let description = description.lines().next().unwrap_or("");
            println!("{:<width$}  {:<12}  {description}", tool.public_name, tool.server);
        }
    }
    hub.stop().await;
    Ok(ExitCode::SUCCESS)
}

async fn call(path: &Path, tool: &str, args: &str, timeout_ms: Option<u64>) -> anyhow::Result<ExitCode> {
    let arguments: serde_json::Value =
        serde_json::from_str(args).with_context(|| format!("--args is not valid JSON: {args}"))?;
    let serde_json::Value::Object(arguments) = arguments else {
        bail!("--args must be a JSON object, like '{{\"message\":\"hi\"}}'");
    };
    let hub = match start(path, 30_000).await {
        Ok(hub) => hub,
        Err(code) => return Ok(code),
    };
    let outcome = hub
        .call(
            tool,
            CallArgs {
                arguments: Some(arguments),
                timeout: timeout_ms.map(Duration::from_millis),
                ..CallArgs::default()
            },
        )
        .await;
    hub.stop().await;
    match outcome {
        Ok(result) => {
            println!("{}", serde_json::to_string_pretty(&result)?);
            Ok(if result.is_error == Some(true) { ExitCode::from(1) } else { ExitCode::SUCCESS })
        }
        Err(error) => {
            eprintln!("mcp-supervisor: {error}");
            Ok(ExitCode::from(1))
        }
    }
}
