//! How the face answers one POSTed request once the routes have checked it: an `initialize`
//! that opens a session, a request on a session, or a 2026-07-28 request of a client of its own.
//! Each request runs in a task of its own, bounded by its places in flight; its answer comes
//! as one JSON body while nothing related to it comes first, else as an event stream in the
//! order `ordering` gives; the host's stop cuts it short with the stopping answer.
//!
//! It never reads headers (the routes' and `checks`'), never reads a message beyond the
//! envelope already read, and never holds a lock across an await.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::http::{StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::{FutureExt, StreamExt};
use serde_json::value::RawValue;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot};
use tokio::task::AbortHandle;
use tokio_util::sync::CancellationToken;

use super::checks::{JSON, Refusal, SESSION_HEADER, is_error_answer, stateless_status};
use super::options::{SESSION_IN_FLIGHT, SESSIONLESS_IN_FLIGHT, Stopping};
use super::ordering::{CallMessages, Part};
use super::session::{Hold, HttpSession, short};
use super::store::Sessions;
use crate::{Client, Message, OUTBOX, Proxy, error_text};

/// How long a request may still take to be answered once its session has ended (its calls are
/// cancelled then, so their answers come at once).
const ENDING_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// The reconnection delay a priming event asks a client for (SEP-1699).
const PRIMING_RETRY: std::time::Duration = std::time::Duration::from_millis(1000);

/// The JSON-RPC error code of a request refused for a bound of requests in flight.
const TOO_MANY_IN_FLIGHT: i64 = -32000;

/// The `/mcp` routes' shared state.
pub(crate) struct HttpFace {
    pub(crate) proxy: Arc<Proxy>,
    pub(crate) sessions: Arc<Sessions>,
    /// When the host stops: calls still running are answered as stopping, streams end.
    pub(crate) stopping: Stopping,
    /// The largest POST body read.
    pub(crate) limit: usize,
    /// Numbers the event streams of sessionless requests.
    next_stream: AtomicU64,
    /// Places of the sessionless requests in flight ([`SESSIONLESS_IN_FLIGHT`]).
    sessionless: Arc<Semaphore>,
    /// Places of all requests in flight ([`super::Options::max_in_flight`]).
    in_flight: Arc<Semaphore>,
    max_in_flight: usize,
    /// The bearer checks, when the face is a resource server.
    pub(crate) identity: Option<super::identity::Identity>,
}

impl HttpFace {
    pub(crate) fn new(
        proxy: Arc<Proxy>,
        sessions: Arc<Sessions>,
        stopping: Stopping,
        limit: usize,
        max_in_flight: usize,
        identity: Option<super::identity::Identity>,
    ) -> Self {
        Self {
            proxy,
            sessions,
            stopping,
            limit,
            next_stream: AtomicU64::new(1),
            sessionless: Arc::new(Semaphore::new(SESSIONLESS_IN_FLIGHT)),
            in_flight: Arc::new(Semaphore::new(max_in_flight)),
            max_in_flight,
            identity,
        }
    }

    /// A place among the face's requests in flight; none when they are all taken.
    fn place(&self) -> Option<OwnedSemaphorePermit> {
        self.in_flight.clone().try_acquire_owned().ok()
    }

    /// The answer to a request that found no place among the face's.
    fn face_full(&self, id: Option<&RawValue>) -> Response {
        too_many_in_flight(
            id,
            &format!(
                "this server has {} requests unanswered (all clients together)",
                self.max_in_flight
            ),
        )
    }

    /// `initialize` without a session: a new client; a session for it once its answer is not an
    /// error (a refused `initialize` opens none: 400 with the error).
    /// With auth, the session belongs to `caller` (sealed into its id).
    pub(crate) async fn initialize(
        &self,
        message: &Message,
        caller: Option<Arc<crate::caller::Caller>>,
    ) -> Response {
        let (out, messages) = mpsc::channel(OUTBOX);
        let client = self.proxy.connect(out);
        client.set_caller(caller);
        let mut opening = Opening {
            proxy: &self.proxy,
            client: Some(client.clone()),
        };
        let answer = self.proxy.handle_message(&client, message, None).await;
        let Some(answer) = answer else {
            return refuse(
                StatusCode::INTERNAL_SERVER_ERROR,
                "initialize was not answered",
            );
        };
        if let Some(seconds) = super::identity::retry_after(&answer) {
            return super::identity::too_many(answer, seconds);
        }
        if is_error_answer(&answer) {
            return json(StatusCode::BAD_REQUEST, answer);
        }
        opening.client = None;
        let session = self.sessions.open_new(client, messages);
        tracing::debug!(session = %short(&session.id), "session opened");
        (
            StatusCode::OK,
            [
                (header::CONTENT_TYPE.as_str(), JSON.to_string()),
                (SESSION_HEADER, session.id.clone()),
            ],
            answer,
        )
            .into_response()
    }

