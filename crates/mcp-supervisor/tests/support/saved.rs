//! A saved catalog for the supervisor's tests: a state directory of each test's own, a hub
//! that saves into it, and one run of the fake that leaves a catalog there. No server runs.
#![allow(dead_code)] // shared by several test crates, each using a part

use std::sync::Arc;

use mcp_supervisor::Hub;
use mcp_supervisor::catalog::CatalogStore;
use mcp_supervisor::core::config::{Config, ServerConfig};
use mcp_supervisor::core::naming::NamingConfig;
use mcp_supervisor::link::Connector;
use rmcp::model::Tool;

use super::fake::*;

pub fn tools(names: &[&str]) -> Vec<Tool> {
    names.iter().map(|n| tool(n)).collect()
}

pub fn quick() -> ServerConfig {
    let mut s = server();
    s.reconnect.initial_delay = ms(100);
    s.reconnect.max_delay = ms(1000);
    s.health.interval = None;
    s
}

pub fn start_saving(server: ServerConfig, fake: &Fake, dir: &StateDir) -> Hub {
    let config = Config {
        servers: vec![server],
        naming: NamingConfig::default(),
        ..Config::default()
    };
    let fake = fake.clone();
    Hub::start_with_catalog(
        config,
        Arc::new(move |_: &ServerConfig| Arc::new(fake.clone()) as Arc<dyn Connector>),
        dir.0.clone(),
    )
}

/// Run the server once so that its catalog is saved, then stop.
pub async fn save_once(dir: &StateDir, names: &[&str]) {
    let fake = Fake::new(vec![Gen::ok(tools(names))], Gen::open_fails("unscripted"));
    let hub = start_saving(quick(), &fake, dir);
    ready(&hub, 1).await;
    stop(&hub).await;
    let saved = CatalogStore::new(&dir.0)
        .load(&quick())
        .expect("the catalog was saved by the first run");
    assert_eq!(saved.tools.len(), names.len());
}
