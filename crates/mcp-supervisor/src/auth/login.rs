//! `mcp-supervisor login`: the authorization-code flow with PKCE (S256) on a loopback redirect
//! (RFC 8252): discover, register (or use the configured client, or a client ID metadata
//! document), send the person to the authorization URL, take the code at
//! `http://127.0.0.1:PORT/callback`, check `state` and `iss`, exchange the code, store the tokens.
//!
//! It binds 127.0.0.1 only, serves exactly one redirect, and never writes a token anywhere but
//! the token file.

use std::time::Duration;

use base64::Engine;
use reqwest::Url;
use sha2::Digest;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use mcp_supervisor_core::config::OAuthConfig;

use super::discovery::{self, AuthMethod, Challenge};
use super::flow::{self, FlowError, TokenError};
use super::source::now_unix;
use super::store::{Entry, StoreError, TokenStore};

/// How long the login waits for the browser to come back.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(300);

/// What one login needs.
pub struct Login<'a> {
    /// The server's name in the config.
    pub server: &'a str,
    /// The server's MCP endpoint.
    pub url: &'a str,
    /// The server's `oauth` block.
    pub config: &'a OAuthConfig,
    /// Where the tokens are saved.
    pub store: &'a TokenStore,
    /// How long to wait for the redirect.
    pub wait: Duration,
}

/// Why a login failed: what step, and what to do (most often: run login again). None quotes a
/// token, a code or a secret.
#[derive(Debug, thiserror::Error)]
pub enum LoginError {
    /// The server's URL does not parse.
    #[error("`{url}` is not a valid URL: {source}; fix the server's url in the config")]
    InvalidUrl {
        /// The URL as configured.
        url: String,
        /// What the URL parser said.
        source: url::ParseError,
    },
    /// Probing, discovery or registration failed.
    #[error(transparent)]
    Flow(#[from] FlowError),
    /// The authorization server cannot sign a person in.
    #[error(
        "the authorization server {issuer} has no authorization_endpoint; it cannot sign a \
         person in (use \"grant\": \"client_credentials\" if it is meant for machines)"
    )]
    NoAuthorizationEndpoint {
        /// The authorization server.
        issuer: String,
    },
    /// The authorization server's `authorization_endpoint` is not a URL.
    #[error(
        "the authorization server's authorization_endpoint is not a URL; ask the server's operator \
         to fix its metadata"
    )]
    AuthorizationEndpointNotUrl,
    /// The authorization server does not do PKCE with S256.
    #[error(
        "the authorization server {issuer} does not support PKCE with S256, which MCP requires; \
         mcp-supervisor will not sign in without it"
    )]
    NoS256 {
        /// The authorization server.
        issuer: String,
    },
    /// The loopback listener for the redirect could not be opened or read.
    #[error(
        "cannot listen on 127.0.0.1 for the redirect: {source}; check that loopback connections are allowed"
    )]
    Listen {
        /// What the system said.
        source: std::io::Error,
    },
    /// The configured client's secret is not in the environment.
    #[error("the client secret is not in the environment: set {var}")]
    SecretMissing {
        /// The variable named by `clientSecretEnv`.
        var: String,
    },
    /// No random bytes for the PKCE verifier or the state.
    #[error("no randomness available: {source}; mcp-supervisor will not sign in without it")]
    NoRandomness {
        /// What getrandom said.
        source: getrandom::Error,
    },
    /// The browser did not come back in time.
    #[error(
        "no redirect came back within {} s; run login again and finish signing in in the browser",
        .waited.as_secs()
    )]
    NoRedirect {
        /// How long the login waited.
        waited: Duration,
    },
    /// The redirect came back and was refused.
    #[error(transparent)]
    Redirect(#[from] RedirectError),
    /// The token endpoint did not give tokens for the code.
    #[error("{}; run login again", .0.message())]
    Token(TokenError),
    /// The tokens could not be stored.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Why the redirect that came back is not used (pure: see [`judge_redirect`]). Nothing was
/// exchanged; each says to run login again.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RedirectError {
    /// The redirect's `state` is not this login's.
    #[error(
        "the redirect's state does not match this login (a stale tab or a forged redirect); \
         nothing was exchanged: run `mcp-supervisor login` again and finish it in the tab it opens"
    )]
    StateMismatch,
    /// The redirect names another issuer (RFC 9207).
    #[error(
        "the redirect names issuer {named:?}, not {issuer:?} (RFC 9207): it may come from \
         another authorization server, so the code was not used; run login again"
    )]
    OtherIssuer {
        /// The issuer the redirect names.
        named: String,
        /// The issuer of this login.
        issuer: String,
    },
    /// The authorization server promised `iss` and sent none (RFC 9207).
    #[error(
        "the authorization server {issuer} promised an `iss` parameter on its redirect and \
         sent none (RFC 9207), so the code was not used; run login again, and report it to \
         the server's operator if it repeats"
    )]
    NoIssuer {
        /// The issuer of this login.
        issuer: String,
    },
    /// The authorization server refused (`error`, with its description).
    #[error("the authorization server refused the login: {error}; run login again")]
    Refused {
        /// Its `error` and `error_description`, without control characters.
        error: String,
    },
    /// The redirect has no code.
    #[error("the redirect carries no code; run login again")]
    NoCode,
}

