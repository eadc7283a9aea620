//! The HTTP+SSE wire of one generation (MCP protocol 2024-11-05): a GET opens the event stream,
//! whose `endpoint` event names where messages are POSTed; every message of the server comes on
//! that one stream and is handed to the peer as it came, as [`Incoming`] text.
//!
//! It owns the HTTP client, the event stream (read by one task, stopped by [`Wire::close`]) and
//! the endpoint of its generation. The stream ending after its endpoint is the generation lost:
//! the task drops its sender (the peer sees no more messages) and [`SseWire::ended`] resolves. It
//! never follows an endpoint to another origin, never reopens the stream (a new stream is a new
//! generation), never resends a POST, and never classifies a failure from error text.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::StreamExt;
use mcp_supervisor_core::classify::Failure;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderValue};
use reqwest::{Response, StatusCode, Url};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::http_common::{
    configured_headers, describe, describe_sse, error_body, http_client, http_url, media_type,
    send_failure, sse_events,
};
use super::wire::{Incoming, IncomingTx, Wire};
use crate::link::BoxFuture;

/// How long the server may take to answer the GET with its headers and then send `endpoint`.
pub const ENDPOINT_LIMIT: Duration = Duration::from_secs(10);

const JSON: &str = "application/json";
const EVENT_STREAM: &str = "text/event-stream";

/// Headers the wire sets itself; configuring them is an error.
const RESERVED: [&str; 3] = ["accept", "content-type", "content-length"];

// === impl SseWire ===

/// One generation's HTTP+SSE transport.
pub struct SseWire {
    inner: Arc<Inner>,
    /// Closed (its sender dropped) once the stream task has finished.
    ended: watch::Receiver<()>,
}

struct Inner {
    /// The event stream's URL, as configured.
    url: Url,
    client: reqwest::Client,
    /// The configured extra headers, sent on the GET and on every POST.
    headers: HeaderMap,
    endpoint: watch::Receiver<Endpoint>,
    /// Stops the stream task and any send in flight; cancelled when the stream ends.
    ct: CancellationToken,
}

/// Where messages go, once the stream said.
#[derive(Clone, Debug, PartialEq)]
enum Endpoint {
    Waiting,
    Known(Url),
    /// The stream failed before naming one: why, for every send.
    Failed(NoEndpoint),
}

/// Why the event stream named no endpoint: every send of the generation fails with it (and so
/// its connection attempt). Each says what was asked and what to check.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
enum NoEndpoint {
    /// The GET got no response.
    #[error("the GET of the event stream failed: {0}")]
    Get(String),
    /// The GET was refused.
    #[error("the GET of the event stream answered {}{}", .0, status_hint(*.0))]
    Status(StatusCode),
    /// The GET answered something other than an event stream.
    #[error(
        "the GET of the event stream answered {status} with content type {}, not \
         text/event-stream: this URL is not an SSE server's stream",
        content_type.as_ref().map_or_else(|| "none".to_string(), |t| format!("`{t}`"))
    )]
    NotEventStream {
        status: StatusCode,
        content_type: Option<String>,
    },
    /// The GET's headers did not come in time.
    #[error("the GET of the event stream got no answer within {} s", .0.as_secs())]
    NoAnswer(Duration),
    /// The stream is open but named no endpoint in time.
    #[error(
        "the event stream sent no `endpoint` event within {} s: is this a 2024-11-05 SSE \
         server's stream URL?",
        .0.as_secs()
    )]
    NotNamed(Duration),
    /// The stream ended first.
    #[error("the event stream ended before its `endpoint` event")]
    EndedFirst,
    /// The stream broke first.
    #[error("the event stream is not valid before its `endpoint` event: {0}")]
    InvalidFirst(String),
    /// A message came first.
    #[error(
        "the event stream sent a message before its `endpoint` event (a 2024-11-05 SSE server \
         names its endpoint first)"
    )]
    MessageFirst,
    /// The `endpoint` event is not one to use.
    #[error(transparent)]
    Endpoint(#[from] EndpointError),
}

/// What to check when the GET of the stream is refused with `status`.
fn status_hint(status: StatusCode) -> &'static str {
    match status {
        StatusCode::NOT_FOUND | StatusCode::METHOD_NOT_ALLOWED => {
            ": is this the server's SSE URL (often ending in /sse)? A streamable-HTTP server wants \
             \"type\": \"http\""
        }
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
            ": check the configured headers (e.g. Authorization)"
        }
        _ => "",
    }
}

