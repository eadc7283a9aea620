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
use std::sync::{Arc, Mutex, OnceLock, Weak};

use mcp_supervisor::Hub;
use mcp_supervisor::core::config::{Config, ToolExposure};
use mcp_supervisor::upstream::notification_text;
use tokio::sync::mpsc;

pub use crate::Mode;
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
    /// Each server's `authorize` rule and the rate limits ([`crate::access`]).
    pub(crate) access: Mutex<Arc<crate::access::Rules>>,
    /// Who created each task ([`crate::tasks`]).
    pub(crate) tasks: crate::tasks::TaskOwners,
    /// Where each request that reaches a server or is refused is written down (SPEC §14);
    /// unset: nothing is noted ([`crate::trail`]).
    audit: OnceLock<Arc<crate::audit::Audit>>,
}

impl Proxy {
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
            tasks: crate::tasks::TaskOwners::default(),
            audit: OnceLock::new(),
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
    /// to every client), then its servers as a diff (added ones start, removed ones stop,
    /// changed ones restart, the rest are not touched).
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
                Reloaded::Applied(self.hub.reload(config).await)
            }
            Err(error) => Reloaded::Kept(error),
        }
    }

    /// Write each client request that reaches a server or is refused to `audit` from now on
    /// (SPEC §14). Set once: a second audit is refused and handed back.
    pub fn set_audit(
        &self,
        audit: Arc<crate::audit::Audit>,
    ) -> Result<(), Arc<crate::audit::Audit>> {
        self.audit.set(audit)
    }

    /// The audit requests are written to, if one was set.
    pub fn audit(&self) -> Option<&Arc<crate::audit::Audit>> {
        self.audit.get()
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
