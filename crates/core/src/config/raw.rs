//! Stage 1 of the config: what the user typed, walked from the ordered JSON tree into raw values
//! with every key, type and single-field range checked. It records each problem with its full path
//! and goes on walking; it never applies defaults, expands `${VAR}` or judges how fields relate
//! (stage 2 does), and never puts a string value of the config into a message.

use super::json::{Json, Number};
use super::{Problem, Secret};
use crate::naming::{NamingMode, is_name_char};
use crate::pin::PinMode;

/// The largest number of milliseconds (and count) a config may hold: `2^31 − 1`.
pub const MAX_MS: u64 = 2_147_483_647;

const TOP_KEYS: &[&str] = &[
    "mcpServers",
    "defaults",
    "naming",
    "toolExposure",
    "sessionMaxAgeMs",
    "auth",
    "rateLimit",
    "audit",
];
const DEFAULTS_KEYS: &[&str] = &[
    "reconnect",
    "health",
    "toolCallTimeoutMs",
    "connectTimeoutMs",
    "isolation",
    "maxInstances",
    "pin",
    "maxResultBytes",
    "start",
    "idleTimeoutMs",
    "rateLimit",
    "authorize",
    "sandbox",
];
const SERVER_KEYS: &[&str] = &[
    "type",
    "command",
    "args",
    "env",
    "cwd",
    "url",
    "headers",
    "reconnect",
    "health",
    "toolCallTimeoutMs",
    "connectTimeoutMs",
    "retryTools",
    "enabled",
    "protocolVersion",
    "oauth",
    "tools",
    "isolation",
    "maxInstances",
    "pin",
    "maxResultBytes",
    "start",
    "idleTimeoutMs",
    "rateLimit",
    "authorize",
    "credentials",
    "sandbox",
];
const TOOLS_KEYS: &[&str] = &["allow", "deny"];
/// The protocol versions a server can be asked for, newest first.
pub const PROTOCOL_VERSIONS: &[&str] = &crate::versions::ALL;
const RECONNECT_KEYS: &[&str] = &[
    "enabled",
    "initialDelayMs",
    "maxDelayMs",
    "maxAttempts",
    "jitter",
];
const HEALTH_KEYS: &[&str] = &["intervalMs", "timeoutMs", "failures"];
const NAMING_KEYS: &[&str] = &["mode", "separator"];

// === Raw values ===

/// One optional field: absent, present but wrong (a problem was recorded), or a checked value. A
/// list or map whose shape is right is a `Value` holding its good items only; its bad items were
/// recorded as problems, so the config fails all the same.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) enum Given<T> {
    #[default]
    Absent,
    Invalid,
    Value(T),
}

impl<T> Given<T> {
    pub(crate) fn is_absent(&self) -> bool {
        matches!(self, Given::Absent)
    }

    pub(crate) fn is_invalid(&self) -> bool {
        matches!(self, Given::Invalid)
    }

    pub(crate) fn value(&self) -> Option<&T> {
        match self {
            Given::Value(v) => Some(v),
            Given::Absent | Given::Invalid => None,
        }
    }
}

/// A string the user typed, before `${VAR}` expansion, with the path it was found at. Held as a
/// [`Secret`] because it may be one.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Text {
    pub(crate) path: String,
    pub(crate) raw: Secret,
}

