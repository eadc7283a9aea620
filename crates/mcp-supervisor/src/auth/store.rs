//! The per-user token file: each server's client registration and tokens, as JSON, created with
//! mode 0600 and replaced atomically (write a sibling, then rename). It owns the file's format
//! and location; it never logs a token or a secret, and its `Debug` output redacts them.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::discovery::AuthMethod;

/// The environment variable that overrides where the token file is.
pub const TOKEN_FILE_ENV: &str = "MCP_SUPERVISOR_TOKEN_FILE";
const FORMAT: u32 = 1;

/// One server's stored credentials.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// The MCP server URL these tokens were issued for (an entry for another URL is ignored).
    pub server_url: String,
    /// The resource indicator sent (RFC 8707), as the resource's metadata published it.
    pub resource: Option<String>,
    /// The authorization server's issuer, and its token endpoint.
    pub issuer: String,
    /// Where the tokens are refreshed.
    pub token_endpoint: String,
    /// The client the tokens were issued to.
    pub client_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// Its secret, for a confidential client (a secret).
    pub client_secret: Option<String>,
    /// How the client authenticates when refreshing.
    pub auth_method: Option<AuthMethod>,
    /// The access token (a secret).
    pub access_token: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The refresh token, if any (a secret).
    pub refresh_token: Option<String>,
    /// Unix seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<u64>,
    /// The lifetime the token was issued with, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifetime: Option<u64>,
    /// The scope asked for (and granted, where the server said).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// A scope the server asked for since (403 insufficient_scope), for the next login.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wanted_scope: Option<String>,
}

impl std::fmt::Debug for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entry")
            .field("server_url", &self.server_url)
            .field("issuer", &self.issuer)
            .field("client_id", &self.client_id)
            .field("expires_at", &self.expires_at)
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

#[derive(Default, Serialize, Deserialize)]
struct File {
    format: u32,
    #[serde(default)]
    servers: BTreeMap<String, Entry>,
}

/// Why the token file could not be read or written. Each names the file and what to do; none
/// quotes a token.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The file exists but cannot be read.
    #[error("cannot read the token file {}: {source}; check its permissions", path.display())]
    Unreadable {
        /// The token file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// The file is not a token file (not JSON, or not its shape).
    #[error(
        "the token file {} is not valid ({source}); delete it and run `mcp-supervisor login` again",
        path.display()
    )]
    Invalid {
        /// The token file.
        path: PathBuf,
        /// What serde_json said.
        source: serde_json::Error,
    },
    /// Another version wrote it.
    #[error(
        "the token file {} has format {found} (this version reads {FORMAT}); delete it and \
         run `mcp-supervisor login` again",
        path.display()
    )]
    OtherFormat {
        /// The token file.
        path: PathBuf,
        /// The format it has.
        found: u32,
    },
    /// The tokens could not be written as JSON.
    #[error("cannot encode the token file: {source}")]
    Encode {
        /// What serde_json said.
        source: serde_json::Error,
    },
    /// The file could not be written.
    #[error(
        "cannot write the token file {}: {source}; check that its folder is writable",
        path.display()
    )]
    Write {
        /// The token file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
}

/// The token file at one path.
#[derive(Clone, Debug)]
pub struct TokenStore {
    path: PathBuf,
}

impl TokenStore {
    /// The store in the file at `path` (created with mode 0600 when first written).
    pub fn new(path: PathBuf) -> Self {
        Self { path }
    }

    /// The token file for this user: `$MCP_SUPERVISOR_TOKEN_FILE`, else
    /// `$XDG_STATE_HOME/mcp-supervisor/tokens.json`, else
    /// `~/.local/state/mcp-supervisor/tokens.json`.
    pub fn default_path() -> Option<PathBuf> {
        if let Some(path) = std::env::var_os(TOKEN_FILE_ENV).filter(|p| !p.is_empty()) {
            return Some(PathBuf::from(path));
        }
        let state = std::env::var_os("XDG_STATE_HOME")
            .filter(|p| !p.is_empty())
            .map(PathBuf::from)
            .or_else(|| {
                std::env::var_os("HOME")
                    .filter(|p| !p.is_empty())
                    .map(|h| PathBuf::from(h).join(".local/state"))
            })?;
        Some(state.join("mcp-supervisor/tokens.json"))
    }

