//! The library's front door: one handle for a set of servers. It owns their supervisors and the
//! registry, routes a call by public name to the right supervisor, reports status and events,
//! and applies a reload as a diff.
//!
//! It never touches a generation or a server's state itself: it asks the supervisor.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use mcp_supervisor_core::config::{Config, Isolation, ServerConfig, Start, TransportConfig};
use mcp_supervisor_core::pin::PinMode;
use rmcp::model::{CallToolResult, JsonObject, ProgressNotificationParam};
use serde_json::value::RawValue;
use tokio::sync::{broadcast, mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::catalog::CatalogStore;
use crate::error::{CallError, Error};
use crate::link::{BoxFuture, Connector, Downstream, Refuse, RpcError};
use crate::registry::{PublishedTool, Registry, Route};
use crate::routes::Routes;
use crate::supervisor::{
    CallReport, CallRequest, ServerEvent, ServerState, SupervisorHandle, ToolList,
};
use crate::upstream::{InstanceUpstream, ResumeUpstream, ServerConnector};

/// Builds the connector for a server; tests swap in a fake.
pub type ConnectorFactory = Arc<dyn Fn(&ServerConfig) -> Arc<dyn Connector> + Send + Sync>;

/// Makes the connector of one client session's own instance of an isolated server (SPEC §11):
/// the server's requests that no call caused go to that session's client; a `url` server's
/// upstream session begins and ends as its [`InstanceUpstream`] says.
pub type InstanceFactory = Arc<
    dyn Fn(&ServerConfig, Arc<dyn Downstream>, InstanceUpstream) -> Arc<dyn Connector>
        + Send
        + Sync,
>;

/// How a client session ends, for its instances of isolated servers (SPEC §11, §12).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionEnd {
    /// The client ended it (DELETE, the end of stdio): its upstream sessions are ended too.
    Ended,
    /// This process only lets go of it (evicted from a full cache, idle, stopping): its sealed
    /// id may resume it here or on another replica, so its upstream sessions are left open for
    /// that (the upstream server's own expiry ends them if nobody does).
    LetGo,
}

/// What a caller passes with a tool call.
#[derive(Clone, Default)]
pub struct CallArgs {
    /// The tool's arguments ([`Hub::call`] only; [`Hub::call_json`] takes them in its params).
    pub arguments: Option<JsonObject>,
    /// A deadline shorter than the server's `toolCallTimeoutMs`.
    pub timeout: Option<Duration>,
    /// Where the call's progress goes ([`Hub::call`] only: it asks the server for progress).
    /// Unbounded: it holds the call's progress, as the server sent it, until you read it. To
    /// bound it, call [`Hub::call_json`] with a `progressToken` of your own and an `origin`,
    /// whose [`Downstream::notify`] gets each progress notification.
    pub progress: Option<mpsc::UnboundedSender<ProgressNotificationParam>>,
    /// Cancel the call: it ends with [`CallError::Cancelled`] and `notifications/cancelled`
    /// goes upstream (the tool may have run).
    pub cancel: Option<CancellationToken>,
    /// The client the call is for: the server's requests caused by the call (roots, sampling,
    /// elicitation) and its progress go there. `None`: the hub's [`HubOptions::client`].
    pub origin: Option<Arc<dyn Downstream>>,
    /// The caller takes a stateless server's input-required results itself (it is a client of
    /// that era): they come back as the call's result, whole, instead of being answered through
    /// `origin` round by round.
    pub relays_input: bool,
    /// Where the params' `name` value (the JSON string, quotes included) lies in their text,
    /// when the caller read it already ([`Hub::call_json`]): a rename to the upstream name is
    /// then written there, with no second read of the params. Checked before use: a range that
    /// does not hold the public name as a JSON string is ignored.
    pub name_at: Option<std::ops::Range<usize>>,
    /// Where the call's [`CallReport`] goes when it ends, however it ends (its future dropped
    /// too): how many times it was sent, on which generations, whether it may have run. Left
    /// empty when the call ended before it was sent anywhere (an unknown tool, a server that is
    /// not running): its error says that. `None`: no report is made.
    pub report: Option<Arc<std::sync::OnceLock<CallReport>>>,
}

impl std::fmt::Debug for CallArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallArgs")
            .field("arguments", &self.arguments)
            .field("timeout", &self.timeout)
            .field("progress", &self.progress.is_some())
            .field("origin", &self.origin.is_some())
            .field("relays_input", &self.relays_input)
            .field("report", &self.report.is_some())
            .finish()
    }
}

/// How a hub meets its servers.
#[derive(Clone)]
pub struct HubOptions {
    /// Answers a server's requests (roots, sampling, elicitation, ping) that no caller's call
    /// caused, or whose caller gave no origin. The default refuses them cleanly.
    pub client: Arc<dyn Downstream>,
    /// The `initialize` params every server is opened with. `None`: the servers' processes start
    /// at once, but their handshakes wait until [`Hub::set_handshake`] gives the client's own.
    pub handshake: Option<Arc<RawValue>>,
    /// Where servers' catalogs are saved after each successful list and published from at the
    /// next start ([`crate::catalog`]). `None`: no catalog.
    pub state_dir: Option<std::path::PathBuf>,
    /// Links each request's span (`mcp.call`, see [`crate::trace`]) to a trace and gives the
    /// `traceparent` carried upstream in the request's `_meta`. `None`: none is sent.
    pub trace: Option<Arc<dyn crate::trace::TraceContext>>,
    /// The credentials of the connections to servers with `credentials` (SPEC §14: a token of
    /// the caller's identity, by token exchange). `None`: such servers' requests carry no token.
    pub delegation: Option<Arc<dyn crate::auth::Delegation>>,
    /// The binary that starts sandboxed servers (SPEC §16), run as `BINARY
    /// __mcp-supervisor-sandbox SPEC -- COMMAND ARGS...`; it must call
    /// [`crate::sandbox::run_if_asked`] first thing in its `main`. `None`: this executable, when it
    /// called [`crate::sandbox::run_if_asked`]; otherwise sandboxed servers do not start.
    pub sandbox_helper: Option<std::path::PathBuf>,
}

impl HubOptions {
    /// Servers' requests answered by `client`, which can do what `capabilities` declares (an
    /// MCP `ClientCapabilities` object, e.g. `{"roots": {"listChanged": true}}`); the servers
    /// are opened in the hub's own name with those capabilities.
    ///
    /// A host that tells its servers which folders the user works in:
    ///
    /// ```
    /// use std::sync::Arc;
    ///
    /// use mcp_supervisor::core::config::Config;
    /// use mcp_supervisor::link::BoxFuture;
    /// use mcp_supervisor::{Downstream, Hub, HubOptions, Refuse, RpcError};
    /// use serde_json::value::RawValue;
    ///
    /// struct Host;
    ///
    /// impl Downstream for Host {
    ///     fn request(
    ///         &self,
    ///         method: &str,
    ///         params: Option<Box<RawValue>>,
    ///     ) -> BoxFuture<'static, Result<Box<RawValue>, RpcError>> {
    ///         match method {
    ///             "roots/list" => Box::pin(async {
    ///                 let roots = serde_json::json!({ "roots": [{ "uri": "file:///home/me/project" }] });
    ///                 serde_json::value::to_raw_value(&roots)
    ///                     .map_err(|e| RpcError::new(-32603, e.to_string()))
    ///             }),
    ///             // No sampling, no elicitation here: refused with a clean JSON-RPC error.
    ///             _ => Refuse.request(method, params),
    ///         }
    ///     }
    ///
    ///     fn notify(&self, _method: &str, _params: Option<Box<RawValue>>) {}
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let capabilities = serde_json::json!({ "roots": { "listChanged": true } });
    /// let options = HubOptions::answering(Arc::new(Host), &capabilities);
    /// let hub = Hub::start_with_options(Config::default(), options);
    /// assert!(hub.has_handshake());
    /// hub.stop().await;
    /// # }
    /// ```
    pub fn answering(client: Arc<dyn Downstream>, capabilities: &serde_json::Value) -> Self {
        Self {
            client,
            handshake: Some(default_handshake(capabilities)),
            state_dir: None,
            trace: None,
            delegation: None,
            sandbox_helper: None,
        }
    }
}

impl Default for HubOptions {
    fn default() -> Self {
        Self {
            client: Arc::new(Refuse),
            handshake: Some(default_handshake(&serde_json::json!({}))),
            state_dir: None,
            trace: None,
            delegation: None,
            sandbox_helper: None,
        }
    }
}

/// The protocol version the hub asks for when it speaks for itself.
pub const PROTOCOL_VERSION: &str = "2025-11-25";

