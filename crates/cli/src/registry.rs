//! The per-user registry of running proxies (SPEC §15): a folder, mode 0700, in which every
//! `serve` and `wrap` puts a Unix socket `<pid>.sock` (mode 0600) serving its admin routes and an
//! entry `<pid>.json` saying who it is, and from which it takes both away when it ends. The
//! `dashboard` command reads it ([`scan`]) and cleans what a proxy killed with SIGKILL left.
//!
//! It owns the folder's choice and checks, the entry's format, and the staleness decision (pure
//! functions below, tested without I/O). Registering never stops a proxy: every failure is one
//! warning and the proxy serves on without an entry. It never removes a file that is not named
//! `<pid>.json` or `<pid>.sock` in the folder, and never uses a folder another user could read.

use std::ffi::OsStr;
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use axum::Router;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use mcp_supervisor::core::config::Config;
use mcp_supervisor::history::unix_ms;

use crate::http::limits::Limits;
use crate::http::page;

/// The folder's name under `$XDG_RUNTIME_DIR`.
const UNDER_RUNTIME_DIR: &str = "mcp-supervisor";
/// The longest socket path a `sockaddr_un` holds (108 bytes with its NUL on Linux; 104 on the
/// BSDs and macOS: the smaller, so that a path that works here works there).
const SUN_PATH_MAX: usize = 103;
/// At most this many connections on a proxy's socket at once (a dashboard holds two).
const SOCKET_CONNECTIONS: u32 = 32;

/// Which command a proxy runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Serve,
    Wrap,
}

/// A proxy's entry, `<pid>.json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    pub pid: u32,
    pub kind: Kind,
    /// What a person sees: `wrap --name` or the server's name; for `serve`, the config's file
    /// name.
    pub name: String,
    /// `wrap`: the server's command line (or URL, its secrets redacted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// `serve`: the config file's absolute path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<PathBuf>,
    /// Milliseconds since the Unix epoch.
    pub started_at: u64,
    pub socket: PathBuf,
    pub version: String,
}

// === pure logic ===

/// The registry folder: `$XDG_RUNTIME_DIR/mcp-supervisor` when that is set to an absolute path,
/// else `mcp-supervisor-<uid>` in the temp dir.
pub fn folder_of(runtime_dir: Option<&OsStr>, temp_dir: &Path, uid: u32) -> PathBuf {
    match runtime_dir.map(Path::new) {
        Some(dir) if dir.is_absolute() => dir.join(UNDER_RUNTIME_DIR),
        _ => temp_dir.join(format!("mcp-supervisor-{uid}")),
    }
}

/// What the folder's metadata says about its fitness, facts in: `None` when it is ours and
/// nobody else's, else why not.
pub fn folder_problem(is_dir: bool, owner: u32, mode: u32, uid: u32) -> Option<String> {
    if !is_dir {
        return Some("it is not a directory (or is a symbolic link)".into());
    }
    if owner != uid {
        return Some(format!("it belongs to user {owner}, not to us ({uid})"));
    }
    if mode & 0o077 != 0 {
        return Some(format!(
            "its mode is {:04o}: others than its owner may use it",
            mode & 0o7777
        ));
    }
    None
}

/// `<pid>.json`'s pid, for a file name that is an entry.
pub fn entry_pid(file_name: &OsStr) -> Option<u32> {
    let pid = file_name.to_str()?.strip_suffix(".json")?;
    if pid.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    pid.parse().ok().filter(|&pid| pid > 0)
}

/// An entry's text, checked against the file it was read from: its pid is the file's, and its
/// socket the one beside it.
pub fn parse_entry(text: &str, pid: u32, folder: &Path) -> Result<Entry, String> {
    let entry: Entry = serde_json::from_str(text).map_err(|e| format!("not an entry: {e}"))?;
    if entry.pid != pid {
        return Err(format!("its pid is {}, not {pid}", entry.pid));
    }
    if entry.socket != socket_path(folder, pid) {
        return Err(format!(
            "its socket {} is not the one beside it",
            entry.socket.display()
        ));
    }
    Ok(entry)
}

