//! Logging setup: tracing to stderr only (stdout carries MCP in stdio mode), as text or JSON;
//! and, when traces are on ([`crate::telemetry`]), the layer that exports the trace spans.
//!
//! It must never write to stdout.

use clap::{Args, ValueEnum};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

#[derive(Clone, Copy, Debug, Default, ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

#[derive(Clone, Debug, Args)]
pub struct LogArgs {
    /// Log format on stderr.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true)]
    pub log_format: LogFormat,
    /// Log level (error, warn, info, debug, trace) or a tracing filter such as `mcp_supervisor=debug`.
    /// RUST_LOG overrides it.
    #[arg(long, default_value = "info", global = true)]
    pub log_level: String,
    /// Export trace spans (OpenTelemetry, OTLP over HTTP) to this collector base URL, e.g.
    /// http://127.0.0.1:4318. Default: OTEL_EXPORTER_OTLP_ENDPOINT; unset: no traces.
    #[arg(long, value_name = "URL", global = true)]
    pub otlp: Option<String>,
}

/// Set up logging, and traces when an endpoint is given; the guard flushes traces when dropped.
pub fn init(args: &LogArgs) -> Option<crate::telemetry::Telemetry> {
    // The trace spans are for the exporter, never for the log lines.
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(format!("rmcp=warn,{}", args.log_level)))
        .unwrap_or_else(|_| EnvFilter::new("info"))
        .add_directive(
            format!("{}=off", mcp_supervisor::trace::TARGET)
                .parse()
                .unwrap_or_default(),
        );
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(false);
    let fmt = match args.log_format {
        LogFormat::Text => fmt.with_filter(filter).boxed(),
        LogFormat::Json => fmt.json().with_filter(filter).boxed(),
    };
    let mut telemetry = None;
    let mut problem = None;
    let traces = crate::telemetry::endpoint(args.otlp.as_deref()).and_then(|url| {
        match crate::telemetry::start(&url) {
            Ok((guard, layer)) => {
                telemetry = Some(guard);
                let only_ours = tracing_subscriber::filter::Targets::new()
                    .with_target(mcp_supervisor::trace::TARGET, tracing::Level::INFO);
                Some(layer.with_filter(only_ours).boxed())
            }
            Err(why) => {
                problem = Some(why);
                None
            }
        }
    });
    let _ = subscriber(fmt, traces).try_init();
    if let Some(why) = problem {
        tracing::error!("traces are off: {why}; check --otlp or OTEL_EXPORTER_OTLP_ENDPOINT");
    }
    telemetry
}

/// A layer over the registry, with its own filter.
type Boxed = Box<dyn Layer<tracing_subscriber::Registry> + Send + Sync>;

/// The log layer, and the traces' layer when there is one.
///
/// Without traces there is no second layer at all, not a `None` one: an `Option` layer that is
/// `None` says it wants every callsite, so the registry would build every span and event (a
/// span per call on the call path) for the log filter to drop.
fn subscriber(log: Boxed, traces: Option<Boxed>) -> impl tracing::Subscriber + Send + Sync {
    let mut layers = vec![log];
    layers.extend(traces);
    tracing_subscriber::registry().with(layers)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log_layer(level: &str) -> Boxed {
        tracing_subscriber::fmt::layer()
            .with_writer(std::io::sink)
            .with_filter(EnvFilter::new(level))
            .boxed()
    }

    /// With logs at info and no traces, the call path's spans (and debug events) are not built;
    /// with a traces layer that wants the call spans, they are. One test, not two: the callsites'
    /// interest is global, and two subscribers built at once by parallel tests blur it.
    #[test]
    fn spans_are_built_only_for_a_layer_that_wants_them() {
        let quiet = subscriber(log_layer("info,mcp_supervisor::trace=off"), None);
        tracing::subscriber::with_default(quiet, || {
            assert!(mcp_supervisor::trace::call_span("s", "t", "tools/call").is_disabled());
            assert!(tracing::debug_span!("below the level").is_disabled());
            assert!(!tracing::enabled!(tracing::Level::DEBUG));
            assert!(!tracing::info_span!("at the level").is_disabled());
        });
        let only_ours = tracing_subscriber::filter::Targets::new()
            .with_target(mcp_supervisor::trace::TARGET, tracing::Level::INFO);
        let traces = tracing_subscriber::fmt::layer()
            .with_writer(std::io::sink)
            .with_filter(only_ours)
            .boxed();
        let traced = subscriber(log_layer("info,mcp_supervisor::trace=off"), Some(traces));
        tracing::subscriber::with_default(traced, || {
            assert!(!mcp_supervisor::trace::call_span("s", "t", "tools/call").is_disabled());
            assert!(tracing::debug_span!("below the level").is_disabled());
        });
    }
}
