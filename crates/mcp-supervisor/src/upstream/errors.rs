//! Turns what rmcp and its HTTP transport report into the normalized [`Failure`] that the pure
//! classifier judges.
//!
//! This is the only place that knows rmcp's error types. It must never decide what to do about
//! a failure: that is `classify`'s job.

use mcp_supervisor_core::classify::Failure;
use rmcp::ServiceError;
use rmcp::transport::streamable_http_client::StreamableHttpError;

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
    fn http_text_errors_keep_status_and_body() {
        assert_eq!(
            parse_http_text("HTTP 400 Bad Request: No valid session ID provided"),
            Some((400, "No valid session ID provided".into()))
        );
        assert_eq!(parse_http_text("something else"), None);
    }
}