/// Why an `endpoint` event is not used ([`resolve_endpoint`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EndpointError {
    /// It names nothing.
    #[error("the `endpoint` event is empty: it must name where to POST messages")]
    Empty,
    /// It is neither a URL nor a path.
    #[error("the `endpoint` event does not name a URL or a path ({0})")]
    NotUrl(url::ParseError),
    /// It names another origin than the stream's.
    #[error(
        "the `endpoint` event names another origin ({theirs}) than the event stream's ({ours}): \
         refused, messages only go to the server the stream came from"
    )]
    OtherOrigin {
        /// The origin it names.
        theirs: String,
        /// The stream's origin.
        ours: String,
    },
}

impl SseWire {
    /// A wire to the SSE server whose event stream is at `url` (http or https): the GET starts at
    /// once, on the current runtime. `headers`: extra headers from config (e.g.
    /// `Authorization`), each checked here; an invalid or reserved one is an error naming it.
    /// `incoming` gets every message the server sends.
    pub fn new(
        url: &str,
        headers: &[(String, String)],
        incoming: IncomingTx,
    ) -> Result<Self, crate::error::OpenError> {
        let url = http_url(url)?;
        let headers = configured_headers(headers, &RESERVED)?;
        let client = http_client()?;
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| crate::error::OpenError::NoRuntime("SSE"))?;
        let (endpoint_tx, endpoint) = watch::channel(Endpoint::Waiting);
        let (ended_tx, ended) = watch::channel(());
        let inner = Arc::new(Inner {
            url,
            client,
            headers,
            endpoint,
            ct: CancellationToken::new(),
        });
        runtime.spawn(inner.clone().run(incoming, endpoint_tx, ended_tx));
        Ok(Self { inner, ended })
    }

    /// Resolves once the event stream is over: it ended or broke after its endpoint (the
    /// generation is lost), or the wire was closed.
    pub fn ended(&self) -> BoxFuture<'static, ()> {
        let mut ended = self.ended.clone();
        Box::pin(async move {
            // Only the task's end (its sender dropped) wakes this.
            while ended.changed().await.is_ok() {}
        })
    }
}

impl Wire for SseWire {
    fn send(&self, text: String, request: Option<u64>) -> BoxFuture<'_, Result<(), Failure>> {
        Box::pin(async move {
            let inner = &self.inner;
            if inner.ct.is_cancelled() {
                return Err(Failure::TransportClosedBeforeSend);
            }
            let endpoint = tokio::select! {
                biased;
                () = inner.ct.cancelled() => return Err(Failure::TransportClosedBeforeSend),
                endpoint = inner.endpoint() => endpoint?,
            };
            tokio::select! {
                biased;
                () = inner.ct.cancelled() => Err(Failure::TransportError {
                    message: "the SSE transport was closed while the POST was in flight".into(),
                    connection_closed: true,
                }),
                outcome = inner.post(endpoint, text, request) => outcome,
            }
        })
    }

    fn close(&self) {
        self.inner.ct.cancel();
    }
}

impl Drop for SseWire {
    fn drop(&mut self) {
        self.inner.ct.cancel();
    }
}

// === impl Inner ===

/// How the stream task ended.
enum StreamEnd {
    /// No endpoint came: why.
    NoEndpoint(NoEndpoint),
    /// The stream ended or broke after its endpoint: the generation is lost.
    Lost(String),
    /// The wire was closed, or the peer is gone.
    Stopped,
}

impl Inner {
    /// The endpoint, once the stream named it; or, when it never will, the failure every send
    /// gets (nothing went out, and the reason is the stream's).
    async fn endpoint(&self) -> Result<Url, Failure> {
        let mut endpoint = self.endpoint.clone();
        let known = endpoint
            .wait_for(|e| *e != Endpoint::Waiting)
            .await
            .map(|e| e.clone());
        match known {
            Ok(Endpoint::Known(url)) => Ok(url),
            Ok(Endpoint::Failed(why)) => Err(Failure::TransportError {
                message: why.to_string(),
                connection_closed: false,
            }),
            Ok(Endpoint::Waiting) | Err(_) => Err(Failure::TransportClosedBeforeSend),
        }
    }

