//! The tokens of `url` servers with `credentials` (SPEC §14), as the library's
//! [`Delegation`] hook asks for them: an identity's own connection carries tokens exchanged
//! (RFC 8693) for that identity's latest verified token; the connection the proxy holds in its
//! own name (it lists the server's tools, no caller's call goes on it) carries the proxy's own
//! token for the server (client credentials). [`Latest`] keeps, per identity, the newest token
//! that verified, for the exchanges.
//!
//! The caller's own token never goes upstream: it is only ever the `subject_token` of an
//! exchange at the issuer. It never logs a token.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use mcp_supervisor::auth::{Credentials, Delegation};
use mcp_supervisor::core::classify::Failure;
use mcp_supervisor::core::config::{Credentials as ServerCredentials, ServerConfig};
use mcp_supervisor::link::BoxFuture;

use super::{ExchangeTarget, Exchanger, Identity, Verifier};

/// The newest verified token of each identity, until it expires. Bounded: when full, the
/// expired go first, then the one that expires soonest.
pub(crate) struct Latest {
    by_key: Mutex<HashMap<String, Arc<Identity>>>,
    capacity: usize,
}

impl Latest {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            by_key: Mutex::new(HashMap::new()),
            capacity: capacity.max(1),
        }
    }

    /// `identity` verified now: kept if it outlives the one held for its identity.
    pub(crate) fn saw(&self, identity: &Arc<Identity>, now: SystemTime) {
        let key = crate::caller::key(&identity.issuer, &identity.subject);
        let mut by_key = self.by_key.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(held) = by_key.get(&key)
            && held.expires >= identity.expires
        {
            return;
        }
        if by_key.len() >= self.capacity && !by_key.contains_key(&key) {
            by_key.retain(|_, held| held.expires > now);
            if by_key.len() >= self.capacity
                && let Some(soonest) = by_key
                    .iter()
                    .min_by_key(|(_, held)| held.expires)
                    .map(|(key, _)| key.clone())
            {
                by_key.remove(&soonest);
            }
        }
        by_key.insert(key, identity.clone());
    }

    /// The newest token of the identity `key` (as [`crate::caller::key`] makes it), if it has
    /// not expired at `now`.
    pub(crate) fn get(&self, key: &str, now: SystemTime) -> Option<Arc<Identity>> {
        let by_key = self.by_key.lock().unwrap_or_else(PoisonError::into_inner);
        by_key.get(key).filter(|held| held.expires > now).cloned()
    }
}

/// The [`Delegation`] of a face with `auth` and the proxy's client credentials.
pub struct Delegate {
    verifier: Arc<Verifier>,
    exchanger: Exchanger,
}

impl Delegate {
    /// `None` when the verifier has no client credentials (`auth.clientId`,
    /// `auth.clientSecret`): the config refuses `credentials` without them.
    pub fn new(verifier: Arc<Verifier>) -> Option<Self> {
        let exchanger = verifier.exchanger()?;
        Some(Self {
            verifier,
            exchanger,
        })
    }
}

impl Delegation for Delegate {
    fn credentials(
        &self,
        server: &ServerConfig,
        identity: Option<&str>,
    ) -> Option<Arc<dyn Credentials>> {
        let ServerCredentials::TokenExchange(exchange) = server.credentials.as_ref()?;
        Some(Arc::new(Upstream {
            verifier: self.verifier.clone(),
            exchanger: self.exchanger.clone(),
            target: ExchangeTarget::from(exchange),
            identity: identity.map(str::to_owned),
        }))
    }
}

/// One connection's tokens: one identity's, or the proxy's own (`identity: None`).
struct Upstream {
    verifier: Arc<Verifier>,
    exchanger: Exchanger,
    target: ExchangeTarget,
    identity: Option<String>,
}

impl Upstream {
    /// The identity's newest token, or why there is none.
    fn subject(&self, key: &str) -> Result<Arc<Identity>, Failure> {
        self.verifier
            .latest(key)
            .ok_or_else(|| Failure::Unauthorized {
                message: "no unexpired token of this caller is known to exchange; its next request brings one".into(),
            })
    }
}

impl Credentials for Upstream {
    fn bearer(&self) -> BoxFuture<'_, Result<Option<String>, Failure>> {
        Box::pin(async move {
            let token = match &self.identity {
                Some(key) => {
                    let subject = self.subject(key)?;
                    self.exchanger.token_for(&subject, &self.target).await
                }
                None => self.exchanger.own_token(&self.target).await,
            };
            token
                .map(|token| Some(token.access_token().to_owned()))
                .map_err(|e| Failure::Unauthorized {
                    message: e.to_string(),
                })
        })
    }

    fn rejected<'a>(
        &'a self,
        status: u16,
        _challenge: Option<&'a str>,
        used: Option<&'a str>,
    ) -> BoxFuture<'a, Result<(), Failure>> {
        Box::pin(async move {
            let subject = match &self.identity {
                Some(key) => Some(self.subject(key)?),
                None => None,
            };
            // Dropped, so the next request gets a fresh one; once: a fresh one refused fails.
            let dropped = match used {
                Some(used) => {
                    self.exchanger
                        .forget(subject.as_deref(), &self.target, used)
                        .await
                }
                None => false,
            };
            if dropped {
                return Ok(());
            }
            Err(Failure::Unauthorized {
                message: format!(
                    "the server refused the token obtained for {} (HTTP {status}); check what the issuer grants the proxy's client for this audience",
                    self.target.audience
                ),
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::cache::tests::{at, identity};

    fn key(subject: &str) -> String {
        crate::caller::key("i", subject)
    }

    #[test]
    fn the_newest_token_of_an_identity_is_kept_until_it_expires() {
        let latest = Latest::new(10);
        let older = identity("sig-a", "alice", 100);
        let newer = identity("sig-b", "alice", 200);
        latest.saw(&newer, at(0));
        // An older token seen later does not replace a newer one.
        latest.saw(&older, at(1));
        let held = latest.get(&key("alice"), at(2)).expect("alice's token");
        assert_eq!(held.subject_token(), newer.subject_token());
        assert!(latest.get(&key("bob"), at(2)).is_none());
        // Gone once it expires.
        assert!(latest.get(&key("alice"), at(200)).is_none());
    }

    #[test]
    fn when_full_the_expired_go_first_then_the_soonest_to_expire() {
        let latest = Latest::new(2);
        latest.saw(&identity("s1", "a", 50), at(0));
        latest.saw(&identity("s2", "b", 300), at(0));
        // At 60, a's has expired: it makes room.
        latest.saw(&identity("s3", "c", 400), at(60));
        assert!(latest.get(&key("b"), at(61)).is_some());
        assert!(latest.get(&key("c"), at(61)).is_some());
        // None expired: b's, which expires soonest, goes.
        latest.saw(&identity("s4", "d", 500), at(61));
        assert!(latest.get(&key("b"), at(62)).is_none());
        assert!(latest.get(&key("c"), at(62)).is_some());
        assert!(latest.get(&key("d"), at(62)).is_some());
    }
}
