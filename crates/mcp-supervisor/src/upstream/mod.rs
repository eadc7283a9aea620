//! One generation of a real server: a stdio child in its own process group, a streamable-HTTP
//! endpoint, or a 2024-11-05 SSE stream, each as a [`wire`] under one JSON-RPC `rpc` peer. It
//! implements [`Link`] and [`Connector`] for the supervisor.
//!
//! This is the only part that knows an upstream transport. Messages stay JSON text: it never
//! builds the MCP model. It never retries, reconnects or decides anything about a failure; it
//! reports what happened, normalized, and closes when told.

pub(crate) mod era;
mod http_common;
pub mod http_wire;
pub mod lines;
pub(crate) mod process;
pub(crate) mod rpc;
pub mod sse_wire;
pub mod stdio;
pub mod wire;

use std::collections::VecDeque;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mcp_supervisor_core::classify::Failure;
use mcp_supervisor_core::config::{ServerConfig, TransportConfig};
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::sync::{mpsc, watch};

use crate::error::{HandshakeError, OpenError};
use crate::link::{BoxFuture, CallOptions, CloseHow, Connector, Downstream, Link, LinkEvents};
use rpc::Peer;
use stdio::StdioWire;
use wire::Wire;

pub use era::{STATELESS as STATELESS_VERSION, as_handshake_result};
pub use rpc::{Envelope, notification_text, request_text, response_text};

/// How long the handshake may take at most when the caller sets no tighter bound.
const HANDSHAKE_LIMIT: Duration = Duration::from_secs(24 * 60 * 60);
/// How long a graceful close of a stdio server waits for the notifications queued for it
/// before it closes its stdin.
const FLUSH_LIMIT: Duration = Duration::from_millis(200);

/// How a client session's own instance of an isolated `url` server (SPEC §11) begins and ends
/// upstream. The first generation resumes `resume` when given; every generation's close ends
/// the upstream session (DELETE) only once `ended` is set.
#[derive(Default)]
pub struct InstanceUpstream {
    /// Taken by the first generation.
    pub resume: Mutex<Option<ResumeUpstream>>,
    /// Set when the client ended its session: end the upstream one too. Unset while this
    /// process only lets go of the session (evicted, expired, stopping), which another may
    /// resume (§12).
    pub ends_session: Arc<AtomicBool>,
}

/// An upstream session opened by another process, to go on with here.
#[derive(Clone)]
pub struct ResumeUpstream {
    /// Its `Mcp-Session-Id`.
    pub session_id: String,
    /// The server's answer to `initialize`, as this process's own instance of the server got
    /// it: the generation takes it instead of a handshake, which the session had already.
    pub answer: Arc<RawValue>,
}

/// Opens generations of one configured server.
pub(crate) struct ServerConnector {
    server: ServerConfig,
    /// A client session's own instance: how its upstream session begins and ends.
    instance: Option<InstanceUpstream>,
    /// Where a server's requests go when no client's call caused them.
    fallback: Arc<dyn Downstream>,
    /// The server's tokens, when it has an `oauth` block; shared by all its generations.
    auth: Option<Arc<crate::auth::TokenSource>>,
    /// The tokens of a server with `credentials`, from the host ([`Self::delegated`]); they
    /// take the place of `auth`'s.
    delegated: Option<Arc<dyn crate::auth::Credentials>>,
    /// The host's sandbox helper, when it names one ([`crate::HubOptions::sandbox_helper`]).
    sandbox_helper: Option<std::path::PathBuf>,
}

