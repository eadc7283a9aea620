//! OAuth to a protected server, end to end, against a real authorization server and protected
//! MCP server built from the official Python SDK's auth support (`oauth_fixture/server.py`):
//! `mcp-supervisor login` (PKCE on the loopback redirect, through a browser stand-in), then a
//! supervisor in this process using the token file: a 401 mid-session, a token past its expiry,
//! 50 concurrent calls through one refresh (the refresh-storm figure), a revoked refresh token
//! (then `needs_auth`, then login again and it resumes by itself), and the bad-input cases
//! (metadata that is not what it says, a token endpoint that answers HTML, a redirect with a
//! wrong `state`).
//!
//! One test function: the supervisor finds the token file through MCP_SUPERVISOR_TOKEN_FILE,
//! which this binary sets once, before anything else runs.

mod interop_support;
mod support;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use interop_support::{Proc, python};
use mcp_supervisor::core::config::parse_config;
use mcp_supervisor::{CallArgs, CallError, Hub, ServerState};
use serde_json::{Value, json};
use support::{free_port, supervisor_bin, temp_dir};
use tokio::io::{AsyncBufReadExt, BufReader};

const STORM: usize = 50;

fn fixture_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/oauth_fixture/server.py")
}

struct Fixture {
    base: String,
    http: reqwest::Client,
}

impl Fixture {
    async fn control(&self, path: &str) {
        let response = self
            .http
            .post(format!("{}/control/{path}", self.base))
            .send()
            .await
            .expect("the fixture's control route answers");
        assert!(response.status().is_success(), "control {path}");
    }

    /// Token requests the authorization server saw, per grant.
    async fn stats(&self) -> (u64, u64) {
        let stats: Value = self
            .http
            .get(format!("{}/control/stats", self.base))
            .send()
            .await
            .expect("stats")
            .json()
            .await
            .expect("stats JSON");
        (
            stats["authorization_code"].as_u64().unwrap_or(u64::MAX),
            stats["refresh_token"].as_u64().unwrap_or(u64::MAX),
        )
    }
}

/// How the browser stand-in behaves.
#[derive(Clone, Copy, PartialEq)]
enum Browser {
    /// Follow the authorization server's redirect to the loopback address.
    Follow,
    /// Follow it with another `state` (a forged or stale redirect).
    WrongState,
}

