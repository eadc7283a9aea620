//! Saved catalogs, for an instant start: each server's last successful lists (tools, prompts,
//! resources, resource templates, and its `initialize` answer) as the raw JSON the server sent,
//! one file per server identity (a hash of its command, arguments and working directory, or its
//! URL) under a state directory, written atomically (a temporary file, then a rename).
//!
//! It never makes anything fatal: a catalog that cannot be read, is not valid, or is of another
//! format version is ignored with a warning (and rewritten after the next list); one that cannot
//! be written is a warning. It never holds a secret of the config (`env` and `headers` values are
//! not part of the identity and never written).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use mcp_supervisor_core::config::{ServerConfig, TransportConfig};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};

/// The format of the files this build writes and reads. Another number is ignored (and
/// rewritten), never misread.
pub const FORMAT_VERSION: u32 = 1;

/// What is saved of one server: each list as the server sent its items, whole. A list that is
/// `None` is not known yet (the live one is asked for); `Some` of an empty list is known to be
/// empty (the server offers none).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Catalog {
    /// The tools, each as the server listed it.
    #[serde(default)]
    pub tools: Vec<Box<RawValue>>,
    /// The prompts (`prompts/list`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompts: Option<Vec<Box<RawValue>>>,
    /// The resources (`resources/list`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<Vec<Box<RawValue>>>,
    /// The resource templates (`resources/templates/list`).
    #[serde(
        rename = "resourceTemplates",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub resource_templates: Option<Vec<Box<RawValue>>>,
    /// The server's `initialize` result, as it came, and the protocol version it was asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialize: Option<SavedHandshake>,
}

/// A server's answer to `initialize`, and what it was asked.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SavedHandshake {
    /// The `protocolVersion` of the `initialize` request.
    pub asked: String,
    /// The `result` of the server's answer, as it came.
    pub result: Box<RawValue>,
    /// The whole `initialize` params it answered (the client's identity): a server may show
    /// another client other tools, so the saved lists serve only the same client again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
}

impl Catalog {
    /// The saved items of a list method (`prompts/list`, `resources/list`,
    /// `resources/templates/list`, `tools/list`), when known.
    pub fn list(&self, method: &str) -> Option<&[Box<RawValue>]> {
        match method {
            "tools/list" => Some(&self.tools),
            "prompts/list" => self.prompts.as_deref(),
            "resources/list" => self.resources.as_deref(),
            "resources/templates/list" => self.resource_templates.as_deref(),
            _ => None,
        }
    }
}

/// The file as written: a format version, a line that says whose catalog it is (safe to show:
/// the config's own redacted description), and the catalog.
#[derive(Serialize)]
struct FileOut<'a> {
    format: u32,
    server: String,
    catalog: &'a Catalog,
}

#[derive(Deserialize)]
struct FileIn {
    catalog: Box<RawValue>,
}

/// Where catalogs are kept.
#[derive(Clone, Debug)]
pub struct CatalogStore {
    dir: PathBuf,
}

impl CatalogStore {
    /// Catalogs under `dir` (created when first written).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// The user's cache directory, `mcp-supervisor/catalogs` in it: `$XDG_CACHE_HOME`, else
    /// `~/Library/Caches` on macOS and `~/.cache` elsewhere. `None` when there is no home.
    pub fn default_dir() -> Option<PathBuf> {
        let non_empty = |var: &str| std::env::var_os(var).filter(|v| !v.is_empty());
        let base = match non_empty("XDG_CACHE_HOME") {
            Some(dir) => PathBuf::from(dir),
            None => {
                let home = PathBuf::from(non_empty("HOME")?);
                if cfg!(target_os = "macos") {
                    home.join("Library").join("Caches")
                } else {
                    home.join(".cache")
                }
            }
        };
        Some(base.join("mcp-supervisor").join("catalogs"))
    }

    /// The directory the catalogs are kept in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file of `server`'s catalog: a hash of its identity, so two configs that run the same
    /// server share it and a changed command does not read a stale one.
    pub fn path_for(&self, server: &ServerConfig) -> PathBuf {
        self.dir.join(format!("{}.json", identity_key(server)))
    }

