//! A client's message, read once ([`Message`]): its envelope (kind, id, method, params kept as
//! JSON text, whole) and, in one pass over the params, the members the front routes by
//! ([`Head`]: a tool or prompt `name` and where it lies, a resource `uri`, a `cursor`, a
//! `taskId`, and the 2026-07-28 era's `_meta` identity), checked as MCP asks of every message,
//! or the error answer that says what is wrong with it.
//!
//! What a method's params mean is the business of the file that owns that method; it reads
//! them from the head, never from the text again. It never answers anything but a malformed
//! message.

use std::borrow::Cow;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};

use mcp_supervisor::core::skim;
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

/// A client's message, read once: a face reads each message on arrival, and everything after
/// (its checks, the era's layer, the dispatcher) takes the parts from here, so neither the
/// envelope nor the params are parsed twice. The params (and a response's result or error) are
/// kept as JSON text, whole.
#[derive(Debug)]
pub struct Message {
    pub(crate) kind: Kind,
    pub(crate) id: Option<Box<RawValue>>,
    pub(crate) params: Option<Box<RawValue>>,
    pub(crate) head: Head,
    pub(crate) result: Option<Box<RawValue>>,
    pub(crate) error: Option<Box<RawValue>>,
}

/// The members of a message's params the front routes by, read in the one pass over them
/// ([`Head::read`]). Of two members of one name, the last counts, as for any JSON parser.
#[derive(Clone, Debug, Default)]
pub struct Head {
    /// `name` (a tool's or a prompt's), when it is a string.
    pub name: Option<String>,
    /// Where `name`'s value (the JSON string, quotes included) lies in the params text: a rename
    /// writes the new name there, with no second read of the params.
    pub name_at: Option<Range<usize>>,
    /// `uri` (a resource's), when it is a string.
    pub uri: Option<String>,
    /// Whether the params carry a `cursor` (a page after the first).
    pub cursor: bool,
    /// `taskId`, when it is a string.
    pub task_id: Option<String>,
    /// `requestState` (a 2026-07-28 retry of an input round), when it is a string.
    pub request_state: Option<String>,
    /// `inputResponses` (the client's answers in such a retry), as JSON text.
    pub input_responses: Option<Box<RawValue>>,
    /// What `_meta` says of the client (the 2026-07-28 era's identity), when it is there.
    pub meta: Meta,
}

/// The members of a request's `_meta` the front reads: the 2026-07-28 era's identity.
#[derive(Clone, Debug, Default)]
pub struct Meta {
    /// `io.modelcontextprotocol/protocolVersion`, as JSON text (a string when well-formed).
    pub version: Option<Box<RawValue>>,
    /// `io.modelcontextprotocol/clientCapabilities`, as JSON text (an object when well-formed).
    pub capabilities: Option<Box<RawValue>>,
    /// `io.modelcontextprotocol/clientInfo`, as JSON text.
    pub client_info: Option<Box<RawValue>>,
}

/// How many times the front has read a message's params (one [`Head::read`] each), over the
/// process: a test reads it to show that a message's params are read once on their way in.
pub static PARAMS_READ: AtomicU64 = AtomicU64::new(0);

impl Head {
    /// Read the head of `params` (JSON text, checked well-formed) in one pass; `None` when they
    /// are not an object or their `_meta` is neither an object nor null (a server could not read
    /// such params).
    ///
    /// The quick reader ([`skim::members`]) reads it when it can; what it leaves (a key with an
    /// escape, ...) serde_json reads, and its answer is the answer.
    pub fn read(params: &str) -> Option<Self> {
        PARAMS_READ.fetch_add(1, Ordering::Relaxed);
        match Self::skimmed(params) {
            Some(head) => head,
            None => Self::parsed(params),
        }
    }

    /// The head as serde_json reads it.
    fn parsed(params: &str) -> Option<Self> {
        let mut deserializer = serde_json::Deserializer::from_str(params);
        let head =
            serde::de::DeserializeSeed::deserialize(HeadSeed { text: params }, &mut deserializer)
                .ok()?;
        deserializer.end().ok()?;
        Some(head)
    }

