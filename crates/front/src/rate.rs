//! Per-identity rate limits (SPEC §14, `"rateLimit": { "requestsPerSecond": N, "burst": M }`):
//! a budget per identity at the top (every request) and on each server that has a limit (its
//! requests), the Retry-After a refused request is told, and the forgetting of idle budgets so
//! that memory stays bounded ([`Limits`], on `governor`'s GCRA).
//!
//! It never reads a request, a header or a token, and never waits: the front passes the
//! identity's key (the caller's issuer and subject as one string, or [`ANONYMOUS`]) and the
//! scope, and answers a refusal itself ([`RetryAfter`]).

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use governor::clock::{Clock, Reference};
use governor::middleware::NoOpMiddleware;
use governor::nanos::Nanos;
use governor::state::StateStore;
use governor::state::keyed::{HashMapStateStore, ShrinkableKeyedStateStore};
use governor::{Quota, RateLimiter};

/// The key of every request when the face has no `auth`: they share one budget.
pub const ANONYMOUS: &str = "anonymous";

/// Identities tracked at most per scope by default (about 100 bytes each).
pub const MAX_KEYS: usize = 100_000;

/// Idle budgets are forgotten at most this long after they are refilled.
const SWEEP_EVERY: Duration = Duration::from_secs(10);

/// While a scope is full, at most one sweep per this long (a sweep reads every key).
const FULL_SWEEP_GAP: Duration = Duration::from_secs(1);

/// At most one warning per this long that a scope is full.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// The longest a full burst may take to refill: it bounds the GCRA's numbers far inside 64 bits.
const MAX_REFILL: Duration = Duration::from_secs(365 * 86_400);

// === Rate ===

/// A validated `rateLimit`: `requestsPerSecond` refill, `burst` at once.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rate {
    quota: Quota,
}

/// Why a `rateLimit` is not valid; the config names where it is.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum RateError {
    #[error("rateLimit.requestsPerSecond must be a positive number (got {0})")]
    RequestsPerSecond(f64),
    #[error("rateLimit.burst must be at least 1 (got 0)")]
    Burst,
    #[error(
        "rateLimit: a burst of {burst} at {requests_per_second} requests a second takes more than a year to refill; raise requestsPerSecond or lower burst"
    )]
    TooSlow {
        requests_per_second: f64,
        burst: u32,
    },
}

impl Rate {
    /// `requests_per_second` (may be fractional: 0.5 is one request every 2 s) with `burst`
    /// at once. Over 10^9 a second is the same as 10^9 (governor counts nanoseconds); a burst
    /// that would take more than a year to refill is refused.
    pub fn new(requests_per_second: f64, burst: u32) -> Result<Self, RateError> {
        if !(requests_per_second.is_finite() && requests_per_second > 0.0) {
            return Err(RateError::RequestsPerSecond(requests_per_second));
        }
        let max_burst = NonZeroU32::new(burst).ok_or(RateError::Burst)?;
        let too_slow = RateError::TooSlow {
            requests_per_second,
            burst,
        };
        if f64::from(burst) / requests_per_second > MAX_REFILL.as_secs_f64() {
            return Err(too_slow);
        }
        let period = Duration::try_from_secs_f64(1.0 / requests_per_second)
            .map_err(|_| too_slow.clone())?
            .max(Duration::from_nanos(1));
        let quota = Quota::with_period(period).ok_or(too_slow)?;
        Ok(Self {
            quota: quota.allow_burst(max_burst),
        })
    }

    /// How long a budget left alone takes to be forgettable: a full burst's refill and one
    /// period more (when `governor` counts it indistinguishable from a fresh one).
    fn forgotten_after(&self) -> Duration {
        self.quota.burst_size_replenished_in() + self.quota.replenish_interval()
    }
}

// === RetryAfter ===

/// A refused request: how long until the identity may try again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("rate limit: the request did not run; retry after {} s", self.seconds())]
pub struct RetryAfter(pub Duration);