/// What trying a proxy's socket found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reach {
    /// It connected (and, where asked, answered).
    Answered,
    /// Connection refused: no one listens on it any more.
    Refused,
    /// The socket file is not there.
    Missing,
    /// Anything else: a timeout, a full backlog, an error in its answer.
    Failed,
}

/// What the dashboard makes of an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Shown with its state.
    Live,
    /// Its proxy is gone (killed with SIGKILL, or its pid since reused): skipped and removed.
    Stale,
    /// Its proxy is there but does not answer: shown as unreachable.
    Unreachable,
}

/// An entry's fate from the facts: whether its pid is alive, and what its socket did. A dead
/// pid, or a socket nobody listens on (a zombie, or a pid reused by another process), is stale.
pub fn verdict(pid_alive: bool, reach: Reach) -> Verdict {
    match (pid_alive, reach) {
        (false, _) | (true, Reach::Refused | Reach::Missing) => Verdict::Stale,
        (true, Reach::Answered) => Verdict::Live,
        (true, Reach::Failed) => Verdict::Unreachable,
    }
}

/// What an error connecting to a socket says about it.
pub fn reach_of(error: &io::Error) -> Reach {
    match error.kind() {
        io::ErrorKind::ConnectionRefused => Reach::Refused,
        io::ErrorKind::NotFound => Reach::Missing,
        _ => Reach::Failed,
    }
}

/// `<pid>.sock` in `folder`.
pub fn socket_path(folder: &Path, pid: u32) -> PathBuf {
    folder.join(format!("{pid}.sock"))
}

/// `<pid>.json` in `folder`.
pub fn entry_path(folder: &Path, pid: u32) -> PathBuf {
    folder.join(format!("{pid}.json"))
}

// === the folder ===

/// This user's id.
pub fn uid() -> u32 {
    nix::unistd::getuid().as_raw()
}

/// The registry folder of this user, from the environment.
pub fn default_folder() -> PathBuf {
    folder_of(
        std::env::var_os("XDG_RUNTIME_DIR").as_deref(),
        &std::env::temp_dir(),
        uid(),
    )
}

/// Create `folder` (mode 0700) if it is not there, and check that it is ours alone; the error
/// names the path and what to do.
pub fn open_folder(folder: &Path) -> Result<(), String> {
    match std::fs::DirBuilder::new().mode(0o700).create(folder) {
        Ok(()) => {}
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {}
        Err(error) => {
            return Err(format!(
                "cannot create the registry folder {}: {error}; set XDG_RUNTIME_DIR to a folder of yours",
                folder.display()
            ));
        }
    }
    // Not followed: a link put there by someone else is refused.
    let meta = std::fs::symlink_metadata(folder).map_err(|error| {
        format!(
            "cannot read the registry folder {}: {error}",
            folder.display()
        )
    })?;
    match folder_problem(meta.is_dir(), meta.uid(), meta.mode(), uid()) {
        None => Ok(()),
        Some(why) => Err(format!(
            "the registry folder {} is not safe to use: {why}; remove it (or `chmod 700` it if it is yours), or set XDG_RUNTIME_DIR to a folder of yours",
            folder.display()
        )),
    }
}

// === a proxy's registration ===

/// Who a proxy is, for its entry.
pub struct Whom {
    pub kind: Kind,
    pub name: String,
    pub command: Option<String>,
    pub config: Option<PathBuf>,
    pub started_at: SystemTime,
}

