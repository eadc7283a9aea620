//! On demand (SPEC §13) with outside software: server-everything and the official Python SDK
//! server, through `serve` (`"start": "onDemand"`, `idleTimeoutMs`) and `wrap --on-demand
//! --idle-timeout-ms`. With a saved catalog, their tools are listed (and, in `wrap`, the
//! handshake answered) while no process of theirs runs; the first call starts the server and is
//! answered by it; after the idle timeout (its health probes going on meanwhile) it is stopped,
//! its state `idle`, `/healthz` 200 and no process left (under `npx`: none of `npm exec`, `sh`
//! and `node`); the next call starts it again, and so do a `prompts/get` and a
//! `resources/read`.
//!
//! And over the HTTP face, the official Python SDK client's calls (both protocol eras) start the
//! idle servers and are answered by them.
//!
//! Processes are counted from /proc among the proxy's descendants. Every proxy is stopped by
//! closing its stdin (it stops its servers), then SIGKILL by pid.

mod interop_support;
mod outside_support;
mod support;

use std::path::Path;
use std::time::Duration;

use outside_support::*;
use serde_json::{Value, json};
use support::{Proxy, free_port, serve_args, temp_dir, wrap_on_demand_args, write_config};

/// The idle timeout of the on-demand servers here.
const IDLE_MS: u64 = 1500;

/// Call `tool` with `message`; the text it answered.
async fn echo(proxy: &mut Proxy, tool: &str, message: &str) -> String {
    let result = proxy
        .request(
            "tools/call",
            json!({"name": tool, "arguments": {"message": message}}),
        )
        .await;
    assert_ne!(result["isError"], true, "{tool}: {result}");
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{tool}: no text in {result}"))
        .to_string()
}

fn pid(status: &Value, name: &str) -> u32 {
    entry_of(status, name)["pid"]
        .as_u64()
        .unwrap_or_else(|| panic!("{name} has no pid: {status}")) as u32
}

const BOTH: [&str; 2] = ["everything", "py"];

/// Run 1 of a `serve` of [`write_lazy_config`]'s config, with no saved catalog: each server
/// runs once to learn its lists, then stops. The tool names listed.
async fn learn_catalog(config: &Path, state: &Path) -> Vec<String> {
    let port = free_port();
    let mut proxy = Proxy::start(&serve_args(config, state, Some(port)));
    proxy.initialize().await;
    until_state(port, &BOTH, "idle").await;
    let names = proxy.tool_names().await;
    proxy.stop().await;
    names
}

/// A config of server-everything and the SDK server, both on demand, idle after [`IDLE_MS`],
/// health-probed every 200 ms (probes are no requests: they keep nothing running).
fn write_lazy_config(config: &Path) {
    let lazy =
        json!({ "start": "onDemand", "idleTimeoutMs": IDLE_MS, "health": { "intervalMs": 200 } });
    write_config(
        config,
        json!({
            "everything": entry(&everything(), lazy.clone()),
            "py": entry(&py_server(&[]), lazy),
        }),
    );
}

