//! The 2024-11-05 HTTP+SSE wire against a scripted axum server on loopback: what goes out on the
//! GET and the POSTs, how each failure is classified (SPEC §5: not delivered, outcome unknown, a
//! stale session), and the bad input of a stream (garbage, no endpoint, an endpoint on another
//! origin), each a clear error before anything is POSTed.
//!
//! Every wait is bounded; the one timing case runs on tokio's paused clock.

mod real;

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use mcp_supervisor::core::classify::{Failure, Verdict, classify};
use mcp_supervisor::upstream::sse_wire::{ENDPOINT_LIMIT, SseWire};
use mcp_supervisor::upstream::wire::{Incoming, Wire};
use mcp_supervisor::{Hub, ServerState};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

/// The bound on every single wait of these tests.
const LIMIT: Duration = Duration::from_secs(15);

async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    match tokio::time::timeout(LIMIT, future).await {
        Ok(value) => value,
        Err(_) => panic!("{what}: nothing within {LIMIT:?}"),
    }
}

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2024-11-05","capabilities":{},"clientInfo":{"name":"sse-wire-test","version":"0"}}}"#;
/// An answer in an order and spacing a re-serialization would not keep.
const INIT_ANSWER: &str = r#"{"result":{"protocolVersion":"2024-11-05", "capabilities":{},"serverInfo":{"name":"fake","version":"1"}},"jsonrpc":"2.0","id":1}"#;

// === the scripted server ===

/// What the GET stream sends first.
#[derive(Clone)]
enum Opening {
    /// An `endpoint` event with this data (`{n}` replaced by the stream's number, from 1).
    Endpoint(String),
    /// These bytes as they are.
    Raw(&'static [u8]),
    /// A 200 that is not an event stream.
    Json,
}

/// How a POST is answered.
#[derive(Clone, Copy, Debug)]
enum Post {
    /// 202; a request gets `INIT_ANSWER`-style answer on the stream (its id in place).
    Answer,
    /// 202 and nothing on the stream.
    Silent,
    Status(u16),
    /// The request is read, then the connection is dropped without an answer.
    Drop,
}

/// One request as the server saw it.
#[derive(Debug)]
struct Seen {
    method: &'static str,
    query: Option<String>,
    headers: HeaderMap,
    body: String,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

struct Fake {
    opening: Opening,
    post: Mutex<Post>,
    seen: mpsc::UnboundedSender<Seen>,
    /// The open streams: dropping a sender ends its stream.
    streams: Mutex<Vec<mpsc::UnboundedSender<Bytes>>>,
    /// How many streams were opened.
    opened: std::sync::atomic::AtomicUsize,
}

impl Fake {
    fn push(&self, bytes: String) {
        for stream in self.streams.lock().expect("streams lock").iter() {
            let _ = stream.send(Bytes::from(bytes.clone()));
        }
    }
}

async fn get_sse(
    State(fake): State<Arc<Fake>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let _ = fake.seen.send(Seen {
        method: "GET",
        query,
        headers,
        body: String::new(),
    });
    let first = match &fake.opening {
        Opening::Endpoint(data) => {
            let n = fake
                .opened
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
                + 1;
            let data = data.replace("{n}", &n.to_string());
            Bytes::from(format!("event: endpoint\ndata: {data}\n\n"))
        }
        Opening::Raw(bytes) => Bytes::from_static(bytes),
        Opening::Json => {
            return ([(header::CONTENT_TYPE, "application/json")], "{}").into_response();
        }
    };
    let (tx, rx) = mpsc::unbounded_channel::<Bytes>();
    let _ = tx.send(first);
    fake.streams.lock().expect("streams lock").push(tx);
    let body = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|bytes| (Ok::<_, std::convert::Infallible>(bytes), rx))
    });
    (
        [(header::CONTENT_TYPE, "text/event-stream")],
        Body::from_stream(body),
    )
        .into_response()
}

