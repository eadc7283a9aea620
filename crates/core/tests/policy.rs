//! The reconnect policy and outage budget (SPEC §2) and the health defaults (SPEC §6), one test per
//! sentence where it can be. Pure values: no clock, no runtime, jitter draws handed in.

use std::time::Duration;

use mcp_supervisor_core::policy::{Budget, Decision, HealthPolicy, ReconnectPolicy};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn policy(initial: u64, max: u64, attempts: u32) -> ReconnectPolicy {
    ReconnectPolicy {
        enabled: true,
        initial_delay: ms(initial),
        max_delay: ms(max),
        max_attempts: attempts,
        jitter: 0.0,
    }
}

/// Feeds failures until the budget gives up; the delays of the retries on the way.
fn retries_until_give_up(budget: &mut Budget, first: Option<Duration>) -> Vec<Duration> {
    let mut delays = Vec::new();
    let mut lost = first;
    loop {
        match budget.on_failure(lost.take(), 0.5) {
            Decision::Retry { delay, .. } => delays.push(delay),
            Decision::GiveUp { .. } => return delays,
        }
        assert!(delays.len() < 10_000, "never gave up");
    }
}

// === Defaults and the schedule ===

#[test]
fn defaults_are_enabled_500ms_30000ms_10_attempts_no_jitter() {
    assert_eq!(
        ReconnectPolicy::default(),
        ReconnectPolicy {
            enabled: true,
            initial_delay: ms(500),
            max_delay: ms(30_000),
            max_attempts: 10,
            jitter: 0.0,
        }
    );
    assert_eq!(
        HealthPolicy::default(),
        HealthPolicy {
            interval: Some(ms(30_000)),
            timeout: ms(5_000),
            failures: 3,
        }
    );
}

#[test]
fn backoff_doubles_from_initial_up_to_max() {
    let p = ReconnectPolicy::default();
    let delays: Vec<_> = (1..=10).map(|n| p.base_delay(n).as_millis()).collect();
    assert_eq!(
        delays,
        [
            500, 1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000, 30000
        ]
    );
    assert_eq!(p.base_delay(0), ms(500), "attempt 0 counts as attempt 1");
    let p = policy(300, 1000, 10);
    let delays: Vec<_> = (1..=5).map(|n| p.base_delay(n).as_millis()).collect();
    assert_eq!(delays, [300, 600, 1000, 1000, 1000]);
}

#[test]
fn with_defaults_an_outage_retries_ten_times_over_151_5_seconds_then_gives_up() {
    let mut budget = Budget::new(ReconnectPolicy::default());
    let mut decisions = Vec::new();
    for _ in 0..11 {
        decisions.push(budget.on_failure(None, 0.7));
    }
    let expected_delays = [
        500, 1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000, 30000,
    ];
    for (i, delay) in expected_delays.iter().enumerate() {
        assert_eq!(
            decisions[i],
            Decision::Retry {
                attempt: i as u32 + 1,
                max_attempts: 10,
                delay: ms(*delay)
            }
        );
    }
    assert_eq!(decisions[10], Decision::GiveUp { failures: 11 });
    let total: Duration = decisions
        .iter()
        .filter_map(|d| match d {
            Decision::Retry { delay, .. } => Some(*delay),
            Decision::GiveUp { .. } => None,
        })
        .sum();
    assert_eq!(total, ms(151_500));
}

// === The outage budget ===

#[test]
fn exactly_max_attempts_reconnect_attempts_follow_a_loss() {
    for attempts in [1, 2, 3, 10, 57] {
        let mut budget = Budget::new(policy(10, 1000, attempts));
        let delays = retries_until_give_up(&mut budget, Some(ms(1)));
        assert_eq!(delays.len(), attempts as usize);
        assert_eq!(budget.failures(), attempts + 1);
    }
}

#[test]
fn a_failed_first_attempt_counts_as_failure_one() {
    let mut budget = Budget::new(policy(10, 1000, 3));
    assert_eq!(budget.failures(), 0);
    assert_eq!(
        budget.on_failure(None, 0.0),
        Decision::Retry {
            attempt: 1,
            max_attempts: 3,
            delay: ms(10)
        }
    );
    assert_eq!(budget.failures(), 1);
    assert_eq!(retries_until_give_up(&mut budget, None).len(), 2);
}

