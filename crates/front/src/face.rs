//! One JSON-RPC message from a client in, its answer out ([`Proxy::handle`]): a request is
//! kept in its client's list while it runs (so the client can cancel it), handed to the
//! 2026-07-28 era's layer or to the dispatcher, and answered unless its client cancelled it; a
//! notification or a response from the client is taken here. With an audit, each request is
//! followed by its trail ([`crate::trail`]) while it runs.
//!
//! It never decides where a request goes: [`crate::dispatch`] does.

use std::sync::{Arc, Mutex};

use mcp_supervisor::link::RpcError;
use mcp_supervisor::upstream::response_text;
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::client::Client;
use crate::client::{ByClient, InCall, Scope};
use crate::json::lock;
use crate::message::{Head, Kind, Message, error_text};
use crate::proxy::{Mode, Proxy};
use crate::trail::Trail;

impl Proxy {
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
        self.handle_message_in(client, message, related, None).await
    }

    /// [`Proxy::handle_message`] for a message that came on the session whose id is
    /// `session_id` (an HTTP session's): the audit names the session its requests came on.
    pub async fn handle_message_in(
        self: &Arc<Self>,
        client: &Arc<Client>,
        message: &Message,
        related: Option<mpsc::Sender<String>>,
        session_id: Option<&str>,
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
                let head = message.head();
                // The answer's future is made where it is awaited, not kept in a local first:
                // a future in a local takes room of its own in this one's state, beside the
                // one awaited.
                let answer = match Trail::start(self, client, method, head, session_id) {
                    Some(trail) => {
                        trail
                            .follow(self.answer(&scope, id, method, params, head, cancel))
                            .await
                    }
                    None => self.answer(&scope, id, method, params, head, cancel).await,
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

    /// The answer to a client's request: through the 2026-07-28 era's layer when it is of a
    /// stateless client, else straight to the dispatcher.
    async fn answer(
        self: &Arc<Self>,
        scope: &Arc<Scope>,
        id: &RawValue,
        method: &str,
        params: Option<&RawValue>,
        head: &Head,
        cancel: CancellationToken,
    ) -> Result<Box<RawValue>, RpcError> {
        if crate::stateless::is_stateless(&scope.client, method, head) {
            self.stateless(scope, id, method, params, head, cancel)
                .await
        } else {
            self.request(scope, method, params, head, cancel).await
        }
    }

    /// A notification from a client.
    pub(crate) fn notification(
        &self,
        client: &Arc<Client>,
        method: &str,
        params: Option<&RawValue>,
    ) {
        match method {
            "notifications/initialized" => {
                client.set_initialized();
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
}

/// A client's request in flight: forgotten when it ends ([`InFlight::end`]) or is dropped.
pub(crate) struct InFlight<'a> {
    client: &'a Client,
    /// Its id as JSON text; empty once forgotten.
    key: &'a str,
}

impl InFlight<'_> {
    /// Forget it now.
    pub(crate) fn end(&mut self) {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A request's future (what the stdio face boxes, and copies whole, for every request it
    /// reads) holds its answer's future once. An `async fn` that took the answer's future as
    /// its argument and awaited it held it twice: 7,952 bytes in a release build, 4,080 since.
    #[tokio::test]
    async fn a_request_future_holds_its_answer_once() {
        let proxy = Proxy::of_nothing();
        let (out, _seen) = mpsc::channel(8);
        let client = proxy.connect(out);
        let message = Message::read(
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t"}}"#,
        )
        .expect("a request");
        let (Kind::Request { method }, Some(id)) = (&message.kind, message.id()) else {
            panic!("read as a request");
        };
        let scope = Arc::new(Scope {
            client: client.clone(),
            related: None,
            by_client: Mutex::new(None),
        });
        let answer = std::mem::size_of_val(&proxy.answer(
            &scope,
            id,
            method,
            message.params(),
            message.head(),
            CancellationToken::new(),
        ));
        let whole = std::mem::size_of_val(&proxy.handle_message(&client, &message, None));
        assert!(
            whole < answer + answer / 2,
            "a request's future is {whole} bytes, its answer's {answer}: held twice?"
        );
    }
}
