//! The proxy's MCP face, as messages: one JSON-RPC message from a downstream client in, its
//! answer out, whatever carries it (a stdio connection or an HTTP session). It serves the
//! aggregate tool list from the registry, sends every request through the hub's one call path,
//! and routes what servers send back: their notifications to every client, their requests to the
//! client whose call caused them.
//!
//! It owns only what SPEC §10 gives a proxy: request ids on the client's link, public names
//! (in `serve`, prompts named by the policy tools are, `core::naming`), which server a resource URI or task id belongs to
//! (`serve` namespaces task ids), and the client's side of the handshake. Every other field of
//! every message passes whole, as JSON text. In `wrap` (transparent) any request it does not
//! own goes to the server as it came, and the server's own answer or error comes back.
//! Clients of both eras come here: one that sends `initialize` is of the handshake era; one of
//! protocol 2026-07-28 (identity in each request's `_meta`) is told apart by its requests and
//! served by [`crate::stateless`] on the same routes.
//!
//! It never touches a supervisor or a generation: everything goes through the hub.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use mcp_supervisor::core::members;
use mcp_supervisor::hub::SessionEnd;
use mcp_supervisor::link::{BoxFuture, Downstream, RpcError};
use mcp_supervisor::upstream::{Envelope, notification_text, request_text, response_text};
use mcp_supervisor::{CallArgs, CallError, Hub, HubEvent, Phase, ServerState};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

/// How long the first tools/list waits for servers still on their first attempt.
pub(crate) const STARTUP_WAIT: Duration = Duration::from_secs(10);
/// How long a fan-out that cannot be held (`tasks/list`, `logging/setLevel`) waits for each
/// server, all at once: a late server's part is left out (and logged), never waited for.
pub(crate) const FAN_OUT_WAIT: Duration = Duration::from_secs(2);

/// How long `initialize` in `wrap` waits for the server's own answer.
const HANDSHAKE_WAIT: Duration = Duration::from_secs(60);
/// How long a client's `initialize` waits for its own upstream sessions of isolated `url`
/// servers to open (SPEC §11); one not open by then is not carried in its session id.
const UPSTREAM_SESSION_WAIT: Duration = Duration::from_secs(10);

/// How many messages that belong to no request (notifications, the servers' requests no call
/// caused) wait for one client at most; past it, see [`Client::send`].
pub const OUTBOX: usize = 1024;

/// A message that found its client's queue full (the client does not read): a notification is
/// left out, counted and logged; a server's request left out is its caller's to report (an
/// error back to the server).
fn left_out(text: &str, metrics: &crate::metrics::Metrics) -> Undelivered {
    if !text.starts_with(r#"{"jsonrpc":"2.0","id":"#) {
        let dropped = metrics
            .notifications_dropped
            .fetch_add(1, Ordering::Relaxed);
        if dropped == 0 || dropped.is_power_of_two() {
            tracing::warn!(
                dropped = dropped + 1,
                "a client does not read: its queue of {OUTBOX} messages is full, and notifications are dropped"
            );
        }
    }
    Undelivered::Full
}

/// Why a message for a client was not queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Undelivered {
    /// The client has gone away.
    Gone,
    /// Its queue is full: it does not read ([`OUTBOX`]).
    Full,
}

/// The protocol version of the stateless era.
pub const STATELESS_VERSION: &str = mcp_supervisor::core::versions::STATELESS;
/// The protocol versions this face speaks with an `initialize` (the 2025 era), newest first.
pub const SESSION_VERSIONS: [&str; 4] = mcp_supervisor::core::versions::HANDSHAKE;

/// Whether the proxy fronts many servers (`serve`) or stands in for one (`wrap`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Aggregate,
    /// Fully transparent: what the proxy does not own goes to the server as it came.
    Transparent,
}

/// What kind of JSON-RPC message a text is, read from its envelope only.
#[derive(Clone, Debug, PartialEq)]
pub enum Kind {
    Request { method: Cow<'static, str> },
    Notification { method: Cow<'static, str> },
    Response,
}

/// The methods a client sends most, kept without a copy of each message's.
const FREQUENT: [&str; 12] = [
    "tools/call",
    "tools/list",
    "notifications/cancelled",
    "notifications/progress",
    "ping",
    "resources/read",
    "resources/list",
    "prompts/get",
    "prompts/list",
    "initialize",
    "notifications/initialized",
    "completion/complete",
];

/// A message's method, as one of [`FREQUENT`] when it is.
fn method_of(method: &str) -> Cow<'static, str> {
    match FREQUENT.iter().find(|m| **m == method) {
        Some(known) => Cow::Borrowed(known),
        None => Cow::Owned(method.to_string()),
    }
}

/// A JSON string's value, if the text is one.
pub fn string_of(raw: &RawValue) -> Option<String> {
    serde_json::from_str::<String>(raw.get()).ok()
}

/// A client's message, its envelope read once: a face reads each message on arrival, and
/// everything after (its checks, the dispatcher) takes the parts from here, so no envelope is
/// parsed twice. The params (and a response's result or error) are kept as JSON text, whole.
#[derive(Debug)]
pub struct Message {
    kind: Kind,
    id: Option<Box<RawValue>>,
    params: Option<Box<RawValue>>,
    result: Option<Box<RawValue>>,
    error: Option<Box<RawValue>>,
}

impl Message {
    /// Read a client's message; `Err`: the error answer (as text) that says what is wrong.
    pub fn read(text: &str) -> Result<Self, String> {
        let envelope = read_envelope(text)?;
        let kind = match (&envelope.method, envelope.id) {
            (Some(method), Some(_)) => Kind::Request {
                method: method_of(method),
            },
            (Some(method), None) => Kind::Notification {
                method: method_of(method),
            },
            (None, Some(_)) if envelope.result.is_some() || envelope.error.is_some() => {
                Kind::Response
            }
            _ => {
                return Err(error_text(
                    None,
                    -32600,
                    "Invalid Request: not a JSON-RPC request, notification or response (check `jsonrpc`, `id`, `method` and `params`; batches are not accepted)",
                ));
            }
        };
        Ok(Self {
            kind,
            id: envelope.id.map(ToOwned::to_owned),
            params: envelope.params.map(ToOwned::to_owned),
            result: envelope.result.map(ToOwned::to_owned),
            error: envelope.error.map(ToOwned::to_owned),
        })
    }

    pub fn kind(&self) -> &Kind {
        &self.kind
    }

    /// The method of a request or a notification.
    pub fn method(&self) -> Option<&str> {
        match &self.kind {
            Kind::Request { method } | Kind::Notification { method } => Some(method),
            _ => None,
        }
    }

    /// The id of a request or a response.
    pub fn id(&self) -> Option<&RawValue> {
        self.id.as_deref()
    }

    pub fn params(&self) -> Option<&RawValue> {
        self.params.as_deref()
    }

    /// Whether it is a request of protocol 2026-07-28 that needs no session: `server/discover`,
    /// or a request (not `initialize`) that names its protocol version in `_meta`.
    pub fn is_sessionless(&self) -> bool {
        match &self.kind {
            Kind::Request { method } if method == "server/discover" => true,
            Kind::Request { method } if method != "initialize" => self
                .params()
                .is_some_and(|p| p.get().contains("io.modelcontextprotocol/protocolVersion")),
            _ => false,
        }
    }
}

/// A message's envelope as the face accepts it, or the error answer (as text) that says what is
/// wrong with it: the library's [`Envelope`], then what a client's message must be besides.
fn read_envelope(text: &str) -> Result<Envelope<'_>, String> {
    let invalid = |why: &str| error_text(None, -32600, &format!("Invalid Request: {why}"));
    let mut envelope = match Envelope::read(text) {
        Ok(envelope) => envelope,
        // What went wrong is worked out only when it did.
        Err(_) if serde_json::from_str::<serde::de::IgnoredAny>(text).is_err() => {
            return Err(error_text(
                None,
                -32700,
                "Parse error: the message is not JSON",
            ));
        }
        Err(_) if !text.trim_start().starts_with('{') => {
            return Err(invalid(
                "a JSON-RPC message is a JSON object (batches are not accepted)",
            ));
        }
        Err(e) => return Err(invalid(&e.to_string())),
    };
    if envelope.jsonrpc.as_deref() != Some("2.0") {
        return Err(invalid("`jsonrpc` must be \"2.0\""));
    }
    if envelope.id.is_some_and(|id| !is_valid_id(id)) {
        return Err(invalid("an `id` is a string or an integer"));
    }
    if envelope.params.is_some_and(|p| p.get() == "null") {
        envelope.params = None;
    }
    if envelope.params.is_some_and(|p| !params_are_valid(p)) {
        return Err(invalid(
            "`params` is an object, and its `_meta`, when present, an object",
        ));
    }
    Ok(envelope)
}

/// Whether `params` has the shape every MCP message's has: an object, whose `_meta` (which the
/// proxy reads, for a progress token) is an object when present. A server could not answer a
/// request with other params (it cannot read them), so it never gets one.
fn params_are_valid(params: &RawValue) -> bool {
    #[derive(Deserialize)]
    struct Params<'a> {
        #[serde(rename = "_meta", borrow, default)]
        meta: Option<&'a RawValue>,
    }
    let text = params.get();
    // `_meta` is read only when there is one (most params have none).
    text.starts_with('{')
        && (!text.contains("\"_meta\"")
            || serde_json::from_str::<Params<'_>>(text).is_ok_and(|p| {
                p.meta
                    .is_none_or(|m| m.get().starts_with('{') || m.get() == "null")
            }))
}

/// Whether a request id is one MCP allows: a string or an integer.
fn is_valid_id(id: &RawValue) -> bool {
    let text = id.get();
    text.starts_with('"')
        || serde_json::from_str::<i64>(text).is_ok()
        || serde_json::from_str::<u64>(text).is_ok()
}

/// A JSON-RPC error answer as text.
pub fn error_text(id: Option<&RawValue>, code: i64, message: &str) -> String {
    let null = RawValue::NULL;
    response_text(id.unwrap_or(null), Err(RpcError::new(code, message)))
}

/// Shared by every client of every face.
pub struct Proxy {
    pub(crate) hub: Arc<Hub>,
    pub(crate) mode: Mode,
    metrics: Arc<crate::metrics::Metrics>,
    clients: Mutex<Vec<Weak<Client>>>,
    /// Tool calls of clients of protocol 2026-07-28 waiting for their input (a server of the
    /// handshake era asked them something).
    pub(crate) rounds: crate::rounds::Rounds,
    /// `toolExposure: "search"`: two tools in place of every tool ([`crate::exposure`]).
    pub(crate) search: std::sync::atomic::AtomicBool,
    /// The search index of the catalog it was built from (rebuilt when the catalog changes).
    pub(crate) search_index: Mutex<Option<SearchIndex>>,
    /// One change of the clients' subscriptions at a time: a server is subscribed while a
    /// client is, and unsubscribed once none is ([`crate::asked`]).
    subscribing: tokio::sync::Mutex<()>,
    /// The log level each shared server was last asked for, by server (a rank in
    /// [`crate::asked::LEVELS`]).
    levels_asked: Mutex<HashMap<String, u8>>,
    /// The generation of each shared server that was last given the clients' subscriptions
    /// and level again ([`Proxy::restore`]).
    restored: Mutex<HashMap<String, u64>>,
}

/// A catalog and its search index.
pub(crate) type SearchIndex = (
    Arc<Vec<mcp_supervisor::PublishedTool>>,
    Arc<mcp_supervisor::core::tool_search::Index>,
);

impl Proxy {
    pub fn new(hub: Arc<Hub>, mode: Mode) -> Arc<Self> {
        let proxy = Arc::new(Self {
            hub,
            mode,
            metrics: Arc::default(),
            clients: Mutex::new(Vec::new()),
            rounds: crate::rounds::Rounds::default(),
            search: std::sync::atomic::AtomicBool::new(false),
            search_index: Mutex::new(None),
            subscribing: tokio::sync::Mutex::new(()),
            levels_asked: Mutex::new(HashMap::new()),
            restored: Mutex::new(HashMap::new()),
        });
        tokio::spawn(forward_events(
            Arc::downgrade(&proxy),
            proxy.hub.subscribe(),
        ));
        proxy
    }

