//! Ranking tools for `search_tools` (SPEC §13): words split the way tool names are written,
//! the fields weighted (name over argument names over description), BM25's rarity and length
//! normalization, prefixes, ties in catalog order, limits, and definitions that are not tools.

use mcp_supervisor_core::tool_search::{Index, words_of};
use serde_json::json;

fn tool(name: &str, description: &str, args: &[&str]) -> String {
    let properties: serde_json::Map<String, serde_json::Value> = args
        .iter()
        .map(|a| ((*a).to_string(), json!({ "type": "string" })))
        .collect();
    json!({
        "name": name,
        "description": description,
        "inputSchema": { "type": "object", "properties": properties },
    })
    .to_string()
}

fn ranked(definitions: &[String], query: &str, limit: usize) -> Vec<usize> {
    Index::build(definitions.iter().map(String::as_str))
        .search(query, limit)
        .into_iter()
        .map(|(i, _)| i)
        .collect()
}

#[test]
fn words_split_at_case_digits_and_punctuation() {
    let cases: &[(&str, &[&str])] = &[
        ("get_weatherForecast", &["get", "weather", "forecast"]),
        ("fs__read-file.v2", &["fs", "read", "file", "v", "2"]),
        ("HTTPServer", &["http", "server"]),
        ("parseJSON", &["parse", "json"]),
        ("sha256sum", &["sha", "256", "sum"]),
        ("Ünïcode Wörds", &["ünïcode", "wörds"]),
        ("  , ;", &[]),
        ("", &[]),
    ];
    for (text, words) in cases {
        assert_eq!(words_of(text), *words, "{text}");
    }
}

#[test]
fn a_word_of_the_description_finds_its_tool() {
    let catalog = [
        tool(
            "fault__add",
            "Add two numbers; replies with the sum.",
            &["a", "b"],
        ),
        tool(
            "fault__echo",
            "Reply with the message, unchanged.",
            &["message"],
        ),
        tool(
            "everything__get-sum",
            "Returns the sum of two numbers",
            &["a", "b"],
        ),
    ];
    assert_eq!(ranked(&catalog, "unchanged", 10), [1]);
    assert_eq!(ranked(&catalog, "UNCHANGED!", 10), [1]);
    assert_eq!(ranked(&catalog, "nothing like it", 10), Vec::<usize>::new());
    assert_eq!(ranked(&catalog, "", 10), Vec::<usize>::new());
}

#[test]
fn the_name_counts_more_than_an_argument_and_an_argument_more_than_the_description() {
    let catalog = [
        tool("a", "Works on a file somewhere.", &["x"]),
        tool("b", "Works somewhere.", &["file"]),
        tool("read_file", "Works somewhere.", &["x"]),
    ];
    assert_eq!(ranked(&catalog, "file", 10), [2, 1, 0]);
}

#[test]
fn rare_words_count_more_than_common_ones() {
    let catalog = [
        tool("t1", "list the files", &[]),
        tool("t2", "list the users", &[]),
        tool("t3", "list the rows", &[]),
        tool("t4", "remove the files", &[]),
    ];
    // "remove" is rare, "list" common: the tool with the rare word ranks first.
    assert_eq!(ranked(&catalog, "list remove", 10)[0], 3);
    // Both words of t1 match: it beats the tools that match one.
    assert_eq!(ranked(&catalog, "list files", 10)[0], 0);
}

#[test]
fn a_short_description_beats_a_long_one_for_the_same_word() {
    let long = format!("weather {}", "and other words ".repeat(30));
    let catalog = [tool("x1", &long, &[]), tool("x2", "weather now", &[])];
    assert_eq!(ranked(&catalog, "weather", 10), [1, 0]);
}

#[test]
fn a_query_word_finds_longer_words_it_begins_but_an_exact_word_ranks_first() {
    let catalog = [
        tool("a", "gives forecasts for a city", &[]),
        tool("b", "gives the forecast", &[]),
        tool("c", "nothing", &["fo"]),
    ];
    assert_eq!(ranked(&catalog, "forecast", 10), [1, 0]);
    // Two letters are too few to match as a prefix: "fo" finds only the exact word.
    assert_eq!(ranked(&catalog, "fo", 10), [2]);
}

#[test]
fn ties_keep_catalog_order_and_the_limit_holds() {
    let catalog: Vec<String> = (0..20)
        .map(|i| tool(&format!("same{i}"), "the same words", &[]))
        .collect();
    assert_eq!(ranked(&catalog, "same words", 5), [0, 1, 2, 3, 4]);
    assert_eq!(ranked(&catalog, "words", 0), Vec::<usize>::new());
    assert_eq!(ranked(&catalog, "words", 100).len(), 20);
}

#[test]
fn titles_and_annotation_titles_are_searched() {
    let catalog = [
        json!({ "name": "t1", "title": "Translate text" }).to_string(),
        json!({ "name": "t2", "annotations": { "title": "Summarize a page" } }).to_string(),
    ];
    assert_eq!(ranked(&catalog, "translate", 10), [0]);
    assert_eq!(ranked(&catalog, "summarize", 10), [1]);
}

#[test]
fn what_is_not_a_tool_is_never_found_and_breaks_nothing() {
    let catalog = [
        "not json".to_string(),
        "[1,2]".to_string(),
        json!({ "name": 5, "description": ["x"] }).to_string(),
        tool("real", "a real tool", &[]),
    ];
    let index = Index::build(catalog.iter().map(String::as_str));
    assert_eq!(index.len(), 4);
    assert_eq!(ranked(&catalog, "real tool", 10), [3]);
    assert!(Index::build(std::iter::empty()).search("x", 10).is_empty());
}

#[test]
fn scores_are_positive_and_descending() {
    let catalog: Vec<String> = (0..200)
        .map(|i| {
            tool(
                &format!("tool_{i}"),
                &format!("word{} word{} common", i % 7, i % 13),
                &[],
            )
        })
        .collect();
    let index = Index::build(catalog.iter().map(String::as_str));
    let hits = index.search("word3 common word5", 50);
    assert_eq!(hits.len(), 50);
    assert!(hits.windows(2).all(|w| w[0].1 >= w[1].1));
    assert!(hits.iter().all(|(_, s)| *s > 0.0));
}
