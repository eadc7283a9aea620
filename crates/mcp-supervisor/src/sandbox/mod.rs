//! Sandboxed stdio servers (SPEC §16): a server with `sandbox` in its config is started through
//! a helper, the proxy binary re-executed with [`SANDBOX_ARG`] (the binary opts in by calling
//! [`run_if_asked`] first thing in `main`, like the orphan guard), which confines itself and
//! then executes the server: Landlock for files and TCP ports, a network namespace for no
//! network, `PR_SET_NO_NEW_PRIVS`. A re-executed helper, not code between `fork` and `exec`:
//! it is a fresh single-threaded process, free to allocate, to `unshare(CLONE_NEWUSER)` and to
//! report a failure in words.
//!
//! The proxy plans everything before the spawn ([`plan`] from what [`probe`] finds, [`grant`]
//! for the paths), so that what is logged and shown in status is what the helper applies. It
//! fails closed: a sandbox the kernel cannot give stops the server from starting, unless the
//! config says `bestEffort`.

pub mod grant;
#[cfg(target_os = "linux")]
mod helper;
mod probe;
pub mod temp;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

use mcp_supervisor_core::config::{Network, SandboxConfig, Secret};
use serde::{Deserialize, Serialize};

pub use probe::{NetNamespace, PROBE_ENV, Support, probe};
pub use temp::TempDir;

/// The hidden first argument that starts the proxy binary as the sandbox helper.
pub const SANDBOX_ARG: &str = "__mcp-supervisor-sandbox";

/// The helper's exit code when it could not confine itself or run the server (its stderr says
/// why in one line starting `sandbox: `).
pub const EXIT_CODE: u8 = 121;

/// The devices a server may write besides its paths (and read, and use as terminals).
const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/tty",
    "/dev/pts",
];

/// Set by [`run_if_asked`]: this binary can be re-executed as the helper.
static ENABLED: AtomicBool = AtomicBool::new(false);

/// Call first thing in `main`, before any thread starts. In the helper process (first argument
/// [`SANDBOX_ARG`]) it confines itself and executes the server, returning only an exit code
/// when that failed; otherwise it marks this binary as able to host the helper and returns
/// `None`. A host that neither calls it nor sets [`crate::HubOptions::sandbox_helper`] cannot
/// sandbox its servers: they do not start (or start unsandboxed with `bestEffort`).
pub fn run_if_asked() -> Option<ExitCode> {
    let mut args = std::env::args_os().skip(1);
    if args.next().is_some_and(|a| a == SANDBOX_ARG) {
        #[cfg(target_os = "linux")]
        return Some(helper::run(args.collect()));
        #[cfg(not(target_os = "linux"))]
        {
            eprintln!("sandbox: there is no sandbox on this operating system (Linux only)");
            return Some(ExitCode::from(EXIT_CODE));
        }
    }
    ENABLED.store(true, Ordering::SeqCst);
    None
}

/// The helper binary: `configured`, else this executable when it called [`run_if_asked`].
pub(crate) fn helper_binary(configured: Option<&Path>) -> Option<PathBuf> {
    if let Some(path) = configured {
        return Some(path.to_path_buf());
    }
    if !ENABLED.load(Ordering::SeqCst) {
        return None;
    }
    // `/proc/self/exe` still runs after the binary was replaced on disk; elsewhere the path.
    match Path::new("/proc/self/exe") {
        path if path.exists() => Some(path.to_path_buf()),
        _ => std::env::current_exe().ok(),
    }
}

// === The plan ===

/// What the helper applies to one server, planned from its config and what the kernel offers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// The Landlock ABI whose file rights are handled; `None`: no Landlock at all.
    pub landlock: Option<u8>,
    /// A network namespace of its own, and how it is made.
    pub net_namespace: Option<NetNamespace>,
    /// TCP connects allowed to these ports only (Landlock); `None`: TCP not ruled by Landlock.
    pub ports: Option<Vec<u16>>,
    /// Signals and abstract Unix sockets scoped to the sandbox (Landlock ABI 6).
    pub scope: bool,
    /// Whether the helper runs at all (there is one to run).
    pub helper: bool,
    /// What the sandbox needs and will not get, each in words; empty: all of it.
    pub lacking: Vec<String>,
}

/// What a server's sandbox gets from this kernel, as status shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Applied {
    /// The Landlock ABI applied; `None`: none.
    pub landlock_abi: Option<u8>,
    /// Files: `landlock` (the rules hold), or `none`.
    pub files: &'static str,
    /// The network: `isolated` (a namespace of its own), `tcpPorts` (only the listed TCP ports),
    /// `tcpBlocked` (no TCP connect; bestEffort without a namespace), or `open`.
    pub network: &'static str,
    /// Signals and abstract Unix sockets kept inside the sandbox.
    pub scoped: bool,
    /// No privilege can be gained (setuid, file capabilities).
    pub no_new_privs: bool,
    /// What the sandbox needs and does not get (without `bestEffort` the server does not start).
    pub lacking: Vec<String>,
}