impl ServerConnector {
    pub fn new(server: ServerConfig, fallback: Arc<dyn Downstream>) -> Self {
        let auth = match (&server.oauth, &server.transport) {
            (Some(oauth), TransportConfig::Http { url, .. }) => {
                match crate::auth::TokenStore::default_path() {
                    Some(path) => crate::auth::TokenSource::new(
                        &server.name,
                        url,
                        oauth.clone(),
                        crate::auth::TokenStore::new(path),
                    )
                    .map_err(|e| tracing::warn!(server = %server.name, "OAuth is off: {e}"))
                    .ok(),
                    None => {
                        tracing::warn!(server = %server.name, "OAuth is off: no token file (set HOME, XDG_STATE_HOME or MCP_SUPERVISOR_TOKEN_FILE)");
                        None
                    }
                }
            }
            _ => None,
        };
        Self {
            server,
            instance: None,
            fallback,
            auth,
            delegated: None,
            sandbox_helper: None,
        }
    }

    /// This connector, its sandboxed servers started by `helper` (`None`: this executable,
    /// when it hosts the helper).
    pub fn sandbox_helper(mut self, helper: Option<std::path::PathBuf>) -> Self {
        self.sandbox_helper = helper;
        self
    }

    /// This connector, its requests carrying the tokens `delegation` gives for `identity`'s
    /// connection (`None`: the hub's own), when the server has `credentials`; unchanged
    /// otherwise.
    pub fn delegated(
        mut self,
        delegation: Option<&dyn crate::auth::Delegation>,
        identity: Option<&str>,
    ) -> Self {
        if self.server.credentials.is_none() {
            return self;
        }
        match delegation {
            Some(delegation) => self.delegated = delegation.credentials(&self.server, identity),
            None => tracing::warn!(
                server = %self.server.name,
                "it has \"credentials\", but this host exchanges no tokens: its requests carry none"
            ),
        }
        self
    }

    /// The connector of a client session's own instance (SPEC §11).
    pub fn for_instance(
        server: ServerConfig,
        fallback: Arc<dyn Downstream>,
        instance: InstanceUpstream,
    ) -> Self {
        Self {
            instance: Some(instance),
            ..Self::new(server, fallback)
        }
    }
}

impl ServerConnector {
    /// How generation `generation` of this stdio server starts in `sandbox`: through the
    /// helper (`Some`), or unsandboxed (`None`, `bestEffort` on a host without a helper); or
    /// not at all, with why.
    fn sandboxed(
        &self,
        sandbox: &mcp_supervisor_core::config::SandboxConfig,
        generation: u64,
    ) -> Result<Option<crate::sandbox::Launch>, OpenError> {
        use crate::sandbox::Refused;
        let TransportConfig::Stdio {
            command,
            args,
            env,
            cwd,
        } = &self.server.transport
        else {
            return Ok(None);
        };
        let name = self.server.name.as_str();
        let server = crate::sandbox::Server {
            name,
            generation,
            command,
            args,
            env,
            cwd: cwd.as_deref(),
        };
        let helper = crate::sandbox::helper_binary(self.sandbox_helper.as_deref());
        let launch = match crate::sandbox::launch(&server, sandbox, helper.as_deref()) {
            Ok(launch) => launch,
            Err(Refused::Lacking(why)) => return Err(OpenError::Sandbox(why)),
            Err(Refused::NotFound) => {
                return Err(OpenError::Spawn {
                    command: command.clone(),
                    source: std::io::Error::new(
                        std::io::ErrorKind::NotFound,
                        "not found in PATH (or not executable)",
                    ),
                });
            }
            Err(Refused::Temp(source)) => {
                return Err(OpenError::Sandbox(format!(
                    "its temp dir could not be made: {source}"
                )));
            }
        };
        if let Some(launch) = &launch {
            let paths = |paths: &[std::path::PathBuf]| {
                paths
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let a = &launch.applied;
            let message = format!(
                "sandboxed: reads the system outside home directories and {}; writes {}; network {} ({}); Landlock {}{}",
                paths(&launch.extra_read),
                paths(&launch.write),
                sandbox.network.to_json(),
                a.network,
                a.landlock_abi
                    .map_or("none".to_owned(), |abi| format!("ABI {abi}")),
                if a.scoped {
                    ", signals and abstract sockets scoped"
                } else {
                    ""
                },
            );
            // Once at start; each later generation gets the same (its own temp dir aside).
            if generation <= 1 {
                tracing::info!(server = name, generation, "{message}");
            } else {
                tracing::debug!(server = name, generation, "{message}");
            }
        }
        Ok(launch)
    }
}

impl Connector for ServerConnector {
    fn auth_status(&self) -> Option<watch::Receiver<Option<String>>> {
        self.auth.as_ref().map(|a| a.status())
    }

