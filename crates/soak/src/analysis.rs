//! Judging a run: the verdicts (a)–(h), per-window counts, totals, the RSS check, and the report.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Serialize;
use serde_json::{Value, json};

use crate::{
    CLIENT_MARGIN_MS, CallKind, CallRecord, ChaosEvent, EndState, Observed, Overlap, QUIET_MS,
    RssSample, TOOL_CALL_TIMEOUT_MS, Upstream, WINDOW_SECS,
};

/// How many offending items a verdict keeps as evidence.
const EVIDENCE: usize = 30;

/// One verdict.
#[derive(Clone, Debug, Serialize)]
pub struct Verdict {
    pub key: &'static str,
    pub title: &'static str,
    pub pass: bool,
    pub detail: String,
    #[serde(skip_serializing_if = "Value::is_null")]
    pub evidence: Value,
}

/// Counts of the calls that started in one window.
#[derive(Clone, Debug, Serialize)]
pub struct Window {
    pub t_s: u64,
    pub started: usize,
    /// Calls that ended in this window, per second.
    pub calls_per_sec: f64,
    pub ok: usize,
    pub errors: BTreeMap<String, usize>,
    pub chaos_actions: usize,
}

/// Latency percentiles in ms.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Latency {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

/// Figures of the whole run.
#[derive(Clone, Debug, Serialize)]
pub struct Totals {
    pub calls: usize,
    pub ok: usize,
    pub errors: BTreeMap<String, usize>,
    pub by_kind: BTreeMap<String, BTreeMap<String, usize>>,
    pub calls_per_sec: f64,
    pub ok_latency_ms: Latency,
    pub all_latency_ms: Latency,
    /// The load's calls by the kind of client that made them (`rmcp`, `plain`).
    pub by_client_kind: BTreeMap<String, ClientKindTotals>,
    pub chaos_actions: BTreeMap<String, usize>,
    pub chaos_calls: BTreeMap<String, usize>,
    pub downstream_reconnects: u32,
    pub downstream_connect_failures: u32,
    /// Calls of the plain clients answered as one JSON body: the proxy's pass-through.
    pub plain_json_answers: u64,
}

/// The calls of one kind of load client.
#[derive(Clone, Debug, Serialize)]
pub struct ClientKindTotals {
    pub calls: usize,
    pub ok: usize,
    pub ok_latency_ms: Latency,
}

/// The kind of client a load call came from: its name up to the index.
fn client_kind(call: &CallRecord) -> &str {
    call.client
        .rsplit_once('-')
        .map_or(call.client.as_str(), |(kind, _)| kind)
}

/// The calls of each kind of client.
fn by_client_kind(calls: &[CallRecord]) -> BTreeMap<String, ClientKindTotals> {
    let mut kinds: BTreeMap<String, Vec<&CallRecord>> = BTreeMap::new();
    for call in calls {
        kinds
            .entry(client_kind(call).to_owned())
            .or_default()
            .push(call);
    }
    kinds
        .into_iter()
        .map(|(kind, calls)| {
            let ok: Vec<f64> = calls
                .iter()
                .filter(|c| c.ok)
                .map(|c| c.duration_ms())
                .collect();
            let totals = ClientKindTotals {
                calls: calls.len(),
                ok: ok.len(),
                ok_latency_ms: latency(ok),
            };
            (kind, totals)
        })
        .collect()
}

/// The RSS comparison of verdict (f).
#[derive(Clone, Debug, Default, Serialize)]
pub struct RssCheck {
    pub baseline_mark_s: f64,
    pub baseline_t_s: f64,
    pub baseline_kib: u64,
    pub end_mark_s: f64,
    pub end_t_s: f64,
    pub end_kib: u64,
    pub change_pct: f64,
    pub tolerance_pct: f64,
    pub max_kib: u64,
    pub after_calm_kib: u64,
}

