//! Tools: the aggregate `tools/list` from the registry, and `tools/call` by public name
//! through the hub's one call path ([`crate::fan_out::call_through`]), both eras, its outcome counted and
//! answered ([`Proxy::call_answer`]).
//!
//! It never retries or classifies a failure: the hub's supervisor does.

use std::borrow::Cow;
use std::time::Duration;

use mcp_supervisor::link::RpcError;
use mcp_supervisor::{CallArgs, CallError};
use serde_json::value::RawValue;

use crate::fan_out::{call_error, call_through};
use crate::json::{is_error, to_raw};
use crate::message::Head;
use crate::proxy::{Mode, Proxy};
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
    pub(crate) async fn list_tools(&self) -> Result<Box<RawValue>, RpcError> {
        if self.searching() {
            return to_raw(&crate::exposure::listed());
        }
        // A server still starting with a saved catalog has its list already: no wait for it.
        self.hub.wait_listed(STARTUP_WAIT).await;
        let tools = self.hub.tools();
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
        params: Option<&RawValue>,
        head: &Head,
        args: CallArgs,
    ) -> Result<Box<RawValue>, RpcError> {
        let (name, params, name_at) = match self.named_call(params, head).await? {
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
        self.call_answer(&name, outcome, record)
    }

    /// What a client's `tools/call` names: the tool's public name and the params to send it, or
    /// in search mode `search_tools`' answer (`call_tool` names the call). Both eras.
    pub(crate) async fn named_call<'a>(
        &self,
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
        Ok(
            match self
                .search
                .exposed(&self.hub, self.mode, name, params)
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

    /// A call's outcome as the client's answer (both eras): counted in the metrics, a failure
    /// as the error or result the client is owed, a task id namespaced in `serve`.
    pub(crate) fn call_answer(
        &self,
        name: &str,
        outcome: Result<Box<RawValue>, CallError>,
        record: crate::metrics::CallRecord<'_>,
    ) -> Result<Box<RawValue>, RpcError> {
        record.finish(crate::metrics::outcome(
            outcome.as_ref().map(|r| is_error(r)),
        ));
        let result = outcome.or_else(call_error)?;
        if self.mode == Mode::Aggregate
            && let Some(route) = self.hub.registry().route(name)
        {
            return Ok(namespace_task(&route.server, result));
        }
        Ok(result)
    }
}
