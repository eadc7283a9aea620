//! A client's session: opened ([`Proxy::connect`] is the proxy's; [`Proxy::resume`] takes up
//! one sealed elsewhere), ended ([`Proxy::disconnect`], [`Proxy::let_go`]), and what its
//! `initialize` fixed for its life ([`Session`]), serializable so that a transport can seal it.
//!
//! It never decides how a session id is written or carried: that is the transport's.

use std::sync::Arc;

use mcp_supervisor::hub::SessionEnd;
use tokio::sync::mpsc;

use crate::client::{Client, Era, Scope, session_key};
use crate::declared::Capabilities;
use crate::json::lock;
use crate::proxy::Proxy;

pub use crate::client::Session;

impl Proxy {
    /// A client whose session began elsewhere (another process that sealed `session` into the
    /// id the client holds): connected as if its `initialize` had been answered here and its
    /// `notifications/initialized` received. Messages for no request go to `out`.
    pub fn resume(self: &Arc<Self>, out: mpsc::Sender<String>, session: Session) -> Arc<Client> {
        let client = self.connect(out);
        let declared = session
            .capabilities
            .as_deref()
            .map(|c| Capabilities::read(c.get()));
        let upstream = session.upstream.clone();
        *lock(&client.era) = Era::Handshake {
            declared,
            session: Some(session),
            initialized: true,
        };
        self.ensure_handshake();
        // Its instances of isolated `url` servers go on with the upstream sessions it carries.
        if !upstream.is_empty() {
            let origin = Scope::of(&client).whole();
            self.hub.resume_upstream_sessions(&origin, &upstream);
        }
        client
    }

    /// The client ended its session (the end of stdio, an HTTP DELETE): see
    /// [`Proxy::let_go`]; its upstream sessions of isolated `url` servers end too.
    pub fn disconnect(self: &Arc<Self>, client: &Arc<Client>) {
        self.forget(client, SessionEnd::Ended);
    }

    /// This process lets go of a client whose session may come back (evicted, idle, the
    /// process stopping: its sealed id resumes it, here or elsewhere): its calls are cancelled,
    /// the servers' requests waiting for it get an error, it gets no more notifications, and
    /// its instances of isolated servers stop, leaving their upstream sessions open.
    pub fn let_go(self: &Arc<Self>, client: &Arc<Client>) {
        self.forget(client, SessionEnd::LetGo);
    }

    /// [`Proxy::disconnect`] or [`Proxy::let_go`], as `how` says.
    pub fn forget(self: &Arc<Self>, client: &Arc<Client>, how: SessionEnd) {
        client.close();
        self.unsubscribe_left(client);
        // Its own instances of isolated servers end with it (SPEC §11).
        self.hub.end_session(session_key(client), how);
        lock(&self.clients).retain(|c| c.upgrade().is_some_and(|c| !Arc::ptr_eq(&c, client)));
    }
}
