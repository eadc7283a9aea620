//! The stdio face: JSON-RPC messages as lines on our stdin and stdout, for the one client that
//! started us.
//!
//! It frames lines and nothing else: each line goes to the message face ([`crate::proxy`]) as it
//! came, each answer and notification is written as one whole line. One task serves the client:
//! its requests run side by side as futures polled there, not as tasks of their own, so that
//! what one wake-up finds is done together with no hand-off between tasks (the requests read
//! together are sent together, the answers that came together go out in one write).
//! Notifications and answers from the client are handled in order as they arrive, after the
//! requests read before them have started, whatever the client's era (the message face tells a
//! client of protocol 2026-07-28 by its requests). A fault (a panic) in handling one request is
//! that request's: it gets an error answer and the others go on. Nothing but MCP messages is
//! ever written to stdout.
//!
//! Backpressure: at most [`MAX_IN_FLIGHT`] of the client's requests are in flight or answered
//! but not yet written. Past it, reading stdin pauses until one is written: a client that sends
//! and does not read fills its own pipe, not our memory, and every request is still answered
//! once it reads. (Pausing rather than refusing: a refused request would be lost to a client
//! that only meant to pipeline.) While a write waits for the client, the notifications stay in
//! their bounded queue, where the message face sees that the client does not read.
//!
//! It must never block its task: a message's handling that computes for long (a list of
//! thousands of tools) holds up this client's other answers for that long, and no other
//! client's.

use std::collections::VecDeque;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::stream::FuturesUnordered;
use futures::{FutureExt, Stream, StreamExt};
use mcp_supervisor::upstream::lines::{LineCodec, LineError, one_line};
use tokio::io::AsyncRead;
use tokio::sync::mpsc;
use tokio_util::codec::FramedRead;

use crate::client::{Client, OUTBOX};
use crate::message::{Kind, Message, error_text};
use crate::proxy::Proxy;
use crate::quiet::{self, QuietWriter};

/// The longest line accepted from the client; a longer one gets an error answer.
const MAX_LINE: usize = 64 * 1024 * 1024;

/// The most requests of the client in flight or answered but not written yet.
pub const MAX_IN_FLIGHT: usize = 256;

/// A batch buffer larger than this after a write is given back rather than kept.
const KEEP_BATCH: usize = 1024 * 1024;

/// The most rounds (take answers, write, read) one wake-up of the face does before it lets
/// the runtime's other tasks run.
const ROUNDS_PER_WAKE: usize = 32;

/// After stdin ends, how long the output may go without a byte written before what is left
/// (answers the client does not read, calls that do not end) is given up on.
const END_STALL: std::time::Duration = std::time::Duration::from_millis(500);

/// After stdin ends, how long calls still running may go on (also while they write progress)
/// before they are cancelled: the proxy stops within about 5 s of the end of stdin (SPEC §7).
const END_GRACE: std::time::Duration = std::time::Duration::from_secs(3);

/// From how many of its client's requests in flight the face counts as busy ([`busy`]).
const BUSY_FROM: usize = 8;

/// The requests in flight of the stdio faces of this process (one, in `wrap`), as of the last
/// time each went to sleep.
static IN_FLIGHT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Whether a stdio face has many of its client's requests in flight: a runtime that serves it on
/// one thread gives up its core once (`sched_yield`) before it sleeps, while it is so.
///
/// Why: with many calls in flight, the client and the server (other processes) are the ones
/// with work to do. Sleeping at once means a wake-up for each few answers they write; yielding
/// first lets them run on, and the face then takes what came in one pass, with larger batches
/// and fewer sleeps. Measured at 64 calls in flight: the hop's CPU per call 10.0-10.2 -> 7.0-7.3
/// µs, its throughput 0.93-0.94x -> 1.04-1.05x the pipe relay's (docs/BENCHMARKS.md). With few
/// calls in flight it is not done: a yield can leave a call's answer waiting for another
/// process's time slice where one sleeping would have been woken at once.
pub fn busy() -> bool {
    IN_FLIGHT.load(std::sync::atomic::Ordering::Relaxed) >= BUSY_FROM
}

/// Serve the client on our stdin and stdout until stdin ends.
pub async fn run(proxy: Arc<Proxy>) {
    serve(proxy, our_stdin(), our_stdout()).await;
}

/// A reader of the client's messages.
pub type Input = Box<dyn AsyncRead + Unpin + Send>;
/// A writer of the client's messages.
pub type Output = Box<dyn tokio::io::AsyncWrite + Unpin + Send>;

