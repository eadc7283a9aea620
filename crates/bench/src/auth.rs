//! `auth`: the targets of issue 31 for identity on the HTTP face (SPEC §14), side by side in one
//! run, against a real identity provider: the pinned npm `oidc-provider` (testkit's [`Idp`]),
//! which issues RS256 JWT access tokens (RFC 9068) by client credentials with a resource
//! indicator (the token's `aud` is the face's `/mcp` URL).
//!
//! 1. **In process**, [`Verifier::check`] of the `Authorization` header:
//!    - a token already verified (the verified-token cache), timed call by call, many times
//!      (target: median ≤ 2 µs); the cost of the timer itself is printed beside it;
//!    - a first verification (RS256): each sample a token the verifier has not seen (fresh from
//!      the IdP), its keys already cached; the bench checks that each cost one signature check.
//! 2. **The HTTP face through the TypeScript SDK's client** (ts-peers' machinery: the same
//!    `crates/bench/ts/ts-client.mjs` for every target, one long-lived client each, rounds
//!    alternating), `echo` of 1 KiB to server-everything through
//!
//!    | id | what |
//!    |---|---|
//!    | `direct` | server-everything spawned by the client (no hop): the floor of "added" |
//!    | `ours-http` | `mcp-supervisor serve --http`, one server, no `auth` |
//!    | `ours-http-audit` | the same without `auth`, with `--audit FILE` (a line per call) |
//!    | `ours-http-auth` | the same with `auth` (the client sends `Authorization: Bearer`, `--bearer-file`) |
//!    | `relay-http` | the bare HTTP→stdio relay, as ts-peers runs it |
//!
//!    Targets: `ours-http-auth`'s added median at c=1 (its median minus `direct`'s) ≤ 1.15× the
//!    relay's, and its throughput at c=64 ≥ 0.85× the relay's; `ours-http` is reported the same
//!    way beside it. The audit: `ours-http-audit`'s throughput at c=64 ≥ 0.95× `ours-http`'s
//!    (the "≤ 5 % at 5,000 calls/s": the rate it ran at is printed beside it), and its
//!    file holds one line per call.
//! 3. **A flood**: N (1,000) requests to the `auth` face at once, each with a token whose `kid`
//!    is random (the IdP's header and claims otherwise, its signature kept), then N more at once.
//!    The face's `jwksUri` is a small counting HTTP server of the bench that proxies the IdP's
//!    JWKS, so every fetch of the keys is counted (the one at startup too). Target: the first
//!    flood makes at most 1 fetch; the second, within the 10 s gate, should make none.
//!
//! Each target's verdict is printed (met or missed, with the figures), then the JSON line.
//! Nothing here asserts a timing. The IdP, the counting server, the fronts and the clients are
//! stopped at the end, also on error or Ctrl-C; what still carries the run's marker is killed.

use std::collections::BTreeMap;
use std::hash::{BuildHasher, RandomState};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use futures::{StreamExt, TryStreamExt};
use mcp_supervisor_front::auth::{Access, AuthSettings, Verifier};
use mcp_supervisor_testkit::idp::{Idp, IdpClient, IdpConfig};
use serde_json::{Value, json};
use tokio::task::JoinSet;

use crate::procs::{self, RunDir};
use crate::ts_peers::{self, Measured, Row, Target};
use crate::util::{self, Stats};

/// The face's targets, in the order of the rounds and tables.
pub const FACE: [&str; 5] = [
    "direct",
    "ours-http",
    "ours-http-audit",
    "ours-http-auth",
    "relay-http",
];
/// The scope `/mcp` needs, and the one the bench's client asks for.
const SCOPE: &str = "mcp:tools";
/// The bench's identity at the IdP.
const CLIENT_ID: &str = "bench-app";
const CLIENT_SECRET: &str = "bench-secret";
/// Token lifetime: longer than any run, so no token expires during one.
const TOKEN_TTL_SECS: u64 = 4 * 3600;
/// Tokens asked of the IdP at once, for the first verifications.
const TOKEN_FETCHES_IN_FLIGHT: usize = 8;
/// Bound of one request of a flood.
const FLOOD_REQUEST_LIMIT: Duration = Duration::from_secs(60);
/// Targets: a cached check's median, the face's c=1 added median and c=64 throughput against
/// the relay's, the fetches of a flood.
const CACHED_MEDIAN_US: f64 = 2.0;
const ADDED_MEDIAN_RATIO: f64 = 1.15;
const THROUGHPUT_RATIO: f64 = 0.85;
const FLOOD_FETCHES: u64 = 1;
/// Target: the audit's throughput against the same face without it.
const AUDIT_RATIO: f64 = 0.95;

