//! What can go wrong with identity: a request refused ([`Refusal`], and why a token is invalid,
//! [`Invalid`]), a fetch from the issuer that failed ([`FetchError`]), and settings that cannot
//! be used ([`AuthError`]). Each message names the thing and says what to do.
//!
//! Text that a token or an issuer chose (a key id, an algorithm, an `iss`) is shown cut and
//! stripped to printable ASCII ([`shown`]), so a message can go into a header or a log line.
//! Nothing here ever holds a token.

use std::sync::Arc;

use http::StatusCode;

use super::metadata;

/// Why a request gets no identity, and how to answer it: [`Refusal::status`] and
/// [`Refusal::www_authenticate`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// No `Authorization: Bearer` header.
    #[error(
        "no bearer token: send `Authorization: Bearer <token>` with an access token from the issuer"
    )]
    NoToken {
        /// The scopes the request needed.
        scopes: Arc<[String]>,
    },
    /// A token came and failed a check.
    #[error("the bearer token was refused: {reason}")]
    InvalidToken {
        /// The check it failed.
        reason: Invalid,
        /// The scopes the request needed.
        scopes: Arc<[String]>,
    },
    /// A valid token without every scope the request needs.
    #[error("the token lacks scope `{}`: ask the issuer for a token with scope `{}`", missing.join(" "), needed.join(" "))]
    InsufficientScope {
        /// Every scope the request needs.
        needed: Arc<[String]>,
        /// Those the token lacks.
        missing: Vec<String>,
    },
}

impl Refusal {
    /// `401` for no token or an invalid one, `403` for a valid one short of scope.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::NoToken { .. } | Self::InvalidToken { .. } => StatusCode::UNAUTHORIZED,
            Self::InsufficientScope { .. } => StatusCode::FORBIDDEN,
        }
    }

    /// The scopes the request needed (the `scope` of the challenge).
    pub fn scopes(&self) -> &[String] {
        match self {
            Self::NoToken { scopes } | Self::InvalidToken { scopes, .. } => scopes,
            Self::InsufficientScope { needed, .. } => needed,
        }
    }

    /// The `WWW-Authenticate` value of the answer, pointing at the resource metadata at
    /// `metadata_url` (see [`metadata::metadata_url`]).
    pub fn www_authenticate(&self, metadata_url: &str) -> String {
        let error = match self {
            Self::NoToken { .. } => None,
            Self::InvalidToken { reason, .. } => {
                Some((metadata::BearerError::InvalidToken, reason.to_string()))
            }
            Self::InsufficientScope { .. } => {
                Some((metadata::BearerError::InsufficientScope, self.to_string()))
            }
        };
        metadata::challenge(
            metadata_url,
            error.as_ref().map(|(code, text)| (*code, text.as_str())),
            self.scopes(),
        )
    }
}

