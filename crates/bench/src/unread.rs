//! `unread`: the stdio face's memory while its client sends and does not read. A raw client
//! writes N `echo` calls of a large message into `mcp-supervisor wrap -- mcp-fault-server`, reads
//! nothing for a while, then reads everything; the bench samples the wrap process's RSS
//! (`/proc/PID/status`: VmRSS while it runs, VmHWM at the end) and checks that every call was
//! answered exactly once, with its own message.
//!
//! It measures and reports; it never decides a pass by a timed assert (the verdict is printed
//! beside the figures). Every process it starts is stopped by pid (its process group) when it
//! ends, also on error.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::time::Instant;

use crate::procs::{RunDir, Spawned};
use crate::util;

/// The target of issue 17: the proxy's peak RSS with a client that does not read.
const TARGET_KIB: u64 = 64 * 1024;

/// What to run.
pub struct Options {
    /// How many `echo` calls the client sends.
    pub calls: u32,
    /// Bytes of each call's message.
    pub message_bytes: usize,
    /// How long the client reads nothing, seconds.
    pub unread_secs: u64,
    /// The `mcp-supervisor` binary (default: beside this binary).
    pub supervisor: Option<PathBuf>,
}

/// VmRSS and VmHWM of process `pid`, in KiB; `None` once it is gone.
fn status_kib(pid: u32) -> Option<(u64, u64)> {
    util::rss_kib_of(&pid.to_string()).ok()
}

/// The highest VmRSS seen by a sampler, and the last VmHWM.
#[derive(Default)]
struct Peak {
    rss: AtomicU64,
    hwm: AtomicU64,
}

