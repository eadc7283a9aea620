//! Stage 2 of the config: the real values built from stage 1's raw ones. It applies the built-in
//! defaults, then `defaults`, then each server's own keys (field by field), checks how fields
//! relate, picks the transport and expands `${VAR}` references. It never sees JSON and never puts
//! an expanded value into a message.

use std::path::PathBuf;
use std::time::Duration;

use super::expand::expand;
use super::identity::{self, AuthState};
use super::raw::{Given, Kind, RawConfig, RawServer, RawTuning, Text, child};
use super::sandbox::{self, SandboxConfig};
use super::{
    Config, DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_INSTANCES, DEFAULT_SESSION_MAX_AGE,
    DEFAULT_TOOL_CALL_TIMEOUT, Isolation, Problem, RateLimit, Secret, ServerConfig, Start,
    TransportConfig,
};
use crate::authorize::Rule;
use crate::filter::ToolFilter;
use crate::naming::{DEFAULT_SEPARATOR, NamingConfig, NamingMode};
use crate::pin::PinMode;
use crate::policy::{HealthPolicy, ReconnectPolicy};

pub(super) type Lookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// Builds the config, adding every problem found to `problems`. The result is meaningful only when
/// no problem was found (here or in stage 1).
pub(crate) fn build(raw: &RawConfig, env: Lookup<'_>, problems: &mut Vec<Problem>) -> Config {
    build_with(raw, env, problems, &mut |server, problems| {
        transport(server, env, problems)
    })
}

/// A server's transport, or `None` with its problems recorded.
pub(super) type MakeTransport<'a> =
    dyn FnMut(&RawServer, &mut Vec<Problem>) -> Option<TransportConfig> + 'a;

/// [`build`], with each server's transport made by `transport` rather than from its raw keys (the
/// typed builder hands in one it has checked). `env` expands the other keys' `${VAR}`s.
pub(super) fn build_with(
    raw: &RawConfig,
    env: Lookup<'_>,
    problems: &mut Vec<Problem>,
    transport: &mut MakeTransport<'_>,
) -> Config {
    let auth_state = AuthState::of(&raw.auth);
    let auth = identity::build_auth(&raw.auth, env, problems);
    let defaults = Tuning::builtin().apply(&raw.defaults, Origin::Defaults);
    check_delays(&raw.defaults, &defaults, problems);
    identity::check_needs_auth(&raw.defaults, auth_state, problems);
    let default_sandbox = sandbox::build_defaults(&raw.defaults.sandbox, env, problems);
    let defaults = Defaults {
        tuning: defaults,
        sandbox: default_sandbox,
    };
    let servers = raw
        .servers
        .iter()
        .filter_map(|server| build_server(server, &defaults, auth_state, env, problems, transport))
        .collect();
    let naming = NamingConfig {
        mode: raw
            .naming
            .mode
            .value()
            .copied()
            .unwrap_or(NamingMode::Prefixed),
        separator: raw
            .naming
            .separator
            .value()
            .cloned()
            .unwrap_or_else(|| DEFAULT_SEPARATOR.to_owned()),
    };
    let tool_exposure = raw.tool_exposure.value().copied().unwrap_or_default();
    let session_max_age = raw
        .session_max_age_ms
        .value()
        .map(|ms| Duration::from_millis(*ms))
        .unwrap_or(DEFAULT_SESSION_MAX_AGE);
    Config {
        servers,
        naming,
        tool_exposure,
        session_max_age,
        auth,
        rate_limit: raw.rate_limit.value().copied(),
        audit: identity::build_audit(&raw.audit, env, problems),
    }
}

/// What `defaults` gives every server: its tuning, and its sandbox (built once).
struct Defaults {
    tuning: Tuning,
    sandbox: Option<SandboxConfig>,
}

