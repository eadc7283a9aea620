//! The servers' requests to their client, through the proxy, driven by the official Python SDK
//! client (`mcp` 2.3.0) and its callbacks against server-everything: `roots/list`,
//! `sampling/createMessage` and `elicitation/create` reach the client whose call caused them
//! and its answers reach the server (SPEC §10), through `wrap` and `serve`, over stdio and HTTP,
//! in both of the client's modes (2025-11-25 sessions, and 2026-07-28 where the proxy turns the
//! server's requests into an input-required result). Two clients at once each get their own
//! answers back; a client without the capabilities makes the server get an error, not a hang.

mod interop_support;
mod support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use interop_support::*;
use serde_json::{Value, json};
use support::{free_port, supervisor_bin, temp_dir, write_config};

const MODES: [&str; 2] = ["legacy", "auto"];
const DRIVER_LIMIT: Duration = Duration::from_secs(60);

fn sup() -> String {
    path_str(&supervisor_bin())
}

/// Each of the three requests reached this client's callback, and its own answer (`tag`)
/// reached the server, which shows it in the tool's result.
/// Roots are checked for 2025-era clients (`legacy`) only: a 2026-07-28 client has no session
/// with the server, and a server asks for roots about its session, not during a call, so the
/// proxy has no client to route them to (the server gets an error).
fn check_answers(summary: &Value, tag: &str, ctx: &str) {
    let roots = summary["mode"] != "auto";
    assert_callback_answers(summary, tag, roots, ctx);
}

/// The requests a call makes (sampling, elicitation) went to this client and its answers came
/// back.
fn check_call_answers(summary: &Value, tag: &str, ctx: &str) {
    assert_callback_answers(summary, tag, false, ctx);
}

fn callbacks(dir: &Path, mode: &str, target: &Target, prefix: &str, tag: &str) -> Value {
    run_driver(
        dir,
        "callbacks",
        mode,
        target,
        &["--prefix", prefix, "--tag", tag],
        DRIVER_LIMIT,
    )
}

