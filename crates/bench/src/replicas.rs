//! `replicas`: `serve --http` replicas sharing one session key behind HAProxy (SPEC §12, issue
//! 19), measured from a raw HTTP client holding 2025-era sessions (each worker one session,
//! calls back to back; a replica that did not open a session resumes it from its sealed id):
//! - failover: a steady loop, one replica `kill -9`ed at a set time and started again on its
//!   port; per window: calls done per second, failed calls, the slowest call;
//! - rolling restart: the same loop while each replica in turn gets SIGTERM (it drains), exits
//!   and starts again on its port, the next one only after it is back;
//! - throughput at high concurrency through the same HAProxy with N replicas against one.
//!
//! It only measures: it asserts nothing about the proxy. Loopback only; every process it starts
//! is ended by pid (its guard) and the run's processes are swept by their marker at the end.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use base64::Engine;
use mcp_supervisor_testkit::rawhttp::RawHttp;
use nix::sys::signal::Signal;
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::procs::{self, RunDir, Spawned};
use crate::util::{self, Stats};

pub struct Options {
    /// The mcp-supervisor binary (default: beside this binary).
    pub supervisor: Option<PathBuf>,
    /// How many replicas.
    pub replicas: usize,
    /// Workers (sessions) of the failover and rolling loops.
    pub workers: u32,
    /// Length of the failover loop.
    pub secs: f64,
    /// When the replica is killed, from the start of the loop.
    pub kill_at_ms: u64,
    /// How long the killed replica stays down before it is started again.
    pub down_ms: u64,
    /// Width of a window of the tables.
    pub window_ms: u64,
    /// Workers of the throughput runs.
    pub concurrency: u32,
    /// Measured seconds of each throughput run (after one second of warm-up).
    pub throughput_secs: f64,
    /// Throughput runs of each kind (N replicas, one replica), alternating.
    pub rounds: u32,
}

/// `--drain-ms` of every replica (as the replica test runs them).
const DRAIN_MS: &str = "1500";
/// The bound of every wait for a process.
const LIMIT: Duration = Duration::from_secs(30);
/// The bound of one call.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// The hard bound of any call loop.
const LOOP_BOUND: Duration = Duration::from_secs(120);

pub async fn run(fault: &Path, opts: Options) -> Result<Value> {
    let supervisor = match &opts.supervisor {
        Some(path) if path.is_file() => path.clone(),
        Some(path) => bail!("{} is not a file", path.display()),
        None => util::supervisor_beside()?,
    };
    let haproxy = haproxy()?;
    let run = RunDir::new("replicas")?;
    let nproc = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "replicas: {} replicas of {} behind {}, nproc {nproc}",
        opts.replicas,
        supervisor.display(),
        haproxy.display()
    );
    let report = procs::measured(&run, body(fault, &supervisor, &haproxy, &run, &opts)).await?;
    Ok(json!({ "bench": "replicas", "nproc": nproc, "runs": report }))
}

fn haproxy() -> Result<PathBuf> {
    [
        "/usr/sbin/haproxy",
        "/usr/bin/haproxy",
        "/usr/local/sbin/haproxy",
    ]
    .into_iter()
    .map(PathBuf::from)
    .find(|p| p.is_file())
    .context("haproxy is missing (apt-get install haproxy)")
}

/// What every replica shares: the binaries, the key, the run directory.
struct Fleet<'a> {
    fault: &'a Path,
    supervisor: &'a Path,
    key: String,
    run: &'a RunDir,
}

