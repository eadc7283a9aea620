//! The one dispatcher ([`Proxy::route`]): a request's method picks its target once (the
//! handshake, tools, prompts, resources, tasks, what clients ask of shared servers, or a
//! server as it came), for clients of both eras.
//!
//! It answers nothing itself but a cursor the proxy never gave, and it never calls back into
//! the 2026-07-28 era's layer, which wraps it.

use std::sync::Arc;
use std::time::Duration;

use mcp_supervisor::CallArgs;
use mcp_supervisor::core::authorize::Target;
use mcp_supervisor::link::{Downstream, RpcError};
use serde_json::value::RawValue;
use tokio_util::sync::CancellationToken;

use crate::client::Scope;
use crate::json::raw_json;
use crate::message::Head;
use crate::proxy::{Mode, Proxy};

/// How long a client's `initialize` waits for its own upstream sessions of isolated `url`
/// servers to open (SPEC §11); one not open by then is not carried in its session id.
pub(crate) const UPSTREAM_SESSION_WAIT: Duration = Duration::from_secs(10);

/// The error for a cursor of a list the proxy answers whole.
pub(crate) fn unknown_cursor(method: &str) -> RpcError {
    RpcError::new(
        -32602,
        format!(
            "Invalid params: unknown cursor: {method} is answered whole here (it gives no nextCursor); ask without a cursor"
        ),
    )
}

impl Proxy {
    /// A request from a client, answered with a result or an error.
    pub(crate) async fn request(
        self: &Arc<Self>,
        scope: &Arc<Scope>,
        method: &str,
        params: Option<&RawValue>,
        head: &Head,
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
        self.spend_top(scope)?;
        self.route(scope, method, params, head, args).await
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
        head: &Head,
        args: CallArgs,
    ) -> Result<Box<RawValue>, RpcError> {
        // The lists the proxy answers itself come whole, with no `nextCursor`: a cursor (a page
        // after the first) is not one of ours (the server itself would refuse a cursor it did
        // not give).
        let paged = head.cursor;
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
            "ping" => Ok(raw_json("{}")),
            "tools/list" if paged => Err(unknown_cursor(method)),
            "tools/list" => self.list_tools(&scope.client).await,
            // A server's requests during the call reach the client as they come.
            "tools/call" => self.call_tool(&scope.client, params, head, args).await,
            "resources/subscribe" | "resources/unsubscribe" => {
                let uri = head.uri.clone().unwrap_or_default();
                self.subscription(scope, method, uri, params, args).await
            }
            "logging/setLevel" => self.set_level(scope, params, args).await,
            // A task is its creator's, in both modes.
            "tasks/list" => self.list_tasks(&scope.client, params, args).await,
            "tasks/get" | "tasks/result" | "tasks/cancel" => {
                self.task_request(&scope.client, method, params, head, args)
                    .await
            }
            _ if self.mode == Mode::Transparent => {
                if let [server] = self.hub.servers().as_slice() {
                    let target = match method {
                        "prompts/get" => Target::Prompt(head.name.as_deref().unwrap_or_default()),
                        "resources/read" | "resources/subscribe" | "resources/unsubscribe" => {
                            Target::Resource(head.uri.as_deref().unwrap_or_default())
                        }
                        _ => Target::None,
                    };
                    self.admit(&scope.client, server, method, target)?;
                }
                self.forward(method, params, args).await
            }
            "prompts/list" | "resources/list" | "resources/templates/list" if paged => {
                Err(unknown_cursor(method))
            }
            "prompts/list" => self.list_prompts(&scope.client, args).await,
            "prompts/get" | "completion/complete" => {
                self.prompt_request(&scope.client, method, params, args)
                    .await
            }
            "resources/list" | "resources/templates/list" => {
                self.list_resources(&scope.client, method, args).await
            }
            "resources/read" => {
                let uri = head.uri.as_deref().unwrap_or_default();
                let server = self.resource_owner(uri, &args).await?;
                self.admit(&scope.client, &server, method, Target::Resource(uri))?;
                self.send(&server, method, params, args).await
            }
            _ => match self.hub.servers().as_slice() {
                // One server: it answers what we do not know.
                [server] => {
                    self.admit(&scope.client, server, method, Target::None)?;
                    self.send(server, method, params, args).await
                }
                _ => Err(RpcError::new(
                    -32601,
                    format!(
                        "Method not found: `{method}` (mcp-supervisor serve does not route it to one of several servers)"
                    ),
                )),
            },
        }
    }
}
