//! The OAuth client's requests: probing the MCP server for its challenge, fetching
//! protected-resource and authorization-server metadata, registering a client (RFC 7591), and
//! the token endpoint's grants (authorization code, refresh, client credentials).
//!
//! Each function does one exchange and says, when it fails, what the user can do about it. It
//! never stores anything, never follows a redirect, and never puts a token or secret into an
//! error text.

use std::time::Duration;

use base64::Engine;
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, WWW_AUTHENTICATE};
use reqwest::{StatusCode, Url};
use serde::Deserialize;

use super::discovery::{self, AuthMethod, Challenge};

/// How long one OAuth request may take.
const REQUEST_LIMIT: Duration = Duration::from_secs(15);
/// The largest metadata or token response read.
const MAX_BODY: usize = 256 * 1024;

/// Why an OAuth exchange (probe, discovery, registration) failed: what was asked of whom, and
/// what the user can do. None quotes a token or a secret.
#[derive(Debug, thiserror::Error)]
pub enum FlowError {
    /// The HTTP client could not be built.
    #[error("cannot build the HTTP client for OAuth: {source}")]
    Client {
        /// What reqwest said.
        source: reqwest::Error,
    },
    /// The MCP server did not answer the probe.
    #[error(
        "cannot reach the MCP server at {server}: {source}; check the URL and that the server is up"
    )]
    Unreachable {
        /// The server's URL.
        server: String,
        /// What reqwest said.
        source: reqwest::Error,
    },
    /// The protected-resource metadata names a resource that is not this server (RFC 9728 §3.3).
    #[error(
        "the server's protected-resource metadata names resource {resource}, which does not \
         cover {server}; refusing to get a token for another resource (check the server's URL \
         in the config)"
    )]
    OtherResource {
        /// The resource the metadata names.
        resource: String,
        /// The server's URL.
        server: String,
    },
    /// The protected-resource metadata names no authorization server.
    #[error(
        "the server's protected-resource metadata lists no authorization_servers; the server \
         cannot be signed in to"
    )]
    NoAuthorizationServer,
    /// The issuer named for the server is not a URL.
    #[error(
        "the authorization server's issuer is not a valid URL; the server's metadata is broken"
    )]
    IssuerNotUrl,
    /// The authorization server's metadata names another issuer than the one it was fetched
    /// for (RFC 8414 §3.3).
    #[error(
        "the authorization server's metadata at {url} names issuer {named:?}, not {issuer:?} \
         (the issuer it was fetched for); refusing to use it (RFC 8414 §3.3): the server or \
         something between is misconfigured"
    )]
    OtherIssuer {
        /// Where the metadata was fetched.
        url: String,
        /// The issuer it names.
        named: String,
        /// The issuer it was fetched for.
        issuer: String,
    },
    /// No well-known URL has the authorization server's metadata.
    #[error(
        "no authorization-server metadata for {issuer} (tried {}); the server does not publish \
         OAuth metadata where the MCP spec says",
        tried.join(", ")
    )]
    NoMetadata {
        /// The issuer.
        issuer: String,
        /// The URLs tried.
        tried: Vec<String>,
    },
    /// A metadata document is not the JSON expected.
    #[error("the {what} at {url} is malformed ({detail}): ask the server's operator to fix it")]
    Malformed {
        /// Which document (`protected-resource metadata`, ...).
        what: String,
        /// Where it was fetched.
        url: String,
        /// What is wrong, in short.
        detail: String,
    },
    /// An OAuth response could not be read.
    #[error("reading an OAuth response failed: {source}")]
    Read {
        /// What reqwest said.
        source: reqwest::Error,
    },
    /// An OAuth response is larger than 256 KiB.
    #[error("an OAuth response is larger than 256 KiB")]
    TooLarge,
    /// The authorization server offers no dynamic client registration.
    #[error(
        "the authorization server {issuer} does not offer dynamic client registration: register \
         a client there and set \"oauth\": {{\"clientId\": …}} (and \"clientSecretEnv\" if it \
         has a secret) for this server"
    )]
    NoRegistration {
        /// The authorization server.
        issuer: String,
    },
    /// The registration request did not get an answer.
    #[error("client registration at {endpoint} failed: {source}")]
    RegistrationUnreachable {
        /// The registration endpoint.
        endpoint: String,
        /// What reqwest said.
        source: reqwest::Error,
    },
    /// The authorization server refused the registration.
    #[error(
        "the authorization server refused client registration (HTTP {status}{}); register a \
         client by hand and set \"oauth\": {{\"clientId\": …}}",
        detail.as_ref().map(|d| format!(": {d}")).unwrap_or_default()
    )]
    RegistrationRefused {
        /// The HTTP status.
        status: StatusCode,
        /// The OAuth error, when the answer is one.
        detail: Option<String>,
    },
    /// The registration answer is not the JSON expected.
    #[error(
        "the client registration answer from {endpoint} is malformed ({detail}); ask the \
         server's operator, or register a client by hand and set \"oauth\": {{\"clientId\": …}}"
    )]
    RegistrationMalformed {
        /// The registration endpoint.
        endpoint: String,
        /// What is wrong, in short.
        detail: String,
    },
}

