//! The audit trail through the proxy (SPEC §14), against a real fault server: a call answered,
//! a tool's own error, and a call whose client went away mid-call (its future dropped) each
//! make one line that says what became of it and what the library reported of its sends.

use std::sync::Arc;
use std::time::Duration;

use mcp_supervisor::HubOptions;
use mcp_supervisor::core::config::parse_config;
use mcp_supervisor_front::audit::Audit;
use mcp_supervisor_front::{Mode, OUTBOX};
use mcp_supervisor_testkit::fault_bin;
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// The bound of every wait.
const LIMIT: Duration = Duration::from_secs(20);

fn call(id: u64, tool: &str, arguments: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": tool, "arguments": arguments}})
    .to_string()
}

#[tokio::test]
async fn each_call_is_one_line_and_a_call_dropped_mid_way_too() {
    let text = json!({ "mcpServers": { "fault": { "command": fault_bin() } } }).to_string();
    let config = parse_config(&text, &|_| None).expect("a valid config");
    let proxy = mcp_supervisor_front::start(config, Mode::Aggregate, HubOptions::default());
    assert!(
        proxy.hub().wait_ready(LIMIT).await.is_empty(),
        "fault is up"
    );
    let dir = std::env::temp_dir().join(format!("mcp-audit-trail-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a temp dir");
    let path = dir.join("audit.jsonl");
    let audit = Arc::new(Audit::open(&path).expect("open"));
    assert!(proxy.set_audit(audit.clone()).is_ok());
    let (out, _unrelated) = mpsc::channel(OUTBOX);
    let client = proxy.connect(out);

    let answer = proxy
        .handle(
            &client,
            &call(1, "fault__echo", json!({"message": "ARG-1"})),
            None,
        )
        .await
        .expect("answered");
    assert!(answer.contains("ARG-1"), "{answer}");
    let answer = proxy
        .handle(
            &client,
            &call(2, "fault__count", json!({"id": "ARG-2"})),
            None,
        )
        .await
        .expect("answered");
    assert!(
        answer.contains("isError"),
        "no ledger: a tool error: {answer}"
    );
    // Its client goes away while the call hangs: the request's future is dropped.
    let hang = call(3, "fault__hang", json!({}));
    let gone = tokio::time::timeout(
        Duration::from_millis(500),
        proxy.handle(&client, &hang, None),
    );
    assert!(gone.await.is_err(), "the hang did not answer");

    audit.flush(Duration::from_secs(5)).expect("written");
    proxy.hub().stop().await;
    let text = std::fs::read_to_string(&path).expect("the audit file");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!text.contains("ARG-"), "no argument value: {text}");
    let lines: Vec<Value> = text
        .lines()
        .map(|line| serde_json::from_str(line).expect("a line is JSON"))
        .collect();
    let summary: Vec<(String, String, Value)> = lines
        .iter()
        .map(|l| {
            (
                l["tool"].as_str().unwrap_or_default().to_string(),
                l["outcome"].as_str().unwrap_or_default().to_string(),
                l["recovery"].clone(),
            )
        })
        .collect();
    let sent_once = json!({ "attempts": 1, "replayed": false, "generations": [1] });
    assert_eq!(
        summary,
        [
            ("echo".to_string(), "ok".to_string(), sent_once.clone()),
            ("count".to_string(), "error".to_string(), sent_once.clone()),
            ("hang".to_string(), "may_have_run".to_string(), sent_once),
        ],
        "{text}"
    );
    for line in &lines {
        assert_eq!(line["server"], "fault");
        assert_eq!(line["method"], "tools/call");
        assert_eq!(line["sub"], Value::Null);
        assert_eq!(line["session"], Value::Null);
    }
}
