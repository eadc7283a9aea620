//! `sse-heal`: restart the official Python SDK's server behind the hub and time the next call
//! through the hub, once over the 2024-11-05 HTTP+SSE transport and once over streamable HTTP
//! (the same server script and tools), so the two heal times stand side by side.
//!
//! It starts and kills only its own Python processes (each in its own process group, by pid),
//! and never leaves one running: every server is killed on drop.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use mcp_supervisor::Hub;
use serde_json::{Value, json};
use tokio::process::{Child, Command};
use tokio::time::Instant;

use crate::util::{self, STATS_HEADER, Stats, stats_row};

const SERVER: &str = "py";
const TOOL: &str = "py__echo";
const CALL_LIMIT: Duration = Duration::from_secs(30);
/// How long a round keeps calling after a failed first call.
const RETRY_LIMIT: Duration = Duration::from_secs(30);
/// How long the Python server may take to listen.
const LISTEN_LIMIT: Duration = Duration::from_secs(30);

/// The transports measured, in order.
const TRANSPORTS: [Transport; 2] = [Transport::Http, Transport::Sse];

#[derive(Clone, Copy)]
enum Transport {
    Sse,
    Http,
}

impl Transport {
    fn name(self) -> &'static str {
        match self {
            Transport::Sse => "sse",
            Transport::Http => "streamable-http",
        }
    }

    /// Its key in the JSON line.
    fn key(self) -> &'static str {
        match self {
            Transport::Sse => "sse",
            Transport::Http => "http",
        }
    }

    /// The server's config: the default policy but for `initialDelayMs`.
    fn server_config(self, port: u16, initial_delay_ms: u64) -> Value {
        let reconnect = json!({ "initialDelayMs": initial_delay_ms });
        match self {
            Transport::Sse => json!({
                "type": "sse",
                "url": format!("http://127.0.0.1:{port}/sse"),
                "reconnect": reconnect,
            }),
            Transport::Http => json!({
                "url": format!("http://127.0.0.1:{port}/mcp"),
                "reconnect": reconnect,
            }),
        }
    }
}

/// One Python server process, killed (its group) on drop.
struct PyServer {
    child: Child,
}

