//! One generation of a real server over rmcp: a stdio child in its own process group, or a
//! streamable-HTTP client. It implements [`Link`] and [`Connector`] for the supervisor.
//!
//! This is the only part that knows rmcp's client API. It never retries, reconnects or decides
//! anything about a failure; it reports what happened, normalized, and closes when told.

pub mod errors;
pub mod http_client;
pub mod http_wire;
mod lane;
pub mod process;
pub mod wire;

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mcp_supervisor_core::classify::Failure;
use mcp_supervisor_core::config::{ServerConfig, TransportConfig};
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, ClientConfig, ClientRequest,
    ListToolsRequest, PaginatedRequestParams, PingRequest, ProgressNotificationParam,
    ProgressToken, ResourceUpdatedNotificationParam, ServerNotification, ServerResult, Tool,
};
use rmcp::service::{
    ClientCacheConfig, NotificationContext, Peer, PeerRequestOptions, RunningService,
    serve_client_with_ct,
};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::common::client_side_sse::ExponentialBackoff;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, RoleClient};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::link::{BoxFuture, CallOptions, CloseHow, Connector, Link, LinkEvent, LinkEvents};
use errors::{Phase, normalize};
use http_client::CorrelatingClient;

/// Opens generations of one configured server.
pub struct RmcpConnector {
    server: ServerConfig,
}

impl RmcpConnector {
    pub fn new(server: ServerConfig) -> Self {
        Self { server }
    }
}

impl Connector for RmcpConnector {
    fn open(&self, generation: u64, events: LinkEvents) -> Result<Arc<dyn Link>, String> {
        let name = self.server.name.as_str();
        let routes = Arc::new(ProgressRoutes::default());
        let handler = Handler {
            events: events.clone(),
            routes: routes.clone(),
        };
        let ct = CancellationToken::new();
        let (closed_tx, closed_rx) = watch::channel(false);
        match &self.server.transport {
            TransportConfig::Stdio {
                command,
                args,
                env,
                cwd,
            } => {
                let mut cmd = tokio::process::Command::new(command);
                cmd.args(args);
                for (key, value) in env {
                    cmd.env(key, value.expose());
                }
                if let Some(dir) = cwd {
                    cmd.current_dir(dir);
                }
                let spawned = process::spawn(name, cmd).map_err(|e| {
                    format!("could not start `{command}`: {e}; check that the command exists and is executable")
                })?;
                // The generation is closed once the process group is gone.
                let mut gone = spawned.gone.clone();
                let ct_on_exit = ct.clone();
                tokio::spawn(async move {
                    let _ = gone.wait_for(|g| *g).await;
                    ct_on_exit.cancel();
                    let _ = closed_tx.send(true);
                });
                let (lane, rmcp_end) = lane::start(spawned.stdout, spawned.stdin);
                Ok(Arc::new(RmcpLink {
                    generation,
                    pending: Mutex::new(Some(Pending::Stdio(rmcp_end))),
                    lane: Some(lane),
                    handler: Mutex::new(Some(handler)),
                    peer: Mutex::new(None),
                    routes,
                    ct,
                    closed: closed_rx,
                    closed_tx: Mutex::new(None),
                    stop: Some(spawned.stop),
                    pid: Some(spawned.pid),
                    stderr_tail: spawned.stderr_tail,
                }))
            }
            TransportConfig::Http { url, headers } => {
                let mut custom = HashMap::new();
                for (key, value) in headers {
                    let name = reqwest::header::HeaderName::from_bytes(key.as_bytes())
                        .map_err(|e| format!("header name `{key}` is not valid: {e}"))?;
                    let value =
                        reqwest::header::HeaderValue::from_str(value.expose()).map_err(|_| {
                            format!("the value of header `{key}` is not a valid HTTP header value")
                        })?;
                    custom.insert(name, value);
                }
                let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                    // Our call path decides every replay; rmcp must not resend a POST by itself.
                    .reinit_on_expired_session(false)
                    .custom_headers(custom);
                // Bounded SSE resumption: rmcp's default retries forever.
                let mut retry = ExponentialBackoff::default();
                retry.max_times = Some(3);
                retry.base_duration = Duration::from_millis(200);
                retry.max_delay = Some(Duration::from_secs(2));
                config.retry_config = Arc::new(retry);
                let transport =
                    StreamableHttpClientTransport::with_client(CorrelatingClient::new(), config);
                Ok(Arc::new(RmcpLink {
                    generation,
                    pending: Mutex::new(Some(Pending::Http(Box::new(transport)))),
                    lane: None,
                    handler: Mutex::new(Some(handler)),
                    peer: Mutex::new(None),
                    routes,
                    ct,
                    closed: closed_rx,
                    closed_tx: Mutex::new(Some(closed_tx)),
                    stop: None,
                    pid: None,
                    stderr_tail: Arc::new(Mutex::new(VecDeque::new())),
                }))
            }
        }
    }
}

