//! Public names (SPEC §4, §9): the prefixed form, the 64-character limit with a stable hash
//! suffix, original mode and its collisions, and that prompts are named by the very rule tools
//! are (only the noun in a warning differs). Expected strings are fixed (computed independently
//! from the documented FNV-1a definition), so a change of hash or rule fails here.

use mcp_supervisor_core::naming::{
    MAX_NAME_LEN,
    NameKind::{Prompt, Tool},
    NamingConfig, NamingMode, assign, pair_hash, prefixed_name,
};

fn prefixed() -> NamingConfig {
    NamingConfig::default()
}

fn original() -> NamingConfig {
    NamingConfig {
        mode: NamingMode::Original,
        separator: "__".into(),
    }
}

fn is_public_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

// === prefixed_name ===

#[test]
fn the_public_name_is_server_separator_tool() {
    let cases = [
        ("fs", "read_file", "__", "fs__read_file"),
        ("github", "create_issue", "__", "github__create_issue"),
        ("my-srv", "tool.v2", "__", "my-srv__tool.v2"),
        ("a", "b", ".", "a.b"),
        ("a", "b", "-", "a-b"),
        ("a", "b", "_x_", "a_x_b"),
        ("s", "", "__", "s__"),
    ];
    for (server, tool, sep, expected) in cases {
        assert_eq!(prefixed_name(server, tool, sep), expected);
    }
}

#[test]
fn characters_outside_the_allowed_set_become_underscores() {
    let cases = [
        ("s", "read file", "s__read_file"),
        ("s", "a/b:c", "s__a_b_c"),
        ("s", "naïve", "s__na_ve"),
        ("s", "日本", "s____"),
        ("s", "emoji🙂", "s__emoji_"),
        ("s", "tab\tnew\nline", "s__tab_new_line"),
        ("s", "A-Za-z0-9_.-", "s__A-Za-z0-9_.-"),
    ];
    for (server, tool, expected) in cases {
        let name = prefixed_name(server, tool, "__");
        assert_eq!(name, expected, "{tool:?}");
        assert!(is_public_name(&name));
    }
}

#[test]
fn a_name_of_exactly_64_characters_is_kept_and_a_longer_one_is_hashed() {
    let exactly = prefixed_name("exactly", &"x".repeat(55), "__");
    assert_eq!(exactly.len(), 64);
    assert_eq!(exactly, format!("exactly__{}", "x".repeat(55)));
    let long = prefixed_name("exactly", &"x".repeat(56), "__");
    assert_eq!(long.len(), 64);
    assert_eq!(
        long,
        "exactly__xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx_ef3c6c1f"
    );
    let tool = "tool-with-a-really-long-descriptive-name-for-testing-limits";
    assert_eq!(prefixed_name("srv", tool, "__").len(), 64);
    assert_eq!(prefixed_name("srv", tool, "__"), format!("srv__{tool}"));
    assert_eq!(
        prefixed_name("srv", &format!("{tool}X"), "__"),
        "srv__tool-with-a-really-long-descriptive-name-for-testi_ac337d3f"
    );
}

#[test]
fn hashed_names_are_stable_across_runs_and_releases() {
    assert_eq!(pair_hash("fs", "read_file", 0), 2_529_603_765);
    assert_eq!(
        prefixed_name("github", &"x".repeat(60), "__"),
        "github__xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx_86a3c4c1"
    );
    assert_eq!(
        prefixed_name(&"a".repeat(64), "t", "__"),
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa_d73025f7"
    );
    assert_eq!(
        prefixed_name("s", &"é".repeat(70), "__"),
        "s_______________________________________________________b3f19ddf"
    );
}

#[test]
fn the_hash_is_of_the_unsanitized_pair_so_names_that_sanitize_alike_differ_when_long() {
    let a = prefixed_name("s", &format!("{} a", "x".repeat(70)), "__");
    let b = prefixed_name("s", &format!("{}/a", "x".repeat(70)), "__");
    assert_ne!(a, b);
    assert_eq!(a.len(), 64);
    assert_eq!(b.len(), 64);
    // The pair is length-prefixed: moving a character across the boundary changes the hash.
    assert_ne!(pair_hash("ab", "c", 0), pair_hash("a", "bc", 0));
}

