//! Sealed session ids (SPEC §12): what a handshake-era client's `initialize` fixed (the front's
//! [`Session`]) and when, encrypted and authenticated with AES-256-GCM under a key that every
//! replica shares, and written as the client's `Mcp-Session-Id` once, in the answer to its
//! `initialize`. Any replica holding the key (or the previous one, during a rotation) opens the
//! id and resumes the session; nobody without it can read one or make one up.
//!
//! The id is `1.` then base64url (no padding) of a random 96-bit nonce, the ciphertext and the
//! 128-bit tag. The plaintext is compact JSON: `{"t": issued ms since the epoch, "s": session}`.
//! A random nonce per seal is safe for far more ids than one key will ever seal (the GCM bound
//! is 2^32 per key).
//!
//! It does no I/O but reading key files when asked to, never logs a key or what an id holds, and
//! never panics on an id: any malformed, forged or foreign id is [`Refused::Forged`].

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::Session;
use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use serde::{Deserialize, Serialize};

/// The environment variable of the key (32 bytes, base64).
pub const KEY_VAR: &str = "MCP_SUPERVISOR_SESSION_KEY";
/// The environment variable of the previous key, accepted for opening only.
pub const PREVIOUS_KEY_VAR: &str = "MCP_SUPERVISOR_SESSION_KEY_PREVIOUS";

/// What makes a key, said in every key error.
const MAKE_ONE: &str = "make one with: head -c 32 /dev/urandom | base64";
/// The id's format version, its first characters.
const PREFIX: &str = "1.";
/// Bound to every seal: an id sealed for something else under the same key does not open.
const AAD: &[u8] = b"mcp-supervisor session id v1";
/// The longest id opened (an id is a few hundred characters; a client's capabilities may grow).
const MAX_ID: usize = 16 * 1024;

/// Why an id opens no session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// Not one of ours: malformed, altered, or sealed under another key.
    Forged,
    /// Ours, but issued longer ago than the maximum age.
    Expired,
}

/// A key that cannot be used: where it came from and what is wrong, with how to make one.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct KeyError(String);

fn key_error(message: String) -> KeyError {
    KeyError(message)
}

/// The key that seals and opens, and the previous one that only opens.
pub struct Keys {
    current: LessSafeKey,
    previous: Option<LessSafeKey>,
    /// True when the key was made up by this process (no key given): no other replica opens
    /// its ids.
    pub random: bool,
}

#[derive(Serialize, Deserialize)]
struct Sealed {
    #[serde(rename = "t")]
    issued_ms: u64,
    #[serde(rename = "s")]
    session: Session,
}

impl Keys {
    /// The keys from `--session-key-file` / `--previous-session-key-file` (a file wins over its
    /// environment variable), else [`KEY_VAR`] / [`PREVIOUS_KEY_VAR`], else a random key of this
    /// process's own. An error names the source and says how to make a key.
    pub fn load(key_file: Option<&Path>, previous_file: Option<&Path>) -> Result<Self, KeyError> {
        let current = text_of(key_file, KEY_VAR)?;
        let previous = text_of(previous_file, PREVIOUS_KEY_VAR)?;
        match current {
            Some((text, source)) => {
                let current = key_from(&text, &source)?;
                let previous = previous
                    .map(|(text, source)| key_from(&text, &source))
                    .transpose()?;
                Ok(Self {
                    current,
                    previous,
                    random: false,
                })
            }
            None if previous.is_some() => Err(key_error(format!(
                "a previous session key was given without a current one: give the current key in {KEY_VAR} or --session-key-file"
            ))),
            None => Self::random(),
        }
    }