    /// The head as the quick reader reads it: `Some(None)` for params a server could not read,
    /// `None` for what it leaves to serde_json.
    fn skimmed(params: &str) -> Option<Option<Self>> {
        let mut head = Head::default();
        let (mut meta, mut metas) = (None, 0);
        skim::members(params, |key, value| match key {
            "name" => {
                head.name = string(value);
                head.name_at = head.name.as_ref().and_then(|_| span(params, value));
            }
            "uri" => head.uri = string(value),
            "taskId" => head.task_id = string(value),
            "requestState" => head.request_state = string(value),
            "inputResponses" => head.input_responses = Some(skim::boxed(value)),
            "cursor" => head.cursor = value != "null",
            "_meta" => {
                meta = Some(value);
                metas += 1;
            }
            _ => {}
        })?;
        // Two of them: serde_json says which counts (the last, unless one before it is not an
        // object).
        if metas > 1 {
            return None;
        }
        match meta {
            None | Some("null") => {}
            Some(meta) => {
                let mut read = Meta::default();
                let object = skim::members(meta, |key, value| {
                    let slot = match key {
                        META_VERSION => &mut read.version,
                        META_CAPABILITIES => &mut read.capabilities,
                        META_CLIENT_INFO => &mut read.client_info,
                        _ => return,
                    };
                    *slot = Some(skim::boxed(value));
                });
                match object {
                    Some(()) => head.meta = read,
                    // An object this reader leaves (a key with an escape): serde_json's.
                    None if meta.starts_with('{') => return None,
                    // Not an object: a server could not read these params.
                    None => return Some(None),
                }
            }
        }
        Some(Some(head))
    }
}

/// Reads a [`Head`] from the params' text, noting where `name`'s value lies in it.
struct HeadSeed<'t> {
    text: &'t str,
}

