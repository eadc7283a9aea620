//! The orphan guard: one small process per proxy that outlives the proxy dying at once (SIGKILL of
//! its pid or of its process group, the OOM killer) and then ends the process group of every
//! stdio server the proxy had started and not yet reaped.
//!
//! Each stdio server runs in a process group of its own (see `upstream::process`), so nothing
//! reaches it when the proxy is killed, and `PR_SET_PDEATHSIG` would reach only the group's
//! leader, not a grandchild under `sh -c` or `npx`, and exists on Linux only. The guard is the
//! proxy binary itself, re-executed with [`GUARD_ARG`] (the binary opts in by calling
//! [`run_if_asked`] first thing in `main`), in a process group of its own so that a SIGKILL of
//! the proxy's group does not reach it. It reads lines from a pipe whose write end only the proxy
//! holds: `+PGID START` when a server's group is spawned, `-PGID` when it is reaped. When the
//! pipe ends, the proxy is gone: the guard sends SIGTERM to each group it still holds, SIGKILL
//! after [`TERM_GRACE`], and exits once they are gone (or after [`KILL_WAIT`]). A clean exit
//! closes the pipe with an empty table ([`shutdown`]), so the guard exits at once.
//!
//! Pid reuse: `START` is the leader's start time (`/proc/PID/stat`, Linux). Before signalling a
//! group, the guard checks the process that now holds the leader's pid: a different start time
//! means the pid was reused, which the kernel allows only once no process of the old group is
//! left, so that group is not ours and is left alone. A missing leader with live members is
//! ours (the pid stays taken while any member of its group lives). Without `/proc` (macOS) there
//! is no start time and the guard relies on the `-PGID` the proxy sends when it reaps a group.
//!
//! It must never signal a group the proxy did not name, nor one whose leader's pid has been
//! reused; it must never outlive its work, and the proxy must never wait on it (a dead guard is
//! replaced, and the groups still live are replayed to the new one).

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::process::{Child, ChildStdin, ExitCode, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use nix::sys::signal::{SigSet, SigmaskHow, Signal, sigprocmask};

use crate::groups::{group_alive, signal_group, start_time};

/// The hidden first argument that starts the proxy binary as the guard.
pub const GUARD_ARG: &str = "__mcp-supervisor-orphan-guard";

/// How long the guard waits after SIGTERM before SIGKILL.
pub const TERM_GRACE: Duration = Duration::from_millis(500);

/// How long the guard waits after SIGKILL for the groups to be gone before it exits anyway.
pub const KILL_WAIT: Duration = Duration::from_secs(1);

/// How long [`shutdown`] waits for the guard to exit.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(3);

/// One line of the proxy-to-guard protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Message {
    /// A server's process group was spawned; `start` is its leader's start time, if known.
    Started { pgid: i32, start: Option<u64> },
    /// A server's process group is gone and was reaped.
    Reaped { pgid: i32 },
}

/// The line (without its newline) that carries `message`.
fn encode(message: Message) -> String {
    match message {
        Message::Started {
            pgid,
            start: Some(start),
        } => format!("+{pgid} {start}"),
        Message::Started { pgid, start: None } => format!("+{pgid}"),
        Message::Reaped { pgid } => format!("-{pgid}"),
    }
}

/// The message in `line`, or `None` for anything else (an unparsable line is ignored).
fn parse(line: &str) -> Option<Message> {
    let positive = |text: &str| text.parse::<i32>().ok().filter(|p| *p > 1);
    if let Some(rest) = line.strip_prefix('+') {
        let mut parts = rest.split(' ');
        let pgid = positive(parts.next()?)?;
        let start = match parts.next() {
            None => None,
            Some(start) => Some(start.parse::<u64>().ok()?),
        };
        return parts
            .next()
            .is_none()
            .then_some(Message::Started { pgid, start });
    }
    let pgid = positive(line.strip_prefix('-')?)?;
    Some(Message::Reaped { pgid })
}

/// The groups the guard holds: pgid → leader start time.
type Table = BTreeMap<i32, Option<u64>>;

fn apply(table: &mut Table, message: Message) {
    match message {
        Message::Started { pgid, start } => {
            table.insert(pgid, start);
        }
        Message::Reaped { pgid } => {
            table.remove(&pgid);
        }
    }
}

/// Whether a group recorded with leader start time `recorded` is still the one the proxy
/// started, given the start time of the process that now holds the leader's pid (`current`,
/// `None` when no process holds it or it cannot be told).
fn still_ours(recorded: Option<u64>, current: Option<u64>) -> bool {
    match (recorded, current) {
        (Some(recorded), Some(current)) => recorded == current,
        _ => true,
    }
}

// ---- the guard process ----

