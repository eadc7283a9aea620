//! A ledger of a server's live processes, kept by a wrapper script around the fault server: each
//! instance records at start every other instance still alive (two processes of one server at
//! once), and can be slow to die, so that a test can hold a stop open while more arrives.
//!
//! It only writes files in its own folder; on drop it SIGKILLs the instances it still sees alive
//! (a failed test's leftovers) and removes the folder.

use std::path::{Path, PathBuf};

use crate::{alive, fault_bin, temp_dir};

/// `ledger.sh LIVE LINGER COMMAND...`: records overlaps, writes `LIVE/<pid>.pid`, runs COMMAND
/// (the server, until its stdin closes), appends its pid to `closing`, then lingers LINGER
/// seconds ignoring SIGTERM (only the group's SIGKILL ends it) before it removes its pid file.
const LEDGER_SH: &str = r#"live="$1"; linger="$2"; shift 2
trap '' TERM
for f in "$live"/*.pid; do
  [ -e "$f" ] || continue
  other=$(cat "$f")
  if kill -0 "$other" 2>/dev/null; then
    echo "$$ started while $other was alive" >> "$live/../overlaps"
  fi
done
echo $$ > "$live/$$.pid"
echo $$ >> "$live/../started"
"$@"
echo $$ >> "$live/../closing"
sleep "$linger"
rm -f "$live/$$.pid"
"#;

pub struct Ledger {
    pub dir: PathBuf,
    script: PathBuf,
    live: PathBuf,
}

impl Ledger {
    pub fn new(tag: &str) -> Self {
        let dir = temp_dir(tag);
        let script = dir.join("ledger.sh");
        std::fs::write(&script, LEDGER_SH).expect("write the ledger script");
        let live = dir.join("live");
        std::fs::create_dir_all(&live).expect("create the ledger folder");
        Self { dir, script, live }
    }

    /// A config entry: the fault server with `tools` extra tools, in instances that linger
    /// `linger` seconds after their stdin closed.
    pub fn server(&self, tools: u32, linger: u32) -> serde_json::Value {
        serde_json::json!({
            "command": "sh",
            "args": [
                self.script, self.live, linger.to_string(),
                fault_bin(), "--tools", tools.to_string(),
            ],
            "reconnect": { "initialDelayMs": 50, "maxDelayMs": 400, "maxAttempts": 3 }
        })
    }

    /// One line per instance that started while another was alive.
    pub fn overlaps(&self) -> String {
        std::fs::read_to_string(self.dir.join("overlaps")).unwrap_or_default()
    }

    /// The instances that started, in order.
    pub fn started(&self) -> Vec<u32> {
        pids_in(&self.dir.join("started"))
    }

    /// The instances whose stdin was closed (their server ended), in order.
    pub fn closing(&self) -> Vec<u32> {
        pids_in(&self.dir.join("closing"))
    }

    /// The instances whose process is alive, sorted.
    pub fn alive(&self) -> Vec<u32> {
        let mut pids: Vec<u32> = std::fs::read_dir(&self.live)
            .map(|entries| {
                entries
                    .flatten()
                    .filter_map(|e| pids_in(&e.path()).first().copied())
                    .filter(|pid| alive(*pid))
                    .collect()
            })
            .unwrap_or_default();
        pids.sort_unstable();
        pids
    }
}

impl Drop for Ledger {
    fn drop(&mut self) {
        for pid in self.alive() {
            let _ = std::process::Command::new("kill")
                .args(["-9", &pid.to_string()])
                .status();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn pids_in(path: &Path) -> Vec<u32> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}
