//! End to end: `Hub::call_json`, the one call path, against real fault servers over stdio and
//! HTTP. The request and the result stay JSON text; a progress token is replaced by one of the
//! link's own and mapped back. `Hub::call` is the same path, decoded at its edge. The rules are
//! SPEC §5's: one send, a replay only when safe, cancellation upstream on every way out.

mod real;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use mcp_supervisor::{CallArgs, CallError, Hub, Restored};
use real::*;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

fn policy() -> Value {
    json!({ "initialDelayMs": 50, "maxDelayMs": 400, "maxAttempts": 10 })
}

fn raw(value: Value) -> Box<RawValue> {
    serde_json::value::to_raw_value(&value).expect("JSON")
}

fn parsed(result: &RawValue) -> Value {
    serde_json::from_str(result.get()).expect("the result is JSON")
}

fn first_text(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap_or_default()
}

/// Wait (bounded) until the ledger holds `count` lines equal to `line`.
async fn ledger_gets(path: &Path, line: &str, count: usize) {
    for _ in 0..250 {
        if ledger_lines(path).iter().filter(|l| *l == line).count() >= count {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!(
        "the ledger did not get {count} × {line:?} within 5 s: {:?}",
        ledger_lines(path)
    );
}

fn stdio_hub(ledger: &Path) -> Arc<Hub> {
    Arc::new(Hub::start(config(json!({
        "fault": {
            "command": fault_bin(),
            "args": ["--ledger", ledger],
            "reconnect": policy(),
            "toolCallTimeoutMs": 60000
        }
    }))))
}

#[tokio::test]
async fn a_json_call_passes_through_and_answers_as_the_typed_call_does() {
    let dir = temp_dir("json-echo");
    let hub = stdio_hub(&dir.join("ledger"));
    wait_ready(&hub, "fault", 0).await;
    let message = "quote \" backslash \\ unicode é ✓ newline \n end";
    let params = raw(json!({ "name": "fault__echo", "arguments": { "message": message } }));
    let result = hub
        .call_json("fault__echo", &params, CallArgs::default())
        .await
        .expect("echo");
    let result = parsed(&result);
    assert_eq!(first_text(&result), message);

    let typed = hub
        .call("fault__echo", echo(message))
        .await
        .expect("typed echo");
    let typed = serde_json::to_value(&typed).expect("serialize");
    assert_eq!(result["content"], typed["content"]);

    // One path: both calls carry the link's own integer ids, one after the other.
    let pid = raw(json!({ "name": "fault__pid", "arguments": {} }));
    let raw_call = parsed(
        &hub.call_json("fault__pid", &pid, CallArgs::default())
            .await
            .expect("pid"),
    );
    let raw_id = raw_call["structuredContent"]["requestId"].as_u64();
    let typed = hub
        .call("fault__pid", CallArgs::default())
        .await
        .expect("pid");
    let typed_id = typed.structured_content.as_ref().expect("structured")["requestId"].as_u64();
    assert!(
        raw_id.is_some() && typed_id == raw_id.map(|id| id + 1),
        "one link, its own ids: {raw_id:?} then {typed_id:?}"
    );

    // The server's own JSON-RPC error comes back as a server error (not a success).
    let bad = raw(json!({ "name": "fault__add", "arguments": { "a": "not a number" } }));
    match hub.call_json("fault__add", &bad, CallArgs::default()).await {
        Err(CallError::ServerError { code, .. }) => assert_eq!(code, -32602),
        other => panic!("expected the server's invalid-params error, got {other:?}"),
    }
    // A name nobody publishes.
    assert!(matches!(
        hub.call_json("fault__nope", &params, CallArgs::default())
            .await,
        Err(CallError::UnknownTool { .. })
    ));
    hub.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn json_and_typed_calls_share_the_pipe_without_mixing_answers() {
    let dir = temp_dir("json-mixed");
    let hub = stdio_hub(&dir.join("ledger"));
    wait_ready(&hub, "fault", 0).await;
    let mut calls = tokio::task::JoinSet::new();
    for i in 0..40 {
        let json_hub = hub.clone();
        calls.spawn(async move {
            let hub = json_hub;
            let message = format!("json {i}");
            let params = raw(json!({ "name": "fault__echo", "arguments": { "message": message } }));
            let result = hub
                .call_json("fault__echo", &params, CallArgs::default())
                .await
                .expect("json echo");
            (message, first_text(&parsed(&result)).to_string())
        });
        let hub = hub.clone();
        calls.spawn(async move {
            let message = format!("typed {i}");
            let result = hub
                .call("fault__echo", echo(&message))
                .await
                .expect("typed echo");
            (message, text(&result))
        });
    }
    let mut answered = 0;
    while let Some(joined) = calls.join_next().await {
        let (sent, got) = joined.expect("task");
        assert_eq!(sent, got);
        answered += 1;
    }
    assert_eq!(answered, 80);
    hub.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_crash_mid_json_call_is_never_replayed_unless_the_tool_is_idempotent() {
    let dir = temp_dir("json-crash");
    let ledger = dir.join("ledger");
    let hub = stdio_hub(&ledger);
    let first = wait_ready(&hub, "fault", 0).await;

    let params = raw(
        json!({ "name": "fault__count", "arguments": { "id": "j-1", "crash_before_reply": true } }),
    );
    let error = hub
        .call_json("fault__count", &params, CallArgs::default())
        .await
        .expect_err("the server died before replying");
    match &error {
        CallError::OutcomeUnknown { restored, .. } => assert!(
            matches!(restored, Restored::Yes { generation } if *generation > first.generation),
            "{error}"
        ),
        other => panic!("expected outcome unknown, got {other:?}"),
    }
    assert_eq!(ledger_lines(&ledger), ["j-1"], "never run twice by us");

    let params = raw(
        json!({ "name": "fault__count_idempotent", "arguments": { "id": "j-2", "crash_before_reply": true } }),
    );
    let result = hub
        .call_json("fault__count_idempotent", &params, CallArgs::default())
        .await
        .expect("replayed on the fresh generation");
    assert_eq!(first_text(&parsed(&result)), "j-2");
    assert_eq!(ledger_lines(&ledger), ["j-1", "j-2", "j-2"]);
    hub.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_json_call_given_up_on_is_cancelled_upstream_every_way() {
    let dir = temp_dir("json-cancel");
    let ledger = dir.join("ledger");
    let hub = stdio_hub(&ledger);
    wait_ready(&hub, "fault", 0).await;
    let hang = raw(json!({ "name": "fault__hang", "arguments": {} }));

    // Its deadline.
    let started = tokio::time::Instant::now();
    let error = hub
        .call_json(
            "fault__hang",
            &hang,
            CallArgs {
                timeout: Some(Duration::from_millis(300)),
                ..Default::default()
            },
        )
        .await
        .expect_err("hang never answers");
    assert!(matches!(error, CallError::TimedOut { .. }), "{error:?}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "ended near its deadline"
    );
    ledger_gets(&ledger, "hang cancelled", 1).await;

    // The caller's token.
    let cancel = CancellationToken::new();
    let call = {
        let hub = hub.clone();
        let hang = hang.clone();
        let cancel = cancel.clone();
        tokio::spawn(async move {
            hub.call_json(
                "fault__hang",
                &hang,
                CallArgs {
                    cancel: Some(cancel),
                    ..Default::default()
                },
            )
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    cancel.cancel();
    let outcome = tokio::time::timeout(Duration::from_secs(5), call)
        .await
        .expect("the cancelled call ends")
        .expect("task");
    assert!(
        matches!(outcome, Err(CallError::Cancelled { .. })),
        "{outcome:?}"
    );
    ledger_gets(&ledger, "hang cancelled", 2).await;

    // The caller going away (its future dropped).
    let dropped = tokio::time::timeout(
        Duration::from_millis(300),
        hub.call_json("fault__hang", &hang, CallArgs::default()),
    )
    .await;
    assert!(dropped.is_err(), "hang never answers");
    ledger_gets(&ledger, "hang cancelled", 3).await;

    // The server is still fine afterwards.
    let echo = raw(json!({ "name": "fault__echo", "arguments": { "message": "still here" } }));
    let result = hub
        .call_json("fault__echo", &echo, CallArgs::default())
        .await
        .expect("echo");
    assert_eq!(first_text(&parsed(&result)), "still here");
    hub.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_json_call_with_progress_gets_it_with_its_own_token_over_stdio_and_http_too() {
    let dir = temp_dir("json-progress");
    let hub = stdio_hub(&dir.join("ledger"));
    wait_ready(&hub, "fault", 0).await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let params = raw(json!({
        "name": "fault__sleep", "arguments": { "ms": 350 }, "_meta": { "progressToken": "mine" }
    }));
    let result = hub
        .call_json(
            "fault__sleep",
            &params,
            CallArgs {
                progress: Some(tx),
                ..Default::default()
            },
        )
        .await
        .expect("sleep");
    assert!(!parsed(&result)["isError"].as_bool().unwrap_or(false));
    let mut updates = Vec::new();
    while let Ok(update) = rx.try_recv() {
        updates.push(update);
    }
    assert!(
        updates.len() >= 2,
        "progress reached the caller ({} updates)",
        updates.len()
    );
    // The caller's own token came back (the server saw the link's), the same every time.
    let token = serde_json::to_value(&updates[0].progress_token).expect("token");
    assert_eq!(token, json!("mine"), "the caller's token is mapped back");
    assert!(
        updates
            .iter()
            .all(|u| serde_json::to_value(&u.progress_token).ok() == Some(token.clone())),
        "one token per call"
    );
    assert!(
        updates.windows(2).all(|w| w[0].progress < w[1].progress),
        "progress rises"
    );
    hub.stop().await;

    let port = mcp_supervisor_testkit::free_port();
    let mut server = std::process::Command::new(fault_bin())
        .args(["--http", &format!("127.0.0.1:{port}")])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn the HTTP fault server");
    let hub = Hub::start(config(json!({
        "web": { "url": format!("http://127.0.0.1:{port}/mcp"), "reconnect": policy() }
    })));
    wait_ready(&hub, "web", 0).await;
    let params = raw(json!({ "name": "web__echo", "arguments": { "message": "over http" } }));
    let result = hub
        .call_json("web__echo", &params, CallArgs::default())
        .await;
    let pid = raw(json!({ "name": "web__pid", "arguments": {} }));
    let pid = hub.call_json("web__pid", &pid, CallArgs::default()).await;
    hub.stop().await;
    let _ = server.kill();
    let _ = server.wait();
    assert_eq!(
        first_text(&parsed(&result.expect("echo over HTTP"))),
        "over http"
    );
    let pid = parsed(&pid.expect("pid over HTTP"));
    assert!(
        pid["structuredContent"]["requestId"].is_number(),
        "over HTTP the link's own ids too: {pid}"
    );
    let _ = std::fs::remove_dir_all(dir);
}
