//! Tasks under identity (SPEC §14), against a raw tasks server (`py/tasks_server.py`): a task
//! is the identity's that created it: another identity asking for it (`tasks/get`,
//! `tasks/result`, `tasks/cancel`) gets the same answer as for a task that does not exist, and
//! `tasks/list` shows each caller only its own. `tasks/*` and `logging/setLevel` are judged by
//! the server's `authorize` rule (`mcp.method`): denied, nothing reaches the server.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use mcp_supervisor::HubOptions;
use mcp_supervisor::core::authorize::Claims;
use mcp_supervisor::core::config::parse_config;
use mcp_supervisor_front::caller::Caller;
use mcp_supervisor_front::{Client, Mode, OUTBOX, Proxy};
use mcp_supervisor_testkit::{python, temp_dir};
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// The bound of every wait.
const LIMIT: Duration = Duration::from_secs(20);

/// A client of `proxy` that `sub` is calling as (its token vouched for by the face).
fn client_of(proxy: &Arc<Proxy>, sub: &str) -> (Arc<Client>, mpsc::Receiver<String>) {
    let (out, unrelated) = mpsc::channel(OUTBOX);
    let client = proxy.connect(out);
    let claims = Claims::from_json(&json!({ "sub": sub })).expect("claims");
    let caller = Caller::new("https://id.example", sub, None, claims);
    client.set_caller(Some(Arc::new(caller)));
    (client, unrelated)
}

async fn request(proxy: &Arc<Proxy>, client: &Arc<Client>, method: &str, params: Value) -> Value {
    let message = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let answer = proxy
        .handle(client, &message.to_string(), None)
        .await
        .expect("answered");
    serde_json::from_str(&answer).expect("JSON")
}

/// A task made by `client`'s call of the server's tool; its id as the client sees it.
async fn new_task(proxy: &Arc<Proxy>, client: &Arc<Client>) -> String {
    let made = request(
        proxy,
        client,
        "tools/call",
        json!({"name": "t__work", "arguments": {}, "task": {"ttl": 60000}}),
    )
    .await;
    made["result"]["task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("a task: {made}"))
        .to_string()
}

/// The ids of `client`'s `tasks/list`.
async fn listed(proxy: &Arc<Proxy>, client: &Arc<Client>) -> Vec<String> {
    let list = request(proxy, client, "tasks/list", json!({})).await;
    list["result"]["tasks"]
        .as_array()
        .unwrap_or_else(|| panic!("a list: {list}"))
        .iter()
        .filter_map(|t| t["taskId"].as_str().map(str::to_string))
        .collect()
}

/// An error answer with the task id `id` taken out of its message: what it says of any task.
fn said(answer: &Value, id: &str) -> (Value, String) {
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    (answer["error"]["code"].clone(), message.replace(id, "ID"))
}

#[tokio::test]
async fn a_task_is_its_creators_and_tasks_and_log_levels_are_judged_by_the_rule() {
    let dir = temp_dir("task-owners");
    let levels = dir.join("levels");
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/py/tasks_server.py");
    let text = json!({
        // The face checks tokens; here the test vouches for each client itself.
        "auth": { "issuer": "https://id.example", "audience": "https://mcp.example/mcp" },
        "mcpServers": { "t": {
            "command": python("import json"),
            "args": [script, levels],
            "authorize": "jwt.sub == 'alice' || !(mcp.method in ['tasks/result', 'logging/setLevel'])",
        } },
    })
    .to_string();
    let config = parse_config(&text, &|_| None).expect("a valid config");
    let proxy = mcp_supervisor_front::start(config, Mode::Aggregate, HubOptions::default());
    assert!(proxy.hub().wait_ready(LIMIT).await.is_empty(), "t is up");
    let (alice, _a) = client_of(&proxy, "alice");
    let (bob, _b) = client_of(&proxy, "bob");
    let alices = new_task(&proxy, &alice).await;
    let bobs = new_task(&proxy, &bob).await;
    assert_ne!(alices, bobs);

    // Each sees its own, and only its own.
    assert_eq!(listed(&proxy, &alice).await, vec![alices.clone()]);
    assert_eq!(listed(&proxy, &bob).await, vec![bobs.clone()]);
    let got = request(&proxy, &alice, "tasks/get", json!({"taskId": alices})).await;
    assert_eq!(got["result"]["taskId"], json!(alices), "{got}");

    // Another's task is as unknown as one that does not exist, whatever is asked of it.
    let nowhere = "t:t-999";
    for method in ["tasks/get", "tasks/result", "tasks/cancel"] {
        let theirs = request(&proxy, &bob, method, json!({"taskId": alices})).await;
        let none = request(&proxy, &bob, method, json!({"taskId": nowhere})).await;
        assert_eq!(theirs["error"]["code"], -32602, "{method}: {theirs}");
        assert_eq!(said(&theirs, &alices), said(&none, nowhere), "{method}");
        assert!(theirs.get("result").is_none(), "{method}: {theirs}");
    }

    // The rule judges tasks/* by method: bob may not have a result, even of his own task.
    let denied = request(&proxy, &bob, "tasks/result", json!({"taskId": bobs})).await;
    assert_eq!(denied["error"]["code"], -32003, "{denied}");
    let result = request(&proxy, &alice, "tasks/result", json!({"taskId": alices})).await;
    assert_eq!(
        result["result"]["content"][0]["text"], "result of t-1",
        "{result}"
    );

    // logging/setLevel: a server whose rule denies the caller is not asked.
    let set = request(&proxy, &bob, "logging/setLevel", json!({"level": "error"})).await;
    assert!(set.get("result").is_some(), "{set}");
    let set = request(
        &proxy,
        &alice,
        "logging/setLevel",
        json!({"level": "debug"}),
    )
    .await;
    assert!(set.get("result").is_some(), "{set}");
    let asked = std::fs::read_to_string(&levels).unwrap_or_default();
    assert_eq!(asked.lines().collect::<Vec<_>>(), ["debug"], "only alice's");
    proxy.hub().stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}