    /// A key of this process's own, from the OS's generator.
    ///
    /// Straight from the kernel (`getrandom`), as the nonces are: the crypto library's own
    /// generator seeds itself on first use with about 60 ms of CPU (jitter entropy), which every
    /// `wrap` paid at its start for a key its stdio face never uses.
    pub fn random() -> Result<Self, KeyError> {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes)
            .map_err(|_| key_error("the OS's random generator failed".into()))?;
        Ok(Self {
            current: aes_key(&bytes)?,
            previous: None,
            random: true,
        })
    }

    /// `session`, issued at `issued_ms` (ms since the epoch), as an id. `None` only if the
    /// crypto library fails.
    pub fn seal(&self, session: &Session, issued_ms: u64) -> Option<String> {
        let sealed = Sealed {
            issued_ms,
            session: session.clone(),
        };
        let mut data = serde_json::to_vec(&sealed).ok()?;
        let mut nonce = [0u8; NONCE_LEN];
        getrandom::fill(&mut nonce).ok()?;
        self.current
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(AAD),
                &mut data,
            )
            .ok()?;
        let mut bytes = Vec::with_capacity(NONCE_LEN + data.len());
        bytes.extend_from_slice(&nonce);
        bytes.extend_from_slice(&data);
        Some(format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(bytes)))
    }

    /// The session sealed in `id` and when it was issued, if `id` is ours and was issued at
    /// most `max_age` before `now_ms`.
    pub fn open(
        &self,
        id: &str,
        now_ms: u64,
        max_age: Duration,
    ) -> Result<(Session, u64), Refused> {
        let body = id
            .strip_prefix(PREFIX)
            .filter(|_| id.len() <= MAX_ID)
            .ok_or(Refused::Forged)?;
        let bytes = URL_SAFE_NO_PAD.decode(body).map_err(|_| Refused::Forged)?;
        if bytes.len() < NONCE_LEN + AES_256_GCM.tag_len() {
            return Err(Refused::Forged);
        }
        let (nonce, sealed) = bytes.split_at(NONCE_LEN);
        let nonce: [u8; NONCE_LEN] = nonce.try_into().map_err(|_| Refused::Forged)?;
        let sealed = std::iter::once(&self.current)
            .chain(self.previous.as_ref())
            .find_map(|key| {
                let mut data = sealed.to_vec();
                let plain = key
                    .open_in_place(
                        Nonce::assume_unique_for_key(nonce),
                        Aad::from(AAD),
                        &mut data,
                    )
                    .ok()?;
                serde_json::from_slice::<Sealed>(plain).ok()
            })
            .ok_or(Refused::Forged)?;
        let age = now_ms.saturating_sub(sealed.issued_ms);
        if u128::from(age) > max_age.as_millis() {
            return Err(Refused::Expired);
        }
        Ok((sealed.session, sealed.issued_ms))
    }
}

/// Now, in ms since the epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// The key's text and where it came from: the file when given, else the variable when set.
fn text_of(file: Option<&Path>, var: &str) -> Result<Option<(String, String)>, KeyError> {
    if let Some(path) = file {
        let text = std::fs::read_to_string(path).map_err(|e| {
            key_error(format!(
                "cannot read the session key file {}: {e}",
                path.display()
            ))
        })?;
        return Ok(Some((text, format!("the file {}", path.display()))));
    }
    Ok(std::env::var(var)
        .ok()
        .filter(|t| !t.trim().is_empty())
        .map(|text| (text, var.to_string())))
}

fn key_from(text: &str, source: &str) -> Result<LessSafeKey, KeyError> {
    let bytes = STANDARD.decode(text.trim()).map_err(|_| {
        key_error(format!(
            "the session key in {source} is not base64; {MAKE_ONE}"
        ))
    })?;
    if bytes.len() != 32 {
        return Err(key_error(format!(
            "the session key in {source} is {} bytes; it must be 32; {MAKE_ONE}",
            bytes.len()
        )));
    }
    aes_key(&bytes)
}

