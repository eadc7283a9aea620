//! The MCP handler: a hand-written [`ServerHandler`] with a static tool table (built-ins plus
//! `--tools N` extras) and a dynamic set that `set_tools` replaces at run time.

use std::{
    borrow::Cow,
    collections::HashMap,
    fs::OpenOptions,
    io::Write,
    path::{Path, PathBuf},
    sync::{Arc, Mutex, MutexGuard},
    time::{Duration, Instant},
};

use rmcp::{
    ErrorData as McpError, Peer, RoleServer, ServerHandler,
    handler::server::{
        common::{schema_for_empty_input, schema_for_input},
        tool::parse_json_object,
    },
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ClientResult,
        CompleteRequestMethod, CompleteRequestParams, CompleteResult, ContentBlock, ElicitRequest,
        ElicitRequestParams, GetPromptRequestParams, GetPromptResponse, GetPromptResult,
        Implementation, JsonObject, ListPromptsResult, ListResourceTemplatesResult,
        ListResourcesResult, ListToolsResult, PaginatedRequestParams, PingRequestMethod,
        ProgressNotificationParam, Prompt, PromptArgument, PromptMessage,
        ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, Resource,
        ResourceContents, ResourceTemplate, Role, ServerCapabilities, ServerConfig, ServerRequest,
        SetLevelRequestMethod, SubscribeRequestMethod, SubscribeRequestParams, SubscriptionFilter,
        Tool, ToolAnnotations, UnsubscribeRequestMethod, UnsubscribeRequestParams,
    },
    service::{NotificationContext, RequestContext, SubscriptionContext},
    transport::streamable_http_server::session::local::LocalSessionManager,
};
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::conformance::{self, Fixtures};

/// Name announced in `serverInfo`.
pub const SERVER_NAME: &str = "mcp-fault-server";
/// Exit code of `crash` and of `count {crash_before_reply: true}`.
pub const CRASH_EXIT_CODE: i32 = 7;
/// URI of the static status resource.
const STATUS_URI: &str = "fault://status";
/// The ledger line a cancelled `hang` appends.
pub const HANG_CANCELLED: &str = "hang cancelled";

/// Prefix of the ledger resource template `fault://ledger/{name}`.
const LEDGER_URI_PREFIX: &str = "fault://ledger/";

/// How the process talks to its client; some tools only make sense on one of them.
pub enum Mode {
    /// stdio: `garbage` pushes raw lines into the single stdout writer through this channel;
    /// `stdin_closed` is cancelled at end of stdin, which ends `hang`, `garbage` and `sleep` at
    /// once (rmcp would otherwise wait 5 s for them before it lets the process exit).
    Stdio {
        raw_stdout: mpsc::UnboundedSender<Vec<u8>>,
        stdin_closed: CancellationToken,
    },
    /// Streamable HTTP: `drop_sessions` empties this session manager.
    Http { sessions: Arc<LocalSessionManager> },
}

/// Options of the handler that come from the command line.
pub struct Options {
    pub ledger: Option<PathBuf>,
    pub extra_tools: usize,
    pub no_ping: bool,
    pub page_size: usize,
    /// Serve the conformance suite's fixtures too (`--conformance`).
    pub conformance: bool,
    /// The first word of `greet`'s answer (`--greeting`), telling servers apart.
    pub greeting: String,
    /// Serve the probe tools too (`--probes`).
    pub probes: bool,
}

/// What a static tool does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Add,
    Echo,
    Crash,
    Hang,
    Sleep,
    Count,
    CountIdempotent,
    SetTools,
    DropSessions,
    Block,
    Garbage,
    Pid,
    /// Reply with the client's `initialize` params as this process saw them.
    Whoami,
    /// Ask the client for its roots (`roots/list`) and reply with what it answered.
    Roots,
    Elicit,
    /// Reply with this request's `_meta` as JSON text (what a proxy carried upstream).
    Meta,
    /// One of the `--tools N` extras: echoes its arguments.
    Extra,
    /// A fixture of the conformance suite (`--conformance`).
    Conformance,
    /// Send many log notifications, then answer.
    Flood,
    /// A probe tool (`--probes`): what a sandbox lets it do.
    Probe,
}

