//! The library's errors: each names the server (and tool), says what happened to the call, and
//! what to do next.
//!
//! Messages here must never contain a secret (env or header values); they quote only names,
//! states and causes.

use std::time::Duration;

use crate::core::classify::Failure;

/// Whether the connection was re-established after a failed call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Restored {
    /// A fresh generation is ready.
    Yes {
        /// The number of the generation that is ready now.
        generation: u64,
    },
    /// It is not (yet): the current state and the last cause.
    No {
        /// The server's state and last error in words (`server is retrying (last error: …)`).
        state: String,
    },
}

impl std::fmt::Display for Restored {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Restored::Yes { generation } => {
                write!(f, "the connection was restored (generation {generation})")
            }
            Restored::No { state } => write!(f, "the connection is not restored yet ({state})"),
        }
    }
}

/// Why a tool call did not return a result. The kinds follow the failure verdicts.
///
/// The variant says whether the call ran: `UnknownTool` and `NotReady` never sent it,
/// `NotDelivered` says it did not reach the server, `ServerError` and `Malformed` came back from
/// it, and `TimedOut`, `OutcomeUnknown`, `ReconnectFailed` and `Cancelled` may have run. The
/// library has already made the one safe retry where the rules allow it; a caller that retries
/// after `OutcomeUnknown` or `TimedOut` accepts that the tool may run twice.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum CallError {
    /// No published tool has this public name (the server may not have listed it yet, or the
    /// name is wrong). Nothing was sent.
    #[error("no server offers a tool named \"{name}\"; list the tools to see what is published")]
    UnknownTool {
        /// The public name the caller asked for.
        name: String,
    },

    #[error("server \"{server}\" is not ready to run \"{tool}\": it is {state}{}{}; the call did not run{}",
        last_error.as_ref().map(|e| format!(" (last error: {e})")).unwrap_or_default(),
        next_attempt_in.map(|d| format!(", next attempt in {} ms", d.as_millis())).unwrap_or_default(),
        hint(state))]
    /// The server did not become ready within the call's deadline, or is in a state no attempt
    /// comes out of (`gave_up`, `down`, `stopped`). Nothing was sent.
    NotReady {
        /// The server's name.
        server: String,
        /// The tool's upstream name (or the method, for [`crate::Hub::send`]).
        tool: String,
        /// The server's state, as [`crate::ServerState`] writes it (`retrying`, `gave_up`, …).
        state: String,
        /// Why the last attempt failed, if one did.
        last_error: Option<String>,
        /// How long until the next attempt, during a backoff.
        next_attempt_in: Option<Duration>,
    },

    #[error(
        "server \"{server}\" answered \"{tool}\" with error {code}: {message} (the call was not retried)"
    )]
    /// The server answered with a JSON-RPC error. The call reached it; it is not retried.
    ServerError {
        /// The server's name.
        server: String,
        /// The tool's upstream name (or the method).
        tool: String,
        /// The JSON-RPC error code.
        code: i32,
        /// The server's error message.
        message: String,
        /// The error's `data`, as JSON text, when the server gave one.
        data: Option<String>,
    },

    #[error(
        "\"{tool}\" on server \"{server}\" timed out after {after_ms} ms; cancellation was sent upstream and the call may have run; the server is being probed"
    )]
    /// The deadline passed before the answer came. `notifications/cancelled` went upstream,
    /// but the tool may have run; the server is probed, and a dead one is replaced.
    TimedOut {
        /// The server's name.
        server: String,
        /// The tool's upstream name (or the method).
        tool: String,
        /// The deadline that passed, in milliseconds.
        after_ms: u128,
    },

    #[error("\"{tool}\" on server \"{server}\" did not run: {cause}; {restored}")]
    /// The request never reached the server (the connection was gone before it went out), and
    /// the one resend on a fresh connection did not succeed either. Safe to try again.
    NotDelivered {
        /// The server's name.
        server: String,
        /// The tool's upstream name (or the method).
        tool: String,
        /// What went wrong, in words.
        cause: String,
        /// Whether a fresh connection is ready now.
        restored: Restored,
    },

    #[error(
        "\"{tool}\" on server \"{server}\" may have run: {cause}; it was not sent again because the tool is not marked read-only or idempotent (list it in retryTools if repeating it is safe); {restored}"
    )]
    /// The request went out but its answer was lost (the connection broke, or failed unclearly),
    /// and it was not sent again: the tool is not known to be safe to repeat (not annotated
    /// read-only or idempotent, not in `retryTools`), or it had already been sent twice. The tool
    /// may have run.
    OutcomeUnknown {
        /// The server's name.
        server: String,
        /// The tool's upstream name (or the method).
        tool: String,
        /// What went wrong, in words.
        cause: String,
        /// Whether a fresh connection is ready now.
        restored: Restored,
    },

    #[error(
        "\"{tool}\" on server \"{server}\" failed ({first}) and reconnecting failed too ({reconnect}); the call did not run again"
    )]
    /// The call failed in a way that allowed one retry on a fresh connection, but no fresh
    /// connection was ready within the deadline, so it was not sent again.
    ReconnectFailed {
        /// The server's name.
        server: String,
        /// The tool's upstream name (or the method).
        tool: String,
        /// Why the call failed first.
        first: String,
        /// Why reconnecting failed.
        reconnect: String,
    },

    #[error(
        "\"{tool}\" on server \"{server}\" was cancelled by the caller; cancellation was sent upstream"
    )]
    /// The caller cancelled the call with its [`crate::CallArgs::cancel`] token;
    /// `notifications/cancelled` went upstream. The tool may have run. (Dropping the call's
    /// future cancels it upstream too, with no error to see.)
    Cancelled {
        /// The server's name.
        server: String,
        /// The tool's upstream name (or the method).
        tool: String,
    },

    #[error(
        "server \"{server}\" sent a reply to \"{tool}\" that is not a tool result: {detail} (not retried)"
    )]
    /// The server's answer is not a valid result for the request. The call reached it; it is
    /// not retried.
    Malformed {
        /// The server's name.
        server: String,
        /// The tool's upstream name (or the method).
        tool: String,
        /// What is wrong with the answer.
        detail: String,
    },

    #[error(
        "server \"{server}\" refused \"{tool}\" for want of authorization: {message} (the call did not run)"
    )]
    /// The server refuses the client's credentials and no new token could be had: the call did not run; sign in again (`mcp-supervisor login NAME`).
    NotAuthorized {
        /// The server's name.
        server: String,
        /// The tool (or method) that was not run.
        tool: String,
        /// Why, and what to do (e.g. run `mcp-supervisor login NAME`).
        message: String,
    },

    #[error(
        "server \"{server}\" is isolated per client session and already runs its maxInstances ({max}) instances, one per session; end a session, or raise maxInstances in its config (the call did not run)"
    )]
    /// The server is isolated per client session (`isolation: "session"`) and this session
    /// would need a new instance past `maxInstances`. The call did not run.
    TooManyInstances {
        /// The server's name.
        server: String,
        /// Its `maxInstances`.
        max: u32,
    },

    #[error(
        "tool \"{tool}\" of server \"{server}\" is withheld: its {changed} changed since it was pinned, and the server's pins block changed tools; the call did not run. Review the change and accept it with `mcp-supervisor approve {server}`"
    )]
    /// The tool's definition changed since it was pinned, and its server's `pin` is `block`:
    /// it is not published and its calls are refused until `mcp-supervisor approve SERVER`
    /// accepts the change. Nothing was sent.
    Withheld {
        /// The server's name.
        server: String,
        /// The tool's upstream name.
        tool: String,
        /// The pinned members that changed (`description, inputSchema`).
        changed: String,
    },
}

