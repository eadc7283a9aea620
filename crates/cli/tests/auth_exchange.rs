//! End to end, with a real identity provider (`oidc-provider`, testkit::idp, its RFC 8693 grant)
//! and the real binary: a `url` server with `credentials.tokenExchange` behind `serve --http`
//! with `auth` (SPEC §14). The upstream (the fault server over HTTP) writes down the
//! `Authorization` of every request it gets (`--headers-ledger`), so the test reads exactly what
//! it saw: never a caller's own token, under any config (a server with credentials and one
//! without, side by side); on an identity's calls, a token exchanged for that identity (`sub`,
//! the upstream as `aud`, the proxy as the actor), the same one again while it lives; on the
//! connection the proxy holds in its own name (it lists the tools), the proxy's own token.
//! Every wait is bounded.

mod support;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use mcp_supervisor_testkit::idp::{Idp, IdpClient, claims};
use mcp_supervisor_testkit::poll_until;
use serde_json::{Value, json};
use support::*;

const ACCEPT: &str = "application/json, text/event-stream";
const LIMIT: Duration = Duration::from_secs(20);

/// The fault server over streamable HTTP, writing its headers ledger; killed on drop.
struct Upstream {
    _child: tokio::process::Child,
    url: String,
    headers: PathBuf,
    ledger: PathBuf,
}

impl Upstream {
    async fn start(dir: &Path) -> Self {
        let port = free_port();
        let headers = dir.join("headers.jsonl");
        let ledger = dir.join("ledger");
        let child = tokio::process::Command::new(fault_bin())
            .args(["--http", &format!("127.0.0.1:{port}")])
            .arg("--headers-ledger")
            .arg(&headers)
            .arg("--ledger")
            .arg(&ledger)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn the fault server over HTTP");
        poll_until("the fault server listens", LIMIT, || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        })
        .await;
        Self {
            _child: child,
            url: format!("http://127.0.0.1:{port}/mcp"),
            headers,
            ledger,
        }
    }

    /// Every request it got: its headers ledger, line by line.
    fn seen(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.headers)
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str(line).expect("a JSON line"))
            .collect()
    }

    fn counted(&self) -> Vec<String> {
        std::fs::read_to_string(&self.ledger)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }
}

/// The claims of a line's bearer token (`None`: it carried no `Authorization`).
fn bearer_claims(line: &Value) -> Option<Value> {
    let authorization = line["authorization"].as_str()?;
    let token = authorization
        .strip_prefix("Bearer ")
        .unwrap_or_else(|| panic!("not a bearer token upstream: {line}"));
    Some(claims(token).expect("the upstream's token is a JWT").1)
}

async fn post(
    http: &reqwest::Client,
    url: &str,
    token: &str,
    session: &str,
    body: Value,
) -> (u16, String) {
    let response = http
        .post(url)
        .header("content-type", "application/json")
        .header("accept", ACCEPT)
        .header("mcp-protocol-version", "2025-06-18")
        .header("mcp-session-id", session)
        .bearer_auth(token)
        .timeout(LIMIT)
        .json(&body)
        .send()
        .await
        .expect("POST /mcp");
    let status = response.status().as_u16();
    (status, response.text().await.unwrap_or_default())
}

/// An initialized session of `token`'s identity.
async fn session(http: &reqwest::Client, url: &str, token: &str) -> String {
    let (response, id) = post_initialize(http, url, Some(token), json!({}), "exchange-test").await;
    drop(response);
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let (status, _) = post(http, url, token, &id, initialized).await;
    assert_eq!(status, 202, "initialized is accepted");
    id
}

/// `tools/call` of `tool` with `arguments` on `session`: its result.
async fn call(
    http: &reqwest::Client,
    url: &str,
    token: &str,
    session: &str,
    tool: &str,
    arguments: Value,
) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                      "params": {"name": tool, "arguments": arguments}});
    let (status, text) = post(http, url, token, session, body).await;
    assert_eq!(status, 200, "{tool}: {text}");
    let answer = answer_of(&text);
    assert!(
        answer["result"]["isError"] != json!(true) && answer["error"].is_null(),
        "{tool} answered: {answer}"
    );
    answer["result"].clone()
}

