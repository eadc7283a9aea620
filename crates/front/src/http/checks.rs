//! What a request to `/mcp` must say before its message goes anywhere, read from its headers
//! (`http` types, no framework): the media types it accepts and sends, its session header, the
//! protocol version a session speaks, and the checks of a 2026-07-28 POST (`MCP-Protocol-Version`
//! against the body's `_meta`, `Mcp-Method` and `Mcp-Name` against the body), with the HTTP
//! status of that era's answers.
//!
//! It only judges: a refusal is a status and a JSON-RPC error as text. It never answers in the
//! proxy's place, never holds state, and never reads a body: the members the headers mirror
//! come from the message's head, read once with it.

use http::{HeaderMap, StatusCode, header};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::message::Head;
use crate::{SESSION_VERSIONS, STATELESS_VERSION, error_text, string_of};

pub(crate) const SESSION_HEADER: &str = "mcp-session-id";
pub(crate) const VERSION_HEADER: &str = "mcp-protocol-version";
pub(crate) const LAST_EVENT_HEADER: &str = "last-event-id";
const METHOD_HEADER: &str = "mcp-method";
const NAME_HEADER: &str = "mcp-name";
pub(crate) const JSON: &str = "application/json";
pub(crate) const EVENT_STREAM: &str = "text/event-stream";
/// The JSON-RPC error of a request whose headers do not match its body.
const HEADER_MISMATCH: i64 = -32020;

/// A request refused: its HTTP status, and a JSON-RPC error answer (as text) that says why.
#[derive(Debug)]
pub(crate) struct Refusal {
    pub(crate) status: StatusCode,
    pub(crate) body: String,
}

impl Refusal {
    /// `status` with a JSON-RPC error (null id) that says why.
    pub(crate) fn new(status: StatusCode, message: &str) -> Self {
        let code = if status == StatusCode::NOT_FOUND {
            -32001
        } else {
            -32000
        };
        Self::error(status, None, code, message)
    }

    /// `status` with the JSON-RPC error `code` for request `id`.
    pub(crate) fn error(
        status: StatusCode,
        id: Option<&RawValue>,
        code: i64,
        message: &str,
    ) -> Self {
        Self {
            status,
            body: error_text(id, code, message),
        }
    }
}

/// The `Mcp-Session-Id` header.
pub(crate) enum SessionId<'h> {
    Missing,
    Unreadable,
    Given(&'h str),
}

pub(crate) fn session_id(headers: &HeaderMap) -> SessionId<'_> {
    match headers.get(SESSION_HEADER).map(|v| v.to_str()) {
        None => SessionId::Missing,
        Some(Ok(id)) => SessionId::Given(id),
        Some(Err(_)) => SessionId::Unreadable,
    }
}

/// A session's `MCP-Protocol-Version`, when given, must be one that has sessions: 400 if not.
pub(crate) fn version_refused(headers: &HeaderMap) -> Option<Refusal> {
    let value = headers.get(VERSION_HEADER)?;
    match value.to_str() {
        Ok(version) if SESSION_VERSIONS.contains(&version) => None,
        Ok(version) => Some(Refusal::new(
            StatusCode::BAD_REQUEST,
            &format!(
                "Bad Request: unsupported MCP-Protocol-Version {version:?} for a session (supported: {})",
                SESSION_VERSIONS.join(", ")
            ),
        )),
        Err(_) => Some(Refusal::new(
            StatusCode::BAD_REQUEST,
            "Bad Request: the MCP-Protocol-Version header is not visible ASCII",
        )),
    }
}

/// Whether the request names a protocol version without sessions (2026-07-28 and later).
pub(crate) fn sessionless_version(headers: &HeaderMap) -> bool {
    headers
        .get(VERSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v >= STATELESS_VERSION)
}

/// What a sessionless request's body says that its headers must match.
pub(crate) struct StatelessMeta<'h> {
    /// `_meta`'s protocol version, when it is a string.
    version: Option<String>,
    /// Whether `_meta` has client capabilities (an object).
    capabilities: bool,
    /// `params.name` (or `params.uri` for `resources/read`), for `Mcp-Name`.
    name: Option<&'h str>,
    uri: Option<&'h str>,
}

impl StatelessMeta<'_> {
    pub(crate) fn malformed(&self) -> bool {
        self.version.is_none() || !self.capabilities
    }
}

