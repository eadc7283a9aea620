//! The face as an OAuth 2.1 resource server (SPEC §14): who a request is, from its bearer
//! token, before anything runs; the protected resource metadata (RFC 9728) that tells a client
//! where to get a token; a session kept to the identity that opened it; and the HTTP form of a
//! refusal for too many requests (`429` with `Retry-After`). Each `401` and `403` it gives is
//! one line of the audit ([`audited`]).
//!
//! It checks and refuses; it never forwards the token anywhere (the caller's token never goes
//! upstream) and never logs it, nor writes it to the audit. The token checks themselves are
//! [`crate::auth`]'s.

use std::sync::Arc;

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use mcp_supervisor::core::authorize::Claims;

use super::checks::{SessionId, session_id};
use crate::audit::Outcome;
use crate::auth::{Access, Refusal, Verifier, metadata};
use crate::caller::Caller;
use crate::client::Client;
use crate::{Kind, Message, Proxy};

/// The bearer checks of one face, and where its metadata lives.
pub(crate) struct Identity {
    verifier: Arc<Verifier>,
    /// The URL a challenge points at (`resource_metadata`).
    metadata_url: String,
}

impl Identity {
    pub(crate) fn new(verifier: Arc<Verifier>) -> Self {
        let metadata_url = metadata_url_of(&verifier.settings().audience);
        Self {
            verifier,
            metadata_url,
        }
    }

    /// Who sends a request with `headers`, or the `401`/`403` it gets (nothing runs).
    pub(crate) async fn caller(&self, headers: &HeaderMap) -> Result<Arc<Caller>, Response> {
        let authorization = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        match self.verifier.check(authorization, Access::Mcp).await {
            Ok(identity) => Ok(Arc::new(Caller::new(
                identity.issuer.clone(),
                identity.subject.clone(),
                identity.client_id.clone(),
                Claims::from_json(&identity.claims).unwrap_or_default(),
            ))),
            Err(refusal) => Err(refused(&refusal, &self.metadata_url)),
        }
    }

    /// The path the challenge's metadata URL names (the well-known path and the audience's
    /// path), served beside [`crate::auth::metadata::METADATA_PATHS`].
    pub(crate) fn metadata_path(&self) -> String {
        let after_scheme = self.metadata_url.find("://").map_or(0, |i| i + 3);
        self.metadata_url[after_scheme..].find('/').map_or_else(
            || "/".to_string(),
            |i| self.metadata_url[after_scheme + i..].to_string(),
        )
    }

    /// The protected resource metadata, as JSON.
    pub(crate) fn metadata(&self) -> Response {
        (
            [(header::CONTENT_TYPE, "application/json")],
            self.verifier.metadata().to_string(),
        )
            .into_response()
    }
}

/// A refusal as its answer: the status, the challenge, and a line that says why.
pub fn refused(refusal: &Refusal, metadata_url: &str) -> Response {
    let challenge = refusal.www_authenticate(metadata_url);
    let mut response = (refusal.status(), format!("{refusal}\n")).into_response();
    if let Ok(value) = HeaderValue::from_str(&challenge) {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, value);
    }
    response
}

/// The metadata URL of the resource `audience` (RFC 9728 §3.1): the well-known path inserted
/// between its origin and its path (`https://h/mcp` → `https://h/.well-known/oauth-protected-resource/mcp`).
pub fn metadata_url_of(audience: &str) -> String {
    let after_scheme = audience.find("://").map_or(0, |i| i + 3);
    let path_at = audience[after_scheme..]
        .find('/')
        .map_or(audience.len(), |i| after_scheme + i);
    let (origin, path) = audience.split_at(path_at);
    let path = path.trim_end_matches('/');
    format!("{}{}", metadata::metadata_url(origin), path)
}

/// The `403` of a request on a session that another identity opened (SPEC §14): nothing runs.
/// `None` when `caller` is the session's owner, or when the session has none (opened without
/// auth) and no caller comes either.
pub(crate) fn not_the_owner(client: &Client, caller: Option<&Arc<Caller>>) -> Option<Response> {
    let owner = client.session().and_then(|s| s.owner);
    match (owner.as_deref(), caller) {
        (None, None) => None,
        (Some(owner), Some(caller)) if owner == caller.key() => None,
        _ => Some(
            (
                StatusCode::FORBIDDEN,
                "Forbidden: this session belongs to another identity; open a session of your own (initialize)\n",
            )
                .into_response(),
        ),
    }
}

/// `refused` (a `401` or `403` of the face: nothing ran), first written to `proxy`'s audit: who
/// (`caller`, when its token was valid), the session its headers name, and what `message`
/// asked (when its body was read). Never the token.
pub(crate) fn audited(
    proxy: &Proxy,
    refused: Response,
    headers: &HeaderMap,
    caller: Option<&Caller>,
    message: Option<&Message>,
) -> Response {
    let outcome = match refused.status() {
        StatusCode::UNAUTHORIZED => Outcome::Unauthenticated,
        _ => Outcome::Forbidden,
    };
    let session = match session_id(headers) {
        SessionId::Given(id) => Some(id),
        SessionId::Missing | SessionId::Unreadable => None,
    };
    let asked = message.and_then(|m| match m.kind() {
        Kind::Request { method } | Kind::Notification { method } => Some((&**method, m.head())),
        Kind::Response => None,
    });
    crate::trail::refused_at_edge(proxy, caller, session, asked, outcome);
    refused
}

/// The seconds of `Retry-After` when `answer` is a rate limit's refusal (error code
/// [`crate::access::RATE_LIMITED`]).
pub(crate) fn retry_after(answer: &str) -> Option<u64> {
    // A cheap look first: most answers are not refusals, and some are large.
    if !answer.contains("-32029") {
        return None;
    }
    let value: serde_json::Value = serde_json::from_str(answer).ok()?;
    let error = value.get("error")?;
    (error.get("code")?.as_i64()? == crate::access::RATE_LIMITED)
        .then(|| error.pointer("/data/retryAfter").and_then(|v| v.as_u64()))
        .map(|secs| secs.unwrap_or(1).max(1))
}

/// `answer` as a `429` with `Retry-After`.
pub(crate) fn too_many(answer: String, seconds: u64) -> Response {
    (
        StatusCode::TOO_MANY_REQUESTS,
        [
            (header::CONTENT_TYPE, "application/json".to_string()),
            (header::RETRY_AFTER, seconds.to_string()),
        ],
        answer,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_metadata_url_inserts_the_well_known_path_before_the_resource_path() {
        assert_eq!(
            metadata_url_of("https://mcp.example.com/mcp"),
            "https://mcp.example.com/.well-known/oauth-protected-resource/mcp"
        );
        assert_eq!(
            metadata_url_of("http://127.0.0.1:8080"),
            "http://127.0.0.1:8080/.well-known/oauth-protected-resource"
        );
        assert_eq!(
            metadata_url_of("http://127.0.0.1:8080/"),
            "http://127.0.0.1:8080/.well-known/oauth-protected-resource"
        );
    }

    #[test]
    fn a_rate_limit_refusal_is_read_from_its_answer_and_nothing_else_is() {
        let refused = r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32029,"message":"rate limit","data":{"retryAfter":3}}}"#;
        assert_eq!(retry_after(refused), Some(3));
        let result =
            r#"{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"-32029"}]}}"#;
        assert_eq!(retry_after(result), None);
        assert_eq!(retry_after(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#), None);
    }
}
