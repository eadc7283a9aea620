//! The call path of one server (SPEC §5): wait for ready, send on the current generation with a
//! deadline, classify a failure, and recover or replay under the rule.
//!
//! It runs in the caller's task and only reads the supervisor's snapshot and sends it signals;
//! it never touches a generation's state itself, and never sends a call twice unless the
//! verdict and the tool's safety allow it.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use mcp_supervisor_core::classify::{self, AfterProbe, Failure, Recovery, ToolSafety, Verdict};
use mcp_supervisor_core::headers::ParamHeader;
use serde_json::value::RawValue;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{Phase, ServerState, SupervisorHandle};
use crate::error::{CallError, Restored};
use crate::link::{CallOptions, Downstream, Link, describe};

/// How long past its deadline a call may run before the call path ends it itself.
const OUTER_GRACE: Duration = Duration::from_millis(250);

/// How long the "unclear" probe may take at most (SPEC §5).
const UNCLEAR_PROBE: Duration = Duration::from_secs(5);

/// One request as the caller asks for it: a tool call, or any other request to the server.
#[derive(Clone, Default)]
pub(crate) struct CallRequest {
    /// What errors name: the tool's upstream name, or the method of another request.
    pub tool: String,
    /// A deadline shorter than the server's `toolCallTimeoutMs`.
    pub timeout: Option<Duration>,
    /// Cancel the call (sends `notifications/cancelled` upstream).
    pub cancel: Option<CancellationToken>,
    /// The client the call is for: the server's requests related to it and its progress go
    /// there.
    pub origin: Option<Arc<dyn Downstream>>,
    /// What the tool's annotations say; `retryTools` is added here.
    pub safety: ToolSafety,
    /// The arguments a `tools/call` mirrors into HTTP headers (SEP-2243); empty for others.
    pub headers: Arc<[ParamHeader]>,
    /// Input-required results come back whole (the caller is a client of that era).
    pub relays_input: bool,
}

impl std::fmt::Debug for CallRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallRequest")
            .field("tool", &self.tool)
            .field("timeout", &self.timeout)
            .field("safety", &self.safety)
            .finish()
    }
}

/// What a call's trace span records when the call ends, however it ends.
struct Tally {
    span: tracing::Span,
    attempts: i64,
    replayed: bool,
}

impl Drop for Tally {
    fn drop(&mut self) {
        self.span.record("attempts", self.attempts);
        self.span.record("replayed", self.replayed);
    }
}

/// Why waiting for a ready generation ended without one.
struct NotReady {
    state: ServerState,
    last_error: Option<String>,
    next_attempt_in: Option<Duration>,
    /// The attempt we waited for failed.
    attempt_failed: bool,
}

impl NotReady {
    /// What a snapshot says about a server that is not ready.
    fn of(snap: &super::Snapshot, attempt_failed: bool) -> Self {
        Self {
            state: snap.state(),
            last_error: snap.last_error.clone(),
            next_attempt_in: snap
                .next_attempt_at()
                .map(|at| at.saturating_duration_since(Instant::now())),
            attempt_failed,
        }
    }

    /// The caller's error: `tool` on `server` did not run because the server is not ready.
    fn into_error(self, server: String, tool: String) -> CallError {
        CallError::NotReady {
            server,
            tool,
            state: self.state.to_string(),
            last_error: self.last_error,
            next_attempt_in: self.next_attempt_in,
        }
    }
}

/// Decrements the in-flight count when a send ends, however it ends.
struct InFlight<'a>(&'a std::sync::atomic::AtomicUsize);