/// Ledger lines per server.
#[derive(Clone, Debug, Serialize)]
pub struct LedgerStats {
    pub lines: usize,
    pub non_idempotent_ids: usize,
    pub idempotent_lines: usize,
    pub idempotent_replays: usize,
}

/// The whole report: written as JSON, summarised on stdout.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub passed: bool,
    pub seed: u64,
    pub duration_secs: f64,
    pub clients: usize,
    pub pause_ms: u64,
    pub calm_secs: f64,
    pub work_dir: PathBuf,
    pub proxy_log: PathBuf,
    pub config: Value,
    pub upstreams: Vec<Upstream>,
    pub totals: Totals,
    pub verdicts: Vec<Verdict>,
    pub rss_check: RssCheck,
    pub rss: Vec<RssSample>,
    pub windows: Vec<Window>,
    pub ledgers: BTreeMap<String, LedgerStats>,
    pub chaos: Vec<ChaosEvent>,
    pub chaos_calls: Vec<CallRecord>,
    pub overlaps: Vec<Overlap>,
    pub overlap_scans: u64,
    pub end: EndState,
    pub calls: Vec<CallRecord>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub report_file: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub svg_file: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub svg_note: Option<String>,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * (sorted.len() as f64 - 1.0)).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn latency(mut values: Vec<f64>) -> Latency {
    values.sort_by(f64::total_cmp);
    Latency {
        p50: percentile(&values, 50.0),
        p90: percentile(&values, 90.0),
        p99: percentile(&values, 99.0),
        max: values.last().copied().unwrap_or(0.0),
    }
}

fn brief(call: &CallRecord) -> Value {
    json!({
        "server": call.server,
        "id": call.id,
        "kind": call.kind,
        "start_ms": call.start_ms,
        "duration_ms": (call.duration_ms() * 10.0).round() / 10.0,
        "category": call.category,
        "error": call.error,
    })
}

/// Lines of each ledger: id → count.
fn read_ledgers(upstreams: &[Upstream]) -> BTreeMap<String, HashMap<String, usize>> {
    upstreams
        .iter()
        .map(|u| {
            let mut ids = HashMap::new();
            for line in std::fs::read_to_string(&u.ledger)
                .unwrap_or_default()
                .lines()
            {
                *ids.entry(line.to_owned()).or_insert(0) += 1;
            }
            (u.name.clone(), ids)
        })
        .collect()
}

fn closest(samples: &[RssSample], mark: f64) -> Option<RssSample> {
    samples
        .iter()
        .copied()
        .min_by(|a, b| (a.t_s - mark).abs().total_cmp(&(b.t_s - mark).abs()))
}