    fn auth_refused_attempt(&self) -> bool {
        self.auth.as_ref().is_some_and(|a| a.escalate())
    }

    fn open(&self, generation: u64, events: LinkEvents) -> Result<Arc<dyn Link>, OpenError> {
        let name = self.server.name.as_str();
        if let Some(auth) = &self.auth {
            auth.attempt_started();
        }
        let (closed_tx, closed_rx) = watch::channel(false);
        let client_timeout = self.server.tool_call_timeout;
        match &self.server.transport {
            TransportConfig::Stdio {
                command,
                args,
                env,
                cwd,
            } => {
                let sandboxed = match &self.server.sandbox {
                    Some(sandbox) => self.sandboxed(sandbox, generation)?,
                    None => None,
                };
                let (cmd, temp) = match sandboxed {
                    Some(launch) => (launch.command, launch.temp),
                    None => {
                        let mut cmd = tokio::process::Command::new(command);
                        cmd.args(args);
                        for (key, value) in env {
                            cmd.env(key, value.expose());
                        }
                        if let Some(dir) = cwd {
                            cmd.current_dir(dir);
                        }
                        (cmd, None)
                    }
                };
                let spawned =
                    process::spawn(name, cmd, temp).map_err(|source| OpenError::Spawn {
                        command: command.clone(),
                        source,
                    })?;
                let stdio = StdioWire::new(spawned.stdin);
                let peer = Peer::start(
                    stdio.clone(),
                    None,
                    self.fallback.clone(),
                    events,
                    client_timeout,
                );
                stdio.read_into(spawned.stdout, Arc::downgrade(&peer));
                // A closed stdout ends the generation even if the process lingers.
                {
                    let mut shut = peer.shut_signal();
                    let stop = spawned.stop.clone();
                    tokio::spawn(async move {
                        let _ = shut.wait_for(|s| *s).await;
                        let _ = stop.send(process::Stop::Kill);
                    });
                }
                // The generation is closed once the process group is gone.
                {
                    let mut gone = spawned.gone.clone();
                    tokio::spawn(async move {
                        let _ = gone.wait_for(|g| *g).await;
                        let _ = closed_tx.send(true);
                    });
                }
                Ok(Arc::new(WireLink {
                    peer,
                    wire: stdio.clone(),
                    stdio: Some(stdio),
                    closed: closed_rx,
                    closed_tx: Mutex::new(None),
                    stop: Some(spawned.stop),
                    pid: Some(spawned.pid),
                    stderr_tail: spawned.stderr_tail,
                    protocol: self.server.protocol_version.clone(),
                    stateless: std::sync::OnceLock::new(),
                    resumed: std::sync::OnceLock::new(),
                    fallback: self.fallback.clone(),
                }))
            }
            TransportConfig::Http { url, headers } => {
                let (incoming_tx, incoming_rx) = wire::incoming();
                let auth = self.delegated.clone().or_else(|| {
                    self.auth
                        .clone()
                        .map(|a| Arc::new(a) as Arc<dyn crate::auth::Credentials>)
                });
                let mut wire =
                    http_wire::HttpWire::with_auth(url, &exposed(headers), incoming_tx, auth)?;
                let mut resumed = None;
                if let Some(instance) = &self.instance {
                    let resume = instance.resume.lock().ok().and_then(|mut r| r.take());
                    wire = wire.for_session(
                        resume.as_ref().map(|r| r.session_id.as_str()),
                        instance.ends_session.clone(),
                    );
                    // Only a session the wire took goes on without a handshake.
                    resumed = resume
                        .filter(|_| wire.session_id().is_some())
                        .map(|r| r.answer);
                }
                // No process to wait for: closed once told to close.
                let link = self.remote_link(
                    Arc::new(wire),
                    incoming_rx,
                    events,
                    closed_rx,
                    Some(closed_tx),
                );
                if let Some(answer) = resumed {
                    link.resumed.set(answer).ok();
                }
                Ok(link)
            }
            TransportConfig::Sse { url, headers } => {
                let (incoming_tx, incoming_rx) = wire::incoming();
                let sse = sse_wire::SseWire::new(url, &exposed(headers), incoming_tx)?;
                // The event stream's end is the generation's: lost, or closed when told.
                let ended = sse.ended();
                tokio::spawn(async move {
                    ended.await;
                    let _ = closed_tx.send(true);
                });
                Ok(self.remote_link(Arc::new(sse), incoming_rx, events, closed_rx, None))
            }
        }
    }
}

impl ServerConnector {
    /// A generation over a remote wire (streamable HTTP or SSE), whose messages come through
    /// `incoming`. `closed_tx`: set by [`Link::close`] when nothing else ends the generation.
    fn remote_link(
        &self,
        wire: Arc<dyn Wire>,
        incoming: wire::IncomingRx,
        events: LinkEvents,
        closed: watch::Receiver<bool>,
        closed_tx: Option<watch::Sender<bool>>,
    ) -> Arc<WireLink> {
        let peer = Peer::start(
            wire.clone(),
            Some(incoming),
            self.fallback.clone(),
            events,
            self.server.tool_call_timeout,
        );
        Arc::new(WireLink {
            peer,
            wire,
            stdio: None,
            closed,
            closed_tx: Mutex::new(closed_tx),
            stop: None,
            pid: None,
            stderr_tail: Arc::new(Mutex::new(VecDeque::new())),
            protocol: self.server.protocol_version.clone(),
            stateless: std::sync::OnceLock::new(),
            resumed: std::sync::OnceLock::new(),
            fallback: self.fallback.clone(),
        })
    }
}

/// The protocol version an `initialize` answer agreed on.
fn agreed_version(answer: &RawValue) -> Option<String> {
    #[derive(Deserialize)]
    struct Agreed<'a> {
        #[serde(rename = "protocolVersion", borrow)]
        protocol_version: std::borrow::Cow<'a, str>,
    }
    serde_json::from_str::<Agreed<'_>>(answer.get())
        .ok()
        .map(|a| a.protocol_version.into_owned())
}