/// State shared by every handler instance (one per HTTP session, or the stdio one).
pub struct Shared {
    mode: Mode,
    options: Options,
    static_tools: Vec<Tool>,
    kinds: HashMap<String, Kind>,
    dynamic: Mutex<Vec<Tool>>,
    /// Bumped on every `set_tools`; `subscriptions/listen` streams (protocol 2026-07-28) watch it.
    tools_version: watch::Sender<u64>,
    /// Peers that completed the legacy `initialize` handshake; they get `list_changed` directly.
    legacy_peers: Mutex<Vec<Peer<RoleServer>>>,
    started: Instant,
    /// The conformance suite's fixtures, with `--conformance`.
    fixtures: Option<Fixtures>,
}

/// A lock that a panic elsewhere does not poison for good.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[derive(Deserialize, JsonSchema)]
struct AddArgs {
    /// First addend.
    a: f64,
    /// Second addend.
    b: f64,
}

#[derive(Deserialize, JsonSchema)]
struct EchoArgs {
    /// Text to send back.
    message: String,
}

#[derive(Deserialize, JsonSchema)]
struct ElicitArgs {
    /// What to ask the client's user.
    message: String,
}

#[derive(Deserialize, JsonSchema)]
struct SleepArgs {
    /// How long to sleep, in milliseconds.
    ms: u64,
}

#[derive(Deserialize, JsonSchema)]
struct FloodArgs {
    /// How many `notifications/progress` to send before answering.
    count: u64,
    /// About how many bytes each one carries.
    bytes: usize,
}

#[derive(Deserialize, JsonSchema)]
struct BlockArgs {
    /// How long to block the whole event loop, in milliseconds.
    ms: u64,
}

#[derive(Deserialize, JsonSchema)]
struct CountArgs {
    /// Line appended to the ledger (must not contain a newline).
    id: String,
    /// Write the ledger line, then exit with code 7 without replying (only on the first run of
    /// this id: a replay of the same call then succeeds).
    #[serde(default)]
    crash_before_reply: bool,
    /// Write the ledger line, then answer with a JSON-RPC error carrying this message (a tool that
    /// did its work and then says something, e.g. about sessions of its own).
    #[serde(default)]
    fail_with: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
struct SetToolsArgs {
    /// Names of the dynamic tools; they replace the previous dynamic set.
    tools: Vec<String>,
    /// The description every one of them gets (default: one that says what they are).
    #[serde(default)]
    description: Option<String>,
}

fn schema<T: JsonSchema + 'static>() -> Arc<JsonObject> {
    // The argument types above all derive an object schema; fall back to an open object anyway.
    schema_for_input::<T>().unwrap_or_else(|_| open_schema())
}

fn open_schema() -> Arc<JsonObject> {
    let mut object = JsonObject::new();
    object.insert("type".into(), serde_json::json!("object"));
    object.insert("additionalProperties".into(), serde_json::json!(true));
    Arc::new(object)
}