/// How long a call to a name nobody publishes yet waits for servers on their first attempt
/// (bounded further by the call's own timeout).
const FIRST_LIST_WAIT: Duration = Duration::from_secs(10);

/// How long a list waits for a server's part that is not known yet but may come (the server is
/// on its first attempt, or its listing is under way).
pub const LIST_WAIT: Duration = Duration::from_secs(10);

/// How often the pin files are looked at for an approval written by another process.
pub const PIN_POLL: Duration = Duration::from_secs(1);

/// `initialize` params in the hub's own name, declaring `capabilities`: every server is opened
/// with the `initialize` handshake at [`PROTOCOL_VERSION`] (unless its `protocolVersion` says
/// otherwise). The hub's default, and `serve`'s: its clients of the handshake era share the
/// servers' sessions (their resource subscriptions and log levels are of that era).
pub fn default_handshake(capabilities: &serde_json::Value) -> Arc<RawValue> {
    own_handshake(capabilities, false)
}

/// As [`default_handshake`], but as the official SDKs' clients do: each server is asked for the
/// stateless era first (`server/discover`, marked by the stateless version in `_meta`, which is
/// never sent in an `initialize`), and opened with the handshake when it does not speak it. For
/// a one-shot client (the `tools` and `call` commands); a server's `protocolVersion` pins one.
pub fn discovering_handshake(capabilities: &serde_json::Value) -> Arc<RawValue> {
    own_handshake(capabilities, true)
}

fn own_handshake(capabilities: &serde_json::Value, discover_first: bool) -> Arc<RawValue> {
    let mut params = serde_json::json!({
        "protocolVersion": PROTOCOL_VERSION,
        "capabilities": capabilities,
        "clientInfo": { "name": "mcp-supervisor", "version": env!("CARGO_PKG_VERSION") },
    });
    if discover_first {
        params["_meta"] = serde_json::json!({
            "io.modelcontextprotocol/protocolVersion": crate::upstream::STATELESS_VERSION
        });
    }
    serde_json::value::to_raw_value(&params)
        .unwrap_or_else(|_| crate::link::empty_object())
        .into()
}

/// The hub's health verdict ([`Hub::health`]): healthy while every enabled server is in
/// service (ready, or idle: an on-demand server not started yet, or stopped after its idle
/// timeout); otherwise the servers that are not, each with its state and last error. Holds no
/// secret.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Health {
    /// The enabled servers not in service, in config order; empty when healthy.
    pub unavailable: Vec<Unavailable>,
}

impl Health {
    /// Whether every enabled server is in service.
    pub fn is_healthy(&self) -> bool {
        self.unavailable.is_empty()
    }

    /// The verdict on `status` ([`Hub::status`]).
    pub fn of(status: &[ServerStatus]) -> Self {
        let unavailable = status
            .iter()
            .filter(|s| s.enabled && !s.state.in_service())
            .map(|s| Unavailable {
                server: s.name.clone(),
                state: s.state,
                last_error: s.last_error.clone(),
            })
            .collect();
        Self { unavailable }
    }
}

/// An enabled server out of service, as [`Health`] names it.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Unavailable {
    /// The server's name in the config.
    pub server: String,
    /// Its state, one that is not in service.
    pub state: ServerState,
    /// Why its last connection or attempt failed, if one did.
    pub last_error: Option<String>,
}

/// One server as `status` shows it. Holds no secret.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerStatus {
    /// The server's name in the config.
    pub name: String,
    /// What it is doing now.
    pub state: ServerState,
    /// The connection most recently started (0 before the first); a recovery makes a new one.
    pub generation: u64,
    /// The attempt number within the current outage (0 when ready).
    pub attempts: u32,
    /// The outage budget: attempts before it gives up.
    pub max_attempts: u32,
    /// How many times a lost or failed connection was replaced by a ready one.
    pub restarts: u64,
    /// Why the last connection or attempt failed, if one did.
    pub last_error: Option<String>,
    /// How many tools it publishes now (0 while it is not ready).
    pub tools: usize,
    /// How long the current connection has been ready.
    pub uptime_ms: Option<u64>,
    /// The process id of a ready stdio server (the leader of its process group).
    pub pid: Option<u32>,
    /// Whether the config enables it (a disabled server is listed, `stopped`).
    pub enabled: bool,
    /// Where the published tools come from: `cache` (the saved catalog, until the server lists
    /// its own), `live`, or `none`.
    pub tool_list: ToolList,
    /// For a server isolated per client session: how many sessions' instances run now.
    pub instances: usize,
    /// How many of its tools are withheld: changed since they were pinned, under `pin: block`,
    /// until `mcp-supervisor approve` accepts them.
    pub withheld_tools: usize,
    /// Tool results larger than its `maxResultBytes` that reached their client cut.
    pub results_cut: u64,
    /// Its sandbox (SPEC §16): the config's, and what this kernel gives it; `None`: none.
    pub sandbox: Option<crate::sandbox::SandboxStatus>,
}

/// Something that happened in the hub.
#[derive(Clone, Debug)]
pub enum HubEvent {
    /// A server's state or generation changed.
    State {
        /// The server's name.
        server: String,
        /// Its new state.
        state: ServerState,
        /// Its current generation.
        generation: u64,
    },
    /// The aggregate tool list changed.
    ToolsChanged,
    /// A server sent a notification to pass downstream.
    Notification(ServerEvent),
}

struct Running {
    handle: SupervisorHandle,
    join: JoinHandle<()>,
    forwarder: JoinHandle<()>,
    /// A client session's instance: set to end its upstream session when it closes.
    ends_upstream: Option<Arc<AtomicBool>>,
}

impl Running {
    /// Stop the supervisor and wait until its generation is closed (process group gone).
    async fn finish(self) {
        self.handle.stop().await;
        let _ = self.join.await;
        self.forwarder.abort();
    }
}

/// Stop every one of `running` at once and wait until all are closed.
async fn finish_all(running: Vec<Running>) {
    futures::future::join_all(running.into_iter().map(Running::finish)).await;
}

struct Inner {
    order: Vec<ServerConfig>,
    /// At most one supervisor per server name: an entry is never replaced, only taken out and
    /// stopped before another of its name starts.
    running: HashMap<String, Running>,
    /// The instances of isolated servers, by server and client session.
    instances: HashMap<(String, usize), Running>,
    /// The sessions of each identity, for servers isolated per user (SPEC §14).
    users: crate::users::Users,
    /// Upstream sessions a resumed client session carried that were not resumed then (this
    /// process did not know the server's `initialize` answer yet), by server and client
    /// session: its instance's first start takes them.
    to_resume: HashMap<(String, usize), String>,
    /// Instances being stopped after their session ended; [`Hub::stop`] waits for them.
    ending: Vec<JoinHandle<()>>,
    /// [`Hub::stop`] was called: nothing starts any more.
    stopped: bool,
    /// Tool results cut to `maxResultBytes`, by server.
    results_cut: HashMap<String, u64>,
}

/// Whether a server with this isolation gets instances of its own per client: per client
/// session, or per identity (`user`, SPEC §14: see [`Hub::instance_client`]).
fn per_session(isolation: Isolation) -> bool {
    match isolation {
        Isolation::Shared => false,
        Isolation::Session | Isolation::User => true,
    }
}

impl Inner {
    /// Whether `server` gives each client session its own instance (SPEC §11).
    fn isolated(&self, server: &str) -> bool {
        self.order
            .iter()
            .any(|s| s.name == server && per_session(s.isolation))
    }
}

/// A supervised set of MCP servers.
pub struct Hub {
    registry: Arc<Registry>,
    /// Which server owns a resource URI, a prompt, a task id.
    routes: Routes,
    inner: Mutex<Inner>,
    /// Held for the whole of a reload, stops included: reloads are applied one at a time, in
    /// the order they were called.
    reloading: tokio::sync::Mutex<()>,
    events: broadcast::Sender<HubEvent>,
    notifications: broadcast::Sender<ServerEvent>,
    factory: ConnectorFactory,
    /// Connectors of per-session instances; `None`: the shared factory's (its connectors
    /// route a server's own requests as they do for the shared instance).
    instance_factory: Option<InstanceFactory>,
    handshake: watch::Sender<Option<Arc<RawValue>>>,
    catalog: Option<Arc<CatalogStore>>,
    trace: Option<Arc<dyn crate::trace::TraceContext>>,
    background: Vec<JoinHandle<()>>,
    /// Each server's lifecycle events and calls of the last hour (SPEC §15).
    history: Arc<crate::history::Histories>,
    /// The host's sandbox helper ([`HubOptions::sandbox_helper`]), for status.
    sandbox_helper: Option<std::path::PathBuf>,
}

