//! A one-server config from typed values, for a host (or `wrap`) that has no config file: the
//! setters hold the values, and `build` gives them the checks and messages a config file's values
//! get (stage 1's value checks, then stage 2). It never writes or parses JSON, never reads the
//! environment and never expands `${VAR}`: the transport is kept exactly as given.

use std::time::Duration;

use super::build::{
    Check, build_with, check_command, check_cwd, check_header_value, check_process_text, check_url,
};
use super::json::Number;
use super::raw::{
    BAD_SERVER_NAME, BYTES_RULE, COUNT_RULE, Given, MapKeys, RawConfig, RawHealth, RawNaming,
    RawReconnect, RawServer, RawTuning, check_millis, check_positive, check_separator,
    check_tool_name, child, index, is_valid_server_name, tools_block,
};
use super::{
    Config, ConfigErrors, Problem, SandboxConfig, Secret, Start, ToolExposure, TransportConfig,
    group_problems,
};
use crate::filter::check_pattern;
use crate::naming::NamingMode;
use crate::pin::PinMode;

/// A config of one server, built from typed values with a config file's checks: what is not set
/// takes the value a config file that leaves the key out would have. Problems name the key a
/// config file would hold the value at (`mcpServers.NAME.reconnect.maxDelayMs`).
///
/// ```
/// # use std::time::Duration;
/// # use mcp_supervisor_core::config::{Config, TransportConfig};
/// let transport = TransportConfig::Http { url: "http://127.0.0.1:3001/mcp".into(), headers: vec![] };
/// let config = Config::single("docs", transport)
///     .tool_call_timeout(Duration::from_secs(10))
///     .build()
///     .expect("valid");
/// assert_eq!(config.servers[0].tool_call_timeout, Duration::from_secs(10));
/// ```
#[derive(Clone, Debug)]
#[must_use]
pub struct ServerBuilder {
    name: String,
    transport: TransportConfig,
    set: Settings,
}

/// What the setters were given; `None`: not set.
#[derive(Clone, Debug, Default)]
struct Settings {
    reconnect_enabled: Option<bool>,
    initial_delay: Option<Duration>,
    max_delay: Option<Duration>,
    max_attempts: Option<u32>,
    health_interval: Option<Duration>,
    tool_call_timeout: Option<Duration>,
    connect_timeout: Option<Duration>,
    pin: Option<PinMode>,
    max_result_bytes: Option<u64>,
    start: Option<Start>,
    idle_timeout: Option<Duration>,
    retry_tools: Option<Vec<String>>,
    allow_tools: Option<Vec<String>>,
    deny_tools: Option<Vec<String>>,
    naming_mode: Option<NamingMode>,
    separator: Option<String>,
    tool_exposure: Option<ToolExposure>,
    sandbox: Option<SandboxConfig>,
}

// === impl ServerBuilder ===

impl Config {
    /// A builder of a config whose only server is `name`, reached by `transport`.
    pub fn single(name: impl Into<String>, transport: TransportConfig) -> ServerBuilder {
        ServerBuilder::new(name, transport)
    }
}

impl ServerBuilder {
    /// The server `name`, reached by `transport` (kept as given: no `${VAR}` is expanded).
    pub fn new(name: impl Into<String>, transport: TransportConfig) -> Self {
        Self {
            name: name.into(),
            transport,
            set: Settings::default(),
        }
    }

    /// Whether a lost server is reconnected (`reconnect.enabled`).
    pub fn reconnect_enabled(mut self, enabled: bool) -> Self {
        self.set.reconnect_enabled = Some(enabled);
        self
    }

    /// The delay before the first reconnect attempt (`reconnect.initialDelayMs`): whole
    /// milliseconds, 1 to 2147483647, no more than the max delay.
    pub fn initial_delay(mut self, delay: Duration) -> Self {
        self.set.initial_delay = Some(delay);
        self
    }

    /// The longest delay between attempts (`reconnect.maxDelayMs`).
    pub fn max_delay(mut self, delay: Duration) -> Self {
        self.set.max_delay = Some(delay);
        self
    }

