//! Interoperability of the HTTP face as an OAuth resource server (SPEC §14) with the official
//! Python SDK client's own OAuth support (`mcp` 2.3.0, `ClientCredentialsOAuthProvider`), against
//! a real identity provider (`oidc-provider`, testkit::idp) and the real binary.
//!
//! The client is given only the proxy's `/mcp` URL, a client id and a secret: it must find the
//! issuer through the 401's challenge and the RFC 9728 metadata, the token endpoint in the
//! issuer's metadata, get a token for this resource (RFC 8707 `resource`) and call a tool. A
//! wrong secret must make it fail cleanly, with nothing run upstream (the fault server's ledger).
//!
//! The Python side is `tests/py/oauth_client.py`: it records what it saw (every HTTP request the
//! SDK made, the token's claims) and asserts nothing; the assertions are here. Every wait is
//! bounded: the driver by [`DRIVER_LIMIT`] (it is killed when it overruns).

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use mcp_supervisor_testkit::idp::{Idp, IdpClient};
use serde_json::{Value, json};
use support::*;

/// One driver run, start to end (Python's imports alone take a second or two).
const DRIVER_LIMIT: Duration = Duration::from_secs(60);
/// The driver's own deadline, inside [`DRIVER_LIMIT`] so it reports before it is killed.
const DRIVER_DEADLINE_S: &str = "45";
/// The scope the proxy demands (`auth.scopes`).
const SCOPE: &str = "mcp:tools";

struct Face {
    idp: Idp,
    proxy: Running,
    /// `http://127.0.0.1:PORT/mcp`: the endpoint and `auth.audience`.
    audience: String,
    ledger: PathBuf,
    dir: PathBuf,
}

impl Face {
    /// The IdP, then `serve --http` with `auth` on it and the fault server as `f` (its `count`
    /// tool writes a ledger); returns once `f` is ready.
    async fn start(tag: &str) -> Face {
        let dir = temp_dir(tag);
        let idp = Idp::start(
            &dir,
            &[
                IdpClient::new("alice-app", "alice-secret").with_sub("alice"),
                IdpClient::new("ops-app", "ops-secret").with_sub("ops"),
            ],
        )
        .await
        .expect("the identity provider starts");
        let port = free_port();
        let audience = format!("http://127.0.0.1:{port}/mcp");
        let ledger = dir.join("ledger");
        let config = json!({
            "mcpServers": { "f": { "command": fault_bin(), "args": ["--ledger", ledger] } },
            "auth": {
                "issuer": idp.issuer(),
                "audience": audience,
                "scopes": [SCOPE],
                "adminScopes": ["admin"],
            },
        });
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
        let face = Face {
            idp,
            proxy,
            audience,
            ledger,
            dir,
        };
        face.ready().await;
        face
    }

    /// Waits (bounded) until `/status`, read with an admin token, shows `f` ready.
    async fn ready(&self) {
        let token = self
            .idp
            .token("ops-app", "ops-secret", &self.audience, "admin")
            .await
            .expect("an admin token");
        let http = reqwest::Client::new();
        for _ in 0..400 {
            let response = http
                .get(self.proxy.url("/status"))
                .bearer_auth(&token)
                .timeout(Duration::from_secs(5))
                .send()
                .await
                .ok();
            if let Some(response) = response
                && let Ok(body) = response.json::<Value>().await
                && state_is(&body, "f", "ready")
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("server f did not become ready");
    }

    /// `http://127.0.0.1:PORT` of the proxy.
    fn base(&self) -> String {
        self.proxy.url("")
    }

    /// The resource metadata URL the challenge must name (RFC 9728 §3.1, path-suffixed form).
    fn metadata_url(&self) -> String {
        self.proxy.url("/.well-known/oauth-protected-resource/mcp")
    }

    fn ledger_lines(&self) -> Vec<String> {
        std::fs::read_to_string(&self.ledger)
            .map(|t| t.lines().map(str::to_string).collect())
            .unwrap_or_default()
    }

    /// Runs the driver against `/mcp` as `client_id` with `secret`, `extra` arguments after;
    /// its exit code and its JSON summary (the stderr goes into a failing test's message).
    async fn drive(&self, client_id: &str, secret: &str, extra: &[&str]) -> Driven {
        let python = mcp_supervisor_testkit::python(
            "from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider",
        );
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/oauth_client.py");
        let mut command = tokio::process::Command::new(python);
        command
            .arg(&script)
            .args(["--url", &self.audience])
            .args(["--client-id", client_id, "--client-secret", secret])
            .args(["--deadline", DRIVER_DEADLINE_S])
            .args(extra)
            .current_dir(&self.dir)
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        let output = tokio::time::timeout(DRIVER_LIMIT, command.output())
            .await
            .unwrap_or_else(|_| panic!("the Python driver did not finish within {DRIVER_LIMIT:?}"))
            .expect("run the Python driver");
        let stdout = String::from_utf8_lossy(&output.stdout).to_string();
        let stderr = String::from_utf8_lossy(&output.stderr).to_string();
        let summary = stdout
            .lines()
            .rev()
            .find_map(|l| serde_json::from_str::<Value>(l.trim()).ok())
            .unwrap_or_else(|| {
                panic!(
                    "the driver printed no JSON summary (exit {:?})\nstdout:\n{stdout}\nstderr:\n{stderr}\nIdP log:\n{}",
                    output.status.code(),
                    self.idp.log()
                )
            });
        Driven {
            code: output.status.code(),
            summary,
            stderr,
        }
    }
}

struct Driven {
    code: Option<i32>,
    summary: Value,
    stderr: String,
}

impl Driven {
    fn requests(&self) -> Vec<&Value> {
        self.summary["requests"]
            .as_array()
            .map(|a| a.iter().collect())
            .unwrap_or_default()
    }

