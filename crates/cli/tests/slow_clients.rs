//! End to end through the real binary: slow and idle clients cannot hold an HTTP listener
//! (SPEC §9, issue 30), on the MCP face (`--http`) and the admin listener (`--admin`) alike. A
//! connection whose request headers are not complete within the header timeout is closed (also
//! the next request's, on a kept-alive connection); a kept-alive connection idle past the idle
//! timeout is closed, and not at the header timeout; a slow call and an open event stream outlive
//! both; past the connection cap a new connection is closed at once, with one warning, and a
//! request succeeds again once a slot frees; the defaults are the documented ones; bad values
//! are refused; the open-files limit is raised and the cap fits under it.
//!
//! Clients here are raw TCP on loopback, so that what the server does to the connection shows.
//! Every wait is bounded; none sleeps to see whether something happens.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// The lowered header timeout of these tests.
const HEADER_MS: u64 = 300;
/// The lowered idle timeout: well apart from the header timeout, so that one is not the other.
const IDLE_MS: u64 = 1_500;
/// A call slower than both timeouts together.
const SLOW_MS: u64 = 3_000;
/// The lowered connection cap.
const CAP: usize = 8;
/// How long the server may take to do what is awaited of it, beyond the timeout at hand.
const LIMIT: Duration = Duration::from_secs(5);
const VERSION: &str = "2025-06-18";
const GET_LIVEZ: &str = "GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
const LIVEZ_ANSWER: &str = "\r\n\r\nok\n";

/// A proxy with an MCP HTTP face and an admin listener, its log in a file.
struct Proxy {
    running: Running,
    admin: u16,
    log: PathBuf,
    dir: PathBuf,
}

impl Proxy {
    /// `serve --config DIR/servers.json --http A --admin B FLAGS…` with one stdio fault server,
    /// once both listen and the server is ready.
    async fn start(tag: &str, flags: &[&str]) -> Self {
        Self::start_under(tag, flags, None).await
    }

    /// Like [`Proxy::start`], run by `sh -c 'ULIMIT; exec …'` when `ulimit` is given.
    async fn start_under(tag: &str, flags: &[&str], ulimit: Option<&str>) -> Self {
        let dir = temp_dir(tag);
        let config = dir.join("servers.json");
        write_config(&config, json!({ "fault": { "command": fault_bin() } }));
        let (port, admin) = (free_port(), free_port());
        let log = dir.join("stderr.log");
        let mut args: Vec<String> = [
            "serve",
            "--config",
            config.to_str().unwrap_or_default(),
            "--no-catalog",
            "--http",
            &format!("127.0.0.1:{port}"),
            "--admin",
            &format!("127.0.0.1:{admin}"),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend(flags.iter().map(|s| s.to_string()));
        let mut command = match ulimit {
            None => {
                let mut command = Command::new(supervisor_bin());
                command.args(&args);
                command
            }
            Some(ulimit) => {
                let mut command = Command::new("sh");
                command
                    .arg("-c")
                    .arg(format!("{ulimit} && exec \"$0\" \"$@\""))
                    .arg(supervisor_bin())
                    .args(&args);
                command
            }
        };
        let child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("create the log file"))
            .spawn()
            .expect("spawn mcp-supervisor");
        let running = Running { child, port };
        for listening in [port, admin] {
            let deadline = Instant::now() + LIMIT;
            while TcpStream::connect(("127.0.0.1", listening)).await.is_err() {
                assert!(
                    Instant::now() < deadline,
                    "mcp-supervisor did not listen on {listening}; its log:\n{}",
                    read(&log)
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        status_until(&running, LIMIT * 4, |s| state_is(s, "fault", "ready")).await;
        Self {
            running,
            admin,
            log,
            dir,
        }
    }

    fn port(&self) -> u16 {
        self.running.port
    }

    fn log(&self) -> String {
        read(&self.log)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// How a read ended.
#[derive(Debug, PartialEq, Eq)]
enum End {
    /// What was awaited came.
    Came,
    /// The server closed the connection (end of stream, or reset).
    Closed,
    /// Neither, within the limit.
    TimedOut,
}

/// Read from `stream` until `came` holds on all received so far, the connection ends, or
/// `limit` passes: how it ended, and what was received.
async fn read_until(
    stream: &mut TcpStream,
    received: &mut Vec<u8>,
    limit: Duration,
    came: impl Fn(&str) -> bool,
) -> End {
    let deadline = Instant::now() + limit;
    let mut buf = [0u8; 8192];
    loop {
        if came(&String::from_utf8_lossy(received)) {
            return End::Came;
        }
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => return End::TimedOut,
            Ok(Ok(0)) | Ok(Err(_)) => return End::Closed,
            Ok(Ok(n)) => received.extend_from_slice(&buf[..n]),
        }
    }
}

/// Read until the server closes the connection (bounded by `limit`): how it ended, how long it
/// took, and what came meanwhile.
async fn until_closed(stream: &mut TcpStream, limit: Duration) -> (End, Duration, String) {
    let start = Instant::now();
    let mut received = Vec::new();
    let end = read_until(stream, &mut received, limit, |_| false).await;
    (
        end,
        start.elapsed(),
        String::from_utf8_lossy(&received).into_owned(),
    )
}

async fn connect(port: u16) -> TcpStream {
    TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap_or_else(|e| panic!("connect to {port}: {e}"))
}

/// `GET /livez` on `stream`, its answer read whole; `false` when the connection was closed
/// before it came (refused past the cap).
async fn livez(stream: &mut TcpStream) -> bool {
    if stream.write_all(GET_LIVEZ.as_bytes()).await.is_err() {
        return false;
    }
    let mut received = Vec::new();
    match read_until(stream, &mut received, LIMIT, |text| {
        text.contains(LIVEZ_ANSWER)
    })
    .await
    {
        End::Came => true,
        End::Closed => false,
        End::TimedOut => panic!(
            "no answer to GET /livez: {}",
            String::from_utf8_lossy(&received)
        ),
    }
}

/// A raw HTTP/1.1 request on the MCP face's session `session`.
fn mcp_request(method: &str, session: &str, body: Option<&Value>) -> String {
    let body = body.map(Value::to_string).unwrap_or_default();
    let accept = if method == "GET" {
        "text/event-stream"
    } else {
        "application/json, text/event-stream"
    };
    let mut request = format!(
        "{method} /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: {accept}\r\nMcp-Session-Id: {session}\r\nMcp-Protocol-Version: {VERSION}\r\n"
    );
    if !body.is_empty() {
        request.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    request.push_str("\r\n");
    request.push_str(&body);
    request
}

/// An HTTP client that keeps no idle connection (each request on a new one).
fn fresh_client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .expect("an HTTP client")
}

/// Open a session on the proxy's `/mcp`: its id.
async fn open_session(proxy: &Proxy) -> String {
    let client = fresh_client();
    let url = proxy.running.url("/mcp");
    let (_, id) = post_initialize(&client, &url, None, json!({}), "slow-clients").await;
    let status = client
        .post(&url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", &id)
        .header("mcp-protocol-version", VERSION)
        .json(&json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }))
        .timeout(LIMIT)
        .send()
        .await
        .expect("POST notifications/initialized")
        .status();
    assert_eq!(status.as_u16(), 202);
    id
}

fn call(id: u64, tool: &str, arguments: Value) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": id,
        "method": "tools/call",
        "params": { "name": tool, "arguments": arguments }
    })
}

