//! `dashboard`: what the dashboard (SPEC §15, issue 32) costs.
//!
//! - **CPU and bytes of an idle page**: a real `mcp-supervisor serve --stdio --admin
//!   127.0.0.1:PORT` over N stdio fault servers (a host's client on its stdio face, initialized,
//!   then silent), all ready. Each round has two windows of W seconds, in alternating order: no page open, and one
//!   `GET /dashboard/events` stream read by a plain client (a raw TCP socket, every byte counted).
//!   The proxy's CPU over a window is `utime + stime` of `/proc/PID/stat` (the proxy process only;
//!   the fault servers and the orphan guard are children and not counted), with the sum of its
//!   threads' `schedstat` (ns) beside it. The window of the stream starts once its first state
//!   has arrived: that state's bytes are the cost of opening a page, reported apart, as are the
//!   bytes of one `GET /dashboard/state`.
//! - **Event memory** (in process, before the proxy starts): `Histories` (the map the hub keeps,
//!   one `ServerHistory` per server) driven with simulated time, as the hub drives it: for each
//!   of H servers an hour of calls at 100 calls/s and twice the event ring's bound of events, each
//!   with a detail longer than the cut; the heap in use (glibc's `mallinfo2`) before and after,
//!   divided by H. One `ServerHistory` alone, boxed, the same way.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use mcp_supervisor::history::{DETAIL_BYTES, EVENTS, Histories, MINUTES, ServerHistory};
use mcp_supervisor::supervisor::Parked;
use mcp_supervisor::{Hub, Phase, Snapshot};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::procs::{self, RunDir};
use crate::{lists, startup, util};

/// Issue 32: an idle dashboard adds at most this much CPU (% of one core) to a proxy with 50
/// servers.
const CPU_TARGET_PCT: f64 = 1.0;
/// Issue 32: one open page costs at most this many bytes per second when nothing happens.
const BYTES_TARGET_PER_SEC: f64 = 2048.0;
/// Issue 32: event memory per server for an hour of history at 100 calls/s.
const MEMORY_TARGET_BYTES: f64 = 64.0 * 1024.0;
/// The simulated call rate of the memory part.
const CALLS_PER_SEC: u64 = 100;
/// The simulated span of the memory part: one hour, in ms.
const HOUR_MS: u64 = 3_600_000;

pub struct Options {
    pub servers: u32,
    pub window_secs: u64,
    pub rounds: u32,
    pub histories: u32,
    pub supervisor: Option<PathBuf>,
}

pub async fn run(fault: &Path, opts: Options) -> Result<Value> {
    let supervisor = match &opts.supervisor {
        Some(path) => path.clone(),
        None => util::supervisor_beside()?,
    };
    // In process first, with nothing else running in this process.
    let memory = memory(fault, opts.histories).await?;
    let run = RunDir::new("dashboard")?;
    procs::measured(&run, measure(fault, &supervisor, &run, &opts, memory)).await
}

// === event memory ===

/// The heap in use of this process, in bytes: glibc's `mallinfo2`, every arena (`uordblks`) and
/// the chunks mapped on their own (`hblkhd`). The bench uses the system allocator (no global
/// allocator of its own), so this is every allocation of the process.
fn heap_in_use() -> usize {
    #[repr(C)]
    struct MallInfo2 {
        arena: usize,
        ordblks: usize,
        smblks: usize,
        hblks: usize,
        hblkhd: usize,
        usmblks: usize,
        fsmblks: usize,
        uordblks: usize,
        fordblks: usize,
        keepcost: usize,
    }
    unsafe extern "C" {
        /// glibc ≥ 2.33; reads the allocator's own counters.
        fn mallinfo2() -> MallInfo2;
    }
    // SAFETY: mallinfo2 takes no argument and returns a plain struct by value; it only reads
    // the allocator's statistics (under its locks).
    let info = unsafe { mallinfo2() };
    info.uordblks + info.hblkhd
}

struct Memory {
    /// Histories measured together.
    servers: u32,
    /// Heap bytes per server in `Histories` (its map entry, key, lock and history).
    per_server: f64,
    /// Heap bytes of one boxed `ServerHistory` alone (the median of five).
    one: f64,
    /// What one history holds at the end (checked to be full).
    events: usize,
    minutes: usize,
    calls: u32,
    /// Wall time of driving one history through its hour, ms.
    drive_ms: f64,
}

