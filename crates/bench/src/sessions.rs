//! `sessions`: what sealed session ids cost (SPEC §12, issue 19).
//! - In process: the time to seal one client's session into an id and to open it again
//!   (AES-256-GCM, the front's `seal`), and the id's size, for the `initialize` of the Python
//!   and TypeScript SDK clients.
//! - Through `serve --http` with one fault server: the proxy's RSS before and after N
//!   `initialize` POSTs, each opening a session that is never ended (its map is a bounded
//!   cache), and then whether the first of those ids, long let go, still resumes its session.
//!
//! It never leaves a process behind: the run's processes are swept by their marker at the end.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::StreamExt;
use mcp_supervisor_front::Session;
use mcp_supervisor_front::seal::{Keys, now_ms};
use serde_json::value::RawValue;
use serde_json::{Value, json};

use crate::procs::{self, RunDir};
use crate::util::{self, STATS_HEADER, Stats};

pub struct Options {
    /// Seal/open rounds per client.
    pub rounds: u32,
    /// `initialize` POSTs to the proxy.
    pub sessions: u32,
    /// POSTs at once.
    pub concurrency: u32,
}

/// (client, its initialize params' capabilities and clientInfo), as those SDKs send them.
const CLIENTS: [(&str, &str, &str); 2] = [
    (
        "python-sdk-2.3.0",
        r#"{"sampling":{},"elicitation":{"form":{},"url":{}},"roots":{"listChanged":true}}"#,
        r#"{"name":"mcp","version":"2.3.0"}"#,
    ),
    (
        "typescript-sdk-1.32",
        r#"{"sampling":{},"elicitation":{},"roots":{"listChanged":true}}"#,
        r#"{"name":"ts-client","version":"1.0.0"}"#,
    ),
];

pub async fn run(fault: &Path, opts: Options) -> Result<Value> {
    let sealing = seal_costs(opts.rounds)?;
    let supervisor = util::supervisor_beside()?;
    let run = RunDir::new("sessions")?;
    let memory = procs::measured(&run, memory(fault, &supervisor, &run, &opts)).await?;
    Ok(json!({ "bench": "sessions", "sealing": sealing, "proxy": memory }))
}

fn seal_costs(rounds: u32) -> Result<Value> {
    let keys = Keys::random().map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut rows = Vec::new();
    let mut report = serde_json::Map::new();
    // The first client again, with two isolated `url` servers' upstream sessions (ids as the
    // Python and TypeScript SDK servers make them: 32 hex digits, a UUID).
    let upstream = [
        (
            "notes".to_string(),
            "0f4e9c1a7b2d4e6f8a9b0c1d2e3f4a5b".to_string(),
        ),
        (
            "browser".to_string(),
            "6f1d2c3b-4a59-4e6f-8a7b-9c0d1e2f3a4b".to_string(),
        ),
    ];
    let cases = CLIENTS
        .iter()
        .map(|&(client, c, i)| (client.to_string(), c, i, Default::default()))
        .chain(std::iter::once((
            format!("{} + 2 upstream sessions", CLIENTS[0].0),
            CLIENTS[0].1,
            CLIENTS[0].2,
            upstream.into_iter().collect(),
        )));
    for (client, capabilities, info, upstream) in cases {
        let session = Session {
            protocol_version: "2025-11-25".into(),
            capabilities: Some(RawValue::from_string(capabilities.into())?),
            client_info: Some(RawValue::from_string(info.into())?),
            upstream,
            owner: None,
        };
        let (mut seal, mut open) = (Vec::new(), Vec::new());
        let mut size = 0;
        for _ in 0..rounds {
            let began = Instant::now();
            let id = keys.seal(&session, now_ms()).context("seal failed")?;
            seal.push(began.elapsed());
            size = id.len();
            let began = Instant::now();
            let opened = keys.open(&id, now_ms(), Duration::from_secs(60));
            open.push(began.elapsed());
            if opened.is_err() {
                bail!("an id just sealed did not open");
            }
        }
        let (seal, open) = (Stats::of(&seal)?, Stats::of(&open)?);
        rows.push(util::stats_row(
            &format!("seal, {client} ({size} B id)"),
            &seal,
        ));
        rows.push(util::stats_row(&format!("open, {client}"), &open));
        report.insert(
            client.clone(),
            json!({ "id_bytes": size, "seal_ms": seal.json(), "open_ms": open.json() }),
        );
    }
    util::print_table(
        "sealed session ids: one seal and one open (AES-256-GCM, in process)",
        &STATS_HEADER,
        &rows,
    );
    Ok(Value::Object(report))
}