impl<'de> serde::de::DeserializeSeed<'de> for HeadSeed<'_> {
    type Value = Head;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Head, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> serde::de::Visitor<'de> for HeadSeed<'_> {
    type Value = Head;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("params as a JSON object")
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Head, A::Error> {
        /// A member read whole as text, to be looked at only if it is one we want.
        type Raw<'a> = &'a RawValue;
        let mut head = Head::default();
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            match key.as_ref() {
                "name" => {
                    let value: Raw<'de> = map.next_value()?;
                    head.name = serde_json::from_str::<String>(value.get()).ok();
                    head.name_at = head
                        .name
                        .as_ref()
                        .and_then(|_| span(self.text, value.get()));
                }
                "uri" => head.uri = string(map.next_value::<Raw<'de>>()?.get()),
                "taskId" => head.task_id = string(map.next_value::<Raw<'de>>()?.get()),
                "requestState" => {
                    head.request_state = string(map.next_value::<Raw<'de>>()?.get());
                }
                "inputResponses" => {
                    head.input_responses = Some(map.next_value::<Raw<'de>>()?.to_owned());
                }
                "cursor" => {
                    let value: Raw<'de> = map.next_value()?;
                    head.cursor = value.get() != "null";
                }
                "_meta" => head.meta = map.next_value::<Option<Meta>>()?.unwrap_or_default(),
                _ => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
        }
        Ok(head)
    }
}

impl<'de> Deserialize<'de> for Meta {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Meta;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("`_meta` as a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Meta, A::Error> {
                let mut meta = Meta::default();
                while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                    let slot = match key.as_ref() {
                        META_VERSION => &mut meta.version,
                        META_CAPABILITIES => &mut meta.capabilities,
                        META_CLIENT_INFO => &mut meta.client_info,
                        _ => {
                            map.next_value::<serde::de::IgnoredAny>()?;
                            continue;
                        }
                    };
                    *slot = Some(map.next_value::<&'de RawValue>()?.to_owned());
                }
                Ok(meta)
            }
        }
        d.deserialize_map(Visit)
    }
}

/// `_meta`'s member that names the 2026-07-28 era's protocol version.
pub(crate) const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// `_meta`'s member that holds a 2026-07-28 client's capabilities.
pub(crate) const META_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// `_meta`'s member that holds a 2026-07-28 client's info.
pub(crate) const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";

/// A JSON string's value, if the text is one.
fn string(text: &str) -> Option<String> {
    serde_json::from_str(text).ok()
}

/// Where `part` (a slice of `whole`) lies in `whole`.
fn span(whole: &str, part: &str) -> Option<Range<usize>> {
    let start = (part.as_ptr() as usize).checked_sub(whole.as_ptr() as usize)?;
    let end = start + part.len();
    (end <= whole.len() && whole.get(start..end) == Some(part)).then_some(start..end)
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
        let head = match envelope.params {
            Some(params) => Head::read(params.get()).ok_or_else(|| {
                error_text(
                    None,
                    -32600,
                    "Invalid Request: `params` is an object, and its `_meta`, when present, an object",
                )
            })?,
            None => Head::default(),
        };
        Ok(Self {
            kind,
            id: envelope.id.map(ToOwned::to_owned),
            params: envelope.params.map(ToOwned::to_owned),
            head,
            result: envelope.result.map(ToOwned::to_owned),
            error: envelope.error.map(ToOwned::to_owned),
        })
    }

    pub fn kind(&self) -> &Kind {
        &self.kind
    }

    /// The id of a request or a response.
    pub fn id(&self) -> Option<&RawValue> {
        self.id.as_deref()
    }

    pub fn params(&self) -> Option<&RawValue> {
        self.params.as_deref()
    }

    /// The members of its params the front routes by, read with the message.
    pub fn head(&self) -> &Head {
        &self.head
    }

    /// Whether it is a request of protocol 2026-07-28 that needs no session: `server/discover`,
    /// or a request (not `initialize`) that names its protocol version in `_meta`.
    pub fn is_sessionless(&self) -> bool {
        match &self.kind {
            Kind::Request { method } if method == "server/discover" => true,
            Kind::Request { method } if method != "initialize" => self.head.meta.version.is_some(),
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
    if envelope.id.is_some_and(|id| !is_valid_id(id.get())) {
        return Err(invalid("an `id` is a string or an integer"));
    }
    if envelope.params.is_some_and(|p| p.get() == "null") {
        envelope.params = None;
    }
    Ok(envelope)
}

/// Whether a request id is one MCP allows: a string or an integer.
pub(crate) fn is_valid_id(text: &str) -> bool {
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

    /// The quick reader reads a head as serde_json does, and leaves to it what it must (a key
    /// with an escape, `_meta` twice).
    #[test]
    fn the_quick_reader_and_serde_json_read_a_head_alike() {
        let quick = [
            r#"{"name":"echo","arguments":{"message":"x\"y"}}"#,
            r#"{"name":"a\u00e9","uri":"file:///x","cursor":null,"taskId":"t","_meta":{"progressToken":1}}"#,
            r#"{"name":7,"cursor":"c","requestState":"s","inputResponses":{"a":[1]},"_meta":null}"#,
            r#"{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"c"}}}"#,
            r#"{"_meta":7}"#,
            r#"{"_meta":[]}"#,
            r#"{}"#,
        ];
        for params in quick {
            let skimmed = Head::skimmed(params).expect(params);
            assert_eq!(
                format!("{skimmed:?}"),
                format!("{:?}", Head::parsed(params)),
                "{params}"
            );
        }
        for params in [
            r#"{"na\u006de":"x"}"#,
            r#"{"_meta":{"a":1},"_meta":7}"#,
            r#"{"_meta":{"io.modelcontextprotocol\/protocolVersion":"v"}}"#,
            "[1]",
        ] {
            assert!(Head::skimmed(params).is_none(), "{params}");
            assert_eq!(
                format!("{:?}", Head::read(params)),
                format!("{:?}", Head::parsed(params)),
                "{params}"
            );
        }
    }

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
