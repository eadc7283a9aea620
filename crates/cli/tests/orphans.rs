//! No orphan, however the proxy ends (SPEC §7): a proxy killed at once (SIGKILL of its pid, or
//! of its whole process group) leaves no server process 2 s later, a server that ignores the end
//! of stdin and a grandchild under `sh -c` included; and its orphan guard is gone too.
//!
//! Each proxy here is started in a process group of its own so that killing its group cannot
//! reach the test runner. The servers are `mcp-fault-server --ignore-stdin-eof`, which writes
//! its pid to a file; every process of its group (the `sh` too) must be gone.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use support::{alive, fault_bin, supervisor_bin, temp_dir, write_config};

/// The hidden argument of the guard process (`mcp_supervisor::guard::GUARD_ARG`).
const GUARD_ARG: &str = "__mcp-supervisor-orphan-guard";
/// What SPEC §7 allows after the kill.
const ALLOWED: Duration = Duration::from_secs(2);
/// How long the tests look before giving up.
const LOOK: Duration = Duration::from_secs(5);

#[derive(Clone, Copy)]
enum Kill {
    Pid,
    Group,
}

/// The fault server ignoring the end of stdin, writing its pid to `pid_file`: directly, or as a
/// grandchild under `sh -c` (the `; true` keeps `sh` from exec'ing it) that ignores SIGTERM as
/// well, like `sh` itself (`trap '' TERM` is inherited), so that only SIGKILL ends them.
fn server_command(pid_file: &Path, sh: bool) -> Vec<String> {
    let direct = vec![
        fault_bin().display().to_string(),
        "--ignore-stdin-eof".into(),
        "--pid-file".into(),
        pid_file.display().to_string(),
    ];
    if sh {
        support::under_sh(&direct)
    } else {
        direct
    }
}

/// `wrap -- SERVER` of [`server_command`].
fn wrap_args(pid_file: &Path, under_sh: bool) -> Vec<String> {
    let mut args = vec!["wrap".to_string(), "--".to_string()];
    args.extend(server_command(pid_file, under_sh));
    args
}

/// `mcp-supervisor ARGS` in a process group of its own, stdin kept open.
fn start_proxy(args: &[String]) -> Child {
    use std::os::unix::process::CommandExt;
    Command::new(supervisor_bin())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("spawn mcp-supervisor")
}

/// `(pid, ppid, pgrp)` of every live (not zombie) process.
fn processes() -> Vec<(u32, u32, u32)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().take(3).collect();
        if fields.len() < 3 || matches!(fields[0], "Z" | "X") {
            continue;
        }
        let Some(pid) = entry.file_name().to_str().and_then(|p| p.parse().ok()) else {
            continue;
        };
        if let (Ok(ppid), Ok(pgrp)) = (fields[1].parse(), fields[2].parse()) {
            found.push((pid, ppid, pgrp));
        }
    }
    found
}

fn pgrp_of(pid: u32) -> Option<u32> {
    processes()
        .into_iter()
        .find(|(p, _, _)| *p == pid)
        .map(|(_, _, g)| g)
}

fn is_guard(pid: u32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| c.split(|b| *b == 0).any(|arg| arg == GUARD_ARG.as_bytes()))
        .unwrap_or(false)
}

/// Every process a test watches; whatever is still alive when it is dropped gets SIGKILL, so a
/// failing test leaves nothing behind either.
struct Watched(Vec<u32>);

