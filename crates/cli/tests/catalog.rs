//! End to end through the real binary and real fault servers that take 1.5 s to start
//! (`--startup-delay-ms`): instant start from a saved catalog in `serve` and `wrap` (the first
//! `tools/list` answers from the catalog before the server is ready, `/status` says so, a call
//! waits and succeeds, list_changed goes out only when the live list differs, a corrupt catalog is
//! ignored and rewritten), and tool filters (a filtered tool is not listed and its call never
//! reaches the server; `check --list` warns about a pattern that matches nothing).
//!
//! Every process is stopped by its own id: the proxy by closing its stdin (it stops its servers),
//! then SIGKILL by pid if it has not exited within 10 s.

mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use std::process::Stdio;
use support::*;
use tokio::process::Command;

/// How long each fault server takes before it serves.
const STARTUP_MS: u64 = 1500;
/// The bound of any wait for an answer or a notification.
const LIMIT: Duration = ANSWER_LIMIT;

/// The saved catalogs in `dir`.
fn catalogs(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "json"))
                .collect()
        })
        .unwrap_or_default()
}

/// Wait (bounded) until the one catalog in `dir` satisfies `pred`; returns its text.
async fn catalog_until(dir: &Path, what: &str, pred: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + LIMIT;
    loop {
        if let [file] = catalogs(dir).as_slice()
            && let Ok(text) = std::fs::read_to_string(file)
            && pred(&text)
        {
            return text;
        }
        assert!(Instant::now() < deadline, "the catalog never {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn fault_with_delay() -> Value {
    json!({
        "command": fault_bin(),
        "args": ["--startup-delay-ms", STARTUP_MS.to_string()],
        "health": { "intervalMs": 0 }
    })
}

fn serve_args(config: &Path, state: &Path, admin: Option<u16>) -> Vec<String> {
    let mut list = args(&["serve", "--config"]);
    list.push(path_str(config));
    list.push("--state-dir".into());
    list.push(path_str(state));
    if let Some(port) = admin {
        list.push("--admin".into());
        list.push(format!("127.0.0.1:{port}"));
    }
    list
}

async fn status_of(port: u16) -> Value {
    let (code, status) = get_json(&format!("http://127.0.0.1:{port}/status")).await;
    assert_eq!(code, 200);
    status["servers"][0].clone()
}

#[tokio::test]
async fn serve_answers_the_first_tools_list_from_the_saved_catalog_before_the_server_is_ready() {
    let dir = temp_dir("catalog-serve");
    let state = dir.join("state");
    let config = dir.join("servers.json");
    write_config(&config, json!({ "fault": fault_with_delay() }));

    // Run 1, no catalog yet: the first list waits for the server; then the server's tools
    // change (set_tools), and the changed list is what gets saved.
    let mut proxy = Proxy::start(&serve_args(&config, &state, None));
    proxy.initialize().await;
    let began = Instant::now();
    let first = proxy.tool_names().await;
    assert!(
        began.elapsed() >= Duration::from_millis(STARTUP_MS - 100),
        "no catalog: it waited"
    );
    assert!(first.contains(&"fault__echo".to_string()), "{first:?}");
    proxy
        .request(
            "tools/call",
            json!({"name": "fault__set_tools", "arguments": {"tools": ["extra"]}}),
        )
        .await;
    proxy
        .until_notified("notifications/tools/list_changed")
        .await;
    catalog_until(&state, "saved the changed list", |t| {
        t.contains(r#""name":"extra""#)
    })
    .await;
    proxy.stop().await;

    // Run 2: the saved list (with `extra`) at once, while the server is still connecting.
    let port = free_port();
    let mut proxy = Proxy::start(&serve_args(&config, &state, Some(port)));
    let began = Instant::now();
    proxy.initialize().await;
    let cached = proxy.tool_names().await;
    let answered = began.elapsed();
    assert!(
        answered < Duration::from_millis(STARTUP_MS / 2),
        "answered from the catalog in {answered:?}"
    );
    assert!(cached.contains(&"fault__extra".to_string()), "{cached:?}");
    let status = status_of(port).await;
    assert_eq!(
        (status["state"].as_str(), status["toolList"].as_str()),
        (Some("connecting"), Some("cache")),
        "{status}"
    );
    // A call waits for ready within its deadline, and succeeds.
    let result = proxy
        .request(
            "tools/call",
            json!({"name": "fault__echo", "arguments": {"message": "hi"}}),
        )
        .await;
    assert_eq!(result["content"][0]["text"], "hi", "{result}");
    assert!(began.elapsed() >= Duration::from_millis(STARTUP_MS - 100));
    // The live list differs (no `extra`): clients are told, and it replaces the saved one.
    proxy
        .until_notified("notifications/tools/list_changed")
        .await;
    let live = proxy.tool_names().await;
    assert!(!live.contains(&"fault__extra".to_string()), "{live:?}");
    let status = status_of(port).await;
    assert_eq!(
        (status["state"].as_str(), status["toolList"].as_str()),
        (Some("ready"), Some("live"))
    );
    catalog_until(&state, "saved the live list", |t| {
        !t.contains(r#""name":"extra""#)
    })
    .await;
    proxy.stop().await;

    // Run 3: the saved list is the live one, so no list_changed at all until the marker.
    let mut proxy = Proxy::start(&serve_args(&config, &state, None));
    proxy.initialize().await;
    assert_eq!(
        proxy.tool_names().await,
        live,
        "the saved list is the live one"
    );
    let result = proxy
        .request(
            "tools/call",
            json!({"name": "fault__echo", "arguments": {"message": "up"}}),
        )
        .await;
    assert_eq!(result["content"][0]["text"], "up");
    // A marker: the server's own change. Only that one list_changed may be seen.
    proxy
        .request(
            "tools/call",
            json!({"name": "fault__set_tools", "arguments": {"tools": ["marker"]}}),
        )
        .await;
    assert_eq!(
        proxy
            .until_notified("notifications/tools/list_changed")
            .await,
        1
    );
    proxy.stop().await;

    // Run 4: a corrupt catalog is ignored (the list waits for the server) and rewritten.
    let [file] = catalogs(&state).try_into().expect("one catalog");
    std::fs::write(&file, "{ not a catalog").expect("corrupt it");
    let mut proxy = Proxy::start(&serve_args(&config, &state, None));
    proxy.initialize().await;
    let began = Instant::now();
    let names = proxy.tool_names().await;
    assert!(
        began.elapsed() >= Duration::from_millis(STARTUP_MS - 500),
        "nothing cached: it waited"
    );
    assert!(names.contains(&"fault__echo".to_string()));
    let text = catalog_until(&state, "was rewritten", |t| t.starts_with(r#"{"format":1"#)).await;
    assert!(text.contains(r#""name":"echo""#));
    proxy.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn wrap_answers_initialize_and_tools_list_from_its_saved_catalog() {
    let dir = temp_dir("catalog-wrap");
    let state = dir.join("state");
    let wrap = || {
        let mut list = args(&["wrap", "--health-interval-ms", "0", "--state-dir"]);
        list.push(path_str(&state));
        list.push("--".into());
        list.push(path_str(&fault_bin()));
        list.push("--startup-delay-ms".into());
        list.push(STARTUP_MS.to_string());
        list
    };
    let mut proxy = Proxy::start(&wrap());
    let info = proxy.initialize().await;
    let names = proxy.tool_names().await;
    assert!(
        names.contains(&"echo".to_string()),
        "wrap keeps names: {names:?}"
    );
    catalog_until(&state, "saved the handshake", |t| {
        t.contains(r#""initialize""#)
    })
    .await;
    proxy.stop().await;

    let mut proxy = Proxy::start(&wrap());
    let began = Instant::now();
    let cached_info = proxy.initialize().await;
    assert_eq!(cached_info, info, "the server's own answer, as saved");
    assert_eq!(proxy.tool_names().await, names);
    let prompts = proxy.request("prompts/list", json!({})).await;
    let answered = began.elapsed();
    assert!(
        answered < Duration::from_millis(STARTUP_MS / 2),
        "answered from the catalog in {answered:?}"
    );
    assert_eq!(prompts["prompts"][0]["name"], "greet", "{prompts}");
    let result = proxy
        .request(
            "tools/call",
            json!({"name": "echo", "arguments": {"message": "wrapped"}}),
        )
        .await;
    assert_eq!(result["content"][0]["text"], "wrapped");
    assert!(
        began.elapsed() >= Duration::from_millis(STARTUP_MS - 100),
        "the call waited for the server"
    );
    proxy.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_filtered_tool_is_not_listed_and_its_call_never_reaches_the_server() {
    let dir = temp_dir("filters");
    let config = dir.join("servers.json");
    write_config(
        &config,
        json!({ "fault": {
            "command": fault_bin(),
            "tools": { "allow": ["echo", "add", "cr*"], "deny": ["crash"] },
            "health": { "intervalMs": 0 }
        } }),
    );
    let port = free_port();
    let mut list = args(&["serve", "--no-catalog", "--config"]);
    list.push(path_str(&config));
    list.push("--admin".into());
    list.push(format!("127.0.0.1:{port}"));
    let mut proxy = Proxy::start(&list);
    proxy.initialize().await;
    assert_eq!(proxy.tool_names().await, ["fault__add", "fault__echo"]);
    let answer = proxy
        .request(
            "tools/call",
            json!({"name": "fault__crash", "arguments": {}}),
        )
        .await;
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("fault__crash"),
        "an unknown-tool error: {answer}"
    );
    let result = proxy
        .request(
            "tools/call",
            json!({"name": "fault__echo", "arguments": {"message": "still here"}}),
        )
        .await;
    assert_eq!(result["content"][0]["text"], "still here");
    // Had `crash` reached the server, it would have exited and been replaced.
    let status = status_of(port).await;
    assert_eq!(
        (
            status["generation"].as_u64(),
            status["restarts"].as_u64(),
            status["tools"].as_u64()
        ),
        (Some(1), Some(0), Some(2)),
        "{status}"
    );
    proxy.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn check_list_warns_about_a_pattern_that_matches_nothing() {
    let dir = temp_dir("check-list");
    let config = dir.join("servers.json");
    write_config(
        &config,
        json!({ "fault": {
            "command": fault_bin(),
            "tools": { "allow": ["echo", "nothing_*"], "deny": ["crash"] }
        } }),
    );
    let output = tokio::time::timeout(
        LIMIT,
        Command::new(supervisor_bin())
            .args(["check", "--list", "--config", &path_str(&config)])
            .stdin(Stdio::null())
            .output(),
    )
    .await
    .expect("check finished in time")
    .expect("run check");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(0),
        "warnings are not errors: {stdout}"
    );
    assert!(
        stdout.contains(r#"warning: mcpServers.fault.tools.allow[1] "nothing_*" matches no tool the server lists"#),
        "{stdout}"
    );
    assert!(
        !stdout.contains("tools.deny[0]"),
        "crash is listed: {stdout}"
    );
    assert!(
        !stdout.contains("tools.allow[0]"),
        "echo is listed: {stdout}"
    );
    // Without --list, check never starts a server.
    let output = Command::new(supervisor_bin())
        .args(["check", "--config", &path_str(&config)])
        .stdin(Stdio::null())
        .output()
        .await
        .expect("run check");
    assert_eq!(output.status.code(), Some(0));
    assert!(!String::from_utf8_lossy(&output.stdout).contains("warning"));
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn wrap_filters_tools_with_its_flags_and_never_forwards_a_filtered_call() {
    let mut list = args(&[
        "wrap",
        "--no-catalog",
        "--health-interval-ms",
        "0",
        "--deny-tool",
        "cr*",
        "--deny-tool",
        "hang",
        "--",
    ]);
    list.push(path_str(&fault_bin()));
    let mut proxy = Proxy::start(&list);
    proxy.initialize().await;
    let names = proxy.tool_names().await;
    assert!(names.contains(&"echo".to_string()), "{names:?}");
    assert!(
        !names.iter().any(|n| n == "crash" || n == "hang"),
        "{names:?}"
    );
    let pid = proxy
        .request("tools/call", json!({"name": "pid", "arguments": {}}))
        .await;
    let answer = proxy
        .request("tools/call", json!({"name": "crash", "arguments": {}}))
        .await;
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("no server offers a tool named \"crash\""),
        "our unknown-tool error, not the server's: {answer}"
    );
    // The same process still answers: `crash` never reached it.
    let again = proxy
        .request("tools/call", json!({"name": "pid", "arguments": {}}))
        .await;
    let text = pid["content"][0]["text"].as_str().unwrap_or_default();
    assert!(text.parse::<u32>().is_ok(), "the server's pid: {pid}");
    assert_eq!(pid["content"], again["content"], "{pid} {again}");
    proxy.stop().await;
}

#[tokio::test]
async fn a_call_to_a_tool_the_saved_catalog_lacks_waits_for_the_servers_own_list() {
    let dir = temp_dir("catalog-lacks");
    let state = dir.join("state");
    let config = dir.join("servers.json");
    write_config(&config, json!({ "fault": fault_with_delay() }));
    let mut proxy = Proxy::start(&serve_args(&config, &state, None));
    proxy.initialize().await;
    assert!(
        proxy
            .tool_names()
            .await
            .contains(&"fault__echo".to_string())
    );
    catalog_until(&state, "was saved", |t| t.contains(r#""name":"echo""#)).await;
    proxy.stop().await;

    // The catalog of an older version of the server, without `echo`.
    let [file] = catalogs(&state).try_into().expect("one catalog");
    let text = std::fs::read_to_string(&file).expect("read the catalog");
    let mut saved: Value = serde_json::from_str(&text).expect("a JSON catalog");
    saved["catalog"]["tools"]
        .as_array_mut()
        .unwrap_or_else(|| panic!("a tools array in the catalog: {text}"))
        .retain(|t| t["name"] != "echo");
    std::fs::write(&file, saved.to_string()).expect("write the catalog");

    // The list comes from the catalog (no `echo`), while the server is still starting; a call
    // to `echo` then waits for the server's own list instead of failing as unknown.
    let mut proxy = Proxy::start(&serve_args(&config, &state, None));
    proxy.initialize().await;
    let cached = proxy.tool_names().await;
    assert!(
        !cached.contains(&"fault__echo".to_string()) && !cached.is_empty(),
        "answered from the catalog: {cached:?}"
    );
    let result = proxy
        .request(
            "tools/call",
            json!({"name": "fault__echo", "arguments": {"message": "late"}}),
        )
        .await;
    assert_eq!(result["content"][0]["text"], "late", "{result}");
    // A name that no server lists, once every list is in, is unknown at once.
    let unknown = proxy
        .request(
            "tools/call",
            json!({"name": "fault__nothing", "arguments": {}}),
        )
        .await;
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
    proxy.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}
