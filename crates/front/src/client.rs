//! One downstream client ([`Client`]: a stdio connection or an HTTP session) and a client as
//! one of its requests sees it ([`Scope`]): its bounded outbox, the servers' requests waiting
//! for its answers, its requests in flight, what it declared it can do, and where what relates
//! to a request goes.
//!
//! It never routes a request and never talks to the hub: it is the client's side only. What a
//! client asked of shared servers is in `shared`.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use mcp_supervisor::core::members;
use mcp_supervisor::link::{BoxFuture, Downstream, RpcError};
use mcp_supervisor::upstream::{notification_text, request_text};
use serde_json::json;
use serde_json::value::RawValue;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::declared::{Capabilities, undeclared};
use crate::json::{lock, member_str, read_error};

/// How many messages that belong to no request (notifications, the servers' requests no call
/// caused) wait for one client at most; past it, see [`Client::send`].
pub const OUTBOX: usize = 1024;

/// What a handshake-era client's `initialize` fixed for the life of its session: the protocol
/// version agreed, and the client's capabilities and info as it sent them (JSON text, whole).
/// Serializable, so that a transport can carry it (sealed) in the session id it gives out and
/// any process serving the same hub can [resume](crate::Proxy::resume) the session. What changes later
/// (its log level, its subscriptions) is not part of it.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Session {
    #[serde(rename = "v")]
    pub protocol_version: String,
    #[serde(rename = "c", default, skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<Box<RawValue>>,
    #[serde(rename = "i", default, skip_serializing_if = "Option::is_none")]
    pub client_info: Option<Box<RawValue>>,
    /// The upstream session ids of its own instances of isolated `url` servers (SPEC §11),
    /// opened at its `initialize`, by server: a process that resumes the session goes on
    /// with them.
    #[serde(rename = "u", default, skip_serializing_if = "BTreeMap::is_empty")]
    pub upstream: BTreeMap<String, String>,
    /// The identity that opened it ([`crate::caller::Caller::key`]), when a transport vouched
    /// for one (SPEC §14): a request on it with another identity is refused.
    #[serde(rename = "o", default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
}

/// A message that found its client's queue full (the client does not read): a notification is
/// left out, counted and logged; a server's request left out is its caller's to report (an
/// error back to the server).
pub(crate) fn left_out(text: &str, metrics: &crate::metrics::Metrics) -> Undelivered {
    if !text.starts_with(r#"{"jsonrpc":"2.0","id":"#) {
        let dropped = metrics
            .notifications_dropped
            .fetch_add(1, Ordering::Relaxed);
        if dropped == 0 || dropped.is_power_of_two() {
            tracing::warn!(
                dropped = dropped + 1,
                "a client does not read: its queue of {OUTBOX} messages is full, and notifications are dropped"
            );
        }
    }
    Undelivered::Full
}

/// Why a message for a client was not queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Undelivered {
    /// The client has gone away.
    Gone,
    /// Its queue is full: it does not read ([`OUTBOX`]).
    Full,
}

/// The servers' requests sent to one client, by our id, each waiting for its answer.
pub(crate) type Waiters = HashMap<u64, oneshot::Sender<Result<Box<RawValue>, RpcError>>>;

/// Which protocol era a client speaks, and what that era fixed for it: one value, so that a
/// combination no client can be in (handshaken and stateless, initialized without a
/// handshake) cannot be written.
#[derive(Clone, Debug, Default)]
pub(crate) enum Era {
    /// No message of its has told yet (a new connection).
    #[default]
    Unknown,
    /// It sent `initialize` (or a session of its was resumed).
    Handshake {
        /// What its `initialize` declared it can do (`None`: it declared nothing readable).
        declared: Option<Capabilities>,
        /// What the answered `initialize` fixed, once answered.
        session: Option<Session>,
        /// It sent `notifications/initialized`: notifications may reach it.
        initialized: bool,
    },
    /// Protocol 2026-07-28: no `initialize`; its identity in each request's `_meta`.
    Stateless,
}

