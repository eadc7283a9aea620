//! Running the proxy: the stdio face, the HTTP face, the admin endpoints, config reload (SIGHUP
//! and a file watch), and shutdown on SIGINT, SIGTERM or the end of stdin.
//!
//! SIGTERM to a proxy with an MCP HTTP face drains first ([`crate::drain`]): `/readyz` says 503
//! at once, requests are served for the drain window, then what still runs is answered as
//! stopping and the stop below follows. SIGINT, the end of stdin, a stdio-only proxy, and a
//! second SIGTERM or a SIGINT during the window stop at once.
//!
//! Reload requests, from SIGHUP and from the file watch alike, each become a
//! [`Proxy::reload`] of the file: one that arrives while a reload runs waits for it (several as
//! one, the proxy's coalescing), and once that reload has ended the file is read again as it
//! then is.
//!
//! The audit log (the config's `audit`, or `--audit`) is opened before anything starts (a path
//! that cannot be opened is refused like a bad config), opened again at its path on SIGHUP (log
//! rotation), moved by a reload that changes `audit` (unless `--audit` set it), and written out
//! at the end within [`AUDIT_LIMIT`].
//!
//! Shutdown is bounded (about 5 s, and the audit's 2 s) and leaves no child process: the hub's
//! stop closes every generation's process group before this returns.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use mcp_supervisor::HubOptions;
use mcp_supervisor::core::config::{Config, parse_config};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::drain::Drain;
use crate::http::{self, Guard};
use mcp_supervisor_front::audit::Audit;
use mcp_supervisor_front::{Mode, Proxy, Reloaded};

/// How long a stop may take before we exit anyway.
const STOP_LIMIT: Duration = Duration::from_secs(5);
/// How long the config watch waits, after an event in the file's directory, for the next one
/// before it reads the file: a burst (an editor's truncate and write, or write and rename) is one
/// look.
const SETTLE: Duration = Duration::from_millis(100);
/// The longest a burst of events may put off that look (a file written without pause).
const SETTLE_LIMIT: Duration = Duration::from_secs(1);
/// How often the config watch reads the file whatever the events say (see [`watch_config`]).
const POLL_EVERY: Duration = Duration::from_secs(5);
/// How long the HTTP faces may take, once the proxy stops, to send what they still owe (the
/// stopping answers, the streams' last events) before the servers are stopped.
const ANSWER_LIMIT: Duration = Duration::from_secs(1);
/// How long the audit's writer may take, at the end, to write what is still queued.
const AUDIT_LIMIT: Duration = mcp_supervisor_front::audit::DROP_WAIT;
/// The exit code of a config (or flag) the proxy cannot start with, as for a bad config.
const USAGE: u8 = 2;

pub struct Faces {
    /// Seal the HTTP face's session ids.
    pub keys: mcp_supervisor_front::seal::Keys,
    pub stdio: bool,
    pub http: Option<SocketAddr>,
    pub admin: Option<SocketAddr>,
    pub guard: Guard,
    /// SIGTERM's drain window, when an MCP HTTP face serves (`--drain-ms`).
    pub drain: Duration,
    /// Header and idle timeouts and the connection cap of every HTTP listener.
    pub limits: http::limits::Limits,
}

/// How a stop was asked for.
enum Stop {
    /// SIGTERM: drain first when an MCP HTTP face serves.
    Drain,
    /// SIGINT, the end of stdin, a failed face.
    Now,
}

