//! An ordered JSON tree: objects keep their keys in the order written, duplicates included, so the
//! config walker can keep server order and report a repeated key. It only parses text; it never
//! judges what the values mean.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

/// One JSON value, objects as ordered lists of entries.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Json {
    Null,
    Bool(bool),
    Number(Number),
    String(String),
    Array(Vec<Json>),
    Object(Vec<(String, Json)>),
}

/// A JSON number as serde_json read it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Number {
    Unsigned(u64),
    Signed(i64),
    Float(f64),
}

impl fmt::Display for Number {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Number::Unsigned(n) => write!(f, "{n}"),
            Number::Signed(n) => write!(f, "{n}"),
            // Short forms for huge or tiny values: `1e300`, not 301 digits.
            Number::Float(n) if *n != 0.0 && !(1e-6..1e16).contains(&n.abs()) => write!(f, "{n:e}"),
            Number::Float(n) => write!(f, "{n}"),
        }
    }
}

impl Json {
    /// Parses `text`; the error carries serde_json's line and column.
    pub(crate) fn parse(text: &str) -> Result<Json, serde_json::Error> {
        serde_json::from_str(text)
    }

    /// A short name of this value's kind for messages ("a string", "an array", …). Never the value
    /// itself, which may be a secret.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Json::Null => "null",
            Json::Bool(_) => "a boolean",
            Json::Number(_) => "a number",
            Json::String(_) => "a string",
            Json::Array(_) => "an array",
            Json::Object(_) => "an object",
        }
    }
}

impl<'de> Deserialize<'de> for Json {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(JsonVisitor)
    }
}

struct JsonVisitor;

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = Json;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Json, E> {
        Ok(Json::Bool(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Json, E> {
        Ok(Json::Number(Number::Unsigned(v)))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Json, E> {
        Ok(Json::Number(Number::Signed(v)))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Json, E> {
        Ok(Json::Number(Number::Float(v)))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Json, E> {
        Ok(Json::String(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Json, E> {
        Ok(Json::String(v))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Json, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Json::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Json, A::Error> {
        let mut entries = Vec::new();
        while let Some(entry) = map.next_entry::<String, Json>()? {
            entries.push(entry);
        }
        Ok(Json::Object(entries))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_keep_key_order_and_duplicates() {
        let json = Json::parse(r#"{"b": 1, "a": -2, "b": 1.5}"#).unwrap();
        assert_eq!(
            json,
            Json::Object(vec![
                ("b".into(), Json::Number(Number::Unsigned(1))),
                ("a".into(), Json::Number(Number::Signed(-2))),
                ("b".into(), Json::Number(Number::Float(1.5))),
            ])
        );
    }

    #[test]
    fn every_kind_parses() {
        let json = Json::parse(r#"[null, true, "s", [], {}]"#).unwrap();
        assert_eq!(
            json,
            Json::Array(vec![
                Json::Null,
                Json::Bool(true),
                Json::String("s".into()),
                Json::Array(vec![]),
                Json::Object(vec![]),
            ])
        );
    }

    #[test]
    fn errors_carry_line_and_column() {
        let err = Json::parse("{\n  \"a\": ,\n}").unwrap_err();
        assert_eq!((err.line(), err.column()), (2, 8));
    }
}
