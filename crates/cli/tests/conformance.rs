//! The server half of the official MCP conformance suite (`@modelcontextprotocol/conformance`
//! 0.2.0-alpha.12, installed as `conformance-next` by `scripts/install-test-deps.sh`), run
//! against `mcp-fault-server --conformance` directly (the baseline) and through the proxy:
//! `wrap` on its HTTP face with an HTTP upstream, `wrap` on its stdio face, and `serve`. It owns
//! the comparison with `conformance_expected_failures.json`; it must never skip a target or
//! tolerate a failure that file does not name (nor keep an entry that no longer fails).
//!
//! Each target gets one suite run per requirement set (2025-11-25 and 2026-07-28); extension
//! scenarios are left out (the suite runs them but never scores them). A scenario passes when it
//! has at least one passed check and no failed one.

mod interop_support;
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use interop_support::*;
use serde_json::{Value, json};
use support::{fault_bin, free_port, temp_dir, write_config};

/// The requirement sets the suite offers for servers.
const REQUIREMENTS: [&str; 2] = ["2025-11-25", "2026-07-28"];
/// The targets, baseline first.
const TARGETS: [&str; 4] = ["direct", "wrap-http", "wrap-stdio", "serve"];
/// One suite run (a run takes a few seconds; its own per-scenario timeout is 30 s).
const SUITE_LIMIT: Duration = Duration::from_secs(240);

/// `scenario@requirements`.
type Key = String;

fn key(scenario: &str, requirements: &str) -> Key {
    format!("{scenario}@{requirements}")
}

fn url(port: u16) -> String {
    format!("http://127.0.0.1:{port}/mcp")
}

/// The suite's entry point: the `conformance-next` alias next to the tools' `.bin` folder.
fn suite_script() -> PathBuf {
    let script = tools_dir().join("../conformance-next/dist/index.js");
    assert!(
        script.exists(),
        "conformance 0.2.0-alpha.12 is missing at {}: run `scripts/install-test-deps.sh` first",
        script.display()
    );
    script
}

fn tools_dir() -> PathBuf {
    mcp_supervisor_testkit::tools_dir()
}

/// One run of the suite's server scenarios of `requirements` against `url`; its summary and
/// the folder of its per-scenario results.
fn run_suite(dir: &Path, target: &str, requirements: &str, url: &str) -> (Conformance, PathBuf) {
    let out = dir.join(format!("results-{target}-{requirements}"));
    let home = dir.join("home");
    std::fs::create_dir_all(&home).expect("HOME");
    let mut cmd = Command::new(tool("node"));
    cmd.arg(suite_script())
        .args(["server", "--url", url, "--requirements", requirements, "-o"])
        .arg(&out)
        .env("HOME", home);
    // It exits 1 when a check fails: judge the summary.
    let what = format!("conformance {target} {requirements}");
    let (status, stdout, stderr) = run_bounded(&what, cmd, dir, SUITE_LIMIT);
    let parsed = parse_conformance(&stdout);
    assert!(
        parsed.scenarios.len() >= 25,
        "{what} ({status}) ran {} scenarios:\n{stdout}\n{stderr}",
        parsed.scenarios.len()
    );
    (parsed, out)
}

/// Scored scenarios of one target over both requirement sets: key → passed.
struct Outcome {
    scenarios: BTreeMap<Key, bool>,
    results: Vec<PathBuf>,
}

impl Outcome {
    fn failed(&self) -> BTreeSet<Key> {
        self.scenarios
            .iter()
            .filter(|(_, ok)| !**ok)
            .map(|(k, _)| k.clone())
            .collect()
    }

    fn passed(&self) -> usize {
        self.scenarios.values().filter(|ok| **ok).count()
    }

    fn count(&self, requirements: &str) -> (usize, usize) {
        let suffix = format!("@{requirements}");
        let of: Vec<bool> = self
            .scenarios
            .iter()
            .filter(|(k, _)| k.ends_with(&suffix))
            .map(|(_, ok)| *ok)
            .collect();
        (of.iter().filter(|ok| **ok).count(), of.len())
    }
}

/// Both requirement sets against a target that `start` brings up afresh for each: a proxy
/// fronts one host's client, so each set (one era of client) gets its own, as a host would.
fn run_target(
    dir: &Path,
    target: &str,
    start: &mut dyn FnMut(&str) -> (Option<Proc>, String),
) -> Outcome {
    let mut outcome = Outcome {
        scenarios: BTreeMap::new(),
        results: Vec::new(),
    };
    for requirements in REQUIREMENTS {
        let (proc, url) = start(requirements);
        let (parsed, results) = run_suite(dir, target, requirements, &url);
        if let Some(mut proc) = proc {
            proc.stop();
        }
        for (scenario, ok) in &parsed.scenarios {
            if !parsed.extensions.contains(scenario) {
                outcome.scenarios.insert(key(scenario, requirements), *ok);
            }
        }
        outcome.results.push(results);
    }
    outcome
}

