//! An embedding host that answers its servers' requests itself.
//!
//! MCP servers may ask their client for things during a call: `roots/list` (which folders the
//! user works in), `sampling/createMessage` (a completion from the host's model) and
//! `elicitation/create` (a question for the user). A host gives the [`Hub`] one handler (a
//! [`Downstream`]) for them and declares what it can do; the default, [`Refuse`], answers each
//! with a clean JSON-RPC error. A call may also name its own handler (`CallArgs::origin`): the
//! requests that call causes go there instead.
//!
//! Run it with the workspace's fault server, which has a `roots` tool that asks for roots:
//!
//! ```sh
//! cargo build -p mcp-fault-server
//! cargo run -p mcp-supervisor --example client_handler -- target/debug/mcp-fault-server
//! ```

use std::sync::Arc;
use std::time::Duration;

use mcp_supervisor::core::config::parse_config;
use mcp_supervisor::link::BoxFuture;
use mcp_supervisor::{CallArgs, Downstream, Hub, HubOptions, Refuse, RpcError};
use serde_json::json;
use serde_json::value::RawValue;

/// The host's side of its servers' requests: it knows its project's root, and nothing else.
struct Host;

impl Downstream for Host {
    fn request(
        &self,
        method: &str,
        params: Option<Box<RawValue>>,
    ) -> BoxFuture<'static, Result<Box<RawValue>, RpcError>> {
        match method {
            "roots/list" => Box::pin(async {
                let roots =
                    json!({ "roots": [{ "uri": "file:///home/me/project", "name": "project" }] });
                serde_json::value::to_raw_value(&roots)
                    .map_err(|e| RpcError::new(-32603, e.to_string()))
            }),
            // Sampling, elicitation: this host has neither; refuse them cleanly.
            _ => Refuse.request(method, params),
        }
    }

    fn notify(&self, _method: &str, _params: Option<Box<RawValue>>) {}
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let server = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "target/debug/mcp-fault-server".to_string());
    let config = json!({ "mcpServers": { "fault": { "command": server } } }).to_string();
    let config = parse_config(&config, &|name| std::env::var(name).ok())
        .map_err(|errors| errors.to_string())?;
    let options =
        HubOptions::answering(Arc::new(Host), &json!({ "roots": { "listChanged": true } }));
    let hub = Hub::start_with_options(config, options);
    let not_ready = hub.wait_ready(Duration::from_secs(10)).await;
    if !not_ready.is_empty() {
        hub.stop().await;
        return Err(format!(
            "not ready: {not_ready:?} (build it: cargo build -p mcp-fault-server)"
        )
        .into());
    }
    let result = hub.call("fault__roots", CallArgs::default()).await;
    hub.stop().await;
    let result = result?;
    println!(
        "the server asked for roots and got: {}",
        serde_json::to_string(&result.structured_content)?
    );
    Ok(())
}
