//! One HTTP session: its client, its standalone stream (event ids, the last [`KEPT_EVENTS`]
//! kept for replay after `Last-Event-ID`), its idle clock and the holds that stop it, and its
//! places for requests in flight.
//!
//! It never decides when a session ends (that is the store's) and never reads a message: what
//! it keeps is text, as the proxy gave it.

use std::collections::VecDeque;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Semaphore, mpsc};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::options::{KEPT_EVENTS, SESSION_IN_FLIGHT};
use crate::Client;
use crate::json::lock;

/// One client's session.
pub(crate) struct HttpSession {
    pub(crate) id: String,
    /// When its id was sealed (ms since the epoch).
    pub(crate) issued_ms: u64,
    pub(crate) client: Arc<Client>,
    /// Cancelled when the session ends (DELETE, expiry, shutdown): its streams end.
    pub(crate) ended: CancellationToken,
    events: Mutex<Events>,
    activity: Mutex<Activity>,
    /// Numbers the event streams of its POSTs (their event ids are `STREAM/N`).
    pub(crate) next_stream: AtomicU64,
    /// Places of its requests in flight ([`SESSION_IN_FLIGHT`]).
    pub(crate) in_flight: Arc<Semaphore>,
}

/// A standalone-stream event: its id and the message it carries.
pub(crate) type Event = (u64, Arc<str>);

/// The session's standalone stream: ids `1, 2, …`, the last [`KEPT_EVENTS`] of them kept.
struct Events {
    next: u64,
    kept: VecDeque<Event>,
    /// The highest id handed to a GET stream.
    delivered: u64,
    /// The open stream's queue, bounded at [`KEPT_EVENTS`].
    stream: Option<mpsc::Sender<Event>>,
}

/// When the session was last used, and how many calls and streams keep it alive.
struct Activity {
    last: Instant,
    holds: usize,
}

impl HttpSession {
    /// A session `id` for `client`, sealed at `issued_ms`, that ends with `ended`.
    pub(crate) fn new(
        id: String,
        issued_ms: u64,
        client: Arc<Client>,
        ended: CancellationToken,
    ) -> Self {
        Self {
            id,
            issued_ms,
            client,
            ended,
            events: Mutex::new(Events {
                next: 1,
                kept: VecDeque::new(),
                delivered: 0,
                stream: None,
            }),
            activity: Mutex::new(Activity {
                last: Instant::now(),
                holds: 0,
            }),
            next_stream: AtomicU64::new(1),
            in_flight: Arc::new(Semaphore::new(SESSION_IN_FLIGHT)),
        }
    }

    /// A request on the session.
    pub(crate) fn touch(&self) {
        lock(&self.activity).last = Instant::now();
    }

    /// Keep the session from expiring while the returned guard lives (a call or a stream).
    pub(crate) fn hold(self: &Arc<Self>) -> Hold {
        lock(&self.activity).holds += 1;
        Hold(self.clone())
    }

    /// How long the session has been idle at `now`; `None` while a call or a stream holds it.
    pub(crate) fn idle_since(&self, now: Instant) -> Option<Duration> {
        let activity = lock(&self.activity);
        (activity.holds == 0).then(|| now.saturating_duration_since(activity.last))
    }

    /// A message for the standalone stream: kept, and sent on when a stream is open.
    pub(crate) fn push(&self, text: String) {
        let mut events = lock(&self.events);
        let id = events.next;
        events.next += 1;
        let text: Arc<str> = text.into();
        events.kept.push_back((id, text.clone()));
        if events.kept.len() > KEPT_EVENTS {
            events.kept.pop_front();
        }
        if let Some(stream) = &events.stream {
            match stream.try_send((id, text)) {
                Ok(()) => events.delivered = id,
                Err(mpsc::error::TrySendError::Full(_)) => {
                    // Its client does not read: the stream ends after what it holds, and the
                    // client resumes it with `Last-Event-ID`, from the kept events, which still
                    // hold this one and everything after what the stream held.
                    tracing::debug!(id, "the standalone stream is not read: it ends, to resume");
                    events.stream = None;
                }
                Err(mpsc::error::TrySendError::Closed(_)) => events.stream = None,
            }
        }
    }

