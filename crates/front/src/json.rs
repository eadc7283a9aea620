//! Small readers and writers of JSON text that the front's files share: a member of an
//! object read without parsing the rest, a list answer written from items' text, an error
//! result's flag, and the lock helper every file uses.
//!
//! Plain functions over text: no I/O, no runtime, no knowledge of MCP methods.

use std::borrow::Cow;
use std::sync::Mutex;

use mcp_supervisor::link::RpcError;
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

/// A JSON string's value, if the text is one.
pub fn string_of(raw: &RawValue) -> Option<String> {
    serde_json::from_str::<String>(raw.get()).ok()
}

pub(crate) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Every write is a whole insert, remove or swap: a poisoned lock holds consistent data.
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

pub(crate) fn raw_json(text: &str) -> Box<RawValue> {
    RawValue::from_string(text.to_string()).unwrap_or_else(|_| mcp_supervisor::link::empty_object())
}

/// `{"<field>":[items]}`, each item's text as it is.
pub(crate) fn list_answer<'a>(
    field: &str,
    items: impl Iterator<Item = &'a RawValue>,
) -> Box<RawValue> {
    let mut text = format!("{{{}:[", Value::String(field.to_string()));
    for (i, item) in items.enumerate() {
        if i > 0 {
            text.push(',');
        }
        text.push_str(item.get());
    }
    text.push_str("]}");
    raw_json(&text)
}

pub(crate) fn to_raw(value: &Value) -> Result<Box<RawValue>, RpcError> {
    serde_json::value::to_raw_value(value).map_err(|e| RpcError::new(-32603, e.to_string()))
}

/// A string member of a JSON object. A JSON parser takes the last of two members of one name
/// (a server's does too), so the whole object is read, unless `name` is its first member and can
/// be there only once: its quoted name appears once in the text, and no escape could spell it
/// another way. Then only that member is read (a tool call's `name` comes before its arguments,
/// which are most of the text).
pub(crate) fn member_str(object: &RawValue, name: &str) -> Option<String> {
    member_text(object, name).map(Cow::into_owned)
}

/// [`member_str`], borrowed from the object's text when it has no escape to undo.
pub(crate) fn member_text<'t>(object: &'t RawValue, name: &str) -> Option<Cow<'t, str>> {
    let text = object.get();
    if let Some(value) = first_member(text, name)
        && only_once(text, name)
    {
        #[derive(Deserialize)]
        struct Text<'a>(#[serde(borrow)] Cow<'a, str>);
        let mut deserializer = serde_json::Deserializer::from_str(value);
        return Option::<Text<'t>>::deserialize(&mut deserializer)
            .ok()
            .flatten()
            .map(|t| t.0);
    }
    struct Member<'n>(&'n str, Option<String>);
    impl<'de> serde::de::DeserializeSeed<'de> for Member<'_> {
        type Value = Option<String>;
        fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_map(self)
        }
    }
    impl<'de> serde::de::Visitor<'de> for Member<'_> {
        type Value = Option<String>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(
            mut self,
            mut map: A,
        ) -> Result<Self::Value, A::Error> {
            while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                if key == self.0 {
                    self.1 = map.next_value::<Option<String>>()?;
                } else {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
            Ok(self.1)
        }
    }
    let mut deserializer = serde_json::Deserializer::from_str(text);
    serde::de::DeserializeSeed::deserialize(Member(name, None), &mut deserializer)
        .ok()
        .flatten()
        .map(Cow::Owned)
}

/// The text from the value on, when `name` (plain text, no escapes) is the object's first
/// member, as written without escapes.
pub(crate) fn first_member<'t>(object: &'t str, name: &str) -> Option<&'t str> {
    const SPACE: [char; 4] = [' ', '\t', '\n', '\r'];
    let rest = object.trim_start_matches(SPACE).strip_prefix('{')?;
    let rest = rest.trim_start_matches(SPACE).strip_prefix('"')?;
    let rest = rest.strip_prefix(name)?.strip_prefix('"')?;
    rest.trim_start_matches(SPACE).strip_prefix(':')
}

/// Whether no member but one can be named `name` in `object`: no escape in the text, and
/// `"name"` in it once.
pub(crate) fn only_once(object: &str, name: &str) -> bool {
    let bytes = object.as_bytes();
    memchr::memchr(b'\\', bytes).is_none()
        && memchr::memmem::find_iter(bytes, name.as_bytes())
            .filter(|&at| {
                at > 0 && bytes[at - 1] == b'"' && bytes.get(at + name.len()) == Some(&b'"')
            })
            .nth(1)
            .is_none()
}

pub(crate) fn read_error(error: &RawValue) -> RpcError {
    RpcError::from_json(error).unwrap_or_else(|| {
        RpcError::new(-32603, "the client's error answer is not a JSON-RPC error")
    })
}

/// The word a tool result that says it is an error holds.
static IS_ERROR: mcp_supervisor::core::skim::Word =
    mcp_supervisor::core::skim::Word::new("isError");

/// Whether a tool result says `isError: true`.
pub(crate) fn is_error(result: &RawValue) -> bool {
    // Most results are no error and say nothing of it: no pass over them.
    if !IS_ERROR.in_text(result.get()) {
        return false;
    }
    #[derive(Deserialize)]
    struct Flag {
        #[serde(rename = "isError", default)]
        is_error: Option<bool>,
    }
    serde_json::from_str::<Flag>(result.get())
        .ok()
        .and_then(|f| f.is_error)
        .unwrap_or(false)
}

/// A request's params that must be there and be an object, or the error that says so.
pub(crate) fn object_params<'a>(
    method: &str,
    params: Option<&'a RawValue>,
) -> Result<&'a RawValue, RpcError> {
    let params = params.ok_or_else(|| RpcError::new(-32602, format!("{method} needs params")))?;
    if !params.get().starts_with('{') {
        return Err(RpcError::new(
            -32602,
            format!("Invalid params: {method} needs an object"),
        ));
    }
    Ok(params)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A member is what a JSON parser reads: of two of one name, the last, however the second
    /// is spelled; reading stops early only where no second one can be.
    #[test]
    fn a_member_is_the_one_a_parser_reads() {
        let long = format!(
            r#"{{"name":"echo","arguments":{{"text":"{}"}}}}"#,
            "x".repeat(4096)
        );
        let cases: [(&str, Option<&str>); 15] = [
            (r#"{"name":"echo","arguments":{}}"#, Some("echo")),
            (&long, Some("echo")),
            (
                r#"{"arguments":{"name":"inner"},"name":"echo"}"#,
                Some("echo"),
            ),
            (r#"{"name":"a","arguments":{},"name":"b"}"#, Some("b")),
            (r#"{"name":"a","n\u0061me":"b"}"#, Some("b")),
            (r#"{"name":"a","arguments":{"t":"\"name\""}}"#, Some("a")),
            (" {\n \"name\" :\t\"echo\" ,\"arguments\":{}}", Some("echo")),
            (r#"{"name":"a","arguments":{"t":"name"}}"#, Some("a")),
            (r#"{"name":"a","arguments":{"name":"b"}}"#, Some("a")),
            (r#"{"names":"a","name":"b"}"#, Some("b")),
            (r#"{"arguments":{}}"#, None),
            (r#"{"name":7}"#, None),
            (r#"{"name":null,"arguments":{}}"#, None),
            (r#"["name"]"#, None),
            (r#"{"name":"\u00e9t\u00e9"}"#, Some("été")),
        ];
        for (text, name) in cases {
            assert_eq!(
                member_str(&raw_json(text), "name").as_deref(),
                name,
                "{text}"
            );
        }
    }
}