    /// In `wrap`, a client that starts without `initialize` (a 2026-07-28 client, or one that
    /// asks before it introduces itself) leaves the server to be opened in the proxy's own
    /// name, declaring what the proxy can route.
    pub fn ensure_handshake(&self) {
        if self.hub.has_handshake() {
            return;
        }
        self.hub
            .set_handshake(mcp_supervisor::hub::default_handshake(
                &routed_capabilities(),
            ));
    }

    /// The same for a client of protocol 2026-07-28, from one of its requests' params: such a
    /// client tells who it is and what it can do in each request's `_meta`, and the server is
    /// opened with that (in its own era where the server speaks it, else in an `initialize` of
    /// the newest handshake version), so it shows this client what it would show it directly.
    /// Then it waits (bounded) for the server's first attempt, so that the face can show the
    /// server's own identity. A request without the client's identity does not decide it (the
    /// face refuses it); the next one that has it does.
    pub(crate) async fn ensure_handshake_from(&self, params: Option<&RawValue>) {
        if !self.hub.has_handshake() {
            #[derive(Deserialize)]
            struct Params {
                #[serde(rename = "_meta", default)]
                meta: Option<Value>,
            }
            let meta = params
                .and_then(|p| serde_json::from_str::<Params>(p.get()).ok())
                .and_then(|p| p.meta);
            match meta.as_ref().and_then(identity_of) {
                Some(params) => {
                    self.hub.set_handshake(params);
                }
                None => return,
            }
        }
        if self.mode == Mode::Transparent {
            self.hub.wait_started(HANDSHAKE_WAIT).await;
        }
    }

    pub fn hub(&self) -> &Arc<Hub> {
        &self.hub
    }

    pub fn metrics(&self) -> &Arc<crate::metrics::Metrics> {
        &self.metrics
    }

    /// A new downstream client (a stdio connection or an HTTP session). `out` carries what
    /// belongs to no request of its: notifications, and server requests no call of its caused.
    pub fn connect(self: &Arc<Self>, out: mpsc::Sender<String>) -> Arc<Client> {
        let client = Arc::new(Client {
            out,
            owed: Arc::default(),
            metrics: self.metrics.clone(),
            next: AtomicU64::new(1),
            waiting: Mutex::new(Some(HashMap::new())),
            calls: Mutex::default(),
            capabilities: Mutex::new(None),
            session: Mutex::new(None),
            initialized: std::sync::atomic::AtomicBool::new(false),
            handshaken: std::sync::atomic::AtomicBool::new(false),
            stateless: std::sync::atomic::AtomicBool::new(false),
            asked: Mutex::new(crate::asked::Asked::default()),
        });
        let mut clients = lock(&self.clients);
        clients.retain(|c| c.strong_count() > 0);
        clients.push(Arc::downgrade(&client));
        client
    }

    /// The client went away: its calls are cancelled, the servers' requests waiting for it get
    /// an error, and it gets no more notifications.
    /// A client whose session began elsewhere (another process that sealed `session` into the
    /// id the client holds): connected as if its `initialize` had been answered here and its
    /// `notifications/initialized` received. Messages for no request go to `out`.
    pub fn resume(self: &Arc<Self>, out: mpsc::Sender<String>, session: Session) -> Arc<Client> {
        let client = self.connect(out);
        let declared = session
            .capabilities
            .as_deref()
            .map(|c| Capabilities::read(c.get()));
        *lock(&client.capabilities) = declared;
        let upstream = session.upstream.clone();
        *lock(&client.session) = Some(session);
        client.handshaken.store(true, Ordering::SeqCst);
        client.initialized.store(true, Ordering::SeqCst);
        self.ensure_handshake();
        // Its instances of isolated `url` servers go on with the upstream sessions it carries.
        if !upstream.is_empty() {
            let origin = Scope::of(&client).whole();
            self.hub.resume_upstream_sessions(&origin, &upstream);
        }
        client
    }

    /// The client ended its session (the end of stdio, an HTTP DELETE): see
    /// [`Proxy::let_go`]; its upstream sessions of isolated `url` servers end too.
    pub fn disconnect(self: &Arc<Self>, client: &Arc<Client>) {
        self.forget(client, SessionEnd::Ended);
    }

    /// This process lets go of a client whose session may come back (evicted, idle, the
    /// process stopping: its sealed id resumes it, here or elsewhere): its calls are cancelled,
    /// the servers' requests waiting for it get an error, it gets no more notifications, and
    /// its instances of isolated servers stop, leaving their upstream sessions open.
    pub fn let_go(self: &Arc<Self>, client: &Arc<Client>) {
        self.forget(client, SessionEnd::LetGo);
    }

    /// [`Proxy::disconnect`] or [`Proxy::let_go`], as `how` says.
    pub fn forget(self: &Arc<Self>, client: &Arc<Client>, how: SessionEnd) {
        client.close();
        self.unsubscribe_left(client);
        // Its own instances of isolated servers end with it (SPEC §11).
        self.hub.end_session(session_key(client), how);
        lock(&self.clients).retain(|c| c.upgrade().is_some_and(|c| !Arc::ptr_eq(&c, client)));
    }

    /// Send `text` to every client that has finished its handshake (SPEC: nothing but pings
    /// and logs before `initialized`).
    pub(crate) fn tell_clients(&self, text: &str) {
        for client in self.clients() {
            if client.initialized.load(Ordering::SeqCst) {
                let _ = client.send(text.to_string());
            }
        }
    }

    fn clients(&self) -> Vec<Arc<Client>> {
        let mut clients = lock(&self.clients);
        clients.retain(|c| c.strong_count() > 0);
        clients.iter().filter_map(Weak::upgrade).collect()
    }

    /// Handle one JSON-RPC message from `client`. A request resolves with its answer's text;
    /// what relates to it (progress, the servers' requests it caused) goes to `related` when
    /// given (an HTTP POST's own event stream), else to the client's `out`. A notification, a
    /// response, and a request its client cancelled resolve with `None`; a text that is not a
    /// message, with the error answer.
    pub async fn handle(
        self: &Arc<Self>,
        client: &Arc<Client>,
        text: &str,
        related: Option<mpsc::Sender<String>>,
    ) -> Option<String> {
        match Message::read(text) {
            Ok(message) => self.handle_message(client, &message, related).await,
            Err(answer) => Some(answer),
        }
    }

    /// [`Proxy::handle`] for a message its face has read already.
    pub async fn handle_message(
        self: &Arc<Self>,
        client: &Arc<Client>,
        message: &Message,
        related: Option<mpsc::Sender<String>>,
    ) -> Option<String> {
        let params = message.params();
        match (&message.kind, message.id()) {
            (Kind::Request { method }, Some(id)) => {
                let scope = Arc::new(Scope {
                    client: client.clone(),
                    related,
                    by_client: Mutex::new(None),
                });
                let cancel = CancellationToken::new();
                let key = id.get();
                let call = InCall {
                    cancel: cancel.clone(),
                    scope: scope.clone(),
                };
                lock(&client.calls).insert(key.to_string(), call);
                // Forgotten however the request ends, also when its future is dropped (an HTTP
                // client that went away).
                let mut in_flight = InFlight { client, key };
                let answer = if crate::stateless::is_stateless(client, method, params) {
                    self.stateless(&scope, id, method, params, cancel).await
                } else {
                    self.request(&scope, method, params, cancel).await
                };
                // Its client cancelled it: no answer, as MCP asks of the receiver of a
                // cancellation and as the server itself would do.
                in_flight.end();
                if lock(&scope.by_client).is_some() {
                    return None;
                }
                Some(response_text(id, answer))
            }
            (Kind::Notification { method }, _) => {
                self.notification(client, method, params);
                None
            }
            (Kind::Response, Some(id)) => {
                client.answered(id, message.result.as_deref(), message.error.as_deref());
                None
            }
            _ => Some(error_text(
                message.id(),
                -32600,
                "Invalid Request: not a JSON-RPC request, notification or response",
            )),
        }
    }

    /// A notification from a client.
    fn notification(&self, client: &Arc<Client>, method: &str, params: Option<&RawValue>) {
        match method {
            "notifications/initialized" => {
                client
                    .initialized
                    .store(true, std::sync::atomic::Ordering::SeqCst);
            }
            "notifications/cancelled" => {
                #[derive(Deserialize)]
                struct Cancelled<'a> {
                    #[serde(rename = "requestId", borrow)]
                    request_id: &'a RawValue,
                    #[serde(default)]
                    reason: Option<String>,
                }
                if let Some(cancelled) =
                    params.and_then(|p| serde_json::from_str::<Cancelled<'_>>(p.get()).ok())
                    && let Some(call) = lock(&client.calls).get(cancelled.request_id.get())
                {
                    *lock(&call.scope.by_client) = Some(ByClient {
                        reason: cancelled.reason,
                    });
                    call.cancel.cancel();
                }
            }
            // The client's roots changed: every server that may ask for them is told.
            "notifications/roots/list_changed" => {
                for server in self.hub.servers() {
                    self.hub.notify(&server, method, params);
                }
            }
            _ => {
                if self.mode == Mode::Transparent {
                    for server in self.hub.servers() {
                        self.hub.notify(&server, method, params);
                    }
                }
            }
        }
    }

    /// A request from a client, answered with a result or an error.
    async fn request(
        self: &Arc<Self>,
        scope: &Arc<Scope>,
        method: &str,
        params: Option<&RawValue>,
        cancel: CancellationToken,
    ) -> Result<Box<RawValue>, RpcError> {
        let args = CallArgs {
            cancel: Some(cancel),
            origin: Some(scope.clone() as Arc<dyn Downstream>),
            ..CallArgs::default()
        };
        if method != "initialize" {
            self.ensure_handshake();
        }
        self.route(scope, method, params, args).await
    }

