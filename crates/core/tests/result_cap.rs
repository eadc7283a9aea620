//! The result cap (SPEC §13, `maxResultBytes`): every cap from 0 to past the result's size over
//! results of each block kind, text with multi-byte and escaped characters, `structuredContent`,
//! and member order; a result within the cap is never touched. A cut that drops
//! `structuredContent` is an error result (`isError: true`) whose note says the tool answered and
//! what was dropped and cut (issue 30: a result with no structuredContent fails the output schema
//! check of both official SDK clients, an error result is exempt); any other cut keeps the
//! result's own `isError`.

use mcp_supervisor_core::result_cap::{Cut, cut_result};
use proptest::prelude::*;
use proptest::test_runner::Config as ProptestConfig;
use serde_json::{Value, json};

/// The bytes the cap measures: `content` and `structuredContent` as sent.
fn measured(result: &str) -> usize {
    let v: Value = serde_json::from_str(result).unwrap();
    ["content", "structuredContent"]
        .iter()
        .filter_map(|k| v.get(k))
        .map(|m| serde_json::to_string(m).unwrap().len())
        .sum()
}

/// The member names of a JSON object, in the order they are written.
fn keys_in_order(text: &str) -> Vec<String> {
    struct Keys(Vec<String>);
    impl<'de> serde::Deserialize<'de> for Keys {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> serde::de::Visitor<'de> for V {
                type Value = Keys;
                fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.write_str("an object")
                }
                fn visit_map<A: serde::de::MapAccess<'de>>(
                    self,
                    mut map: A,
                ) -> Result<Keys, A::Error> {
                    let mut keys = Vec::new();
                    while let Some(k) = map.next_key::<String>()? {
                        map.next_value::<serde::de::IgnoredAny>()?;
                        keys.push(k);
                    }
                    Ok(Keys(keys))
                }
            }
            d.deserialize_map(V)
        }
    }
    serde_json::from_str::<Keys>(text).unwrap().0
}

/// The cut result's content blocks, the note apart.
fn blocks_and_note(cut: &Cut) -> (Vec<Value>, String) {
    let v: Value = serde_json::from_str(&cut.result).expect("the cut result is JSON");
    let mut blocks = v["content"].as_array().expect("content").clone();
    let note = blocks.pop().expect("a note");
    assert_eq!(note["type"], "text");
    let note = note["text"].as_str().expect("note text").to_string();
    (blocks, note)
}

/// The invariants of any cut: the kept part fits, is measured right, and the note is last and
/// says the size before; a cut that dropped structuredContent is an error result whose note says
/// so, any other keeps the result's own `isError` (absent stays absent).
fn check_cut(result: &str, max: usize, cut: &Cut) {
    let size = measured(result);
    assert_eq!(cut.size, size);
    let (blocks, note) = blocks_and_note(cut);
    let v: Value = serde_json::from_str(&cut.result).unwrap();
    let before: Value = serde_json::from_str(result).unwrap();
    let dropped = before.get("structuredContent").is_some() && v.get("structuredContent").is_none();
    if dropped {
        assert_eq!(v["isError"], true, "{}", cut.result);
        assert!(
            note.contains(&format!(
                "the tool ran and answered, but its result of {size} bytes was over this \
                 proxy's maxResultBytes ({max} bytes): its structuredContent ("
            )) && note.contains(" bytes) was dropped"),
            "{note}"
        );
        // The note says the result is partial, not that the tool failed, unless it did.
        let partial = "This result is marked isError only because it is partial";
        assert_eq!(
            note.contains(partial),
            before.get("isError") != Some(&Value::Bool(true)),
            "{note}"
        );
    } else {
        assert_eq!(v.get("isError"), before.get("isError"), "{}", cut.result);
        assert!(
            note.contains(&format!("from {size} bytes"))
                && note.contains(&format!("maxResultBytes ({max} bytes)")),
            "{note}"
        );
    }
    // What `kept` counts is what is there (content without the note, plus structuredContent).
    let content_len = serde_json::to_string(&Value::Array(blocks)).unwrap().len();
    let structured_len = v
        .get("structuredContent")
        .map_or(0, |s| serde_json::to_string(s).unwrap().len());
    assert_eq!(cut.kept, content_len + structured_len);
    // Within the cap; below the empty content array (and a kept structuredContent) nothing is.
    let floor = 2 + structured_len;
    assert!(
        cut.kept <= max.max(floor),
        "kept {} over cap {max}",
        cut.kept
    );
}

