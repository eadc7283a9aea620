//! A client's message, its envelope read once ([`Message`]): its kind, id, method and params
//! (kept as JSON text, whole), checked as MCP asks of every message, or the error answer that
//! says what is wrong with it.
//!
//! It reads only the envelope; what a method's params mean is the business of the file that
//! owns that method. It never answers anything but a malformed message.

use std::borrow::Cow;

use mcp_supervisor::link::RpcError;
use mcp_supervisor::upstream::{Envelope, response_text};
use serde::Deserialize;
use serde_json::value::RawValue;

/// What kind of JSON-RPC message a text is, read from its envelope only.
#[derive(Clone, Debug, PartialEq)]
pub enum Kind {
    Request { method: Cow<'static, str> },
    Notification { method: Cow<'static, str> },
    Response,
}

/// The methods a client sends most, kept without a copy of each message's.
pub(crate) const FREQUENT: [&str; 12] = [
    "tools/call",
    "tools/list",
    "notifications/cancelled",
    "notifications/progress",
    "ping",
    "resources/read",
    "resources/list",
    "prompts/get",
    "prompts/list",
    "initialize",
    "notifications/initialized",
    "completion/complete",
];

/// A message's method, as one of [`FREQUENT`] when it is.
pub(crate) fn method_of(method: &str) -> Cow<'static, str> {
    match FREQUENT.iter().find(|m| **m == method) {
        Some(known) => Cow::Borrowed(known),
        None => Cow::Owned(method.to_string()),
    }
}

/// A client's message, its envelope read once: a face reads each message on arrival, and
/// everything after (its checks, the dispatcher) takes the parts from here, so no envelope is
/// parsed twice. The params (and a response's result or error) are kept as JSON text, whole.
#[derive(Debug)]
pub struct Message {
    pub(crate) kind: Kind,
    pub(crate) id: Option<Box<RawValue>>,
    pub(crate) params: Option<Box<RawValue>>,
    pub(crate) result: Option<Box<RawValue>>,
    pub(crate) error: Option<Box<RawValue>>,
}

impl Message {
    /// Read a client's message; `Err`: the error answer (as text) that says what is wrong.
    pub fn read(text: &str) -> Result<Self, String> {
        let envelope = read_envelope(text)?;
        let kind = match (&envelope.method, envelope.id) {
            (Some(method), Some(_)) => Kind::Request {
                method: method_of(method),
            },
            (Some(method), None) => Kind::Notification {
                method: method_of(method),
            },
            (None, Some(_)) if envelope.result.is_some() || envelope.error.is_some() => {
                Kind::Response
            }
            _ => {
                return Err(error_text(
                    None,
                    -32600,
                    "Invalid Request: not a JSON-RPC request, notification or response (check `jsonrpc`, `id`, `method` and `params`; batches are not accepted)",
                ));
            }
        };
        Ok(Self {
            kind,
            id: envelope.id.map(ToOwned::to_owned),
            params: envelope.params.map(ToOwned::to_owned),
            result: envelope.result.map(ToOwned::to_owned),
            error: envelope.error.map(ToOwned::to_owned),
        })
    }

    pub fn kind(&self) -> &Kind {
        &self.kind
    }

    /// The method of a request or a notification.
    pub fn method(&self) -> Option<&str> {
        match &self.kind {
            Kind::Request { method } | Kind::Notification { method } => Some(method),
            _ => None,
        }
    }

    /// The id of a request or a response.
    pub fn id(&self) -> Option<&RawValue> {
        self.id.as_deref()
    }

    pub fn params(&self) -> Option<&RawValue> {
        self.params.as_deref()
    }

