//! End to end through the real binary and real fault servers (SPEC §13): in `serve`, an
//! on-demand server with a saved catalog has no process until the first call (its tools are
//! listed at once, `/status` says `idle` with no pid), the call starts it, `idleTimeoutMs` stops
//! it again (`idle`, `/healthz` 200, the process gone) and the next call starts it once more; with
//! no saved catalog it runs once to learn its lists, then stops. `wrap --on-demand` answers the
//! handshake and the list from the saved catalog with nothing running, and starts the server on
//! the first call.
//!
//! Every process is stopped by its own id: the proxy by closing its stdin (it stops its servers),
//! then SIGKILL by pid if it has not exited within 10 s.

mod support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::*;

/// The idle timeout of the on-demand servers here.
const IDLE_MS: u64 = 1500;
/// The bound of any wait for a state.
const LIMIT: Duration = Duration::from_secs(20);

/// The fault servers still running whose parent is `parent`.
fn fault_children(parent: u32) -> Vec<u32> {
    let fault = path_str(&fault_bin());
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let ppid = stat
                .rfind(')')
                .and_then(|i| stat[i + 1..].split_whitespace().nth(1))
                .and_then(|p| p.parse::<u32>().ok());
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            ppid == Some(parent)
                && alive(*pid)
                && String::from_utf8_lossy(&cmdline).starts_with(&fault)
        })
        .collect()
}

async fn status(port: u16) -> Value {
    let (code, status) = get_json(&format!("http://127.0.0.1:{port}/status")).await;
    assert_eq!(code, 200);
    status
}

