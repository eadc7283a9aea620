//! The result cap (SPEC §13, `maxResultBytes`): a tool result whose content is larger than the
//! cap is cut to it, with a final text block that says what was cut and from what size.
//!
//! What is measured: the bytes of the result's `content` and `structuredContent` as they are
//! sent (their JSON text). Over the cap, `structuredContent` is dropped when it alone exceeds the
//! cap (else it is kept, and content gets what it leaves); the content blocks are kept in order
//! while they fit; the one that crosses the cap is cut when it is text (at a character
//! boundary) and dropped whole when it is anything else (image, audio, resource, resource link,
//! a kind not known yet); every block after it is dropped. The note comes last and is not
//! counted. Every other member of the result, and of a cut text block, passes whole, in order.
//!
//! A cut that drops `structuredContent` makes the result an error result (`"isError": true`, set
//! where the result had it, else added last), and its note says plainly that the tool ran and
//! answered, that its result was over the cap, that the structured content was dropped and the
//! content cut to what is shown. Why (issue 30): a tool with an `outputSchema` must return
//! `structuredContent` that validates against it, and clients check that: a result without it
//! fails every schema-checking client (the official Python SDK raises "Tool … has an output
//! schema but did not return structured content", and the TypeScript SDK's `callTool` throws the
//! same), and a cut structured value could not be promised to validate either (required members,
//! `maxLength`, patterns). An error result is exempt from the check in both official SDKs, and it
//! tells the model the answer is partial. A result already `isError: true` stays so. When
//! `structuredContent` fits and is kept, or the result had none, the result keeps its own
//! `isError` (or none).
//!
//! Plain functions over JSON text: no I/O, no runtime. A result within the cap, or one that is
//! not shaped like a tool result, is never touched (the caller sends the text it had).

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::members::{Members, get as member, write_text as write_object};

/// A result that was cut.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cut {
    /// The result to send, as JSON text (the note included).
    pub result: String,
    /// The bytes of `content` and `structuredContent` before the cut.
    pub size: usize,
    /// The bytes of what was kept of them (the note not counted); at most the cap.
    pub kept: usize,
}

