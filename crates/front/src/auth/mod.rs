//! Identity on the HTTP face (SPEC §14): the checks of an OAuth 2.1 resource server. A bearer
//! token is a JWT access token (RFC 9068) signed by a key of the issuer's JWKS; [`Verifier`]
//! checks it once and hands back an [`Identity`] (or a [`Refusal`] that says how to answer),
//! [`Exchanger`] trades it for a token of an upstream's own (RFC 8693), and [`metadata`] writes
//! what the face answers without a token (RFC 9728 metadata, `WWW-Authenticate`).
//!
//! The parts, one concern each:
//! - `issuer`: the issuer's metadata (RFC 8414, else OpenID discovery) and bounded fetches;
//! - `jwks`: the issuer's keys, cached, refetched once for a key id the cache lacks (single
//!   flight, at most one fetch per [`REFETCH_INTERVAL`]);
//! - `token`: the checks of one token (algorithm, key, claims), pure;
//! - `cache`: tokens already verified, until they expire;
//! - `verifier`: the above in order, as [`Verifier::check`];
//! - `exchange`: token exchange at the issuer's token endpoint, cached per subject;
//! - `delegate`: the tokens of `url` servers with `credentials`, for the library's hub;
//! - [`metadata`]: the pieces of the face's answers (pure functions).
//!
//! It never routes, never answers a request and never logs a token: the host's routes call
//! [`Verifier::check`] and turn a [`Refusal`] into `401`/`403` with
//! [`Refusal::www_authenticate`]. The caller's token never goes upstream: only an exchanged one.
//!
//! A route checks a request in two lines (`auth` an `Arc<Verifier>` in the router's state):
//!
//! ```no_run
//! # async fn route(auth: &mcp_supervisor_front::auth::Verifier, headers: &http::HeaderMap, base: &str) {
//! use mcp_supervisor_front::auth::{Access, metadata};
//! let authorization = headers.get(http::header::AUTHORIZATION).and_then(|v| v.to_str().ok());
//! match auth.check(authorization, Access::Mcp).await {
//!     Ok(identity) => { /* carry `identity` (an Arc<Identity>) with the request */ }
//!     Err(refusal) => {
//!         let challenge = refusal.www_authenticate(&metadata::metadata_url(base));
//!         // answer refusal.status() with `WWW-Authenticate: {challenge}`; nothing runs.
//!     }
//! }
//! # }
//! ```

mod cache;
mod clock;
mod delegate;
mod error;
mod exchange;
mod issuer;
mod jwks;
pub mod metadata;
mod token;
mod verifier;

use std::fmt;
use std::time::Duration;

use mcp_supervisor::core::config::AuthConfig;

pub use clock::WallClock;
pub use delegate::Delegate;
pub use error::{AuthError, FetchError, Invalid, Refusal};
pub use exchange::{ExchangeError, ExchangeTarget, Exchanger, UpstreamToken};
pub use token::Identity;
pub use verifier::Verifier;

/// How long a fetch of the issuer (metadata, keys, token exchange) may take, connection and
/// body included.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest answer read from the issuer; past it the fetch fails.
pub const MAX_ANSWER_BYTES: usize = 256 * 1024;
/// The shortest time between two fetches of the JWKS that a token can cause: a thousand tokens
/// with made-up key ids cost the issuer one fetch per this interval, not a thousand.
pub const REFETCH_INTERVAL: Duration = Duration::from_secs(10);
/// How many verified tokens are remembered (each until it expires).
pub const VERIFIED_CAPACITY: usize = 10_000;
/// The clock skew allowed on `exp` and `nbf` unless the config says otherwise.
pub const DEFAULT_CLOCK_SKEW: Duration = Duration::from_secs(60);