#[test]
fn the_count_resets_when_a_generation_stayed_up_the_stability_window() {
    let p = ReconnectPolicy::default();
    assert_eq!(p.stability_window(), p.max_delay);
    let mut budget = Budget::new(p);
    for _ in 0..5 {
        budget.on_failure(None, 0.0);
    }
    assert_eq!(budget.failures(), 5);
    // Exactly the window: a fresh count, so the next retry is attempt 1 again, and at once
    // (a stable server restarts without a delay).
    assert_eq!(
        budget.on_failure(Some(ms(30_000)), 0.0),
        Decision::Retry {
            attempt: 1,
            max_attempts: 10,
            delay: ms(0)
        }
    );
    assert_eq!(retries_until_give_up(&mut budget, None).len(), 9);
}

#[test]
fn a_stable_server_restarts_at_once_then_backs_off_and_a_crash_loop_never_twice() {
    let mut budget = Budget::new(ReconnectPolicy::default());
    let retry = |attempt, delay| Decision::Retry {
        attempt,
        max_attempts: 10,
        delay: ms(delay),
    };
    // Up an hour, then killed: attempt 1 at once.
    assert_eq!(budget.on_failure(Some(ms(3_600_000)), 1.0), retry(1, 0));
    // It fails: the schedule from attempt 2 on.
    assert_eq!(budget.on_failure(None, 1.0), retry(2, 1_000));
    assert_eq!(budget.on_failure(None, 1.0), retry(3, 2_000));
    // Its next generation connects but dies within the window: no second immediate restart.
    assert_eq!(budget.on_failure(Some(ms(2_000)), 1.0), retry(4, 4_000));
    // Stable again: at once again, with a fresh count.
    assert_eq!(budget.on_failure(Some(ms(30_000)), 1.0), retry(1, 0));
    // A failed first attempt (never established) is not a stable loss.
    let mut fresh = Budget::new(ReconnectPolicy::default());
    assert_eq!(fresh.on_failure(None, 1.0), retry(1, 500));
}

#[test]
fn an_uptime_just_short_of_the_window_does_not_reset_the_count() {
    let mut budget = Budget::new(ReconnectPolicy::default());
    for _ in 0..5 {
        budget.on_failure(None, 0.0);
    }
    assert_eq!(
        budget.on_failure(Some(ms(29_999)), 0.0),
        Decision::Retry {
            attempt: 6,
            max_attempts: 10,
            delay: ms(16_000)
        }
    );
}

#[test]
fn a_crash_loop_whose_connects_briefly_succeed_still_exhausts_its_budget() {
    let mut budget = Budget::new(ReconnectPolicy::default());
    let mut retries = 0;
    // Every attempt connects, stays up 2 s, and dies: each loss is one more failure.
    loop {
        match budget.on_failure(Some(ms(2_000)), 0.0) {
            Decision::Retry { .. } => retries += 1,
            Decision::GiveUp { failures } => {
                assert_eq!(failures, 11);
                break;
            }
        }
    }
    assert_eq!(retries, 10);
}

#[test]
fn a_connect_alone_does_not_reset_the_count_only_a_judged_loss_does() {
    let mut budget = Budget::new(policy(10, 1000, 3));
    budget.on_failure(None, 0.0);
    budget.on_failure(None, 0.0);
    // A successful connect is not reported to the budget at all; a later short-lived loss counts on.
    assert_eq!(
        budget.on_failure(Some(ms(999)), 0.0),
        Decision::Retry {
            attempt: 3,
            max_attempts: 3,
            delay: ms(40)
        }
    );
    assert_eq!(
        budget.on_failure(None, 0.0),
        Decision::GiveUp { failures: 4 }
    );
}

#[test]
fn a_fresh_budget_is_a_new_value() {
    let p = policy(10, 1000, 2);
    let mut budget = Budget::new(p);
    retries_until_give_up(&mut budget, None);
    assert_eq!(Budget::new(p).failures(), 0);
    assert_eq!(budget.policy(), &p);
}

#[test]
fn a_spent_budget_keeps_giving_up() {
    let mut budget = Budget::new(policy(10, 1000, 1));
    budget.on_failure(None, 0.0);
    for n in 2..6 {
        assert_eq!(
            budget.on_failure(None, 0.0),
            Decision::GiveUp { failures: n }
        );
    }
    // A stable generation after giving up is not possible in the supervisor, but the rule holds.
    assert!(matches!(
        budget.on_failure(Some(ms(1000)), 0.0),
        Decision::Retry { attempt: 1, .. }
    ));
}

// === Jitter ===

