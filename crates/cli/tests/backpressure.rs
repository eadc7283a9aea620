//! Backpressure on the stdio face: a client that sends many requests and reads nothing makes
//! the proxy stop reading (at most `MAX_IN_FLIGHT` of its requests in flight or answered but not
//! written), so the calls do not all run and pile up their answers in memory; once the client
//! reads, every request is answered, each exactly once. Through `wrap` with the fault server,
//! whose ledger counts the calls that ran.
//!
//! On the HTTP face, a session with 256 requests unanswered gets its next one refused at once
//! (429, a JSON-RPC error that says to wait), and is served again once answers are out.
//!
//! A client that does not read while a server floods it with notifications has a bounded queue
//! of them: past it notifications are left out (and counted), and once it reads, the call's
//! answer comes.
//!
//! At the end of stdin, calls still running are answered when they end; one that does not end
//! is cancelled (upstream too) once nothing more is written, or after a grace of 3 s.
//!
//! And order on the stdio face: a cancellation read together with its request finds it.

mod support;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use mcp_supervisor_testkit::rawhttp::RawHttp;
use serde_json::{Value, json};
use support::*;

const CALLS: usize = 3000;

fn ledger_lines(path: &std::path::Path) -> usize {
    std::fs::read_to_string(path)
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

/// `wrap` in front of the fault server (its ledger at `ledger`), initialized: the child, its
/// stdin and its stdout.
fn wrap_fault(
    ledger: &std::path::Path,
    stderr: Stdio,
) -> (
    std::process::Child,
    std::process::ChildStdin,
    BufReader<std::process::ChildStdout>,
) {
    let mut child = Command::new(supervisor_bin())
        .args(["wrap", "--no-catalog", "--"])
        .arg(fault_bin())
        .arg("--ledger")
        .arg(ledger)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .expect("spawn wrap");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "backpressure", "version": "1"}}});
    writeln!(stdin, "{init}").expect("write initialize");
    let mut line = String::new();
    stdout.read_line(&mut line).expect("initialize answered");
    assert!(line.contains("\"result\""), "initialize: {line}");
    writeln!(
        stdin,
        "{}",
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
    )
    .expect("write initialized");
    (child, stdin, stdout)
}

#[test]
fn a_client_that_does_not_read_pauses_the_proxy_and_every_call_is_answered_once_it_reads() {
    let dir = temp_dir("backpressure");
    let ledger = dir.join("ledger");
    // The proxy's log stays in the test's directory, which a failure leaves behind.
    let log = std::fs::File::create(dir.join("wrap.log")).expect("create the log");
    let (mut child, mut stdin, mut stdout) = wrap_fault(&ledger, Stdio::from(log));
    let mut line = String::new();

    // Send every call from a thread of its own: once the proxy stops reading, the writes block.
    let writer = std::thread::spawn(move || {
        for i in 1..=CALLS {
            let call = json!({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {
                "name": "count_idempotent", "arguments": {"id": format!("c{i}")}}});
            if writeln!(stdin, "{call}").is_err() {
                return false;
            }
        }
        true
    });
    // Read nothing until the calls that ran stop growing (bounded): they stay at what the
    // bound allows, the requests in flight and the answers that fit in our stdout pipe, far
    // below all of them.
    let settle = Instant::now() + Duration::from_secs(30);
    let mut ran = ledger_lines(&ledger);
    loop {
        std::thread::sleep(Duration::from_millis(1500));
        let now = ledger_lines(&ledger);
        if (now == ran && now > 0) || Instant::now() > settle {
            ran = now;
            break;
        }
        ran = now;
    }
    eprintln!("{ran} of {CALLS} calls ran while the client read nothing");
    // 256 in flight or unwritten, and a 64 KiB pipe of answers of 80 bytes or more.
    let bound = 256 + 64 * 1024 / 80;
    assert!(
        ran <= bound,
        "{ran} of {CALLS} calls ran while the client read nothing (bound {bound}): the proxy did not pause"
    );
    assert!(ran > 0, "no call ran at all");

    // Now read: every call is answered, exactly once.
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut answered = vec![false; CALLS + 1];
    let mut count = 0;
    while count < CALLS && Instant::now() < deadline {
        line.clear();
        if stdout.read_line(&mut line).unwrap_or(0) == 0 {
            break;
        }
        let Ok(message) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        if let Some(id) = message["id"].as_u64() {
            assert!(message.get("result").is_some(), "call {id} failed: {line}");
            // The fault server answers a call that ran with its id, and nothing else does.
            assert_eq!(
                message["result"]["content"][0]["text"],
                json!(format!("c{id}")),
                "call {id} did not run as asked: {line}"
            );
            let id = id as usize;
            assert!(!answered[id], "call {id} answered twice");
            answered[id] = true;
            count += 1;
        }
    }
    assert_eq!(count, CALLS, "every call is answered once the client reads");
    assert!(
        writer.join().expect("the writer thread"),
        "every call was written"
    );
    assert_eq!(ledger_lines(&ledger), CALLS, "each call ran exactly once");
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(dir);
}

