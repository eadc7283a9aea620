//! The checks of one JWT access token (RFC 9068), as pure functions: its form and header (an
//! asymmetric algorithm only: never `none`, never `HS*`; no `crit`), its signature with a given
//! key, and its claims (`iss`, `aud`, `exp`, `nbf` with the clock skew, `sub`), which make the
//! caller's [`Identity`].
//!
//! It fetches nothing and caches nothing: which key, and whether a token was seen before, are
//! the verifier's. It never shows a token in an error, only the parts it names (`kid`, `alg`,
//! `iss`), cut short.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::Algorithm;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::Invalid;
use super::error::shown;
use super::jwks::Key;

/// Who is calling, as a verified token says: what the front carries with a request once the
/// edge has checked it.
#[derive(Clone)]
pub struct Identity {
    /// `iss`.
    pub issuer: String,
    /// `sub`.
    pub subject: String,
    /// `client_id`, else `azp`.
    pub client_id: Option<String>,
    /// `scope` (space-separated), else `scp` (an array).
    pub scopes: Vec<String>,
    /// Every claim, as the token has them (for `authorize` rules).
    pub claims: Arc<Value>,
    /// `exp`.
    pub expires: SystemTime,
    /// The token itself, for token exchange only (never shown, never sent upstream).
    token: Arc<str>,
}

impl Identity {
    /// The token this identity was verified from: the `subject_token` of a token exchange, and
    /// nothing else (MCP forbids passing it upstream).
    pub fn subject_token(&self) -> &str {
        &self.token
    }

    /// Those of `needed` this identity lacks.
    pub fn missing_scopes(&self, needed: &[String]) -> Vec<String> {
        needed
            .iter()
            .filter(|scope| !self.scopes.contains(scope))
            .cloned()
            .collect()
    }
}

impl fmt::Debug for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Identity")
            .field("issuer", &self.issuer)
            .field("subject", &self.subject)
            .field("client_id", &self.client_id)
            .field("scopes", &self.scopes)
            .field("expires", &self.expires)
            .finish_non_exhaustive()
    }
}

/// What the checks need to know of the settings.
pub(crate) struct Expect<'a> {
    pub(crate) issuer: &'a str,
    pub(crate) audience: &'a str,
    pub(crate) skew: Duration,
}

/// A token split and its header read; the claims not yet trusted.
pub(crate) struct Parsed<'a> {
    /// `header.claims`, what the signature covers.
    message: &'a str,
    signature: &'a str,
    pub(crate) alg: Algorithm,
    pub(crate) kid: Option<String>,
    claims: &'a str,
}

#[derive(Deserialize)]
struct Header {
    alg: String,
    kid: Option<String>,
    crit: Option<Value>,
}

/// Split `token` and read its header: three base64url parts, an accepted algorithm, no `crit`.
pub(crate) fn parse(token: &str) -> Result<Parsed<'_>, Invalid> {
    let mut parts = token.split('.');
    let (Some(header), Some(claims), Some(signature), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(Invalid::Malformed(
            "not three parts; an encrypted token (JWE) is not accepted",
        ));
    };
    let header: Header = serde_json::from_slice(&decode(header, "its header is not base64url")?)
        .map_err(|_| Invalid::Malformed("its header is not a JOSE header"))?;
    let alg = accepted_alg(&header.alg)?;
    if header.crit.is_some() {
        return Err(Invalid::Critical);
    }
    if signature.is_empty() {
        return Err(Invalid::Malformed("its signature is empty"));
    }
    Ok(Parsed {
        message: &token[..header_and_claims_len(token, signature)],
        signature,
        alg,
        kid: header.kid,
        claims,
    })
}

/// The length of `header.claims` in `token` (everything before the last dot).
fn header_and_claims_len(token: &str, signature: &str) -> usize {
    token.len() - signature.len() - 1
}

/// The algorithm named `alg`, if it is one of the asymmetric ones accepted.
pub(crate) fn accepted_alg(alg: &str) -> Result<Algorithm, Invalid> {
    Ok(match alg {
        "RS256" => Algorithm::RS256,
        "RS384" => Algorithm::RS384,
        "RS512" => Algorithm::RS512,
        "PS256" => Algorithm::PS256,
        "PS384" => Algorithm::PS384,
        "PS512" => Algorithm::PS512,
        "ES256" => Algorithm::ES256,
        "ES384" => Algorithm::ES384,
        "EdDSA" => Algorithm::EdDSA,
        other => return Err(Invalid::Algorithm(shown(other))),
    })
}

/// `part` decoded from base64url, or `Malformed(otherwise)`.
fn decode(part: &str, otherwise: &'static str) -> Result<Vec<u8>, Invalid> {
    URL_SAFE_NO_PAD
        .decode(part)
        .map_err(|_| Invalid::Malformed(otherwise))
}

