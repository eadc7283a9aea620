//! No orphan, however the proxy ends (SPEC §7), with outside software: a `wrap` or `serve`
//! proxy killed at once (SIGKILL of its pid, or of its whole process group) leaves no process of
//! its servers alive 2 s later, and its orphan guard is gone soon after. The servers:
//! server-everything once initialized (its timers keep it running after the end of stdin) run
//! directly, under `sh -c` and under `npx` (`npm exec` → `sh -c` → `node`); and the official
//! Python SDK server told to keep running after the end of stdin, directly and under `sh -c`
//! (where it and `sh` ignore SIGTERM too).
//!
//! Both faces: stdio, and `--http` alone (for `wrap` over HTTP, the wrapped servers only).
//!
//! Each proxy gets a client handshake and a tools/list first (so every server is initialized),
//! and is started in a process group of its own, so that killing its group cannot reach
//! the test runner. Every process of a server's tree (wrappers included) is read from /proc
//! before the kill and must be gone; whatever is left when a test ends gets SIGKILL by pid.

mod interop_support;
mod outside_support;
mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use interop_support::alive;
use mcp_supervisor_testkit::rawhttp::RawHttp;
use outside_support::*;
use serde_json::{Value, json};
use support::{free_port, path_str, supervisor_bin, temp_dir, under_sh, write_config};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};

/// What SPEC §7 allows after the kill.
const ALLOWED: Duration = Duration::from_secs(2);
/// How long the tests look before giving up.
const LOOK: Duration = Duration::from_secs(5);

#[derive(Clone, Copy, Debug)]
enum Kill {
    Pid,
    Group,
}

/// A server of these tests: its command line, the processes its tree has at least (wrappers
/// included), and what its own process has in its command line.
struct Case {
    name: &'static str,
    argv: Vec<String>,
    processes: usize,
    needle: &'static str,
}

fn cases() -> Vec<Case> {
    let py = py_server(&["--ignore-stdin-eof"]);
    vec![
        Case {
            name: "everything",
            argv: everything(),
            processes: 1,
            needle: EVERYTHING,
        },
        Case {
            name: "everything_sh",
            argv: under_sh(&everything()),
            processes: 2,
            needle: EVERYTHING,
        },
        Case {
            name: "everything_npx",
            argv: everything_npx(),
            processes: 3,
            needle: EVERYTHING,
        },
        Case {
            name: "py",
            argv: py.clone(),
            processes: 1,
            needle: PY,
        },
        Case {
            name: "py_sh",
            argv: under_sh(&py),
            processes: 2,
            needle: PY,
        },
    ]
}

/// Every process a test watches; whatever is still alive when it is dropped gets SIGKILL by
/// pid, so a failing test leaves nothing behind either.
struct Watched(Vec<u32>);