fn build_server(
    raw: &RawServer,
    defaults: &Defaults,
    auth: AuthState,
    env: Lookup<'_>,
    problems: &mut Vec<Problem>,
    transport: &mut MakeTransport<'_>,
) -> Option<ServerConfig> {
    if !raw.is_object {
        return None;
    }
    let tuning = defaults.tuning.apply(&raw.tuning, Origin::Here);
    check_delays(&raw.tuning, &tuning, problems);
    identity::check_needs_auth(&raw.tuning, auth, problems);
    let transport = transport(raw, problems)?;
    let sandbox = sandbox::for_server(
        &raw.tuning.sandbox,
        &raw.path,
        defaults.sandbox.as_ref(),
        &transport,
        env,
        problems,
    );
    let credentials = identity::build_credentials(raw, &transport, auth, env, problems);
    let isolation = identity::isolation_with_credentials(
        raw,
        tuning.isolation,
        credentials.is_some(),
        problems,
    );
    Some(ServerConfig {
        name: raw.name.clone(),
        transport,
        reconnect: tuning.reconnect,
        health: tuning.health,
        tool_call_timeout: tuning.tool_call_timeout,
        connect_timeout: tuning.connect_timeout,
        retry_tools: raw.retry_tools.value().cloned().unwrap_or_default(),
        enabled: raw.enabled.value().copied().unwrap_or(true),
        protocol_version: raw.protocol_version.value().cloned(),
        tools: tool_filter(raw),
        oauth: raw.oauth.value().cloned(),
        isolation,
        max_instances: tuning.max_instances,
        pin: tuning.pin,
        max_result_bytes: tuning.max_result_bytes,
        start: tuning.start,
        idle_timeout: tuning.idle_timeout,
        rate_limit: tuning.rate_limit,
        authorize: tuning.authorize,
        credentials,
        sandbox,
    })
}

/// The server's tool filter; its patterns were checked in stage 1 (a bad one failed the config).
fn tool_filter(raw: &RawServer) -> ToolFilter {
    let Some(tools) = raw.tools.value() else {
        return ToolFilter::default();
    };
    let deny = tools.deny.value().cloned().unwrap_or_default();
    ToolFilter::new(tools.allow.value().map(Vec::as_slice), &deny).unwrap_or_default()
}

// === Tuning: defaults merged field by field ===

/// Where an effective value came from, for messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Origin {
    Builtin,
    Defaults,
    Here,
}

impl Origin {
    fn note(self) -> &'static str {
        match self {
            Origin::Builtin => ", the default",
            Origin::Defaults => ", from defaults",
            Origin::Here => "",
        }
    }
}

#[derive(Clone, Debug)]
struct Tuning {
    reconnect: ReconnectPolicy,
    health: HealthPolicy,
    tool_call_timeout: Duration,
    connect_timeout: Duration,
    isolation: Isolation,
    max_instances: u32,
    /// `pin`, when the server or `defaults` sets it.
    pin: Option<PinMode>,
    max_result_bytes: Option<u32>,
    start: Start,
    idle_timeout: Option<Duration>,
    /// `rateLimit`: a server's block replaces `defaults`' whole (its burst follows its rate).
    rate_limit: Option<RateLimit>,
    /// `authorize`: a server's rule replaces `defaults`' (compiled once, shared).
    authorize: Option<Rule>,
    initial_from: Origin,
    max_from: Origin,
}

impl Tuning {
    fn builtin() -> Self {
        Self {
            reconnect: ReconnectPolicy::default(),
            health: HealthPolicy::default(),
            tool_call_timeout: DEFAULT_TOOL_CALL_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            isolation: Isolation::Shared,
            max_instances: DEFAULT_MAX_INSTANCES,
            pin: None,
            max_result_bytes: None,
            start: Start::Always,
            idle_timeout: None,
            rate_limit: None,
            authorize: None,
            initial_from: Origin::Builtin,
            max_from: Origin::Builtin,
        }
    }