    /// POST one message to the endpoint. A 2xx (202 Accepted) is all: the answer comes on the
    /// event stream. 404 or 410: the server no longer knows this stream's session.
    async fn post(&self, endpoint: Url, text: String, request: Option<u64>) -> Result<(), Failure> {
        let mut headers = self.headers.clone();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static(JSON));
        let response = self
            .client
            .post(endpoint)
            .headers(headers)
            .body(text)
            .send()
            .await
            .map_err(|e| send_failure(&e))?;
        let status = response.status();
        if status.is_success() {
            return Ok(());
        }
        tracing::debug!(%status, ?request, "POST to the SSE endpoint refused");
        if matches!(status, StatusCode::NOT_FOUND | StatusCode::GONE) {
            return Err(Failure::SessionExpired);
        }
        // The endpoint's URL names the stream's session: every POST carries it.
        Err(Failure::HttpStatus {
            status: status.as_u16(),
            body: error_body(response).await,
            with_session: true,
        })
    }

    /// The stream task: open the stream, wait for its endpoint, then hand every message on until
    /// it ends. A stream that never named an endpoint leaves its reason with every send until the
    /// wire is closed (the failed attempt closes it); one that ends after its endpoint ends the
    /// generation. `ended` is dropped last.
    async fn run(
        self: Arc<Self>,
        tx: IncomingTx,
        endpoint: watch::Sender<Endpoint>,
        ended: watch::Sender<()>,
    ) {
        let end = tokio::select! {
            biased;
            () = self.ct.cancelled() => StreamEnd::Stopped,
            end = self.stream(&tx, &endpoint) => end,
        };
        match end {
            StreamEnd::NoEndpoint(why) => {
                tracing::debug!(%why, "the SSE stream named no endpoint");
                endpoint.send_replace(Endpoint::Failed(why));
                self.ct.cancelled().await;
            }
            StreamEnd::Lost(why) => {
                tracing::debug!(%why, "the SSE stream ended: the generation is lost");
                self.ct.cancel();
            }
            StreamEnd::Stopped => {}
        }
        drop(tx);
        drop(ended);
    }

    async fn stream(&self, tx: &IncomingTx, endpoint: &watch::Sender<Endpoint>) -> StreamEnd {
        let deadline = tokio::time::Instant::now() + ENDPOINT_LIMIT;
        let response = match tokio::time::timeout_at(deadline, self.open()).await {
            Ok(Ok(response)) => response,
            Ok(Err(why)) => return StreamEnd::NoEndpoint(why),
            Err(_) => return StreamEnd::NoEndpoint(NoEndpoint::NoAnswer(ENDPOINT_LIMIT)),
        };
        let pending = Arc::new(AtomicUsize::new(0));
        let mut events = Box::pin(sse_events(response, pending.clone()));
        // Until the endpoint: bounded, and only `endpoint` (or an event of another type, which
        // is ignored) may come.
        loop {
            let next = match tokio::time::timeout_at(deadline, events.next()).await {
                Ok(next) => next,
                Err(_) => return StreamEnd::NoEndpoint(NoEndpoint::NotNamed(ENDPOINT_LIMIT)),
            };
            let event = match next {
                None => return StreamEnd::NoEndpoint(NoEndpoint::EndedFirst),
                Some(Err(error)) => {
                    return StreamEnd::NoEndpoint(NoEndpoint::InvalidFirst(describe_sse(&error)));
                }
                Some(Ok(event)) => event,
            };
            pending.store(0, Ordering::Relaxed);
            match event.event.as_deref() {
                Some("endpoint") => {
                    match resolve_endpoint(&self.url, event.data.as_deref().unwrap_or_default()) {
                        Ok(url) => {
                            endpoint.send_replace(Endpoint::Known(url));
                            break;
                        }
                        Err(why) => return StreamEnd::NoEndpoint(why.into()),
                    }
                }
                None | Some("message") if event.data.as_deref().is_some_and(|d| !d.is_empty()) => {
                    return StreamEnd::NoEndpoint(NoEndpoint::MessageFirst);
                }
                other => tracing::debug!(event = ?other, "event before the endpoint ignored"),
            }
        }
        // The generation's messages, until the stream ends.
        loop {
            let event = match events.next().await {
                None => return StreamEnd::Lost("the event stream ended".into()),
                Some(Err(error)) => return StreamEnd::Lost(describe_sse(&error)),
                Some(Ok(event)) => event,
            };
            pending.store(0, Ordering::Relaxed);
            if !matches!(event.event.as_deref(), None | Some("message")) {
                tracing::debug!(event = ?event.event, "event of another type ignored");
                continue;
            }
            let Some(data) = event.data.filter(|d| !d.is_empty()) else {
                continue;
            };
            let message = Incoming::Message {
                text: data,
                related: None,
            };
            if tx.send(message).await.is_err() {
                return StreamEnd::Stopped;
            }
        }
    }

    /// GET the event stream: its response, or why it is not one.
    async fn open(&self) -> Result<Response, NoEndpoint> {
        let mut headers = self.headers.clone();
        headers.insert(ACCEPT, HeaderValue::from_static(EVENT_STREAM));
        let response = self
            .client
            .get(self.url.clone())
            .headers(headers)
            .send()
            .await
            .map_err(|e| NoEndpoint::Get(describe(&e)))?;
        let status = response.status();
        if !status.is_success() {
            return Err(NoEndpoint::Status(status));
        }
        match media_type(&response) {
            Some(kind) if kind == EVENT_STREAM => Ok(response),
            content_type => Err(NoEndpoint::NotEventStream {
                status,
                content_type,
            }),
        }
    }
}