/// An HTTP client for OAuth exchanges: no redirects, bounded.
pub fn client() -> Result<reqwest::Client, FlowError> {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(REQUEST_LIMIT)
        .build()
        .map_err(|source| FlowError::Client { source })
}

/// Authorization-server metadata (RFC 8414), the fields used.
#[derive(Clone, Debug, Deserialize)]
pub struct AsMetadata {
    /// The authorization server's issuer identifier (compared exactly).
    pub issuer: String,
    #[serde(default)]
    /// Where a person signs in (authorization code grant).
    pub authorization_endpoint: Option<String>,
    /// Where codes, refresh tokens and client credentials are exchanged for tokens.
    pub token_endpoint: String,
    #[serde(default)]
    /// Dynamic client registration (RFC 7591), when offered.
    pub registration_endpoint: Option<String>,
    #[serde(default)]
    /// The scopes it supports, when it lists them.
    pub scopes_supported: Option<Vec<String>>,
    #[serde(default)]
    /// How a client may authenticate at the token endpoint.
    pub token_endpoint_auth_methods_supported: Option<Vec<String>>,
    #[serde(default)]
    /// The PKCE methods it accepts (`S256` is required).
    pub code_challenge_methods_supported: Option<Vec<String>>,
    #[serde(default)]
    /// Whether its redirects carry `iss` (RFC 9207), which is then checked.
    pub authorization_response_iss_parameter_supported: Option<bool>,
    #[serde(default)]
    /// Whether a client ID may be the URL of its metadata document (CIMD).
    pub client_id_metadata_document_supported: Option<bool>,
}

/// Protected-resource metadata (RFC 9728), the fields used.
#[derive(Clone, Debug, Deserialize)]
pub struct PrMetadata {
    #[serde(default)]
    /// The protected resource's identifier, sent as it is published (RFC 8707).
    pub resource: Option<String>,
    #[serde(default)]
    /// The authorization servers that issue tokens for it.
    pub authorization_servers: Option<Vec<String>>,
    #[serde(default)]
    /// The scopes it supports, when it lists them.
    pub scopes_supported: Option<Vec<String>>,
}

/// Everything discovery learned about a protected server.
#[derive(Clone, Debug)]
pub struct Discovered {
    /// The resource indicator to send (RFC 8707): as the metadata published it, else the
    /// server's URL.
    pub resource: String,
    /// The scopes the protected resource lists.
    pub resource_scopes: Option<Vec<String>>,
    /// The issuer the metadata was fetched for (validated against the metadata's `issuer`).
    pub issuer: String,
    /// The authorization server's metadata.
    pub metadata: AsMetadata,
}

/// One token endpoint answer.
#[derive(Clone, Deserialize)]
pub struct TokenResponse {
    /// The access token (a secret: never logged).
    pub access_token: String,
    #[serde(default)]
    /// Its type (`Bearer`).
    pub token_type: Option<String>,
    #[serde(default)]
    /// Seconds until it expires, when the server says.
    pub expires_in: Option<u64>,
    #[serde(default)]
    /// A refresh token, when granted (a secret: never logged).
    pub refresh_token: Option<String>,
    #[serde(default)]
    /// The scopes granted, space-separated.
    pub scope: Option<String>,
}