#[tokio::test]
async fn headers_not_complete_within_the_header_timeout_are_closed_on_every_listener() {
    let header = HEADER_MS.to_string();
    let idle = IDLE_MS.to_string();
    let proxy = Proxy::start(
        "slow-headers",
        &[
            "--http-header-timeout-ms",
            &header,
            "--http-idle-timeout-ms",
            &idle,
        ],
    )
    .await;
    for port in [proxy.port(), proxy.admin] {
        // Half a request line, and nothing more.
        let mut half = connect(port).await;
        half.write_all(b"GET /livez HT").await.expect("write");
        let (end, took, came) = until_closed(&mut half, LIMIT).await;
        assert_eq!(
            end,
            End::Closed,
            "port {port}: half a request line held the connection"
        );
        assert!(came.is_empty(), "nothing is answered: {came:?}");
        assert!(
            took >= Duration::from_millis(HEADER_MS / 2),
            "closed by the header timer, not at once: {took:?}"
        );

        // A connection that sends nothing at all.
        let mut silent = connect(port).await;
        let (end, _, came) = until_closed(&mut silent, LIMIT).await;
        assert_eq!(end, End::Closed, "port {port}: a silent connection held it");
        assert!(came.is_empty(), "{came:?}");

        // On a kept-alive connection, the next request's first byte starts the header timer:
        // half a head is closed at the header timeout, well before the idle timeout.
        let mut kept = connect(port).await;
        assert!(livez(&mut kept).await, "the first request is served");
        kept.write_all(b"GET /li").await.expect("write");
        let (end, took, came) = until_closed(&mut kept, LIMIT).await;
        assert_eq!(end, End::Closed, "port {port}: half a second head held it");
        assert!(came.is_empty(), "{came:?}");
        assert!(
            took < Duration::from_millis(IDLE_MS),
            "the header timeout applies, not the idle one: {took:?}"
        );
    }
}