/// GET /status until server `name` is in `state` (bounded); returns that server's entry.
async fn until_state(port: u16, name: &str, state: &str) -> Value {
    let deadline = Instant::now() + LIMIT;
    loop {
        let now = status(port).await;
        if state_is(&now, name, state) {
            return server(&now, name).clone();
        }
        assert!(
            Instant::now() < deadline,
            "{name} never became {state}: {now}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn echo(proxy: &mut Proxy, tool: &str, message: &str) {
    let result = proxy
        .request(
            "tools/call",
            json!({"name": tool, "arguments": {"message": message}}),
        )
        .await;
    assert_eq!(result["content"][0]["text"], message, "{result}");
}

#[tokio::test]
async fn serve_starts_an_on_demand_server_on_its_first_call_and_stops_it_when_idle() {
    let dir = temp_dir("on-demand-serve");
    let state = dir.join("state");
    let config = dir.join("servers.json");
    write_config(
        &config,
        json!({
            "always": { "command": fault_bin(), "health": { "intervalMs": 0 } },
            "lazy": {
                "command": fault_bin(),
                "start": "onDemand",
                "idleTimeoutMs": IDLE_MS,
                "health": { "intervalMs": 200 }
            }
        }),
    );

    // Run 1, no saved catalog: it runs once to learn its lists, then stops.
    let port = free_port();
    let mut proxy = Proxy::start(&serve_args(&config, &state, Some(port)));
    proxy.initialize().await;
    let lazy = until_state(port, "lazy", "idle").await;
    assert_eq!(
        (lazy["pid"].clone(), lazy["generation"].clone()),
        (Value::Null, json!(1))
    );
    let names = proxy.tool_names().await;
    assert!(names.contains(&"lazy__echo".to_string()), "{names:?}");
    proxy.stop().await;

    // Run 2: the saved catalog is listed at once; nothing of "lazy" runs.
    let port = free_port();
    let mut proxy = Proxy::start(&serve_args(&config, &state, Some(port)));
    let proxy_pid = proxy.child.id().expect("the proxy runs");
    proxy.initialize().await;
    assert_eq!(proxy.tool_names().await, names, "listed from the catalog");
    let always = until_state(port, "always", "ready").await;
    let always_pid = always["pid"].as_u64().expect("a pid") as u32;
    let lazy = server(&status(port).await, "lazy").clone();
    assert_eq!(
        (
            lazy["state"].as_str(),
            lazy["pid"].clone(),
            lazy["toolList"].as_str()
        ),
        (Some("idle"), Value::Null, Some("cache")),
        "{lazy}"
    );
    let (code, _) = get_json(&format!("http://127.0.0.1:{port}/healthz")).await;
    assert_eq!(code, 200, "idle is not an outage");
    // Longer than the idle timeout and several probe intervals: still nothing started.
    tokio::time::sleep(Duration::from_millis(IDLE_MS + 500)).await;
    assert_eq!(
        fault_children(proxy_pid),
        [always_pid],
        "only \"always\" runs"
    );

    // The first call starts it, and waits for it.
    echo(&mut proxy, "lazy__echo", "first").await;
    let lazy = server(&status(port).await, "lazy").clone();
    assert_eq!(lazy["state"], "ready", "{lazy}");
    let first_pid = lazy["pid"].as_u64().expect("a pid once started") as u32;
    assert!(alive(first_pid));
    let mut running = fault_children(proxy_pid);
    running.sort_unstable();
    let mut expected = vec![always_pid, first_pid];
    expected.sort_unstable();
    assert_eq!(running, expected);

    // No request for idleTimeoutMs (its health probes go on meanwhile): stopped, not an outage.
    let lazy = until_state(port, "lazy", "idle").await;
    assert_eq!(
        (
            lazy["pid"].clone(),
            lazy["restarts"].clone(),
            lazy["attempts"].clone()
        ),
        (Value::Null, json!(0), json!(0)),
        "{lazy}"
    );
    assert!(gone_within(first_pid, Duration::from_secs(5)).await);
    let (code, health) = get_json(&format!("http://127.0.0.1:{port}/healthz")).await;
    assert_eq!(code, 200, "{health}");
    assert_eq!(proxy.tool_names().await, names, "its tools stay listed");
    let (_, metrics) = get_text(&format!("http://127.0.0.1:{port}/metrics")).await;
    assert!(
        metrics.contains("mcp_supervisor_server_state{server=\"lazy\",state=\"idle\"} 1"),
        "{metrics}"
    );

    // The next call starts it again.
    echo(&mut proxy, "lazy__echo", "again").await;
    let lazy = server(&status(port).await, "lazy").clone();
    let second_pid = lazy["pid"].as_u64().expect("a pid once started again") as u32;
    assert_ne!(second_pid, first_pid);
    assert_eq!(
        (lazy["state"].as_str(), lazy["restarts"].as_u64()),
        (Some("ready"), Some(0))
    );
    assert_eq!(
        server(&status(port).await, "always")["pid"],
        json!(always_pid)
    );
    proxy.stop().await;
    assert!(gone_within(second_pid, Duration::from_secs(5)).await);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn wrap_on_demand_answers_from_its_saved_catalog_and_starts_the_server_on_the_first_call() {
    let dir = temp_dir("on-demand-wrap");
    let state = dir.join("state");
    let server = [path_str(&fault_bin())];
    let wrap = |port: u16| {
        wrap_on_demand_args(
            port,
            &state,
            IDLE_MS,
            &["--health-interval-ms", "0"],
            &server,
        )
    };

    // Run 1, no saved catalog: the server answers the handshake, then stops once listed.
    let port = free_port();
    let mut proxy = Proxy::start(&wrap(port));
    let info = proxy.initialize().await;
    let names = proxy.tool_names().await;
    assert!(names.contains(&"echo".to_string()), "{names:?}");
    let name = status(port).await["servers"][0]["name"]
        .as_str()
        .expect("a name")
        .to_string();
    until_state(port, &name, "idle").await;
    proxy.stop().await;

    // Run 2: handshake and list from the catalog, with no server process.
    let port = free_port();
    let mut proxy = Proxy::start(&wrap(port));
    let proxy_pid = proxy.child.id().expect("the proxy runs");
    assert_eq!(proxy.initialize().await, info, "the saved answer");
    assert_eq!(proxy.tool_names().await, names);
    let now = until_state(port, &name, "idle").await;
    assert_eq!(now["pid"], Value::Null);
    assert_eq!(fault_children(proxy_pid), Vec::<u32>::new());

    // The first call starts it; idle again after the timeout; the next call starts it again.
    echo(&mut proxy, "echo", "wrapped").await;
    let first = until_state(port, &name, "ready").await["pid"]
        .as_u64()
        .expect("a pid") as u32;
    until_state(port, &name, "idle").await;
    assert!(gone_within(first, Duration::from_secs(5)).await);
    echo(&mut proxy, "echo", "again").await;
    let second = until_state(port, &name, "ready").await["pid"]
        .as_u64()
        .expect("a pid") as u32;
    assert_ne!(first, second);
    proxy.stop().await;
    assert!(gone_within(second, Duration::from_secs(5)).await);
    let _ = std::fs::remove_dir_all(dir);
}

async fn get_text(url: &str) -> (u16, String) {
    let response = reqwest::get(url).await.expect("GET");
    let status = response.status().as_u16();
    (status, response.text().await.unwrap_or_default())
}
