//! The bridge for clients of protocol 2026-07-28 (no `initialize`: per-request metadata,
//! `server/discover`, `subscriptions/listen`): rmcp's `ServerHandler` over the hub, until the
//! HTTP face serves that era as messages too (the stdio face does: [`crate::stateless`]).
//! Clients with an `initialize` (every desktop host today) never reach it. It is typed, so lossy: it is the one place left where
//! the MCP model sits on the data path, and calls still take the hub's one call path.
//!
//! It never touches a supervisor or a generation: everything goes through the hub.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mcp_supervisor::core::naming::{NamingConfig, NamingMode, prefixed_name};
use mcp_supervisor::{CallArgs, CallError, Hub, HubEvent};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CompleteRequestParams, CompleteResult,
    ErrorCode, GetPromptRequestParams, GetPromptResponse, GetPromptResult, Implementation,
    ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult,
    PaginatedRequestParams, ProgressNotificationParam, Prompt, ReadResourceRequestParams,
    ReadResourceResponse, ReadResourceResult, Resource, ResourceTemplate, ResultType,
    ServerCapabilities, ServerConfig, ServerNotification, SubscribeRequestParams,
    UnsubscribeRequestParams,
};
use rmcp::service::{NotificationContext, Peer, RequestContext, SubscriptionContext};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// How long aggregate requests (lists, reads, prompts) may take per server.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// How long the first tools/list waits for servers still on their first attempt.
const STARTUP_WAIT: Duration = Duration::from_secs(10);

use crate::proxy::Mode;

/// Shared by every session of every face.
pub struct Bridge {
    hub: Arc<Hub>,
    mode: Mode,
    naming: NamingConfig,
    /// Downstream clients that get notifications.
    peers: Mutex<Vec<Peer<RoleServer>>>,
    metrics: Arc<crate::metrics::Metrics>,
    /// Tool calls waiting for their client's input (a server asked it something).
    rounds: crate::rounds::Rounds,
}

impl Bridge {
    pub fn new(
        hub: Arc<Hub>,
        mode: Mode,
        naming: NamingConfig,
        metrics: Arc<crate::metrics::Metrics>,
    ) -> Arc<Self> {
        let proxy = Arc::new(Self {
            hub,
            mode,
            naming,
            peers: Mutex::new(Vec::new()),
            metrics,
            rounds: crate::rounds::Rounds::default(),
        });
        tokio::spawn(forward_events(
            Arc::downgrade(&proxy),
            proxy.hub.subscribe(),
        ));
        proxy
    }

    /// A handler for one session.
    pub fn handler(self: &Arc<Self>) -> ProxyHandler {
        ProxyHandler {
            proxy: self.clone(),
        }
    }

    fn add_peer(&self, peer: Peer<RoleServer>) {
        let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        peers.retain(|p| !p.is_transport_closed());
        peers.push(peer);
    }

    fn peers(&self) -> Vec<Peer<RoleServer>> {
        let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        peers.retain(|p| !p.is_transport_closed());
        peers.clone()
    }

    /// The public name of an upstream prompt.
    fn prompt_name(&self, server: &str, prompt: &str) -> String {
        match self.mode {
            Mode::Transparent => prompt.to_string(),
            Mode::Aggregate => match self.naming.mode {
                NamingMode::Original => prompt.to_string(),
                NamingMode::Prefixed => prefixed_name(server, prompt, &self.naming.separator),
            },
        }
    }

    /// Every page of one kind of list from one server.
    async fn list_all(&self, server: &str, method: &str, field: &str) -> Vec<Value> {
        let args = CallArgs {
            timeout: Some(REQUEST_TIMEOUT),
            ..CallArgs::default()
        };
        self.hub.list_all(server, method, field, &args).await
    }

    /// Send one request, built from its method and params, to one server.
    async fn send(&self, server: &str, method: &str, params: Value) -> Result<Value, McpError> {
        let params = serde_json::value::to_raw_value(&params)
            .map_err(|e| McpError::internal_error(format!("cannot build {method}: {e}"), None))?;
        let args = CallArgs {
            timeout: Some(REQUEST_TIMEOUT),
            // A stateless server's input rounds reach this client whole.
            relays_input: true,
            ..CallArgs::default()
        };
        match self.hub.send(server, method, Some(&params), args).await {
            Ok(result) => serde_json::from_str(result.get()).map_err(|e| {
                McpError::internal_error(format!("cannot read {method} result: {e}"), None)
            }),
            Err(CallError::ServerError {
                code,
                message,
                data,
                ..
            }) => Err(McpError::new(
                ErrorCode(code),
                message,
                data.and_then(|d| serde_json::from_str(&d).ok()),
            )),
            Err(error) => Err(McpError::internal_error(error.to_string(), None)),
        }
    }