pub struct Options {
    /// Timed checks of a token already verified.
    pub checks: u32,
    /// First verifications (fresh tokens).
    pub first: u32,
    /// Forged tokens per flood.
    pub flood: u32,
    /// The face's measurement (its `targets` are ignored: always [`FACE`]).
    pub face: ts_peers::Options,
}

pub async fn run(opts: Options) -> Result<Value> {
    opts.face.check()?;
    let run = RunDir::new("auth")?;
    let config = IdpConfig {
        access_token_ttl_secs: TOKEN_TTL_SECS,
        ..IdpConfig::new(&[IdpClient::new(CLIENT_ID, CLIENT_SECRET).with_sub("bench")])
    };
    let mut idp = Idp::start_with(&run.file("idp"), config)
        .await
        .context("cannot start the identity provider (oidc-provider)")?;
    eprintln!("identity provider: {}", idp.issuer());
    let counter = match JwksCounter::start(idp.jwks_uri()).await {
        Ok(counter) => counter,
        Err(e) => {
            idp.stop().await;
            return Err(e);
        }
    };
    let mut targets = Vec::new();
    let outcome = tokio::select! {
        outcome = measure_all(&opts, &run, &idp, &counter, &mut targets) => outcome,
        _ = tokio::signal::ctrl_c() => Err(anyhow!("interrupted")),
    };
    let labels: Vec<(&'static str, String)> =
        targets.iter().map(|t| (t.id, t.label.clone())).collect();
    let ready = targets.first().map(|t| t.ready.clone()).unwrap_or_default();
    for target in targets.drain(..) {
        target.shut_down().await;
    }
    counter.stop();
    idp.stop().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let swept = procs::sweep(&run.marker());
    let measured = outcome?;
    report(&opts, &measured, &labels, &ready, swept)
}

/// Everything the run measured.
struct Measurements {
    idp_version: String,
    token_bytes: usize,
    in_process: InProcess,
    face: ts_peers::Outcome,
    floods: [Flood; 2],
    /// JWKS fetches the counting server saw before the first flood (the face's startup and the
    /// whole measurement of the face).
    fetches_before_floods: u64,
    /// `tools/call` lines in `ours-http-audit`'s audit log at the end of the face's rounds.
    audit_lines: u64,
    audit_cost: AuditCost,
}

async fn measure_all(
    opts: &Options,
    run: &RunDir,
    idp: &Idp,
    counter: &JwksCounter,
    targets: &mut Vec<Target>,
) -> Result<Measurements> {
    let port = util::free_port()?;
    let audience = format!("http://127.0.0.1:{port}/mcp");
    let token = idp
        .token(CLIENT_ID, CLIENT_SECRET, &audience, SCOPE)
        .await?;
    let (header, _) = mcp_supervisor_testkit::idp::claims(&token)?;
    if header["alg"] != "RS256" {
        bail!("the IdP signed with {}, not RS256", header["alg"]);
    }

    eprintln!(
        "in process: {} checks of a cached token, {} first verifications",
        opts.checks, opts.first
    );
    let in_process = in_process(opts, idp, &audience, &token).await?;
    let audit_cost = audit_cost(run)?;

    // The face: the four targets, each with its own client.
    let face = &opts.face;
    let bearer = run.file("bearer");
    let audit = run.file("audit.jsonl");
    write_private(&bearer, &token)?;
    let supervisor = util::supervisor_beside()?;
    for id in FACE {
        let target = match id {
            "direct" | "relay-http" => ts_peers::start(face, run, id, None).await,
            "ours-http" | "ours-http-audit" | "ours-http-auth" => {
                let with_auth = id == "ours-http-auth";
                let front_port = if with_auth { port } else { util::free_port()? };
                let everything = ts_peers::everything_command(face, run);
                let (program, args) = everything
                    .split_first()
                    .context("server-everything's command")?;
                let mut config = json!({
                    "mcpServers": { "everything": { "command": program, "args": args } },
                    // `echo`, as server-everything names it (the client calls it by that name).
                    "naming": { "mode": "original" },
                });
                if with_auth {
                    config["auth"] = json!({
                        "issuer": idp.issuer(),
                        "audience": audience,
                        "scopes": [SCOPE],
                        "adminScopes": ["admin"],
                        "jwksUri": counter.url(),
                    });
                }
                let path = run.file(&format!("{id}.json"));
                std::fs::write(&path, serde_json::to_vec_pretty(&config)?)
                    .with_context(|| format!("cannot write {}", path.display()))?;
                let mut args = procs::serve_http_args(&path, front_port, "0");
                if id == "ours-http-audit" {
                    args.extend(["--audit".to_string(), audit.display().to_string()]);
                }
                let (label, extra) = if id == "ours-http-audit" {
                    (
                        "mcp-supervisor serve --http without auth, with --audit FILE",
                        Vec::new(),
                    )
                } else if with_auth {
                    (
                        "mcp-supervisor serve --http with auth (RS256 JWT access tokens of oidc-provider; the client sends its bearer token)",
                        vec!["--bearer-file".to_string(), bearer.display().to_string()],
                    )
                } else {
                    ("mcp-supervisor serve --http without auth", Vec::new())
                };
                let http = Some((supervisor.clone(), args, front_port));
                ts_peers::launch(face, run, id, label, None, http, &extra).await
            }
            other => bail!("unknown target {other}"),
        }
        .with_context(|| format!("cannot start {id}"))?;
        eprintln!("started {id}: {}", target.label);
        targets.push(target);
    }
    let face = ts_peers::measure(face, targets).await?;
    // The writer batches its lines: a moment for the last batch.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let audit_lines = std::fs::read_to_string(&audit)
        .with_context(|| format!("cannot read the audit log {}", audit.display()))?
        .lines()
        .filter(|line| line.contains("\"tools/call\""))
        .count() as u64;

    let fetches_before_floods = counter.fetches();
    eprintln!(
        "floods: {} tokens with random kids at once, twice (JWKS fetches so far: {fetches_before_floods})",
        opts.flood
    );
    let first = flood(port, &token, opts.flood, counter).await?;
    let second = flood(port, &token, opts.flood, counter).await?;
    Ok(Measurements {
        idp_version: oidc_provider_version(&opts.face.modules),
        token_bytes: token.len(),
        in_process,
        face,
        floods: [first, second],
        fetches_before_floods,
        audit_lines,
        audit_cost,
    })
}

/// Audit records written in process, for their cost per line.
const AUDIT_LINES: u32 = 100_000;
/// Records handed to the audit between two waits for the writer (under its queue's bound).
const AUDIT_BATCH: u32 = 512;

/// What one audit line costs this process: the caller's share (building and queueing the
/// record) and the whole (the writer thread's formatting and appending too), over
/// [`AUDIT_LINES`] lines like the face's (a tool call with its recovery).
struct AuditCost {
    lines: u64,
    dropped: u64,
    caller_us: f64,
    cpu_us: f64,
}

fn audit_cost(run: &RunDir) -> Result<AuditCost> {
    use mcp_supervisor_front::audit::{Audit, Outcome, Pending, Recovery, Target, Who};
    let path = run.file("in-process-audit.jsonl");
    let audit = Audit::open(&path).context("cannot open the in-process audit log")?;
    let who = Who::new(Some("bench"), Some(CLIENT_ID), Some("a-session-id"));
    let recovery = Recovery {
        attempts: Some(1),
        replayed: Some(false),
        generations: Some(vec![1]),
    };
    let cpu_before = procs::cpu_ns(std::process::id()).context("this process's CPU")?;
    let mut caller = Duration::ZERO;
    let mut written = 0;
    while written < AUDIT_LINES {
        let batch = AUDIT_BATCH.min(AUDIT_LINES - written);
        let began = std::time::Instant::now();
        for _ in 0..batch {
            let mut pending = Pending::new(who.clone(), "tools/call");
            pending.routed("everything", Some(Target::Tool("echo".into())));
            audit.record(pending.finish(Outcome::Ok, recovery.clone()));
        }
        caller += began.elapsed();
        written += batch;
        audit
            .flush(Duration::from_secs(10))
            .context("the audit writer did not keep up")?;
    }
    let cpu = procs::cpu_ns(std::process::id()).context("this process's CPU")? - cpu_before;
    let dropped = audit.dropped() + audit.lost();
    drop(audit);
    let lines = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?
        .lines()
        .count() as u64;
    let per = |ns: f64| ns / 1000.0 / f64::from(AUDIT_LINES);
    Ok(AuditCost {
        lines,
        dropped,
        caller_us: per(caller.as_nanos() as f64),
        cpu_us: per(cpu as f64),
    })
}

/// What `Verifier::check` costs, in microseconds.
struct InProcess {
    cached: Stats,
    /// The cached checks' whole loop over their count (the timer's cost included).
    cached_mean_us: f64,
    /// The median of two `Instant::now()` back to back: what the timer adds to each sample.
    timer_us: f64,
    first: Stats,
}

async fn in_process(opts: &Options, idp: &Idp, audience: &str, token: &str) -> Result<InProcess> {
    let mut settings = AuthSettings::new(idp.issuer(), audience);
    settings.scopes = vec![SCOPE.to_string()];
    settings.admin_scopes = vec!["admin".to_string()];
    let verifier = Verifier::new(settings).context("the verifier's settings")?;
    verifier
        .refresh_keys()
        .await
        .context("cannot fetch the IdP's keys")?;
    let authorization = format!("Bearer {token}");
    verifier
        .check(Some(&authorization), Access::Mcp)
        .await
        .map_err(|r| anyhow!("the IdP's token was refused: {r:?}"))?;

    let timer: Vec<f64> = (0..10_000)
        .map(|_| {
            let begin = std::time::Instant::now();
            let end = std::time::Instant::now();
            micros(end - begin)
        })
        .collect();
    let timer_us = Stats::of_ms(timer)?.median;

    // A token already verified: warm up, then time each check.
    let checks_before = verifier.signature_checks();
    for _ in 0..1000.min(opts.checks) {
        let _ = verifier.check(Some(&authorization), Access::Mcp).await;
    }
    let mut cached = Vec::with_capacity(opts.checks as usize);
    let loop_began = std::time::Instant::now();
    for _ in 0..opts.checks {
        let begin = std::time::Instant::now();
        let checked = verifier.check(Some(&authorization), Access::Mcp).await;
        cached.push(micros(begin.elapsed()));
        if let Err(refusal) = checked {
            bail!("a cached token was refused: {refusal:?}");
        }
    }
    let cached_mean_us = micros(loop_began.elapsed()) / f64::from(opts.checks.max(1));
    if verifier.signature_checks() != checks_before {
        bail!("a check of the cached token verified a signature: it was not found in the cache");
    }

    // First verifications: tokens the verifier has not seen, its keys cached.
    let tokens: Vec<String> = futures::stream::iter(0..opts.first)
        .map(|_| idp.token(CLIENT_ID, CLIENT_SECRET, audience, SCOPE))
        .buffer_unordered(TOKEN_FETCHES_IN_FLIGHT)
        .try_collect()
        .await?;
    let distinct: std::collections::HashSet<&String> = tokens.iter().collect();
    if distinct.len() != tokens.len() || distinct.contains(&token.to_string()) {
        bail!("the IdP issued the same token twice");
    }
    let checks_before = verifier.signature_checks();
    let mut first = Vec::with_capacity(tokens.len());
    for token in &tokens {
        let authorization = format!("Bearer {token}");
        let begin = std::time::Instant::now();
        let checked = verifier.check(Some(&authorization), Access::Mcp).await;
        first.push(micros(begin.elapsed()));
        if let Err(refusal) = checked {
            bail!("a fresh token was refused: {refusal:?}");
        }
    }
    let checked = verifier.signature_checks() - checks_before;
    if checked != u64::from(opts.first) {
        bail!(
            "{} first verifications made {checked} signature checks, not one each",
            opts.first
        );
    }
    Ok(InProcess {
        cached: Stats::of_ms(cached)?,
        cached_mean_us,
        timer_us,
        first: Stats::of_ms(first)?,
    })
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Write `text` to a new file only this user may read.
fn write_private(path: &Path, text: &str) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    file.write_all(text.as_bytes())?;
    Ok(())
}

fn oidc_provider_version(modules: &Path) -> String {
    std::fs::read_to_string(modules.join("oidc-provider/package.json"))
        .ok()
        .and_then(|text| serde_json::from_str::<Value>(&text).ok())
        .and_then(|v| v["version"].as_str().map(String::from))
        .unwrap_or_else(|| "?".into())
}

// === the counting JWKS server ===

/// An HTTP server on 127.0.0.1 whose `GET /jwks` counts the request and answers what the IdP's
/// JWKS answers (fetched anew each time): the face's `jwksUri`.
struct JwksCounter {
    port: u16,
    state: Arc<Upstream>,
    task: tokio::task::JoinHandle<()>,
}

struct Upstream {
    url: String,
    http: reqwest::Client,
    fetches: AtomicU64,
}

impl JwksCounter {
    async fn start(upstream: String) -> Result<Self> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .context("cannot listen for the counting JWKS server")?;
        let port = listener.local_addr()?.port();
        let state = Arc::new(Upstream {
            url: upstream,
            http: reqwest::Client::builder()
                .no_proxy()
                .timeout(Duration::from_secs(5))
                .build()?,
            fetches: AtomicU64::new(0),
        });
        let app = Router::new()
            .route("/jwks", get(proxy_jwks))
            .with_state(state.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { port, state, task })
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/jwks", self.port)
    }

    fn fetches(&self) -> u64 {
        self.state.fetches.load(Ordering::SeqCst)
    }

    fn stop(self) {
        self.task.abort();
    }
}