    /// The token file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The entry of `server` for `url`, if the file has one. A missing file is no entry; an
    /// unreadable one is an error that says what to do.
    pub fn load(&self, server: &str, url: &str) -> Result<Option<Entry>, StoreError> {
        let file = self.read()?;
        Ok(file
            .servers
            .get(server)
            .filter(|e| e.server_url == url)
            .cloned())
    }

    /// Stores (or, with `None`, removes) the entry of `server`, keeping the others.
    pub fn save(&self, server: &str, entry: Option<&Entry>) -> Result<(), StoreError> {
        let mut file = self.read().unwrap_or_default();
        file.format = FORMAT;
        match entry {
            Some(entry) => {
                file.servers.insert(server.to_string(), entry.clone());
            }
            None => {
                file.servers.remove(server);
            }
        }
        let text =
            serde_json::to_string_pretty(&file).map_err(|source| StoreError::Encode { source })?;
        write_private(&self.path, text.as_bytes()).map_err(|source| StoreError::Write {
            path: self.path.clone(),
            source,
        })
    }

    /// When the file last changed, to notice a login by another process.
    pub fn modified(&self) -> Option<std::time::SystemTime> {
        std::fs::metadata(&self.path)
            .and_then(|m| m.modified())
            .ok()
    }

    fn read(&self) -> Result<File, StoreError> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(File::default()),
            Err(source) => {
                return Err(StoreError::Unreadable {
                    path: self.path.clone(),
                    source,
                });
            }
        };
        let file: File = serde_json::from_str(&text).map_err(|source| StoreError::Invalid {
            path: self.path.clone(),
            source,
        })?;
        if file.format != FORMAT {
            return Err(StoreError::OtherFormat {
                path: self.path.clone(),
                found: file.format,
            });
        }
        Ok(file)
    }
}

/// Writes `bytes` to `path` atomically, readable by its owner only: a sibling file created with
/// mode 0600, synced, then renamed over the target.
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
    if let Some(dir) = dir {
        std::fs::create_dir_all(dir)?;
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "tokens.json".into());
    let tmp = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let result = (|| {
        let mut f = options.open(&tmp)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        }
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> Entry {
        Entry {
            server_url: "http://h/mcp".into(),
            issuer: "http://a".into(),
            token_endpoint: "http://a/token".into(),
            client_id: "c".into(),
            access_token: "secret-access".into(),
            refresh_token: Some("secret-refresh".into()),
            ..Entry::default()
        }
    }

    #[test]
    fn the_file_is_private_and_round_trips_per_server_and_url() {
        let dir = std::env::temp_dir().join(format!("mcp-sup-store-{}", std::process::id()));
        let store = TokenStore::new(dir.join("sub/tokens.json"));
        let load = |server: &str, url: &str| store.load(server, url).expect("readable");
        assert_eq!(load("s", "http://h/mcp"), None);
        store.save("s", Some(&entry())).expect("saved");
        store.save("t", Some(&entry())).expect("saved");
        assert_eq!(load("s", "http://h/mcp"), Some(entry()));
        assert_eq!(load("s", "http://other/mcp"), None);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(store.path())
                .expect("the file exists")
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        store.save("s", None).expect("removed");
        assert_eq!(load("s", "http://h/mcp"), None);
        assert!(load("t", "http://h/mcp").is_some());
        std::fs::write(store.path(), "{not json").expect("written");
        let err = store
            .load("t", "http://h/mcp")
            .expect_err("corrupt")
            .to_string();
        assert!(err.contains("login"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn debug_output_hides_tokens() {
        let shown = format!("{:?}", entry());
        assert!(!shown.contains("secret"), "{shown}");
    }
}
