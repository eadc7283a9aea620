//! The HTTP face: streamable HTTP at `/mcp`, and the admin endpoints (`/status`, `/healthz`,
//! `/metrics`, `POST /servers/{name}/reconnect`), behind one guard that checks `Host`, `Origin`
//! and, when set, a bearer token.
//!
//! It only reads status and asks the hub; it never touches a supervisor.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures::StreamExt;
use mcp_supervisor::ServerState;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::fastpath::{self, FastPath, SESSION_IDLE, SessionClock};
use crate::proxy::Proxy;

/// Who may talk to the HTTP face.
#[derive(Clone, Debug, Default)]
pub struct Guard {
    /// Required `Authorization: Bearer` token, when set.
    pub token: Option<String>,
    /// Extra allowed `Host` values besides loopback names (for a non-loopback bind).
    pub hosts: Vec<String>,
    /// Extra allowed `Origin` values besides loopback origins.
    pub origins: Vec<String>,
}

/// Serve the MCP face (when `mcp`) and the admin endpoints on `listener` until `shutdown`.
pub async fn serve(
    proxy: Arc<Proxy>,
    bridge: Arc<crate::bridge::Bridge>,
    listener: tokio::net::TcpListener,
    guard: Guard,
    mcp: bool,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let mut router = Router::new()
        .route("/status", get(status))
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .route("/servers/{name}/reconnect", post(reconnect));
    if mcp {
        let mut hosts = vec![
            "localhost".to_string(),
            "127.0.0.1".to_string(),
            "::1".to_string(),
            "[::1]".to_string(),
        ];
        hosts.extend(guard.hosts.iter().cloned());
        let config = StreamableHttpServerConfig::default()
            .with_allowed_hosts(hosts)
            .with_cancellation_token(shutdown.child_token());
        let factory_bridge = bridge.clone();
        // Sessions expire by the fast path's idle clock, which sees every request; rmcp's own
        // would expire a session busy with calls it never sees.
        let mut sessions = LocalSessionManager::default();
        sessions.session_config.keep_alive = None;
        let sessions = Arc::new(sessions);
        let clock = SessionClock::new(sessions.clone());
        clock.spawn_expiry(SESSION_IDLE, shutdown.child_token());
        let body = Arc::new(McpFront {
            limit: config.max_request_body_bytes,
            fast: FastPath::new(
                proxy.clone(),
                sessions.clone(),
                clock.clone(),
                shutdown.child_token(),
            ),
            clock,
        });
        let service =
            StreamableHttpService::new(move || Ok(factory_bridge.handler()), sessions, config);
        router = router
            .nest_service("/mcp", service)
            .layer(middleware::from_fn_with_state(body, mcp_front));
    }
    let router = router
        .layer(middleware::from_fn_with_state(Arc::new(guard), check))
        .with_state(proxy);
    // Answers are small SSE events: do not let Nagle hold one back behind the previous write.
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        if let Err(error) = tcp.set_nodelay(true) {
            tracing::debug!("cannot set TCP_NODELAY: {error}");
        }
    });
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await
}

/// Bind `addr`, with an error that says what to do.
pub async fn bind(addr: SocketAddr) -> anyhow::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await.map_err(|e| {
        anyhow::anyhow!("cannot listen on {addr}: {e}; choose another address or port")
    })
}

fn host_allowed(host: &str, guard: &Guard) -> bool {
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or(rest)
    } else {
        host.rsplit_once(':').map_or(host, |(h, _)| h)
    };
    matches!(name, "localhost" | "127.0.0.1" | "::1")
        || guard.hosts.iter().any(|h| h == host || h == name)
}

fn origin_allowed(origin: &str, guard: &Guard) -> bool {
    if guard.origins.iter().any(|o| o == origin) {
        return true;
    }
    let Some(rest) = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
    else {
        return false;
    };
    host_allowed(rest.trim_end_matches('/'), &Guard::default())
}

/// Refuse requests from unexpected hosts and browser origins (DNS rebinding), and without the
/// token when one is required.
async fn check(
    State(guard): State<Arc<Guard>>,
    headers: HeaderMap,
    request: Request,
    next: Next,
) -> Response {
    let text = |h: &HeaderMap, name| {
        h.get(name)
            .and_then(|v: &header::HeaderValue| v.to_str().ok())
            .map(str::to_string)
    };
    if let Some(host) = text(&headers, header::HOST)
        && !host_allowed(&host, &guard)
    {
        return (
            StatusCode::FORBIDDEN,
            format!(
                "Host \"{host}\" is not allowed; start with --allow-host {host} to accept it\n"
            ),
        )
            .into_response();
    }
    if let Some(origin) = text(&headers, header::ORIGIN)
        && !origin_allowed(&origin, &guard)
    {
        return (StatusCode::FORBIDDEN, format!("Origin \"{origin}\" is not allowed; start with --allow-origin {origin} to accept it\n")).into_response();
    }
    if let Some(token) = &guard.token {
        let given = text(&headers, header::AUTHORIZATION);
        let ok = given
            .as_deref()
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|t| constant_time_eq(t.as_bytes(), token.as_bytes()));
        if !ok {
            return (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Bearer")],
                "missing or wrong bearer token: send Authorization: Bearer <token>\n",
            )
                .into_response();
        }
    }
    next.run(request).await
}

