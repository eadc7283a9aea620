//! The chaos driver: every 1–3 s (seeded), one action on one random upstream: kill -9, hang
//! (`block {ms: 3000}` through the proxy, not awaited), restart, or drop sessions (HTTP only).

use std::time::Duration;

use nix::sys::signal::Signal;
use rmcp::{Peer, RoleClient};
use serde_json::{Value, json};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::load;
use crate::procs::{self, HttpFault};
use crate::{CallKind, CallRecord, ChaosEvent, HANG_MS, ms_since};

/// Upper bound of chaos steps, whatever the duration.
const MAX_STEPS: u32 = 1_000_000;

/// The chaos driver's view of the run.
pub struct Chaos<'a> {
    pub t0: Instant,
    pub end: Instant,
    pub rng: fastrand::Rng,
    /// Names of the stdio servers (started by the proxy).
    pub stdio: Vec<String>,
    /// The HTTP servers (started by the harness).
    pub http: &'a mut [HttpFault],
    /// A client of the proxy for the calls that chaos makes (`block`, `drop_sessions`).
    pub peer: Peer<RoleClient>,
    pub status_url: String,
    pub web: reqwest::Client,
    pub events: Vec<ChaosEvent>,
    /// The chaos calls in flight; each yields its record.
    pub calls: JoinSet<CallRecord>,
    seq: u64,
}

