//! Input-required rounds (MRTR) for clients of protocol 2026-07-28, which take no requests from
//! a server: when a server's request (`elicitation/create`, `sampling/createMessage`,
//! `roots/list`) comes during such a client's tool call, the call's answer becomes an
//! input-required result that carries it, and the client's retry with `inputResponses` and the
//! echoed `requestState` answers the server's pending request. The call itself keeps running
//! upstream in between: it is never sent twice.
//!
//! It owns the rounds in flight, by an opaque `requestState` of its own. It never decodes the
//! requests or the answers it carries, and never holds a round past [`ROUND_LIMIT`].

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use mcp_supervisor::CallError;
use mcp_supervisor::link::{BoxFuture, Downstream, RpcError};
use serde_json::value::RawValue;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::json::lock;

/// How every `requestState` of ours begins.
const STATE_PREFIX: &str = "msv-";

/// A round whose client does not come back within this is dropped (its call cancelled), by a
/// timer of its own.
pub const ROUND_LIMIT: Duration = Duration::from_secs(600);

/// The most rounds that wait for their clients at once, over every client of the proxy; past
/// it, a call whose server asks for input is cancelled and its client told so ([`Step::Refused`]):
/// clients that never come back cannot make the proxy hold calls without bound.
pub const MAX_WAITING: usize = 256;

type Reply = oneshot::Sender<Result<Box<RawValue>, RpcError>>;

/// Where a call's notifications (its progress) go: `(method, params)`.
pub type Notify = Arc<dyn Fn(&str, Option<Box<RawValue>>) + Send + Sync>;

/// Whether the client declared what a server's request needs (`roots/list`, `sampling/...`).
pub type Allowed = Arc<dyn Fn(&str) -> bool + Send + Sync>;
type Outcome = Result<Box<RawValue>, CallError>;

/// A server's request during a call, waiting for the client.
struct Ask {
    method: String,
    params: Option<Box<RawValue>>,
    reply: Reply,
}

/// What a client's call comes to, this round.
pub enum Step {
    /// The call ended.
    Done(Outcome),
    /// The server asks the client first: `(key, method, params)` each, and the state to echo.
    Input {
        requests: Vec<(String, String, Option<Box<RawValue>>)>,
        state: String,
    },
    /// The server asked the client something, but [`MAX_WAITING`] rounds already wait for
    /// their clients: the call was cancelled upstream (it may have done part of its work).
    Refused(RpcError),
}

/// The server requests of a call not yet run ([`Rounds::prepare`]).
pub struct Pending {
    asks: mpsc::UnboundedReceiver<Ask>,
}

/// A call waiting for its client's input.
struct Round {
    call: JoinHandle<Outcome>,
    asks: mpsc::UnboundedReceiver<Ask>,
    replies: HashMap<String, Reply>,
    since: Instant,
}

/// The rounds waiting for their clients, by state.
type Waiting = Arc<Mutex<HashMap<String, Round>>>;

/// The rounds in flight.
#[derive(Default)]
pub struct Rounds {
    rounds: Waiting,
    next: AtomicU64,
}

/// What the call's task came to. The call runs in a task of its own only so that it outlives
/// the request between rounds; how it ends is the request's, as if it had run in place:
///
/// - a panic goes on in the request that drives the round (a face turns it into an internal
///   error answer, as for a call without rounds); it is not made into a [`CallError`], which
///   would name a server and a tool this module does not know, and say the call came back;
/// - a cancelled task is one the runtime is dropping as it shuts down ([`Rounds::expire`]
///   aborts only rounds waiting in the map, never one being driven): the request is being
///   dropped with it, and nothing is answered.
async fn outcome(ended: Result<Outcome, tokio::task::JoinError>) -> Outcome {
    match ended {
        Ok(outcome) => outcome,
        Err(failed) => match failed.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            Err(_cancelled) => std::future::pending().await,
        },
    }
}

/// The origin of a call in rounds: each server request becomes an [`Ask`]; its progress goes to
/// `progress` (the client's stream), as it came.
struct Collect {
    asks: mpsc::UnboundedSender<Ask>,
    progress: Option<Notify>,
    /// A request the client did not declare it can answer is refused at once, never asked.
    allowed: Option<Allowed>,
}

