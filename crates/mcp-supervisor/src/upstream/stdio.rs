//! The stdio wire of one generation: JSON-RPC messages as lines on the child's stdin and
//! stdout.
//!
//! It frames lines ([`super::lines`], with a length limit) and nothing else: every line
//! from the child goes to the peer as it came, every message to the child is written as one whole
//! line. It never parses a message, and never writes a partial line.
//!
//! One task writes the child's stdin, in the order the lines were sent: what is waiting when it
//! writes goes out in one write, so calls sent together wake the server once. A request sent
//! alone (the only one outstanding: nothing is coming to share its write) is written by its own
//! sender when the pipe is free and nothing waits, in one non-blocking attempt, so it costs no
//! hand-off; what that attempt does not write goes to the writer task, first in line, so a line
//! is never left half written, even when its sender is dropped. A request sent among others is
//! posted: its sender does not wait for the write (it waits for the answer), and a write that
//! fails fails it through its peer, so the write costs its call no wake-up of its own.

use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::task::Poll;

use futures::StreamExt;
use mcp_supervisor_core::classify::Failure;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::process::ChildStdin;
use tokio::sync::{mpsc, oneshot};
use tokio_util::codec::FramedRead;

use super::lines::{LineCodec, LineError, one_line};
use super::rpc::Peer;
use super::wire::{Incoming, Posted, Wire};
use crate::link::BoxFuture;

/// The longest line accepted from a server; a longer one is dropped whole.
pub(crate) const MAX_LINE: usize = 16 * 1024 * 1024;

/// A batch buffer larger than this after a write is given back rather than kept.
const KEEP_BATCH: usize = 1024 * 1024;

/// The child's stdin, shared by every sender: its writer task's queue, and the pipe itself.
pub(crate) struct StdioWire {
    /// The writer task's queue. Unbounded, and bounded by its senders: every order has one
    /// that waits for what becomes of it (a write's outcome, a posted request's answer, the
    /// close), so what waits is at most a line per request in flight (bounded by the callers:
    /// the front's requests in flight per client, a host's own calls), one notification (the
    /// peer sends them one after another from its bounded outbox), and a line per answer to a
    /// server's request. A server that stops reading its stdin holds them until its calls'
    /// deadlines pass and the misses they count replace it (`health.failures`).
    orders: mpsc::UnboundedSender<Order>,
    shared: Arc<Shared>,
}

/// What the senders and the writer task share.
struct Shared {
    /// The pipe (`None` once closed or broken), held by whoever writes.
    pipe: tokio::sync::Mutex<Option<Pipe>>,
    /// Orders sent and not yet taken, under the pipe's lock, by the writer task: a sender
    /// writes for itself only when none wait, so nothing overtakes a line sent before.
    queued: AtomicUsize,
    /// The peer that reads the answers: a posted request whose write fails is failed there.
    peer: std::sync::OnceLock<Weak<Peer>>,
}

type Pipe = Box<dyn AsyncWrite + Unpin + Send>;

/// What the writer task is asked to do, in order.
enum Order {
    /// Write this line (with its line break); say whether it went out. A posted request's
    /// line carries its id: its sender hears only when asked, so a failed write is also told
    /// to the peer, which fails the request.
    Line(Vec<u8>, oneshot::Sender<bool>, Option<u64>),
    /// Close stdin once everything sent before is written; say when done.
    Close(oneshot::Sender<()>),
}

impl StdioWire {
    /// The wire over the child's stdin (its writer task starts here); [`StdioWire::read_into`]
    /// reads its stdout.
    pub fn new(stdin: ChildStdin) -> Arc<Self> {
        Self::over(stdin)
    }