impl Hub {
    /// Start supervising every enabled server of `config`, in the hub's own name, refusing the
    /// servers' requests to a client.
    ///
    /// It returns at once: each server connects in the background (see [`Hub::wait_ready`],
    /// [`Hub::status`], [`Hub::subscribe`]), and a server that cannot start is retried under its
    /// reconnect policy, never reported as an error here. Call it inside a tokio runtime (it
    /// spawns tasks); call [`Hub::stop`] before dropping the hub, or its server processes live on
    /// until the runtime ends.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// use mcp_supervisor::core::config::parse_config;
    /// use mcp_supervisor::{Hub, ServerState};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let config = parse_config(
    ///     r#"{ "mcpServers": { "gone": { "command": "/nonexistent/mcp-server" } } }"#,
    ///     &|name| std::env::var(name).ok(),
    /// )?;
    /// let hub = Hub::start(config);
    /// hub.wait_started(Duration::from_secs(5)).await;
    /// let status = &hub.status()[0];
    /// assert_eq!(status.state, ServerState::Retrying);
    /// assert!(status.last_error.as_deref().unwrap_or_default().contains("could not start"));
    /// hub.stop().await;
    /// # Ok(())
    /// # }
    /// ```
    pub fn start(config: Config) -> Self {
        Self::start_with_options(config, HubOptions::default())
    }

    /// Start with the caller's client handler and handshake.
    pub fn start_with_options(config: Config, options: HubOptions) -> Self {
        let client = options.client.clone();
        let delegation = options.delegation.clone();
        let helper = options.sandbox_helper.clone();
        let factory: ConnectorFactory = Arc::new(move |server: &ServerConfig| {
            let connector =
                ServerConnector::new(server.clone(), client.clone()).sandbox_helper(helper.clone());
            Arc::new(connector.delegated(delegation.as_deref(), None)) as Arc<dyn Connector>
        });
        let catalog = options
            .state_dir
            .map(|dir| Arc::new(CatalogStore::new(dir)));
        let mut hub = Self::build(config, factory, options.handshake, options.trace, catalog);
        let delegation = options.delegation;
        let helper = options.sandbox_helper;
        hub.sandbox_helper = helper.clone();
        hub.instance_factory = Some(Arc::new(
            move |server: &ServerConfig, client: Arc<dyn Downstream>, upstream| {
                // An identity's own instance carries that identity's token.
                let identity = client.identity();
                let connector = ServerConnector::for_instance(server.clone(), client, upstream)
                    .sandbox_helper(helper.clone());
                Arc::new(connector.delegated(delegation.as_deref(), identity.as_deref()))
                    as Arc<dyn Connector>
            },
        ));
        hub
    }

    /// Start with a connector of the caller's (tests use a scripted fake).
    pub fn start_with(config: Config, factory: ConnectorFactory) -> Self {
        Self::build(config, factory, HubOptions::default().handshake, None, None)
    }

    /// Start with a connector of the caller's and catalogs saved under `state_dir`.
    pub fn start_with_catalog(
        config: Config,
        factory: ConnectorFactory,
        state_dir: std::path::PathBuf,
    ) -> Self {
        let catalog = Some(Arc::new(CatalogStore::new(state_dir)));
        Self::build(
            config,
            factory,
            HubOptions::default().handshake,
            None,
            catalog,
        )
    }

    fn build(
        config: Config,
        factory: ConnectorFactory,
        handshake: Option<Arc<RawValue>>,
        trace: Option<Arc<dyn crate::trace::TraceContext>>,
        catalog: Option<Arc<CatalogStore>>,
    ) -> Self {
        let (handshake, _) = watch::channel(handshake);
        let names = config.servers.iter().map(|s| s.name.clone()).collect();
        let registry = Arc::new(Registry::new(config.naming.clone(), names));
        let (events, _) = broadcast::channel(1024);
        let (notifications, _) = broadcast::channel(1024);
        let mut background = Vec::new();
        // Registry changes → events.
        {
            let mut version = registry.subscribe();
            let events = events.clone();
            background.push(tokio::spawn(async move {
                while version.changed().await.is_ok() {
                    let _ = events.send(HubEvent::ToolsChanged);
                }
            }));
        }
        // Server notifications → events.
        {
            let mut rx = notifications.subscribe();
            let events = events.clone();
            background.push(tokio::spawn(async move {
                loop {
                    match rx.recv().await {
                        Ok(event) => {
                            let _ = events.send(HubEvent::Notification(event));
                        }
                        Err(broadcast::error::RecvError::Lagged(_)) => continue,
                        Err(broadcast::error::RecvError::Closed) => break,
                    }
                }
            }));
        }
        // Approvals written by `mcp-supervisor approve` reach the running registry.
        if catalog.is_some() {
            let registry = registry.clone();
            background.push(tokio::spawn(async move {
                let mut every = tokio::time::interval(PIN_POLL);
                every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    every.tick().await;
                    registry.refresh_pins();
                }
            }));
        }
        let hub = Self {
            registry,
            routes: Routes::default(),
            inner: Mutex::new(Inner {
                order: config.servers.clone(),
                running: HashMap::new(),
                instances: HashMap::new(),
                users: crate::users::Users::default(),
                to_resume: HashMap::new(),
                ending: Vec::new(),
                stopped: false,
                results_cut: HashMap::new(),
            }),
            reloading: tokio::sync::Mutex::new(()),
            events,
            notifications,
            factory,
            instance_factory: None,
            sandbox_helper: None,
            handshake,
            catalog,
            trace,
            background,
            history: Arc::default(),
        };
        {
            let mut inner = hub.lock();
            for server in config.servers.into_iter().filter(|s| s.enabled) {
                match inner.running.entry(server.name.clone()) {
                    Entry::Vacant(slot) => {
                        slot.insert(hub.spawn_server(server));
                    }
                    // Only a config built by hand can name a server twice; `parse_config` cannot.
                    Entry::Occupied(_) => tracing::warn!(
                        server = %server.name,
                        "the server is named twice in the config: the first one runs"
                    ),
                }
            }
        }
        hub
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Start `server`'s supervisor, after stopping (and waiting for) one still running under its
    /// name: two processes of one server never run at once (SPEC §3). Nothing starts once the
    /// hub is stopped.
    async fn start_server(&self, server: ServerConfig) {
        // Only `build` and reloads, one at a time, start servers: the second turn finds the name
        // free.
        for _ in 0..2 {
            let running = {
                let mut inner = self.lock();
                if inner.stopped {
                    return;
                }
                match inner.running.entry(server.name.clone()) {
                    Entry::Vacant(slot) => {
                        slot.insert(self.spawn_server(server));
                        return;
                    }
                    Entry::Occupied(slot) => slot.remove(),
                }
            };
            tracing::warn!(
                server = %server.name,
                "stopping the running instance before its replacement starts"
            );
            running.finish().await;
        }
        tracing::error!(
            server = %server.name,
            "another instance keeps being started; this config is not started"
        );
    }

    fn spawn_server(&self, server: ServerConfig) -> Running {
        let name = server.name.clone();
        // The filter and the pins are in place before the supervisor can publish anything.
        self.registry.set_filter(&name, server.tools.clone());
        self.registry.set_pins(&name, self.pin_book(&server));
        let connector = (self.factory)(&server);
        let seed = jitter_seed(&name);
        let mut rng = fastrand::Rng::with_seed(seed);
        let (handle, join) = SupervisorHandle::spawn(
            server,
            connector,
            self.registry.clone(),
            self.notifications.clone(),
            self.handshake.subscribe(),
            Box::new(move || rng.f64()),
            self.catalog.clone(),
        );
        let forwarder = {
            let mut watch = handle.watch();
            let events = self.events.clone();
            let history = self.history.clone();
            let server = name.clone();
            tokio::spawn(async move {
                let mut last = None;
                loop {
                    let (state, generation) = {
                        let s = watch.borrow_and_update();
                        history.with(&server, |h| h.saw(&s, std::time::SystemTime::now()));
                        (s.state(), s.generation)
                    };
                    if last != Some((state, generation)) {
                        last = Some((state, generation));
                        let _ = events.send(HubEvent::State {
                            server: server.clone(),
                            state,
                            generation,
                        });
                    }
                    if state == ServerState::Stopped || watch.changed().await.is_err() {
                        break;
                    }
                }
            })
        };
        Running {
            handle,
            join,
            forwarder,
            ends_upstream: None,
        }
    }

