//! The dashboard's live view of every proxy, for its event streams: while at least one browser
//! follows it, one subscription per live proxy to that proxy's `/dashboard/events` over its
//! socket, the registry scanned again every [`RESCAN`], and the merged state published on a
//! watch channel whenever a proxy's state changes or a proxy comes or goes.
//!
//! It holds one task per live proxy and no more: a proxy that went is dropped with its task, and
//! with no browser left every task ends. It never writes to a proxy; it removes the files of
//! stale entries only (through [`registry`]).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::{Notify, mpsc, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::proxies;
use crate::registry::{self, Entry, Reach, Verdict};

/// How often the registry is read again for proxies that came or went.
pub const RESCAN: Duration = Duration::from_secs(2);
/// Updates from the subscriptions not yet looked at (each subscription waits past it).
const UPDATES: usize = 64;

/// The merged state of every proxy, for the browsers that follow it.
pub struct Board {
    pub folder: PathBuf,
    states: watch::Sender<Value>,
    /// A browser came: start following the proxies if not yet.
    wake: Notify,
}

/// What a proxy's subscription says.
enum Update {
    State(u32, Vec<Value>),
    Ended(u32, Reach),
}

/// What is known of one proxy.
enum View {
    /// Subscribed, no state yet (at most [`proxies::ANSWER_LIMIT`] after connecting).
    Pending,
    Live(Vec<Value>),
    Unreachable,
}

/// One live entry and its subscription (ended once it failed; started again at the next scan).
struct Slot {
    entry: Entry,
    view: View,
    task: Option<JoinHandle<()>>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

impl Board {
    pub fn new(folder: PathBuf) -> Arc<Self> {
        let (states, _) = watch::channel(proxies::merged([]));
        Arc::new(Self {
            folder,
            states,
            wake: Notify::new(),
        })
    }

    /// Follow the merged state: each change from now on.
    pub fn follow(&self) -> watch::Receiver<Value> {
        let receiver = self.states.subscribe();
        self.wake.notify_one();
        receiver
    }

    /// Keep the merged state while anyone follows it, until `shutdown`.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let (updates_tx, mut updates) = mpsc::channel(UPDATES);
        let mut slots: BTreeMap<u32, Slot> = BTreeMap::new();
        let mut rescan = tokio::time::interval(RESCAN);
        rescan.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            if self.states.receiver_count() == 0 {
                // Nobody looks: every subscription ends until a browser comes.
                slots.clear();
                tokio::select! {
                    () = self.wake.notified() => {}
                    () = shutdown.cancelled() => return,
                }
                rescan.reset_immediately();
                continue;
            }
            tokio::select! {
                _ = rescan.tick() => self.rescan(&mut slots, &updates_tx),
                Some(update) = updates.recv() => match update {
                    Update::State(pid, list) => {
                        if let Some(slot) = slots.get_mut(&pid) {
                            slot.view = View::Live(list);
                        }
                    }
                    Update::Ended(pid, reach) => {
                        if let Some(slot) = slots.get_mut(&pid) {
                            slot.task = None;
                            if registry::verdict(registry::pid_alive(pid), reach) == Verdict::Stale {
                                registry::remove_stale(&self.folder, pid);
                                slots.remove(&pid);
                            } else {
                                slot.view = View::Unreachable;
                            }
                        }
                        // A proxy that stops ends its stream, then takes its entry away.
                        self.rescan(&mut slots, &updates_tx);
                    }
                },
                () = shutdown.cancelled() => return,
            }
            self.publish(&slots);
        }
    }

    /// Read the registry: drop the proxies that went, subscribe to those that came, and again to
    /// those whose subscription ended.
    fn rescan(&self, slots: &mut BTreeMap<u32, Slot>, updates: &mpsc::Sender<Update>) {
        let entries = registry::scan(&self.folder).unwrap_or_else(|why| {
            tracing::warn!("{why}");
            Vec::new()
        });
        slots.retain(|pid, _| entries.iter().any(|e| e.pid == *pid));
        for entry in entries {
            let slot = slots.entry(entry.pid).or_insert_with(|| Slot {
                entry: entry.clone(),
                view: View::Pending,
                task: None,
            });
            if slot.task.is_none() {
                slot.task = Some(tokio::spawn(subscribe(entry, updates.clone())));
            }
        }
    }

    /// Send the merged state if it changed, once no proxy is still pending (none is for more
    /// than its first answer's limit).
    fn publish(&self, slots: &BTreeMap<u32, Slot>) {
        if slots.values().any(|s| matches!(s.view, View::Pending)) {
            return;
        }
        let mut list = Vec::new();
        for slot in slots.values() {
            match &slot.view {
                View::Live(proxies) => list.extend(proxies.iter().cloned()),
                View::Unreachable => list.push(proxies::unreachable(&slot.entry)),
                View::Pending => {}
            }
        }
        let state = proxies::merged(list);
        self.states.send_if_modified(|last| {
            let changed = last.get("proxies") != state.get("proxies");
            if changed {
                *last = state;
            }
            changed
        });
    }
}

/// One proxy's subscription: its states, then how it ended.
async fn subscribe(entry: Entry, updates: mpsc::Sender<Update>) {
    let pid = entry.pid;
    let reach = proxies::follow(&entry, |list| {
        let updates = updates.clone();
        async move {
            let _ = updates.send(Update::State(pid, list)).await;
        }
    })
    .await;
    let _ = updates.send(Update::Ended(pid, reach)).await;
}
