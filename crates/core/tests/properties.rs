//! Property tests of the pure core against bad and random input: `parse_config` never panics and
//! reports well-formed problems, secrets never leak, the classifier and the replay rule hold for
//! every failure, public names are always valid and unique, and the outage budget always grants
//! exactly `maxAttempts` retries. Every property runs a fixed number of cases (see `CASES_*`), so
//! the total is known: 9 properties × 2000 + 3000 (secrets) + 1000 (budget reset) = 22 000.

use std::collections::HashSet;
use std::time::Duration;

use mcp_supervisor_core::classify::{
    AfterProbe, Failure, Recovery, STALE_SESSION_PHRASES, ToolSafety, Verdict, after_probe,
    classify, mentions_stale_session, recovery,
};
use mcp_supervisor_core::config::{Config, ConfigErrors, MAX_MS, TransportConfig, parse_config};
use mcp_supervisor_core::naming::{
    NameKind::Tool, NamingConfig, NamingMode, assign, prefixed_name,
};
use mcp_supervisor_core::policy::{Budget, Decision, ReconnectPolicy};
use proptest::prelude::*;
use proptest::test_runner::Config as ProptestConfig;
use serde_json::{Map, Value, json};

const CASES_CONFIG: u32 = 2000;
const CASES_SECRETS: u32 = 3000;
const CASES_CLASSIFY: u32 = 2000;
const CASES_NAMING: u32 = 2000;
const CASES_BUDGET: u32 = 2000;
const CASES_BUDGET_RESET: u32 = 1000;

fn cases(n: u32) -> ProptestConfig {
    ProptestConfig {
        cases: n,
        // Never write regression files beside the sources: other people edit this tree.
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

const TOP_KEYS: &[&str] = &["mcpServers", "defaults", "naming", "toolExposure"];
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
    "maxResultBytes",
];
const RECONNECT_KEYS: &[&str] = &[
    "enabled",
    "initialDelayMs",
    "maxDelayMs",
    "maxAttempts",
    "jitter",
];
const HEALTH_KEYS: &[&str] = &["intervalMs", "timeoutMs", "failures"];

/// A lookup with a few fixed variables; never the process environment.
fn env(name: &str) -> Option<String> {
    match name {
        "HOME" => Some("/home/me".to_owned()),
        "EMPTY" => Some(String::new()),
        "PORT" => Some("8080".to_owned()),
        _ => None,
    }
}

// === Checks shared by the config properties ===

/// The path of a top-level key, as the config's own paths spell it (`key`, or `["odd key"]`).
fn top_path(key: &str) -> String {
    let plain = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if plain {
        key.to_owned()
    } else {
        format!("[{key:?}]")
    }
}

/// Whether `path` is `root` or lies under it.
fn under(path: &str, root: &str) -> bool {
    path.strip_prefix(root)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']))
}

/// The top-level keys of `text` if it is a JSON object (for unknown-key problems).
fn top_keys(text: &str) -> Vec<String> {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => map.keys().cloned().collect(),
        _ => Vec::new(),
    }
}

/// The number of entries of the `mcpServers` object of `text`, when there is one. Counted on the
/// raw text's last `mcpServers` (a repeated key takes its last value), duplicates collapsed.
fn server_count(text: &str) -> Option<usize> {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => match map.get("mcpServers") {
            Some(Value::Object(servers)) => Some(servers.len()),
            _ => None,
        },
        _ => None,
    }
}

/// Every Err has problems, each with a path under a known root (or a top-level key the document
/// really has, for "unknown key" and "repeated key"), and a non-empty message. Every Ok holds as
/// many servers as the document's `mcpServers` and satisfies the validated invariants.
fn check_outcome(text: &str, result: &Result<Config, ConfigErrors>) -> Result<(), TestCaseError> {
    match result {
        Err(errors) => {
            prop_assert!(!errors.problems.is_empty(), "an Err without problems");
            let keys = top_keys(text);
            for problem in &errors.problems {
                prop_assert!(
                    !problem.message.is_empty(),
                    "empty message at {:?}",
                    problem.path
                );
                if problem.path.is_empty() {
                    continue;
                }
                let known = TOP_KEYS.iter().any(|root| under(&problem.path, root));
                // An unknown or repeated top-level key is reported at that key itself.
                let present_top_key = keys.iter().any(|k| top_path(k) == problem.path)
                    && (problem.message.contains("is not a known key")
                        || problem.message.contains("appears more than once"));
                prop_assert!(
                    known || present_top_key,
                    "problem path {:?} has no known root ({})",
                    problem.path,
                    problem.message
                );
            }
        }
        Ok(config) => {
            prop_assert_eq!(Some(config.servers.len()), server_count(text));
            for server in &config.servers {
                check_valid_server(server)?;
            }
        }
    }
    Ok(())
}

