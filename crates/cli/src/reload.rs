//! Config reload: reload requests, from SIGHUP and from the file watch alike, each become a
//! [`Proxy::reload`] of the file (one that arrives while a reload runs waits for it, several as
//! one, the proxy's coalescing; once that reload has ended the file is read again as it then
//! is). The watch: file events on the config's directory, and a poll kept for file systems that
//! send none.
//!
//! It never applies a config itself (the proxy does, as a diff) and never stops the proxy: an
//! invalid file is logged and the running config stays.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use mcp_supervisor::core::config::parse_config;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use mcp_supervisor_front::{Proxy, Reloaded};

/// How long the config watch waits, after an event in the file's directory, for the next one
/// before it reads the file: a burst (an editor's truncate and write, or write and rename) is one
/// look.
const SETTLE: Duration = Duration::from_millis(100);
/// The longest a burst of events may put off that look (a file written without pause).
const SETTLE_LIMIT: Duration = Duration::from_secs(1);
/// How often the config watch reads the file whatever the events say (see [`watch_config`]).
const POLL_EVERY: Duration = Duration::from_secs(5);
/// A reload of the file for each request; the proxy coalesces those made while one runs.
/// Those still running at shutdown are dropped with this task.
pub(crate) async fn reloader(
    path: PathBuf,
    audit_flag: Option<PathBuf>,
    proxy: Arc<Proxy>,
    requests: Arc<Notify>,
    shutdown: CancellationToken,
) {
    let mut running = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            () = requests.notified() => {
                let (path, flag, proxy) = (path.clone(), audit_flag.clone(), proxy.clone());
                running.spawn(async move { reload(&path, flag, &proxy).await });
            }
            Some(_) = running.join_next(), if !running.is_empty() => {}
            () = shutdown.cancelled() => return,
        }
    }
}

/// Read and validate the config file and apply it as a diff (its audit `audit_flag`, when
/// `--audit` gave one); an invalid one is rejected and the running config stays.
async fn reload(path: &Path, audit_flag: Option<PathBuf>, proxy: &Proxy) {
    let read = || async {
        let text = std::fs::read_to_string(path).map_err(|error| {
            format!(
                "cannot read {}: {error}; keeping the running config",
                path.display()
            )
        })?;
        let mut config =
            parse_config(&text, &|name| std::env::var(name).ok()).map_err(|errors| {
                format!(
                    "{} is invalid, keeping the running config:\n{errors}",
                    path.display()
                )
            })?;
        if let Some(path) = audit_flag {
            config.audit = Some(mcp_supervisor::core::config::AuditConfig { path });
        }
        Ok::<_, String>(config)
    };
    match proxy.reload(read).await {
        Reloaded::Applied(summary) => tracing::info!(
            added = ?summary.added, removed = ?summary.removed, changed = ?summary.changed,
            unchanged = summary.unchanged.len(),
            "reloaded {}", path.display()
        ),
        Reloaded::Kept(why) => {
            tracing::error!("reload: {why}");
        }
        Reloaded::Coalesced => {}
    }
}

/// Ask for a reload when the file's contents change; it ends at shutdown, and the watcher's
/// thread with it.
///
/// Events: a `notify` watcher (inotify, FSEvents) on the file's directory, not on the file, so
/// that an editor that saves by writing a temporary file and renaming it over the config is seen
/// (a watch on the file would follow the old inode). An event that names the file (any event in
/// the directory when the config is a symlink, as in a Kubernetes ConfigMap mount, where a
/// `..data` link beside it is swapped) wakes the watch; it waits until the directory has been
/// quiet for [`SETTLE`] (at most [`SETTLE_LIMIT`]), reads the file, and asks for one reload if
/// the contents differ from those it last saw.
///
/// The poll kept: every [`POLL_EVERY`] (5 s) the file is read and compared the same way, as the
/// 1 s poll before it did (the contents, by hash: a `touch` or a rewrite with the same text is
/// no change). Network file systems (NFS, SMB), FUSE and some container bind mounts send no
/// event for a change made on another machine or outside the container, and the watcher may not
/// start at all (inotify's `max_user_watches` or `max_user_instances` spent); there the poll
/// alone finds the change, within 5 s. Reading a config file every 5 s costs nothing.
pub(crate) async fn watch_config(path: PathBuf, reloads: Arc<Notify>, shutdown: CancellationToken) {
    watch_config_polling(path, reloads, shutdown, POLL_EVERY).await;
}

