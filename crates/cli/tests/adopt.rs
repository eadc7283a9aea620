//! `mcp-supervisor adopt` end to end: the built binary runs on temporary copies of one fixture per
//! host format (tests/adopt_fixtures). It must never touch the fixtures themselves.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use support::supervisor_bin;

/// A temporary folder, removed when the test ends (also when it fails).
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Self {
        Self(support::temp_dir(tag))
    }
}

impl std::ops::Deref for Scratch {
    type Target = PathBuf;
    fn deref(&self) -> &PathBuf {
        &self.0
    }
}

impl AsRef<std::path::Path> for Scratch {
    fn as_ref(&self) -> &std::path::Path {
        &self.0
    }
}

impl AsRef<std::ffi::OsStr> for Scratch {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.0.as_os_str()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The command these tests have adopt write.
const BIN: &str = "/opt/test/bin/mcp-supervisor";

/// One host format's fixture.
struct Fixture {
    /// The folder under tests/adopt_fixtures.
    dir: &'static str,
    /// The config's path inside it (its name tells adopt the format).
    file: &'static str,
    /// How many of its servers adopt wraps.
    wrapped: usize,
    /// One of them, for --only.
    one: &'static str,
    /// Text that must survive adopt: unknown keys, comments, servers adopt leaves alone.
    kept: &'static [&'static str],
}

const FIXTURES: &[Fixture] = &[
    Fixture {
        dir: "claude-desktop",
        file: "claude_desktop_config.json",
        wrapped: 2,
        one: "notes",
        kept: &[
            "\"globalShortcut\": \"Ctrl+Space\"",
            "\"disabledTools\": [\"write_file\"]",
            "\"menuBarEnabled\": true",
            "\"DEBUG\": \"1\"",
        ],
    },
    Fixture {
        dir: "cursor",
        file: ".cursor/mcp.json",
        wrapped: 2,
        one: "github",
        kept: &[
            "\"cursorUnknownFlag\": true",
            "\"GITHUB_TOKEN\": \"${env:GITHUB_TOKEN}\"",
        ],
    },
    Fixture {
        dir: "claude-code",
        file: ".mcp.json",
        wrapped: 3,
        one: "everything",
        kept: &["\"type\": \"stdio\"", "\"env\": {}"],
    },
    Fixture {
        dir: "claude-user",
        file: ".claude.json",
        wrapped: 2,
        one: "sqlite",
        kept: &[
            "\"numStartups\": 42",
            "\"hasTrustDialogAccepted\": true",
            "\"userID\": \"abc123\"",
            "\"cwd\": \"/home/u/project\"",
        ],
    },
    Fixture {
        dir: "vscode",
        file: ".vscode/mcp.json",
        wrapped: 2,
        one: "fetch",
        kept: &[
            "\"type\": \"promptString\"",
            "\"envFile\": \"${workspaceFolder}/.env\"",
        ],
    },
    Fixture {
        dir: "codex",
        file: "config.toml",
        wrapped: 2,
        one: "search",
        kept: &[
            "# Codex settings, hand-written.",
            "# The servers Codex starts.",
            "command = \"/opt/test/bin/mcp-supervisor\" # the launcher",
            "# keep this token out of git",
            "startup_timeout_sec = 20",
            "tool_timeout_sec = 30",
            "bearer_token_env_var = \"PRIVATE_TOKEN\"",
            "[profiles.fast]",
        ],
    },
    Fixture {
        dir: "zed",
        file: "settings.json",
        wrapped: 2,
        one: "legacy-time",
        kept: &[
            "// Zed settings",
            "/* MCP servers, added by hand */",
            "\"vim_mode\": true, // trailing comma and comment",
            "\"source\": \"extension\"",
            "\"TZ\": \"UTC\"",
        ],
    },
    Fixture {
        dir: "gemini",
        file: ".gemini/settings.json",
        wrapped: 3,
        one: "docs",
        kept: &[
            "\"theme\": \"GitHub\"",
            "\"cwd\": \"/home/u\"",
            "\"trust\": false",
            "\"includeTools\": [\"read_file\"]",
            "\"timeout\": 5000",
            "\"excludeTools\": [\"delete_page\"]",
            "\"trust\": true",
            "\"telemetry\": { \"enabled\": false }",
        ],
    },
];

fn fixture_path(fixture: &Fixture) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/adopt_fixtures")
        .join(fixture.dir)
        .join(fixture.file)
}

fn original(fixture: &Fixture) -> String {
    std::fs::read_to_string(fixture_path(fixture)).expect("read the fixture")
}

