//! `"toolExposure": "search"` (SPEC §13): instead of every tool, a client sees two,
//! `search_tools` (ranked search over the registry's catalog, answered here with the matches'
//! definitions whole, under their public names) and `call_tool` (a call by public name, unwrapped
//! here into the `tools/call` it names and sent through the proxy's one call path: deadlines,
//! recovery and replay rules as for any call). `notifications/tools/list_changed` still flows,
//! so a host that caches knows to search again.
//!
//! It owns the two tools' definitions and the rewriting of a `call_tool` request; the ranking is
//! the core's ([`mcp_supervisor::core::tool_search`]), and it never talks to a server itself.
//! Who may see or call what is not its to judge: `search_tools` shows only the tools its
//! caller's filter lets through (the `authorize` rules, as for `tools/list`), and the call
//! `call_tool` names is judged by the proxy like any `tools/call`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use mcp_supervisor::core::config::ToolExposure;
use mcp_supervisor::core::members::{self, Members};
use mcp_supervisor::core::tool_search::Index;
use mcp_supervisor::hub::LIST_WAIT;
use mcp_supervisor::link::RpcError;
use mcp_supervisor::{Hub, PublishedTool};
use serde::Deserialize;
use serde_json::json;
use serde_json::value::RawValue;

use crate::Mode;
use crate::json::{lock, to_raw};

/// The searching tool's name.
pub const SEARCH_TOOLS: &str = "search_tools";
/// The calling tool's name.
pub const CALL_TOOL: &str = "call_tool";
/// How many definitions `search_tools` returns when the client does not say.
pub const DEFAULT_LIMIT: usize = 10;
/// The most it returns, whatever the client says.
pub const MAX_LIMIT: usize = 50;

/// The `tools/list` result in search mode: the two tools.
pub fn listed() -> serde_json::Value {
    json!({ "tools": [
        {
            "name": SEARCH_TOOLS,
            "title": "Search tools",
            "description": "Search the tools available here by what they do (words of their names, descriptions and argument names). Returns the best matches' whole definitions: name, description and input schema. Call one with call_tool. The tools can change: search again after a tools/list_changed notification.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "query": { "type": "string", "description": "Words about the task, e.g. \"read a file\" or \"weather forecast\"." },
                    "limit": { "type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT, "description": "The most tools to return." }
                },
                "required": ["query"]
            },
            "annotations": { "readOnlyHint": true, "openWorldHint": false }
        },
        {
            "name": CALL_TOOL,
            "title": "Call a tool",
            "description": "Call a tool that search_tools found, by its name, with arguments that match its input schema. Its result comes back as the tool gave it.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "name": { "type": "string", "description": "The tool's name, as search_tools gave it." },
                    "arguments": { "type": "object", "description": "The tool's arguments." }
                },
                "required": ["name"]
            }
        }
    ] })
}

/// What a `tools/call` becomes in search mode.
pub enum Exposed {
    /// Answered here (a search, or a `call_tool` that names no tool).
    Answer(Result<Box<RawValue>, RpcError>),
    /// The call to send, by public name, with its params.
    Call { name: String, params: Box<RawValue> },
}

/// A tool result that says what went wrong (the model sees it and can try again).
fn tool_error(message: &str) -> Result<Box<RawValue>, RpcError> {
    to_raw(&json!({ "content": [{ "type": "text", "text": message }], "isError": true }))
}

#[derive(Deserialize)]
struct Outer<'a> {
    #[serde(borrow, default)]
    arguments: Option<&'a RawValue>,
}

/// A catalog and its search index.
type Indexed = (Arc<Vec<PublishedTool>>, Arc<Index>);

/// How tools are shown, owned by the proxy: every tool, or the two tools of search mode with
/// the index of the catalog it was built from (rebuilt when the catalog changes).
#[derive(Default)]
pub struct ToolSearch {
    on: AtomicBool,
    index: Mutex<Option<Indexed>>,
}

impl ToolSearch {
    /// Whether the client sees the two tools instead of every tool.
    pub fn is_on(&self) -> bool {
        self.on.load(Ordering::SeqCst)
    }

    /// Set how tools are shown; whether that changed what clients see.
    pub fn set(&self, exposure: ToolExposure) -> bool {
        let search = exposure == ToolExposure::Search;
        self.on.swap(search, Ordering::SeqCst) != search
    }

    /// A `tools/call` for `name` in search mode: `search_tools` is answered from `hub`'s
    /// catalog (only the tools `shown` lets through), `call_tool` becomes the call it names
    /// (every other member of the params, `_meta` and `task` among them, whole), and any other
    /// name is called as it is.
    pub(crate) async fn exposed(
        &self,
        hub: &Hub,
        mode: Mode,
        name: &str,
        params: &RawValue,
        shown: &(dyn Fn(&PublishedTool) -> bool + Sync),
    ) -> Exposed {
        let arguments = serde_json::from_str::<Outer<'_>>(params.get())
            .ok()
            .and_then(|o| o.arguments);
        match name {
            SEARCH_TOOLS => Exposed::Answer(self.search_tools(hub, arguments, shown)),
            CALL_TOOL => unwrap_call(hub, mode, params, arguments).await,
            _ => Exposed::Call {
                name: name.to_string(),
                params: params.to_owned(),
            },
        }
    }

