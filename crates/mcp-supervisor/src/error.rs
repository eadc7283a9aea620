//! The library's errors: each names the server (and tool), says what happened to the call, and
//! what to do next.
//!
//! Messages here must never contain a secret (env or header values); they quote only names,
//! states and causes.

use std::time::Duration;

/// Whether the connection was re-established after a failed call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Restored {
    /// A fresh generation is ready.
    Yes { generation: u64 },
    /// It is not (yet): the current state and the last cause.
    No { state: String },
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
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum CallError {
    #[error("no server offers a tool named \"{name}\"; list the tools to see what is published")]
    UnknownTool { name: String },

    #[error("server \"{server}\" is not ready to run \"{tool}\": it is {state}{}{}; the call did not run{}",
        last_error.as_ref().map(|e| format!(" (last error: {e})")).unwrap_or_default(),
        next_attempt_in.map(|d| format!(", next attempt in {} ms", d.as_millis())).unwrap_or_default(),
        hint(state))]
    NotReady {
        server: String,
        tool: String,
        state: String,
        last_error: Option<String>,
        next_attempt_in: Option<Duration>,
    },

    #[error(
        "server \"{server}\" answered \"{tool}\" with error {code}: {message} (the call was not retried)"
    )]
    ServerError {
        server: String,
        tool: String,
        code: i32,
        message: String,
        /// The error's `data`, as JSON text, when the server gave one.
        data: Option<String>,
    },

    #[error(
        "\"{tool}\" on server \"{server}\" timed out after {after_ms} ms; cancellation was sent upstream and the call may have run; the server is being probed"
    )]
    TimedOut {
        server: String,
        tool: String,
        after_ms: u128,
    },

    #[error("\"{tool}\" on server \"{server}\" did not run: {cause}; {restored}")]
    NotDelivered {
        server: String,
        tool: String,
        cause: String,
        restored: Restored,
    },

    #[error(
        "\"{tool}\" on server \"{server}\" may have run: {cause}; it was not sent again because the tool is not marked read-only or idempotent (list it in retryTools if repeating it is safe); {restored}"
    )]
    OutcomeUnknown {
        server: String,
        tool: String,
        cause: String,
        restored: Restored,
    },

    #[error(
        "\"{tool}\" on server \"{server}\" failed ({first}) and reconnecting failed too ({reconnect}); the call did not run again"
    )]
    ReconnectFailed {
        server: String,
        tool: String,
        first: String,
        reconnect: String,
    },

    #[error(
        "\"{tool}\" on server \"{server}\" was cancelled by the caller; cancellation was sent upstream"
    )]
    Cancelled { server: String, tool: String },

    #[error(
        "server \"{server}\" sent a reply to \"{tool}\" that is not a tool result: {detail} (not retried)"
    )]
    Malformed {
        server: String,
        tool: String,
        detail: String,
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
        _ => "",
    }
}

/// Errors of the library's front door other than calls.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("no server named \"{0}\" is configured")]
    UnknownServer(String),
    #[error("server \"{0}\" has stopped and takes no more requests")]
    Stopped(String),
    #[error(transparent)]
    Call(#[from] CallError),
}
