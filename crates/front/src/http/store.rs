//! The HTTP session store: every session held here, by id, as a bounded cache of sealed ids. A
//! new session's id seals what its `initialize` fixed, so that an id not held (let go here, or
//! opened on another replica) resumes its session; the longest idle are let go past
//! [`MAX_HELD`], idle ones end after the idle limit, and ids their clients ended are remembered
//! (the last [`ENDED_KEPT`]) so that they do not come back.
//!
//! It never reads a message and never holds a lock across an await; what a session does on the
//! wire is the routes'.

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::BuildHasher;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mcp_supervisor::hub::SessionEnd;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::options::Sealing;
use super::session::{HttpSession, short};
use crate::json::lock;
use crate::seal;
use crate::{Client, OUTBOX, Proxy};

/// How many ended sessions' ids are remembered, so that they answer 404 here.
const ENDED_KEPT: usize = 65_536;

/// The most sessions held at once; past it the longest idle are let go (their ids resume them).
const MAX_HELD: usize = 4096;

/// Every open session, by id.
pub(crate) struct Sessions {
    proxy: Arc<Proxy>,
    sealing: Arc<Sealing>,
    map: Mutex<HashMap<String, Arc<HttpSession>>>,
    /// Sessions a client ended here (DELETE), so that their ids are not resumed: the last
    /// [`ENDED_KEPT`] of them, by a keyed hash of the id.
    ended: Mutex<Ended>,
    /// Ends every session (each one's `ended` is a child of it).
    shutdown: CancellationToken,
}

impl Sessions {
    pub(crate) fn new(
        proxy: Arc<Proxy>,
        sealing: Arc<Sealing>,
        shutdown: CancellationToken,
    ) -> Arc<Self> {
        Arc::new(Self {
            proxy,
            sealing,
            map: Mutex::new(HashMap::new()),
            ended: Mutex::new(Ended::default()),
            shutdown,
        })
    }

    /// The session of `id`: held here, or resumed from the id's seal (opened elsewhere, or
    /// let go here). `None` for an id that is not ours or is past its maximum age (each
    /// counted). An id whose session was ended (DELETE) is resumed if it comes again: ending
    /// it on every replica would need a store they share, and the client chose to end it.
    pub(crate) fn get_or_resume(&self, id: &str) -> Option<Arc<HttpSession>> {
        let now = seal::now_ms();
        if lock(&self.ended).contains(id) {
            return None;
        }
        let held = lock(&self.map).get(id).cloned();
        let metrics = self.proxy.metrics();
        if let Some(session) = held {
            let age = now.saturating_sub(session.issued_ms);
            if u128::from(age) <= self.sealing.max_age.as_millis() {
                return Some(session);
            }
            tracing::info!(session = %short(&session.id), "ending a session past its maximum age");
            self.close(id, SessionEnd::Ended);
            metrics.sessions_expired.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        match self.sealing.keys.open(id, now, self.sealing.max_age) {
            Ok((sealed, issued_ms)) => {
                let (out, messages) = mpsc::channel(OUTBOX);
                let client = self.proxy.resume(out, sealed);
                let session = self.open(id.to_string(), issued_ms, client, messages);
                metrics.sessions_resumed.fetch_add(1, Ordering::Relaxed);
                tracing::info!(session = %short(id), "resumed a session from its sealed id");
                Some(session)
            }
            Err(seal::Refused::Expired) => {
                metrics.sessions_expired.fetch_add(1, Ordering::Relaxed);
                None
            }
            Err(seal::Refused::Forged) => {
                metrics.sessions_forged.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    /// A new session for `client` (its `initialize` was just answered). Its id seals what that
    /// `initialize` fixed, so any replica with the key resumes it; failing that (a client with
    /// nothing fixed, or the crypto library failing), a random UUID only this process knows.
    pub(crate) fn open_new(
        &self,
        client: Arc<Client>,
        messages: mpsc::Receiver<String>,
    ) -> Arc<HttpSession> {
        let now = seal::now_ms();
        let sealed = client
            .session()
            .and_then(|fixed| self.sealing.keys.seal(&fixed, now));
        let id = sealed.unwrap_or_else(|| {
            tracing::warn!(
                "could not seal a session id; this session cannot move to another replica"
            );
            uuid::Uuid::new_v4().to_string()
        });
        self.open(id, now, client, messages)
    }

    /// The session `id` for `client`, whose messages for no request arrive on `messages`; if a
    /// request resumed the same id at the same moment, that one (and `client` is let go).
    fn open(
        &self,
        id: String,
        issued_ms: u64,
        client: Arc<Client>,
        mut messages: mpsc::Receiver<String>,
    ) -> Arc<HttpSession> {
        let ended = self.shutdown.child_token();
        let session = Arc::new(HttpSession::new(id, issued_ms, client, ended));
        self.make_room();
        {
            let mut map = lock(&self.map);
            if let Some(existing) = map.get(&session.id).cloned() {
                drop(map);
                // Resumed twice at once: the other one holds its upstream sessions.
                self.proxy.let_go(&session.client);
                return existing;
            }
            map.insert(session.id.clone(), session.clone());
        }
        let pump = session.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    message = messages.recv() => match message {
                        Some(message) => pump.push(message),
                        None => return,
                    },
                    () = pump.ended.cancelled() => return,
                }
            }
        });
        session
    }

