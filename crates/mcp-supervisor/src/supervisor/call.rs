//! The call path of one server (SPEC §5): wait for ready, send on the current generation with a
//! deadline, classify a failure, and recover or replay under the rule.
//!
//! It runs in the caller's task and only reads the supervisor's snapshot and sends it signals;
//! it never touches a generation's state itself, and never sends a call twice unless the
//! verdict and the tool's safety allow it.

use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use mcp_supervisor_core::classify::{self, AfterProbe, Failure, Recovery, ToolSafety, Verdict};
use mcp_supervisor_core::headers::ParamHeader;
use serde_json::value::RawValue;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{Phase, ServerState, SupervisorHandle};
use crate::error::{CallError, Restored, describe};
use crate::link::{CallOptions, Downstream, Link};

/// How long past its deadline a call may run before the call path ends it itself.
const OUTER_GRACE: Duration = Duration::from_millis(250);

/// How long the "unclear" probe may take at most (SPEC §5).
const UNCLEAR_PROBE: Duration = Duration::from_secs(5);

/// How many times a call goes out at most: once, and once more where SPEC §5 allows it.
const MAX_SENDS: usize = 2;

/// What sending one call came to, as far as the server is concerned: how many times it went
/// out, on which generations, and whether the server may have run it. A caller that asks for
/// it ([`crate::CallArgs::report`]) gets it when the call ends, however it ends: with a
/// result, with an error, or with its future dropped.
///
/// It is the one place that tells a call that went out from one that did not where the error
/// cannot: [`CallError::Cancelled`] and [`CallError::TimedOut`] before any send,
/// [`CallError::ReconnectFailed`] after a first send that was not delivered.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CallReport {
    /// How many times the request went out (0: never sent; at most 2).
    pub attempts: u32,
    /// Whether it went out a second time (SPEC §5 allows one resend).
    pub replayed: bool,
    /// The generation each send went to, in order: two different ones after a reconnect, the
    /// same one twice after a resend in place.
    pub generations: Vec<u64>,
    /// Whether the server may have run it: some send was answered, or was lost after it went
    /// out (or is still unanswered as the call ends). `false` when nothing was sent, or every
    /// send was refused unrun (not delivered, or not authorized).
    pub may_have_run: bool,
}

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
    /// Where the call's [`CallReport`] goes when it ends; `None`: nowhere (nothing is made).
    pub report: Option<Arc<OnceLock<CallReport>>>,
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

/// What a call's trace span records, and its [`CallReport`] says, when the call ends, however
/// it ends. Fixed size: a call that reports nowhere allocates nothing for it.
struct Tally<'a> {
    span: tracing::Span,
    attempts: u32,
    replayed: bool,
    /// The generation of each send, in order (the first `attempts` of them).
    generations: [u64; MAX_SENDS],
    /// Whether each send may have run: true from when it goes out until its failure says it
    /// did not.
    ran: [bool; MAX_SENDS],
    report: Option<&'a OnceLock<CallReport>>,
}

impl Tally<'_> {
    /// The call goes out (again) on `generation`.
    fn sent(&mut self, generation: u64, replayed: bool) {
        if let Some(at) = self.slot(self.attempts) {
            self.generations[at] = generation;
            self.ran[at] = true;
        }
        self.attempts += 1;
        self.replayed = replayed;
    }

    /// The last send failed with `verdict` on `failure`: whether the server may have run it.
    fn failed(&mut self, verdict: Verdict, failure: &Failure) {
        if let Some(at) = self.attempts.checked_sub(1).and_then(|n| self.slot(n)) {
            self.ran[at] = may_have_run(verdict, failure);
        }
    }

    /// Where send number `n` (from 0) is kept.
    fn slot(&self, n: u32) -> Option<usize> {
        usize::try_from(n).ok().filter(|&n| n < MAX_SENDS)
    }

    fn kept(&self) -> usize {
        usize::try_from(self.attempts).map_or(MAX_SENDS, |n| n.min(MAX_SENDS))
    }
}

impl Drop for Tally<'_> {
    fn drop(&mut self) {
        self.span.record("attempts", i64::from(self.attempts));
        self.span.record("replayed", self.replayed);
        if let Some(report) = self.report {
            let kept = self.kept();
            let _ = report.set(CallReport {
                attempts: self.attempts,
                replayed: self.replayed,
                generations: self.generations[..kept].to_vec(),
                may_have_run: self.ran[..kept].contains(&true),
            });
        }
    }
}