/// A temporary copy of the fixture; returns its folder and the config's path.
fn place(fixture: &Fixture) -> (Scratch, PathBuf) {
    let dir = Scratch::new(&format!("adopt-{}", fixture.dir));
    let path = dir.join(fixture.file);
    std::fs::create_dir_all(path.parent().expect("a parent folder")).expect("create folders");
    std::fs::write(&path, original(fixture)).expect("copy the fixture");
    (dir, path)
}

fn adopt(path: &Path, extra: &[&str]) -> Output {
    Command::new(supervisor_bin())
        .arg("adopt")
        .arg("--file")
        .arg(path)
        .args(extra)
        .output()
        .expect("run mcp-supervisor adopt")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).expect("read the config")
}

/// Every file under `dir`, recursively.
fn files_in(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).expect("list the folder") {
        let path = entry.expect("a folder entry").path();
        if path.is_dir() {
            out.extend(files_in(&path));
        } else {
            out.push(path);
        }
    }
    out.sort();
    out
}

fn assert_ok(output: &Output, what: &str) {
    assert!(
        output.status.success(),
        "{what}: exit {:?}\nstdout:\n{}\nstderr:\n{}",
        output.status.code(),
        stdout(output),
        stderr(output)
    );
}

#[test]
fn adopt_then_undo_gives_back_the_original_text() {
    for fixture in FIXTURES {
        let (_dir, path) = place(fixture);
        assert_ok(&adopt(&path, &["--binary", BIN, "--write"]), fixture.dir);
        assert_ne!(
            read(&path),
            original(fixture),
            "{}: adopt changed nothing",
            fixture.dir
        );
        assert_ok(
            &adopt(&path, &["--binary", BIN, "--undo", "--write"]),
            fixture.dir,
        );
        assert_eq!(read(&path), original(fixture), "{}: undo", fixture.dir);
    }
}

#[test]
fn every_server_it_understands_is_wrapped() {
    for fixture in FIXTURES {
        let (_dir, path) = place(fixture);
        assert_ok(&adopt(&path, &["--binary", BIN, "--write"]), fixture.dir);
        let text = read(&path);
        assert_eq!(
            text.matches(BIN).count(),
            fixture.wrapped,
            "{}:\n{text}",
            fixture.dir
        );
        assert_eq!(
            text.matches("\"wrap\"").count(),
            fixture.wrapped,
            "{}: every command written runs `wrap`:\n{text}",
            fixture.dir
        );
    }
}

#[test]
fn adopt_twice_is_adopt_once_and_says_nothing_to_change() {
    for fixture in FIXTURES {
        let (dir, path) = place(fixture);
        assert_ok(&adopt(&path, &["--binary", BIN, "--write"]), fixture.dir);
        let once = read(&path);
        let files = files_in(&dir);
        let again = adopt(&path, &["--binary", BIN, "--write"]);
        assert_ok(&again, fixture.dir);
        assert_eq!(read(&path), once, "{}", fixture.dir);
        assert!(
            stdout(&again).contains("nothing to change"),
            "{}: {}",
            fixture.dir,
            stdout(&again)
        );
        assert!(stdout(&again).contains("already goes through mcp-supervisor"));
        assert_eq!(files_in(&dir), files, "{}: no second backup", fixture.dir);
    }
}

#[test]
fn undo_needs_no_backup() {
    for fixture in FIXTURES {
        let (dir, path) = place(fixture);
        assert_ok(&adopt(&path, &["--write"]), fixture.dir);
        let backups: Vec<PathBuf> = files_in(&dir).into_iter().filter(|p| p != &path).collect();
        assert_eq!(
            backups.len(),
            1,
            "{}: one backup beside the file",
            fixture.dir
        );
        assert_eq!(
            read(&backups[0]),
            original(fixture),
            "{}: the backup",
            fixture.dir
        );
        std::fs::remove_file(&backups[0]).expect("remove the backup");
        // No --binary: the wrapped entries are found by the program's name.
        let undo = adopt(&path, &["--undo", "--write"]);
        assert_ok(&undo, fixture.dir);
        assert!(stdout(&undo).contains("restored"), "{}", stdout(&undo));
        assert_eq!(read(&path), original(fixture), "{}", fixture.dir);
    }
}