    /// The wire over any pipe (tests write to one of their own).
    fn over<W: AsyncWrite + Unpin + Send + 'static>(stdin: W) -> Arc<Self> {
        // Unbounded: bounded by its senders (see `StdioWire::orders`).
        let (orders, queue) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            pipe: tokio::sync::Mutex::new(Some(Box::new(stdin))),
            queued: AtomicUsize::new(0),
            peer: std::sync::OnceLock::new(),
        });
        tokio::spawn(write_lines(shared.clone(), queue));
        Arc::new(Self { orders, shared })
    }

    /// Queue an order for the writer task.
    fn order(&self, order: Order) -> bool {
        self.shared.queued.fetch_add(1, Ordering::SeqCst);
        if self.orders.send(order).is_ok() {
            return true;
        }
        self.shared.queued.fetch_sub(1, Ordering::SeqCst);
        false
    }

    /// Queue `line` for the writer task: what says when it went out, or `None` when the wire
    /// is closed.
    fn queue_line(&self, line: Vec<u8>) -> Option<oneshot::Receiver<bool>> {
        let (done, written) = oneshot::channel();
        self.order(Order::Line(line, done, None)).then_some(written)
    }

    /// Queue `line` and wait until the writer task wrote it.
    async fn queued_line(&self, line: Vec<u8>) -> Result<(), Failure> {
        went_out(self.queue_line(line)).await
    }

    /// Read `stdout` line by line straight into `peer` (no hop between), and end the peer when
    /// stdout ends.
    pub(crate) fn read_into<R: AsyncRead + Unpin + Send + 'static>(
        &self,
        stdout: R,
        peer: Weak<Peer>,
    ) {
        let _ = self.shared.peer.set(peer.clone());
        tokio::spawn(read(stdout, peer));
    }

    /// Close stdin (after the lines already sent): how a stdio server is asked to exit.
    pub async fn close_stdin(&self) {
        let (done, closed) = oneshot::channel();
        if self.order(Order::Close(done)) {
            let _ = closed.await;
        }
    }
}

impl Wire for StdioWire {
    fn send(&self, text: String, _request: Option<u64>) -> BoxFuture<'_, Result<(), Failure>> {
        Box::pin(async move { self.queued_line(line_of(text)).await })
    }

    fn post(&self, text: String, request: u64) -> Posted {
        if self.shared.peer.get().is_none() {
            return Posted::NotOffered(text);
        }
        let (done, written) = oneshot::channel();
        match self.order(Order::Line(line_of(text), done, Some(request))) {
            true => Posted::Queued(written),
            false => Posted::Closed,
        }
    }

    fn send_alone(
        &self,
        text: String,
        _request: Option<u64>,
        _headers: Vec<(String, String)>,
    ) -> BoxFuture<'_, Result<(), Failure>> {
        Box::pin(async move {
            let mut line = line_of(text);
            let waiting = || self.shared.queued.load(Ordering::SeqCst) > 0;
            if waiting() {
                return self.queued_line(line).await;
            }
            let Ok(mut pipe) = self.shared.pipe.try_lock() else {
                return self.queued_line(line).await;
            };
            if waiting() {
                drop(pipe);
                return self.queued_line(line).await;
            }
            let Some(stdin) = pipe.as_mut() else {
                return Err(Failure::TransportClosedBeforeSend);
            };
            // One attempt, with no await between its start and its end: a sender dropped
            // here leaves no half line behind.
            match write_once(stdin, &line).await {
                Some(Ok(n)) if n == line.len() => {
                    let _ = flush_once(stdin).await;
                    Ok(())
                }
                Some(Err(_)) => {
                    *pipe = None;
                    Err(Failure::TransportClosedBeforeSend)
                }
                // Partly written, or the pipe is full: the writer task writes the rest, first
                // in line (queued while the pipe is still held).
                written => {
                    let n = match written {
                        Some(Ok(n)) => n,
                        _ => 0,
                    };
                    line.drain(..n);
                    let written = self.queue_line(line);
                    drop(pipe);
                    went_out(written).await
                }
            }
        })
    }
}

