//! `mcp-supervisor adopt`: finds a host's MCP config, rewrites every server entry to run through
//! `mcp-supervisor wrap` (or back, with `--undo`), and prints the diff or writes it. It must never
//! write a file it could not parse, and never write anything when a `--only` name is not found.
//!
//! The rewrite of one entry is in `entry`, the file syntaxes in `json` and `toml`, the hosts and
//! their paths in `formats`, and the safe write in `write`.

mod entry;
mod formats;
mod json;
mod toml;
mod write;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

pub use formats::Format;

use entry::{Binary, EntryMap, Keys, Outcome};
use formats::Syntax;

/// A line on stdout; a closed stdout (`adopt | head`) is not an error worth a panic.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout().lock(), $($arg)*);
    }};
}

/// Exit code for bad usage or a config that does not parse.
const USAGE: u8 = 2;

/// The rewrite asked for, applied to each wanted entry.
pub struct Op<'a> {
    undo: bool,
    binary: Binary<'a>,
    only: &'a [String],
}

impl Op<'_> {
    fn wants(&self, name: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|n| n == name)
    }

    fn apply(&self, map: &mut dyn EntryMap, keys: &Keys) -> Outcome {
        if self.undo {
            entry::undo(map, keys, &self.binary)
        } else {
            entry::adopt(map, keys, &self.binary)
        }
    }
}

/// What happened to one server of a file.
pub struct Line {
    label: String,
    name: String,
    outcome: Outcome,
    note: Option<String>,
}

impl Line {
    fn skipped(label: String, name: String, reason: String) -> Self {
        Line {
            label,
            name,
            outcome: Outcome::Skipped(reason),
            note: None,
        }
    }
}

/// A file's new text and what happened to each server.
pub struct Plan {
    text: String,
    lines: Vec<Line>,
}

/// The flags of `adopt`.
#[derive(Debug, clap::Args)]
pub struct AdoptArgs {
    /// The config file to rewrite (default: every usual host config that exists).
    #[arg(long, value_name = "PATH")]
    pub file: Option<PathBuf>,
    /// Which host the file belongs to, when its name does not say.
    #[arg(long, value_enum, value_name = "NAME")]
    pub format: Option<Format>,
    /// Save the change (default: print the diff only).
    #[arg(long)]
    pub write: bool,
    /// Restore the original entries from the wrapped ones.
    #[arg(long)]
    pub undo: bool,
    /// Only these servers (comma-separated names).
    #[arg(long, value_name = "NAME,...", value_delimiter = ',')]
    pub only: Vec<String>,
    /// The command written into each entry (default: this program's absolute path).
    #[arg(long, value_name = "PATH")]
    pub binary: Option<PathBuf>,
}

