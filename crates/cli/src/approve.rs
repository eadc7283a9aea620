//! `mcp-supervisor approve`: find a server's pins (by its config, by the command line or URL
//! `wrap` was given, or by its name among the pin files), show each change waiting for approval
//! and make it the pin. A running proxy notices the rewritten file by itself.
//!
//! It never starts a server and never talks to a proxy: the pin file is the whole exchange.

use std::path::PathBuf;
use std::process::ExitCode;

use mcp_supervisor::core::config::{ServerConfig, TransportConfig};
use mcp_supervisor::pins;

use crate::config_file::USAGE;

/// How the server is named.
pub enum Which {
    /// By its name in this config.
    Config(PathBuf),
    /// The server of `wrap --url URL`.
    Url(String),
    /// The server of `wrap --sse URL`.
    Sse(String),
    /// The server of `wrap -- COMMAND ARGS`.
    Command(Vec<String>),
    /// By its name alone, among the pin files.
    Name,
}

pub fn run(
    server: Option<&str>,
    which: Which,
    dir: Option<PathBuf>,
    tool: Option<&str>,
) -> ExitCode {
    let Some(dir) = dir else {
        eprintln!(
            "mcp-supervisor approve: no cache directory (neither XDG_CACHE_HOME nor HOME is set); give the proxy's --state-dir DIR"
        );
        return ExitCode::from(USAGE);
    };
    let (label, path) = match locate(server, which, &dir) {
        Ok(found) => found,
        Err((code, message)) => {
            eprintln!("mcp-supervisor approve: {message}");
            return ExitCode::from(code);
        }
    };
    let approved = pins::approve_file(&path, tool);
    // A wrap server named by its command line or URL goes by the name its pins were written under.
    let label = match (&approved, server) {
        (Ok(approval), None) => approval.name.clone(),
        _ => label,
    };
    match approved {
        Ok(approval) if approval.accepted.is_empty() => {
            println!(
                "{label}: no change is waiting for approval ({} tools pinned in {})",
                approval.pinned,
                approval.path.display()
            );
            ExitCode::SUCCESS
        }
        Ok(approval) => {
            for tool in &approval.accepted {
                println!(
                    "{label}: approved tool \"{}\" ({} changed):",
                    tool.name, tool.members
                );
                for line in tool.diff.lines() {
                    println!("    {line}");
                }
            }
            println!(
                "{label}: {} change(s) approved; {} tools pinned in {}. A running proxy publishes them within a few seconds.",
                approval.accepted.len(),
                approval.pinned,
                approval.path.display()
            );
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("mcp-supervisor approve: {label}: {message}");
            ExitCode::from(1)
        }
    }
}

/// The server's name (for messages) and its pin file.
fn locate(
    server: Option<&str>,
    which: Which,
    dir: &std::path::Path,
) -> Result<(String, PathBuf), (u8, String)> {
    let transport = match which {
        Which::Config(config) => {
            let Some(name) = server else {
                return Err((
                    USAGE,
                    "name the server: `mcp-supervisor approve SERVER --config FILE`".into(),
                ));
            };
            let config = crate::config_file::load(&config).map_err(|_| {
                (
                    USAGE,
                    format!("the config {} cannot be used (see above)", config.display()),
                )
            })?;
            let Some(found) = config.server(name) else {
                let names: Vec<&str> = config.servers.iter().map(|s| s.name.as_str()).collect();
                return Err((
                    USAGE,
                    format!(
                        "no server \"{name}\" in the config (servers: {})",
                        names.join(", ")
                    ),
                ));
            };
            return Ok((name.to_owned(), pins::pin_path(dir, found)));
        }
        Which::Url(url) => TransportConfig::Http {
            url,
            headers: Vec::new(),
        },
        Which::Sse(url) => TransportConfig::Sse {
            url,
            headers: Vec::new(),
        },
        Which::Command(command) => {
            let Some((program, args)) = command.split_first() else {
                return Err((USAGE, "give the wrap server's command after `--`".into()));
            };
            TransportConfig::Stdio {
                command: program.clone(),
                args: args.to_vec(),
                env: Vec::new(),
                cwd: None,
            }
        }
        Which::Name => {
            let Some(name) = server else {
                return Err((
                    USAGE,
                    "name the server: `mcp-supervisor approve SERVER --config FILE`, or for a wrap server `--wrap -- COMMAND…` or `--url URL`".into(),
                ));
            };
            return match pins::find_by_name(dir, name).as_slice() {
                [(path, _)] => Ok((name.to_owned(), path.clone())),
                [] => Err((
                    1,
                    format!(
                        "no pins of a server named \"{name}\" in {}; give --config FILE (or the proxy's --state-dir DIR), or for a wrap server --wrap -- COMMAND… or --url URL",
                        dir.display()
                    ),
                )),
                several => {
                    let list: Vec<String> = several.iter().map(|(_, s)| s.clone()).collect();
                    Err((
                        USAGE,
                        format!(
                            "{} servers named \"{name}\" have pins in {} ({}); say which with --config FILE, --wrap -- COMMAND… or --url URL",
                            several.len(),
                            dir.display(),
                            list.join("; ")
                        ),
                    ))
                }
            };
        }
    };
    let server = ServerConfig::new(server.unwrap_or("server"), transport);
    Ok((server.name.clone(), pins::pin_path(dir, &server)))
}
