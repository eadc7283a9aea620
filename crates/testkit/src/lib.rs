//! What the end-to-end tests of every crate need alike: where the built binaries and the
//! installed interop peers are, a free loopback port, a temporary directory, whether a
//! process is still alive, a ledger of a server's live processes ([`ledger`]), and a plain MCP
//! client over HTTP ([`rawhttp`], for the bench and the soak as well), an output that keeps
//! each write apart ([`writes`]), and a real OpenID provider on loopback for the OAuth tests
//! ([`idp`]).
//!
//! Test support only: it never starts or stops anything on its own, and it talks only to
//! loopback.
#![forbid(unsafe_code)]

pub mod idp;
pub mod ledger;
pub mod rawhttp;
pub mod writes;

use std::path::PathBuf;
use std::time::Duration;

/// The workspace root (two levels above this crate).
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap_or_else(|_| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")))
}

/// A binary of the workspace, built next to the running test (`cargo build --workspace --bins`
/// builds them all). Panics with what to do when it is missing.
pub fn workspace_bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    // target/<profile>/deps/<test> → target/<profile>/<name>
    let dir = exe
        .parent()
        .and_then(|d| d.parent())
        .map(PathBuf::from)
        .unwrap_or_default();
    let bin = dir.join(name);
    assert!(
        bin.exists(),
        "{} is missing: run `cargo build --workspace --bins` before the tests",
        bin.display()
    );
    bin
}

/// The fault-injection server.
pub fn fault_bin() -> PathBuf {
    workspace_bin("mcp-fault-server")
}

/// A loopback port that was free a moment ago.
pub fn free_port() -> u16 {
    let listener =
        std::net::TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral loopback port");
    listener.local_addr().expect("local address").port()
}

const TEMP_PREFIX: &str = "mcp-supervisor-test-";

/// A fresh temporary directory for one test. The first call of a test process also removes the
/// folders that earlier test processes (now gone) left behind, so runs do not pile up; set
/// `MCP_SUPERVISOR_KEEP_TEST_DIRS=1` to keep them for a look.
pub fn temp_dir(tag: &str) -> PathBuf {
    static SWEPT: std::sync::Once = std::sync::Once::new();
    SWEPT.call_once(sweep_stale_temp_dirs);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let dir =
        std::env::temp_dir().join(format!("{TEMP_PREFIX}{tag}-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create a temporary directory");
    dir
}

/// Remove `mcp-supervisor-test-…-<pid>-<nanos>` folders whose process is gone.
fn sweep_stale_temp_dirs() {
    if std::env::var_os("MCP_SUPERVISOR_KEEP_TEST_DIRS").is_some() {
        return;
    }
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    let ours = std::process::id();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            continue;
        };
        if let Some(pid) = temp_dir_owner(name)
            && pid != ours
            && !alive(pid)
        {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// The process id in a test folder's name, if the name is one of ours.
fn temp_dir_owner(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(TEMP_PREFIX)?;
    let mut parts = rest.rsplitn(3, '-');
    let nanos = parts.next()?;
    let pid = parts.next()?;
    let _tag = parts.next()?;
    nanos.parse::<u128>().ok()?;
    pid.parse().ok()
}

/// Whether process `pid` exists and is not a zombie.
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat
                .rfind(')')
                .and_then(|i| stat[i + 1..].split_whitespace().next());
            !matches!(state, Some("Z") | Some("X") | None)
        }
        Err(_) => false,
    }
}

/// The direct children of `pid`: the processes whose parent (field 4 of `/proc/PID/stat`) it is.
pub fn children_of(pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|child| {
            std::fs::read_to_string(format!("/proc/{child}/stat"))
                .ok()
                .and_then(|stat| parent_in_stat(&stat))
                == Some(pid)
        })
        .collect()
}