/// Configured headers with their secret values exposed, for the wire to send.
fn exposed(headers: &[(String, mcp_supervisor_core::Secret)]) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|(k, v)| (k.clone(), v.expose().to_string()))
        .collect()
}

/// A live (or closing) generation.
struct WireLink {
    peer: Arc<Peer>,
    wire: Arc<dyn Wire>,
    /// stdio only: its stdin is closed first on a graceful close.
    stdio: Option<Arc<StdioWire>>,
    closed: watch::Receiver<bool>,
    /// Streamable HTTP only: set once closed (there is no process to wait for; an SSE
    /// generation is closed when its stream task ends).
    closed_tx: Mutex<Option<watch::Sender<bool>>>,
    /// stdio only: the process watcher's orders (unbounded: see `process::Spawned::stop`).
    stop: Option<mpsc::UnboundedSender<process::Stop>>,
    pid: Option<u32>,
    stderr_tail: Arc<Mutex<VecDeque<String>>>,
    /// The protocol version configured for this server, over the client's.
    protocol: Option<String>,
    /// Set once the server agreed to the stateless era: the `_meta` members every request
    /// carries.
    stateless: std::sync::OnceLock<Box<RawValue>>,
    /// Set when the generation goes on with an upstream session another process opened: the
    /// server's `initialize` answer, which its handshake returns instead of sending one.
    resumed: std::sync::OnceLock<Arc<RawValue>>,
    /// Who answers a server's input requests when no client's call is known.
    fallback: Arc<dyn Downstream>,
}

