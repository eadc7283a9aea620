//! The client half of the official conformance suite (`@modelcontextprotocol/conformance`
//! 0.2.0-alpha.12, installed as `conformance-next` by `scripts/install-test-deps.sh`), with
//! `mcp-supervisor` as the client under test.
//!
//! For each requirement set the suite knows (2025-11-25 on the handshake wire, 2026-07-28 on the
//! stateless one) the suite starts its test servers and runs `conformance_client/adapter.py`,
//! which drives the real binary as a user would: a config naming the server's URL, `tools`,
//! `call`, and `wrap --url` under the official Python SDK client where a scenario needs a client
//! with callbacks. The suite judges what reached its servers; its own `--expected-failures`
//! baseline (`conformance_client/expected-failures.yml`) fails the run on an unlisted failure
//! and on a listed scenario that passes. This test asserts the suite's verdict and that every
//! scenario outside the baseline ran and passed.

mod interop_support;
mod support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use interop_support::*;
use support::{supervisor_bin, temp_dir};

/// One requirement set's run, start to end (the suite runs its scenarios in parallel; about 5 s
/// here).
const RUN_LIMIT: Duration = Duration::from_secs(300);

/// Scenarios that must pass in each requirement set: every required client scenario that is not
/// about OAuth.
const MUST_PASS_2025: &[&str] = &[
    "initialize",
    "tools_call",
    "elicitation-sep1034-client-defaults",
    "sse-retry",
];
const MUST_PASS_2026: &[&str] = &[
    "tools_call",
    "request-metadata",
    "sep-2322-client-request-state",
    "http-standard-headers",
    "http-custom-headers",
    "http-invalid-tool-headers",
    "json-schema-ref-no-deref",
];

/// The auth extension scenarios (not scored): the only ones allowed to fail, each listed with
/// its reason in expected-failures.yml.
const EXTENSIONS_FAILING: &[&str] = &[
    "auth/client-credentials-jwt",
    "auth/enterprise-managed-authorization",
    "auth/dpop",
    "auth/dpop-nonce",
    "auth/wif-jwt-bearer",
];

/// OAuth scenarios that must pass in both requirement sets (the 2026-07-28 set adds more, which
/// the suite's baseline holds to passing as well).
const MUST_PASS_AUTH: &[&str] = &[
    "auth/metadata-default",
    "auth/metadata-var1",
    "auth/metadata-var2",
    "auth/metadata-var3",
    "auth/basic-cimd",
    "auth/scope-from-www-authenticate",
    "auth/scope-from-scopes-supported",
    "auth/scope-omitted-when-undefined",
    "auth/scope-step-up",
    "auth/scope-retry-limit",
    "auth/token-endpoint-auth-basic",
    "auth/token-endpoint-auth-post",
    "auth/token-endpoint-auth-none",
    "auth/pre-registration",
    "auth/client-credentials-basic",
];

fn here() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance_client")
}

/// The suite's entry point: `conformance-next` is an npm alias, so its `conformance` binary
/// would clash with the older pin's; run its script with the pinned Node (≥ 22) instead.
fn suite() -> PathBuf {
    let node = tool("node");
    let script = node
        .parent()
        .and_then(Path::parent)
        .map(|modules| modules.join("conformance-next/dist/index.js"))
        .expect("node_modules");
    assert!(
        script.exists(),
        "{} is missing: run scripts/install-test-deps.sh",
        script.display()
    );
    script
}

/// Each scenario's line of the suite summary: name → passed.
fn summary(stdout: &str) -> Vec<(String, bool)> {
    let Some(summary) = stdout.split("=== SUITE SUMMARY ===").nth(1) else {
        return Vec::new();
    };
    summary
        .lines()
        .take_while(|l| !l.starts_with("Not scored"))
        .filter_map(|line| {
            let line = line.trim();
            let (ok, rest) = if let Some(rest) = line.strip_prefix('✓') {
                (true, rest)
            } else {
                (false, line.strip_prefix('✗')?)
            };
            let (name, _) = rest.trim().split_once(": ")?;
            Some((name.to_string(), ok))
        })
        .collect()
}

fn run_requirements(dir: &Path, revision: &str) -> Vec<(String, bool)> {
    let node = tool("node");
    let home = dir.join(format!("home-{revision}"));
    std::fs::create_dir_all(&home).expect("HOME");
    let adapter = here().join("adapter.py");
    let mut cmd = Command::new(&node);
    cmd.arg(suite())
        .args(["client", "--requirements", revision, "--command"])
        .arg(format!("{} {}", python().display(), adapter.display()))
        .arg("--expected-failures")
        .arg(here().join("expected-failures.yml"))
        .arg("-o")
        .arg(dir.join(format!("results-{revision}")))
        .env("MCP_SUPERVISOR_BIN", supervisor_bin())
        .env("MCP_SUPERVISOR_PYTHON", python())
        .env("HOME", home)
        .env("RUST_LOG", "warn");
    let (status, out, err) = run_bounded(
        &format!("conformance client {revision}"),
        cmd,
        dir,
        RUN_LIMIT,
    );
    assert!(
        status.success(),
        "the suite's verdict for {revision} is not clean ({status}): an unlisted failure, or a \
         listed one that now passes (then remove it from expected-failures.yml)\n{out}\n{err}"
    );
    summary(&out)
}

#[test]
fn every_client_scenario_passes_but_the_listed_auth_extensions() {
    let dir = temp_dir("conformance-client");
    for (revision, must_pass) in [
        ("2025-11-25", MUST_PASS_2025),
        ("2026-07-28", MUST_PASS_2026),
    ] {
        let results = run_requirements(&dir, revision);
        let passed: BTreeSet<&str> = results
            .iter()
            .filter(|(_, ok)| *ok)
            .map(|(n, _)| n.as_str())
            .collect();
        for scenario in must_pass.iter().chain(MUST_PASS_AUTH) {
            assert!(
                passed.contains(scenario),
                "{revision}: {scenario} did not pass (passed: {passed:?})"
            );
        }
        // Whatever failed is an auth extension the baseline lists.
        for (name, ok) in &results {
            assert!(
                *ok || EXTENSIONS_FAILING.contains(&name.as_str()),
                "{revision}: {name} failed and is not a listed auth extension"
            );
        }
        eprintln!(
            "conformance client {revision}: {} of {} scenarios passed",
            passed.len(),
            results.len()
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}
