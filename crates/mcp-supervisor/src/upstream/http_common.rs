//! What the two HTTP wires share ([`super::http_wire`], streamable HTTP, and [`super::sse_wire`],
//! the 2024-11-05 HTTP+SSE transport): the reading of event streams with a size bound, the
//! same-origin redirect policy, the configured headers, and what a failed send says.
//!
//! It owns no connection and no state. It never classifies a failure from error text: a send
//! failure is judged from reqwest's own error kinds only.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures::{Stream, StreamExt};
use mcp_supervisor_core::classify::Failure;
use reqwest::Response;
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use sse_stream::{Sse, SseStream};

use crate::error::OpenError;

/// The most bytes an event stream may send without completing an event.
pub(super) const MAX_SSE_EVENT: usize = 16 * 1024 * 1024;

/// How much of an error response's body is kept.
pub(super) const MAX_ERROR_BODY: usize = 4 * 1024;

/// How long the body of an error response may take.
pub(super) const ERROR_BODY_LIMIT: Duration = Duration::from_secs(2);

pub(super) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What a failed POST (no response) says, from reqwest's error kinds.
pub(super) fn send_failure(error: &reqwest::Error) -> Failure {
    if error.is_connect() {
        // No connection: nothing went out.
        Failure::ConnectRefused
    } else if error.is_builder() {
        Failure::TransportClosedBeforeSend
    } else {
        // Sent, or partly: the server may have it.
        Failure::TransportError {
            message: describe(error),
            connection_closed: true,
        }
    }
}

/// An error and its causes, for humans.
pub(super) fn describe(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

pub(super) fn describe_sse(error: &sse_stream::Error) -> String {
    match error {
        sse_stream::Error::Body(body) => match body.downcast_ref::<BodyError>() {
            Some(BodyError::TooLarge(limit)) => format!(
                "an event of the stream exceeded {} MiB",
                limit / (1024 * 1024)
            ),
            _ => format!("the event stream broke: {}", describe(body.as_ref())),
        },
        other => format!("the event stream is malformed: {other}"),
    }
}

/// The media type of a response (lower case, without parameters).
pub(super) fn media_type(response: &Response) -> Option<String> {
    let value = response.headers().get(CONTENT_TYPE)?.to_str().ok()?;
    let essence = value.split(';').next().unwrap_or_default().trim();
    Some(essence.to_ascii_lowercase())
}

/// The start of an error response's body, at most [`MAX_ERROR_BODY`] bytes, as text.
pub(super) async fn error_body(mut response: Response) -> String {
    let mut body = Vec::new();
    let read = async {
        while body.len() < MAX_ERROR_BODY {
            match response.chunk().await {
                Ok(Some(chunk)) => body.extend_from_slice(&chunk),
                _ => break,
            }
        }
    };
    let _ = tokio::time::timeout(ERROR_BODY_LIMIT, read).await;
    body.truncate(MAX_ERROR_BODY);
    String::from_utf8_lossy(&body).into_owned()
}

/// Why the bytes of an event stream stopped.
#[derive(Debug)]
pub(super) enum BodyError {
    /// More bytes than the limit without an event.
    TooLarge(usize),
    Network(reqwest::Error),
}

impl std::fmt::Display for BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BodyError::TooLarge(limit) => write!(f, "event larger than {limit} bytes"),
            BodyError::Network(error) => write!(f, "{error}"),
        }
    }
}

impl std::error::Error for BodyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BodyError::TooLarge(_) => None,
            BodyError::Network(error) => Some(error),
        }
    }
}

/// The events of a response body. `pending` counts the bytes read since the last event (the
/// reader resets it); past [`MAX_SSE_EVENT`] the stream fails.
pub(super) fn sse_events(
    response: Response,
    pending: Arc<AtomicUsize>,
) -> impl Stream<Item = Result<Sse, sse_stream::Error>> + Send {
    let bytes = response.bytes_stream().map(move |chunk| match chunk {
        Ok(chunk) => {
            let used = pending.fetch_add(chunk.len(), Ordering::Relaxed) + chunk.len();
            if used > MAX_SSE_EVENT {
                Err(BodyError::TooLarge(MAX_SSE_EVENT))
            } else {
                Ok(chunk)
            }
        }
        Err(error) => Err(BodyError::Network(error)),
    });
    SseStream::from_bytes_stream(bytes)
}

/// How long opening a TCP (and TLS) connection may take.
const CONNECT_LIMIT: Duration = Duration::from_secs(10);

/// `url` parsed, if it is an http:// or https:// URL; else an error naming it.
pub(super) fn http_url(url: &str) -> Result<reqwest::Url, OpenError> {
    let parsed = reqwest::Url::parse(url).map_err(|e| OpenError::InvalidUrl {
        url: url.to_string(),
        why: e.to_string(),
    })?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(OpenError::NotHttp {
            scheme: parsed.scheme().to_string(),
            url: parsed.to_string(),
        });
    }
    Ok(parsed)
}

/// The HTTP client of one generation: same-origin redirects only, no Nagle delay, a bounded
/// connect.
pub(super) fn http_client() -> Result<reqwest::Client, OpenError> {
    reqwest::Client::builder()
        .redirect(same_origin_redirects())
        .tcp_nodelay(true)
        .connect_timeout(CONNECT_LIMIT)
        .build()
        .map_err(|e| OpenError::HttpClient(describe(&e)))
}

/// Follow only same-origin 307/308 redirects (they keep the body), at most 10.
fn same_origin_redirects() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let keeps_body = matches!(
            attempt.status(),
            reqwest::StatusCode::TEMPORARY_REDIRECT | reqwest::StatusCode::PERMANENT_REDIRECT
        );
        let same_origin = attempt
            .previous()
            .first()
            .is_some_and(|first| first.origin() == attempt.url().origin());
        if !keeps_body || !same_origin {
            attempt.stop()
        } else if attempt.previous().len() > 10 {
            attempt.error("exceeded 10 redirects")
        } else {
            attempt.follow()
        }
    })
}

/// The configured extra headers (e.g. `Authorization`), each checked: an invalid one, or one of
/// `reserved` (set by the transport itself), is an error naming it, never quoting its value.
/// Values are kept out of debug output: they may be credentials.
pub(super) fn configured_headers(
    headers: &[(String, String)],
    reserved: &[&str],
) -> Result<HeaderMap, OpenError> {
    let mut map = HeaderMap::new();
    for (key, value) in headers {
        let name = HeaderName::from_bytes(key.as_bytes())
            .map_err(|_| OpenError::InvalidHeaderName(key.clone()))?;
        if reserved.contains(&name.as_str()) {
            return Err(OpenError::ReservedHeader(key.clone()));
        }
        let mut value =
            HeaderValue::from_str(value).map_err(|_| OpenError::InvalidHeaderValue(key.clone()))?;
        value.set_sensitive(true);
        map.append(name, value);
    }
    Ok(map)
}
