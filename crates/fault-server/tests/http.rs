//! The fault server over streamable HTTP, driven with plain HTTP requests.

mod common;

use std::{process::Stdio, time::Duration};

use common::{BIN, STEP};
use serde_json::{Value, json};
use tokio::process::{Child, Command};

const PROTOCOL: &str = "2025-06-18";

struct HttpServer {
    _child: Child,
    url: String,
    client: reqwest::Client,
}

struct Reply {
    status: u16,
    session: Option<String>,
    /// JSON-RPC messages of the body (plain JSON, or the `data:` lines of an SSE stream).
    messages: Vec<Value>,
}

impl HttpServer {
    async fn start(args: &[&str]) -> Self {
        let port = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("free port");
            listener.local_addr().expect("addr").port()
        };
        let addr = format!("127.0.0.1:{port}");
        let child = Command::new(BIN)
            .arg("--http")
            .arg(&addr)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn mcp-fault-server");
        let ready = async {
            while tokio::net::TcpStream::connect(&addr).await.is_err() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        tokio::time::timeout(STEP, ready)
            .await
            .expect("server did not listen");
        Self {
            _child: child,
            url: format!("http://{addr}/mcp"),
            client: reqwest::Client::builder()
                .timeout(STEP)
                .build()
                .expect("client"),
        }
    }

    async fn post(&self, session: Option<&str>, body: Value) -> Reply {
        let mut request = self
            .client
            .post(&self.url)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream")
            .body(body.to_string());
        if let Some(session) = session {
            request = request
                .header("Mcp-Session-Id", session)
                .header("MCP-Protocol-Version", PROTOCOL);
        }
        let response = request.send().await.expect("HTTP request");
        let status = response.status().as_u16();
        let session = response
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let text = response.text().await.expect("HTTP body");
        let messages = if let Ok(value) = serde_json::from_str::<Value>(&text) {
            vec![value]
        } else {
            text.lines()
                .filter_map(|line| line.strip_prefix("data:"))
                .filter_map(|data| serde_json::from_str(data.trim()).ok())
                .collect()
        };
        Reply {
            status,
            session,
            messages,
        }
    }

    async fn initialize(&self) -> String {
        let reply = self
            .post(
                None,
                json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                    "protocolVersion": PROTOCOL,
                    "capabilities": {},
                    "clientInfo": {"name": "fault-server-test", "version": "0"}
                }}),
            )
            .await;
        assert_eq!(reply.status, 200);
        let session = reply.session.expect("Mcp-Session-Id");
        let reply = self
            .post(
                Some(&session),
                json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            )
            .await;
        assert_eq!(reply.status, 202);
        session
    }

    async fn call(&self, session: &str, id: u64, tool: &str, arguments: Value) -> Reply {
        self.post(
            Some(session),
            json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                "params": {"name": tool, "arguments": arguments}}),
        )
        .await
    }
}

fn response(reply: &Reply, id: u64) -> &Value {
    reply
        .messages
        .iter()
        .find(|m| m["id"] == json!(id))
        .unwrap_or_else(|| panic!("no response {id} in {:?}", reply.messages))
}

#[tokio::test]
async fn echo_then_drop_sessions_gives_404() {
    let server = HttpServer::start(&[]).await;
    let session = server.initialize().await;

    let reply = server
        .call(&session, 1, "echo", json!({"message": "over http"}))
        .await;
    assert_eq!(reply.status, 200);
    assert_eq!(
        response(&reply, 1)["result"]["content"][0]["text"],
        "over http"
    );

    let reply = server.call(&session, 2, "garbage", json!({})).await;
    assert_eq!(response(&reply, 2)["result"]["isError"], json!(true));

    let other = server.initialize().await;
    let reply = server.call(&session, 3, "drop_sessions", json!({})).await;
    assert_eq!(reply.status, 200);
    assert_eq!(
        response(&reply, 3)["result"]["content"][0]["text"],
        "dropped 2 sessions"
    );

    // Both old sessions are gone at once, and stay gone.
    for old in [&session, &other] {
        let reply = server
            .call(old, 4, "echo", json!({"message": "stale"}))
            .await;
        assert_eq!(reply.status, 404);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let reply = server
        .post(
            Some(&session),
            json!({"jsonrpc": "2.0", "id": 5, "method": "ping"}),
        )
        .await;
    assert_eq!(reply.status, 404);

    // A new session works.
    let fresh = server.initialize().await;
    let reply = server
        .call(&fresh, 6, "echo", json!({"message": "fresh"}))
        .await;
    assert_eq!(response(&reply, 6)["result"]["content"][0]["text"], "fresh");
}
