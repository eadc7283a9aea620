//! Identity on the face (SPEC §14), the token checks against a real issuer: a small HTTP server
//! on 127.0.0.1 plays the issuer (RFC 8414 metadata with its path inserted, or OpenID discovery;
//! its JWKS; its token endpoint) and counts what it is asked. Keys are made here with aws-lc-rs
//! and tokens signed with them directly, so the verifier is checked against an independent
//! signer. Time is tokio's paused clock: the verifier's wall clock follows it, so expiry and the
//! refetch interval are moved with `tokio::time::advance`, never waited for.

#![cfg(feature = "http")]

use std::collections::HashMap;
use std::future::IntoFuture;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_lc_rs::encoding::AsDer;
use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{
    ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair, RSA_PKCS1_SHA256, RsaKeyPair,
    RsaPublicKeyComponents,
};
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use mcp_supervisor_front::auth::{
    Access, AuthSettings, ClientCredentials, ExchangeError, ExchangeTarget, Invalid, Refusal,
    Verifier, WallClock,
};
use serde_json::{Value, json};
use tokio::sync::oneshot;

/// The wall time at the start of each test (Unix seconds).
const NOW: u64 = 1_800_000_000;
const AUDIENCE: &str = "https://mcp.example.com/mcp";

// === The issuer ===

/// What the issuer serves, and what it was asked.
#[derive(Default)]
struct Issuer {
    /// The issuer URL (set once bound).
    name: Mutex<String>,
    /// Whether RFC 8414 metadata is served (else only OpenID discovery).
    rfc8414: AtomicBool,
    jwks: Mutex<Value>,
    /// The token endpoint refuses every exchange.
    refuse_exchange: AtomicBool,
    metadata_hits: AtomicUsize,
    jwks_hits: AtomicUsize,
    token_hits: AtomicUsize,
    /// Each exchange request: its Authorization header and its form fields.
    exchanges: Mutex<Vec<(String, HashMap<String, String>)>>,
}

struct Running {
    issuer: Arc<Issuer>,
    url: String,
    stop: Option<oneshot::Sender<()>>,
    served: tokio::task::JoinHandle<()>,
}

impl Running {
    /// Stop the issuer: its port refuses connections from now on.
    async fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        (&mut self.served).await.expect("the issuer stops");
    }
}

