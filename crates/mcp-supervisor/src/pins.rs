//! Pinned tool definitions on disk (SPEC §13): one file per server identity in the `pins`
//! folder of the catalogs' directory (`pins/<identity>.json`, keyed like the catalog, and apart
//! from the catalogs so that nothing that reads the catalogs meets them), read and written whole and
//! atomically; the per-server book the registry judges every published list with; and the
//! approval that `mcp-supervisor approve` writes.
//!
//! The comparison itself is pure ([`mcp_supervisor_core::pin`]); this module only reads, writes,
//! logs and notices a file changed by another process (an approval), by its modification time.
//! It never makes anything fatal: a pin file that cannot be read or is not valid is replaced by
//! the definitions now seen, with a warning; one that cannot be written is a warning. It never
//! holds a secret of the config (the file names the server by its redacted description).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use mcp_supervisor_core::config::ServerConfig;
use mcp_supervisor_core::pin::{self, Action, Pin, PinMode, PinState, Verdict};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::catalog::WriteError;

/// The format of the pin files this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;

/// The pin file of `server` under `dir` (the catalogs' directory).
pub fn pin_path(dir: &Path, server: &ServerConfig) -> PathBuf {
    pins_dir(dir).join(format!("{}.json", crate::catalog::identity_key(server)))
}

/// The folder of the pin files under `dir` (the catalogs' directory).
fn pins_dir(dir: &Path) -> PathBuf {
    dir.join("pins")
}

/// The file as written.
#[derive(Serialize, Deserialize)]
struct PinFile {
    format: u32,
    /// The server's name in the config that last wrote it (for `approve NAME` without a config).
    name: String,
    /// Whose pins these are, safe to show (the config's redacted description).
    server: String,
    #[serde(flatten)]
    state: PinState,
}

/// Why a pin file could not be used, or an approval not made. Each names the pin file (or the
/// tool) and what to do.
#[derive(Debug, thiserror::Error)]
pub enum PinError {
    /// The file exists but cannot be read.
    #[error("the pin file {} cannot be read ({source}); check its permissions", path.display())]
    Unreadable {
        /// The pin file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// The file is not JSON with a format version.
    #[error("the pin file {} is not a pin file ({source})", path.display())]
    NotAPinFile {
        /// The pin file.
        path: PathBuf,
        /// What serde_json said.
        source: serde_json::Error,
    },
    /// Another build wrote it.
    #[error(
        "the pin file {} is of format version {found} and this build reads {FORMAT_VERSION}",
        path.display()
    )]
    OtherFormat {
        /// The pin file.
        path: PathBuf,
        /// The version it has.
        found: serde_json::Value,
    },
    /// It has this build's format version, but not its shape.
    #[error("the pin file {} is not a valid pin file ({source})", path.display())]
    Invalid {
        /// The pin file.
        path: PathBuf,
        /// What serde_json said.
        source: serde_json::Error,
    },
    /// There is no pin file to approve in.
    #[error(
        "there are no pins in {}: the server's tools are pinned when a proxy with a state directory first lists them",
        path.display()
    )]
    NoPins {
        /// Where the pin file would be.
        path: PathBuf,
    },
    /// The tool named has no change waiting (the words say which tools have one).
    #[error("{0}")]
    NothingToApprove(String),
    /// The pins could not be written as JSON.
    #[error("the pins cannot be written as JSON: {source}")]
    Encode {
        /// What serde_json said.
        source: serde_json::Error,
    },
    /// The pin file could not be written.
    #[error(transparent)]
    Write(#[from] WriteError),
}