impl RetryAfter {
    /// Whole seconds, rounded up, at least 1.
    pub fn seconds(&self) -> u64 {
        let whole = self.0.as_secs();
        let rounded = if self.0.subsec_nanos() > 0 {
            whole.saturating_add(1)
        } else {
            whole
        };
        rounded.max(1)
    }

    /// The HTTP `Retry-After` header's value (with status 429).
    pub fn header_value(&self) -> String {
        self.seconds().to_string()
    }

    /// The JSON-RPC error's message: `rate limit: the request did not run; retry after N s`.
    pub fn error_text(&self) -> String {
        self.to_string()
    }
}

// === Clock ===

/// `governor`'s clock on tokio's time: a paused test clock drives the limits too.
#[derive(Clone, Copy, Debug)]
pub struct TokioClock {
    origin: tokio::time::Instant,
}

impl Default for TokioClock {
    fn default() -> Self {
        Self {
            origin: tokio::time::Instant::now(),
        }
    }
}

impl Clock for TokioClock {
    type Instant = Nanos;

    fn now(&self) -> Nanos {
        Nanos::from(u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }
}

// === Limits ===

/// Which budget a request spends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope<'a> {
    /// The top `rateLimit`: every request.
    Top,
    /// A server's `rateLimit`: the requests that go to it.
    Server(&'a str),
}

/// `governor`'s map of budgets, shared so that [`Limits`] can ask whether it holds a key.
struct Store(Arc<HashMapStateStore<String>>);

impl StateStore for Store {
    type Key = String;

    fn measure_and_replace<T, F, E>(&self, key: &String, f: F) -> Result<T, E>
    where
        F: Fn(Option<Nanos>) -> Result<(T, Nanos), E>,
    {
        self.0.measure_and_replace(key, f)
    }
}

impl ShrinkableKeyedStateStore<String> for Store {
    fn retain_recent(&self, drop_below: Nanos) {
        self.0.retain_recent(drop_below);
    }

    fn shrink_to_fit(&self) {
        self.0.shrink_to_fit();
    }

    fn len(&self) -> usize {
        ShrinkableKeyedStateStore::len(&*self.0)
    }

    fn is_empty(&self) -> bool {
        ShrinkableKeyedStateStore::is_empty(&*self.0)
    }
}

/// One scope's budgets, one per identity.
struct Budgets<C: Clock> {
    limiter: RateLimiter<String, Store, C, NoOpMiddleware<C::Instant>>,
    keys: Arc<HashMapStateStore<String>>,
    rate: Rate,
}

impl<C: Clock> Budgets<C> {
    fn new(rate: Rate, clock: C) -> Self {
        let keys = Arc::new(HashMapStateStore::default());
        Self {
            limiter: RateLimiter::new(rate.quota, Store(keys.clone()), clock),
            keys,
            rate,
        }
    }

