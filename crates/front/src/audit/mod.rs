//! The audit trail (SPEC §14): one JSON line per client request that reaches a server or is
//! refused ([`Record`], in `record`: who, which server, method and upstream name, the outcome
//! and what recovery did for it), appended to a file by a writer thread of its own ([`Audit`],
//! here: the bounded queue, flush and shutdown; the batching writer, which reopens the file for
//! logrotate, is in `writer`).
//!
//! A record holds names, numbers and times only: it has no place for a token, an argument
//! value or a result, and the session is written as a digest of its id. The request path only
//! queues a record (never blocks, never touches the file); when the queue is full the record is
//! dropped and counted. Nothing here decides an outcome: it writes down what the hub and the
//! front decided.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

mod record;
mod writer;

pub use record::{Outcome, Pending, Record, Recovery, Target, Who, rfc3339, session_tag};
use writer::{Entry, Every, Shared, Writer, open};

/// Records the queue holds by default: at 5,000 requests a second, most of a second of a
/// stalled disk, about 1 MiB.
pub const DEFAULT_CAPACITY: usize = 4096;

/// How long dropping an [`Audit`] waits for its writer to write what is queued.
pub const DROP_WAIT: Duration = Duration::from_secs(2);

/// At most one warning per this long about dropped records, and one about failed writes.
const WARN_EVERY: Duration = Duration::from_secs(10);

// === Audit ===

/// Why the audit could not start or stop as asked. Each names the file.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error(
        "cannot open the audit log {}: {source}; check that its folder exists and that this user may write there (`audit.path` or --audit)",
        path.display()
    )]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot start the writer of the audit log {}: {source}", path.display())]
    Thread {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "the writer of the audit log {} did not finish within {} ms; the records still queued are lost (a slow or stuck disk?)",
        path.display(),
        within.as_millis()
    )]
    Late { path: PathBuf, within: Duration },
    #[error(
        "the queue of the audit log {} is full; try again once the writer has caught up",
        path.display()
    )]
    Full { path: PathBuf },
}

/// The audit log: [`Audit::record`] queues a line, a writer thread appends it. Share it (it is
/// `Sync`); [`Audit::reopen`] on SIGHUP; [`Audit::shutdown`] (or drop) at the end.
pub struct Audit {
    queue: SyncSender<Entry>,
    shared: Arc<Shared>,
    /// Signalled (or dropped) when the writer ends; taken by the first shutdown.
    done: Mutex<Option<Receiver<()>>>,
    /// The writer thread, to wake.
    writer: OnceLock<std::thread::Thread>,
    drop_warning: Every,
}

impl Audit {
    /// Open (or create, mode 0600) `path` for appending and start its writer, with a queue of
    /// [`DEFAULT_CAPACITY`] records.
    pub fn open(path: impl Into<PathBuf>) -> Result<Self, AuditError> {
        Self::with_capacity(path, DEFAULT_CAPACITY)
    }

    /// [`Audit::open`] with a queue of `capacity` records (at least 1).
    pub fn with_capacity(path: impl Into<PathBuf>, capacity: usize) -> Result<Self, AuditError> {
        let (audit, writer, entries) = Self::unstarted(path.into(), capacity)?;
        audit.start(writer, entries)?;
        Ok(audit)
    }

    /// Start the writer thread.
    fn start(&self, writer: Writer, entries: Receiver<Entry>) -> Result<(), AuditError> {
        let thread = std::thread::Builder::new()
            .name("mcp-audit".into())
            .spawn(move || writer.run(entries))
            .map_err(|source| AuditError::Thread {
                path: self.shared.path.clone(),
                source,
            })?;
        let _ = self.writer.set(thread.thread().clone());
        Ok(())
    }

    /// Cut the writer's wait for a batch short.
    fn wake(&self) {
        if let Some(writer) = self.writer.get() {
            writer.unpark();
        }
    }

