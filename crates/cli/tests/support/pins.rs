//! Helpers of the pin tests (SPEC §13) over a [`Proxy`]: what tools/list shows of a tool, a
//! poll until it shows a description (or nothing), `mcp-supervisor approve`, the refusal of a
//! withheld tool and the `/status` count of them. Every wait is bounded.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{ANSWER_LIMIT, Proxy, get_json, server, supervisor_bin};

/// Poll tools/list (bounded by `limit`) until `name` is listed with `description`, or not
/// listed when it is `None`; returns how long it took. (The server's own list_changed may reach
/// the client before the proxy's re-sync is done, so the list itself is watched.)
pub async fn listed_as(
    proxy: &mut Proxy,
    name: &str,
    description: Option<&str>,
    limit: Duration,
) -> Duration {
    let began = Instant::now();
    loop {
        let tool = listed(proxy, name).await;
        let now = tool
            .as_ref()
            .map(|t| t["description"].as_str().unwrap_or_default());
        if now == description {
            return began.elapsed();
        }
        assert!(
            began.elapsed() < limit,
            "{name} never listed as {description:?} within {limit:?}; it is {tool:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The definition of `name` in the proxy's tools/list, if listed.
pub async fn listed(proxy: &mut Proxy, name: &str) -> Option<Value> {
    let list = proxy.request("tools/list", json!({})).await;
    list["tools"]
        .as_array()
        .expect("a tools array")
        .iter()
        .find(|t| t["name"] == name)
        .cloned()
}

/// `mcp-supervisor approve ARGS`: its exit code and stdout.
pub fn approve(list: &[String]) -> (i32, String) {
    let output = std::process::Command::new(supervisor_bin())
        .arg("approve")
        .args(list)
        .output()
        .expect("run approve");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    (
        output.status.code().unwrap_or(-1),
        format!("{stdout}{stderr}"),
    )
}

/// A call refused with a JSON-RPC error that names the approval.
pub fn assert_refused(answer: &Value, server: &str) {
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    assert!(
        message.contains(&format!("mcp-supervisor approve {server}"))
            && message.contains("description"),
        "{answer}"
    );
}

/// Wait (bounded) until `/status` on the admin `port` counts `n` withheld tools of `name`.
pub async fn withheld_until(port: u16, name: &str, n: u64) {
    let began = Instant::now();
    loop {
        let (_, status) = get_json(&format!("http://127.0.0.1:{port}/status")).await;
        if server(&status, name)["withheldTools"] == n {
            return;
        }
        assert!(
            began.elapsed() < ANSWER_LIMIT,
            "withheldTools of {name} never {n}: {status}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