impl Whom {
    /// This proxy, from what its page knows of it and its config (`wrap`'s one server's command
    /// line, or URL with its secrets redacted).
    pub fn of(about: &page::About, config: &Config) -> Self {
        let kind = match about.kind {
            page::Kind::Serve => Kind::Serve,
            page::Kind::Wrap => Kind::Wrap,
        };
        let command = match kind {
            Kind::Wrap => config.servers.first().map(|server| server.describe()),
            Kind::Serve => None,
        };
        let config = about
            .config
            .as_deref()
            .map(|path| std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf()));
        Self {
            kind,
            name: about.name.clone(),
            command,
            config,
            started_at: about.started_at,
        }
    }
}

/// A proxy's entry and socket, removed when this is dropped (or by [`Registration::remove`]).
pub struct Registration {
    entry: PathBuf,
    socket: PathBuf,
    serving: Option<tokio::task::JoinHandle<()>>,
}

impl Registration {
    /// Take the entry and the socket away (the entry first: a dashboard that still finds the
    /// entry finds a socket that refuses, and calls it stale).
    pub fn remove(&mut self) {
        if let Some(serving) = self.serving.take() {
            serving.abort();
        }
        for path in [&self.entry, &self.socket] {
            match std::fs::remove_file(path) {
                Ok(()) => {}
                Err(error) if error.kind() == io::ErrorKind::NotFound => {}
                Err(error) => tracing::debug!("cannot remove {}: {error}", path.display()),
            }
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.remove();
    }
}

/// Register this process in `folder` (the default when none): its socket serving `router` within
/// `limits` until `shutdown`, then its entry. Any failure is one warning and `None`: the proxy
/// serves on without one. Must run within a tokio runtime.
pub fn register(
    folder: Option<PathBuf>,
    whom: Whom,
    router: Router,
    limits: Limits,
    shutdown: CancellationToken,
) -> Option<Registration> {
    let folder = folder.unwrap_or_else(default_folder);
    match try_register(&folder, whom, router, limits, shutdown) {
        Ok(registration) => {
            tracing::debug!(
                "registered in {} (for `mcp-supervisor dashboard`)",
                folder.display()
            );
            Some(registration)
        }
        Err(why) => {
            tracing::warn!("not registered for `mcp-supervisor dashboard`: {why}");
            None
        }
    }
}

fn try_register(
    folder: &Path,
    whom: Whom,
    router: Router,
    limits: Limits,
    shutdown: CancellationToken,
) -> Result<Registration, String> {
    open_folder(folder)?;
    let pid = std::process::id();
    let socket = socket_path(folder, pid);
    let length = socket.as_os_str().len();
    if length > SUN_PATH_MAX {
        return Err(format!(
            "the socket path {} is {length} bytes, longer than a Unix socket's {SUN_PATH_MAX}; set XDG_RUNTIME_DIR (or TMPDIR) to a shorter folder",
            socket.display()
        ));
    }
    // Left by an earlier process with this pid: it is gone (we are this pid now).
    let _ = std::fs::remove_file(&socket);
    let mut registration = Registration {
        entry: entry_path(folder, pid),
        socket: socket.clone(),
        serving: None,
    };
    let listener = std::os::unix::net::UnixListener::bind(&socket)
        .map_err(|e| format!("cannot listen on {}: {e}", socket.display()))?;
    // 0600 whatever the umask; the 0700 folder already keeps others out.
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("cannot set the mode of {}: {e}", socket.display()))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| format!("cannot use {}: {e}", socket.display()))?;
    let listener = tokio::net::UnixListener::from_std(listener)
        .map_err(|e| format!("cannot use {}: {e}", socket.display()))?;
    let limits = Limits {
        max_connections: SOCKET_CONNECTIONS,
        ..limits
    };
    registration.serving = Some(tokio::spawn(crate::http::listener::run(
        listener, router, limits, shutdown,
    )));
    let entry = Entry {
        pid,
        kind: whom.kind,
        name: whom.name,
        command: whom.command,
        config: whom.config,
        started_at: unix_ms(whom.started_at),
        socket,
        version: env!("CARGO_PKG_VERSION").to_owned(),
    };
    write_entry(folder, &entry)?;
    Ok(registration)
}