impl PyServer {
    /// Start it on `port` and wait (bounded) until the port accepts connections.
    async fn start(python: &Path, script: &Path, port: u16, transport: Transport) -> Result<Self> {
        let deadline = Instant::now() + LISTEN_LIMIT;
        let runs = std::env::temp_dir().join(format!("mcp-supervisor-bench-sse-{port}.runs"));
        let mut command = Command::new(python);
        command
            .arg(script)
            .arg(port.to_string())
            .arg(&runs)
            .arg(transport.name())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .kill_on_drop(true);
        let child = command
            .spawn()
            .with_context(|| format!("cannot start {} {}", python.display(), script.display()))?;
        let mut server = Self { child };
        loop {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                return Ok(server);
            }
            if let Ok(Some(status)) = server.child.try_wait() {
                bail!("the Python server exited ({status}) before listening on 127.0.0.1:{port}");
            }
            if Instant::now() >= deadline {
                server.kill().await;
                bail!(
                    "the Python server did not listen on 127.0.0.1:{port} within {LISTEN_LIMIT:?}"
                );
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// SIGKILL its process group, and reap it.
    async fn kill(&mut self) {
        if let Some(pid) = self.child.id().and_then(|p| i32::try_from(p).ok()) {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let _ = self.child.kill().await;
    }
}

impl Drop for PyServer {
    fn drop(&mut self) {
        if let Some(pid) = self.child.id().and_then(|p| i32::try_from(p).ok()) {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let _ = self.child.start_kill();
    }
}

/// The heal times of one transport.
struct Heals {
    first: Vec<Duration>,
    until_success: Vec<Duration>,
    failures: Vec<String>,
}

pub async fn run(
    python: &Path,
    script: &Path,
    restarts: u32,
    initial_delay_ms: u64,
) -> Result<Value> {
    let python = resolve(python)?;
    let script = resolve(script)?;
    let mut rows = Vec::new();
    let mut report = serde_json::Map::new();
    let mut failure_lines = Vec::new();
    for transport in TRANSPORTS {
        let heals = measure(&python, &script, transport, restarts, initial_delay_ms).await?;
        let until = Stats::of(&heals.until_success)?;
        if !heals.first.is_empty() {
            let first = Stats::of(&heals.first)?;
            rows.push(stats_row(
                &format!("{}: first call, when it succeeded", transport.name()),
                &first,
            ));
            report.insert(format!("{}_heal_ms", transport.key()), first.json());
        }
        rows.push(stats_row(
            &format!("{}: until a call succeeded", transport.name()),
            &until,
        ));
        report.insert(
            format!("{}_until_success_ms", transport.key()),
            until.json(),
        );
        report.insert(
            format!("{}_failures", transport.key()),
            json!(heals.failures.len()),
        );
        failure_lines.push(format!(
            "  {}: first calls that failed: {} of {restarts}{}",
            transport.name(),
            heals.failures.len(),
            heals
                .failures
                .first()
                .map(|f| format!(" (e.g. {f})"))
                .unwrap_or_default()
        ));
    }
    println!(
        "sse-heal: {restarts} restarts of the Python SDK server ({}) behind a hub (default policy, initialDelayMs {initial_delay_ms}), per transport",
        script.display()
    );
    util::print_table(
        "time from the restarted server accepting to an answer (ms)",
        &STATS_HEADER,
        &rows,
    );
    println!();
    for line in failure_lines {
        println!("{line}");
    }
    let mut out = json!({
        "bench": "sse-heal",
        "restarts": restarts,
        "initial_delay_ms": initial_delay_ms,
    });
    if let Value::Object(map) = &mut out {
        map.extend(report);
    }
    Ok(out)
}

fn resolve(path: &Path) -> Result<PathBuf> {
    if path.exists() {
        Ok(path.to_path_buf())
    } else {
        bail!(
            "{} does not exist (run from the workspace root, or give the path)",
            path.display()
        )
    }
}

async fn measure(
    python: &Path,
    script: &Path,
    transport: Transport,
    restarts: u32,
    initial_delay_ms: u64,
) -> Result<Heals> {
    let port = util::free_port()?;
    let mut server = PyServer::start(python, script, port, transport).await?;
    let config =
        util::hub_config(json!({ SERVER: transport.server_config(port, initial_delay_ms) }))?;
    let hub = Hub::start(config);
    let outcome = util::with_hub(hub, async |hub: &Hub| {
        let mut ready = util::ready_after(hub, SERVER, 0, LISTEN_LIMIT).await?;
        let mut heals = Heals {
            first: Vec::new(),
            until_success: Vec::new(),
            failures: Vec::new(),
        };
        for round in 0..restarts {
            if round > 0 {
                // A fresh outage budget for every restart, as in http-heal.
                hub.reconnect(SERVER)?;
                util::ready_after(hub, SERVER, ready.generation, LISTEN_LIMIT).await?;
            }
            server.kill().await;
            server = PyServer::start(python, script, port, transport).await?;
            let heal =
                util::time_heal(hub, TOOL, &format!("heal {round}"), CALL_LIMIT, RETRY_LIMIT)
                    .await
                    .with_context(|| format!("{} restart {}", transport.name(), round + 1))?;
            heals.first.extend(heal.first);
            heals.until_success.push(heal.until_success);
            if let Some(failure) = heal.failure {
                heals
                    .failures
                    .push(format!("restart {}: {failure}", round + 1));
            }
            ready = util::ready_after(hub, SERVER, 0, LISTEN_LIMIT).await?;
        }
        server.kill().await;
        Ok(heals)
    })
    .await;
    drop(server);
    outcome
}