/// [`watch_config`] with the poll every `poll_every`.
async fn watch_config_polling(
    path: PathBuf,
    reloads: Arc<Notify>,
    shutdown: CancellationToken,
    poll_every: Duration,
) {
    let events = Arc::new(Notify::new());
    // Dropped when this task ends: its thread is told to stop, and no one waits for it.
    let _watcher = watch_directory(&path, events.clone());
    let mut last = contents_hash(&path);
    let mut poll = tokio::time::interval_at(tokio::time::Instant::now() + poll_every, poll_every);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let seen_by = tokio::select! {
            () = events.notified() => {
                if !settle(&events, &shutdown).await {
                    return;
                }
                "a file event"
            }
            _ = poll.tick() => "the poll",
            () = shutdown.cancelled() => return,
        };
        let now = contents_hash(&path);
        if now.is_some() && now != last {
            last = now;
            tracing::info!("{} changed ({seen_by}): reloading", path.display());
            reloads.notify_one();
        }
    }
}

/// Wait until no event has come for [`SETTLE`], or [`SETTLE_LIMIT`] has passed; false when the
/// proxy stops meanwhile.
async fn settle(events: &Notify, shutdown: &CancellationToken) -> bool {
    let limit = tokio::time::sleep(SETTLE_LIMIT);
    tokio::pin!(limit);
    loop {
        tokio::select! {
            () = events.notified() => {}
            () = tokio::time::sleep(SETTLE) => return true,
            () = &mut limit => return true,
            () = shutdown.cancelled() => return false,
        }
    }
}

/// A watcher of the directory of `path` that wakes `events` on each change that may concern the
/// file; none (the poll goes on alone) when it cannot start. When `path` is a symlink, the
/// directory of the file it leads to is watched too (an edit of the target is heard there only),
/// and every event in either wakes the watch.
fn watch_directory(path: &Path, events: Arc<Notify>) -> Option<notify::RecommendedWatcher> {
    use notify::{EventKind, EventKindMask, RecursiveMode, Watcher};
    let directory = |path: &Path| match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path.file_name()?.to_owned();
    let mut dirs = vec![directory(path)];
    let linked = path
        .symlink_metadata()
        .is_ok_and(|meta| meta.file_type().is_symlink());
    if linked && let Ok(target) = path.canonicalize() {
        let dir = directory(&target);
        if !dirs.contains(&dir) {
            dirs.push(dir);
        }
    }
    let handler = move |event: notify::Result<notify::Event>| {
        let concerns = match event {
            Ok(event) => {
                !matches!(event.kind, EventKind::Access(_))
                    && (linked || event.paths.iter().any(|p| p.file_name() == Some(&name)))
            }
            // Events were lost (the kernel's queue overflowed): look at the file.
            Err(_) => true,
        };
        if concerns {
            events.notify_one();
        }
    };
    // Not the default's open and read events: the watch's own reads would wake it.
    let config = notify::Config::default()
        .with_event_kinds(EventKindMask::CORE | EventKindMask::ACCESS_CLOSE);
    let started = notify::RecommendedWatcher::new(handler, config).and_then(|mut watcher| {
        for dir in &dirs {
            watcher.watch(dir, RecursiveMode::NonRecursive)?;
        }
        Ok(watcher)
    });
    let dirs: Vec<_> = dirs.iter().map(|dir| dir.display().to_string()).collect();
    match started {
        Ok(watcher) => {
            tracing::debug!(
                "watching {} for changes to {} (and reading it every {} s)",
                dirs.join(" and "),
                path.display(),
                POLL_EVERY.as_secs()
            );
            Some(watcher)
        }
        Err(error) => {
            tracing::warn!(
                "cannot watch {} ({error}); changes to {} are found by reading it every {} s",
                dirs.join(" and "),
                path.display(),
                POLL_EVERY.as_secs()
            );
            None
        }
    }
}

