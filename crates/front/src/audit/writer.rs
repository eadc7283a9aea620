//! The audit log's writer thread (SPEC §14): it takes whatever the request path queued, writes
//! it as one batch appended to the file, and repeats; it reopens the file when asked (log
//! rotation) or after a failed write. What the request path and the writer share is here too.
//!
//! It writes records as they came, and never decides or changes one; it never blocks the
//! request path (which only queues, in `mod.rs`).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender};
use std::time::Duration;

use tokio::time::Instant;

use super::{Record, WARN_EVERY};

/// A batch stops growing at this size: one write of at most about this much.
const MAX_BATCH: usize = 256 * 1024;

/// How long the writer lets a batch gather after the first record of a quiet spell wakes it:
/// at 5,000 requests a second, one wake and one write per 100 records instead of per record.
/// [`super::Audit::flush`] and [`super::Audit::shutdown`] cut it short.
const LINGER: Duration = Duration::from_millis(20);

/// What the request path hands the writer.
#[allow(
    clippy::large_enum_variant,
    reason = "the queue's slots are records; a box would cost an allocation per request"
)]
pub(super) enum Entry {
    Line(Record),
    /// Answer once everything queued before it is written.
    Flush(SyncSender<()>),
    /// Write what is queued, then end.
    Stop,
}

/// What the request path and the writer both see.
pub(super) struct Shared {
    pub(super) path: PathBuf,
    /// Close and reopen the path before the next write.
    pub(super) reopen: AtomicBool,
    /// Write what is queued, then end.
    pub(super) stopping: AtomicBool,
    /// Records not queued (full, or the writer gone).
    pub(super) dropped: AtomicU64,
    /// Records queued but not written (the file could not be opened or written).
    pub(super) lost: AtomicU64,
}

/// Open `path` for appending, creating it readable by this user only.
pub(super) fn open(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
}

// === Writer ===

/// The writer thread: takes whatever is queued, writes it as one batch, repeats.
pub(super) struct Writer {
    shared: Arc<Shared>,
    /// `None` after a failed open or write: opened again before the next write.
    file: Option<File>,
    buf: Vec<u8>,
    /// Lines in `buf`.
    lines: u64,
    /// Flushes to answer once `buf` is written.
    flushed: Vec<SyncSender<()>>,
    done: SyncSender<()>,
    error_warning: Every,
}

impl Writer {
    pub(super) fn new(shared: Arc<Shared>, file: File, done: SyncSender<()>) -> Self {
        Self {
            shared,
            file: Some(file),
            buf: Vec::new(),
            lines: 0,
            flushed: Vec::new(),
            done,
            error_warning: Every::new(WARN_EVERY),
        }
    }

    pub(super) fn run(mut self, entries: Receiver<Entry>) {
        // Idle, it waits on the queue: the first record of a quiet spell wakes it. It ends when
        // told to stop, or when the audit is gone.
        while let Ok(first) = entries.recv() {
            let urgent = !matches!(first, Entry::Line(_));
            let mut stop = self.take(first);
            if !urgent && !self.shared.stopping.load(Ordering::SeqCst) {
                // Let a batch gather (a flush or a shutdown unparks it at once).
                std::thread::park_timeout(LINGER);
            }
            // Everything queued by now, in writes of at most about MAX_BATCH.
            stop |= self.drain(&entries);
            if stop || self.shared.stopping.load(Ordering::SeqCst) {
                // Told to stop (the Stop, or the flag when the queue had no room for it): what
                // was queued before the flag is written too.
                self.drain(&entries);
                break;
            }
        }
        // Gone before the signal: a record after the end is dropped and counted, never queued.
        // (One that read the flag just before shutdown set it, and is queued between the last
        // drain and this, is lost uncounted: a window of a few instructions, at shutdown only.)
        drop(entries);
        let _ = self.done.try_send(());
    }

    /// Write everything queued now, in writes of at most about [`MAX_BATCH`]; whether a Stop
    /// was among it.
    fn drain(&mut self, entries: &Receiver<Entry>) -> bool {
        let mut stop = false;
        while let Ok(entry) = entries.try_recv() {
            stop |= self.take(entry);
            if self.buf.len() >= MAX_BATCH {
                self.write();
            }
        }
        self.write();
        stop
    }

    /// Add an entry to the batch; whether it says to stop.
    fn take(&mut self, entry: Entry) -> bool {
        match entry {
            Entry::Line(record) => {
                match serde_json::to_writer(&mut self.buf, &record) {
                    Ok(()) => {
                        self.buf.push(b'\n');
                        self.lines += 1;
                    }
                    Err(error) => {
                        // Not expected (names and numbers only); the line is lost, not the batch.
                        self.shared.lost.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!("an audit record could not be written as JSON: {error}");
                    }
                }
                false
            }
            Entry::Flush(answer) => {
                self.flushed.push(answer);
                false
            }
            Entry::Stop => true,
        }
    }

    /// Append the batch in one write, reopening the file first when asked (or after a failure).
    fn write(&mut self) {
        if !self.buf.is_empty() {
            if self.shared.reopen.swap(false, Ordering::SeqCst) {
                self.file = None;
            }
            if let Err(error) = self.append() {
                self.file = None;
                self.shared.lost.fetch_add(self.lines, Ordering::Relaxed);
                if self.error_warning.due() {
                    tracing::warn!(
                        path = %self.shared.path.display(),
                        lost = self.shared.lost.load(Ordering::Relaxed),
                        "cannot write the audit log: {error}; its records are lost until a write succeeds (the file is opened again for the next one)"
                    );
                }
            }
            self.buf.clear();
            self.lines = 0;
        }
        for answer in self.flushed.drain(..) {
            let _ = answer.try_send(());
        }
    }

    fn append(&mut self) -> std::io::Result<()> {
        let file = match &mut self.file {
            Some(file) => file,
            None => self.file.insert(open(&self.shared.path)?),
        };
        file.write_all(&self.buf)
    }
}

// === Every ===

/// Says yes at most once per `gap` (tokio's clock, so a paused test clock drives it).
pub(super) struct Every {
    origin: Instant,
    gap: Duration,
    /// Milliseconds since `origin` of the last yes, plus one; 0: never.
    last: AtomicU64,
}

impl Every {
    pub(super) fn new(gap: Duration) -> Self {
        Self {
            origin: Instant::now(),
            gap,
            last: AtomicU64::new(0),
        }
    }

    pub(super) fn due(&self) -> bool {
        let now = u64::try_from(self.origin.elapsed().as_millis())
            .unwrap_or(u64::MAX - 1)
            .saturating_add(1);
        let last = self.last.load(Ordering::Relaxed);
        let gap = u64::try_from(self.gap.as_millis()).unwrap_or(u64::MAX);
        if last != 0 && now.saturating_sub(last) < gap {
            return false;
        }
        self.last
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    }
}