/// The claims of the token on the newest `tools/call` the upstream got since `from` lines.
fn last_call_claims(upstream: &Upstream, from: usize) -> Value {
    let seen = upstream.seen();
    let line = seen[from.min(seen.len())..]
        .iter()
        .rev()
        .find(|l| l["rpc"] == "tools/call")
        .unwrap_or_else(|| panic!("no tools/call reached the upstream after line {from}"))
        .clone();
    bearer_claims(&line).unwrap_or_else(|| panic!("a tools/call without a token: {line}"))
}

/// The IdP (clients: the proxy, alice, bob), the upstream, and `serve --http` with `auth` and
/// the proxy's client, over `x` (credentials) and `plain` (none), both the one upstream.
struct Setup {
    idp: Idp,
    upstream: Upstream,
    audience: String,
    http: reqwest::Client,
    _proxy: Running,
}

impl Setup {
    /// `x_extra`: more keys of server `x`.
    async fn start(tag: &str, x_extra: Value) -> Self {
        let dir = temp_dir(tag);
        let idp = Idp::start(
            &dir,
            &[
                IdpClient::new("proxy", "proxy-secret"),
                IdpClient::new("alice-app", "alice-secret").with_sub("alice"),
                IdpClient::new("bob-app", "bob-secret").with_sub("bob"),
            ],
        )
        .await
        .expect("the identity provider starts");
        let upstream = Upstream::start(&dir).await;
        let port = free_port();
        let audience = format!("http://127.0.0.1:{port}/mcp");
        // Two names for the one upstream: with credentials, and without (its requests carry
        // nothing of the caller's either).
        let mut x = json!({ "url": upstream.url,
                            "credentials": { "tokenExchange": { "audience": upstream.url } } });
        if let (Some(x), Value::Object(extra)) = (x.as_object_mut(), x_extra) {
            x.extend(extra);
        }
        let config = json!({
            "mcpServers": { "x": x, "plain": { "url": upstream.url } },
            "auth": {
                "issuer": idp.issuer(),
                "audience": audience,
                "scopes": ["mcp:tools"],
                "clientId": "proxy",
                "clientSecret": "proxy-secret",
            },
        });
        let path = dir.join("servers.json");
        std::fs::write(&path, config.to_string()).expect("write config");
        let proxy = serve_http_on(&path, port).await;
        // The proxy's own connection to x lists its tools with the proxy's own token.
        poll_until("the proxy lists x's tools", LIMIT, || {
            upstream.seen().iter().any(|l| {
                l["rpc"] == "tools/list" && bearer_claims(l).is_some_and(|c| c["sub"] == "proxy")
            })
        })
        .await;
        Self {
            idp,
            upstream,
            audience,
            http: reqwest::Client::new(),
            _proxy: proxy,
        }
    }

