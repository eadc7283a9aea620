//! An MCP session with a proxy's `/mcp` face that calls tools by their public names.

use std::time::Duration;

use serde_json::{Value, json};

use super::{Running, answer_of, post_initialize};

/// One session (protocol 2025-06-18, no capabilities), its calls bounded by `limit` each.
pub struct McpSession {
    http: reqwest::Client,
    url: String,
    session: String,
    id: u64,
    limit: Duration,
}

impl McpSession {
    /// `initialize` on `proxy`'s `/mcp` as client `name`.
    pub async fn open(proxy: &Running, name: &str, limit: Duration) -> Self {
        Self::open_url(&proxy.url("/mcp"), name, limit).await
    }

    /// `initialize` on the MCP endpoint at `url` as client `name`.
    pub async fn open_url(url: &str, name: &str, limit: Duration) -> Self {
        let http = reqwest::Client::new();
        let url = url.to_owned();
        let (response, session) = post_initialize(&http, &url, None, json!({}), name).await;
        drop(response);
        Self {
            http,
            url,
            session,
            id: 0,
            limit,
        }
    }

    /// `tools/call` of `tool`: the text of its content, `Err` for an `isError` result. Panics
    /// when there is no result at all.
    pub async fn call(&mut self, tool: &str, arguments: Value) -> Result<String, String> {
        self.id += 1;
        let message = json!({ "jsonrpc": "2.0", "id": self.id, "method": "tools/call",
                              "params": { "name": tool, "arguments": arguments } });
        let body = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-06-18")
            .header("mcp-session-id", &self.session)
            .timeout(self.limit)
            .json(&message)
            .send()
            .await
            .unwrap_or_else(|e| panic!("{tool}: {e}"))
            .text()
            .await
            .unwrap_or_default();
        let result = answer_of(&body)["result"].clone();
        assert!(result.is_object(), "{tool}: no result in {body}");
        let text: Vec<&str> = result["content"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["text"].as_str())
            .collect();
        let text = text.join("\n");
        match result["isError"].as_bool() {
            Some(true) => Err(text),
            _ => Ok(text),
        }
    }
}
