//! Which server owns what a client names that is not a tool: a resource URI (the server that
//! listed it, or whose URI template it falls under), a prompt's public name, a task id
//! (namespaced `<server>:<id>` where many servers are fronted).
//!
//! Prompts are named by the policy tools are ([`naming::assign`], SPEC §4, §9): the same prefix,
//! shortening and collision rule, and each collision's warning logged once while it lasts, as
//! the registry does for tools. Resource URIs and templates keep their text (a template's `name`
//! is a label no request names it by). Task ids are not named by that policy: they are not
//! listed ahead but made by a call, so their public form must be computable from the id alone and
//! reversible without a table: `<server>:<id>`, which never collides (server names hold no `:`,
//! and a server's own ids are its own) and is never shortened (a task id has no length limit).
//!
//! It learns from the lists that pass through the hub's front (the proxy), and answers from
//! what it learned and from the names alone. It never lists anything itself and never talks to
//! a server: a `get` has no list as a side effect.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use mcp_supervisor_core::naming::{self, NameKind, NamingConfig, NamingMode};

/// The separator of a namespaced task id (server names never hold it).
pub const TASK_SEPARATOR: char = ':';

/// A server's task id as clients of many servers see it.
pub fn task_public(server: &str, id: &str) -> String {
    format!("{server}{TASK_SEPARATOR}{id}")
}

/// The server and its own id of a namespaced task id.
pub fn task_route(public: &str) -> Option<(&str, &str)> {
    public.split_once(TASK_SEPARATOR)
}

#[derive(Default)]
struct Inner {
    /// Resource URI → the first server that listed it.
    resources: HashMap<String, String>,
    /// A URI template's text before its first `{` → its server.
    templates: Vec<(String, String)>,
    /// A prompt's public name → (server, its name there).
    prompts: HashMap<String, (String, String)>,
    /// The collision warnings of the prompts' naming last time: each is logged once while it lasts.
    prompt_warnings: Vec<String>,
}

/// What the hub knows of non-tool names.
#[derive(Default)]
pub struct Routes {
    inner: Mutex<Inner>,
}

impl Routes {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Every write is a whole insert or swap: a poisoned lock holds consistent data.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Resources as listed: `(uri, server)`; a URI keeps the first server that listed it.
    pub fn learn_resources(&self, listed: impl IntoIterator<Item = (String, String)>) {
        let mut inner = self.lock();
        for (uri, server) in listed {
            inner.resources.entry(uri).or_insert(server);
        }
    }

    /// URI templates as listed, `(template, server)`: they replace the ones known.
    pub fn learn_templates(&self, listed: impl IntoIterator<Item = (String, String)>) {
        self.lock().templates = listed
            .into_iter()
            .map(|(template, server)| {
                let prefix = template.split('{').next().unwrap_or(&template).to_string();
                (prefix, server)
            })
            .collect();
    }

    /// Names every server's prompts as listed (`listed`: each server and its prompts' names, in
    /// config then upstream order) by the naming policy, learns them (replacing the ones known)
    /// and logs each collision warning not logged last time. Returns the public names, as
    /// `listed` is laid out, and the warnings it logged.
    pub fn name_prompts(
        &self,
        config: &NamingConfig,
        listed: &[(&str, Vec<&str>)],
    ) -> (Vec<Vec<String>>, Vec<String>) {
        let (names, warnings) = naming::assign(NameKind::Prompt, config, listed);
        let mut owners = HashMap::new();
        for ((server, prompts), names) in listed.iter().zip(&names) {
            for (prompt, public) in prompts.iter().zip(names) {
                owners.insert(public.clone(), (server.to_string(), prompt.to_string()));
            }
        }
        let mut inner = self.lock();
        let new: Vec<String> = warnings
            .iter()
            .filter(|w| !inner.prompt_warnings.contains(w))
            .cloned()
            .collect();
        for warning in &new {
            tracing::warn!("{warning}");
        }
        inner.prompts = owners;
        inner.prompt_warnings = warnings;
        (names, new)
    }

    /// The server of a resource URI: the one that listed it, else the one whose template has
    /// the longest prefix of it, else the only server.
    pub fn resource_owner(&self, uri: &str, servers: &[String]) -> Option<String> {
        let inner = self.lock();
        if let Some(server) = inner.resources.get(uri) {
            return Some(server.clone());
        }
        let by_template = inner
            .templates
            .iter()
            .filter(|(prefix, _)| !prefix.is_empty() && uri.starts_with(prefix.as_str()))
            .max_by_key(|(prefix, _)| prefix.len())
            .map(|(_, server)| server.clone());
        by_template.or_else(|| match servers {
            [server] => Some(server.clone()),
            _ => None,
        })
    }

    /// The server and upstream name of a public prompt name as last named, if it was.
    pub fn named_prompt(&self, public: &str) -> Option<(String, String)> {
        self.lock().prompts.get(public).cloned()
    }