#[test]
fn every_prefixed_name_is_a_valid_public_name() {
    let servers = ["a", "fs", "x-y_z", &"s".repeat(64)];
    let tools = [
        "",
        "t",
        "read file",
        "日本語ツール",
        &"t".repeat(63),
        &"t".repeat(200),
        "a.b-c_d",
    ];
    for sep in ["__", ".", "-", "_sep_"] {
        for server in servers {
            for tool in tools {
                let name = prefixed_name(server, tool, sep);
                assert!(name.len() <= MAX_NAME_LEN, "{name}");
                assert!(
                    name.chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
                );
            }
        }
    }
}

// === assign: prefixed mode ===

#[test]
fn prefixed_mode_names_every_tool_in_order() {
    let (names, warnings) = assign(
        Tool,
        &prefixed(),
        &[
            ("fs", vec!["read", "write"]),
            ("git", vec!["status", "read"]),
        ],
    );
    assert_eq!(
        names,
        [
            vec!["fs__read", "fs__write"],
            vec!["git__status", "git__read"]
        ]
    );
    assert!(warnings.is_empty());
}

#[test]
fn prefixed_mode_uses_the_configured_separator() {
    let config = NamingConfig {
        mode: NamingMode::Prefixed,
        separator: ".".into(),
    };
    let (names, _) = assign(Tool, &config, &[("fs", vec!["read"])]);
    assert_eq!(names, [vec!["fs.read"]]);
}

#[test]
fn names_that_collide_after_prefixing_are_broken_with_a_hash_suffix() {
    let (names, warnings) = assign(
        Tool,
        &prefixed(),
        &[("a", vec!["b__c"]), ("a__b", vec!["c"])],
    );
    assert_eq!(names, [vec!["a__b__c"], vec!["a__b__c_9e870743"]]);
    assert_eq!(
        warnings,
        [
            "tool \"c\" of server \"a__b\" would be published as \"a__b__c\", which tool \"b__c\" of server \"a\" already holds; it is published as \"a__b__c_9e870743\""
        ]
    );

    let (names, warnings) = assign(Tool, &prefixed(), &[("s", vec!["x_y", "x y"])]);
    assert_eq!(names, [vec!["s__x_y", "s__x_y_ada22ceb"]]);
    assert_eq!(warnings.len(), 1);
}

#[test]
fn a_tool_listed_twice_by_one_server_still_gets_unique_names() {
    let (names, warnings) = assign(Tool, &prefixed(), &[("a", vec!["dup", "dup", "dup"])]);
    assert_eq!(
        names,
        [vec!["a__dup", "a__dup_151ec067", "a__dup_5b2e311c"]]
    );
    assert_eq!(
        warnings,
        [
            "server \"a\" lists tool \"dup\" more than once; the repeat is published as \"a__dup_151ec067\"",
            "server \"a\" lists tool \"dup\" more than once; the repeat is published as \"a__dup_5b2e311c\"",
        ]
    );
}

// === assign: original mode ===

#[test]
fn original_mode_keeps_upstream_names_unchanged() {
    let (names, warnings) = assign(
        Tool,
        &original(),
        &[
            ("a", vec!["echo", "read file", "日本", &"x".repeat(80)]),
            ("b", vec!["add"]),
        ],
    );
    assert_eq!(
        names,
        [
            vec![
                "echo".to_owned(),
                "read file".into(),
                "日本".into(),
                "x".repeat(80)
            ],
            vec!["add".to_owned()]
        ]
    );
    assert!(warnings.is_empty());
}

#[test]
fn in_original_mode_the_later_server_gets_the_prefixed_name_and_a_warning() {
    let (names, warnings) = assign(
        Tool,
        &original(),
        &[
            ("a", vec!["echo", "add"]),
            ("b", vec!["echo", "sub"]),
            ("c", vec!["echo"]),
        ],
    );
    assert_eq!(
        names,
        [vec!["echo", "add"], vec!["b__echo", "sub"], vec!["c__echo"]]
    );
    assert_eq!(
        warnings,
        [
            "tool \"echo\" of server \"b\" is also offered by server \"a\"; it is published as \"b__echo\"",
            "tool \"echo\" of server \"c\" is also offered by server \"a\"; it is published as \"c__echo\"",
        ]
    );
}

