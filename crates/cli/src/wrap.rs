//! `wrap`'s one-server config, from its flags: the server (a command, `--url` or `--sse`), its
//! headers, its name (given, or made from the command or URL) and its policy, built with the
//! config file's own checks ([`mcp_supervisor::core::config::ServerBuilder`]), naming mode
//! `original`. A problem names the flag first.
//!
//! It never starts anything and never reads a file.

use std::path::Path;
use std::time::Duration;

use mcp_supervisor::core::config::{Config, Problem};

/// The server `wrap` fronts when it is not a command: `--url` or `--sse`.
enum Remote {
    Http(String),
    Sse(String),
}

/// The one-server config of `wrap`: naming mode `original`, policy from the flags.
pub(crate) fn wrap_config(args: &crate::cli::WrapArgs) -> Result<Config, String> {
    use mcp_supervisor::core::config::{Secret, Start, ToolExposure, TransportConfig};
    use mcp_supervisor::core::naming::NamingMode;
    use mcp_supervisor::core::pin::PinMode;
    let policy = &args.policy;
    let url = match (&args.url, &args.sse) {
        (Some(url), None) => Some(Remote::Http(url.clone())),
        (None, Some(url)) => Some(Remote::Sse(url.clone())),
        _ => None,
    };
    let mut headers = Vec::new();
    for line in &args.header {
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
    for pair in &args.header_from_env {
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
    let transport = match (url, args.command.split_first()) {
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
    let name = args
        .name
        .clone()
        .unwrap_or_else(|| default_name(&transport));
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
    if let Some(sandbox) = sandbox_of(policy)? {
        server = server.sandbox(sandbox);
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

/// The sandbox of the `--sandbox-*` flags (`None` when none is given): `~/` expanded with this
/// process's HOME (a shell leaves `--sandbox-read=~/x` as it is), the network parsed; the
/// builder then checks it as a config file's `sandbox`.
fn sandbox_of(
    policy: &crate::cli::PolicyArgs,
) -> Result<Option<mcp_supervisor::core::config::SandboxConfig>, String> {
    use mcp_supervisor::core::config::{Network, SandboxConfig};
    if policy.sandbox_read.is_empty()
        && policy.sandbox_write.is_empty()
        && policy.sandbox_network.is_none()
        && !policy.sandbox_best_effort
    {
        return Ok(None);
    }
    let home = std::env::var("HOME").ok();
    let expand = |paths: &[String]| -> Vec<std::path::PathBuf> {
        paths
            .iter()
            .map(|p| match p.strip_prefix("~/").zip(home.as_deref()) {
                Some((rest, home)) if home.starts_with('/') => Path::new(home).join(rest),
                _ => p.into(),
            })
            .collect()
    };
    let network = match policy.sandbox_network.as_deref() {
        None | Some("none") => Network::None,
        Some("all") => Network::All,
        Some(ports) => {
            let parsed: Result<Vec<u16>, _> = ports.split(',').map(|p| p.trim().parse()).collect();
            match parsed {
                Ok(ports) => Network::ConnectPorts(ports),
                Err(_) => {
                    return Err(format!(
                        "--sandbox-network: sandbox.network must be none, all, or TCP ports from 1 to 65535 separated by commas, like 443,8080 (got {ports:?})"
                    ));
                }
            }
        }
    };
    Ok(Some(SandboxConfig {
        read: expand(&policy.sandbox_read),
        write: expand(&policy.sandbox_write),
        network,
        best_effort: policy.sandbox_best_effort,
    }))
}

/// The `auth` of `wrap --http`'s flags (`None` without `--auth-issuer`), through the same
/// checks and messages as a config file's `"auth"`, each problem naming its flag.
pub(crate) fn auth_of(
    args: &crate::cli::AuthArgs,
) -> Result<Option<mcp_supervisor::core::config::AuthConfig>, String> {
    let Some(issuer) = &args.auth_issuer else {
        return Ok(None);
    };
    let mut auth = serde_json::json!({
        "issuer": issuer,
        "audience": args.auth_audience.clone().unwrap_or_default(),
        "scopes": args.auth_scope,
        "adminScopes": args.auth_admin_scope,
    });
    if let Some(jwks) = &args.auth_jwks_uri {
        auth["jwksUri"] = serde_json::json!(jwks);
    }
    let text = serde_json::json!({ "mcpServers": { "flags": { "command": "-" } }, "auth": auth })
        .to_string();
    match mcp_supervisor::core::config::parse_config(&text, &|_| None) {
        Ok(config) => Ok(config.auth),
        Err(errors) => Err(errors
            .problems
            .iter()
            .map(|problem| {
                let path = problem.path.as_str();
                let flag = [
                    ("auth.issuer", "--auth-issuer"),
                    ("auth.audience", "--auth-audience"),
                    ("auth.scopes", "--auth-scope"),
                    ("auth.adminScopes", "--auth-admin-scope"),
                    ("auth.jwksUri", "--auth-jwks-uri"),
                ]
                .iter()
                .find(|(key, _)| path.starts_with(key))
                .map_or(path, |(_, flag)| flag);
                format!("{flag}: {}", problem.message)
            })
            .collect::<Vec<_>>()
            .join("\n")),
    }
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
    ("sandbox.read", "--sandbox-read"),
    ("sandbox.write", "--sandbox-write"),
    ("sandbox.network", "--sandbox-network"),
    ("sandbox", "--sandbox-*"),
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
    use crate::cli::Command;
    use mcp_supervisor::core::config::parse_config;

    /// `wrap_config` of `mcp-supervisor wrap ARGS…`.
    fn wrap(args: &[&str]) -> Result<Config, String> {
        let cli = crate::cli::Cli::try_parse_from(["mcp-supervisor", "wrap"].iter().chain(args))
            .expect("the flags parse");
        let Command::Wrap(args) = cli.command else {
            panic!("not wrap");
        };
        wrap_config(&args)
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
    fn sandbox_flags_make_a_sandbox() {
        use mcp_supervisor::core::config::Network;
        let config = wrap(&["--", "srv"]).expect("valid");
        assert_eq!(config.servers[0].sandbox, None, "no flag, no sandbox");
        let config = wrap(&[
            "--sandbox-read",
            "/srv/a",
            "--sandbox-write",
            "/srv/b",
            "--sandbox-write",
            "/srv/c",
            "--sandbox-network",
            "443, 8080",
            "--",
            "srv",
        ])
        .expect("valid");
        let sandbox = config.servers[0].sandbox.clone().expect("a sandbox");
        assert_eq!(sandbox.read, [Path::new("/srv/a")]);
        assert_eq!(sandbox.write, [Path::new("/srv/b"), Path::new("/srv/c")]);
        assert_eq!(sandbox.network, Network::ConnectPorts(vec![443, 8080]));
        assert!(!sandbox.best_effort);
        let config = wrap(&["--sandbox-best-effort", "--", "srv"]).expect("valid");
        let sandbox = config.servers[0].sandbox.clone().expect("a sandbox");
        assert_eq!(sandbox.network, Network::None);
        assert!(sandbox.best_effort);
        let error = wrap(&["--sandbox-network", "web", "--", "srv"]).expect_err("not a port");
        assert!(error.starts_with("--sandbox-network: "), "{error}");
    }

    #[test]
    fn a_bad_flag_is_named_with_the_config_key_it_stands_for() {
        let cases: &[(&[&str], &str)] = &[
            (
                &["--max-result-bytes", "0", "--", "true"],
                "--max-result-bytes: maxResultBytes must be a positive number of bytes no greater than 2147483647 (got 0)",
            ),
            (
                &["--sandbox-read", "rel/dir", "--", "true"],
                "--sandbox-read: sandbox.read[0] must be an absolute path or start with ~/ (a relative path would depend on where the proxy runs): give the full path",
            ),
            (
                &["--sandbox-network", "0", "--", "true"],
                "--sandbox-network: sandbox.network.connectPorts[0] must be a TCP port, a whole number from 1 to 65535 (got 0)",
            ),
            (
                &[
                    "--sandbox-write",
                    "/tmp/x",
                    "--url",
                    "http://127.0.0.1:1/mcp",
                ],
                "--sandbox-*: sandbox applies only to \"command\" servers (stdio), whose process the proxy starts; this server has \"url\": remove it",
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
