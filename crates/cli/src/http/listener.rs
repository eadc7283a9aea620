//! The accept loop of every HTTP listener (`--http`, `--admin`), so that slow or idle clients
//! cannot hold it (SPEC §9): a connection whose request headers are not complete within the
//! header timeout is closed, a kept-alive connection idle (no request in flight) past the idle
//! timeout is closed, and past the cap of open connections a new one is accepted and closed at
//! once. It also raises the process's soft limit of open files, once, so that the caps fit.
//!
//! It serves any [`Listener`]: TCP for `--http` and `--admin`, and the proxy's Unix socket in the
//! per-user registry ([`crate::registry`]), with the same timers and cap.
//!
//! It owns connections, their timers and their count; it never reads a request or writes an
//! answer itself (hyper parses, the router answers), and it never cuts a response being sent: an
//! event stream, a `GET /mcp` stream or a slow call runs as long as it runs.
//!
//! Why not hyper's `header_read_timeout`: hyper (1.12, `proto/h1/conn.rs`, `poll_read_head` and
//! `State::idle`) starts that timer whenever the connection waits for a request head, which is on
//! a fresh connection and again as soon as a response has been written on a kept-alive one. So it
//! also closes every idle kept-alive connection after the header timeout, and the idle timeout
//! could never be longer than 10 s (a load balancer in front keeps idle connections for 60 s and
//! would send requests on connections we are closing). And before hyper's HTTP/1 parser runs at
//! all, hyper-util's `auto` builder reads the first bytes to tell HTTP/1 from HTTP/2 with no timer,
//! so a client that connects and sends nothing was never timed. Here one timer per connection
//! covers both: from accept, and from the first byte of each later request, the head must be
//! complete within the header timeout; from the end of a response until the next request's first
//! byte, the idle timeout runs; while a request is in flight (its head read, its response not
//! yet all written) neither does.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body as AxumBody;
use hyper::body::{Body, Bytes, Frame, Incoming, SizeHint};
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::limits::Limits;

/// At most one warning per listener in this long about refused connections (and accept errors).
const WARN_EVERY: Duration = Duration::from_secs(10);
/// How long the accept loop pauses after an accept error that is not about one connection
/// (out of open files): the pending connections wait in the backlog meanwhile.
const ACCEPT_PAUSE: Duration = Duration::from_millis(100);

/// What [`run`] accepts connections from: a TCP or a Unix listener. Not axum's
/// `serve::Listener`, whose `accept` never fails (it sleeps over errors itself): here an error
/// about one connection is skipped, and others are counted, warned about and paused on.
pub trait Listener: Send + 'static {
    /// One accepted connection.
    type Stream: AsyncRead + AsyncWrite + Unpin + Send + 'static;

    /// The next connection.
    fn accept(&self) -> impl Future<Output = io::Result<Self::Stream>> + Send;

    /// The address it listens on, for the log.
    fn name(&self) -> String;

    /// Set up a connection just accepted, before it is served.
    fn tune(_stream: &Self::Stream) {}
}

impl Listener for TcpListener {
    type Stream = tokio::net::TcpStream;

    async fn accept(&self) -> io::Result<Self::Stream> {
        TcpListener::accept(self).await.map(|(stream, _)| stream)
    }

    fn name(&self) -> String {
        self.local_addr()
            .map_or_else(|_| "?".to_owned(), |a| a.to_string())
    }

    fn tune(stream: &Self::Stream) {
        // Answers are small SSE events: do not let Nagle hold one back behind the previous write.
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!("cannot set TCP_NODELAY: {error}");
        }
    }
}

impl Listener for UnixListener {
    type Stream = tokio::net::UnixStream;

    async fn accept(&self) -> io::Result<Self::Stream> {
        UnixListener::accept(self).await.map(|(stream, _)| stream)
    }

    fn name(&self) -> String {
        match self
            .local_addr()
            .ok()
            .and_then(|a| a.as_pathname().map(|p| p.display().to_string()))
        {
            Some(path) => format!("unix:{path}"),
            None => "unix:?".to_owned(),
        }
    }
}