impl<'a> Chaos<'a> {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        t0: Instant,
        end: Instant,
        seed: u64,
        stdio: Vec<String>,
        http: &'a mut [HttpFault],
        peer: Peer<RoleClient>,
        status_url: String,
        web: reqwest::Client,
    ) -> Self {
        Self {
            t0,
            end,
            rng: fastrand::Rng::with_seed(seed),
            stdio,
            http,
            peer,
            status_url,
            web,
            events: Vec::new(),
            calls: JoinSet::new(),
            seq: 0,
        }
    }

    fn gap(&mut self) -> Duration {
        Duration::from_millis(self.rng.u64(1000..=3000))
    }

    fn event(&mut self, server: &str, action: &str, ok: bool, detail: String) {
        self.events.push(ChaosEvent {
            t_ms: (ms_since(self.t0) * 10.0).round() / 10.0,
            server: server.to_owned(),
            action: action.to_owned(),
            ok,
            detail,
        });
    }

    /// Act until `end`; HTTP servers killed with a downtime are started again when it is over.
    pub async fn run(&mut self) {
        let mut next_action = Instant::now() + self.gap();
        let mut pending: Vec<(Instant, usize)> = Vec::new();
        for _ in 0..MAX_STEPS {
            let wake = pending
                .iter()
                .map(|(at, _)| *at)
                .chain([next_action])
                .min()
                .unwrap_or(next_action);
            if wake >= self.end {
                break;
            }
            tokio::time::sleep_until(wake).await;
            let now = Instant::now();
            let (due, later): (Vec<_>, Vec<_>) =
                pending.into_iter().partition(|(at, _)| *at <= now);
            pending = later;
            for (_, index) in due {
                self.start_http(index, "start").await;
            }
            if now >= next_action {
                if let Some(restart) = self.act().await {
                    pending.push(restart);
                }
                next_action = Instant::now() + self.gap();
            }
        }
    }

    /// Start every HTTP server that is down (after the chaos stopped).
    pub async fn restore(&mut self) {
        for index in 0..self.http.len() {
            if !self.http[index].running() {
                self.start_http(index, "restore").await;
            }
        }
    }

    async fn start_http(&mut self, index: usize, action: &str) {
        let name = self.http[index].name.clone();
        if self.http[index].running() {
            return;
        }
        match self.http[index].start().await {
            Ok(pid) => self.event(&name, action, true, format!("started, pid {pid}")),
            Err(error) => self.event(&name, action, false, format!("{error:#}")),
        }
    }

    /// One chaos action. Returns an HTTP server to start again later, when it killed one.
    async fn act(&mut self) -> Option<(Instant, usize)> {
        let total = self.stdio.len() + self.http.len();
        let pick = self.rng.usize(..total);
        if pick < self.stdio.len() {
            let name = self.stdio[pick].clone();
            match self.rng.u8(0..3) {
                0 => self.kill_stdio(&name, "kill9").await,
                1 => self.hang(&name),
                // A restart of a stdio server is a kill -9: the proxy starts it again.
                _ => self.kill_stdio(&name, "restart").await,
            }
            return None;
        }
        let index = pick - self.stdio.len();
        let name = self.http[index].name.clone();
        match self.rng.u8(0..4) {
            0 => {
                let down = Duration::from_millis(self.rng.u64(500..=2500));
                match self.http[index].kill() {
                    Some(pid) => {
                        self.event(
                            &name,
                            "kill9",
                            true,
                            format!("pid {pid}; down for {} ms", down.as_millis()),
                        );
                        return Some((Instant::now() + down, index));
                    }
                    None => self.event(&name, "kill9", false, "already down".to_owned()),
                }
            }
            1 => self.hang(&name),
            2 => {
                let old = self.http[index].kill();
                match self.http[index].start().await {
                    Ok(pid) => self.event(
                        &name,
                        "restart",
                        true,
                        format!(
                            "pid {} -> {pid}",
                            old.map_or("none".to_owned(), |p| p.to_string())
                        ),
                    ),
                    Err(error) => self.event(&name, "restart", false, format!("{error:#}")),
                }
            }
            _ => self.spawn_call(&name, "drop_sessions", CallKind::DropSessions, json!({})),
        }
        None
    }

    async fn server_status(&self, name: &str) -> Option<Value> {
        let response = self.web.get(&self.status_url).send().await.ok()?;
        let body: Value = serde_json::from_str(&response.text().await.ok()?).ok()?;
        body["servers"]
            .as_array()?
            .iter()
            .find(|s| s["name"] == name)
            .cloned()
    }

    async fn kill_stdio(&mut self, name: &str, action: &str) {
        let status = self.server_status(name).await;
        let state = status
            .as_ref()
            .and_then(|s| s["state"].as_str())
            .unwrap_or("unknown")
            .to_owned();
        let generation = status
            .as_ref()
            .and_then(|s| s["generation"].as_u64())
            .unwrap_or(0);
        match status.as_ref().and_then(|s| s["pid"].as_u64()) {
            Some(pid) => {
                let sent = procs::signal(pid as u32, Signal::SIGKILL);
                self.event(
                    name,
                    action,
                    sent,
                    format!("kill -9 pid {pid} (generation {generation}, {state})"),
                );
            }
            None => self.event(name, action, false, format!("no pid to kill ({state})")),
        }
    }

    fn hang(&mut self, name: &str) {
        self.spawn_call(name, "block", CallKind::Block, json!({ "ms": HANG_MS }));
    }

    /// Call `tool` on `server` through the proxy without waiting for it.
    fn spawn_call(&mut self, server: &str, tool: &str, kind: CallKind, arguments: Value) {
        self.seq += 1;
        let id = format!("chaos-{}", self.seq);
        let action = match kind {
            CallKind::Block => "hang",
            _ => "drop_sessions",
        };
        self.event(
            server,
            action,
            true,
            format!("{id}: {server}__{tool} {arguments}"),
        );
        let peer = self.peer.clone();
        let t0 = self.t0;
        let server = server.to_owned();
        let public = format!("{server}__{tool}");
        self.calls.spawn(async move {
            let start = ms_since(t0);
            let outcome = load::call(&peer, &public, arguments).await;
            let end = ms_since(t0);
            // A chaos call has no fixed answer to check.
            load::record("chaos", kind, &server, &id, start, end, &outcome, None)
        });
    }
}
