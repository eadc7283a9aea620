//! A JSON object as its members in order, each value kept as JSON text: how the proxy reads an
//! object it must change one member of and writes it back with every other member whole, in the
//! order it came (serde_json's own map sorts its keys). No I/O.

use std::borrow::Cow;
use std::fmt;

use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

/// An object's members in order, their values as JSON text.
pub struct Members<'a>(pub Vec<(Cow<'a, str>, &'a RawValue)>);

impl<'de> serde::Deserialize<'de> for Members<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Members<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut members = Vec::new();
                while let Some(entry) = map.next_entry::<Cow<'de, str>, &'de RawValue>()? {
                    members.push(entry);
                }
                Ok(Members(members))
            }
        }
        d.deserialize_map(V)
    }
}

/// The last value of `key` (what a JSON parser reads).
pub fn get<'a>(members: &[(Cow<'_, str>, &'a RawValue)], key: &str) -> Option<&'a RawValue> {
    members
        .iter()
        .rev()
        .find(|(k, _)| k == key)
        .map(|(_, v)| *v)
}

/// The members as a JSON object's text, in order.
pub fn write_text(members: &[(Cow<'_, str>, &RawValue)]) -> Option<String> {
    let mut out = String::with_capacity(
        members
            .iter()
            .map(|(k, v)| k.len() + v.get().len() + 4)
            .sum::<usize>()
            + 2,
    );
    out.push('{');
    for (i, (key, value)) in members.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&serde_json::to_string(key).ok()?);
        out.push(':');
        out.push_str(value.get());
    }
    out.push('}');
    Some(out)
}

/// The members as a JSON object, in order.
pub fn write(members: &[(Cow<'_, str>, &RawValue)]) -> Option<Box<RawValue>> {
    RawValue::from_string(write_text(members)?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_come_back_in_order_with_their_text_whole() {
        let text = r#"{"z":1,"a":{"b" : [1, 2]},"a":"again","é":null}"#;
        let members: Members<'_> = serde_json::from_str(text).unwrap();
        let keys: Vec<&str> = members.0.iter().map(|(k, _)| k.as_ref()).collect();
        assert_eq!(keys, ["z", "a", "a", "é"]);
        assert_eq!(get(&members.0, "a").map(RawValue::get), Some("\"again\""));
        assert_eq!(
            write_text(&members.0).unwrap(),
            r#"{"z":1,"a":{"b" : [1, 2]},"a":"again","é":null}"#
        );
        assert!(serde_json::from_str::<Members<'_>>("[1]").is_err());
    }
}
