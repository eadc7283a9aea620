//! What servers send that no client's request carries: hub events passed down to the clients
//! that want them ([`forward_events`]), and a server's request that no client's call caused
//! ([`Unrelated`]: the only client takes it, else the server gets an error).
//!
//! It never sends a client anything before its handshake is done.

use std::sync::{Arc, Weak};

use mcp_supervisor::link::{BoxFuture, Downstream, RpcError};
use mcp_supervisor::upstream::notification_text;
use mcp_supervisor::{HubEvent, ServerState};
use serde_json::value::RawValue;

use crate::client::{Client, RESYNC, Scope};
use crate::json::raw_json;
use crate::proxy::{Mode, Proxy};
use crate::tasks::namespace_task;

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

    pub(crate) fn only_client(&self) -> Option<Arc<Client>> {
        let proxy = self.proxy.get()?.upgrade()?;
        // A client of protocol 2026-07-28 takes no requests from a server.
        let clients: Vec<_> = proxy
            .clients()
            .into_iter()
            .filter(|c| !c.is_stateless())
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

impl Proxy {
    /// Start passing the hub's events down to the clients ([`forward_events`]), for as long as
    /// the proxy lives.
    pub(crate) fn pass_events_down(self: &Arc<Self>) {
        tokio::spawn(forward_events(Arc::downgrade(self), self.hub.subscribe()));
    }
}

/// Pass hub events down to every client: tool-list changes (only when the aggregate changed),
/// and the servers' notifications.
pub(crate) async fn forward_events(
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::OUTBOX;
    use serde_json::Value;
    use tokio::sync::mpsc;

    #[tokio::test]
    async fn a_client_behind_on_server_events_is_told_to_list_again() {
        let proxy = Proxy::of_nothing();
        let (out, mut seen) = mpsc::channel(OUTBOX);
        let client = proxy.connect(out);
        client.set_initialized();
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
}