    /// Open the standalone stream: the kept events after `last_event_id` (one of ours), or, without
    /// one, those no stream has had yet; then the live ones. `None` while another is open, unless
    /// this one resumes (`Last-Event-ID`): a client resumes a stream it lost, which the server may
    /// not have noticed yet, so the old one ends.
    pub(crate) fn attach(
        &self,
        last_event_id: Option<&str>,
    ) -> Option<(Vec<Event>, mpsc::Receiver<Event>)> {
        let mut events = lock(&self.events);
        if last_event_id.is_none() && events.stream.as_ref().is_some_and(|s| !s.is_closed()) {
            return None;
        }
        let after = last_event_id
            .and_then(|id| id.trim().parse::<u64>().ok())
            .filter(|id| *id < events.next)
            .unwrap_or(events.delivered);
        let replay: Vec<_> = events
            .kept
            .iter()
            .filter(|(id, _)| *id > after)
            .cloned()
            .collect();
        if let Some((id, _)) = replay.last() {
            events.delivered = events.delivered.max(*id);
        }
        let (tx, rx) = mpsc::channel(KEPT_EVENTS);
        events.stream = Some(tx);
        Some((replay, rx))
    }
}

/// Keeps a session from expiring; when dropped, its idle clock starts again.
pub(crate) struct Hold(Arc<HttpSession>);

impl Drop for Hold {
    fn drop(&mut self) {
        let mut activity = lock(&self.0.activity);
        activity.holds = activity.holds.saturating_sub(1);
        activity.last = Instant::now();
    }
}

/// The start of a session id, for logs (a sealed id is a few hundred characters).
pub(crate) fn short(id: &str) -> String {
    match id.char_indices().nth(16) {
        Some((at, _)) => format!("{}…", &id[..at]),
        None => id.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Mode, OUTBOX, Proxy};
    use mcp_supervisor::Hub;
    use mcp_supervisor::core::config::Config;

    fn session() -> Arc<HttpSession> {
        let proxy = Proxy::new(Arc::new(Hub::start(Config::default())), Mode::Aggregate);
        let (out, _messages) = mpsc::channel(OUTBOX);
        let client = proxy.connect(out);
        Arc::new(HttpSession::new(
            "s".into(),
            0,
            client,
            CancellationToken::new(),
        ))
    }

    #[tokio::test]
    async fn the_standalone_stream_keeps_the_last_events_and_replays_after_an_id() {
        let session = session();
        for n in 1..=300 {
            session.push(format!("m{n}"));
        }
        // No stream was open: the newest kept ones are delivered when one opens.
        let (replay, live) = session.attach(None).expect("the first stream");
        let ids: Vec<u64> = replay.iter().map(|(id, _)| *id).collect();
        assert_eq!(ids.first(), Some(&(300 - KEPT_EVENTS as u64 + 1)));
        assert_eq!(ids.last(), Some(&300));
        assert_eq!(&*replay[replay.len() - 1].1, "m300");
        assert!(session.attach(None).is_none(), "one stream at a time");
        session.push("live".into());
        drop(live);
        // Resumption after an id of ours; an id not ours replays only what no stream has had.
        let (replay, live) = session.attach(Some("297")).expect("a stream again");
        let ids: Vec<u64> = replay.iter().map(|(id, _)| *id).collect();
        assert_eq!(ids, [298, 299, 300, 301]);
        // Resuming again while that one looks open: it takes over, and the old one ends.
        let (replay, _taken_over) = session.attach(Some("300")).expect("resumed");
        assert_eq!(replay.len(), 1);
        let mut live = live;
        assert_eq!(live.recv().await, None, "the old stream ended");
        drop(live);
        let (replay, mut live) = session.attach(Some("3/1")).expect("a stream again");
        assert!(replay.is_empty(), "{replay:?}");
        session.push("next".into());
        assert_eq!(live.recv().await.map(|(id, _)| id), Some(302));
    }

    #[tokio::test]
    async fn a_standalone_stream_not_read_ends_and_resumes_without_a_gap() {
        let session = session();
        let (replay, mut live) = session.attach(None).expect("a stream");
        assert!(replay.is_empty());
        // The client reads nothing while more than its stream holds arrive.
        let sent = KEPT_EVENTS as u64 + 40;
        for n in 1..=sent {
            session.push(format!("m{n}"));
        }
        // It gets what the stream held, and then the end of the stream.
        let mut last = 0;
        while let Some((id, text)) = live.recv().await {
            assert_eq!((id, &*text), (last + 1, &*format!("m{}", last + 1)));
            last = id;
        }
        assert_eq!(last, KEPT_EVENTS as u64, "the stream held its bound");
        // It resumes after the last id it read, and gets the rest, with no gap.
        let resume = last.to_string();
        let (replay, _live) = session.attach(Some(&resume)).expect("resumed");
        let ids: Vec<u64> = replay.iter().map(|(id, _)| *id).collect();
        assert_eq!(ids, (last + 1..=sent).collect::<Vec<_>>());
    }

    #[test]
    fn a_long_id_is_shortened_for_logs() {
        assert_eq!(short("abc"), "abc");
        assert_eq!(short("0123456789abcdefXYZ"), "0123456789abcdef…");
    }
}
