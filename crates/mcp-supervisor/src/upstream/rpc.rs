//! The JSON-RPC peer of one generation: it sends requests and notifications over a [`Wire`],
//! matches answers to their waiters by id, answers the server's own requests through the client
//! that caused them, and passes the server's notifications on, all as JSON text.
//!
//! It owns the ids on its link (integers of its own), progress tokens (replaced on the way up
//! with one of its own and mapped back on the way down), and the server's request ids while their
//! answers are out. It reads of each message only `id`, `method`, `result`/`error` presence and,
//! for progress and cancellation, the token or request id; everything else passes whole. It never
//! decides what a failure means or whether to send again.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mcp_supervisor_core::classify::Failure;
use mcp_supervisor_core::skim;
use rustc_hash::FxHashMap;
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::AbortHandle;

use super::wire::{Incoming, IncomingRx, Posted, Wire};
use crate::link::{CallOptions, Downstream, LinkEvent, LinkEvents, RpcError};
pub(crate) use members::{member, with_member};

type Answer = Result<Box<RawValue>, Failure>;

struct Waiter {
    tx: oneshot::Sender<Answer>,
    origin: Option<Arc<dyn Downstream>>,
}

/// A call's progress, routed back to its client with the client's own token.
struct ProgressRoute {
    origin: Arc<dyn Downstream>,
    token: Box<RawValue>,
}

struct State {
    /// `None` once no answer can come any more. Our own request ids (a counter) key this map
    /// and the next: no input chooses them, so a fast hash that does not resist chosen keys
    /// serves (SipHash cost about 1.5 % of the hop, docs/BENCHMARKS.md).
    pending: Option<FxHashMap<u64, Waiter>>,
    /// By the token we sent (the request's own id).
    progress: FxHashMap<u64, ProgressRoute>,
    /// The server's requests whose answers are out, by their id as JSON text.
    server_requests: HashMap<String, AbortHandle>,
}

/// One generation's peer. Cheap to share.
pub(crate) struct Peer {
    wire: Arc<dyn Wire>,
    next: AtomicU64,
    state: Mutex<State>,
    /// Where a server's request goes when no call of a client caused it.
    fallback: Arc<dyn Downstream>,
    events: LinkEvents,
    /// How long a client may take to answer a server's request.
    client_timeout: Duration,
    /// Turns true once no answer can come any more.
    shut: watch::Sender<bool>,
    /// Notifications to send, in order: one task sends them one after another, so none
    /// overtakes an earlier one (an HTTP wire posts each; a task each would race).
    outbox: mpsc::Sender<Note>,
    /// How many notifications went into the outbox, and how many the sending task is done with
    /// ([`Peer::flushed`]).
    queued: AtomicU64,
    sent: watch::Receiver<u64>,
}

/// A notification waiting in the outbox: its text and its HTTP headers.
type Note = (String, Vec<(String, String)>);

/// The most notifications waiting to be sent to one server. Past it the server has stopped
/// reading for that long; a notification is best effort, so a newer one is dropped (and said).
const OUTBOX: usize = 1024;

/// Send the outbox's notifications one after another until the peer is gone, counting those
/// done with in `sent`.
async fn send_in_order(
    wire: Arc<dyn Wire>,
    mut outbox: mpsc::Receiver<Note>,
    sent: watch::Sender<u64>,
) {
    while let Some((text, headers)) = outbox.recv().await {
        let _ = wire.send_with(text, None, headers).await;
        sent.send_modify(|n| *n += 1);
    }
}

impl Peer {
    /// Start the peer over `wire`, reading what the wire hands in from `incoming`.
    /// Start the peer over `wire`. With `incoming`, a task reads what the wire hands in from
    /// it; without, the wire hands each message to [`Peer::deliver`] itself (one hop less) and
    /// calls [`Peer::end`] when its connection ends.
    pub(crate) fn start(
        wire: Arc<dyn Wire>,
        incoming: Option<IncomingRx>,
        fallback: Arc<dyn Downstream>,
        events: LinkEvents,
        client_timeout: Duration,
    ) -> Arc<Self> {
        let (outbox, notes) = mpsc::channel(OUTBOX);
        let (sent_tx, sent) = watch::channel(0);
        tokio::spawn(send_in_order(wire.clone(), notes, sent_tx));
        let peer = Arc::new(Self {
            wire,
            next: AtomicU64::new(1),
            state: Mutex::new(State {
                pending: Some(FxHashMap::default()),
                progress: FxHashMap::default(),
                server_requests: HashMap::new(),
            }),
            fallback,
            events,
            client_timeout,
            shut: watch::channel(false).0,
            outbox,
            queued: AtomicU64::new(0),
            sent,
        });
        if let Some(incoming) = incoming {
            tokio::spawn(read(Arc::downgrade(&peer), incoming));
        }
        peer
    }