    /// This tuning with every valid value of `raw` laid over it.
    fn apply(&self, raw: &RawTuning, origin: Origin) -> Self {
        let mut t = self.clone();
        let r = &raw.reconnect;
        let ms = |given: &Given<u64>| given.value().map(|ms| Duration::from_millis(*ms));
        if let Some(v) = r.enabled.value() {
            t.reconnect.enabled = *v;
        }
        if let Some(v) = ms(&r.initial_delay_ms) {
            t.reconnect.initial_delay = v;
            t.initial_from = origin;
        }
        if let Some(v) = ms(&r.max_delay_ms) {
            t.reconnect.max_delay = v;
            t.max_from = origin;
        }
        if let Some(v) = r.max_attempts.value() {
            t.reconnect.max_attempts = *v;
        }
        if let Some(v) = r.jitter.value() {
            t.reconnect.jitter = *v;
        }
        let h = &raw.health;
        if let Some(v) = h.interval_ms.value() {
            t.health.interval = (*v > 0).then(|| Duration::from_millis(*v));
        }
        if let Some(v) = ms(&h.timeout_ms) {
            t.health.timeout = v;
        }
        if let Some(v) = h.failures.value() {
            t.health.failures = *v;
        }
        if let Some(v) = ms(&raw.tool_call_timeout_ms) {
            t.tool_call_timeout = v;
        }
        if let Some(v) = ms(&raw.connect_timeout_ms) {
            t.connect_timeout = v;
        }
        if let Some(v) = raw.isolation.value() {
            t.isolation = *v;
        }
        if let Some(v) = raw.max_instances.value() {
            t.max_instances = *v;
        }
        if let Some(v) = raw.pin.value() {
            t.pin = Some(*v);
        }
        if let Some(v) = raw.max_result_bytes.value() {
            t.max_result_bytes = Some(*v);
        }
        if let Some(v) = raw.start.value() {
            t.start = *v;
        }
        if let Some(v) = ms(&raw.idle_timeout_ms) {
            t.idle_timeout = Some(v);
        }
        if let Some(v) = raw.rate_limit.value() {
            t.rate_limit = Some(*v);
        }
        if let Some(v) = raw.authorize.value() {
            t.authorize = Some(v.clone());
        }
        t
    }
}

/// `initialDelayMs ≤ maxDelayMs` on the effective values, reported at this level's key only when
/// this level sets one of the two (so a bad `defaults` is reported once, not once per server).
fn check_delays(raw: &RawTuning, eff: &Tuning, problems: &mut Vec<Problem>) {
    let r = &raw.reconnect;
    if r.initial_delay_ms.is_invalid() || r.max_delay_ms.is_invalid() {
        return;
    }
    if r.initial_delay_ms.is_absent() && r.max_delay_ms.is_absent() {
        return;
    }
    let initial = eff.reconnect.initial_delay.as_millis();
    let max = eff.reconnect.max_delay.as_millis();
    if initial <= max {
        return;
    }
    if r.initial_delay_ms.is_absent() {
        problems.push(Problem::new(
            child(&raw.reconnect_path, "maxDelayMs"),
            format!(
                "({max}) must not be less than initialDelayMs ({initial}{})",
                eff.initial_from.note()
            ),
        ));
    } else {
        problems.push(Problem::new(
            child(&raw.reconnect_path, "initialDelayMs"),
            format!(
                "({initial}) must not exceed maxDelayMs ({max}{})",
                eff.max_from.note()
            ),
        ));
    }
}

// === Transport ===