    /// The one dispatcher, for clients of both eras: route a request by its method; what the
    /// proxy owns it answers, the rest goes to the server it belongs to. A request of the
    /// 2026-07-28 era comes here through that era's adapter ([`Proxy::stateless`]), which
    /// answers what only that era has and completes the result.
    pub(crate) async fn route(
        self: &Arc<Self>,
        scope: &Arc<Scope>,
        method: &str,
        params: Option<&RawValue>,
        args: CallArgs,
    ) -> Result<Box<RawValue>, RpcError> {
        let stateless = scope.client.stateless.load(Ordering::SeqCst);
        match method {
            "initialize" => {
                let answer = self.initialize(&scope.client, params).await?;
                // Its own upstream sessions of isolated `url` servers open now, so that the
                // session id sealed from what `initialize` fixed carries them (SPEC §11, §12).
                let origin = scope.whole();
                let upstream = self
                    .hub
                    .open_upstream_sessions(&origin, UPSTREAM_SESSION_WAIT)
                    .await;
                scope.client.fix_session(params, &answer, upstream);
                Ok(answer)
            }
            // (The 2026-07-28 era removed `ping`: `wrap`'s server answers for itself.)
            "ping" if !stateless => Ok(raw_json("{}")),
            "tools/list" if stateless && self.mode == Mode::Transparent && !self.searching() => {
                self.stateless_tools(params, args).await
            }
            // The lists the proxy answers itself come whole, with no `nextCursor`: a cursor is
            // not one of ours (the server itself would refuse a cursor it did not give).
            "tools/list" if paged(params) => Err(unknown_cursor(method)),
            "tools/list" => self.list_tools().await,
            // A call of the 2026-07-28 era takes its input rounds (the client answers the
            // server's requests by calling again); one of the handshake era answers them as
            // they come.
            "tools/call" if stateless => {
                let cancel = args.cancel.clone().unwrap_or_default();
                self.stateless_call(scope, params, cancel).await
            }
            "tools/call" => self.call_tool(params, args).await,
            "resources/subscribe" | "resources/unsubscribe" if !stateless => {
                let uri = params
                    .and_then(|p| member_str(p, "uri"))
                    .unwrap_or_default();
                self.subscription(scope, method, uri, params, args).await
            }
            "logging/setLevel" if !stateless => self.set_level(scope, params, args).await,
            _ if self.mode == Mode::Transparent => self.forward(method, params, args).await,
            "prompts/list" | "resources/list" | "resources/templates/list" if paged(params) => {
                Err(unknown_cursor(method))
            }
            "prompts/list" => self.list_prompts(args).await,
            "prompts/get" | "completion/complete" => {
                self.prompt_request(method, params, args).await
            }
            "resources/list" | "resources/templates/list" => {
                self.list_resources(method, args).await
            }
            "resources/read" | "resources/subscribe" | "resources/unsubscribe" => {
                let uri = params
                    .and_then(|p| member_str(p, "uri"))
                    .unwrap_or_default();
                let server = self.resource_owner(&uri, &args).await?;
                self.send(&server, method, params, args).await
            }
            "logging/setLevel" => {
                // A server without logging answers "method not found"; the others take it.
                self.fan_out(method, |_| params.map(Cow::Borrowed), &args)
                    .await;
                Ok(raw_json("{}"))
            }
            "tasks/list" => self.list_tasks(params, args).await,
            "tasks/get" | "tasks/result" | "tasks/cancel" => {
                self.task_request(method, params, args).await
            }
            _ => match self.hub.servers().as_slice() {
                // One server: it answers what we do not know.
                [server] => self.send(server, method, params, args).await,
                _ => Err(RpcError::new(
                    -32601,
                    format!(
                        "Method not found: `{method}` (mcp-supervisor serve does not route it to one of several servers)"
                    ),
                )),
            },
        }
    }

