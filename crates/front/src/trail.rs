//! The audit's view of one client request on its way (SPEC §14): a [`Trail`] made when the
//! request arrives ([`Trail::start`], by the message face), in which the places that route,
//! refuse and send the request note what they decided: the server and upstream name
//! ([`routed`]), a refusal ([`refused`]), the hub's outcome and its [`CallReport`]
//! ([`Sending`]). When the request and its call have both ended, however they end (answered,
//! dropped, or a call that outlived its request between input rounds), the trail becomes one
//! [`Record`] of the audit, if the request reached a server or was refused. A request the HTTP
//! face refuses before the message face sees it is one record at once ([`refused_at_edge`]).
//!
//! It only notes and writes down: it never changes a request or its answer and never waits. It
//! holds names and numbers only, never an argument, a result or a token. With no audit, no trail
//! is made, and every note is a look at a task-local that is not there.

use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock};

use mcp_supervisor::core::authorize;
use mcp_supervisor::{CallArgs, CallError, CallReport};
use serde_json::value::RawValue;

use crate::audit::{Audit, Outcome, Pending, Recovery, Target, Who};
use crate::client::Client;
use crate::json::lock;
use crate::message::Head;
use crate::proxy::Proxy;

tokio::task_local! {
    /// The trail of the request the current task is answering.
    static TRAIL: Arc<Trail>;
}

/// What the audit learns of one request while it runs; written when the last holder lets go.
pub(crate) struct Trail {
    audit: Arc<Audit>,
    note: Mutex<Note>,
}

struct Note {
    /// Taken when the record is made.
    pending: Option<Pending>,
    /// The name as the client wrote it, until the route gives the upstream one.
    requested: Option<Target>,
    /// The server it went to, once known.
    server: Option<String>,
    /// Refused before anything went upstream.
    refused: Option<Outcome>,
    /// It went to a server (or, with no server named, to every server).
    sent: Option<Sent>,
}

/// A request handed to the hub.
struct Sent {
    /// Filled by the hub when the call ends (empty: it never reached a supervisor).
    report: Option<Arc<OnceLock<CallReport>>>,
    /// What the hub answered; `None` while it runs, or when it never answered (dropped).
    outcome: Option<(Outcome, Recovery)>,
}

impl Trail {
    /// A trail for a request of `client` with `method` (and the names `head` holds), arriving
    /// now on the session whose id is `session_id` (none for stdio or a sessionless request);
    /// `None` when the proxy has no audit.
    pub(crate) fn start(
        proxy: &Proxy,
        client: &Client,
        method: &str,
        head: &Head,
        session_id: Option<&str>,
    ) -> Option<Arc<Self>> {
        let audit = proxy.audit()?;
        let caller = client.caller();
        let who = Who::new(
            caller.as_ref().map(|c| c.subject.as_str()),
            caller.as_ref().and_then(|c| c.client_id.as_deref()),
            session_id,
        );
        Some(Arc::new(Self {
            audit,
            note: Mutex::new(Note {
                pending: Some(Pending::new(who, method)),
                requested: Target::requested(method, head),
                server: None,
                refused: None,
                sent: None,
            }),
        }))
    }

    /// Answer the request with `answering`, this trail its trail while it runs. Not an `async
    /// fn`: one would hold `answering` twice (as its argument and as what it awaits), doubling
    /// the size of every request's future.
    pub(crate) fn follow<F: Future>(
        self: Arc<Self>,
        answering: F,
    ) -> impl Future<Output = F::Output> {
        TRAIL.scope(self, answering)
    }

    fn note<R>(&self, write: impl FnOnce(&mut Note) -> R) -> R {
        write(&mut lock(&self.note))
    }

    /// The hub answered the request sent ([`Sending::answered`]).
    fn answered(&self, result: Result<&RawValue, &CallError>) {
        self.note(|note| {
            if let Some(sent) = &mut note.sent {
                let report = sent.report.as_ref().and_then(|r| r.get());
                sent.outcome = Some(judged(result, report));
            }
        });
    }
}

impl Drop for Trail {
    fn drop(&mut self) {
        let note = self.note.get_mut().unwrap_or_else(|p| p.into_inner());
        let judged = match (&note.refused, &note.sent) {
            (Some(refused), _) => (*refused, Recovery::not_sent()),
            (None, Some(sent)) => match &sent.outcome {
                Some(outcome) => outcome.clone(),
                // Dropped before the hub answered (its client went away): the report says
                // whether it went out.
                None => unanswered(sent.report.as_ref().and_then(|r| r.get())),
            },
            // Neither refused nor sent: not the audit's.
            (None, None) => return,
        };
        let Some(mut pending) = note.pending.take() else {
            return;
        };
        match &note.server {
            Some(server) => pending.routed(server, note.requested.take()),
            None => pending.named(note.requested.take()),
        }
        self.audit.record(pending.finish(judged.0, judged.1));
    }
}