/// How the server is reached, from `type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Stdio,
    Http,
    /// The HTTP+SSE transport of protocol 2024-11-05.
    Sse,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct RawReconnect {
    pub(crate) enabled: Given<bool>,
    pub(crate) initial_delay_ms: Given<u64>,
    pub(crate) max_delay_ms: Given<u64>,
    pub(crate) max_attempts: Given<u32>,
    pub(crate) jitter: Given<f64>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct RawHealth {
    pub(crate) interval_ms: Given<u64>,
    pub(crate) timeout_ms: Given<u64>,
    pub(crate) failures: Given<u32>,
}

/// The keys a `defaults` block and a server share.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct RawTuning {
    /// The path of the block itself (`defaults`, `mcpServers.NAME`), for stage 2's messages.
    pub(crate) path: String,
    /// The path of the `reconnect` block (present or not), for stage 2's messages.
    pub(crate) reconnect_path: String,
    pub(crate) reconnect: RawReconnect,
    pub(crate) health: RawHealth,
    pub(crate) tool_call_timeout_ms: Given<u64>,
    pub(crate) connect_timeout_ms: Given<u64>,
    pub(crate) isolation: Given<super::Isolation>,
    pub(crate) max_instances: Given<u32>,
    pub(crate) pin: Given<PinMode>,
    pub(crate) max_result_bytes: Given<u32>,
    pub(crate) start: Given<super::Start>,
    pub(crate) idle_timeout_ms: Given<u64>,
    pub(crate) rate_limit: Given<super::RateLimit>,
    pub(crate) authorize: Given<crate::authorize::Rule>,
    /// `sandbox`: a server's replaces `defaults`' whole; built apart from the rest (stage 2
    /// expands its paths).
    pub(crate) sandbox: Given<super::sandbox::RawSandbox>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct RawServer {
    /// Whether the server was an object at all; if not, stage 2 has nothing to judge.
    pub(crate) is_object: bool,
    pub(crate) path: String,
    pub(crate) name: String,
    pub(crate) kind: Given<Kind>,
    pub(crate) command: Given<Text>,
    pub(crate) args: Given<Vec<Text>>,
    pub(crate) env: Given<Vec<(String, Text)>>,
    pub(crate) cwd: Given<Text>,
    pub(crate) url: Given<Text>,
    pub(crate) headers: Given<Vec<(String, Text)>>,
    pub(crate) tuning: RawTuning,
    pub(crate) retry_tools: Given<Vec<String>>,
    pub(crate) enabled: Given<bool>,
    pub(crate) protocol_version: Given<String>,
    /// The `oauth` block, read whole (`Invalid` when it had a problem).
    pub(crate) oauth: Given<super::OAuthConfig>,
    pub(crate) tools: Given<RawTools>,
    pub(crate) credentials: Given<super::identity::RawCredentials>,
}

/// A server's `tools` block: glob patterns, each already checked.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct RawTools {
    pub(crate) allow: Given<Vec<String>>,
    pub(crate) deny: Given<Vec<String>>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct RawNaming {
    pub(crate) mode: Given<NamingMode>,
    pub(crate) separator: Given<String>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct RawConfig {
    /// The paths that group problems, in document order: each top-level key, and each server
    /// right after `mcpServers`.
    pub(crate) anchors: Vec<String>,
    pub(crate) servers: Vec<RawServer>,
    pub(crate) defaults: RawTuning,
    pub(crate) naming: RawNaming,
    pub(crate) tool_exposure: Given<super::ToolExposure>,
    pub(crate) session_max_age_ms: Given<u64>,
    pub(crate) auth: Given<super::identity::RawAuth>,
    pub(crate) rate_limit: Given<super::RateLimit>,
    /// `audit.path`, before expansion.
    pub(crate) audit: Given<Text>,
}

/// Walks the whole tree, recording every problem found.
pub(crate) fn walk(root: &Json, problems: &mut Vec<Problem>) -> RawConfig {
    Walker { problems }.config(root)
}

/// Whether `name` is a valid server name: 1–64 of `A-Za-z0-9_-`.
pub fn is_valid_server_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// The problem of a server name that [`is_valid_server_name`] refuses.
pub(super) const BAD_SERVER_NAME: &str =
    "is not a valid server name: use 1 to 64 characters of A-Za-z0-9_-";

// === Value checks, shared with the typed builder ===

/// The problem of `tools.allow: []`.
const EMPTY_ALLOW: &str = "must list at least one pattern (an empty list would publish no tool); leave \"allow\" out to publish every tool";
const SEPARATOR_RULE: &str = "must be one or more characters of A-Za-z0-9_.-";
/// The rule of a count (`maxAttempts`, `maxInstances`, `failures`).
pub(super) const COUNT_RULE: &str = "must be a positive integer no greater than 2147483647";
/// The rule of `maxResultBytes`.
pub(super) const BYTES_RULE: &str = "must be a positive number of bytes no greater than 2147483647";

fn millis_rule(zero_is_off: bool) -> &'static str {
    if zero_is_off {
        "must be 0 (off) or a positive number of milliseconds no greater than 2147483647"
    } else {
        "must be a positive number of milliseconds no greater than 2147483647"
    }
}

/// Milliseconds: a whole number in 1..=MAX_MS, or 0 as well when `zero_is_off`.
pub(super) fn check_millis(n: Number, zero_is_off: bool) -> Result<u64, String> {
    match whole(n) {
        Whole::Fraction => Err(format!("must be a whole number of milliseconds (got {n})")),
        Whole::Value(ms) if (ms > 0 || zero_is_off) && ms <= MAX_MS => Ok(ms),
        Whole::Value(_) | Whole::Negative => Err(format!("{} (got {n})", millis_rule(zero_is_off))),
    }
}

/// A positive whole number no greater than MAX_MS, or a problem that says `rule`.
pub(super) fn check_positive(n: Number, rule: &str) -> Result<u32, String> {
    match whole(n) {
        Whole::Value(c) if c > 0 && c <= MAX_MS => {
            u32::try_from(c).map_err(|_| format!("{rule} (got {n})"))
        }
        Whole::Value(_) | Whole::Negative | Whole::Fraction => Err(format!("{rule} (got {n})")),
    }
}

/// An upstream tool name of `retryTools`.
pub(super) fn check_tool_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        Err("must be a tool name (got an empty string)".to_owned())
    } else {
        Ok(())
    }
}

