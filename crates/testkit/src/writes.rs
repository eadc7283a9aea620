//! An output that keeps each write apart, so a test can count the writes a writer makes (and
//! see that each holds whole lines); or one that is broken, whose every write fails.
//!
//! Test support only: it holds what was written in memory and never touches a real pipe.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

/// Each write as text, in order; clones share them.
#[derive(Clone, Default)]
pub struct Writes {
    writes: Arc<Mutex<Vec<String>>>,
    broken: bool,
}

impl Writes {
    /// An output whose every write fails with a broken pipe.
    pub fn broken() -> Self {
        Self {
            broken: true,
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
        if self.broken {
            return Poll::Ready(Err(std::io::ErrorKind::BrokenPipe.into()));
        }
        let mut writes = self.writes.lock().unwrap_or_else(|p| p.into_inner());
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