// === helpers ===

/// The URL an `endpoint` event names, resolved against the stream's URL. An endpoint on another
/// origin (scheme, host, port) is refused: messages never go to a server other than the one
/// the stream came from.
pub fn resolve_endpoint(stream: &Url, data: &str) -> Result<Url, EndpointError> {
    let data = data.trim();
    if data.is_empty() {
        return Err(EndpointError::Empty);
    }
    let endpoint = stream.join(data).map_err(EndpointError::NotUrl)?;
    let (theirs, ours) = (endpoint.origin(), stream.origin());
    if theirs != ours {
        return Err(EndpointError::OtherOrigin {
            theirs: theirs.ascii_serialization(),
            ours: ours.ascii_serialization(),
        });
    }
    Ok(endpoint)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(text: &str) -> Url {
        Url::parse(text).expect("a valid test URL")
    }

    #[test]
    fn an_endpoint_path_resolves_against_the_stream_url() {
        let stream = url("http://127.0.0.1:8000/sse");
        let cases = [
            (
                "/messages/?session_id=abc",
                "http://127.0.0.1:8000/messages/?session_id=abc",
            ),
            ("messages?s=1", "http://127.0.0.1:8000/messages?s=1"),
            (" http://127.0.0.1:8000/m \n", "http://127.0.0.1:8000/m"),
            ("//127.0.0.1:8000/m", "http://127.0.0.1:8000/m"),
        ];
        for (data, expected) in cases {
            assert_eq!(
                resolve_endpoint(&stream, data).map(String::from),
                Ok(expected.to_string()),
                "{data:?}"
            );
        }
        let nested = url("https://h.example/base/sse?token=t");
        assert_eq!(
            resolve_endpoint(&nested, "messages/1").map(String::from),
            Ok("https://h.example/base/messages/1".to_string())
        );
    }

    #[test]
    fn an_endpoint_on_another_origin_is_refused_by_name() {
        let stream = url("http://127.0.0.1:8000/sse");
        for data in [
            "http://evil.example/messages",
            "//evil.example/messages",
            "https://127.0.0.1:8000/messages",
            "http://127.0.0.1:8001/messages",
            "http://localhost:8000/messages",
            "data:text/plain,hi",
        ] {
            let error = resolve_endpoint(&stream, data)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(
                error.contains("another origin") && error.contains("http://127.0.0.1:8000"),
                "{data:?}: {error}"
            );
        }
    }

    #[test]
    fn an_empty_or_unparsable_endpoint_is_an_error_that_says_so() {
        let stream = url("http://127.0.0.1:8000/sse");
        assert!(
            resolve_endpoint(&stream, "  ")
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
                .contains("is empty")
        );
        assert!(
            resolve_endpoint(&stream, "http://[::1")
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
                .contains("does not name a URL")
        );
    }

    #[tokio::test]
    async fn reserved_and_invalid_headers_and_urls_are_refused_by_name() {
        let (tx, _rx) = super::super::wire::incoming();
        let err = |url: &str, h: &[(&str, &str)]| {
            let h: Vec<(String, String)> = h
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            SseWire::new(url, &h, tx.clone())
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        let url = "http://127.0.0.1:1/sse";
        assert!(err(url, &[("Accept", "x")]).contains("Accept"));
        assert!(err(url, &[("bad name", "x")]).contains("bad name"));
        assert!(err(url, &[("X-Token", "a\nb")]).contains("X-Token"));
        assert!(err("ftp://h/sse", &[]).contains("not an http"));
        assert_eq!(err(url, &[("Authorization", "Bearer t")]), "");
    }
}
