//! The library's front door: one handle for a set of servers. It owns their supervisors and the
//! registry, routes a call by public name to the right supervisor, reports status and events,
//! and applies a reload as a diff.
//!
//! It never touches a generation or a server's state itself: it asks the supervisor.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use mcp_supervisor_core::config::{Config, ServerConfig};
use rmcp::model::{CallToolResult, JsonObject, ProgressNotificationParam};
use serde_json::value::RawValue;
use tokio::sync::{broadcast, mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::error::{CallError, Error};
use crate::link::Connector;
use crate::registry::{PublishedTool, Registry, Route};
use crate::supervisor::{CallRequest, ServerEvent, ServerState, SupervisorHandle};
use crate::upstream::RmcpConnector;

/// Builds the connector for a server; tests swap in a fake.
pub type ConnectorFactory = Arc<dyn Fn(&ServerConfig) -> Arc<dyn Connector> + Send + Sync>;

/// What a caller passes with a tool call.
#[derive(Clone, Debug, Default)]
pub struct CallArgs {
    pub arguments: Option<JsonObject>,
    /// A deadline shorter than the server's `toolCallTimeoutMs`.
    pub timeout: Option<Duration>,
    pub progress: Option<mpsc::UnboundedSender<ProgressNotificationParam>>,
    pub cancel: Option<CancellationToken>,
}

/// One server as `status` shows it. Holds no secret.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerStatus {
    pub name: String,
    pub state: ServerState,
    pub generation: u64,
    pub attempts: u32,
    pub max_attempts: u32,
    pub restarts: u64,
    pub last_error: Option<String>,
    pub tools: usize,
    pub uptime_ms: Option<u64>,
    pub pid: Option<u32>,
    pub enabled: bool,
}

/// Something that happened in the hub.
#[derive(Clone, Debug)]
pub enum HubEvent {
    /// A server's state or generation changed.
    State {
        server: String,
        state: ServerState,
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
}

struct Inner {
    order: Vec<ServerConfig>,
    running: HashMap<String, Running>,
}

/// A supervised set of MCP servers.
pub struct Hub {
    registry: Arc<Registry>,
    inner: Mutex<Inner>,
    events: broadcast::Sender<HubEvent>,
    notifications: broadcast::Sender<ServerEvent>,
    factory: ConnectorFactory,
    background: Vec<JoinHandle<()>>,
}

impl Hub {
    /// Start supervising every enabled server of `config` over rmcp.
    pub fn start(config: Config) -> Self {
        Self::start_with(
            config,
            Arc::new(|server: &ServerConfig| {
                Arc::new(RmcpConnector::new(server.clone())) as Arc<dyn Connector>
            }),
        )
    }

