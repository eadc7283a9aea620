//! What leaves the front for the servers: one request to one server ([`Proxy::send`]), any
//! request to `wrap`'s server as it came ([`Proxy::forward`]), every server's held part of a
//! list ([`Proxy::held_parts`]), and one request to every server at once within a bound
//! ([`Proxy::fan_out`]); the one call of a tool through the hub ([`call_through`]); and a
//! call's failure as the client sees it ([`call_error`]). Each of them notes on the request's
//! audit trail what it sent and what came back ([`crate::trail::Sending`]).
//!
//! It never waits on a late server past [`FAN_OUT_WAIT`], and never lists anything live.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use mcp_supervisor::core::authorize::Target;
use mcp_supervisor::link::{BoxFuture, RpcError};
use mcp_supervisor::{CallArgs, CallError, Hub, ServerState};
use serde_json::json;
use serde_json::value::RawValue;

use crate::Mode;
use crate::client::Client;
use crate::json::{member_str, to_raw};
use crate::proxy::Proxy;
use crate::trail::{self, Sending};

/// How long a fan-out that cannot be held (`tasks/list`, `logging/setLevel`) waits for each
/// server, all at once: a late server's part is left out (and logged), never waited for.
pub(crate) const FAN_OUT_WAIT: Duration = Duration::from_secs(2);

/// A call's failure as the client sees it: the server's own JSON-RPC error as it said it, an
/// unknown or withheld tool as invalid params, anything else as a tool result with `isError` that says
/// what happened and what to do.
pub(crate) fn call_error(error: CallError) -> Result<Box<RawValue>, RpcError> {
    match error {
        CallError::ServerError {
            code,
            message,
            data,
            ..
        } => Err(RpcError {
            code: i64::from(code),
            message,
            data: data.and_then(|d| RawValue::from_string(d).ok()),
        }),
        // The bound of an isolated server's instances (SPEC §11): a JSON-RPC error that names it.
        error @ CallError::TooManyInstances { .. } => Err(RpcError::new(-32603, error.to_string())),
        CallError::UnknownTool { name } => Err(RpcError::new(
            -32602,
            format!(
                "no server offers a tool named \"{name}\"; list the tools to see what is published"
            ),
        )),
        // Refused before anything is sent (in `wrap` too: never forwarded as an unknown name).
        withheld @ CallError::Withheld { .. } => Err(RpcError::new(-32602, withheld.to_string())),
        other => to_raw(&json!({
            "content": [{ "type": "text", "text": other.to_string() }],
            "isError": true,
        })),
    }
}

/// The one call of a tool through the hub, both eras: by its public name; in `wrap`, a name the
/// registry does not hold goes to the server as it came, and its own answer comes back.
pub(crate) async fn call_through(
    hub: &Hub,
    mode: Mode,
    name: &str,
    params: &RawValue,
    mut args: CallArgs,
) -> Result<Box<RawValue>, CallError> {
    let sending = Sending::start(None, &mut args);
    let outcome = call_noted(hub, mode, name, params, args, &sending).await;
    sending.answered(outcome.as_deref());
    outcome
}

/// [`call_through`], noting on `sending` the server a name the registry does not hold goes to.
async fn call_noted(
    hub: &Hub,
    mode: Mode,
    name: &str,
    params: &RawValue,
    args: CallArgs,
    sending: &Sending,
) -> Result<Box<RawValue>, CallError> {
    match hub.call_json(name, params, args.clone()).await {
        Err(CallError::UnknownTool { name }) => match (mode, hub.servers().as_slice()) {
            (Mode::Transparent, [server]) => {
                sending.to_server(server);
                hub.send(server, "tools/call", Some(params), args).await
            }
            _ => Err(CallError::UnknownTool { name }),
        },
        other => other,
    }
}

/// [`call_through`] as a future that owns what it needs: a call that outlives the request that
/// made it (one that waits for its client's input between rounds, [`crate::rounds`]). It holds
/// the audit trail of the request that made it, which is written when the call ends.
pub(crate) fn owned_call(
    hub: Arc<Hub>,
    mode: Mode,
    name: String,
    params: Box<RawValue>,
    mut args: CallArgs,
) -> BoxFuture<'static, Result<Box<RawValue>, CallError>> {
    let sending = Sending::start(None, &mut args);
    Box::pin(async move {
        let outcome = call_noted(&hub, mode, &name, &params, args, &sending).await;
        sending.answered(outcome.as_deref());
        outcome
    })
}

