//! The HTTP client of a streamable-HTTP generation: rmcp's reqwest client, plus one repair that
//! lets a peer's id-less JSON-RPC error reach the call it answers.
//!
//! It only delivers messages; it never retries, and never decides what a failure means.

use std::collections::HashMap;
use std::sync::Arc;

use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::{ClientJsonRpcMessage, JsonRpcMessage, RequestId};
use rmcp::transport::common::client_side_sse::BoxedSseResponse;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};

// === impl CorrelatingClient ===

/// rmcp's reqwest HTTP client, except that a JSON-RPC error without an `id` answering the POST of
/// a single request gets that request's id.
///
/// server-everything answers a stale session with HTTP 400 and
/// `{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: No valid session ID provided"}}`
/// (no `id`). rmcp 3.11 parses that into an id-less error, which its service loop logs at debug
/// and drops ("received id-less peer error"), so the call would wait for its deadline. Correlated,
/// it reaches the call as `ServiceError::McpError` and so `errors::normalize` as
/// [`Failure::ServerError`], whose stale-session wording the classifier recognises. A JSON
/// answer to a POST that carried one request can only be about that request (rmcp re-correlates
/// a rejected `server/discover` the same way).
#[derive(Clone)]
pub struct CorrelatingClient(reqwest::Client);

impl CorrelatingClient {
    /// Like rmcp's default client: no idle pooling, same-origin 307/308 redirects only.
    pub fn new() -> Self {
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .redirect(same_origin_redirects())
            .build()
            .unwrap_or_default();
        Self(client)
    }
}

/// The redirect policy of every MCP HTTP client: only 307/308 (they keep the method and body),
/// only to the same origin (headers such as `Authorization` must not leak to another host), at
/// most 10.
pub(crate) fn same_origin_redirects() -> reqwest::redirect::Policy {
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

impl Default for CorrelatingClient {
    fn default() -> Self {
        Self::new()
    }
}

fn request_id(message: &ClientJsonRpcMessage) -> Option<RequestId> {
    match message {
        JsonRpcMessage::Request(request) => Some(request.id.clone()),
        _ => None,
    }
}

fn correlate(
    id: Option<RequestId>,
    response: StreamableHttpPostResponse,
) -> StreamableHttpPostResponse {
    match (id, response) {
        (Some(id), StreamableHttpPostResponse::Json(JsonRpcMessage::Error(mut error), session))
            if error.id.is_none() =>
        {
            error.id = Some(id);
            StreamableHttpPostResponse::Json(JsonRpcMessage::Error(error), session)
        }
        (_, response) => response,
    }
}

type PostResult = Result<StreamableHttpPostResponse, StreamableHttpError<reqwest::Error>>;
type StreamResult = Result<BoxedSseResponse, StreamableHttpError<reqwest::Error>>;

impl StreamableHttpClient for CorrelatingClient {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> PostResult {
        let id = request_id(&message);
        let response = self
            .0
            .post_message(uri, message, session_id, auth_header, custom_headers)
            .await?;
        Ok(correlate(id, response))
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> PostResult {
        let id = request_id(&message);
        let response = self
            .0
            .post_message_with_max_sse_event_size(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await?;
        Ok(correlate(id, response))
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> PostResult {
        let id = request_id(&message);
        let response = self
            .0
            .post_message_with_response_limits(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                limits,
            )
            .await?;
        Ok(correlate(id, response))
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<reqwest::Error>> {
        self.0
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> StreamResult {
        self.0
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> StreamResult {
        self.0
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_less_error_answering_a_request_gets_its_id() {
        let body = r#"{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: No valid session ID provided"}}"#;
        let error: rmcp::model::ServerJsonRpcMessage =
            serde_json::from_str(body).expect("an error message");
        let id = RequestId::Number(7);
        match correlate(
            Some(id.clone()),
            StreamableHttpPostResponse::Json(error.clone(), None),
        ) {
            StreamableHttpPostResponse::Json(JsonRpcMessage::Error(e), None) => {
                assert_eq!(e.id, Some(id))
            }
            other => panic!("unexpected {other:?}"),
        }
        // A notification's answer has no request to belong to: left as it is.
        match correlate(None, StreamableHttpPostResponse::Json(error, None)) {
            StreamableHttpPostResponse::Json(JsonRpcMessage::Error(e), None) => {
                assert_eq!(e.id, None)
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}
