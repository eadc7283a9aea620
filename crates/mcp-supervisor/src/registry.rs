//! The published tools of every server under their public names, swapped per server at once,
//! with a change event only when the aggregate really changed.
//!
//! Only a server's own supervisor publishes or withdraws its set. The registry never talks to an
//! upstream, and never keeps a tool of a server that is not in the config.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use mcp_supervisor_core::classify::ToolSafety;
use mcp_supervisor_core::naming::{self, NamingConfig};
use rmcp::model::Tool;
use tokio::sync::watch;

/// A tool as it is published.
#[derive(Clone, Debug)]
pub struct PublishedTool {
    /// The name clients see.
    pub public_name: String,
    /// The server that offers it.
    pub server: String,
    /// Its name on that server.
    pub upstream_name: String,
    /// The definition clients see (with the public name).
    pub tool: Tool,
}

/// Where a call to one public name goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    pub server: String,
    pub upstream_name: String,
    /// What the tool's annotations say about repeating it.
    pub safety: ToolSafety,
}

impl PublishedTool {
    /// What the tool's own annotations say about repeating it.
    pub fn annotated_safety(&self) -> ToolSafety {
        let annotations = self.tool.annotations.as_ref();
        ToolSafety {
            read_only: annotations.and_then(|a| a.read_only_hint).unwrap_or(false),
            idempotent: annotations.and_then(|a| a.idempotent_hint).unwrap_or(false),
            listed_in_retry_tools: false,
        }
    }
}

struct Inner {
    naming: NamingConfig,
    /// Server names in config order, each with its upstream tools as last published.
    servers: Vec<(String, Vec<Tool>)>,
    published: Arc<Vec<PublishedTool>>,
    by_name: HashMap<String, usize>,
    warnings: Vec<String>,
}

/// Every published tool of every server.
pub struct Registry {
    inner: Mutex<Inner>,
    version: watch::Sender<u64>,
}

