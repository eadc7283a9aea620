//! Sessions and isolation (SPEC §11), end to end through `serve --http`: a server with
//! `"isolation": "session"` runs one instance per client session, started on the session's first
//! need and closed when the session ends; `maxInstances` bounds them with a JSON-RPC error that
//! names the bound; two clients at once on an isolated stdio server-everything each get the
//! server's requests (roots, sampling, elicitation) answered by their own callbacks (the
//! official Python SDK client).

mod interop_support;
mod support;

use std::time::Duration;

use interop_support::{
    Target, assert_callback_answers, everything_stdio, path_str, run_driver, start_http_proxy,
};
use mcp_supervisor_testkit::rawhttp::RawHttp;
use serde_json::{Value, json};
use support::*;

const LIMIT: Duration = Duration::from_secs(20);
const DRIVER_LIMIT: Duration = Duration::from_secs(60);

async fn isolated_fault(dir: &std::path::Path, max: u32) -> Running {
    let path = dir.join("servers.json");
    write_config(
        &path,
        json!({ "fault": {
            "command": fault_bin(),
            "isolation": "session",
            "maxInstances": max,
            "reconnect": { "initialDelayMs": 50, "maxDelayMs": 400, "maxAttempts": 5 }
        } }),
    );
    let proxy = serve_http_without_catalog(&path).await;
    status_until(&proxy, LIMIT, |s| state_is(s, "fault", "ready")).await;
    proxy
}

async fn pid_by(client: &RawHttp) -> u64 {
    let (result, _) = client
        .request(
            "tools/call",
            json!({ "name": "fault__pid", "arguments": {} }),
        )
        .await
        .expect("fault__pid");
    result["structuredContent"]["pid"]
        .as_u64()
        .unwrap_or_else(|| panic!("no pid in {result}"))
}

fn instances(status: &Value) -> u64 {
    server(status, "fault")["instances"]
        .as_u64()
        .unwrap_or(u64::MAX)
}

#[tokio::test]
async fn each_session_has_its_own_instance_bounded_by_max_instances_and_closed_with_it() {
    let dir = temp_dir("isolation-fault");
    let proxy = isolated_fault(&dir, 2).await;
    let shared = pid_of(&status_until(&proxy, LIMIT, |_| true).await, "fault");
    let url = proxy.url("/mcp");
    let one = RawHttp::connect(&url, LIMIT).await.expect("session one");
    let two = RawHttp::connect(&url, LIMIT).await.expect("session two");
    let three = RawHttp::connect(&url, LIMIT).await.expect("session three");

    // A session's calls all reach its own process; another session's, another process.
    let (a, b) = (pid_by(&one).await, pid_by(&two).await);
    assert_eq!(pid_by(&one).await, a, "one session, one instance");
    assert_ne!(a, b, "two sessions, two instances");
    for pid in [a, b] {
        assert_ne!(Some(pid as u32), shared, "not the shared instance");
    }
    let status = status_until(&proxy, LIMIT, |s| instances(s) == 2).await;
    assert_eq!(instances(&status), 2);

    // Past maxInstances: a JSON-RPC error that names the bound; nothing ran.
    let (answer, _) = three
        .answer(
            "tools/call",
            json!({ "name": "fault__pid", "arguments": {} }),
        )
        .await
        .expect("an answer");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("maxInstances") && message.contains('2'),
        "the bound is named: {answer}"
    );

    // The end of a session ends its instance, and frees its place.
    one.close().await.expect("DELETE session one");
    let gone = gone_within(a as u32, LIMIT).await;
    assert!(gone, "session one's instance {a} outlived its session");
    status_until(&proxy, LIMIT, |s| instances(s) == 1).await;
    let c = pid_by(&three).await;
    assert!(c != a && c != b, "session three has an instance of its own");
    assert!(alive(b as u32), "session two's instance is untouched");

    // The proxy's stop takes every instance with it.
    drop(proxy);
    for pid in [b, c] {
        assert!(
            gone_within(pid as u32, LIMIT).await,
            "{pid} outlived the proxy"
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// Each of the three requests reached this client's callback and its answer reached its own
/// instance, roots included (an isolated instance's roots are its session's), and nothing of
/// the other client's.
fn check_answers(summary: &Value, tag: &str, other: &str, ctx: &str) {
    assert_callback_answers(summary, tag, true, ctx);
    for key in ["roots", "sampling", "elicitation"] {
        let text = summary[key].to_string();
        assert!(
            !text.contains(&format!("file:///{other}"))
                && !text.contains(&format!("sampled by {other}"))
                && !text.contains(&format!("Name: {other}")),
            "{ctx}: got the other client's answer: {text}"
        );
    }
}

#[test]
fn two_clients_at_once_on_an_isolated_stdio_server_each_answer_its_requests() {
    let dir = temp_dir("isolation-everything");
    let argv = everything_stdio();
    let config = dir.join("isolated.json");
    write_config(
        &config,
        json!({ "everything": {
            "command": argv[0],
            "args": argv[1..],
            "isolation": "session"
        } }),
    );
    let args = vec![
        "serve".to_string(),
        "--config".to_string(),
        path_str(&config),
        "--no-catalog".to_string(),
    ];
    let (mut proxy, port) = start_http_proxy(&dir, "serve isolated", &args);
    let url = format!("http://127.0.0.1:{port}/mcp");
    let (dir_alpha, dir_beta) = (dir.join("alpha"), dir.join("beta"));
    for d in [&dir_alpha, &dir_beta] {
        std::fs::create_dir_all(d).expect("a driver's folder");
    }
    let run = |d: &std::path::Path, tag: &str| {
        run_driver(
            d,
            "callbacks",
            "legacy",
            &Target::Url(url.clone()),
            &["--prefix", "everything__", "--tag", tag],
            DRIVER_LIMIT,
        )
    };
    let (alpha, beta) = std::thread::scope(|scope| {
        let one = scope.spawn(|| run(&dir_alpha, "alpha"));
        let two = scope.spawn(|| run(&dir_beta, "beta"));
        (
            one.join().expect("the alpha client"),
            two.join().expect("the beta client"),
        )
    });
    check_answers(&alpha, "alpha", "beta", "client alpha");
    check_answers(&beta, "beta", "alpha", "client beta");
    proxy.stop();
    let _ = std::fs::remove_dir_all(dir);
}
