//! The streamable-HTTP wire against real servers on loopback: the fault server (a real rmcp
//! streamable-HTTP server, killed and restarted for the failure cases), and a tiny axum server of
//! this file's own where exact headers, resumption, byte-for-byte bodies and limits are checked.
//!
//! Every wait is bounded; nothing sleeps to "wait and see".

mod interop;

use std::convert::Infallible;
use std::future::Future;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use interop::{Server, free_port, wait_port_closed};
use mcp_supervisor::core::classify::Failure;
use mcp_supervisor::upstream::http_wire::HttpWire;
use mcp_supervisor::upstream::wire::{Incoming, Wire};
use mcp_supervisor_testkit::{fault_bin, temp_dir};
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// The bound on every single wait of these tests.
const LIMIT: Duration = Duration::from_secs(15);

async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    match tokio::time::timeout(LIMIT, future).await {
        Ok(value) => value,
        Err(_) => panic!("{what}: nothing within {LIMIT:?}"),
    }
}

fn initialize(id: u64) -> String {
    json!({
        "jsonrpc": "2.0",
        "id": id,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": { "name": "http-wire-test", "version": "0" }
        }
    })
    .to_string()
}

const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;

fn request(id: u64, method: &str, params: Value) -> String {
    json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }).to_string()
}

// === the peer side ===

struct Peer {
    wire: HttpWire,
    rx: mcp_supervisor::upstream::wire::IncomingRx,
}

impl Peer {
    fn new(url: &str, headers: &[(&str, &str)]) -> Self {
        let headers: Vec<(String, String)> = headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let (tx, rx) = mcp_supervisor::upstream::wire::incoming();
        let wire = HttpWire::new(url, &headers, tx).expect("a valid wire");
        Self { wire, rx }
    }

    /// A peer whose queue of received messages holds at most `bound`.
    fn bounded(url: &str, bound: usize) -> Self {
        let (tx, rx) = mpsc::channel(bound);
        let wire = HttpWire::new(url, &[], tx).expect("a valid wire");
        Self { wire, rx }
    }

    async fn send(&self, text: &str, request: Option<u64>) -> Result<(), Failure> {
        within("send", self.wire.send(text.to_string(), request)).await
    }

    async fn next(&mut self) -> Incoming {
        within("an incoming message", self.rx.recv())
            .await
            .expect("the wire still holds its sender")
    }

    /// The messages before the answer to `id` (JSON, related), and the answer.
    async fn until_answer(&mut self, id: u64) -> (Vec<(Value, Option<u64>)>, Value) {
        let mut before = Vec::new();
        loop {
            match self.next().await {
                Incoming::Message { text, related } => {
                    let message: Value = serde_json::from_str(&text).expect("JSON text");
                    let is_answer = message["id"] == json!(id)
                        && (message.get("result").is_some() || message.get("error").is_some());
                    if is_answer {
                        assert_eq!(
                            related,
                            Some(id),
                            "the answer comes on its request's stream"
                        );
                        return (before, message);
                    }
                    before.push((message, related));
                }
                Incoming::Lost { id: lost, failure } => {
                    panic!("request {lost} lost ({failure:?}) while waiting for {id}")
                }
            }
        }
    }

    /// initialize, notifications/initialized, then `initialized(version)`; the initialize answer.
    async fn handshake(&mut self) -> Value {
        self.send(&initialize(1), Some(1))
            .await
            .expect("initialize POST");
        let (_, answer) = self.until_answer(1).await;
        self.send(INITIALIZED, None)
            .await
            .expect("notifications/initialized is accepted");
        let version = answer["result"]["protocolVersion"]
            .as_str()
            .expect("a protocol version")
            .to_string();
        self.wire.initialized(&version);
        answer
    }
}

// === the fault server ===

async fn fault_server(port: u16, dir: &Path, tag: &str) -> Server {
    let mut cmd = Command::new(fault_bin());
    cmd.args(["--http", &format!("127.0.0.1:{port}")]);
    let mut server = Server::spawn("the fault server", cmd, &dir.join(format!("{tag}.log")));
    server.wait_listening(port, LIMIT).await;
    server
}

fn fault_url(port: u16) -> String {
    format!("http://127.0.0.1:{port}/mcp")
}