    /// Which server should answer for a resource URI (the hub's routes).
    fn owner_of(&self, uri: &str) -> Option<String> {
        self.hub.routes().resource_owner(uri, &self.hub.servers())
    }

    /// Find the server and upstream name of a public prompt name.
    async fn resolve_prompt(&self, public: &str) -> Option<(String, String)> {
        // Transparent: names are the server's own, and a name it does not list still goes
        // upstream, so the client gets the server's own answer.
        if self.mode == Mode::Transparent
            && let [server] = self.hub.servers().as_slice()
        {
            return Some((server.clone(), public.to_string()));
        }
        for server in self.hub.servers() {
            for prompt in self.list_all(&server, "prompts/list", "prompts").await {
                if let Some(name) = prompt.get("name").and_then(Value::as_str)
                    && self.prompt_name(&server, name) == public
                {
                    return Some((server, name.to_string()));
                }
            }
        }
        None
    }
}

/// Pass hub events down to every client: tool-list changes (only when the aggregate changed),
/// and upstream notifications.
async fn forward_events(
    proxy: std::sync::Weak<Bridge>,
    mut events: tokio::sync::broadcast::Receiver<HubEvent>,
) {
    loop {
        let event = match events.recv().await {
            Ok(event) => event,
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
        };
        let Some(proxy) = proxy.upgrade() else { return };
        for peer in proxy.peers() {
            let _ = match &event {
                HubEvent::ToolsChanged => peer.notify_tool_list_changed().await,
                HubEvent::Notification(n) => match typed_notification(n) {
                    Some(notification) => peer.send_notification(notification).await,
                    None => Ok(()),
                },
                HubEvent::State { .. } => Ok(()),
            };
        }
    }
}

/// One session's handler; cheap to clone (the HTTP face makes one per session).
#[derive(Clone)]
pub struct ProxyHandler {
    proxy: Arc<Bridge>,
}

fn as_mcp(error: serde_json::Error) -> McpError {
    McpError::internal_error(format!("malformed upstream answer: {error}"), None)
}

/// A result forwarded from upstream carries no `resultType` when the upstream session is
/// pre-2026-07-28; a 2026-07-28 client requires it. Stamp `"complete"` (rmcp strips it again
/// for legacy clients).
fn complete(result_type: &mut Option<ResultType>) {
    if result_type.is_none() {
        *result_type = Some(ResultType::COMPLETE);
    }
}

