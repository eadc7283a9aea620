//! `mcp-supervisor adopt` end to end: the built binary runs on temporary copies of one fixture per
//! host format (tests/adopt_fixtures). It must never touch the fixtures themselves.

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

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
        wrapped: 4,
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
        wrapped: 5,
        one: "github",
        kept: &[
            "\"cursorUnknownFlag\": true",
            "\"GITHUB_TOKEN\": \"${env:GITHUB_TOKEN}\"",
        ],
    },
    Fixture {
        dir: "claude-code",
        file: ".mcp.json",
        wrapped: 6,
        one: "everything",
        kept: &["\"type\": \"stdio\"", "\"env\": {}"],
    },
    Fixture {
        dir: "claude-user",
        file: ".claude.json",
        wrapped: 4,
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
        wrapped: 4,
        one: "fetch",
        kept: &[
            "\"type\": \"promptString\"",
            "\"envFile\": \"${workspaceFolder}/.env\"",
        ],
    },
    Fixture {
        dir: "codex",
        file: "config.toml",
        wrapped: 5,
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
        wrapped: 4,
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
        wrapped: 7,
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

/// A JSON host's text without its comments and trailing commas (Zed's settings.json has both).
fn plain_json(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    let mut in_string = false;
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            if c == '\\' {
                out.extend(chars.next());
            } else if c == '"' {
                in_string = false;
            }
            continue;
        }
        match c {
            '"' => {
                in_string = true;
                out.push(c);
            }
            '/' if chars.peek() == Some(&'/') => while chars.next_if(|&n| n != '\n').is_some() {},
            '/' if chars.peek() == Some(&'*') => {
                chars.next();
                let mut last = ' ';
                for n in chars.by_ref() {
                    if last == '*' && n == '/' {
                        break;
                    }
                    last = n;
                }
            }
            '}' | ']' => {
                let end = out.trim_end().len();
                if out[..end].ends_with(',') {
                    out.truncate(end - 1);
                }
                out.push(c);
            }
            _ => out.push(c),
        }
    }
    out
}

/// A TOML value as the JSON value it stands for (a datetime as its text).
fn toml_value(value: &toml_edit::Value) -> Value {
    use toml_edit::Value as T;
    match value {
        T::String(s) => Value::from(s.value().as_str()),
        T::Integer(i) => Value::from(*i.value()),
        T::Float(f) => Value::from(*f.value()),
        T::Boolean(b) => Value::from(*b.value()),
        T::Datetime(d) => Value::from(d.value().to_string()),
        T::Array(items) => items.iter().map(toml_value).collect(),
        T::InlineTable(table) => table
            .iter()
            .map(|(k, v)| (k.to_owned(), toml_value(v)))
            .collect::<serde_json::Map<_, _>>()
            .into(),
    }
}

fn toml_item(item: &toml_edit::Item) -> Value {
    use toml_edit::Item;
    match item {
        Item::None => Value::Null,
        Item::Value(value) => toml_value(value),
        Item::Table(table) => table
            .iter()
            .map(|(k, v)| (k.to_owned(), toml_item(v)))
            .collect::<serde_json::Map<_, _>>()
            .into(),
        Item::ArrayOfTables(tables) => tables
            .iter()
            .map(|table| toml_item(&toml_edit::Item::Table(table.clone())))
            .collect(),
    }
}

/// Every server entry of a host's file by its place (`mcpServers.NAME`,
/// `projects["/p"].mcpServers.NAME`, `mcp_servers.NAME` …), as a value: JSON as parsed, Codex's
/// TOML as the values it holds. Two entries compare by their keys and values, not by their text.
fn entries(text: &str, toml: bool) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    if toml {
        let doc: toml_edit::DocumentMut = text.parse().expect("the config is TOML");
        if let Some(servers) = doc.get("mcp_servers").and_then(toml_edit::Item::as_table) {
            for (name, item) in servers.iter() {
                out.insert(format!("mcp_servers.{name}"), toml_item(item));
            }
        }
        return out;
    }
    let top: Value = serde_json::from_str(&plain_json(text)).expect("the config is JSON");
    for key in ["mcpServers", "servers", "context_servers"] {
        if let Some(Value::Object(servers)) = top.get(key) {
            for (name, entry) in servers {
                out.insert(format!("{key}.{name}"), entry.clone());
            }
        }
    }
    if let Some(Value::Object(projects)) = top.get("projects") {
        for (path, project) in projects {
            if let Some(Value::Object(servers)) = project.get("mcpServers") {
                for (name, entry) in servers {
                    out.insert(
                        format!("projects[{path:?}].mcpServers.{name}"),
                        entry.clone(),
                    );
                }
            }
        }
    }
    out
}