    /// One thing the wire saw.
    pub(crate) fn deliver(self: &Arc<Self>, message: Incoming) {
        match message {
            Incoming::Message { text, related } => self.receive(&text, related),
            Incoming::Lost { id, failure } => {
                if let Some(waiter) = self.take(id) {
                    let _ = waiter.tx.send(Err(failure));
                }
            }
        }
    }

    /// The wire's connection ended: no answer can come any more.
    pub(crate) fn end(&self) {
        self.shut();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Every write is a whole insert or remove: a poisoned lock holds consistent data.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Turns true once no answer can come any more (the wire's connection ended).
    pub(crate) fn shut_signal(&self) -> watch::Receiver<bool> {
        self.shut.subscribe()
    }

    /// Send a notification and wait until it went out, so that what follows comes after it.
    pub(crate) async fn notify_now_with(
        &self,
        method: &str,
        params: Option<&RawValue>,
        headers: Vec<(String, String)>,
    ) -> Result<(), Failure> {
        self.wire
            .send_with(notification_text(method, params), None, headers)
            .await
    }

    /// Send `method` with `params` and wait for the answer's `result`, as JSON text. Ended by
    /// `opts.timeout` or `opts.cancel`, and by dropping the future: each sends
    /// `notifications/cancelled` upstream.
    /// `headers` mirror it on a wire that sends them ([`Wire::send_with`]).
    pub(crate) async fn request_with(
        self: &Arc<Self>,
        method: &str,
        params: Option<&RawValue>,
        opts: CallOptions,
        headers: Vec<(String, String)>,
    ) -> Result<Box<RawValue>, Failure> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        // A progress token of the client's is replaced by ours (the request's id), so two
        // clients' tokens never collide on one server; the client's goes back down.
        let (with_ours, theirs) = match params.and_then(|p| replace_progress_token(p, id)) {
            Some((with_ours, theirs)) => (Some(with_ours), Some(theirs)),
            None => (None, None),
        };
        let params = with_ours.as_deref().or(params);
        let (tx, rx) = oneshot::channel();
        // The only request outstanding: nothing will come to share its write.
        let alone;
        {
            let mut state = self.lock();
            let State {
                pending, progress, ..
            } = &mut *state;
            let Some(pending) = pending.as_mut() else {
                return Err(Failure::TransportClosedBeforeSend);
            };
            pending.insert(
                id,
                Waiter {
                    tx,
                    origin: opts.origin.clone(),
                },
            );
            alone = pending.len() == 1;
            if let (Some(token), Some(origin)) = (theirs, &opts.origin) {
                progress.insert(
                    id,
                    ProgressRoute {
                        origin: origin.clone(),
                        token,
                    },
                );
            }
        }
        let mut guard = Outstanding {
            peer: self,
            id,
            armed: true,
        };
        let text = request_text(id, method, params);
        // One deadline for the send and the answer together.
        let deadline = tokio::time::Instant::now() + opts.timeout;
        // Among others, a request is posted where the wire can: it is written with them, and
        // only a failed write wakes it. Else it is sent, and its send waited for.
        let (send, written) = if alone {
            (Some(self.wire.send_alone(text, Some(id), headers)), None)
        } else {
            match self.wire.post(text, id) {
                Posted::Queued(written) => (None, Some(written)),
                Posted::Closed => {
                    guard.forget();
                    return Err(Failure::TransportClosedBeforeSend);
                }
                Posted::NotOffered(text) => {
                    (Some(self.wire.send_with(text, Some(id), headers)), None)
                }
            }
        };
        // The send, then the answer: one wait, under one timer.
        let exchange = async move {
            if let Some(send) = send {
                send.await?;
            }
            match rx.await {
                Ok(answer) => answer,
                // The peer closed (the connection ended) with this request in flight: after it
                // went out, or (posted, and its write failed or never came) before.
                Err(_) => {
                    let went_out = match written {
                        Some(written) => written.await == Ok(true),
                        None => true,
                    };
                    Err(match went_out {
                        true => Failure::ConnectionLostAfterSend,
                        false => Failure::TransportClosedBeforeSend,
                    })
                }
            }
        };
        let outcome = within(exchange, deadline, &opts, &mut guard).await?;
        guard.forget();
        outcome
    }

    /// Send a notification, best effort, after every notification sent before it.
    pub(crate) fn notify_with(
        self: &Arc<Self>,
        method: &str,
        params: Option<&RawValue>,
        headers: Vec<(String, String)>,
    ) {
        let text = notification_text(method, params);
        match self.outbox.try_send((text, headers)) {
            Ok(()) => {
                self.queued.fetch_add(1, Ordering::SeqCst);
            }
            Err(mpsc::error::TrySendError::Full(_)) => tracing::warn!(
                "dropped a {method} notification: {OUTBOX} notifications to this server are still unsent"
            ),
            Err(mpsc::error::TrySendError::Closed(_)) => {}
        }
    }

    /// Resolves once every notification queued so far has been handed to the wire (or can no
    /// longer be): a graceful close waits for it, so that a `notifications/cancelled` sent as
    /// the proxy stops reaches the server before its stdin closes.
    pub(crate) async fn flushed(&self) {
        let queued = self.queued.load(Ordering::SeqCst);
        let mut sent = self.sent.clone();
        let _ = sent.wait_for(|n| *n >= queued).await;
    }

    /// No answer can come any more: every waiter fails, new requests are refused, and the
    /// server's requests still out are abandoned.
    fn shut(&self) {
        let mut state = self.lock();
        state.pending = None;
        state.progress.clear();
        for (_, task) in state.server_requests.drain() {
            task.abort();
        }
        drop(state);
        self.shut.send_replace(true);
    }

    /// Take the waiter of request `id`, and its progress route.
    fn take(&self, id: u64) -> Option<Waiter> {
        let mut state = self.lock();
        state.progress.remove(&id);
        state.pending.as_mut().and_then(|p| p.remove(&id))
    }

    /// One message from the server.
    pub(crate) fn receive(self: &Arc<Self>, text: &str, related: Option<u64>) {
        let Ok(envelope) = Envelope::read(text) else {
            tracing::warn!(
                "dropped a message from the server that is not a JSON-RPC message: {}",
                clip(text)
            );
            return;
        };
        match (envelope.method, envelope.id) {
            (Some(method), Some(id)) => {
                let method = method.to_string();
                let id = id.to_owned();
                let params = envelope.params.map(ToOwned::to_owned);
                self.serve_request(method, id, params, related);
            }
            (Some(method), None) => {
                let params = envelope.params.map(ToOwned::to_owned);
                self.notification(&method, params);
            }
            (None, Some(id)) => {
                let answer = match (envelope.result, envelope.error) {
                    (Some(result), None) => Ok(result.to_owned()),
                    (None, Some(error)) => Err(server_error(error)),
                    _ => Err(Failure::UnexpectedResponse),
                };
                match id.get().parse::<u64>() {
                    Ok(id) => {
                        if let Some(waiter) = self.take(id) {
                            let _ = waiter.tx.send(answer);
                        }
                    }
                    Err(_) => {
                        tracing::debug!("dropped an answer to an id we did not send: {}", id.get())
                    }
                }
            }
            (None, None) => {
                // An id-less error (some servers answer a request they cannot parse so): it can
                // only be about the request on whose stream it came.
                if let (Some(error), Some(request)) = (envelope.error, related)
                    && let Some(waiter) = self.take(request)
                {
                    let _ = waiter.tx.send(Err(server_error(error)));
                } else {
                    tracing::debug!("dropped an id-less message from the server: {}", clip(text));
                }
            }
        }
    }

    fn notification(self: &Arc<Self>, method: &str, params: Option<Box<RawValue>>) {
        self.events.send(LinkEvent::SignOfLife);
        match method {
            "notifications/progress" => self.progress(params),
            "notifications/tools/list_changed" => self.events.send(LinkEvent::ToolListChanged),
            "notifications/cancelled" => {
                // The server gave up on one of its requests to a client.
                if let Some(key) = params.as_deref().and_then(cancelled_request_id) {
                    let task = self.lock().server_requests.remove(&key);
                    if let Some(task) = task {
                        task.abort();
                    }
                }
            }
            _ => self.events.send(LinkEvent::Notification {
                method: method.to_string(),
                params,
            }),
        }
    }

    /// A progress notification goes to the client whose call it is about, with its own token.
    fn progress(&self, params: Option<Box<RawValue>>) {
        let Some(params) = params else { return };
        #[derive(Deserialize)]
        struct Token<'a> {
            #[serde(rename = "progressToken", borrow)]
            token: &'a RawValue,
        }
        let Ok(Token { token }) = serde_json::from_str::<Token<'_>>(params.get()) else {
            return;
        };
        let Ok(ours) = token.get().parse::<u64>() else {
            return;
        };
        let route = {
            let state = self.lock();
            state
                .progress
                .get(&ours)
                .map(|r| (r.origin.clone(), r.token.clone()))
        };
        let Some((origin, theirs)) = route else {
            return;
        };
        if let Some(params) = with_member(&params, "progressToken", &theirs) {
            origin.notify("notifications/progress", Some(params));
        }
    }

    /// A server's request: to the client whose call caused it, else to the fallback; the answer
    /// (or an error, never silence) goes back to the server.
    fn serve_request(
        self: &Arc<Self>,
        method: String,
        id: Box<RawValue>,
        params: Option<Box<RawValue>>,
        related: Option<u64>,
    ) {
        tracing::debug!(%method, ?related, server_id = id.get(), "a server request");
        let client = self.client_for(related, &method);
        let peer = Arc::downgrade(self);
        let key = id.get().to_string();
        let timeout = self.client_timeout;
        let wire = self.wire.clone();
        // Hold the lock while spawning so the task's own removal cannot come first.
        let mut state = self.lock();
        if state.pending.is_none() {
            return;
        }
        let task_key = key.clone();
        let task = tokio::spawn(async move {
            let answer = match tokio::time::timeout(timeout, client.request(&method, params)).await
            {
                Ok(answer) => answer,
                Err(_) => Err(RpcError::new(
                    -32001,
                    format!(
                        "the client did not answer `{method}` within {} ms",
                        timeout.as_millis()
                    ),
                )),
            };
            if let Some(peer) = peer.upgrade() {
                peer.lock().server_requests.remove(&task_key);
            }
            let text = response_text(&id, answer);
            let _ = wire.send(text, None).await;
        });
        state.server_requests.insert(key, task.abort_handle());
    }

    /// The client whose call caused a server's request: the call on whose stream it came; else,
    /// for the requests a call makes (sampling, elicitation: stdio says nothing of the relation),
    /// the one call in flight that has a client, or the one client whose calls are all those in
    /// flight ([`Downstream::client`]); else the fallback. `roots/list` and `ping` are
    /// about the session, not a call, so they go to the fallback.
    fn client_for(&self, related: Option<u64>, method: &str) -> Arc<dyn Downstream> {
        let state = self.lock();
        let Some(pending) = state.pending.as_ref() else {
            return self.fallback.clone();
        };
        if let Some(origin) = related
            .and_then(|id| pending.get(&id))
            .and_then(|w| w.origin.clone())
        {
            return origin;
        }
        if !matches!(method, "sampling/createMessage" | "elicitation/create") {
            return self.fallback.clone();
        }
        let mut origins = pending.values().filter_map(|w| w.origin.as_ref());
        match (origins.next(), origins.next()) {
            (Some(only), None) => only.clone(),
            // Several calls in flight: if they are all one client's, that client.
            (Some(first), Some(_)) => match first.client() {
                Some((key, whole))
                    if pending
                        .values()
                        .filter_map(|w| w.origin.as_ref())
                        .all(|o| o.client().is_some_and(|(k, _)| k == key)) =>
                {
                    whole
                }
                _ => self.fallback.clone(),
            },
            _ => self.fallback.clone(),
        }
    }
}

