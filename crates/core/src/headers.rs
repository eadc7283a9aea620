//! The HTTP headers a client mirrors from a request (MCP 2026-07-28, SEP-2243): `Mcp-Method` and
//! `Mcp-Name` for every request, and an `Mcp-Param-{Name}` header for each tool argument whose
//! schema property declares `"x-mcp-header": "Name"`.
//!
//! It owns the rules: which declarations are valid (a tool with an invalid one is not offered
//! at all), and how a value is written into a header (plain when it is safe visible ASCII,
//! else `=?base64?...?=`). Plain values and functions: it never sends anything and never decides
//! what a rejected tool means for a caller.

use base64::Engine;
use serde_json::Value;

/// The schema keyword that designates an argument as a header.
pub const DECLARATION: &str = "x-mcp-header";
/// The prefix of a mirrored argument's header name.
pub const PARAM_PREFIX: &str = "Mcp-Param-";

/// One argument mirrored into a header: `argument` of the call's `arguments`, sent as
/// `Mcp-Param-{header}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamHeader {
    pub argument: String,
    pub header: String,
}

/// The arguments a tool mirrors into headers, read from its `inputSchema`. `Err` names the
/// first invalid declaration: such a tool must not be offered (SEP-2243). A schema with no
/// declaration gives an empty list.
pub fn param_headers(input_schema: &Value) -> Result<Vec<ParamHeader>, String> {
    let Some(properties) = input_schema.get("properties").and_then(Value::as_object) else {
        return Ok(Vec::new());
    };
    let mut found: Vec<ParamHeader> = Vec::new();
    for (argument, property) in properties {
        let Some(declared) = property.get(DECLARATION) else {
            continue;
        };
        let Some(header) = declared.as_str() else {
            return Err(format!(
                "argument `{argument}`: `{DECLARATION}` must be a string, not {declared}"
            ));
        };
        check_name(header).map_err(|why| format!("argument `{argument}`: {why}"))?;
        if !is_primitive(property) {
            return Err(format!(
                "argument `{argument}`: only string, integer and boolean arguments can be headers"
            ));
        }
        if let Some(other) = found.iter().find(|p| p.header.eq_ignore_ascii_case(header)) {
            return Err(format!(
                "arguments `{}` and `{argument}` both declare header `{header}` \
                 (header names are case-insensitive)",
                other.argument
            ));
        }
        found.push(ParamHeader {
            argument: argument.clone(),
            header: header.to_string(),
        });
    }
    Ok(found)
}

/// A header name part: non-empty, and only HTTP token characters (RFC 9110 `tchar`).
fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err(format!("`{DECLARATION}` is empty"));
    }
    match name.chars().find(|c| !is_tchar(*c)) {
        Some(bad) => Err(format!(
            "`{DECLARATION}` `{}` has {bad:?}, which a header name cannot hold",
            name.escape_default()
        )),
        None => Ok(()),
    }
}

fn is_tchar(c: char) -> bool {
    c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c)
}

/// Whether a schema property is a string, integer or boolean (`type` a name or a list of them,
/// `null` allowed beside one of those).
fn is_primitive(property: &Value) -> bool {
    let allowed = |t: &str| matches!(t, "string" | "integer" | "boolean");
    match property.get("type") {
        Some(Value::String(t)) => allowed(t),
        Some(Value::Array(types)) => {
            let names: Vec<&str> = types.iter().filter_map(Value::as_str).collect();
            names.len() == types.len()
                && names.iter().any(|t| allowed(t))
                && names.iter().all(|t| allowed(t) || *t == "null")
        }
        _ => false,
    }
}

/// A value as a header value: strings plain when every character is visible ASCII or an inner
/// space, else `=?base64?{utf-8 bytes}?=`; integers and booleans as JSON writes them. `None`
/// for `null` (the header is left out) and for anything that is no header value.
pub fn encode_value(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(encode_text(s)),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        Value::Null | Value::Array(_) | Value::Object(_) => None,
    }
}

fn encode_text(s: &str) -> String {
    let plain = s.bytes().all(|b| (0x20..=0x7e).contains(&b)) && s.trim() == s;
    if plain {
        s.to_string()
    } else {
        format!(
            "=?base64?{}?=",
            base64::engine::general_purpose::STANDARD.encode(s.as_bytes())
        )
    }
}