/// The JSON text of the cut result's first content block, as written.
fn first_block_text(cut: &Cut) -> String {
    #[derive(serde::Deserialize)]
    struct Content {
        content: Vec<Box<serde_json::value::RawValue>>,
    }
    let content: Content = serde_json::from_str(&cut.result).unwrap();
    content.content[0].get().to_string()
}

#[test]
fn a_result_within_the_cap_is_untouched() {
    let result =
        r#"{ "content" : [ {"type":"text", "text":"héllo"} ], "isError":false,"x-new":{"a":1} }"#;
    let size = measured(result);
    // The whitespace as sent counts: the measure is of the text itself.
    let as_sent = r#"[ {"type":"text", "text":"héllo"} ]"#.len();
    assert!(as_sent > size);
    for max in [as_sent, as_sent + 1, usize::MAX] {
        assert_eq!(cut_result(result, max), None, "cap {max}");
    }
    assert!(cut_result(result, as_sent - 1).is_some());
}

#[test]
fn what_is_not_a_tool_result_is_untouched() {
    for text in [
        "[]",
        "\"text\"",
        "not json",
        r#"{"content":"a long string, not an array of blocks"}"#,
        r#"{"task":{"taskId":"t1","status":"working"}}"#,
        r#"{"resultType":"input_required","inputRequests":{"a":{"method":"roots/list"}}}"#,
    ] {
        assert_eq!(cut_result(text, 1), None, "{text}");
    }
}

#[test]
fn text_is_cut_at_every_character_boundary() {
    // One-, two-, three- and four-byte characters, and characters JSON escapes.
    let text = "aé€😀\"\\\n\u{1}z".repeat(3);
    let result = json!({ "content": [{ "type": "text", "text": text }] }).to_string();
    let size = measured(&result);
    let overhead = r#"[{"type":"text","text":""}]"#.len();
    let mut seen = std::collections::BTreeSet::new();
    for max in 0..size {
        let cut = cut_result(&result, max).expect("over the cap");
        check_cut(&result, max, &cut);
        let (blocks, note) = blocks_and_note(&cut);
        let kept = blocks
            .first()
            .map_or("", |b| b["text"].as_str().unwrap())
            .to_string();
        assert!(text.starts_with(&kept), "a prefix at a boundary");
        // The longest prefix that fits: one more character would not.
        let next = text[kept.len()..].chars().next().expect("not all of it");
        let longer = format!("{kept}{next}");
        assert!(
            overhead + serde_json::to_string(&longer).unwrap().len() - 2 > max,
            "cap {max}: {kept:?} could have kept {next:?}"
        );
        if kept.is_empty() {
            assert!(blocks.is_empty(), "no empty text block");
            assert!(note.contains("1 text block dropped"), "{note}");
        } else {
            let (k, of) = (kept.chars().count(), text.chars().count());
            assert!(
                note.contains(&format!("a text block cut to {k} of its {of} characters")),
                "{note}"
            );
        }
        seen.insert(kept.chars().count());
    }
    // Every prefix length is reached by some cap.
    assert_eq!(seen.len(), text.chars().count());
}

