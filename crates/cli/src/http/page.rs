//! The dashboard (SPEC §15): the page at `GET /` and its two assets, embedded in the binary, and
//! the two data routes it reads, `GET /dashboard/state` (every server of this proxy as a person
//! reads it: state, pid, uptime, restarts, tools, last error, what to do, the last hour's events
//! and calls) and `GET /dashboard/events` (the same, as server-sent events, sent again after each
//! change).
//!
//! The page and its assets are public: they hold no data, and a listener that needs a token serves
//! them without one so that the page can ask for it ([`is_public`]). The data routes sit behind
//! whatever guard the listener has, like every admin endpoint.
//!
//! It reads the hub (status, events, calls) and never changes anything; it never reads an MCP
//! message. The `dashboard` command serves the same assets ([`assets`]) and merges the states of
//! several proxies, each made here.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures::Stream;
use mcp_supervisor::history::unix_ms;
use mcp_supervisor::{HubEvent, ServerState, ServerStatus};
use serde::Serialize;
use tokio::sync::broadcast::error::RecvError;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use mcp_supervisor::core::config::{Config, TransportConfig};
use mcp_supervisor_front::Mode;
use mcp_supervisor_front::proxy::Proxy;

/// The page's routes.
pub const PAGE: &str = "/";
pub const SCRIPT: &str = "/dashboard.js";
pub const STYLE: &str = "/dashboard.css";
pub const STATE: &str = "/dashboard/state";
pub const EVENTS: &str = "/dashboard/events";

/// The shortest time between two states sent on one event stream: a burst of changes (a crash
/// loop of many servers) is one state.
pub const COALESCE: Duration = Duration::from_millis(250);
/// How often the call counters are looked at for a change (calls are no event of the hub's).
pub const CALLS_EVERY: Duration = Duration::from_secs(5);
/// The keep-alive comment's interval on an idle stream.
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// What the browser is told it may load: this origin's script, style and data, nothing else.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

const HTML: &str = include_str!("../../assets/dashboard.html");
const JS: &str = include_str!("../../assets/dashboard.js");
const CSS: &str = include_str!("../../assets/dashboard.css");

/// One embedded file of the page.
#[derive(Clone, Copy, Debug)]
pub struct Asset {
    pub path: &'static str,
    pub content_type: &'static str,
    pub body: &'static str,
}

/// The page and its assets, for every listener that serves them.
pub fn assets() -> [Asset; 3] {
    [
        Asset {
            path: PAGE,
            content_type: "text/html; charset=utf-8",
            body: HTML,
        },
        Asset {
            path: SCRIPT,
            content_type: "text/javascript; charset=utf-8",
            body: JS,
        },
        Asset {
            path: STYLE,
            content_type: "text/css; charset=utf-8",
            body: CSS,
        },
    ]
}

/// Whether `path` is the page or one of its assets: served without a token.
pub fn is_public(path: &str) -> bool {
    assets().iter().any(|asset| asset.path == path)
}