/// `work`, unless the deadline passes or the caller cancels first: then the request is given up
/// on (`notifications/cancelled` goes upstream) and the failure says why.
async fn within<T>(
    work: impl std::future::Future<Output = T>,
    deadline: tokio::time::Instant,
    opts: &CallOptions,
    guard: &mut Outstanding<'_>,
) -> Result<T, Failure> {
    tokio::select! {
        // The work first: its end is what is waited for (and a timer is set only if it waits).
        biased;
        out = work => Ok(out),
        () = tokio::time::sleep_until(deadline) => {
            guard.cancel("the request timed out");
            Err(Failure::DeadlinePassed)
        }
        () = opts.cancel.cancelled() => {
            let reason = opts.origin.as_ref().and_then(|o| o.cancel_reason());
            guard.cancel(reason.as_deref().unwrap_or("cancelled by the caller"));
            Err(Failure::CancelledByCaller)
        }
    }
}

/// Until disarmed, a request still waiting for its answer: dropped or cancelled, it sends
/// `notifications/cancelled` upstream.
struct Outstanding<'a> {
    peer: &'a Arc<Peer>,
    id: u64,
    armed: bool,
}

impl Outstanding<'_> {
    fn cancel(&mut self, reason: &str) {
        if !self.armed {
            return;
        }
        self.armed = false;
        // Only if it is still waiting: an answer that already came needs no cancellation.
        if self.peer.take(self.id).is_none() {
            return;
        }
        let params = serde_json::json!({ "requestId": self.id, "reason": reason });
        if let Ok(params) = serde_json::value::to_raw_value(&params) {
            self.peer.notify_with(
                "notifications/cancelled",
                Some(&params),
                vec![("Mcp-Method".into(), "notifications/cancelled".into())],
            );
        }
    }

    fn forget(&mut self) {
        if self.armed {
            self.armed = false;
            self.peer.take(self.id);
        }
    }
}