/// One downstream client: a stdio connection or an HTTP session.
pub struct Client {
    /// Messages for no request, bounded ([`OUTBOX`]).
    pub(crate) out: mpsc::Sender<String>,
    /// The `*/list_changed` notifications left out while its queue was full (bits of
    /// [`RESYNC`]), owed to it once it reads again ([`owe`]).
    pub(crate) owed: Arc<AtomicU8>,
    pub(crate) metrics: Arc<crate::metrics::Metrics>,
    pub(crate) next: AtomicU64,
    /// The servers' requests sent to this client, by our id, waiting for its answer.
    /// `None` once the client has gone away.
    pub(crate) waiting: Mutex<Option<Waiters>>,
    /// The client's requests in flight, by their id as JSON text.
    pub(crate) calls: Mutex<HashMap<String, InCall>>,
    /// Its protocol era and what the era fixed.
    pub(crate) era: Mutex<Era>,
    /// Its subscriptions and log level, as it asked them of shared servers.
    pub(crate) asked: Mutex<crate::asked::Asked>,
    /// Who it is, as its transport vouched (SPEC §14); `None`: no one vouched (no auth).
    pub(crate) caller: Mutex<Option<Arc<crate::caller::Caller>>>,
}

impl Client {
    /// Who the client is, as its transport last vouched.
    pub fn caller(&self) -> Option<Arc<crate::caller::Caller>> {
        lock(&self.caller).clone()
    }

    /// The identity its transport vouched for with its latest request (the same identity on a
    /// session: the transport refuses another; its claims may be newer).
    pub fn set_caller(&self, caller: Option<Arc<crate::caller::Caller>>) {
        *lock(&self.caller) = caller;
    }

    /// What this client's `initialize` fixed, once it was answered: what a transport seals so
    /// that another process can [resume](crate::Proxy::resume) the session. `None` before, and for a
    /// client of protocol 2026-07-28 (it has no session).
    pub fn session(&self) -> Option<Session> {
        match &*lock(&self.era) {
            Era::Handshake { session, .. } => session.clone(),
            Era::Unknown | Era::Stateless => None,
        }
    }

    /// It sent `initialize`, declaring `declared`: of the handshake era from now on.
    pub(crate) fn handshake(&self, declared: Option<Capabilities>) {
        *lock(&self.era) = Era::Handshake {
            declared,
            session: None,
            initialized: false,
        };
    }

    /// It sent `notifications/initialized`: notifications reach it from now on. (A client
    /// that says so without an `initialize` is of the handshake era all the same.)
    pub(crate) fn set_initialized(&self) {
        let mut era = lock(&self.era);
        match &mut *era {
            Era::Handshake { initialized, .. } => *initialized = true,
            Era::Unknown => {
                *era = Era::Handshake {
                    declared: None,
                    session: None,
                    initialized: true,
                }
            }
            Era::Stateless => {}
        }
    }

    /// Whether notifications reach it: it finished its handshake (SPEC: nothing but pings and
    /// logs before `initialized`).
    pub(crate) fn is_initialized(&self) -> bool {
        matches!(
            *lock(&self.era),
            Era::Handshake {
                initialized: true,
                ..
            }
        )
    }

    /// Whether it speaks protocol 2026-07-28.
    pub(crate) fn is_stateless(&self) -> bool {
        matches!(*lock(&self.era), Era::Stateless)
    }

    /// What it declared it can do; `None` for a client that declared nothing we could read, or
    /// none (a 2026-07-28 client declares per request).
    pub(crate) fn declared(&self) -> Option<Capabilities> {
        match &*lock(&self.era) {
            Era::Handshake { declared, .. } => *declared,
            Era::Unknown | Era::Stateless => None,
        }
    }

    /// Keep what an answered `initialize` fixed: the version agreed (the answer's), and the
    /// client's capabilities and info as it sent them.
    pub(crate) fn fix_session(
        &self,
        params: Option<&RawValue>,
        answer: &RawValue,
        upstream: BTreeMap<String, String>,
    ) {
        let Some(protocol_version) = member_str(answer, "protocolVersion") else {
            return;
        };
        let part = |name: &str| {
            params
                .and_then(|p| members::member(p, name))
                .map(ToOwned::to_owned)
        };
        let owner = self.caller().map(|c| c.key().to_string());
        if let Era::Handshake { session, .. } = &mut *lock(&self.era) {
            *session = Some(Session {
                protocol_version,
                capabilities: part("capabilities"),
                client_info: part("clientInfo"),
                upstream,
                owner,
            });
        }
    }

