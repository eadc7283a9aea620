//! End to end, with a real identity provider (`oidc-provider`, testkit::idp) and the real
//! binary: `serve --http` as an OAuth resource server (SPEC §14). The metadata without a token;
//! 401 with the challenge for no token and for each kind of bad token, nothing run; a session
//! kept to the identity that opened it; `authorize` denying a call (nothing run) and hiding what
//! it denies from the caller's lists; the admin endpoints behind `adminScopes` while the probes
//! stay open; the top `rateLimit` as 429 with `Retry-After`; a rotated signing key working at
//! once. Every wait is bounded.

mod support;

use std::path::Path;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use mcp_supervisor_testkit::idp::{Idp, IdpClient};
use serde_json::{Value, json};
use support::*;

const ACCEPT: &str = "application/json, text/event-stream";
const LIMIT: Duration = Duration::from_secs(20);

struct Face {
    idp: Idp,
    proxy: Running,
    http: reqwest::Client,
    audience: String,
    ledger: std::path::PathBuf,
}

impl Face {
    /// The IdP, then `serve --http` with `auth` on it and the fault server (its `count` tool
    /// writes a ledger), `extra` merged into the config's top level.
    async fn start(tag: &str, server_extra: Value, extra: Value) -> Face {
        let dir = temp_dir(tag);
        let idp = Idp::start(
            &dir,
            &[
                IdpClient::new("alice-app", "alice-secret").with_sub("alice"),
                IdpClient::new("bob-app", "bob-secret").with_sub("bob"),
                IdpClient::new("ops-app", "ops-secret").with_sub("ops"),
            ],
        )
        .await
        .expect("the identity provider starts");
        let port = free_port();
        let audience = format!("http://127.0.0.1:{port}/mcp");
        let ledger = dir.join("ledger");
        let mut server = json!({
            "command": fault_bin(),
            "args": ["--ledger", ledger],
        });
        merge(&mut server, server_extra);
        let mut config = json!({
            "mcpServers": { "f": server },
            "auth": {
                "issuer": idp.issuer(),
                "audience": audience,
                "scopes": ["mcp:tools"],
                "adminScopes": ["admin"],
            },
        });
        merge(&mut config, extra);
        let path = dir.join("servers.json");
        std::fs::write(&path, config.to_string()).expect("write config");
        let addr = format!("127.0.0.1:{port}");
        let proxy = Running::start(
            &[
                "serve",
                "--config",
                path.to_str().unwrap_or_default(),
                "--http",
                &addr,
                "--no-catalog",
            ],
            port,
            &[],
        )
        .await;
        Face {
            idp,
            proxy,
            http: reqwest::Client::new(),
            audience,
            ledger,
        }
    }

    async fn token(&self, who: &str, scope: &str) -> String {
        self.idp
            .token(
                &format!("{who}-app"),
                &format!("{who}-secret"),
                &self.audience,
                scope,
            )
            .await
            .expect("a token from the identity provider")
    }

    /// POST `body` to /mcp with `token` and `session`; the status, headers and body.
    async fn post(
        &self,
        token: Option<&str>,
        session: Option<&str>,
        body: Value,
    ) -> (u16, reqwest::header::HeaderMap, String) {
        let mut request = self
            .http
            .post(&self.audience)
            .header("content-type", "application/json")
            .header("accept", ACCEPT)
            .header("mcp-protocol-version", "2025-06-18")
            .timeout(LIMIT)
            .json(&body);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        if let Some(session) = session {
            request = request.header("mcp-session-id", session);
        }
        let response = request.send().await.expect("POST /mcp");
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        (status, headers, response.text().await.unwrap_or_default())
    }

    /// An initialized session of `token`'s identity.
    async fn session(&self, token: &str) -> String {
        let (response, id) = post_initialize(
            &self.http,
            &self.audience,
            Some(token),
            json!({}),
            "auth-test",
        )
        .await;
        drop(response);
        let (status, _, _) = self
            .post(
                Some(token),
                Some(&id),
                json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            )
            .await;
        assert_eq!(status, 202, "initialized is accepted");
        id
    }

