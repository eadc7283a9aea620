//! What happened to each server lately, for a person to see (SPEC §15): a bounded ring of its
//! lifecycle events (ready, lost, backoff, gave up, idle, needs auth, …) over the last hour, and
//! its tool calls counted per minute over the last hour (calls, errors, and a latency histogram
//! the median and p99 are read from).
//!
//! Memory is bounded whatever the traffic: at most [`EVENTS`] events per server (each detail cut
//! to [`DETAIL_BYTES`]) and [`MINUTES`] fixed-size minute buckets, made only for minutes that
//! had calls (a server no one calls holds none). It keeps values only: the hub
//! tells it what happened and when; it never reads a clock, starts a task or does I/O.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::supervisor::{ServerState, Snapshot};

/// The most lifecycle events kept per server.
pub const EVENTS: usize = 128;
/// How long an event or a minute of calls is kept.
pub const KEPT: Duration = Duration::from_secs(3600);
/// Minute buckets of calls kept per server (one hour).
pub const MINUTES: usize = 60;
/// The longest detail (an error text) an event keeps, in bytes.
pub const DETAIL_BYTES: usize = 160;
/// Latency buckets: bucket `i` holds calls that took less than `2^i` µs (and at least
/// `2^(i-1)`); the last one everything slower (over about 16 s).
const BUCKETS: usize = 25;

/// What happened to a server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// A generation is ready.
    Ready,
    /// A ready generation was lost; the outage begins.
    Lost,
    /// An attempt failed; the next is due after a backoff.
    Backoff,
    /// The outage budget is spent.
    GaveUp,
    /// Lost with reconnecting turned off.
    Down,
    /// Stopped for want of use (`idleTimeoutMs`, or `onDemand` before a first request).
    Idle,
    /// It needs a login (or a token) before it can connect.
    NeedsAuth,
    /// Stopped.
    Stopped,
}

/// One lifecycle event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Event {
    /// When it was seen.
    #[serde(serialize_with = "unix_ms")]
    pub at: SystemTime,
    /// What happened.
    pub kind: EventKind,
    /// The generation it is about.
    pub generation: u64,
    /// The process id of a ready stdio generation.
    pub pid: Option<u32>,
    /// The attempt within the outage (backoff).
    pub attempt: Option<u32>,
    /// Why (the last error), cut to [`DETAIL_BYTES`].
    pub detail: Option<String>,
}

fn unix_ms<S: serde::Serializer>(at: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(
        at.duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
    )
}

/// The events a snapshot makes after a snapshot in state `previous`: none for a state no one
/// needs to see as an event (an attempt under way, a first connect), one for most, two for a
/// ready generation lost with its backoff already set (the one snapshot says both).
pub fn events_of(previous: Option<ServerState>, snapshot: &Snapshot, at: SystemTime) -> Vec<Event> {
    let event = |kind: EventKind| Event {
        at,
        kind,
        generation: snapshot.generation,
        pid: (kind == EventKind::Ready).then(|| snapshot.pid()).flatten(),
        attempt: (kind == EventKind::Backoff).then_some(snapshot.attempt),
        detail: match kind {
            EventKind::Ready | EventKind::Idle | EventKind::Stopped => None,
            _ => snapshot.last_error.as_deref().map(cut),
        },
    };
    let backoff = snapshot.next_attempt_at().is_some();
    match snapshot.state() {
        ServerState::Connecting => Vec::new(),
        ServerState::Ready => vec![event(EventKind::Ready)],
        ServerState::Reconnecting if previous == Some(ServerState::Ready) => {
            let mut both = vec![event(EventKind::Lost)];
            if backoff {
                both.push(event(EventKind::Backoff));
            }
            both
        }
        ServerState::Reconnecting | ServerState::Retrying if backoff => {
            vec![event(EventKind::Backoff)]
        }
        ServerState::Reconnecting | ServerState::Retrying => Vec::new(),
        ServerState::GaveUp => vec![event(EventKind::GaveUp)],
        ServerState::Down => vec![event(EventKind::Down)],
        ServerState::Idle => vec![event(EventKind::Idle)],
        ServerState::NeedsAuth => vec![event(EventKind::NeedsAuth)],
        ServerState::Stopped => vec![event(EventKind::Stopped)],
    }
}

/// `text` cut at a character boundary to at most [`DETAIL_BYTES`].
fn cut(text: &str) -> String {
    let mut end = text.len().min(DETAIL_BYTES);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

/// One minute of one server's calls.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Minute {
    /// Minutes since the Unix epoch (0: unused).
    minute: u64,
    calls: u32,
    errors: u32,
    buckets: [u32; BUCKETS],
}