/// Whether a queued line went out (`None`: it was not queued, the wire is closed).
async fn went_out(written: Option<oneshot::Receiver<bool>>) -> Result<(), Failure> {
    let Some(written) = written else {
        return Err(Failure::TransportClosedBeforeSend);
    };
    match written.await {
        Ok(true) => Ok(()),
        _ => Err(Failure::TransportClosedBeforeSend),
    }
}

/// A message as one line of bytes, with its line break.
fn line_of(text: String) -> Vec<u8> {
    let mut line = one_line(text).into_bytes();
    line.push(b'\n');
    line
}

/// One non-blocking write of `buf`: how much went out, or `None` when the pipe is full.
async fn write_once(pipe: &mut Pipe, buf: &[u8]) -> Option<std::io::Result<usize>> {
    std::future::poll_fn(|cx| {
        Poll::Ready(match Pin::new(&mut *pipe).poll_write(cx, buf) {
            Poll::Ready(written) => Some(written),
            Poll::Pending => None,
        })
    })
    .await
}

/// One non-blocking flush (a pipe has nothing to flush; a buffered writer might).
async fn flush_once(pipe: &mut Pipe) -> Option<std::io::Result<()>> {
    std::future::poll_fn(|cx| {
        Poll::Ready(match Pin::new(&mut *pipe).poll_flush(cx) {
            Poll::Ready(flushed) => Some(flushed),
            Poll::Pending => None,
        })
    })
    .await
}

/// Write the lines sent to the wire until every sender is gone (the wire is dropped): all that
/// is waiting in one write. A broken pipe stays broken: it is closed, and every later line
/// fails at once.
async fn write_lines(shared: Arc<Shared>, mut orders: mpsc::UnboundedReceiver<Order>) {
    let mut batch = Vec::new();
    let mut senders = Vec::new();
    while let Some(first) = orders.recv().await {
        let mut close = None;
        let mut next = Some(first);
        let mut taken = 0;
        let mut yielded = false;
        loop {
            match next.take() {
                Some(Order::Line(line, done, posted)) => {
                    taken += 1;
                    batch.extend_from_slice(&line);
                    senders.push((done, posted));
                }
                Some(Order::Close(done)) => {
                    taken += 1;
                    close = Some(done);
                    break;
                }
                // Nothing more waiting: let the tasks already running have their turn once
                // (calls that came together may be sent from tasks of their own, as the HTTP
                // face's are), then write.
                None if !yielded => {
                    yielded = true;
                    turn().await;
                }
                None => break,
            }
            next = orders.try_recv().ok();
        }
        let mut pipe = shared.pipe.lock().await;
        // Taken under the lock: a sender that writes for itself comes after these.
        shared.queued.fetch_sub(taken, Ordering::SeqCst);
        if !batch.is_empty() {
            let written = match pipe.as_mut() {
                Some(stdin) => stdin.write_all(&batch).await.is_ok() && stdin.flush().await.is_ok(),
                None => false,
            };
            if !written {
                *pipe = None;
            }
            // Told only of a failed write: the peer fails each posted request in it.
            let peer = match written {
                true => None,
                false => shared.peer.get().and_then(Weak::upgrade),
            };
            for (done, posted) in senders.drain(..) {
                let _ = done.send(written);
                if let (Some(peer), Some(id)) = (&peer, posted) {
                    peer.deliver(Incoming::Lost {
                        id,
                        failure: Failure::TransportClosedBeforeSend,
                    });
                }
            }
            batch.clear();
            if batch.capacity() > KEEP_BATCH {
                batch = Vec::new();
            }
        }
        if let Some(done) = close {
            *pipe = None;
            let _ = done.send(());
        }
    }
}

