//! Tool search (SPEC §13, `toolExposure: search`) with the official Python SDK server, through
//! `wrap --tool-exposure search` and `serve`: the client sees `search_tools` and `call_tool`
//! only; a word of the server's tool description finds that tool, whole (its input schema as the
//! server gave it) under its public name; `call_tool` calls it, and the server's own answer
//! comes back.

mod interop_support;
mod outside_support;
mod support;

use outside_support::*;
use serde_json::{Value, json};
use support::{StdioClient, path_str, temp_dir};

/// Both tools of search mode are all that is listed; `search_tools` for "message back" finds
/// `name` first, whole; `call_tool` of it echoes.
async fn check(client: &mut StdioClient, name: &str) {
    let list = client.request("tools/list", json!({})).await;
    let listed: Vec<&str> = list["result"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(listed, ["search_tools", "call_tool"], "{list}");

    let answer = client
        .request(
            "tools/call",
            json!({ "name": "search_tools", "arguments": { "query": "message back" } }),
        )
        .await;
    let text = answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("a text result: {answer}"));
    let found: Value = serde_json::from_str(text).expect("search_tools gives JSON");
    let first = &found["tools"][0];
    assert_eq!(first["name"], name, "{found}");
    assert_eq!(first["description"], "Echo the message back.", "{found}");
    assert_eq!(
        first["inputSchema"]["required"],
        json!(["message"]),
        "the definition whole: {found}"
    );
    assert_eq!(first["annotations"]["readOnlyHint"], true, "{found}");

    let answer = client
        .request(
            "tools/call",
            json!({ "name": "call_tool",
                    "arguments": { "name": name, "arguments": { "message": "found and called" } } }),
        )
        .await;
    assert_eq!(
        answer["result"]["content"][0]["text"], "found and called",
        "{answer}"
    );
    assert_ne!(answer["result"]["isError"], true, "{answer}");
}

#[tokio::test]
async fn wrap_search_finds_and_calls_the_python_sdk_servers_tool() {
    let mut list = vec!["wrap", "--tool-exposure", "search", "--no-catalog", "--"];
    let py = py_server(&[]);
    list.extend(py.iter().map(String::as_str));
    let mut client = StdioClient::start(&list).await;
    check(&mut client, "echo").await;
    client.close().await;
}

#[tokio::test]
async fn serve_search_finds_and_calls_the_python_sdk_servers_tool() {
    let dir = temp_dir("outside-tool-search-serve");
    let config = dir.join("servers.json");
    let text = json!({
        "toolExposure": "search",
        "mcpServers": { "py": entry(&py_server(&[]), json!({})) },
    });
    std::fs::write(&config, text.to_string()).expect("write config");
    let config = path_str(&config);
    let mut client = StdioClient::start(&["serve", "--config", &config, "--no-catalog"]).await;
    // serve lists a server's tools once it is ready; search until it is.
    let deadline = std::time::Instant::now() + LIMIT;
    loop {
        let answer = client
            .request(
                "tools/call",
                json!({ "name": "search_tools", "arguments": { "query": "echo" } }),
            )
            .await;
        let text = answer["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default();
        if text.contains("py__echo") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "py__echo never found: {answer}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    check(&mut client, "py__echo").await;
    client.close().await;
    let _ = std::fs::remove_dir_all(dir);
}