/// `asset` as a response, with the page's security headers.
pub fn asset_response(asset: &Asset) -> Response {
    (
        [
            (header::CONTENT_TYPE, asset.content_type),
            (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        asset.body,
    )
        .into_response()
}

/// Which command runs the proxy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Serve,
    Wrap,
}

/// What this proxy is, for a person (and the commands it suggests).
#[derive(Clone, Debug)]
pub struct About {
    pub kind: Kind,
    /// What a person sees: `wrap --name` (or the server's name), or the config file's name.
    pub name: String,
    /// `serve`'s config file, for the commands the page suggests.
    pub config: Option<PathBuf>,
    /// The `--state-dir` given, when not the default.
    pub state_dir: Option<PathBuf>,
    /// `wrap --url URL --oauth`'s URL (its login is by URL).
    pub url: Option<String>,
    pub started_at: SystemTime,
    pub pid: u32,
}

impl About {
    /// This process: `serve` of `config_path`, or `wrap` of `config`'s one server; `state_dir`,
    /// the pins' folder, is named in the commands only when it is not the default.
    pub fn of(
        config: &Config,
        config_path: Option<&Path>,
        mode: Mode,
        state_dir: Option<&Path>,
    ) -> Self {
        let server = config.servers.first();
        let (kind, name) = match (mode, server) {
            (Mode::Transparent, Some(server)) => (Kind::Wrap, server.name.clone()),
            _ => (
                Kind::Serve,
                config_path
                    .and_then(Path::file_name)
                    .map_or_else(|| "serve".to_owned(), |n| n.to_string_lossy().into_owned()),
            ),
        };
        let url = match server.map(|s| &s.transport) {
            Some(TransportConfig::Http { url, .. }) if kind == Kind::Wrap => Some(url.clone()),
            _ => None,
        };
        let default_dir = mcp_supervisor::catalog::CatalogStore::default_dir();
        Self {
            kind,
            name,
            config: config_path.map(Path::to_path_buf),
            state_dir: state_dir
                .filter(|dir| default_dir.as_deref() != Some(*dir))
                .map(Path::to_path_buf),
            url,
            started_at: SystemTime::now(),
            pid: std::process::id(),
        }
    }

    /// The command a person runs to sign `server` in.
    fn login_command(&self, server: &str) -> String {
        let mut words = vec![
            "mcp-supervisor".to_owned(),
            "login".to_owned(),
            quoted(server),
        ];
        match (&self.config, &self.url) {
            (Some(config), _) => words.extend(["--config".to_owned(), quoted_path(config)]),
            (None, Some(url)) => words.extend(["--url".to_owned(), quoted(url)]),
            (None, None) => {}
        }
        words.join(" ")
    }

    /// The command a person runs to accept `server`'s changed tools.
    fn approve_command(&self, server: &str) -> String {
        let mut words = vec![
            "mcp-supervisor".to_owned(),
            "approve".to_owned(),
            quoted(server),
        ];
        if let Some(config) = &self.config {
            words.extend(["--config".to_owned(), quoted_path(config)]);
        }
        if let Some(dir) = &self.state_dir {
            words.extend(["--state-dir".to_owned(), quoted_path(dir)]);
        }
        words.join(" ")
    }
}

/// `word` as a shell reads it back: as is when it is plain, else in single quotes.
fn quoted(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=@%+,".contains(c));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

fn quoted_path(path: &Path) -> String {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    quoted(&absolute.to_string_lossy())
}

/// What a person must do about a server.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Action {
    /// `needs_auth` or `withheld`.
    pub why: &'static str,
    pub command: String,
}

/// One server as the page shows it.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerView {
    pub name: String,
    pub state: ServerState,
    pub generation: u64,
    pub pid: Option<u32>,
    /// When the current connection became ready (ms since the Unix epoch).
    pub ready_since: Option<u64>,
    pub restarts: u64,
    pub attempts: u32,
    pub max_attempts: u32,
    pub tools: usize,
    pub withheld_tools: usize,
    pub last_error: Option<String>,
    pub enabled: bool,
    /// Its sandbox and what the kernel gives it (SPEC §16); `None`: not sandboxed.
    pub sandbox: Option<mcp_supervisor::sandbox::SandboxStatus>,
    pub action: Option<Action>,
    pub events: Vec<mcp_supervisor::history::Event>,
    pub calls: Calls,
}

/// A server's calls of the last hour.
#[derive(Clone, Debug, Serialize)]
pub struct Calls {
    pub minutes: Vec<mcp_supervisor::history::CallStats>,
    pub hour: mcp_supervisor::history::CallStats,
}

/// One proxy as the page shows it.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProxyView {
    pub id: String,
    pub name: String,
    pub kind: Kind,
    pub pid: u32,
    pub started_at: u64,
    pub servers: Vec<ServerView>,
}

