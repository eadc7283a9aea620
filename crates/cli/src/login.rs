//! `mcp-supervisor login SERVER --config F`: signs a person in to one protected HTTP server
//! (authorization code with PKCE on a loopback redirect) and stores the tokens in the per-user
//! token file, where a running proxy picks them up by itself.
//!
//! It prints the authorization URL and opens a browser where one exists; it never prints a
//! token, and never needs a browser (`--no-browser` prints the URL alone on stdout, for a
//! person on another machine or a script that follows it).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use mcp_supervisor::auth::{TokenStore, login};
use mcp_supervisor::core::config::{Grant, OAuthConfig, TransportConfig};

/// Exit code for bad usage or an invalid config.
const USAGE: u8 = 2;

/// Which server to sign in to.
pub enum Target {
    /// A server of this config, by name.
    Config(PathBuf),
    /// This URL, under the given name (as `wrap --name NAME --url URL --oauth` uses it).
    Url(String),
}

pub async fn run(
    target: Target,
    server: &str,
    no_browser: bool,
    wait_ms: u64,
) -> anyhow::Result<ExitCode> {
    let config = match target {
        Target::Config(path) => match crate::config_file::load(&path) {
            Ok(config) => config,
            Err(code) => return Ok(code),
        },
        Target::Url(url) => {
            let text = serde_json::json!({ "mcpServers": { server: { "url": url, "oauth": {} } } })
                .to_string();
            match mcp_supervisor::core::config::parse_config(&text, &|_| None) {
                Ok(config) => config,
                Err(errors) => {
                    eprintln!("mcp-supervisor login: {errors}");
                    return Ok(ExitCode::from(USAGE));
                }
            }
        }
    };
    let Some(entry) = config.server(server) else {
        eprintln!(
            "mcp-supervisor: no server named \"{server}\" in the config (it has: {})",
            config
                .servers
                .iter()
                .map(|s| s.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
        return Ok(ExitCode::from(USAGE));
    };
    let TransportConfig::Http { url, .. } = &entry.transport else {
        eprintln!(
            "mcp-supervisor: server \"{server}\" is a command (stdio); only url servers sign in with OAuth"
        );
        return Ok(ExitCode::from(USAGE));
    };
    let oauth = entry.oauth.clone().unwrap_or_else(|| {
        eprintln!(
            "mcp-supervisor: note: server \"{server}\" has no \"oauth\" block; add \"oauth\": {{}} \
             to it so that serve and wrap use the token"
        );
        OAuthConfig::default()
    });
    if oauth.grant == Grant::ClientCredentials {
        eprintln!(
            "mcp-supervisor: server \"{server}\" uses the client_credentials grant: it needs no \
             login (the supervisor gets its tokens with the secret in the environment)"
        );
        return Ok(ExitCode::from(USAGE));
    }
    let Some(path) = TokenStore::default_path() else {
        eprintln!(
            "mcp-supervisor: no place for the token file: set HOME, XDG_STATE_HOME or {}",
            mcp_supervisor::auth::store::TOKEN_FILE_ENV
        );
        return Ok(ExitCode::from(USAGE));
    };
    let store = TokenStore::new(path);
    let outcome = login::login(
        login::Login {
            server,
            url,
            config: &oauth,
            store: &store,
            wait: Duration::from_millis(wait_ms),
        },
        |url| {
            if no_browser {
                // Alone on stdout: a script (or a person elsewhere) follows it.
                println!("{url}");
            } else {
                eprintln!("Open this URL in a browser to sign in to \"{server}\":\n\n  {url}\n");
                open_browser(url);
            }
        },
    )
    .await;
    match outcome {
        Ok(entry) => {
            eprintln!(
                "mcp-supervisor: signed in to \"{server}\" at {}{}; tokens stored in {} (mode 0600)",
                entry.issuer,
                entry
                    .scope
                    .as_deref()
                    .map(|s| format!(" with scope \"{s}\""))
                    .unwrap_or_default(),
                store.path().display()
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(error) => {
            eprintln!("mcp-supervisor: login to \"{server}\" failed: {error}");
            Ok(ExitCode::from(1))
        }
    }
}

/// Opens `url` with the desktop's opener when there is one; a missing opener is fine (the URL
/// was printed).
pub(crate) fn open_browser(url: &str) {
    let opener = if cfg!(target_os = "macos") {
        "open"
    } else {
        "xdg-open"
    };
    let found = std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).any(|p| p.join(opener).is_file()))
        .unwrap_or(false);
    if !found {
        return;
    }
    match std::process::Command::new(opener)
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
    {
        // The opener returns at once; reap it in the background.
        Ok(mut child) => {
            std::thread::spawn(move || {
                let _ = child.wait();
            });
        }
        Err(e) => eprintln!("mcp-supervisor: could not start {opener} ({e}); open the URL by hand"),
    }
}
