//! The commands: each one loads what it needs, drives the library, prints, and returns an exit
//! code. Errors reach the user with what to do next.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use mcp_supervisor::core::config::{Config, Problem, parse_config};
use mcp_supervisor::{CallArgs, Hub};

use crate::cli::Command;

/// Exit code for bad usage or an invalid config.
const USAGE: u8 = 2;

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
        Command::Adopt(args) => Ok(crate::adopt::run(args)),
        Command::Status {
            url,
            json,
            auth_token_env,
        } => crate::control::status(&url, json, auth_token_env.as_deref()).await,
        Command::Reconnect {
            server,
            url,
            auth_token_env,
        } => crate::control::reconnect(&url, &server, auth_token_env.as_deref()).await,
        Command::Serve {
            config,
            faces,
            catalog,
        } => {
            let loaded = match load(&config) {
                Ok(loaded) => loaded,
                Err(code) => return Ok(code),
            };
            crate::serve::run(
                loaded,
                Some(config),
                mcp_supervisor_front::Mode::Aggregate,
                faces_of(faces)?,
                state_dir(catalog),
            )
            .await
        }
        Command::Wrap {
            name,
            url,
            sse,
            header,
            header_from_env,
            oauth,
            policy,
            faces,
            catalog,
            command,
        } => {
            let remote = match (url, sse) {
                (Some(url), None) => Some(Remote::Http(url)),
                (None, Some(url)) => Some(Remote::Sse(url)),
                _ => None,
            };
            let config =
                match wrap_config(name, remote, (header, header_from_env), &policy, command) {
                    Ok(mut config) => {
                        if oauth && let Some(server) = config.servers.first_mut() {
                            server.oauth = Some(Default::default());
                        }
                        config
                    }
                    Err(message) => {
                        eprintln!("mcp-supervisor wrap: {message}");
                        return Ok(ExitCode::from(USAGE));
                    }
                };
            crate::serve::run(
                config,
                None,
                mcp_supervisor_front::Mode::Transparent,
                faces_of(faces)?,
                state_dir(catalog),
            )
            .await
        }
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

/// Read and validate a config file, printing every problem on failure.
pub(crate) fn load(path: &Path) -> Result<Config, ExitCode> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) => {
            eprintln!(
                "mcp-supervisor: cannot read config {}: {error}",
                path.display()
            );
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
    println!(
        "{}: valid, {} server(s)",
        path.display(),
        config.servers.len()
    );
    for server in &config.servers {
        let enabled = if server.enabled { "" } else { " (disabled)" };
        println!("  {}: {}{enabled}", server.name, server.describe());
    }
    Ok(ExitCode::SUCCESS)
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
        },
        drain: std::time::Duration::from_millis(args.drain_ms),
        limits: args.http_limits.into(),
    })
}

/// The server `wrap` fronts when it is not a command: `--url` or `--sse`.
enum Remote {
    Http(String),
    Sse(String),
}