    /// Mark the client as one of protocol 2026-07-28 before its first message (a transport that
    /// knows it already, such as an HTTP POST with no session).
    pub fn set_stateless(&self) {
        *lock(&self.era) = Era::Stateless;
    }

    /// How many of its requests are under way.
    pub fn in_flight(&self) -> usize {
        lock(&self.calls).len()
    }

    /// Whether a server's request with this id (ours, sent to this client) still waits for the
    /// client's answer. An answer to one that does not (another replica sent it, or it was
    /// answered or gave up) reaches nobody.
    pub fn waits_for(&self, id: &RawValue) -> bool {
        let Ok(id) = id.get().parse::<u64>() else {
            return false;
        };
        lock(&self.waiting)
            .as_ref()
            .is_some_and(|w| w.contains_key(&id))
    }

    /// Send a message that belongs to no request. Its queue is bounded ([`OUTBOX`]): while it
    /// is full (the client does not read), the message is not queued, and a notification so
    /// left out is counted and logged.
    ///
    /// A `*/list_changed` so left out is owed: once the client reads again (its queue has room),
    /// it gets that notification, once, so that its lists do not go stale without a word.
    pub fn send(&self, text: String) -> Result<(), Undelivered> {
        match self.out.try_send(text) {
            Ok(()) => Ok(()),
            Err(mpsc::error::TrySendError::Full(text)) => {
                if let Some(bit) = RESYNC.iter().position(|m| names_method(&text, m)) {
                    owe(&self.owed, bit, &self.out);
                }
                Err(left_out(&text, &self.metrics))
            }
            Err(mpsc::error::TrySendError::Closed(_)) => Err(Undelivered::Gone),
        }
    }

    /// The client answered one of the servers' requests.
    pub(crate) fn answered(
        &self,
        id: &RawValue,
        result: Option<&RawValue>,
        error: Option<&RawValue>,
    ) {
        let Ok(id) = id.get().parse::<u64>() else {
            return;
        };
        let waiter = lock(&self.waiting).as_mut().and_then(|w| w.remove(&id));
        let Some(waiter) = waiter else { return };
        let answer = match (result, error) {
            (Some(result), _) => Ok(result.to_owned()),
            (None, Some(error)) => Err(read_error(error)),
            (None, None) => Err(RpcError::new(-32603, "the client's answer had no result")),
        };
        let _ = waiter.send(answer);
    }

    /// It went away (or was let go): nothing more reaches it.
    pub(crate) fn is_gone(&self) -> bool {
        lock(&self.waiting).is_none()
    }

    pub(crate) fn close(&self) {
        lock(&self.waiting).take();
        for (_, call) in lock(&self.calls).drain() {
            call.cancel.cancel();
        }
    }
}

/// Owe `RESYNC[bit]` to the client whose queue is `out`. The first debt starts a task that
/// waits for room in the queue (while the client does not read; it ends with the client) and
/// then sends each list change owed by then, once; a debt after that starts the next task.
pub(crate) fn owe(owed: &Arc<AtomicU8>, bit: usize, out: &mpsc::Sender<String>) {
    if owed.fetch_or(1 << bit, Ordering::SeqCst) != 0 {
        return; // its task is waiting
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        owed.store(0, Ordering::SeqCst);
        return;
    };
    let (owed, out) = (owed.clone(), out.clone());
    runtime.spawn(async move {
        let Ok(room) = out.reserve_many(RESYNC.len()).await else {
            return;
        };
        let methods = owed.swap(0, Ordering::SeqCst);
        for ((bit, method), place) in RESYNC.iter().enumerate().zip(room) {
            if methods & (1 << bit) != 0 {
                place.send(notification_text(method, None));
            }
        }
    });
}