#[tokio::test]
async fn serve_lists_outside_servers_from_the_catalog_and_runs_them_only_while_used() {
    let dir = temp_dir("outside-on-demand-serve");
    let state = dir.join("state");
    let config = dir.join("servers.json");
    write_lazy_config(&config);
    let both = BOTH;

    // Run 1, no saved catalog: each runs once to learn its lists, then stops.
    let names = learn_catalog(&config, &state).await;
    for tool in ["everything__echo", "everything__get-tiny-image", "py__echo"] {
        assert!(names.contains(&tool.to_string()), "{tool} in {names:?}");
    }

    // Run 2: listed from the saved catalog; nothing of theirs runs, also past the idle timeout
    // and several probe intervals.
    let port = free_port();
    let mut proxy = Proxy::start(&serve_args(&config, &state, Some(port)));
    let proxy_pid = proxy.child.id().expect("the proxy runs");
    proxy.initialize().await;
    assert_eq!(proxy.tool_names().await, names, "listed from the catalog");
    let now = until_state(port, &both, "idle").await;
    for name in both {
        let server = entry_of(&now, name);
        assert_eq!(
            (server["pid"].clone(), server["toolList"].as_str()),
            (Value::Null, Some("cache")),
            "{server}"
        );
    }
    assert_eq!(healthz(port).await, 200, "idle is not an outage");
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(descendants(proxy_pid), Vec::<u32>::new(), "nothing runs");

    // The first call of each starts that one only, and its own answer comes back.
    assert_eq!(echo(&mut proxy, "py__echo", "first").await, "first");
    let now = status(port).await;
    assert_eq!(entry_of(&now, "py")["state"], "ready", "{now}");
    let py_first = pid(&now, "py");
    assert_eq!(servers_like(proxy_pid, PY), [py_first]);
    assert_eq!(servers_like(proxy_pid, EVERYTHING), Vec::<u32>::new());
    assert_eq!(
        echo(&mut proxy, "everything__echo", "first").await,
        "Echo: first"
    );
    let everything_first = pid(&status(port).await, "everything");
    assert_eq!(servers_like(proxy_pid, EVERYTHING), [everything_first]);

    // No request for idleTimeoutMs: both stopped, not an outage, still listed.
    let now = until_state(port, &both, "idle").await;
    for name in both {
        let server = entry_of(&now, name);
        assert_eq!(
            (server["pid"].clone(), server["restarts"].clone()),
            (Value::Null, json!(0)),
            "{server}"
        );
    }
    assert!(
        all_gone(&[py_first, everything_first], Duration::from_secs(5)).await,
        "stopped when idle: {:?}",
        descendants(proxy_pid)
    );
    assert_eq!(healthz(port).await, 200, "idle is not an outage");
    assert_eq!(proxy.tool_names().await, names, "their tools stay listed");

    // The next call starts each again.
    assert_eq!(echo(&mut proxy, "py__echo", "again").await, "again");
    assert_eq!(
        echo(&mut proxy, "everything__echo", "again").await,
        "Echo: again"
    );
    let now = status(port).await;
    let (py_second, everything_second) = (pid(&now, "py"), pid(&now, "everything"));
    assert!(py_second != py_first && everything_second != everything_first);

    // A get and a read are client requests too: each starts the idle server and is answered by
    // it (a prompt, and a resource of a template, not listed).
    let mut started = vec![py_second, everything_second];
    let requests = [
        (
            "prompts/get",
            json!({ "name": "everything__simple-prompt" }),
        ),
        (
            "resources/read",
            json!({ "uri": "demo://resource/dynamic/text/3" }),
        ),
    ];
    for (method, params) in requests {
        until_state(port, &["everything"], "idle").await;
        assert!(all_gone(&started, Duration::from_secs(5)).await);
        let answer = proxy.request(method, params).await;
        let text = match method {
            "prompts/get" => answer["messages"][0]["content"]["text"].as_str(),
            _ => answer["contents"][0]["text"].as_str(),
        };
        assert!(
            text.is_some_and(
                |t| t.starts_with("This is a simple prompt") || t.starts_with("Resource 3:")
            ),
            "{method}: {answer}"
        );
        let now = until_state(port, &["everything"], "ready").await;
        started.push(pid(&now, "everything"));
    }
    proxy.stop().await;
    assert!(all_gone(&started, Duration::from_secs(5)).await);
    let _ = std::fs::remove_dir_all(dir);
}

