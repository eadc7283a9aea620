//! The result cap (SPEC §13, `maxResultBytes`) with outside software, through `serve` (the
//! config key) and `wrap --max-result-bytes`: server-everything's `echo` of a long message
//! reaches the client cut at a character boundary, its `get-tiny-image` without the image (an
//! image block past the cap is dropped whole, and what follows it too), its
//! `get-resource-reference` without the embedded resource, and the Python SDK
//! server's long text without its `structuredContent` (alone over the cap) and cut; each with a
//! final text block saying what was cut and from what size, each cut counted in `/metrics`; a
//! small result passes whole.

mod interop_support;
mod outside_support;
mod support;

use outside_support::*;
use serde_json::{Value, json};
use support::{StdioClient, assert_cuts, free_port, temp_dir, write_config};

const CAP: usize = 1000;

/// 4000 two-byte characters: over 8000 bytes.
fn long() -> String {
    "é".repeat(4000)
}

async fn call(client: &mut StdioClient, tool: &str, arguments: Value) -> Value {
    let answer = client
        .request(
            "tools/call",
            json!({ "name": tool, "arguments": arguments }),
        )
        .await;
    assert!(answer.get("result").is_some(), "{tool}: {answer}");
    answer["result"].clone()
}

/// The JSON size of `blocks` as sent.
fn size(blocks: &Value) -> usize {
    serde_json::to_string(blocks).expect("json").len()
}

/// `result` is `whole`'s text cut to the cap, then a note that names `size` and says `what`.
fn assert_cut_text(result: &Value, whole: &str, size: usize, what: &[&str], ctx: &str) {
    let content = result["content"].as_array().expect("content");
    assert_eq!(
        content.len(),
        2,
        "{ctx}: the cut text and the note: {result}"
    );
    let kept = content[0]["text"].as_str().expect("text");
    assert!(
        !kept.is_empty() && whole.starts_with(kept) && kept.len() < whole.len(),
        "{ctx}: a prefix of the text, cut at a character boundary"
    );
    let kept_bytes = size_of_block(&content[0]);
    assert!(
        kept_bytes <= CAP && kept_bytes > CAP - 8,
        "{ctx}: kept {kept_bytes} bytes"
    );
    assert_note(&content[1], size, what, ctx);
}

fn size_of_block(block: &Value) -> usize {
    size(&json!([block]))
}

fn assert_note(note: &Value, size: usize, what: &[&str], ctx: &str) {
    let text = note["text"].as_str().unwrap_or_default();
    assert!(
        text.contains(&format!(
            "cut to maxResultBytes ({CAP} bytes) from {size} bytes"
        )) && what.iter().all(|w| text.contains(w)),
        "{ctx}: {note}"
    );
}

/// server-everything's results through a proxy that names its tools `{prefix}TOOL`: a small
/// echo whole, a long one cut, the tiny image dropped (2 cuts).
async fn check_everything(client: &mut StdioClient, prefix: &str) {
    let small = call(client, &format!("{prefix}echo"), json!({ "message": "hi" })).await;
    assert_eq!(
        small["content"],
        json!([{ "type": "text", "text": "Echo: hi" }])
    );

    // Its echo of a long message: cut at a character boundary.
    let message = long();
    let big = call(
        client,
        &format!("{prefix}echo"),
        json!({ "message": message }),
    )
    .await;
    let whole = format!("Echo: {message}");
    let sent = size(&json!([{ "type": "text", "text": whole }]));
    let ctx = format!("{prefix}echo");
    assert_cut_text(&big, &whole, sent, &["a text block cut to"], &ctx);

    // Its tiny image (about 5 KB of base64): the image is dropped whole, the text after it too.
    let image = call(client, &format!("{prefix}get-tiny-image"), json!({})).await;
    let content = image["content"].as_array().expect("content");
    assert_eq!(content.len(), 2, "the first text and the note: {image}");
    assert_eq!(content[0]["text"], "Here's the image you requested:");
    assert!(
        content.iter().all(|b| b["type"] == "text"),
        "no image: {image}"
    );
    let note = content[1]["text"].as_str().unwrap_or_default();
    assert!(
        note.contains("1 image block dropped") && note.contains("1 text block dropped"),
        "{note}"
    );
    assert!(
        note.contains(&format!("maxResultBytes ({CAP} bytes) from ")),
        "{note}"
    );
}

