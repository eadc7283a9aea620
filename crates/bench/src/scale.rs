//! `scale`: one proxy (`mcp-supervisor serve --http`) in front of N stdio fault servers with
//! `--tools T` each: the proxy's own RSS, the time until all N are ready, the latency of the
//! aggregate `tools/list`, and a restart storm (kill -9 of every upstream at once) watched in
//! `/proc` every ~20 ms for any server with two live processes at once.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use rmcp::ServiceExt;
use rmcp::transport::StreamableHttpClientTransport;
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::procs::{self, ProcInfo, RunDir, Spawned};
use crate::util::{self, STATS_HEADER, Stats, stats_row};
use mcp_supervisor_testkit::rawhttp::RawHttp;

pub struct Options {
    pub servers: u32,
    pub tools: u32,
    pub lists: u32,
    pub limit_secs: u64,
    pub initial_delay_ms: u64,
    pub storms: u32,
    pub svg: Option<PathBuf>,
}

/// One server as `/status` shows it.
#[derive(Clone, Debug)]
struct Status {
    state: String,
    generation: u64,
    pid: Option<u32>,
}

/// A proxy and the HTTP client that asks it for its status.
struct Proxy {
    process: Spawned,
    port: u16,
    http: reqwest::Client,
    /// The directory whose `sNNN.pid` files mark this proxy's fault servers.
    dir: PathBuf,
}

impl Proxy {
    async fn start(
        supervisor: &Path,
        fault: &Path,
        dir: PathBuf,
        servers: u32,
        opts: &Options,
    ) -> Result<(Self, Instant)> {
        std::fs::create_dir_all(&dir)?;
        let mut entries = serde_json::Map::new();
        for i in 0..servers {
            let name = format!("s{i:03}");
            entries.insert(
                name.clone(),
                json!({
                    "command": fault,
                    "args": ["--tools", opts.tools.to_string(), "--pid-file", dir.join(format!("{name}.pid"))],
                }),
            );
        }
        let config = json!({
            "defaults": {
                "connectTimeoutMs": 120_000,
                "reconnect": { "initialDelayMs": opts.initial_delay_ms, "maxDelayMs": 30_000, "maxAttempts": 50 }
            },
            "mcpServers": entries,
        });
        let config_path = dir.join("config.json");
        std::fs::write(&config_path, serde_json::to_vec_pretty(&config)?)?;
        let port = util::free_port()?;
        let args: Vec<String> = vec![
            "serve".into(),
            "--log-level".into(),
            "warn".into(),
            "--config".into(),
            config_path.display().to_string(),
            "--http".into(),
            format!("127.0.0.1:{port}"),
            // Stopped by SIGTERM, its stop measured: no drain window in it.
            "--drain-ms".into(),
            "0".into(),
        ];
        let started = Instant::now();
        let mut process = Spawned::start(
            "mcp-supervisor serve",
            supervisor,
            &args,
            Some(&dir.join("proxy.log")),
            false,
        )?;
        process
            .wait_listening(port, Duration::from_secs(60))
            .await?;
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(30))
            .build()?;
        Ok((
            Self {
                process,
                port,
                http,
                dir,
            },
            started,
        ))
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    async fn status(&self) -> Result<BTreeMap<String, Status>> {
        let body: Value = serde_json::from_slice(
            &self
                .http
                .get(self.url("/status"))
                .send()
                .await
                .map_err(|e| anyhow!("GET /status: {e}"))?
                .bytes()
                .await
                .map_err(|e| anyhow!("GET /status: {e}"))?,
        )
        .context("GET /status is not JSON")?;
        let servers = body
            .get("servers")
            .and_then(Value::as_array)
            .context("GET /status has no servers")?;
        Ok(servers
            .iter()
            .filter_map(|s| {
                Some((
                    s.get("name")?.as_str()?.to_string(),
                    Status {
                        state: s.get("state")?.as_str()?.to_string(),
                        generation: s.get("generation").and_then(Value::as_u64).unwrap_or(0),
                        pid: s
                            .get("pid")
                            .and_then(Value::as_u64)
                            .and_then(|p| u32::try_from(p).ok()),
                    },
                ))
            })
            .collect())
    }

