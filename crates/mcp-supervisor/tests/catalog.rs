//! Instant start from a saved catalog, and tool filters, against the scripted fake on a paused
//! clock: the saved list is published while the server is still `connecting`, calls wait for
//! ready within their deadline, the live list replaces the saved one (with a change event only
//! when they differ), a server that gives up withdraws its cached tools, and a corrupt catalog is
//! ignored and rewritten. Catalogs live in a temporary directory of each test.

#[path = "support/fake.rs"]
mod fake;
#[path = "support/saved.rs"]
mod saved;

use fake::*;
use mcp_supervisor::catalog::CatalogStore;
use mcp_supervisor::core::filter::ToolFilter;
use mcp_supervisor::{CallArgs, CallError, ServerState, ToolList};
use saved::*;

#[tokio::test(start_paused = true)]
async fn a_saved_catalog_is_published_at_once_while_the_server_is_still_connecting() {
    let dir = StateDir::new("instant");
    save_once(&dir, &["echo", "add"]).await;

    // The second run: the server takes 2 s to answer initialize.
    let fake = Fake::new(
        vec![Gen::ok(tools(&["echo", "add"])).init(Reply::After(ms(2000), Ok(())))],
        Gen::open_fails("unscripted"),
    );
    let hub = start_saving(quick(), &fake, &dir);
    // Published before the clock moved at all.
    assert_eq!(tool_names(&hub), ["srv__echo", "srv__add"]);
    let status = &hub.status()[0];
    assert_eq!(
        (status.state, status.tool_list, status.tools),
        (ServerState::Connecting, ToolList::Cache, 2)
    );
    let began = tokio::time::Instant::now();
    bounded("wait_listed", hub.wait_listed(ms(10_000))).await;
    assert_eq!(began.elapsed(), ms(0), "a cached server counts as listed");

    // A call waits for ready within its deadline, then runs on the live server.
    let result = bounded("the call", hub.call("srv__echo", CallArgs::default()))
        .await
        .expect("the call waits for ready and succeeds");
    assert_eq!(result_text(&result), "echo on generation 1");
    assert_eq!(began.elapsed(), ms(2000));
    assert_eq!(hub.status()[0].tool_list, ToolList::Live);
    stop(&hub).await;
}

#[tokio::test(start_paused = true)]
async fn a_call_with_a_shorter_deadline_than_the_start_fails_with_the_servers_state() {
    let dir = StateDir::new("deadline");
    save_once(&dir, &["echo"]).await;
    let fake = Fake::new(
        vec![Gen::ok(tools(&["echo"])).init(Reply::After(ms(2000), Ok(())))],
        Gen::open_fails("unscripted"),
    );
    let hub = start_saving(quick(), &fake, &dir);
    let args = CallArgs {
        timeout: Some(ms(500)),
        ..CallArgs::default()
    };
    let began = tokio::time::Instant::now();
    let outcome = bounded("the call", hub.call("srv__echo", args)).await;
    assert!(
        began.elapsed() <= ms(750),
        "never past its deadline (and grace)"
    );
    assert!(
        matches!(&outcome, Err(CallError::NotReady { state, .. }) if state == "connecting")
            || matches!(&outcome, Err(CallError::TimedOut { .. })),
        "{outcome:?}"
    );
    assert!(fake.calls().is_empty(), "nothing reached the server");
    stop(&hub).await;
}