impl Drop for Outstanding<'_> {
    fn drop(&mut self) {
        self.cancel("the caller went away");
    }
}

/// Read what the wire hands in until it ends; then nothing more can come.
async fn read(peer: std::sync::Weak<Peer>, mut incoming: IncomingRx) {
    while let Some(message) = incoming.recv().await {
        let Some(peer) = peer.upgrade() else { return };
        peer.deliver(message);
    }
    if let Some(peer) = peer.upgrade() {
        peer.shut();
    }
}

/// A JSON-RPC message's envelope, borrowed from its text: what the peer, and the proxy's face,
/// read of every message. Everything else stays text.
#[derive(Debug, Default)]
pub struct Envelope<'a> {
    /// `"2.0"` in a valid message.
    pub jsonrpc: Option<std::borrow::Cow<'a, str>>,
    /// The id of a request or response; `None` for a notification (or `"id": null`).
    pub id: Option<&'a RawValue>,
    /// The method of a request or notification.
    pub method: Option<std::borrow::Cow<'a, str>>,
    /// The params, as text.
    pub params: Option<&'a RawValue>,
    /// A successful response's result, as text.
    pub result: Option<&'a RawValue>,
    /// An error response's error object, as text.
    pub error: Option<&'a RawValue>,
}

impl<'a> Envelope<'a> {
    /// Read a message's envelope in one pass. Only an object is a message (serde would read an
    /// array into the struct by position); `"id": null` counts as no id.
    ///
    /// The quick reader ([`skim::members`]) reads it when it can; what it leaves (a key or a
    /// method with an escape, a member twice, a text that is not well-formed, ...) serde_json
    /// reads, and its answer (or error) is the answer.
    pub fn read(text: &'a str) -> Result<Self, serde_json::Error> {
        match Self::skimmed(text) {
            Some(envelope) => Ok(envelope),
            None => Self::parsed(text),
        }
    }

