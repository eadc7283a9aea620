//! The pure rules of OAuth discovery and token bookkeeping (MCP authorization spec, RFC 9728,
//! RFC 8414, RFC 8707, RFC 9207): reading a `WWW-Authenticate` challenge, the metadata URLs to
//! try in order, which scopes to ask for, whether an issuer or a resource matches, and when a
//! token is due for refresh. Plain functions on values; nothing here does I/O or reads a clock.

use reqwest::Url;

/// What a `Bearer` challenge (`WWW-Authenticate`) said.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Challenge {
    /// `resource_metadata`: where the protected-resource metadata is.
    pub resource_metadata: Option<String>,
    /// `scope`: what the request needs, space-separated.
    pub scope: Option<String>,
    /// `error`, e.g. `invalid_token` or `insufficient_scope`.
    pub error: Option<String>,
}

impl Challenge {
    /// Whether the challenge says the token lacks a scope (`error="insufficient_scope"`).
    pub fn insufficient_scope(&self) -> bool {
        self.error.as_deref() == Some("insufficient_scope")
    }
}

/// Reads the `Bearer` challenge of a `WWW-Authenticate` value (auth-params per RFC 9110 §11.2:
/// `token=token` or `token="quoted"`, comma-separated). `None` when there is no Bearer challenge.
pub fn parse_challenge(header: &str) -> Option<Challenge> {
    let mut rest = header.trim_start();
    // Find the Bearer scheme (case-insensitive), possibly after another challenge.
    loop {
        let word_end = rest
            .find(|c: char| c.is_whitespace() || c == ',')
            .unwrap_or(rest.len());
        let (word, after) = rest.split_at(word_end);
        if word.eq_ignore_ascii_case("bearer") {
            rest = after;
            break;
        }
        let next = after.find(|c: char| c.is_whitespace())?;
        rest = after.get(next..)?.trim_start();
        if rest.is_empty() {
            return None;
        }
    }
    let mut challenge = Challenge::default();
    let mut chars = rest.char_indices().peekable();
    loop {
        // Skip separators.
        while let Some((_, c)) = chars.peek() {
            if c.is_whitespace() || *c == ',' {
                chars.next();
            } else {
                break;
            }
        }
        let Some(&(start, _)) = chars.peek() else {
            break;
        };
        let mut key_end = start;
        while let Some(&(i, c)) = chars.peek() {
            if c == '=' || c.is_whitespace() || c == ',' {
                break;
            }
            key_end = i + c.len_utf8();
            chars.next();
        }
        let key = rest
            .get(start..key_end)
            .unwrap_or_default()
            .to_ascii_lowercase();
        while let Some((_, c)) = chars.peek() {
            if c.is_whitespace() {
                chars.next();
            } else {
                break;
            }
        }
        if chars.peek().map(|(_, c)| *c) != Some('=') {
            // A new scheme (`Basic realm=…`) or a token68: the Bearer params are over.
            break;
        }
        chars.next();
        while let Some((_, c)) = chars.peek() {
            if c.is_whitespace() {
                chars.next();
            } else {
                break;
            }
        }
        let mut value = String::new();
        if chars.peek().map(|(_, c)| *c) == Some('"') {
            chars.next();
            while let Some((_, c)) = chars.next() {
                match c {
                    '\\' => {
                        if let Some((_, escaped)) = chars.next() {
                            value.push(escaped);
                        }
                    }
                    '"' => break,
                    c => value.push(c),
                }
            }
        } else {
            while let Some(&(_, c)) = chars.peek() {
                if c == ',' || c.is_whitespace() {
                    break;
                }
                value.push(c);
                chars.next();
            }
        }
        match key.as_str() {
            "resource_metadata" => challenge.resource_metadata = Some(value),
            "scope" => challenge.scope = Some(value).filter(|s| !s.trim().is_empty()),
            "error" => challenge.error = Some(value),
            _ => {}
        }
    }
    Some(challenge)
}

/// The protected-resource metadata URLs to try, in order (MCP 2025-11-25 §Protected Resource
/// Metadata Discovery): the challenge's `resource_metadata` (when it is an http(s) URL), then
/// the path-aware well-known URL, then the root one.
pub fn prm_candidates(server: &Url, from_challenge: Option<&str>) -> Vec<Url> {
    let mut out = Vec::new();
    if let Some(url) = from_challenge.and_then(|u| Url::parse(u).ok())
        && matches!(url.scheme(), "http" | "https")
    {
        out.push(url);
    }
    let path = server.path().trim_end_matches('/');
    if !path.is_empty() {
        push_unique(
            &mut out,
            with_path(
                server,
                &format!("/.well-known/oauth-protected-resource{path}"),
            ),
        );
    }
    push_unique(
        &mut out,
        with_path(server, "/.well-known/oauth-protected-resource"),
    );
    out
}