/// A snapshot to change (its fields are public; the struct may grow more): the first one of a
/// server of a hub that is stopped at once.
async fn a_snapshot(fault: &Path) -> Result<Snapshot> {
    let config = util::hub_config(json!({ "s": { "command": fault } }))?;
    let hub = Hub::start(config);
    util::with_hub(hub, async |hub: &Hub| {
        let watch = hub.watch("s").context("server s is not configured")?;
        let snapshot = watch.borrow().clone();
        Ok(snapshot)
    })
    .await
}

/// An hour at [`CALLS_PER_SEC`] from `start` (a whole minute), calls of varied latency, 1 % failed, with
/// `2 * EVENTS` events spread over it, each a new generation needing a login, with the snapshot's
/// error (longer than the cut) as its detail. Returns the time of the last call.
fn drive(history: &mut ServerHistory, snapshot: &mut Snapshot, start: SystemTime) -> SystemTime {
    let calls = HOUR_MS / 1000 * CALLS_PER_SEC;
    let step_ms = 1000 / CALLS_PER_SEC;
    let events = 2 * EVENTS as u64;
    let event_every_ms = HOUR_MS / events;
    let mut next_event = 0u64;
    let mut last = start;
    for i in 0..calls {
        let at_ms = i * step_ms;
        while next_event < events && next_event * event_every_ms <= at_ms {
            snapshot.generation = next_event + 1;
            history.saw(
                snapshot,
                start + Duration::from_millis(next_event * event_every_ms),
            );
            next_event += 1;
        }
        last = start + Duration::from_millis(at_ms);
        let took = Duration::from_micros(50 + (i * 7919) % 200_000);
        history.call(last, took, i % 100 != 0);
    }
    last
}

async fn memory(fault: &Path, servers: u32) -> Result<Memory> {
    let mut snapshot = a_snapshot(fault).await?;
    snapshot.phase = Phase::Parked(Parked::NeedsAuth);
    snapshot.attempt = 0;
    snapshot.last_error = Some("x".repeat(2 * DETAIL_BYTES));
    // A whole minute, so that the hour's calls fall in exactly MINUTES minutes.
    let start = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let names: Vec<String> = (0..servers).map(|i| format!("server-{i:03}")).collect();

    // The heap is the whole process's: let the hub's tasks end and free what they held first.
    tokio::time::sleep(Duration::from_secs(1)).await;

    // One history alone, five times (the median: another thread may allocate or free meanwhile).
    let mut ones = Vec::new();
    let mut drive_ms = 0.0;
    let mut now = start;
    let (mut events, mut minutes, mut calls) = (0, 0, 0);
    for _ in 0..5 {
        let before = heap_in_use();
        let mut one = Box::new(ServerHistory::default());
        let began = Instant::now();
        now = drive(&mut one, &mut snapshot, start);
        drive_ms = began.elapsed().as_secs_f64() * 1000.0;
        ones.push(heap_in_use() as f64 - before as f64);
        let held = one.events(now);
        if held.len() != EVENTS
            || held
                .iter()
                .any(|e| e.detail.as_ref().map(String::len) != Some(DETAIL_BYTES))
        {
            bail!(
                "the history holds {} events, not {EVENTS} each with a detail of {DETAIL_BYTES} bytes",
                held.len()
            );
        }
        events = held.len();
        minutes = one.minutes(now).len();
        calls = one.hour(now).calls;
    }
    let one = median(ones);

    // The hub's map of them.
    let histories = Histories::default();
    let before = heap_in_use();
    for name in &names {
        histories.with(name, |history| drive(history, &mut snapshot, start));
    }
    let after = heap_in_use();
    let full = names.iter().all(|name| {
        histories
            .read(name, |h| {
                h.events(now).len() == EVENTS && h.minutes(now).len() == MINUTES
            })
            .unwrap_or(false)
    });
    if !full {
        bail!("a history of the map does not hold {EVENTS} events and {MINUTES} minutes");
    }
    drop(histories);
    Ok(Memory {
        servers,
        per_server: (after as f64 - before as f64) / f64::from(servers),
        one,
        events,
        minutes,
        calls,
        drive_ms,
    })
}

// === the proxy ===

fn write_config(fault: &Path, run: &RunDir, servers: u32) -> Result<PathBuf> {
    let mut entries = serde_json::Map::new();
    for i in 0..servers {
        entries.insert(format!("s{i:02}"), json!({ "command": fault }));
    }
    procs::write_config(run, entries)
}

