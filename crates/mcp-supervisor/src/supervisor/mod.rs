//! One supervisor per server: it owns the server's generations and their fence, the state
//! machine, the backoff timer and outage budget, the serialized tool-sync queue, the health
//! probes, and the server's tools in the registry.
//!
//! Nothing else touches those. Other parts talk to it through `SupervisorHandle`: commands in,
//! a watch of its [`Snapshot`] out. It must never run two generations of one server at once.

mod call;
mod health;
mod ready;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use mcp_supervisor_core::config::{ServerConfig, Start};
use mcp_supervisor_core::policy::{Budget, Decision};
use serde_json::value::RawValue;
use tokio::sync::{Mutex as AsyncMutex, broadcast, mpsc, oneshot, watch};
use tokio::time::Instant;

use crate::catalog::{Catalog, CatalogStore, SavedHandshake};
use crate::core::classify::Failure;
use crate::error::{AttemptError, Stuck};
use crate::link::{CloseHow, Connector, EVENTS, EventQueue, Link, LinkEvent};
use crate::registry::{Registry, UpstreamTool};

pub use call::CallReport;
pub(crate) use call::CallRequest;

/// How long a generation may take to close before reconnecting stops (SPEC §3).
pub(crate) const CLOSE_BARRIER: Duration = Duration::from_secs(5);

/// The states people see (SPEC §8).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ServerState {
    /// The first attempt is under way.
    Connecting,
    /// Connected and serving.
    Ready,
    /// No connection was established in this outage; retrying.
    Retrying,
    /// An established connection was lost; reconnecting.
    Reconnecting,
    /// The outage budget is spent; waiting for an explicit reconnect or a reload.
    GaveUp,
    /// Lost with reconnect disabled.
    Down,
    /// Stopped for good.
    Stopped,
    /// The server needs authorization and no token can be had without a person
    /// (`mcp-supervisor login NAME`); its tools stay listed, calls fail at once, nothing is
    /// retried; it resumes by itself when a token appears.
    NeedsAuth,
    /// Not running, and not an outage: an on-demand server before its first request, or a
    /// server stopped after `idleTimeoutMs` without a client request (SPEC §13). Its tools
    /// stay published; the next request starts it.
    Idle,
}

impl ServerState {
    /// Every state, in the order people read them (metrics list one sample per state).
    pub const ALL: [ServerState; 9] = [
        ServerState::Connecting,
        ServerState::Ready,
        ServerState::Retrying,
        ServerState::Reconnecting,
        ServerState::GaveUp,
        ServerState::Down,
        ServerState::Stopped,
        ServerState::NeedsAuth,
        ServerState::Idle,
    ];

    /// Whether the server stays in this state until told otherwise (no attempt is coming).
    pub fn is_final(self) -> bool {
        matches!(
            self,
            ServerState::GaveUp | ServerState::Down | ServerState::Stopped | ServerState::NeedsAuth
        )
    }

    /// Whether the server serves requests without an outage: ready, or idle (its next request
    /// starts it). `/healthz` is 200 while every server is in service.
    pub fn in_service(self) -> bool {
        matches!(self, ServerState::Ready | ServerState::Idle)
    }

    /// The state's name as status, metrics and errors show it (`ready`, `gave_up`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            ServerState::Connecting => "connecting",
            ServerState::Ready => "ready",
            ServerState::Retrying => "retrying",
            ServerState::Reconnecting => "reconnecting",
            ServerState::GaveUp => "gave_up",
            ServerState::Down => "down",
            ServerState::Stopped => "stopped",
            ServerState::NeedsAuth => "needs_auth",
            ServerState::Idle => "idle",
        }
    }
}

impl std::fmt::Display for ServerState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a server's published list comes from (`/status` shows it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolList {
    /// Nothing is published.
    #[default]
    None,
    /// The saved catalog, published at start until the server lists its own.
    Cache,
    /// The server's own list.
    Live,
}

/// What a server is doing, with the data that belongs to it: one value, so a reader never
/// decodes a combination of flags. The state people see is a function of it ([`Phase::state`]).
#[derive(Clone)]
pub enum Phase {
    /// Serving on the current generation.
    Ready {
        /// The live connection.
        link: Arc<dyn Link>,
        /// When it became ready.
        since: Instant,
        /// The process id of a stdio server.
        pid: Option<u32>,
        /// What the server answered to `initialize`, as it came.
        server_info: Arc<RawValue>,
    },
    /// The current generation's attempt is under way (spawn, handshake, first tools/list).
    Attempting(Attempt),
    /// The lost generation is closing; what comes after it is said. (Fix, found by
    /// tests/calls.rs: without it a call arriving during the close took it for a failed
    /// attempt and failed at once, though the next attempt was due within its deadline.)
    Closing(AfterClose),
    /// Waiting for the next attempt, due `at`.
    Backoff {
        /// When the next attempt is due.
        at: Instant,
        /// Which recovery the next attempt belongs to.
        next: Recovery,
    },
    /// No attempt is coming until an explicit reconnect or a reload (or, for `NeedsAuth`, a
    /// login).
    Parked(Parked),
    /// Not running until a client's request (or an explicit reconnect) starts it.
    Idle,
}

/// Which attempt of an outage is under way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attempt {
    /// The first attempt since the server was started (`connecting`).
    First,
    /// A later one, with no connection established in this outage (`retrying`).
    Retry,
    /// One after an established connection was lost (`reconnecting`).
    Reconnect,
}

/// What an outage is, once its first attempt is behind it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recovery {
    /// No connection was established in this outage (`retrying`).
    Retry,
    /// An established connection was lost (`reconnecting`).
    Reconnect,
}

/// What follows the close of a generation that was ready.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AfterClose {
    /// A reconnect (or a wait for a login): it was lost, replaced or needs authorization.
    Reconnect,
    /// Idle: no client asked for it (SPEC §13).
    Idle,
}

/// Why no attempt is coming.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parked {
    /// The outage budget is spent, or a generation would not close.
    GaveUp,
    /// Lost or failed with reconnect disabled.
    Down,
    /// Stopped for good.
    Stopped,
    /// Waiting for a login.
    NeedsAuth,
}

impl Phase {
    /// The state people see (SPEC §8) in this phase.
    pub fn state(&self) -> ServerState {
        match self {
            Phase::Ready { .. } => ServerState::Ready,
            Phase::Attempting(Attempt::First) => ServerState::Connecting,
            Phase::Attempting(Attempt::Retry)
            | Phase::Backoff {
                next: Recovery::Retry,
                ..
            } => ServerState::Retrying,
            Phase::Attempting(Attempt::Reconnect)
            | Phase::Backoff {
                next: Recovery::Reconnect,
                ..
            }
            | Phase::Closing(AfterClose::Reconnect) => ServerState::Reconnecting,
            Phase::Closing(AfterClose::Idle) | Phase::Idle => ServerState::Idle,
            Phase::Parked(Parked::GaveUp) => ServerState::GaveUp,
            Phase::Parked(Parked::Down) => ServerState::Down,
            Phase::Parked(Parked::Stopped) => ServerState::Stopped,
            Phase::Parked(Parked::NeedsAuth) => ServerState::NeedsAuth,
        }
    }
}

/// How a ready generation was lost, as the supervisor judged it: the timeline tells a hang and
/// a stale session from a plain loss (SPEC §15).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LossKind {
    /// It closed (the process exited), or a call found it unusable.
    Lost,
    /// Timed-out calls and missed health probes in a row (`health.failures`): judged hung, and
    /// its process group killed (SPEC §6).
    Hung,
    /// A call found its HTTP session stale (404, or a stale session in other words): the server
    /// answers, so the session is re-established at once (SPEC §5).
    StaleSession,
}

/// The newest loss of a ready generation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Loss {
    /// The generation lost.
    pub generation: u64,
    /// How.
    pub kind: LossKind,
    /// Why, as the log says it (the probe that timed out; what the server answered).
    pub cause: String,
}