fn check_valid_server(
    server: &mcp_supervisor_core::config::ServerConfig,
) -> Result<(), TestCaseError> {
    let r = &server.reconnect;
    let max = Duration::from_millis(MAX_MS);
    prop_assert!(!r.initial_delay.is_zero() && r.initial_delay <= r.max_delay);
    prop_assert!(r.max_delay <= max);
    prop_assert!(r.max_attempts >= 1 && u64::from(r.max_attempts) <= MAX_MS);
    prop_assert!((0.0..=1.0).contains(&r.jitter));
    prop_assert!(!server.tool_call_timeout.is_zero() && server.tool_call_timeout <= max);
    prop_assert!(!server.connect_timeout.is_zero() && server.connect_timeout <= max);
    prop_assert!(!server.health.timeout.is_zero() && server.health.failures >= 1);
    prop_assert!(
        (1..=64).contains(&server.name.len())
            && server
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'),
        "invalid name accepted: {:?}",
        server.name
    );
    match &server.transport {
        TransportConfig::Stdio { command, .. } => prop_assert!(!command.trim().is_empty()),
        TransportConfig::Http { url, .. } | TransportConfig::Sse { url, .. } => {
            let lower = url.to_ascii_lowercase();
            prop_assert!(lower.starts_with("http://") || lower.starts_with("https://"));
        }
    }
    Ok(())
}

// === Strategies ===

/// A key: mostly one the config knows somewhere, sometimes a near miss or anything.
fn key() -> impl Strategy<Value = String> {
    let known: Vec<&'static str> = TOP_KEYS
        .iter()
        .chain(SERVER_KEYS)
        .chain(RECONNECT_KEYS)
        .chain(HEALTH_KEYS)
        .chain(&["mode", "separator"])
        .copied()
        .collect();
    prop_oneof![
        4 => prop::sample::select(known).prop_map(str::to_owned),
        1 => "[a-zA-Z_ .-]{0,12}",
        1 => any::<String>(),
    ]
}

/// A finite JSON number of any size or sign.
fn number() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<u64>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        (0u64..=3_000_000_000).prop_map(Value::from),
        (-10i64..10).prop_map(Value::from),
        any::<f64>().prop_filter_map("finite", |f| serde_json::Number::from_f64(f)
            .map(Value::Number)),
        (-10.0f64..10.0).prop_map(|f| json!(f)),
        Just(json!(0.5)),
        Just(json!(1.0)),
        Just(json!(-0.0)),
        Just(json!(1e300)),
        Just(json!(MAX_MS)),
        Just(json!(MAX_MS + 1)),
    ]
}

/// Strings that look like numbers but are not, and other near misses.
fn wrong_scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        prop::sample::select(vec![
            "NaN",
            "Infinity",
            "-Infinity",
            "-1",
            "1e999",
            "0x10",
            "500",
            "",
            "true",
            "null",
            "stdio",
            "http",
            "sse",
            "${HOME}",
            "${NOPE}",
            "${",
            "${1X}",
        ])
        .prop_map(|s| Value::String(s.to_owned())),
        any::<bool>().prop_map(Value::Bool),
        Just(Value::Null),
        Just(json!([])),
        Just(json!({})),
    ]
}

