//! The issuer's signing keys (its JWKS), parsed once into keys that can check a signature, and
//! cached. A token naming a key the cache lacks makes one refetch: the fetch is single flight
//! (concurrent callers wait for the same one) and there is at most one per
//! [`REFETCH_INTERVAL`], so made-up key ids cannot flood the issuer, and a key the issuer has
//! just rotated in works at once. A failed fetch keeps the keys already cached: an unreachable
//! issuer fails only the tokens whose keys are not cached yet.
//!
//! It never keeps a symmetric key (`oct`) or an encryption key, and never holds a lock across a
//! fetch except the refetch gate itself, which is what makes the fetch single flight.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, DecodingKey};
use serde::Deserialize;
use serde_json::Value;
use tokio::time::Instant;

use super::error::shown;
use super::issuer::Issuer;
use super::{FetchError, Invalid, REFETCH_INTERVAL};

/// Keys older than this are refetched in the background when next used (subject to the same
/// gate), so a key the issuer withdrew stops working within about this long.
const KEYS_MAX_AGE: Duration = Duration::from_secs(3600);
/// The most keys kept from one JWKS.
const MAX_KEYS: usize = 64;

/// What kind of public key, which says the algorithms it can check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum KeyKind {
    /// RSA: RS256/384/512, PS256/384/512.
    Rsa,
    /// EC P-256: ES256.
    P256,
    /// EC P-384: ES384.
    P384,
    /// OKP Ed25519: EdDSA.
    Ed25519,
}

impl KeyKind {
    fn fits(self, alg: Algorithm) -> bool {
        use Algorithm::*;
        match self {
            Self::Rsa => matches!(alg, RS256 | RS384 | RS512 | PS256 | PS384 | PS512),
            Self::P256 => alg == ES256,
            Self::P384 => alg == ES384,
            Self::Ed25519 => alg == EdDSA,
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Rsa => "an RSA key",
            Self::P256 => "an EC P-256 key",
            Self::P384 => "an EC P-384 key",
            Self::Ed25519 => "an Ed25519 key",
        }
    }
}

/// One signing key of the issuer.
pub(crate) struct Key {
    pub(crate) kid: Option<String>,
    pub(crate) kind: KeyKind,
    /// The key's own `alg`, when the JWKS names one: then only that algorithm.
    pub(crate) alg: Option<Algorithm>,
    pub(crate) decoding: DecodingKey,
}

impl Key {
    /// Whether this key may check a signature made with `alg`.
    pub(crate) fn accepts(&self, alg: Algorithm) -> bool {
        self.kind.fits(alg) && self.alg.is_none_or(|own| own == alg)
    }
}

/// The keys of one JWKS.
#[derive(Default)]
pub(crate) struct KeySet {
    by_kid: HashMap<String, Vec<Arc<Key>>>,
    all: Vec<Arc<Key>>,
}

/// One JWK as published, the members this server reads.
#[derive(Deserialize)]
struct Jwk {
    kty: String,
    kid: Option<String>,
    alg: Option<String>,
    #[serde(rename = "use")]
    use_: Option<String>,
    crv: Option<String>,
    n: Option<String>,
    e: Option<String>,
    x: Option<String>,
    y: Option<String>,
}

impl KeySet {
    /// The usable signing keys of a JWKS document; a key this server cannot use is skipped,
    /// and a set with none is an error (the caller keeps the keys it had).
    pub(crate) fn parse(document: &Value) -> Result<Self, String> {
        let keys = document
            .get("keys")
            .and_then(Value::as_array)
            .ok_or("no `keys` array")?;
        let mut set = Self::default();
        for jwk in keys {
            if set.all.len() == MAX_KEYS {
                break;
            }
            let Ok(jwk) = Jwk::deserialize(jwk) else {
                continue;
            };
            if let Some(key) = key_of(jwk) {
                let key = Arc::new(key);
                if let Some(kid) = &key.kid {
                    set.by_kid.entry(kid.clone()).or_default().push(key.clone());
                }
                set.all.push(key);
            }
        }
        if set.all.is_empty() {
            return Err("no usable signing key (RSA, EC P-256/P-384 or Ed25519)".to_owned());
        }
        Ok(set)
    }