/// The fault server over HTTP on a free port, listening.
fn start_fault_http(dir: &Path) -> (Proc, u16) {
    let port = free_port();
    let mut cmd = Command::new(fault_bin());
    cmd.args(["--conformance", "--http", &format!("127.0.0.1:{port}")]);
    let mut fault = Proc::spawn("fault-server http", cmd, dir);
    fault.wait_listening(port, LISTEN_LIMIT);
    (fault, port)
}

/// One entry of the expected-failures file.
struct Expected {
    target: String,
    key: Key,
    kind: String,
}

fn expected_failures() -> Vec<Expected> {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance_expected_failures.json");
    let text = std::fs::read_to_string(&path).expect("read conformance_expected_failures.json");
    let file: Value = serde_json::from_str(&text).expect("conformance_expected_failures.json");
    let entries = file["failures"].as_array().expect("a failures array");
    entries
        .iter()
        .map(|entry| {
            let field = |name: &str| {
                entry[name]
                    .as_str()
                    .unwrap_or_else(|| panic!("entry without {name}: {entry}"))
                    .to_string()
            };
            assert!(
                !field("reason").trim().is_empty(),
                "entry without a reason: {entry}"
            );
            let target = field("target");
            assert!(
                TARGETS.contains(&target.as_str()),
                "unknown target in {entry}"
            );
            let kind = field("kind");
            assert!(
                ["fault-server", "proxy", "name-dependent", "serve-era"].contains(&kind.as_str()),
                "unknown kind in {entry}"
            );
            Expected {
                key: key(&field("scenario"), &field("requirements")),
                target,
                kind,
            }
        })
        .collect()
}

fn listed(expected: &[Expected], target: &str, kind: Option<&str>) -> BTreeSet<Key> {
    expected
        .iter()
        .filter(|e| e.target == target && kind.is_none_or(|k| e.kind == k))
        .map(|e| e.key.clone())
        .collect()
}

/// The failures of `target` that are not failures of the baseline, against what the file lists.
fn compare(target: &str, actual: &BTreeSet<Key>, listed: &BTreeSet<Key>) -> Vec<String> {
    let mut problems = Vec::new();
    for key in actual.difference(listed) {
        problems.push(format!("{target}: {key} fails but is not listed"));
    }
    for key in listed.difference(actual) {
        problems.push(format!(
            "{target}: {key} is listed but passes now: remove it from the file"
        ));
    }
    problems
}

/// The failed checks of `scenario` in a results folder: (check id, error message).
fn failed_checks(results: &Path, scenario: &str) -> Vec<(String, String)> {
    let prefix = format!("server-{scenario}-");
    let Ok(entries) = std::fs::read_dir(results) else {
        return Vec::new();
    };
    let mut failed = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        // The folder is `server-<scenario>-<timestamp>`; the timestamp starts with the year.
        let Some(rest) = name.strip_prefix(&prefix) else {
            continue;
        };
        if !rest.starts_with(|c: char| c.is_ascii_digit()) {
            continue;
        }
        let text = std::fs::read_to_string(entry.path().join("checks.json")).unwrap_or_default();
        let checks: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        for check in checks.as_array().into_iter().flatten() {
            if check["status"] == "FAILURE" {
                failed.push((
                    check["id"].as_str().unwrap_or_default().to_string(),
                    check["errorMessage"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                ));
            }
        }
    }
    failed
}