    /// The envelope as serde_json reads it.
    fn parsed(text: &'a str) -> Result<Self, serde_json::Error> {
        if !text.trim_start().starts_with('{') {
            return Err(serde::de::Error::custom(
                "a JSON-RPC message is a JSON object",
            ));
        }
        let read: SerdeEnvelope<'a> = serde_json::from_str(text)?;
        Ok(Self {
            jsonrpc: read.jsonrpc,
            id: read.id.filter(|id| id.get() != "null"),
            method: read.method,
            params: read.params,
            result: read.result,
            error: read.error,
        })
    }

    /// The envelope as the quick reader finds it; `None` for anything it leaves to serde_json.
    fn skimmed(text: &'a str) -> Option<Self> {
        let mut envelope = Self::default();
        let (mut seen, mut plain) = (0u8, true);
        skim::members(text, |key, value| {
            let bit = match key {
                "jsonrpc" => 1,
                "method" => 2,
                "id" => 4,
                "params" => 8,
                "result" => 16,
                "error" => 32,
                _ => return,
            };
            // serde_json refuses a member twice: it says so.
            plain &= seen & bit == 0;
            seen |= bit;
            if value == "null" {
                return;
            }
            let raw = || Some(skim::borrowed(value));
            match key {
                "jsonrpc" | "method" => {
                    let slot = match key {
                        "jsonrpc" => &mut envelope.jsonrpc,
                        _ => &mut envelope.method,
                    };
                    match value.strip_prefix('"').and_then(|v| v.strip_suffix('"')) {
                        Some(inner) if !inner.contains('\\') => {
                            *slot = Some(std::borrow::Cow::Borrowed(inner));
                        }
                        // Text with an escape to undo, or not text at all: serde_json's.
                        _ => plain = false,
                    }
                }
                "id" => envelope.id = raw(),
                "params" => envelope.params = raw(),
                "result" => envelope.result = raw(),
                _ => envelope.error = raw(),
            }
        })?;
        plain.then_some(envelope)
    }
}

/// The envelope as serde_json reads it, for what the quick reader leaves.
#[derive(Deserialize)]
struct SerdeEnvelope<'a> {
    #[serde(borrow, default, deserialize_with = "borrowed_text")]
    jsonrpc: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "borrowed_text")]
    method: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow, default)]
    params: Option<&'a RawValue>,
    #[serde(borrow, default)]
    result: Option<&'a RawValue>,
    #[serde(borrow, default)]
    error: Option<&'a RawValue>,
}