#[tokio::test]
async fn initialize_gets_a_session_that_later_requests_carry() {
    let dir = temp_dir("wire-init");
    let port = free_port();
    let _server = fault_server(port, &dir, "server").await;
    let mut peer = Peer::new(&fault_url(port), &[]);

    peer.send(&initialize(1), Some(1))
        .await
        .expect("initialize POST");
    let (_, answer) = peer.until_answer(1).await;
    assert_eq!(
        answer["result"]["serverInfo"]["name"], "mcp-fault-server",
        "{answer}"
    );
    peer.send(INITIALIZED, None)
        .await
        .expect("notifications/initialized is accepted");
    peer.wire.initialized(
        answer["result"]["protocolVersion"]
            .as_str()
            .expect("a version"),
    );

    // rmcp refuses any request but initialize without the session id.
    peer.send(&request(2, "tools/list", json!({})), Some(2))
        .await
        .expect("tools/list POST");
    let (_, tools) = peer.until_answer(2).await;
    let names: Vec<&str> = tools["result"]["tools"]
        .as_array()
        .expect("a tool list")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(names.contains(&"echo"), "{tools}");
    peer.wire.close();
}

#[tokio::test]
async fn progress_comes_on_the_calls_own_stream_before_its_result() {
    let dir = temp_dir("wire-progress");
    let port = free_port();
    let _server = fault_server(port, &dir, "server").await;
    let mut peer = Peer::new(&fault_url(port), &[]);
    peer.handshake().await;

    let call = request(
        3,
        "tools/call",
        json!({ "name": "sleep", "arguments": { "ms": 350 }, "_meta": { "progressToken": "p-3" } }),
    );
    peer.send(&call, Some(3)).await.expect("tools/call POST");
    let (before, answer) = peer.until_answer(3).await;
    assert_eq!(
        answer["result"]["content"][0]["text"], "slept 350 ms",
        "{answer}"
    );
    assert!(!before.is_empty(), "progress notifications came first");
    for (message, related) in &before {
        assert_eq!(message["method"], "notifications/progress", "{message}");
        assert_eq!(message["params"]["progressToken"], "p-3", "{message}");
        assert_eq!(*related, Some(3), "{message} is related to its call");
    }
    peer.wire.close();
}

/// A server that sends faster than the peer takes: the wire waits at the queue's bound instead
/// of reading on into memory, and loses nothing: every notification comes, in order, then the
/// answer.
#[tokio::test]
async fn a_flood_past_the_incoming_bound_waits_for_the_peer_and_loses_nothing() {
    const BOUND: usize = 8;
    const COUNT: u64 = 3000;
    let dir = temp_dir("wire-flood");
    let port = free_port();
    let _server = fault_server(port, &dir, "server").await;
    let mut peer = Peer::bounded(&fault_url(port), BOUND);
    peer.handshake().await;

    let call = request(
        3,
        "tools/call",
        json!({ "name": "flood", "arguments": { "count": COUNT, "bytes": 64 },
                "_meta": { "progressToken": "f" } }),
    );
    peer.send(&call, Some(3)).await.expect("tools/call POST");
    // The queue fills to its bound, and no further, while nobody reads.
    within("the queue filling", async {
        while peer.rx.len() < BOUND {
            tokio::task::yield_now().await;
        }
    })
    .await;
    assert_eq!(
        peer.rx.len(),
        BOUND,
        "the queue holds no more than its bound"
    );
    let (before, answer) = peer.until_answer(3).await;
    assert_eq!(
        answer["result"]["content"][0]["text"],
        format!("sent {COUNT}"),
        "{answer}"
    );
    let progress: Vec<f64> = before
        .iter()
        .filter_map(|(m, _)| m["params"]["progress"].as_f64())
        .collect();
    assert_eq!(progress.len(), COUNT as usize, "every notification came");
    let out_of_order = progress.iter().zip(1..).find(|(p, n)| **p != *n as f64);
    assert_eq!(out_of_order, None, "the notifications came in order");
    peer.wire.close();
}

#[tokio::test]
async fn a_dead_server_refuses_and_a_restarted_one_expires_the_session() {
    let dir = temp_dir("wire-restart");
    let port = free_port();
    let mut server = fault_server(port, &dir, "first").await;
    let mut peer = Peer::new(&fault_url(port), &[]);
    peer.handshake().await;

    server.kill();
    wait_port_closed(port, LIMIT).await;
    assert_eq!(
        peer.send(&request(2, "tools/list", json!({})), Some(2))
            .await,
        Err(Failure::ConnectRefused)
    );

    let _second = fault_server(port, &dir, "second").await;
    assert_eq!(
        peer.send(&request(3, "tools/list", json!({})), Some(3))
            .await,
        Err(Failure::SessionExpired)
    );
    peer.wire.close();
}

