//! The published tools of every server under their public names, swapped per server at once,
//! with a change event only when the aggregate really changed.
//!
//! Every list a server publishes (its saved catalog, its first list, each re-sync) is judged
//! here against the server's pinned definitions ([`crate::pins`]), so `serve`, `wrap` and the
//! library withhold the same tools: a withheld tool keeps its public name but is not published,
//! and the registry says why when asked for it.
//!
//! Only a server's own supervisor publishes or withdraws its set. The registry never talks to an
//! upstream, and never keeps a tool of a server that is not in the config.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use mcp_supervisor_core::classify::ToolSafety;
use mcp_supervisor_core::filter::ToolFilter;
use mcp_supervisor_core::headers::{self, ParamHeader};
use mcp_supervisor_core::naming::{self, NamingConfig};
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::sync::watch;

use crate::pins::{PinBook, Withheld};

/// A tool as its server listed it: the definition as JSON text, whole, and the few fields the
/// supervisor reads of it (its name, and what its annotations say about repeating it).
#[derive(Clone, Debug)]
pub struct UpstreamTool {
    /// Its name on its server.
    pub name: String,
    /// What its annotations say about repeating it (`readOnlyHint`, `idempotentHint`).
    pub safety: ToolSafety,
    /// The arguments its calls mirror into `Mcp-Param-*` headers (SEP-2243).
    pub headers: Arc<[ParamHeader]>,
    /// The definition as the server listed it, whole.
    pub definition: Arc<RawValue>,
}

impl PartialEq for UpstreamTool {
    fn eq(&self, other: &Self) -> bool {
        self.definition.get() == other.definition.get()
    }
}

/// Why a tool definition a server listed is not published: what is wrong with it. The server
/// must fix it (its other tools are published).
#[derive(Debug, thiserror::Error)]
pub enum DefinitionError {
    /// The definition is not an object with a `name` (and well-formed `annotations`).
    #[error("a tool definition is not valid ({source})")]
    Invalid {
        /// What serde_json said.
        source: serde_json::Error,
    },
    /// Its `inputSchema` mentions headers but cannot be read.
    #[error("tool `{tool}`: its inputSchema is not valid ({source})")]
    InvalidSchema {
        /// The tool's name.
        tool: String,
        /// What serde_json said.
        source: serde_json::Error,
    },
    /// Its `inputSchema` declares a header that is not valid (SEP-2243).
    #[error("tool `{tool}` declares an invalid header: {why}")]
    InvalidHeader {
        /// The tool's name.
        tool: String,
        /// What is wrong with the declaration.
        why: String,
    },
    /// A typed tool could not be written as JSON.
    #[error("the tool cannot be written as JSON ({source})")]
    Encode {
        /// What serde_json said.
        source: serde_json::Error,
    },
}

impl UpstreamTool {
    /// Read a tool definition from `tools/list`; an error says what is wrong with it. A tool
    /// whose schema declares an invalid header (SEP-2243) is an error: it must not be offered.
    pub fn parse(definition: Box<RawValue>) -> Result<Self, DefinitionError> {
        #[derive(Deserialize)]
        struct Hints {
            #[serde(rename = "readOnlyHint", default)]
            read_only: Option<bool>,
            #[serde(rename = "idempotentHint", default)]
            idempotent: Option<bool>,
        }
        #[derive(Deserialize)]
        struct Fields {
            name: String,
            #[serde(default)]
            annotations: Option<Hints>,
        }
        let fields: Fields = serde_json::from_str(definition.get())
            .map_err(|source| DefinitionError::Invalid { source })?;
        let hints = fields.annotations;
        // Only a schema that mentions the keyword is read whole.
        let headers = if definition.get().contains(headers::DECLARATION) {
            #[derive(Deserialize)]
            struct Schema {
                #[serde(rename = "inputSchema", default)]
                input_schema: serde_json::Value,
            }
            let schema: Schema = serde_json::from_str(definition.get()).map_err(|source| {
                DefinitionError::InvalidSchema {
                    tool: fields.name.clone(),
                    source,
                }
            })?;
            headers::param_headers(&schema.input_schema).map_err(|why| {
                DefinitionError::InvalidHeader {
                    tool: fields.name.clone(),
                    why,
                }
            })?
        } else {
            Vec::new()
        };
        Ok(Self {
            name: fields.name,
            headers: headers.into(),
            safety: ToolSafety {
                read_only: hints.as_ref().and_then(|h| h.read_only).unwrap_or(false),
                idempotent: hints.as_ref().and_then(|h| h.idempotent).unwrap_or(false),
                listed_in_retry_tools: false,
            },
            definition: definition.into(),
        })
    }