fn aes_key(bytes: &[u8]) -> Result<LessSafeKey, KeyError> {
    let key = UnboundKey::new(&AES_256_GCM, bytes)
        .map_err(|_| key_error("the session key was refused by AES-256-GCM".into()))?;
    Ok(LessSafeKey::new(key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::value::RawValue;

    const DAY: Duration = Duration::from_secs(86_400);

    fn session() -> Session {
        Session {
            protocol_version: "2025-06-18".into(),
            capabilities: RawValue::from_string(r#"{"roots":{"listChanged":true}}"#.into()).ok(),
            client_info: RawValue::from_string(r#"{"name":"c","version":"1"}"#.into()).ok(),
            upstream: [("notes".to_string(), "9f1c0b6e2d7a4c35".to_string())].into(),
            owner: None,
        }
    }

    fn keys(current: [u8; 32], previous: Option<[u8; 32]>) -> Keys {
        Keys {
            current: aes_key(&current).unwrap(),
            previous: previous.map(|p| aes_key(&p).unwrap()),
            random: false,
        }
    }

    #[test]
    fn a_sealed_session_opens_whole_under_the_same_key() {
        let keys = keys([7; 32], None);
        let id = keys.seal(&session(), 1_000).unwrap();
        assert!(id.starts_with("1."), "{id}");
        assert!(id.bytes().all(|b| (0x21..=0x7e).contains(&b)), "{id}");
        let (opened, issued) = keys.open(&id, 2_000, DAY).unwrap();
        assert_eq!(issued, 1_000);
        assert_eq!(opened.protocol_version, "2025-06-18");
        assert_eq!(
            opened.capabilities.unwrap().get(),
            r#"{"roots":{"listChanged":true}}"#
        );
        assert_eq!(
            opened.client_info.unwrap().get(),
            r#"{"name":"c","version":"1"}"#
        );
        assert_eq!(opened.upstream["notes"], "9f1c0b6e2d7a4c35");
        // Two seals of the same session differ (a fresh nonce each).
        assert_ne!(keys.seal(&session(), 1_000).unwrap(), id);
    }

    #[test]
    fn another_key_an_altered_id_or_garbage_is_forged() {
        let ours = keys([7; 32], None);
        let theirs = keys([8; 32], None);
        let id = ours.seal(&session(), 1_000).unwrap();
        assert_eq!(theirs.open(&id, 1_000, DAY).err(), Some(Refused::Forged));
        // Every single character changed: refused, never a panic.
        for at in PREFIX.len()..id.len() {
            let mut altered = id.clone().into_bytes();
            altered[at] = if altered[at] == b'A' { b'B' } else { b'A' };
            let altered = String::from_utf8(altered).unwrap();
            if altered != id {
                assert!(ours.open(&altered, 1_000, DAY).is_err(), "{altered}");
            }
        }
        for junk in [
            "",
            "1.",
            "2.abc",
            "1.!!!",
            "1.AAAA",
            "uuid-like-0000",
            &"1.A".repeat(9000),
        ] {
            assert_eq!(
                ours.open(junk, 1_000, DAY).err(),
                Some(Refused::Forged),
                "{junk}"
            );
        }
    }

    #[test]
    fn an_id_past_its_maximum_age_is_expired() {
        let keys = keys([7; 32], None);
        let id = keys.seal(&session(), 1_000).unwrap();
        let max = Duration::from_millis(500);
        assert!(keys.open(&id, 1_500, max).is_ok());
        assert_eq!(keys.open(&id, 1_501, max).err(), Some(Refused::Expired));
    }

    #[test]
    fn the_previous_key_opens_but_never_seals() {
        let old = keys([1; 32], None);
        let rotated = keys([2; 32], Some([1; 32]));
        let id = old.seal(&session(), 1_000).unwrap();
        assert!(rotated.open(&id, 1_000, DAY).is_ok());
        let new_id = rotated.seal(&session(), 1_000).unwrap();
        assert_eq!(old.open(&new_id, 1_000, DAY).err(), Some(Refused::Forged));
    }

    #[test]
    fn a_bad_key_is_refused_with_its_source_and_how_to_make_one() {
        let short = key_from(&STANDARD.encode([0u8; 16]), "MCP_SUPERVISOR_SESSION_KEY")
            .err()
            .unwrap()
            .to_string();
        assert!(
            short.contains("MCP_SUPERVISOR_SESSION_KEY is 16 bytes"),
            "{short}"
        );
        assert!(
            short.contains("head -c 32 /dev/urandom | base64"),
            "{short}"
        );
        let junk = key_from("not base64!", "the file k")
            .err()
            .unwrap()
            .to_string();
        assert!(junk.contains("the file k is not base64"), "{junk}");
        assert!(key_from(&format!(" {}\n", STANDARD.encode([3u8; 32])), "x").is_ok());
    }
}
