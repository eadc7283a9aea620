//! A scripted fake of the `Connector`/`Link` seam, for the supervisor's tests on a paused clock.
//!
//! Each `open` takes the next [`Gen`] script from a queue (or the fallback once the queue is
//! empty), and every open, close, call, ping and tools/list is logged with the paused-clock time.
//! The test drives the outside world through the [`Fake`]: a generation dies, sends events (even
//! a stale generation), or gets more replies scripted. It never sleeps on a real clock.
#![allow(dead_code)] // shared by several test crates, each using a part

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mcp_supervisor::Hub;
use mcp_supervisor::core::classify::Failure;
use mcp_supervisor::core::config::{Config, ServerConfig, TransportConfig};
use mcp_supervisor::core::naming::NamingConfig;
use mcp_supervisor::link::{
    BoxFuture, CallOptions, CloseHow, Connector, Link, LinkEvent, LinkEvents,
};
use mcp_supervisor::{HandshakeError, HubEvent, OpenError, ServerState, Snapshot};
use rmcp::model::{CallToolRequestParams, CallToolResult, ContentBlock, Tool, ToolAnnotations};
use serde_json::value::RawValue;
use tokio::sync::watch;
use tokio::time::Instant;

// === replies ===

/// How the fake answers one request.
#[derive(Clone, Debug)]
pub enum Reply<T> {
    /// At once.
    Now(T),
    /// After a delay on the paused clock (even if the generation closes meanwhile: the answer was
    /// already on its way).
    After(Duration, T),
    /// Never; ends only when the generation closes (calls and pings also end at their timeout
    /// and on cancel, as a real link does).
    Hang,
}

type ToolsReply = Reply<Result<Vec<Tool>, Failure>>;
type CallReply = Reply<Result<CallToolResult, Failure>>;
type PingReply = Reply<Result<(), Failure>>;

/// A successful text result.
pub fn text_result(text: impl Into<String>) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(text)])
}

/// The text of a result.
pub fn result_text(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("")
}

/// A tool without annotations (not safe to replay).
pub fn tool(name: &str) -> Tool {
    Tool::new(name.to_string(), "a tool", Arc::new(serde_json::Map::new()))
}

/// A tool annotated `readOnlyHint: true`.
pub fn read_only_tool(name: &str) -> Tool {
    tool(name).with_annotations(ToolAnnotations::new().read_only(true))
}

/// A tool annotated `idempotentHint: true`.
pub fn idempotent_tool(name: &str) -> Tool {
    tool(name).with_annotations(ToolAnnotations::new().idempotent(true))
}

// === the script of one generation ===

/// What one generation does.
#[derive(Clone, Debug)]
pub struct Gen {
    /// `Err`: `open` itself fails (a spawn error).
    pub open: Result<(), String>,
    pub init: Reply<Result<(), String>>,
    /// The tools every tools/list returns once `lists` is used up.
    pub tools: Vec<Tool>,
    /// Replies to tools/list, in order (the first sync, re-syncs, list probes).
    pub lists: VecDeque<ToolsReply>,
    /// Replies to tools/call, in order, each for one tool (`Some`) or any (`None`); then
    /// `default_call`.
    pub calls: VecDeque<(Option<String>, CallReply)>,
    /// `None`: answer "<tool> on generation <n>".
    pub default_call: Option<CallReply>,
    /// Replies to ping, in order; then `default_ping`.
    pub pings: VecDeque<PingReply>,
    pub default_ping: PingReply,
    /// How long a close takes; `None`: it never completes.
    pub close: Option<Duration>,
    /// The generation dies on its own this long after it was opened.
    pub dies_after: Option<Duration>,
}

impl Gen {
    /// A healthy generation offering `tools`.
    pub fn ok(tools: Vec<Tool>) -> Self {
        Self {
            open: Ok(()),
            init: Reply::Now(Ok(())),
            tools,
            lists: VecDeque::new(),
            calls: VecDeque::new(),
            default_call: None,
            pings: VecDeque::new(),
            default_ping: Reply::Now(Ok(())),
            close: Some(Duration::ZERO),
            dies_after: None,
        }
    }

    /// A generation whose `open` fails (spawn error).
    pub fn open_fails(cause: &str) -> Self {
        Self {
            open: Err(cause.to_string()),
            ..Self::ok(Vec::new())
        }
    }