    /// A request on a session, handled in a task of its own: its answer as JSON while nothing
    /// related comes first, else an event stream. Dropping the response (the client went away)
    /// aborts the task, which cancels the call upstream.
    pub(crate) async fn call(
        &self,
        session: &Arc<HttpSession>,
        message: Message,
        stream_first: bool,
    ) -> Response {
        let id = message.id().map(ToOwned::to_owned);
        let Some(face_place) = self.place() else {
            return self.face_full(id.as_deref());
        };
        let Ok(place) = session.in_flight.clone().try_acquire_owned() else {
            return too_many_in_flight(
                id.as_deref(),
                &format!("this session has {SESSION_IN_FLIGHT} requests unanswered"),
            );
        };
        let (related_tx, related) = mpsc::channel(OUTBOX);
        let (answer_tx, answer_rx) = oneshot::channel();
        let task = tokio::spawn({
            let (proxy, client) = (self.proxy.clone(), session.client.clone());
            let (stopping, id) = (self.stopping.clone(), id.clone());
            // The audit names the session its requests came on (none made without an audit).
            let session_id = self.proxy.audit().map(|_| session.id.clone());
            async move {
                let handled = proxy.handle_message_in(
                    &client,
                    &message,
                    Some(related_tx),
                    session_id.as_deref(),
                );
                let answer = until_stopping(handled, &stopping, id.as_deref()).await;
                let _ = answer_tx.send(answer);
            }
        });
        let call = Call {
            task: task.abort_handle(),
            _held: Some(session.hold()),
            _places: (place, face_place),
        };
        let ended = session.ended.clone();
        let answer = async move {
            let ending = async {
                ended.cancelled().await;
                tokio::time::sleep(ENDING_GRACE).await;
            };
            let not_answered = |why: &str| Some(error_text(id.as_deref(), -32603, why));
            tokio::select! {
                biased;
                // `None`: its client cancelled it, and it gets no answer.
                answer = answer_rx => answer.unwrap_or_else(|_| not_answered("the request was not answered")),
                () = ending => not_answered("the session ended before the request was answered"),
            }
        }
        .boxed();
        let mut messages = CallMessages::new(related, answer, call);
        // A client that puts the event stream first in `Accept` gets one from the start, opened
        // with a priming event (an id, the reconnection delay, no data: SEP-1699); any other
        // gets JSON unless something related to the request comes before its answer.
        let first = if stream_first {
            None
        } else {
            match messages.next().await {
                Some(Part::Answer(answer)) => return answered(answer),
                Some(related) => Some(related),
                // Its client cancelled it before anything came: an event stream that ends
                // without an answer (the client expects none).
                None => None,
            }
        };
        let stream = session.next_stream.fetch_add(1, Ordering::Relaxed);
        event_stream(stream, first, messages, true, &self.stopping)
    }

    /// A request of protocol 2026-07-28 (no session), its headers already checked against its
    /// body (`meta_malformed`: whether its `_meta` lacks that era's identity): handled as the one
    /// request of a client of its own.
    pub(crate) async fn stateless(
        &self,
        message: Message,
        meta_malformed: bool,
        id: Option<Box<RawValue>>,
        caller: Option<Arc<crate::caller::Caller>>,
    ) -> Response {
        let Some(face_place) = self.place() else {
            return self.face_full(id.as_deref());
        };
        let Ok(place) = self.sessionless.clone().try_acquire_owned() else {
            return too_many_in_flight(
                id.as_deref(),
                &format!("{SESSIONLESS_IN_FLIGHT} requests without a session are unanswered"),
            );
        };
        // Its unrelated messages have nowhere to go (a client of one request): the channel is
        // dropped with the client.
        let (out, _unrelated) = mpsc::channel(OUTBOX);
        let client = self.proxy.connect(out);
        client.set_stateless();
        client.set_caller(caller);
        let (related_tx, related) = mpsc::channel(OUTBOX);
        let (answer_tx, answer_rx) = oneshot::channel();
        let task = tokio::spawn({
            let proxy = self.proxy.clone();
            let (stopping, id) = (self.stopping.clone(), id.clone());
            async move {
                let handled = proxy.handle_message(&client, &message, Some(related_tx));
                let answer = until_stopping(handled, &stopping, id.as_deref()).await;
                proxy.disconnect(&client);
                let _ = answer_tx.send(answer);
            }
        });
        let answer = async move {
            Some(answer_rx.await.ok().flatten().unwrap_or_else(|| {
                error_text(id.as_deref(), -32603, "the request was not answered")
            }))
        }
        .boxed();
        let call = Call {
            task: task.abort_handle(),
            _held: None,
            _places: (place, face_place),
        };
        let mut messages = CallMessages::new(related, answer, call);
        let first = match messages.next().await {
            Some(Part::Answer(answer)) => {
                if let Some(seconds) = super::identity::retry_after(&answer) {
                    return super::identity::too_many(answer, seconds);
                }
                // An error of that era's own (a refusal) as JSON with its status; any other
                // answer as an event stream, as a server of that era sends it.
                let status = stateless_status(&answer, meta_malformed);
                if status != StatusCode::OK {
                    return json(status, answer);
                }
                Part::Answer(answer)
            }
            Some(related) => related,
            None => {
                return refuse(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "the request was not answered",
                );
            }
        };
        let stream = self.next_stream.fetch_add(1, Ordering::Relaxed);
        event_stream(stream, Some(first), messages, false, &self.stopping)
    }
}

