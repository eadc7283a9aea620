//! Health probes of a ready generation: ping, or tools/list for a server without ping.
//!
//! A probe runs in a task of its own and reports back; it never ends a generation itself — the
//! supervisor counts misses and decides.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use mcp_supervisor_core::classify::Failure;
use mcp_supervisor_core::policy::HealthPolicy;
use tokio::sync::mpsc;

use crate::link::{Link, describe};

/// JSON-RPC "method not found".
const METHOD_NOT_FOUND: i32 = -32601;

/// A finished probe.
pub(super) struct ProbeDone {
    pub generation: u64,
    pub result: Result<(), String>,
    /// How long the probe took.
    pub elapsed: std::time::Duration,
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
        done: mpsc::UnboundedSender<ProbeDone>,
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
            let _ = done.send(ProbeDone {
                generation,
                result,
                elapsed: started.elapsed(),
            });
        });
    }

    pub fn finished(&mut self) {
        self.in_flight = false;
    }
}

/// One probe, bounded by `timeout`.
pub(super) async fn probe(
    link: &dyn Link,
    timeout: std::time::Duration,
    no_ping: &AtomicBool,
) -> Result<(), String> {
    if !no_ping.load(Ordering::SeqCst) {
        match tokio::time::timeout(timeout, crate::link::ping(link, timeout)).await {
            Ok(Ok(())) => return Ok(()),
            Ok(Err(Failure::ServerError {
                code: METHOD_NOT_FOUND,
                ..
            })) => {
                no_ping.store(true, Ordering::SeqCst);
            }
            Ok(Err(failure)) => return Err(format!("ping failed: {}", describe(&failure))),
            Err(_) => {
                return Err(format!(
                    "no answer to ping within {} ms",
                    timeout.as_millis()
                ));
            }
        }
    }
    match tokio::time::timeout(timeout, crate::link::list_tools(link, timeout)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(failure)) => Err(format!("tools/list probe failed: {}", describe(&failure))),
        Err(_) => Err(format!(
            "no answer to the tools/list probe within {} ms",
            timeout.as_millis()
        )),
    }
}