/// What a supervisor shows of itself.
#[derive(Clone)]
pub struct Snapshot {
    /// The generation most recently started (0 before the first).
    pub generation: u64,
    /// The attempt number within the current outage (0 when ready).
    pub attempt: u32,
    /// The outage budget: attempts before it gives up.
    pub max_attempts: u32,
    /// How many times a lost or failed connection was replaced by a ready one.
    pub restarts: u64,
    /// Why the last connection or attempt failed, if one did.
    pub last_error: Option<String>,
    /// The newest loss of a ready generation, published with the close that follows it and
    /// kept until the next one.
    pub last_loss: Option<Loss>,
    /// What it is doing, with that phase's data.
    pub phase: Phase,
    /// Where the published tools come from: the saved catalog until the first live list.
    pub tool_list: ToolList,
}

impl Snapshot {
    /// The state people see, as the phase says.
    pub fn state(&self) -> ServerState {
        self.phase.state()
    }

    /// Whether an attempt, or the close of a lost generation before one, is under way.
    pub fn attempting(&self) -> bool {
        matches!(self.phase, Phase::Attempting(_) | Phase::Closing(_))
    }

    /// Whether the lost generation is still closing.
    pub fn closing(&self) -> bool {
        matches!(self.phase, Phase::Closing(_))
    }

    /// When the next attempt is due, during a backoff.
    pub fn next_attempt_at(&self) -> Option<Instant> {
        match self.phase {
            Phase::Backoff { at, .. } => Some(at),
            _ => None,
        }
    }

    /// Since when the current generation is ready.
    pub fn ready_since(&self) -> Option<Instant> {
        match &self.phase {
            Phase::Ready { since, .. } => Some(*since),
            _ => None,
        }
    }

    /// The process id of a ready stdio server.
    pub fn pid(&self) -> Option<u32> {
        match &self.phase {
            Phase::Ready { pid, .. } => *pid,
            _ => None,
        }
    }

    /// What the ready server answered to `initialize`, as it came.
    pub fn server_info(&self) -> Option<&Arc<RawValue>> {
        match &self.phase {
            Phase::Ready { server_info, .. } => Some(server_info),
            _ => None,
        }
    }

    /// The upstream session id of the ready generation (streamable HTTP), once it has one.
    pub fn upstream_session(&self) -> Option<String> {
        self.link().and_then(|l| l.session_id())
    }

    fn link(&self) -> Option<&Arc<dyn Link>> {
        match &self.phase {
            Phase::Ready { link, .. } => Some(link),
            _ => None,
        }
    }
}

impl std::fmt::Debug for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Phase::Ready { pid, .. } => write!(f, "Ready {{ pid: {pid:?} }}"),
            Phase::Attempting(attempt) => write!(f, "Attempting({attempt:?})"),
            Phase::Closing(then) => write!(f, "Closing({then:?})"),
            Phase::Backoff { at, next } => write!(f, "Backoff {{ at: {at:?}, next: {next:?} }}"),
            Phase::Parked(why) => write!(f, "Parked({why:?})"),
            Phase::Idle => f.write_str("Idle"),
        }
    }
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot")
            .field("state", &self.state())
            .field("generation", &self.generation)
            .field("attempt", &self.attempt)
            .field("restarts", &self.restarts)
            .field("last_error", &self.last_error)
            .field("last_loss", &self.last_loss)
            .field("phase", &self.phase)
            .field("tool_list", &self.tool_list)
            .finish()
    }
}

/// Commands to a supervisor.
enum Command {
    /// Start over with a fresh budget (also out of `gave_up` and `down`).
    Reconnect,
    /// A call proved generation `generation` unusable: end it and reconnect. `immediate` skips
    /// the backoff (a stale session: the server evidently answers).
    Suspect {
        generation: u64,
        cause: String,
        immediate: bool,
    },
    /// A call on `generation` passed its deadline: probe now; it counts toward `failures`.
    CallTimedOut { generation: u64 },
    /// Stop for good; reply when quiet.
    Stop(oneshot::Sender<()>),
    /// A client's request wants the server: start it if it is idle (ignored otherwise).
    Wake,
}

/// A notification from a server, for whoever fronts the hub, as it came.
#[derive(Clone, Debug)]
pub struct ServerEvent {
    /// The server that sent it.
    pub server: Arc<str>,
    /// The notification's method (`notifications/resources/updated`, …).
    pub method: String,
    /// Its params, as JSON text.
    pub params: Option<Box<RawValue>>,
}

/// The `initialize` params a server's generations are opened with: the client's identity.
/// `None` until known (`wrap` waits for its client's); every generation uses the same, so a
/// server never sees a different client after a recovery.
pub(crate) type Handshake = watch::Receiver<Option<Arc<RawValue>>>;

/// State shared between a supervisor and the call paths of its handle.
struct Shared {
    config: ServerConfig,
    /// Calls in flight on the current generation (the idle probe skips a busy connection).
    in_flight: AtomicUsize,
    /// Timed-out calls and missed probes in a row; any sign of life resets it.
    misses: AtomicU32,
    /// The catalog saved by an earlier run, as loaded at start; served only while the published
    /// list is still the cached one.
    saved: Option<Arc<Catalog>>,
    /// The client's identity the servers are opened with, once known.
    handshake: Handshake,
    /// The server's prompts, resources and templates as last listed (SPEC §9).
    held: watch::Sender<Held>,
    /// Clients' requests: how many are under way and when one last began or ended (the idle
    /// timeout's clock; our own probes and listings never touch it).
    activity: watch::Sender<Activity>,
    /// What the server answered to `initialize` when it was last ready: shown while it is idle.
    last_info: std::sync::Mutex<Option<Arc<RawValue>>>,
}

/// Clients' requests to one server, for the idle timeout (SPEC §13).
#[derive(Clone, Copy, Debug)]
struct Activity {
    /// Requests under way (waiting for the server or sent).
    under_way: usize,
    /// When one last began or ended.
    last: Instant,
}

/// A client's request under way: counted from its start to its end, however it ends.
pub(crate) struct Requesting<'a>(&'a watch::Sender<Activity>);

impl<'a> Requesting<'a> {
    /// The supervisor is woken only when the count leaves or reaches zero: that is all the idle
    /// timeout and a learning start look at (the time is read with the count, and only then
    /// changes), and a busy server's calls then cost its supervisor nothing.
    fn enter(activity: &'a watch::Sender<Activity>) -> Self {
        activity.send_if_modified(|a| {
            a.under_way += 1;
            let first = a.under_way == 1;
            if first {
                a.last = Instant::now();
            }
            first
        });
        Self(activity)
    }
}

impl Drop for Requesting<'_> {
    fn drop(&mut self) {
        self.0.send_if_modified(|a| {
            a.under_way = a.under_way.saturating_sub(1);
            let last = a.under_way == 0;
            if last {
                a.last = Instant::now();
            }
            last
        });
    }
}

/// The list methods whose items a supervisor holds besides its tools, in [`Held::lists`] order.
const HELD_METHODS: [&str; 3] = ["prompts/list", "resources/list", "resources/templates/list"];

/// How long a stop waits for the calls in flight to end before it closes the generation: calls
/// cancelled as the proxy stops (at a drain's end) queue their `notifications/cancelled` from
/// their own tasks, and the server must be told before its stdin closes.
const SETTLE_LIMIT: Duration = Duration::from_millis(250);

/// A server's prompts, resources and resource templates as last listed: a client's list is
/// answered from these (SPEC §9), so a busy, hung or starting server never delays another
/// server's part of a list. Listed on each generation's connect and on its `list_changed`.
#[derive(Clone, Debug, Default)]
pub(crate) struct Held {
    /// Per [`HELD_METHODS`]: the items, when known.
    lists: [Option<Arc<[Box<RawValue>]>>; 3],
    /// The lists are the saved catalog's (served only while it fits the client).
    saved: bool,
    /// The newest generation whose listing ended, whether it succeeded or not (0: none yet).
    synced: u64,
    /// Listings under way because the server said its prompts or resources changed: until
    /// they end, what is held may lack what the server just added.
    relisting: u32,
}