impl Drop for Watched {
    fn drop(&mut self) {
        for pid in self.0.iter().filter(|p| alive(**p)) {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
    }
}

/// A proxy in a process group of its own, spoken to over its stdio (kept open), its log in
/// `dir`. Dropped still running (a failed test): SIGKILL by pid, and its guard ends its servers.
struct Started {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    lines: Lines<BufReader<tokio::process::ChildStdout>>,
    port: u16,
    /// The HTTP face's port, when it serves that face (and not stdio).
    http: Option<u16>,
    what: String,
    log: PathBuf,
}

/// The face a proxy serves its client on.
#[derive(Clone, Copy, Debug)]
enum Face {
    Stdio,
    /// `--http 127.0.0.1:PORT` alone.
    Http,
}

fn start_proxy(dir: &Path, what: &str, args: &[String], face: Face) -> Started {
    let port = free_port();
    let log = dir.join(format!("{what}.log"));
    // `wrap` takes the server's command after `--`: the face flags go before it.
    let split = args.iter().position(|a| a == "--").unwrap_or(args.len());
    let http = match face {
        Face::Stdio => None,
        Face::Http => Some(free_port()),
    };
    let http_args = http.map(|p| vec!["--http".to_string(), format!("127.0.0.1:{p}")]);
    let mut child = tokio::process::Command::new(supervisor_bin())
        .args(&args[..split])
        .args(["--admin", &format!("127.0.0.1:{port}")])
        .args(http_args.unwrap_or_default())
        .args(&args[split..])
        .env("RUST_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).expect("create the log"))
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .expect("spawn mcp-supervisor");
    let stdin = child.stdin.take().expect("stdin is piped");
    let stdout = child.stdout.take().expect("stdout is piped");
    Started {
        child,
        stdin,
        lines: BufReader::new(stdout).lines(),
        port,
        http,
        what: what.to_string(),
        log,
    }
}

impl Started {
    /// A request over stdio, answered (bounded); what comes before its answer (the servers'
    /// own requests too) is skipped.
    async fn request(&mut self, id: u64, method: &str, params: Value) -> Value {
        let line = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
        self.send(&line).await;
        let answer = async {
            loop {
                let line = self.lines.next_line().await.ok().flatten()?;
                let message: Value = serde_json::from_str(&line).ok()?;
                if message["id"] == id && message.get("method").is_none() {
                    return Some(message);
                }
            }
        };
        let answer = tokio::time::timeout(LIMIT, answer).await.ok().flatten();
        answer.unwrap_or_else(|| panic!("{}: no answer to {method}", self.what))
    }

    async fn send(&mut self, message: &Value) {
        let line = format!("{message}\n");
        self.stdin.write_all(line.as_bytes()).await.expect("write");
        self.stdin.flush().await.expect("flush");
    }

    /// The client's handshake and a tools/list, answered: every server is initialized. Over
    /// HTTP, by the test kit's raw client (which declares no capabilities).
    async fn handshake(&mut self) {
        if let Some(port) = self.http {
            // Bounded: the port may take a moment to listen.
            let url = format!("http://127.0.0.1:{port}/mcp");
            let deadline = Instant::now() + LIMIT;
            let client = loop {
                match RawHttp::connect(&url, LIMIT).await {
                    Ok(client) => break client,
                    Err(error) => assert!(
                        Instant::now() < deadline,
                        "{}: no handshake over HTTP: {error:#}",
                        self.what
                    ),
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            };
            let (list, _) = client
                .request("tools/list", json!({}))
                .await
                .unwrap_or_else(|e| panic!("{}: tools/list over HTTP: {e:#}", self.what));
            assert!(list["tools"].is_array(), "{}: {list}", self.what);
            return;
        }
        // A host's capabilities: server-everything asks such a client for its roots, and the
        // request left pending (this client answers none) keeps it running after stdin ends.
        let capabilities =
            json!({ "roots": { "listChanged": true }, "sampling": {}, "elicitation": {} });
        let init = json!({ "protocolVersion": "2025-11-25", "capabilities": capabilities,
                           "clientInfo": { "name": "orphan-test", "version": "1" } });
        let answer = self.request(1, "initialize", init).await;
        assert!(answer.get("result").is_some(), "{}: {answer}", self.what);
        self.send(&json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }))
            .await;
        let list = self.request(2, "tools/list", json!({})).await;
        assert!(list["result"]["tools"].is_array(), "{}: {list}", self.what);
    }
}

/// The proxy's guard: its child that runs as one (looked for, bounded).
async fn guard_of(proxy: u32) -> u32 {
    let deadline = Instant::now() + LOOK;
    loop {
        let guard = interop_support::children_of(proxy)
            .into_iter()
            .find(|pid| is_guard(*pid));
        if let Some(guard) = guard {
            return guard;
        }
        assert!(
            Instant::now() < deadline,
            "no guard under the proxy {proxy}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Once every server of `proxy` is ready (`names`, with the processes `cases` expect), kill it
/// as told; every process of its servers must be gone within 2 s, and its guard soon after.
async fn kill_and_check(mut proxy: Started, names: &[String], cases: &[&Case], how: Kill) {
    let what = format!("{} killed by {how:?}", proxy.what);
    let pid = proxy.child.id().expect("the proxy runs");
    let mut watched = Watched(Vec::new());
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    proxy.handshake().await;
    let status = until_state(proxy.port, &refs, "ready").await;
    let guard = guard_of(pid).await;
    watched.0.push(guard);
    // A wrapper may still be starting its server (npx): wait (bounded) for the whole tree.
    let want: usize = cases.iter().map(|c| c.processes).sum();
    let deadline = Instant::now() + LOOK;
    let servers = loop {
        let servers = descendants(pid);
        let own = cases
            .iter()
            .all(|c| servers.iter().any(|p| cmdline(*p).contains(c.needle)));
        if servers.len() >= want && own {
            break servers;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: {} of {want} processes: {servers:?}; {status}",
            servers.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    watched.0.extend(&servers);

    let target = match how {
        Kill::Pid => pid.to_string(),
        Kill::Group => format!("-{pid}"),
    };
    let killed = Instant::now();
    let sent = Command::new("kill").args(["-KILL", "--", &target]).status();
    assert!(matches!(sent, Ok(s) if s.success()), "kill -KILL {target}");
    let _ = proxy.child.wait().await;
    let gone = all_gone(&servers, LOOK).await;
    let took = killed.elapsed();
    println!(
        "{what}: {} server process(es) gone {took:?} after the kill",
        servers.len()
    );
    let left: Vec<String> = servers
        .iter()
        .filter(|p| alive(**p))
        .map(|p| format!("{p} {}", cmdline(*p)))
        .collect();
    assert!(
        gone && took <= ALLOWED,
        "{what}: {left:?} of {servers:?} still alive {took:?} after the kill\n{}",
        std::fs::read_to_string(&proxy.log).unwrap_or_default()
    );
    assert!(
        all_gone(&[guard], LOOK).await,
        "{what}: the guard {guard} outlived its work"
    );
    watched.0.clear();
}

/// One `wrap` per case (of `only`, when given), all started at once, then each killed as told.
async fn wrap_killed(how: Kill, face: Face, only: &[&str], tag: &str) {
    let dir = temp_dir(tag);
    let mut cases = cases();
    cases.retain(|c| only.is_empty() || only.contains(&c.name));
    let mut proxies = Vec::new();
    for case in &cases {
        let mut args = vec!["wrap".to_string(), "--no-catalog".into(), "--".into()];
        args.extend(case.argv.iter().cloned());
        let what = format!("wrap-{face:?}-{}", case.name);
        proxies.push(start_proxy(&dir, &what, &args, face));
    }
    for (proxy, case) in proxies.into_iter().zip(&cases) {
        let name = wrap_name(proxy.port).await;
        kill_and_check(proxy, &[name], &[case], how).await;
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// The name `wrap` gave its server, from `/status` (bounded).
async fn wrap_name(port: u16) -> String {
    let deadline = Instant::now() + LIMIT;
    loop {
        if let Some(name) = status(port).await["servers"][0]["name"].as_str() {
            return name.to_string();
        }
        assert!(Instant::now() < deadline, "no /status on {port}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// One `serve` of every case.
async fn serve_killed(how: Kill, face: Face, tag: &str) {
    let dir = temp_dir(tag);
    let config = dir.join("servers.json");
    let cases = cases();
    let servers: serde_json::Map<String, Value> = cases
        .iter()
        .map(|c| (c.name.to_string(), entry(&c.argv, json!({}))))
        .collect();
    write_config(&config, Value::Object(servers));
    let args = ["serve", "--config", &path_str(&config), "--no-catalog"].map(String::from);
    let proxy = start_proxy(&dir, &format!("serve-{face:?}"), &args, face);
    let names: Vec<String> = cases.iter().map(|c| c.name.to_string()).collect();
    let refs: Vec<&Case> = cases.iter().collect();
    kill_and_check(proxy, &names, &refs, how).await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn wrap_killed_by_pid_leaves_no_outside_server() {
    wrap_killed(Kill::Pid, Face::Stdio, &[], "outside-orphan-wrap-pid").await;
}

#[tokio::test]
async fn wrap_killed_with_its_process_group_leaves_no_outside_server() {
    wrap_killed(Kill::Group, Face::Stdio, &[], "outside-orphan-wrap-group").await;
}

#[tokio::test]
async fn serve_killed_by_pid_leaves_no_outside_server() {
    serve_killed(Kill::Pid, Face::Stdio, "outside-orphan-serve-pid").await;
}

#[tokio::test]
async fn serve_killed_with_its_process_group_leaves_no_outside_server() {
    serve_killed(Kill::Group, Face::Stdio, "outside-orphan-serve-group").await;
}

#[tokio::test]
async fn serve_over_http_killed_by_pid_leaves_no_outside_server() {
    serve_killed(Kill::Pid, Face::Http, "outside-orphan-serve-http-pid").await;
}

#[tokio::test]
async fn serve_over_http_killed_with_its_process_group_leaves_no_outside_server() {
    serve_killed(Kill::Group, Face::Http, "outside-orphan-serve-http-group").await;
}

/// Over HTTP, `wrap` of the wrapped servers only: the SDK server under `sh -c` (which ignores
/// the end of stdin and SIGTERM) and server-everything under `npx`.
const WRAPPED: [&str; 2] = ["py_sh", "everything_npx"];

#[tokio::test]
async fn wrap_over_http_killed_by_pid_leaves_no_outside_server() {
    wrap_killed(
        Kill::Pid,
        Face::Http,
        &WRAPPED,
        "outside-orphan-wrap-http-pid",
    )
    .await;
}

#[tokio::test]
async fn wrap_over_http_killed_with_its_process_group_leaves_no_outside_server() {
    let tag = "outside-orphan-wrap-http-group";
    wrap_killed(Kill::Group, Face::Http, &WRAPPED, tag).await;
}