    /// The attempts after a loss before giving up (`reconnect.maxAttempts`): 1 to 2147483647.
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.set.max_attempts = Some(attempts);
        self
    }

    /// The idle health-probe interval (`health.intervalMs`); [`Duration::ZERO`]: no probes.
    pub fn health_interval(mut self, interval: Duration) -> Self {
        self.set.health_interval = Some(interval);
        self
    }

    /// The deadline of each tool call (`toolCallTimeoutMs`).
    pub fn tool_call_timeout(mut self, timeout: Duration) -> Self {
        self.set.tool_call_timeout = Some(timeout);
        self
    }

    /// The deadline of start, handshake and first listing (`connectTimeoutMs`).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.set.connect_timeout = Some(timeout);
        self
    }

    /// The tools safe to send again when their outcome is unknown (`retryTools`).
    pub fn retry_tools<I, S>(mut self, tools: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.set.retry_tools = Some(tools.into_iter().map(Into::into).collect());
        self
    }

    /// When the server is started (`start`).
    pub fn start(mut self, start: Start) -> Self {
        self.set.start = Some(start);
        self
    }

    /// Stop the server after this long without a client request (`idleTimeoutMs`).
    pub fn idle_timeout(mut self, timeout: Duration) -> Self {
        self.set.idle_timeout = Some(timeout);
        self
    }

    /// Publish only the tools these glob patterns match (`tools.allow`; at least one).
    pub fn allow_tools<I, S>(mut self, patterns: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.set.allow_tools = Some(patterns.into_iter().map(Into::into).collect());
        self
    }

    /// Never publish the tools these glob patterns match (`tools.deny`).
    pub fn deny_tools<I, S>(mut self, patterns: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.set.deny_tools = Some(patterns.into_iter().map(Into::into).collect());
        self
    }

    /// What a tool whose definition changed does (`pin`).
    pub fn pin(mut self, mode: PinMode) -> Self {
        self.set.pin = Some(mode);
        self
    }

    /// Cut a tool result's content past this many bytes (`maxResultBytes`): 1 to 2147483647.
    pub fn max_result_bytes(mut self, bytes: u64) -> Self {
        self.set.max_result_bytes = Some(bytes);
        self
    }

    /// How the client sees the tools (`toolExposure`).
    pub fn tool_exposure(mut self, exposure: ToolExposure) -> Self {
        self.set.tool_exposure = Some(exposure);
        self
    }

    /// Whether tool names are prefixed with the server's (`naming.mode`); prefixed unless set,
    /// as in a config file.
    pub fn naming_mode(mut self, mode: NamingMode) -> Self {
        self.set.naming_mode = Some(mode);
        self
    }

    /// What joins a server's name and a tool's (`naming.separator`).
    pub fn separator(mut self, separator: impl Into<String>) -> Self {
        self.set.separator = Some(separator.into());
        self
    }

    /// Run a stdio server in a sandbox (`sandbox`): its paths absolute (the builder expands no
    /// `~/`), its ports not 0.
    pub fn sandbox(mut self, sandbox: SandboxConfig) -> Self {
        self.set.sandbox = Some(sandbox);
        self
    }

    /// The config, or every problem a config file holding the same values would have.
    pub fn build(self) -> Result<Config, ConfigErrors> {
        let mut problems = Vec::new();
        let raw = self.raw(&mut problems);
        let mut transport = Some(self.transport);
        // Nothing a builder sets holds a `${VAR}`: the lookup has nothing to find.
        let mut config = build_with(&raw, &|_| None, &mut problems, &mut |server, problems| {
            let transport = transport.take()?;
            check_transport(&server.path, &transport, problems);
            Some(transport)
        });
        if let Some(sandbox) = self.set.sandbox {
            let path = child(&child("mcpServers", &self.name), "sandbox");
            super::sandbox::check_typed(&path, &sandbox, &mut problems);
            for server in &mut config.servers {
                if matches!(server.transport, TransportConfig::Stdio { .. }) {
                    server.sandbox = Some(sandbox.clone());
                } else {
                    problems.push(Problem::new(
                        &path,
                        "applies only to \"command\" servers (stdio), whose process the proxy starts; this server has \"url\": remove it",
                    ));
                }
            }
        }
        group_problems(&mut problems, &raw.anchors);
        if problems.is_empty() {
            Ok(config)
        } else {
            Err(ConfigErrors { problems })
        }
    }

    /// Stage 1 on the typed values, in the order the walker reads a server's keys: each value
    /// checked as the config file's is, its problem recorded at that key's path.
    fn raw(&self, problems: &mut Vec<Problem>) -> RawConfig {
        let s = &self.set;
        let path = child("mcpServers", &self.name);
        if !is_valid_server_name(&self.name) {
            problems.push(Problem::new(&path, BAD_SERVER_NAME));
        }
        let mut c = Checks(problems);
        let at = |key: &str| child(&path, key);
        let reconnect_path = at("reconnect");
        let reconnect = |key: &str| child(&reconnect_path, key);
        let tuning = RawTuning {
            reconnect: RawReconnect {
                enabled: given(s.reconnect_enabled),
                initial_delay_ms: c.millis(&reconnect("initialDelayMs"), s.initial_delay, false),
                max_delay_ms: c.millis(&reconnect("maxDelayMs"), s.max_delay, false),
                max_attempts: c.positive(
                    &reconnect("maxAttempts"),
                    s.max_attempts.map(u64::from),
                    COUNT_RULE,
                ),
                jitter: Given::Absent,
            },
            health: RawHealth {
                interval_ms: c.millis(&child(&at("health"), "intervalMs"), s.health_interval, true),
                ..RawHealth::default()
            },
            tool_call_timeout_ms: c.millis(&at("toolCallTimeoutMs"), s.tool_call_timeout, false),
            connect_timeout_ms: c.millis(&at("connectTimeoutMs"), s.connect_timeout, false),
            pin: given(s.pin),
            max_result_bytes: c.positive(&at("maxResultBytes"), s.max_result_bytes, BYTES_RULE),
            start: given(s.start),
            idle_timeout_ms: c.millis(&at("idleTimeoutMs"), s.idle_timeout, false),
            path: path.clone(),
            reconnect_path: reconnect_path.clone(),
            ..RawTuning::default()
        };
        let retry_tools = c.list(&at("retryTools"), &s.retry_tools, check_tool_name);
        let tools = match (&s.allow_tools, &s.deny_tools) {
            (None, None) => Given::Absent,
            (allow, deny) => {
                let tools_path = at("tools");
                let allow = c.list(&child(&tools_path, "allow"), allow, check_pattern);
                let deny = c.list(&child(&tools_path, "deny"), deny, check_pattern);
                tools_block(&tools_path, allow, deny, c.0)
            }
        };
        let naming = RawNaming {
            mode: given(s.naming_mode),
            separator: match &s.separator {
                None => Given::Absent,
                Some(sep) => c.check(
                    "naming.separator",
                    check_separator(sep).map(|()| sep.clone()),
                ),
            },
        };
        let server = RawServer {
            is_object: true,
            path: path.clone(),
            name: self.name.clone(),
            tuning,
            retry_tools,
            tools,
            ..RawServer::default()
        };
        RawConfig {
            anchors: vec!["mcpServers".to_owned(), path, "naming".to_owned()],
            servers: vec![server],
            defaults: RawTuning {
                path: "defaults".to_owned(),
                reconnect_path: child("defaults", "reconnect"),
                ..RawTuning::default()
            },
            naming,
            tool_exposure: given(s.tool_exposure),
            session_max_age_ms: Given::Absent,
            ..RawConfig::default()
        }
    }
}

