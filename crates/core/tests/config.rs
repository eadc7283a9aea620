//! The config contract (SPEC §2 validation, §9 config keys) through `parse_config`: what parses, what
//! it becomes, and every problem reported with its path. Never touches a file or the real
//! environment: the lookup is a fixed table.

use std::path::PathBuf;
use std::time::Duration;

use mcp_supervisor_core::config::{
    Config, ConfigErrors, Secret, ServerConfig, TransportConfig, parse_config,
};
use mcp_supervisor_core::naming::{NamingConfig, NamingMode};
use mcp_supervisor_core::policy::{HealthPolicy, ReconnectPolicy};

const TOKEN: &str = "tok-SECRET-123";

fn env(name: &str) -> Option<String> {
    match name {
        "HOME" => Some("/home/me".to_owned()),
        "API_TOKEN_SET" | "TOKEN" => Some(TOKEN.to_owned()),
        "EMPTY" => Some(String::new()),
        "PORT" => Some("8080".to_owned()),
        _ => None,
    }
}

fn parse(text: &str) -> Result<Config, ConfigErrors> {
    parse_config(text, &env)
}

fn ok(text: &str) -> Config {
    match parse(text) {
        Ok(config) => config,
        Err(e) => panic!("expected a valid config, got:\n{e}"),
    }
}

fn problems(text: &str) -> Vec<String> {
    match parse(text) {
        Ok(config) => panic!("expected problems, got {config:?}"),
        Err(e) => e.problems.iter().map(ToString::to_string).collect(),
    }
}

/// A config of one server called `s`.
fn one(server: &str) -> String {
    format!(r#"{{ "mcpServers": {{ "s": {server} }} }}"#)
}

fn server(server: &str) -> ServerConfig {
    ok(&one(server)).servers.remove(0)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Each case: the JSON of server `s`, and the problems it must yield, exactly.
fn assert_server_cases(cases: &[(&str, &[&str])]) {
    for (json, expected) in cases {
        assert_eq!(problems(&one(json)), *expected, "server: {json}");
    }
}

// === What parses ===

#[test]
fn a_claude_desktop_config_copied_verbatim_parses() {
    let text = r#"{
  "mcpServers": {
    "filesystem": {
      "command": "npx",
      "args": [
        "-y",
        "@modelcontextprotocol/server-filesystem",
        "/Users/username/Desktop",
        "/Users/username/Downloads"
      ]
    },
    "github": {
      "command": "docker",
      "args": ["run", "-i", "--rm", "-e", "GITHUB_PERSONAL_ACCESS_TOKEN", "ghcr.io/github/github-mcp-server"],
      "env": {
        "GITHUB_PERSONAL_ACCESS_TOKEN": "<YOUR_TOKEN>"
      }
    }
  }
}"#;
    let config = ok(text);
    assert_eq!(config.naming, NamingConfig::default());
    assert_eq!(config.servers.len(), 2);
    let fs = &config.servers[0];
    assert_eq!(fs.name, "filesystem");
    assert_eq!(
        fs.transport,
        TransportConfig::Stdio {
            command: "npx".into(),
            args: vec![
                "-y".into(),
                "@modelcontextprotocol/server-filesystem".into(),
                "/Users/username/Desktop".into(),
                "/Users/username/Downloads".into()
            ],
            env: vec![],
            cwd: None,
        }
    );
    let TransportConfig::Stdio { env, .. } = &config.servers[1].transport else {
        panic!("github is stdio");
    };
    assert_eq!(
        env,
        &vec![(
            "GITHUB_PERSONAL_ACCESS_TOKEN".to_owned(),
            Secret::new("<YOUR_TOKEN>")
        )]
    );
}

#[test]
fn a_claude_code_mcp_json_with_types_and_env_references_parses() {
    let text = r#"{
  "mcpServers": {
    "api-server": {
      "type": "http",
      "url": "${API_BASE_URL:-https://api.example.com}/mcp",
      "headers": { "Authorization": "Bearer ${TOKEN}" }
    },
    "local": {
      "type": "stdio",
      "command": "${HOME}/bin/server",
      "args": ["--port", "${PORT}"],
      "env": { "CACHE_DIR": "${HOME}/.cache", "LEVEL": "${LOG_LEVEL:-info}" }
    }
  }
}"#;
    let config = ok(text);
    assert_eq!(
        config.servers[0].transport,
        TransportConfig::Http {
            url: "https://api.example.com/mcp".into(),
            headers: vec![(
                "Authorization".into(),
                Secret::new(format!("Bearer {TOKEN}"))
            )],
        }
    );
    assert_eq!(
        config.servers[1].transport,
        TransportConfig::Stdio {
            command: "/home/me/bin/server".into(),
            args: vec!["--port".into(), "8080".into()],
            env: vec![
                ("CACHE_DIR".into(), Secret::new("/home/me/.cache")),
                ("LEVEL".into(), Secret::new("info")),
            ],
            cwd: None,
        }
    );
}