/// Our stdin: read on the runtime's reactor when it is a pipe or a stream socket, which is how a
/// host starts us (Node's `child_process`, which Electron hosts use, gives its children socket
/// pairs, not pipes); else (a terminal, a file) through tokio's blocking-thread stdin, which
/// costs a hand-off between threads for every read.
pub fn our_stdin() -> Input {
    use std::os::fd::AsFd;
    let end = stdio_end(std::io::stdin().as_fd());
    let reader = end.and_then(|(fd, kind)| match kind {
        quiet::Kind::Socket => {
            // Reads of a stream are plain `read` calls: any stream socket serves.
            let stream = std::os::unix::net::UnixStream::from(fd);
            stream.set_nonblocking(true).ok()?;
            let stream = tokio::net::UnixStream::from_std(stream).ok()?;
            Some((Box::new(stream) as Input, kind))
        }
        quiet::Kind::Pipe => {
            let pipe = tokio::net::unix::pipe::Receiver::from_owned_fd(fd).ok()?;
            Some((Box::new(pipe) as Input, kind))
        }
    });
    match reader {
        Some((reader, kind)) => {
            tracing::debug!("stdin is {}, used on the reactor", kind.what());
            reader
        }
        None => {
            tracing::debug!("stdin is neither a pipe nor a stream socket: a blocking thread");
            Box::new(tokio::io::stdin())
        }
    }
}

/// Our stdout: a pipe or a stream socket is written straight, and put on the reactor only while
/// a write would block (`quiet`: registered for good, a socket pair would wake us each
/// time the client reads an answer); anything else (a terminal, a file) through tokio's
/// blocking-thread stdout.
pub fn our_stdout() -> Output {
    use std::os::fd::AsFd;
    let writer = stdio_end(std::io::stdout().as_fd())
        .and_then(|(fd, kind)| Some((QuietWriter::new(fd, kind).ok()?, kind)));
    match writer {
        Some((writer, kind)) => {
            tracing::debug!(
                "stdout is {}, written straight (on the reactor only while a write would block)",
                kind.what()
            );
            Box::new(writer)
        }
        None => {
            tracing::debug!("stdout is neither a pipe nor a stream socket: a blocking thread");
            Box::new(tokio::io::stdout())
        }
    }
}

/// A copy of `fd` (our stdin's or stdout's), and whether it is a stream socket or a pipe; `None`
/// for anything else.
fn stdio_end(fd: std::os::fd::BorrowedFd<'_>) -> Option<(std::os::fd::OwnedFd, quiet::Kind)> {
    use nix::sys::socket::{SockType, getsockopt, sockopt};
    use nix::sys::stat::{SFlag, fstat};
    let fd = fd.try_clone_to_owned().ok()?;
    if matches!(getsockopt(&fd, sockopt::SockType), Ok(SockType::Stream)) {
        return Some((fd, quiet::Kind::Socket));
    }
    let fifo = fstat(&fd).is_ok_and(|stat| {
        SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT == SFlag::S_IFIFO
    });
    fifo.then_some((fd, quiet::Kind::Pipe))
}

/// Serve one client on `input` and `output` until `input` ends.
///
/// One task does it all: it reads the client's lines, runs their requests side by side (each a
/// future of its own, polled here), and writes their answers and the client's notifications.
/// What one wake-up finds is done together: the requests read together are sent together, and
/// the answers that came together go out in one write, with no hand-off between tasks on a
/// message's way (docs/BENCHMARKS.md, "the stdio face").
pub async fn serve<R, W>(proxy: Arc<Proxy>, input: R, output: W)
where
    R: AsyncRead + Unpin + Send + 'static,
    W: tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    // Notifications and the servers' requests no call caused, at most OUTBOX waiting (past it
    // the message face leaves notifications out and fails such requests: the client does not
    // read).
    let (out_tx, out_rx) = mpsc::channel::<String>(OUTBOX);
    let client = proxy.connect(out_tx);
    let mut face = Face {
        lines: FramedRead::with_capacity(input, LineCodec::new(MAX_LINE), 64 * 1024),
        reading: true,
        calls: FuturesUnordered::new(),
        ordered: None,
        answers: VecDeque::new(),
        notifications: out_rx,
        output,
        batch: String::new(),
        written: 0,
        sent: 0,
        answers_in_batch: 0,
        broken: false,
        proxy: proxy.clone(),
        client: client.clone(),
    };
    std::future::poll_fn(|cx| face.poll_until_input_ends(cx)).await;
    tracing::info!("stdin closed");
    // A client may close stdin and go on reading (`cat requests | wrap`): calls still running
    // go on to their end, and their answers and the notifications already made go out, for as
    // long as the client reads them. Bounded: after END_GRACE, or once nothing was written for
    // END_STALL, the client is let go, which cancels the calls still running (upstream too);
    // what is made then still goes out while the client reads it, and once nothing was written
    // for END_STALL, what is left is dropped.
    let drained = matches!(
        tokio::time::timeout(END_GRACE, face.drain()).await,
        Ok(true)
    );
    proxy.disconnect(&client);
    if !drained && !face.drain().await {
        tracing::debug!("answers still pending at the end of stdin were dropped");
    }
}

