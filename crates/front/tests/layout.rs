//! The layout, as issue 30 set it and as a newcomer reads it: no circle of imports between the
//! modules of any crate of the workspace (a module's `crate::` paths, outside comments and its
//! unit tests), and no source file of the front or of the binary over 700 lines.
//!
//! Read from the sources, with no parser: a path in a string literal counts as a use, which
//! errs on the side of finding a circle.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The most lines a source file of the front or the binary may have.
const MAX_LINES: usize = 700;

fn crate_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(name)
}

/// Every `.rs` file under `dir`, sorted.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

/// The text a module's imports are read from: without its unit tests and its comments.
fn code_of(text: &str) -> String {
    let text = text
        .find("#[cfg(test)]\nmod tests")
        .map_or(text, |at| &text[..at]);
    text.lines()
        .map(|line| line.find("//").map_or(line, |at| &line[..at]))
        .collect::<Vec<_>>()
        .join("\n")
}

fn identifier(text: &str) -> &str {
    let end = text
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(text.len());
    &text[..end]
}

/// The top-level modules `code` names through `crate::` (`crate::a::b`, `crate::{a, b::c}`).
fn named_modules(code: &str) -> BTreeSet<String> {
    let mut named = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 1;
            let mut item_start = true;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 1 => break,
                    '}' => depth -= 1,
                    ',' if depth == 1 => item_start = true,
                    c if item_start && (c.is_ascii_alphanumeric() || c == '_') => {
                        named.insert(identifier(&group[i..]).to_string());
                        item_start = false;
                    }
                    _ => {}
                }
            }
        } else {
            let name = identifier(rest);
            if !name.is_empty() {
                named.insert(name.to_string());
            }
        }
    }
    named
}

/// Each top-level module of `src` (a file, or a folder with its files) and the modules it
/// names, other than itself; `lib.rs` or `main.rs`, which declares them all, is left out.
fn graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for path in sources(src) {
        let Ok(relative) = path.strip_prefix(src) else {
            continue;
        };
        let Some(first) = relative.components().next() else {
            continue;
        };
        let top = first.as_os_str().to_string_lossy();
        let module = top.strip_suffix(".rs").unwrap_or(&top).to_string();
        if module == "lib" || module == "main" {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let mut named = named_modules(&code_of(&text));
        named.remove(&module);
        graph.entry(module).or_default().extend(named);
    }
    graph
}

/// A circle through the modules of `graph`, if there is one.
fn circle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        module: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|m| m == module) {
            let mut found = path[at..].to_vec();
            found.push(module.to_string());
            return Some(found);
        }
        if done.contains(module) {
            return None;
        }
        path.push(module.to_string());
        for next in graph.get(module).into_iter().flatten() {
            if graph.contains_key(next)
                && let Some(found) = visit(next, graph, path, done)
            {
                return Some(found);
            }
        }
        path.pop();
        done.insert(module.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|module| visit(module, graph, &mut Vec::new(), &mut done))
}

#[test]
fn no_circle_of_imports_between_the_fronts_modules() {
    let graph = graph(&crate_dir("front").join("src"));
    assert!(graph.len() > 20, "the front's modules were read: {graph:?}");
    assert!(
        graph["tools"].contains("fan_out"),
        "a module's imports are read"
    );
    if let Some(found) = circle(&graph) {
        panic!("a circle of imports in the front: {}", found.join(" -> "));
    }
}

#[test]
fn no_circle_of_imports_between_the_modules_of_the_library_the_core_or_the_binary() {
    for (name, modules, edge) in [
        ("mcp-supervisor", 15, ("hub", "supervisor")),
        ("core", 10, ("config", "naming")),
        ("cli", 15, ("commands", "cli")),
    ] {
        let graph = graph(&crate_dir(name).join("src"));
        assert!(
            graph.len() > modules,
            "{name}: its modules were read: {graph:?}"
        );
        assert!(
            graph[edge.0].contains(edge.1),
            "{name}: a module's imports are read ({} -> {})",
            edge.0,
            edge.1
        );
        if let Some(found) = circle(&graph) {
            panic!("a circle of imports in {name}: {}", found.join(" -> "));
        }
    }
}

#[test]
fn a_circle_is_found_where_there_is_one() {
    let code = "use crate::{b, c::X};\nfn f() { crate::d::g(); } // crate::e\n";
    let named = named_modules(&code_of(code));
    assert_eq!(named, ["b", "c", "d"].map(String::from).into());
    let edges = |pairs: &[(&str, &str)]| {
        let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (from, to) in pairs {
            graph
                .entry(from.to_string())
                .or_default()
                .insert(to.to_string());
            graph.entry(to.to_string()).or_default();
        }
        graph
    };
    assert_eq!(
        circle(&edges(&[("a", "b"), ("b", "c"), ("c", "a")])),
        Some(["a", "b", "c", "a"].map(String::from).to_vec())
    );
    assert_eq!(circle(&edges(&[("a", "b"), ("b", "c"), ("a", "c")])), None);
}

#[test]
fn no_source_file_of_the_front_or_the_binary_is_over_700_lines() {
    let mut long = Vec::new();
    for name in ["front", "cli"] {
        for path in sources(&crate_dir(name).join("src")) {
            let lines = std::fs::read_to_string(&path)
                .unwrap_or_default()
                .lines()
                .count();
            if lines > MAX_LINES {
                long.push(format!("{} ({lines} lines)", path.display()));
            }
        }
    }
    assert!(long.is_empty(), "over {MAX_LINES} lines: {long:?}");
}
