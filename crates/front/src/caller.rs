//! Who a client is, as the transport in front of the message face vouched for it ([`Caller`]):
//! the identity of a verified access token (SPEC §14), carried with the client so that the
//! dispatcher can authorize, limit and audit each request by it.
//!
//! It holds what a token said, never the token itself, and it checks nothing: verifying a
//! token is the transport's (`auth`, on the HTTP face); a client no one vouched for has no
//! caller, and so no identity.

use mcp_supervisor::core::authorize::Claims;

/// The identity a request comes with. Its `Debug` shows who, never the claims' values.
#[derive(Clone)]
pub struct Caller {
    /// The token's `iss`.
    pub issuer: String,
    /// The token's `sub`.
    pub subject: String,
    /// The token's `client_id` (else `azp`), for the audit.
    pub client_id: Option<String>,
    /// Every claim of the token, as `authorize` rules read them (`jwt`).
    pub claims: Claims,
    /// [`Caller::key`], made once.
    key: String,
}

impl std::fmt::Debug for Caller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Caller")
            .field("issuer", &self.issuer)
            .field("subject", &self.subject)
            .field("client_id", &self.client_id)
            .finish_non_exhaustive()
    }
}

impl Caller {
    pub fn new(
        issuer: impl Into<String>,
        subject: impl Into<String>,
        client_id: Option<String>,
        claims: Claims,
    ) -> Self {
        let (issuer, subject) = (issuer.into(), subject.into());
        let key = key(&issuer, &subject);
        Self {
            issuer,
            subject,
            client_id,
            claims,
            key,
        }
    }

    /// The identity as one string (issuer and subject): what a session is sealed with, what a
    /// rate limit counts by, whose instance a `user`-isolated server is.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Whether `other` is the same identity (same issuer, same subject).
    pub fn same_identity(&self, other: &Caller) -> bool {
        self.key == other.key
    }
}

/// The key of the identity `sub` at `iss`: unambiguous whatever either holds (the issuer's
/// length comes first).
pub fn key(issuer: &str, subject: &str) -> String {
    format!("{}:{issuer}{subject}", issuer.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_identity_is_its_issuer_and_subject_and_nothing_can_be_confused() {
        let a = Caller::new("https://a", "b:c", None, Claims::default());
        let b = Caller::new("https://a", "b:c", Some("app".into()), Claims::default());
        let c = Caller::new("https://ab", ":c", None, Claims::default());
        assert!(a.same_identity(&b));
        assert!(!a.same_identity(&c));
        assert_ne!(key("ab", "c"), key("a", "bc"));
    }
}
