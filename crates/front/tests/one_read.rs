//! One read per message (issue 30): a client's message through the front as `serve` runs it
//! (`Mode::Aggregate`, names prefixed, the hub's rename of the tool to its upstream name) has
//! its params read once, in both eras: a handshake-era `tools/call`, and a 2026-07-28
//! `tools/call` with its identity in `_meta` (which the era's checks, the upstream handshake
//! and the call all take from that one read). The rename to the upstream name writes the name
//! where the front found it.
//!
//! Its own test binary, with one test: the count is the process's.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use mcp_supervisor::HubOptions;
use mcp_supervisor::core::config::parse_config;
use mcp_supervisor_front::message::PARAMS_READ;
use mcp_supervisor_front::{Mode, Proxy};
use mcp_supervisor_testkit::fault_bin;
use serde_json::{Value, json};
use tokio::sync::mpsc;

const LIMIT: Duration = Duration::from_secs(20);

/// The answer to `text`, and how many times params were read on its way.
async fn send(
    proxy: &Arc<Proxy>,
    client: &Arc<mcp_supervisor_front::Client>,
    text: &str,
) -> (Value, u64) {
    let before = PARAMS_READ.load(Ordering::SeqCst);
    let answer = tokio::time::timeout(LIMIT, proxy.handle(client, text, None))
        .await
        .expect("answered in time")
        .expect("a request is answered");
    let reads = PARAMS_READ.load(Ordering::SeqCst) - before;
    (serde_json::from_str(&answer).expect("JSON"), reads)
}

#[tokio::test]
async fn a_messages_params_are_read_once_on_the_way_in_in_both_eras() {
    let config = json!({ "mcpServers": { "f": { "command": fault_bin() } } }).to_string();
    let config = parse_config(&config, &|_| None).expect("a valid config");
    let proxy = mcp_supervisor_front::start(config, Mode::Aggregate, HubOptions::default());
    let (out, _notes) = mpsc::channel(64);

    // The handshake era.
    let client = proxy.connect(out.clone());
    let init = json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": { "name": "one-read", "version": "1" } } });
    let (answer, _) = send(&proxy, &client, &init.to_string()).await;
    assert!(answer.get("result").is_some(), "{answer}");
    let call = json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": { "name": "f__echo", "arguments": { "message": "handshake era" } } });
    let (answer, reads) = send(&proxy, &client, &call.to_string()).await;
    assert_eq!(
        answer["result"]["content"][0]["text"], "handshake era",
        "the server got its own tool name: {answer}"
    );
    assert_eq!(
        reads, 1,
        "a handshake-era tools/call's params are read once"
    );

    // The 2026-07-28 era: `_meta` first, as the SDKs write it, so the name is not the first member.
    let stateless = proxy.connect(out);
    let call = json!({ "jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": { "name": "one-read", "version": "1" },
        },
        "name": "f__echo", "arguments": { "message": "2026 era" } } });
    let (answer, reads) = send(&proxy, &stateless, &call.to_string()).await;
    assert_eq!(
        answer["result"]["content"][0]["text"], "2026 era",
        "the server got its own tool name: {answer}"
    );
    assert_eq!(answer["result"]["resultType"], "complete", "{answer}");
    assert_eq!(reads, 1, "a 2026-07-28 tools/call's params are read once");

    proxy.disconnect(&client);
    proxy.disconnect(&stateless);
    proxy.hub().stop().await;
}