/// `naming.separator`.
pub(super) fn check_separator(separator: &str) -> Result<(), String> {
    if !separator.is_empty() && separator.chars().all(is_name_char) {
        Ok(())
    } else {
        Err(format!("{SEPARATOR_RULE} (got {separator:?})"))
    }
}

/// A `tools` block at `path` from its lists, their patterns checked: an empty `allow` is a problem
/// too, and any problem makes the block `Invalid`.
pub(super) fn tools_block(
    path: &str,
    allow: Given<Vec<String>>,
    deny: Given<Vec<String>>,
    problems: &mut Vec<Problem>,
) -> Given<RawTools> {
    let mut raw = RawTools { allow, deny };
    if matches!(&raw.allow, Given::Value(a) if a.is_empty()) {
        problems.push(Problem::new(child(path, "allow"), EMPTY_ALLOW));
        raw.allow = Given::Invalid;
    }
    if raw.allow.is_invalid() || raw.deny.is_invalid() {
        return Given::Invalid;
    }
    Given::Value(raw)
}

// === Paths ===

/// `parent.key`, or `parent["key"]` when the key is not a plain word of `A-Za-z0-9_-`.
pub(crate) fn child(parent: &str, key: &str) -> String {
    let plain = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    match (parent.is_empty(), plain) {
        (true, true) => key.to_owned(),
        (false, true) => format!("{parent}.{key}"),
        (_, false) => format!("{parent}[{key:?}]"),
    }
}

pub(super) fn index(parent: &str, i: usize) -> String {
    format!("{parent}[{i}]")
}

// === impl Walker ===

/// Stage 1's reader; `identity.rs` adds the methods of the identity keys.
pub(super) struct Walker<'p> {
    problems: &'p mut Vec<Problem>,
}

/// The entries of one object; a repeated key yields its last value, as JSON parsers do.
pub(super) struct Fields<'a>(&'a [(String, Json)]);

impl<'a> Fields<'a> {
    pub(super) fn get(&self, key: &str) -> Option<&'a Json> {
        self.0.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v)
    }
}

