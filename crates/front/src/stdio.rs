//! The stdio face: JSON-RPC messages as lines on our stdin and stdout, for the one client that
//! started us.
//!
//! It frames lines and nothing else: each line goes to the message face ([`crate::proxy`]) as it
//! came, each answer and notification is written as one whole line. Requests run concurrently;
//! notifications and answers from the client are handled in order as they arrive, whatever the
//! client's era (the message face tells a client of protocol 2026-07-28 by its requests).
//! Nothing but MCP messages is ever written to stdout.
//!
//! Backpressure: at most [`MAX_IN_FLIGHT`] of the client's requests are in flight or answered
//! but not yet written. Past it, reading stdin pauses until one is written: a client that sends
//! and does not read fills its own pipe, not our memory, and every request is still answered
//! once it reads. (Pausing rather than refusing: a refused request would be lost to a client
//! that only meant to pipeline.)

use std::sync::Arc;

use futures::StreamExt;
use mcp_supervisor::upstream::lines::{LineCodec, LineError, one_line};
use tokio::io::{AsyncRead, AsyncWriteExt};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio_util::codec::FramedRead;

use crate::proxy::{Kind, Message, OUTBOX, Proxy, error_text};

/// The longest line accepted from the client; a longer one gets an error answer.
const MAX_LINE: usize = 64 * 1024 * 1024;

/// The most requests of the client in flight or answered but not written yet.
pub const MAX_IN_FLIGHT: usize = 256;

/// A batch buffer larger than this after a write is given back rather than kept.
const KEEP_BATCH: usize = 1024 * 1024;

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
    on_reactor(
        std::io::stdin().as_fd(),
        "stdin",
        |fd| tokio::net::unix::pipe::Receiver::from_owned_fd(fd).map(|p| Box::new(p) as Input),
        |socket| Box::new(socket) as Input,
    )
    .unwrap_or_else(|| Box::new(tokio::io::stdin()))
}

/// Our stdout, the same way.
pub fn our_stdout() -> Output {
    use std::os::fd::AsFd;
    on_reactor(
        std::io::stdout().as_fd(),
        "stdout",
        |fd| tokio::net::unix::pipe::Sender::from_owned_fd(fd).map(|p| Box::new(p) as Output),
        |socket| Box::new(socket) as Output,
    )
    .unwrap_or_else(|| Box::new(tokio::io::stdout()))
}

/// A copy of `fd` made non-blocking and registered with the runtime's reactor, when it is a
/// stream socket (`socket`) or a pipe (`pipe`); `None` for anything else.
fn on_reactor<T>(
    fd: std::os::fd::BorrowedFd<'_>,
    name: &str,
    pipe: impl FnOnce(std::os::fd::OwnedFd) -> std::io::Result<T>,
    socket: impl FnOnce(tokio::net::UnixStream) -> T,
) -> Option<T> {
    use nix::sys::socket::{SockType, getsockopt, sockopt};
    let fd = fd.try_clone_to_owned().ok()?;
    let (end, kind) = if matches!(getsockopt(&fd, sockopt::SockType), Ok(SockType::Stream)) {
        // Reads and writes of a stream are plain `read`/`write` calls: any stream socket serves.
        let stream = std::os::unix::net::UnixStream::from(fd);
        let end = stream
            .set_nonblocking(true)
            .ok()
            .and_then(|()| tokio::net::UnixStream::from_std(stream).ok());
        (end.map(socket), "a stream socket")
    } else {
        (pipe(fd).ok(), "a pipe")
    };
    match end {
        Some(_) => tracing::debug!("{name} is {kind}, used on the reactor"),
        None => tracing::debug!("{name} is neither a pipe nor a stream socket: a blocking thread"),
    }
    end
}