/// Judge what was observed.
pub fn judge(o: Observed) -> Report {
    let duration_s = o.options.duration.as_secs_f64();
    let deadline_ms = (TOOL_CALL_TIMEOUT_MS + CLIENT_MARGIN_MS) as f64;
    let mut verdicts = Vec::new();

    // (a) Every call (load and chaos) returned within its deadline; none hung.
    let all: Vec<&CallRecord> = o.calls.iter().chain(&o.chaos_calls).collect();
    let late: Vec<&&CallRecord> = all
        .iter()
        .filter(|c| c.duration_ms() > deadline_ms || c.category == "client_timeout")
        .collect();
    let slowest = all.iter().map(|c| c.duration_ms()).fold(0.0, f64::max);
    verdicts.push(Verdict {
        key: "a",
        title: "every call returned within its deadline",
        pass: late.is_empty() && !o.calls.is_empty(),
        detail: format!(
            "{} calls ({} load, {} chaos); slowest {:.0} ms; {} over {:.0} ms (toolCallTimeoutMs {} + {} client margin); client-side hangs (15 s): {}",
            all.len(),
            o.calls.len(),
            o.chaos_calls.len(),
            slowest,
            late.len(),
            deadline_ms,
            TOOL_CALL_TIMEOUT_MS,
            CLIENT_MARGIN_MS,
            all.iter()
                .filter(|c| c.category == "client_timeout")
                .count()
        ),
        evidence: evidence(late.iter().map(|c| brief(c))),
    });

    // (b) Every success carried the right result.
    let wrong: Vec<&CallRecord> = o
        .calls
        .iter()
        .filter(|c| c.category == "wrong_result")
        .collect();
    let oks = o.calls.iter().filter(|c| c.ok).count();
    verdicts.push(Verdict {
        key: "b",
        title: "every success carried the right result",
        pass: wrong.is_empty() && oks > 0,
        detail: format!(
            "{oks} successes checked (echo returns its message, count and count_idempotent their id); {} wrong",
            wrong.len()
        ),
        evidence: evidence(wrong.iter().map(|c| brief(c))),
    });

    // (c) No non-idempotent id is in any ledger twice.
    let ledgers = read_ledgers(&o.upstreams);
    let mut totals_by_id: HashMap<&str, Vec<(&str, usize)>> = HashMap::new();
    for (server, ids) in &ledgers {
        for (id, n) in ids {
            totals_by_id
                .entry(id.as_str())
                .or_default()
                .push((server.as_str(), *n));
        }
    }
    let calls_by_id: HashMap<&str, &CallRecord> =
        o.calls.iter().map(|c| (c.id.as_str(), c)).collect();
    let mut duplicates: Vec<Value> = totals_by_id
        .iter()
        .filter(|(id, places)| {
            id.starts_with("n-") && places.iter().map(|(_, n)| n).sum::<usize>() > 1
        })
        .map(|(id, places)| {
            json!({
                "id": id,
                "ledgers": places.iter().map(|(s, n)| json!({"server": s, "lines": n})).collect::<Vec<_>>(),
                "call": calls_by_id.get(id).map(|c| brief(c)),
            })
        })
        .collect();
    duplicates.sort_by_key(|v| v["id"].as_str().unwrap_or_default().to_owned());
    let non_idempotent_lines: usize = ledgers
        .values()
        .flat_map(|ids| ids.iter())
        .filter(|(id, _)| id.starts_with("n-"))
        .map(|(_, n)| n)
        .sum();
    verdicts.push(Verdict {
        key: "c",
        title: "no non-idempotent id appears twice in any ledger",
        pass: duplicates.is_empty(),
        detail: format!(
            "{non_idempotent_lines} count lines in {} ledgers; {} ids more than once",
            ledgers.len(),
            duplicates.len()
        ),
        evidence: evidence(duplicates.into_iter()),
    });

    // (c2) The ledgers agree with what the callers were told.
    let mut disagreements = Vec::new();
    for call in &o.calls {
        if !matches!(call.kind, CallKind::Count | CallKind::CountIdempotent) {
            continue;
        }
        let places = totals_by_id.get(call.id.as_str());
        let own = places
            .and_then(|p| p.iter().find(|(s, _)| *s == call.server))
            .map_or(0, |(_, n)| *n);
        let foreign: Vec<&str> = places
            .map(|p| {
                p.iter()
                    .filter(|(s, _)| *s != call.server)
                    .map(|(s, _)| *s)
                    .collect()
            })
            .unwrap_or_default();
        let problem = if !foreign.is_empty() {
            Some(format!("in the ledger of {foreign:?}"))
        } else if call.ok && own == 0 {
            Some("succeeded but is not in its ledger".to_owned())
        } else if matches!(call.category.as_str(), "not_delivered" | "not_ready") && own > 0 {
            Some(format!(
                "the caller was told it did not run, but its ledger has it {own} time(s)"
            ))
        } else {
            None
        };
        if let Some(problem) = problem {
            let mut item = brief(call);
            item["problem"] = json!(problem);
            item["ledger_lines"] = json!(own);
            disagreements.push(item);
        }
    }
    let unknown: Vec<&str> = totals_by_id
        .keys()
        .filter(|id| !calls_by_id.contains_key(*id))
        .copied()
        .collect();
    for id in &unknown {
        disagreements.push(json!({ "id": id, "problem": "in a ledger, but no call had this id" }));
    }
    verdicts.push(Verdict {
        key: "c2",
        title: "the ledgers agree with the outcomes",
        pass: disagreements.is_empty(),
        detail: format!(
            "ok => in its own ledger; 'did not run' / 'not ready' => not in it; no id in another server's ledger; {} disagreements",
            disagreements.len()
        ),
        evidence: evidence(disagreements.into_iter()),
    });

    // (d) Idempotent calls to a server that chaos left alone succeeded.
    let mut hits: HashMap<&str, Vec<f64>> = HashMap::new();
    for event in &o.events {
        hits.entry(event.server.as_str())
            .or_default()
            .push(event.t_ms);
    }
    let touched = |call: &CallRecord, until: f64| {
        hits.get(call.server.as_str()).is_some_and(|times| {
            times
                .iter()
                .any(|t| *t >= call.start_ms - QUIET_MS && *t <= until)
        })
    };
    let replayable: Vec<&CallRecord> = o.calls.iter().filter(|c| c.kind.replayable()).collect();
    let quiet: Vec<&CallRecord> = replayable
        .iter()
        .copied()
        .filter(|c| !touched(c, c.end_ms))
        .collect();
    let quiet_failed: Vec<&CallRecord> = quiet.iter().copied().filter(|c| !c.ok).collect();
    let literal: Vec<&CallRecord> = replayable
        .iter()
        .copied()
        .filter(|c| !touched(c, c.start_ms))
        .collect();
    let literal_failed: Vec<&CallRecord> = literal.iter().copied().filter(|c| !c.ok).collect();
    let hit_during: Vec<&CallRecord> = literal_failed
        .iter()
        .copied()
        .filter(|c| touched(c, c.end_ms))
        .collect();
    let all_replayable_failed = replayable.iter().filter(|c| !c.ok).count();
    verdicts.push(Verdict {
        key: "d",
        title: "idempotent calls to a server no chaos touched in the 5 s before (or during) them all succeeded",
        pass: quiet_failed.is_empty() && !quiet.is_empty(),
        detail: format!(
            "{} such calls (echo, count_idempotent), {} failed (error rate {:.3}%); counting only chaos in the 5 s before the start: {} calls, {} failed, of which {} had chaos on their server while they ran; all idempotent calls: {}, {} failed",
            quiet.len(),
            quiet_failed.len(),
            rate(quiet_failed.len(), quiet.len()),
            literal.len(),
            literal_failed.len(),
            hit_during.len(),
            replayable.len(),
            all_replayable_failed,
        ),
        evidence: json!({
            "quiet_failures": evidence(quiet_failed.iter().map(|c| brief(c))),
            "failures_with_chaos_during_the_call": evidence(hit_during.iter().map(|c| brief(c))),
        }),
    });

    // (d2) No call failed as "not ready" / "reconnect failed" although the attempt it had to wait
    // for (SPEC §5: the one under way, or the next when due within the deadline) connected
    // within its deadline. The attempts' ends come from the proxy's log.
    let ends = crate::attempts::read(&o.proxy_log, o.t0_unix);
    let mut ends_by_server: HashMap<&str, Vec<&crate::attempts::AttemptEnd>> = HashMap::new();
    for end in &ends {
        ends_by_server
            .entry(end.server.as_str())
            .or_default()
            .push(end);
    }
    let gave_up_early: Vec<Value> = o
        .calls
        .iter()
        .filter(|c| matches!(c.category.as_str(), "not_ready" | "reconnect_failed"))
        .filter_map(|c| {
            let next = ends_by_server
                .get(c.server.as_str())?
                .iter()
                .find(|e| e.t_ms >= c.start_ms)?;
            (next.connected && next.t_ms <= c.start_ms + TOOL_CALL_TIMEOUT_MS as f64).then(|| {
                let mut item = brief(c);
                item["next_attempt_connected_at_ms"] = json!((next.t_ms * 10.0).round() / 10.0);
                item["failed_before_it_by_ms"] =
                    json!(((next.t_ms - c.end_ms) * 10.0).round() / 10.0);
                item
            })
        })
        .collect();
    let waited = o
        .calls
        .iter()
        .filter(|c| matches!(c.category.as_str(), "not_ready" | "reconnect_failed"))
        .count();
    let log_read = ends.len() >= o.upstreams.len();
    verdicts.push(Verdict {
        key: "d2",
        title: "no call failed as not ready although the attempt it had to wait for connected in time",
        pass: gave_up_early.is_empty() && log_read,
        detail: format!(
            "{waited} calls failed as not_ready / reconnect_failed; for {} of them the server's next attempt connected within the call's deadline ({} attempt ends read from the proxy log)",
            gave_up_early.len(),
            ends.len()
        ),
        evidence: evidence(gave_up_early.into_iter()),
    });

    // (e) After the calm: one process per stdio server, every server ready, every echo answered.
    let e = &o.end;
    let states: BTreeMap<String, String> = o
        .upstreams
        .iter()
        .map(|u| {
            let state = e.status["servers"]
                .as_array()
                .and_then(|s| s.iter().find(|s| s["name"] == u.name.as_str()))
                .and_then(|s| s["state"].as_str())
                .unwrap_or("missing")
                .to_owned();
            (u.name.clone(), state)
        })
        .collect();
    let not_ready: Vec<&String> = states
        .iter()
        .filter(|(_, s)| *s != "ready")
        .map(|(n, _)| n)
        .collect();
    let wrong_count: Vec<(&String, &Vec<u32>)> = o
        .upstreams
        .iter()
        .filter(|u| u.transport == "stdio")
        .filter_map(|u| e.processes.get(&u.name).map(|p| (&u.name, p)))
        .filter(|(_, pids)| pids.len() != 1)
        .collect();
    let final_failed: Vec<&CallRecord> = e.final_calls.iter().filter(|c| !c.ok).collect();
    verdicts.push(Verdict {
        key: "e",
        title: "after the calm: exactly one process per stdio server, every server ready",
        pass: not_ready.is_empty()
            && wrong_count.is_empty()
            && final_failed.is_empty()
            && e.processes.len() == o.upstreams.len(),
        detail: format!(
            "states {states:?}; processes {:?}; final echo on every server: {} of {} ok; unreaped children of the proxy: {}",
            e.processes,
            e.final_calls.len() - final_failed.len(),
            e.final_calls.len(),
            e.zombie_children.len()
        ),
        evidence: json!({
            "not_ready": not_ready,
            "wrong_process_count": wrong_count,
            "final_failures": evidence(final_failed.iter().map(|c| brief(c))),
            "zombie_children": e.zombie_children,
        }),
    });

    // (f) RSS stays flat.
    let long = duration_s >= 120.0;
    let baseline_mark = if long { 60.0 } else { duration_s / 3.0 };
    let tolerance = if long { 10.0 } else { 25.0 };
    let in_run: Vec<RssSample> = o
        .rss
        .iter()
        .copied()
        .filter(|s| s.t_s <= duration_s + 2.5)
        .collect();
    let mut rss_check = RssCheck {
        baseline_mark_s: baseline_mark,
        end_mark_s: duration_s,
        tolerance_pct: tolerance,
        max_kib: o.rss.iter().map(|s| s.rss_kib).max().unwrap_or(0),
        after_calm_kib: o.rss.last().map_or(0, |s| s.rss_kib),
        ..Default::default()
    };
    let rss_pass = match (
        closest(&in_run, baseline_mark),
        closest(&in_run, duration_s),
    ) {
        (Some(base), Some(end)) if base.rss_kib > 0 && end.t_s > base.t_s => {
            rss_check.baseline_t_s = base.t_s;
            rss_check.baseline_kib = base.rss_kib;
            rss_check.end_t_s = end.t_s;
            rss_check.end_kib = end.rss_kib;
            rss_check.change_pct =
                ((end.rss_kib as f64 - base.rss_kib as f64) / base.rss_kib as f64 * 1000.0).round()
                    / 10.0;
            rss_check.change_pct.abs() <= tolerance
        }
        _ => false,
    };
    verdicts.push(Verdict {
        key: "f",
        title: "the proxy's RSS at the end is within tolerance of the early mark",
        pass: rss_pass,
        detail: format!(
            "VmRSS {:.1} MiB at {:.0} s -> {:.1} MiB at {:.0} s: {:+.1}% (limit ±{tolerance}%); peak {:.1} MiB; {:.1} MiB after the calm; {} samples",
            rss_check.baseline_kib as f64 / 1024.0,
            rss_check.baseline_t_s,
            rss_check.end_kib as f64 / 1024.0,
            rss_check.end_t_s,
            rss_check.change_pct,
            rss_check.max_kib as f64 / 1024.0,
            rss_check.after_calm_kib as f64 / 1024.0,
            o.rss.len()
        ),
        evidence: Value::Null,
    });

    // (g) Never two processes of one stdio server at once.
    verdicts.push(Verdict {
        key: "g",
        title: "never two live processes of one stdio server at once",
        pass: o.overlaps.is_empty() && o.overlap_scans > 0,
        detail: format!(
            "{} scans of /proc (every 250 ms, chaos and calm); {} overlaps",
            o.overlap_scans,
            o.overlaps.len()
        ),
        evidence: evidence(o.overlaps.iter().map(|x| json!(x))),
    });

    // (h) A clean stop.
    let stop = e.stop.clone();
    verdicts.push(Verdict {
        key: "h",
        title: "SIGTERM stops the proxy and its servers",
        pass: stop.as_ref().is_some_and(|s| s.exited_on_sigterm)
            && e.leftover_after_stop.is_empty(),
        detail: format!(
            "{}; stdio server processes left after it stopped: {}",
            match &stop {
                Some(s) if s.exited_on_sigterm => format!(
                    "exited {} ms after SIGTERM (code {:?})",
                    s.stop_ms, s.exit_code
                ),
                Some(s) => format!("did not exit on SIGTERM within {} ms: killed", s.stop_ms),
                None => "not stopped".to_owned(),
            },
            e.leftover_after_stop.len()
        ),
        evidence: evidence(e.leftover_after_stop.iter().map(|p| json!(p))),
    });

    // Windows and totals.
    // Windows cover the run; the few calls that end after it count in the last one.
    let last_ms = duration_s * 1000.0;
    let window_ms = (WINDOW_SECS * 1000) as f64;
    let n_windows = (last_ms / window_ms).ceil().max(1.0) as usize;
    let mut windows: Vec<Window> = (0..n_windows)
        .map(|i| Window {
            t_s: i as u64 * WINDOW_SECS,
            started: 0,
            calls_per_sec: 0.0,
            ok: 0,
            errors: BTreeMap::new(),
            chaos_actions: 0,
        })
        .collect();
    let index = |ms: f64| ((ms / window_ms).floor().max(0.0) as usize).min(n_windows - 1);
    let mut ended = vec![0usize; n_windows];
    for call in &o.calls {
        let w = &mut windows[index(call.start_ms)];
        w.started += 1;
        if call.ok {
            w.ok += 1;
        } else {
            *w.errors.entry(call.category.clone()).or_insert(0) += 1;
        }
        ended[index(call.end_ms)] += 1;
    }
    for event in &o.events {
        if event.t_ms <= last_ms {
            windows[index(event.t_ms)].chaos_actions += 1;
        }
    }
    for (w, n) in windows.iter_mut().zip(&ended) {
        w.calls_per_sec = *n as f64 / WINDOW_SECS as f64;
    }

    let mut errors = BTreeMap::new();
    let mut by_kind: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
    for call in &o.calls {
        if !call.ok {
            *errors.entry(call.category.clone()).or_insert(0) += 1;
        }
        *by_kind
            .entry(call.kind.tool().to_owned())
            .or_default()
            .entry(call.category.clone())
            .or_insert(0) += 1;
    }
    let mut chaos_actions = BTreeMap::new();
    for event in &o.events {
        *chaos_actions.entry(event.action.clone()).or_insert(0) += 1;
    }
    let mut chaos_calls = BTreeMap::new();
    for call in &o.chaos_calls {
        *chaos_calls
            .entry(format!("{} {}", call.kind.tool(), call.category))
            .or_insert(0) += 1;
    }
    let totals = Totals {
        calls: o.calls.len(),
        ok: oks,
        errors,
        by_kind,
        calls_per_sec: (o.calls.len() as f64 / duration_s * 10.0).round() / 10.0,
        ok_latency_ms: latency(
            o.calls
                .iter()
                .filter(|c| c.ok)
                .map(CallRecord::duration_ms)
                .collect(),
        ),
        all_latency_ms: latency(o.calls.iter().map(CallRecord::duration_ms).collect()),
        by_client_kind: by_client_kind(&o.calls),
        chaos_actions,
        chaos_calls,
        downstream_reconnects: o.downstream_reconnects,
        downstream_connect_failures: o.downstream_connect_failures,
        plain_json_answers: o.plain_json_answers,
    };

    let ledger_stats = ledgers
        .iter()
        .map(|(server, ids)| {
            let idempotent: Vec<usize> = ids
                .iter()
                .filter(|(id, _)| id.starts_with("i-"))
                .map(|(_, n)| *n)
                .collect();
            (
                server.clone(),
                LedgerStats {
                    lines: ids.values().sum(),
                    non_idempotent_ids: ids.keys().filter(|id| id.starts_with("n-")).count(),
                    idempotent_lines: idempotent.iter().sum(),
                    idempotent_replays: idempotent.iter().map(|n| n.saturating_sub(1)).sum(),
                },
            )
        })
        .collect();

    Report {
        passed: verdicts.iter().all(|v| v.pass),
        seed: o.options.seed,
        duration_secs: duration_s,
        clients: o.options.clients,
        pause_ms: o.options.pause.as_millis() as u64,
        calm_secs: o.options.calm.as_secs_f64(),
        work_dir: o.work_dir,
        proxy_log: o.proxy_log,
        config: o.config,
        upstreams: o.upstreams,
        totals,
        verdicts,
        rss_check,
        rss: o.rss,
        windows,
        ledgers: ledger_stats,
        chaos: o.events,
        chaos_calls: o.chaos_calls,
        overlaps: o.overlaps,
        overlap_scans: o.overlap_scans,
        end: o.end,
        calls: o.calls,
        report_file: None,
        svg_file: None,
        svg_note: None,
    }
}

