//! Two clients of one shared server (SPEC §11), each given what it asked for itself, in `wrap`
//! and in `serve`: a resource update goes only to the client subscribed to its URI; one
//! client's unsubscribe does not end the other's subscription (the server is unsubscribed once
//! no client is); each client gets the log messages of its own level while the server is asked
//! for the most verbose one. Found from outside with the official SDKs' clients over HTTP, where
//! every client got every update and the last `setLevel` applied to all.
//!
//! The server is a raw stdio script that records the subscriptions and levels it is asked for,
//! and whose `emit` tool sends an update of `x://a`, a log message at `debug` and at `error`, and
//! then a notification of its own that every client gets: what a client saw of an `emit` is
//! what came before that marker (the proxy passes a server's notifications in order).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use mcp_supervisor::Hub;
use mcp_supervisor::core::config::parse_config;
use mcp_supervisor_front::{Client, Mode, Proxy};
use mcp_supervisor_testkit::{python, temp_dir};
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// The bound of every wait.
const LIMIT: Duration = Duration::from_secs(20);

const SERVER: &str = r#"
import json, os, sys
log = open(sys.argv[1], "a")
def send(m):
    sys.stdout.write(json.dumps(m) + "\n"); sys.stdout.flush()
for line in sys.stdin:
    m = json.loads(line)
    method, id = m.get("method"), m.get("id")
    if method == "notifications/cancelled":
        log.write(json.dumps({"method": method, "params": m.get("params")}) + "\n"); log.flush()
    if method is None or id is None:
        continue
    if method in ("resources/subscribe", "resources/unsubscribe", "logging/setLevel"):
        log.write(json.dumps({"method": method, "params": m.get("params")}) + "\n"); log.flush()
    r = {}
    if method == "initialize":
        r = {"protocolVersion": m["params"]["protocolVersion"],
             "capabilities": {"tools": {}, "resources": {"subscribe": True}, "logging": {}},
             "serverInfo": {"name": "shared", "version": "1"},
             "instructions": "Call emit to emit."}
    elif method == "tools/list":
        r = {"tools": [{"name": "emit", "inputSchema": {"type": "object"}},
                       {"name": "pid", "inputSchema": {"type": "object"}},
                       {"name": "hang", "inputSchema": {"type": "object"}}]}
    elif method == "resources/list":
        r = {"resources": [{"uri": "x://a", "name": "a"}]}
    elif method == "resources/templates/list":
        r = {"resourceTemplates": []}
    elif method == "prompts/list":
        r = {"prompts": []}
    elif method == "tools/call" and m["params"]["name"].endswith("hang"):
        log.write(json.dumps({"method": method, "params": m.get("params")}) + "\n"); log.flush()
        continue
    elif method == "tools/call" and m["params"]["name"].endswith("pid"):
        r = {"content": [{"type": "text", "text": str(os.getpid())}]}
    elif method == "tools/call":
        send({"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": "x://a"}})
        for level in ("debug", "error"):
            send({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": level, "data": level}})
        send({"jsonrpc": "2.0", "method": "notifications/marker"})
        r = {"content": [{"type": "text", "text": "emitted"}]}
    send({"jsonrpc": "2.0", "id": id, "result": r})
"#;

/// One client of the proxy: its own queue of notifications.
struct Peer {
    client: Arc<Client>,
    notes: mpsc::Receiver<String>,
    next: u64,
}

impl Peer {
    async fn request(&mut self, proxy: &Arc<Proxy>, method: &str, params: Value) -> Value {
        self.next += 1;
        let text = json!({ "jsonrpc": "2.0", "id": self.next, "method": method, "params": params })
            .to_string();
        let answer = tokio::time::timeout(LIMIT, proxy.handle(&self.client, &text, None))
            .await
            .unwrap_or_else(|_| panic!("no answer to {method} within {LIMIT:?}"))
            .unwrap_or_else(|| panic!("{method} was taken for a notification"));
        let answer: Value = serde_json::from_str(&answer).expect("a JSON answer");
        assert!(answer.get("error").is_none(), "{method}: {answer}");
        answer
    }

    /// A client that sent `initialize`, and its answer.
    async fn initialized(proxy: &Arc<Proxy>, name: &str) -> (Self, Value) {
        let (out, notes) = mpsc::channel(64);
        let mut peer = Self {
            client: proxy.connect(out),
            notes,
            next: 0,
        };
        let params = json!({
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": { "name": name, "version": "1" },
        });
        let init = peer.request(proxy, "initialize", params).await;
        (peer, init)
    }

    async fn connect(proxy: &Arc<Proxy>, name: &str) -> Self {
        let (peer, _) = Self::initialized(proxy, name).await;
        let initialized = json!({ "jsonrpc": "2.0", "method": "notifications/initialized" });
        proxy
            .handle(&peer.client, &initialized.to_string(), None)
            .await;
        peer
    }

    /// The notifications we look at that came before the next marker (the update of `x://a`
    /// and the log messages, as "updated" and "log:LEVEL").
    async fn seen(&mut self) -> Vec<String> {
        let mut seen = Vec::new();
        loop {
            let text = tokio::time::timeout(LIMIT, self.notes.recv())
                .await
                .unwrap_or_else(|_| panic!("no marker within {LIMIT:?}; saw {seen:?}"))
                .expect("the client's queue is open");
            let note: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
            match note["method"].as_str() {
                Some("notifications/marker") => return seen,
                Some("notifications/resources/updated") => seen.push("updated".to_string()),
                Some("notifications/message") => seen.push(format!(
                    "log:{}",
                    note["params"]["level"].as_str().unwrap_or("?")
                )),
                _ => {}
            }
        }
    }
}

/// The server's record: what it was asked, in order, as "METHOD PARAM".
fn asked(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|m| {
            let p = &m["params"];
            let what = p["uri"]
                .as_str()
                .or(p["level"].as_str())
                .or(p["reason"].as_str())
                .or(p["name"].as_str())
                .unwrap_or("?");
            format!("{} {what}", m["method"].as_str().unwrap_or("?"))
        })
        .collect()
}

/// A `subscriptions/listen` of protocol 2026-07-28, with id `id`, for the updates of `x://a`.
fn listen_text(id: &str) -> String {
    json!({ "jsonrpc": "2.0", "id": id, "method": "subscriptions/listen",
    "params": {
        "notifications": { "resourceSubscriptions": ["x://a"] },
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
        },
    }})
    .to_string()
}