fn json_response(status: StatusCode, body: &Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn metadata_of(issuer: &Issuer) -> Value {
    let name = issuer.name.lock().unwrap().clone();
    json!({
        "issuer": name,
        "jwks_uri": format!("{name}/jwks"),
        "token_endpoint": format!("{name}/token"),
    })
}

async fn rfc8414(State(issuer): State<Arc<Issuer>>) -> Response {
    if !issuer.rfc8414.load(Ordering::SeqCst) {
        return StatusCode::NOT_FOUND.into_response();
    }
    issuer.metadata_hits.fetch_add(1, Ordering::SeqCst);
    json_response(StatusCode::OK, &metadata_of(&issuer))
}

async fn openid(State(issuer): State<Arc<Issuer>>) -> Response {
    issuer.metadata_hits.fetch_add(1, Ordering::SeqCst);
    json_response(StatusCode::OK, &metadata_of(&issuer))
}

async fn jwks(State(issuer): State<Arc<Issuer>>) -> Response {
    issuer.jwks_hits.fetch_add(1, Ordering::SeqCst);
    let keys = issuer.jwks.lock().unwrap().clone();
    json_response(StatusCode::OK, &keys)
}

async fn token(State(issuer): State<Arc<Issuer>>, headers: HeaderMap, body: String) -> Response {
    let n = issuer.token_hits.fetch_add(1, Ordering::SeqCst) + 1;
    let authorization = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    issuer
        .exchanges
        .lock()
        .unwrap()
        .push((authorization, form_fields(&body)));
    // Slow enough that concurrent callers overlap (on the paused clock, free).
    tokio::time::sleep(Duration::from_millis(200)).await;
    if issuer.refuse_exchange.load(Ordering::SeqCst) {
        return json_response(
            StatusCode::BAD_REQUEST,
            &json!({"error": "invalid_target", "error_description": "no such audience"}),
        );
    }
    json_response(
        StatusCode::OK,
        &json!({
            "access_token": format!("upstream-{n}"),
            "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
            "token_type": "Bearer",
            "expires_in": 300,
        }),
    )
}

/// Serve an issuer at `http://127.0.0.1:<port>/tenant` publishing `keys`.
async fn start_issuer(keys: &[&Key]) -> Running {
    let issuer = Arc::new(Issuer::default());
    issuer.rfc8414.store(true, Ordering::SeqCst);
    *issuer.jwks.lock().unwrap() = jwks_of(keys);
    let app = Router::new()
        .route(
            "/.well-known/oauth-authorization-server/tenant",
            get(rfc8414),
        )
        .route("/tenant/.well-known/openid-configuration", get(openid))
        .route("/tenant/jwks", get(jwks))
        .route("/tenant/token", post(token))
        .with_state(issuer.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1");
    let port = listener.local_addr().expect("local address").port();
    let url = format!("http://127.0.0.1:{port}/tenant");
    *issuer.name.lock().unwrap() = url.clone();
    let (stop, stopped) = oneshot::channel::<()>();
    let serve = axum::serve(listener, app).with_graceful_shutdown(async move {
        let _ = stopped.await;
    });
    let served = tokio::spawn(async move {
        serve.into_future().await.expect("the issuer serves");
    });
    Running {
        issuer,
        url,
        stop: Some(stop),
        served,
    }
}

fn jwks_of(keys: &[&Key]) -> Value {
    json!({"keys": keys.iter().map(|key| key.jwk.clone()).collect::<Vec<_>>()})
}

/// `application/x-www-form-urlencoded` fields, decoded.
fn form_fields(body: &str) -> HashMap<String, String> {
    let decode = |text: &str| {
        let bytes = text.as_bytes();
        let mut out = Vec::new();
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'%' if i + 2 < bytes.len() => {
                    let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap();
                    out.push(u8::from_str_radix(hex, 16).unwrap());
                    i += 3;
                }
                b'+' => {
                    out.push(b' ');
                    i += 1;
                }
                byte => {
                    out.push(byte);
                    i += 1;
                }
            }
        }
        String::from_utf8(out).unwrap()
    };
    body.split('&')
        .filter_map(|pair| pair.split_once('='))
        .map(|(name, value)| (decode(name), decode(value)))
        .collect()
}

// === Keys and tokens ===

enum Pair {
    Rsa(RsaKeyPair),
    Ec(EcdsaKeyPair),
}

/// A signing key of the issuer's (or a forger's), and its JWK.
struct Key {
    kid: String,
    alg: &'static str,
    pair: Pair,
    jwk: Value,
}

impl Key {
    fn rsa(kid: &str) -> Self {
        let pair = RsaKeyPair::generate(aws_lc_rs::rsa::KeySize::Rsa2048).expect("an RSA key");
        let public = RsaPublicKeyComponents::<Vec<u8>>::from(pair.public_key());
        let jwk = json!({
            "kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256",
            "n": URL_SAFE_NO_PAD.encode(&public.n),
            "e": URL_SAFE_NO_PAD.encode(&public.e),
        });
        Self {
            kid: kid.to_owned(),
            alg: "RS256",
            pair: Pair::Rsa(pair),
            jwk,
        }
    }

    fn ec(kid: &str) -> Self {
        let pair = EcdsaKeyPair::generate(&ECDSA_P256_SHA256_FIXED_SIGNING).expect("an EC key");
        let point = pair.public_key().as_ref();
        let jwk = json!({
            "kty": "EC", "crv": "P-256", "kid": kid,
            "x": URL_SAFE_NO_PAD.encode(&point[1..33]),
            "y": URL_SAFE_NO_PAD.encode(&point[33..65]),
        });
        Self {
            kid: kid.to_owned(),
            alg: "ES256",
            pair: Pair::Ec(pair),
            jwk,
        }
    }

    /// The public key as DER (SubjectPublicKeyInfo), what an HMAC forger would use.
    fn public_der(&self) -> Vec<u8> {
        match &self.pair {
            Pair::Rsa(pair) => pair.public_key().as_der().expect("DER").as_ref().to_vec(),
            Pair::Ec(pair) => pair.public_key().as_der().expect("DER").as_ref().to_vec(),
        }
    }

