//! The config keys of identity on the face (SPEC §14): `auth`, `rateLimit` and `audit` at the top;
//! `authorize` and `rateLimit` on a server or in `defaults`; `credentials` on a `url` server. It
//! owns their typed values, how stage 1 reads them (more methods of the raw walker) and how stage 2
//! expands and relates them. It never reads the environment (the lookup is handed in) and never
//! puts a string of the config, a secret above all, into a message.

use std::path::PathBuf;
use std::time::Duration;

use super::build::{Lookup, check_url, expand_given, expand_text};
use super::json::{Json, Number};
use super::raw::{
    Given, MAX_MS, RawServer, RawTuning, Text, Walker, check_millis, check_positive, child, index,
};
use super::{Isolation, Problem, Secret, TransportConfig};
use crate::authorize::Rule;

const AUTH_KEYS: &[&str] = &[
    "issuer",
    "audience",
    "scopes",
    "adminScopes",
    "jwksUri",
    "clockSkewMs",
    "clientId",
    "clientSecret",
];
const RATE_LIMIT_KEYS: &[&str] = &["requestsPerSecond", "burst"];
const AUDIT_KEYS: &[&str] = &["path"];
const CREDENTIALS_KEYS: &[&str] = &["tokenExchange"];
const TOKEN_EXCHANGE_KEYS: &[&str] = &["audience", "scope"];

/// `auth.clockSkewMs` when the config does not say: one minute.
pub const DEFAULT_CLOCK_SKEW: Duration = Duration::from_millis(60_000);
/// The largest `auth.clockSkewMs`: ten minutes.
pub const MAX_CLOCK_SKEW: Duration = Duration::from_millis(600_000);

// === Typed values ===

/// The HTTP face as an OAuth 2.1 resource server (`auth`): whose tokens it accepts, for which
/// audience, with which scopes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthConfig {
    /// The authorization server (`issuer`): a token's `iss` must be exactly this.
    pub issuer: String,
    /// This proxy's resource URL (`audience`): a token's `aud` must hold it; RFC 9728's
    /// `resource`.
    pub audience: String,
    /// Every scope a token needs for `/mcp` (`scopes`; none by default).
    pub scopes: Vec<String>,
    /// Every scope a token needs for the admin endpoints (`adminScopes`; none by default).
    pub admin_scopes: Vec<String>,
    /// Where the issuer's keys are (`jwksUri`); `None`: found from the issuer's metadata.
    pub jwks_uri: Option<String>,
    /// How far `exp` and `nbf` may be off (`clockSkewMs`).
    pub clock_skew: Duration,
    /// The proxy's own client at the issuer (`clientId`), for token exchange.
    pub client_id: Option<String>,
    /// That client's secret (`clientSecret`, usually `${VAR}`).
    pub client_secret: Option<Secret>,
}

impl AuthConfig {
    /// The proxy's own client credentials, when both are set (token exchange needs them).
    pub fn client_credentials(&self) -> Option<(&str, &Secret)> {
        Some((self.client_id.as_deref()?, self.client_secret.as_ref()?))
    }
}

/// A token bucket per caller identity (`rateLimit`): `burst` requests at once, refilled at
/// `requests_per_second`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RateLimit {
    /// Positive and finite; may be fractional (0.5: one request every two seconds).
    pub requests_per_second: f64,
    /// At least 1; `max(1, ceil(requests_per_second))` unless set.
    pub burst: u32,
}

impl RateLimit {
    /// The burst when the config does not say: one second's worth, and at least one request.
    pub fn default_burst(requests_per_second: f64) -> u32 {
        // requestsPerSecond is at most MAX_MS, so its ceiling fits a u32; `as` saturates anyway.
        (requests_per_second.ceil() as u32).max(1)
    }
}

/// The audit log (`audit`): one JSON line per client request that reaches a server or is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditConfig {
    /// The file lines are appended to (`audit.path`), as written after `${VAR}` expansion; a
    /// relative path is relative to the proxy's working directory.
    pub path: PathBuf,
}

/// How a `url` server gets a token that carries the caller's identity (`credentials`); the
/// client's own token never goes upstream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Credentials {
    /// RFC 8693 token exchange at the issuer's token endpoint (`tokenExchange`), with the
    /// proxy's own client credentials.
    TokenExchange(TokenExchange),
}

