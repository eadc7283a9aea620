//! Helpers of the bad-input tests: a running `mcp-supervisor serve --http` in front of the fault
//! server, raw HTTP/1.1 over TCP (so nothing adds or fixes a header behind the test's back), and a
//! small seeded random generator.
#![allow(dead_code)] // each test binary uses a different part

#[allow(unused_imports)] // each test binary uses a different part
pub use mcp_supervisor_testkit::{fault_bin, free_port, temp_dir};

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub fn supervisor_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_mcp-supervisor"))
}

// === The proxy under test ===

/// `mcp-supervisor serve --config … --http 127.0.0.1:PORT` with one stdio fault server called
/// `fault`. Its stderr goes to a file, to look for panics afterwards. On drop: SIGTERM, then
/// SIGKILL.
pub struct Proxy {
    pub child: Child,
    pub port: u16,
    pub dir: PathBuf,
    pub stderr_path: PathBuf,
}

impl Proxy {
    /// Start it and wait (bounded) until `/healthz` says the fault server is ready.
    pub async fn start(tag: &str) -> Self {
        let dir = temp_dir(tag);
        let config = dir.join("servers.json");
        let text = serde_json::json!({
            "mcpServers": { "fault": { "command": fault_bin() } }
        })
        .to_string();
        std::fs::write(&config, text).expect("write config");
        let port = free_port();
        let stderr_path = dir.join("stderr.log");
        let stderr = std::fs::File::create(&stderr_path).expect("stderr file");
        let child = Command::new(supervisor_bin())
            .args([
                "serve",
                "--config",
                config.to_str().unwrap_or_default(),
                "--http",
                &format!("127.0.0.1:{port}"),
                // Stopped by SIGTERM on drop: no drain window to wait for.
                "--drain-ms",
                "0",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("spawn mcp-supervisor");
        let mut proxy = Self {
            child,
            port,
            dir,
            stderr_path,
        };
        let client = reqwest::Client::new();
        for _ in 0..1500 {
            assert!(proxy.alive(), "mcp-supervisor exited while starting");
            if let Ok(response) = client.get(proxy.url("/healthz")).send().await
                && response.status().as_u16() == 200
            {
                return proxy;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("the proxy on port {port} did not become healthy within 30 s");
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// Whether the process is still running.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = Command::new("kill")
                .args(["-TERM", &self.child.id().to_string()])
                .status();
            for _ in 0..400 {
                if let Ok(Some(_)) = self.child.try_wait() {
                    let _ = std::fs::remove_dir_all(&self.dir);
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

// === Raw HTTP/1.1 ===

/// One response, read to the end of the connection (every request says `Connection: close`).
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    /// Header names in lower case.
    pub headers: Vec<(String, String)>,
    /// The body, de-chunked when it was chunked.
    pub body: Vec<u8>,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The JSON-RPC messages of the body: one plain JSON value, or the `data:` lines of SSE.
    pub fn messages(&self) -> Vec<Value> {
        let text = self.text();
        if let Ok(value) = serde_json::from_str::<Value>(&text) {
            return vec![value];
        }
        text.lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .filter_map(|data| serde_json::from_str(data.trim()).ok())
            .collect()
    }
}

/// A request as bytes: the request line, the headers given (nothing else but `Host`,
/// `Content-Length` unless `raw_length`, and `Connection: close`), then the body.
pub fn request_bytes(
    method: &str,
    path: &str,
    port: u16,
    headers: &[(&str, &[u8])],
    body: &[u8],
    raw_length: bool,
) -> Vec<u8> {
    let mut out = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n").into_bytes();
    for (name, value) in headers {
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    if !raw_length {
        out.extend_from_slice(format!("Content-Length: {}\r\n", body.len()).as_bytes());
    }
    out.extend_from_slice(b"Connection: close\r\n\r\n");
    out.extend_from_slice(body);
    out
}

/// Send `bytes` on a fresh connection and read the response to EOF, all within `limit`. The
/// write runs beside the read, so a server that answers before reading a huge body (413) is
/// still heard. `Err` says what went wrong (no response, a hang, a malformed response).
pub async fn exchange(port: u16, bytes: Vec<u8>, limit: Duration) -> Result<Reply, String> {
    exchange_with(port, bytes, limit, false).await
}

/// As [`exchange`]; with `half_close`, the write side is shut down right after the bytes are
/// sent (a client that breaks off mid-body).
pub async fn exchange_with(
    port: u16,
    bytes: Vec<u8>,
    limit: Duration,
    half_close: bool,
) -> Result<Reply, String> {
    let work = async move {
        let stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .map_err(|e| format!("connect: {e}"))?;
        let (mut reader, mut writer) = stream.into_split();
        let write = tokio::spawn(async move {
            // The server may close early (e.g. after a 413): a failed write is fine.
            let _ = writer.write_all(&bytes).await;
            let _ = writer.flush().await;
            if half_close {
                let _ = writer.shutdown().await;
            }
            writer
        });
        let mut raw = Vec::new();
        let read = reader.read_to_end(&mut raw).await;
        drop(write.await);
        if raw.is_empty() {
            return Err(format!("no response at all (read: {read:?})"));
        }
        parse_response(&raw)
    };
    match tokio::time::timeout(limit, work).await {
        Ok(result) => result,
        Err(_) => Err(format!("no complete response within {limit:?} (a hang)")),
    }
}

fn parse_response(raw: &[u8]) -> Result<Reply, String> {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| format!("no end of headers in {:?}", String::from_utf8_lossy(raw)))?;
    let head = String::from_utf8_lossy(&raw[..end]);
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| format!("bad status line {status_line:?}"))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let rest = &raw[end + 4..];
    let chunked = headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"));
    let body = if chunked {
        dechunk(rest)?
    } else {
        rest.to_vec()
    };
    Ok(Reply {
        status,
        headers,
        body,
    })
}

fn dechunk(mut rest: &[u8]) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    loop {
        let line_end = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("a chunk without its size line (the response was cut)")?;
        let size_text = String::from_utf8_lossy(&rest[..line_end]);
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|_| format!("bad chunk size {size_text:?}"))?;
        rest = &rest[line_end + 2..];
        if size == 0 {
            return Ok(body);
        }
        if rest.len() < size + 2 {
            return Err("a chunk cut short (the response was cut)".to_owned());
        }
        body.extend_from_slice(&rest[..size]);
        rest = &rest[size + 2..];
    }
}

// === A seeded random generator (SplitMix64) ===

pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// True with probability `percent` / 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.next_u64() % 100 < percent
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    pub fn byte(&mut self) -> u8 {
        (self.next_u64() & 0xff) as u8
    }
}