impl Downstream for Collect {
    fn request(
        &self,
        method: &str,
        params: Option<Box<RawValue>>,
    ) -> BoxFuture<'static, Result<Box<RawValue>, RpcError>> {
        if self
            .allowed
            .as_ref()
            .is_some_and(|allowed| !allowed(method))
        {
            let error = crate::declared::undeclared(method);
            return Box::pin(async move { Err(error) });
        }
        let (reply, answer) = oneshot::channel();
        let sent = self
            .asks
            .send(Ask {
                method: method.to_string(),
                params,
                reply,
            })
            .is_ok();
        Box::pin(async move {
            if !sent {
                return Err(RpcError::new(-32603, "the client's call has ended"));
            }
            answer
                .await
                .unwrap_or_else(|_| Err(RpcError::new(-32603, "the client did not come back")))
        })
    }

    fn notify(&self, method: &str, params: Option<Box<RawValue>>) {
        if let Some(progress) = &self.progress {
            progress(method, params);
        }
    }
}

impl Rounds {
    /// Start a call whose server requests come back as input rounds. `call` is given the origin
    /// to pass to the hub. `progress` gets the call's notifications. A server's request that
    /// `allowed` refuses (the client did not declare the capability) gets an error at once.
    pub async fn start(
        &self,
        call: impl FnOnce(Arc<dyn Downstream>) -> BoxFuture<'static, Outcome>,
        progress: Option<Notify>,
        allowed: Option<Allowed>,
    ) -> Step {
        let (origin, pending) = Self::prepare(progress, allowed);
        self.run(pending, call(origin)).await
    }

    /// The origin to give a call whose server requests come back as input rounds, and what
    /// [`Rounds::run`] reads them from. `progress` gets the call's notifications; a server's
    /// request that `allowed` refuses gets an error at once.
    pub fn prepare(
        progress: Option<Notify>,
        allowed: Option<Allowed>,
    ) -> (Arc<dyn Downstream>, Pending) {
        // What bounds `asks`: one call's requests to its client, each waiting for its answer
        // (a server asks a few at a time).
        let (tx, asks) = mpsc::unbounded_channel();
        let origin: Arc<dyn Downstream> = Arc::new(Collect {
            asks: tx,
            progress,
            allowed,
        });
        (origin, Pending { asks })
    }

    /// Run `call` (made with the origin [`Rounds::prepare`] gave with `pending`) until it ends
    /// or its server asks its client something.
    pub async fn run(&self, pending: Pending, call: BoxFuture<'static, Outcome>) -> Step {
        let round = Round {
            call: tokio::spawn(call),
            asks: pending.asks,
            replies: HashMap::new(),
            since: Instant::now(),
        };
        self.drive(round).await
    }

    /// Whether `state` has the form of the states this front makes (any process's): a retry
    /// that carries one and is not held here belongs to another replica, or expired.
    pub fn is_ours(state: &str) -> bool {
        state.starts_with(STATE_PREFIX)
    }

    /// A client's retry: its answers go to the server's requests of round `state`, and the
    /// call goes on. `None`: no such round (unknown, or dropped after [`ROUND_LIMIT`]).
    pub async fn resume(
        &self,
        state: &str,
        responses: BTreeMap<String, serde_json::Value>,
    ) -> Option<Step> {
        let mut round = lock(&self.rounds).remove(state)?;
        for (key, answer) in responses {
            if let Some(reply) = round.replies.remove(&key) {
                let answer = serde_json::value::to_raw_value(&answer)
                    .map_err(|e| RpcError::new(-32603, e.to_string()));
                let _ = reply.send(answer);
            }
        }
        // A request the client did not answer gets an error, not silence.
        for (_, reply) in round.replies.drain() {
            let _ = reply.send(Err(RpcError::new(
                -32603,
                "the client's retry did not answer this request",
            )));
        }
        Some(self.drive(round).await)
    }