async fn read<R: AsyncRead + Unpin>(stdout: R, peer: Weak<Peer>) {
    let mut lines = FramedRead::with_capacity(stdout, LineCodec::new(MAX_LINE), 64 * 1024);
    while let Some(line) = lines.next().await {
        match line {
            Ok(line) => {
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                // Read where it lies in the buffer: the peer copies only what it keeps.
                let Ok(text) = std::str::from_utf8(&line) else {
                    tracing::warn!("dropped a line from the server that is not UTF-8");
                    continue;
                };
                let Some(peer) = peer.upgrade() else {
                    return; // the generation is gone
                };
                peer.receive(text, None);
            }
            Err(LineError::TooLong) => {
                tracing::warn!("a line from the server exceeded {MAX_LINE} bytes and was dropped");
            }
            Err(LineError::Io(error)) => {
                tracing::debug!("reading the server's stdout failed: {error}");
                break;
            }
        }
    }
    if let Some(peer) = peer.upgrade() {
        peer.end();
    }
}

/// Let every task already scheduled run once, then go on: unlike `yield_now`, it does not wait
/// for the runtime's next look at the I/O driver (a system call each time).
async fn turn() {
    let mut first = true;
    std::future::poll_fn(|cx| {
        if std::mem::replace(&mut first, false) {
            cx.waker().wake_by_ref();
            return std::task::Poll::Pending;
        }
        std::task::Poll::Ready(())
    })
    .await;
}

#[cfg(test)]
mod tests {
    use mcp_supervisor_testkit::writes::Writes;

    use super::*;

    /// Lines sent together from tasks of their own (as calls read together are) go out in one
    /// write, each whole, and every sender hears that its line went out. One worker, so the
    /// order of the tasks is the runtime's own (the woken writer runs next, ahead of the tasks
    /// already waiting).
    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn lines_sent_together_go_out_in_one_write() {
        let pipe = Writes::default();
        let wire = StdioWire::over(pipe.clone());
        // First a lone line: once it is written, the writer waits for the next.
        assert!(wire.send("{}".into(), None).await.is_ok());
        let sends = {
            let wire = wire.clone();
            tokio::spawn(async move {
                let sends: Vec<_> = (0..10)
                    .map(|i| {
                        let wire = wire.clone();
                        tokio::spawn(
                            async move { wire.send(format!("{{\"id\":{i}}}"), None).await },
                        )
                    })
                    .collect();
                sends
            })
        }
        .await
        .expect("the spawner");
        for send in sends {
            assert!(send.await.expect("a sender").is_ok(), "every line went out");
        }
        let writes = pipe.taken();
        assert_eq!(
            writes.len(),
            2,
            "one write for the lines sent together: {writes:?}"
        );
        assert_eq!(writes[1].lines().count(), 10, "each line whole: {writes:?}");
        assert!(writes[1].ends_with('\n'));
    }

    /// A broken pipe fails the send as not sent, and every later one at once; closing stdin
    /// after a line writes the line first.
    #[tokio::test]
    async fn a_broken_pipe_fails_sends_and_close_comes_after_the_lines() {
        let broken = StdioWire::over(Writes::broken());
        for _ in 0..2 {
            assert!(matches!(
                broken.send("{}".into(), None).await,
                Err(Failure::TransportClosedBeforeSend)
            ));
        }
        let pipe = Writes::default();
        let wire = StdioWire::over(pipe.clone());
        assert!(wire.send("{\"a\":\n1}".into(), None).await.is_ok());
        wire.close_stdin().await;
        assert_eq!(pipe.taken(), vec!["{\"a\": 1}\n".to_string()]);
        assert!(matches!(
            wire.send("{}".into(), None).await,
            Err(Failure::TransportClosedBeforeSend)
        ));
    }