    /// `server`'s pins: under the catalogs' directory, unless its `pin` is `off`. Without a
    /// directory there are none, and a configured `pin` says so.
    fn pin_book(&self, server: &ServerConfig) -> Option<crate::pins::PinBook> {
        let mode = server.pin_mode();
        if mode == PinMode::Off {
            return None;
        }
        match &self.catalog {
            Some(store) => Some(crate::pins::PinBook::open(store.dir(), server, mode)),
            None => {
                if server.pin.is_some() {
                    tracing::warn!(
                        server = %server.name,
                        "\"pin\": \"{mode}\" has no effect: there is no state directory to keep pins in (--no-catalog); its tools are published as they come"
                    );
                }
                None
            }
        }
    }

    /// `server`'s lifecycle events of the last hour, oldest first (SPEC §15); empty for a
    /// server the hub has not seen.
    pub fn events(&self, server: &str) -> Vec<crate::history::Event> {
        let now = std::time::SystemTime::now();
        self.history
            .read(server, |h| h.events(now))
            .unwrap_or_default()
    }

    /// `server`'s tool calls of the last hour: each minute that had any, oldest first, and the
    /// hour as one span (calls, errors, median and p99 latency).
    pub fn calls(
        &self,
        server: &str,
    ) -> (Vec<crate::history::CallStats>, crate::history::CallStats) {
        let now = std::time::SystemTime::now();
        self.history
            .read(server, |h| (h.minutes(now), h.hour(now)))
            .unwrap_or_default()
    }

    /// The aggregate tool list.
    pub fn tools(&self) -> Arc<Vec<PublishedTool>> {
        self.registry.tools()
    }

    /// The registry (read-only use: resolve names, watch changes).
    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// Which server owns a resource URI, a prompt name or a task id, as learned from the lists
    /// the front passed on.
    pub fn routes(&self) -> &Routes {
        &self.routes
    }

    /// Events: state changes, tool-list changes, upstream notifications.
    pub fn subscribe(&self) -> broadcast::Receiver<HubEvent> {
        self.events.subscribe()
    }

    fn handle(&self, server: &str) -> Option<SupervisorHandle> {
        self.lock().running.get(server).map(|r| r.handle.clone())
    }

    /// The supervisor that serves a request of `origin`'s to `server`: for an isolated server
    /// (SPEC §11) the client session's own instance, started on its first need, else `shared`.
    /// A request with no client session (the library's own, a stateless client) takes the
    /// shared one.
    fn serving(
        &self,
        server: &str,
        shared: SupervisorHandle,
        origin: Option<&Arc<dyn Downstream>>,
    ) -> Result<SupervisorHandle, CallError> {
        // Checked first: most servers are shared, and a client's session costs a handle of it.
        if !self.isolated(server) {
            return Ok(shared);
        }
        let Some((session, client)) = origin.and_then(|o| self.instance_client(server, o)) else {
            return Ok(shared);
        };
        Ok(self
            .instance(server, session, client, None)?
            .unwrap_or(shared))
    }

    /// The key of `origin`'s own instances of isolated `server`, and the client they answer
    /// to: its session's (`isolation: "session"`), or its identity's, shared by all of that
    /// identity's sessions (`"user"`; a session no one vouched for is its own identity).
    /// `None` for a request with no client session.
    fn instance_client(
        &self,
        server: &str,
        origin: &Arc<dyn Downstream>,
    ) -> Option<(usize, Arc<dyn Downstream>)> {
        let session = origin.session();
        let per_user = self
            .lock()
            .order
            .iter()
            .any(|s| s.name == server && s.isolation == Isolation::User);
        if per_user && let Some(identity) = origin.identity() {
            let mut inner = self.lock();
            return Some(match session {
                Some((session, client)) => inner.users.join(&identity, session, client),
                // A client of the sessionless era: its identity's instance all the same.
                None => (inner.users.key(&identity), origin.clone()),
            });
        }
        session
    }