    fn holds(&self, key: &str) -> bool {
        self.keys.lock().contains_key(key)
    }
}

/// Every scope's budgets: the top one and each limited server's, per identity. Memory is
/// bounded: a budget left alone until it is full again is forgotten (checked at most every
/// 10 s, by the checks themselves, or by [`Limits::sweep`]), and a scope tracks at most
/// `max_keys` identities. A new identity past that is refused until one is forgotten, with a
/// warning (at most every 10 s): the limits fail closed.
pub struct Limits<C: Clock = TokioClock> {
    top: Option<Budgets<C>>,
    servers: HashMap<String, Budgets<C>>,
    clock: C,
    start: C::Instant,
    max_keys: usize,
    /// Nanoseconds since `start` of the last sweep.
    last_sweep: AtomicU64,
    /// Nanoseconds since `start` of the last warning that a scope is full, plus one; 0: never.
    last_warning: AtomicU64,
    refused_full: AtomicU64,
}

impl Limits<TokioClock> {
    /// The limits of a config: the top `rateLimit` (if any) and each server's.
    pub fn new(top: Option<Rate>, servers: impl IntoIterator<Item = (String, Rate)>) -> Self {
        Self::with_clock(top, servers, TokioClock::default(), MAX_KEYS)
    }
}

impl<C: Clock + Clone> Limits<C> {
    /// [`Limits::new`] on `clock`, with at most `max_keys` identities per scope.
    pub fn with_clock(
        top: Option<Rate>,
        servers: impl IntoIterator<Item = (String, Rate)>,
        clock: C,
        max_keys: usize,
    ) -> Self {
        Self {
            top: top.map(|rate| Budgets::new(rate, clock.clone())),
            servers: servers
                .into_iter()
                .map(|(server, rate)| (server, Budgets::new(rate, clock.clone())))
                .collect(),
            start: clock.now(),
            clock,
            max_keys: max_keys.max(1),
            last_sweep: AtomicU64::new(0),
            last_warning: AtomicU64::new(0),
            refused_full: AtomicU64::new(0),
        }
    }
}

impl<C: Clock> Limits<C> {
    /// Spend one request of `key`'s budget in `scope`; a scope with no `rateLimit` always
    /// allows. A refusal says how long until the next request would be allowed.
    pub fn check(&self, key: &str, scope: Scope<'_>) -> Result<(), RetryAfter> {
        let Some(budgets) = self.budgets(scope) else {
            return Ok(());
        };
        let now = self.clock.now();
        self.sweep_if_due(now, SWEEP_EVERY);
        if budgets.limiter.len() >= self.max_keys && !budgets.holds(key) {
            self.sweep_if_due(now, FULL_SWEEP_GAP);
            if budgets.limiter.len() >= self.max_keys {
                return Err(self.full(scope, budgets, now));
            }
        }
        budgets
            .limiter
            .check_key(&key.to_string())
            .map_err(|not_until| RetryAfter(not_until.wait_time_from(now)))
    }

    /// Whether `scope` has a `rateLimit`.
    pub fn is_limited(&self, scope: Scope<'_>) -> bool {
        self.budgets(scope).is_some()
    }

    /// Identities whose budget `scope` holds now.
    pub fn tracked(&self, scope: Scope<'_>) -> usize {
        self.budgets(scope).map_or(0, |b| b.limiter.len())
    }

    /// New identities refused because their scope was full.
    pub fn refused_full(&self) -> u64 {
        self.refused_full.load(Ordering::Relaxed)
    }

    /// Forget every budget that is full again (indistinguishable from a fresh one). The checks
    /// do it themselves at most every 10 s; a host may also call it from a timer.
    pub fn sweep(&self) {
        for budgets in self.top.iter().chain(self.servers.values()) {
            budgets.limiter.retain_recent();
            budgets.limiter.shrink_to_fit();
        }
    }

    fn budgets(&self, scope: Scope<'_>) -> Option<&Budgets<C>> {
        match scope {
            Scope::Top => self.top.as_ref(),
            Scope::Server(server) => self.servers.get(server),
        }
    }

    fn since_start(&self, now: C::Instant) -> u64 {
        now.duration_since(self.start).as_u64()
    }

    /// Sweep when the last sweep is at least `gap` old (one caller does it).
    fn sweep_if_due(&self, now: C::Instant, gap: Duration) {
        let at = self.since_start(now);
        let last = self.last_sweep.load(Ordering::Relaxed);
        if at.saturating_sub(last) < nanos(gap) {
            return;
        }
        if self
            .last_sweep
            .compare_exchange(last, at, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            self.sweep();
        }
    }

    /// A new identity in a full scope: refused until some budget may be forgotten.
    fn full(&self, scope: Scope<'_>, budgets: &Budgets<C>, now: C::Instant) -> RetryAfter {
        let refused = self.refused_full.fetch_add(1, Ordering::Relaxed) + 1;
        let at = self.since_start(now).saturating_add(1);
        let last = self.last_warning.load(Ordering::Relaxed);
        let due = last == 0 || at.saturating_sub(last) >= nanos(WARN_EVERY);
        if due
            && self
                .last_warning
                .compare_exchange(last, at, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            tracing::warn!(
                scope = ?scope,
                max_keys = self.max_keys,
                refused,
                "rate limits: this scope already tracks its most identities, all recently active; a new identity is refused until one is idle"
            );
        }
        RetryAfter(budgets.rate.forgotten_after().max(FULL_SWEEP_GAP))
    }
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use governor::clock::FakeRelativeClock;