/// Why a token request failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TokenError {
    /// The server refused the grant (`invalid_grant` and the like): a new login is needed.
    Refused(String),
    /// Anything else: unreachable, HTML, malformed.
    Other(String),
}

impl TokenError {
    /// What went wrong and what to do, for the user.
    pub fn message(&self) -> &str {
        match self {
            TokenError::Refused(m) | TokenError::Other(m) => m,
        }
    }
}

/// A client as registered with an authorization server.
#[derive(Clone, Debug)]
pub struct Client {
    /// The client ID.
    pub id: String,
    /// The client secret, for a confidential client (a secret: never logged).
    pub secret: Option<String>,
    /// How the client authenticates at the token endpoint.
    pub method: AuthMethod,
}

/// Asks the MCP server, without a token, what it requires: an `initialize`, then (when that
/// went through, as servers that let anyone connect do) a `tools/list` on the session it gave.
/// `None`: neither request was refused for authorization.
pub async fn probe(http: &reqwest::Client, server: &Url) -> Result<Option<Challenge>, FlowError> {
    const VERSION: &str = "2025-11-25";
    let initialize = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"mcp-supervisor","version":"login"}}}"#;
    let list = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}"#;
    let mut session: Option<reqwest::header::HeaderValue> = None;
    for body in [initialize, list] {
        let mut request = http
            .post(server.clone())
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, "application/json, text/event-stream")
            .header("mcp-protocol-version", VERSION)
            .body(body);
        if let Some(session) = &session {
            request = request.header("mcp-session-id", session.clone());
        }
        let response = request
            .send()
            .await
            .map_err(|source| FlowError::Unreachable {
                server: server.to_string(),
                source,
            })?;
        let status = response.status();
        if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
            let challenge = response
                .headers()
                .get_all(WWW_AUTHENTICATE)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .find_map(discovery::parse_challenge)
                .unwrap_or_default();
            return Ok(Some(challenge));
        }
        session = response.headers().get("mcp-session-id").cloned();
    }
    Ok(None)
}

/// Discovery from a challenge (or none): protected-resource metadata, then the authorization
/// server's, with the resource and issuer checks of RFC 9728 §3.3 and RFC 8414 §3.3.
pub async fn discover(
    http: &reqwest::Client,
    server: &Url,
    challenge: Option<&Challenge>,
) -> Result<Discovered, FlowError> {
    let mut prm: Option<PrMetadata> = None;
    let mut tried = Vec::new();
    for url in discovery::prm_candidates(
        server,
        challenge.and_then(|c| c.resource_metadata.as_deref()),
    ) {
        match fetch_json::<PrMetadata>(http, &url, "protected-resource metadata").await {
            Ok(Some(found)) => {
                prm = Some(found);
                break;
            }
            Ok(None) => tried.push(url.to_string()),
            Err(e) => return Err(e),
        }
    }
    let (resource, resource_scopes, issuer) = match prm {
        Some(prm) => {
            let resource = match prm.resource {
                Some(resource) => {
                    if !discovery::resource_covers(&resource, server) {
                        return Err(FlowError::OtherResource {
                            resource,
                            server: server.to_string(),
                        });
                    }
                    resource
                }
                None => server.to_string(),
            };
            let issuer = prm
                .authorization_servers
                .as_ref()
                .and_then(|s| s.first())
                .cloned()
                .ok_or(FlowError::NoAuthorizationServer)?;
            (resource, prm.scopes_supported, issuer)
        }
        None => {
            // No protected-resource metadata: the 2025-03-26 rule, the server's origin is the
            // authorization server.
            tracing::debug!(
                ?tried,
                "no protected-resource metadata; trying the server's origin"
            );
            let mut origin = server.clone();
            origin.set_path("");
            origin.set_query(None);
            let origin = origin.as_str().trim_end_matches('/').to_string();
            (server.to_string(), None, origin)
        }
    };
    let metadata = as_metadata(http, &issuer).await?;
    Ok(Discovered {
        resource,
        resource_scopes,
        issuer,
        metadata,
    })
}