fn transport(
    raw: &RawServer,
    env: Lookup<'_>,
    problems: &mut Vec<Problem>,
) -> Option<TransportConfig> {
    let has_command = !raw.command.is_absent();
    let has_url = !raw.url.is_absent();
    let type_path = child(&raw.path, "type");
    let kind = match (&raw.kind, has_command, has_url) {
        // The type itself was wrong (e.g. "sse"); that problem says enough.
        (Given::Invalid, _, _) => return None,
        (_, true, true) => {
            problems.push(Problem::new(
                &raw.path,
                "has both \"command\" (stdio) and \"url\" (streamable HTTP); keep one",
            ));
            return None;
        }
        (Given::Value(Kind::Stdio), false, _) => {
            problems.push(Problem::new(
                type_path,
                if has_url {
                    "is \"stdio\", which needs \"command\", but this server has \"url\": set \"type\" to \"http\" or remove it"
                } else {
                    "is \"stdio\", which needs \"command\""
                },
            ));
            return None;
        }
        (Given::Value(Kind::Http), _, false) => {
            problems.push(Problem::new(
                type_path,
                if has_command {
                    "is \"http\", which needs \"url\", but this server has \"command\": set \"type\" to \"stdio\" or remove it"
                } else {
                    "is \"http\", which needs \"url\""
                },
            ));
            return None;
        }
        (Given::Value(Kind::Sse), _, false) => {
            problems.push(Problem::new(
                type_path,
                if has_command {
                    "is \"sse\", which needs \"url\" (the server's event-stream URL), but this server has \"command\": set \"type\" to \"stdio\" or remove it"
                } else {
                    "is \"sse\", which needs \"url\" (the server's event-stream URL, often ending in /sse)"
                },
            ));
            return None;
        }
        (Given::Absent, false, false) => {
            problems.push(Problem::new(
                &raw.path,
                "needs either \"command\" (stdio) or \"url\" (streamable HTTP)",
            ));
            return None;
        }
        (Given::Absent | Given::Value(Kind::Stdio), true, false) => Kind::Stdio,
        (Given::Absent | Given::Value(Kind::Http), false, true) => Kind::Http,
        (Given::Value(Kind::Sse), false, true) => Kind::Sse,
    };
    let mut misplaced = |present: bool, key: &str, message: &str| {
        if present {
            problems.push(Problem::new(child(&raw.path, key), message));
        }
    };
    match kind {
        Kind::Stdio => {
            misplaced(
                !raw.oauth.is_absent(),
                "oauth",
                "applies only to \"url\" servers (streamable HTTP); this server has \"command\"",
            );
            misplaced(
                !raw.headers.is_absent(),
                "headers",
                "applies only to \"url\" servers (streamable HTTP); this server has \"command\"",
            );
            stdio(raw, env, problems)
        }
        Kind::Http => {
            let only_stdio = "applies only to \"command\" servers (stdio); this server has \"url\"";
            misplaced(!raw.args.is_absent(), "args", only_stdio);
            misplaced(!raw.env.is_absent(), "env", only_stdio);
            misplaced(!raw.cwd.is_absent(), "cwd", only_stdio);
            http(raw, env, problems)
        }
        Kind::Sse => {
            let only_stdio = "applies only to \"command\" servers (stdio); this server has \"url\"";
            misplaced(!raw.args.is_absent(), "args", only_stdio);
            misplaced(!raw.env.is_absent(), "env", only_stdio);
            misplaced(!raw.cwd.is_absent(), "cwd", only_stdio);
            let (url, headers) = url_and_headers(raw, env, problems)?;
            Some(TransportConfig::Sse { url, headers })
        }
    }
}

fn stdio(raw: &RawServer, env: Lookup<'_>, problems: &mut Vec<Problem>) -> Option<TransportConfig> {
    let command = expand_given(&raw.command, env, problems, check_command);
    let args = expand_all(&raw.args, env, problems, check_process_text);
    let vars = expand_map(&raw.env, env, problems, check_process_text);
    let cwd = expand_given(&raw.cwd, env, problems, check_cwd);
    Some(TransportConfig::Stdio {
        command: command?,
        args: args?,
        env: vars?,
        cwd: cwd.map(PathBuf::from),
    })
}

fn http(raw: &RawServer, env: Lookup<'_>, problems: &mut Vec<Problem>) -> Option<TransportConfig> {
    let (url, headers) = url_and_headers(raw, env, problems)?;
    Some(TransportConfig::Http { url, headers })
}

/// The `url` and `headers` of an HTTP server (streamable HTTP or SSE), expanded and checked.
fn url_and_headers(
    raw: &RawServer,
    env: Lookup<'_>,
    problems: &mut Vec<Problem>,
) -> Option<(String, Vec<(String, Secret)>)> {
    let url = expand_given(&raw.url, env, problems, check_url);
    let headers = expand_map(&raw.headers, env, problems, check_header_value);
    Some((url?, headers?))
}

// === Expansion ===

/// A check of an expanded value: the message of its problem, if any. It must not quote the value.
pub(super) type Check = fn(&str) -> Option<String>;

/// Expands one text, recording each problem at its path. `None` when absent or wrong.
pub(super) fn expand_text(
    text: &Text,
    env: Lookup<'_>,
    problems: &mut Vec<Problem>,
    check: Check,
) -> Option<String> {
    match expand(text.raw.expose(), env) {
        Ok(value) => match check(&value) {
            None => Some(value),
            Some(message) => {
                problems.push(Problem::new(&text.path, message));
                None
            }
        },
        Err(errors) => {
            for e in errors {
                problems.push(Problem::new(&text.path, e.message()));
            }
            None
        }
    }
}

/// An absent field is `None` without a problem; callers tell absent from wrong by stage 1's record.
pub(super) fn expand_given(
    given: &Given<Text>,
    env: Lookup<'_>,
    problems: &mut Vec<Problem>,
    check: Check,
) -> Option<String> {
    given
        .value()
        .and_then(|t| expand_text(t, env, problems, check))
}

