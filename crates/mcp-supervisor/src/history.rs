//! What happened to each server lately, for a person to see (SPEC §15): a bounded ring of its
//! lifecycle events (ready, lost, hung and killed, session recovered, backoff, gave up, idle,
//! needs auth, …) over the last hour, and
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

use crate::supervisor::{Loss, LossKind, ServerState, Snapshot};

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
    /// A ready generation was judged hung (health probes or calls timed out in a row) and
    /// killed; the outage begins. The detail says what timed out.
    Hung,
    /// A stale HTTP session was re-established at once (a fresh session, no outage, no
    /// backoff): the generation is the new one, the detail what the server answered.
    SessionRecovered,
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
    #[serde(serialize_with = "serialize_unix_ms")]
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

/// Milliseconds since the Unix epoch (0 before it), as every time here is shown.
pub fn unix_ms(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn serialize_unix_ms<S: serde::Serializer>(at: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(unix_ms(*at))
}

/// What a history saw before a snapshot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Seen {
    /// The state and generation of the last snapshot, if any.
    pub last: Option<(ServerState, u64)>,
    /// The newest generation seen ready (0: none).
    pub ready: u64,
}

/// The events a snapshot makes after what was `seen`: none for a state no one needs to see as
/// an event (an attempt under way, a first connect), one for most, two for a ready generation
/// lost with its backoff already set, or for a ready one after a ready one whose loss was not
/// seen (a watch keeps only the newest snapshot).
///
/// How a generation was lost is the supervisor's judgement, in the snapshot
/// ([`Snapshot::last_loss`]): hung and killed, or a stale session. A stale session's loss is held
/// until the attempt that re-establishes it ends: ready, it is one event, session recovered;
/// anything else (that attempt failed, or none came), it shows as a loss after all, first.
pub fn events_of(seen: Seen, snapshot: &Snapshot, at: SystemTime) -> Vec<Event> {
    let event = |kind: EventKind| Event {
        at,
        kind,
        generation: snapshot.generation,
        pid: matches!(kind, EventKind::Ready | EventKind::SessionRecovered)
            .then(|| snapshot.pid())
            .flatten(),
        attempt: (kind == EventKind::Backoff).then_some(snapshot.attempt),
        detail: match kind {
            EventKind::Ready | EventKind::Idle | EventKind::Stopped => None,
            _ => snapshot.last_error.as_deref().map(cut),
        },
    };
    // Hung, or lost (a stale session not re-established at once is a loss after all).
    let of_loss = |loss: &Loss| Event {
        at,
        kind: match loss.kind {
            LossKind::Hung => EventKind::Hung,
            LossKind::Lost | LossKind::StaleSession => EventKind::Lost,
        },
        generation: loss.generation,
        pid: None,
        attempt: None,
        detail: Some(cut(&loss.cause)),
    };
    let after_ready = seen
        .last
        .and_then(|(state, g)| (state == ServerState::Ready).then_some(g));
    let loss = snapshot.last_loss.as_ref();
    // The loss of this snapshot's generation.
    let lost_here = loss.filter(|l| l.generation == snapshot.generation);
    // A stale session lost by the generation before this one: this one re-establishes it.
    let reestablished = loss
        .filter(|l| l.kind == LossKind::StaleSession && l.generation + 1 == snapshot.generation);
    // A stale session lost by this generation, or re-established by it but not seen ready yet:
    // not shown yet.
    let stale = loss
        .filter(|l| l.kind == LossKind::StaleSession && l.generation == snapshot.generation)
        .or(reestablished.filter(|_| seen.ready < snapshot.generation));
    let backoff = snapshot.next_attempt_at().is_some();
    let mut events = match snapshot.state() {
        ServerState::Connecting => Vec::new(),
        ServerState::Ready if reestablished.is_some() => {
            let mut recovered = event(EventKind::SessionRecovered);
            recovered.detail = reestablished.map(|l| cut(&l.cause));
            return vec![recovered];
        }
        ServerState::Ready => {
            // A loss between two ready generations that this history did not see.
            let unseen = loss.filter(|l| {
                after_ready.is_some_and(|g| g <= l.generation && l.generation < snapshot.generation)
            });
            unseen
                .map(of_loss)
                .into_iter()
                .chain([event(EventKind::Ready)])
                .collect()
        }
        // The immediate re-establishment of a stale session is next: its outcome decides.
        ServerState::Reconnecting | ServerState::Retrying
            if stale.is_some_and(|l| l.generation == snapshot.generation) =>
        {
            return Vec::new();
        }
        ServerState::Reconnecting if after_ready.is_some() => {
            let mut both = match lost_here {
                Some(l) => vec![of_loss(l)],
                // A stale session's loss is said below.
                None if stale.is_some() => Vec::new(),
                None => vec![event(EventKind::Lost)],
            };
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
    };
    // A stale session that was not re-established at once: a loss after all, before the rest.
    if let Some(l) = stale
        && !events.is_empty()
    {
        events.insert(0, of_loss(l));
    }
    events
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
    /// What the snapshots so far showed.
    seen: Seen,
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
        let seen = self.seen;
        self.seen.last = Some((snapshot.state(), snapshot.generation));
        if snapshot.state() == ServerState::Ready {
            self.seen.ready = self.seen.ready.max(snapshot.generation);
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
        for mut event in events_of(seen, snapshot, at) {
            // A loss the supervisor judged has its cause; another one takes the error.
            let judged = snapshot
                .last_loss
                .as_ref()
                .is_some_and(|l| l.generation == event.generation);
            if event.kind == EventKind::Lost
                && !judged
                && snapshot.last_error == self.error_when_ready
            {
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
            last_loss: None,
            phase: Phase::Closing(AfterClose::Reconnect),
            tool_list: ToolList::None,
        };
        // Ready with an earlier outage's error.
        h.seen = Seen {
            last: Some((ServerState::Ready, 1)),
            ready: 1,
        };
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
            seen: Seen {
                last: Some((ServerState::Ready, 1)),
                ready: 1,
            },
            error_when_ready: Some("an old error".into()),
            ..ServerHistory::default()
        };
        h.saw(&snapshot, at(3));
        assert_eq!(
            h.events.back().and_then(|e| e.detail.clone()).as_deref(),
            Some("the process exited (signal 9)")
        );
    }

    /// A snapshot of server generation `generation` in `phase`, after `loss`.
    fn snap(
        generation: u64,
        phase: crate::supervisor::Phase,
        last_error: Option<&str>,
        loss: Option<(u64, LossKind, &str)>,
    ) -> Snapshot {
        Snapshot {
            generation,
            attempt: 0,
            max_attempts: 10,
            restarts: 0,
            last_error: last_error.map(str::to_string),
            last_loss: loss.map(|(generation, kind, cause)| Loss {
                generation,
                kind,
                cause: cause.to_string(),
            }),
            phase,
            tool_list: crate::supervisor::ToolList::Live,
        }
    }

    /// What `snapshots` make, one a second, as (kind, generation, detail).
    fn seen(snapshots: &[Snapshot]) -> Vec<(EventKind, u64, Option<String>)> {
        let mut h = ServerHistory::default();
        for (i, s) in snapshots.iter().enumerate() {
            h.saw(s, at(i as u64));
        }
        h.events
            .iter()
            .map(|e| (e.kind, e.generation, e.detail.clone()))
            .collect()
    }

    /// The (kind, generation) of each of `events`.
    fn kinds(events: &[(EventKind, u64, Option<String>)]) -> Vec<(EventKind, u64)> {
        events.iter().map(|(k, g, _)| (*k, *g)).collect()
    }

    fn stopped() -> crate::supervisor::Phase {
        crate::supervisor::Phase::Parked(crate::supervisor::Parked::Stopped)
    }

    fn closing() -> crate::supervisor::Phase {
        crate::supervisor::Phase::Closing(crate::supervisor::AfterClose::Reconnect)
    }

    fn backoff() -> crate::supervisor::Phase {
        crate::supervisor::Phase::Backoff {
            at: tokio::time::Instant::now(),
            next: crate::supervisor::Recovery::Reconnect,
        }
    }

    fn reconnecting() -> crate::supervisor::Phase {
        crate::supervisor::Phase::Attempting(crate::supervisor::Attempt::Reconnect)
    }

    #[test]
    fn the_two_new_kinds_are_named_as_the_spec_lists_them() {
        let names = [EventKind::Hung, EventKind::SessionRecovered]
            .map(|k| serde_json::to_string(&k).unwrap_or_default());
        assert_eq!(names, ["\"hung\"", "\"session_recovered\""]);
    }

    #[test]
    fn a_generation_judged_hung_shows_as_hung_with_what_timed_out_then_ready() {
        use crate::supervisor::tests::ready_phase;
        let why =
            "3 health probes and timed-out calls in a row; last: no answer to ping within 5000 ms";
        let hung = Some((1, LossKind::Hung, why));
        let events = seen(&[
            snap(1, ready_phase(Some(7)), None, None),
            snap(1, closing(), None, hung),
            snap(1, backoff(), Some(why), hung),
            snap(2, reconnecting(), Some(why), hung),
            snap(2, ready_phase(Some(8)), Some(why), hung),
        ]);
        assert_eq!(
            kinds(&events),
            [
                (EventKind::Ready, 1),
                (EventKind::Hung, 1),
                (EventKind::Backoff, 1),
                (EventKind::Ready, 2),
            ]
        );
        assert_eq!(events[1].2.as_deref(), Some(why), "said at once, not later");
    }

    #[test]
    fn a_hang_the_watch_skipped_past_still_shows_before_the_next_ready() {
        use crate::supervisor::tests::ready_phase;
        let why =
            "1 health probes and timed-out calls in a row; last: no answer to ping within 500 ms";
        let hung = Some((1, LossKind::Hung, why));
        // Restarted at once (a stable server): the history sees ready, then ready again.
        let events = seen(&[
            snap(1, ready_phase(Some(7)), None, None),
            snap(2, ready_phase(Some(8)), Some(why), hung),
            snap(2, ready_phase(Some(8)), Some(why), hung),
        ]);
        assert_eq!(
            events,
            [
                (EventKind::Ready, 1, None),
                (EventKind::Hung, 1, Some(why.to_string())),
                (EventKind::Ready, 2, None),
            ]
        );
    }

    #[test]
    fn a_plain_loss_the_supervisor_judged_has_its_cause_at_once() {
        use crate::supervisor::tests::ready_phase;
        let why = "the server process (pid 7) exited or closed its stdout";
        // The error of the ready snapshot is an earlier outage's; the loss has its own.
        let events = seen(&[
            snap(1, ready_phase(Some(7)), Some("an old error"), None),
            snap(
                1,
                closing(),
                Some("an old error"),
                Some((1, LossKind::Lost, why)),
            ),
        ]);
        assert_eq!(events[1], (EventKind::Lost, 1, Some(why.to_string())));
    }

    #[test]
    fn a_stale_session_re_established_at_once_is_one_event_session_recovered() {
        use crate::supervisor::tests::ready_phase;
        let answer = "the server no longer knows our session (HTTP 404)";
        let stale = Some((1, LossKind::StaleSession, answer));
        let events = seen(&[
            snap(1, ready_phase(None), None, None),
            snap(1, closing(), None, stale),
            snap(1, backoff(), Some(answer), stale),
            snap(2, reconnecting(), Some(answer), stale),
            snap(2, ready_phase(None), Some(answer), stale),
            // A later change of the same ready generation (its tools) adds nothing.
            snap(2, ready_phase(None), Some(answer), stale),
        ]);
        assert_eq!(
            events,
            [
                (EventKind::Ready, 1, None),
                (EventKind::SessionRecovered, 2, Some(answer.to_string())),
            ]
        );
        // Seen late (the watch keeps only the newest): the same.
        let late = seen(&[
            snap(1, ready_phase(None), None, None),
            snap(2, ready_phase(None), Some(answer), stale),
        ]);
        assert_eq!(late, events);
        // The recovered generation stopped later: stopped, and no loss of the recovered one.
        let stopped = seen(&[
            snap(1, ready_phase(None), None, None),
            snap(2, ready_phase(None), Some(answer), stale),
            snap(2, stopped(), Some(answer), stale),
        ]);
        assert_eq!(
            kinds(&stopped),
            [
                (EventKind::Ready, 1),
                (EventKind::SessionRecovered, 2),
                (EventKind::Stopped, 2)
            ]
        );
    }

    #[test]
    fn a_stale_session_not_re_established_at_once_shows_as_a_loss_first() {
        use crate::supervisor::tests::ready_phase;
        let answer = "HTTP 400: No valid session ID provided";
        let stale = Some((1, LossKind::StaleSession, answer));
        let mut failed = snap(2, backoff(), Some("connection refused"), stale);
        failed.attempt = 2;
        let events = seen(&[
            snap(1, ready_phase(None), None, None),
            snap(1, closing(), None, stale),
            snap(1, backoff(), Some(answer), stale),
            snap(2, reconnecting(), Some(answer), stale),
            failed,
            snap(3, reconnecting(), Some("connection refused"), stale),
            snap(3, ready_phase(None), Some("connection refused"), stale),
        ]);
        assert_eq!(
            events,
            [
                (EventKind::Ready, 1, None),
                (EventKind::Lost, 1, Some(answer.to_string())),
                (
                    EventKind::Backoff,
                    2,
                    Some("connection refused".to_string())
                ),
                (EventKind::Ready, 3, None),
            ]
        );
        // Stopped while the re-establishment was due: a loss, then stopped.
        let stopped = seen(&[
            snap(1, ready_phase(None), None, None),
            snap(1, closing(), None, stale),
            snap(1, stopped(), Some(answer), stale),
        ]);
        assert_eq!(
            kinds(&stopped),
            [
                (EventKind::Ready, 1),
                (EventKind::Lost, 1),
                (EventKind::Stopped, 1)
            ]
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
