//! `callpath`: the latency the hub adds to a tool call, against a bare rmcp client calling an
//! identical stdio server.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use mcp_supervisor::{CallArgs, Hub};
use rmcp::model::{CallToolRequestParams, JsonObject};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::util::{self, BareServer, STATS_HEADER, Stats, stats_row};

const SERVER: &str = "fault";
const TOOL: &str = "fault__echo";
const CALL_LIMIT: Duration = Duration::from_secs(10);

pub async fn run(fault: &Path, calls: u32, warmup: u32, block: u32) -> Result<Value> {
    let message = "x".repeat(1024);
    let arguments = util::object(json!({ "message": message }))?;

    let bare = BareServer::start(fault, &[]).await?;
    let config = util::hub_config(json!({ SERVER: { "command": fault } }))?;
    let hub = Hub::start(config);
    let measured = util::with_hub(hub, async |hub: &Hub| {
        util::ready_after(hub, SERVER, 0, Duration::from_secs(30)).await?;
        let bare = &bare;
        for i in 0..warmup {
            bare_call(bare, &arguments, &message)
                .await
                .with_context(|| format!("bare warm-up call {i}"))?;
            hub_call(hub, &arguments, &message)
                .await
                .with_context(|| format!("hub warm-up call {i}"))?;
        }
        let mut bare_times = Vec::with_capacity(calls as usize);
        let mut hub_times = Vec::with_capacity(calls as usize);
        let mut done = 0;
        let mut index = 0u32;
        while done < calls {
            let n = block.min(calls - done);
            // Alternate which client goes first, so neither always follows the other.
            let order = if index.is_multiple_of(2) {
                [false, true]
            } else {
                [true, false]
            };
            for via_hub in order {
                for _ in 0..n {
                    if via_hub {
                        hub_times.push(
                            hub_call(hub, &arguments, &message)
                                .await
                                .context("hub call")?,
                        );
                    } else {
                        bare_times.push(
                            bare_call(bare, &arguments, &message)
                                .await
                                .context("bare call")?,
                        );
                    }
                }
            }
            done += n;
            index += 1;
        }
        Ok((bare_times, hub_times))
    })
    .await;
    bare.shutdown().await;
    let (bare_times, hub_times) = measured?;

    let bare = Stats::of(&bare_times)?;
    let via_hub = Stats::of(&hub_times)?;
    let added_median = via_hub.median - bare.median;
    let added_p99 = via_hub.p99 - bare.p99;
    // Paired by block: the two clients ran back to back, so a block pair saw the same machine.
    let per_block: Vec<f64> = bare_times
        .chunks(block as usize)
        .zip(hub_times.chunks(block as usize))
        .map(|(b, h)| Ok(Stats::of(h)?.median - Stats::of(b)?.median))
        .collect::<Result<_>>()?;
    let paired = Stats::of_ms(per_block)?;
    println!(
        "callpath: echo with a 1 KiB message, {calls} calls per client after {warmup} warm-up calls, alternating in blocks of {block}"
    );
    util::print_table(
        "latency per call (ms)",
        &STATS_HEADER,
        &[
            stats_row("bare rmcp client", &bare),
            stats_row("through the hub", &via_hub),
        ],
    );
    println!(
        "\n  added by the hub: median {:.1} µs, p99 {:.1} µs",
        added_median * 1000.0,
        added_p99 * 1000.0
    );
    println!(
        "  per block pair (hub block median - bare block median), over {} pairs: median {:.1} µs, p10..p90 {:.1}..{:.1} µs",
        paired.n,
        paired.median * 1000.0,
        paired.p10 * 1000.0,
        paired.p90 * 1000.0
    );
    Ok(json!({
        "bench": "callpath",
        "calls": calls,
        "warmup": warmup,
        "block": block,
        "message_bytes": 1024,
        "bare_ms": bare.json(),
        "hub_ms": via_hub.json(),
        "added_median_us": util::round3(added_median * 1000.0),
        "added_p99_us": util::round3(added_p99 * 1000.0),
        "added_per_block_median_us": util::round3(paired.median * 1000.0),
    }))
}

async fn bare_call(bare: &BareServer, arguments: &JsonObject, message: &str) -> Result<Duration> {
    let start = Instant::now();
    let params = CallToolRequestParams::new("echo").with_arguments(arguments.clone());
    let result = tokio::time::timeout(CALL_LIMIT, bare.client.call_tool(params))
        .await
        .map_err(|_| anyhow!("no answer within {CALL_LIMIT:?}"))?
        .map_err(|e| anyhow!("{e}"))?;
    let elapsed = start.elapsed();
    util::check_echo(&result, message)?;
    Ok(elapsed)
}

async fn hub_call(hub: &Hub, arguments: &JsonObject, message: &str) -> Result<Duration> {
    let start = Instant::now();
    let args = CallArgs {
        arguments: Some(arguments.clone()),
        timeout: Some(CALL_LIMIT),
        ..Default::default()
    };
    let result = hub.call(TOOL, args).await.map_err(|e| anyhow!("{e}"))?;
    let elapsed = start.elapsed();
    util::check_echo(&result, message)?;
    Ok(elapsed)
}
