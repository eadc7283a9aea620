//! The `/metrics` text as prometheus-client writes it: the names, labels, HELP and TYPE lines
//! that docs/operations.md lists (format 0.0.4: HELP and TYPE on the `_total` name, no `# EOF`).

use std::sync::atomic::Ordering;
use std::time::Duration;

use mcp_supervisor::{ServerState, ServerStatus, ToolList};
use mcp_supervisor_front::metrics::{self, Metrics};

fn status(name: &str, state: ServerState, restarts: u64) -> ServerStatus {
    ServerStatus {
        name: name.into(),
        state,
        generation: 3,
        attempts: 0,
        max_attempts: 10,
        restarts,
        last_error: None,
        tools: 7,
        uptime_ms: None,
        pid: None,
        enabled: true,
        tool_list: ToolList::Live,
        instances: 0,
        withheld_tools: 1,
        results_cut: 4,
        sandbox: None,
    }
}

/// Whether `lines` stand together, in this order, in `text`.
fn has_block(text: &str, lines: &[&str]) -> bool {
    text.contains(&(lines.join("\n") + "\n"))
}

#[test]
fn counters_and_gauges_keep_their_names_labels_help_and_type() {
    let metrics = Metrics::default();
    metrics.sessions_forged.store(2, Ordering::Relaxed);
    metrics.sessions_expired.store(1, Ordering::Relaxed);
    metrics.notifications_dropped.store(9, Ordering::Relaxed);
    let servers = [
        status("alpha", ServerState::Ready, 5),
        status("b-2", ServerState::GaveUp, 0),
    ];
    let text = metrics.render(&servers, 6);

    assert!(!text.contains("# EOF"), "Prometheus text 0.0.4:\n{text}");
    assert!(
        has_block(
            &text,
            &[
                "# HELP mcp_supervisor_restarts_total Lost or failed connections replaced by a ready one.",
                "# TYPE mcp_supervisor_restarts_total counter",
                "mcp_supervisor_restarts_total{server=\"alpha\"} 5",
                "mcp_supervisor_restarts_total{server=\"b-2\"} 0",
            ]
        ),
        "{text}"
    );
    assert!(
        has_block(
            &text,
            &[
                "# TYPE mcp_supervisor_server_up gauge",
                "mcp_supervisor_server_up{server=\"alpha\"} 1",
                "mcp_supervisor_server_up{server=\"b-2\"} 0",
            ]
        ),
        "{text}"
    );
    assert!(text.contains("mcp_supervisor_server_state{server=\"b-2\",state=\"gave_up\"} 1\n"));
    assert!(text.contains("mcp_supervisor_server_state{server=\"b-2\",state=\"ready\"} 0\n"));
    assert!(
        has_block(
            &text,
            &[
                "# HELP mcp_supervisor_sessions_refused_total Session ids answered 404: forged (not sealed with our key) or expired (older than sessionMaxAgeMs).",
                "# TYPE mcp_supervisor_sessions_refused_total counter",
                "mcp_supervisor_sessions_refused_total{reason=\"forged\"} 2",
                "mcp_supervisor_sessions_refused_total{reason=\"expired\"} 1",
            ]
        ),
        "{text}"
    );
    assert!(
        has_block(
            &text,
            &[
                "# TYPE mcp_supervisor_notifications_dropped_total counter",
                "mcp_supervisor_notifications_dropped_total 9",
            ]
        ),
        "{text}"
    );
    assert!(
        has_block(
            &text,
            &[
                "# TYPE mcp_supervisor_trace_spans_dropped_total counter",
                "mcp_supervisor_trace_spans_dropped_total 6",
            ]
        ),
        "{text}"
    );
    assert!(
        has_block(
            &text,
            &[
                "# TYPE mcp_supervisor_withheld_tools gauge",
                "mcp_supervisor_withheld_tools{server=\"alpha\"} 1",
            ]
        ),
        "{text}"
    );
    // Every family once, each HELP right before its TYPE.
    let types: Vec<&str> = text.lines().filter(|l| l.starts_with("# TYPE ")).collect();
    assert_eq!(types.len(), 15, "{text}");
    for line in &types {
        let name = line.split(' ').nth(2).unwrap_or_default();
        assert_eq!(
            text.matches(&format!("# TYPE {name} ")).count(),
            1,
            "{name}"
        );
        assert!(
            text.contains(&format!("# HELP {name} ")),
            "{name} has no HELP"
        );
    }
}

#[test]
fn calls_are_counted_by_outcome_and_latency() {
    let metrics = Metrics::default();
    metrics.record("ok", Duration::from_millis(3));
    metrics.record("ok", Duration::from_millis(700));
    metrics.record(
        metrics::outcome(Err(&mcp_supervisor::CallError::NotAuthorized {
            server: "s".into(),
            tool: "t".into(),
            message: "step-up".into(),
        })),
        Duration::from_secs(2),
    );
    metrics.record("no such outcome", Duration::from_secs(40));
    let in_flight = metrics.start();
    let text = metrics.render(&[], 0);
    drop(in_flight);

    assert!(
        has_block(
            &text,
            &[
                "# HELP mcp_supervisor_calls_in_flight Tool calls through the proxy under way now.",
                "# TYPE mcp_supervisor_calls_in_flight gauge",
                "mcp_supervisor_calls_in_flight 1",
            ]
        ),
        "{text}"
    );
    assert!(
        has_block(
            &text,
            &[
                "# HELP mcp_supervisor_calls_total Tool calls through the proxy, by outcome.",
                "# TYPE mcp_supervisor_calls_total counter",
                "mcp_supervisor_calls_total{outcome=\"ok\"} 2",
            ]
        ),
        "{text}"
    );
    assert!(text.contains("mcp_supervisor_calls_total{outcome=\"not_authorized\"} 1\n"));
    assert!(text.contains("mcp_supervisor_calls_total{outcome=\"other\"} 1\n"));
    assert!(text.contains("mcp_supervisor_calls_total{outcome=\"timeout\"} 0\n"));
    assert!(
        has_block(
            &text,
            &[
                "# HELP mcp_supervisor_call_duration_seconds Tool call latency through the proxy.",
                "# TYPE mcp_supervisor_call_duration_seconds histogram",
                "mcp_supervisor_call_duration_seconds_bucket{le=\"0.001\"} 0",
                "mcp_supervisor_call_duration_seconds_bucket{le=\"0.0025\"} 0",
                "mcp_supervisor_call_duration_seconds_bucket{le=\"0.005\"} 1",
                "mcp_supervisor_call_duration_seconds_bucket{le=\"0.01\"} 1",
                "mcp_supervisor_call_duration_seconds_bucket{le=\"0.025\"} 1",
                "mcp_supervisor_call_duration_seconds_bucket{le=\"0.05\"} 1",
                "mcp_supervisor_call_duration_seconds_bucket{le=\"0.1\"} 1",
                "mcp_supervisor_call_duration_seconds_bucket{le=\"0.25\"} 1",
                "mcp_supervisor_call_duration_seconds_bucket{le=\"0.5\"} 1",
                "mcp_supervisor_call_duration_seconds_bucket{le=\"1\"} 2",
                "mcp_supervisor_call_duration_seconds_bucket{le=\"5\"} 3",
                "mcp_supervisor_call_duration_seconds_bucket{le=\"30\"} 3",
                "mcp_supervisor_call_duration_seconds_bucket{le=\"+Inf\"} 4",
                "mcp_supervisor_call_duration_seconds_sum 42.703",
                "mcp_supervisor_call_duration_seconds_count 4",
            ]
        ),
        "{text}"
    );
}
