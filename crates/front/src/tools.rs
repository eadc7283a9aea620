//! Tools: the aggregate `tools/list` from the registry, and `tools/call` by public name
//! through the hub's one call path ([`crate::fan_out::call_through`]), both eras, its outcome
//! counted and answered ([`Proxy::call_answer`]); a 2026-07-28 call runs with its input rounds
//! ([`Proxy::call_with_rounds`], the rounds held by [`crate::rounds`]).
//!
//! It never retries or classifies a failure: the hub's supervisor does.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use mcp_supervisor::link::RpcError;
use mcp_supervisor::upstream::notification_text;
use mcp_supervisor::{CallArgs, CallError};
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use mcp_supervisor::core::authorize::Target;

use crate::client::{Client, Scope};
use crate::declared::Capabilities;
use crate::fan_out::{call_error, call_through, owned_call};
use crate::json::{is_error, to_raw};
use crate::message::Head;
use crate::proxy::{Mode, Proxy};
use crate::rounds::Rounds;
use crate::tasks::namespace_task;

/// How long the first tools/list waits for servers still on their first attempt.
pub(crate) const STARTUP_WAIT: Duration = Duration::from_secs(10);

/// A client's `tools/call`, resolved ([`Proxy::named_call`]).
pub(crate) enum Named<'a> {
    /// Call the tool of this public name with these params (the client's own, unless search
    /// mode made them).
    Call {
        name: Cow<'a, str>,
        params: Cow<'a, RawValue>,
        /// Where the name lies in the params as the client sent them (`None` when search mode
        /// made the params): the hub's rename writes there ([`CallArgs::name_at`]).
        name_at: Option<std::ops::Range<usize>>,
    },
    /// Answered here (search mode's `search_tools`, or a `call_tool` that names nothing).
    Answer(Result<Box<RawValue>, RpcError>),
}