/// The trail of the request this task answers, if it is audited.
fn current() -> Option<Arc<Trail>> {
    TRAIL.try_with(Arc::clone).ok()
}

/// The request goes to `server`, about `target` (its upstream name): noted once the
/// dispatcher knows them.
pub(crate) fn routed(server: &str, target: authorize::Target<'_>) {
    let _ = TRAIL.try_with(|trail| {
        trail.note(|note| {
            note.server = Some(server.to_string());
            let upstream = match target {
                authorize::Target::Tool(name) => Some(Target::Tool(name.to_string())),
                authorize::Target::Prompt(name) => Some(Target::Prompt(name.to_string())),
                authorize::Target::Resource(uri) => Some(Target::Uri(uri.to_string())),
                authorize::Target::None => None,
            };
            if upstream.is_some() {
                note.requested = upstream;
            }
        })
    });
}

/// The request was refused (`Denied`, `RateLimited`); nothing went upstream.
pub(crate) fn refused(outcome: Outcome) {
    let _ = TRAIL.try_with(|trail| trail.note(|note| note.refused = Some(outcome)));
}

/// A request refused before the message face saw it (the HTTP face's `401` and `403`): one
/// record at once, nothing sent. `caller` when its token was valid, `session_id` when it named
/// one, and `asked` (its method and head) when its body was read.
#[cfg(feature = "http")]
pub(crate) fn refused_at_edge(
    proxy: &Proxy,
    caller: Option<&crate::caller::Caller>,
    session_id: Option<&str>,
    asked: Option<(&str, &Head)>,
    outcome: Outcome,
) {
    let Some(audit) = proxy.audit() else {
        return;
    };
    let who = Who::new(
        caller.map(|c| c.subject.as_str()),
        caller.and_then(|c| c.client_id.as_deref()),
        session_id,
    );
    let pending = match asked {
        Some((method, head)) => {
            let mut pending = Pending::new(who, method);
            pending.named(Target::requested(method, head));
            pending
        }
        None => Pending::unread(who),
    };
    audit.record(pending.finish(outcome, Recovery::not_sent()));
}

/// The request went to every server at once (a fan-out): it reached them, and its answer is
/// what they gave; no one server is named, and the hub reports no one call.
pub(crate) fn fanned_out() {
    let _ = TRAIL.try_with(|trail| {
        trail.note(|note| {
            note.sent.get_or_insert(Sent {
                report: None,
                outcome: Some((Outcome::Ok, Recovery::default())),
            });
        })
    });
}

/// A request on its way to the hub, for the trail of the request that sends it.
pub(crate) struct Sending(Option<Arc<Trail>>);

impl Sending {
    /// The request (with `args`) goes to the hub now: to `server` when known here (else the
    /// route noted it, or nothing names it). Its args get a place for the hub's report.
    pub(crate) fn start(server: Option<&str>, args: &mut CallArgs) -> Self {
        let Some(trail) = current() else {
            return Self(None);
        };
        let report = Arc::new(OnceLock::new());
        args.report = Some(report.clone());
        trail.note(|note| {
            if note.server.is_none() {
                note.server = server.map(str::to_string);
            }
            note.sent = Some(Sent {
                report: Some(report),
                outcome: None,
            });
        });
        Self(Some(trail))
    }

    /// It goes to `server` after all (`wrap`'s server, for a tool the registry does not hold),
    /// unless the route named one already.
    pub(crate) fn to_server(&self, server: &str) {
        if let Some(trail) = &self.0 {
            trail.note(|note| {
                note.server.get_or_insert_with(|| server.to_string());
            });
        }
    }

    /// What the hub answered.
    pub(crate) fn answered(self, result: Result<&RawValue, &CallError>) {
        if let Some(trail) = self.0 {
            trail.answered(result);
        }
    }
}

/// What became of a request the hub answered, by its answer and, where it says more than the
/// error can, the hub's report (a `Cancelled` or `ReconnectFailed` that never reached the
/// server did not run).
fn judged(
    result: Result<&RawValue, &CallError>,
    report: Option<&CallReport>,
) -> (Outcome, Recovery) {
    let outcome = Outcome::of_call(result);
    let Some(report) = report else {
        return (outcome, Recovery::of_call(result));
    };
    let outcome = match outcome {
        Outcome::MayHaveRun if !report.may_have_run => Outcome::DidNotRun,
        other => other,
    };
    (outcome, Recovery::of_report(report))
}

