//! The proxy's config (SPEC §9): the validated types, and `parse_config`, which reads the
//! `mcpServers` JSON in two stages kept apart (`raw`: what the user typed; `build`: the real values
//! with defaults applied) and reports every problem at once, each with its full path; and
//! [`ServerBuilder`], a one-server config from typed values with the same checks. It never reads
//! a file or the environment (both are handed in), and never shows a secret.

mod build;
mod builder;
mod expand;
mod identity;
mod json;
mod oauth;
mod raw;
mod sandbox;
mod secret;

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use crate::authorize::Rule;
use crate::filter::ToolFilter;
use crate::naming::NamingConfig;
use crate::pin::PinMode;
use crate::policy::{HealthPolicy, ReconnectPolicy};

pub use builder::ServerBuilder;
pub use identity::{
    AuditConfig, AuthConfig, Credentials, DEFAULT_CLOCK_SKEW, MAX_CLOCK_SKEW, RateLimit,
    TokenExchange,
};
pub use oauth::{Grant, OAuthConfig};
pub use raw::{MAX_MS, is_valid_server_name};
pub use sandbox::{Network, SandboxConfig, sandbox_path};
pub use secret::Secret;

/// `toolCallTimeoutMs` when neither the server nor `defaults` sets it.
pub const DEFAULT_TOOL_CALL_TIMEOUT: Duration = Duration::from_millis(60_000);
/// `connectTimeoutMs` when neither the server nor `defaults` sets it.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_millis(30_000);

// === Config ===

/// A validated config: every server in config order, how their tools are named, and how the
/// tools are shown to a client.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub servers: Vec<ServerConfig>,
    pub naming: NamingConfig,
    /// Every tool in `tools/list`, or two tools that search and call them (`toolExposure`).
    pub tool_exposure: ToolExposure,
    /// How long a sealed HTTP session id opens a session, on any replica, after it was issued
    /// (`sessionMaxAgeMs`; SPEC §12).
    pub session_max_age: Duration,
    /// The HTTP face as an OAuth resource server (`auth`, SPEC §14); `None`: no tokens asked.
    pub auth: Option<AuthConfig>,
    /// Every request's limit per caller identity (`rateLimit` at the top); `None`: none.
    pub rate_limit: Option<RateLimit>,
    /// Where the audit log goes (`audit`); `None`: no audit log.
    pub audit: Option<AuditConfig>,
}

/// [`Config::session_max_age`] when the config does not say: 24 hours.
pub const DEFAULT_SESSION_MAX_AGE: Duration = Duration::from_secs(24 * 60 * 60);

/// How a proxy's client sees the aggregate tools (SPEC §13, `toolExposure`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ToolExposure {
    /// Every tool's definition in `tools/list`: the default.
    #[default]
    All,
    /// Two tools, `search_tools` and `call_tool`, in their place.
    Search,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            servers: Vec::new(),
            naming: NamingConfig::default(),
            tool_exposure: ToolExposure::default(),
            session_max_age: DEFAULT_SESSION_MAX_AGE,
            auth: None,
            rate_limit: None,
            audit: None,
        }
    }
}

impl Config {
    /// The server called `name`, if any.
    pub fn server(&self, name: &str) -> Option<&ServerConfig> {
        self.servers.iter().find(|s| s.name == name)
    }
}

