//! Notifications reach a server in the order the client sent them (issue 17): a client sends
//! a burst of notifications through `wrap`, and a raw server that records every notification it
//! receives must see them all, in the client's order. Over stdio, and over streamable HTTP,
//! where each notification is a POST of its own and a server handles POSTs at once.

mod support;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{Proxy, args, free_port, path_str, temp_dir};

/// How many notifications the client sends in one burst.
const BURST: usize = 300;

fn recording_server() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/py/recording_server.py")
}

/// The `n` of every `notifications/x-order` the server recorded, in its order.
fn recorded(log: &Path) -> Vec<u64> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|n| n["method"] == "notifications/x-order")
        .filter_map(|n| n["params"]["n"].as_u64())
        .collect()
}

/// Initialize through `proxy`, send the burst in one write, and wait (bounded) until the server
/// recorded all of it; the server's record, in its order.
async fn burst_through(mut proxy: Proxy, log: &Path) -> Vec<u64> {
    proxy.initialize().await;
    let mut burst = String::new();
    for n in 0..BURST {
        let line = json!({"jsonrpc": "2.0", "method": "notifications/x-order", "params": {"n": n}});
        burst.push_str(&line.to_string());
        burst.push('\n');
    }
    proxy.send_raw(&burst).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut seen = recorded(log);
    while seen.len() < BURST && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
        seen = recorded(log);
    }
    proxy.stop().await;
    seen
}

fn assert_in_order(seen: &[u64]) {
    assert_eq!(
        seen.len(),
        BURST,
        "the server got {} of {BURST} notifications",
        seen.len()
    );
    let expected: Vec<u64> = (0..BURST as u64).collect();
    assert_eq!(
        seen, expected,
        "the server saw the notifications out of order"
    );
}

#[tokio::test]
async fn a_burst_of_notifications_reaches_a_stdio_server_in_the_clients_order() {
    let dir = temp_dir("notify-order-stdio");
    let log = dir.join("notifications.jsonl");
    let python = mcp_supervisor_testkit::python("import json");
    let proxy = Proxy::start(&args(&[
        "wrap",
        "--no-catalog",
        "--",
        &path_str(&python),
        &path_str(&recording_server()),
        &path_str(&log),
    ]));
    assert_in_order(&burst_through(proxy, &log).await);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_burst_of_notifications_reaches_an_http_server_in_the_clients_order() {
    let dir = temp_dir("notify-order-http");
    let log = dir.join("notifications.jsonl");
    let python = mcp_supervisor_testkit::python("import json");
    let port = free_port();
    let mut server = tokio::process::Command::new(&python)
        .arg(recording_server())
        .arg(&log)
        .arg(port.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn the recording server");
    let deadline = Instant::now() + Duration::from_secs(20);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(
            Instant::now() < deadline,
            "the recording server did not listen on {port}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let proxy = Proxy::start(&args(&[
        "wrap",
        "--no-catalog",
        "--url",
        &format!("http://127.0.0.1:{port}/mcp"),
    ]));
    let seen = burst_through(proxy, &log).await;
    let _ = server.kill().await;
    assert_in_order(&seen);
    let _ = std::fs::remove_dir_all(&dir);
}
