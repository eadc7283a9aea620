//! Trace spans of the hub's work, as `tracing` spans under the target [`TARGET`]: one per call
//! (`mcp.call`), one per recovery of a lost connection (`mcp.recovery`), one per failed health
//! probe (`mcp.health_probe`), and the hook through which a host carries the W3C trace context of
//! a call to its server in the request's `_meta` (`traceparent`).
//!
//! It owns the span names, their fields and the `_meta` member; it never exports anything and
//! depends on no tracing backend: a host that wants OpenTelemetry installs a subscriber layer for
//! [`TARGET`] and gives the hub a [`TraceContext`]. With no subscriber interested in the target,
//! each span is a disabled no-op.

use serde::Deserialize;
use serde_json::value::RawValue;

/// The `tracing` target of every span here: filter on it to export (or hide) them.
pub const TARGET: &str = "mcp_supervisor::trace";

/// The `_meta` member that carries the W3C trace context (MCP's trace-context convention).
pub const TRACEPARENT: &str = "traceparent";

/// Links a call's span to a trace and gives the context to send upstream. The CLI implements
/// it with OpenTelemetry; the library never does.
pub trait TraceContext: Send + Sync + 'static {
    /// Called once per request, with its span (created, not yet entered) and the
    /// `traceparent` the caller's own request carried, if any (make it the span's parent).
    /// Returns the `traceparent` to carry upstream for this span, or `None` to send none.
    fn link(&self, span: &tracing::Span, incoming: Option<&str>) -> Option<String>;
}

/// The span of one request to one server. Its fields `outcome`, `attempts` and `replayed` are
/// recorded by the call path.
pub fn call_span(server: &str, tool: &str, method: &str) -> tracing::Span {
    tracing::info_span!(
        target: TARGET,
        "mcp.call",
        server,
        tool,
        method,
        outcome = tracing::field::Empty,
        attempts = tracing::field::Empty,
        replayed = tracing::field::Empty,
    )
}

/// The span of one recovery: from the loss of a ready connection to the next ready one (or the
/// end of trying). `generation`, `backoff_ms`, `ready_ms` and `outcome` are recorded when it
/// ends.
pub fn recovery_span(server: &str, lost_generation: u64, cause: &str) -> tracing::Span {
    // Integers as i64: OpenTelemetry has no unsigned type (a u64 would arrive as text).
    let lost_generation = as_i64(lost_generation);
    tracing::info_span!(
        target: TARGET,
        "mcp.recovery",
        server,
        lost_generation,
        cause,
        generation = tracing::field::Empty,
        backoff_ms = tracing::field::Empty,
        ready_ms = tracing::field::Empty,
        outcome = tracing::field::Empty,
    )
}

/// A failed health probe, as a span of its own (`elapsed_ms`: how long the probe took).
pub fn probe_failed(server: &str, generation: u64, cause: &str, elapsed_ms: u64) {
    let (generation, elapsed_ms) = (as_i64(generation), as_i64(elapsed_ms));
    let span = tracing::info_span!(
        target: TARGET,
        "mcp.health_probe",
        server,
        generation,
        cause,
        elapsed_ms,
        outcome = "failed",
    );
    drop(span);
}

/// A count or a duration as the signed integer OpenTelemetry attributes hold.
pub fn as_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// The `traceparent` a request's params carry in `_meta`, if any.
pub fn incoming(params: Option<&RawValue>) -> Option<String> {
    let params = params?;
    // Most requests carry none: only those that mention it are read.
    if !params.get().contains(TRACEPARENT) {
        return None;
    }
    #[derive(Deserialize)]
    struct Meta {
        traceparent: Option<String>,
    }
    #[derive(Deserialize)]
    struct Params {
        #[serde(rename = "_meta")]
        meta: Option<Meta>,
    }
    serde_json::from_str::<Params>(params.get())
        .ok()?
        .meta?
        .traceparent
}

/// `params` with `_meta.traceparent` set to `traceparent` (other `_meta` members kept, in
/// order); `None` when the params are not a JSON object.
pub fn with_traceparent(params: Option<&RawValue>, traceparent: &str) -> Option<Box<RawValue>> {
    let value = serde_json::value::to_raw_value(traceparent).ok()?;
    let empty = crate::link::empty_object();
    let params = params.unwrap_or(&empty);
    let meta = {
        #[derive(Deserialize)]
        struct Params<'a> {
            #[serde(rename = "_meta", borrow)]
            meta: Option<&'a RawValue>,
        }
        serde_json::from_str::<Params<'_>>(params.get()).ok()?.meta
    };
    let meta = match meta {
        Some(meta) => crate::upstream::rpc::with_member(meta, TRACEPARENT, &value)?,
        None => crate::upstream::rpc::with_member(&empty, TRACEPARENT, &value)?,
    };
    crate::upstream::rpc::with_member(params, "_meta", &meta)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(text: &str) -> Box<RawValue> {
        RawValue::from_string(text.to_string()).unwrap()
    }

    #[test]
    fn the_incoming_context_is_read_only_from_meta() {
        assert_eq!(
            incoming(Some(&raw(
                r#"{"name":"t","_meta":{"traceparent":"00-a-b-01"}}"#
            )))
            .as_deref(),
            Some("00-a-b-01")
        );
        assert_eq!(
            incoming(Some(&raw(r#"{"arguments":{"traceparent":"x"}}"#))),
            None
        );
        assert_eq!(incoming(Some(&raw(r#"{"name":"t"}"#))), None);
        assert_eq!(incoming(None), None);
    }

    #[test]
    fn the_context_is_set_in_meta_keeping_the_rest() {
        let set = with_traceparent(
            Some(&raw(
                r#"{"name":"t","_meta":{"progressToken":3,"traceparent":"old"},"arguments":{}}"#,
            )),
            "00-new-01",
        )
        .unwrap();
        assert_eq!(
            set.get(),
            r#"{"name":"t","_meta":{"progressToken":3,"traceparent":"00-new-01"},"arguments":{}}"#
        );
        let added = with_traceparent(Some(&raw(r#"{"name":"t"}"#)), "00-x-01").unwrap();
        assert_eq!(
            added.get(),
            r#"{"name":"t","_meta":{"traceparent":"00-x-01"}}"#
        );
        let none = with_traceparent(None, "00-x-01").unwrap();
        assert_eq!(none.get(), r#"{"_meta":{"traceparent":"00-x-01"}}"#);
        assert!(with_traceparent(Some(&raw("[]")), "00-x-01").is_none());
    }
}