/// The one-server config of `wrap`: naming mode `original`, policy from the flags.
fn wrap_config(
    name: Option<String>,
    url: Option<Remote>,
    (header, header_from_env): (Vec<String>, Vec<String>),
    policy: &crate::cli::PolicyArgs,
    command: Vec<String>,
) -> Result<Config, String> {
    use mcp_supervisor::core::config::{Secret, Start, ToolExposure, TransportConfig};
    use mcp_supervisor::core::naming::NamingMode;
    use mcp_supervisor::core::pin::PinMode;
    let mut headers = Vec::new();
    for line in header {
        match line.split_once(':') {
            Some((name, value)) if !name.trim().is_empty() => {
                headers.push((name.trim().to_owned(), Secret::new(value.trim_start())));
            }
            _ => {
                // The value may be a secret: name the flag, not what was given.
                return Err("a --header is not `NAME: VALUE` (e.g. `--header 'Authorization: Bearer TOKEN'`)".into());
            }
        }
    }
    for pair in header_from_env {
        let Some((name, var)) = pair
            .split_once('=')
            .filter(|(name, _)| !name.trim().is_empty())
        else {
            return Err(format!(
                "--header-from-env {pair:?} is not `NAME=VAR` (e.g. `--header-from-env Authorization=API_AUTH`)"
            ));
        };
        let Ok(value) = std::env::var(var) else {
            return Err(format!(
                "--header-from-env {pair:?}: the environment variable {var} is not set; set it in the server's env"
            ));
        };
        headers.push((name.trim().to_owned(), Secret::new(value)));
    }
    if !headers.is_empty() && url.is_none() {
        return Err("--header and --header-from-env go with --url or --sse: a command's server takes no HTTP headers".into());
    }
    let transport = match (url, command.split_first()) {
        (Some(Remote::Http(url)), None) => TransportConfig::Http { url, headers },
        (Some(Remote::Sse(url)), None) => TransportConfig::Sse { url, headers },
        (None, Some((program, args))) => TransportConfig::Stdio {
            command: program.clone(),
            args: args.to_vec(),
            env: Vec::new(),
            cwd: None,
        },
        (None, None) => return Err("give the server's command after `--` (e.g. `mcp-supervisor wrap -- npx -y some-server`), --url URL or --sse URL".into()),
        (Some(_), Some(_)) => return Err("give either --url, --sse or a command, not one with another".into()),
    };
    let name = name.unwrap_or_else(|| default_name(&transport));
    let url_flag = match &transport {
        TransportConfig::Sse { .. } => "--sse",
        TransportConfig::Http { .. } | TransportConfig::Stdio { .. } => "--url",
    };
    // The same checks and messages as a config file, on typed values: the command is kept
    // exactly as the shell gave it.
    let ms = Duration::from_millis;
    let mut server = Config::single(name.clone(), transport)
        .naming_mode(NamingMode::Original)
        .reconnect_enabled(!policy.no_reconnect)
        .initial_delay(ms(policy.initial_delay_ms))
        .max_delay(ms(policy.max_delay_ms))
        .max_attempts(policy.max_attempts)
        .health_interval(ms(policy.health_interval_ms))
        .tool_call_timeout(ms(policy.tool_call_timeout_ms))
        .connect_timeout(ms(policy.connect_timeout_ms))
        .retry_tools(policy.retry_tool.iter().cloned())
        .tool_exposure(match policy.tool_exposure {
            crate::cli::Exposure::All => ToolExposure::All,
            crate::cli::Exposure::Search => ToolExposure::Search,
        });
    if policy.on_demand {
        server = server.start(Start::OnDemand);
    }
    if let Some(idle) = policy.idle_timeout_ms {
        server = server.idle_timeout(ms(idle));
    }
    if !policy.allow_tool.is_empty() {
        server = server.allow_tools(policy.allow_tool.iter().cloned());
    }
    if !policy.deny_tool.is_empty() {
        server = server.deny_tools(policy.deny_tool.iter().cloned());
    }
    // clap allows only the modes' own words.
    if let Some(pin) = policy.pin.as_deref().and_then(PinMode::parse) {
        server = server.pin(pin);
    }
    if let Some(max) = policy.max_result_bytes {
        server = server.max_result_bytes(max);
    }
    server.build().map_err(|errors| {
        let lines: Vec<_> = errors
            .problems
            .iter()
            .map(|problem| flag_problem(problem, &name, url_flag))
            .collect();
        lines.join("\n")
    })
}

/// The config key under a server that each of `wrap`'s flags sets (an item of a list: `key[i]`).
const FLAG_KEYS: &[(&str, &str)] = &[
    ("reconnect.initialDelayMs", "--initial-delay-ms"),
    ("reconnect.maxDelayMs", "--max-delay-ms"),
    ("reconnect.maxAttempts", "--max-attempts"),
    ("health.intervalMs", "--health-interval-ms"),
    ("toolCallTimeoutMs", "--tool-call-timeout-ms"),
    ("connectTimeoutMs", "--connect-timeout-ms"),
    ("idleTimeoutMs", "--idle-timeout-ms"),
    ("maxResultBytes", "--max-result-bytes"),
    ("retryTools", "--retry-tool"),
    ("tools.allow", "--allow-tool"),
    ("tools.deny", "--deny-tool"),
    ("headers", "--header/--header-from-env"),
    ("command", "the command after --"),
    ("args", "the command after --"),
];

/// A problem of the builder in `wrap`'s words: the flag first, then the config key it stands for
/// (`--max-result-bytes: maxResultBytes must be …`), or the server name for `--name`.
fn flag_problem(problem: &Problem, name: &str, url_flag: &str) -> String {
    let server = [
        "mcpServers.".to_owned() + name,
        format!("mcpServers[{name:?}]"),
    ]
    .into_iter()
    .find_map(|prefix| problem.path.strip_prefix(&prefix));
    let Some(rest) = server else {
        return problem.to_string();
    };
    let Some(key) = rest.strip_prefix('.') else {
        return format!("--name {name:?} {}", problem.message);
    };
    let under = |k: &str| {
        key.strip_prefix(k)
            .is_some_and(|tail| tail.is_empty() || tail.starts_with(['.', '[']))
    };
    let flag = match FLAG_KEYS.iter().find(|(k, _)| under(k)) {
        Some((_, flag)) => flag,
        None if under("url") => url_flag,
        None => return problem.to_string(),
    };
    format!("{flag}: {key} {}", problem.message)
}

