//! The pass-through lane of a stdio server: tool calls whose request and answer stay JSON text,
//! sharing the child's pipes with rmcp's typed client.
//!
//! The lane owns the child's stdin and stdout. rmcp's client gets one end of an in-memory pipe:
//! what it writes is copied to the child's stdin line by line, and every line the child writes
//! reaches it, except the answers to the lane's own requests. Those carry ids of the lane's own
//! form (`"msv-N"`, strings, which rmcp never uses), are taken out by the reader and handed to
//! their caller with only the `result` cut out, never parsed into MCP types. So a relayed
//! `tools/call` is parsed once on the way in (to find its id) and copied, not deserialized and
//! serialized again on each side.
//!
//! A call whose caller wants progress gets a progress token of the lane's own in its `_meta`;
//! the server's progress notifications are not answers, so they reach rmcp's client, whose
//! handler routes them by that token to the caller.
//!
//! This module moves bytes and matches ids. It never decides what a failure means or whether to
//! send again (that is the call path's), and it never writes a partial line to the child.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use mcp_supervisor_core::classify::Failure;
use rmcp::model::{NumberOrString, ProgressToken};
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::value::RawValue;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, DuplexStream};
use tokio::process::{ChildStdin, ChildStdout};
use tokio::sync::oneshot;

use crate::link::CallOptions;

/// The longest line accepted from a server (rmcp's own limit); a longer one is dropped whole.
const MAX_LINE: usize = 16 * 1024 * 1024;

/// The in-memory pipe between the lane and rmcp's client.
const PIPE_BYTES: usize = 256 * 1024;

/// The prefix of the lane's request ids.
const ID_PREFIX: &str = "msv-";

type Answer = Result<Box<RawValue>, Failure>;

/// One generation's lane. Cheap to share; closed for good once the child's stdout ends.
pub(crate) struct Lane {
    stdin: tokio::sync::Mutex<Option<ChildStdin>>,
    /// `None` once the child's stdout has ended: no answer can come any more.
    pending: Mutex<Option<HashMap<u64, oneshot::Sender<Answer>>>>,
    next: AtomicU64,
}

/// Start the lane over a child's pipes. Returns the lane and rmcp's end of the pipe.
pub(crate) fn start(stdout: ChildStdout, stdin: ChildStdin) -> (Arc<Lane>, DuplexStream) {
    let lane = Arc::new(Lane {
        stdin: tokio::sync::Mutex::new(Some(stdin)),
        pending: Mutex::new(Some(HashMap::new())),
        next: AtomicU64::new(1),
    });
    let (rmcp_end, our_end) = tokio::io::duplex(PIPE_BYTES);
    let (from_rmcp, to_rmcp) = tokio::io::split(our_end);
    tokio::spawn(read_child(stdout, to_rmcp, lane.clone()));
    tokio::spawn(copy_rmcp(from_rmcp, lane.clone()));
    (lane, rmcp_end)
}

