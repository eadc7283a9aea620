//! Resource reads routed without a list first (SPEC §9: resources are synced per server and a
//! URI is routed by the server that listed it), with outside software: a `serve` of
//! server-everything and the Python SDK server, whose client reads before it ever lists
//! (a client that cached the URIs, or got them from a tool). A URI server-everything lists, one
//! of its URI templates, and the resource link its `get-resource-links` tool returns each reach
//! server-everything and are answered by it. Also what `serve` says of each server at
//! `initialize`: server-everything's own instructions, whole, under its name.
//!
//! The proxy is stopped by closing its stdin (it stops its servers), then SIGKILL by pid.

mod interop_support;
mod outside_support;
mod support;

use outside_support::*;
use serde_json::{Value, json};
use support::{StdioClient, temp_dir, write_config};

/// `resources/read` of `uri`: the text (or blob) of its first content, or the whole answer.
async fn read(client: &mut StdioClient, uri: &str) -> Result<Value, Value> {
    let answer = client
        .request("resources/read", json!({ "uri": uri }))
        .await;
    let content = &answer["result"]["contents"][0];
    match content["uri"] == uri {
        true => Ok(content.clone()),
        false => Err(answer),
    }
}

/// The URI of the first resource link in a tool call's answer.
fn resource_link(answer: &Value) -> String {
    answer["result"]["content"]
        .as_array()
        .and_then(|c| c.iter().find(|b| b["type"] == "resource_link"))
        .and_then(|b| b["uri"].as_str())
        .unwrap_or_else(|| panic!("a resource link: {answer}"))
        .to_string()
}

#[tokio::test]
async fn a_client_reads_a_resource_of_one_of_two_servers_without_listing_first() {
    let dir = temp_dir("outside-resources");
    let config = dir.join("servers.json");
    write_config(
        &config,
        json!({
            "everything": entry(&everything(), json!({})),
            "py": entry(&py_server(&[]), json!({})),
        }),
    );
    let (mut client, admin) = serve_with_admin(&config).await;
    until_state(admin, &["everything", "py"], "ready").await;

    // A URI it lists, read by a client that never listed.
    let listed = "demo://resource/static/document/architecture.md";
    let content = read(&mut client, listed)
        .await
        .expect("the listed resource");
    assert!(
        content["text"]
            .as_str()
            .is_some_and(|t| t.contains("Architecture")),
        "{content}"
    );
    // A URI of one of its templates (`demo://resource/dynamic/text/{resourceId}`).
    let templated = "demo://resource/dynamic/text/3";
    let content = read(&mut client, templated)
        .await
        .expect("a templated resource");
    assert!(
        content["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("Resource 3:")),
        "{content}"
    );
    // The link a tool of it returns.
    let links = client
        .request(
            "tools/call",
            json!({ "name": "everything__get-resource-links", "arguments": { "count": 2 } }),
        )
        .await;
    let link = resource_link(&links);
    let content = read(&mut client, &link).await.expect("the linked resource");
    assert!(
        content.get("text").or(content.get("blob")).is_some(),
        "{content}"
    );
    // A URI nobody offers is still an error that says so.
    let unknown = read(&mut client, "nowhere://nothing").await;
    let error = unknown.expect_err("no server offers it");
    assert_eq!(error["error"]["code"], -32002, "{error}");
    client.close().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_uri_two_servers_offer_and_one_a_tool_just_made_are_read_without_listing_first() {
    let dir = temp_dir("outside-resources-two");
    let config = dir.join("servers.json");
    // The same server twice: every URI is offered by both.
    write_config(
        &config,
        json!({
            "alpha": entry(&everything(), json!({})),
            "beta": entry(&everything(), json!({})),
        }),
    );
    let (mut client, admin) = serve_with_admin(&config).await;
    until_state(admin, &["alpha", "beta"], "ready").await;

    // Routed as a list would route it: to the first server in config order that offers it.
    let shared = "demo://resource/static/document/features.md";
    let content = read(&mut client, shared)
        .await
        .expect("a resource both servers offer, read before any list");
    assert!(
        content["text"].as_str().is_some_and(|t| !t.is_empty()),
        "{content}"
    );

    // A tool of alpha makes a resource (and says so with resources/list_changed); the link it
    // returns is read at once, before the proxy could have listed alpha's resources again.
    let made = client
        .request(
            "tools/call",
            json!({
                "name": "alpha__gzip-file-as-resource",
                "arguments": {
                    "name": "made.gz",
                    "data": "data:text/plain;base64,aGVsbG8=",
                    "outputType": "resourceLink",
                },
            }),
        )
        .await;
    let link = resource_link(&made);
    let content = read(&mut client, &link)
        .await
        .expect("the resource the tool just made");
    assert!(
        content["blob"].as_str().is_some_and(|b| !b.is_empty()),
        "{content}"
    );
    client.close().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// `serve` passes on each server's own `instructions` under its name (SPEC §9), here
/// server-everything's, read from its own file: found from outside (they were dropped), and
/// tested before against a raw server only.
#[tokio::test]
async fn serve_passes_on_server_everythings_own_instructions() {
    let dir = temp_dir("outside-instructions");
    let config = dir.join("servers.json");
    write_config(
        &config,
        json!({ "everything": entry(&everything(), json!({})) }),
    );
    let (port, admin) = (support::free_port(), support::free_port());
    let (listen, admin_addr) = (format!("127.0.0.1:{port}"), format!("127.0.0.1:{admin}"));
    let config_arg = interop_support::path_str(&config);
    let _proxy = support::Running::start(
        &[
            "serve",
            "--config",
            &config_arg,
            "--http",
            &listen,
            "--admin",
            &admin_addr,
            "--no-catalog",
        ],
        port,
        &[],
    )
    .await;
    until_state(admin, &["everything"], "ready").await;

    // Its own instructions, from the file it reads them from.
    let bin = interop_support::tool("mcp-server-everything");
    let file = bin
        .parent()
        .and_then(std::path::Path::parent)
        .expect("node_modules")
        .join("@modelcontextprotocol/server-everything/dist/docs/instructions.md");
    let own = std::fs::read_to_string(&file)
        .unwrap_or_else(|e| panic!("server-everything's instructions at {file:?}: {e}"));
    let heading = own.lines().next().unwrap_or_default().trim();
    assert!(heading.contains("Instructions"), "{heading}");

    let client = reqwest::Client::new();
    let url = format!("http://{listen}/mcp");
    let (response, _) =
        support::post_initialize(&client, &url, None, json!({}), "instructions-test").await;
    // `initialize` is answered with plain JSON (http_face.rs checks it).
    let answer: Value = response.json().await.expect("the answer, as JSON");
    let instructions = answer["result"]["instructions"]
        .as_str()
        .unwrap_or_else(|| panic!("instructions: {answer}"));
    assert!(
        instructions.starts_with("mcp-supervisor fronts"),
        "{instructions}"
    );
    let (_, theirs) = instructions
        .split_once("## Server \"everything\"")
        .unwrap_or_else(|| panic!("a section of server-everything: {instructions}"));
    assert!(theirs.contains(heading), "{instructions}");
    assert!(
        theirs
            .trim_end()
            .ends_with(own.trim_end().lines().last().unwrap_or_default().trim()),
        "its instructions whole: {instructions}"
    );
    let _ = std::fs::remove_dir_all(dir);
}