/// One upstream server, with `defaults` and built-in defaults applied. Comparable, so a reload can
/// tell changed servers from unchanged ones.
#[derive(Clone, Debug, PartialEq)]
pub struct ServerConfig {
    pub name: String,
    pub transport: TransportConfig,
    pub reconnect: ReconnectPolicy,
    pub health: HealthPolicy,
    pub tool_call_timeout: Duration,
    pub connect_timeout: Duration,
    pub retry_tools: Vec<String>,
    pub enabled: bool,
    /// The protocol version asked of the server (`protocolVersion`); `None`: the client's.
    /// `2026-07-28` speaks the stateless era, falling back to the handshake when the server
    /// does not.
    pub protocol_version: Option<String>,
    /// Which upstream tools are published (`tools: { allow, deny }`); open by default.
    pub tools: ToolFilter,
    /// How tokens are obtained for a protected HTTP server (`oauth`); `None`: no OAuth.
    pub oauth: Option<OAuthConfig>,
    /// One instance for every client, one per client session (`isolation`, SPEC §11), or one per
    /// caller identity (SPEC §14).
    pub isolation: Isolation,
    /// The most instances of an isolated server at once (`maxInstances`).
    pub max_instances: u32,
    /// What its pinned tool definitions do (`pin`, here or in `defaults`); `None`: not set, so
    /// [`PinMode::Warn`] (see [`ServerConfig::pin_mode`]).
    pub pin: Option<PinMode>,
    /// The most bytes of a tool result's content a client gets (`maxResultBytes`, SPEC §13);
    /// a larger result is cut. `None`: no cap.
    pub max_result_bytes: Option<u32>,
    /// Started with the proxy, or on the first request a client makes of it (`start`, SPEC §13).
    pub start: Start,
    /// Stopped (state `idle`) after this long without a client request (`idleTimeoutMs`);
    /// `None`: never.
    pub idle_timeout: Option<Duration>,
    /// The limit on each caller identity's requests of this server (`rateLimit`, here or in
    /// `defaults`); `None`: none.
    pub rate_limit: Option<RateLimit>,
    /// Which caller may make which request of it (`authorize`, here or in `defaults`); `None`:
    /// every caller that passed `auth`.
    pub authorize: Option<Rule>,
    /// How a `url` server gets a token carrying the caller's identity (`credentials`); `None`:
    /// its own `headers` or `oauth` only.
    pub credentials: Option<Credentials>,
    /// What a stdio server may read, write and reach (`sandbox`, here or in `defaults`, SPEC
    /// §16); `None`: it runs with everything its user can touch.
    pub sandbox: Option<SandboxConfig>,
}

/// When a server's process (or upstream session) is started (SPEC §13).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Start {
    /// At once, with the proxy or the hub: the default.
    #[default]
    Always,
    /// On the first request a client makes of it; until then its saved catalog is published.
    OnDemand,
}

/// Whether clients share one instance of a server or each client session has its own (SPEC §11).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Isolation {
    /// One process (or one upstream session) serves every client: the default.
    #[default]
    Shared,
    /// One instance per client session, started on that session's first need and closed when
    /// the session ends.
    Session,
    /// One instance per caller identity (`iss` + `sub`), shared by that identity's sessions and
    /// closed when its last session ends (SPEC §14). Needs `auth`.
    User,
}

/// `maxInstances` when neither the server nor `defaults` sets it.
pub const DEFAULT_MAX_INSTANCES: u32 = 16;

/// How a server is reached. `env` and `headers` values are [`Secret`]s.
#[derive(Clone, Debug, PartialEq)]
pub enum TransportConfig {
    Stdio {
        command: String,
        args: Vec<String>,
        env: Vec<(String, Secret)>,
        cwd: Option<PathBuf>,
    },
    Http {
        url: String,
        headers: Vec<(String, Secret)>,
    },
    /// The HTTP+SSE transport of protocol 2024-11-05: `url` is the event stream (GET); the
    /// server names where messages go in its `endpoint` event.
    Sse {
        url: String,
        headers: Vec<(String, Secret)>,
    },
}

// === impl ServerConfig ===

impl ServerConfig {
    /// A server with every policy at its built-in default (what [`ServerBuilder`] gives when
    /// nothing is set).
    pub fn new(name: impl Into<String>, transport: TransportConfig) -> Self {
        Self {
            name: name.into(),
            transport,
            reconnect: ReconnectPolicy::default(),
            health: HealthPolicy::default(),
            tool_call_timeout: DEFAULT_TOOL_CALL_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            retry_tools: Vec::new(),
            enabled: true,
            protocol_version: None,
            tools: ToolFilter::default(),
            oauth: None,
            isolation: Isolation::Shared,
            max_instances: DEFAULT_MAX_INSTANCES,
            pin: None,
            max_result_bytes: None,
            start: Start::Always,
            idle_timeout: None,
            rate_limit: None,
            authorize: None,
            credentials: None,
            sandbox: None,
        }
    }

    /// The pin mode in force: the configured one, else `warn`.
    pub fn pin_mode(&self) -> PinMode {
        self.pin.unwrap_or_default()
    }

    /// A one-line description safe to log or show in status: the command and its arguments, or the
    /// URL with any user info and query redacted. Never an `env` or `headers` value.
    pub fn describe(&self) -> String {
        match &self.transport {
            TransportConfig::Stdio { command, args, .. } => {
                let mut line = quote_word(command);
                for arg in args {
                    line.push(' ');
                    line.push_str(&quote_word(arg));
                }
                line
            }
            TransportConfig::Http { url, .. } | TransportConfig::Sse { url, .. } => redact_url(url),
        }
    }
}