    /// The answer to request `method` on `session`, as JSON (from a JSON or SSE body).
    async fn request(&self, token: &str, session: &str, method: &str, params: Value) -> Value {
        let (status, _, body) = self
            .post(
                Some(token),
                Some(session),
                json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}),
            )
            .await;
        assert_eq!(status, 200, "{method}: {body}");
        answer_of(&body)
    }

    fn counted(&self) -> usize {
        std::fs::read_to_string(&self.ledger)
            .map(|t| t.lines().count())
            .unwrap_or(0)
    }

    async fn ready(&self) {
        let token = self.token("ops", "admin").await;
        for _ in 0..400 {
            let status = self
                .http
                .get(self.proxy.url("/status"))
                .bearer_auth(&token)
                .send()
                .await
                .ok();
            if let Some(response) = status
                && let Ok(body) = response.json::<Value>().await
                && state_is(&body, "f", "ready")
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("server f did not become ready");
    }
}

fn merge(into: &mut Value, extra: Value) {
    if let (Some(into), Value::Object(extra)) = (into.as_object_mut(), extra) {
        into.extend(extra);
    }
}

/// The JSON-RPC message of a JSON body or of an SSE body's last event.
fn answer_of(body: &str) -> Value {
    if let Ok(value) = serde_json::from_str(body) {
        return value;
    }
    body.lines()
        .rev()
        .filter_map(|l| l.strip_prefix("data:"))
        .find_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .unwrap_or_else(|| panic!("no JSON-RPC message in: {body}"))
}

fn count_call(id: u64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": "f__count", "arguments": {"id": format!("call-{id}")}}})
}

/// `token` with its header replaced by `header` and its signature by `signature`.
fn reforged(token: &str, header: Value, signature: &str) -> String {
    let payload = token.split('.').nth(1).unwrap_or_default();
    let header = URL_SAFE_NO_PAD.encode(header.to_string());
    format!("{header}.{payload}.{signature}")
}

fn kid_of(token: &str) -> String {
    let header = token.split('.').next().unwrap_or_default();
    let bytes = URL_SAFE_NO_PAD.decode(header).unwrap_or_default();
    let value: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    value["kid"].as_str().unwrap_or_default().to_string()
}

fn challenge(headers: &reqwest::header::HeaderMap) -> String {
    headers
        .get("www-authenticate")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string()
}

fn dir_of(face: &Face) -> &Path {
    face.ledger.parent().unwrap_or(Path::new("."))
}

#[tokio::test]
async fn the_metadata_is_served_without_a_token_and_a_request_without_one_gets_401_with_the_challenge()
 {
    let face = Face::start("auth-metadata", json!({}), json!({})).await;
    for path in [
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp",
    ] {
        let (status, metadata) = get_json(&face.proxy.url(path)).await;
        assert_eq!(status, 200, "{path}");
        assert_eq!(metadata["resource"], json!(face.audience));
        assert_eq!(
            metadata["authorization_servers"],
            json!([face.idp.issuer()])
        );
        assert_eq!(metadata["scopes_supported"], json!(["mcp:tools"]));
        assert_eq!(metadata["bearer_methods_supported"], json!(["header"]));
    }
    let (status, headers, _) = face.post(None, None, count_call(1)).await;
    assert_eq!(status, 401);
    let challenge = challenge(&headers);
    let metadata_url = face.proxy.url("/.well-known/oauth-protected-resource/mcp");
    assert!(
        challenge.starts_with(&format!("Bearer resource_metadata=\"{metadata_url}\"")),
        "{challenge}"
    );
    assert!(challenge.contains("scope=\"mcp:tools\""), "{challenge}");
    assert!(
        !challenge.contains("error="),
        "no token, no error: {challenge}"
    );
}

