//! Helpers for interop tests against real third-party MCP peers (the Python SDK, server-everything):
//! where the pinned tools live, free loopback ports, and a guard that always kills a spawned server.
//!
//! The tools are installed by `scripts/install-test-deps.sh`; a missing tool fails the test with a
//! message naming that script, it never skips it.
#![allow(dead_code)] // each test binary uses a different part

#[allow(unused_imports)] // each test binary uses a different part
pub use mcp_supervisor_testkit::{free_port, workspace_root};

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// The test venv's Python, able to import the pinned SDK.
pub fn python() -> PathBuf {
    mcp_supervisor_testkit::python("import mcp.server; mcp.server.MCPServer")
}

/// A binary of the pinned npm tools.
pub fn tool(name: &str) -> PathBuf {
    mcp_supervisor_testkit::node_tool(name)
}

const INSTALL_HINT: &str =
    "run `scripts/install-test-deps.sh` (or `scripts/test.sh`, which runs it) first";

/// A file beside this module (`tests/interop/<name>`).
pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/interop")
        .join(name)
}

// === impl Server ===

/// A spawned server process, in its own process group, killed (group and all) when dropped, so
/// that a failed assertion leaves nothing running. Its stdout and stderr go to a log file whose
/// tail is shown when it does not come up.
pub struct Server {
    what: String,
    child: Option<Child>,
    log: PathBuf,
}

impl Server {
    /// Spawn `cmd` in a new process group, logging to `log`.
    pub fn spawn(what: &str, mut cmd: Command, log: &Path) -> Self {
        use std::os::unix::process::CommandExt;
        let out = File::create(log).expect("create server log");
        let err = out.try_clone().expect("clone server log");
        cmd.stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0);
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("could not start {what} ({cmd:?}): {e}; {INSTALL_HINT}"));
        Self {
            what: what.to_string(),
            child: Some(child),
            log: log.to_path_buf(),
        }
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The last lines of the server's output.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// Wait (bounded) until `port` on 127.0.0.1 accepts connections; panic with the log if the
    /// process exits first or the limit passes.
    pub async fn wait_listening(&mut self, port: u16, limit: Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                panic!(
                    "{} exited ({status}) before listening on port {port}:\n{}",
                    self.what,
                    self.log_tail()
                );
            }
            let connect = tokio::net::TcpStream::connect(("127.0.0.1", port));
            if let Ok(Ok(_)) = tokio::time::timeout(Duration::from_millis(200), connect).await {
                return;
            }
            if tokio::time::Instant::now() >= deadline {
                panic!(
                    "{} did not listen on port {port} within {limit:?}:\n{}",
                    self.what,
                    self.log_tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// SIGKILL the whole process group and reap the leader (bounded). Idempotent.
    pub fn kill(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let pid = Pid::from_raw(child.id() as i32);
        let _ = killpg(pid, Signal::SIGKILL);
        let _ = child.kill();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while std::time::Instant::now() < deadline {
            if !matches!(child.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        eprintln!(
            "{} (pid {}) was not reaped within 5 s of SIGKILL",
            self.what, pid
        );
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Wait (bounded) until nothing listens on `port` any more.
pub async fn wait_port_closed(port: u16, limit: Duration) {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let connect = tokio::net::TcpStream::connect(("127.0.0.1", port));
        match tokio::time::timeout(Duration::from_millis(200), connect).await {
            Ok(Err(_)) => return,
            _ if tokio::time::Instant::now() >= deadline => {
                panic!(
                    "port {port} still accepts connections {limit:?} after the server was killed"
                )
            }
            _ => tokio::time::sleep(Duration::from_millis(25)).await,
        }
    }
}