impl CallError {
    /// A short name of the kind of failure (`not_ready`, `server_error`, `timed_out`, ...), for
    /// metrics and trace spans.
    pub fn kind(&self) -> &'static str {
        match self {
            CallError::UnknownTool { .. } => "unknown_tool",
            CallError::NotReady { .. } => "not_ready",
            CallError::ServerError { .. } => "server_error",
            CallError::TimedOut { .. } => "timed_out",
            CallError::NotDelivered { .. } => "not_delivered",
            CallError::OutcomeUnknown { .. } => "outcome_unknown",
            CallError::ReconnectFailed { .. } => "reconnect_failed",
            CallError::Cancelled { .. } => "cancelled",
            CallError::Malformed { .. } => "malformed",
            CallError::NotAuthorized { .. } => "not_authorized",
            CallError::TooManyInstances { .. } => "too_many_instances",
            CallError::Withheld { .. } => "withheld",
        }
    }
}

fn hint(state: &str) -> &'static str {
    match state {
        "gave_up" => {
            "; it gave up reconnecting: use an explicit reconnect (library call, `mcp-supervisor reconnect`, or POST /servers/NAME/reconnect) or reload the config"
        }
        "down" => {
            "; reconnect is disabled for it: reconnect it explicitly or enable reconnect in its config"
        }
        "stopped" => "; it has been stopped",
        "needs_auth" => "; it needs authorization: its last error says how to sign in",
        _ => "",
    }
}