/// A server name from the command or URL: 1-64 of A-Za-z0-9_-.
fn default_name(transport: &mcp_supervisor::core::config::TransportConfig) -> String {
    use mcp_supervisor::core::config::TransportConfig;
    let raw = match transport {
        TransportConfig::Stdio { command, args, .. } => {
            // For launchers (npx, uvx, python …) the first non-flag argument names the server.
            let base = Path::new(command)
                .file_name()
                .and_then(|s| s.to_str())
                .unwrap_or("server");
            match base {
                "npx" | "uvx" | "pnpx" | "bunx" | "python" | "python3" | "node" | "uv" | "sh"
                | "bash" | "docker" => args
                    .iter()
                    .find(|a| !a.starts_with('-'))
                    .map(|a| a.rsplit('/').next().unwrap_or(a).to_string())
                    .unwrap_or_else(|| base.to_string()),
                other => other.to_string(),
            }
        }
        TransportConfig::Http { url, .. } | TransportConfig::Sse { url, .. } => url
            .split("://")
            .nth(1)
            .unwrap_or(url)
            .split('/')
            .next()
            .unwrap_or("server")
            .to_string(),
    };
    let clean: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    if clean.is_empty() {
        "server".into()
    } else {
        clean
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use mcp_supervisor::core::config::TransportConfig;
    use mcp_supervisor::core::naming::NamingMode;

    use super::*;

    /// `wrap_config` of `mcp-supervisor wrap ARGS…`.
    fn wrap(args: &[&str]) -> Result<Config, String> {
        let cli = crate::cli::Cli::try_parse_from(["mcp-supervisor", "wrap"].iter().chain(args))
            .expect("the flags parse");
        let Command::Wrap {
            name,
            url,
            sse,
            header,
            header_from_env,
            policy,
            command,
            ..
        } = cli.command
        else {
            panic!("not wrap");
        };
        let remote = url.map(Remote::Http).or(sse.map(Remote::Sse));
        wrap_config(name, remote, (header, header_from_env), &policy, command)
    }

    #[test]
    fn wrap_keeps_tool_names_and_the_command_exactly_as_given() {
        let config = wrap(&["--", "npx", "-y", "${HOME}", "a b"]).expect("valid");
        assert_eq!(config.naming.mode, NamingMode::Original);
        let server = &config.servers[0];
        assert_eq!(
            server.name, "__HOME_",
            "the name comes from the first word after npx's flags"
        );
        assert_eq!(
            server.transport,
            TransportConfig::Stdio {
                command: "npx".into(),
                args: vec!["-y".into(), "${HOME}".into(), "a b".into()],
                env: Vec::new(),
                cwd: None,
            }
        );
    }

    #[test]
    fn wrap_flags_set_what_their_config_keys_set() {
        let flags = [
            "--name",
            "fs",
            "--no-reconnect",
            "--initial-delay-ms",
            "100",
            "--max-delay-ms",
            "2000",
            "--max-attempts",
            "3",
            "--tool-call-timeout-ms",
            "7",
            "--connect-timeout-ms",
            "8",
            "--health-interval-ms",
            "0",
            "--on-demand",
            "--idle-timeout-ms",
            "60000",
            "--retry-tool",
            "read",
            "--allow-tool",
            "read_*",
            "--deny-tool",
            "read_secret",
            "--pin",
            "block",
            "--max-result-bytes",
            "1000",
            "--tool-exposure",
            "search",
            "--",
            "npx",
        ];
        let file = r#"{"toolExposure": "search", "naming": {"mode": "original"}, "mcpServers": {"fs": {
            "command": "npx",
            "reconnect": {"enabled": false, "initialDelayMs": 100, "maxDelayMs": 2000, "maxAttempts": 3},
            "toolCallTimeoutMs": 7, "connectTimeoutMs": 8, "health": {"intervalMs": 0},
            "start": "onDemand", "idleTimeoutMs": 60000, "retryTools": ["read"],
            "tools": {"allow": ["read_*"], "deny": ["read_secret"]}, "pin": "block",
            "maxResultBytes": 1000}}}"#;
        assert_eq!(
            wrap(&flags),
            Ok(parse_config(file, &|_| None).expect("valid"))
        );
    }

    #[test]
    fn a_bad_flag_is_named_with_the_config_key_it_stands_for() {
        let cases: &[(&[&str], &str)] = &[
            (
                &["--max-result-bytes", "0", "--", "true"],
                "--max-result-bytes: maxResultBytes must be a positive number of bytes no greater than 2147483647 (got 0)",
            ),
            (
                &["--max-delay-ms", "100", "--", "true"],
                "--initial-delay-ms: reconnect.initialDelayMs (500) must not exceed maxDelayMs (100)",
            ),
            (
                &["--allow-tool", "a[", "--", "true"],
                "--allow-tool: tools.allow[0] is not a valid glob pattern: unclosed character class; missing ']'",
            ),
            (
                &["--name", "my server", "--", "true"],
                "--name \"my server\" is not a valid server name: use 1 to 64 characters of A-Za-z0-9_-",
            ),
            (
                &["--url", "ftp://h/mcp"],
                "--url: url must be an http:// or https:// URL (got scheme \"ftp\")",
            ),
            (
                &["--sse", "localhost/sse"],
                "--sse: url must be an http:// or https:// URL",
            ),
            (
                &["--", ""],
                "the command after --: command is empty: name the program to run",
            ),
        ];
        for (args, message) in cases {
            assert_eq!(
                wrap(args).as_ref().map(|_| ()),
                Err(&(*message).to_owned()),
                "{args:?}"
            );
        }
        let both = wrap(&["--max-attempts", "0", "--retry-tool", "", "--", "true"]);
        assert_eq!(
            both.expect_err("invalid"),
            "--max-attempts: reconnect.maxAttempts must be a positive integer no greater than 2147483647 (got 0)\n\
             --retry-tool: retryTools[0] must be a tool name (got an empty string)"
        );
    }
}