    fn search_tools(
        &self,
        hub: &Hub,
        arguments: Option<&RawValue>,
        shown: &(dyn Fn(&PublishedTool) -> bool + Sync),
    ) -> Result<Box<RawValue>, RpcError> {
        #[derive(Deserialize)]
        struct Search {
            query: Option<String>,
            limit: Option<serde_json::Value>,
        }
        let Some(search) = arguments.and_then(|a| serde_json::from_str::<Search>(a.get()).ok())
        else {
            return tool_error(
                "search_tools needs its arguments as an object with a `query` string, e.g. {\"query\": \"read a file\"}",
            );
        };
        let Some(query) = search.query.filter(|q| !q.trim().is_empty()) else {
            return tool_error(
                "search_tools needs a `query`: words about the task, e.g. \"read a file\"",
            );
        };
        let limit = match search.limit {
            None | Some(serde_json::Value::Null) => DEFAULT_LIMIT,
            Some(v) => match v.as_u64().filter(|n| *n >= 1) {
                Some(n) => usize::try_from(n).unwrap_or(MAX_LIMIT).min(MAX_LIMIT),
                None => {
                    return tool_error(&format!(
                        "search_tools: `limit` must be a whole number from 1 to {MAX_LIMIT} (got {v})"
                    ));
                }
            },
        };
        let tools = hub.tools();
        let index = {
            let mut cached = lock(&self.index);
            match &*cached {
                Some((of, index)) if Arc::ptr_eq(of, &tools) => index.clone(),
                _ => {
                    let index = Arc::new(Index::build(tools.iter().map(|t| t.definition.get())));
                    *cached = Some((tools.clone(), index.clone()));
                    index
                }
            }
        };
        // Every match ranked, then the first `limit` the caller may see: a tool it may not
        // use neither shows nor takes the place of one it may.
        let found = index
            .search(&query, tools.len())
            .into_iter()
            .filter_map(|(position, _)| tools.get(position))
            .filter(|tool| shown(tool))
            .take(limit);
        let mut text = String::from(r#"{"tools":["#);
        for (i, tool) in found.enumerate() {
            if i > 0 {
                text.push(',');
            }
            text.push_str(tool.definition.get());
        }
        text.push_str("]}");
        to_raw(&json!({ "content": [{ "type": "text", "text": text }] }))
    }
}

/// `call_tool`'s arguments as the call they name: its `name` and `arguments` become the
/// params' own, every other member stays.
async fn unwrap_call(
    hub: &Hub,
    mode: Mode,
    params: &RawValue,
    arguments: Option<&RawValue>,
) -> Exposed {
    #[derive(Deserialize)]
    struct Call<'a> {
        name: Option<String>,
        #[serde(borrow, default)]
        arguments: Option<&'a RawValue>,
    }
    let Some(call) = arguments.and_then(|a| serde_json::from_str::<Call<'_>>(a.get()).ok()) else {
        return Exposed::Answer(tool_error(
            "call_tool needs its arguments as an object with the tool's `name` (from search_tools) and its `arguments`",
        ));
    };
    let Some(name) = call.name.filter(|n| !n.is_empty()) else {
        return Exposed::Answer(tool_error(
            "call_tool needs the tool's `name`, as search_tools gave it",
        ));
    };
    // In `serve`, a name the registry does not hold is said here, once the lists are in;
    // in `wrap` it goes to the server, whose own answer comes back.
    if mode == Mode::Aggregate {
        hub.wait_listed(LIST_WAIT).await;
        if hub.registry().route(&name).is_none() {
            return Exposed::Answer(tool_error(&format!(
                "no tool is named \"{name}\" here; search_tools finds the tools there are, by what they do"
            )));
        }
    }
    let Ok(outer) = serde_json::from_str::<Members<'_>>(params.get()) else {
        return Exposed::Answer(Err(RpcError::new(
            -32602,
            "Invalid params: tools/call params are an object",
        )));
    };
    let Ok(name_json) = serde_json::value::to_raw_value(&name) else {
        return Exposed::Answer(Err(RpcError::new(-32603, "the tool name is not text")));
    };
    let mut inner: Vec<_> = Vec::with_capacity(outer.0.len() + 1);
    for (key, value) in &outer.0 {
        match key.as_ref() {
            "name" => inner.push((key.clone(), &*name_json)),
            "arguments" => inner.extend(call.arguments.map(|a| (key.clone(), a))),
            _ => inner.push((key.clone(), *value)),
        }
    }
    match members::write(&inner) {
        Some(params) => Exposed::Call { name, params },
        None => Exposed::Answer(Err(RpcError::new(
            -32603,
            "the call's params could not be written",
        ))),
    }
}
