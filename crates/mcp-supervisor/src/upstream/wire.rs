//! The seam between the JSON-RPC peer of one generation (`rpc`) and the transport that
//! carries its messages: a stdio child's pipes, or a streamable-HTTP endpoint.
//!
//! A wire moves JSON-RPC messages as JSON text, whole. It reports what it saw of each send
//! (went out, or not, and why) in the normalized [`Failure`] the classifier judges, from the
//! transport's own error kinds. It never parses a message beyond what framing needs (for HTTP,
//! the id of an answer on a request's own event stream), never retries a send and never decides
//! what a failure means.

use mcp_supervisor_core::classify::Failure;
use tokio::sync::mpsc;

use crate::link::BoxFuture;

/// What a wire hands to its peer.
#[derive(Debug)]
pub enum Incoming {
    /// One JSON-RPC message from the server, as it came.
    Message {
        /// The message's JSON text.
        text: String,
        /// The peer's id of the request on whose own response stream this message came
        /// (streamable HTTP), so a server's request can go to the client whose call caused it.
        related: Option<u64>,
    },
    /// Request `id`'s response stream ended before its answer came.
    Lost {
        /// The peer's id of the request.
        id: u64,
        /// What became of it: whether it went out, and why no answer came.
        failure: Failure,
    },
}

/// Where a wire that runs apart from its peer (streamable HTTP, legacy SSE) sends what it
/// receives. The wire's end being dropped (every sender gone) means no message can come any
/// more: the generation's connection ended. (The stdio wire hands each line to its peer
/// directly.) Bounded at [`INCOMING`]: when the peer falls behind, the wire waits before it
/// reads on, so a server that floods is held back by its own connection, not by our memory.
pub type IncomingTx = mpsc::Sender<Incoming>;

/// The receiving end of [`IncomingTx`].
pub type IncomingRx = mpsc::Receiver<Incoming>;

/// How many received messages may wait for the peer before the wire stops reading.
pub const INCOMING: usize = 1024;

/// A new queue for what a wire receives, bounded at [`INCOMING`].
pub fn incoming() -> (IncomingTx, IncomingRx) {
    mpsc::channel(INCOMING)
}

/// What became of a [`Wire::post`].
pub enum Posted {
    /// Queued: a failed write will fail the request through its peer. Says whether it went
    /// out, once the writer knows (read it only when needed: it wakes no one otherwise).
    Queued(tokio::sync::oneshot::Receiver<bool>),
    /// The wire is closed: nothing went out.
    Closed,
    /// This wire does not post: here is the text back.
    NotOffered(String),
}

/// One generation's transport.
pub trait Wire: Send + Sync + 'static {
    /// Send one whole JSON-RPC message. `request` is the peer's id when the message is a
    /// request (its ids are JSON integers). Resolves once the message went out (stdio: written;
    /// HTTP: the POST was accepted) with any answer or stream arriving later as [`Incoming`], or
    /// with the failure that says whether it went out.
    fn send(&self, text: String, request: Option<u64>) -> BoxFuture<'_, Result<(), Failure>>;

    /// [`Wire::send`] with HTTP headers that mirror the message (`Mcp-Method`, `Mcp-Name`,
    /// `Mcp-Param-*`); a wire that has no headers ignores them.
    fn send_with(
        &self,
        text: String,
        request: Option<u64>,
        _headers: Vec<(String, String)>,
    ) -> BoxFuture<'_, Result<(), Failure>> {
        self.send(text, request)
    }

    /// [`Wire::send_with`] for a request that nothing else of the peer's waits beside (the
    /// only one outstanding): a wire that gathers what is sent together into one write writes
    /// this one at once instead, since nothing is coming to join it.
    fn send_alone(
        &self,
        text: String,
        request: Option<u64>,
        headers: Vec<(String, String)>,
    ) -> BoxFuture<'_, Result<(), Failure>> {
        self.send_with(text, request, headers)
    }

    /// Queue request `request` to go out without waiting until it did: the caller waits only
    /// for its answer, and a write that fails fails the request through the peer (as
    /// [`Incoming::Lost`] with [`Failure::TransportClosedBeforeSend`]); whether it went out is
    /// also kept for the caller to ask if the connection ends first. A wire that cannot gives
    /// the text back, and the peer sends it with [`Wire::send_with`].
    fn post(&self, text: String, _request: u64) -> Posted {
        Posted::NotOffered(text)
    }

    /// Whether [`Wire::send_with`] uses its headers (so they are worth working out).
    fn takes_headers(&self) -> bool {
        false
    }

    /// Send `MCP-Protocol-Version: version` on every message from now on (`None`: stop), without
    /// the handshake being done (the stateless era has none). stdio ignores it.
    fn protocol(&self, _version: Option<&str>) {}

    /// The handshake is done: `protocol_version` was agreed. HTTP sends it as
    /// `MCP-Protocol-Version` from now on and opens its standalone event stream; stdio ignores it.
    fn initialized(&self, _protocol_version: &str) {}

    /// Stop sending and receiving (HTTP: end the session with DELETE, best effort, bounded,
    /// unless the session is only let go of). A stdio wire is closed by ending its process.
    fn close(&self) {}

    /// The transport's session id (streamable HTTP's `Mcp-Session-Id`), once it has one.
    fn session_id(&self) -> Option<String> {
        None
    }
}