#[tokio::test]
async fn a_call_in_flight_when_the_server_dies_is_lost_after_send() {
    let dir = temp_dir("wire-lost");
    let port = free_port();
    let mut server = fault_server(port, &dir, "server").await;
    let mut peer = Peer::new(&fault_url(port), &[]);
    peer.handshake().await;

    // The POST is answered with an event stream at once; the answer never comes.
    peer.send(
        &request(5, "tools/call", json!({ "name": "hang", "arguments": {} })),
        Some(5),
    )
    .await
    .expect("the hang call went out");
    server.kill();
    // Resumption (the stream had event ids) is tried against a closed port, then given up.
    match peer.next().await {
        Incoming::Lost { id, failure } => {
            assert_eq!(id, 5);
            assert_eq!(failure, Failure::ConnectionLostAfterSend);
        }
        Incoming::Message { text, related } => panic!("unexpected message {text} ({related:?})"),
    }
    peer.wire.close();
}

// === a tiny scripted server ===

/// One request as the tiny server saw it.
#[derive(Debug)]
struct Seen {
    method: Method,
    headers: HeaderMap,
    body: String,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

struct Tiny {
    seen: mpsc::UnboundedSender<Seen>,
    /// Whether the standalone GET gets an event stream (else 405).
    standalone_stream: bool,
}

/// The initialize answer, in an order and spacing a re-serialization would not keep.
const TINY_INIT: &str = r#"{"result":{"protocolVersion":"2025-06-18", "capabilities":{},"serverInfo":{"name":"tiny","version":"1"}},"jsonrpc":"2.0","id":1}"#;
const TINY_SESSION: &str = "tiny-session-1";
const STALE_BODY: &str = r#"{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: No valid session ID provided"},"id":null}"#;

fn sse(body: String) -> Response {
    ([(header::CONTENT_TYPE, "text/event-stream")], body).into_response()
}

async fn tiny(
    State(state): State<Arc<Tiny>>,
    method: Method,
    headers: HeaderMap,
    body: String,
) -> Response {
    let _ = state.seen.send(Seen {
        method: method.clone(),
        headers: headers.clone(),
        body: body.clone(),
    });
    let last_event_id = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    match method {
        Method::DELETE => StatusCode::OK.into_response(),
        Method::GET => match last_event_id.as_deref() {
            // The cut stream of request 7, resumed after its progress.
            Some("e2") => sse(format!(
                "id: e3\ndata: {}\n\n",
                json!({"jsonrpc":"2.0","id":7,"result":{"resumed":true}})
            )),
            None if state.standalone_stream => sse(format!(
                "id: g1\ndata: {}\n\n",
                json!({"jsonrpc":"2.0","method":"notifications/tools/list_changed"})
            )),
            _ => StatusCode::METHOD_NOT_ALLOWED.into_response(),
        },
        Method::POST => {
            let message: Value = serde_json::from_str(&body).unwrap_or_default();
            let id = message["id"].clone();
            match message["method"].as_str() {
                Some("initialize") => (
                    [
                        (header::CONTENT_TYPE, "application/json"),
                        (
                            header::HeaderName::from_static("mcp-session-id"),
                            TINY_SESSION,
                        ),
                    ],
                    TINY_INIT,
                )
                    .into_response(),
                _ if id.is_null() => StatusCode::ACCEPTED.into_response(),
                // A priming event, one progress, then the stream ends without the answer.
                Some("cut") => sse(format!(
                    "id: e1\nretry: 100\ndata:\n\nid: e2\ndata: {}\n\n",
                    json!({
                        "jsonrpc": "2.0",
                        "method": "notifications/progress",
                        "params": { "progressToken": "t", "progress": 1 }
                    })
                )),
                // No event ids: nothing to resume from.
                Some("cut_without_ids") => sse(format!(
                    "data: {}\n\n",
                    json!({
                        "jsonrpc": "2.0",
                        "method": "notifications/message",
                        "params": { "level": "info", "data": "x" }
                    })
                )),
                // 17 MiB, chunked (no Content-Length).
                Some("big") => {
                    let head = format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{"pad":""#);
                    let chunks = std::iter::once(head.into_bytes())
                        .chain((0..17).map(|_| vec![b'x'; 1024 * 1024]))
                        .chain(std::iter::once(br#""}}"#.to_vec()))
                        .map(Ok::<_, Infallible>);
                    (
                        [(header::CONTENT_TYPE, "application/json")],
                        Body::from_stream(futures::stream::iter(chunks)),
                    )
                        .into_response()
                }
                Some("stale") => (
                    StatusCode::BAD_REQUEST,
                    [(header::CONTENT_TYPE, "application/json")],
                    STALE_BODY,
                )
                    .into_response(),
                _ => (
                    [(header::CONTENT_TYPE, "application/json")],
                    json!({"jsonrpc":"2.0","id":id,"result":{}}).to_string(),
                )
                    .into_response(),
            }
        }
        _ => StatusCode::METHOD_NOT_ALLOWED.into_response(),
    }
}

struct TinyServer {
    url: String,
    seen: mpsc::UnboundedReceiver<Seen>,
}

impl TinyServer {
    async fn start(standalone_stream: bool) -> Self {
        let (tx, seen) = mpsc::unbounded_channel();
        let state = Arc::new(Tiny {
            seen: tx,
            standalone_stream,
        });
        let router = axum::Router::new()
            .route("/mcp", axum::routing::any(tiny))
            .with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let addr = listener.local_addr().expect("local address");
        tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        Self {
            url: format!("http://{addr}/mcp"),
            seen,
        }
    }

    async fn next(&mut self) -> Seen {
        within("a request at the tiny server", self.seen.recv())
            .await
            .expect("the tiny server runs")
    }

    /// The next request of `method`, skipping others.
    async fn next_of(&mut self, method: Method) -> Seen {
        loop {
            let seen = self.next().await;
            if seen.method == method {
                return seen;
            }
        }
    }
}

#[tokio::test]
async fn headers_session_and_protocol_version_are_sent_as_they_become_known() {
    let mut server = TinyServer::start(false).await;
    let mut peer = Peer::new(
        &server.url,
        &[("Authorization", "Bearer t0k"), ("X-Custom", "yes")],
    );

    peer.send(&initialize(1), Some(1))
        .await
        .expect("initialize POST");
    match peer.next().await {
        Incoming::Message { text, related } => {
            assert_eq!(text, TINY_INIT, "the body is handed over byte for byte");
            assert_eq!(related, Some(1));
        }
        other => panic!("unexpected {other:?}"),
    }
    let post = server.next().await;
    assert_eq!(post.method, Method::POST);
    assert_eq!(post.body, initialize(1), "the text is POSTed as given");
    assert_eq!(post.header("authorization"), Some("Bearer t0k"));
    assert_eq!(post.header("x-custom"), Some("yes"));
    assert_eq!(post.header("content-type"), Some("application/json"));
    let accept = post.header("accept").unwrap_or_default();
    assert!(
        accept.contains("application/json") && accept.contains("text/event-stream"),
        "{accept}"
    );
    assert_eq!(post.header("mcp-session-id"), None);
    assert_eq!(post.header("mcp-protocol-version"), None);

    peer.send(INITIALIZED, None)
        .await
        .expect("a 202 is accepted");
    let post = server.next().await;
    assert_eq!(post.header("mcp-session-id"), Some(TINY_SESSION));
    assert_eq!(
        post.header("mcp-protocol-version"),
        None,
        "no version before initialized()"
    );

    peer.wire.initialized("2025-06-18");
    let get = server.next_of(Method::GET).await;
    assert_eq!(get.header("accept"), Some("text/event-stream"));
    assert_eq!(get.header("mcp-session-id"), Some(TINY_SESSION));
    assert_eq!(get.header("mcp-protocol-version"), Some("2025-06-18"));
    assert_eq!(get.header("authorization"), Some("Bearer t0k"));
    assert_eq!(get.header("last-event-id"), None);

    // The 405 of the GET changes nothing for requests.
    peer.send(&request(2, "tools/list", json!({})), Some(2))
        .await
        .expect("tools/list POST");
    let (before, _) = peer.until_answer(2).await;
    assert!(before.is_empty(), "{before:?}");
    let post = server.next_of(Method::POST).await;
    assert_eq!(post.header("mcp-protocol-version"), Some("2025-06-18"));
    assert_eq!(post.header("mcp-session-id"), Some(TINY_SESSION));
    peer.wire.close();
}

#[tokio::test]
async fn a_stream_cut_before_its_answer_is_resumed_with_last_event_id() {
    let mut server = TinyServer::start(false).await;
    let mut peer = Peer::new(&server.url, &[]);
    peer.handshake().await;

    peer.send(&request(7, "cut", json!({})), Some(7))
        .await
        .expect("the POST went out");
    let (before, answer) = peer.until_answer(7).await;
    assert_eq!(answer["result"]["resumed"], true, "{answer}");
    assert_eq!(
        before.len(),
        1,
        "the priming event is not a message: {before:?}"
    );
    assert_eq!(before[0].0["method"], "notifications/progress");
    assert_eq!(before[0].1, Some(7));

    // The standalone GET (405) first, then the resumption.
    loop {
        let get = server.next_of(Method::GET).await;
        if let Some(last) = get.header("last-event-id") {
            assert_eq!(last, "e2", "resumed after the last event seen");
            assert_eq!(get.header("mcp-session-id"), Some(TINY_SESSION));
            assert_eq!(get.header("accept"), Some("text/event-stream"));
            break;
        }
    }
    peer.wire.close();
}

#[tokio::test]
async fn a_stream_without_event_ids_that_ends_before_its_answer_is_lost() {
    let server = TinyServer::start(false).await;
    let mut peer = Peer::new(&server.url, &[]);
    peer.handshake().await;

    peer.send(&request(8, "cut_without_ids", json!({})), Some(8))
        .await
        .expect("the POST went out");
    match peer.next().await {
        Incoming::Message { text, related } => {
            assert!(text.contains("notifications/message"), "{text}");
            assert_eq!(related, Some(8));
        }
        other => panic!("unexpected {other:?}"),
    }
    match peer.next().await {
        Incoming::Lost { id, failure } => {
            assert_eq!(id, 8);
            assert_eq!(failure, Failure::ConnectionLostAfterSend);
        }
        other => panic!("unexpected {other:?}"),
    }
    peer.wire.close();
}

#[tokio::test]
async fn the_standalone_stream_is_reopened_after_its_last_event() {
    let mut server = TinyServer::start(true).await;
    let mut peer = Peer::new(&server.url, &[]);
    peer.handshake().await;

    match peer.next().await {
        Incoming::Message { text, related } => {
            assert!(text.contains("notifications/tools/list_changed"), "{text}");
            assert_eq!(related, None, "standalone messages belong to no request");
        }
        other => panic!("unexpected {other:?}"),
    }
    let first = server.next_of(Method::GET).await;
    assert_eq!(first.header("last-event-id"), None);
    let second = server.next_of(Method::GET).await;
    assert_eq!(second.header("last-event-id"), Some("g1"));
    peer.wire.close();
}

#[tokio::test]
async fn close_deletes_the_session_and_later_sends_fail_before_sending() {
    let mut server = TinyServer::start(false).await;
    let mut peer = Peer::new(&server.url, &[("Authorization", "Bearer t0k")]);
    peer.handshake().await;

    peer.wire.close();
    let delete = server.next_of(Method::DELETE).await;
    let sessions: Vec<_> = delete.headers.get_all("mcp-session-id").iter().collect();
    assert_eq!(sessions, [TINY_SESSION], "one session id");
    assert_eq!(delete.header("authorization"), Some("Bearer t0k"));
    assert_eq!(delete.header("mcp-protocol-version"), Some("2025-06-18"));

    assert_eq!(
        peer.send(&request(2, "tools/list", json!({})), Some(2))
            .await,
        Err(Failure::TransportClosedBeforeSend)
    );
    assert!(
        within("the incoming channel to end", peer.rx.recv())
            .await
            .is_none(),
        "after close no message can come"
    );
}

#[tokio::test]
async fn an_oversized_json_body_is_refused() {
    let server = TinyServer::start(false).await;
    let mut peer = Peer::new(&server.url, &[]);
    peer.handshake().await;

    match peer.send(&request(9, "big", json!({})), Some(9)).await {
        Err(Failure::TransportError {
            message,
            connection_closed: false,
        }) => assert!(message.contains("16 MiB"), "{message}"),
        other => panic!("expected a bounded-body error, got {other:?}"),
    }
    assert!(
        peer.rx.try_recv().is_err(),
        "nothing of the body was delivered"
    );
    peer.wire.close();
}

#[tokio::test]
async fn a_stale_session_400_keeps_its_json_rpc_body() {
    let server = TinyServer::start(false).await;
    let mut peer = Peer::new(&server.url, &[]);
    peer.handshake().await;

    assert_eq!(
        peer.send(&request(4, "stale", json!({})), Some(4)).await,
        Err(Failure::HttpStatus {
            status: 400,
            body: STALE_BODY.to_string(),
            with_session: true,
        })
    );
    peer.wire.close();
}