/// A word as is, or quoted when it is empty or holds whitespace or quotes.
fn quote_word(word: &str) -> String {
    if word.is_empty() || word.contains(|c: char| c.is_whitespace() || c == '"' || c == '\'') {
        format!("{word:?}")
    } else {
        word.to_owned()
    }
}

/// `scheme://user:pass@host/path?query` → `scheme://<redacted>@host/path?<redacted>`.
fn redact_url(url: &str) -> String {
    let (scheme, rest) = match url.split_once("://") {
        Some((scheme, rest)) => (Some(scheme), rest),
        None => (None, url),
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let host = match authority.rsplit_once('@') {
        Some((_, host)) => format!("<redacted>@{host}"),
        None => authority.to_owned(),
    };
    let tail = match tail.split_once('?') {
        Some((path, _)) => format!("{path}?<redacted>"),
        None => tail.to_owned(),
    };
    match scheme {
        Some(scheme) => format!("{scheme}://{host}{tail}"),
        None => format!("{host}{tail}"),
    }
}

// === Errors ===

/// One thing wrong with a config: where (`mcpServers.fs.reconnect.maxDelayMs`; empty for the
/// document as a whole) and what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub path: String,
    pub message: String,
}

impl Problem {
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{} {}", self.path, self.message)
        }
    }
}

/// Every problem of a config that failed validation, grouped by server in document order. Display
/// lists them one per line.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", list_problems(.problems))]
pub struct ConfigErrors {
    pub problems: Vec<Problem>,
}

fn list_problems(problems: &[Problem]) -> String {
    problems
        .iter()
        .map(Problem::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

// === parse_config ===

/// Parses and validates a config. `env` resolves `${VAR}` references in `command`, `args`, `env`,
/// `cwd`, `url` and `headers` values, the strings of `auth` and `credentials`, and `audit.path`
/// (never in an `authorize` rule). Either a config or every problem found.
pub fn parse_config(
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, ConfigErrors> {
    let root = json::Json::parse(text).map_err(|e| ConfigErrors {
        problems: vec![Problem::new(
            "",
            format!("the config is not valid JSON: {e}"),
        )],
    })?;
    let mut problems = Vec::new();
    let raw = raw::walk(&root, &mut problems);
    let config = build::build(&raw, env, &mut problems);
    group_problems(&mut problems, &raw.anchors);
    if problems.is_empty() {
        Ok(config)
    } else {
        Err(ConfigErrors { problems })
    }
}

/// Orders problems by the part of the document they belong to (a top-level key, or one server),
/// in document order, keeping each part's own order: stage 2's problems of a server follow its
/// stage 1 problems instead of trailing the whole list.
fn group_problems(problems: &mut [Problem], anchors: &[String]) {
    let under = |path: &str, anchor: &str| {
        path.strip_prefix(anchor)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']))
    };
    let rank = |p: &Problem| {
        anchors
            .iter()
            .enumerate()
            .filter(|(_, anchor)| under(&p.path, anchor))
            .max_by_key(|(_, anchor)| anchor.len())
            .map_or(0, |(i, _)| i + 1)
    };
    problems.sort_by_cached_key(rank);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn problems_are_grouped_by_server_in_document_order() {
        let anchors = ["mcpServers", "mcpServers.a", "mcpServers.ab", "defaults"].map(String::from);
        let mut problems = [
            Problem::new("defaults.x", "4"),
            Problem::new("mcpServers.ab", "3"),
            Problem::new("mcpServers.a.y", "2"),
            Problem::new("", "0"),
            Problem::new("mcpServers.a[\"k\"]", "2b"),
            Problem::new("mcpServers", "1"),
        ];
        group_problems(&mut problems, &anchors);
        let order: Vec<_> = problems.iter().map(|p| p.message.as_str()).collect();
        assert_eq!(order, ["0", "1", "2", "2b", "3", "4"]);
    }

    #[test]
    fn urls_are_redacted_for_display() {
        let cases = [
            ("https://example.com/mcp", "https://example.com/mcp"),
            (
                "https://user:pw@example.com/mcp?key=abc",
                "https://<redacted>@example.com/mcp?<redacted>",
            ),
            ("http://h:8080?x=1#f", "http://h:8080?<redacted>"),
            ("http://h/p#frag", "http://h/p#frag"),
            ("weird", "weird"),
        ];
        for (url, shown) in cases {
            assert_eq!(redact_url(url), shown, "{url}");
        }
    }

    #[test]
    fn words_with_spaces_are_quoted() {
        assert_eq!(quote_word("npx"), "npx");
        assert_eq!(quote_word("a b"), "\"a b\"");
        assert_eq!(quote_word(""), "\"\"");
    }
}