#[test]
fn the_servers_requests_reach_the_python_client_through_wrap_and_serve_over_stdio() {
    let dir = temp_dir("py-callbacks-stdio");
    let everything = everything_stdio();
    let config = path_str(&everything_config(&dir));
    for mode in MODES {
        let mut wrap = vec![sup(), "wrap".into(), "--".into()];
        wrap.extend(everything.iter().cloned());
        let summary = callbacks(&dir, mode, &Target::Stdio(wrap), "", "wrapped");
        check_answers(&summary, "wrapped", &format!("wrap stdio/{mode}"));
        let serve = vec![sup(), "serve".into(), "--config".into(), config.clone()];
        let summary = callbacks(&dir, mode, &Target::Stdio(serve), "everything__", "served");
        check_answers(&summary, "served", &format!("serve stdio/{mode}"));
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_client_without_the_capabilities_makes_the_server_get_an_error() {
    let dir = temp_dir("py-callbacks-none");
    let config = path_str(&everything_config(&dir));
    let serve = vec![sup(), "serve".into(), "--config".into(), config];
    let summary = run_driver(
        &dir,
        "callbacks",
        "legacy",
        &Target::Stdio(serve),
        &["--prefix", "everything__", "--no-capabilities"],
        DRIVER_LIMIT,
    );
    refused_for_want_of_capabilities(&summary, "legacy, stdio");
    // A client of 2026-07-28 that declares nothing in its requests' `_meta` is not asked for
    // input either (found from outside: it got an input round it could not answer).
    let args = vec![
        "serve".to_string(),
        "--config".to_string(),
        path_str(&everything_config(&dir)),
    ];
    let (mut proxy, port) = start_http_proxy(&dir, "serve http, no capabilities", &args);
    let summary = run_driver(
        &dir,
        "callbacks",
        "auto",
        &Target::Url(format!("http://127.0.0.1:{port}/mcp")),
        &["--prefix", "everything__", "--no-capabilities"],
        DRIVER_LIMIT,
    );
    proxy.stop();
    refused_for_want_of_capabilities(&summary, "auto, http");
    let _ = std::fs::remove_dir_all(dir);
}

/// Nothing reached the client, and the call ended (no hang): server-everything reports the
/// error it got from us.
fn refused_for_want_of_capabilities(summary: &Value, what: &str) {
    assert_eq!(
        summary["asked"],
        json!([]),
        "{what}: nothing reached the client"
    );
    let elicited = &summary["elicitation"];
    assert_eq!(elicited["is_error"], true, "{what}: {elicited}");
    assert!(
        elicited["text"]
            .as_str()
            .is_some_and(|t| t.contains("did not declare the capability")),
        "{what}: the server got our error: {elicited}"
    );
}

#[test]
fn over_http_each_of_two_clients_at_once_gets_its_own_answers_and_wrap_passes_them_in_both_modes() {
    let dir = temp_dir("py-callbacks-http");
    // server-everything over streamable HTTP: its requests during a call come on that call's
    // own response stream, so the proxy knows which client's call caused them.
    let upstream = free_port();
    let mut cmd = Command::new(tool("mcp-server-everything"));
    cmd.arg("streamableHttp").env("PORT", upstream.to_string());
    let mut everything = Proc::spawn("server-everything http", cmd, &dir);
    everything.wait_listening(upstream, Duration::from_secs(30));
    let config = dir.join("http.json");
    write_config(
        &config,
        json!({ "everything": { "url": format!("http://127.0.0.1:{upstream}/mcp") } }),
    );
    let args = vec![
        "serve".to_string(),
        "--config".to_string(),
        path_str(&config),
    ];
    let (mut proxy, port) = start_http_proxy(&dir, "serve http", &args);
    let url = format!("http://127.0.0.1:{port}/mcp");
    // Each driver in a folder of its own: their output files are named by scenario and mode.
    let (dir_alpha, dir_beta) = (dir.join("alpha"), dir.join("beta"));
    for d in [&dir_alpha, &dir_beta] {
        std::fs::create_dir_all(d).expect("a driver's folder");
    }
    let (alpha, beta) = std::thread::scope(|scope| {
        let one = scope.spawn(|| {
            callbacks(
                &dir_alpha,
                "legacy",
                &Target::Url(url.clone()),
                "everything__",
                "alpha",
            )
        });
        let two = scope.spawn(|| {
            callbacks(
                &dir_beta,
                "legacy",
                &Target::Url(url.clone()),
                "everything__",
                "beta",
            )
        });
        (
            one.join().expect("the alpha client"),
            two.join().expect("the beta client"),
        )
    });
    // Roots are the session's, not a call's: server-everything keeps one list per upstream
    // session, and serve's clients share the one session it has, so they are not checked here.
    check_call_answers(&alpha, "alpha", "serve http, client alpha");
    check_call_answers(&beta, "beta", "serve http, client beta");
    for (summary, other) in [(&alpha, "beta"), (&beta, "alpha")] {
        for key in ["sampling", "elicitation"] {
            let text = summary[key].to_string();
            assert!(
                !text.contains(&format!("sampled by {other}"))
                    && !text.contains(&format!("Name: {other}")),
                "a client got the other's answer: {text}"
            );
        }
    }
    proxy.stop();

    let mut wrap: Vec<String> = vec!["wrap".into(), "--".into()];
    wrap.extend(everything_stdio());
    // A proxy per mode: server-everything keeps one roots list per session.
    for mode in MODES {
        let (mut proxy, port) = start_http_proxy(&dir, &format!("wrap http {mode}"), &wrap);
        let target = Target::Url(format!("http://127.0.0.1:{port}/mcp"));
        let summary = callbacks(&dir, mode, &target, "", mode);
        check_answers(&summary, mode, &format!("wrap http/{mode}"));
        proxy.stop();
    }
    everything.stop();
    let _ = std::fs::remove_dir_all(dir);
}