impl Lane {
    /// Send `method` with `params` (a JSON object) and wait for the answer's `result`, as JSON
    /// text. Ended by `opts.timeout` or `opts.cancel`, and by dropping the future: each sends
    /// `notifications/cancelled` to the server.
    pub(crate) async fn request(
        self: &Arc<Self>,
        method: &str,
        params: &RawValue,
        opts: &CallOptions,
    ) -> Result<Box<RawValue>, Failure> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        match self.pending.lock() {
            Ok(mut pending) => match pending.as_mut() {
                Some(map) => {
                    map.insert(id, tx);
                }
                None => return Err(Failure::TransportClosedBeforeSend),
            },
            Err(_) => return Err(Failure::TransportClosedBeforeSend),
        }
        let method = serde_json::to_string(method).map_err(|_| Failure::UnexpectedResponse)?;
        let params = params.get();
        let mut line = Vec::with_capacity(params.len() + method.len() + 64);
        line.extend_from_slice(br#"{"jsonrpc":"2.0","id":""#);
        line.extend_from_slice(ID_PREFIX.as_bytes());
        line.extend_from_slice(id.to_string().as_bytes());
        line.extend_from_slice(br#"","method":"#);
        line.extend_from_slice(method.as_bytes());
        line.extend_from_slice(br#","params":"#);
        line.extend_from_slice(params.as_bytes());
        line.extend_from_slice(b"}\n");
        if !self.write_line(&line).await {
            self.forget(id);
            return Err(Failure::TransportClosedBeforeSend);
        }
        let mut guard = CancelOnDrop {
            lane: Some(self.clone()),
            id,
        };
        let outcome = tokio::select! {
            answer = rx => answer,
            () = tokio::time::sleep(opts.timeout) => {
                guard.fire("the request timed out");
                return Err(Failure::DeadlinePassed);
            }
            () = opts.cancel.cancelled() => {
                guard.fire("cancelled by the caller");
                return Err(Failure::CancelledByCaller);
            }
        };
        guard.lane = None;
        match outcome {
            Ok(answer) => answer,
            // The reader ended (the child's stdout closed) with this request in flight.
            Err(_) => Err(Failure::ConnectionLostAfterSend),
        }
    }

    /// A progress token of the lane's own (`"msv-p-N"`: a string, which rmcp's client never
    /// uses for its tokens), for a request whose progress the caller wants.
    pub(crate) fn progress_token(&self) -> ProgressToken {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        ProgressToken(NumberOrString::String(format!("{ID_PREFIX}p-{n}").into()))
    }

    /// Write one whole line to the child; false when stdin is closed or the write failed.
    async fn write_line(&self, line: &[u8]) -> bool {
        let mut stdin = self.stdin.lock().await;
        let Some(pipe) = stdin.as_mut() else {
            return false;
        };
        if pipe.write_all(line).await.is_ok() && pipe.flush().await.is_ok() {
            return true;
        }
        // A broken pipe stays broken: close it so later writers fail at once.
        *stdin = None;
        false
    }

    /// Take the waiter of request `id`, if it is still waiting.
    fn take(&self, id: u64) -> Option<oneshot::Sender<Answer>> {
        self.pending
            .lock()
            .ok()
            .and_then(|mut p| p.as_mut().and_then(|map| map.remove(&id)))
    }

    fn forget(&self, id: u64) -> bool {
        self.take(id).is_some()
    }

    /// Hand an answer to its waiter; an id not waited for (a late answer to a request given up
    /// on) is dropped.
    fn deliver(&self, id: u64, answer: Answer) {
        if let Some(waiter) = self.take(id) {
            let _ = waiter.send(answer);
        }
    }

    /// No answer can come any more: fail every waiter and refuse new requests.
    fn close(&self) {
        if let Ok(mut pending) = self.pending.lock() {
            pending.take();
        }
    }
}

/// `params` (a JSON object) with `_meta.progressToken` set to `token`, the rest as it was;
/// `None` when `params` or its `_meta` is not an object.
pub(crate) fn with_progress_token(
    params: &RawValue,
    token: &ProgressToken,
) -> Option<Box<RawValue>> {
    let mut members: BTreeMap<&str, Cow<'_, RawValue>> = serde_json::from_str(params.get()).ok()?;
    let mut meta: serde_json::Map<String, serde_json::Value> = match members.get("_meta") {
        Some(meta) => serde_json::from_str(meta.get()).ok()?,
        None => serde_json::Map::new(),
    };
    meta.insert(
        "progressToken".to_string(),
        serde_json::to_value(token).ok()?,
    );
    let meta = serde_json::value::to_raw_value(&meta).ok()?;
    members.insert("_meta", Cow::Owned(meta));
    serde_json::value::to_raw_value(&members).ok()
}

/// Sends `notifications/cancelled` for a request given up on.
struct CancelOnDrop {
    lane: Option<Arc<Lane>>,
    id: u64,
}

impl CancelOnDrop {
    fn fire(&mut self, reason: &str) {
        let Some(lane) = self.lane.take() else { return };
        // Only if it is still waiting: an answer that already came needs no cancellation.
        if !lane.forget(self.id) {
            return;
        }
        let notification = serde_json::json!({
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": { "requestId": format!("{ID_PREFIX}{}", self.id), "reason": reason },
        });
        let mut line = notification.to_string().into_bytes();
        line.push(b'\n');
        tokio::spawn(async move {
            lane.write_line(&line).await;
        });
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.fire("the caller went away");
    }
}

/// What the reader looks at in every line, without building MCP types.
#[derive(Deserialize)]
struct Peek<'a> {
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(default)]
    method: Option<IgnoredAny>,
    #[serde(borrow, default)]
    result: Option<&'a RawValue>,
    #[serde(borrow, default)]
    error: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct ErrorObject {
    code: i32,
    #[serde(default)]
    message: String,
}

/// The lane's request number in an answer's id, if the id is one of the lane's.
fn lane_id(id: &RawValue) -> Option<u64> {
    let text = id.get();
    if !text.starts_with('"') {
        return None;
    }
    let id: Cow<'_, str> = serde_json::from_str(text).ok()?;
    id.strip_prefix(ID_PREFIX)?.parse().ok()
}

/// What to do with one line from the child.
enum Routed {
    /// An answer to the lane's request `id`.
    Lane(u64, Answer),
    /// Anything else: rmcp's.
    Rmcp,
}

fn route(line: &[u8]) -> Routed {
    let Ok(peek) = serde_json::from_slice::<Peek<'_>>(line) else {
        return Routed::Rmcp;
    };
    let Some(id) = peek.id.filter(|_| peek.method.is_none()).and_then(lane_id) else {
        return Routed::Rmcp;
    };
    let answer = match (peek.result, peek.error) {
        (Some(result), None) => Ok(result.to_owned()),
        (None, Some(error)) => match serde_json::from_str::<ErrorObject>(error.get()) {
            Ok(error) => Err(Failure::ServerError {
                code: error.code,
                message: error.message,
            }),
            Err(_) => Err(Failure::UnexpectedResponse),
        },
        _ => Err(Failure::UnexpectedResponse),
    };
    Routed::Lane(id, answer)
}