    /// Whether it is a request of protocol 2026-07-28 that needs no session: `server/discover`,
    /// or a request (not `initialize`) that names its protocol version in `_meta`.
    pub fn is_sessionless(&self) -> bool {
        match &self.kind {
            Kind::Request { method } if method == "server/discover" => true,
            Kind::Request { method } if method != "initialize" => self
                .params()
                .is_some_and(|p| p.get().contains("io.modelcontextprotocol/protocolVersion")),
            _ => false,
        }
    }
}

/// A message's envelope as the face accepts it, or the error answer (as text) that says what is
/// wrong with it: the library's [`Envelope`], then what a client's message must be besides.
pub(crate) fn read_envelope(text: &str) -> Result<Envelope<'_>, String> {
    let invalid = |why: &str| error_text(None, -32600, &format!("Invalid Request: {why}"));
    let mut envelope = match Envelope::read(text) {
        Ok(envelope) => envelope,
        // What went wrong is worked out only when it did.
        Err(_) if serde_json::from_str::<serde::de::IgnoredAny>(text).is_err() => {
            return Err(error_text(
                None,
                -32700,
                "Parse error: the message is not JSON",
            ));
        }
        Err(_) if !text.trim_start().starts_with('{') => {
            return Err(invalid(
                "a JSON-RPC message is a JSON object (batches are not accepted)",
            ));
        }
        Err(e) => return Err(invalid(&e.to_string())),
    };
    if envelope.jsonrpc.as_deref() != Some("2.0") {
        return Err(invalid("`jsonrpc` must be \"2.0\""));
    }
    if envelope.id.is_some_and(|id| !is_valid_id(id)) {
        return Err(invalid("an `id` is a string or an integer"));
    }
    if envelope.params.is_some_and(|p| p.get() == "null") {
        envelope.params = None;
    }
    if envelope.params.is_some_and(|p| !params_are_valid(p)) {
        return Err(invalid(
            "`params` is an object, and its `_meta`, when present, an object",
        ));
    }
    Ok(envelope)
}

/// Whether `params` has the shape every MCP message's has: an object, whose `_meta` (which the
/// proxy reads, for a progress token) is an object when present. A server could not answer a
/// request with other params (it cannot read them), so it never gets one.
pub(crate) fn params_are_valid(params: &RawValue) -> bool {
    #[derive(Deserialize)]
    struct Params<'a> {
        #[serde(rename = "_meta", borrow, default)]
        meta: Option<&'a RawValue>,
    }
    let text = params.get();
    // `_meta` is read only when there is one (most params have none).
    text.starts_with('{')
        && (!text.contains("\"_meta\"")
            || serde_json::from_str::<Params<'_>>(text).is_ok_and(|p| {
                p.meta
                    .is_none_or(|m| m.get().starts_with('{') || m.get() == "null")
            }))
}

/// Whether a request id is one MCP allows: a string or an integer.
pub(crate) fn is_valid_id(id: &RawValue) -> bool {
    let text = id.get();
    text.starts_with('"')
        || serde_json::from_str::<i64>(text).is_ok()
        || serde_json::from_str::<u64>(text).is_ok()
}

/// A JSON-RPC error answer as text.
pub fn error_text(id: Option<&RawValue>, code: i64, message: &str) -> String {
    let null = RawValue::NULL;
    response_text(id.unwrap_or(null), Err(RpcError::new(code, message)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn kind_of(text: &str) -> Kind {
        Message::read(text).expect("a message").kind
    }

    #[test]
    fn kinds_are_read_from_the_envelope() {
        assert_eq!(
            kind_of(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#),
            Kind::Request {
                method: "tools/list".into()
            }
        );
        assert_eq!(
            kind_of(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#),
            Kind::Notification {
                method: "notifications/initialized".into()
            }
        );
        assert_eq!(
            kind_of(r#"{"jsonrpc":"2.0","id":"a","result":{}}"#),
            Kind::Response
        );
        assert_eq!(
            kind_of(r#"{"jsonrpc":"2.0","id":7,"method":"ping","params":null}"#),
            Kind::Request {
                method: "ping".into()
            }
        );
        assert_eq!(
            kind_of(
                r#"{"jsonrpc":"2.0","id":7,"method":"x","params":{"_meta":{"progressToken":1}}}"#
            ),
            Kind::Request { method: "x".into() }
        );
        for (text, code) in [
            ("nope", -32700),
            ("[1]", -32600),
            (r#"{"id":1}"#, -32600),
            (r#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#, -32600),
            (r#"{"id":1,"method":"ping"}"#, -32600),
            (r#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#, -32600),
            (r#"{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}"#, -32600),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"x","params":5}"#,
                -32600,
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"x","params":[1]}"#,
                -32600,
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"x","params":{"_meta":"m"}}"#,
                -32600,
            ),
        ] {
            let Err(answer) = Message::read(text) else {
                panic!("{text} is not a message");
            };
            let answer: Value = serde_json::from_str(&answer).unwrap();
            assert_eq!(answer["error"]["code"], code, "{text}");
            assert!(answer["id"].is_null());
        }
    }
}
