//! The proxy's call counters and latency histogram, and the `/metrics` text that shows them with
//! each server's state from the hub (the Prometheus text format 0.0.4, written by
//! prometheus-client).
//!
//! A call touches plain atomics only: the in-flight gauge, then one add each for its outcome, its
//! latency bucket and the latency sum. It never blocks and never holds a lock across an await. A
//! scrape reads them once into a `Scrape`, which prometheus-client encodes as a custom collector
//! (its own metric types would only add cost on the call path).

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use mcp_supervisor::{CallError, ServerState, ServerStatus};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabelSet, EncodeMetric, MetricEncoder, NoLabelSet, prometheus_text,
};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

/// The `Content-Type` of what [`Metrics::render`] writes.
pub const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

/// Upper bounds of the latency buckets, in seconds.
const BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0,
];

/// The outcomes a call is counted under; an outcome not listed counts as the last, `other`.
pub const OUTCOMES: [&str; 10] = [
    "ok",
    "tool_error",
    "server_error",
    "timeout",
    "not_delivered",
    "outcome_unknown",
    "not_ready",
    "not_authorized",
    "cancelled",
    "other",
];

#[derive(Default)]
pub struct Metrics {
    outcomes: [AtomicU64; OUTCOMES.len()],
    in_flight: AtomicU64,
    /// Calls by latency, not cumulative: `buckets[i]` counts those over `BUCKETS[i - 1]` up to
    /// `BUCKETS[i]`, the last those over 30 s. A call adds to one; the scrape sums them up.
    buckets: [AtomicU64; BUCKETS.len() + 1],
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
        let bucket = BUCKETS
            .iter()
            .position(|bound| seconds <= *bound)
            .unwrap_or(BUCKETS.len());
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        let micros = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        self.sum_micros.fetch_add(micros, Ordering::Relaxed);
    }

    /// The Prometheus text exposition (format 0.0.4, [`CONTENT_TYPE`]) of the counters, of
    /// `servers`, and of the trace spans the host could not export (`spans_dropped`; 0 when it
    /// exports none).
    pub fn render(&self, servers: &[ServerStatus], spans_dropped: u64) -> String {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(self.scrape(servers, spans_dropped)));
        let mut out = String::new();
        // Only a failed write fails the encoder, and writing to a String does not fail.
        if let Err(error) = prometheus_text::encode(&mut out, &registry) {
            tracing::warn!("metrics: the text could not be written: {error}");
        }
        out
    }

    /// Everything a scrape shows, read once.
    fn scrape(&self, servers: &[ServerStatus], spans_dropped: u64) -> Scrape {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        Scrape {
            servers: servers.to_vec(),
            notifications_dropped: load(&self.notifications_dropped),
            sessions_resumed: load(&self.sessions_resumed),
            sessions_forged: load(&self.sessions_forged),
            sessions_expired: load(&self.sessions_expired),
            spans_dropped,
            in_flight: load(&self.in_flight),
            outcomes: self.outcomes.each_ref().map(load),
            buckets: self.buckets.each_ref().map(load),
            sum_micros: load(&self.sum_micros),
        }
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

// === impl Scrape ===

/// The values of one scrape, which prometheus-client encodes (a custom collector, asked once).
#[derive(Debug)]
struct Scrape {
    servers: Vec<ServerStatus>,
    notifications_dropped: u64,
    sessions_resumed: u64,
    sessions_forged: u64,
    sessions_expired: u64,
    spans_dropped: u64,
    in_flight: u64,
    outcomes: [u64; OUTCOMES.len()],
    buckets: [u64; BUCKETS.len() + 1],
    sum_micros: u64,
}

/// The `server` label of a server's sample.
fn server(status: &ServerStatus) -> [(&'static str, &str); 1] {
    [("server", status.name.as_str())]
}

/// A server's value in a family.
type PerServer = fn(&ServerStatus) -> u64;

/// The families with one sample per server (`server` label), after `server_up` and
/// `server_state`, in the order they are written.
const PER_SERVER: [(Family, PerServer); 6] = [
    (
        Family::counter(
            "mcp_supervisor_restarts",
            "Lost or failed connections replaced by a ready one.",
        ),
        |s| s.restarts,
    ),
    (
        Family::gauge(
            "mcp_supervisor_reconnect_attempts",
            "The attempt number within the current outage (0 when ready).",
        ),
        |s| u64::from(s.attempts),
    ),
    (
        Family::gauge(
            "mcp_supervisor_generation",
            "The current connection generation.",
        ),
        |s| s.generation,
    ),
    (
        Family::gauge("mcp_supervisor_tools", "Tools the server has published."),
        |s| s.tools as u64,
    ),
    (
        Family::gauge(
            "mcp_supervisor_withheld_tools",
            "Tools withheld because their definition changed since it was pinned (pin: block), until approved.",
        ),
        |s| s.withheld_tools as u64,
    ),
    (
        Family::counter(
            "mcp_supervisor_results_cut",
            "Tool results larger than the server's maxResultBytes that reached their client cut.",
        ),
        |s| s.results_cut,
    ),
];

impl Collector for Scrape {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        self.encode_servers(&mut encoder)?;
        self.encode_proxy(&mut encoder)?;
        self.encode_latency(&mut encoder)
    }
}

impl Scrape {
    /// Each server's families: whether it is in service, its state, and its counts.
    fn encode_servers(&self, encoder: &mut DescriptorEncoder) -> fmt::Result {
        Family::gauge(
            "mcp_supervisor_server_up",
            "Whether the server is in service (1: ready, or idle until its next request) or not (0).",
        )
        .encode(
            encoder,
            self.servers
                .iter()
                .map(|s| (server(s), u64::from(s.state.in_service()))),
        )?;
        let states = self.servers.iter().flat_map(|s| {
            ServerState::ALL.iter().map(move |state| {
                let labels = [("server", s.name.as_str()), ("state", state.as_str())];
                (labels, u64::from(s.state == *state))
            })
        });
        Family::gauge(
            "mcp_supervisor_server_state",
            "The server's current state (1 for the state it is in).",
        )
        .encode(encoder, states)?;
        for (family, value) in PER_SERVER {
            let samples = self.servers.iter().map(|s| (server(s), value(s)));
            family.encode(encoder, samples)?;
        }
        Ok(())
    }

    /// The proxy's own counters: its clients, its sessions, its traces and its calls.
    fn encode_proxy(&self, encoder: &mut DescriptorEncoder) -> fmt::Result {
        Family::counter(
            "mcp_supervisor_notifications_dropped",
            "Notifications not delivered to a client that did not read while its queue of messages for no request was full.",
        )
        .encode_one(encoder, self.notifications_dropped)?;
        Family::counter(
            "mcp_supervisor_sessions_resumed",
            "HTTP sessions resumed from their sealed id by a process that did not hold them (another replica, or this one after it let them go).",
        )
        .encode_one(encoder, self.sessions_resumed)?;
        let refused = [
            ([("reason", "forged")], self.sessions_forged),
            ([("reason", "expired")], self.sessions_expired),
        ];
        Family::counter(
            "mcp_supervisor_sessions_refused",
            "Session ids answered 404: forged (not sealed with our key) or expired (older than sessionMaxAgeMs).",
        )
        .encode(encoder, refused)?;
        Family::counter(
            "mcp_supervisor_trace_spans_dropped",
            "Trace spans that could not be sent to the OTLP endpoint (dropped, never retried).",
        )
        .encode_one(encoder, self.spans_dropped)?;
        Family::gauge(
            "mcp_supervisor_calls_in_flight",
            "Tool calls through the proxy under way now.",
        )
        .encode_one(encoder, self.in_flight)?;
        let outcomes = OUTCOMES
            .iter()
            .zip(self.outcomes)
            .map(|(outcome, count)| ([("outcome", *outcome)], count));
        Family::counter(
            "mcp_supervisor_calls",
            "Tool calls through the proxy, by outcome.",
        )
        .encode(encoder, outcomes)
    }

    /// The latency histogram (prometheus-client makes the buckets cumulative).
    fn encode_latency(&self, encoder: &mut DescriptorEncoder) -> fmt::Result {
        let bounds = BUCKETS.iter().copied().chain([f64::INFINITY]);
        let buckets: Vec<(f64, u64)> = bounds.zip(self.buckets).collect();
        let count = self.buckets.iter().sum();
        let sum = self.sum_micros as f64 / 1e6;
        encoder
            .encode_descriptor(
                "mcp_supervisor_call_duration_seconds",
                "Tool call latency through the proxy.",
                None,
                MetricType::Histogram,
            )?
            .encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }
}

// === impl Family ===

/// A family of integer samples: its name (a counter's without `_total`, which the encoder adds),
/// its help and its type.
#[derive(Clone, Copy)]
struct Family {
    name: &'static str,
    help: &'static str,
    kind: Kind,
}

#[derive(Clone, Copy)]
enum Kind {
    Counter,
    Gauge,
}

impl Family {
    const fn counter(name: &'static str, help: &'static str) -> Self {
        Family {
            name,
            help,
            kind: Kind::Counter,
        }
    }

    const fn gauge(name: &'static str, help: &'static str) -> Self {
        Family {
            name,
            help,
            kind: Kind::Gauge,
        }
    }

    /// The HELP and TYPE lines, and one sample per label set.
    fn encode<L: EncodeLabelSet>(
        self,
        encoder: &mut DescriptorEncoder,
        samples: impl IntoIterator<Item = (L, u64)>,
    ) -> fmt::Result {
        let mut metric = self.describe(encoder)?;
        for (labels, value) in samples {
            self.kind.sample(metric.encode_family(&labels)?, value)?;
        }
        Ok(())
    }

    /// The HELP and TYPE lines, and one sample without labels.
    fn encode_one(self, encoder: &mut DescriptorEncoder, value: u64) -> fmt::Result {
        let metric = self.describe(encoder)?;
        self.kind.sample(metric, value)
    }

    fn describe<'e>(
        self,
        encoder: &'e mut DescriptorEncoder,
    ) -> Result<MetricEncoder<'e>, fmt::Error> {
        let kind = match self.kind {
            Kind::Counter => MetricType::Counter,
            Kind::Gauge => MetricType::Gauge,
        };
        encoder.encode_descriptor(self.name, self.help, None, kind)
    }
}

impl Kind {
    fn sample(self, metric: MetricEncoder<'_>, value: u64) -> fmt::Result {
        match self {
            Kind::Counter => ConstCounter::new(value).encode(metric),
            Kind::Gauge => ConstGauge::new(value).encode(metric),
        }
    }
}
