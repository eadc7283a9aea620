//! The failure classifier (SPEC §5): a normalized call failure to a verdict, and a verdict plus the
//! tool's replay safety to what the call path does next. Pure, exhaustive functions with no `_` arm,
//! so a new variant forces a decision; it never looks at a transport or a clock.

// === Failure and Verdict ===

/// A failure, normalized from whatever the transport said.
#[derive(Clone, Debug, PartialEq)]
pub enum Failure {
    /// No connection to send on.
    NoLiveGeneration,
    /// HTTP connect refused, DNS failure, or the connection could not be opened.
    ConnectRefused,
    /// HTTP 404 on a stale `Mcp-Session-Id`.
    SessionExpired,
    /// Another HTTP status from the transport.
    HttpStatus {
        status: u16,
        body: String,
        /// Whether the refused request carried a session id: only then can the body's words
        /// say the session is stale (SPEC §5).
        with_session: bool,
    },
    /// A JSON-RPC error the server answered.
    ServerError {
        code: i32,
        message: String,
        /// Its `data`, as JSON text, when it gave one.
        data: Option<String>,
    },
    /// The send failed: the request never left.
    TransportClosedBeforeSend,
    /// The connection broke after the request went out (stdio EOF mid-call, HTTP stream cut).
    ConnectionLostAfterSend,
    /// Anything else from the transport.
    TransportError {
        message: String,
        connection_closed: bool,
    },
    /// The call's deadline passed.
    DeadlinePassed,
    /// The caller cancelled the call.
    CancelledByCaller,
    /// A well-formed reply of the wrong type.
    UnexpectedResponse,
    /// The server refused the request for want of authorization (HTTP 401, or 403 for
    /// scope), and no token could be had; `message` says what to do. Not a broken connection.
    Unauthorized { message: String },
}

/// What a failure tells about the call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The server ran (or refused) the call and said so: return its answer.
    ServerAnswered,
    /// The deadline passed: cancel upstream and probe, but do not reconnect by itself.
    DeadlinePassed,
    /// The server did not run the call: safe to send again on a fresh generation.
    NotDelivered,
    /// The request went out and the connection broke: the server may have run it.
    OutcomeUnknown,
    /// A transport error with the connection still open: probe to learn more.
    Unclear,
    /// The caller gave up.
    Aborted,
    /// The server answered with something that is not a valid reply.
    Malformed,
}

/// How servers say "I do not know your session" in words rather than with a 404
/// (server-everything: 400 "No valid session ID provided"). Matched case-insensitively, and only
/// in a non-2xx HTTP response to a request that carried a session id: a JSON-RPC error that
/// answers a request is that server's answer whatever its words (a browser or database tool's
/// "Session not found" is about its own sessions, and it may have done its work).
pub const STALE_SESSION_PHRASES: [&str; 3] = [
    "no valid session id provided",
    "server not initialized",
    "session not found",
];

/// Whether `text` says, in one of the known phrasings, that the session is stale.
pub fn mentions_stale_session(text: &str) -> bool {
    let lower = text.to_lowercase();
    STALE_SESSION_PHRASES
        .iter()
        .any(|phrase| lower.contains(phrase))
}

/// Classifies one failure (SPEC §5, outcome 4 and the cases before it).
pub fn classify(f: &Failure) -> Verdict {
    match f {
        Failure::NoLiveGeneration
        | Failure::ConnectRefused
        | Failure::SessionExpired
        | Failure::TransportClosedBeforeSend => Verdict::NotDelivered,
        // Outcome 2, whatever the message says: the server answered this request.
        Failure::ServerError { .. } => Verdict::ServerAnswered,
        Failure::HttpStatus { status: 404, .. } => Verdict::NotDelivered,
        Failure::HttpStatus {
            body,
            with_session: true,
            ..
        } if mentions_stale_session(body) => Verdict::NotDelivered,
        Failure::HttpStatus { .. } => Verdict::Unclear,
        Failure::ConnectionLostAfterSend => Verdict::OutcomeUnknown,
        Failure::TransportError {
            connection_closed, ..
        } => {
            if *connection_closed {
                Verdict::OutcomeUnknown
            } else {
                Verdict::Unclear
            }
        }
        Failure::DeadlinePassed => Verdict::DeadlinePassed,
        Failure::CancelledByCaller => Verdict::Aborted,
        Failure::UnexpectedResponse => Verdict::Malformed,
        // The server answered: the request was refused before it ran; reconnecting cannot help.
        Failure::Unauthorized { .. } => Verdict::ServerAnswered,
    }
}

// === Replay rule ===

/// What makes a tool safe to run twice.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ToolSafety {
    /// The tool is annotated `readOnlyHint: true`.
    pub read_only: bool,
    /// The tool is annotated `idempotentHint: true`.
    pub idempotent: bool,
    /// The tool is listed in the server's `retryTools`.
    pub listed_in_retry_tools: bool,
}

impl ToolSafety {
    /// Whether a call whose outcome is unknown may be sent again.
    pub fn replay_safe(&self) -> bool {
        self.read_only || self.idempotent || self.listed_in_retry_tools
    }
}

/// What the call path does next, right after a failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recovery {
    /// Hand the failure to the caller as it is.
    Return,
    /// Reconnect, then send the call again on the fresh generation, once.
    ReconnectAndSend,
    /// Reconnect, then fail the call: its outcome is unknown and it is not safe to replay.
    ReconnectAndFailUnknown,
    /// Ping the server (5 s), then decide with [`after_probe`].
    Probe,
}

/// The first step of recovery for a verdict (SPEC §5).
pub fn recovery(verdict: Verdict, safety: ToolSafety) -> Recovery {
    match verdict {
        Verdict::NotDelivered => Recovery::ReconnectAndSend,
        Verdict::OutcomeUnknown => {
            if safety.replay_safe() {
                Recovery::ReconnectAndSend
            } else {
                Recovery::ReconnectAndFailUnknown
            }
        }
        Verdict::Unclear => Recovery::Probe,
        Verdict::ServerAnswered
        | Verdict::DeadlinePassed
        | Verdict::Aborted
        | Verdict::Malformed => Recovery::Return,
    }
}

/// What follows a [`Recovery::Probe`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AfterProbe {
    /// The server is alive and the tool is safe to replay: send again on the same generation.
    SendAgain,
    /// The server is alive but the tool is not safe to replay: fail with "outcome unknown"
    /// (the connection is fine).
    FailUnknown,
    /// The server is dead: recover as for a lost connection.
    Reconnect(Recovery),
}

/// After the probe of an unclear failure: alive → send again in place under the replay rule; dead →
/// reconnect, under the same rule.
pub fn after_probe(alive: bool, safety: ToolSafety) -> AfterProbe {
    match (alive, safety.replay_safe()) {
        (true, true) => AfterProbe::SendAgain,
        (true, false) => AfterProbe::FailUnknown,
        (false, _) => AfterProbe::Reconnect(recovery(Verdict::OutcomeUnknown, safety)),
    }
}