#[test]
fn a_cut_text_block_keeps_its_other_members_in_order() {
    let result = r#"{"_meta":{"m":1},"content":[{"annotations":{"audience":["user"]},"type":"text","text":"0123456789","_meta":{"k":"v"}}],"isError":true,"zz":null}"#;
    let cut = cut_result(result, 90).expect("cut");
    check_cut(result, 90, &cut);
    assert_eq!(
        keys_in_order(&cut.result),
        ["_meta", "content", "isError", "zz"]
    );
    let v: Value = serde_json::from_str(&cut.result).unwrap();
    let block = first_block_text(&cut);
    assert_eq!(
        keys_in_order(&block),
        ["annotations", "type", "text", "_meta"]
    );
    assert!(v["content"][0]["text"].as_str().unwrap().len() < 10);
    assert_eq!(v["content"][0]["_meta"], json!({"k": "v"}));
    assert_eq!(v["isError"], true);
}

#[test]
fn blocks_that_are_not_text_are_dropped_whole_past_the_cap() {
    let data = "QUJD".repeat(50);
    for kind in [
        json!({ "type": "image", "data": data, "mimeType": "image/png" }),
        json!({ "type": "audio", "data": data, "mimeType": "audio/wav" }),
        json!({ "type": "resource", "resource": { "uri": "file:///a", "text": data } }),
        json!({ "type": "resource_link", "uri": "file:///a", "name": data }),
        json!({ "type": "hologram", "data": data }),
    ] {
        let name = kind["type"].as_str().unwrap().to_string();
        let first = json!({ "type": "text", "text": "first" });
        let last = json!({ "type": "text", "text": "after" });
        let result = json!({ "content": [first, kind, last] }).to_string();
        let whole_first = format!("[{first}]").len();
        let through_kind = format!("[{first},{kind}]").len();
        for max in whole_first..through_kind {
            let cut = cut_result(&result, max).expect("over");
            check_cut(&result, max, &cut);
            let (blocks, note) = blocks_and_note(&cut);
            // Never a part of the block: it is there whole or not at all.
            assert_eq!(blocks, vec![first.clone()], "{name} at {max}");
            assert!(note.contains(&format!("1 {name} block dropped")), "{note}");
            // The text after it is past the cap too.
            assert!(note.contains("1 text block dropped"), "{note}");
        }
    }
}

#[test]
fn every_block_after_the_cut_is_dropped_and_counted() {
    let img = json!({ "type": "image", "data": "AAAA", "mimeType": "image/png" });
    let result = json!({ "content": [
        { "type": "text", "text": "x".repeat(100) },
        img, img, { "type": "text", "text": "y" }, { "type": "audio", "data": "", "mimeType": "audio/wav" }
    ]})
    .to_string();
    let cut = cut_result(&result, 60).expect("over");
    check_cut(&result, 60, &cut);
    let (blocks, note) = blocks_and_note(&cut);
    assert_eq!(blocks.len(), 1);
    assert!(note.contains("a text block cut to"), "{note}");
    assert!(note.contains("2 image blocks dropped"), "{note}");
    assert!(note.contains("1 text block dropped"), "{note}");
    assert!(note.contains("1 audio block dropped"), "{note}");
}

#[test]
fn structured_content_is_dropped_only_when_it_alone_exceeds_the_cap() {
    let structured = json!({ "rows": "r".repeat(50) });
    let s_len = structured.to_string().len();
    let text = "t".repeat(80);
    // Written out, so its member order is this one.
    let result = format!(
        r#"{{"content":[{{"type":"text","text":"{text}"}}],"structuredContent":{structured},"isError":false}}"#
    );
    // It fits alone: kept whole, and the content gets what it leaves.
    let cut = cut_result(&result, s_len + 40).expect("over");
    check_cut(&result, s_len + 40, &cut);
    let v: Value = serde_json::from_str(&cut.result).unwrap();
    assert_eq!(v["structuredContent"], structured);
    assert_eq!(
        keys_in_order(&cut.result),
        ["content", "structuredContent", "isError"]
    );
    assert!(v["content"][0]["text"].as_str().unwrap().len() < 40);
    assert_eq!(v["isError"], false, "kept: the result's own isError");
    // It alone exceeds: dropped, and the content has the whole cap; the result is an error
    // result now (isError set where it was), and the note says why.
    let cut = cut_result(&result, s_len - 1).expect("over");
    check_cut(&result, s_len - 1, &cut);
    let (blocks, note) = blocks_and_note(&cut);
    let v: Value = serde_json::from_str(&cut.result).unwrap();
    assert!(v.get("structuredContent").is_none());
    assert_eq!(keys_in_order(&cut.result), ["content", "isError"]);
    assert_eq!(v["isError"], true);
    assert!(
        note.contains(&format!(
            "its structuredContent ({s_len} bytes) was dropped"
        )) && note.contains("its content cut to what is shown above (a text block cut to"),
        "{note}"
    );
    assert!(blocks[0]["text"].as_str().unwrap().len() > 20);
}

