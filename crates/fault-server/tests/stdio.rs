//! The fault server driven over stdio with raw JSON-RPC lines.

mod common;

use std::time::{Duration, Instant};

use common::{StdioServer, is_error, result_text, temp_dir};
use serde_json::json;

#[tokio::test]
async fn echo_add_and_tool_list() {
    let mut server = StdioServer::start(&[]).await;
    let response = server.call(1, "echo", json!({"message": "hello"})).await;
    assert_eq!(result_text(&response), "hello");
    assert!(!is_error(&response));

    let response = server.call(2, "add", json!({"a": 1, "b": 2.5})).await;
    assert_eq!(result_text(&response), "3.5");

    let response = server.request(3, "tools/list", json!({})).await;
    let tools = response["result"]["tools"].as_array().expect("tools");
    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    for expected in [
        "add",
        "echo",
        "crash",
        "hang",
        "sleep",
        "count",
        "count_idempotent",
        "set_tools",
        "drop_sessions",
        "block",
        "garbage",
        "pid",
        "elicit",
    ] {
        assert!(
            names.contains(&expected),
            "{expected} missing from {names:?}"
        );
    }
    let annotations = |name: &str| {
        tools
            .iter()
            .find(|t| t["name"] == name)
            .map(|t| t["annotations"].clone())
            .unwrap_or_default()
    };
    assert_eq!(annotations("echo")["readOnlyHint"], json!(true));
    assert_eq!(annotations("count")["idempotentHint"], json!(false));
    assert_eq!(
        annotations("count_idempotent")["idempotentHint"],
        json!(true)
    );

    let response = server.call(4, "pid", json!({})).await;
    assert_eq!(
        result_text(&response),
        server.child.id().expect("pid").to_string()
    );

    // End of stdin ends the server cleanly.
    server.close_stdin();
    assert_eq!(server.exit_code().await, Some(0));
}

