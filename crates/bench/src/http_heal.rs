//! `http-heal`: restart a streamable-HTTP server behind the hub (the old session is gone) and time
//! the next call through the hub, which must succeed.

use std::path::Path;
use std::time::Duration;

use anyhow::{Result, bail};
use mcp_supervisor::{CallArgs, Hub};
use serde_json::{Value, json};
use tokio::time::Instant;

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
            let message = format!("heal {round}");
            let arguments = Some(util::object(json!({ "message": message }))?);
            let call = async || -> Result<()> {
                let args = CallArgs {
                    arguments: arguments.clone(),
                    timeout: Some(CALL_LIMIT),
                    ..Default::default()
                };
                let result = hub.call(TOOL, args).await?;
                util::check_echo(&result, &message)
            };
            let start = Instant::now();
            let first = call().await;
            let elapsed = start.elapsed();
            match first {
                Ok(()) => {
                    heals.push(elapsed);
                    until_success.push(elapsed);
                }
                Err(e) => {
                    failures.push(format!("restart {}: {e:#}", round + 1));
                    // How long until a caller that tries again gets an answer.
                    loop {
                        match call().await {
                            Ok(()) => {
                                until_success.push(start.elapsed());
                                break;
                            }
                            Err(e) if start.elapsed() >= RETRY_LIMIT => {
                                bail!(
                                    "restart {}: no call succeeded within {RETRY_LIMIT:?}: {e:#}",
                                    round + 1
                                )
                            }
                            Err(_) => tokio::time::sleep(Duration::from_millis(1)).await,
                        }
                    }
                }
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