impl Held {
    fn from_saved(saved: Option<&Catalog>) -> Self {
        let Some(saved) = saved else {
            return Self::default();
        };
        Self {
            lists: HELD_METHODS.map(|m| saved.list(m).map(Arc::from)),
            saved: true,
            synced: 0,
            relisting: 0,
        }
    }
}

impl Shared {
    /// Whether the saved catalog was made for the client now known (the same `initialize`
    /// params), or no client is known yet, or the catalog does not say. A catalog made for
    /// another client is not served: a server may show another client other tools.
    fn saved_fits(&self) -> bool {
        let Some(current) = self.handshake.borrow().clone() else {
            return true;
        };
        match self
            .saved
            .as_ref()
            .and_then(|c| c.initialize.as_ref())
            .and_then(|i| i.client.as_deref())
        {
            Some(client) => client == current.get(),
            None => true,
        }
    }
}

/// The way to talk to one supervisor.
#[derive(Clone)]
pub(crate) struct SupervisorHandle {
    name: Arc<str>,
    commands: mpsc::UnboundedSender<Command>,
    snapshot: watch::Receiver<Snapshot>,
    shared: Arc<Shared>,
}

impl SupervisorHandle {
    /// Start a supervisor task for `config`. It begins connecting at once (unless the server is
    /// disabled in the config, in which case it stays stopped).
    pub fn spawn(
        config: ServerConfig,
        connector: Arc<dyn Connector>,
        registry: Arc<Registry>,
        notifications: broadcast::Sender<ServerEvent>,
        handshake: Handshake,
        jitter: Box<dyn FnMut() -> f64 + Send + Sync>,
        catalog: Option<Arc<CatalogStore>>,
    ) -> (Self, tokio::task::JoinHandle<()>) {
        let name: Arc<str> = config.name.as_str().into();
        // A saved catalog is published now, before the first attempt: the server stays
        // `connecting`, and its tools are listed at once.
        let saved = catalog.as_ref().and_then(|store| store.load(&config));
        let mut tool_list = ToolList::None;
        if let Some(saved) = &saved {
            registry.publish(&config.name, parse_tools(&saved.tools, &config.name));
            tool_list = ToolList::Cache;
            tracing::info!(server = %name, tools = saved.tools.len(), "published the saved catalog; the server's own list replaces it when it is ready");
        }
        let writer =
            catalog.map(|store| CatalogWriter::start(store, config.clone(), saved.clone()));
        let (commands_tx, commands_rx) = mpsc::unbounded_channel();
        let (event_queue, events_rx) = EventQueue::new(name.clone(), EVENTS);
        let (synced_tx, synced_rx) = mpsc::unbounded_channel();
        let (probe_tx, probe_rx) = mpsc::unbounded_channel();
        // An on-demand server with a saved catalog is idle from the start: nothing runs until
        // a client asks (without one, it starts once to learn its lists).
        let phase = if config.start == Start::OnDemand && saved.is_some() {
            Phase::Idle
        } else {
            Phase::Attempting(Attempt::First)
        };
        let (snapshot_tx, snapshot_rx) = watch::channel(Snapshot {
            generation: 0,
            attempt: 0,
            max_attempts: config.reconnect.max_attempts,
            restarts: 0,
            last_error: None,
            last_loss: None,
            phase,
            tool_list,
        });
        let shared = Arc::new(Shared {
            config: config.clone(),
            in_flight: AtomicUsize::new(0),
            misses: AtomicU32::new(0),
            held: watch::channel(Held::from_saved(saved.as_ref())).0,
            activity: watch::channel(Activity {
                under_way: 0,
                last: Instant::now(),
            })
            .0,
            last_info: std::sync::Mutex::new(None),
            saved: saved.map(Arc::new),
            handshake: handshake.clone(),
        });
        let auth = connector.auth_status();
        let supervisor = Supervisor {
            auth,
            name: name.clone(),
            config,
            connector,
            registry,
            notifications,
            handshake,
            jitter,
            commands: commands_rx,
            event_queue,
            events: events_rx,
            synced_tx,
            synced: synced_rx,
            probe_tx,
            probes: probe_rx,
            sync_queue: Arc::new(AsyncMutex::new(())),
            sync_waiting: Arc::new(AtomicU64::new(0)),
            snapshot: snapshot_tx,
            shared: shared.clone(),
            generation: 0,
            stop_reply: Vec::new(),
            catalog: writer,
        };
        let join = tokio::spawn(supervisor.run());
        let handle = Self {
            name,
            commands: commands_tx,
            snapshot: snapshot_rx,
            shared,
        };
        (handle, join)
    }

    /// The server's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The current snapshot.
    pub fn snapshot(&self) -> Snapshot {
        self.snapshot.borrow().clone()
    }

    /// What the current generation's server answered to `initialize`, as it came; while it is
    /// idle, its answer when it was last ready, else the saved one (when it fits the client).
    pub fn server_info(&self) -> Option<Arc<RawValue>> {
        let idle = {
            let snapshot = self.snapshot.borrow();
            if let Some(info) = snapshot.server_info() {
                return Some(info.clone());
            }
            snapshot.state() == ServerState::Idle
        };
        if !idle {
            return None;
        }
        let last = self
            .shared
            .last_info
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        last.or_else(|| {
            let saved = self.shared.saved.as_ref()?.initialize.as_ref()?;
            self.shared
                .saved_fits()
                .then(|| Arc::from(saved.result.clone()))
        })
    }

    /// Send a notification to the current generation; dropped when there is none.
    pub fn notify(&self, method: &str, params: Option<&RawValue>) {
        let link = self.snapshot.borrow().link().cloned();
        if let Some(link) = link {
            link.notify(method, params);
        }
    }

    /// The saved catalog's items of a list method (`prompts/list`, ...), while the published
    /// list is still the cached one; `None` otherwise, or when the catalog does not know it.
    pub fn cached_list(&self, method: &str) -> Option<Vec<Box<RawValue>>> {
        if self.snapshot.borrow().tool_list != ToolList::Cache || !self.shared.saved_fits() {
            return None;
        }
        self.shared
            .saved
            .as_ref()
            .and_then(|c| c.list(method))
            .map(<[_]>::to_vec)
    }

    /// The held items of a list method (`prompts/list`, `resources/list`,
    /// `resources/templates/list`): live, or saved while the saved catalog fits the client.
    pub fn held_list(&self, method: &str) -> Option<Arc<[Box<RawValue>]>> {
        let at = HELD_METHODS.iter().position(|m| *m == method)?;
        let held = self.shared.held.borrow();
        if held.saved && !self.shared.saved_fits() {
            return None;
        }
        held.lists[at].clone()
    }

    /// Wait (at most `limit`) until no listing asked by the server's own `list_changed` is under
    /// way, so that what is held includes what the server just added (a resource a tool made).
    pub async fn relisted(&self, limit: Duration) {
        let mut held = self.shared.held.subscribe();
        let _ = tokio::time::timeout(limit, held.wait_for(|h| h.relisting == 0)).await;
    }

    /// Whether a listing asked by the server's own `list_changed` is under way.
    pub fn relisting(&self) -> bool {
        self.shared.held.borrow().relisting > 0
    }

    /// The held items of a list method, waiting (at most `limit`) while they are not known yet
    /// and may come: the server is on its first attempt, or ready with its listing under way.
    /// `None` once the server cannot say (an outage, a listing that failed, the limit).
    pub async fn wait_held_list(
        &self,
        method: &str,
        limit: Duration,
    ) -> Option<Arc<[Box<RawValue>]>> {
        let deadline = Instant::now() + limit;
        let mut held = self.shared.held.subscribe();
        let mut snapshot = self.snapshot.clone();
        loop {
            held.borrow_and_update();
            let (state, generation) = {
                let s = snapshot.borrow_and_update();
                (s.state(), s.generation)
            };
            if let Some(list) = self.held_list(method) {
                return Some(list);
            }
            let may_come = match state {
                ServerState::Connecting => true,
                ServerState::Ready => held.borrow().synced < generation,
                _ => false,
            };
            if !may_come {
                return None;
            }
            tokio::select! {
                changed = held.changed() => if changed.is_err() { return None },
                changed = snapshot.changed() => if changed.is_err() { return None },
                () = tokio::time::sleep_until(deadline) => return None,
            }
        }
    }