/// What the config's `"auth"` says (SPEC §14), as the config crate fills it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthSettings {
    /// The issuer, exactly as its tokens' `iss` says it (a trailing slash matters).
    pub issuer: String,
    /// This resource's URL: a token's `aud` must hold it; it is the metadata's `resource`.
    pub audience: String,
    /// Scopes a token needs, every one, to use `/mcp`.
    pub scopes: Vec<String>,
    /// Scopes a token needs, every one, for the admin endpoints.
    pub admin_scopes: Vec<String>,
    /// The JWKS URL, when the issuer's metadata should not be asked for it.
    pub jwks_uri: Option<String>,
    /// The skew allowed between the issuer's clock and ours on `exp` and `nbf`.
    pub clock_skew: Duration,
    /// The proxy's own client credentials at the issuer, for token exchange.
    pub client: Option<ClientCredentials>,
}

impl AuthSettings {
    /// Settings for `issuer` and `audience` with no scopes, discovery of the keys, the default
    /// clock skew and no client credentials.
    pub fn new(issuer: impl Into<String>, audience: impl Into<String>) -> Self {
        Self {
            issuer: issuer.into(),
            audience: audience.into(),
            scopes: Vec::new(),
            admin_scopes: Vec::new(),
            jwks_uri: None,
            clock_skew: DEFAULT_CLOCK_SKEW,
            client: None,
        }
    }
}

impl From<&AuthConfig> for AuthSettings {
    /// The config's `auth`, as read and checked by the config crate.
    fn from(config: &AuthConfig) -> Self {
        Self {
            issuer: config.issuer.clone(),
            audience: config.audience.clone(),
            scopes: config.scopes.clone(),
            admin_scopes: config.admin_scopes.clone(),
            jwks_uri: config.jwks_uri.clone(),
            clock_skew: config.clock_skew,
            client: config
                .client_credentials()
                .map(|(id, secret)| ClientCredentials {
                    id: id.to_owned(),
                    secret: secret.expose().to_owned(),
                }),
        }
    }
}

/// The proxy's client id and secret at the issuer (`auth.clientId`, `auth.clientSecret`).
/// Its `Debug` never shows the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct ClientCredentials {
    /// The client id.
    pub id: String,
    /// The client secret.
    pub secret: String,
}

impl fmt::Debug for ClientCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientCredentials")
            .field("id", &self.id)
            .field("secret", &"[redacted]")
            .finish()
    }
}

/// What a request wants to reach, which says the scopes its token needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// `/mcp`: every scope in [`AuthSettings::scopes`].
    Mcp,
    /// The admin endpoints: every scope in [`AuthSettings::admin_scopes`].
    Admin,
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcp_supervisor::core::config::Secret;

    #[test]
    fn settings_come_from_the_configs_auth_with_the_client_when_both_halves_are_set() {
        let mut config = AuthConfig {
            issuer: "https://issuer.example.com".to_owned(),
            audience: "https://mcp.example.com/mcp".to_owned(),
            scopes: vec!["mcp:use".to_owned()],
            admin_scopes: vec!["mcp:admin".to_owned()],
            jwks_uri: Some("https://issuer.example.com/keys".to_owned()),
            clock_skew: Duration::from_secs(5),
            client_id: Some("proxy".to_owned()),
            client_secret: Some(Secret::new("s3cret")),
        };
        let settings = AuthSettings::from(&config);
        assert_eq!(settings.issuer, config.issuer);
        assert_eq!(settings.audience, config.audience);
        assert_eq!(settings.scopes, config.scopes);
        assert_eq!(settings.admin_scopes, config.admin_scopes);
        assert_eq!(settings.jwks_uri, config.jwks_uri);
        assert_eq!(settings.clock_skew, Duration::from_secs(5));
        assert_eq!(
            settings.client,
            Some(ClientCredentials {
                id: "proxy".to_owned(),
                secret: "s3cret".to_owned()
            })
        );
        assert!(!format!("{settings:?}").contains("s3cret"));
        config.client_secret = None;
        assert_eq!(AuthSettings::from(&config).client, None);
    }
}
