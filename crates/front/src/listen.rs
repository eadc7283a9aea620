//! `subscriptions/listen` of protocol 2026-07-28: what a listening client asked for (of what the
//! capabilities offer), the servers subscribed to the URIs it watches for as long as the listen
//! lasts, the acknowledgment, and then the change notifications it wants, each tagged with the
//! subscription's id, until the client cancels the request.
//!
//! It never sends a listening client anything it did not ask for, and a client that falls
//! behind is told to list again rather than left stale.

use std::sync::Arc;

use mcp_supervisor::core::members;
use mcp_supervisor::link::RpcError;
use mcp_supervisor::upstream::notification_text;
use mcp_supervisor::{CallArgs, HubEvent};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use crate::client::{RESYNC, Scope, Undelivered};
use crate::fan_out::FAN_OUT_WAIT;
use crate::json::{lock, member_str, to_raw};
use crate::proxy::Proxy;

const META_SUBSCRIPTION: &str = "io.modelcontextprotocol/subscriptionId";

/// What a listen asked for, of what the capabilities offer.
#[derive(Default)]
struct Wants {
    tools: bool,
    prompts: bool,
    resources: bool,
    /// The URIs whose updates it asked for (`None`: it asked for none, or they are not offered).
    uris: Option<Vec<String>>,
}

/// Adds the subscription's id to the `_meta` of what a listen sends.
struct Tag {
    subscription: Box<RawValue>,
}

impl Tag {
    /// A server's params as they came, with the subscription id added to their `_meta`.
    fn apply(&self, params: Option<&RawValue>) -> Option<Box<RawValue>> {
        let empty = mcp_supervisor::link::empty_object();
        let params = params
            .filter(|p| serde_json::from_str::<members::Members<'_>>(p.get()).is_ok())
            .unwrap_or(&empty);
        match members::member(params, "_meta") {
            Some(_) => {
                members::with_member_at(params, &["_meta", META_SUBSCRIPTION], &self.subscription)
            }
            None => {
                let meta = members::with_member(&empty, META_SUBSCRIPTION, &self.subscription)?;
                members::with_member(params, "_meta", &meta)
            }
        }
    }

    /// `method` with `params`, tagged, to the listen's client; `false` once it has gone.
    fn deliver(&self, scope: &Scope, method: &str, params: Option<&RawValue>) -> bool {
        let text = notification_text(method, self.apply(params).as_deref());
        scope.deliver(text) != Err(Undelivered::Gone)
    }
}

impl Proxy {
    /// `subscriptions/listen`: the acknowledgment first, then the change notifications the
    /// client asked for (of those the capabilities offer), each with the subscription's id,
    /// until the client cancels the request.
    pub(crate) async fn listen(
        &self,
        scope: &Arc<Scope>,
        id: &RawValue,
        params: Option<&RawValue>,
        cancel: CancellationToken,
    ) -> Result<Box<RawValue>, RpcError> {
        let wants = self.listen_wants(params);
        // Each URI subscribed upstream (a shared server while any client is, as for
        // `resources/subscribe`), before the acknowledgment, which names only those that took;
        // they end with the listen (its cancellation over stdio, where the client stays) or with
        // its client (the end of an HTTP listen's request).
        let uris = match &wants.uris {
            Some(asked) => Some(self.listen_subscribe(scope, asked, &cancel).await),
            None => None,
        };
        let mut accepted = serde_json::Map::new();
        for (name, on) in [
            ("toolsListChanged", wants.tools),
            ("promptsListChanged", wants.prompts),
            ("resourcesListChanged", wants.resources),
        ] {
            if on {
                accepted.insert(name.into(), Value::Bool(true));
            }
        }
        if let Some(uris) = &uris {
            accepted.insert("resourceSubscriptions".into(), json!(uris));
        }
        let tag = Tag {
            subscription: id.to_owned(),
        };
        let ack = to_raw(&json!({ "notifications": accepted }))?;
        let held = uris.unwrap_or_default();
        lock(&scope.client.asked).listen(&held);
        // Subscribed before the acknowledgment: nothing after it is missed.
        let events = self.hub.subscribe();
        tag.deliver(
            scope,
            "notifications/subscriptions/acknowledged",
            Some(&ack),
        );
        relay(scope, &wants, &held, &tag, events, &cancel).await;
        self.end_listen(scope, &held).await;
        to_raw(
            &json!({ "resultType": "complete", "_meta": { META_SUBSCRIPTION: tag.subscription } }),
        )
    }