    /// The server's saved `initialize` answer, asked with `protocol_version`, while the published
    /// list is still the cached one.
    pub fn cached_handshake(&self, protocol_version: &str) -> Option<Arc<RawValue>> {
        if self.snapshot.borrow().tool_list != ToolList::Cache || !self.shared.saved_fits() {
            return None;
        }
        let saved = self.shared.saved.as_ref()?.initialize.as_ref()?;
        (saved.asked == protocol_version).then(|| Arc::from(saved.result.clone()))
    }

    /// A watch of the snapshot, for waiting on state changes.
    pub fn watch(&self) -> watch::Receiver<Snapshot> {
        self.snapshot.clone()
    }

    /// Ask for a fresh connection with a fresh budget (also out of `gave_up`).
    pub fn reconnect(&self) {
        let _ = self.commands.send(Command::Reconnect);
    }

    /// Stop for good and wait until the supervisor is quiet: generation closed, sync queue
    /// drained, tools withdrawn.
    pub async fn stop(&self) {
        let (tx, rx) = oneshot::channel();
        if self.commands.send(Command::Stop(tx)).is_ok() {
            let _ = rx.await;
        }
    }

    fn suspect(&self, generation: u64, cause: String, immediate: bool) {
        let _ = self.commands.send(Command::Suspect {
            generation,
            cause,
            immediate,
        });
    }

    fn call_timed_out(&self, generation: u64) {
        let _ = self.commands.send(Command::CallTimedOut { generation });
    }

    /// Start the server if it is idle (a client wants it); nothing otherwise.
    pub fn wake(&self) {
        let _ = self.commands.send(Command::Wake);
    }

    /// Count a client's request from now until the guard is dropped (the idle timeout's clock).
    pub(crate) fn requesting(&self) -> Requesting<'_> {
        Requesting::enter(&self.shared.activity)
    }
}

/// How the wait in `ready` ended.
enum ReadyEnd {
    Lost {
        cause: String,
        uptime: Duration,
        /// A stale session's is re-established without a backoff.
        kind: LossKind,
    },
    Reconnect,
    Stop,
    /// The generation did not close within the barrier.
    Stuck(Stuck),
    /// The server needs a login (why).
    NeedsAuth(String),
    /// No client request for `idleTimeoutMs`, or its lists learned with no client waiting:
    /// the generation was closed, and the server goes idle.
    Idle,
}

/// How an attempt ended.
enum AttemptEnd {
    Ready(Arc<dyn Link>),
    Failed {
        error: AttemptError,
        /// The server's last stderr lines, oldest first.
        stderr: Vec<String>,
    },
    Stop,
    Stuck(Stuck),
}

/// What comes after a failure has been judged.
enum Next {
    /// Make the next attempt with the current budget.
    Attempt,
    /// Make the next attempt with a fresh budget (an explicit reconnect).
    FreshBudget,
    /// Start an idle server: a first attempt with a fresh budget; `learn`: only to learn its
    /// lists (no client asked), then idle again.
    Start {
        learn: bool,
    },
    Stop,
}

/// A failure on its way to a decision.
struct Judged {
    decision: Decision,
    cause: String,
    verb: &'static str,
    immediate: bool,
}

struct SyncDone {
    generation: u64,
    result: Result<Vec<UpstreamTool>, Failure>,
}

struct Supervisor {
    name: Arc<str>,
    config: ServerConfig,
    connector: Arc<dyn Connector>,
    registry: Arc<Registry>,
    notifications: broadcast::Sender<ServerEvent>,
    handshake: Handshake,
    jitter: Box<dyn FnMut() -> f64 + Send + Sync>,
    /// Unbounded: every state takes its commands as they come (the waits between, a close's
    /// barrier or the calls' settling, are bounded), and each comes from a caller: the host (stop,
    /// reconnect), a request for an idle server (one wake each), or a failed call (a suspicion or
    /// a timeout each), so what waits is bounded by the calls in flight.
    commands: mpsc::UnboundedReceiver<Command>,
    /// Where each generation's [`crate::link::LinkEvents`] come from: bounded ([`EVENTS`]),
    /// see there.
    event_queue: EventQueue,
    events: mpsc::Receiver<(u64, LinkEvent)>,
    /// Unbounded: at most two syncs of a generation are under way at once, the one listing and
    /// one waiting behind it ([`Supervisor::enqueue_sync`]), and each sends one.
    synced_tx: mpsc::UnboundedSender<Box<SyncDone>>,
    synced: mpsc::UnboundedReceiver<Box<SyncDone>>,
    /// Unbounded: a ready generation runs one probe at a time, and each sends one.
    probe_tx: mpsc::UnboundedSender<Box<health::ProbeDone>>,
    probes: mpsc::UnboundedReceiver<Box<health::ProbeDone>>,
    /// The generation whose re-sync waits for its turn and has not begun listing (0: none): a
    /// list change meanwhile is covered by it.
    sync_waiting: Arc<AtomicU64>,
    /// The per-server sync queue: every tools/list of every generation runs under it, one at a
    /// time, in order.
    sync_queue: Arc<AsyncMutex<()>>,
    snapshot: watch::Sender<Snapshot>,
    shared: Arc<Shared>,
    generation: u64,
    stop_reply: Vec<oneshot::Sender<()>>,
    /// For a server with OAuth: `Some(why)` while it needs a login.
    auth: Option<watch::Receiver<Option<String>>>,
    /// Saves the catalog after each successful list; `None`: no state directory.
    catalog: Option<CatalogWriter>,
}

/// Keeps one server's catalog on disk: the lists as last seen, written one save at a time, in
/// order, off the async threads.
struct CatalogWriter {
    current: Arc<std::sync::Mutex<Catalog>>,
    /// Unbounded: one catalog per list the server answered (a first list, a re-sync, a
    /// relisting after its `list_changed`), so what waits is bounded by the listings under way,
    /// and the writer keeps only the newest of it.
    tx: mpsc::UnboundedSender<Box<Catalog>>,
    task: tokio::task::JoinHandle<()>,
}

impl CatalogWriter {
    fn start(store: Arc<CatalogStore>, config: ServerConfig, saved: Option<Catalog>) -> Self {
        // Boxed: a channel's first block holds 32 of its items, made with the channel, for each
        // server (a `Catalog` is 160 bytes, its box 8).
        let (tx, mut rx) = mpsc::unbounded_channel::<Box<Catalog>>();
        let task = tokio::spawn(async move {
            while let Some(mut catalog) = rx.recv().await {
                // Only the newest of a burst is worth writing.
                while let Ok(newer) = rx.try_recv() {
                    catalog = newer;
                }
                let (store, config) = (store.clone(), config.clone());
                let name = config.name.clone();
                let saved =
                    tokio::task::spawn_blocking(move || store.save(&config, &catalog)).await;
                match saved {
                    Ok(Ok(())) => tracing::debug!(server = %name, "catalog saved"),
                    Ok(Err(why)) => {
                        tracing::warn!(server = %name, "the catalog was not saved: {why}")
                    }
                    Err(e) => tracing::warn!(server = %name, "the catalog was not saved: {e}"),
                }
            }
        });
        Self {
            current: Arc::new(std::sync::Mutex::new(saved.unwrap_or_default())),
            tx,
            task,
        }
    }

    /// Change the catalog and queue a save of the whole.
    fn update(
        current: &std::sync::Mutex<Catalog>,
        tx: &mpsc::UnboundedSender<Box<Catalog>>,
        change: impl FnOnce(&mut Catalog),
    ) {
        let mut catalog = current.lock().unwrap_or_else(|p| p.into_inner());
        change(&mut catalog);
        // Sent under the lock, so saves are queued in the order of the changes.
        let _ = tx.send(Box::new(catalog.clone()));
    }