    async fn token(&self, who: &str) -> String {
        self.idp
            .token(
                &format!("{who}-app"),
                &format!("{who}-secret"),
                &self.audience,
                "mcp:tools",
            )
            .await
            .expect("a token from the identity provider")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_upstream_sees_only_tokens_exchanged_for_each_caller_and_never_a_callers_own() {
    let setup = Setup::start("auth-exchange", json!({})).await;
    let (idp, upstream, http) = (&setup.idp, &setup.upstream, &setup.http);
    let audience = setup.audience.clone();
    let (alice, bob) = (setup.token("alice").await, setup.token("bob").await);

    let alice_session = session(http, &audience, &alice).await;
    let before = upstream.seen().len();
    let result = call(
        http,
        &audience,
        &alice,
        &alice_session,
        "x__count",
        json!({"id": "alice-1"}),
    )
    .await;
    assert_eq!(result["content"][0]["text"], "alice-1");
    let first = last_call_claims(upstream, before);
    assert_eq!(first["sub"], "alice", "exchanged for alice: {first}");
    assert_eq!(
        first["aud"],
        json!(upstream.url),
        "for the upstream: {first}"
    );
    assert_eq!(first["iss"], json!(idp.issuer()));
    assert_eq!(
        first["act"]["sub"], "proxy",
        "the proxy acts for her: {first}"
    );

    // Again: the same exchanged token while it lives (cached), not a new exchange.
    let before = upstream.seen().len();
    call(
        http,
        &audience,
        &alice,
        &alice_session,
        "x__count",
        json!({"id": "alice-2"}),
    )
    .await;
    assert_eq!(last_call_claims(upstream, before)["jti"], first["jti"]);

    // Bob's call goes with a token of his own, on a connection of his own.
    let bob_session = session(http, &audience, &bob).await;
    let before = upstream.seen().len();
    call(
        http,
        &audience,
        &bob,
        &bob_session,
        "x__count",
        json!({"id": "bob-1"}),
    )
    .await;
    let bobs = last_call_claims(upstream, before);
    assert_eq!(bobs["sub"], "bob", "exchanged for bob: {bobs}");
    assert_ne!(bobs["jti"], first["jti"]);

    // The server without credentials: nothing of the caller's.
    let before = upstream.seen().len();
    call(
        http,
        &audience,
        &alice,
        &alice_session,
        "plain__count",
        json!({"id": "alice-plain"}),
    )
    .await;
    let plain = upstream.seen()[before..]
        .iter()
        .rfind(|l| l["rpc"] == "tools/call")
        .cloned()
        .expect("the plain call reached the upstream");
    assert!(plain["authorization"].is_null(), "{plain}");

    assert_eq!(
        upstream.counted(),
        ["alice-1", "alice-2", "bob-1", "alice-plain"],
        "each call ran once"
    );
    // Over everything the upstream got: never a caller's own token; each token it got is the
    // issuer's, for the upstream, for alice, bob or the proxy itself.
    let seen = upstream.seen();
    assert!(seen.len() > 6, "{seen:?}");
    for line in &seen {
        let authorization = line["authorization"].as_str().unwrap_or_default();
        assert!(
            !authorization.contains(&alice) && !authorization.contains(&bob),
            "a caller's own token went upstream: {line}"
        );
        if let Some(claims) = bearer_claims(line) {
            assert_eq!(claims["aud"], json!(upstream.url), "{claims}");
            assert_eq!(claims["iss"], json!(idp.issuer()), "{claims}");
            assert!(
                ["alice", "bob", "proxy"].contains(&claims["sub"].as_str().unwrap_or_default()),
                "{claims}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_exchanged_token_nothing_goes_upstream_and_the_caller_is_told_why() {
    // A call waits for the server within its deadline (SPEC §5): a short one.
    let mut setup = Setup::start("auth-exchange-down", json!({"toolCallTimeoutMs": 3000})).await;
    let alice = setup.token("alice").await;
    // The issuer goes away: alice's token still verifies (its key is cached), but no token
    // can be exchanged for her.
    setup.idp.stop().await;
    let (upstream, http, audience) = (&setup.upstream, &setup.http, setup.audience.as_str());
    let calls_before = |seen: &[Value]| seen.iter().filter(|l| l["rpc"] == "tools/call").count();
    let before = calls_before(&upstream.seen());
    let session = session(http, audience, &alice).await;
    let body = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                      "params": {"name": "x__count", "arguments": {"id": "never"}}});
    let (status, text) = post(http, audience, &alice, &session, body).await;
    assert_eq!(status, 200, "{text}");
    let answer = answer_of(&text);
    let said = if answer["error"].is_null() {
        assert_eq!(answer["result"]["isError"], true, "{answer}");
        answer["result"]["content"][0]["text"].to_string()
    } else {
        answer["error"].to_string()
    };
    assert!(
        said.contains("token endpoint") && said.contains("did not answer a token exchange"),
        "the error says the exchange failed: {said}"
    );
    assert_eq!(
        calls_before(&upstream.seen()),
        before,
        "no call went upstream"
    );
    assert!(upstream.counted().is_empty(), "nothing ran");
    for line in upstream.seen() {
        assert!(
            !line["authorization"]
                .as_str()
                .unwrap_or_default()
                .contains(&alice),
            "{line}"
        );
    }
}
