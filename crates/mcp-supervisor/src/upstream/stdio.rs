//! The stdio wire of one generation: JSON-RPC messages as lines on the child's stdin and
//! stdout.
//!
//! It frames lines (tokio-util's line codec, with a length limit) and nothing else: every line
//! from the child goes to the peer as it came, every message to the child is written as one whole
//! line. It never parses a message, and never writes a partial line.

use std::sync::{Arc, Weak};

use futures::StreamExt;
use mcp_supervisor_core::classify::Failure;
use tokio::io::AsyncWriteExt;
use tokio::process::{ChildStdin, ChildStdout};
use tokio_util::codec::{AnyDelimiterCodec, AnyDelimiterCodecError, FramedRead};

use super::rpc::Peer;
use super::wire::{Incoming, Wire};
use crate::link::BoxFuture;

/// The longest line accepted from a server; a longer one is dropped whole.
pub(crate) const MAX_LINE: usize = 16 * 1024 * 1024;

/// The child's stdin, shared by every sender.
pub(crate) struct StdioWire {
    stdin: tokio::sync::Mutex<Option<ChildStdin>>,
}

impl StdioWire {
    /// The wire over the child's stdin; [`StdioWire::read_into`] reads its stdout.
    pub fn new(stdin: ChildStdin) -> Arc<Self> {
        Arc::new(Self {
            stdin: tokio::sync::Mutex::new(Some(stdin)),
        })
    }

    /// Read `stdout` line by line straight into `peer` (no hop between), and end the peer when
    /// stdout ends.
    pub(crate) fn read_into(stdout: ChildStdout, peer: Weak<Peer>) {
        tokio::spawn(read(stdout, peer));
    }

    /// Close stdin: how a stdio server is asked to exit.
    pub async fn close_stdin(&self) {
        self.stdin.lock().await.take();
    }
}

impl Wire for StdioWire {
    fn send(&self, text: String, _request: Option<u64>) -> BoxFuture<'_, Result<(), Failure>> {
        Box::pin(async move {
            let mut line = one_line(text).into_bytes();
            line.push(b'\n');
            let mut stdin = self.stdin.lock().await;
            let Some(pipe) = stdin.as_mut() else {
                return Err(Failure::TransportClosedBeforeSend);
            };
            if pipe.write_all(&line).await.is_ok() && pipe.flush().await.is_ok() {
                return Ok(());
            }
            // A broken pipe stays broken: close it so later senders fail at once.
            *stdin = None;
            Err(Failure::TransportClosedBeforeSend)
        })
    }
}

/// A JSON text on one line. Outside strings (which cannot hold a raw line break) a line break is
/// only whitespace, so it becomes a space: the message is the same, the framing stays whole.
pub fn one_line(text: String) -> String {
    if text.contains(['\n', '\r']) {
        text.replace(['\n', '\r'], " ")
    } else {
        text
    }
}

async fn read(stdout: ChildStdout, peer: Weak<Peer>) {
    let codec = AnyDelimiterCodec::new_with_max_length(b"\n".to_vec(), Vec::new(), MAX_LINE);
    let mut lines = FramedRead::new(stdout, codec);
    while let Some(line) = lines.next().await {
        match line {
            Ok(line) => {
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                let Ok(text) = String::from_utf8(line.to_vec()) else {
                    tracing::warn!("dropped a line from the server that is not UTF-8");
                    continue;
                };
                let Some(peer) = peer.upgrade() else {
                    return; // the generation is gone
                };
                peer.deliver(Incoming::Message {
                    text,
                    related: None,
                });
            }
            Err(AnyDelimiterCodecError::MaxChunkLengthExceeded) => {
                tracing::warn!("a line from the server exceeded {MAX_LINE} bytes and was dropped");
            }
            Err(AnyDelimiterCodecError::Io(error)) => {
                tracing::debug!("reading the server's stdout failed: {error}");
                break;
            }
        }
    }
    if let Some(peer) = peer.upgrade() {
        peer.end();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_breaks_between_tokens_become_spaces() {
        assert_eq!(one_line("{\n \"a\": 1\r\n}".into()), "{  \"a\": 1  }");
        let same = r#"{"a":"x\ny"}"#.to_string();
        assert_eq!(one_line(same.clone()), same);
    }
}