#[tokio::test]
async fn an_idle_kept_alive_connection_is_closed_after_the_idle_timeout_not_the_header_one() {
    let header = HEADER_MS.to_string();
    let idle = IDLE_MS.to_string();
    let proxy = Proxy::start(
        "slow-idle",
        &[
            "--http-header-timeout-ms",
            &header,
            "--http-idle-timeout-ms",
            &idle,
        ],
    )
    .await;
    for port in [proxy.port(), proxy.admin] {
        let mut kept = connect(port).await;
        assert!(livez(&mut kept).await, "served");
        // Kept alive: a second request on it is served too.
        assert!(
            livez(&mut kept).await,
            "a second request on the same connection"
        );
        let (end, took, came) =
            until_closed(&mut kept, Duration::from_millis(IDLE_MS) + LIMIT).await;
        assert_eq!(
            end,
            End::Closed,
            "port {port}: an idle connection stayed open"
        );
        assert!(came.is_empty(), "{came:?}");
        assert!(
            took >= Duration::from_millis(IDLE_MS - 250),
            "port {port}: closed after {took:?}, before the idle timeout of {IDLE_MS} ms"
        );
    }
}

#[tokio::test]
async fn a_slow_call_and_an_open_event_stream_outlive_both_timeouts() {
    let header = HEADER_MS.to_string();
    let idle = IDLE_MS.to_string();
    let proxy = Proxy::start(
        "slow-busy",
        &[
            "--http-header-timeout-ms",
            &header,
            "--http-idle-timeout-ms",
            &idle,
        ],
    )
    .await;
    let session = open_session(&proxy).await;

    // The session's standalone event stream, open from before the call to after it.
    let mut stream = connect(proxy.port()).await;
    stream
        .write_all(mcp_request("GET", &session, None).as_bytes())
        .await
        .expect("write GET");
    let mut events = Vec::new();
    let opened = read_until(&mut stream, &mut events, LIMIT, |text| {
        text.contains("\r\n\r\n")
    })
    .await;
    assert_eq!(opened, End::Came);
    let head = String::from_utf8_lossy(&events).into_owned();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");

    // A call slower than both timeouts together, on a connection of its own.
    let mut slow = connect(proxy.port()).await;
    let body = call(7, "fault__sleep", json!({ "ms": SLOW_MS }));
    let start = Instant::now();
    slow.write_all(mcp_request("POST", &session, Some(&body)).as_bytes())
        .await
        .expect("write POST");
    let mut answer = Vec::new();
    let answered = read_until(
        &mut slow,
        &mut answer,
        Duration::from_millis(SLOW_MS) + LIMIT,
        |text| text.contains(&format!("slept {SLOW_MS} ms")),
    )
    .await;
    assert_eq!(
        answered,
        End::Came,
        "the slow call's connection: {}",
        String::from_utf8_lossy(&answer)
    );
    assert!(start.elapsed() >= Duration::from_millis(SLOW_MS));

    // The event stream is still open and delivers: a change of the server's tools now comes
    // on it as tools/list_changed.
    let changed = fresh_client()
        .post(proxy.running.url("/mcp"))
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", VERSION)
        .json(&call(8, "fault__set_tools", json!({ "tools": ["after"] })))
        .timeout(LIMIT)
        .send()
        .await
        .expect("POST set_tools");
    assert_eq!(changed.status().as_u16(), 200);
    let delivered = read_until(&mut stream, &mut events, LIMIT, |text| {
        text.contains("notifications/tools/list_changed")
    })
    .await;
    assert_eq!(
        delivered,
        End::Came,
        "the event stream, open past both timeouts: {}",
        String::from_utf8_lossy(&events)
    );

    // Its answer written, the slow call's connection is idle and goes after the idle timeout.
    let (end, took, _) = until_closed(&mut slow, Duration::from_millis(IDLE_MS) + LIMIT).await;
    assert_eq!(end, End::Closed, "idle after the slow answer");
    assert!(took >= Duration::from_millis(IDLE_MS - 250), "{took:?}");
}