/// A PKCE verifier and its S256 challenge (RFC 7636).
pub struct Pkce {
    /// The PKCE code verifier (kept until the code is exchanged).
    pub verifier: String,
    /// Its S256 challenge, sent with the authorization request.
    pub challenge: String,
}

/// `len` random bytes, base64url without padding.
pub fn random_token(len: usize) -> Result<String, LoginError> {
    let mut bytes = vec![0u8; len];
    getrandom::fill(&mut bytes).map_err(|source| LoginError::NoRandomness { source })?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
}

impl Pkce {
    /// A fresh random verifier and its challenge; an error when no randomness is available.
    pub fn new() -> Result<Self, LoginError> {
        let verifier = random_token(32)?;
        Ok(Self {
            challenge: s256(&verifier),
            verifier,
        })
    }
}

/// The S256 challenge of a verifier.
pub fn s256(verifier: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(sha2::Sha256::digest(verifier.as_bytes()))
}

/// What came back on the redirect, judged (pure).
pub fn judge_redirect(
    query: &str,
    state: &str,
    issuer: &str,
    iss_supported: bool,
) -> Result<String, RedirectError> {
    let mut code = None;
    let mut got_state = None;
    let mut iss = None;
    let mut error = None;
    for (k, v) in url::form_urlencoded::parse(query.as_bytes()) {
        match k.as_ref() {
            "code" => code = Some(v.into_owned()),
            "state" => got_state = Some(v.into_owned()),
            "iss" => iss = Some(v.into_owned()),
            "error" => error = Some(v.into_owned()),
            "error_description" => {
                error = Some(format!(
                    "{} ({})",
                    error.take().unwrap_or_default(),
                    v.chars().take(200).collect::<String>()
                ))
            }
            _ => {}
        }
    }
    if got_state.as_deref() != Some(state) {
        return Err(RedirectError::StateMismatch);
    }
    match (iss, iss_supported) {
        (Some(iss), _) if !discovery::issuer_matches(issuer, &iss) => {
            return Err(RedirectError::OtherIssuer {
                named: iss,
                issuer: issuer.to_string(),
            });
        }
        (None, true) => {
            return Err(RedirectError::NoIssuer {
                issuer: issuer.to_string(),
            });
        }
        _ => {}
    }
    if let Some(error) = error {
        return Err(RedirectError::Refused {
            error: error.chars().filter(|c| !c.is_control()).collect(),
        });
    }
    code.ok_or(RedirectError::NoCode)
}

/// Runs the whole login. `show` gets the authorization URL (to print, or to open).
pub async fn login(login: Login<'_>, show: impl FnOnce(&str)) -> Result<Entry, LoginError> {
    let server_url = Url::parse(login.url).map_err(|source| LoginError::InvalidUrl {
        url: login.url.to_string(),
        source,
    })?;
    let http = flow::client()?;
    let server = find_server(&http, &server_url).await?;
    let (listener, redirect_uri) = listen().await?;
    let scope = scope_for(&login, &server);
    let client = client_for(&login, &http, &server, &redirect_uri, scope.as_deref()).await?;
    let authorization = Authorization {
        client,
        redirect_uri,
        pkce: Pkce::new()?,
        state: random_token(16)?,
        scope,
    };
    show(authorization.url(&server)?.as_str());
    let code = authorization.code(&listener, login.wait, &server).await?;
    authorization.exchange(&login, &http, &server, &code).await
}

/// What discovery found of a server, checked for a person's sign-in.
struct Server {
    found: flow::Discovered,
    /// What the server's refusal asked for (its scope, its metadata), if it refused.
    challenge: Option<Challenge>,
    /// Where the person signs in.
    authorize: String,
}

/// Probe the server and discover its authorization server, which must be able to sign a person
/// in with PKCE S256.
async fn find_server(http: &reqwest::Client, server_url: &Url) -> Result<Server, LoginError> {
    let challenge = flow::probe(http, server_url).await?;
    let found = flow::discover(http, server_url, challenge.as_ref()).await?;
    let metadata = &found.metadata;
    let Some(authorize) = metadata.authorization_endpoint.clone() else {
        return Err(LoginError::NoAuthorizationEndpoint {
            issuer: found.issuer.clone(),
        });
    };
    if metadata
        .code_challenge_methods_supported
        .as_ref()
        .is_some_and(|m| !m.iter().any(|x| x == "S256"))
    {
        return Err(LoginError::NoS256 {
            issuer: found.issuer.clone(),
        });
    }
    Ok(Server {
        found,
        challenge,
        authorize,
    })
}

