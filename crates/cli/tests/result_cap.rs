//! SPEC §13 `maxResultBytes`, end to end with the fault server's `echo`: through `serve` (the
//! config key) and `wrap` (`--max-result-bytes`), a large result reaches the client cut at a
//! character boundary with a final note that names the size it had (the result keeps its own
//! `isError`: it had no `structuredContent` to drop), a small one passes whole, and each cut is
//! counted in `/metrics`.

mod support;

use serde_json::json;

use support::{StdioClient, assert_cuts, fault_bin, free_port, temp_dir, write_config};

const CAP: usize = 1000;

/// A message of 4000 two-byte characters: its echo alone is over 8000 bytes.
fn big_message() -> String {
    "é".repeat(4000)
}

/// Calls `tool` with a small and a large message and checks what came back; the admin port's
/// `/metrics` must count one cut of `server`.
async fn check_cut(client: &mut StdioClient, tool: &str, admin: u16, server: &str) {
    let small = client
        .request(
            "tools/call",
            json!({ "name": tool, "arguments": { "message": "hi" } }),
        )
        .await;
    assert_eq!(
        small["result"]["content"],
        json!([{ "type": "text", "text": "hi" }]),
        "a small result passes whole: {small}"
    );

    let message = big_message();
    let big = client
        .request(
            "tools/call",
            json!({ "name": tool, "arguments": { "message": message } }),
        )
        .await;
    let content = big["result"]["content"].as_array().expect("content");
    assert_eq!(content.len(), 2, "the cut text and the note: {big}");
    // No structuredContent to drop: the result keeps its own isError (the echo's, not an error).
    assert_eq!(
        big["result"].get("isError"),
        small["result"].get("isError"),
        "{big}"
    );
    assert_ne!(big["result"]["isError"], true, "{big}");
    let whole = message;
    let kept = content[0]["text"].as_str().expect("text");
    assert!(
        !kept.is_empty() && whole.starts_with(kept),
        "a prefix of the echo"
    );
    let kept_bytes = serde_json::to_string(&json!([content[0]])).unwrap().len();
    assert!(
        kept_bytes <= CAP && kept_bytes > CAP - 8,
        "kept {kept_bytes} bytes"
    );
    let note = content[1]["text"].as_str().expect("note");
    let size = serde_json::to_string(&json!([{ "type": "text", "text": whole }]))
        .unwrap()
        .len();
    assert!(
        note.contains(&format!("from {size} bytes")) && note.contains("maxResultBytes (1000"),
        "{note}"
    );

    assert_cuts(admin, server, 1).await;
}

#[tokio::test]
async fn serve_cuts_a_result_over_max_result_bytes() {
    let dir = temp_dir("result-cap-serve");
    let config = dir.join("servers.json");
    write_config(
        &config,
        json!({ "fault": { "command": fault_bin(), "maxResultBytes": CAP } }),
    );
    let admin = free_port();
    let admin_addr = format!("127.0.0.1:{admin}");
    let mut client = StdioClient::start(&[
        "serve",
        "--config",
        config.to_str().unwrap(),
        "--admin",
        &admin_addr,
        "--no-catalog",
    ])
    .await;
    check_cut(&mut client, "fault__echo", admin, "fault").await;
    client.close().await;
}

#[tokio::test]
async fn wrap_cuts_a_result_over_max_result_bytes() {
    let admin = free_port();
    let admin_addr = format!("127.0.0.1:{admin}");
    let fault = fault_bin();
    let mut client = StdioClient::start(&[
        "wrap",
        "--name",
        "fault",
        "--max-result-bytes",
        "1000",
        "--admin",
        &admin_addr,
        "--no-catalog",
        "--",
        fault.to_str().unwrap(),
    ])
    .await;
    check_cut(&mut client, "echo", admin, "fault").await;
    client.close().await;
}

#[tokio::test]
async fn wrap_refuses_a_zero_cap_with_a_clear_error() {
    let output = std::process::Command::new(support::supervisor_bin())
        .args(["wrap", "--max-result-bytes", "0", "--", "true"])
        .output()
        .expect("run wrap");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("maxResultBytes must be a positive number of bytes"),
        "{stderr}"
    );
}