    /// The audit with its file open, and its writer not yet running.
    fn unstarted(
        path: PathBuf,
        capacity: usize,
    ) -> Result<(Self, Writer, Receiver<Entry>), AuditError> {
        let file = open(&path).map_err(|source| AuditError::Open {
            path: path.clone(),
            source,
        })?;
        let (queue, entries) = std::sync::mpsc::sync_channel(capacity.max(1));
        let (done_tx, done) = std::sync::mpsc::sync_channel(1);
        let shared = Arc::new(Shared {
            path,
            reopen: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            dropped: AtomicU64::new(0),
            lost: AtomicU64::new(0),
        });
        let writer = Writer::new(shared.clone(), file, done_tx);
        let audit = Self {
            queue,
            shared,
            done: Mutex::new(Some(done)),
            writer: OnceLock::new(),
            drop_warning: Every::new(WARN_EVERY),
        };
        Ok((audit, writer, entries))
    }

    /// Queue one record, at once: when the queue is full (or the writer has ended) it is
    /// dropped and counted ([`Audit::dropped`]), with a warning at most every 10 s.
    pub fn record(&self, record: Record) {
        // After shutdown, nothing is queued: the writer has ended or is ending.
        if !self.shared.stopping.load(Ordering::Relaxed)
            && self.queue.try_send(Entry::Line(record)).is_ok()
        {
            return;
        }
        let dropped = self.shared.dropped.fetch_add(1, Ordering::Relaxed) + 1;
        if self.drop_warning.due() {
            tracing::warn!(
                path = %self.shared.path.display(),
                dropped,
                "audit records dropped: the writer of the audit log is behind (a slow disk?) or has stopped"
            );
        }
    }

    /// Close and reopen the file at the path before the next write (log rotation: the old file,
    /// renamed, keeps what was written to it).
    pub fn reopen(&self) {
        self.shared.reopen.store(true, Ordering::SeqCst);
    }

    /// The file it appends to.
    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// Records dropped because the queue was full or the writer had ended.
    pub fn dropped(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }

    /// Records queued but lost because the file could not be opened or written.
    pub fn lost(&self) -> u64 {
        self.shared.lost.load(Ordering::Relaxed)
    }

    /// Wait (blocking, at most `within`) until everything queued before now is written.
    /// `Full` when the queue has no room for the request.
    pub fn flush(&self, within: Duration) -> Result<(), AuditError> {
        let (answer, written) = std::sync::mpsc::sync_channel(1);
        if self.queue.try_send(Entry::Flush(answer)).is_err() {
            return Err(AuditError::Full {
                path: self.shared.path.clone(),
            });
        }
        self.wake();
        self.await_writer(&written, within)
    }

    /// Write what is queued and end the writer: waits (blocking) at most `within`. Records
    /// that come after are dropped and counted. A second call returns at once.
    pub fn shutdown(&self, within: Duration) -> Result<(), AuditError> {
        let done = self
            .done
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let Some(done) = done else {
            return Ok(());
        };
        // The flag ends a writer that is draining a full queue; the Stop wakes one that waits
        // on an empty queue (then there is room for it).
        self.shared.stopping.store(true, Ordering::SeqCst);
        let _ = self.queue.try_send(Entry::Stop);
        self.wake();
        self.await_writer(&done, within)
    }

    /// Wait for the writer's signal on `signal`, in real time: the writer is a thread, which a
    /// paused tokio clock does not wait for.
    fn await_writer(&self, signal: &Receiver<()>, within: Duration) -> Result<(), AuditError> {
        match signal.recv_timeout(within) {
            Ok(()) | Err(RecvTimeoutError::Disconnected) => Ok(()),
            Err(RecvTimeoutError::Timeout) => Err(self.late(within)),
        }
    }

    fn late(&self, within: Duration) -> AuditError {
        AuditError::Late {
            path: self.shared.path.clone(),
            within,
        }
    }
}

