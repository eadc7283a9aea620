//! Sandboxed servers (SPEC §16) against real third-party software, each through `serve` over
//! its `/mcp` face, under a proxy whose HOME is a fake home holding a secret:
//! - the reference filesystem server (`@modelcontextprotocol/server-filesystem`, run with node
//!   from its installed `dist/index.js`), given one folder by its own arguments and the same
//!   folder in `write`: it lists, reads and writes there; misconfigured with the whole home as
//!   its allowed directory, the sandbox still keeps it from the secret outside the granted
//!   folder, while the same server unsandboxed (the control) reads it;
//! - `mcp-server-git` (PyPI, the venv's console script) in its repository: status, add and
//!   commit work; started without `--repository` (so that it takes any `repo_path`), it can
//!   still read a second repository granted in `read` but not write it (a new branch), which
//!   the unsandboxed control does;
//! - server-everything started by `npx -y @modelcontextprotocol/server-everything`, offline,
//!   with no network at all.
//!
//! The fake home is under cargo's `target/tmp`, outside the system temp dir and `/home`: only
//! its being `$HOME` hides it.
//!
//! The peers are installed by `scripts/install-test-deps.sh` (pinned in `tools/package.json`
//! and its `PY_PINS`); a missing one fails the test saying so, it never skips.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};
use support::{FakeHome, McpSession, Running, state_is, status_until};

/// How long a server may take to be ready, and a call to be answered.
const LIMIT: Duration = Duration::from_secs(45);

/// `serve --http` of `servers` in `home` (HOME the fake home), once every one of `ready` is
/// ready.
async fn serve(home: &FakeHome, servers: Value, ready: &[&str]) -> Running {
    let proxy = home.serve(servers, &[]).await;
    status_until(&proxy, LIMIT, |s| {
        ready.iter().all(|n| state_is(s, n, "ready"))
    })
    .await;
    proxy
}

fn path_arg(path: &Path) -> Value {
    json!(path.to_string_lossy())
}

// === The reference filesystem server ===

/// `node …/server-filesystem/dist/index.js DIR`, sandboxed as `sandbox` says (`None`: not).
fn filesystem(dir: &Path, sandbox: Option<Value>) -> Value {
    let node = mcp_supervisor_testkit::node_tool("node");
    let modules = mcp_supervisor_testkit::tools_dir().join("..");
    let script = modules.join("@modelcontextprotocol/server-filesystem/dist/index.js");
    assert!(
        script.exists(),
        "{} is missing: run `scripts/install-test-deps.sh` first",
        script.display()
    );
    boxed(json!({ "command": node, "args": [script, dir] }), sandbox)
}

