//! Turns what rmcp and its HTTP transport report into the normalized [`Failure`] that the pure
//! classifier judges.
//!
//! This is the only place that knows rmcp's error types. It must never decide what to do about
//! a failure: that is `classify`'s job.

use std::collections::HashMap;
use std::sync::Arc;

use mcp_supervisor_core::classify::Failure;
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::ServiceError;
use rmcp::model::{ClientJsonRpcMessage, JsonRpcMessage, RequestId};
use rmcp::transport::common::client_side_sse::BoxedSseResponse;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};

/// Whether the request had already gone out when the error happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Sending it failed: it never reached the transport's wire.
    Sending,
    /// It was sent; we were waiting for the answer.
    Awaiting,
}

/// Normalize one rmcp error.
pub fn normalize(error: &ServiceError, phase: Phase) -> Failure {
    match error {
        ServiceError::McpError(data) => Failure::ServerError {
            code: data.code.0,
            message: data.message.to_string(),
        },
        ServiceError::TransportSend(dynamic) => transport_failure(dynamic.error.as_ref(), phase),
        ServiceError::TransportClosed => match phase {
            Phase::Sending => Failure::TransportClosedBeforeSend,
            Phase::Awaiting => Failure::ConnectionLostAfterSend,
        },
        ServiceError::UnexpectedResponse => Failure::UnexpectedResponse,
        ServiceError::Timeout { .. } => Failure::DeadlinePassed,
        ServiceError::Cancelled { .. } => Failure::CancelledByCaller,
        other => Failure::TransportError {
            message: other.to_string(),
            connection_closed: false,
        },
    }
}

/// Look through a transport error's source chain for what the HTTP transport knows.
fn transport_failure(
    error: &(dyn std::error::Error + Send + Sync + 'static),
    phase: Phase,
) -> Failure {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(err) = current {
        if let Some(http) = err.downcast_ref::<StreamableHttpError<reqwest::Error>>() {
            return http_failure(http, phase);
        }
        if let Some(req) = err.downcast_ref::<reqwest::Error>()
            && req.is_connect()
        {
            return Failure::ConnectRefused;
        }
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind::*;
            match io.kind() {
                ConnectionRefused => return Failure::ConnectRefused,
                BrokenPipe | ConnectionReset | UnexpectedEof | NotConnected => {
                    return match phase {
                        Phase::Sending => Failure::TransportClosedBeforeSend,
                        Phase::Awaiting => Failure::ConnectionLostAfterSend,
                    };
                }
                _ => {}
            }
        }
        current = err.source();
    }
    let message = error.to_string();
    if message.contains("Connection refused") || message.contains("error sending request") {
        return Failure::ConnectRefused;
    }
    Failure::TransportError {
        message,
        connection_closed: false,
    }
}

fn http_failure(error: &StreamableHttpError<reqwest::Error>, phase: Phase) -> Failure {
    match error {
        StreamableHttpError::SessionExpired => Failure::SessionExpired,
        StreamableHttpError::HttpStatus(status) => Failure::HttpStatus {
            status: status.status,
            body: String::new(),
        },
        StreamableHttpError::UnexpectedServerResponse(text) => match parse_http_text(text) {
            Some((status, body)) => Failure::HttpStatus { status, body },
            None => Failure::TransportError {
                message: text.to_string(),
                connection_closed: false,
            },
        },
        StreamableHttpError::Client(req) if req.is_connect() => Failure::ConnectRefused,
        StreamableHttpError::TransportChannelClosed => match phase {
            Phase::Sending => Failure::TransportClosedBeforeSend,
            Phase::Awaiting => Failure::ConnectionLostAfterSend,
        },
        StreamableHttpError::UnexpectedEndOfStream => Failure::ConnectionLostAfterSend,
        other => {
            let message = other.to_string();
            if message.contains("Connection refused") {
                return Failure::ConnectRefused;
            }
            Failure::TransportError {
                message,
                connection_closed: false,
            }
        }
    }
}

/// rmcp renders a non-JSON-RPC error reply as `HTTP 400 Bad Request: body`.
fn parse_http_text(text: &str) -> Option<(u16, String)> {
    let rest = text.strip_prefix("HTTP ")?;
    let code: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let status = code.parse().ok()?;
    let body = rest
        .split_once(": ")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Some((status, body))
}

// === impl CorrelatingClient ===

/// rmcp's reqwest HTTP client, except that a JSON-RPC error without an `id` answering the POST of
/// a single request gets that request's id.
///
/// server-everything answers a stale session with HTTP 400 and
/// `{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: No valid session ID provided"}}`
/// (no `id`). rmcp 3.11 parses that into an id-less error, which its service loop logs at debug
/// and drops ("received id-less peer error"), so the call would wait for its deadline. Correlated,
/// it reaches the call as `ServiceError::McpError` and so [`normalize`] as
/// [`Failure::ServerError`], whose stale-session wording the classifier recognises. A JSON
/// answer to a POST that carried one request can only be about that request (rmcp re-correlates
/// a rejected `server/discover` the same way).
#[derive(Clone)]
pub struct CorrelatingClient(reqwest::Client);

impl CorrelatingClient {
    /// Like rmcp's default client: no idle pooling, same-origin 307/308 redirects only.
    pub fn new() -> Self {
        let redirect = reqwest::redirect::Policy::custom(|attempt| {
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
        });
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .redirect(redirect)
            .build()
            .unwrap_or_default();
        Self(client)
    }
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
    use rmcp::model::{ErrorCode, ErrorData};

    #[test]
    fn a_json_rpc_error_is_a_server_error() {
        let error = ServiceError::McpError(ErrorData::new(ErrorCode(-32000), "boom", None));
        assert_eq!(
            normalize(&error, Phase::Awaiting),
            Failure::ServerError {
                code: -32000,
                message: "boom".into()
            }
        );
    }

    #[test]
    fn transport_closed_depends_on_whether_the_request_went_out() {
        assert_eq!(
            normalize(&ServiceError::TransportClosed, Phase::Sending),
            Failure::TransportClosedBeforeSend
        );
        assert_eq!(
            normalize(&ServiceError::TransportClosed, Phase::Awaiting),
            Failure::ConnectionLostAfterSend
        );
    }

    #[test]
    fn timeout_cancel_and_wrong_type_map_one_to_one() {
        let timeout = ServiceError::Timeout {
            timeout: std::time::Duration::from_secs(1),
        };
        assert_eq!(
            normalize(&timeout, Phase::Awaiting),
            Failure::DeadlinePassed
        );
        let cancelled = ServiceError::Cancelled { reason: None };
        assert_eq!(
            normalize(&cancelled, Phase::Awaiting),
            Failure::CancelledByCaller
        );
        assert_eq!(
            normalize(&ServiceError::UnexpectedResponse, Phase::Awaiting),
            Failure::UnexpectedResponse
        );
    }

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

    #[test]
    fn http_text_errors_keep_status_and_body() {
        assert_eq!(
            parse_http_text("HTTP 400 Bad Request: No valid session ID provided"),
            Some((400, "No valid session ID provided".into()))
        );
        assert_eq!(parse_http_text("something else"), None);
    }
}
