//! Resources in `serve`: the aggregate `resources/list` and `resources/templates/list` from the
//! held lists, and which server owns a URI ([`Proxy::resource_owner`]).
//!
//! A read never lists anything by the way and never guesses an owner.

use std::sync::Arc;

use mcp_supervisor::CallArgs;
use mcp_supervisor::core::authorize::Target;
use mcp_supervisor::link::RpcError;
use serde_json::value::RawValue;

use crate::json::{list_answer, member_str};
use crate::proxy::Proxy;

impl Proxy {
    /// Each caller sees only the resources its servers' `authorize` rules let it read.
    pub(crate) async fn list_resources(
        &self,
        client: &crate::client::Client,
        method: &str,
        args: CallArgs,
    ) -> Result<Box<RawValue>, RpcError> {
        let (field, key) = if method == "resources/list" {
            ("resources", "uri")
        } else {
            ("resourceTemplates", "uriTemplate")
        };
        let parts = self.held_parts(method, &args).await;
        let owners = parts.iter().flat_map(|(server, part)| {
            part.iter()
                .filter_map(|item| member_str(item, key))
                .map(|uri| (uri, server.clone()))
        });
        if method == "resources/list" {
            self.hub.routes().learn_resources(owners);
        } else {
            self.hub.routes().learn_templates(owners);
        }
        // Each item as the server sent it (SPEC §10).
        let rules = self.rules();
        Ok(list_answer(
            field,
            parts.iter().flat_map(|(server, part)| {
                let rules = &rules;
                part.iter()
                    .filter(move |item| {
                        !rules.any_rule()
                            || self.may(
                                rules,
                                client,
                                server,
                                "resources/read",
                                Target::Resource(
                                    member_str(item, key).as_deref().unwrap_or_default(),
                                ),
                            )
                    })
                    .map(AsRef::as_ref)
            }),
        ))
    }

    /// The server that owns `uri`: the one that listed it, or whose template it matches, or
    /// the only one. A URI no client listed here yet (a client may read what it cached, or what
    /// a tool's result linked to) is routed by the held lists (SPEC §9) as a list would route
    /// it: the first server in config order that offers it. A URI the held lists do not offer
    /// while a server is listing again after its `list_changed` (a resource a tool just made)
    /// waits for that listing, within the request's deadline. A read never lists anything by
    /// the way, and never guesses: a URI that no server offers is an error that says to list.
    pub(crate) async fn resource_owner(
        &self,
        uri: &str,
        args: &CallArgs,
    ) -> Result<String, RpcError> {
        let known = self.hub.routes().resource_owner(uri, &self.hub.servers());
        let owner = match known {
            Some(server) => Some(server),
            None => match self.held_owner(uri, args).await {
                Some(server) => Some(server),
                None => {
                    let wait = args.timeout.map_or(mcp_supervisor::hub::LIST_WAIT, |t| {
                        t.min(mcp_supervisor::hub::LIST_WAIT)
                    });
                    match self.hub.relisted(wait).await {
                        true => self.held_owner(uri, args).await,
                        false => None,
                    }
                }
            },
        };
        owner.ok_or_else(|| {
            RpcError::new(
                -32002,
                format!("Resource not found: no server is known to offer \"{uri}\"; list the resources (resources/list, resources/templates/list) to see what is offered"),
            )
        })
    }

    /// The server whose held lists (SPEC §9) offer `uri`, listed or under one of its URI
    /// templates, learned as a list of every server teaches it (the first server in config order
    /// keeps a URI several offer); `None` when no server does.
    pub(crate) async fn held_owner(&self, uri: &str, args: &CallArgs) -> Option<String> {
        let (listed, templated) = futures::future::join(
            self.held_parts("resources/list", args),
            self.held_parts("resources/templates/list", args),
        )
        .await;
        let owners = |parts: &[(String, Arc<[Box<RawValue>]>)], key: &str| {
            parts
                .iter()
                .flat_map(|(server, part)| {
                    part.iter()
                        .filter_map(|item| member_str(item, key))
                        .map(|text| (text, server.clone()))
                })
                .collect::<Vec<_>>()
        };
        let routes = self.hub.routes();
        routes.learn_resources(owners(&listed, "uri"));
        routes.learn_templates(owners(&templated, "uriTemplate"));
        routes.resource_owner(uri, &self.hub.servers())
    }
}