/// Serve `config` until told to stop. `config_path` enables reload; `audit_flag` (`--audit`)
/// overrides the audit of every config read.
pub async fn run(
    config: Config,
    config_path: Option<PathBuf>,
    audit_flag: Option<PathBuf>,
    mode: Mode,
    faces: Faces,
    state_dir: Option<PathBuf>,
) -> anyhow::Result<ExitCode> {
    if let Some(dir) = &state_dir {
        tracing::debug!("saved catalogs in {}", dir.display());
    }
    // Opened before anything starts: a path that cannot be written starts nothing.
    let audit = match config.audit.as_ref().map(|a| Audit::open(&a.path)) {
        None => None,
        Some(Ok(audit)) => Some(Arc::new(audit)),
        Some(Err(error)) => {
            eprintln!("mcp-supervisor: {error}");
            return Ok(ExitCode::from(USAGE));
        }
    };
    let mut faces = faces;
    faces.guard.auth = verifier_of(&config, &faces)?;
    let sealing = Arc::new(crate::mcp_http::Sealing {
        keys: faces.keys,
        max_age: config.session_max_age,
    });
    // The tokens of servers with `credentials` (token exchange), from the face's verifier.
    let delegation = faces.guard.auth.clone().and_then(|verifier| {
        mcp_supervisor_front::auth::Delegate::new(verifier)
            .map(|d| Arc::new(d) as Arc<dyn mcp_supervisor::auth::Delegation>)
    });
    let options = HubOptions {
        state_dir,
        trace: crate::telemetry::context(),
        delegation,
        ..HubOptions::default()
    };
    let about = Arc::new(http::page::About::of(
        &config,
        config_path.as_deref(),
        mode,
        options.state_dir.as_deref(),
    ));
    // Who this proxy is in the user's registry, for `mcp-supervisor dashboard`.
    let whom = crate::registry::Whom::of(&about, &config);
    let proxy = mcp_supervisor_front::start(config, mode, options);
    if let Some(audit) = audit {
        // A new proxy has none yet. From now on the proxy holds it (a reload may move it).
        let _ = proxy.set_audit(audit);
    }
    let hub = proxy.hub().clone();
    let shutdown = CancellationToken::new();
    let drain = Drain::new();
    let mut tasks = Vec::new();
    let mut http_tasks = Vec::new();

    let listeners = [(faces.http, Some(sealing)), (faces.admin, None)];
    let count = listeners.iter().filter(|(addr, _)| addr.is_some()).count();
    let limits = http::limits::fit_open_files(faces.limits, count);
    for (addr, mcp) in listeners {
        let Some(addr) = addr else { continue };
        let listener = match http::bind(addr).await {
            Ok(listener) => listener,
            Err(error) => {
                hub.stop().await;
                return Err(error);
            }
        };
        let what = if mcp.is_some() {
            "MCP over streamable HTTP at /mcp, and admin endpoints"
        } else {
            "admin endpoints"
        };
        tracing::info!(
            "serving {what} on http://{}",
            listener.local_addr().unwrap_or(addr)
        );
        let (proxy, guard, shutdown) = (proxy.clone(), faces.guard.clone(), shutdown.clone());
        let (drain, about) = (drain.clone(), about.clone());
        http_tasks.push(tokio::spawn(http::serve(
            proxy, about, listener, guard, mcp, drain, limits, shutdown,
        )));
    }
    drain.set_ready();
    // The user's registry (`mcp-supervisor dashboard`): a Unix socket serving the admin routes
    // and an entry; a failure is a warning, never a reason not to serve. Removed below, or on
    // any other way out by its Drop.
    let mut registration = crate::registry::register(
        None,
        whom,
        http::admin_router(proxy.clone(), about.clone(), shutdown.child_token()),
        faces.limits,
        shutdown.clone(),
    );

    if faces.stdio {
        let (proxy, shutdown) = (proxy.clone(), shutdown.clone());
        tasks.push(tokio::spawn(async move {
            mcp_supervisor_front::stdio::run(proxy).await;
            tracing::info!("stdin closed: shutting down");
            shutdown.cancel();
        }));
    }

    // Reload requests: SIGHUP and the file watch.
    let reloads = Arc::new(Notify::new());
    if let Some(path) = config_path.clone() {
        tasks.push(tokio::spawn(reloader(
            path.clone(),
            audit_flag,
            proxy.clone(),
            reloads.clone(),
            shutdown.clone(),
        )));
        tasks.push(tokio::spawn(watch_config(
            path,
            reloads.clone(),
            shutdown.clone(),
        )));
    }

    let mut terminate = signal(SignalKind::terminate())?;
    let mut hangup = signal(SignalKind::hangup())?;
    let stop = loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => { tracing::info!("SIGINT: shutting down"); break Stop::Now; }
            _ = terminate.recv() => break Stop::Drain,
            _ = hangup.recv() => {
                if let Some(audit) = proxy.audit() {
                    audit.reopen();
                    tracing::info!("SIGHUP: the audit log is opened again at its path before its next line");
                }
                match &config_path {
                    Some(_) => reloads.notify_one(),
                    None if proxy.audit().is_some() => {}
                    None => tracing::warn!("SIGHUP ignored: there is no config file to reload"),
                }
            }
            () = shutdown.cancelled() => break Stop::Now,
        }
    };
    if let Stop::Drain = stop {
        if faces.http.is_some() && !faces.drain.is_zero() {
            drain_window(&drain, faces.drain, &mut terminate, &shutdown).await;
        } else {
            tracing::info!("SIGTERM: shutting down");
        }
    }
    // Gone from the registry first: a dashboard stops showing a proxy that is stopping.
    if let Some(registration) = registration.as_mut() {
        registration.remove();
    }
    // What still runs is answered as stopping (which cancels it upstream), and streams end.
    drain.stop();
    shutdown.cancel();
    let stopped = tokio::time::timeout(STOP_LIMIT, async {
        let answered = futures::future::join_all(http_tasks.iter_mut());
        if tokio::time::timeout(ANSWER_LIMIT, answered).await.is_err() {
            tracing::debug!("the HTTP faces had not closed their connections; stopping anyway");
        }
        hub.stop().await;
    })
    .await;
    if stopped.is_err() {
        tracing::error!(
            "stopping took longer than {} s; exiting anyway",
            STOP_LIMIT.as_secs()
        );
    }
    for task in tasks.into_iter().chain(http_tasks) {
        task.abort();
    }
    if let Some(audit) = proxy.take_audit() {
        // The last requests' lines, the stopping ones too, are written before the exit.
        let written = tokio::task::spawn_blocking(move || audit.shutdown(AUDIT_LIMIT)).await;
        if let Ok(Err(error)) = written {
            tracing::warn!("{error}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// SIGTERM's drain: not ready from now on (`/readyz` 503), everything still served, until the
/// window is over, a second SIGTERM or a SIGINT comes, or the proxy stops for another reason.
async fn drain_window(
    drain: &Drain,
    window: Duration,
    terminate: &mut tokio::signal::unix::Signal,
    shutdown: &CancellationToken,
) {
    tracing::info!(
        "SIGTERM: draining for {} ms (/readyz says 503; requests are still served); a second SIGTERM or SIGINT stops at once",
        window.as_millis()
    );
    drain.begin();
    tokio::select! {
        () = tokio::time::sleep(window) => tracing::info!(
            "drain window over: calls still running are cancelled; shutting down"
        ),
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT during the drain: shutting down now"),
        _ = terminate.recv() => tracing::info!("second SIGTERM during the drain: shutting down now"),
        () = shutdown.cancelled() => tracing::info!("shutting down during the drain"),
    }
}

/// A reload of the file for each request; the proxy coalesces those made while one runs.
/// Those still running at shutdown are dropped with this task.
async fn reloader(
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
async fn watch_config(path: PathBuf, reloads: Arc<Notify>, shutdown: CancellationToken) {
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

/// The token checks of the config's `auth` (SPEC §14), its keys fetched in the background now
/// so that the first request does not wait for them. An error names what to fix.
fn verifier_of(
    config: &Config,
    faces: &Faces,
) -> anyhow::Result<Option<Arc<mcp_supervisor_front::auth::Verifier>>> {
    let Some(auth) = &config.auth else {
        return Ok(None);
    };
    if faces.guard.token.is_some() {
        anyhow::bail!(
            "both --auth-token-env and the config's \"auth\" guard the HTTP face: use one (auth checks each caller's own token)"
        );
    }
    if faces.http.is_none() {
        tracing::warn!(
            "the config's \"auth\" applies to the HTTP face, and none is served (--http)"
        );
    }
    let settings = mcp_supervisor_front::auth::AuthSettings::from(auth);
    let verifier = Arc::new(
        mcp_supervisor_front::auth::Verifier::new(settings)
            .map_err(|e| anyhow::anyhow!("auth: {e}"))?,
    );
    let warm = verifier.clone();
    tokio::spawn(async move {
        if let Err(error) = warm.refresh_keys().await {
            tracing::warn!(
                "auth: the issuer's keys are not fetched yet ({error}); tokens are checked once they are"
            );
        }
    });
    Ok(Some(verifier))
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