fn given<T>(value: Option<T>) -> Given<T> {
    value.map_or(Given::Absent, Given::Value)
}

/// A duration as the number of milliseconds a config file would hold for it: whole, or with the
/// fraction that makes stage 1 refuse it.
fn millis_number(duration: Duration) -> Number {
    if duration.subsec_nanos().is_multiple_of(1_000_000) {
        Number::Unsigned(u64::try_from(duration.as_millis()).unwrap_or(u64::MAX))
    } else {
        Number::Float(duration.as_nanos() as f64 / 1e6)
    }
}

// === Checks ===

/// Stage 1's value checks on typed values: a problem is recorded at its path and the value is
/// `Invalid`, so stage 2 does not judge it again.
struct Checks<'p>(&'p mut Vec<Problem>);

impl Checks<'_> {
    fn check<T>(&mut self, path: &str, checked: Result<T, String>) -> Given<T> {
        match checked {
            Ok(value) => Given::Value(value),
            Err(why) => {
                self.0.push(Problem::new(path, why));
                Given::Invalid
            }
        }
    }

    fn millis(&mut self, path: &str, value: Option<Duration>, zero_is_off: bool) -> Given<u64> {
        match value {
            None => Given::Absent,
            Some(d) => self.check(path, check_millis(millis_number(d), zero_is_off)),
        }
    }

    fn positive(&mut self, path: &str, value: Option<u64>, rule: &str) -> Given<u32> {
        match value {
            None => Given::Absent,
            Some(n) => self.check(path, check_positive(Number::Unsigned(n), rule)),
        }
    }

    /// A list whose every item `check` accepts; each bad item is a problem at its index.
    fn list(
        &mut self,
        path: &str,
        items: &Option<Vec<String>>,
        check: fn(&str) -> Result<(), String>,
    ) -> Given<Vec<String>> {
        let Some(items) = items else {
            return Given::Absent;
        };
        let mut ok = true;
        for (i, item) in items.iter().enumerate() {
            if let Err(why) = check(item) {
                self.0.push(Problem::new(index(path, i), why));
                ok = false;
            }
        }
        if ok {
            Given::Value(items.clone())
        } else {
            Given::Invalid
        }
    }
}

