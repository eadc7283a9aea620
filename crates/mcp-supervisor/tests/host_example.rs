//! The embedding example (`examples/host.rs`) runs as its docs say: two fault servers, a call
//! past its deadline, a `kill -9` of one server that the next call heals, and a stop that leaves
//! no server process behind. It runs the example's own binary, as a user would.

use std::time::Duration;

use mcp_supervisor_testkit::{alive, example_bin, fault_bin};

/// The numbers on the line of `marker`, after it.
fn numbers_after(output: &str, marker: &str) -> Vec<u32> {
    output
        .lines()
        .find_map(|l| l.split_once(marker).map(|(_, after)| after))
        .unwrap_or_default()
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse().ok())
        .collect()
}

#[tokio::test]
async fn the_host_example_heals_a_killed_server_and_stops_cleanly() {
    let mut command = tokio::process::Command::new(example_bin("mcp-supervisor", "host"));
    command.arg(fault_bin()).kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(120), command.output())
        .await
        .expect("the example finishes within 2 minutes")
        .expect("the example runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the example failed ({}):\n{stdout}\n{stderr}",
        output.status
    );

    // Both servers came up and published their tools.
    // (However many built-in tools the fault server has, each server lists them all.)
    for server in ["alpha", "beta"] {
        let listed = stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{server}: ")))
            .and_then(|rest| rest.split(' ').next())
            .and_then(|n| n.parse::<usize>().ok());
        assert!(
            listed.is_some_and(|n| n >= 10)
                && stdout.contains(&format!("tools ({server}__add, {server}__echo")),
            "{server}'s tools not listed: {stdout}"
        );
    }
    // The deadline held.
    assert!(
        stdout.contains("alpha__sleep: \"sleep\" on server \"alpha\" timed out after 300 ms"),
        "{stdout}"
    );
    // The kill, then the heal: the same turn's call answered on generation 2, a new process.
    assert!(
        stdout.contains("turn 3: killed beta with SIGKILL (pid "),
        "{stdout}"
    );
    assert!(
        stdout
            .contains("turn 3: alpha__add = 13, beta__echo = \"turn 3\" (beta generation 2, pid "),
        "{stdout}"
    );
    assert!(
        stdout.contains("turn 3: healed: beta answered on a fresh process"),
        "{stdout}"
    );
    assert!(
        stdout.contains("turn 4: alpha__add = 14, beta__echo = \"turn 4\" (beta generation 2"),
        "{stdout}"
    );
    // The hub's events showed the recovery (the backoff alone lasts 200 ms).
    assert!(stdout.contains("event: beta is reconnecting"), "{stdout}");
    // A clean stop: the example says so, and no process it names is alive.
    assert!(
        stdout.contains("stopped cleanly: no server process left"),
        "{stdout}"
    );
    let killed = numbers_after(&stdout, "killed beta with SIGKILL (pid ");
    let pids = numbers_after(&stdout, "stopped cleanly: no server process left (pids ");
    assert!(
        pids.len() == 3 && killed.first().is_some_and(|k| pids.contains(k)),
        "alpha's, and beta's before ({killed:?}) and after the kill: {pids:?}"
    );
    for pid in pids {
        assert!(!alive(pid), "server process {pid} is still alive");
    }
}
