//! End to end, with a real identity provider (`oidc-provider`, testkit::idp) and the real
//! binary: the bad tokens `auth_face.rs` cannot make with one IdP (SPEC §14). A token of another
//! issuer signed with the very same key (only `iss` is wrong), a token past its `exp`, and one
//! whose `nbf` is ahead (the IdP restarted to sign `nbf` in the future): each `401` with
//! `invalid_token`, and nothing runs (the fault server's ledger). `clockSkewMs` is 0 here, so
//! the times are the tokens' own. Every wait is bounded.

mod support;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use mcp_supervisor_testkit::idp::{Idp, IdpClient, IdpConfig, claims};
use serde_json::json;
use support::*;

const LIMIT: Duration = Duration::from_secs(20);
/// The lifetime of the IdP's tokens: short, so that one expires within the test.
const TTL_SECS: u64 = 2;

fn clients() -> Vec<IdpClient> {
    vec![IdpClient::new("alice-app", "alice-secret").with_sub("alice")]
}

/// POST a `tools/call` of `count` on `session` with `token`; the status and the
/// `WWW-Authenticate` challenge.
async fn call_with(http: &reqwest::Client, url: &str, session: &str, token: &str) -> (u16, String) {
    let response = http
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-06-18")
        .header("mcp-session-id", session)
        .bearer_auth(token)
        .timeout(LIMIT)
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": "f__count", "arguments": {"id": "bad"}}}))
        .send()
        .await
        .expect("POST /mcp");
    let challenge = response
        .headers()
        .get("www-authenticate")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    (response.status().as_u16(), challenge)
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_issuer_an_expired_token_and_one_not_yet_valid_get_401_with_nothing_run() {
    let dir = temp_dir("auth-token-times");
    let config = IdpConfig {
        access_token_ttl_secs: TTL_SECS,
        ..IdpConfig::new(&clients())
    };
    let mut idp = Idp::start_with(&dir.join("idp"), config.clone())
        .await
        .expect("the identity provider starts");
    // Another issuer (another port) with a copy of the same signing key.
    let other_dir = dir.join("other-idp");
    std::fs::create_dir_all(&other_dir).expect("the other IdP's folder");
    std::fs::copy(idp.keys_file(), other_dir.join("idp-keys-0.json")).expect("copy the key");
    let mut other = Idp::start_with(&other_dir, config.clone())
        .await
        .expect("the other identity provider starts");
    assert_eq!(other.kid(), idp.kid(), "the same key");
    assert_ne!(other.issuer(), idp.issuer());

    let port = free_port();
    let audience = format!("http://127.0.0.1:{port}/mcp");
    let ledger = dir.join("ledger");
    let servers = json!({
        "mcpServers": { "f": { "command": fault_bin(), "args": ["--ledger", ledger] } },
        "auth": { "issuer": idp.issuer(), "audience": audience, "clockSkewMs": 0 },
    });
    let path = dir.join("servers.json");
    std::fs::write(&path, servers.to_string()).expect("write config");
    let _proxy = serve_http_on(&path, port).await;
    let http = reqwest::Client::new();
    let token = async |idp: &Idp| {
        idp.token("alice-app", "alice-secret", &audience, "")
            .await
            .expect("a token")
    };
    let counted = || {
        std::fs::read_to_string(&ledger)
            .map(|t| t.lines().count())
            .unwrap_or(0)
    };

    // A good token runs the call (so the refusals below are the tokens', not the setup's).
    let good = token(&idp).await;
    let (response, session) =
        post_initialize(&http, &audience, Some(&good), json!({}), "token-times").await;
    drop(response);
    let (status, _) = call_with(&http, &audience, &session, &good).await;
    assert_eq!(status, 200);
    poll_until_counted(&counted, 1).await;

    // Another issuer, the same key: only `iss` is wrong.
    let foreign = token(&other).await;
    let (header, payload) = claims(&foreign).expect("claims");
    assert_eq!(header["kid"], json!(idp.kid()));
    assert_eq!(payload["iss"], json!(other.issuer()));
    let (status, challenge) = call_with(&http, &audience, &session, &foreign).await;
    assert_eq!(status, 401, "another issuer: {challenge}");
    assert!(challenge.contains("error=\"invalid_token\""), "{challenge}");
    other.stop().await;

    // Past its `exp`.
    let expiring = token(&idp).await;
    let exp = claims(&expiring).expect("claims").1["exp"]
        .as_u64()
        .expect("exp");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(TTL_SECS + 5);
    while unix_now() <= exp {
        assert!(tokio::time::Instant::now() < deadline, "exp never passed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (status, challenge) = call_with(&http, &audience, &session, &expiring).await;
    assert_eq!(status, 401, "expired: {challenge}");
    assert!(challenge.contains("error=\"invalid_token\""), "{challenge}");

    // `nbf` a minute ahead: the IdP (same issuer, same key) restarted to sign so.
    idp.restart_with(IdpConfig {
        access_token_ttl_secs: 600,
        not_before_offset_secs: Some(60),
        ..IdpConfig::new(&clients())
    })
    .await
    .expect("the IdP restarts");
    let early = token(&idp).await;
    let nbf = claims(&early).expect("claims").1["nbf"]
        .as_u64()
        .expect("nbf");
    assert!(nbf > unix_now() + 30, "nbf is ahead: {nbf}");
    let (status, challenge) = call_with(&http, &audience, &session, &early).await;
    assert_eq!(status, 401, "not yet valid: {challenge}");
    assert!(challenge.contains("error=\"invalid_token\""), "{challenge}");

    assert_eq!(counted(), 1, "no refused request ran");
    idp.stop().await;
}

async fn poll_until_counted(counted: &impl Fn() -> usize, n: usize) {
    mcp_supervisor_testkit::poll_until("the call ran", LIMIT, || counted() == n).await;
}
