//! The verifier: a request's `Authorization` header to an [`Identity`] or a [`Refusal`], in
//! order: the bearer token, the tokens already verified, the token's header, its key (the
//! issuer's JWKS, refetched once for an unknown key), its signature, its claims, and the scopes
//! the request needs. What verified is kept until it expires.
//!
//! It never answers a request (the host turns a refusal into a status and a challenge), never
//! shows or sends the token, and never waits on the issuer for a token it has already verified
//! or whose key it has cached.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use reqwest::Url;
use serde_json::Value;

use super::cache::Verified;
use super::delegate::Latest;
use super::exchange::Exchanger;
use super::issuer::{Issuer, usable_url};
use super::jwks::Keys;
use super::token::{self, Expect};
use super::{
    Access, AuthError, AuthSettings, FetchError, Identity, Invalid, Refusal, VERIFIED_CAPACITY,
    WallClock, metadata,
};

/// The longest token read; past it the token is refused unread.
const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// Checks bearer tokens for one issuer and audience. Share one (in an `Arc`) across the face:
/// its caches are what make a repeated token cheap.
pub struct Verifier {
    settings: AuthSettings,
    issuer: Arc<Issuer>,
    keys: Arc<Keys>,
    verified: Verified,
    /// Each identity's newest token, for token exchange.
    latest: Latest,
    clock: WallClock,
    scopes: Arc<[String]>,
    admin_scopes: Arc<[String]>,
    signature_checks: AtomicU64,
}

impl Verifier {
    /// A verifier for `settings`, on the system clock. No fetch yet: the first token fetches
    /// the issuer's keys (or call [`Verifier::refresh_keys`] at startup).
    pub fn new(settings: AuthSettings) -> Result<Self, AuthError> {
        Self::with_clock(settings, WallClock::System)
    }

    /// The same, reading `exp` and `nbf` against `clock` (tests: [`WallClock::following_tokio`]).
    pub fn with_clock(settings: AuthSettings, clock: WallClock) -> Result<Self, AuthError> {
        let issuer = Arc::new(Issuer::new(&settings.issuer)?);
        if let Some(jwks_uri) = &settings.jwks_uri {
            usable_url("jwksUri", jwks_uri)?;
        }
        Url::parse(&settings.audience).map_err(|e| AuthError::NotUrl {
            field: "audience",
            url: settings.audience.clone(),
            reason: e.to_string(),
        })?;
        Ok(Self {
            keys: Arc::new(Keys::new(issuer.clone(), settings.jwks_uri.clone())),
            issuer,
            verified: Verified::new(VERIFIED_CAPACITY, settings.clock_skew),
            latest: Latest::new(VERIFIED_CAPACITY),
            clock,
            scopes: Arc::from(settings.scopes.clone()),
            admin_scopes: Arc::from(settings.admin_scopes.clone()),
            signature_checks: AtomicU64::new(0),
            settings,
        })
    }

    /// The settings it checks against.
    pub fn settings(&self) -> &AuthSettings {
        &self.settings
    }

    /// The protected resource metadata to serve at [`metadata::METADATA_PATHS`].
    pub fn metadata(&self) -> Value {
        metadata::protected_resource(&self.settings)
    }

    /// The token exchange client, sharing this verifier's issuer; `None` without client
    /// credentials (`auth.clientId`, `auth.clientSecret`).
    pub fn exchanger(&self) -> Option<Exchanger> {
        let client = self.settings.client.clone()?;
        Some(Exchanger::new(self.issuer.clone(), client))
    }

    /// Fetch the issuer's keys now (e.g. at startup, so that the first caller does not wait),
    /// without spending the refetch that a token with a key id the cache lacks may cause.
    pub async fn refresh_keys(&self) -> Result<(), FetchError> {
        match self.keys.load().await {
            None => Ok(()),
            Some(error) => Err(error),
        }
    }

    /// The newest unexpired token that verified of the identity `key` (as
    /// [`crate::caller::key`] makes it, from `iss` and `sub`), with the scopes `/mcp` needs:
    /// the `subject_token` of its token exchanges.
    pub fn latest(&self, key: &str) -> Option<Arc<Identity>> {
        self.latest.get(key, self.clock.now())
    }

    /// How many signatures it has checked (a token found verified costs none).
    pub fn signature_checks(&self) -> u64 {
        self.signature_checks.load(Ordering::Relaxed)
    }

    /// The identity of a request whose `Authorization` header is `authorization` (`None` when
    /// absent or not UTF-8), if its token is valid and holds every scope `access` needs.
    pub async fn check(
        &self,
        authorization: Option<&str>,
        access: Access,
    ) -> Result<Arc<Identity>, Refusal> {
        let scopes = self.needed(access);
        match authorization.map(metadata::bearer_token) {
            None | Some(Ok(None)) => Err(Refusal::NoToken {
                scopes: scopes.clone(),
            }),
            Some(Err(reason)) => Err(Refusal::InvalidToken {
                reason,
                scopes: scopes.clone(),
            }),
            Some(Ok(Some(token))) => self.check_token(token, access).await,
        }
    }

