//! Running the proxy: the stdio face, the HTTP face, the admin endpoints, config reload (SIGHUP
//! and a file watch), and shutdown on SIGINT, SIGTERM or the end of stdin.
//!
//! SIGTERM to a proxy with an MCP HTTP face drains first ([`crate::drain`]): `/readyz` says 503
//! at once, requests are served for the drain window, then what still runs is answered as
//! stopping and the stop below follows. SIGINT, the end of stdin, a stdio-only proxy, and a
//! second SIGTERM or a SIGINT during the window stop at once.
//!
//! Reload requests, from SIGHUP and from the file watch alike, go to one reloader: a request that
//! arrives while a reload runs is kept (several as one), and once that reload has ended the file
//! is read again as it then is.
//!
//! Shutdown is bounded (about 5 s) and leaves no child process: the hub's stop closes every
//! generation's process group before this returns.

use std::net::SocketAddr;
use std::path::PathBuf;
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
use mcp_supervisor_front::{Mode, Proxy};

/// How long a stop may take before we exit anyway.
const STOP_LIMIT: Duration = Duration::from_secs(5);
/// How often the config file is checked for changes.
const WATCH_EVERY: Duration = Duration::from_secs(1);
/// How long the HTTP faces may take, once the proxy stops, to send what they still owe (the
/// stopping answers, the streams' last events) before the servers are stopped.
const ANSWER_LIMIT: Duration = Duration::from_secs(1);

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

/// Serve `config` until told to stop. `config_path` enables reload.
pub async fn run(
    config: Config,
    config_path: Option<PathBuf>,
    mode: Mode,
    faces: Faces,
    state_dir: Option<PathBuf>,
) -> anyhow::Result<ExitCode> {
    if let Some(dir) = &state_dir {
        tracing::debug!("saved catalogs in {}", dir.display());
    }
    let sealing = Arc::new(crate::mcp_http::Sealing {
        keys: faces.keys,
        max_age: config.session_max_age,
    });
    let options = HubOptions {
        state_dir,
        trace: crate::telemetry::context(),
        ..HubOptions::default()
    };
    let proxy = mcp_supervisor_front::start(config, mode, options);
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
        let drain = drain.clone();
        http_tasks.push(tokio::spawn(http::serve(
            proxy, listener, guard, mcp, drain, limits, shutdown,
        )));
    }
    drain.set_ready();

    if faces.stdio {
        let (proxy, shutdown) = (proxy.clone(), shutdown.clone());
        tasks.push(tokio::spawn(async move {
            mcp_supervisor_front::stdio::run(proxy).await;
            tracing::info!("stdin closed: shutting down");
            shutdown.cancel();
        }));
    }

    // Reload requests: a permit kept while a reload runs stands for every request made meanwhile.
    let reloads = Arc::new(Notify::new());
    if let Some(path) = config_path.clone() {
        tasks.push(tokio::spawn(reloader(
            path.clone(),
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
            _ = hangup.recv() => match &config_path {
                Some(_) => reloads.notify_one(),
                None => tracing::warn!("SIGHUP ignored: there is no config file to reload"),
            },
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

/// Apply reload requests one at a time. Requests made while a reload runs coalesce into one,
/// which reads the file once that reload has ended.
async fn reloader(
    path: PathBuf,
    proxy: Arc<Proxy>,
    requests: Arc<Notify>,
    shutdown: CancellationToken,
) {
    loop {
        tokio::select! {
            () = requests.notified() => {}
            () = shutdown.cancelled() => return,
        }
        reload(&path, &proxy).await;
    }
}

/// Read and validate the config file and apply it as a diff; an invalid one is rejected and the
/// running config stays.
async fn reload(path: &PathBuf, proxy: &Proxy) {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) => {
            tracing::error!(
                "reload: cannot read {}: {error}; keeping the running config",
                path.display()
            );
            return;
        }
    };
    match parse_config(&text, &|name| std::env::var(name).ok()) {
        Ok(config) => {
            proxy.set_exposure(config.tool_exposure);
            let summary = proxy.hub().reload(config).await;
            tracing::info!(
                added = ?summary.added, removed = ?summary.removed, changed = ?summary.changed,
                unchanged = summary.unchanged.len(),
                "reloaded {}", path.display()
            );
        }
        Err(errors) => {
            tracing::error!(
                "reload: {} is invalid, keeping the running config:\n{errors}",
                path.display()
            );
        }
    }
}

/// Ask for a reload when the file's contents change (checked every second; cheap and robust
/// across editors that replace the file).
async fn watch_config(path: PathBuf, reloads: Arc<Notify>, shutdown: CancellationToken) {
    let mut last = std::fs::read(&path).ok();
    loop {
        tokio::select! {
            () = tokio::time::sleep(WATCH_EVERY) => {}
            () = shutdown.cancelled() => return,
        }
        let now = std::fs::read(&path).ok();
        if now.is_some() && now != last {
            last = now;
            tracing::info!("{} changed: reloading", path.display());
            reloads.notify_one();
        }
    }
}
