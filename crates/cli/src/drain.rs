//! Readiness and drain of the HTTP faces: whether the proxy takes traffic (`/readyz`), when its
//! drain window began (SIGTERM) and when it ended (calls still running are then answered with
//! [`stopping_error`] and event streams end with a reconnection hint).
//!
//! It only holds the state and says what a probe answers; it never stops a supervisor, never
//! reads an MCP message, and never decides when the window ends (that is `serve`'s).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::http::StatusCode;
use serde_json::value::RawValue;
use tokio_util::sync::CancellationToken;

use mcp_supervisor_front::error_text;

/// The default drain window (`--drain-ms`).
pub const DEFAULT_DRAIN_MS: u64 = 10_000;

/// The reconnection delay an event stream asks for as it ends at the end of the drain: by then
/// this replica's listeners are closing, so the client's next attempt reaches another one.
pub const STOPPING_RETRY: Duration = Duration::from_millis(1000);

/// The JSON-RPC error code of a call cancelled because the proxy stops (a server error).
pub const STOPPING_CODE: i64 = -32000;

/// Where the proxy is in its life, shared by every HTTP listener. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct Drain {
    /// Set once the config is loaded and every listener is bound.
    ready: Arc<AtomicBool>,
    /// Cancelled when the drain begins (SIGTERM): `/readyz` says 503 from then on.
    draining: CancellationToken,
    /// Cancelled when the proxy stops taking part (the drain window is over, or the stop needs
    /// no window): calls still running get [`stopping_error`], event streams end.
    stopping: CancellationToken,
}

impl Drain {
    pub fn new() -> Self {
        Self::default()
    }

    /// Every listener is up: ready for traffic unless draining.
    pub fn set_ready(&self) {
        self.ready.store(true, Ordering::Release);
    }

    /// The drain begins: not ready any more, but everything is still served.
    pub fn begin(&self) {
        self.draining.cancel();
    }

    /// The drain is over (or there is none): what still runs is answered as stopping.
    pub fn stop(&self) {
        self.draining.cancel();
        self.stopping.cancel();
    }

    /// Cancelled once [`Drain::stop`] was called.
    pub fn stopping(&self) -> &CancellationToken {
        &self.stopping
    }

    /// What `/readyz` answers: a status and one word, nothing else.
    pub fn readiness(&self) -> (StatusCode, &'static str) {
        if self.draining.is_cancelled() {
            (StatusCode::SERVICE_UNAVAILABLE, "draining")
        } else if self.ready.load(Ordering::Acquire) {
            (StatusCode::OK, "ready")
        } else {
            (StatusCode::SERVICE_UNAVAILABLE, "starting")
        }
    }
}

/// The answer to request `id` still running when the proxy stops: it was cancelled upstream.
pub fn stopping_error(id: Option<&RawValue>) -> String {
    error_text(
        id,
        STOPPING_CODE,
        "this proxy replica is stopping (its drain window is over): the call was cancelled \
         upstream and its outcome is unknown; send it again, to another replica, if it is safe \
         to repeat",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_follows_start_drain_and_stop() {
        let drain = Drain::new();
        assert_eq!(
            drain.readiness(),
            (StatusCode::SERVICE_UNAVAILABLE, "starting")
        );
        drain.set_ready();
        assert_eq!(drain.readiness(), (StatusCode::OK, "ready"));
        assert!(!drain.stopping().is_cancelled());
        drain.begin();
        assert_eq!(
            drain.readiness(),
            (StatusCode::SERVICE_UNAVAILABLE, "draining")
        );
        assert!(!drain.stopping().is_cancelled(), "the window serves on");
        drain.stop();
        assert!(drain.stopping().is_cancelled());
        assert_eq!(drain.readiness().0, StatusCode::SERVICE_UNAVAILABLE);
    }

    #[test]
    fn a_stop_without_a_window_is_not_ready_either() {
        let drain = Drain::new();
        drain.set_ready();
        drain.stop();
        assert_eq!(
            drain.readiness(),
            (StatusCode::SERVICE_UNAVAILABLE, "draining")
        );
    }

    #[test]
    fn the_stopping_error_keeps_the_id_and_says_why() {
        let id = RawValue::from_string("\"call-7\"".into()).unwrap();
        let answer: serde_json::Value = serde_json::from_str(&stopping_error(Some(&id))).unwrap();
        assert_eq!(answer["id"], "call-7");
        assert_eq!(answer["error"]["code"], STOPPING_CODE);
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains("stopping"), "{message}");
    }
}