/// `result` (a `tools/call` result as JSON text) cut to `max_bytes`, or `None` when it is within
/// the cap or not a tool result (not an object, or a `content` that is not an array): the caller
/// then sends `result` byte for byte as it came.
pub fn cut_result(result: &str, max_bytes: usize) -> Option<Cut> {
    let members = serde_json::from_str::<Members<'_>>(result).ok()?.0;
    let content = member(&members, "content");
    let structured = member(&members, "structuredContent");
    let size = content.map_or(0, |c| c.get().len()) + structured.map_or(0, |s| s.get().len());
    if size <= max_bytes {
        return None;
    }
    let blocks: Vec<&RawValue> = match content {
        Some(content) => serde_json::from_str(content.get()).ok()?,
        None => Vec::new(),
    };
    let mut report = Report::default();
    let kept_structured = match structured {
        Some(s) if s.get().len() > max_bytes => {
            report.structured = Some(s.get().len());
            None
        }
        other => other,
    };
    let budget = max_bytes - kept_structured.map_or(0, |s| s.get().len());
    let (kept_blocks, content_len) = fit_blocks(&blocks, budget, &mut report);

    let dropped_structured = report.structured.is_some();
    // The result's own verdict: the last `isError` written is what parsers read.
    let was_error = member(&members, "isError")
        .and_then(|v| serde_json::from_str::<bool>(v.get()).ok())
        .unwrap_or(false);
    let note = report.note(size, max_bytes, !kept_blocks.is_empty(), was_error);
    let mut content_text = String::with_capacity(content_len + note.len() + 4);
    content_text.push('[');
    for block in &kept_blocks {
        content_text.push_str(block);
        content_text.push(',');
    }
    content_text.push_str(&note);
    content_text.push(']');
    let content_raw = RawValue::from_string(content_text).ok()?;
    let error_raw = RawValue::from_string("true".to_string()).ok()?;

    let mut out: Vec<(Cow<'_, str>, &RawValue)> = Vec::with_capacity(members.len() + 2);
    let (mut placed, mut error_placed) = (false, false);
    for (key, value) in &members {
        match key.as_ref() {
            "content" if !placed => {
                out.push((key.clone(), &content_raw));
                placed = true;
            }
            // A repeated key: its last value is what parsers read; the cut one stands for all.
            "content" => {}
            "structuredContent" if kept_structured.is_none() => {}
            // Dropped structuredContent: an error result (see the module's doc), where it was.
            "isError" if dropped_structured && !error_placed => {
                out.push((key.clone(), &error_raw));
                error_placed = true;
            }
            "isError" if dropped_structured => {}
            _ => out.push((key.clone(), value)),
        }
    }
    if !placed {
        out.push((Cow::Borrowed("content"), &content_raw));
    }
    if dropped_structured && !error_placed {
        out.push((Cow::Borrowed("isError"), &error_raw));
    }
    Some(Cut {
        result: write_object(&out)?,
        size,
        kept: content_len + kept_structured.map_or(0, |s| s.get().len()),
    })
}

/// What was cut, for the note.
#[derive(Debug, Default)]
struct Report {
    /// The bytes of a dropped `structuredContent`.
    structured: Option<usize>,
    /// A text block cut short: the characters kept, of how many.
    text: Option<(usize, usize)>,
    /// Blocks dropped whole, by kind, in the order first met.
    dropped: Vec<(String, usize)>,
}

impl Report {
    fn drop_block(&mut self, kind: &str) {
        match self.dropped.iter_mut().find(|(k, _)| k == kind) {
            Some((_, n)) => *n += 1,
            None => self.dropped.push((kind.to_string(), 1)),
        }
    }

    /// The final text block, as JSON text. `kept_any`: some content block is shown above it;
    /// `was_error`: the result was already an error result.
    fn note(&self, size: usize, max_bytes: usize, kept_any: bool, was_error: bool) -> String {
        let mut parts = Vec::new();
        if let Some((kept, of)) = self.text {
            parts.push(format!("a text block cut to {kept} of its {of} characters"));
        }
        for (kind, n) in &self.dropped {
            let blocks = if *n == 1 { "block" } else { "blocks" };
            parts.push(format!("{n} {kind} {blocks} dropped"));
        }
        let text = match self.structured {
            // Dropped structuredContent: the result is made an error result; say so plainly.
            Some(bytes) => {
                let content = match (parts.is_empty(), kept_any) {
                    (false, true) => {
                        format!(
                            "its content cut to what is shown above ({})",
                            parts.join("; ")
                        )
                    }
                    (false, false) => {
                        format!("none of its content could be kept ({})", parts.join("; "))
                    }
                    (true, true) => "its content is shown whole above".to_string(),
                    (true, false) => "it had no other content".to_string(),
                };
                let why = if was_error {
                    ""
                } else {
                    " This result is marked isError only because it is partial; the tool did \
                     not report an error."
                };
                format!(
                    "[mcp-supervisor: the tool ran and answered, but its result of {size} bytes \
                     was over this proxy's maxResultBytes ({max_bytes} bytes): its \
                     structuredContent ({bytes} bytes) was dropped and {content}.{why}]"
                )
            }
            None => {
                if parts.is_empty() {
                    parts.push("nothing could be kept".to_string());
                }
                format!(
                    "[mcp-supervisor: this result was cut to maxResultBytes ({max_bytes} bytes) from {size} bytes: {}]",
                    parts.join("; ")
                )
            }
        };
        let text = serde_json::to_string(&text).unwrap_or_else(|_| "\"\"".to_string());
        format!(r#"{{"type":"text","text":{text}}}"#)
    }
}

/// The content blocks that fit `budget` bytes as a JSON array (brackets and commas counted),
/// in order, the crossing one cut when it is text; and the length of that array.
fn fit_blocks<'a>(
    blocks: &[&'a RawValue],
    budget: usize,
    report: &mut Report,
) -> (Vec<Cow<'a, str>>, usize) {
    let mut kept: Vec<Cow<'a, str>> = Vec::new();
    let mut used = 2;
    let mut over = false;
    for block in blocks {
        let sep = usize::from(!kept.is_empty());
        if !over && used + sep + block.get().len() <= budget {
            used += sep + block.get().len();
            kept.push(Cow::Borrowed(block.get()));
            continue;
        }
        if !over {
            over = true;
            let room = budget.saturating_sub(used + sep);
            if let Some((text, kept_chars, of)) = cut_text_block(block, room) {
                used += sep + text.len();
                kept.push(Cow::Owned(text));
                report.text = Some((kept_chars, of));
                continue;
            }
        }
        report.drop_block(&block_kind(block));
    }
    (kept, used)
}

/// A text block cut so that its JSON text fits `room` bytes: the block (its other members
/// whole, in order), the characters kept and how many there were. `None` when the block is not
/// text, or not even one character fits.
fn cut_text_block(block: &RawValue, room: usize) -> Option<(String, usize, usize)> {
    let members = serde_json::from_str::<Members<'_>>(block.get()).ok()?.0;
    if member(&members, "type").map(RawValue::get) != Some("\"text\"") {
        return None;
    }
    let text: String = serde_json::from_str(member(&members, "text")?.get()).ok()?;
    let empty = RawValue::from_string("\"\"".to_string()).ok()?;
    let with = |value: &RawValue| -> Option<String> {
        let replaced: Vec<(Cow<'_, str>, &RawValue)> = members
            .iter()
            .map(|(k, v)| (k.clone(), if k == "text" { value } else { *v }))
            .collect();
        write_object(&replaced)
    };
    let overhead = with(&empty)?.len();
    // The room for the text's characters, escaped as they will be sent.
    let mut left = room.checked_sub(overhead)?;
    let end = text
        .char_indices()
        .find_map(|(i, c)| match left.checked_sub(escaped_len(c)) {
            Some(rest) => {
                left = rest;
                None
            }
            None => Some(i),
        })
        .unwrap_or(text.len());
    let kept = text.get(..end)?;
    if kept.is_empty() {
        return None;
    }
    let literal = RawValue::from_string(serde_json::to_string(kept).ok()?).ok()?;
    Some((with(&literal)?, kept.chars().count(), text.chars().count()))
}

/// The bytes `c` takes in a JSON string as serde_json writes it.
fn escaped_len(c: char) -> usize {
    match c {
        '"' | '\\' | '\u{8}' | '\u{c}' | '\n' | '\r' | '\t' => 2,
        '\0'..='\u{1f}' => 6,
        c => c.len_utf8(),
    }
}

/// A block's `type`, for the note: `image`, `audio`, `resource`, …, or `unknown`.
fn block_kind(block: &RawValue) -> String {
    #[derive(Deserialize)]
    struct Kind {
        #[serde(rename = "type")]
        kind: Option<String>,
    }
    serde_json::from_str::<Kind>(block.get())
        .ok()
        .and_then(|k| k.kind)
        .filter(|k| !k.is_empty() && k.len() <= 32)
        .unwrap_or_else(|| "unknown".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaped_lengths_are_serde_jsons() {
        let samples = (0u32..0x300)
            .chain([0x7f, 0x2028, 0x2029, 0xffff, 0x1f600, 0x10ffff])
            .filter_map(char::from_u32);
        for c in samples {
            let written = serde_json::to_string(&c.to_string()).unwrap();
            assert_eq!(escaped_len(c), written.len() - 2, "{c:?}");
        }
    }

    #[test]
    fn kinds_are_read_from_the_block() {
        let raw = |t: &str| RawValue::from_string(t.to_string()).unwrap();
        assert_eq!(block_kind(&raw(r#"{"type":"image","data":""}"#)), "image");
        assert_eq!(block_kind(&raw(r#"{"data":""}"#)), "unknown");
        assert_eq!(block_kind(&raw(r#"[1]"#)), "unknown");
    }
}
