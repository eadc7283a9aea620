//! One instance per identity (`isolation: "user"`, SPEC §14): which client sessions each
//! identity has open, the key its instances are kept under, and the client those instances
//! answer to (every session of the identity).
//!
//! It only keeps the membership; it never starts or stops an instance (the hub does, when an
//! identity's first session needs one and after its last session ends).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::value::RawValue;

use crate::link::{BoxFuture, Downstream, RpcError};

/// The identities with sessions open, and their instances' keys.
#[derive(Default)]
pub(crate) struct Users {
    keys: HashMap<String, usize>,
    members: HashMap<usize, Arc<Members>>,
    next: usize,
}

impl Users {
    /// Client session `session` (its downstream `client`) of identity `identity` joins it: the
    /// key its identity's instances are kept under, and the downstream they answer to.
    ///
    /// A key is odd, and a client session's own key (the address of its client) is not, so an
    /// identity's instances are never taken for one session's.
    pub(crate) fn join(
        &mut self,
        identity: &str,
        session: usize,
        client: Arc<dyn Downstream>,
    ) -> (usize, Arc<dyn Downstream>) {
        let key = self.key(identity);
        let members = self
            .members
            .entry(key)
            .or_insert_with(|| Arc::new(Members::of(identity)))
            .clone();
        members.add(session, client);
        (key, members)
    }

    /// The key of `identity`'s instances (a request with no session uses them without joining).
    pub(crate) fn key(&mut self, identity: &str) -> usize {
        match self.keys.get(identity) {
            Some(key) => *key,
            None => {
                self.next += 1;
                let key = (self.next << 1) | 1;
                self.keys.insert(identity.to_string(), key);
                key
            }
        }
    }

    /// Client session `session` ended: it leaves every identity it belonged to. The keys of
    /// the identities it was the last session of: their instances are to end.
    pub(crate) fn leave(&mut self, session: usize) -> Vec<usize> {
        let mut emptied = Vec::new();
        self.members.retain(|key, members| {
            if members.remove(session) {
                emptied.push(*key);
                false
            } else {
                true
            }
        });
        self.keys.retain(|_, key| !emptied.contains(key));
        emptied
    }

    /// Sessions open of the identity whose instances are kept under `key`.
    #[cfg(test)]
    pub(crate) fn sessions(&self, key: usize) -> usize {
        self.members
            .get(&key)
            .map_or(0, |m| lock(&m.sessions).len())
    }
}

/// Every open session of one identity, as one downstream: a notification goes to each, a
/// server's request (one no call caused) to the session that joined last.
pub(crate) struct Members {
    /// The identity's key (as [`Downstream::identity`] gives it).
    identity: String,
    sessions: Mutex<Vec<(usize, Arc<dyn Downstream>)>>,
}

impl Members {
    fn of(identity: &str) -> Self {
        Self {
            identity: identity.to_string(),
            sessions: Mutex::new(Vec::new()),
        }
    }

    fn add(&self, session: usize, client: Arc<dyn Downstream>) {
        let mut sessions = lock(&self.sessions);
        sessions.retain(|(s, _)| *s != session);
        sessions.push((session, client));
    }

    /// Remove `session`; whether it was the last one.
    fn remove(&self, session: usize) -> bool {
        let mut sessions = lock(&self.sessions);
        let before = sessions.len();
        sessions.retain(|(s, _)| *s != session);
        before != sessions.len() && sessions.is_empty()
    }
}

impl Downstream for Members {
    fn request(
        &self,
        method: &str,
        params: Option<Box<RawValue>>,
    ) -> BoxFuture<'static, Result<Box<RawValue>, RpcError>> {
        let last = lock(&self.sessions).last().map(|(_, c)| c.clone());
        match last {
            Some(client) => client.request(method, params),
            None => {
                let method = method.to_string();
                Box::pin(async move {
                    Err(RpcError::new(
                        -32603,
                        format!("{method}: no session of this identity is open to answer it"),
                    ))
                })
            }
        }
    }

    fn notify(&self, method: &str, params: Option<Box<RawValue>>) {
        let sessions: Vec<_> = lock(&self.sessions)
            .iter()
            .map(|(_, c)| c.clone())
            .collect();
        for client in sessions {
            client.notify(method, params.clone());
        }
    }

    fn identity(&self) -> Option<String> {
        Some(self.identity.clone())
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Heard(Mutex<Vec<String>>);

    impl Downstream for Heard {
        fn request(
            &self,
            method: &str,
            _params: Option<Box<RawValue>>,
        ) -> BoxFuture<'static, Result<Box<RawValue>, RpcError>> {
            lock(&self.0).push(format!("request {method}"));
            Box::pin(async { RawValue::from_string("{}".into()).map_err(|_| RpcError::new(0, "")) })
        }

        fn notify(&self, method: &str, _params: Option<Box<RawValue>>) {
            lock(&self.0).push(format!("notify {method}"));
        }
    }

    #[tokio::test]
    async fn an_identitys_sessions_share_one_key_and_its_instances_end_with_its_last_session() {
        let mut users = Users::default();
        let (a, b, c) = (
            Arc::new(Heard::default()),
            Arc::new(Heard::default()),
            Arc::new(Heard::default()),
        );
        let (alice, to_alice) = users.join("alice", 8, a.clone());
        let (again, _) = users.join("alice", 16, b.clone());
        let (bob, _) = users.join("bob", 24, c.clone());
        assert_eq!(alice, again, "one key per identity");
        assert_ne!(alice, bob);
        assert_eq!(
            alice % 2,
            1,
            "never a session's own key (an aligned address)"
        );
        assert_eq!(users.sessions(alice), 2);

        to_alice.notify("notifications/tools/list_changed", None);
        let _ = to_alice.request("roots/list", None).await;
        assert_eq!(*lock(&a.0), ["notify notifications/tools/list_changed"]);
        assert_eq!(
            *lock(&b.0),
            [
                "notify notifications/tools/list_changed",
                "request roots/list"
            ],
            "notifications to every session, a request to the latest"
        );
        assert!(lock(&c.0).is_empty(), "nothing reaches another identity");

        assert!(users.leave(8).is_empty(), "alice still has a session");
        assert_eq!(users.leave(16), vec![alice], "her last session ended");
        let (later, _) = users.join("alice", 32, a);
        assert_ne!(later, alice, "a new instance key after the old ones ended");
    }
}