#[test]
fn undo_of_a_file_never_adopted_changes_nothing() {
    for fixture in FIXTURES {
        let (dir, path) = place(fixture);
        let undo = adopt(&path, &["--undo", "--write"]);
        assert_ok(&undo, fixture.dir);
        assert!(
            stdout(&undo).contains("nothing to change"),
            "{}",
            stdout(&undo)
        );
        assert_eq!(read(&path), original(fixture));
        assert_eq!(files_in(&dir), vec![path], "{}: no backup", fixture.dir);
    }
}

#[test]
fn unknown_keys_comments_and_servers_left_alone_are_kept() {
    for fixture in FIXTURES {
        let (_dir, path) = place(fixture);
        assert_ok(&adopt(&path, &["--binary", BIN, "--write"]), fixture.dir);
        let text = read(&path);
        for kept in fixture.kept {
            assert!(
                text.contains(kept),
                "{}: lost {kept:?}:\n{text}",
                fixture.dir
            );
        }
    }
}

/// Codex after adopt, to the byte: comments, blank lines, key order and the server adopt cannot
/// wrap stay; only the lines of command, args, url and http_headers change, and the header's value
/// moves to env.
const CODEX_ADOPTED: &str = r#"# Codex settings, hand-written.
model = "o4-mini"

# The servers Codex starts.
[mcp_servers.docs]
command = "/opt/test/bin/mcp-supervisor" # the launcher
args = ["wrap", "--", "npx", "-y", "@upstash/context7-mcp"]
startup_timeout_sec = 20

[mcp_servers.docs.env]
# keep this token out of git
API_KEY = "k-123"

[mcp_servers.search]
command = "/opt/test/bin/mcp-supervisor"
args = ["wrap", "--url", "http://127.0.0.1:3003/mcp", "--header-from-env", "X-Region=MCP_HEADER_X_REGION"]
tool_timeout_sec = 30
env = { MCP_HEADER_X_REGION = "eu" }

[mcp_servers.private]
url = "https://private.example.invalid/mcp"
bearer_token_env_var = "PRIVATE_TOKEN"

[profiles.fast]
model = "gpt-5-mini"
"#;

#[test]
fn codex_keeps_its_comments_and_layout() {
    let fixture = FIXTURES
        .iter()
        .find(|f| f.dir == "codex")
        .expect("the codex fixture");
    let (_dir, path) = place(fixture);
    assert_ok(&adopt(&path, &["--binary", BIN, "--write"]), "codex");
    assert_eq!(read(&path), CODEX_ADOPTED);
}

#[test]
fn a_file_that_does_not_parse_names_the_line_and_is_not_written() {
    for fixture in FIXTURES {
        let (dir, path) = place(fixture);
        let text = original(fixture);
        let mut lines: Vec<&str> = text.lines().collect();
        lines.insert(2, "  this line is not valid = { ");
        let broken = lines.join("\n") + "\n";
        std::fs::write(&path, &broken).expect("write the broken copy");
        let output = adopt(&path, &["--write"]);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{}: {}",
            fixture.dir,
            stderr(&output)
        );
        assert!(
            stderr(&output).contains("line 3"),
            "{}: {}",
            fixture.dir,
            stderr(&output)
        );
        assert!(stderr(&output).contains("nothing was written"));
        assert_eq!(read(&path), broken, "{}", fixture.dir);
        assert_eq!(files_in(&dir), vec![path], "{}: no backup", fixture.dir);
    }
}

#[test]
fn only_limits_it_to_the_named_servers() {
    for fixture in FIXTURES {
        let (_dir, path) = place(fixture);
        let output = adopt(&path, &["--binary", BIN, "--only", fixture.one, "--write"]);
        assert_ok(&output, fixture.dir);
        let text = read(&path);
        assert_eq!(text.matches(BIN).count(), 1, "{}:\n{text}", fixture.dir);
        assert!(stdout(&output).contains(&format!(".{}: wrapped", fixture.one)));
        assert_eq!(stdout(&output).matches(": wrapped").count(), 1);
    }
}

#[test]
fn an_only_name_not_in_the_file_writes_nothing() {
    let fixture = &FIXTURES[0];
    let (dir, path) = place(fixture);
    let output = adopt(
        &path,
        &[
            "--only",
            &format!("{},no-such-server", fixture.one),
            "--write",
        ],
    );
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("no-such-server"),
        "{}",
        stderr(&output)
    );
    assert_eq!(read(&path), original(fixture));
    assert_eq!(files_in(&dir), vec![path]);
}

