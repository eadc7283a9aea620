//! The JSON hosts (Claude Desktop, Cursor, Claude Code, VS Code, Zed, Gemini CLI): reads JSON with comments
//! and trailing commas, finds each server entry's place in the text, and splices only the entries
//! it changes. It must never rewrite text outside a changed entry, so every other key, comment and
//! blank line of the file stays byte for byte.
//!
//! Inside a changed entry each value it does not change is copied as written (comments inside it
//! included); comments between the entry's own keys are not kept, and adopt says so.

use std::collections::BTreeMap;
use std::ops::Range;

use serde_json::value::RawValue;

use super::entry::{EntryMap, Keys, NewValue};
use super::{Line, Op, Plan};

/// Where a JSON host keeps its servers.
#[derive(Clone, Copy, Debug)]
pub struct Layout {
    /// The top-level key of the server map: `mcpServers`, `servers`, `context_servers`.
    pub servers: &'static str,
    /// Also `projects.<path>.mcpServers` (Claude Code's `~/.claude.json`).
    pub projects: bool,
    /// Zed's older form: `command` is an object holding `path`, `args` and `env`.
    pub nested_command: bool,
    /// Gemini CLI's URLs: `httpUrl` (or `url` with `"type": "http"`) for streamable HTTP, `url`
    /// for SSE.
    pub gemini_urls: bool,
}

const KEYS: Keys = Keys {
    command: "command",
    headers: "headers",
    env_headers: &[],
    http_url: "url",
    url_is_sse: false,
};

/// Adopt (or undo) every wanted server of a JSON host's file.
pub fn plan(text: &str, layout: Layout, op: &Op) -> Result<Plan, String> {
    let clean = strip_comments(text);
    if let Err(error) = serde_json::from_str::<serde_json::Value>(&clean) {
        return Err(format!(
            "it is not valid JSON: {} at line {}, column {}",
            strip_position(&error.to_string()),
            error.line(),
            error.column()
        ));
    }
    let unit = indent_unit(text);
    let root = members(&clean, 0..clean.len())
        .map_err(|found| format!("its top level is {found}, not an object"))?;
    let mut maps = Vec::new();
    if let Some((_, span)) = root.iter().find(|(key, _)| key == layout.servers) {
        maps.push((layout.servers.to_owned(), span.clone()));
    }
    if layout.projects
        && let Some((_, projects)) = root.iter().find(|(key, _)| key == "projects")
        && let Ok(projects) = members(&clean, projects.clone())
    {
        for (path, project) in projects {
            if let Ok(project) = members(&clean, project)
                && let Some((_, span)) = project.iter().find(|(key, _)| key == "mcpServers")
            {
                maps.push((format!("projects[{path:?}].mcpServers"), span.clone()));
            }
        }
    }
    let mut lines = Vec::new();
    let mut edits: Vec<(Range<usize>, String)> = Vec::new();
    for (where_, span) in maps {
        let Ok(servers) = members(&clean, span) else {
            continue;
        };
        for (name, span) in servers {
            if !op.wants(&name) {
                continue;
            }
            let label = format!("{where_}.{name}");
            let mut target = span.clone();
            let mut keys = KEYS;
            if layout.gemini_urls {
                keys.http_url = "httpUrl";
                keys.url_is_sse = true;
            }
            if layout.nested_command
                && let Ok(entry) = members(&clean, span.clone())
                && let Some((_, command)) = entry.iter().find(|(key, _)| key == "command")
                && clean[command.clone()].starts_with('{')
            {
                target = command.clone();
                keys.command = "path";
            }
            let Some(mut entry) = JsonEntry::read(text, &clean, target.clone()) else {
                lines.push(Line::skipped(
                    label,
                    name,
                    "its entry is not an object".into(),
                ));
                continue;
            };
            let outcome = op.apply(&mut entry, &keys);
            let mut note = None;
            if entry.changed {
                if entry.loses_comments(text, &clean, &target) {
                    note = Some("comments between this entry's keys are not kept".to_owned());
                }
                let indent = line_indent(text, target.start);
                edits.push((target, entry.render(&indent, &unit)));
            }
            lines.push(Line {
                label,
                name,
                outcome,
                note,
            });
        }
    }
    edits.sort_by_key(|(range, _)| std::cmp::Reverse(range.start));
    let mut out = text.to_owned();
    for (range, replacement) in edits {
        out.replace_range(range, &replacement);
    }
    // Never hand on a text that would not parse: that would be a bug here, not the user's.
    if let Err(error) = serde_json::from_str::<serde_json::Value>(&strip_comments(&out)) {
        return Err(format!(
            "adopt made invalid JSON of it ({error}), a bug: please report it with the file"
        ));
    }
    Ok(Plan { text: out, lines })
}

/// serde_json's message without its trailing " at line L column C" (said separately).
fn strip_position(message: &str) -> &str {
    message
        .rfind(" at line ")
        .map_or(message, |at| &message[..at])
}