fn builtin_tools() -> Vec<(Kind, Tool)> {
    let read_only = ToolAnnotations::new().read_only(true);
    vec![
        (
            Kind::Add,
            Tool::new(
                "add",
                "Add two numbers; replies with the sum as text.",
                schema::<AddArgs>(),
            )
            .annotate(read_only.clone()),
        ),
        (
            Kind::Echo,
            Tool::new(
                "echo",
                "Reply with the message, unchanged.",
                schema::<EchoArgs>(),
            )
            .annotate(read_only.clone()),
        ),
        (
            Kind::Crash,
            Tool::new(
                "crash",
                "Reply \"crashing\", then exit the process with code 7 after 25 ms.",
                schema_for_empty_input(),
            ),
        ),
        (
            Kind::Hang,
            Tool::new(
                "hang",
                "Never answer (until cancelled; with --ledger, a cancellation appends \"hang cancelled\").",
                schema_for_empty_input(),
            ),
        ),
        (
            Kind::Sleep,
            Tool::new(
                "sleep",
                "Sleep ms milliseconds, sending progress every 100 ms when asked; reply \"slept N ms\".",
                schema::<SleepArgs>(),
            ),
        ),
        (
            Kind::Count,
            Tool::new(
                "count",
                "Append id to the ledger file (not idempotent); reply with the id.",
                schema::<CountArgs>(),
            )
            .annotate(ToolAnnotations::new().read_only(false).idempotent(false)),
        ),
        (
            Kind::CountIdempotent,
            Tool::new(
                "count_idempotent",
                "Append id to the ledger file (declared idempotent); reply with the id.",
                schema::<CountArgs>(),
            )
            .annotate(ToolAnnotations::new().read_only(false).idempotent(true)),
        ),
        (
            Kind::SetTools,
            Tool::new(
                "set_tools",
                "Replace the dynamic tools (each echoes its arguments) and send tools/list_changed.",
                schema::<SetToolsArgs>(),
            ),
        ),
        (
            Kind::DropSessions,
            Tool::new(
                "drop_sessions",
                "HTTP only: reply, then forget every session (old Mcp-Session-Id gets 404).",
                schema_for_empty_input(),
            ),
        ),
        (
            Kind::Block,
            Tool::new(
                "block",
                "Block the whole event loop for ms milliseconds (not even ping is answered), then reply.",
                schema::<BlockArgs>(),
            ),
        ),
        (
            Kind::Garbage,
            Tool::new(
                "garbage",
                "stdio only: write a non-JSON line to stdout and never reply.",
                schema_for_empty_input(),
            ),
        ),
        (
            Kind::Pid,
            Tool::new(
                "pid",
                "Reply with the server's process id (structured: pid and this request's JSON-RPC id).",
                schema_for_empty_input(),
            ),
        ),
        (
            Kind::Flood,
            Tool::new(
                "flood",
                "Send count progress notifications (the call needs a progressToken) carrying a message of bytes bytes each, as fast as they go out, then reply \"sent N\" (with --ledger, after appending \"flood N\").",
                schema::<FloodArgs>(),
            ),
        ),
        (
            Kind::Whoami,
            Tool::new(
                "whoami",
                "Reply with the client's initialize params as this process saw them (structured: pid, protocolVersion, clientInfo, capabilities).",
                schema_for_empty_input(),
            )
            .annotate(read_only.clone()),
        ),
        (
            Kind::Meta,
            Tool::new(
                "meta",
                "Reply with this request's _meta as JSON text (e.g. the traceparent a proxy carried).",
                schema_for_empty_input(),
            )
            .annotate(read_only.clone()),
        ),
        (
            Kind::Roots,
            Tool::new(
                "roots",
                "Ask the client for its roots (roots/list) and reply with its answer (structured), or the error it gave as a tool error.",
                schema_for_empty_input(),
            )
            .annotate(read_only.clone()),
        ),
        (
            Kind::Elicit,
            Tool::new(
                "elicit",
                "Ask the client (elicitation/create, a form with one string `answer`) and reply with its answer as JSON text.",
                schema::<ElicitArgs>(),
            ),
        ),
    ]
}

fn echo_tool(name: String, description: String) -> Tool {
    Tool::new(name, description, open_schema())
}

/// Name of extra tool `k` (1-based) of `--tools N`: `tool_0001` ….
pub fn extra_tool_name(k: usize) -> String {
    format!("tool_{k:04}")
}

fn text(text: impl Into<String>) -> Result<CallToolResponse, McpError> {
    Ok(CallToolResult::success(vec![ContentBlock::text(text)]).into())
}

fn tool_error(text: impl Into<String>) -> Result<CallToolResponse, McpError> {
    Ok(CallToolResult::error(vec![ContentBlock::text(text)]).into())
}

fn args<T: serde::de::DeserializeOwned>(arguments: Option<JsonObject>) -> Result<T, McpError> {
    parse_json_object(arguments.unwrap_or_default())
}

fn exit_soon(code: i32, after: Duration) {
    tokio::spawn(async move {
        tokio::time::sleep(after).await;
        tracing::info!(code, "exiting as asked");
        std::process::exit(code);
    });
}

fn append_line(path: &Path, id: &str) -> std::io::Result<()> {
    let mut file = OpenOptions::new().create(true).append(true).open(path)?;
    file.write_all(format!("{id}\n").as_bytes())?;
    file.flush()?;
    file.sync_all()
}