    /// Poll `/status` every 50 ms until every server is ready on a generation newer than the one
    /// in `after` (0 when absent). Returns the (seconds since `since`, ready count) timeline.
    async fn wait_ready(
        &self,
        expected: usize,
        after: &BTreeMap<String, u64>,
        since: Instant,
        limit: Duration,
    ) -> Result<Vec<(f64, usize)>> {
        let mut timeline = Vec::new();
        loop {
            let status = self.status().await;
            let elapsed = since.elapsed();
            if let Ok(status) = &status {
                let ready = status
                    .iter()
                    .filter(|(name, s)| {
                        s.state == "ready" && s.generation > after.get(*name).copied().unwrap_or(0)
                    })
                    .count();
                timeline.push((elapsed.as_secs_f64(), ready));
                if ready == expected && status.len() == expected {
                    return Ok(timeline);
                }
                let gave_up: Vec<&String> = status
                    .iter()
                    .filter(|(_, s)| s.state == "gave_up" || s.state == "stopped")
                    .map(|(n, _)| n)
                    .collect();
                if !gave_up.is_empty() {
                    bail!(
                        "{} server(s) gave up or stopped, e.g. {:?}",
                        gave_up.len(),
                        &gave_up[..gave_up.len().min(5)]
                    );
                }
            }
            if elapsed >= limit {
                let last = timeline.last().map_or(0, |p| p.1);
                bail!(
                    "only {last} of {expected} servers were ready after {limit:?}{}",
                    self.process.log_tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// VmRSS and VmHWM of a process, KiB.
fn rss_hwm(pid: u32) -> Result<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("cannot read /proc/{pid}/status"))?;
    let field = |key: &str| -> Option<u64> {
        status
            .lines()
            .find(|l| l.starts_with(key))?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    };
    Ok((
        field("VmRSS:").context("no VmRSS")?,
        field("VmHWM:").context("no VmHWM")?,
    ))
}

/// The server a fault-server process belongs to: the stem of its `--pid-file` in `dir`.
fn server_of(info: &ProcInfo, dir: &str) -> Option<String> {
    let at = info.args.iter().position(|a| a == "--pid-file")?;
    let file = info.args.get(at + 1)?;
    let name = file.strip_prefix(dir)?.trim_start_matches('/');
    Some(name.strip_suffix(".pid")?.to_string())
}

/// The live processes (pid, state letter) of one server in one sample.
type Live = Vec<(u32, char)>;

/// What the `/proc` sampler saw during the storm.
#[derive(Default)]
struct Watch {
    samples: usize,
    /// (seconds after the kill, fault-server processes alive).
    alive: Vec<(f64, usize)>,
    /// The most processes alive at once for one server, over every sample.
    max_per_server: usize,
    /// Server → (seconds, pids and states) of every sample where it had two or more.
    doubles: BTreeMap<String, Vec<(f64, Live)>>,
    gaps_ms: Vec<f64>,
}

fn sample(dir: &str, marker: &str, t: f64, watch: &mut Watch) {
    let mut per: BTreeMap<String, Live> = BTreeMap::new();
    for info in procs::with_marker(marker) {
        if !info.alive() {
            continue;
        }
        if let Some(server) = server_of(&info, dir) {
            per.entry(server).or_default().push((info.pid, info.state));
        }
    }
    let alive = per.values().map(Vec::len).sum();
    watch.samples += 1;
    watch.alive.push((t, alive));
    for (server, pids) in per {
        watch.max_per_server = watch.max_per_server.max(pids.len());
        if pids.len() > 1 {
            watch.doubles.entry(server).or_default().push((t, pids));
        }
    }
}

/// One restart storm: kill -9 of every upstream at once, watched in `/proc` until every server is
/// ready again on a newer generation.
struct Storm {
    timeline: Vec<(f64, usize)>,
    secs: f64,
    not_sent: usize,
    killed_in: Duration,
    pre: Watch,
    watch: Watch,
    old_alive: usize,
    restarted: usize,
    load: f64,
    rss: u64,
    hwm: u64,
}

async fn storm(proxy: &Proxy, n: usize, marker: &str, limit: Duration) -> Result<Storm> {
    let before = proxy.status().await?;
    let pids: Vec<u32> = before.values().filter_map(|s| s.pid).collect();
    if pids.len() != n {
        bail!("/status shows {} pids for {n} servers", pids.len());
    }
    let generations: BTreeMap<String, u64> = before
        .iter()
        .map(|(name, s)| (name.clone(), s.generation))
        .collect();
    let dir = proxy.dir.display().to_string();
    let mut pre = Watch::default();
    sample(&dir, marker, 0.0, &mut pre);
    let stop = Arc::new(AtomicBool::new(false));
    let kill_at = Instant::now();
    let sampler = {
        let stop = stop.clone();
        let dir = dir.clone();
        let marker = marker.to_string();
        let limit = limit + Duration::from_secs(5);
        std::thread::spawn(move || {
            let mut watch = Watch::default();
            let mut last = kill_at;
            while !stop.load(Ordering::Relaxed) && kill_at.elapsed() < limit {
                let now = Instant::now();
                if watch.samples > 0 {
                    watch.gaps_ms.push((now - last).as_secs_f64() * 1000.0);
                }
                last = now;
                sample(&dir, &marker, kill_at.elapsed().as_secs_f64(), &mut watch);
                let spent = now.elapsed();
                std::thread::sleep(Duration::from_millis(20).saturating_sub(spent));
            }
            watch
        })
    };
    let load_storm = procs::load_now();
    let mut not_sent = 0;
    for &pid in &pids {
        if !procs::signal(pid, nix::sys::signal::Signal::SIGKILL) {
            not_sent += 1;
        }
    }
    let killed_in = kill_at.elapsed();
    let storm = proxy.wait_ready(n, &generations, kill_at, limit).await;
    // A little more watching after the last server is ready.
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    let watch = sampler
        .join()
        .map_err(|_| anyhow!("the /proc sampler panicked"))?;
    let storm = storm?;
    let storm_secs = storm.last().map_or(0.0, |p| p.0);
    let after = proxy.status().await?;
    let old_alive = pids
        .iter()
        .filter(|&&p| {
            procs::with_marker(marker)
                .iter()
                .any(|i| i.pid == p && i.alive())
        })
        .count();
    let restarted = after
        .iter()
        .filter(|(name, s)| s.generation > generations.get(*name).copied().unwrap_or(0))
        .count();
    let (rss, hwm) = rss_hwm(proxy.process.pid())?;
    Ok(Storm {
        timeline: storm,
        secs: storm_secs,
        not_sent,
        killed_in,
        pre,
        watch,
        old_alive,
        restarted,
        load: load_storm,
        rss,
        hwm,
    })
}

pub async fn run(fault: &Path, opts: Options) -> Result<Value> {
    let supervisor = crate::util::supervisor_beside()?;
    let run = RunDir::new("scale")?;
    let limit = Duration::from_secs(opts.limit_secs);
    procs::measured(&run, measure(fault, &supervisor, &run, &opts, limit)).await
}

async fn measure(
    fault: &Path,
    supervisor: &Path,
    run: &RunDir,
    opts: &Options,
    limit: Duration,
) -> Result<Value> {
    let n = opts.servers as usize;
    // 1. Reference: the same proxy with one server.
    let (mut reference, started) =
        Proxy::start(supervisor, fault, run.file("ref"), 1, opts).await?;
    reference
        .wait_ready(1, &BTreeMap::new(), started, limit)
        .await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (rss_one, _) = rss_hwm(reference.process.pid())?;
    let reference_stop = reference.process.stop(Duration::from_secs(30)).await;
    eprintln!("reference proxy with 1 server: VmRSS {rss_one} KiB");

    // 2. N servers.
    let load_start = procs::load_now();
    let (mut proxy, started) =
        Proxy::start(supervisor, fault, run.file("main"), opts.servers, opts).await?;
    let listening = started.elapsed();
    let startup = proxy
        .wait_ready(n, &BTreeMap::new(), started, limit)
        .await?;
    let ready_after = startup.last().map_or(0.0, |p| p.0);
    let load_ready = procs::load_now();
    eprintln!("{n} servers ready after {ready_after:.2} s (load {load_ready:.2})");
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let pid = proxy.process.pid();
    let (rss_ready, hwm_ready) = rss_hwm(pid)?;

    // 3. The aggregate tools/list, rmcp client and raw POST.
    let url = proxy.url("/mcp");
    let client = tokio::time::timeout(
        Duration::from_secs(60),
        ().serve(StreamableHttpClientTransport::from_uri(url.clone())),
    )
    .await
    .map_err(|_| anyhow!("initialize with the proxy took over 60 s"))?
    .map_err(|e| anyhow!("initialize with the proxy: {e}"))?;
    let warm = client
        .list_all_tools()
        .await
        .map_err(|e| anyhow!("tools/list: {e}"))?;
    let tool_count = warm.len();
    let mut rmcp_times = Vec::new();
    for _ in 0..opts.lists {
        let start = Instant::now();
        let tools = client
            .list_all_tools()
            .await
            .map_err(|e| anyhow!("tools/list: {e}"))?;
        rmcp_times.push(start.elapsed());
        if tools.len() != tool_count {
            bail!(
                "tools/list returned {} tools, then {tool_count}",
                tools.len()
            );
        }
    }
    let _ = tokio::time::timeout(Duration::from_secs(5), client.cancel()).await;
    let raw = RawHttp::connect(&url, Duration::from_secs(60)).await?;
    let mut raw_times = Vec::new();
    let mut body_bytes = 0;
    for _ in 0..=opts.lists {
        let start = Instant::now();
        let body = raw.request_body("tools/list", json!({})).await?;
        let elapsed = start.elapsed();
        body_bytes = body.len();
        raw_times.push(elapsed);
    }
    raw_times.remove(0); // warm-up
    drop(raw);
    let (rss_lists, hwm_lists) = rss_hwm(pid)?;
    let load_lists = procs::load_now();

    // 4. Restart storms.
    let mut storms = Vec::new();
    for k in 0..opts.storms {
        let one = storm(&proxy, n, &run.marker(), limit).await?;
        eprintln!(
            "storm {}: all {n} ready again after {:.2} s; RSS {} KiB",
            k + 1,
            one.secs,
            one.rss
        );
        storms.push(one);
        tokio::time::sleep(Duration::from_millis(1000)).await;
    }
    let load_end = procs::load_now();
    let graceful = proxy.process.stop(Duration::from_secs(60)).await;

    // Report.
    let per_server_marginal =
        (rss_ready as f64 - rss_one as f64) / (n.saturating_sub(1).max(1)) as f64;
    let per_server_total = rss_ready as f64 / n as f64;
    let load_storms: Vec<String> = storms.iter().map(|s| format!("{:.2}", s.load)).collect();
    println!(
        "scale: one `mcp-supervisor serve --http` proxy, {n} stdio fault servers with --tools {} each",
        opts.tools
    );
    println!(
        "\n  load average: {load_start:.2} at the start, {load_ready:.2} when all were ready, {load_lists:.2} after the lists, {} at the storms, {load_end:.2} at the end",
        load_storms.join(", ")
    );
    println!(
        "  listening after {:.0} ms; all {n} ready after {ready_after:.2} s",
        listening.as_secs_f64() * 1000.0
    );
    let mut rss_rows = vec![
        vec![
            "1 server, ready (reference)".to_string(),
            rss_one.to_string(),
            String::new(),
        ],
        vec![
            format!("{n} servers, ready"),
            rss_ready.to_string(),
            hwm_ready.to_string(),
        ],
        vec![
            "after the tools/list runs".into(),
            rss_lists.to_string(),
            hwm_lists.to_string(),
        ],
    ];
    for (k, one) in storms.iter().enumerate() {
        rss_rows.push(vec![
            format!("after restart storm {}", k + 1),
            one.rss.to_string(),
            one.hwm.to_string(),
        ]);
    }
    util::print_table(
        "proxy RSS (VmRSS of the proxy's pid; its children not counted), KiB",
        &["point", "VmRSS", "VmHWM"],
        &rss_rows,
    );
    println!(
        "\n  RSS per supervised server: {per_server_total:.1} KiB (VmRSS / {n}); {per_server_marginal:.1} KiB ((VmRSS - reference) / {})",
        n - 1
    );
    let rmcp_stats = Stats::of(&rmcp_times)?;
    let raw_stats = Stats::of(&raw_times)?;
    util::print_table(
        &format!(
            "aggregate tools/list over HTTP: {tool_count} tools, {body_bytes} bytes ({:.1} MiB) per answer, ms",
            body_bytes as f64 / 1_048_576.0
        ),
        &STATS_HEADER,
        &[
            stats_row("rmcp client (list_all_tools, parsed)", &rmcp_stats),
            stats_row("raw POST (body received, not parsed)", &raw_stats),
        ],
    );
    let mut storm_json = Vec::new();
    for (k, one) in storms.iter().enumerate() {
        let gaps = Stats::of_ms(one.watch.gaps_ms.clone()).ok();
        println!(
            "\n  restart storm {}: kill -9 of {n} upstream pids (sent in {:.1} ms, {} not sent); all {n} ready again on a new generation after {:.2} s",
            k + 1,
            one.killed_in.as_secs_f64() * 1000.0,
            one.not_sent,
            one.secs
        );
        println!(
            "    /proc samples: {} (interval median {:.1} ms, max {:.1} ms); before the kill: {} processes, at most {} per server",
            one.watch.samples,
            gaps.map_or(0.0, |g| g.median),
            gaps.map_or(0.0, |g| g.max),
            one.pre.alive.first().map_or(0, |p| p.1),
            one.pre.max_per_server
        );
        println!(
            "    most live processes of one server at once: {}; servers that ever had two: {}; old pids alive after: {}; servers on a new generation: {} of {n}",
            one.watch.max_per_server,
            one.watch.doubles.len(),
            one.old_alive,
            one.restarted
        );
        for (server, seen) in one.watch.doubles.iter().take(5) {
            println!("      {server}: {:?}", &seen[..seen.len().min(3)]);
        }
        storm_json.push(json!({
            "all_ready_again_s": util::round3(one.secs),
            "kills_sent_ms": util::round3(one.killed_in.as_secs_f64() * 1000.0),
            "kills_not_sent": one.not_sent,
            "samples": one.watch.samples,
            "sample_interval_ms": gaps.map(|g| g.json()),
            "max_live_processes_per_server": one.watch.max_per_server,
            "servers_with_two_live_processes": one.watch.doubles.len(),
            "old_pids_alive_after": one.old_alive,
            "servers_on_new_generation": one.restarted,
            "loadavg": one.load,
            "rss_kib_after": one.rss,
        }));
    }
    println!("\n  proxy exited on SIGTERM: {graceful} (reference proxy: {reference_stop})");
    let rss_target = per_server_total <= 256.0 && per_server_marginal <= 256.0;
    let list_rmcp = rmcp_stats.median < 50.0;
    let list_raw = raw_stats.median < 50.0;
    let verdict = |ok: bool| if ok { "met" } else { "missed" };
    println!("\ntargets");
    println!(
        "  proxy RSS per supervised server <= 256 KiB: {} ({per_server_total:.1} KiB total/N, {per_server_marginal:.1} KiB marginal)",
        verdict(rss_target)
    );
    println!(
        "  the {tool_count}-tool list in < 50 ms: {} with the rmcp client (median {:.1} ms), {} raw (median {:.1} ms)",
        verdict(list_rmcp),
        rmcp_stats.median,
        verdict(list_raw),
        raw_stats.median
    );
    if let (Some(path), Some(first)) = (&opts.svg, storms.first()) {
        // The sample taken just before the kill opens the line of live processes.
        let alive: Vec<(f64, usize)> = first
            .pre
            .alive
            .iter()
            .copied()
            .chain(first.watch.alive.iter().copied())
            .collect();
        match crate::plot::storm_timeline(path, n, &first.timeline, &alive) {
            Ok(()) => println!("\n  storm timeline (storm 1): {}", path.display()),
            Err(e) => println!("\n  no chart: {e:#}"),
        }
    }
    Ok(json!({
        "bench": "scale",
        "servers": n,
        "tools_per_server": opts.tools,
        "loadavg": { "start": load_start, "ready": load_ready, "lists": load_lists, "end": load_end },
        "listening_ms": util::round3(listening.as_secs_f64() * 1000.0),
        "all_ready_s": util::round3(ready_after),
        "rss_kib": { "reference_1_server": rss_one, "ready": rss_ready, "ready_hwm": hwm_ready, "after_lists": rss_lists },
        "rss_per_server_kib": { "total_over_n": util::round3(per_server_total), "marginal": util::round3(per_server_marginal) },
        "tools_list": { "tools": tool_count, "bytes": body_bytes, "rmcp_ms": rmcp_stats.json(), "raw_ms": raw_stats.json() },
        "storms": storm_json,
        "proxy_exited_on_sigterm": graceful,
        "targets": { "rss_per_server_le_256kib": rss_target, "tools_list_lt_50ms_rmcp": list_rmcp, "tools_list_lt_50ms_raw": list_raw },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_belongs_to_the_server_of_its_pid_file() {
        let info = ProcInfo {
            pid: 1,
            state: 'S',
            args: [
                "/bin/fault",
                "--tools",
                "20",
                "--pid-file",
                "/tmp/run/main/s042.pid",
            ]
            .map(String::from)
            .to_vec(),
        };
        assert_eq!(server_of(&info, "/tmp/run/main").as_deref(), Some("s042"));
        assert_eq!(server_of(&info, "/tmp/run/ref"), None);
        let proxy = ProcInfo {
            pid: 2,
            state: 'S',
            args: [
                "mcp-supervisor",
                "serve",
                "--config",
                "/tmp/run/main/config.json",
            ]
            .map(String::from)
            .to_vec(),
        };
        assert_eq!(server_of(&proxy, "/tmp/run/main"), None);
        assert!(
            !ProcInfo {
                state: 'Z',
                ..proxy
            }
            .alive()
        );
    }
}