#[test]
fn every_accepted_type_spelling_parses() {
    for kind in ["http", "streamable-http", "streamableHttp"] {
        let s = server(&format!(
            r#"{{ "type": "{kind}", "url": "http://127.0.0.1:3000/mcp" }}"#
        ));
        assert!(
            matches!(s.transport, TransportConfig::Http { .. }),
            "{kind}"
        );
    }
    let s = server(r#"{ "type": "stdio", "command": "x" }"#);
    assert!(matches!(s.transport, TransportConfig::Stdio { .. }));
}

#[test]
fn an_sse_server_takes_its_url_and_headers_with_env_references() {
    let text = r#"{
  "mcpServers": {
    "legacy": {
      "type": "sse",
      "url": "${API_BASE_URL:-https://api.example.com}/sse",
      "headers": { "Authorization": "Bearer ${TOKEN}" }
    }
  }
}"#;
    let config = ok(text);
    assert_eq!(
        config.servers[0].transport,
        TransportConfig::Sse {
            url: "https://api.example.com/sse".into(),
            headers: vec![(
                "Authorization".into(),
                Secret::new(format!("Bearer {TOKEN}"))
            )],
        }
    );
    // Without "type", a url is streamable HTTP: SSE is only ever asked for by name.
    let s = server(r#"{ "url": "http://127.0.0.1:3000/sse" }"#);
    assert!(matches!(s.transport, TransportConfig::Http { .. }));
    assert_eq!(
        server(r#"{ "type": "sse", "url": "http://u:p@h/sse?k=v" }"#).describe(),
        ServerConfig::new(
            "s",
            TransportConfig::Http {
                url: "http://u:p@h/sse?k=v".into(),
                headers: Vec::new()
            }
        )
        .describe(),
        "an SSE URL is redacted like any other"
    );
}

#[test]
fn a_server_without_policy_keys_gets_the_built_in_defaults() {
    let s = server(r#"{ "command": "x" }"#);
    assert_eq!(s, ServerConfig::new("s", s.transport.clone()));
    assert_eq!(s.reconnect, ReconnectPolicy::default());
    assert_eq!(s.health, HealthPolicy::default());
    assert_eq!(s.tool_call_timeout, ms(60_000));
    assert_eq!(s.connect_timeout, ms(30_000));
    assert_eq!(s.retry_tools, Vec::<String>::new());
    assert!(s.enabled);
}

#[test]
fn every_per_server_key_is_read() {
    let s = server(
        r#"{
        "command": "node", "args": ["server.js"], "env": {"K": "v"}, "cwd": "/srv",
        "reconnect": { "enabled": false, "initialDelayMs": 100, "maxDelayMs": 2000, "maxAttempts": 4, "jitter": 0.25 },
        "health": { "intervalMs": 1000, "timeoutMs": 200, "failures": 2 },
        "toolCallTimeoutMs": 5000, "connectTimeoutMs": 7000,
        "retryTools": ["search", "fetch"], "enabled": false
    }"#,
    );
    assert_eq!(
        s.transport,
        TransportConfig::Stdio {
            command: "node".into(),
            args: vec!["server.js".into()],
            env: vec![("K".into(), Secret::new("v"))],
            cwd: Some(PathBuf::from("/srv")),
        }
    );
    assert_eq!(
        s.reconnect,
        ReconnectPolicy {
            enabled: false,
            initial_delay: ms(100),
            max_delay: ms(2000),
            max_attempts: 4,
            jitter: 0.25
        }
    );
    assert_eq!(
        s.health,
        HealthPolicy {
            interval: Some(ms(1000)),
            timeout: ms(200),
            failures: 2
        }
    );
    assert_eq!(s.tool_call_timeout, ms(5000));
    assert_eq!(s.connect_timeout, ms(7000));
    assert_eq!(s.retry_tools, ["search", "fetch"]);
    assert!(!s.enabled);
}

#[test]
fn health_interval_zero_turns_probing_off() {
    let s = server(r#"{ "command": "x", "health": { "intervalMs": 0 } }"#);
    assert_eq!(s.health.interval, None);
    assert_eq!(s.health.timeout, ms(5000));
}

#[test]
fn the_largest_values_are_accepted() {
    let s = server(
        r#"{ "command": "x", "reconnect": { "initialDelayMs": 2147483647, "maxDelayMs": 2147483647,
             "maxAttempts": 2147483647, "jitter": 1 }, "health": { "failures": 2147483647 } }"#,
    );
    assert_eq!(s.reconnect.max_delay, ms(2_147_483_647));
    assert_eq!(s.reconnect.max_attempts, 2_147_483_647);
    assert_eq!(s.reconnect.jitter, 1.0);
    assert_eq!(s.health.failures, 2_147_483_647);
}

#[test]
fn whole_numbers_written_as_floats_are_accepted() {
    let s = server(
        r#"{ "command": "x", "toolCallTimeoutMs": 1.5e3, "reconnect": { "maxAttempts": 3.0 } }"#,
    );
    assert_eq!(s.tool_call_timeout, ms(1500));
    assert_eq!(s.reconnect.max_attempts, 3);
}

#[test]
fn server_order_is_preserved() {
    let config = ok(r#"{ "mcpServers": {
        "zeta": { "command": "z" }, "alpha": { "command": "a" }, "mid": { "url": "http://m" } } }"#);
    let names: Vec<_> = config.servers.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["zeta", "alpha", "mid"]);
    assert_eq!(
        config.server("alpha").map(|s| s.describe()),
        Some("a".to_owned())
    );
    assert!(config.server("nope").is_none());
}

#[test]
fn an_empty_server_map_is_a_valid_config() {
    assert_eq!(ok(r#"{ "mcpServers": {} }"#), Config::default());
}

#[test]
fn naming_block_is_read() {
    let config = ok(r#"{ "mcpServers": {}, "naming": { "mode": "original", "separator": "." } }"#);
    assert_eq!(
        config.naming,
        NamingConfig {
            mode: NamingMode::Original,
            separator: ".".into()
        }
    );
    let config = ok(r#"{ "mcpServers": {}, "naming": { "separator": "-_.x9" } }"#);
    assert_eq!(config.naming.mode, NamingMode::Prefixed);
    assert_eq!(config.naming.separator, "-_.x9");
}

// === defaults ===

#[test]
fn defaults_apply_to_every_server_and_server_keys_override_field_by_field() {
    let config = ok(r#"{
        "defaults": {
            "reconnect": { "maxDelayMs": 60000, "maxAttempts": 3, "jitter": 0.5 },
            "health": { "intervalMs": 0, "failures": 5 },
            "toolCallTimeoutMs": 10000,
            "connectTimeoutMs": 20000
        },
        "mcpServers": {
            "plain": { "command": "a" },
            "own": {
                "command": "b",
                "reconnect": { "initialDelayMs": 1000, "maxAttempts": 7 },
                "health": { "intervalMs": 15000 },
                "toolCallTimeoutMs": 500
            }
        }
    }"#);
    let plain = &config.servers[0];
    assert_eq!(
        plain.reconnect,
        ReconnectPolicy {
            enabled: true,
            initial_delay: ms(500),
            max_delay: ms(60_000),
            max_attempts: 3,
            jitter: 0.5
        }
    );
    assert_eq!(
        plain.health,
        HealthPolicy {
            interval: None,
            timeout: ms(5000),
            failures: 5
        }
    );
    assert_eq!(plain.tool_call_timeout, ms(10_000));
    assert_eq!(plain.connect_timeout, ms(20_000));

    let own = &config.servers[1];
    assert_eq!(
        own.reconnect,
        ReconnectPolicy {
            enabled: true,
            initial_delay: ms(1000),
            max_delay: ms(60_000),
            max_attempts: 7,
            jitter: 0.5
        }
    );
    assert_eq!(
        own.health,
        HealthPolicy {
            interval: Some(ms(15_000)),
            timeout: ms(5000),
            failures: 5
        }
    );
    assert_eq!(own.tool_call_timeout, ms(500));
    assert_eq!(own.connect_timeout, ms(20_000));
}

#[test]
fn delay_order_is_judged_on_the_merged_values_and_reported_where_it_was_written() {
    // The defaults block alone is wrong: reported once, at defaults.
    let text = r#"{ "defaults": { "reconnect": { "initialDelayMs": 60000 } },
        "mcpServers": { "a": { "command": "a" }, "b": { "command": "b" } } }"#;
    assert_eq!(
        problems(text),
        [
            "defaults.reconnect.initialDelayMs (60000) must not exceed maxDelayMs (30000, the default)"
        ]
    );
    // A server that fixes it is fine; a server lowering maxDelayMs under the defaults' initial is not.
    let text = r#"{ "defaults": { "reconnect": { "initialDelayMs": 2000 } },
        "mcpServers": { "a": { "command": "a", "reconnect": { "maxDelayMs": 1000 } } } }"#;
    assert_eq!(
        problems(text),
        [
            "mcpServers.a.reconnect.maxDelayMs (1000) must not be less than initialDelayMs (2000, from defaults)"
        ]
    );
    let text = r#"{ "defaults": { "reconnect": { "maxDelayMs": 1000 } },
        "mcpServers": { "a": { "command": "a", "reconnect": { "initialDelayMs": 1001 } } } }"#;
    assert_eq!(
        problems(text),
        [
            "mcpServers.a.reconnect.initialDelayMs (1001) must not exceed maxDelayMs (1000, from defaults)"
        ]
    );
    let text = r#"{ "defaults": { "reconnect": { "maxDelayMs": 100000 } },
        "mcpServers": { "a": { "command": "a", "reconnect": { "initialDelayMs": 60000 } } } }"#;
    assert_eq!(ok(text).servers[0].reconnect.initial_delay, ms(60_000));
}

// === Every problem at once ===