    /// Let the queued saves finish (bounded), then end.
    async fn finish(self) {
        let Self { tx, task, .. } = self;
        drop(tx);
        let _ = tokio::time::timeout(CLOSE_BARRIER, task).await;
    }
}

impl Supervisor {
    // === the run loop ===

    async fn run(mut self) {
        let policy = self.config.reconnect;
        let mut budget = Budget::new(policy);
        // Whether the current outage began with the loss of an established connection.
        let mut lost_established = false;
        let mut first = true;
        // The recovery under way since a ready connection was lost (its trace span).
        let mut recovery: Option<Recovering> = None;
        // An on-demand server (SPEC §13) with a saved catalog waits idle for its first request;
        // without one it starts once to learn its lists, then goes idle.
        let mut idle = matches!(self.snapshot.borrow().phase, Phase::Idle);
        let mut learn = self.config.start == Start::OnDemand && !idle;
        loop {
            // idle → (request | reconnect) connecting | stop
            if std::mem::take(&mut idle) {
                match self.idle().await {
                    Next::Stop => break,
                    Next::Start { learn: only } => learn = only,
                    Next::Attempt | Next::FreshBudget => {}
                }
                (budget, first, lost_established) = (Budget::new(policy), true, false);
            }
            // connecting | retrying | reconnecting → ready | judged failure | stop | stuck
            let attempt = if first {
                Attempt::First
            } else if lost_established {
                Attempt::Reconnect
            } else {
                Attempt::Retry
            };
            let judged = match self.attempt(attempt, budget.failures()).await {
                AttemptEnd::Stop => break,
                AttemptEnd::Stuck(cause) => {
                    if let Next::Stop = self.park_stuck(cause).await {
                        break;
                    }
                    (budget, first, lost_established) = (Budget::new(policy), true, false);
                    continue;
                }
                // A sandbox the machine cannot give: no retry can get it (SPEC §16).
                AttemptEnd::Failed {
                    error: AttemptError::Open(crate::error::OpenError::Sandbox(why)),
                    ..
                } => {
                    if let Next::Stop = self.park_refused(why).await {
                        break;
                    }
                    (budget, first, lost_established) = (Budget::new(policy), true, false);
                    continue;
                }
                AttemptEnd::Failed { error, stderr } => {
                    let cause = with_tail(&error, &stderr);
                    // Only the very first attempt is `connecting`; later ones are retries.
                    first = false;
                    // needs_auth → (token appears | reconnect) attempt | stop
                    let refused = self.connector.auth_refused_attempt();
                    if let Some(why) = self.auth_needed().or(refused.then(|| cause.clone())) {
                        if let Next::Stop = self.needs_auth(why).await {
                            break;
                        }
                        budget = Budget::new(policy);
                        continue;
                    }
                    Judged {
                        decision: budget.on_failure(None, (self.jitter)()),
                        cause,
                        verb: "connection failed",
                        immediate: false,
                    }
                }
                AttemptEnd::Ready(link) => {
                    if let Some(recovering) = recovery.take() {
                        recovering.end(Some(self.generation), "ready");
                    }
                    if first {
                        tracing::info!(server = %self.name, generation = self.generation, "connected");
                    } else {
                        tracing::info!(server = %self.name, generation = self.generation, "recovered: the connection is ready again");
                    }
                    first = false;
                    // ready → lost | reconnect | idle | stop | stuck
                    match self.ready(link, std::mem::take(&mut learn)).await {
                        ReadyEnd::Stop => break,
                        ReadyEnd::Idle => {
                            idle = true;
                            continue;
                        }
                        ReadyEnd::Reconnect => {
                            (budget, lost_established) = (Budget::new(policy), true);
                            continue;
                        }
                        ReadyEnd::Stuck(cause) => {
                            if let Next::Stop = self.park_stuck(cause).await {
                                break;
                            }
                            (budget, first, lost_established) = (Budget::new(policy), true, false);
                            continue;
                        }
                        ReadyEnd::NeedsAuth(why) => {
                            if let Next::Stop = self.needs_auth(why).await {
                                break;
                            }
                            (budget, lost_established) = (Budget::new(policy), true);
                            continue;
                        }
                        ReadyEnd::Lost {
                            cause,
                            uptime,
                            kind,
                        } => {
                            lost_established = true;
                            recovery = Some(Recovering::new(&self.name, self.generation, &cause));
                            Judged {
                                decision: budget.on_failure(Some(uptime), (self.jitter)()),
                                cause,
                                verb: "connection lost",
                                immediate: kind == LossKind::StaleSession,
                            }
                        }
                    }
                }
            };
            if let (Some(recovering), Decision::Retry { delay, .. }) =
                (&mut recovery, &judged.decision)
            {
                recovering.backoff += if judged.immediate {
                    Duration::ZERO
                } else {
                    *delay
                };
            }
            let retrying =
                matches!(judged.decision, Decision::Retry { .. }) && self.config.reconnect.enabled;
            if !retrying && let Some(recovering) = recovery.take() {
                recovering.end(None, "gave_up");
            }
            match self.after_failure(judged, lost_established).await {
                Next::Attempt => {}
                Next::FreshBudget | Next::Start { .. } => budget = Budget::new(policy),
                Next::Stop => break,
            }
        }
        if let Some(recovering) = recovery.take() {
            recovering.end(None, "stopped");
        }
        self.quiesce().await;
    }

    /// A judged failure: down (reconnect disabled), gave up, or a backoff before the next try.
    async fn after_failure(&mut self, judged: Judged, lost_established: bool) -> Next {
        let Judged {
            decision,
            cause,
            verb,
            immediate,
        } = judged;
        let name = self.name.clone();
        self.snapshot
            .send_modify(|s| s.last_error = Some(cause.clone()));
        if !self.config.reconnect.enabled {
            tracing::error!(
                server = %name,
                "{verb}: {cause}; reconnect is disabled for this server, so it stays down with its tools registered; \
                 recover by hand with an explicit reconnect (`mcp-supervisor reconnect {name}` or POST /servers/{name}/reconnect) or a config reload"
            );
            self.publish(Phase::Parked(Parked::Down));
            return self.park().await;
        }
        match decision {
            Decision::GiveUp { failures } => {
                tracing::error!(
                    server = %name,
                    "{verb}: {cause}; giving up after {failures} failures in a row ({max} attempts); its tools are withdrawn; \
                     recover with an explicit reconnect (`mcp-supervisor reconnect {name}` or POST /servers/{name}/reconnect) or a config reload",
                    max = self.config.reconnect.max_attempts,
                );
                self.withdraw();
                let max = self.config.reconnect.max_attempts;
                self.snapshot.send_modify(|s| s.attempt = max);
                self.publish(Phase::Parked(Parked::GaveUp));
                self.park().await
            }
            Decision::Retry {
                attempt,
                max_attempts,
                delay,
            } => {
                let (next, action) = if lost_established {
                    (Recovery::Reconnect, "reconnecting")
                } else {
                    (Recovery::Retry, "retrying")
                };
                let delay = if immediate { Duration::ZERO } else { delay };
                tracing::warn!(
                    server = %name,
                    attempt, max_attempts, delay_ms = delay.as_millis() as u64,
                    "{verb}: {cause}; {action} in {} ms (attempt {attempt}/{max_attempts})",
                    delay.as_millis()
                );
                let until = Instant::now() + delay;
                self.snapshot.send_modify(|s| s.attempt = attempt);
                self.publish(Phase::Backoff { at: until, next });
                self.backoff(until).await
            }
        }
    }

    /// Wait out a backoff. A stop ends it; an explicit reconnect cuts it short with a fresh budget.
    async fn backoff(&mut self, until: Instant) -> Next {
        loop {
            tokio::select! {
                () = tokio::time::sleep_until(until) => return Next::Attempt,
                command = self.commands.recv() => {
                    if let Some(next) = self.while_waiting(command) {
                        return next;
                    }
                }
            }
        }
    }

