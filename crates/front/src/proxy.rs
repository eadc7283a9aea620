//! The proxy: what every client of every face shares ([`Proxy`]: the hub, the mode, the
//! clients, the call counters, the tool exposure, the input rounds, the audit), and the list of
//! clients that server events reach.
//!
//! The work is in the files beside it, one concern each, as `impl Proxy` blocks over this one
//! value: a message comes in through `face`, a 2026-07-28 request passes `stateless` (the
//! era's layer), and `dispatch` picks where it goes (`handshake`, `tools`, `prompts`,
//! `resources`, `tasks`, `shared`, or a server through `fan_out`).
//!
//! It never touches a supervisor or a generation: everything goes through the hub.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, Weak};

use mcp_supervisor::Hub;
use mcp_supervisor::core::config::{AuditConfig, Config, ToolExposure};
use mcp_supervisor::upstream::notification_text;
use tokio::sync::mpsc;

pub use crate::Mode;
use crate::audit::Audit;
use crate::exposure::ToolSearch;
use crate::json::lock;
use crate::reload::{Reloaded, Reloads};

use crate::client::Client;

/// Shared by every client of every face.
pub struct Proxy {
    pub(crate) hub: Arc<Hub>,
    pub(crate) mode: Mode,
    pub(crate) metrics: Arc<crate::metrics::Metrics>,
    pub(crate) clients: Mutex<Vec<Weak<Client>>>,
    /// Tool calls of clients of protocol 2026-07-28 waiting for their input (a server of the
    /// handshake era asked them something).
    pub(crate) rounds: crate::rounds::Rounds,
    /// `toolExposure: "search"`: two tools in place of every tool ([`crate::exposure`]).
    pub(crate) search: ToolSearch,
    /// One change of a shared server's subscriptions at a time, per server: it is subscribed
    /// to a URI while a client is, and unsubscribed once none is ([`crate::shared`]); a hung
    /// server holds only its own.
    pub(crate) subscribing: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// The log level each shared server was last asked for, by server (a rank in
    /// [`crate::asked::LEVELS`]).
    pub(crate) levels_asked: Mutex<HashMap<String, u8>>,
    /// The generation of each shared server that was last given the clients' subscriptions
    /// and level again ([`Proxy::restore`]).
    pub(crate) restored: Mutex<HashMap<String, u64>>,
    /// Reloads asked for and read ([`Proxy::reload`]).
    pub(crate) reloads: Reloads,
    /// Each server's `authorize` rule and the rate limits ([`crate::rules`]).
    pub(crate) access: Mutex<Arc<crate::rules::Rules>>,
    /// Who created each task ([`crate::owners`]).
    pub(crate) tasks: crate::owners::TaskOwners,
    /// Where each request that reaches a server or is refused is written down (SPEC §14);
    /// unset: nothing is noted ([`crate::trail`]). A reload may move it ([`Proxy::reload`]).
    audit: Mutex<Option<Arc<Audit>>>,
}

impl Proxy {
    /// A proxy of a hub with no servers, in aggregate mode: what the unit tests start from.
    #[cfg(test)]
    pub(crate) fn of_nothing() -> Arc<Self> {
        let config = mcp_supervisor::core::config::Config::default();
        Self::new(Arc::new(Hub::start(config)), Mode::Aggregate)
    }

    pub fn new(hub: Arc<Hub>, mode: Mode) -> Arc<Self> {
        let proxy = Arc::new(Self {
            hub,
            mode,
            metrics: Arc::default(),
            clients: Mutex::new(Vec::new()),
            rounds: crate::rounds::Rounds::default(),
            search: ToolSearch::default(),
            subscribing: Mutex::default(),
            levels_asked: Mutex::new(HashMap::new()),
            restored: Mutex::new(HashMap::new()),
            reloads: Reloads::default(),
            access: Mutex::default(),
            tasks: crate::owners::TaskOwners::default(),
            audit: Mutex::new(None),
        });
        proxy.pass_events_down();
        proxy
    }

    /// Whether the client sees the two tools of search mode instead of every tool.
    pub fn searching(&self) -> bool {
        self.search.is_on()
    }

    /// Set how tools are shown; a change is told to every client with `tools/list_changed`.
    pub fn set_exposure(&self, exposure: ToolExposure) {
        if self.search.set(exposure) {
            tracing::info!(?exposure, "tool exposure changed");
            self.tell_clients(&notification_text("notifications/tools/list_changed", None));
        }
    }