#[test]
fn binary_sets_the_command_written_and_defaults_to_this_program() {
    for fixture in FIXTURES {
        let (_dir, path) = place(fixture);
        assert_ok(
            &adopt(&path, &["--binary", "/elsewhere/mcp-supervisor", "--write"]),
            fixture.dir,
        );
        assert_eq!(
            read(&path).matches("/elsewhere/mcp-supervisor").count(),
            fixture.wrapped
        );

        let (_dir, path) = place(fixture);
        assert_ok(&adopt(&path, &["--write"]), fixture.dir);
        let own = supervisor_bin().to_string_lossy().into_owned();
        assert!(Path::new(&own).is_absolute());
        assert_eq!(
            read(&path).matches(&own).count(),
            fixture.wrapped,
            "{}",
            fixture.dir
        );
    }
}

#[test]
fn without_write_it_prints_a_diff_and_changes_nothing() {
    for fixture in FIXTURES {
        let (dir, path) = place(fixture);
        let output = adopt(&path, &["--binary", BIN]);
        assert_ok(&output, fixture.dir);
        let out = stdout(&output);
        assert!(
            out.contains("--- ") && out.contains("+++ ") && out.contains("@@ "),
            "{out}"
        );
        let added = out
            .lines()
            .filter(|l| l.starts_with('+') && l.contains(BIN))
            .count();
        assert_eq!(added, fixture.wrapped, "{}: {out}", fixture.dir);
        assert!(out.contains("--write"), "{out}");
        assert_eq!(read(&path), original(fixture), "{}", fixture.dir);
        assert_eq!(files_in(&dir), vec![path], "{}: no backup", fixture.dir);
    }
}

#[test]
fn url_servers_become_wrap_url_with_their_headers() {
    let cursor = &FIXTURES[1];
    let (_dir, path) = place(cursor);
    assert_ok(&adopt(&path, &["--binary", BIN, "--write"]), "cursor");
    let text = read(&path);
    let expected = r#"    "remote-docs": {
      "command": "/opt/test/bin/mcp-supervisor",
      "args": ["wrap", "--url", "http://127.0.0.1:3001/mcp", "--header-from-env", "Authorization=MCP_HEADER_AUTHORIZATION", "--header-from-env", "X-Team=MCP_HEADER_X_TEAM"],
      "cursorUnknownFlag": true,
      "env": {
        "MCP_HEADER_AUTHORIZATION": "Bearer ${env:DOCS_TOKEN}",
        "MCP_HEADER_X_TEAM": "core"
      }
    }"#;
    assert!(
        text.contains(expected),
        "header values move to env, off the command line:\n{text}"
    );
    assert!(!text.contains("\"headers\""), "{text}");

    let vscode = &FIXTURES[4];
    let (_dir, path) = place(vscode);
    assert_ok(&adopt(&path, &["--binary", BIN, "--write"]), "vscode");
    let text = read(&path);
    assert!(
        !text.contains("\"type\": \"http\""),
        "a wrapped server is stdio:\n{text}"
    );
    assert_eq!(text.matches("\"type\": \"stdio\"").count(), 2, "{text}");
}

#[test]
fn sse_servers_become_wrap_sse_and_undo_gives_them_back() {
    let fixture = FIXTURES
        .iter()
        .find(|f| f.dir == "claude-code")
        .expect("claude-code");
    let (_dir, path) = place(fixture);
    let output = adopt(&path, &["--binary", BIN, "--write"]);
    assert_ok(&output, "claude-code");
    assert!(
        stdout(&output).contains("mcpServers.legacy: wrapped"),
        "{}",
        stdout(&output)
    );
    let text = read(&path);
    let expected = r#"    "legacy": {
      "type": "stdio",
      "command": "/opt/test/bin/mcp-supervisor",
      "args": ["wrap", "--sse", "https://legacy.example.invalid/sse"]
    }"#;
    assert!(text.contains(expected), "{text}");
    assert_ok(
        &adopt(&path, &["--binary", BIN, "--undo", "--write"]),
        "undo",
    );
    assert_eq!(read(&path), original(fixture), "\"type\": \"sse\" is back");
}

