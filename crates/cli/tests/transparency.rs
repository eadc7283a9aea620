//! SPEC §10, by raw JSON-RPC transcripts over stdio: what a client sees through the proxy is
//! what the server itself shows. A client that declares elicitation, sampling, roots and tasks
//! talks to server-everything directly and through `wrap`; the answers must be equal as JSON.
//! Then what only a transparent proxy can carry: a task-augmented call and the task methods
//! (through `wrap` and `serve`), the servers' requests to the client (roots, elicitation,
//! sampling) and their answers back, and the same client identity after a crash and respawn.

mod support;

use std::collections::VecDeque;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use support::{fault_bin, supervisor_bin, temp_dir, write_config};

/// Every wait in these tests is bounded by this.
const LIMIT: Duration = Duration::from_secs(30);

/// How many of a child's last stderr lines are kept, to be shown when a test fails.
const LOG_LINES: usize = 300;

/// How the test client answers a server's request.
type Answerer = fn(&str, &Value) -> Value;

/// A raw JSON-RPC client over a child's stdio. It answers the server's requests with
/// `answer`, and records every message it saw.
struct Raw {
    child: Child,
    /// Taken by `close`.
    stdin: Option<ChildStdin>,
    /// The last lines the child wrote to stderr: shown if the test fails.
    log: Arc<Mutex<VecDeque<String>>>,
    lines: tokio::io::Lines<BufReader<ChildStdout>>,
    next: u64,
    answer: Answerer,
    /// The server's requests seen, as (method, params).
    asked: Vec<(String, Value)>,
    notifications: VecDeque<Value>,
}

/// A client that declares every capability, and answers like a user who accepts.
fn full_capabilities() -> Value {
    json!({
        "roots": { "listChanged": true },
        "sampling": {},
        "elicitation": { "form": {}, "url": {} },
        "tasks": { "list": {}, "cancel": {} },
    })
}

fn accept_everything(method: &str, _params: &Value) -> Value {
    match method {
        "roots/list" => json!({ "roots": [{ "uri": "file:///transcript/root", "name": "root" }] }),
        "sampling/createMessage" => json!({
            "role": "assistant",
            "content": { "type": "text", "text": "sampled by the test client" },
            "model": "test-model",
            "stopReason": "endTurn",
        }),
        "elicitation/create" => json!({ "action": "accept", "content": {
            "name": "Ada", "color": "blue", "interpretation": "the test's", "check": true,
            "integer": 1, "number": 1.5, "email": "a@b.c", "untitledSingleSelectEnum": "option1",
            "titledSingleSelectEnum": "value1", "legacyTitledEnum": "opt1",
            "untitledMultipleSelectEnum": ["option1"], "titledMultipleSelectEnum": ["value1"],
        } }),
        "ping" => json!({}),
        _ => json!({}),
    }
}

