//! The `needs_auth` state (issue 11, OAuth) against a scripted fake on a paused clock: a server
//! that needs a login keeps its tools listed, fails calls at once with what to run, makes no
//! attempt and no backoff while it waits, and resumes by itself when a token appears; a connect
//! refused for authorization goes there instead of a retry loop.

#[path = "support/fake.rs"]
mod fake;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use fake::*;
use mcp_supervisor::core::config::{Config, ServerConfig};
use mcp_supervisor::core::naming::NamingConfig;
use mcp_supervisor::link::{Connector, Link, LinkEvents};
use mcp_supervisor::{CallArgs, CallError, Hub, OpenError, ServerState};
use tokio::sync::watch;

const LOGIN: &str = "the refresh token was refused; run `mcp-supervisor login srv`";

/// The fake, with the token source's two signals: the needs-a-login status, and whether the
/// last attempt was refused for authorization.
#[derive(Clone)]
struct WithAuth {
    fake: Fake,
    status: Arc<watch::Sender<Option<String>>>,
    refused: Arc<AtomicBool>,
}

impl Connector for WithAuth {
    fn open(&self, generation: u64, events: LinkEvents) -> Result<Arc<dyn Link>, OpenError> {
        self.fake.open(generation, events)
    }

    fn auth_status(&self) -> Option<watch::Receiver<Option<String>>> {
        Some(self.status.subscribe())
    }

    fn auth_refused_attempt(&self) -> bool {
        if self.refused.swap(false, Ordering::SeqCst) {
            self.status
                .send_replace(Some("the server refused the connection for scope".into()));
            return true;
        }
        self.status.borrow().is_some()
    }
}

fn start_with_auth(server: ServerConfig, connector: &WithAuth) -> Hub {
    let config = Config {
        servers: vec![server],
        naming: NamingConfig::default(),
        ..Config::default()
    };
    let connector = connector.clone();
    Hub::start_with(
        config,
        Arc::new(move |_: &ServerConfig| Arc::new(connector.clone()) as Arc<dyn Connector>),
    )
}

fn quick() -> ServerConfig {
    let mut s = server();
    s.reconnect.initial_delay = ms(100);
    s.reconnect.max_delay = ms(1000);
    s.reconnect.max_attempts = 3;
    s.health.interval = None;
    s
}

fn with_auth(script: Vec<Gen>, fallback: Gen) -> WithAuth {
    WithAuth {
        fake: Fake::new(script, fallback),
        status: Arc::new(watch::channel(None).0),
        refused: Arc::new(AtomicBool::new(false)),
    }
}

#[tokio::test(start_paused = true)]
async fn a_failed_refresh_keeps_the_tools_fails_calls_at_once_and_resumes_when_a_token_appears() {
    let auth = with_auth(
        vec![Gen::ok(vec![tool("echo")]), Gen::ok(vec![tool("echo")])],
        Gen::open_fails("unexpected"),
    );
    let hub = start_with_auth(quick(), &auth);
    ready(&hub, 1).await;
    until(&auth.fake, ms(1000)).await;

    // The token source says the refresh failed.
    auth.status.send_replace(Some(LOGIN.into()));
    let parked = state(&hub, ServerState::NeedsAuth).await;
    assert_eq!(parked.last_error.as_deref(), Some(LOGIN));
    assert_eq!(tool_names(&hub), ["srv__echo"], "its tools stay listed");
    let began = tokio::time::Instant::now();
    let refused = bounded("the call", hub.call("srv__echo", CallArgs::default())).await;
    assert_eq!(tokio::time::Instant::now(), began, "the call fails at once");
    match refused {
        Err(CallError::NotReady {
            state, last_error, ..
        }) => {
            assert_eq!(state, "needs_auth");
            assert!(
                last_error.is_some_and(|e| e.contains("mcp-supervisor login srv")),
                "the error says what to run"
            );
        }
        other => panic!("expected a not-ready error, got {other:?}"),
    }

    // An hour in needs_auth: no attempt, no backoff, no restart.
    until(&auth.fake, Duration::from_secs(3600)).await;
    assert_eq!(
        fake_opens(&auth),
        1,
        "nothing is retried while a login is needed"
    );
    assert_eq!(state_now(&hub), ServerState::NeedsAuth);

    // A login writes a token: the server connects again by itself.
    auth.status.send_replace(None);
    let back = ready(&hub, 2).await;
    assert_eq!(back.attempt, 0);
    assert_eq!(fake_opens(&auth), 2);
    stop(&hub).await;
}

#[tokio::test(start_paused = true)]
async fn a_connect_refused_for_authorization_waits_for_a_login_instead_of_retrying() {
    let auth = with_auth(vec![], Gen::init_fails("not authorized: HTTP 403"));
    auth.refused.store(true, Ordering::SeqCst);
    let hub = start_with_auth(quick(), &auth);
    let parked = state(&hub, ServerState::NeedsAuth).await;
    assert!(
        parked
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("refused the connection for scope")),
        "{parked:?}"
    );
    until(&auth.fake, Duration::from_secs(600)).await;
    assert_eq!(
        fake_opens(&auth),
        1,
        "one attempt, then a wait for a person"
    );
    assert_eq!(state_now(&hub), ServerState::NeedsAuth);

    // A token appears: one attempt at once; refused again, it waits again (no loop).
    auth.refused.store(true, Ordering::SeqCst);
    auth.status.send_replace(None);
    wait_until(&hub, "the second attempt refused", |s| {
        s.generation == 2 && s.state() == ServerState::NeedsAuth
    })
    .await;
    until(&auth.fake, Duration::from_secs(1200)).await;
    assert_eq!(fake_opens(&auth), 2);
    stop(&hub).await;
}

fn fake_opens(auth: &WithAuth) -> usize {
    auth.fake.opens().len()
}