/// Serve one client on `input` and `output` until `input` ends.
pub async fn serve<R, W>(proxy: Arc<Proxy>, input: R, output: W)
where
    R: AsyncRead + Unpin + Send + 'static,
    W: tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let mut lines = FramedRead::with_capacity(input, LineCodec::new(MAX_LINE), 64 * 1024);
    // Notifications and the servers' requests no call caused, at most OUTBOX waiting (past it
    // the message face leaves notifications out and fails such requests: the client does not
    // read); and the answers to bad input, for which reading waits.
    let (out_tx, out_rx) = mpsc::channel::<String>(OUTBOX);
    // Answers, each holding its request's place until it is written.
    let (answer_tx, answer_rx) = mpsc::channel::<(String, OwnedSemaphorePermit)>(MAX_IN_FLIGHT);
    let places = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    let writer = tokio::spawn(write_lines(output, out_rx, answer_rx, places.clone()));
    let client = proxy.connect(out_tx.clone());
    while let Some(line) = lines.next().await {
        let line = match line {
            Ok(line) => line,
            Err(LineError::TooLong) => {
                let _ = out_tx
                    .send(error_text(
                        None,
                        -32600,
                        &format!("Invalid Request: the message is longer than {MAX_LINE} bytes"),
                    ))
                    .await;
                continue;
            }
            Err(LineError::Io(error)) => {
                tracing::debug!("reading stdin failed: {error}");
                break;
            }
        };
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        // Read where it lies in the buffer: the message copies only the parts it keeps.
        let Ok(text) = std::str::from_utf8(&line) else {
            let _ = out_tx
                .send(error_text(
                    None,
                    -32700,
                    "Parse error: the message is not UTF-8",
                ))
                .await;
            continue;
        };
        let message = match Message::read(text) {
            Ok(message) => message,
            Err(answer) => {
                let _ = out_tx.send(answer).await;
                continue;
            }
        };
        match message.kind() {
            Kind::Request { .. } => {
                // Reading pauses here while every place is taken.
                let Ok(place) = places.clone().acquire_owned().await else {
                    break;
                };
                let (proxy, client, answers) = (proxy.clone(), client.clone(), answer_tx.clone());
                tokio::spawn(async move {
                    // Boxed: the task stays small, so spawning it and storing its end do not
                    // copy the few kilobytes of a call's state.
                    let answer = Box::pin(proxy.handle_message(&client, &message, None)).await;
                    if let Some(answer) = answer {
                        let _ = answers.send((answer, place)).await;
                    }
                });
            }
            _ => {
                if let Some(answer) = proxy.handle_message(&client, &message, None).await {
                    let _ = out_tx.send(answer).await;
                }
            }
        }
    }
    tracing::info!("stdin closed");
    proxy.disconnect(&client);
    drop(out_tx);
    drop(answer_tx);
    drop(client);
    // Answers already queued still go out; calls still running keep their senders, so the
    // wait is bounded.
    if tokio::time::timeout(std::time::Duration::from_millis(500), writer)
        .await
        .is_err()
    {
        tracing::debug!("answers still pending at the end of stdin were dropped");
    }
}

/// Write each message as one line. A line break outside a JSON string is whitespace (inside one
/// it cannot appear raw), so one becomes a space and the framing stays whole.
/// What came together is written together: one write for every message waiting. An answer's
/// place (of `places`) is given back once it is written. Returns the output when both streams
/// end.
async fn write_lines<W: tokio::io::AsyncWrite + Unpin>(
    mut output: W,
    mut messages: mpsc::Receiver<String>,
    mut answers: mpsc::Receiver<(String, OwnedSemaphorePermit)>,
    places: Arc<Semaphore>,
) -> W {
    let mut batch = String::new();
    let mut written = Vec::new();
    let (mut messages_open, mut answers_open) = (true, true);
    while messages_open || answers_open {
        batch.clear();
        tokio::select! {
            message = messages.recv(), if messages_open => match message {
                Some(message) => push_line(&mut batch, message),
                None => messages_open = false,
            },
            answer = answers.recv(), if answers_open => match answer {
                Some((answer, place)) => {
                    push_line(&mut batch, answer);
                    written.push(place);
                }
                None => answers_open = false,
            },
        }
        drain(&mut batch, &mut written, &mut messages, &mut answers);
        if batch.is_empty() {
            continue;
        }
        // The answers of calls that ended together are made by tasks of their own: while other
        // requests are in flight, let the tasks already running have their turn once, and take
        // what they added. Nothing waits longer than that turn, and an answer with no other
        // request in flight (one call at a time) does not wait at all.
        let in_flight = MAX_IN_FLIGHT.saturating_sub(places.available_permits());
        if in_flight > written.len() {
            tokio::task::yield_now().await;
            drain(&mut batch, &mut written, &mut messages, &mut answers);
        }
        if output.write_all(batch.as_bytes()).await.is_err() || output.flush().await.is_err() {
            break;
        }
        written.clear(); // the places are free again
        if batch.capacity() > KEEP_BATCH {
            batch = String::new();
        }
    }
    output
}

