//! Talking to the issuer: its metadata (RFC 8414 `/.well-known/oauth-authorization-server`, with
//! the path inserted when the issuer has one, else OpenID discovery), which says where its keys
//! (`jwks_uri`) and its token endpoint are; and every fetch from it bounded in time
//! ([`super::FETCH_TIMEOUT`]) and size ([`super::MAX_ANSWER_BYTES`]), with no redirects.
//!
//! It never follows a URL that is plain http to another machine, never retries on its own (the
//! callers decide when to fetch again), and never sends the client's token anywhere.

use std::error::Error as _;
use std::net::IpAddr;
use std::sync::Arc;

use reqwest::Url;
use serde_json::Value;
use tokio::sync::OnceCell;

use super::error::shown;
use super::{AuthError, FETCH_TIMEOUT, FetchError, MAX_ANSWER_BYTES};

/// The issuer's metadata, as far as this server uses it.
#[derive(Debug)]
pub(crate) struct IssuerMetadata {
    /// Where it came from.
    pub(crate) url: String,
    /// Where the keys are, if it says (and the URL is usable).
    pub(crate) jwks_uri: Option<String>,
    /// Where tokens are exchanged, if it says (and the URL is usable).
    pub(crate) token_endpoint: Option<String>,
}

/// One issuer: its name, the HTTP client that fetches from it, and its metadata once fetched.
#[derive(Debug)]
pub(crate) struct Issuer {
    /// The issuer exactly as configured (and as `iss` must say).
    pub(crate) name: String,
    url: Url,
    http: reqwest::Client,
    metadata: OnceCell<Arc<IssuerMetadata>>,
}

