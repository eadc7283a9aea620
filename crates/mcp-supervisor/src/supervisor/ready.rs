//! The ready state of a supervisor: serve one generation until it is lost, replaced, idle,
//! stopped or needs a login, then close it (the barrier) before whatever comes next.
//!
//! One handler per thing the state waits on, each saying where it leads ([`Served`]); the loop
//! in [`Supervisor::ready`] only waits and dispatches. It never opens a generation, and never
//! lets a replaced generation's event, sync or probe change anything (the fence).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use mcp_supervisor_core::policy::HealthPolicy;
use tokio::sync::watch;
use tokio::time::Instant;

use super::{
    Activity, AfterClose, Command, Held, Loss, LossKind, Phase, ReadyEnd, SETTLE_LIMIT,
    ServerEvent, Supervisor, SyncDone, health, with_stderr,
};
use crate::link::{CloseHow, Link, LinkEvent};

/// One ready generation, as its state serves it: what the loop waits on and what it keeps.
struct Serving {
    generation: u64,
    link: Arc<dyn Link>,
    /// When it became ready.
    since: Instant,
    health: HealthPolicy,
    prober: health::Prober,
    /// `idleTimeoutMs` (SPEC §13), when the server has one.
    idle_after: Option<Duration>,
    /// When the idle timeout is due: `idleTimeoutMs` after the last client request ended (or the
    /// server became ready), never while one is under way.
    idle_at: Option<Instant>,
    /// Clients' requests, for the idle timeout and a learning start.
    activity: watch::Receiver<Activity>,
    /// Started only to learn its lists: idle again once they are in, unless a client asked.
    learning: bool,
    /// The held lists, to learn when this generation's are in.
    held: watch::Receiver<Held>,
    /// When a probe of an idle connection is due (`healthIntervalMs`).
    next_idle_probe: Option<Instant>,
    /// For a server with OAuth: `Some(why)` once it needs a login.
    auth: Option<watch::Receiver<Option<String>>>,
}

/// Where one thing a ready generation hears leads.
enum Served {
    /// It goes on serving.
    Continue,
    /// It ends: closed (its barrier) before the next phase.
    Ends(ReadyEnd),
    /// The supervisor stops: the generation is closed already.
    Stopped,
}

impl Serving {
    /// When the idle timeout is due, after `activity`.
    fn idle_due(&self, activity: &Activity) -> Option<Instant> {
        match self.idle_after {
            Some(after) if activity.under_way == 0 => Some(activity.last.max(self.since) + after),
            _ => None,
        }
    }

    /// The generation is lost (`kind`): `cause`, after how long it served.
    fn lost(&self, cause: String, kind: LossKind) -> Served {
        Served::Ends(ReadyEnd::Lost {
            cause,
            uptime: self.since.elapsed(),
            kind,
        })
    }

    /// Judged hung and killed: it missed `misses` probes or calls in a row (`cause` says which).
    fn missed(&self, cause: String) -> Served {
        self.link.close(CloseHow::Kill);
        self.lost(cause, LossKind::Hung)
    }
}

impl Supervisor {
    // === ready: serve until the generation is lost ===

    /// Serve `link` until it ends, then close it. `learning`: started only to learn its lists.
    pub(super) async fn ready(&mut self, link: Arc<dyn Link>, learning: bool) -> ReadyEnd {
        let mut serving = self.serving(link, learning);
        let closed = serving.link.closed();
        tokio::pin!(closed);
        let generation = serving.generation;
        let end = loop {
            let served = tokio::select! {
                () = &mut closed => self.closed(&serving),
                command = self.commands.recv() => self.ready_command(&mut serving, command).await,
                Some((g, event)) = self.events.recv() => self.link_event(&serving, g, event),
                Some(done) = self.synced.recv() => self.synced(&serving, *done),
                Some(probe) = self.probes.recv() => self.probed(&mut serving, *probe),
                why = login_needed(serving.auth.as_mut()) => {
                    serving.link.close(CloseHow::Graceful);
                    Served::Ends(ReadyEnd::NeedsAuth(why))
                }
                // Only the idle timeout and a learning start need to hear of clients' calls.
                Ok(()) = serving.activity.changed(), if serving.idle_after.is_some() || serving.learning => {
                    Self::client_activity(&mut serving)
                }
                () = learned(&mut serving.held, generation), if serving.learning => {
                    self.lists_learned(&mut serving)
                }
                () = sleep_until(serving.idle_at) => self.idle_timeout(&mut serving),
                () = sleep_until(serving.next_idle_probe) => self.idle_tick(&mut serving),
            };
            match served {
                Served::Continue => {}
                Served::Ends(end) => break end,
                Served::Stopped => return ReadyEnd::Stop,
            }
        };
        // The lost generation must be gone before any backoff starts (an idle server's before
        // it can be started again).
        let then = if matches!(end, ReadyEnd::Idle) {
            AfterClose::Idle
        } else {
            AfterClose::Reconnect
        };
        // A loss is published with the close, in one update: whoever watches sees how it was
        // lost as soon as it sees it lost (the timeline's hung and session recovered).
        let loss = match &end {
            ReadyEnd::Lost { cause, kind, .. } => Some(Loss {
                generation,
                kind: *kind,
                cause: cause.clone(),
            }),
            _ => None,
        };
        self.snapshot.send_modify(|s| {
            if loss.is_some() {
                s.last_loss = loss;
            }
            s.phase = Phase::Closing(then);
        });
        if let Err(stuck) = self.barrier(&serving.link).await {
            return ReadyEnd::Stuck(stuck);
        }
        end
    }