impl Walker<'_> {
    pub(super) fn problem(&mut self, path: &str, message: impl Into<String>) {
        self.problems.push(Problem::new(path, message));
    }

    fn config(&mut self, root: &Json) -> RawConfig {
        let mut raw = RawConfig::default();
        if !matches!(root, Json::Object(_)) {
            self.problem(
                "",
                format!(
                    "the config must be a JSON object with an \"mcpServers\" key (got {})",
                    root.kind()
                ),
            );
            return raw;
        }
        let Some(top) = self.object("", root, Some(TOP_KEYS)) else {
            return raw;
        };
        for (key, value) in top.0 {
            raw.anchors.push(child("", key));
            if key == "mcpServers"
                && let Json::Object(servers) = value
            {
                raw.anchors
                    .extend(servers.iter().map(|(name, _)| child("mcpServers", name)));
            }
        }
        match top.get("mcpServers") {
            None => self.problem(
                "mcpServers",
                "is missing: the config needs an \"mcpServers\" object that maps server names to servers",
            ),
            Some(servers) => {
                if let Some(servers) = self.object("mcpServers", servers, None) {
                    for (name, server) in servers.0 {
                        raw.servers.push(self.server(name, server));
                    }
                }
            }
        }
        if let Some(defaults) = top.get("defaults")
            && let Some(fields) = self.object("defaults", defaults, Some(DEFAULTS_KEYS))
        {
            raw.defaults = self.tuning("defaults", &fields);
        } else {
            raw.defaults.path = "defaults".to_owned();
            raw.defaults.reconnect_path = child("defaults", "reconnect");
        }
        if let Some(naming) = top.get("naming") {
            raw.naming = self.naming(naming);
        }
        if let Some(v) = top.get("toolExposure") {
            raw.tool_exposure = self.tool_exposure(v);
        }
        if let Some(v) = top.get("sessionMaxAgeMs") {
            raw.session_max_age_ms = self.millis("sessionMaxAgeMs", v, false);
        }
        if let Some(v) = top.get("auth") {
            raw.auth = self.auth(v);
        }
        if let Some(v) = top.get("rateLimit") {
            raw.rate_limit = self.rate_limit("rateLimit", v);
        }
        if let Some(v) = top.get("audit") {
            raw.audit = self.audit(v);
        }
        raw
    }

    fn tool_exposure(&mut self, value: &Json) -> Given<super::ToolExposure> {
        match value {
            Json::String(s) if s == "all" => Given::Value(super::ToolExposure::All),
            Json::String(s) if s == "search" => Given::Value(super::ToolExposure::Search),
            other => {
                self.problem(
                    "toolExposure",
                    format!(
                        "must be \"all\" (every tool in tools/list) or \"search\" (two tools, search_tools and call_tool, in their place) (got {})",
                        quoted_or_kind(other)
                    ),
                );
                Given::Invalid
            }
        }
    }

    fn server(&mut self, name: &str, value: &Json) -> RawServer {
        let path = child("mcpServers", name);
        if !is_valid_server_name(name) {
            self.problem(&path, BAD_SERVER_NAME);
        }
        let mut raw = RawServer {
            path: path.clone(),
            name: name.to_owned(),
            ..RawServer::default()
        };
        raw.tuning.path = path.clone();
        raw.tuning.reconnect_path = child(&path, "reconnect");
        let Some(fields) = self.object(&path, value, Some(SERVER_KEYS)) else {
            return raw;
        };
        raw.is_object = true;
        let at = |key: &str| child(&path, key);
        if let Some(v) = fields.get("type") {
            raw.kind = self.kind(&at("type"), v);
        }
        if let Some(v) = fields.get("command") {
            raw.command = self.text(&at("command"), v);
        }
        if let Some(v) = fields.get("args") {
            raw.args = self.text_array(&at("args"), v);
        }
        if let Some(v) = fields.get("env") {
            raw.env = self.text_map(&at("env"), v, MapKeys::EnvVar);
        }
        if let Some(v) = fields.get("cwd") {
            raw.cwd = self.text(&at("cwd"), v);
        }
        if let Some(v) = fields.get("url") {
            raw.url = self.text(&at("url"), v);
        }
        if let Some(v) = fields.get("headers") {
            raw.headers = self.text_map(&at("headers"), v, MapKeys::Header);
        }
        raw.tuning = self.tuning(&path, &fields);
        if let Some(v) = fields.get("retryTools") {
            raw.retry_tools = self.tool_names(&at("retryTools"), v);
        }
        if let Some(v) = fields.get("enabled") {
            raw.enabled = self.boolean(&at("enabled"), v);
        }
        if let Some(v) = fields.get("protocolVersion") {
            raw.protocol_version = self.protocol_version(&at("protocolVersion"), v);
        }
        if let Some(v) = fields.get("tools") {
            raw.tools = self.tool_filter(&at("tools"), v);
        }
        if let Some(v) = fields.get("oauth") {
            raw.oauth = match super::oauth::walk(&at("oauth"), v, self.problems) {
                Some(oauth) => Given::Value(oauth),
                None => Given::Invalid,
            };
        }
        if let Some(v) = fields.get("credentials") {
            raw.credentials = self.credentials(&at("credentials"), v);
        }
        raw
    }

    /// `tools: { "allow": [..], "deny": [..] }`: each pattern a valid glob.
    fn tool_filter(&mut self, path: &str, value: &Json) -> Given<RawTools> {
        let Some(fields) = self.object(path, value, Some(TOOLS_KEYS)) else {
            return Given::Invalid;
        };
        let mut lists = [Given::Absent, Given::Absent];
        for (key, slot) in ["allow", "deny"].into_iter().zip(&mut lists) {
            if let Some(v) = fields.get(key) {
                *slot = self.patterns(&child(path, key), v);
            }
        }
        let [allow, deny] = lists;
        tools_block(path, allow, deny, self.problems)
    }

    fn patterns(&mut self, path: &str, value: &Json) -> Given<Vec<String>> {
        let Json::Array(items) = value else {
            self.problem(
                path,
                format!(
                    "must be an array of glob patterns on upstream tool names, like [\"read_*\"] (got {})",
                    value.kind()
                ),
            );
            return Given::Invalid;
        };
        let mut patterns = Vec::with_capacity(items.len());
        let mut ok = true;
        for (i, item) in items.iter().enumerate() {
            let why = match item {
                Json::String(s) => match crate::filter::check_pattern(s) {
                    Ok(()) => {
                        patterns.push(s.clone());
                        continue;
                    }
                    Err(why) => why,
                },
                other => format!("must be a glob pattern (got {})", other.kind()),
            };
            self.problem(&index(path, i), why);
            ok = false;
        }
        if ok {
            Given::Value(patterns)
        } else {
            Given::Invalid
        }
    }

    fn protocol_version(&mut self, path: &str, value: &Json) -> Given<String> {
        match value {
            Json::String(s) if PROTOCOL_VERSIONS.contains(&s.as_str()) => Given::Value(s.clone()),
            other => {
                self.problem(
                    path,
                    format!(
                        "must be one of {} (got {}); leave it out to ask for the client's",
                        PROTOCOL_VERSIONS.join(", "),
                        quoted_or_kind(other)
                    ),
                );
                Given::Invalid
            }
        }
    }

    fn tuning(&mut self, path: &str, fields: &Fields<'_>) -> RawTuning {
        let at = |key: &str| child(path, key);
        let mut raw = RawTuning {
            path: path.to_owned(),
            reconnect_path: at("reconnect"),
            ..RawTuning::default()
        };
        if let Some(v) = fields.get("reconnect") {
            raw.reconnect = self.reconnect(&at("reconnect"), v);
        }
        if let Some(v) = fields.get("health") {
            raw.health = self.health(&at("health"), v);
        }
        if let Some(v) = fields.get("toolCallTimeoutMs") {
            raw.tool_call_timeout_ms = self.millis(&at("toolCallTimeoutMs"), v, false);
        }
        if let Some(v) = fields.get("connectTimeoutMs") {
            raw.connect_timeout_ms = self.millis(&at("connectTimeoutMs"), v, false);
        }
        if let Some(v) = fields.get("isolation") {
            raw.isolation = self.isolation(&at("isolation"), v);
        }
        if let Some(v) = fields.get("maxInstances") {
            raw.max_instances = self.count(&at("maxInstances"), v);
        }
        if let Some(v) = fields.get("pin") {
            raw.pin = self.pin_mode(&at("pin"), v);
        }
        if let Some(v) = fields.get("maxResultBytes") {
            raw.max_result_bytes = self.bytes(&at("maxResultBytes"), v);
        }
        if let Some(v) = fields.get("start") {
            raw.start = self.start(&at("start"), v);
        }
        if let Some(v) = fields.get("idleTimeoutMs") {
            raw.idle_timeout_ms = self.millis(&at("idleTimeoutMs"), v, false);
        }
        if let Some(v) = fields.get("rateLimit") {
            raw.rate_limit = self.rate_limit(&at("rateLimit"), v);
        }
        if let Some(v) = fields.get("authorize") {
            raw.authorize = self.authorize(&at("authorize"), v);
        }
        if let Some(v) = fields.get("sandbox") {
            raw.sandbox = self.sandbox(&at("sandbox"), v);
        }
        raw
    }

    fn isolation(&mut self, path: &str, value: &Json) -> Given<super::Isolation> {
        use super::Isolation::{Session, Shared, User};
        self.word(
            path,
            value,
            &[("shared", Shared), ("session", Session), ("user", User)],
            "must be \"shared\" (one instance serves every client), \"session\" (one instance per client session) or \"user\" (one instance per caller identity)",
        )
    }

    fn start(&mut self, path: &str, value: &Json) -> Given<super::Start> {
        use super::Start::{Always, OnDemand};
        self.word(
            path,
            value,
            &[("always", Always), ("onDemand", OnDemand)],
            "must be \"always\" (started with the proxy) or \"onDemand\" (started on the first request a client makes of it)",
        )
    }

    /// One of a few words, each standing for a value; `rule` says which.
    fn word<T: Copy>(
        &mut self,
        path: &str,
        value: &Json,
        words: &[(&str, T)],
        rule: &str,
    ) -> Given<T> {
        if let Json::String(s) = value
            && let Some((_, v)) = words.iter().find(|(w, _)| w == s)
        {
            return Given::Value(*v);
        }
        let got = match value {
            Json::String(s) => format!("{s:?}"),
            other => other.kind().to_string(),
        };
        self.problem(path, format!("{rule} (got {got})"));
        Given::Invalid
    }

    /// `"pin": "off" | "warn" | "block"`.
    fn pin_mode(&mut self, path: &str, value: &Json) -> Given<PinMode> {
        if let Json::String(s) = value
            && let Some(mode) = PinMode::parse(s)
        {
            return Given::Value(mode);
        }
        let got = match value {
            Json::String(s) => format!("{s:?}"),
            other => other.kind().to_string(),
        };
        self.problem(
            path,
            format!(
                "must be \"off\", \"warn\" or \"block\" (got {got}); leave it out for \"warn\""
            ),
        );
        Given::Invalid
    }

    fn reconnect(&mut self, path: &str, value: &Json) -> RawReconnect {
        let mut raw = RawReconnect::default();
        let Some(fields) = self.object(path, value, Some(RECONNECT_KEYS)) else {
            return raw;
        };
        let at = |key: &str| child(path, key);
        if let Some(v) = fields.get("enabled") {
            raw.enabled = self.boolean(&at("enabled"), v);
        }
        if let Some(v) = fields.get("initialDelayMs") {
            raw.initial_delay_ms = self.millis(&at("initialDelayMs"), v, false);
        }
        if let Some(v) = fields.get("maxDelayMs") {
            raw.max_delay_ms = self.millis(&at("maxDelayMs"), v, false);
        }
        if let Some(v) = fields.get("maxAttempts") {
            raw.max_attempts = self.count(&at("maxAttempts"), v);
        }
        if let Some(v) = fields.get("jitter") {
            raw.jitter = self.fraction(&at("jitter"), v);
        }
        raw
    }

    fn health(&mut self, path: &str, value: &Json) -> RawHealth {
        let mut raw = RawHealth::default();
        let Some(fields) = self.object(path, value, Some(HEALTH_KEYS)) else {
            return raw;
        };
        let at = |key: &str| child(path, key);
        if let Some(v) = fields.get("intervalMs") {
            raw.interval_ms = self.millis(&at("intervalMs"), v, true);
        }
        if let Some(v) = fields.get("timeoutMs") {
            raw.timeout_ms = self.millis(&at("timeoutMs"), v, false);
        }
        if let Some(v) = fields.get("failures") {
            raw.failures = self.count(&at("failures"), v);
        }
        raw
    }

    fn naming(&mut self, value: &Json) -> RawNaming {
        let mut raw = RawNaming::default();
        let Some(fields) = self.object("naming", value, Some(NAMING_KEYS)) else {
            return raw;
        };
        if let Some(v) = fields.get("mode") {
            raw.mode = match v {
                Json::String(s) if s == "prefixed" => Given::Value(NamingMode::Prefixed),
                Json::String(s) if s == "original" => Given::Value(NamingMode::Original),
                Json::String(s) => {
                    self.problem(
                        "naming.mode",
                        format!("must be \"prefixed\" or \"original\" (got {s:?})"),
                    );
                    Given::Invalid
                }
                other => {
                    self.problem(
                        "naming.mode",
                        format!(
                            "must be \"prefixed\" or \"original\" (got {})",
                            other.kind()
                        ),
                    );
                    Given::Invalid
                }
            };
        }
        if let Some(v) = fields.get("separator") {
            raw.separator = match v {
                Json::String(s) => {
                    let checked = check_separator(s).map(|()| s.clone());
                    self.checked("naming.separator", checked)
                }
                other => {
                    self.problem(
                        "naming.separator",
                        format!("{SEPARATOR_RULE} (got {})", other.kind()),
                    );
                    Given::Invalid
                }
            };
        }
        raw
    }

    // --- Shapes ---

    /// Checks that `value` is an object, reports repeated keys and (when `known` is given) unknown
    /// ones, and hands back its entries.
    pub(super) fn object<'a>(
        &mut self,
        path: &str,
        value: &'a Json,
        known: Option<&[&str]>,
    ) -> Option<Fields<'a>> {
        let Json::Object(entries) = value else {
            self.problem(path, format!("must be an object (got {})", value.kind()));
            return None;
        };
        for (i, (key, _)) in entries.iter().enumerate() {
            let earlier = entries
                .get(..i)
                .unwrap_or_default()
                .iter()
                .filter(|(k, _)| k == key)
                .count();
            if earlier == 1 {
                self.problem(
                    &child(path, key),
                    "appears more than once in the same object; keep one",
                );
            }
            if let Some(known) = known
                && earlier == 0
                && !known.contains(&key.as_str())
            {
                self.problem(&child(path, key), unknown_key_message(key, known));
            }
        }
        Some(Fields(entries))
    }

    fn kind(&mut self, path: &str, value: &Json) -> Given<Kind> {
        const ACCEPTED: &str =
            "must be one of \"stdio\", \"http\", \"streamable-http\", \"streamableHttp\", \"sse\"";
        match value {
            Json::String(s) => match s.as_str() {
                "stdio" => Given::Value(Kind::Stdio),
                "http" | "streamable-http" | "streamableHttp" => Given::Value(Kind::Http),
                "sse" => Given::Value(Kind::Sse),
                s => {
                    self.problem(path, format!("{ACCEPTED} (got {s:?})"));
                    Given::Invalid
                }
            },
            other => {
                self.problem(path, format!("{ACCEPTED} (got {})", other.kind()));
                Given::Invalid
            }
        }
    }

    pub(super) fn text(&mut self, path: &str, value: &Json) -> Given<Text> {
        match value {
            Json::String(s) => Given::Value(Text {
                path: path.to_owned(),
                raw: Secret::new(s.clone()),
            }),
            Json::Number(_) | Json::Bool(_) => {
                self.problem(
                    path,
                    format!(
                        "must be a string (got {}); write it in quotes",
                        value.kind()
                    ),
                );
                Given::Invalid
            }
            other => {
                self.problem(path, format!("must be a string (got {})", other.kind()));
                Given::Invalid
            }
        }
    }

    fn text_array(&mut self, path: &str, value: &Json) -> Given<Vec<Text>> {
        let Json::Array(items) = value else {
            self.problem(
                path,
                format!(
                    "must be an array of strings, one per argument (got {})",
                    value.kind()
                ),
            );
            return Given::Invalid;
        };
        // The good items go on to stage 2, so that their own problems are found too; the bad ones
        // were reported, which alone fails the config.
        let texts = items
            .iter()
            .enumerate()
            .filter_map(|(i, item)| self.text(&index(path, i), item).value().cloned())
            .collect();
        Given::Value(texts)
    }

    fn text_map(&mut self, path: &str, value: &Json, keys: MapKeys) -> Given<Vec<(String, Text)>> {
        let Some(fields) = self.object(path, value, None) else {
            return Given::Invalid;
        };
        // As for arrays: every entry whose value is a string goes on to stage 2.
        let mut entries = Vec::with_capacity(fields.0.len());
        for (key, item) in fields.0 {
            let key_path = child(path, key);
            if let Some(message) = keys.check(key) {
                self.problem(&key_path, message);
            }
            if let Given::Value(t) = self.text(&key_path, item) {
                entries.push((key.clone(), t));
            }
        }
        Given::Value(entries)
    }

    fn tool_names(&mut self, path: &str, value: &Json) -> Given<Vec<String>> {
        let Json::Array(items) = value else {
            self.problem(
                path,
                format!(
                    "must be an array of upstream tool names (got {})",
                    value.kind()
                ),
            );
            return Given::Invalid;
        };
        let mut names = Vec::with_capacity(items.len());
        let mut ok = true;
        for (i, item) in items.iter().enumerate() {
            match item {
                Json::String(s) => match check_tool_name(s) {
                    Ok(()) => names.push(s.clone()),
                    Err(why) => {
                        self.problem(&index(path, i), why);
                        ok = false;
                    }
                },
                other => {
                    self.problem(
                        &index(path, i),
                        format!("must be a tool name (got {})", other.kind()),
                    );
                    ok = false;
                }
            }
        }
        if ok {
            Given::Value(names)
        } else {
            Given::Invalid
        }
    }

    // --- Scalars ---

    fn boolean(&mut self, path: &str, value: &Json) -> Given<bool> {
        match value {
            Json::Bool(b) => Given::Value(*b),
            other => {
                self.problem(
                    path,
                    format!("must be true or false (got {})", other.kind()),
                );
                Given::Invalid
            }
        }
    }

    /// Milliseconds: a whole number in 1..=MAX_MS, or 0 as well when `zero_is_off`.
    pub(super) fn millis(&mut self, path: &str, value: &Json, zero_is_off: bool) -> Given<u64> {
        let Json::Number(n) = value else {
            let rule = millis_rule(zero_is_off);
            self.problem(path, format!("{rule} (got {})", value.kind()));
            return Given::Invalid;
        };
        self.checked(path, check_millis(*n, zero_is_off))
    }

    /// A positive whole number no greater than MAX_MS.
    fn count(&mut self, path: &str, value: &Json) -> Given<u32> {
        self.positive(path, value, COUNT_RULE)
    }

    /// A positive whole number no greater than MAX_MS, or a problem that says `rule`.
    fn positive(&mut self, path: &str, value: &Json, rule: &str) -> Given<u32> {
        let Json::Number(n) = value else {
            self.problem(path, format!("{rule} (got {})", value.kind()));
            return Given::Invalid;
        };
        self.checked(path, check_positive(*n, rule))
    }

    /// A positive whole number of bytes no greater than MAX_MS.
    fn bytes(&mut self, path: &str, value: &Json) -> Given<u32> {
        self.positive(path, value, BYTES_RULE)
    }

    /// The value of a check, or its problem recorded at `path`.
    pub(super) fn checked<T>(&mut self, path: &str, checked: Result<T, String>) -> Given<T> {
        match checked {
            Ok(value) => Given::Value(value),
            Err(why) => {
                self.problem(path, why);
                Given::Invalid
            }
        }
    }

    /// A number in [0, 1].
    fn fraction(&mut self, path: &str, value: &Json) -> Given<f64> {
        const RULE: &str = "must be a number from 0 to 1";
        let Json::Number(n) = value else {
            self.problem(path, format!("{RULE} (got {})", value.kind()));
            return Given::Invalid;
        };
        let f = match *n {
            Number::Unsigned(u) => u as f64,
            Number::Signed(i) => i as f64,
            Number::Float(f) => f,
        };
        if (0.0..=1.0).contains(&f) {
            Given::Value(f)
        } else {
            self.problem(path, format!("{RULE} (got {n})"));
            Given::Invalid
        }
    }
}