/// The authorization-server metadata URLs to try for `issuer`, in order (MCP 2025-11-25
/// §Authorization Server Metadata Discovery): OAuth then OpenID Connect, path-inserted for an
/// issuer with a path, then OIDC's path-appended form.
pub fn as_metadata_candidates(issuer: &Url) -> Vec<Url> {
    let path = issuer.path().trim_end_matches('/');
    let mut out = Vec::new();
    if path.is_empty() {
        push_unique(
            &mut out,
            with_path(issuer, "/.well-known/oauth-authorization-server"),
        );
        push_unique(
            &mut out,
            with_path(issuer, "/.well-known/openid-configuration"),
        );
    } else {
        push_unique(
            &mut out,
            with_path(
                issuer,
                &format!("/.well-known/oauth-authorization-server{path}"),
            ),
        );
        push_unique(
            &mut out,
            with_path(issuer, &format!("/.well-known/openid-configuration{path}")),
        );
        push_unique(
            &mut out,
            with_path(issuer, &format!("{path}/.well-known/openid-configuration")),
        );
    }
    out
}

fn with_path(base: &Url, path: &str) -> Url {
    let mut url = base.clone();
    url.set_path(path);
    url.set_query(None);
    url.set_fragment(None);
    url
}

fn push_unique(list: &mut Vec<Url>, url: Url) {
    if !list.contains(&url) {
        list.push(url);
    }
}

/// Whether protected-resource metadata naming `resource` may serve the MCP server at `server`
/// (RFC 9728 §3.3, MCP's canonical server URI): same scheme, host and port, and the server's
/// path at or below the resource's path.
pub fn resource_covers(resource: &str, server: &Url) -> bool {
    let Ok(resource) = Url::parse(resource) else {
        return false;
    };
    if resource.scheme() != server.scheme()
        || resource.host_str() != server.host_str()
        || resource.port_or_known_default() != server.port_or_known_default()
    {
        return false;
    }
    let base = resource.path().trim_end_matches('/');
    let path = server.path();
    base.is_empty() || path == base || path.starts_with(&format!("{base}/"))
}

/// Whether an issuer matches the one expected: simple string comparison, as RFC 8414 §3.3 and
/// RFC 9207 §2.4 require (no URL normalization).
pub fn issuer_matches(expected: &str, got: &str) -> bool {
    expected == got
}

/// The scope to ask for, in the MCP spec's order: what the config says, else the challenge's
/// `scope`, else the resource's `scopes_supported`; else none (the parameter is left out).
/// `offline_access` is added when the authorization server lists it (so a refresh token comes),
/// and never otherwise.
pub fn choose_scope(
    configured: Option<&[String]>,
    challenge: Option<&str>,
    scopes_supported: Option<&[String]>,
    as_scopes_supported: Option<&[String]>,
) -> Option<String> {
    let mut scopes: Vec<String> = match (configured, challenge, scopes_supported) {
        (Some(c), _, _) if !c.is_empty() => c.to_vec(),
        (_, Some(c), _) if !c.trim().is_empty() => {
            c.split_whitespace().map(str::to_string).collect()
        }
        (_, _, Some(s)) if !s.is_empty() => s.to_vec(),
        _ => Vec::new(),
    };
    if as_scopes_supported.is_some_and(|s| s.iter().any(|x| x == "offline_access"))
        && !scopes.is_empty()
        && !scopes.iter().any(|s| s == "offline_access")
    {
        scopes.push("offline_access".to_string());
    }
    (!scopes.is_empty()).then(|| scopes.join(" "))
}

/// The union of two space-separated scope lists, first one's order first.
pub fn union_scopes(a: Option<&str>, b: Option<&str>) -> Option<String> {
    let mut out: Vec<&str> = Vec::new();
    for scope in a.into_iter().chain(b).flat_map(|s| s.split_whitespace()) {
        if !out.contains(&scope) {
            out.push(scope);
        }
    }
    (!out.is_empty()).then(|| out.join(" "))
}

/// Whether every scope of `needed` is in `have`.
pub fn scopes_include(have: Option<&str>, needed: &str) -> bool {
    let have: Vec<&str> = have
        .map(|h| h.split_whitespace().collect())
        .unwrap_or_default();
    needed.split_whitespace().all(|n| have.contains(&n))
}

