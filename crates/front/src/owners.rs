//! Who created each task (SPEC §14), as a plain value the proxy holds: a task that a caller
//! with an identity created is that identity's alone. Bounded: the oldest is forgotten first.
//!
//! It never routes or answers a request ([`crate::tasks`] does, asking it who sees a task).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use crate::json::lock;

/// The most tasks whose creator is kept; past it the oldest is forgotten, and becomes unknown
/// to its creator too (about 100 bytes each: some 6 MiB at the most).
pub const OWNED_TASKS: usize = 65_536;

/// Who created each task that a caller with an identity created, by the id its client sees.
/// Bounded: [`OWNED_TASKS`], the oldest forgotten first.
#[derive(Default)]
pub(crate) struct TaskOwners(Mutex<Owners>);

#[derive(Default)]
struct Owners {
    by_task: HashMap<String, String>,
    /// The tasks in the order they were created, to forget the oldest.
    order: VecDeque<String>,
}

impl TaskOwners {
    /// The task `id` was created by the identity whose key is `owner`.
    pub(crate) fn created(&self, id: String, owner: &str) {
        let mut owners = lock(&self.0);
        if owners
            .by_task
            .insert(id.clone(), owner.to_string())
            .is_none()
        {
            owners.order.push_back(id);
        }
        while owners.order.len() > OWNED_TASKS {
            if let Some(oldest) = owners.order.pop_front() {
                owners.by_task.remove(&oldest);
            }
        }
    }

    /// Whether a client whose identity's key is `caller` (none: no identity) may see the task
    /// `id`: one that an identity created is that identity's alone; one that none did (created
    /// by a client without one, or not through this proxy) only a client without one sees.
    pub(crate) fn sees(&self, id: &str, caller: Option<&str>) -> bool {
        lock(&self.0).by_task.get(id).map(String::as_str) == caller
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_is_seen_by_its_creator_alone_and_the_oldest_is_forgotten_past_the_bound() {
        let owners = TaskOwners::default();
        owners.created("s:t-0".into(), "alice");
        assert!(owners.sees("s:t-0", Some("alice")));
        assert!(!owners.sees("s:t-0", Some("bob")));
        assert!(
            !owners.sees("s:t-0", None),
            "not to a client without an identity"
        );
        assert!(
            owners.sees("s:other", None),
            "one no identity made: as before"
        );
        assert!(!owners.sees("s:other", Some("alice")));
        for n in 1..=OWNED_TASKS {
            owners.created(format!("s:t-{n}"), "alice");
        }
        assert!(!owners.sees("s:t-0", Some("alice")), "forgotten");
        assert!(owners.sees("s:t-1", Some("alice")));
        assert_eq!(lock(&owners.0).by_task.len(), OWNED_TASKS);
    }
}
