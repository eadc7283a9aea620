//! Processes the soak starts (the proxy, the HTTP fault servers), each behind a guard that ends it
//! on drop, and what `/proc` says about the processes of the run.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// How long a started process may take to listen on its port.
const LISTEN_LIMIT: Duration = Duration::from_secs(10);
/// How often a start on a port is tried again when the process exits at once (port in use).
const START_TRIES: u32 = 5;

/// An unused loopback port (bound, then released).
pub fn free_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").context("bind an ephemeral port")?;
    Ok(listener.local_addr().context("local address")?.port())
}

/// Send `signal` to `pid`; false when it could not be sent (the process is gone).
pub fn signal(pid: u32, signal: Signal) -> bool {
    i32::try_from(pid).is_ok_and(|pid| kill(Pid::from_raw(pid), signal).is_ok())
}

fn append_log(path: &Path) -> Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("open log {}", path.display()))
}

/// Wait (bounded) until something listens on `port`, or the child exits. True when it listens.
async fn wait_listening(child: &mut Child, port: u16) -> bool {
    let deadline = tokio::time::Instant::now() + LISTEN_LIMIT;
    while tokio::time::Instant::now() < deadline {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return true;
        }
        if let Ok(Some(_)) = child.try_wait() {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

/// Wait (bounded, blocking) for `child` to exit; true when it did.
fn wait_blocking(child: &mut Child, limit: Duration) -> bool {
    let steps = (limit.as_millis() / 20).max(1);
    for _ in 0..steps {
        if let Ok(Some(_)) = child.try_wait() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    matches!(child.try_wait(), Ok(Some(_)))
}

/// The proxy under test: `mcp-supervisor serve --config FILE --http 127.0.0.1:PORT`, stderr to a
/// log file, stdin held open. On drop: SIGTERM (so it stops its servers), then SIGKILL.
pub struct Proxy {
    child: Child,
    _stdin: Option<ChildStdin>,
    pub port: u16,
    pub log: PathBuf,
}

/// How the proxy ended when asked to stop.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ProxyStop {
    /// It exited on SIGTERM within the limit.
    pub exited_on_sigterm: bool,
    pub exit_code: Option<i32>,
    pub stop_ms: u64,
}

impl Proxy {
    pub async fn start(bin: &Path, config: &Path, port: u16, log: &Path) -> Result<Self> {
        let mut child = Command::new(bin)
            .args(["serve", "--config"])
            .arg(config)
            .args(["--http", &format!("127.0.0.1:{port}")])
            // Its stop on SIGTERM is checked against STOP_LIMIT: no drain window in it (the
            // drain has its own tests, crates/cli/tests/drain.rs).
            .args(["--drain-ms", "0"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(append_log(log)?)
            .spawn()
            .with_context(|| format!("spawn {}", bin.display()))?;
        let stdin = child.stdin.take();
        let mut proxy = Self {
            child,
            _stdin: stdin,
            port,
            log: log.to_path_buf(),
        };
        if !wait_listening(&mut proxy.child, port).await {
            bail!(
                "the proxy did not listen on 127.0.0.1:{port}; its log {} ends with:\n{}",
                log.display(),
                tail(log, 20)
            );
        }
        Ok(proxy)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// SIGTERM, then wait up to `limit`; SIGKILL if it is still there.
    pub async fn stop(&mut self, limit: Duration) -> ProxyStop {
        let started = tokio::time::Instant::now();
        if let Ok(Some(status)) = self.child.try_wait() {
            return ProxyStop {
                exited_on_sigterm: false,
                exit_code: status.code(),
                stop_ms: 0,
            };
        }
        signal(self.pid(), Signal::SIGTERM);
        let deadline = started + limit;
        while tokio::time::Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return ProxyStop {
                    exited_on_sigterm: true,
                    exit_code: status.code(),
                    stop_ms: started.elapsed().as_millis() as u64,
                };
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let _ = self.child.kill();
        let code = self.child.wait().ok().and_then(|s| s.code());
        ProxyStop {
            exited_on_sigterm: false,
            exit_code: code,
            stop_ms: started.elapsed().as_millis() as u64,
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            signal(self.pid(), Signal::SIGTERM);
            if !wait_blocking(&mut self.child, Duration::from_secs(8)) {
                let _ = self.child.kill();
                let _ = self.child.wait();
            }
        }
    }
}

/// A fault server over streamable HTTP that the harness starts, kills and restarts on one port.
/// Killed on drop.
pub struct HttpFault {
    pub name: String,
    pub port: u16,
    pub ledger: PathBuf,
    bin: PathBuf,
    log: PathBuf,
    child: Option<Child>,
    pub starts: u32,
}

impl HttpFault {
    pub fn new(name: &str, bin: &Path, port: u16, ledger: &Path, log: &Path) -> Self {
        Self {
            name: name.to_owned(),
            port,
            ledger: ledger.to_path_buf(),
            bin: bin.to_path_buf(),
            log: log.to_path_buf(),
            child: None,
            starts: 0,
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn running(&mut self) -> bool {
        match &mut self.child {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Start it (if it is not running) and wait until it listens. Returns the new pid.
    pub async fn start(&mut self) -> Result<u32> {
        if self.running()
            && let Some(pid) = self.pid()
        {
            return Ok(pid);
        }
        self.kill();
        for _ in 0..START_TRIES {
            let mut child = Command::new(&self.bin)
                .args(["--http", &format!("127.0.0.1:{}", self.port), "--ledger"])
                .arg(&self.ledger)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(append_log(&self.log)?)
                .spawn()
                .with_context(|| format!("spawn {}", self.bin.display()))?;
            if wait_listening(&mut child, self.port).await {
                let pid = child.id();
                self.child = Some(child);
                self.starts += 1;
                return Ok(pid);
            }
            let _ = child.kill();
            let _ = child.wait();
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        bail!(
            "HTTP fault server {} did not listen on 127.0.0.1:{} after {START_TRIES} tries; log {}:\n{}",
            self.name,
            self.port,
            self.log.display(),
            tail(&self.log, 10)
        )
    }

    /// kill -9 and reap it. Returns the pid it had, if it was running.
    pub fn kill(&mut self) -> Option<u32> {
        let mut child = self.child.take()?;
        let pid = child.id();
        let was_running = matches!(child.try_wait(), Ok(None));
        let _ = child.kill();
        let _ = child.wait();
        was_running.then_some(pid)
    }
}

impl Drop for HttpFault {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The last `n` lines of a text file.
pub fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// One process as `/proc` shows it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ProcInfo {
    pub pid: u32,
    pub ppid: u32,
    pub state: String,
    pub cmdline: Vec<String>,
}

/// pid, state and parent pid of `/proc/PID/stat`.
fn stat(pid: u32) -> Option<(String, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.to_owned();
    let ppid = fields.next()?.parse().ok()?;
    Some((state, ppid))
}

/// Every process of this machine that `/proc` lists (those that vanish mid-scan are skipped).
pub fn scan() -> Vec<ProcInfo> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Some((state, ppid)) = stat(pid) else {
            continue;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|raw| {
                raw.split(|b| *b == 0)
                    .filter(|part| !part.is_empty())
                    .map(|part| String::from_utf8_lossy(part).into_owned())
                    .collect()
            })
            .unwrap_or_default();
        found.push(ProcInfo {
            pid,
            ppid,
            state,
            cmdline,
        });
    }
    found
}

/// True when `info` is a live fault server whose `--ledger` is `ledger`.
pub fn is_fault_server_of(info: &ProcInfo, ledger: &Path) -> bool {
    if matches!(info.state.as_str(), "Z" | "X") {
        return false;
    }
    let Some(program) = info.cmdline.first() else {
        return false;
    };
    if !program.ends_with("mcp-fault-server") {
        return false;
    }
    let ledger = ledger.to_string_lossy();
    info.cmdline
        .windows(2)
        .any(|pair| pair[0] == "--ledger" && pair[1] == ledger)
}

/// Live fault-server processes whose ledger is `ledger`.
pub fn fault_servers_of(procs: &[ProcInfo], ledger: &Path) -> Vec<u32> {
    procs
        .iter()
        .filter(|p| is_fault_server_of(p, ledger))
        .map(|p| p.pid)
        .collect()
}

/// Whether `pid` is alive (not a zombie) and is still a fault server of `ledger`.
pub fn still_fault_server_of(pid: u32, ledger: &Path) -> bool {
    let Some((state, ppid)) = stat(pid) else {
        return false;
    };
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|raw| {
            raw.split(|b| *b == 0)
                .filter(|part| !part.is_empty())
                .map(|part| String::from_utf8_lossy(part).into_owned())
                .collect()
        })
        .unwrap_or_default();
    is_fault_server_of(
        &ProcInfo {
            pid,
            ppid,
            state,
            cmdline,
        },
        ledger,
    )
}

/// VmRSS of `pid` in KiB.
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}