    /// Client session `session`'s own instance of `server`, started now if it has none
    /// (resuming the upstream session `resume` when given); `None` when `server` is not
    /// isolated, or nothing starts any more. Past `maxInstances`, the error that names it.
    fn instance(
        &self,
        server: &str,
        session: usize,
        client: Arc<dyn Downstream>,
        resume: Option<ResumeUpstream>,
    ) -> Result<Option<SupervisorHandle>, CallError> {
        let mut inner = self.lock();
        let Some(config) = inner
            .order
            .iter()
            .find(|s| s.name == server && per_session(s.isolation))
            .cloned()
        else {
            return Ok(None);
        };
        let key = (server.to_string(), session);
        if let Some(instance) = inner.instances.get(&key) {
            return Ok(Some(instance.handle.clone()));
        }
        if inner.stopped {
            // Nothing starts after the hub's stop: the shared one answers that it stopped.
            return Ok(None);
        }
        let live = inner.instances.keys().filter(|(s, _)| s == server).count();
        if live >= config.max_instances as usize {
            return Err(CallError::TooManyInstances {
                server: server.to_string(),
                max: config.max_instances,
            });
        }
        // An upstream session its client carried here, once the server's answer is known.
        let resume = resume.or_else(|| {
            let session_id = inner.to_resume.remove(&key)?;
            let answer = inner.running.get(server)?.handle.server_info()?;
            Some(ResumeUpstream { session_id, answer })
        });
        let resuming = resume.is_some();
        let upstream = InstanceUpstream {
            resume: Mutex::new(resume),
            ends_session: Arc::new(AtomicBool::new(false)),
        };
        let ends_upstream = upstream.ends_session.clone();
        let connector = match &self.instance_factory {
            Some(factory) => factory(&config, client.clone(), upstream),
            None => (self.factory)(&config),
        };
        // Its own registry: the shared instance publishes the server's tools; an instance
        // only serves its session's calls, and its end withdraws nothing of the others'.
        let registry = Arc::new(Registry::new(
            self.registry.naming(),
            vec![server.to_string()],
        ));
        let (notifications, mut heard) = broadcast::channel::<ServerEvent>(256);
        let mut rng = fastrand::Rng::with_seed(jitter_seed(server) ^ session as u64);
        // An instance is started by its session's first need already; `idleTimeoutMs` applies.
        let config = ServerConfig {
            start: Start::Always,
            ..config
        };
        let (handle, join) = SupervisorHandle::spawn(
            config,
            connector,
            registry,
            notifications,
            self.handshake.subscribe(),
            Box::new(move || rng.f64()),
            None,
        );
        // Its notifications belong to its client alone.
        let forwarder = tokio::spawn(async move {
            loop {
                match heard.recv().await {
                    Ok(event) => client.notify(&event.method, event.params),
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        tracing::warn!(%n, "a client session's instance: notifications lost");
                    }
                    Err(broadcast::error::RecvError::Closed) => break,
                }
            }
        });
        tracing::info!(
            server,
            instances = live + 1,
            resuming,
            "started an instance for a client session"
        );
        inner.instances.insert(
            key,
            Running {
                handle: handle.clone(),
                join,
                forwarder,
                ends_upstream: Some(ends_upstream),
            },
        );
        Ok(Some(handle))
    }

    /// At a client's `initialize` (SPEC §11): client session `origin`'s own upstream sessions
    /// of its isolated `url` servers, opened now and awaited within `wait`, by server. An
    /// instance not ready in time (or over `maxInstances`) is left out and goes on starting;
    /// a server of the stateless era has no session to give.
    pub async fn open_upstream_sessions(
        &self,
        origin: &Arc<dyn Downstream>,
        wait: Duration,
    ) -> BTreeMap<String, String> {
        let mut opened = BTreeMap::new();
        if origin.session().is_none() {
            return opened;
        }
        let servers: Vec<String> = self
            .lock()
            .order
            .iter()
            .filter(|s| {
                s.enabled
                    && per_session(s.isolation)
                    && matches!(s.transport, TransportConfig::Http { .. })
            })
            .map(|s| s.name.clone())
            .collect();
        let mut waiting = Vec::new();
        for server in servers {
            // A server whose shared instance is not serving would only make the client wait.
            let serving = self
                .handle(&server)
                .is_some_and(|h| h.snapshot().state() == ServerState::Ready);
            if !serving {
                continue;
            }
            let Some((key, client)) = self.instance_client(&server, origin) else {
                continue;
            };
            match self.instance(&server, key, client, None) {
                Ok(Some(handle)) => waiting.push((server, handle.watch())),
                Ok(None) => {}
                Err(e) => tracing::warn!(%server, "no upstream session at initialize: {e}"),
            }
        }
        let deadline = Instant::now() + wait;
        for (server, mut watch) in waiting {
            let ready = tokio::time::timeout_at(
                deadline,
                watch.wait_for(|s| s.upstream_session().is_some() || s.state().is_final()),
            )
            .await;
            match ready {
                Ok(Ok(snapshot)) => {
                    if let Some(id) = snapshot.upstream_session() {
                        opened.insert(server, id);
                    }
                }
                _ => tracing::info!(
                    %server,
                    "its upstream session was not open within {} ms of initialize; it is not carried in the session id",
                    wait.as_millis()
                ),
            }
        }
        opened
    }

    /// A client session that began in another process (SPEC §12): its instances of isolated
    /// `url` servers go on with the upstream sessions it carried, by server: started now, or,
    /// while this process does not know the server's answer to `initialize` yet, at the
    /// session's first need of it. A server not isolated here takes none.
    pub fn resume_upstream_sessions(
        &self,
        origin: &Arc<dyn Downstream>,
        sessions: &BTreeMap<String, String>,
    ) {
        if origin.session().is_none() {
            return;
        }
        for (server, session_id) in sessions {
            let Some((session, client)) = self.instance_client(server, origin) else {
                continue;
            };
            let Some(answer) = self.handle(server).and_then(|h| h.server_info()) else {
                // Not serving here yet: the instance's first start resumes it.
                let mut inner = self.lock();
                if inner.isolated(server) {
                    inner
                        .to_resume
                        .insert((server.clone(), session), session_id.clone());
                }
                continue;
            };
            let resume = ResumeUpstream {
                session_id: session_id.clone(),
                answer,
            };
            if let Err(e) = self.instance(server, session, client, Some(resume)) {
                tracing::warn!(%server, "its upstream session is not resumed: {e}");
            }
        }
    }

    /// A client session ended (SPEC §11: DELETE, expiry, end of stdio), or this process lets
    /// go of it (§12): its instances of isolated servers are stopped, in the background;
    /// [`Hub::stop`] waits for them. `how` says whether their upstream sessions end too.
    pub fn end_session(&self, session: usize, how: SessionEnd) {
        let mut inner = self.lock();
        // The identities it was the last session of: their instances end with it.
        let mut ended = inner.users.leave(session);
        ended.push(session);
        inner.to_resume.retain(|(_, s), _| !ended.contains(s));
        let keys: Vec<(String, usize)> = inner
            .instances
            .keys()
            .filter(|(_, s)| ended.contains(s))
            .cloned()
            .collect();
        if keys.is_empty() {
            return;
        }
        let ending: Vec<Running> = keys
            .iter()
            .filter_map(|k| inner.instances.remove(k))
            .collect();
        if how == SessionEnd::Ended {
            for running in &ending {
                if let Some(flag) = &running.ends_upstream {
                    flag.store(true, Ordering::SeqCst);
                }
            }
        }
        inner.ending.retain(|t| !t.is_finished());
        inner.ending.push(tokio::spawn(finish_all(ending)));
    }

    /// How many per-session instances of `server` run now.
    pub fn instances(&self, server: &str) -> usize {
        self.lock()
            .instances
            .keys()
            .filter(|(s, _)| s == server)
            .count()
    }

    /// The client's `initialize` params: every server's handshake, now and after any recovery,
    /// carries them. Only the first call has an effect (a server never sees a different client);
    /// returns whether it was the first.
    pub fn set_handshake(&self, params: Arc<RawValue>) -> bool {
        self.handshake.send_if_modified(|current| {
            if current.is_some() {
                return false;
            }
            *current = Some(params);
            true
        })
    }

    /// Whether the servers' handshake is known (given at start, or by [`Hub::set_handshake`]).
    pub fn has_handshake(&self) -> bool {
        self.handshake.borrow().is_some()
    }

    /// Call a tool by its public name, with rmcp's types: a convenience for Rust hosts, decoded
    /// at this edge from [`Hub::call_json`] (fields rmcp does not know are dropped here only).
    ///
    /// It waits for the server to be ready (an attempt under way or due within the deadline),
    /// sends the call, and on a failure recovers under SPEC §5: a call that did not reach the
    /// server, or one to a tool that is safe to repeat, is sent once more (on a fresh connection
    /// when the old one is gone); any other failure is returned, saying whether the tool may
    /// have run. The deadline
    /// (`args.timeout`, capped by the server's `toolCallTimeoutMs`) bounds all of it. A tool's
    /// own error (`isError: true`) is an `Ok` result, as MCP has it.
    ///
    /// ```no_run
    /// use std::time::Duration;
    ///
    /// use mcp_supervisor::{CallArgs, CallError, Hub};
    ///
    /// # async fn example(hub: &Hub) -> Result<(), CallError> {
    /// let args = CallArgs {
    ///     arguments: serde_json::json!({ "message": "hello" }).as_object().cloned(),
    ///     timeout: Some(Duration::from_secs(5)),
    ///     ..CallArgs::default()
    /// };
    /// match hub.call("everything__echo", args).await {
    ///     Ok(result) if result.is_error == Some(true) => eprintln!("the tool failed: {result:?}"),
    ///     Ok(result) => println!("{:?}", result.content),
    ///     // Not sent: safe to try again later.
    ///     Err(CallError::NotReady { state, .. }) => eprintln!("the server is {state}"),
    ///     Err(error) => return Err(error),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn call(
        &self,
        public_name: &str,
        args: CallArgs,
    ) -> Result<CallToolResult, CallError> {
        let mut params = serde_json::Map::new();
        params.insert("name".into(), public_name.into());
        if let Some(arguments) = &args.arguments {
            params.insert(
                "arguments".into(),
                serde_json::Value::Object(arguments.clone()),
            );
        }
        let mut args = args;
        if let Some(progress) = args.progress.take() {
            params.insert("_meta".into(), serde_json::json!({ "progressToken": 0 }));
            args.origin = Some(Arc::new(ProgressTo(progress)));
        }
        let params =
            serde_json::value::to_raw_value(&params).map_err(|e| CallError::UnknownTool {
                name: format!("{public_name} ({e})"),
            })?;
        let route = self.registry.route(public_name);
        let result = self.call_json(public_name, &params, args).await?;
        serde_json::from_str(result.get()).map_err(|e| {
            let (server, tool) = route
                .map(|r| (r.server.clone(), r.upstream_name.clone()))
                .unwrap_or_default();
            CallError::Malformed {
                server,
                tool,
                detail: format!("the result is not a tool result: {e}"),
            }
        })
    }

    /// Call a tool by its public name with the `tools/call` params as JSON text, and get its
    /// `result` back as JSON text. Only `name` is rewritten (to the upstream name, when it
    /// differs); everything else in `params` (`arguments`, `_meta`, `task`, fields yet to be
    /// invented) goes upstream as it is, and the result comes back as the server sent it, but
    /// cut when its content is larger than the server's `maxResultBytes` (SPEC §13, with a
    /// final text block that says so). `args.arguments` is not used; `args.progress` gets the
    /// progress of a call whose params carry a `_meta.progressToken` (when `args.origin` is not
    /// set), with that token.
    pub async fn call_json(
        &self,
        public_name: &str,
        params: &RawValue,
        mut args: CallArgs,
    ) -> Result<Box<RawValue>, CallError> {
        if args.origin.is_none()
            && let Some(progress) = args.progress.take()
        {
            args.origin = Some(Arc::new(ProgressTo(progress)));
        }
        let (tool, handle) = match self.route(public_name) {
            // A name no server publishes yet, while a server is on its first attempt (its own
            // list not yet in, its saved catalog maybe withdrawn as made for another client):
            // the call waits for the lists, within its deadline, before it is unknown.
            Err(CallError::UnknownTool { .. }) if self.first_lists_pending() => {
                let wait = args
                    .timeout
                    .map_or(FIRST_LIST_WAIT, |t| t.min(FIRST_LIST_WAIT));
                self.wait_all(wait, |s| s.state() != ServerState::Connecting)
                    .await;
                self.route(public_name)?
            }
            routed => routed?,
        };
        let renamed;
        let params = if tool.upstream_name == public_name {
            params
        } else {
            let name = serde_json::value::to_raw_value(&tool.upstream_name).map_err(|_| {
                CallError::UnknownTool {
                    name: public_name.to_string(),
                }
            })?;
            let spliced = args
                .name_at
                .take()
                .and_then(|at| splice_name(params, at, public_name, &name));
            renamed =
                match spliced {
                    Some(spliced) => spliced,
                    None => crate::upstream::rpc::with_member(params, "name", &name).ok_or_else(
                        || CallError::ServerError {
                            server: tool.server.clone(),
                            tool: tool.upstream_name.clone(),
                            code: -32602,
                            message: "the tools/call params are not a JSON object".to_string(),
                            data: None,
                        },
                    )?,
                };
            &*renamed
        };
        let handle = self.serving(&tool.server, handle, args.origin.as_ref())?;
        let request = CallRequest {
            tool: tool.upstream_name.clone(),
            timeout: args.timeout,
            cancel: args.cancel,
            origin: args.origin,
            safety: tool.safety,
            headers: tool.headers.clone(),
            relays_input: args.relays_input,
            report: args.report,
        };
        let result = self
            .traced_send(&handle, &request, "tools/call", Some(params))
            .await?;
        Ok(self.capped(&tool.server, result))
    }

    /// A tool result of `server` cut to its `maxResultBytes` (SPEC §13) when it is larger,
    /// else as it came; each cut is counted in [`ServerStatus::results_cut`].
    fn capped(&self, server: &str, result: Box<RawValue>) -> Box<RawValue> {
        let max = self
            .lock()
            .order
            .iter()
            .find(|s| s.name == server)
            .and_then(|s| s.max_result_bytes);
        let Some(max) = max else {
            return result;
        };
        let Some(cut) = mcp_supervisor_core::result_cap::cut_result(result.get(), max as usize)
        else {
            return result;
        };
        let Ok(text) = RawValue::from_string(cut.result) else {
            return result;
        };
        tracing::info!(
            server,
            size = cut.size,
            kept = cut.kept,
            max,
            "a tool result over maxResultBytes was cut"
        );
        *self
            .lock()
            .results_cut
            .entry(server.to_string())
            .or_default() += 1;
        text
    }

    /// One request under its `mcp.call` span, with the trace context carried upstream.
    async fn traced_send(
        &self,
        handle: &SupervisorHandle,
        request: &CallRequest,
        method: &str,
        params: Option<&RawValue>,
    ) -> Result<Box<RawValue>, CallError> {
        let span = crate::trace::call_span(handle.name(), &request.tool, method);
        let traced;
        let params = match &self.trace {
            Some(trace) if !span.is_disabled() => {
                let incoming = crate::trace::incoming(params);
                match trace
                    .link(&span, incoming.as_deref())
                    .and_then(|context| crate::trace::with_traceparent(params, &context))
                {
                    Some(with_context) => {
                        traced = with_context;
                        Some(&*traced)
                    }
                    None => params,
                }
            }
            _ => params,
        };
        let began = Instant::now();
        let outcome = handle
            .send(request, method, params)
            .instrument(span.clone())
            .await;
        if method == "tools/call" {
            let took = began.elapsed();
            self.history.with(handle.name(), |h| {
                h.call(std::time::SystemTime::now(), took, outcome.is_ok())
            });
        }
        span.record(
            "outcome",
            match &outcome {
                Ok(_) => "ok",
                Err(error) => error.kind(),
            },
        );
        outcome
    }

    /// Whether a server is still on its first attempt without its own tool list.
    fn first_lists_pending(&self) -> bool {
        self.lock().running.values().any(|r| {
            let snapshot = r.handle.snapshot();
            snapshot.state() == ServerState::Connecting && snapshot.tool_list != ToolList::Live
        })
    }

    /// Where a public name goes, and its server's supervisor. A withheld tool is refused, saying
    /// why.
    fn route(&self, public_name: &str) -> Result<(Arc<Route>, SupervisorHandle), CallError> {
        let Some(tool) = self.registry.route(public_name) else {
            if let Some(withheld) = self.registry.withheld(public_name) {
                return Err(withheld.into());
            }
            return Err(CallError::UnknownTool {
                name: public_name.to_string(),
            });
        };
        match self.handle(&tool.server) {
            Some(handle) => Ok((tool, handle)),
            None => Err(CallError::NotReady {
                server: tool.server.clone(),
                tool: tool.upstream_name.clone(),
                state: ServerState::Stopped.to_string(),
                last_error: None,
                next_attempt_in: None,
            }),
        }
    }

    /// Send any request to one server, as JSON text both ways: prompts, resources, completions,
    /// tasks, logging, a tool call the registry does not hold (`wrap`), a method nobody here
    /// knows. Same readiness wait, deadline and recovery as a tool call; a request is sent
    /// again only when it did not reach the server, or when `method` only reads.
    pub async fn send(
        &self,
        server: &str,
        method: &str,
        params: Option<&RawValue>,
        args: CallArgs,
    ) -> Result<Box<RawValue>, CallError> {
        let handle = self.handle(server).ok_or_else(|| CallError::NotReady {
            server: server.to_string(),
            tool: method.to_string(),
            state: ServerState::Stopped.to_string(),
            last_error: None,
            next_attempt_in: None,
        })?;
        let handle = self.serving(server, handle, args.origin.as_ref())?;
        let mut safety = mcp_supervisor_core::classify::ToolSafety::default();
        let mut what = method.to_string();
        if method == "tools/call" {
            // A tool the registry does not hold (yet): its annotations are unknown here, so
            // only retryTools can make it safe to repeat.
            if let Some(name) = params.and_then(tool_name) {
                // A tool the server's filter hides is unknown here, and a withheld one is refused:
                // the call never reaches it.
                if self.registry.is_filtered(server, &name) {
                    return Err(CallError::UnknownTool { name });
                }
                if let Some(withheld) = self.registry.withheld_tool(server, &name) {
                    return Err(withheld.into());
                }
                if let Some(tool) = self
                    .registry
                    .tools()
                    .iter()
                    .find(|t| t.server == server && t.upstream_name == name)
                {
                    safety = tool.annotated_safety();
                }
                what = name;
            }
        } else {
            safety.read_only = reads_only(method);
        }
        let request = CallRequest {
            tool: what,
            timeout: args.timeout,
            cancel: args.cancel,
            origin: args.origin,
            safety,
            headers: Arc::from([]),
            relays_input: args.relays_input,
            report: args.report,
        };
        let result = self.traced_send(&handle, &request, method, params).await?;
        // A tool's result, also one a task gives later, is capped as a call's is.
        Ok(match method {
            "tools/call" | "tasks/result" => self.capped(server, result),
            _ => result,
        })
    }

    /// One server's part of a list (`prompts/list`, `resources/list`,
    /// `resources/templates/list`): the items it holds, each as the JSON text it sent (SPEC §9,
    /// §10). Never a live request: a busy or hung server answers with what it listed last. A
    /// server whose list is not known yet is waited for while it may still come (its first
    /// attempt, or its listing under way), at most [`LIST_WAIT`] or the caller's shorter
    /// `args.timeout`; a server in an outage has no part.
    pub async fn list_all(
        &self,
        server: &str,
        method: &str,
        args: &CallArgs,
    ) -> Arc<[Box<RawValue>]> {
        let Some(handle) = self.handle(server) else {
            return Arc::from([]);
        };
        let wait = args.timeout.map_or(LIST_WAIT, |t| t.min(LIST_WAIT));
        handle
            .wait_held_list(method, wait)
            .await
            .unwrap_or_else(|| Arc::from([]))
    }

    /// Wait (at most `limit`) for the listings that servers' own `list_changed` asked for, when
    /// any is under way; `false` when none was (nothing held can be newer by waiting).
    pub async fn relisted(&self, limit: Duration) -> bool {
        let handles: Vec<SupervisorHandle> = {
            let inner = self.lock();
            inner.running.values().map(|r| r.handle.clone()).collect()
        };
        let relisting: Vec<&SupervisorHandle> = handles.iter().filter(|h| h.relisting()).collect();
        if relisting.is_empty() {
            return false;
        }
        futures::future::join_all(relisting.into_iter().map(|h| h.relisted(limit))).await;
        true
    }

    /// Send a notification to one server's current generation (`notifications/roots/list_changed`
    /// and the like); dropped when the server is not ready.
    pub fn notify(&self, server: &str, method: &str, params: Option<&RawValue>) {
        if let Some(handle) = self.handle(server) {
            handle.notify(method, params);
        }
    }

    /// Whether `server` gives each client session its own instance (SPEC §11).
    pub fn isolated(&self, server: &str) -> bool {
        self.lock().isolated(server)
    }

    /// The names of the servers being supervised, in config order.
    pub fn servers(&self) -> Vec<String> {
        let inner = self.lock();
        inner
            .order
            .iter()
            .filter(|s| inner.running.contains_key(&s.name))
            .map(|s| s.name.clone())
            .collect()
    }

    /// The health verdict on every server now ([`Health`]).
    pub fn health(&self) -> Health {
        Health::of(&self.status())
    }

    /// Every configured server, in config order.
    pub fn status(&self) -> Vec<ServerStatus> {
        let inner = self.lock();
        let instances = |name: &str| inner.instances.keys().filter(|(s, _)| s == name).count();
        let results_cut = |name: &str| inner.results_cut.get(name).copied().unwrap_or(0);
        // Asked once for every sandboxed server: what the kernel gives now is what a start gets.
        let support = inner
            .order
            .iter()
            .any(|s| s.sandbox.is_some())
            .then(crate::sandbox::probe);
        let helper = crate::sandbox::helper_binary(self.sandbox_helper.as_deref()).is_some();
        let sandbox = |server: &ServerConfig| {
            let (config, support) = (server.sandbox.as_ref()?, support.as_ref()?);
            Some(crate::sandbox::SandboxStatus::of(config, support, helper))
        };
        inner
            .order
            .iter()
            .map(|server| {
                let tools = self.registry.count(&server.name);
                let withheld_tools = self.registry.withheld_names(&server.name).len();
                match inner.running.get(&server.name) {
                    Some(running) => {
                        let s = running.handle.snapshot();
                        ServerStatus {
                            name: server.name.clone(),
                            state: s.state(),
                            generation: s.generation,
                            attempts: s.attempt,
                            max_attempts: s.max_attempts,
                            restarts: s.restarts,
                            last_error: s.last_error.clone(),
                            tools,
                            uptime_ms: s.ready_since().map(|t| {
                                Instant::now().saturating_duration_since(t).as_millis() as u64
                            }),
                            pid: s.pid(),
                            enabled: true,
                            tool_list: s.tool_list,
                            instances: instances(&server.name),
                            withheld_tools,
                            results_cut: results_cut(&server.name),
                            sandbox: sandbox(server),
                        }
                    }
                    None => ServerStatus {
                        name: server.name.clone(),
                        state: ServerState::Stopped,
                        generation: 0,
                        attempts: 0,
                        max_attempts: server.reconnect.max_attempts,
                        restarts: 0,
                        last_error: None,
                        tools,
                        uptime_ms: None,
                        pid: None,
                        enabled: server.enabled,
                        tool_list: ToolList::None,
                        instances: 0,
                        withheld_tools,
                        results_cut: results_cut(&server.name),
                        sandbox: sandbox(server),
                    },
                }
            })
            .collect()
    }

    /// What a ready server answered to `initialize`, as it came.
    pub fn server_info(&self, server: &str) -> Option<Arc<RawValue>> {
        self.handle(server).and_then(|h| h.server_info())
    }

    /// A watch of one server's snapshot.
    pub fn watch(
        &self,
        server: &str,
    ) -> Result<watch::Receiver<crate::supervisor::Snapshot>, Error> {
        self.handle(server)
            .map(|h| h.watch())
            .ok_or_else(|| Error::UnknownServer(server.to_string()))
    }

    /// Wait until every enabled server is ready (or idle: an on-demand server that its first
    /// request starts), or `timeout` passes. Returns the names of those that are not.
    pub async fn wait_ready(&self, timeout: Duration) -> Vec<String> {
        self.wait_all(timeout, |s| s.state().in_service()).await
    }

    /// Start a server that is idle (SPEC §13), as a client's request would; nothing otherwise.
    pub fn wake(&self, server: &str) -> Result<(), Error> {
        let handle = self
            .handle(server)
            .ok_or_else(|| Error::UnknownServer(server.to_string()))?;
        handle.wake();
        Ok(())
    }

    /// As [`Hub::wait_ready`], but a server that needs a login (`needs_auth`) is not waited
    /// for: only a person can end that state. It is among the names returned.
    pub async fn wait_ready_or_needs_auth(&self, timeout: Duration) -> Vec<String> {
        let _ = self
            .wait_all(timeout, |s| {
                s.state().in_service() || s.state() == ServerState::NeedsAuth
            })
            .await;
        self.status()
            .into_iter()
            .filter(|s| s.enabled && !s.state.in_service())
            .map(|s| s.name)
            .collect()
    }

    /// Wait until no server is still on its very first attempt (bounded by `timeout`), so that a
    /// client's first tools/list sees every server that can come up.
    pub async fn wait_started(&self, timeout: Duration) {
        self.wait_all(timeout, |s| s.state() != ServerState::Connecting)
            .await;
    }

    /// Wait until every server has a tool list to show: it is past its first attempt, or it
    /// published its saved catalog (bounded by `timeout`). A client's first tools/list waits
    /// for this: with saved catalogs, it answers at once.
    pub async fn wait_listed(&self, timeout: Duration) {
        self.wait_all(timeout, |s| {
            s.state() != ServerState::Connecting || s.tool_list == ToolList::Cache
        })
        .await;
    }

    /// A `tools/list` result of `server`'s own (`wrap` passes the server's list whole) without
    /// the tools the server's pins withhold; as it came when none is withheld.
    pub fn without_withheld(&self, server: &str, result: Box<RawValue>) -> Box<RawValue> {
        let withheld = self.registry.withheld_names(server);
        if withheld.is_empty() {
            return result;
        }
        let Ok(mut value) = serde_json::from_str::<serde_json::Value>(result.get()) else {
            return result;
        };
        if let Some(serde_json::Value::Array(tools)) = value.get_mut("tools") {
            tools.retain(|tool| {
                tool.get("name")
                    .and_then(serde_json::Value::as_str)
                    .is_none_or(|name| !withheld.iter().any(|w| w == name))
            });
        }
        serde_json::value::to_raw_value(&value).unwrap_or(result)
    }

    /// The first page of a list (`prompts/list`, `resources/list`, `resources/templates/list`)
    /// from a server's saved catalog, as a result, while its published list is still the saved
    /// one (`wrap` answers from it at once).
    pub fn cached_page(&self, server: &str, method: &str) -> Option<Box<RawValue>> {
        let field = match method {
            "prompts/list" => "prompts",
            "resources/list" => "resources",
            "resources/templates/list" => "resourceTemplates",
            _ => return None,
        };
        let items = self.handle(server)?.cached_list(method)?;
        let mut text = format!("{{\"{field}\":[");
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                text.push(',');
            }
            text.push_str(item.get());
        }
        text.push_str("]}");
        RawValue::from_string(text).ok()
    }

    /// A server's saved `initialize` answer to a request of `protocol_version`, while its
    /// published list is still the saved one (`wrap` answers a client from it at once).
    pub fn cached_handshake(&self, server: &str, protocol_version: &str) -> Option<Arc<RawValue>> {
        self.handle(server)
            .and_then(|h| h.cached_handshake(protocol_version))
    }

    /// Wait until every running server's snapshot satisfies `done`, at most `timeout` in all.
    /// Returns the names of those that do not.
    async fn wait_all(
        &self,
        timeout: Duration,
        done: impl Fn(&crate::supervisor::Snapshot) -> bool,
    ) -> Vec<String> {
        let deadline = Instant::now() + timeout;
        let handles: Vec<SupervisorHandle> = self
            .lock()
            .running
            .values()
            .map(|r| r.handle.clone())
            .collect();
        let mut pending = Vec::new();
        for handle in handles {
            let mut watch = handle.watch();
            let reached = tokio::time::timeout_at(deadline, watch.wait_for(|s| done(s))).await;
            if !matches!(reached, Ok(Ok(_))) {
                pending.push(handle.name().to_string());
            }
        }
        pending
    }

    /// Reconnect one server now with a fresh budget (also out of `gave_up` or `down`).
    pub fn reconnect(&self, server: &str) -> Result<(), Error> {
        let handle = self
            .handle(server)
            .ok_or_else(|| Error::UnknownServer(server.to_string()))?;
        handle.reconnect();
        Ok(())
    }

    /// Apply a new config as a diff: added servers start, removed ones stop (tools withdrawn),
    /// changed ones restart, unchanged ones are not touched.
    ///
    /// Reloads are applied one at a time, in the order they were called: one waits until the
    /// reload before it has finished, the stops of its servers included (a changed server's old
    /// process is gone before its new one starts). After [`Hub::stop`] a reload starts nothing.
    pub async fn reload(&self, config: Config) -> ReloadSummary {
        let _turn = self.reloading.lock().await;
        let mut summary = ReloadSummary::default();
        let (to_stop, to_start) = {
            let mut inner = self.lock();
            if inner.stopped {
                return summary;
            }
            let old: HashMap<String, ServerConfig> = inner
                .order
                .iter()
                .map(|s| (s.name.clone(), s.clone()))
                .collect();
            let mut to_stop = Vec::new();
            let mut to_start = Vec::new();
            for (name, old_server) in &old {
                match config.servers.iter().find(|s| &s.name == name) {
                    None => {
                        summary.removed.push(name.clone());
                        if let Some(r) = inner.running.remove(name) {
                            to_stop.push(r);
                        }
                    }
                    Some(new) if new != old_server => {
                        summary.changed.push(name.clone());
                        if let Some(r) = inner.running.remove(name) {
                            to_stop.push(r);
                        }
                        if new.enabled {
                            to_start.push(new.clone());
                        }
                    }
                    Some(_) => summary.unchanged.push(name.clone()),
                }
            }
            for new in &config.servers {
                if !old.contains_key(&new.name) {
                    summary.added.push(new.name.clone());
                    if new.enabled {
                        to_start.push(new.clone());
                    }
                }
            }
            inner.order = config.servers.clone();
            (to_stop, to_start)
        };
        for name in &summary.removed {
            self.routes.forget(name);
        }
        finish_all(to_stop).await;
        // A removed server's history goes with it (once its supervisor has stopped).
        let names: Vec<String> = config.servers.iter().map(|s| s.name.clone()).collect();
        self.history.retain(&names);
        self.registry
            .set_servers(config.servers.iter().map(|s| s.name.clone()).collect());
        if self.registry.set_naming(config.naming.clone()) {
            summary.naming_changed = true;
        }
        for server in to_start {
            self.start_server(server).await;
        }
        summary.added.sort();
        summary.removed.sort();
        summary.changed.sort();
        summary.unchanged.sort();
        summary
    }

    /// Stop every server and wait until all are quiet: processes gone, tools withdrawn. Nothing
    /// starts after it, not even by a reload under way (whose stops it waits for).
    pub async fn stop(&self) {
        let (running, ending) = {
            let mut inner = self.lock();
            inner.stopped = true;
            let running: Vec<Running> = inner.running.drain().map(|(_, r)| r).collect();
            let instances: Vec<Running> = inner.instances.drain().map(|(_, r)| r).collect();
            (
                running.into_iter().chain(instances).collect::<Vec<_>>(),
                std::mem::take(&mut inner.ending),
            )
        };
        finish_all(running).await;
        for task in ending {
            let _ = task.await;
        }
        // A reload under way may still be stopping servers it took out; it starts none now.
        let _turn = self.reloading.lock().await;
    }
}