    /// From rmcp's typed tool (tests and Rust hosts).
    pub fn from_tool(tool: &rmcp::model::Tool) -> Result<Self, DefinitionError> {
        let definition = serde_json::value::to_raw_value(tool)
            .map_err(|source| DefinitionError::Encode { source })?;
        Self::parse(definition)
    }
}

/// A tool as it is published.
#[derive(Clone, Debug)]
pub struct PublishedTool {
    /// The name clients see.
    pub public_name: String,
    /// The server that offers it.
    pub server: String,
    /// Its name on that server.
    pub upstream_name: String,
    /// The definition clients see: the server's, whole, with the public name.
    pub definition: Arc<RawValue>,
    safety: ToolSafety,
    headers: Arc<[ParamHeader]>,
    /// The server's definition it was made from (the same `Arc` as `definition` when the public
    /// name is the upstream one): a rebuild takes the tool over as it is while this is unchanged.
    source: Arc<RawValue>,
}

/// Where a call to one public name goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    /// The server that offers the tool.
    pub server: String,
    /// The tool's name on that server.
    pub upstream_name: String,
    /// What the tool's annotations say about repeating it.
    pub safety: ToolSafety,
    /// The arguments its calls mirror into headers.
    pub headers: Arc<[ParamHeader]>,
}

impl PublishedTool {
    /// What the tool's own annotations say about repeating it.
    pub fn annotated_safety(&self) -> ToolSafety {
        self.safety
    }

    /// The definition decoded into rmcp's model, for a Rust host's convenience (lossy: fields
    /// rmcp does not know are dropped).
    pub fn tool(&self) -> Result<rmcp::model::Tool, serde_json::Error> {
        serde_json::from_str(self.definition.get())
    }
}

struct Inner {
    naming: NamingConfig,
    /// Server names in config order, each with its upstream tools as last published (before
    /// its filter).
    servers: Vec<(String, Vec<UpstreamTool>)>,
    /// Each server's tool filter (`tools: { allow, deny }`); a server without one publishes all.
    filters: HashMap<String, ToolFilter>,
    /// Each server's pins; a server without a book (no state directory, or `pin: off`) pins
    /// nothing.
    pins: HashMap<String, PinBook>,
    /// Each server's withheld tools (upstream name → the members that changed).
    withheld: HashMap<String, Withheld>,
    /// The withheld tools by the public name they would have.
    withheld_by_name: HashMap<String, WithheldTool>,
    published: Arc<Vec<PublishedTool>>,
    /// Each published tool's place in `published` and its route (made once, not per call).
    by_name: HashMap<String, (usize, Arc<Route>)>,
    warnings: Vec<String>,
}

/// A tool withheld because its definition changed since it was pinned (`pin: block`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WithheldTool {
    /// The server that lists it.
    pub server: String,
    /// Its name on that server.
    pub upstream_name: String,
    /// The pinned members that changed (`description, inputSchema`).
    pub changed: String,
}

/// Every published tool of every server.
pub struct Registry {
    inner: Mutex<Inner>,
    version: watch::Sender<u64>,
}