impl Drop for Audit {
    fn drop(&mut self) {
        if let Err(error) = self.shutdown(DROP_WAIT) {
            tracing::warn!("{error}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::record::{MAX_NAME, name};
    use super::*;
    use crate::message::Message;
    use mcp_supervisor::CallError;
    use serde_json::value::RawValue;
    use std::collections::BTreeSet;
    use std::time::{SystemTime, UNIX_EPOCH};
    use tokio::time::Instant;

    const WAIT: Duration = Duration::from_secs(5);

    fn at(seconds: u64, millis: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(seconds) + Duration::from_millis(millis)
    }

    fn a_record(tool: &str) -> Record {
        let mut pending = Pending::new(
            Who::new(Some("alice"), Some("cli"), Some("s-1")),
            "tools/call",
        );
        pending.routed("fs", Some(Target::Tool(tool.into())));
        let mut record = pending.finish(Outcome::Ok, Recovery::not_sent());
        record.time = at(1_709_210_096, 789);
        record
    }

    fn lines(path: &Path) -> Vec<serde_json::Value> {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str(line).expect("each line is JSON"))
            .collect()
    }

    fn keys(value: &serde_json::Value) -> BTreeSet<String> {
        value
            .as_object()
            .map(|o| o.keys().cloned().collect())
            .unwrap_or_default()
    }

    fn temp(name: &str) -> (PathBuf, impl Drop) {
        struct Gone(PathBuf);
        impl Drop for Gone {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
        let dir = std::env::temp_dir().join(format!(
            "mcp-audit-{name}-{}-{:?}",
            std::process::id(),
            SystemTime::now()
        ));
        std::fs::create_dir_all(&dir).expect("a temp dir");
        (dir.join("audit.jsonl"), Gone(dir))
    }

    #[test]
    fn time_is_rfc3339_utc_with_milliseconds() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(at(1_709_210_096, 789)), "2024-02-29T12:34:56.789Z");
        // 2000 is a leap year (divisible by 400); 2100 is not (by 100 only).
        assert_eq!(rfc3339(at(951_782_400, 0)), "2000-02-29T00:00:00.000Z");
        assert_eq!(rfc3339(at(4_107_542_399, 999)), "2100-02-28T23:59:59.999Z");
        assert_eq!(rfc3339(at(4_107_542_400, 1)), "2100-03-01T00:00:00.001Z");
        assert_eq!(rfc3339(at(253_402_300_799, 0)), "9999-12-31T23:59:59.000Z");
        // Sub-millisecond time is cut, not rounded; before 1970 counts back.
        assert_eq!(
            rfc3339(UNIX_EPOCH + Duration::from_nanos(1_999_999)),
            "1970-01-01T00:00:00.001Z"
        );
        assert_eq!(
            rfc3339(UNIX_EPOCH - Duration::from_millis(1)),
            "1969-12-31T23:59:59.999Z"
        );
    }

    #[test]
    fn a_line_has_exactly_the_documented_keys() {
        let line = serde_json::to_value(a_record("read")).expect("json");
        let expected: BTreeSet<String> = [
            "time",
            "sub",
            "client_id",
            "session",
            "server",
            "method",
            "tool",
            "outcome",
            "recovery",
            "duration_ms",
        ]
        .into_iter()
        .map(String::from)
        .collect();
        assert_eq!(keys(&line), expected);
        assert_eq!(
            keys(&line["recovery"]),
            ["attempts", "generations", "replayed"]
                .into_iter()
                .map(String::from)
                .collect()
        );
        assert_eq!(line["time"], "2024-02-29T12:34:56.789Z");
        assert_eq!(line["tool"], "read");
        assert_eq!(line["outcome"], "ok");
        assert_eq!(line["session"], session_tag("s-1"));
        assert_eq!(line["session"].as_str().map(str::len), Some(24));

        // A prompt or a URI takes the tool's place; a request about neither has none.
        let mut pending = Pending::new(Who::default(), "resources/list");
        pending.routed("fs", None);
        let line = serde_json::to_value(pending.finish(Outcome::RateLimited, Recovery::not_sent()))
            .expect("json");
        assert!(!keys(&line).contains("tool") && !keys(&line).contains("uri"));
        assert_eq!(line["outcome"], "rate_limited");
        assert_eq!(line["sub"], serde_json::Value::Null);
    }

    #[test]
    fn no_token_argument_or_result_is_ever_written() {
        let token = "eyJhbGciOiJSUzI1NiJ9.c2VjcmV0LXRva2Vu.c2ln";
        let request = format!(
            r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":"fs__write","arguments":{{"path":"/etc/ARG-PATH","content":"ARG-VALUE"}},"_meta":{{"authorization":"Bearer {token}","progressToken":"PROGRESS-TOKEN"}}}}}}"#
        );
        let message = Message::read(&request).expect("a request");
        let session_id = "SEALED-SESSION-ID";
        let who = Who::new(Some("alice"), Some("cli"), Some(session_id));
        let mut pending = Pending::new(who, "tools/call");
        assert_eq!(
            Target::requested("tools/call", message.head()),
            Some(Target::Tool("fs__write".into()))
        );
        pending.routed("fs", Some(Target::Tool("write".into())));
        let result = RawValue::from_string(
            r#"{"content":[{"type":"text","text":"RESULT-TEXT"}]}"#.to_string(),
        )
        .expect("json");
        let line = serde_json::to_string(&pending.finish_call(Ok(&result))).expect("json");
        for secret in [
            token,
            "Bearer",
            "ARG-PATH",
            "ARG-VALUE",
            "PROGRESS-TOKEN",
            "RESULT-TEXT",
            session_id,
        ] {
            assert!(!line.contains(secret), "{secret} in {line}");
        }
        assert!(line.contains(r#""tool":"write""#), "{line}");

        // A server's error message may quote arguments: only the outcome is written.
        let error = CallError::ServerError {
            server: "fs".into(),
            tool: "write".into(),
            code: -32602,
            message: "bad ARG-VALUE".into(),
            data: Some(r#"{"echo":"ARG-VALUE"}"#.into()),
        };
        let line = serde_json::to_string(
            &Pending::new(Who::default(), "tools/call").finish_call(Err(&error)),
        )
        .expect("json");
        assert!(!line.contains("ARG-VALUE"), "{line}");
        assert!(line.contains(r#""outcome":"error""#), "{line}");
    }

    #[test]
    fn outcomes_and_recovery_follow_what_the_error_says_of_the_call() {
        let names = || ("s".to_string(), "t".to_string());
        let (server, tool) = names();
        let not_ready = CallError::NotReady {
            server,
            tool,
            state: "retrying".into(),
            last_error: None,
            next_attempt_in: None,
        };
        assert_eq!(Outcome::of_call(Err(&not_ready)), Outcome::DidNotRun);
        assert_eq!(Recovery::of_call(Err(&not_ready)), Recovery::not_sent());

        let (server, tool) = names();
        let not_delivered = CallError::NotDelivered {
            server,
            tool,
            cause: "refused".into(),
            restored: mcp_supervisor::Restored::Yes { generation: 3 },
        };
        assert_eq!(Outcome::of_call(Err(&not_delivered)), Outcome::DidNotRun);
        let recovery = Recovery::of_call(Err(&not_delivered));
        assert_eq!(
            (recovery.attempts, recovery.replayed),
            (Some(2), Some(true))
        );
        assert_eq!(recovery.generations, None);

        let (server, tool) = names();
        let unknown = CallError::OutcomeUnknown {
            server,
            tool,
            cause: "eof".into(),
            restored: mcp_supervisor::Restored::No {
                state: "retrying".into(),
            },
        };
        assert_eq!(Outcome::of_call(Err(&unknown)), Outcome::MayHaveRun);
        assert_eq!(Recovery::of_call(Err(&unknown)), Recovery::default());

        let tool_failed =
            RawValue::from_string(r#"{"content":[],"isError":true}"#.into()).expect("json");
        assert_eq!(Outcome::of_call(Ok(&tool_failed)), Outcome::Error);
        let line = serde_json::to_value(Recovery::of_call(Ok(&tool_failed))).expect("json");
        assert_eq!(
            line,
            serde_json::json!({ "attempts": null, "replayed": null, "generations": null })
        );
    }

    #[test]
    fn lines_are_appended_as_json_one_per_record() {
        let (path, _dir) = temp("lines");
        std::fs::write(&path, "").expect("an empty file");
        let audit = Audit::open(&path).expect("open");
        for tool in ["a", "b", "c"] {
            audit.record(a_record(tool));
        }
        audit.shutdown(WAIT).expect("written");
        let written = lines(&path);
        let tools: Vec<_> = written.iter().map(|l| l["tool"].clone()).collect();
        assert_eq!(tools, ["a", "b", "c"]);
        assert_eq!(audit.dropped(), 0);
        // After the end, a record is dropped and counted, never written.
        audit.record(a_record("late"));
        assert_eq!(audit.dropped(), 1);
        assert_eq!(lines(&path).len(), 3);
    }

    #[test]
    fn a_new_file_is_readable_by_its_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let (path, _dir) = temp("mode");
        let audit = Audit::open(&path).expect("open");
        drop(audit);
        let mode = std::fs::metadata(&path)
            .expect("created")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn an_unopenable_path_is_an_error_that_names_it() {
        let path = std::env::temp_dir().join("mcp-audit-no-such-dir/deeper/audit.jsonl");
        let Err(error) = Audit::open(&path) else {
            panic!("opened a file in a folder that does not exist");
        };
        let text = error.to_string();
        assert!(
            text.contains("mcp-audit-no-such-dir/deeper/audit.jsonl"),
            "{text}"
        );
        assert!(text.contains("cannot open the audit log"), "{text}");
    }

    #[test]
    fn reopen_after_a_rename_writes_a_new_file_and_the_old_keeps_its_lines() {
        let (path, _dir) = temp("reopen");
        let audit = Audit::open(&path).expect("open");
        audit.record(a_record("before"));
        audit.flush(WAIT).expect("flushed");
        let rotated = path.with_extension("jsonl.1");
        std::fs::rename(&path, &rotated).expect("rename");
        // Until the reopen, the writer keeps the renamed file.
        audit.record(a_record("still-old"));
        audit.flush(WAIT).expect("flushed");
        audit.reopen();
        audit.record(a_record("after"));
        audit.shutdown(WAIT).expect("written");
        let old: Vec<_> = lines(&rotated).iter().map(|l| l["tool"].clone()).collect();
        let new: Vec<_> = lines(&path).iter().map(|l| l["tool"].clone()).collect();
        assert_eq!(old, ["before", "still-old"]);
        assert_eq!(new, ["after"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_queue_drops_and_counts_instead_of_blocking() {
        let (path, _dir) = temp("full");
        // The writer is not running: the queue fills and stays full.
        let (audit, writer, entries) = Audit::unstarted(path.clone(), 2).expect("open");
        let started = Instant::now();
        for tool in ["a", "b", "c", "d", "e"] {
            audit.record(a_record(tool));
        }
        assert_eq!(started.elapsed(), Duration::ZERO);
        assert_eq!(audit.dropped(), 3);
        assert!(matches!(audit.flush(WAIT), Err(AuditError::Full { .. })));
        // One warning per 10 s, however many are dropped.
        assert!(!audit.drop_warning.due());
        tokio::time::advance(WARN_EVERY).await;
        assert!(audit.drop_warning.due());
        assert!(!audit.drop_warning.due());
        // Once the writer runs, what was queued is written.
        audit.start(writer, entries).expect("a writer");
        audit.shutdown(WAIT).expect("written");
        let tools: Vec<_> = lines(&path).iter().map(|l| l["tool"].clone()).collect();
        assert_eq!(tools, ["a", "b"]);
    }

    #[test]
    fn long_names_are_cut_at_a_character_boundary() {
        let long = "é".repeat(MAX_NAME);
        let cut = name(&long);
        assert!(cut.len() <= MAX_NAME && cut.len() >= MAX_NAME - 1);
        assert!(long.starts_with(&cut));
    }
}