/// Whether `text` is a notification of `method` (as [`notification_text`] writes one).
pub(crate) fn names_method(text: &str, method: &str) -> bool {
    text.strip_prefix(r#"{"jsonrpc":"2.0","method":""#)
        .and_then(|rest| rest.strip_prefix(method))
        .is_some_and(|rest| rest.starts_with('"'))
}

/// What a client that missed server events is sent so that it lists again.
pub(crate) const RESYNC: [&str; 3] = [
    "notifications/tools/list_changed",
    "notifications/prompts/list_changed",
    "notifications/resources/list_changed",
];

/// A client as one of its requests sees it: what relates to the request goes to the request's
/// own stream when it has one.
pub struct Scope {
    pub(crate) client: Arc<Client>,
    pub(crate) related: Option<mpsc::Sender<String>>,
    /// Set when the client cancelled this request (`notifications/cancelled`).
    pub(crate) by_client: Mutex<Option<ByClient>>,
}

/// A client's cancellation of one of its requests.
pub(crate) struct ByClient {
    /// Its own words for why, passed to the server (SPEC §10: passed whole).
    pub(crate) reason: Option<String>,
}

impl Scope {
    /// The client as a whole: what belongs to none of its requests.
    pub(crate) fn of(client: &Arc<Client>) -> Self {
        Self {
            client: client.clone(),
            related: None,
            by_client: Mutex::new(None),
        }
    }

    /// This scope's client as a whole, as the hub's downstream.
    pub(crate) fn whole(&self) -> Arc<dyn Downstream> {
        Arc::new(Self::of(&self.client))
    }

    /// What relates to the request goes to its own stream while that is open (bounded as a
    /// client's queue is); once it closed, to the client as a whole.
    pub(crate) fn deliver(&self, text: String) -> Result<(), Undelivered> {
        let text = match &self.related {
            Some(related) => match related.try_send(text) {
                Ok(()) => return Ok(()),
                Err(mpsc::error::TrySendError::Full(text)) => {
                    return Err(left_out(&text, &self.client.metrics));
                }
                Err(mpsc::error::TrySendError::Closed(text)) => text,
            },
            None => text,
        };
        self.client.send(text)
    }
}

impl Downstream for Scope {
    fn request(
        &self,
        method: &str,
        params: Option<Box<RawValue>>,
    ) -> BoxFuture<'static, Result<Box<RawValue>, RpcError>> {
        let client = &self.client;
        let declared = client.declared();
        if let Some(declared) = declared
            && !declared.allow(method)
        {
            let error = undeclared(method);
            return Box::pin(async move { Err(error) });
        }
        let id = client.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        let open = match lock(&client.waiting).as_mut() {
            Some(waiting) => {
                waiting.insert(id, tx);
                true
            }
            None => false,
        };
        let text = request_text(id, method, params.as_deref());
        let sent = if open {
            self.deliver(text)
        } else {
            Err(Undelivered::Gone)
        };
        if sent.is_err() {
            lock(&client.waiting).as_mut().map(|w| w.remove(&id));
        }
        let unsent = match sent {
            Ok(()) => None,
            Err(Undelivered::Gone) => Some(RpcError::new(-32603, "the client has gone away")),
            Err(Undelivered::Full) => Some(RpcError::new(
                -32603,
                format!(
                    "the client is not reading: {OUTBOX} messages wait for it, so {method} was not sent"
                ),
            )),
        };
        let client = client.clone();
        Box::pin(async move {
            if let Some(error) = unsent {
                return Err(error);
            }
            let mut guard = Waiting { client, id };
            let answer = rx.await;
            guard.id = 0;
            answer.unwrap_or_else(|_| Err(RpcError::new(-32603, "the client has gone away")))
        })
    }

    fn notify(&self, method: &str, params: Option<Box<RawValue>>) {
        let _ = self.deliver(notification_text(method, params.as_deref()));
    }

    fn client(&self) -> Option<(usize, Arc<dyn Downstream>)> {
        Some((session_key(&self.client), self.whole()))
    }

    /// A client of the handshake era is a session (a stdio connection, an HTTP session); one of
    /// the 2026-07-28 era has none, and is served by the shared instance.
    fn session(&self) -> Option<(usize, Arc<dyn Downstream>)> {
        if self.client.is_stateless() {
            return None;
        }
        self.client()
    }

    fn cancel_reason(&self) -> Option<String> {
        lock(&self.by_client).as_ref()?.reason.clone()
    }

    fn identity(&self) -> Option<String> {
        self.client.caller().map(|c| c.key().to_string())
    }
}

/// The key of a client's session in the hub: the same for all its requests while it lives.
pub(crate) fn session_key(client: &Arc<Client>) -> usize {
    Arc::as_ptr(client) as usize
}

/// A client's request in flight, as its client's list holds it.
pub(crate) struct InCall {
    pub(crate) cancel: CancellationToken,
    /// Where the request's own things go, and whether its client cancelled it.
    pub(crate) scope: Arc<Scope>,
}