/// Adopt (or undo) as `args` say. `command_line` is clap's definition of ours: which of `wrap`'s
/// flags take a value, to read a wrapped entry back on undo.
pub fn run(args: AdoptArgs, command_line: &clap::Command) -> ExitCode {
    let binary = match binary_path(args.binary.as_deref()) {
        Ok(binary) => binary,
        Err(message) => {
            eprintln!("mcp-supervisor adopt: {message}");
            return ExitCode::from(USAGE);
        }
    };
    let files = match files(&args) {
        Ok(files) => files,
        Err(message) => {
            eprintln!("mcp-supervisor adopt: {message}");
            return ExitCode::from(USAGE);
        }
    };
    let op = Op {
        undo: args.undo,
        binary: Binary {
            path: &binary,
            command_line,
        },
        only: &args.only,
    };
    let mut code = 0u8;
    let mut planned = Vec::new();
    for (path, format) in files {
        let snapshot = match write::read(&path) {
            Ok(snapshot) => snapshot,
            Err(message) => {
                eprintln!("mcp-supervisor adopt: {message}");
                code = code.max(1);
                continue;
            }
        };
        let format = match format.or_else(|| Format::detect(&path, &snapshot.text)) {
            Some(format) => format,
            None => {
                eprintln!(
                    "mcp-supervisor adopt: cannot tell which host {} belongs to: it has none of \
                     mcpServers, servers, context_servers; pass --format ({})",
                    path.display(),
                    format_names()
                );
                code = USAGE;
                continue;
            }
        };
        let plan = match format.syntax() {
            Syntax::Json(layout) => json::plan(&snapshot.text, layout, &op),
            Syntax::Toml => toml::plan(&snapshot.text, &op),
        };
        match plan {
            Ok(plan) => planned.push((path, format, snapshot, plan)),
            Err(message) => {
                eprintln!(
                    "mcp-supervisor adopt: {}: {message}; fix it and run adopt again (nothing was \
                     written)",
                    path.display()
                );
                code = USAGE;
            }
        }
    }
    let missing: Vec<&String> = args
        .only
        .iter()
        .filter(|name| {
            !planned
                .iter()
                .any(|(.., plan)| plan.lines.iter().any(|line| &line.name == *name))
        })
        .collect();
    if !missing.is_empty() {
        let names: Vec<&str> = missing.iter().map(|s| s.as_str()).collect();
        eprintln!(
            "mcp-supervisor adopt: --only names {}, which no config read holds; nothing was \
             written",
            names.join(", ")
        );
        return ExitCode::from(USAGE);
    }
    let mut pending = false;
    for (path, format, snapshot, plan) in planned {
        say!("{} ({}):", path.display(), format.title());
        for line in &plan.lines {
            let what = match &line.outcome {
                Outcome::Changed(what) | Outcome::Unchanged(what) => (*what).to_owned(),
                Outcome::Skipped(reason) => format!("left as is: {reason}"),
            };
            say!("  {}: {what}", line.label);
            if let Some(note) = &line.note {
                say!("    note: {note}");
            }
        }
        if plan.text == snapshot.text {
            say!("  nothing to change");
            continue;
        }
        if !args.write {
            say!("{}", diff(&path, &snapshot.text, &plan.text).trim_end());
            pending = true;
            continue;
        }
        match write::replace(&snapshot, &plan.text) {
            Ok(backup) => say!("  wrote {} (backup: {})", path.display(), backup.display()),
            Err(message) => {
                eprintln!("mcp-supervisor adopt: {message}");
                code = code.max(1);
            }
        }
    }
    if pending {
        say!(
            "Nothing written: run again with --write to save (a backup is kept beside each file)."
        );
    }
    ExitCode::from(code)
}

/// The command written into entries: `--binary`, or this program's absolute path.
fn binary_path(given: Option<&Path>) -> Result<String, String> {
    let path = match given {
        Some(path) => path.to_path_buf(),
        None => std::env::current_exe().map_err(|error| {
            format!("cannot find this program's own path ({error}); pass --binary PATH")
        })?,
    };
    path.to_str().map(str::to_owned).ok_or_else(|| {
        format!(
            "the binary path {} is not UTF-8; pass --binary PATH",
            path.display()
        )
    })
}

/// The files to rewrite: `--file`, or every usual path of the hosts (or of `--format`) that exists.
fn files(args: &AdoptArgs) -> Result<Vec<(PathBuf, Option<Format>)>, String> {
    if let Some(file) = &args.file {
        return Ok(vec![(file.clone(), args.format)]);
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .ok_or("HOME is not set, so the hosts' configs cannot be found; pass --file PATH")?;
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let formats: Vec<Format> = match args.format {
        Some(format) => vec![format],
        None => Format::ALL.to_vec(),
    };
    let mut found: Vec<(PathBuf, Option<Format>)> = Vec::new();
    let mut seen = Vec::new();
    let mut looked = Vec::new();
    for format in formats {
        for path in format.usual_paths(&home, &cwd) {
            looked.push(path.display().to_string());
            if let Ok(real) = std::fs::canonicalize(&path)
                && path.is_file()
                && !seen.contains(&real)
            {
                seen.push(real);
                found.push((path, Some(format)));
            }
        }
    }
    if found.is_empty() {
        return Err(format!(
            "found no host config; looked at:\n  {}\npass --file PATH (and --format NAME when its \
             name does not say which host it is)",
            looked.join("\n  ")
        ));
    }
    Ok(found)
}

fn format_names() -> String {
    use clap::ValueEnum;
    Format::ALL
        .iter()
        .filter_map(|f| f.to_possible_value())
        .map(|v| v.get_name().to_owned())
        .collect::<Vec<_>>()
        .join(", ")
}

fn diff(path: &Path, old: &str, new: &str) -> String {
    let shown = path.display().to_string();
    similar::TextDiff::from_lines(old, new)
        .unified_diff()
        .context_radius(3)
        .header(&shown, &shown)
        .to_string()
}