/// `credentials.tokenExchange`: what the exchanged token is for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenExchange {
    /// The upstream server the token is for (`audience`).
    pub audience: String,
    /// The scopes asked for (`scope`, space-separated); `None`: the issuer's choice.
    pub scope: Option<String>,
}

// === Raw values ===

/// The `auth` block as written: each field checked alone, nothing expanded.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct RawAuth {
    pub(crate) issuer: Given<Text>,
    pub(crate) audience: Given<Text>,
    pub(crate) scopes: Given<Vec<String>>,
    pub(crate) admin_scopes: Given<Vec<String>>,
    pub(crate) jwks_uri: Given<Text>,
    pub(crate) clock_skew_ms: Given<u64>,
    pub(crate) client_id: Given<Text>,
    pub(crate) client_secret: Given<Text>,
}

/// A server's `credentials` block as written.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum RawCredentials {
    TokenExchange { audience: Text, scope: Option<Text> },
}

// === Stage 1: more of the walker ===

const RATE_RULE: &str = "must be a positive number of requests per second (0.5 is one every 2 seconds) no greater than 2147483647";
const BURST_RULE: &str = "must be a positive whole number of requests no greater than 2147483647; leave it out for one second's worth";
const SCOPE_RULE: &str = "must be one scope: a non-empty string of printable ASCII without spaces, quotes or backslashes";

