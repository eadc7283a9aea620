//! The command line: every command, flag and help text, as clap types. No behaviour here.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::logging::LogArgs;

/// Keep MCP servers usable when they crash, hang or lose their HTTP session.
#[derive(Debug, Parser)]
#[command(name = "mcp-supervisor", version, about, long_about = None)]
pub struct Cli {
    #[command(flatten)]
    pub log: LogArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Validate a config and print every problem.
    #[command(after_help = "Example:\n  mcp-supervisor check --config examples/servers.json\n\nExit code 0 when valid, 2 with every problem listed otherwise.")]
    Check {
        /// The `mcpServers` JSON file.
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Start every server of a config and list the aggregate tool list.
    #[command(after_help = "Example:\n  mcp-supervisor tools --config examples/servers.json --json")]
    Tools {
        #[arg(long, short)]
        config: PathBuf,
        /// Print the tool definitions as JSON.
        #[arg(long)]
        json: bool,
        /// How long to wait for the servers to be ready.
        #[arg(long, default_value_t = 30_000)]
        wait_ms: u64,
    },
    /// Start the servers of a config, call one tool by its public name, print the result.
    #[command(after_help = "Example:\n  mcp-supervisor call --config examples/servers.json fault__echo --args '{\"message\":\"hi\"}'\n\nExits non-zero when the call fails or its result has isError: true.")]
    Call {
        #[arg(long, short)]
        config: PathBuf,
        /// The tool's public name.
        tool: String,
        /// The arguments, as a JSON object.
        #[arg(long, default_value = "{}")]
        args: String,
        /// A deadline shorter than the server's toolCallTimeoutMs.
        #[arg(long)]
        timeout_ms: Option<u64>,
    },
}
