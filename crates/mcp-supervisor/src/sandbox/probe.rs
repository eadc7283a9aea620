//! What this kernel offers a sandbox, asked without side effects: the Landlock ABI (by asking
//! the `landlock` crate for each ABI's rights as a hard requirement, which queries the version
//! and creates nothing), and whether a network namespace can be made (root: CAP_SYS_ADMIN;
//! anyone else: a user namespace, as the kernel's switches allow). It never creates a
//! namespace or a ruleset: an assumption it makes (no seccomp filter or container refusing
//! `unshare`) is found false only by the helper, which then says so and exits.

/// The environment variable that, set to `none`, makes [`probe`] report no Landlock: for tests
/// of what happens on a kernel without it. Not for production use.
pub const PROBE_ENV: &str = "MCP_SUPERVISOR_SANDBOX_PROBE";

/// How a sandboxed server gets a network namespace of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum NetNamespace {
    /// `unshare(CLONE_NEWNET)` alone: the proxy runs as root.
    Plain,
    /// `unshare(CLONE_NEWUSER | CLONE_NEWNET)` with the same uid and gid mapped.
    User,
}

/// What the kernel offers, from [`probe`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Support {
    /// The best Landlock ABI (1 to 9); `None`: no Landlock.
    pub landlock: Option<u8>,
    /// Why there is no Landlock, when there is none.
    pub landlock_missing: Option<String>,
    /// How a network namespace is made, or why none can be.
    pub net_namespace: Result<NetNamespace, String>,
}

/// What the kernel offers now. A few small reads and syscalls; no side effect.
pub fn probe() -> Support {
    let (landlock, landlock_missing) = if std::env::var_os(PROBE_ENV).is_some_and(|v| v == "none") {
        (
            None,
            Some(format!(
                "no Landlock (turned off for tests by {PROBE_ENV}=none)"
            )),
        )
    } else {
        match landlock_abi() {
            Some(abi) => (Some(abi), None),
            None => (None, Some(no_landlock())),
        }
    };
    Support {
        landlock,
        landlock_missing,
        net_namespace: net_namespace(),
    }
}

/// No Landlock but on Linux.
#[cfg(not(target_os = "linux"))]
fn landlock_abi() -> Option<u8> {
    None
}

/// The best Landlock ABI this kernel (and this build of the crate) gives; the ABIs add to each
/// other, so the first one refused ends the search.
#[cfg(target_os = "linux")]
fn landlock_abi() -> Option<u8> {
    use landlock::{
        ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, RestrictSelf, RestrictSelfAttr,
        Ruleset, RulesetAttr, Scope,
    };
    let hard = || Ruleset::default().set_compatibility(CompatLevel::HardRequirement);
    let restrict = || RestrictSelf::default().set_compatibility(CompatLevel::HardRequirement);
    let checks: [(u8, &dyn Fn() -> bool); 9] = [
        (1, &|| {
            hard().handle_access(AccessFs::from_all(ABI::V1)).is_ok()
        }),
        (2, &|| {
            hard().handle_access(AccessFs::from_all(ABI::V2)).is_ok()
        }),
        (3, &|| {
            hard().handle_access(AccessFs::from_all(ABI::V3)).is_ok()
        }),
        (4, &|| {
            hard().handle_access(AccessNet::from_all(ABI::V4)).is_ok()
        }),
        (5, &|| {
            hard().handle_access(AccessFs::from_all(ABI::V5)).is_ok()
        }),
        (6, &|| hard().scope(Scope::from_all(ABI::V6)).is_ok()),
        (7, &|| restrict().log_subdomains(false).is_ok()),
        (8, &|| restrict().all_threads(true).is_ok()),
        (9, &|| {
            hard().handle_access(AccessFs::from_all(ABI::V9)).is_ok()
        }),
    ];
    let mut best = None;
    for (abi, supported) in checks {
        if !supported() {
            break;
        }
        best = Some(abi);
    }
    best
}

/// Why there is no Landlock, and what to do.
fn no_landlock() -> String {
    if !cfg!(target_os = "linux") {
        return "no Landlock (there is no sandbox on this operating system: Linux only)".to_owned();
    }
    let lsm = std::fs::read_to_string("/sys/kernel/security/lsm").unwrap_or_default();
    if lsm.is_empty() || lsm.split(',').any(|m| m.trim() == "landlock") {
        "no Landlock (it needs Linux 5.13 or later built with CONFIG_SECURITY_LANDLOCK)".to_owned()
    } else {
        format!(
            "no Landlock: the kernel has it off (its LSMs are {}; add landlock to the lsm= boot parameter)",
            lsm.trim()
        )
    }
}

/// How a network namespace can be made here, or why not.
fn net_namespace() -> Result<NetNamespace, String> {
    if !std::path::Path::new("/proc/self/ns/net").exists() {
        return Err("no network namespaces (this kernel has none, or /proc is not mounted)".into());
    }
    if nix::unistd::geteuid().is_root() {
        return if has_cap_sys_admin() {
            Ok(NetNamespace::Plain)
        } else {
            Err("no network namespace: running as root without CAP_SYS_ADMIN (a container?)".into())
        };
    }
    let read = |path: &str| {
        std::fs::read_to_string(path)
            .ok()
            .map(|text| text.trim().to_owned())
    };
    if read("/proc/sys/user/max_user_namespaces").is_none_or(|n| n == "0") {
        return Err(
            "no user namespaces (/proc/sys/user/max_user_namespaces is 0 or missing), so no network namespace without root".into(),
        );
    }
    if read("/proc/sys/kernel/unprivileged_userns_clone").is_some_and(|v| v == "0") {
        return Err(
            "no user namespaces for users (/proc/sys/kernel/unprivileged_userns_clone is 0), so no network namespace without root".into(),
        );
    }
    if read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").is_some_and(|v| v == "1") {
        return Err(
            "AppArmor restricts user namespaces (/proc/sys/kernel/apparmor_restrict_unprivileged_userns is 1), so no network namespace without root".into(),
        );
    }
    Ok(NetNamespace::User)
}

/// Whether this process holds CAP_SYS_ADMIN (bit 21 of `CapEff` in `/proc/self/status`).
fn has_cap_sys_admin() -> bool {
    const CAP_SYS_ADMIN: u32 = 21;
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        })
        .is_some_and(|caps| caps & (1 << CAP_SYS_ADMIN) != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_is_stable_and_an_abi_is_in_range() {
        let first = probe();
        assert_eq!(first, probe(), "no side effect changes the answer");
        if let Some(abi) = first.landlock {
            assert!((1..=9).contains(&abi));
            assert!(first.landlock_missing.is_none());
        } else {
            assert!(first.landlock_missing.is_some());
        }
    }
}
