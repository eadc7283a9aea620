//! What a host chooses of the HTTP face, and its defaults: the path, the bounds, how ids are
//! sealed, and how it stops ([`Options`], [`Sealing`], [`Stopping`]).
//!
//! It never serves a request: the routes do, with what is chosen here.

use std::sync::Arc;
use std::time::Duration;

use serde_json::value::RawValue;
use tokio_util::sync::CancellationToken;

use crate::error_text;
use crate::seal;

/// The path the routes answer at.
pub const PATH: &str = "/mcp";

/// A session with no request, no call under way and no open stream for this long is ended
/// (the default of [`Options::session_idle`]).
pub const SESSION_IDLE: Duration = Duration::from_secs(300);

/// The largest POST body read (the default of [`Options::max_body`]).
pub const MAX_BODY: usize = 4 * 1024 * 1024;

/// How many standalone-stream events a session keeps (for replay, and while no stream is open).
pub const KEPT_EVENTS: usize = 256;

/// The most requests one session has in flight at once (as on the stdio face). Past it a
/// request is refused at once (HTTP 429 with a JSON-RPC error) rather than held: a POST that
/// waited would hold its connection and body, and the client could not tell it from a slow
/// call; refused, it knows to wait for its answers.
pub const SESSION_IN_FLIGHT: usize = crate::stdio::MAX_IN_FLIGHT;

/// The most sessionless (2026-07-28) requests in flight at once over the whole face: each is a
/// client of its own, so the bound is the face's.
pub const SESSIONLESS_IN_FLIGHT: usize = 16 * SESSION_IN_FLIGHT;

/// The most requests in flight at once over the whole face, sessions and sessionless together
/// (the default of [`Options::max_in_flight`]): each is a task, and sessions alone (up to 4,096
/// held, [`SESSION_IN_FLIGHT`] each) could make a million. Past it a request is refused at once
/// (HTTP 429), as past a session's own bound.
pub const FACE_IN_FLIGHT: usize = 32 * SESSION_IN_FLIGHT;

/// The reconnection delay an event stream asks for as it ends because the host stops (the
/// default of [`Stopping::retry`]).
pub const STOPPING_RETRY: Duration = Duration::from_millis(1000);

/// How session ids are sealed and for how long they open (SPEC §12).
pub struct Sealing {
    pub keys: seal::Keys,
    /// An id older than this opens no session (`sessionMaxAgeMs`).
    pub max_age: Duration,
}

/// When the host stops taking part (the end of its drain window, or its stop): calls still
/// running are answered with `answer(id)` and cancelled upstream, and event streams end with a
/// last event that asks the client to reconnect after `retry` (by then, to another replica).
#[derive(Clone, Debug)]
pub struct Stopping {
    /// Cancelled when the host stops taking part.
    pub token: CancellationToken,
    /// The answer to request `id` still running then.
    pub answer: fn(Option<&RawValue>) -> String,
    /// The reconnection delay of the streams' last event.
    pub retry: Duration,
}

impl Stopping {
    /// Stopping when `token` is cancelled, with the default answer and [`STOPPING_RETRY`].
    pub fn new(token: CancellationToken) -> Self {
        Self {
            token,
            answer: stopping_error,
            retry: STOPPING_RETRY,
        }
    }

    pub(crate) fn is_stopping(&self) -> bool {
        self.token.is_cancelled()
    }
}

/// The default answer to request `id` still running when the host stops.
pub fn stopping_error(id: Option<&RawValue>) -> String {
    error_text(
        id,
        -32000,
        "this server is stopping: the call was cancelled upstream and its outcome is unknown; \
         send it again if it is safe to repeat",
    )
}

/// How the face serves.
pub struct Options {
    /// How session ids are sealed, and for how long they open.
    pub sealing: Arc<Sealing>,
    /// Ends every session and stream when cancelled (the host's shutdown). Once it is, the
    /// routes' connections close and a server with graceful shutdown can finish.
    pub shutdown: CancellationToken,
    /// When calls still running are cut short; `None`: at `shutdown`.
    pub stopping: Option<Stopping>,
    /// A session idle this long is ended ([`SESSION_IDLE`]).
    pub session_idle: Duration,
    /// The largest POST body read ([`MAX_BODY`]); past it 413.
    pub max_body: usize,
    /// The most requests in flight at once over the face ([`FACE_IN_FLIGHT`]); past it 429.
    pub max_in_flight: usize,
    /// The face as an OAuth resource server (SPEC §14): every request needs a valid bearer
    /// token, whose identity owns the sessions it opens; the metadata is served. `None`: no
    /// token checks here (a host may guard the face in front).
    pub auth: Option<Arc<crate::auth::Verifier>>,
}

impl Options {
    /// Sessions sealed with `sealing`, a shutdown token of their own, and the defaults.
    pub fn new(sealing: impl Into<Arc<Sealing>>) -> Self {
        Self {
            sealing: sealing.into(),
            shutdown: CancellationToken::new(),
            stopping: None,
            session_idle: SESSION_IDLE,
            max_body: MAX_BODY,
            max_in_flight: FACE_IN_FLIGHT,
            auth: None,
        }
    }
}