/// The loopback listener the browser comes back to, and its redirect URI.
async fn listen() -> Result<(TcpListener, String), LoginError> {
    let listener = TcpListener::bind(("127.0.0.1", 0))
        .await
        .map_err(|source| LoginError::Listen { source })?;
    let port = listener
        .local_addr()
        .map_err(|source| LoginError::Listen { source })?
        .port();
    Ok((listener, format!("http://127.0.0.1:{port}/callback")))
}

/// The scope to ask for: what the config, the server's challenge and the metadata say, plus
/// what the last login with the same issuer had and was asked for since.
fn scope_for(login: &Login<'_>, server: &Server) -> Option<String> {
    let previous = login
        .store
        .load(login.server, login.url)
        .unwrap_or_default();
    let found = &server.found;
    let wanted = previous
        .as_ref()
        .filter(|p| p.issuer == found.issuer)
        .and_then(|p| discovery::union_scopes(p.scope.as_deref(), p.wanted_scope.as_deref()));
    discovery::union_scopes(
        wanted.as_deref(),
        discovery::choose_scope(
            login.config.scopes.as_deref(),
            server.challenge.as_ref().and_then(|c| c.scope.as_deref()),
            found.resource_scopes.as_deref(),
            found.metadata.scopes_supported.as_deref(),
        )
        .as_deref(),
    )
}

/// The client: configured, or a metadata document, or registered now. A registered client is
/// not reused by the next login: its redirect URI named this login's port, and servers may
/// hold clients to it exactly.
async fn client_for(
    login: &Login<'_>,
    http: &reqwest::Client,
    server: &Server,
    redirect_uri: &str,
    scope: Option<&str>,
) -> Result<flow::Client, LoginError> {
    let metadata = &server.found.metadata;
    if let Some(id) = &login.config.client_id {
        let secret = match &login.config.client_secret_env {
            Some(var) => Some(
                std::env::var(var).map_err(|_| LoginError::SecretMissing { var: var.clone() })?,
            ),
            None => None,
        };
        let method = discovery::auth_method(
            None,
            secret.is_some(),
            metadata.token_endpoint_auth_methods_supported.as_deref(),
        );
        return Ok(flow::Client {
            id: id.clone(),
            secret,
            method,
        });
    }
    if let (Some(url), Some(true)) = (
        &login.config.client_metadata_url,
        metadata.client_id_metadata_document_supported,
    ) {
        return Ok(flow::Client {
            id: url.clone(),
            secret: None,
            method: AuthMethod::None,
        });
    }
    let method =
        discovery::registration_method(metadata.token_endpoint_auth_methods_supported.as_deref());
    Ok(flow::register(http, metadata, Some(redirect_uri), method, scope).await?)
}

/// One authorization request: from the URL the person opens, to the code the browser brings
/// back, to the tokens it is exchanged for.
struct Authorization {
    client: flow::Client,
    redirect_uri: String,
    pkce: Pkce,
    /// This login's `state`, which the redirect must carry.
    state: String,
    scope: Option<String>,
}

impl Authorization {
    /// The authorization URL the person opens.
    fn url(&self, server: &Server) -> Result<Url, LoginError> {
        let mut url =
            Url::parse(&server.authorize).map_err(|_| LoginError::AuthorizationEndpointNotUrl)?;
        {
            let mut q = url.query_pairs_mut();
            q.append_pair("response_type", "code");
            q.append_pair("client_id", &self.client.id);
            q.append_pair("redirect_uri", &self.redirect_uri);
            q.append_pair("code_challenge", &self.pkce.challenge);
            q.append_pair("code_challenge_method", "S256");
            q.append_pair("state", &self.state);
            q.append_pair("resource", &server.found.resource);
            if let Some(scope) = &self.scope {
                q.append_pair("scope", scope);
            }
        }
        Ok(url)
    }

    /// Wait (at most `wait`) for the browser's redirect, and judge it: the code, when it is
    /// this login's.
    async fn code(
        &self,
        listener: &TcpListener,
        wait: Duration,
        server: &Server,
    ) -> Result<String, LoginError> {
        let query = tokio::time::timeout(wait, callback(listener))
            .await
            .map_err(|_| LoginError::NoRedirect { waited: wait })??;
        let metadata = &server.found.metadata;
        Ok(judge_redirect(
            &query,
            &self.state,
            &metadata.issuer,
            metadata.authorization_response_iss_parameter_supported == Some(true),
        )?)
    }

