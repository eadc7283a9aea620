//! The dashboard in a real browser (issue 32, SPEC §15): headless Chromium under chromedriver
//! (support/browser.rs). For now the harness's own test, against a page of its own; the tests of
//! the dashboard page follow with it.

#[path = "support/browser.rs"]
mod browser;

use std::time::{Duration, Instant};

use browser::{Browser, NARROW, WIDE};
use serde_json::json;

/// A page of our own, served by axum, proves the harness: open, wait, read, run a script, the
/// narrow viewport, screenshots of the window's size, a wait that cannot hold fails in time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn harness_drives_a_real_browser() {
    let page = "<!doctype html><meta name=viewport content='width=device-width'>\
        <body><p id=a data-x=1>first</p><input id=t type=password><button id=b>go</button>\
        <p id=out></p><script>setTimeout(() => {\
        const p = document.createElement('p'); p.id = 'late'; p.textContent = 'later';\
        document.body.append(p); }, 300); document.getElementById('b').onclick = () => {\
        document.getElementById('out').textContent = 'typed ' + document.getElementById('t').value; };\
        </script></body>";
    let app = axum::Router::new().route(
        "/",
        axum::routing::get(move || async move { axum::response::Html(page) }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move { axum::serve(listener, app).await });

    let Some(browser) = Browser::start("harness", NARROW).await else {
        return;
    };
    browser.open(&format!("http://127.0.0.1:{port}/")).await;
    assert_eq!(browser.text("#a").await.as_deref(), Some("first"));
    assert_eq!(browser.attr("#a", "data-x").await.as_deref(), Some("1"));
    assert_eq!(browser.text("#none").await, None);
    let started = Instant::now();
    assert_eq!(
        browser
            .wait_text("#late", "later", Duration::from_secs(5))
            .await,
        "later"
    );
    assert!(started.elapsed() < Duration::from_secs(2));
    let width = browser.js("return window.innerWidth;", vec![]).await;
    assert_eq!(width, json!(NARROW.0));
    let shot = browser.screenshot("narrow").await;
    assert_eq!(browser::png_size(&shot), NARROW);
    browser.resize(WIDE).await;
    let shot = browser.screenshot("wide").await;
    assert_eq!(browser::png_size(&shot), WIDE);
    browser.type_into("#t", "s3cret").await;
    browser.click("#b").await;
    assert_eq!(browser.text("#out").await.as_deref(), Some("typed s3cret"));
    let failed = tokio::spawn(async move {
        browser.wait_for("#never", Duration::from_millis(300)).await;
        browser
    });
    let outcome = tokio::time::timeout(Duration::from_secs(10), failed)
        .await
        .expect("bounded");
    assert!(
        outcome.is_err_and(|e| e.is_panic()),
        "a wait that cannot hold panics"
    );
    // A session that ends cleanly.
    let Some(browser) = Browser::start("harness-close", WIDE).await else {
        return;
    };
    browser.open(&format!("http://127.0.0.1:{port}/")).await;
    browser.close().await;
}
