//! A stdio server's process group: spawn the child as a group leader, watch it exit, signal the
//! whole group, and tell when no live member is left.
//!
//! It tells the orphan guard (`crate::guard`) of each group it spawns and reaps, so that the
//! group is ended even if the proxy is killed at once. Only this code and the guard send
//! signals (through `crate::groups`). It must never signal a group it did not create, and never report a generation
//! closed while a live member of its group remains.

use std::collections::VecDeque;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::{mpsc, watch};

use crate::groups::{group_alive, signal_group, start_time};

/// How many stderr lines a generation keeps for its connect-failure errors.
pub const STDERR_TAIL_LINES: usize = 20;

/// The read buffer of a server's stderr. Most servers write little there, and the buffer is
/// held (zeroed, so resident) for as long as the server runs: tokio's default of 8 KiB was about
/// a tenth of a supervised server's memory. A longer line is read in several reads, whole.
const STDERR_BUFFER: usize = 512;

/// How long a graceful close waits after closing stdin, and again after SIGTERM.
const GRACE: Duration = Duration::from_millis(1000);

/// How long the watcher keeps looking for stray group members after the leader exits.
const GROUP_SWEEP_LIMIT: Duration = Duration::from_secs(10);

/// What the watcher is asked to do.
#[derive(Clone, Copy, Debug)]
pub enum Stop {
    /// Stdin is (being) closed: wait, SIGTERM, wait, SIGKILL.
    Graceful,
    /// SIGKILL the group now.
    Kill,
}

/// A spawned stdio server: its pipes, its group, and the watcher that reports its end.
pub struct Spawned {
    pub stdin: ChildStdin,
    pub stdout: ChildStdout,
    pub pid: u32,
    /// Orders to the watcher. Unbounded: only the generation's link sends them, one per close
    /// it is asked for (the supervisor closes a generation once or twice: graceful, then kill
    /// at the latest) and one when it is dropped.
    pub stop: mpsc::UnboundedSender<Stop>,
    /// Turns true once the leader has exited and no live member of its group is left.
    pub gone: watch::Receiver<bool>,
    pub stderr_tail: Arc<Mutex<VecDeque<String>>>,
}

/// Spawn `command` as the leader of a new process group, log its stderr under `server`, and
/// start a watcher that reaps it and sweeps its group. `temp` (a sandboxed generation's temp
/// dir) is removed once the group is gone.
pub fn spawn(
    server: &str,
    mut command: Command,
    temp: Option<crate::sandbox::TempDir>,
) -> std::io::Result<Spawned> {
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    crate::guard::ready();
    let mut child = command.spawn()?;
    let pid = child
        .id()
        .ok_or_else(|| std::io::Error::other("the child exited before its id was read"))?;
    let pgid = i32::try_from(pid).map_err(|_| std::io::Error::other("pid out of range"))?;
    // At once, before anything can fail or wait: the leader is not reaped yet, so its start
    // time is still readable.
    crate::guard::started(pgid, start_time(pgid));
    let take = |what: &str| std::io::Error::other(format!("the child's {what} was not piped"));
    let stdin = child.stdin.take().ok_or_else(|| take("stdin"))?;
    let stdout = child.stdout.take().ok_or_else(|| take("stdout"))?;
    let stderr = child.stderr.take().ok_or_else(|| take("stderr"))?;

    let stderr_tail = Arc::new(Mutex::new(VecDeque::with_capacity(STDERR_TAIL_LINES)));
    tokio::spawn(read_stderr(stderr, server.into(), stderr_tail.clone()));

    let (stop_tx, stop_rx) = mpsc::unbounded_channel();
    let (gone_tx, gone_rx) = watch::channel(false);
    tokio::spawn(async move {
        watch_child(child, pgid, stop_rx, gone_tx).await;
        drop(temp); // the group is reaped (or will never be): nothing of it writes there now
    });
    Ok(Spawned {
        stdin,
        stdout,
        pid,
        stop: stop_tx,
        gone: gone_rx,
        stderr_tail,
    })
}

/// Log each line of a server's stderr and keep the last [`STDERR_TAIL_LINES`] of them.
async fn read_stderr<R: AsyncRead + Unpin>(
    stderr: R,
    name: Arc<str>,
    tail: Arc<Mutex<VecDeque<String>>>,
) {
    let mut lines = BufReader::with_capacity(STDERR_BUFFER, stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        tracing::info!(target: "mcp_supervisor::upstream_stderr", server = %name, "{line}");
        if let Ok(mut tail) = tail.lock() {
            if tail.len() == STDERR_TAIL_LINES {
                tail.pop_front();
            }
            tail.push_back(line);
        }
    }
}

/// Reap the leader as soon as it exits (observed, not polled), carry out stop requests, then
/// kill and sweep what is left of the group before reporting the generation gone.
async fn watch_child(
    mut child: Child,
    pgid: i32,
    mut stop: mpsc::UnboundedReceiver<Stop>,
    gone: watch::Sender<bool>,
) {
    let mut escalation: Option<(tokio::time::Instant, Signal)> = None;
    loop {
        let next_step = async {
            match escalation {
                Some((at, _)) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            status = child.wait() => {
                tracing::debug!(pgid, ?status, "upstream process exited");
                break;
            }
            request = stop.recv() => match request {
                Some(Stop::Kill) | None => signal_group(pgid, Signal::SIGKILL),
                Some(Stop::Graceful) => {
                    if escalation.is_none() {
                        escalation = Some((tokio::time::Instant::now() + GRACE, Signal::SIGTERM));
                    }
                }
            },
            () = next_step => {
                if let Some((_, signal)) = escalation {
                    signal_group(pgid, signal);
                    escalation = match signal {
                        Signal::SIGTERM => Some((tokio::time::Instant::now() + GRACE, Signal::SIGKILL)),
                        _ => None,
                    };
                }
            }
        }
    }
    // The leader is gone; members it left behind (an npx wrapper's node child) would keep the
    // old server alive beside the next one. End them and wait until none is left.
    signal_group(pgid, Signal::SIGKILL);
    let deadline = tokio::time::Instant::now() + GROUP_SWEEP_LIMIT;
    while group_alive(pgid) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
        signal_group(pgid, Signal::SIGKILL);
    }
    if group_alive(pgid) {
        tracing::error!(pgid, "process group still has live members after SIGKILL");
        return; // never report gone: the supervisor's barrier turns this into an error
    }
    crate::guard::reaped(pgid);
    let _ = gone.send(true);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn stderr_lines_longer_than_the_buffer_arrive_whole_and_the_tail_keeps_the_last() {
        let (mut server, stderr) = tokio::io::duplex(64);
        let tail = Arc::new(Mutex::new(VecDeque::new()));
        let reader = tokio::spawn(read_stderr(stderr, "s".into(), tail.clone()));
        // One line too many for the tail, then a line three buffers long.
        let long = "x".repeat(STDERR_BUFFER * 3 + 7);
        let mut text = format!("first\n{long}\n");
        for i in 2..STDERR_TAIL_LINES {
            text.push_str(&format!("line {i}\n"));
        }
        text.push_str("last, without a line break");
        tokio::io::AsyncWriteExt::write_all(&mut server, text.as_bytes())
            .await
            .unwrap();
        drop(server);
        reader.await.unwrap();
        let tail = tail.lock().unwrap();
        assert_eq!(tail.len(), STDERR_TAIL_LINES);
        assert_eq!(tail[0], long);
        assert_eq!(tail[1], "line 2");
        assert_eq!(tail[STDERR_TAIL_LINES - 1], "last, without a line break");
    }
}