/// How long before its expiry a token is refreshed: a tenth of its lifetime, between 5 s and
/// 60 s, and never more than half of it (else a short-lived token would be due the moment it
/// came, and every request would refresh).
pub fn refresh_margin(lifetime_s: u64) -> u64 {
    (lifetime_s / 10).clamp(5, 60).min(lifetime_s / 2)
}

/// When a token given `expires_in` seconds at `now` (Unix seconds) expires.
pub fn expires_at(now: u64, expires_in: Option<u64>) -> Option<u64> {
    expires_in.map(|s| now.saturating_add(s))
}

/// Whether a token expiring at `expires_at` (issued for `lifetime` seconds) should be refreshed
/// at `now`. A token without an expiry is used until the server refuses it.
pub fn refresh_due(expires_at: Option<u64>, lifetime: Option<u64>, now: u64) -> bool {
    match expires_at {
        None => false,
        Some(at) => now.saturating_add(refresh_margin(lifetime.unwrap_or(3600))) >= at,
    }
}

/// The token endpoint authentication method to use: the registered one where the server
/// named it; else, with a secret, `client_secret_basic` unless the server lists only
/// `client_secret_post`; without a secret, `none`.
pub fn auth_method(
    registered: Option<&str>,
    has_secret: bool,
    supported: Option<&[String]>,
) -> AuthMethod {
    match registered {
        Some("client_secret_basic") if has_secret => return AuthMethod::Basic,
        Some("client_secret_post") if has_secret => return AuthMethod::Post,
        Some("none") => return AuthMethod::None,
        _ => {}
    }
    if !has_secret {
        return AuthMethod::None;
    }
    // RFC 8414 §2: absent means client_secret_basic.
    let supports = |m: &str| supported.is_none_or(|s| s.iter().any(|x| x == m));
    if supports("client_secret_basic") {
        AuthMethod::Basic
    } else if supports("client_secret_post") {
        AuthMethod::Post
    } else if supported.is_some_and(|s| s.iter().any(|x| x == "none")) {
        AuthMethod::None
    } else {
        AuthMethod::Basic
    }
}

/// How the client authenticates at the token endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuthMethod {
    /// `client_secret_basic`: HTTP Basic with the id and secret.
    Basic,
    /// `client_secret_post`: both in the form body.
    Post,
    /// A public client: the id in the body, no secret.
    None,
}

impl AuthMethod {
    /// The method's name as OAuth metadata and registration spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            AuthMethod::Basic => "client_secret_basic",
            AuthMethod::Post => "client_secret_post",
            AuthMethod::None => "none",
        }
    }
}