/// Read the child's stdout line by line: the lane's answers to their waiters, every other line
/// to rmcp. Ends when stdout ends; then rmcp sees its end of the pipe close too.
async fn read_child(
    stdout: ChildStdout,
    mut to_rmcp: tokio::io::WriteHalf<DuplexStream>,
    lane: Arc<Lane>,
) {
    // Small buffers: a proxy holds hundreds of these; a longer line only takes more reads.
    let mut reader = BufReader::new(stdout);
    let mut line = Vec::new();
    let mut too_long = false;
    loop {
        let (done, used) = {
            let available = match reader.fill_buf().await {
                Ok([]) | Err(_) => break,
                Ok(available) => available,
            };
            match available.iter().position(|b| *b == b'\n') {
                Some(at) => {
                    if !too_long && line.len() + at <= MAX_LINE {
                        line.extend_from_slice(&available[..at]);
                    } else {
                        too_long = true;
                    }
                    (true, at + 1)
                }
                None => {
                    if !too_long && line.len() + available.len() <= MAX_LINE {
                        line.extend_from_slice(available);
                    } else {
                        too_long = true;
                    }
                    (false, available.len())
                }
            }
        };
        reader.consume(used);
        if !done {
            continue;
        }
        if too_long {
            tracing::warn!("a line from the server exceeded {MAX_LINE} bytes and was dropped");
        } else if !line.iter().all(u8::is_ascii_whitespace) {
            match route(&line) {
                Routed::Lane(id, answer) => lane.deliver(id, answer),
                Routed::Rmcp => {
                    line.push(b'\n');
                    if to_rmcp.write_all(&line).await.is_err() {
                        break; // rmcp's client is gone
                    }
                }
            }
        }
        line.clear();
        too_long = false;
    }
    lane.close();
    let _ = to_rmcp.shutdown().await;
}

