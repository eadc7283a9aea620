//! A 30-second chaos soak of the real proxy binary with real fault servers (loopback only).
//! Needs the workspace's binaries: `cargo build --workspace --bins` first.
//! `SOAK_SEED=N` repeats a run's choices; the report lands in the target's tmp dir.

use std::path::PathBuf;
use std::time::Duration;

use mcp_supervisor_soak::{Options, clock_seed, run, write_outputs};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_30_second_chaos_soak_keeps_every_promise() {
    let bin_dir = PathBuf::from(env!("CARGO_BIN_EXE_mcp-supervisor-soak"))
        .parent()
        .expect("the target folder")
        .to_path_buf();
    let seed = std::env::var("SOAK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(clock_seed);
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let mut options = Options::new(Duration::from_secs(30), seed, bin_dir);
    options.work_dir = Some(out.join(format!("short-soak-{seed}")));
    let mut report = run(&options)
        .await
        .unwrap_or_else(|error| panic!("the soak could not run (seed {seed}): {error:#}"));
    let report_path = out.join("short_soak.json");
    write_outputs(
        &mut report,
        Some(&report_path),
        Some(&out.join("short_soak.svg")),
    )
    .expect("write the report");
    println!("{}", report.summary());

    let failures: Vec<String> = report
        .failures()
        .iter()
        .map(|v| {
            format!(
                "({}) {}: {}\n    evidence: {}",
                v.key, v.title, v.detail, v.evidence
            )
        })
        .collect();
    assert!(
        failures.is_empty(),
        "soak verdicts failed (seed {seed}; report {}, logs in {}):\n{}",
        report_path.display(),
        report.work_dir.display(),
        failures.join("\n")
    );
    for key in ["a", "b", "c", "c2", "d", "d2", "e", "f", "g", "h"] {
        assert!(
            report.verdicts.iter().any(|v| v.key == key && v.pass),
            "verdict ({key}) is missing"
        );
    }
    assert!(
        report.totals.calls > 100,
        "the load ran: {} calls",
        report.totals.calls
    );
    // Both kinds of client made calls, and the plain ones took the pass-through.
    for kind in ["rmcp", "plain"] {
        let calls = report.totals.by_client_kind.get(kind);
        assert!(
            calls.is_some_and(|k| k.ok > 20),
            "{kind} clients made successful calls: {calls:?}"
        );
    }
    assert!(
        report.totals.plain_json_answers > 20,
        "the plain clients' calls took the pass-through: {} JSON answers",
        report.totals.plain_json_answers
    );
    assert!(
        report.totals.chaos_actions.values().sum::<usize>() >= 5,
        "chaos ran: {:?}",
        report.totals.chaos_actions
    );
}
