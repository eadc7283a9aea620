//! Tool filters: which of a server's upstream tool names it publishes, from the glob patterns of
//! its `tools: { "allow": [..], "deny": [..] }`. Pure values and functions; it never looks at a
//! public name (filters judge what the server calls a tool) and never does I/O.
//!
//! The rule: a tool is published when `allow` is absent or one of its patterns matches the name,
//! and no `deny` pattern matches it. Deny wins. Patterns are globs (`*`, `?`, `[abc]`, `{a,b}`),
//! matched against the whole name, case-sensitively.

use globset::{Glob, GlobBuilder, GlobMatcher};

/// A compiled pattern with the text it was written as.
#[derive(Clone, Debug)]
struct Pattern {
    text: String,
    matcher: GlobMatcher,
}

/// A server's tool filter. The default lets every tool through.
#[derive(Clone, Debug, Default)]
pub struct ToolFilter {
    /// `None`: every tool is allowed (before `deny`).
    allow: Option<Vec<Pattern>>,
    deny: Vec<Pattern>,
}

/// Filters compare by the patterns they were written with, so a reload can tell a changed one.
impl PartialEq for ToolFilter {
    fn eq(&self, other: &Self) -> bool {
        let texts = |p: &[Pattern]| p.iter().map(|p| p.text.clone()).collect::<Vec<_>>();
        self.allow.as_deref().map(texts) == other.allow.as_deref().map(texts)
            && texts(&self.deny) == texts(&other.deny)
    }
}

/// Which list a pattern belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum List {
    Allow,
    Deny,
}

impl List {
    pub fn key(self) -> &'static str {
        match self {
            List::Allow => "allow",
            List::Deny => "deny",
        }
    }
}

/// Why a pattern cannot be used, for the config's problem message.
pub fn check_pattern(pattern: &str) -> Result<(), String> {
    compile(pattern).map(|_| ())
}

fn compile(pattern: &str) -> Result<GlobMatcher, String> {
    if pattern.is_empty() {
        return Err("must be a glob pattern (got an empty string)".to_owned());
    }
    // Tool names have no path separators: `*` matches any run of characters.
    GlobBuilder::new(pattern)
        .literal_separator(false)
        .backslash_escape(true)
        .build()
        .map(|glob: Glob| glob.compile_matcher())
        .map_err(|e| format!("is not a valid glob pattern: {}", e.kind()))
}

impl ToolFilter {
    /// A filter from its pattern lists (`allow: None` when the key is absent). The first bad
    /// pattern is an error with its list and index.
    pub fn new(allow: Option<&[String]>, deny: &[String]) -> Result<Self, (List, usize, String)> {
        let build = |list: List, patterns: &[String]| {
            patterns
                .iter()
                .enumerate()
                .map(|(i, text)| {
                    compile(text)
                        .map(|matcher| Pattern {
                            text: text.clone(),
                            matcher,
                        })
                        .map_err(|why| (list, i, why))
                })
                .collect::<Result<Vec<_>, _>>()
        };
        Ok(Self {
            allow: allow.map(|a| build(List::Allow, a)).transpose()?,
            deny: build(List::Deny, deny)?,
        })
    }

    /// Whether the filter lets every tool through.
    pub fn is_open(&self) -> bool {
        self.allow.is_none() && self.deny.is_empty()
    }

    /// Whether a tool of this upstream name is published.
    pub fn allows(&self, name: &str) -> bool {
        let allowed = match &self.allow {
            None => true,
            Some(patterns) => patterns.iter().any(|p| p.matcher.is_match(name)),
        };
        allowed && !self.deny.iter().any(|p| p.matcher.is_match(name))
    }