impl Proxy {
    /// The aggregate tool list, from the registry: every definition whole, under its public
    /// name. A client that lists right after starting us sees every server that comes up.
    /// Each caller sees only the tools its servers' `authorize` rules let it call.
    pub(crate) async fn list_tools(&self, client: &Client) -> Result<Box<RawValue>, RpcError> {
        if self.searching() {
            return to_raw(&crate::exposure::listed());
        }
        // A server still starting with a saved catalog has its list already: no wait for it.
        self.hub.wait_listed(STARTUP_WAIT).await;
        let mut tools = self.hub.tools();
        let rules = self.rules();
        if rules.any_rule() {
            let allowed: Vec<_> = tools
                .iter()
                .filter(|t| {
                    self.may(
                        &rules,
                        client,
                        &t.server,
                        "tools/call",
                        Target::Tool(&t.upstream_name),
                    )
                })
                .cloned()
                .collect();
            tools = Arc::new(allowed);
        }
        let mut text = String::with_capacity(
            16 + tools
                .iter()
                .map(|t| t.definition.get().len() + 1)
                .sum::<usize>(),
        );
        text.push_str(r#"{"tools":["#);
        for (i, tool) in tools.iter().enumerate() {
            if i > 0 {
                text.push(',');
            }
            text.push_str(tool.definition.get());
        }
        text.push_str("]}");
        RawValue::from_string(text).map_err(|e| RpcError::new(-32603, e.to_string()))
    }

    /// `tools/call` by public name, through the hub's one call path. In `serve` a task-augmented
    /// call's task id is namespaced by its server.
    pub(crate) async fn call_tool(
        &self,
        client: &Client,
        params: Option<&RawValue>,
        head: &Head,
        args: CallArgs,
    ) -> Result<Box<RawValue>, RpcError> {
        let (name, params, name_at) = match self.named_call(client, params, head).await? {
            Named::Call {
                name,
                params,
                name_at,
            } => (name, params, name_at),
            Named::Answer(answer) => return answer,
        };
        let record = self.metrics.start();
        let args = CallArgs { name_at, ..args };
        let outcome = call_through(&self.hub, self.mode, &name, &params, args).await;
        self.call_answer(client, &name, outcome, record)
    }

    /// What a client's `tools/call` names: the tool's public name and the params to send it, or
    /// in search mode `search_tools`' answer (`call_tool` names the call). Both eras.
    ///
    /// A call its server's `authorize` rule denies the client, or past its rate limit, is
    /// refused here, before anything goes upstream: a direct call and one that search mode's
    /// `call_tool` names alike, and in `wrap` one the registry does not hold (it goes to the
    /// server as it came, so it is judged by its name there). `search_tools` shows only what
    /// the client may call.
    pub(crate) async fn named_call<'a>(
        &self,
        client: &Client,
        params: Option<&'a RawValue>,
        head: &'a Head,
    ) -> Result<Named<'a>, RpcError> {
        let named = self.unjudged_call(client, params, head).await?;
        if let Named::Call { name, .. } = &named {
            match (self.hub.registry().route(name), self.mode) {
                (Some(route), _) => self.admit(
                    client,
                    &route.server,
                    "tools/call",
                    Target::Tool(&route.upstream_name),
                )?,
                (None, Mode::Transparent) => {
                    if let [server] = self.hub.servers().as_slice() {
                        self.admit(client, server, "tools/call", Target::Tool(name))?;
                    }
                }
                // `serve` answers a name it does not hold itself: nothing goes upstream.
                (None, Mode::Aggregate) => {}
            }
        }
        Ok(named)
    }

    async fn unjudged_call<'a>(
        &self,
        client: &Client,
        params: Option<&'a RawValue>,
        head: &'a Head,
    ) -> Result<Named<'a>, RpcError> {
        let params = params.ok_or_else(|| RpcError::new(-32602, "tools/call needs params"))?;
        let name = head
            .name
            .as_deref()
            .ok_or_else(|| RpcError::new(-32602, "Invalid params: tools/call needs a `name`"))?;
        if !self.searching() {
            return Ok(Named::Call {
                name: Cow::Borrowed(name),
                params: Cow::Borrowed(params),
                name_at: head.name_at.clone(),
            });
        }
        let rules = self.rules();
        let shown = |tool: &mcp_supervisor::PublishedTool| {
            self.may(
                &rules,
                client,
                &tool.server,
                "tools/call",
                Target::Tool(&tool.upstream_name),
            )
        };
        Ok(
            match self
                .search
                .exposed(&self.hub, self.mode, name, params, &shown)
                .await
            {
                crate::exposure::Exposed::Answer(answer) => Named::Answer(answer),
                crate::exposure::Exposed::Call { name, params } => Named::Call {
                    name: Cow::Owned(name),
                    params: Cow::Owned(params),
                    name_at: None,
                },
            },
        )
    }

    /// A call's outcome as `client`'s answer (both eras): counted in the metrics, a failure
    /// as the error or result the client is owed, a task id namespaced in `serve`, and a task
    /// it made the client's caller's.
    pub(crate) fn call_answer(
        &self,
        client: &Client,
        name: &str,
        outcome: Result<Box<RawValue>, CallError>,
        record: crate::metrics::CallRecord<'_>,
    ) -> Result<Box<RawValue>, RpcError> {
        record.finish(crate::metrics::outcome(
            outcome.as_ref().map(|r| is_error(r)),
        ));
        let mut result = outcome.or_else(call_error)?;
        if self.mode == Mode::Aggregate
            && let Some(route) = self.hub.registry().route(name)
        {
            result = namespace_task(&route.server, result);
        }
        self.note_task(client, &result);
        Ok(result)
    }
}

/// A retry's answers to an input round, and the round's state.
struct Retry {
    responses: BTreeMap<String, Value>,
    state: String,
}