/// Every text of an optional list, expanded; absent is an empty list, any problem is `None`.
fn expand_all(
    given: &Given<Vec<Text>>,
    env: Lookup<'_>,
    problems: &mut Vec<Problem>,
    check: Check,
) -> Option<Vec<String>> {
    match given {
        Given::Absent => Some(Vec::new()),
        Given::Invalid => None,
        Given::Value(texts) => {
            let expanded: Vec<_> = texts
                .iter()
                .map(|t| expand_text(t, env, problems, check))
                .collect();
            expanded.into_iter().collect()
        }
    }
}

/// Every value of an optional map, expanded into secrets; absent is empty, any problem is `None`.
fn expand_map(
    given: &Given<Vec<(String, Text)>>,
    env: Lookup<'_>,
    problems: &mut Vec<Problem>,
    check: Check,
) -> Option<Vec<(String, Secret)>> {
    match given {
        Given::Absent => Some(Vec::new()),
        Given::Invalid => None,
        Given::Value(entries) => {
            let expanded: Vec<_> = entries
                .iter()
                .map(|(key, t)| {
                    expand_text(t, env, problems, check).map(|v| (key.clone(), Secret::new(v)))
                })
                .collect();
            expanded.into_iter().collect()
        }
    }
}

pub(super) fn check_command(value: &str) -> Option<String> {
    check_process_text(value).or_else(|| {
        value
            .trim()
            .is_empty()
            .then(|| "is empty: name the program to run".to_owned())
    })
}

pub(super) fn check_cwd(value: &str) -> Option<String> {
    check_process_text(value).or_else(|| {
        value
            .is_empty()
            .then(|| "is empty: name a directory or remove the key".to_owned())
    })
}

pub(super) fn check_process_text(value: &str) -> Option<String> {
    value.contains('\0').then(|| {
        "contains a NUL character, which a process argument or variable cannot hold".to_owned()
    })
}

pub(super) fn check_header_value(value: &str) -> Option<String> {
    value.contains(['\r', '\n', '\0']).then(|| {
        "contains a line break or NUL character, which an HTTP header value cannot hold".to_owned()
    })
}

pub(super) fn check_url(url: &str) -> Option<String> {
    let lower = url.to_ascii_lowercase();
    let Some(rest) = lower
        .strip_prefix("http://")
        .or_else(|| lower.strip_prefix("https://"))
    else {
        let scheme = url.split_once("://").map(|(s, _)| s).filter(|s| {
            !s.is_empty()
                && s.len() <= 16
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        });
        return Some(match scheme {
            Some(scheme) => format!("must be an http:// or https:// URL (got scheme {scheme:?})"),
            None => "must be an http:// or https:// URL".to_owned(),
        });
    };
    if rest.is_empty() || rest.starts_with(['/', '?', '#']) {
        return Some("must name a host after the scheme (http://HOST/…)".to_owned());
    }
    if url.contains(|c: char| c.is_whitespace() || c.is_control()) {
        return Some("must not contain spaces or control characters".to_owned());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        for ok in [
            "http://localhost:3000/mcp",
            "https://example.com",
            "HTTPS://EXAMPLE.COM/mcp?x=1",
        ] {
            assert_eq!(check_url(ok), None, "{ok}");
        }
        let cases = [
            (
                "ftp://x",
                "must be an http:// or https:// URL (got scheme \"ftp\")",
            ),
            (
                "ws://x/mcp",
                "must be an http:// or https:// URL (got scheme \"ws\")",
            ),
            ("localhost:3000", "must be an http:// or https:// URL"),
            ("", "must be an http:// or https:// URL"),
            (
                "http://",
                "must name a host after the scheme (http://HOST/…)",
            ),
            (
                "https:///mcp",
                "must name a host after the scheme (http://HOST/…)",
            ),
            (
                "http://a b",
                "must not contain spaces or control characters",
            ),
        ];
        for (url, message) in cases {
            assert_eq!(check_url(url).as_deref(), Some(message), "{url}");
        }
    }

    #[test]
    fn header_values_and_process_texts() {
        assert_eq!(check_header_value("Bearer x"), None);
        assert!(check_header_value("a\r\nX-Evil: 1").is_some());
        assert_eq!(check_process_text("--flag"), None);
        assert!(check_process_text("a\0b").is_some());
    }
}