    /// Wait for the call to end or for the server's next request(s).
    async fn drive(&self, mut round: Round) -> Step {
        let first = tokio::select! {
            ended = &mut round.call => return Step::Done(outcome(ended).await),
            ask = round.asks.recv() => ask,
        };
        let Some(first) = first else {
            // Every origin handle is gone: only the call's end can come.
            return Step::Done(outcome((&mut round.call).await).await);
        };
        let mut requests = Vec::new();
        let mut ask = Some(first);
        while let Some(Ask {
            method,
            params,
            reply,
        }) = ask
        {
            let key = format!("r{}", self.next.fetch_add(1, Ordering::Relaxed));
            round.replies.insert(key.clone(), reply);
            requests.push((key, method, params));
            // Requests that came together go together.
            ask = round.asks.recv().now_or_never().flatten();
        }
        let state = self.state_id();
        round.since = Instant::now();
        let since = round.since;
        {
            let mut waiting = lock(&self.rounds);
            if waiting.len() >= MAX_WAITING {
                drop(waiting);
                round.call.abort();
                tracing::warn!(
                    "{MAX_WAITING} calls already wait for their clients' input: a call whose server asked for input was cancelled"
                );
                return Step::Refused(RpcError::new(
                    -32603,
                    format!(
                        "the server asked for input, but {MAX_WAITING} calls already wait for their clients' input here: this call was cancelled (it may have done part of its work); answer or abandon the others first"
                    ),
                ));
            }
            waiting.insert(state.clone(), round);
        }
        expire_later(Arc::downgrade(&self.rounds), state.clone(), since);
        Step::Input { requests, state }
    }

    /// An opaque, unguessable state id.
    fn state_id(&self) -> String {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u64(n);
        let a = hasher.finish();
        let b = std::collections::hash_map::RandomState::new().hash_one(a);
        format!("{STATE_PREFIX}{n:x}-{a:016x}{b:016x}")
    }

    /// How many rounds wait for their clients.
    pub fn waiting(&self) -> usize {
        lock(&self.rounds).len()
    }
}