/// `server` with `sandbox`, if any.
fn boxed(mut server: Value, sandbox: Option<Value>) -> Value {
    if let Some(sandbox) = sandbox {
        server["sandbox"] = sandbox;
    }
    server
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_filesystem_server_works_in_its_folder_and_a_wider_own_list_does_not_reach_the_home() {
    let home = FakeHome::new("sandbox-real-fs", "home/work");
    let sandbox = json!({ "write": [home.granted] });
    std::fs::write(home.granted.join("notes.txt"), "in the folder").expect("write");
    let proxy = serve(
        &home,
        json!({
            "fs": filesystem(&home.granted, Some(sandbox.clone())),
            // Misconfigured: its own allowed list is the whole home.
            "wide": filesystem(&home.home, Some(sandbox)),
            "control": filesystem(&home.home, None),
        }),
        &["fs", "wide", "control"],
    )
    .await;
    let mut c = McpSession::open(&proxy, "sandbox-real", LIMIT).await;

    // In its folder: it lists, reads and writes.
    let listed = c
        .call(
            "fs__list_directory",
            json!({ "path": path_arg(&home.granted) }),
        )
        .await;
    assert!(
        listed.as_ref().is_ok_and(|l| l.contains("notes.txt")),
        "{listed:?}"
    );
    let read = c
        .call(
            "fs__read_text_file",
            json!({ "path": path_arg(&home.granted.join("notes.txt")) }),
        )
        .await;
    assert_eq!(read.as_deref(), Ok("in the folder"));
    let new = home.granted.join("new.txt");
    let written = c
        .call(
            "fs__write_file",
            json!({ "path": path_arg(&new), "content": "written in the sandbox" }),
        )
        .await;
    assert!(written.is_ok(), "{written:?}");
    assert_eq!(
        std::fs::read_to_string(&new).ok().as_deref(),
        Some("written in the sandbox")
    );

    // Its own list allows the whole home; the sandbox does not.
    let allowed = c.call("wide__list_allowed_directories", json!({})).await;
    assert!(
        allowed
            .as_ref()
            .is_ok_and(|a| a.contains(&*home.home.to_string_lossy())),
        "{allowed:?}"
    );
    let secret = json!({ "path": path_arg(&home.secret) });
    let denied = c.call("wide__read_text_file", secret.clone()).await;
    assert!(
        denied.as_ref().is_err_and(|e| !e.contains("the secret")),
        "the sandbox keeps the secret: {denied:?}"
    );
    let written = c
        .call(
            "wide__write_file",
            json!({ "path": path_arg(&home.home.join("planted.txt")), "content": "x" }),
        )
        .await;
    assert!(written.is_err(), "{written:?}");
    assert!(!home.home.join("planted.txt").exists());
    // In the granted folder, the misconfigured one works as well.
    let read = c
        .call(
            "wide__read_text_file",
            json!({ "path": path_arg(&home.granted.join("notes.txt")) }),
        )
        .await;
    assert_eq!(read.as_deref(), Ok("in the folder"));

    // The control: the same server with the same wide list, unsandboxed, reads the secret.
    assert_eq!(
        c.call("control__read_text_file", secret).await.as_deref(),
        Ok("the secret")
    );
}

// === mcp-server-git ===

/// `git ARGS` in `dir`, which must succeed.
fn git(dir: &Path, args: &[&str]) {
    let output = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("git");
    assert!(output.status.success(), "git {args:?}: {output:?}");
}

/// A new git repository at `dir` with one commit, its committer set in its own config.
fn repository(dir: &Path) {
    std::fs::create_dir_all(dir).expect("mkdir");
    git(dir, &["init", "-q", "-b", "main"]);
    git(dir, &["config", "user.name", "Sandbox Test"]);
    git(dir, &["config", "user.email", "sandbox@example.invalid"]);
    std::fs::write(dir.join("README"), "first\n").expect("write");
    git(dir, &["add", "README"]);
    git(dir, &["commit", "-q", "-m", "first"]);
}

/// The venv's `mcp-server-git` with `args`, sandboxed as `sandbox` says (`None`: not).
fn git_server(args: &[&Path], sandbox: Option<Value>) -> Value {
    let python = mcp_supervisor_testkit::python("import mcp_server_git");
    let script = python.with_file_name("mcp-server-git");
    assert!(
        script.exists(),
        "{} is missing: run `scripts/install-test-deps.sh` first",
        script.display()
    );
    boxed(json!({ "command": script, "args": args }), sandbox)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_server_git_works_in_its_repository_and_cannot_write_outside() {
    let home = FakeHome::new("sandbox-real-git", "home/work");
    let repo = home.granted.join("repo");
    let other = home.dir.join("other");
    repository(&repo);
    repository(&other);
    let proxy = serve(
        &home,
        json!({
            "git": git_server(
                &[Path::new("--repository"), &repo],
                Some(json!({ "write": [repo] }))
            ),
            // Misconfigured: no --repository, so it takes any repo_path.
            "loose": git_server(&[], Some(json!({ "write": [repo], "read": [other] }))),
            "control": git_server(&[], None),
        }),
        &["git", "loose", "control"],
    )
    .await;
    let mut c = McpSession::open(&proxy, "sandbox-real", LIMIT).await;

    // In its repository: status, add, commit.
    std::fs::write(repo.join("change.txt"), "a change\n").expect("write");
    let status = c
        .call("git__git_status", json!({ "repo_path": path_arg(&repo) }))
        .await;
    assert!(
        status.as_ref().is_ok_and(|s| s.contains("change.txt")),
        "{status:?}"
    );
    let added = c
        .call(
            "git__git_add",
            json!({ "repo_path": path_arg(&repo), "files": ["change.txt"] }),
        )
        .await;
    assert!(added.is_ok(), "{added:?}");
    let committed = c
        .call(
            "git__git_commit",
            json!({ "repo_path": path_arg(&repo), "message": "made in the sandbox" }),
        )
        .await;
    assert!(committed.is_ok(), "{committed:?}");
    let log = Command::new("git")
        .args(["log", "-1", "--format=%s"])
        .current_dir(&repo)
        .output()
        .expect("git log");
    assert_eq!(
        String::from_utf8_lossy(&log.stdout).trim(),
        "made in the sandbox"
    );

    // The other repository: granted for reading only, it can be read but not written.
    let other_arg = json!({ "repo_path": path_arg(&other) });
    let status = c.call("loose__git_status", other_arg.clone()).await;
    assert!(
        status.as_ref().is_ok_and(|s| s.contains("main")),
        "{status:?}"
    );
    let branch = json!({ "repo_path": path_arg(&other), "branch_name": "planted" });
    let refused = c.call("loose__git_create_branch", branch.clone()).await;
    assert!(refused.is_err(), "{refused:?}");
    assert!(!other.join(".git/refs/heads/planted").exists());
    // And a repository neither granted: not even read.
    let hidden = c
        .call(
            "loose__git_status",
            json!({ "repo_path": path_arg(&home.home) }),
        )
        .await;
    assert!(hidden.is_err(), "{hidden:?}");

    // The control, unsandboxed, writes the branch.
    let made = c.call("control__git_create_branch", branch).await;
    assert!(made.is_ok(), "{made:?}");
    assert!(other.join(".git/refs/heads/planted").exists());
}

// === npx ===

/// server-everything started as its README says, `npx -y @modelcontextprotocol/server-everything`,
/// with no network at all: npx resolves the package from the project it runs in (its `cwd`, the
/// pinned tools folder, whose `node_modules` holds it), so it needs neither the registry nor a
/// download.
///
/// What a user must grant for npx: npx (npm) keeps everything in its cache, `~/.npm` (or
/// `npm_config_cache`), under the home and so hidden by the sandbox: the packages npx fetched
/// (`~/.npm/_npx`), the registry's answers (`~/.npm/_cacache`) and its logs. Give it in `write`:
/// `"write": ["~/.npm"]` (and `"read"` a `~/.npmrc` if there is one). With `"network": "none"`
/// npx cannot ask the registry which version is the newest, so either the package is in the
/// project of its `cwd` (as here), or it was fetched once and npx runs with `--offline`
/// (`npx --offline -y PACKAGE`: tried by hand, it starts in about 2 s; without `--offline`
/// npx keeps asking the registry and the server never answers within `connectTimeoutMs`, even
/// with the package in the cache), or the network grants the registry
/// (`{ "connectPorts": [443] }`, or `"all"`). With `~/.npm` only in `read`, npx fails
/// (`ENOTCACHED`, and no log written).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn npx_starts_server_everything_with_no_network() {
    let home = FakeHome::new("sandbox-real-npx", "home/work");
    let cache = home.home.join(".npm");
    std::fs::create_dir_all(&cache).expect("mkdir");
    let tools = mcp_supervisor_testkit::node_tool("mcp-server-everything");
    let project = tools
        .parent()
        .and_then(Path::parent)
        .and_then(Path::parent)
        .expect("the tools folder")
        .to_path_buf();
    let npx = which("npx");
    let proxy = serve(
        &home,
        json!({
            "everything": {
                "command": npx,
                "args": ["-y", "@modelcontextprotocol/server-everything", "stdio"],
                "cwd": project,
                "env": { "npm_config_cache": cache },
                "sandbox": { "write": [cache], "network": "none" },
            },
        }),
        &["everything"],
    )
    .await;
    let status = status_until(&proxy, LIMIT, |s| state_is(s, "everything", "ready")).await;
    assert_eq!(
        support::server(&status, "everything")["sandbox"]["applied"]["network"],
        "isolated"
    );
    let mut c = McpSession::open(&proxy, "sandbox-real", LIMIT).await;
    let echoed = c
        .call("everything__echo", json!({ "message": "from the sandbox" }))
        .await;
    assert_eq!(echoed.as_deref(), Ok("Echo: from the sandbox"));
    // npx ran in its cache (its logs are there): the grant it needs is used.
    assert!(
        cache.join("_logs").is_dir(),
        "npx wrote no log in {cache:?}"
    );
}

/// `name` as found in PATH.
fn which(name: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{name} is not in PATH: install Node.js with npm"))
}
