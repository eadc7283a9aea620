//! The sandbox helper: the proxy's own binary re-executed with [`super::SANDBOX_ARG`], a fresh
//! single-threaded process that confines itself as its [`Spec`] says and then executes the
//! server, so that the sandbox is in place before the server's first instruction and is
//! inherited by every process the server starts. In order: a network namespace (with a user
//! namespace when not root), `PR_SET_NO_NEW_PRIVS`, the Landlock ruleset (files, TCP ports,
//! scopes), `exec`. It decides nothing: the proxy planned it all. On any failure before the
//! exec it writes one line starting `sandbox: ` to stderr and exits with [`super::EXIT_CODE`];
//! it never runs the server half-confined.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, NetPort, PathBeneath,
    PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope,
};
use nix::sched::{CloneFlags, unshare};

use super::Spec;
use super::probe::NetNamespace;

/// Run the helper on the arguments after [`super::SANDBOX_ARG`]: `SPEC -- COMMAND ARGS...`.
pub(super) fn run(args: Vec<OsString>) -> ExitCode {
    match confine_and_exec(args) {
        Ok(never) => match never {},
        Err(why) => {
            eprintln!("sandbox: {why}");
            ExitCode::from(super::EXIT_CODE)
        }
    }
}

enum Never {}

fn confine_and_exec(args: Vec<OsString>) -> Result<Never, String> {
    let mut args = args.into_iter();
    let spec = args
        .next()
        .and_then(|s| s.into_string().ok())
        .ok_or("the helper was started without its spec")?;
    let spec: Spec = serde_json::from_str(&spec).map_err(|e| {
        format!(
            "the helper's spec does not parse ({e}): is the helper binary the proxy's own version?"
        )
    })?;
    if args.next().is_none_or(|sep| sep != "--") {
        return Err("the helper was started without `--` before the command".into());
    }
    let command = args
        .next()
        .ok_or("the helper was started without a command")?;
    let rest: Vec<OsString> = args.collect();

    if let Some(namespace) = spec.net_namespace {
        enter_net_namespace(namespace)?;
    }
    nix::sys::prctl::set_no_new_privs()
        .map_err(|e| format!("prctl(PR_SET_NO_NEW_PRIVS) failed: {e}"))?;
    if let Some(abi) = spec.landlock {
        restrict(&spec, abi)?;
    }
    let error = std::process::Command::new(&spec.program)
        .arg0(&command)
        .args(rest)
        .exec();
    Err(format!(
        "could not run {} ({}): {error}",
        command.to_string_lossy(),
        spec.program.display()
    ))
}

/// A network namespace of its own: nothing reachable, loopback included (its `lo` is down).
fn enter_net_namespace(namespace: NetNamespace) -> Result<(), String> {
    match namespace {
        NetNamespace::Plain => unshare(CloneFlags::CLONE_NEWNET).map_err(|e| {
            format!("unshare(CLONE_NEWNET) failed: {e}; the kernel or a container refuses network namespaces (give \"network\": \"all\" or a port list, or \"bestEffort\": true)")
        }),
        NetNamespace::User => {
            let uid = nix::unistd::getuid();
            let gid = nix::unistd::getgid();
            unshare(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNET).map_err(|e| {
                format!("unshare(CLONE_NEWUSER | CLONE_NEWNET) failed: {e}; this kernel does not let users make namespaces (give \"network\": \"all\" or a port list, or \"bestEffort\": true)")
            })?;
            // The same uid and gid inside, so that files keep their owners; no setgroups.
            for (file, text) in [
                ("/proc/self/setgroups", "deny".to_owned()),
                ("/proc/self/uid_map", format!("{uid} {uid} 1")),
                ("/proc/self/gid_map", format!("{gid} {gid} 1")),
            ] {
                std::fs::write(file, text)
                    .map_err(|e| format!("writing {file} in the new user namespace failed: {e}"))?;
            }
            Ok(())
        }
    }
}

/// Apply the Landlock ruleset of `spec` at ABI `abi`, every right a hard requirement.
fn restrict(spec: &Spec, abi: u8) -> Result<(), String> {
    let abi = ABI::from(i32::from(abi));
    let fail = |what: &str, e: &dyn std::fmt::Display| format!("Landlock: {what} failed: {e}");
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(abi))
        .map_err(|e| fail("handling the file rights", &e))?;
    if spec.ports.is_some() {
        ruleset = ruleset
            .handle_access(AccessNet::ConnectTcp)
            .map_err(|e| fail("handling TCP connects (ABI 4)", &e))?;
    }
    if spec.scope {
        ruleset = ruleset
            .scope(Scope::from_all(abi))
            .map_err(|e| fail("scoping signals and abstract sockets (ABI 6)", &e))?;
    }
    let mut created = ruleset
        .create()
        .map_err(|e| fail("creating the ruleset", &e))?;
    let read = AccessFs::from_read(abi);
    let all = AccessFs::from_all(abi);
    let device = AccessFs::from_file(abi) & !AccessFs::Execute;
    let grants = spec
        .read
        .iter()
        .map(|p| (p, read))
        .chain(spec.write.iter().map(|p| (p, all)))
        .chain(spec.devices.iter().map(|p| (p, device | read)));
    for (path, access) in grants {
        let Some((fd, access)) = open(path, access, abi) else {
            continue; // gone since the plan: nothing there to grant
        };
        created = created
            .add_rule(PathBeneath::new(fd, access))
            .map_err(|e| fail(&format!("granting {}", path.display()), &e))?;
    }
    for port in spec.ports.iter().flatten() {
        created = created
            .add_rule(NetPort::new(*port, AccessNet::ConnectTcp))
            .map_err(|e| fail(&format!("granting TCP port {port}"), &e))?;
    }
    let status = created
        .restrict_self()
        .map_err(|e| fail("restricting this process", &e))?;
    if status.ruleset != RulesetStatus::FullyEnforced {
        return Err(format!(
            "Landlock: the ruleset is {:?}, not fully enforced",
            status.ruleset
        ));
    }
    Ok(())
}

/// `path` opened for a rule, with the rights a file can hold when it is not a directory.
fn open(path: &Path, access: BitFlags<AccessFs>, abi: ABI) -> Option<(PathFd, BitFlags<AccessFs>)> {
    let dir = std::fs::metadata(path).ok()?.is_dir();
    let access = if dir {
        access
    } else {
        access & AccessFs::from_file(abi)
    };
    Some((PathFd::new(PathBuf::from(path)).ok()?, access))
}
