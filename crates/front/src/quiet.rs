//! A writer of our stdout that asks the reactor for nothing while its writes go through.
//!
//! Why: a stream socket registered with the reactor (edge-triggered, as tokio registers every
//! source) reports "writable" again each time the reader takes data out of it. Node's
//! `child_process`, which Electron hosts use, gives its children socket pairs, so every answer
//! the client read woke the stdio face once more for nothing: a third wake-up per call where two
//! (the request, the server's answer) are the work. A `poll()` relay in C asks for "writable"
//! only when a write would block, and so does this writer: it writes straight to the
//! non-blocking descriptor, registers it with the reactor only when a write would block, waits
//! there, and leaves the reactor again once a write goes through. A pipe's writer is woken only
//! when the pipe was full, so pipes never had the extra wake-up; they take the same path.
//!
//! It owns one descriptor and never closes anything else; it never blocks its thread (the
//! descriptor is made non-blocking first, and a descriptor that cannot be is not taken).

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use nix::errno::Errno;
use nix::fcntl::{FcntlArg, OFlag, fcntl};
use nix::sys::socket::{MsgFlags, send};
use tokio::io::AsyncWrite;

/// What the descriptor is: a socket is written with `send(MSG_NOSIGNAL)`, so that a client gone
/// is an error to us and never a SIGPIPE to a host that did not ignore it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Pipe,
    Socket,
}

impl Kind {
    /// What it is, in words.
    pub fn what(self) -> &'static str {
        match self {
            Kind::Pipe => "a pipe",
            Kind::Socket => "a stream socket",
        }
    }
}

/// A non-blocking writer of a pipe or a stream socket, on the reactor only while it waits.
#[derive(Debug)]
pub struct QuietWriter {
    kind: Kind,
    state: State,
    /// How many times a write would block and the writer went on the reactor.
    waits: u64,
}

#[derive(Debug)]
enum State {
    /// Writes go straight to the descriptor.
    Direct(OwnedFd),
    /// A write of a socket would block: on the reactor, waiting to be writable.
    WaitingSocket(tokio::net::UnixStream),
    /// A write of a pipe would block, the same way.
    WaitingPipe(tokio::net::unix::pipe::Sender),
    /// Between two of the above, or the registration failed and took the descriptor with it.
    Lost,
}

impl QuietWriter {
    /// Take `fd` (a pipe's write end or a stream socket) and make it non-blocking.
    pub fn new(fd: OwnedFd, kind: Kind) -> io::Result<Self> {
        let flags = OFlag::from_bits_truncate(fcntl(&fd, FcntlArg::F_GETFL)?);
        fcntl(&fd, FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK))?;
        Ok(Self {
            kind,
            state: State::Direct(fd),
            waits: 0,
        })
    }

    fn write_to(kind: Kind, fd: &OwnedFd, buf: &[u8]) -> Result<usize, Errno> {
        match kind {
            Kind::Socket => send(fd.as_raw_fd(), buf, MsgFlags::MSG_NOSIGNAL),
            Kind::Pipe => nix::unistd::write(fd.as_fd(), buf),
        }
    }

    /// Put the descriptor on the reactor: a write would block.
    fn wait(&mut self) -> io::Result<()> {
        let State::Direct(fd) = std::mem::replace(&mut self.state, State::Lost) else {
            return Ok(());
        };
        self.waits += 1;
        self.state = match self.kind {
            Kind::Socket => State::WaitingSocket(tokio::net::UnixStream::from_std(
                std::os::unix::net::UnixStream::from(fd),
            )?),
            Kind::Pipe => State::WaitingPipe(tokio::net::unix::pipe::Sender::from_owned_fd(fd)?),
        };
        Ok(())
    }

    /// Take the descriptor off the reactor: a write went through. Should that fail, the
    /// descriptor is lost and the next write says so (the bytes written are still reported).
    fn direct(&mut self) {
        let fd = match std::mem::replace(&mut self.state, State::Lost) {
            State::WaitingSocket(stream) => stream.into_std().map(OwnedFd::from),
            State::WaitingPipe(pipe) => pipe.into_nonblocking_fd(),
            other => {
                self.state = other;
                return;
            }
        };
        if let Ok(fd) = fd {
            self.state = State::Direct(fd);
        }
    }
}

