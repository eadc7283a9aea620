//! A host's handler for its servers' requests (SPEC §10): a server's request a call makes
//! (`elicitation/create`) reaches the handler of the call's origin, one about the session
//! (`roots/list`) the hub's handler, and the answer goes back to the server; the default
//! handler refuses cleanly, so the server gets an error, not a hang. Real fault-server
//! processes over stdio (its `roots` and `elicit` tools ask the client).

mod real;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use mcp_supervisor::link::BoxFuture;
use mcp_supervisor::{CallArgs, Downstream, Hub, HubOptions, RpcError};
use real::*;
use serde_json::json;
use serde_json::value::RawValue;

/// Answers `roots/list` with one root named `name` and `elicitation/create` with `name`, and
/// counts what it was asked.
struct Roots {
    name: &'static str,
    asked: AtomicUsize,
}

impl Roots {
    fn new(name: &'static str) -> Arc<Self> {
        Arc::new(Self {
            name,
            asked: AtomicUsize::new(0),
        })
    }
}

impl Downstream for Roots {
    fn request(
        &self,
        method: &str,
        _params: Option<Box<RawValue>>,
    ) -> BoxFuture<'static, Result<Box<RawValue>, RpcError>> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        let answer = match method {
            "roots/list" => Ok(serde_json::value::to_raw_value(&json!({
                "roots": [{ "uri": format!("file:///{}", self.name), "name": self.name }]
            }))
            .expect("JSON")),
            "elicitation/create" => Ok(serde_json::value::to_raw_value(&json!({
                "action": "accept", "content": { "answer": self.name }
            }))
            .expect("JSON")),
            other => Err(RpcError::new(-32601, format!("no {other} here"))),
        };
        Box::pin(async move { answer })
    }

    fn notify(&self, _method: &str, _params: Option<Box<RawValue>>) {}
}

fn fault() -> serde_json::Value {
    json!({ "fault": { "command": fault_bin().display().to_string() } })
}

fn roots_of(result: &rmcp::model::CallToolResult) -> serde_json::Value {
    result
        .structured_content
        .clone()
        .unwrap_or(serde_json::Value::Null)
}

#[tokio::test]
async fn the_hubs_handler_answers_and_a_calls_origin_comes_first() {
    let host = Roots::new("host");
    let options = HubOptions::answering(host.clone(), &json!({ "roots": {}, "elicitation": {} }));
    let hub = Hub::start_with_options(config(fault()), options);
    wait_ready(&hub, "fault", 0).await;

    let result = hub
        .call("fault__roots", CallArgs::default())
        .await
        .expect("roots");
    assert_eq!(roots_of(&result)["roots"][0]["name"], "host", "{result:?}");
    assert_eq!(host.asked.load(Ordering::SeqCst), 1);

    // A request the call itself makes goes to the call's own origin.
    let caller = Roots::new("caller");
    let call = CallArgs {
        origin: Some(caller.clone()),
        arguments: args(json!({ "message": "who?" })),
        ..CallArgs::default()
    };
    let result = hub.call("fault__elicit", call).await.expect("elicit");
    assert!(text(&result).contains("\"caller\""), "{result:?}");
    assert_eq!(caller.asked.load(Ordering::SeqCst), 1);
    assert_eq!(
        host.asked.load(Ordering::SeqCst),
        1,
        "the host's handler was not asked again"
    );

    // Without an origin, the hub's handler answers it.
    let call = CallArgs {
        arguments: args(json!({ "message": "who?" })),
        ..CallArgs::default()
    };
    let result = hub.call("fault__elicit", call).await.expect("elicit");
    assert!(text(&result).contains("\"host\""), "{result:?}");
    assert_eq!(host.asked.load(Ordering::SeqCst), 2);
    hub.stop().await;
}

#[tokio::test]
async fn by_default_a_servers_request_is_refused_cleanly() {
    let hub = Hub::start(config(fault()));
    wait_ready(&hub, "fault", 0).await;
    let result = hub
        .call("fault__roots", CallArgs::default())
        .await
        .expect("the call itself ends");
    assert_eq!(result.is_error, Some(true), "{result:?}");
    let text = text(&result);
    assert!(
        text.contains("roots/list failed") && text.contains("does not handle"),
        "the server got our error: {text}"
    );
    hub.stop().await;
}