    /// Requests sent while another waits for its answer are posted: their senders wait only
    /// for the answers. When their write fails they are failed at once as not sent (a call
    /// that may be sent again), not left to their deadline, and not taken for sent.
    #[tokio::test(start_paused = true)]
    async fn posted_requests_whose_write_fails_fail_at_once_as_not_sent() {
        // It takes the first write and breaks then, as a dying server's stdin does.
        let pipe = Writes::breaks_after(1);
        let wire = StdioWire::over(pipe.clone());
        let (queue, _events) = crate::link::EventQueue::new("s".into(), crate::link::EVENTS);
        let peer = Peer::start(
            wire.clone(),
            None,
            Arc::new(crate::link::Refuse),
            queue.for_generation(1),
            std::time::Duration::from_secs(5),
        );
        // The server's stdout stays open and says nothing.
        let (_server, stdout) = tokio::io::duplex(64);
        wire.read_into(stdout, Arc::downgrade(&peer));
        let options = || crate::link::CallOptions::new(std::time::Duration::from_secs(60));
        let started = tokio::time::Instant::now();
        // The first goes out (alone, written by its sender) and waits for an answer.
        let first = {
            let peer = peer.clone();
            tokio::spawn(async move { peer.request_with("a", None, options(), Vec::new()).await })
        };
        tokio::task::yield_now().await;
        assert_eq!(pipe.taken().len(), 1, "the first was written");
        let others = futures::future::join_all(
            (0..3).map(|_| peer.request_with("b", None, options(), Vec::new())),
        )
        .await;
        for outcome in others {
            assert!(
                matches!(outcome, Err(Failure::TransportClosedBeforeSend)),
                "{outcome:?}"
            );
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(1),
            "failed when the write failed, not at the deadline"
        );
        assert!(!first.is_finished(), "the first still waits for its answer");
        first.abort();
    }

    /// A pipe that takes at most 3 bytes a write, as a full pipe would take part of a line.
    #[derive(Clone, Default)]
    struct Narrow(Arc<std::sync::Mutex<Vec<u8>>>);

    impl AsyncWrite for Narrow {
        fn poll_write(
            self: Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &[u8],
        ) -> Poll<std::io::Result<usize>> {
            let n = buf.len().min(3);
            self.0.lock().unwrap().extend_from_slice(&buf[..n]);
            Poll::Ready(Ok(n))
        }

        fn poll_flush(
            self: Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(
            self: Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    /// A request sent alone is written by its sender, at once and in one write, with no writer
    /// task's turn: the writer is never woken.
    #[tokio::test(flavor = "current_thread")]
    async fn a_request_sent_alone_is_written_by_its_sender() {
        let pipe = Writes::default();
        let wire = StdioWire::over(pipe.clone());
        let sent = wire.send_alone("{\"id\":1}".into(), Some(1), Vec::new());
        // Done in its first poll: nothing else ran.
        assert!(matches!(
            futures::FutureExt::now_or_never(sent),
            Some(Ok(()))
        ));
        assert_eq!(pipe.taken(), vec!["{\"id\":1}\n".to_string()]);
    }

    /// What a sender's one attempt does not write goes to the writer task, first in line and
    /// whole, even when the sender is dropped at once; and a line sent alone never overtakes a
    /// line sent before it that is still queued.
    #[tokio::test(flavor = "current_thread")]
    async fn a_line_partly_written_is_finished_by_the_writer_in_order() {
        let pipe = Narrow::default();
        let wire = StdioWire::over(pipe.clone());
        let first = wire.send_alone("{\"id\":1}".into(), Some(1), Vec::new());
        // Its first poll writes 3 bytes and hands the rest on; then the sender is dropped.
        assert!(futures::FutureExt::now_or_never(first).is_none());
        // Queued behind it, and then another sent alone: both come after it.
        let queued = {
            let wire = wire.clone();
            tokio::spawn(async move { wire.send("{\"id\":2}".into(), None).await })
        };
        tokio::task::yield_now().await;
        assert!(
            wire.send_alone("{\"id\":3}".into(), Some(3), Vec::new())
                .await
                .is_ok()
        );
        assert!(queued.await.unwrap().is_ok());
        let written = String::from_utf8(pipe.0.lock().unwrap().clone()).unwrap();
        assert_eq!(written, "{\"id\":1}\n{\"id\":2}\n{\"id\":3}\n");
    }
}