/// `utime + stime` of `pid` (itself, not its children), in clock ticks.
fn cpu_ticks(pid: u32) -> Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("cannot read /proc/{pid}/stat"))?;
    // pid (comm) state(3) ... utime(14) stime(15): counted from the field after the comm.
    let rest = &stat[stat.rfind(')').context("no comm in /proc/PID/stat")? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| -> Result<u64> {
        fields
            .get(n - 3)
            .context("/proc/PID/stat is short")?
            .parse()
            .context("a field of /proc/PID/stat is not a number")
    };
    Ok(field(14)? + field(15)?)
}

/// Clock ticks per second (`getconf CLK_TCK`; 100 on Linux).
fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// CPU readings of the proxy at one moment.
#[derive(Clone, Copy)]
struct Cpu {
    at: Instant,
    ticks: u64,
    ns: u64,
}

impl Cpu {
    fn now(pid: u32) -> Result<Self> {
        Ok(Self {
            at: Instant::now(),
            ticks: cpu_ticks(pid)?,
            ns: procs::cpu_ns(pid).context("the proxy is gone")?,
        })
    }

    /// % of one core since `earlier`: from the ticks, and from schedstat.
    fn since(&self, earlier: &Cpu, hz: f64) -> (f64, f64) {
        let wall = (self.at - earlier.at).as_secs_f64();
        let ticks = (self.ticks - earlier.ticks) as f64 / hz;
        let ns = (self.ns.saturating_sub(earlier.ns)) as f64 / 1e9;
        (100.0 * ticks / wall, 100.0 * ns / wall)
    }
}

/// A chunked body's data, as far as it is complete; the whole of `raw` when not chunked.
fn dechunk(raw: &[u8], chunked: bool) -> Vec<u8> {
    if !chunked {
        return raw.to_vec();
    }
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(eol) = raw[at..].windows(2).position(|w| w == b"\r\n") {
        let line = String::from_utf8_lossy(&raw[at..at + eol]);
        let Ok(size) = usize::from_str_radix(line.split(';').next().unwrap_or("").trim(), 16)
        else {
            break;
        };
        let data = at + eol + 2;
        if size == 0 || raw.len() < data + size + 2 {
            break;
        }
        out.extend_from_slice(&raw[data..data + size]);
        at = data + size + 2;
    }
    out
}

/// A plain HTTP/1.1 GET over a raw socket: every byte that comes is counted.
struct Get {
    socket: TcpStream,
    /// Everything received, headers included.
    raw: Vec<u8>,
    /// Where the body starts in `raw`, once the headers are in.
    body_at: Option<usize>,
    chunked: bool,
}