/// The parent pid in the text of `/proc/PID/stat` (read after the command, which may hold
/// spaces and parentheses).
fn parent_in_stat(stat: &str) -> Option<u32> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// Poll (bounded) until `pid` is gone: processes die asynchronously after a signal.
pub async fn gone_within(pid: u32, limit: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline {
        if !alive(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    !alive(pid)
}

/// Poll (bounded) until `done` holds; panics naming `what` when `limit` passes first.
pub async fn poll_until(what: &str, limit: Duration, done: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + limit;
    while !done() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// `kill -9 pid`; panics if the signal could not be sent.
pub fn kill9(pid: u32) {
    let status = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status();
    assert!(matches!(status, Ok(s) if s.success()), "kill -9 {pid}");
}

/// The Python of `.venv-test` (or `MCP_SUPERVISOR_PYTHON`), installed by
/// `scripts/install-test-deps.sh`, checked to run `probe` (e.g. an import of the pinned SDK).
/// Panics with what to do when it is missing.
pub fn python(probe: &str) -> PathBuf {
    let path = std::env::var_os("MCP_SUPERVISOR_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join(".venv-test/bin/python"));
    assert!(
        path.exists(),
        "the test Python {} is missing: {INSTALL_HINT}",
        path.display()
    );
    let status = std::process::Command::new(&path)
        .args(["-c", probe])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
    assert!(
        matches!(status, Ok(s) if s.success()),
        "{} cannot run `{probe}` (the pinned `mcp` package is missing): {INSTALL_HINT}",
        path.display()
    );
    path
}

/// The folder of the pinned npm tools' binaries: `MCP_SUPERVISOR_TOOLS`, else
/// `tools/node_modules/.bin`.
pub fn tools_dir() -> PathBuf {
    std::env::var_os("MCP_SUPERVISOR_TOOLS")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("tools/node_modules/.bin"))
}

/// An npm-installed peer in [`tools_dir`]. Panics with what to do when it is missing.
pub fn node_tool(name: &str) -> PathBuf {
    let path = tools_dir().join(name);
    assert!(
        path.exists(),
        "the npm tool {} is missing: {INSTALL_HINT}",
        path.display()
    );
    path
}

const INSTALL_HINT: &str =
    "run `scripts/install-test-deps.sh` (or `scripts/test.sh`, which runs it) first";

/// The binary of example `name` of `package`, next to the running test's
/// (`target/<profile>/examples/NAME`). `cargo test` builds the examples with the tests; when only
/// one test was built, the example is built here (same profile).
pub fn example_bin(package: &str, name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    // target/<profile>/deps/<test> → target/<profile>
    let profile_dir = exe
        .parent()
        .and_then(|d| d.parent())
        .map(PathBuf::from)
        .unwrap_or_default();
    let bin = profile_dir.join("examples").join(name);
    if !bin.exists() {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut command = std::process::Command::new(cargo);
        command.args(["build", "-p", package, "--example", name]);
        if profile_dir.file_name().is_some_and(|p| p == "release") {
            command.arg("--release");
        }
        let status = command.status();
        assert!(
            matches!(status, Ok(s) if s.success()),
            "building the example `{name}` of {package} failed: {status:?}"
        );
    }
    assert!(bin.exists(), "{} is missing", bin.display());
    bin
}

#[cfg(test)]
mod temp_dir_tests {
    use super::temp_dir_owner;

    #[test]
    fn only_our_folder_names_give_an_owner() {
        assert_eq!(
            temp_dir_owner("mcp-supervisor-test-wire-lost-4242-1796308059173901105"),
            Some(4242)
        );
        assert_eq!(temp_dir_owner("mcp-supervisor-test-x-1-2"), Some(1));
        assert_eq!(temp_dir_owner("mcp-supervisor-test-nopid-17963"), None);
        assert_eq!(temp_dir_owner("other-wire-lost-4242-17963"), None);
        assert_eq!(temp_dir_owner("mcp-supervisor-test-a-b-c"), None);
    }
}

#[cfg(test)]
mod process_tests {
    use super::*;

    #[test]
    fn the_parent_is_read_after_a_command_with_spaces_and_parentheses() {
        assert_eq!(parent_in_stat("42 (a b) c)) S 7 42 42 0"), Some(7));
        assert_eq!(parent_in_stat("42 (sh) R 1 42"), Some(1));
        assert_eq!(parent_in_stat("42 (sh) R"), None);
        assert_eq!(parent_in_stat("no parentheses"), None);
    }

    #[test]
    fn a_child_is_among_the_children_of_its_parent() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep starts");
        let found = children_of(std::process::id()).contains(&child.id());
        let _ = child.kill();
        let _ = child.wait();
        assert!(found, "{} not among our children", child.id());
    }
}