    /// The identity of bearer `token`, if it is valid and holds every scope `access` needs.
    pub async fn check_token(&self, token: &str, access: Access) -> Result<Arc<Identity>, Refusal> {
        let needed = self.needed(access);
        if token.len() > MAX_TOKEN_BYTES {
            return Err(Refusal::InvalidToken {
                reason: Invalid::Malformed("it is longer than 16 KiB"),
                scopes: needed.clone(),
            });
        }
        let identity = match self.verified.get(token, self.clock.now()) {
            Some(identity) => identity,
            None => {
                let identity =
                    self.verify(token)
                        .await
                        .map_err(|reason| Refusal::InvalidToken {
                            reason,
                            scopes: needed.clone(),
                        })?;
                self.verified.insert(identity.clone(), self.clock.now());
                if identity.missing_scopes(&self.scopes).is_empty() {
                    self.latest.saw(&identity, self.clock.now());
                }
                identity
            }
        };
        let missing = identity.missing_scopes(needed);
        if missing.is_empty() {
            Ok(identity)
        } else {
            Err(Refusal::InsufficientScope {
                needed: needed.clone(),
                missing,
            })
        }
    }

    fn needed(&self, access: Access) -> &Arc<[String]> {
        match access {
            Access::Mcp => &self.scopes,
            Access::Admin => &self.admin_scopes,
        }
    }

    /// The full check of a token not seen before.
    async fn verify(&self, token: &str) -> Result<Arc<Identity>, Invalid> {
        let parsed = token::parse(token)?;
        let key = self.keys.find(parsed.kid.as_deref(), parsed.alg).await?;
        self.signature_checks.fetch_add(1, Ordering::Relaxed);
        parsed.signed_by(&key, &self.settings.issuer)?;
        let expect = Expect {
            issuer: &self.settings.issuer,
            audience: &self.settings.audience,
            skew: self.settings.clock_skew,
        };
        Ok(Arc::new(parsed.identity(
            token,
            &expect,
            self.clock.now(),
        )?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> AuthSettings {
        let mut settings =
            AuthSettings::new("https://issuer.example.com", "https://mcp.example/mcp");
        settings.scopes = vec!["mcp".to_owned()];
        settings.admin_scopes = vec!["admin".to_owned()];
        settings
    }

    #[tokio::test]
    async fn no_header_another_scheme_or_a_broken_bearer_is_refused_before_any_fetch() {
        let verifier = Verifier::new(settings()).unwrap();
        let no_token = Refusal::NoToken {
            scopes: Arc::from(vec!["mcp".to_owned()]),
        };
        assert_eq!(
            verifier.check(None, Access::Mcp).await.err(),
            Some(no_token.clone())
        );
        assert_eq!(
            verifier.check(Some("Basic dTpw"), Access::Mcp).await.err(),
            Some(no_token)
        );
        let refusal = verifier
            .check(Some("Bearer a b"), Access::Admin)
            .await
            .unwrap_err();
        assert!(matches!(
            refusal,
            Refusal::InvalidToken {
                reason: Invalid::Malformed(_),
                ..
            }
        ));
        assert_eq!(refusal.scopes(), ["admin".to_owned()]);
        let refusal = verifier
            .check(Some("Bearer not-a-jwt"), Access::Mcp)
            .await
            .unwrap_err();
        assert!(matches!(
            refusal,
            Refusal::InvalidToken {
                reason: Invalid::Malformed(_),
                ..
            }
        ));
        assert_eq!(verifier.signature_checks(), 0);
    }

    #[test]
    fn settings_that_cannot_be_used_are_refused_with_their_name() {
        let mut bad = settings();
        bad.issuer = "http://issuer.example.com".to_owned();
        assert!(matches!(
            Verifier::new(bad),
            Err(AuthError::Insecure {
                field: "issuer",
                ..
            })
        ));
        let mut bad = settings();
        bad.jwks_uri = Some("keys.json".to_owned());
        assert!(matches!(
            Verifier::new(bad),
            Err(AuthError::NotUrl {
                field: "jwksUri",
                ..
            })
        ));
        let mut bad = settings();
        bad.audience = "mcp".to_owned();
        assert!(matches!(
            Verifier::new(bad),
            Err(AuthError::NotUrl {
                field: "audience",
                ..
            })
        ));
    }

    #[test]
    fn the_exchanger_needs_client_credentials() {
        assert!(Verifier::new(settings()).unwrap().exchanger().is_none());
        let mut with_client = settings();
        with_client.client = Some(super::super::ClientCredentials {
            id: "proxy".to_owned(),
            secret: "s".to_owned(),
        });
        assert!(Verifier::new(with_client).unwrap().exchanger().is_some());
    }
}