/// The same text with comments and trailing commas blanked out (newlines kept), so that offsets,
/// lines and columns in it are those of the original.
pub fn strip_comments(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = bytes.to_vec();
    let blank = |out: &mut Vec<u8>, range: Range<usize>| {
        for i in range {
            if out[i] != b'\n' && out[i] != b'\r' {
                out[i] = b' ';
            }
        }
    };
    let mut i = 0;
    let mut last_comma: Option<usize> = None;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                last_comma = None;
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                let end = bytes[i..]
                    .iter()
                    .position(|&b| b == b'\n')
                    .map_or(bytes.len(), |n| i + n);
                blank(&mut out, i..end);
                i = end;
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                let end = bytes[i + 2..]
                    .windows(2)
                    .position(|w| w == b"*/")
                    .map_or(bytes.len(), |n| i + 2 + n + 2);
                blank(&mut out, i..end);
                i = end;
            }
            b',' => {
                last_comma = Some(i);
                i += 1;
            }
            b'}' | b']' => {
                if let Some(comma) = last_comma.take() {
                    out[comma] = b' ';
                }
                i += 1;
            }
            b if b.is_ascii_whitespace() => i += 1,
            _ => {
                last_comma = None;
                i += 1;
            }
        }
    }
    // Only ASCII bytes were replaced by ASCII spaces, so the text is still UTF-8.
    String::from_utf8(out).unwrap_or_else(|_| text.to_owned())
}

/// The members of the object at `span` of `clean`, in text order, each with its value's span.
/// `Err` names what the value is when it is not an object.
fn members(clean: &str, span: Range<usize>) -> Result<Vec<(String, Range<usize>)>, &'static str> {
    let slice = &clean[span.clone()];
    let map: BTreeMap<String, &RawValue> = match serde_json::from_str(slice) {
        Ok(map) => map,
        Err(_) => return Err(type_name(slice.trim_start())),
    };
    let base = clean.as_ptr() as usize;
    let mut out: Vec<(String, Range<usize>)> = map
        .into_iter()
        .map(|(key, raw)| {
            let start = raw.get().as_ptr() as usize - base;
            (key, start..start + raw.get().len())
        })
        .collect();
    out.sort_by_key(|(_, range)| range.start);
    Ok(out)
}

fn type_name(value: &str) -> &'static str {
    match value.as_bytes().first() {
        Some(b'{') => "an object",
        Some(b'[') => "an array",
        Some(b'"') => "a string",
        Some(b't' | b'f') => "a boolean",
        Some(b'n') => "null",
        _ => "a number",
    }
}

/// The leading white space of the line holding `at`.
fn line_indent(text: &str, at: usize) -> String {
    let start = text[..at].rfind('\n').map_or(0, |n| n + 1);
    text[start..at]
        .chars()
        .take_while(|c| *c == ' ' || *c == '\t')
        .collect()
}

/// The file's indentation step: the white space of its first indented key, two spaces by default.
fn indent_unit(text: &str) -> String {
    text.lines()
        .find_map(|line| {
            let rest = line.trim_start_matches([' ', '\t']);
            (rest.starts_with('"') && rest.len() < line.len())
                .then(|| line[..line.len() - rest.len()].to_owned())
        })
        .unwrap_or_else(|| "  ".to_owned())
}

// === impl JsonEntry ===

/// One value of an entry: as written in the file, or written by adopt.
enum Member {
    Kept {
        span: Range<usize>,
        original: String,
        clean: String,
    },
    New(NewValue),
}

/// One server entry (an object), its members in order.
struct JsonEntry {
    members: Vec<(String, Member)>,
    changed: bool,
}

impl JsonEntry {
    fn read(text: &str, clean: &str, span: Range<usize>) -> Option<Self> {
        let members = members(clean, span).ok()?;
        Some(Self {
            members: members
                .into_iter()
                .map(|(key, span)| {
                    let member = Member::Kept {
                        original: text[span.clone()].to_owned(),
                        clean: clean[span.clone()].to_owned(),
                        span,
                    };
                    (key, member)
                })
                .collect(),
            changed: false,
        })
    }

    fn value(&self, key: &str) -> Option<serde_json::Value> {
        let (_, member) = self.members.iter().find(|(k, _)| k == key)?;
        Some(match member {
            Member::Kept { clean, .. } => serde_json::from_str(clean).ok()?,
            Member::New(NewValue::Str(s)) => s.clone().into(),
            Member::New(NewValue::List(items)) => items.clone().into(),
            Member::New(NewValue::Map(pairs)) => pairs
                .iter()
                .map(|(k, v)| (k.clone(), serde_json::Value::from(v.clone())))
                .collect::<serde_json::Map<_, _>>()
                .into(),
        })
    }

    /// Whether a comment stands in the entry outside the values it keeps as written.
    fn loses_comments(&self, text: &str, clean: &str, span: &Range<usize>) -> bool {
        let kept: Vec<&Range<usize>> = self
            .members
            .iter()
            .filter_map(|(_, member)| match member {
                Member::Kept { span, .. } => Some(span),
                Member::New(_) => None,
            })
            .collect();
        span.clone().any(|i| {
            text.as_bytes()[i] != clean.as_bytes()[i]
                && text.as_bytes()[i] != b','
                && !kept.iter().any(|range| range.contains(&i))
        })
    }