    /// Start with a connector of the caller's (tests use a scripted fake).
    pub fn start_with(config: Config, factory: ConnectorFactory) -> Self {
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
        let hub = Self {
            registry,
            inner: Mutex::new(Inner {
                order: config.servers.clone(),
                running: HashMap::new(),
            }),
            events,
            notifications,
            factory,
            background,
        };
        for server in config.servers {
            if server.enabled {
                hub.spawn_server(server);
            }
        }
        hub
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn spawn_server(&self, server: ServerConfig) {
        let name = server.name.clone();
        let connector = (self.factory)(&server);
        let seed = jitter_seed(&name);
        let mut rng = fastrand::Rng::with_seed(seed);
        let (handle, join) = SupervisorHandle::spawn(
            server,
            connector,
            self.registry.clone(),
            self.notifications.clone(),
            Box::new(move || rng.f64()),
        );
        let forwarder = {
            let mut watch = handle.watch();
            let events = self.events.clone();
            let server = name.clone();
            tokio::spawn(async move {
                let mut last = None;
                loop {
                    let (state, generation) = {
                        let s = watch.borrow_and_update();
                        (s.state, s.generation)
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
        self.lock().running.insert(
            name,
            Running {
                handle,
                join,
                forwarder,
            },
        );
    }

    /// The aggregate tool list.
    pub fn tools(&self) -> Arc<Vec<PublishedTool>> {
        self.registry.tools()
    }

    /// The registry (read-only use: resolve names, watch changes).
    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// Events: state changes, tool-list changes, upstream notifications.
    pub fn subscribe(&self) -> broadcast::Receiver<HubEvent> {
        self.events.subscribe()
    }

    fn handle(&self, server: &str) -> Option<SupervisorHandle> {
        self.lock().running.get(server).map(|r| r.handle.clone())
    }

    /// Call a tool by its public name.
    pub async fn call(
        &self,
        public_name: &str,
        args: CallArgs,
    ) -> Result<CallToolResult, CallError> {
        let (tool, handle) = self.route(public_name)?;
        handle
            .call(CallRequest {
                tool: tool.upstream_name.clone(),
                arguments: args.arguments,
                timeout: args.timeout,
                progress: args.progress,
                cancel: args.cancel,
                safety: tool.safety,
            })
            .await
    }

    /// Where a public name goes, and its server's supervisor. a public name, and its server's supervisor.
    fn route(&self, public_name: &str) -> Result<(Route, SupervisorHandle), CallError> {
        let Some(tool) = self.registry.route(public_name) else {
            return Err(CallError::UnknownTool {
                name: public_name.to_string(),
            });
        };
        match self.handle(&tool.server) {
            Some(handle) => Ok((tool, handle)),
            None => Err(CallError::NotReady {
                server: tool.server,
                tool: tool.upstream_name,
                state: ServerState::Stopped.to_string(),
                last_error: None,
                next_attempt_in: None,
            }),
        }
    }

    /// Call a tool by its public name with the `tools/call` params as JSON text, and get its
    /// `result` back as JSON text: for a relay that passes calls through without building MCP
    /// types. Only `name` is rewritten (to the upstream name, when it differs); everything else
    /// in `params` goes upstream as it is. `args.arguments` is not used. Same rules, deadline
    /// and errors as [`Hub::call`].
    pub async fn call_json(
        &self,
        public_name: &str,
        params: &RawValue,
        args: CallArgs,
    ) -> Result<Box<RawValue>, CallError> {
        let (tool, handle) = self.route(public_name)?;
        let renamed;
        let params = if tool.upstream_name == public_name {
            params
        } else {
            renamed =
                with_name(params, &tool.upstream_name).map_err(|e| CallError::ServerError {
                    server: tool.server.clone(),
                    tool: tool.upstream_name.clone(),
                    code: -32602,
                    message: format!("the tools/call params are not a JSON object: {e}"),
                })?;
            &*renamed
        };
        let request = CallRequest {
            tool: tool.upstream_name.clone(),
            arguments: None,
            timeout: args.timeout,
            progress: args.progress,
            cancel: args.cancel,
            safety: tool.safety,
        };
        handle.call_json(&request, params).await
    }

    /// Call a tool by its upstream name on a named server (no registry lookup; `wrap` uses this
    /// for names the registry does not hold, so the server's own answer comes back).
    pub async fn call_on(
        &self,
        server: &str,
        tool: &str,
        args: CallArgs,
    ) -> Result<CallToolResult, Error> {
        let handle = self
            .handle(server)
            .ok_or_else(|| Error::UnknownServer(server.to_string()))?;
        let safety = self
            .registry
            .tools()
            .iter()
            .find(|t| t.server == server && t.upstream_name == tool)
            .map(|t| t.annotated_safety())
            .unwrap_or_default();
        Ok(handle
            .call(CallRequest {
                tool: tool.to_string(),
                arguments: args.arguments,
                timeout: args.timeout,
                progress: args.progress,
                cancel: args.cancel,
                safety,
            })
            .await?)
    }

    /// Send any other request (prompts, resources, completions, logging) to one server, with
    /// the same readiness wait and one safe resend.
    pub async fn request(
        &self,
        server: &str,
        request: rmcp::model::ClientRequest,
        timeout: Duration,
    ) -> Result<rmcp::model::ServerResult, Error> {
        let handle = self
            .handle(server)
            .ok_or_else(|| Error::UnknownServer(server.to_string()))?;
        Ok(handle.request(request, timeout).await?)
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

    /// Every configured server, in config order.
    pub fn status(&self) -> Vec<ServerStatus> {
        let inner = self.lock();
        inner
            .order
            .iter()
            .map(|server| {
                let tools = self.registry.count(&server.name);
                match inner.running.get(&server.name) {
                    Some(running) => {
                        let s = running.handle.snapshot();
                        ServerStatus {
                            name: server.name.clone(),
                            state: s.state,
                            generation: s.generation,
                            attempts: s.attempt,
                            max_attempts: s.max_attempts,
                            restarts: s.restarts,
                            last_error: s.last_error.clone(),
                            tools,
                            uptime_ms: s.ready_since.map(|t| {
                                Instant::now().saturating_duration_since(t).as_millis() as u64
                            }),
                            pid: s.pid,
                            enabled: true,
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
                    },
                }
            })
            .collect()
    }

    /// What a ready server said about itself at initialize.
    pub fn server_info(&self, server: &str) -> Option<rmcp::model::ServerPeerInfo> {
        self.handle(server).and_then(|h| h.peer_info())
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

    /// Wait until every enabled server is ready, or `timeout` passes. Returns the names of those
    /// that are not.
    pub async fn wait_ready(&self, timeout: Duration) -> Vec<String> {
        self.wait_all(timeout, |s| s.state == ServerState::Ready)
            .await
    }

    /// Wait until no server is still on its very first attempt (bounded by `timeout`), so that a
    /// client's first tools/list sees every server that can come up.
    pub async fn wait_started(&self, timeout: Duration) {
        self.wait_all(timeout, |s| s.state != ServerState::Connecting)
            .await;
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
    pub async fn reload(&self, config: Config) -> ReloadSummary {
        let mut summary = ReloadSummary::default();
        let (to_stop, to_start) = {
            let mut inner = self.lock();
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
        for running in to_stop {
            running.handle.stop().await;
            let _ = running.join.await;
            running.forwarder.abort();
        }
        self.registry
            .set_servers(config.servers.iter().map(|s| s.name.clone()).collect());
        for server in to_start {
            self.spawn_server(server);
        }
        summary.added.sort();
        summary.removed.sort();
        summary.changed.sort();
        summary.unchanged.sort();
        summary
    }

    /// Stop every server and wait until all are quiet: processes gone, tools withdrawn.
    pub async fn stop(&self) {
        let running: Vec<Running> = self.lock().running.drain().map(|(_, r)| r).collect();
        let stops = running.iter().map(|r| r.handle.stop());
        futures::future::join_all(stops).await;
        for r in running {
            let _ = r.join.await;
            r.forwarder.abort();
        }
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
    pub added: Vec<String>,
    pub removed: Vec<String>,
    pub changed: Vec<String>,
    pub unchanged: Vec<String>,
}

/// A per-server seed so that servers' jitter draws differ but runs are reproducible.
fn jitter_seed(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// `params` (a JSON object) with its `name` member set to `name`; the other members are copied
/// as text.
fn with_name(params: &RawValue, name: &str) -> Result<Box<RawValue>, serde_json::Error> {
    let mut members: std::collections::BTreeMap<String, &RawValue> =
        serde_json::from_str(params.get())?;
    let name = serde_json::value::to_raw_value(name)?;
    members.insert("name".to_string(), &name);
    serde_json::value::to_raw_value(&members)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn with_name_rewrites_only_the_name() {
        let params: Box<RawValue> = serde_json::from_str(
            r#"{"name":"fault__echo","arguments":{"message":"a\"b"},"_meta":{"k":[1,2]},"task":{}}"#,
        )
        .unwrap();
        let renamed = with_name(&params, "echo").unwrap();
        let value: serde_json::Value = serde_json::from_str(renamed.get()).unwrap();
        assert_eq!(
            value,
            serde_json::json!({"name":"echo","arguments":{"message":"a\"b"},"_meta":{"k":[1,2]},"task":{}})
        );
        // Escaped keys are keys too.
        let escaped: Box<RawValue> = serde_json::from_str(r#"{"n\u0061me":"x"}"#).unwrap();
        let renamed = with_name(&escaped, "y").unwrap();
        assert_eq!(renamed.get(), r#"{"name":"y"}"#);
        let not_object: Box<RawValue> = serde_json::from_str("[1]").unwrap();
        assert!(with_name(&not_object, "y").is_err());
    }
}