/// A request or a notification of the client, running.
type Running = Pin<Box<dyn Future<Output = Option<String>> + Send>>;

/// The stdio face of one client: its input, its output, and what is between.
struct Face<R, W> {
    lines: FramedRead<R, LineCodec>,
    /// Until the input ends.
    reading: bool,
    /// The client's requests, running side by side.
    calls: FuturesUnordered<Running>,
    /// A notification or response of the client still being handled: reading waits for it,
    /// so they are handled in the order they came.
    ordered: Option<Running>,
    /// Answers made and not yet in the batch.
    answers: VecDeque<String>,
    notifications: mpsc::Receiver<String>,
    output: W,
    /// What is being written, whole lines, and how much of it is written already.
    batch: String,
    written: usize,
    /// Bytes written to the output in all.
    sent: u64,
    /// How many answers the batch holds: their places are free once it is written.
    answers_in_batch: usize,
    /// The output failed: what is made from now on is dropped.
    broken: bool,
    proxy: Arc<Proxy>,
    client: Arc<Client>,
}

impl<R, W> Face<R, W>
where
    R: AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    /// After the input ended: serve until nothing is running or waiting to be written (true),
    /// or until nothing was written for END_STALL (false).
    async fn drain(&mut self) -> bool {
        loop {
            let sent = self.sent;
            let end = tokio::time::timeout(
                END_STALL,
                std::future::poll_fn(|cx| self.poll_until_written(cx)),
            );
            if end.await.is_ok() {
                return true;
            }
            if self.sent == sent {
                return false;
            }
        }
    }

    /// The client's requests that take a place: running, or answered and not yet written.
    fn in_flight(&self) -> usize {
        self.calls.len() + self.answers.len() + self.answers_in_batch
    }

    /// Serve until the input ends (or fails).
    fn poll_until_input_ends(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.poll_until(cx, |face| !face.reading)
    }

    /// After the input ended: serve until nothing is running or waiting to be written.
    fn poll_until_written(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.poll_until(cx, |face| {
            face.broken
                || (face.calls.is_empty()
                    && face.ordered.is_none()
                    && face.answers.is_empty()
                    && face.batch.is_empty())
        })
    }

    /// Take answers, write and read, round after round, until `done` or nothing moves.
    fn poll_until(&mut self, cx: &mut Context<'_>, done: fn(&Self) -> bool) -> Poll<()> {
        let polled = self.poll_rounds(cx, done);
        let in_flight = match polled {
            Poll::Ready(()) => 0,
            Poll::Pending => self.in_flight(),
        };
        IN_FLIGHT.store(in_flight, std::sync::atomic::Ordering::Relaxed);
        polled
    }

    fn poll_rounds(&mut self, cx: &mut Context<'_>, done: fn(&Self) -> bool) -> Poll<()> {
        // Bounded: past it, the task lets others run and is woken again at once.
        for _ in 0..ROUNDS_PER_WAKE {
            let mut moved = self.poll_running(cx);
            moved |= self.poll_write(cx);
            moved |= self.poll_read(cx); // nothing once the input has ended
            if done(self) {
                return Poll::Ready(());
            }
            if !moved {
                return Poll::Pending;
            }
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    /// Take the answers of the requests that ended, and go on with the message being handled.
    fn poll_running(&mut self, cx: &mut Context<'_>) -> bool {
        let mut moved = false;
        while let Poll::Ready(Some(answer)) = self.calls.poll_next_unpin(cx) {
            moved = true;
            self.answers.extend(answer);
        }
        if let Some(running) = &mut self.ordered
            && let Poll::Ready(answer) = running.as_mut().poll(cx)
        {
            moved = true;
            self.ordered = None;
            self.answers.extend(answer);
        }
        moved
    }

    /// Write what is waiting: first the batch being written; when it is out, everything made
    /// since, in one write. Notifications go ahead of the answers made with them.
    fn poll_write(&mut self, cx: &mut Context<'_>) -> bool {
        let mut moved = false;
        loop {
            if self.broken {
                // Nobody reads: what is made is dropped, and its places are free.
                self.answers.clear();
                while let Poll::Ready(Some(_)) = self.notifications.poll_recv(cx) {}
                return moved;
            }
            if self.batch.is_empty() {
                while let Poll::Ready(Some(message)) = self.notifications.poll_recv(cx) {
                    push_line(&mut self.batch, message);
                }
                self.answers_in_batch = self.answers.len();
                for answer in self.answers.drain(..) {
                    push_line(&mut self.batch, answer);
                }
                if self.batch.is_empty() {
                    return moved;
                }
            }
            while self.written < self.batch.len() {
                let rest = &self.batch.as_bytes()[self.written..];
                match Pin::new(&mut self.output).poll_write(cx, rest) {
                    Poll::Ready(Ok(n)) if n > 0 => {
                        self.written += n;
                        self.sent += n as u64;
                    }
                    Poll::Ready(_) => self.broken = true,
                    Poll::Pending => return moved,
                }
                if self.broken {
                    break;
                }
            }
            if !self.broken {
                match Pin::new(&mut self.output).poll_flush(cx) {
                    Poll::Ready(Ok(())) => {}
                    Poll::Ready(Err(_)) => self.broken = true,
                    Poll::Pending => return moved,
                }
            }
            // Out (or lost): the places are free again.
            moved = true;
            self.batch.clear();
            self.written = 0;
            self.answers_in_batch = 0;
            if self.batch.capacity() > KEEP_BATCH {
                self.batch = String::new();
            }
        }
    }

    /// Read the client's lines while it has places left and no message is being handled in
    /// order, and start each.
    fn poll_read(&mut self, cx: &mut Context<'_>) -> bool {
        let mut moved = false;
        while self.reading && self.ordered.is_none() && self.in_flight() < MAX_IN_FLIGHT {
            let line = match Pin::new(&mut self.lines).poll_next(cx) {
                Poll::Pending => break,
                Poll::Ready(Some(Ok(line))) => line,
                Poll::Ready(Some(Err(LineError::TooLong))) => {
                    self.answers.push_back(error_text(
                        None,
                        -32600,
                        &format!("Invalid Request: the message is longer than {MAX_LINE} bytes"),
                    ));
                    moved = true;
                    continue;
                }
                Poll::Ready(Some(Err(LineError::Io(error)))) => {
                    tracing::debug!("reading stdin failed: {error}");
                    self.reading = false;
                    break;
                }
                Poll::Ready(None) => {
                    self.reading = false;
                    break;
                }
            };
            moved = true;
            self.start(&line, cx);
        }
        moved
    }

    /// Start one line of the client: a request runs beside the others, anything else is
    /// handled before the next line is read.
    fn start(&mut self, line: &[u8], cx: &mut Context<'_>) {
        if line.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        // Read where it lies in the buffer: the message copies only the parts it keeps.
        let Ok(text) = std::str::from_utf8(line) else {
            self.answers.push_back(error_text(
                None,
                -32700,
                "Parse error: the message is not UTF-8",
            ));
            return;
        };
        let message = match Message::read(text) {
            Ok(message) => message,
            Err(answer) => {
                self.answers.push_back(answer);
                return;
            }
        };
        let (proxy, client) = (self.proxy.clone(), self.client.clone());
        let is_request = matches!(message.kind(), Kind::Request { .. });
        let running: Running = Box::pin(async move {
            // A fault in one message's handling is its own: its request gets an error answer,
            // and the face and the client's other requests go on.
            let handled = AssertUnwindSafe(proxy.handle_message(&client, &message, None))
                .catch_unwind()
                .await;
            handled.unwrap_or_else(|_| {
                tracing::error!("handling a message of the client failed (a bug): it gets an error answer");
                message.id().map(|id| {
                    error_text(
                        Some(id),
                        -32603,
                        "Internal error: mcp-supervisor failed handling this request (a bug; its log has the details)",
                    )
                })
            })
        });
        if is_request {
            self.calls.push(running);
        } else {
            // Handled in order, after the requests read before it have started (a cancellation
            // read with its request finds it), and before the next line is read. Most end in
            // their first poll.
            self.poll_running(cx);
            self.ordered = Some(running);
            self.poll_running(cx);
        }
    }
}

fn push_line(batch: &mut String, message: String) {
    batch.push_str(&one_line(message));
    batch.push('\n');
}

#[cfg(test)]
mod tests {
    use mcp_supervisor::HubOptions;
    use mcp_supervisor::core::config::Config;
    use mcp_supervisor_testkit::writes::Writes;
    use tokio::io::AsyncWriteExt;

    use super::*;
    use crate::Mode;

    /// The bound of every wait.
    const LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

    /// Serve `input` (written whole, then closed) to a proxy of no servers; the writes made.
    async fn served(input: &str, output: Writes) -> Vec<String> {
        let proxy = crate::start(Config::default(), Mode::Aggregate, HubOptions::default());
        let (mut client, ours) = tokio::io::duplex(1024 * 1024);
        client.write_all(input.as_bytes()).await.expect("write");
        drop(client);
        tokio::time::timeout(LIMIT, serve(proxy.clone(), ours, output.clone()))
            .await
            .expect("the face ends with its input");
        proxy.hub().stop().await;
        output.taken()
    }

    fn pings(count: usize) -> String {
        (0..count)
            .map(|i| format!("{{\"jsonrpc\":\"2.0\",\"id\":{i},\"method\":\"ping\"}}\n"))
            .collect()
    }

    /// Requests read together are answered together: one write, whole lines, one answer to
    /// each request.
    #[tokio::test]
    async fn requests_read_together_are_answered_in_one_write() {
        let writes = served(&pings(10), Writes::default()).await;
        assert_eq!(writes.len(), 1, "one write: {writes:?}");
        assert!(writes[0].ends_with('\n'));
        let mut ids: Vec<u64> = writes[0]
            .lines()
            .map(|line| {
                let answer: serde_json::Value = serde_json::from_str(line).expect("JSON");
                assert!(answer.get("result").is_some(), "an answer: {line}");
                answer["id"].as_u64().expect("an id")
            })
            .collect();
        ids.sort_unstable();
        assert_eq!(ids, (0..10).collect::<Vec<_>>());
    }

    /// After stdin ends, answers still go out for as long as a slow client reads them (here
    /// 200 answers read 64 bytes every 50 ms: seconds in all, far past one stall bound).
    #[tokio::test(start_paused = true)]
    async fn answers_go_out_after_stdin_ends_while_the_client_reads_them() {
        use tokio::io::AsyncReadExt;
        let proxy = crate::start(Config::default(), Mode::Aggregate, HubOptions::default());
        let (mut client, ours) = tokio::io::duplex(1024 * 1024);
        let (theirs, output) = tokio::io::duplex(64);
        client
            .write_all(pings(200).as_bytes())
            .await
            .expect("write");
        drop(client);
        let reader = tokio::spawn(async move {
            let (mut theirs, mut read) = (theirs, Vec::new());
            let mut chunk = [0u8; 64];
            loop {
                match theirs.read(&mut chunk).await {
                    Ok(0) | Err(_) => return read,
                    Ok(n) => read.extend_from_slice(&chunk[..n]),
                }
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        });
        tokio::time::timeout(LIMIT * 10, serve(proxy.clone(), ours, output))
            .await
            .expect("the face ends once its answers are out");
        let read = reader.await.expect("the reader");
        let answers = String::from_utf8_lossy(&read).lines().count();
        assert_eq!(answers, 200, "every answer reached the client");
        proxy.hub().stop().await;
    }

    /// Bad lines get their error answers, in among the others, and do not stop the face.
    #[tokio::test]
    async fn bad_lines_are_answered_and_reading_goes_on() {
        let input = format!("not json\n\n{}", pings(1));
        let lines: Vec<String> = served(&input, Writes::default())
            .await
            .concat()
            .lines()
            .map(String::from)
            .collect();
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(lines[0].contains("-32700"), "a parse error: {lines:?}");
        assert!(
            lines[1].contains(r#""id":0"#),
            "the ping's answer: {lines:?}"
        );
    }

    /// An output that fails drops what is made from then on, and the face still ends with its
    /// input: nothing waits on a client that is gone.
    #[tokio::test]
    async fn a_broken_output_does_not_hold_the_face() {
        let writes = served(&pings(300), Writes::broken()).await;
        assert!(writes.is_empty(), "{writes:?}");
    }
}
