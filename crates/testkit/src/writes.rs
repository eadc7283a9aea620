//! An output that keeps each write apart, so a test can count the writes a writer makes (and
//! see that each holds whole lines); or one that is broken, whose every write fails (from the
//! start, or after some writes, as a dying server's stdin).
//!
//! Test support only: it holds what was written in memory and never touches a real pipe.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

/// Each write as text, in order; clones share them.
#[derive(Clone, Default)]
pub struct Writes {
    writes: Arc<Mutex<Vec<String>>>,
    /// How many writes it takes before every later one fails; `None`: all of them.
    breaks_after: Option<usize>,
}

impl Writes {
    /// An output whose every write fails with a broken pipe.
    pub fn broken() -> Self {
        Self::breaks_after(0)
    }

    /// An output that takes `writes` writes, and then fails every one with a broken pipe.
    pub fn breaks_after(writes: usize) -> Self {
        Self {
            breaks_after: Some(writes),
            ..Self::default()
        }
    }

    /// The writes so far.
    pub fn taken(&self) -> Vec<String> {
        self.writes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

impl tokio::io::AsyncWrite for Writes {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let mut writes = self.writes.lock().unwrap_or_else(|p| p.into_inner());
        if self.breaks_after.is_some_and(|n| writes.len() >= n) {
            return Poll::Ready(Err(std::io::ErrorKind::BrokenPipe.into()));
        }
        writes.push(String::from_utf8_lossy(buf).into_owned());
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