/// Whether a send that failed so may have run: only a send refused before it ran (not
/// delivered; not authorized, which the server answers unrun) did not.
fn may_have_run(verdict: Verdict, failure: &Failure) -> bool {
    match verdict {
        Verdict::NotDelivered => false,
        Verdict::ServerAnswered => !matches!(failure, Failure::Unauthorized { .. }),
        Verdict::DeadlinePassed
        | Verdict::OutcomeUnknown
        | Verdict::Unclear
        | Verdict::Aborted
        | Verdict::Malformed => true,
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

/// One call on its way through [`SupervisorHandle::send`]: what it asks, its deadline, and what
/// became of it so far.
struct Call<'a> {
    request: &'a CallRequest,
    method: &'a str,
    params: Option<&'a RawValue>,
    /// Named in an error only (made then).
    server: &'a str,
    /// The call's own deadline, at most `toolCallTimeoutMs`.
    limit: Duration,
    deadline: Instant,
    /// What the tool's annotations say, with `retryTools`.
    safety: ToolSafety,
    cancel: CancellationToken,
    /// A generation newer than this one is needed before the next send.
    after_generation: u64,
    /// Whether the call was sent again (at most once, SPEC §5).
    resent: bool,
    /// The failure that made us reconnect, to report with a failed reconnect.
    first_failure: Option<String>,
    /// How many times it went out, for the call's trace span and report (recorded once, at
    /// the end).
    tally: Tally<'a>,
}

/// What comes after a failed send.
enum Then {
    /// Send it again, on the generation the call now waits for.
    SendAgain,
    /// The call ends with this error.
    Fail(CallError),
}

impl Call<'_> {
    /// The names an error carries: the server's, and the tool's (or the method's).
    fn names(&self) -> (String, String) {
        (self.server.to_string(), self.request.tool.clone())
    }

    /// Send it once more, on a generation newer than `generation`; `first` is the failure
    /// that made the call send again, to report if no generation comes for the resend. Every
    /// resend records it: a call that went out is never reported as one that was not sent.
    fn again_after(&mut self, generation: u64, first: String) -> Then {
        self.resent = true;
        self.after_generation = generation;
        self.first_failure = Some(first);
        Then::SendAgain
    }

    /// No ready generation came: cancelled by the caller, a failed reconnect after a first
    /// send that failed (also one that was to be sent again in place, whose generation was
    /// lost meanwhile), or not ready at all (nothing was sent).
    fn not_ready(&mut self, not_ready: NotReady) -> CallError {
        let (server, tool) = self.names();
        if self.cancel.is_cancelled() {
            return CallError::Cancelled { server, tool };
        }
        match self.first_failure.take() {
            Some(first) => CallError::ReconnectFailed {
                server,
                tool,
                first,
                reconnect: not_ready_text(&not_ready),
            },
            None => {
                debug_assert_eq!(
                    self.tally.attempts, 0,
                    "a call that went out was reported unsent"
                );
                not_ready.into_error(server, tool)
            }
        }
    }

    /// The deadline passed before the call could go out again.
    fn timed_out(&self) -> CallError {
        let (server, tool) = self.names();
        CallError::TimedOut {
            server,
            tool,
            after_ms: self.limit.as_millis(),
        }
    }

    /// It went out and its outcome is unknown; it is not sent again.
    fn outcome_unknown(&self, cause: String, restored: Restored) -> CallError {
        let (server, tool) = self.names();
        CallError::OutcomeUnknown {
            server,
            tool,
            cause,
            restored,
        }
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
        let mut call = self.call(request, method, params);
        // A client's request, for the idle timeout, from now until it ends however it ends.
        let _requesting = self.requesting();
        loop {
            let ready = self
                .wait_ready(call.deadline, call.after_generation, &call.cancel)
                .await;
            let (generation, link) = ready.map_err(|not_ready| call.not_ready(not_ready))?;
            let remaining = call.deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Err(call.timed_out());
            }
            let failure = match self
                .send_once(&mut call, generation, &*link, remaining)
                .await
            {
                Ok(result) => {
                    self.shared.misses.store(0, Ordering::SeqCst);
                    return Ok(result);
                }
                Err(failure) => failure,
            };
            match self
                .after_failure(&mut call, failure, generation, &*link)
                .await
            {
                Then::SendAgain => {}
                Then::Fail(error) => return Err(error),
            }
        }
    }

    /// A call of `request` as it starts: its deadline and what its tool is known to allow.
    fn call<'a>(
        &'a self,
        request: &'a CallRequest,
        method: &'a str,
        params: Option<&'a RawValue>,
    ) -> Call<'a> {
        let config = &self.shared.config;
        let limit = request.timeout.map_or(config.tool_call_timeout, |t| {
            t.min(config.tool_call_timeout)
        });
        let mut safety = request.safety;
        safety.listed_in_retry_tools |= config.retry_tools.contains(&request.tool);
        Call {
            request,
            method,
            params,
            server: &self.name,
            limit,
            deadline: Instant::now() + limit,
            safety,
            cancel: request.cancel.clone().unwrap_or_default(),
            after_generation: 0,
            resent: false,
            first_failure: None,
            tally: Tally {
                span: tracing::Span::current(),
                attempts: 0,
                replayed: false,
                generations: [0; MAX_SENDS],
                ran: [false; MAX_SENDS],
                report: request.report.as_deref(),
            },
        }
    }

    /// Send the call once on `link` (of `generation`), within `remaining`.
    async fn send_once(
        &self,
        call: &mut Call<'_>,
        generation: u64,
        link: &dyn Link,
        remaining: Duration,
    ) -> Result<Box<RawValue>, Failure> {
        let options = CallOptions {
            timeout: remaining,
            cancel: call.cancel.clone(),
            origin: call.request.origin.clone(),
            headers: call.request.headers.clone(),
            relays_input: call.request.relays_input,
        };
        call.tally.sent(generation, call.resent);
        let _busy = InFlight::enter(&self.shared.in_flight);
        // The link ends the call at its deadline; this outer bound only guards against a link
        // that would not.
        let request = link.request(call.method, call.params, options);
        if link.keeps_deadlines() {
            return request.await;
        }
        match tokio::time::timeout_at(call.deadline + OUTER_GRACE, request).await {
            Ok(outcome) => outcome,
            Err(_) => Err(Failure::DeadlinePassed),
        }
    }

    /// A send on `generation` failed: classify the failure, then recover under the rule (SPEC
    /// §5) or end the call.
    async fn after_failure(
        &self,
        call: &mut Call<'_>,
        failure: Failure,
        generation: u64,
        link: &dyn Link,
    ) -> Then {
        let verdict = classify::classify(&failure);
        call.tally.failed(verdict, &failure);
        let cause = describe(&failure);
        match classify::recovery(verdict, call.safety) {
            Recovery::Return => {
                let (server, tool) = (call.server, call.request.tool.as_str());
                Then::Fail(self.returned(verdict, failure, generation, server, tool, call.limit))
            }
            Recovery::ReconnectAndSend if !call.resent => {
                // Not delivered (the server did not run it), or outcome unknown for a tool
                // that is safe to repeat: reconnect, then send once more on the fresh one.
                self.suspect(generation, cause.clone(), is_stale_session(&failure));
                call.again_after(generation, cause)
            }
            Recovery::ReconnectAndSend | Recovery::ReconnectAndFailUnknown => {
                self.suspect(generation, cause.clone(), is_stale_session(&failure));
                let restored = self.restored(call.deadline, generation, &call.cancel).await;
                Then::Fail(match verdict {
                    Verdict::NotDelivered => {
                        let (server, tool) = call.names();
                        CallError::NotDelivered {
                            server,
                            tool,
                            cause,
                            restored,
                        }
                    }
                    _ => call.outcome_unknown(cause, restored),
                })
            }
            Recovery::Probe => self.after_unclear(call, cause, generation, link).await,
        }
    }

    /// An unclear failure: ping the generation, then send again on it (alive), reconnect and
    /// send again (dead, a tool safe to repeat), or end the call as "may have run".
    async fn after_unclear(
        &self,
        call: &mut Call<'_>,
        cause: String,
        generation: u64,
        link: &dyn Link,
    ) -> Then {
        let alive = self.probe_alive(link, call.deadline).await;
        match classify::after_probe(alive, call.safety) {
            // The same generation again (or, when it is lost before the resend, the next).
            AfterProbe::SendAgain if !call.resent => call.again_after(generation - 1, cause),
            AfterProbe::SendAgain | AfterProbe::FailUnknown => {
                Then::Fail(call.outcome_unknown(cause, Restored::Yes { generation }))
            }
            AfterProbe::Reconnect(_) => {
                self.suspect(
                    generation,
                    format!("{cause}; then the server did not answer a ping"),
                    false,
                );
                if call.safety.replay_safe() && !call.resent {
                    return call.again_after(generation, cause);
                }
                let restored = self.restored(call.deadline, generation, &call.cancel).await;
                Then::Fail(call.outcome_unknown(cause, restored))
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
