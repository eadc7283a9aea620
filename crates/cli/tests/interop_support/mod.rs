//! Helpers for the interop tests of the `mcp-supervisor` binary against real third-party MCP
//! peers: the official Python SDK client (through `tests/py/client_driver.py`), server-everything,
//! the inspector CLI and the conformance suite.
//!
//! The peers are installed by `scripts/install-test-deps.sh`; a missing one fails the test with a
//! message naming that script, it never skips it. Every process started here is owned by a guard
//! that stops it on drop, also when an assertion fails: the proxy gets SIGTERM first (so it stops
//! its own servers), then its process group gets SIGKILL.
#![allow(dead_code)] // each test binary uses a different part

#[allow(unused_imports)] // each test binary uses a different part
pub use mcp_supervisor_testkit::{alive, children_of, workspace_root};

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// How long a proxy may take to listen.
pub const LISTEN_LIMIT: Duration = Duration::from_secs(45);

/// A config with server-everything over stdio under the name `everything`.
pub fn everything_config(dir: &Path) -> PathBuf {
    let path = dir.join("everything.json");
    let argv = everything_stdio();
    let config = serde_json::json!({
        "mcpServers": { "everything": { "command": argv[0], "args": argv[1..] } }
    });
    std::fs::write(&path, config.to_string()).expect("write config");
    path
}

/// `mcp-supervisor ARGS --http 127.0.0.1:PORT` on a free port, listening.
pub fn start_http_proxy(dir: &Path, what: &str, args: &[String]) -> (Proc, u16) {
    let port = mcp_supervisor_testkit::free_port();
    // `wrap` takes the server's command after `--`: the face flag goes before it.
    let split = args.iter().position(|a| a == "--").unwrap_or(args.len());
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mcp-supervisor"));
    cmd.args(&args[..split])
        // Stopped by SIGTERM: no drain window to wait for.
        .args(["--http", &format!("127.0.0.1:{port}"), "--drain-ms", "0"])
        .args(&args[split..]);
    let mut proxy = Proc::spawn(what, cmd, dir);
    proxy.wait_listening(port, LISTEN_LIMIT);
    (proxy, port)
}

/// The test venv's Python, able to import the pinned SDK.
pub fn python() -> PathBuf {
    mcp_supervisor_testkit::python("from mcp import Client, StdioServerParameters")
}

/// A binary of the pinned npm tools.
pub fn tool(name: &str) -> PathBuf {
    mcp_supervisor_testkit::node_tool(name)
}

const INSTALL_HINT: &str =
    "run `scripts/install-test-deps.sh` (or `scripts/test.sh`, which runs it) first";

/// How long a stopped process gets between SIGTERM and SIGKILL (the proxy's own stop is ≤ 5 s).
const TERM_GRACE: Duration = Duration::from_secs(7);

/// `tests/py/<name>`.
pub fn py_script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/py")
        .join(name)
}

/// The command line that runs server-everything over stdio.
pub fn everything_stdio() -> Vec<String> {
    vec![path_str(&tool("mcp-server-everything")), "stdio".into()]
}

pub fn path_str(path: &Path) -> String {
    path.to_str().expect("utf-8 path").to_string()
}

/// The last `n` lines of a file (for failure messages).
pub fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

