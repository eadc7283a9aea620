//! Sandboxed servers (SPEC §16), with real processes: the fault server's probe tools, run in a
//! sandbox and, as the control, the same server unsandboxed, under a proxy whose HOME is a fake
//! home holding a secret. The sandboxed one cannot read the home (directly or from a child),
//! writes only its `write` paths and its own TMPDIR, connects only to its granted port (none at
//! all with `"network": "none"`); its TMPDIR goes with its generation; and a sandbox the kernel
//! cannot give (Landlock reported missing by the probe's test switch) stops it from starting,
//! unless `bestEffort`.

mod support;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use support::{
    FakeHome, McpSession, Running, fault_bin, get_json, kill9, pid_of, server, state_is,
    status_until, write_config,
};

const LIMIT: Duration = Duration::from_secs(20);

/// The probe's test switch (`mcp_supervisor::sandbox::PROBE_ENV`).
const PROBE_ENV: &str = "MCP_SUPERVISOR_SANDBOX_PROBE";

/// The fault server with its probe tools, sandboxed as `sandbox` says (`None`: not at all).
fn probe_server(sandbox: Option<Value>) -> Value {
    let mut server = json!({ "command": fault_bin(), "args": ["--probes"] });
    if let Some(sandbox) = sandbox {
        server["sandbox"] = sandbox;
    }
    server
}

/// One MCP session with the proxy, calling the probe tools of a server by its name.
struct Session(McpSession);

impl Session {
    async fn open(proxy: &Running) -> Self {
        Self(McpSession::open(proxy, "sandbox", LIMIT).await)
    }

    async fn read(&mut self, server: &str, path: &Path) -> Result<String, String> {
        self.0
            .call(&format!("{server}__probe_read"), json!({ "path": path }))
            .await
    }

    async fn read_child(&mut self, server: &str, path: &Path) -> Result<String, String> {
        self.0
            .call(
                &format!("{server}__probe_read_child"),
                json!({ "path": path }),
            )
            .await
    }

    async fn write(&mut self, server: &str, path: &Path) -> Result<String, String> {
        self.0
            .call(&format!("{server}__probe_write"), json!({ "path": path }))
            .await
    }

    async fn connect(&mut self, server: &str, port: u16) -> Result<String, String> {
        self.0
            .call(&format!("{server}__probe_connect"), json!({ "port": port }))
            .await
    }

    async fn env(&mut self, server: &str, name: &str) -> Result<String, String> {
        self.0
            .call(&format!("{server}__probe_env"), json!({ "name": name }))
            .await
    }
}

