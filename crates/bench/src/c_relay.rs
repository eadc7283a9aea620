//! The C pipe relay (`crates/bench/c/pipe_relay.c`): the floor of one extra stdio hop with
//! nothing in it but `poll()` and 64 KiB `read`/`write`, the floor the steering team measures
//! against. `ts-peers` builds it at run time with the system's C compiler (`cc -O2`, or `$CC`)
//! into the directory of this binary (`target/release/pipe-relay-c`), from the source compiled
//! into this binary, so the relay always matches the bench that runs it.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

/// The relay's source, as in the repository.
const SOURCE: &str = include_str!("../c/pipe_relay.c");
/// The name of the built relay, beside this binary.
const NAME: &str = "pipe-relay-c";

/// The C compiler to use: `$CC` if set and not empty, else `cc`.
fn compiler() -> String {
    std::env::var("CC")
        .ok()
        .filter(|cc| !cc.trim().is_empty())
        .unwrap_or_else(|| "cc".to_string())
}

/// Build the relay beside this binary (written under a temporary name, then renamed, so a run
/// never starts a half-written file) and return its path. `scratch` holds the source for the
/// compiler.
pub fn build(scratch: &Path) -> Result<PathBuf> {
    let here = std::env::current_exe().context("cannot tell where this binary is")?;
    let dir = here.parent().context("this binary has no directory")?;
    let out = dir.join(NAME);
    let partial = dir.join(format!("{NAME}.{}.partial", std::process::id()));
    let source = scratch.join("pipe_relay.c");
    std::fs::write(&source, SOURCE)
        .with_context(|| format!("cannot write {}", source.display()))?;
    let cc = compiler();
    let built = Command::new(&cc)
        .arg("-O2")
        .arg("-o")
        .arg(&partial)
        .arg(&source)
        .output();
    let built = match built {
        Ok(built) => built,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
            "the target pipe-relay-c needs a C compiler: `{cc}` was not found (install one, e.g. \
             `apt-get install gcc`, set CC, pass --c-relay PATH to a built relay, or leave \
             pipe-relay-c out of --targets)"
        ),
        Err(e) => bail!("cannot run the C compiler `{cc}` to build pipe-relay-c: {e}"),
    };
    if !built.status.success() {
        let _ = std::fs::remove_file(&partial);
        bail!(
            "`{cc} -O2 -o {} {}` failed ({}):\n{}",
            out.display(),
            source.display(),
            built.status,
            String::from_utf8_lossy(&built.stderr).trim_end()
        );
    }
    std::fs::rename(&partial, &out)
        .with_context(|| format!("cannot move {} to {}", partial.display(), out.display()))?;
    Ok(out)
}

/// `explicit` if given (it must be a file), else the relay built by [`build`].
pub fn resolve(explicit: Option<&Path>, scratch: &Path) -> Result<PathBuf> {
    match explicit {
        Some(path) if path.is_file() => Ok(path.to_path_buf()),
        Some(path) => bail!("--c-relay {} is not a file", path.display()),
        None => build(scratch),
    }
}