/// An optional string member borrowed from the message's text unless it has escapes to undo
/// (serde's `borrow` reaches a `Cow` only when it is the field itself, not inside an `Option`:
/// `jsonrpc` and `method` would be copied out of every message).
fn borrowed_text<'de: 'a, 'a, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<std::borrow::Cow<'a, str>>, D::Error> {
    #[derive(Deserialize)]
    struct Text<'a>(#[serde(borrow)] std::borrow::Cow<'a, str>);
    Ok(Option::<Text<'a>>::deserialize(deserializer)?.map(|text| text.0))
}

/// A JSON-RPC error object as the normalized failure.
fn server_error(error: &RawValue) -> Failure {
    match RpcError::from_json(error) {
        Some(error) => Failure::ServerError {
            code: i32::try_from(error.code).unwrap_or(i32::MIN),
            message: error.message,
            data: error.data.map(|d| d.get().to_string()),
        },
        None => Failure::UnexpectedResponse,
    }
}

/// The id a `notifications/cancelled` names, as JSON text.
fn cancelled_request_id(params: &RawValue) -> Option<String> {
    #[derive(Deserialize)]
    struct Params<'a> {
        #[serde(rename = "requestId", borrow)]
        request_id: &'a RawValue,
    }
    serde_json::from_str::<Params<'_>>(params.get())
        .ok()
        .map(|p| p.request_id.get().to_string())
}

/// The word a request's params hold when they carry a progress token.
static PROGRESS_TOKEN: skim::Word = skim::Word::new("progressToken");

/// `params` with `_meta.progressToken` replaced by `ours`, and the client's token; `None` when
/// the params carry no progress token (then they go as they are).
pub(crate) fn replace_progress_token(
    params: &RawValue,
    ours: u64,
) -> Option<(Box<RawValue>, Box<RawValue>)> {
    // Cheap test first: most requests carry no token.
    if !PROGRESS_TOKEN.in_text(params.get()) {
        return None;
    }
    // Only the token changes: every other member, and the members' order, stay as they came.
    let meta = member(params, "_meta")?;
    let theirs = member(meta, "progressToken")?.to_owned();
    let ours = serde_json::value::to_raw_value(&ours).ok()?;
    let meta = with_member(meta, "progressToken", &ours)?;
    let with_ours = with_member(params, "_meta", &meta)?;
    Some((with_ours, theirs))
}

/// An object's members in their order, as text, without a map type that would reorder them
/// (the core's, shared by every part that rewrites one member).
pub(crate) mod members {
    pub(crate) use mcp_supervisor_core::members::{Members, member, with_member, write};
}