#[test]
fn a_result_with_structured_content_and_no_content_gets_the_note() {
    let result = json!({ "structuredContent": { "big": "b".repeat(100) } }).to_string();
    let cut = cut_result(&result, 50).expect("over");
    check_cut(&result, 50, &cut);
    // isError added, after the members it had.
    assert_eq!(keys_in_order(&cut.result), ["content", "isError"]);
    let (blocks, note) = blocks_and_note(&cut);
    assert!(blocks.is_empty());
    assert!(note.contains("it had no other content"), "{note}");
}

/// `result` with `isError` as given: absent (`None`) or the JSON text written.
fn with_is_error(is_error: Option<&str>, content: &str, structured: Option<&str>) -> String {
    let mut members = vec![
        r#""_meta":{"m":1}"#.to_string(),
        format!(r#""content":{content}"#),
    ];
    if let Some(s) = structured {
        members.push(format!(r#""structuredContent":{s}"#));
    }
    if let Some(e) = is_error {
        members.push(format!(r#""isError":{e}"#));
    }
    members.push(r#""x-new":[1,2]"#.to_string());
    format!("{{{}}}", members.join(","))
}

#[test]
fn a_cut_that_drops_structured_content_is_an_error_result() {
    let text = format!(r#"[{{"type":"text","text":"{}"}}]"#, "t".repeat(300));
    let structured = format!(r#"{{"result":"{}"}}"#, "s".repeat(300));
    for is_error in [None, Some("false"), Some("true")] {
        let result = with_is_error(is_error, &text, Some(&structured));
        let cut = cut_result(&result, 100).expect("over");
        check_cut(&result, 100, &cut);
        let v: Value = serde_json::from_str(&cut.result).unwrap();
        assert_eq!(v["isError"], true, "{is_error:?}");
        // Every other member whole and in order: isError set where it was, or added last.
        let keys = match is_error {
            None => vec!["_meta", "content", "x-new", "isError"],
            Some(_) => vec!["_meta", "content", "isError", "x-new"],
        };
        assert_eq!(keys_in_order(&cut.result), keys, "{is_error:?}");
        assert_eq!(v["_meta"], json!({"m": 1}));
        assert_eq!(v["x-new"], json!([1, 2]));
        let (blocks, note) = blocks_and_note(&cut);
        assert_eq!(blocks.len(), 1);
        assert!(
            note.contains("the tool ran and answered")
                && note.contains(&format!(
                    "its structuredContent ({} bytes) was dropped",
                    structured.len()
                ))
                && note.contains("its content cut to what is shown above")
                && note.contains("a text block cut to"),
            "{note}"
        );
    }
    // A repeated isError: the one that stands (true) is written once, where the first was.
    let result = format!(
        r#"{{"isError":false,"content":{text},"structuredContent":{structured},"isError":false}}"#
    );
    let cut = cut_result(&result, 100).expect("over");
    assert_eq!(keys_in_order(&cut.result), ["isError", "content"]);
    assert_eq!(
        serde_json::from_str::<Value>(&cut.result).unwrap()["isError"],
        true
    );
    // The content fits once structuredContent is gone: shown whole, and the note says so.
    let small = r#"[{"type":"text","text":"ok"}]"#;
    let result = with_is_error(None, small, Some(&structured));
    let cut = cut_result(&result, 100).expect("over");
    check_cut(&result, 100, &cut);
    let (blocks, note) = blocks_and_note(&cut);
    assert_eq!(blocks, vec![json!({"type": "text", "text": "ok"})]);
    assert!(note.contains("its content is shown whole above"), "{note}");
    // Nothing of the content fits: the note says so.
    let image = r#"[{"type":"image","data":"QUJD","mimeType":"image/png"}]"#;
    let result = with_is_error(None, image, Some(&structured));
    let cut = cut_result(&result, 10).expect("over");
    check_cut(&result, 10, &cut);
    let (blocks, note) = blocks_and_note(&cut);
    assert!(blocks.is_empty());
    assert!(
        note.contains("none of its content could be kept (1 image block dropped)"),
        "{note}"
    );
}

#[test]
fn a_cut_that_keeps_structured_content_or_had_none_keeps_its_is_error() {
    let text = format!(r#"[{{"type":"text","text":"{}"}}]"#, "t".repeat(300));
    let structured = r#"{"result":"small"}"#;
    for structured in [None, Some(structured)] {
        for is_error in [None, Some("false"), Some("true")] {
            let result = with_is_error(is_error, &text, structured);
            let cut = cut_result(&result, 100).expect("over");
            check_cut(&result, 100, &cut);
            let v: Value = serde_json::from_str(&cut.result).unwrap();
            let before: Value = serde_json::from_str(&result).unwrap();
            assert_eq!(v.get("isError"), before.get("isError"), "{result}");
            assert_eq!(
                v.get("structuredContent"),
                before.get("structuredContent"),
                "{result}"
            );
            assert_eq!(keys_in_order(&cut.result), keys_in_order(&result));
            let (_, note) = blocks_and_note(&cut);
            assert!(
                note.starts_with("[mcp-supervisor: this result was cut to"),
                "{note}"
            );
        }
    }
}

fn cases(n: u32) -> ProptestConfig {
    ProptestConfig {
        cases: n,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

fn block() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<String>().prop_map(|t| json!({ "type": "text", "text": t })),
        "[A-Za-z0-9+/]{0,40}"
            .prop_map(|d| json!({ "type": "image", "data": d, "mimeType": "image/png" })),
        "[a-z]{0,20}".prop_map(|u| json!({ "type": "resource_link", "uri": u, "name": "n" })),
    ]
}

proptest! {
    #![proptest_config(cases(2000))]

    /// Any result, any cap: within it untouched; over it, JSON whose kept part fits, whose
    /// blocks are the original ones in order (the last kept one maybe a text prefix), with the
    /// note last, an error result when structuredContent was dropped (`check_cut`).
    #[test]
    fn any_cut_fits_and_keeps_a_prefix(
        blocks in proptest::collection::vec(block(), 0..6),
        structured in proptest::option::of(any::<String>()),
        is_error in proptest::option::of(any::<bool>()),
        max in 0usize..400,
    ) {
        let mut result = json!({ "content": blocks });
        if let Some(s) = structured {
            result["structuredContent"] = json!({ "s": s });
        }
        if let Some(e) = is_error {
            result["isError"] = json!(e);
        }
        let text = result.to_string();
        match cut_result(&text, max) {
            None => prop_assert!(measured(&text) <= max),
            Some(cut) => {
                check_cut(&text, max, &cut);
                let (kept, _) = blocks_and_note(&cut);
                for (i, b) in kept.iter().enumerate() {
                    if i + 1 < kept.len() || b == &blocks[i] {
                        prop_assert_eq!(b, &blocks[i]);
                    } else {
                        let (cut_text, whole) = (b["text"].as_str(), blocks[i]["text"].as_str());
                        prop_assert!(cut_text.is_some_and(|c| !c.is_empty() && whole.is_some_and(|w| w.starts_with(c))));
                    }
                }
            }
        }
    }
}