/// Write `<pid>.json` whole or not at all: a temporary file (mode 0600), then a rename.
fn write_entry(folder: &Path, entry: &Entry) -> Result<(), String> {
    let text = serde_json::to_vec(entry).map_err(|e| format!("cannot write the entry: {e}"))?;
    let temp = folder.join(format!(".{}.json.tmp", entry.pid));
    let path = entry_path(folder, entry.pid);
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&temp)
        .and_then(|mut file| file.write_all(&text))
        .and_then(|()| std::fs::rename(&temp, &path));
    written.map_err(|error| {
        let _ = std::fs::remove_file(&temp);
        format!("cannot write {}: {error}", path.display())
    })
}

// === reading it (the dashboard) ===

/// How long a connection to a proxy's socket may take.
pub const CONNECT_LIMIT: Duration = Duration::from_secs(1);

/// Whether process `pid` exists (a zombie counts: its socket then refuses).
pub fn pid_alive(pid: u32) -> bool {
    use nix::errno::Errno;
    let Ok(raw) = i32::try_from(pid) else {
        return false;
    };
    if raw <= 0 {
        return false;
    }
    match nix::sys::signal::kill(nix::unistd::Pid::from_raw(raw), None) {
        Ok(()) | Err(Errno::EPERM) => true,
        Err(_) => false,
    }
}

/// The entries in `folder` whose pid is alive, sorted by pid; the files of those whose pid is
/// gone are removed (and unreadable entries of dead pids too). An unusable folder is an error
/// naming it.
pub fn scan(folder: &Path) -> Result<Vec<Entry>, String> {
    let listing = std::fs::read_dir(folder)
        .map_err(|e| format!("cannot read the registry folder {}: {e}", folder.display()))?;
    let mut entries = Vec::new();
    for item in listing.flatten() {
        let Some(pid) = entry_pid(&item.file_name()) else {
            continue;
        };
        let parsed = std::fs::read_to_string(item.path())
            .map_err(|e| e.to_string())
            .and_then(|text| parse_entry(&text, pid, folder));
        if !pid_alive(pid) {
            remove_stale(folder, pid);
            continue;
        }
        match parsed {
            Ok(entry) => entries.push(entry),
            Err(why) => tracing::debug!("skipping {}: {why}", item.path().display()),
        }
    }
    entries.sort_by_key(|e| e.pid);
    Ok(entries)
}

/// Remove a gone proxy's entry and socket.
pub fn remove_stale(folder: &Path, pid: u32) {
    tracing::debug!("removing the entry of proxy {pid}, which is gone");
    for path in [entry_path(folder, pid), socket_path(folder, pid)] {
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(error) => tracing::debug!("cannot remove {}: {error}", path.display()),
        }
    }
}