/// What a sessionless request's params say of it, from the head read with the message (its
/// `_meta` identity, `name` and `uri`): the params are not read again.
pub(crate) fn stateless_meta(head: &Head) -> StatelessMeta<'_> {
    StatelessMeta {
        version: head.meta.version.as_deref().and_then(string_of),
        capabilities: head
            .meta
            .capabilities
            .as_deref()
            .is_some_and(|c| c.get().starts_with('{')),
        name: head.name.as_deref(),
        uri: head.uri.as_deref(),
    }
}

/// The refusal of a sessionless request whose headers do not agree with its body, as that
/// era's transport has it: an `MCP-Protocol-Version` no revision has (400, unless the body
/// names its own version), `Mcp-Method` and `Mcp-Name` that are missing or differ from the
/// body (400, -32020), a `_meta` without a protocol version where one is required (400,
/// -32602), and a header version that differs from the body's (400, -32020).
pub(crate) fn stateless_refused(
    headers: &HeaderMap,
    method: &str,
    meta: &StatelessMeta,
    id: Option<&RawValue>,
) -> Option<Refusal> {
    let error =
        |code: i64, message: &str| Some(Refusal::error(StatusCode::BAD_REQUEST, id, code, message));
    let version = match headers.get(VERSION_HEADER).map(|v| v.to_str()) {
        Some(Err(_)) => {
            return Some(Refusal::new(
                StatusCode::BAD_REQUEST,
                "Bad Request: Invalid MCP-Protocol-Version header encoding",
            ));
        }
        Some(Ok(version)) => Some(version),
        None => None,
    };
    if let Some(version) = version
        && meta.version.is_none()
        && version != STATELESS_VERSION
        && !SESSION_VERSIONS.contains(&version)
    {
        return Some(Refusal::new(
            StatusCode::BAD_REQUEST,
            &format!("Bad Request: Unsupported MCP-Protocol-Version: {version}"),
        ));
    }
    if version.is_some_and(|v| v >= STATELESS_VERSION)
        && let Some(why) = mirror_mismatch(headers, method, meta)
    {
        return error(HEADER_MISMATCH, &why);
    }
    match (&meta.version, version) {
        (None, header)
            if method == "server/discover" || header.is_some_and(|v| v >= STATELESS_VERSION) =>
        {
            let mut missing = vec!["io.modelcontextprotocol/protocolVersion"];
            if !meta.capabilities {
                missing.push("io.modelcontextprotocol/clientCapabilities");
            }
            error(
                -32602,
                &format!(
                    "Invalid params: request _meta is missing or has malformed required fields: {}",
                    missing.join(", ")
                ),
            )
        }
        (None, _) => None,
        (Some(_), None) => error(
            HEADER_MISMATCH,
            "request _meta protocolVersion requires MCP-Protocol-Version header",
        ),
        (Some(body), Some(header)) if body != header => error(
            HEADER_MISMATCH,
            &format!(
                "MCP-Protocol-Version header ({header}) does not match request _meta protocolVersion ({body})"
            ),
        ),
        (Some(_), Some(_)) => None,
    }
}

/// Why `Mcp-Method` (always) and `Mcp-Name` (for `tools/call`, `prompts/get` and
/// `resources/read`) do not mirror the body: missing, given twice, unreadable or different.
fn mirror_mismatch(headers: &HeaderMap, method: &str, meta: &StatelessMeta) -> Option<String> {
    let single = |name: &str| -> Result<Option<&str>, String> {
        let mut values = headers.get_all(name).iter();
        let Some(value) = values.next() else {
            return Ok(None);
        };
        if values.next().is_some() {
            return Err(format!("duplicate {name} header"));
        }
        value
            .to_str()
            .map(Some)
            .map_err(|_| format!("{name} header contains invalid characters"))
    };
    let mismatch = match single(METHOD_HEADER) {
        Err(why) => Some(why),
        Ok(None) => Some("missing required Mcp-Method header".to_string()),
        Ok(Some(value)) if value != method => Some(format!(
            "Mcp-Method header `{value}` does not match body method `{method}`"
        )),
        Ok(Some(_)) => None,
    };
    let expected = match method {
        "tools/call" | "prompts/get" => meta.name,
        "resources/read" => meta.uri,
        _ => None,
    };
    mismatch.or_else(|| {
        let expected = expected?;
        match single(NAME_HEADER) {
            Err(why) => Some(why),
            Ok(None) => Some(format!("missing required Mcp-Name header for `{method}`")),
            Ok(Some(value)) => {
                let encoded = mcp_supervisor::core::headers::encode_value(&expected.into());
                (value != expected && encoded.as_deref() != Some(value)).then(|| {
                    format!("Mcp-Name header `{value}` does not match body value `{expected}`")
                })
            }
        }
    })
}