/// Drop round `state` if its client has not come back [`ROUND_LIMIT`] after `since` (it is
/// still the round that began waiting then): its call is cancelled. One timer per waiting
/// round, so at most [`MAX_WAITING`]; it holds the rounds weakly, and ends with them.
fn expire_later(
    rounds: std::sync::Weak<Mutex<HashMap<String, Round>>>,
    state: String,
    since: Instant,
) {
    tokio::spawn(async move {
        tokio::time::sleep_until(since + ROUND_LIMIT).await;
        let Some(rounds) = rounds.upgrade() else {
            return;
        };
        let mut waiting = lock(&rounds);
        if waiting
            .get(&state)
            .is_some_and(|round| round.since == since)
            && let Some(round) = waiting.remove(&state)
        {
            round.call.abort();
            tracing::info!(
                "an input round's client did not come back within {} s: its call was cancelled",
                ROUND_LIMIT.as_secs()
            );
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(text: &str) -> Box<RawValue> {
        RawValue::from_string(text.to_string()).unwrap()
    }

    #[tokio::test]
    async fn a_servers_request_becomes_a_round_and_the_answer_finishes_the_call() {
        let rounds = Rounds::default();
        let step = rounds
            .start(
                |origin| {
                    Box::pin(async move {
                        let answer = origin
                            .request("elicitation/create", Some(raw(r#"{"message":"name?"}"#)))
                            .await
                            .map_err(|e| CallError::Malformed {
                                server: "s".into(),
                                tool: "t".into(),
                                detail: e.message,
                            })?;
                        Ok(raw(&format!(r#"{{"got":{}}}"#, answer.get())))
                    })
                },
                None,
                None,
            )
            .await;
        let Step::Input { requests, state } = step else {
            panic!("expected an input round");
        };
        assert_eq!(requests.len(), 1);
        assert_eq!(requests[0].1, "elicitation/create");
        let mut responses = BTreeMap::new();
        responses.insert(
            requests[0].0.clone(),
            serde_json::json!({"action": "accept"}),
        );
        let Some(Step::Done(Ok(result))) = rounds.resume(&state, responses).await else {
            panic!("expected the call's result");
        };
        assert_eq!(result.get(), r#"{"got":{"action":"accept"}}"#);
        assert!(
            rounds.resume(&state, BTreeMap::new()).await.is_none(),
            "a round is used once"
        );
    }

    #[tokio::test]
    async fn a_request_the_client_did_not_declare_is_refused_without_a_round() {
        let rounds = Rounds::default();
        let allowed: Allowed = Arc::new(|method| method != "sampling/createMessage");
        let step = rounds
            .start(
                |origin| {
                    Box::pin(async move {
                        let refused = origin
                            .request("sampling/createMessage", Some(raw("{}")))
                            .await
                            .expect_err("refused");
                        Ok(raw(
                            &serde_json::json!({ "said": refused.message }).to_string()
                        ))
                    })
                },
                None,
                Some(allowed),
            )
            .await;
        let Step::Done(Ok(result)) = step else {
            panic!("the call ends without an input round");
        };
        assert!(
            result.get().contains("did not declare the capability"),
            "{}",
            result.get()
        );
    }

    #[tokio::test]
    async fn a_call_that_panics_panics_in_the_request_that_drives_it_not_as_a_call_error() {
        let rounds = Rounds::default();
        let driven = std::panic::AssertUnwindSafe(rounds.start(
            |_| {
                Box::pin(async {
                    if true {
                        panic!("a bug in the call");
                    }
                    Ok(raw("{}"))
                })
            },
            None,
            None,
        ))
        .catch_unwind()
        .await;
        let panic = driven.err().expect("the call's panic reaches its request");
        assert_eq!(panic.downcast_ref::<&str>(), Some(&"a bug in the call"));
    }

    #[tokio::test]
    async fn a_call_without_requests_is_done_at_once() {
        let rounds = Rounds::default();
        let step = rounds
            .start(|_| Box::pin(async { Ok(raw("{}")) }), None, None)
            .await;
        assert!(matches!(step, Step::Done(Ok(_))));
    }

    /// A call that asks its client something once, and tells `ended` when its future is
    /// dropped (cancelled) or done.
    fn asking(
        ended: tokio::sync::mpsc::UnboundedSender<()>,
    ) -> impl FnOnce(Arc<dyn Downstream>) -> BoxFuture<'static, Outcome> {
        move |origin| {
            Box::pin(async move {
                struct Tell(tokio::sync::mpsc::UnboundedSender<()>);
                impl Drop for Tell {
                    fn drop(&mut self) {
                        let _ = self.0.send(());
                    }
                }
                let _tell = Tell(ended);
                let _ = origin.request("elicitation/create", None).await;
                Ok(raw("{}"))
            })
        }
    }

    /// A round waits for its client until ROUND_LIMIT and not a moment less; then its own timer
    /// drops it and cancels its call, with no other call needed to notice.
    #[tokio::test(start_paused = true)]
    async fn a_round_whose_client_never_comes_back_is_cancelled_by_its_timer() {
        let rounds = Rounds::default();
        let (ended, mut gone) = tokio::sync::mpsc::unbounded_channel();
        let Step::Input { state, .. } = rounds.start(asking(ended), None, None).await else {
            panic!("expected an input round");
        };
        tokio::time::sleep(ROUND_LIMIT - Duration::from_secs(1)).await;
        assert_eq!(rounds.waiting(), 1, "still waiting just before the limit");
        assert!(gone.try_recv().is_err(), "its call still runs");
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(rounds.waiting(), 0, "dropped at the limit");
        assert!(gone.recv().await.is_some(), "its call was cancelled");
        assert!(rounds.resume(&state, BTreeMap::new()).await.is_none());
    }

    /// At most MAX_WAITING rounds wait at once: the next call whose server asks is cancelled
    /// and refused with an error that says why; the rounds already waiting are untouched.
    #[tokio::test(start_paused = true)]
    async fn past_the_cap_a_call_that_asks_is_cancelled_and_refused() {
        let rounds = Rounds::default();
        let (ended, mut gone) = tokio::sync::mpsc::unbounded_channel();
        for _ in 0..MAX_WAITING {
            let step = rounds.start(asking(ended.clone()), None, None).await;
            assert!(matches!(step, Step::Input { .. }));
        }
        assert_eq!(rounds.waiting(), MAX_WAITING);
        let Step::Refused(error) = rounds.start(asking(ended), None, None).await else {
            panic!("expected a refusal past the cap");
        };
        assert!(error.message.contains("already wait"), "{}", error.message);
        assert!(
            gone.recv().await.is_some(),
            "the refused call was cancelled"
        );
        assert_eq!(rounds.waiting(), MAX_WAITING);
        assert!(gone.try_recv().is_err(), "no waiting call was touched");
    }
}
