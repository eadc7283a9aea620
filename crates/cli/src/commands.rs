//! The commands: each one loads what it needs, drives the library, prints, and returns an exit
//! code. Errors reach the user with what to do next.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use mcp_supervisor::core::config::AuditConfig;
use mcp_supervisor::{CallArgs, Hub};

use crate::cli::Command;
use crate::config_file::{USAGE, load};

pub async fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Check {
            config,
            list,
            wait_ms,
        } => {
            let code = check(&config)?;
            if list && code == ExitCode::SUCCESS {
                check_filters(&config, wait_ms).await;
            }
            Ok(code)
        }
        Command::Adopt(args) => Ok(crate::adopt::run(
            args,
            &<crate::cli::Cli as clap::CommandFactory>::command(),
        )),
        Command::Status {
            url,
            json,
            auth_token_env,
        } => crate::control::status(&url, json, auth_token_env.as_deref()).await,
        Command::Dashboard { listen, open, dir } => crate::dashboard::run(listen, open, dir).await,
        Command::Reconnect {
            server,
            url,
            auth_token_env,
        } => crate::control::reconnect(&url, &server, auth_token_env.as_deref()).await,
        Command::Serve {
            config,
            faces,
            catalog,
            audit,
        } => {
            let mut loaded = match load(&config) {
                Ok(loaded) => loaded,
                Err(code) => return Ok(code),
            };
            if let Some(path) = &audit {
                loaded.audit = Some(AuditConfig { path: path.clone() });
            }
            crate::serve::run(
                loaded,
                Some(config),
                audit,
                mcp_supervisor_front::Mode::Aggregate,
                faces_of(faces)?,
                state_dir(catalog),
            )
            .await
        }
        Command::Wrap(args) => wrap(*args).await,
        Command::Tools {
            config,
            json,
            wait_ms,
        } => tools(&config, json, wait_ms).await,
        Command::Call {
            config,
            tool,
            args,
            timeout_ms,
        } => call(&config, &tool, &args, timeout_ms).await,
        Command::Approve {
            server,
            config,
            state_dir,
            tool,
            url,
            sse,
            wrap: _,
            command,
        } => {
            let which = match (config, url, sse, command.is_empty()) {
                (Some(config), ..) => crate::approve::Which::Config(config),
                (None, Some(url), ..) => crate::approve::Which::Url(url),
                (None, None, Some(url), _) => crate::approve::Which::Sse(url),
                (None, None, None, false) => crate::approve::Which::Command(command),
                (None, None, None, true) => crate::approve::Which::Name,
            };
            let dir = state_dir.or_else(mcp_supervisor::catalog::CatalogStore::default_dir);
            Ok(crate::approve::run(
                server.as_deref(),
                which,
                dir,
                tool.as_deref(),
            ))
        }
        Command::Login {
            server,
            config,
            url,
            no_browser,
            wait_ms,
        } => {
            let target = match (config, url) {
                (_, Some(url)) => crate::login::Target::Url(url),
                (Some(config), None) => crate::login::Target::Config(config),
                (None, None) => {
                    eprintln!("mcp-supervisor login: give --config FILE or --url URL");
                    return Ok(ExitCode::from(USAGE));
                }
            };
            crate::login::run(target, &server, no_browser, wait_ms).await
        }
    }
}

/// `mcp-supervisor wrap`: its one-server config from its flags, served in transparent mode.
async fn wrap(args: crate::cli::WrapArgs) -> anyhow::Result<ExitCode> {
    let usage = |message: String| {
        eprintln!("mcp-supervisor wrap: {message}");
        Ok(ExitCode::from(USAGE))
    };
    let mut config = match crate::wrap::wrap_config(&args) {
        Ok(config) => config,
        Err(message) => return usage(message),
    };
    if args.oauth
        && let Some(server) = config.servers.first_mut()
    {
        server.oauth = Some(Default::default());
    }
    config.auth = match crate::wrap::auth_of(&args.auth) {
        Ok(auth) => auth,
        Err(message) => return usage(message),
    };
    config.audit = args.audit.map(|path| AuditConfig { path });
    crate::serve::run(
        config,
        None,
        None,
        mcp_supervisor_front::Mode::Transparent,
        faces_of(args.faces)?,
        state_dir(args.catalog),
    )
    .await
}

fn check(path: &Path) -> anyhow::Result<ExitCode> {
    let config = match load(path) {
        Ok(config) => config,
        Err(code) => return Ok(code),
    };
    println!(
        "{}: valid, {} server(s)",
        path.display(),
        config.servers.len()
    );
    for server in &config.servers {
        let enabled = if server.enabled { "" } else { " (disabled)" };
        println!("  {}: {}{enabled}", server.name, server.describe());
    }
    warn_sandboxes(&config);
    Ok(ExitCode::SUCCESS)
}

/// `check`: a warning for each enabled sandboxed server whose sandbox this machine cannot give
/// whole (SPEC §16), said before a proxy refuses to start it. Warnings never change the exit
/// code.
fn warn_sandboxes(config: &mcp_supervisor::core::config::Config) {
    use mcp_supervisor::sandbox;
    let mut support = None;
    for server in config.servers.iter().filter(|s| s.enabled) {
        let Some(config) = &server.sandbox else {
            continue;
        };
        let support = support.get_or_insert_with(sandbox::probe);
        // This binary is its own sandbox helper.
        let lacking = sandbox::plan(config, support, true).lacking;
        if lacking.is_empty() {
            continue;
        }
        let lacking = lacking.join("; ");
        if config.best_effort {
            println!(
                "warning: mcpServers.{}.sandbox: bestEffort: it will run without what this machine lacks: {lacking}",
                server.name
            );
        } else {
            println!(
                "warning: mcpServers.{}.sandbox: this machine cannot give it, so the server will not start: {lacking}; set \"bestEffort\": true to run it with what there is",
                server.name
            );
        }
    }
}