    /// `server`'s saved catalog, if there is a usable one. A file that cannot be read, is not
    /// valid or is of another format version is ignored with a warning.
    pub fn load(&self, server: &ServerConfig) -> Option<Catalog> {
        let path = self.path_for(server);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            Err(e) => {
                tracing::warn!(server = %server.name, "the saved catalog {} cannot be read ({e}); starting without it", path.display());
                return None;
            }
        };
        match read(&text) {
            Ok(catalog) => Some(catalog),
            Err(why) => {
                tracing::warn!(
                    server = %server.name,
                    "the saved catalog {} is ignored: {why}; it is rewritten after the server's next successful list",
                    path.display()
                );
                None
            }
        }
    }

    /// Save `catalog` for `server`, atomically: readers see the old file or the new one, never
    /// half of one.
    pub fn save(&self, server: &ServerConfig, catalog: &Catalog) -> Result<(), SaveError> {
        let path = self.path_for(server);
        let text = serde_json::to_vec(&FileOut {
            format: FORMAT_VERSION,
            server: server.describe(),
            catalog,
        })
        .map_err(|source| SaveError::Encode { source })?;
        Ok(write_atomically(&path, &text)?)
    }
}

/// Why a catalog was not saved ([`CatalogStore::save`]). Nothing depends on it: the server's
/// next successful list tries again.
#[derive(Debug, thiserror::Error)]
pub enum SaveError {
    /// The catalog could not be written as JSON (a list item the server sent is not valid).
    #[error("the catalog cannot be written as JSON: {source}")]
    Encode {
        /// What serde_json said.
        source: serde_json::Error,
    },
    /// The file could not be written.
    #[error(transparent)]
    Write(#[from] WriteError),
}

/// Why a file of the state directory (a catalog, a pin file) was not written: the directory or
/// the file, and what the system said.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// Its directory could not be created.
    #[error(
        "cannot create {}: {source}; check that the state directory is writable, or give another one (--state-dir; a host: HubOptions::state_dir)",
        dir.display()
    )]
    CreateDir {
        /// The directory.
        dir: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// The file (its temporary sibling, or the rename over it) could not be written.
    #[error(
        "cannot write {}: {source}; check that the state directory is writable and not full",
        path.display()
    )]
    Write {
        /// The file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
}

/// Why a saved catalog is not used ([`CatalogStore::load`] logs it and starts without it).
#[derive(Debug, thiserror::Error)]
enum Unusable {
    /// The text is not a catalog file at all.
    #[error("it is not a catalog file ({source})")]
    NotACatalog { source: serde_json::Error },
    /// Another build wrote it.
    #[error("it is of format version {found} and this build reads {FORMAT_VERSION}")]
    OtherFormat { found: serde_json::Value },
    /// The file is one, but its catalog is not valid.
    #[error("its catalog is not valid ({source})")]
    InvalidCatalog { source: serde_json::Error },
}