impl Shared {
    pub fn new(mode: Mode, options: Options) -> Arc<Self> {
        let mut static_tools = Vec::new();
        let mut kinds = HashMap::new();
        for (kind, tool) in builtin_tools() {
            kinds.insert(tool.name.to_string(), kind);
            static_tools.push(tool);
        }
        for k in 1..=options.extra_tools {
            let name = extra_tool_name(k);
            kinds.insert(name.clone(), Kind::Extra);
            static_tools.push(echo_tool(
                name,
                format!(
                    "Extra tool {k} of {}; echoes its arguments.",
                    options.extra_tools
                ),
            ));
        }
        if options.probes {
            let schema = |args: &str| match args {
                "path" => schema::<crate::probes::PathArgs>(),
                "port" => schema::<crate::probes::PortArgs>(),
                _ => schema::<crate::probes::NameArgs>(),
            };
            for tool in crate::probes::tools(schema) {
                kinds.insert(tool.name.to_string(), Kind::Probe);
                static_tools.push(tool);
            }
        }
        if options.conformance {
            for tool in conformance::tools() {
                kinds.insert(tool.name.to_string(), Kind::Conformance);
                static_tools.push(tool);
            }
        }
        let fixtures = options.conformance.then(Fixtures::new);
        let (tools_version, _) = watch::channel(0);
        Arc::new(Self {
            mode,
            options,
            static_tools,
            kinds,
            dynamic: Mutex::new(Vec::new()),
            tools_version,
            legacy_peers: Mutex::new(Vec::new()),
            started: Instant::now(),
            fixtures,
        })
    }

    fn all_tools(&self) -> Vec<Tool> {
        let mut tools = self.static_tools.clone();
        tools.extend(lock(&self.dynamic).iter().cloned());
        tools
    }

    /// Resolves when the call should give up: cancelled by the client, or stdin is closed.
    async fn abandoned(&self, context: &RequestContext<RoleServer>) {
        match &self.mode {
            Mode::Stdio { stdin_closed, .. } => tokio::select! {
                () = context.ct.cancelled() => {}
                () = stdin_closed.cancelled() => {}
            },
            Mode::Http { .. } => context.ct.cancelled().await,
        }
    }

    fn is_dynamic(&self, name: &str) -> bool {
        lock(&self.dynamic).iter().any(|tool| tool.name == name)
    }
}

/// The handler. Cheap to clone: the HTTP service makes one per session (and per request).
#[derive(Clone)]
pub struct FaultServer {
    shared: Arc<Shared>,
}