/// The calls of one span of time, as a person reads them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct CallStats {
    /// The span's start, in ms since the Unix epoch.
    pub from_ms: u64,
    /// Tool calls that ended in the span.
    pub calls: u32,
    /// Those that failed (an error of the library, not a tool result with `isError`).
    pub errors: u32,
    /// The median's bucket's upper bound, in ms (`None` without calls).
    pub median_ms: Option<f64>,
    /// The p99's bucket's upper bound, in ms.
    pub p99_ms: Option<f64>,
}

/// The upper bound of bucket `i`, in ms.
fn bucket_ms(i: usize) -> f64 {
    (1u64 << i) as f64 / 1000.0
}

/// The bucket of a call that took `took`.
fn bucket_of(took: Duration) -> usize {
    let micros = took.as_micros().max(1);
    // The smallest i with micros < 2^i.
    let i = (u128::BITS - micros.leading_zeros()) as usize;
    i.min(BUCKETS - 1)
}

impl Minute {
    fn stats(&self) -> CallStats {
        let rank = |q: f64| -> Option<f64> {
            let total: u32 = self.buckets.iter().sum();
            if total == 0 {
                return None;
            }
            // Nearest rank.
            let wanted = ((q * f64::from(total)).ceil() as u32).clamp(1, total);
            let mut seen = 0;
            self.buckets.iter().enumerate().find_map(|(i, n)| {
                seen += n;
                (seen >= wanted).then(|| bucket_ms(i))
            })
        };
        CallStats {
            from_ms: self.minute * 60_000,
            calls: self.calls,
            errors: self.errors,
            median_ms: rank(0.5),
            p99_ms: rank(0.99),
        }
    }
}

/// One server's history. Only the minutes that had calls take room (at most [`MINUTES`]).
#[derive(Debug, Default)]
pub struct ServerHistory {
    events: VecDeque<Event>,
    /// Oldest first; a minute's entry made by its first call.
    minutes: VecDeque<Minute>,
    last_state: Option<ServerState>,
    /// While the newest loss waits for its reason: the error the snapshot held when the loss
    /// was seen (an earlier outage's, or none).
    error_at_loss: Option<Option<String>>,
    /// The error the last ready snapshot held (an earlier outage's, or none).
    error_when_ready: Option<String>,
}

fn minute_of(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() / 60)
}

impl ServerHistory {
    /// The server's snapshot changed at `at`: an event when its state says something new.
    pub fn saw(&mut self, snapshot: &Snapshot, at: SystemTime) {
        let previous = self.last_state.replace(snapshot.state());
        if snapshot.state() == ServerState::Ready {
            self.error_when_ready.clone_from(&snapshot.last_error);
        }
        // The snapshot that shows a loss comes before the one that says why (its error, set as
        // the outage's first failure is judged): the first later snapshot with another error
        // completes the loss's event.
        if let Some(before) = &self.error_at_loss
            && snapshot.last_error != *before
        {
            let why = snapshot.last_error.as_deref().map(cut);
            if let Some(lost) = self
                .events
                .iter_mut()
                .rev()
                .find(|e| e.kind == EventKind::Lost)
            {
                lost.detail = why;
            }
            self.error_at_loss = None;
        }
        for mut event in events_of(previous, snapshot, at) {
            if event.kind == EventKind::Lost && snapshot.last_error == self.error_when_ready {
                // The error it holds is an earlier outage's: the loss waits for its own.
                self.error_at_loss = Some(snapshot.last_error.clone());
                event.detail = None;
            }
            // One event per kind, generation and attempt: a snapshot that changed something
            // else (its tools, its phase within an attempt) adds none.
            let again = self.events.iter().rev().take(2).any(|last| {
                last.kind == event.kind
                    && last.generation == event.generation
                    && last.attempt == event.attempt
            });
            if !again {
                self.push(event);
            }
        }
    }

    fn push(&mut self, event: Event) {
        let oldest = event.at.checked_sub(KEPT);
        while self.events.len() >= EVENTS
            || self
                .events
                .front()
                .is_some_and(|e| oldest.is_some_and(|o| e.at < o))
        {
            self.events.pop_front();
        }
        self.events.push_back(event);
    }