    const MS: Duration = Duration::from_millis(1);

    fn rate(per_second: f64, burst: u32) -> Rate {
        Rate::new(per_second, burst).expect("a valid rate")
    }

    fn limits(
        top: Option<Rate>,
        servers: &[(&str, Rate)],
    ) -> (Limits<FakeRelativeClock>, FakeRelativeClock) {
        let clock = FakeRelativeClock::default();
        let servers = servers.iter().map(|(s, r)| (s.to_string(), *r));
        (
            Limits::with_clock(top, servers, clock.clone(), MAX_KEYS),
            clock,
        )
    }

    #[test]
    fn a_burst_is_allowed_at_once_and_the_next_waits_one_period() {
        // 2 requests a second, 3 at once: the 4th waits 500 ms, then one more is allowed.
        let (limits, clock) = limits(Some(rate(2.0, 3)), &[]);
        for _ in 0..3 {
            assert_eq!(limits.check("alice", Scope::Top), Ok(()));
        }
        assert_eq!(
            limits.check("alice", Scope::Top),
            Err(RetryAfter(Duration::from_millis(500)))
        );
        clock.advance(499 * MS);
        assert_eq!(limits.check("alice", Scope::Top), Err(RetryAfter(MS)));
        clock.advance(MS);
        assert_eq!(limits.check("alice", Scope::Top), Ok(()));
        assert_eq!(
            limits.check("alice", Scope::Top),
            Err(RetryAfter(Duration::from_millis(500)))
        );
        // After a full refill (3 periods), the whole burst again.
        clock.advance(1500 * MS);
        for _ in 0..3 {
            assert_eq!(limits.check("alice", Scope::Top), Ok(()));
        }
        assert!(limits.check("alice", Scope::Top).is_err());
    }

    #[test]
    fn identities_do_not_share_a_budget() {
        let (limits, _clock) = limits(Some(rate(1.0, 1)), &[]);
        let (alice, bob) = ("11:https://idpalice", "11:https://idpbob");
        assert_eq!(limits.check(alice, Scope::Top), Ok(()));
        assert_eq!(
            limits.check(alice, Scope::Top),
            Err(RetryAfter(Duration::from_secs(1)))
        );
        assert_eq!(limits.check(bob, Scope::Top), Ok(()));
        assert_eq!(limits.check(ANONYMOUS, Scope::Top), Ok(()));
        assert_eq!(limits.tracked(Scope::Top), 3);
    }

    #[test]
    fn server_and_top_budgets_are_separate() {
        let (limits, _clock) = limits(Some(rate(1.0, 2)), &[("fs", rate(1.0, 1))]);
        assert_eq!(limits.check("alice", Scope::Server("fs")), Ok(()));
        assert!(limits.check("alice", Scope::Server("fs")).is_err());
        // The top budget is untouched by the server's, and the other way round.
        assert_eq!(limits.check("alice", Scope::Top), Ok(()));
        assert_eq!(limits.check("alice", Scope::Top), Ok(()));
        assert!(limits.check("alice", Scope::Top).is_err());
        // A server with no rateLimit, and no top limit, always allow.
        assert!(limits.is_limited(Scope::Server("fs")));
        assert!(!limits.is_limited(Scope::Server("web")));
        for _ in 0..10 {
            assert_eq!(limits.check("alice", Scope::Server("web")), Ok(()));
        }
        let (unlimited, _clock) = self::limits(None, &[]);
        assert_eq!(unlimited.check("alice", Scope::Top), Ok(()));
        assert_eq!(unlimited.tracked(Scope::Top), 0);
    }