impl FaultServer {
    pub fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }

    fn write_ledger(&self, arguments: Option<JsonObject>) -> Result<CallToolResponse, McpError> {
        let CountArgs {
            id,
            crash_before_reply,
            fail_with,
        } = args(arguments)?;
        let Some(path) = &self.shared.options.ledger else {
            return tool_error("no ledger: start mcp-fault-server with --ledger PATH");
        };
        if id.contains(['\n', '\r']) {
            return tool_error("id must not contain a line break");
        }
        // `crash_before_reply` crashes on the first run of an id only, so that a replay of the
        // same call (by a client that may replay it) then succeeds.
        let seen_before = std::fs::read_to_string(path)
            .map(|ledger| ledger.lines().any(|line| line == id))
            .unwrap_or(false);
        if let Err(error) = append_line(path, &id) {
            return tool_error(format!(
                "cannot append to ledger {}: {error}",
                path.display()
            ));
        }
        if crash_before_reply && !seen_before {
            tracing::info!(%id, "ledger written; crashing before the reply");
            std::process::exit(CRASH_EXIT_CODE);
        }
        if let Some(message) = fail_with {
            return Err(McpError::internal_error(message, None));
        }
        text(id)
    }

    async fn sleep(
        &self,
        arguments: Option<JsonObject>,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let SleepArgs { ms } = args(arguments)?;
        let token = context.meta.get_progress_token();
        let start = tokio::time::Instant::now();
        // A huge ms would overflow the clock: sleep "forever" (30 years) instead.
        let deadline = start
            .checked_add(Duration::from_millis(ms))
            .unwrap_or_else(|| start + Duration::from_secs(30 * 365 * 86_400));
        let mut tick = tokio::time::interval_at(
            start + Duration::from_millis(100),
            Duration::from_millis(100),
        );
        // A late tick is not made up for in a burst: progress only ever increases (a burst
        // once the sleep was nearly over sent the capped value twice).
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let mut sent = None;
        loop {
            tokio::select! {
                () = tokio::time::sleep_until(deadline) => break,
                () = self.shared.abandoned(context) => {
                    return Err(McpError::internal_error("sleep cancelled", None));
                }
                _ = tick.tick(), if token.is_some() => {
                    if let Some(token) = &token {
                        let done = u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX).min(ms);
                        if sent.is_some_and(|last| done <= last) {
                            continue;
                        }
                        sent = Some(done);
                        let param = ProgressNotificationParam::new(token.clone(), done as f64)
                            .with_total(ms as f64)
                            .with_message(format!("slept {done} of {ms} ms"));
                        if let Err(error) = context.peer.notify_progress(param).await {
                            tracing::debug!(%error, "progress notification not sent");
                        }
                    }
                }
            }
        }
        text(format!("slept {ms} ms"))
    }

    /// `elicitation/create` to the client while the call is under way; its answer as JSON text.
    async fn elicit(
        &self,
        arguments: Option<JsonObject>,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let ElicitArgs { message } = args(arguments)?;
        let params: ElicitRequestParams = serde_json::from_value(serde_json::json!({
            "mode": "form",
            "message": message,
            "requestedSchema": {
                "type": "object",
                "properties": { "answer": { "type": "string" } },
                "required": ["answer"],
            },
        }))
        .map_err(|e| McpError::internal_error(format!("elicitation params: {e}"), None))?;
        let request = ServerRequest::ElicitRequest(ElicitRequest::new(params));
        let answer = tokio::select! {
            answer = context.peer.send_request(request) => answer,
            () = self.shared.abandoned(context) => {
                return Err(McpError::internal_error("elicit cancelled", None));
            }
        };
        match answer {
            Ok(ClientResult::ElicitResult(result)) => match serde_json::to_string(&result) {
                Ok(json) => text(json),
                Err(error) => tool_error(format!("the answer does not serialize: {error}")),
            },
            Ok(other) => tool_error(format!("not an elicitation result: {other:?}")),
            Err(error) => tool_error(format!("elicitation failed: {error}")),
        }
    }

    async fn set_tools(&self, arguments: Option<JsonObject>) -> Result<CallToolResponse, McpError> {
        let SetToolsArgs { tools, description } = args(arguments)?;
        let description = description
            .unwrap_or_else(|| "Dynamic tool added by set_tools; echoes its arguments.".to_owned());
        let mut names: Vec<String> = Vec::new();
        for name in tools {
            if name.is_empty() {
                return tool_error("tool names must not be empty");
            }
            if self.shared.kinds.contains_key(&name) {
                return tool_error(format!("{name} is a static tool and cannot be redefined"));
            }
            if !names.contains(&name) {
                names.push(name);
            }
        }
        let count = names.len();
        *lock(&self.shared.dynamic) = names
            .iter()
            .map(|name| echo_tool(name.clone(), description.clone()))
            .collect();
        self.shared
            .tools_version
            .send_modify(|version| *version += 1);
        let peers: Vec<Peer<RoleServer>> = {
            let mut peers = lock(&self.shared.legacy_peers);
            peers.retain(|peer| !peer.is_transport_closed());
            peers.clone()
        };
        for peer in peers {
            if let Err(error) = peer.notify_tool_list_changed().await {
                tracing::debug!(%error, "tools/list_changed not sent to one peer");
            }
        }
        tracing::info!(?names, "dynamic tools replaced");
        text(format!("{count} dynamic tools: {}", names.join(", ")))
    }

    async fn drop_sessions(&self) -> Result<CallToolResponse, McpError> {
        let Mode::Http { sessions } = &self.shared.mode else {
            return tool_error("drop_sessions works only over streamable HTTP (--http)");
        };
        let sessions = Arc::clone(sessions);
        // Forget the sessions now, so that any later request with an old id gets 404, but keep
        // their handles a little: the workers (and this reply's stream) live until they are
        // closed or dropped.
        let dropped: Vec<_> = sessions
            .sessions
            .write()
            .await
            .drain()
            .map(|(_, handle)| handle)
            .collect();
        let count = dropped.len();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            for handle in dropped {
                if let Err(error) = handle.close().await {
                    tracing::debug!(%error, "closing a dropped session");
                }
            }
        });
        tracing::info!(count, "all sessions dropped");
        text(format!("dropped {count} sessions"))
    }

    /// Write the garbage line; false when not in stdio mode.
    fn garbage(&self) -> bool {
        let Mode::Stdio { raw_stdout, .. } = &self.shared.mode else {
            return false;
        };
        let line = b"this is not JSON-RPC {{{ garbage from mcp-fault-server\n".to_vec();
        if raw_stdout.send(line).is_err() {
            tracing::warn!("stdout writer is gone; garbage not written");
        }
        true
    }

    fn ledger_count(&self, name: &str) -> Result<usize, McpError> {
        let Some(path) = &self.shared.options.ledger else {
            return Err(McpError::resource_not_found(
                "no ledger: start mcp-fault-server with --ledger PATH",
                None,
            ));
        };
        match std::fs::read_to_string(path) {
            Ok(content) => Ok(content.lines().filter(|line| *line == name).count()),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(0),
            Err(error) => Err(McpError::internal_error(
                format!("cannot read ledger {}: {error}", path.display()),
                None,
            )),
        }
    }

    fn status_text(&self) -> String {
        let dynamic: Vec<String> = lock(&self.shared.dynamic)
            .iter()
            .map(|tool| tool.name.to_string())
            .collect();
        serde_json::json!({
            "server": SERVER_NAME,
            "pid": std::process::id(),
            "uptimeMs": u64::try_from(self.shared.started.elapsed().as_millis()).unwrap_or(u64::MAX),
            "transport": match self.shared.mode { Mode::Stdio { .. } => "stdio", Mode::Http { .. } => "http" },
            "staticTools": self.shared.static_tools.len(),
            "dynamicTools": dynamic,
            "ledger": self.shared.options.ledger.as_ref().map(|p| p.display().to_string()),
        })
        .to_string()
    }
}