/// Stage 2's checks of a transport's values (with stage 1's of its map keys), at the paths a
/// config file would hold them: no value is expanded, and none is put in a message.
fn check_transport(path: &str, transport: &TransportConfig, problems: &mut Vec<Problem>) {
    match transport {
        TransportConfig::Stdio {
            command,
            args,
            env,
            cwd,
        } => {
            check_value(problems, child(path, "command"), command, check_command);
            let args_path = child(path, "args");
            for (i, arg) in args.iter().enumerate() {
                check_value(problems, index(&args_path, i), arg, check_process_text);
            }
            let env_path = child(path, "env");
            check_map(
                problems,
                &env_path,
                env,
                MapKeys::EnvVar,
                check_process_text,
            );
            if let Some(cwd) = cwd {
                check_value(
                    problems,
                    child(path, "cwd"),
                    &cwd.to_string_lossy(),
                    check_cwd,
                );
            }
        }
        TransportConfig::Http { url, headers } | TransportConfig::Sse { url, headers } => {
            check_value(problems, child(path, "url"), url, check_url);
            let headers_path = child(path, "headers");
            check_map(
                problems,
                &headers_path,
                headers,
                MapKeys::Header,
                check_header_value,
            );
        }
    }
}

fn check_value(problems: &mut Vec<Problem>, path: String, value: &str, check: Check) {
    if let Some(why) = check(value) {
        problems.push(Problem::new(path, why));
    }
}