impl Parsed<'_> {
    /// Whether `key` signed this token (the key is known to accept the algorithm).
    pub(crate) fn signed_by(&self, key: &Key, issuer: &str) -> Result<(), Invalid> {
        let verified = jsonwebtoken::crypto::verify(
            self.signature,
            self.message.as_bytes(),
            &key.decoding,
            self.alg,
        )
        .unwrap_or(false);
        if verified {
            Ok(())
        } else {
            Err(Invalid::Signature {
                kid: key.kid.as_deref().map(shown).unwrap_or_default(),
                issuer: issuer.to_owned(),
            })
        }
    }

    /// The claims, checked against `expect` at `now`, as an identity for `token`. Only call
    /// this once the signature is verified.
    pub(crate) fn identity(
        &self,
        token: &str,
        expect: &Expect<'_>,
        now: SystemTime,
    ) -> Result<Identity, Invalid> {
        let claims: Value =
            serde_json::from_slice(&decode(self.claims, "its claims are not base64url")?)
                .map_err(|_| Invalid::Malformed("its claims are not JSON"))?;
        let object = claims
            .as_object()
            .ok_or(Invalid::Malformed("its claims are not a JSON object"))?;

        let issuer = string(object, "iss")?.ok_or(Invalid::MissingClaim("iss"))?;
        if issuer != expect.issuer {
            return Err(Invalid::Issuer {
                found: shown(issuer),
                expected: expect.issuer.to_owned(),
            });
        }
        let audience_held = match object.get("aud") {
            None => return Err(Invalid::MissingClaim("aud")),
            Some(Value::String(aud)) => aud == expect.audience,
            Some(Value::Array(auds)) => auds.iter().any(|aud| aud == expect.audience),
            Some(_) => return Err(Invalid::ClaimType("aud")),
        };
        if !audience_held {
            return Err(Invalid::Audience {
                expected: expect.audience.to_owned(),
            });
        }
        let skew_s = expect.skew.as_secs();
        let expires = time(object, "exp")?.ok_or(Invalid::MissingClaim("exp"))?;
        if is_expired(expires, expect.skew, now) {
            return Err(Invalid::Expired {
                exp: unix_seconds(expires),
                skew_s,
            });
        }
        if let Some(not_before) = time(object, "nbf")?
            && now
                .checked_add(expect.skew)
                .is_some_and(|late| not_before > late)
        {
            return Err(Invalid::NotYetValid {
                nbf: unix_seconds(not_before),
                skew_s,
            });
        }
        let subject = string(object, "sub")?.ok_or(Invalid::MissingClaim("sub"))?;
        let client_id = match string(object, "client_id")? {
            Some(id) => Some(id.to_owned()),
            None => string(object, "azp")?.map(str::to_owned),
        };
        let (issuer, subject, scopes) = (issuer.to_owned(), subject.to_owned(), scopes(object)?);
        Ok(Identity {
            issuer,
            subject,
            client_id,
            scopes,
            expires,
            token: Arc::from(token),
            claims: Arc::new(claims),
        })
    }
}

/// Whether a token that expires at `expires` is past it at `now`, beyond `skew`.
pub(crate) fn is_expired(expires: SystemTime, skew: Duration, now: SystemTime) -> bool {
    expires.checked_add(skew).is_none_or(|last| now >= last)
}

fn unix_seconds(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Claim `name` as a string, if present.
fn string<'a>(
    claims: &'a Map<String, Value>,
    name: &'static str,
) -> Result<Option<&'a str>, Invalid> {
    match claims.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(value)) => Ok(Some(value)),
        Some(_) => Err(Invalid::ClaimType(name)),
    }
}

/// Claim `name` as a NumericDate (seconds since the epoch, maybe fractional), if present.
fn time(claims: &Map<String, Value>, name: &'static str) -> Result<Option<SystemTime>, Invalid> {
    let Some(value) = claims.get(name) else {
        return Ok(None);
    };
    let seconds = value.as_f64().ok_or(Invalid::ClaimType(name))?;
    Duration::try_from_secs_f64(seconds)
        .ok()
        .and_then(|since| UNIX_EPOCH.checked_add(since))
        .map(Some)
        .ok_or(Invalid::ClaimType(name))
}

