//! Helpers for the end-to-end tests of SPEC §7 and §13 against outside software (the
//! `outside_*` tests): the command lines of the official Python SDK server
//! (`tests/py/strict_server.py`) and of server-everything, directly, under `sh -c` and under
//! `npx`; the processes a proxy runs, read from /proc; and a poll of `/status` on an admin port.
//!
//! Nothing here signals a process: each test stops what it started, by pid.
#![allow(dead_code)] // each test binary uses a different part

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::interop_support::{everything_stdio, path_str, py_script, python, tool};

/// `serve --config CONFIG --admin 127.0.0.1:PORT --no-catalog` over stdio: its client, and the
/// admin port.
pub async fn serve_with_admin(config: &Path) -> (crate::support::StdioClient, u16) {
    let admin = crate::support::free_port();
    let admin_addr = format!("127.0.0.1:{admin}");
    let config = path_str(config);
    let client = crate::support::StdioClient::start(&[
        "serve",
        "--config",
        &config,
        "--admin",
        &admin_addr,
        "--no-catalog",
    ])
    .await;
    (client, admin)
}

/// The bound of any wait for a state here.
pub const LIMIT: Duration = Duration::from_secs(30);

/// `python strict_server.py OPTIONS` (the SDK server over stdio; options in its doc).
pub fn py_server(options: &[&str]) -> Vec<String> {
    let mut argv = vec![
        path_str(&python()),
        path_str(&py_script("strict_server.py")),
    ];
    argv.extend(options.iter().map(|o| o.to_string()));
    argv
}

/// server-everything over stdio, run directly (its bin is a node script).
pub fn everything() -> Vec<String> {
    everything_stdio()
}

/// server-everything as `npx` runs it: `npm exec` → `sh -c` → `node`, three processes, from
/// the pinned install in `tools/` (`--offline`: nothing is fetched).
pub fn everything_npx() -> Vec<String> {
    let bin = tool("mcp-server-everything");
    let tools = bin
        .parent()
        .and_then(Path::parent)
        .and_then(Path::parent)
        .expect("tools/node_modules/.bin");
    vec![
        "npx".into(),
        "--offline".into(),
        "--prefix".into(),
        path_str(tools),
        "mcp-server-everything".into(),
        "stdio".into(),
    ]
}

/// `{"command": argv[0], "args": argv[1..]}` plus the members of `extra` (an object).
pub fn entry(argv: &[String], extra: Value) -> Value {
    let mut server = serde_json::json!({ "command": argv[0], "args": argv[1..] });
    if let (Some(to), Value::Object(from)) = (server.as_object_mut(), extra) {
        to.extend(from);
    }
    server
}

/// `(pid, ppid)` of every live (not zombie) process.
fn processes() -> Vec<(u32, u32)> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            let rest = &stat[stat.rfind(')')? + 1..];
            let mut fields = rest.split_whitespace();
            let state = fields.next()?;
            let ppid = fields.next()?.parse().ok()?;
            (!matches!(state, "Z" | "X")).then_some((pid, ppid))
        })
        .collect()
}

/// The command line of `pid`, its arguments joined by spaces (empty when it is gone).
pub fn cmdline(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| {
            c.split(|b| *b == 0)
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

/// Every live descendant of `root`, the proxy's orphan guard left out.
pub fn descendants(root: u32) -> Vec<u32> {
    let all = processes();
    let mut found = Vec::new();
    let mut frontier = vec![root];
    while let Some(parent) = frontier.pop() {
        for (pid, _) in all.iter().filter(|(_, ppid)| *ppid == parent) {
            found.push(*pid);
            frontier.push(*pid);
        }
    }
    found.retain(|pid| !is_guard(*pid));
    found
}

/// Whether `pid` is a proxy's orphan guard (`mcp_supervisor::guard::GUARD_ARG`).
pub fn is_guard(pid: u32) -> bool {
    cmdline(pid).contains("__mcp-supervisor-orphan-guard")
}

/// The descendants of `root` whose command line contains `needle`.
pub fn servers_like(root: u32, needle: &str) -> Vec<u32> {
    descendants(root)
        .into_iter()
        .filter(|pid| cmdline(*pid).contains(needle))
        .collect()
}

/// What server-everything's processes have in their command line.
pub const EVERYTHING: &str = "mcp-server-everything";
/// What the Python SDK server's process has in its command line.
pub const PY: &str = "strict_server.py";

/// GET /status on the admin `port` (bounded), or `Null`.
pub async fn status(port: u16) -> Value {
    let client = reqwest::Client::new();
    let response = client
        .get(format!("http://127.0.0.1:{port}/status"))
        .timeout(Duration::from_secs(5))
        .send()
        .await;
    match response {
        Ok(r) => r.json().await.unwrap_or(Value::Null),
        Err(_) => Value::Null,
    }
}

/// Server `name`'s entry in a `/status` body.
pub fn entry_of<'a>(status: &'a Value, name: &str) -> &'a Value {
    status["servers"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["name"] == name))
        .unwrap_or(&Value::Null)
}

/// Poll `/status` until every one of `names` is in `state` (bounded by [`LIMIT`]); the last
/// body.
pub async fn until_state(port: u16, names: &[&str], state: &str) -> Value {
    let deadline = Instant::now() + LIMIT;
    loop {
        let now = status(port).await;
        if names.iter().all(|n| entry_of(&now, n)["state"] == state) {
            return now;
        }
        assert!(
            Instant::now() < deadline,
            "{names:?} never all {state} within {LIMIT:?}: {now}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The status code of GET /healthz on the admin `port`.
pub async fn healthz(port: u16) -> u16 {
    reqwest::get(format!("http://127.0.0.1:{port}/healthz"))
        .await
        .map(|r| r.status().as_u16())
        .unwrap_or(0)
}

/// Poll (bounded by `limit`) until none of `pids` is alive; whether they all went.
pub async fn all_gone(pids: &[u32], limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while pids.iter().any(|p| crate::interop_support::alive(*p)) {
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    true
}
