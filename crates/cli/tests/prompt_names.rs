//! Prompt names in `serve` end to end (SPEC §9: prompts are named like tools, with the same
//! collision rule and warning), through the real binary and two fault servers whose prompt
//! `greet` answers with a different first word, so an answer tells which server gave it: what
//! names the client sees, that `prompts/get` by each public name reaches the server that owns
//! it (also before any `prompts/list`), and that each collision is logged once, as a tool's is.
//!
//! Every process is stopped by its own id: the proxy by closing its stdin (it stops its servers),
//! then SIGKILL by pid if it has not exited within 10 s.

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use mcp_supervisor::core::naming::prefixed_name;
use serde_json::{Value, json};
use support::*;

/// Poll tools/list (bounded) until it lists every one of `names`: the servers are up.
async fn tools_until(proxy: &mut Proxy, names: &[&str]) {
    let deadline = Instant::now() + ANSWER_LIMIT;
    loop {
        let listed = proxy.tool_names().await;
        if names.iter().all(|n| listed.iter().any(|l| l == n)) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "tools/list never held {names:?}; it holds {listed:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `prompts/get NAME {name: "Ada"}`: the text of the answer's first message, or the error.
async fn greet(proxy: &mut Proxy, public: &str) -> Result<String, Value> {
    let answer = proxy
        .request(
            "prompts/get",
            json!({ "name": public, "arguments": { "name": "Ada" } }),
        )
        .await;
    answer["messages"][0]["content"]["text"]
        .as_str()
        .map(str::to_string)
        .ok_or(answer)
}

/// The prompts of prompts/list, in order.
async fn prompts(proxy: &mut Proxy) -> Vec<Value> {
    let list = proxy.request("prompts/list", json!({})).await;
    list["prompts"].as_array().cloned().unwrap_or_default()
}

fn names(prompts: &[Value]) -> Vec<&str> {
    prompts.iter().filter_map(|p| p["name"].as_str()).collect()
}

fn serve(config: &Path) -> Vec<String> {
    // No saved catalog: another run's lists never stand in for the servers' own.
    args(&["serve", "--no-catalog", "--config", &path_str(config)])
}

/// Two fault servers that both offer `greet` (and `echo`), in original mode (where the later one
/// must give way); `b`'s `greet` answers "Howdy". Its log goes to `log`.
fn colliding(dir: &Path, log: &Path) -> Proxy {
    let config = dir.join("servers.json");
    let fault = fault_bin().display().to_string();
    let text = json!({
        "naming": { "mode": "original" },
        "mcpServers": {
            "a": { "command": fault.clone() },
            "b": { "command": fault, "args": ["--greeting", "Howdy"] },
        },
    });
    std::fs::write(&config, text.to_string()).expect("write config");
    Proxy::start_logged(&serve(&config), log)
}

#[tokio::test]
async fn a_prompt_name_collision_is_broken_like_a_tool_collision_and_warned_of_once() {
    let dir = temp_dir("prompt-names-collision");
    let log = dir.join("proxy.log");
    let mut proxy = colliding(&dir, &log);
    proxy.initialize().await;
    // The tools' rule, for comparison: b's `echo` is published as `b__echo`.
    tools_until(&mut proxy, &["echo", "b__echo"]).await;

    // The client sees the first server's prompt under its own name, the later one prefixed.
    let listed = prompts(&mut proxy).await;
    assert_eq!(names(&listed), ["greet", "b__greet"], "{listed:?}");
    // Only the name was rewritten: both servers' definitions are otherwise the same.
    let mut renamed = listed[1].clone();
    renamed["name"] = json!("greet");
    assert_eq!(renamed, listed[0]);
    // Each public name reaches its own server.
    assert_eq!(greet(&mut proxy, "greet").await, Ok("Hello, Ada!".into()));
    assert_eq!(
        greet(&mut proxy, "b__greet").await,
        Ok("Howdy, Ada!".into())
    );
    let listed_again = prompts(&mut proxy).await;
    assert_eq!(listed_again, listed, "the same names every time");

    // The warning has the tool's form, and is logged once however often the prompts are named.
    let prompt_warning = "prompt \"greet\" of server \"b\" is also offered by server \"a\"; it is published as \"b__greet\"";
    let tool_warning = "tool \"echo\" of server \"b\" is also offered by server \"a\"; it is published as \"b__echo\"";
    let text = log_until(&log, &[prompt_warning, tool_warning]).await;
    assert_eq!(text.matches(prompt_warning).count(), 1, "{text}");
    assert_eq!(text.matches(tool_warning).count(), 1, "{text}");
    proxy.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_collision_broken_prompt_name_routes_before_any_prompt_list() {
    let dir = temp_dir("prompt-names-unlisted");
    let log = dir.join("proxy.log");
    let mut proxy = colliding(&dir, &log);
    proxy.initialize().await;
    tools_until(&mut proxy, &["echo", "b__echo"]).await;
    // A client that knows the public names (from an earlier session) gets without listing.
    assert_eq!(
        greet(&mut proxy, "b__greet").await,
        Ok("Howdy, Ada!".into())
    );
    assert_eq!(greet(&mut proxy, "greet").await, Ok("Hello, Ada!".into()));
    proxy.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_prompt_name_too_long_is_shortened_like_a_tool_name_and_routes_by_it() {
    let dir = temp_dir("prompt-names-long");
    let config = dir.join("servers.json");
    let fault = fault_bin().display().to_string();
    // `<server>__greet` is 67 characters: past the limit of 64.
    let long = "s".repeat(60);
    write_config(
        &config,
        json!({
            long.clone(): { "command": fault.clone() },
            "t": { "command": fault, "args": ["--greeting", "Howdy"] },
        }),
    );
    let mut proxy = Proxy::start(&serve(&config));
    proxy.initialize().await;
    let shortened = prefixed_name(&long, "greet", "__");
    assert_eq!(shortened.len(), 64);
    assert!(!shortened.ends_with("greet"), "{shortened}");
    // The tool the same server offers is shortened the same way.
    tools_until(
        &mut proxy,
        &[&prefixed_name(&long, "echo", "__"), "t__echo"],
    )
    .await;
    // Before any prompts/list the shortened name reaches its server under its own name.
    assert_eq!(
        greet(&mut proxy, &shortened).await,
        Ok("Hello, Ada!".into())
    );
    let listed = prompts(&mut proxy).await;
    assert_eq!(names(&listed), [shortened.as_str(), "t__greet"]);
    assert_eq!(
        greet(&mut proxy, &shortened).await,
        Ok("Hello, Ada!".into())
    );
    assert_eq!(
        greet(&mut proxy, "t__greet").await,
        Ok("Howdy, Ada!".into())
    );
    proxy.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}
