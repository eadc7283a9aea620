//! `pipe-relay`: the cost floor of an extra hop on the stdio face. It starts a stdio child and
//! copies bytes, our stdin → the child's stdin and the child's stdout → our stdout, with
//! `tokio::io::copy`: no framing, no parsing, no ids. When our stdin and stdout are pipes or
//! stream sockets (as when `peers` or the node client drives it: node gives its children socket
//! pairs) they are read and written non-blocking on the runtime's reactor, as the child's pipes
//! are; otherwise, or with `--tokio-stdio`, through `tokio::io::stdin` and
//! `stdout` (a blocking read or write on tokio's blocking threads for each chunk, as
//! `mcp-supervisor`'s stdio face reads and writes them).
//!
//! It runs until either direction ends (our stdin or the child's stdout at its end, or an error),
//! until the child exits, until SIGTERM/SIGINT, until `--max-secs`, or until its parent dies
//! (PR_SET_PDEATHSIG), and then kills its child.

use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use mcp_supervisor_front::stdio::{Input, Output};

use crate::procs::relayed_child;

/// Our stdin on the reactor as `mcp-supervisor`'s stdio face opens it (a pipe or a stream
/// socket), unless `tokio_stdio`.
fn our_stdin(tokio_stdio: bool) -> Input {
    match tokio_stdio {
        true => Box::new(tokio::io::stdin()),
        false => mcp_supervisor_front::stdio::our_stdin(),
    }
}

/// Our stdout, the same way.
fn our_stdout(tokio_stdio: bool) -> Output {
    match tokio_stdio {
        true => Box::new(tokio::io::stdout()),
        false => mcp_supervisor_front::stdio::our_stdout(),
    }
}

pub async fn run(command: &[String], max_secs: u64, tokio_stdio: bool) -> Result<()> {
    let (mut child, mut child_stdin, mut child_stdout) = relayed_child(command)?;
    let mut stdin = our_stdin(tokio_stdio);
    let mut stdout = our_stdout(tokio_stdio);
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let outcome = tokio::select! {
        copied = tokio::io::copy(&mut stdin, &mut child_stdin) => {
            copied.map(drop).context("copying stdin to the child")
        }
        copied = tokio::io::copy(&mut child_stdout, &mut stdout) => {
            copied.map(drop).context("copying the child's stdout")
        }
        status = child.wait() => Err(anyhow!("the child exited: {status:?}")),
        _ = term.recv() => Ok(()),
        _ = tokio::signal::ctrl_c() => Ok(()),
        _ = tokio::time::sleep(Duration::from_secs(max_secs)) => Ok(()),
    };
    let _ = child.start_kill();
    let _ = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
    outcome
}

/// `pipe-relay --map-ids`: the floor of a hop that parses. Each line is framed as the stdio face
/// frames it, its envelope read as the library reads it ([`Envelope::read`]), and a request's id
/// swapped for one of ours both ways (the least a proxy that shares a server must do), on one
/// task of a current-thread runtime, as `wrap` runs. Nothing else: no routing, no supervision.
pub fn run_mapping_ids(command: &[String], max_secs: u64) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let (mut child, child_stdin, child_stdout) = relayed_child(command)?;
        let relayed = tokio::select! {
            relayed = relay_mapping_ids(our_stdin(false), our_stdout(false), child_stdin, child_stdout) => relayed,
            _ = tokio::time::sleep(Duration::from_secs(max_secs)) => Ok(()),
        };
        let _ = child.start_kill();
        let _ = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
        relayed
    })
}

/// `text` with the JSON value `old` (a slice of it) replaced by `new`, as one line.
fn swapped(text: &str, old: &serde_json::value::RawValue, new: &str) -> String {
    let start = old.get().as_ptr() as usize - text.as_ptr() as usize;
    let end = start + old.get().len();
    let mut line = String::with_capacity(text.len() + new.len() + 1);
    line.push_str(&text[..start]);
    line.push_str(new);
    line.push_str(&text[end..]);
    line.push('\n');
    line
}

async fn relay_mapping_ids(
    input: Input,
    mut output: Output,
    mut child_in: tokio::process::ChildStdin,
    child_out: tokio::process::ChildStdout,
) -> Result<()> {
    use futures::StreamExt;
    use mcp_supervisor::upstream::Envelope;
    use mcp_supervisor::upstream::lines::LineCodec;
    use tokio::io::AsyncWriteExt;
    use tokio_util::codec::FramedRead;
    const MAX: usize = 64 * 1024 * 1024;
    let mut from_client = FramedRead::with_capacity(input, LineCodec::new(MAX), 64 * 1024);
    let mut from_server = FramedRead::with_capacity(child_out, LineCodec::new(MAX), 64 * 1024);
    let mut pending: std::collections::HashMap<u64, Box<serde_json::value::RawValue>> =
        std::collections::HashMap::new();
    let mut next: u64 = 0;
    loop {
        tokio::select! {
            line = from_client.next() => {
                let Some(line) = line else { return Ok(()) };
                let line = line.map_err(|e| anyhow!("reading stdin: {e:?}"))?;
                let text = std::str::from_utf8(&line)?;
                let envelope = Envelope::read(text)?;
                let out = match (envelope.id, envelope.method) {
                    (Some(id), Some(_)) => {
                        next += 1;
                        pending.insert(next, id.to_owned());
                        swapped(text, id, &next.to_string())
                    }
                    _ => format!("{text}\n"),
                };
                child_in.write_all(out.as_bytes()).await?;
            }
            line = from_server.next() => {
                let Some(line) = line else { return Ok(()) };
                let line = line.map_err(|e| anyhow!("reading the child: {e:?}"))?;
                let text = std::str::from_utf8(&line)?;
                let envelope = Envelope::read(text)?;
                let ours = envelope.id.filter(|_| envelope.method.is_none());
                let out = match ours.and_then(|id| Some((id, pending.remove(&id.get().parse().ok()?)?))) {
                    Some((id, theirs)) => swapped(text, id, theirs.get()),
                    None => format!("{text}\n"),
                };
                output.write_all(out.as_bytes()).await?;
            }
        }
    }
}