#[test]
fn every_server_scenario_that_passes_against_the_fault_server_passes_through_wrap_and_serve_differs_only_by_names()
 {
    let started = Instant::now();
    let dir = temp_dir("conformance-server");
    let expected = expected_failures();
    let mut outcomes: BTreeMap<&str, Outcome> = BTreeMap::new();

    // Baseline: the fault server alone.
    let (mut fault, port) = start_fault_http(&dir);
    outcomes.insert(
        "direct",
        run_target(&dir, "direct", &mut |_| (None, url(port))),
    );

    // wrap, HTTP face, HTTP upstream.
    let args: Vec<String> = vec!["wrap".into(), "--url".into(), url(port)];
    outcomes.insert(
        "wrap-http",
        run_target(&dir, "wrap-http", &mut |requirements| {
            let (proxy, proxy_port) =
                start_http_proxy(&dir, &format!("wrap http-http {requirements}"), &args);
            (Some(proxy), url(proxy_port))
        }),
    );
    fault.stop();

    // wrap, stdio face: the suite speaks only HTTP, so an outer wrap serves HTTP and runs the
    // inner `wrap` over stdio; the inner one runs the fault server. Every message crosses the
    // inner proxy's stdio face.
    let sup = path_str(&support::supervisor_bin());
    let args: Vec<String> = vec![
        "wrap".into(),
        "--".into(),
        sup,
        "wrap".into(),
        "--".into(),
        path_str(&fault_bin()),
        "--conformance".into(),
    ];
    outcomes.insert(
        "wrap-stdio",
        run_target(&dir, "wrap-stdio", &mut |requirements| {
            let (proxy, proxy_port) =
                start_http_proxy(&dir, &format!("wrap stdio {requirements}"), &args);
            (Some(proxy), url(proxy_port))
        }),
    );

    // serve: the fault server under the name `fault`, so its tools and prompts are `fault__…`.
    let config = dir.join("serve.json");
    write_config(
        &config,
        json!({ "fault": { "command": fault_bin(), "args": ["--conformance"] } }),
    );
    let args: Vec<String> = vec!["serve".into(), "--config".into(), path_str(&config)];
    outcomes.insert(
        "serve",
        run_target(&dir, "serve", &mut |requirements| {
            let (proxy, proxy_port) =
                start_http_proxy(&dir, &format!("serve {requirements}"), &args);
            (Some(proxy), url(proxy_port))
        }),
    );

    let mut report = String::new();
    for target in TARGETS {
        let o = &outcomes[target];
        let (p25, n25) = o.count(REQUIREMENTS[0]);
        let (p26, n26) = o.count(REQUIREMENTS[1]);
        report.push_str(&format!(
            "conformance {target}: {}/{} ({} {p25}/{n25}, {} {p26}/{n26}); failing: {:?}\n",
            o.passed(),
            o.scenarios.len(),
            REQUIREMENTS[0],
            REQUIREMENTS[1],
            o.failed()
        ));
    }
    eprintln!("{report}(results under {})", dir.display());

    let direct = outcomes["direct"].failed();
    // Sanity: the suite exercised the fixtures (these pass against the fault server alone).
    for scenario in [
        "tools-call-simple-text@2025-11-25",
        "prompts-get-with-args@2026-07-28",
        "resources-read-text@2026-07-28",
        "input-required-result-multi-round@2026-07-28",
    ] {
        assert_eq!(
            outcomes["direct"].scenarios.get(scenario),
            Some(&true),
            "the fault server alone does not pass {scenario}\n{report}"
        );
    }
    let mut problems = compare("direct", &direct, &listed(&expected, "direct", None));
    for target in ["wrap-http", "wrap-stdio", "serve"] {
        // A scenario the baseline fails cannot pass through a proxy in front of it: only what
        // passes directly is compared.
        let lost: BTreeSet<Key> = outcomes[target]
            .failed()
            .difference(&direct)
            .cloned()
            .collect();
        problems.extend(compare(target, &lost, &listed(&expected, target, None)));
    }
    for entry in &expected {
        let allowed = match entry.target.as_str() {
            "direct" => "fault-server",
            "serve" if entry.kind == "name-dependent" => "name-dependent",
            "serve" if entry.kind == "serve-era" => "serve-era",
            _ => "proxy",
        };
        if entry.kind != allowed {
            problems.push(format!(
                "{} {}: kind {} where {allowed} was expected",
                entry.target, entry.key, entry.kind
            ));
        }
    }
    // serve differs from wrap (HTTP face) only in the name-dependent scenarios and in those
    // that need the server opened in the 2026-07-28 era (serve opens its servers in its own
    // name, at 2025-11-25, unless a server's config asks for that era); each of the latter is a
    // 2026-07-28 scenario that wrap passes.
    for key in listed(&expected, "serve", Some("serve-era")) {
        if !key.ends_with("@2026-07-28") || outcomes["wrap-http"].failed().contains(&key) {
            problems.push(format!(
                "serve {key} is listed as serve-era but is not a 2026-07-28 scenario wrap passes"
            ));
        }
    }
    let serve_proxy = listed(&expected, "serve", Some("proxy"));
    let wrap_proxy = listed(&expected, "wrap-http", Some("proxy"));
    if serve_proxy != wrap_proxy {
        problems.push(format!(
            "serve's proxy failures {serve_proxy:?} differ from wrap's {wrap_proxy:?}"
        ));
    }
    // And each failed check of a name-dependent scenario is about an unprefixed name.
    for key in listed(&expected, "serve", Some("name-dependent")) {
        let Some((scenario, requirements)) = key.split_once('@') else {
            continue;
        };
        let Some(results) = outcomes["serve"]
            .results
            .iter()
            .find(|p| p.to_string_lossy().ends_with(requirements))
        else {
            continue;
        };
        let checks = failed_checks(results, scenario);
        if checks.is_empty() {
            problems.push(format!("serve: {key} has no failed check on record"));
        }
        for (id, message) in checks {
            let about_a_name = message.contains("no server offers")
                || message.contains("not found")
                || message.contains("does not list the diagnostic tool");
            if !about_a_name {
                problems.push(format!(
                    "serve: {key} check {id} fails for another reason than a name: {message}"
                ));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "conformance differs from tests/conformance_expected_failures.json:\n  {}\n\n{report}(results under {})",
        problems.join("\n  "),
        dir.display()
    );
    eprintln!(
        "conformance: all targets as expected in {:?}",
        started.elapsed()
    );
    let _ = std::fs::remove_dir_all(dir);
}