impl Drop for Hub {
    fn drop(&mut self) {
        for task in &self.background {
            task.abort();
        }
    }
}

/// What a reload did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReloadSummary {
    /// The naming mode or separator changed: every public name was assigned again.
    pub naming_changed: bool,
    /// Servers new in the config (started, when enabled), sorted.
    pub added: Vec<String>,
    /// Servers no longer in the config (stopped, their tools withdrawn), sorted.
    pub removed: Vec<String>,
    /// Servers whose config changed (restarted), sorted.
    pub changed: Vec<String>,
    /// Servers left running as they were, sorted.
    pub unchanged: Vec<String>,
}

/// A per-server seed so that servers' jitter draws differ but runs are reproducible.
fn jitter_seed(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The `name` member of `tools/call` params.
fn tool_name(params: &RawValue) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Name {
        name: String,
    }
    serde_json::from_str::<Name>(params.get())
        .ok()
        .map(|n| n.name)
}

/// Whether a method only reads, so that sending it twice is harmless.
fn reads_only(method: &str) -> bool {
    matches!(
        method,
        "ping"
            | "tools/list"
            | "prompts/list"
            | "prompts/get"
            | "resources/list"
            | "resources/templates/list"
            | "resources/read"
            | "completion/complete"
            | "tasks/get"
            | "tasks/list"
            | "tasks/result"
    )
}

