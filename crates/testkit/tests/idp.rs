//! The identity provider of the OAuth tests (testkit::idp, oidc-provider 9.13 on the pinned
//! node) does what those tests rely on: discovery, JWT access tokens for a resource with the
//! configured `sub` and scopes, key rotation by restart, and RFC 8693 token exchange keeping the
//! subject. Needs `scripts/install-test-deps.sh` (tools/node_modules).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use mcp_supervisor_testkit::idp::{Idp, IdpClient, IdpConfig, claims};
use mcp_supervisor_testkit::{gone_within, temp_dir};

const FACE: &str = "http://127.0.0.1:18080/mcp";
const UPSTREAM: &str = "http://127.0.0.1:18081/mcp";

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn clients() -> Vec<IdpClient> {
    vec![
        IdpClient::new("alice-app", "alice-secret").with_sub("alice"),
        IdpClient::new("bob-app", "bob-secret").with_sub("bob"),
        IdpClient::new("proxy", "proxy-secret"),
    ]
}

#[tokio::test]
async fn the_idp_serves_discovery_and_jwt_tokens_rotates_keys_and_exchanges_tokens() {
    let dir = temp_dir("idp");
    let mut idp = Idp::start(&dir, &clients()).await.expect("the IdP starts");
    let issuer = idp.issuer().to_string();
    assert!(issuer.starts_with("http://127.0.0.1:"), "{issuer}");

    // Discovery: what the resource server reads (jwks_uri) and the proxy uses (token_endpoint).
    let discovery = idp.discovery().await.expect("discovery");
    assert_eq!(discovery["issuer"], issuer.as_str());
    assert_eq!(discovery["jwks_uri"], idp.jwks_uri().as_str());
    assert_eq!(discovery["token_endpoint"], idp.token_endpoint().as_str());
    let grants = discovery["grant_types_supported"].to_string();
    assert!(grants.contains("client_credentials"), "{grants}");
    assert!(grants.contains("token-exchange"), "{grants}");

    // The JWKS holds the signing key's public half only.
    let jwks = idp.get_json(&idp.jwks_uri()).await.expect("jwks");
    let first_kid = idp.kid().to_string();
    assert_eq!(jwks["keys"][0]["kid"], first_kid.as_str());
    assert_eq!(jwks["keys"][0]["kty"], "RSA");
    assert!(
        jwks["keys"][0].get("d").is_none(),
        "a private key part in {jwks}"
    );

    // A client-credentials token for the face: a JWT access token (RFC 9068) with iss, aud, the
    // scopes and the user the client stands for.
    let alice = idp
        .token("alice-app", "alice-secret", FACE, "mcp:tools admin")
        .await
        .expect("alice's token");
    let (header, body) = claims(&alice).expect("a JWT");
    assert_eq!(header["typ"], "at+jwt");
    assert_eq!(header["alg"], "RS256");
    assert_eq!(header["kid"], first_kid.as_str());
    assert_eq!(body["iss"], issuer.as_str());
    assert_eq!(body["aud"], FACE);
    assert_eq!(body["sub"], "alice");
    assert_eq!(body["client_id"], "alice-app");
    assert_eq!(body["scope"], "mcp:tools admin");
    let exp = body["exp"].as_u64().expect("exp");
    assert!(exp > now() && exp <= now() + 700, "exp {exp}");

    // Another identity, fewer scopes; a scope no resource allows is left out, not granted.
    let bob = idp
        .token("bob-app", "bob-secret", FACE, "mcp:tools other")
        .await
        .expect("bob's token");
    let (_, body) = claims(&bob).unwrap();
    assert_eq!(body["sub"], "bob");
    assert_eq!(body["scope"], "mcp:tools");

    // A client with no user: its sub is its client_id.
    let proxy = idp.token("proxy", "proxy-secret", FACE, "").await.unwrap();
    assert_eq!(claims(&proxy).unwrap().1["sub"], "proxy");

    // Wrong secret: refused, and the error says so.
    let wrong = idp.token("alice-app", "nope", FACE, "mcp:tools").await;
    let message = format!("{:#}", wrong.expect_err("a wrong secret is refused"));
    assert!(message.contains("invalid_client"), "{message}");

    // Token exchange (RFC 8693): the proxy trades alice's token for one of the upstream's
    // audience; same sub, the proxy recorded as the actor.
    let exchanged = idp
        .exchange("proxy", "proxy-secret", &alice, UPSTREAM, "mcp:tools")
        .await
        .expect("the exchange");
    let (header, body) = claims(&exchanged).unwrap();
    assert_eq!(header["typ"], "at+jwt");
    assert_eq!(header["kid"], first_kid.as_str());
    assert_eq!(body["iss"], issuer.as_str());
    assert_eq!(body["aud"], UPSTREAM);
    assert_eq!(body["sub"], "alice");
    assert_eq!(body["act"]["sub"], "proxy");
    assert_eq!(body["client_id"], "proxy");
    assert_eq!(body["scope"], "mcp:tools");

    // A subject token the IdP did not sign is refused (invalid_grant, saying why).
    let mut forged = alice.clone();
    forged.truncate(forged.len() - 4);
    forged.push_str("AAAA");
    let refused = idp
        .exchange("proxy", "proxy-secret", &forged, UPSTREAM, "")
        .await
        .expect_err("a forged subject token is refused");
    let message = format!("{refused:#}");
    assert!(
        message.contains("invalid_grant") && message.contains("signature"),
        "{message}"
    );

    // Key rotation: same issuer and port, a new kid in the JWKS and on new tokens; tokens of
    // the old key no longer verify here.
    let port = idp.port();
    idp.restart_with_new_key().await.expect("the restart");
    assert_eq!(idp.issuer(), issuer);
    assert_eq!(idp.port(), port);
    let second_kid = idp.kid().to_string();
    assert_ne!(second_kid, first_kid);
    let jwks = idp
        .get_json(&idp.jwks_uri())
        .await
        .expect("jwks after the restart");
    let kids: Vec<&str> = jwks["keys"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|k| k["kid"].as_str())
        .collect();
    assert_eq!(kids, [second_kid.as_str()]);
    let rotated = idp
        .token("alice-app", "alice-secret", FACE, "mcp:tools")
        .await
        .expect("a token after the restart");
    let (header, body) = claims(&rotated).unwrap();
    assert_eq!(header["kid"], second_kid.as_str());
    assert_eq!(body["sub"], "alice");
    let stale = idp
        .exchange("proxy", "proxy-secret", &alice, UPSTREAM, "")
        .await
        .expect_err("a token of the old key is refused");
    assert!(format!("{stale:#}").contains("unknown key"), "{stale:#}");

    // Stopped: unreachable; restarted with the same key: the same kid.
    idp.stop().await;
    assert!(idp.discovery().await.is_err());
    idp.restart().await.expect("a restart with the same key");
    assert_eq!(idp.kid(), second_kid);

    // Dropped: its process is gone.
    let pid = idp.pid().expect("a running IdP has a pid");
    drop(idp);
    assert!(
        gone_within(pid, Duration::from_secs(10)).await,
        "the IdP {pid} outlived its drop"
    );
}