    #[test]
    fn idle_identities_are_forgotten() {
        // 1 a second, burst 2: a budget is fresh again 3 s after its last use.
        let (limits, clock) = limits(Some(rate(1.0, 2)), &[]);
        for key in ["a", "b", "c"] {
            assert_eq!(limits.check(key, Scope::Top), Ok(()));
        }
        assert_eq!(limits.tracked(Scope::Top), 3);
        clock.advance(Duration::from_secs(5));
        assert_eq!(limits.check("a", Scope::Top), Ok(()));
        // No sweep before 10 s.
        assert_eq!(limits.tracked(Scope::Top), 3);
        clock.advance(Duration::from_secs(5));
        assert_eq!(limits.check("d", Scope::Top), Ok(()));
        // "b" and "c" are gone; "a" (used 5 s ago, refilled) too; "d" just came.
        assert_eq!(limits.tracked(Scope::Top), 1);
        // A forgotten identity starts with a full burst, as it would have anyway.
        assert_eq!(limits.check("b", Scope::Top), Ok(()));
        assert_eq!(limits.check("b", Scope::Top), Ok(()));
        assert!(limits.check("b", Scope::Top).is_err());
    }

    #[test]
    fn a_full_scope_refuses_new_identities_until_one_is_idle() {
        let clock = FakeRelativeClock::default();
        let limits = Limits::with_clock(Some(rate(1.0, 1)), [], clock.clone(), 2);
        assert_eq!(limits.check("a", Scope::Top), Ok(()));
        assert_eq!(limits.check("b", Scope::Top), Ok(()));
        // Known identities still get their budget; a new one is refused.
        clock.advance(Duration::from_secs(1));
        assert_eq!(limits.check("a", Scope::Top), Ok(()));
        assert_eq!(
            limits.check("c", Scope::Top),
            Err(RetryAfter(Duration::from_secs(2)))
        );
        assert_eq!(limits.refused_full(), 1);
        assert_eq!(limits.tracked(Scope::Top), 2);
        // Once "b" has been idle long enough, the sweep makes room.
        clock.advance(Duration::from_secs(1));
        assert_eq!(limits.check("c", Scope::Top), Ok(()));
        assert_eq!(limits.tracked(Scope::Top), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn the_default_clock_is_tokios() {
        let limits = Limits::new(Some(rate(10.0, 1)), []);
        assert_eq!(limits.check("a", Scope::Top), Ok(()));
        assert_eq!(
            limits.check("a", Scope::Top),
            Err(RetryAfter(Duration::from_millis(100)))
        );
        tokio::time::advance(Duration::from_millis(100)).await;
        assert_eq!(limits.check("a", Scope::Top), Ok(()));
    }

    #[test]
    fn retry_after_is_whole_seconds_rounded_up_at_least_one() {
        let cases = [
            (Duration::ZERO, "1"),
            (MS, "1"),
            (Duration::from_millis(1000), "1"),
            (Duration::from_millis(1001), "2"),
            (Duration::from_secs(30), "30"),
        ];
        for (wait, header) in cases {
            assert_eq!(RetryAfter(wait).header_value(), header, "{wait:?}");
        }
        assert_eq!(
            RetryAfter(Duration::from_millis(1500)).error_text(),
            "rate limit: the request did not run; retry after 2 s"
        );
    }

    #[test]
    fn invalid_rates_say_which_member_is_wrong() {
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(
                matches!(Rate::new(bad, 1), Err(RateError::RequestsPerSecond(_))),
                "{bad}"
            );
        }
        assert_eq!(Rate::new(1.0, 0), Err(RateError::Burst));
        let slow = Rate::new(1e-9, 1).expect_err("a burst that takes 31 years to refill");
        assert!(slow.to_string().contains("more than a year"), "{slow}");
        assert!(Rate::new(0.5, 10).is_ok());
        // The config's bounds (up to 2147483647 each) never panic.
        assert!(Rate::new(2_147_483_647.0, 2_147_483_647).is_ok());
        assert!(Rate::new(1.0, 2_147_483_647).is_err());
        assert!(
            Rate::new(1.0, 0)
                .expect_err("burst 0")
                .to_string()
                .starts_with("rateLimit.burst")
        );
    }
}
