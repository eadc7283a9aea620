//! What clients ask of servers they share: resource subscriptions (a server is subscribed
//! while any client is), log levels (the most verbose asked; each client gets its own level's
//! messages), a server's notifications filtered per client, and what a new generation is asked
//! again. The rules are [`crate::asked`]'s, as plain functions.
//!
//! One change of a server's subscriptions at a time, per server: a hung server never stalls
//! another's.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use mcp_supervisor::CallArgs;
use mcp_supervisor::core::members;
use mcp_supervisor::link::RpcError;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use crate::client::{Client, Scope};
use crate::fan_out::FAN_OUT_WAIT;
use crate::json::{lock, member_str, raw_json, to_raw};
use crate::proxy::{Mode, Proxy};

impl Proxy {
    /// `resources/subscribe` or `resources/unsubscribe` of `uri` by a client, with its own
    /// `params` (or `{"uri": ...}` when it sent none: a `subscriptions/listen` of the 2026-07-28
    /// era). A shared server is subscribed to a URI while at least one client is, so one
    /// client's unsubscribe never ends another's subscription; an isolated server's instance
    /// is the client's own.
    pub(crate) async fn subscription(
        &self,
        scope: &Arc<Scope>,
        method: &str,
        uri: String,
        params: Option<&RawValue>,
        args: CallArgs,
    ) -> Result<Box<RawValue>, RpcError> {
        let made;
        let params = match params {
            Some(params) => Some(params),
            None => {
                made = to_raw(&json!({ "uri": uri }))?;
                Some(&*made)
            }
        };
        let server = match self.mode {
            Mode::Transparent => match self.hub.servers().as_slice() {
                [server] => server.clone(),
                _ => return Err(RpcError::new(-32603, "wrap fronts exactly one server")),
            },
            Mode::Aggregate => self.resource_owner(&uri, &args).await?,
        };
        // Subscribing to a resource is reading it as it changes: the same rule judges it.
        self.admit(
            &scope.client,
            &server,
            method,
            mcp_supervisor::core::authorize::Target::Resource(&uri),
        )?;
        if self.hub.isolated(&server) {
            return self.send(&server, method, params, args).await;
        }
        let key = (server.clone(), uri);
        let one_at_a_time = self.subscribing(&server);
        let _one_at_a_time = one_at_a_time.lock().await;
        let others = self.subscribed(&key, Some(&scope.client));
        if method == "resources/subscribe" {
            let answer = match others {
                true => raw_json("{}"),
                false => self.send(&server, method, params, args).await?,
            };
            lock(&scope.client.asked).subscriptions.insert(key);
            Ok(answer)
        } else {
            lock(&scope.client.asked).subscriptions.remove(&key);
            match others {
                true => Ok(raw_json("{}")),
                false => self.send(&server, method, params, args).await,
            }
        }
    }