async fn proxy_jwks(State(upstream): State<Arc<Upstream>>) -> Response {
    upstream.fetches.fetch_add(1, Ordering::SeqCst);
    let answer = match upstream.http.get(&upstream.url).send().await {
        Ok(answer) => answer,
        Err(e) => return (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
    };
    let status = answer.status();
    match answer.bytes().await {
        Ok(body) => (status, [(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(e) => (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
    }
}

// === the flood ===

/// One flood: what the face answered, how long it took, and the JWKS fetches it caused.
struct Flood {
    sent: u32,
    /// "401", "403", ... or "error: ..." (a request that got no answer), and how many.
    answers: BTreeMap<String, u32>,
    wall_ms: f64,
    fetches: u64,
}

/// `n` POSTs of `initialize` to the face on `port` at once, each with `token` under a random
/// `kid` (each a task of its own, on its own connection).
async fn flood(port: u16, token: &str, n: u32, counter: &JwksCounter) -> Result<Flood> {
    let forged: Vec<String> = (0..n)
        .map(|i| with_kid(token, &random_kid(i)))
        .collect::<Result<_>>()?;
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(FLOOD_REQUEST_LIMIT)
        .build()?;
    let url = format!("http://127.0.0.1:{port}/mcp");
    let body = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": { "name": "mcp-supervisor-bench-flood", "version": "0.1.0" },
        },
    })
    .to_string();
    let before = counter.fetches();
    let began = std::time::Instant::now();
    let mut requests = JoinSet::new();
    for token in forged {
        let (http, url, body) = (http.clone(), url.clone(), body.clone());
        requests.spawn(async move {
            let answer = http
                .post(&url)
                .header(header::CONTENT_TYPE, "application/json")
                .header(header::ACCEPT, "application/json, text/event-stream")
                .bearer_auth(token)
                .body(body)
                .send()
                .await;
            match answer {
                Ok(answer) => {
                    let status = answer.status().as_u16().to_string();
                    let _ = answer.bytes().await;
                    status
                }
                Err(e) => format!("error: {e}"),
            }
        });
    }
    let mut answers = BTreeMap::new();
    while let Some(answer) = requests.join_next().await {
        let answer = answer.unwrap_or_else(|e| format!("error: {e}"));
        *answers.entry(answer).or_insert(0) += 1;
    }
    let wall_ms = began.elapsed().as_secs_f64() * 1000.0;
    // A fetch is awaited by the requests that caused it; a moment more for a late one.
    tokio::time::sleep(Duration::from_millis(200)).await;
    Ok(Flood {
        sent: n,
        answers,
        wall_ms,
        fetches: counter.fetches() - before,
    })
}

/// 128 bits of a per-process random hash of `i`, as hex.
fn random_kid(i: u32) -> String {
    let (a, b) = (RandomState::new(), RandomState::new());
    format!("{:016x}{:016x}", a.hash_one(i), b.hash_one(i))
}

/// `token` with `kid` in its header (claims and signature unchanged).
fn with_kid(token: &str, kid: &str) -> Result<String> {
    let mut parts = token.splitn(2, '.');
    let (head, rest) = (parts.next().unwrap_or_default(), parts.next());
    let rest = rest.context("the token is not a JWT")?;
    let mut header: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(head)?)?;
    header["kid"] = json!(kid);
    Ok(format!(
        "{}.{rest}",
        URL_SAFE_NO_PAD.encode(header.to_string())
    ))
}

// === the report ===

fn report(
    opts: &Options,
    m: &Measurements,
    labels: &[(&'static str, String)],
    ready: &Value,
    swept: usize,
) -> Result<Value> {
    let face = &opts.face;
    let ip = &m.in_process;
    let us = |x: f64| format!("{x:.3}");
    println!(
        "auth: identity on the HTTP face (issue 31); tokens: RS256 JWT access tokens ({} bytes) of oidc-provider {} by client credentials with a resource indicator",
        m.token_bytes, m.idp_version
    );
    util::print_table(
        "in process: Verifier::check of the Authorization header, µs per check",
        &["check", "n", "min", "median", "p90", "p99", "max", "mean"],
        &[
            util::stats_row("cached token", &ip.cached),
            util::stats_row("first verification", &ip.first),
        ],
    );
    println!(
        "  cached: the whole loop over its count {} µs per check; the timer alone (two Instant::now) {} µs",
        us(ip.cached_mean_us),
        us(ip.timer_us)
    );

    println!(
        "\nthe face: echo of a 1 KiB message to server-everything {}, from the TypeScript SDK's client {} on node {}; per target {} calls at c=1 in {} alternating rounds and {} at each higher concurrency in {}, {} warm-up calls",
        ready["server"]["version"].as_str().unwrap_or("?"),
        ready["sdk"].as_str().unwrap_or("?"),
        ready["node"].as_str().unwrap_or("?"),
        face.calls,
        face.rounds,
        face.calls_concurrent,
        face.rounds_concurrent,
        face.warmup
    );
    for (id, label) in labels {
        println!("  {id:<15} {label}");
    }
    let (results, loads) = &m.face;
    let mut levels = serde_json::Map::new();
    let mut verdicts = Vec::new();
    verdicts.push(json!({
        "target": format!("in process: a cached token's check, median <= {CACHED_MEDIAN_US} µs"),
        "verdict": met(ip.cached.median <= CACHED_MEDIAN_US),
        "figures": format!(
            "median {} µs, p99 {} µs over {} checks (timer {} µs per sample); a first verification (RS256): median {} µs, p99 {} µs over {}",
            us(ip.cached.median), us(ip.cached.p99), ip.cached.n, us(ip.timer_us),
            us(ip.first.median), us(ip.first.p99), ip.first.n
        ),
    }));
    for (&concurrency, per) in results {
        let rows = ts_peers::level_rows(per, &FACE)?;
        let load = loads.get(&concurrency).copied().unwrap_or_default();
        ts_peers::print_level(concurrency, &rows, load);
        let level = ts_peers::level_json(&rows, load);
        levels.insert(concurrency.to_string(), Value::Object(level));
        verdicts.extend(face_verdicts(concurrency, &rows));
    }

    println!(
        "\nfloods: {} requests at once with random kids, twice",
        opts.flood
    );
    for (i, f) in m.floods.iter().enumerate() {
        let answers: Vec<String> = f.answers.iter().map(|(a, n)| format!("{n}x {a}")).collect();
        println!(
            "  flood {}: {} sent, answered {} in {:.0} ms; JWKS fetches {}",
            i + 1,
            f.sent,
            answers.join(", "),
            f.wall_ms,
            f.fetches
        );
    }
    println!(
        "  JWKS fetches before the floods (the face's startup and its measurement): {}",
        m.fetches_before_floods
    );
    let [first, second] = &m.floods;
    let refused = |f: &Flood| f.answers.get("401").copied().unwrap_or(0);
    verdicts.push(json!({
        "target": format!("{} tokens with random kids at once: at most {FLOOD_FETCHES} JWKS fetch", opts.flood),
        "verdict": met(first.fetches <= FLOOD_FETCHES),
        "figures": format!(
            "{} fetch(es) for the first {} ({} answered 401, in {:.0} ms), {} for the next {} sent at once right after (within the 10 s gate; {} answered 401); {} before the floods (startup)",
            first.fetches, first.sent, refused(first), first.wall_ms,
            second.fetches, second.sent, refused(second), m.fetches_before_floods
        ),
    }));

    println!("\ntargets (issue 31)");
    for v in &verdicts {
        println!(
            "  {}: {} — {}",
            v["target"].as_str().unwrap_or_default(),
            v["verdict"].as_str().unwrap_or_default(),
            v["figures"].as_str().unwrap_or_default()
        );
    }
    // Every call the audited target made: the client's probe, then per level its warm-up and
    // its measured calls.
    let audited_calls: u64 = 1 + results
        .values()
        .filter_map(|per| per.get("ours-http-audit"))
        .map(|m| u64::from(face.warmup) + m.latencies_ms.len() as u64 + u64::from(m.errors))
        .sum::<u64>();
    println!(
        "  audit: {} tools/call lines written for the {audited_calls} calls ours-http-audit was sent",
        m.audit_lines
    );
    let ac = &m.audit_cost;
    // The face's own CPU per call at c=64, without the audit: what a line adds to it.
    let face_cpu = results
        .get(&64)
        .and_then(|per| per.get("ours-http"))
        .and_then(Measured::hop_us_per_call);
    let share = face_cpu.map(|c| ac.cpu_us / c);
    println!(
        "  audit in process: {} lines ({} dropped), {:.3} µs of the caller's time and {:.3} µs of CPU in all (writer thread included) per line; at 5,000 lines/s that is {:.1} % of one core{}",
        ac.lines,
        ac.dropped,
        ac.caller_us,
        ac.cpu_us,
        ac.cpu_us * 5000.0 / 1e6 * 100.0,
        share.map_or(String::new(), |s| format!(
            ", and {:.1} % of the face's own CPU per call at c=64 ({:.1} µs)",
            s * 100.0,
            face_cpu.unwrap_or_default()
        ))
    );
    if swept > 0 {
        println!(
            "\n  warning: {swept} process(es) of the run were still alive at the end and were killed"
        );
    }
    let flood_json = |f: &Flood| {
        json!({
            "sent": f.sent,
            "answers": f.answers,
            "wall_ms": util::round3(f.wall_ms),
            "jwks_fetches": f.fetches,
        })
    };
    Ok(json!({
        "bench": "auth",
        "idp": format!("oidc-provider {}", m.idp_version),
        "token_bytes": m.token_bytes,
        "in_process_us": {
            "cached_check": ip.cached.json(),
            "cached_check_loop_mean": util::round3(ip.cached_mean_us),
            "timer": util::round3(ip.timer_us),
            "first_verification_rs256": ip.first.json(),
        },
        "face": {
            "client": format!("@modelcontextprotocol/sdk {}", ready["sdk"].as_str().unwrap_or("?")),
            "node": ready["node"],
            "server": ready["server"],
            "calls": face.calls,
            "calls_concurrent": face.calls_concurrent,
            "rounds": face.rounds,
            "rounds_concurrent": face.rounds_concurrent,
            "warmup": face.warmup,
            "message_bytes": 1024,
            "levels": levels,
        },
        "floods": [flood_json(first), flood_json(second)],
        "jwks_fetches_before_floods": m.fetches_before_floods,
        "audit_lines": m.audit_lines,
        "audit_in_process": {
            "lines": ac.lines,
            "dropped": ac.dropped,
            "caller_us_per_line": util::round3(ac.caller_us),
            "cpu_us_per_line": util::round3(ac.cpu_us),
            "share_of_face_cpu_per_call_c64": share.map(util::round3),
        },
        "audited_calls": audited_calls,
        "verdicts": verdicts,
        "leftover_processes_killed": swept,
    }))
}

fn met(ok: bool) -> &'static str {
    if ok { "met" } else { "missed" }
}

/// The face's targets at one level: `ours-http-auth` against the relay (and, beside it,
/// `ours-http` the same way, and what `auth` adds over it).
fn face_verdicts(concurrency: u32, rows: &[Row]) -> Vec<Value> {
    let get = |id: &str| rows.iter().find(|r| r.id == id);
    let (Some(relay), Some(auth), Some(plain)) =
        (get("relay-http"), get("ours-http-auth"), get("ours-http"))
    else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if let (1, Some(direct)) = (concurrency, get("direct")) {
        let ratio = auth.added_median / relay.added_median;
        let plain_ratio = plain.added_median / relay.added_median;
        let per_round = |of: &Measured| {
            ts_peers::round_range(of, relay.measured, |i| {
                let d = direct.measured.rounds.get(i)?.0;
                Some((of.rounds[i].0 - d) / (relay.measured.rounds[i].0 - d))
            })
        };
        out.push(json!({
            "target": format!("HTTP c=1: ours-http-auth added median <= {ADDED_MEDIAN_RATIO}x relay-http's"),
            "verdict": met(ratio <= ADDED_MEDIAN_RATIO),
            "ratio": util::round3(ratio),
            "without_auth_ratio": util::round3(plain_ratio),
            "figures": format!(
                "ours-http-auth {:+.3} ms, relay-http {:+.3} ms over direct {:.3} ms (ratio {ratio:.2}x; per round {}); without auth ours-http {:+.3} ms ({plain_ratio:.2}x; per round {}); auth adds {:+.3} ms to the median; added p99 {:+.3} (auth) / {:+.3} (no auth) / {:+.3} (relay) ms",
                auth.added_median, relay.added_median, direct.stats.median, per_round(auth.measured),
                plain.added_median, per_round(plain.measured),
                auth.stats.median - plain.stats.median,
                auth.added_p99, plain.added_p99, relay.added_p99
            ),
        }));
    }
    if let (64, Some(audit)) = (concurrency, get("ours-http-audit")) {
        let ratio = audit.measured.per_sec() / plain.measured.per_sec();
        let per_round = ts_peers::round_range(audit.measured, plain.measured, |i| {
            Some(audit.measured.rounds[i].1 / plain.measured.rounds[i].1)
        });
        out.push(json!({
            "target": format!("HTTP c=64: the audit costs <= 5 % of the throughput (ours-http-audit >= {AUDIT_RATIO}x ours-http)"),
            "verdict": met(ratio >= AUDIT_RATIO),
            "ratio": util::round3(ratio),
            "figures": format!(
                "ours-http-audit {:.0} calls/s (a line each), ours-http {:.0} calls/s (ratio {ratio:.3}x; per round {per_round}); hop CPU per call {} (audit) / {} (none) µs",
                audit.measured.per_sec(), plain.measured.per_sec(), cpu(audit.measured), cpu(plain.measured)
            ),
        }));
    }
    if concurrency == 64 {
        let ratio = auth.measured.per_sec() / relay.measured.per_sec();
        let plain_ratio = plain.measured.per_sec() / relay.measured.per_sec();
        let per_round = |of: &Measured| {
            ts_peers::round_range(of, relay.measured, |i| {
                Some(of.rounds[i].1 / relay.measured.rounds[i].1)
            })
        };
        out.push(json!({
            "target": format!("HTTP c=64: ours-http-auth throughput >= {THROUGHPUT_RATIO}x relay-http's"),
            "verdict": met(ratio >= THROUGHPUT_RATIO),
            "ratio": util::round3(ratio),
            "without_auth_ratio": util::round3(plain_ratio),
            "figures": format!(
                "ours-http-auth {:.0} calls/s, relay-http {:.0} calls/s (ratio {ratio:.2}x; per round {}); without auth ours-http {:.0} calls/s ({plain_ratio:.2}x; per round {}); hop CPU per call {} (auth) / {} (no auth) / {} (relay) µs",
                auth.measured.per_sec(), relay.measured.per_sec(), per_round(auth.measured),
                plain.measured.per_sec(), per_round(plain.measured),
                cpu(auth.measured), cpu(plain.measured), cpu(relay.measured)
            ),
        }));
    }
    out
}

fn cpu(m: &Measured) -> String {
    m.hop_us_per_call()
        .map_or("?".into(), |c| format!("{c:.1}"))
}
