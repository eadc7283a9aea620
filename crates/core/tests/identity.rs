//! The config keys of identity on the face (SPEC §14) through `parse_config`: `auth`, `rateLimit`,
//! `audit`, `authorize`, `credentials` and `"isolation": "user"` — what parses, what it becomes,
//! and every problem with its path. Never touches a file or the real environment.

use std::path::PathBuf;
use std::time::Duration;

use mcp_supervisor_core::authorize::{Claims, Request, Target};
use mcp_supervisor_core::config::{
    AuditConfig, AuthConfig, Config, ConfigErrors, Credentials, Isolation, RateLimit, Secret,
    ServerConfig, TokenExchange, parse_config,
};

const SECRET: &str = "s3cret-CLIENT-value";

fn env(name: &str) -> Option<String> {
    match name {
        "CLIENT_SECRET" => Some(SECRET.to_owned()),
        "ISSUER" => Some("https://id.example.com".to_owned()),
        "LOG_DIR" => Some("/var/log/mcp".to_owned()),
        "EMPTY" => Some(String::new()),
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

/// The smallest valid `auth` block.
const AUTH: &str =
    r#""auth": { "issuer": "https://id.example.com", "audience": "https://mcp.example.com/mcp" }"#;
/// `auth` with the proxy's own client credentials.
const AUTH_CLIENT: &str = r#""auth": { "issuer": "https://id.example.com", "audience": "https://mcp.example.com/mcp", "clientId": "proxy", "clientSecret": "${CLIENT_SECRET}" }"#;

/// A config with `top` (top-level keys, each followed by a comma) and server `s`.
fn with(top: &str, server: &str) -> String {
    format!(r#"{{ {top} "mcpServers": {{ "s": {server} }} }}"#)
}

fn server(top: &str, server: &str) -> ServerConfig {
    ok(&with(top, server)).servers.remove(0)
}

fn auth_of(block: &str) -> AuthConfig {
    match ok(&with(
        &format!(r#""auth": {block},"#),
        r#"{ "command": "x" }"#,
    ))
    .auth
    {
        Some(auth) => auth,
        None => panic!("no auth from {block}"),
    }
}

fn auth_problems(block: &str) -> Vec<String> {
    problems(&with(
        &format!(r#""auth": {block},"#),
        r#"{ "command": "x" }"#,
    ))
}

// === auth ===

#[test]
fn without_auth_the_config_has_none() {
    let config = ok(&with("", r#"{ "command": "x" }"#));
    assert_eq!(config.auth, None);
    assert_eq!(config.rate_limit, None);
    assert_eq!(config.audit, None);
    let s = &config.servers[0];
    assert_eq!(
        (&s.rate_limit, &s.authorize, &s.credentials),
        (&None, &None, &None)
    );
}

#[test]
fn auth_with_issuer_and_audience_takes_the_defaults() {
    let auth = auth_of(
        r#"{ "issuer": "https://id.example.com", "audience": "https://mcp.example.com/mcp" }"#,
    );
    assert_eq!(
        auth,
        AuthConfig {
            issuer: "https://id.example.com".into(),
            audience: "https://mcp.example.com/mcp".into(),
            scopes: vec![],
            admin_scopes: vec![],
            jwks_uri: None,
            clock_skew: Duration::from_secs(60),
            client_id: None,
            client_secret: None,
        }
    );
    assert_eq!(auth.client_credentials(), None);
}

#[test]
fn every_auth_key_is_read_and_strings_expand_variables() {
    let auth = auth_of(
        r#"{ "issuer": "${ISSUER}", "audience": "https://mcp.example.com/mcp",
             "scopes": ["mcp:tools", "mcp:prompts"], "adminScopes": ["mcp:admin"],
             "jwksUri": "https://id.example.com/keys", "clockSkewMs": 5000,
             "clientId": "proxy", "clientSecret": "${CLIENT_SECRET}" }"#,
    );
    assert_eq!(auth.issuer, "https://id.example.com");
    assert_eq!(auth.scopes, ["mcp:tools", "mcp:prompts"]);
    assert_eq!(auth.admin_scopes, ["mcp:admin"]);
    assert_eq!(
        auth.jwks_uri.as_deref(),
        Some("https://id.example.com/keys")
    );
    assert_eq!(auth.clock_skew, Duration::from_millis(5000));
    assert_eq!(auth.client_id.as_deref(), Some("proxy"));
    assert_eq!(auth.client_secret, Some(Secret::new(SECRET)));
    assert_eq!(
        auth.client_credentials().map(|(id, s)| (id, s.expose())),
        Some(("proxy", SECRET))
    );
}

#[test]
fn the_client_secret_never_shows() {
    let config = ok(&with(&format!("{AUTH_CLIENT},"), r#"{ "command": "x" }"#));
    assert!(!format!("{config:?}").contains(SECRET));
    // Nor in a problem about it.
    let wrong = auth_problems(
        r#"{ "issuer": "https://id.example.com", "audience": "https://a.example.com",
             "clientId": "p", "clientSecret": "s3cret-CLIENT-value\n" }"#,
    );
    assert_eq!(
        wrong,
        ["auth.clientSecret must not contain control characters"]
    );
}

#[test]
fn issuer_and_audience_are_required() {
    assert_eq!(
        auth_problems("{}"),
        [
            "auth.issuer is missing: name the authorization server whose tokens are accepted (its issuer URL, e.g. https://id.example.com)",
            "auth.audience is missing: name this proxy's resource URL, which its tokens must be issued for (e.g. https://mcp.example.com/mcp)",
        ]
    );
    assert_eq!(
        auth_problems("[]"),
        ["auth must be an object (got an array)"]
    );
}

#[test]
fn auth_urls_must_be_https_unless_the_host_is_loopback() {
    let local = auth_of(
        r#"{ "issuer": "http://localhost:8080/realms/dev", "audience": "http://127.0.0.1:3000/mcp",
             "jwksUri": "http://[::1]:8080/keys" }"#,
    );
    assert_eq!(local.issuer, "http://localhost:8080/realms/dev");
    const HTTPS: &str =
        "must be an https:// URL (http:// only for a loopback host: localhost, 127.0.0.1 or [::1])";
    assert_eq!(
        auth_problems(
            r#"{ "issuer": "http://id.example.com", "audience": "http://mcp.example.com/mcp",
                 "jwksUri": "http://id.example.com/keys" }"#
        ),
        [
            format!("auth.issuer {HTTPS}"),
            format!("auth.audience {HTTPS}"),
            format!("auth.jwksUri {HTTPS}"),
        ]
    );
    assert_eq!(
        auth_problems(
            r#"{ "issuer": "https://id.example.com/?tenant=1", "audience": "https://mcp.example.com/mcp#x" }"#
        ),
        [
            "auth.issuer must not have a query (?…): an issuer is a plain https URL (RFC 8414)",
            "auth.audience must not have a fragment (#…)",
        ]
    );
    assert_eq!(
        auth_problems(r#"{ "issuer": "id.example.com", "audience": 3 }"#),
        [
            "auth.audience must be a string (got a number); write it in quotes",
            "auth.issuer must be an http:// or https:// URL",
        ]
    );
}

#[test]
fn clock_skew_is_0_to_600000_milliseconds() {
    for (ms, skew) in [(0, 0), (600_000, 600_000), (1, 1)] {
        let auth = auth_of(&format!(
            r#"{{ "issuer": "https://i.example.com", "audience": "https://a.example.com", "clockSkewMs": {ms} }}"#
        ));
        assert_eq!(auth.clock_skew, Duration::from_millis(skew));
    }
    for (bad, got) in [
        ("600001", "600001"),
        ("-1", "-1"),
        ("1.5", "1.5"),
        ("\"60\"", "a string"),
    ] {
        assert_eq!(
            auth_problems(&format!(
                r#"{{ "issuer": "https://i.example.com", "audience": "https://a.example.com", "clockSkewMs": {bad} }}"#
            )),
            [format!(
                "auth.clockSkewMs must be a whole number of milliseconds from 0 to 600000 (ten minutes) (got {got})"
            )]
        );
    }
}

#[test]
fn scopes_are_lists_of_single_scopes() {
    assert_eq!(
        auth_problems(
            r#"{ "issuer": "https://i.example.com", "audience": "https://a.example.com",
                 "scopes": ["ok", "two words", 3, ""], "adminScopes": "admin" }"#
        ),
        [
            "auth.scopes[1] must be one scope: a non-empty string of printable ASCII without spaces, quotes or backslashes (got a string that is not one scope)",
            "auth.scopes[2] must be one scope: a non-empty string of printable ASCII without spaces, quotes or backslashes (got a number)",
            "auth.scopes[3] must be one scope: a non-empty string of printable ASCII without spaces, quotes or backslashes (got a string that is not one scope)",
            "auth.adminScopes must be an array of scopes, like [\"mcp:tools\"] (got a string)",
        ]
    );
}

#[test]
fn client_id_and_secret_are_both_or_neither() {
    assert_eq!(
        auth_problems(
            r#"{ "issuer": "https://i.example.com", "audience": "https://a.example.com", "clientId": "p" }"#
        ),
        [
            "auth.clientId is set without clientSecret: the proxy's own client credentials are both or neither"
        ]
    );
    assert_eq!(
        auth_problems(
            r#"{ "issuer": "https://i.example.com", "audience": "https://a.example.com", "clientSecret": "${CLIENT_SECRET}" }"#
        ),
        [
            "auth.clientSecret is set without clientId: the proxy's own client credentials are both or neither"
        ]
    );
    assert_eq!(
        auth_problems(
            r#"{ "issuer": "https://i.example.com", "audience": "https://a.example.com", "clientId": " ", "clientSecret": "${NOPE}" }"#
        ),
        [
            "auth.clientId is empty: give the proxy's client id at the issuer, or remove the key",
            "auth.clientSecret references ${NOPE}, which is not set",
        ]
    );
}

#[test]
fn unknown_auth_keys_are_named() {
    assert_eq!(
        auth_problems(
            r#"{ "issuer": "https://i.example.com", "audience": "https://a.example.com", "jwks_uri": "x" }"#
        ),
        [
            "auth.jwks_uri is not a known key; did you mean \"jwksUri\"? (known: issuer, audience, scopes, adminScopes, jwksUri, clockSkewMs, clientId, clientSecret)"
        ]
    );
}

// === rateLimit ===

fn top_rate(block: &str) -> Result<Option<RateLimit>, Vec<String>> {
    parse(&with(
        &format!(r#""rateLimit": {block},"#),
        r#"{ "command": "x" }"#,
    ))
    .map(|c| c.rate_limit)
    .map_err(|e| e.problems.iter().map(ToString::to_string).collect())
}

#[test]
fn a_rate_limit_without_burst_gets_one_second_of_requests_and_at_least_one() {
    for (rate, burst) in [("10", 10), ("2.5", 3), ("0.2", 1), ("1", 1)] {
        let limit = top_rate(&format!(r#"{{ "requestsPerSecond": {rate} }}"#));
        let expected: f64 = rate.parse().unwrap_or_default();
        assert_eq!(
            limit,
            Ok(Some(RateLimit {
                requests_per_second: expected,
                burst
            })),
            "{rate}"
        );
    }
    assert_eq!(
        top_rate(r#"{ "requestsPerSecond": 0.5, "burst": 20 }"#),
        Ok(Some(RateLimit {
            requests_per_second: 0.5,
            burst: 20
        }))
    );
}

#[test]
fn a_bad_rate_limit_names_its_path() {
    const RATE: &str = "must be a positive number of requests per second (0.5 is one every 2 seconds) no greater than 2147483647";
    const BURST: &str = "must be a positive whole number of requests no greater than 2147483647; leave it out for one second's worth";
    let cases: &[(&str, &[String])] = &[
        (
            r#"{ "requestsPerSecond": 0 }"#,
            &[format!("rateLimit.requestsPerSecond {RATE} (got 0)")],
        ),
        (
            r#"{ "requestsPerSecond": -1 }"#,
            &[format!("rateLimit.requestsPerSecond {RATE} (got -1)")],
        ),
        (
            r#"{ "requestsPerSecond": "10" }"#,
            &[format!("rateLimit.requestsPerSecond {RATE} (got a string)")],
        ),
        (
            r#"{ "requestsPerSecond": 3e9 }"#,
            &[format!("rateLimit.requestsPerSecond {RATE} (got 3000000000)")],
        ),
        (
            r#"{ "burst": 5 }"#,
            &["rateLimit.requestsPerSecond is missing: say how many requests per second each caller may make".to_owned()],
        ),
        (
            r#"{ "requestsPerSecond": 1, "burst": 0 }"#,
            &[format!("rateLimit.burst {BURST} (got 0)")],
        ),
        (
            r#"{ "requestsPerSecond": 1, "burst": 1.5 }"#,
            &[format!("rateLimit.burst {BURST} (got 1.5)")],
        ),
        (
            r#"{ "requestsPerSecond": 1, "burst": "5" }"#,
            &[format!("rateLimit.burst {BURST} (got a string)")],
        ),
        (
            r#"{ "requestsPerSecond": 1, "rps": 5 }"#,
            &["rateLimit.rps is not a known key (known: requestsPerSecond, burst)".to_owned()],
        ),
        (
            "10",
            &["rateLimit must be an object (got a number)".to_owned()],
        ),
    ];
    for (block, expected) in cases {
        assert_eq!(top_rate(block), Err(expected.to_vec()), "{block}");
    }
}

#[test]
fn a_server_rate_limit_comes_from_defaults_unless_the_server_has_its_own() {
    let config = ok(r#"{
        "defaults": { "rateLimit": { "requestsPerSecond": 5 } },
        "mcpServers": {
            "a": { "command": "x" },
            "b": { "command": "x", "rateLimit": { "requestsPerSecond": 1, "burst": 2 } }
        }
    }"#);
    assert_eq!(
        config.rate_limit, None,
        "defaults are not the top-level limit"
    );
    let rate = |name: &str| config.server(name).and_then(|s| s.rate_limit);
    assert_eq!(
        rate("a"),
        Some(RateLimit {
            requests_per_second: 5.0,
            burst: 5
        })
    );
    assert_eq!(
        rate("b"),
        Some(RateLimit {
            requests_per_second: 1.0,
            burst: 2
        })
    );
    assert_eq!(
        problems(
            r#"{ "defaults": { "rateLimit": { "requestsPerSecond": 0 } }, "mcpServers": { "a": { "command": "x", "rateLimit": {} } } }"#
        ),
        [
            "defaults.rateLimit.requestsPerSecond must be a positive number of requests per second (0.5 is one every 2 seconds) no greater than 2147483647 (got 0)",
            "mcpServers.a.rateLimit.requestsPerSecond is missing: say how many requests per second each caller may make",
        ]
    );
}

// === audit ===

#[test]
fn audit_takes_a_path_as_written_after_expansion() {
    let audit = |path: &str| {
        ok(&with(
            &format!(r#""audit": {{ "path": "{path}" }},"#),
            r#"{ "command": "x" }"#,
        ))
        .audit
    };
    assert_eq!(
        audit("${LOG_DIR}/audit.jsonl"),
        Some(AuditConfig {
            path: PathBuf::from("/var/log/mcp/audit.jsonl")
        })
    );
    assert_eq!(
        audit("audit.jsonl"),
        Some(AuditConfig {
            path: PathBuf::from("audit.jsonl")
        })
    );
}

#[test]
fn a_bad_audit_block_names_its_path() {
    let cases: &[(&str, &[&str])] = &[
        (
            "{}",
            &["audit.path is missing: name the file audit lines are appended to"],
        ),
        (
            r#"{ "path": "" }"#,
            &["audit.path is empty: name the file audit lines are appended to"],
        ),
        (
            r#"{ "path": "${EMPTY}" }"#,
            &["audit.path is empty: name the file audit lines are appended to"],
        ),
        (
            r#"{ "path": 1 }"#,
            &["audit.path must be a string (got a number); write it in quotes"],
        ),
        (
            r#"{ "path": "a", "rotate": true }"#,
            &["audit.rotate is not a known key (known: path)"],
        ),
        (
            r#""audit.log""#,
            &["audit must be an object (got a string)"],
        ),
    ];
    for (block, expected) in cases {
        assert_eq!(
            problems(&with(
                &format!(r#""audit": {block},"#),
                r#"{ "command": "x" }"#
            )),
            *expected,
            "{block}"
        );
    }
}

// === authorize ===

#[test]
fn an_authorize_rule_is_compiled_from_the_server_or_from_defaults() {
    let config = ok(&format!(
        r#"{{ {AUTH},
        "defaults": {{ "authorize": "\"admin\" in jwt.groups" }},
        "mcpServers": {{
            "a": {{ "command": "x" }},
            "b": {{ "command": "x", "authorize": "mcp.tool.name.startsWith(\"read_\")" }}
        }}
    }}"#
    ));
    let rule = |name: &str| {
        config
            .server(name)
            .and_then(|s| s.authorize.clone())
            .map(|r| r.source().to_owned())
    };
    assert_eq!(rule("a").as_deref(), Some(r#""admin" in jwt.groups"#));
    assert_eq!(
        rule("b").as_deref(),
        Some(r#"mcp.tool.name.startsWith("read_")"#)
    );
    // The compiled rule judges requests.
    let b = config.server("b").and_then(|s| s.authorize.as_ref());
    let claims = Claims::default();
    let read = Request {
        jwt: &claims,
        server: "b",
        method: "tools/call",
        target: Target::Tool("read_file"),
    };
    assert_eq!(b.map(|r| r.allows(&read)), Some(true));
}

#[test]
fn servers_with_the_same_rule_compare_equal_and_a_changed_rule_does_not() {
    let a = server(
        &format!("{AUTH},"),
        r#"{ "command": "x", "authorize": "jwt.sub == 'a'" }"#,
    );
    let same = server(
        &format!("{AUTH},"),
        r#"{ "command": "x", "authorize": "jwt.sub == 'a'" }"#,
    );
    let changed = server(
        &format!("{AUTH},"),
        r#"{ "command": "x", "authorize": "jwt.sub == 'b'" }"#,
    );
    assert_eq!(a, same);
    assert_ne!(a, changed);
}

#[test]
fn a_rule_that_does_not_compile_fails_the_config_naming_its_path() {
    let found = problems(&format!(
        r#"{{ {AUTH},
        "defaults": {{ "authorize": "jwt.sub ==" }},
        "mcpServers": {{
            "a": {{ "command": "x", "authorize": "mpc.method == 'x'" }},
            "b": {{ "command": "x", "authorize": true }},
            "c": {{ "command": "x", "authorize": "" }}
        }}
    }}"#
    ));
    assert_eq!(found.len(), 4, "{found:#?}");
    assert!(
        found[0].starts_with("defaults.authorize does not compile as CEL: at column 11: "),
        "{}",
        found[0]
    );
    assert_eq!(
        found[1],
        "mcpServers.a.authorize does not compile: it names \"mpc\", which a rule does not have; a rule sees jwt (the token's claims) and mcp (server, method, tool.name, prompt.name, resource.uri)"
    );
    assert_eq!(
        found[2],
        "mcpServers.b.authorize must be a CEL condition in a string, such as \"\\\"admin\\\" in jwt.groups\" (got a boolean)"
    );
    assert_eq!(
        found[3],
        "mcpServers.c.authorize is empty: write a CEL condition such as \"admin\" in jwt.groups"
    );
}

#[test]
fn authorize_needs_auth_and_a_default_rule_is_reported_once() {
    assert_eq!(
        problems(
            r#"{
            "defaults": { "authorize": "true" },
            "mcpServers": { "a": { "command": "x" }, "b": { "command": "x", "authorize": "true" } }
        }"#
        ),
        [
            "defaults.authorize needs \"auth\" at the top of the config: without it no caller has an identity (jwt would hold no claims)",
            "mcpServers.b.authorize needs \"auth\" at the top of the config: without it no caller has an identity (jwt would hold no claims)",
        ]
    );
}

// === isolation: user ===

#[test]
fn isolation_user_gives_one_instance_per_identity_with_auth() {
    let s = server(
        &format!("{AUTH},"),
        r#"{ "command": "x", "isolation": "user" }"#,
    );
    assert_eq!(s.isolation, Isolation::User);
    let config = ok(&format!(
        r#"{{ {AUTH}, "defaults": {{ "isolation": "user" }}, "mcpServers": {{ "a": {{ "command": "x" }} }} }}"#
    ));
    assert_eq!(config.servers[0].isolation, Isolation::User);
}

#[test]
fn isolation_user_needs_auth() {
    assert_eq!(
        problems(
            r#"{
            "defaults": { "isolation": "user" },
            "mcpServers": { "a": { "command": "x" }, "b": { "url": "https://h/mcp", "isolation": "user" } }
        }"#
        ),
        [
            "defaults.isolation is \"user\", which needs \"auth\" at the top of the config: without it no caller has an identity",
            "mcpServers.b.isolation is \"user\", which needs \"auth\" at the top of the config: without it no caller has an identity",
        ]
    );
}

// === credentials ===

#[test]
fn token_exchange_credentials_are_read_on_a_url_server() {
    let s = server(
        &format!("{AUTH_CLIENT},"),
        r#"{ "url": "https://api.example.com/mcp",
             "credentials": { "tokenExchange": { "audience": "https://api.example.com", "scope": "repo read:org" } } }"#,
    );
    assert_eq!(
        s.credentials,
        Some(Credentials::TokenExchange(TokenExchange {
            audience: "https://api.example.com".into(),
            scope: Some("repo read:org".into()),
        }))
    );
    assert_eq!(
        problems(&with(
            &format!("{AUTH_CLIENT},"),
            r#"{ "type": "sse", "url": "https://api.example.com/sse",
                 "credentials": { "tokenExchange": { "audience": "https://api.example.com" } } }"#,
        )),
        [
            "mcpServers.s.credentials applies only to streamable HTTP servers; this one is \"type\": \"sse\" (the old SSE transport), whose requests carry no token"
        ]
    );
}

#[test]
fn a_server_with_credentials_runs_an_instance_per_identity_unless_it_says_session() {
    const EXCHANGE: &str =
        r#""credentials": { "tokenExchange": { "audience": "https://api.example.com" } }"#;
    let top = format!("{AUTH_CLIENT},");
    let url = |more: &str| format!(r#"{{ "url": "https://h/mcp", {EXCHANGE}{more} }}"#);
    assert_eq!(server(&top, &url("")).isolation, Isolation::User);
    assert_eq!(
        server(&top, &url(r#", "isolation": "session""#)).isolation,
        Isolation::Session
    );
    // A shared default gives way; the server's own "shared" is refused.
    let defaults = format!(r#"{top} "defaults": {{ "isolation": "shared" }},"#);
    assert_eq!(server(&defaults, &url("")).isolation, Isolation::User);
    assert_eq!(
        problems(&with(&top, &url(r#", "isolation": "shared""#))),
        [
            "mcpServers.s.isolation cannot be \"shared\" on a server with \"credentials\": its connection carries one caller's token; use \"user\" (the default with credentials) or \"session\""
        ]
    );
    // Without credentials, shared stays the default.
    assert_eq!(
        server(&top, r#"{ "url": "https://h/mcp" }"#).isolation,
        Isolation::Shared
    );
}

#[test]
fn credentials_need_a_url_server_auth_and_the_proxys_client_credentials() {
    const EXCHANGE: &str =
        r#""credentials": { "tokenExchange": { "audience": "https://api.example.com" } }"#;
    assert_eq!(
        problems(&with(
            &format!("{AUTH_CLIENT},"),
            &format!(r#"{{ "command": "x", {EXCHANGE} }}"#)
        )),
        [
            "mcpServers.s.credentials applies only to \"url\" servers (the token they obtain goes in the server's HTTP requests); this server has \"command\""
        ]
    );
    assert_eq!(
        problems(&with(
            "",
            &format!(r#"{{ "url": "https://h/mcp", {EXCHANGE} }}"#)
        )),
        [
            "mcpServers.s.credentials needs \"auth\" at the top of the config: without it no caller has an identity to exchange a token for"
        ]
    );
    assert_eq!(
        problems(&with(
            &format!("{AUTH},"),
            &format!(r#"{{ "url": "https://h/mcp", {EXCHANGE} }}"#)
        )),
        [
            "mcpServers.s.credentials.tokenExchange uses the proxy's own client credentials: set auth.clientId and auth.clientSecret"
        ]
    );
}

#[test]
fn a_bad_credentials_block_names_its_path() {
    let cases: &[(&str, &[&str])] = &[
        (
            "{}",
            &[
                "mcpServers.s.credentials must say how the server's token is obtained: {\"tokenExchange\": {\"audience\": URL}}",
            ],
        ),
        (
            r#"{ "tokenExchange": {} }"#,
            &[
                "mcpServers.s.credentials.tokenExchange.audience is missing: name the upstream server the exchanged token is for (its URL)",
            ],
        ),
        (
            r#"{ "tokenExchange": { "audience": "api" } }"#,
            &["mcpServers.s.credentials.tokenExchange.audience must be an http:// or https:// URL"],
        ),
        (
            r#"{ "tokenExchange": { "audience": "https://a", "scope": "a  b" } }"#,
            &[
                "mcpServers.s.credentials.tokenExchange.scope must be one or more scopes separated by spaces, each printable ASCII without quotes or backslashes",
            ],
        ),
        (
            r#"{ "tokenExchange": { "audience": "https://a", "resource": "x" } }"#,
            &[
                "mcpServers.s.credentials.tokenExchange.resource is not a known key (known: audience, scope)",
            ],
        ),
        (
            r#"{ "tokenExchange": { "audience": "https://a" }, "bearer": "x" }"#,
            &["mcpServers.s.credentials.bearer is not a known key (known: tokenExchange)"],
        ),
        (
            r#""exchange""#,
            &["mcpServers.s.credentials must be an object (got a string)"],
        ),
    ];
    for (block, expected) in cases {
        assert_eq!(
            problems(&with(
                &format!("{AUTH_CLIENT},"),
                &format!(r#"{{ "url": "https://h/mcp", "credentials": {block} }}"#)
            )),
            *expected,
            "{block}"
        );
    }
}

#[test]
fn credentials_are_not_a_defaults_key() {
    let found = problems(&format!(
        r#"{{ {AUTH_CLIENT}, "defaults": {{ "credentials": {{}} }}, "mcpServers": {{}} }}"#
    ));
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].starts_with("defaults.credentials is not a known key"),
        "{found:?}"
    );
}