/// One call of a client (`key`) whose whole is `owner`.
struct CallOf {
    key: usize,
    owner: Arc<Roots>,
    asked: AtomicUsize,
    /// Told of the call's progress (so it is under way at the server).
    progressed: tokio::sync::Notify,
}

impl Downstream for CallOf {
    fn request(
        &self,
        method: &str,
        params: Option<Box<RawValue>>,
    ) -> BoxFuture<'static, Result<Box<RawValue>, RpcError>> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        self.owner.request(method, params)
    }

    fn notify(&self, method: &str, _params: Option<Box<RawValue>>) {
        if method == "notifications/progress" {
            self.progressed.notify_one();
        }
    }

    fn client(&self) -> Option<(usize, Arc<dyn Downstream>)> {
        Some((self.key, self.owner.clone()))
    }
}

fn call_of(key: usize, owner: &Arc<Roots>) -> Arc<CallOf> {
    Arc::new(CallOf {
        key,
        owner: owner.clone(),
        asked: AtomicUsize::new(0),
        progressed: tokio::sync::Notify::new(),
    })
}

#[tokio::test]
async fn over_stdio_a_request_goes_to_the_one_client_whose_calls_are_all_in_flight() {
    let host = Roots::new("host");
    let options = HubOptions::answering(host.clone(), &json!({ "roots": {}, "elicitation": {} }));
    let hub = Arc::new(Hub::start_with_options(config(fault()), options));
    wait_ready(&hub, "fault", 0).await;

    // `elicit` while another call is in flight: stdio cannot say which call asked.
    async fn elicit_beside_a_sleep(
        hub: &Arc<Hub>,
        sleeping: Arc<CallOf>,
        asking: Arc<dyn Downstream>,
    ) -> String {
        let sleep = {
            let (hub, origin) = (hub.clone(), sleeping.clone());
            tokio::spawn(async move {
                let params = serde_json::value::to_raw_value(&json!({
                    "name": "fault__sleep",
                    "arguments": { "ms": 1500 },
                    "_meta": { "progressToken": "sleeping" },
                }))
                .expect("JSON");
                let call = CallArgs {
                    origin: Some(origin),
                    ..CallArgs::default()
                };
                hub.call_json("fault__sleep", &params, call).await
            })
        };
        // The sleep is under way at the server (its first progress came) before `elicit`.
        tokio::time::timeout(
            std::time::Duration::from_secs(10),
            sleeping.progressed.notified(),
        )
        .await
        .expect("the sleep reported progress");
        let call = CallArgs {
            origin: Some(asking),
            arguments: args(json!({ "message": "who?" })),
            ..CallArgs::default()
        };
        let result = hub.call("fault__elicit", call).await.expect("elicit");
        sleep.await.expect("joined").expect("slept");
        text(&result)
    }

    // Two calls of one client: the client answers, not the host.
    let alice = Roots::new("alice");
    let (first, second) = (call_of(1, &alice), call_of(1, &alice));
    let answer = elicit_beside_a_sleep(&hub, first.clone(), second.clone()).await;
    assert!(answer.contains("\"alice\""), "{answer}");
    assert_eq!(alice.asked.load(Ordering::SeqCst), 1);
    assert_eq!(first.asked.load(Ordering::SeqCst), 0, "not one call's");
    assert_eq!(host.asked.load(Ordering::SeqCst), 0);

    // Calls of two clients: nobody can tell, so the hub's handler answers.
    let bob = Roots::new("bob");
    let answer = elicit_beside_a_sleep(&hub, call_of(1, &alice), call_of(2, &bob)).await;
    assert!(answer.contains("\"host\""), "{answer}");
    assert_eq!(bob.asked.load(Ordering::SeqCst), 0);
    assert_eq!(host.asked.load(Ordering::SeqCst), 1);
    hub.stop().await;
}
