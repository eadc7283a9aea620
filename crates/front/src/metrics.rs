//! Call counters and the latency histogram of the proxy, and their Prometheus text rendering
//! together with each server's state from the hub.
//!
//! Plain atomics; it never blocks a call and never holds a lock across an await.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use mcp_supervisor::{CallError, ServerState, ServerStatus};

/// Upper bounds of the latency buckets, in seconds.
const BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0,
];

/// The outcomes a call is counted under.
pub const OUTCOMES: [&str; 9] = [
    "ok",
    "tool_error",
    "server_error",
    "timeout",
    "not_delivered",
    "outcome_unknown",
    "not_ready",
    "cancelled",
    "other",
];

#[derive(Default)]
pub struct Metrics {
    outcomes: [AtomicU64; 9],
    in_flight: AtomicU64,
    buckets: [AtomicU64; 12],
    count: AtomicU64,
    sum_micros: AtomicU64,
    /// HTTP sessions opened here from a sealed id another process (or an earlier cache entry)
    /// gave out.
    pub sessions_resumed: AtomicU64,
    /// Sealed session ids refused: not ours (malformed, altered, another key).
    pub sessions_forged: AtomicU64,
    /// Sealed session ids refused: older than `sessionMaxAgeMs`.
    pub sessions_expired: AtomicU64,
    /// Notifications not delivered to a client whose queue of messages for no request was
    /// full (it did not read).
    pub notifications_dropped: AtomicU64,
}

impl Metrics {
    /// A call begins: it counts as in flight until the returned record is finished or dropped
    /// (a call dropped unfinished, because its client went away, counts as cancelled).
    pub fn start(&self) -> CallRecord<'_> {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        CallRecord {
            metrics: self,
            started: std::time::Instant::now(),
            outcome: None,
        }
    }

    /// Record one call.
    pub fn record(&self, outcome: &str, elapsed: Duration) {
        let index = OUTCOMES
            .iter()
            .position(|o| *o == outcome)
            .unwrap_or(OUTCOMES.len() - 1);
        self.outcomes[index].fetch_add(1, Ordering::Relaxed);
        let seconds = elapsed.as_secs_f64();
        for (bucket, bound) in self.buckets.iter().zip(BUCKETS) {
            if seconds <= bound {
                bucket.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_micros
            .fetch_add(elapsed.as_micros() as u64, Ordering::Relaxed);
    }

    /// The Prometheus text exposition of the counters, of `servers`, and of the trace spans the
    /// host could not export (`spans_dropped`; 0 when it exports none).
    pub fn render(&self, servers: &[ServerStatus], spans_dropped: u64) -> String {
        let mut out = String::new();
        let per_server = |out: &mut String,
                          name: &str,
                          kind: &str,
                          help: &str,
                          value: &dyn Fn(&ServerStatus) -> u64| {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} {kind}");
            for s in servers {
                let _ = writeln!(out, "{name}{{server=\"{}\"}} {}", s.name, value(s));
            }
        };
        per_server(
            &mut out,
            "mcp_supervisor_server_up",
            "gauge",
            "Whether the server is in service (1: ready, or idle until its next request) or not (0).",
            &|s| u64::from(s.state.in_service()),
        );
        let _ = writeln!(
            out,
            "# HELP mcp_supervisor_server_state The server's current state (1 for the state it is in)."
        );
        let _ = writeln!(out, "# TYPE mcp_supervisor_server_state gauge");
        for s in servers {
            for state in ServerState::ALL {
                let v = u8::from(s.state == state);
                let _ = writeln!(
                    out,
                    "mcp_supervisor_server_state{{server=\"{}\",state=\"{}\"}} {v}",
                    s.name,
                    state.as_str()
                );
            }
        }
        per_server(
            &mut out,
            "mcp_supervisor_restarts_total",
            "counter",
            "Lost or failed connections replaced by a ready one.",
            &|s| s.restarts,
        );
        per_server(
            &mut out,
            "mcp_supervisor_reconnect_attempts",
            "gauge",
            "The attempt number within the current outage (0 when ready).",
            &|s| u64::from(s.attempts),
        );
        per_server(
            &mut out,
            "mcp_supervisor_generation",
            "gauge",
            "The current connection generation.",
            &|s| s.generation,
        );
        per_server(
            &mut out,
            "mcp_supervisor_tools",
            "gauge",
            "Tools the server has published.",
            &|s| s.tools as u64,
        );
        per_server(
            &mut out,
            "mcp_supervisor_withheld_tools",
            "gauge",
            "Tools withheld because their definition changed since it was pinned (pin: block), until approved.",
            &|s| s.withheld_tools as u64,
        );
        per_server(
            &mut out,
            "mcp_supervisor_results_cut_total",
            "counter",
            "Tool results larger than the server's maxResultBytes that reached their client cut.",
            &|s| s.results_cut,
        );
        family(
            &mut out,
            "mcp_supervisor_notifications_dropped_total",
            "counter",
            "Notifications not delivered to a client that did not read while its queue of messages for no request was full.",
            &[("", self.notifications_dropped.load(Ordering::Relaxed))],
        );
        family(
            &mut out,
            "mcp_supervisor_sessions_resumed_total",
            "counter",
            "HTTP sessions resumed from their sealed id by a process that did not hold them (another replica, or this one after it let them go).",
            &[("", self.sessions_resumed.load(Ordering::Relaxed))],
        );
        family(
            &mut out,
            "mcp_supervisor_sessions_refused_total",
            "counter",
            "Session ids answered 404: forged (not sealed with our key) or expired (older than sessionMaxAgeMs).",
            &[
                (
                    "reason=\"forged\"",
                    self.sessions_forged.load(Ordering::Relaxed),
                ),
                (
                    "reason=\"expired\"",
                    self.sessions_expired.load(Ordering::Relaxed),
                ),
            ],
        );
        family(
            &mut out,
            "mcp_supervisor_trace_spans_dropped_total",
            "counter",
            "Trace spans that could not be sent to the OTLP endpoint (dropped, never retried).",
            &[("", spans_dropped)],
        );
        family(
            &mut out,
            "mcp_supervisor_calls_in_flight",
            "gauge",
            "Tool calls through the proxy under way now.",
            &[("", self.in_flight.load(Ordering::Relaxed))],
        );
        let outcomes: Vec<(String, u64)> = OUTCOMES
            .iter()
            .zip(&self.outcomes)
            .map(|(o, c)| (format!("outcome=\"{o}\""), c.load(Ordering::Relaxed)))
            .collect();
        let outcomes: Vec<(&str, u64)> = outcomes.iter().map(|(l, v)| (l.as_str(), *v)).collect();
        family(
            &mut out,
            "mcp_supervisor_calls_total",
            "counter",
            "Tool calls through the proxy, by outcome.",
            &outcomes,
        );
        let _ = writeln!(
            out,
            "# HELP mcp_supervisor_call_duration_seconds Tool call latency through the proxy."
        );
        let _ = writeln!(out, "# TYPE mcp_supervisor_call_duration_seconds histogram");
        for (bucket, bound) in self.buckets.iter().zip(BUCKETS) {
            let _ = writeln!(
                out,
                "mcp_supervisor_call_duration_seconds_bucket{{le=\"{bound}\"}} {}",
                bucket.load(Ordering::Relaxed)
            );
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(
            out,
            "mcp_supervisor_call_duration_seconds_bucket{{le=\"+Inf\"}} {count}"
        );
        let sum = self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "mcp_supervisor_call_duration_seconds_sum {sum}");
        let _ = writeln!(out, "mcp_supervisor_call_duration_seconds_count {count}");
        out
    }
}