#[tokio::test]
async fn a_valid_token_calls_and_every_bad_token_gets_401_with_nothing_run() {
    let face = Face::start("auth-tokens", json!({}), json!({})).await;
    face.ready().await;
    let token = face.token("alice", "mcp:tools").await;
    let session = face.session(&token).await;
    let answer = face
        .request(
            &token,
            &session,
            "tools/call",
            count_call(1)["params"].clone(),
        )
        .await;
    assert!(answer.get("result").is_some(), "{answer}");
    assert_eq!(face.counted(), 1, "the valid call ran once");

    let kid = kid_of(&token);
    let signature = token.rsplit('.').next().unwrap_or_default().to_string();
    let mut tampered = signature.clone().into_bytes();
    tampered[10] = if tampered[10] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(tampered).unwrap_or_default();
    let other_audience = face
        .idp
        .token(
            "alice-app",
            "alice-secret",
            "http://127.0.0.1:1/other",
            "mcp:tools",
        )
        .await
        .expect("a token for another resource");
    let hmac_with_public_key = {
        use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
        let jwks = face.idp.get_json(&face.idp.jwks_uri()).await.expect("JWKS");
        let public = jwks["keys"][0].to_string();
        let claims: Value = mcp_supervisor_testkit::idp::claims(&token)
            .expect("claims")
            .1;
        let mut header = Header::new(Algorithm::HS256);
        header.kid = Some(kid.clone());
        encode(
            &header,
            &claims,
            &EncodingKey::from_secret(public.as_bytes()).expect("an HMAC key"),
        )
        .expect("HS256")
    };
    let bad = [
        ("wrong audience", other_audience),
        (
            "alg none",
            reforged(
                &token,
                json!({"alg": "none", "typ": "at+jwt", "kid": kid}),
                "",
            ),
        ),
        ("HMAC signed with the public key", hmac_with_public_key),
        (
            "a forged signature with a known kid",
            reforged(
                &token,
                json!({"alg": "RS256", "typ": "at+jwt", "kid": kid}),
                &tampered,
            ),
        ),
        (
            "an unknown kid",
            reforged(
                &token,
                json!({"alg": "RS256", "typ": "at+jwt", "kid": "no-such-key"}),
                &signature,
            ),
        ),
        ("not a JWT", "opaque-token-text".to_string()),
    ];
    for (what, bad_token) in bad {
        let (status, headers, body) = face
            .post(Some(&bad_token), Some(&session), count_call(2))
            .await;
        assert_eq!(status, 401, "{what}: {body}");
        assert!(
            challenge(&headers).contains("error=\"invalid_token\""),
            "{what}: {}",
            challenge(&headers)
        );
    }
    // A valid token without the scope /mcp needs.
    let unscoped = face.token("alice", "admin").await;
    let (status, headers, _) = face
        .post(Some(&unscoped), Some(&session), count_call(3))
        .await;
    assert_eq!(status, 403);
    assert!(challenge(&headers).contains("error=\"insufficient_scope\""));
    assert_eq!(face.counted(), 1, "no refused request ran");
}

#[tokio::test]
async fn a_session_belongs_to_the_identity_that_opened_it() {
    let face = Face::start("auth-owner", json!({}), json!({})).await;
    face.ready().await;
    let alice = face.token("alice", "mcp:tools").await;
    let bob = face.token("bob", "mcp:tools").await;
    let session = face.session(&alice).await;
    let (status, _, body) = face.post(Some(&bob), Some(&session), count_call(1)).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("another identity"), "{body}");
    assert_eq!(face.counted(), 0, "nothing ran");
    // A new token of the same identity goes on with it.
    let alice_again = face.token("alice", "mcp:tools").await;
    let answer = face
        .request(
            &alice_again,
            &session,
            "tools/call",
            count_call(2)["params"].clone(),
        )
        .await;
    assert!(answer.get("result").is_some(), "{answer}");
    assert_eq!(face.counted(), 1);
}