impl AsyncWrite for QuietWriter {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        loop {
            let written = match &mut this.state {
                State::Direct(fd) => match Self::write_to(this.kind, fd, buf) {
                    Ok(n) => return Poll::Ready(Ok(n)),
                    Err(Errno::EINTR) => continue,
                    Err(Errno::EAGAIN) => {
                        this.wait()?;
                        continue;
                    }
                    Err(error) => return Poll::Ready(Err(error.into())),
                },
                State::WaitingSocket(stream) => ready!(Pin::new(stream).poll_write(cx, buf))?,
                State::WaitingPipe(pipe) => ready!(Pin::new(pipe).poll_write(cx, buf))?,
                State::Lost => {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::BrokenPipe,
                        "the output could not be waited on",
                    )));
                }
            };
            // Through: off the reactor until a write would block again.
            this.direct();
            return Poll::Ready(Ok(written));
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Nothing is buffered here.
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A writer whose reader does not read fills the socket, waits on the reactor, and goes on
    /// once the reader reads; every byte arrives once and in order.
    #[tokio::test]
    async fn a_full_socket_waits_and_everything_arrives_in_order() {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().expect("a socket pair");
        let mut writer = QuietWriter::new(OwnedFd::from(ours), Kind::Socket).expect("writer");
        theirs.set_nonblocking(true).expect("non-blocking");
        let mut reader = tokio::net::UnixStream::from_std(theirs).expect("reader");
        let data: Vec<u8> = (0..4 * 1024 * 1024).map(|i| (i % 251) as u8).collect();
        let expected = data.clone();
        let writing = tokio::spawn(async move {
            writer.write_all(&data).await.expect("written");
            writer
        });
        let mut got = Vec::with_capacity(expected.len());
        let mut chunk = vec![0u8; 64 * 1024];
        while got.len() < expected.len() {
            let n = reader.read(&mut chunk).await.expect("read");
            assert!(n > 0, "the writer ended early");
            got.extend_from_slice(&chunk[..n]);
        }
        assert_eq!(got, expected);
        let writer = writing.await.expect("the writer's task");
        assert!(writer.waits > 0, "4 MiB did not fill the socket?");
        assert!(
            matches!(writer.state, State::Direct(_)),
            "back off the reactor once the writes went through"
        );
    }

    /// A pipe the same way.
    #[tokio::test]
    async fn a_full_pipe_waits_and_everything_arrives_in_order() {
        let (read_end, write_end) = nix::unistd::pipe().expect("a pipe");
        let mut writer = QuietWriter::new(write_end, Kind::Pipe).expect("writer");
        let mut reader =
            tokio::net::unix::pipe::Receiver::from_owned_fd(read_end).expect("the read end");
        let data: Vec<u8> = (0..1024 * 1024).map(|i| (i % 253) as u8).collect();
        let expected = data.clone();
        let writing = tokio::spawn(async move {
            writer.write_all(&data).await.expect("written");
            writer.waits
        });
        let mut got = Vec::new();
        reader.read_to_end(&mut got).await.expect("read to the end");
        assert_eq!(got, expected);
        let waits = writing.await.expect("the writer's task");
        assert!(waits > 0, "1 MiB did not fill the pipe?");
    }

    /// A reader gone is an error (EPIPE), not a signal.
    #[tokio::test]
    async fn a_reader_gone_is_an_error() {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().expect("a socket pair");
        drop(theirs);
        let mut writer = QuietWriter::new(OwnedFd::from(ours), Kind::Socket).expect("writer");
        let error = writer.write_all(b"x\n").await.expect_err("nobody reads");
        assert_eq!(error.kind(), io::ErrorKind::BrokenPipe);
    }
}