/// Accept connections on `listener` and serve `router` on each, within `limits`, until
/// `shutdown`; then stop accepting, close every connection with nothing in flight at once, let
/// the others finish what they serve (hyper's graceful shutdown), and return once all are closed.
pub async fn run<L: Listener>(
    listener: L,
    router: Router,
    limits: Limits,
    shutdown: CancellationToken,
) {
    let addr = listener.name();
    let slots = Arc::new(Semaphore::new(limits.max_connections as usize));
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // Off: it would also close idle kept-alive connections at the header timeout (module doc);
    // each connection's Watch times heads and idleness instead.
    builder.http1().header_read_timeout(None);
    let builder = Arc::new(builder);
    let mut refused = Warnings::default();
    let mut failed = Warnings::default();
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(stream) => stream,
                Err(error) if is_about_one_connection(&error) => continue,
                Err(error) => {
                    if let Some(count) = failed.note() {
                        tracing::error!("HTTP listener {addr}: cannot accept connections ({count} failed since the last warning): {error}");
                    }
                    tokio::select! {
                        () = tokio::time::sleep(ACCEPT_PAUSE) => continue,
                        () = shutdown.cancelled() => break,
                    }
                }
            },
            () = shutdown.cancelled() => break,
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            // Closed before a byte is read: the client sees the connection end at once.
            drop(stream);
            if let Some(count) = refused.note() {
                tracing::warn!(
                    "HTTP listener {addr}: {} connections are open, the most allowed (--http-max-connections): refused {count} new connection(s) since the last warning (at most one every {} s)",
                    limits.max_connections,
                    WARN_EVERY.as_secs()
                );
            }
            continue;
        };
        L::tune(&stream);
        tokio::spawn(connection(
            stream,
            builder.clone(),
            router.clone(),
            limits,
            shutdown.clone(),
            slot,
        ));
    }
    // New connections are refused by the system from now on.
    drop(listener);
    // Every connection holds a slot until it is closed.
    let _all_closed = slots.acquire_many(limits.max_connections).await;
}

/// Accept errors that concern one connection only (it went before it was accepted).
fn is_about_one_connection(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

/// A warning that is given at most once per [`WARN_EVERY`], with how many times it was due.
#[derive(Default)]
struct Warnings {
    count: u64,
    last: Option<Instant>,
}

impl Warnings {
    /// Count one more; `Some(count)` when the warning is due now (then the count starts again).
    fn note(&mut self) -> Option<u64> {
        self.note_at(Instant::now())
    }

    fn note_at(&mut self, now: Instant) -> Option<u64> {
        self.count += 1;
        if self.last.is_some_and(|last| now < last + WARN_EVERY) {
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.count))
    }
}

type Builder = auto::Builder<TokioExecutor>;

/// Serve one connection until it ends, its head or idle timer runs out, or `shutdown`.
async fn connection<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
    stream: S,
    builder: Arc<Builder>,
    router: Router,
    limits: Limits,
    shutdown: CancellationToken,
    _slot: OwnedSemaphorePermit,
) {
    let watch = Arc::new(Watch::new(Instant::now()));
    let io = TokioIo::new(Watched {
        stream,
        watch: watch.clone(),
    });
    let service = Counted {
        inner: TowerToHyperService::new(router),
        watch: watch.clone(),
    };
    let conn = builder.serve_connection_with_upgrades(io, service);
    tokio::pin!(conn);
    let timer = tokio::time::sleep_until(Instant::now());
    tokio::pin!(timer);
    // Asked to close gracefully (idle, or the proxy stops): the idle timer is done.
    let mut closing = false;
    loop {
        let deadline = watch.deadline(&limits, closing);
        if let Some(at) = deadline
            && timer.deadline() != at
        {
            timer.as_mut().reset(at);
        }
        let changed = watch.changed.notified();
        tokio::select! {
            served = conn.as_mut() => {
                if let Err(error) = served {
                    tracing::debug!("HTTP connection ended: {error}");
                }
                return;
            }
            () = changed => {}
            () = &mut timer, if deadline.is_some() => match watch.expired(&limits, closing, Instant::now()) {
                Some(Expired::Head) => {
                    tracing::debug!(
                        "closing an HTTP connection whose request headers were not complete within {} ms",
                        limits.header_timeout.as_millis()
                    );
                    // Dropped: closed at once, the partial request unanswered (as hyper does).
                    return;
                }
                Some(Expired::Idle) => {
                    conn.as_mut().graceful_shutdown();
                    closing = true;
                }
                None => {}
            },
            () = shutdown.cancelled(), if !closing => {
                if !watch.busy() {
                    // Nothing in flight (idle, or a head still coming): nothing to finish.
                    return;
                }
                // What is in flight finishes (the drain has ended it by now), then it closes.
                conn.as_mut().graceful_shutdown();
                closing = true;
            }
        }
    }
}

