//! A process frozen with SIGSTOP for a test of "busy" or "hung", continued when dropped.

use std::process::{Command, Stdio};
use std::time::Duration;

/// A process stopped with SIGSTOP, continued when dropped (also when an assertion fails).
pub struct Frozen(u32);

impl Frozen {
    pub fn new(pid: u32) -> Self {
        let ok = Command::new("kill")
            .args(["-STOP", &pid.to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill -STOP {pid}");
        let frozen = Self(pid);
        // The signal is delivered asynchronously: wait (bounded) to see it take effect.
        let stopped = (0..200).any(|_| {
            std::thread::sleep(Duration::from_millis(5));
            frozen.still_stopped()
        });
        assert!(stopped, "{pid} is not stopped");
        frozen
    }

    /// The process's state in /proc is `T` (stopped).
    pub fn still_stopped(&self) -> bool {
        std::fs::read_to_string(format!("/proc/{}/stat", self.0))
            .ok()
            .and_then(|stat| {
                let after = stat.rsplit_once(')')?.1;
                after.split_whitespace().next().map(|s| s == "T")
            })
            .unwrap_or(false)
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        // It may be gone by now (a supervisor killed it): nothing to say then.
        let _ = Command::new("kill")
            .args(["-CONT", &self.0.to_string()])
            .stderr(Stdio::null())
            .status();
    }
}