impl Proxy {
    /// Any request to the one server of `wrap`, as it came.
    pub(crate) async fn forward(
        &self,
        method: &str,
        params: Option<&RawValue>,
        args: CallArgs,
    ) -> Result<Box<RawValue>, RpcError> {
        match self.hub.servers().as_slice() {
            [server] => {
                // A first page while the server starts on its saved catalog comes from it.
                let first_page = params.is_none_or(|p| member_str(p, "cursor").is_none());
                if first_page && let Some(page) = self.hub.cached_page(server, method) {
                    return Ok(page);
                }
                self.send(server, method, params, args).await
            }
            _ => Err(RpcError::new(-32603, "wrap fronts exactly one server")),
        }
    }

    /// One request to one server; a server's own error comes back as it said it.
    pub(crate) async fn send(
        &self,
        server: &str,
        method: &str,
        params: Option<&RawValue>,
        mut args: CallArgs,
    ) -> Result<Box<RawValue>, RpcError> {
        let sending = Sending::start(Some(server), &mut args);
        let outcome = self.hub.send(server, method, params, args).await;
        sending.answered(outcome.as_deref());
        match outcome {
            Ok(result) => Ok(result),
            Err(error) => call_error(error),
        }
    }

    /// Every server's held part of a list, all at once (each answers from what it holds; one
    /// still starting never holds up another's part, nor waits past `args.timeout`), in config
    /// order.
    pub(crate) async fn held_parts(
        &self,
        method: &str,
        args: &CallArgs,
    ) -> Vec<(String, Arc<[Box<RawValue>]>)> {
        let servers = self.hub.servers();
        let parts = futures::future::join_all(
            servers
                .iter()
                .map(|server| self.hub.list_all(server, method, args)),
        )
        .await;
        servers.into_iter().zip(parts).collect()
    }

    /// `method` of `client` to every server whose `authorize` rule lets it (the others are
    /// left out: nothing goes to them) at once, with the params `params_for` gives it, each
    /// within [`FAN_OUT_WAIT`] (or the caller's shorter deadline); the answers in config order,
    /// a late or failing server's left out.
    pub(crate) async fn fan_out<'p>(
        &self,
        client: &Client,
        method: &str,
        params_for: impl Fn(&str) -> Option<Cow<'p, RawValue>>,
        args: &CallArgs,
    ) -> Vec<(String, Box<RawValue>)> {
        let rules = self.rules();
        // An idle server (SPEC §13) runs nothing to list or set: it is not started for this.
        let servers: Vec<String> = self
            .hub
            .servers()
            .into_iter()
            .filter(|server| {
                self.hub
                    .watch(server)
                    .is_ok_and(|w| w.borrow().state() != ServerState::Idle)
                    && self.may(&rules, client, server, method, Target::None)
            })
            .collect();
        let wait = args.timeout.map_or(FAN_OUT_WAIT, |t| t.min(FAN_OUT_WAIT));
        if !servers.is_empty() {
            trail::fanned_out();
        }
        let params: Vec<Option<Cow<'p, RawValue>>> =
            servers.iter().map(|server| params_for(server)).collect();
        let answers =
            futures::future::join_all(servers.iter().zip(&params).map(|(server, params)| {
                let args = CallArgs {
                    timeout: Some(wait),
                    ..args.clone()
                };
                self.hub.send(server, method, params.as_deref(), args)
            }))
            .await;
        servers
            .into_iter()
            .zip(answers)
            .filter_map(|(server, answer)| match answer {
                Ok(result) => Some((server, result)),
                Err(error @ CallError::TimedOut { .. }) => {
                    tracing::warn!(%server, %method, "late: left out of the answer: {error}");
                    None
                }
                Err(error) => {
                    tracing::debug!(%server, %method, "left out of the answer: {error}");
                    None
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::is_error;

    #[test]
    fn call_errors_keep_the_servers_own_error() {
        let error = call_error(CallError::ServerError {
            server: "s".into(),
            tool: "t".into(),
            code: -32602,
            message: "bad".into(),
            data: Some(r#"{"field":"x"}"#.into()),
        })
        .unwrap_err();
        assert_eq!(
            error.data.as_deref().map(RawValue::get),
            Some(r#"{"field":"x"}"#)
        );
        assert_eq!((error.code, error.message.as_str()), (-32602, "bad"));
        let result = call_error(CallError::Cancelled {
            server: "s".into(),
            tool: "t".into(),
        })
        .unwrap();
        assert!(is_error(&result));
    }
}
