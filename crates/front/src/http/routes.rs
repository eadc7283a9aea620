//! The `/mcp` routes: `POST` (one JSON-RPC message, read whole and its envelope read once),
//! `GET` (the session's standalone stream, replayed after `Last-Event-ID`) and `DELETE` (the end
//! of a session). Each route reads the headers through `checks`, finds the session in the
//! store, and hands a request to the face (`calls`).
//!
//! It never answers in the proxy's place and never reads a message beyond its envelope; who
//! may call it (Host, Origin, a token) is the host's to check in front of it.

use std::convert::Infallible;
use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::sse::{KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures::StreamExt;

use super::calls::{HttpFace, json, message_event, refuse, stopping_hint};
use super::checks::{
    self, EVENT_STREAM, JSON, LAST_EVENT_HEADER, SessionId, accepts, is_json_body, session_id,
    sessionless_version, stream_first, version_refused,
};
use super::identity::{Identity, audited, not_the_owner};
use super::options::{Options, PATH, Stopping};
use super::store::Sessions;
use crate::{Kind, Message, Proxy, error_text};

/// The routes at [`PATH`], as [`super::router`] says.
pub(crate) fn router(proxy: Arc<Proxy>, options: Options) -> Router {
    let sessions = Sessions::new(proxy.clone(), options.sealing, options.shutdown.clone());
    sessions.spawn_expiry(options.session_idle);
    let stopping = options
        .stopping
        .unwrap_or_else(|| Stopping::new(options.shutdown));
    let identity = options.auth.map(Identity::new);
    let metadata_paths: Vec<String> = match &identity {
        Some(identity) => {
            let mut paths: Vec<String> = crate::auth::metadata::METADATA_PATHS
                .iter()
                .map(|p| p.to_string())
                .collect();
            // Where the challenge points, for an audience at another path than /mcp.
            let own = identity.metadata_path();
            if !paths.contains(&own) {
                paths.push(own);
            }
            paths
        }
        None => Vec::new(),
    };
    let face = Arc::new(HttpFace::new(
        proxy,
        sessions,
        stopping,
        options.max_body,
        options.max_in_flight,
        identity,
    ));
    let mut router = Router::new().route(PATH, get(open_stream).post(post).delete(delete));
    // Answered without a token: it is how a client learns where to get one.
    for path in &metadata_paths {
        router = router.route(path, get(metadata));
    }
    router.with_state(face)
}

async fn metadata(State(face): State<Arc<HttpFace>>) -> Response {
    match &face.identity {
        Some(identity) => identity.metadata(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

/// Who sends a request with `headers` when the face checks tokens (`Ok(None)` when it does
/// not), or the answer that refuses it (audited).
async fn caller_of(
    face: &HttpFace,
    headers: &HeaderMap,
) -> Result<Option<Arc<crate::caller::Caller>>, Response> {
    match &face.identity {
        Some(identity) => identity
            .caller(headers)
            .await
            .map(Some)
            .map_err(|refused| audited(&face.proxy, refused, headers, None, None)),
        None => Ok(None),
    }
}

/// The `403` of a request on a session another identity opened (audited); `None` when the
/// caller may go on with it.
fn not_the_owners(
    face: &HttpFace,
    session: &super::session::HttpSession,
    headers: &HeaderMap,
    caller: Option<&Arc<crate::caller::Caller>>,
    message: Option<&Message>,
) -> Option<Response> {
    let refused = not_the_owner(&session.client, caller)?;
    Some(audited(
        &face.proxy,
        refused,
        headers,
        caller.map(|c| &**c),
        message,
    ))
}

async fn post(State(face): State<Arc<HttpFace>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    // Who it is comes first: a request without a valid token reads nothing further.
    let caller = match caller_of(&face, &parts.headers).await {
        Ok(caller) => caller,
        Err(refused) => return refused,
    };
    if !(accepts(&parts.headers, JSON) && accepts(&parts.headers, EVENT_STREAM)) {
        return refuse(
            StatusCode::NOT_ACCEPTABLE,
            "Not Acceptable: the client must accept both application/json and text/event-stream",
        );
    }
    if !is_json_body(&parts.headers) {
        return refuse(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "Unsupported Media Type: Content-Type must be application/json",
        );
    }
    let bytes = match read_body(body, face.limit).await {
        Ok(bytes) => bytes,
        Err((status, why)) => return refuse(status, &why),
    };
    let Ok(text) = std::str::from_utf8(&bytes) else {
        return json(
            StatusCode::BAD_REQUEST,
            error_text(None, -32700, "Parse error: the request body is not UTF-8"),
        );
    };
    // The envelope is read here, once: everything after takes its parts from `message`.
    let message = match Message::read(text) {
        Ok(message) => message,
        Err(answer) => return json(StatusCode::BAD_REQUEST, answer),
    };
    match session_id(&parts.headers) {
        SessionId::Unreadable => unreadable_session(),
        SessionId::Given(id) => {
            let Some(session) = face.sessions.get_or_resume(id) else {
                return session_not_found();
            };
            if let Some(refusal) = version_refused(&parts.headers) {
                return refusal.into_response();
            }
            if let Some(refused) = not_the_owners(
                &face,
                &session,
                &parts.headers,
                caller.as_ref(),
                Some(&message),
            ) {
                return refused;
            }
            if caller.is_some() {
                session.client.set_caller(caller);
            }
            session.touch();
            match message.kind() {
                Kind::Request { .. } => {
                    face.call(&session, message, stream_first(&parts.headers))
                        .await
                }
                // An answer to a server's request that this process did not send or no longer
                // waits for (the session moved to this replica after the request was sent):
                // refused, said so, never silently dropped.
                Kind::Response if !message.id().is_some_and(|id| session.client.waits_for(id)) => {
                    json(
                        StatusCode::CONFLICT,
                        error_text(
                            None,
                            -32600,
                            "this answers a server request that this replica is not waiting for: it was sent by another replica of the service (the session moved), or it was already answered or timed out; the server's request fails there, so retry the call that caused it",
                        ),
                    )
                }
                _ => {
                    // A notification, or the client's answer to a server's request.
                    let _ = face
                        .proxy
                        .handle_message(&session.client, &message, None)
                        .await;
                    StatusCode::ACCEPTED.into_response()
                }
            }
        }
        SessionId::Missing => match message.kind() {
            // Protocol 2026-07-28 removed `initialize`: a client that speaks it (by its header)
            // gets "method not found", as the spec asks of a server without the method.
            Kind::Request { method }
                if method == "initialize" && sessionless_version(&parts.headers) =>
            {
                json(
                    StatusCode::NOT_FOUND,
                    error_text(
                        message.id(),
                        -32601,
                        "Method not found: initialize was removed in protocol 2026-07-28; use server/discover",
                    ),
                )
            }
            Kind::Request { method } if method == "initialize" => {
                face.initialize(&message, caller).await
            }
            _ if message.is_sessionless() || sessionless_version(&parts.headers) => {
                stateless(&face, &parts.headers, message, caller).await
            }
            _ => session_required(),
        },
    }
}

/// A POST of protocol 2026-07-28 (no session): checked against its headers, then handled as the
/// one request of a client of its own. A notification or a response has nothing to go to (no
/// request of that client is open): 202.
async fn stateless(
    face: &HttpFace,
    headers: &HeaderMap,
    message: Message,
    caller: Option<Arc<crate::caller::Caller>>,
) -> Response {
    let Kind::Request { method } = message.kind() else {
        return StatusCode::ACCEPTED.into_response();
    };
    let id = message.id().map(ToOwned::to_owned);
    let meta = checks::stateless_meta(message.head());
    if let Some(refused) = checks::stateless_refused(headers, method, &meta, id.as_deref()) {
        return refused.into_response();
    }
    let malformed = meta.malformed();
    face.stateless(message, malformed, id, caller).await
}

async fn open_stream(State(face): State<Arc<HttpFace>>, request: Request) -> Response {
    let (parts, _) = request.into_parts();
    let caller = match caller_of(&face, &parts.headers).await {
        Ok(caller) => caller,
        Err(refused) => return refused,
    };
    if parts.method == Method::HEAD {
        // axum routes HEAD to GET: a stream whose body is never read would swallow events.
        return (
            StatusCode::METHOD_NOT_ALLOWED,
            [(header::ALLOW, "GET, POST, DELETE")],
        )
            .into_response();
    }
    if !accepts(&parts.headers, EVENT_STREAM) {
        return refuse(
            StatusCode::NOT_ACCEPTABLE,
            "Not Acceptable: the client must accept text/event-stream",
        );
    }
    let session = match session_id(&parts.headers) {
        SessionId::Unreadable => return unreadable_session(),
        // That era has no standalone stream: its notifications ride `subscriptions/listen`.
        SessionId::Missing if sessionless_version(&parts.headers) => {
            return (StatusCode::METHOD_NOT_ALLOWED, [(header::ALLOW, "POST")]).into_response();
        }
        SessionId::Missing => return session_required(),
        SessionId::Given(id) => match face.sessions.get_or_resume(id) {
            Some(session) => session,
            None => return session_not_found(),
        },
    };
    if let Some(refusal) = version_refused(&parts.headers) {
        return refusal.into_response();
    }
    if let Some(refused) = not_the_owners(&face, &session, &parts.headers, caller.as_ref(), None) {
        return refused;
    }
    session.touch();
    let last = parts
        .headers
        .get(LAST_EVENT_HEADER)
        .and_then(|v| v.to_str().ok());
    let Some((replay, live)) = session.attach(last) else {
        return refuse(
            StatusCode::CONFLICT,
            "Conflict: this session's stream is already open (one GET stream at a time; resume a lost one with Last-Event-ID)",
        );
    };
    let held = session.hold();
    let live = futures::stream::unfold(live, |mut live| async move {
        live.recv().await.map(|event| (event, live))
    });
    let events = futures::stream::iter(replay)
        .chain(live)
        .map(move |(id, text)| {
            let _held = &held;
            Ok::<_, Infallible>(message_event(id.to_string(), &text))
        })
        .take_until(session.ended.clone().cancelled_owned())
        .take_until(face.stopping.token.clone().cancelled_owned())
        .chain(stopping_hint(face.stopping.clone()));
    Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response()
}

async fn delete(State(face): State<Arc<HttpFace>>, headers: HeaderMap) -> Response {
    let caller = match caller_of(&face, &headers).await {
        Ok(caller) => caller,
        Err(refused) => return refused,
    };
    match session_id(&headers) {
        SessionId::Unreadable => unreadable_session(),
        SessionId::Missing => session_required(),
        SessionId::Given(id) => {
            if let Some(refusal) = version_refused(&headers) {
                return refusal.into_response();
            }
            if let Some(session) = face.sessions.get_or_resume(id)
                && let Some(refused) =
                    not_the_owners(&face, &session, &headers, caller.as_ref(), None)
            {
                return refused;
            }
            if face.sessions.end(id) {
                StatusCode::OK.into_response()
            } else {
                session_not_found()
            }
        }
    }
}

/// Read a body whole, up to `limit` bytes: past it 413 (without reading on), and 400 for one
/// that cannot be read (broken chunked framing, a connection cut mid-body).
async fn read_body(body: Body, limit: usize) -> Result<Bytes, (StatusCode, String)> {
    let mut stream = body.into_data_stream();
    let mut bytes = Vec::new();
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(chunk) if chunk.len() > limit.saturating_sub(bytes.len()) => {
                return Err((
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("Payload Too Large: the request body exceeds {limit} bytes"),
                ));
            }
            Ok(chunk) => bytes.extend_from_slice(&chunk),
            Err(error) => {
                return Err((
                    StatusCode::BAD_REQUEST,
                    format!("Bad Request: cannot read the request body: {error}"),
                ));
            }
        }
    }
    Ok(Bytes::from(bytes))
}

fn session_required() -> Response {
    refuse(
        StatusCode::BAD_REQUEST,
        "Bad Request: Mcp-Session-Id header is required",
    )
}

fn unreadable_session() -> Response {
    refuse(
        StatusCode::BAD_REQUEST,
        "Bad Request: the Mcp-Session-Id header is not visible ASCII",
    )
}

fn session_not_found() -> Response {
    refuse(
        StatusCode::NOT_FOUND,
        "Session not found: it ended or never existed; start a new one with initialize",
    )
}
