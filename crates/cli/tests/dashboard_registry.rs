//! The per-user registry and `mcp-supervisor dashboard` (SPEC §15, issue 32), end to end with
//! real processes: `wrap`s started as a host starts them (piped stdio, an `initialize`) and a
//! `serve --admin`, each with `XDG_RUNTIME_DIR` set to a folder of the test; the dashboard's
//! URL, token checks and merged state; removal at the end of stdin; a SIGKILLed proxy's entry
//! skipped and cleaned. Every wait is a poll with a deadline. Needs the binaries built
//! (`cargo build --workspace --bins`).

mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};

use support::{fault_bin, free_port, kill9, supervisor_bin, temp_dir, write_config};

/// The bound of every wait.
const LIMIT: Duration = Duration::from_secs(20);

/// A test's folders: the runtime dir its proxies see, and a state dir for their catalogs.
struct Folders {
    root: PathBuf,
    runtime: PathBuf,
    state: PathBuf,
}

impl Folders {
    fn new(tag: &str) -> Self {
        let root = temp_dir(tag);
        let runtime = root.join("run");
        let state = root.join("state");
        std::fs::create_dir_all(&runtime).expect("mkdir run");
        std::fs::set_permissions(&runtime, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        std::fs::create_dir_all(&state).expect("mkdir state");
        Self {
            root,
            runtime,
            state,
        }
    }

    /// The registry folder inside the runtime dir.
    fn registry(&self) -> PathBuf {
        self.runtime.join("mcp-supervisor")
    }
}

impl Drop for Folders {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// A proxy (or the dashboard) started by the test; SIGKILLed by pid on drop if still running.
struct Proc {
    child: Child,
    stdin: Option<ChildStdin>,
}

impl Proc {
    fn spawn(args: &[&str], runtime: &Path, stdout: Stdio) -> Self {
        let mut child = Command::new(supervisor_bin())
            .args(args)
            .env("XDG_RUNTIME_DIR", runtime)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(stdout)
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn mcp-supervisor");
        let stdin = child.stdin.take();
        Self { child, stdin }
    }

    fn pid(&self) -> u32 {
        self.child.id().expect("running")
    }

    /// Wait (bounded) for the exit.
    async fn exited(&mut self) {
        tokio::time::timeout(LIMIT, self.child.wait())
            .await
            .expect("exited in time")
            .expect("wait");
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait()
            && let Some(pid) = self.child.id()
        {
            kill9(pid);
        }
    }
}

/// `wrap --name NAME -- fault-server` with piped stdio, initialized as a host does.
async fn wrap_as_a_host(folders: &Folders, name: &str) -> Proc {
    let state = folders.state.to_str().expect("utf-8");
    let fault = fault_bin();
    let fault = fault.to_str().expect("utf-8");
    let args = ["wrap", "--name", name, "--state-dir", state, "--", fault];
    let mut proc = Proc::spawn(&args, &folders.runtime, Stdio::piped());
    let stdout = proc.child.stdout.take().expect("piped");
    let stdin = proc.stdin.as_mut().expect("piped");
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "host", "version": "1"}}});
    stdin
        .write_all(format!("{initialize}\n").as_bytes())
        .await
        .expect("write");
    let mut lines = BufReader::new(stdout).lines();
    let answer = tokio::time::timeout(LIMIT, lines.next_line())
        .await
        .expect("answered in time")
        .expect("read")
        .expect("a line");
    assert!(
        answer.contains("\"result\""),
        "initialize answered: {answer}"
    );
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    stdin
        .write_all(format!("{initialized}\n").as_bytes())
        .await
        .expect("write");
    // Keep reading (and dropping) what it says, so that it never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    proc
}