/// A caller's typed progress channel, as the client of a call ([`Hub::call`]). Unbounded, and
/// the caller's: it holds one call's progress, as the server sends it, until the caller reads
/// it (the call's end ends it). A host that needs a bound calls [`Hub::call_json`] with its own
/// `progressToken` and an `origin` whose `notify` keeps what it can.
struct ProgressTo(mpsc::UnboundedSender<ProgressNotificationParam>);

impl Downstream for ProgressTo {
    fn request(
        &self,
        method: &str,
        params: Option<Box<RawValue>>,
    ) -> BoxFuture<'static, Result<Box<RawValue>, RpcError>> {
        Refuse.request(method, params)
    }

    fn notify(&self, method: &str, params: Option<Box<RawValue>>) {
        if method == "notifications/progress"
            && let Some(params) = params
            && let Ok(progress) = serde_json::from_str(params.get())
        {
            let _ = self.0.send(progress);
        }
    }
}

/// `params` with the JSON string at `at` (which must be `public`'s, as the caller read it)
/// replaced by `name`: a rename that reads nothing else of the params. `None` when `at` does
/// not hold `public` as a JSON string (the caller's reading does not fit these params).
fn splice_name(
    params: &RawValue,
    at: std::ops::Range<usize>,
    public: &str,
    name: &RawValue,
) -> Option<Box<RawValue>> {
    let text = params.get();
    let held = text.get(at.clone())?;
    if serde_json::from_str::<&str>(held).ok()? != public {
        return None;
    }
    let mut out = String::with_capacity(text.len() - held.len() + name.get().len());
    out.push_str(&text[..at.start]);
    out.push_str(name.get());
    out.push_str(&text[at.end..]);
    RawValue::from_string(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(name: &str, state: ServerState, enabled: bool) -> ServerStatus {
        ServerStatus {
            name: name.into(),
            state,
            generation: 1,
            attempts: 0,
            max_attempts: 5,
            restarts: 0,
            last_error: (state != ServerState::Ready).then(|| format!("{name} failed")),
            tools: 0,
            uptime_ms: None,
            pid: None,
            enabled,
            tool_list: ToolList::None,
            instances: 0,
            withheld_tools: 0,
            results_cut: 0,
            sandbox: None,
        }
    }

    /// Healthy while every enabled server is in service (ready or idle); a disabled server
    /// counts for nothing; every other state of an enabled one is named, in config order.
    #[test]
    fn health_names_each_enabled_server_out_of_service() {
        use ServerState::*;
        let in_service = [server("a", Ready, true), server("b", Idle, true)];
        assert!(Health::of(&in_service).is_healthy());
        assert!(Health::of(&[]).is_healthy());
        assert!(Health::of(&[server("off", Stopped, false)]).is_healthy());
        for state in [
            Connecting,
            Retrying,
            Reconnecting,
            GaveUp,
            Down,
            Stopped,
            NeedsAuth,
        ] {
            let status = [
                server("a", Ready, true),
                server("z", state, true),
                server("m", GaveUp, false),
            ];
            let health = Health::of(&status);
            assert_eq!(
                health.unavailable,
                vec![Unavailable {
                    server: "z".into(),
                    state,
                    last_error: Some("z failed".into()),
                }],
                "{state:?}"
            );
        }
    }

    /// A rename writes the upstream name where the caller found the public one, and only
    /// where that holds the public name; anything else is left to a full rename.
    #[test]
    fn a_rename_splices_the_name_where_it_was_read() {
        let raw = |t: &str| RawValue::from_string(t.to_string()).expect("JSON");
        let params = raw(r#"{"_meta":{"k":"s__t"},"name":"s__t","arguments":{"name":"x"}}"#);
        let at = params.get().find(r#""s__t","#).expect("the name");
        let at = at..at + r#""s__t""#.len();
        let upstream = raw(r#""t""#);
        let spliced = splice_name(&params, at.clone(), "s__t", &upstream).expect("spliced");
        assert_eq!(
            spliced.get(),
            r#"{"_meta":{"k":"s__t"},"name":"t","arguments":{"name":"x"}}"#
        );
        assert!(splice_name(&params, at.clone(), "other", &upstream).is_none());
        assert!(splice_name(&params, 0..at.end, "s__t", &upstream).is_none());
        assert!(
            splice_name(&params, at.start..params.get().len() + 1, "s__t", &upstream).is_none()
        );
    }

    #[test]
    fn only_reading_methods_are_safe_to_repeat() {
        assert!(reads_only("resources/read") && reads_only("tasks/get"));
        for method in [
            "tools/call",
            "tasks/cancel",
            "logging/setLevel",
            "vendor/anything",
        ] {
            assert!(!reads_only(method), "{method}");
        }
        let params = RawValue::from_string(r#"{"arguments":{},"name":"echo"}"#.into()).unwrap();
        assert_eq!(tool_name(&params).as_deref(), Some("echo"));
    }
}