    /// The key to check a token signed with `alg` and naming `kid` (or none).
    fn pick(&self, kid: Option<&str>, alg: Algorithm, issuer: &str) -> Picked {
        match kid {
            Some(kid) => match self.by_kid.get(kid) {
                None => Picked::Missing,
                Some(keys) => match keys.iter().find(|key| key.accepts(alg)) {
                    Some(key) => Picked::Key(key.clone()),
                    None => Picked::Refused(Invalid::KeyMismatch {
                        kid: shown(kid),
                        kind: keys
                            .first()
                            .map_or("another kind of key", |k| k.kind.name()),
                        alg: alg_name(alg),
                        issuer: issuer.to_owned(),
                    }),
                },
            },
            None => {
                let mut fitting = self.all.iter().filter(|key| key.accepts(alg));
                match (fitting.next(), fitting.count()) {
                    (None, _) => Picked::Missing,
                    (Some(key), 0) => Picked::Key(key.clone()),
                    (Some(_), more) => Picked::Refused(Invalid::AmbiguousKey {
                        count: more + 1,
                        alg: alg_name(alg),
                        issuer: issuer.to_owned(),
                    }),
                }
            }
        }
    }
}

enum Picked {
    Key(Arc<Key>),
    Missing,
    Refused(Invalid),
}

/// A JWK as a key, if it is a public signing key of a kind this server checks.
fn key_of(jwk: Jwk) -> Option<Key> {
    if jwk.use_.as_deref().is_some_and(|use_| use_ != "sig") {
        return None;
    }
    let alg = match jwk.alg.as_deref() {
        None => None,
        Some(alg) => Some(super::token::accepted_alg(alg).ok()?),
    };
    let decoded = |part: &Option<String>| URL_SAFE_NO_PAD.decode(part.as_deref()?).ok();
    let (kind, decoding) = match (jwk.kty.as_str(), jwk.crv.as_deref()) {
        ("RSA", _) => {
            let (n, e) = (decoded(&jwk.n)?, decoded(&jwk.e)?);
            // Below 2048 bits is not a key worth trusting; aws-lc refuses it anyway.
            if n.len() < 256 || e.is_empty() {
                return None;
            }
            (KeyKind::Rsa, DecodingKey::from_rsa_raw_components(&n, &e))
        }
        ("EC", Some(crv @ ("P-256" | "P-384"))) => {
            let (kind, size) = if crv == "P-256" {
                (KeyKind::P256, 32)
            } else {
                (KeyKind::P384, 48)
            };
            let (x, y) = (decoded(&jwk.x)?, decoded(&jwk.y)?);
            if x.len() != size || y.len() != size {
                return None;
            }
            let mut point = Vec::with_capacity(1 + 2 * size);
            point.push(0x04);
            point.extend_from_slice(&x);
            point.extend_from_slice(&y);
            (kind, DecodingKey::from_ec_der(&point))
        }
        ("OKP", Some("Ed25519")) => {
            let x = decoded(&jwk.x)?;
            if x.len() != 32 {
                return None;
            }
            (KeyKind::Ed25519, DecodingKey::from_ed_der(&x))
        }
        _ => return None,
    };
    let key = Key {
        kid: jwk.kid,
        kind,
        alg,
        decoding,
    };
    // A key whose own `alg` its kind cannot check is a broken entry: skip it.
    key.alg.is_none_or(|alg| kind.fits(alg)).then_some(key)
}

/// The name of an accepted algorithm, as JOSE writes it.
pub(crate) fn alg_name(alg: Algorithm) -> &'static str {
    use Algorithm::*;
    match alg {
        HS256 => "HS256",
        HS384 => "HS384",
        HS512 => "HS512",
        ES256 => "ES256",
        ES384 => "ES384",
        RS256 => "RS256",
        RS384 => "RS384",
        RS512 => "RS512",
        PS256 => "PS256",
        PS384 => "PS384",
        PS512 => "PS512",
        EdDSA => "EdDSA",
        _ => "an algorithm",
    }
}

/// The keys now, and when they were fetched.
struct Current {
    set: Arc<KeySet>,
    fetched: Option<Instant>,
}