    /// A token with `header` and `claims`, signed with this key.
    fn sign(&self, header: &Value, claims: &Value) -> String {
        let message = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let rng = SystemRandom::new();
        let signature = match &self.pair {
            Pair::Rsa(pair) => {
                let mut signature = vec![0; pair.public_modulus_len()];
                pair.sign(&RSA_PKCS1_SHA256, &rng, message.as_bytes(), &mut signature)
                    .expect("RSA signs");
                signature
            }
            Pair::Ec(pair) => pair
                .sign(&rng, message.as_bytes())
                .expect("ECDSA signs")
                .as_ref()
                .to_vec(),
        };
        format!("{message}.{}", URL_SAFE_NO_PAD.encode(signature))
    }

    /// An access token with `claims`, naming this key.
    fn token(&self, claims: &Value) -> String {
        self.sign(
            &json!({"alg": self.alg, "kid": self.kid, "typ": "at+jwt"}),
            claims,
        )
    }
}

/// The claims of a valid access token of `issuer` for `subject`.
fn claims(issuer: &str, subject: &str) -> Value {
    json!({
        "iss": issuer,
        "aud": ["https://other.example.com", AUDIENCE],
        "sub": subject,
        "client_id": "app-1",
        "scope": "mcp:use profile",
        "iat": NOW,
        "exp": NOW + 3600,
        "jti": format!("jti-{subject}"),
    })
}

/// A token with `kid` and a made-up signature (the kid is refused before any signature check).
fn unsigned_token(kid: &str, claims: &Value) -> String {
    let header = json!({"alg": "RS256", "kid": kid});
    format!(
        "{}.{}.c2lnbmF0dXJl",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(claims.to_string())
    )
}

fn settings(issuer: &str) -> AuthSettings {
    let mut settings = AuthSettings::new(issuer, AUDIENCE);
    settings.scopes = vec!["mcp:use".to_owned()];
    settings.admin_scopes = vec!["mcp:admin".to_owned()];
    settings.client = Some(ClientCredentials {
        id: "proxy".to_owned(),
        secret: "s3cr:et".to_owned(),
    });
    settings
}

fn verifier(issuer: &str) -> Verifier {
    Verifier::with_clock(
        settings(issuer),
        WallClock::following_tokio(Duration::from_secs(NOW)),
    )
    .expect("usable settings")
}

/// The reason a check was refused as invalid.
async fn invalid(verifier: &Verifier, token: &str) -> Invalid {
    match verifier.check_token(token, Access::Mcp).await {
        Err(Refusal::InvalidToken { reason, .. }) => reason,
        other => panic!("expected an invalid token, got {other:?}"),
    }
}

// === Valid tokens ===

