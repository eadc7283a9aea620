//! SPEC §13 `"toolExposure": "search"`, end to end through `serve` (two fault servers and
//! server-everything) and `wrap --tool-exposure search`: `tools/list` shows exactly
//! `search_tools` and `call_tool`; a word of a tool's description finds it, whole and under its
//! public name; `call_tool` calls it through the normal call path; an unknown name gets a clear
//! error; a tool-list change still reaches the client, and a search then finds the new tool.

mod interop_support;
mod support;

use serde_json::{Value, json};

use support::{StdioClient, fault_bin, temp_dir};

fn names(list: &Value) -> Vec<String> {
    list["result"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| t["name"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// `search_tools` for `query`: the definitions it returned.
async fn search(client: &mut StdioClient, query: &str, limit: Option<u64>) -> Vec<Value> {
    let mut arguments = json!({ "query": query });
    if let Some(limit) = limit {
        arguments["limit"] = limit.into();
    }
    let answer = client
        .request(
            "tools/call",
            json!({ "name": "search_tools", "arguments": arguments }),
        )
        .await;
    let text = answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("a text result: {answer}"));
    let found: Value = serde_json::from_str(text).expect("search_tools gives JSON");
    found["tools"].as_array().expect("tools").clone()
}

/// Search until a tool named `name` is among the results (a server may list late); bounded.
async fn search_until(client: &mut StdioClient, query: &str, name: &str) -> Vec<Value> {
    for _ in 0..100 {
        let found = search(client, query, None).await;
        if found.iter().any(|t| t["name"] == name) {
            return found;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("search_tools never found {name} for {query:?}");
}

async fn call_tool(client: &mut StdioClient, name: &str, arguments: Value) -> Value {
    client
        .request(
            "tools/call",
            json!({ "name": "call_tool", "arguments": { "name": name, "arguments": arguments } }),
        )
        .await
}

#[tokio::test]
async fn serve_shows_two_tools_that_search_and_call_the_others() {
    let dir = temp_dir("tool-search-serve");
    let config = dir.join("servers.json");
    let everything = interop_support::everything_stdio();
    std::fs::write(
        &config,
        json!({
            "toolExposure": "search",
            "mcpServers": {
                "fa": { "command": fault_bin() },
                "fb": { "command": fault_bin() },
                "everything": { "command": everything[0], "args": everything[1..] },
            }
        })
        .to_string(),
    )
    .expect("write config");
    let mut client = StdioClient::start(&[
        "serve",
        "--config",
        config.to_str().unwrap(),
        "--no-catalog",
    ])
    .await;

    let list = client.request("tools/list", json!({})).await;
    assert_eq!(names(&list), ["search_tools", "call_tool"], "{list}");

    // A word of server-everything's description of its gzip tool (not of its name).
    let found = search_until(
        &mut client,
        "compresses",
        "everything__gzip-file-as-resource",
    )
    .await;
    assert_eq!(found[0]["name"], "everything__gzip-file-as-resource");
    assert!(found[0]["inputSchema"].is_object(), "the definition whole");
    // Both fault servers' echo, under their public names.
    let found = search_until(&mut client, "unchanged", "fb__echo").await;
    let echo: Vec<&Value> = found.iter().filter(|t| t["name"] == "fb__echo").collect();
    assert!(found.iter().any(|t| t["name"] == "fa__echo"));
    assert_eq!(
        echo[0]["description"], "Reply with the message, unchanged.",
        "{found:?}"
    );
    assert_eq!(search(&mut client, "unchanged", Some(1)).await.len(), 1);

    let echoed = call_tool(
        &mut client,
        "fb__echo",
        json!({ "message": "through call_tool" }),
    )
    .await;
    assert_eq!(
        echoed["result"]["content"][0]["text"], "through call_tool",
        "{echoed}"
    );
    let found = search_until(&mut client, "echoes back the input", "everything__echo").await;
    assert_eq!(found[0]["name"], "everything__echo", "{found:?}");
    let echoed = call_tool(&mut client, "everything__echo", json!({ "message": "hi" })).await;
    let text = echoed["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.contains("hi"), "{echoed}");

    let unknown = call_tool(&mut client, "nobody__nothing", json!({})).await;
    assert_eq!(unknown["result"]["isError"], true, "{unknown}");
    let said = unknown["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(
        said.contains("no tool is named \"nobody__nothing\"") && said.contains("search_tools"),
        "{said}"
    );
    let bare = client
        .request(
            "tools/call",
            json!({ "name": "search_tools", "arguments": {} }),
        )
        .await;
    assert_eq!(bare["result"]["isError"], true, "{bare}");

    // A list change still reaches the client, and the new tool can be found.
    let changed = call_tool(
        &mut client,
        "fa__set_tools",
        json!({ "tools": ["zebra_stripes"] }),
    )
    .await;
    assert_ne!(changed["result"]["isError"], true, "{changed}");
    client
        .notification("notifications/tools/list_changed")
        .await;
    let found = search_until(&mut client, "zebra", "fa__zebra_stripes").await;
    assert_eq!(found[0]["name"], "fa__zebra_stripes");
    client.close().await;
}

#[tokio::test]
async fn wrap_tool_exposure_search_keeps_names_and_calls_through() {
    let fault = fault_bin();
    let mut client = StdioClient::start(&[
        "wrap",
        "--tool-exposure",
        "search",
        "--no-catalog",
        "--",
        fault.to_str().unwrap(),
    ])
    .await;
    let list = client.request("tools/list", json!({})).await;
    assert_eq!(names(&list), ["search_tools", "call_tool"], "{list}");
    let found = search_until(&mut client, "sum numbers", "add").await;
    assert_eq!(found[0]["name"], "add");
    let sum = call_tool(&mut client, "add", json!({ "a": 2, "b": 3 })).await;
    assert_eq!(sum["result"]["content"][0]["text"], "5", "{sum}");
    client.close().await;
}