    /// Wait idle (SPEC §13): nothing runs, the tools stay published, no budget is spent. A
    /// client's request or an explicit reconnect starts the server; a stop ends the wait. A
    /// saved catalog found to be made for another client once the client is known is withdrawn,
    /// and the server started to learn its own lists.
    async fn idle(&mut self) -> Next {
        self.snapshot.send_modify(|s| {
            s.attempt = 0;
            s.phase = Phase::Idle;
        });
        let mut client = self.handshake.clone();
        let mut checked = self.snapshot.borrow().tool_list != ToolList::Cache;
        loop {
            tokio::select! {
                known = async { client.wait_for(Option::is_some).await.is_ok() }, if !checked => {
                    checked = true;
                    if known && !self.shared.saved_fits() {
                        tracing::info!(server = %self.name, "the saved catalog was made for another client: withdrawn; starting the server to learn its own lists");
                        self.withdraw();
                        return Next::Start { learn: true };
                    }
                }
                command = self.commands.recv() => match command {
                    None => return Next::Stop,
                    Some(Command::Stop(reply)) => {
                        self.stop_reply.push(reply);
                        return Next::Stop;
                    }
                    Some(Command::Wake) => {
                        tracing::info!(server = %self.name, "a client's request: starting the idle server");
                        return Next::Start { learn: false };
                    }
                    Some(Command::Reconnect) => {
                        tracing::info!(server = %self.name, "explicit reconnect: starting the idle server");
                        return Next::Start { learn: false };
                    }
                    Some(_) => {} // about a generation already gone
                },
            }
        }
    }

    /// Wait in `gave_up` or `down` for an explicit reconnect or a stop.
    async fn park(&mut self) -> Next {
        loop {
            match self.commands.recv().await {
                None => return Next::Stop,
                Some(Command::Stop(reply)) => {
                    self.stop_reply.push(reply);
                    return Next::Stop;
                }
                Some(Command::Reconnect) => {
                    tracing::info!(server = %self.name, "explicit reconnect: starting with a fresh budget");
                    return Next::FreshBudget;
                }
                Some(_) => {}
            }
        }
    }

    /// A command while waiting (a backoff, or needs_auth): a stop ends the wait, an explicit
    /// reconnect ends it with a fresh budget; signals about a generation that is already gone
    /// are ignored (`None`).
    fn while_waiting(&mut self, command: Option<Command>) -> Option<Next> {
        match command {
            None => Some(Next::Stop),
            Some(Command::Stop(reply)) => {
                self.stop_reply.push(reply);
                Some(Next::Stop)
            }
            Some(Command::Reconnect) => Some(Next::FreshBudget),
            Some(_) => None,
        }
    }

    /// Why the server needs a login, if it does.
    fn auth_needed(&self) -> Option<String> {
        self.auth.as_ref().and_then(|a| a.borrow().clone())
    }

    /// Wait in `needs_auth`: tools stay listed, calls fail at once, nothing is retried. A token
    /// appearing (a login), an explicit reconnect, or a stop ends it.
    async fn needs_auth(&mut self, why: String) -> Next {
        tracing::warn!(
            server = %self.name,
            "needs authorization: {why}; its tools stay listed and calls fail until then; it resumes by itself after the login"
        );
        self.snapshot.send_modify(|s| {
            s.last_error = Some(why);
            s.attempt = 0;
        });
        self.publish(Phase::Parked(Parked::NeedsAuth));
        let Some(mut auth) = self.auth.clone() else {
            return self.park().await;
        };
        loop {
            tokio::select! {
                resumed = async { auth.wait_for(Option::is_none).await.is_ok() } => {
                    if !resumed {
                        return self.park().await;
                    }
                    tracing::info!(server = %self.name, "a token is available: connecting");
                    return Next::FreshBudget;
                }
                command = self.commands.recv() => {
                    if let Some(next) = self.while_waiting(command) {
                        return next;
                    }
                }
            }
        }
    }

    /// A generation would not close: stop reconnecting, say why, wait for a human.
    async fn park_stuck(&mut self, stuck: Stuck) -> Next {
        tracing::error!(server = %self.name, "{stuck}");
        self.withdraw();
        self.snapshot
            .send_modify(|s| s.last_error = Some(stuck.to_string()));
        self.publish(Phase::Parked(Parked::GaveUp));
        self.park().await
    }

    /// The server's sandbox cannot be had: it does not start, and waits in `gave_up` (no crash
    /// loop) for an explicit reconnect or a reload, which look again.
    async fn park_refused(&mut self, why: String) -> Next {
        let cause = format!("sandbox: {why}");
        tracing::error!(
            server = %self.name,
            "{cause}; it is not started: fix what is lacking or set \"bestEffort\": true in its sandbox, then reconnect it (`mcp-supervisor reconnect {name}` or POST /servers/{name}/reconnect) or reload the config",
            name = self.name,
        );
        self.withdraw();
        self.snapshot.send_modify(|s| s.last_error = Some(cause));
        self.publish(Phase::Parked(Parked::GaveUp));
        self.park().await
    }

    /// After the loop: wait for the sync queue, withdraw the tools, report stopped.
    async fn quiesce(&mut self) {
        let _ = tokio::time::timeout(CLOSE_BARRIER, self.sync_queue.lock()).await;
        self.withdraw();
        if let Some(writer) = self.catalog.take() {
            writer.finish().await;
        }
        self.publish(Phase::Parked(Parked::Stopped));
        tracing::info!(server = %self.name, "stopped");
        for reply in self.stop_reply.drain(..) {
            let _ = reply.send(());
        }
    }

    /// Withdraw every tool, live or cached.
    fn withdraw(&self) {
        self.registry.withdraw(&self.name);
        self.shared.held.send_modify(|h| {
            h.lists = Default::default();
            h.saved = false;
        });
        self.snapshot.send_modify(|s| s.tool_list = ToolList::None);
    }

    /// A live list was published: save it (with the handshake it came after, when given).
    fn save_tools(&self, tools: &[UpstreamTool], initialize: Option<SavedHandshake>) {
        let Some(writer) = &self.catalog else { return };
        let listed: Vec<Box<RawValue>> = tools.iter().map(|t| (*t.definition).to_owned()).collect();
        CatalogWriter::update(&writer.current, &writer.tx, |c| {
            c.tools = listed;
            if initialize.is_some() {
                c.initialize = initialize;
            }
        });
    }

    /// List the server's prompts, resources and resource templates (those its `initialize`
    /// answer declares) in the background: hold them for clients' lists, and save them with the
    /// catalog. A listing of a replaced generation changes nothing.
    fn sync_extras(&self, generation: u64, link: &Arc<dyn Link>, info: &RawValue, relist: bool) {
        // A weak sender: a listing still under way never holds up the writer's end at stop.
        let writer = self
            .catalog
            .as_ref()
            .map(|w| (w.current.clone(), w.tx.downgrade()));
        let held = self.shared.clone();
        let (link, timeout) = (link.clone(), self.config.connect_timeout);
        let offers = offered_lists(info);
        if relist {
            self.shared.held.send_modify(|h| h.relisting += 1);
        }
        tokio::spawn(async move {
            let mut lists: [Option<Vec<Box<RawValue>>>; 3] = Default::default();
            for (slot, (method, field, offered)) in lists.iter_mut().zip(offers) {
                *slot = if offered {
                    // A failed list is not known: the one held (if any) stays.
                    crate::link::list_items(&*link, method, field, timeout)
                        .await
                        .ok()
                } else {
                    Some(Vec::new())
                };
            }
            held.held.send_if_modified(|h| {
                if relist {
                    h.relisting = h.relisting.saturating_sub(1);
                }
                if h.synced > generation {
                    return relist;
                }
                for (at, list) in lists.iter().enumerate() {
                    if let Some(items) = list {
                        h.lists[at] = Some(Arc::from(items.clone()));
                    }
                }
                h.saved = false;
                h.synced = generation;
                true
            });
            let Some((current, tx)) = writer else { return };
            let Some(tx) = tx.upgrade() else { return };
            CatalogWriter::update(&current, &tx, |c| {
                let [prompts, resources, templates] = lists;
                if prompts.is_some() {
                    c.prompts = prompts;
                }
                if resources.is_some() {
                    c.resources = resources;
                }
                if templates.is_some() {
                    c.resource_templates = templates;
                }
            });
        });
    }