/// What `/dashboard/state` answers: one proxy here, every proxy in `dashboard`.
#[derive(Clone, Debug, Serialize)]
pub struct StateView {
    pub now: u64,
    pub proxies: Vec<ProxyView>,
}

/// What a person must do about `status`, if anything.
fn action_of(about: &About, status: &ServerStatus) -> Option<Action> {
    if status.state == ServerState::NeedsAuth {
        Some(Action {
            why: "needs_auth",
            command: about.login_command(&status.name),
        })
    } else if status.withheld_tools > 0 {
        Some(Action {
            why: "withheld",
            command: about.approve_command(&status.name),
        })
    } else {
        None
    }
}

/// This proxy's state now.
pub fn state_of(proxy: &Proxy, about: &About) -> StateView {
    let now = SystemTime::now();
    let hub = proxy.hub();
    let servers = hub
        .status()
        .into_iter()
        .map(|status| {
            let (minutes, hour) = hub.calls(&status.name);
            ServerView {
                action: action_of(about, &status),
                events: hub.events(&status.name),
                calls: Calls { minutes, hour },
                ready_since: status.uptime_ms.map(|ms| unix_ms(now).saturating_sub(ms)),
                name: status.name,
                state: status.state,
                generation: status.generation,
                pid: status.pid,
                restarts: status.restarts,
                attempts: status.attempts,
                max_attempts: status.max_attempts,
                tools: status.tools,
                withheld_tools: status.withheld_tools,
                last_error: status.last_error,
                enabled: status.enabled,
                sandbox: status.sandbox,
            }
        })
        .collect();
    StateView {
        now: unix_ms(now),
        proxies: vec![ProxyView {
            id: about.pid.to_string(),
            name: about.name.clone(),
            kind: about.kind,
            pid: about.pid,
            started_at: unix_ms(about.started_at),
            servers,
        }],
    }
}

/// What the page's routes need.
#[derive(Clone)]
pub struct Page {
    pub proxy: Arc<Proxy>,
    pub about: Arc<About>,
    /// Ends the event streams when the proxy stops.
    pub stop: CancellationToken,
}

/// The page, its assets and its data routes (no guard: the caller layers one).
pub fn router(page: Page) -> Router {
    let mut router = Router::new();
    for asset in assets() {
        router = router.route(
            asset.path,
            get(move || async move { asset_response(&asset) }),
        );
    }
    router
        .route(STATE, get(state))
        .route(EVENTS, get(events))
        .with_state(page)
}