    /// The summary and the driver's stderr, for a failing assertion's message.
    fn context(&self) -> String {
        format!(
            "exit {:?}\nsummary: {:#}\nstderr:\n{}",
            self.code, self.summary, self.stderr
        )
    }
}

/// Whether `aud` (a string or an array, RFC 7519 §4.1.3) holds `audience`.
fn aud_holds(aud: &Value, audience: &str) -> bool {
    match aud {
        Value::String(s) => s == audience,
        Value::Array(items) => items.iter().any(|v| v == audience),
        _ => false,
    }
}

/// The discovery the SDK must have made, in order, and what the proxy must have answered:
/// the first `/mcp` request, without a token, got 401 with `resource_metadata` naming the
/// metadata URL and the scope; that URL answered the RFC 9728 metadata (resource = audience,
/// the issuer as the one authorization server); the issuer's metadata came from the issuer; the
/// token request went to the IdP's token endpoint with HTTP Basic, `resource` = the audience and
/// the challenged scope. Returns the index of the token request.
fn assert_discovery(face: &Face, run: &Driven) -> usize {
    let ctx = run.context();
    let requests = run.requests();
    let first = requests
        .first()
        .unwrap_or_else(|| panic!("no request: {ctx}"));
    assert_eq!(first["method"], "POST", "{ctx}");
    assert_eq!(first["url"], json!(face.audience), "{ctx}");
    assert_eq!(
        first["auth"],
        Value::Null,
        "the first request has no token: {ctx}"
    );
    assert_eq!(first["status"], 401, "{ctx}");
    let challenge = first["www_authenticate"].as_str().unwrap_or_default();
    assert!(
        challenge.starts_with("Bearer "),
        "a Bearer challenge: {challenge}"
    );
    assert!(
        challenge.contains(&format!("resource_metadata=\"{}\"", face.metadata_url())),
        "the challenge names the metadata URL: {challenge}"
    );
    assert!(
        challenge.contains(&format!("scope=\"{SCOPE}\"")),
        "the challenge names the scope: {challenge}"
    );

    // The protected resource metadata, from the URL the challenge named.
    let prm = requests
        .iter()
        .position(|r| r["method"] == "GET" && r["url"] == json!(face.metadata_url()))
        .unwrap_or_else(|| panic!("the SDK fetched the challenge's metadata URL: {ctx}"));
    assert_eq!(requests[prm]["status"], 200, "{ctx}");
    assert_eq!(
        requests[prm]["auth"],
        Value::Null,
        "metadata without a token: {ctx}"
    );
    let metadata = &run.summary["resource_metadata"];
    assert_eq!(metadata["resource"], json!(face.audience), "{ctx}");
    assert_eq!(
        metadata["authorization_servers"],
        json!([face.idp.issuer()]),
        "{ctx}"
    );
    assert_eq!(metadata["scopes_supported"], json!([SCOPE]), "{ctx}");
    assert_eq!(
        metadata["bearer_methods_supported"],
        json!(["header"]),
        "{ctx}"
    );
    assert_eq!(
        run.summary["auth_server_url"],
        json!(face.idp.issuer()),
        "{ctx}"
    );

    // The issuer's metadata (RFC 8414 or OpenID discovery), from the issuer, after the PRM.
    let issuer_prefix = format!("{}/.well-known/", face.idp.issuer());
    let asm = requests
        .iter()
        .rposition(|r| {
            r["method"] == "GET"
                && r["status"] == 200
                && r["url"]
                    .as_str()
                    .is_some_and(|u| u.starts_with(&issuer_prefix))
        })
        .unwrap_or_else(|| panic!("the SDK read the issuer's metadata: {ctx}"));
    assert!(
        asm > prm,
        "the issuer's metadata after the resource's: {ctx}"
    );
    assert_eq!(
        run.summary["issuer_metadata"],
        json!({"issuer": face.idp.issuer(), "token_endpoint": face.idp.token_endpoint()}),
        "{ctx}"
    );

    // The token request: one, to the token endpoint, for this resource and the scope.
    let token_requests: Vec<usize> = requests
        .iter()
        .enumerate()
        .filter(|(_, r)| r["url"] == json!(face.idp.token_endpoint()))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(token_requests.len(), 1, "one token request: {ctx}");
    let at = token_requests[0];
    assert!(at > asm, "{ctx}");
    let token_request = requests[at];
    assert_eq!(token_request["method"], "POST", "{ctx}");
    assert_eq!(token_request["auth"], "basic", "client_secret_basic: {ctx}");
    assert_eq!(
        token_request["form"],
        json!({
            "grant_type": "client_credentials",
            "resource": face.audience,
            "scope": SCOPE,
        }),
        "{ctx}"
    );

    // Nothing went anywhere but the proxy and the IdP; no token went to the IdP, no client
    // secret to the proxy.
    for request in &requests {
        let url = request["url"].as_str().unwrap_or_default();
        if url.starts_with(&format!("{}/", face.base())) {
            assert_ne!(
                request["auth"], "basic",
                "no client secret to the proxy: {ctx}"
            );
        } else {
            assert!(
                url.starts_with(&format!("{}/", face.idp.issuer())),
                "a request to neither the proxy nor the IdP: {url}: {ctx}"
            );
            assert_ne!(request["auth"], "bearer", "no token to the IdP: {ctx}");
        }
    }
    at
}

/// After the token request, every request went to `/mcp` with that token and was accepted;
/// the token is a JWT of the IdP for this audience (its `aud` holds the audience), for alice.
fn assert_token_used(face: &Face, run: &Driven, token_at: usize) {
    let ctx = run.context();
    let requests = run.requests();
    assert_eq!(
        requests[token_at]["status"], 200,
        "the IdP gave a token: {ctx}"
    );
    assert_eq!(run.summary["tokens_stored"], 1, "{ctx}");
    let token = &run.summary["token"];
    assert_eq!(token["token_type"], "Bearer", "{ctx}");
    let claims = &token["claims"];
    assert!(
        aud_holds(&claims["aud"], &face.audience),
        "the token's aud holds the audience {}: {ctx}",
        face.audience
    );
    assert_eq!(claims["iss"], json!(face.idp.issuer()), "{ctx}");
    assert_eq!(claims["sub"], "alice", "{ctx}");
    assert_eq!(claims["client_id"], "alice-app", "{ctx}");
    assert!(
        claims["scope"]
            .as_str()
            .is_some_and(|s| s.split(' ').any(|x| x == SCOPE)),
        "{ctx}"
    );
    let digest = token["digest"].as_str().expect("the token's digest");
    let after = &requests[token_at + 1..];
    assert!(!after.is_empty(), "the SDK retried with the token: {ctx}");
    for request in after {
        assert_eq!(request["url"], json!(face.audience), "{ctx}");
        assert_eq!(request["auth"], "bearer", "{ctx}");
        assert_eq!(
            request["bearer_digest"], digest,
            "every request carried the token whose claims were checked: {ctx}"
        );
        // The GET stream of the handshake era may still wait for its answer when the client
        // closes; every other request was answered.
        if request["method"] == "GET" && request.get("status").is_none() {
            continue;
        }
        let status = request["status"].as_u64().unwrap_or(0);
        assert!((200..300).contains(&status), "accepted: {request}: {ctx}");
    }
}

/// The calls answered: echo's text, count's id (and the ledger holds exactly `ids`).
fn assert_called(face: &Face, run: &Driven, count_id: &str, ids: &[&str]) {
    let ctx = run.context();
    assert_eq!(run.code, Some(0), "{ctx}");
    assert_eq!(run.summary["ok"], true, "{ctx}");
    let tools = run.summary["tools"].as_array().cloned().unwrap_or_default();
    assert!(tools.contains(&json!("f__echo")), "{ctx}");
    assert_eq!(
        run.summary["echo"],
        json!({"name": "f__echo", "ok": true, "text": "hello through oauth", "is_error": false}),
        "{ctx}"
    );
    assert_eq!(
        run.summary["count"],
        json!({"name": "f__count", "ok": true, "text": count_id, "is_error": false}),
        "{ctx}"
    );
    assert_eq!(face.ledger_lines(), ids, "{ctx}");
}

#[tokio::test]
async fn the_python_sdk_finds_the_issuer_through_the_challenge_and_calls_a_tool_with_its_token() {
    let face = Face::start("auth-python-discover").await;
    // The SDK's default mode: server/discover first (the newest era through the proxy).
    let run = face
        .drive(
            "alice-app",
            "alice-secret",
            &["--mode", "auto", "--count-id", "discovered"],
        )
        .await;
    let token_at = assert_discovery(&face, &run);
    assert_token_used(&face, &run, token_at);
    assert_called(&face, &run, "discovered", &["discovered"]);
}

#[tokio::test]
async fn the_python_sdk_with_the_issuer_pinned_accepts_the_metadata_the_proxy_names() {
    let face = Face::start("auth-python-pinned").await;
    // The SDK's recommended form (the issuer will be required in its 3.0): its metadata must
    // name exactly this issuer, the proxy's `authorization_servers` must match it. The
    // initialize handshake this time.
    let run = face
        .drive(
            "alice-app",
            "alice-secret",
            &[
                "--issuer",
                face.idp.issuer(),
                "--mode",
                "legacy",
                "--count-id",
                "pinned",
            ],
        )
        .await;
    let ctx = run.context();
    assert_eq!(run.summary["warnings"], json!([]), "no deprecation: {ctx}");
    let token_at = assert_discovery(&face, &run);
    assert_token_used(&face, &run, token_at);
    assert_called(&face, &run, "pinned", &["pinned"]);
}

#[tokio::test]
async fn a_wrong_client_secret_fails_the_python_client_cleanly_and_nothing_reaches_the_server() {
    let face = Face::start("auth-python-wrong-secret").await;
    let started = std::time::Instant::now();
    let run = face
        .drive(
            "alice-app",
            "not-the-secret",
            &["--count-id", "must-not-run"],
        )
        .await;
    let elapsed = started.elapsed();
    let ctx = run.context();
    assert_eq!(run.code, Some(1), "the driver fails: {ctx}");
    assert_eq!(run.summary["ok"], false, "{ctx}");
    assert_eq!(
        run.summary["connected"], false,
        "no session was made: {ctx}"
    );
    assert_eq!(
        run.summary["error_types"],
        json!(["OAuthTokenError"]),
        "the SDK's own token error: {ctx}"
    );
    assert!(
        run.summary["error"]
            .as_str()
            .is_some_and(|e| e.contains("invalid_client")),
        "the error names the IdP's refusal: {ctx}"
    );
    assert!(
        elapsed < Duration::from_secs(30),
        "it failed at once, not after a timeout ({elapsed:?}): {ctx}"
    );
    assert_eq!(run.summary["tokens_stored"], 0, "{ctx}");

    // It found the IdP the same way, and the IdP refused it; it stopped there.
    let token_at = assert_discovery(&face, &run);
    let requests = run.requests();
    assert_eq!(requests[token_at]["status"], 401, "{ctx}");
    assert_eq!(
        token_at + 1,
        requests.len(),
        "nothing after the refused token request: {ctx}"
    );
    for request in &requests {
        assert_ne!(request["auth"], "bearer", "no token was ever sent: {ctx}");
        if request["url"] == json!(face.audience) {
            assert_eq!(request["status"], 401, "every /mcp request refused: {ctx}");
        }
    }
    assert!(
        face.idp.log().contains("invalid_client"),
        "the IdP saw the bad secret:\n{}",
        face.idp.log()
    );
    assert_eq!(
        face.ledger_lines(),
        Vec::<String>::new(),
        "nothing ran: {ctx}"
    );

    // The positive control on the same proxy and ledger: the right secret runs `count` once.
    let run = face
        .drive(
            "alice-app",
            "alice-secret",
            &["--count-id", "after-refusal"],
        )
        .await;
    let token_at = assert_discovery(&face, &run);
    assert_token_used(&face, &run, token_at);
    assert_called(&face, &run, "after-refusal", &["after-refusal"]);
}