/// What became of a request the hub never answered (its future dropped).
fn unanswered(report: Option<&CallReport>) -> (Outcome, Recovery) {
    match report {
        Some(report) if report.may_have_run => (Outcome::MayHaveRun, Recovery::of_report(report)),
        Some(report) => (Outcome::DidNotRun, Recovery::of_report(report)),
        // It never reached a supervisor's send.
        None => (Outcome::DidNotRun, Recovery::not_sent()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    use mcp_supervisor::HubOptions;
    use mcp_supervisor::core::config::parse_config;
    use tokio::sync::mpsc;

    /// A proxy of `config` (its server's command does not exist: nothing is ever sent) that
    /// writes its audit to a file of its own; the lines written after `requests`.
    async fn audited(config: &str, requests: &[&str]) -> Vec<serde_json::Value> {
        let config = parse_config(config, &|_| None).expect("a valid config");
        let proxy = crate::start(config, crate::Mode::Aggregate, HubOptions::default());
        let dir = std::env::temp_dir().join(format!(
            "mcp-trail-{}-{:?}",
            std::process::id(),
            std::time::SystemTime::now()
        ));
        std::fs::create_dir_all(&dir).expect("a temp dir");
        let path = dir.join("audit.jsonl");
        let audit = Arc::new(Audit::open(&path).expect("the audit opens"));
        assert!(proxy.set_audit(audit.clone()).is_ok());
        let (out, _unrelated) = mpsc::channel(crate::OUTBOX);
        let client = proxy.connect(out);
        for request in requests {
            assert!(proxy.handle(&client, request, None).await.is_some());
        }
        audit.flush(Duration::from_secs(5)).expect("written");
        proxy.hub().stop().await;
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let _ = std::fs::remove_dir_all(&dir);
        text.lines()
            .map(|line| serde_json::from_str(line).expect("a line is JSON"))
            .collect()
    }

    const NOWHERE: &str = "/nonexistent/mcp-supervisor-trail-test";

    #[tokio::test]
    async fn a_denied_request_is_one_line_and_one_that_reaches_no_server_none() {
        let config = format!(
            r#"{{ "auth": {{ "issuer": "https://id.example", "audience": "https://mcp.example/mcp" }},
                 "mcpServers": {{ "s": {{ "command": "{NOWHERE}", "authorize": "false" }} }} }}"#
        );
        let lines = audited(
            &config,
            &[
                r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
                r#"{"jsonrpc":"2.0","id":2,"method":"custom/thing","params":{"secret":"ARG"}}"#,
            ],
        )
        .await;
        assert_eq!(lines.len(), 1, "{lines:?}");
        let line = &lines[0];
        assert_eq!(line["outcome"], "denied");
        assert_eq!(line["server"], "s");
        assert_eq!(line["method"], "custom/thing");
        assert_eq!(line["recovery"]["attempts"], 0);
        assert!(!line.to_string().contains("ARG"), "{line}");
    }

    #[tokio::test]
    async fn a_request_past_the_top_rate_limit_names_what_the_client_asked_for() {
        let config = format!(
            r#"{{ "rateLimit": {{ "requestsPerSecond": 0.001, "burst": 1 }},
                 "mcpServers": {{ "s": {{ "command": "{NOWHERE}" }} }} }}"#
        );
        let lines = audited(
            &config,
            &[
                r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
                r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"s__write","arguments":{"path":"ARG"}}}"#,
            ],
        )
        .await;
        assert_eq!(lines.len(), 1, "{lines:?}");
        let line = &lines[0];
        assert_eq!(line["outcome"], "rate_limited");
        assert_eq!(line["server"], serde_json::Value::Null);
        assert_eq!(line["tool"], "s__write");
        assert!(!line.to_string().contains("ARG"), "{line}");
    }

    fn error() -> CallError {
        CallError::Cancelled {
            server: "s".into(),
            tool: "t".into(),
        }
    }

    fn sent(attempts: u32, may_have_run: bool) -> CallReport {
        CallReport {
            attempts,
            replayed: attempts > 1,
            generations: (1..=u64::from(attempts)).collect(),
            may_have_run,
        }
    }

    #[test]
    fn a_cancel_before_any_send_did_not_run_and_one_after_may_have() {
        let error = error();
        let (outcome, recovery) = judged(Err(&error), Some(&sent(0, false)));
        assert_eq!(outcome, Outcome::DidNotRun);
        assert_eq!(recovery, Recovery::not_sent());
        let (outcome, recovery) = judged(Err(&error), Some(&sent(1, true)));
        assert_eq!(outcome, Outcome::MayHaveRun);
        assert_eq!(recovery.generations, Some(vec![1]));
        // Without a report, the error alone speaks, and what it does not say stays unknown.
        let (outcome, recovery) = judged(Err(&error), None);
        assert_eq!(outcome, Outcome::MayHaveRun);
        assert_eq!(recovery, Recovery::default());
    }

    #[test]
    fn a_request_dropped_unanswered_is_judged_by_its_report() {
        assert_eq!(
            unanswered(Some(&sent(2, true))).0,
            Outcome::MayHaveRun,
            "went out"
        );
        assert_eq!(unanswered(Some(&sent(1, false))).0, Outcome::DidNotRun);
        assert_eq!(unanswered(None), (Outcome::DidNotRun, Recovery::not_sent()));
    }
}