#[test]
fn jitter_draws_within_d_times_1_minus_j_and_d() {
    for j in [0.0, 0.01, 0.1, 0.25, 0.5, 0.9, 1.0] {
        let p = ReconnectPolicy {
            jitter: j,
            ..ReconnectPolicy::default()
        };
        for attempt in 1..=12 {
            let d = p.base_delay(attempt);
            let low = d.mul_f64(1.0 - j);
            let mut previous = Duration::ZERO;
            for i in 0..1000 {
                let u = f64::from(i) / 1000.0;
                let delay = p.delay(attempt, u);
                assert!(
                    delay <= d,
                    "j={j} u={u} attempt={attempt}: {delay:?} > {d:?}"
                );
                assert!(
                    delay + Duration::from_nanos(1) >= low,
                    "j={j} u={u} attempt={attempt}: {delay:?} < {low:?}"
                );
                assert!(
                    delay >= previous,
                    "a larger draw never gives a shorter delay"
                );
                previous = delay;
            }
        }
    }
}

#[test]
fn jitter_zero_gives_exactly_the_base_delay() {
    let p = ReconnectPolicy::default();
    for attempt in 1..=20 {
        for u in [0.0, 0.3, 0.999_999] {
            assert_eq!(p.delay(attempt, u), p.base_delay(attempt));
        }
    }
}

#[test]
fn jitter_formula_at_known_points() {
    let p = ReconnectPolicy {
        jitter: 0.5,
        ..policy(1000, 1000, 1)
    };
    assert_eq!(p.delay(1, 0.0), ms(500));
    assert_eq!(p.delay(1, 0.5), ms(750));
    assert_eq!(p.delay(1, 1.0), ms(1000));
    let p = ReconnectPolicy {
        jitter: 1.0,
        ..policy(1000, 1000, 1)
    };
    assert_eq!(p.delay(1, 0.0), Duration::ZERO);
}

#[test]
fn out_of_range_jitter_and_draws_are_clamped_not_panicked_on() {
    for j in [-1.0, 2.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        let p = ReconnectPolicy {
            jitter: j,
            ..policy(1000, 1000, 1)
        };
        for u in [-1.0, 0.5, 1.0, 7.0, f64::NAN, f64::INFINITY] {
            assert!(p.delay(1, u) <= ms(1000));
        }
    }
}

// === No overflow ===

#[test]
fn huge_attempt_numbers_do_not_overflow() {
    let p = ReconnectPolicy::default();
    assert_eq!(p.base_delay(u32::MAX), ms(30_000));
    assert_eq!(p.delay(u32::MAX, 0.5), ms(30_000));
    let max = 2_147_483_647;
    let p = ReconnectPolicy {
        jitter: 1.0,
        ..policy(max, max, u32::MAX)
    };
    assert_eq!(p.base_delay(u32::MAX), ms(max));
    assert!(p.delay(u32::MAX, 0.999) <= ms(max));
    let p = policy(1, max, u32::MAX);
    assert_eq!(p.base_delay(31), ms(1 << 30));
    assert_eq!(p.base_delay(32), ms(max));
    assert_eq!(p.base_delay(u32::MAX), ms(max));
}

#[test]
fn extreme_durations_saturate() {
    let p = ReconnectPolicy {
        enabled: true,
        initial_delay: Duration::MAX,
        max_delay: Duration::MAX,
        max_attempts: u32::MAX,
        jitter: 0.5,
    };
    assert_eq!(p.base_delay(u32::MAX), Duration::MAX);
    assert!(p.delay(u32::MAX, 0.0) <= Duration::MAX);
    let p = ReconnectPolicy {
        initial_delay: Duration::from_nanos(1),
        ..p
    };
    assert_eq!(p.base_delay(u32::MAX), Duration::MAX);
    let p = ReconnectPolicy {
        initial_delay: Duration::ZERO,
        ..p
    };
    assert_eq!(p.base_delay(u32::MAX), Duration::ZERO);
}

#[test]
fn a_budget_of_the_largest_size_counts_without_overflow() {
    let mut budget = Budget::new(policy(2_147_483_647, 2_147_483_647, 2_147_483_647));
    for n in 1..=1000 {
        assert_eq!(
            budget.on_failure(None, 0.0),
            Decision::Retry {
                attempt: n,
                max_attempts: 2_147_483_647,
                delay: ms(2_147_483_647)
            }
        );
    }
}

#[test]
fn zero_max_attempts_gives_up_at_once() {
    let mut budget = Budget::new(policy(10, 10, 0));
    assert_eq!(
        budget.on_failure(None, 0.0),
        Decision::GiveUp { failures: 1 }
    );
}
