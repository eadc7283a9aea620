//! The seam between a supervisor and one generation of a server: what a live connection can do
//! (`Link`) and how one is opened (`Connector`).
//!
//! The supervisor drives generations only through these traits, so its state machine is tested
//! with a scripted fake on a paused clock. This module must never spawn, connect or sleep itself.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use mcp_supervisor_core::classify::Failure;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientRequest, ProgressNotificationParam,
    ServerNotification, ServerResult, Tool,
};
use serde_json::value::RawValue;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// A boxed, sendable future.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Opens generations of one server.
pub trait Connector: Send + Sync + 'static {
    /// Start generation `generation`: spawn the process or prepare the HTTP client. It does not
    /// wait for the server; [`Link::initialize`] does. Events of the generation go to `events`.
    fn open(&self, generation: u64, events: LinkEvents) -> Result<Arc<dyn Link>, String>;
}

/// One generation: a fresh transport and a fresh rmcp client.
pub trait Link: Send + Sync + 'static {
    /// The MCP handshake. Bounded by the caller.
    fn initialize(&self) -> BoxFuture<'_, Result<(), String>>;
    /// `tools/list`, every page, each page bounded by `timeout`.
    fn list_tools(&self, timeout: Duration) -> BoxFuture<'_, Result<Vec<Tool>, Failure>>;
    /// One `tools/call`, ended by `opts.timeout` (then `notifications/cancelled` goes upstream)
    /// or by `opts.cancel` (the same notification).
    fn call_tool(
        &self,
        params: CallToolRequestParams,
        opts: CallOptions,
    ) -> BoxFuture<'_, Result<CallToolResult, Failure>>;
    /// One `tools/call` whose params (`name` already the upstream name) and result stay JSON
    /// text, for a relay that passes both through. Ended like [`Link::call_tool`]. The default
    /// goes through [`Link::call_tool`]; a stdio link sends the text as it is.
    fn call_tool_json<'a>(
        &'a self,
        params: &'a RawValue,
        opts: CallOptions,
    ) -> BoxFuture<'a, Result<Box<RawValue>, Failure>> {
        call_tool_json_typed(self, params, opts)
    }
    /// Any other request (prompts, resources, completions, logging), bounded by `timeout`.
    fn request(
        &self,
        request: ClientRequest,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<ServerResult, Failure>>;
    /// `ping`, bounded by `timeout`.
    fn ping(&self, timeout: Duration) -> BoxFuture<'_, Result<(), Failure>>;
    /// Begin closing. `Graceful` closes stdin, then signals; `Kill` kills the process group at
    /// once. Completion is seen through [`Link::closed`].
    fn close(&self, how: CloseHow);
    /// Resolves once the generation is fully closed: client ended, process group gone.
    fn closed(&self) -> BoxFuture<'static, ()>;
    /// The last lines the server wrote to stderr, oldest first.
    fn stderr_tail(&self) -> Vec<String>;
    /// The process id of a stdio server.
    fn pid(&self) -> Option<u32>;
    /// What the server said about itself at initialize (name, version, capabilities,
    /// instructions), once initialized.
    fn peer_info(&self) -> Option<rmcp::model::ServerPeerInfo> {
        None
    }
}

/// [`Link::call_tool_json`] through the typed [`Link::call_tool`]: the params are parsed into
/// MCP types and the result serialized back.
pub fn call_tool_json_typed<'a, L: Link + ?Sized>(
    link: &'a L,
    params: &'a RawValue,
    opts: CallOptions,
) -> BoxFuture<'a, Result<Box<RawValue>, Failure>> {
    Box::pin(async move {
        let params: CallToolRequestParams =
            serde_json::from_str(params.get()).map_err(|e| Failure::ServerError {
                code: -32602,
                message: format!("the tools/call params are not valid: {e}"),
            })?;
        let result = link.call_tool(params, opts).await?;
        serde_json::value::to_raw_value(&result).map_err(|_| Failure::UnexpectedResponse)
    })
}

/// How to end a generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CloseHow {
    /// Close stdin, then SIGTERM, then SIGKILL the group (bounded).
    Graceful,
    /// SIGKILL the group now: the server is hung or already lost.
    Kill,
}

/// Per-call options.
#[derive(Clone, Debug)]
pub struct CallOptions {
    pub timeout: Duration,
    pub progress: Option<mpsc::UnboundedSender<ProgressNotificationParam>>,
    pub cancel: CancellationToken,
}

/// What a generation reports on its own, tagged with its number by [`LinkEvents`].
#[derive(Clone, Debug)]
pub enum LinkEvent {
    /// `notifications/tools/list_changed`.
    ToolListChanged,
    /// Any sign that the server is alive (a progress notification, a log message).
    SignOfLife,
    /// A notification to pass downstream (resources, prompts, logging).
    Notification(Box<ServerNotification>),
}

/// Where a generation sends its events; each one carries the generation number so a
/// supervisor can ignore a replaced generation (the fence).
#[derive(Clone, Debug)]
pub struct LinkEvents {
    generation: u64,
    tx: mpsc::UnboundedSender<(u64, LinkEvent)>,
}

impl LinkEvents {
    pub fn new(generation: u64, tx: mpsc::UnboundedSender<(u64, LinkEvent)>) -> Self {
        Self { generation, tx }
    }

    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Send an event; a supervisor that has gone away simply does not hear it.
    pub fn send(&self, event: LinkEvent) {
        let _ = self.tx.send((self.generation, event));
    }
}

/// A failure in words, for logs and errors.
pub fn describe(failure: &Failure) -> String {
    match failure {
        Failure::NoLiveGeneration => "there is no live connection".into(),
        Failure::ConnectRefused => "the connection was refused".into(),
        Failure::SessionExpired => "the server no longer knows our session (HTTP 404)".into(),
        Failure::HttpStatus { status, body } if body.is_empty() => format!("HTTP {status}"),
        Failure::HttpStatus { status, body } => format!("HTTP {status}: {body}"),
        Failure::ServerError { code, message } => format!("error {code}: {message}"),
        Failure::TransportClosedBeforeSend => {
            "the connection was closed before the request went out".into()
        }
        Failure::ConnectionLostAfterSend => {
            "the connection broke after the request went out".into()
        }
        Failure::TransportError { message, .. } => format!("transport error: {message}"),
        Failure::DeadlinePassed => "the deadline passed".into(),
        Failure::CancelledByCaller => "cancelled by the caller".into(),
        Failure::UnexpectedResponse => "the reply was of the wrong type".into(),
    }
}