#[test]
fn five_mistakes_yield_five_problems_with_their_paths() {
    let text = r#"{
  "mcpServers": {
    "fs": { "command": "npx", "reconnect": { "maxDelayMs": -5 } },
    "bad name": { "command": "x" },
    "api": { "url": "https://api.example.com/mcp", "headers": { "Authorization": "Bearer ${API_TOKEN}" } },
    "both": { "command": "x", "url": "http://localhost/mcp" },
    "j": { "command": "x", "reconnect": { "jitter": 2 } }
  }
}"#;
    let err = parse(text).unwrap_err();
    let paths: Vec<_> = err.problems.iter().map(|p| p.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "mcpServers.fs.reconnect.maxDelayMs",
            "mcpServers[\"bad name\"]",
            "mcpServers.api.headers.Authorization",
            "mcpServers.both",
            "mcpServers.j.reconnect.jitter",
        ]
    );
    assert_eq!(
        err.to_string(),
        "mcpServers.fs.reconnect.maxDelayMs must be a positive number of milliseconds no greater than 2147483647 (got -5)\n\
         mcpServers[\"bad name\"] is not a valid server name: use 1 to 64 characters of A-Za-z0-9_-\n\
         mcpServers.api.headers.Authorization references ${API_TOKEN}, which is not set\n\
         mcpServers.both has both \"command\" (stdio) and \"url\" (streamable HTTP); keep one\n\
         mcpServers.j.reconnect.jitter must be a number from 0 to 1 (got 2)"
    );
}

#[test]
fn problems_in_defaults_naming_and_servers_are_all_reported() {
    let text = r#"{
  "defaults": { "toolCallTimeoutMs": 0, "colour": 1 },
  "mcpServers": { "a": { "command": 5, "args": "-y x", "retryTools": ["", 3] } },
  "naming": { "mode": "short", "separator": "::" },
  "extra": true
}"#;
    assert_eq!(
        problems(text),
        [
            "defaults.colour is not a known key (known: reconnect, health, toolCallTimeoutMs, connectTimeoutMs, isolation, maxInstances, pin, maxResultBytes, start, idleTimeoutMs, rateLimit, authorize, sandbox)",
            "defaults.toolCallTimeoutMs must be a positive number of milliseconds no greater than 2147483647 (got 0)",
            "mcpServers.a.command must be a string (got a number); write it in quotes",
            "mcpServers.a.args must be an array of strings, one per argument (got a string)",
            "mcpServers.a.retryTools[0] must be a tool name (got an empty string)",
            "mcpServers.a.retryTools[1] must be a tool name (got a number)",
            "naming.mode must be \"prefixed\" or \"original\" (got \"short\")",
            "naming.separator must be one or more characters of A-Za-z0-9_.- (got \"::\")",
            "extra is not a known key (known: mcpServers, defaults, naming, toolExposure, sessionMaxAgeMs, auth, rateLimit, audit)",
        ]
    );
}

// === The document ===