/// Sample `pid`'s RSS every 20 ms into `peak` until the process is gone or the task is aborted.
async fn sample(pid: u32, peak: Arc<Peak>) {
    loop {
        let Some((rss, hwm)) = status_kib(pid) else {
            return;
        };
        peak.rss.fetch_max(rss, Ordering::Relaxed);
        peak.hwm.fetch_max(hwm, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn mib(kib: u64) -> String {
    format!("{:.1}", kib as f64 / 1024.0)
}

pub async fn run(fault: &Path, opts: Options) -> Result<Value> {
    let supervisor = match &opts.supervisor {
        Some(path) => path.clone(),
        None => util::supervisor_beside()?,
    };
    let dir = RunDir::new("unread")?;
    let args = vec![
        "wrap".to_string(),
        "--no-catalog".to_string(),
        "--".to_string(),
        fault.display().to_string(),
    ];
    let mut wrap = Spawned::start(
        "wrap",
        &supervisor,
        &args,
        Some(&dir.file("wrap.log")),
        true,
    )?;
    let pid = wrap.pid();
    let (stdout, mut stdin) = wrap.take_pipes().context("wrap's pipes")?;
    let mut lines = BufReader::new(stdout).lines();
    let limit = Duration::from_secs(30);

    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "mcp-supervisor-bench unread", "version": env!("CARGO_PKG_VERSION")}}});
    stdin.write_all(format!("{init}\n").as_bytes()).await?;
    let answer = tokio::time::timeout(limit, lines.next_line())
        .await
        .context("initialize was not answered within 30 s")??
        .context("wrap closed its stdout before answering initialize")?;
    if !answer.contains("\"result\"") {
        bail!("initialize failed: {answer}{}", wrap.log_tail());
    }
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    stdin
        .write_all(format!("{initialized}\n").as_bytes())
        .await?;
    let (rss_ready, _) = status_kib(pid).context("wrap is gone")?;

    // Each call's message: its number, then filler up to the size.
    let size = opts.message_bytes;
    let message = move |i: u32| {
        let head = format!("m{i}-");
        let fill = size.saturating_sub(head.len());
        format!("{head}{}", "x".repeat(fill))
    };
    let peak = Arc::new(Peak::default());
    let sampler = tokio::spawn(sample(pid, peak.clone()));
    let sent = Arc::new(AtomicUsize::new(0));
    let calls = opts.calls;
    let writer = {
        let sent = sent.clone();
        tokio::spawn(async move {
            for i in 1..=calls {
                let call = json!({"jsonrpc": "2.0", "id": i, "method": "tools/call",
                    "params": {"name": "echo", "arguments": {"message": message(i)}}});
                if stdin
                    .write_all(format!("{call}\n").as_bytes())
                    .await
                    .is_err()
                {
                    return Err(anyhow::anyhow!("wrap stopped reading after {i} calls"));
                }
                sent.fetch_add(1, Ordering::Relaxed);
            }
            Ok(stdin)
        })
    };

    // Read nothing for a while.
    let start = Instant::now();
    tokio::time::sleep(Duration::from_secs(opts.unread_secs)).await;
    let sent_unread = sent.load(Ordering::Relaxed);
    let (rss_unread, _) = status_kib(pid).context("wrap is gone")?;
    let peak_unread = peak.rss.load(Ordering::Relaxed);

    // Now read everything, each answer checked against its call.
    let reading = Instant::now();
    let mut answered = vec![0u8; calls as usize + 1];
    let (mut count, mut twice, mut wrong) = (0usize, 0usize, 0usize);
    let deadline = reading + Duration::from_secs(300);
    while count < calls as usize {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok(line) = tokio::time::timeout(left, lines.next_line()).await else {
            break;
        };
        let Some(line) = line? else { break };
        let Ok(answer) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        let Some(id) = answer["id"]
            .as_u64()
            .filter(|id| (1..=calls as u64).contains(id))
        else {
            continue;
        };
        let slot = &mut answered[id as usize];
        if *slot > 0 {
            twice += 1;
        } else {
            count += 1;
        }
        *slot = slot.saturating_add(1);
        let text = answer["result"]["content"][0]["text"].as_str();
        if text != Some(message(id as u32).as_str()) {
            wrong += 1;
        }
    }
    let read_secs = reading.elapsed().as_secs_f64();
    let total_secs = start.elapsed().as_secs_f64();
    let written = match tokio::time::timeout(Duration::from_secs(10), writer).await {
        Ok(Ok(Ok(stdin))) => {
            drop(stdin);
            Ok(())
        }
        Ok(Ok(Err(error))) => Err(error),
        Ok(Err(error)) => Err(anyhow::anyhow!("the writer task failed: {error}")),
        Err(_) => Err(anyhow::anyhow!(
            "the writer had not finished 10 s after the reads"
        )),
    };
    sampler.abort();
    let (rss_end, hwm) = status_kib(pid).context("wrap is gone before the end")?;
    let peak_rss = peak.rss.load(Ordering::Relaxed).max(rss_end);
    // stdin is closed: wrap ends by itself.
    if !wrap.wait_exit(Duration::from_secs(5)).await {
        wrap.stop(Duration::from_secs(2)).await;
    }
    written?;

    let missing = calls as usize - count;
    let once = missing == 0 && twice == 0 && wrong == 0;
    let met = once && hwm <= TARGET_KIB;
    util::print_table(
        &format!(
            "unread: {calls} echo calls of {} bytes through wrap, nothing read for {} s",
            opts.message_bytes, opts.unread_secs
        ),
        &["figure", "value"],
        &[
            vec!["wrap RSS after initialize (MiB)".into(), mib(rss_ready)],
            vec![
                format!(
                    "calls written by the client in the first {} s",
                    opts.unread_secs
                ),
                sent_unread.to_string(),
            ],
            vec![
                "wrap RSS at the end of the unread time (MiB)".into(),
                mib(rss_unread),
            ],
            vec![
                "wrap peak sampled RSS, unread time (MiB)".into(),
                mib(peak_unread),
            ],
            vec![
                "wrap peak sampled RSS, whole run (MiB)".into(),
                mib(peak_rss),
            ],
            vec!["wrap VmHWM at the end (MiB)".into(), mib(hwm)],
            vec![
                "answered exactly once".into(),
                format!("{count} of {calls}"),
            ],
            vec![
                "answered twice / missing / wrong text".into(),
                format!("{twice} / {missing} / {wrong}"),
            ],
            vec![
                "reading everything took (s)".into(),
                format!("{read_secs:.2}"),
            ],
        ],
    );
    println!(
        "- peak RSS <= {} MiB with every call answered once: **{}** — VmHWM {} MiB ({:.2}x the target), {count} of {calls} answered once",
        TARGET_KIB / 1024,
        if met { "met" } else { "missed" },
        mib(hwm),
        hwm as f64 / TARGET_KIB as f64,
    );
    Ok(json!({
        "bench": "unread",
        "calls": calls,
        "message_bytes": opts.message_bytes,
        "unread_secs": opts.unread_secs,
        "rss_ready_kib": rss_ready,
        "sent_while_unread": sent_unread,
        "rss_end_of_unread_kib": rss_unread,
        "peak_rss_unread_kib": peak_unread,
        "peak_rss_kib": peak_rss,
        "vm_hwm_kib": hwm,
        "answered_once": count,
        "answered_twice": twice,
        "missing": missing,
        "wrong_text": wrong,
        "read_secs": util::round3(read_secs),
        "total_secs": util::round3(total_secs),
        "target_kib": TARGET_KIB,
        "met": met,
    }))
}