/// One server's sandbox as `status` shows it: its config, and what the kernel gives it.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxStatus {
    /// `read` paths.
    pub read: Vec<PathBuf>,
    /// `write` paths.
    pub write: Vec<PathBuf>,
    /// `network`, as the config writes it.
    pub network: serde_json::Value,
    /// `bestEffort`.
    pub best_effort: bool,
    /// What the kernel gives.
    pub applied: Applied,
}

impl SandboxStatus {
    /// The status of `config` on a kernel offering `support`, with a helper or not.
    pub fn of(config: &SandboxConfig, support: &Support, helper: bool) -> Self {
        Self {
            read: config.read.clone(),
            write: config.write.clone(),
            network: config.network.to_json(),
            best_effort: config.best_effort,
            applied: plan(config, support, helper).applied(),
        }
    }
}

/// The plan for `config` on a kernel offering `support`; `helper`: whether a helper binary is
/// there to run. What cannot be had is in [`Plan::lacking`], and the rest is still planned.
pub fn plan(config: &SandboxConfig, support: &Support, helper: bool) -> Plan {
    let mut lacking = Vec::new();
    if !helper {
        lacking.push("this host cannot start the sandbox helper: it must call mcp_supervisor::sandbox::run_if_asked() first thing in main, or set HubOptions::sandbox_helper".to_owned());
        return Plan {
            landlock: None,
            net_namespace: None,
            ports: None,
            scope: false,
            helper: false,
            lacking,
        };
    }
    let abi = support.landlock;
    match abi {
        None => lacking.push(format!(
            "{} for the file rules",
            support
                .landlock_missing
                .as_deref()
                .unwrap_or("no Landlock")
        )),
        Some(abi) if abi < 3 => lacking.push(format!(
            "Landlock ABI {abi} cannot stop a server from truncating files (ABI 3, Linux 6.2 or later)"
        )),
        Some(_) => {}
    }
    let tcp = abi.is_some_and(|abi| abi >= 4);
    let (net_namespace, ports) = match &config.network {
        Network::All => (None, None),
        Network::None => match &support.net_namespace {
            Ok(namespace) => (Some(*namespace), None),
            Err(why) => {
                lacking.push(why.clone());
                // bestEffort: at least no TCP connect, where Landlock rules TCP.
                (None, tcp.then(Vec::new))
            }
        },
        Network::ConnectPorts(ports) => {
            if !tcp {
                lacking.push(format!(
                    "TCP port rules need Landlock ABI 4 (Linux 6.7 or later); this kernel has {}",
                    abi.map_or("no Landlock".to_owned(), |abi| format!("ABI {abi}"))
                ));
            }
            (None, tcp.then(|| ports.clone()))
        }
    };
    Plan {
        landlock: abi,
        net_namespace,
        ports,
        scope: abi.is_some_and(|abi| abi >= 6),
        helper: true,
        lacking,
    }
}

impl Plan {
    /// What this plan applies, as status shows it.
    pub fn applied(&self) -> Applied {
        Applied {
            landlock_abi: self.landlock,
            files: if self.landlock.is_some() {
                "landlock"
            } else {
                "none"
            },
            network: match (&self.net_namespace, &self.ports) {
                (Some(_), _) => "isolated",
                (None, Some(ports)) if ports.is_empty() => "tcpBlocked",
                (None, Some(_)) => "tcpPorts",
                (None, None) => "open",
            },
            scoped: self.scope,
            no_new_privs: self.helper,
            lacking: self.lacking.clone(),
        }
    }
}

// === The helper's spec ===

/// What the helper applies, handed to it as one JSON argument.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Spec {
    /// The server's executable, resolved (run with the configured command as its argv[0]).
    pub program: PathBuf,
    /// Read and execute beneath each.
    pub read: Vec<PathBuf>,
    /// Every file right beneath each.
    pub write: Vec<PathBuf>,
    /// Read and write (not execute) beneath each.
    pub devices: Vec<PathBuf>,
    /// The Landlock ABI whose file rights are handled; `None`: no Landlock.
    pub landlock: Option<u8>,
    /// TCP connects to these ports only.
    pub ports: Option<Vec<u16>>,
    /// Scope signals and abstract Unix sockets.
    pub scope: bool,
    /// A network namespace of its own.
    pub net_namespace: Option<NetNamespace>,
}