/// The authorization server's metadata for `issuer`, from the first well-known URL that has it,
/// with its `issuer` checked.
pub async fn as_metadata(http: &reqwest::Client, issuer: &str) -> Result<AsMetadata, FlowError> {
    let issuer_url = Url::parse(issuer).map_err(|_| FlowError::IssuerNotUrl)?;
    let mut tried = Vec::new();
    for url in discovery::as_metadata_candidates(&issuer_url) {
        match fetch_json::<AsMetadata>(http, &url, "authorization-server metadata").await? {
            Some(metadata) => {
                if !discovery::issuer_matches(issuer, &metadata.issuer) {
                    return Err(FlowError::OtherIssuer {
                        url: url.to_string(),
                        named: metadata.issuer,
                        issuer: issuer.to_string(),
                    });
                }
                return Ok(metadata);
            }
            None => tried.push(url.to_string()),
        }
    }
    Err(FlowError::NoMetadata {
        issuer: issuer.to_string(),
        tried,
    })
}

/// GETs JSON; `Ok(None)` for a 404 or another non-success status (try the next URL); an error
/// for a body that is not the JSON expected, saying so.
async fn fetch_json<T: serde::de::DeserializeOwned>(
    http: &reqwest::Client,
    url: &Url,
    what: &str,
) -> Result<Option<T>, FlowError> {
    let response = match http
        .get(url.clone())
        .header(ACCEPT, "application/json")
        .send()
        .await
    {
        Ok(r) => r,
        Err(e) => {
            tracing::debug!(%url, error = %e, "metadata fetch failed");
            return Ok(None);
        }
    };
    if !response.status().is_success() {
        return Ok(None);
    }
    let body = read_body(response).await?;
    serde_json::from_slice::<T>(&body)
        .map(Some)
        .map_err(|e| FlowError::Malformed {
            what: what.to_string(),
            url: url.to_string(),
            detail: short(&e.to_string()),
        })
}