/// The Python SDK server's results through a proxy that names its tools `{prefix}TOOL`: a small
/// echo whole, structuredContent and all; a long text cut, its structuredContent (alone over
/// the cap) dropped (1 cut).
async fn check_py(client: &mut StdioClient, prefix: &str) {
    let small = call(client, &format!("{prefix}echo"), json!({ "message": "hi" })).await;
    assert_eq!(
        (small["content"].clone(), small["structuredContent"].clone()),
        (
            json!([{ "type": "text", "text": "hi" }]),
            json!({ "result": "hi" })
        ),
        "{small}"
    );
    let big = call(client, &format!("{prefix}big"), json!({ "count": 4000 })).await;
    assert_eq!(big.get("structuredContent"), None, "{big}");
    let whole = long();
    let structured = size(&json!({ "result": whole }));
    let sent = size(&json!([{ "type": "text", "text": whole }])) + structured;
    let dropped = format!("structuredContent ({structured} bytes) dropped");
    let ctx = format!("{prefix}big");
    assert_cut_text(&big, &whole, sent, &["a text block cut to", &dropped], &ctx);
}

#[tokio::test]
async fn serve_cuts_outside_servers_results_over_max_result_bytes() {
    let dir = temp_dir("outside-result-cap-serve");
    let config = dir.join("servers.json");
    let capped = json!({ "maxResultBytes": CAP });
    write_config(
        &config,
        json!({
            "everything": entry(&everything(), capped.clone()),
            "py": entry(&py_server(&["--big"]), capped),
        }),
    );
    let (mut client, admin) = serve_with_admin(&config).await;
    check_everything(&mut client, "everything__").await;
    check_py(&mut client, "py__").await;
    assert_cuts(admin, "everything", 2).await;
    assert_cuts(admin, "py", 1).await;
    client.close().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// `wrap --name NAME --max-result-bytes CAP -- SERVER` over stdio, its admin on `admin`.
async fn wrap(name: &str, server: &[String], admin: u16, cap: usize) -> StdioClient {
    let admin_addr = format!("127.0.0.1:{admin}");
    let cap = cap.to_string();
    let mut list = vec![
        "wrap",
        "--name",
        name,
        "--max-result-bytes",
        &cap,
        "--admin",
        &admin_addr,
        "--no-catalog",
        "--",
    ];
    list.extend(server.iter().map(String::as_str));
    StdioClient::start(&list).await
}

#[tokio::test]
async fn wrap_cuts_outside_servers_results_over_max_result_bytes() {
    // One `wrap` per server; each admin port counts its own server's cuts.
    let (everything_admin, py_admin) = (free_port(), free_port());
    let mut everything_client = wrap("everything", &everything(), everything_admin, CAP).await;
    let mut py_client = wrap("py", &py_server(&["--big"]), py_admin, CAP).await;
    check_everything(&mut everything_client, "").await;
    check_py(&mut py_client, "").await;
    assert_cuts(everything_admin, "everything", 2).await;
    assert_cuts(py_admin, "py", 1).await;
    everything_client.close().await;
    py_client.close().await;

    // An embedded resource past the cap is dropped whole (server-everything's reference to its
    // text resource: about 340 bytes, here over a cap of 150).
    let admin = free_port();
    let mut client = wrap("everything", &everything(), admin, 150).await;
    let arguments = json!({ "resourceType": "Text", "resourceId": 2 });
    let result = call(&mut client, "get-resource-reference", arguments).await;
    let content = result["content"].as_array().expect("content");
    assert_eq!(content.len(), 2, "the first text and the note: {result}");
    assert_eq!(
        content[0]["text"],
        "Returning resource reference for Resource 2:"
    );
    let note = content[1]["text"].as_str().unwrap_or_default();
    assert!(
        note.contains("maxResultBytes (150 bytes)")
            && note.contains("1 resource block dropped; 1 text block dropped"),
        "{note}"
    );
    assert_cuts(admin, "everything", 1).await;
    client.close().await;
}