/// The last fetch a token caused: when, and what it met.
#[derive(Default)]
struct Gate {
    last: Option<Instant>,
    error: Option<FetchError>,
}

/// The issuer's keys, cached, with the refetch gate.
pub(crate) struct Keys {
    issuer: Arc<Issuer>,
    jwks_uri: Option<String>,
    current: RwLock<Current>,
    gate: tokio::sync::Mutex<Gate>,
}

impl Keys {
    /// No keys yet: the first token (or [`Keys::refresh`]) fetches them.
    pub(crate) fn new(issuer: Arc<Issuer>, jwks_uri: Option<String>) -> Self {
        Self {
            issuer,
            jwks_uri,
            current: RwLock::new(Current {
                set: Arc::default(),
                fetched: None,
            }),
            gate: tokio::sync::Mutex::new(Gate::default()),
        }
    }

    /// The key that checks a token signed with `alg` naming `kid`, refetching the keys once
    /// (through the gate) when no cached key fits.
    pub(crate) async fn find(
        self: &Arc<Self>,
        kid: Option<&str>,
        alg: Algorithm,
    ) -> Result<Arc<Key>, Invalid> {
        let mut refetched = None;
        loop {
            let (set, fetched) = self.snapshot();
            match set.pick(kid, alg, &self.issuer.name) {
                Picked::Key(key) => {
                    if fetched.is_some_and(|at| at.elapsed() >= KEYS_MAX_AGE) {
                        self.refresh_in_background();
                    }
                    return Ok(key);
                }
                Picked::Refused(invalid) => return Err(invalid),
                Picked::Missing => match refetched {
                    None => refetched = Some(self.refresh().await),
                    Some(outcome) => return Err(self.missing(kid, alg, outcome)),
                },
            }
        }
    }

    /// Why no key fits, after the refetch: the fetch failed, or the issuer has no such key.
    fn missing(&self, kid: Option<&str>, alg: Algorithm, outcome: Option<FetchError>) -> Invalid {
        let issuer = self.issuer.name.clone();
        match (outcome, kid) {
            (Some(error), _) => Invalid::KeysUnavailable { issuer, error },
            (None, Some(kid)) => Invalid::UnknownKey {
                kid: shown(kid),
                issuer,
            },
            (None, None) => Invalid::NoKey {
                alg: alg_name(alg),
                issuer,
            },
        }
    }

    fn snapshot(&self) -> (Arc<KeySet>, Option<Instant>) {
        let current = self.current.read().unwrap_or_else(PoisonError::into_inner);
        (current.set.clone(), current.fetched)
    }

    /// Fetch the keys for a token whose key the cache lacks, unless such a fetch was made less
    /// than [`REFETCH_INTERVAL`] ago; a caller arriving during a fetch waits for it. The error
    /// of the latest fetch, if it failed.
    pub(crate) async fn refresh(&self) -> Option<FetchError> {
        let mut gate = self.gate.lock().await;
        self.refresh_locked(&mut gate, true).await
    }

    /// Fetch the keys now, not for any token (at startup, or keys grown old): it does not spend
    /// the tokens' refetch, so a key rotated right after it still works at once. A failure
    /// does (the issuer is not asked again by every token while it fails).
    pub(crate) async fn load(&self) -> Option<FetchError> {
        let mut gate = self.gate.lock().await;
        self.refresh_locked(&mut gate, false).await
    }

    async fn refresh_locked(&self, gate: &mut Gate, for_a_token: bool) -> Option<FetchError> {
        let now = Instant::now();
        if gate
            .last
            .is_some_and(|last| now.duration_since(last) < REFETCH_INTERVAL)
        {
            return gate.error.clone();
        }
        if for_a_token {
            gate.last = Some(now);
        }
        gate.error = match self.fetch().await {
            Ok(set) => {
                let mut current = self.current.write().unwrap_or_else(PoisonError::into_inner);
                *current = Current {
                    set: Arc::new(set),
                    fetched: Some(Instant::now()),
                };
                None
            }
            Err(error) => {
                tracing::warn!(issuer = %self.issuer.name, %error, "the issuer's keys could not be fetched; the cached ones stay");
                gate.last = Some(now);
                Some(error)
            }
        };
        gate.error.clone()
    }