    /// `initialize`: in `wrap`, the client's own params become the server's handshake and the
    /// server's own answer comes back; in `serve`, the proxy answers for itself.
    async fn initialize(
        &self,
        client: &Arc<Client>,
        params: Option<&RawValue>,
    ) -> Result<Box<RawValue>, RpcError> {
        let params = params.ok_or_else(|| RpcError::new(-32602, "initialize needs params"))?;
        #[derive(Deserialize)]
        struct Init<'a> {
            #[serde(rename = "protocolVersion")]
            protocol_version: String,
            #[serde(borrow, default)]
            capabilities: Option<&'a RawValue>,
            #[serde(rename = "clientInfo", borrow, default)]
            client_info: Option<&'a RawValue>,
        }
        let init: Init<'_> = serde_json::from_str(params.get())
            .map_err(|e| RpcError::new(-32602, format!("Invalid params: initialize: {e}")))?;
        for (name, value) in [
            ("capabilities", init.capabilities),
            ("clientInfo", init.client_info),
        ] {
            if value.is_some_and(|v| !v.get().starts_with('{')) {
                return Err(RpcError::new(
                    -32602,
                    format!("Invalid params: initialize: `{name}` is an object"),
                ));
            }
        }
        let declared = init.capabilities.map(|c| Capabilities::read(c.get()));
        *lock(&client.capabilities) = declared;
        client.handshaken.store(true, Ordering::SeqCst);
        if self.mode == Mode::Aggregate && declared.is_some_and(|d| d.roots) {
            // The servers were opened before this client came: a server that keeps roots asks
            // again when told they changed.
            for server in self.hub.servers() {
                self.hub
                    .notify(&server, "notifications/roots/list_changed", None);
            }
        }
        if self.mode == Mode::Transparent {
            let servers = self.hub.servers();
            let [server] = servers.as_slice() else {
                return Err(RpcError::new(-32603, "wrap fronts exactly one server"));
            };
            self.hub.set_handshake(params.to_owned().into());
            // A saved answer to the same request: the client goes on at once, while the server
            // starts (its own answer is saved again for the next time).
            if let Some(saved) = self.hub.cached_handshake(server, &init.protocol_version) {
                return Ok(RawValue::from_string(saved.get().to_string())
                    .unwrap_or_else(|_| raw_json("{}")));
            }
            let mut watch = self
                .hub
                .watch(server)
                .map_err(|e| RpcError::new(-32603, e.to_string()))?;
            // An idle server (wrap --on-demand with no saved answer to this request) is started
            // by the handshake; one that goes idle again before its answer was seen (it started
            // only to learn its lists) is started again.
            let ready = tokio::time::timeout(HANDSHAKE_WAIT, async {
                loop {
                    let seen = watch
                        .wait_for(|s| {
                            s.server_info().is_some()
                                || s.state().is_final()
                                || matches!(s.phase, Phase::Idle)
                        })
                        .await
                        .map(|s| s.clone());
                    match seen {
                        Ok(s) if matches!(s.phase, Phase::Idle) => {
                            let _ = self.hub.wake(server);
                            if watch.changed().await.is_err() {
                                break None;
                            }
                        }
                        Ok(s) => break Some(s),
                        Err(_) => break None,
                    }
                }
            })
            .await;
            let info = match ready {
                Ok(Some(snapshot)) => snapshot.server_info().cloned(),
                _ => None,
            };
            return match info {
                // A server opened in the stateless era (for an earlier client of that era)
                // answers this handshake client in its era's shape.
                Some(info) => {
                    let version = if SESSION_VERSIONS.contains(&init.protocol_version.as_str()) {
                        init.protocol_version.as_str()
                    } else {
                        SESSION_VERSIONS[0]
                    };
                    Ok(
                        mcp_supervisor::upstream::as_handshake_result(&info, version)
                            .unwrap_or_else(|| {
                                RawValue::from_string(info.get().to_string())
                                    .unwrap_or_else(|_| raw_json("{}"))
                            }),
                    )
                }
                None => {
                    let status = self.hub.status();
                    let why = status
                        .first()
                        .map(|s| {
                            format!(
                                "server \"{}\" is {}{}",
                                s.name,
                                s.state,
                                s.last_error
                                    .as_ref()
                                    .map(|e| format!(" (last error: {e})"))
                                    .unwrap_or_default()
                            )
                        })
                        .unwrap_or_default();
                    Err(RpcError::new(
                        -32603,
                        format!(
                            "the server did not complete its handshake: {why}; check its command and its stderr"
                        ),
                    ))
                }
            };
        }
        let version = if SESSION_VERSIONS.contains(&init.protocol_version.as_str()) {
            init.protocol_version
        } else {
            SESSION_VERSIONS[0].to_string()
        };
        let result = json!({
            "protocolVersion": version,
            "capabilities": serve_capabilities(),
            "serverInfo": serve_info(),
            "instructions": serve_instructions(&self.hub),
        });
        to_raw(&result)
    }

    /// The aggregate tool list, from the registry: every definition whole, under its public
    /// name. A client that lists right after starting us sees every server that comes up.
    pub(crate) async fn list_tools(&self) -> Result<Box<RawValue>, RpcError> {
        if self.searching() {
            return to_raw(&crate::exposure::listed());
        }
        // A server still starting with a saved catalog has its list already: no wait for it.
        self.hub.wait_listed(STARTUP_WAIT).await;
        let tools = self.hub.tools();
        let mut text = String::with_capacity(
            16 + tools
                .iter()
                .map(|t| t.definition.get().len() + 1)
                .sum::<usize>(),
        );
        text.push_str(r#"{"tools":["#);
        for (i, tool) in tools.iter().enumerate() {
            if i > 0 {
                text.push(',');
            }
            text.push_str(tool.definition.get());
        }
        text.push_str("]}");
        RawValue::from_string(text).map_err(|e| RpcError::new(-32603, e.to_string()))
    }

    /// `tools/call` by public name, through the hub's one call path. In `serve` a task-augmented
    /// call's task id is namespaced by its server.
    async fn call_tool(
        &self,
        params: Option<&RawValue>,
        args: CallArgs,
    ) -> Result<Box<RawValue>, RpcError> {
        let (name, params) = match self.named_call(params).await? {
            Named::Call { name, params } => (name, params),
            Named::Answer(answer) => return answer,
        };
        let record = self.metrics.start();
        let outcome = call_through(&self.hub, self.mode, &name, &params, args).await;
        self.call_answer(&name, outcome, record)
    }

    /// What a client's `tools/call` names: the tool's public name and the params to send it, or
    /// in search mode `search_tools`' answer (`call_tool` names the call). Both eras.
    pub(crate) async fn named_call<'a>(
        &self,
        params: Option<&'a RawValue>,
    ) -> Result<Named<'a>, RpcError> {
        let params = params.ok_or_else(|| RpcError::new(-32602, "tools/call needs params"))?;
        let name = member_text(params, "name")
            .ok_or_else(|| RpcError::new(-32602, "Invalid params: tools/call needs a `name`"))?;
        if !self.searching() {
            return Ok(Named::Call {
                name,
                params: Cow::Borrowed(params),
            });
        }
        Ok(match self.exposed(&name, params).await {
            crate::exposure::Exposed::Answer(answer) => Named::Answer(answer),
            crate::exposure::Exposed::Call { name, params } => Named::Call {
                name: Cow::Owned(name),
                params: Cow::Owned(params),
            },
        })
    }

    /// A call's outcome as the client's answer (both eras): counted in the metrics, a failure
    /// as the error or result the client is owed, a task id namespaced in `serve`.
    pub(crate) fn call_answer(
        &self,
        name: &str,
        outcome: Result<Box<RawValue>, CallError>,
        record: crate::metrics::CallRecord<'_>,
    ) -> Result<Box<RawValue>, RpcError> {
        record.finish(crate::metrics::outcome(
            outcome.as_ref().map(|r| is_error(r)),
        ));
        let result = outcome.or_else(call_error)?;
        if self.mode == Mode::Aggregate
            && let Some(route) = self.hub.registry().route(name)
        {
            return Ok(namespace_task(&route.server, result));
        }
        Ok(result)
    }

    /// Any request to the one server of `wrap`, as it came.
    pub(crate) async fn forward(
        &self,
        method: &str,
        params: Option<&RawValue>,
        args: CallArgs,
    ) -> Result<Box<RawValue>, RpcError> {
        match self.hub.servers().as_slice() {
            [server] => {
                // A first page while the server starts on its saved catalog comes from it.
                let first_page = params.is_none_or(|p| member_str(p, "cursor").is_none());
                if first_page && let Some(page) = self.hub.cached_page(server, method) {
                    return Ok(page);
                }
                self.send(server, method, params, args).await
            }
            _ => Err(RpcError::new(-32603, "wrap fronts exactly one server")),
        }
    }

    /// `resources/subscribe` or `resources/unsubscribe` of `uri` by a client, with its own
    /// `params` (or `{"uri": ...}` when it sent none: a `subscriptions/listen` of the 2026-07-28
    /// era). A shared server is subscribed to a URI while at least one client is, so one
    /// client's unsubscribe never ends another's subscription; an isolated server's instance
    /// is the client's own.
    pub(crate) async fn subscription(
        &self,
        scope: &Arc<Scope>,
        method: &str,
        uri: String,
        params: Option<&RawValue>,
        args: CallArgs,
    ) -> Result<Box<RawValue>, RpcError> {
        let made;
        let params = match params {
            Some(params) => Some(params),
            None => {
                made = to_raw(&json!({ "uri": uri }))?;
                Some(&*made)
            }
        };
        let server = match self.mode {
            Mode::Transparent => match self.hub.servers().as_slice() {
                [server] => server.clone(),
                _ => return Err(RpcError::new(-32603, "wrap fronts exactly one server")),
            },
            Mode::Aggregate => self.resource_owner(&uri, &args).await?,
        };
        if self.hub.isolated(&server) {
            return self.send(&server, method, params, args).await;
        }
        let key = (server.clone(), uri);
        let _one_at_a_time = self.subscribing.lock().await;
        let others = self.subscribed(&key, Some(&scope.client));
        if method == "resources/subscribe" {
            let answer = match others {
                true => raw_json("{}"),
                false => self.send(&server, method, params, args).await?,
            };
            lock(&scope.client.asked).subscriptions.insert(key);
            Ok(answer)
        } else {
            lock(&scope.client.asked).subscriptions.remove(&key);
            match others {
                true => Ok(raw_json("{}")),
                false => self.send(&server, method, params, args).await,
            }
        }
    }

    /// `logging/setLevel` of a client: kept as its own level; a shared server is asked for the
    /// most verbose level any client set (an isolated instance for its client's), and each
    /// client gets only the messages of its own level ([`crate::asked::wants_log`]). In `wrap`
    /// the server's own answer comes back; in `serve` the proxy answers.
    async fn set_level(
        &self,
        scope: &Arc<Scope>,
        params: Option<&RawValue>,
        args: CallArgs,
    ) -> Result<Box<RawValue>, RpcError> {
        let rank = params
            .and_then(|p| member_str(p, "level"))
            .as_deref()
            .and_then(crate::asked::level_rank);
        if let Some(rank) = rank {
            lock(&scope.client.asked).level = Some(rank);
        }
        // What a shared server is asked for: the most verbose level of every client.
        let shared = rank.map(|rank| {
            let levels = self
                .clients()
                .iter()
                .map(|c| lock(&c.asked).level)
                .collect::<Vec<_>>();
            crate::asked::upstream_level(levels).unwrap_or(rank)
        });
        // The params for one server: the client's own, with only the level changed where a
        // shared server is asked for a more verbose one.
        let params_for = |server: &str| -> Option<Cow<'_, RawValue>> {
            let params = params?;
            let (Some(rank), Some(level)) = (rank, shared) else {
                return Some(Cow::Borrowed(params)); // not a level: the server judges it
            };
            if self.hub.isolated(server) {
                return Some(Cow::Borrowed(params));
            }
            lock(&self.levels_asked).insert(server.to_string(), level);
            if level == rank {
                return Some(Cow::Borrowed(params));
            }
            let name = to_raw(&Value::String(
                crate::asked::LEVELS[usize::from(level)].to_string(),
            ))
            .ok()?;
            members::with_member(params, "level", &name).map(Cow::Owned)
        };
        match self.mode {
            Mode::Transparent => match self.hub.servers().as_slice() {
                [server] => {
                    let params = params_for(server);
                    self.send(server, "logging/setLevel", params.as_deref(), args)
                        .await
                }
                _ => Err(RpcError::new(-32603, "wrap fronts exactly one server")),
            },
            Mode::Aggregate => {
                // A server without logging answers "method not found"; the others take it.
                self.fan_out("logging/setLevel", params_for, &args).await;
                Ok(raw_json("{}"))
            }
        }
    }

    /// A server's notification to the clients that want it (SPEC §11, [`crate::asked`]): a
    /// `resources/updated` to the clients subscribed to its URI, a log message to the clients
    /// whose level it meets, anything else to every client.
    fn tell_clients_of(&self, server: &str, method: &str, params: Option<&RawValue>, text: &str) {
        let member = |name| params.and_then(|p| member_str(p, name));
        let wanted: Box<dyn Fn(&crate::asked::Asked) -> bool> = match method {
            "notifications/resources/updated" => {
                let key = (server.to_string(), member("uri").unwrap_or_default());
                let anyone = self.subscribed(&key, None);
                Box::new(move |asked| crate::asked::wants_update(asked, anyone, &key))
            }
            "notifications/message" => {
                let level = member("level")
                    .as_deref()
                    .and_then(crate::asked::level_rank);
                let upstream = lock(&self.levels_asked).get(server).copied();
                Box::new(move |asked| crate::asked::wants_log(asked.level, level, upstream))
            }
            _ => Box::new(|_| true),
        };
        for client in self.clients() {
            if client.initialized.load(Ordering::SeqCst) && wanted(&lock(&client.asked)) {
                let _ = client.send(text.to_string());
            }
        }
    }

    /// Whether a client (other than `except`) is subscribed to `key`.
    fn subscribed(&self, key: &(String, String), except: Option<&Arc<Client>>) -> bool {
        self.clients().iter().any(|c| {
            except.is_none_or(|e| !Arc::ptr_eq(c, e)) && lock(&c.asked).subscriptions.contains(key)
        })
    }

    /// Ask a shared server `method` with `params` on the proxy's own behalf (no client's call),
    /// within [`FAN_OUT_WAIT`].
    async fn ask_shared(&self, server: &str, method: &str, params: Value) -> Result<(), RpcError> {
        let params = to_raw(&params)?;
        let args = CallArgs {
            timeout: Some(FAN_OUT_WAIT),
            ..CallArgs::default()
        };
        self.hub
            .send(server, method, Some(&params), args)
            .await
            .map(drop)
            .map_err(|e| RpcError::new(-32603, e.to_string()))
    }

    /// A client that left: the shared servers' URIs no other client is subscribed to are
    /// unsubscribed (in the background; a server that fails to take it keeps sending updates
    /// nobody gets).
    fn unsubscribe_left(self: &Arc<Self>, left: &Client) {
        let mine = std::mem::take(&mut lock(&left.asked).subscriptions);
        if mine.is_empty() {
            return;
        }
        let proxy = self.clone();
        tokio::spawn(async move {
            let _one_at_a_time = proxy.subscribing.lock().await;
            for key in mine {
                if proxy.subscribed(&key, None) {
                    continue;
                }
                let (server, uri) = key;
                let params = json!({ "uri": uri });
                if let Err(error) = proxy
                    .ask_shared(&server, "resources/unsubscribe", params)
                    .await
                {
                    tracing::debug!(%server, %uri, "unsubscribing for a client that left: {}", error.message);
                }
            }
        });
    }

    /// A shared server's new generation (a respawn, a restart) is given what the clients asked
    /// of the one before: their subscriptions and the log level (in the background, each within
    /// [`FAN_OUT_WAIT`]), so that a recovery does not silently end them.
    fn restore(self: &Arc<Self>, server: &str, generation: u64) {
        if lock(&self.restored).insert(server.to_string(), generation) == Some(generation)
            || self.hub.isolated(server)
        {
            return;
        }
        let uris: std::collections::BTreeSet<String> = self
            .clients()
            .iter()
            .flat_map(|c| {
                lock(&c.asked)
                    .subscriptions
                    .iter()
                    .filter(|(s, _)| s == server)
                    .map(|(_, uri)| uri.clone())
                    .collect::<Vec<_>>()
            })
            .collect();
        let level = lock(&self.levels_asked).get(server).copied();
        if uris.is_empty() && level.is_none() {
            return;
        }
        let (proxy, server) = (self.clone(), server.to_string());
        tokio::spawn(async move {
            let level = level.map(|l| json!({ "level": crate::asked::LEVELS[usize::from(l)] }));
            let asks = uris
                .into_iter()
                .map(|uri| ("resources/subscribe", json!({ "uri": uri })))
                .chain(level.map(|l| ("logging/setLevel", l)));
            for (method, params) in asks {
                match proxy.ask_shared(&server, method, params).await {
                    Ok(()) => tracing::debug!(%server, %method, "asked again of a new generation"),
                    Err(error) => {
                        tracing::warn!(%server, %method, "could not ask it again of a new generation: {}", error.message)
                    }
                }
            }
        });
    }

    /// One request to one server; a server's own error comes back as it said it.
    async fn send(
        &self,
        server: &str,
        method: &str,
        params: Option<&RawValue>,
        args: CallArgs,
    ) -> Result<Box<RawValue>, RpcError> {
        match self.hub.send(server, method, params, args).await {
            Ok(result) => Ok(result),
            Err(error) => call_error(error),
        }
    }

    /// Every server's held part of a list, all at once (each answers from what it holds; one
    /// still starting never holds up another's part), in config order.
    async fn held_parts(
        &self,
        method: &str,
        field: &str,
        args: &CallArgs,
    ) -> Vec<(String, Arc<[Box<RawValue>]>)> {
        let servers = self.hub.servers();
        let parts = futures::future::join_all(
            servers
                .iter()
                .map(|server| self.hub.list_all(server, method, field, args)),
        )
        .await;
        servers.into_iter().zip(parts).collect()
    }

    /// `method` to every server at once, with the params `params_for` gives it, each within
    /// [`FAN_OUT_WAIT`] (or the caller's shorter deadline); the answers in config order, a late
    /// or failing server's left out.
    async fn fan_out<'p>(
        &self,
        method: &str,
        params_for: impl Fn(&str) -> Option<Cow<'p, RawValue>>,
        args: &CallArgs,
    ) -> Vec<(String, Box<RawValue>)> {
        // An idle server (SPEC §13) runs nothing to list or set: it is not started for this.
        let servers: Vec<String> = self
            .hub
            .servers()
            .into_iter()
            .filter(|server| {
                self.hub
                    .watch(server)
                    .is_ok_and(|w| w.borrow().state() != ServerState::Idle)
            })
            .collect();
        let wait = args.timeout.map_or(FAN_OUT_WAIT, |t| t.min(FAN_OUT_WAIT));
        let params: Vec<Option<Cow<'p, RawValue>>> =
            servers.iter().map(|server| params_for(server)).collect();
        let answers =
            futures::future::join_all(servers.iter().zip(&params).map(|(server, params)| {
                let args = CallArgs {
                    timeout: Some(wait),
                    ..args.clone()
                };
                self.hub.send(server, method, params.as_deref(), args)
            }))
            .await;
        servers
            .into_iter()
            .zip(answers)
            .filter_map(|(server, answer)| match answer {
                Ok(result) => Some((server, result)),
                Err(error @ CallError::TimedOut { .. }) => {
                    tracing::warn!(%server, %method, "late: left out of the answer: {error}");
                    None
                }
                Err(error) => {
                    tracing::debug!(%server, %method, "left out of the answer: {error}");
                    None
                }
            })
            .collect()
    }

    async fn list_prompts(&self, args: CallArgs) -> Result<Box<RawValue>, RpcError> {
        let prompts = self.named_prompts(&args).await?;
        Ok(list_answer("prompts", prompts.iter().map(AsRef::as_ref)))
    }

    /// Every server's held prompts in config order, named by the policy tools are named by
    /// (SPEC §9: same prefix, shortening, collision rule and warning), the routes learned. Each
    /// prompt is the server's JSON text with only its `name` rewritten, in its place; one with
    /// no string name passes as it came.
    async fn named_prompts(&self, args: &CallArgs) -> Result<Vec<Box<RawValue>>, RpcError> {
        let parts = self.held_parts("prompts/list", "prompts", args).await;
        let upstream: Vec<Vec<Option<String>>> = parts
            .iter()
            .map(|(_, items)| {
                items
                    .iter()
                    .map(|item| {
                        members::member(item, "name")
                            .and_then(|name| serde_json::from_str::<String>(name.get()).ok())
                    })
                    .collect()
            })
            .collect();
        let listed: Vec<(&str, Vec<&str>)> = parts
            .iter()
            .zip(&upstream)
            .map(|((server, _), names)| {
                (
                    server.as_str(),
                    names.iter().flatten().map(String::as_str).collect(),
                )
            })
            .collect();
        let naming = self.hub.registry().naming();
        let (public, _) = self.hub.routes().name_prompts(&naming, &listed);
        let mut prompts = Vec::new();
        for (((_, items), names), public) in parts.iter().zip(&upstream).zip(public) {
            let mut public = public.into_iter();
            for (item, name) in items.iter().zip(names) {
                // The naming holds a public name for each prompt with a name, in order.
                let renamed = match name {
                    Some(name) => public.next().filter(|public| public != name),
                    None => None,
                };
                let renamed = match renamed {
                    Some(public) => {
                        members::with_member(item, "name", &to_raw(&Value::String(public))?)
                    }
                    None => None,
                };
                prompts.push(renamed.unwrap_or_else(|| item.clone()));
            }
        }
        Ok(prompts)
    }

    /// The server and upstream name of a public prompt name: as last named, else as named now
    /// from what the servers hold (a client may get a prompt it has not listed here), else by
    /// its prefix.
    async fn resolve_prompt(&self, public: &str, args: &CallArgs) -> Option<(String, String)> {
        let routes = self.hub.routes();
        if let Some(owner) = routes.named_prompt(public) {
            return Some(owner);
        }
        // Naming reads only the lists held: nothing is listed by the way.
        if let Err(error) = self.named_prompts(args).await {
            tracing::debug!("prompts not named: {}", error.message);
        }
        let naming = self.hub.registry().naming();
        routes.prompt_owner(public, &naming, &self.hub.servers())
    }

    /// `prompts/get` and `completion/complete`: to the server of the prompt (by its public
    /// name) or of the resource (by its URI), with the upstream prompt name.
    async fn prompt_request(
        &self,
        method: &str,
        params: Option<&RawValue>,
        args: CallArgs,
    ) -> Result<Box<RawValue>, RpcError> {
        let params = object_params(method, params)?;
        let text = |path: &[&str]| members::member_at(params, path).and_then(string_of);
        let (path, is_prompt): (&[&str], bool) = if method == "prompts/get" {
            (&["name"], true)
        } else {
            match text(&["ref", "type"]).as_deref() {
                Some("ref/prompt") => (&["ref", "name"], true),
                _ => (&["ref", "uri"], false),
            }
        };
        let key = text(path).unwrap_or_default();
        if !is_prompt {
            let server = self.resource_owner(&key, &args).await?;
            return self.send(&server, method, Some(params), args).await;
        }
        let Some((server, name)) = self.resolve_prompt(&key, &args).await else {
            return Err(RpcError::new(
                -32602,
                format!(
                    "Invalid params: no server offers a prompt named \"{key}\"; list the prompts to see what is published"
                ),
            ));
        };
        // Only the name changes: every other member stays as the client wrote it, in its place.
        let name = to_raw(&Value::String(name))?;
        let params = members::with_member_at(params, path, &name)
            .ok_or_else(|| RpcError::new(-32602, format!("Invalid params of {method}")))?;
        self.send(&server, method, Some(&params), args).await
    }

    async fn list_resources(
        &self,
        method: &str,
        args: CallArgs,
    ) -> Result<Box<RawValue>, RpcError> {
        let (field, key) = if method == "resources/list" {
            ("resources", "uri")
        } else {
            ("resourceTemplates", "uriTemplate")
        };
        let parts = self.held_parts(method, field, &args).await;
        let owners = parts.iter().flat_map(|(server, part)| {
            part.iter()
                .filter_map(|item| member_str(item, key))
                .map(|uri| (uri, server.clone()))
        });
        if method == "resources/list" {
            self.hub.routes().learn_resources(owners);
        } else {
            self.hub.routes().learn_templates(owners);
        }
        // Each item as the server sent it (SPEC §10).
        Ok(list_answer(
            field,
            parts
                .iter()
                .flat_map(|(_, part)| part.iter().map(AsRef::as_ref)),
        ))
    }

    /// The server that owns `uri`: the one that listed it, or whose template it matches, or
    /// the only one. A URI no client listed here yet (a client may read what it cached, or what
    /// a tool's result linked to) is routed by the held lists (SPEC §9) as a list would route
    /// it: the first server in config order that offers it. A URI the held lists do not offer
    /// while a server is listing again after its `list_changed` (a resource a tool just made)
    /// waits for that listing, within the request's deadline. A read never lists anything by
    /// the way, and never guesses: a URI that no server offers is an error that says to list.
    pub(crate) async fn resource_owner(
        &self,
        uri: &str,
        args: &CallArgs,
    ) -> Result<String, RpcError> {
        let known = self.hub.routes().resource_owner(uri, &self.hub.servers());
        let owner = match known {
            Some(server) => Some(server),
            None => match self.held_owner(uri, args).await {
                Some(server) => Some(server),
                None => {
                    let wait = args.timeout.map_or(mcp_supervisor::hub::LIST_WAIT, |t| {
                        t.min(mcp_supervisor::hub::LIST_WAIT)
                    });
                    match self.hub.relisted(wait).await {
                        true => self.held_owner(uri, args).await,
                        false => None,
                    }
                }
            },
        };
        owner.ok_or_else(|| {
            RpcError::new(
                -32002,
                format!("Resource not found: no server is known to offer \"{uri}\"; list the resources (resources/list, resources/templates/list) to see what is offered"),
            )
        })
    }

    /// The server whose held lists (SPEC §9) offer `uri`, listed or under one of its URI
    /// templates, learned as a list of every server teaches it (the first server in config order
    /// keeps a URI several offer); `None` when no server does.
    async fn held_owner(&self, uri: &str, args: &CallArgs) -> Option<String> {
        let (listed, templated) = futures::future::join(
            self.held_parts("resources/list", "resources", args),
            self.held_parts("resources/templates/list", "resourceTemplates", args),
        )
        .await;
        let owners = |parts: &[(String, Arc<[Box<RawValue>]>)], key: &str| {
            parts
                .iter()
                .flat_map(|(server, part)| {
                    part.iter()
                        .filter_map(|item| member_str(item, key))
                        .map(|text| (text, server.clone()))
                })
                .collect::<Vec<_>>()
        };
        let routes = self.hub.routes();
        routes.learn_resources(owners(&listed, "uri"));
        routes.learn_templates(owners(&templated, "uriTemplate"));
        routes.resource_owner(uri, &self.hub.servers())
    }

    /// `tasks/list` in `serve`: every server's tasks, their ids namespaced.
    async fn list_tasks(
        &self,
        params: Option<&RawValue>,
        args: CallArgs,
    ) -> Result<Box<RawValue>, RpcError> {
        let mut tasks = Vec::new();
        // A server without tasks, or late, has no part.
        for (server, result) in self
            .fan_out("tasks/list", |_| params.map(Cow::Borrowed), &args)
            .await
        {
            #[derive(Deserialize)]
            struct Page {
                tasks: Vec<Box<RawValue>>,
            }
            if let Ok(page) = serde_json::from_str::<Page>(result.get()) {
                // Each task whole, its id namespaced in its place.
                tasks.extend(page.tasks.into_iter().map(|t| namespace_task(&server, t)));
            }
        }
        Ok(list_answer("tasks", tasks.iter().map(AsRef::as_ref)))
    }

    /// `tasks/get`, `tasks/result`, `tasks/cancel` in `serve`: to the task's server, with its
    /// own id; the id in the answer is namespaced again.
    async fn task_request(
        &self,
        method: &str,
        params: Option<&RawValue>,
        args: CallArgs,
    ) -> Result<Box<RawValue>, RpcError> {
        let params = object_params(method, params)?;
        let public = member_str(params, "taskId").unwrap_or_default();
        let Some((server, task)) = mcp_supervisor::routes::task_route(&public) else {
            return Err(RpcError::new(
                -32602,
                format!(
                    "Invalid params: unknown task \"{public}\" (task ids here are SERVER:ID, as tools/call and tasks/list give them)"
                ),
            ));
        };
        if !self.hub.servers().iter().any(|s| s == server) {
            return Err(RpcError::new(
                -32602,
                format!("Invalid params: unknown task \"{public}\": no server \"{server}\""),
            ));
        }
        // Only the id changes: every other member stays as the client wrote it, in its place.
        let task = to_raw(&Value::String(task.to_string()))?;
        let params = members::with_member(params, "taskId", &task)
            .ok_or_else(|| RpcError::new(-32602, format!("Invalid params of {method}")))?;
        let result = self.send(server, method, Some(&params), args).await?;
        Ok(namespace_task(server, result))
    }
}

