//! Tasks in `serve`: `tasks/list` of every server, `tasks/get`, `tasks/result` and
//! `tasks/cancel` routed by the namespaced task id, and the namespacing itself
//! ([`namespace_task`]).
//!
//! Only a task id is rewritten; every other member passes whole.

use std::borrow::Cow;

use mcp_supervisor::CallArgs;
use mcp_supervisor::core::members;
use mcp_supervisor::link::RpcError;
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::json::{list_answer, object_params, to_raw};
use crate::message::Head;
use crate::proxy::Proxy;

/// `task.taskId` (a tool call's task) or `taskId` (a task's state) of a result, namespaced by
/// `server`.
pub(crate) fn namespace_task(server: &str, result: Box<RawValue>) -> Box<RawValue> {
    if !result.get().contains("taskId") {
        return result;
    }
    let mut result = result;
    // Only the id changes: every other member stays as the server wrote it, in its place.
    for path in [&["taskId"][..], &["task", "taskId"][..]] {
        let Some(id) = members::member_at(&result, path)
            .and_then(|id| serde_json::from_str::<String>(id.get()).ok())
        else {
            continue;
        };
        let public = Value::String(mcp_supervisor::routes::task_public(server, &id));
        if let Ok(public) = serde_json::value::to_raw_value(&public)
            && let Some(out) = members::with_member_at(&result, path, &public)
        {
            result = out;
        }
    }
    result
}

impl Proxy {
    /// `tasks/list` in `serve`: every server's tasks, their ids namespaced.
    pub(crate) async fn list_tasks(
        &self,
        params: Option<&RawValue>,
        args: CallArgs,
    ) -> Result<Box<RawValue>, RpcError> {
        let mut tasks = Vec::new();
        // A server without tasks, or late, has no part.
        for (server, result) in self
            .fan_out("tasks/list", |_| params.map(Cow::Borrowed), &args)
            .await
        {
            #[derive(Deserialize)]
            struct Page {
                tasks: Vec<Box<RawValue>>,
            }
            if let Ok(page) = serde_json::from_str::<Page>(result.get()) {
                // Each task whole, its id namespaced in its place.
                tasks.extend(page.tasks.into_iter().map(|t| namespace_task(&server, t)));
            }
        }
        Ok(list_answer("tasks", tasks.iter().map(AsRef::as_ref)))
    }

    /// `tasks/get`, `tasks/result`, `tasks/cancel` in `serve`: to the task's server, with its
    /// own id; the id in the answer is namespaced again.
    pub(crate) async fn task_request(
        &self,
        method: &str,
        params: Option<&RawValue>,
        head: &Head,
        args: CallArgs,
    ) -> Result<Box<RawValue>, RpcError> {
        let params = object_params(method, params)?;
        let public = head.task_id.as_deref().unwrap_or_default();
        let Some((server, task)) = mcp_supervisor::routes::task_route(public) else {
            return Err(RpcError::new(
                -32602,
                format!(
                    "Invalid params: unknown task \"{public}\" (task ids here are SERVER:ID, as tools/call and tasks/list give them)"
                ),
            ));
        };
        if !self.hub.servers().iter().any(|s| s == server) {
            return Err(RpcError::new(
                -32602,
                format!("Invalid params: unknown task \"{public}\": no server \"{server}\""),
            ));
        }
        // Only the id changes: every other member stays as the client wrote it, in its place.
        let task = to_raw(&Value::String(task.to_string()))?;
        let params = members::with_member(params, "taskId", &task)
            .ok_or_else(|| RpcError::new(-32602, format!("Invalid params of {method}")))?;
        let result = self.send(server, method, Some(&params), args).await?;
        Ok(namespace_task(server, result))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::raw_json;

    #[test]
    fn task_ids_are_namespaced_by_server() {
        let created = raw_json(r#"{"task":{"taskId":"t-1","status":"working"}}"#);
        let out: Value = serde_json::from_str(namespace_task("web", created).get()).unwrap();
        assert_eq!(out["task"]["taskId"], "web:t-1");
        let state = raw_json(r#"{"taskId":"t-2","status":"completed"}"#);
        let out: Value = serde_json::from_str(namespace_task("a", state).get()).unwrap();
        assert_eq!(out["taskId"], "a:t-2");
        let plain = raw_json(r#"{"content":[]}"#);
        assert_eq!(namespace_task("a", plain).get(), r#"{"content":[]}"#);
        // Only the id changes: the other members keep their text and their order.
        let ordered = raw_json(r#"{"status":"working","taskId":"t-3","pollInterval":1.50}"#);
        assert_eq!(
            namespace_task("a", ordered).get(),
            r#"{"status":"working","taskId":"a:t-3","pollInterval":1.50}"#
        );
        let nested = raw_json(r#"{"z":0,"task":{"ttl":5,"taskId":"t-4"},"_meta":{}}"#);
        assert_eq!(
            namespace_task("w", nested).get(),
            r#"{"z":0,"task":{"ttl":5,"taskId":"w:t-4"},"_meta":{}}"#
        );
    }
}