fn echo_arguments(arguments: Option<JsonObject>) -> Result<CallToolResponse, McpError> {
    let value = serde_json::Value::Object(arguments.unwrap_or_default());
    text(value.to_string())
}

impl ServerHandler for FaultServer {
    fn get_info(&self) -> ServerConfig {
        let mut capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .enable_resources()
            .enable_prompts()
            .build();
        if self.shared.fixtures.is_some() {
            capabilities.logging = Some(JsonObject::new());
            capabilities.completions = Some(JsonObject::new());
            if let Some(resources) = capabilities.resources.as_mut() {
                resources.subscribe = Some(true);
            }
        }
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new(SERVER_NAME, env!("CARGO_PKG_VERSION")))
            .with_instructions("A fault-injection MCP server for testing MCP clients and proxies.")
    }

    async fn ping(&self, _context: RequestContext<RoleServer>) -> Result<(), McpError> {
        if self.shared.options.no_ping {
            Err(McpError::method_not_found::<PingRequestMethod>())
        } else {
            Ok(())
        }
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        tracing::debug!("client initialized");
        lock(&self.shared.legacy_peers).push(context.peer);
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(requested.supported_by(&self.get_info().capabilities))
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), McpError> {
        let mut version = self.shared.tools_version.subscribe();
        // rmcp acknowledges the subscription before this runs, so a change made right after the
        // acknowledgement could land before this receiver exists: announce once at the start.
        version.mark_changed();
        loop {
            tokio::select! {
                () = context.cancelled() => return Ok(()),
                changed = version.changed() => {
                    if changed.is_err() {
                        return Ok(());
                    }
                    if context.accepted().tools_list_changed == Some(true)
                        && let Err(error) = context.sink().notify_tool_list_changed().await
                    {
                        tracing::debug!(%error, "subscription closed");
                        return Ok(());
                    }
                }
            }
        }
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let tools = self.shared.all_tools();
        let page_size = self.shared.options.page_size;
        if page_size == 0 {
            return Ok(ListToolsResult::with_all_items(tools));
        }
        let start = match request.and_then(|r| r.cursor) {
            None => 0,
            Some(cursor) => cursor
                .parse::<usize>()
                .ok()
                .filter(|start| *start <= tools.len())
                .ok_or_else(|| {
                    McpError::invalid_params(format!("invalid cursor {cursor}"), None)
                })?,
        };
        let end = start.saturating_add(page_size).min(tools.len());
        let mut result = ListToolsResult::with_all_items(tools[start..end].to_vec());
        if end < tools.len() {
            result.next_cursor = Some(end.to_string());
        }
        Ok(result)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        if let Some(fixtures) = &self.shared.fixtures
            && conformance::is_tool(&request.name)
        {
            return fixtures.call_tool(request, &context).await;
        }
        let name: Cow<'static, str> = request.name;
        let arguments = request.arguments;
        let Some(kind) = self.shared.kinds.get(name.as_ref()).copied() else {
            if self.shared.is_dynamic(&name) {
                return echo_arguments(arguments);
            }
            return Err(McpError::invalid_params(
                format!("tool not found: {name}"),
                None,
            ));
        };
        tracing::debug!(tool = %name, "call");
        match kind {
            Kind::Add => {
                let AddArgs { a, b } = args(arguments)?;
                text((a + b).to_string())
            }
            Kind::Echo => {
                let EchoArgs { message } = args(arguments)?;
                text(message)
            }
            Kind::Crash => {
                exit_soon(CRASH_EXIT_CODE, Duration::from_millis(25));
                text("crashing")
            }
            Kind::Hang => {
                self.shared.abandoned(&context).await;
                // With a ledger, a client's notifications/cancelled leaves a trace to check.
                if context.ct.is_cancelled()
                    && let Some(path) = &self.shared.options.ledger
                    && let Err(error) = append_line(path, HANG_CANCELLED)
                {
                    tracing::warn!(%error, "cannot append to the ledger");
                }
                Err(McpError::internal_error("hang cancelled", None))
            }
            Kind::Sleep => self.sleep(arguments, &context).await,
            Kind::Count | Kind::CountIdempotent => self.write_ledger(arguments),
            Kind::SetTools => self.set_tools(arguments).await,
            Kind::DropSessions => self.drop_sessions().await,
            Kind::Block => {
                let BlockArgs { ms } = args(arguments)?;
                // Deliberately blocking: the runtime is current_thread, so nothing else runs.
                std::thread::sleep(Duration::from_millis(ms));
                text(format!("blocked {ms} ms"))
            }
            Kind::Garbage => {
                if !self.garbage() {
                    return tool_error("garbage works only over stdio");
                }
                self.shared.abandoned(&context).await;
                Err(McpError::internal_error("garbage call cancelled", None))
            }
            Kind::Flood => {
                let FloodArgs { count, bytes } = args(arguments)?;
                let Some(token) = context.meta.get_progress_token() else {
                    return tool_error("flood sends progress: call it with a progressToken");
                };
                let message = "x".repeat(bytes.min(1 << 20));
                for done in 1..=count {
                    let param = ProgressNotificationParam::new(token.clone(), done as f64)
                        .with_total(count as f64)
                        .with_message(message.clone());
                    if let Err(error) = context.peer.notify_progress(param).await {
                        tracing::debug!(%error, "flood: a notification was not sent");
                    }
                }
                // With --ledger, a line says that all of them went out.
                if let Some(path) = &self.shared.options.ledger
                    && let Err(error) = append_line(path, &format!("flood {count}"))
                {
                    tracing::warn!(%error, "flood: the ledger line was not written");
                }
                text(format!("sent {count}"))
            }
            Kind::Pid => {
                // The request id as the server saw it shows which way a client sent the call.
                let mut result = CallToolResult::success(vec![ContentBlock::text(
                    std::process::id().to_string(),
                )]);
                result.structured_content = Some(serde_json::json!({
                    "pid": std::process::id(),
                    "requestId": context.id,
                }));
                Ok(result.into())
            }
            Kind::Meta => text(serde_json::to_string(&context.meta).unwrap_or_default()),
            Kind::Probe => {
                use crate::probes::{NameArgs, PathArgs, PortArgs};
                let outcome = match name.as_ref() {
                    "probe_read" => crate::probes::read(&args::<PathArgs>(arguments)?.path),
                    "probe_read_child" => {
                        crate::probes::read_child(&args::<PathArgs>(arguments)?.path).await
                    }
                    "probe_write" => crate::probes::write(&args::<PathArgs>(arguments)?.path),
                    "probe_connect" => {
                        crate::probes::connect(args::<PortArgs>(arguments)?.port).await
                    }
                    _ => crate::probes::env(&args::<NameArgs>(arguments)?.name),
                };
                match outcome {
                    Ok(answer) => text(answer),
                    Err(why) => tool_error(why),
                }
            }
            Kind::Whoami => {
                let seen = context.peer.peer_info();
                let mut result = CallToolResult::success(vec![ContentBlock::text(
                    std::process::id().to_string(),
                )]);
                result.structured_content = Some(serde_json::json!({
                    "pid": std::process::id(),
                    "protocolVersion": seen.as_ref().map(|p| p.protocol_version.clone()),
                    "clientInfo": seen.as_ref().map(|p| p.client_info.clone()),
                    "capabilities": seen.as_ref().map(|p| p.capabilities.clone()),
                }));
                Ok(result.into())
            }
            // Roots are deprecated upstream (SEP-2577) but clients and servers still use them.
            #[allow(deprecated)]
            Kind::Roots => match context.peer.list_roots().await {
                Ok(roots) => {
                    let mut result = CallToolResult::success(vec![ContentBlock::text(format!(
                        "{} root(s)",
                        roots.roots.len()
                    ))]);
                    result.structured_content = serde_json::to_value(&roots).ok();
                    Ok(result.into())
                }
                Err(error) => tool_error(format!("roots/list failed: {error}")),
            },
            Kind::Elicit => self.elicit(arguments, &context).await,
            Kind::Extra => echo_arguments(arguments),
            // Handled above; reached only if the tables disagree.
            Kind::Conformance => Err(McpError::internal_error(
                format!("conformance fixture {name} without --conformance"),
                None,
            )),
        }
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        let mut resources = vec![
            Resource::new(STATUS_URI, "status")
                .with_description("JSON status of this fault server")
                .with_mime_type("application/json"),
        ];
        if self.shared.fixtures.is_some() {
            resources.extend(conformance::resources());
        }
        Ok(ListResourcesResult::with_all_items(resources))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        let mut templates = vec![
            ResourceTemplate::new(format!("{LEDGER_URI_PREFIX}{{name}}"), "ledger")
                .with_description("How many times id {name} appears in the ledger")
                .with_mime_type("text/plain"),
        ];
        if self.shared.fixtures.is_some() {
            templates.extend(conformance::resource_templates());
        }
        Ok(ListResourceTemplatesResult::with_all_items(templates))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let uri = request.uri;
        if self.shared.fixtures.is_some()
            && let Some(result) = conformance::read_resource(&uri)
        {
            return result.map(Into::into);
        }
        let contents = if uri == STATUS_URI {
            ResourceContents::text(self.status_text(), uri).with_mime_type("application/json")
        } else if let Some(name) = uri.strip_prefix(LEDGER_URI_PREFIX)
            && !name.is_empty()
        {
            let count = self.ledger_count(name)?;
            ResourceContents::text(count.to_string(), uri.clone()).with_mime_type("text/plain")
        } else if self.shared.fixtures.is_some() {
            return Err(conformance::resource_not_found(&uri));
        } else {
            return Err(McpError::resource_not_found(
                format!("no such resource: {uri}"),
                None,
            ));
        };
        Ok(ReadResourceResult::new(vec![contents]).into())
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        let mut prompts = vec![Prompt::new(
            "greet",
            Some("Greet someone by name"),
            Some(vec![
                PromptArgument::new("name")
                    .with_description("Who to greet")
                    .with_required(true),
            ]),
        )];
        if self.shared.fixtures.is_some() {
            prompts.extend(conformance::prompts());
        }
        Ok(ListPromptsResult::with_all_items(prompts))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        if let Some(fixtures) = &self.shared.fixtures
            && let Some(response) = fixtures.get_prompt(&request)
        {
            return response;
        }
        if request.name != "greet" {
            return Err(McpError::invalid_params(
                format!("prompt not found: {}", request.name),
                None,
            ));
        }
        let name = request
            .arguments
            .as_ref()
            .and_then(|arguments| arguments.get("name"))
            .and_then(serde_json::Value::as_str)
            .ok_or_else(|| McpError::invalid_params("greet needs the argument name", None))?;
        Ok(GetPromptResult::new(vec![PromptMessage::new_text(
            Role::User,
            format!("{}, {name}!", self.shared.options.greeting),
        )])
        .with_description(format!("A greeting for {name}"))
        .into())
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, McpError> {
        if self.shared.fixtures.is_none() {
            return Err(McpError::method_not_found::<CompleteRequestMethod>());
        }
        conformance::complete(&request)
    }

    // Logging is deprecated upstream (SEP-2577); the suite's 2025-11-25 scenarios still set it.
    #[allow(deprecated)]
    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        if self.shared.fixtures.is_none() {
            return Err(McpError::method_not_found::<SetLevelRequestMethod>());
        }
        tracing::debug!(level = ?request.level, "logging level set");
        Ok(())
    }

    // resources/subscribe is the 2025-11-25 way; the conformance suite still calls it there.
    #[allow(deprecated)]
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let Some(fixtures) = &self.shared.fixtures else {
            return Err(McpError::method_not_found::<SubscribeRequestMethod>());
        };
        fixtures.subscribe(&request.uri);
        Ok(())
    }

    #[allow(deprecated)]
    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let Some(fixtures) = &self.shared.fixtures else {
            return Err(McpError::method_not_found::<UnsubscribeRequestMethod>());
        };
        fixtures.unsubscribe(&request.uri);
        Ok(())
    }
}