/// Call first thing in `main`, before any thread or runtime starts. In the guard process (first
/// argument [`GUARD_ARG`]) it runs the guard and returns its exit code; otherwise it marks this
/// binary as able to host the guard (stdio servers spawned from now on are guarded) and returns
/// `None`. A host that never calls it gets no guard.
pub fn run_if_asked() -> Option<ExitCode> {
    if std::env::args_os().nth(1).is_some_and(|a| a == GUARD_ARG) {
        return Some(run_guard());
    }
    if let Ok(mut proxy) = PROXY.lock() {
        proxy.enabled = true;
    }
    None
}

fn run_guard() -> ExitCode {
    // A terminal's Ctrl-C or hangup is for the proxy, which stops cleanly and closes the pipe;
    // the guard must live until then. Blocked, they stay pending and never end it.
    let mut quiet = SigSet::empty();
    quiet.add(Signal::SIGINT);
    quiet.add(Signal::SIGHUP);
    let _ = sigprocmask(SigmaskHow::SIG_BLOCK, Some(&quiet), None);

    let mut table = Table::new();
    let mut stdin = std::io::stdin().lock();
    let mut line = String::new();
    // A read error is as final as the end of the pipe: the proxy is gone either way. A last line
    // without its newline is cut short and ignored (the proxy writes each whole line at once).
    while matches!(stdin.read_line(&mut line), Ok(n) if n > 0) {
        if let Some(message) = line.strip_suffix('\n').and_then(parse) {
            apply(&mut table, message);
        }
        line.clear();
    }
    end_groups(&table);
    ExitCode::SUCCESS
}

/// The groups of `table` that are still ours and still have a live member.
fn live_ours(table: &Table) -> Vec<i32> {
    table
        .iter()
        .filter(|(pgid, start)| still_ours(**start, start_time(**pgid)))
        .map(|(pgid, _)| *pgid)
        .filter(|pgid| group_alive(*pgid))
        .collect()
}

fn end_groups(table: &Table) {
    let left = live_ours(table);
    if left.is_empty() {
        return;
    }
    eprintln!(
        "mcp-supervisor: the proxy ended without stopping its servers; ending process group(s) {left:?}"
    );
    for pgid in &left {
        signal_group(*pgid, Signal::SIGTERM);
    }
    if wait_gone(table, TERM_GRACE) {
        return;
    }
    for pgid in live_ours(table) {
        signal_group(pgid, Signal::SIGKILL);
    }
    if !wait_gone(table, KILL_WAIT) {
        eprintln!(
            "mcp-supervisor: process group(s) {:?} still have live members after SIGKILL",
            live_ours(table)
        );
    }
}