fn check_map(
    problems: &mut Vec<Problem>,
    path: &str,
    entries: &[(String, Secret)],
    keys: MapKeys,
    values: Check,
) {
    for (key, value) in entries {
        let key_path = child(path, key);
        if let Some(why) = keys.check(key) {
            problems.push(Problem::new(&key_path, why));
        }
        check_value(problems, key_path, value.expose(), values);
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::config::{MAX_MS, ServerConfig, parse_config};

    const MAX_MS_PLUS_ONE: u64 = MAX_MS + 1;

    fn ms(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    fn stdio(command: &str, args: &[&str]) -> TransportConfig {
        TransportConfig::Stdio {
            command: command.to_owned(),
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            env: Vec::new(),
            cwd: None,
        }
    }

    fn http(url: &str, headers: &[(&str, &str)]) -> TransportConfig {
        TransportConfig::Http {
            url: url.to_owned(),
            headers: headers
                .iter()
                .map(|(k, v)| ((*k).to_owned(), Secret::new(*v)))
                .collect(),
        }
    }

    fn fs() -> ServerBuilder {
        Config::single("fs", stdio("npx", &[]))
    }

    /// The config file `{ "mcpServers": { "fs": { "command": "npx" SERVER } } TOP }`, parsed with
    /// no environment.
    fn file(server: &str, top: &str) -> Result<Config, ConfigErrors> {
        let text =
            format!(r#"{{ "mcpServers": {{ "fs": {{ "command": "npx" {server} }} }} {top} }}"#);
        parse_config(&text, &|_| None)
    }

    type Set = fn(ServerBuilder) -> ServerBuilder;

    #[test]
    fn unset_values_are_those_of_a_minimal_config_file() {
        assert_eq!(fs().build(), file("", ""));
        let url = "https://example.com/mcp";
        let parsed = parse_config(
            &format!(r#"{{"mcpServers": {{"docs": {{"url": "{url}"}}}}}}"#),
            &|_| None,
        );
        assert_eq!(Config::single("docs", http(url, &[])).build(), parsed);
        let sse = TransportConfig::Sse {
            url: "http://h/sse".into(),
            headers: Vec::new(),
        };
        let parsed = parse_config(
            r#"{"mcpServers": {"old": {"type": "sse", "url": "http://h/sse"}}}"#,
            &|_| None,
        );
        assert_eq!(Config::single("old", sse).build(), parsed);
        let only = fs().build().expect("valid");
        assert_eq!(only.servers, [ServerConfig::new("fs", stdio("npx", &[]))]);
    }

    #[test]
    fn each_setter_sets_what_its_config_key_sets() {
        let cases: &[(Set, &str, &str)] = &[
            (
                |b| b.reconnect_enabled(false),
                r#", "reconnect": {"enabled": false}"#,
                "",
            ),
            (
                |b| b.initial_delay(ms(100)),
                r#", "reconnect": {"initialDelayMs": 100}"#,
                "",
            ),
            (
                |b| b.max_delay(ms(90_000)),
                r#", "reconnect": {"maxDelayMs": 90000}"#,
                "",
            ),
            (
                |b| b.max_attempts(3),
                r#", "reconnect": {"maxAttempts": 3}"#,
                "",
            ),
            (
                |b| b.health_interval(ms(5_000)),
                r#", "health": {"intervalMs": 5000}"#,
                "",
            ),
            (
                |b| b.health_interval(Duration::ZERO),
                r#", "health": {"intervalMs": 0}"#,
                "",
            ),
            (
                |b| b.tool_call_timeout(ms(7)),
                r#", "toolCallTimeoutMs": 7"#,
                "",
            ),
            (
                |b| b.connect_timeout(ms(8)),
                r#", "connectTimeoutMs": 8"#,
                "",
            ),
            (
                |b| b.retry_tools(["read", "list"]),
                r#", "retryTools": ["read", "list"]"#,
                "",
            ),
            (|b| b.start(Start::OnDemand), r#", "start": "onDemand""#, ""),
            (
                |b| b.idle_timeout(ms(60_000)),
                r#", "idleTimeoutMs": 60000"#,
                "",
            ),
            (
                |b| b.allow_tools(["read_*"]),
                r#", "tools": {"allow": ["read_*"]}"#,
                "",
            ),
            (
                |b| b.deny_tools(["*delete*"]),
                r#", "tools": {"deny": ["*delete*"]}"#,
                "",
            ),
            (
                |b| b.allow_tools(["a*", "b?"]).deny_tools(["ab"]),
                r#", "tools": {"allow": ["a*", "b?"], "deny": ["ab"]}"#,
                "",
            ),
            (|b| b.pin(PinMode::Block), r#", "pin": "block""#, ""),
            (
                |b| b.max_result_bytes(1_000),
                r#", "maxResultBytes": 1000"#,
                "",
            ),
            (
                |b| b.tool_exposure(ToolExposure::Search),
                "",
                r#", "toolExposure": "search""#,
            ),
            (
                |b| b.naming_mode(NamingMode::Original),
                "",
                r#", "naming": {"mode": "original"}"#,
            ),
            (
                |b| b.separator("."),
                "",
                r#", "naming": {"separator": "."}"#,
            ),
        ];
        let unset = fs().build().expect("valid");
        for (set, server, top) in cases {
            let built = set(fs()).build();
            assert_eq!(built, file(server, top), "{server}{top}");
            assert_ne!(
                built.expect("valid"),
                unset,
                "{server}{top} changed nothing"
            );
        }
    }

    #[test]
    fn a_later_call_of_a_setter_replaces_an_earlier_one() {
        let built = fs().max_attempts(0).max_attempts(4).build();
        assert_eq!(built, file(r#", "reconnect": {"maxAttempts": 4}"#, ""));
    }

    #[test]
    fn naming_original_keeps_tool_names_and_the_default_separator() {
        let config = fs()
            .naming_mode(NamingMode::Original)
            .build()
            .expect("valid");
        assert_eq!(config.naming.mode, NamingMode::Original);
        assert_eq!(config.naming.separator, crate::naming::DEFAULT_SEPARATOR);
    }

    #[test]
    fn each_invalid_value_gives_the_problem_a_config_file_gives() {
        let cases: &[(Set, &str, &str)] = &[
            (
                |b| b.initial_delay(ms(0)),
                r#", "reconnect": {"initialDelayMs": 0}"#,
                "",
            ),
            (
                |b| b.initial_delay(Duration::from_micros(1_500)),
                r#", "reconnect": {"initialDelayMs": 1.5}"#,
                "",
            ),
            (
                |b| b.max_delay(ms(MAX_MS_PLUS_ONE)),
                r#", "reconnect": {"maxDelayMs": 2147483648}"#,
                "",
            ),
            (
                |b| b.max_delay(Duration::from_secs(u64::MAX)),
                r#", "reconnect": {"maxDelayMs": 18446744073709551615}"#,
                "",
            ),
            (
                |b| b.initial_delay(ms(5_000)).max_delay(ms(1_000)),
                r#", "reconnect": {"initialDelayMs": 5000, "maxDelayMs": 1000}"#,
                "",
            ),
            (
                |b| b.max_delay(ms(100)),
                r#", "reconnect": {"maxDelayMs": 100}"#,
                "",
            ),
            (
                |b| b.max_attempts(0),
                r#", "reconnect": {"maxAttempts": 0}"#,
                "",
            ),
            (
                |b| b.max_attempts(u32::MAX),
                r#", "reconnect": {"maxAttempts": 4294967295}"#,
                "",
            ),
            (
                |b| b.health_interval(Duration::from_micros(2_500)),
                r#", "health": {"intervalMs": 2.5}"#,
                "",
            ),
            (
                |b| b.tool_call_timeout(ms(0)),
                r#", "toolCallTimeoutMs": 0"#,
                "",
            ),
            (
                |b| b.connect_timeout(ms(0)),
                r#", "connectTimeoutMs": 0"#,
                "",
            ),
            (|b| b.idle_timeout(ms(0)), r#", "idleTimeoutMs": 0"#, ""),
            (
                |b| b.retry_tools(["ok", ""]),
                r#", "retryTools": ["ok", ""]"#,
                "",
            ),
            (
                |b| b.allow_tools(Vec::<String>::new()),
                r#", "tools": {"allow": []}"#,
                "",
            ),
            (
                |b| b.allow_tools(["a[", ""]),
                r#", "tools": {"allow": ["a[", ""]}"#,
                "",
            ),
            (
                |b| b.deny_tools(["{a"]),
                r#", "tools": {"deny": ["{a"]}"#,
                "",
            ),
            (|b| b.max_result_bytes(0), r#", "maxResultBytes": 0"#, ""),
            (
                |b| b.max_result_bytes(MAX_MS_PLUS_ONE),
                r#", "maxResultBytes": 2147483648"#,
                "",
            ),
            (|b| b.separator(""), "", r#", "naming": {"separator": ""}"#),
            (
                |b| b.separator("/"),
                "",
                r#", "naming": {"separator": "/"}"#,
            ),
        ];
        for (set, server, top) in cases {
            let built = set(fs()).build();
            assert!(built.is_err(), "{server}{top}: {built:?}");
            assert_eq!(built, file(server, top), "{server}{top}");
        }
    }

    #[test]
    fn every_problem_is_reported_at_once_in_a_config_files_order() {
        let built = fs()
            .separator("/")
            .max_result_bytes(0)
            .retry_tools([""])
            .max_attempts(0)
            .initial_delay(ms(9_000))
            .max_delay(ms(10))
            .build();
        let parsed = file(
            r#", "reconnect": {"initialDelayMs": 9000, "maxDelayMs": 10, "maxAttempts": 0},
                "maxResultBytes": 0, "retryTools": [""]"#,
            r#", "naming": {"separator": "/"}"#,
        );
        assert_eq!(built, parsed);
        assert_eq!(built.expect_err("invalid").problems.len(), 5);
    }

    #[test]
    fn a_bad_server_name_is_the_problem_of_the_same_key_in_a_file() {
        let built = Config::single("my server", stdio("npx", &[])).build();
        let parsed = parse_config(
            r#"{"mcpServers": {"my server": {"command": "npx"}}}"#,
            &|_| None,
        );
        assert_eq!(built, parsed);
        let problems = built.expect_err("invalid").problems;
        assert_eq!(
            problems,
            [Problem::new("mcpServers[\"my server\"]", BAD_SERVER_NAME)]
        );
        assert!(
            Config::single("x".repeat(65), stdio("npx", &[]))
                .build()
                .is_err()
        );
    }

    #[test]
    fn a_transport_gets_the_checks_of_its_config_keys() {
        let stdio_file = |server: &str| {
            parse_config(&format!(r#"{{"mcpServers": {{"fs": {server}}}}}"#), &|_| {
                None
            })
        };
        let with_env = |env: &[(&str, &str)], cwd: Option<&str>| TransportConfig::Stdio {
            command: "run".into(),
            args: vec!["a".into(), "b\0".into()],
            env: env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), Secret::new(*v)))
                .collect(),
            cwd: cwd.map(PathBuf::from),
        };
        let cases = [
            (stdio(" ", &[]), r#"{"command": " "}"#),
            (stdio("a\0", &[]), r#"{"command": "a\u0000"}"#),
            (
                with_env(&[("A=B", "x"), ("C", "\0")], Some("")),
                r#"{"command": "run", "args": ["a", "b\u0000"], "env": {"A=B": "x", "C": "\u0000"}, "cwd": ""}"#,
            ),
            (http("ftp://x", &[]), r#"{"url": "ftp://x"}"#),
            (http("http:///mcp", &[]), r#"{"url": "http:///mcp"}"#),
            (
                http("http://h", &[("Bad Name", "v"), ("X-Ok", "a\r\nb")]),
                r#"{"url": "http://h", "headers": {"Bad Name": "v", "X-Ok": "a\r\nb"}}"#,
            ),
        ];
        for (transport, server) in cases {
            let built = Config::single("fs", transport).build();
            assert!(built.is_err(), "{server}");
            let (mut built, mut parsed) = (
                built.expect_err("invalid").problems,
                stdio_file(server).expect_err("invalid").problems,
            );
            // A file reports bad map keys before any value; the builder, key by key.
            built.sort_by(|a, b| a.path.cmp(&b.path));
            parsed.sort_by(|a, b| a.path.cmp(&b.path));
            assert_eq!(built, parsed, "{server}");
        }
    }

    #[test]
    fn a_commands_words_are_kept_exactly_as_given() {
        let words = ["${HOME}", "$$", "${NOT SET", "a b", ""];
        let transport = stdio("${TOOL}", &words);
        let config = Config::single("fs", transport.clone())
            .build()
            .expect("valid");
        assert_eq!(config.servers[0].transport, transport);
        let remote = http("http://h/${PATH}", &[("Authorization", "Bearer ${T}")]);
        let config = Config::single("r", remote.clone()).build().expect("valid");
        assert_eq!(config.servers[0].transport, remote);
    }

    #[test]
    fn durations_are_the_milliseconds_a_file_would_hold() {
        assert_eq!(millis_number(ms(1_500)).to_string(), "1500");
        assert_eq!(
            millis_number(Duration::from_micros(1_500)).to_string(),
            "1.5"
        );
        assert_eq!(
            millis_number(Duration::from_secs(u64::MAX)).to_string(),
            u64::MAX.to_string()
        );
        assert_eq!(
            millis_number(Duration::MAX).to_string(),
            "1.8446744073709552e22"
        );
    }
}