#[test]
fn in_original_mode_a_displaced_tool_takes_its_prefixed_name_or_else_the_hash() {
    // "c" offers tools literally named like the prefixed names given out before them.
    let (names, warnings) = assign(
        Tool,
        &original(),
        &[
            ("a", vec!["echo"]),
            ("b", vec!["echo"]),
            ("c", vec!["b__echo", "c__b__echo"]),
        ],
    );
    assert_eq!(
        names,
        [
            vec!["echo"],
            vec!["b__echo"],
            vec!["c__b__echo", "c__c__b__echo"]
        ]
    );
    assert_eq!(
        warnings,
        [
            "tool \"echo\" of server \"b\" is also offered by server \"a\"; it is published as \"b__echo\"",
            "tool \"b__echo\" of server \"c\" would be published as \"b__echo\", which tool \"echo\" of server \"b\" already holds; it is published as \"c__b__echo\"",
            "tool \"c__b__echo\" of server \"c\" would be published as \"c__b__echo\", which tool \"b__echo\" of server \"c\" already holds; it is published as \"c__c__b__echo\"",
        ]
    );

    // b's repeat of "echo" would take "b__echo", which a's own tool already holds.
    let (names, warnings) = assign(
        Tool,
        &original(),
        &[("a", vec!["b__echo"]), ("b", vec!["echo", "echo"])],
    );
    assert_eq!(names, [vec!["b__echo"], vec!["echo", "b__echo_5a99fdb4"]]);
    assert_eq!(
        warnings,
        [
            "server \"b\" lists tool \"echo\" more than once; the repeat is published as \"b__echo_5a99fdb4\""
        ]
    );
}

#[test]
fn original_mode_duplicates_within_one_server_are_broken_too() {
    let (names, warnings) = assign(Tool, &original(), &[("a", vec!["dup", "dup"])]);
    assert_eq!(names, [vec!["dup", "a__dup"]]);
    assert_eq!(
        warnings,
        ["server \"a\" lists tool \"dup\" more than once; the repeat is published as \"a__dup\""]
    );
}

// === Properties ===

/// A deterministic mix of names that collide in every way the rules know.
fn tricky_input() -> Vec<(String, Vec<String>)> {
    let long = "t".repeat(70);
    let servers = ["a", "a__b", "b", "x-y", &"s".repeat(64)];
    let tools = [
        "echo",
        "b__echo",
        "echo",
        "x y",
        "x_y",
        "x/y",
        &long,
        &format!("{long}!"),
        "b__c",
        "c",
    ];
    servers
        .iter()
        .map(|s| (s.to_string(), tools.iter().map(|t| t.to_string()).collect()))
        .collect()
}

#[test]
fn all_public_names_are_unique_and_the_same_input_gives_the_same_output() {
    let input = tricky_input();
    let borrowed: Vec<(&str, Vec<&str>)> = input
        .iter()
        .map(|(s, ts)| (s.as_str(), ts.iter().map(String::as_str).collect()))
        .collect();
    for config in [prefixed(), original()] {
        let (names, warnings) = assign(Tool, &config, &borrowed);
        let mut all: Vec<&String> = names.iter().flatten().collect();
        let count = all.len();
        all.sort();
        all.dedup();
        assert_eq!(
            all.len(),
            count,
            "{:?}: duplicate public names",
            config.mode
        );
        assert_eq!(
            names.iter().map(Vec::len).collect::<Vec<_>>(),
            borrowed.iter().map(|(_, t)| t.len()).collect::<Vec<_>>()
        );
        assert!(!warnings.is_empty());
        assert_eq!(assign(Tool, &config, &borrowed), (names.clone(), warnings));
        if config.mode == NamingMode::Prefixed {
            assert!(names.iter().flatten().all(|n| is_public_name(n)));
        }
    }
}