/// Whether a list request asks for a page after the first (it carries a `cursor`).
fn paged(params: Option<&RawValue>) -> bool {
    params.is_some_and(|p| p.get().contains("cursor") && member_str(p, "cursor").is_some())
}

/// The error for a cursor of a list the proxy answers whole.
fn unknown_cursor(method: &str) -> RpcError {
    RpcError::new(
        -32602,
        format!(
            "Invalid params: unknown cursor: {method} is answered whole here (it gives no nextCursor); ask without a cursor"
        ),
    )
}

/// A request's params that must be there and be an object, or the error that says so.
fn object_params<'a>(method: &str, params: Option<&'a RawValue>) -> Result<&'a RawValue, RpcError> {
    let params = params.ok_or_else(|| RpcError::new(-32602, format!("{method} needs params")))?;
    if !params.get().starts_with('{') {
        return Err(RpcError::new(
            -32602,
            format!("Invalid params: {method} needs an object"),
        ));
    }
    Ok(params)
}

/// One downstream client: a stdio connection or an HTTP session.
/// The servers' requests sent to one client, by our id, each waiting for its answer.
type Waiters = HashMap<u64, oneshot::Sender<Result<Box<RawValue>, RpcError>>>;

pub struct Client {
    /// Messages for no request, bounded ([`OUTBOX`]).
    out: mpsc::Sender<String>,
    /// The `*/list_changed` notifications left out while its queue was full (bits of
    /// [`RESYNC`]), owed to it once it reads again ([`owe`]).
    owed: Arc<AtomicU8>,
    metrics: Arc<crate::metrics::Metrics>,
    next: AtomicU64,
    /// The servers' requests sent to this client, by our id, waiting for its answer.
    /// `None` once the client has gone away.
    waiting: Mutex<Option<Waiters>>,
    /// The client's requests in flight, by their id as JSON text.
    calls: Mutex<HashMap<String, InCall>>,
    capabilities: Mutex<Option<Capabilities>>,
    /// What its `initialize` fixed (the handshake era), once answered.
    session: Mutex<Option<Session>>,
    initialized: std::sync::atomic::AtomicBool,
    /// It sent `initialize` (the handshake era).
    pub(crate) handshaken: std::sync::atomic::AtomicBool,
    /// It speaks protocol 2026-07-28 (no `initialize`; its identity in each request's `_meta`).
    pub(crate) stateless: std::sync::atomic::AtomicBool,
    /// Its subscriptions and log level, as it asked them of shared servers.
    pub(crate) asked: Mutex<crate::asked::Asked>,
}

impl Client {
    /// What this client's `initialize` fixed, once it was answered: what a transport seals so
    /// that another process can [resume](Proxy::resume) the session. `None` before, and for a
    /// client of protocol 2026-07-28 (it has no session).
    pub fn session(&self) -> Option<Session> {
        lock(&self.session).clone()
    }

    /// Keep what an answered `initialize` fixed: the version agreed (the answer's), and the
    /// client's capabilities and info as it sent them.
    fn fix_session(
        &self,
        params: Option<&RawValue>,
        answer: &RawValue,
        upstream: BTreeMap<String, String>,
    ) {
        let Some(protocol_version) = member_str(answer, "protocolVersion") else {
            return;
        };
        let part = |name: &str| {
            params
                .and_then(|p| members::member(p, name))
                .map(ToOwned::to_owned)
        };
        *lock(&self.session) = Some(Session {
            protocol_version,
            capabilities: part("capabilities"),
            client_info: part("clientInfo"),
            upstream,
        });
    }

    /// Mark the client as one of protocol 2026-07-28 before its first message (a transport that
    /// knows it already, such as an HTTP POST with no session).
    pub fn set_stateless(&self) {
        self.stateless.store(true, Ordering::SeqCst);
    }

    /// Whether a server's request with this id (ours, sent to this client) still waits for the
    /// client's answer. An answer to one that does not (another replica sent it, or it was
    /// answered or gave up) reaches nobody.
    pub fn waits_for(&self, id: &RawValue) -> bool {
        let Ok(id) = id.get().parse::<u64>() else {
            return false;
        };
        lock(&self.waiting)
            .as_ref()
            .is_some_and(|w| w.contains_key(&id))
    }

