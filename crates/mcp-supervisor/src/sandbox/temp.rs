//! Each sandboxed generation's own temp dir (its `TMPDIR`): made (mode 0700) under a folder of
//! this user's in the system temp dir before the spawn, removed when the generation's process
//! group is reaped (the [`TempDir`] is dropped then). Folders left by a proxy that was killed at
//! once are swept at the first spawn of the next. It never removes a folder it did not make:
//! only entries named with a dead proxy's pid, under a folder that is this user's alone.

use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Once;

/// A generation's temp dir, removed (with what the server left in it) on drop.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if let Err(error) = std::fs::remove_dir_all(&self.0)
            && error.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(dir = %self.0.display(), %error, "could not remove a sandboxed server's temp dir");
        }
    }
}

/// The folder every sandboxed server's temp dir of this user goes in; hidden from every
/// sandboxed server but through its own.
pub fn root() -> PathBuf {
    let uid = nix::unistd::getuid();
    std::env::temp_dir().join(format!("mcp-supervisor-sandbox-{uid}"))
}

/// Make a new temp dir for generation `generation` of `server`.
pub fn make(server: &str, generation: u64) -> std::io::Result<TempDir> {
    let root = root();
    ensure_root(&root)?;
    static SWEEP: Once = Once::new();
    SWEEP.call_once(|| sweep(&root));
    let pid = std::process::id();
    let mut builder = std::fs::DirBuilder::new();
    builder.mode(0o700);
    for _ in 0..8 {
        let dir = root.join(format!(
            "{pid}-{server}-{generation}-{:08x}",
            fastrand::u32(..)
        ));
        match builder.create(&dir) {
            Ok(()) => return Ok(TempDir(dir)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::other("could not find a free temp dir name"))
}

/// The root exists, is a real directory (not a link), is ours, and only ours can enter it.
fn ensure_root(root: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.mode(0o700);
    match builder.create(root) {
        Ok(()) => return Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let meta = std::fs::symlink_metadata(root)?;
    let uid = nix::unistd::getuid().as_raw();
    if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o077 != 0 {
        return Err(std::io::Error::other(format!(
            "{} is not a directory of this user's alone (mode 0700); remove it",
            root.display()
        )));
    }
    Ok(())
}

/// Remove the temp dirs of proxies that are gone (their pid leads each name).
fn sweep(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.split('-').next())
            .and_then(|p| p.parse::<i32>().ok())
            .filter(|p| *p > 1)
        else {
            continue;
        };
        let gone = matches!(
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None),
            Err(nix::errno::Errno::ESRCH)
        );
        if gone {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn a_temp_dir_is_private_new_each_time_and_gone_when_dropped() {
        let a = make("t", 1).expect("made");
        let b = make("t", 1).expect("made");
        assert_ne!(a.path(), b.path());
        let mode = std::fs::metadata(a.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        std::fs::write(a.path().join("left"), "x").unwrap();
        let path = a.path().to_path_buf();
        drop(a);
        assert!(!path.exists());
        assert!(b.path().exists());
    }
}
