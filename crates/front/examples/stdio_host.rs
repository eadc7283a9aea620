//! A Rust host that serves its supervised servers to an MCP client over stdio: the config's
//! servers, their tools prefixed with each server's name (as `serve`), crash-healed by the hub,
//! answered on this process's stdin and stdout until stdin ends; then every server is stopped.
//!
//! ```sh
//! cargo build -p mcp-fault-server && cargo run -p mcp-supervisor-front --example stdio_host -- examples/servers.json
//! ```
//!
//! The config is the `mcpServers` file `serve` reads. Nothing but MCP messages is written to
//! stdout; this example logs nothing.

use std::error::Error;

use mcp_supervisor::HubOptions;
use mcp_supervisor::core::config::parse_config;
use mcp_supervisor_front::{Mode, stdio};

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let path = std::env::args()
        .nth(1)
        .ok_or("usage: stdio_host CONFIG.json (a config with an mcpServers object)")?;
    let text = std::fs::read_to_string(&path).map_err(|e| format!("cannot read {path}: {e}"))?;
    let config = parse_config(&text, &|name| std::env::var(name).ok())
        .map_err(|errors| format!("{path} is invalid:\n{errors}"))?;

    let proxy = mcp_supervisor_front::start(config, Mode::Aggregate, HubOptions::default());
    stdio::run(proxy.clone()).await;
    proxy.hub().stop().await;
    Ok(())
}