    /// Exchange `code` for tokens, and store them.
    async fn exchange(
        self,
        login: &Login<'_>,
        http: &reqwest::Client,
        server: &Server,
        code: &str,
    ) -> Result<Entry, LoginError> {
        let found = &server.found;
        let params = [
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", self.redirect_uri.as_str()),
            ("code_verifier", self.pkce.verifier.as_str()),
            ("resource", found.resource.as_str()),
        ];
        let token = flow::token(http, &found.metadata.token_endpoint, &self.client, &params)
            .await
            .map_err(LoginError::Token)?;
        let now = now_unix();
        let entry = Entry {
            server_url: login.url.to_string(),
            resource: Some(found.resource.clone()),
            issuer: found.issuer.clone(),
            token_endpoint: found.metadata.token_endpoint.clone(),
            client_id: self.client.id,
            client_secret: self.client.secret,
            auth_method: Some(self.client.method),
            access_token: token.access_token,
            refresh_token: token.refresh_token,
            expires_at: discovery::expires_at(now, token.expires_in),
            lifetime: token.expires_in,
            scope: token.scope.or(self.scope),
            wanted_scope: None,
        };
        login.store.save(login.server, Some(&entry))?;
        Ok(entry)
    }
}

/// Serves the loopback redirect: the first request to `/callback` gives its query. Other paths
/// (a browser's favicon) get 404 and the wait goes on.
async fn callback(listener: &TcpListener) -> Result<String, LoginError> {
    loop {
        let (mut stream, _) = listener
            .accept()
            .await
            .map_err(|source| LoginError::Listen { source })?;
        let mut buf = vec![0u8; 8192];
        let mut len = 0;
        // Read the request head (the query is all that matters).
        loop {
            let read =
                match tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf[len..]))
                    .await
                {
                    Ok(Ok(n)) => n,
                    _ => 0,
                };
            if read == 0 {
                break;
            }
            len += read;
            if buf[..len].windows(4).any(|w| w == b"\r\n\r\n") || len == buf.len() {
                break;
            }
        }
        let head = String::from_utf8_lossy(&buf[..len]);
        let target = head
            .lines()
            .next()
            .and_then(|line| line.split_whitespace().nth(1))
            .unwrap_or("")
            .to_string();
        let (path, query) = target.split_once('?').unwrap_or((target.as_str(), ""));
        if path != "/callback" {
            let _ = stream
                .write_all(
                    b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                )
                .await;
            continue;
        }
        let page = "<!doctype html><title>mcp-supervisor</title><p>mcp-supervisor has the answer: close this tab and see the terminal.</p>";
        let response = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/html; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{page}",
            page.len()
        );
        let _ = stream.write_all(response.as_bytes()).await;
        let _ = stream.shutdown().await;
        return Ok(query.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_s256_challenge_is_rfc_7636s() {
        // Computed independently: base64url(sha256(verifier)) without padding (Python hashlib).
        assert_eq!(
            s256("dBjftJeZ4CVP-mB92K27uhbUJU1p1r7wW1gFWFOEjXk"),
            "bwWFMyPfdG9qreDhH2lmftFx_dFeLDalzcT1gb_j68g"
        );
        let a = Pkce::new().expect("randomness");
        let b = Pkce::new().expect("randomness");
        assert_ne!(a.verifier, b.verifier);
        assert_eq!(a.verifier.len(), 43);
    }

    #[test]
    fn a_redirect_with_a_wrong_state_is_refused_with_what_to_do() {
        let err = judge_redirect("code=c&state=other", "mine", "http://a", false)
            .expect_err("wrong state")
            .to_string();
        assert!(err.contains("state") && err.contains("login"), "{err}");
        assert_eq!(
            judge_redirect("code=c&state=mine", "mine", "http://a", false),
            Ok("c".to_string())
        );
    }

    #[test]
    fn the_iss_parameter_is_checked_exactly_and_required_when_promised() {
        assert!(judge_redirect("code=c&state=s&iss=http%3A%2F%2Fa", "s", "http://a", true).is_ok());
        assert!(
            judge_redirect(
                "code=c&state=s&iss=http%3A%2F%2Fa%2F",
                "s",
                "http://a",
                true
            )
            .is_err()
        );
        assert!(judge_redirect("code=c&state=s", "s", "http://a", true).is_err());
        assert!(judge_redirect("code=c&state=s", "s", "http://a", false).is_ok());
        assert!(
            judge_redirect(
                "code=c&state=s&iss=http%3A%2F%2Fevil",
                "s",
                "http://a",
                false
            )
            .is_err()
        );
        let refused = judge_redirect("error=access_denied&state=s", "s", "http://a", false)
            .expect_err("refused")
            .to_string();
        assert!(refused.contains("access_denied"), "{refused}");
    }
}