    /// A client ends session `id` (DELETE), held here or not: it is ended, and its id opens
    /// nothing here any more. False when the id opens no session.
    pub(crate) fn end(&self, id: &str) -> bool {
        if self.get_or_resume(id).is_none() {
            return false;
        }
        lock(&self.ended).insert(id);
        self.close(id, SessionEnd::Ended)
    }

    /// End session `id` here: its calls are cancelled, the servers' requests waiting for it
    /// get an error, its streams end. Ended by its client, its upstream sessions end too; let
    /// go of (evicted, idle, stopping), they stay for its sealed id to resume. False when there
    /// is no such session.
    fn close(&self, id: &str, how: SessionEnd) -> bool {
        let Some(session) = lock(&self.map).remove(id) else {
            return false;
        };
        tracing::debug!(session = %short(&session.id), ?how, "session closed here; its calls are cancelled");
        session.ended.cancel();
        self.proxy.forget(&session.client, how);
        true
    }

    /// With [`MAX_HELD`] sessions held, let go of the eighth of them idle the longest (no call
    /// under way, no open stream): a sealed id resumes its session when it comes again, so the
    /// map is a bounded cache and memory stays flat however many clients come.
    fn make_room(&self) {
        let now = Instant::now();
        let oldest: Vec<String> = {
            let map = lock(&self.map);
            if map.len() < MAX_HELD {
                return;
            }
            let mut idle: Vec<(Duration, &String)> = map
                .iter()
                .filter_map(|(id, s)| s.idle_since(now).map(|d| (d, id)))
                .collect();
            idle.sort_unstable_by_key(|(d, _)| std::cmp::Reverse(*d));
            idle.into_iter()
                .take(MAX_HELD / 8)
                .map(|(_, id)| id.clone())
                .collect()
        };
        tracing::debug!(
            "letting go of {} idle sessions to keep at most {MAX_HELD}",
            oldest.len()
        );
        for id in oldest {
            self.close(&id, SessionEnd::LetGo);
        }
    }

    /// End every session idle for `idle`. Returns how many were ended.
    fn expire_idle(&self, idle: Duration) -> usize {
        let now = Instant::now();
        let idle_ones: Vec<String> = lock(&self.map)
            .values()
            .filter(|s| s.idle_since(now).is_some_and(|d| d >= idle))
            .map(|s| s.id.clone())
            .collect();
        let mut ended = 0;
        for id in idle_ones {
            tracing::info!(session = %short(&id), "ending a session idle for {} s", idle.as_secs());
            ended += usize::from(self.close(&id, SessionEnd::LetGo));
        }
        ended
    }

    /// Run [`Sessions::expire_idle`] every tenth of `idle`; at shutdown end every session.
    pub(crate) fn spawn_expiry(self: &Arc<Self>, idle: Duration) {
        let sessions = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(idle / 10);
            loop {
                tokio::select! {
                    _ = tick.tick() => { sessions.expire_idle(idle); }
                    () = sessions.shutdown.cancelled() => break,
                }
            }
            let ids: Vec<String> = lock(&sessions.map).keys().cloned().collect();
            for id in ids {
                sessions.close(&id, SessionEnd::LetGo);
            }
        });
    }
}