impl Get {
    async fn open(port: u16, path: &str, close: bool) -> Result<Self> {
        let mut socket = TcpStream::connect(("127.0.0.1", port))
            .await
            .with_context(|| format!("cannot connect to 127.0.0.1:{port}"))?;
        let connection = if close { "close" } else { "keep-alive" };
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAccept: */*\r\nConnection: {connection}\r\n\r\n"
        );
        socket.write_all(request.as_bytes()).await?;
        Ok(Self {
            socket,
            raw: Vec::with_capacity(1 << 20),
            body_at: None,
            chunked: false,
        })
    }

    /// Read once; false at the end of the stream.
    async fn read(&mut self) -> Result<bool> {
        let n = self.socket.read_buf(&mut self.raw).await?;
        if self.body_at.is_none()
            && let Some(end) = self.raw.windows(4).position(|w| w == b"\r\n\r\n")
        {
            let head = String::from_utf8_lossy(&self.raw[..end]).to_ascii_lowercase();
            if !head.starts_with("http/1.1 200") {
                bail!(
                    "the answer is not 200: {}",
                    head.lines().next().unwrap_or("")
                );
            }
            self.chunked = head.contains("transfer-encoding: chunked");
            self.body_at = Some(end + 4);
        }
        Ok(n > 0)
    }

    fn body(&self) -> Vec<u8> {
        self.body_at
            .map_or_else(Vec::new, |at| dechunk(&self.raw[at..], self.chunked))
    }
}

/// The bytes of one `GET path` (body, whole answer) read to its end.
async fn get_once(port: u16, path: &str) -> Result<(usize, usize)> {
    let mut get = Get::open(port, path, true).await?;
    tokio::time::timeout(Duration::from_secs(30), async {
        while get.read().await? {}
        Ok::<_, anyhow::Error>(())
    })
    .await
    .with_context(|| format!("GET {path} did not end within 30 s"))??;
    Ok((get.body().len(), get.raw.len()))
}

/// One window of W seconds.
struct Window {
    cpu_pct: f64,
    cpu_pct_schedstat: f64,
    load: f64,
}

/// One window with the stream open.
struct Streamed {
    window: Window,
    /// The first state: body bytes, and wire bytes up to its end (headers included).
    first_body: usize,
    first_wire: usize,
    /// During the window: body and wire bytes, states and comments (keep-alives) received.
    body: usize,
    wire: usize,
    states: usize,
    comments: usize,
}

async fn idle_window(pid: u32, secs: u64, hz: f64) -> Result<Window> {
    let load = procs::load_now();
    let before = Cpu::now(pid)?;
    tokio::time::sleep(Duration::from_secs(secs)).await;
    let (cpu_pct, cpu_pct_schedstat) = Cpu::now(pid)?.since(&before, hz);
    Ok(Window {
        cpu_pct,
        cpu_pct_schedstat,
        load,
    })
}

async fn stream_window(pid: u32, port: u16, secs: u64, hz: f64) -> Result<Streamed> {
    let mut stream = Get::open(port, "/dashboard/events", false).await?;
    // The first state, whole (an event ends with a blank line).
    let first_body = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if !stream.read().await? {
                bail!("the event stream ended before its first state");
            }
            let body = stream.body();
            if let Some(end) = body.windows(2).position(|w| w == b"\n\n") {
                return Ok(end + 2);
            }
        }
    })
    .await
    .context("no first state within 10 s")??;
    let first_wire = stream.raw.len();
    let body_before = stream.body().len();
    let load = procs::load_now();
    let before = Cpu::now(pid)?;
    let deadline = before.at + Duration::from_secs(secs);
    loop {
        match tokio::time::timeout_at(deadline, stream.read()).await {
            Err(_) => break,
            Ok(Ok(true)) => {}
            Ok(Ok(false)) => bail!("the event stream ended during the window"),
            Ok(Err(e)) => return Err(e.context("reading the event stream")),
        }
    }
    let (cpu_pct, cpu_pct_schedstat) = Cpu::now(pid)?.since(&before, hz);
    let body = stream.body();
    let window = &body[body_before.min(body.len())..];
    let text = String::from_utf8_lossy(window);
    let states = text.matches("event: state").count();
    let comments = text.lines().filter(|l| l.starts_with(':')).count();
    Ok(Streamed {
        window: Window {
            cpu_pct,
            cpu_pct_schedstat,
            load,
        },
        first_body,
        first_wire,
        body: window.len(),
        wire: stream.raw.len() - first_wire,
        states,
        comments,
    })
}

struct Round {
    idle: Window,
    streamed: Streamed,
    stream_first: bool,
}

fn median(values: impl IntoIterator<Item = f64>) -> f64 {
    let values: Vec<f64> = values.into_iter().collect();
    util::Stats::of_ms(values).map_or(f64::NAN, |s| s.median)
}

async fn measure(
    fault: &Path,
    supervisor: &Path,
    run: &RunDir,
    opts: &Options,
    memory: Memory,
) -> Result<Value> {
    let config = write_config(fault, run, opts.servers)?;
    let port = util::free_port()?;
    // Its registry entry (a Unix socket) in the run's folder, not the user's.
    let runtime = run.file("runtime");
    std::fs::create_dir_all(&runtime)?;
    let runtime = runtime.display().to_string();
    let extra = ["--stdio", "--admin", &format!("127.0.0.1:{port}")].map(str::to_string);
    // A host's client on its stdio face, initialized, then silent.
    let (mut proxy, _client) = startup::serve_stdio_env(
        supervisor,
        &config,
        &run.file("state"),
        run,
        &extra,
        &[("XDG_RUNTIME_DIR", runtime.as_str())],
        Duration::from_secs(60),
    )
    .await?;
    let pid = proxy.pid();
    proxy.wait_listening(port, Duration::from_secs(30)).await?;
    let started = Instant::now();
    let url = format!("http://127.0.0.1:{port}");
    lists::wait_all_ready(&url, opts.servers as usize, Duration::from_secs(120))
        .await
        .map_err(|e| anyhow::anyhow!("{e:#}{}", proxy.log_tail()))?;
    let ready_in = started.elapsed();
    // Let the start settle (catalogs written, first probes not yet due).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (state_body, state_wire) = get_once(port, "/dashboard/state").await?;
    let hz = clock_ticks();

    let mut rounds = Vec::new();
    for r in 0..opts.rounds {
        let stream_first = r % 2 == 1;
        let (idle, streamed) = if stream_first {
            let s = stream_window(pid, port, opts.window_secs, hz).await?;
            (idle_window(pid, opts.window_secs, hz).await?, s)
        } else {
            let i = idle_window(pid, opts.window_secs, hz).await?;
            (i, stream_window(pid, port, opts.window_secs, hz).await?)
        };
        println!(
            "  round {}: without {:.3} %, with {:.3} % of a core; {} B of events ({} states, {} comments)",
            r + 1,
            idle.cpu_pct,
            streamed.window.cpu_pct,
            streamed.wire,
            streamed.states,
            streamed.comments
        );
        rounds.push(Round {
            idle,
            streamed,
            stream_first,
        });
    }
    let alive = cpu_ticks(pid).is_ok();
    proxy.stop(Duration::from_secs(10)).await;
    if !alive {
        bail!("the proxy was gone at the end{}", proxy.log_tail());
    }

    // Report.
    let w = opts.window_secs as f64;
    let servers = opts.servers;
    println!(
        "\ndashboard: `mcp-supervisor serve --stdio --admin` over {servers} stdio fault servers, all ready {:.1} s after the admin port listened; {} rounds of two {}-s windows (order alternating); CPU of the proxy process only ({hz} ticks/s; schedstat beside it)",
        ready_in.as_secs_f64(),
        opts.rounds,
        opts.window_secs
    );
    let f3 = |x: f64| format!("{x:.3}");
    let mut rows: Vec<Vec<String>> = rounds
        .iter()
        .enumerate()
        .map(|(i, r)| {
            vec![
                format!(
                    "{}{}",
                    i + 1,
                    if r.stream_first { " (with first)" } else { "" }
                ),
                f3(r.idle.cpu_pct),
                f3(r.streamed.window.cpu_pct),
                f3(r.streamed.window.cpu_pct - r.idle.cpu_pct),
                f3(r.streamed.window.cpu_pct_schedstat - r.idle.cpu_pct_schedstat),
                format!("{:.1}", r.streamed.wire as f64 / w),
                format!("{:.1}", r.streamed.body as f64 / w),
                format!("{}/{}", r.streamed.states, r.streamed.comments),
                format!("{:.2}/{:.2}", r.idle.load, r.streamed.window.load),
            ]
        })
        .collect();
    let cpu_idle = median(rounds.iter().map(|r| r.idle.cpu_pct));
    let cpu_with = median(rounds.iter().map(|r| r.streamed.window.cpu_pct));
    let cpu_added = median(
        rounds
            .iter()
            .map(|r| r.streamed.window.cpu_pct - r.idle.cpu_pct),
    );
    let cpu_added_ns = median(
        rounds
            .iter()
            .map(|r| r.streamed.window.cpu_pct_schedstat - r.idle.cpu_pct_schedstat),
    );
    let wire_rate = median(rounds.iter().map(|r| r.streamed.wire as f64 / w));
    let body_rate = median(rounds.iter().map(|r| r.streamed.body as f64 / w));
    rows.push(vec![
        "median".into(),
        f3(cpu_idle),
        f3(cpu_with),
        f3(cpu_added),
        f3(cpu_added_ns),
        format!("{wire_rate:.1}"),
        format!("{body_rate:.1}"),
        String::new(),
        String::new(),
    ]);
    util::print_table(
        "an idle proxy, without and with one open /dashboard/events",
        &[
            "round",
            "CPU % without",
            "CPU % with",
            "added",
            "added (schedstat)",
            "stream B/s (wire)",
            "B/s (events)",
            "states/comments",
            "load",
        ],
        &rows,
    );
    let first_body = median(rounds.iter().map(|r| r.streamed.first_body as f64));
    let first_wire = median(rounds.iter().map(|r| r.streamed.first_wire as f64));
    println!(
        "\n  one page open: the first state is {first_body:.0} B ({first_wire:.0} B on the wire, headers and chunk lines included)\n  GET /dashboard/state with {servers} servers: {state_body} B ({state_wire} B on the wire)"
    );
    util::print_table(
        &format!(
            "event memory: an hour at {CALLS_PER_SEC} calls/s and {} events (a ring of {EVENTS}, details cut to {DETAIL_BYTES} B), simulated time; heap in use (mallinfo2) before and after",
            2 * EVENTS
        ),
        &["what", "bytes", "KiB"],
        &[
            vec![
                format!("per server, Histories of {} servers", memory.servers),
                format!("{:.0}", memory.per_server),
                format!("{:.1}", memory.per_server / 1024.0),
            ],
            vec![
                "one ServerHistory alone (boxed), median of 5".into(),
                format!("{:.0}", memory.one),
                format!("{:.1}", memory.one / 1024.0),
            ],
        ],
    );
    println!(
        "  each holds {} events and {} minutes ({} calls); one hour driven in {:.0} ms",
        memory.events, memory.minutes, memory.calls, memory.drive_ms
    );

    let worst_memory = memory.per_server.max(memory.one);
    let verdict = |met: bool| if met { "met" } else { "missed" };
    let cpu_met = cpu_added <= CPU_TARGET_PCT;
    let bytes_met = wire_rate <= BYTES_TARGET_PER_SEC;
    let memory_met = worst_memory <= MEMORY_TARGET_BYTES;
    println!(
        "\ntargets (issue 32)\n  an idle dashboard adds <= {CPU_TARGET_PCT} % CPU to a proxy with {servers} servers: {} ({cpu_added:+.3} %, median of {} rounds)\n  one open page costs <= 2 KiB/s of events when nothing happens: {} ({wire_rate:.1} B/s on the wire)\n  event memory <= 64 KiB per server for an hour at 100 calls/s: {} ({:.1} KiB)",
        verdict(cpu_met),
        opts.rounds,
        verdict(bytes_met),
        verdict(memory_met),
        worst_memory / 1024.0
    );

    let round_json: Vec<Value> = rounds
        .iter()
        .map(|r| {
            json!({
                "stream_first": r.stream_first,
                "cpu_pct_without": util::round3(r.idle.cpu_pct),
                "cpu_pct_with": util::round3(r.streamed.window.cpu_pct),
                "cpu_pct_without_schedstat": util::round3(r.idle.cpu_pct_schedstat),
                "cpu_pct_with_schedstat": util::round3(r.streamed.window.cpu_pct_schedstat),
                "stream_wire_bytes": r.streamed.wire,
                "stream_event_bytes": r.streamed.body,
                "states": r.streamed.states,
                "comments": r.streamed.comments,
                "first_state_bytes": r.streamed.first_body,
                "load_without": r.idle.load,
                "load_with": r.streamed.window.load,
            })
        })
        .collect();
    Ok(json!({
        "bench": "dashboard",
        "servers": servers,
        "window_secs": opts.window_secs,
        "rounds": round_json,
        "all_ready_ms": util::round3(ready_in.as_secs_f64() * 1000.0),
        "clock_ticks_per_sec": hz,
        "median": {
            "cpu_pct_without": util::round3(cpu_idle),
            "cpu_pct_with": util::round3(cpu_with),
            "cpu_pct_added": util::round3(cpu_added),
            "cpu_pct_added_schedstat": util::round3(cpu_added_ns),
            "stream_wire_bytes_per_sec": util::round3(wire_rate),
            "stream_event_bytes_per_sec": util::round3(body_rate),
            "first_state_bytes": first_body,
            "first_state_wire_bytes": first_wire,
        },
        "dashboard_state_bytes": state_body,
        "dashboard_state_wire_bytes": state_wire,
        "memory": {
            "histories": memory.servers,
            "per_server_bytes": util::round3(memory.per_server),
            "one_server_history_bytes": util::round3(memory.one),
            "events": memory.events,
            "minutes": memory.minutes,
            "calls": memory.calls,
        },
        "targets": {
            "idle_cpu_added_le_1pct": cpu_met,
            "idle_stream_le_2kib_per_sec": bytes_met,
            "memory_per_server_le_64kib": memory_met,
        },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunked_body_is_read_as_far_as_it_is_complete() {
        let raw = b"5\r\nhello\r\n3;x=1\r\n, w\r\n4\r\norl";
        assert_eq!(dechunk(raw, true), b"hello, w");
        assert_eq!(dechunk(b"0\r\n\r\n", true), b"");
        assert_eq!(dechunk(b"as is", false), b"as is");
    }

    #[test]
    fn this_process_s_cpu_ticks_and_heap_are_read() {
        assert!(cpu_ticks(std::process::id()).is_ok());
        let before = heap_in_use();
        let block = vec![1u8; 1 << 20];
        // Other tests may free a little meanwhile.
        assert!(heap_in_use() + (64 << 10) >= before + (1 << 20));
        drop(block);
    }
}