impl ServerHandler for ProxyHandler {
    #[allow(deprecated)] // logging capability: deprecated upstream, still used by clients
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .enable_prompts()
            .enable_prompts_list_changed()
            .enable_resources()
            .enable_resources_subscribe()
            .enable_resources_list_changed()
            .enable_completions()
            .enable_logging()
            .build();
        let mut info = ServerConfig::new(capabilities);
        // Transparent: the client sees the server's own name, version, capabilities and
        // instructions (tools always announce list_changed: we withdraw them on giving up).
        if self.proxy.mode == Mode::Transparent
            && let [server] = self.proxy.hub.servers().as_slice()
            && let Some(upstream) = self.proxy.hub.server_info(server).and_then(|raw| {
                serde_json::from_str::<rmcp::model::InitializeResult>(raw.get()).ok()
            })
        {
            let mut capabilities = upstream.capabilities.clone();
            let mut tools = capabilities.tools.clone().unwrap_or_default();
            tools.list_changed = Some(true);
            capabilities.tools = Some(tools);
            info.capabilities = capabilities;
            info.server_info = upstream.server_info.clone();
            info.instructions = upstream.instructions.clone();
            return info;
        }
        info.server_info = Implementation::new("mcp-supervisor", env!("CARGO_PKG_VERSION"));
        info.instructions = Some(
            "mcp-supervisor fronts supervised MCP servers: their tools keep working across crashes and restarts.".into(),
        );
        info
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        self.proxy.add_peer(context.peer);
    }

    fn accepted_subscription_filter(
        &self,
        requested: &rmcp::model::SubscriptionFilter,
    ) -> Option<rmcp::model::SubscriptionFilter> {
        Some(requested.supported_by(&self.get_info().capabilities))
    }

    /// Protocol 2026-07-28: change notifications flow on the client's `subscriptions/listen`.
    async fn listen(&self, context: SubscriptionContext) -> Result<(), McpError> {
        let mut events = self.proxy.hub.subscribe();
        loop {
            let event = tokio::select! {
                () = context.cancelled() => return Ok(()),
                event = events.recv() => event,
            };
            let notification = match event {
                Ok(HubEvent::ToolsChanged) => {
                    ServerNotification::ToolListChangedNotification(Default::default())
                }
                Ok(HubEvent::Notification(event)) => match typed_notification(&event) {
                    Some(
                        n @ (ServerNotification::ResourceUpdatedNotification(_)
                        | ServerNotification::ResourceListChangedNotification(_)
                        | ServerNotification::PromptListChangedNotification(_)),
                    ) => n,
                    _ => continue,
                },
                Ok(HubEvent::State { .. })
                | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return Ok(()),
            };
            match context.sink().send(notification).await {
                Ok(()) | Err(rmcp::service::SubscriptionSendError::NotificationNotAccepted(_)) => {}
                Err(_) => return Ok(()),
            }
        }
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        // Not registered as a peer here: a legacy client is registered once by `initialized`
        // (registering it again per list sent it one copy of every notification per list), and
        // a 2026-07-28 client gets its notifications on `subscriptions/listen` only.
        // A client that lists right after starting us sees every server that comes up (a
        // server with a saved catalog has its list already).
        self.proxy.hub.wait_listed(STARTUP_WAIT).await;
        let tools = self
            .proxy
            .hub
            .tools()
            .iter()
            .filter_map(|t| t.tool().ok())
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let rounds = &self.proxy.rounds;
        // A retry that answers the server's requests of an earlier round of ours. A state we
        // did not make is the server's own (a server of this era asked): the retry goes to it.
        if let (Some(responses), Some(state)) = (
            request.input_responses.clone(),
            request.request_state.clone(),
        ) && let Some(step) = rounds.resume(&state, responses).await
        {
            return self.step(step, &request.name);
        }
        let cancel = CancellationToken::new();
        let cancel_guard = cancel.clone();
        let ct = context.ct.clone();
        let watcher = tokio::spawn(async move {
            ct.cancelled().await;
            cancel_guard.cancel();
        });
        // The call goes as JSON text; the client's progress token rides in `_meta` and its
        // progress comes back to this client.
        let token = context.meta.get_progress_token();
        let mut params = serde_json::Map::new();
        params.insert("name".into(), Value::String(request.name.to_string()));
        if let Some(arguments) = &request.arguments {
            params.insert("arguments".into(), Value::Object(arguments.clone()));
        }
        // The client's own `_meta` (its progress token, and its identity and capabilities for
        // a server of this era, which judges each request by them) goes on as it came.
        let meta = serde_json::to_value(&context.meta).map_err(as_mcp)?;
        if meta.as_object().is_some_and(|m| !m.is_empty()) {
            params.insert("_meta".into(), meta);
        }
        // A retry of a stateless server's own input round carries its answers and state on.
        if let Some(responses) = &request.input_responses {
            params.insert(
                "inputResponses".into(),
                serde_json::to_value(responses).map_err(as_mcp)?,
            );
        }
        if let Some(state) = &request.request_state {
            params.insert("requestState".into(), Value::String(state.clone()));
        }
        let params = serde_json::value::to_raw_value(&params).map_err(as_mcp)?;
        let progress: Option<crate::rounds::Notify> = token.map(|_| {
            let peer = context.peer.clone();
            Arc::new(
                move |method: &str, params: Option<Box<serde_json::value::RawValue>>| {
                    if method != "notifications/progress" {
                        return;
                    }
                    let Some(update) = params.and_then(|p| {
                        serde_json::from_str::<ProgressNotificationParam>(p.get()).ok()
                    }) else {
                        return;
                    };
                    let peer = peer.clone();
                    tokio::spawn(async move {
                        let _ = peer.notify_progress(update).await;
                    });
                },
            )
                as Arc<dyn Fn(&str, Option<Box<serde_json::value::RawValue>>) + Send + Sync>
        });
        let hub = self.proxy.hub.clone();
        let mode = self.proxy.mode;
        let name = request.name.to_string();
        let step = rounds
            .start(
                move |origin| {
                    Box::pin(async move {
                        let args = CallArgs {
                            cancel: Some(cancel),
                            origin: Some(origin),
                            // A stateless server's input rounds reach this client whole.
                            relays_input: true,
                            ..CallArgs::default()
                        };
                        match hub.call_json(&name, &params, args.clone()).await {
                            Err(CallError::UnknownTool { name }) => {
                                match (mode, hub.servers().as_slice()) {
                                    // Transparent: the server's own answer to a name we do not know.
                                    (Mode::Transparent, [server]) => {
                                        hub.send(server, "tools/call", Some(&params), args).await
                                    }
                                    _ => Err(CallError::UnknownTool { name }),
                                }
                            }
                            other => other,
                        }
                    })
                },
                progress,
            )
            .await;
        // A call waiting for input lives on past this request.
        watcher.abort();
        self.step(step, &request.name)
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        let mut prompts = Vec::new();
        for server in self.proxy.hub.servers() {
            for mut prompt in self
                .proxy
                .list_all(&server, "prompts/list", "prompts")
                .await
            {
                if let Some(name) = prompt
                    .get("name")
                    .and_then(Value::as_str)
                    .map(str::to_string)
                {
                    prompt["name"] = Value::String(self.proxy.prompt_name(&server, &name));
                }
                prompts.push(serde_json::from_value::<Prompt>(prompt).map_err(as_mcp)?);
            }
        }
        Ok(ListPromptsResult::with_all_items(prompts))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        let Some((server, name)) = self.proxy.resolve_prompt(&request.name).await else {
            return Err(McpError::invalid_params(
                format!("no server offers a prompt named \"{}\"", request.name),
                None,
            ));
        };
        let mut params = serde_json::to_value(&request).map_err(as_mcp)?;
        params["name"] = Value::String(name);
        let result = self.proxy.send(&server, "prompts/get", params).await?;
        if result.get("resultType").and_then(Value::as_str) == Some("input_required") {
            return serde_json::from_value::<rmcp::model::InputRequiredResult>(result)
                .map(GetPromptResponse::InputRequired)
                .map_err(as_mcp);
        }
        let mut result = serde_json::from_value::<GetPromptResult>(result).map_err(as_mcp)?;
        complete(&mut result.result_type);
        Ok(result.into())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        let mut resources = Vec::new();
        let mut owners = HashMap::new();
        for server in self.proxy.hub.servers() {
            for resource in self
                .proxy
                .list_all(&server, "resources/list", "resources")
                .await
            {
                if let Some(uri) = resource.get("uri").and_then(Value::as_str) {
                    owners
                        .entry(uri.to_string())
                        .or_insert_with(|| server.clone());
                }
                resources.push(serde_json::from_value::<Resource>(resource).map_err(as_mcp)?);
            }
        }
        self.proxy.hub.routes().learn_resources(owners);
        Ok(ListResourcesResult::with_all_items(resources))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        let mut templates = Vec::new();
        let mut owners = Vec::new();
        for server in self.proxy.hub.servers() {
            for template in self
                .proxy
                .list_all(&server, "resources/templates/list", "resourceTemplates")
                .await
            {
                if let Some(uri) = template.get("uriTemplate").and_then(Value::as_str) {
                    owners.push((uri.to_string(), server.clone()));
                }
                templates
                    .push(serde_json::from_value::<ResourceTemplate>(template).map_err(as_mcp)?);
            }
        }
        self.proxy.hub.routes().learn_templates(owners);
        Ok(ListResourceTemplatesResult::with_all_items(templates))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let server = self.owner_for(&request.uri).await?;
        let params = serde_json::to_value(&request).map_err(as_mcp)?;
        let result = self.proxy.send(&server, "resources/read", params).await?;
        let mut result = serde_json::from_value::<ReadResourceResult>(result).map_err(as_mcp)?;
        complete(&mut result.result_type);
        Ok(result.into())
    }

    #[allow(deprecated)] // legacy subscriptions are what 2025-era clients send
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let server = self.owner_for(&request.uri).await?;
        let params = serde_json::to_value(&request).map_err(as_mcp)?;
        self.proxy
            .send(&server, "resources/subscribe", params)
            .await
            .map(|_| ())
    }

    #[allow(deprecated)]
    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let server = self.owner_for(&request.uri).await?;
        let params = serde_json::to_value(&request).map_err(as_mcp)?;
        self.proxy
            .send(&server, "resources/unsubscribe", params)
            .await
            .map(|_| ())
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, McpError> {
        let mut params = serde_json::to_value(&request).map_err(as_mcp)?;
        let server = match params["ref"]["type"].as_str() {
            Some("ref/prompt") => {
                let public = params["ref"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                let Some((server, name)) = self.proxy.resolve_prompt(&public).await else {
                    return Err(McpError::invalid_params(
                        format!("no server offers a prompt named \"{public}\""),
                        None,
                    ));
                };
                params["ref"]["name"] = Value::String(name);
                server
            }
            _ => {
                let uri = params["ref"]["uri"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                self.owner_for(&uri).await?
            }
        };
        let result = self
            .proxy
            .send(&server, "completion/complete", params)
            .await?;
        let mut result = serde_json::from_value::<CompleteResult>(result).map_err(as_mcp)?;
        complete(&mut result.result_type);
        Ok(result)
    }

    #[allow(deprecated)]
    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let params = serde_json::to_value(&request).map_err(as_mcp)?;
        for server in self.proxy.hub.servers() {
            // A server without logging answers "method not found"; the others take the level.
            let _ = self
                .proxy
                .send(&server, "logging/setLevel", params.clone())
                .await;
        }
        Ok(())
    }
}

