//! Running the proxy: the stdio face, the HTTP face, the admin endpoints, config reload (SIGHUP
//! and a file watch), and shutdown on SIGINT, SIGTERM or the end of stdin.
//!
//! SIGTERM to a proxy with an MCP HTTP face drains first ([`crate::drain`]): `/readyz` says 503
//! at once, requests are served for the drain window, then what still runs is answered as
//! stopping and the stop below follows. SIGINT, the end of stdin, a stdio-only proxy, and a
//! second SIGTERM or a SIGINT during the window stop at once.
//!
//! Reload requests, from SIGHUP and from the file watch alike, go to [`crate::reload`], which
//! makes each a [`Proxy::reload`] of the file.
//!
//! The audit log (the config's `audit`, or `--audit`) is opened before anything starts (a path
//! that cannot be opened is refused like a bad config), opened again at its path on SIGHUP (log
//! rotation), moved by a reload that changes `audit` (unless `--audit` set it), and written out
//! at the end within [`AUDIT_LIMIT`].
//!
//! Shutdown is bounded (about 5 s, and the audit's 2 s) and leaves no child process: the hub's
//! stop closes every generation's process group before this returns.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use mcp_supervisor::HubOptions;
use mcp_supervisor::core::config::Config;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::drain::Drain;
use crate::http::{self, Guard};
use mcp_supervisor_front::audit::Audit;
use mcp_supervisor_front::{Mode, Proxy};

/// How long a stop may take before we exit anyway.
const STOP_LIMIT: Duration = Duration::from_secs(5);
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

    let listeners = [(faces.http, Some(sealing)), (faces.admin, None)];
    let (guard, limits) = (&faces.guard, faces.limits);
    let http_tasks = match listen(&proxy, &about, listeners, guard, limits, &drain, &shutdown).await
    {
        Ok(tasks) => tasks,
        Err(error) => {
            hub.stop().await;
            return Err(error);
        }
    };
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
        tasks.push(tokio::spawn(crate::reload::reloader(
            path.clone(),
            audit_flag,
            proxy.clone(),
            reloads.clone(),
            shutdown.clone(),
        )));
        tasks.push(tokio::spawn(crate::reload::watch_config(
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
    stop_all(&proxy, &drain, &shutdown, tasks, http_tasks).await;
    Ok(ExitCode::SUCCESS)
}

/// Bind the MCP HTTP face and the admin listener (those asked for), each served on a task of
/// its own.
async fn listen(
    proxy: &Arc<Proxy>,
    about: &Arc<http::page::About>,
    listeners: [(Option<SocketAddr>, Option<Arc<crate::mcp_http::Sealing>>); 2],
    guard: &Guard,
    limits: http::limits::Limits,
    drain: &Drain,
    shutdown: &CancellationToken,
) -> anyhow::Result<Vec<tokio::task::JoinHandle<()>>> {
    let mut http_tasks = Vec::new();
    let count = listeners.iter().filter(|(addr, _)| addr.is_some()).count();
    let limits = http::limits::fit_open_files(limits, count);
    for (addr, mcp) in listeners {
        let Some(addr) = addr else { continue };
        let listener = http::bind(addr).await?;
        let what = if mcp.is_some() {
            "MCP over streamable HTTP at /mcp, and admin endpoints"
        } else {
            "admin endpoints"
        };
        tracing::info!(
            "serving {what} on http://{}",
            listener.local_addr().unwrap_or(addr)
        );
        let (proxy, guard, shutdown) = (proxy.clone(), guard.clone(), shutdown.clone());
        let (drain, about) = (drain.clone(), about.clone());
        http_tasks.push(tokio::spawn(http::serve(
            proxy, about, listener, guard, mcp, drain, limits, shutdown,
        )));
    }
    Ok(http_tasks)
}

/// The stop: what still runs is answered as stopping (which cancels it upstream), streams
/// end, the servers stop (bounded by [`STOP_LIMIT`]), the tasks end, and the audit's last
/// lines are written (bounded by [`AUDIT_LIMIT`]).
async fn stop_all(
    proxy: &Arc<Proxy>,
    drain: &Drain,
    shutdown: &CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    mut http_tasks: Vec<tokio::task::JoinHandle<()>>,
) {
    // What still runs is answered as stopping (which cancels it upstream), and streams end.
    drain.stop();
    shutdown.cancel();
    let stopped = tokio::time::timeout(STOP_LIMIT, async {
        let answered = futures::future::join_all(http_tasks.iter_mut());
        if tokio::time::timeout(ANSWER_LIMIT, answered).await.is_err() {
            tracing::debug!("the HTTP faces had not closed their connections; stopping anyway");
        }
        proxy.hub().stop().await;
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