/// The HTTP status of a sessionless request's answer: 400 for an unsupported version, a
/// missing client capability, a header mismatch and malformed `_meta`; 404 for a method not
/// found; else 200 (an error of the call itself included).
pub(crate) fn stateless_status(answer: &str, meta_malformed: bool) -> StatusCode {
    match error_code(answer) {
        Some(-32022 | -32021 | HEADER_MISMATCH) => StatusCode::BAD_REQUEST,
        Some(-32602) if meta_malformed => StatusCode::BAD_REQUEST,
        Some(-32601) => StatusCode::NOT_FOUND,
        _ => StatusCode::OK,
    }
}

/// The code of a JSON-RPC error answer; `None` for a result (or an error without a code).
fn error_code(answer: &str) -> Option<i64> {
    #[derive(Deserialize)]
    struct Error {
        code: i64,
    }
    #[derive(Deserialize)]
    struct Answer {
        #[serde(default)]
        error: Option<Error>,
    }
    serde_json::from_str::<Answer>(answer)
        .ok()
        .and_then(|a| a.error)
        .map(|e| e.code)
}

/// Whether a JSON-RPC answer is an error.
pub(crate) fn is_error_answer(text: &str) -> bool {
    #[derive(Deserialize)]
    struct Answer {
        #[serde(default)]
        error: Option<serde::de::IgnoredAny>,
    }
    serde_json::from_str::<Answer>(text).is_ok_and(|a| a.error.is_some())
}

/// Whether an `Accept` header names `media` itself with a weight above zero.
pub(crate) fn accepts(headers: &HeaderMap, media: &str) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|entry| {
            let mut fields = entry.split(';');
            let range = fields.next().unwrap_or_default().trim();
            let zero = fields.any(|f| {
                f.trim()
                    .strip_prefix("q=")
                    .and_then(|q| q.trim().parse::<f32>().ok())
                    .is_some_and(|q| q <= 0.0)
            });
            range.eq_ignore_ascii_case(media) && !zero
        })
}

/// Whether the client lists `text/event-stream` before `application/json` in `Accept` (its
/// preference, when it gives no weights).
pub(crate) fn stream_first(headers: &HeaderMap) -> bool {
    let ranges: Vec<String> = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(|entry| {
            entry
                .split(';')
                .next()
                .unwrap_or_default()
                .trim()
                .to_ascii_lowercase()
        })
        .collect();
    let at = |media: &str| ranges.iter().position(|r| r == media);
    matches!((at(EVENT_STREAM), at(JSON)), (Some(s), Some(j)) if s < j)
}