impl Walker<'_> {
    /// `auth`: issuer and audience required, the rest optional.
    pub(super) fn auth(&mut self, value: &Json) -> Given<RawAuth> {
        let Some(fields) = self.object("auth", value, Some(AUTH_KEYS)) else {
            return Given::Invalid;
        };
        let at = |key: &str| child("auth", key);
        let mut raw = RawAuth::default();
        match fields.get("issuer") {
            Some(v) => raw.issuer = self.text(&at("issuer"), v),
            None => {
                self.problem(
                    &at("issuer"),
                    "is missing: name the authorization server whose tokens are accepted (its issuer URL, e.g. https://id.example.com)",
                );
                raw.issuer = Given::Invalid;
            }
        }
        match fields.get("audience") {
            Some(v) => raw.audience = self.text(&at("audience"), v),
            None => {
                self.problem(
                    &at("audience"),
                    "is missing: name this proxy's resource URL, which its tokens must be issued for (e.g. https://mcp.example.com/mcp)",
                );
                raw.audience = Given::Invalid;
            }
        }
        if let Some(v) = fields.get("scopes") {
            raw.scopes = self.scopes(&at("scopes"), v);
        }
        if let Some(v) = fields.get("adminScopes") {
            raw.admin_scopes = self.scopes(&at("adminScopes"), v);
        }
        if let Some(v) = fields.get("jwksUri") {
            raw.jwks_uri = self.text(&at("jwksUri"), v);
        }
        if let Some(v) = fields.get("clockSkewMs") {
            raw.clock_skew_ms = self.clock_skew(&at("clockSkewMs"), v);
        }
        if let Some(v) = fields.get("clientId") {
            raw.client_id = self.text(&at("clientId"), v);
        }
        if let Some(v) = fields.get("clientSecret") {
            raw.client_secret = self.text(&at("clientSecret"), v);
        }
        Given::Value(raw)
    }

    fn scopes(&mut self, path: &str, value: &Json) -> Given<Vec<String>> {
        let Json::Array(items) = value else {
            self.problem(
                path,
                format!(
                    "must be an array of scopes, like [\"mcp:tools\"] (got {})",
                    value.kind()
                ),
            );
            return Given::Invalid;
        };
        let mut scopes = Vec::with_capacity(items.len());
        let mut ok = true;
        for (i, item) in items.iter().enumerate() {
            match item {
                Json::String(s) if is_scope(s) => scopes.push(s.clone()),
                other => {
                    let got = match other {
                        Json::String(_) => "a string that is not one scope",
                        other => other.kind(),
                    };
                    self.problem(&index(path, i), format!("{SCOPE_RULE} (got {got})"));
                    ok = false;
                }
            }
        }
        if ok {
            Given::Value(scopes)
        } else {
            Given::Invalid
        }
    }

    /// `clockSkewMs`: 0 to 600000 milliseconds.
    fn clock_skew(&mut self, path: &str, value: &Json) -> Given<u64> {
        const RULE: &str = "must be a whole number of milliseconds from 0 to 600000 (ten minutes)";
        let max = MAX_CLOCK_SKEW.as_millis();
        let checked = match value {
            Json::Number(n) => check_millis(*n, true)
                .ok()
                .filter(|ms| u128::from(*ms) <= max)
                .ok_or_else(|| format!("{RULE} (got {n})")),
            other => Err(format!("{RULE} (got {})", other.kind())),
        };
        self.checked(path, checked)
    }

    /// `rateLimit`, at the top, on a server or in `defaults`.
    pub(super) fn rate_limit(&mut self, path: &str, value: &Json) -> Given<RateLimit> {
        let Some(fields) = self.object(path, value, Some(RATE_LIMIT_KEYS)) else {
            return Given::Invalid;
        };
        let rate_path = child(path, "requestsPerSecond");
        let rate = match fields.get("requestsPerSecond") {
            None => {
                self.problem(
                    &rate_path,
                    "is missing: say how many requests per second each caller may make",
                );
                Given::Invalid
            }
            Some(v) => self.checked(&rate_path, check_rate(v)),
        };
        let burst = match fields.get("burst") {
            None => Given::Absent,
            Some(Json::Number(n)) => {
                self.checked(&child(path, "burst"), check_positive(*n, BURST_RULE))
            }
            Some(other) => {
                self.problem(
                    &child(path, "burst"),
                    format!("{BURST_RULE} (got {})", other.kind()),
                );
                Given::Invalid
            }
        };
        match (rate, burst) {
            (Given::Value(requests_per_second), Given::Value(burst)) => Given::Value(RateLimit {
                requests_per_second,
                burst,
            }),
            (Given::Value(requests_per_second), Given::Absent) => Given::Value(RateLimit {
                requests_per_second,
                burst: RateLimit::default_burst(requests_per_second),
            }),
            _ => Given::Invalid,
        }
    }

    /// `audit: { "path": FILE }`.
    pub(super) fn audit(&mut self, value: &Json) -> Given<Text> {
        let Some(fields) = self.object("audit", value, Some(AUDIT_KEYS)) else {
            return Given::Invalid;
        };
        match fields.get("path") {
            Some(v) => self.text(&child("audit", "path"), v),
            None => {
                self.problem(
                    &child("audit", "path"),
                    "is missing: name the file audit lines are appended to",
                );
                Given::Invalid
            }
        }
    }

    /// `authorize`: a CEL rule, compiled here, once.
    pub(super) fn authorize(&mut self, path: &str, value: &Json) -> Given<Rule> {
        match value {
            Json::String(source) => {
                let compiled = Rule::compile(source).map_err(|e| e.reason());
                self.checked(path, compiled)
            }
            other => {
                self.problem(
                    path,
                    format!(
                        "must be a CEL condition in a string, such as \"\\\"admin\\\" in jwt.groups\" (got {})",
                        other.kind()
                    ),
                );
                Given::Invalid
            }
        }
    }

    /// `credentials: { "tokenExchange": { "audience": URL, "scope": "…" } }`.
    pub(super) fn credentials(&mut self, path: &str, value: &Json) -> Given<RawCredentials> {
        let Some(fields) = self.object(path, value, Some(CREDENTIALS_KEYS)) else {
            return Given::Invalid;
        };
        let exchange_path = child(path, "tokenExchange");
        let Some(exchange) = fields.get("tokenExchange") else {
            self.problem(
                path,
                "must say how the server's token is obtained: {\"tokenExchange\": {\"audience\": URL}}",
            );
            return Given::Invalid;
        };
        let Some(fields) = self.object(&exchange_path, exchange, Some(TOKEN_EXCHANGE_KEYS)) else {
            return Given::Invalid;
        };
        let at = |key: &str| child(&exchange_path, key);
        let audience = match fields.get("audience") {
            Some(v) => self.text(&at("audience"), v),
            None => {
                self.problem(
                    &at("audience"),
                    "is missing: name the upstream server the exchanged token is for (its URL)",
                );
                Given::Invalid
            }
        };
        let scope = match fields.get("scope") {
            None => Given::Absent,
            Some(v) => self.text(&at("scope"), v),
        };
        match (audience, scope) {
            (Given::Value(audience), Given::Value(scope)) => {
                Given::Value(RawCredentials::TokenExchange {
                    audience,
                    scope: Some(scope),
                })
            }
            (Given::Value(audience), Given::Absent) => {
                Given::Value(RawCredentials::TokenExchange {
                    audience,
                    scope: None,
                })
            }
            _ => Given::Invalid,
        }
    }
}