    /// A generation whose initialize fails with `cause`.
    pub fn init_fails(cause: &str) -> Self {
        Self {
            init: Reply::Now(Err(cause.to_string())),
            ..Self::ok(Vec::new())
        }
    }

    pub fn init(mut self, reply: Reply<Result<(), String>>) -> Self {
        self.init = reply;
        self
    }

    pub fn list(mut self, reply: ToolsReply) -> Self {
        self.lists.push_back(reply);
        self
    }

    /// The next call, to any tool, gets `reply`.
    pub fn call(mut self, reply: CallReply) -> Self {
        self.calls.push_back((None, reply));
        self
    }

    /// The next call to `tool` gets `reply`.
    pub fn call_to(mut self, tool: &str, reply: CallReply) -> Self {
        self.calls.push_back((Some(tool.to_string()), reply));
        self
    }

    pub fn calls_default(mut self, reply: CallReply) -> Self {
        self.default_call = Some(reply);
        self
    }

    pub fn ping(mut self, reply: PingReply) -> Self {
        self.pings.push_back(reply);
        self
    }

    pub fn pings_default(mut self, reply: PingReply) -> Self {
        self.default_ping = reply;
        self
    }

    pub fn close_after(mut self, after: Duration) -> Self {
        self.close = Some(after);
        self
    }

    pub fn close_never(mut self) -> Self {
        self.close = None;
        self
    }

    pub fn dies_after(mut self, after: Duration) -> Self {
        self.dies_after = Some(after);
        self
    }
}

// === the log ===

/// What the fake saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// `open` was called (whether or not the script let it succeed).
    Open,
    Initialize,
    ListTools,
    Call(String),
    Ping,
    Close(CloseHow),
    /// The generation finished closing (`closed()` resolves from now on).
    Closed,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Since the fake was made.
    pub at: Duration,
    pub generation: u64,
    pub op: Op,
}

struct Shared {
    start: Instant,
    log: Mutex<Vec<Entry>>,
    script: Mutex<VecDeque<Gen>>,
    fallback: Mutex<Gen>,
    links: Mutex<HashMap<u64, Arc<FakeLink>>>,
}

