//! Prompts in `serve`: the aggregate `prompts/list`, named as tools are named (same prefix,
//! shortening, collision rule), and `prompts/get` and `completion/complete` routed to the
//! prompt's (or the resource's) server with its upstream name.
//!
//! Only a prompt's `name` is rewritten; every other member passes whole.

use mcp_supervisor::CallArgs;
use mcp_supervisor::core::authorize::Target;
use mcp_supervisor::core::members;
use mcp_supervisor::link::RpcError;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::client::Client;
use crate::json::{list_answer, object_params, string_of, to_raw};
use crate::proxy::Proxy;

impl Proxy {
    /// Each caller sees only the prompts its servers' `authorize` rules let it get.
    pub(crate) async fn list_prompts(
        &self,
        client: &Client,
        args: CallArgs,
    ) -> Result<Box<RawValue>, RpcError> {
        let prompts = self.named_prompts(&args).await?;
        let rules = self.rules();
        Ok(list_answer(
            "prompts",
            prompts
                .iter()
                .filter(|(server, name, _)| {
                    !rules.any_rule()
                        || self.may(
                            &rules,
                            client,
                            server,
                            "prompts/get",
                            Target::Prompt(name.as_deref().unwrap_or_default()),
                        )
                })
                .map(|(_, _, prompt)| prompt.as_ref()),
        ))
    }

    /// Every server's held prompts in config order, named by the policy tools are named by
    /// (SPEC §9: same prefix, shortening, collision rule and warning), the routes learned. Each
    /// prompt is the server's JSON text with only its `name` rewritten, in its place; one with
    /// no string name passes as it came.
    pub(crate) async fn named_prompts(
        &self,
        args: &CallArgs,
    ) -> Result<Vec<(String, Option<String>, Box<RawValue>)>, RpcError> {
        let parts = self.held_parts("prompts/list", args).await;
        let upstream: Vec<Vec<Option<String>>> = parts
            .iter()
            .map(|(_, items)| {
                items
                    .iter()
                    .map(|item| {
                        members::member(item, "name")
                            .and_then(|name| serde_json::from_str::<String>(name.get()).ok())
                    })
                    .collect()
            })
            .collect();
        let listed: Vec<(&str, Vec<&str>)> = parts
            .iter()
            .zip(&upstream)
            .map(|((server, _), names)| {
                (
                    server.as_str(),
                    names.iter().flatten().map(String::as_str).collect(),
                )
            })
            .collect();
        let naming = self.hub.registry().naming();
        let (public, _) = self.hub.routes().name_prompts(&naming, &listed);
        let mut prompts = Vec::new();
        for (((server, items), names), public) in parts.iter().zip(&upstream).zip(public) {
            let mut public = public.into_iter();
            for (item, name) in items.iter().zip(names) {
                // The naming holds a public name for each prompt with a name, in order.
                let renamed = match name {
                    Some(name) => public.next().filter(|public| public != name),
                    None => None,
                };
                let renamed = match renamed {
                    Some(public) => {
                        members::with_member(item, "name", &to_raw(&Value::String(public))?)
                    }
                    None => None,
                };
                prompts.push((
                    server.clone(),
                    name.clone(),
                    renamed.unwrap_or_else(|| item.clone()),
                ));
            }
        }
        Ok(prompts)
    }

    /// The server and upstream name of a public prompt name: as last named, else as named now
    /// from what the servers hold (a client may get a prompt it has not listed here), else by
    /// its prefix.
    pub(crate) async fn resolve_prompt(
        &self,
        public: &str,
        args: &CallArgs,
    ) -> Option<(String, String)> {
        let routes = self.hub.routes();
        if let Some(owner) = routes.named_prompt(public) {
            return Some(owner);
        }
        // Naming reads only the lists held: nothing is listed by the way.
        if let Err(error) = self.named_prompts(args).await {
            tracing::debug!("prompts not named: {}", error.message);
        }
        let naming = self.hub.registry().naming();
        routes.prompt_owner(public, &naming, &self.hub.servers())
    }

    /// `prompts/get` and `completion/complete`: to the server of the prompt (by its public
    /// name) or of the resource (by its URI), with the upstream prompt name.
    pub(crate) async fn prompt_request(
        &self,
        client: &Client,
        method: &str,
        params: Option<&RawValue>,
        args: CallArgs,
    ) -> Result<Box<RawValue>, RpcError> {
        let params = object_params(method, params)?;
        let text = |path: &[&str]| members::member_at(params, path).and_then(string_of);
        let (path, is_prompt): (&[&str], bool) = if method == "prompts/get" {
            (&["name"], true)
        } else {
            match text(&["ref", "type"]).as_deref() {
                Some("ref/prompt") => (&["ref", "name"], true),
                _ => (&["ref", "uri"], false),
            }
        };
        let key = text(path).unwrap_or_default();
        if !is_prompt {
            let server = self.resource_owner(&key, &args).await?;
            self.admit(client, &server, method, Target::Resource(&key))?;
            return self.send(&server, method, Some(params), args).await;
        }
        let Some((server, name)) = self.resolve_prompt(&key, &args).await else {
            return Err(RpcError::new(
                -32602,
                format!(
                    "Invalid params: no server offers a prompt named \"{key}\"; list the prompts to see what is published"
                ),
            ));
        };
        self.admit(client, &server, method, Target::Prompt(&name))?;
        // Only the name changes: every other member stays as the client wrote it, in its place.
        let name = to_raw(&Value::String(name))?;
        let params = members::with_member_at(params, path, &name)
            .ok_or_else(|| RpcError::new(-32602, format!("Invalid params of {method}")))?;
        self.send(&server, method, Some(&params), args).await
    }
}
