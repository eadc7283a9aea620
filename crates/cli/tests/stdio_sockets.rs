//! The stdio face when stdin and stdout are stream sockets, not pipes: Node's `child_process`
//! (so every Electron host, and the TypeScript SDK's stdio client) starts its children on socket
//! pairs. `wrap` must read and write them on its reactor, as it does pipes, and serve a client
//! there exactly as on pipes: the handshake, a burst of concurrent calls each answered once, and
//! its end when the client closes.
//!
//! Two layouts: a socket pair for each direction (what Node does), and one socket for both (what
//! a socket-activated or `inetd`-style launcher does). The debug log line that names the kind of
//! stdin and stdout is asserted, so the test fails if the face falls back to a blocking thread.

mod support;

use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream as StdStream;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use support::{fault_bin, gone_within, kill9, supervisor_bin, temp_dir};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::process::{Child, Command};

/// The bound of every wait in these tests.
const LIMIT: Duration = Duration::from_secs(20);
/// Calls sent at once, before any answer is read.
const BURST: u64 = 64;

/// `wrap` in front of the fault server with the given stdin and stdout, its log in `log`.
fn start_wrap(stdin: OwnedFd, stdout: OwnedFd, log: &Path) -> Child {
    let log = std::fs::File::create(log).expect("create the log file");
    Command::new(supervisor_bin())
        .args(support::WRAP_LOGGING_STDIO)
        .arg(fault_bin())
        .env_remove("RUST_LOG")
        .stdin(Stdio::from(stdin))
        .stdout(Stdio::from(stdout))
        .stderr(Stdio::from(log))
        .kill_on_drop(true)
        .spawn()
        .expect("spawn mcp-supervisor wrap")
}

/// Speak MCP to `wrap` through `writer` and `reader`, then close both and check it ends.
async fn serve_one_client(mut child: Child, writer: StdStream, reader: StdStream, log: &Path) {
    writer.set_nonblocking(true).expect("non-blocking");
    reader.set_nonblocking(true).expect("non-blocking");
    let mut writer = UnixStream::from_std(writer).expect("writer on the runtime");
    let mut lines =
        BufReader::new(UnixStream::from_std(reader).expect("reader on the runtime")).lines();
    let pid = child.id().expect("wrap's pid");

    let mut send = async |message: Value| {
        writer
            .write_all(format!("{message}\n").as_bytes())
            .await
            .expect("write to wrap");
    };
    send(
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "stdio-sockets-test", "version": "0"}
        }}),
    )
    .await;
    let mut read = async || -> Value {
        let line = tokio::time::timeout(LIMIT, lines.next_line())
            .await
            .expect("wrap answered in time")
            .expect("read from wrap")
            .expect("wrap's stdout is open");
        serde_json::from_str(&line).expect("a JSON-RPC line")
    };
    let init = read().await;
    assert_eq!(
        init["result"]["serverInfo"]["name"], "mcp-fault-server",
        "initialize: {init}"
    );
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;

    // A burst of calls in one go: each is answered once, with its own text.
    for id in 1..=BURST {
        send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "echo", "arguments": {"message": format!("call {id}")}}}))
        .await;
    }
    let mut answered = std::collections::BTreeMap::new();
    while answered.len() < BURST as usize {
        let message = read().await;
        let Some(id) = message["id"].as_u64() else {
            continue; // a notification
        };
        let text = message["result"]["content"][0]["text"].clone();
        assert_eq!(text, json!(format!("call {id}")), "answer {id}: {message}");
        assert!(
            answered.insert(id, ()).is_none(),
            "call {id} answered twice"
        );
    }

    // The face said it put both ends on the reactor.
    support::assert_stdio_sockets_on_reactor(&std::fs::read_to_string(log).unwrap_or_default());

    // The client goes away: wrap ends, and its server with it.
    drop(writer);
    drop(lines);
    let status = tokio::time::timeout(LIMIT, child.wait())
        .await
        .unwrap_or_else(|_| {
            kill9(pid);
            panic!("wrap did not end when its client closed the socket")
        })
        .expect("wait for wrap");
    assert!(status.success(), "wrap's exit: {status}");
    assert!(gone_within(pid, LIMIT).await, "wrap {pid} still alive");
}

#[tokio::test]
async fn wrap_serves_a_client_on_a_socket_pair_for_each_direction() {
    let dir = temp_dir("stdio-sockets-two");
    let log = dir.join("wrap.log");
    let (ours_in, theirs_in) = StdStream::pair().expect("socket pair for stdin");
    let (ours_out, theirs_out) = StdStream::pair().expect("socket pair for stdout");
    let child = start_wrap(theirs_in.into(), theirs_out.into(), &log);
    serve_one_client(child, ours_in, ours_out, &log).await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn wrap_serves_a_client_on_one_socket_for_both_directions() {
    let dir = temp_dir("stdio-sockets-one");
    let log = dir.join("wrap.log");
    let (ours, theirs) = StdStream::pair().expect("socket pair");
    let theirs_too = theirs
        .try_clone()
        .expect("a second descriptor of the socket");
    let child = start_wrap(theirs.into(), theirs_too.into(), &log);
    let ours_too = ours.try_clone().expect("a second descriptor of our end");
    serve_one_client(child, ours, ours_too, &log).await;
    let _ = std::fs::remove_dir_all(dir);
}