/// Poll (bounded by `limit`) until no group of `table` that is ours has a live member.
fn wait_gone(table: &Table, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if live_ours(table).is_empty() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

// ---- the proxy's side ----

/// The proxy's handle on its guard.
#[derive(Default)]
struct Proxy {
    /// Set by [`run_if_asked`]: this binary can be re-executed as the guard.
    enabled: bool,
    guard: Option<(Child, ChildStdin)>,
    /// The groups spawned and not yet reaped, replayed to a replacement guard.
    live: Table,
    /// Whether the failure to start a guard was already logged.
    warned: bool,
}

static PROXY: Mutex<Proxy> = Mutex::new(Proxy {
    enabled: false,
    guard: None,
    live: Table::new(),
    warned: false,
});

/// Make sure the guard runs, before a server is spawned: so that no server ever exists
/// unguarded while the guard itself is starting.
pub(crate) fn ready() {
    let Ok(mut proxy) = PROXY.lock() else { return };
    if proxy.enabled && proxy.guard.is_none() {
        proxy.restart();
    }
}

/// Tell the guard (starting it if need be) that process group `pgid` was spawned, its leader
/// started at `start`.
pub(crate) fn started(pgid: i32, start: Option<u64>) {
    let Ok(mut proxy) = PROXY.lock() else { return };
    if !proxy.enabled {
        return;
    }
    proxy.live.insert(pgid, start);
    proxy.send(Message::Started { pgid, start });
}

/// Tell the guard that process group `pgid` is gone, so it is never signalled again.
pub(crate) fn reaped(pgid: i32) {
    let Ok(mut proxy) = PROXY.lock() else { return };
    if proxy.live.remove(&pgid).is_some() {
        proxy.send(Message::Reaped { pgid });
    }
}

/// End the guard after a clean stop: close its pipe and wait (bounded) for it to exit. Any
/// group still held (a server whose stop did not finish) is ended by the guard first.
pub fn shutdown() {
    let Ok(mut proxy) = PROXY.lock() else { return };
    proxy.enabled = false;
    let Some((mut child, stdin)) = proxy.guard.take() else {
        return;
    };
    drop(stdin);
    let deadline = Instant::now() + SHUTDOWN_WAIT;
    while Instant::now() < deadline {
        if !matches!(child.try_wait(), Ok(None)) {
            return;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    tracing::warn!(pid = child.id(), "the orphan guard did not exit in time");
}

impl Proxy {
    /// Send `message` to the guard; a guard that is missing or dead is (re)started and given
    /// every live group instead.
    fn send(&mut self, message: Message) {
        // One write of a whole line (far below PIPE_BUF): the guard gets all of it or none.
        let line = format!("{}\n", encode(message));
        if let Some((_, stdin)) = self.guard.as_mut()
            && stdin.write_all(line.as_bytes()).is_ok()
        {
            return;
        }
        self.restart();
    }

    /// Replace the guard (ending one that is stuck) and give the new one every live group.
    fn restart(&mut self) {
        if let Some((mut child, _)) = self.guard.take() {
            let _ = child.kill(); // a stuck guard would hold a zombie otherwise
            let _ = child.wait();
        }
        match spawn_guard(&self.live) {
            Ok(guard) => self.guard = Some(guard),
            Err(error) if !self.warned => {
                self.warned = true;
                tracing::warn!(%error, "could not start the orphan guard: a server may outlive a proxy that is killed at once");
            }
            Err(_) => {}
        }
    }
}

/// Start the guard and give it `live`.
fn spawn_guard(live: &Table) -> std::io::Result<(Child, ChildStdin)> {
    use std::os::unix::process::CommandExt;
    // `/proc/self/exe` still runs after the binary was replaced on disk; elsewhere the path.
    let exe = match std::path::Path::new("/proc/self/exe") {
        path if path.exists() => path.to_path_buf(),
        _ => std::env::current_exe()?,
    };
    let mut command = std::process::Command::new(exe);
    if let Some(name) = std::env::args_os().next() {
        command.arg0(name); // `ps` shows the proxy's name, not /proc/self/exe
    }
    let mut child = command
        .arg(GUARD_ARG)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .process_group(0)
        .spawn()?;
    let mut stdin = child
        .stdin
        .take()
        .ok_or_else(|| std::io::Error::other("the guard's stdin was not piped"))?;
    let mut lines = String::new();
    for (pgid, start) in live {
        lines.push_str(&encode(Message::Started {
            pgid: *pgid,
            start: *start,
        }));
        lines.push('\n');
    }
    if let Err(error) = stdin.write_all(lines.as_bytes()) {
        let _ = child.kill();
        let _ = child.wait();
        return Err(error);
    }
    Ok((child, stdin))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_message_reads_back_as_itself() {
        for message in [
            Message::Started {
                pgid: 4242,
                start: Some(123_456),
            },
            Message::Started {
                pgid: 2,
                start: None,
            },
            Message::Started {
                pgid: i32::MAX,
                start: Some(u64::MAX),
            },
            Message::Reaped { pgid: 4242 },
        ] {
            assert_eq!(parse(&encode(message)), Some(message), "{message:?}");
        }
    }

    #[test]
    fn anything_else_is_no_message() {
        // pgid 0, 1 and negatives would signal the guard's own group, init, or every process.
        for line in [
            "",
            "+",
            "-",
            "+0",
            "-0",
            "+1",
            "-1",
            "+-5",
            "--5",
            "+5 ",
            "+5 x",
            "+5 1 2",
            "5",
            "+ 5",
            "*5",
            "+99999999999",
            "-5 1",
        ] {
            assert_eq!(parse(line), None, "{line:?}");
        }
    }

    #[test]
    fn the_table_holds_what_was_started_and_not_reaped() {
        let mut table = Table::new();
        for message in [
            Message::Started {
                pgid: 10,
                start: Some(1),
            },
            Message::Started {
                pgid: 11,
                start: None,
            },
            Message::Reaped { pgid: 10 },
            Message::Reaped { pgid: 99 },
            Message::Started {
                pgid: 10,
                start: Some(7),
            },
        ] {
            apply(&mut table, message);
        }
        assert_eq!(table, Table::from([(10, Some(7)), (11, None)]));
    }

    #[test]
    fn a_group_is_ours_unless_its_leaders_pid_was_reused() {
        assert!(still_ours(Some(5), Some(5)), "same leader");
        assert!(
            !still_ours(Some(5), Some(6)),
            "pid reused by a later process"
        );
        assert!(still_ours(Some(5), None), "leader gone, members may live");
        assert!(still_ours(None, Some(6)), "no start time known (no /proc)");
        assert!(still_ours(None, None));
    }
}
