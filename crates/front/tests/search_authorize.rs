//! `authorize` through search mode (SPEC §13, §14), against a real fault server: `search_tools`
//! shows each caller only the tools its server's rule lets it call (a denied tool neither shows
//! nor takes a place of `limit`), and a call that `call_tool` names is judged like a direct
//! `tools/call`: denied, it gets -32003 and nothing goes upstream.

use std::sync::Arc;
use std::time::Duration;

use mcp_supervisor::HubOptions;
use mcp_supervisor::core::authorize::Claims;
use mcp_supervisor::core::config::parse_config;
use mcp_supervisor_front::caller::Caller;
use mcp_supervisor_front::{Client, Mode, OUTBOX, Proxy};
use mcp_supervisor_testkit::fault_bin;
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// The bound of every wait.
const LIMIT: Duration = Duration::from_secs(20);

/// A client of `proxy` that `sub` is calling as (its token vouched for by the face).
fn client_of(proxy: &Arc<Proxy>, sub: &str) -> (Arc<Client>, mpsc::Receiver<String>) {
    let (out, unrelated) = mpsc::channel(OUTBOX);
    let client = proxy.connect(out);
    let claims = Claims::from_json(&json!({ "sub": sub })).expect("claims");
    client.set_caller(Some(Arc::new(Caller::new(
        "https://id.example",
        sub,
        None,
        claims,
    ))));
    (client, unrelated)
}

async fn tool_call(
    proxy: &Arc<Proxy>,
    client: &Arc<Client>,
    name: &str,
    arguments: Value,
) -> Value {
    let request = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                         "params": {"name": name, "arguments": arguments}});
    let answer = proxy
        .handle(client, &request.to_string(), None)
        .await
        .expect("answered");
    serde_json::from_str(&answer).expect("JSON")
}

/// The names `search_tools` finds for `query` (at most `limit`).
async fn found(proxy: &Arc<Proxy>, client: &Arc<Client>, query: &str, limit: u64) -> Vec<String> {
    let answer = tool_call(
        proxy,
        client,
        "search_tools",
        json!({"query": query, "limit": limit}),
    )
    .await;
    let text = answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("a search result: {answer}"));
    let tools: Value = serde_json::from_str(text).expect("the matches as JSON");
    tools["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| t["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn search_shows_each_caller_only_what_it_may_call_and_call_tool_is_judged_like_a_call() {
    let text = json!({
        "toolExposure": "search",
        // The face checks tokens; here the test vouches for each client itself.
        "auth": { "issuer": "https://id.example", "audience": "https://mcp.example/mcp" },
        "mcpServers": { "f": {
            "command": fault_bin(),
            "authorize": "jwt.sub == 'alice' || mcp.tool.name != 'count'",
        } },
    })
    .to_string();
    let config = parse_config(&text, &|_| None).expect("a valid config");
    let proxy = mcp_supervisor_front::start(config, Mode::Aggregate, HubOptions::default());
    assert!(proxy.hub().wait_ready(LIMIT).await.is_empty(), "f is up");
    let (alice, _a) = client_of(&proxy, "alice");
    let (bob, _b) = client_of(&proxy, "bob");

    let alices = found(&proxy, &alice, "count", 50).await;
    assert!(alices.contains(&"f__count".to_string()), "{alices:?}");
    let bobs = found(&proxy, &bob, "count", 50).await;
    assert!(!bobs.is_empty(), "bob finds the others: {bobs:?}");
    assert!(!bobs.contains(&"f__count".to_string()), "{bobs:?}");
    assert_eq!(alices.len(), bobs.len() + 1, "{alices:?} {bobs:?}");
    // A denied tool takes no place of the limit: bob's one match is one he may call.
    let first = found(&proxy, &bob, "count", 1).await;
    assert_eq!(first.len(), 1, "{first:?}");
    assert_ne!(first[0], "f__count");

    // call_tool naming a tool the rule denies: refused as a direct call is, and did not run.
    let denied = tool_call(
        &proxy,
        &bob,
        "call_tool",
        json!({"name": "f__count", "arguments": {"id": "x"}}),
    )
    .await;
    assert_eq!(denied["error"]["code"], -32003, "{denied}");
    let message = denied["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("did not run"), "{message}");
    // One it allows goes through.
    let echoed = tool_call(
        &proxy,
        &bob,
        "call_tool",
        json!({"name": "f__echo", "arguments": {"message": "hi"}}),
    )
    .await;
    assert_eq!(echoed["result"]["content"][0]["text"], "hi", "{echoed}");
    proxy.hub().stop().await;
}
