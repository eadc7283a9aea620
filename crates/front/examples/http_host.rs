//! A Rust host that serves its supervised servers to MCP clients over streamable HTTP: the
//! config's servers, their tools prefixed with each server's name (as `serve`), crash-healed by
//! the hub, at `http://ADDR/mcp` (sessions, event streams, and 2026-07-28 requests without one)
//! until SIGINT or SIGTERM; then every session ends and every server is stopped.
//!
//! ```sh
//! cargo build -p mcp-fault-server && cargo run -p mcp-supervisor-front --features http --example http_host -- examples/servers.json 127.0.0.1:8080
//! ```
//!
//! ADDR defaults to `127.0.0.1:0` (a free port). The one line it prints on stdout is the URL it
//! serves; it logs nothing. It has no guard: it listens on loopback only, and a host that
//! listens further puts its own (Host, Origin, a token) in front of the router.

use std::error::Error;
use std::net::SocketAddr;

use mcp_supervisor::HubOptions;
use mcp_supervisor::core::config::parse_config;
use mcp_supervisor_front::{Mode, http, seal};
use tokio::signal::unix::{SignalKind, signal};

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .ok_or("usage: http_host CONFIG.json [127.0.0.1:PORT]")?;
    let addr: SocketAddr = args.next().as_deref().unwrap_or("127.0.0.1:0").parse()?;
    if !addr.ip().is_loopback() {
        return Err("this example has no guard: give it a loopback address".into());
    }
    let text = std::fs::read_to_string(&path).map_err(|e| format!("cannot read {path}: {e}"))?;
    let config = parse_config(&text, &|name| std::env::var(name).ok())
        .map_err(|errors| format!("{path} is invalid:\n{errors}"))?;

    // Session ids sealed with a key of this process's own (a replicated service shares one).
    let sealing = http::Sealing {
        keys: seal::Keys::random()?,
        max_age: config.session_max_age,
    };
    let proxy = mcp_supervisor_front::start(config, Mode::Aggregate, HubOptions::default());
    let options = http::Options::new(sealing);
    let shutdown = options.shutdown.clone();
    let app = http::router(proxy.clone(), options);

    let listener = tokio::net::TcpListener::bind(addr).await?;
    println!("http://{}{}", listener.local_addr()?, http::PATH);
    let mut terminate = signal(SignalKind::terminate())?;
    let stop = async move {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = terminate.recv() => {}
        }
        // Every session and stream ends, so the connections close.
        shutdown.cancel();
    };
    axum::serve(listener, app)
        .with_graceful_shutdown(stop)
        .await?;
    proxy.hub().stop().await;
    Ok(())
}