/// A client's `notifications/cancelled` of its request `id`, for `reason`.
fn cancelled_text(id: &str, reason: &str) -> String {
    json!({ "jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": { "requestId": id, "reason": reason } })
    .to_string()
}

/// `emit` once, by `caller`.
async fn emit(proxy: &Arc<Proxy>, tool: &str, caller: &mut Peer) {
    caller
        .request(
            proxy,
            "tools/call",
            json!({ "name": tool, "arguments": {} }),
        )
        .await;
}

/// A hub of the one server, behind a proxy in `mode`; the server's record is `dir/asked.jsonl`.
fn start(dir: &Path, mode: Mode) -> (Arc<Hub>, Arc<Proxy>, std::path::PathBuf) {
    let script = dir.join("server.py");
    let log = dir.join("asked.jsonl");
    std::fs::write(&script, SERVER).expect("write the server");
    let servers = json!({ "mcpServers": { "shared": {
        "command": python("import json").display().to_string(),
        "args": [script.display().to_string(), log.display().to_string()],
    }}});
    let config = parse_config(&servers.to_string(), &|_| None).expect("a valid config");
    let hub = Arc::new(Hub::start(config));
    let proxy = Proxy::new(hub.clone(), mode);
    (hub, proxy, log)
}

async fn each_gets_what_it_asked_for(mode: Mode, tool: &str) {
    let dir = temp_dir("front-shared");
    let (hub, proxy, log) = start(&dir, mode);
    let mut a = Peer::connect(&proxy, "a").await;
    let mut b = Peer::connect(&proxy, "b").await;

    // Only a subscribes: only a gets the update.
    a.request(&proxy, "resources/subscribe", json!({ "uri": "x://a" }))
        .await;
    emit(&proxy, tool, &mut b).await;
    assert!(a.seen().await.contains(&"updated".to_string()));
    assert!(!b.seen().await.contains(&"updated".to_string()));

    // Both subscribe, a unsubscribes: b still gets it; the server was asked once each way.
    b.request(&proxy, "resources/subscribe", json!({ "uri": "x://a" }))
        .await;
    a.request(&proxy, "resources/unsubscribe", json!({ "uri": "x://a" }))
        .await;
    emit(&proxy, tool, &mut a).await;
    assert!(!a.seen().await.contains(&"updated".to_string()));
    assert!(b.seen().await.contains(&"updated".to_string()));
    b.request(&proxy, "resources/unsubscribe", json!({ "uri": "x://a" }))
        .await;
    assert_eq!(
        asked(&log),
        ["resources/subscribe x://a", "resources/unsubscribe x://a"],
        "the server is subscribed while a client is"
    );

    // a asks for debug, then b for error: the server stays at debug; each gets its own.
    a.request(&proxy, "logging/setLevel", json!({ "level": "debug" }))
        .await;
    b.request(&proxy, "logging/setLevel", json!({ "level": "error" }))
        .await;
    emit(&proxy, tool, &mut a).await;
    let (seen_a, seen_b) = (a.seen().await, b.seen().await);
    assert!(seen_a.contains(&"log:debug".to_string()), "{seen_a:?}");
    assert!(seen_a.contains(&"log:error".to_string()), "{seen_a:?}");
    assert!(!seen_b.contains(&"log:debug".to_string()), "{seen_b:?}");
    assert!(seen_b.contains(&"log:error".to_string()), "{seen_b:?}");
    let levels: Vec<String> = asked(&log)
        .into_iter()
        .filter(|l| l.starts_with("logging/setLevel"))
        .collect();
    assert_eq!(
        levels,
        ["logging/setLevel debug", "logging/setLevel debug"],
        "the server is asked for the most verbose level set"
    );

    for peer in [&a, &b] {
        proxy.disconnect(&peer.client);
    }
    hub.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn wrap_gives_each_client_of_a_shared_server_what_it_asked_for() {
    each_gets_what_it_asked_for(Mode::Transparent, "emit").await;
}

#[tokio::test]
async fn serve_gives_each_client_of_a_shared_server_what_it_asked_for() {
    each_gets_what_it_asked_for(Mode::Aggregate, "shared__emit").await;
}

/// A respawned server is asked again for what the client asked of the one before: the
/// subscription and the level, so the client keeps getting its updates and logs. Found from
/// outside: after a `kill -9` both were silently gone.
#[tokio::test]
async fn a_respawned_shared_server_is_given_the_clients_subscriptions_and_level_again() {
    let dir = temp_dir("front-shared-respawn");
    let (hub, proxy, log) = start(&dir, Mode::Transparent);
    let mut a = Peer::connect(&proxy, "a").await;
    a.request(&proxy, "resources/subscribe", json!({ "uri": "x://a" }))
        .await;
    a.request(&proxy, "logging/setLevel", json!({ "level": "debug" }))
        .await;
    let pid = a
        .request(
            &proxy,
            "tools/call",
            json!({ "name": "pid", "arguments": {} }),
        )
        .await;
    let pid: u32 = pid["result"]["content"][0]["text"]
        .as_str()
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("a pid: {pid}"));
    mcp_supervisor_testkit::kill9(pid);
    mcp_supervisor_testkit::poll_until("the server is asked again for both", LIMIT, || {
        let asked = asked(&log);
        let count = |what: &str| asked.iter().filter(|l| *l == what).count();
        count("resources/subscribe x://a") == 2 && count("logging/setLevel debug") == 2
    })
    .await;
    emit(&proxy, "emit", &mut a).await;
    let seen = a.seen().await;
    assert!(seen.contains(&"updated".to_string()), "{seen:?}");
    assert!(seen.contains(&"log:debug".to_string()), "{seen:?}");
    let status = hub.status();
    assert!(
        status[0].generation >= 2,
        "respawned: {:?}",
        status[0].generation
    );
    proxy.disconnect(&a.client);
    hub.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// A client of 2026-07-28 that listens for a resource's updates: the server is subscribed to it
/// (before the acknowledgment, which names it), the client gets its updates on the listen's
/// stream, and the server is unsubscribed when the client's request ends. Found from outside:
/// the acknowledgment said the subscription was honored, and nothing ever came.
#[tokio::test]
async fn a_listen_of_2026_subscribes_the_server_for_as_long_as_it_lasts() {
    let dir = temp_dir("front-shared-listen");
    let (hub, proxy, log) = start(&dir, Mode::Aggregate);
    let mut a = Peer::connect(&proxy, "a").await;
    let (out, mut notes) = mpsc::channel(64);
    let listener = proxy.connect(out);
    listener.set_stateless();
    let listen = listen_text("listen-1");
    let listening = tokio::spawn({
        let (proxy, listener) = (proxy.clone(), listener.clone());
        async move { proxy.handle(&listener, &listen, None).await }
    });
    let mut next = async || -> Value {
        let text = tokio::time::timeout(LIMIT, notes.recv())
            .await
            .expect("a notification within the limit")
            .expect("the listener's queue is open");
        serde_json::from_str(&text).expect("JSON")
    };
    let ack = next().await;
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    assert_eq!(
        ack["params"]["notifications"]["resourceSubscriptions"],
        json!(["x://a"]),
        "{ack}"
    );
    assert_eq!(asked(&log), ["resources/subscribe x://a"]);
    // An update the server sends (a's call makes it) reaches the listener, tagged.
    emit(&proxy, "shared__emit", &mut a).await;
    let update = loop {
        let note = next().await;
        if note["method"] == "notifications/resources/updated" {
            break note;
        }
    };
    assert_eq!(update["params"]["uri"], "x://a", "{update}");
    assert_eq!(
        update["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], "listen-1",
        "{update}"
    );
    // Its request ends (the HTTP face disconnects a request's client then): unsubscribed.
    listening.abort();
    proxy.disconnect(&listener);
    mcp_supervisor_testkit::poll_until("the server is unsubscribed", LIMIT, || {
        asked(&log) == ["resources/subscribe x://a", "resources/unsubscribe x://a"]
    })
    .await;
    proxy.disconnect(&a.client);
    hub.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// A client of 2026-07-28 over stdio ends a listen by cancelling it, and stays: the server is
/// unsubscribed then, not when the client ends (found from outside: the subscription lasted as
/// long as the client). A URI another listen of it still holds stays subscribed until that one
/// ends too.
#[tokio::test]
async fn a_listen_its_client_cancels_unsubscribes_the_server_while_the_client_stays() {
    let dir = temp_dir("front-shared-listen-cancel");
    let (hub, proxy, log) = start(&dir, Mode::Aggregate);
    let (out, mut notes) = mpsc::channel(64);
    let listener = proxy.connect(out);
    listener.set_stateless();
    let mut listens = Vec::new();
    for id in ["listen-1", "listen-2"] {
        let text = listen_text(id);
        let (proxy, listener) = (proxy.clone(), listener.clone());
        listens.push(tokio::spawn(async move {
            proxy.handle(&listener, &text, None).await
        }));
        let ack = tokio::time::timeout(LIMIT, notes.recv())
            .await
            .expect("an acknowledgment within the limit")
            .expect("the listener's queue is open");
        assert!(ack.contains("notifications/subscriptions/acknowledged") && ack.contains(id));
    }
    let unsubscribed = |log: &Path| {
        asked(log)
            .iter()
            .filter(|a| *a == "resources/unsubscribe x://a")
            .count()
    };
    assert!(asked(&log).contains(&"resources/subscribe x://a".to_string()));
    let mut listens = listens.into_iter();
    for (id, unsubscribes) in [("listen-1", 0), ("listen-2", 1)] {
        let cancel = cancelled_text(id, "done listening");
        assert_eq!(proxy.handle(&listener, &cancel, None).await, None);
        let ended = tokio::time::timeout(LIMIT, listens.next().expect("a listen"))
            .await
            .expect("the listen ends once cancelled")
            .expect("the listen's task");
        assert_eq!(ended, None, "a cancelled request gets no answer");
        // Its end waited for the server's answer to the unsubscribe it sent, if any.
        assert_eq!(
            unsubscribed(&log),
            unsubscribes,
            "after {id}: {:?}",
            asked(&log)
        );
    }
    proxy.disconnect(&listener);
    hub.stop().await;
    assert_eq!(unsubscribed(&log), 1, "{:?}", asked(&log));
    let _ = std::fs::remove_dir_all(dir);
}

/// A client cancels its call with a reason: the server is told that reason, not one of ours
/// (found from outside: "cancelled by the caller" replaced it), and the call gets no answer.
#[tokio::test]
async fn a_clients_reason_for_cancelling_reaches_the_server() {
    let dir = temp_dir("front-shared-cancel-reason");
    let (hub, proxy, log) = start(&dir, Mode::Transparent);
    let a = Peer::connect(&proxy, "a").await;
    let call = json!({ "jsonrpc": "2.0", "id": "call-1", "method": "tools/call",
        "params": { "name": "hang", "arguments": {} } })
    .to_string();
    let calling = tokio::spawn({
        let (proxy, client) = (proxy.clone(), a.client.clone());
        async move { proxy.handle(&client, &call, None).await }
    });
    // Cancelled once the server has it (before, it would not reach the server at all).
    mcp_supervisor_testkit::poll_until("the server has the call", LIMIT, || {
        asked(&log).contains(&"tools/call hang".to_string())
    })
    .await;
    let cancel = cancelled_text("call-1", "the user pressed stop");
    assert_eq!(proxy.handle(&a.client, &cancel, None).await, None);
    let answer = tokio::time::timeout(LIMIT, calling)
        .await
        .expect("the call ends once cancelled")
        .expect("the call's task");
    assert_eq!(answer, None, "a cancelled call gets no answer");
    mcp_supervisor_testkit::poll_until("the server is told", LIMIT, || {
        asked(&log).contains(&"notifications/cancelled the user pressed stop".to_string())
    })
    .await;
    proxy.disconnect(&a.client);
    hub.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// `serve` answers `initialize` with its own instructions and each server's own, under its
/// name (found from outside: the servers' instructions were dropped).
#[tokio::test]
async fn serve_passes_on_each_servers_instructions() {
    let dir = temp_dir("front-shared-instructions");
    let (hub, proxy, _log) = start(&dir, Mode::Aggregate);
    mcp_supervisor_testkit::poll_until("the server is ready", LIMIT, || {
        hub.status()
            .first()
            .is_some_and(|s| s.state == mcp_supervisor::ServerState::Ready)
    })
    .await;
    let (peer, init) = Peer::initialized(&proxy, "i").await;
    let instructions = init["result"]["instructions"].as_str().unwrap_or_default();
    assert!(
        instructions.starts_with("mcp-supervisor fronts"),
        "{instructions}"
    );
    assert!(
        instructions.contains("## Server \"shared\"")
            && instructions.ends_with("Call emit to emit."),
        "{instructions}"
    );
    proxy.disconnect(&peer.client);
    hub.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// One server's subscription changes never wait for another's: with server `a` frozen
/// (SIGSTOP) in the middle of a client's `resources/subscribe`, another client subscribes to a
/// resource of server `b` and is answered while `a`'s is still pending (the lock that orders
/// subscription changes is per server; it was one lock for all, held across the upstream call).
#[tokio::test]
async fn a_hung_server_does_not_hold_up_subscriptions_to_another() {
    let dir = temp_dir("front-shared-per-server");
    let mut servers = serde_json::Map::new();
    for name in ["a", "b"] {
        let script = dir.join(format!("{name}.py"));
        std::fs::write(&script, SERVER.replace("x://a", &format!("x://{name}")))
            .expect("write the server");
        servers.insert(
            name.to_string(),
            json!({
                "command": python("import json").display().to_string(),
                "args": [script.display().to_string(), dir.join(format!("{name}.jsonl")).display().to_string()],
            }),
        );
    }
    let config = json!({ "mcpServers": servers }).to_string();
    let config = parse_config(&config, &|_| None).expect("a valid config");
    let hub = Arc::new(Hub::start(config));
    let proxy = Proxy::new(hub.clone(), Mode::Aggregate);
    let mut first = Peer::connect(&proxy, "first").await;
    let mut second = Peer::connect(&proxy, "second").await;
    // Both servers' resources are known (listed) before one of them freezes.
    first.request(&proxy, "resources/list", json!({})).await;
    let pid = first
        .request(
            &proxy,
            "tools/call",
            json!({ "name": "a__pid", "arguments": {} }),
        )
        .await;
    let pid: i32 = pid["result"]["content"][0]["text"]
        .as_str()
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("a pid: {pid}"));
    let signal = |signal: nix::sys::signal::Signal| {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal).expect("signal server a")
    };
    signal(nix::sys::signal::Signal::SIGSTOP);
    let text = json!({ "jsonrpc": "2.0", "id": 90, "method": "resources/subscribe",
        "params": { "uri": "x://a" } })
    .to_string();
    let (proxy_a, client_a) = (proxy.clone(), first.client.clone());
    let frozen = tokio::spawn(async move { proxy_a.handle(&client_a, &text, None).await });
    // `a`'s subscribe is under way (it holds `a`'s lock) before `b`'s is asked.
    mcp_supervisor_testkit::poll_until("the frozen server's subscribe is in flight", LIMIT, || {
        first.client.in_flight() == 1
    })
    .await;
    // On this one-thread runtime, the request's task goes on to its upstream wait (taking the
    // lock on its way) while this one yields.
    for _ in 0..8 {
        tokio::task::yield_now().await;
    }
    second
        .request(&proxy, "resources/subscribe", json!({ "uri": "x://b" }))
        .await;
    assert!(
        !frozen.is_finished(),
        "the subscribe to the frozen server is still waiting"
    );
    signal(nix::sys::signal::Signal::SIGCONT);
    let answered = tokio::time::timeout(LIMIT, frozen)
        .await
        .expect("answered once the server goes on")
        .expect("the request's task");
    assert!(answered.is_some_and(|a| a.contains("\"result\"")));
    proxy.disconnect(&first.client);
    proxy.disconnect(&second.client);
    hub.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}