/// Any JSON value, keys biased to the config's own.
fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        number(),
        wrong_scalar(),
        any::<String>().prop_map(Value::String),
        "[a-z:/.${}0-9 -]{0,24}".prop_map(Value::String),
    ];
    leaf.prop_recursive(5, 96, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((key(), inner), 0..8)
                .prop_map(|entries| Value::Object(entries.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// A value for a policy field: right or wrong.
fn policy_value() -> impl Strategy<Value = Value> {
    prop_oneof![3 => number(), 1 => wrong_scalar()]
}

/// An object of some of `keys` (and sometimes an unknown key), each with a policy value.
fn policy_block(keys: &'static [&'static str]) -> impl Strategy<Value = Value> {
    let entry = (
        prop_oneof![
            6 => prop::sample::select(keys).prop_map(str::to_owned),
            1 => "[a-z_]{1,10}",
        ],
        policy_value(),
    );
    prop_oneof![
        8 => prop::collection::vec(entry, 0..7)
            .prop_map(|entries| Value::Object(entries.into_iter().collect())),
        1 => wrong_scalar(),
    ]
}

/// A value for a server key, right-ish or wrong.
fn server_value(key: &str) -> BoxedStrategy<Value> {
    match key {
        "reconnect" => policy_block(RECONNECT_KEYS).boxed(),
        "health" => policy_block(HEALTH_KEYS).boxed(),
        "command" | "cwd" => prop_oneof![
            "[a-z/ ]{0,10}".prop_map(Value::String),
            wrong_scalar(),
            number()
        ]
        .boxed(),
        "url" => prop_oneof![
            "(https?|ftp|ws)://[a-z0-9.:]{0,12}(/[a-z]{0,5})?".prop_map(Value::String),
            "[a-z:/ ]{0,12}".prop_map(Value::String),
            wrong_scalar(),
        ]
        .boxed(),
        "args" | "retryTools" => prop_oneof![
            prop::collection::vec(
                prop_oneof![
                    "[a-z${}-]{0,8}".prop_map(Value::String),
                    number(),
                    wrong_scalar()
                ],
                0..4
            )
            .prop_map(Value::Array),
            wrong_scalar(),
        ]
        .boxed(),
        "env" | "headers" => prop_oneof![
            prop::collection::vec(
                (
                    "[A-Za-z_=: -]{0,8}",
                    prop_oneof![
                        "[a-z\r\n\0${}]{0,8}".prop_map(Value::String),
                        wrong_scalar(),
                        number()
                    ]
                ),
                0..4
            )
            .prop_map(|entries| Value::Object(entries.into_iter().collect())),
            wrong_scalar(),
        ]
        .boxed(),
        _ => policy_value().boxed(),
    }
}

/// One server object: a handful of (mostly known) keys with right-ish or wrong values.
fn wrong_server() -> impl Strategy<Value = Value> {
    let entry = prop_oneof![
        8 => prop::sample::select(SERVER_KEYS).prop_map(str::to_owned),
        1 => "[a-zA-Z_]{1,12}",
    ]
    .prop_flat_map(|k| {
        let value = server_value(&k);
        (Just(k), value)
    });
    prop_oneof![
        10 => prop::collection::vec(entry, 0..8)
            .prop_map(|entries| Value::Object(entries.into_iter().collect())),
        1 => wrong_scalar(),
    ]
}

/// A structured config with wrong parts: random servers (names valid or not), and sometimes a
/// `defaults` and `naming` block.
fn wrong_config() -> impl Strategy<Value = Value> {
    let name = prop_oneof![
        4 => "[A-Za-z0-9_-]{1,10}",
        1 => any::<String>(),
        1 => "[a-z]{60,70}",
    ];
    let defaults = prop_oneof![
        Just(None),
        prop::collection::vec(
            prop::sample::select(
                &[
                    "reconnect",
                    "health",
                    "toolCallTimeoutMs",
                    "connectTimeoutMs",
                    "bogus"
                ][..]
            )
            .prop_flat_map(|k| (Just(k.to_owned()), server_value(k))),
            0..4
        )
        .prop_map(|entries| Some(Value::Object(entries.into_iter().collect()))),
    ];
    let naming = prop_oneof![
        Just(None),
        (
            prop_oneof![
                Just(json!("prefixed")),
                Just(json!("original")),
                wrong_scalar()
            ],
            prop_oneof![
                "[a-z_.-]{1,3}".prop_map(Value::String),
                "[ /:]{0,3}".prop_map(Value::String),
                wrong_scalar()
            ]
        )
            .prop_map(|(mode, sep)| Some(json!({ "mode": mode, "separator": sep }))),
    ];
    (
        prop::collection::vec((name, wrong_server()), 0..5),
        defaults,
        naming,
    )
        .prop_map(|(servers, defaults, naming)| {
            let mut top = Map::new();
            top.insert(
                "mcpServers".to_owned(),
                Value::Object(servers.into_iter().collect()),
            );
            if let Some(d) = defaults {
                top.insert("defaults".to_owned(), d);
            }
            if let Some(n) = naming {
                top.insert("naming".to_owned(), n);
            }
            Value::Object(top)
        })
}

/// Raw number tokens that JSON writers differ on, spliced into a reconnect block as text.
fn raw_number_token() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "-0",
            "0",
            "1",
            "-1",
            "0.5",
            "1.0",
            "1e3",
            "1E3",
            "1e-3",
            "1e308",
            "1e309",
            "1e400",
            "-1e400",
            "18446744073709551615",
            "18446744073709551616",
            "-9223372036854775809",
            "2147483647",
            "2147483648",
            "4294967296",
            "NaN",
            "Infinity",
            "-Infinity",
            "+1",
            "01",
            ".5",
            "1.",
            "1e",
            "\"NaN\"",
            "\"1e999\"",
            "null",
        ])
        .prop_map(str::to_owned),
        any::<f64>().prop_map(|f| format!("{f}")),
        any::<i128>().prop_map(|i| i.to_string()),
    ]
}

// === parse_config never panics, and reports well-formed problems ===