impl Issuer {
    /// The issuer `name`, checked to be a usable URL.
    pub(crate) fn new(name: &str) -> Result<Self, AuthError> {
        let url = usable_url("issuer", name)?;
        let http = reqwest::Client::builder()
            .timeout(FETCH_TIMEOUT)
            .connect_timeout(FETCH_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("mcp-supervisor/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| AuthError::Client(reason(&e)))?;
        Ok(Self {
            name: name.to_owned(),
            url,
            http,
            metadata: OnceCell::new(),
        })
    }

    /// The HTTP client (timeouts set, no redirects).
    pub(crate) fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// The issuer's metadata, fetched once (concurrent callers wait for the same fetch; a
    /// failed fetch is tried again by the next caller).
    pub(crate) async fn metadata(&self) -> Result<Arc<IssuerMetadata>, FetchError> {
        self.metadata
            .get_or_try_init(|| self.discover())
            .await
            .cloned()
    }

    /// The `jwks_uri` of the metadata.
    pub(crate) async fn jwks_uri(&self) -> Result<String, FetchError> {
        let metadata = self.metadata().await?;
        metadata
            .jwks_uri
            .clone()
            .ok_or_else(|| self.missing(&metadata, "jwks_uri"))
    }

    /// The `token_endpoint` of the metadata.
    pub(crate) async fn token_endpoint(&self) -> Result<String, FetchError> {
        let metadata = self.metadata().await?;
        metadata
            .token_endpoint
            .clone()
            .ok_or_else(|| self.missing(&metadata, "token_endpoint"))
    }

    fn missing(&self, metadata: &IssuerMetadata, field: &'static str) -> FetchError {
        FetchError::MissingField {
            issuer: self.name.clone(),
            url: metadata.url.clone(),
            field,
        }
    }

    /// GET `url` and read its answer as JSON, within the bounds.
    pub(crate) async fn get_json(&self, url: &str) -> Result<Value, FetchError> {
        let response = self
            .http
            .get(url)
            .header(http::header::ACCEPT, "application/json")
            .send()
            .await
            .map_err(|e| unreachable(url, &e))?;
        let status = response.status();
        if !status.is_success() {
            return Err(FetchError::Status {
                url: url.to_owned(),
                status: status.as_u16(),
            });
        }
        let body = read_bounded(url, response).await?;
        serde_json::from_slice(&body).map_err(|e| FetchError::Unexpected {
            url: url.to_owned(),
            reason: format!("not JSON ({e})"),
        })
    }

    /// Try each metadata URL in turn; the first that answers for this issuer wins.
    async fn discover(&self) -> Result<Arc<IssuerMetadata>, FetchError> {
        let urls = metadata_urls(&self.url);
        let mut last = None;
        for url in &urls {
            match self.get_json(url).await {
                Ok(document) => return self.read_metadata(url, &document).map(Arc::new),
                // The issuer's host does not answer at all: the other URLs are on it too.
                Err(error @ FetchError::Unreachable { .. }) => {
                    last = Some(error);
                    break;
                }
                Err(error) => last = Some(error),
            }
        }
        Err(FetchError::NoMetadata {
            issuer: self.name.clone(),
            tried: urls.join(", "),
            last: Box::new(last.unwrap_or_else(|| FetchError::Unexpected {
                url: self.name.clone(),
                reason: "no metadata URL to try".to_owned(),
            })),
        })
    }

    fn read_metadata(&self, url: &str, document: &Value) -> Result<IssuerMetadata, FetchError> {
        let found = document.get("issuer").and_then(Value::as_str);
        if found != Some(self.name.as_str()) {
            return Err(FetchError::IssuerMismatch {
                url: url.to_owned(),
                found: shown(found.unwrap_or("(none)")),
                issuer: self.name.clone(),
            });
        }
        let field = |name: &'static str| {
            document
                .get(name)
                .and_then(Value::as_str)
                .filter(|value| usable_url(name, value).is_ok())
                .map(str::to_owned)
        };
        Ok(IssuerMetadata {
            url: url.to_owned(),
            jwks_uri: field("jwks_uri"),
            token_endpoint: field("token_endpoint"),
        })
    }
}

/// Read `response`'s body, failing past [`MAX_ANSWER_BYTES`].
pub(crate) async fn read_bounded(
    url: &str,
    mut response: reqwest::Response,
) -> Result<Vec<u8>, FetchError> {
    let too_large = || FetchError::TooLarge {
        url: url.to_owned(),
        limit: MAX_ANSWER_BYTES,
    };
    if response
        .content_length()
        .is_some_and(|length| length > MAX_ANSWER_BYTES as u64)
    {
        return Err(too_large());
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| unreachable(url, &e))? {
        if body.len() + chunk.len() > MAX_ANSWER_BYTES {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// A failed request to `url` as a [`FetchError::Unreachable`].
pub(crate) fn unreachable(url: &str, error: &reqwest::Error) -> FetchError {
    FetchError::Unreachable {
        url: url.to_owned(),
        reason: reason(error),
    }
}

/// What a reqwest error says, with its causes (its own text rarely says enough).
pub(crate) fn reason(error: &reqwest::Error) -> String {
    if error.is_timeout() {
        return format!("no answer within {} s", FETCH_TIMEOUT.as_secs());
    }
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// `value` of setting `field` as a URL this server will fetch: https, or http to this machine.
pub(crate) fn usable_url(field: &'static str, value: &str) -> Result<Url, AuthError> {
    let url = Url::parse(value).map_err(|e| AuthError::NotUrl {
        field,
        url: value.to_owned(),
        reason: e.to_string(),
    })?;
    match url.scheme() {
        "https" => Ok(url),
        "http" if is_loopback(&url) => Ok(url),
        "http" => Err(AuthError::Insecure {
            field,
            url: value.to_owned(),
        }),
        other => Err(AuthError::NotUrl {
            field,
            url: value.to_owned(),
            reason: format!("scheme `{other}` is neither https nor http"),
        }),
    }
}

fn is_loopback(url: &Url) -> bool {
    match url.host_str() {
        Some("localhost") => true,
        Some(host) => host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
            .is_ok_and(|ip| ip.is_loopback()),
        None => false,
    }
}

/// Where the metadata of `issuer` may be, in the order MCP's authorization spec tries them:
/// RFC 8414 with the issuer's path inserted after the well-known prefix, then OpenID discovery
/// the same way, then OpenID discovery appended to the path. An issuer without a path has two.
pub(crate) fn metadata_urls(issuer: &Url) -> Vec<String> {
    let mut origin = issuer.clone();
    origin.set_path("");
    origin.set_query(None);
    origin.set_fragment(None);
    let origin = origin.as_str().trim_end_matches('/').to_owned();
    let path = issuer.path().trim_end_matches('/');
    if path.is_empty() {
        vec![
            format!("{origin}/.well-known/oauth-authorization-server"),
            format!("{origin}/.well-known/openid-configuration"),
        ]
    } else {
        vec![
            format!("{origin}/.well-known/oauth-authorization-server{path}"),
            format!("{origin}/.well-known/openid-configuration{path}"),
            format!("{origin}{path}/.well-known/openid-configuration"),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn urls(issuer: &str) -> Vec<String> {
        metadata_urls(&Url::parse(issuer).unwrap())
    }

    #[test]
    fn an_issuer_without_a_path_has_rfc_8414_then_openid_metadata() {
        let expected = vec![
            "https://as.example.com/.well-known/oauth-authorization-server".to_owned(),
            "https://as.example.com/.well-known/openid-configuration".to_owned(),
        ];
        assert_eq!(urls("https://as.example.com"), expected);
        assert_eq!(urls("https://as.example.com/"), expected);
    }

    #[test]
    fn an_issuer_with_a_path_has_it_inserted_after_the_well_known_prefix() {
        assert_eq!(
            urls("https://as.example.com:8443/realms/one/"),
            vec![
                "https://as.example.com:8443/.well-known/oauth-authorization-server/realms/one",
                "https://as.example.com:8443/.well-known/openid-configuration/realms/one",
                "https://as.example.com:8443/realms/one/.well-known/openid-configuration",
            ]
        );
    }

    #[test]
    fn plain_http_is_for_loopback_only() {
        assert!(usable_url("issuer", "https://as.example.com").is_ok());
        assert!(usable_url("issuer", "http://127.0.0.1:9000").is_ok());
        assert!(usable_url("issuer", "http://[::1]:9000").is_ok());
        assert!(usable_url("issuer", "http://localhost/x").is_ok());
        assert_eq!(
            usable_url("jwksUri", "http://as.example.com/keys"),
            Err(AuthError::Insecure {
                field: "jwksUri",
                url: "http://as.example.com/keys".to_owned()
            })
        );
        assert!(matches!(
            usable_url("issuer", "as.example.com"),
            Err(AuthError::NotUrl { .. })
        ));
        assert!(matches!(
            usable_url("issuer", "ftp://as.example.com"),
            Err(AuthError::NotUrl { .. })
        ));
    }
}
