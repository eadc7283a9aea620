//! End to end: the dashboard's data over plain HTTP (SPEC §15), from the real binary over real
//! fault servers. The page and its assets are served without the admin token and forbid every
//! other origin (CSP); `/dashboard/state` needs the token and says each server's state, pid and
//! what to do; `/dashboard/events` sends a state at once and, after a `kill -9`, states that show
//! the loss and the new pid, with no request in between. The browser's view of the same is
//! `dashboard_page.rs`. Every wait is bounded.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::*;

const LIMIT: Duration = Duration::from_secs(20);
const TOKEN: &str = "s3cret-admin";

async fn start(path: &std::path::Path) -> Running {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    Running::start(
        &[
            "serve",
            "--config",
            path.to_str().unwrap_or_default(),
            "--admin",
            &addr,
            "--no-catalog",
            "--auth-token-env",
            "TEST_ADMIN_TOKEN",
        ],
        port,
        &[("TEST_ADMIN_TOKEN", TOKEN)],
    )
    .await
}

/// The state, once every server in it satisfies `done`.
async fn state_until(proxy: &Running, done: impl Fn(&Value) -> bool) -> Value {
    let client = reqwest::Client::new();
    let deadline = tokio::time::Instant::now() + LIMIT;
    let mut last = Value::Null;
    while tokio::time::Instant::now() < deadline {
        if let Ok(response) = client
            .get(proxy.url("/dashboard/state"))
            .bearer_auth(TOKEN)
            .send()
            .await
            && let Ok(state) = response.json::<Value>().await
        {
            if done(&state) {
                return state;
            }
            last = state;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the dashboard state never got there: {last}");
}

fn servers(state: &Value) -> &Vec<Value> {
    state["proxies"][0]["servers"].as_array().expect("servers")
}

fn server<'a>(state: &'a Value, name: &str) -> &'a Value {
    servers(state)
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no server {name} in {state}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_is_public_its_data_is_not() {
    let dir = temp_dir("dashboard-guard");
    let path = dir.join("servers.json");
    write_config(&path, json!({ "f": { "command": fault_bin() } }));
    let proxy = start(&path).await;
    let client = reqwest::Client::new();

    for (asset, kind) in [
        ("/", "text/html"),
        ("/dashboard.js", "text/javascript"),
        ("/dashboard.css", "text/css"),
    ] {
        let response = client.get(proxy.url(asset)).send().await.expect("GET");
        assert_eq!(response.status().as_u16(), 200, "{asset} needs no token");
        let headers = response.headers();
        let content_type = headers["content-type"].to_str().unwrap_or_default();
        assert!(content_type.starts_with(kind), "{asset}: {content_type}");
        let csp = headers
            .get("content-security-policy")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        assert!(
            csp.contains("default-src 'none'") && csp.contains("connect-src 'self'"),
            "{asset}: {csp}"
        );
    }
    for data in ["/dashboard/state", "/dashboard/events", "/status"] {
        let response = client.get(proxy.url(data)).send().await.expect("GET");
        assert_eq!(response.status().as_u16(), 401, "{data} needs the token");
        let wrong = client
            .get(proxy.url(data))
            .bearer_auth("wrong")
            .send()
            .await
            .expect("GET");
        assert_eq!(wrong.status().as_u16(), 401, "{data} with a wrong token");
    }
    // The Host check (DNS rebinding) stands in front of the page too.
    let foreign = client
        .get(proxy.url("/"))
        .header("host", "evil.example:80")
        .send()
        .await
        .expect("GET");
    assert_eq!(foreign.status().as_u16(), 403);

    let state = state_until(&proxy, |s| {
        servers(s).first().is_some_and(|f| f["state"] == "ready")
    })
    .await;
    let proxy_view = &state["proxies"][0];
    assert_eq!(proxy_view["kind"], "serve");
    assert_eq!(proxy_view["name"], "servers.json");
    assert_eq!(proxy_view["pid"], json!(proxy.child.id()));
    let f = server(&state, "f");
    assert!(f["pid"].as_u64().is_some_and(|p| p > 0), "{f}");
    assert!(f["readySince"].as_u64().is_some_and(|t| t > 0), "{f}");
    assert_eq!(f["action"], Value::Null, "nothing to do for a ready server");
    assert!(f["tools"].as_u64().is_some_and(|n| n > 0), "{f}");
}

/// Reads `state` events off an event stream.
struct Events {
    response: reqwest::Response,
    buffer: String,
}

impl Events {
    async fn open(proxy: &Running) -> Self {
        let response = reqwest::Client::new()
            .get(proxy.url("/dashboard/events"))
            .bearer_auth(TOKEN)
            .send()
            .await
            .expect("GET /dashboard/events");
        assert_eq!(response.status().as_u16(), 200);
        let content_type = response.headers()["content-type"]
            .to_str()
            .unwrap_or_default()
            .to_owned();
        assert!(
            content_type.starts_with("text/event-stream"),
            "{content_type}"
        );
        Self {
            response,
            buffer: String::new(),
        }
    }

    /// The next `state` event's data, or `None` once `deadline` passed.
    async fn next(&mut self, deadline: tokio::time::Instant) -> Option<Value> {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                if block.lines().any(|l| l == "event: state") {
                    let data: String = block
                        .lines()
                        .filter_map(|l| l.strip_prefix("data: "))
                        .collect();
                    return Some(serde_json::from_str(&data).expect("a state is JSON"));
                }
                continue;
            }
            let chunk = tokio::time::timeout_at(deadline, self.response.chunk()).await;
            match chunk {
                Ok(Ok(Some(bytes))) => self.buffer.push_str(&String::from_utf8_lossy(&bytes)),
                _ => return None,
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_event_stream_shows_a_kill_and_the_new_pid_without_being_asked() {
    let dir = temp_dir("dashboard-events");
    let path = dir.join("servers.json");
    write_config(
        &path,
        json!({ "a": { "command": fault_bin() }, "b": { "command": fault_bin() } }),
    );
    let proxy = start(&path).await;
    let ready = state_until(&proxy, |s| {
        servers(s).len() == 2 && servers(s).iter().all(|v| v["state"] == "ready")
    })
    .await;
    let first = server(&ready, "a")["pid"].as_u64().expect("a pid");

    let mut events = Events::open(&proxy).await;
    let deadline = tokio::time::Instant::now() + LIMIT;
    let opening = events.next(deadline).await.expect("a state at once");
    assert_eq!(server(&opening, "a")["pid"], json!(first));

    kill9(u32::try_from(first).expect("a pid"));
    let mut saw_loss = false;
    let again = loop {
        let state = events
            .next(deadline)
            .await
            .expect("states after the kill, before the deadline");
        let a = server(&state, "a");
        saw_loss |= a["state"] != "ready";
        if a["state"] == "ready" && a["pid"].as_u64().is_some_and(|p| p != first) {
            break state;
        }
    };
    assert!(saw_loss, "a state between showed the server not ready");
    let a = server(&again, "a");
    assert!(a["restarts"].as_u64().is_some_and(|r| r >= 1), "{a}");
    assert!(a["generation"].as_u64().is_some_and(|g| g >= 2), "{a}");
    let kinds: Vec<&str> = a["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter_map(|e| e["kind"].as_str())
        .collect();
    let lost = kinds.iter().position(|k| *k == "lost");
    let last_ready = kinds.iter().rposition(|k| *k == "ready");
    assert!(
        matches!((lost, last_ready), (Some(l), Some(r)) if l < r),
        "the timeline has the loss and then a ready: {kinds:?}"
    );
    // The other server saw none of it.
    let b = server(&again, "b");
    assert_eq!(b["restarts"], 0, "{b}");
}
