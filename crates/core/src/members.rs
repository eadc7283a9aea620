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

/// Member `key` of a JSON object (the last of that name, as a parser reads it), as text; `None`
/// when `object` is not an object or has no such member.
pub fn member<'a>(object: &'a RawValue, key: &str) -> Option<&'a RawValue> {
    let members: Members<'a> = serde_json::from_str(object.get()).ok()?;
    get(&members.0, key)
}

/// The member at `path` (keys, the outermost first) of nested objects.
pub fn member_at<'a>(object: &'a RawValue, path: &[&str]) -> Option<&'a RawValue> {
    path.iter()
        .try_fold(object, |inner, key| member(inner, key))
}

/// `object` with member `key` set to `value`: in its place when it is there, else added last.
/// Every other member is kept whole, as text, in its order. `None` when `object` is not an
/// object.
pub fn with_member(object: &RawValue, key: &str, value: &RawValue) -> Option<Box<RawValue>> {
    let mut members: Members<'_> = serde_json::from_str(object.get()).ok()?;
    match members.0.iter_mut().rev().find(|(k, _)| k == key) {
        Some(member) => member.1 = value,
        None => members.0.push((key.into(), value)),
    }
    write(&members.0)
}

/// `object` with the member at `path` (keys, the outermost first) set to `value`, as
/// [`with_member`] at each level. `None` when a level on the way is missing or not an object.
pub fn with_member_at(object: &RawValue, path: &[&str], value: &RawValue) -> Option<Box<RawValue>> {
    match path {
        [] => None,
        [key] => with_member(object, key, value),
        [key, rest @ ..] => {
            let inner = with_member_at(member(object, key)?, rest, value)?;
            with_member(object, key, &inner)
        }
    }
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

    fn raw(text: &str) -> Box<RawValue> {
        RawValue::from_string(text.to_string()).unwrap()
    }

    #[test]
    fn one_member_is_set_at_any_depth_and_every_other_stays_as_it_came() {
        let object = raw(r#"{"z":1,"ref":{"type":"ref/prompt","name":"a"},"n":2.50}"#);
        assert_eq!(
            member_at(&object, &["ref", "name"]).map(RawValue::get),
            Some(r#""a""#)
        );
        assert!(member_at(&object, &["ref", "none"]).is_none());
        assert!(member_at(&object, &["n", "x"]).is_none());
        let out = with_member_at(&object, &["ref", "name"], &raw(r#""b""#)).unwrap();
        assert_eq!(
            out.get(),
            r#"{"z":1,"ref":{"type":"ref/prompt","name":"b"},"n":2.50}"#
        );
        let added = with_member(&object, "k", &raw("[1, 2]")).unwrap();
        assert_eq!(
            added.get(),
            r#"{"z":1,"ref":{"type":"ref/prompt","name":"a"},"n":2.50,"k":[1, 2]}"#
        );
        assert!(with_member_at(&object, &["missing", "name"], &raw("1")).is_none());
        assert!(with_member_at(&object, &[], &raw("1")).is_none());
        assert!(with_member(&raw("[1]"), "k", &raw("1")).is_none());
    }
}
