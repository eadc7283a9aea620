//! The order of config reloads ([`Reloads`]): one at a time, and those asked for while one
//! runs coalesced into one that reads the config once that one ends ([`crate::Proxy::reload`]
//! takes its turns here).
//!
//! It never reads a file, parses a config or applies one: it only says whose turn it is.

use std::sync::atomic::{AtomicU64, Ordering};

use mcp_supervisor::ReloadSummary;

/// What became of one reload.
#[derive(Debug)]
pub enum Reloaded<E> {
    /// The config was read and applied.
    Applied(ReloadSummary),
    /// The config could not be had (`read` failed): the running config stays.
    Kept(E),
    /// Another reload that began after this one was asked for read the config for both.
    Coalesced,
}

/// How many reloads were asked for, and up to which one a read of the config covers.
#[derive(Default)]
pub(crate) struct Reloads {
    asked: AtomicU64,
    /// The last reload (by its number among those asked) covered by a read of the config; held
    /// while a reload runs.
    covered: tokio::sync::Mutex<u64>,
}

impl Reloads {
    /// Ask for a reload: its turn (held while it reads and applies its config) once those
    /// before it have ended, or none when a reload that began after it was asked for already
    /// covers it.
    pub(crate) async fn turn(&self) -> Option<tokio::sync::MutexGuard<'_, u64>> {
        let number = self.asked.fetch_add(1, Ordering::SeqCst) + 1;
        let mut covered = self.covered.lock().await;
        if *covered >= number {
            return None;
        }
        // Every reload asked for until now is covered by the read this turn makes.
        *covered = self.asked.load(Ordering::SeqCst);
        Some(covered)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;

    use mcp_supervisor::HubOptions;
    use mcp_supervisor::core::config::{Config, parse_config};
    use tokio::sync::oneshot;

    use super::*;
    use crate::Mode;

    fn empty() -> Config {
        parse_config(r#"{"mcpServers": {}}"#, &|_| None).expect("a valid config")
    }

    /// Three reloads asked for while a first one reads: one more read covers all three, and
    /// two of them are coalesced; a reload asked for after that reads again.
    #[tokio::test(start_paused = true)]
    async fn reloads_asked_while_one_runs_are_one_read_after_it() {
        let proxy = crate::start(empty(), Mode::Aggregate, HubOptions::default());
        let reads = Arc::new(AtomicUsize::new(0));
        let (release, held) = oneshot::channel::<()>();
        let first = tokio::spawn({
            let (proxy, reads) = (proxy.clone(), reads.clone());
            async move {
                proxy
                    .reload(|| async move {
                        reads.fetch_add(1, Ordering::SeqCst);
                        let _ = held.await;
                        Ok::<_, String>(empty())
                    })
                    .await
            }
        });
        // The first reload is reading (and holds the turn).
        while reads.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        let waiting: Vec<_> = (0..3)
            .map(|_| {
                let (proxy, reads) = (proxy.clone(), reads.clone());
                tokio::spawn(async move {
                    proxy
                        .reload(|| async move {
                            reads.fetch_add(1, Ordering::SeqCst);
                            Ok::<_, String>(empty())
                        })
                        .await
                })
            })
            .collect();
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert_eq!(
            reads.load(Ordering::SeqCst),
            1,
            "the others wait their turn"
        );
        let _ = release.send(());
        assert!(matches!(first.await, Ok(Reloaded::Applied(_))));
        let (mut applied, mut coalesced) = (0, 0);
        for reload in waiting {
            match reload.await {
                Ok(Reloaded::Applied(_)) => applied += 1,
                Ok(Reloaded::Coalesced) => coalesced += 1,
                other => panic!("{other:?}"),
            }
        }
        assert_eq!((applied, coalesced), (1, 2));
        assert_eq!(reads.load(Ordering::SeqCst), 2, "one read for the three");

        // Later, a reload reads again; an unreadable config keeps the running one.
        let kept = proxy
            .reload(|| async { Err::<Config, _>("no such file") })
            .await;
        assert!(matches!(kept, Reloaded::Kept("no such file")), "{kept:?}");
        proxy.hub().stop().await;
    }
}
