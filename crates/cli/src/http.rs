//! The HTTP face's server: the admin endpoints (`/status`, `/history`, `/healthz`, `/metrics`,
//! `POST /servers/{name}/reconnect`), the dashboard at `/` ([`page`]), the MCP routes at `/mcp`
//! ([`crate::mcp_http`]) when asked, and one guard in front of all of them that checks `Host`,
//! `Origin` and, when set, a bearer token. The probes `/livez` and `/readyz` stand outside the guard (a kubelet sends no token, and
//! its `Host` is the pod's address): they answer a status and one word, nothing else.
//!
//! Connections are accepted, timed and capped by [`listener`] (slow or idle clients cannot hold
//! a listener, SPEC §9).
//!
//! It only reads status and asks the hub; it never touches a supervisor, and never reads an MCP
//! message (that is `mcp_http`'s).

pub mod limits;
pub mod listener;
pub mod page;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use mcp_supervisor_front::auth::{Access, Verifier};
use mcp_supervisor_front::proxy::Proxy;

use crate::drain::Drain;

/// Who may talk to the HTTP face.
#[derive(Clone, Default)]
pub struct Guard {
    /// Required `Authorization: Bearer` token, when set.
    pub token: Option<String>,
    /// The config's `auth` (SPEC §14): the admin endpoints need a token with its
    /// `adminScopes`; `/mcp` checks its own tokens.
    pub auth: Option<Arc<Verifier>>,
    /// Extra allowed `Host` values besides loopback names (for a non-loopback bind).
    pub hosts: Vec<String>,
    /// Extra allowed `Origin` values besides loopback origins.
    pub origins: Vec<String>,
}

/// Every admin endpoint and the dashboard ([`page`]), with no guard: a TCP listener layers the
/// Host, Origin and token checks over it ([`serve`]); the registry's Unix socket serves it as is
/// (its modes are the guard). `stop` ends the dashboard's event streams.
pub fn admin_router(proxy: Arc<Proxy>, about: Arc<page::About>, stop: CancellationToken) -> Router {
    Router::new()
        .route("/status", get(status))
        .route("/history", get(history))
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .route("/servers/{name}/reconnect", post(reconnect))
        .with_state(proxy.clone())
        .merge(page::router(page::Page { proxy, about, stop }))
}

/// Serve the MCP face (when `mcp`, with its session ids sealed so), the admin endpoints, the
/// dashboard and the probes on `listener`, its connections within `limits`, until `shutdown`
/// (then until every connection has closed).
#[allow(clippy::too_many_arguments)]
pub async fn serve(
    proxy: Arc<Proxy>,
    about: Arc<page::About>,
    listener: tokio::net::TcpListener,
    guard: Guard,
    mcp: Option<Arc<crate::mcp_http::Sealing>>,
    drain: Drain,
    limits: limits::Limits,
    shutdown: CancellationToken,
) {
    let mut router = admin_router(proxy.clone(), about, shutdown.child_token());
    if let Some(sealing) = mcp {
        router = router.merge(crate::mcp_http::router(
            proxy,
            sealing,
            guard.auth.clone(),
            shutdown.child_token(),
            drain.clone(),
        ));
    }
    // Layered before the probes are merged: the guard does not stand in front of them.
    let router = router
        .layer(middleware::from_fn_with_state(Arc::new(guard), check))
        .merge(probes(drain));
    listener::run(listener, router, limits, shutdown).await;
}

/// Bind `addr`, with an error that says what to do.
pub async fn bind(addr: SocketAddr) -> anyhow::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await.map_err(|e| {
        anyhow::anyhow!("cannot listen on {addr}: {e}; choose another address or port")
    })
}

/// `/livez` (the process serves: 200 until it exits) and `/readyz` (200 while ready for traffic,
/// 503 while starting or draining).
fn probes(drain: Drain) -> Router {
    Router::new()
        .route("/livez", get(|| async { (StatusCode::OK, "ok\n") }))
        .route(
            "/readyz",
            get(|State(drain): State<Drain>| async move {
                let (status, word) = drain.readiness();
                (status, format!("{word}\n"))
            }),
        )
        .with_state(drain)
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
pub(crate) async fn check(
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
    // The page and its assets hold no data: served to anyone the Host and Origin checks let in,
    // so that the page can ask for the token its data needs.
    if page::is_public(request.uri().path()) {
        return next.run(request).await;
    }
    if let Some(auth) = &guard.auth {
        // `/mcp` and its metadata are the face's own to check; the rest is admin.
        let path = request.uri().path();
        let face_checks = path == mcp_supervisor_front::http::PATH
            || path.starts_with(mcp_supervisor_front::auth::metadata::METADATA_PATH);
        if !face_checks {
            let authorization = text(&headers, header::AUTHORIZATION);
            if let Err(refusal) = auth.check(authorization.as_deref(), Access::Admin).await {
                let metadata_url =
                    mcp_supervisor_front::http::metadata_url_of(&auth.settings().audience);
                return mcp_supervisor_front::http::refused(&refusal, &metadata_url);
            }
        }
    } else if let Some(token) = &guard.token {
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

pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn status(State(proxy): State<Arc<Proxy>>) -> Response {
    axum::Json(json!({ "servers": proxy.hub().status() })).into_response()
}

/// Each server's last hour (SPEC §15): its lifecycle events, oldest first, and its tool calls per
/// minute and over the hour.
async fn history(State(proxy): State<Arc<Proxy>>) -> Response {
    let hub = proxy.hub();
    let servers: Vec<serde_json::Value> = hub
        .servers()
        .into_iter()
        .map(|name| {
            let (minutes, hour) = hub.calls(&name);
            json!({
                "name": name,
                "events": hub.events(&name),
                "calls": { "minutes": minutes, "hour": hour },
            })
        })
        .collect();
    axum::Json(json!({ "servers": servers })).into_response()
}

/// 200 only while every enabled server is in service; 503 with the reasons otherwise
/// ([`mcp_supervisor::Health`]).
async fn healthz(State(proxy): State<Arc<Proxy>>) -> Response {
    let health = proxy.hub().health();
    if health.is_healthy() {
        (StatusCode::OK, axum::Json(json!({ "status": "ok" }))).into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            axum::Json(json!({ "status": "unavailable", "servers": health.unavailable })),
        )
            .into_response()
    }
}

async fn metrics(State(proxy): State<Arc<Proxy>>) -> Response {
    let body = proxy
        .metrics()
        .render(&proxy.hub().status(), crate::telemetry::dropped());
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