/// One call under way (see [`Metrics::start`]).
pub struct CallRecord<'a> {
    metrics: &'a Metrics,
    started: std::time::Instant,
    outcome: Option<&'static str>,
}

impl CallRecord<'_> {
    /// The call ended with `outcome` (one of [`OUTCOMES`]).
    pub fn finish(mut self, outcome: &'static str) {
        self.outcome = Some(outcome);
    }

    /// The call is not over: it waits for its client's input (an input round), and is counted
    /// when a later request of the client ends it.
    pub fn pending(self) {
        let record = std::mem::ManuallyDrop::new(self);
        record.metrics.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Drop for CallRecord<'_> {
    fn drop(&mut self) {
        self.metrics.in_flight.fetch_sub(1, Ordering::Relaxed);
        self.metrics
            .record(self.outcome.unwrap_or("cancelled"), self.started.elapsed());
    }
}

/// The outcome label of a call that returned a result (`Ok(is_error)`) or failed.
pub fn outcome(result: Result<bool, &CallError>) -> &'static str {
    match result {
        Ok(true) => "tool_error",
        Ok(false) => "ok",
        Err(CallError::ServerError { .. }) => "server_error",
        Err(CallError::TimedOut { .. }) => "timeout",
        Err(CallError::NotDelivered { .. } | CallError::ReconnectFailed { .. }) => "not_delivered",
        Err(CallError::OutcomeUnknown { .. }) => "outcome_unknown",
        Err(CallError::NotReady { .. }) => "not_ready",
        Err(CallError::Cancelled { .. }) => "cancelled",
        Err(CallError::NotAuthorized { .. }) => "not_authorized",
        Err(CallError::TooManyInstances { .. }) => "too_many_instances",
        Err(
            CallError::UnknownTool { .. }
            | CallError::Malformed { .. }
            | CallError::Withheld { .. },
        ) => "other",
    }
}

/// One metric family in the Prometheus text format: its help, its type, and a sample per label
/// set (`""`: no labels).
fn family(out: &mut String, name: &str, kind: &str, help: &str, samples: &[(&str, u64)]) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
    for (labels, value) in samples {
        if labels.is_empty() {
            let _ = writeln!(out, "{name} {value}");
        } else {
            let _ = writeln!(out, "{name}{{{labels}}} {value}");
        }
    }
}