/// Take every message and answer waiting, without waiting for more.
fn drain(
    batch: &mut String,
    written: &mut Vec<OwnedSemaphorePermit>,
    messages: &mut mpsc::Receiver<String>,
    answers: &mut mpsc::Receiver<(String, OwnedSemaphorePermit)>,
) {
    while let Ok(message) = messages.try_recv() {
        push_line(batch, message);
    }
    while let Ok((answer, place)) = answers.try_recv() {
        push_line(batch, answer);
        written.push(place);
    }
}

fn push_line(batch: &mut String, message: String) {
    batch.push_str(&one_line(message));
    batch.push('\n');
}

#[cfg(test)]
mod tests {
    use mcp_supervisor_testkit::writes::Writes;

    use super::*;

    /// Answers made together by tasks of their own (as calls that ended together are) go out
    /// in one write, whole lines in the order they came, each place given back once written.
    /// One worker, so the order of the tasks is the runtime's own (the woken writer runs next,
    /// ahead of the tasks already waiting).
    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn answers_made_together_go_out_in_one_write() {
        let output = Writes::default();
        let (out_tx, out_rx) = mpsc::channel::<String>(OUTBOX);
        let (answer_tx, answer_rx) = mpsc::channel(MAX_IN_FLIGHT);
        let places = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
        let writer = tokio::spawn(write_lines(
            output.clone(),
            out_rx,
            answer_rx,
            places.clone(),
        ));
        // First a lone message, written once the writer runs: it then waits for the next.
        out_tx.try_send("{}".into()).expect("send");
        written(&output, 1).await;
        let spawner = {
            let places = places.clone();
            tokio::spawn(async move {
                for i in 0..10 {
                    let place = places.clone().acquire_owned().await.expect("a place");
                    let answers = answer_tx.clone();
                    tokio::spawn(async move {
                        let _ = answers.send((format!("{{\"id\":{i}}}"), place)).await;
                    });
                }
            })
        };
        spawner.await.expect("the spawner");
        drop(out_tx);
        let output = tokio::time::timeout(std::time::Duration::from_secs(10), writer)
            .await
            .expect("the writer ends with its channels")
            .expect("the writer");
        let writes = output.taken();
        assert_eq!(
            writes.len(),
            2,
            "one write for the answers made together: {writes:?}"
        );
        let lines: Vec<&str> = writes[1].lines().collect();
        assert_eq!(lines.len(), 10, "each answer is one whole line: {writes:?}");
        assert!(writes[1].ends_with('\n'));
        assert_eq!(
            places.available_permits(),
            MAX_IN_FLIGHT,
            "every place given back"
        );
    }

    /// A lone message goes out by itself, whole, without waiting for more.
    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_lone_message_is_written_at_once() {
        let output = Writes::default();
        let (out_tx, out_rx) = mpsc::channel::<String>(OUTBOX);
        let (_answer_tx, answer_rx) = mpsc::channel(MAX_IN_FLIGHT);
        let places = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
        let _writer = tokio::spawn(write_lines(output.clone(), out_rx, answer_rx, places));
        out_tx
            .try_send("{\n\"method\":\"notifications/x\"}".into())
            .expect("send");
        written(&output, 1).await;
        let writes = output.taken();
        assert_eq!(
            writes,
            vec!["{ \"method\":\"notifications/x\"}\n".to_string()]
        );
    }

    /// Wait (bounded) until `output` has had `count` writes.
    async fn written(output: &Writes, count: usize) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while output.taken().len() < count {
            assert!(std::time::Instant::now() < deadline, "never written");
            tokio::task::yield_now().await;
        }
    }
}