async fn state(State(page): State<Page>) -> Response {
    let mut response = axum::Json(state_of(&page.proxy, &page.about)).into_response();
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

async fn events(State(page): State<Page>) -> impl IntoResponse {
    let stream = changes(page);
    (
        [(header::CACHE_CONTROL, "no-store")],
        Sse::new(stream).keep_alive(KeepAlive::new().interval(KEEP_ALIVE)),
    )
}

/// What the calls of every server add up to: a change means new calls to show.
fn calls_seen(proxy: &Proxy) -> Vec<(u32, u32)> {
    let hub = proxy.hub();
    hub.servers()
        .iter()
        .map(|name| {
            let (_, hour) = hub.calls(name);
            (hour.calls, hour.errors)
        })
        .collect()
}

/// One event stream's state between two states sent.
struct Watching {
    page: Page,
    hub_events: tokio::sync::broadcast::Receiver<HubEvent>,
    calls: Vec<(u32, u32)>,
    last_sent: Option<Instant>,
}

/// The states to send: one at once, then one after each change, at most one per [`COALESCE`];
/// the stream ends when the proxy stops.
fn changes(page: Page) -> impl Stream<Item = Result<Event, std::convert::Infallible>> {
    let watching = Watching {
        hub_events: page.proxy.hub().subscribe(),
        calls: calls_seen(&page.proxy),
        page,
        last_sent: None,
    };
    futures::stream::unfold(watching, |mut w| async move {
        if let Some(last) = w.last_sent {
            if !w.changed().await {
                return None;
            }
            // Changes that come within the window are sent with this one.
            tokio::select! {
                () = tokio::time::sleep_until(last + COALESCE) => {}
                () = w.page.stop.cancelled() => return None,
            }
            while let Ok(_) | Err(tokio::sync::broadcast::error::TryRecvError::Lagged(_)) =
                w.hub_events.try_recv()
            {}
            w.calls = calls_seen(&w.page.proxy);
        }
        w.last_sent = Some(Instant::now());
        let event = Event::default()
            .event("state")
            .json_data(state_of(&w.page.proxy, &w.page.about))
            .unwrap_or_else(|_| Event::default().comment("state could not be written"));
        Some((Ok(event), w))
    })
}

impl Watching {
    /// Wait for a change worth a new state; false when the proxy stops.
    async fn changed(&mut self) -> bool {
        let mut tick = tokio::time::interval_at(Instant::now() + CALLS_EVERY, CALLS_EVERY);
        loop {
            tokio::select! {
                () = self.page.stop.cancelled() => return false,
                event = self.hub_events.recv() => match event {
                    Ok(HubEvent::State { .. } | HubEvent::ToolsChanged) | Err(RecvError::Lagged(_)) => return true,
                    Ok(HubEvent::Notification(_)) => {}
                    Err(RecvError::Closed) => return false,
                },
                _ = tick.tick() => {
                    let calls = calls_seen(&self.page.proxy);
                    if calls != self.calls {
                        self.calls = calls;
                        return true;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn about(config: Option<&str>, url: Option<&str>) -> About {
        About {
            kind: Kind::Serve,
            name: "servers.json".into(),
            config: config.map(PathBuf::from),
            state_dir: None,
            url: url.map(str::to_owned),
            started_at: std::time::UNIX_EPOCH,
            pid: 1,
        }
    }

    #[test]
    fn the_login_command_names_the_config_or_the_url() {
        assert_eq!(
            about(Some("/etc/mcp/servers.json"), None).login_command("github"),
            "mcp-supervisor login github --config /etc/mcp/servers.json"
        );
        assert_eq!(
            about(None, Some("https://mcp.example/mcp")).login_command("linear"),
            "mcp-supervisor login linear --url https://mcp.example/mcp"
        );
        assert_eq!(
            about(Some("/my dir/it's.json"), None).login_command("gh"),
            r"mcp-supervisor login gh --config '/my dir/it'\''s.json'"
        );
    }

    #[test]
    fn the_approve_command_names_the_state_dir_when_one_was_given() {
        let mut about = about(Some("/c.json"), None);
        about.state_dir = Some("/var/lib/mcp".into());
        assert_eq!(
            about.approve_command("fs"),
            "mcp-supervisor approve fs --config /c.json --state-dir /var/lib/mcp"
        );
    }

    #[test]
    fn only_the_page_and_its_assets_are_public() {
        for path in [PAGE, SCRIPT, STYLE] {
            assert!(is_public(path), "{path}");
        }
        for path in [
            STATE,
            EVENTS,
            "/status",
            "/history",
            "/metrics",
            "/dashboard",
        ] {
            assert!(!is_public(path), "{path}");
        }
    }

    #[test]
    fn the_page_loads_nothing_from_another_origin() {
        // SVG's namespace is a name, not an address: nothing is fetched from it.
        const SVG_NAMESPACE: &str = "http://www.w3.org/2000/svg";
        for asset in assets() {
            let body = asset.body.replace(SVG_NAMESPACE, "");
            for needle in ["http://", "https://", "//cdn", "@import", "url("] {
                assert!(
                    !body.contains(needle),
                    "{} names {needle}: everything it needs must come from this origin",
                    asset.path
                );
            }
        }
        assert!(HTML.contains(SCRIPT.trim_start_matches('/')));
        assert!(HTML.contains(STYLE.trim_start_matches('/')));
    }
}