enum Pending {
    /// rmcp's end of the stdio lane (see [`lane`]).
    Stdio(tokio::io::DuplexStream),
    Http(Box<StreamableHttpClientTransport<CorrelatingClient>>),
}

/// A live (or closing) generation.
struct RmcpLink {
    generation: u64,
    pending: Mutex<Option<Pending>>,
    /// stdio only: tool calls passed through as JSON text.
    lane: Option<Arc<lane::Lane>>,
    handler: Mutex<Option<Handler>>,
    peer: Mutex<Option<Peer<RoleClient>>>,
    routes: Arc<ProgressRoutes>,
    ct: CancellationToken,
    closed: watch::Receiver<bool>,
    /// HTTP only: set once the rmcp service has ended (or never started).
    closed_tx: Mutex<Option<watch::Sender<bool>>>,
    stop: Option<mpsc::UnboundedSender<process::Stop>>,
    pid: Option<u32>,
    stderr_tail: Arc<Mutex<VecDeque<String>>>,
}

impl RmcpLink {
    fn peer(&self) -> Result<Peer<RoleClient>, Failure> {
        self.peer
            .lock()
            .ok()
            .and_then(|p| p.clone())
            .ok_or(Failure::NoLiveGeneration)
    }

    fn watch_service(&self, service: RunningService<RoleClient, Handler>) {
        let stop = self.stop.clone();
        let closed_tx = self.closed_tx.lock().ok().and_then(|mut t| t.take());
        let generation = self.generation;
        tokio::spawn(async move {
            let reason = service.waiting().await;
            tracing::debug!(generation, ?reason, "rmcp client ended");
            // stdio: a closed stdout ends the generation even if the process lingers.
            if let Some(stop) = stop {
                let _ = stop.send(process::Stop::Kill);
            }
            if let Some(tx) = closed_tx {
                let _ = tx.send(true);
            }
        });
    }

    async fn send(
        &self,
        request: ClientRequest,
        timeout: Duration,
    ) -> Result<ServerResult, Failure> {
        let peer = self.peer()?;
        let handle = peer
            .send_request_with_option(request, PeerRequestOptions::with_timeout(timeout))
            .await
            .map_err(|e| normalize(&e, Phase::Sending))?;
        handle
            .await_response()
            .await
            .map_err(|e| normalize(&e, Phase::Awaiting))
    }
}

