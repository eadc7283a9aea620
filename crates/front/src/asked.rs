//! What each client asked of the servers it shares with other clients (SPEC §11: a server is
//! shared by default): its resource subscriptions and its log level. The proxy subscribes a
//! shared server to a URI while at least one client is subscribed, asks it for the most verbose
//! level any client asked for, and gives each client only what it asked for itself.
//!
//! Plain values and functions: no I/O, no locks. It must never hide from a client what the
//! server would have sent it directly: only what the proxy asked for on another client's
//! behalf is held back.

use std::collections::{HashMap, HashSet};

/// The MCP log levels, least severe first (RFC 5424 order).
pub const LEVELS: [&str; 8] = [
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
];

/// A log level's rank in [`LEVELS`]; `None` for a name that is not a level.
pub fn level_rank(level: &str) -> Option<u8> {
    LEVELS
        .iter()
        .position(|l| *l == level)
        .and_then(|at| u8::try_from(at).ok())
}

/// What one client asked of shared servers.
#[derive(Debug, Default, Clone)]
pub struct Asked {
    /// `(server, uri)` it is subscribed to.
    pub subscriptions: HashSet<(String, String)>,
    /// The log level it set (a rank in [`LEVELS`]), if it set one.
    pub level: Option<u8>,
    /// How many of its `subscriptions/listen` requests (protocol 2026-07-28) are running with
    /// each URI they subscribed: the URI is unsubscribed when the last of them ends.
    pub listening: HashMap<String, usize>,
}

impl Asked {
    /// A listen that subscribed `uris` started.
    pub fn listen(&mut self, uris: &[String]) {
        for uri in uris {
            *self.listening.entry(uri.clone()).or_default() += 1;
        }
    }

    /// A listen that subscribed `uris` ended: the URIs no other listen of the client holds.
    pub fn unlisten(&mut self, uris: &[String]) -> Vec<String> {
        let mut released = Vec::new();
        for uri in uris {
            match self.listening.get_mut(uri) {
                Some(count) if *count > 1 => *count -= 1,
                Some(_) => {
                    self.listening.remove(uri);
                    released.push(uri.clone());
                }
                None => {}
            }
        }
        released
    }
}

/// The level to ask a shared server for: the most verbose of the clients' levels.
pub fn upstream_level(levels: impl IntoIterator<Item = Option<u8>>) -> Option<u8> {
    levels.into_iter().flatten().min()
}

/// Whether a log message of `level` goes to a client that asked for `asked`, the server having
/// been asked for `upstream` by the proxy (`None`: not asked). Held back only when it is below
/// the client's own level and the proxy asked for it for another client; a message the server
/// sends below what it was asked, unasked, or with no level we know passes, as it would
/// directly.
pub fn wants_log(asked: Option<u8>, level: Option<u8>, upstream: Option<u8>) -> bool {
    match (asked, level) {
        (Some(asked), Some(level)) if level < asked => upstream.is_none_or(|u| level < u),
        _ => true,
    }
}

/// Whether `resources/updated` for `key` goes to `client`: to the clients subscribed to it,
/// or, when none is (`anyone` false: a server that tells without being asked), to every client,
/// as directly.
pub fn wants_update(client: &Asked, anyone: bool, key: &(String, String)) -> bool {
    client.subscriptions.contains(key) || !anyone
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked(level: Option<&str>, subscriptions: &[(&str, &str)]) -> Asked {
        Asked {
            subscriptions: subscriptions
                .iter()
                .map(|(s, u)| (s.to_string(), u.to_string()))
                .collect(),
            level: level.and_then(level_rank),
            ..Asked::default()
        }
    }

    #[test]
    fn a_uri_two_listens_hold_is_released_by_the_last_to_end() {
        let mut asked = Asked::default();
        let (a, b) = ("x://a".to_string(), "x://b".to_string());
        asked.listen(&[a.clone(), b.clone()]);
        asked.listen(std::slice::from_ref(&a));
        assert_eq!(asked.unlisten(&[a.clone(), b.clone()]), ["x://b"]);
        assert_eq!(asked.unlisten(std::slice::from_ref(&a)), ["x://a"]);
        // Ended already, or never listened: nothing to release.
        assert!(asked.unlisten(&[a, b]).is_empty());
        assert!(asked.listening.is_empty());
    }

    #[test]
    fn levels_rank_in_order_and_unknown_names_have_none() {
        for (at, level) in LEVELS.iter().enumerate() {
            assert_eq!(level_rank(level), u8::try_from(at).ok());
        }
        assert_eq!(level_rank("verbose"), None);
        assert_eq!(level_rank("DEBUG"), None);
    }

    #[test]
    fn the_server_is_asked_for_the_most_verbose_level_set() {
        let (debug, error, none) = (
            asked(Some("debug"), &[]),
            asked(Some("error"), &[]),
            asked(None, &[]),
        );
        assert_eq!(
            upstream_level([error.level, debug.level, none.level]),
            level_rank("debug")
        );
        assert_eq!(
            upstream_level([error.level, none.level]),
            level_rank("error")
        );
        assert_eq!(upstream_level([none.level]), None);
        assert_eq!(upstream_level([]), None);
    }

    #[test]
    fn a_client_gets_its_own_level_and_what_the_server_sends_unasked() {
        let rank = |l: &str| level_rank(l);
        // Asked for error; the server was asked for debug (another client): info is held back.
        assert!(!wants_log(rank("error"), rank("info"), rank("debug")));
        assert!(wants_log(rank("error"), rank("error"), rank("debug")));
        assert!(wants_log(rank("error"), rank("alert"), rank("debug")));
        // The server sends below what it was asked: passed, as it would be directly.
        assert!(wants_log(rank("error"), rank("debug"), rank("info")));
        // No level of its own, or a message without a level we know: passed.
        assert!(wants_log(None, rank("debug"), rank("debug")));
        assert!(wants_log(rank("error"), None, rank("debug")));
        // Nothing asked of the server by us: the server's own choice, passed.
        assert!(wants_log(rank("error"), rank("info"), None));
    }

    #[test]
    fn an_update_goes_to_its_subscribers_or_to_everyone_when_nobody_asked() {
        let key = ("s".to_string(), "a://1".to_string());
        let (a, b, c) = (
            asked(None, &[("s", "a://1")]),
            asked(None, &[]),
            asked(None, &[("t", "a://1")]),
        );
        let everyone = [&a, &b, &c];
        let anyone = |key| everyone.iter().any(|x| x.subscriptions.contains(key));
        assert!(wants_update(&a, anyone(&key), &key));
        assert!(!wants_update(&b, anyone(&key), &key));
        assert!(!wants_update(&c, anyone(&key), &key));
        // Nobody subscribed to it: everyone gets it, as directly.
        let other = ("s".to_string(), "a://2".to_string());
        assert!(wants_update(&b, anyone(&other), &other));
    }
}