/// What the keys of a string map must be.
#[derive(Clone, Copy)]
pub(super) enum MapKeys {
    EnvVar,
    Header,
}

impl MapKeys {
    pub(super) fn check(self, key: &str) -> Option<&'static str> {
        match self {
            MapKeys::EnvVar => (key.is_empty() || key.contains(['=', '\0'])).then_some(
                "is not a valid environment variable name: it must be non-empty and hold no \"=\"",
            ),
            MapKeys::Header => (key.is_empty() || !key.chars().all(is_header_name_char))
                .then_some("is not a valid HTTP header name"),
        }
    }
}

/// RFC 9110 `tchar`.
fn is_header_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c)
}

enum Whole {
    Negative,
    Fraction,
    /// Saturated at u64::MAX.
    Value(u64),
}

fn whole(n: Number) -> Whole {
    match n {
        Number::Unsigned(u) => Whole::Value(u),
        Number::Signed(i) => u64::try_from(i).map_or(Whole::Negative, Whole::Value),
        Number::Float(f) if f.fract() != 0.0 => Whole::Fraction,
        Number::Float(f) if f < 0.0 => Whole::Negative,
        // Float-to-int `as` saturates; the value is whole and not negative here.
        Number::Float(f) => Whole::Value(f as u64),
    }
}