#[test]
fn gemini_is_a_host_of_its_own_and_its_http_and_sse_servers_are_wrapped() {
    let fixture = FIXTURES.iter().find(|f| f.dir == "gemini").expect("gemini");
    let (dir, path) = place(fixture);
    let output = adopt(&path, &["--binary", BIN, "--write"]);
    assert_ok(&output, "gemini");
    assert!(
        stdout(&output).contains("(Gemini CLI):"),
        "{}",
        stdout(&output)
    );
    let text = read(&path);
    let docs = r#"    "docs": {
      "command": "/opt/test/bin/mcp-supervisor",
      "args": ["wrap", "--url", "http://127.0.0.1:3001/mcp", "--header-from-env", "Authorization=MCP_HEADER_AUTHORIZATION"],
      "timeout": 5000,
      "excludeTools": ["delete_page"],
      "env": {
        "MCP_HEADER_AUTHORIZATION": "Bearer $DOCS_TOKEN"
      }
    }"#;
    let events = r#"    "events": {
      "command": "/opt/test/bin/mcp-supervisor",
      "args": ["wrap", "--sse", "http://127.0.0.1:8000/sse"],
      "trust": true
    }"#;
    for expected in [docs, events] {
        assert!(text.contains(expected), "{expected}\nin:\n{text}");
    }
    assert!(
        !text.contains("\"httpUrl\"") && !text.contains("\"url\""),
        "{text}"
    );
    // Undo gives `httpUrl` back to the streamable-HTTP server and `url` to the SSE one.
    assert_ok(
        &adopt(&path, &["--binary", BIN, "--undo", "--write"]),
        "undo",
    );
    assert_eq!(read(&path), original(fixture));

    // Under another name, its `httpUrl` tells the host.
    let elsewhere = dir.join("servers.json");
    std::fs::write(&elsewhere, original(fixture)).expect("copy the fixture");
    let output = adopt(&elsewhere, &["--binary", BIN]);
    assert_ok(&output, "gemini under another name");
    assert!(
        stdout(&output).contains("(Gemini CLI):"),
        "{}",
        stdout(&output)
    );
}

#[test]
fn servers_it_cannot_wrap_are_named_and_left_as_is() {
    for (dir, name) in [
        ("codex", "private: left as is"),
        ("zed", "from-extension: left as is"),
    ] {
        let fixture = FIXTURES.iter().find(|f| f.dir == dir).expect("a fixture");
        let (_dir, path) = place(fixture);
        let output = adopt(&path, &["--binary", BIN]);
        assert_ok(&output, dir);
        assert!(stdout(&output).contains(name), "{}", stdout(&output));
    }
}

#[test]
fn without_file_it_finds_the_usual_paths() {
    let home = Scratch::new("adopt-home");
    let project = home.join("project");
    let codex = FIXTURES.iter().find(|f| f.dir == "codex").expect("codex");
    let claude = FIXTURES
        .iter()
        .find(|f| f.dir == "claude-user")
        .expect("claude");
    let local = FIXTURES
        .iter()
        .find(|f| f.dir == "claude-code")
        .expect("claude-code");
    let gemini = FIXTURES.iter().find(|f| f.dir == "gemini").expect("gemini");
    let found = [
        (home.join(".codex/config.toml"), codex),
        (home.join(".gemini/settings.json"), gemini),
        (home.join(".claude.json"), claude),
        (project.join(".mcp.json"), local),
    ];
    for (path, fixture) in &found {
        std::fs::create_dir_all(path.parent().expect("parent")).expect("create folders");
        std::fs::write(path, original(fixture)).expect("copy the fixture");
    }
    let output = Command::new(supervisor_bin())
        .args(["adopt", "--binary", BIN, "--write"])
        .current_dir(&project)
        .env("HOME", &home)
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("CODEX_HOME")
        .output()
        .expect("run adopt");
    assert_ok(&output, "adopt without --file");
    for (path, fixture) in &found {
        assert!(
            stdout(&output).contains(&path.display().to_string()),
            "{}",
            stdout(&output)
        );
        assert_eq!(
            read(path).matches(BIN).count(),
            fixture.wrapped,
            "{}",
            path.display()
        );
    }

    let empty = Scratch::new("adopt-empty-home");
    let output = Command::new(supervisor_bin())
        .arg("adopt")
        .current_dir(&empty)
        .env("HOME", &empty)
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("CODEX_HOME")
        .output()
        .expect("run adopt");
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("--file"), "{}", stderr(&output));
}

#[test]
fn a_file_of_no_known_host_asks_for_format() {
    let dir = Scratch::new("adopt-unknown");
    let path = dir.join("servers.json");
    std::fs::write(&path, "{\"other\": {}}\n").expect("write");
    let output = adopt(&path, &[]);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("--format"), "{}", stderr(&output));

    // With --format the file is read as that host's.
    std::fs::write(&path, "{\"servers\": {\"x\": {\"command\": \"uvx\"}}}\n").expect("write");
    let output = adopt(&path, &["--format", "vscode", "--binary", BIN, "--write"]);
    assert_ok(&output, "--format vscode");
    assert!(
        read(&path).contains("[\"wrap\", \"--\", \"uvx\"]"),
        "{}",
        read(&path)
    );
}

