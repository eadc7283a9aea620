//! `http-heal`: restart a streamable-HTTP server behind the hub (the old session is gone) and time
//! the next call through the hub, which must succeed.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use mcp_supervisor::Hub;
use serde_json::{Value, json};

use crate::util::{self, HttpServer, STATS_HEADER, Stats, stats_row};

const SERVER: &str = "web";
const TOOL: &str = "web__echo";
const CALL_LIMIT: Duration = Duration::from_secs(10);
/// How long a round keeps calling after a failed first call.
const RETRY_LIMIT: Duration = Duration::from_secs(10);

pub async fn run(fault: &Path, restarts: u32) -> Result<Value> {
    let port = util::free_port()?;
    let mut server = HttpServer::start(fault, port).await?;
    let config =
        util::hub_config(json!({ SERVER: { "url": format!("http://127.0.0.1:{port}/mcp") } }))?;
    let hub = Hub::start(config);
    let outcome = util::with_hub(hub, async |hub: &Hub| {
        let mut ready = util::ready_after(hub, SERVER, 0, Duration::from_secs(30)).await?;
        let mut heals = Vec::new();
        let mut until_success = Vec::new();
        let mut failures: Vec<String> = Vec::new();
        for round in 0..restarts {
            if round > 0 {
                // A fresh outage budget for every restart, as for a server that stayed up for the
                // stability window (30 s) before it was restarted.
                hub.reconnect(SERVER)?;
                util::ready_after(hub, SERVER, ready.generation, Duration::from_secs(30)).await?;
            }
            server.kill().await;
            server = HttpServer::start(fault, port).await?;
            let heal =
                util::time_heal(hub, TOOL, &format!("heal {round}"), CALL_LIMIT, RETRY_LIMIT)
                    .await
                    .with_context(|| format!("restart {}", round + 1))?;
            heals.extend(heal.first);
            until_success.push(heal.until_success);
            if let Some(failure) = heal.failure {
                failures.push(format!("restart {}: {failure}", round + 1));
            }
            // The next round starts from a ready generation.
            ready = util::ready_after(hub, SERVER, 0, Duration::from_secs(30)).await?;
        }
        server.kill().await;
        Ok((heals, until_success, failures))
    })
    .await;
    drop(server);
    let (heals, until_success, failures) = outcome?;
    let until_success = Stats::of(&until_success)?;

    println!(
        "http-heal: {restarts} restarts of a streamable-HTTP fault server on 127.0.0.1:{port} behind a hub (default policy)"
    );
    let stats = if heals.is_empty() {
        None
    } else {
        Some(Stats::of(&heals)?)
    };
    let mut rows = Vec::new();
    if let Some(stats) = &stats {
        rows.push(stats_row("first call, when it succeeded", stats));
    }
    rows.push(stats_row(
        "until a call succeeded (calling again on failure)",
        &until_success,
    ));
    util::print_table(
        "time from the restarted server accepting to an answer (ms)",
        &STATS_HEADER,
        &rows,
    );
    println!(
        "\n  first calls that failed: {} of {restarts}",
        failures.len()
    );
    let mut shown = 0;
    for (i, failure) in failures.iter().enumerate() {
        // Show distinct messages only (they differ in the restart number).
        let body = failure
            .split_once(": ")
            .map_or(failure.as_str(), |(_, b)| b);
        if shown < 3 && !failures[..i].iter().any(|f| f.ends_with(body)) {
            println!("    {failure}");
            shown += 1;
        }
    }
    Ok(json!({
        "bench": "http-heal",
        "restarts": restarts,
        "heal_ms": stats.map(|s| s.json()),
        "until_success_ms": until_success.json(),
        "failures": failures.len(),
    }))
}