    /// Refetch old keys without making the caller wait (skipped when a fetch is under way).
    fn refresh_in_background(self: &Arc<Self>) {
        let keys = self.clone();
        tokio::spawn(async move {
            if let Ok(mut gate) = keys.gate.try_lock() {
                keys.refresh_locked(&mut gate, false).await;
            }
        });
    }

    async fn fetch(&self) -> Result<KeySet, FetchError> {
        let url = match &self.jwks_uri {
            Some(url) => url.clone(),
            None => self.issuer.jwks_uri().await?,
        };
        let document = self.issuer.get_json(&url).await?;
        KeySet::parse(&document).map_err(|reason| FetchError::Unexpected {
            url,
            reason: format!("not a usable JWKS: {reason}"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rsa_jwk(kid: &str) -> Value {
        json!({"kty": "RSA", "kid": kid, "n": URL_SAFE_NO_PAD.encode([7u8; 256]), "e": "AQAB"})
    }

    fn ec_jwk(kid: &str) -> Value {
        let part = URL_SAFE_NO_PAD.encode([1u8; 32]);
        json!({"kty": "EC", "crv": "P-256", "kid": kid, "x": part, "y": part})
    }

    #[test]
    fn symmetric_encryption_and_odd_keys_are_skipped() {
        let set = KeySet::parse(&json!({"keys": [
            {"kty": "oct", "kid": "h", "k": "c2VjcmV0"},
            {"kty": "RSA", "kid": "enc", "use": "enc", "n": URL_SAFE_NO_PAD.encode([7u8; 256]), "e": "AQAB"},
            {"kty": "RSA", "kid": "oaep", "alg": "RSA-OAEP", "n": URL_SAFE_NO_PAD.encode([7u8; 256]), "e": "AQAB"},
            {"kty": "RSA", "kid": "small", "n": URL_SAFE_NO_PAD.encode([7u8; 64]), "e": "AQAB"},
            {"kty": "EC", "crv": "P-521", "kid": "p521", "x": "AA", "y": "AA"},
            {"kty": "RSA", "kid": "mislabelled", "alg": "ES256", "n": URL_SAFE_NO_PAD.encode([7u8; 256]), "e": "AQAB"},
            "not an object",
            rsa_jwk("good"),
        ]}))
        .unwrap();
        assert_eq!(set.all.len(), 1);
        assert!(set.by_kid.contains_key("good"));
        assert!(KeySet::parse(&json!({"keys": [{"kty": "oct", "k": "c2VjcmV0"}]})).is_err());
        assert!(KeySet::parse(&json!({"nokeys": []})).is_err());
    }

    #[test]
    fn a_key_checks_only_algorithms_of_its_kind_and_its_own_alg() {
        let mut rs = rsa_jwk("r");
        rs["alg"] = json!("PS256");
        let set = KeySet::parse(&json!({"keys": [rs, ec_jwk("e")]})).unwrap();
        let pick = |kid, alg| set.pick(kid, alg, "https://issuer");
        assert!(matches!(pick(Some("r"), Algorithm::PS256), Picked::Key(_)));
        assert!(matches!(
            pick(Some("r"), Algorithm::RS256),
            Picked::Refused(Invalid::KeyMismatch { .. })
        ));
        assert!(matches!(
            pick(Some("e"), Algorithm::RS256),
            Picked::Refused(Invalid::KeyMismatch { .. })
        ));
        assert!(matches!(pick(Some("e"), Algorithm::ES256), Picked::Key(_)));
        assert!(matches!(pick(Some("x"), Algorithm::ES256), Picked::Missing));
        // Without a kid: the one key that fits, none, or too many.
        assert!(matches!(pick(None, Algorithm::ES256), Picked::Key(_)));
        assert!(matches!(pick(None, Algorithm::ES384), Picked::Missing));
        let two = KeySet::parse(&json!({"keys": [ec_jwk("a"), ec_jwk("b")]})).unwrap();
        assert!(matches!(
            two.pick(None, Algorithm::ES256, "https://issuer"),
            Picked::Refused(Invalid::AmbiguousKey { count: 2, .. })
        ));
    }
}