/// The token endpoint auth method to register with (dynamic registration): a public client
/// where the server allows one, else the first secret-based method it lists.
pub fn registration_method(supported: Option<&[String]>) -> AuthMethod {
    match supported {
        None => AuthMethod::None,
        Some(s) if s.iter().any(|m| m == "none") => AuthMethod::None,
        Some(s) if s.iter().any(|m| m == "client_secret_basic") => AuthMethod::Basic,
        Some(s) if s.iter().any(|m| m == "client_secret_post") => AuthMethod::Post,
        Some(_) => AuthMethod::None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> Url {
        Url::parse(s).expect("a test URL")
    }

    #[test]
    fn a_challenge_gives_its_resource_metadata_scope_and_error() {
        let c = parse_challenge(
            r#"Bearer error="insufficient_scope", scope="mcp:write a:b", resource_metadata="http://h/.well-known/oauth-protected-resource/mcp""#,
        )
        .expect("a Bearer challenge");
        assert_eq!(c.scope.as_deref(), Some("mcp:write a:b"));
        assert!(c.insufficient_scope());
        assert_eq!(
            c.resource_metadata.as_deref(),
            Some("http://h/.well-known/oauth-protected-resource/mcp")
        );
        let plain = parse_challenge("bearer realm=x, scope=read").expect("a Bearer challenge");
        assert_eq!(plain.scope.as_deref(), Some("read"));
        assert_eq!(parse_challenge("Basic realm=\"x\""), None);
        let second = parse_challenge(r#"Basic realm="x", Bearer scope="s""#)
            .expect("the second challenge is Bearer");
        assert_eq!(second.scope.as_deref(), Some("s"));
        assert_eq!(parse_challenge("Bearer"), Some(Challenge::default()));
    }

    #[test]
    fn prm_is_tried_at_the_challenge_url_then_path_aware_then_root() {
        let got = prm_candidates(&url("http://h:1/mcp"), Some("http://h:1/custom/x.json"));
        let got: Vec<String> = got.iter().map(Url::to_string).collect();
        assert_eq!(
            got,
            [
                "http://h:1/custom/x.json",
                "http://h:1/.well-known/oauth-protected-resource/mcp",
                "http://h:1/.well-known/oauth-protected-resource",
            ]
        );
        let root = prm_candidates(&url("http://h/"), Some("not a url"));
        assert_eq!(root.len(), 1);
    }

    #[test]
    fn as_metadata_is_tried_oauth_then_oidc_path_inserted_then_appended() {
        let got: Vec<String> = as_metadata_candidates(&url("http://a/tenant1"))
            .iter()
            .map(Url::to_string)
            .collect();
        assert_eq!(
            got,
            [
                "http://a/.well-known/oauth-authorization-server/tenant1",
                "http://a/.well-known/openid-configuration/tenant1",
                "http://a/tenant1/.well-known/openid-configuration",
            ]
        );
        assert_eq!(as_metadata_candidates(&url("http://a")).len(), 2);
    }

    #[test]
    fn a_resource_covers_servers_at_or_below_it_on_the_same_origin() {
        let server = url("http://h:8/mcp");
        assert!(resource_covers("http://h:8/mcp", &server));
        assert!(resource_covers("http://h:8", &server));
        assert!(!resource_covers("http://h:9/mcp", &server));
        assert!(!resource_covers("http://other:8/mcp", &server));
        assert!(!resource_covers("http://h:8/mcp2", &url("http://h:8/mcp")));
        assert!(!resource_covers("http://h:8/other", &server));
    }

    #[test]
    fn issuers_are_compared_as_strings() {
        assert!(issuer_matches("http://a", "http://a"));
        assert!(!issuer_matches("http://a", "http://a/"));
    }

    #[test]
    fn scope_comes_from_config_then_challenge_then_scopes_supported() {
        let configured = ["x".to_string()];
        let supported = ["a".to_string(), "b".to_string()];
        assert_eq!(
            choose_scope(Some(&configured), Some("c"), Some(&supported), None).as_deref(),
            Some("x")
        );
        assert_eq!(
            choose_scope(None, Some("c d"), Some(&supported), None).as_deref(),
            Some("c d")
        );
        assert_eq!(
            choose_scope(None, None, Some(&supported), None).as_deref(),
            Some("a b")
        );
        assert_eq!(choose_scope(None, None, None, None), None);
        let with_offline = ["a".to_string(), "offline_access".to_string()];
        assert_eq!(
            choose_scope(None, Some("a"), None, Some(&with_offline)).as_deref(),
            Some("a offline_access")
        );
        assert_eq!(
            choose_scope(None, Some("a"), None, Some(&supported)).as_deref(),
            Some("a")
        );
    }

    #[test]
    fn scopes_union_keeps_order_and_drops_repeats() {
        assert_eq!(
            union_scopes(Some("a b"), Some("b c")).as_deref(),
            Some("a b c")
        );
        assert_eq!(union_scopes(None, None), None);
        assert!(scopes_include(Some("a b"), "b"));
        assert!(!scopes_include(Some("a"), "a c"));
        assert!(!scopes_include(None, "a"));
    }

    #[test]
    fn refresh_is_due_within_a_tenth_of_the_lifetime_bounded() {
        assert_eq!(refresh_margin(3600), 60);
        assert_eq!(refresh_margin(20), 5);
        // A short-lived token is not due the moment it comes.
        assert_eq!(refresh_margin(4), 2);
        assert!(!refresh_due(expires_at(100, Some(4)), Some(4), 100));
        assert!(refresh_due(expires_at(100, Some(4)), Some(4), 102));
        assert!(!refresh_due(Some(1000), Some(3600), 939));
        assert!(refresh_due(Some(1000), Some(3600), 940));
        assert!(!refresh_due(None, None, u64::MAX));
        assert_eq!(expires_at(10, Some(5)), Some(15));
    }

    #[test]
    fn the_auth_method_follows_registration_then_the_servers_list() {
        let post = ["client_secret_post".to_string()];
        let none = ["none".to_string()];
        assert_eq!(auth_method(None, true, None), AuthMethod::Basic);
        assert_eq!(auth_method(None, true, Some(&post)), AuthMethod::Post);
        assert_eq!(auth_method(None, false, Some(&post)), AuthMethod::None);
        assert_eq!(auth_method(Some("none"), true, None), AuthMethod::None);
        assert_eq!(auth_method(None, true, Some(&none)), AuthMethod::None);
        assert_eq!(registration_method(Some(&post)), AuthMethod::Post);
        assert_eq!(registration_method(None), AuthMethod::None);
    }
}