/// `wrap --on-demand` of `server`: run 1 learns its catalog; run 2 answers the handshake and
/// the list from it with no process, starts the server on the first call (answered `reply`),
/// stops it when idle and starts it again on the next call.
async fn wrap_on_demand(tag: &str, server: &[String], needle: &str, reply: fn(&str) -> String) {
    let dir = temp_dir(tag);
    let state = dir.join("state");
    let wrap = |port: u16| wrap_on_demand_args(port, &state, IDLE_MS, &[], server);

    let port = free_port();
    let mut proxy = Proxy::start(&wrap(port));
    let info = proxy.initialize().await;
    let names = proxy.tool_names().await;
    assert!(names.contains(&"echo".to_string()), "{names:?}");
    let name = status(port).await["servers"][0]["name"]
        .as_str()
        .expect("a name")
        .to_string();
    until_state(port, &[&name], "idle").await;
    proxy.stop().await;

    let port = free_port();
    let mut proxy = Proxy::start(&wrap(port));
    let proxy_pid = proxy.child.id().expect("the proxy runs");
    assert_eq!(proxy.initialize().await, info, "the saved handshake answer");
    assert_eq!(proxy.tool_names().await, names, "the saved list");
    let now = until_state(port, &[&name], "idle").await;
    assert_eq!(entry_of(&now, &name)["pid"], Value::Null, "{now}");
    assert_eq!(descendants(proxy_pid), Vec::<u32>::new(), "nothing runs");
    assert_eq!(healthz(port).await, 200);

    assert_eq!(echo(&mut proxy, "echo", "wrapped").await, reply("wrapped"));
    let first = pid(&until_state(port, &[&name], "ready").await, &name);
    // Its whole tree (wrappers included) runs under the proxy, and is stopped when idle.
    let tree = descendants(proxy_pid);
    assert!(
        tree.contains(&first) && tree.iter().any(|p| cmdline(*p).contains(needle)),
        "{first} and {needle} in {tree:?}"
    );
    let now = until_state(port, &[&name], "idle").await;
    assert_eq!(entry_of(&now, &name)["pid"], Value::Null, "{now}");
    assert!(
        all_gone(&tree, Duration::from_secs(5)).await,
        "stopped when idle"
    );
    assert_eq!(healthz(port).await, 200, "idle is not an outage");
    assert_eq!(echo(&mut proxy, "echo", "again").await, reply("again"));
    let second = pid(&until_state(port, &[&name], "ready").await, &name);
    assert_ne!(first, second);
    proxy.stop().await;
    assert!(all_gone(&[second], Duration::from_secs(5)).await);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn wrap_on_demand_runs_server_everything_under_npx_only_while_used() {
    wrap_on_demand(
        "outside-on-demand-wrap-everything",
        &everything_npx(),
        EVERYTHING,
        |m| format!("Echo: {m}"),
    )
    .await;
}

#[tokio::test]
async fn wrap_on_demand_runs_the_python_sdk_server_only_while_used() {
    wrap_on_demand("outside-on-demand-wrap-py", &py_server(&[]), PY, |m| {
        m.to_string()
    })
    .await;
}

/// How long one run of the Python SDK client driver may take.
const DRIVER_LIMIT: Duration = Duration::from_secs(60);

#[tokio::test]
async fn the_python_sdk_client_over_http_starts_idle_outside_servers_with_its_calls() {
    let dir = temp_dir("outside-on-demand-http");
    let state = dir.join("state");
    let config = dir.join("servers.json");
    write_lazy_config(&config);
    let both = BOTH;
    // Run 1 (stdio face, no call) learns the catalog.
    learn_catalog(&config, &state).await;

    // Run 2, the HTTP face: nothing runs until the client's calls, each answered by its server.
    let admin = free_port();
    let args = serve_args(&config, &state, Some(admin));
    let (mut http, port) = interop_support::start_http_proxy(&dir, "serve on demand", &args);
    until_state(admin, &both, "idle").await;
    assert_eq!(descendants(http.pid()), Vec::<u32>::new(), "nothing runs");
    let url = interop_support::Target::Url(format!("http://127.0.0.1:{port}/mcp"));
    let drive = |scenario: &str, mode: &str, prefix: &str| {
        interop_support::run_driver(
            &dir,
            scenario,
            mode,
            &url,
            &["--prefix", prefix],
            DRIVER_LIMIT,
        )
    };
    // The SDK's 2026-07-28 client with the SDK server, its handshake-era client with
    // server-everything (progress included).
    let py = drive("echo", "auto", "py__");
    for (key, text) in [("echo", "strict one"), ("echo_again", "strict two")] {
        assert_eq!(
            (py[key]["ok"].as_bool(), py[key]["text"].as_str()),
            (Some(true), Some(text)),
            "{py}\n{}",
            http.logs()
        );
    }
    let everything = drive("everything", "legacy", "everything__");
    assert_eq!(
        everything["echo"]["text"],
        "Echo: hello everything",
        "{everything}\n{}",
        http.logs()
    );
    assert_eq!(
        everything["sum"]["text"], "The sum of 2 and 3 is 5.",
        "{everything}"
    );
    assert_eq!(everything["long"]["ok"], true, "{everything}");

    // Idle again: stopped, not an outage.
    until_state(admin, &both, "idle").await;
    let left = descendants(http.pid());
    assert!(
        all_gone(&left, Duration::from_secs(5)).await,
        "stopped when idle: {left:?}"
    );
    assert_eq!(healthz(admin).await, 200);
    http.stop();
    let _ = std::fs::remove_dir_all(dir);
}
