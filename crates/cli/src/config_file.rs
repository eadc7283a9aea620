//! A config file as the commands read it: read, parsed and checked, with every problem printed
//! and the exit code for it. It never starts anything.

use std::path::Path;
use std::process::ExitCode;

use mcp_supervisor::core::config::{Config, parse_config};

/// Exit code for bad usage or an invalid config.
pub(crate) const USAGE: u8 = 2;

/// Read and validate a config file, printing every problem on failure.
pub(crate) fn load(path: &Path) -> Result<Config, ExitCode> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) => {
            eprintln!(
                "mcp-supervisor: cannot read config {}: {error}",
                path.display()
            );
            return Err(ExitCode::from(USAGE));
        }
    };
    parse_config(&text, &|name| std::env::var(name).ok()).map_err(|errors| {
        eprintln!("{}: {} problem(s):", path.display(), errors.problems.len());
        for problem in &errors.problems {
            eprintln!("  - {problem}");
        }
        ExitCode::from(USAGE)
    })
}