/// A server's request waiting for a client's answer: given up on (dropped), it is forgotten
/// and the client is told.
pub(crate) struct Waiting {
    client: Arc<Client>,
    id: u64,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if self.id == 0 {
            return;
        }
        if lock(&self.client.waiting)
            .as_mut()
            .and_then(|w| w.remove(&self.id))
            .is_some()
        {
            let params = json!({ "requestId": self.id, "reason": "the server gave up on it" });
            let _ = self.client.send(notification_text(
                "notifications/cancelled",
                serde_json::value::to_raw_value(&params).ok().as_deref(),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::Proxy;

    /// A client that does not read: past OUTBOX messages for no request, notifications are
    /// left out and counted, a server's request fails at once with an error that says why, and
    /// once the client reads, both go through again.
    fn note() -> String {
        notification_text("notifications/message", None)
    }

    /// A proxy and a client of it whose queue is full of [`note`]s: the client has not read.
    fn client_with_a_full_queue() -> (Arc<Proxy>, Arc<Client>, mpsc::Receiver<String>) {
        let proxy = Proxy::of_nothing();
        let (out, seen) = mpsc::channel(OUTBOX);
        let client = proxy.connect(out);
        for _ in 0..OUTBOX {
            assert_eq!(client.send(note()), Ok(()));
        }
        (proxy, client, seen)
    }

    #[tokio::test]
    async fn a_client_that_does_not_read_has_a_bounded_outbox() {
        let (proxy, client, mut seen) = client_with_a_full_queue();
        for _ in 0..3 {
            assert_eq!(client.send(note()), Err(Undelivered::Full));
        }
        assert_eq!(
            proxy
                .metrics()
                .notifications_dropped
                .load(Ordering::Relaxed),
            3
        );
        let scope: Arc<dyn Downstream> = Scope::of(&client).whole();
        let refused = scope.request("roots/list", None).await.unwrap_err();
        assert!(
            refused.message.contains("not reading"),
            "{}",
            refused.message
        );
        assert!(lock(&client.waiting).as_ref().is_some_and(|w| w.is_empty()));
        // It reads one: there is room again.
        assert!(seen.recv().await.is_some());
        assert_eq!(client.send(note()), Ok(()));
        assert_eq!(
            proxy
                .metrics()
                .notifications_dropped
                .load(Ordering::Relaxed),
            3
        );
        drop(seen);
        assert_eq!(client.send(note()), Err(Undelivered::Gone));
    }

    /// A `*/list_changed` left out while the client did not read is owed: once it reads, it
    /// gets that notification once, after what was queued; a progress notification left out
    /// is only counted.
    #[tokio::test]
    async fn a_list_change_left_out_is_sent_once_the_client_reads_again() {
        let (_proxy, client, mut seen) = client_with_a_full_queue();
        let changed = |m: &str| notification_text(&format!("notifications/{m}/list_changed"), None);
        for m in ["tools", "prompts", "tools"] {
            assert_eq!(client.send(changed(m)), Err(Undelivered::Full));
        }
        assert_eq!(
            client.send(notification_text("notifications/progress", None)),
            Err(Undelivered::Full)
        );
        // The client reads: what was queued, then each list change it missed, once.
        let mut after = Vec::new();
        for n in 0..OUTBOX + 2 {
            let text = tokio::time::timeout(std::time::Duration::from_secs(5), seen.recv())
                .await
                .unwrap_or_else(|_| panic!("message {n} came in time"))
                .expect("the client is connected");
            if n >= OUTBOX {
                after.push(text);
            }
        }
        assert_eq!(after, [changed("tools"), changed("prompts")]);
        assert!(seen.try_recv().is_err(), "nothing else is owed");
        // Owed again later, it is sent again.
        for _ in 0..OUTBOX {
            assert_eq!(client.send(note()), Ok(()));
        }
        assert_eq!(client.send(changed("resources")), Err(Undelivered::Full));
        for _ in 0..OUTBOX {
            seen.recv().await.expect("queued");
        }
        let owed = tokio::time::timeout(std::time::Duration::from_secs(5), seen.recv()).await;
        assert_eq!(owed.ok().flatten(), Some(changed("resources")));
    }
}