#[test]
fn version_prints_the_version_and_the_git_commit() {
    let output = Command::new(supervisor_bin())
        .arg("--version")
        .output()
        .expect("run --version");
    assert_ok(&output, "--version");
    let out = stdout(&output);
    let expected = format!("mcp-supervisor {} (commit ", env!("CARGO_PKG_VERSION"));
    assert!(out.starts_with(&expected), "{out}");
    let commit = out
        .trim_end()
        .strip_prefix(&expected)
        .and_then(|rest| rest.strip_suffix(')'))
        .unwrap_or_else(|| panic!("no commit in {out:?}"));
    let git = Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output();
    match git {
        Ok(git) if git.status.success() => {
            assert_eq!(commit, String::from_utf8_lossy(&git.stdout).trim(), "{out}");
        }
        _ => assert_eq!(commit, "unknown", "{out}"),
    }
}

#[test]
fn wrap_takes_headers_as_name_colon_value() {
    let output = Command::new(supervisor_bin())
        .args([
            "wrap",
            "--url",
            "http://127.0.0.1:9/mcp",
            "--header",
            "no colon here",
        ])
        .output()
        .expect("run wrap");
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("NAME: VALUE"),
        "{}",
        stderr(&output)
    );

    let output = Command::new(supervisor_bin())
        .args(["wrap", "--header", "X: y", "--", "true"])
        .output()
        .expect("run wrap");
    assert_eq!(
        output.status.code(),
        Some(2),
        "--header goes with --url only"
    );
}

#[test]
fn wrap_sends_headers_given_inline_or_from_the_environment() {
    use std::io::Read;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    let port = listener.local_addr().expect("its address").port();
    listener.set_nonblocking(true).expect("non-blocking accept");
    let mut child = Command::new(supervisor_bin())
        .args(["wrap", "--url", &format!("http://127.0.0.1:{port}/mcp")])
        .args(["--header", "X-Team: core"])
        .args(["--header-from-env", "Authorization=ADOPT_TEST_AUTH"])
        .env("ADOPT_TEST_AUTH", "Bearer t0k")
        .args(["--max-attempts", "1", "--stdio"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start wrap");
    // The transparent face connects upstream when its client initializes.
    let mut stdin = child.stdin.take().expect("wrap's stdin");
    std::io::Write::write_all(
        &mut stdin,
        b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-06-18\",\"capabilities\":{},\"clientInfo\":{\"name\":\"t\",\"version\":\"1\"}}}\n",
    )
    .expect("send initialize");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut head = String::new();
    while std::time::Instant::now() < deadline && !head.contains("\r\n\r\n") {
        match listener.accept() {
            Ok((mut stream, _)) => {
                stream
                    .set_read_timeout(Some(std::time::Duration::from_secs(5)))
                    .expect("read timeout");
                let mut buf = [0u8; 8192];
                let n = stream.read(&mut buf).unwrap_or(0);
                head = String::from_utf8_lossy(&buf[..n]).to_lowercase();
            }
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(50)),
        }
    }
    drop(stdin);
    let _ = child.kill();
    let _ = child.wait();
    assert!(head.starts_with("post /mcp"), "{head}");
    assert!(head.contains("\r\nx-team: core\r\n"), "{head}");
    assert!(head.contains("\r\nauthorization: bearer t0k\r\n"), "{head}");
}

#[test]
fn a_comment_between_a_changed_entrys_keys_is_reported_and_the_rest_kept() {
    let dir = Scratch::new("adopt-zed-comment");
    let path = dir.join("settings.json");
    let text = "{\n  // top comment\n  \"context_servers\": {\n    \"git\": {\n      // why git\n      \"command\": \"uvx\",\n      \"args\": [\"mcp-server-git\"]\n    }\n  }\n}\n";
    std::fs::write(&path, text).expect("write");
    let output = adopt(&path, &["--binary", BIN, "--write"]);
    assert_ok(&output, "zed");
    assert!(
        stdout(&output).contains("note: comments between this entry's keys are not kept"),
        "{}",
        stdout(&output)
    );
    let after = read(&path);
    assert!(after.contains("// top comment"), "{after}");
    assert!(!after.contains("// why git"), "{after}");
    assert!(
        after.contains("[\"wrap\", \"--\", \"uvx\", \"mcp-server-git\"]"),
        "{after}"
    );
}