/// `serve --http` in front of the fault server (its ledger at `ledger`), the server ready.
async fn serve_fault(dir: &std::path::Path, ledger: &std::path::Path, limit: Duration) -> Running {
    let config = dir.join("servers.json");
    write_config(
        &config,
        json!({ "fault": { "command": fault_bin(), "args": ["--ledger", ledger] } }),
    );
    let proxy = serve_http_without_catalog(&config).await;
    status_until(&proxy, limit, |s| state_is(s, "fault", "ready")).await;
    proxy
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_session_past_its_requests_in_flight_is_refused_at_once_then_served_again() {
    const LIMIT: Duration = Duration::from_secs(30);
    const IN_FLIGHT: usize = 256;
    let dir = temp_dir("backpressure-http");
    let ledger = dir.join("ledger");
    let proxy = serve_fault(&dir, &ledger, LIMIT).await;
    let client = std::sync::Arc::new(
        RawHttp::connect(&proxy.url("/mcp"), Duration::from_secs(120))
            .await
            .expect("a session"),
    );
    // Calls that never answer take every place of the session.
    let hanging: Vec<_> = (0..IN_FLIGHT)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move {
                client
                    .request(
                        "tools/call",
                        json!({ "name": "fault__hang", "arguments": {} }),
                    )
                    .await
            })
        })
        .collect();
    // They are all in (the proxy counts them; a bounded wait) before anything else is sent: a
    // request sent sooner would take a place of its own, and refuse the last hanging call.
    let began = Instant::now();
    let in_flight = format!("mcp_supervisor_calls_in_flight {IN_FLIGHT}");
    loop {
        let metrics = metrics_text(proxy.port).await;
        if metrics.lines().any(|line| line == in_flight) {
            break;
        }
        assert!(
            began.elapsed() < LIMIT,
            "the hanging calls were never all in flight:\n{metrics}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The next request is refused at once.
    let refused = match client.answer("tools/list", json!({})).await {
        Err(e) if e.to_string().contains("429") => e.to_string(),
        other => panic!("tools/list past {IN_FLIGHT} in flight was not refused: {other:?}"),
    };
    assert!(refused.contains("-32000"), "{refused}");
    assert!(
        refused.contains("256 requests unanswered") && refused.contains("did not run"),
        "{refused}"
    );
    // The hanging calls go away (their clients drop them): the session is served again.
    for call in &hanging {
        call.abort();
    }
    let began = Instant::now();
    loop {
        match client.request("tools/list", json!({})).await {
            Ok((list, _)) => {
                assert!(list["tools"].as_array().is_some_and(|t| !t.is_empty()));
                break;
            }
            Err(e) => {
                assert!(
                    began.elapsed() < LIMIT && e.to_string().contains("429"),
                    "not served again: {e}"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    drop(proxy);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_client_that_does_not_read_a_flood_of_notifications_gets_some_left_out_and_its_answer() {
    const SENT: usize = 20_000;
    let dir = temp_dir("backpressure-flood");
    let ledger = dir.join("ledger");
    let (mut child, mut stdin, mut stdout) = wrap_fault(&ledger, Stdio::piped());
    let mut line = String::new();
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "flood", "arguments": {"count": SENT, "bytes": 1024},
        "_meta": {"progressToken": "f"}}});
    writeln!(stdin, "{call}").expect("write the call");
    stdin.flush().expect("flush");
    // Nothing is read until the server has sent every notification.
    let began = Instant::now();
    while !std::fs::read_to_string(&ledger).is_ok_and(|t| t.contains("flood")) {
        assert!(
            began.elapsed() < Duration::from_secs(60),
            "the flood never ended"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Now read: every line whole; the answer comes; some notifications were left out.
    let (mut progress, mut answered) = (0usize, false);
    while !answered {
        line.clear();
        assert!(
            stdout.read_line(&mut line).expect("read") > 0,
            "wrap ended first"
        );
        let message: Value = serde_json::from_str(&line).expect("a whole JSON line");
        match message["method"].as_str() {
            Some("notifications/progress") => progress += 1,
            _ if message["id"] == 1 => {
                assert_eq!(
                    message["result"]["content"][0]["text"],
                    format!("sent {SENT}")
                );
                answered = true;
            }
            _ => {}
        }
    }
    assert!(progress > 0, "the first notifications came");
    assert!(
        progress < SENT,
        "a client that did not read had notifications left out: {progress}"
    );
    let _ = child.kill();
    let _ = child.wait();
    let mut log = String::new();
    let _ = std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut log);
    assert!(
        log.contains("notifications are dropped"),
        "said in the log: {log}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// The same over the HTTP face: a POST whose event stream is not read while the call floods it
/// with progress has some left out, and its answer ends the stream once it is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_call_whose_stream_is_not_read_gets_some_progress_left_out_and_its_answer() {
    const SENT: usize = 20_000;
    const LIMIT: Duration = Duration::from_secs(60);
    let dir = temp_dir("backpressure-http-flood");
    let ledger = dir.join("ledger");
    let proxy = serve_fault(&dir, &ledger, LIMIT).await;
    let session = RawHttp::connect(&proxy.url("/mcp"), LIMIT)
        .await
        .expect("a session");
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "fault__flood", "arguments": {"count": SENT, "bytes": 1024},
        "_meta": {"progressToken": "f"}}});
    let response = reqwest::Client::new()
        .post(proxy.url("/mcp"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-06-18")
        .header("mcp-session-id", session.session().expect("a session id"))
        .body(call.to_string())
        .send()
        .await
        .expect("the POST");
    assert_eq!(response.status(), 200);
    // Nothing of the stream is read until the server has sent every notification.
    let began = Instant::now();
    while !std::fs::read_to_string(&ledger).is_ok_and(|t| t.contains("flood")) {
        assert!(began.elapsed() < LIMIT, "the flood never ended");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let body = tokio::time::timeout(LIMIT, response.text())
        .await
        .expect("the stream ends")
        .expect("the stream");
    let events: Vec<Value> = body
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect();
    let progress = events
        .iter()
        .filter(|e| e["method"] == "notifications/progress")
        .count();
    let answer = events.iter().find(|e| e["id"] == 1).expect("the answer");
    assert_eq!(
        answer["result"]["content"][0]["text"],
        format!("sent {SENT}")
    );
    assert!(progress > 0, "the first notifications came");
    assert!(
        progress < SENT,
        "a stream that was not read had some left out: {progress}"
    );
    let metrics = dropped_total(&proxy).await;
    assert!(metrics > 0.0, "counted: {metrics}");
    drop(proxy);
    let _ = std::fs::remove_dir_all(dir);
}

/// `mcp_supervisor_notifications_dropped_total` from the proxy's `/metrics`.
async fn dropped_total(proxy: &Running) -> f64 {
    let text = reqwest::get(proxy.url("/metrics"))
        .await
        .expect("GET /metrics")
        .text()
        .await
        .expect("its text");
    text.lines()
        .find_map(|l| l.strip_prefix("mcp_supervisor_notifications_dropped_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(-1.0)
}

/// Write `calls` and a ping after them, and once the ping is answered (every call is running),
/// close stdin; then read stdout to its end. What was read (bounded: 20 s), and whether `wrap`
/// exited within 10 s of its stdout's end.
fn end_stdin_while_calls_run(
    mut child: std::process::Child,
    mut stdin: std::process::ChildStdin,
    stdout: BufReader<std::process::ChildStdout>,
    calls: &[Value],
) -> (Vec<Value>, bool) {
    let ping = json!({"jsonrpc": "2.0", "id": "ping", "method": "ping"});
    let mut text: String = calls.iter().map(|c| format!("{c}\n")).collect();
    text.push_str(&format!("{ping}\n"));
    stdin.write_all(text.as_bytes()).expect("write the calls");
    let (pinged, ping_answered) = std::sync::mpsc::channel();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let messages: Vec<Value> = stdout
            .lines()
            .map_while(Result::ok)
            .filter_map(|line| serde_json::from_str::<Value>(&line).ok())
            .inspect(|message| {
                if message["id"] == json!("ping") {
                    let _ = pinged.send(());
                }
            })
            .collect();
        let _ = tx.send(messages);
    });
    ping_answered
        .recv_timeout(Duration::from_secs(10))
        .expect("the ping is answered");
    drop(stdin);
    let messages = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("stdout ends within 20 s of the end of stdin");
    let exited = (0..200).any(|_| {
        std::thread::sleep(Duration::from_millis(50));
        matches!(child.try_wait(), Ok(Some(_)))
    });
    if !exited {
        let _ = child.kill();
    }
    let _ = child.wait();
    (messages, exited)
}

/// The answer to call `id` among `messages`.
fn answer_to(messages: &[Value], id: u64) -> &Value {
    messages
        .iter()
        .find(|a| a["id"] == json!(id))
        .unwrap_or_else(|| panic!("no answer to call {id}: {messages:?}"))
}

/// Whether `answer` is the proxy's word that the call was cancelled (a result marked isError).
fn cancelled(answer: &Value) -> bool {
    answer["result"]["isError"] == json!(true)
        && answer["result"]["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("was cancelled"))
}

/// A client may close stdin and still read its answers (`cat requests | wrap`): a call still
/// running when stdin ends is answered when it ends, not cancelled, and one that does not end
/// (`hang`) is cancelled once nothing more is written, the server told (its ledger says "hang
/// cancelled") and the client answered with the cancellation; then the proxy exits.
#[test]
fn a_call_running_when_stdin_ends_is_answered_and_one_that_does_not_end_is_cancelled() {
    let dir = temp_dir("stdin-end-calls");
    let ledger = dir.join("ledger");
    let (child, stdin, stdout) = wrap_fault(&ledger, Stdio::null());
    let calls = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": "sleep", "arguments": {"ms": 300}}}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "hang", "arguments": {}}}),
    ];
    let (messages, exited) = end_stdin_while_calls_run(child, stdin, stdout, &calls);
    assert_eq!(
        answer_to(&messages, 1)["result"]["content"][0]["text"],
        json!("slept 300 ms"),
        "the call running when stdin ended ran to its end: {messages:?}"
    );
    assert!(
        cancelled(answer_to(&messages, 2)),
        "the call that did not end was cancelled: {messages:?}"
    );
    let text = std::fs::read_to_string(&ledger).unwrap_or_default();
    assert!(
        text.lines().any(|l| l.trim() == "hang cancelled"),
        "the server was told of the cancellation: {text:?}"
    );
    assert!(exited, "wrap exits within 10 s of its stdout's end");
    let _ = std::fs::remove_dir_all(dir);
}

/// A call that goes on after stdin ends, writing progress all the while, is cancelled after
/// the grace the end of stdin gives (3 s), not run to its end (60 s): the proxy stops within
/// about 5 s of the end of stdin (SPEC §7). Its progress reached the client meanwhile.
#[test]
fn a_call_that_writes_progress_past_the_grace_after_stdin_ends_is_cancelled() {
    let dir = temp_dir("stdin-end-grace");
    let ledger = dir.join("ledger");
    let (child, stdin, stdout) = wrap_fault(&ledger, Stdio::null());
    let calls = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "sleep", "arguments": {"ms": 60_000}, "_meta": {"progressToken": "p"}}}),
    ];
    let (messages, exited) = end_stdin_while_calls_run(child, stdin, stdout, &calls);
    assert!(
        cancelled(answer_to(&messages, 1)),
        "the call was cancelled: {messages:?}"
    );
    let progress = messages
        .iter()
        .filter(|m| m["method"] == json!("notifications/progress"))
        .count();
    assert!(
        progress >= 10,
        "the call's progress reached the client while it ran: {progress}"
    );
    assert!(exited, "wrap exits within 10 s of its stdout's end");
    let _ = std::fs::remove_dir_all(dir);
}

/// A cancellation that comes in the same read as its request finds it: a request read is
/// started before the notification after it is handled. A `hang` call and its cancellation in
/// one write: the server is told (its ledger says "hang cancelled"), and the call gets no
/// answer, as MCP asks of the receiver of a cancellation: a `ping` sent after the server saw the
/// cancellation is answered, and nothing answered the call before it.
#[test]
fn a_cancellation_read_with_its_request_cancels_it() {
    let dir = temp_dir("cancel-same-read");
    let ledger = dir.join("ledger");
    let (mut child, mut stdin, stdout) = wrap_fault(&ledger, Stdio::null());
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "hang", "arguments": {}}});
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 1, "reason": "test"}});
    stdin
        .write_all(format!("{call}\n{cancel}\n").as_bytes())
        .expect("write the call and its cancellation at once");
    // Bounded: the server appends its line at once when the cancellation reaches it.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let seen = loop {
        let text = std::fs::read_to_string(&ledger).unwrap_or_default();
        if text.lines().any(|l| l.trim() == "hang cancelled") {
            break true;
        }
        if std::time::Instant::now() > deadline {
            break false;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let ping = json!({"jsonrpc": "2.0", "id": 2, "method": "ping"});
    writeln!(stdin, "{ping}").expect("write the ping");
    // Read on a thread of its own, so the wait is bounded.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut stdout = stdout;
        let mut line = String::new();
        let mut before = Vec::new();
        while stdout.read_line(&mut line).unwrap_or(0) > 0 {
            if line.contains("\"id\":2") {
                let _ = tx.send(before);
                return;
            }
            before.push(line.clone());
            line.clear();
        }
    });
    let before = rx.recv_timeout(Duration::from_secs(10));
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(dir);
    assert!(seen, "the server was told the call is cancelled");
    let before = before.expect("the ping is answered");
    assert!(
        !before.iter().any(|l| l.contains("\"id\":1")),
        "nothing answers the cancelled call: {before:?}"
    );
}