    /// `logging/setLevel` of a client: kept as its own level; a shared server is asked for the
    /// most verbose level any client set (an isolated instance for its client's), and each
    /// client gets only the messages of its own level ([`crate::asked::wants_log`]). In `wrap`
    /// the server's own answer comes back (or the denial of its `authorize` rule); in `serve`
    /// the proxy answers, and a server whose rule denies the client is not asked.
    pub(crate) async fn set_level(
        &self,
        scope: &Arc<Scope>,
        params: Option<&RawValue>,
        args: CallArgs,
    ) -> Result<Box<RawValue>, RpcError> {
        // In `wrap` the one server's rule judges it before anything is kept.
        if let (Mode::Transparent, [server]) = (self.mode, self.hub.servers().as_slice()) {
            let none = mcp_supervisor::core::authorize::Target::None;
            self.admit(&scope.client, server, "logging/setLevel", none)?;
        }
        let rank = params
            .and_then(|p| member_str(p, "level"))
            .as_deref()
            .and_then(crate::asked::level_rank);
        if let Some(rank) = rank {
            lock(&scope.client.asked).level = Some(rank);
        }
        // What a shared server is asked for: the most verbose level of every client.
        let shared = rank.map(|rank| {
            let levels = self
                .clients()
                .iter()
                .map(|c| lock(&c.asked).level)
                .collect::<Vec<_>>();
            crate::asked::upstream_level(levels).unwrap_or(rank)
        });
        // The params for one server: the client's own, with only the level changed where a
        // shared server is asked for a more verbose one.
        let params_for = |server: &str| -> Option<Cow<'_, RawValue>> {
            let params = params?;
            let (Some(rank), Some(level)) = (rank, shared) else {
                return Some(Cow::Borrowed(params)); // not a level: the server judges it
            };
            if self.hub.isolated(server) {
                return Some(Cow::Borrowed(params));
            }
            lock(&self.levels_asked).insert(server.to_string(), level);
            if level == rank {
                return Some(Cow::Borrowed(params));
            }
            let name = to_raw(&Value::String(
                crate::asked::LEVELS[usize::from(level)].to_string(),
            ))
            .ok()?;
            members::with_member(params, "level", &name).map(Cow::Owned)
        };
        match self.mode {
            Mode::Transparent => match self.hub.servers().as_slice() {
                [server] => {
                    let params = params_for(server);
                    self.send(server, "logging/setLevel", params.as_deref(), args)
                        .await
                }
                _ => Err(RpcError::new(-32603, "wrap fronts exactly one server")),
            },
            Mode::Aggregate => {
                // A server without logging answers "method not found"; the others take it. A
                // server whose rule denies it the client is not asked.
                self.fan_out(&scope.client, "logging/setLevel", params_for, &args)
                    .await;
                Ok(raw_json("{}"))
            }
        }
    }

    /// A server's notification to the clients that want it (SPEC §11, [`crate::asked`]): a
    /// `resources/updated` to the clients subscribed to its URI, a log message to the clients
    /// whose level it meets, anything else to every client.
    pub(crate) fn tell_clients_of(
        &self,
        server: &str,
        method: &str,
        params: Option<&RawValue>,
        text: &str,
    ) {
        let member = |name| params.and_then(|p| member_str(p, name));
        let wanted: Box<dyn Fn(&crate::asked::Asked) -> bool> = match method {
            "notifications/resources/updated" => {
                let key = (server.to_string(), member("uri").unwrap_or_default());
                let anyone = self.subscribed(&key, None);
                Box::new(move |asked| crate::asked::wants_update(asked, anyone, &key))
            }
            "notifications/message" => {
                let level = member("level")
                    .as_deref()
                    .and_then(crate::asked::level_rank);
                let upstream = lock(&self.levels_asked).get(server).copied();
                Box::new(move |asked| crate::asked::wants_log(asked.level, level, upstream))
            }
            _ => Box::new(|_| true),
        };
        for client in self.clients() {
            if client.is_initialized() && wanted(&lock(&client.asked)) {
                let _ = client.send(text.to_string());
            }
        }
    }

    /// Whether a client (other than `except`) is subscribed to `key`.
    pub(crate) fn subscribed(&self, key: &(String, String), except: Option<&Arc<Client>>) -> bool {
        self.clients().iter().any(|c| {
            except.is_none_or(|e| !Arc::ptr_eq(c, e)) && lock(&c.asked).subscriptions.contains(key)
        })
    }

    /// Ask a shared server `method` with `params` on the proxy's own behalf (no client's call),
    /// within [`FAN_OUT_WAIT`].
    pub(crate) async fn ask_shared(
        &self,
        server: &str,
        method: &str,
        params: Value,
    ) -> Result<(), RpcError> {
        let params = to_raw(&params)?;
        let args = CallArgs {
            timeout: Some(FAN_OUT_WAIT),
            ..CallArgs::default()
        };
        self.hub
            .send(server, method, Some(&params), args)
            .await
            .map(drop)
            .map_err(|e| RpcError::new(-32603, e.to_string()))
    }

    /// A client that left: the shared servers' URIs no other client is subscribed to are
    /// unsubscribed (in the background; a server that fails to take it keeps sending updates
    /// nobody gets).
    pub(crate) fn unsubscribe_left(self: &Arc<Self>, left: &Client) {
        let mine = std::mem::take(&mut lock(&left.asked).subscriptions);
        if mine.is_empty() {
            return;
        }
        // One task per server (so a hung one holds up only its own URIs), each in turn with
        // that server's other subscription changes.
        let mut by_server: HashMap<String, Vec<String>> = HashMap::new();
        for (server, uri) in mine {
            by_server.entry(server).or_default().push(uri);
        }
        for (server, uris) in by_server {
            let proxy = self.clone();
            tokio::spawn(async move {
                let one_at_a_time = proxy.subscribing(&server);
                let _one_at_a_time = one_at_a_time.lock().await;
                for uri in uris {
                    let key = (server.clone(), uri);
                    if proxy.subscribed(&key, None) {
                        continue;
                    }
                    let uri = key.1;
                    let params = json!({ "uri": uri });
                    if let Err(error) = proxy
                        .ask_shared(&server, "resources/unsubscribe", params)
                        .await
                    {
                        tracing::debug!(%server, %uri, "unsubscribing for a client that left: {}", error.message);
                    }
                }
            });
        }
    }

    /// The lock that orders `server`'s subscription changes (one at a time per server).
    fn subscribing(&self, server: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = lock(&self.subscribing);
        // A server that left the config leaves its lock behind: drop those no one holds.
        if locks.len() > self.hub.servers().len() + 8 {
            locks.retain(|_, l| Arc::strong_count(l) > 1);
        }
        locks.entry(server.to_string()).or_default().clone()
    }

    /// A shared server's new generation (a respawn, a restart) is given what the clients asked
    /// of the one before: their subscriptions and the log level (in the background, each within
    /// [`FAN_OUT_WAIT`]), so that a recovery does not silently end them.
    pub(crate) fn restore(self: &Arc<Self>, server: &str, generation: u64) {
        if lock(&self.restored).insert(server.to_string(), generation) == Some(generation)
            || self.hub.isolated(server)
        {
            return;
        }
        let uris: std::collections::BTreeSet<String> = self
            .clients()
            .iter()
            .flat_map(|c| {
                lock(&c.asked)
                    .subscriptions
                    .iter()
                    .filter(|(s, _)| s == server)
                    .map(|(_, uri)| uri.clone())
                    .collect::<Vec<_>>()
            })
            .collect();
        let level = lock(&self.levels_asked).get(server).copied();
        if uris.is_empty() && level.is_none() {
            return;
        }
        let (proxy, server) = (self.clone(), server.to_string());
        tokio::spawn(async move {
            let level = level.map(|l| json!({ "level": crate::asked::LEVELS[usize::from(l)] }));
            let asks = uris
                .into_iter()
                .map(|uri| ("resources/subscribe", json!({ "uri": uri })))
                .chain(level.map(|l| ("logging/setLevel", l)));
            for (method, params) in asks {
                match proxy.ask_shared(&server, method, params).await {
                    Ok(()) => tracing::debug!(%server, %method, "asked again of a new generation"),
                    Err(error) => {
                        tracing::warn!(%server, %method, "could not ask it again of a new generation: {}", error.message)
                    }
                }
            }
        });
    }
}