impl Registry {
    /// An empty registry for `servers`, in config order.
    pub fn new(naming: NamingConfig, servers: Vec<String>) -> Self {
        let (version, _) = watch::channel(0);
        Self {
            inner: Mutex::new(Inner {
                naming,
                servers: servers.into_iter().map(|s| (s, Vec::new())).collect(),
                published: Arc::new(Vec::new()),
                by_name: HashMap::new(),
                warnings: Vec::new(),
            }),
            version,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave the data half-written (every write is a
        // whole swap), so a poisoned lock is still safe to use.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Replace `server`'s whole tool set. Returns whether the aggregate changed.
    pub fn publish(&self, server: &str, tools: Vec<Tool>) -> bool {
        let mut inner = self.lock();
        match inner.servers.iter_mut().find(|(name, _)| name == server) {
            // The same set again (a reconnect): nothing to rebuild.
            Some(entry) if entry.1 == tools => return false,
            Some(entry) => entry.1 = tools,
            None => return false, // not in the config (any more): publish nothing
        }
        self.rebuild(&mut inner)
    }

    /// Withdraw every tool of `server`.
    pub fn withdraw(&self, server: &str) -> bool {
        self.publish(server, Vec::new())
    }

    /// Change the set and order of servers (a reload). Tools of servers that left are dropped;
    /// servers that stay keep theirs.
    pub fn set_servers(&self, servers: Vec<String>) -> bool {
        let mut inner = self.lock();
        let mut old: HashMap<String, Vec<Tool>> =
            std::mem::take(&mut inner.servers).into_iter().collect();
        inner.servers = servers
            .into_iter()
            .map(|s| {
                let tools = old.remove(&s).unwrap_or_default();
                (s, tools)
            })
            .collect();
        self.rebuild(&mut inner)
    }

    fn rebuild(&self, inner: &mut Inner) -> bool {
        let input: Vec<(&str, Vec<&str>)> = inner
            .servers
            .iter()
            .map(|(s, tools)| (s.as_str(), tools.iter().map(|t| t.name.as_ref()).collect()))
            .collect();
        let (names, warnings) = naming::assign(&inner.naming, &input);
        let mut published = Vec::new();
        for ((server, tools), names) in inner.servers.iter().zip(names) {
            for (tool, public) in tools.iter().zip(names) {
                let mut visible = tool.clone();
                visible.name = public.clone().into();
                published.push(PublishedTool {
                    public_name: public,
                    server: server.clone(),
                    upstream_name: tool.name.to_string(),
                    tool: visible,
                });
            }
        }
        for warning in &warnings {
            if !inner.warnings.contains(warning) {
                tracing::warn!("{warning}");
            }
        }
        inner.warnings = warnings;
        let changed = published.len() != inner.published.len()
            || published
                .iter()
                .zip(inner.published.iter())
                .any(|(a, b)| a.tool != b.tool || a.server != b.server);
        if changed {
            inner.by_name = published
                .iter()
                .enumerate()
                .map(|(i, t)| (t.public_name.clone(), i))
                .collect();
            inner.published = Arc::new(published);
            self.version.send_modify(|v| *v += 1);
        }
        changed
    }

    /// The whole aggregate, in config order then upstream order. Cheap: a shared snapshot.
    pub fn tools(&self) -> Arc<Vec<PublishedTool>> {
        self.lock().published.clone()
    }

    /// Find a tool by its public name.
    pub fn resolve(&self, public_name: &str) -> Option<PublishedTool> {
        let inner = self.lock();
        inner
            .by_name
            .get(public_name)
            .and_then(|&i| inner.published.get(i).cloned())
    }

    /// Where a call to a public name goes, without copying the tool's definition.
    pub fn route(&self, public_name: &str) -> Option<Route> {
        let inner = self.lock();
        let tool = inner.published.get(*inner.by_name.get(public_name)?)?;
        Some(Route {
            server: tool.server.clone(),
            upstream_name: tool.upstream_name.clone(),
            safety: tool.annotated_safety(),
        })
    }

    /// Whether a tool of this public name is published.
    pub fn contains(&self, public_name: &str) -> bool {
        self.lock().by_name.contains_key(public_name)
    }

    /// How many tools `server` has published.
    pub fn count(&self, server: &str) -> usize {
        self.lock()
            .servers
            .iter()
            .find(|(s, _)| s == server)
            .map_or(0, |(_, t)| t.len())
    }

    /// A counter that moves each time the aggregate changes.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.version.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcp_supervisor_core::naming::NamingMode;
    use std::sync::Arc as StdArc;

    fn tool(name: &str) -> Tool {
        Tool::new(
            name.to_string(),
            "a tool",
            StdArc::new(serde_json::Map::new()),
        )
    }

    fn prefixed() -> NamingConfig {
        NamingConfig {
            mode: NamingMode::Prefixed,
            separator: "__".into(),
        }
    }

    #[test]
    fn publishing_swaps_a_servers_set_and_reports_real_changes_only() {
        let registry = Registry::new(prefixed(), vec!["a".into(), "b".into()]);
        assert!(registry.publish("a", vec![tool("echo"), tool("add")]));
        assert!(
            !registry.publish("a", vec![tool("echo"), tool("add")]),
            "same set is no change"
        );
        assert!(registry.publish("b", vec![tool("echo")]));
        let names: Vec<_> = registry
            .tools()
            .iter()
            .map(|t| t.public_name.clone())
            .collect();
        assert_eq!(names, ["a__echo", "a__add", "b__echo"]);
        assert!(registry.publish("a", vec![tool("echo")]));
        assert_eq!(registry.count("a"), 1);
        assert!(registry.resolve("a__add").is_none());
        let found = registry
            .resolve("b__echo")
            .map(|t| (t.server, t.upstream_name));
        assert_eq!(found, Some(("b".into(), "echo".into())));
    }

    #[test]
    fn a_server_outside_the_config_publishes_nothing() {
        let registry = Registry::new(prefixed(), vec!["a".into()]);
        assert!(!registry.publish("ghost", vec![tool("x")]));
        assert!(registry.tools().is_empty());
    }

    #[test]
    fn withdraw_and_reload_drop_tools() {
        let registry = Registry::new(prefixed(), vec!["a".into(), "b".into()]);
        registry.publish("a", vec![tool("x")]);
        registry.publish("b", vec![tool("y")]);
        let version = *registry.subscribe().borrow();
        assert!(registry.withdraw("a"));
        assert_eq!(*registry.subscribe().borrow(), version + 1);
        assert!(registry.set_servers(vec!["c".into()]));
        assert!(registry.tools().is_empty());
    }
}
