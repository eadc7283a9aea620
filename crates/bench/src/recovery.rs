//! `recovery`: how long after a `kill -9` of a supervised stdio server a call through the hub
//! succeeds again, and how much of that is not the configured backoff or the server's own
//! cold start.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use mcp_supervisor::{CallArgs, Hub, ServerState};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::util::{self, BareServer, STATS_HEADER, Stats, stats_row};

const SERVER: &str = "fault";
const TOOL: &str = "fault__echo";
/// The deadline of one echo call while waiting for the recovery.
const CALL_TIMEOUT: Duration = Duration::from_secs(2);
/// The bound of one recovery.
const RECOVERY_LIMIT: Duration = Duration::from_secs(30);

/// One kill.
struct Round {
    total: Duration,
    calls: u32,
    max_attempt: u32,
    /// The errors of the calls that failed before the first success.
    errors: Vec<String>,
}

/// `stable_ms`: `Some(w)` sets `maxDelayMs` (the stability window) to `w` and lets each
/// generation stay up past it before its kill, so each kill is the loss of a stable server,
/// which restarts at once (SPEC §2); `None`: `maxDelayMs` 30000, each kill soon after the
/// generation is ready, after an explicit reconnect (the first attempt waits `initialDelayMs`).
pub async fn run(
    fault: &Path,
    kills: u32,
    initial_delay_ms: u64,
    stable_ms: Option<u64>,
    cold_starts: u32,
    timeline_svg: Option<&Path>,
) -> Result<Value> {
    let max_delay_ms = stable_ms.unwrap_or(30_000).max(initial_delay_ms);
    // 1. The upstream's own cold start: spawn + initialize + tools/list with a bare rmcp client.
    let mut cold = Vec::new();
    for _ in 0..cold_starts {
        let start = Instant::now();
        let server = BareServer::start(fault, &[]).await?;
        let listed =
            tokio::time::timeout(Duration::from_secs(10), server.client.list_all_tools()).await;
        let elapsed = start.elapsed();
        server.shutdown().await;
        match listed {
            Ok(Ok(tools)) if !tools.is_empty() => cold.push(elapsed),
            Ok(Ok(_)) => bail!("the bare fault server listed no tools"),
            Ok(Err(e)) => bail!("tools/list on the bare fault server failed: {e}"),
            Err(_) => bail!("tools/list on the bare fault server took over 10 s"),
        }
    }
    let cold = Stats::of(&cold)?;

    // 2. kill -9 through a hub, N times.
    let config = util::hub_config(json!({
        SERVER: {
            "command": fault,
            "reconnect": { "initialDelayMs": initial_delay_ms, "maxDelayMs": max_delay_ms, "maxAttempts": 10 }
        }
    }))?;
    let hub = Hub::start(config);
    let rounds = util::with_hub(hub, async |hub: &Hub| -> Result<Vec<Round>> {
        let mut rounds = Vec::new();
        let mut ready = util::ready_after(hub, SERVER, 0, Duration::from_secs(30)).await?;
        let mut ready_at = Instant::now();
        let message = "recovered";
        let arguments = Some(util::object(json!({ "message": message }))?);
        for round in 0..kills {
            if let Some(window) = stable_ms {
                // Up past the stability window: its loss is a stable server's.
                let up = Duration::from_millis(window + 100);
                tokio::time::sleep(up.saturating_sub(ready_at.elapsed())).await;
            } else if round > 0 {
                // Each kill should be the first failure of an outage, as it is for a server that
                // stayed up for the stability window (= maxDelayMs, 30 s) before it died. An
                // explicit reconnect gives the same fresh budget without waiting 30 s.
                hub.reconnect(SERVER)?;
                ready = util::ready_after(hub, SERVER, ready.generation, Duration::from_secs(30))
                    .await?;
            }
            let pid = ready.pid().context("a ready stdio server has a pid")?;
            let generation = ready.generation;

            // Note the highest attempt number of this outage (1 = the first backoff step).
            let mut watch = hub.watch(SERVER)?;
            let attempts = tokio::spawn(async move {
                let mut max_attempt = 0;
                // What the supervisor showed, and when: the recovery timeline.
                let mut seen: Vec<(Instant, String)> = Vec::new();
                let mut last = String::new();
                loop {
                    let (state, generation_now, attempt, closing, attempting, backoff) = {
                        let s = watch.borrow_and_update();
                        (
                            s.state(),
                            s.generation,
                            s.attempt,
                            s.closing(),
                            s.attempting(),
                            s.next_attempt_at(),
                        )
                    };
                    max_attempt = max_attempt.max(attempt);
                    let label = if state == ServerState::Ready && generation_now > generation {
                        format!("ready (generation {generation_now})")
                    } else if closing {
                        "loss seen, closing the process group".to_string()
                    } else if let Some(at) = backoff {
                        let ms = at
                            .saturating_duration_since(tokio::time::Instant::now())
                            .as_millis();
                        format!("closed; backoff {ms} ms")
                    } else if attempting && generation_now > generation {
                        format!("spawn generation {generation_now}")
                    } else {
                        String::new()
                    };
                    if !label.is_empty() && label != last {
                        seen.push((Instant::now(), label.clone()));
                        last = label;
                    }
                    if state == ServerState::Ready && generation_now > generation {
                        break;
                    }
                    if watch.changed().await.is_err() {
                        break;
                    }
                }
                (max_attempt, seen)
            });

            util::kill9(pid)?;
            let start = Instant::now();
            let mut calls = 0;
            let mut errors = Vec::new();
            loop {
                calls += 1;
                let args = CallArgs {
                    arguments: arguments.clone(),
                    timeout: Some(CALL_TIMEOUT),
                    ..Default::default()
                };
                match hub.call(TOOL, args).await {
                    Ok(result) => {
                        util::check_echo(&result, message)?;
                        break;
                    }
                    Err(e) if start.elapsed() < RECOVERY_LIMIT => {
                        errors.push(e.to_string());
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                    Err(e) => bail!(
                        "kill {}: no successful call within {RECOVERY_LIMIT:?}; last error: {e}",
                        round + 1
                    ),
                }
            }
            let total = start.elapsed();
            ready = util::ready_after(hub, SERVER, generation, Duration::from_secs(5)).await?;
            ready_at = Instant::now();
            if ready.pid() == Some(pid) {
                bail!(
                    "kill {}: the call was answered by the killed process {pid}",
                    round + 1
                );
            }
            let (max_attempt, seen) =
                match tokio::time::timeout(Duration::from_secs(5), attempts).await {
                    Ok(Ok(n)) => n,
                    _ => bail!("kill {}: the state watcher did not finish", round + 1),
                };
            if round == 0
                && let Some(path) = timeline_svg
            {
                let ms = |t: Instant| t.saturating_duration_since(start).as_secs_f64() * 1000.0;
                let mut events: Vec<(f64, String)> = vec![(0.0, "kill -9".to_string())];
                events.extend(seen.iter().map(|(t, label)| (ms(*t), label.clone())));
                events.push((
                    total.as_secs_f64() * 1000.0,
                    "first successful call".to_string(),
                ));
                crate::plot::recovery_timeline(path, &events)?;
            }
            rounds.push(Round {
                total,
                calls,
                max_attempt,
                errors,
            });
        }
        Ok(rounds)
    })
    .await?;

    // A stable server's first attempt has no delay.
    let delay_ms = if stable_ms.is_some() {
        0.0
    } else {
        initial_delay_ms as f64
    };
    let totals = Stats::of(&rounds.iter().map(|r| r.total).collect::<Vec<_>>())?;
    let remainder = Stats::of_ms(
        rounds
            .iter()
            .map(|r| r.total.as_secs_f64() * 1000.0 - delay_ms - cold.median)
            .collect(),
    )?;
    let calls: Vec<u32> = rounds.iter().map(|r| r.calls).collect();
    let max_attempt = rounds.iter().map(|r| r.max_attempt).max().unwrap_or(0);
    let total_calls: u32 = calls.iter().sum();

    println!(
        "recovery: {kills} x kill -9 of a stdio fault server behind a hub; initialDelayMs {initial_delay_ms}, maxDelayMs {max_delay_ms}{}",
        if stable_ms.is_some() {
            "; each generation up past the stability window before its kill (a stable server: restarted at once)"
        } else {
            ""
        }
    );
    util::print_table(
        "times (ms)",
        &STATS_HEADER,
        &[
            stats_row("bare cold start (spawn+initialize+tools/list)", &cold),
            stats_row("kill -9 -> first successful call", &totals),
            stats_row(
                "remainder = total - first delay - median cold start",
                &remainder,
            ),
        ],
    );
    println!(
        "\n  calls made while recovering: {total_calls} over {kills} kills (max {} in one); highest backoff attempt seen: {max_attempt}",
        calls.iter().max().copied().unwrap_or(0)
    );

    let failed: Vec<&String> = rounds.iter().flat_map(|r| r.errors.iter()).collect();
    let mut examples: Vec<&String> = Vec::new();
    for error in &failed {
        if examples.len() < 3 && !examples.contains(error) {
            examples.push(error);
        }
    }
    if !failed.is_empty() {
        println!(
            "  failed calls before the first success: {} (the loop calls again at once); examples:",
            failed.len()
        );
        for error in &examples {
            println!("    {error}");
        }
    }

    Ok(json!({
        "bench": "recovery",
        "kills": kills,
        "initial_delay_ms": initial_delay_ms,
        "max_delay_ms": max_delay_ms,
        "stable": stable_ms.is_some(),
        "cold_start_ms": cold.json(),
        "total_ms": totals.json(),
        "remainder_ms": remainder.json(),
        "calls_while_recovering": total_calls,
        "failed_calls_while_recovering": failed.len(),
        "max_backoff_attempt": max_attempt,
    }))
}