async fn read_body(mut response: reqwest::Response) -> Result<Vec<u8>, FlowError> {
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|source| FlowError::Read { source })?
    {
        if body.len() + chunk.len() > MAX_BODY {
            return Err(FlowError::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Registers a client dynamically (RFC 7591) for `redirect_uri` (none for a machine client).
pub async fn register(
    http: &reqwest::Client,
    metadata: &AsMetadata,
    redirect_uri: Option<&str>,
    method: AuthMethod,
    scope: Option<&str>,
) -> Result<Client, FlowError> {
    let Some(endpoint) = &metadata.registration_endpoint else {
        return Err(FlowError::NoRegistration {
            issuer: metadata.issuer.clone(),
        });
    };
    let mut body = serde_json::json!({
        "client_name": "mcp-supervisor",
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": method.as_str(),
        "application_type": "native",
    });
    if let Some(uri) = redirect_uri {
        body["redirect_uris"] = serde_json::json!([uri]);
    }
    if let Some(scope) = scope {
        // Some servers only grant what the client registered for.
        body["scope"] = serde_json::json!(scope);
    }
    let response = http
        .post(endpoint)
        .header(ACCEPT, "application/json")
        .header(CONTENT_TYPE, "application/json")
        .body(body.to_string())
        .send()
        .await
        .map_err(|source| FlowError::RegistrationUnreachable {
            endpoint: endpoint.clone(),
            source,
        })?;
    let status = response.status();
    let text = read_body(response).await?;
    if !status.is_success() {
        return Err(FlowError::RegistrationRefused {
            status,
            detail: oauth_error(&text),
        });
    }
    #[derive(Deserialize)]
    struct Registered {
        client_id: String,
        #[serde(default)]
        client_secret: Option<String>,
        #[serde(default)]
        token_endpoint_auth_method: Option<String>,
    }
    let registered: Registered =
        serde_json::from_slice(&text).map_err(|e| FlowError::RegistrationMalformed {
            endpoint: endpoint.clone(),
            detail: short(&e.to_string()),
        })?;
    let method = discovery::auth_method(
        registered
            .token_endpoint_auth_method
            .as_deref()
            .or(Some(method.as_str())),
        registered.client_secret.is_some(),
        metadata.token_endpoint_auth_methods_supported.as_deref(),
    );
    Ok(Client {
        id: registered.client_id,
        secret: registered.client_secret,
        method,
    })
}

/// One token request: `params` (the grant's own) plus the client's authentication.
pub async fn token(
    http: &reqwest::Client,
    endpoint: &str,
    client: &Client,
    params: &[(&str, &str)],
) -> Result<TokenResponse, TokenError> {
    let mut request = http
        .post(endpoint)
        .header(ACCEPT, "application/json")
        .header(CONTENT_TYPE, "application/x-www-form-urlencoded");
    let mut pairs: Vec<(&str, &str)> = params.to_vec();
    match (client.method, &client.secret) {
        (AuthMethod::Basic, Some(secret)) => {
            // RFC 6749 §2.3.1: each part form-encoded, then base64.
            let enc =
                |s: &str| url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
            let pair = format!("{}:{}", enc(&client.id), enc(secret));
            let value = format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(pair)
            );
            request = request.header(AUTHORIZATION, value);
            // Also in the body: RFC 6749 allows it, and some servers (the official Python
            // SDK's among them) look the client up by it.
            pairs.push(("client_id", &client.id));
        }
        (AuthMethod::Post, Some(secret)) => {
            pairs.push(("client_id", &client.id));
            pairs.push(("client_secret", secret));
        }
        _ => pairs.push(("client_id", &client.id)),
    }
    let body = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs)
        .finish();
    let response = request.body(body).send().await.map_err(|e| {
        TokenError::Other(format!("the token endpoint {endpoint} is unreachable: {e}"))
    })?;
    let status = response.status();
    let content_type = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    let body = read_body(response)
        .await
        .map_err(|e| TokenError::Other(e.to_string()))?;
    let looks_html = content_type.starts_with("text/html")
        || body
            .iter()
            .find(|b| !b.is_ascii_whitespace())
            .is_some_and(|b| *b == b'<');
    if looks_html {
        return Err(TokenError::Other(format!(
            "the token endpoint {endpoint} answered with an HTML page (HTTP {status}), not JSON: \
             the authorization server's metadata points at the wrong token_endpoint, or a proxy \
             or login page is in the way; check the server's OAuth setup"
        )));
    }
    if !status.is_success() {
        let detail = oauth_error(&body);
        let refused = status == StatusCode::BAD_REQUEST || status == StatusCode::UNAUTHORIZED;
        let message = format!(
            "the authorization server refused the token request (HTTP {status}{})",
            detail.map(|d| format!(": {d}")).unwrap_or_default()
        );
        return Err(if refused {
            TokenError::Refused(message)
        } else {
            TokenError::Other(message)
        });
    }
    let token: TokenResponse = serde_json::from_slice(&body).map_err(|e| {
        TokenError::Other(format!(
            "the token endpoint {endpoint} answered JSON that is not a token response ({}); check \
             the server's OAuth setup",
            short(&e.to_string())
        ))
    })?;
    if let Some(kind) = &token.token_type
        && !kind.eq_ignore_ascii_case("bearer")
    {
        return Err(TokenError::Other(format!(
            "the token endpoint issued a {kind:?} token; mcp-supervisor sends Bearer tokens only"
        )));
    }
    Ok(token)
}

/// `error (error_description)` of an OAuth error body, if it is one. Never the whole body.
fn oauth_error(body: &[u8]) -> Option<String> {
    #[derive(Deserialize)]
    struct OAuthError {
        error: String,
        #[serde(default)]
        error_description: Option<String>,
    }
    let e: OAuthError = serde_json::from_slice(body).ok()?;
    Some(match e.error_description {
        Some(d) => format!("{} ({})", short(&e.error), short(&d)),
        None => short(&e.error),
    })
}

fn short(text: &str) -> String {
    text.chars().filter(|c| !c.is_control()).take(200).collect()
}