impl ProxyHandler {
    /// A round's outcome as the client's answer: the result, or the server's requests as an
    /// input-required result.
    fn step(&self, step: crate::rounds::Step, tool: &str) -> Result<CallToolResponse, McpError> {
        use crate::rounds::Step;
        let outcome = match step {
            Step::Input { requests, state } => {
                let mut asks = rmcp::model::InputRequests::new();
                for (key, method, params) in requests {
                    let message = json!({
                        "method": method,
                        "params": params.as_deref().map(|p| serde_json::from_str::<Value>(p.get()).unwrap_or(Value::Null)),
                    });
                    match serde_json::from_value::<rmcp::model::InputRequest>(message) {
                        Ok(ask) => {
                            asks.insert(key, ask);
                        }
                        Err(error) => {
                            tracing::warn!(
                                tool,
                                "a server's request cannot be carried in an input round: {error}"
                            );
                        }
                    }
                }
                return Ok(CallToolResponse::InputRequired(
                    rmcp::model::InputRequiredResult::new(Some(asks), Some(state)),
                ));
            }
            // A stateless server's own input round, whole (its keys and its state).
            Step::Done(Ok(raw)) if mcp_supervisor::link::is_input_required(&raw) => {
                return serde_json::from_str::<rmcp::model::InputRequiredResult>(raw.get())
                    .map(CallToolResponse::InputRequired)
                    .map_err(|e| {
                        McpError::internal_error(
                            format!(
                                "the server's input-required result of \"{tool}\" is not valid: {e}"
                            ),
                            None,
                        )
                    });
            }
            Step::Done(outcome) => outcome.and_then(|raw| {
                serde_json::from_str::<CallToolResult>(raw.get()).map_err(|e| {
                    CallError::Malformed {
                        server: String::new(),
                        tool: tool.to_string(),
                        detail: e.to_string(),
                    }
                })
            }),
        };
        self.proxy.metrics.record(
            crate::metrics::outcome_of(&outcome),
            std::time::Duration::ZERO,
        );
        match outcome {
            Ok(mut result) => {
                complete(&mut result.result_type);
                Ok(result.into())
            }
            Err(CallError::ServerError {
                code,
                message,
                data,
                ..
            }) => Err(McpError::new(
                ErrorCode(code),
                message,
                data.and_then(|d| serde_json::from_str(&d).ok()),
            )),
            Err(CallError::UnknownTool { name }) => Err(McpError::invalid_params(
                format!(
                    "no server offers a tool named \"{name}\"; list the tools to see what is published"
                ),
                None,
            )),
            Err(error) => Ok(CallToolResult::error(vec![rmcp::model::ContentBlock::text(
                error.to_string(),
            )])
            .into()),
        }
    }

    /// The server that owns `uri`, listing resources first if it is not known yet.
    async fn owner_for(&self, uri: &str) -> Result<String, McpError> {
        if let Some(server) = self.proxy.owner_of(uri) {
            return Ok(server);
        }
        for server in self.proxy.hub.servers() {
            for resource in self
                .proxy
                .list_all(&server, "resources/list", "resources")
                .await
            {
                if resource.get("uri").and_then(Value::as_str) == Some(uri) {
                    self.proxy
                        .hub
                        .routes()
                        .learn_resources([(uri.to_string(), server.clone())]);
                    return Ok(server);
                }
            }
        }
        Err(McpError::resource_not_found(
            format!("no server lists the resource \"{uri}\""),
            None,
        ))
    }
}

/// A server's notification in rmcp's model, for a client on rmcp's face.
fn typed_notification(
    event: &mcp_supervisor::supervisor::ServerEvent,
) -> Option<ServerNotification> {
    let message = json!({
        "method": event.method,
        "params": event.params.as_deref().map(|p| serde_json::from_str::<Value>(p.get()).unwrap_or(Value::Null)),
    });
    serde_json::from_value(message).ok()
}