#[tokio::test(start_paused = true)]
async fn an_identical_live_list_sends_no_change_and_a_different_one_does() {
    let dir = StateDir::new("changes");
    save_once(&dir, &["echo", "add"]).await;

    for (live, changes) in [(&["echo", "add"][..], 0), (&["echo", "sub"][..], 1)] {
        let fake = Fake::new(
            vec![Gen::ok(tools(live)).init(Reply::After(ms(2000), Ok(())))],
            Gen::open_fails("unscripted"),
        );
        let hub = start_saving(quick(), &fake, &dir);
        let mut events = hub.subscribe();
        tokio::time::sleep(ms(1)).await;
        drain(&mut events); // the cached list's own publication
        ready(&hub, 1).await;
        tokio::time::sleep(ms(1)).await;
        let live_names: Vec<String> = live.iter().map(|n| format!("srv__{n}")).collect();
        assert_eq!(tool_names(&hub), live_names);
        assert_eq!(tools_changed(&drain(&mut events)), changes, "live {live:?}");
        stop(&hub).await;
    }
    // The changed list was saved in turn.
    let saved = CatalogStore::new(&dir.0).load(&quick()).expect("saved");
    assert!(saved.tools[1].get().contains(r#""name":"sub""#));
}

#[tokio::test(start_paused = true)]
async fn a_server_that_gives_up_withdraws_its_cached_tools() {
    let dir = StateDir::new("gave-up");
    save_once(&dir, &["echo"]).await;
    let mut server = quick();
    server.reconnect.max_attempts = 2;
    let fake = Fake::new(Vec::new(), Gen::open_fails("no such command"));
    let hub = start_saving(server, &fake, &dir);
    assert_eq!(tool_names(&hub), ["srv__echo"]);
    // While it retries, the cached tools stay, as live ones do in an outage.
    state(&hub, ServerState::Retrying).await;
    assert_eq!(tool_names(&hub), ["srv__echo"]);
    state(&hub, ServerState::GaveUp).await;
    assert!(tool_names(&hub).is_empty());
    assert_eq!(hub.status()[0].tool_list, ToolList::None);
    stop(&hub).await;
    // The catalog itself is kept for the next start.
    assert!(CatalogStore::new(&dir.0).load(&quick()).is_some());
}

#[tokio::test(start_paused = true)]
async fn a_corrupt_catalog_is_ignored_and_rewritten() {
    let dir = StateDir::new("corrupt");
    let store = CatalogStore::new(&dir.0);
    std::fs::create_dir_all(&dir.0).expect("state dir");
    std::fs::write(store.path_for(&quick()), b"{\"format\":1,\"catal").expect("write");
    let fake = Fake::new(
        vec![Gen::ok(tools(&["echo"])).init(Reply::After(ms(2000), Ok(())))],
        Gen::open_fails("unscripted"),
    );
    let hub = start_saving(quick(), &fake, &dir);
    assert!(tool_names(&hub).is_empty(), "nothing cached to publish");
    assert_eq!(hub.status()[0].tool_list, ToolList::None);
    ready(&hub, 1).await;
    stop(&hub).await;
    let saved = store.load(&quick()).expect("rewritten after the live list");
    assert_eq!(saved.tools.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_filtered_tool_is_not_listed_and_its_call_never_reaches_the_server() {
    let dir = StateDir::new("filter");
    let mut server = quick();
    let own = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    server.tools = ToolFilter::new(Some(&own(&["read_*", "echo"])), &own(&["read_secret"]))
        .expect("valid patterns");
    let fake = Fake::new(
        vec![Gen::ok(tools(&[
            "echo",
            "read_file",
            "read_secret",
            "delete",
        ]))],
        Gen::open_fails("unscripted"),
    );
    let hub = start_saving(server.clone(), &fake, &dir);
    ready(&hub, 1).await;
    assert_eq!(tool_names(&hub), ["srv__echo", "srv__read_file"]);
    for hidden in ["srv__delete", "srv__read_secret"] {
        let outcome = bounded("the call", hub.call(hidden, CallArgs::default())).await;
        assert!(
            matches!(outcome, Err(CallError::UnknownTool { .. })),
            "{hidden}"
        );
    }
    // Also by upstream name through `send` (wrap's path for names the registry does not hold).
    let params =
        serde_json::value::to_raw_value(&serde_json::json!({"name": "delete"})).expect("params");
    let outcome = bounded(
        "send",
        hub.send("srv", "tools/call", Some(&params), CallArgs::default()),
    )
    .await;
    assert!(matches!(outcome, Err(CallError::UnknownTool { .. })));
    assert!(fake.calls().is_empty(), "no call reached the server");
    assert_eq!(
        hub.registry().listed("srv"),
        ["echo", "read_file", "read_secret", "delete"]
    );
    stop(&hub).await;
    // The catalog keeps what the server sent, whole: the filter applies when publishing.
    let saved = CatalogStore::new(&dir.0).load(&server).expect("saved");
    assert_eq!(saved.tools.len(), 4);
}

#[tokio::test(start_paused = true)]
async fn saved_prompts_and_resources_answer_at_once_while_the_server_starts() {
    let dir = StateDir::new("extras");
    let store = CatalogStore::new(&dir.0);
    let raw = |text: &str| {
        serde_json::value::RawValue::from_string(text.to_string()).expect("valid JSON")
    };
    let saved = mcp_supervisor::catalog::Catalog {
        tools: vec![raw(r#"{"name":"echo","inputSchema":{"type":"object"}}"#)],
        prompts: Some(vec![raw(r#"{"name":"greet","x-kept":true}"#)]),
        resources: Some(Vec::new()),
        resource_templates: None,
        initialize: None,
    };
    store.save(&quick(), &saved).expect("saved");
    let fake = Fake::new(
        vec![Gen::ok(tools(&["echo"])).init(Reply::After(ms(2000), Ok(())))],
        Gen::open_fails("unscripted"),
    );
    let hub = start_saving(quick(), &fake, &dir);
    let began = tokio::time::Instant::now();
    let prompts = hub
        .list_all("srv", "prompts/list", &CallArgs::default())
        .await;
    let texts: Vec<&str> = prompts.iter().map(|p| p.get()).collect();
    assert_eq!(
        texts,
        [r#"{"name":"greet","x-kept":true}"#],
        "as saved, text whole"
    );
    let resources = hub
        .list_all("srv", "resources/list", &CallArgs::default())
        .await;
    assert!(resources.is_empty());
    assert_eq!(began.elapsed(), ms(0), "answered from the catalog");
    // A list the catalog does not know waits for the server (whose fake knows no templates).
    let templates = hub
        .list_all("srv", "resources/templates/list", &CallArgs::default())
        .await;
    assert!(templates.is_empty());
    assert_eq!(began.elapsed(), ms(2000), "it waited for the server");
    // Once live, the catalog is no longer used: the fake's own answer (method not found).
    let prompts = hub
        .list_all("srv", "prompts/list", &CallArgs::default())
        .await;
    assert!(prompts.is_empty(), "the live server offers no prompts");
    stop(&hub).await;
    // The live server declares only tools: its prompts and resources are saved as none.
    let saved = store.load(&quick()).expect("saved");
    assert_eq!(saved.prompts.map(|p| p.len()), Some(0));
    assert!(saved.initialize.is_some(), "the handshake is saved too");
}

#[tokio::test(start_paused = true)]
async fn a_catalog_saved_for_another_client_is_withdrawn_and_one_for_this_client_is_served() {
    let dir = StateDir::new("client");
    let store = CatalogStore::new(&dir.0);
    let raw = |text: &str| {
        serde_json::value::RawValue::from_string(text.to_string()).expect("valid JSON")
    };
    let saved = |client: String| mcp_supervisor::catalog::Catalog {
        tools: vec![raw(r#"{"name":"echo","inputSchema":{"type":"object"}}"#)],
        prompts: Some(vec![raw(r#"{"name":"greet"}"#)]),
        resources: None,
        resource_templates: None,
        initialize: Some(mcp_supervisor::catalog::SavedHandshake {
            asked: "2025-11-25".into(),
            result: raw(
                r#"{"protocolVersion":"2025-11-25","capabilities":{},"serverInfo":{"name":"s","version":"1"}}"#,
            ),
            client: Some(client),
        }),
    };
    let slow = || {
        Fake::new(
            vec![Gen::ok(tools(&["echo"])).init(Reply::After(ms(2000), Ok(())))],
            Gen::open_fails("unscripted"),
        )
    };

    // Saved for another client (a server may show it other tools): not served to this one.
    store
        .save(
            &quick(),
            &saved(r#"{"clientInfo":{"name":"another"}}"#.into()),
        )
        .expect("saved");
    let hub = start_saving(quick(), &slow(), &dir);
    tokio::time::sleep(ms(10)).await;
    assert!(hub.registry().listed("srv").is_empty(), "withdrawn");
    assert!(hub.cached_page("srv", "prompts/list").is_none());
    stop(&hub).await;

    // Saved for this very client: served at once.
    let own = mcp_supervisor::hub::default_handshake(&serde_json::json!({}))
        .get()
        .to_string();
    store.save(&quick(), &saved(own)).expect("saved");
    let hub = start_saving(quick(), &slow(), &dir);
    tokio::time::sleep(ms(10)).await;
    assert_eq!(hub.registry().listed("srv"), ["echo"]);
    assert!(hub.cached_page("srv", "prompts/list").is_some());
    stop(&hub).await;
}
