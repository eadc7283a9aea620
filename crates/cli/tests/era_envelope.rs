//! An era's envelope belongs to one hop (SPEC §10). The official Python SDK client in its default
//! mode (`auto`, protocol 2026-07-28) calls the tools of a strict handshake-era server, the
//! official Python SDK server (which refuses a request carrying the 2026-07-28 `_meta` envelope
//! on a handshake connection), through `serve` (the upstream pinned to 2025-11-25 in its config)
//! and through `wrap`, on the stdio face and on the HTTP face. The legacy client is the control.

mod interop_support;
mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use interop_support::*;
use serde_json::{Value, json};
use support::{free_port, supervisor_bin, temp_dir, write_config};

const DRIVER_LIMIT: Duration = Duration::from_secs(60);
const MODES: [&str; 2] = ["auto", "legacy"];

fn strict_server() -> Vec<String> {
    vec![
        path_str(&python()),
        path_str(&py_script("strict_server.py")),
    ]
}

/// `serve`'s config: the strict server over stdio, pinned to the handshake era.
fn serve_config(dir: &Path) -> PathBuf {
    let path = dir.join("strict.json");
    let argv = strict_server();
    write_config(
        &path,
        json!({ "py": {
            "command": argv[0],
            "args": argv[1..],
            "protocolVersion": "2025-11-25",
            "reconnect": { "initialDelayMs": 50, "maxDelayMs": 400, "maxAttempts": 3 }
        }}),
    );
    path
}

/// Both calls answered with their own text, and the tool listed under `name`.
fn assert_echoes(summary: &Value, name: &str, ctx: &str) {
    let tools: Vec<&str> = summary["tools"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    assert!(tools.contains(&name), "{ctx}: {name} not listed: {tools:?}");
    for (key, text) in [("echo", "strict one"), ("echo_again", "strict two")] {
        let call = &summary[key];
        assert_eq!(call["ok"], true, "{ctx}: {key} failed: {call}");
        assert_eq!(call["is_error"], false, "{ctx}: {key} isError: {call}");
        assert_eq!(call["text"], text, "{ctx}: {key} answered {call}");
    }
}

fn run_both_faces(dir: &Path, what: &str, args: &[String], prefix: &str) {
    let extra = ["--prefix", prefix];
    let mut argv = vec![path_str(&supervisor_bin())];
    argv.extend(args.iter().cloned());
    for mode in MODES {
        let summary = run_driver(
            dir,
            "echo",
            mode,
            &Target::Stdio(argv.clone()),
            &extra,
            DRIVER_LIMIT,
        );
        assert_echoes(
            &summary,
            &format!("{prefix}echo"),
            &format!("{what} stdio/{mode}"),
        );
    }
    let (mut proxy, port) = start_http_proxy(dir, &format!("{what} http"), args);
    for mode in MODES {
        let target = Target::Url(format!("http://127.0.0.1:{port}/mcp"));
        let summary = run_driver(dir, "echo", mode, &target, &extra, DRIVER_LIMIT);
        let ctx = format!("{what} http/{mode}");
        if summary["echo"]["ok"] != true {
            panic!("{ctx}: {summary}\n{}", proxy.logs());
        }
        assert_echoes(&summary, &format!("{prefix}echo"), &ctx);
    }
    proxy.stop();
}

#[test]
fn a_2026_client_calls_a_strict_handshake_era_server_through_serve() {
    let dir = temp_dir("envelope-serve");
    let config = path_str(&serve_config(&dir));
    let args: Vec<String> = ["serve", "--config", &config, "--no-catalog"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    run_both_faces(&dir, "serve", &args, "py__");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_2026_client_calls_a_strict_server_through_wrap() {
    let dir = temp_dir("envelope-wrap");
    let mut args = vec![
        "wrap".to_string(),
        "--no-catalog".to_string(),
        "--".to_string(),
    ];
    args.extend(strict_server());
    run_both_faces(&dir, "wrap", &args, "");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_2026_client_calls_a_strict_http_server_through_wrap_url() {
    let dir = temp_dir("envelope-wrap-url");
    let port = free_port();
    let mut cmd = std::process::Command::new(python());
    cmd.arg(py_script("strict_server.py"))
        .arg(port.to_string())
        .env("PYTHONDONTWRITEBYTECODE", "1");
    let mut server = Proc::spawn("strict http server", cmd, &dir);
    server.wait_listening(port, LISTEN_LIMIT);
    let args: Vec<String> = [
        "wrap",
        "--no-catalog",
        "--url",
        &format!("http://127.0.0.1:{port}/mcp"),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    run_both_faces(&dir, "wrap --url", &args, "");
    server.stop();
    let _ = std::fs::remove_dir_all(dir);
}