/// Copy what rmcp's client writes to the child's stdin, a whole line at a time so it never
/// interleaves with the lane's lines. When rmcp closes its end, the child's stdin is closed.
async fn copy_rmcp(from_rmcp: tokio::io::ReadHalf<DuplexStream>, lane: Arc<Lane>) {
    let mut reader = BufReader::new(from_rmcp);
    let mut line = Vec::new();
    loop {
        line.clear();
        match (&mut reader)
            .take(MAX_LINE as u64)
            .read_until(b'\n', &mut line)
            .await
        {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        if !line.ends_with(b"\n") {
            // rmcp only writes whole lines; a partial one means its end was dropped.
            break;
        }
        if !lane.write_line(&line).await {
            break;
        }
    }
    // Closing stdin is how a stdio server is asked to exit.
    lane.stdin.lock().await.take();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lane_answer(line: &str) -> Option<(u64, Answer)> {
        match route(line.as_bytes()) {
            Routed::Lane(id, answer) => Some((id, answer)),
            Routed::Rmcp => None,
        }
    }

    #[test]
    fn routes_only_answers_to_lane_ids() {
        let (id, answer) =
            lane_answer(r#"{"jsonrpc":"2.0","id":"msv-7","result":{"content":[]}}"#).unwrap();
        assert_eq!(id, 7);
        assert_eq!(answer.unwrap().get(), r#"{"content":[]}"#);

        // rmcp's own numeric ids, notifications, requests from the server, garbage: rmcp's.
        for line in [
            r#"{"jsonrpc":"2.0","id":7,"result":{}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{}}"#,
            r#"{"jsonrpc":"2.0","id":"msv-3","method":"roots/list"}"#,
            r#"{"jsonrpc":"2.0","id":"other-3","result":{}}"#,
            r#"{"jsonrpc":"2.0","id":"msv-x","result":{}}"#,
            "not json",
            "[1,2]",
        ] {
            assert!(lane_answer(line).is_none(), "{line}");
        }
    }

    #[test]
    fn a_progress_token_is_set_in_meta_and_the_rest_kept() {
        let token = ProgressToken(NumberOrString::String("msv-p-3".into()));
        let params: Box<RawValue> = serde_json::from_str(
            r#"{"name":"sleep","arguments":{"ms":5},"_meta":{"progressToken":0,"trace":"x"}}"#,
        )
        .unwrap();
        let out: serde_json::Value =
            serde_json::from_str(with_progress_token(&params, &token).unwrap().get()).unwrap();
        assert_eq!(
            out,
            serde_json::json!({"name": "sleep", "arguments": {"ms": 5},
                "_meta": {"progressToken": "msv-p-3", "trace": "x"}})
        );
        let bare: Box<RawValue> = serde_json::from_str(r#"{"name":"sleep"}"#).unwrap();
        let out: serde_json::Value =
            serde_json::from_str(with_progress_token(&bare, &token).unwrap().get()).unwrap();
        assert_eq!(out["_meta"]["progressToken"], "msv-p-3");
        for bad in [r#"[1]"#, r#"{"name":"x","_meta":[]}"#, r#""text""#] {
            let bad: Box<RawValue> = serde_json::from_str(bad).unwrap();
            assert!(with_progress_token(&bad, &token).is_none(), "{bad}");
        }
    }

    #[test]
    fn a_lane_error_answer_is_a_server_error() {
        let (_, answer) = lane_answer(
            r#"{"jsonrpc":"2.0","id":"msv-1","error":{"code":-32602,"message":"bad","data":1}}"#,
        )
        .unwrap();
        assert_eq!(
            answer.unwrap_err(),
            Failure::ServerError {
                code: -32602,
                message: "bad".into()
            }
        );
        let (_, answer) = lane_answer(r#"{"jsonrpc":"2.0","id":"msv-1"}"#).unwrap();
        assert_eq!(answer.unwrap_err(), Failure::UnexpectedResponse);
        // An escaped id is still ours.
        let (id, _) = lane_answer(r#"{"id":"msv\u002d9","result":1}"#).unwrap();
        assert_eq!(id, 9);
    }
}