async fn memory(fault: &Path, supervisor: &Path, run: &RunDir, opts: &Options) -> Result<Value> {
    let config = run.file("servers.json");
    let servers = json!({ "mcpServers": { "fault": { "command": fault, "args": ["--pid-file", run.file("fault.pid")] } } });
    std::fs::write(&config, servers.to_string())?;
    let port = util::free_port()?;
    let mut proxy = procs::serve_http(supervisor, &config, port, run)?;
    let outcome = async {
        proxy.wait_listening(port, Duration::from_secs(30)).await?;
        let url = format!("http://127.0.0.1:{port}/mcp");
        let http = reqwest::Client::new();
        let first = initialize(&http, &url).await?;
        let before = rss_kib(proxy.pid())?;
        let began = Instant::now();
        let opened = futures::stream::iter(1..opts.sessions)
            .map(|_| initialize(&http, &url))
            .buffer_unordered(opts.concurrency as usize)
            .filter(|r| futures::future::ready(r.is_ok()))
            .count()
            .await
            + 1;
        let took = began.elapsed();
        let (after, peak) = (rss_kib(proxy.pid())?, hwm_kib(proxy.pid())?);
        // The first session was let go long ago (the map holds 4,096): its id resumes it.
        let status = http
            .post(&url)
            .header("Accept", "application/json, text/event-stream")
            .header("Mcp-Session-Id", &first)
            .header("MCP-Protocol-Version", "2025-11-25")
            .json(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))
            .send()
            .await?
            .status()
            .as_u16();
        Ok::<_, anyhow::Error>((before, after, peak, opened, took, status))
    }
    .await;
    proxy.stop(Duration::from_secs(10)).await;
    let (before, after, peak, opened, took, first_status) = outcome?;
    let mib = |kib: u64| kib as f64 / 1024.0;
    util::print_table(
        &format!(
            "serve --http: RSS after {opened} initialize POSTs ({} at once) in {:.1} s, no session ended by its client",
            opts.concurrency,
            took.as_secs_f64()
        ),
        &["before MiB", "after MiB", "peak MiB", "the first id, later"],
        &[vec![
            format!("{:.1}", mib(before)),
            format!("{:.1}", mib(after)),
            format!("{:.1}", mib(peak)),
            format!("HTTP {first_status}"),
        ]],
    );
    Ok(json!({
        "sessions": opened,
        "seconds": took.as_secs_f64(),
        "rss_before_kib": before,
        "rss_after_kib": after,
        "rss_peak_kib": peak,
        "first_id_later_status": first_status,
        "load": procs::load_now(),
    }))
}

/// One `initialize`; its session id.
async fn initialize(http: &reqwest::Client, url: &str) -> Result<String> {
    let response = http
        .post(url)
        .header("Accept", "application/json, text/event-stream")
        .json(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {"sampling": {}, "roots": {"listChanged": true}},
                "clientInfo": {"name": "bench", "version": "1"},
            }}),
        )
        .send()
        .await?;
    let id = response
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .context("no session id")?;
    response.bytes().await?;
    Ok(id)
}

fn status_field(pid: u32, field: &str) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .with_context(|| format!("no {field} for {pid}"))
}

fn rss_kib(pid: u32) -> Result<u64> {
    status_field(pid, "VmRSS:")
}

fn hwm_kib(pid: u32) -> Result<u64> {
    status_field(pid, "VmHWM:")
}