/// Write `bytes` to `path` atomically (readers see the old file or the new one, never half of
/// one), private to the user, creating its directory when needed.
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), WriteError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    create_private_dir(dir).map_err(|source| WriteError::CreateDir {
        dir: dir.to_path_buf(),
        source,
    })?;
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temp = dir.join(format!(
        ".{file_name}.{}.{}.tmp",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let written = write_private(&temp, bytes).and_then(|()| std::fs::rename(&temp, path));
    if let Err(source) = written {
        let _ = std::fs::remove_file(&temp);
        return Err(WriteError::Write {
            path: path.to_path_buf(),
            source,
        });
    }
    Ok(())
}

/// Read a catalog file's text.
fn read(text: &str) -> Result<Catalog, Unusable> {
    #[derive(Deserialize)]
    struct Version {
        format: serde_json::Value,
    }
    let version: Version =
        serde_json::from_str(text).map_err(|source| Unusable::NotACatalog { source })?;
    if version.format != FORMAT_VERSION {
        return Err(Unusable::OtherFormat {
            found: version.format,
        });
    }
    let file: FileIn =
        serde_json::from_str(text).map_err(|source| Unusable::NotACatalog { source })?;
    serde_json::from_str(file.catalog.get()).map_err(|source| Unusable::InvalidCatalog { source })
}

/// A stable hash of what makes a server the same server: its command, arguments and working
/// directory, or its URL (and whether it is streamable HTTP or legacy SSE). Never its `env` or `headers` (secrets), nor its name.
pub fn identity_key(server: &ServerConfig) -> String {
    let identity = match &server.transport {
        TransportConfig::Stdio {
            command, args, cwd, ..
        } => serde_json::json!([
            "stdio",
            command,
            args,
            cwd.as_ref().map(|c| c.to_string_lossy())
        ]),
        TransportConfig::Http { url, .. } => serde_json::json!(["http", url]),
        TransportConfig::Sse { url, .. } => serde_json::json!(["sse", url]),
    };
    let digest = Sha256::digest(identity.to_string().as_bytes());
    digest.iter().take(16).map(|b| format!("{b:02x}")).collect()
}

fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stdio(command: &str, args: &[&str], cwd: Option<&str>) -> ServerConfig {
        ServerConfig::new(
            "s",
            TransportConfig::Stdio {
                command: command.into(),
                args: args.iter().map(|a| a.to_string()).collect(),
                env: Vec::new(),
                cwd: cwd.map(PathBuf::from),
            },
        )
    }

    fn raw(text: &str) -> Box<RawValue> {
        RawValue::from_string(text.to_string()).expect("valid JSON")
    }

    fn temp_dir(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "mcp-supervisor-catalog-{tag}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn the_identity_is_command_args_and_cwd_or_url() {
        let base = identity_key(&stdio("npx", &["-y", "x"], None));
        assert_eq!(base.len(), 32);
        assert_eq!(base, identity_key(&stdio("npx", &["-y", "x"], None)));
        let mut renamed = stdio("npx", &["-y", "x"], None);
        renamed.name = "other".into();
        assert_eq!(base, identity_key(&renamed), "the name is not identity");
        for other in [
            stdio("npx", &["-y", "y"], None),
            stdio("node", &["-y", "x"], None),
            stdio("npx", &["-y", "x"], Some("/tmp")),
            stdio("npx", &["-y x"], None),
        ] {
            assert_ne!(base, identity_key(&other), "{other:?}");
        }
        let http = |url: &str| {
            ServerConfig::new(
                "s",
                TransportConfig::Http {
                    url: url.into(),
                    headers: Vec::new(),
                },
            )
        };
        assert_ne!(
            identity_key(&http("http://a/mcp")),
            identity_key(&http("http://b/mcp"))
        );
    }

    #[test]
    fn a_saved_catalog_reads_back_whole() {
        let dir = temp_dir("roundtrip");
        let store = CatalogStore::new(&dir);
        let server = stdio("srv", &[], None);
        assert!(store.load(&server).is_none(), "nothing saved yet");
        let tool = r#"{"name":"echo","inputSchema":{"type":"object"},"x-unknown":[1,2]}"#;
        let catalog = Catalog {
            tools: vec![raw(tool)],
            prompts: Some(Vec::new()),
            resources: None,
            resource_templates: Some(vec![raw(r#"{"uriTemplate":"f://{x}"}"#)]),
            initialize: Some(SavedHandshake {
                asked: "2025-06-18".into(),
                result: raw(r#"{"protocolVersion":"2025-06-18"}"#),
                client: Some(r#"{"clientInfo":{"name":"c"}}"#.into()),
            }),
        };
        store.save(&server, &catalog).expect("saved");
        let back = store.load(&server).expect("read back");
        assert_eq!(back.tools[0].get(), tool, "byte for byte");
        assert_eq!(back.list("prompts/list").map(<[_]>::len), Some(0));
        assert!(back.list("resources/list").is_none(), "not known");
        assert_eq!(
            back.list("resources/templates/list").map(<[_]>::len),
            Some(1)
        );
        assert_eq!(
            back.initialize.map(|h| h.asked).as_deref(),
            Some("2025-06-18")
        );
        // Only the catalog is left in the directory: no temporary file.
        let files: Vec<_> = std::fs::read_dir(&dir).expect("dir").collect();
        assert_eq!(files.len(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn corrupt_or_other_version_catalogs_are_ignored_then_rewritten() {
        let dir = temp_dir("corrupt");
        let store = CatalogStore::new(&dir);
        let server = stdio("srv", &["a"], None);
        std::fs::create_dir_all(&dir).expect("dir");
        for text in [
            "not json at all",
            r#"{"format":1,"catalog":{"tools":"nope"}}"#,
            r#"{"format":2,"catalog":{"tools":[]}}"#,
            r#"{"format":"1","catalog":{"tools":[]}}"#,
            r#"{"catalog":{"tools":[]}}"#,
            "",
        ] {
            std::fs::write(store.path_for(&server), text).expect("write");
            assert!(store.load(&server).is_none(), "{text}");
        }
        assert!(
            read(r#"{"format":2,"catalog":{}}"#)
                .unwrap_err()
                .to_string()
                .contains("format version 2")
        );
        store.save(&server, &Catalog::default()).expect("rewritten");
        assert!(store.load(&server).is_some());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_catalog_that_cannot_be_written_is_an_error_not_a_panic() {
        let dir = temp_dir("blocked");
        std::fs::write(&dir, "a file where the directory should be").expect("write");
        let store = CatalogStore::new(dir.join("sub"));
        let err = store
            .save(&stdio("srv", &[], None), &Catalog::default())
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("cannot create"), "{err}");
        let _ = std::fs::remove_file(&dir);
    }
}
