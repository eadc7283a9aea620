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

use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use mcp_supervisor_front::stdio::{Input, Output};
use tokio::process::Command;

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
    // Die with the bench that started us.
    let _ = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL);
    let (program, args) = command.split_first().context("no command after --")?;
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("cannot start {program}"))?;
    let mut child_stdin = child.stdin.take().context("stdin not piped")?;
    let mut child_stdout = child.stdout.take().context("stdout not piped")?;
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