/// A stdio server's start through the helper: the command to spawn, its temp dir, and what it
/// was granted.
pub(crate) struct Launch {
    /// The helper with the spec and the server's command, env and cwd.
    pub command: tokio::process::Command,
    /// The generation's own temp dir, to drop once its process group is reaped.
    pub temp: Option<TempDir>,
    /// The read grants beyond the system's (install prefixes, cwd, `read`), for the log.
    pub extra_read: Vec<PathBuf>,
    /// The write grants (`write`, the temp dir), for the log.
    pub write: Vec<PathBuf>,
    /// What the kernel gives.
    pub applied: Applied,
}

/// Why a sandboxed server cannot start.
#[derive(Debug)]
pub(crate) enum Refused {
    /// The sandbox cannot be had and `bestEffort` is off: what is lacking.
    Lacking(String),
    /// The command is not found (as a spawn would fail).
    NotFound,
    /// Its temp dir could not be made.
    Temp(std::io::Error),
}

/// The server's stdio command, as it is to be started in its sandbox.
pub(crate) struct Server<'a> {
    pub name: &'a str,
    pub generation: u64,
    pub command: &'a str,
    pub args: &'a [String],
    pub env: &'a [(String, Secret)],
    pub cwd: Option<&'a Path>,
}

/// Plan the sandbox of `server` and build its start through `helper`. `Ok(None)`: start it
/// unsandboxed (`bestEffort` on a host with no helper, said in a warning).
pub(crate) fn launch(
    server: &Server<'_>,
    config: &SandboxConfig,
    helper: Option<&Path>,
) -> Result<Option<Launch>, Refused> {
    let support = probe();
    let plan = plan(config, &support, helper.is_some());
    if !plan.lacking.is_empty() {
        if !config.best_effort {
            return Err(Refused::Lacking(plan.lacking.join("; ")));
        }
        tracing::warn!(
            server = server.name,
            "bestEffort: the sandbox is not whole on this machine, not applied: {}",
            plan.lacking.join("; ")
        );
    }
    // No helper to run, or no sandbox on this operating system: unsandboxed, as warned.
    let Some(helper) = helper.filter(|_| cfg!(target_os = "linux")) else {
        return Ok(None);
    };
    let var = |name: &str| -> Option<OsString> {
        match server.env.iter().rev().find(|(k, _)| k == name) {
            Some((_, value)) => Some(value.expose().into()),
            None => std::env::var_os(name),
        }
    };
    let cwd = match server.cwd {
        Some(dir) => dir.to_path_buf(),
        None => std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")),
    };
    let cwd = if cwd.is_absolute() {
        cwd
    } else {
        std::env::current_dir()
            .unwrap_or_else(|_| PathBuf::from("/"))
            .join(cwd)
    };
    let path_var = var("PATH");
    let program = grant::resolve_command(server.command, path_var.as_deref(), &cwd)
        .ok_or(Refused::NotFound)?;
    let excluded = excluded(var("HOME").map(PathBuf::from).as_deref());
    let temp = temp::make(server.name, server.generation).map_err(Refused::Temp)?;

    let mut extra_read = grant::install_prefixes(&program, path_var.as_deref(), &cwd, &excluded);
    if !grant::holds_excluded(&cwd, &excluded) {
        extra_read.push(cwd.clone());
    }
    extra_read.extend(config.read.iter().cloned());
    let mut write = config.write.clone();
    write.push(temp.path().to_path_buf());
    let mut read = grant::readable_outside(
        &excluded,
        &|dir| {
            std::fs::read_dir(dir)
                .ok()
                .map(|entries| entries.flatten().map(|e| e.file_name()).collect())
        },
        &|path| std::fs::canonicalize(path).ok(),
    );
    read.extend(extra_read.iter().cloned());
    let spec = Spec {
        program,
        read,
        write: write.clone(),
        devices: DEVICES.iter().map(PathBuf::from).collect(),
        landlock: plan.landlock,
        ports: plan.ports.clone(),
        scope: plan.scope,
        net_namespace: plan.net_namespace,
    };
    let spec = serde_json::to_string(&spec)
        .map_err(|e| Refused::Lacking(format!("the helper's spec could not be written: {e}")))?;
    let mut command = tokio::process::Command::new(helper);
    command
        .arg(SANDBOX_ARG)
        .arg(spec)
        .arg("--")
        .arg(server.command)
        .args(server.args);
    for (key, value) in server.env {
        command.env(key, value.expose());
    }
    for key in ["TMPDIR", "TMP", "TEMP"] {
        command.env(key, temp.path());
    }
    command.current_dir(&cwd);
    Ok(Some(Launch {
        command,
        temp: Some(temp),
        extra_read,
        write,
        applied: plan.applied(),
    }))
}

