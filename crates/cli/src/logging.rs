//! Logging setup: tracing to stderr only (stdout carries MCP in stdio mode), as text or JSON.
//!
//! It must never write to stdout.

use clap::{Args, ValueEnum};
use tracing_subscriber::EnvFilter;

#[derive(Clone, Copy, Debug, Default, ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

#[derive(Clone, Debug, Args)]
pub struct LogArgs {
    /// Log format on stderr.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true)]
    pub log_format: LogFormat,
    /// Log level (error, warn, info, debug, trace) or a tracing filter such as `mcp_supervisor=debug`.
    /// RUST_LOG overrides it.
    #[arg(long, default_value = "info", global = true)]
    pub log_level: String,
}

pub fn init(args: &LogArgs) {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(format!("rmcp=warn,{}", args.log_level)))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false);
    let _ = match args.log_format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}
