//! What a sandboxed server may read, as paths: the whole filesystem minus the excluded subtrees
//! (the home directories), granted as the siblings along each path down to them; and the install
//! prefix a command resolves to (a venv, a Node or Python install), found through PATH, symlinks
//! and a script's `#!` interpreter. Pure but for the lister and resolver handed in (and, for
//! prefixes, `stat` and the first line of a script): it never grants a path that holds an
//! excluded one.

use std::ffi::{OsStr, OsString};
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

/// How deep a chain of `#!` interpreters is followed (a pyenv shim runs a script runs python).
const SHEBANG_DEPTH: usize = 3;

/// `path` without `.` components and trailing slashes (`..` is kept: it is not resolved here).
pub fn normal(path: &Path) -> PathBuf {
    path.components()
        .filter(|c| !matches!(c, Component::CurDir))
        .collect()
}

/// Whether granting `path` would grant some of `excluded`: it is one of them or holds one.
pub fn holds_excluded(path: &Path, excluded: &[PathBuf]) -> bool {
    excluded.iter().any(|e| e.starts_with(path))
}

/// Whether `path` lies in one of `excluded` (or is one).
pub fn inside_excluded(path: &Path, excluded: &[PathBuf]) -> bool {
    excluded.iter().any(|e| path.starts_with(e))
}

/// The paths whose subtrees together are the whole filesystem minus `excluded`: every entry of
/// `/` that is neither excluded nor on the way to an excluded path, and for those on the way,
/// their own entries likewise. `list` gives a directory's entry names (`None`: it cannot be
/// listed, and nothing under it is granted); `resolve` gives where an entry really is (its
/// symlinks followed; `None`: it cannot be resolved), and an entry that resolves into or above
/// an excluded path is left out, so that a link cannot lead back into a home.
///
/// With HOME=/work/u: every entry of `/` but `/home`, `/root` and `/work`, and every entry of
/// `/work` but `/work/u`.
pub fn readable_outside(
    excluded: &[PathBuf],
    list: &dyn Fn(&Path) -> Option<Vec<OsString>>,
    resolve: &dyn Fn(&Path) -> Option<PathBuf>,
) -> Vec<PathBuf> {
    let excluded: Vec<PathBuf> = excluded
        .iter()
        .filter(|e| e.is_absolute())
        .map(|e| normal(e))
        .collect();
    let mut granted = Vec::new();
    if excluded.iter().any(|e| e == Path::new("/")) {
        return granted;
    }
    walk(Path::new("/"), &excluded, list, resolve, &mut granted);
    granted
}

fn walk(
    dir: &Path,
    excluded: &[PathBuf],
    list: &dyn Fn(&Path) -> Option<Vec<OsString>>,
    resolve: &dyn Fn(&Path) -> Option<PathBuf>,
    granted: &mut Vec<PathBuf>,
) {
    let Some(mut names) = list(dir) else { return };
    names.sort();
    for name in names {
        let path = dir.join(&name);
        if excluded.contains(&path) {
            continue;
        }
        if holds_excluded(&path, excluded) {
            walk(&path, excluded, list, resolve, granted);
            continue;
        }
        let Some(real) = resolve(&path) else { continue };
        if holds_excluded(&real, excluded) || inside_excluded(&real, excluded) {
            continue;
        }
        granted.push(path);
    }
}

/// Where `command` runs from: an absolute path, relative to `cwd` when it holds a `/`, or the
/// first executable file of that name in `path_var`'s directories (as execvp looks).
pub fn resolve_command(command: &str, path_var: Option<&OsStr>, cwd: &Path) -> Option<PathBuf> {
    if command.contains('/') {
        let path = cwd.join(command);
        return is_executable(&path).then(|| normal(&path));
    }
    let dirs = path_var.unwrap_or(OsStr::new("/usr/local/bin:/usr/bin:/bin"));
    std::env::split_paths(dirs)
        .filter(|dir| !dir.as_os_str().is_empty())
        .map(|dir| cwd.join(dir).join(command))
        .find(|path| is_executable(path))
        .map(|path| normal(&path))
}

fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The install prefix of an executable: for one in a `bin` (or `.bin`) directory the directory
/// above it (a venv, nvm's node, a pyenv version, node_modules), else its own directory.
pub fn prefix_of(executable: &Path) -> Option<PathBuf> {
    let dir = executable.parent()?;
    match dir.file_name().and_then(OsStr::to_str) {
        Some("bin" | ".bin") => dir.parent().map(Path::to_path_buf),
        _ => Some(dir.to_path_buf()),
    }
}