impl Link for RmcpLink {
    fn initialize(&self) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            let pending = self.pending.lock().ok().and_then(|mut p| p.take());
            let handler = self.handler.lock().ok().and_then(|mut h| h.take());
            let (Some(pending), Some(handler)) = (pending, handler) else {
                return Err("this generation was already initialized".into());
            };
            let served = match pending {
                Pending::Stdio(pipe) => serve_client_with_ct(handler, pipe, self.ct.clone()).await,
                Pending::Http(transport) => {
                    serve_client_with_ct(handler, *transport, self.ct.clone()).await
                }
            };
            let service = match served {
                Ok(service) => service,
                Err(error) => {
                    if let Some(tx) = self.closed_tx.lock().ok().and_then(|mut t| t.take()) {
                        let _ = tx.send(true);
                    }
                    return Err(format!("initialize failed: {error}"));
                }
            };
            let peer = service.peer().clone();
            // Our registry must be authoritative: never serve a stale cached list.
            peer.set_response_cache_config(ClientCacheConfig::disabled())
                .await;
            if let Ok(mut slot) = self.peer.lock() {
                *slot = Some(peer);
            }
            self.watch_service(service);
            Ok(())
        })
    }

    fn list_tools(&self, timeout: Duration) -> BoxFuture<'_, Result<Vec<Tool>, Failure>> {
        Box::pin(async move {
            let mut tools = Vec::new();
            let mut cursor = None;
            // Bounded: a server that keeps handing out cursors cannot keep us here forever.
            for _ in 0..10_000 {
                let params = PaginatedRequestParams::default().with_cursor(cursor);
                let request = ClientRequest::ListToolsRequest(ListToolsRequest::with_param(params));
                match self.send(request, timeout).await? {
                    ServerResult::ListToolsResult(page) => {
                        tools.extend(page.tools);
                        match page.next_cursor {
                            Some(next) => cursor = Some(next),
                            None => return Ok(tools),
                        }
                    }
                    _ => return Err(Failure::UnexpectedResponse),
                }
            }
            Err(Failure::TransportError {
                message: "tools/list returned more than 10000 pages".into(),
                connection_closed: false,
            })
        })
    }

    fn call_tool(
        &self,
        params: CallToolRequestParams,
        opts: CallOptions,
    ) -> BoxFuture<'_, Result<CallToolResult, Failure>> {
        Box::pin(async move {
            let peer = self.peer()?;
            let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
            let handle = peer
                .send_request_with_option(request, PeerRequestOptions::with_timeout(opts.timeout))
                .await
                .map_err(|e| normalize(&e, Phase::Sending))?;
            let token = handle.progress_token.clone();
            let id = handle.id.clone();
            let _route = opts
                .progress
                .map(|tx| self.routes.insert(token.clone(), tx));
            let mut guard = CancelOnDrop {
                peer: Some(peer.clone()),
                id: Some(id),
            };
            let outcome = tokio::select! {
                outcome = handle.await_response() => outcome,
                () = opts.cancel.cancelled() => {
                    guard.fire("cancelled by the caller");
                    return Err(Failure::CancelledByCaller);
                }
            };
            guard.disarm();
            match outcome.map_err(|e| normalize(&e, Phase::Awaiting))? {
                ServerResult::CallToolResult(result) => Ok(result),
                _ => Err(Failure::UnexpectedResponse),
            }
        })
    }

    fn call_tool_json<'a>(
        &'a self,
        params: &'a serde_json::value::RawValue,
        opts: CallOptions,
    ) -> BoxFuture<'a, Result<Box<serde_json::value::RawValue>, Failure>> {
        let Some(lane) = &self.lane else {
            return crate::link::call_tool_json_typed(self, params, opts);
        };
        // With progress: the request carries a token of the lane's own, and the server's
        // progress notifications, which reach rmcp's client, are routed by it to the caller.
        let progress = match opts.progress.clone() {
            None => None,
            Some(tx) => {
                let token = lane.progress_token();
                match lane::with_progress_token(params, &token) {
                    Some(params) => Some((params, self.routes.insert(token, tx))),
                    // Not an object: the typed way says what is wrong with it.
                    None => return crate::link::call_tool_json_typed(self, params, opts),
                }
            }
        };
        Box::pin(async move {
            if self.ct.is_cancelled() {
                return Err(Failure::NoLiveGeneration);
            }
            // The route lives as long as the call.
            let params = progress
                .as_ref()
                .map_or(params, |(with_token, _route)| with_token);
            lane.request("tools/call", params, &opts).await
        })
    }

    fn request(
        &self,
        request: ClientRequest,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<ServerResult, Failure>> {
        Box::pin(self.send(request, timeout))
    }

    fn ping(&self, timeout: Duration) -> BoxFuture<'_, Result<(), Failure>> {
        Box::pin(async move {
            let request = ClientRequest::PingRequest(PingRequest::default());
            self.send(request, timeout).await.map(|_| ())
        })
    }

    fn close(&self, how: CloseHow) {
        self.ct.cancel();
        if let Some(stop) = &self.stop {
            let _ = stop.send(match how {
                CloseHow::Graceful => process::Stop::Graceful,
                CloseHow::Kill => process::Stop::Kill,
            });
        }
        // An HTTP generation that never started its service has nothing left to wait for.
        if self.peer.lock().map(|p| p.is_none()).unwrap_or(false)
            && let Some(tx) = self.closed_tx.lock().ok().and_then(|mut t| t.take())
        {
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

    fn peer_info(&self) -> Option<rmcp::model::ServerPeerInfo> {
        self.peer()
            .ok()
            .and_then(|p| p.peer_info())
            .map(|info| (*info).clone())
    }
}

impl Drop for RmcpLink {
    fn drop(&mut self) {
        self.ct.cancel();
        if let Some(stop) = &self.stop {
            let _ = stop.send(process::Stop::Kill);
        }
    }
}

/// Sends `notifications/cancelled` if a call is abandoned before its answer.
struct CancelOnDrop {
    peer: Option<Peer<RoleClient>>,
    id: Option<rmcp::model::RequestId>,
}

impl CancelOnDrop {
    fn fire(&mut self, reason: &str) {
        if let (Some(peer), Some(id)) = (self.peer.take(), self.id.take()) {
            let reason = reason.to_string();
            tokio::spawn(async move {
                let _ = peer
                    .notify_cancelled(rmcp::model::CancelledNotificationParam::new(
                        Some(id),
                        Some(reason),
                    ))
                    .await;
            });
        }
    }

    fn disarm(&mut self) {
        self.peer = None;
        self.id = None;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.fire("the caller went away");
    }
}

/// Where the progress of each in-flight call goes, by progress token.
#[derive(Default)]
struct ProgressRoutes {
    routes: Mutex<HashMap<ProgressToken, mpsc::UnboundedSender<ProgressNotificationParam>>>,
}

impl ProgressRoutes {
    fn insert(
        self: &Arc<Self>,
        token: ProgressToken,
        tx: mpsc::UnboundedSender<ProgressNotificationParam>,
    ) -> RouteGuard {
        if let Ok(mut routes) = self.routes.lock() {
            routes.insert(token.clone(), tx);
        }
        RouteGuard {
            routes: self.clone(),
            token,
        }
    }

    fn route(&self, params: ProgressNotificationParam) {
        if let Ok(routes) = self.routes.lock()
            && let Some(tx) = routes.get(&params.progress_token)
        {
            let _ = tx.send(params);
        }
    }
}

struct RouteGuard {
    routes: Arc<ProgressRoutes>,
    token: ProgressToken,
}

impl Drop for RouteGuard {
    fn drop(&mut self) {
        if let Ok(mut routes) = self.routes.routes.lock() {
            routes.remove(&self.token);
        }
    }
}

/// rmcp's client-side handler for one generation: it forwards what the server says, tagged with
/// the generation.
struct Handler {
    events: LinkEvents,
    routes: Arc<ProgressRoutes>,
}

impl ClientHandler for Handler {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.events.send(LinkEvent::SignOfLife);
        self.routes.route(params);
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.events.send(LinkEvent::ToolListChanged);
    }

    #[allow(deprecated)] // logging is deprecated upstream (SEP-2577) but servers still send it
    async fn on_logging_message(
        &self,
        params: rmcp::model::LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.events.send(LinkEvent::SignOfLife);
        self.events.send(LinkEvent::Notification(Box::new(
            ServerNotification::LoggingMessageNotification(rmcp::model::Notification::new(params)),
        )));
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.events.send(LinkEvent::Notification(Box::new(
            ServerNotification::ResourceUpdatedNotification(rmcp::model::Notification::new(params)),
        )));
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.events.send(LinkEvent::Notification(Box::new(
            ServerNotification::ResourceListChangedNotification(Default::default()),
        )));
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.events.send(LinkEvent::Notification(Box::new(
            ServerNotification::PromptListChangedNotification(Default::default()),
        )));
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            Default::default(),
            rmcp::model::Implementation::new("mcp-supervisor", env!("CARGO_PKG_VERSION")),
        )
    }
}