/// Connect to a proxy's socket within [`CONNECT_LIMIT`]; what failed, as a [`Reach`].
pub async fn connect(socket: &Path) -> Result<tokio::net::UnixStream, Reach> {
    match tokio::time::timeout(CONNECT_LIMIT, tokio::net::UnixStream::connect(socket)).await {
        Ok(Ok(stream)) => Ok(stream),
        Ok(Err(error)) => Err(reach_of(&error)),
        Err(_) => Err(Reach::Failed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_folder_is_under_xdg_runtime_dir_else_per_user_in_the_temp_dir() {
        let temp = Path::new("/tmp");
        assert_eq!(
            folder_of(Some(OsStr::new("/run/user/1000")), temp, 1000),
            Path::new("/run/user/1000/mcp-supervisor")
        );
        assert_eq!(
            folder_of(None, temp, 1000),
            Path::new("/tmp/mcp-supervisor-1000")
        );
        // Unset in effect: empty or relative (the XDG spec says to ignore a relative one).
        assert_eq!(
            folder_of(Some(OsStr::new("")), temp, 7),
            Path::new("/tmp/mcp-supervisor-7")
        );
        assert_eq!(
            folder_of(Some(OsStr::new("run")), temp, 7),
            Path::new("/tmp/mcp-supervisor-7")
        );
    }

    #[test]
    fn a_folder_that_others_may_use_or_that_is_not_ours_is_refused() {
        assert_eq!(folder_problem(true, 1000, 0o40700, 1000), None);
        assert!(folder_problem(true, 1000, 0o40750, 1000).is_some_and(|why| why.contains("0750")));
        assert!(folder_problem(true, 1000, 0o40701, 1000).is_some());
        assert!(folder_problem(true, 0, 0o40700, 1000).is_some_and(|why| why.contains("user 0")));
        assert!(folder_problem(false, 1000, 0o120777, 1000).is_some());
    }

    #[test]
    fn only_pid_json_files_are_entries() {
        assert_eq!(entry_pid(OsStr::new("123.json")), Some(123));
        for name in [
            "0.json",
            ".123.json.tmp",
            "123.sock",
            "x123.json",
            "-1.json",
            ".json",
            "99999999999.json",
        ] {
            assert_eq!(entry_pid(OsStr::new(name)), None, "{name}");
        }
    }

    #[test]
    fn an_entry_parses_and_must_match_its_file() {
        let folder = Path::new("/run/user/1/mcp-supervisor");
        let entry = Entry {
            pid: 42,
            kind: Kind::Wrap,
            name: "a".into(),
            command: Some("fault-server --x".into()),
            config: None,
            started_at: 1_700_000_000_000,
            socket: socket_path(folder, 42),
            version: "0.1.0".into(),
        };
        let text = serde_json::to_string(&entry).expect("serialize");
        assert!(text.contains(r#""kind":"wrap""#) && text.contains(r#""startedAt":"#));
        assert_eq!(parse_entry(&text, 42, folder), Ok(entry.clone()));
        assert!(
            parse_entry(&text, 43, folder).is_err(),
            "another pid's file"
        );
        assert!(parse_entry(&text, 42, Path::new("/elsewhere")).is_err());
        assert!(parse_entry("{", 42, folder).is_err());
        let serve = r#"{"pid":42,"kind":"serve","name":"servers.json","config":"/etc/servers.json","startedAt":1,"socket":"/run/user/1/mcp-supervisor/42.sock","version":"0.1.0"}"#;
        assert!(
            parse_entry(serve, 42, folder)
                .is_ok_and(|e| e.kind == Kind::Serve && e.command.is_none())
        );
    }

    #[test]
    fn a_dead_pid_or_a_refusing_socket_is_stale_and_a_silent_one_unreachable() {
        assert_eq!(verdict(true, Reach::Answered), Verdict::Live);
        assert_eq!(verdict(true, Reach::Failed), Verdict::Unreachable);
        assert_eq!(verdict(true, Reach::Refused), Verdict::Stale);
        assert_eq!(verdict(true, Reach::Missing), Verdict::Stale);
        for reach in [
            Reach::Answered,
            Reach::Failed,
            Reach::Refused,
            Reach::Missing,
        ] {
            assert_eq!(verdict(false, reach), Verdict::Stale, "{reach:?}");
        }
        assert_eq!(
            reach_of(&io::Error::from(io::ErrorKind::ConnectionRefused)),
            Reach::Refused
        );
        assert_eq!(
            reach_of(&io::Error::from(io::ErrorKind::NotFound)),
            Reach::Missing
        );
        assert_eq!(
            reach_of(&io::Error::from(io::ErrorKind::TimedOut)),
            Reach::Failed
        );
    }

    #[test]
    fn pid_zero_and_out_of_range_pids_are_not_alive() {
        assert!(!pid_alive(0));
        assert!(!pid_alive(u32::MAX));
        assert!(pid_alive(std::process::id()));
    }
}
