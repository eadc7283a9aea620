//! The reconnect policy (SPEC §2), its backoff schedule and outage budget, and the health policy
//! (SPEC §6) as plain `Copy` values. It never sleeps, reads a clock or draws a random number: time
//! spans and the jitter draw are handed in by the caller.

use std::time::Duration;

// === impl ReconnectPolicy ===

/// How one server reconnects after a failure: the backoff schedule and the size of the outage
/// budget.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ReconnectPolicy {
    /// `false`: a lost connection is not retried (the server goes `down`).
    pub enabled: bool,
    /// The delay before the first attempt of an outage.
    pub initial_delay: Duration,
    /// The cap of the doubling schedule, and the stability window.
    pub max_delay: Duration,
    /// How many reconnect attempts follow a loss before the supervisor gives up.
    pub max_attempts: u32,
    /// In [0, 1]: how much of each delay may be drawn away at random.
    pub jitter: f64,
}

impl Default for ReconnectPolicy {
    fn default() -> Self {
        Self {
            enabled: true,
            initial_delay: Duration::from_millis(500),
            max_delay: Duration::from_millis(30_000),
            max_attempts: 10,
            jitter: 0.0,
        }
    }
}

impl ReconnectPolicy {
    /// Backoff before attempt `attempt` (1-based) of an outage: `min(max, initial · 2^(attempt−1))`,
    /// without jitter. Attempt 0 is treated as attempt 1. Saturating: never overflows.
    pub fn base_delay(&self, attempt: u32) -> Duration {
        let mut delay = self.initial_delay;
        // Doubling reaches any cap within ~100 steps, so the loop ends early even for u32::MAX.
        for _ in 1..attempt {
            if delay >= self.max_delay || delay.is_zero() {
                break;
            }
            delay = delay.saturating_mul(2);
        }
        delay.min(self.max_delay)
    }

    /// The backoff with jitter `j` applied, given a uniform draw `u` in [0, 1): a value in
    /// `[d·(1−j), d]`, namely `d − d·j·(1−u)`. With `j = 0` it is exactly `d`. Out-of-range or
    /// non-finite `j` and `u` are clamped (NaN counts as 0), so this never panics.
    pub fn delay(&self, attempt: u32, u: f64) -> Duration {
        let d = self.base_delay(attempt);
        let j = clamp_unit(self.jitter);
        if j == 0.0 {
            return d;
        }
        let u = clamp_unit(u);
        let d_ns = d.as_nanos();
        // Float-to-int `as` saturates, and the span is capped by `d_ns`, so this cannot underflow.
        let span = ((d_ns as f64) * j * (1.0 - u)).floor() as u128;
        from_nanos(d_ns - span.min(d_ns))
    }

    /// How long an established generation must stay up, judged when it is lost, for the outage
    /// budget to start afresh. Equal to `max_delay`.
    pub fn stability_window(&self) -> Duration {
        self.max_delay
    }
}

fn clamp_unit(x: f64) -> f64 {
    if x.is_nan() { 0.0 } else { x.clamp(0.0, 1.0) }
}

fn from_nanos(ns: u128) -> Duration {
    const NANOS_PER_SEC: u128 = 1_000_000_000;
    let secs = u64::try_from(ns / NANOS_PER_SEC).unwrap_or(u64::MAX);
    // The remainder is below 10^9, so it always fits.
    let nanos = u32::try_from(ns % NANOS_PER_SEC).unwrap_or(0);
    Duration::new(secs, nanos)
}

// === impl Budget ===

/// What the supervisor does after a failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Wait `delay`, then make attempt `attempt` of `max_attempts`.
    Retry {
        attempt: u32,
        max_attempts: u32,
        delay: Duration,
    },
    /// The budget is spent: withdraw the tools and wait for a reload or an explicit reconnect.
    GiveUp { failures: u32 },
}

/// The outage budget (SPEC §2). A fresh value is a fresh budget: "reset" is "make a new one".
///
/// Budgets beat a bare retry counter that a successful connect resets: a server whose connects
/// briefly succeed before it crashes again would otherwise be restarted forever. Here only a
/// generation that stayed up for the stability window earns a fresh count. `enabled` is not
/// consulted: whether to retry at all is the supervisor's decision.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Budget {
    policy: ReconnectPolicy,
    failures: u32,
}

impl Budget {
    pub fn new(policy: ReconnectPolicy) -> Self {
        Self {
            policy,
            failures: 0,
        }
    }

    pub fn policy(&self) -> &ReconnectPolicy {
        &self.policy
    }

    /// Failures counted in the current outage.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// Records one failure and decides what follows.
    ///
    /// `established_for` is `Some(uptime)` when an established generation was lost (an uptime of at
    /// least the stability window starts the count afresh first), `None` when a connect attempt
    /// failed. The failure is then counted; past `max_attempts` failures the budget gives up,
    /// otherwise attempt `failures` is due after `policy.delay(failures, u)`.
    ///
    /// A stable server restarts at once: after the loss of a generation that stayed up at least
    /// the stability window, attempt 1 is due now, with no delay; the attempts after it back off
    /// as the schedule says. A crash loop's generations are never stable, so it never gets two
    /// immediate restarts in a row.
    pub fn on_failure(&mut self, established_for: Option<Duration>, u: f64) -> Decision {
        let stable = established_for.is_some_and(|uptime| uptime >= self.policy.stability_window());
        if stable {
            self.failures = 0;
        }
        self.failures = self.failures.saturating_add(1);
        if self.failures > self.policy.max_attempts {
            Decision::GiveUp {
                failures: self.failures,
            }
        } else {
            Decision::Retry {
                attempt: self.failures,
                max_attempts: self.policy.max_attempts,
                delay: if stable {
                    Duration::ZERO
                } else {
                    self.policy.delay(self.failures, u)
                },
            }
        }
    }
}

// === impl HealthPolicy ===

/// How an idle connection is probed (SPEC §6).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HealthPolicy {
    /// Time between probes of an idle connection; `None` turns probing off (`intervalMs: 0`).
    pub interval: Option<Duration>,
    /// How long one probe may take.
    pub timeout: Duration,
    /// Misses in a row (timed-out calls and missed probes together) that end the generation.
    pub failures: u32,
}

impl Default for HealthPolicy {
    fn default() -> Self {
        Self {
            interval: Some(Duration::from_millis(30_000)),
            timeout: Duration::from_millis(5_000),
            failures: 3,
        }
    }
}