fn signal(target: &str, sig: &str) {
    let _ = Command::new("kill")
        .args([sig, "--", target])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

fn wait_gone(pids: &[u32], limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if pids.iter().all(|p| !alive(*p)) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    pids.iter().all(|p| !alive(*p))
}

// === impl Proc ===

/// A spawned process in its own process group, with stdout and stderr in files. On drop (or
/// `stop`): its direct children that live in other groups (the proxy a Python stdio client
/// spawned in a new session) get SIGTERM, then the process itself gets SIGTERM; after a grace
/// period whatever is left gets SIGKILL, the group included.
pub struct Proc {
    what: String,
    child: Option<Child>,
    pub stdout: PathBuf,
    pub stderr: PathBuf,
}

impl Proc {
    pub fn spawn(what: &str, mut cmd: Command, dir: &Path) -> Self {
        use std::os::unix::process::CommandExt;
        let tag: String = what
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        let stdout = dir.join(format!("{tag}.stdout"));
        let stderr = dir.join(format!("{tag}.stderr"));
        cmd.stdin(Stdio::null())
            .stdout(File::create(&stdout).expect("create stdout log"))
            .stderr(File::create(&stderr).expect("create stderr log"))
            .process_group(0);
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("could not start {what} ({cmd:?}): {e}; {INSTALL_HINT}"));
        Self {
            what: what.to_string(),
            child: Some(child),
            stdout,
            stderr,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    pub fn logs(&self) -> String {
        format!(
            "--- {} stdout (tail) ---\n{}\n--- {} stderr (tail) ---\n{}",
            self.what,
            tail(&self.stdout, 20),
            self.what,
            tail(&self.stderr, 40)
        )
    }

    /// Wait (bounded) for the exit; `None` when it is still running at the limit.
    pub fn wait(&mut self, limit: Duration) -> Option<ExitStatus> {
        let child = self.child.as_mut()?;
        let deadline = Instant::now() + limit;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Wait (bounded) until `port` on 127.0.0.1 accepts connections; panic with the logs if the
    /// process exits first or the limit passes.
    pub fn wait_listening(&mut self, port: u16, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                panic!(
                    "{} exited ({status}) before listening on {port}\n{}",
                    self.what,
                    self.logs()
                );
            }
            let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
            if std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{} did not listen on {port} within {limit:?}\n{}",
                self.what,
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// Stop it (see the type's doc) and reap it. Idempotent.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let pid = child.id();
        let mut victims = Vec::new();
        if matches!(child.try_wait(), Ok(None)) {
            victims = children_of(pid);
            for kid in &victims {
                signal(&kid.to_string(), "-TERM");
            }
            signal(&pid.to_string(), "-TERM");
            victims.push(pid);
        }
        let deadline = Instant::now() + TERM_GRACE;
        while Instant::now() < deadline {
            if matches!(child.try_wait(), Ok(Some(_))) && wait_gone(&victims, Duration::ZERO) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        for victim in &victims {
            if alive(*victim) {
                eprintln!("{}: pid {victim} ignored SIGTERM; killing it", self.what);
                signal(&victim.to_string(), "-KILL");
            }
        }
        // Whatever is left in its group (grandchildren that share it).
        signal(&format!("-{pid}"), "-KILL");
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop();
    }
}

// === Python driver ===

/// How the driver reaches the server under test.
pub enum Target {
    /// Spawn this command line and talk over its stdio.
    Stdio(Vec<String>),
    /// A streamable HTTP endpoint.
    Url(String),
}

/// Run `tests/py/client_driver.py SCENARIO` against `target` (bounded by `limit`) and return its
/// JSON summary. Panics, with the driver's stderr (which holds a stdio proxy's logs too), when
/// it fails, prints no JSON or overruns.
pub fn run_driver(
    dir: &Path,
    scenario: &str,
    mode: &str,
    target: &Target,
    extra: &[&str],
    limit: Duration,
) -> Value {
    let mut cmd = Command::new(python());
    cmd.arg(py_script("client_driver.py"))
        .args([scenario, "--mode", mode])
        .args([
            "--deadline",
            &(limit.as_secs_f64() - 5.0).max(5.0).to_string(),
        ])
        .args(extra)
        .env("PYTHONUNBUFFERED", "1")
        .env("PYTHONDONTWRITEBYTECODE", "1");
    let how = match target {
        Target::Stdio(argv) => {
            cmd.args(["--stdio", &serde_json::to_string(argv).expect("argv json")]);
            "stdio"
        }
        Target::Url(url) => {
            cmd.args(["--url", url]);
            "http"
        }
    };
    let what = format!("driver {scenario} {how} {mode}");
    let mut proc = Proc::spawn(&what, cmd, dir);
    let Some(status) = proc.wait(limit) else {
        let logs = proc.logs();
        proc.stop();
        panic!("{what} did not finish within {limit:?}\n{logs}");
    };
    assert!(
        status.success(),
        "{what} failed ({status})\n{}",
        proc.logs()
    );
    let text = std::fs::read_to_string(&proc.stdout).expect("read driver stdout");
    let line = text.lines().rev().find(|l| l.starts_with('{'));
    let summary: Value = line
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("{what} printed no JSON summary\n{}", proc.logs()));
    proc.stop();
    summary
}

/// A `callbacks` run against server-everything: the server's requests reached this client's
/// callbacks and its answers (`tag`) reached the server, which shows them in the tools' results
/// (roots only when `roots`: a server asks for them about its session).
pub fn assert_callback_answers(summary: &Value, tag: &str, roots: bool, ctx: &str) {
    let text = |key: &str| {
        summary[key]["text"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    if roots {
        assert!(
            text("roots").contains(&format!("file:///{tag}")),
            "{ctx}: roots: {}",
            summary["roots"]
        );
    }
    assert!(
        text("sampling").contains(&format!("sampled by {tag}")),
        "{ctx}: sampling: {}",
        summary["sampling"]
    );
    assert!(
        text("elicitation").contains(&format!("Name: {tag}")),
        "{ctx}: elicitation: {}",
        summary["elicitation"]
    );
    let asked: Vec<&str> = summary["asked"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    for method in ["sampling/createMessage", "elicitation/create"] {
        assert!(
            asked.contains(&method),
            "{ctx}: {method} not asked: {asked:?}"
        );
    }
}

// === conformance suite summaries ===

/// One conformance run's per-scenario outcome, from its summary: name → passed (no failed
/// check), plus the total checks passed and failed.
pub struct Conformance {
    pub scenarios: Vec<(String, bool)>,
    pub checks_passed: u64,
    pub checks_failed: u64,
    /// Scenarios the summary reports as `(extension)`: run, never scored.
    pub extensions: Vec<String>,
}

impl Conformance {
    pub fn passed(&self) -> Vec<&str> {
        self.scenarios
            .iter()
            .filter(|(_, ok)| *ok)
            .map(|(name, _)| name.as_str())
            .collect()
    }
}

/// Parse lines like `✓ tools-list: 1 passed, 0 failed` and `Total: 13 passed, 19 failed`.
pub fn parse_conformance(stdout: &str) -> Conformance {
    let counts = |text: &str| -> Option<(u64, u64)> {
        let (p, f) = text.trim().split_once(',')?;
        let p = p.trim().strip_suffix("passed")?.trim().parse().ok()?;
        let f = f.trim().strip_suffix("failed")?.trim().parse().ok()?;
        Some((p, f))
    };
    let mut result = Conformance {
        scenarios: Vec::new(),
        checks_passed: 0,
        checks_failed: 0,
        extensions: Vec::new(),
    };
    let summary = stdout.split("=== SUMMARY ===").nth(1).unwrap_or_default();
    for line in summary.lines() {
        let line = line.trim();
        if let Some(name) = line.strip_suffix("(extension)") {
            let name = name.trim_start_matches(['✓', '✗']).trim();
            result.extensions.push(name.to_string());
            continue;
        }
        if let Some(total) = line.strip_prefix("Total:") {
            if let Some((p, f)) = counts(total) {
                (result.checks_passed, result.checks_failed) = (p, f);
            }
            continue;
        }
        let Some(rest) = line.strip_prefix('✓').or_else(|| line.strip_prefix('✗')) else {
            continue;
        };
        let Some((name, tally)) = rest.trim().split_once(": ") else {
            continue;
        };
        if let Some((p, f)) = counts(tally) {
            result.scenarios.push((name.to_string(), p > 0 && f == 0));
        }
    }
    result
}

// === small HTTP and metrics helpers ===

/// A plain HTTP/1.0 GET of `path` on 127.0.0.1:`port` (bounded); the body, or `None`.
pub fn http_get(port: u16, path: &str) -> Option<String> {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    (head.split_whitespace().nth(1) == Some("200")).then(|| body.to_string())
}

/// The value of the sample `name{labels}` in Prometheus text, if present.
pub fn metric(text: &str, sample: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.strip_prefix(sample)?.trim().parse().ok())
}

/// Poll `/metrics` on `port` until `sample` reaches `at_least` (bounded); its last value.
pub fn wait_metric(port: u16, sample: &str, at_least: f64, limit: Duration) -> f64 {
    let deadline = Instant::now() + limit;
    let mut last = f64::NAN;
    while Instant::now() < deadline {
        if let Some(value) = http_get(port, "/metrics").and_then(|t| metric(&t, sample)) {
            last = value;
            if value >= at_least {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    last
}

/// Run a command to its end, bounded; (status, stdout, stderr). Its process group is killed
/// when it overruns.
pub fn run_bounded(
    what: &str,
    cmd: Command,
    dir: &Path,
    limit: Duration,
) -> (ExitStatus, String, String) {
    let mut proc = Proc::spawn(what, cmd, dir);
    let Some(status) = proc.wait(limit) else {
        let logs = proc.logs();
        proc.stop();
        panic!("{what} did not finish within {limit:?}\n{logs}");
    };
    let out = std::fs::read_to_string(&proc.stdout).unwrap_or_default();
    let err = std::fs::read_to_string(&proc.stderr).unwrap_or_default();
    proc.stop();
    (status, out, err)
}