fn rate(part: usize, whole: usize) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

fn evidence(items: impl Iterator<Item = Value>) -> Value {
    let items: Vec<Value> = items.take(EVIDENCE).collect();
    if items.is_empty() {
        Value::Null
    } else {
        Value::Array(items)
    }
}

impl Report {
    /// The failed verdicts.
    pub fn failures(&self) -> Vec<&Verdict> {
        self.verdicts.iter().filter(|v| !v.pass).collect()
    }

    /// Write the report as JSON.
    pub fn write_json(&self, path: &Path) -> Result<()> {
        let file =
            std::fs::File::create(path).with_context(|| format!("create {}", path.display()))?;
        serde_json::to_writer(std::io::BufWriter::new(file), self)
            .with_context(|| format!("write {}", path.display()))
    }

    /// A human summary.
    pub fn summary(&self) -> String {
        let t = &self.totals;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "mcp-supervisor soak: {:.0} s of chaos + {:.0} s calm, seed {}, {} clients, 8 upstreams (5 stdio, 3 HTTP)",
            self.duration_secs, self.calm_secs, self.seed, self.clients
        );
        let _ = writeln!(
            s,
            "calls: {} ({:.1}/s), ok {} ({:.2}%); errors: {}",
            t.calls,
            t.calls_per_sec,
            t.ok,
            rate(t.ok, t.calls),
            if t.errors.is_empty() {
                "none".to_owned()
            } else {
                t.errors
                    .iter()
                    .map(|(k, v)| format!("{k} {v}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        );
        let _ = writeln!(
            s,
            "latency of successes: p50 {:.1} ms, p90 {:.1} ms, p99 {:.1} ms, max {:.0} ms; slowest call {:.0} ms",
            t.ok_latency_ms.p50,
            t.ok_latency_ms.p90,
            t.ok_latency_ms.p99,
            t.ok_latency_ms.max,
            t.all_latency_ms.max
        );
        for (kind, k) in &t.by_client_kind {
            let _ = writeln!(
                s,
                "  {kind} clients: {} calls, ok {} ({:.2}%), p50 of successes {:.1} ms, p99 {:.1} ms{}",
                k.calls,
                k.ok,
                rate(k.ok, k.calls),
                k.ok_latency_ms.p50,
                k.ok_latency_ms.p99,
                if kind == "plain" {
                    format!(
                        "; {} answered as one JSON body (pass-through)",
                        t.plain_json_answers
                    )
                } else {
                    String::new()
                }
            );
        }
        let _ = writeln!(
            s,
            "chaos: {}; chaos calls: {}; downstream session reconnects: {}",
            t.chaos_actions
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", "),
            t.chaos_calls
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", "),
            t.downstream_reconnects
        );
        let _ = writeln!(s, "verdicts:");
        for v in &self.verdicts {
            let _ = writeln!(
                s,
                "  [{}] {:<2} {}: {}",
                if v.pass { "PASS" } else { "FAIL" },
                v.key,
                v.title,
                v.detail
            );
        }
        let _ = writeln!(
            s,
            "per {WINDOW_SECS} s window (by start):   t   calls/s     ok  errors  chaos"
        );
        for w in &self.windows {
            let _ = writeln!(
                s,
                "                             {:>5} {:>9.1} {:>6} {:>7}  {:>5}  {}",
                w.t_s,
                w.calls_per_sec,
                w.ok,
                w.errors.values().sum::<usize>(),
                w.chaos_actions,
                w.errors
                    .iter()
                    .map(|(k, v)| format!("{k} {v}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        let _ = writeln!(
            s,
            "RSS samples (s: MiB): {}",
            self.rss
                .iter()
                .map(|r| format!("{:.0}: {:.1}", r.t_s, r.rss_kib as f64 / 1024.0))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let _ = writeln!(
            s,
            "work dir (config, ledgers, logs): {}",
            self.work_dir.display()
        );
        if let Some(path) = &self.report_file {
            let _ = writeln!(s, "report: {}", path.display());
        }
        match (&self.svg_file, &self.svg_note) {
            (Some(path), _) => {
                let _ = writeln!(s, "chart: {}", path.display());
            }
            (None, Some(note)) => {
                let _ = writeln!(s, "chart: {note}");
            }
            _ => {}
        }
        let _ = writeln!(
            s,
            "{}",
            if self.passed {
                "ALL VERDICTS PASSED".to_owned()
            } else {
                format!(
                    "FAILED: {}",
                    self.failures()
                        .iter()
                        .map(|v| v.key)
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
        );
        s
    }
}