    /// The patterns that match none of `names` (what the server lists), in config order, each
    /// with its list and index: for `check`, which warns about them.
    pub fn unmatched<'a>(&'a self, names: &[&str]) -> Vec<(List, usize, &'a str)> {
        let allow = self.allow.iter().flatten().enumerate();
        let allow = allow.map(|(i, p)| (List::Allow, i, p));
        let deny = self
            .deny
            .iter()
            .enumerate()
            .map(|(i, p)| (List::Deny, i, p));
        allow
            .chain(deny)
            .filter(|(_, _, p)| !names.iter().any(|n| p.matcher.is_match(n)))
            .map(|(list, i, p)| (list, i, p.text.as_str()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filter(allow: Option<&[&str]>, deny: &[&str]) -> ToolFilter {
        let own = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let allow = allow.map(own);
        ToolFilter::new(allow.as_deref(), &own(deny)).expect("valid patterns")
    }

    const NAMES: &[&str] = &[
        "read_file",
        "write_file",
        "delete_file",
        "list_dir",
        "search",
        "Search",
        "a.b",
        "x*y",
    ];

    fn allowed(f: &ToolFilter) -> Vec<&'static str> {
        NAMES.iter().copied().filter(|n| f.allows(n)).collect()
    }

    #[test]
    fn the_default_filter_lets_every_tool_through() {
        let f = ToolFilter::default();
        assert!(f.is_open());
        assert_eq!(allowed(&f), NAMES);
        assert!(f.unmatched(NAMES).is_empty());
        assert_eq!(f, filter(None, &[]));
    }

    #[test]
    fn allow_keeps_only_what_a_pattern_matches() {
        let f = filter(Some(&["read_*", "list_dir"]), &[]);
        assert!(!f.is_open());
        assert_eq!(allowed(&f), ["read_file", "list_dir"]);
    }

    #[test]
    fn deny_removes_what_a_pattern_matches() {
        let f = filter(None, &["*_file"]);
        assert_eq!(allowed(&f), ["list_dir", "search", "Search", "a.b", "x*y"]);
    }

    #[test]
    fn deny_wins_over_allow() {
        let f = filter(Some(&["*_file", "search"]), &["delete_*"]);
        assert_eq!(allowed(&f), ["read_file", "write_file", "search"]);
        let f = filter(Some(&["search"]), &["search"]);
        assert!(allowed(&f).is_empty());
    }

    #[test]
    fn matching_is_whole_name_and_case_sensitive() {
        let f = filter(Some(&["search"]), &[]);
        assert_eq!(allowed(&f), ["search"]);
        let f = filter(Some(&["sea"]), &[]);
        assert!(allowed(&f).is_empty(), "a prefix is not a match");
        let f = filter(Some(&["[Ss]earch"]), &[]);
        assert_eq!(allowed(&f), ["search", "Search"]);
    }

    #[test]
    fn every_glob_form_works_on_tool_names() {
        let cases: &[(&str, &[&str])] = &[
            ("*", NAMES),
            ("?earch", &["search", "Search"]),
            ("{read,write}_file", &["read_file", "write_file"]),
            ("[!r]*_file", &["write_file", "delete_file"]),
            ("a.b", &["a.b"]),
            ("x\\*y", &["x*y"]),
            ("*.*", &["a.b"]),
        ];
        for (pattern, expected) in cases {
            let f = filter(Some(&[pattern]), &[]);
            assert_eq!(allowed(&f), *expected, "pattern {pattern}");
        }
    }

    #[test]
    fn bad_patterns_are_named_by_list_and_index() {
        let own = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let err = ToolFilter::new(Some(&own(&["ok", "[unclosed"])), &[]).unwrap_err();
        assert_eq!((err.0, err.1), (List::Allow, 1));
        assert!(
            err.2.starts_with("is not a valid glob pattern"),
            "{}",
            err.2
        );
        let err = ToolFilter::new(None, &own(&["a", "b", ""])).unwrap_err();
        assert_eq!(
            err,
            (
                List::Deny,
                2,
                "must be a glob pattern (got an empty string)".to_owned()
            )
        );
        assert!(check_pattern("{a,b").is_err());
        assert!(check_pattern("a{b,c}").is_ok());
    }

    #[test]
    fn unmatched_patterns_are_listed_in_config_order() {
        let f = filter(Some(&["read_*", "nothing_*"]), &["gone", "delete_file"]);
        assert_eq!(
            f.unmatched(NAMES),
            [(List::Allow, 1, "nothing_*"), (List::Deny, 0, "gone")]
        );
        assert_eq!(f.unmatched(&[]).len(), 4, "an empty list matches nothing");
    }

    #[test]
    fn filters_compare_by_their_patterns() {
        assert_eq!(filter(Some(&["a"]), &["b"]), filter(Some(&["a"]), &["b"]));
        assert_ne!(filter(Some(&["a"]), &[]), filter(None, &["a"]));
        assert_ne!(filter(Some(&[]), &[]), filter(None, &[]));
        assert_eq!(List::Allow.key(), "allow");
        assert_eq!(List::Deny.key(), "deny");
    }
}