/// Whether the body is said to be `application/json` (parameters aside).
pub(crate) fn is_json_body(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|value| {
            let essence = value.split_once(';').map_or(value, |(essence, _)| essence);
            essence.trim().eq_ignore_ascii_case(JSON)
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Message;
    use http::{HeaderName, HeaderValue};

    #[test]
    fn accept_must_name_both_media_types() {
        let headers = |accept: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::ACCEPT, accept.parse().unwrap());
            headers
        };
        let both = headers("application/json, text/event-stream");
        assert!(accepts(&both, JSON) && accepts(&both, EVENT_STREAM));
        let weighted = headers("application/json;q=0.9, Text/Event-Stream; q=0.5");
        assert!(accepts(&weighted, JSON) && accepts(&weighted, EVENT_STREAM));
        assert!(!accepts(&headers("*/*"), JSON));
        assert!(!accepts(&headers("application/json;q=0"), JSON));
        assert!(!accepts(&headers("text/event-stream"), JSON));
        assert!(!accepts(&HeaderMap::new(), JSON));
        assert!(stream_first(&headers(
            "text/event-stream, application/json"
        )));
        assert!(!stream_first(&both));
    }

    #[test]
    fn a_session_speaks_only_the_versions_with_sessions() {
        let mut headers = HeaderMap::new();
        assert!(version_refused(&headers).is_none());
        for version in SESSION_VERSIONS {
            headers.insert(VERSION_HEADER, version.parse().unwrap());
            assert!(version_refused(&headers).is_none(), "{version}");
        }
        for version in ["2026-07-28", "1999-01-01", ""] {
            headers.insert(VERSION_HEADER, version.parse().unwrap());
            let refused = version_refused(&headers).map(|r| r.status);
            assert_eq!(refused, Some(StatusCode::BAD_REQUEST), "{version}");
        }
        headers.insert(
            VERSION_HEADER,
            HeaderValue::from_bytes(b"\xff2025").unwrap(),
        );
        assert!(version_refused(&headers).is_some());
        headers.insert(VERSION_HEADER, "2026-07-28".parse().unwrap());
        assert!(sessionless_version(&headers));
        headers.insert(VERSION_HEADER, "2025-11-25".parse().unwrap());
        assert!(!sessionless_version(&headers));
    }

    #[test]
    fn a_sessionless_requests_headers_must_match_its_body() {
        let body = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"add","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#;
        let message = Message::read(body).unwrap();
        let meta = stateless_meta(message.head());
        assert!(!meta.malformed());
        assert_eq!(meta.name, Some("add"));
        let headers = |pairs: &[(&str, &str)]| {
            let mut headers = HeaderMap::new();
            for (name, value) in pairs {
                headers.insert(
                    HeaderName::from_bytes(name.as_bytes()).unwrap(),
                    value.parse().unwrap(),
                );
            }
            headers
        };
        let v = (VERSION_HEADER, "2026-07-28");
        let m = (METHOD_HEADER, "tools/call");
        let n = (NAME_HEADER, "add");
        assert!(stateless_refused(&headers(&[v, m, n]), "tools/call", &meta, None).is_none());
        for bad in [
            vec![v, (METHOD_HEADER, "tools/list"), n],
            vec![v, m],
            vec![v, m, (NAME_HEADER, "other")],
            vec![m, n],
            vec![(VERSION_HEADER, "2025-11-25"), m, n],
        ] {
            let refused = stateless_refused(&headers(&bad), "tools/call", &meta, None);
            assert_eq!(
                refused.map(|r| r.status),
                Some(StatusCode::BAD_REQUEST),
                "{bad:?}"
            );
        }
        let nothing = Head::default();
        let bare = stateless_meta(&nothing);
        assert!(bare.malformed());
        let refused = stateless_refused(
            &headers(&[v, (METHOD_HEADER, "server/discover")]),
            "server/discover",
            &bare,
            None,
        );
        assert_eq!(refused.map(|r| r.status), Some(StatusCode::BAD_REQUEST));
        let error = |code: i64| {
            format!(r#"{{"jsonrpc":"2.0","id":1,"error":{{"code":{code},"message":"m"}}}}"#)
        };
        assert_eq!(
            stateless_status(&error(-32601), false),
            StatusCode::NOT_FOUND
        );
        assert_eq!(
            stateless_status(&error(-32022), false),
            StatusCode::BAD_REQUEST
        );
        assert_eq!(
            stateless_status(&error(-32602), true),
            StatusCode::BAD_REQUEST
        );
        assert_eq!(stateless_status(&error(-32602), false), StatusCode::OK);
        assert_eq!(
            stateless_status(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#, false),
            StatusCode::OK
        );
    }

    #[test]
    fn answers_are_told_apart_and_ids_kept_as_they_came() {
        assert!(is_error_answer(
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":-1,"message":"x"}}"#
        ));
        assert!(!is_error_answer(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#));
        let message = Message::read(r#"{"jsonrpc":"2.0","id":"a\"b","method":"x"}"#).unwrap();
        assert_eq!(message.id().map(RawValue::get), Some(r#""a\"b""#));
    }

    #[test]
    fn a_refusal_says_not_found_with_its_own_code() {
        let refusal = Refusal::new(StatusCode::NOT_FOUND, "gone");
        let answer: serde_json::Value = serde_json::from_str(&refusal.body).unwrap();
        assert_eq!(answer["error"]["code"], -32001);
        let refusal = Refusal::new(StatusCode::BAD_REQUEST, "bad");
        let answer: serde_json::Value = serde_json::from_str(&refusal.body).unwrap();
        assert_eq!(answer["error"]["code"], -32000);
        assert!(answer["id"].is_null());
    }
}