async fn post_message(
    State(fake): State<Arc<Fake>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: String,
) -> Response {
    let message: Value = serde_json::from_str(&body).unwrap_or_default();
    let _ = fake.seen.send(Seen {
        method: "POST",
        query,
        headers,
        body,
    });
    let post = *fake.post.lock().expect("post lock");
    match post {
        Post::Answer => {
            if !message["id"].is_null() {
                let answer =
                    INIT_ANSWER.replace(r#""id":1"#, &format!(r#""id":{}"#, message["id"]));
                fake.push(format!("event: message\ndata: {answer}\n\n"));
            }
            (StatusCode::ACCEPTED, "Accepted").into_response()
        }
        Post::Silent => (StatusCode::ACCEPTED, "Accepted").into_response(),
        Post::Status(code) => (
            StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            "Could not find session",
        )
            .into_response(),
        // Unwinding the connection's task drops the connection; `resume_unwind` skips the
        // panic hook, so nothing is printed.
        Post::Drop => std::panic::resume_unwind(Box::new("drop the connection")),
    }
}

struct Server {
    fake: Arc<Fake>,
    seen: mpsc::UnboundedReceiver<Seen>,
    base: String,
    /// Stops accepting connections (the open ones stay).
    stop_listening: Option<oneshot::Sender<()>>,
}

impl Server {
    async fn start(opening: Opening, post: Post) -> Self {
        let (tx, seen) = mpsc::unbounded_channel();
        let fake = Arc::new(Fake {
            opening,
            post: Mutex::new(post),
            seen: tx,
            streams: Mutex::new(Vec::new()),
            opened: std::sync::atomic::AtomicUsize::new(0),
        });
        let router = axum::Router::new()
            .route("/sse", axum::routing::get(get_sse))
            .route("/messages/", axum::routing::post(post_message))
            .with_state(fake.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let addr = listener.local_addr().expect("local address");
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        // After the stop, the listener is closed but open connections (the streams) are kept.
        tokio::spawn(async move {
            let _ = axum::serve(listener, router)
                .with_graceful_shutdown(async move {
                    let _ = stop_rx.await;
                })
                .await;
        });
        Self {
            fake,
            seen,
            base: format!("http://{addr}"),
            stop_listening: Some(stop_tx),
        }
    }

    fn stream_url(&self) -> String {
        format!("{}/sse", self.base)
    }

    async fn next(&mut self) -> Seen {
        within("a request at the fake server", self.seen.recv())
            .await
            .expect("the fake server runs")
    }

    fn set_post(&self, post: Post) {
        *self.fake.post.lock().expect("post lock") = post;
    }

    /// End every open event stream.
    fn end_streams(&self) {
        self.fake.streams.lock().expect("streams lock").clear();
    }

    fn stop_listening(&mut self) {
        if let Some(stop) = self.stop_listening.take() {
            let _ = stop.send(());
        }
    }
}

// === the peer side ===

struct Peer {
    wire: SseWire,
    rx: mcp_supervisor::upstream::wire::IncomingRx,
}

impl Peer {
    fn new(url: &str, headers: &[(&str, &str)]) -> Self {
        let headers: Vec<(String, String)> = headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let (tx, rx) = mcp_supervisor::upstream::wire::incoming();
        let wire = SseWire::new(url, &headers, tx).expect("a valid wire");
        Self { wire, rx }
    }

    async fn send(&self, text: &str, request: Option<u64>) -> Result<(), Failure> {
        within("send", self.wire.send(text.to_string(), request)).await
    }

    /// The next message the wire hands over, as text.
    async fn next_text(&mut self) -> String {
        match within("an incoming message", self.rx.recv()).await {
            Some(Incoming::Message { text, related }) => {
                assert_eq!(related, None, "SSE says nothing of a message's request");
                text
            }
            other => panic!("expected a message, got {other:?}"),
        }
    }

    async fn handshake(&mut self) {
        self.send(INITIALIZE, Some(1))
            .await
            .expect("initialize is accepted");
        assert_eq!(self.next_text().await, INIT_ANSWER);
    }

    /// The failure every send gets when the stream named no usable endpoint.
    async fn refused(&self) -> String {
        match self.send(INITIALIZE, Some(1)).await {
            Err(Failure::TransportError {
                message,
                connection_closed: false,
            }) => message,
            other => panic!("expected the stream's error, got {other:?}"),
        }
    }
}

/// A server that names `/messages/?session_id=a` and answers, and a peer past its handshake.
async fn connected(headers: &[(&str, &str)]) -> (Server, Peer) {
    let server = Server::start(
        Opening::Endpoint("/messages/?session_id=a".into()),
        Post::Answer,
    )
    .await;
    let mut peer = Peer::new(&server.stream_url(), headers);
    peer.handshake().await;
    (server, peer)
}

fn tool_call(id: u64, name: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{name}"}}}}"#)
}

// === the tests ===

#[tokio::test]
async fn the_stream_names_the_endpoint_and_answers_come_on_it_byte_for_byte() {
    let (mut server, mut peer) = connected(&[("Authorization", "Bearer t0k")]).await;

    let get = server.next().await;
    assert_eq!(get.method, "GET");
    assert_eq!(get.header("accept"), Some("text/event-stream"));
    assert_eq!(get.header("authorization"), Some("Bearer t0k"));
    let post = server.next().await;
    assert_eq!(post.method, "POST");
    assert_eq!(
        post.query.as_deref(),
        Some("session_id=a"),
        "POSTed to the endpoint the stream named"
    );
    assert_eq!(post.body, INITIALIZE, "the text is POSTed as given");
    assert_eq!(post.header("content-type"), Some("application/json"));
    assert_eq!(post.header("authorization"), Some("Bearer t0k"));

    // A server notification on the stream, as it came.
    let note = r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}"#;
    server.fake.push(format!("data: {note}\n\n"));
    assert_eq!(peer.next_text().await, note);
    peer.wire.close();
    within("the stream task ends on close", peer.wire.ended()).await;
}

#[tokio::test]
async fn a_post_answered_404_or_410_is_a_stale_session_and_other_statuses_are_kept() {
    let (mut server, peer) = connected(&[]).await;
    for (status, expected) in [
        (404, Failure::SessionExpired),
        (410, Failure::SessionExpired),
        (
            500,
            Failure::HttpStatus {
                status: 500,
                body: "Could not find session".into(),
                with_session: true,
            },
        ),
    ] {
        server.set_post(Post::Status(status));
        let failure = peer
            .send(r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#, Some(2))
            .await
            .err();
        assert_eq!(failure.as_ref(), Some(&expected), "HTTP {status}");
    }
    assert_eq!(classify(&Failure::SessionExpired), Verdict::NotDelivered);
    let _ = server.next().await;
    peer.wire.close();
}

#[tokio::test]
async fn a_post_that_cannot_connect_was_not_delivered() {
    let mut server = Server::start(
        Opening::Endpoint("/messages/?session_id=a".into()),
        Post::Answer,
    )
    .await;
    let peer = Peer::new(&server.stream_url(), &[]);
    let _ = server.next().await; // the GET: the stream is open
    server.stop_listening();
    // The first POST needs a new connection, and nothing accepts one any more.
    let mut failure = None;
    for _ in 0..50 {
        match peer.send(INITIALIZE, Some(1)).await {
            Err(f @ Failure::ConnectRefused) => {
                failure = Some(f);
                break;
            }
            // The listener's last accept may still be racing the stop.
            other => {
                assert!(
                    matches!(other, Ok(())),
                    "a POST either went out or could not connect: {other:?}"
                );
                tokio::task::yield_now().await;
            }
        }
    }
    let failure = failure.expect("a POST to a closed port is refused");
    assert_eq!(classify(&failure), Verdict::NotDelivered);
    peer.wire.close();
}

#[tokio::test]
async fn a_post_whose_connection_drops_unanswered_has_an_unknown_outcome() {
    let (mut server, peer) = connected(&[]).await;
    server.set_post(Post::Drop);
    let failure = peer
        .send(&tool_call(2, "append"), Some(2))
        .await
        .expect_err("no answer to the POST");
    assert!(
        matches!(
            failure,
            Failure::TransportError {
                connection_closed: true,
                ..
            }
        ),
        "{failure:?}"
    );
    assert_eq!(classify(&failure), Verdict::OutcomeUnknown);
    let _ = server.next().await;
    peer.wire.close();
}

#[tokio::test]
async fn the_stream_ending_ends_the_generation_with_a_call_in_flight() {
    let (mut server, mut peer) = connected(&[]).await;
    server.set_post(Post::Silent);
    peer.send(&tool_call(2, "slow"), Some(2))
        .await
        .expect("accepted; the answer would come on the stream");
    server.end_streams();
    // The peer sees the end of its messages (its waiters then fail as lost after send), and the
    // link's closed signal fires.
    assert!(
        within("the incoming channel closes", peer.rx.recv())
            .await
            .is_none(),
        "no message after the stream ended"
    );
    within("the wire reports its end", peer.wire.ended()).await;
    assert_eq!(
        peer.send(INITIALIZE, Some(3)).await,
        Err(Failure::TransportClosedBeforeSend),
        "a send after the end never goes out"
    );
    let _ = server.next().await;
}

#[tokio::test]
async fn an_endpoint_on_another_origin_is_refused_and_nothing_is_posted() {
    let mut server = Server::start(
        Opening::Endpoint("http://127.0.0.2:9/messages/?session_id=a".into()),
        Post::Answer,
    )
    .await;
    let peer = Peer::new(&server.stream_url(), &[]);
    let error = peer.refused().await;
    assert!(
        error.contains("another origin (http://127.0.0.2:9)"),
        "{error}"
    );
    let get = server.next().await;
    assert_eq!(get.method, "GET");
    peer.wire.close();
    within("the stream task ends on close", peer.wire.ended()).await;
    assert!(
        server.seen.try_recv().is_err(),
        "nothing was POSTed anywhere"
    );
}

#[tokio::test]
async fn a_stream_of_garbage_or_a_message_before_the_endpoint_is_an_error_that_says_so() {
    for (garbage, expected) in [
        (
            &b"data: hello\n\n"[..],
            "sent a message before its `endpoint` event",
        ),
        (
            &b"\xff\xfe\xfd\n\n"[..],
            "not valid before its `endpoint` event",
        ),
        (
            &b"event: endpoint\ndata:\n\n"[..],
            "`endpoint` event is empty",
        ),
    ] {
        let server = Server::start(Opening::Raw(garbage), Post::Answer).await;
        let peer = Peer::new(&server.stream_url(), &[]);
        let error = peer.refused().await;
        assert!(error.contains(expected), "{garbage:?}: {error}");
        peer.wire.close();
    }
}

#[tokio::test]
async fn a_url_that_is_not_an_event_stream_is_an_error_that_says_so() {
    let server = Server::start(Opening::Json, Post::Answer).await;
    let peer = Peer::new(&server.stream_url(), &[]);
    let error = peer.refused().await;
    assert!(
        error.contains("content type `application/json`, not text/event-stream"),
        "{error}"
    );
    let missing = Peer::new(&format!("{}/nope", server.base), &[]);
    let error = missing.refused().await;
    assert!(
        error.contains("404") && error.contains("SSE URL"),
        "{error}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_stream_that_never_names_its_endpoint_fails_after_the_bound() {
    // Open, an event of another type, then silence.
    let server = Server::start(
        Opening::Raw(b": keep-alive\nevent: ping\ndata: 1\n\n"),
        Post::Answer,
    )
    .await;
    let peer = Peer::new(&server.stream_url(), &[]);
    let start = tokio::time::Instant::now();
    let error = match peer.wire.send(INITIALIZE.to_string(), Some(1)).await {
        Err(Failure::TransportError { message, .. }) => message,
        other => panic!("expected the stream's error, got {other:?}"),
    };
    let waited = start.elapsed();
    assert!(error.contains("no `endpoint` event within 10 s"), "{error}");
    assert!(
        waited >= ENDPOINT_LIMIT && waited < ENDPOINT_LIMIT + Duration::from_secs(1),
        "failed at the bound, not before or long after: {waited:?}"
    );
    peer.wire.close();
}

// === behind a hub: what the supervisor makes of it ===

fn hub_on(url: &str) -> Hub {
    Hub::start(real::config(serde_json::json!({
        "legacy": {
            "type": "sse",
            "url": url,
            "reconnect": { "initialDelayMs": 10, "maxDelayMs": 20, "maxAttempts": 2, "jitter": 0 },
            "health": { "intervalMs": 0 }
        }
    })))
}

#[tokio::test]
async fn a_lost_stream_is_replaced_by_a_new_stream_a_new_endpoint_and_the_same_handshake() {
    let mut server = Server::start(
        Opening::Endpoint("/messages/?session_id={n}".into()),
        Post::Answer,
    )
    .await;
    let hub = hub_on(&server.stream_url());
    let first = real::wait_ready(&hub, "legacy", 0).await;
    server.end_streams();
    let second = real::wait_ready(&hub, "legacy", first.generation).await;
    assert_eq!(second.generation, first.generation + 1, "{second:?}");
    assert_eq!(second.restarts, 1, "{second:?}");
    let mut seen = Vec::new();
    while let Ok(request) = server.seen.try_recv() {
        let method: Value = serde_json::from_str(&request.body).unwrap_or_default();
        seen.push(format!(
            "{} {} {}",
            request.method,
            request.query.unwrap_or_default(),
            method["method"].as_str().unwrap_or_default()
        ));
    }
    let initializes: Vec<&String> = seen.iter().filter(|s| s.ends_with(" initialize")).collect();
    assert_eq!(
        initializes,
        [
            "POST session_id=1 initialize",
            "POST session_id=2 initialize"
        ],
        "each stream's handshake goes to its own endpoint: {seen:?}"
    );
    assert_eq!(
        seen.iter().filter(|s| s.starts_with("GET")).count(),
        2,
        "{seen:?}"
    );
    within("the hub stops", hub.stop()).await;
}

#[tokio::test]
async fn bad_streams_are_failed_attempts_whose_error_says_what_was_wrong() {
    for (opening, expected) in [
        (
            Opening::Endpoint("http://127.0.0.2:9/messages/".into()),
            "another origin (http://127.0.0.2:9)",
        ),
        (
            Opening::Raw(b"data: garbage\n\n"),
            "sent a message before its `endpoint` event",
        ),
    ] {
        let server = Server::start(opening, Post::Answer).await;
        let hub = hub_on(&server.stream_url());
        let gave_up =
            real::wait_for(&hub, "legacy", LIMIT, |s| s.state() == ServerState::GaveUp).await;
        let error = gave_up.last_error.clone().unwrap_or_default();
        assert!(error.contains(expected), "{error}");
        assert!(error.starts_with("initialize failed: "), "{error}");
        assert_eq!(gave_up.attempt, 2, "every attempt failed: {gave_up:?}");
        within("the hub stops", hub.stop()).await;
    }
}