/// Where a connection is between requests, shared by its I/O, its service and its timer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// A request head is being read: since the connection opened, or since its first byte.
    Head { since: Instant },
    /// No request in flight and no byte of the next one yet, since the last response ended.
    Idle { since: Instant },
    /// This many requests in flight (head read, response not all written).
    Busy { requests: usize },
}

/// Which timer ran out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expired {
    Head,
    Idle,
}

/// One connection's [`Phase`], and a wake-up for its timer when a deadline appears.
struct Watch {
    phase: Mutex<Phase>,
    /// Idle: the next byte read starts a head (checked on each read without the lock).
    idle: AtomicBool,
    /// A deadline came (the connection went idle, or the next head began).
    changed: Notify,
}

impl Watch {
    fn new(opened: Instant) -> Self {
        Self {
            phase: Mutex::new(Phase::Head { since: opened }),
            idle: AtomicBool::new(false),
            changed: Notify::new(),
        }
    }

    fn phase(&self) -> MutexGuard<'_, Phase> {
        self.phase.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// hyper read bytes from the client.
    fn read(&self, now: Instant) {
        if self.idle.swap(false, Ordering::AcqRel) {
            let mut phase = self.phase();
            if let Phase::Idle { .. } = *phase {
                *phase = Phase::Head { since: now };
                drop(phase);
                self.changed.notify_one();
            }
        }
    }

    /// A request's head was read: it is in flight until the returned guard is dropped.
    fn begin(self: &Arc<Self>) -> Busy {
        self.idle.store(false, Ordering::Release);
        let mut phase = self.phase();
        *phase = match *phase {
            Phase::Busy { requests } => Phase::Busy {
                requests: requests + 1,
            },
            Phase::Head { .. } | Phase::Idle { .. } => Phase::Busy { requests: 1 },
        };
        // No wake-up: a timer that runs out while busy finds nothing to do.
        Busy(self.clone())
    }

    /// A request's response was all written (or dropped).
    fn end(&self, now: Instant) {
        let mut phase = self.phase();
        if let Phase::Busy { requests } = *phase {
            if requests > 1 {
                *phase = Phase::Busy {
                    requests: requests - 1,
                };
                return;
            }
            *phase = Phase::Idle { since: now };
            self.idle.store(true, Ordering::Release);
            drop(phase);
            self.changed.notify_one();
        }
    }

    /// Whether a request is in flight.
    fn busy(&self) -> bool {
        matches!(*self.phase(), Phase::Busy { .. })
    }

    /// When the current phase's timer runs out (none while busy, nor idle once closing).
    fn deadline(&self, limits: &Limits, closing: bool) -> Option<Instant> {
        self.timer(limits, closing).map(|(at, _)| at)
    }

    /// Which timer has run out by `now`, if any.
    fn expired(&self, limits: &Limits, closing: bool, now: Instant) -> Option<Expired> {
        self.timer(limits, closing)
            .and_then(|(at, which)| (now >= at).then_some(which))
    }

