//! The config file's watch, through the real binary: an editor's save (a new file renamed over
//! the config) is one reload (SPEC §9, reload), and the watch does not hold the exit back.

mod support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use support::*;

/// How many lines of the proxy's log contain `needle`.
fn lines_with(log: &std::path::Path, needle: &str) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|line| line.contains(needle))
        .count()
}

#[tokio::test]
async fn a_config_renamed_over_the_old_one_is_one_reload_at_once() {
    let dir = temp_dir("watch-rename");
    let (path, log) = (dir.join("servers.json"), dir.join("proxy.log"));
    let fault = fault_bin();
    write_config(&path, json!({ "first": { "command": fault } }));
    let port = free_port();
    let child = Command::new(supervisor_bin())
        .args(["serve", "--config", path.to_str().unwrap_or_default()])
        .args(["--admin", &format!("127.0.0.1:{port}")])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log file"))
        .spawn()
        .expect("spawn mcp-supervisor");
    let mut proxy = Running { child, port };
    let before = status_until(&proxy, Duration::from_secs(20), |s| {
        state_is(s, "first", "ready")
    })
    .await;

    // As an editor saves: the new text in a file beside it, renamed over it.
    let temp = dir.join(".servers.json.tmp");
    let text = json!({ "mcpServers": {
        "first": { "command": fault },
        "second": { "command": fault }
    } });
    std::fs::write(&temp, text.to_string()).expect("write");
    std::fs::rename(&temp, &path).expect("rename");
    let deadline = Instant::now() + Duration::from_secs(20);
    while lines_with(&log, "reloaded ") == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        lines_with(&log, "reloaded "),
        1,
        "{}",
        std::fs::read_to_string(&log).unwrap_or_default()
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
    // A second save: a second reload, and no more than the two.
    let text = json!({ "mcpServers": { "first": { "command": fault } } });
    std::fs::write(&temp, text.to_string()).expect("write");
    std::fs::rename(&temp, &path).expect("rename");
    status_until(&proxy, Duration::from_secs(20), |s| {
        s["servers"]
            .as_array()
            .is_some_and(|servers| servers.len() == 1)
    })
    .await;
    assert_eq!(lines_with(&log, "changed ("), 2, "one request per save");

    // Nothing of the watch holds the exit back once the servers have stopped.
    proxy.signal("INT");
    assert!(
        proxy.wait_exit(Duration::from_secs(5)).await.is_some(),
        "the proxy exits"
    );
    drop(proxy);
    let _ = std::fs::remove_dir_all(dir);
}