    /// The state of a generation that just became ready.
    fn serving(&self, link: Arc<dyn Link>, learning: bool) -> Serving {
        let health = self.config.health;
        let mut serving = Serving {
            generation: self.generation,
            link,
            since: Instant::now(),
            health,
            prober: health::Prober::new(health),
            idle_after: self.config.idle_timeout,
            idle_at: None,
            activity: self.shared.activity.subscribe(),
            learning,
            held: self.shared.held.subscribe(),
            next_idle_probe: health.interval.map(|i| Instant::now() + i),
            auth: self.auth.clone(),
        };
        let now = *serving.activity.borrow_and_update();
        serving.idle_at = serving.idle_due(&now);
        serving
    }

    /// ready → lost: the connection closed (the process exited).
    fn closed(&self, serving: &Serving) -> Served {
        let cause = match serving.link.pid() {
            Some(pid) => format!("the server process (pid {pid}) exited or closed its stdout"),
            None => "the connection closed".to_string(),
        };
        serving.lost(with_stderr(cause, &serving.link), LossKind::Lost)
    }

    /// A command: stop (stopped), reconnect (ends), a call's suspicion or timeout about this
    /// generation (lost, or a probe); anything about a replaced generation is ignored.
    async fn ready_command(&mut self, serving: &mut Serving, command: Option<Command>) -> Served {
        let generation = serving.generation;
        match command {
            None | Some(Command::Stop(_)) => {
                if let Some(Command::Stop(reply)) = command {
                    self.stop_reply.push(reply);
                }
                self.calls_settled(SETTLE_LIMIT).await;
                serving.link.close(CloseHow::Graceful);
                if let Err(stuck) = self.barrier(&serving.link).await {
                    tracing::error!(server = %self.name, "{stuck}");
                }
                Served::Stopped
            }
            Some(Command::Reconnect) => {
                tracing::info!(server = %self.name, "explicit reconnect: replacing generation {generation}");
                serving.link.close(CloseHow::Graceful);
                Served::Ends(ReadyEnd::Reconnect)
            }
            Some(Command::Suspect {
                generation: g,
                cause,
                immediate,
            }) if g == generation => {
                serving.link.close(CloseHow::Kill);
                let kind = if immediate {
                    LossKind::StaleSession
                } else {
                    LossKind::Lost
                };
                serving.lost(cause, kind)
            }
            Some(Command::CallTimedOut { generation: g }) if g == generation => {
                let misses = self.shared.misses.fetch_add(1, Ordering::SeqCst) + 1;
                if misses >= serving.health.failures {
                    return serving.missed(format!(
                        "{misses} timed-out calls and missed health probes in a row"
                    ));
                }
                let link = serving.link.clone();
                serving
                    .prober
                    .start(generation, link, self.probe_tx.clone());
                Served::Continue
            }
            Some(_) => Served::Continue, // about a replaced generation: the fence ignores it
        }
    }

    /// What the generation reported: a list change (a re-sync), a sign of life, or a
    /// notification for the hub's clients (prompts and resources relisted first when they
    /// changed).
    fn link_event(&self, serving: &Serving, generation: u64, event: LinkEvent) -> Served {
        if generation != serving.generation {
            return Served::Continue; // a replaced generation's signal
        }
        match event {
            LinkEvent::ToolListChanged => self.enqueue_sync(generation, serving.link.clone()),
            LinkEvent::SignOfLife => self.shared.misses.store(0, Ordering::SeqCst),
            LinkEvent::Notification { method, params } => {
                if matches!(
                    method.as_str(),
                    "notifications/prompts/list_changed" | "notifications/resources/list_changed"
                ) && let Some(info) = self.snapshot.borrow().server_info().cloned()
                {
                    self.sync_extras(generation, &serving.link, &info, true);
                }
                let _ = self.notifications.send(ServerEvent {
                    server: self.name.clone(),
                    method,
                    params,
                });
            }
        }
        Served::Continue
    }