#[tokio::test]
async fn past_the_cap_a_new_connection_is_closed_at_once_on_every_listener() {
    let cap = CAP.to_string();
    let proxy = Proxy::start(
        "slow-cap",
        &[
            "--http-max-connections",
            &cap,
            "--http-idle-timeout-ms",
            "60000",
        ],
    )
    .await;
    for port in [proxy.port(), proxy.admin] {
        // Fill the cap with kept-alive connections, each one served (a connection the proxy
        // has not seen close yet, such as the start's own probes, may hold a slot a moment).
        let mut held = Vec::new();
        let deadline = Instant::now() + LIMIT;
        while held.len() < CAP {
            assert!(
                Instant::now() < deadline,
                "port {port}: {} of {CAP} connections served",
                held.len()
            );
            let mut stream = connect(port).await;
            if livez(&mut stream).await {
                held.push(stream);
            }
        }

        // Past the cap: closed at once, nothing read, nothing answered (several times).
        for _ in 0..5 {
            let mut over = connect(port).await;
            let (end, took, came) = until_closed(&mut over, LIMIT).await;
            assert_eq!(
                end,
                End::Closed,
                "port {port}: a connection past the cap was kept"
            );
            assert!(came.is_empty(), "{came:?}");
            assert!(
                took < Duration::from_secs(2),
                "at once, not at a timeout: {took:?}"
            );
        }
        // Those already open are still served.
        assert!(
            livez(&mut held[0]).await,
            "a held connection is still served"
        );

        // One warning for them all.
        let warning = format!("HTTP listener 127.0.0.1:{port}:");
        let deadline = Instant::now() + LIMIT;
        let log = loop {
            let log = proxy.log();
            if log.contains(&warning) {
                break log;
            }
            assert!(
                Instant::now() < deadline,
                "no warning about the cap:\n{log}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let warnings = log.lines().filter(|l| l.contains(&warning)).count();
        assert_eq!(
            warnings, 1,
            "one warning per interval, not one per connection:\n{log}"
        );
        assert!(log.contains("--http-max-connections"), "{log}");

        // A slot frees: a new request is served again.
        drop(held.pop());
        let deadline = Instant::now() + LIMIT;
        loop {
            let mut stream = connect(port).await;
            if livez(&mut stream).await {
                break;
            }
            assert!(Instant::now() < deadline, "port {port}: no slot freed");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// The `[default: N]` clap shows for `flag` in `help`.
fn default_in_help(help: &str, flag: &str) -> String {
    let at = help
        .find(&format!("{flag} <"))
        .unwrap_or_else(|| panic!("{flag} in:\n{help}"));
    let rest = &help[at..];
    let start = rest
        .find("[default: ")
        .unwrap_or_else(|| panic!("a default for {flag}"))
        + "[default: ".len();
    let end = rest[start..].find(']').expect("]") + start;
    rest[start..end].to_string()
}

#[test]
fn the_defaults_are_the_documented_ones() {
    let docs = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/operations.md"),
    )
    .expect("docs/operations.md");
    for command in ["serve", "wrap"] {
        let help = Command::new(supervisor_bin())
            .args([command, "--help"])
            .output()
            .expect("--help");
        let help = String::from_utf8_lossy(&help.stdout).into_owned();
        for (flag, default) in [
            ("--http-header-timeout-ms", "10000"),
            ("--http-idle-timeout-ms", "75000"),
            ("--http-max-connections", "1024"),
        ] {
            assert_eq!(default_in_help(&help, flag), default, "{command} {flag}");
            let row = docs
                .lines()
                .find(|l| l.starts_with('|') && l.contains(&format!("`{flag}`")))
                .unwrap_or_else(|| panic!("a row for {flag} in docs/operations.md"));
            assert!(row.contains(&format!("`{default}`")), "{flag}: {row}");
        }
    }
}

#[test]
fn bad_values_are_refused_with_a_clear_error() {
    for (flag, value, says) in [
        ("--http-max-connections", "0", "at least 1"),
        ("--http-header-timeout-ms", "0", "at least 1 ms"),
        ("--http-idle-timeout-ms", "0", "at least 1 ms"),
        ("--http-idle-timeout-ms", "soon", "not a whole number"),
        ("--http-header-timeout-ms", "99999999999", "at most"),
    ] {
        let out = Command::new(supervisor_bin())
            .args(["serve", "--config", "unused.json", flag, value])
            .output()
            .expect("run");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag} {value}: {stderr}");
        assert!(
            stderr.contains(flag) && stderr.contains(says),
            "{flag} {value}: {stderr}"
        );
    }
}

#[tokio::test]
async fn the_open_files_limit_is_raised_and_the_cap_fits_under_it() {
    // A low soft limit is raised (to the hard one here, or 65,536 when that is lower).
    let raised = Proxy::start_under("slow-nofile", &[], Some("ulimit -Sn 512")).await;
    let limits = read(Path::new(&format!(
        "/proc/{}/limits",
        raised.running.child.id()
    )));
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("Max open files");
    let numbers: Vec<u64> = line
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    let (soft, hard) = (numbers[0], numbers[1]);
    assert_eq!(soft, hard.min(65_536), "{line}");
    drop(raised);

    // A hard limit of 1,024 (both listeners share it): the cap is lowered to fit, and it says so.
    let low = Proxy::start_under("slow-nofile-low", &[], Some("ulimit -n 1024")).await;
    let log = low.log();
    assert!(
        log.contains("keeps at most 256 connections open, not 1024"),
        "{log}"
    );
}