    /// Wait, at most `limit`, until no call is in flight at this generation (bounded polling: the
    /// count has no waker).
    async fn calls_settled(&self, limit: Duration) {
        let deadline = Instant::now() + limit;
        while self.shared.in_flight.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Publish a phase (and with it the state) in one update: a waiting call must never see
    /// half of a transition (for example a lost generation's close taken for a new attempt).
    fn publish(&self, phase: Phase) {
        self.snapshot.send_modify(|s| s.phase = phase);
    }

    // === one attempt: open, initialize, first sync ===

    async fn attempt(&mut self, attempt: Attempt, failures: u32) -> AttemptEnd {
        self.generation += 1;
        let generation = self.generation;
        self.shared.misses.store(0, Ordering::SeqCst);
        // One update: a waiting call must never see the new generation without the attempt.
        self.snapshot.send_modify(|s| {
            s.generation = generation;
            s.attempt = if attempt == Attempt::First {
                0
            } else {
                failures
            };
            s.phase = Phase::Attempting(attempt);
        });
        // What is still queued is a replaced generation's, which the fence ignores: let it go, so
        // that it holds no room this generation's events need.
        while self.events.try_recv().is_ok() {}
        let events = self.event_queue.for_generation(generation);
        let link = match self.connector.open(generation, events) {
            Ok(link) => link,
            Err(error) => {
                return AttemptEnd::Failed {
                    error: error.into(),
                    stderr: Vec::new(),
                };
            }
        };
        let timeout = self.config.connect_timeout;
        let queue = self.sync_queue.clone();
        let mut handshake = self.handshake.clone();
        let name = self.name.clone();
        let connect = {
            let link = link.clone();
            async move {
                // The process is up; the handshake waits for the client's identity (wrap), and
                // only then does connectTimeoutMs start.
                let params = match handshake.wait_for(Option::is_some).await {
                    Ok(params) => params.clone(),
                    Err(_) => None,
                };
                let Some(params) = params else {
                    return Ok(Err(AttemptError::HubDropped));
                };
                tokio::time::timeout(timeout, async move {
                    let info = link.initialize(&params).await?;
                    // The first sync runs through the queue like every later one.
                    let _turn = queue.lock().await;
                    let tools = sync_tools(&*link, timeout, &name)
                        .await
                        .map_err(AttemptError::FirstList)?;
                    Ok((info, tools))
                })
                .await
            }
        };
        tokio::pin!(connect);
        // Fix (found by tests/states.rs, a_close_during_a_resolving_connect_registers_nothing):
        // a generation that closes while its connect is still resolving is a failed connect and
        // must publish nothing, even if its handshake and first tools/list then succeed.
        let closed = link.closed();
        tokio::pin!(closed);
        // A saved catalog made for another client is withdrawn once this client is known.
        let mut client = self.handshake.clone();
        let mut checked = self.snapshot.borrow().tool_list != ToolList::Cache;
        let outcome = loop {
            tokio::select! {
                outcome = &mut connect => break outcome,
                known = async { client.wait_for(Option::is_some).await.is_ok() }, if !checked => {
                    checked = true;
                    if known && !self.shared.saved_fits() {
                        tracing::info!(server = %self.name, "the saved catalog was made for another client: withdrawn until the server lists its own tools");
                        self.withdraw();
                    }
                }
                () = &mut closed => break Ok(Err(AttemptError::ClosedWhileConnecting)),
                command = self.commands.recv() => match command {
                    None | Some(Command::Stop(_)) => {
                        if let Some(Command::Stop(reply)) = command {
                            self.stop_reply.push(reply);
                        }
                        link.close(CloseHow::Kill);
                        if let Err(stuck) = self.barrier(&link).await {
                            tracing::error!(server = %self.name, "{stuck}");
                        }
                        return AttemptEnd::Stop;
                    }
                    Some(_) => {} // an attempt is already under way; signals about older generations are stale
                },
            }
        };
        let error = match outcome {
            Ok(Ok(_)) if futures::FutureExt::now_or_never(closed.as_mut()).is_some() => {
                AttemptError::ClosedWhileConnecting
            }
            Ok(Ok((info, tools))) => {
                // The live list replaces the cached one; clients hear of it only if it differs.
                self.registry.publish(&self.name, tools.clone());
                let asked = self.handshake.borrow().as_deref().and_then(asked_version);
                let client = self
                    .handshake
                    .borrow()
                    .as_deref()
                    .map(|p| p.get().to_string());
                let saved = asked.map(|asked| SavedHandshake {
                    asked,
                    result: info.clone(),
                    client,
                });
                self.save_tools(&tools, saved);
                let info: Arc<RawValue> = info.into();
                *self
                    .shared
                    .last_info
                    .lock()
                    .unwrap_or_else(|p| p.into_inner()) = Some(info.clone());
                self.sync_extras(generation, &link, &info, false);
                let pid = link.pid();
                let since = Instant::now();
                // The restart is counted in the same update: a call answered on this
                // generation never sees it ready and not yet counted.
                self.snapshot.send_modify(|s| {
                    s.attempt = 0;
                    if attempt != Attempt::First {
                        s.restarts += 1;
                    }
                    s.tool_list = ToolList::Live;
                    s.phase = Phase::Ready {
                        link: link.clone(),
                        since,
                        pid,
                        server_info: info,
                    };
                });
                return AttemptEnd::Ready(link);
            }
            Ok(Err(error)) => error,
            Err(_) => AttemptError::TimedOut(timeout),
        };
        // The failed generation must be gone before any backoff starts.
        link.close(CloseHow::Kill);
        if let Err(stuck) = self.barrier(&link).await {
            return AttemptEnd::Stuck(stuck);
        }
        AttemptEnd::Failed {
            error,
            stderr: link.stderr_tail(),
        }
    }

    /// Queue a re-sync of `generation`'s tools behind any sync in flight. A change while one of
    /// this generation's waits for its turn is covered by it (it lists after the change), so a
    /// server that repeats `list_changed` has at most one sync listing and one waiting.
    fn enqueue_sync(&self, generation: u64, link: Arc<dyn Link>) {
        if self.sync_waiting.swap(generation, Ordering::SeqCst) == generation {
            return; // one waits for its turn already
        }
        let waiting = self.sync_waiting.clone();
        let queue = self.sync_queue.clone();
        let done = self.synced_tx.clone();
        let timeout = self.config.connect_timeout;
        let name = self.name.clone();
        tokio::spawn(async move {
            let _turn = queue.lock().await;
            // It begins listing: a change from now on needs a sync of its own.
            let _ = waiting.compare_exchange(generation, 0, Ordering::SeqCst, Ordering::SeqCst);
            let result = sync_tools(&*link, timeout, &name).await;
            let _ = done.send(Box::new(SyncDone { generation, result }));
        });
    }

    /// Wait until `link` has fully closed, at most [`CLOSE_BARRIER`].
    async fn barrier(&self, link: &Arc<dyn Link>) -> Result<(), Stuck> {
        match tokio::time::timeout(CLOSE_BARRIER, link.closed()).await {
            Ok(()) => Ok(()),
            Err(_) => Err(Stuck {
                generation: self.generation,
                within: CLOSE_BARRIER,
            }),
        }
    }
}

/// A recovery under way: its trace span, when it began, and the backoff waited so far.
struct Recovering {
    span: tracing::Span,
    since: Instant,
    backoff: Duration,
}

impl Recovering {
    fn new(server: &str, lost_generation: u64, cause: &str) -> Self {
        Self {
            span: crate::trace::recovery_span(server, lost_generation, cause),
            since: Instant::now(),
            backoff: Duration::ZERO,
        }
    }