/// A JSON-RPC request with integer `id`, as JSON text (`params` copied as they are). Made in
/// one allocation, with room for the line break a stdio writer adds.
pub fn request_text(id: u64, method: &str, params: Option<&RawValue>) -> String {
    use std::fmt::Write as _;
    const ENVELOPE: &str = r#"{"jsonrpc":"2.0","id":,"method":,"params":}"#;
    let params_len = params.map_or(0, |p| p.get().len());
    // An id has at most 20 digits; a method is quoted, and escaped where it must be.
    let mut text =
        String::with_capacity(ENVELOPE.len() + 20 + method.len() * 2 + 2 + params_len + 1);
    text.push_str(r#"{"jsonrpc":"2.0","id":"#);
    let _ = write!(text, "{id}");
    text.push_str(r#","method":"#);
    push_json_string(&mut text, method);
    if let Some(params) = params {
        text.push_str(r#","params":"#);
        text.push_str(params.get());
    }
    text.push('}');
    text
}

/// `value` as a JSON string at the end of `text`: as it is when nothing in it needs an escape
/// (every method name MCP defines), else as serde writes it.
fn push_json_string(text: &mut String, value: &str) {
    if value.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        text.push('"');
        text.push_str(value);
        text.push('"');
    } else {
        text.push_str(&serde_json::to_string(value).unwrap_or_else(|_| "\"\"".into()));
    }
}

/// A JSON-RPC notification, as JSON text (`params` copied as they are).
pub fn notification_text(method: &str, params: Option<&RawValue>) -> String {
    let method = serde_json::to_string(method).unwrap_or_else(|_| "\"\"".into());
    let mut text = String::from(r#"{"jsonrpc":"2.0","method":"#);
    text.push_str(&method);
    if let Some(params) = params {
        text.push_str(r#","params":"#);
        text.push_str(params.get());
    }
    text.push('}');
    text
}

/// A JSON-RPC response to `id`: the result, or the error.
pub fn response_text(id: &RawValue, answer: Result<Box<RawValue>, RpcError>) -> String {
    let error;
    let (member, body) = match &answer {
        Ok(result) => (r#","result":"#, result.get()),
        Err(e) => {
            error = e.to_json();
            (r#","error":"#, error.as_str())
        }
    };
    // Sized once, with room for the line break a stdio writer adds.
    let mut text = String::with_capacity(24 + id.get().len() + member.len() + body.len() + 2);
    text.push_str(r#"{"jsonrpc":"2.0","id":"#);
    text.push_str(id.get());
    text.push_str(member);
    text.push_str(body);
    text.push('}');
    text
}

/// The start of a long text, for a log line.
fn clip(text: &str) -> &str {
    let mut end = text.len().min(200);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A wire that takes 50 ms to send each message and keeps what it sent.
    struct SlowWire(Mutex<Vec<String>>);

    impl Wire for SlowWire {
        fn send(
            &self,
            text: String,
            _request: Option<u64>,
        ) -> crate::link::BoxFuture<'_, Result<(), Failure>> {
            Box::pin(async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                lock_sent(&self.0).push(text);
                Ok(())
            })
        }
    }

    fn lock_sent(sent: &Mutex<Vec<String>>) -> std::sync::MutexGuard<'_, Vec<String>> {
        sent.lock().unwrap_or_else(|p| p.into_inner())
    }

    #[tokio::test(start_paused = true)]
    async fn flushed_waits_for_every_notification_queued_before_it() {
        let wire = Arc::new(SlowWire(Mutex::new(Vec::new())));
        let (queue, _events) = crate::link::EventQueue::new("s".into(), crate::link::EVENTS);
        let peer = Peer::start(
            wire.clone(),
            None,
            Arc::new(crate::link::Refuse),
            queue.for_generation(1),
            Duration::from_secs(5),
        );
        peer.flushed().await; // nothing queued: at once
        for n in 0..3 {
            let params = raw(&format!(r#"{{"requestId":{n}}}"#));
            peer.notify_with("notifications/cancelled", Some(&params), Vec::new());
        }
        let started = tokio::time::Instant::now();
        peer.flushed().await;
        assert_eq!(lock_sent(&wire.0).len(), 3, "all three went out first");
        assert!(started.elapsed() >= Duration::from_millis(150));
        peer.notify_with("notifications/cancelled", None, Vec::new());
        peer.flushed().await;
        assert_eq!(lock_sent(&wire.0).len(), 4, "and one queued later");
    }

    fn raw(text: &str) -> Box<RawValue> {
        RawValue::from_string(text.to_string()).unwrap()
    }

    #[test]
    fn a_progress_token_is_replaced_and_the_rest_kept_in_order() {
        let params =
            raw(r#"{"name":"sleep","_meta":{"progressToken":"abc","trace":"x"},"task":{"ttl":5}}"#);
        let (ours, theirs) = replace_progress_token(&params, 7).unwrap();
        let ours: serde_json::Value = serde_json::from_str(ours.get()).unwrap();
        assert_eq!(
            ours,
            serde_json::json!({"name":"sleep","_meta":{"progressToken":7,"trace":"x"},"task":{"ttl":5}})
        );
        assert_eq!(theirs.get(), r#""abc""#);
        for none in [
            r#"{"name":"x"}"#,
            r#"{"name":"progressToken"}"#,
            r#"{"_meta":[]}"#,
            "[1]",
        ] {
            assert!(replace_progress_token(&raw(none), 1).is_none(), "{none}");
        }
    }

    #[test]
    fn a_replaced_progress_token_keeps_every_other_member_as_text_in_its_place() {
        let params = raw(
            r#"{"z":1,"_meta":{"trace":"x","progressToken":"abc","b":1.50},"arguments":{"y":2,"x":1}}"#,
        );
        let (ours, _) = replace_progress_token(&params, 7).unwrap();
        assert_eq!(
            ours.get(),
            r#"{"z":1,"_meta":{"trace":"x","progressToken":7,"b":1.50},"arguments":{"y":2,"x":1}}"#
        );
    }

    #[test]
    fn with_member_keeps_order_and_text() {
        let object = raw(r#"{"progressToken":3,"progress":1.50,"message":"a\"b"}"#);
        let out = with_member(&object, "progressToken", &raw(r#""t""#)).unwrap();
        assert_eq!(
            out.get(),
            r#"{"progressToken":"t","progress":1.50,"message":"a\"b"}"#
        );
        let added = with_member(&raw("{}"), "k", &raw("1")).unwrap();
        assert_eq!(added.get(), r#"{"k":1}"#);
        assert!(with_member(&raw("[1]"), "k", &raw("1")).is_none());
    }

    /// The quick reader reads an envelope as serde_json does, and leaves to it what it must:
    /// escapes to undo in the method or the version, a member twice, a method that is not text.
    #[test]
    fn the_quick_reader_and_serde_json_read_an_envelope_alike() {
        let quick = [
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"e","arguments":{"m":"x\"y"}}}"#,
            r#" {"result":{"content":[{"type":"text","text":"a\nb"}]},"jsonrpc":"2.0","id":"k"} "#,
            r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"m"}}"#,
            r#"{"jsonrpc":"2.0","method":null,"id":1,"result":null,"params":null,"other":[1,{"a":2}]}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":0.5e1}}"#,
            r#"{}"#,
        ];
        for text in quick {
            let skimmed = Envelope::skimmed(text).expect(text);
            let parsed = Envelope::parsed(text).expect(text);
            assert_eq!(format!("{skimmed:?}"), format!("{parsed:?}"), "{text}");
        }
        let to_serde = [
            (r#"{"jsonrpc":"2.0","id":1,"method":"tools\/call"}"#, true),
            (r#"{"jsonrpc":"2\u002e0","id":1,"method":"m"}"#, true),
            (r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"m"}"#, false),
            (r#"{"jsonrpc":"2.0","id":1,"method":7}"#, false),
            (r#"{"jsonrpc":"2.0","id":1,"method":"m"} x"#, false),
            (r#"{"jsonrpc":"2.0","i\u0064":1,"method":"m"}"#, true),
            ("[1]", false),
        ];
        for (text, well_formed) in to_serde {
            assert!(Envelope::skimmed(text).is_none(), "{text}");
            assert_eq!(Envelope::read(text).is_ok(), well_formed, "{text}");
        }
    }

    #[test]
    fn envelopes_are_read_without_the_model() {
        let p =
            Envelope::read(r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"m"}}"#)
                .unwrap();
        assert!(p.id.is_none() && p.error.is_some());
        let p = Envelope::read(r#"{"jsonrpc":"2.0","id":"s-1","method":"roots/list"}"#).unwrap();
        assert_eq!(p.method.as_deref(), Some("roots/list"));
        assert_eq!(p.id.unwrap().get(), r#""s-1""#);
        assert!(Envelope::read("[1]").is_err());
        // The method and version are borrowed from the text; escapes are undone in a copy.
        let p = Envelope::read(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call"}"#).unwrap();
        assert!(matches!(
            p.method,
            Some(std::borrow::Cow::Borrowed("tools/call"))
        ));
        assert!(matches!(p.jsonrpc, Some(std::borrow::Cow::Borrowed("2.0"))));
        let p = Envelope::read(r#"{"jsonrpc":"2.0","id":1,"method":"tools\/call"}"#).unwrap();
        assert_eq!(p.method.as_deref(), Some("tools/call"));
        let p = Envelope::read(r#"{"jsonrpc":"2.0","method":null,"id":1,"result":{}}"#).unwrap();
        assert!(p.method.is_none() && p.result.is_some());
        assert!(Envelope::read(r#"{"jsonrpc":"2.0","id":1,"method":7}"#).is_err());
        assert_eq!(
            server_error(&raw(r#"{"code":-32601,"message":"nope","data":{"x":1}}"#)),
            Failure::ServerError {
                code: -32601,
                message: "nope".into(),
                data: Some(r#"{"x":1}"#.into()),
            }
        );
        assert_eq!(
            server_error(&raw(r#"{"message":"x"}"#)),
            Failure::UnexpectedResponse
        );
    }

    #[test]
    fn texts_are_well_formed() {
        let request = request_text(3, "tools/call", Some(&raw(r#"{"name":"a"}"#)));
        assert_eq!(
            request,
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"a"}}"#
        );
        assert_eq!(
            request_text(4, "ping", None),
            r#"{"jsonrpc":"2.0","id":4,"method":"ping"}"#
        );
        // Sized once, with room for a line break, whatever the id and the params.
        for (id, method) in [
            (u64::MAX, "x/y"),
            (0, "a\"b\\c\nd"),
            (12345678, "tools/call"),
        ] {
            let params = raw(r#"{"name":"n","arguments":{"message":"xxxxxxxx"}}"#);
            let text = request_text(id, method, Some(&params));
            assert!(text.capacity() > text.len(), "{text}");
            let value: serde_json::Value = serde_json::from_str(&text).unwrap();
            assert_eq!(value["id"], id);
            assert_eq!(value["method"], method);
            assert_eq!(value["params"]["name"], "n");
        }
        let error = response_text(&raw(r#""s-1""#), Err(RpcError::new(-32601, "no")));
        let value: serde_json::Value = serde_json::from_str(&error).unwrap();
        assert_eq!(value["error"]["code"], -32601);
        assert_eq!(value["id"], "s-1");
    }
}