#[test]
fn document_level_problems() {
    assert_eq!(
        problems("{}"),
        [
            "mcpServers is missing: the config needs an \"mcpServers\" object that maps server names to servers"
        ]
    );
    assert_eq!(
        problems(r#"{ "mcpServers": [] }"#),
        ["mcpServers must be an object (got an array)"]
    );
    assert_eq!(
        problems(r#"{ "mcpServers": null }"#),
        ["mcpServers must be an object (got null)"]
    );
    assert_eq!(
        problems("[1]"),
        ["the config must be a JSON object with an \"mcpServers\" key (got an array)"]
    );
    assert_eq!(
        problems(r#"{ "mcpServers": { "s": "npx x" } }"#),
        ["mcpServers.s must be an object (got a string)"]
    );
    assert_eq!(
        problems(r#"{ "mcpServers": {}, "defaults": [], "naming": "original" }"#),
        [
            "defaults must be an object (got an array)",
            "naming must be an object (got a string)"
        ]
    );
}

#[test]
fn invalid_json_is_reported_with_line_and_column() {
    assert_eq!(
        problems("{\n  \"mcpServers\": {\n    \"a\": { \"command\": \"x\", }\n  }\n}"),
        ["the config is not valid JSON: trailing comma at line 3 column 28"]
    );
    assert_eq!(
        problems(""),
        ["the config is not valid JSON: EOF while parsing a value at line 1 column 0"]
    );
    assert_eq!(
        problems("{ \"mcpServers\": {} } x"),
        ["the config is not valid JSON: trailing characters at line 1 column 22"]
    );
}

#[test]
fn repeated_keys_are_reported() {
    assert_eq!(
        problems(r#"{ "mcpServers": { "a": { "command": "x" }, "a": { "command": "y" } } }"#),
        ["mcpServers.a appears more than once in the same object; keep one"]
    );
    assert_eq!(
        problems(&one(
            r#"{ "command": "x", "env": { "K": "1", "K": "2", "K": "3" } }"#
        )),
        ["mcpServers.s.env.K appears more than once in the same object; keep one"]
    );
}

// === Server names ===

#[test]
fn server_names_must_be_1_to_64_of_a_z_0_9_underscore_dash() {
    let long = "x".repeat(64);
    let text = format!(
        r#"{{ "mcpServers": {{ "{long}": {{ "command": "x" }}, "A-b_9": {{ "command": "x" }} }} }}"#
    );
    assert_eq!(ok(&text).servers.len(), 2);
    let rule = "is not a valid server name: use 1 to 64 characters of A-Za-z0-9_-";
    let too_long = "x".repeat(65);
    for name in ["", "my server", "a.b", "naïve", "a/b", too_long.as_str()] {
        let text = format!(
            r#"{{ "mcpServers": {{ {}: {{ "command": "x" }} }} }}"#,
            serde_json_string(name)
        );
        let path = if name.contains(|c: char| !c.is_ascii_alphanumeric() && c != '_' && c != '-')
            || name.is_empty()
        {
            format!("mcpServers[{name:?}]")
        } else {
            format!("mcpServers.{name}")
        };
        assert_eq!(problems(&text), [format!("{path} {rule}")], "{name}");
    }
}

fn serde_json_string(s: &str) -> String {
    format!("{s:?}")
}

// === Transport ===

#[test]
fn transport_rules() {
    assert_server_cases(&[
        (
            "{}",
            &["mcpServers.s needs either \"command\" (stdio) or \"url\" (streamable HTTP)"],
        ),
        (
            r#"{ "args": ["x"] }"#,
            &["mcpServers.s needs either \"command\" (stdio) or \"url\" (streamable HTTP)"],
        ),
        (
            r#"{ "command": "x", "url": "http://h" }"#,
            &["mcpServers.s has both \"command\" (stdio) and \"url\" (streamable HTTP); keep one"],
        ),
        (
            r#"{ "type": "stdio", "url": "http://h" }"#,
            &[
                "mcpServers.s.type is \"stdio\", which needs \"command\", but this server has \"url\": set \"type\" to \"http\" or remove it",
            ],
        ),
        (
            r#"{ "type": "stdio" }"#,
            &["mcpServers.s.type is \"stdio\", which needs \"command\""],
        ),
        (
            r#"{ "type": "http", "command": "x" }"#,
            &[
                "mcpServers.s.type is \"http\", which needs \"url\", but this server has \"command\": set \"type\" to \"stdio\" or remove it",
            ],
        ),
        (
            r#"{ "type": "streamableHttp" }"#,
            &["mcpServers.s.type is \"http\", which needs \"url\""],
        ),
        (
            r#"{ "type": "sse" }"#,
            &[
                "mcpServers.s.type is \"sse\", which needs \"url\" (the server's event-stream URL, often ending in /sse)",
            ],
        ),
        (
            r#"{ "type": "sse", "command": "x" }"#,
            &[
                "mcpServers.s.type is \"sse\", which needs \"url\" (the server's event-stream URL), but this server has \"command\": set \"type\" to \"stdio\" or remove it",
            ],
        ),
        (
            r#"{ "type": "sse", "url": "ftp://h/sse" }"#,
            &["mcpServers.s.url must be an http:// or https:// URL (got scheme \"ftp\")"],
        ),
        (
            r#"{ "type": "sse", "url": "http://h/sse", "args": ["x"] }"#,
            &[
                "mcpServers.s.args applies only to \"command\" servers (stdio); this server has \"url\"",
            ],
        ),
        (
            r#"{ "type": "SSE", "url": "http://h/sse" }"#,
            &[
                "mcpServers.s.type must be one of \"stdio\", \"http\", \"streamable-http\", \"streamableHttp\", \"sse\" (got \"SSE\")",
            ],
        ),
        (
            r#"{ "type": "websocket", "url": "http://h" }"#,
            &[
                "mcpServers.s.type must be one of \"stdio\", \"http\", \"streamable-http\", \"streamableHttp\", \"sse\" (got \"websocket\")",
            ],
        ),
        (
            r#"{ "type": 1, "url": "http://h" }"#,
            &[
                "mcpServers.s.type must be one of \"stdio\", \"http\", \"streamable-http\", \"streamableHttp\", \"sse\" (got a number)",
            ],
        ),
        (
            r#"{ "command": "x", "headers": { "A": "b" } }"#,
            &[
                "mcpServers.s.headers applies only to \"url\" servers (streamable HTTP); this server has \"command\"",
            ],
        ),
        (
            r#"{ "url": "http://h", "args": [], "env": {}, "cwd": "/" }"#,
            &[
                "mcpServers.s.args applies only to \"command\" servers (stdio); this server has \"url\"",
                "mcpServers.s.env applies only to \"command\" servers (stdio); this server has \"url\"",
                "mcpServers.s.cwd applies only to \"command\" servers (stdio); this server has \"url\"",
            ],
        ),
        (
            r#"{ "command": "" }"#,
            &["mcpServers.s.command is empty: name the program to run"],
        ),
        (
            r#"{ "command": "  " }"#,
            &["mcpServers.s.command is empty: name the program to run"],
        ),
        (
            r#"{ "command": "x", "cwd": "" }"#,
            &["mcpServers.s.cwd is empty: name a directory or remove the key"],
        ),
        (
            r#"{ "command": "x", "args": ["a\u0000b"] }"#,
            &[
                "mcpServers.s.args[0] contains a NUL character, which a process argument or variable cannot hold",
            ],
        ),
    ]);
}

#[test]
fn urls_must_be_http_or_https() {
    assert_server_cases(&[
        (
            r#"{ "url": "ftp://h/mcp" }"#,
            &["mcpServers.s.url must be an http:// or https:// URL (got scheme \"ftp\")"],
        ),
        (
            r#"{ "url": "localhost:3000/mcp" }"#,
            &["mcpServers.s.url must be an http:// or https:// URL"],
        ),
        (
            r#"{ "url": "https://" }"#,
            &["mcpServers.s.url must name a host after the scheme (http://HOST/…)"],
        ),
        (
            r#"{ "url": "${NOPE:-ws://h}" }"#,
            &["mcpServers.s.url must be an http:// or https:// URL (got scheme \"ws\")"],
        ),
    ]);
    let s = server(r#"{ "url": "HTTP://127.0.0.1:8000/mcp" }"#);
    assert_eq!(s.describe(), "HTTP://127.0.0.1:8000/mcp");
}

#[test]
fn string_fields_must_be_strings() {
    assert_server_cases(&[
        (
            r#"{ "command": ["npx"] }"#,
            &["mcpServers.s.command must be a string (got an array)"],
        ),
        (
            r#"{ "command": "x", "args": ["-p", 8080, null] }"#,
            &[
                "mcpServers.s.args[1] must be a string (got a number); write it in quotes",
                "mcpServers.s.args[2] must be a string (got null)",
            ],
        ),
        (
            r#"{ "command": "x", "env": { "PORT": 3000, "DEBUG": true } }"#,
            &[
                "mcpServers.s.env.PORT must be a string (got a number); write it in quotes",
                "mcpServers.s.env.DEBUG must be a string (got a boolean); write it in quotes",
            ],
        ),
        (
            r#"{ "command": "x", "env": ["A=1"] }"#,
            &["mcpServers.s.env must be an object (got an array)"],
        ),
        (
            r#"{ "url": "http://h", "headers": "Authorization: x" }"#,
            &["mcpServers.s.headers must be an object (got a string)"],
        ),
        (
            r#"{ "command": "x", "cwd": 1 }"#,
            &["mcpServers.s.cwd must be a string (got a number); write it in quotes"],
        ),
        (
            r#"{ "url": {} }"#,
            &["mcpServers.s.url must be a string (got an object)"],
        ),
        (
            r#"{ "command": "x", "enabled": "yes" }"#,
            &["mcpServers.s.enabled must be true or false (got a string)"],
        ),
        (
            r#"{ "command": "x", "retryTools": "search" }"#,
            &["mcpServers.s.retryTools must be an array of upstream tool names (got a string)"],
        ),
        (
            r#"{ "command": "x", "env": { "A=B": "1", "": "2" } }"#,
            &[
                "mcpServers.s.env[\"A=B\"] is not a valid environment variable name: it must be non-empty and hold no \"=\"",
                "mcpServers.s.env[\"\"] is not a valid environment variable name: it must be non-empty and hold no \"=\"",
            ],
        ),
        (
            r#"{ "url": "http://h", "headers": { "X Api": "1", "X-Ok": "a\r\nb" } }"#,
            &[
                "mcpServers.s.headers[\"X Api\"] is not a valid HTTP header name",
                "mcpServers.s.headers.X-Ok contains a line break or NUL character, which an HTTP header value cannot hold",
            ],
        ),
    ]);
}

#[test]
fn unknown_keys_are_rejected_with_the_known_ones_listed() {
    assert_server_cases(&[
        (
            r#"{ "command": "x", "reconnect": { "colour": "red" } }"#,
            &[
                "mcpServers.s.reconnect.colour is not a known key (known: enabled, initialDelayMs, maxDelayMs, maxAttempts, jitter)",
            ],
        ),
        (
            r#"{ "command": "x", "health": { "interval": 5 } }"#,
            &[
                "mcpServers.s.health.interval is not a known key (known: intervalMs, timeoutMs, failures)",
            ],
        ),
        (
            r#"{ "command": "x", "retry_tools": [] }"#,
            &[
                "mcpServers.s.retry_tools is not a known key; did you mean \"retryTools\"? (known: type, command, args, env, cwd, url, headers, reconnect, health, toolCallTimeoutMs, connectTimeoutMs, retryTools, enabled, protocolVersion, oauth, tools, isolation, maxInstances, pin, maxResultBytes, start, idleTimeoutMs, rateLimit, authorize, credentials, sandbox)",
            ],
        ),
        (
            r#"{ "command": "x", "reconnect": { "maxdelayms": 5 } }"#,
            &[
                "mcpServers.s.reconnect.maxdelayms is not a known key; did you mean \"maxDelayMs\"? (known: enabled, initialDelayMs, maxDelayMs, maxAttempts, jitter)",
            ],
        ),
    ]);
    assert_eq!(
        problems(r#"{ "mcpServers": {}, "naming": { "sep": "_" } }"#),
        ["naming.sep is not a known key (known: mode, separator)"]
    );
}

// === Reconnect and health values (SPEC §2) ===

#[test]
fn delays_must_be_positive_whole_milliseconds_no_greater_than_2147483647() {
    let rule = "must be a positive number of milliseconds no greater than 2147483647";
    for (value, got) in [
        ("-5", "-5"),
        ("0", "0"),
        ("2147483648", "2147483648"),
        ("1e300", "1e300"),
        ("-1.0", "-1"),
        ("\"500\"", "a string"),
        ("null", "null"),
        ("true", "a boolean"),
    ] {
        for key in ["initialDelayMs", "maxDelayMs"] {
            let json = format!(r#"{{ "command": "x", "reconnect": {{ "{key}": {value} }} }}"#);
            assert_eq!(
                problems(&one(&json)),
                [format!("mcpServers.s.reconnect.{key} {rule} (got {got})")],
                "{key}: {value}"
            );
        }
        for key in ["toolCallTimeoutMs", "connectTimeoutMs"] {
            let json = format!(r#"{{ "command": "x", "{key}": {value} }}"#);
            assert_eq!(
                problems(&one(&json)),
                [format!("mcpServers.s.{key} {rule} (got {got})")],
                "{key}: {value}"
            );
        }
        let json = format!(r#"{{ "command": "x", "health": {{ "timeoutMs": {value} }} }}"#);
        assert_eq!(
            problems(&one(&json)),
            [format!("mcpServers.s.health.timeoutMs {rule} (got {got})")]
        );
    }
    assert_server_cases(&[
        (
            r#"{ "command": "x", "reconnect": { "maxDelayMs": 1.5 } }"#,
            &["mcpServers.s.reconnect.maxDelayMs must be a whole number of milliseconds (got 1.5)"],
        ),
        (
            r#"{ "command": "x", "health": { "intervalMs": -1 } }"#,
            &[
                "mcpServers.s.health.intervalMs must be 0 (off) or a positive number of milliseconds no greater than 2147483647 (got -1)",
            ],
        ),
        (
            r#"{ "command": "x", "health": { "intervalMs": 0.5 } }"#,
            &["mcpServers.s.health.intervalMs must be a whole number of milliseconds (got 0.5)"],
        ),
    ]);
}

#[test]
fn initial_delay_must_not_exceed_max_delay() {
    assert_server_cases(&[
        (
            r#"{ "command": "x", "reconnect": { "initialDelayMs": 60000, "maxDelayMs": 30000 } }"#,
            &["mcpServers.s.reconnect.initialDelayMs (60000) must not exceed maxDelayMs (30000)"],
        ),
        (
            r#"{ "command": "x", "reconnect": { "initialDelayMs": 60000 } }"#,
            &[
                "mcpServers.s.reconnect.initialDelayMs (60000) must not exceed maxDelayMs (30000, the default)",
            ],
        ),
        (
            r#"{ "command": "x", "reconnect": { "maxDelayMs": 100 } }"#,
            &[
                "mcpServers.s.reconnect.maxDelayMs (100) must not be less than initialDelayMs (500, the default)",
            ],
        ),
        // A delay that is itself wrong is reported alone, not also compared.
        (
            r#"{ "command": "x", "reconnect": { "initialDelayMs": 60000, "maxDelayMs": -1 } }"#,
            &[
                "mcpServers.s.reconnect.maxDelayMs must be a positive number of milliseconds no greater than 2147483647 (got -1)",
            ],
        ),
    ]);
    let s =
        server(r#"{ "command": "x", "reconnect": { "initialDelayMs": 700, "maxDelayMs": 700 } }"#);
    assert_eq!(s.reconnect.base_delay(1), ms(700));
}

#[test]
fn counts_must_be_positive_integers() {
    let rule = "must be a positive integer no greater than 2147483647";
    for (value, got) in [
        ("0", "0"),
        ("-1", "-1"),
        ("1.5", "1.5"),
        ("2147483648", "2147483648"),
        ("\"3\"", "a string"),
        ("true", "a boolean"),
    ] {
        let json = format!(r#"{{ "command": "x", "reconnect": {{ "maxAttempts": {value} }} }}"#);
        assert_eq!(
            problems(&one(&json)),
            [format!(
                "mcpServers.s.reconnect.maxAttempts {rule} (got {got})"
            )]
        );
        let json = format!(r#"{{ "command": "x", "health": {{ "failures": {value} }} }}"#);
        assert_eq!(
            problems(&one(&json)),
            [format!("mcpServers.s.health.failures {rule} (got {got})")]
        );
    }
}

#[test]
fn jitter_must_be_within_0_and_1() {
    for value in ["0", "0.0", "0.3", "1", "1.0"] {
        let json = format!(r#"{{ "command": "x", "reconnect": {{ "jitter": {value} }} }}"#);
        server(&json);
    }
    for (value, got) in [
        ("-0.1", "-0.1"),
        ("1.5", "1.5"),
        ("2", "2"),
        ("-1", "-1"),
        ("\"0.5\"", "a string"),
    ] {
        let json = format!(r#"{{ "command": "x", "reconnect": {{ "jitter": {value} }} }}"#);
        assert_eq!(
            problems(&one(&json)),
            [format!(
                "mcpServers.s.reconnect.jitter must be a number from 0 to 1 (got {got})"
            )]
        );
    }
}

#[test]
fn policy_blocks_must_be_objects() {
    assert_server_cases(&[
        (
            r#"{ "command": "x", "reconnect": false }"#,
            &["mcpServers.s.reconnect must be an object (got a boolean)"],
        ),
        (
            r#"{ "command": "x", "health": 3 }"#,
            &["mcpServers.s.health must be an object (got a number)"],
        ),
        (
            r#"{ "command": "x", "reconnect": { "enabled": "no" } }"#,
            &["mcpServers.s.reconnect.enabled must be true or false (got a string)"],
        ),
    ]);
}

#[test]
fn naming_rules() {
    let cases: [(&str, &[&str]); 4] = [
        (
            r#"{ "separator": "" }"#,
            &["naming.separator must be one or more characters of A-Za-z0-9_.- (got \"\")"],
        ),
        (
            r#"{ "separator": 5 }"#,
            &["naming.separator must be one or more characters of A-Za-z0-9_.- (got a number)"],
        ),
        (
            r#"{ "mode": "Original" }"#,
            &["naming.mode must be \"prefixed\" or \"original\" (got \"Original\")"],
        ),
        (
            r#"{ "mode": null }"#,
            &["naming.mode must be \"prefixed\" or \"original\" (got null)"],
        ),
    ];
    for (naming, expected) in cases {
        let text = format!(r#"{{ "mcpServers": {{}}, "naming": {naming} }}"#);
        assert_eq!(problems(&text), expected, "{naming}");
    }
}

// === Environment references and secrets ===

#[test]
fn an_unset_variable_is_a_problem_at_the_path_that_references_it() {
    assert_server_cases(&[
        (
            r#"{ "url": "https://h/mcp", "headers": { "Authorization": "Bearer ${API_TOKEN}" } }"#,
            &["mcpServers.s.headers.Authorization references ${API_TOKEN}, which is not set"],
        ),
        (
            r#"{ "command": "${BIN}", "args": ["${A}", "ok", "${B}-${C}"], "env": { "K": "${D}" }, "cwd": "${E}" }"#,
            &[
                "mcpServers.s.command references ${BIN}, which is not set",
                "mcpServers.s.args[0] references ${A}, which is not set",
                "mcpServers.s.args[2] references ${B}, which is not set",
                "mcpServers.s.args[2] references ${C}, which is not set",
                "mcpServers.s.env.K references ${D}, which is not set",
                "mcpServers.s.cwd references ${E}, which is not set",
            ],
        ),
        (
            r#"{ "url": "${BASE}/mcp" }"#,
            &["mcpServers.s.url references ${BASE}, which is not set"],
        ),
        (
            r#"{ "command": "x", "env": { "K": "${not valid}", "L": "${OPEN" } }"#,
            &[
                "mcpServers.s.env.K contains a malformed \"${...}\" reference: a variable name is letters, digits and \"_\", not starting with a digit",
                "mcpServers.s.env.L has a \"${\" with no closing \"}\"",
            ],
        ),
    ]);
}

#[test]
fn defaults_in_references_fill_in_for_unset_or_empty_variables() {
    let s = server(
        r#"{ "command": "x", "env": { "A": "${NOPE:-one}", "B": "${EMPTY:-two}", "C": "${HOME:-three}", "D": "${EMPTY}", "E": "$HOME" } }"#,
    );
    let TransportConfig::Stdio { env, .. } = s.transport else {
        panic!("stdio")
    };
    let values: Vec<_> = env.iter().map(|(k, v)| (k.as_str(), v.expose())).collect();
    assert_eq!(
        values,
        [
            ("A", "one"),
            ("B", "two"),
            ("C", "/home/me"),
            ("D", ""),
            ("E", "$HOME")
        ]
    );
}

#[test]
fn secrets_never_appear_in_debug_output_errors_or_descriptions() {
    let text = format!(
        r#"{{ "mcpServers": {{
            "api": {{ "url": "https://h/mcp", "headers": {{ "Authorization": "Bearer ${{TOKEN}}", "X-Raw": "{TOKEN}" }} }},
            "local": {{ "command": "x", "env": {{ "KEY": "${{TOKEN}}", "RAW": "{TOKEN}" }} }}
        }} }}"#
    );
    let config = ok(&text);
    let debug = format!("{config:?} {:#?}", config);
    assert!(!debug.contains(TOKEN), "{debug}");
    assert!(debug.contains("<redacted>"));
    for s in &config.servers {
        assert!(!s.describe().contains(TOKEN));
    }

    // Wrong values next to secrets: no message quotes a value.
    let text = format!(
        r#"{{ "mcpServers": {{
            "api": {{ "url": "https://h/mcp", "headers": {{ "Authorization": "{TOKEN}\r\n", "Y": "{TOKEN} ${{MISSING}}", "Z": "{TOKEN} ${{bad name}}" }} }},
            "local": {{ "command": "x", "env": {{ "K": "{TOKEN}\u0000", "L": "${{TOKEN}} ${{NOPE}}" }}, "colour": "{TOKEN}" }},
            "u": {{ "url": "ftp://{TOKEN}@h/${{TOKEN}}" }}
        }} }}"#
    );
    let err = parse(&text).unwrap_err();
    assert_eq!(err.problems.len(), 7, "{err}");
    let shown = format!("{err} {err:?}");
    assert!(!shown.contains(TOKEN), "{shown}");
    assert!(!shown.contains("SECRET"), "{shown}");
}

#[test]
fn describe_shows_the_command_or_the_url_but_no_secret() {
    let s =
        server(r#"{ "command": "npx", "args": ["-y", "some server", ""], "env": { "K": "v" } }"#);
    assert_eq!(s.describe(), r#"npx -y "some server" """#);
    let s = server(
        r#"{ "url": "https://user:pw@api.example.com/mcp?key=abc", "headers": { "A": "b" } }"#,
    );
    assert_eq!(
        s.describe(),
        "https://<redacted>@api.example.com/mcp?<redacted>"
    );
}

// === Reload: changed versus unchanged ===

#[test]
fn server_configs_compare_equal_only_when_nothing_changed() {
    let base = r#"{ "url": "https://h/mcp", "headers": { "Authorization": "Bearer ${TOKEN}" }, "retryTools": ["a"] }"#;
    assert_eq!(server(base), server(base));
    for changed in [
        r#"{ "url": "https://h/mcp", "headers": { "Authorization": "Bearer other" }, "retryTools": ["a"] }"#,
        r#"{ "url": "https://h/mcp2", "headers": { "Authorization": "Bearer ${TOKEN}" }, "retryTools": ["a"] }"#,
        r#"{ "url": "https://h/mcp", "headers": { "Authorization": "Bearer ${TOKEN}" }, "retryTools": [] }"#,
        r#"{ "url": "https://h/mcp", "headers": { "Authorization": "Bearer ${TOKEN}" }, "retryTools": ["a"], "toolCallTimeoutMs": 1 }"#,
        r#"{ "url": "https://h/mcp", "headers": { "Authorization": "Bearer ${TOKEN}" }, "retryTools": ["a"], "enabled": false }"#,
    ] {
        assert_ne!(server(base), server(changed), "{changed}");
    }
}

#[test]
fn config_errors_display_one_problem_per_line() {
    let err = parse(r#"{ "mcpServers": { "a": {}, "b": {} } }"#).unwrap_err();
    assert_eq!(
        err.to_string(),
        "mcpServers.a needs either \"command\" (stdio) or \"url\" (streamable HTTP)\n\
         mcpServers.b needs either \"command\" (stdio) or \"url\" (streamable HTTP)"
    );
    assert_eq!(err.to_string().lines().count(), err.problems.len());
}

// === tools: { allow, deny } ===

#[test]
fn tool_filters_are_read_with_allow_and_deny() {
    let s = server(
        r#"{ "command": "x", "tools": { "allow": ["read_*", "list_dir"], "deny": ["*_secret"] } }"#,
    );
    assert!(s.tools.allows("read_file"));
    assert!(s.tools.allows("list_dir"));
    assert!(!s.tools.allows("write_file"), "not allowed");
    assert!(!s.tools.allows("read_secret"), "deny wins");
    let s = server(r#"{ "command": "x", "tools": { "deny": ["delete_*"] } }"#);
    assert!(s.tools.allows("write_file") && !s.tools.allows("delete_file"));
    let s = server(r#"{ "command": "x" }"#);
    assert!(s.tools.is_open(), "no filter: every tool");
    let s = server(r#"{ "command": "x", "tools": {} }"#);
    assert!(s.tools.is_open(), "an empty block: every tool");
}

#[test]
fn bad_tool_filters_are_named_by_their_path() {
    assert_server_cases(&[
        (
            r#"{ "command": "x", "tools": ["a"] }"#,
            &["mcpServers.s.tools must be an object (got an array)"],
        ),
        (
            r#"{ "command": "x", "tools": { "allow": "read_*" } }"#,
            &[
                "mcpServers.s.tools.allow must be an array of glob patterns on upstream tool names, like [\"read_*\"] (got a string)",
            ],
        ),
        (
            r#"{ "command": "x", "tools": { "allow": ["ok", "[unclosed", 3, ""] } }"#,
            &[
                "mcpServers.s.tools.allow[1] is not a valid glob pattern: unclosed character class; missing ']'",
                "mcpServers.s.tools.allow[2] must be a glob pattern (got a number)",
                "mcpServers.s.tools.allow[3] must be a glob pattern (got an empty string)",
            ],
        ),
        (
            r#"{ "command": "x", "tools": { "deny": ["{a,b"] } }"#,
            &[
                "mcpServers.s.tools.deny[0] is not a valid glob pattern: unclosed alternate group; missing '}' (maybe escape '{' with '[{]'?)",
            ],
        ),
        (
            r#"{ "command": "x", "tools": { "allow": [] } }"#,
            &[
                "mcpServers.s.tools.allow must list at least one pattern (an empty list would publish no tool); leave \"allow\" out to publish every tool",
            ],
        ),
        (
            r#"{ "command": "x", "tools": { "alow": ["a"] } }"#,
            &["mcpServers.s.tools.alow is not a known key (known: allow, deny)"],
        ),
    ]);
}

#[test]
fn a_changed_tool_filter_is_a_changed_server() {
    let a = server(r#"{ "command": "x", "tools": { "deny": ["a"] } }"#);
    let b = server(r#"{ "command": "x", "tools": { "deny": ["b"] } }"#);
    let c = server(r#"{ "command": "x", "tools": { "deny": ["a"] } }"#);
    assert_ne!(a, b);
    assert_eq!(a, c);
}

// === Pinned tool definitions (SPEC §13) ===

#[test]
fn pin_is_read_per_server_and_from_defaults_and_left_unset_otherwise() {
    use mcp_supervisor_core::pin::PinMode;
    let s = server(r#"{ "command": "x" }"#);
    assert_eq!((s.pin, s.pin_mode()), (None, PinMode::Warn), "unset: warn");
    for mode in PinMode::ALL {
        let s = server(&format!(r#"{{ "command": "x", "pin": "{mode}" }}"#));
        assert_eq!((s.pin, s.pin_mode()), (Some(mode), mode));
    }
    let config = ok(r#"{
  "defaults": { "pin": "block" },
  "mcpServers": { "a": { "command": "x" }, "b": { "command": "x", "pin": "off" } }
}"#);
    assert_eq!(config.servers[0].pin, Some(PinMode::Block), "from defaults");
    assert_eq!(
        config.servers[1].pin,
        Some(PinMode::Off),
        "the server's own wins"
    );
    // A changed pin mode is a changed server (a reload restarts it under the new mode).
    assert_ne!(s, server(r#"{ "command": "x", "pin": "warn" }"#));
}

#[test]
fn a_bad_pin_is_named_by_its_full_path() {
    let rule = "must be \"off\", \"warn\" or \"block\"";
    assert_server_cases(&[
        (
            r#"{ "command": "x", "pin": "Block" }"#,
            &[&format!(
                "mcpServers.s.pin {rule} (got \"Block\"); leave it out for \"warn\""
            )],
        ),
        (
            r#"{ "command": "x", "pin": true }"#,
            &[&format!(
                "mcpServers.s.pin {rule} (got a boolean); leave it out for \"warn\""
            )],
        ),
    ]);
    assert_eq!(
        problems(r#"{ "mcpServers": {}, "defaults": { "pin": 1 } }"#),
        [format!(
            "defaults.pin {rule} (got a number); leave it out for \"warn\""
        )]
    );
}

// === The oauth block ===

#[test]
fn an_oauth_block_parses_with_its_grant_client_scopes_and_metadata_url() {
    use mcp_supervisor_core::config::{Grant, OAuthConfig};
    let s = server(
        r#"{ "url": "https://h/mcp", "oauth": { "clientId": "abc", "clientSecretEnv": "GH_SECRET",
             "scopes": ["repo", "read:org"], "clientMetadataUrl": "https://me.example/client.json" } }"#,
    );
    assert_eq!(
        s.oauth,
        Some(OAuthConfig {
            grant: Grant::AuthorizationCode,
            client_id: Some("abc".into()),
            client_secret_env: Some("GH_SECRET".into()),
            scopes: Some(vec!["repo".into(), "read:org".into()]),
            client_metadata_url: Some("https://me.example/client.json".into()),
        })
    );
    let machine = server(
        r#"{ "url": "https://h/mcp", "oauth": { "grant": "client_credentials", "clientId": "m", "clientSecretEnv": "S" } }"#,
    );
    assert_eq!(
        machine.oauth.map(|o| o.grant),
        Some(Grant::ClientCredentials)
    );
    assert_eq!(
        server(r#"{ "url": "https://h/mcp", "oauth": {} }"#).oauth,
        Some(OAuthConfig::default())
    );
    assert_eq!(server(r#"{ "url": "https://h/mcp" }"#).oauth, None);
}

#[test]
fn a_wrong_oauth_block_says_what_to_write() {
    let p = problems(&one(
        r#"{ "url": "https://h/mcp", "oauth": { "grant": "password", "scopes": ["a b", 3], "clientSecretEnv": "hunter2!", "clientMetadataUrl": "http://x/c.json", "extra": 1 } }"#,
    ));
    let text = p.join("\n");
    for needle in [
        "mcpServers.s.oauth.grant must be \"authorization_code\"",
        "mcpServers.s.oauth.scopes[0] must be one scope",
        "mcpServers.s.oauth.scopes[1] must be one scope",
        "mcpServers.s.oauth.clientSecretEnv must be the name of an environment variable",
        "mcpServers.s.oauth.clientMetadataUrl must be an https:// URL",
        "mcpServers.s.oauth.extra is not a known key",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
    assert!(!text.contains("hunter2"), "a value was echoed:\n{text}");
    let machine = problems(&one(
        r#"{ "url": "https://h/mcp", "oauth": { "grant": "client_credentials" } }"#,
    ));
    assert!(
        machine
            .join("\n")
            .contains("needs \"clientId\" and \"clientSecretEnv\""),
        "{machine:?}"
    );
    let stdio = problems(&one(r#"{ "command": "x", "oauth": {} }"#));
    assert!(
        stdio
            .join("\n")
            .contains("mcpServers.s.oauth applies only to \"url\" servers"),
        "{stdio:?}"
    );
    assert!(
        problems(&one(r#"{ "url": "https://h/mcp", "oauth": true }"#))
            .join("\n")
            .contains("mcpServers.s.oauth must be an object")
    );
}

// === Isolation (SPEC §11) ===

#[test]
fn isolation_and_max_instances_are_read_per_server_and_from_defaults() {
    use mcp_supervisor_core::config::{DEFAULT_MAX_INSTANCES, Isolation};
    let plain = server(r#"{ "command": "x" }"#);
    assert_eq!(plain.isolation, Isolation::Shared);
    assert_eq!(plain.max_instances, DEFAULT_MAX_INSTANCES);
    let isolated = server(r#"{ "command": "x", "isolation": "session", "maxInstances": 3 }"#);
    assert_eq!(
        (isolated.isolation, isolated.max_instances),
        (Isolation::Session, 3)
    );
    let config = ok(r#"{
        "defaults": { "isolation": "session", "maxInstances": 4 },
        "mcpServers": { "a": { "command": "x" }, "b": { "command": "x", "isolation": "shared" } }
    }"#);
    let a = config.server("a").expect("a");
    let b = config.server("b").expect("b");
    assert_eq!((a.isolation, a.max_instances), (Isolation::Session, 4));
    assert_eq!((b.isolation, b.max_instances), (Isolation::Shared, 4));
}

#[test]
fn a_bad_isolation_or_max_instances_names_its_path() {
    assert_server_cases(&[
        (
            r#"{ "command": "x", "isolation": "client" }"#,
            &[
                r#"mcpServers.s.isolation must be "shared" (one instance serves every client), "session" (one instance per client session) or "user" (one instance per caller identity) (got "client")"#,
            ],
        ),
        (
            r#"{ "command": "x", "maxInstances": 0 }"#,
            &[
                "mcpServers.s.maxInstances must be a positive integer no greater than 2147483647 (got 0)",
            ],
        ),
    ]);
}

// === The result cap and tool exposure (SPEC §13) ===

#[test]
fn max_result_bytes_is_read_per_server_and_from_defaults_with_no_default_cap() {
    assert_eq!(server(r#"{ "command": "x" }"#).max_result_bytes, None);
    assert_eq!(
        server(r#"{ "command": "x", "maxResultBytes": 4096 }"#).max_result_bytes,
        Some(4096)
    );
    let config = ok(r#"{
        "defaults": { "maxResultBytes": 1000 },
        "mcpServers": { "a": { "command": "x" }, "b": { "command": "x", "maxResultBytes": 50 } }
    }"#);
    assert_eq!(
        config.server("a").and_then(|s| s.max_result_bytes),
        Some(1000)
    );
    assert_eq!(
        config.server("b").and_then(|s| s.max_result_bytes),
        Some(50)
    );
}

#[test]
fn a_bad_max_result_bytes_names_its_path() {
    const RULE: &str = "must be a positive number of bytes no greater than 2147483647";
    assert_server_cases(&[
        (
            r#"{ "command": "x", "maxResultBytes": 0 }"#,
            &[&format!("mcpServers.s.maxResultBytes {RULE} (got 0)")],
        ),
        (
            r#"{ "command": "x", "maxResultBytes": "1MB" }"#,
            &[&format!(
                "mcpServers.s.maxResultBytes {RULE} (got a string)"
            )],
        ),
        (
            r#"{ "command": "x", "maxResultBytes": 1.5 }"#,
            &[&format!("mcpServers.s.maxResultBytes {RULE} (got 1.5)")],
        ),
        (
            r#"{ "command": "x", "maxResultBytes": 2147483648 }"#,
            &[&format!(
                "mcpServers.s.maxResultBytes {RULE} (got 2147483648)"
            )],
        ),
    ]);
    assert_eq!(
        problems(r#"{ "defaults": { "maxResultBytes": -1 }, "mcpServers": {} }"#),
        [format!("defaults.maxResultBytes {RULE} (got -1)")]
    );
}

#[test]
fn tool_exposure_is_a_top_level_key() {
    use mcp_supervisor_core::config::ToolExposure;
    assert_eq!(
        ok(&one(r#"{ "command": "x" }"#)).tool_exposure,
        ToolExposure::All
    );
    let search = ok(r#"{ "toolExposure": "search", "mcpServers": {} }"#);
    assert_eq!(search.tool_exposure, ToolExposure::Search);
    let all = ok(r#"{ "toolExposure": "all", "mcpServers": {} }"#);
    assert_eq!(all.tool_exposure, ToolExposure::All);
    const RULE: &str = r#"toolExposure must be "all" (every tool in tools/list) or "search" (two tools, search_tools and call_tool, in their place)"#;
    assert_eq!(
        problems(r#"{ "toolExposure": "lazy", "mcpServers": {} }"#),
        [format!(r#"{RULE} (got "lazy")"#)]
    );
    assert_eq!(
        problems(r#"{ "toolExposure": true, "mcpServers": {} }"#),
        [format!("{RULE} (got a boolean)")]
    );
    // Not a server's key.
    assert_eq!(
        problems(&one(r#"{ "command": "x", "toolExposure": "search" }"#))[0]
            .split(" (known")
            .next(),
        Some("mcpServers.s.toolExposure is not a known key")
    );
}

// === On demand and idle timeout (SPEC §13) ===

#[test]
fn start_and_idle_timeout_are_read_per_server_and_from_defaults() {
    use mcp_supervisor_core::config::Start;
    use std::time::Duration;
    let plain = server(r#"{ "command": "x" }"#);
    assert_eq!((plain.start, plain.idle_timeout), (Start::Always, None));
    let lazy = server(r#"{ "command": "x", "start": "onDemand", "idleTimeoutMs": 60000 }"#);
    assert_eq!(
        (lazy.start, lazy.idle_timeout),
        (Start::OnDemand, Some(Duration::from_secs(60)))
    );
    let config = ok(r#"{
        "defaults": { "start": "onDemand", "idleTimeoutMs": 1000 },
        "mcpServers": { "a": { "command": "x" }, "b": { "command": "x", "start": "always", "idleTimeoutMs": 5 } }
    }"#);
    let a = config.server("a").expect("a");
    let b = config.server("b").expect("b");
    assert_eq!(
        (a.start, a.idle_timeout),
        (Start::OnDemand, Some(Duration::from_secs(1)))
    );
    assert_eq!(
        (b.start, b.idle_timeout),
        (Start::Always, Some(Duration::from_millis(5)))
    );
}

#[test]
fn a_bad_start_or_idle_timeout_names_its_path() {
    assert_server_cases(&[
        (
            r#"{ "command": "x", "start": "lazy" }"#,
            &[
                r#"mcpServers.s.start must be "always" (started with the proxy) or "onDemand" (started on the first request a client makes of it) (got "lazy")"#,
            ],
        ),
        (
            r#"{ "command": "x", "idleTimeoutMs": 0 }"#,
            &[
                "mcpServers.s.idleTimeoutMs must be a positive number of milliseconds no greater than 2147483647 (got 0)",
            ],
        ),
        (
            r#"{ "command": "x", "idleTimeoutMs": "1s" }"#,
            &[
                "mcpServers.s.idleTimeoutMs must be a positive number of milliseconds no greater than 2147483647 (got a string)",
            ],
        ),
    ]);
}

#[test]
fn a_bad_start_in_defaults_names_the_defaults_path() {
    let problems =
        problems(r#"{ "defaults": { "start": true }, "mcpServers": { "a": { "command": "x" } } }"#);
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with("defaults.start must be \"always\"")),
        "{problems:?}"
    );
}

#[test]
fn session_max_age_is_a_top_level_key_of_24_hours_by_default() {
    use std::time::Duration;
    assert_eq!(
        ok(&one(r#"{ "command": "x" }"#)).session_max_age,
        Duration::from_secs(86_400)
    );
    let short = ok(r#"{ "sessionMaxAgeMs": 60000, "mcpServers": {} }"#);
    assert_eq!(short.session_max_age, Duration::from_secs(60));
    assert_eq!(
        problems(r#"{ "sessionMaxAgeMs": 0, "mcpServers": {} }"#),
        [
            "sessionMaxAgeMs must be a positive number of milliseconds no greater than 2147483647 (got 0)"
        ]
    );
    assert_eq!(
        problems(r#"{ "sessionMaxAgeMs": "1h", "mcpServers": {} }"#),
        [
            "sessionMaxAgeMs must be a positive number of milliseconds no greater than 2147483647 (got a string)"
        ]
    );
}