impl Shared {
    fn record(&self, generation: u64, op: Op) {
        let at = Instant::now() - self.start;
        lock(&self.log).push(Entry { at, generation, op });
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

// === impl Fake ===

/// The scripted connector. Clone it freely: clones share the script and the log.
#[derive(Clone)]
pub struct Fake {
    shared: Arc<Shared>,
}

impl Fake {
    /// A fake whose generations follow `script`, then `fallback`.
    pub fn new(script: Vec<Gen>, fallback: Gen) -> Self {
        Self {
            shared: Arc::new(Shared {
                start: Instant::now(),
                log: Mutex::new(Vec::new()),
                script: Mutex::new(script.into()),
                fallback: Mutex::new(fallback),
                links: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// The moment the fake was made: log times count from here.
    pub fn start(&self) -> Instant {
        self.shared.start
    }

    /// Script the next generations that are not yet opened.
    pub fn push(&self, generation: Gen) {
        lock(&self.shared.script).push_back(generation);
    }

    pub fn set_fallback(&self, generation: Gen) {
        *lock(&self.shared.fallback) = generation;
    }

    pub fn log(&self) -> Vec<Entry> {
        lock(&self.shared.log).clone()
    }

    /// Every open: (generation, time).
    pub fn opens(&self) -> Vec<(u64, Duration)> {
        self.entries(|op| *op == Op::Open)
            .into_iter()
            .map(|e| (e.generation, e.at))
            .collect()
    }

    pub fn entries(&self, which: impl Fn(&Op) -> bool) -> Vec<Entry> {
        self.log().into_iter().filter(|e| which(&e.op)).collect()
    }

    /// How many `op`s of `generation` (`None`: of any) were logged.
    pub fn count(&self, generation: Option<u64>, op: &Op) -> usize {
        self.log()
            .iter()
            .filter(|e| &e.op == op && generation.is_none_or(|g| g == e.generation))
            .count()
    }

    /// Every tools/call: (generation, tool).
    pub fn calls(&self) -> Vec<(u64, String)> {
        self.log()
            .into_iter()
            .filter_map(|e| match e.op {
                Op::Call(tool) => Some((e.generation, tool)),
                _ => None,
            })
            .collect()
    }

    pub fn pings(&self) -> Vec<(u64, Duration)> {
        self.entries(|op| *op == Op::Ping)
            .into_iter()
            .map(|e| (e.generation, e.at))
            .collect()
    }

    fn link(&self, generation: u64) -> Arc<FakeLink> {
        lock(&self.shared.links)
            .get(&generation)
            .cloned()
            .unwrap_or_else(|| panic!("generation {generation} was never opened"))
    }

    /// The generation dies: its process exits, `closed()` resolves.
    pub fn die(&self, generation: u64) {
        self.link(generation).mark_closed();
    }

    /// The generation sends an event (the supervisor must fence a replaced one).
    pub fn send(&self, generation: u64, event: LinkEvent) {
        self.link(generation).events.send(event);
    }

    /// Script one more tools/call reply (to any tool) of an open generation.
    pub fn push_call(&self, generation: u64, reply: CallReply) {
        lock(&self.link(generation).script)
            .calls
            .push_back((None, reply));
    }

    /// Script one more tools/list reply of an open generation.
    pub fn push_list(&self, generation: u64, reply: ToolsReply) {
        lock(&self.link(generation).script).lists.push_back(reply);
    }

    /// Change the default ping reply of an open generation.
    pub fn set_pings(&self, generation: u64, reply: PingReply) {
        lock(&self.link(generation).script).default_ping = reply;
    }
}

impl Connector for Fake {
    fn open(&self, generation: u64, events: LinkEvents) -> Result<Arc<dyn Link>, OpenError> {
        assert_eq!(
            events.generation(),
            generation,
            "events are tagged with the generation"
        );
        self.shared.record(generation, Op::Open);
        let script = lock(&self.shared.script)
            .pop_front()
            .unwrap_or_else(|| lock(&self.shared.fallback).clone());
        script.open.clone().map_err(OpenError::Other)?;
        let (closed, _) = watch::channel(false);
        let dies_after = script.dies_after;
        let link = Arc::new(FakeLink {
            generation,
            shared: self.shared.clone(),
            script: Mutex::new(script),
            closed,
            events,
        });
        lock(&self.shared.links).insert(generation, link.clone());
        if let Some(after) = dies_after {
            let link = link.clone();
            tokio::spawn(async move {
                tokio::time::sleep(after).await;
                link.mark_closed();
            });
        }
        Ok(link)
    }
}

// === impl FakeLink ===

struct FakeLink {
    generation: u64,
    shared: Arc<Shared>,
    script: Mutex<Gen>,
    closed: watch::Sender<bool>,
    events: LinkEvents,
}

impl FakeLink {
    fn mark_closed(&self) {
        if self
            .closed
            .send_if_modified(|c| !std::mem::replace(c, true))
        {
            self.shared.record(self.generation, Op::Closed);
        }
    }

    fn wait_closed(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut rx = self.closed.subscribe();
        async move {
            let _ = rx.wait_for(|c| *c).await;
        }
    }

    /// Play a reply; `Hang` ends with `on_close` when the generation closes.
    async fn play<T>(&self, reply: Reply<T>, on_close: T) -> T {
        match reply {
            Reply::Now(value) => value,
            Reply::After(delay, value) => {
                tokio::time::sleep(delay).await;
                value
            }
            Reply::Hang => {
                self.wait_closed().await;
                on_close
            }
        }
    }
}

/// Bound `answer` by `timeout` (→ `DeadlinePassed`), as a real link does.
async fn within<T>(
    answer: impl Future<Output = Result<T, Failure>>,
    timeout: Duration,
) -> Result<T, Failure> {
    tokio::time::timeout(timeout, answer)
        .await
        .unwrap_or(Err(Failure::DeadlinePassed))
}

/// A value as JSON text.
fn raw<T: serde::Serialize>(value: &T) -> Result<Box<RawValue>, Failure> {
    serde_json::value::to_raw_value(value).map_err(|_| Failure::UnexpectedResponse)
}

impl FakeLink {
    async fn list_tools(&self, timeout: Duration) -> Result<Vec<Tool>, Failure> {
        self.shared.record(self.generation, Op::ListTools);
        let reply = {
            let mut script = lock(&self.script);
            let tools = script.tools.clone();
            script.lists.pop_front().unwrap_or(Reply::Now(Ok(tools)))
        };
        within(
            self.play(reply, Err(Failure::ConnectionLostAfterSend)),
            timeout,
        )
        .await
    }

    async fn call_tool(
        &self,
        params: CallToolRequestParams,
        opts: CallOptions,
    ) -> Result<CallToolResult, Failure> {
        let tool = params.name.to_string();
        self.shared.record(self.generation, Op::Call(tool.clone()));
        let reply = {
            let mut script = lock(&self.script);
            let default = script.default_call.clone().unwrap_or_else(|| {
                Reply::Now(Ok(text_result(format!(
                    "{tool} on generation {}",
                    self.generation
                ))))
            });
            let next = script
                .calls
                .iter()
                .position(|(t, _)| t.as_ref().is_none_or(|t| *t == tool));
            next.and_then(|i| script.calls.remove(i))
                .map_or(default, |(_, reply)| reply)
        };
        let answer = within(
            self.play(reply, Err(Failure::ConnectionLostAfterSend)),
            opts.timeout,
        );
        tokio::select! {
            biased;
            result = answer => result,
            () = opts.cancel.cancelled() => Err(Failure::CancelledByCaller),
        }
    }

    async fn ping(&self, timeout: Duration) -> Result<(), Failure> {
        self.shared.record(self.generation, Op::Ping);
        let reply = {
            let mut script = lock(&self.script);
            let default = script.default_ping.clone();
            script.pings.pop_front().unwrap_or(default)
        };
        within(
            self.play(reply, Err(Failure::ConnectionLostAfterSend)),
            timeout,
        )
        .await
    }
}

impl Link for FakeLink {
    fn initialize<'a>(
        &'a self,
        _params: &'a RawValue,
    ) -> BoxFuture<'a, Result<Box<RawValue>, HandshakeError>> {
        Box::pin(async move {
            self.shared.record(self.generation, Op::Initialize);
            let reply = lock(&self.script).init.clone();
            // A scripted failure is the server answering `initialize` with an error.
            let answered = |message: String| {
                HandshakeError::Initialize(Failure::ServerError {
                    code: -32603,
                    message,
                    data: None,
                })
            };
            let closed = Err("the server closed during initialize".to_string());
            self.play(reply, closed).await.map_err(answered)?;
            raw(&serde_json::json!({
                "protocolVersion": "2025-11-25",
                "capabilities": { "tools": { "listChanged": true } },
                "serverInfo": { "name": "fake", "version": "1" },
            }))
            .map_err(HandshakeError::Initialize)
        })
    }

    fn request<'a>(
        &'a self,
        method: &'a str,
        params: Option<&'a RawValue>,
        opts: CallOptions,
    ) -> BoxFuture<'a, Result<Box<RawValue>, Failure>> {
        Box::pin(async move {
            match method {
                "tools/list" => {
                    let tools = self.list_tools(opts.timeout).await?;
                    raw(&serde_json::json!({ "tools": tools }))
                }
                "tools/call" => {
                    let params: CallToolRequestParams = params
                        .and_then(|p| serde_json::from_str(p.get()).ok())
                        .ok_or(Failure::ServerError {
                            code: -32602,
                            message: "bad params".into(),
                            data: None,
                        })?;
                    let result = self.call_tool(params, opts).await?;
                    raw(&result)
                }
                "ping" => {
                    self.ping(opts.timeout).await?;
                    raw(&serde_json::json!({}))
                }
                _ => Err(Failure::ServerError {
                    code: -32601,
                    message: format!("method not found: {method}"),
                    data: None,
                }),
            }
        })
    }

    fn notify(&self, _method: &str, _params: Option<&RawValue>) {}

    fn close(&self, how: CloseHow) {
        self.shared.record(self.generation, Op::Close(how));
        match lock(&self.script).close {
            Some(Duration::ZERO) => self.mark_closed(),
            Some(after) => {
                let closed = self.closed.clone();
                let shared = self.shared.clone();
                let generation = self.generation;
                tokio::spawn(async move {
                    tokio::time::sleep(after).await;
                    if closed.send_if_modified(|c| !std::mem::replace(c, true)) {
                        shared.record(generation, Op::Closed);
                    }
                });
            }
            None => {} // the process group never goes away
        }
    }

    fn closed(&self) -> BoxFuture<'static, ()> {
        Box::pin(self.wait_closed())
    }

    fn stderr_tail(&self) -> Vec<String> {
        Vec::new()
    }

    fn pid(&self) -> Option<u32> {
        None
    }
}

// === hub helpers ===

/// A server "srv" of a fake command with every policy at its default.
pub fn server() -> ServerConfig {
    ServerConfig::new(
        "srv",
        TransportConfig::Stdio {
            command: "fake-server".into(),
            args: Vec::new(),
            env: Vec::new(),
            cwd: None,
        },
    )
}

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A hub of one server on the fake.
pub fn start(server: ServerConfig, fake: &Fake) -> Hub {
    let config = Config {
        servers: vec![server],
        naming: NamingConfig::default(),
        ..Config::default()
    };
    let fake = fake.clone();
    Hub::start_with(
        config,
        Arc::new(move |_: &ServerConfig| Arc::new(fake.clone()) as Arc<dyn Connector>),
    )
}

/// The limit of any wait in these tests, on the paused clock: a bug fails instead of hanging.
pub const WAIT_LIMIT: Duration = Duration::from_secs(3600);

/// Await `future`, failing the test after [`WAIT_LIMIT`] instead of hanging on a bug.
pub async fn bounded<T>(what: &str, future: impl Future<Output = T>) -> T {
    match tokio::time::timeout(WAIT_LIMIT, future).await {
        Ok(value) => value,
        Err(_) => panic!("{what} did not finish within {WAIT_LIMIT:?}"),
    }
}

/// Stop the hub, bounded.
pub async fn stop(hub: &Hub) {
    bounded("hub.stop()", hub.stop()).await;
}

/// Wait until srv's snapshot satisfies `pred`; panics (with the last snapshot) after [`WAIT_LIMIT`].
pub async fn wait_until(hub: &Hub, what: &str, pred: impl Fn(&Snapshot) -> bool) -> Snapshot {
    let mut watch = hub.watch("srv").expect("srv is running");
    let got = tokio::time::timeout(WAIT_LIMIT, watch.wait_for(|s| pred(s)))
        .await
        .ok()
        .and_then(|r| r.ok().map(|s| s.clone()));
    match got {
        Some(snapshot) => snapshot,
        None => panic!(
            "timed out waiting for {what}; last snapshot: {:?}",
            *watch.borrow()
        ),
    }
}

/// Wait until srv is ready on `generation`.
pub async fn ready(hub: &Hub, generation: u64) -> Snapshot {
    wait_until(hub, &format!("ready on generation {generation}"), |s| {
        s.state() == ServerState::Ready && s.generation == generation
    })
    .await
}

/// Wait until srv is in `state`.
pub async fn state(hub: &Hub, state: ServerState) -> Snapshot {
    wait_until(hub, &format!("state {state}"), |s| s.state() == state).await
}

/// srv's state now.
pub fn state_now(hub: &Hub) -> ServerState {
    hub.status()[0].state
}

/// The public names of the published tools, in order.
pub fn tool_names(hub: &Hub) -> Vec<String> {
    hub.tools().iter().map(|t| t.public_name.clone()).collect()
}

/// A fresh state directory (catalogs, pins) for one test, removed when dropped.
pub struct StateDir(pub std::path::PathBuf);

impl StateDir {
    pub fn new(tag: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "mcp-supervisor-state-test-{tag}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        Self(dir)
    }
}

impl Drop for StateDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Sleep on the paused clock until `at` after the fake's start.
pub async fn until(fake: &Fake, at: Duration) {
    tokio::time::sleep_until(fake.start() + at).await;
}

/// Every event received so far.
pub fn drain(events: &mut tokio::sync::broadcast::Receiver<HubEvent>) -> Vec<HubEvent> {
    let mut out = Vec::new();
    while let Ok(event) = events.try_recv() {
        out.push(event);
    }
    out
}

/// How many `ToolsChanged` events are in `events`.
pub fn tools_changed(events: &[HubEvent]) -> usize {
    events
        .iter()
        .filter(|e| matches!(e, HubEvent::ToolsChanged))
        .count()
}

/// The (state, generation) of every `State` event in `events`.
pub fn states(events: &[HubEvent]) -> Vec<(ServerState, u64)> {
    events
        .iter()
        .filter_map(|e| match e {
            HubEvent::State {
                state, generation, ..
            } => Some((*state, *generation)),
            _ => None,
        })
        .collect()
}