impl Drop for Watched {
    fn drop(&mut self) {
        for pid in self.0.iter().filter(|p| alive(**p)) {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
    }
}

/// Wait (bounded) until each pid file names a running server, then return every process of
/// those servers' groups, and the proxy's guard if it has one (looked for up to 5 s more).
async fn servers_and_guard(proxy: u32, pid_files: &[PathBuf]) -> (Vec<u32>, Option<u32>) {
    let deadline = Instant::now() + Duration::from_secs(20);
    let members = loop {
        let pids: Vec<u32> = pid_files
            .iter()
            .filter_map(|f| std::fs::read_to_string(f).ok())
            .filter_map(|t| t.trim().parse().ok())
            .collect();
        let groups: Vec<u32> = pids.iter().filter_map(|p| pgrp_of(*p)).collect();
        if groups.len() == pid_files.len() {
            break processes()
                .into_iter()
                .filter(|(_, _, g)| groups.contains(g))
                .map(|(pid, _, _)| pid)
                .collect();
        }
        assert!(
            Instant::now() < deadline,
            "servers not running: pids {pids:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let deadline = Instant::now() + LOOK;
    loop {
        // Between its fork and its exec, a guard still shows the proxy's command line.
        let guard = processes()
            .into_iter()
            .find(|(pid, ppid, _)| *ppid == proxy && is_guard(*pid))
            .map(|(pid, _, _)| pid);
        if guard.is_some() || Instant::now() >= deadline {
            return (members, guard);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Kill the proxy as told, then assert that every server process is gone within 2 s and the
/// guard soon after.
async fn kill_and_check(mut proxy: Child, how: Kill, pid_files: &[PathBuf], what: &str) {
    let pid = proxy.id();
    let (servers, guard) = servers_and_guard(pid, pid_files).await;
    let mut watched = Watched(servers.clone());
    watched.0.extend(guard);
    assert!(
        servers.len() >= pid_files.len(),
        "{what}: servers {servers:?}"
    );
    let target = match how {
        Kill::Pid => pid.to_string(),
        Kill::Group => format!("-{pid}"),
    };
    let killed = Instant::now();
    let status = Command::new("kill").args(["-KILL", "--", &target]).status();
    assert!(
        matches!(status, Ok(s) if s.success()),
        "kill -KILL {target}"
    );
    let _ = proxy.wait();
    while servers.iter().any(|p| alive(*p)) && killed.elapsed() < LOOK {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let took = killed.elapsed();
    println!(
        "{what}: {} server process(es) gone {took:?} after the kill",
        servers.len()
    );
    let left: Vec<u32> = servers.iter().copied().filter(|p| alive(*p)).collect();
    assert!(
        left.is_empty() && took <= ALLOWED,
        "{what}: server processes {left:?} of {servers:?} still alive {took:?} after the kill"
    );
    let guard = guard.expect("the proxy runs a guard");
    while alive(guard) && killed.elapsed() < LOOK {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(!alive(guard), "{what}: the guard {guard} outlived its work");
    watched.0.clear();
}

/// `wrap` of the EOF-ignoring server, directly and under `sh -c` (one proxy each).
async fn wrap_killed(how: Kill, tag: &str) {
    let dir = temp_dir(tag);
    for under_sh in [false, true] {
        let pid_file = dir.join(format!("server-{under_sh}.pid"));
        let args = wrap_args(&pid_file, under_sh);
        let what = format!("wrap, sh -c: {under_sh}");
        kill_and_check(start_proxy(&args), how, &[pid_file], &what).await;
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// `serve` of two EOF-ignoring servers, one directly and one under `sh -c`.
async fn serve_killed(how: Kill, tag: &str) {
    let dir = temp_dir(tag);
    let config = dir.join("servers.json");
    let files = [dir.join("direct.pid"), dir.join("wrapped.pid")];
    let entry = |pid_file: &Path, under_sh: bool| {
        let command = server_command(pid_file, under_sh);
        json!({ "command": command[0], "args": command[1..] })
    };
    write_config(
        &config,
        json!({ "direct": entry(&files[0], false), "wrapped": entry(&files[1], true) }),
    );
    let args = ["serve", "--config", config.to_str().unwrap_or_default()].map(String::from);
    kill_and_check(start_proxy(&args), how, &files, "serve").await;
    let _ = std::fs::remove_dir_all(dir);
}

/// `serve` of the same two servers, each in a sandbox (SPEC §16) that may write their pid files:
/// the sandbox (a helper that executes the server) changes nothing of the guard's work.
#[tokio::test]
async fn serve_killed_leaves_no_sandboxed_server() {
    let dir = temp_dir("orphan-serve-sandboxed");
    let config = dir.join("servers.json");
    let files = [dir.join("direct.pid"), dir.join("wrapped.pid")];
    let entry = |pid_file: &Path, under_sh: bool| {
        let command = server_command(pid_file, under_sh);
        json!({ "command": command[0], "args": command[1..], "sandbox": { "write": [dir] } })
    };
    write_config(
        &config,
        json!({ "direct": entry(&files[0], false), "wrapped": entry(&files[1], true) }),
    );
    let args = ["serve", "--config", config.to_str().unwrap_or_default()].map(String::from);
    kill_and_check(start_proxy(&args), Kill::Pid, &files, "serve, sandboxed").await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn wrap_killed_by_pid_leaves_no_server() {
    wrap_killed(Kill::Pid, "orphan-wrap-pid").await;
}

#[tokio::test]
async fn wrap_killed_with_its_process_group_leaves_no_server() {
    wrap_killed(Kill::Group, "orphan-wrap-group").await;
}

#[tokio::test]
async fn serve_killed_by_pid_leaves_no_server() {
    serve_killed(Kill::Pid, "orphan-serve-pid").await;
}

#[tokio::test]
async fn serve_killed_with_its_process_group_leaves_no_server() {
    serve_killed(Kill::Group, "orphan-serve-group").await;
}

#[tokio::test]
async fn a_clean_stop_ends_the_guard_too() {
    let dir = temp_dir("orphan-clean");
    let pid_file = dir.join("server.pid");
    let args = wrap_args(&pid_file, false);
    let mut proxy = start_proxy(&args);
    let (servers, guard) = servers_and_guard(proxy.id(), &[pid_file]).await;
    let mut watched = Watched(servers.clone());
    watched.0.extend(guard);
    let guard = guard.expect("the proxy runs a guard");
    drop(proxy.stdin.take()); // the end of stdin stops `wrap`
    let stopped = Instant::now();
    while matches!(proxy.try_wait(), Ok(None)) && stopped.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        matches!(proxy.try_wait(), Ok(Some(_))),
        "wrap exits at the end of stdin"
    );
    // The proxy waits for its guard before it exits.
    assert!(!alive(guard), "the guard is gone once the proxy has exited");
    assert!(
        servers.iter().all(|p| !alive(*p)),
        "no server process is left: {servers:?}"
    );
    watched.0.clear();
    let _ = std::fs::remove_dir_all(dir);
}