fn all_ready(status: &Value, names: &[&str]) -> bool {
    names.iter().all(|n| state_is(status, n, "ready"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandboxed_server_reads_writes_and_connects_only_where_granted() {
    let place = FakeHome::new("sandbox-rules", "granted");
    let granted_port = TcpListener::bind("127.0.0.1:0").expect("bind");
    let other_port = TcpListener::bind("127.0.0.1:0").expect("bind");
    let granted = granted_port.local_addr().expect("addr").port();
    let other = other_port.local_addr().expect("addr").port();
    let proxy = place
        .serve(
            json!({
                "boxed": probe_server(Some(json!({
                    "write": [place.granted],
                    "network": { "connectPorts": [granted] }
                }))),
                "offline": probe_server(Some(json!({}))),
                "open": probe_server(None),
            }),
            &[],
        )
        .await;
    let status = status_until(&proxy, LIMIT, |s| {
        all_ready(s, &["boxed", "offline", "open"])
    })
    .await;
    let mut s = Session::open(&proxy).await;

    // The home: readable without the sandbox, not in it, directly or from a child process.
    assert_eq!(
        s.read("open", &place.secret).await.as_deref(),
        Ok("the secret")
    );
    assert_eq!(
        s.read_child("open", &place.secret).await.as_deref(),
        Ok("the secret")
    );
    let denied = s.read("boxed", &place.secret).await;
    assert!(
        denied
            .as_ref()
            .is_err_and(|e| e.contains("ermission denied")),
        "{denied:?}"
    );
    let denied = s.read_child("boxed", &place.secret).await;
    assert!(
        denied
            .as_ref()
            .is_err_and(|e| e.contains("ermission denied")),
        "{denied:?}"
    );
    // The system outside home directories stays readable.
    assert!(s.read("boxed", Path::new("/etc/hostname")).await.is_ok());

    // Writes: under HOME and in /tmp only without the sandbox; its TMPDIR and `write` in it.
    let in_home = place.home.join("written-by-probe");
    let in_tmp = std::env::temp_dir().join(format!("mcp-sandbox-probe-{}", std::process::id()));
    for path in [&in_home, &in_tmp] {
        let refused = s.write("boxed", path).await;
        assert!(refused.is_err(), "{}: {refused:?}", path.display());
        assert!(!path.exists());
        assert_eq!(s.write("open", path).await.as_deref(), Ok("ok"));
        let _ = std::fs::remove_file(path);
    }
    let tmpdir = s.env("boxed", "TMPDIR").await.expect("a TMPDIR of its own");
    assert_ne!(tmpdir, std::env::temp_dir().to_string_lossy());
    let own = Path::new(&tmpdir).join("own");
    assert_eq!(s.write("boxed", &own).await.as_deref(), Ok("ok"));
    assert_eq!(s.read("boxed", &own).await.as_deref(), Ok("probe"));
    assert_eq!(
        s.write("boxed", &place.granted.join("out"))
            .await
            .as_deref(),
        Ok("ok")
    );
    assert!(place.granted.join("out").exists());
    assert!(s.env("open", "TMPDIR").await != Ok(tmpdir.clone()));

    // The network: the granted port only; nothing at all with "none".
    assert_eq!(s.connect("boxed", granted).await.as_deref(), Ok("ok"));
    assert!(s.connect("boxed", other).await.is_err());
    assert_eq!(s.connect("open", other).await.as_deref(), Ok("ok"));
    for port in [granted, other] {
        assert!(s.connect("offline", port).await.is_err(), "port {port}");
    }

    // Status shows each sandbox and what the kernel gives it.
    let boxed = &server(&status, "boxed")["sandbox"];
    assert_eq!(boxed["network"], json!({ "connectPorts": [granted] }));
    assert_eq!(boxed["applied"]["network"], "tcpPorts");
    assert_eq!(boxed["applied"]["files"], "landlock");
    assert_eq!(boxed["applied"]["lacking"], json!([]));
    assert_eq!(
        server(&status, "offline")["sandbox"]["applied"]["network"],
        "isolated"
    );
    assert_eq!(server(&status, "open")["sandbox"], Value::Null);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_temp_dir_goes_with_its_generation_and_a_recovered_server_is_sandboxed_the_same() {
    let place = FakeHome::new("sandbox-generation", "granted");
    let proxy = place
        .serve(json!({ "boxed": probe_server(Some(json!({}))) }), &[])
        .await;
    let ready = status_until(&proxy, LIMIT, |s| state_is(s, "boxed", "ready")).await;
    let first = pid_of(&ready, "boxed").expect("a pid");
    let mut s = Session::open(&proxy).await;
    let old = PathBuf::from(s.env("boxed", "TMPDIR").await.expect("TMPDIR"));
    assert!(old.is_dir());

    kill9(first);
    let again = status_until(&proxy, LIMIT, |s| {
        state_is(s, "boxed", "ready") && pid_of(s, "boxed").is_some_and(|p| p != first)
    })
    .await;
    assert!(pid_of(&again, "boxed").is_some());
    for _ in 0..100 {
        if !old.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!old.exists(), "the lost generation's TMPDIR is removed");
    let new = PathBuf::from(s.env("boxed", "TMPDIR").await.expect("TMPDIR"));
    assert_ne!(new, old);
    assert!(new.is_dir());
    // The same answers on the new generation.
    assert!(s.read("boxed", &place.secret).await.is_err());
    assert!(s.write("boxed", &place.home.join("x")).await.is_err());
    drop(s);
    drop(proxy);
    for _ in 0..100 {
        if !new.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!new.exists(), "a stopped proxy leaves no TMPDIR");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_the_kernel_cannot_give_fails_closed_unless_best_effort() {
    let place = FakeHome::new("sandbox-fail-closed", "granted");
    let proxy = place
        .serve(
            json!({
                "strict": probe_server(Some(json!({ "network": "all" }))),
                "lenient": probe_server(Some(json!({ "network": "all", "bestEffort": true }))),
            }),
            &[(PROBE_ENV, "none")],
        )
        .await;
    let status = status_until(&proxy, LIMIT, |s| {
        state_is(s, "strict", "gave_up") && state_is(s, "lenient", "ready")
    })
    .await;
    let strict = server(&status, "strict");
    let error = strict["lastError"].as_str().unwrap_or_default();
    assert!(error.starts_with("sandbox: "), "{error}");
    assert!(error.contains("no Landlock"), "{error}");
    assert_eq!(strict["pid"], Value::Null, "it never started");
    assert!(
        strict["sandbox"]["applied"]["lacking"][0]
            .as_str()
            .is_some_and(|l| l.contains("no Landlock")),
        "{strict}"
    );
    let lenient = server(&status, "lenient");
    assert_eq!(lenient["sandbox"]["applied"]["files"], "none");
    // The dashboard's state shows it too.
    let (code, state) = get_json(&proxy.url("/dashboard/state")).await;
    assert_eq!(code, 200, "{state}");
    let shown = state["proxies"][0]["servers"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["name"] == "strict"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(shown["sandbox"], strict["sandbox"], "{state}");
    // Not a crash loop: it stays given up, at its first generation.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let later = status_until(&proxy, LIMIT, |s| state_is(s, "strict", "gave_up")).await;
    assert_eq!(server(&later, "strict")["generation"], strict["generation"]);
}

#[test]
fn check_warns_of_a_sandbox_this_machine_cannot_give() {
    let place = FakeHome::new("sandbox-check", "granted");
    let path = place.dir.join("servers.json");
    write_config(
        &path,
        json!({
            "strict": probe_server(Some(json!({}))),
            "lenient": probe_server(Some(json!({ "bestEffort": true }))),
            "open": probe_server(None),
        }),
    );
    let check = |envs: &[(&str, &str)]| {
        let output = std::process::Command::new(support::supervisor_bin())
            .args(["check", "--config"])
            .arg(&path)
            .envs(envs.iter().copied())
            .output()
            .expect("run check");
        assert!(output.status.success(), "{output:?}");
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let out = check(&[(PROBE_ENV, "none")]);
    let warnings: Vec<&str> = out.lines().filter(|l| l.starts_with("warning:")).collect();
    assert_eq!(warnings.len(), 2, "{out}");
    let has = |prefix: &str| warnings.iter().any(|w| w.starts_with(prefix));
    assert!(
        has(
            "warning: mcpServers.strict.sandbox: this machine cannot give it, so the server will not start: no Landlock"
        ),
        "{out}"
    );
    assert!(
        has("warning: mcpServers.lenient.sandbox: bestEffort"),
        "{out}"
    );
    let out = check(&[]);
    assert!(
        !out.contains("warning:"),
        "this machine gives the whole sandbox: {out}"
    );
}