#[tokio::test]
async fn count_appends_to_the_ledger() {
    let dir = temp_dir("ledger");
    let ledger = dir.join("ledger.txt");
    let ledger_arg = ledger.to_str().expect("utf-8 path");
    let mut server = StdioServer::start(&["--ledger", ledger_arg]).await;
    let response = server.call(1, "count", json!({"id": "a"})).await;
    assert_eq!(result_text(&response), "a");
    let response = server.call(2, "count_idempotent", json!({"id": "b"})).await;
    assert_eq!(result_text(&response), "b");
    let response = server.call(3, "count", json!({"id": "a"})).await;
    assert_eq!(result_text(&response), "a");
    assert_eq!(
        std::fs::read_to_string(&ledger).expect("ledger"),
        "a\nb\na\n"
    );
    let response = server
        .request(4, "resources/read", json!({"uri": "fault://ledger/a"}))
        .await;
    assert_eq!(response["result"]["contents"][0]["text"], "2", "{response}");

    // The side effect happens, the reply never comes, the process exits with 7.
    server
        .send(json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
            "params": {"name": "count", "arguments": {"id": "c", "crash_before_reply": true}}}))
        .await;
    let mut lines = Vec::new();
    while let Some(line) = server.next_line().await {
        lines.push(line);
    }
    assert!(lines.is_empty(), "no reply expected, got {lines:?}");
    assert_eq!(server.exit_code().await, Some(7));
    assert_eq!(
        std::fs::read_to_string(&ledger).expect("ledger"),
        "a\nb\na\nc\n"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn count_without_ledger_is_a_tool_error() {
    let mut server = StdioServer::start(&[]).await;
    let response = server.call(1, "count", json!({"id": "x"})).await;
    assert!(is_error(&response), "{response}");
    assert!(result_text(&response).contains("--ledger"));
}

#[tokio::test]
async fn crash_replies_then_exits_with_7() {
    let mut server = StdioServer::start(&[]).await;
    let response = server.call(1, "crash", json!({})).await;
    assert_eq!(result_text(&response), "crashing");
    assert_eq!(server.exit_code().await, Some(7));
}

#[tokio::test]
async fn fail_first_fails_n_starts_then_serves() {
    let dir = temp_dir("fail-first");
    let state = dir.join("state");
    let state_arg = state.to_str().expect("utf-8 path");
    let args = ["--fail-first", "2", "--state-file", state_arg];
    for k in 1..=2 {
        let mut server = StdioServer::spawn(&args);
        assert_eq!(server.exit_code().await, Some(3), "start {k}");
        assert_eq!(
            std::fs::read_to_string(&state).expect("state").trim(),
            k.to_string()
        );
    }
    let mut server = StdioServer::start(&args).await;
    let response = server.call(1, "echo", json!({"message": "up"})).await;
    assert_eq!(result_text(&response), "up");
    assert_eq!(std::fs::read_to_string(&state).expect("state").trim(), "3");
    drop(server);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn set_tools_changes_the_list_and_notifies() {
    let mut server = StdioServer::start(&["--tools", "3"]).await;
    server
        .send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "set_tools", "arguments": {"tools": ["dyn_a", "dyn_b"]}}}))
        .await;
    let (response, before) = server.response(1).await;
    assert!(!is_error(&response), "{response}");
    assert!(
        before
            .iter()
            .any(|m| m["method"] == "notifications/tools/list_changed"),
        "no list_changed before the reply: {before:?}"
    );
    let response = server.request(2, "tools/list", json!({})).await;
    let names: Vec<String> = response["result"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect();
    for expected in ["tool_0001", "tool_0003", "dyn_a", "dyn_b"] {
        assert!(names.iter().any(|n| n == expected), "{expected} missing");
    }
    let response = server.call(3, "dyn_b", json!({"x": 1})).await;
    assert_eq!(result_text(&response), r#"{"x":1}"#);

    // Replacing drops the old dynamic tools.
    let _ = server
        .call(4, "set_tools", json!({"tools": ["dyn_c"]}))
        .await;
    let response = server.call(5, "dyn_a", json!({})).await;
    assert!(response.get("error").is_some(), "{response}");
}

#[tokio::test]
async fn sleep_sends_progress_and_hang_honours_cancellation() {
    let mut server = StdioServer::start(&[]).await;
    server
        .send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "sleep", "arguments": {"ms": 350}, "_meta": {"progressToken": "tok"}}}))
        .await;
    let (response, before) = server.response(1).await;
    assert_eq!(result_text(&response), "slept 350 ms");
    let progress = before
        .iter()
        .filter(|m| {
            m["method"] == "notifications/progress" && m["params"]["progressToken"] == "tok"
        })
        .count();
    assert!(
        progress >= 2,
        "expected progress notifications, got {before:?}"
    );

    server
        .send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "hang", "arguments": {}}}))
        .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    server
        .send(
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": 2, "reason": "test"}}),
        )
        .await;
    // The server stays responsive and does not answer the cancelled call.
    tokio::time::sleep(Duration::from_millis(100)).await;
    server
        .send(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
            "params": {"name": "echo", "arguments": {"message": "after hang"}}}))
        .await;
    let (response, before) = server.response(3).await;
    assert_eq!(result_text(&response), "after hang");
    assert!(
        before.iter().all(|m| m.get("id") != Some(&json!(2))),
        "cancelled call answered: {before:?}"
    );
}

#[tokio::test]
async fn block_stalls_everything_including_ping() {
    let mut server = StdioServer::start(&[]).await;
    server
        .send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "block", "arguments": {"ms": 400}}}))
        .await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let sent = Instant::now();
    server
        .send(json!({"jsonrpc": "2.0", "id": 2, "method": "ping"}))
        .await;
    let (ping, _) = server.response(2).await;
    assert!(ping.get("result").is_some(), "{ping}");
    assert!(
        sent.elapsed() >= Duration::from_millis(250),
        "ping answered while blocked: {:?}",
        sent.elapsed()
    );
}

#[tokio::test]
async fn no_ping_answers_method_not_found() {
    let mut server = StdioServer::start(&["--no-ping"]).await;
    let response = server.request(1, "ping", json!({})).await;
    assert_eq!(response["error"]["code"], json!(-32601), "{response}");
}

#[tokio::test]
async fn garbage_writes_a_non_json_line() {
    let mut server = StdioServer::start(&[]).await;
    server
        .send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "garbage", "arguments": {}}}))
        .await;
    let line = server.next_line().await.expect("a line");
    assert!(
        serde_json::from_str::<serde_json::Value>(&line).is_err(),
        "{line}"
    );
    let response = server.call(2, "drop_sessions", json!({})).await;
    assert!(is_error(&response), "drop_sessions over stdio: {response}");
}

