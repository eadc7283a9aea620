//! One generation of a real server: a stdio child in its own process group, or a
//! streamable-HTTP endpoint, each as a [`wire`] under one JSON-RPC [`rpc`] peer. It implements
//! [`Link`] and [`Connector`] for the supervisor.
//!
//! This is the only part that knows an upstream transport. Messages stay JSON text: it never
//! builds the MCP model. It never retries, reconnects or decides anything about a failure; it
//! reports what happened, normalized, and closes when told.

pub mod http_wire;
pub mod process;
pub(crate) mod rpc;
pub mod stdio;
pub mod wire;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mcp_supervisor_core::classify::Failure;
use mcp_supervisor_core::config::{ServerConfig, TransportConfig};
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::sync::{mpsc, watch};

use crate::link::{
    BoxFuture, CallOptions, CloseHow, Connector, Downstream, Link, LinkEvents, describe,
};
use rpc::Peer;
use stdio::StdioWire;
use wire::Wire;

pub use rpc::{Envelope, notification_text, request_text, response_text};

/// How long the handshake may take at most when the caller sets no tighter bound.
const HANDSHAKE_LIMIT: Duration = Duration::from_secs(24 * 60 * 60);

/// Opens generations of one configured server.
pub struct ServerConnector {
    server: ServerConfig,
    /// Where a server's requests go when no client's call caused them.
    fallback: Arc<dyn Downstream>,
}

impl ServerConnector {
    pub fn new(server: ServerConfig, fallback: Arc<dyn Downstream>) -> Self {
        Self { server, fallback }
    }
}

impl Connector for ServerConnector {
    fn open(&self, _generation: u64, events: LinkEvents) -> Result<Arc<dyn Link>, String> {
        let name = self.server.name.as_str();
        let (closed_tx, closed_rx) = watch::channel(false);
        let client_timeout = self.server.tool_call_timeout;
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
                let stdio = StdioWire::new(spawned.stdin);
                let peer = Peer::start(
                    stdio.clone(),
                    None,
                    self.fallback.clone(),
                    events,
                    client_timeout,
                );
                StdioWire::read_into(spawned.stdout, Arc::downgrade(&peer));
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
                }))
            }
            TransportConfig::Http { url, headers } => {
                let headers: Vec<(String, String)> = headers
                    .iter()
                    .map(|(k, v)| (k.clone(), v.expose().to_string()))
                    .collect();
                let (incoming_tx, incoming_rx) = mpsc::unbounded_channel();
                let wire: Arc<dyn Wire> =
                    Arc::new(http_wire::HttpWire::new(url, &headers, incoming_tx)?);
                let peer = Peer::start(
                    wire.clone(),
                    Some(incoming_rx),
                    self.fallback.clone(),
                    events,
                    client_timeout,
                );
                Ok(Arc::new(WireLink {
                    peer,
                    wire,
                    stdio: None,
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

/// A live (or closing) generation.
struct WireLink {
    peer: Arc<Peer>,
    wire: Arc<dyn Wire>,
    /// stdio only: its stdin is closed first on a graceful close.
    stdio: Option<Arc<StdioWire>>,
    closed: watch::Receiver<bool>,
    /// HTTP only: set once closed (there is no process to wait for).
    closed_tx: Mutex<Option<watch::Sender<bool>>>,
    stop: Option<mpsc::UnboundedSender<process::Stop>>,
    pid: Option<u32>,
    stderr_tail: Arc<Mutex<VecDeque<String>>>,
}

impl Link for WireLink {
    fn initialize<'a>(
        &'a self,
        params: &'a RawValue,
    ) -> BoxFuture<'a, Result<Box<RawValue>, String>> {
        Box::pin(async move {
            let result = self
                .peer
                .request(
                    "initialize",
                    Some(params),
                    CallOptions::new(HANDSHAKE_LIMIT),
                )
                .await
                .map_err(|f| format!("initialize failed: {}", describe(&f)))?;
            #[derive(Deserialize)]
            struct Agreed<'a> {
                #[serde(rename = "protocolVersion", borrow)]
                protocol_version: std::borrow::Cow<'a, str>,
            }
            let agreed: Agreed<'_> = serde_json::from_str(result.get()).map_err(|_| {
                "initialize failed: the server's answer has no protocolVersion".to_string()
            })?;
            self.wire.initialized(&agreed.protocol_version);
            self.peer
                .notify_now("notifications/initialized", None)
                .await
                .map_err(|f| {
                    format!("sending notifications/initialized failed: {}", describe(&f))
                })?;
            Ok(result)
        })
    }

    fn request<'a>(
        &'a self,
        method: &'a str,
        params: Option<&'a RawValue>,
        opts: CallOptions,
    ) -> BoxFuture<'a, Result<Box<RawValue>, Failure>> {
        Box::pin(self.peer.request(method, params, opts))
    }

    fn notify(&self, method: &str, params: Option<&RawValue>) {
        self.peer.notify(method, params);
    }

    fn close(&self, how: CloseHow) {
        self.wire.close();
        if let Some(stop) = &self.stop {
            if let (CloseHow::Graceful, Some(stdio)) = (how, &self.stdio) {
                let stdio = stdio.clone();
                tokio::spawn(async move { stdio.close_stdin().await });
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
}

impl Drop for WireLink {
    fn drop(&mut self) {
        self.wire.close();
        if let Some(stop) = &self.stop {
            let _ = stop.send(process::Stop::Kill);
        }
    }
}