/// Poll `probe` until it gives `Some` (bounded).
async fn until<T>(what: &str, mut probe: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        if let Some(found) = probe().await {
            return found;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {LIMIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The entry `<pid>.json` in `registry`, once it is there.
async fn entry_of(registry: &Path, pid: u32) -> Value {
    let path = registry.join(format!("{pid}.json"));
    until(&format!("{} appears", path.display()), async || {
        let text = std::fs::read_to_string(&path).ok()?;
        serde_json::from_str(&text).ok()
    })
    .await
}

/// A running dashboard: its base URL and token.
struct Dashboard {
    _proc: Proc,
    base: String,
    token: String,
}

impl Dashboard {
    async fn start(folders: &Folders, extra: &[&str]) -> Self {
        let mut args = vec!["dashboard"];
        args.extend(extra);
        let mut proc = Proc::spawn(&args, &folders.runtime, Stdio::piped());
        let stdout = proc.child.stdout.take().expect("piped");
        let line = tokio::time::timeout(LIMIT, BufReader::new(stdout).lines().next_line())
            .await
            .expect("printed in time")
            .expect("read")
            .expect("a line");
        let (base, token) = line
            .strip_prefix("http://127.0.0.1:")
            .and_then(|_| line.split_once("/?token="))
            .map(|(base, token)| (base.to_owned(), token.to_owned()))
            .unwrap_or_else(|| panic!("the URL line: {line}"));
        assert!(token.len() >= 32, "a long random token: {token}");
        Self {
            _proc: proc,
            base,
            token,
        }
    }

    async fn get(&self, path: &str, token: Option<&str>) -> reqwest::Response {
        let mut request = reqwest::Client::new().get(format!("{}{path}", self.base));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        request.send().await.expect("GET")
    }

    async fn state(&self) -> Value {
        let response = self.get("/dashboard/state", Some(&self.token)).await;
        assert_eq!(response.status(), 200);
        response.json().await.expect("JSON")
    }

    /// `/dashboard/state` once `pred` holds on it.
    async fn state_until(&self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let mut last = Value::Null;
        let deadline = tokio::time::Instant::now() + LIMIT;
        while tokio::time::Instant::now() < deadline {
            let state = self.state().await;
            if pred(&state) {
                return state;
            }
            last = state;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("{what}: not within {LIMIT:?}; last state: {last}");
    }
}

/// A proxy of a state: its pid, kind, name, and each server's name and state.
type Seen = (u64, String, String, Vec<(String, String)>);

/// The proxies of a state.
fn proxies(state: &Value) -> Vec<Seen> {
    state["proxies"]
        .as_array()
        .map(|list| {
            list.iter()
                .map(|p| {
                    let servers = p["servers"]
                        .as_array()
                        .map(|s| {
                            s.iter()
                                .map(|s| {
                                    let text = |v: &Value| v.as_str().unwrap_or("").to_owned();
                                    (text(&s["name"]), text(&s["state"]))
                                })
                                .collect()
                        })
                        .unwrap_or_default();
                    let text = |v: &Value| v.as_str().unwrap_or("").to_owned();
                    (
                        p["pid"].as_u64().unwrap_or(0),
                        text(&p["kind"]),
                        text(&p["name"]),
                        servers,
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .expect("metadata")
        .permissions()
        .mode()
        & 0o777
}

#[tokio::test]
async fn the_dashboard_of_two_wraps_started_as_a_host_starts_them_shows_both_behind_its_token() {
    let folders = Folders::new("dash-two");
    let first = wrap_as_a_host(&folders, "a").await;
    let second = wrap_as_a_host(&folders, "a").await;
    let registry = folders.registry();
    for proc in [&first, &second] {
        let pid = proc.pid();
        let entry = entry_of(&registry, pid).await;
        let socket = registry.join(format!("{pid}.sock"));
        assert_eq!(entry["pid"], pid);
        assert_eq!(entry["kind"], "wrap");
        assert_eq!(entry["name"], "a");
        assert_eq!(entry["socket"], socket.to_str().expect("utf-8"));
        assert!(
            entry["command"]
                .as_str()
                .is_some_and(|c| c.contains("mcp-fault-server")),
            "the server's command line: {entry}"
        );
        assert!(entry["startedAt"].as_u64().is_some_and(|t| t > 0));
        assert!(entry["version"].is_string());
        assert_eq!(mode(&socket), 0o600, "the socket is 0600");
        assert_eq!(mode(&registry.join(format!("{pid}.json"))), 0o600);
    }
    assert_eq!(mode(&registry), 0o700, "the folder is 0700");

    // Found through XDG_RUNTIME_DIR, as a person's shell would.
    let dashboard = Dashboard::start(&folders, &[]).await;
    let pids = {
        let mut pids = [u64::from(first.pid()), u64::from(second.pid())];
        pids.sort();
        pids
    };
    let state = dashboard
        .state_until("both wraps, their server ready", |state| {
            let list = proxies(state);
            list.len() == 2
                && list.iter().all(|(_, kind, name, servers)| {
                    kind == "wrap" && name == "a" && servers == &[("a".into(), "ready".into())]
                })
        })
        .await;
    let listed: Vec<u64> = proxies(&state).iter().map(|p| p.0).collect();
    assert_eq!(listed, pids, "sorted by name, then pid");
    assert!(state["now"].as_u64().is_some());

    // Without the token: the page is refused, saying what to do; so is a wrong one.
    let page = dashboard.get("/", None).await;
    assert_eq!(page.status(), 403);
    let text = page.text().await.expect("text");
    assert!(text.contains("open the URL"), "{text}");
    let wrong = dashboard.get("/?token=nottheone", None).await;
    assert_eq!(wrong.status(), 403);
    let right = dashboard
        .get(&format!("/?token={}", dashboard.token), None)
        .await;
    assert_eq!(right.status(), 200);
    assert!(right.headers().contains_key("content-security-policy"));
    for path in ["/dashboard/state", "/dashboard/events"] {
        assert_eq!(dashboard.get(path, None).await.status(), 401, "{path}");
        assert_eq!(
            dashboard.get(path, Some("nottheone")).await.status(),
            401,
            "{path}"
        );
    }
    // Another site's page in the same browser is refused (DNS rebinding).
    let rebound = reqwest::Client::new()
        .get(format!("{}/dashboard/state", dashboard.base))
        .bearer_auth(&dashboard.token)
        .header("Host", "evil.example:80")
        .send()
        .await
        .expect("GET");
    assert_eq!(rebound.status(), 403);

    // The event stream sends the merged state at once.
    let mut events = dashboard
        .get("/dashboard/events", Some(&dashboard.token))
        .await;
    assert_eq!(events.status(), 200);
    let first_event = next_state(&mut events).await;
    assert_eq!(proxies(&first_event).len(), 2, "{first_event}");
}

/// The next `data:` of an event stream, as JSON (bounded).
async fn next_state(response: &mut reqwest::Response) -> Value {
    let mut text = String::new();
    tokio::time::timeout(LIMIT, async {
        loop {
            if let Some(end) = text.find("\n\n") {
                let event: String = text.drain(..end + 2).collect();
                if let Some(data) = event.lines().find_map(|l| l.strip_prefix("data:")) {
                    return serde_json::from_str(data.trim()).expect("a JSON state");
                }
                continue;
            }
            let chunk = response
                .chunk()
                .await
                .expect("read")
                .expect("the stream is open");
            text.push_str(&String::from_utf8_lossy(&chunk));
        }
    })
    .await
    .expect("an event in time")
}

#[tokio::test]
async fn the_end_of_a_wraps_stdin_removes_its_entry_and_socket_and_the_stream_says_it_went() {
    let folders = Folders::new("dash-stdin");
    let staying = wrap_as_a_host(&folders, "staying").await;
    let mut leaving = wrap_as_a_host(&folders, "leaving").await;
    let registry = folders.registry();
    let pid = leaving.pid();
    entry_of(&registry, pid).await;
    entry_of(&registry, staying.pid()).await;
    let dashboard = Dashboard::start(&folders, &["--dir", registry.to_str().expect("utf-8")]).await;
    let mut events = dashboard
        .get("/dashboard/events", Some(&dashboard.token))
        .await;
    let mut state = next_state(&mut events).await;
    while proxies(&state).len() != 2 {
        state = next_state(&mut events).await;
    }

    drop(leaving.stdin.take());
    leaving.exited().await;
    assert!(
        !registry.join(format!("{pid}.json")).exists(),
        "the entry went"
    );
    assert!(
        !registry.join(format!("{pid}.sock")).exists(),
        "the socket went"
    );
    // Pushed without a reload: a state without it.
    while proxies(&state).iter().any(|p| p.0 == u64::from(pid)) {
        state = next_state(&mut events).await;
    }
    let names: Vec<String> = proxies(&state).into_iter().map(|p| p.2).collect();
    assert_eq!(names, ["staying"]);
}

#[tokio::test]
async fn a_sigkilled_wrap_leaves_its_entry_which_the_next_dashboard_state_skips_and_removes() {
    let folders = Folders::new("dash-kill");
    let mut killed = wrap_as_a_host(&folders, "killed").await;
    let alive = wrap_as_a_host(&folders, "alive").await;
    let registry = folders.registry();
    let pid = killed.pid();
    entry_of(&registry, pid).await;
    entry_of(&registry, alive.pid()).await;
    kill9(pid);
    killed.exited().await;
    let (entry, socket) = (
        registry.join(format!("{pid}.json")),
        registry.join(format!("{pid}.sock")),
    );
    assert!(entry.exists() && socket.exists(), "SIGKILL leaves both");

    let dashboard = Dashboard::start(&folders, &["--dir", registry.to_str().expect("utf-8")]).await;
    let state = dashboard.state().await;
    let listed: Vec<(u64, String)> = proxies(&state).into_iter().map(|p| (p.0, p.2)).collect();
    assert_eq!(
        listed,
        [(u64::from(alive.pid()), "alive".to_owned())],
        "the killed one is skipped"
    );
    assert!(
        !entry.exists() && !socket.exists(),
        "and its files are removed"
    );
}

#[tokio::test]
async fn a_frozen_proxy_is_shown_unreachable_within_a_second_and_holds_up_no_other() {
    let folders = Folders::new("dash-frozen");
    let frozen = wrap_as_a_host(&folders, "frozen").await;
    let fine = wrap_as_a_host(&folders, "fine").await;
    let registry = folders.registry();
    entry_of(&registry, frozen.pid()).await;
    entry_of(&registry, fine.pid()).await;
    let dashboard = Dashboard::start(&folders, &[]).await;
    dashboard
        .state_until("both ready", |state| {
            proxies(state)
                .iter()
                .filter(|p| p.3.iter().any(|(_, s)| s == "ready"))
                .count()
                == 2
        })
        .await;
    signal(frozen.pid(), "STOP");
    let started = tokio::time::Instant::now();
    let state = dashboard.state().await;
    let asked_in = started.elapsed();
    signal(frozen.pid(), "CONT");
    assert!(asked_in < Duration::from_secs(3), "took {asked_in:?}");
    let list = state["proxies"].as_array().cloned().unwrap_or_default();
    let of = |name: &str| list.iter().find(|p| p["name"] == name).cloned();
    let frozen_view = of("frozen").unwrap_or_else(|| panic!("listed: {state}"));
    assert_eq!(frozen_view["unreachable"], true, "{frozen_view}");
    assert_eq!(frozen_view["pid"], frozen.pid());
    assert_eq!(frozen_view["kind"], "wrap");
    assert_eq!(frozen_view["servers"], json!([]));
    let fine_view = of("fine").unwrap_or_else(|| panic!("listed: {state}"));
    assert_eq!(fine_view["servers"][0]["state"], "ready", "{fine_view}");
    assert!(fine_view.get("unreachable").is_none());
}

fn signal(pid: u32, name: &str) {
    let status = std::process::Command::new("kill")
        .args([&format!("-{name}"), &pid.to_string()])
        .status();
    assert!(matches!(status, Ok(s) if s.success()), "kill -{name} {pid}");
}

#[tokio::test]
async fn a_serve_registers_too_named_by_its_config_file_and_goes_on_sigint() {
    let folders = Folders::new("dash-serve");
    let config = folders.root.join("servers.json");
    write_config(
        &config,
        json!({ "fault": { "command": fault_bin().to_str().expect("utf-8") } }),
    );
    let port = free_port();
    let admin = format!("127.0.0.1:{port}");
    let args = [
        "serve",
        "--config",
        config.to_str().expect("utf-8"),
        "--admin",
        &admin,
        "--state-dir",
        folders.state.to_str().expect("utf-8"),
    ];
    let mut serve = Proc::spawn(&args, &folders.runtime, Stdio::null());
    let registry = folders.registry();
    let pid = serve.pid();
    let entry = entry_of(&registry, pid).await;
    assert_eq!(entry["kind"], "serve");
    assert_eq!(entry["name"], "servers.json");
    assert_eq!(entry["config"], config.to_str().expect("utf-8"));

    let dashboard = Dashboard::start(&folders, &[]).await;
    dashboard
        .state_until("the serve and its server ready", |state| {
            proxies(state)
                == [(
                    u64::from(pid),
                    "serve".to_owned(),
                    "servers.json".to_owned(),
                    vec![("fault".to_owned(), "ready".to_owned())],
                )]
        })
        .await;

    signal(pid, "INT");
    serve.exited().await;
    assert!(!registry.join(format!("{pid}.json")).exists());
    assert!(!registry.join(format!("{pid}.sock")).exists());
    let state = dashboard.state().await;
    assert_eq!(proxies(&state), [], "{state}");
}

#[tokio::test]
async fn a_registry_folder_others_may_use_is_refused_with_a_warning_and_the_proxy_serves_on() {
    let folders = Folders::new("dash-unsafe");
    let registry = folders.registry();
    std::fs::create_dir_all(&registry).expect("mkdir");
    std::fs::set_permissions(&registry, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let mut proc = wrap_as_a_host(&folders, "a").await;
    let pid = proc.pid();
    // It answered its host's initialize: it serves. It wrote nothing in the folder.
    assert!(!registry.join(format!("{pid}.json")).exists());
    assert!(!registry.join(format!("{pid}.sock")).exists());
    drop(proc.stdin.take());
    proc.exited().await;
    let mut log = String::new();
    if let Some(mut stderr) = proc.child.stderr.take() {
        use tokio::io::AsyncReadExt;
        let _ = stderr.read_to_string(&mut log).await;
    }
    assert!(
        log.contains("not registered")
            && log.contains(registry.to_str().expect("utf-8"))
            && log.contains("0755"),
        "one warning naming the folder and why: {log}"
    );

    // The dashboard will not read it either.
    let mut dashboard = Proc::spawn(&["dashboard"], &folders.runtime, Stdio::piped());
    dashboard.exited().await;
    let status = dashboard.child.wait().await.expect("status");
    assert_eq!(status.code(), Some(1));
}

#[tokio::test]
async fn the_dashboard_refuses_an_address_beyond_loopback() {
    let folders = Folders::new("dash-listen");
    let mut proc = Proc::spawn(
        &["dashboard", "--listen", "0.0.0.0:0"],
        &folders.runtime,
        Stdio::piped(),
    );
    proc.exited().await;
    let status = proc.child.wait().await.expect("status");
    assert_eq!(status.code(), Some(2), "a usage error");
    let mut log = String::new();
    if let Some(mut stderr) = proc.child.stderr.take() {
        use tokio::io::AsyncReadExt;
        let _ = stderr.read_to_string(&mut log).await;
    }
    assert!(log.contains("not a loopback address"), "{log}");
}