    /// A re-sync ended: its tools are published (this generation's only).
    fn synced(&self, serving: &Serving, done: SyncDone) -> Served {
        if done.generation != serving.generation {
            return Served::Continue; // a sync of a replaced generation publishes nothing
        }
        match done.result {
            Ok(tools) => {
                self.save_tools(&tools, None);
                if self.registry.publish(&self.name, tools) {
                    tracing::info!(server = %self.name, "tool list changed upstream; registry updated");
                }
            }
            Err(failure) => tracing::warn!(
                server = %self.name,
                "re-syncing tools after list_changed failed: {}",
                crate::error::describe(&failure)
            ),
        }
        Served::Continue
    }

    /// A probe ended: an answer clears the misses; a miss counts, and enough of them in a row
    /// lose the generation.
    fn probed(&self, serving: &mut Serving, probe: health::ProbeDone) -> Served {
        serving.prober.finished();
        if probe.generation != serving.generation {
            return Served::Continue;
        }
        let cause = match probe.result {
            Ok(()) => {
                self.shared.misses.store(0, Ordering::SeqCst);
                return Served::Continue;
            }
            Err(cause) => cause,
        };
        crate::trace::probe_failed(
            &self.name,
            serving.generation,
            &cause.to_string(),
            u64::try_from(probe.elapsed.as_millis()).unwrap_or(u64::MAX),
        );
        let misses = self.shared.misses.fetch_add(1, Ordering::SeqCst) + 1;
        let failures = serving.health.failures;
        tracing::warn!(server = %self.name, "health probe missed ({misses}/{failures}): {cause}");
        if misses < failures {
            return Served::Continue;
        }
        serving.missed(format!(
            "{misses} health probes and timed-out calls in a row; last: {cause}"
        ))
    }

    /// A client's request began or ended: the idle timeout moves; a learning start that a
    /// client wants stays.
    fn client_activity(serving: &mut Serving) -> Served {
        let now = *serving.activity.borrow_and_update();
        serving.idle_at = serving.idle_due(&now);
        if now.under_way > 0 || now.last > serving.since {
            serving.learning = false; // a client wants it: it stays
        }
        Served::Continue
    }

    /// A learning start's lists are in: idle again, unless a client asked for it meanwhile.
    fn lists_learned(&self, serving: &mut Serving) -> Served {
        serving.learning = false;
        let now = *self.shared.activity.borrow();
        if now.under_way > 0 || now.last > serving.since {
            return Served::Continue;
        }
        tracing::info!(server = %self.name, "its lists are learned and no client asked for it: stopped until the first request");
        serving.link.close(CloseHow::Graceful);
        Served::Ends(ReadyEnd::Idle)
    }

    /// The idle timeout's timer: idle when no client request came since (SPEC §13).
    fn idle_timeout(&self, serving: &mut Serving) -> Served {
        let now = *self.shared.activity.borrow();
        serving.idle_at = serving.idle_due(&now);
        if serving.idle_at.is_none_or(|at| at > Instant::now()) {
            return Served::Continue;
        }
        tracing::info!(
            server = %self.name,
            "no client request for {} ms (idleTimeoutMs): stopped until the next request",
            serving.idle_after.unwrap_or_default().as_millis()
        );
        serving.link.close(CloseHow::Graceful);
        Served::Ends(ReadyEnd::Idle)
    }

    /// The health interval's timer: probe a connection no call is using.
    fn idle_tick(&self, serving: &mut Serving) -> Served {
        if let Some(interval) = serving.health.interval {
            serving.next_idle_probe = Some(Instant::now() + interval);
        }
        // Due at the same instant as the idle timeout (which `select!` may poll second): no
        // probe of a server about to stop.
        if serving.idle_at.is_some_and(|at| at <= Instant::now()) {
            return Served::Continue;
        }
        // The idle timer leaves a busy connection to its calls' deadlines.
        if self.shared.in_flight.load(Ordering::SeqCst) == 0 {
            let link = serving.link.clone();
            serving
                .prober
                .start(serving.generation, link, self.probe_tx.clone());
        }
        Served::Continue
    }
}

/// Resolves with why, once the server needs a login; never without OAuth (or once its source
/// is gone).
async fn login_needed(auth: Option<&mut watch::Receiver<Option<String>>>) -> String {
    let Some(auth) = auth else {
        return std::future::pending().await;
    };
    let why = auth
        .wait_for(Option::is_some)
        .await
        .map(|why| why.clone().unwrap_or_default());
    match why {
        Ok(why) => why,
        Err(_) => std::future::pending().await,
    }
}

/// Resolves once generation `generation`'s lists are in (its listing ended).
async fn learned(held: &mut watch::Receiver<Held>, generation: u64) {
    if held.wait_for(|h| h.synced >= generation).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Resolves at `at`; never without one.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
