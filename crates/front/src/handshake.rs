//! The handshake: a client's `initialize` (in `wrap`, the server's own answer to the client's
//! own params; in `serve`, the proxy's), the upstream handshake made for a client that never
//! sends one (a 2026-07-28 client's identity, or the proxy's own), and what `serve` says of
//! itself (capabilities, info, instructions).
//!
//! It never opens a server itself: the hub does, with the handshake set here.

use std::sync::Arc;
use std::time::Duration;

use mcp_supervisor::link::RpcError;
use mcp_supervisor::{Hub, Phase};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use crate::client::Client;
use crate::declared::Capabilities;
use crate::json::{member_str, raw_json, string_of, to_raw};
use crate::message::Meta;
use crate::proxy::{Mode, Proxy};

/// How long `initialize` in `wrap` waits for the server's own answer.
pub(crate) const HANDSHAKE_WAIT: Duration = Duration::from_secs(60);

/// The protocol version of the stateless era.
pub const STATELESS_VERSION: &str = mcp_supervisor::core::versions::STATELESS;

/// The protocol versions this face speaks with an `initialize` (the 2025 era), newest first.
pub const SESSION_VERSIONS: [&str; 4] = mcp_supervisor::core::versions::HANDSHAKE;

/// `initialize` params from a 2026-07-28 request's `_meta` (client info and capabilities).
pub(crate) fn identity_of(meta: &Meta) -> Option<Arc<RawValue>> {
    let value = |raw: &Option<Box<RawValue>>| {
        raw.as_deref()
            .and_then(|r| serde_json::from_str::<Value>(r.get()).ok())
    };
    // clientInfo is only recommended in this era: a client that leaves it out is named as the
    // proxy would name itself.
    let info = value(&meta.client_info).unwrap_or_else(
        || json!({ "name": "mcp-supervisor", "version": env!("CARGO_PKG_VERSION") }),
    );
    let capabilities = value(&meta.capabilities).unwrap_or_else(|| json!({}));
    // The client's own version: the server is asked for it (a server that does not speak it
    // is opened with the newest handshake version instead). Only a request of this era
    // decides: one without a version, or with one no server could speak (a client probing),
    // does not.
    let version = meta
        .version
        .as_deref()
        .and_then(string_of)
        .filter(|v| v == STATELESS_VERSION)?;
    // `_meta` marks the handshake as a stateless client's, so the server is opened in that era.
    let params = json!({
        "protocolVersion": version,
        "capabilities": capabilities,
        "clientInfo": info,
        "_meta": { "io.modelcontextprotocol/protocolVersion": version },
    });
    serde_json::value::to_raw_value(&params).ok().map(Arc::from)
}

/// What `serve` can do for its clients: every kind of request it routes.
pub(crate) fn serve_capabilities() -> Value {
    json!({
        "tools": { "listChanged": true },
        "prompts": { "listChanged": true },
        "resources": { "subscribe": true, "listChanged": true },
        "completions": {},
        "logging": {},
        "tasks": { "list": {}, "cancel": {}, "requests": { "tools": { "call": {} } } },
    })
}

/// `serve`'s own name and version.
pub(crate) fn serve_info() -> Value {
    json!({ "name": "mcp-supervisor", "version": env!("CARGO_PKG_VERSION") })
}

pub(crate) const SERVE_INSTRUCTIONS: &str = "mcp-supervisor fronts supervised MCP servers: their tools keep working across crashes and restarts.";

/// `serve`'s instructions: its own sentence, then each server's own instructions (of those whose
/// handshake is known when the client asks), in config order, under the server's name: an
/// agent host reads them as it would read each server's.
pub(crate) fn serve_instructions(hub: &Hub) -> String {
    let mut text = SERVE_INSTRUCTIONS.to_string();
    for server in hub.servers() {
        let own = hub
            .server_info(&server)
            .and_then(|info| member_str(&info, "instructions"))
            .filter(|own| !own.trim().is_empty());
        if let Some(own) = own {
            text.push_str(&format!(
                "\n\n## Server \"{server}\" (its tools, prompts and task ids carry its prefix here)\n\n{own}"
            ));
        }
    }
    text
}

/// The client capabilities the proxy declares to a server it opens in its own name: what it
/// can route to a client (and answers with an error for a client that lacks it).
pub fn routed_capabilities() -> Value {
    json!({
        "roots": { "listChanged": true },
        "sampling": {},
        "elicitation": { "form": {}, "url": {} },
    })
}

impl Proxy {
    /// In `wrap`, a client that starts without `initialize` (a 2026-07-28 client, or one that
    /// asks before it introduces itself) leaves the server to be opened in the proxy's own
    /// name, declaring what the proxy can route.
    pub fn ensure_handshake(&self) {
        if self.hub.has_handshake() {
            return;
        }
        self.hub
            .set_handshake(mcp_supervisor::hub::default_handshake(
                &routed_capabilities(),
            ));
    }

