//! Process groups, as the operating system shows them: signal one, tell whether a live member is
//! left, and when a process started (which tells it from a later one that got the same pid).
//!
//! Plain calls with no state: the stdio servers' watcher (`upstream::process`) and the orphan
//! guard (`crate::guard`) both use them. It must never decide which group to signal: its
//! callers own that.

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// Send `signal` to process group `pgid`; a group that is gone is no error.
pub(crate) fn signal_group(pgid: i32, signal: Signal) {
    match killpg(Pid::from_raw(pgid), signal) {
        Ok(()) | Err(Errno::ESRCH) => {}
        Err(error) => tracing::warn!(pgid, %error, "could not signal process group"),
    }
}

/// Whether any member of process group `pgid` is alive (zombies waiting for a reaper are not).
pub(crate) fn group_alive(pgid: i32) -> bool {
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
        let mut fields = stat_fields(&stat);
        let state = fields.next();
        let _ppid = fields.next();
        let group = fields.next().and_then(|g| g.parse::<i32>().ok());
        if group == Some(pgid) && state != Some("Z") && state != Some("X") {
            return true;
        }
    }
    false
}

/// The fields of a `/proc/PID/stat` line after the parenthesised command (which may hold
/// spaces): state, ppid, pgrp, ...
fn stat_fields(stat: &str) -> std::str::SplitWhitespace<'_> {
    let rest = stat.rfind(')').map_or("", |i| &stat[i + 1..]);
    rest.split_whitespace()
}

/// When process `pid` started (clock ticks since boot, field 22 of `/proc/PID/stat`): tells it
/// from a later process that got the same pid. `None` when it is gone or there is no `/proc`.
pub(crate) fn start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Field 22 is the 20th after the command (fields 1 and 2).
    stat_fields(&stat).nth(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_skip_a_command_with_spaces_and_parentheses() {
        let stat = "77 (a (b) c) S 1 77 77 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 98765 0 0";
        let fields: Vec<&str> = stat_fields(stat).collect();
        assert_eq!(&fields[..3], ["S", "1", "77"]);
        assert_eq!(fields[19], "98765");
    }

    #[test]
    fn start_time_reads_a_live_process_and_nothing_for_a_missing_one() {
        let own = i32::try_from(std::process::id()).expect("pid");
        let Some(start) = start_time(own) else {
            return; // no /proc here
        };
        assert_eq!(start_time(own), Some(start), "stable for one process");
        assert_eq!(start_time(i32::MAX), None, "no such process");
    }
}