impl Proxy {
    /// `tools/call` of this era. A retry that answers an input round of ours goes to the call
    /// still waiting upstream; a state we did not make is the server's own (a server of this
    /// era asked), and the retry goes to it whole. A server of the handshake era's requests
    /// during the call come back as an input round.
    pub(crate) async fn call_with_rounds(
        self: &Arc<Self>,
        scope: &Arc<Scope>,
        params: Option<&RawValue>,
        head: &Head,
        cancel: CancellationToken,
    ) -> Result<Box<RawValue>, RpcError> {
        let (name, params, name_at) = match self.named_call(&scope.client, params, head).await? {
            Named::Call {
                name,
                params,
                name_at,
            } => (name, params.into_owned(), name_at),
            Named::Answer(answer) => return answer,
        };
        // A retry that answers an input round: its answers and the round's state, as read with
        // the message.
        let retry = match (&head.request_state, &head.input_responses) {
            (Some(state), Some(responses)) => {
                serde_json::from_str(responses.get())
                    .ok()
                    .map(|responses| Retry {
                        responses,
                        state: state.clone(),
                    })
            }
            _ => None,
        };
        // Counted when it ends (cancelled if this request is dropped first).
        let record = self.metrics().start();
        if let Some(retry) = retry {
            let state = retry.state.clone();
            if let Some(step) = self.rounds.resume(&state, retry.responses).await {
                return self.answer_step(&scope.client, step, &name, record);
            }
            if crate::rounds::Rounds::is_ours(&state) {
                // Never started again in its place: the call may be under way elsewhere.
                record.finish("other");
                return Err(RpcError::new(
                    -32602,
                    format!(
                        "Invalid params: requestState \"{state}\" is not held by this replica: the call is waiting on the replica that started it (the request reached another one), or its round expired after {} s; call the tool again to start over",
                        crate::rounds::ROUND_LIMIT.as_secs()
                    ),
                ));
            }
        }
        // The call outlives this request while it waits for input: it is cancelled with the
        // request (or when the request is dropped: a client that went away) only until then.
        let call_cancel = cancel.child_token();
        let abandoned = call_cancel.clone().drop_guard();
        // The call's progress reaches the client; nothing else of the call's does (a log
        // message goes only where the client asked for it).
        let progress: crate::rounds::Notify = {
            let scope = scope.clone();
            Arc::new(move |method: &str, params: Option<Box<RawValue>>| {
                if method == "notifications/progress" {
                    let _ = scope.deliver(notification_text(method, params.as_deref()));
                }
            })
        };
        // What this request's client declared (`_meta`): a server's request it cannot answer
        // is refused at once, as for a client of the handshake era. Declaring nothing lets all.
        let declared = head
            .meta
            .capabilities
            .as_deref()
            .map(|c| Capabilities::read(c.get()));
        let allowed: crate::rounds::Allowed =
            Arc::new(move |method| declared.is_none_or(|d| d.allow(method)));
        let (origin, pending) = Rounds::prepare(Some(progress), Some(allowed));
        let args = CallArgs {
            cancel: Some(call_cancel),
            origin: Some(origin),
            relays_input: true,
            name_at,
            ..CallArgs::default()
        };
        let call = owned_call(self.hub.clone(), self.mode, name.to_string(), params, args);
        let step = self.rounds.run(pending, call).await;
        abandoned.disarm();
        self.answer_step(&scope.client, step, &name, record)
    }

    /// A round's outcome as the client's answer: the result (a server's own input round
    /// whole), or the server's requests as an input round of ours.
    fn answer_step(
        &self,
        client: &Client,
        step: crate::rounds::Step,
        tool: &str,
        record: crate::metrics::CallRecord<'_>,
    ) -> Result<Box<RawValue>, RpcError> {
        use crate::rounds::Step;
        let outcome = match step {
            Step::Input { requests, state } => {
                let mut asks = serde_json::Map::new();
                for (key, method, params) in requests {
                    let mut ask = json!({ "method": method });
                    if let Some(params) =
                        params.and_then(|p| serde_json::from_str::<Value>(p.get()).ok())
                    {
                        ask["params"] = params;
                    }
                    asks.insert(key, ask);
                }
                record.pending();
                return to_raw(&json!({
                    "resultType": "input_required",
                    "inputRequests": asks,
                    "requestState": state,
                }));
            }
            Step::Done(outcome) => outcome,
            Step::Refused(error) => {
                record.finish("other");
                return Err(error);
            }
        };
        self.call_answer(client, tool, outcome, record)
    }
}