/// Read a pin file: `Ok(None)` when there is none.
fn read(path: &Path) -> Result<Option<(PinFile, Stamp)>, PinError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(PinError::Unreadable {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    let stamp = stamp(path);
    #[derive(Deserialize)]
    struct Version {
        format: serde_json::Value,
    }
    let version: Version = serde_json::from_str(&text).map_err(|source| PinError::NotAPinFile {
        path: path.to_path_buf(),
        source,
    })?;
    if version.format != FORMAT_VERSION {
        return Err(PinError::OtherFormat {
            path: path.to_path_buf(),
            found: version.format,
        });
    }
    let file: PinFile = serde_json::from_str(&text).map_err(|source| PinError::Invalid {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(Some((file, stamp)))
}

/// Write a pin file atomically (a temporary file, then a rename), private to the user.
fn write(path: &Path, file: &PinFile) -> Result<Stamp, PinError> {
    let text = serde_json::to_vec_pretty(file).map_err(|source| PinError::Encode { source })?;
    crate::catalog::write_atomically(path, &text)?;
    Ok(stamp(path))
}

/// What tells one version of a file from another: its modification time and length.
type Stamp = Option<(SystemTime, u64)>;

fn stamp(path: &Path) -> Stamp {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len()))
}

/// One server's pins as the registry holds them: the state as last read or written, and what
/// was logged of it in this process.
pub(crate) struct PinBook {
    name: String,
    describe: String,
    mode: PinMode,
    path: PathBuf,
    state: PinState,
    /// The file as last read or written here; another stamp means another process wrote it.
    stamp: Stamp,
    /// Whether a pin file existed (the first list of a server with none is pinned quietly).
    had_pins: bool,
    /// Each changed definition logged in this process, so a change is logged once, not at every
    /// reconnect.
    logged: HashMap<String, Pin>,
}

/// A withheld tool: the members that changed since its pin.
pub type Withheld = BTreeMap<String, String>;

impl PinBook {
    /// The pins of `server` under `dir`, under `mode` (not `off`: that keeps no book).
    pub(crate) fn open(dir: &Path, server: &ServerConfig, mode: PinMode) -> Self {
        let mut book = Self {
            name: server.name.clone(),
            describe: server.describe(),
            mode,
            path: pin_path(dir, server),
            state: PinState::default(),
            stamp: None,
            had_pins: false,
            logged: HashMap::new(),
        };
        book.load();
        book
    }

    /// (Re)read the file.
    fn load(&mut self) {
        match read(&self.path) {
            Ok(Some((file, stamp))) => {
                self.state = file.state;
                self.stamp = stamp;
                self.had_pins = true;
            }
            Ok(None) => {
                self.stamp = None;
            }
            Err(why) => {
                tracing::warn!(
                    server = %self.name,
                    "{why}; it is replaced by the tool definitions seen next"
                );
                self.stamp = stamp(&self.path);
            }
        }
    }

    /// Re-read the file if another process changed it since it was last read or written here
    /// (an approval). Returns whether it did.
    pub(crate) fn refresh(&mut self) -> bool {
        if stamp(&self.path) == self.stamp {
            return false;
        }
        self.load();
        true
    }

    /// Judge a server's list (each tool's name and definition) against its pins: log what is
    /// new or changed, save what is to be kept, and return the tools to withhold, each with the
    /// members that changed.
    pub(crate) fn judge(&mut self, tools: &[(&str, &RawValue)]) -> Withheld {
        // An approval written since the last look counts before this list is judged.
        self.refresh();
        let current: Vec<(String, Pin)> = tools
            .iter()
            .map(|(name, definition)| {
                let definition = serde_json::from_str(definition.get()).unwrap_or_default();
                (name.to_string(), pin::pin_of(&definition))
            })
            .collect();
        let (judged, changed) = self.state.observe(self.mode, &current);
        let mut withheld = Withheld::new();
        let mut new = Vec::new();
        for (judged, (_, now)) in judged.iter().zip(&current) {
            match &judged.verdict {
                Verdict::Same => {
                    self.logged.remove(&judged.name);
                }
                Verdict::New => new.push(judged.name.as_str()),
                Verdict::Changed(changes) => {
                    let members = pin::changed_members(changes);
                    if self.logged.get(&judged.name) != Some(now) {
                        self.logged.insert(judged.name.clone(), now.clone());
                        let what = match judged.action {
                            Action::Withhold => {
                                "it is withheld (not listed, calls refused) until the change is approved"
                            }
                            Action::Publish => "it is published anyway (pin: warn)",
                        };
                        tracing::warn!(
                            server = %self.name,
                            tool = %judged.name,
                            "tool \"{}\" changed since it was pinned ({members}); {what}: review it and accept it with `mcp-supervisor approve {}`\n{}",
                            judged.name,
                            self.name,
                            pin::render_diff(changes).trim_end()
                        );
                    }
                    if judged.action == Action::Withhold {
                        withheld.insert(judged.name.clone(), members);
                    }
                }
            }
        }
        if !new.is_empty() {
            if self.had_pins {
                tracing::warn!(server = %self.name, tools = ?new, "new tools, pinned at first sight");
            } else {
                tracing::info!(server = %self.name, tools = new.len(), "pinned the tool definitions first seen, in {}", self.path.display());
            }
        }
        if changed {
            self.save();
        }
        withheld
    }

    fn save(&mut self) {
        let file = PinFile {
            format: FORMAT_VERSION,
            name: self.name.clone(),
            server: self.describe.clone(),
            state: self.state.clone(),
        };
        match write(&self.path, &file) {
            Ok(stamp) => {
                self.stamp = stamp;
                self.had_pins = true;
            }
            Err(why) => tracing::warn!(server = %self.name, "the pins were not saved: {why}"),
        }
    }
}

/// What an approval accepted: each tool with the diff of its change, and where the pins are.
#[derive(Clone, Debug)]
pub struct Approval {
    /// The name of the server whose pins these are (as the proxy that wrote them knew it).
    pub name: String,
    /// The pin file written.
    pub path: PathBuf,
    /// Each tool accepted, with its change against the old pin, in words (see
    /// [`pin::render_diff`]) and the members that changed.
    pub accepted: Vec<ApprovedTool>,
    /// How many tools are pinned now.
    pub pinned: usize,
}

/// One approved change.
#[derive(Clone, Debug)]
pub struct ApprovedTool {
    /// The tool's name on its server.
    pub name: String,
    /// The members that changed (`description, inputSchema`).
    pub members: String,
    /// The diff, one line per changed line.
    pub diff: String,
}

/// Accept the changes waiting for approval of `server`'s tools (one tool, or all), pinned under
/// `dir`: they become the pins, which a running proxy picks up within a few seconds. An error
/// says what is missing.
pub fn approve(
    dir: &Path,
    server: &ServerConfig,
    tool: Option<&str>,
) -> Result<Approval, PinError> {
    approve_file(&pin_path(dir, server), tool)
}

/// As [`approve`], for a pin file found by its path.
pub fn approve_file(path: &Path, tool: Option<&str>) -> Result<Approval, PinError> {
    let (mut file, _) = read(path)?.ok_or_else(|| PinError::NoPins {
        path: path.to_path_buf(),
    })?;
    let accepted = file
        .state
        .approve(tool)
        .map_err(PinError::NothingToApprove)?;
    if !accepted.is_empty() {
        write(path, &file)?;
    }
    Ok(Approval {
        name: file.name.clone(),
        path: path.to_path_buf(),
        pinned: file.state.pinned.len(),
        accepted: accepted
            .into_iter()
            .map(|(name, changes)| ApprovedTool {
                name,
                members: pin::changed_members(&changes),
                diff: pin::render_diff(&changes),
            })
            .collect(),
    })
}

/// The pin files under `dir` written for a server called `name`, each with the server's
/// description (a `wrap` server is found this way without its command line).
pub fn find_by_name(dir: &Path, name: &str) -> Vec<(PathBuf, String)> {
    let Ok(entries) = std::fs::read_dir(pins_dir(dir)) else {
        return Vec::new();
    };
    let mut found: Vec<(PathBuf, String)> = entries
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| {
            path.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.ends_with(".json") && !n.starts_with('.'))
        })
        .filter_map(|path| match read(&path) {
            Ok(Some((file, _))) if file.name == name => Some((path, file.server)),
            _ => None,
        })
        .collect();
    found.sort();
    found
}