    /// Send a message that belongs to no request. Its queue is bounded ([`OUTBOX`]): while it
    /// is full (the client does not read), the message is not queued, and a notification so
    /// left out is counted and logged.
    ///
    /// A `*/list_changed` so left out is owed: once the client reads again (its queue has room),
    /// it gets that notification, once, so that its lists do not go stale without a word.
    pub fn send(&self, text: String) -> Result<(), Undelivered> {
        match self.out.try_send(text) {
            Ok(()) => Ok(()),
            Err(mpsc::error::TrySendError::Full(text)) => {
                if let Some(bit) = RESYNC.iter().position(|m| names_method(&text, m)) {
                    owe(&self.owed, bit, &self.out);
                }
                Err(left_out(&text, &self.metrics))
            }
            Err(mpsc::error::TrySendError::Closed(_)) => Err(Undelivered::Gone),
        }
    }

    /// The client answered one of the servers' requests.
    fn answered(&self, id: &RawValue, result: Option<&RawValue>, error: Option<&RawValue>) {
        let Ok(id) = id.get().parse::<u64>() else {
            return;
        };
        let waiter = lock(&self.waiting).as_mut().and_then(|w| w.remove(&id));
        let Some(waiter) = waiter else { return };
        let answer = match (result, error) {
            (Some(result), _) => Ok(result.to_owned()),
            (None, Some(error)) => Err(read_error(error)),
            (None, None) => Err(RpcError::new(-32603, "the client's answer had no result")),
        };
        let _ = waiter.send(answer);
    }

    /// It went away (or was let go): nothing more reaches it.
    pub(crate) fn is_gone(&self) -> bool {
        lock(&self.waiting).is_none()
    }

    fn close(&self) {
        lock(&self.waiting).take();
        for (_, call) in lock(&self.calls).drain() {
            call.cancel.cancel();
        }
    }
}

/// Owe `RESYNC[bit]` to the client whose queue is `out`. The first debt starts a task that
/// waits for room in the queue (while the client does not read; it ends with the client) and
/// then sends each list change owed by then, once; a debt after that starts the next task.
fn owe(owed: &Arc<AtomicU8>, bit: usize, out: &mpsc::Sender<String>) {
    if owed.fetch_or(1 << bit, Ordering::SeqCst) != 0 {
        return; // its task is waiting
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        owed.store(0, Ordering::SeqCst);
        return;
    };
    let (owed, out) = (owed.clone(), out.clone());
    runtime.spawn(async move {
        let Ok(room) = out.reserve_many(RESYNC.len()).await else {
            return;
        };
        let methods = owed.swap(0, Ordering::SeqCst);
        for ((bit, method), place) in RESYNC.iter().enumerate().zip(room) {
            if methods & (1 << bit) != 0 {
                place.send(notification_text(method, None));
            }
        }
    });
}

/// Whether `text` is a notification of `method` (as [`notification_text`] writes one).
fn names_method(text: &str, method: &str) -> bool {
    text.strip_prefix(r#"{"jsonrpc":"2.0","method":""#)
        .and_then(|rest| rest.strip_prefix(method))
        .is_some_and(|rest| rest.starts_with('"'))
}

/// The error a server's request gets when its client did not declare the capability it needs.
pub(crate) fn undeclared(method: &str) -> RpcError {
    RpcError::new(
        -32601,
        format!("the client did not declare the capability `{method}` needs"),
    )
}

/// What a client declared it can do, as far as routing a server's request needs.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Capabilities {
    roots: bool,
    sampling: bool,
    elicitation: bool,
}

impl Capabilities {
    pub(crate) fn read(text: &str) -> Self {
        #[derive(Deserialize)]
        struct Declared {
            #[serde(default)]
            roots: Option<serde::de::IgnoredAny>,
            #[serde(default)]
            sampling: Option<serde::de::IgnoredAny>,
            #[serde(default)]
            elicitation: Option<serde::de::IgnoredAny>,
        }
        serde_json::from_str::<Declared>(text)
            .map(|d| Self {
                roots: d.roots.is_some(),
                sampling: d.sampling.is_some(),
                elicitation: d.elicitation.is_some(),
            })
            .unwrap_or_default()
    }

    /// Whether a client with these capabilities can answer `method`.
    pub(crate) fn allow(&self, method: &str) -> bool {
        match method {
            "roots/list" => self.roots,
            "sampling/createMessage" => self.sampling,
            "elicitation/create" => self.elicitation,
            _ => true,
        }
    }
}

/// A client as one of its requests sees it: what relates to the request goes to the request's
/// own stream when it has one.
pub struct Scope {
    pub(crate) client: Arc<Client>,
    related: Option<mpsc::Sender<String>>,
    /// Set when the client cancelled this request (`notifications/cancelled`).
    by_client: Mutex<Option<ByClient>>,
}

/// A client's cancellation of one of its requests.
struct ByClient {
    /// Its own words for why, passed to the server (SPEC §10: passed whole).
    reason: Option<String>,
}

impl Scope {
    /// The client as a whole: what belongs to none of its requests.
    fn of(client: &Arc<Client>) -> Self {
        Self {
            client: client.clone(),
            related: None,
            by_client: Mutex::new(None),
        }
    }

    /// This scope's client as a whole, as the hub's downstream.
    pub(crate) fn whole(&self) -> Arc<dyn Downstream> {
        Arc::new(Self::of(&self.client))
    }

    /// What relates to the request goes to its own stream while that is open (bounded as a
    /// client's queue is); once it closed, to the client as a whole.
    pub(crate) fn deliver(&self, text: String) -> Result<(), Undelivered> {
        let text = match &self.related {
            Some(related) => match related.try_send(text) {
                Ok(()) => return Ok(()),
                Err(mpsc::error::TrySendError::Full(text)) => {
                    return Err(left_out(&text, &self.client.metrics));
                }
                Err(mpsc::error::TrySendError::Closed(text)) => text,
            },
            None => text,
        };
        self.client.send(text)
    }
}

impl Downstream for Scope {
    fn request(
        &self,
        method: &str,
        params: Option<Box<RawValue>>,
    ) -> BoxFuture<'static, Result<Box<RawValue>, RpcError>> {
        let client = &self.client;
        let declared = *lock(&client.capabilities);
        if let Some(declared) = declared
            && !declared.allow(method)
        {
            let error = undeclared(method);
            return Box::pin(async move { Err(error) });
        }
        let id = client.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        let open = match lock(&client.waiting).as_mut() {
            Some(waiting) => {
                waiting.insert(id, tx);
                true
            }
            None => false,
        };
        let text = request_text(id, method, params.as_deref());
        let sent = if open {
            self.deliver(text)
        } else {
            Err(Undelivered::Gone)
        };
        if sent.is_err() {
            lock(&client.waiting).as_mut().map(|w| w.remove(&id));
        }
        let unsent = match sent {
            Ok(()) => None,
            Err(Undelivered::Gone) => Some(RpcError::new(-32603, "the client has gone away")),
            Err(Undelivered::Full) => Some(RpcError::new(
                -32603,
                format!(
                    "the client is not reading: {OUTBOX} messages wait for it, so {method} was not sent"
                ),
            )),
        };
        let client = client.clone();
        Box::pin(async move {
            if let Some(error) = unsent {
                return Err(error);
            }
            let mut guard = Waiting { client, id };
            let answer = rx.await;
            guard.id = 0;
            answer.unwrap_or_else(|_| Err(RpcError::new(-32603, "the client has gone away")))
        })
    }

    fn notify(&self, method: &str, params: Option<Box<RawValue>>) {
        let _ = self.deliver(notification_text(method, params.as_deref()));
    }

    fn client(&self) -> Option<(usize, Arc<dyn Downstream>)> {
        Some((session_key(&self.client), self.whole()))
    }

    /// A client of the handshake era is a session (a stdio connection, an HTTP session); one of
    /// the 2026-07-28 era has none, and is served by the shared instance.
    fn session(&self) -> Option<(usize, Arc<dyn Downstream>)> {
        if self.client.stateless.load(Ordering::SeqCst) {
            return None;
        }
        self.client()
    }

    fn cancel_reason(&self) -> Option<String> {
        lock(&self.by_client).as_ref()?.reason.clone()
    }
}

/// The key of a client's session in the hub: the same for all its requests while it lives.
fn session_key(client: &Arc<Client>) -> usize {
    Arc::as_ptr(client) as usize
}

/// A client's request in flight, as its client's list holds it.
struct InCall {
    cancel: CancellationToken,
    /// Where the request's own things go, and whether its client cancelled it.
    scope: Arc<Scope>,
}

/// A client's request in flight: forgotten when it ends ([`InFlight::end`]) or is dropped.
struct InFlight<'a> {
    client: &'a Client,
    /// Its id as JSON text; empty once forgotten.
    key: &'a str,
}

impl InFlight<'_> {
    /// Forget it now.
    fn end(&mut self) {
        let key = std::mem::take(&mut self.key);
        lock(&self.client.calls).remove(key);
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if !self.key.is_empty() {
            self.end();
        }
    }
}

/// A server's request waiting for a client's answer: given up on (dropped), it is forgotten
/// and the client is told.
struct Waiting {
    client: Arc<Client>,
    id: u64,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if self.id == 0 {
            return;
        }
        if lock(&self.client.waiting)
            .as_mut()
            .and_then(|w| w.remove(&self.id))
            .is_some()
        {
            let params = json!({ "requestId": self.id, "reason": "the server gave up on it" });
            let _ = self.client.send(notification_text(
                "notifications/cancelled",
                serde_json::value::to_raw_value(&params).ok().as_deref(),
            ));
        }
    }
}

/// The proxy's own answer for server requests that no client's call caused: the only client
/// takes them; with none, or several, the server gets an error (never a hang).
pub struct Unrelated {
    proxy: std::sync::OnceLock<Weak<Proxy>>,
}

impl Unrelated {
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            proxy: std::sync::OnceLock::new(),
        })
    }

    pub fn attach(&self, proxy: &Arc<Proxy>) {
        let _ = self.proxy.set(Arc::downgrade(proxy));
    }

    fn only_client(&self) -> Option<Arc<Client>> {
        let proxy = self.proxy.get()?.upgrade()?;
        // A client of protocol 2026-07-28 takes no requests from a server.
        let clients: Vec<_> = proxy
            .clients()
            .into_iter()
            .filter(|c| !c.stateless.load(Ordering::SeqCst))
            .collect();
        match clients.as_slice() {
            [client] => Some(client.clone()),
            _ => None,
        }
    }
}

impl Downstream for Unrelated {
    fn request(
        &self,
        method: &str,
        params: Option<Box<RawValue>>,
    ) -> BoxFuture<'static, Result<Box<RawValue>, RpcError>> {
        match self.only_client() {
            Some(client) => Scope::of(&client).request(method, params),
            None if method == "ping" => Box::pin(async { Ok(raw_json("{}")) }),
            None => {
                let error = RpcError::new(
                    -32603,
                    format!(
                        "`{method}` has no client to go to: no call of a client caused it, and there is not exactly one client connected"
                    ),
                );
                Box::pin(async move { Err(error) })
            }
        }
    }

    fn notify(&self, method: &str, params: Option<Box<RawValue>>) {
        if let Some(client) = self.only_client() {
            let _ = client.send(notification_text(method, params.as_deref()));
        }
    }
}