/// Errors of the library's front door other than calls.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No server of this name is running (not in the config, disabled, or removed by a reload).
    #[error("no server named \"{0}\" is configured")]
    UnknownServer(String),
    /// The server was stopped and takes no more requests. (Not produced by this version: a
    /// stopped server's call fails with [`CallError::NotReady`].)
    #[error("server \"{0}\" has stopped and takes no more requests")]
    Stopped(String),
    /// A call failed.
    #[error(transparent)]
    Call(#[from] CallError),
}

/// Why a generation could not be opened ([`crate::link::Connector::open`]): nothing is running
/// for it. Each message names what to fix; the URL and header variants come from the config
/// and stay until it changes.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The server's command could not be started.
    #[error(
        "could not start `{command}`: {source}; check that the command exists and is executable"
    )]
    Spawn {
        /// The configured command.
        command: String,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// The configured URL does not parse.
    #[error("`{url}` is not a valid URL: {why}")]
    InvalidUrl {
        /// The URL as configured.
        url: String,
        /// What is wrong with it.
        why: String,
    },
    /// The configured URL is not http:// or https://.
    #[error("`{url}` is not an http:// or https:// URL (scheme `{scheme}`)")]
    NotHttp {
        /// The URL, parsed.
        url: String,
        /// Its scheme.
        scheme: String,
    },
    /// A configured header's name is not a valid HTTP header name.
    #[error("header name `{0}` is not a valid HTTP header name")]
    InvalidHeaderName(String),
    /// A configured header is one the transport sets itself.
    #[error("header `{0}` is set by the MCP transport itself and cannot be configured")]
    ReservedHeader(String),
    /// A configured header's value is not a valid HTTP header value (the value is never quoted:
    /// it may be a credential).
    #[error("the value of header `{0}` is not a valid HTTP header value")]
    InvalidHeaderValue(String),
    /// The HTTP client could not be built.
    #[error("cannot build the HTTP client: {0}")]
    HttpClient(String),
    /// The transport needs a tokio runtime and there is none.
    #[error("the {0} transport needs a tokio runtime")]
    NoRuntime(&'static str),
    /// The server's sandbox cannot be had (SPEC §16) and `bestEffort` is off: what the kernel
    /// or the host lacks. The server is not started, and not retried until a reconnect or a
    /// reload.
    #[error(
        "sandbox: {0}; the server is not started without it (set \"bestEffort\": true in its sandbox to run it with what this machine offers)"
    )]
    Sandbox(String),
    /// A host's own connector could not open it; the text says why. The library's connectors
    /// never give it.
    #[error("{0}")]
    Other(String),
}

/// Why the MCP handshake of a generation failed ([`crate::link::Link::initialize`]).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum HandshakeError {
    /// `initialize` got no result: the server answered it with an error, refused it over
    /// HTTP, or the transport failed (the failure says which).
    #[error("initialize failed: {}", describe(.0))]
    Initialize(Failure),
    /// The `initialize` result has no `protocolVersion`.
    #[error("initialize failed: the server's answer has no protocolVersion")]
    NoProtocolVersion,
    /// `notifications/initialized` could not be sent.
    #[error("sending notifications/initialized failed: {}", describe(.0))]
    Initialized(Failure),
    /// `server/discover` failed in a way that says nothing of the server's era.
    #[error("server/discover failed: {}", describe(.0))]
    Discover(Failure),
    /// The `server/discover` result is not an object.
    #[error("the server's server/discover answer is not an object")]
    DiscoverNotObject,
    /// The server asked for another protocol version twice, naming this one.
    #[error("server/discover failed: the server rejected protocol version {0} twice")]
    DiscoverRejected(&'static str),
}

/// Why a connection attempt failed before its generation was ready.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AttemptError {
    /// The generation could not be opened.
    #[error(transparent)]
    Open(#[from] OpenError),
    /// The handshake failed.
    #[error(transparent)]
    Handshake(#[from] HandshakeError),
    /// The first `tools/list` failed.
    #[error("the first tools/list failed: {}", describe(.0))]
    FirstList(Failure),
    /// `connectTimeoutMs` passed before the handshake and the first list were done.
    #[error(
        "no answer within connectTimeoutMs ({} ms) over spawn, initialize and the first tools/list",
        .0.as_millis()
    )]
    TimedOut(Duration),
    /// The generation closed before it was ready.
    #[error("the server closed the connection (or its process exited) while connecting")]
    ClosedWhileConnecting,
    /// The hub went away while the attempt waited for the client's identity.
    #[error("the hub was dropped before the handshake")]
    HubDropped,
}