/// What no sandboxed server may read, but for its own grants: the home directories (`/home`,
/// `/root`, `home` wherever it is, each also as its links resolve) and the system temp dir
/// (other servers' temp dirs, other programs' files).
pub fn excluded(home: Option<&Path>) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = vec!["/home".into(), "/root".into(), "/tmp".into()];
    paths.push(std::env::temp_dir());
    paths.push(temp::root());
    if let Some(home) = home.filter(|h| h.is_absolute()) {
        paths.push(home.to_path_buf());
    }
    let real: Vec<PathBuf> = paths
        .iter()
        .filter_map(|p| std::fs::canonicalize(p).ok())
        .collect();
    paths.extend(real);
    let mut paths: Vec<PathBuf> = paths.iter().map(|p| grant::normal(p)).collect();
    paths.sort();
    paths.dedup();
    paths.retain(|p| p != Path::new("/"));
    paths
}

#[cfg(test)]
mod tests {
    use super::*;

    fn support(landlock: Option<u8>, namespace: bool) -> Support {
        Support {
            landlock,
            landlock_missing: landlock.is_none().then(|| "no Landlock".to_owned()),
            net_namespace: if namespace {
                Ok(NetNamespace::Plain)
            } else {
                Err("no namespaces".to_owned())
            },
        }
    }

    fn sandbox(network: Network) -> SandboxConfig {
        SandboxConfig {
            read: vec![],
            write: vec![],
            network,
            best_effort: false,
        }
    }

    #[test]
    fn a_whole_kernel_gives_the_whole_sandbox() {
        let plan = plan(&sandbox(Network::None), &support(Some(7), true), true);
        assert!(plan.lacking.is_empty(), "{plan:?}");
        assert_eq!(plan.net_namespace, Some(NetNamespace::Plain));
        assert!(plan.scope);
        let applied = plan.applied();
        assert_eq!(applied.network, "isolated");
        assert_eq!(applied.files, "landlock");
        let ports = super::plan(
            &sandbox(Network::ConnectPorts(vec![443])),
            &support(Some(4), false),
            true,
        );
        assert!(ports.lacking.is_empty(), "no namespace is needed for ports");
        assert_eq!(ports.ports, Some(vec![443]));
        assert!(!ports.scope, "ABI 4 has no scopes");
        assert_eq!(ports.applied().network, "tcpPorts");
    }

    #[test]
    fn what_the_kernel_lacks_is_said_and_the_rest_still_planned() {
        let none = plan(&sandbox(Network::All), &support(None, true), true);
        assert_eq!(none.lacking, ["no Landlock for the file rules"]);
        assert_eq!(none.applied().files, "none");
        let old = plan(&sandbox(Network::None), &support(Some(2), false), true);
        assert_eq!(old.lacking.len(), 2, "{old:?}");
        assert!(old.lacking[0].contains("truncating"));
        assert_eq!(old.lacking[1], "no namespaces");
        assert_eq!(old.applied().network, "open", "ABI 2 rules no TCP");
        let blocked = plan(&sandbox(Network::None), &support(Some(5), false), true);
        assert_eq!(blocked.applied().network, "tcpBlocked");
        let ports = plan(
            &sandbox(Network::ConnectPorts(vec![1])),
            &support(Some(3), true),
            true,
        );
        assert!(ports.lacking[0].contains("ABI 4"), "{ports:?}");
        let hostless = plan(&sandbox(Network::All), &support(Some(7), true), false);
        assert!(hostless.lacking[0].contains("run_if_asked"));
        assert!(!hostless.applied().no_new_privs);
    }

    #[test]
    fn homes_and_the_temp_dir_are_excluded_never_the_root() {
        let excluded = excluded(Some(Path::new("/work/u")));
        for path in ["/home", "/root", "/tmp", "/work/u"] {
            assert!(excluded.contains(&PathBuf::from(path)), "{excluded:?}");
        }
        assert!(!excluded.contains(&PathBuf::from("/")));
        assert!(!super::excluded(Some(Path::new("/"))).contains(&PathBuf::from("/")));
    }

    #[test]
    fn the_spec_reads_back_as_itself() {
        let spec = Spec {
            program: "/usr/bin/x".into(),
            read: vec!["/usr".into()],
            write: vec!["/tmp/t".into()],
            devices: vec!["/dev/null".into()],
            landlock: Some(7),
            ports: Some(vec![443]),
            scope: true,
            net_namespace: Some(NetNamespace::User),
        };
        let text = serde_json::to_string(&spec).unwrap();
        assert_eq!(serde_json::from_str::<Spec>(&text).unwrap(), spec);
    }
}