/// Pass hub events down to every client: tool-list changes (only when the aggregate changed),
/// and the servers' notifications.
async fn forward_events(
    proxy: Weak<Proxy>,
    mut events: tokio::sync::broadcast::Receiver<HubEvent>,
) {
    loop {
        let event = match events.recv().await {
            Ok(event) => event,
            Err(tokio::sync::broadcast::error::RecvError::Lagged(missed)) => {
                // Too slow to keep up: what was missed is gone, so every client is told to
                // list again rather than left with lists that silently went stale.
                let Some(proxy) = proxy.upgrade() else { return };
                tracing::warn!(
                    "{missed} server events were missed; telling every client to list again"
                );
                for method in RESYNC {
                    proxy.tell_clients(&notification_text(method, None));
                }
                continue;
            }
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
        };
        let Some(proxy) = proxy.upgrade() else { return };
        let text = match &event {
            HubEvent::ToolsChanged => notification_text("notifications/tools/list_changed", None),
            HubEvent::Notification(n) => {
                let params = match (proxy.mode, n.method.as_str(), &n.params) {
                    (Mode::Aggregate, "notifications/tasks/status", Some(params)) => {
                        Some(namespace_task(&n.server, params.clone()))
                    }
                    (_, _, params) => params.clone(),
                };
                let text = notification_text(&n.method, params.as_deref());
                proxy.tell_clients_of(&n.server, &n.method, n.params.as_deref(), &text);
                continue;
            }
            HubEvent::State {
                server,
                state: ServerState::Ready,
                generation,
            } => {
                proxy.restore(server, *generation);
                continue;
            }
            HubEvent::State { .. } => continue,
        };
        proxy.tell_clients(&text);
    }
}

/// What a client that missed server events is sent so that it lists again.
pub(crate) const RESYNC: [&str; 3] = [
    "notifications/tools/list_changed",
    "notifications/prompts/list_changed",
    "notifications/resources/list_changed",
];

/// `initialize` params from a 2026-07-28 request's `_meta` (client info and capabilities).
fn identity_of(meta: &Value) -> Option<Arc<RawValue>> {
    // clientInfo is only recommended in this era: a client that leaves it out is named as the
    // proxy would name itself.
    let info = meta
        .get("io.modelcontextprotocol/clientInfo")
        .cloned()
        .unwrap_or_else(
            || json!({ "name": "mcp-supervisor", "version": env!("CARGO_PKG_VERSION") }),
        );
    let capabilities = meta
        .get("io.modelcontextprotocol/clientCapabilities")
        .cloned()
        .unwrap_or_else(|| json!({}));
    // The client's own version: the server is asked for it (a server that does not speak it
    // is opened with the newest handshake version instead). Only a request of this era
    // decides: one without a version, or with one no server could speak (a client probing),
    // does not.
    let version = meta
        .get("io.modelcontextprotocol/protocolVersion")
        .and_then(Value::as_str)
        .filter(|v| *v == STATELESS_VERSION)?;
    // `_meta` marks the handshake as a stateless client's, so the server is opened in that era.
    let params = json!({
        "protocolVersion": version,
        "capabilities": capabilities,
        "clientInfo": info,
        "_meta": { "io.modelcontextprotocol/protocolVersion": version },
    });
    serde_json::value::to_raw_value(&params).ok().map(Arc::from)
}

/// What `serve` can do for its clients: every kind of request it routes.
pub(crate) fn serve_capabilities() -> Value {
    json!({
        "tools": { "listChanged": true },
        "prompts": { "listChanged": true },
        "resources": { "subscribe": true, "listChanged": true },
        "completions": {},
        "logging": {},
        "tasks": { "list": {}, "cancel": {}, "requests": { "tools": { "call": {} } } },
    })
}

/// `serve`'s own name and version.
pub(crate) fn serve_info() -> Value {
    json!({ "name": "mcp-supervisor", "version": env!("CARGO_PKG_VERSION") })
}

pub(crate) const SERVE_INSTRUCTIONS: &str = "mcp-supervisor fronts supervised MCP servers: their tools keep working across crashes and restarts.";

/// `serve`'s instructions: its own sentence, then each server's own instructions (of those whose
/// handshake is known when the client asks), in config order, under the server's name: an
/// agent host reads them as it would read each server's.
pub(crate) fn serve_instructions(hub: &Hub) -> String {
    let mut text = SERVE_INSTRUCTIONS.to_string();
    for server in hub.servers() {
        let own = hub
            .server_info(&server)
            .and_then(|info| member_str(&info, "instructions"))
            .filter(|own| !own.trim().is_empty());
        if let Some(own) = own {
            text.push_str(&format!(
                "\n\n## Server \"{server}\" (its tools, prompts and task ids carry its prefix here)\n\n{own}"
            ));
        }
    }
    text
}

/// The client capabilities the proxy declares to a server it opens in its own name: what it
/// can route to a client (and answers with an error for a client that lacks it).
pub fn routed_capabilities() -> Value {
    json!({
        "roots": { "listChanged": true },
        "sampling": {},
        "elicitation": { "form": {}, "url": {} },
    })
}

// === small helpers ===

pub(crate) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Every write is a whole insert, remove or swap: a poisoned lock holds consistent data.
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

pub(crate) fn raw_json(text: &str) -> Box<RawValue> {
    RawValue::from_string(text.to_string()).unwrap_or_else(|_| mcp_supervisor::link::empty_object())
}

/// `{"<field>":[items]}`, each item's text as it is.
fn list_answer<'a>(field: &str, items: impl Iterator<Item = &'a RawValue>) -> Box<RawValue> {
    let mut text = format!("{{{}:[", Value::String(field.to_string()));
    for (i, item) in items.enumerate() {
        if i > 0 {
            text.push(',');
        }
        text.push_str(item.get());
    }
    text.push_str("]}");
    raw_json(&text)
}

pub(crate) fn to_raw(value: &Value) -> Result<Box<RawValue>, RpcError> {
    serde_json::value::to_raw_value(value).map_err(|e| RpcError::new(-32603, e.to_string()))
}

/// A string member of a JSON object. A JSON parser takes the last of two members of one name
/// (a server's does too), so the whole object is read, unless `name` is its first member and can
/// be there only once: its quoted name appears once in the text, and no escape could spell it
/// another way. Then only that member is read (a tool call's `name` comes before its arguments,
/// which are most of the text).
pub(crate) fn member_str(object: &RawValue, name: &str) -> Option<String> {
    member_text(object, name).map(Cow::into_owned)
}

/// [`member_str`], borrowed from the object's text when it has no escape to undo.
pub(crate) fn member_text<'t>(object: &'t RawValue, name: &str) -> Option<Cow<'t, str>> {
    let text = object.get();
    if let Some(value) = first_member(text, name)
        && only_once(text, name)
    {
        #[derive(Deserialize)]
        struct Text<'a>(#[serde(borrow)] Cow<'a, str>);
        let mut deserializer = serde_json::Deserializer::from_str(value);
        return Option::<Text<'t>>::deserialize(&mut deserializer)
            .ok()
            .flatten()
            .map(|t| t.0);
    }
    struct Member<'n>(&'n str, Option<String>);
    impl<'de> serde::de::DeserializeSeed<'de> for Member<'_> {
        type Value = Option<String>;
        fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_map(self)
        }
    }
    impl<'de> serde::de::Visitor<'de> for Member<'_> {
        type Value = Option<String>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(
            mut self,
            mut map: A,
        ) -> Result<Self::Value, A::Error> {
            while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                if key == self.0 {
                    self.1 = map.next_value::<Option<String>>()?;
                } else {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
            Ok(self.1)
        }
    }
    let mut deserializer = serde_json::Deserializer::from_str(text);
    serde::de::DeserializeSeed::deserialize(Member(name, None), &mut deserializer)
        .ok()
        .flatten()
        .map(Cow::Owned)
}

/// The text from the value on, when `name` (plain text, no escapes) is the object's first
/// member, as written without escapes.
fn first_member<'t>(object: &'t str, name: &str) -> Option<&'t str> {
    const SPACE: [char; 4] = [' ', '\t', '\n', '\r'];
    let rest = object.trim_start_matches(SPACE).strip_prefix('{')?;
    let rest = rest.trim_start_matches(SPACE).strip_prefix('"')?;
    let rest = rest.strip_prefix(name)?.strip_prefix('"')?;
    rest.trim_start_matches(SPACE).strip_prefix(':')
}

/// Whether no member but one can be named `name` in `object`: no escape in the text, and
/// `"name"` in it once.
fn only_once(object: &str, name: &str) -> bool {
    let bytes = object.as_bytes();
    memchr::memchr(b'\\', bytes).is_none()
        && memchr::memmem::find_iter(bytes, name.as_bytes())
            .filter(|&at| {
                at > 0 && bytes[at - 1] == b'"' && bytes.get(at + name.len()) == Some(&b'"')
            })
            .nth(1)
            .is_none()
}

fn read_error(error: &RawValue) -> RpcError {
    RpcError::from_json(error).unwrap_or_else(|| {
        RpcError::new(-32603, "the client's error answer is not a JSON-RPC error")
    })
}

/// Whether a tool result says `isError: true`.
pub(crate) fn is_error(result: &RawValue) -> bool {
    // Most results are no error and say nothing of it: no pass over them.
    if !result.get().contains("isError") {
        return false;
    }
    #[derive(Deserialize)]
    struct Flag {
        #[serde(rename = "isError", default)]
        is_error: Option<bool>,
    }
    serde_json::from_str::<Flag>(result.get())
        .ok()
        .and_then(|f| f.is_error)
        .unwrap_or(false)
}

/// A call's failure as the client sees it: the server's own JSON-RPC error as it said it, an
/// unknown or withheld tool as invalid params, anything else as a tool result with `isError` that says
/// what happened and what to do.
pub(crate) fn call_error(error: CallError) -> Result<Box<RawValue>, RpcError> {
    match error {
        CallError::ServerError {
            code,
            message,
            data,
            ..
        } => Err(RpcError {
            code: i64::from(code),
            message,
            data: data.and_then(|d| RawValue::from_string(d).ok()),
        }),
        // The bound of an isolated server's instances (SPEC §11): a JSON-RPC error that names it.
        error @ CallError::TooManyInstances { .. } => Err(RpcError::new(-32603, error.to_string())),
        CallError::UnknownTool { name } => Err(RpcError::new(
            -32602,
            format!(
                "no server offers a tool named \"{name}\"; list the tools to see what is published"
            ),
        )),
        // Refused before anything is sent (in `wrap` too: never forwarded as an unknown name).
        withheld @ CallError::Withheld { .. } => Err(RpcError::new(-32602, withheld.to_string())),
        other => to_raw(&json!({
            "content": [{ "type": "text", "text": other.to_string() }],
            "isError": true,
        })),
    }
}

/// What a handshake-era client's `initialize` fixed for the life of its session: the protocol
/// version agreed, and the client's capabilities and info as it sent them (JSON text, whole).
/// Serializable, so that a transport can carry it (sealed) in the session id it gives out and
/// any process serving the same hub can [resume](Proxy::resume) the session. What changes later
/// (its log level, its subscriptions) is not part of it.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Session {
    #[serde(rename = "v")]
    pub protocol_version: String,
    #[serde(rename = "c", default, skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<Box<RawValue>>,
    #[serde(rename = "i", default, skip_serializing_if = "Option::is_none")]
    pub client_info: Option<Box<RawValue>>,
    /// The upstream session ids of its own instances of isolated `url` servers (SPEC §11),
    /// opened at its `initialize`, by server: a process that resumes the session goes on
    /// with them.
    #[serde(rename = "u", default, skip_serializing_if = "BTreeMap::is_empty")]
    pub upstream: BTreeMap<String, String>,
}

/// A client's `tools/call`, resolved ([`Proxy::named_call`]).
pub(crate) enum Named<'a> {
    /// Call the tool of this public name with these params (the client's own, unless search
    /// mode made them).
    Call {
        name: Cow<'a, str>,
        params: Cow<'a, RawValue>,
    },
    /// Answered here (search mode's `search_tools`, or a `call_tool` that names nothing).
    Answer(Result<Box<RawValue>, RpcError>),
}