/// A string value quoted, or the kind of any other value, for a message.
fn quoted_or_kind(value: &Json) -> String {
    match value {
        Json::String(s) => format!("{s:?}"),
        other => other.kind().to_string(),
    }
}

fn unknown_key_message(key: &str, known: &[&str]) -> String {
    let normalize = |s: &str| {
        s.chars()
            .filter(|c| !matches!(c, '_' | '-' | ' '))
            .flat_map(char::to_lowercase)
            .collect::<String>()
    };
    let list = known.join(", ");
    match known.iter().find(|k| normalize(k) == normalize(key)) {
        Some(k) => format!("is not a known key; did you mean {k:?}? (known: {list})"),
        None => format!("is not a known key (known: {list})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_quote_keys_that_are_not_plain_words() {
        assert_eq!(child("", "mcpServers"), "mcpServers");
        assert_eq!(child("mcpServers", "fs"), "mcpServers.fs");
        assert_eq!(
            child("mcpServers", "my server"),
            "mcpServers[\"my server\"]"
        );
        assert_eq!(child("mcpServers", ""), "mcpServers[\"\"]");
        assert_eq!(child("a", "x.y"), "a[\"x.y\"]");
        assert_eq!(index("a.args", 2), "a.args[2]");
    }

    #[test]
    fn server_names() {
        for ok in ["a", "fs", "my-server_2", &"x".repeat(64)] {
            assert!(is_valid_server_name(ok), "{ok}");
        }
        for bad in ["", "a b", "a.b", "ü", "a/b", &"x".repeat(65)] {
            assert!(!is_valid_server_name(bad), "{bad}");
        }
    }

    #[test]
    fn whole_numbers() {
        assert!(matches!(whole(Number::Float(5.0)), Whole::Value(5)));
        assert!(matches!(whole(Number::Float(-0.0)), Whole::Value(0)));
        assert!(matches!(whole(Number::Float(1e30)), Whole::Value(u64::MAX)));
        assert!(matches!(whole(Number::Float(0.5)), Whole::Fraction));
        assert!(matches!(whole(Number::Float(-2.0)), Whole::Negative));
        assert!(matches!(whole(Number::Signed(-5)), Whole::Negative));
    }

    #[test]
    fn unknown_keys_suggest_a_near_miss() {
        assert_eq!(
            unknown_key_message("retry_tools", &["retryTools", "enabled"]),
            "is not a known key; did you mean \"retryTools\"? (known: retryTools, enabled)"
        );
        assert_eq!(
            unknown_key_message("colour", &["enabled"]),
            "is not a known key (known: enabled)"
        );
    }
}
