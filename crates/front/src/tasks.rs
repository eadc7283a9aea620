//! Tasks: `tasks/list` of every server, `tasks/get`, `tasks/result` and `tasks/cancel` routed
//! by the namespaced task id in `serve` (as they came in `wrap`), and the namespacing itself
//! ([`namespace_task`]). Each is judged by its server's `authorize` rule (`mcp.method`,
//! `mcp.server`), and a task is its creator's (SPEC §14, [`crate::owners`]): a caller with an
//! identity sees only the tasks it created, and asking for another's gets the same answer as
//! for a task that does not exist.
//!
//! Only a task id is rewritten, and a list only loses the tasks its caller may not see; every
//! other member passes whole.

use std::borrow::Cow;

use mcp_supervisor::CallArgs;
use mcp_supervisor::core::authorize::Target;
use mcp_supervisor::core::members;
use mcp_supervisor::link::RpcError;
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::client::Client;
use crate::json::{list_answer, member_str, object_params, to_raw};
use crate::message::Head;
use crate::proxy::{Mode, Proxy};

/// The answer for a task the caller does not know: one that does not exist and another
/// identity's get the same.
fn unknown_task(public: &str) -> RpcError {
    RpcError::new(
        -32602,
        format!(
            "Invalid params: unknown task \"{public}\" (task ids here are as tools/call and tasks/list give them)"
        ),
    )
}

/// The word a result that made or names a task holds.
static TASK_ID: mcp_supervisor::core::skim::Word = mcp_supervisor::core::skim::Word::new("taskId");

/// `task.taskId` (a tool call's task) or `taskId` (a task's state) of a result, namespaced by
/// `server`.
pub(crate) fn namespace_task(server: &str, result: Box<RawValue>) -> Box<RawValue> {
    if !TASK_ID.in_text(result.get()) {
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
    /// A tool call's `result` as `client` gets it: when it made a task, the task is the caller's
    /// (when it has an identity). `result` is the task's as the client sees it (namespaced).
    pub(crate) fn note_task(&self, client: &Client, result: &RawValue) {
        if !TASK_ID.in_text(result.get()) {
            return;
        }
        let Some(caller) = client.caller() else {
            return;
        };
        if let Some(id) = members::member_at(result, &["task", "taskId"])
            .and_then(|id| serde_json::from_str::<String>(id.get()).ok())
        {
            self.tasks.created(id, caller.key());
        }
    }

    /// Whether `client` may see the task whose id it sees as `public`.
    fn sees_task(&self, client: &Client, public: &str) -> bool {
        let caller = client.caller();
        self.tasks.sees(public, caller.as_ref().map(|c| c.key()))
    }

    /// The tasks of a list that `client` may see, each whole.
    fn own_tasks(&self, client: &Client, tasks: Vec<Box<RawValue>>) -> Vec<Box<RawValue>> {
        tasks
            .into_iter()
            .filter(|task| member_str(task, "taskId").is_some_and(|id| self.sees_task(client, &id)))
            .collect()
    }

    /// `tasks/list`: in `serve` every server's tasks (of the servers whose rule lets the client
    /// list them), their ids namespaced; in `wrap` the server's page. Either way only the tasks
    /// the client may see.
    pub(crate) async fn list_tasks(
        &self,
        client: &Client,
        params: Option<&RawValue>,
        args: CallArgs,
    ) -> Result<Box<RawValue>, RpcError> {
        #[derive(Deserialize)]
        struct Page {
            tasks: Vec<Box<RawValue>>,
        }
        if self.mode == Mode::Transparent {
            if let [server] = self.hub.servers().as_slice() {
                self.admit(client, server, "tasks/list", Target::None)?;
            }
            let page = self.forward("tasks/list", params, args).await?;
            let Ok(listed) = serde_json::from_str::<Page>(page.get()) else {
                return Ok(page);
            };
            let tasks = self.own_tasks(client, listed.tasks);
            let tasks = list_answer("tasks", tasks.iter().map(AsRef::as_ref));
            let tasks = members::member(&tasks, "tasks").map(ToOwned::to_owned);
            // Only `tasks` changes: `nextCursor` and the rest stay.
            return Ok(tasks
                .and_then(|tasks| members::with_member(&page, "tasks", &tasks))
                .unwrap_or(page));
        }
        let mut tasks = Vec::new();
        // A server without tasks, or late, has no part.
        for (server, result) in self
            .fan_out(client, "tasks/list", |_| params.map(Cow::Borrowed), &args)
            .await
        {
            if let Ok(page) = serde_json::from_str::<Page>(result.get()) {
                // Each task whole, its id namespaced in its place.
                tasks.extend(page.tasks.into_iter().map(|t| namespace_task(&server, t)));
            }
        }
        let tasks = self.own_tasks(client, tasks);
        Ok(list_answer("tasks", tasks.iter().map(AsRef::as_ref)))
    }

    /// `tasks/get`, `tasks/result`, `tasks/cancel`: a task the client may not see is unknown;
    /// then its server's rule judges it. In `serve` it goes to the task's server, with its own
    /// id, and the id in the answer is namespaced again; in `wrap`, as it came.
    pub(crate) async fn task_request(
        &self,
        client: &Client,
        method: &str,
        params: Option<&RawValue>,
        head: &Head,
        args: CallArgs,
    ) -> Result<Box<RawValue>, RpcError> {
        let public = head.task_id.as_deref().unwrap_or_default();
        if !self.sees_task(client, public) {
            return Err(unknown_task(public));
        }
        if self.mode == Mode::Transparent {
            if let [server] = self.hub.servers().as_slice() {
                self.admit(client, server, method, Target::None)?;
            }
            return self.forward(method, params, args).await;
        }
        let params = object_params(method, params)?;
        let Some((server, task)) = mcp_supervisor::routes::task_route(public) else {
            return Err(unknown_task(public));
        };
        if !self.hub.servers().iter().any(|s| s == server) {
            return Err(RpcError::new(
                -32602,
                format!("Invalid params: unknown task \"{public}\": no server \"{server}\""),
            ));
        }
        self.admit(client, server, method, Target::None)?;
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