fn check_rate(value: &Json) -> Result<f64, String> {
    let Json::Number(n) = value else {
        return Err(format!("{RATE_RULE} (got {})", value.kind()));
    };
    let rate = match *n {
        Number::Unsigned(u) => u as f64,
        Number::Signed(i) => i as f64,
        Number::Float(f) => f,
    };
    if rate.is_finite() && rate > 0.0 && rate <= MAX_MS as f64 {
        Ok(rate)
    } else {
        Err(format!("{RATE_RULE} (got {n})"))
    }
}

/// RFC 6749's scope-token, so that a scope fits a quoted `WWW-Authenticate` parameter.
fn is_scope(scope: &str) -> bool {
    !scope.is_empty()
        && scope
            .bytes()
            .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\')
}

// === Stage 2: expanded and related ===

/// What the servers' identity keys may rely on: whether `auth` is there, and with the proxy's
/// own client credentials.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum AuthState {
    Absent,
    /// Given but not an object: its problem says enough, so nothing is judged against it.
    Unknown,
    Present {
        client_credentials: bool,
    },
}

impl AuthState {
    pub(super) fn of(auth: &Given<RawAuth>) -> Self {
        match auth {
            Given::Absent => AuthState::Absent,
            Given::Invalid => AuthState::Unknown,
            Given::Value(raw) => AuthState::Present {
                client_credentials: !raw.client_id.is_absent() && !raw.client_secret.is_absent(),
            },
        }
    }
}

/// `auth`, expanded and checked; `None` when absent or wrong (its problems recorded).
pub(super) fn build_auth(
    auth: &Given<RawAuth>,
    env: Lookup<'_>,
    problems: &mut Vec<Problem>,
) -> Option<AuthConfig> {
    let raw = auth.value()?;
    let issuer = expand_given(&raw.issuer, env, problems, check_issuer);
    let audience = expand_given(&raw.audience, env, problems, check_audience);
    let jwks_uri = expand_given(&raw.jwks_uri, env, problems, check_https_url);
    let client_id = expand_given(&raw.client_id, env, problems, check_client_id);
    let client_secret = expand_given(&raw.client_secret, env, problems, check_client_secret);
    let one_of_two = |given: &Given<Text>| !given.is_absent();
    match (one_of_two(&raw.client_id), one_of_two(&raw.client_secret)) {
        (true, false) => problems.push(Problem::new(
            child("auth", "clientId"),
            "is set without clientSecret: the proxy's own client credentials are both or neither",
        )),
        (false, true) => problems.push(Problem::new(
            child("auth", "clientSecret"),
            "is set without clientId: the proxy's own client credentials are both or neither",
        )),
        (true, true) | (false, false) => {}
    }
    let wrong = |given: &Given<Text>, built: &Option<String>| !given.is_absent() && built.is_none();
    if raw.scopes.is_invalid()
        || raw.admin_scopes.is_invalid()
        || raw.clock_skew_ms.is_invalid()
        || wrong(&raw.jwks_uri, &jwks_uri)
        || wrong(&raw.client_id, &client_id)
        || wrong(&raw.client_secret, &client_secret)
    {
        return None;
    }
    Some(AuthConfig {
        issuer: issuer?,
        audience: audience?,
        scopes: raw.scopes.value().cloned().unwrap_or_default(),
        admin_scopes: raw.admin_scopes.value().cloned().unwrap_or_default(),
        jwks_uri,
        clock_skew: raw
            .clock_skew_ms
            .value()
            .map_or(DEFAULT_CLOCK_SKEW, |ms| Duration::from_millis(*ms)),
        client_id,
        client_secret: client_secret.map(Secret::new),
    })
}

/// `audit.path`, expanded.
pub(super) fn build_audit(
    audit: &Given<Text>,
    env: Lookup<'_>,
    problems: &mut Vec<Problem>,
) -> Option<AuditConfig> {
    let path = expand_given(audit, env, problems, check_audit_path)?;
    Some(AuditConfig {
        path: PathBuf::from(path),
    })
}

/// The keys of a `defaults` block or a server that need `auth`, reported where they are written
/// (so a `defaults` that needs it is reported once, not once per server).
pub(super) fn check_needs_auth(raw: &RawTuning, auth: AuthState, problems: &mut Vec<Problem>) {
    if auth != AuthState::Absent {
        return;
    }
    if raw.isolation.value() == Some(&Isolation::User) {
        problems.push(Problem::new(
            child(&raw.path, "isolation"),
            "is \"user\", which needs \"auth\" at the top of the config: without it no caller has an identity",
        ));
    }
    if !raw.authorize.is_absent() {
        problems.push(Problem::new(
            child(&raw.path, "authorize"),
            "needs \"auth\" at the top of the config: without it no caller has an identity (jwt would hold no claims)",
        ));
    }
}