impl Raw {
    fn spawn(program: &Path, args: &[&str], answer: Answerer) -> Self {
        let mut child = Command::new(program)
            .args(args)
            .env("MCP_SUPERVISOR_LOG", "debug")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", program.display()));
        let stdin = child.stdin.take().expect("stdin");
        let stdout = child.stdout.take().expect("stdout");
        let stderr = child.stderr.take().expect("stderr");
        let log = Arc::new(Mutex::new(VecDeque::new()));
        let kept = log.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let mut kept = kept.lock().unwrap_or_else(|e| e.into_inner());
                if kept.len() == LOG_LINES {
                    kept.pop_front();
                }
                kept.push_back(line);
            }
        });
        Self {
            child,
            stdin: Some(stdin),
            log,
            lines: BufReader::new(stdout).lines(),
            next: 1,
            answer,
            asked: Vec::new(),
            notifications: VecDeque::new(),
        }
    }

    async fn write(&mut self, message: &Value) {
        let mut line = message.to_string();
        line.push('\n');
        let stdin = self.stdin.as_mut().expect("stdin is open until close");
        stdin.write_all(line.as_bytes()).await.expect("write");
        stdin.flush().await.expect("flush");
    }

    async fn notify(&mut self, method: &str, params: Value) {
        self.write(&json!({ "jsonrpc": "2.0", "method": method, "params": params }))
            .await;
    }

    /// Send a request and wait for its answer (the whole message), answering the server's
    /// requests meanwhile.
    async fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next;
        self.next += 1;
        self.write(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }))
            .await;
        tokio::time::timeout(LIMIT, self.answer_to(id))
            .await
            .unwrap_or_else(|_| panic!("no answer to {method} within {LIMIT:?}"))
    }

    async fn answer_to(&mut self, id: u64) -> Value {
        loop {
            let line = self
                .lines
                .next_line()
                .await
                .expect("read")
                .expect("the other side closed its stdout");
            let message: Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("not JSON on stdout ({e}): {line}"));
            match (message.get("method"), message.get("id")) {
                (Some(method), Some(server_id)) => {
                    let method = method.as_str().unwrap_or_default().to_string();
                    let params = message.get("params").cloned().unwrap_or(Value::Null);
                    let result = (self.answer)(&method, &params);
                    self.asked.push((method, params));
                    let reply = json!({ "jsonrpc": "2.0", "id": server_id, "result": result });
                    self.write(&reply).await;
                }
                (Some(_), None) => self.notifications.push_back(message),
                (None, Some(got)) if *got == json!(id) => return message,
                _ => {} // an answer to an earlier request given up on
            }
        }
    }

    /// `initialize` with `capabilities`, then `notifications/initialized`.
    async fn handshake(&mut self, capabilities: Value, client: &str) -> Value {
        let init = self
            .request(
                "initialize",
                json!({
                    "protocolVersion": "2025-11-25",
                    "capabilities": capabilities,
                    "clientInfo": { "name": client, "version": "7.7.7" },
                }),
            )
            .await;
        self.notify("notifications/initialized", json!({})).await;
        init
    }

    /// Wait until `tools/list` shows `name` (server-everything registers some tools only
    /// after its handshake, and says so with `tools/list_changed`).
    async fn wait_for_tool(&mut self, name: &str) {
        for _ in 0..100 {
            let list = self.request("tools/list", json!({})).await;
            if list["result"]["tools"]
                .as_array()
                .is_some_and(|t| t.iter().any(|t| t["name"] == name))
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("{name} never appeared in tools/list");
    }

    fn asked(&self, method: &str) -> usize {
        self.asked.iter().filter(|(m, _)| m == method).count()
    }

    async fn close(mut self) {
        drop(self.stdin.take());
        if tokio::time::timeout(Duration::from_secs(10), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}

impl Drop for Raw {
    /// A failing test shows what the child logged last.
    fn drop(&mut self) {
        if std::thread::panicking() {
            let log = self.log.lock().unwrap_or_else(|e| e.into_inner());
            eprintln!("--- the child's last {} stderr lines ---", log.len());
            for line in log.iter() {
                eprintln!("{line}");
            }
        }
    }
}

/// `serve` over stdio in front of server-everything, its client introduced as `client` with
/// `capabilities` and waiting until `tool` is listed; and the folder of its config.
async fn serve_everything(
    tag: &str,
    client: &str,
    capabilities: Value,
    tool: &str,
) -> (Raw, std::path::PathBuf) {
    let dir = temp_dir(tag);
    let config = dir.join("servers.json");
    write_config(
        &config,
        json!({ "everything": { "command": everything().display().to_string(), "args": ["stdio"] } }),
    );
    let mut served = Raw::spawn(
        &supervisor_bin(),
        // No saved catalog: it would list server-everything's tools before the server has
        // registered those it adds after its handshake; these tests are about the live path.
        &[
            "serve",
            "--no-catalog",
            "--config",
            config.to_str().unwrap_or_default(),
        ],
        accept_everything,
    );
    served.handshake(capabilities, client).await;
    served.wait_for_tool(tool).await;
    (served, dir)
}

/// `wrap` over stdio in front of server-everything, its client introduced as `client` with
/// every capability and waiting until `tool` is listed.
async fn wrap_everything(client: &str, tool: &str) -> Raw {
    let args = wrapped_everything();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut wrapped = Raw::spawn(&supervisor_bin(), &args, accept_everything);
    wrapped.handshake(full_capabilities(), client).await;
    wrapped.wait_for_tool(tool).await;
    wrapped
}

fn everything() -> std::path::PathBuf {
    mcp_supervisor_testkit::node_tool("mcp-server-everything")
}

/// Through `wrap`: the command line of a client that starts `wrap -- server-everything stdio`.
fn wrapped_everything() -> Vec<String> {
    vec![
        "wrap".into(),
        "--".into(),
        everything().display().to_string(),
        "stdio".into(),
    ]
}

/// The transcript a client records: the answers to the handshake and to every list, and the
/// error code of a method nobody knows.
async fn transcript(client: &mut Raw) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    let init = client.handshake(full_capabilities(), "transcript").await;
    out.push(("initialize".to_string(), init["result"].clone()));
    // server-everything registers some tools after `initialized`, by the client's capabilities:
    // wait until the last of them is listed, so both transcripts see the same moment.
    client.wait_for_tool("simulate-research-query").await;
    for method in [
        "tools/list",
        "prompts/list",
        "resources/list",
        "resources/templates/list",
    ] {
        let answer = client.request(method, json!({})).await;
        out.push((method.to_string(), answer["result"].clone()));
    }
    let unknown = client.request("vendor/no-such-method", json!({})).await;
    out.push((
        "unknown method".to_string(),
        unknown["error"]["code"].clone(),
    ));
    out
}

#[tokio::test]
async fn wrap_over_stdio_shows_exactly_what_server_everything_shows() {
    let mut direct = Raw::spawn(&everything(), &["stdio"], accept_everything);
    let expected = transcript(&mut direct).await;
    let direct_roots = direct.asked("roots/list");
    direct.close().await;

    let args = wrapped_everything();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut wrapped = Raw::spawn(&supervisor_bin(), &args, accept_everything);
    let seen = transcript(&mut wrapped).await;
    let wrapped_roots = wrapped.asked("roots/list");
    wrapped.close().await;

    for ((what, want), (_, got)) in expected.iter().zip(seen.iter()) {
        assert!(
            !want.is_null(),
            "{what}: server-everything answered nothing"
        );
        assert_eq!(got, want, "{what} differs through wrap");
    }
    let tools = expected[1].1["tools"].as_array().map_or(0, Vec::len);
    let with_execution = expected[1].1["tools"].as_array().map_or(0, |t| {
        t.iter().filter(|t| t.get("execution").is_some()).count()
    });
    assert!(tools > 10 && with_execution > 0, "the list is the full one");
    assert!(
        expected[0].1["capabilities"].get("tasks").is_some(),
        "server-everything declares tasks: {}",
        expected[0].1
    );
    // server-everything asks a client that declares roots for them: through wrap too.
    assert_eq!(
        (direct_roots > 0),
        (wrapped_roots > 0),
        "roots/list reached the client"
    );
}

/// The servers' requests caused by a call reach the client, and its answers the server.
async fn servers_requests_reach_the_client(client: &mut Raw, prefix: &str) {
    let roots = client
        .request(
            "tools/call",
            json!({ "name": format!("{prefix}get-roots-list"), "arguments": {} }),
        )
        .await;
    assert!(
        roots.to_string().contains("file:///transcript/root"),
        "the client's roots came back: {roots}"
    );
    let sampled = client
        .request(
            "tools/call",
            json!({ "name": format!("{prefix}trigger-sampling-request"),
                    "arguments": { "prompt": "hello", "maxTokens": 5 } }),
        )
        .await;
    assert!(
        sampled.to_string().contains("sampled by the test client"),
        "the client's sample came back: {sampled}"
    );
    let elicited = client
        .request(
            "tools/call",
            json!({ "name": format!("{prefix}trigger-elicitation-request"), "arguments": {} }),
        )
        .await;
    assert!(
        elicited.to_string().contains("Ada"),
        "the client's answer came back: {elicited}"
    );
    assert!(
        client.asked("sampling/createMessage") >= 1 && client.asked("elicitation/create") >= 1,
        "the requests reached the client: {:?}",
        client.asked
    );
}

#[tokio::test]
async fn roots_sampling_and_elicitation_pass_through_wrap_and_serve() {
    let mut wrapped = wrap_everything("wrapped", "trigger-elicitation-request").await;
    servers_requests_reach_the_client(&mut wrapped, "").await;
    wrapped.close().await;

    let (mut served, dir) = serve_everything(
        "transparency-serve",
        "served",
        full_capabilities(),
        "everything__trigger-elicitation-request",
    )
    .await;
    // The roots: serve tells the server they changed when a client with roots arrives.
    tokio::time::sleep(Duration::from_millis(500)).await;
    servers_requests_reach_the_client(&mut served, "everything__").await;
    served.close().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_client_without_the_capability_gets_the_server_a_clean_error() {
    // serve declares elicitation upstream; this client does not: the server must get an error
    // at once, and the call must end (not hang).
    let (mut served, dir) = serve_everything(
        "transparency-nocap",
        "bare",
        json!({}),
        "everything__trigger-elicitation-request",
    )
    .await;
    let answer = served
        .request(
            "tools/call",
            json!({ "name": "everything__trigger-elicitation-request", "arguments": {} }),
        )
        .await;
    assert_eq!(
        served.asked("elicitation/create"),
        0,
        "nothing reached the client"
    );
    // server-everything reports the error it got from us as its tool's error.
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    assert!(
        answer
            .to_string()
            .contains("did not declare the capability"),
        "the server got our error and said so: {answer}"
    );
    served.close().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// A task-augmented call and every task method, through one proxy; `task_id` is the id the
/// client was given.
async fn tasks_work(client: &mut Raw, name: &str) {
    let created = client
        .request(
            "tools/call",
            json!({ "name": name, "arguments": { "topic": "proxies" }, "task": { "ttl": 60000 } }),
        )
        .await;
    let task_id = created["result"]["task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("a task was created: {created}"))
        .to_string();
    let got = client
        .request("tasks/get", json!({ "taskId": task_id }))
        .await;
    assert_eq!(got["result"]["taskId"], json!(task_id), "tasks/get: {got}");
    let listed = client.request("tasks/list", json!({})).await;
    assert!(
        listed["result"]["tasks"]
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t["taskId"] == json!(task_id))),
        "tasks/list shows it: {listed}"
    );
    // tasks/result waits for the task to finish (about 4 s) and gives its result.
    let result = client
        .request("tasks/result", json!({ "taskId": task_id }))
        .await;
    assert!(
        result.to_string().contains("Research Report"),
        "tasks/result: {result}"
    );
    // A second task, cancelled.
    let second = client
        .request(
            "tools/call",
            json!({ "name": name, "arguments": { "topic": "again" }, "task": { "ttl": 60000 } }),
        )
        .await;
    let second_id = second["result"]["task"]["taskId"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let cancelled = client
        .request("tasks/cancel", json!({ "taskId": second_id }))
        .await;
    assert_eq!(
        cancelled["result"]["status"],
        json!("cancelled"),
        "tasks/cancel: {cancelled}"
    );
}

#[tokio::test]
async fn tasks_work_through_wrap_and_serve() {
    let mut wrapped = wrap_everything("tasks", "simulate-research-query").await;
    tasks_work(&mut wrapped, "simulate-research-query").await;
    wrapped.close().await;

    let (mut served, dir) = serve_everything(
        "transparency-tasks",
        "tasks",
        full_capabilities(),
        "everything__simulate-research-query",
    )
    .await;
    tasks_work(&mut served, "everything__simulate-research-query").await;
    served.close().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_respawned_server_sees_the_same_client() {
    let fault = fault_bin();
    let mut client = Raw::spawn(
        &supervisor_bin(),
        &[
            "wrap",
            "--initial-delay-ms",
            "50",
            "--",
            fault.to_str().unwrap_or_default(),
        ],
        accept_everything,
    );
    let capabilities = json!({ "roots": { "listChanged": true }, "sampling": {}, "experimental": { "x": { "y": 1 } } });
    client
        .handshake(capabilities.clone(), "identity-check")
        .await;
    let before = client
        .request("tools/call", json!({ "name": "whoami", "arguments": {} }))
        .await;
    let before = before["result"]["structuredContent"].clone();
    assert_eq!(before["clientInfo"]["name"], "identity-check", "{before}");
    assert_eq!(before["clientInfo"]["version"], "7.7.7", "{before}");
    assert_eq!(
        before["capabilities"]["experimental"], capabilities["experimental"],
        "{before}"
    );
    assert_eq!(before["protocolVersion"], "2025-11-25", "{before}");
    let crashed = client
        .request("tools/call", json!({ "name": "crash", "arguments": {} }))
        .await;
    assert!(crashed.get("result").is_some(), "{crashed}");
    // The next call waits for the respawn (within its deadline) and is answered by it.
    let mut after = Value::Null;
    for _ in 0..100 {
        let answer = client
            .request("tools/call", json!({ "name": "whoami", "arguments": {} }))
            .await;
        let seen = answer["result"]["structuredContent"].clone();
        if seen["pid"] != before["pid"] && !seen["pid"].is_null() {
            after = seen;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!after.is_null(), "a new process answered");
    for key in ["clientInfo", "capabilities", "protocolVersion"] {
        assert_eq!(after[key], before[key], "{key} after the respawn");
    }
    client.close().await;
}

/// A plain HTTP client of one session: POSTs of JSON-RPC text, answers read as JSON or as an
/// event stream.
struct HttpSession {
    http: reqwest::Client,
    url: String,
    session: Option<String>,
    next: u64,
}

impl HttpSession {
    fn new(url: String) -> Self {
        Self {
            http: reqwest::Client::builder()
                .no_proxy()
                .timeout(LIMIT)
                .build()
                .expect("client"),
            url,
            session: None,
            next: 1,
        }
    }

    async fn post(&mut self, message: &Value) -> (reqwest::StatusCode, Option<Value>) {
        let mut request = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(message.to_string());
        if let Some(session) = &self.session {
            request = request
                .header("mcp-session-id", session)
                .header("mcp-protocol-version", "2025-11-25");
        }
        let response = request.send().await.expect("POST");
        let status = response.status();
        if let Some(session) = response.headers().get("mcp-session-id") {
            self.session = session.to_str().ok().map(str::to_string);
        }
        let sse = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        let body = response.text().await.expect("body");
        let id = message.get("id").cloned();
        let answer = if sse {
            body.lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
                .find(|m| m.get("id") == id.as_ref() && m.get("method").is_none())
        } else {
            serde_json::from_str(&body).ok()
        };
        (status, answer)
    }

    async fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next;
        self.next += 1;
        let message = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
        let (status, answer) = self.post(&message).await;
        answer.unwrap_or_else(|| panic!("{method}: HTTP {status}, no answer"))
    }
}

#[tokio::test]
async fn wrap_over_http_shows_exactly_what_server_everything_shows_over_stdio() {
    let mut direct = Raw::spawn(&everything(), &["stdio"], accept_everything);
    let expected = transcript(&mut direct).await;
    direct.close().await;

    let port = support::free_port();
    let addr = format!("127.0.0.1:{port}");
    let server = everything().display().to_string();
    let args = ["wrap", "--http", &addr, "--", &server, "stdio"];
    // Stopped with SIGTERM when dropped, so the server it started goes too.
    let proxy = support::Running::start(&args, port, &[]).await;
    let mut client = HttpSession::new(proxy.url("/mcp"));
    let init = client
        .request(
            "initialize",
            json!({
                "protocolVersion": "2025-11-25",
                "capabilities": full_capabilities(),
                "clientInfo": { "name": "transcript", "version": "7.7.7" },
            }),
        )
        .await;
    assert!(client.session.is_some(), "a session was given");
    let (status, _) = client
        .post(&json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }))
        .await;
    assert_eq!(status, reqwest::StatusCode::ACCEPTED);
    let mut seen = vec![("initialize".to_string(), init["result"].clone())];
    // As the stdio transcript: until server-everything's late tools are listed (bounded).
    for _ in 0..100 {
        let list = client.request("tools/list", json!({})).await;
        if list.to_string().contains("\"simulate-research-query\"") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for method in [
        "tools/list",
        "prompts/list",
        "resources/list",
        "resources/templates/list",
    ] {
        let answer = client.request(method, json!({})).await;
        seen.push((method.to_string(), answer["result"].clone()));
    }
    let unknown = client.request("vendor/no-such-method", json!({})).await;
    seen.push((
        "unknown method".to_string(),
        unknown["error"]["code"].clone(),
    ));
    for ((what, want), (_, got)) in expected.iter().zip(seen.iter()) {
        assert!(
            !want.is_null(),
            "{what}: server-everything answered nothing"
        );
        assert_eq!(got, want, "{what} differs through wrap --http");
    }
    drop(proxy);
}

#[tokio::test]
async fn serve_routes_a_resource_by_what_is_held_and_never_lists_by_the_way() {
    let dir = temp_dir("transparency-routes");
    let config = dir.join("servers.json");
    let fault = fault_bin().display().to_string();
    write_config(
        &config,
        json!({ "a": { "command": fault.clone() }, "b": { "command": fault } }),
    );
    let mut served = Raw::spawn(
        &supervisor_bin(),
        // No saved catalog: an earlier run's would route the resource before any list.
        &[
            "serve",
            "--no-catalog",
            "--config",
            config.to_str().unwrap_or_default(),
        ],
        accept_everything,
    );
    served.handshake(json!({}), "routes").await;
    let uri = "fault://status";
    // Two servers that both offer it, nothing listed by a client yet: routed by what is held,
    // as a list would route it (the first server in config order).
    let early = served
        .request("resources/read", json!({ "uri": uri }))
        .await;
    assert!(early["result"]["contents"].is_array(), "{early}");
    // A URI no server offers: an error that says to list, and nothing is listed by the way.
    let unknown = served
        .request("resources/read", json!({ "uri": "fault://nothing-here" }))
        .await;
    assert_eq!(unknown["error"]["code"], -32002, "{unknown}");
    assert!(
        unknown.to_string().contains("list the resources"),
        "{unknown}"
    );
    let listed = served.request("resources/list", json!({})).await;
    assert!(listed.to_string().contains(uri), "{listed}");
    let read = served
        .request("resources/read", json!({ "uri": uri }))
        .await;
    assert!(read["result"]["contents"].is_array(), "{read}");
    // Prompts route by their prefix, without a list.
    let prompt = served
        .request("prompts/get", json!({ "name": "b__no-such-prompt" }))
        .await;
    assert!(
        prompt.get("error").is_some() && !prompt.to_string().contains("no server offers"),
        "the server's own answer came back: {prompt}"
    );
    served.close().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn bad_messages_on_the_stdio_face_get_errors_that_name_what_is_wrong() {
    let fault = fault_bin().display().to_string();
    let mut client = Raw::spawn(
        &supervisor_bin(),
        &["wrap", "--", &fault],
        accept_everything,
    );
    client.handshake(json!({}), "bad-input").await;
    for (line, code, says) in [
        ("this is not json", -32700, "Parse error"),
        ("[1,2,3]", -32600, "batches are not accepted"),
        (
            r#"{"jsonrpc":"2.0","id":{"no":"objects"},"method":"ping"}"#,
            -32600,
            "`id`",
        ),
        (
            r#"{"jsonrpc":"1.0","id":5,"method":"ping"}"#,
            -32600,
            "`jsonrpc`",
        ),
        (
            r#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":[1]}"#,
            -32600,
            "`params`",
        ),
    ] {
        client
            .stdin
            .as_mut()
            .expect("open")
            .write_all(format!("{line}\n").as_bytes())
            .await
            .expect("write");
        let answer = client
            .lines
            .next_line()
            .await
            .expect("read")
            .expect("an answer");
        let answer: Value = serde_json::from_str(&answer).expect("JSON");
        assert_eq!(answer["error"]["code"], code, "{line}: {answer}");
        assert!(
            answer["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains(says)),
            "{line}: {answer}"
        );
    }
    // The session goes on.
    let echo = client
        .request(
            "tools/call",
            json!({ "name": "echo", "arguments": { "message": "still here" } }),
        )
        .await;
    assert_eq!(echo["result"]["content"][0]["text"], "still here", "{echo}");
    client.close().await;
}

#[tokio::test]
async fn a_task_whose_server_was_replaced_gets_the_new_servers_own_answer() {
    let port = support::free_port();
    let admin = format!("127.0.0.1:{port}");
    let server = everything().display().to_string();
    let mut client = Raw::spawn(
        &supervisor_bin(),
        &[
            "wrap",
            "--initial-delay-ms",
            "50",
            "--admin",
            &admin,
            "--",
            &server,
            "stdio",
        ],
        accept_everything,
    );
    client.handshake(full_capabilities(), "tasks-crash").await;
    client.wait_for_tool("simulate-research-query").await;
    let created = client
        .request(
            "tools/call",
            json!({ "name": "simulate-research-query", "arguments": { "topic": "x" }, "task": { "ttl": 60000 } }),
        )
        .await;
    let task_id = created["result"]["task"]["taskId"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(!task_id.is_empty(), "{created}");
    let status = |_: ()| async {
        let body = reqwest::get(format!("http://{admin}/status"))
            .await
            .expect("GET /status")
            .json::<Value>()
            .await
            .expect("JSON");
        body["servers"][0]["pid"].as_u64()
    };
    let pid = status(()).await.expect("a pid");
    support::kill9(u32::try_from(pid).expect("pid"));
    // The next request waits for the respawn and goes to the new process, which does not know
    // the task: its own error comes back (the task is not replayed).
    let got = client
        .request("tasks/get", json!({ "taskId": task_id }))
        .await;
    let error = &got["error"];
    assert!(error.is_object(), "the server's own error: {got}");
    // server-everything: -32602 "Failed to retrieve task: Task not found".
    assert_eq!(error["code"], -32602, "{got}");
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|m| m.contains("Task not found")),
        "{got}"
    );
    let new_pid = status(()).await.expect("a new pid");
    assert_ne!(new_pid, pid, "a new process answered");
    client.close().await;
}

/// A cursor the proxy never gave, on a list it answers whole, is refused as the server itself
/// refuses a cursor it did not give (`-32602`), in `wrap` and `serve`; found from outside: it
/// was ignored and the whole list came back as if it were a page.
#[tokio::test]
async fn a_cursor_on_a_list_answered_whole_is_refused() {
    let dir = temp_dir("transparency-cursor");
    let config = dir.join("servers.json");
    let fault = fault_bin().display().to_string();
    write_config(&config, json!({ "a": { "command": fault.clone() } }));
    let wrapped = Raw::spawn(
        &supervisor_bin(),
        &["wrap", "--", &fault],
        accept_everything,
    );
    let served = Raw::spawn(
        &supervisor_bin(),
        &["serve", "--config", config.to_str().unwrap_or_default()],
        accept_everything,
    );
    for (mut proxy, methods) in [
        (wrapped, &["tools/list"][..]),
        (
            served,
            &[
                "tools/list",
                "prompts/list",
                "resources/list",
                "resources/templates/list",
            ][..],
        ),
    ] {
        proxy.handshake(json!({}), "cursor").await;
        for method in methods {
            let refused = proxy.request(method, json!({ "cursor": "nope" })).await;
            assert_eq!(refused["error"]["code"], -32602, "{method}: {refused}");
            let whole = proxy.request(method, json!({})).await;
            assert!(whole.get("result").is_some(), "{method}: {whole}");
        }
        proxy.close().await;
    }
    let _ = std::fs::remove_dir_all(dir);
}