/// The check a token failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Invalid {
    /// Not a signed JWT (three base64url parts, JSON header and claims).
    #[error("it is not a signed JWT ({0}): send the access token as the issuer issued it")]
    Malformed(&'static str),
    /// An algorithm outside the asymmetric ones: `none`, every `HS*`, anything unknown.
    #[error(
        "its algorithm `{0}` is not accepted: only RS256/384/512, PS256/384/512, ES256/384 and EdDSA are"
    )]
    Algorithm(String),
    /// A `crit` header: extensions this server does not understand.
    #[error("its header has `crit` extensions, which this server does not understand")]
    Critical,
    /// The key named cannot check this algorithm (e.g. an RSA key and `ES256`).
    #[error("key `{kid}` of {issuer} is {kind} and cannot check an {alg} signature")]
    KeyMismatch {
        /// The key id (shown).
        kid: String,
        /// The key's type.
        kind: &'static str,
        /// The token's algorithm.
        alg: &'static str,
        /// The issuer.
        issuer: String,
    },
    /// No key of that id, even after refetching the JWKS (or within [`super::REFETCH_INTERVAL`]
    /// of the last fetch).
    #[error("{issuer} publishes no key `{kid}` (its JWKS was refetched): get a new token")]
    UnknownKey {
        /// The key id (shown).
        kid: String,
        /// The issuer.
        issuer: String,
    },
    /// No `kid`, and no key of the issuer fits the algorithm.
    #[error("the token names no key (`kid`) and {issuer} publishes none for {alg}")]
    NoKey {
        /// The token's algorithm.
        alg: &'static str,
        /// The issuer.
        issuer: String,
    },
    /// No `kid`, and several keys of the issuer fit: this server does not try them in turn.
    #[error(
        "the token names no key (`kid`) and {count} keys of {issuer} fit {alg}: the issuer must set `kid`"
    )]
    AmbiguousKey {
        /// How many keys fit.
        count: usize,
        /// The token's algorithm.
        alg: &'static str,
        /// The issuer.
        issuer: String,
    },
    /// The key is not cached and the issuer's keys could not be fetched.
    #[error(
        "its key is not among those cached and {issuer}'s keys could not be fetched ({error}); \
         tokens signed with cached keys still pass"
    )]
    KeysUnavailable {
        /// The issuer.
        issuer: String,
        /// What the fetch met.
        error: FetchError,
    },
    /// The signature does not verify.
    #[error(
        "its signature does not verify with key `{kid}` of {issuer}: it was not signed by the issuer"
    )]
    Signature {
        /// The key id (shown; empty for a token without one).
        kid: String,
        /// The issuer.
        issuer: String,
    },
    /// `iss` is another issuer.
    #[error("it was issued by `{found}`, not by {expected}: get a token from {expected}")]
    Issuer {
        /// The token's `iss` (shown).
        found: String,
        /// The configured issuer.
        expected: String,
    },
    /// `aud` does not hold this resource.
    #[error("it is not meant for this server: its `aud` does not hold {expected}")]
    Audience {
        /// The configured audience.
        expected: String,
    },
    /// `exp` is past, beyond the skew.
    #[error("it expired at {exp} (Unix seconds; {skew_s} s of clock skew allowed): get a new one")]
    Expired {
        /// The token's `exp`.
        exp: u64,
        /// The clock skew allowed, in seconds.
        skew_s: u64,
    },
    /// `nbf` is ahead, beyond the skew.
    #[error("it is not valid before {nbf} (Unix seconds; {skew_s} s of clock skew allowed)")]
    NotYetValid {
        /// The token's `nbf`.
        nbf: u64,
        /// The clock skew allowed, in seconds.
        skew_s: u64,
    },
    /// A claim RFC 9068 requires is absent.
    #[error("it has no `{0}` claim, which an access token must have (RFC 9068)")]
    MissingClaim(&'static str),
    /// A claim of the wrong type.
    #[error("its `{0}` claim has the wrong type")]
    ClaimType(&'static str),
}

/// A fetch from the issuer that failed: its metadata, its keys.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FetchError {
    /// No answer (connection, TLS, timeout).
    #[error("{url} did not answer: {reason}")]
    Unreachable {
        /// What was fetched.
        url: String,
        /// Why.
        reason: String,
    },
    /// An answer other than 2xx.
    #[error("{url} answered HTTP {status}")]
    Status {
        /// What was fetched.
        url: String,
        /// The status.
        status: u16,
    },
    /// An answer past [`super::MAX_ANSWER_BYTES`].
    #[error("{url} answered more than {limit} bytes")]
    TooLarge {
        /// What was fetched.
        url: String,
        /// The limit.
        limit: usize,
    },
    /// An answer that is not the JSON expected.
    #[error("{url} did not answer what was expected: {reason}")]
    Unexpected {
        /// What was fetched.
        url: String,
        /// What was wrong.
        reason: String,
    },
    /// None of the metadata URLs answered.
    #[error(
        "no metadata for issuer {issuer} (tried {tried}; the last said: {last}): check `issuer`, or set `jwksUri`"
    )]
    NoMetadata {
        /// The issuer.
        issuer: String,
        /// The URLs tried, comma-separated.
        tried: String,
        /// The last failure.
        last: Box<FetchError>,
    },
    /// Metadata for another issuer (RFC 8414 §3.3: it must be the same string).
    #[error(
        "the metadata at {url} is for issuer `{found}`, not {issuer}: set `issuer` exactly as the issuer writes it"
    )]
    IssuerMismatch {
        /// Where the metadata came from.
        url: String,
        /// Its `issuer` (shown).
        found: String,
        /// The configured issuer.
        issuer: String,
    },
    /// A field needed is absent from the metadata.
    #[error("the metadata of {issuer} at {url} has no usable `{field}`")]
    MissingField {
        /// The issuer.
        issuer: String,
        /// Where the metadata came from.
        url: String,
        /// The field.
        field: &'static str,
    },
}

/// Settings that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// A URL that does not parse.
    #[error(
        "auth.{field} `{url}` is not a URL ({reason}): write it in full, e.g. https://issuer.example.com"
    )]
    NotUrl {
        /// The setting.
        field: &'static str,
        /// Its value.
        url: String,
        /// Why.
        reason: String,
    },
    /// Plain HTTP to a host other than this machine: its keys could be forged on the way.
    #[error(
        "auth.{field} `{url}` is plain http: use https (plain http is allowed for loopback addresses only)"
    )]
    Insecure {
        /// The setting.
        field: &'static str,
        /// Its value.
        url: String,
    },
    /// The HTTP client could not be built.
    #[error("the HTTP client for the issuer could not be built: {0}")]
    Client(String),
}

/// `text` as it may be shown in a message: printable ASCII only (others become `?`), cut to 64
/// characters.
pub(crate) fn shown(text: &str) -> String {
    const MAX: usize = 64;
    let mut out: String = text
        .chars()
        .take(MAX)
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '?'
            }
        })
        .collect();
    if text.chars().nth(MAX).is_some() {
        out.push_str("...");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shown_text_is_printable_and_cut() {
        assert_eq!(shown("kid-1"), "kid-1");
        assert_eq!(shown("a\"b\nc\u{e9}"), "a\"b?c?");
        let long = "x".repeat(100);
        assert_eq!(shown(&long), format!("{}...", "x".repeat(64)));
    }

    #[test]
    fn no_token_and_invalid_are_401_short_scope_is_403() {
        let scopes: Arc<[String]> = Arc::from(vec!["mcp".to_owned()]);
        assert_eq!(
            Refusal::NoToken {
                scopes: scopes.clone()
            }
            .status(),
            StatusCode::UNAUTHORIZED
        );
        assert_eq!(
            Refusal::InvalidToken {
                reason: Invalid::Critical,
                scopes: scopes.clone()
            }
            .status(),
            StatusCode::UNAUTHORIZED
        );
        assert_eq!(
            Refusal::InsufficientScope {
                needed: scopes,
                missing: vec!["mcp".to_owned()]
            }
            .status(),
            StatusCode::FORBIDDEN
        );
    }
}