/// The scopes: `scope` (space-separated, RFC 9068), else `scp` (an array, or a string).
fn scopes(claims: &Map<String, Value>) -> Result<Vec<String>, Invalid> {
    if let Some(scope) = string(claims, "scope")? {
        return Ok(scope.split_ascii_whitespace().map(str::to_owned).collect());
    }
    match claims.get("scp") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(scp)) => Ok(scp.split_ascii_whitespace().map(str::to_owned).collect()),
        Some(Value::Array(scp)) => scp
            .iter()
            .map(|s| {
                s.as_str()
                    .map(str::to_owned)
                    .ok_or(Invalid::ClaimType("scp"))
            })
            .collect(),
        Some(_) => Err(Invalid::ClaimType("scp")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn b64(value: &Value) -> String {
        URL_SAFE_NO_PAD.encode(value.to_string())
    }

    fn token(header: Value, claims: Value) -> String {
        format!("{}.{}.c2ln", b64(&header), b64(&claims))
    }

    const NOW: u64 = 1_800_000_000;

    fn expect() -> Expect<'static> {
        Expect {
            issuer: "https://issuer",
            audience: "https://mcp/mcp",
            skew: Duration::from_secs(60),
        }
    }

    fn claims() -> Value {
        json!({"iss": "https://issuer", "aud": "https://mcp/mcp", "sub": "u1", "exp": NOW + 300})
    }

    fn identity_of(claims: Value) -> Result<Identity, Invalid> {
        let text = token(json!({"alg": "RS256", "kid": "k"}), claims);
        parse(&text)?.identity(&text, &expect(), UNIX_EPOCH + Duration::from_secs(NOW))
    }

    #[test]
    fn only_asymmetric_algorithms_are_accepted() {
        for alg in ["none", "None", "HS256", "HS384", "HS512", "RS1", ""] {
            let text = token(json!({"alg": alg}), claims());
            assert!(
                matches!(parse(&text), Err(Invalid::Algorithm(_))),
                "{alg} was accepted"
            );
        }
        for alg in [
            "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA",
        ] {
            assert!(
                parse(&token(json!({"alg": alg}), claims())).is_ok(),
                "{alg}"
            );
        }
    }

    #[test]
    fn a_token_must_be_three_parts_with_a_signature_and_no_crit() {
        assert!(matches!(parse("a.b"), Err(Invalid::Malformed(_))));
        assert!(matches!(parse("a.b.c.d.e"), Err(Invalid::Malformed(_))));
        assert!(matches!(parse("!!.b.c"), Err(Invalid::Malformed(_))));
        let unsigned = format!("{}.{}.", b64(&json!({"alg": "RS256"})), b64(&claims()));
        assert!(matches!(parse(&unsigned), Err(Invalid::Malformed(_))));
        let crit = token(json!({"alg": "RS256", "crit": ["b64"]}), claims());
        assert!(matches!(parse(&crit), Err(Invalid::Critical)));
        let parsed = parse("eyJhbGciOiJFUzI1NiJ9.e30.c2ln").unwrap();
        assert_eq!(parsed.message, "eyJhbGciOiJFUzI1NiJ9.e30");
        assert_eq!(parsed.signature, "c2ln");
    }

    #[test]
    fn claims_make_the_identity() {
        let mut claims = claims();
        claims["aud"] = json!(["other", "https://mcp/mcp"]);
        claims["scope"] = json!("a  b");
        claims["azp"] = json!("client-2");
        let identity = identity_of(claims.clone()).unwrap();
        assert_eq!(identity.issuer, "https://issuer");
        assert_eq!(identity.subject, "u1");
        assert_eq!(identity.client_id.as_deref(), Some("client-2"));
        assert_eq!(identity.scopes, vec!["a", "b"]);
        assert_eq!(
            identity.expires,
            UNIX_EPOCH + Duration::from_secs(NOW + 300)
        );
        assert_eq!(*identity.claims, claims);
        assert!(
            !format!("{identity:?}").contains("c2ln"),
            "Debug shows the token"
        );

        claims["client_id"] = json!("client-1");
        claims.as_object_mut().unwrap().remove("scope");
        claims["scp"] = json!(["x", "y"]);
        let identity = identity_of(claims).unwrap();
        assert_eq!(identity.client_id.as_deref(), Some("client-1"));
        assert_eq!(identity.scopes, vec!["x", "y"]);
        assert_eq!(
            identity.missing_scopes(&["x".into(), "z".into()]),
            vec!["z"]
        );
    }

    #[test]
    fn issuer_audience_subject_and_expiry_are_required() {
        for (claim, missing) in [
            ("iss", "iss"),
            ("aud", "aud"),
            ("exp", "exp"),
            ("sub", "sub"),
        ] {
            let mut claims = claims();
            claims.as_object_mut().unwrap().remove(claim);
            assert_eq!(
                identity_of(claims).err(),
                Some(Invalid::MissingClaim(missing))
            );
        }
        let mut claims = claims();
        claims["exp"] = json!("tomorrow");
        assert_eq!(identity_of(claims).err(), Some(Invalid::ClaimType("exp")));
    }

    #[test]
    fn expiry_and_not_before_allow_the_skew_and_no_more() {
        let at = |exp: u64, nbf: Option<u64>| {
            let mut claims = claims();
            claims["exp"] = json!(exp);
            if let Some(nbf) = nbf {
                claims["nbf"] = json!(nbf);
            }
            identity_of(claims)
        };
        assert!(at(NOW - 59, None).is_ok());
        assert!(matches!(at(NOW - 60, None), Err(Invalid::Expired { .. })));
        assert!(at(NOW + 300, Some(NOW + 60)).is_ok());
        assert!(matches!(
            at(NOW + 300, Some(NOW + 61)),
            Err(Invalid::NotYetValid { .. })
        ));
    }
}
