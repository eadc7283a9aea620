//! SPEC §9: lists are the registry's. A server that is busy, hung or still starting never delays
//! another server's part of any list. Through `serve --http`, one of two fault servers is frozen
//! with SIGSTOP: every list is answered while it stays frozen, with the frozen server's part as
//! it listed it last; the fan-outs that cannot be held (`tasks/list`, `logging/setLevel`) answer
//! within their short deadline. Each answer is bounded by a hang guard of seconds (the latency
//! itself belongs in the benchmark).

mod support;

use std::time::Duration;

use mcp_supervisor_testkit::rawhttp::RawHttp;
use serde_json::{Value, json};
use support::*;

/// No answer may take this long: a list that waits on the frozen server would.
const HANG_GUARD: Duration = Duration::from_secs(8);
const LIMIT: Duration = Duration::from_secs(20);

/// The names (or URIs) of a list's items, sorted.
fn keys(result: &Value, field: &str, key: &str) -> Vec<String> {
    let mut keys: Vec<String> = result[field]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|i| i[key].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    keys.sort();
    keys
}

const LISTS: [(&str, &str, &str); 4] = [
    ("tools/list", "tools", "name"),
    ("prompts/list", "prompts", "name"),
    ("resources/list", "resources", "uri"),
    (
        "resources/templates/list",
        "resourceTemplates",
        "uriTemplate",
    ),
];

#[tokio::test]
async fn every_list_answers_while_one_server_is_frozen() {
    let dir = temp_dir("frozen-lists");
    let path = dir.join("servers.json");
    write_config(
        &path,
        json!({ "a": { "command": fault_bin() }, "b": { "command": fault_bin() } }),
    );
    let proxy = serve_http_without_catalog(&path).await;
    let status = status_until(&proxy, LIMIT, |s| {
        state_is(s, "a", "ready") && state_is(s, "b", "ready")
    })
    .await;
    let frozen_pid = pid_of(&status, "b").expect("b's pid");
    let client = RawHttp::connect(&proxy.url("/mcp"), LIMIT)
        .await
        .expect("a session");

    // With both up: every list has both servers' parts.
    let mut before = Vec::new();
    for (method, field, key) in LISTS {
        let (result, _) = client.request(method, json!({})).await.expect(method);
        let keys = keys(&result, field, key);
        if method != "resources/list" && method != "resources/templates/list" {
            assert!(
                keys.iter().any(|k| k.starts_with("b__")),
                "{method}: b's part is missing before the freeze: {keys:?}"
            );
        }
        assert!(!keys.is_empty(), "{method} is empty: {result}");
        before.push(keys);
    }

    let frozen = Frozen::new(frozen_pid);
    for ((method, field, key), expected) in LISTS.into_iter().zip(&before) {
        let answer = tokio::time::timeout(HANG_GUARD, client.request(method, json!({}))).await;
        let Ok(answer) = answer else {
            panic!("{method} did not answer within {HANG_GUARD:?} while b is frozen");
        };
        let (result, _) = answer.expect(method);
        assert!(
            frozen.still_stopped(),
            "{method}: b was continued meanwhile"
        );
        assert_eq!(
            &keys(&result, field, key),
            expected,
            "{method}: the frozen server's part is what it listed last"
        );
    }
    for (method, params) in [
        ("tasks/list", json!({})),
        ("logging/setLevel", json!({ "level": "info" })),
    ] {
        let answer = tokio::time::timeout(HANG_GUARD, client.answer(method, params)).await;
        assert!(
            answer.is_ok(),
            "{method} did not answer within {HANG_GUARD:?} while b is frozen"
        );
        assert!(
            frozen.still_stopped(),
            "{method}: b was continued meanwhile"
        );
    }
    drop(frozen);
    drop(proxy);
    let _ = std::fs::remove_dir_all(dir);
}