    /// The same for a client of protocol 2026-07-28, from one of its requests' params: such a
    /// client tells who it is and what it can do in each request's `_meta`, and the server is
    /// opened with that (in its own era where the server speaks it, else in an `initialize` of
    /// the newest handshake version), so it shows this client what it would show it directly.
    /// Then it waits (bounded) for the server's first attempt, so that the face can show the
    /// server's own identity. A request without the client's identity does not decide it (the
    /// face refuses it); the next one that has it does.
    pub(crate) async fn ensure_handshake_from(&self, meta: &Meta) {
        if !self.hub.has_handshake() {
            match identity_of(meta) {
                Some(params) => {
                    self.hub.set_handshake(params);
                }
                None => return,
            }
        }
        if self.mode == Mode::Transparent {
            self.hub.wait_started(HANDSHAKE_WAIT).await;
        }
    }

    /// `initialize`: in `wrap`, the client's own params become the server's handshake and the
    /// server's own answer comes back; in `serve`, the proxy answers for itself.
    pub(crate) async fn initialize(
        &self,
        client: &Arc<Client>,
        params: Option<&RawValue>,
    ) -> Result<Box<RawValue>, RpcError> {
        let params = params.ok_or_else(|| RpcError::new(-32602, "initialize needs params"))?;
        #[derive(Deserialize)]
        struct Init<'a> {
            #[serde(rename = "protocolVersion")]
            protocol_version: String,
            #[serde(borrow, default)]
            capabilities: Option<&'a RawValue>,
            #[serde(rename = "clientInfo", borrow, default)]
            client_info: Option<&'a RawValue>,
        }
        let init: Init<'_> = serde_json::from_str(params.get())
            .map_err(|e| RpcError::new(-32602, format!("Invalid params: initialize: {e}")))?;
        for (name, value) in [
            ("capabilities", init.capabilities),
            ("clientInfo", init.client_info),
        ] {
            if value.is_some_and(|v| !v.get().starts_with('{')) {
                return Err(RpcError::new(
                    -32602,
                    format!("Invalid params: initialize: `{name}` is an object"),
                ));
            }
        }
        let declared = init.capabilities.map(|c| Capabilities::read(c.get()));
        client.handshake(declared);
        if self.mode == Mode::Aggregate && declared.is_some_and(|d| d.roots) {
            // The servers were opened before this client came: a server that keeps roots asks
            // again when told they changed.
            for server in self.hub.servers() {
                self.hub
                    .notify(&server, "notifications/roots/list_changed", None);
            }
        }
        if self.mode == Mode::Transparent {
            let servers = self.hub.servers();
            let [server] = servers.as_slice() else {
                return Err(RpcError::new(-32603, "wrap fronts exactly one server"));
            };
            self.hub.set_handshake(params.to_owned().into());
            // A saved answer to the same request: the client goes on at once, while the server
            // starts (its own answer is saved again for the next time).
            if let Some(saved) = self.hub.cached_handshake(server, &init.protocol_version) {
                return Ok(RawValue::from_string(saved.get().to_string())
                    .unwrap_or_else(|_| raw_json("{}")));
            }
            let mut watch = self
                .hub
                .watch(server)
                .map_err(|e| RpcError::new(-32603, e.to_string()))?;
            // An idle server (wrap --on-demand with no saved answer to this request) is started
            // by the handshake; one that goes idle again before its answer was seen (it started
            // only to learn its lists) is started again.
            let ready = tokio::time::timeout(HANDSHAKE_WAIT, async {
                loop {
                    let seen = watch
                        .wait_for(|s| {
                            s.server_info().is_some()
                                || s.state().is_final()
                                || matches!(s.phase, Phase::Idle)
                        })
                        .await
                        .map(|s| s.clone());
                    match seen {
                        Ok(s) if matches!(s.phase, Phase::Idle) => {
                            let _ = self.hub.wake(server);
                            if watch.changed().await.is_err() {
                                break None;
                            }
                        }
                        Ok(s) => break Some(s),
                        Err(_) => break None,
                    }
                }
            })
            .await;
            let info = match ready {
                Ok(Some(snapshot)) => snapshot.server_info().cloned(),
                _ => None,
            };
            return match info {
                // A server opened in the stateless era (for an earlier client of that era)
                // answers this handshake client in its era's shape.
                Some(info) => {
                    let version = if SESSION_VERSIONS.contains(&init.protocol_version.as_str()) {
                        init.protocol_version.as_str()
                    } else {
                        SESSION_VERSIONS[0]
                    };
                    Ok(
                        mcp_supervisor::upstream::as_handshake_result(&info, version)
                            .unwrap_or_else(|| {
                                RawValue::from_string(info.get().to_string())
                                    .unwrap_or_else(|_| raw_json("{}"))
                            }),
                    )
                }
                None => {
                    let status = self.hub.status();
                    let why = status
                        .first()
                        .map(|s| {
                            format!(
                                "server \"{}\" is {}{}",
                                s.name,
                                s.state,
                                s.last_error
                                    .as_ref()
                                    .map(|e| format!(" (last error: {e})"))
                                    .unwrap_or_default()
                            )
                        })
                        .unwrap_or_default();
                    Err(RpcError::new(
                        -32603,
                        format!(
                            "the server did not complete its handshake: {why}; check its command and its stderr"
                        ),
                    ))
                }
            };
        }
        let version = if SESSION_VERSIONS.contains(&init.protocol_version.as_str()) {
            init.protocol_version
        } else {
            SESSION_VERSIONS[0].to_string()
        };
        let result = json!({
            "protocolVersion": version,
            "capabilities": serve_capabilities(),
            "serverInfo": serve_info(),
            "instructions": serve_instructions(&self.hub),
        });
        to_raw(&result)
    }
}