#[tokio::test]
async fn each_resource_allows_its_own_scopes_and_a_client_may_be_limited() {
    let dir = temp_dir("idp-scopes");
    let mut config = IdpConfig::new(&[
        IdpClient::new("alice-app", "alice-secret").with_sub("alice"),
        IdpClient::new("reader", "reader-secret").with_scope("mcp:tools"),
    ]);
    config.resources = vec![
        (FACE.to_string(), "mcp:tools admin".to_string()),
        (UPSTREAM.to_string(), "files:read".to_string()),
    ];
    config.access_token_ttl_secs = 60;
    let idp = Idp::start_with(&dir, config).await.expect("the IdP starts");

    let token = idp
        .token(
            "alice-app",
            "alice-secret",
            UPSTREAM,
            "files:read mcp:tools",
        )
        .await
        .unwrap();
    let (_, body) = claims(&token).unwrap();
    assert_eq!(body["aud"], UPSTREAM);
    assert_eq!(body["scope"], "files:read");
    let exp = body["exp"].as_u64().unwrap();
    assert!(exp <= now() + 61, "the TTL of 60 s: exp {exp}");

    // A resource the IdP does not know: invalid_target.
    let unknown = idp
        .token(
            "alice-app",
            "alice-secret",
            "http://127.0.0.1:1/other",
            "mcp:tools",
        )
        .await
        .expect_err("an unknown resource is refused");
    assert!(
        format!("{unknown:#}").contains("invalid_target"),
        "{unknown:#}"
    );

    // A client limited to mcp:tools that asks for admin: invalid_scope.
    let limited = idp
        .token("reader", "reader-secret", FACE, "mcp:tools admin")
        .await
        .expect_err("a scope beyond the client's is refused");
    assert!(
        format!("{limited:#}").contains("invalid_scope"),
        "{limited:#}"
    );
}