    /// A tool call that ended at `at`, after `took`, ok or not.
    pub fn call(&mut self, at: SystemTime, took: Duration, ok: bool) {
        let minute = minute_of(at);
        // A clock that stepped back counts into the newest minute.
        if self.minutes.back().is_none_or(|last| last.minute < minute) {
            while self.minutes.len() >= MINUTES
                || self
                    .minutes
                    .front()
                    .is_some_and(|m| m.minute + MINUTES as u64 <= minute)
            {
                self.minutes.pop_front();
            }
            self.minutes.push_back(Minute {
                minute,
                ..Minute::default()
            });
        }
        let Some(slot) = self.minutes.back_mut() else {
            return;
        };
        slot.calls = slot.calls.saturating_add(1);
        if !ok {
            slot.errors = slot.errors.saturating_add(1);
        }
        let bucket = &mut slot.buckets[bucket_of(took)];
        *bucket = bucket.saturating_add(1);
    }

    /// The events of the last hour before `now`, oldest first.
    pub fn events(&self, now: SystemTime) -> Vec<Event> {
        let oldest = now.checked_sub(KEPT);
        self.events
            .iter()
            .filter(|e| oldest.is_none_or(|o| e.at >= o))
            .cloned()
            .collect()
    }

    /// The calls of each minute of the last hour before `now` that had any, oldest first.
    pub fn minutes(&self, now: SystemTime) -> Vec<CallStats> {
        self.last_hour(now).map(Minute::stats).collect()
    }

    /// The minutes of the last hour before `now` (the current one included), oldest first.
    fn last_hour(&self, now: SystemTime) -> impl Iterator<Item = &Minute> {
        let current = minute_of(now);
        self.minutes
            .iter()
            .filter(move |m| m.minute + (MINUTES as u64) > current && m.minute <= current)
    }

    /// The calls of the last hour before `now`, as one span.
    pub fn hour(&self, now: SystemTime) -> CallStats {
        let current = minute_of(now);
        let mut all = Minute {
            minute: current.saturating_sub(MINUTES as u64 - 1),
            ..Minute::default()
        };
        for m in self.last_hour(now) {
            all.calls = all.calls.saturating_add(m.calls);
            all.errors = all.errors.saturating_add(m.errors);
            for (sum, n) in all.buckets.iter_mut().zip(m.buckets.iter()) {
                *sum = sum.saturating_add(*n);
            }
        }
        all.stats()
    }
}

/// Every server's history, shared by the hub's tasks. A call locks only its own server's
/// history (the map is only written when a server is first seen or removed).
#[derive(Debug, Default)]
pub struct Histories {
    servers: RwLock<HashMap<String, Arc<Mutex<ServerHistory>>>>,
}

impl Histories {
    /// `server`'s history (made if new).
    fn of(&self, server: &str) -> Arc<Mutex<ServerHistory>> {
        if let Some(history) = self
            .servers
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(server)
        {
            return history.clone();
        }
        self.servers
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(server.to_string())
            .or_default()
            .clone()
    }

    /// `f` on `server`'s history (made if new).
    pub fn with<T>(&self, server: &str, f: impl FnOnce(&mut ServerHistory) -> T) -> T {
        let history = self.of(server);
        let mut history = history.lock().unwrap_or_else(PoisonError::into_inner);
        f(&mut history)
    }

    /// `f` on `server`'s history, if it has one.
    pub fn read<T>(&self, server: &str, f: impl FnOnce(&ServerHistory) -> T) -> Option<T> {
        let history = self
            .servers
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(server)?
            .clone();
        let history = history.lock().unwrap_or_else(PoisonError::into_inner);
        Some(f(&history))
    }

    /// Forget the servers not in `keep` (after a reload removed them).
    pub fn retain(&self, keep: &[String]) {
        self.servers
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|name, _| keep.contains(name));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn event(secs: u64, kind: EventKind) -> Event {
        Event {
            at: at(secs),
            kind,
            generation: secs,
            pid: None,
            attempt: None,
            detail: None,
        }
    }

    #[test]
    fn a_latency_falls_in_the_bucket_whose_bound_is_just_above_it() {
        assert_eq!(bucket_of(Duration::from_micros(0)), 1);
        assert_eq!(bucket_of(Duration::from_micros(1)), 1);
        assert_eq!(bucket_of(Duration::from_micros(3)), 2);
        assert_eq!(bucket_of(Duration::from_micros(1000)), 10); // < 1024 µs
        assert_eq!(bucket_of(Duration::from_micros(1024)), 11);
        assert_eq!(bucket_of(Duration::from_secs(3600)), BUCKETS - 1);
        for micros in [1u64, 7, 999, 1_000_000] {
            let i = bucket_of(Duration::from_micros(micros));
            assert!(bucket_ms(i) * 1000.0 > micros as f64);
        }
    }

