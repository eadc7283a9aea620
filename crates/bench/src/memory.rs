//! `memory`: the resident memory of this process (the hub side; the server processes are
//! children and not counted) with N supervised stdio servers.

use std::path::Path;
use std::time::Duration;

use anyhow::{Result, bail};
use mcp_supervisor::{CallArgs, Hub};
use serde_json::{Map, Value, json};
use tokio::time::Instant;

use crate::util;

/// The most a supervised server may add to the hub's RSS, in KiB. 85 KiB was measured on
/// 2026-12-04 and growth to 131 KiB went unnoticed under the old target of 256 KiB (issue 30);
/// this one is close enough to the figure to catch such a growth.
const RSS_TARGET_KIB: f64 = 96.0;

pub async fn run(fault: &Path, servers: u32, calls: u32) -> Result<Value> {
    let names: Vec<String> = (0..servers).map(|i| format!("s{i:03}")).collect();
    let mut config = Map::new();
    for name in &names {
        config.insert(name.clone(), json!({ "command": fault }));
    }
    let config = util::hub_config(Value::Object(config))?;

    let before = util::rss_kib()?;
    let start = Instant::now();
    let hub = Hub::start(config);
    let (ready_in, after_ready, after_calls, failures) = util::with_hub(hub, async |hub: &Hub| {
        let pending = hub.wait_ready(Duration::from_secs(120)).await;
        if !pending.is_empty() {
            bail!(
                "{} of {servers} servers were not ready within 120 s: {:?}",
                pending.len(),
                pending
            );
        }
        let ready_in = start.elapsed();
        let after_ready = util::rss_kib()?;
        let mut failures = 0u32;
        for i in 0..calls {
            let name = &names[i as usize % names.len()];
            let message = format!("call {i}");
            let args = CallArgs {
                arguments: Some(util::object(json!({ "message": message }))?),
                timeout: Some(Duration::from_secs(10)),
                ..Default::default()
            };
            match hub.call(&format!("{name}__echo"), args).await {
                Ok(result) if util::check_echo(&result, &message).is_ok() => {}
                _ => failures += 1,
            }
        }
        let after_calls = util::rss_kib()?;
        Ok((ready_in, after_ready, after_calls, failures))
    })
    .await?;

    let mib = |kib: u64| kib as f64 / 1024.0;
    let per_server_kib = (after_ready.0 as f64 - before.0 as f64) / f64::from(servers);
    println!(
        "memory: {servers} stdio fault servers behind one hub; RSS of this process only (children excluded)"
    );
    util::print_table(
        "resident memory",
        &["point", "VmRSS MiB", "VmHWM MiB"],
        &[
            vec![
                "before Hub::start".into(),
                format!("{:.1}", mib(before.0)),
                format!("{:.1}", mib(before.1)),
            ],
            vec![
                format!("all {servers} ready"),
                format!("{:.1}", mib(after_ready.0)),
                format!("{:.1}", mib(after_ready.1)),
            ],
            vec![
                format!("after {calls} calls"),
                format!("{:.1}", mib(after_calls.0)),
                format!("{:.1}", mib(after_calls.1)),
            ],
        ],
    );
    println!(
        "\n  RSS per supervised server (after ready - before) / {servers}: {:.0} KiB\n  time until all ready: {:.0} ms\n  failed calls: {failures} of {calls}",
        per_server_kib,
        ready_in.as_secs_f64() * 1000.0
    );
    let rss_target = per_server_kib <= RSS_TARGET_KIB;
    println!(
        "\ntargets\n  hub RSS per supervised server <= {RSS_TARGET_KIB} KiB: {} ({per_server_kib:.0} KiB)",
        if rss_target { "met" } else { "missed" }
    );
    if failures > 0 {
        bail!("{failures} of {calls} calls failed");
    }
    let point = |(rss, hwm): (u64, u64)| json!({ "vm_rss_kib": rss, "vm_hwm_kib": hwm });
    Ok(json!({
        "bench": "memory",
        "servers": servers,
        "calls": calls,
        "before": point(before),
        "after_ready": point(after_ready),
        "after_calls": point(after_calls),
        "rss_per_server_kib": util::round3(per_server_kib),
        "all_ready_ms": util::round3(ready_in.as_secs_f64() * 1000.0),
        "failed_calls": failures,
        "targets": { "rss_per_server_le_96kib": rss_target },
    }))
}
