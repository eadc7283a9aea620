//! Health probes of a ready generation: ping, or tools/list for a server without ping.
//!
//! A probe runs in a task of its own and reports back; it never ends a generation itself — the
//! supervisor counts misses and decides.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use mcp_supervisor_core::classify::Failure;
use mcp_supervisor_core::policy::HealthPolicy;
use tokio::sync::mpsc;

use crate::error::describe;
use crate::link::Link;

/// JSON-RPC "method not found".
const METHOD_NOT_FOUND: i32 = -32601;

/// Why a probe missed: what was asked, and whether the server answered wrongly or not at all.
/// The supervisor counts misses and decides (the message goes to its log and `lastError`).
#[derive(Debug, thiserror::Error)]
pub(crate) enum ProbeError {
    /// `ping` failed (other than "method not found").
    #[error("ping failed: {}", describe(.0))]
    Ping(Failure),
    /// `ping` got no answer in time.
    #[error("no answer to ping within {} ms", .0.as_millis())]
    PingSilent(Duration),
    /// `tools/list` (a server without ping) failed.
    #[error("tools/list probe failed: {}", describe(.0))]
    List(Failure),
    /// `tools/list` got no answer in time.
    #[error("no answer to the tools/list probe within {} ms", .0.as_millis())]
    ListSilent(Duration),
}

/// A finished probe.
pub(super) struct ProbeDone {
    pub generation: u64,
    pub result: Result<(), ProbeError>,
    /// How long the probe took.
    pub elapsed: Duration,
}

/// Runs at most one probe at a time for one generation.
pub(super) struct Prober {
    policy: HealthPolicy,
    in_flight: bool,
    /// Set once the server answered ping with "method not found" (protocol 2026-07-28).
    no_ping: Arc<AtomicBool>,
}

impl Prober {
    pub fn new(policy: HealthPolicy) -> Self {
        Self {
            policy,
            in_flight: false,
            no_ping: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Start a probe unless one is already running.
    pub fn start(
        &mut self,
        generation: u64,
        link: Arc<dyn Link>,
        done: mpsc::UnboundedSender<Box<ProbeDone>>,
    ) {
        if self.in_flight {
            return;
        }
        self.in_flight = true;
        let timeout = self.policy.timeout;
        let no_ping = self.no_ping.clone();
        tokio::spawn(async move {
            let started = tokio::time::Instant::now();
            let result = probe(&*link, timeout, &no_ping).await;
            let _ = done.send(Box::new(ProbeDone {
                generation,
                result,
                elapsed: started.elapsed(),
            }));
        });
    }

    pub fn finished(&mut self) {
        self.in_flight = false;
    }
}

/// One probe, bounded by `timeout`.
pub(super) async fn probe(
    link: &dyn Link,
    timeout: Duration,
    no_ping: &AtomicBool,
) -> Result<(), ProbeError> {
    if !no_ping.load(Ordering::SeqCst) {
        match tokio::time::timeout(timeout, crate::link::ping(link, timeout)).await {
            Ok(Ok(())) => return Ok(()),
            Ok(Err(Failure::ServerError {
                code: METHOD_NOT_FOUND,
                ..
            })) => {
                no_ping.store(true, Ordering::SeqCst);
            }
            Ok(Err(failure)) => return Err(ProbeError::Ping(failure)),
            Err(_) => return Err(ProbeError::PingSilent(timeout)),
        }
    }
    match tokio::time::timeout(timeout, crate::link::list_tools(link, timeout)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(failure)) => Err(ProbeError::List(failure)),
        Err(_) => Err(ProbeError::ListSilent(timeout)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A miss reads as it did when it was a string: the log and `lastError` show it.
    #[test]
    fn a_missed_probe_says_what_was_asked_and_how_it_failed() {
        let within = Duration::from_millis(250);
        assert_eq!(
            ProbeError::PingSilent(within).to_string(),
            "no answer to ping within 250 ms"
        );
        assert_eq!(
            ProbeError::Ping(Failure::DeadlinePassed).to_string(),
            "ping failed: the deadline passed"
        );
        assert_eq!(
            ProbeError::ListSilent(within).to_string(),
            "no answer to the tools/list probe within 250 ms"
        );
        assert_eq!(
            ProbeError::List(Failure::ConnectionLostAfterSend).to_string(),
            "tools/list probe failed: the connection broke after the request went out"
        );
    }
}
