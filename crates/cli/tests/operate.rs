//! End to end through the real binary: config errors, shutdown, the HTTP guard, status, health,
//! metrics, explicit reconnect and reload (SPEC §7–9).

mod support;

use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::json;
use support::*;

fn fast() -> serde_json::Value {
    json!({ "initialDelayMs": 50, "maxDelayMs": 400, "maxAttempts": 5 })
}

#[test]
fn a_bad_config_exits_2_and_names_every_problem() {
    let dir = temp_dir("bad");
    let path = dir.join("servers.json");
    std::fs::write(
        &path,
        r#"{"mcpServers": {
            "fs": {"command": "x", "reconnect": {"maxDelayMs": -5, "colour": 1}},
            "bad name!": {"command": "y"},
            "both": {"command": "z", "url": "http://127.0.0.1:1/mcp"}
        }}"#,
    )
    .expect("write");
    for command in ["check", "serve"] {
        let output = Command::new(supervisor_bin())
            .args([command, "--config", path.to_str().unwrap_or_default()])
            .stdin(Stdio::null())
            .output()
            .expect("run");
        assert_eq!(output.status.code(), Some(2), "{command} exits 2");
        let stderr = String::from_utf8_lossy(&output.stderr);
        for needle in [
            "mcpServers.fs.reconnect.maxDelayMs",
            "mcpServers.fs.reconnect.colour",
            "bad name!",
            "mcpServers.both",
        ] {
            assert!(
                stderr.contains(needle),
                "{command}: {needle} missing from:\n{stderr}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(dir);
}

async fn start_two(dir: &std::path::Path, port: u16) -> Running {
    let path = dir.join("servers.json");
    let fault = fault_bin();
    write_config(
        &path,
        json!({
            "plain": { "command": fault, "reconnect": fast() },
            "wrapped": { "command": "sh", "args": ["-c", format!("'{}'; true", fault.display())], "reconnect": fast() }
        }),
    );
    let admin = format!("127.0.0.1:{port}");
    Running::start(
        &[
            "serve",
            "--config",
            path.to_str().unwrap_or_default(),
            "--admin",
            &admin,
        ],
        port,
        &[],
    )
    .await
}

#[tokio::test]
async fn sigterm_stops_within_5_s_and_leaves_no_process_behind() {
    let dir = temp_dir("sigterm");
    let mut proxy = start_two(&dir, free_port()).await;
    let status = status_until(&proxy, Duration::from_secs(20), |s| {
        state_is(s, "plain", "ready") && state_is(s, "wrapped", "ready")
    })
    .await;
    let pids: Vec<u32> = ["plain", "wrapped"]
        .iter()
        .filter_map(|n| pid_of(&status, n))
        .collect();
    assert_eq!(pids.len(), 2);
    proxy.signal("TERM");
    assert_eq!(
        proxy.wait_exit(Duration::from_secs(7)).await,
        Some(0),
        "exits 0 within about 5 s"
    );
    for pid in pids {
        assert!(
            gone_within(pid, Duration::from_secs(2)).await,
            "process group of {pid} is gone"
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn the_end_of_stdin_stops_it_and_leaves_no_process_behind() {
    let dir = temp_dir("eof");
    let mut proxy = start_two(&dir, free_port()).await;
    let status = status_until(&proxy, Duration::from_secs(20), |s| {
        state_is(s, "plain", "ready") && state_is(s, "wrapped", "ready")
    })
    .await;
    let pids: Vec<u32> = ["plain", "wrapped"]
        .iter()
        .filter_map(|n| pid_of(&status, n))
        .collect();
    drop(proxy.child.stdin.take());
    assert!(
        proxy.wait_exit(Duration::from_secs(7)).await.is_some(),
        "exits when stdin ends"
    );
    for pid in pids {
        assert!(
            gone_within(pid, Duration::from_secs(2)).await,
            "process group of {pid} is gone"
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn the_http_face_refuses_a_foreign_origin_and_a_missing_token() {
    let dir = temp_dir("guard");
    let path = dir.join("servers.json");
    write_config(&path, json!({ "fault": { "command": fault_bin() } }));
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let proxy = Running::start(
        &[
            "serve",
            "--config",
            path.to_str().unwrap_or_default(),
            "--http",
            &addr,
            "--auth-token-env",
            "TEST_TOKEN",
        ],
        port,
        &[("TEST_TOKEN", "s3cret")],
    )
    .await;
    let client = reqwest::Client::new();
    let no_token = client.get(proxy.url("/status")).send().await.expect("GET");
    assert_eq!(
        no_token.status().as_u16(),
        401,
        "the admin endpoints need the token"
    );
    let wrong = client
        .get(proxy.url("/status"))
        .bearer_auth("nope")
        .send()
        .await
        .expect("GET");
    assert_eq!(wrong.status().as_u16(), 401);
    let mcp_no_token = client
        .post(proxy.url("/mcp"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#)
        .send()
        .await
        .expect("POST");
    assert_eq!(mcp_no_token.status().as_u16(), 401, "so does /mcp");
    let foreign = client
        .get(proxy.url("/status"))
        .bearer_auth("s3cret")
        .header("origin", "https://evil.example")
        .send()
        .await
        .expect("GET");
    assert_eq!(
        foreign.status().as_u16(),
        403,
        "a foreign browser origin is refused"
    );
    let rebinding = client
        .get(proxy.url("/status"))
        .bearer_auth("s3cret")
        .header("host", "evil.example")
        .send()
        .await
        .expect("GET");
    assert_eq!(
        rebinding.status().as_u16(),
        403,
        "a foreign Host is refused"
    );
    let ok = client
        .get(proxy.url("/status"))
        .bearer_auth("s3cret")
        .header("origin", format!("http://localhost:{port}"))
        .send()
        .await
        .expect("GET");
    assert_eq!(ok.status().as_u16(), 200);
    let body = ok.text().await.unwrap_or_default();
    assert!(
        !body.contains("s3cret"),
        "the token never appears in status"
    );
    drop(proxy);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn health_status_and_metrics_tell_the_truth_through_an_outage() {
    let dir = temp_dir("health");
    let path = dir.join("servers.json");
    // A slow first reconnect leaves a window in which the outage is visible.
    write_config(
        &path,
        json!({ "fault": { "command": fault_bin(), "reconnect": { "initialDelayMs": 1500, "maxDelayMs": 3000, "maxAttempts": 5 } } }),
    );
    let proxy = serve_config(&path, "--admin").await;
    let status = status_until(&proxy, Duration::from_secs(20), |s| {
        state_is(s, "fault", "ready")
    })
    .await;
    assert_eq!(get_json(&proxy.url("/healthz")).await.0, 200);
    let pid = pid_of(&status, "fault").expect("pid");
    kill9(pid);

    let during = status_until(&proxy, Duration::from_secs(5), |s| {
        state_is(s, "fault", "reconnecting")
    })
    .await;
    assert!(
        server(&during, "fault")["lastError"]
            .as_str()
            .unwrap_or_default()
            .contains("exited"),
        "{during}"
    );
    let (code, body) = get_json(&proxy.url("/healthz")).await;
    assert_eq!(code, 503, "not healthy while the server is down: {body}");
    assert_eq!(
        body["servers"][0]["server"], "fault",
        "the reason names the server"
    );

    status_until(&proxy, Duration::from_secs(10), |s| {
        state_is(s, "fault", "ready")
    })
    .await;
    assert_eq!(
        get_json(&proxy.url("/healthz")).await.0,
        200,
        "healthy again"
    );

    let text = reqwest::get(proxy.url("/metrics"))
        .await
        .expect("GET")
        .text()
        .await
        .unwrap_or_default();
    let lines = text.lines().map(|l| Ok(l.to_string()));
    let scrape = prometheus_parse::Scrape::parse(lines).expect("valid Prometheus text");
    let restarts = scrape
        .samples
        .iter()
        .find(|s| {
            s.metric == "mcp_supervisor_restarts_total" && s.labels.get("server") == Some("fault")
        })
        .map(|s| s.value.clone());
    assert!(
        matches!(restarts, Some(prometheus_parse::Value::Counter(v)) if v == 1.0),
        "one restart counted: {restarts:?}"
    );
    assert!(
        scrape
            .samples
            .iter()
            .any(|s| s.metric == "mcp_supervisor_server_up")
    );
    drop(proxy);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn post_reconnect_brings_a_gave_up_server_back_with_a_fresh_budget() {
    let dir = temp_dir("reconnect");
    let path = dir.join("servers.json");
    let state = dir.join("starts");
    // Starts 1-3 fail: the first attempt and 2 retries exhaust maxAttempts 2.
    write_config(
        &path,
        json!({ "flaky": {
            "command": fault_bin(),
            "args": ["--fail-first", "3", "--state-file", state],
            "reconnect": { "initialDelayMs": 50, "maxDelayMs": 200, "maxAttempts": 2 }
        } }),
    );
    let proxy = serve_config(&path, "--admin").await;
    let gave_up = status_until(&proxy, Duration::from_secs(10), |s| {
        state_is(s, "flaky", "gave_up")
    })
    .await;
    assert_eq!(
        server(&gave_up, "flaky")["attempts"],
        2,
        "all maxAttempts were spent: {gave_up}"
    );
    assert_eq!(
        server(&gave_up, "flaky")["generation"],
        3,
        "the first attempt and 2 retries"
    );
    assert_eq!(get_json(&proxy.url("/healthz")).await.0, 503);

    let table = Command::new(supervisor_bin())
        .args(["status", "--url", &proxy.url("")])
        .output()
        .expect("status");
    let table = String::from_utf8_lossy(&table.stdout).to_string();
    assert!(
        table.contains("flaky") && table.contains("gave_up"),
        "the table shows the state:\n{table}"
    );

    let response = reqwest::Client::new()
        .post(proxy.url("/servers/flaky/reconnect"))
        .send()
        .await
        .expect("POST");
    assert_eq!(response.status().as_u16(), 202);
    let after = status_until(&proxy, Duration::from_secs(10), |s| {
        state_is(s, "flaky", "ready")
    })
    .await;
    assert_eq!(server(&after, "flaky")["attempts"], 0);
    let missing = reqwest::Client::new()
        .post(proxy.url("/servers/nobody/reconnect"))
        .send()
        .await
        .expect("POST");
    assert_eq!(missing.status().as_u16(), 404);
    drop(proxy);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn reload_adds_removes_and_changes_servers_and_leaves_unchanged_ones_alone() {
    let dir = temp_dir("reload");
    let path = dir.join("servers.json");
    let fault = fault_bin();
    write_config(
        &path,
        json!({
            "same": { "command": fault },
            "changed": { "command": fault },
            "removed": { "command": fault }
        }),
    );
    let proxy = serve_config(&path, "--admin").await;
    let before = status_until(&proxy, Duration::from_secs(20), |s| {
        ["same", "changed", "removed"]
            .iter()
            .all(|n| state_is(s, n, "ready"))
    })
    .await;
    let (same, changed, removed) = (
        pid_of(&before, "same"),
        pid_of(&before, "changed"),
        pid_of(&before, "removed"),
    );

    write_config(
        &path,
        json!({
            "same": { "command": fault },
            "changed": { "command": fault, "args": ["--stderr-lines", "1"] },
            "added": { "command": fault }
        }),
    );
    proxy.signal("HUP");
    let after = status_until(&proxy, Duration::from_secs(20), |s| {
        state_is(s, "added", "ready")
            && state_is(s, "changed", "ready")
            && pid_of(s, "changed") != changed
            && server(s, "removed").is_null()
    })
    .await;
    assert_eq!(
        pid_of(&after, "same"),
        same,
        "an unchanged server keeps its process"
    );
    assert!(
        gone_within(removed.unwrap_or(0), Duration::from_secs(5)).await,
        "a removed server is stopped"
    );
    assert!(
        gone_within(changed.unwrap_or(0), Duration::from_secs(5)).await,
        "a changed server was restarted"
    );

    std::fs::write(&path, r#"{"mcpServers": {"same": {"command": 42}}}"#).expect("write");
    proxy.signal("HUP");
    tokio::time::sleep(Duration::from_millis(300)).await; // give the rejected reload its chance to do harm
    let still = status_until(&proxy, Duration::from_secs(5), |s| {
        state_is(s, "same", "ready")
    })
    .await;
    assert_eq!(
        pid_of(&still, "same"),
        same,
        "an invalid config leaves everything running"
    );
    assert!(state_is(&still, "added", "ready"));
    drop(proxy);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_change_to_the_config_file_is_applied_without_a_signal() {
    let dir = temp_dir("watch");
    let path = dir.join("servers.json");
    let fault = fault_bin();
    write_config(&path, json!({ "first": { "command": fault } }));
    let proxy = serve_config(&path, "--admin").await;
    let before = status_until(&proxy, Duration::from_secs(20), |s| {
        state_is(s, "first", "ready")
    })
    .await;
    write_config(
        &path,
        json!({ "first": { "command": fault }, "second": { "command": fault } }),
    );
    let after = status_until(&proxy, Duration::from_secs(20), |s| {
        state_is(s, "second", "ready")
    })
    .await;
    assert_eq!(
        pid_of(&after, "first"),
        pid_of(&before, "first"),
        "the unchanged server is not touched"
    );
    drop(proxy);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_storm_of_rewrites_and_sighups_never_runs_two_processes_of_a_server() {
    let ledger = mcp_supervisor_testkit::ledger::Ledger::new("reload-storm");
    let path = ledger.dir.join("servers.json");
    // Every instance is slow to die: its stop lasts until the SIGKILL, about 2 s in.
    write_config(&path, json!({ "slow": ledger.server(0, 30) }));
    let proxy = serve_config(&path, "--admin").await;
    let before = status_until(&proxy, Duration::from_secs(20), |s| {
        state_is(s, "slow", "ready")
    })
    .await;
    let base = server(&before, "slow")["tools"].as_u64().unwrap_or(0);

    // 20 rewrites, each followed by a SIGHUP (every fifth by three); the file watch sees them
    // too. All but the first arrive while the first reload is held in the slow stop.
    for k in 1..=20u32 {
        write_config(&path, json!({ "slow": ledger.server(k, 30) }));
        for _ in 0..(if k % 5 == 0 { 3 } else { 1 }) {
            proxy.signal("HUP");
        }
        tokio::time::sleep(Duration::from_millis(20)).await; // pace the rewrites
    }
    let after = status_until(&proxy, Duration::from_secs(30), |s| {
        state_is(s, "slow", "ready") && server(s, "slow")["tools"].as_u64() == Some(base + 20)
    })
    .await;

    assert_eq!(
        ledger.overlaps(),
        "",
        "two instances of `slow` were alive at once"
    );
    assert_eq!(
        ledger.alive(),
        vec![pid_of(&after, "slow").unwrap_or(0)],
        "the last config's instance runs alone"
    );
    // The first reload, then one for all that came meanwhile (a watch tick may add one more).
    let started = ledger.started().len();
    assert!(started <= 4, "the requests coalesced: {started} instances");
    drop(proxy);
    assert_eq!(
        ledger.alive(),
        Vec::<u32>::new(),
        "shutdown leaves no instance"
    );
}