/// A request's messages as an event stream, each with id `STREAM/N`: `first` and the rest,
/// after a priming event when `priming` (an id, the reconnection delay, no data: SEP-1699; a
/// request of a session may be resumed, one of protocol 2026-07-28 is not). One cut short by the
/// host's stop (its answer is then the stopping error) ends with the stopping hint.
fn event_stream(
    stream: u64,
    first: Option<Part>,
    messages: CallMessages<Call>,
    priming: bool,
    stopping: &Stopping,
) -> Response {
    let priming = priming.then(|| {
        Event::default()
            .id(format!("{stream}/p"))
            .retry(PRIMING_RETRY)
            .data("")
    });
    let events = futures::stream::unfold(
        (first, messages, 0u64),
        move |(first, mut messages, n)| async move {
            let part = match first {
                Some(part) => part,
                None => messages.next().await?,
            };
            let (Part::Related(text) | Part::Answer(text)) = part;
            let event = message_event(format!("{stream}/{n}"), &text);
            Some((Ok::<_, Infallible>(event), (None, messages, n + 1)))
        },
    );
    let events = futures::stream::iter(priming.map(Ok))
        .chain(events)
        .chain(stopping_hint(stopping.clone()));
    Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// A request's handling, unless the host stops first: then it is dropped on the spot (which
/// cancels it upstream, before the stop closes the servers) and the answer is the stopping
/// answer. The stop is looked at first: the sessions end right after it, and a call cut short
/// by that must still say that the host stops.
async fn until_stopping(
    handled: impl std::future::Future<Output = Option<String>>,
    stopping: &Stopping,
    id: Option<&RawValue>,
) -> Option<String> {
    let token: &CancellationToken = &stopping.token;
    tokio::select! {
        biased;
        () = token.cancelled() => Some((stopping.answer)(id)),
        answer = handled => answer,
    }
}

/// The last event of a stream that ends because the host stops: no data, only the delay
/// before the client reconnects (by then to another replica). Nothing for a stream that ended
/// otherwise.
pub(crate) fn stopping_hint(
    stopping: Stopping,
) -> impl futures::Stream<Item = Result<Event, Infallible>> + Send + 'static {
    futures::stream::once(async move {
        stopping
            .is_stopping()
            .then(|| Ok(Event::default().comment("stopping").retry(stopping.retry)))
    })
    .filter_map(std::future::ready)
}

/// A client whose `initialize` is under way: disconnected if it opens no session (refused, or
/// the POST dropped).
struct Opening<'a> {
    proxy: &'a Arc<Proxy>,
    client: Option<Arc<Client>>,
}

impl Drop for Opening<'_> {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            self.proxy.disconnect(&client);
        }
    }
}

/// A request's task: aborted when dropped (a no-op once it has ended); keeps its session alive.
struct Call {
    task: AbortHandle,
    _held: Option<Hold>,
    /// Its places among the requests in flight (its session's or the sessionless ones, and
    /// the face's), given back when the call is over.
    _places: (OwnedSemaphorePermit, OwnedSemaphorePermit),
}

impl Drop for Call {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One SSE event carrying a JSON-RPC message.
pub(crate) fn message_event(id: String, text: &str) -> Event {
    Event::default().event("message").id(id).data(text)
}

/// `status` with a JSON body.
/// A request's answer as JSON: `200`, or `429` with `Retry-After` for a rate limit's refusal.
pub(crate) fn answered(answer: String) -> Response {
    match super::identity::retry_after(&answer) {
        Some(seconds) => super::identity::too_many(answer, seconds),
        None => json(StatusCode::OK, answer),
    }
}

pub(crate) fn json(status: StatusCode, body: String) -> Response {
    (status, [(header::CONTENT_TYPE, JSON)], body).into_response()
}

/// `status` with a JSON-RPC error (null id) that says why.
pub(crate) fn refuse(status: StatusCode, message: &str) -> Response {
    Refusal::new(status, message).into_response()
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        json(self.status, self.body)
    }
}

/// A request refused for a bound of requests in flight (`why`): 429, with a JSON-RPC error that
/// says to wait for answers; nothing of it ran.
fn too_many_in_flight(id: Option<&RawValue>, why: &str) -> Response {
    Refusal::error(
        StatusCode::TOO_MANY_REQUESTS,
        id,
        TOO_MANY_IN_FLIGHT,
        &format!(
            "Too many requests in flight: {why}; wait for their answers before sending more (the request did not run)"
        ),
    )
    .into_response()
}