    /// Record how it ended; the span closes when this is dropped.
    fn end(self, generation: Option<u64>, outcome: &'static str) {
        let millis = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        if let Some(generation) = generation {
            self.span
                .record("generation", crate::trace::as_i64(generation));
            self.span.record("ready_ms", millis(self.since.elapsed()));
        }
        self.span.record("backoff_ms", millis(self.backoff));
        self.span.record("outcome", outcome);
    }
}

/// Append the server's last stderr lines to a failure's cause.
fn with_stderr(cause: String, link: &Arc<dyn Link>) -> String {
    with_tail(&cause, &link.stderr_tail())
}

/// A failure's cause in words, with the server's last stderr lines when it wrote any.
fn with_tail(cause: &dyn std::fmt::Display, tail: &[String]) -> String {
    if tail.is_empty() {
        cause.to_string()
    } else {
        format!("{cause}; last stderr lines: {}", tail.join(" | "))
    }
}

/// Every tool of a generation, read for the registry. A definition that is not valid is left
/// out with a warning; the others are published.
async fn sync_tools(
    link: &dyn Link,
    timeout: Duration,
    server: &str,
) -> Result<Vec<UpstreamTool>, Failure> {
    let listed = crate::link::list_tools(link, timeout).await?;
    let mut tools = Vec::with_capacity(listed.len());
    for definition in listed {
        match UpstreamTool::parse(definition) {
            Ok(tool) => tools.push(tool),
            Err(cause) => tracing::warn!(server, "{cause}; the tool is not published"),
        }
    }
    Ok(tools)
}

/// Tool definitions from a saved catalog, for the registry; one that is not valid is left out.
fn parse_tools(saved: &[Box<RawValue>], server: &str) -> Vec<UpstreamTool> {
    saved
        .iter()
        .filter_map(|definition| match UpstreamTool::parse(definition.clone()) {
            Ok(tool) => Some(tool),
            Err(cause) => {
                tracing::warn!(server, "saved catalog: {cause}; the tool is not published");
                None
            }
        })
        .collect()
}

/// The `protocolVersion` of `initialize` params.
fn asked_version(params: &RawValue) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Asked {
        #[serde(rename = "protocolVersion")]
        protocol_version: String,
    }
    serde_json::from_str::<Asked>(params.get())
        .ok()
        .map(|a| a.protocol_version)
}

/// The lists a server's `initialize` answer declares: (method, field, offered).
fn offered_lists(info: &RawValue) -> [(&'static str, &'static str, bool); 3] {
    let info: serde_json::Value = serde_json::from_str(info.get()).unwrap_or_default();
    let has = |capability: &str| {
        info.pointer(&format!("/capabilities/{capability}"))
            .is_some()
    };
    [
        ("prompts/list", "prompts", has("prompts")),
        ("resources/list", "resources", has("resources")),
        (
            "resources/templates/list",
            "resourceTemplates",
            has("resources"),
        ),
    ]
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A link that is never driven: a ready phase needs one to exist.
    struct Inert;

    /// A ready phase on a link that is never driven (for tests of what reads snapshots).
    pub(crate) fn ready_phase(pid: Option<u32>) -> Phase {
        Phase::Ready {
            link: Arc::new(Inert),
            since: Instant::now(),
            pid,
            server_info: Arc::from(RawValue::from_string("{}".to_string()).unwrap()),
        }
    }

    impl Link for Inert {
        fn initialize<'a>(
            &'a self,
            _params: &'a RawValue,
        ) -> crate::link::BoxFuture<'a, Result<Box<RawValue>, crate::HandshakeError>> {
            Box::pin(std::future::pending())
        }
        fn request<'a>(
            &'a self,
            _method: &'a str,
            _params: Option<&'a RawValue>,
            _opts: crate::link::CallOptions,
        ) -> crate::link::BoxFuture<'a, Result<Box<RawValue>, mcp_supervisor_core::classify::Failure>>
        {
            Box::pin(std::future::pending())
        }
        fn notify(&self, _method: &str, _params: Option<&RawValue>) {}
        fn close(&self, _how: CloseHow) {}
        fn closed(&self) -> crate::link::BoxFuture<'static, ()> {
            Box::pin(std::future::pending())
        }
        fn stderr_tail(&self) -> Vec<String> {
            Vec::new()
        }
        fn pid(&self) -> Option<u32> {
            None
        }
    }

    /// Every phase there is, each with the state SPEC §8 gives it.
    fn every_phase() -> Vec<(Phase, ServerState)> {
        let at = Instant::now();
        vec![
            (ready_phase(Some(7)), ServerState::Ready),
            (Phase::Attempting(Attempt::First), ServerState::Connecting),
            (Phase::Attempting(Attempt::Retry), ServerState::Retrying),
            (
                Phase::Attempting(Attempt::Reconnect),
                ServerState::Reconnecting,
            ),
            (
                Phase::Closing(AfterClose::Reconnect),
                ServerState::Reconnecting,
            ),
            (Phase::Closing(AfterClose::Idle), ServerState::Idle),
            (
                Phase::Backoff {
                    at,
                    next: Recovery::Retry,
                },
                ServerState::Retrying,
            ),
            (
                Phase::Backoff {
                    at,
                    next: Recovery::Reconnect,
                },
                ServerState::Reconnecting,
            ),
            (Phase::Parked(Parked::GaveUp), ServerState::GaveUp),
            (Phase::Parked(Parked::Down), ServerState::Down),
            (Phase::Parked(Parked::Stopped), ServerState::Stopped),
            (Phase::Parked(Parked::NeedsAuth), ServerState::NeedsAuth),
            (Phase::Idle, ServerState::Idle),
        ]
    }

    /// The list above names every phase: a new variant fails to compile here until it is added
    /// to it (no `_` arm), and the count catches a variant's value left out.
    fn variant(phase: &Phase) -> usize {
        match phase {
            Phase::Ready { .. } => 0,
            Phase::Attempting(Attempt::First) => 1,
            Phase::Attempting(Attempt::Retry) => 2,
            Phase::Attempting(Attempt::Reconnect) => 3,
            Phase::Closing(AfterClose::Reconnect) => 4,
            Phase::Closing(AfterClose::Idle) => 5,
            Phase::Backoff {
                next: Recovery::Retry,
                ..
            } => 6,
            Phase::Backoff {
                next: Recovery::Reconnect,
                ..
            } => 7,
            Phase::Parked(Parked::GaveUp) => 8,
            Phase::Parked(Parked::Down) => 9,
            Phase::Parked(Parked::Stopped) => 10,
            Phase::Parked(Parked::NeedsAuth) => 11,
            Phase::Idle => 12,
        }
    }

    #[test]
    fn every_phase_shows_its_state() {
        let phases = every_phase();
        let mut seen: Vec<usize> = phases.iter().map(|(p, _)| variant(p)).collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..13).collect::<Vec<_>>(), "each phase once");
        for (phase, state) in &phases {
            assert_eq!(phase.state(), *state, "{phase:?}");
        }
    }

    #[test]
    fn every_state_comes_from_some_phase() {
        let shown: std::collections::HashSet<ServerState> =
            every_phase().iter().map(|(p, _)| p.state()).collect();
        for state in ServerState::ALL {
            assert!(shown.contains(&state), "{state} has no phase");
        }
        assert_eq!(shown.len(), ServerState::ALL.len());
    }

    #[test]
    fn a_snapshot_shows_its_phase_state() {
        let mut snapshot = Snapshot {
            generation: 3,
            attempt: 2,
            max_attempts: 5,
            restarts: 1,
            last_error: None,
            last_loss: None,
            phase: Phase::Parked(Parked::NeedsAuth),
            tool_list: ToolList::None,
        };
        assert_eq!(snapshot.state(), ServerState::NeedsAuth);
        snapshot.phase = Phase::Closing(AfterClose::Idle);
        assert_eq!(snapshot.state(), ServerState::Idle);
        assert!(snapshot.attempting() && snapshot.closing());
    }
}