#[test]
fn an_empty_input_gives_no_names() {
    assert_eq!(assign(Tool, &prefixed(), &[]), (vec![], vec![]));
    let (names, warnings) = assign(Tool, &original(), &[("a", vec![])]);
    assert_eq!(names, [Vec::<String>::new()]);
    assert!(warnings.is_empty());
}

// === One rule for every kind of name ===

#[test]
fn prompts_get_the_names_tools_would_get_and_the_same_warnings_but_for_the_noun() {
    let input = tricky_input();
    let borrowed: Vec<(&str, Vec<&str>)> = input
        .iter()
        .map(|(s, ts)| (s.as_str(), ts.iter().map(String::as_str).collect()))
        .collect();
    for mode in [NamingMode::Prefixed, NamingMode::Original] {
        for separator in ["__", ".", "-x-"] {
            let config = NamingConfig {
                mode,
                separator: separator.into(),
            };
            let (tool_names, tool_warnings) = assign(Tool, &config, &borrowed);
            let (prompt_names, prompt_warnings) = assign(Prompt, &config, &borrowed);
            assert_eq!(prompt_names, tool_names, "{mode:?} {separator:?}");
            assert!(!tool_warnings.is_empty());
            // No name in the input holds the word, so it appears only as the noun.
            let as_prompts: Vec<String> = tool_warnings
                .iter()
                .map(|w| w.replace("tool ", "prompt "))
                .collect();
            assert_eq!(prompt_warnings, as_prompts, "{mode:?} {separator:?}");
            assert!(prompt_warnings.iter().all(|w| !w.contains("tool")));
        }
    }
}

#[test]
fn prompt_collisions_are_broken_and_warned_of_in_every_form() {
    // Original mode (the e2e case): the later server's prompt takes its prefixed name.
    let (names, warnings) = assign(
        Prompt,
        &original(),
        &[("a", vec!["greet"]), ("b", vec!["greet"])],
    );
    assert_eq!(names, [vec!["greet"], vec!["b__greet"]]);
    assert_eq!(
        warnings,
        [
            "prompt \"greet\" of server \"b\" is also offered by server \"a\"; it is published as \"b__greet\""
        ]
    );
    // Prefixed mode: two different pairs that prefix alike; the later one gets the hash suffix.
    let (names, warnings) = assign(
        Prompt,
        &prefixed(),
        &[("a", vec!["b__greet"]), ("a__b", vec!["greet"])],
    );
    assert_eq!(names, [vec!["a__b__greet"], vec!["a__b__greet_3863fb98"]]);
    assert_eq!(
        warnings,
        [
            "prompt \"greet\" of server \"a__b\" would be published as \"a__b__greet\", which prompt \"b__greet\" of server \"a\" already holds; it is published as \"a__b__greet_3863fb98\""
        ]
    );
    // One server listing a prompt twice.
    let (names, warnings) = assign(Prompt, &prefixed(), &[("a", vec!["dup", "dup"])]);
    assert_eq!(names, [vec!["a__dup", "a__dup_151ec067"]]);
    assert_eq!(
        warnings,
        [
            "server \"a\" lists prompt \"dup\" more than once; the repeat is published as \"a__dup_151ec067\""
        ]
    );
}

#[test]
fn a_long_prompt_name_is_shortened_with_the_hash_a_tool_would_get() {
    let prompt = "p".repeat(70);
    let (names, warnings) = assign(Prompt, &prefixed(), &[("srv", vec![&prompt])]);
    assert_eq!(names, [vec![prefixed_name("srv", &prompt, "__")]]);
    assert_eq!(names[0][0].len(), MAX_NAME_LEN);
    assert_eq!(
        names[0][0],
        "srv__pppppppppppppppppppppppppppppppppppppppppppppppppp_36cff375"
    );
    assert!(warnings.is_empty(), "shortening is no collision");
    // Original mode keeps it as it is, like a tool's.
    let (names, _) = assign(Prompt, &original(), &[("srv", vec![&prompt])]);
    assert_eq!(names, [vec![prompt]]);
}
