//! Token exchange (RFC 8693): the caller's token traded at the issuer's token endpoint, with the
//! proxy's own client credentials (`client_secret_basic`), for a token meant for one upstream;
//! and the proxy's own token for an upstream (the client credentials grant), for the connection
//! it holds in its own name.
//! The token got is cached per subject (`iss` + `sub`), audience and scope until shortly before
//! it expires; fetching it is single flight per key (callers of the same key wait for one
//! exchange, and share its failure).
//!
//! It never sends the caller's token anywhere but the issuer's token endpoint, never shows a
//! token or the secret in an error or a `Debug`, and never retries on its own.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use http::header;
use mcp_supervisor::core::config::TokenExchange;
use serde_json::Value;
use tokio::time::Instant;

use super::error::shown;
use super::issuer::{Issuer, read_bounded, reason};
use super::{ClientCredentials, FetchError, Identity};

const GRANT_TYPE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
const ACCESS_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:access_token";
const CLIENT_CREDENTIALS: &str = "client_credentials";
/// How long before its expiry a cached token is exchanged again, at most (and at most half its
/// lifetime, for short-lived ones).
const REFRESH_MARGIN: Duration = Duration::from_secs(30);
/// The most subjects × audiences remembered.
const CAPACITY: usize = 10_000;

/// What an upstream needs of an exchanged token (a `url` server's
/// `credentials.tokenExchange`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ExchangeTarget {
    /// The upstream's URL: the exchange's `audience` and `resource`.
    pub audience: String,
    /// The scope to ask for, if any.
    pub scope: Option<String>,
}

impl From<&TokenExchange> for ExchangeTarget {
    /// A `url` server's `credentials.tokenExchange`.
    fn from(config: &TokenExchange) -> Self {
        Self {
            audience: config.audience.clone(),
            scope: config.scope.clone(),
        }
    }
}

/// A token got by exchange, for one upstream. Its `Debug` never shows it.
#[derive(Clone)]
pub struct UpstreamToken {
    access_token: Arc<str>,
    /// When it expires, if the issuer said.
    pub expires_at: Option<Instant>,
}

impl UpstreamToken {
    /// The token.
    pub fn access_token(&self) -> &str {
        &self.access_token
    }

    /// The `Authorization` value that carries it upstream.
    pub fn authorization(&self) -> String {
        format!("Bearer {}", self.access_token)
    }
}

impl fmt::Debug for UpstreamToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UpstreamToken")
            .field("access_token", &"[redacted]")
            .field("expires_at", &self.expires_at)
            .finish()
    }
}

/// A token exchange that failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ExchangeError {
    /// The token endpoint is not known: the metadata could not be fetched or names none.
    #[error("token exchange at {issuer} needs its token endpoint: {error}")]
    NoEndpoint {
        /// The issuer.
        issuer: String,
        /// What finding it met.
        error: FetchError,
    },
    /// The token endpoint did not answer.
    #[error(
        "the token endpoint of {issuer} ({url}) did not answer a token exchange for {audience}: {reason}"
    )]
    Unreachable {
        /// The issuer.
        issuer: String,
        /// The endpoint.
        url: String,
        /// The upstream.
        audience: String,
        /// Why.
        reason: String,
    },
    /// The issuer refused (an OAuth error answer).
    #[error(
        "{issuer} refused the token exchange for {audience}: HTTP {status}, `{error}`{}; check that \
         the proxy's client may exchange tokens for this audience",
        description.as_deref().map(|d| format!(" ({d})")).unwrap_or_default()
    )]
    Refused {
        /// The issuer.
        issuer: String,
        /// The upstream.
        audience: String,
        /// The HTTP status.
        status: u16,
        /// The OAuth `error` (shown).
        error: String,
        /// The `error_description` (shown), if any.
        description: Option<String>,
    },
    /// A success answer without a usable token.
    #[error("{issuer} answered the token exchange for {audience} with {what}")]
    BadAnswer {
        /// The issuer.
        issuer: String,
        /// The upstream.
        audience: String,
        /// What was wrong.
        what: String,
    },
}

/// How a token is got.
#[derive(Clone, Copy)]
enum Grant<'a> {
    /// By exchange of this caller's token (RFC 8693).
    Exchange(&'a str),
    /// The proxy's own, by the client credentials grant.
    Own,
}

/// The cache key: whose token (empty issuer and subject: the proxy's own), for what.
#[derive(Clone, PartialEq, Eq, Hash)]
struct Subject {
    issuer: String,
    subject: String,
    target: ExchangeTarget,
}

/// A token held, and when to exchange again.
struct Held {
    token: UpstreamToken,
    refresh_at: Instant,
    expires_at: Instant,
}

/// One subject's exchanges: the lock makes them single flight.
#[derive(Default)]
struct Slot {
    /// Exchanges completed, so that a caller that waited for one shares its failure.
    completed: AtomicU64,
    state: tokio::sync::Mutex<SlotState>,
}