#[tokio::test]
async fn exit_after_ms_exits_with_5() {
    let start = Instant::now();
    let mut server = StdioServer::start(&["--exit-after-ms", "300"]).await;
    assert_eq!(server.exit_code().await, Some(5));
    assert!(start.elapsed() >= Duration::from_millis(300));
}

#[tokio::test]
async fn resources_and_prompts() {
    let mut server = StdioServer::start(&[]).await;
    let response = server.request(1, "resources/list", json!({})).await;
    assert_eq!(response["result"]["resources"][0]["uri"], "fault://status");
    let response = server
        .request(2, "resources/templates/list", json!({}))
        .await;
    assert_eq!(
        response["result"]["resourceTemplates"][0]["uriTemplate"],
        "fault://ledger/{name}"
    );
    let response = server
        .request(3, "resources/read", json!({"uri": "fault://status"}))
        .await;
    let status: serde_json::Value = serde_json::from_str(
        response["result"]["contents"][0]["text"]
            .as_str()
            .expect("text"),
    )
    .expect("status JSON");
    assert_eq!(status["server"], "mcp-fault-server");
    let response = server.request(4, "prompts/list", json!({})).await;
    assert_eq!(response["result"]["prompts"][0]["name"], "greet");
    let response = server
        .request(
            5,
            "prompts/get",
            json!({"name": "greet", "arguments": {"name": "Ada"}}),
        )
        .await;
    assert_eq!(
        response["result"]["messages"][0]["content"]["text"],
        "Hello, Ada!"
    );
}

#[tokio::test]
async fn startup_options() {
    let dir = temp_dir("startup");
    let pid_file = dir.join("pid");
    let start = Instant::now();
    let mut server = StdioServer::start(&[
        "--startup-delay-ms",
        "200",
        "--pid-file",
        pid_file.to_str().expect("utf-8 path"),
        "--page-size",
        "5",
        "--tools",
        "7",
    ])
    .await;
    assert!(start.elapsed() >= Duration::from_millis(200));
    assert_eq!(
        std::fs::read_to_string(&pid_file).expect("pid file").trim(),
        server.child.id().expect("pid").to_string()
    );
    // 17 built-ins + 7 extras, 5 per page.
    let mut cursor: Option<String> = None;
    let mut total = 0;
    let mut pages = 0;
    loop {
        let params = match &cursor {
            Some(cursor) => json!({"cursor": cursor}),
            None => json!({}),
        };
        let response = server.request(100 + pages, "tools/list", params).await;
        total += response["result"]["tools"].as_array().expect("tools").len();
        pages += 1;
        match response["result"]["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    assert_eq!((total, pages), (24, 5));
    drop(server);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn end_of_stdin_exits_promptly_even_with_a_hung_call() {
    let mut server = StdioServer::start(&[]).await;
    server
        .send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "hang", "arguments": {}}}))
        .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let closed = Instant::now();
    server.close_stdin();
    assert_eq!(server.exit_code().await, Some(0));
    assert!(
        closed.elapsed() < Duration::from_secs(2),
        "took {:?}",
        closed.elapsed()
    );
}

#[tokio::test]
async fn ignore_stdin_eof_keeps_the_process_running_after_stdin_ends() {
    use tokio::io::AsyncBufReadExt;
    let mut child = tokio::process::Command::new(common::BIN)
        .arg("--ignore-stdin-eof")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn mcp-fault-server");
    drop(child.stdin.take());
    let mut stderr = tokio::io::BufReader::new(child.stderr.take().expect("stderr")).lines();
    let said = tokio::time::timeout(common::STEP, async {
        while let Ok(Some(line)) = stderr.next_line().await {
            if line.contains("--ignore-stdin-eof keeps this process running") {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(
        said.ok(),
        Some(true),
        "says it keeps running after stdin ended"
    );
    assert!(
        child.try_wait().expect("try_wait").is_none(),
        "still running after stdin ended"
    );
    child.kill().await.expect("kill");
}
