//! Tokens already verified, each until it expires: a token seen again costs a hash of its last
//! bytes (its signature's), a lookup and a comparison of the whole text, not a signature check.
//! Bounded: when full, expired entries go first, then those that expire soonest.
//!
//! Only what verified is kept, so no one can fill a bucket with tokens of a chosen tail: two
//! valid tokens with the same signature are the same token. It never decides whether a token is
//! valid (only whether one it kept has expired since).

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, SystemTime};

use super::Identity;
use super::token::is_expired;

/// How many of a token's last bytes are hashed: its signature's, unique to each valid token.
const HASHED_TAIL: usize = 32;

/// Verified tokens, bounded.
pub(crate) struct Verified {
    entries: RwLock<Entries>,
    hasher: RandomState,
    capacity: usize,
    skew: Duration,
}

/// Identities by the hash of their token's tail (a bucket holds more than one only when two
/// tails collide), and how many there are.
#[derive(Default)]
struct Entries {
    buckets: HashMap<u64, Vec<Arc<Identity>>>,
    len: usize,
}

impl Verified {
    /// Room for `capacity` tokens, each kept until its `exp` plus `skew`.
    pub(crate) fn new(capacity: usize, skew: Duration) -> Self {
        Self {
            entries: RwLock::new(Entries::default()),
            hasher: RandomState::new(),
            capacity: capacity.max(1),
            skew,
        }
    }

    fn key(&self, token: &str) -> u64 {
        let bytes = token.as_bytes();
        self.hasher
            .hash_one(&bytes[bytes.len().saturating_sub(HASHED_TAIL)..])
    }

    /// The identity of `token`, if it verified and has not expired at `now`.
    pub(crate) fn get(&self, token: &str, now: SystemTime) -> Option<Arc<Identity>> {
        let key = self.key(token);
        let entries = self.entries.read().unwrap_or_else(PoisonError::into_inner);
        entries
            .buckets
            .get(&key)?
            .iter()
            .find(|identity| identity.subject_token() == token)
            .filter(|identity| !is_expired(identity.expires, self.skew, now))
            .cloned()
    }

    /// Keep `identity` (under the token it was verified from), making room if full.
    pub(crate) fn insert(&self, identity: Arc<Identity>, now: SystemTime) {
        let key = self.key(identity.subject_token());
        let mut entries = self.entries.write().unwrap_or_else(PoisonError::into_inner);
        if entries.len >= self.capacity {
            self.make_room(&mut entries, now);
        }
        let bucket = entries.buckets.entry(key).or_default();
        let before = bucket.len();
        bucket.retain(|kept| kept.subject_token() != identity.subject_token());
        bucket.push(identity);
        let after = bucket.len();
        entries.len = entries.len + after - before;
    }

    /// Drop the expired; if that is not enough, the tenth that expires soonest (so that a full
    /// cache of live tokens is trimmed once per many inserts, not scanned on each).
    fn make_room(&self, entries: &mut Entries, now: SystemTime) {
        let live = |identity: &Arc<Identity>| !is_expired(identity.expires, self.skew, now);
        retain(entries, |identity| live(identity));
        if entries.len < self.capacity {
            return;
        }
        let drop = (self.capacity / 10).max(1);
        let mut expiries: Vec<SystemTime> = entries
            .buckets
            .values()
            .flatten()
            .map(|identity| identity.expires)
            .collect();
        let (_, cut, _) = expiries.select_nth_unstable(drop - 1);
        let cut = *cut;
        let mut dropped = 0;
        retain(entries, |identity| {
            let goes = dropped < drop && identity.expires <= cut;
            dropped += usize::from(goes);
            !goes
        });
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .len
    }
}

/// Keep the identities `keep` says, counting them.
fn retain(entries: &mut Entries, mut keep: impl FnMut(&Arc<Identity>) -> bool) {
    let mut len = 0;
    entries.buckets.retain(|_, bucket| {
        bucket.retain(&mut keep);
        len += bucket.len();
        !bucket.is_empty()
    });
    entries.len = len;
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::auth::token::{Expect, parse};
    use base64::Engine;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use serde_json::json;
    use std::time::UNIX_EPOCH;

    pub(crate) fn at(seconds: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(seconds)
    }

    /// An identity whose token is signed (made up) `signature` for `subject`, expiring at
    /// `exp` (made through the claims checks).
    pub(crate) fn identity(signature: &str, subject: &str, exp: u64) -> Arc<Identity> {
        let part = |v: serde_json::Value| URL_SAFE_NO_PAD.encode(v.to_string());
        let token = format!(
            "{}.{}.{signature}",
            part(json!({"alg": "ES256"})),
            part(json!({"iss": "i", "aud": "a", "sub": subject, "exp": exp}))
        );
        let expect = Expect {
            issuer: "i",
            audience: "a",
            skew: Duration::ZERO,
        };
        Arc::new(
            parse(&token)
                .unwrap()
                .identity(&token, &expect, at(0))
                .unwrap(),
        )
    }

    #[test]
    fn a_kept_token_is_found_until_it_expires_with_the_skew() {
        let cache = Verified::new(10, Duration::from_secs(5));
        let alice = identity("c2ln", "alice", 100);
        cache.insert(alice.clone(), at(0));
        let found = cache.get(alice.subject_token(), at(104)).unwrap();
        assert_eq!(found.subject, "alice");
        assert!(cache.get(alice.subject_token(), at(105)).is_none());
        // Same tail, other token: the same bucket, never the same entry.
        let bob = identity("c2ln", "bob", 100);
        assert!(cache.get(bob.subject_token(), at(0)).is_none());
        cache.insert(bob.clone(), at(0));
        assert_eq!(
            cache.get(bob.subject_token(), at(0)).unwrap().subject,
            "bob"
        );
        assert_eq!(
            cache.get(alice.subject_token(), at(0)).unwrap().subject,
            "alice"
        );
        // Kept again: replaced, not doubled.
        cache.insert(bob, at(0));
        assert_eq!(cache.len(), 2);
    }

    #[test]
    fn a_full_cache_drops_the_expired_then_the_soonest_to_expire() {
        let cache = Verified::new(20, Duration::ZERO);
        let kept: Vec<_> = (0..20u64)
            .map(|n| identity(&format!("sig{n}"), "s", 100 + n))
            .collect();
        for identity in &kept {
            cache.insert(identity.clone(), at(0));
        }
        // Nothing expired: the two expiring soonest go.
        cache.insert(identity("new", "s", 1_000), at(0));
        assert_eq!(cache.len(), 19);
        assert!(cache.get(kept[0].subject_token(), at(0)).is_none());
        assert!(cache.get(kept[1].subject_token(), at(0)).is_none());
        assert!(cache.get(kept[2].subject_token(), at(0)).is_some());
        cache.insert(identity("more", "s", 1_000), at(0));
        assert_eq!(cache.len(), 20);
        // Later, the expired go first, however many: those expiring at 102 to 110.
        cache.insert(identity("late", "s", 1_000), at(110));
        assert_eq!(cache.len(), 12);
    }
}