/// How many rounds of input requests one call may take before it fails.
const MAX_INPUT_ROUNDS: usize = 16;
/// How long one `subscriptions/listen` is held before it is given up and opened again.
const LISTEN_LIMIT: Duration = Duration::from_secs(3600);
/// How many times in a row `subscriptions/listen` may end soon after it opened before a
/// generation stops opening it.
const LISTEN_REOPENS: usize = 5;
/// A `subscriptions/listen` that ends sooner than this counts as a quick end.
const LISTEN_QUICK_END: Duration = Duration::from_secs(10);
/// The wait before opening `subscriptions/listen` again after it ended.
const LISTEN_REOPEN_WAIT: Duration = Duration::from_secs(1);

impl WireLink {
    /// The stateless era's discovery: `server/discover` with the client's identity, retried
    /// once if the server asks for another version. `Ok(Err(version))`: the server does not
    /// speak this era; use the handshake with `version`.
    async fn discover(
        &self,
        params: &RawValue,
    ) -> Result<Result<Box<RawValue>, &'static str>, HandshakeError> {
        let identity = era::identity(params, era::STATELESS);
        let discover_params = era::with_identity(None, &identity);
        self.wire.protocol(Some(era::STATELESS));
        for _ in 0..2 {
            let outcome = self
                .peer
                .request_with(
                    "server/discover",
                    discover_params.as_deref(),
                    CallOptions::new(HANDSHAKE_LIMIT),
                    self.headers_for("server/discover", None, &[]),
                )
                .await;
            match era::judge_discover(&outcome)? {
                era::Discovered::Stateless => {
                    let result = outcome.map_err(HandshakeError::Discover)?;
                    if let Some(listen) = era::listen_params(&result, &identity) {
                        self.listen(listen);
                    }
                    let _ = self.stateless.set(identity);
                    return era::as_initialize_result(&result)
                        .ok_or(HandshakeError::DiscoverNotObject)
                        .map(Ok);
                }
                era::Discovered::Retry => continue,
                era::Discovered::Handshake(version) => {
                    self.wire.protocol(None);
                    return Ok(Err(version));
                }
            }
        }
        Err(HandshakeError::DiscoverRejected(era::STATELESS))
    }

    /// The stateless era's stream of change notifications: `subscriptions/listen` with
    /// `params`, held open for the generation's life. What the server sends on it takes the
    /// same way as any server notification (a tool-list change refreshes the published list
    /// and reaches the clients). Reopened when it ends with the generation still open, a bounded
    /// number of times; a server that refuses it is not asked again.
    fn listen(&self, params: Box<RawValue>) {
        let (peer, mut closed) = (self.peer.clone(), self.closed.clone());
        let headers = self.headers_for("subscriptions/listen", None, &[]);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            let mut quick_ends = 0;
            loop {
                let opts = CallOptions::new(LISTEN_LIMIT);
                let cancel = opts.cancel.clone();
                let began = tokio::time::Instant::now();
                let outcome = tokio::select! {
                    outcome = peer.request_with("subscriptions/listen", Some(&params), opts, headers.clone()) => outcome,
                    _ = closed.wait_for(|c| *c) => {
                        cancel.cancel();
                        return;
                    }
                };
                if *closed.borrow() {
                    return;
                }
                if let Err(Failure::ServerError { code, message, .. }) = &outcome {
                    tracing::debug!(code, %message, "the server refused subscriptions/listen");
                    return;
                }
                tracing::debug!(ended = ?outcome.err(), "subscriptions/listen ended; reopening");
                // A stream that ends soon after it opened counts against the bound.
                if began.elapsed() < LISTEN_QUICK_END {
                    quick_ends += 1;
                    if quick_ends >= LISTEN_REOPENS {
                        tracing::debug!("subscriptions/listen: giving up after {LISTEN_REOPENS} quick ends");
                        return;
                    }
                } else {
                    quick_ends = 0;
                }
                tokio::select! {
                    () = tokio::time::sleep(LISTEN_REOPEN_WAIT) => {}
                    _ = closed.wait_for(|c| *c) => return,
                }
            }
        });
    }

    /// The headers that mirror a request, for a wire that sends them.
    fn headers_for(
        &self,
        method: &str,
        params: Option<&RawValue>,
        declared: &[mcp_supervisor_core::headers::ParamHeader],
    ) -> Vec<(String, String)> {
        if self.wire.takes_headers() {
            era::mirrored_headers(method, params, declared)
        } else {
            Vec::new()
        }
    }

    /// One stateless request: the identity in `_meta`, and each input-required round answered
    /// by the call's client (or the fallback) and sent again, within the one deadline.
    async fn stateless_request(
        &self,
        identity: &RawValue,
        method: &str,
        params: Option<&RawValue>,
        opts: CallOptions,
    ) -> Result<Box<RawValue>, Failure> {
        let deadline = tokio::time::Instant::now() + opts.timeout;
        let mut round =
            era::with_identity(params, identity).ok_or_else(|| Failure::ServerError {
                code: -32602,
                message: format!("the params of {method} are not a JSON object"),
                data: None,
            })?;
        for _ in 0..MAX_INPUT_ROUNDS {
            let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
            if remaining.is_zero() {
                return Err(Failure::DeadlinePassed);
            }
            let headers = self.headers_for(method, Some(&round), &opts.headers);
            let this_round = CallOptions {
                timeout: remaining,
                ..opts.clone()
            };
            let result = self
                .peer
                .request_with(method, Some(&round), this_round, headers)
                .await?;
            if opts.relays_input {
                return Ok(result);
            }
            let Some(needed) = era::input_required(&result) else {
                return Ok(result);
            };
            let client = opts.origin.clone().unwrap_or_else(|| self.fallback.clone());
            let mut responses = Vec::with_capacity(needed.requests.len());
            for (key, asked, asked_params) in needed.requests {
                let answer = tokio::select! {
                    biased;
                    () = opts.cancel.cancelled() => return Err(Failure::CancelledByCaller),
                    answer = tokio::time::timeout_at(deadline, client.request(&asked, asked_params)) => answer,
                };
                match answer {
                    Err(_) => return Err(Failure::DeadlinePassed),
                    Ok(Ok(value)) => responses.push((key, value)),
                    Ok(Err(error)) => {
                        return Err(Failure::ServerError {
                            code: i32::try_from(error.code).unwrap_or(-32603),
                            message: format!(
                                "the server needs an answer to {asked} to go on, and the client \
                                 could not give one: {}",
                                error.message
                            ),
                            data: None,
                        });
                    }
                }
            }
            round = era::next_round(Some(&round), &responses, needed.state.as_deref())
                .ok_or(Failure::UnexpectedResponse)?;
        }
        Err(Failure::ServerError {
            code: -32603,
            message: format!(
                "the server asked for input {MAX_INPUT_ROUNDS} times without finishing {method}"
            ),
            data: None,
        })
    }
}