    /// Reload: have the config (`read`) and apply it, its tool exposure first (a change is told
    /// to every client), its rules and its audit (a new `audit.path` is opened, and the lines
    /// of requests from then on go there; one that cannot be opened keeps the running audit,
    /// with a warning; none ends it), then its servers as a diff (added ones start, removed
    /// ones stop, changed ones restart, the rest are not touched).
    ///
    /// One runs at a time. A reload asked for while another runs waits for it; then the first
    /// of those waiting reads the config once for all of them (what changed meanwhile is in
    /// what it reads), and the others end [`Reloaded::Coalesced`] without reading it.
    pub async fn reload<E, F, R>(&self, read: R) -> Reloaded<E>
    where
        R: FnOnce() -> F,
        F: std::future::Future<Output = Result<Config, E>>,
    {
        let Some(_turn) = self.reloads.turn().await else {
            return Reloaded::Coalesced;
        };
        match read().await {
            Ok(config) => {
                self.set_exposure(config.tool_exposure);
                self.set_rules(&config);
                self.move_audit(config.audit.as_ref());
                Reloaded::Applied(self.hub.reload(config).await)
            }
            Err(error) => Reloaded::Kept(error),
        }
    }

    /// Write each client request that reaches a server or is refused to `audit` from now on
    /// (SPEC §14). Set once (a reload moves it): a second audit is refused and handed back.
    pub fn set_audit(&self, audit: Arc<Audit>) -> Result<(), Arc<Audit>> {
        let mut set = lock(&self.audit);
        match &*set {
            Some(_) => Err(audit),
            None => {
                *set = Some(audit);
                Ok(())
            }
        }
    }

    /// The audit requests are written to now, if any.
    pub fn audit(&self) -> Option<Arc<Audit>> {
        lock(&self.audit).clone()
    }

    /// The audit, taken: nothing is written to it from now on (shut it down at the end).
    pub fn take_audit(&self) -> Option<Arc<Audit>> {
        lock(&self.audit).take()
    }

    /// The audit of a reloaded config: kept when its path is the same; else the new path is
    /// opened (one that cannot be opened keeps the running audit, with a warning), or, with
    /// none, the audit ends. The one let go writes what is queued for it once its last
    /// request's line is in (its drop, off the runtime's threads).
    fn move_audit(&self, wanted: Option<&AuditConfig>) {
        let running = self.audit();
        let path = wanted.map(|a| a.path.as_path());
        if running.as_ref().map(|a| a.path()) == path {
            return;
        }
        let opened = match path.map(Audit::open).transpose() {
            Ok(opened) => opened.map(Arc::new),
            Err(error) => {
                tracing::warn!("reload: {error}; the audit log stays where it was");
                return;
            }
        };
        match path {
            Some(path) => tracing::info!("reload: the audit log is now {}", path.display()),
            None => tracing::info!("reload: the config has no \"audit\" now: the audit log ends"),
        }
        let old = std::mem::replace(&mut *lock(&self.audit), opened);
        if let Some(old) = old
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn_blocking(move || drop(old));
        }
    }

    pub fn hub(&self) -> &Arc<Hub> {
        &self.hub
    }

    pub fn metrics(&self) -> &Arc<crate::metrics::Metrics> {
        &self.metrics
    }

    /// A new downstream client (a stdio connection or an HTTP session). `out` carries what
    /// belongs to no request of its: notifications, and server requests no call of its caused.
    pub fn connect(self: &Arc<Self>, out: mpsc::Sender<String>) -> Arc<Client> {
        let client = Arc::new(Client {
            out,
            owed: Arc::default(),
            metrics: self.metrics.clone(),
            next: AtomicU64::new(1),
            waiting: Mutex::new(Some(HashMap::new())),
            calls: Mutex::default(),
            era: Mutex::default(),
            asked: Mutex::new(crate::asked::Asked::default()),
            caller: Mutex::new(None),
        });
        let mut clients = lock(&self.clients);
        clients.retain(|c| c.strong_count() > 0);
        clients.push(Arc::downgrade(&client));
        client
    }

    /// Send `text` to every client that has finished its handshake (SPEC: nothing but pings
    /// and logs before `initialized`).
    pub(crate) fn tell_clients(&self, text: &str) {
        for client in self.clients() {
            if client.is_initialized() {
                let _ = client.send(text.to_string());
            }
        }
    }

    pub(crate) fn clients(&self) -> Vec<Arc<Client>> {
        let mut clients = lock(&self.clients);
        clients.retain(|c| c.strong_count() > 0);
        clients.iter().filter_map(Weak::upgrade).collect()
    }
}
