//! The fault server driven by rmcp's own client, in both protocol eras: the legacy `initialize`
//! handshake, and 2026-07-28 (`server/discover`, `subscriptions/listen`).

mod common;

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use common::{BIN, STEP};
use rmcp::{
    ClientHandler, ClientServiceExt, ServiceExt,
    model::{
        CallToolRequestParams, ClientConfig, JsonObject, ProtocolVersion, ServerNotification,
        SubscriptionFilter,
    },
    service::{ClientLifecycleMode, NotificationContext, RoleClient},
    transport::TokioChildProcess,
};
use serde_json::json;
use tokio::sync::Notify;

fn transport() -> TokioChildProcess {
    // `TokioChildProcess::new` would override the command's stderr with `inherit`.
    let (transport, _stderr) = TokioChildProcess::builder(tokio::process::Command::new(BIN))
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn mcp-fault-server");
    transport
}

fn arguments(value: serde_json::Value) -> JsonObject {
    match value {
        serde_json::Value::Object(object) => object,
        other => panic!("not an object: {other}"),
    }
}

fn text(result: &rmcp::model::CallToolResult) -> String {
    result
        .content
        .first()
        .and_then(|c| c.as_text())
        .map(|t| t.text.clone())
        .unwrap_or_default()
}

#[derive(Clone, Default)]
struct Counting {
    changes: Arc<AtomicUsize>,
    changed: Arc<Notify>,
}

impl ClientHandler for Counting {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.changes.fetch_add(1, Ordering::Relaxed);
        self.changed.notify_one();
    }
}

#[tokio::test]
async fn legacy_client_sees_list_changed() {
    let handler = Counting::default();
    let client = tokio::time::timeout(STEP, handler.clone().serve(transport()))
        .await
        .expect("initialize in time")
        .expect("initialize");
    let info = client.peer_info().expect("server info");
    assert_eq!(
        info.server_info.as_ref().map(|i| i.name.as_str()),
        Some("mcp-fault-server")
    );
    assert_eq!(
        info.capabilities
            .tools
            .as_ref()
            .and_then(|t| t.list_changed),
        Some(true)
    );

    let result = client
        .call_tool(
            CallToolRequestParams::new("echo").with_arguments(arguments(json!({"message": "hi"}))),
        )
        .await
        .expect("echo");
    assert_eq!(text(&result), "hi");

    client
        .call_tool(
            CallToolRequestParams::new("set_tools")
                .with_arguments(arguments(json!({"tools": ["late"]}))),
        )
        .await
        .expect("set_tools");
    tokio::time::timeout(STEP, handler.changed.notified())
        .await
        .expect("tools/list_changed");
    let tools = client.list_all_tools().await.expect("tools/list");
    assert!(tools.iter().any(|t| t.name == "late"));
    client.cancel().await.expect("close");
}

#[tokio::test]
async fn modern_client_gets_list_changed_on_its_subscription() {
    let client = tokio::time::timeout(
        STEP,
        ClientConfig::default().serve_with_lifecycle(
            transport(),
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        ),
    )
    .await
    .expect("discover in time")
    .expect("discover");

    let mut subscription = client
        .listen(SubscriptionFilter::builder().tools_list_changed().build())
        .await
        .expect("listen");
    let result = client
        .call_tool(
            CallToolRequestParams::new("set_tools")
                .with_arguments(arguments(json!({"tools": ["modern"]}))),
        )
        .await
        .expect("set_tools");
    assert_eq!(result.is_error, Some(false));
    let notification = tokio::time::timeout(STEP, subscription.next())
        .await
        .expect("notification in time")
        .expect("subscription")
        .expect("a notification");
    assert!(matches!(
        notification,
        ServerNotification::ToolListChangedNotification(_)
    ));
    let tools = client.list_all_tools().await.expect("tools/list");
    assert!(tools.iter().any(|t| t.name == "modern"));

    // Ping does not exist in 2026-07-28; the call still works and the subscription can end.
    let result = tokio::time::timeout(
        Duration::from_secs(5),
        client.call_tool(
            CallToolRequestParams::new("add").with_arguments(arguments(json!({"a": 2, "b": 3}))),
        ),
    )
    .await
    .expect("add in time")
    .expect("add");
    assert_eq!(text(&result), "5");
    subscription.cancel().await.expect("cancel subscription");
    client.cancel().await.expect("close");
}