/// A generation did not close within the barrier: reconnecting stops, so that two copies of
/// the server never run at once (SPEC §3).
#[derive(Debug, thiserror::Error)]
#[error(
    "generation {generation} did not close within {} s (its process group may still be running); \
     reconnecting stopped so that two copies of the server never run at once; \
     end the stray process, then reconnect explicitly",
    .within.as_secs()
)]
pub(crate) struct Stuck {
    /// The generation that would not close.
    pub generation: u64,
    /// The barrier it overran.
    pub within: Duration,
}

/// A failure in words, for logs and errors.
pub(crate) fn describe(failure: &Failure) -> String {
    match failure {
        Failure::NoLiveGeneration => "there is no live connection".into(),
        Failure::ConnectRefused => "the connection was refused".into(),
        Failure::SessionExpired => "the server no longer knows our session (HTTP 404)".into(),
        Failure::HttpStatus { status, body, .. } if body.is_empty() => format!("HTTP {status}"),
        Failure::HttpStatus { status, body, .. } => format!("HTTP {status}: {body}"),
        Failure::ServerError { code, message, .. } => format!("error {code}: {message}"),
        Failure::TransportClosedBeforeSend => {
            "the connection was closed before the request went out".into()
        }
        Failure::ConnectionLostAfterSend => {
            "the connection broke after the request went out".into()
        }
        Failure::TransportError { message, .. } => format!("transport error: {message}"),
        Failure::DeadlinePassed => "the deadline passed".into(),
        Failure::CancelledByCaller => "cancelled by the caller".into(),
        Failure::UnexpectedResponse => "the reply was of the wrong type".into(),
        Failure::Unauthorized { message } => format!("not authorized: {message}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::classify::Failure;

    /// The typed errors write the texts that status `lastError`, logs and tests read.
    #[test]
    fn attempt_failures_read_as_before() {
        let spawn = OpenError::Spawn {
            command: "nope".into(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "No such file"),
        };
        assert_eq!(
            AttemptError::from(spawn).to_string(),
            "could not start `nope`: No such file; check that the command exists and is executable"
        );
        let refused = HandshakeError::Initialize(Failure::ServerError {
            code: -32601,
            message: "no".into(),
            data: None,
        });
        assert_eq!(
            AttemptError::from(refused).to_string(),
            "initialize failed: error -32601: no"
        );
        assert_eq!(
            AttemptError::TimedOut(Duration::from_millis(300)).to_string(),
            "no answer within connectTimeoutMs (300 ms) over spawn, initialize and the first tools/list"
        );
        assert_eq!(
            AttemptError::FirstList(Failure::DeadlinePassed).to_string(),
            "the first tools/list failed: the deadline passed"
        );
        assert_eq!(
            AttemptError::ClosedWhileConnecting.to_string(),
            "the server closed the connection (or its process exited) while connecting"
        );
        assert_eq!(
            HandshakeError::Initialized(Failure::TransportClosedBeforeSend).to_string(),
            "sending notifications/initialized failed: the connection was closed before the request went out"
        );
        assert_eq!(
            HandshakeError::DiscoverRejected("2026-07-28").to_string(),
            "server/discover failed: the server rejected protocol version 2026-07-28 twice"
        );
    }

    #[test]
    fn a_stuck_generation_says_what_to_do() {
        let stuck = Stuck {
            generation: 4,
            within: Duration::from_secs(5),
        };
        assert_eq!(
            stuck.to_string(),
            "generation 4 did not close within 5 s (its process group may still be running); \
             reconnecting stopped so that two copies of the server never run at once; \
             end the stray process, then reconnect explicitly"
        );
    }

    #[test]
    fn config_errors_name_the_url_or_header_never_a_value() {
        let not_http = OpenError::NotHttp {
            url: "ftp://h/".into(),
            scheme: "ftp".into(),
        };
        assert_eq!(
            not_http.to_string(),
            "`ftp://h/` is not an http:// or https:// URL (scheme `ftp`)"
        );
        assert_eq!(
            OpenError::InvalidHeaderValue("X-Token".into()).to_string(),
            "the value of header `X-Token` is not a valid HTTP header value"
        );
    }
}
