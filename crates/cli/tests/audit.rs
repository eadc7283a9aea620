//! End to end, the audit log (SPEC §14) with the real binary, a real identity provider
//! (`oidc-provider`, testkit::idp) and the fault server: one line per client request that
//! reaches a server or is refused, each with exactly the documented keys; a call that succeeds,
//! a tool's own error, a call an `authorize` rule denies, a call replayed across a crash (two
//! sends on two generations); no argument value and no token in the file; SIGHUP after a
//! rename makes a new file at the path (log rotation). The HTTP face's own refusals (401 with no
//! or a bad token, 403 for a missing scope or another identity's session, 429 past the top rate
//! limit) are lines too, with no token in them. A reload that changes `audit.path` moves the
//! lines to the new file, and one without `audit` ends them. Also `wrap --audit` over stdio,
//! written out at the exit, and a path that cannot be opened refused at start. Every wait is
//! bounded.

mod support;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use mcp_supervisor_testkit::idp::{Idp, IdpClient};
use serde_json::{Value, json};
use support::*;

const ACCEPT: &str = "application/json, text/event-stream";
const LIMIT: Duration = Duration::from_secs(20);

/// Every argument value the tests send carries this: none may reach the audit.
const SECRET: &str = "ARGUMENT-VALUE";

/// The keys of a line about a tool call, and of its `recovery`.
fn documented() -> (BTreeSet<String>, BTreeSet<String>) {
    let keys = |names: &[&str]| names.iter().map(|n| n.to_string()).collect();
    (
        keys(&[
            "time",
            "sub",
            "client_id",
            "session",
            "server",
            "method",
            "tool",
            "outcome",
            "recovery",
            "duration_ms",
        ]),
        keys(&["attempts", "replayed", "generations"]),
    )
}

fn keys(value: &Value) -> BTreeSet<String> {
    value
        .as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default()
}

/// The audit file's lines, as JSON.
fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect()
}

/// Wait (bounded) until `path` holds `count` lines; they are written a few ms after the answer.
async fn until_lines(path: &Path, count: usize) -> Vec<Value> {
    for _ in 0..400 {
        let written = lines(path);
        if written.len() >= count {
            return written;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!(
        "{} did not get {count} lines: {:?}",
        path.display(),
        lines(path)
    );
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

/// POST a request on `session` with `token`; its answer.
async fn call(
    http: &reqwest::Client,
    url: &str,
    token: &str,
    session: &str,
    tool: &str,
    arguments: Value,
) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                      "params": {"name": tool, "arguments": arguments}});
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
    assert_eq!(response.status().as_u16(), 200, "{tool}");
    answer_of(&response.text().await.unwrap_or_default())
}