/// A server's `credentials`, expanded and checked against its transport and `auth`.
pub(super) fn build_credentials(
    raw: &RawServer,
    transport: &TransportConfig,
    auth: AuthState,
    env: Lookup<'_>,
    problems: &mut Vec<Problem>,
) -> Option<Credentials> {
    let path = child(&raw.path, "credentials");
    let RawCredentials::TokenExchange { audience, scope } = raw.credentials.value()?;
    let before = problems.len();
    if matches!(transport, TransportConfig::Stdio { .. }) {
        problems.push(Problem::new(
            &path,
            "applies only to \"url\" servers (the token they obtain goes in the server's HTTP requests); this server has \"command\"",
        ));
    }
    if matches!(transport, TransportConfig::Sse { .. }) {
        problems.push(Problem::new(
            &path,
            "applies only to streamable HTTP servers; this one is \"type\": \"sse\" (the old SSE transport), whose requests carry no token",
        ));
    }
    match auth {
        AuthState::Absent => problems.push(Problem::new(
            &path,
            "needs \"auth\" at the top of the config: without it no caller has an identity to exchange a token for",
        )),
        AuthState::Present {
            client_credentials: false,
        } => problems.push(Problem::new(
            child(&path, "tokenExchange"),
            "uses the proxy's own client credentials: set auth.clientId and auth.clientSecret",
        )),
        AuthState::Present {
            client_credentials: true,
        }
        | AuthState::Unknown => {}
    }
    let audience = expand_text(audience, env, problems, check_url);
    let scope = match scope {
        Some(scope) => Some(expand_text(scope, env, problems, check_scope_list)?),
        None => None,
    };
    if problems.len() > before {
        return None;
    }
    Some(Credentials::TokenExchange(TokenExchange {
        audience: audience?,
        scope,
    }))
}

/// The isolation of a server that has `credentials` or not: such a server's connection
/// carries one identity's token, so it runs an instance per identity (`"user"`) unless it says
/// `"session"` (one per session, which is one identity's too); `"shared"` written on the server
/// itself is a problem. A `"shared"` of `defaults` gives way.
pub(super) fn isolation_with_credentials(
    raw: &RawServer,
    isolation: Isolation,
    has_credentials: bool,
    problems: &mut Vec<Problem>,
) -> Isolation {
    if !has_credentials || isolation != Isolation::Shared {
        return isolation;
    }
    if raw.tuning.isolation.value() == Some(&Isolation::Shared) {
        problems.push(Problem::new(
            child(&raw.path, "isolation"),
            "cannot be \"shared\" on a server with \"credentials\": its connection carries one caller's token; use \"user\" (the default with credentials) or \"session\"",
        ));
    }
    Isolation::User
}

// === Checks of expanded values ===

/// An `issuer`: https (http only on a loopback host), no query, no fragment (RFC 8414).
pub(super) fn check_issuer(url: &str) -> Option<String> {
    check_https_url(url).or_else(|| {
        url.contains('?').then(|| {
            "must not have a query (?…): an issuer is a plain https URL (RFC 8414)".to_owned()
        })
    })
}

/// An `audience`, this proxy's resource URL: https (http only on a loopback host), no fragment.
pub(super) fn check_audience(url: &str) -> Option<String> {
    check_https_url(url)
}

/// An https URL without a fragment; http only for a loopback host (`localhost`, `127.0.0.1`,
/// `[::1]`), where nothing crosses a network.
pub(super) fn check_https_url(url: &str) -> Option<String> {
    if let Some(problem) = check_url(url) {
        return Some(problem);
    }
    let (scheme, rest) = url.split_once("://")?;
    if scheme.eq_ignore_ascii_case("http") && !is_loopback(host(rest)) {
        return Some(
            "must be an https:// URL (http:// only for a loopback host: localhost, 127.0.0.1 or [::1])"
                .to_owned(),
        );
    }
    url.contains('#')
        .then(|| "must not have a fragment (#…)".to_owned())
}