/// An entry adopt wrote: its command (or Zed's older `command.path`) is BIN and runs `wrap`.
fn wrapped_by_adopt(entry: &Value) -> bool {
    let (command, args) = match entry.get("command") {
        Some(Value::Object(nested)) => (nested.get("path"), nested.get("args")),
        command => (command, entry.get("args")),
    };
    command == Some(&Value::from(BIN)) && args.and_then(|args| args.get(0)) == Some(&"wrap".into())
}

/// Adopt, then undo, on a copy of one host's fixture: every server entry comes back with the same
/// keys and the same values (key order and layout aside). In between, every entry adopt
/// understands was wrapped (so the round trip is not empty), with no key added but `command`,
/// `args` and `env`, and a `type` only ever `"stdio"`: nothing a host would reject.
fn round_trip(dir: &str) {
    let fixture = FIXTURES
        .iter()
        .find(|f| f.dir == dir)
        .expect("a fixture of that host");
    let toml = fixture.file.ends_with(".toml");
    let (_dir, path) = place(fixture);
    let before = entries(&original(fixture), toml);

    assert_ok(&adopt(&path, &["--binary", BIN, "--write"]), dir);
    let adopted = entries(&read(&path), toml);
    assert_eq!(
        adopted.keys().collect::<Vec<_>>(),
        before.keys().collect::<Vec<_>>(),
        "{dir}: adopt keeps every server"
    );
    let mut wrapped = 0;
    for (name, entry) in &adopted {
        let was = &before[name];
        if !wrapped_by_adopt(entry) {
            assert_eq!(entry, was, "{dir}: {name} is left as it was");
            continue;
        }
        wrapped += 1;
        let (Value::Object(now), Value::Object(was)) = (entry, was) else {
            panic!("{dir}: {name} is not an object");
        };
        for key in now.keys() {
            assert!(
                was.contains_key(key) || ["command", "args", "env"].contains(&key.as_str()),
                "{dir}: adopt added `{key}` to {name}: {entry}"
            );
        }
        if let Some(kind) = now.get("type") {
            assert_eq!(kind, "stdio", "{dir}: {name} runs a command: {entry}");
        }
    }
    assert_eq!(wrapped, fixture.wrapped, "{dir}: the servers adopt wraps");

    assert_ok(&adopt(&path, &["--binary", BIN, "--undo", "--write"]), dir);
    let after = entries(&read(&path), toml);
    let differ: Vec<String> = before
        .iter()
        .filter(|(name, entry)| after.get(*name) != Some(*entry))
        .map(|(name, entry)| {
            let now = after
                .get(name)
                .map_or("(gone)".to_owned(), Value::to_string);
            format!("  {name}:\n    before: {entry}\n    undone: {now}")
        })
        .collect();
    assert!(
        differ.is_empty() && after.len() == before.len(),
        "{dir}: undo did not give back these entries:\n{}",
        differ.join("\n")
    );
}

#[test]
fn undo_gives_back_every_claude_desktop_entry() {
    round_trip("claude-desktop");
}

#[test]
fn undo_gives_back_every_cursor_entry() {
    round_trip("cursor");
}

#[test]
fn undo_gives_back_every_claude_code_project_entry() {
    round_trip("claude-code");
}

#[test]
fn undo_gives_back_every_claude_code_user_entry() {
    round_trip("claude-user");
}

#[test]
fn undo_gives_back_every_vscode_entry() {
    round_trip("vscode");
}

#[test]
fn undo_gives_back_every_codex_entry() {
    round_trip("codex");
}

#[test]
fn undo_gives_back_every_zed_entry() {
    round_trip("zed");
}

#[test]
fn undo_gives_back_every_gemini_entry() {
    round_trip("gemini");
}