proptest! {
    #![proptest_config(cases(CASES_CONFIG))]

    #[test]
    fn parse_config_survives_arbitrary_strings(text in prop_oneof![
        any::<String>(),
        "[{}\\[\\]\":,0-9a-zA-Z .\\\\-]{0,64}",
        r#"\{"mcpServers":[{}\[\]":,0-9a-z .-]{0,48}"#,
    ]) {
        let result = parse_config(&text, &env);
        check_outcome(&text, &result)?;
    }

    #[test]
    fn parse_config_survives_arbitrary_json(value in prop_oneof![
        arb_json(),
        arb_json().prop_map(|v| json!({ "mcpServers": v })),
        (key(), arb_json()).prop_map(|(k, v)| json!({ "mcpServers": { "s": { k: v } } })),
        arb_json().prop_map(|v| json!({ "mcpServers": {}, "defaults": v })),
        arb_json().prop_map(|v| json!({ "mcpServers": {}, "naming": v })),
    ]) {
        let text = value.to_string();
        let result = parse_config(&text, &env);
        check_outcome(&text, &result)?;
    }

    #[test]
    fn parse_config_survives_structured_but_wrong_configs(value in wrong_config()) {
        let text = value.to_string();
        let result = parse_config(&text, &env);
        check_outcome(&text, &result)?;
    }

    #[test]
    fn parse_config_survives_raw_number_tokens_in_a_reconnect_block(
        fields in prop::collection::vec(
            (prop::sample::select(RECONNECT_KEYS), raw_number_token()),
            1..5,
        ),
        where_ in 0usize..3,
    ) {
        let block = fields
            .iter()
            .map(|(k, v)| format!("\"{k}\": {v}"))
            .collect::<Vec<_>>()
            .join(", ");
        let text = match where_ {
            0 => format!(r#"{{"mcpServers": {{"s": {{"command": "x", "reconnect": {{{block}}}}}}}}}"#),
            1 => format!(r#"{{"mcpServers": {{"s": {{"url": "http://h/mcp"}}}}, "defaults": {{"reconnect": {{{block}}}}}}}"#),
            _ => format!(r#"{{"mcpServers": {{}}, "defaults": {{"reconnect": {{{block}}}}}}}"#),
        };
        let result = parse_config(&text, &env);
        check_outcome(&text, &result)?;
        // A block that is valid JSON but wrong is reported under its reconnect path.
        if let Err(errors) = &result
            && serde_json::from_str::<Value>(&text).is_ok()
        {
            for p in &errors.problems {
                prop_assert!(
                    p.path.contains(".reconnect"),
                    "a problem outside the reconnect block: {} {}", p.path, p.message
                );
            }
        }
    }
}

// === A valid generated config round-trips ===

#[derive(Clone, Debug)]
enum GenTransport {
    Stdio { command: String, args: Vec<String> },
    Http { url: String },
}

#[derive(Clone, Debug)]
struct GenServer {
    name: String,
    transport: GenTransport,
    /// (initialDelayMs, maxDelayMs, maxAttempts, jitter), when the server sets them.
    reconnect: Option<(u64, u64, u32, f64)>,
}

fn valid_server() -> impl Strategy<Value = GenServer> {
    let transport = prop_oneof![
        (
            "[a-zA-Z][a-zA-Z0-9/._ -]{0,20}",
            prop::collection::vec("[a-zA-Z0-9 ._=/-]{0,10}", 0..4)
        )
            .prop_map(|(command, args)| GenTransport::Stdio { command, args }),
        "https?://[a-z][a-z0-9.-]{0,15}(:[0-9]{1,5})?(/[a-z0-9/]{0,10})?"
            .prop_map(|url| GenTransport::Http { url }),
    ];
    let reconnect = prop::option::of((1u64..=MAX_MS, 1u32..=1000, 0.0f64..=1.0).prop_flat_map(
        |(initial, attempts, j)| (Just(initial), initial..=MAX_MS, Just(attempts), Just(j)),
    ));
    ("[A-Za-z0-9_-]{1,64}", transport, reconnect).prop_map(|(name, transport, reconnect)| {
        GenServer {
            name,
            transport,
            reconnect,
        }
    })
}

fn server_json(server: &GenServer) -> Value {
    let mut object = match &server.transport {
        GenTransport::Stdio { command, args } => json!({ "command": command, "args": args }),
        GenTransport::Http { url } => json!({ "type": "http", "url": url }),
    };
    if let (Some((initial, max, attempts, jitter)), Value::Object(map)) =
        (server.reconnect, &mut object)
    {
        map.insert(
            "reconnect".to_owned(),
            json!({
                "initialDelayMs": initial,
                "maxDelayMs": max,
                "maxAttempts": attempts,
                "jitter": jitter,
            }),
        );
    }
    object
}

proptest! {
    #![proptest_config(cases(CASES_CONFIG))]

    #[test]
    fn a_valid_generated_config_round_trips(
        servers in prop::collection::vec(valid_server(), 0..8),
    ) {
        // Unique names, first one kept.
        let mut seen = HashSet::new();
        let servers: Vec<GenServer> =
            servers.into_iter().filter(|s| seen.insert(s.name.clone())).collect();
        let map: Map<String, Value> =
            servers.iter().map(|s| (s.name.clone(), server_json(s))).collect();
        // Serialize in our order (serde_json's map may sort), so config order is known.
        let entries = servers
            .iter()
            .map(|s| format!("{}: {}", Value::String(s.name.clone()), server_json(s)))
            .collect::<Vec<_>>()
            .join(", ");
        let text = format!("{{\"mcpServers\": {{{entries}}}}}");
        prop_assert_eq!(map.len(), servers.len());
        let config = match parse_config(&text, &env) {
            Ok(config) => config,
            Err(e) => return Err(TestCaseError::fail(format!("valid config rejected:\n{e}\n{text}"))),
        };
        prop_assert_eq!(config.servers.len(), servers.len());
        for (got, want) in config.servers.iter().zip(&servers) {
            prop_assert_eq!(&got.name, &want.name);
            match (&got.transport, &want.transport) {
                (TransportConfig::Stdio { command, args, env, cwd },
                 GenTransport::Stdio { command: c, args: a }) => {
                    prop_assert_eq!(command, c);
                    prop_assert_eq!(args, a);
                    prop_assert!(env.is_empty() && cwd.is_none());
                }
                (TransportConfig::Http { url, headers }, GenTransport::Http { url: u }) => {
                    prop_assert_eq!(url, u);
                    prop_assert!(headers.is_empty());
                }
                (got, want) => prop_assert!(false, "transport {:?} for {:?}", got, want),
            }
            let expected = match want.reconnect {
                Some((initial, max, attempts, jitter)) => ReconnectPolicy {
                    enabled: true,
                    initial_delay: Duration::from_millis(initial),
                    max_delay: Duration::from_millis(max),
                    max_attempts: attempts,
                    jitter,
                },
                None => ReconnectPolicy::default(),
            };
            // serde_json parses floats to within an ulp (no `float_roundtrip`), so jitter is
            // compared with a tolerance; everything else exactly.
            prop_assert!((got.reconnect.jitter - expected.jitter).abs() <= 1e-12);
            prop_assert_eq!(
                ReconnectPolicy { jitter: 0.0, ..got.reconnect },
                ReconnectPolicy { jitter: 0.0, ..expected }
            );
            check_valid_server(got)?;
        }
    }
}

// === Secrets never leak ===

/// A secret marker that can never be mistaken for anything else in output.
fn marker(i: usize, salt: &str) -> String {
    format!("SeCrEt-{i}-{salt}-MaRkEr")
}

/// How a secret value is written: plainly, around noise that may make it invalid, or through a
/// `${VAR}` reference that the lookup resolves to the secret.
#[derive(Clone, Debug)]
enum Written {
    Plain { before: String, after: String },
    Reference { var: String, before: String },
}

fn written() -> impl Strategy<Value = Written> {
    // Noise that may hold line breaks, NUL, `${`, unset references: each a problem at that path.
    let noisy = "[a-z \r\n\0:${}]{0,6}|\\$\\{UNSET_[A-Z]{1,3}\\}|\\$\\{bad name\\}";
    let clean = "[a-zA-Z :/=]{0,6}";
    prop_oneof![
        // Mostly valid, so the parsed Config (and its Debug) is checked as often as the errors.
        6 => (clean, clean).prop_map(|(before, after)| Written::Plain { before, after }),
        2 => (noisy, noisy).prop_map(|(before, after)| Written::Plain { before, after }),
        3 => ("[A-Z][A-Z0-9_]{0,8}", "[a-z ]{0,6}")
            .prop_map(|(var, before)| Written::Reference { var, before }),
    ]
}

/// One server of a secret case: stdio (true) or HTTP, its name, and its (key, how-written) pairs.
type SecretServer = (bool, String, Vec<(String, Written)>);

#[derive(Clone, Debug)]
struct SecretCase {
    servers: Vec<SecretServer>,
    /// Other mistakes, to provoke problems next to the secrets.
    wrong_url: bool,
    headers_on_stdio: bool,
    salt: String,
}

fn secret_case() -> impl Strategy<Value = SecretCase> {
    let entry = (
        prop_oneof![12 => "[A-Za-z][A-Za-z0-9_-]{0,8}", 1 => "[A-Za-z =:]{0,6}"],
        written(),
    );
    let server = (
        any::<bool>(),
        prop_oneof![12 => "[a-z]{1,8}", 1 => "[a-z .]{1,8}"],
        prop::collection::vec(entry, 0..4),
    );
    (
        prop::collection::vec(server, 1..4),
        prop::bool::weighted(0.1),
        prop::bool::weighted(0.1),
        "[a-z0-9]{8}",
    )
        .prop_map(|(servers, wrong_url, headers_on_stdio, salt)| SecretCase {
            servers,
            wrong_url,
            headers_on_stdio,
            salt,
        })
}

proptest! {
    #![proptest_config(cases(CASES_SECRETS))]

    #[test]
    fn secrets_never_leak_into_debug_describe_or_problems(case in secret_case()) {
        let mut markers = Vec::new();
        let mut vars: Vec<(String, String)> = Vec::new();
        let mut servers = Map::new();
        for (s, (stdio, name, entries)) in case.servers.iter().enumerate() {
            let mut map = Map::new();
            for (e, (key, how)) in entries.iter().enumerate() {
                let secret = marker(s * 100 + e, &case.salt);
                let value = match how {
                    Written::Plain { before, after } => format!("{before}{secret}{after}"),
                    Written::Reference { var, before } => {
                        let var = format!("{var}_{s}_{e}");
                        vars.push((var.clone(), secret.clone()));
                        format!("{before}${{{var}}}")
                    }
                };
                map.insert(key.clone(), Value::String(value));
                markers.push(secret);
            }
            let mut object = if *stdio {
                json!({ "command": "npx", "args": ["-y", "server"], "env": map })
            } else {
                let url = if case.wrong_url { "ftp://h/mcp" } else { "https://u:p@h/mcp?k=v" };
                json!({ "url": url, "headers": map })
            };
            if case.headers_on_stdio && *stdio
                && let Value::Object(o) = &mut object
            {
                o.insert("headers".to_owned(), json!({ "Authorization": "Bearer x" }));
            }
            servers.insert(name.clone(), object);
        }
        let text = json!({ "mcpServers": servers }).to_string();
        let lookup = |name: &str| {
            vars.iter().find(|(v, _)| v == name).map(|(_, s)| s.clone()).or_else(|| env(name))
        };
        let result = parse_config(&text, &lookup);
        check_outcome(&text, &result)?;
        let mut shown = Vec::new();
        match &result {
            Ok(config) => {
                shown.push(format!("{config:?}"));
                shown.push(format!("{config:#?}"));
                for server in &config.servers {
                    shown.push(server.describe());
                    shown.push(format!("{server:?}"));
                }
            }
            Err(errors) => {
                shown.push(format!("{errors:?}"));
                shown.push(errors.to_string());
                for p in &errors.problems {
                    shown.push(p.to_string());
                }
            }
        }
        for out in &shown {
            for m in &markers {
                prop_assert!(!out.contains(m.as_str()), "secret {} leaked in: {}", m, out);
            }
            // No fragment of a marker either (a truncated or escaped secret still leaks).
            prop_assert!(!out.contains("SeCrEt-"), "a secret fragment leaked in: {}", out);
        }
    }
}

// === classify is total and stable; the replay rule holds ===

fn text_with_phrase() -> impl Strategy<Value = String> {
    (
        "[a-zA-Z :]{0,10}",
        prop::option::of((
            prop::sample::select(&STALE_SESSION_PHRASES[..]),
            any::<u64>(),
        )),
        ".{0,10}",
    )
        .prop_map(|(before, phrase, after)| {
            let phrase = phrase
                .map(|(p, bits)| {
                    // Random upper/lower case per character.
                    p.chars()
                        .enumerate()
                        .map(|(i, c)| {
                            if bits >> (i % 64) & 1 == 1 {
                                c.to_ascii_uppercase()
                            } else {
                                c
                            }
                        })
                        .collect::<String>()
                })
                .unwrap_or_default();
            format!("{before}{phrase}{after}")
        })
}

fn failure() -> impl Strategy<Value = Failure> {
    prop_oneof![
        Just(Failure::NoLiveGeneration),
        Just(Failure::ConnectRefused),
        Just(Failure::SessionExpired),
        (
            prop_oneof![Just(400u16), Just(404), Just(500), any::<u16>()],
            text_with_phrase(),
            any::<bool>(),
        )
            .prop_map(|(status, body, with_session)| Failure::HttpStatus {
                status,
                body,
                with_session
            }),
        (any::<i32>(), text_with_phrase()).prop_map(|(code, message)| Failure::ServerError {
            code,
            message,
            data: None,
        }),
        Just(Failure::TransportClosedBeforeSend),
        Just(Failure::ConnectionLostAfterSend),
        (text_with_phrase(), any::<bool>()).prop_map(|(message, connection_closed)| {
            Failure::TransportError {
                message,
                connection_closed,
            }
        }),
        Just(Failure::DeadlinePassed),
        Just(Failure::CancelledByCaller),
        Just(Failure::UnexpectedResponse),
        "[a-z ]{0,20}".prop_map(|message| Failure::Unauthorized { message }),
    ]
}

fn safety() -> impl Strategy<Value = ToolSafety> {
    (any::<bool>(), any::<bool>(), any::<bool>()).prop_map(|(read_only, idempotent, listed)| {
        ToolSafety {
            read_only,
            idempotent,
            listed_in_retry_tools: listed,
        }
    })
}

proptest! {
    #![proptest_config(cases(CASES_CLASSIFY))]

    #[test]
    fn classify_is_total_stable_and_never_replays_an_unsafe_unknown_outcome(
        f in failure(),
        s in safety(),
        alive in any::<bool>(),
    ) {
        let verdict = classify(&f);
        prop_assert_eq!(verdict, classify(&f), "stable on the same input");
        prop_assert_eq!(verdict, classify(&f.clone()), "stable on an equal input");
        // The verdicts the contract fixes for each kind of failure.
        match &f {
            Failure::NoLiveGeneration
            | Failure::ConnectRefused
            | Failure::SessionExpired
            | Failure::TransportClosedBeforeSend => prop_assert_eq!(verdict, Verdict::NotDelivered),
            Failure::HttpStatus { status: 404, .. } => prop_assert_eq!(verdict, Verdict::NotDelivered),
            Failure::HttpStatus { body, with_session: true, .. } if mentions_stale_session(body) => {
                prop_assert_eq!(verdict, Verdict::NotDelivered)
            }
            Failure::HttpStatus { .. } => prop_assert_eq!(verdict, Verdict::Unclear),
            Failure::ServerError { .. } => prop_assert_eq!(verdict, Verdict::ServerAnswered),
            Failure::ConnectionLostAfterSend => prop_assert_eq!(verdict, Verdict::OutcomeUnknown),
            Failure::TransportError { connection_closed, .. } => prop_assert_eq!(
                verdict,
                if *connection_closed { Verdict::OutcomeUnknown } else { Verdict::Unclear }
            ),
            Failure::DeadlinePassed => prop_assert_eq!(verdict, Verdict::DeadlinePassed),
            Failure::CancelledByCaller => prop_assert_eq!(verdict, Verdict::Aborted),
            Failure::UnexpectedResponse => prop_assert_eq!(verdict, Verdict::Malformed),
            Failure::Unauthorized { .. } => prop_assert_eq!(verdict, Verdict::ServerAnswered),
        }

        let step = recovery(verdict, s);
        prop_assert_eq!(step, recovery(verdict, s), "recovery is stable");
        if verdict == Verdict::NotDelivered {
            prop_assert_eq!(step, Recovery::ReconnectAndSend, "not delivered always reconnects");
        }
        if verdict == Verdict::OutcomeUnknown && !s.replay_safe() {
            prop_assert_eq!(step, Recovery::ReconnectAndFailUnknown, "an unsafe tool is never sent again");
        }
        if step == Recovery::ReconnectAndSend {
            prop_assert!(verdict == Verdict::NotDelivered || s.replay_safe());
        }
        // After a probe: an unsafe tool is never sent again, alive or not.
        let next = after_probe(alive, s);
        if !s.replay_safe() {
            prop_assert!(
                !matches!(next, AfterProbe::SendAgain | AfterProbe::Reconnect(Recovery::ReconnectAndSend)),
                "{:?} for an unsafe tool", next
            );
        }
        if !alive {
            prop_assert!(matches!(next, AfterProbe::Reconnect(_)), "a dead server is reconnected");
        }
    }
}

// === naming ===

const SEPARATORS: &[&str] = &["__", "_", ".", "-", "--", "::", ""];

fn is_public_name(name: &str) -> bool {
    name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// Names from a tiny alphabet, so collisions (also after sanitizing) are common, and long ones,
/// so hash suffixes are common.
fn small_name() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[ab_.-]{0,3}",
        1 => "[ab ]{0,3}",
        1 => "[ab]{60,70}",
        1 => any::<String>(),
    ]
}

proptest! {
    #![proptest_config(cases(CASES_NAMING))]

    #[test]
    fn prefixed_names_are_short_valid_and_deterministic(
        server in prop_oneof![any::<String>(), "[a-zA-Z0-9_-]{0,80}"],
        tool in prop_oneof![any::<String>(), "[a-zA-Z0-9_.-]{0,80}", ".{60,200}"],
        sep in prop_oneof![prop::sample::select(SEPARATORS).prop_map(str::to_owned), any::<String>()],
    ) {
        let name = prefixed_name(&server, &tool, &sep);
        prop_assert!(is_public_name(&name), "{:?}", name);
        prop_assert!(!name.is_empty() || (server.is_empty() && tool.is_empty() && sep.is_empty()));
        prop_assert_eq!(&name, &prefixed_name(&server, &tool, &sep), "deterministic");
        let plain = format!("{server}{sep}{tool}");
        if is_public_name(&plain) {
            prop_assert_eq!(name, plain, "a name that fits is kept as is");
        }
    }

    #[test]
    fn assign_yields_unique_names_in_both_modes(
        servers in prop::collection::vec(
            (small_name(), prop::collection::vec(small_name(), 0..6)),
            0..6,
        ),
        original in any::<bool>(),
        sep in prop::sample::select(&["__", "_", ".", "-"][..]),
    ) {
        let config = NamingConfig {
            mode: if original { NamingMode::Original } else { NamingMode::Prefixed },
            separator: sep.to_owned(),
        };
        let input: Vec<(&str, Vec<&str>)> = servers
            .iter()
            .map(|(s, tools)| (s.as_str(), tools.iter().map(String::as_str).collect()))
            .collect();
        let (names, warnings) = assign(Tool, &config, &input);
        prop_assert_eq!(&(names.clone(), warnings.clone()), &assign(Tool, &config, &input), "deterministic");
        prop_assert_eq!(names.len(), input.len());
        let mut unique = HashSet::new();
        let mut renamed = 0;
        for ((server, tools), published) in input.iter().zip(&names) {
            prop_assert_eq!(published.len(), tools.len());
            for (tool, name) in tools.iter().zip(published) {
                prop_assert!(unique.insert(name.clone()), "{:?} published twice", name);
                let natural = match config.mode {
                    NamingMode::Prefixed => prefixed_name(server, tool, sep),
                    NamingMode::Original => (*tool).to_owned(),
                };
                if *name != natural {
                    renamed += 1;
                    prop_assert!(is_public_name(name), "fallback {:?} is not a valid name", name);
                }
                if config.mode == NamingMode::Prefixed {
                    prop_assert!(is_public_name(name), "{:?}", name);
                }
            }
        }
        prop_assert_eq!(warnings.len(), renamed, "one warning per renamed tool");
    }
}

// === Budget ===

fn policy() -> impl Strategy<Value = ReconnectPolicy> {
    (
        prop_oneof![1u64..=100, 1u64..=MAX_MS],
        1u32..=64,
        prop_oneof![Just(0.0f64), Just(1.0), 0.0f64..=1.0],
        any::<bool>(),
    )
        .prop_flat_map(|(initial, attempts, jitter, enabled)| {
            (
                prop_oneof![
                    initial..=initial.saturating_mul(100).min(MAX_MS),
                    initial..=MAX_MS
                ],
                Just((initial, attempts, jitter, enabled)),
            )
        })
        .prop_map(
            |(max, (initial, attempts, jitter, enabled))| ReconnectPolicy {
                enabled,
                initial_delay: Duration::from_millis(initial),
                max_delay: Duration::from_millis(max),
                max_attempts: attempts,
                jitter,
            },
        )
}

/// A draw for the jitter: usually in [0, 1), sometimes out of range or not a number at all.
fn draw() -> impl Strategy<Value = f64> {
    prop_oneof![8 => 0.0f64..1.0, 1 => any::<f64>(), 1 => Just(f64::NAN)]
}

proptest! {
    #![proptest_config(cases(CASES_BUDGET))]

    #[test]
    fn exactly_max_attempts_retries_follow_a_loss_when_uptime_stays_short(
        policy in policy(),
        // Per later failure: None (a failed attempt), or Some(fraction of the window) for a
        // connect that briefly succeeded and was lost again (a crash loop).
        later in prop::collection::vec(prop::option::of(0.0f64..1.0), 70),
        first_uptime in 0.0f64..1.0,
        draws in prop::collection::vec(draw(), 70),
    ) {
        let window = policy.stability_window();
        prop_assert_eq!(window, policy.max_delay);
        let short = |fraction: f64| window.mul_f64(fraction).min(window.saturating_sub(Duration::from_nanos(1)));
        let mut budget = Budget::new(policy);
        let mut retries = 0u32;
        let mut decision = budget.on_failure(Some(short(first_uptime)), draws[0]);
        let mut i = 1;
        loop {
            match decision {
                Decision::Retry { attempt, max_attempts, delay } => {
                    retries += 1;
                    prop_assert_eq!(attempt, retries, "attempts count up from 1");
                    prop_assert_eq!(max_attempts, policy.max_attempts);
                    prop_assert!(delay <= policy.max_delay, "delay {:?} > max {:?}", delay, policy.max_delay);
                    prop_assert!(delay <= policy.base_delay(attempt));
                    if policy.jitter == 0.0 {
                        prop_assert_eq!(delay, policy.base_delay(attempt));
                    }
                    prop_assert!(retries <= policy.max_attempts, "more retries than the budget");
                }
                Decision::GiveUp { failures } => {
                    prop_assert_eq!(failures, policy.max_attempts + 1);
                    break;
                }
            }
            let uptime = later[i].map(short);
            decision = budget.on_failure(uptime, draws[i]);
            i += 1;
        }
        prop_assert_eq!(retries, policy.max_attempts, "exactly maxAttempts retries");
        // Spent is spent: short-lived connects and failures keep it given up.
        for (uptime, u) in later.iter().zip(&draws).skip(i).take(3) {
            let again = budget.on_failure(uptime.map(short), *u);
            prop_assert!(matches!(again, Decision::GiveUp { .. }), "{:?}", again);
        }
    }
}

proptest! {
    #![proptest_config(cases(CASES_BUDGET_RESET))]

    #[test]
    fn a_generation_up_for_the_stability_window_starts_a_fresh_count(
        policy in policy(),
        failures_before in 0u32..80,
        extra in 0u64..1_000_000,
        u in draw(),
    ) {
        let mut budget = Budget::new(policy);
        for _ in 0..failures_before {
            budget.on_failure(None, 0.5);
        }
        let uptime = policy.stability_window() + Duration::from_millis(extra);
        match budget.on_failure(Some(uptime), u) {
            Decision::Retry { attempt, delay, .. } => {
                prop_assert_eq!(attempt, 1);
                // A stable server restarts at once (SPEC §2).
                prop_assert_eq!(delay, Duration::ZERO);
            }
            other => prop_assert!(false, "a stable generation's loss gave {:?}", other),
        }
    }
}
