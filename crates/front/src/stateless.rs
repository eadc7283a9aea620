//! The message face for clients of protocol 2026-07-28 (the stateless era): no `initialize`,
//! the client's identity in each request's `_meta`, `server/discover`, `subscriptions/listen`,
//! results that say their `resultType`; its `tools/call` takes input rounds (SEP-2322) for a
//! server of the handshake era that asks such a client something during a call (in
//! `tools.rs`, [`crate::rounds`]).
//!
//! It owns only what SPEC §10 gives the proxy for such a client: the checks of a request's
//! `_meta` (version and capabilities), the upstream handshake made from it, `serve`'s own
//! discovery, the subscriptions it serves from the hub's events, and the members this era
//! requires of a result (`resultType`, a list's cache hints) where an upstream of the handshake
//! era left them out. Everything else passes whole, as JSON text: in `wrap`, a server of this
//! era gives its own answers, its discovery included. It never sends such a client a request,
//! and never touches a supervisor or a generation: everything goes through the hub.

use std::sync::Arc;

use mcp_supervisor::CallArgs;
use mcp_supervisor::link::RpcError;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::client::{Client, Era, Scope};
use crate::handshake::{STATELESS_VERSION, serve_capabilities, serve_info, serve_instructions};
use crate::json::{lock, member_str, raw_json, string_of, to_raw};
use crate::message::{Head, META_CAPABILITIES, META_VERSION};
use crate::proxy::{Mode, Proxy};

const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";

/// The error code of a request whose protocol version is not served.
const UNSUPPORTED_VERSION: i64 = -32022;

/// Methods of the handshake era that protocol 2026-07-28 removed: `serve` answers them with
/// "method not found" for such a client (in `wrap` the server answers for itself).
const REMOVED: [&str; 5] = [
    "initialize",
    "ping",
    "logging/setLevel",
    "resources/subscribe",
    "resources/unsubscribe",
];

/// Results whose complete form carries cache hints (`ttlMs`, `cacheScope`) in this era.
const CACHED: [&str; 6] = [
    "server/discover",
    "tools/list",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "resources/read",
];

/// Whether a client's request is of the stateless era: the client never sent `initialize`, and
/// this request (or an earlier one of its) is `server/discover` or names its protocol version
/// in `_meta`. The first such request marks the client.
pub fn is_stateless(client: &Client, method: &str, head: &Head) -> bool {
    if method == "initialize" {
        return false;
    }
    let mut era = lock(&client.era);
    match &*era {
        Era::Handshake { .. } => false,
        Era::Stateless => true,
        Era::Unknown => {
            let stateless = method == "server/discover" || head.meta.version.is_some();
            if stateless {
                *era = Era::Stateless;
            }
            stateless
        }
    }
}

impl Proxy {
    /// A request of a client of protocol 2026-07-28, answered with a result of that era or
    /// an error.
    pub(crate) async fn stateless(
        self: &Arc<Self>,
        scope: &Arc<Scope>,
        id: &RawValue,
        method: &str,
        params: Option<&RawValue>,
        head: &Head,
        cancel: CancellationToken,
    ) -> Result<Box<RawValue>, RpcError> {
        let inline = &head.meta;
        let version = inline.version.as_deref().and_then(string_of);
        let mut missing = Vec::new();
        if version.is_none() {
            missing.push(META_VERSION);
        }
        if !inline
            .capabilities
            .as_deref()
            .is_some_and(|c| c.get().starts_with('{'))
        {
            missing.push(META_CAPABILITIES);
        }
        if !missing.is_empty() {
            return Err(RpcError::new(
                -32602,
                format!(
                    "request _meta is missing or has malformed required fields: {}",
                    missing.join(", ")
                ),
            ));
        }
        if let Some(version) = version.filter(|v| v != STATELESS_VERSION) {
            return Err(RpcError {
                code: UNSUPPORTED_VERSION,
                message: "Unsupported protocol version".into(),
                data: to_raw(&json!({ "supported": [STATELESS_VERSION], "requested": version }))
                    .ok(),
            });
        }
        self.spend_top(scope)?;
        // The first such request opens the server with this client's identity.
        self.ensure_handshake_from(&head.meta).await;
        self.ensure_handshake();
        let args = CallArgs {
            cancel: Some(cancel.clone()),
            // A server of this era's input rounds reach the client whole.
            relays_input: true,
            ..CallArgs::default()
        };
        // What only this era has is answered here; everything else takes the one dispatcher,
        // and its result is completed as this era requires.
        let result = match method {
            "server/discover" => self.discover(params, args).await?,
            "subscriptions/listen" => return self.listen(scope, id, params, cancel).await,
            // `wrap`'s server answers for itself what this era removed.
            _ if REMOVED.contains(&method) => match self.mode {
                Mode::Transparent => self.forward(method, params, args).await?,
                Mode::Aggregate => {
                    return Err(RpcError::new(
                        -32601,
                        format!("Method not found: {method} (removed in protocol 2026-07-28)"),
                    ));
                }
            },
            "tools/list" if self.mode == Mode::Transparent && !self.searching() => {
                self.stateless_tools(&scope.client, params, args).await?
            }
            // A call of this era takes its input rounds (the client answers the server's
            // requests by calling again).
            "tools/call" => self.call_with_rounds(scope, params, head, cancel).await?,
            _ => self.route(scope, method, params, head, args).await?,
        };
        Ok(complete(method, result))
    }