/// The one call of a tool through the hub, both eras: by its public name; in `wrap`, a name the
/// registry does not hold goes to the server as it came, and its own answer comes back.
pub(crate) async fn call_through(
    hub: &Hub,
    mode: Mode,
    name: &str,
    params: &RawValue,
    args: CallArgs,
) -> Result<Box<RawValue>, CallError> {
    match hub.call_json(name, params, args.clone()).await {
        Err(CallError::UnknownTool { name }) => match (mode, hub.servers().as_slice()) {
            (Mode::Transparent, [server]) => {
                hub.send(server, "tools/call", Some(params), args).await
            }
            _ => Err(CallError::UnknownTool { name }),
        },
        other => other,
    }
}

/// `task.taskId` (a tool call's task) or `taskId` (a task's state) of a result, namespaced by
/// `server`.
pub(crate) fn namespace_task(server: &str, result: Box<RawValue>) -> Box<RawValue> {
    if !result.get().contains("taskId") {
        return result;
    }
    let mut result = result;
    // Only the id changes: every other member stays as the server wrote it, in its place.
    for path in [&["taskId"][..], &["task", "taskId"][..]] {
        let Some(id) = members::member_at(&result, path)
            .and_then(|id| serde_json::from_str::<String>(id.get()).ok())
        else {
            continue;
        };
        let public = Value::String(mcp_supervisor::routes::task_public(server, &id));
        if let Ok(public) = serde_json::value::to_raw_value(&public)
            && let Some(out) = members::with_member_at(&result, path, &public)
        {
            result = out;
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client that does not read: past OUTBOX messages for no request, notifications are
    /// left out and counted, a server's request fails at once with an error that says why, and
    /// once the client reads, both go through again.
    fn note() -> String {
        notification_text("notifications/message", None)
    }

    /// A proxy and a client of it whose queue is full of [`note`]s: the client has not read.
    fn client_with_a_full_queue() -> (Arc<Proxy>, Arc<Client>, mpsc::Receiver<String>) {
        let hub = Arc::new(Hub::start(mcp_supervisor::core::config::Config::default()));
        let proxy = Proxy::new(hub, Mode::Aggregate);
        let (out, seen) = mpsc::channel(OUTBOX);
        let client = proxy.connect(out);
        for _ in 0..OUTBOX {
            assert_eq!(client.send(note()), Ok(()));
        }
        (proxy, client, seen)
    }

    #[tokio::test]
    async fn a_client_that_does_not_read_has_a_bounded_outbox() {
        let (proxy, client, mut seen) = client_with_a_full_queue();
        for _ in 0..3 {
            assert_eq!(client.send(note()), Err(Undelivered::Full));
        }
        assert_eq!(
            proxy
                .metrics()
                .notifications_dropped
                .load(Ordering::Relaxed),
            3
        );
        let scope: Arc<dyn Downstream> = Scope::of(&client).whole();
        let refused = scope.request("roots/list", None).await.unwrap_err();
        assert!(
            refused.message.contains("not reading"),
            "{}",
            refused.message
        );
        assert!(lock(&client.waiting).as_ref().is_some_and(|w| w.is_empty()));
        // It reads one: there is room again.
        assert!(seen.recv().await.is_some());
        assert_eq!(client.send(note()), Ok(()));
        assert_eq!(
            proxy
                .metrics()
                .notifications_dropped
                .load(Ordering::Relaxed),
            3
        );
        drop(seen);
        assert_eq!(client.send(note()), Err(Undelivered::Gone));
    }

    /// A `*/list_changed` left out while the client did not read is owed: once it reads, it
    /// gets that notification once, after what was queued; a progress notification left out
    /// is only counted.
    #[tokio::test]
    async fn a_list_change_left_out_is_sent_once_the_client_reads_again() {
        let (_proxy, client, mut seen) = client_with_a_full_queue();
        let changed = |m: &str| notification_text(&format!("notifications/{m}/list_changed"), None);
        for m in ["tools", "prompts", "tools"] {
            assert_eq!(client.send(changed(m)), Err(Undelivered::Full));
        }
        assert_eq!(
            client.send(notification_text("notifications/progress", None)),
            Err(Undelivered::Full)
        );
        // The client reads: what was queued, then each list change it missed, once.
        let mut after = Vec::new();
        for n in 0..OUTBOX + 2 {
            let text = tokio::time::timeout(std::time::Duration::from_secs(5), seen.recv())
                .await
                .unwrap_or_else(|_| panic!("message {n} came in time"))
                .expect("the client is connected");
            if n >= OUTBOX {
                after.push(text);
            }
        }
        assert_eq!(after, [changed("tools"), changed("prompts")]);
        assert!(seen.try_recv().is_err(), "nothing else is owed");
        // Owed again later, it is sent again.
        for _ in 0..OUTBOX {
            assert_eq!(client.send(note()), Ok(()));
        }
        assert_eq!(client.send(changed("resources")), Err(Undelivered::Full));
        for _ in 0..OUTBOX {
            seen.recv().await.expect("queued");
        }
        let owed = tokio::time::timeout(std::time::Duration::from_secs(5), seen.recv()).await;
        assert_eq!(owed.ok().flatten(), Some(changed("resources")));
    }

    #[tokio::test]
    async fn a_client_behind_on_server_events_is_told_to_list_again() {
        let hub = Arc::new(Hub::start(mcp_supervisor::core::config::Config::default()));
        let proxy = Proxy::new(hub, Mode::Aggregate);
        let (out, mut seen) = mpsc::channel(OUTBOX);
        let client = proxy.connect(out);
        client.initialized.store(true, Ordering::SeqCst);
        // Five events into a channel that holds two: the reader misses three.
        let (tx, rx) = tokio::sync::broadcast::channel(2);
        for _ in 0..5 {
            let _ = tx.send(HubEvent::ToolsChanged);
        }
        drop(tx);
        forward_events(Arc::downgrade(&proxy), rx).await;
        let mut methods = Vec::new();
        while let Ok(line) = seen.try_recv() {
            let message: Value = serde_json::from_str(&line).unwrap();
            methods.push(message["method"].as_str().unwrap_or_default().to_string());
        }
        assert_eq!(
            methods,
            [
                "notifications/tools/list_changed",
                "notifications/prompts/list_changed",
                "notifications/resources/list_changed",
                "notifications/tools/list_changed",
                "notifications/tools/list_changed",
            ]
        );
    }

    fn kind_of(text: &str) -> Kind {
        Message::read(text).expect("a message").kind
    }

    /// A member is what a JSON parser reads: of two of one name, the last, however the second
    /// is spelled; reading stops early only where no second one can be.
    #[test]
    fn a_member_is_the_one_a_parser_reads() {
        let long = format!(
            r#"{{"name":"echo","arguments":{{"text":"{}"}}}}"#,
            "x".repeat(4096)
        );
        let cases: [(&str, Option<&str>); 15] = [
            (r#"{"name":"echo","arguments":{}}"#, Some("echo")),
            (&long, Some("echo")),
            (
                r#"{"arguments":{"name":"inner"},"name":"echo"}"#,
                Some("echo"),
            ),
            (r#"{"name":"a","arguments":{},"name":"b"}"#, Some("b")),
            (r#"{"name":"a","n\u0061me":"b"}"#, Some("b")),
            (r#"{"name":"a","arguments":{"t":"\"name\""}}"#, Some("a")),
            (" {\n \"name\" :\t\"echo\" ,\"arguments\":{}}", Some("echo")),
            (r#"{"name":"a","arguments":{"t":"name"}}"#, Some("a")),
            (r#"{"name":"a","arguments":{"name":"b"}}"#, Some("a")),
            (r#"{"names":"a","name":"b"}"#, Some("b")),
            (r#"{"arguments":{}}"#, None),
            (r#"{"name":7}"#, None),
            (r#"{"name":null,"arguments":{}}"#, None),
            (r#"["name"]"#, None),
            (r#"{"name":"\u00e9t\u00e9"}"#, Some("été")),
        ];
        for (text, name) in cases {
            assert_eq!(
                member_str(&raw_json(text), "name").as_deref(),
                name,
                "{text}"
            );
        }
    }

    #[test]
    fn kinds_are_read_from_the_envelope() {
        assert_eq!(
            kind_of(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#),
            Kind::Request {
                method: "tools/list".into()
            }
        );
        assert_eq!(
            kind_of(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#),
            Kind::Notification {
                method: "notifications/initialized".into()
            }
        );
        assert_eq!(
            kind_of(r#"{"jsonrpc":"2.0","id":"a","result":{}}"#),
            Kind::Response
        );
        assert_eq!(
            kind_of(r#"{"jsonrpc":"2.0","id":7,"method":"ping","params":null}"#),
            Kind::Request {
                method: "ping".into()
            }
        );
        assert_eq!(
            kind_of(
                r#"{"jsonrpc":"2.0","id":7,"method":"x","params":{"_meta":{"progressToken":1}}}"#
            ),
            Kind::Request { method: "x".into() }
        );
        for (text, code) in [
            ("nope", -32700),
            ("[1]", -32600),
            (r#"{"id":1}"#, -32600),
            (r#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#, -32600),
            (r#"{"id":1,"method":"ping"}"#, -32600),
            (r#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#, -32600),
            (r#"{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}"#, -32600),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"x","params":5}"#,
                -32600,
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"x","params":[1]}"#,
                -32600,
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"x","params":{"_meta":"m"}}"#,
                -32600,
            ),
        ] {
            let Err(answer) = Message::read(text) else {
                panic!("{text} is not a message");
            };
            let answer: Value = serde_json::from_str(&answer).unwrap();
            assert_eq!(answer["error"]["code"], code, "{text}");
            assert!(answer["id"].is_null());
        }
    }

    #[test]
    fn task_ids_are_namespaced_by_server() {
        let created = raw_json(r#"{"task":{"taskId":"t-1","status":"working"}}"#);
        let out: Value = serde_json::from_str(namespace_task("web", created).get()).unwrap();
        assert_eq!(out["task"]["taskId"], "web:t-1");
        let state = raw_json(r#"{"taskId":"t-2","status":"completed"}"#);
        let out: Value = serde_json::from_str(namespace_task("a", state).get()).unwrap();
        assert_eq!(out["taskId"], "a:t-2");
        let plain = raw_json(r#"{"content":[]}"#);
        assert_eq!(namespace_task("a", plain).get(), r#"{"content":[]}"#);
        // Only the id changes: the other members keep their text and their order.
        let ordered = raw_json(r#"{"status":"working","taskId":"t-3","pollInterval":1.50}"#);
        assert_eq!(
            namespace_task("a", ordered).get(),
            r#"{"status":"working","taskId":"a:t-3","pollInterval":1.50}"#
        );
        let nested = raw_json(r#"{"z":0,"task":{"ttl":5,"taskId":"t-4"},"_meta":{}}"#);
        assert_eq!(
            namespace_task("w", nested).get(),
            r#"{"z":0,"task":{"ttl":5,"taskId":"w:t-4"},"_meta":{}}"#
        );
    }

    #[test]
    fn capabilities_gate_the_servers_requests() {
        let some = Capabilities::read(r#"{"roots":{"listChanged":true},"sampling":{}}"#);
        assert!(some.allow("roots/list") && some.allow("sampling/createMessage"));
        assert!(!some.allow("elicitation/create"));
        assert!(some.allow("ping"));
        let none = Capabilities::read("{}");
        assert!(!none.allow("roots/list"));
    }

    #[test]
    fn call_errors_keep_the_servers_own_error() {
        let error = call_error(CallError::ServerError {
            server: "s".into(),
            tool: "t".into(),
            code: -32602,
            message: "bad".into(),
            data: Some(r#"{"field":"x"}"#.into()),
        })
        .unwrap_err();
        assert_eq!(
            error.data.as_deref().map(RawValue::get),
            Some(r#"{"field":"x"}"#)
        );
        assert_eq!((error.code, error.message.as_str()), (-32602, "bad"));
        let result = call_error(CallError::Cancelled {
            server: "s".into(),
            tool: "t".into(),
        })
        .unwrap();
        assert!(is_error(&result));
    }
}