    fn timer(&self, limits: &Limits, closing: bool) -> Option<(Instant, Expired)> {
        match *self.phase() {
            Phase::Head { since } => {
                Some((since.checked_add(limits.header_timeout)?, Expired::Head))
            }
            Phase::Idle { since } if !closing => {
                Some((since.checked_add(limits.idle_timeout)?, Expired::Idle))
            }
            Phase::Idle { .. } | Phase::Busy { .. } => None,
        }
    }
}

/// A request in flight; dropped with its response body once that is all written.
struct Busy(Arc<Watch>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.end(Instant::now());
    }
}

/// The connection's socket, telling its [`Watch`] when bytes come in.
struct Watched<S> {
    stream: S,
    watch: Arc<Watch>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let read = Pin::new(&mut this.stream).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = read
            && buf.filled().len() > before
        {
            this.watch.read(Instant::now());
        }
        read
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

/// The router as hyper's service, counting each request in flight on the connection's
/// [`Watch`] from its head until its response body is all written.
struct Counted {
    inner: TowerToHyperService<Router>,
    watch: Arc<Watch>,
}

type Answer = Pin<Box<dyn Future<Output = Result<Response<Tracked>, Infallible>> + Send>>;

impl hyper::service::Service<Request<Incoming>> for Counted {
    type Response = Response<Tracked>;
    type Error = Infallible;
    type Future = Answer;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        let busy = self.watch.begin();
        let answer = self.inner.call(request);
        Box::pin(async move {
            let response = answer.await?;
            Ok(response.map(|body| Tracked { body, _busy: busy }))
        })
    }
}

/// A response body that keeps its request counted as in flight until hyper drops it (written
/// to its end, or the connection gone).
struct Tracked {
    body: AxumBody,
    _busy: Busy,
}

impl Body for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits {
            header_timeout: Duration::from_millis(300),
            idle_timeout: Duration::from_millis(2_000),
            max_connections: 8,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_fresh_connection_has_the_header_timeout_from_accept() {
        let opened = Instant::now();
        let watch = Watch::new(opened);
        let limits = limits();
        assert_eq!(
            watch.deadline(&limits, false),
            Some(opened + limits.header_timeout)
        );
        // Bytes of the first head do not move its deadline.
        watch.read(opened + Duration::from_millis(200));
        assert_eq!(
            watch.deadline(&limits, false),
            Some(opened + limits.header_timeout)
        );
        assert_eq!(
            watch.expired(&limits, false, opened + limits.header_timeout),
            Some(Expired::Head)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn busy_has_no_timer_then_idle_then_the_next_head() {
        let start = Instant::now();
        let watch = Arc::new(Watch::new(start));
        let limits = limits();
        let first = watch.begin();
        let second = watch.begin();
        assert_eq!(watch.deadline(&limits, false), None, "in flight: no timer");
        assert_eq!(
            watch.expired(&limits, false, start + Duration::from_secs(3600)),
            None
        );
        drop(first);
        assert_eq!(watch.deadline(&limits, false), None, "one still in flight");
        let ended = Instant::now();
        drop(second);
        assert_eq!(
            watch.deadline(&limits, false),
            Some(ended + limits.idle_timeout)
        );
        assert_eq!(watch.deadline(&limits, true), None, "closing: idle is done");
        let byte = ended + Duration::from_millis(1_500);
        watch.read(byte);
        assert_eq!(
            watch.deadline(&limits, false),
            Some(byte + limits.header_timeout),
            "the next head's first byte starts the header timer"
        );
        let _third = watch.begin();
        assert_eq!(watch.deadline(&limits, false), None);
    }

    #[test]
    fn a_warning_is_given_at_most_once_per_interval() {
        let start = Instant::now();
        let mut warnings = Warnings::default();
        assert_eq!(warnings.note_at(start), Some(1));
        assert_eq!(warnings.note_at(start + Duration::from_secs(1)), None);
        assert_eq!(warnings.note_at(start + Duration::from_secs(9)), None);
        assert_eq!(
            warnings.note_at(start + WARN_EVERY),
            Some(3),
            "the next one counts those left unsaid"
        );
    }
}
