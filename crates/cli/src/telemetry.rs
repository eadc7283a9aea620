//! Traces over OpenTelemetry (OTLP/HTTP, JSON), off unless `--otlp URL` or the standard
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set.
//!
//! It owns the exporter, the `tracing` layer that turns the library's spans (target
//! [`mcp_supervisor::trace::TARGET`]: `mcp.call`, `mcp.recovery`, `mcp.health_probe`) into
//! OpenTelemetry spans, the W3C context carried upstream in each request's `_meta`, and the count
//! of spans that could not be delivered. It must never slow or fail a call: spans are batched and
//! sent from the exporter's own thread, and a batch that cannot be sent is dropped and counted.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use mcp_supervisor::trace::TraceContext;
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// How long one export may take before it counts as failed.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);

/// Spans that could not be delivered (their batch's export failed).
static DROPPED: AtomicU64 = AtomicU64::new(0);
/// Set once traces are on.
static CONTEXT: OnceLock<Arc<dyn TraceContext>> = OnceLock::new();

/// How many spans could not be delivered so far.
pub fn dropped() -> u64 {
    DROPPED.load(Ordering::Relaxed)
}

/// The trace context for the hub's requests, once traces are on.
pub fn context() -> Option<Arc<dyn TraceContext>> {
    CONTEXT.get().cloned()
}

/// Where traces go: `--otlp URL` (a base URL, as the standard variable takes), else the
/// standard environment variables. `None`: traces are off.
pub fn endpoint(flag: Option<&str>) -> Option<String> {
    let given = |v: Option<String>| v.filter(|v| !v.trim().is_empty());
    if let Some(base) = given(flag.map(str::to_string)) {
        return Some(traces_url(&base));
    }
    if let Some(url) = given(std::env::var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").ok()) {
        return Some(url);
    }
    given(std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT").ok()).map(|base| traces_url(&base))
}

/// The traces URL under an OTLP base URL.
fn traces_url(base: &str) -> String {
    let base = base.trim_end_matches('/');
    if base.ends_with("/v1/traces") {
        base.to_string()
    } else {
        format!("{base}/v1/traces")
    }
}

/// Traces while it lives; dropping it sends what is left (bounded).
pub struct Telemetry {
    provider: SdkTracerProvider,
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        let _ = self.provider.shutdown_with_timeout(EXPORT_TIMEOUT);
    }
}

/// Start exporting to `url`: the layer to add to the subscriber, and the guard. An error names
/// what is wrong with the URL.
pub fn start<S>(
    url: &str,
) -> Result<
    (
        Telemetry,
        tracing_opentelemetry::OpenTelemetryLayer<S, opentelemetry_sdk::trace::Tracer>,
    ),
    String,
>
where
    S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
{
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpJson)
        .with_endpoint(url)
        .with_timeout(EXPORT_TIMEOUT)
        .build()
        .map_err(|e| format!("the OTLP endpoint `{url}` cannot be used: {e}"))?;
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(Counting(exporter))
        .with_resource(
            opentelemetry_sdk::Resource::builder_empty()
                .with_service_name("mcp-supervisor")
                .build(),
        )
        .build();
    let tracer = provider.tracer("mcp-supervisor");
    let _ = CONTEXT.set(Arc::new(W3c));
    let layer = tracing_opentelemetry::layer().with_tracer(tracer);
    Ok((Telemetry { provider }, layer))
}

/// An exporter that counts the spans of every batch it could not send.
#[derive(Debug)]
struct Counting<E>(E);

impl<E: SpanExporter> SpanExporter for Counting<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let spans = batch.len() as u64;
        let result = self.0.export(batch).await;
        if result.is_err() {
            DROPPED.fetch_add(spans, Ordering::Relaxed);
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.0.force_flush()
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.0.set_resource(resource);
    }
}

/// The W3C trace context (`traceparent`) of a call's span, the caller's own as its parent.
struct W3c;

impl TraceContext for W3c {
    fn link(&self, span: &tracing::Span, incoming: Option<&str>) -> Option<String> {
        let propagator = TraceContextPropagator::new();
        if let Some(parent) = incoming {
            let carrier = HashMap::from([("traceparent".to_string(), parent.to_string())]);
            let _ = span.set_parent(propagator.extract(&carrier));
        }
        let mut carrier: HashMap<String, String> = HashMap::new();
        propagator.inject_context(&span.context(), &mut carrier);
        carrier.remove("traceparent")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_traces_url_is_under_the_base_url() {
        assert_eq!(
            traces_url("http://127.0.0.1:4318"),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(
            traces_url("http://127.0.0.1:4318/"),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(
            traces_url("http://c:4318/v1/traces"),
            "http://c:4318/v1/traces"
        );
        assert_eq!(
            endpoint(Some("http://x:1")).as_deref(),
            Some("http://x:1/v1/traces")
        );
        assert_eq!(endpoint(Some("  ")), endpoint(None));
    }
}