/// The host of `rest` (what follows `scheme://`), without user info or port.
fn host(rest: &str) -> &str {
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = rest.get(..end).unwrap_or(rest);
    let host_port = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    if host_port.starts_with('[') {
        match host_port.find(']') {
            Some(close) => host_port.get(..=close).unwrap_or(host_port),
            None => host_port,
        }
    } else {
        host_port.split(':').next().unwrap_or(host_port)
    }
}

fn is_loopback(host: &str) -> bool {
    ["localhost", "127.0.0.1", "[::1]"]
        .iter()
        .any(|h| h.eq_ignore_ascii_case(host))
}

fn check_client_id(id: &str) -> Option<String> {
    if id.trim().is_empty() {
        Some("is empty: give the proxy's client id at the issuer, or remove the key".to_owned())
    } else if id.chars().any(char::is_control) {
        Some("must not contain control characters".to_owned())
    } else {
        None
    }
}

fn check_client_secret(secret: &str) -> Option<String> {
    if secret.is_empty() {
        Some(
            "is empty: give the client's secret (usually \"${VAR}\"), or remove the key".to_owned(),
        )
    } else if secret.chars().any(char::is_control) {
        Some("must not contain control characters".to_owned())
    } else {
        None
    }
}

fn check_audit_path(path: &str) -> Option<String> {
    if path.is_empty() {
        Some("is empty: name the file audit lines are appended to".to_owned())
    } else if path.contains('\0') {
        Some("contains a NUL character, which a file name cannot hold".to_owned())
    } else {
        None
    }
}

/// `tokenExchange.scope`: one or more scopes separated by single spaces.
fn check_scope_list(scope: &str) -> Option<String> {
    (scope.is_empty() || !scope.split(' ').all(is_scope)).then(|| {
        "must be one or more scopes separated by spaces, each printable ASCII without quotes or backslashes".to_owned()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn https_is_required_except_on_a_loopback_host() {
        for ok in [
            "https://id.example.com",
            "https://id.example.com/realms/x",
            "http://localhost:8080/realms/x",
            "http://127.0.0.1",
            "http://[::1]:9000/",
            "HTTP://LOCALHOST",
        ] {
            assert_eq!(check_https_url(ok), None, "{ok}");
        }
        for bad in [
            "http://id.example.com",
            "http://localhost.example.com",
            "http://localhost@evil.example.com/",
            "http://127.0.0.2",
            "http://[::2]/",
        ] {
            assert_eq!(
                check_https_url(bad).as_deref(),
                Some(
                    "must be an https:// URL (http:// only for a loopback host: localhost, 127.0.0.1 or [::1])"
                ),
                "{bad}"
            );
        }
        assert_eq!(
            check_https_url("ftp://x").as_deref(),
            Some("must be an http:// or https:// URL (got scheme \"ftp\")")
        );
        assert_eq!(
            check_https_url("https://x/#frag").as_deref(),
            Some("must not have a fragment (#…)")
        );
    }

    #[test]
    fn an_issuer_has_no_query() {
        assert_eq!(check_issuer("https://id.example.com/"), None);
        assert!(check_issuer("https://id.example.com/?tenant=1").is_some());
        assert_eq!(check_audience("https://mcp.example.com/mcp?x=1"), None);
    }

    #[test]
    fn hosts_are_found_without_user_info_or_port() {
        assert_eq!(host("a.example.com:443/x"), "a.example.com");
        assert_eq!(host("u:p@h:1?q"), "h");
        assert_eq!(host("[::1]:8080/"), "[::1]");
        assert_eq!(host("h#f"), "h");
    }

    #[test]
    fn scopes_are_rfc_6749_scope_tokens() {
        for ok in ["mcp:tools", "read", "a/b.c-d_e~f!"] {
            assert!(is_scope(ok), "{ok}");
        }
        for bad in ["", "a b", "a\"b", "a\\b", "é", "a\tb"] {
            assert!(!is_scope(bad), "{bad}");
        }
        assert_eq!(check_scope_list("read write"), None);
        assert!(check_scope_list("read  write").is_some());
        assert!(check_scope_list("").is_some());
    }

    #[test]
    fn the_default_burst_is_one_second_of_requests_and_at_least_one() {
        assert_eq!(RateLimit::default_burst(10.0), 10);
        assert_eq!(RateLimit::default_burst(2.5), 3);
        assert_eq!(RateLimit::default_burst(0.1), 1);
        assert_eq!(RateLimit::default_burst(MAX_MS as f64), 2_147_483_647);
    }
}