    /// The server and upstream name of a public prompt name: from the names last listed, else
    /// from a prefix that names a server (prefixed naming), else the only server.
    pub fn prompt_owner(
        &self,
        public: &str,
        naming: &NamingConfig,
        servers: &[String],
    ) -> Option<(String, String)> {
        if let Some(owner) = self.lock().prompts.get(public) {
            return Some(owner.clone());
        }
        match naming.mode {
            NamingMode::Prefixed => servers.iter().find_map(|server| {
                public
                    .strip_prefix(&format!("{server}{}", naming.separator))
                    .map(|name| (server.clone(), name.to_string()))
            }),
            NamingMode::Original => match servers {
                [server] => Some((server.clone(), public.to_string())),
                _ => None,
            },
        }
    }

    /// A server left the config: nothing routes to it any more.
    pub fn forget(&self, server: &str) {
        let mut inner = self.lock();
        inner.resources.retain(|_, s| s != server);
        inner.templates.retain(|(_, s)| s != server);
        inner.prompts.retain(|_, (s, _)| s != server);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn servers(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn resources_route_by_listing_then_template_then_the_only_server() {
        let routes = Routes::default();
        let two = servers(&["a", "b"]);
        assert_eq!(routes.resource_owner("file:///x", &two), None);
        assert_eq!(
            routes.resource_owner("file:///x", &servers(&["a"])),
            Some("a".into())
        );
        routes.learn_resources([
            ("file:///x".into(), "b".into()),
            ("file:///x".into(), "a".into()),
        ]);
        assert_eq!(routes.resource_owner("file:///x", &two), Some("b".into()));
        routes.learn_templates([
            ("db://{table}".into(), "a".into()),
            ("db://users/{id}".into(), "b".into()),
        ]);
        assert_eq!(
            routes.resource_owner("db://users/7", &two),
            Some("b".into())
        );
        assert_eq!(routes.resource_owner("db://orders", &two), Some("a".into()));
        routes.forget("b");
        assert_eq!(
            routes.resource_owner("db://users/7", &two),
            Some("a".into())
        );
        assert_eq!(routes.resource_owner("file:///x", &two), None);
    }

    #[test]
    fn prompts_route_by_listing_or_by_prefix() {
        let routes = Routes::default();
        let prefixed = NamingConfig {
            mode: NamingMode::Prefixed,
            separator: "__".into(),
        };
        let two = servers(&["a", "b_c"]);
        assert_eq!(
            routes.prompt_owner("b_c__greet", &prefixed, &two),
            Some(("b_c".into(), "greet".into()))
        );
        assert_eq!(routes.prompt_owner("x__greet", &prefixed, &two), None);
        let original = NamingConfig {
            mode: NamingMode::Original,
            separator: "__".into(),
        };
        assert_eq!(routes.prompt_owner("greet", &original, &two), None);
        routes.name_prompts(&original, &[("a", vec!["greet"])]);
        assert_eq!(
            routes.prompt_owner("greet", &original, &two),
            Some(("a".into(), "greet".into()))
        );
    }

    #[test]
    fn prompts_are_named_by_the_tools_policy_and_each_collision_is_warned_of_once() {
        let routes = Routes::default();
        let original = NamingConfig {
            mode: NamingMode::Original,
            separator: "__".into(),
        };
        let two = servers(&["a", "b"]);
        let listed = [("a", vec!["greet", "add"]), ("b", vec!["greet"])];
        let (names, logged) = routes.name_prompts(&original, &listed);
        assert_eq!(names, [vec!["greet", "add"], vec!["b__greet"]]);
        assert_eq!(
            logged,
            [
                "prompt \"greet\" of server \"b\" is also offered by server \"a\"; it is published as \"b__greet\""
            ]
        );
        assert_eq!(
            routes.prompt_owner("greet", &original, &two),
            Some(("a".into(), "greet".into()))
        );
        assert_eq!(
            routes.prompt_owner("b__greet", &original, &two),
            Some(("b".into(), "greet".into()))
        );
        // Listed again, the same collision is not logged again.
        let (again, logged) = routes.name_prompts(&original, &listed);
        assert_eq!(again, names);
        assert!(logged.is_empty(), "{logged:?}");
        // Gone, then back: logged again.
        routes.name_prompts(&original, &[("a", vec!["greet"]), ("b", vec![])]);
        assert_eq!(routes.prompt_owner("b__greet", &original, &two), None);
        let (_, logged) = routes.name_prompts(&original, &listed);
        assert_eq!(logged.len(), 1);
        routes.forget("b");
        assert_eq!(routes.prompt_owner("b__greet", &original, &two), None);
    }

    #[test]
    fn a_shortened_prompt_name_routes_to_its_upstream_name() {
        let routes = Routes::default();
        let prefixed = NamingConfig::default();
        let long = "p".repeat(70);
        let (names, logged) = routes.name_prompts(&prefixed, &[("srv", vec![long.as_str()])]);
        assert!(logged.is_empty());
        assert_eq!(names[0][0].len(), naming::MAX_NAME_LEN);
        assert_eq!(
            routes.prompt_owner(&names[0][0], &prefixed, &servers(&["srv"])),
            Some(("srv".into(), long))
        );
    }

    #[test]
    fn task_ids_round_trip() {
        let public = task_public("web", "t:1");
        assert_eq!(public, "web:t:1");
        assert_eq!(task_route(&public), Some(("web", "t:1")));
        assert_eq!(task_route("plain"), None);
    }
}