impl Link for WireLink {
    fn initialize<'a>(
        &'a self,
        params: &'a RawValue,
    ) -> BoxFuture<'a, Result<Box<RawValue>, HandshakeError>> {
        Box::pin(async move {
            if let Some(answer) = self.resumed.get() {
                // The session's handshake was done by the process that opened it.
                let version = agreed_version(answer).ok_or(HandshakeError::NoProtocolVersion)?;
                self.wire.initialized(&version);
                return Ok(answer.as_ref().to_owned());
            }
            // The stateless era when the config asks for it, or the client is of that era;
            // a client's `initialize` goes as it came (the server negotiates).
            let mut version = self.protocol.clone();
            let stateless = match &version {
                Some(v) => v == era::STATELESS,
                None => era::is_stateless(params),
            };
            if stateless {
                match self.discover(params).await? {
                    Ok(result) => return Ok(result),
                    Err(stateful) => version = Some(stateful.to_string()),
                }
            }
            let rewritten = match version {
                Some(v) if Some(v.as_str()) != era::asked_version(params).as_deref() => {
                    era::with_version(params, &v)
                }
                _ => None,
            };
            let params = rewritten.as_deref().unwrap_or(params);
            // The stateless era's marker, if any, stays on its hop.
            let stripped = era::without_envelope(params);
            let params = stripped.as_deref().unwrap_or(params);
            let result = self
                .peer
                .request_with(
                    "initialize",
                    Some(params),
                    CallOptions::new(HANDSHAKE_LIMIT),
                    self.headers_for("initialize", None, &[]),
                )
                .await
                .map_err(HandshakeError::Initialize)?;
            let agreed = agreed_version(&result).ok_or(HandshakeError::NoProtocolVersion)?;
            self.wire.initialized(&agreed);
            self.peer
                .notify_now_with(
                    "notifications/initialized",
                    None,
                    self.headers_for("notifications/initialized", None, &[]),
                )
                .await
                .map_err(HandshakeError::Initialized)?;
            Ok(result)
        })
    }

    fn request<'a>(
        &'a self,
        method: &'a str,
        params: Option<&'a RawValue>,
        opts: CallOptions,
    ) -> BoxFuture<'a, Result<Box<RawValue>, Failure>> {
        if let Some(identity) = self.stateless.get() {
            return Box::pin(self.stateless_request(identity, method, params, opts));
        }
        // A handshake-era generation: a stateless client's envelope stays on its own hop.
        let stripped = params.and_then(era::without_envelope);
        Box::pin(async move {
            let params = stripped.as_deref().or(params);
            let headers = self.headers_for(method, params, &opts.headers);
            self.peer.request_with(method, params, opts, headers).await
        })
    }

    /// A request of the handshake era is one exchange under one timer (the peer's); one of the
    /// stateless era may take several, so it keeps the call path's bound too.
    fn keeps_deadlines(&self) -> bool {
        self.stateless.get().is_none()
    }

    fn notify(&self, method: &str, params: Option<&RawValue>) {
        let stripped = match self.stateless.get() {
            Some(_) => None,
            None => params.and_then(era::without_envelope),
        };
        let params = stripped.as_deref().or(params);
        let headers = self.headers_for(method, None, &[]);
        self.peer.notify_with(method, params, headers);
    }

    fn close(&self, how: CloseHow) {
        self.wire.close();
        if let Some(stop) = &self.stop {
            if let (CloseHow::Graceful, Some(stdio)) = (how, &self.stdio) {
                // What is queued for the server goes first (a cancellation of a call ended by
                // the stop): its stdin closes after, however it ends (the close escalates on its
                // own clock).
                let (stdio, peer) = (stdio.clone(), self.peer.clone());
                tokio::spawn(async move {
                    let _ = tokio::time::timeout(FLUSH_LIMIT, peer.flushed()).await;
                    stdio.close_stdin().await;
                });
            }
            let _ = stop.send(match how {
                CloseHow::Graceful => process::Stop::Graceful,
                CloseHow::Kill => process::Stop::Kill,
            });
        }
        if let Some(tx) = self.closed_tx.lock().ok().and_then(|mut t| t.take()) {
            let _ = tx.send(true);
        }
    }

    fn closed(&self) -> BoxFuture<'static, ()> {
        let mut closed = self.closed.clone();
        Box::pin(async move {
            let _ = closed.wait_for(|c| *c).await;
        })
    }

    fn stderr_tail(&self) -> Vec<String> {
        self.stderr_tail
            .lock()
            .map(|t| t.iter().cloned().collect())
            .unwrap_or_default()
    }

    fn pid(&self) -> Option<u32> {
        self.pid
    }

    fn session_id(&self) -> Option<String> {
        self.wire.session_id()
    }
}

impl Drop for WireLink {
    fn drop(&mut self) {
        self.wire.close();
        if let Some(stop) = &self.stop {
            let _ = stop.send(process::Stop::Kill);
        }
    }
}