/// `mcp-supervisor login s --no-browser`, its URL followed by the stand-in. Returns whether it
/// succeeded and its stderr.
async fn login(config: &Path, browser: Browser) -> (bool, String) {
    let mut child = tokio::process::Command::new(supervisor_bin())
        .args(["login", "s", "--config"])
        .arg(config)
        .args(["--no-browser", "--wait-ms", "15000"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("login starts");
    let stdout = child.stdout.take().expect("piped stdout");
    let mut lines = BufReader::new(stdout).lines();
    let first = tokio::time::timeout(Duration::from_secs(20), lines.next_line()).await;
    if let Ok(Ok(Some(url))) = first
        && url.starts_with("http")
    {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("client");
        let answer = http.get(&url).send().await.expect("the authorize endpoint");
        let location = answer
            .headers()
            .get("location")
            .and_then(|v| v.to_str().ok())
            .expect("the authorization server redirects")
            .to_string();
        let location = match browser {
            Browser::Follow => location,
            Browser::WrongState => {
                let mut url = reqwest::Url::parse(&location).expect("a URL");
                let pairs: Vec<(String, String)> = url
                    .query_pairs()
                    .map(|(k, v)| {
                        let v = if k == "state" {
                            "forged".into()
                        } else {
                            v.into_owned()
                        };
                        (k.into_owned(), v)
                    })
                    .collect();
                url.query_pairs_mut().clear().extend_pairs(pairs);
                url.to_string()
            }
        };
        http.get(&location)
            .send()
            .await
            .expect("the loopback redirect answers");
    }
    let out = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .expect("login finishes")
        .expect("login output");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

async fn echo(hub: &Hub, message: &str) -> Result<String, CallError> {
    let mut arguments = serde_json::Map::new();
    arguments.insert("message".into(), json!(message));
    let result = hub
        .call(
            "s__echo",
            CallArgs {
                arguments: Some(arguments),
                ..CallArgs::default()
            },
        )
        .await?;
    Ok(
        serde_json::to_value(&result).expect("a result")["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    )
}

/// Moves the stored token's expiry into the past (as time passing would).
fn expire_in_file(tokens: &Path) {
    let mut file: Value =
        serde_json::from_str(&std::fs::read_to_string(tokens).expect("token file")).expect("JSON");
    file["servers"]["s"]["expires_at"] = json!(1);
    std::fs::write(tokens, file.to_string()).expect("token file written");
}

fn state_of(hub: &Hub) -> Option<ServerState> {
    hub.status()
        .into_iter()
        .find(|s| s.name == "s")
        .map(|s| s.state)
}

#[test]
fn login_refresh_storm_needs_auth_and_bad_input_against_the_python_sdk_server() {
    let dir = temp_dir("oauth");
    let tokens = dir.join("state/tokens.json");
    // SAFETY: this binary's only test sets it first, before its runtime or any other thread of
    // ours exists, and nothing reads the environment concurrently.
    unsafe { std::env::set_var("MCP_SUPERVISOR_TOKEN_FILE", &tokens) };
    let port = free_port();
    let mut cmd = std::process::Command::new(python());
    cmd.arg(fixture_script())
        .args(["--port", &port.to_string()]);
    let mut fixture = Proc::spawn("oauth fixture", cmd, &dir);
    fixture.wait_listening(port, Duration::from_secs(30));
    let base = format!("http://127.0.0.1:{port}");
    let config = dir.join("servers.json");
    std::fs::write(
        &config,
        json!({ "mcpServers": { "s": { "url": format!("{base}/mcp"), "oauth": {} } } }).to_string(),
    )
    .expect("config");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(scenario(
        &config,
        &tokens,
        Fixture {
            base,
            http: reqwest::Client::new(),
        },
    ));
    fixture.stop();
    let _ = std::fs::remove_dir_all(dir);
}

async fn scenario(config: &Path, tokens: &Path, fx: Fixture) {
    // Login: PKCE through the loopback redirect; the token file is private.
    let (ok, stderr) = login(config, Browser::Follow).await;
    assert!(ok, "login failed: {stderr}");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(tokens)
        .expect("token file")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "the token file is private");
    let stored: Value =
        serde_json::from_str(&std::fs::read_to_string(tokens).expect("read")).expect("JSON");
    let first_token = stored["servers"]["s"]["access_token"]
        .as_str()
        .expect("an access token")
        .to_string();
    assert!(!stderr.contains(&first_token), "login printed the token");
    assert_eq!(fx.stats().await, (1, 0));

    let text = std::fs::read_to_string(config).expect("config");
    let parsed = parse_config(&text, &|_| None).expect("valid config");
    let hub = Hub::start(parsed);
    assert!(
        hub.wait_ready(Duration::from_secs(20)).await.is_empty(),
        "ready with the token"
    );
    assert_eq!(echo(&hub, "hi").await.expect("a call with the token"), "hi");

    // A 401 mid-session: one refresh, the call goes through.
    fx.control("expire-access").await;
    assert_eq!(
        echo(&hub, "after 401").await.expect("refreshed on 401"),
        "after 401"
    );
    assert_eq!(fx.stats().await, (1, 1), "exactly one refresh for the 401");

    // A token past its expiry is refreshed before it is used (the server would still take
    // the old one, so only a refresh ahead of time can make this count move).
    expire_in_file(tokens);
    assert_eq!(
        echo(&hub, "expired").await.expect("refreshed ahead"),
        "expired"
    );
    assert_eq!(fx.stats().await, (1, 2), "one refresh ahead of expiry");

    // The refresh storm: 50 concurrent calls on an expired token, one token request.
    expire_in_file(tokens);
    let started = std::time::Instant::now();
    let calls = (0..STORM).map(|i| {
        let hub = &hub;
        async move { echo(hub, &format!("storm {i}")).await }
    });
    let results = futures::future::join_all(calls).await;
    let elapsed = started.elapsed();
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let (_, refreshes) = fx.stats().await;
    assert_eq!(
        refreshes, 3,
        "50 concurrent calls on an expired token: one refresh"
    );
    eprintln!(
        "refresh storm: {STORM} concurrent calls on an expired token -> {} token request(s), all \
         {STORM} calls ok in {} ms",
        refreshes - 2,
        elapsed.as_millis()
    );
    // And the same through 401s (the server dropped the token): still one.
    fx.control("expire-access").await;
    let calls = (0..STORM).map(|i| {
        let hub = &hub;
        async move { echo(hub, &format!("storm401 {i}")).await }
    });
    let results = futures::future::join_all(calls).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert_eq!(fx.stats().await.1, 4, "50 concurrent 401s: one refresh");

    // A revoked refresh token: needs_auth, tools stay listed, calls fail at once with what to
    // do, no retry loop.
    fx.control("revoke-refresh").await;
    fx.control("expire-access").await;
    let refused = echo(&hub, "revoked").await.expect_err("no token to be had");
    let message = refused.to_string();
    assert!(message.contains("mcp-supervisor login s"), "{message}");
    let mut watch_state = None;
    for _ in 0..200 {
        watch_state = state_of(&hub);
        if watch_state == Some(ServerState::NeedsAuth) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(watch_state, Some(ServerState::NeedsAuth));
    assert!(
        hub.tools().iter().any(|t| t.public_name == "s__echo"),
        "tools stay listed in needs_auth"
    );
    let at_once = std::time::Instant::now();
    let again = echo(&hub, "still revoked")
        .await
        .expect_err("needs a login");
    assert!(at_once.elapsed() < Duration::from_secs(1), "fails at once");
    assert!(
        again.to_string().contains("mcp-supervisor login s"),
        "{again}"
    );
    let status = hub.status().into_iter().find(|s| s.name == "s").expect("s");
    let shown = format!("{:?}", status.last_error);
    assert!(
        !shown.contains("at-") && !shown.contains("rt-"),
        "no token in status: {shown}"
    );
    let refreshes_while_parked = fx.stats().await.1;

    // Login again: the supervisor notices the new token by itself and serves again.
    let (ok, stderr) = login(config, Browser::Follow).await;
    assert!(ok, "second login failed: {stderr}");
    assert!(
        hub.wait_ready(Duration::from_secs(20)).await.is_empty(),
        "resumed after the login"
    );
    assert_eq!(echo(&hub, "back").await.expect("works again"), "back");
    assert_eq!(
        fx.stats().await.1,
        refreshes_while_parked,
        "no refresh was tried while waiting for the login"
    );
    hub.stop().await;

    // Bad input, each with what to do.
    let (ok, stderr) = login(config, Browser::WrongState).await;
    assert!(
        !ok && stderr.contains("state does not match") && stderr.contains("login"),
        "{stderr}"
    );
    fx.control("mode?bad=html-token").await;
    let (ok, stderr) = login(config, Browser::Follow).await;
    assert!(
        !ok && stderr.contains("HTML") && stderr.contains("token_endpoint"),
        "{stderr}"
    );
    fx.control("mode?bad=malformed-metadata").await;
    let (ok, stderr) = login(config, Browser::Follow).await;
    assert!(
        !ok && stderr.contains("malformed") && stderr.contains("operator"),
        "{stderr}"
    );
    fx.control("mode?bad=none").await;
}
