//! `pipe-relay`: the cost floor of an extra hop on the stdio face. It starts a stdio child and
//! copies bytes, our stdin → the child's stdin and the child's stdout → our stdout, with
//! `tokio::io::copy`: no framing, no parsing, no ids. When our stdin and stdout are pipes (as when
//! `peers` drives it) they are read and written as non-blocking pipes on the runtime's reactor,
//! as the child's pipes are; otherwise, or with `--tokio-stdio`, through `tokio::io::stdin` and
//! `stdout` (a blocking read or write on tokio's blocking threads for each chunk, as
//! `mcp-supervisor`'s stdio face reads and writes them).
//!
//! It runs until either direction ends (our stdin or the child's stdout at its end, or an error),
//! until the child exits, until SIGTERM/SIGINT, until `--max-secs`, or until its parent dies
//! (PR_SET_PDEATHSIG), and then kills its child.

use std::os::fd::AsFd;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::unix::pipe;
use tokio::process::Command;

type Reader = Box<dyn AsyncRead + Unpin + Send>;
type Writer = Box<dyn AsyncWrite + Unpin + Send>;

/// Our stdin as a non-blocking pipe when it is one (and not `tokio_stdio`), else tokio's
/// (blocking-thread) stdin.
fn our_stdin(tokio_stdio: bool) -> Reader {
    if tokio_stdio {
        return Box::new(tokio::io::stdin());
    }
    let pipe = std::io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .ok()
        .and_then(|fd| pipe::Receiver::from_owned_fd(fd).ok());
    match pipe {
        Some(pipe) => Box::new(pipe),
        None => Box::new(tokio::io::stdin()),
    }
}

/// Our stdout as a non-blocking pipe when it is one (and not `tokio_stdio`), else tokio's
/// (blocking-thread) stdout.
fn our_stdout(tokio_stdio: bool) -> Writer {
    if tokio_stdio {
        return Box::new(tokio::io::stdout());
    }
    let pipe = std::io::stdout()
        .as_fd()
        .try_clone_to_owned()
        .ok()
        .and_then(|fd| pipe::Sender::from_owned_fd(fd).ok());
    match pipe {
        Some(pipe) => Box::new(pipe),
        None => Box::new(tokio::io::stdout()),
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