impl<'a> InFlight<'a> {
    fn enter(count: &'a std::sync::atomic::AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::SeqCst);
        Self(count)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl SupervisorHandle {
    /// Send one request to this server under the recovery rules (SPEC §5): `method` with
    /// `params` as JSON text, passed as they are; the `result` comes back as JSON text. This is
    /// the only way a request reaches a server: tool calls, and every other method alike.
    pub async fn send(
        &self,
        request: &CallRequest,
        method: &str,
        params: Option<&RawValue>,
    ) -> Result<Box<RawValue>, CallError> {
        let config = &self.shared.config;
        let limit = request.timeout.map_or(config.tool_call_timeout, |t| {
            t.min(config.tool_call_timeout)
        });
        let deadline = Instant::now() + limit;
        let mut safety = request.safety;
        safety.listed_in_retry_tools |= config.retry_tools.contains(&request.tool);
        let cancel = request.cancel.clone().unwrap_or_default();
        // Named in an error only (made then).
        let server: &str = &self.name;
        let tool: &str = &request.tool;
        // A client's request, for the idle timeout, from now until it ends however it ends.
        let _requesting = self.requesting();

        // A generation newer than this one is needed before the next send.
        let mut after_generation = 0;
        // How many times the call was sent again (at most once, SPEC §5).
        let mut resent = false;
        // The failure that made us reconnect, to report with a failed reconnect.
        let mut first_failure: Option<String> = None;
        // How many times it went out, for the call's trace span (recorded once, at the end).
        let mut tally = Tally {
            span: tracing::Span::current(),
            attempts: 0,
            replayed: false,
        };
        loop {
            let (generation, link) =
                match self.wait_ready(deadline, after_generation, &cancel).await {
                    Ok(ready) => ready,
                    Err(not_ready) => {
                        if cancel.is_cancelled() {
                            return Err(CallError::Cancelled {
                                server: server.to_string(),
                                tool: tool.to_string(),
                            });
                        }
                        return Err(match first_failure {
                            Some(first) => CallError::ReconnectFailed {
                                server: server.to_string(),
                                tool: tool.to_string(),
                                first,
                                reconnect: not_ready_text(&not_ready),
                            },
                            None => not_ready.into_error(server.to_string(), tool.to_string()),
                        });
                    }
                };
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Err(CallError::TimedOut {
                    server: server.to_string(),
                    tool: tool.to_string(),
                    after_ms: limit.as_millis(),
                });
            }
            let options = CallOptions {
                timeout: remaining,
                cancel: cancel.clone(),
                origin: request.origin.clone(),
                headers: request.headers.clone(),
                relays_input: request.relays_input,
            };
            tally.attempts += 1;
            tally.replayed = resent;
            let outcome = {
                let _busy = InFlight::enter(&self.shared.in_flight);
                // The link ends the call at its deadline; this outer bound only guards against
                // a link that would not.
                let request = link.request(method, params, options);
                if link.keeps_deadlines() {
                    request.await
                } else {
                    let bound = deadline + OUTER_GRACE;
                    match tokio::time::timeout_at(bound, request).await {
                        Ok(outcome) => outcome,
                        Err(_) => Err(Failure::DeadlinePassed),
                    }
                }
            };
            let failure = match outcome {
                Ok(result) => {
                    self.shared.misses.store(0, Ordering::SeqCst);
                    return Ok(result);
                }
                Err(failure) => failure,
            };
            let verdict = classify::classify(&failure);
            let cause = describe(&failure);
            let replay_allowed = !resent;
            match classify::recovery(verdict, safety) {
                Recovery::Return => {
                    return Err(self.returned(verdict, failure, generation, server, tool, limit));
                }
                Recovery::ReconnectAndSend if replay_allowed => {
                    // Not delivered (the server did not run it), or outcome unknown for a tool
                    // that is safe to repeat: reconnect, then send once more on the fresh one.
                    self.suspect(generation, cause.clone(), is_stale_session(&failure));
                    resent = true;
                    after_generation = generation;
                    first_failure = Some(cause);
                }
                Recovery::ReconnectAndSend | Recovery::ReconnectAndFailUnknown => {
                    self.suspect(generation, cause.clone(), is_stale_session(&failure));
                    let restored = self.restored(deadline, generation, &cancel).await;
                    return Err(match verdict {
                        Verdict::NotDelivered => CallError::NotDelivered {
                            server: server.to_string(),
                            tool: tool.to_string(),
                            cause,
                            restored,
                        },
                        _ => CallError::OutcomeUnknown {
                            server: server.to_string(),
                            tool: tool.to_string(),
                            cause,
                            restored,
                        },
                    });
                }
                Recovery::Probe => {
                    let alive = self.probe_alive(&*link, deadline).await;
                    match classify::after_probe(alive, safety) {
                        AfterProbe::SendAgain if replay_allowed => {
                            resent = true;
                            after_generation = generation - 1; // the same generation again
                        }
                        AfterProbe::SendAgain | AfterProbe::FailUnknown => {
                            let restored = Restored::Yes { generation };
                            return Err(CallError::OutcomeUnknown {
                                server: server.to_string(),
                                tool: tool.to_string(),
                                cause,
                                restored,
                            });
                        }
                        AfterProbe::Reconnect(_) => {
                            self.suspect(
                                generation,
                                format!("{cause}; then the server did not answer a ping"),
                                false,
                            );
                            if safety.replay_safe() && replay_allowed {
                                resent = true;
                                after_generation = generation;
                                first_failure = Some(cause);
                            } else {
                                let restored = self.restored(deadline, generation, &cancel).await;
                                return Err(CallError::OutcomeUnknown {
                                    server: server.to_string(),
                                    tool: tool.to_string(),
                                    cause,
                                    restored,
                                });
                            }
                        }
                    }
                }
            }
        }
    }

    /// The error for a verdict that is returned as is.
    fn returned(
        &self,
        verdict: Verdict,
        failure: Failure,
        generation: u64,
        server: &str,
        tool: &str,
        limit: Duration,
    ) -> CallError {
        let (server, tool) = (server.to_string(), tool.to_string());
        match (verdict, failure) {
            (Verdict::DeadlinePassed, _) => {
                // No reconnect by itself, but probe at once: a hung server is found even while
                // calls keep arriving.
                self.call_timed_out(generation);
                CallError::TimedOut {
                    server,
                    tool,
                    after_ms: limit.as_millis(),
                }
            }
            (Verdict::Aborted, _) => CallError::Cancelled { server, tool },
            (
                _,
                Failure::ServerError {
                    code,
                    message,
                    data,
                },
            ) => CallError::ServerError {
                server,
                tool,
                code,
                message,
                data,
            },
            (_, Failure::Unauthorized { message }) => CallError::NotAuthorized {
                server,
                tool,
                message,
            },
            (_, other) => CallError::Malformed {
                server,
                tool,
                detail: describe(&other),
            },
        }
    }

    /// Ping the generation, bounded by 5 s and the call's deadline.
    async fn probe_alive(&self, link: &dyn Link, deadline: Instant) -> bool {
        let bound = deadline
            .saturating_duration_since(Instant::now())
            .min(UNCLEAR_PROBE);
        let no_ping = std::sync::atomic::AtomicBool::new(false);
        super::health::probe(link, bound, &no_ping).await.is_ok()
    }

    /// Whether a generation newer than `generation` became ready within the deadline.
    async fn restored(
        &self,
        deadline: Instant,
        generation: u64,
        cancel: &CancellationToken,
    ) -> Restored {
        match self.wait_ready(deadline, generation, cancel).await {
            Ok((generation, _)) => Restored::Yes { generation },
            Err(not_ready) => Restored::No {
                state: not_ready_text(&not_ready),
            },
        }
    }

    /// Wait for a ready generation newer than `after`: through the attempt under way, or the next
    /// one when it is due before the deadline. Fails at once otherwise.
    async fn wait_ready(
        &self,
        deadline: Instant,
        after: u64,
        cancel: &CancellationToken,
    ) -> Result<(u64, Arc<dyn Link>), NotReady> {
        let mut watch = self.snapshot.clone();
        // The generation whose attempt we are waiting for, once we wait for one.
        let mut waiting_for: Option<u64> = None;
        // Whether this request asked an idle server to start (once is enough).
        let mut woke = false;
        loop {
            // Judge the snapshot under the borrow; nothing is cloned on the ready path but the link.
            let state = {
                let snap = watch.borrow_and_update();
                match &snap.phase {
                    Phase::Ready { link, .. } if snap.generation > after => {
                        return Ok((snap.generation, link.clone()));
                    }
                    Phase::Ready { .. } => {} // the loss of this generation is being handled
                    Phase::Parked(_) => return Err(NotReady::of(&snap, waiting_for.is_some())),
                    Phase::Idle => {
                        // Not an outage: this request starts it, and waits within its
                        // deadline as for a reconnect (SPEC §13).
                        if !std::mem::replace(&mut woke, true) {
                            self.wake();
                        }
                        waiting_for = Some(snap.generation + 1);
                    }
                    Phase::Attempting(_) if snap.generation > after => {
                        // A new generation's attempt is under way: its outcome decides.
                        waiting_for =
                            Some(waiting_for.map_or(snap.generation, |w| w.max(snap.generation)));
                    }
                    // The lost generation is still closing; the attempt comes after.
                    Phase::Attempting(_) | Phase::Closing(_) => {}
                    Phase::Backoff { at, .. } => {
                        // The attempt we waited for failed: the next one still counts when it
                        // is due within the deadline (SPEC §5).
                        let failed = waiting_for.is_some_and(|w| snap.generation >= w);
                        if *at <= deadline {
                            waiting_for = Some(snap.generation + 1);
                        } else {
                            return Err(NotReady::of(&snap, failed));
                        }
                    }
                }
                snap.state()
            };
            tokio::select! {
                changed = watch.changed() => {
                    if changed.is_err() {
                        return Err(NotReady { state: ServerState::Stopped, last_error: None, next_attempt_in: None, attempt_failed: false });
                    }
                }
                () = tokio::time::sleep_until(deadline) => {
                    return Err(NotReady::of(&watch.borrow(), false));
                }
                () = cancel.cancelled() => {
                    return Err(NotReady { state, last_error: None, next_attempt_in: None, attempt_failed: false });
                }
            }
        }
    }
}

/// A stale session: the server answers, it just forgot us, so reconnect at once.
fn is_stale_session(failure: &Failure) -> bool {
    match failure {
        Failure::SessionExpired | Failure::HttpStatus { .. } => true,
        Failure::ServerError { .. }
        | Failure::NoLiveGeneration
        | Failure::ConnectRefused
        | Failure::TransportClosedBeforeSend
        | Failure::ConnectionLostAfterSend
        | Failure::TransportError { .. }
        | Failure::DeadlinePassed
        | Failure::CancelledByCaller
        | Failure::UnexpectedResponse
        | Failure::Unauthorized { .. } => false,
    }
}

fn not_ready_text(not_ready: &NotReady) -> String {
    let mut text = format!("server is {}", not_ready.state);
    if let Some(error) = &not_ready.last_error {
        text.push_str(&format!(" (last error: {error})"));
    }
    if let Some(next) = not_ready.next_attempt_in {
        text.push_str(&format!(", next attempt in {} ms", next.as_millis()));
    }
    if not_ready.attempt_failed {
        text.push_str(", the reconnect attempt failed");
    }
    text
}