/// What stands in front of rmcp's service at `/mcp`.
struct McpFront {
    /// The largest POST body read.
    limit: usize,
    fast: Arc<FastPath>,
    clock: Arc<SessionClock>,
}

/// In front of rmcp's service: note each session's activity, count its open streams, and read
/// a POST body whole (up to the limit) before anything parses it: a body that cannot be read
/// (broken chunked framing, a connection cut mid-body) is the client's fault and gets 400,
/// where rmcp would answer 500; one over the limit gets 413 without being buffered past it.
/// Then the fast path answers the tool calls it can, and rmcp everything else; rmcp's 415 for a
/// JSON body that is not a message becomes a 400 that says so.
async fn mcp_front(State(front): State<Arc<McpFront>>, request: Request, next: Next) -> Response {
    if !request.uri().path().starts_with("/mcp") {
        return next.run(request).await;
    }
    let session = fastpath::header_text(request.headers(), "mcp-session-id").map(str::to_string);
    if let Some(session) = &session {
        front.clock.touch(session);
    }
    if request.method() == Method::GET {
        let response = next.run(request).await;
        return match session {
            Some(session) if response.status().is_success() => {
                front.clock.track_stream(&session, response)
            }
            _ => response,
        };
    }
    if request.method() == Method::DELETE {
        let response = next.run(request).await;
        if let Some(session) = &session
            && response.status().is_success()
        {
            front.fast.end_session(session);
        }
        return response;
    }
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    let limit = front.limit;
    let (parts, body) = request.into_parts();
    let mut stream = body.into_data_stream();
    let mut bytes = Vec::new();
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(chunk) if chunk.len() > limit.saturating_sub(bytes.len()) => {
                return (
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("Payload Too Large: request body exceeds {limit} bytes\n"),
                )
                    .into_response();
            }
            Ok(chunk) => bytes.extend_from_slice(&chunk),
            Err(error) => {
                return (
                    StatusCode::BAD_REQUEST,
                    format!("cannot read the request body: {error}\n"),
                )
                    .into_response();
            }
        }
    }
    if let Some(response) = front.fast.post(&parts, &bytes).await {
        return response;
    }
    let json_body = fastpath::is_json_media_type(&parts.headers);
    let bytes = axum::body::Bytes::from(bytes);
    let response = next
        .run(Request::from_parts(parts, Body::from(bytes.clone())))
        .await;
    if json_body && response.status() == StatusCode::UNSUPPORTED_MEDIA_TYPE {
        // rmcp answers 415 also when the media type was right but the body is not a JSON-RPC
        // message: say what is wrong, as JSON-RPC does.
        return not_a_message(&bytes);
    }
    response
}

/// 400 with a JSON-RPC error for a body that is not JSON (-32700) or is JSON but not a JSON-RPC
/// message (-32600).
fn not_a_message(body: &[u8]) -> Response {
    let (code, message) = match serde_json::from_slice::<serde::de::IgnoredAny>(body) {
        Err(error) => (
            -32700,
            format!("Parse error: the request body is not JSON ({error})"),
        ),
        Ok(_) => (
            -32600,
            "Invalid Request: the request body is JSON but not a JSON-RPC request, notification \
             or response (check `jsonrpc`, `id`, `method` and `params`; batches are not accepted)"
                .to_string(),
        ),
    };
    let answer = json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": { "code": code, "message": message },
    });
    (StatusCode::BAD_REQUEST, axum::Json(answer)).into_response()
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn status(State(proxy): State<Arc<Proxy>>) -> Response {
    axum::Json(json!({ "servers": proxy.hub().status() })).into_response()
}

/// 200 only while every enabled server is ready; 503 with the reasons otherwise.
async fn healthz(State(proxy): State<Arc<Proxy>>) -> Response {
    let problems: Vec<_> = proxy
        .hub()
        .status()
        .into_iter()
        .filter(|s| s.enabled && s.state != ServerState::Ready)
        .map(|s| json!({ "server": s.name, "state": s.state, "lastError": s.last_error }))
        .collect();
    if problems.is_empty() {
        (StatusCode::OK, axum::Json(json!({ "status": "ok" }))).into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            axum::Json(json!({ "status": "unavailable", "servers": problems })),
        )
            .into_response()
    }
}

async fn metrics(State(proxy): State<Arc<Proxy>>) -> Response {
    let body = proxy.metrics().render(&proxy.hub().status());
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body).into_response()
}

async fn reconnect(State(proxy): State<Arc<Proxy>>, Path(name): Path<String>) -> Response {
    match proxy.hub().reconnect(&name) {
        Ok(()) => (
            StatusCode::ACCEPTED,
            axum::Json(json!({ "server": name, "reconnecting": true })),
        )
            .into_response(),
        Err(error) => (
            StatusCode::NOT_FOUND,
            axum::Json(json!({ "error": error.to_string() })),
        )
            .into_response(),
    }
}