impl Fleet<'_> {
    /// Replica `n` on `port`: `serve --http` with one fault server, ready (readyz and healthz
    /// 200) when this returns.
    async fn start(&self, n: usize, port: u16) -> Result<Spawned> {
        let config = self.run.file(&format!("replica-{n}.json"));
        let servers = json!({ "mcpServers": { "fault": {
            "command": self.fault,
            "args": ["--pid-file", self.run.file(&format!("fault-{n}.pid"))],
        }}});
        std::fs::write(&config, servers.to_string())
            .with_context(|| format!("cannot write {}", config.display()))?;
        let args = procs::serve_http_args(&config, port, DRAIN_MS);
        let mut replica = Spawned::start_env(
            &format!("replica {n}"),
            self.supervisor,
            &args,
            &[("MCP_SUPERVISOR_SESSION_KEY", self.key.as_str())],
            Some(&self.run.file(&format!("replica-{n}.log"))),
            false,
        )?;
        replica.wait_listening(port, LIMIT).await?;
        let probe = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(1))
            .build()?;
        let began = Instant::now();
        loop {
            let ok = |path: &'static str| {
                let probe = probe.clone();
                async move {
                    probe
                        .get(format!("http://127.0.0.1:{port}{path}"))
                        .send()
                        .await
                        .is_ok_and(|r| r.status().is_success())
                }
            };
            if ok("/readyz").await && ok("/healthz").await {
                return Ok(replica);
            }
            if began.elapsed() > LIMIT {
                bail!(
                    "replica {n} was not ready within {LIMIT:?}{}",
                    replica.log_tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// HAProxy in the foreground in front of `ports`, as the replica test configures it: round
/// robin per request, no stickiness, `/readyz` checked every 100 ms (down after 1 failure, up
/// after 2 successes), a refused connection retried on another replica.
async fn start_haproxy(
    haproxy: &Path,
    run: &RunDir,
    name: &str,
    ports: &[u16],
) -> Result<(Spawned, u16)> {
    let port = util::free_port()?;
    let mut config = format!(
        "global\n    maxconn 4096\n\ndefaults\n    mode http\n    timeout connect 1s\n    timeout client 60s\n    timeout server 60s\n    retries 3\n    option redispatch 1\n    retry-on conn-failure\n\nfrontend mcp\n    bind 127.0.0.1:{port}\n    default_backend replicas\n\nbackend replicas\n    balance roundrobin\n    option httpchk GET /readyz\n    http-check expect status 200\n"
    );
    for (n, p) in ports.iter().enumerate() {
        config.push_str(&format!(
            "    server r{n} 127.0.0.1:{p} check inter 100 fall 1 rise 2\n"
        ));
    }
    let file = run.file(&format!("haproxy-{name}.cfg"));
    std::fs::write(&file, config).with_context(|| format!("cannot write {}", file.display()))?;
    let check = tokio::process::Command::new(haproxy)
        .args(["-c", "-q", "-f", &file.display().to_string()])
        .status()
        .await
        .context("cannot run haproxy -c")?;
    if !check.success() {
        bail!("haproxy refused its config ({check})");
    }
    let args = vec![
        "-db".to_string(),
        "-f".to_string(),
        file.display().to_string(),
    ];
    let mut balancer = Spawned::start(
        &format!("haproxy {name}"),
        haproxy,
        &args,
        Some(&run.file(&format!("haproxy-{name}.log"))),
        false,
    )?;
    balancer.wait_listening(port, LIMIT).await?;
    // Its first checks.
    tokio::time::sleep(Duration::from_millis(500)).await;
    Ok((balancer, port))
}

/// One call of a loop: when it started (from the loop's start), how long it took, whether it
/// was answered with a result that is not an error.
#[derive(Clone, Debug)]
struct Call {
    start: Duration,
    latency: Duration,
    ok: bool,
}

impl Call {
    fn end(&self) -> Duration {
        self.start + self.latency
    }
}

/// A running call loop: `workers` sessions through `url`, each calling `fault__echo` back to
/// back until [`Loop::finish`] (or [`LOOP_BOUND`]).
struct Loop {
    t0: Instant,
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<(Vec<Call>, Vec<String>)>>,
}

impl Loop {
    async fn start(url: &str, workers: u32) -> Result<Self> {
        let mut clients = Vec::new();
        for _ in 0..workers {
            clients.push(
                RawHttp::connect(url, CALL_TIMEOUT)
                    .await
                    .context("initialize through haproxy")?,
            );
        }
        let t0 = Instant::now();
        let stop = Arc::new(AtomicBool::new(false));
        let tasks = clients
            .into_iter()
            .enumerate()
            .map(|(w, client)| {
                let stop = stop.clone();
                tokio::spawn(async move {
                    let mut calls = Vec::new();
                    let mut errors = Vec::new();
                    let mut i = 0u64;
                    while !stop.load(Ordering::Relaxed) && t0.elapsed() < LOOP_BOUND {
                        i += 1;
                        let message = format!("w{w}-{i}");
                        let start = t0.elapsed();
                        let began = Instant::now();
                        let outcome = client
                            .request(
                                "tools/call",
                                json!({"name": "fault__echo", "arguments": {"message": message}}),
                            )
                            .await;
                        let latency = began.elapsed();
                        let ok = match outcome {
                            Ok((result, _)) if result["isError"] != true => true,
                            Ok((result, _)) => {
                                errors.push(format!("isError: {result}"));
                                false
                            }
                            Err(error) => {
                                errors.push(format!("{error:#}"));
                                false
                            }
                        };
                        calls.push(Call { start, latency, ok });
                    }
                    (calls, errors)
                })
            })
            .collect();
        Ok(Self { t0, stop, tasks })
    }

    fn elapsed(&self) -> Duration {
        self.t0.elapsed()
    }

    async fn sleep_until(&self, at: Duration) {
        tokio::time::sleep_until(self.t0 + at).await;
    }

    /// Stop the workers; every call, by start, and the errors' distinct texts (the first few).
    async fn finish(self) -> Result<(Vec<Call>, Vec<String>)> {
        self.stop.store(true, Ordering::Relaxed);
        let mut calls = Vec::new();
        let mut errors: Vec<String> = Vec::new();
        for task in self.tasks {
            let (c, e) = task.await.context("a call loop's worker")?;
            calls.extend(c);
            for text in e {
                if errors.len() < 8 && !errors.contains(&text) {
                    errors.push(text);
                }
            }
        }
        calls.sort_by_key(|c| c.start);
        Ok((calls, errors))
    }
}

/// The loop's calls in windows of `width`: done per second (by end), started, failed and the
/// slowest call (by start), each window marked with what happened in it.
fn windows(
    calls: &[Call],
    width: Duration,
    end: Duration,
    events: &[(Duration, String)],
) -> (Vec<Vec<String>>, Vec<Value>) {
    let count = end.as_millis().div_ceil(width.as_millis().max(1)) as usize;
    let mut rows = Vec::new();
    let mut json_rows = Vec::new();
    for w in 0..count {
        let from = width * w as u32;
        let to = from + width;
        let done = calls
            .iter()
            .filter(|c| c.end() >= from && c.end() < to)
            .count();
        let started: Vec<&Call> = calls
            .iter()
            .filter(|c| c.start >= from && c.start < to)
            .collect();
        let failed = started.iter().filter(|c| !c.ok).count();
        let max_ms = started
            .iter()
            .map(|c| c.latency.as_secs_f64() * 1e3)
            .fold(0.0, f64::max);
        let per_sec = done as f64 / width.as_secs_f64();
        let marks: Vec<&str> = events
            .iter()
            .filter(|(at, _)| *at >= from && *at < to)
            .map(|(_, what)| what.as_str())
            .collect();
        rows.push(vec![
            format!("{:.1}-{:.1}", from.as_secs_f64(), to.as_secs_f64()),
            format!("{per_sec:.0}"),
            started.len().to_string(),
            failed.to_string(),
            format!("{max_ms:.1}"),
            marks.join("; "),
        ]);
        json_rows.push(json!({
            "from_s": from.as_secs_f64(), "to_s": to.as_secs_f64(),
            "calls_per_s": util::round3(per_sec), "started": started.len(),
            "failed": failed, "max_latency_ms": util::round3(max_ms), "events": marks,
        }));
    }
    (rows, json_rows)
}

const WINDOW_HEADER: [&str; 6] = ["window s", "done/s", "started", "failed", "max ms", "event"];

/// The totals of a loop: calls, failed, calls per second, latency statistics.
fn totals(calls: &[Call], span: Duration) -> Result<Value> {
    let latencies: Vec<Duration> = calls.iter().map(|c| c.latency).collect();
    let stats = Stats::of(&latencies)?;
    let failed = calls.iter().filter(|c| !c.ok).count();
    Ok(json!({
        "calls": calls.len(),
        "failed": failed,
        "calls_per_s": util::round3(calls.len() as f64 / span.as_secs_f64()),
        "latency_ms": stats.json(),
    }))
}

fn print_totals(title: &str, value: &Value) {
    let cell = |v: &Value| v.to_string();
    util::print_table(
        title,
        &[
            "calls",
            "failed",
            "calls/s",
            "median ms",
            "p99 ms",
            "max ms",
        ],
        &[vec![
            cell(&value["calls"]),
            cell(&value["failed"]),
            cell(&value["calls_per_s"]),
            cell(&value["latency_ms"]["median"]),
            cell(&value["latency_ms"]["p99"]),
            cell(&value["latency_ms"]["max"]),
        ]],
    );
}

/// Print a loop's windows, its totals and the errors it saw; the totals and the windows.
fn report_loop(
    title: &str,
    name: &str,
    calls: &[Call],
    errors: &[String],
    width: Duration,
    end: Duration,
    events: &[(Duration, String)],
) -> Result<(Value, Vec<Value>)> {
    let (rows, json_rows) = windows(calls, width, end, events);
    util::print_table(title, &WINDOW_HEADER, &rows);
    let value = totals(calls, end)?;
    print_totals(&format!("{name}: whole loop"), &value);
    for error in errors {
        println!("  error seen: {error}");
    }
    Ok((value, json_rows))
}

fn random_key() -> Result<String> {
    let mut bytes = [0u8; 32];
    let mut urandom = std::fs::File::open("/dev/urandom").context("cannot open /dev/urandom")?;
    std::io::Read::read_exact(&mut urandom, &mut bytes).context("cannot read /dev/urandom")?;
    Ok(base64::engine::general_purpose::STANDARD.encode(bytes))
}

async fn body(
    fault: &Path,
    supervisor: &Path,
    haproxy: &Path,
    run: &RunDir,
    opts: &Options,
) -> Result<Value> {
    let fleet = Fleet {
        fault,
        supervisor,
        key: random_key()?,
        run,
    };
    let ports: Vec<u16> = (0..opts.replicas)
        .map(|_| util::free_port())
        .collect::<Result<_>>()?;
    let mut replicas = Vec::new();
    for (n, port) in ports.iter().enumerate() {
        replicas.push(fleet.start(n, *port).await?);
    }
    let (balancer, port) = start_haproxy(haproxy, run, "all", &ports).await?;
    let url = format!("http://127.0.0.1:{port}/mcp");
    let width = Duration::from_millis(opts.window_ms);

    // 1. kill -9 of one replica mid-loop, started again on its port at once.
    let load = procs::load_now();
    println!("\nfailover (kill -9): load average {load:.2} at start");
    let victim = opts.replicas - 1;
    let steady = Loop::start(&url, opts.workers).await?;
    let kill_at = Duration::from_millis(opts.kill_at_ms);
    steady.sleep_until(kill_at).await;
    let killed_at = steady.elapsed();
    procs::signal(replicas[victim].pid(), Signal::SIGKILL);
    let _ = replicas[victim].wait_exit(LIMIT).await;
    tokio::time::sleep(Duration::from_millis(opts.down_ms)).await;
    replicas[victim] = fleet.start(victim, ports[victim]).await?;
    let back_at = steady.elapsed();
    let end = Duration::from_secs_f64(opts.secs).max(back_at + width * 2);
    steady.sleep_until(end).await;
    let (calls, errors) = steady.finish().await?;
    let events = vec![
        (killed_at, format!("kill -9 r{victim}")),
        (back_at, format!("r{victim} ready again")),
    ];
    let title = format!(
        "failover: {} workers back to back, r{victim} of {} killed at {:.2} s, started again after {} ms, ready at {:.2} s",
        opts.workers,
        opts.replicas,
        killed_at.as_secs_f64(),
        opts.down_ms,
        back_at.as_secs_f64()
    );
    let (kill_totals, json_rows) =
        report_loop(&title, "failover", &calls, &errors, width, end, &events)?;
    let failover = json!({
        "load_1m": load, "down_ms": opts.down_ms, "killed_at_s": killed_at.as_secs_f64(), "ready_again_at_s": back_at.as_secs_f64(),
        "totals": kill_totals, "windows": json_rows, "errors": errors,
    });

    // 2. Rolling restart: each replica in turn SIGTERM (drains), exits, starts again; the next
    //    one goes once the balancer has seen it up (2 checks of 100 ms).
    let load = procs::load_now();
    println!("\nrolling restart: load average {load:.2} at start");
    let steady = Loop::start(&url, opts.workers).await?;
    steady.sleep_until(Duration::from_secs(1)).await;
    let mut events = Vec::new();
    let mut exits = Vec::new();
    for n in 0..opts.replicas {
        events.push((steady.elapsed(), format!("SIGTERM r{n}")));
        procs::signal(replicas[n].pid(), Signal::SIGTERM);
        let exited = replicas[n].wait_exit(LIMIT).await;
        events.push((steady.elapsed(), format!("r{n} exited")));
        exits.push(exited);
        replicas[n] = fleet.start(n, ports[n]).await?;
        events.push((steady.elapsed(), format!("r{n} ready")));
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let end = (steady.elapsed() + Duration::from_secs(1))
        .div_duration_f64(width)
        .ceil();
    let end = width * end as u32;
    steady.sleep_until(end).await;
    let (calls, errors) = steady.finish().await?;
    let title = format!(
        "rolling restart: {} workers back to back, {} replicas one after the other (drain {DRAIN_MS} ms)",
        opts.workers, opts.replicas
    );
    let (rolling_totals, json_rows) = report_loop(
        &title,
        "rolling restart",
        &calls,
        &errors,
        width,
        end,
        &events,
    )?;
    let rolling = json!({
        "load_1m": load, "exited_on_sigterm": exits, "totals": rolling_totals,
        "windows": json_rows, "errors": errors,
        "events": events.iter().map(|(at, what)| json!({"at_s": at.as_secs_f64(), "what": what})).collect::<Vec<_>>(),
    });

    // 3. Throughput: N replicas against one, the same HAProxy config with one server line.
    let (single, single_port) = start_haproxy(haproxy, run, "one", &ports[..1]).await?;
    let single_url = format!("http://127.0.0.1:{single_port}/mcp");
    let load = procs::load_now();
    let nproc = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!("\nthroughput: load average {load:.2} at start, nproc {nproc}");
    let mut rows = Vec::new();
    let mut runs = Vec::new();
    let measured = Duration::from_secs_f64(opts.throughput_secs);
    for round in 0..opts.rounds {
        for (label, target) in [
            (format!("{} replicas", opts.replicas), &url),
            ("1 replica".to_string(), &single_url),
        ] {
            let steady = Loop::start(target, opts.concurrency).await?;
            let warm = Duration::from_secs(1);
            steady.sleep_until(warm + measured).await;
            let (calls, errors) = steady.finish().await?;
            let inside: Vec<Call> = calls
                .into_iter()
                .filter(|c| c.end() >= warm && c.end() < warm + measured)
                .collect();
            let value = totals(&inside, measured)?;
            let cell = |v: &Value| v.to_string();
            rows.push(vec![
                format!("{label} (round {})", round + 1),
                opts.concurrency.to_string(),
                cell(&value["calls_per_s"]),
                cell(&value["failed"]),
                cell(&value["latency_ms"]["median"]),
                cell(&value["latency_ms"]["p99"]),
                nproc.to_string(),
            ]);
            runs.push(
                json!({"target": label, "round": round + 1, "totals": value, "errors": errors}),
            );
        }
    }
    util::print_table(
        &format!(
            "throughput through HAProxy, {} workers (sessions) back to back, {:.0} s measured each",
            opts.concurrency, opts.throughput_secs
        ),
        &[
            "target",
            "c",
            "calls/s",
            "failed",
            "median ms",
            "p99 ms",
            "nproc",
        ],
        &rows,
    );
    let throughput =
        json!({"load_1m": load, "nproc": nproc, "concurrency": opts.concurrency, "runs": runs});

    drop(single);
    drop(balancer);
    for mut replica in replicas {
        replica.stop(LIMIT).await;
    }
    Ok(json!({"failover": failover, "rolling": rolling, "throughput": throughput}))
}