#[tokio::test]
async fn authorize_denies_a_call_that_then_does_not_run_and_hides_it_from_the_callers_list() {
    let rule = r#"jwt.sub == "alice" || !has(mcp.tool) || mcp.tool.name != "count""#;
    let face = Face::start("auth-authorize", json!({ "authorize": rule }), json!({})).await;
    face.ready().await;
    let (alice, bob) = (
        face.token("alice", "mcp:tools").await,
        face.token("bob", "mcp:tools").await,
    );
    let (alice_session, bob_session) = (face.session(&alice).await, face.session(&bob).await);
    let denied = face
        .request(
            &bob,
            &bob_session,
            "tools/call",
            count_call(1)["params"].clone(),
        )
        .await;
    assert_eq!(denied["error"]["code"], json!(-32003), "{denied}");
    let message = denied["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("\"count\"") && message.contains("did not run"),
        "{message}"
    );
    assert_eq!(face.counted(), 0, "the denied call did not run");
    let allowed = face
        .request(
            &alice,
            &alice_session,
            "tools/call",
            count_call(2)["params"].clone(),
        )
        .await;
    assert!(allowed.get("result").is_some(), "{allowed}");
    assert_eq!(face.counted(), 1);

    let names = |list: &Value| -> Vec<String> {
        list["result"]["tools"]
            .as_array()
            .map(|tools| {
                tools
                    .iter()
                    .filter_map(|t| t["name"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let bobs = names(
        &face
            .request(&bob, &bob_session, "tools/list", json!({}))
            .await,
    );
    let alices = names(
        &face
            .request(&alice, &alice_session, "tools/list", json!({}))
            .await,
    );
    assert!(alices.contains(&"f__count".to_string()), "{alices:?}");
    assert!(!bobs.contains(&"f__count".to_string()), "{bobs:?}");
    assert!(
        bobs.contains(&"f__echo".to_string()),
        "bob keeps the others: {bobs:?}"
    );
    assert_eq!(alices.len(), bobs.len() + 1);
}

#[tokio::test]
async fn the_admin_endpoints_need_the_admin_scopes_and_the_probes_stay_open() {
    let face = Face::start("auth-admin", json!({}), json!({})).await;
    let status_of = |token: Option<String>| {
        let request = face.http.get(face.proxy.url("/status")).timeout(LIMIT);
        async move {
            let request = match token {
                Some(token) => request.bearer_auth(token),
                None => request,
            };
            request
                .send()
                .await
                .map(|r| r.status().as_u16())
                .unwrap_or(0)
        }
    };
    assert_eq!(status_of(None).await, 401);
    assert_eq!(
        status_of(Some(face.token("alice", "mcp:tools").await)).await,
        403
    );
    assert_eq!(status_of(Some(face.token("ops", "admin").await)).await, 200);
    for probe in ["/livez", "/readyz"] {
        let status = face
            .http
            .get(face.proxy.url(probe))
            .timeout(LIMIT)
            .send()
            .await
            .map(|r| r.status().as_u16())
            .unwrap_or(0);
        assert_eq!(status, 200, "{probe} without a token");
    }
}

#[tokio::test]
async fn past_the_top_rate_limit_a_request_gets_429_with_retry_after_and_does_not_run() {
    let limit = json!({ "rateLimit": { "requestsPerSecond": 0.1, "burst": 2 } });
    let face = Face::start("auth-rate", json!({}), limit).await;
    face.ready().await;
    let alice = face.token("alice", "mcp:tools").await;
    // initialize and one call spend alice's 2 (a notification spends nothing).
    let session = face.session(&alice).await;
    let answer = face
        .request(
            &alice,
            &session,
            "tools/call",
            count_call(1)["params"].clone(),
        )
        .await;
    assert!(answer.get("result").is_some(), "{answer}");
    let (status, headers, body) = face.post(Some(&alice), Some(&session), count_call(2)).await;
    assert_eq!(status, 429, "{body}");
    let retry: u64 = headers
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    assert!((1..=10).contains(&retry), "Retry-After {retry}");
    assert!(body.contains("did not run"), "{body}");
    assert_eq!(face.counted(), 1, "the limited call did not run");
    // Another identity has its own budget.
    let bob = face.token("bob", "mcp:tools").await;
    let bob_session = face.session(&bob).await;
    let answer = face
        .request(
            &bob,
            &bob_session,
            "tools/call",
            count_call(3)["params"].clone(),
        )
        .await;
    assert!(answer.get("result").is_some(), "{answer}");
}

#[tokio::test]
async fn a_rotated_signing_key_works_at_once() {
    let mut face = Face::start("auth-rotation", json!({}), json!({})).await;
    face.ready().await;
    let before = face.token("alice", "mcp:tools").await;
    let session = face.session(&before).await;
    let old_kid = kid_of(&before);
    face.idp
        .restart_with_new_key()
        .await
        .expect("the identity provider restarts with a new key");
    let after = face.token("alice", "mcp:tools").await;
    assert_ne!(kid_of(&after), old_kid, "a new key id");
    let answer = face
        .request(
            &after,
            &session,
            "tools/call",
            count_call(1)["params"].clone(),
        )
        .await;
    assert!(answer.get("result").is_some(), "{answer}");
    assert!(dir_of(&face).exists());
}

/// The pid of the process that answered `f__pid` in `session`.
async fn pid_in(face: &Face, token: &str, session: &str) -> u64 {
    let answer = face
        .request(
            token,
            session,
            "tools/call",
            json!({"name": "f__pid", "arguments": {}}),
        )
        .await;
    answer["result"]["structuredContent"]["pid"]
        .as_u64()
        .unwrap_or_else(|| panic!("a pid in {answer}"))
}

#[tokio::test]
async fn isolation_user_gives_each_identity_one_instance_that_comes_back_as_its_own() {
    let face = Face::start("auth-user", json!({ "isolation": "user" }), json!({})).await;
    face.ready().await;
    let (alice, bob) = (
        face.token("alice", "mcp:tools").await,
        face.token("bob", "mcp:tools").await,
    );
    let (alice_1, alice_2, bob_1) = (
        face.session(&alice).await,
        face.session(&alice).await,
        face.session(&bob).await,
    );
    let alices = pid_in(&face, &alice, &alice_1).await;
    assert_eq!(
        pid_in(&face, &alice, &alice_2).await,
        alices,
        "her sessions share it"
    );
    let bobs = pid_in(&face, &bob, &bob_1).await;
    assert_ne!(bobs, alices, "bob has his own");

    // Alice's instance killed mid-session comes back as hers, and bob's is not touched.
    kill9(alices as u32);
    let mut again = 0;
    for _ in 0..100 {
        let (status, _, body) = face
            .post(
                Some(&alice),
                Some(&alice_2),
                json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                       "params": {"name": "f__pid", "arguments": {}}}),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        if let Some(pid) = answer_of(&body)["result"]["structuredContent"]["pid"].as_u64() {
            again = pid;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        again != 0 && again != alices && again != bobs,
        "a new instance: {again}"
    );
    assert_eq!(
        pid_in(&face, &alice, &alice_1).await,
        again,
        "both her sessions on it"
    );
    assert_eq!(pid_in(&face, &bob, &bob_1).await, bobs, "bob's untouched");

    // It ends with her last session.
    for session in [&alice_1, &alice_2] {
        let status = face
            .http
            .delete(&face.audience)
            .bearer_auth(&alice)
            .header("mcp-session-id", session.as_str())
            .timeout(LIMIT)
            .send()
            .await
            .map(|r| r.status().as_u16())
            .unwrap_or(0);
        assert_eq!(status, 200);
    }
    assert!(
        gone_within(again as u32, LIMIT).await,
        "her instance stopped after her last session ended"
    );
    assert!(alive(bobs as u32), "bob's goes on");
}

#[tokio::test]
async fn wrap_http_takes_the_same_auth_as_flags() {
    let dir = temp_dir("auth-wrap");
    let idp = Idp::start(
        &dir,
        &[IdpClient::new("alice-app", "alice-secret").with_sub("alice")],
    )
    .await
    .expect("the identity provider starts");
    let port = free_port();
    let audience = format!("http://127.0.0.1:{port}/mcp");
    let addr = format!("127.0.0.1:{port}");
    let fault = fault_bin();
    let proxy = Running::start(
        &[
            "wrap",
            "--http",
            &addr,
            "--auth-issuer",
            idp.issuer(),
            "--auth-audience",
            &audience,
            "--auth-scope",
            "mcp:tools",
            "--",
            fault.to_str().unwrap_or_default(),
        ],
        port,
        &[],
    )
    .await;
    let http = reqwest::Client::new();
    let (status, metadata) =
        get_json(&proxy.url("/.well-known/oauth-protected-resource/mcp")).await;
    assert_eq!(status, 200);
    assert_eq!(metadata["resource"], json!(audience));
    let refused = http
        .post(&audience)
        .header("content-type", "application/json")
        .header("accept", ACCEPT)
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#)
        .timeout(LIMIT)
        .send()
        .await
        .map(|r| r.status().as_u16())
        .unwrap_or(0);
    assert_eq!(refused, 401);
    let token = idp
        .token("alice-app", "alice-secret", &audience, "mcp:tools")
        .await
        .expect("a token");
    let (response, _session) =
        post_initialize(&http, &audience, Some(&token), json!({}), "wrap-auth").await;
    drop(response);
}

#[tokio::test]
async fn a_session_opened_on_one_replica_refuses_another_identity_on_the_other() {
    let dir = temp_dir("auth-replicas");
    let idp = Idp::start(
        &dir,
        &[
            IdpClient::new("alice-app", "alice-secret").with_sub("alice"),
            IdpClient::new("bob-app", "bob-secret").with_sub("bob"),
        ],
    )
    .await
    .expect("the identity provider starts");
    // One service: both replicas have the same audience (the balancer's URL) and session key.
    let audience = "http://127.0.0.1:1/mcp".to_string();
    let key = base64::engine::general_purpose::STANDARD.encode([7u8; 32]);
    let config = json!({
        "mcpServers": { "f": { "command": fault_bin() } },
        "auth": { "issuer": idp.issuer(), "audience": audience, "scopes": ["mcp:tools"] },
    });
    let path = dir.join("servers.json");
    std::fs::write(&path, config.to_string()).expect("write config");
    let mut replicas = Vec::new();
    let mut ports = Vec::new();
    for _ in 0..2 {
        let port = free_port();
        let addr = format!("127.0.0.1:{port}");
        ports.push(port);
        replicas.push(
            Running::start(
                &[
                    "serve",
                    "--config",
                    path.to_str().unwrap_or_default(),
                    "--http",
                    &addr,
                ],
                port,
                &[("MCP_SUPERVISOR_SESSION_KEY", key.as_str())],
            )
            .await,
        );
    }
    // HAProxy in front, round robin per request (its checks read the open /readyz).
    let mut balancer = start_haproxy(&dir, &ports).await;
    let front = format!("http://127.0.0.1:{}/mcp", balancer.port);
    let token = |who: &'static str| {
        let (idp, audience) = (&idp, audience.clone());
        async move {
            idp.token(
                &format!("{who}-app"),
                &format!("{who}-secret"),
                &audience,
                "mcp:tools",
            )
            .await
            .expect("a token")
        }
    };
    let (alice, bob) = (token("alice").await, token("bob").await);
    let http = reqwest::Client::new();
    // Alice opens her session through the balancer, on whichever replica it picks.
    let (response, session) =
        post_initialize(&http, &front, Some(&alice), json!({}), "replica").await;
    drop(response);
    let ping = |url: String, token: &str| {
        http.post(url)
            .header("content-type", "application/json")
            .header("accept", ACCEPT)
            .header("mcp-protocol-version", "2025-06-18")
            .header("mcp-session-id", session.as_str())
            .bearer_auth(token)
            .body(r#"{"jsonrpc":"2.0","id":5,"method":"ping"}"#)
            .timeout(LIMIT)
            .send()
    };
    let status = async |url: String, token: &str| {
        ping(url, token)
            .await
            .map(|r| r.status().as_u16())
            .unwrap_or(0)
    };
    // Through the balancer (round robin: both replicas in turn) and on each replica directly:
    // bob is refused on alice's session everywhere, and alice goes on everywhere.
    for _ in 0..4 {
        assert_eq!(
            status(front.clone(), &bob).await,
            403,
            "bob through HAProxy"
        );
        assert_eq!(
            status(front.clone(), &alice).await,
            200,
            "alice through HAProxy"
        );
    }
    for (n, replica) in replicas.iter().enumerate() {
        assert_eq!(
            status(replica.url("/mcp"), &bob).await,
            403,
            "bob on replica {n}"
        );
        assert_eq!(
            status(replica.url("/mcp"), &alice).await,
            200,
            "alice on replica {n}"
        );
    }
    let _ = balancer.child.kill().await;
}