    #[test]
    fn the_median_and_p99_are_read_from_the_minute_of_the_calls() {
        let mut h = ServerHistory::default();
        let now = at(10 * 60 + 5);
        for _ in 0..98 {
            h.call(now, Duration::from_micros(900), true); // < 1.024 ms
        }
        h.call(now, Duration::from_millis(50), false); // < 65.536 ms
        h.call(now, Duration::from_millis(50), false);
        let minutes = h.minutes(now);
        assert_eq!(minutes.len(), 1);
        let m = minutes[0];
        assert_eq!((m.calls, m.errors, m.from_ms), (100, 2, 600_000));
        assert_eq!(m.median_ms, Some(1.024));
        assert_eq!(m.p99_ms, Some(65.536));
        assert_eq!(h.hour(now).calls, 100);
    }

    #[test]
    fn a_minute_older_than_the_hour_is_gone() {
        let mut h = ServerHistory::default();
        h.call(at(0), Duration::from_millis(1), true);
        h.call(at(61), Duration::from_millis(1), true);
        assert_eq!(h.minutes(at(61)).len(), 2);
        // An hour later the first minute is out of the window; its slot takes minute 60.
        assert_eq!(h.minutes(at(3600 + 59)).len(), 1);
        h.call(at(3600), Duration::from_millis(1), false);
        let minutes = h.minutes(at(3600));
        assert_eq!(minutes.len(), 2);
        assert_eq!(minutes[1].errors, 1);
        assert_eq!(minutes[1].calls, 1, "a new minute starts afresh");
        assert_eq!(h.minutes.len(), 2, "minute 0 was dropped for minute 60");
        assert_eq!(h.hour(at(3600)).calls, 2);
    }

    #[test]
    fn the_ring_keeps_at_most_its_bound_and_only_the_last_hour() {
        let mut h = ServerHistory::default();
        for i in 0..(EVENTS as u64 + 10) {
            h.push(event(i, EventKind::Lost));
        }
        assert_eq!(h.events.len(), EVENTS);
        assert_eq!(h.events.front().map(|e| e.generation), Some(10));
        // An event an hour after the last: the older ones go.
        h.push(event(EVENTS as u64 + 10 + 3600, EventKind::Ready));
        assert_eq!(h.events.len(), 1);
        assert_eq!(h.events(at(EVENTS as u64 + 10 + 3600)).len(), 1);
        // Read an hour later again: nothing.
        assert!(h.events(at(EVENTS as u64 + 10 + 7201)).is_empty());
    }

    #[test]
    fn a_loss_seen_before_its_reason_gets_the_reason_from_the_next_snapshot() {
        use crate::supervisor::{AfterClose, Phase, Snapshot, ToolList};
        let mut h = ServerHistory::default();
        let mut snapshot = Snapshot {
            generation: 1,
            attempt: 0,
            max_attempts: 10,
            restarts: 0,
            // An earlier outage's.
            last_error: Some("an old error".into()),
            phase: Phase::Closing(AfterClose::Reconnect),
            tool_list: ToolList::None,
        };
        // Ready with an earlier outage's error.
        h.last_state = Some(ServerState::Ready);
        h.error_when_ready = Some("an old error".into());
        h.saw(&snapshot, at(1));
        assert_eq!(h.events.back().map(|e| e.kind), Some(EventKind::Lost));
        assert_eq!(h.events.back().and_then(|e| e.detail.clone()), None);
        snapshot.last_error = Some("the process exited (signal 9)".into());
        h.saw(&snapshot, at(2));
        assert_eq!(h.events.len(), 1);
        assert_eq!(
            h.events.back().and_then(|e| e.detail.clone()).as_deref(),
            Some("the process exited (signal 9)")
        );
        // The loss and its reason in one snapshot (the first one missed): it has it at once.
        let mut h = ServerHistory {
            last_state: Some(ServerState::Ready),
            error_when_ready: Some("an old error".into()),
            ..ServerHistory::default()
        };
        h.saw(&snapshot, at(3));
        assert_eq!(
            h.events.back().and_then(|e| e.detail.clone()).as_deref(),
            Some("the process exited (signal 9)")
        );
    }

    #[test]
    fn a_detail_is_cut_at_a_character_boundary() {
        let long = "é".repeat(DETAIL_BYTES);
        let cut = cut(&long);
        assert!(cut.len() <= DETAIL_BYTES);
        assert!(cut.chars().all(|c| c == 'é'));
    }

    #[test]
    fn an_hour_of_history_stays_under_64_kib_per_server() {
        // Fixed: the minutes; bounded: the events, each with a full detail.
        let minutes = std::mem::size_of::<[Minute; MINUTES]>();
        let events = EVENTS * (std::mem::size_of::<Event>() + DETAIL_BYTES);
        assert!(minutes + events <= 64 * 1024, "{minutes} + {events}");
    }
}