#[tokio::test(start_paused = true)]
async fn a_valid_token_is_accepted_and_then_found_without_a_second_signature_check() {
    let key = Key::rsa("rsa-1");
    let issuer = start_issuer(&[&key]).await;
    let verifier = verifier(&issuer.url);
    let token = key.token(&claims(&issuer.url, "alice"));
    let header = format!("Bearer {token}");

    let identity = verifier
        .check(Some(&header), Access::Mcp)
        .await
        .expect("a valid token");
    assert_eq!(identity.issuer, issuer.url);
    assert_eq!(identity.subject, "alice");
    assert_eq!(identity.client_id.as_deref(), Some("app-1"));
    assert_eq!(identity.scopes, vec!["mcp:use", "profile"]);
    assert_eq!(identity.claims["jti"], "jti-alice");
    assert_eq!(verifier.signature_checks(), 1);

    let again = verifier
        .check(Some(&header), Access::Mcp)
        .await
        .expect("the same token");
    assert_eq!(again.subject, "alice");
    assert_eq!(
        verifier.signature_checks(),
        1,
        "the second check verified again"
    );
    assert_eq!(issuer.issuer.metadata_hits.load(Ordering::SeqCst), 1);
    assert_eq!(issuer.issuer.jwks_hits.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn an_es256_token_and_a_token_without_kid_are_checked_against_the_key_that_fits() {
    let rsa = Key::rsa("rsa-1");
    let ec = Key::ec("ec-1");
    let issuer = start_issuer(&[&rsa, &ec]).await;
    let verifier = verifier(&issuer.url);
    let token = ec.token(&claims(&issuer.url, "bob"));
    assert!(verifier.check_token(&token, Access::Mcp).await.is_ok());

    // No kid: the one EC key fits ES256.
    let no_kid = ec.sign(&json!({"alg": "ES256"}), &claims(&issuer.url, "carol"));
    let identity = verifier.check_token(&no_kid, Access::Mcp).await;
    assert_eq!(identity.expect("the only EC key").subject, "carol");
}

#[tokio::test(start_paused = true)]
async fn a_token_without_kid_is_refused_when_several_keys_fit() {
    let first = Key::ec("ec-1");
    let second = Key::ec("ec-2");
    let issuer = start_issuer(&[&first, &second]).await;
    let verifier = verifier(&issuer.url);
    let no_kid = first.sign(&json!({"alg": "ES256"}), &claims(&issuer.url, "dan"));
    assert!(matches!(
        invalid(&verifier, &no_kid).await,
        Invalid::AmbiguousKey { count: 2, .. }
    ));
}

#[tokio::test(start_paused = true)]
async fn openid_discovery_is_used_when_rfc_8414_metadata_is_absent() {
    let key = Key::rsa("rsa-1");
    let issuer = start_issuer(&[&key]).await;
    issuer.issuer.rfc8414.store(false, Ordering::SeqCst);
    let verifier = verifier(&issuer.url);
    let token = key.token(&claims(&issuer.url, "erin"));
    assert!(verifier.check_token(&token, Access::Mcp).await.is_ok());
    assert_eq!(issuer.issuer.metadata_hits.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn a_configured_jwks_uri_is_fetched_without_metadata() {
    let key = Key::rsa("rsa-1");
    let issuer = start_issuer(&[&key]).await;
    let mut settings = settings(&issuer.url);
    settings.jwks_uri = Some(format!("{}/jwks", issuer.url));
    let verifier = Verifier::with_clock(
        settings,
        WallClock::following_tokio(Duration::from_secs(NOW)),
    )
    .expect("usable settings");
    let token = key.token(&claims(&issuer.url, "fay"));
    assert!(verifier.check_token(&token, Access::Mcp).await.is_ok());
    assert_eq!(issuer.issuer.metadata_hits.load(Ordering::SeqCst), 0);
    assert_eq!(issuer.issuer.jwks_hits.load(Ordering::SeqCst), 1);
}

// === Claims ===

#[tokio::test(start_paused = true)]
async fn a_token_for_another_audience_is_refused() {
    let key = Key::rsa("rsa-1");
    let issuer = start_issuer(&[&key]).await;
    let verifier = verifier(&issuer.url);
    let mut claims = claims(&issuer.url, "alice");
    claims["aud"] = json!("https://other.example.com");
    let reason = invalid(&verifier, &key.token(&claims)).await;
    assert_eq!(
        reason,
        Invalid::Audience {
            expected: AUDIENCE.to_owned()
        }
    );
}

#[tokio::test(start_paused = true)]
async fn a_token_of_another_issuer_is_refused() {
    let key = Key::rsa("rsa-1");
    let issuer = start_issuer(&[&key]).await;
    let verifier = verifier(&issuer.url);
    let mut claims = claims(&issuer.url, "alice");
    claims["iss"] = json!("https://evil.example.com");
    assert!(matches!(
        invalid(&verifier, &key.token(&claims)).await,
        Invalid::Issuer { .. }
    ));
}

#[tokio::test(start_paused = true)]
async fn an_expired_token_is_refused_and_one_within_the_skew_accepted() {
    let key = Key::rsa("rsa-1");
    let issuer = start_issuer(&[&key]).await;
    let verifier = verifier(&issuer.url);
    let mut late = claims(&issuer.url, "alice");
    late["exp"] = json!(NOW - 61);
    assert!(matches!(
        invalid(&verifier, &key.token(&late)).await,
        Invalid::Expired { .. }
    ));
    let mut within = claims(&issuer.url, "alice");
    within["exp"] = json!(NOW - 30);
    assert!(
        verifier
            .check_token(&key.token(&within), Access::Mcp)
            .await
            .is_ok()
    );
}

#[tokio::test(start_paused = true)]
async fn a_token_not_yet_valid_is_refused_and_one_within_the_skew_accepted() {
    let key = Key::rsa("rsa-1");
    let issuer = start_issuer(&[&key]).await;
    let verifier = verifier(&issuer.url);
    let mut early = claims(&issuer.url, "alice");
    early["nbf"] = json!(NOW + 120);
    assert!(matches!(
        invalid(&verifier, &key.token(&early)).await,
        Invalid::NotYetValid { .. }
    ));
    let mut within = claims(&issuer.url, "alice");
    within["nbf"] = json!(NOW + 30);
    assert!(
        verifier
            .check_token(&key.token(&within), Access::Mcp)
            .await
            .is_ok()
    );
}

#[tokio::test(start_paused = true)]
async fn a_verified_token_stops_passing_when_it_expires() {
    let key = Key::rsa("rsa-1");
    let issuer = start_issuer(&[&key]).await;
    let verifier = verifier(&issuer.url);
    let mut short = claims(&issuer.url, "alice");
    short["exp"] = json!(NOW + 10);
    let token = key.token(&short);
    assert!(verifier.check_token(&token, Access::Mcp).await.is_ok());
    // The skew is 60 s: at +69 s it still passes, at +70 s it is refused.
    tokio::time::advance(Duration::from_secs(69)).await;
    assert!(verifier.check_token(&token, Access::Mcp).await.is_ok());
    tokio::time::advance(Duration::from_secs(1)).await;
    assert!(matches!(
        invalid(&verifier, &token).await,
        Invalid::Expired { .. }
    ));
}

#[tokio::test(start_paused = true)]
async fn a_token_short_of_scope_gets_403_naming_the_scopes_needed() {
    let key = Key::rsa("rsa-1");
    let issuer = start_issuer(&[&key]).await;
    let verifier = verifier(&issuer.url);
    let token = key.token(&claims(&issuer.url, "alice"));
    let refusal = verifier
        .check_token(&token, Access::Admin)
        .await
        .expect_err("no admin scope");
    assert_eq!(
        refusal,
        Refusal::InsufficientScope {
            needed: Arc::from(vec!["mcp:admin".to_owned()]),
            missing: vec!["mcp:admin".to_owned()],
        }
    );
    assert_eq!(refusal.status(), StatusCode::FORBIDDEN);
    let challenge =
        refusal.www_authenticate("https://mcp.example.com/.well-known/oauth-protected-resource");
    assert!(
        challenge.contains("error=\"insufficient_scope\""),
        "{challenge}"
    );
    assert!(challenge.contains("scope=\"mcp:admin\""), "{challenge}");
    // The same token is enough for /mcp.
    assert!(verifier.check_token(&token, Access::Mcp).await.is_ok());

    let mut admin = claims(&issuer.url, "root");
    admin["scope"] = json!("mcp:use mcp:admin");
    assert!(
        verifier
            .check_token(&key.token(&admin), Access::Admin)
            .await
            .is_ok()
    );
}

// === Algorithms and signatures ===

#[tokio::test(start_paused = true)]
async fn a_token_with_alg_none_is_refused() {
    let key = Key::rsa("rsa-1");
    let issuer = start_issuer(&[&key]).await;
    let verifier = verifier(&issuer.url);
    let header = json!({"alg": "none", "kid": "rsa-1"});
    let body = claims(&issuer.url, "mallory");
    for signature in ["", "c2ln"] {
        let token = format!(
            "{}.{}.{signature}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(body.to_string())
        );
        assert_eq!(
            invalid(&verifier, &token).await,
            Invalid::Algorithm("none".to_owned())
        );
    }
    assert_eq!(verifier.signature_checks(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_token_signed_with_hmac_over_the_public_key_is_refused() {
    let key = Key::rsa("rsa-1");
    let issuer = start_issuer(&[&key]).await;
    let verifier = verifier(&issuer.url);
    let header = json!({"alg": "HS256", "kid": "rsa-1"});
    let body = claims(&issuer.url, "mallory");
    let message = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(body.to_string())
    );
    let n = URL_SAFE_NO_PAD
        .decode(key.jwk["n"].as_str().expect("n"))
        .expect("n is base64url");
    for secret in [key.public_der(), n, key.jwk.to_string().into_bytes()] {
        let hmac = aws_lc_rs::hmac::Key::new(aws_lc_rs::hmac::HMAC_SHA256, &secret);
        let tag = aws_lc_rs::hmac::sign(&hmac, message.as_bytes());
        let token = format!("{message}.{}", URL_SAFE_NO_PAD.encode(tag.as_ref()));
        assert_eq!(
            invalid(&verifier, &token).await,
            Invalid::Algorithm("HS256".to_owned())
        );
    }
    assert_eq!(verifier.signature_checks(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_forged_signature_under_a_known_kid_is_refused() {
    let key = Key::rsa("rsa-1");
    let issuer = start_issuer(&[&key]).await;
    let verifier = verifier(&issuer.url);
    let forger = Key::rsa("rsa-1");
    let token = forger.token(&claims(&issuer.url, "mallory"));
    assert!(matches!(
        invalid(&verifier, &token).await,
        Invalid::Signature { .. }
    ));
    // A real token's claims with another signature: refused too.
    let real = key.token(&claims(&issuer.url, "alice"));
    let (signed, _) = real.rsplit_once('.').expect("three parts");
    let (_, forged_signature) = token.rsplit_once('.').expect("three parts");
    assert!(matches!(
        invalid(&verifier, &format!("{signed}.{forged_signature}")).await,
        Invalid::Signature { .. }
    ));
    // An EC signature under the RSA key's kid: the key cannot check it.
    let ec = Key::ec("rsa-1");
    assert!(matches!(
        invalid(&verifier, &ec.token(&claims(&issuer.url, "mallory"))).await,
        Invalid::KeyMismatch { .. }
    ));
}

// === Keys: refetch, rotation, floods, outages ===

#[tokio::test(start_paused = true)]
async fn an_unknown_kid_makes_exactly_one_refetch_and_a_rotated_key_then_works() {
    let old = Key::rsa("old");
    let issuer = start_issuer(&[&old]).await;
    let verifier = verifier(&issuer.url);
    let jwks_hits = || issuer.issuer.jwks_hits.load(Ordering::SeqCst);
    assert!(
        verifier
            .check_token(&old.token(&claims(&issuer.url, "a")), Access::Mcp)
            .await
            .is_ok()
    );
    assert_eq!(jwks_hits(), 1);

    tokio::time::advance(Duration::from_secs(11)).await;
    let unknown = unsigned_token("nobody", &claims(&issuer.url, "b"));
    assert!(matches!(
        invalid(&verifier, &unknown).await,
        Invalid::UnknownKey { .. }
    ));
    assert_eq!(jwks_hits(), 2, "one refetch for the unknown kid");
    // Another unknown kid right after: refused without fetching again.
    let unknown = unsigned_token("nobody-else", &claims(&issuer.url, "b"));
    assert!(matches!(
        invalid(&verifier, &unknown).await,
        Invalid::UnknownKey { .. }
    ));
    assert_eq!(jwks_hits(), 2, "a second refetch within the interval");

    // The issuer rotates in a new key; once the interval has passed, its first token works.
    let new = Key::ec("new");
    *issuer.issuer.jwks.lock().unwrap() = jwks_of(&[&old, &new]);
    tokio::time::advance(Duration::from_secs(10)).await;
    let identity = verifier
        .check_token(&new.token(&claims(&issuer.url, "c")), Access::Mcp)
        .await
        .expect("the rotated key");
    assert_eq!(identity.subject, "c");
    assert_eq!(jwks_hits(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_thousand_made_up_kids_cost_one_fetch_per_interval() {
    let key = Key::rsa("rsa-1");
    let issuer = start_issuer(&[&key]).await;
    let verifier = Arc::new(verifier(&issuer.url));
    let jwks_hits = || issuer.issuer.jwks_hits.load(Ordering::SeqCst);
    assert!(
        verifier
            .check_token(&key.token(&claims(&issuer.url, "a")), Access::Mcp)
            .await
            .is_ok()
    );
    assert_eq!(jwks_hits(), 1);
    tokio::time::advance(Duration::from_secs(10)).await;

    let body = claims(&issuer.url, "mallory");
    let checks = (0..1000).map(|n| {
        let verifier = verifier.clone();
        let token = unsigned_token(&format!("forged-{n}"), &body);
        tokio::spawn(async move { verifier.check_token(&token, Access::Mcp).await })
    });
    for outcome in futures::future::join_all(checks).await {
        assert!(matches!(
            outcome.expect("the check ran"),
            Err(Refusal::InvalidToken {
                reason: Invalid::UnknownKey { .. },
                ..
            })
        ));
    }
    assert_eq!(jwks_hits(), 2, "a thousand unknown kids, one fetch");

    // Within the interval: no fetch. At its end: one more.
    tokio::time::advance(Duration::from_millis(9_900)).await;
    invalid(&verifier, &unsigned_token("forged-x", &body)).await;
    assert_eq!(jwks_hits(), 2);
    tokio::time::advance(Duration::from_millis(100)).await;
    invalid(&verifier, &unsigned_token("forged-y", &body)).await;
    assert_eq!(jwks_hits(), 3);
    // The real key still works all along.
    assert!(
        verifier
            .check_token(&key.token(&claims(&issuer.url, "b")), Access::Mcp)
            .await
            .is_ok()
    );
}

#[tokio::test(start_paused = true)]
async fn an_unreachable_issuer_fails_new_kids_and_cached_keys_still_work() {
    let key = Key::rsa("rsa-1");
    let mut issuer = start_issuer(&[&key]).await;
    let verifier = verifier(&issuer.url);
    assert!(
        verifier
            .check_token(&key.token(&claims(&issuer.url, "a")), Access::Mcp)
            .await
            .is_ok()
    );
    issuer.stop().await;
    tokio::time::advance(Duration::from_secs(11)).await;

    let newcomer = Key::rsa("rsa-2");
    match invalid(&verifier, &newcomer.token(&claims(&issuer.url, "b"))).await {
        Invalid::KeysUnavailable { issuer: name, .. } => assert_eq!(name, issuer.url),
        other => panic!("expected the keys to be unavailable, got {other:?}"),
    }
    // A token never seen, signed by the cached key: verified with it, no issuer needed.
    let identity = verifier
        .check_token(&key.token(&claims(&issuer.url, "c")), Access::Mcp)
        .await
        .expect("a cached key");
    assert_eq!(identity.subject, "c");
}

// === Token exchange ===

fn target() -> ExchangeTarget {
    ExchangeTarget {
        audience: "https://upstream.example.com/mcp".to_owned(),
        scope: Some("files:read".to_owned()),
    }
}

#[tokio::test(start_paused = true)]
async fn an_exchange_posts_the_rfc_8693_form_with_the_proxys_client_credentials() {
    let key = Key::rsa("rsa-1");
    let issuer = start_issuer(&[&key]).await;
    let verifier = verifier(&issuer.url);
    let token = key.token(&claims(&issuer.url, "alice"));
    let alice = verifier
        .check_token(&token, Access::Mcp)
        .await
        .expect("valid");
    let exchanger = verifier.exchanger().expect("client credentials are set");

    let upstream = exchanger
        .token_for(&alice, &target())
        .await
        .expect("exchanged");
    assert_eq!(upstream.access_token(), "upstream-1");
    let exchanges = issuer.issuer.exchanges.lock().unwrap().clone();
    let (authorization, fields) = &exchanges[0];
    // client_secret_basic, id and secret form-encoded first (RFC 6749 §2.3.1).
    assert_eq!(
        authorization,
        &format!("Basic {}", STANDARD.encode("proxy:s3cr%3Aet"))
    );
    let expected: HashMap<String, String> = [
        (
            "grant_type",
            "urn:ietf:params:oauth:grant-type:token-exchange",
        ),
        ("subject_token", token.as_str()),
        (
            "subject_token_type",
            "urn:ietf:params:oauth:token-type:access_token",
        ),
        ("audience", "https://upstream.example.com/mcp"),
        ("resource", "https://upstream.example.com/mcp"),
        ("scope", "files:read"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    assert_eq!(fields, &expected);
}

#[tokio::test(start_paused = true)]
async fn an_exchanged_token_is_cached_per_subject_until_shortly_before_it_expires() {
    let key = Key::rsa("rsa-1");
    let issuer = start_issuer(&[&key]).await;
    let verifier = verifier(&issuer.url);
    let exchanger = verifier.exchanger().expect("client credentials are set");
    let hits = || issuer.issuer.token_hits.load(Ordering::SeqCst);
    let alice = verifier
        .check_token(&key.token(&claims(&issuer.url, "alice")), Access::Mcp)
        .await
        .expect("valid");
    let bob = verifier
        .check_token(&key.token(&claims(&issuer.url, "bob")), Access::Mcp)
        .await
        .expect("valid");

    let first = exchanger
        .token_for(&alice, &target())
        .await
        .expect("exchanged");
    let again = exchanger
        .token_for(&alice, &target())
        .await
        .expect("cached");
    assert_eq!(again.access_token(), first.access_token());
    assert_eq!(hits(), 1);
    // Another subject, or another audience: an exchange of its own.
    let for_bob = exchanger
        .token_for(&bob, &target())
        .await
        .expect("exchanged");
    assert_ne!(for_bob.access_token(), first.access_token());
    let other = ExchangeTarget {
        audience: "https://other.example.com".to_owned(),
        scope: None,
    };
    exchanger
        .token_for(&alice, &other)
        .await
        .expect("exchanged");
    assert_eq!(hits(), 3);

    // It lives 300 s and is exchanged again 30 s before: cached at 260 s, new at 271 s.
    tokio::time::advance(Duration::from_secs(260)).await;
    exchanger
        .token_for(&alice, &target())
        .await
        .expect("cached");
    assert_eq!(hits(), 3);
    tokio::time::advance(Duration::from_secs(11)).await;
    let renewed = exchanger
        .token_for(&alice, &target())
        .await
        .expect("renewed");
    assert_ne!(renewed.access_token(), first.access_token());
    assert_eq!(hits(), 4);
}

#[tokio::test(start_paused = true)]
async fn concurrent_exchanges_for_one_subject_are_one_exchange() {
    let key = Key::rsa("rsa-1");
    let issuer = start_issuer(&[&key]).await;
    let verifier = verifier(&issuer.url);
    let exchanger = verifier.exchanger().expect("client credentials are set");
    let alice = verifier
        .check_token(&key.token(&claims(&issuer.url, "alice")), Access::Mcp)
        .await
        .expect("valid");
    let calls = (0..50).map(|_| {
        let (exchanger, alice) = (exchanger.clone(), alice.clone());
        tokio::spawn(async move { exchanger.token_for(&alice, &target()).await })
    });
    for outcome in futures::future::join_all(calls).await {
        let token = outcome.expect("ran").expect("exchanged");
        assert_eq!(token.access_token(), "upstream-1");
    }
    assert_eq!(issuer.issuer.token_hits.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn a_refused_exchange_names_the_issuer_and_its_answer_and_is_shared_by_waiters() {
    let key = Key::rsa("rsa-1");
    let issuer = start_issuer(&[&key]).await;
    issuer.issuer.refuse_exchange.store(true, Ordering::SeqCst);
    let verifier = verifier(&issuer.url);
    let exchanger = verifier.exchanger().expect("client credentials are set");
    let alice = verifier
        .check_token(&key.token(&claims(&issuer.url, "alice")), Access::Mcp)
        .await
        .expect("valid");
    let calls = (0..10).map(|_| {
        let (exchanger, alice) = (exchanger.clone(), alice.clone());
        tokio::spawn(async move { exchanger.token_for(&alice, &target()).await })
    });
    for outcome in futures::future::join_all(calls).await {
        let error = outcome.expect("ran").expect_err("refused");
        assert_eq!(
            error,
            ExchangeError::Refused {
                issuer: issuer.url.clone(),
                audience: "https://upstream.example.com/mcp".to_owned(),
                status: 400,
                error: "invalid_target".to_owned(),
                description: Some("no such audience".to_owned()),
            }
        );
        let text = error.to_string();
        assert!(
            text.contains(&issuer.url) && text.contains("invalid_target"),
            "{text}"
        );
    }
    assert_eq!(issuer.issuer.token_hits.load(Ordering::SeqCst), 1);
}