#[derive(Default)]
struct SlotState {
    held: Option<Held>,
    error: Option<ExchangeError>,
}

/// The token exchange client. Cheap to clone; clones share the cache.
#[derive(Clone)]
pub struct Exchanger {
    inner: Arc<Inner>,
}

struct Inner {
    issuer: Arc<Issuer>,
    client: ClientCredentials,
    slots: Mutex<HashMap<Subject, Arc<Slot>>>,
}

impl fmt::Debug for Exchanger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Exchanger")
            .field("issuer", &self.inner.issuer.name)
            .field("client", &self.inner.client)
            .finish_non_exhaustive()
    }
}

impl Exchanger {
    pub(crate) fn new(issuer: Arc<Issuer>, client: ClientCredentials) -> Self {
        Self {
            inner: Arc::new(Inner {
                issuer,
                client,
                slots: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// A token for `target` on behalf of `caller`: the cached one while it has more than the
    /// refresh margin left, else a new exchange (one at a time per caller and target).
    pub async fn token_for(
        &self,
        caller: &Identity,
        target: &ExchangeTarget,
    ) -> Result<UpstreamToken, ExchangeError> {
        let subject = Subject {
            issuer: caller.issuer.clone(),
            subject: caller.subject.clone(),
            target: target.clone(),
        };
        self.cached(subject, Grant::Exchange(caller.subject_token()))
            .await
    }

    /// The proxy's own token for `target` (the client credentials grant, with `target` as the
    /// resource): for the connection the proxy holds in its own name, which lists an
    /// upstream's tools and carries no caller's call. Cached and single flight as
    /// [`Exchanger::token_for`].
    pub async fn own_token(&self, target: &ExchangeTarget) -> Result<UpstreamToken, ExchangeError> {
        let subject = Subject {
            issuer: String::new(),
            subject: String::new(),
            target: target.clone(),
        };
        self.cached(subject, Grant::Own).await
    }

    /// An upstream refused `used`, the token of `caller` (`None`: the proxy's own) for
    /// `target`: it is dropped, so the next request gets a new one. Whether it was the one held
    /// (else a newer one is held already, or none).
    pub async fn forget(
        &self,
        caller: Option<&Identity>,
        target: &ExchangeTarget,
        used: &str,
    ) -> bool {
        let subject = Subject {
            issuer: caller.map(|c| c.issuer.clone()).unwrap_or_default(),
            subject: caller.map(|c| c.subject.clone()).unwrap_or_default(),
            target: target.clone(),
        };
        let slot = self.slot(subject);
        let mut state = slot.state.lock().await;
        let held = state
            .held
            .as_ref()
            .is_some_and(|held| held.token.access_token() == used);
        if held {
            state.held = None;
        }
        held
    }

    /// `subject`'s token: the one held while it has more than the refresh margin left, else
    /// one got by `grant` (one at a time per subject).
    async fn cached(
        &self,
        subject: Subject,
        grant: Grant<'_>,
    ) -> Result<UpstreamToken, ExchangeError> {
        let target = subject.target.clone();
        let slot = self.slot(subject);
        let seen = slot.completed.load(Ordering::Acquire);
        let mut state = slot.state.lock().await;
        let now = Instant::now();
        let usable = |state: &SlotState| {
            state
                .held
                .as_ref()
                .filter(|held| now < held.expires_at)
                .map(|held| held.token.clone())
        };
        if let Some(held) = &state.held
            && now < held.refresh_at
        {
            return Ok(held.token.clone());
        }
        // An exchange finished while this caller waited: share its outcome.
        if slot.completed.load(Ordering::Acquire) != seen {
            if let Some(token) = usable(&state) {
                return Ok(token);
            }
            if let Some(error) = &state.error {
                return Err(error.clone());
            }
        }
        let outcome = self.exchange(grant, &target).await;
        let answer = match outcome {
            Ok(held) => {
                let token = held.token.clone();
                state.held = Some(held).filter(|held| held.expires_at > held.refresh_at);
                state.error = None;
                Ok(token)
            }
            Err(error) => {
                state.error = Some(error.clone());
                usable(&state).ok_or(error)
            }
        };
        slot.completed.fetch_add(1, Ordering::Release);
        answer
    }

    /// The slot of `subject`, made if new (dropping idle ones when full).
    fn slot(&self, subject: Subject) -> Arc<Slot> {
        let mut slots = self
            .inner
            .slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if slots.len() >= CAPACITY && !slots.contains_key(&subject) {
            let now = Instant::now();
            // Keep slots in use and those holding a live token; if that is still too many,
            // keep only those in use.
            slots.retain(|_, slot| {
                Arc::strong_count(slot) > 1
                    || slot.state.try_lock().map_or(true, |state| {
                        state
                            .held
                            .as_ref()
                            .is_some_and(|held| now < held.expires_at)
                    })
            });
            if slots.len() >= CAPACITY {
                slots.retain(|_, slot| Arc::strong_count(slot) > 1);
            }
        }
        slots.entry(subject).or_default().clone()
    }

    /// One request at the token endpoint: an exchange of a caller's token, or the proxy's
    /// own client credentials grant.
    async fn exchange(
        &self,
        grant: Grant<'_>,
        target: &ExchangeTarget,
    ) -> Result<Held, ExchangeError> {
        let issuer = &self.inner.issuer;
        let url = issuer
            .token_endpoint()
            .await
            .map_err(|error| ExchangeError::NoEndpoint {
                issuer: issuer.name.clone(),
                error,
            })?;
        let mut fields = match grant {
            Grant::Exchange(subject_token) => vec![
                ("grant_type", GRANT_TYPE),
                ("subject_token", subject_token),
                ("subject_token_type", ACCESS_TOKEN_TYPE),
                ("audience", target.audience.as_str()),
            ],
            Grant::Own => vec![("grant_type", CLIENT_CREDENTIALS)],
        };
        fields.push(("resource", target.audience.as_str()));
        if let Some(scope) = &target.scope {
            fields.push(("scope", scope));
        }
        let client = &self.inner.client;
        // RFC 6749 §2.3.1: id and secret are form-encoded before they are joined and base64'd.
        let basic = STANDARD.encode(format!(
            "{}:{}",
            form_escape(&client.id),
            form_escape(&client.secret)
        ));
        let sent = Instant::now();
        let unreachable = |reason: String| ExchangeError::Unreachable {
            issuer: issuer.name.clone(),
            url: url.clone(),
            audience: target.audience.clone(),
            reason,
        };
        let response = issuer
            .http()
            .post(&url)
            .header(header::AUTHORIZATION, format!("Basic {basic}"))
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(header::ACCEPT, "application/json")
            .body(form(&fields))
            .send()
            .await
            .map_err(|e| unreachable(reason(&e)))?;
        let status = response.status();
        let body = read_bounded(&url, response)
            .await
            .map_err(|e| unreachable(e.to_string()))?;
        let answer: Option<Value> = serde_json::from_slice(&body).ok();
        let text = |name: &str| {
            answer
                .as_ref()
                .and_then(|a| a.get(name))
                .and_then(Value::as_str)
        };
        let bad = |what: &str| ExchangeError::BadAnswer {
            issuer: issuer.name.clone(),
            audience: target.audience.clone(),
            what: what.to_owned(),
        };
        if !status.is_success() {
            return Err(ExchangeError::Refused {
                issuer: issuer.name.clone(),
                audience: target.audience.clone(),
                status: status.as_u16(),
                error: shown(text("error").unwrap_or("(no error code)")),
                description: text("error_description").map(shown),
            });
        }
        let access_token = text("access_token")
            .filter(|token| !token.is_empty())
            .ok_or_else(|| bad("no `access_token`"))?;
        let lifetime = match answer.as_ref().and_then(|a| a.get("expires_in")) {
            None => None,
            Some(seconds) => Some(
                seconds
                    .as_f64()
                    .and_then(|s| Duration::try_from_secs_f64(s).ok())
                    .ok_or_else(|| bad("an `expires_in` that is not a number of seconds"))?,
            ),
        };
        // Without `expires_in` the token is used once, not cached.
        let lifetime = lifetime.unwrap_or(Duration::ZERO);
        let expires_at = sent + lifetime;
        Ok(Held {
            token: UpstreamToken {
                access_token: Arc::from(access_token),
                expires_at: (!lifetime.is_zero()).then_some(expires_at),
            },
            refresh_at: expires_at - REFRESH_MARGIN.min(lifetime / 2),
            expires_at,
        })
    }
}

/// `fields` as `application/x-www-form-urlencoded`.
fn form(fields: &[(&str, &str)]) -> String {
    fields
        .iter()
        .map(|(name, value)| format!("{}={}", form_escape(name), form_escape(value)))
        .collect::<Vec<_>>()
        .join("&")
}

/// `text` percent-encoded, all but the unreserved characters.
fn form_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn form_fields_are_percent_encoded() {
        assert_eq!(
            form(&[("grant_type", GRANT_TYPE), ("scope", "a b"), ("x", "é&=+")]),
            "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Atoken-exchange\
             &scope=a%20b&x=%C3%A9%26%3D%2B"
        );
    }

    #[test]
    fn an_upstream_token_is_never_shown() {
        let token = UpstreamToken {
            access_token: Arc::from("secret-token"),
            expires_at: None,
        };
        assert!(!format!("{token:?}").contains("secret-token"));
        assert_eq!(token.authorization(), "Bearer secret-token");
        let client = ClientCredentials {
            id: "proxy".to_owned(),
            secret: "hunter2".to_owned(),
        };
        assert!(!format!("{client:?}").contains("hunter2"));
    }
}
