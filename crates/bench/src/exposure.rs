//! `exposure`: what `toolExposure: "search"` saves and costs (SPEC §13). The `tools/list` answer
//! a client gets from `mcp-supervisor serve` over stdio with server-everything and the fault
//! server, every tool against search mode, in bytes and in tokens at 4 bytes a token; and the
//! latency of a search over a synthetic catalog of N tools (the core's ranking, on this thread).

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use mcp_supervisor::core::tool_search::Index;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::util::{Stats, print_table, stats_row, supervisor_beside};

/// The bound of each proxy's start and list.
const LIMIT: Duration = Duration::from_secs(60);

/// The bytes of the `tools/list` result from `serve` with `servers` and `exposure`.
async fn list_bytes(
    supervisor: &Path,
    dir: &Path,
    servers: &Value,
    exposure: &str,
) -> Result<(usize, usize)> {
    let config = dir.join(format!("exposure-{exposure}.json"));
    std::fs::write(
        &config,
        json!({ "toolExposure": exposure, "mcpServers": servers }).to_string(),
    )?;
    let mut child = tokio::process::Command::new(supervisor)
        .args(["serve", "--no-catalog", "--config"])
        .arg(&config)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .context("spawn mcp-supervisor")?;
    let mut stdin = child.stdin.take().ok_or_else(|| anyhow!("no stdin"))?;
    let mut lines =
        BufReader::new(child.stdout.take().ok_or_else(|| anyhow!("no stdout"))?).lines();
    let init = json!({ "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": { "name": "bench", "version": "1" } } });
    let list = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/list" });
    let inited = json!({ "jsonrpc": "2.0", "method": "notifications/initialized" });
    let answer = tokio::time::timeout(LIMIT, async {
        for message in [&init, &inited, &list] {
            stdin.write_all(format!("{message}\n").as_bytes()).await?;
        }
        stdin.flush().await?;
        while let Some(line) = lines.next_line().await? {
            let message: Value = serde_json::from_str(&line)?;
            if message["id"] == 1 {
                return Ok::<_, anyhow::Error>(message);
            }
        }
        bail!("the proxy closed its stdout")
    })
    .await
    .map_err(|_| anyhow!("no tools/list answer within {LIMIT:?}"))??;
    drop(stdin);
    let _ = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
    let result = &answer["result"];
    let tools = result["tools"].as_array().map_or(0, Vec::len);
    Ok((serde_json::to_string(result)?.len(), tools))
}

/// A synthetic tool, its words drawn from a fixed vocabulary by `i`.
fn synthetic(i: usize) -> String {
    const VERBS: [&str; 12] = [
        "get", "list", "create", "delete", "update", "search", "read", "write", "send", "sync",
        "export", "import",
    ];
    const NOUNS: [&str; 16] = [
        "file", "issue", "user", "repo", "message", "invoice", "ticket", "page", "event", "table",
        "row", "image", "report", "order", "channel", "branch",
    ];
    const ARGS: [&str; 8] = [
        "id", "path", "query", "limit", "owner", "title", "body", "cursor",
    ];
    let verb = VERBS[i % VERBS.len()];
    let noun = NOUNS[(i / VERBS.len()) % NOUNS.len()];
    let server = i % 50;
    json!({
        "name": format!("server{server}__{verb}_{noun}_{i}"),
        "description": format!("{} the {noun} {i} of service {server}: a tool that can {verb} a {noun} and reports what it did.", verb[..1].to_uppercase() + &verb[1..]),
        "inputSchema": { "type": "object", "properties": {
            ARGS[i % ARGS.len()]: { "type": "string" }, ARGS[(i / 3) % ARGS.len()]: { "type": "integer" } } },
    })
    .to_string()
}

pub async fn run(fault: &Path, everything: &Path, catalog: usize, queries: usize) -> Result<Value> {
    let supervisor = supervisor_beside()?;
    let dir = std::env::temp_dir().join(format!(
        "mcp-supervisor-bench-exposure-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir)?;
    let servers = json!({
        "everything": { "command": everything, "args": ["stdio"] },
        "fault": { "command": fault },
    });
    let (all_bytes, all_tools) = list_bytes(&supervisor, &dir, &servers, "all").await?;
    let (search_bytes, search_tools) = list_bytes(&supervisor, &dir, &servers, "search").await?;
    let _ = std::fs::remove_dir_all(&dir);
    let tokens = |bytes: usize| bytes.div_ceil(4);
    print_table(
        "tools/list through serve (server-everything + fault server)",
        &["exposure", "tools", "bytes", "tokens (4 B each)"],
        &[
            vec![
                "all".into(),
                all_tools.to_string(),
                all_bytes.to_string(),
                tokens(all_bytes).to_string(),
            ],
            vec![
                "search".into(),
                search_tools.to_string(),
                search_bytes.to_string(),
                tokens(search_bytes).to_string(),
            ],
        ],
    );

    let definitions: Vec<String> = (0..catalog).map(synthetic).collect();
    let started = Instant::now();
    let index = Index::build(definitions.iter().map(String::as_str));
    let build = started.elapsed();
    const QUERIES: [&str; 8] = [
        "delete an invoice",
        "search issues",
        "export report rows",
        "send message to channel",
        "read file path",
        "sync branch",
        "create ticket title",
        "import image",
    ];
    let mut times = Vec::with_capacity(queries);
    for i in 0..queries {
        let started = Instant::now();
        let hits = index.search(QUERIES[i % QUERIES.len()], 10);
        times.push(started.elapsed());
        if hits.is_empty() {
            bail!("a search over the synthetic catalog found nothing");
        }
    }
    let latency = Stats::of(&times)?;
    print_table(
        &format!(
            "search_tools ranking over {catalog} synthetic tools (index built in {:.1} ms)",
            build.as_secs_f64() * 1000.0
        ),
        &["", "n", "min", "median", "p90", "p99", "max", "mean"],
        &[stats_row("search, ms", &latency)],
    );
    Ok(json!({
        "bench": "exposure",
        "tools_list": {
            "all": { "tools": all_tools, "bytes": all_bytes, "tokens": tokens(all_bytes) },
            "search": { "tools": search_tools, "bytes": search_bytes, "tokens": tokens(search_bytes) },
        },
        "search": { "catalog": catalog, "index_build_ms": build.as_secs_f64() * 1000.0, "latency_ms": latency.json() },
    }))
}
