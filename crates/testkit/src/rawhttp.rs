//! A minimal JSON-RPC-over-HTTP client: plain POSTs with reqwest, no MCP library. It does
//! initialize + initialized, keeps the `Mcp-Session-Id` if the server sets one, and reads the
//! answer as `application/json` or as a `text/event-stream` carrying it. Used where the cost of a
//! full MCP client should not be in the figure (the bench's `-raw` targets), and where a load
//! should call tools the way the TypeScript and Python SDKs do, on a session without a progress
//! token (the soak's plain clients).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use serde_json::{Value, json};

const PROTOCOL: &str = "2025-06-18";

pub struct RawHttp {
    http: reqwest::Client,
    url: String,
    session: Option<String>,
    protocol: String,
    next_id: AtomicU64,
    /// Answers that came as one `application/json` body (the others were event streams).
    json_answers: AtomicU64,
}

impl RawHttp {
    /// initialize + notifications/initialized against `url`.
    pub async fn connect(url: &str, timeout: Duration) -> Result<Self> {
        let http = reqwest::Client::builder()
            .no_proxy()
            .pool_max_idle_per_host(512)
            .timeout(timeout)
            .build()
            .context("cannot build the HTTP client")?;
        let mut client = Self {
            http,
            url: url.to_string(),
            session: None,
            protocol: PROTOCOL.to_string(),
            next_id: AtomicU64::new(1),
            json_answers: AtomicU64::new(0),
        };
        let init = json!({
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": PROTOCOL,
                "capabilities": {},
                "clientInfo": { "name": "mcp-supervisor-rawhttp", "version": env!("CARGO_PKG_VERSION") }
            }
        });
        let (headers, body) = client.post(&init).await?;
        let answer = find_answer(&headers, &body, 0)?;
        let result = answer
            .get("result")
            .with_context(|| format!("initialize failed: {answer}"))?;
        if let Some(version) = result.get("protocolVersion").and_then(Value::as_str) {
            client.protocol = version.to_string();
        }
        client.session = headers
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let initialized = json!({ "jsonrpc": "2.0", "method": "notifications/initialized" });
        client.post(&initialized).await?;
        Ok(client)
    }

    async fn post(&self, message: &Value) -> Result<(reqwest::header::HeaderMap, Vec<u8>)> {
        let mut request = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", &self.protocol)
            .body(serde_json::to_vec(message)?);
        if let Some(session) = &self.session {
            request = request.header("mcp-session-id", session);
        }
        let response = request.send().await.map_err(|e| anyhow!("POST: {e}"))?;
        let status = response.status();
        let headers = response.headers().clone();
        let body = response
            .bytes()
            .await
            .map_err(|e| anyhow!("reading the answer: {e}"))?;
        if !status.is_success() {
            bail!(
                "HTTP {status}: {}",
                String::from_utf8_lossy(&body[..body.len().min(300)])
            );
        }
        Ok((headers, body.to_vec()))
    }

    /// One request; the raw HTTP body of the answer, unparsed (for timing the exchange alone).
    pub async fn request_body(&self, method: &str, params: Value) -> Result<Vec<u8>> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let message = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
        Ok(self.post(&message).await?.1)
    }

    /// One request; the whole JSON-RPC answer (`result` or `error`) and the size of the HTTP
    /// body. An error is the exchange's: HTTP, a body that carries no answer.
    pub async fn answer(&self, method: &str, params: Value) -> Result<(Value, usize)> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let message = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
        let (headers, body) = self.post(&message).await?;
        let answer = find_answer(&headers, &body, id)?;
        if !is_event_stream(&headers) {
            self.json_answers.fetch_add(1, Ordering::Relaxed);
        }
        Ok((answer, body.len()))
    }

    /// One request; the JSON-RPC `result` (an error answer is an error). Also returns the size of
    /// the HTTP body.
    pub async fn request(&self, method: &str, params: Value) -> Result<(Value, usize)> {
        let (mut answer, size) = self.answer(method, params).await?;
        match answer.get_mut("result") {
            Some(result) => Ok((result.take(), size)),
            None => bail!("{method} failed: {answer}"),
        }
    }
}

impl RawHttp {
    /// The session id the server gave, if any.
    pub fn session(&self) -> Option<&str> {
        self.session.as_deref()
    }

    /// The same session, its requests sent to `url` instead (another replica of the service).
    pub fn moved_to(&self, url: &str) -> Self {
        Self {
            http: self.http.clone(),
            url: url.to_string(),
            session: self.session.clone(),
            protocol: self.protocol.clone(),
            next_id: AtomicU64::new(self.next_id.load(Ordering::Relaxed)),
            json_answers: AtomicU64::new(0),
        }
    }

    /// How many answers to [`RawHttp::answer`] and [`RawHttp::request`] came as one
    /// `application/json` body rather than an event stream.
    pub fn json_answers(&self) -> u64 {
        self.json_answers.load(Ordering::Relaxed)
    }

    /// End the session with a DELETE, when the server gave one.
    pub async fn close(&self) -> Result<()> {
        let Some(session) = &self.session else {
            return Ok(());
        };
        let response = self
            .http
            .delete(&self.url)
            .header("mcp-session-id", session)
            .header("mcp-protocol-version", &self.protocol)
            .send()
            .await
            .map_err(|e| anyhow!("DELETE: {e}"))?;
        let status = response.status();
        // 405: the server does not let clients end sessions (allowed by the protocol).
        if status.is_success() || status.as_u16() == 405 {
            Ok(())
        } else {
            bail!("DELETE of the session: HTTP {status}")
        }
    }
}

fn is_event_stream(headers: &reqwest::header::HeaderMap) -> bool {
    headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("text/event-stream"))
}

/// The JSON-RPC answer with `id` in a JSON or SSE body.
fn find_answer(headers: &reqwest::header::HeaderMap, body: &[u8], id: u64) -> Result<Value> {
    if !is_event_stream(headers) {
        return serde_json::from_slice(body).context("the answer is not JSON");
    }
    let text = std::str::from_utf8(body).context("the event stream is not UTF-8")?;
    for event in text.split("\n\n") {
        let data: Vec<&str> = event
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(|d| d.strip_prefix(' ').unwrap_or(d))
            .collect();
        if data.is_empty() {
            continue;
        }
        let Ok(value) = serde_json::from_str::<Value>(&data.join("\n")) else {
            continue;
        };
        if value.get("id").and_then(Value::as_u64) == Some(id) && value.get("method").is_none() {
            return Ok(value);
        }
    }
    bail!("the event stream carried no answer to request {id}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(content_type: &str) -> reqwest::header::HeaderMap {
        let mut map = reqwest::header::HeaderMap::new();
        map.insert("content-type", content_type.parse().unwrap());
        map
    }

    #[test]
    fn finds_the_answer_in_json_and_in_an_event_stream() {
        let json = br#"{"jsonrpc":"2.0","id":3,"result":{}}"#;
        let found = find_answer(&headers("application/json"), json, 3).unwrap();
        assert_eq!(found["id"], 3);

        let sse = b"data: \nid: 0/0\nretry: 3000\n\n\
                    data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"id\":7}\n\n\
                    data: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"ok\":true}}\nid: 1/0\n\n";
        let found = find_answer(&headers("text/event-stream"), sse, 7).unwrap();
        assert_eq!(found["result"]["ok"], true);
        assert!(find_answer(&headers("text/event-stream"), sse, 8).is_err());
    }
}
