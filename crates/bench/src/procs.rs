//! Processes the `peers` and `scale` benches start (proxies, relays, fault servers), each behind a
//! guard that ends its whole process group on drop, and what `/proc` says about processes that
//! carry a run's marker (a unique temp directory in their command line).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::time::Instant;

/// A started process in its own process group; SIGKILL to the group and reaped on drop at the
/// latest.
pub struct Spawned {
    pub name: String,
    child: Child,
    pid: u32,
    log: Option<PathBuf>,
}

impl Spawned {
    /// Start `program args` in a new process group, stderr (and stdout unless `pipes`) to `log`.
    /// With `pipes`, stdin and stdout are piped (take them with [`Spawned::take_pipes`]).
    pub fn start(
        name: &str,
        program: &Path,
        args: &[String],
        log: Option<&Path>,
        pipes: bool,
    ) -> Result<Self> {
        Self::start_env(name, program, args, &[], log, pipes)
    }

    /// [`Spawned::start`] with `envs` added to the process's environment.
    pub fn start_env(
        name: &str,
        program: &Path,
        args: &[String],
        envs: &[(&str, &str)],
        log: Option<&Path>,
        pipes: bool,
    ) -> Result<Self> {
        let mut command = Command::new(program);
        command
            .args(args)
            .envs(envs.iter().copied())
            .process_group(0)
            .kill_on_drop(true);
        let sink = || -> Result<Stdio> {
            Ok(match log {
                Some(path) => std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .with_context(|| format!("cannot open {}", path.display()))?
                    .into(),
                None => Stdio::null(),
            })
        };
        if pipes {
            command.stdin(Stdio::piped()).stdout(Stdio::piped());
        } else {
            command.stdin(Stdio::null()).stdout(sink()?);
        }
        command.stderr(sink()?);
        let child = command
            .spawn()
            .with_context(|| format!("cannot start {name}: {}", program.display()))?;
        let pid = child.id().context("a just-started child has a pid")?;
        Ok(Self {
            name: name.to_string(),
            child,
            pid,
            log: log.map(Path::to_path_buf),
        })
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The piped stdout and stdin (once).
    pub fn take_pipes(&mut self) -> Option<(ChildStdout, ChildStdin)> {
        Some((self.child.stdout.take()?, self.child.stdin.take()?))
    }

    /// Wait (bounded) until something accepts connections on `port`; fails if the process exits.
    pub async fn wait_listening(&mut self, port: u16, limit: Duration) -> Result<Duration> {
        let start = Instant::now();
        loop {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                return Ok(start.elapsed());
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                bail!(
                    "{} exited ({status}) before listening on 127.0.0.1:{port}{}",
                    self.name,
                    self.log_tail()
                );
            }
            if start.elapsed() >= limit {
                bail!(
                    "{} did not listen on 127.0.0.1:{port} within {limit:?}{}",
                    self.name,
                    self.log_tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The last lines of the log, for an error message.
    pub fn log_tail(&self) -> String {
        let Some(text) = self
            .log
            .as_ref()
            .and_then(|p| std::fs::read_to_string(p).ok())
        else {
            return String::new();
        };
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(8)..].join("\n    ");
        if tail.is_empty() {
            String::new()
        } else {
            format!("; its log ends:\n    {tail}")
        }
    }

    /// Wait up to `limit` for the process to exit by itself; true when it did.
    pub async fn wait_exit(&mut self, limit: Duration) -> bool {
        tokio::time::timeout(limit, self.child.wait()).await.is_ok()
    }

    /// SIGTERM to the process, up to `limit` for it to exit, then SIGKILL to its group; reaped.
    /// True when it exited on SIGTERM.
    pub async fn stop(&mut self, limit: Duration) -> bool {
        if let Ok(Some(_)) = self.child.try_wait() {
            self.kill_group();
            return true;
        }
        signal(self.pid, Signal::SIGTERM);
        let graceful = tokio::time::timeout(limit, self.child.wait()).await.is_ok();
        self.kill_group();
        let _ = tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await;
        graceful
    }

    fn kill_group(&mut self) {
        if let Ok(raw) = i32::try_from(self.pid) {
            let _ = killpg(Pid::from_raw(raw), Signal::SIGKILL);
        }
        let _ = self.child.start_kill();
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        self.kill_group();
        for _ in 0..200 {
            if !matches!(self.child.try_wait(), Ok(None)) {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// A relay's child: `command` (program and arguments) started with its stdin and stdout piped
/// and its stderr ours, killed when dropped; and we die with the bench that started us
/// (PR_SET_PDEATHSIG), so a relay never outlives its run.
pub fn relayed_child(command: &[String]) -> Result<(Child, ChildStdin, ChildStdout)> {
    let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL);
    let (program, args) = command.split_first().context("no command after --")?;
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("cannot start {program}"))?;
    let stdin = child.stdin.take().context("stdin not piped")?;
    let stdout = child.stdout.take().context("stdout not piped")?;
    Ok((child, stdin, stdout))
}

/// Send `sig` to one process; false when it could not be sent.
pub fn signal(pid: u32, sig: Signal) -> bool {
    i32::try_from(pid).is_ok_and(|raw| kill(Pid::from_raw(raw), sig).is_ok())
}

/// A temp directory unique to this run; its path is the marker in the command lines of the
/// processes of the run. Removed on drop.
pub struct RunDir {
    pub path: PathBuf,
}

impl RunDir {
    pub fn new(bench: &str) -> Result<Self> {
        let path = std::env::temp_dir().join(format!(
            "mcp-supervisor-bench-{bench}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        Ok(Self { path })
    }

    pub fn file(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    pub fn marker(&self) -> String {
        self.path.display().to_string()
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// One process seen in `/proc`.
#[derive(Clone, Debug)]
pub struct ProcInfo {
    pub pid: u32,
    /// The state letter of `/proc/PID/stat` (R, S, D, Z, ...).
    pub state: char,
    pub args: Vec<String>,
}

impl ProcInfo {
    /// Alive = not a zombie (killed but not yet reaped) nor dead.
    pub fn alive(&self) -> bool {
        !matches!(self.state, 'Z' | 'X' | 'x')
    }
}

/// Every process whose command line contains `marker`, with its state.
pub fn with_marker(marker: &str) -> Vec<ProcInfo> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(raw) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        // Cheap test first: most processes are not ours.
        if !raw.windows(marker.len()).any(|w| w == marker.as_bytes()) {
            continue;
        }
        let args: Vec<String> = raw
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|stat| {
                let rest = &stat[stat.rfind(')')? + 1..];
                rest.split_whitespace().next()?.chars().next()
            })
            .unwrap_or('?');
        found.push(ProcInfo { pid, state, args });
    }
    found
}

/// The CPU time `pid` has used so far, user and system, in nanoseconds: the sum over its live
/// threads of the first field of `/proc/PID/task/TID/schedstat`. A thread that ends takes its
/// time with it, so a difference of two readings is the CPU of the threads alive at both.
/// `None` once the process is gone.
pub fn cpu_ns(pid: u32) -> Option<u64> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut total = 0u64;
    for task in tasks.flatten() {
        let Ok(text) = std::fs::read_to_string(task.path().join("schedstat")) else {
            continue;
        };
        total += text
            .split_whitespace()
            .next()
            .and_then(|ns| ns.parse::<u64>().ok())
            .unwrap_or(0);
    }
    Some(total)
}

/// SIGKILL every live process that carries `marker`; returns how many there were.
pub fn sweep(marker: &str) -> usize {
    let left: Vec<ProcInfo> = with_marker(marker)
        .into_iter()
        .filter(ProcInfo::alive)
        .collect();
    for info in &left {
        signal(info.pid, Signal::SIGKILL);
    }
    left.len()
}

/// Run one measurement of `run` (stopped by Ctrl-C), then kill what is left of its processes
/// and say so in the report (`leftover_processes_killed`) and on stdout.
pub async fn measured(
    run: &RunDir,
    measure: impl std::future::Future<Output = Result<serde_json::Value>>,
) -> Result<serde_json::Value> {
    let outcome = tokio::select! {
        outcome = measure => outcome,
        _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted")),
    };
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let swept = sweep(&run.marker());
    let mut report = outcome?;
    report["leftover_processes_killed"] = swept.into();
    if swept > 0 {
        println!(
            "\n  warning: {swept} process(es) of the run were still alive at the end and were killed"
        );
    }
    Ok(report)
}

/// Write `{"mcpServers": servers}` as the run's `config.json`; its path.
pub fn write_config(
    run: &RunDir,
    servers: serde_json::Map<String, serde_json::Value>,
) -> Result<PathBuf> {
    let path = run.file("config.json");
    let config = serde_json::json!({ "mcpServers": servers });
    std::fs::write(&path, serde_json::to_vec_pretty(&config)?)
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

/// The current 1-minute load average.
pub fn load_now() -> f64 {
    crate::util::loadavg().unwrap_or(f64::NAN)
}

/// The arguments of `mcp-supervisor serve --config CONFIG --http 127.0.0.1:PORT` (no catalog,
/// warnings only) with a drain window of `drain_ms`.
pub fn serve_http_args(config: &Path, port: u16, drain_ms: &str) -> Vec<String> {
    [
        "serve",
        "--log-level",
        "warn",
        "--no-catalog",
        "--config",
        &config.display().to_string(),
        "--http",
        &format!("127.0.0.1:{port}"),
        "--drain-ms",
        drain_ms,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// `mcp-supervisor serve --config CONFIG --http 127.0.0.1:PORT` (no catalog, warnings only, its
/// log in the run's `proxy.log`), as the benchmarks of one proxy start it.
pub fn serve_http(supervisor: &Path, config: &Path, port: u16, run: &RunDir) -> Result<Spawned> {
    // Stopped by SIGTERM: no drain window to wait for.
    let args = serve_http_args(config, port, "0");
    Spawned::start(
        "mcp-supervisor serve",
        supervisor,
        &args,
        Some(&run.file("proxy.log")),
        false,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_busy_child_s_cpu_grows() {
        // A shell that computes until it is killed.
        let mut child = Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .kill_on_drop(true)
            .spawn()
            .expect("sh starts");
        let pid = child.id().expect("a pid while running");
        assert!(mcp_supervisor_testkit::children_of(std::process::id()).contains(&pid));
        let before = cpu_ns(pid).expect("the child is alive");
        // Bounded: a busy process gains CPU time within milliseconds; give it up to 5 s.
        let mut grew = false;
        for _ in 0..500 {
            tokio::time::sleep(Duration::from_millis(10)).await;
            if cpu_ns(pid).is_some_and(|now| now > before) {
                grew = true;
                break;
            }
        }
        child.kill().await.expect("the shell is killed");
        assert!(grew, "no CPU time counted for a busy child in 5 s");
        assert_eq!(cpu_ns(u32::MAX), None);
    }
}