    /// `tools/list` of this era in `wrap`: the server's own list, whole (its own members of this
    /// era too), less the tools its pins withhold; the registry's while it is down.
    pub(crate) async fn stateless_tools(
        self: &Arc<Self>,
        client: &crate::client::Client,
        params: Option<&RawValue>,
        args: CallArgs,
    ) -> Result<Box<RawValue>, RpcError> {
        match self.forward("tools/list", params, args).await {
            Ok(list) => Ok(match self.hub.servers().as_slice() {
                [server] => self.hub.without_withheld(server, list),
                _ => list,
            }),
            Err(_) => self.list_tools(client).await,
        }
    }

    /// `server/discover`: in `wrap`, the server's own answer (a server of the handshake era's
    /// from its `initialize` answer); in `serve`, the proxy's.
    async fn discover(
        &self,
        params: Option<&RawValue>,
        args: CallArgs,
    ) -> Result<Box<RawValue>, RpcError> {
        let (capabilities, info, instructions) = match (self.mode, self.hub.servers().as_slice()) {
            (Mode::Transparent, [server]) => {
                let Some(init) = self.hub.server_info(server) else {
                    return Err(RpcError::new(
                        -32603,
                        format!(
                            "server \"{server}\" has not started yet; check its command and its stderr"
                        ),
                    ));
                };
                if member_str(&init, "protocolVersion").as_deref() == Some(STATELESS_VERSION) {
                    return self.forward("server/discover", params, args).await;
                }
                let init: Value = serde_json::from_str(init.get())
                    .map_err(|e| RpcError::new(-32603, e.to_string()))?;
                (
                    init.get("capabilities").cloned().unwrap_or(json!({})),
                    init.get("serverInfo").cloned(),
                    init.get("instructions").cloned(),
                )
            }
            _ => (
                serve_capabilities(),
                Some(serve_info()),
                Some(Value::String(serve_instructions(&self.hub))),
            ),
        };
        let mut result = json!({
            "resultType": "complete",
            "supportedVersions": [STATELESS_VERSION],
            "capabilities": capabilities,
            "ttlMs": 0,
            "cacheScope": "private",
        });
        if let Some(instructions) = instructions {
            result["instructions"] = instructions;
        }
        if let Some(info) = info {
            result["_meta"] = json!({ META_SERVER_INFO: info });
        }
        to_raw(&result)
    }

    /// The capabilities a client of this era is shown: the server's own in `wrap`, `serve`'s
    /// in `serve`.
    pub(crate) fn offered_capabilities(&self) -> Value {
        match (self.mode, self.hub.servers().as_slice()) {
            (Mode::Transparent, [server]) => self
                .hub
                .server_info(server)
                .and_then(|init| serde_json::from_str::<Value>(init.get()).ok())
                .and_then(|mut init| init.get_mut("capabilities").map(Value::take))
                .unwrap_or_else(|| json!({})),
            _ => serve_capabilities(),
        }
    }
}

/// A result as this era requires it: `resultType` (`"complete"` when absent) and, for a
/// complete result of a cached kind, `ttlMs` and `cacheScope` when absent. Added in front, as
/// text; everything else stays as it came.
pub fn complete(method: &str, result: Box<RawValue>) -> Box<RawValue> {
    #[derive(Deserialize)]
    struct Present<'a> {
        #[serde(rename = "resultType", borrow, default)]
        result_type: Option<std::borrow::Cow<'a, str>>,
        #[serde(rename = "ttlMs", default)]
        ttl: Option<serde::de::IgnoredAny>,
        #[serde(rename = "cacheScope", default)]
        scope: Option<serde::de::IgnoredAny>,
    }
    let text = result.get();
    let Some(rest) = text.strip_prefix('{') else {
        return result;
    };
    let Ok(present) = serde_json::from_str::<Present<'_>>(text) else {
        return result;
    };
    let mut head = String::new();
    let complete = match &present.result_type {
        None => {
            head.push_str(r#""resultType":"complete","#);
            true
        }
        Some(kind) => kind == "complete",
    };
    if complete && CACHED.contains(&method) {
        if present.ttl.is_none() {
            head.push_str(r#""ttlMs":0,"#);
        }
        if present.scope.is_none() {
            head.push_str(r#""cacheScope":"private","#);
        }
    }
    if head.is_empty() {
        return result;
    }
    if rest.trim_start().starts_with('}') {
        head.pop();
    }
    RawValue::from_string(format!("{{{head}{rest}")).unwrap_or_else(|_| raw_json(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(text: &str) -> Box<RawValue> {
        RawValue::from_string(text.to_string()).unwrap()
    }

    #[test]
    fn results_get_what_the_era_requires_and_keep_the_rest() {
        assert_eq!(
            complete("tools/call", raw(r#"{"content":[],"x-unknown":1}"#)).get(),
            r#"{"resultType":"complete","content":[],"x-unknown":1}"#
        );
        assert_eq!(
            complete("tools/list", raw("{}")).get(),
            r#"{"resultType":"complete","ttlMs":0,"cacheScope":"private"}"#
        );
        let whole = r#"{"resultType":"complete","ttlMs":5,"cacheScope":"public","tools":[]}"#;
        assert_eq!(complete("tools/list", raw(whole)).get(), whole);
        let asks = r#"{"resultType":"input_required","inputRequests":{}}"#;
        assert_eq!(complete("resources/read", raw(asks)).get(), asks);
    }
}