/// Every install prefix `executable` needs: its own (as found and with its symlinks followed),
/// and those of the `#!` interpreter of a script (through `env`, found in `path_var`), followed
/// the same way. A prefix that would hold an excluded path (`/bin/sh`'s is `/`, `~/bin/x`'s is
/// the home) falls back to the executable's own directory, or the file alone.
pub fn install_prefixes(
    executable: &Path,
    path_var: Option<&OsStr>,
    cwd: &Path,
    excluded: &[PathBuf],
) -> Vec<PathBuf> {
    let mut prefixes = Vec::new();
    let mut next = Some(executable.to_path_buf());
    for _ in 0..SHEBANG_DEPTH {
        let Some(program) = next.take() else { break };
        let real = std::fs::canonicalize(&program).ok();
        for path in std::iter::once(&program).chain(real.as_ref()) {
            let prefix = [prefix_of(path), path.parent().map(Path::to_path_buf)]
                .into_iter()
                .flatten()
                .find(|p| !holds_excluded(p, excluded))
                .unwrap_or_else(|| path.clone());
            if !prefixes.contains(&prefix) {
                prefixes.push(prefix);
            }
        }
        next = interpreter(real.as_deref().unwrap_or(&program), path_var, cwd);
    }
    prefixes
}

/// The interpreter a script's `#!` line names (`#!/usr/bin/env node` → `node` as found in
/// `path_var`), or `None` for anything that is not a script.
fn interpreter(script: &Path, path_var: Option<&OsStr>, cwd: &Path) -> Option<PathBuf> {
    use std::io::Read;
    let mut head = [0u8; 256];
    let n = std::fs::File::open(script).ok()?.read(&mut head).ok()?;
    let line = head.get(..n)?.strip_prefix(b"#!")?;
    let line = line.split(|b| *b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let mut words = line.split_whitespace();
    let first = words.next()?;
    if Path::new(first).file_name() == Some(OsStr::new("env")) {
        let program = words.find(|w| !w.starts_with('-') && !w.contains('='))?;
        return resolve_command(program, path_var, cwd);
    }
    Some(PathBuf::from(first))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// A fake tree: directory → entries.
    fn tree(dirs: &[(&str, &[&str])]) -> BTreeMap<PathBuf, Vec<OsString>> {
        dirs.iter()
            .map(|(dir, names)| {
                (
                    PathBuf::from(dir),
                    names.iter().map(OsString::from).collect(),
                )
            })
            .collect()
    }

    fn paths(list: &[&str]) -> Vec<PathBuf> {
        list.iter().map(PathBuf::from).collect()
    }

    #[test]
    fn the_siblings_along_the_way_to_each_home_are_granted() {
        let fs = tree(&[
            ("/", &["bin", "etc", "home", "root", "tmp", "usr", "work"]),
            ("/work", &["main", "u", "shared"]),
            ("/home", &["alice"]),
        ]);
        let list = |dir: &Path| fs.get(dir).cloned();
        let same = |p: &Path| Some(p.to_path_buf());
        let excluded = paths(&["/home", "/root", "/work/u"]);
        assert_eq!(
            readable_outside(&excluded, &list, &same),
            paths(&["/bin", "/etc", "/tmp", "/usr", "/work/main", "/work/shared"])
        );
    }

    #[test]
    fn a_deeper_exclusion_and_one_that_does_not_exist() {
        let fs = tree(&[
            ("/", &["a", "b"]),
            ("/a", &["x", "y"]),
            ("/a/x", &["1", "2"]),
        ]);
        let list = |dir: &Path| fs.get(dir).cloned();
        let same = |p: &Path| Some(p.to_path_buf());
        let excluded = paths(&["/a/x/2", "/nope/deep", "/a/x/./"]);
        // /a/x itself is excluded (written with a `.`), which also covers /a/x/2.
        assert_eq!(
            readable_outside(&excluded, &list, &same),
            paths(&["/a/y", "/b"])
        );
    }

    #[test]
    fn a_link_into_or_above_a_home_is_not_granted_and_an_unlistable_dir_grants_nothing() {
        let fs = tree(&[("/", &["data", "up", "usr", "home", "locked"])]);
        let list = |dir: &Path| fs.get(dir).cloned();
        let links: BTreeMap<PathBuf, PathBuf> = [("/data", "/home/u/data"), ("/up", "/")]
            .into_iter()
            .map(|(a, b)| (PathBuf::from(a), PathBuf::from(b)))
            .collect();
        let resolve = |p: &Path| Some(links.get(p).cloned().unwrap_or_else(|| p.to_path_buf()));
        let excluded = paths(&["/home", "/locked/u"]);
        assert_eq!(
            readable_outside(&excluded, &list, &resolve),
            paths(&["/usr"])
        );
        assert!(readable_outside(&paths(&["/"]), &list, &resolve).is_empty());
    }

    #[test]
    fn a_prefix_is_the_dir_above_bin_else_the_own_dir() {
        assert_eq!(
            prefix_of(Path::new("/h/venv/bin/python")),
            Some(PathBuf::from("/h/venv"))
        );
        assert_eq!(
            prefix_of(Path::new("/p/node_modules/.bin/tsx")),
            Some(PathBuf::from("/p/node_modules"))
        );
        assert_eq!(
            prefix_of(Path::new("/opt/tool/run")),
            Some(PathBuf::from("/opt/tool"))
        );
        assert_eq!(prefix_of(Path::new("/bin/sh")), Some(PathBuf::from("/")));
    }

    /// A temp tree like a venv and an nvm node under a home, a system python and node.
    struct Tree(PathBuf);

    impl Tree {
        fn new(name: &str) -> Self {
            let root = std::env::temp_dir()
                .join(format!("mcp-sandbox-grant-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&root);
            std::fs::create_dir_all(&root).unwrap();
            Self(root)
        }

        fn file(&self, rel: &str, text: &str) -> PathBuf {
            let path = self.0.join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, text).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
            path
        }

        fn link(&self, rel: &str, target: &Path) -> PathBuf {
            let path = self.0.join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::os::unix::fs::symlink(target, &path).unwrap();
            path
        }
    }

    impl Drop for Tree {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn a_console_script_needs_its_venv_and_the_python_its_venv_links_to() {
        let t = Tree::new("venv");
        let python = t.file("usr/bin/python3.13", "\x7fELF");
        let home = t.0.join("home/u");
        t.link("home/u/venv/bin/python", &python);
        let script = t.file(
            "home/u/venv/bin/mcp-server-git",
            &format!("#!{}\nimport sys\n", home.join("venv/bin/python").display()),
        );
        let path_var = std::env::join_paths([home.join("venv/bin"), t.0.join("usr/bin")]).unwrap();
        let found = resolve_command("mcp-server-git", Some(&path_var), Path::new("/"));
        assert_eq!(found.as_deref(), Some(script.as_path()));
        let prefixes = install_prefixes(
            &script,
            Some(&path_var),
            Path::new("/"),
            std::slice::from_ref(&home),
        );
        let real = |p: PathBuf| std::fs::canonicalize(p).unwrap();
        assert!(prefixes.contains(&home.join("venv")), "{prefixes:?}");
        assert!(prefixes.contains(&real(t.0.join("usr"))), "{prefixes:?}");
    }

    #[test]
    fn npx_is_a_link_into_nodes_lib_and_runs_node_through_env() {
        let t = Tree::new("npx");
        let node_home = "home/u/.nvm/versions/node/v22";
        let cli = t.file(
            &format!("{node_home}/lib/node_modules/npm/bin/npx-cli.js"),
            "#!/usr/bin/env node\n",
        );
        t.file(&format!("{node_home}/bin/node"), "\x7fELF");
        let npx = t.link(&format!("{node_home}/bin/npx"), &cli);
        let path_var = std::env::join_paths([t.0.join(node_home).join("bin")]).unwrap();
        let found = resolve_command("npx", Some(&path_var), Path::new("/")).expect("found");
        assert_eq!(found, npx);
        let home = t.0.join("home/u");
        let prefixes = install_prefixes(&found, Some(&path_var), Path::new("/"), &[home]);
        let real_node_home = std::fs::canonicalize(t.0.join(node_home)).unwrap();
        assert!(prefixes.contains(&t.0.join(node_home)), "{prefixes:?}");
        assert!(
            prefixes.contains(&real_node_home.join("lib/node_modules/npm")),
            "{prefixes:?}"
        );
    }

    #[test]
    fn a_prefix_that_would_hold_a_home_falls_back_to_the_own_dir() {
        let t = Tree::new("homebin");
        let home = t.0.join("home/u");
        let tool = t.file("home/u/bin/tool", "\x7fELF");
        let prefixes = install_prefixes(&tool, None, Path::new("/"), std::slice::from_ref(&home));
        assert_eq!(prefixes.first(), Some(&home.join("bin")));
        assert!(
            prefixes
                .iter()
                .all(|p| !holds_excluded(p, std::slice::from_ref(&home)))
        );
    }

    #[test]
    fn commands_resolve_like_execvp() {
        let t = Tree::new("resolve");
        t.file("a/srv", "x");
        let plain = t.0.join("b/srv");
        std::fs::create_dir_all(plain.parent().unwrap()).unwrap();
        std::fs::write(&plain, "not executable").unwrap();
        let path_var = std::env::join_paths([t.0.join("b"), t.0.join("a")]).unwrap();
        assert_eq!(
            resolve_command("srv", Some(&path_var), Path::new("/")),
            Some(t.0.join("a/srv")),
            "a file without the x bit is passed over"
        );
        assert_eq!(
            resolve_command("./a/srv", None, &t.0),
            Some(t.0.join("a/srv"))
        );
        assert_eq!(
            resolve_command("nope", Some(&path_var), Path::new("/")),
            None
        );
    }
}