    /// What a listen's params ask for, of what the capabilities offer.
    fn listen_wants(&self, params: Option<&RawValue>) -> Wants {
        #[derive(Deserialize, Default)]
        #[serde(rename_all = "camelCase")]
        struct Filter {
            #[serde(default)]
            tools_list_changed: Option<bool>,
            #[serde(default)]
            prompts_list_changed: Option<bool>,
            #[serde(default)]
            resources_list_changed: Option<bool>,
            #[serde(default)]
            resource_subscriptions: Option<Vec<String>>,
        }
        #[derive(Deserialize)]
        struct Listen {
            #[serde(default)]
            notifications: Option<Filter>,
        }
        let requested = params
            .and_then(|p| serde_json::from_str::<Listen>(p.get()).ok())
            .and_then(|l| l.notifications)
            .unwrap_or_default();
        let offered = self.offered_capabilities();
        let offers = |kind: &str, member: &str| {
            offered.pointer(&format!("/{kind}/{member}")) == Some(&Value::Bool(true))
        };
        Wants {
            tools: requested.tools_list_changed == Some(true) && offers("tools", "listChanged"),
            prompts: requested.prompts_list_changed == Some(true)
                && offers("prompts", "listChanged"),
            resources: requested.resources_list_changed == Some(true)
                && offers("resources", "listChanged"),
            uris: requested
                .resource_subscriptions
                .filter(|_| offers("resources", "subscribe")),
        }
    }

    /// Subscribe each URI a listen asked for; the ones a server took.
    async fn listen_subscribe(
        &self,
        scope: &Arc<Scope>,
        asked: &[String],
        cancel: &CancellationToken,
    ) -> Vec<String> {
        let args = CallArgs {
            cancel: Some(cancel.clone()),
            origin: Some(scope.whole()),
            ..CallArgs::default()
        };
        let mut taken = Vec::new();
        for uri in asked {
            match self
                .subscription(
                    scope,
                    "resources/subscribe",
                    uri.clone(),
                    None,
                    args.clone(),
                )
                .await
            {
                Ok(_) => taken.push(uri.clone()),
                Err(error) => {
                    tracing::info!(%uri, "a listen's subscription was not taken: {}", error.message)
                }
            }
        }
        taken
    }

    /// A listen that subscribed `uris` ended while its client stays (a client over stdio
    /// cancelled it): each URI no other listen of the client holds is unsubscribed, as a
    /// `resources/unsubscribe` would be. A client that has gone is left to
    /// [`Proxy::disconnect`], which unsubscribes all it held.
    async fn end_listen(&self, scope: &Arc<Scope>, uris: &[String]) {
        let released = lock(&scope.client.asked).unlisten(uris);
        if released.is_empty() || scope.client.is_gone() {
            return;
        }
        let args = CallArgs {
            origin: Some(scope.whole()),
            timeout: Some(FAN_OUT_WAIT),
            ..CallArgs::default()
        };
        for uri in released {
            if let Err(error) = self
                .subscription(
                    scope,
                    "resources/unsubscribe",
                    uri.clone(),
                    None,
                    args.clone(),
                )
                .await
            {
                tracing::info!(%uri, "unsubscribing at the end of a listen: {}", error.message);
            }
        }
    }
}

/// The hub's events a listen wants, tagged, to its client, until it is cancelled, its client
/// goes, or the hub ends.
async fn relay(
    scope: &Scope,
    wants: &Wants,
    held: &[String],
    tag: &Tag,
    mut events: broadcast::Receiver<HubEvent>,
    cancel: &CancellationToken,
) {
    loop {
        let event = tokio::select! {
            () = cancel.cancelled() => return,
            event = events.recv() => event,
        };
        let delivered = match event {
            Ok(HubEvent::ToolsChanged) if wants.tools => {
                tag.deliver(scope, "notifications/tools/list_changed", None)
            }
            Ok(HubEvent::Notification(n)) => {
                let wanted = match n.method.as_str() {
                    "notifications/prompts/list_changed" => wants.prompts,
                    "notifications/resources/list_changed" => wants.resources,
                    "notifications/resources/updated" => {
                        let uri = n.params.as_deref().and_then(|p| member_str(p, "uri"));
                        uri.is_some_and(|uri| held.contains(&uri))
                    }
                    _ => false,
                };
                !wanted || tag.deliver(scope, &n.method, n.params.as_deref())
            }
            Err(broadcast::error::RecvError::Lagged(missed)) => {
                // Missed events are gone: the listener is told to list again (and to read
                // again each resource it watches) rather than left stale without a word.
                tracing::warn!(
                    "a listening client missed {missed} server events; telling it to list again"
                );
                resync(scope, wants, held, tag)
            }
            Ok(_) => true,
            Err(broadcast::error::RecvError::Closed) => return,
        };
        if !delivered {
            return;
        }
    }
}

/// Tell a listener that missed events to list again what it watches, and to read again each
/// resource it holds; `false` once its client has gone.
fn resync(scope: &Scope, wants: &Wants, held: &[String], tag: &Tag) -> bool {
    let lists = [wants.tools, wants.prompts, wants.resources]
        .into_iter()
        .zip(RESYNC)
        .filter(|(wanted, _)| *wanted)
        .all(|(_, method)| tag.deliver(scope, method, None));
    lists
        && held.iter().all(|uri| match to_raw(&json!({ "uri": uri })) {
            Ok(params) => tag.deliver(scope, "notifications/resources/updated", Some(&params)),
            Err(_) => true,
        })
}
