//! The control commands: ask a running proxy over HTTP for its status, or to reconnect a
//! server. They only read what the proxy says and print it.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::Value;

fn client() -> anyhow::Result<reqwest::Client> {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .context("cannot build an HTTP client")
}

fn with_token(
    request: reqwest::RequestBuilder,
    token_env: Option<&str>,
) -> anyhow::Result<reqwest::RequestBuilder> {
    Ok(match token_env {
        Some(var) => {
            let token = std::env::var(var)
                .with_context(|| format!("the environment variable {var} is not set"))?;
            request.bearer_auth(token)
        }
        None => request,
    })
}

fn base(url: &str) -> String {
    url.trim_end_matches('/')
        .trim_end_matches("/mcp")
        .to_string()
}

/// Send one request to the proxy: its status code and body text.
async fn ask(
    request: reqwest::RequestBuilder,
    endpoint: &str,
    token_env: Option<&str>,
) -> anyhow::Result<(reqwest::StatusCode, String)> {
    let response = with_token(request, token_env)?
        .send()
        .await
        .with_context(|| {
            format!("cannot reach {endpoint}; is the proxy running with --http or --admin there?")
        })?;
    let code = response.status();
    Ok((code, response.text().await.unwrap_or_default()))
}

pub async fn status(url: &str, json: bool, token_env: Option<&str>) -> anyhow::Result<ExitCode> {
    let endpoint = format!("{}/status", base(url));
    let (code, text) = ask(client()?.get(&endpoint), &endpoint, token_env).await?;
    if !code.is_success() {
        bail!("{endpoint} answered {code}: {}", text.trim());
    }
    if json {
        println!("{text}");
        return Ok(ExitCode::SUCCESS);
    }
    let value: Value =
        serde_json::from_str(&text).with_context(|| format!("{endpoint} did not answer JSON"))?;
    print!("{}", table(&value));
    Ok(ExitCode::SUCCESS)
}

/// The readable status table.
pub fn table(value: &Value) -> String {
    let empty = Vec::new();
    let servers = value
        .get("servers")
        .and_then(Value::as_array)
        .unwrap_or(&empty);
    let mut rows = vec![[
        "SERVER".to_string(),
        "STATE".into(),
        "GEN".into(),
        "ATTEMPTS".into(),
        "RESTARTS".into(),
        "TOOLS".into(),
        "UPTIME".into(),
        "LAST ERROR".into(),
    ]];
    for s in servers {
        let field = |k: &str| {
            s.get(k)
                .map(|v| match v {
                    Value::String(t) => t.clone(),
                    Value::Null => "-".into(),
                    other => other.to_string(),
                })
                .unwrap_or_else(|| "-".into())
        };
        let uptime = s
            .get("uptimeMs")
            .and_then(Value::as_u64)
            .map(human)
            .unwrap_or_else(|| "-".into());
        let mut error = field("lastError");
        if error.chars().count() > 80 {
            error = error.chars().take(77).collect::<String>() + "...";
        }
        rows.push([
            field("name"),
            field("state"),
            field("generation"),
            format!("{}/{}", field("attempts"), field("maxAttempts")),
            field("restarts"),
            {
                let mut tools = field("tools");
                if field("toolList") == "cache" {
                    tools.push_str(" (saved)");
                }
                match s.get("withheldTools").and_then(Value::as_u64) {
                    Some(n) if n > 0 => format!("{tools} ({n} withheld)"),
                    _ => tools,
                }
            },
            uptime,
            error,
        ]);
    }
    let mut widths = [0usize; 8];
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (i, (cell, w)) in row.iter().zip(widths).enumerate() {
            if i == 7 {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<w$}  "));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn human(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{}s", s / 60, s % 60),
        _ => format!("{}h{}m", s / 3600, (s % 3600) / 60),
    }
}

pub async fn reconnect(
    url: &str,
    server: &str,
    token_env: Option<&str>,
) -> anyhow::Result<ExitCode> {
    let endpoint = format!("{}/servers/{server}/reconnect", base(url));
    let (code, text) = ask(client()?.post(&endpoint), &endpoint, token_env).await?;
    if code.is_success() {
        println!("reconnecting \"{server}\" with a fresh budget");
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!(
            "mcp-supervisor: {endpoint} answered {code}: {}",
            text.trim()
        );
        Ok(ExitCode::from(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_table_shows_every_state_with_attempts_and_the_last_error() {
        let states = [
            "connecting",
            "ready",
            "retrying",
            "reconnecting",
            "gave_up",
            "down",
            "stopped",
            "idle",
        ];
        let servers: Vec<Value> = states
            .iter()
            .enumerate()
            .map(|(i, state)| {
                serde_json::json!({
                    "name": format!("s{i}"), "state": state, "generation": i, "attempts": i,
                    "maxAttempts": 10, "restarts": 1, "tools": 3,
                    "uptimeMs": if *state == "ready" { serde_json::json!(61_000) } else { Value::Null },
                    "lastError": if *state == "gave_up" { serde_json::json!("the connection was refused") } else { Value::Null },
                })
            })
            .collect();
        let table = table(&serde_json::json!({ "servers": servers }));
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 1 + states.len());
        assert!(lines[0].starts_with("SERVER") && lines[0].contains("LAST ERROR"));
        for (line, state) in lines[1..].iter().zip(states) {
            assert!(line.split_whitespace().nth(1) == Some(state), "{line}");
        }
        assert!(
            lines[2].contains("1m1s"),
            "uptime of the ready server: {}",
            lines[2]
        );
        assert!(
            lines[5].contains("4/10") && lines[5].ends_with("the connection was refused"),
            "{}",
            lines[5]
        );
    }
}
