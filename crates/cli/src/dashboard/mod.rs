//! `mcp-supervisor dashboard` (SPEC §15): one page for every proxy this user runs on this
//! machine. It serves the proxies' own page ([`page::assets`]) on loopback behind a random token
//! that it prints in a URL (as Jupyter does): `GET /` needs it as `?token=`, the data routes as
//! `Authorization: Bearer` (the page's script moves it there). Its `/dashboard/state` asks every
//! live proxy in the registry over its socket ([`proxies`]); its `/dashboard/events` sends the
//! merged state whenever it changes ([`board`]).
//!
//! It never listens beyond loopback, never serves data without the token, and never writes to a
//! proxy: it reads, and removes the registry files of proxies that are gone.

mod board;
mod proxies;

use std::convert::Infallible;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use axum::Router;
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::middleware;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures::Stream;
use serde_json::Value;
use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

use crate::http::{self, Guard, page};
use crate::registry;
use board::Board;

/// Exit code for bad usage.
const USAGE: u8 = 2;
/// How long the listener may take, once stopped, to close its connections.
const STOP_LIMIT: std::time::Duration = std::time::Duration::from_secs(2);

/// What the command's routes share.
#[derive(Clone)]
struct Shared {
    board: Arc<Board>,
    token: Arc<str>,
    stop: CancellationToken,
}

/// Serve the dashboard of the proxies registered in `dir` (the user's registry when none) on
/// `listen`, a loopback address, until SIGINT or SIGTERM.
pub async fn run(listen: SocketAddr, open: bool, dir: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    if !listen.ip().is_loopback() {
        eprintln!(
            "mcp-supervisor dashboard: --listen {listen} is not a loopback address; the dashboard serves this machine's user only: use 127.0.0.1:PORT or [::1]:PORT"
        );
        return Ok(ExitCode::from(USAGE));
    }
    let folder = dir.unwrap_or_else(registry::default_folder);
    if let Err(why) = registry::open_folder(&folder) {
        anyhow::bail!("{why}");
    }
    let token: Arc<str> = new_token().into();
    let listener = http::bind(listen).await?;
    let addr = listener.local_addr()?;
    let url = format!("http://{addr}/?token={token}");
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{url}")?;
        out.flush()?;
    }
    tracing::info!(
        "serving the dashboard of the proxies registered in {} (SIGINT or SIGTERM stops it)",
        folder.display()
    );
    if open {
        crate::login::open_browser(&url);
    }
    let stop = CancellationToken::new();
    let board = Board::new(folder);
    let watching = tokio::spawn(board.clone().run(stop.child_token()));
    let shared = Shared {
        board,
        token: token.clone(),
        stop: stop.clone(),
    };
    let router = router(shared, token);
    let serving = tokio::spawn(http::listener::run(
        listener,
        router,
        http::limits::Limits::default(),
        stop.clone(),
    ));
    let mut terminate = signal(SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: stopping the dashboard"),
        _ = terminate.recv() => tracing::info!("SIGTERM: stopping the dashboard"),
    }
    stop.cancel();
    if tokio::time::timeout(STOP_LIMIT, serving).await.is_err() {
        tracing::debug!("the dashboard's connections had not closed; stopping anyway");
    }
    watching.abort();
    Ok(ExitCode::SUCCESS)
}

/// 64 hex digits from the system's random source (two v4 UUIDs' random bits and their fixed ones).
fn new_token() -> String {
    format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

/// The page (with `?token=`), its assets, and the data routes, behind the admin guard's Host,
/// Origin and bearer checks (which let the page and its assets through: `/` checks its own).
fn router(shared: Shared, token: Arc<str>) -> Router {
    let mut router = Router::new()
        .route(page::STATE, get(state))
        .route(page::EVENTS, get(events))
        .route(page::PAGE, get(index));
    for asset in page::assets() {
        if asset.path != page::PAGE {
            router = router.route(
                asset.path,
                get(move || async move { page::asset_response(&asset) }),
            );
        }
    }
    let guard = Guard {
        token: Some(token.to_string()),
        ..Guard::default()
    };
    router
        .with_state(shared)
        .layer(middleware::from_fn_with_state(Arc::new(guard), http::check))
}

/// `GET /?token=TOKEN`: the page, with the right token only.
async fn index(State(shared): State<Shared>, RawQuery(query): RawQuery) -> Response {
    let given = query
        .as_deref()
        .and_then(|q| q.split('&').find_map(|pair| pair.strip_prefix("token=")));
    let right =
        given.is_some_and(|t| http::constant_time_eq(t.as_bytes(), shared.token.as_bytes()));
    if !right {
        return (
            StatusCode::FORBIDDEN,
            "this dashboard needs its token: open the URL that `mcp-supervisor dashboard` printed when it started (http://127.0.0.1:PORT/?token=...)\n",
        )
            .into_response();
    }
    match page::assets().iter().find(|a| a.path == page::PAGE) {
        Some(asset) => page::asset_response(asset),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

/// `GET /dashboard/state`: every live proxy, asked now.
async fn state(State(shared): State<Shared>) -> Response {
    match proxies::state_now(&shared.board.folder).await {
        Ok(state) => axum::Json(state).into_response(),
        Err(why) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{why}\n")).into_response(),
    }
}

/// `GET /dashboard/events`: the merged state now, then after each change, until the command
/// stops or the browser goes.
async fn events(State(shared): State<Shared>) -> impl IntoResponse {
    let changes = shared.board.follow();
    let first = proxies::state_now(&shared.board.folder)
        .await
        .unwrap_or_else(|_| proxies::merged([]));
    Sse::new(stream(first, changes, shared.stop.clone())).keep_alive(
        KeepAlive::new()
            .interval(page::KEEP_ALIVE)
            .text("keep-alive"),
    )
}

/// `first`, then each state `changes` publishes, until `stop`.
fn stream(
    first: Value,
    changes: tokio::sync::watch::Receiver<Value>,
    stop: CancellationToken,
) -> impl Stream<Item = Result<Event, Infallible>> {
    futures::stream::unfold(
        (Some(first), changes, stop),
        |(first, mut changes, stop)| async move {
            let state = match first {
                Some(state) => state,
                None => {
                    tokio::select! {
                        changed = changes.changed() => changed.ok()?,
                        () = stop.cancelled() => return None,
                    }
                    changes.borrow_and_update().clone()
                }
            };
            let event = Event::default()
                .event("state")
                .json_data(&state)
                .unwrap_or_else(|_| Event::default().comment("state could not be written"));
            Some((Ok(event), (None, changes, stop)))
        },
    )
}