/// A hash of the file's contents; none when it cannot be read.
fn contents_hash(path: &Path) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let contents = std::fs::read(path).ok()?;
    let mut hasher = std::hash::DefaultHasher::new();
    contents.hash(&mut hasher);
    Some(hasher.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The watch tests one at a time: each counts the watcher threads of the process.
    static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

    /// Whether a reload is asked for within `limit`.
    async fn asked(reloads: &Notify, limit: Duration) -> bool {
        tokio::time::timeout(limit, reloads.notified())
            .await
            .is_ok()
    }

    /// The process's notify watcher threads ("notify-rs inotify loop", cut to 15 bytes).
    fn watcher_threads() -> usize {
        let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
            return 0;
        };
        tasks
            .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
            .filter(|comm| comm.starts_with("notify-rs"))
            .count()
    }

    /// No poll within any test: what a watch with it sees came from a file event.
    const NEVER: Duration = Duration::from_secs(24 * 3600);

    /// A config watch on `path` that polls every `poll_every`, and what stops it.
    fn start(
        path: &Path,
        poll_every: Duration,
    ) -> (Arc<Notify>, CancellationToken, tokio::task::JoinHandle<()>) {
        let reloads = Arc::new(Notify::new());
        let shutdown = CancellationToken::new();
        let watch = tokio::spawn(watch_config_polling(
            path.to_path_buf(),
            reloads.clone(),
            shutdown.clone(),
            poll_every,
        ));
        (reloads, shutdown, watch)
    }

    /// Stop the watch: its task ends at once, and its thread soon after (waited for on the
    /// wall clock, bounded, whether the test's clock is paused or not).
    async fn stop(shutdown: CancellationToken, watch: tokio::task::JoinHandle<()>) {
        shutdown.cancel();
        let ended = tokio::time::timeout(Duration::from_secs(5), watch).await;
        assert!(matches!(ended, Ok(Ok(()))), "the watch ends at shutdown");
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while watcher_threads() > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(watcher_threads(), 0, "the watcher's thread ends with it");
    }

    /// Let the watch start (it watches in its first step, before it first waits), bounded on
    /// the wall clock.
    async fn watcher_up() {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while watcher_threads() == 0 && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(watcher_threads(), 1, "one watcher thread");
    }

    #[tokio::test]
    async fn a_rename_over_the_config_asks_for_one_reload_from_the_file_event() {
        let _one = ONE_AT_A_TIME.lock().await;
        let dir = mcp_supervisor_testkit::temp_dir("watch-rename");
        let path = dir.join("servers.json");
        std::fs::write(&path, r#"{"mcpServers": {}}"#).expect("write");
        let (reloads, shutdown, watch) = start(&path, NEVER);
        watcher_up().await;

        // As an editor saves: a new file beside it, renamed over it. No poll runs: the reload
        // comes from the event.
        let temp = dir.join(".servers.json.swp");
        std::fs::write(&temp, r#"{"mcpServers": {"a": {"command": "x"}}}"#).expect("write");
        std::fs::rename(&temp, &path).expect("rename");
        assert!(
            asked(&reloads, Duration::from_secs(10)).await,
            "a reload is asked for"
        );
        // The same contents again (the burst's other events, a save with no change): no reload.
        std::fs::write(&temp, r#"{"mcpServers": {"a": {"command": "x"}}}"#).expect("write");
        std::fs::rename(&temp, &path).expect("rename");
        assert!(
            !asked(&reloads, SETTLE_LIMIT + Duration::from_millis(500)).await,
            "the same text is no change"
        );
        // A second change is a second reload.
        std::fs::write(&temp, r#"{"mcpServers": {}}"#).expect("write");
        std::fs::rename(&temp, &path).expect("rename");
        assert!(asked(&reloads, Duration::from_secs(10)).await);

        stop(shutdown, watch).await;
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn a_symlinked_config_edited_where_it_leads_asks_for_a_reload_from_the_file_event() {
        let _one = ONE_AT_A_TIME.lock().await;
        let dir = mcp_supervisor_testkit::temp_dir("watch-symlink");
        let (watched, dotfiles) = (dir.join("watched"), dir.join("dotfiles"));
        std::fs::create_dir_all(&watched).expect("mkdir");
        std::fs::create_dir_all(&dotfiles).expect("mkdir");
        let (path, target) = (watched.join("servers.json"), dotfiles.join("servers.json"));
        std::fs::write(&target, r#"{"mcpServers": {}}"#).expect("write");
        std::os::unix::fs::symlink(&target, &path).expect("symlink");
        let (reloads, shutdown, watch) = start(&path, NEVER);
        watcher_up().await;

        std::fs::write(&target, r#"{"mcpServers": {"c": {"command": "z"}}}"#).expect("write");
        assert!(
            asked(&reloads, Duration::from_secs(10)).await,
            "heard in the directory the link leads to"
        );

        stop(shutdown, watch).await;
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test(start_paused = true)]
    async fn a_change_that_sends_no_event_is_found_by_the_poll() {
        let _one = ONE_AT_A_TIME.lock().await;
        // The config is a hard link to a file elsewhere, changed through that other name: the
        // watched directory hears nothing, as with a change made on another NFS client.
        let dir = mcp_supervisor_testkit::temp_dir("watch-poll");
        let (watched, elsewhere) = (dir.join("watched"), dir.join("elsewhere"));
        std::fs::create_dir_all(&watched).expect("mkdir");
        std::fs::create_dir_all(&elsewhere).expect("mkdir");
        let (path, other) = (watched.join("servers.json"), elsewhere.join("servers.json"));
        std::fs::write(&other, r#"{"mcpServers": {}}"#).expect("write");
        std::fs::hard_link(&other, &path).expect("link");
        let started = tokio::time::Instant::now();
        let (reloads, shutdown, watch) = start(&path, POLL_EVERY);
        watcher_up().await;

        std::fs::write(&other, r#"{"mcpServers": {"b": {"command": "y"}}}"#).expect("write");
        let poll = started + POLL_EVERY;
        assert!(
            tokio::time::timeout_at(poll - Duration::from_millis(1), reloads.notified())
                .await
                .is_err(),
            "nothing before the poll"
        );
        assert!(
            tokio::time::timeout_at(poll + Duration::from_secs(1), reloads.notified())
                .await
                .is_ok(),
            "the poll found the change"
        );

        stop(shutdown, watch).await;
        let _ = std::fs::remove_dir_all(dir);
    }
}