/// The `Mcp-Param-*` headers of one call: each declared argument present in `arguments` and not
/// `null`, as (header name, value).
pub fn mirror(declared: &[ParamHeader], arguments: &Value) -> Vec<(String, String)> {
    declared
        .iter()
        .filter_map(|p| {
            let value = encode_value(arguments.get(&p.argument)?)?;
            Some((format!("{PARAM_PREFIX}{}", p.header), value))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema(properties: Value) -> Value {
        json!({ "type": "object", "properties": properties })
    }

    #[test]
    fn declarations_are_read_in_schema_order() {
        let s = schema(json!({
            "region": { "type": "string", "x-mcp-header": "Region" },
            "query": { "type": "string" },
            "priority": { "type": "integer", "x-mcp-header": "Priority" },
            "verbose": { "type": ["boolean", "null"], "x-mcp-header": "Verbose" },
        }));
        let found = param_headers(&s).unwrap();
        let names: Vec<_> = found.iter().map(|p| p.header.as_str()).collect();
        assert_eq!(names.len(), 3);
        for expected in ["Region", "Priority", "Verbose"] {
            assert!(names.contains(&expected), "{names:?}");
        }
    }

    #[test]
    fn a_schema_without_properties_declares_nothing() {
        assert_eq!(param_headers(&json!({"type": "object"})).unwrap(), vec![]);
        assert_eq!(param_headers(&json!(true)).unwrap(), vec![]);
    }

    #[test]
    fn each_invalid_declaration_is_rejected_with_its_reason() {
        let cases = [
            (
                json!({"v": {"type": "string", "x-mcp-header": ""}}),
                "empty",
            ),
            (
                json!({"v": {"type": "object", "x-mcp-header": "D"}}),
                "only string",
            ),
            (
                json!({"v": {"type": "array", "x-mcp-header": "D"}}),
                "only string",
            ),
            (
                json!({"v": {"type": "null", "x-mcp-header": "D"}}),
                "only string",
            ),
            (
                json!({"v": {"type": "number", "x-mcp-header": "D"}}),
                "only string",
            ),
            (json!({"v": {"x-mcp-header": "D"}}), "only string"),
            (
                json!({"v": {"type": "string", "x-mcp-header": 3}}),
                "must be a string",
            ),
            (
                json!({"v": {"type": "string", "x-mcp-header": "My Region"}}),
                "cannot hold",
            ),
            (
                json!({"v": {"type": "string", "x-mcp-header": "A:B"}}),
                "cannot hold",
            ),
            (
                json!({"v": {"type": "string", "x-mcp-header": "Région"}}),
                "cannot hold",
            ),
            (
                json!({"v": {"type": "string", "x-mcp-header": "A\tB"}}),
                "cannot hold",
            ),
            (
                json!({"a": {"type": "string", "x-mcp-header": "Region"},
                       "b": {"type": "string", "x-mcp-header": "Region"}}),
                "both declare",
            ),
            (
                json!({"a": {"type": "string", "x-mcp-header": "MyField"},
                       "b": {"type": "string", "x-mcp-header": "myfield"}}),
                "both declare",
            ),
        ];
        for (properties, why) in cases {
            let err = param_headers(&schema(properties.clone())).unwrap_err();
            assert!(err.contains(why), "{properties}: {err}");
        }
    }

    #[test]
    fn values_are_plain_when_safe_and_base64_otherwise() {
        let cases = [
            (json!("us-west1"), Some("us-west1")),
            (json!("us west 1"), Some("us west 1")),
            (json!(""), Some("")),
            (json!(42), Some("42")),
            (json!(false), Some("false")),
            (json!(true), Some("true")),
            (json!(" padded "), Some("=?base64?IHBhZGRlZCA=?=")),
            (json!(" us-west1"), Some("=?base64?IHVzLXdlc3Qx?=")),
            (json!("us-west1 "), Some("=?base64?dXMtd2VzdDEg?=")),
            (json!("\tindented"), Some("=?base64?CWluZGVudGVk?=")),
            (json!("line1\nline2"), Some("=?base64?bGluZTEKbGluZTI=?=")),
            (
                json!("Hello, 世界"),
                Some("=?base64?SGVsbG8sIOS4lueVjA==?="),
            ),
            (json!(null), None),
            (json!([1]), None),
            (json!({"a": 1}), None),
        ];
        for (value, expected) in cases {
            assert_eq!(encode_value(&value).as_deref(), expected, "{value}");
        }
    }

    #[test]
    fn only_declared_present_non_null_arguments_are_mirrored() {
        let declared = param_headers(&schema(json!({
            "region": { "type": "string", "x-mcp-header": "Region" },
            "verbose": { "type": "boolean", "x-mcp-header": "Verbose" },
            "method": { "type": "string", "x-mcp-header": "Method" },
            "query": { "type": "string" },
        })))
        .unwrap();
        let mut got = mirror(
            &declared,
            &json!({"region": "eu", "verbose": null, "method": "m", "query": "q"}),
        );
        got.sort();
        assert_eq!(
            got,
            vec![
                ("Mcp-Param-Method".to_string(), "m".to_string()),
                ("Mcp-Param-Region".to_string(), "eu".to_string()),
            ]
        );
        assert!(mirror(&declared, &json!(null)).is_empty());
    }
}