/// `check --list`: start the servers that have a tool filter, and warn about each pattern that
/// matches nothing the server lists. A server that does not come up cannot be checked; that is
/// said too. Warnings never change the exit code.
async fn check_filters(path: &Path, wait_ms: u64) {
    let Ok(config) = load(path) else { return };
    let mut filtered = config.clone();
    filtered.servers.retain(|s| s.enabled && !s.tools.is_open());
    if filtered.servers.is_empty() {
        println!("no enabled server has a tool filter: nothing to list");
        return;
    }
    let hub = Hub::start(filtered.clone());
    let pending = hub.wait_ready(Duration::from_millis(wait_ms)).await;
    for server in &filtered.servers {
        if pending.contains(&server.name) {
            println!(
                "warning: mcpServers.{}.tools: cannot check the patterns, the server did not list its tools within {wait_ms} ms",
                server.name
            );
            continue;
        }
        let listed = hub.registry().listed(&server.name);
        let names: Vec<&str> = listed.iter().map(String::as_str).collect();
        let unmatched = server.tools.unmatched(&names);
        for (list, index, pattern) in &unmatched {
            println!(
                "warning: mcpServers.{}.tools.{}[{index}] {pattern:?} matches no tool the server lists ({} listed: {})",
                server.name,
                list.key(),
                names.len(),
                names.join(", ")
            );
        }
        if unmatched.is_empty() {
            println!(
                "  {}: every tool filter pattern matches a listed tool ({} of {} published)",
                server.name,
                hub.registry().count(&server.name),
                names.len()
            );
        }
    }
    hub.stop().await;
}

async fn start(path: &Path, wait_ms: u64) -> Result<Hub, ExitCode> {
    let config = load(path)?;
    // A one-shot client: as the official SDKs' clients, discover first, then the handshake.
    let options = mcp_supervisor::HubOptions {
        handshake: Some(mcp_supervisor::hub::discovering_handshake(
            &serde_json::json!({}),
        )),
        ..mcp_supervisor::HubOptions::default()
    };
    let hub = Hub::start_with_options(config, options);
    let pending = hub
        .wait_ready_or_needs_auth(Duration::from_millis(wait_ms))
        .await;
    for name in pending {
        let status = hub.status().into_iter().find(|s| s.name == name);
        if let Some(status) = status {
            eprintln!(
                "mcp-supervisor: server \"{name}\" is not ready ({}){}",
                status.state,
                status
                    .last_error
                    .map(|e| format!(": {e}"))
                    .unwrap_or_default()
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
        let list: Vec<_> = tools
            .iter()
            .map(|t| {
                serde_json::from_str::<serde_json::Value>(t.definition.get()).unwrap_or_default()
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&list)?);
    } else {
        let width = tools
            .iter()
            .map(|t| t.public_name.len())
            .max()
            .unwrap_or(4)
            .max(4);
        println!("{:<width$}  {:<12}  DESCRIPTION", "TOOL", "SERVER");
        for tool in tools.iter() {
            let typed = tool.tool().ok();
            let description = typed
                .as_ref()
                .and_then(|t| t.description.as_deref())
                .unwrap_or("");
            let description = description.lines().next().unwrap_or("");
            println!(
                "{:<width$}  {:<12}  {description}",
                tool.public_name, tool.server
            );
        }
    }
    hub.stop().await;
    Ok(ExitCode::SUCCESS)
}

async fn call(
    path: &Path,
    tool: &str,
    args: &str,
    timeout_ms: Option<u64>,
) -> anyhow::Result<ExitCode> {
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
            Ok(if result.is_error == Some(true) {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            })
        }
        Err(error) => {
            eprintln!("mcp-supervisor: {error}");
            Ok(ExitCode::from(1))
        }
    }
}

/// Where catalogs are saved: `--state-dir`, else the user's cache directory; none with
/// `--no-catalog` or when there is no home to find a cache directory in.
fn state_dir(args: crate::cli::CatalogArgs) -> Option<std::path::PathBuf> {
    if args.no_catalog {
        return None;
    }
    let dir = args
        .state_dir
        .or_else(mcp_supervisor::catalog::CatalogStore::default_dir);
    if dir.is_none() {
        tracing::warn!(
            "no cache directory (neither XDG_CACHE_HOME nor HOME is set): catalogs are not saved; pass --state-dir DIR to keep them"
        );
    }
    dir
}

fn faces_of(args: crate::cli::FaceArgs) -> anyhow::Result<crate::serve::Faces> {
    let token = match &args.auth_token_env {
        Some(var) => match std::env::var(var) {
            Ok(token) if !token.is_empty() => Some(token),
            _ => bail!(
                "--auth-token-env {var}: the environment variable {var} is not set or empty; set it to the bearer token clients must send"
            ),
        },
        None => None,
    };
    let keys = mcp_supervisor_front::seal::Keys::load(
        args.session_key_file.as_deref(),
        args.previous_session_key_file.as_deref(),
    )?;
    if keys.random && args.http.is_some() {
        tracing::info!(
            "HTTP session ids are sealed with a key of this process's own: set {} (or --session-key-file) to the same key on every replica so that any of them resumes a session",
            mcp_supervisor_front::seal::KEY_VAR
        );
    }
    Ok(crate::serve::Faces {
        keys,
        stdio: args.stdio || args.http.is_none(),
        http: args.http,
        admin: args.admin,
        guard: crate::http::Guard {
            token,
            hosts: args.allow_host,
            origins: args.allow_origin,
            auth: None,
        },
        drain: std::time::Duration::from_millis(args.drain_ms),
        limits: args.http_limits.into(),
    })
}
