//! The HTTP face's requests in flight are bounded over the whole face (`http::Options::
//! max_in_flight`), sessions and sessionless requests together: past the bound a request is
//! refused at once with 429 and a JSON-RPC error that says why and that it did not run; a place
//! is given back when a request ends (here: its client goes away, which cancels its call).

use std::time::Duration;

use mcp_supervisor::HubOptions;
use mcp_supervisor::core::config::parse_config;
use mcp_supervisor_front::{Mode, http, seal};
use mcp_supervisor_testkit::fault_bin;
use serde_json::{Value, json};

/// The bound of every wait.
const LIMIT: Duration = Duration::from_secs(20);

const ACCEPT: &str = "application/json, text/event-stream";

/// POST `message` (on `session`, if any); the status and the body.
async fn post(
    http: &reqwest::Client,
    url: &str,
    session: Option<&str>,
    message: &Value,
    headers: &[(&str, &str)],
) -> (u16, String) {
    let mut request = http
        .post(url)
        .header("content-type", "application/json")
        .header("accept", ACCEPT)
        .body(message.to_string());
    if let Some(session) = session {
        request = request
            .header("mcp-session-id", session)
            .header("mcp-protocol-version", "2025-11-25");
    }
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.expect("POST /mcp");
    let status = response.status().as_u16();
    (status, response.text().await.expect("read the body"))
}

/// Open a session; its id.
async fn open_session(http: &reqwest::Client, url: &str) -> String {
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "in-flight-test", "version": "1"}}});
    let response = http
        .post(url)
        .header("content-type", "application/json")
        .header("accept", ACCEPT)
        .body(init.to_string())
        .send()
        .await
        .expect("initialize");
    assert_eq!(response.status().as_u16(), 200);
    let session = response
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .expect("a session id")
        .to_string();
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(
        post(http, url, Some(&session), &initialized, &[]).await.0,
        202
    );
    session
}

fn call(id: u64, tool: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": tool, "arguments": {}}})
}

#[tokio::test]
async fn past_the_face_bound_requests_of_any_session_or_none_are_refused_at_once() {
    let text = json!({ "mcpServers": { "fault": { "command": fault_bin() } } }).to_string();
    let config = parse_config(&text, &|_| None).expect("a valid config");
    let proxy = mcp_supervisor_front::start(config, Mode::Aggregate, HubOptions::default());
    let sealing = http::Sealing {
        keys: seal::Keys::random().expect("a key"),
        max_age: Duration::from_secs(3600),
    };
    let mut options = http::Options::new(sealing);
    options.max_in_flight = 2;
    let shutdown = options.shutdown.clone();
    let app = http::router(proxy.clone(), options);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!(
        "http://{}{}",
        listener.local_addr().expect("addr"),
        http::PATH
    );
    let serving = tokio::spawn({
        let shutdown = shutdown.clone();
        async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(shutdown.cancelled_owned())
                .await
        }
    });
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(LIMIT)
        .build()
        .expect("an HTTP client");

    let (first, second) = (
        open_session(&http, &url).await,
        open_session(&http, &url).await,
    );
    // The server is up: a call is answered (and its place given back).
    let (status, body) = post(&http, &url, Some(&first), &call(2, "fault__echo"), &[]).await;
    assert_eq!(status, 200, "{body}");

    // Two calls that hang take the face's two places, one per session.
    let hanging = |session: String, id: u64| {
        let (http, url) = (http.clone(), url.clone());
        tokio::spawn(async move {
            post(&http, &url, Some(&session), &call(id, "fault__hang"), &[]).await
        })
    };
    let calls_in_flight = || {
        let text = proxy.metrics().render(&[], 0);
        text.lines()
            .find_map(|line| line.strip_prefix("mcp_supervisor_calls_in_flight "))
            .and_then(|n| n.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    let until_in_flight = |n: u64| async move {
        let deadline = tokio::time::Instant::now() + LIMIT;
        while calls_in_flight() != n {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{n} calls never ran"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    let one = hanging(first.clone(), 3);
    until_in_flight(1).await;
    let two = hanging(second.clone(), 4);
    until_in_flight(2).await;
    let (status, refused) = post(&http, &url, Some(&first), &call(5, "fault__echo"), &[]).await;
    assert_eq!(status, 429, "{refused}");
    let refused: Value = serde_json::from_str(&refused).expect("a JSON-RPC error");
    assert_eq!(refused["id"], 5, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("all clients together") && message.contains("did not run"),
        "{message}"
    );

    // A sessionless (2026-07-28) request is refused as well: the bound is the face's.
    let mut sessionless = call(6, "fault__echo");
    sessionless["params"]["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}
    });
    let era = [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", "fault__echo"),
    ];
    let (status, body) = post(&http, &url, None, &sessionless, &era).await;
    assert_eq!(status, 429, "{body}");

    // One hanging call's client goes away: its place comes back, and a request runs again.
    one.abort();
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        let (status, body) = post(&http, &url, None, &sessionless, &era).await;
        if status == 200 {
            assert!(body.contains("\"id\":6"), "{body}");
            break;
        }
        assert_eq!(status, 429, "{body}");
        assert!(
            tokio::time::Instant::now() < deadline,
            "the place of the abandoned call never came back"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    two.abort();
    shutdown.cancel();
    let served = tokio::time::timeout(LIMIT, serving).await;
    assert!(matches!(served, Ok(Ok(Ok(())))), "{served:?}");
    proxy.hub().stop().await;
}