/// Ids of sessions ended by their client, as keyed hashes (8 bytes each, whatever the id's
/// length), the oldest forgotten past [`ENDED_KEPT`].
struct Ended {
    hasher: std::collections::hash_map::RandomState,
    set: HashSet<u64>,
    order: VecDeque<u64>,
}

impl Default for Ended {
    fn default() -> Self {
        Self {
            hasher: std::collections::hash_map::RandomState::new(),
            set: HashSet::new(),
            order: VecDeque::new(),
        }
    }
}

impl Ended {
    fn key(&self, id: &str) -> u64 {
        self.hasher.hash_one(id)
    }

    fn contains(&self, id: &str) -> bool {
        self.set.contains(&self.key(id))
    }

    fn insert(&mut self, id: &str) {
        let key = self.key(id);
        if self.set.insert(key) {
            self.order.push_back(key);
        }
        while self.order.len() > ENDED_KEPT {
            if let Some(old) = self.order.pop_front() {
                self.set.remove(&old);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Mode;
    use mcp_supervisor::Hub;
    use mcp_supervisor::core::config::Config;
    use serde_json::value::RawValue;
    use std::sync::atomic::AtomicU64;

    fn sessions_aged(max_age: Duration) -> (Arc<Sessions>, CancellationToken) {
        let hub = Arc::new(Hub::start(Config::default()));
        let proxy = Proxy::new(hub, Mode::Aggregate);
        let shutdown = CancellationToken::new();
        let sealing = Arc::new(Sealing {
            keys: seal::Keys::random().unwrap(),
            max_age,
        });
        (Sessions::new(proxy, sealing, shutdown.clone()), shutdown)
    }

    fn sessions() -> (Arc<Sessions>, CancellationToken) {
        sessions_aged(Duration::from_secs(86_400))
    }

    fn open(sessions: &Sessions) -> (Arc<HttpSession>, mpsc::Sender<String>) {
        let (out, messages) = mpsc::channel(OUTBOX);
        let client = sessions.proxy.connect(out.clone());
        let id = uuid::Uuid::new_v4().to_string();
        (sessions.open(id, seal::now_ms(), client, messages), out)
    }

    fn fixed() -> crate::Session {
        crate::Session {
            protocol_version: "2025-06-18".into(),
            capabilities: RawValue::from_string(r#"{"roots":{}}"#.into()).ok(),
            client_info: None,
            upstream: Default::default(),
            owner: None,
        }
    }

    fn count(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    #[tokio::test]
    async fn a_sealed_id_not_held_here_resumes_its_session_and_others_are_refused() {
        let (sessions, _shutdown) = sessions();
        let metrics = sessions.proxy.metrics().clone();
        let id = sessions
            .sealing
            .keys
            .seal(&fixed(), seal::now_ms())
            .unwrap();
        let resumed = sessions.get_or_resume(&id).expect("resumed from its seal");
        assert_eq!(resumed.id, id);
        let session = resumed.client.session().expect("its fixed part");
        assert_eq!(session.protocol_version, "2025-06-18");
        assert_eq!(count(&metrics.sessions_resumed), 1);
        // Held now: the same session again, not a second resumption.
        let again = sessions.get_or_resume(&id).unwrap();
        assert!(Arc::ptr_eq(&again, &resumed));
        assert_eq!(count(&metrics.sessions_resumed), 1);
        // Another process's key, a made-up id, a plain UUID: 404, counted as forged.
        let foreign = seal::Keys::random().unwrap().seal(&fixed(), 0).unwrap();
        for bad in [
            foreign.as_str(),
            "1.AAAA",
            "0b7f6c9e-3c1e-4c8e-9b1a-2f4d5e6a7b8c",
        ] {
            assert!(sessions.get_or_resume(bad).is_none(), "{bad}");
        }
        assert_eq!(count(&metrics.sessions_forged), 3);
        // Ended by its client: its id opens nothing here any more, held or not.
        assert!(sessions.end(&id));
        assert!(resumed.ended.is_cancelled());
        assert!(sessions.get_or_resume(&id).is_none());
        let elsewhere = sessions
            .sealing
            .keys
            .seal(&fixed(), seal::now_ms())
            .unwrap();
        assert!(
            sessions.end(&elsewhere),
            "a session opened on another replica ends here too"
        );
        assert!(sessions.get_or_resume(&elsewhere).is_none());
        assert!(!sessions.end("1.AAAA"));
    }

    #[tokio::test]
    async fn an_id_past_its_maximum_age_opens_nothing_held_or_not() {
        let (sessions, _shutdown) = sessions_aged(Duration::from_secs(60));
        let metrics = sessions.proxy.metrics().clone();
        let old = seal::now_ms() - 61_000;
        let id = sessions.sealing.keys.seal(&fixed(), old).unwrap();
        assert!(sessions.get_or_resume(&id).is_none());
        assert_eq!(count(&metrics.sessions_expired), 1);
        // Held, but issued too long ago: ended, and refused.
        let (out, messages) = mpsc::channel(OUTBOX);
        let client = sessions.proxy.connect(out);
        let held = sessions.open(id.clone(), old, client, messages);
        assert!(sessions.get_or_resume(&id).is_none());
        assert!(held.ended.is_cancelled());
        assert_eq!(count(&metrics.sessions_expired), 2);
    }

    #[tokio::test]
    async fn the_held_sessions_are_a_bounded_cache_of_the_idle_ones() {
        let (sessions, _shutdown) = sessions();
        let (busy, _) = open(&sessions);
        let _call = busy.hold();
        let mut kept = Vec::new();
        for _ in 0..MAX_HELD + 100 {
            kept.push(open(&sessions));
        }
        let held = lock(&sessions.map).len();
        assert!(held <= MAX_HELD, "{held} held");
        assert!(held >= MAX_HELD - MAX_HELD / 8, "{held} held");
        assert!(
            lock(&sessions.map).contains_key(&busy.id),
            "a busy session is never let go"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn idle_sessions_end_and_busy_or_streaming_ones_stay() {
        let (sessions, _shutdown) = sessions();
        let (idle, _) = open(&sessions);
        let (busy, _) = open(&sessions);
        let (streaming, _) = open(&sessions);
        let live = |s: &Arc<HttpSession>| lock(&sessions.map).contains_key(&s.id);
        let limit = Duration::from_secs(300);
        assert_eq!(sessions.expire_idle(limit), 0);
        tokio::time::advance(Duration::from_secs(200)).await;
        busy.touch();
        let stream = streaming.hold();
        tokio::time::advance(Duration::from_secs(99)).await;
        assert_eq!(sessions.expire_idle(limit), 0, "299 s is not idle yet");
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(sessions.expire_idle(limit), 1);
        assert!(!live(&idle) && idle.ended.is_cancelled());
        assert!(live(&busy) && live(&streaming));

        // A call or a stream keeps its session however long; once it ends, the clock runs again.
        tokio::time::advance(Duration::from_secs(1000)).await;
        assert_eq!(
            sessions.expire_idle(limit),
            1,
            "only the busy one, now idle"
        );
        assert!(!live(&busy) && live(&streaming));
        drop(stream);
        tokio::time::advance(Duration::from_secs(299)).await;
        assert_eq!(sessions.expire_idle(limit), 0);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(sessions.expire_idle(limit), 1);
        assert!(!live(&streaming));
        assert!(lock(&sessions.map).is_empty());
    }

    #[tokio::test]
    async fn shutdown_ends_every_session() {
        let (sessions, shutdown) = sessions();
        sessions.spawn_expiry(Duration::from_secs(300));
        let (session, _) = open(&sessions);
        shutdown.cancel();
        session.ended.cancelled().await;
        // The expiry task lets go of them all (it runs beside this test on its one thread).
        for _ in 0..100 {
            if lock(&sessions.map).is_empty() {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert!(lock(&sessions.map).is_empty(), "every session was let go");
    }
}