#[tokio::test]
async fn each_request_that_reaches_a_server_or_is_refused_is_one_line_and_sighup_rotates_the_file()
{
    let dir = temp_dir("audit-serve");
    let idp = Idp::start(
        &dir,
        &[IdpClient::new("alice-app", "alice-secret").with_sub("alice")],
    )
    .await
    .expect("the identity provider starts");
    let port = free_port();
    let audience = format!("http://127.0.0.1:{port}/mcp");
    let audit = dir.join("audit.jsonl");
    let config = json!({
        "mcpServers": { "f": {
            "command": fault_bin(),
            "args": ["--ledger", dir.join("ledger")],
            // Everything but `add`.
            "authorize": "mcp.tool.name != 'add'",
        } },
        "auth": { "issuer": idp.issuer(), "audience": audience, "scopes": ["mcp:tools"] },
        "audit": { "path": audit },
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
    let http = reqwest::Client::new();
    let token = idp
        .token("alice-app", "alice-secret", &audience, "mcp:tools")
        .await
        .expect("a token");
    let (response, session) =
        post_initialize(&http, &audience, Some(&token), json!({}), "audit-test").await;
    drop(response);

    // A call that succeeds (the first waits for the server's first start).
    let answer = call(
        &http,
        &audience,
        &token,
        &session,
        "f__echo",
        json!({"message": SECRET}),
    )
    .await;
    assert_eq!(answer["result"]["content"][0]["text"], SECRET, "{answer}");
    // A tool's own error (`isError`): an id with a line break.
    let answer = call(
        &http,
        &audience,
        &token,
        &session,
        "f__count",
        json!({"id": format!("{SECRET}\nsecond line")}),
    )
    .await;
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    // Denied by the rule: nothing runs.
    let answer = call(
        &http,
        &audience,
        &token,
        &session,
        "f__add",
        json!({"a": 1, "b": 2}),
    )
    .await;
    assert_eq!(answer["error"]["code"], -32003, "{answer}");
    // The server crashes before it answers; the tool is idempotent, so the call is sent again
    // on the next generation and succeeds.
    let id = format!("{SECRET}-replayed");
    let answer = call(
        &http,
        &audience,
        &token,
        &session,
        "f__count_idempotent",
        json!({"id": id, "crash_before_reply": true}),
    )
    .await;
    assert_eq!(answer["result"]["content"][0]["text"], id, "{answer}");

    let written = until_lines(&audit, 4).await;
    assert_eq!(written.len(), 4, "one line per call: {written:?}");
    let (line_keys, recovery_keys) = documented();
    for line in &written {
        assert_eq!(keys(line), line_keys, "{line}");
        assert_eq!(keys(&line["recovery"]), recovery_keys, "{line}");
        assert_eq!(line["sub"], "alice", "{line}");
        assert_eq!(line["client_id"], "alice-app", "{line}");
        assert_eq!(line["server"], "f", "{line}");
        assert_eq!(line["method"], "tools/call", "{line}");
        // The session as a digest of its id: the same for all of them, never the id.
        let tag = line["session"].as_str().unwrap_or_default();
        assert_eq!(tag.len(), 24, "{line}");
        assert!(tag.chars().all(|c| c.is_ascii_hexdigit()), "{line}");
        assert_eq!(line["session"], written[0]["session"]);
        assert!(line["duration_ms"].is_u64(), "{line}");
        assert!(
            line["time"].as_str().is_some_and(|t| t.ends_with('Z')),
            "{line}"
        );
    }
    let summary: Vec<(&str, &str)> = written
        .iter()
        .map(|l| {
            (
                l["tool"].as_str().unwrap_or_default(),
                l["outcome"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("echo", "ok"),
            ("count", "error"),
            ("add", "denied"),
            ("count_idempotent", "ok"),
        ]
    );
    assert_eq!(
        written[0]["recovery"],
        json!({"attempts": 1, "replayed": false, "generations": [1]})
    );
    assert_eq!(
        written[2]["recovery"],
        json!({"attempts": 0, "replayed": false, "generations": []}),
        "denied: nothing sent"
    );
    assert_eq!(
        written[3]["recovery"],
        json!({"attempts": 2, "replayed": true, "generations": [1, 2]}),
        "replayed across the crash"
    );
    let text = std::fs::read_to_string(&audit).expect("the audit file");
    assert!(!text.contains(SECRET), "no argument value: {text}");
    assert!(!text.contains(&token), "no token");
    assert!(!text.contains(&session), "no session id");

    // Rotation: the file is renamed, SIGHUP, and the next line goes to a new file at the path.
    let rotated = dir.join("audit.jsonl.1");
    std::fs::rename(&audit, &rotated).expect("rename the audit file");
    proxy.signal("HUP");
    let reopened = async {
        // The reopen is taken before the next write after the signal: call until a line lands
        // at the path (a call that raced the signal's handling goes to the old file).
        loop {
            call(
                &http,
                &audience,
                &token,
                &session,
                "f__echo",
                json!({"message": SECRET}),
            )
            .await;
            tokio::time::sleep(Duration::from_millis(100)).await;
            if !lines(&audit).is_empty() {
                return;
            }
        }
    };
    assert!(
        tokio::time::timeout(LIMIT, reopened).await.is_ok(),
        "no new file at {} after SIGHUP",
        audit.display()
    );
    let old = lines(&rotated);
    assert!(old.len() >= 4, "the old file keeps its lines: {old:?}");
    assert_eq!(old[..4], written[..], "as they were");
    let new = lines(&audit);
    assert_eq!(new[0]["tool"], "echo", "{new:?}");
    assert_eq!(new[0]["outcome"], "ok", "{new:?}");
    let mode = {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(&audit)
            .map(|m| m.permissions().mode() & 0o777)
            .unwrap_or(0)
    };
    assert_eq!(mode, 0o600, "the new file is its owner's only");
    drop(proxy);
    drop(idp);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `serve --http` on `port` of the config `text`, written to `dir`/servers.json.
async fn serve(dir: &Path, text: &str, port: u16) -> Running {
    let path = dir.join("servers.json");
    std::fs::write(&path, text).expect("write config");
    let addr = format!("127.0.0.1:{port}");
    let args = [
        "serve",
        "--config",
        path.to_str().unwrap_or_default(),
        "--http",
        &addr,
    ];
    Running::start(&args, port, &[]).await
}

/// POST `body` to `url` with `token` (if any) on `session` (if any); its status.
async fn post_status(
    http: &reqwest::Client,
    url: &str,
    token: Option<&str>,
    session: Option<&str>,
    body: &Value,
) -> u16 {
    let mut request = http
        .post(url)
        .header("content-type", "application/json")
        .header("accept", ACCEPT)
        .header("mcp-protocol-version", "2025-06-18")
        .timeout(LIMIT)
        .json(body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(session) = session {
        request = request.header("mcp-session-id", session);
    }
    request
        .send()
        .await
        .map(|r| r.status().as_u16())
        .unwrap_or(0)
}

#[tokio::test]
async fn each_refusal_of_the_http_face_is_one_line_and_none_holds_a_token() {
    let dir = temp_dir("audit-edge");
    let idp = Idp::start(
        &dir,
        &[
            IdpClient::new("alice-app", "alice-secret").with_sub("alice"),
            IdpClient::new("bob-app", "bob-secret").with_sub("bob"),
        ],
    )
    .await
    .expect("the identity provider starts");
    let port = free_port();
    let audience = format!("http://127.0.0.1:{port}/mcp");
    let audit = dir.join("audit.jsonl");
    let config = json!({
        "mcpServers": { "f": { "command": fault_bin() } },
        "auth": { "issuer": idp.issuer(), "audience": audience, "scopes": ["mcp:tools"] },
        // initialize and one ping spend alice's budget.
        "rateLimit": { "requestsPerSecond": 0.001, "burst": 2 },
        "audit": { "path": audit },
    });
    let proxy = serve(&dir, &config.to_string(), port).await;
    let http = reqwest::Client::new();
    let token = |who: &'static str, scope: &'static str| {
        let (idp, audience) = (&idp, audience.clone());
        async move {
            let (client, secret) = (format!("{who}-app"), format!("{who}-secret"));
            idp.token(&client, &secret, &audience, scope)
                .await
                .expect("a token")
        }
    };
    let (alice, bob) = (
        token("alice", "mcp:tools").await,
        token("bob", "mcp:tools").await,
    );
    let unscoped = token("alice", "admin").await;
    let (response, session) =
        post_initialize(&http, &audience, Some(&alice), json!({}), "audit-edge").await;
    drop(response);
    let echo = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                      "params": {"name": "f__echo", "arguments": {"message": SECRET}}});
    let ping = json!({"jsonrpc": "2.0", "id": 4, "method": "ping"});
    let url = audience.as_str();
    let refusals = [
        (None, None, 401),
        (Some("opaque-token-text"), Some(session.as_str()), 401),
        (Some(unscoped.as_str()), Some(session.as_str()), 403),
        (Some(bob.as_str()), Some(session.as_str()), 403),
    ];
    for (token, on, status) in refusals {
        assert_eq!(post_status(&http, url, token, on, &echo).await, status);
    }
    let sent = post_status(&http, url, Some(&alice), Some(&session), &ping).await;
    assert_eq!(sent, 200, "alice's second request");
    let limited = post_status(&http, url, Some(&alice), Some(&session), &echo).await;
    assert_eq!(limited, 429, "past alice's budget");

    let written = until_lines(&audit, 5).await;
    let summary: Vec<(&str, &str, &str, &str, bool)> = written
        .iter()
        .map(|l| {
            (
                l["outcome"].as_str().unwrap_or_default(),
                l["sub"].as_str().unwrap_or("-"),
                l["method"].as_str().unwrap_or("-"),
                l["tool"].as_str().unwrap_or("-"),
                l["session"].is_string(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("unauthenticated", "-", "-", "-", false),
            ("unauthenticated", "-", "-", "-", true),
            // A valid token short of scope: refused before who it is is read out.
            ("forbidden", "-", "-", "-", true),
            // Another identity's session: who it is, and what it asked.
            ("forbidden", "bob", "tools/call", "f__echo", true),
            ("rate_limited", "alice", "tools/call", "f__echo", true),
        ],
        "{written:?}"
    );
    for line in &written {
        assert_eq!(
            line["recovery"],
            json!({"attempts": 0, "replayed": false, "generations": []}),
            "nothing ran: {line}"
        );
    }
    assert_eq!(
        written[1]["session"], written[4]["session"],
        "the same session"
    );
    let text = std::fs::read_to_string(&audit).expect("the audit file");
    for secret in [
        SECRET,
        &alice,
        &bob,
        &unscoped,
        "opaque-token-text",
        &session,
    ] {
        assert!(!text.contains(secret), "{text}");
    }
    drop(proxy);
    drop(idp);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The answer to `body` POSTed on `session` of a face without auth.
async fn answer_on(http: &reqwest::Client, url: &str, session: &str, body: &Value) -> Value {
    let response = http
        .post(url)
        .header("content-type", "application/json")
        .header("accept", ACCEPT)
        .header("mcp-protocol-version", "2025-06-18")
        .header("mcp-session-id", session)
        .timeout(LIMIT)
        .json(body)
        .send()
        .await
        .expect("POST /mcp");
    answer_of(&response.text().await.unwrap_or_default())
}

#[tokio::test]
async fn a_reload_that_moves_the_audit_writes_to_the_new_file_and_one_without_it_ends_it() {
    let dir = temp_dir("audit-reload");
    let (first, second) = (dir.join("first.jsonl"), dir.join("second.jsonl"));
    let config = |audit: Option<&Path>, servers: &[&str]| {
        let servers: serde_json::Map<String, Value> = servers
            .iter()
            .map(|name| (name.to_string(), json!({ "command": fault_bin() })))
            .collect();
        let mut config = json!({ "mcpServers": servers });
        if let Some(audit) = audit {
            config["audit"] = json!({ "path": audit });
        }
        config.to_string()
    };
    let path = dir.join("servers.json");
    let proxy = serve(&dir, &config(Some(&first), &["f"]), free_port()).await;
    let http = reqwest::Client::new();
    let url = proxy.url("/mcp");
    let (response, session) = post_initialize(&http, &url, None, json!({}), "reload").await;
    drop(response);
    let echo = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                      "params": {"name": "f__echo", "arguments": {"message": "hi"}}});
    let answer = answer_on(&http, &url, &session, &echo).await;
    assert_eq!(answer["result"]["content"][0]["text"], "hi", "{answer}");
    assert_eq!(until_lines(&first, 1).await.len(), 1);

    // A new path: the lines of requests after the reload go there.
    std::fs::write(&path, config(Some(&second), &["f"])).expect("write config");
    proxy.signal("HUP");
    let moved = async {
        while lines(&second).is_empty() {
            answer_on(&http, &url, &session, &echo).await;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    assert!(
        tokio::time::timeout(LIMIT, moved).await.is_ok(),
        "no line in {} after the reload",
        second.display()
    );
    let in_first = lines(&first).len();
    answer_on(&http, &url, &session, &echo).await;
    let in_second = until_lines(&second, 2).await.len();
    assert_eq!(lines(&first).len(), in_first, "the old file gets no more");

    // No audit (and a second server, to see that the reload was applied): no more lines.
    std::fs::write(&path, config(None, &["f", "g"])).expect("write config");
    proxy.signal("HUP");
    let list = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"});
    let applied = async {
        loop {
            let tools = answer_on(&http, &url, &session, &list).await.to_string();
            if tools.contains("g__echo") {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    assert!(
        tokio::time::timeout(LIMIT, applied).await.is_ok(),
        "the reload was not applied"
    );
    let answer = answer_on(&http, &url, &session, &echo).await;
    assert_eq!(answer["result"]["content"][0]["text"], "hi", "{answer}");
    drop(proxy);
    assert_eq!(lines(&second).len(), in_second, "the audit ended");
    assert_eq!(lines(&first).len(), in_first);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn wrap_audits_over_stdio_and_writes_its_lines_out_at_the_exit() {
    let dir = temp_dir("audit-wrap");
    let audit = dir.join("audit.jsonl");
    let fault = fault_bin();
    let mut client = StdioClient::start(&[
        "wrap",
        "--name",
        "fault",
        "--audit",
        audit.to_str().unwrap_or_default(),
        "--",
        fault.to_str().unwrap_or_default(),
    ])
    .await;
    let answer = client
        .request(
            "tools/call",
            json!({"name": "echo", "arguments": {"message": SECRET}}),
        )
        .await;
    assert_eq!(answer["result"]["content"][0]["text"], SECRET, "{answer}");
    // A request the server answers itself, which is not a tool call.
    let answer = client.request("prompts/list", json!({})).await;
    assert!(answer.get("result").is_some(), "{answer}");
    client.close().await;
    let written = lines(&audit);
    let summary: Vec<(&str, &str, &str)> = written
        .iter()
        .map(|l| {
            (
                l["method"].as_str().unwrap_or_default(),
                l["tool"].as_str().unwrap_or("-"),
                l["outcome"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert!(
        summary.contains(&("tools/call", "echo", "ok")),
        "{written:?}"
    );
    for line in &written {
        assert_eq!(line["server"], "fault", "{line}");
        assert_eq!(line["sub"], Value::Null, "no identity over stdio: {line}");
        assert_eq!(line["session"], Value::Null, "{line}");
    }
    assert!(
        !std::fs::read_to_string(&audit)
            .unwrap_or_default()
            .contains(SECRET)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn an_audit_path_that_cannot_be_opened_starts_nothing_and_names_it() {
    let dir = temp_dir("audit-unopenable");
    let missing = dir.join("no-such-folder").join("audit.jsonl");
    let output = Command::new(supervisor_bin())
        .args([
            "wrap",
            "--audit",
            missing.to_str().unwrap_or_default(),
            "--",
            fault_bin().to_str().unwrap_or_default(),
        ])
        .stdin(Stdio::null())
        .output()
        .expect("run mcp-supervisor");
    assert_eq!(output.status.code(), Some(2), "refused like a bad config");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(missing.to_str().unwrap_or_default()),
        "{stderr}"
    );
    assert!(stderr.contains("audit"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}