    fn render(&self, indent: &str, unit: &str) -> String {
        if self.members.is_empty() {
            return "{}".to_owned();
        }
        let inner = format!("{indent}{unit}");
        let body: Vec<String> = self
            .members
            .iter()
            .map(|(key, member)| {
                let value = match member {
                    Member::Kept { original, .. } => original.clone(),
                    Member::New(value) => render_new(value, &inner, unit),
                };
                format!("{inner}{}: {value}", quote(key))
            })
            .collect();
        format!("{{\n{}\n{indent}}}", body.join(",\n"))
    }
}

fn quote(text: &str) -> String {
    serde_json::Value::from(text).to_string()
}

fn render_new(value: &NewValue, indent: &str, unit: &str) -> String {
    match value {
        NewValue::Str(text) => quote(text),
        NewValue::List(items) => {
            let items: Vec<String> = items.iter().map(|item| quote(item)).collect();
            format!("[{}]", items.join(", "))
        }
        NewValue::Map(pairs) if pairs.is_empty() => "{}".to_owned(),
        NewValue::Map(pairs) => {
            let body: Vec<String> = pairs
                .iter()
                .map(|(k, v)| format!("{indent}{unit}{}: {}", quote(k), quote(v)))
                .collect();
            format!("{{\n{}\n{indent}}}", body.join(",\n"))
        }
    }
}

fn json_type(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

impl EntryMap for JsonEntry {
    fn get_str(&self, key: &str) -> Result<Option<String>, String> {
        match self.value(key) {
            None => Ok(None),
            Some(serde_json::Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(format!(
                "its `{key}` is {}, not a string",
                json_type(&other)
            )),
        }
    }

    fn get_list(&self, key: &str) -> Result<Option<Vec<String>>, String> {
        match self.value(key) {
            None => Ok(None),
            Some(serde_json::Value::Array(items)) => items
                .into_iter()
                .map(|item| match item {
                    serde_json::Value::String(s) => Ok(s),
                    other => Err(format!(
                        "its `{key}` holds {}, not only strings",
                        json_type(&other)
                    )),
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Some(other) => Err(format!(
                "its `{key}` is {}, not an array",
                json_type(&other)
            )),
        }
    }

    fn get_map(&self, key: &str) -> Result<Option<Vec<(String, String)>>, String> {
        // In the order written, so that a map adopt writes back keeps it.
        if let Some((_, Member::Kept { clean, .. })) = self.members.iter().find(|(k, _)| k == key)
            && let Ok(members) = members(clean, 0..clean.len())
        {
            return members
                .into_iter()
                .map(|(k, span)| match serde_json::from_str(&clean[span]) {
                    Ok(serde_json::Value::String(s)) => Ok((k, s)),
                    Ok(other) => Err(format!(
                        "its `{key}.{k}` is {}, not a string",
                        json_type(&other)
                    )),
                    Err(_) => Err(format!("its `{key}.{k}` is not JSON")),
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some);
        }
        match self.value(key) {
            None => Ok(None),
            Some(serde_json::Value::Object(map)) => map
                .into_iter()
                .map(|(k, v)| match v {
                    serde_json::Value::String(s) => Ok((k, s)),
                    other => Err(format!(
                        "its `{key}.{k}` is {}, not a string",
                        json_type(&other)
                    )),
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Some(other) => Err(format!(
                "its `{key}` is {}, not an object",
                json_type(&other)
            )),
        }
    }

    fn contains(&self, key: &str) -> bool {
        self.members.iter().any(|(k, _)| k == key)
    }

    fn set(&mut self, key: &str, value: NewValue) {
        self.changed = true;
        match self.members.iter_mut().find(|(k, _)| k == key) {
            Some((_, member)) => *member = Member::New(value),
            None => self.members.push((key.to_owned(), Member::New(value))),
        }
    }

    fn replace(&mut self, remove: &[&str], insert: Vec<(String, NewValue)>) {
        self.changed = true;
        let at = self
            .members
            .iter()
            .position(|(k, _)| remove.contains(&k.as_str()))
            .unwrap_or(self.members.len());
        // `at` is the first removed key, so no removed key stands before it.
        self.members.retain(|(k, _)| !remove.contains(&k.as_str()));
        for (offset, (key, value)) in insert.into_iter().enumerate() {
            self.members.insert(at + offset, (key, Member::New(value)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_and_trailing_commas_are_blanked_in_place() {
        let text = "{\n  // a \"quoted\" comment\n  \"a\": \"x // not a comment\", /* b */\n  \"b\": [1, 2,],\n}";
        let clean = strip_comments(text);
        assert_eq!(clean.len(), text.len());
        assert_eq!(clean.lines().count(), text.lines().count());
        let value: serde_json::Value = serde_json::from_str(&clean).unwrap();
        assert_eq!(value["a"], "x // not a comment");
        assert_eq!(value["b"], serde_json::json!([1, 2]));
    }
}