/// Shapes the fixtures do not hold come back as written too: an empty `env` adopt writes header
/// values into, and headers and env written out of alphabetical order.
#[test]
fn undo_gives_back_an_empty_env_and_the_order_of_headers_and_env() {
    let dir = Scratch::new("adopt-env-order");
    let path = dir.join(".mcp.json");
    let text = r#"{
  "mcpServers": {
    "empty-env": {
      "type": "http",
      "url": "http://127.0.0.1:3001/mcp",
      "headers": {
        "X-Team": "core"
      },
      "env": {}
    },
    "ordered": {
      "url": "http://127.0.0.1:3002/mcp",
      "headers": {
        "X-Zone": "z",
        "Authorization": "Bearer a"
      },
      "env": {
        "ZED": "1",
        "ALPHA": "2"
      }
    }
  }
}
"#;
    std::fs::write(&path, text).expect("write");
    assert_ok(&adopt(&path, &["--binary", BIN, "--write"]), "adopt");
    let adopted = read(&path);
    assert_eq!(adopted.matches(BIN).count(), 2, "{adopted}");
    assert!(
        adopted.contains(r#""MCP_SUPERVISOR_UNDO": "env={}""#),
        "{adopted}"
    );
    assert_ok(
        &adopt(&path, &["--binary", BIN, "--undo", "--write"]),
        "undo",
    );
    assert_eq!(read(&path), text);
}

/// Adopt wraps only what undo can give back: an entry whose env already holds the variable undo
/// reads, or a URL server with `args` (which adopt would write over), is left as is, and adopt
/// says why; undo leaves alone an entry whose note it cannot read.
#[test]
fn what_undo_could_not_give_back_is_left_as_is() {
    let dir = Scratch::new("adopt-refused");
    let path = dir.join(".mcp.json");
    let text = r#"{
  "mcpServers": {
    "taken": {
      "command": "uvx",
      "env": {
        "MCP_SUPERVISOR_UNDO": "mine"
      }
    },
    "odd": {
      "url": "http://127.0.0.1:3001/mcp",
      "args": ["--verbose"]
    }
  }
}
"#;
    std::fs::write(&path, text).expect("write");
    let output = adopt(&path, &["--binary", BIN, "--write"]);
    assert_ok(&output, "adopt");
    let out = stdout(&output);
    assert!(
        out.contains("mcpServers.taken: left as is: its env holds MCP_SUPERVISOR_UNDO"),
        "{out}"
    );
    assert!(
        out.contains("mcpServers.odd: left as is: it has `args` beside its URL"),
        "{out}"
    );
    assert_eq!(read(&path), text);

    let wrapped = format!(
        r#"{{"mcpServers": {{"x": {{"command": "{BIN}", "args": ["wrap", "--", "uvx"], "env": {{"MCP_SUPERVISOR_UNDO": "args=[] cwd=/"}}}}}}}}"#
    );
    std::fs::write(&path, &wrapped).expect("write");
    let output = adopt(&path, &["--binary", BIN, "--undo", "--write"]);
    assert_ok(&output, "undo");
    assert!(
        stdout(&output).contains("left as is: its env.MCP_SUPERVISOR_UNDO holds `cwd=/`"),
        "{}",
        stdout(&output)
    );
    assert_eq!(read(&path), wrapped);
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
/// wrap stay; only the lines of command, args, url and http_headers change, the header's value
/// moves to env, and the `args = []` undo would not otherwise give back is noted in the env table,
/// which stays a table.
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

[mcp_servers.bare]
command = "/opt/test/bin/mcp-supervisor"
cwd = "/home/u/work"
args = ["wrap", "--", "/usr/local/bin/bare-mcp"]

[mcp_servers.no-arguments]
command = "/opt/test/bin/mcp-supervisor"
args = ["wrap", "--", "uvx"]

[mcp_servers.no-arguments.env]
LOG = "debug"
MCP_SUPERVISOR_UNDO = "args=[]"

[mcp_servers.remote]
command = "/opt/test/bin/mcp-supervisor"
args = ["wrap", "--url", "https://remote.example.invalid/mcp"]

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
    assert_eq!(text.matches("\"type\": \"stdio\"").count(), 4, "{text}");
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
    // Undo gives `httpUrl` back to the streamable-HTTP server written so, `url` to the one written
    // with `"type": "http"`, and `url` to the SSE ones.
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