impl Registry {
    /// An empty registry for `servers`, in config order.
    pub(crate) fn new(naming: NamingConfig, servers: Vec<String>) -> Self {
        let (version, _) = watch::channel(0);
        Self {
            inner: Mutex::new(Inner {
                naming,
                servers: servers.into_iter().map(|s| (s, Vec::new())).collect(),
                filters: HashMap::new(),
                pins: HashMap::new(),
                withheld: HashMap::new(),
                withheld_by_name: HashMap::new(),
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
    pub(crate) fn publish(&self, server: &str, tools: Vec<UpstreamTool>) -> bool {
        let mut inner = self.lock();
        match inner.servers.iter_mut().find(|(name, _)| name == server) {
            // The same set again (a reconnect): nothing to rebuild.
            Some(entry) if entry.1 == tools => return false,
            Some(entry) => entry.1 = tools,
            None => return false, // not in the config (any more): publish nothing
        }
        judge(&mut inner, server);
        self.rebuild(&mut inner)
    }

    /// Set `server`'s pins (`None`: it pins nothing), and judge what it published with them.
    /// Returns whether the aggregate changed.
    pub(crate) fn set_pins(&self, server: &str, book: Option<PinBook>) -> bool {
        let mut inner = self.lock();
        match book {
            Some(book) => inner.pins.insert(server.to_string(), book),
            None => inner.pins.remove(server),
        };
        judge(&mut inner, server);
        self.rebuild(&mut inner)
    }

    /// Look at every server's pin file again: one that another process changed (an approval)
    /// is read again and the server's tools judged anew. Returns whether the aggregate changed.
    pub fn refresh_pins(&self) -> bool {
        let mut inner = self.lock();
        let changed: Vec<String> = inner
            .pins
            .iter_mut()
            .filter_map(|(server, book)| book.refresh().then(|| server.clone()))
            .collect();
        if changed.is_empty() {
            return false;
        }
        for server in &changed {
            judge(&mut inner, server);
        }
        self.rebuild(&mut inner)
    }

    /// Whether `server` keeps pins.
    pub fn pins(&self, server: &str) -> bool {
        self.lock().pins.contains_key(server)
    }

    /// The tool withheld under this public name, if one is.
    pub fn withheld(&self, public_name: &str) -> Option<WithheldTool> {
        self.lock().withheld_by_name.get(public_name).cloned()
    }

    /// Whether `server`'s tool of this upstream name is withheld, and why.
    pub fn withheld_tool(&self, server: &str, upstream_name: &str) -> Option<WithheldTool> {
        let inner = self.lock();
        let changed = inner.withheld.get(server)?.get(upstream_name)?;
        Some(WithheldTool {
            server: server.to_string(),
            upstream_name: upstream_name.to_string(),
            changed: changed.clone(),
        })
    }

    /// The upstream names of `server`'s withheld tools.
    pub fn withheld_names(&self, server: &str) -> Vec<String> {
        self.lock()
            .withheld
            .get(server)
            .map(|w| w.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Set `server`'s tool filter: a tool it does not allow is never published, so it is not
    /// listed and a call to it is an unknown tool. Returns whether the aggregate changed.
    pub fn set_filter(&self, server: &str, filter: ToolFilter) -> bool {
        let mut inner = self.lock();
        if inner.filters.get(server) == Some(&filter) {
            return false;
        }
        inner.filters.insert(server.to_string(), filter);
        self.rebuild(&mut inner)
    }

    /// Whether `server`'s filter hides a tool of this upstream name.
    pub fn is_filtered(&self, server: &str, upstream_name: &str) -> bool {
        self.lock()
            .filters
            .get(server)
            .is_some_and(|f| !f.allows(upstream_name))
    }

    /// The upstream names `server` listed last, filtered or not (for `check`).
    pub fn listed(&self, server: &str) -> Vec<String> {
        self.lock()
            .servers
            .iter()
            .find(|(s, _)| s == server)
            .map(|(_, tools)| tools.iter().map(|t| t.name.clone()).collect())
            .unwrap_or_default()
    }

    /// Withdraw every tool of `server`.
    pub(crate) fn withdraw(&self, server: &str) -> bool {
        self.publish(server, Vec::new())
    }

    /// Change the set and order of servers (a reload). Tools of servers that left are dropped;
    /// servers that stay keep theirs.
    pub(crate) fn set_servers(&self, servers: Vec<String>) -> bool {
        let mut inner = self.lock();
        let mut old: HashMap<String, Vec<UpstreamTool>> =
            std::mem::take(&mut inner.servers).into_iter().collect();
        inner.servers = servers
            .into_iter()
            .map(|s| {
                let tools = old.remove(&s).unwrap_or_default();
                (s, tools)
            })
            .collect();
        let Inner {
            servers,
            filters,
            pins,
            withheld,
            ..
        } = &mut *inner;
        let kept = |name: &String| servers.iter().any(|(s, _)| s == name);
        filters.retain(|name, _| kept(name));
        pins.retain(|name, _| kept(name));
        withheld.retain(|name, _| kept(name));
        self.rebuild(&mut inner)
    }

    fn rebuild(&self, inner: &mut Inner) -> bool {
        let open = ToolFilter::default();
        let kept: Vec<(&str, Vec<&UpstreamTool>)> = inner
            .servers
            .iter()
            .map(|(s, tools)| {
                let filter = inner.filters.get(s).unwrap_or(&open);
                (
                    s.as_str(),
                    tools.iter().filter(|t| filter.allows(&t.name)).collect(),
                )
            })
            .collect();
        let input: Vec<(&str, Vec<&str>)> = kept
            .iter()
            .map(|(s, tools)| (*s, tools.iter().map(|t| t.name.as_str()).collect()))
            .collect();
        // A withheld tool keeps the name it would have, so that no other tool's name moves when
        // it is approved, and a call to it is told why it is refused.
        let (names, warnings) = naming::assign(naming::NameKind::Tool, &inner.naming, &input);
        let mut planned = Vec::new();
        let mut withheld_by_name = HashMap::new();
        for ((server, tools), names) in kept.iter().zip(names) {
            let withheld = inner.withheld.get(*server);
            for (tool, public) in tools.iter().zip(names) {
                if let Some(changed) = withheld.and_then(|w| w.get(&tool.name)) {
                    withheld_by_name.insert(
                        public,
                        WithheldTool {
                            server: server.to_string(),
                            upstream_name: tool.name.clone(),
                            changed: changed.clone(),
                        },
                    );
                    continue;
                }
                match Planned::new(inner, server, tool, public) {
                    Some(plan) => planned.push(plan),
                    None => continue, // not an object: `UpstreamTool::parse` let none through
                }
            }
        }
        for warning in &warnings {
            if !inner.warnings.contains(warning) {
                tracing::warn!("{warning}");
            }
        }
        inner.warnings = warnings;
        inner.withheld_by_name = withheld_by_name;
        let changed = planned.len() != inner.published.len()
            || planned.iter().zip(inner.published.iter()).any(|(a, b)| {
                a.definition(&inner.published).get() != b.definition.get() || a.server != b.server
            });
        if changed {
            publish_planned(&mut inner.published, &mut inner.by_name, planned);
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
            .and_then(|&(i, _)| inner.published.get(i).cloned())
    }

    /// Where a call to a public name goes, without copying the tool's definition.
    pub fn route(&self, public_name: &str) -> Option<Arc<Route>> {
        self.lock()
            .by_name
            .get(public_name)
            .map(|(_, route)| route.clone())
    }

    /// Change the naming (a reload that changes it): every public name is assigned again.
    pub(crate) fn set_naming(&self, naming: NamingConfig) -> bool {
        let mut inner = self.lock();
        if inner.naming == naming {
            return false;
        }
        inner.naming = naming;
        self.rebuild(&mut inner)
    }

    /// The naming in force.
    pub fn naming(&self) -> NamingConfig {
        self.lock().naming.clone()
    }

    /// Whether a tool of this public name is published.
    pub fn contains(&self, public_name: &str) -> bool {
        self.lock().by_name.contains_key(public_name)
    }

    /// How many tools `server` has published.
    pub fn count(&self, server: &str) -> usize {
        self.lock()
            .published
            .iter()
            .filter(|t| t.server == server)
            .count()
    }

    /// A counter that moves each time the aggregate changes.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.version.subscribe()
    }
}

/// Judge `server`'s listed tools (those its filter lets through) against its pins, and set its
/// withheld tools.
fn judge(inner: &mut Inner, server: &str) {
    let Inner {
        servers,
        filters,
        pins,
        withheld,
        ..
    } = inner;
    let Some(book) = pins.get_mut(server) else {
        withheld.remove(server);
        return;
    };
    let open = ToolFilter::default();
    let filter = filters.get(server).unwrap_or(&open);
    let listed: Vec<(&str, &RawValue)> = servers
        .iter()
        .find(|(s, _)| s == server)
        .map(|(_, tools)| {
            tools
                .iter()
                .filter(|t| filter.allows(&t.name))
                .map(|t| (t.name.as_str(), &*t.definition))
                .collect()
        })
        .unwrap_or_default();
    // Nothing listed yet (a server that has published nothing): nothing to judge or pin.
    if listed.is_empty() {
        withheld.remove(server);
        return;
    }
    withheld.insert(server.to_string(), book.judge(&listed));
}

// === impl Planned ===

/// One tool a rebuild publishes. A tool whose server, definition upstream and public name are
/// what the last publication had is taken over as it is: one server's arrival or change does not
/// make every other server's renamed definitions and routes again (with 100 servers arriving one
/// by one, that was 100 copies of every definition made and freed, and the heap kept the holes).
struct Planned<'a> {
    server: &'a str,
    tool: &'a UpstreamTool,
    public: String,
    origin: Origin,
}

/// Where a planned tool's published definition comes from.
enum Origin {
    /// The tool at this place of the last publication, whole.
    Kept(usize),
    /// A definition made for this rebuild (the server's own when the public name is its name).
    Made(Arc<RawValue>),
}

impl<'a> Planned<'a> {
    /// `None` when the definition is not an object (`UpstreamTool::parse` lets none through).
    fn new(inner: &Inner, server: &'a str, tool: &'a UpstreamTool, public: String) -> Option<Self> {
        let kept = inner.by_name.get(&public).and_then(|&(i, _)| {
            let last = inner.published.get(i)?;
            let same = last.server == server
                && last.upstream_name == tool.name
                && last.safety == tool.safety
                && last.headers == tool.headers
                && (Arc::ptr_eq(&last.source, &tool.definition)
                    || last.source.get() == tool.definition.get());
            same.then_some(i)
        });
        let origin = match kept {
            Some(i) => Origin::Kept(i),
            None => Origin::Made(renamed(tool, &public)?),
        };
        Some(Self {
            server,
            tool,
            public,
            origin,
        })
    }

    /// The definition it publishes; `published` is the last publication.
    fn definition<'b>(&'b self, published: &'b [PublishedTool]) -> &'b RawValue {
        match &self.origin {
            Origin::Kept(i) => &published[*i].definition,
            Origin::Made(definition) => definition,
        }
    }
}

/// `tool`'s definition under the public name `public` (its own when the names are the same).
fn renamed(tool: &UpstreamTool, public: &str) -> Option<Arc<RawValue>> {
    if public == tool.name {
        return Some(tool.definition.clone());
    }
    crate::upstream::rpc::with_member(&tool.definition, "name", &json_string(public)).map(Arc::from)
}

/// Swap in what a rebuild planned. A kept tool is moved out of the last publication when no
/// reader holds that publication any more (cloned when one does); `by_name` is updated in place:
/// a kept tool keeps its route and only its place may move, a tool made anew gets a new route,
/// and a name no longer published leaves.
fn publish_planned(
    published: &mut Arc<Vec<PublishedTool>>,
    by_name: &mut HashMap<String, (usize, Arc<Route>)>,
    planned: Vec<Planned<'_>>,
) {
    let mut last = std::mem::take(published);
    let mut owned: Option<Vec<Option<PublishedTool>>> =
        Arc::get_mut(&mut last).map(|tools| std::mem::take(tools).into_iter().map(Some).collect());
    let mut next = Vec::with_capacity(planned.len());
    for (place, plan) in planned.into_iter().enumerate() {
        let Planned {
            server,
            tool,
            public,
            origin,
        } = plan;
        let definition = match origin {
            Origin::Kept(i) => {
                let kept = match owned.as_mut() {
                    Some(owned) => owned.get_mut(i).and_then(Option::take),
                    None => last.get(i).cloned(),
                };
                if let Some(kept) = kept {
                    if let Some(entry) = by_name.get_mut(&kept.public_name) {
                        entry.0 = place;
                    }
                    next.push(kept);
                    continue;
                }
                // Public names are unique, so no place is kept twice; made again if it were.
                match renamed(tool, &public) {
                    Some(definition) => definition,
                    None => continue,
                }
            }
            Origin::Made(definition) => definition,
        };
        let tool = PublishedTool {
            public_name: public,
            server: server.to_string(),
            upstream_name: tool.name.clone(),
            definition,
            safety: tool.safety,
            headers: tool.headers.clone(),
            source: tool.definition.clone(),
        };
        let route = Route {
            server: tool.server.clone(),
            upstream_name: tool.upstream_name.clone(),
            safety: tool.safety,
            headers: tool.headers.clone(),
        };
        by_name.insert(tool.public_name.clone(), (place, Arc::new(route)));
        next.push(tool);
    }
    by_name.retain(|name, &mut (i, _)| next.get(i).is_some_and(|t| t.public_name == *name));
    *published = Arc::new(next);
}

impl From<WithheldTool> for crate::error::CallError {
    fn from(tool: WithheldTool) -> Self {
        crate::error::CallError::Withheld {
            server: tool.server,
            tool: tool.upstream_name,
            changed: tool.changed,
        }
    }
}

/// A string as JSON text.
fn json_string(text: &str) -> Box<RawValue> {
    serde_json::value::to_raw_value(text).unwrap_or_else(|_| crate::link::empty_object())
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcp_supervisor_core::naming::NamingMode;
    use std::sync::Arc as StdArc;

    fn tool(name: &str) -> UpstreamTool {
        let _ = StdArc::new(());
        UpstreamTool::parse(
            RawValue::from_string(format!(
                r#"{{"name":"{name}","description":"a tool","inputSchema":{{"type":"object"}},"execution":{{"taskSupport":"optional"}}}}"#
            ))
            .unwrap(),
        )
        .unwrap()
    }

    fn described(name: &str, description: &str) -> UpstreamTool {
        UpstreamTool::parse(
            RawValue::from_string(format!(
                r#"{{"name":"{name}","description":"{description}","inputSchema":{{"type":"object"}}}}"#
            ))
            .unwrap(),
        )
        .unwrap()
    }

    /// Every published tool resolves and routes to itself by its public name.
    fn assert_routes_match(registry: &Registry) {
        for tool in registry.tools().iter() {
            let found = registry.resolve(&tool.public_name).unwrap();
            assert_eq!(found.public_name, tool.public_name);
            assert_eq!(found.definition.get(), tool.definition.get());
            let route = registry.route(&tool.public_name).unwrap();
            assert_eq!(
                (route.server.as_str(), route.upstream_name.as_str()),
                (tool.server.as_str(), tool.upstream_name.as_str())
            );
        }
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
        let found = registry.resolve("b__echo").unwrap();
        assert_eq!(
            (found.server.as_str(), found.upstream_name.as_str()),
            ("b", "echo")
        );
        // The definition is the server's, whole (fields no SDK knows included), renamed.
        assert_eq!(
            found.definition.get(),
            r#"{"name":"b__echo","description":"a tool","inputSchema":{"type":"object"},"execution":{"taskSupport":"optional"}}"#
        );
    }

    #[test]
    fn a_server_outside_the_config_publishes_nothing() {
        let registry = Registry::new(prefixed(), vec!["a".into()]);
        assert!(!registry.publish("ghost", vec![tool("x")]));
        assert!(registry.tools().is_empty());
    }

    #[test]
    fn a_filtered_tool_is_neither_listed_nor_routed() {
        let registry = Registry::new(prefixed(), vec!["a".into(), "b".into()]);
        let own = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let filter = ToolFilter::new(Some(&own(&["read_*", "list"])), &own(&["read_secret"]))
            .expect("valid patterns");
        assert!(
            !registry.set_filter("a", filter.clone()),
            "nothing published yet"
        );
        assert!(registry.publish(
            "a",
            vec![
                tool("read_file"),
                tool("read_secret"),
                tool("write"),
                tool("list")
            ]
        ));
        registry.publish("b", vec![tool("write")]);
        let names: Vec<_> = registry
            .tools()
            .iter()
            .map(|t| t.public_name.clone())
            .collect();
        assert_eq!(names, ["a__read_file", "a__list", "b__write"]);
        assert_eq!(registry.count("a"), 2);
        assert!(registry.route("a__write").is_none());
        assert!(registry.route("a__read_secret").is_none());
        assert!(registry.is_filtered("a", "write") && !registry.is_filtered("b", "write"));
        assert_eq!(
            registry.listed("a"),
            ["read_file", "read_secret", "write", "list"]
        );
        assert!(!registry.set_filter("a", filter), "the same filter again");
        // Opening the filter publishes what it hid.
        assert!(registry.set_filter("a", ToolFilter::default()));
        assert_eq!(registry.count("a"), 4);
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
    #[test]
    fn an_arrival_keeps_the_definitions_every_other_server_published() {
        let registry = Registry::new(prefixed(), vec!["a".into(), "b".into(), "c".into()]);
        registry.publish("a", vec![tool("echo"), tool("add")]);
        let first = registry.tools();
        let route = registry.route("a__add").unwrap();
        // A reader holds the publication: a's tools are copied, their definitions shared.
        assert!(registry.publish("b", vec![tool("echo")]));
        let second = registry.tools();
        for (before, after) in first.iter().zip(second.iter()) {
            assert_eq!(before.public_name, after.public_name);
            assert!(Arc::ptr_eq(&before.definition, &after.definition));
        }
        assert!(Arc::ptr_eq(&route, &registry.route("a__add").unwrap()));
        // No reader holds it: a's and b's tools are moved, the same definitions still.
        drop((first, route));
        let pointers: Vec<_> = second.iter().map(|t| Arc::as_ptr(&t.definition)).collect();
        drop(second);
        assert!(registry.publish("c", vec![tool("add")]));
        let third = registry.tools();
        let names: Vec<_> = third.iter().map(|t| t.public_name.as_str()).collect();
        assert_eq!(names, ["a__echo", "a__add", "b__echo", "c__add"]);
        for (tool, pointer) in third.iter().zip(pointers) {
            assert!(std::ptr::eq(Arc::as_ptr(&tool.definition), pointer));
        }
        assert_routes_match(&registry);
    }

    #[test]
    fn a_changed_definition_is_published_anew_and_every_route_follows_its_place() {
        let registry = Registry::new(prefixed(), vec!["a".into(), "b".into()]);
        registry.publish("a", vec![described("x", "one"), described("y", "one")]);
        registry.publish("b", vec![described("z", "one")]);
        let before = registry.resolve("b__z").unwrap();
        assert!(registry.publish("a", vec![described("y", "two")]));
        assert!(registry.resolve("a__x").is_none() && registry.route("a__x").is_none());
        assert_eq!(
            registry.resolve("a__y").unwrap().definition.get(),
            r#"{"name":"a__y","description":"two","inputSchema":{"type":"object"}}"#
        );
        // b's tool moved from the third place to the second and is the same tool.
        let after = registry.resolve("b__z").unwrap();
        assert!(Arc::ptr_eq(&before.definition, &after.definition));
        assert_eq!(registry.count("a"), 1);
        assert_routes_match(&registry);
        // The same definition again under a name that is now taken by an earlier server.
        assert!(!registry.publish("a", vec![described("y", "two")]));
    }

    #[test]
    fn a_public_name_that_moves_to_another_server_is_renamed_and_routed_there() {
        let original = NamingConfig {
            mode: NamingMode::Original,
            separator: "__".into(),
        };
        let registry = Registry::new(original, vec!["a".into(), "b".into()]);
        registry.publish("b", vec![described("echo", "b's")]);
        assert_eq!(registry.route("echo").unwrap().server, "b");
        // a comes first in the config: the plain name is its now, b's tool is prefixed.
        assert!(registry.publish("a", vec![described("echo", "a's")]));
        assert_eq!(registry.route("echo").unwrap().server, "a");
        assert_eq!(
            registry.resolve("b__echo").unwrap().definition.get(),
            r#"{"name":"b__echo","description":"b's","inputSchema":{"type":"object"}}"#
        );
        assert_routes_match(&registry);
        assert!(registry.withdraw("a"));
        assert_eq!(registry.route("echo").unwrap().server, "b");
        assert!(registry.route("b__echo").is_none());
        assert_routes_match(&registry);
    }
}
