//! A stdio server's process group: spawn the child as a group leader, watch it exit, signal the
//! whole group, and tell when no live member is left.
//!
//! This is the only code that sends signals. It must never signal a group it did not create,
//! and never report a generation closed while a live member of its group remains.

use std::collections::VecDeque;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::{mpsc, watch};

/// How many stderr lines a generation keeps for its connect-failure errors.
pub const STDERR_TAIL_LINES: usize = 20;

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
    pub stop: mpsc::UnboundedSender<Stop>,
    /// Turns true once the leader has exited and no live member of its group is left.
    pub gone: watch::Receiver<bool>,
    pub stderr_tail: Arc<Mutex<VecDeque<String>>>,
}

/// Spawn `command` as the leader of a new process group, log its stderr under `server`, and
/// start a watcher that reaps it and sweeps its group.
pub fn spawn(server: &str, mut command: Command) -> std::io::Result<Spawned> {
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = command.spawn()?;
    let pid = child
        .id()
        .ok_or_else(|| std::io::Error::other("the child exited before its id was read"))?;
    let take = |what: &str| std::io::Error::other(format!("the child's {what} was not piped"));
    let stdin = child.stdin.take().ok_or_else(|| take("stdin"))?;
    let stdout = child.stdout.take().ok_or_else(|| take("stdout"))?;
    let stderr = child.stderr.take().ok_or_else(|| take("stderr"))?;

    let stderr_tail = Arc::new(Mutex::new(VecDeque::with_capacity(STDERR_TAIL_LINES)));
    let tail = stderr_tail.clone();
    let name: Arc<str> = server.into();
    tokio::spawn(async move {
        let mut lines = BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            tracing::info!(target: "mcp_supervisor::upstream_stderr", server = %name, "{line}");
            if let Ok(mut tail) = tail.lock() {
                if tail.len() == STDERR_TAIL_LINES {
                    tail.pop_front();
                }
                tail.push_back(line);
            }
        }
    });

    let (stop_tx, stop_rx) = mpsc::unbounded_channel();
    let (gone_tx, gone_rx) = watch::channel(false);
    let pgid = i32::try_from(pid).map_err(|_| std::io::Error::other("pid out of range"))?;
    tokio::spawn(watch_child(child, pgid, stop_rx, gone_tx));
    Ok(Spawned {
        stdin,
        stdout,
        pid,
        stop: stop_tx,
        gone: gone_rx,
        stderr_tail,
    })
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
    let _ = gone.send(true);
}

fn signal_group(pgid: i32, signal: Signal) {
    match killpg(Pid::from_raw(pgid), signal) {
        Ok(()) | Err(Errno::ESRCH) => {}
        Err(error) => tracing::warn!(pgid, %error, "could not signal process group"),
    }
}

/// Whether any member of process group `pgid` is alive (zombies waiting for a reaper are not).
pub fn group_alive(pgid: i32) -> bool {
    match killpg(Pid::from_raw(pgid), None) {
        Err(Errno::ESRCH) => false,
        _ => live_member_in_proc(pgid),
    }
}

/// Scan `/proc` for a process of group `pgid` that is not a zombie.
fn live_member_in_proc(pgid: i32) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return true; // cannot tell: assume alive, which is the safe answer
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // Fields after the parenthesised command: state ppid pgrp ...
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let mut fields = rest.split_whitespace();
        let state = fields.next();
        let _ppid = fields.next();
        let group = fields.next().and_then(|g| g.parse::<i32>().ok());
        if group == Some(pgid) && state != Some("Z") && state != Some("X") {
            return true;
        }
    }
    false
}
