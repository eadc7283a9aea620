//! The command line: every command, flag and help text, as clap types. No behaviour here.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::logging::LogArgs;

/// `--version`: the crate version and the git commit it was built from ("unknown" outside a
/// git checkout), set by build.rs.
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("MCP_SUPERVISOR_GIT_COMMIT"),
    ")"
);

/// Keep MCP servers usable when they crash, hang or lose their HTTP session.
#[derive(Debug, Parser)]
#[command(name = "mcp-supervisor", version = VERSION, about, long_about = None)]
pub struct Cli {
    #[command(flatten)]
    pub log: LogArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// Where the proxy serves.
#[derive(Clone, Debug, clap::Args)]
pub struct FaceArgs {
    /// Serve MCP over stdio (the default when --http is not given).
    #[arg(long)]
    pub stdio: bool,
    /// Serve MCP over streamable HTTP at http://ADDR/mcp, with the admin endpoints beside it.
    #[arg(long, value_name = "ADDR")]
    pub http: Option<std::net::SocketAddr>,
    /// Serve only the admin endpoints (/status, /healthz, /metrics, reconnect) on ADDR.
    #[arg(long, value_name = "ADDR")]
    pub admin: Option<std::net::SocketAddr>,
    /// Require `Authorization: Bearer <token>` on HTTP, the token read from this environment variable.
    #[arg(long, value_name = "VAR")]
    pub auth_token_env: Option<String>,
    /// Accept this Host header too (needed when binding a non-loopback address).
    #[arg(long, value_name = "HOST")]
    pub allow_host: Vec<String>,
    /// Accept this browser Origin too (loopback origins are always accepted).
    #[arg(long, value_name = "ORIGIN")]
    pub allow_origin: Vec<String>,
    /// Seal HTTP session ids with the key in FILE (32 bytes, base64), shared by every replica
    /// so that any of them resumes a session. Default: $MCP_SUPERVISOR_SESSION_KEY, else a
    /// random key of this process's own.
    #[arg(long, value_name = "FILE")]
    pub session_key_file: Option<PathBuf>,
    /// The previous key (during a rotation), accepted for opening ids only. Default:
    /// $MCP_SUPERVISOR_SESSION_KEY_PREVIOUS.
    #[arg(long, value_name = "FILE")]
    pub previous_session_key_file: Option<PathBuf>,
    /// With --http: on SIGTERM, keep serving for this long with /readyz answering 503, then
    /// cancel the calls still running and stop (0 = stop at once).
    #[arg(long, value_name = "MS", default_value_t = crate::drain::DEFAULT_DRAIN_MS)]
    pub drain_ms: u64,
    #[command(flatten)]
    pub http_limits: HttpLimitArgs,
}

/// `wrap --http` as an OAuth resource server: the keys of a config's `"auth"` as flags
/// (SPEC §14).
#[derive(Clone, Debug, Default, clap::Args)]
pub struct AuthArgs {
    /// With --http: accept only JWT access tokens of this issuer (its `iss`); the keys are
    /// found from its metadata.
    #[arg(long, value_name = "URL", requires_all = ["http", "auth_audience"])]
    pub auth_issuer: Option<String>,
    /// This proxy's resource URL: a token's `aud` must hold it (e.g. https://host/mcp).
    #[arg(long, value_name = "URL", requires = "auth_issuer")]
    pub auth_audience: Option<String>,
    /// A scope every token for /mcp must hold (repeatable).
    #[arg(long, value_name = "SCOPE", requires = "auth_issuer")]
    pub auth_scope: Vec<String>,
    /// A scope every token for the admin endpoints must hold (repeatable).
    #[arg(long, value_name = "SCOPE", requires = "auth_issuer")]
    pub auth_admin_scope: Vec<String>,
    /// The issuer's JWKS URL, when its metadata should not be asked for it.
    #[arg(long, value_name = "URL", requires = "auth_issuer")]
    pub auth_jwks_uri: Option<String>,
}

/// How every HTTP listener of the process (--http, --admin) treats slow and idle connections.
#[derive(Clone, Copy, Debug, clap::Args)]
pub struct HttpLimitArgs {
    /// Close an HTTP connection whose request headers are not complete this long after it
    /// opened, or after the first byte of a later request on it.
    #[arg(
        long,
        value_name = "MS",
        default_value_t = crate::http::limits::DEFAULT_HEADER_TIMEOUT_MS,
        value_parser = crate::http::limits::timeout_ms
    )]
    pub http_header_timeout_ms: u64,
    /// Close a kept-alive HTTP connection with no request in flight after this long (a response
    /// still being sent, such as an event stream or a slow call, is never cut).
    #[arg(
        long,
        value_name = "MS",
        default_value_t = crate::http::limits::DEFAULT_IDLE_TIMEOUT_MS,
        value_parser = crate::http::limits::timeout_ms
    )]
    pub http_idle_timeout_ms: u64,
    /// Keep at most N connections open on each HTTP listener; past N a new one is closed at once.
    #[arg(
        long,
        value_name = "N",
        default_value_t = crate::http::limits::DEFAULT_MAX_CONNECTIONS,
        value_parser = crate::http::limits::max_connections
    )]
    pub http_max_connections: u32,
}

impl From<HttpLimitArgs> for crate::http::limits::Limits {
    fn from(args: HttpLimitArgs) -> Self {
        Self {
            header_timeout: std::time::Duration::from_millis(args.http_header_timeout_ms),
            idle_timeout: std::time::Duration::from_millis(args.http_idle_timeout_ms),
            max_connections: args.http_max_connections,
        }
    }
}

/// Where saved catalogs live (`serve`, `wrap`).
#[derive(Clone, Debug, clap::Args)]
pub struct CatalogArgs {
    /// Keep saved catalogs (each server's last tool, prompt and resource lists, published at
    /// once at the next start) in DIR instead of the user's cache directory.
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Neither save nor use catalogs: tools are listed only once their server is up.
    #[arg(long, conflicts_with = "state_dir")]
    pub no_catalog: bool,
}

/// Reconnect policy flags of `wrap`.
#[derive(Clone, Debug, clap::Args)]
pub struct PolicyArgs {
    /// Delay before the first reconnect attempt.
    #[arg(long, default_value_t = 500)]
    pub initial_delay_ms: u64,
    /// Longest delay between attempts (also the stability window).
    #[arg(long, default_value_t = 30_000)]
    pub max_delay_ms: u64,
    /// Attempts after a loss before giving up.
    #[arg(long, default_value_t = 10)]
    pub max_attempts: u32,
    /// Do not reconnect a lost server.
    #[arg(long)]
    pub no_reconnect: bool,
    /// Deadline of each tool call.
    #[arg(long, default_value_t = 60_000)]
    pub tool_call_timeout_ms: u64,
    /// Deadline of spawn + initialize + first tools/list.
    #[arg(long, default_value_t = 30_000)]
    pub connect_timeout_ms: u64,
    /// Idle health-probe interval (0 = off).
    #[arg(long, default_value_t = 30_000)]
    pub health_interval_ms: u64,
    /// Start the server on the client's first request, not at once (`"start": "onDemand"`);
    /// until then its saved catalog answers the handshake and lists its tools.
    #[arg(long)]
    pub on_demand: bool,
    /// Stop the server after this long without a client request (`idleTimeoutMs`); the next
    /// request starts it again.
    #[arg(long, value_name = "MS")]
    pub idle_timeout_ms: Option<u64>,
    /// A tool that is safe to send again when its outcome is unknown (repeatable).
    #[arg(long, value_name = "TOOL")]
    pub retry_tool: Vec<String>,
    /// Publish only the tools this glob pattern matches (repeatable; `tools.allow`).
    #[arg(long, value_name = "PATTERN")]
    pub allow_tool: Vec<String>,
    /// Never publish the tools this glob pattern matches (repeatable; `tools.deny`, wins over
    /// --allow-tool).
    #[arg(long, value_name = "PATTERN")]
    pub deny_tool: Vec<String>,
    /// What a tool whose definition changed since it was first seen does (`pin`): `warn` (the
    /// default) publishes it and logs the diff, `block` withholds it until `mcp-supervisor
    /// approve` accepts it, `off` keeps no pins.
    #[arg(long, value_name = "MODE", value_parser = ["off", "warn", "block"])]
    pub pin: Option<String>,
    /// Cut a tool result whose content is larger than N bytes, with a note that says so
    /// (`maxResultBytes`; default: no cap).
    #[arg(long, value_name = "N")]
    pub max_result_bytes: Option<u64>,
    /// `search`: the client sees two tools, search_tools and call_tool, instead of every tool
    /// (`toolExposure`; a deliberate exception to wrap's transparency).
    #[arg(long, value_enum, value_name = "HOW", default_value = "all")]
    pub tool_exposure: Exposure,
    /// Run the server in a sandbox that may read PATH too (`sandbox.read`; repeatable; absolute
    /// or ~/...). Any --sandbox-* flag turns the sandbox on (docs/configuration.md, "sandbox").
    #[arg(long, value_name = "PATH")]
    pub sandbox_read: Vec<String>,
    /// Let the sandboxed server read and write PATH (`sandbox.write`; repeatable).
    #[arg(long, value_name = "PATH")]
    pub sandbox_write: Vec<String>,
    /// What of the network the sandboxed server reaches: `none` (the default), `all`, or TCP
    /// ports, comma-separated (`sandbox.network`).
    #[arg(long, value_name = "none|all|PORT,...")]
    pub sandbox_network: Option<String>,
    /// Start the server with what the kernel offers when it cannot give the whole sandbox,
    /// instead of not at all (`sandbox.bestEffort`).
    #[arg(long)]
    pub sandbox_best_effort: bool,
}

/// How the client sees the tools (`--tool-exposure`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Exposure {
    /// Every tool in tools/list.
    All,
    /// Two tools that search and call the others.
    Search,
}

/// The flags of `wrap`.
#[derive(Debug, clap::Args)]
pub struct WrapArgs {
    /// The name used in logs and status (default: from the command).
    #[arg(long)]
    pub name: Option<String>,
    /// Front a streamable-HTTP server instead of a command.
    #[arg(long, conflicts_with = "command")]
    pub url: Option<String>,
    /// Front a legacy HTTP+SSE server (protocol 2024-11-05) instead of a command: the URL of
    /// its event stream (often ending in /sse).
    #[arg(long, value_name = "URL", conflicts_with_all = ["command", "url"])]
    pub sse: Option<String>,
    /// An HTTP header sent to the --url or --sse server, as `NAME: VALUE` (repeatable).
    #[arg(long, value_name = "NAME: VALUE")]
    pub header: Vec<String>,
    /// An HTTP header sent to the --url or --sse server, its value read from the environment
    /// variable VAR, so that it never shows on a command line (repeatable).
    #[arg(long, value_name = "NAME=VAR")]
    pub header_from_env: Vec<String>,
    /// The --url server is protected by OAuth: use the token `mcp-supervisor login NAME
    /// --url URL` stored (same NAME, so give --name), refreshed as needed.
    #[arg(long, requires = "url")]
    pub oauth: bool,
    #[command(flatten)]
    pub policy: PolicyArgs,
    #[command(flatten)]
    pub faces: FaceArgs,
    #[command(flatten)]
    pub auth: AuthArgs,
    /// Append one JSON line per client request that reaches the server or is refused to
    /// FILE (who, the tool, the outcome, what recovery did; never a token, an argument or a
    /// result), reopened on SIGHUP for log rotation.
    #[arg(long, value_name = "FILE")]
    pub audit: Option<PathBuf>,
    #[command(flatten)]
    pub catalog: CatalogArgs,
    /// The server's command and arguments, after `--`.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Supervise every server of a config and serve their tools as one MCP server.
    #[command(
        after_help = "Examples:\n  mcp-supervisor serve --config servers.json                  # MCP over stdio\n  mcp-supervisor serve --config servers.json --http 127.0.0.1:8080\n  mcp-supervisor serve --config servers.json --stdio --admin 127.0.0.1:9090\n\nThe config reloads on SIGHUP and when the file changes. SIGINT, SIGTERM or the end of stdin stop it;\nwith --http, SIGTERM first drains for --drain-ms (/readyz 503, requests still served)."
    )]
    Serve {
        #[arg(long, short)]
        config: PathBuf,
        #[command(flatten)]
        faces: FaceArgs,
        #[command(flatten)]
        catalog: CatalogArgs,
        /// Append one JSON line per client request that reaches a server or is refused to FILE
        /// (who, which server and tool, the outcome, what recovery did; never a token, an
        /// argument or a result), reopened on SIGHUP for log rotation. Overrides the config's
        /// "audit".
        #[arg(long, value_name = "FILE")]
        audit: Option<PathBuf>,
    },
    /// Front one server, transparently: its tools keep their names.
    #[command(
        after_help = "Examples:\n  mcp-supervisor wrap -- npx -y @modelcontextprotocol/server-everything\n  mcp-supervisor wrap --max-attempts 20 -- python my_server.py\n  mcp-supervisor wrap --url http://127.0.0.1:3001/mcp --http 127.0.0.1:8080\n  mcp-supervisor wrap --sse http://127.0.0.1:8000/sse\n\nPut `mcp-supervisor wrap --` in front of any command in your host's mcpServers config."
    )]
    Wrap(Box<WrapArgs>),
    /// Rewrite a host's MCP config so every server runs through `wrap` (or back, with --undo).
    #[command(
        after_help = "Examples:\n  mcp-supervisor adopt                      # show the diff for every host config found\n  mcp-supervisor adopt --write              # save it (a timestamped backup is kept beside each file)\n  mcp-supervisor adopt --undo --write       # restore the original entries\n  mcp-supervisor adopt --file .mcp.json --only github,fs --write\n\nHosts: Claude Desktop, Cursor, Claude Code (.mcp.json, ~/.claude.json), VS Code (mcp.json), Codex (~/.codex/config.toml), Zed (settings.json), Gemini CLI (.gemini/settings.json).\nStdio servers become `wrap -- CMD`, streamable-HTTP ones `wrap --url URL`, SSE ones `wrap --sse URL` (header values move to env).\nExit code 0 when done, 2 for bad usage or a config that does not parse, 1 when a file could not be written."
    )]
    Adopt(crate::adopt::AdoptArgs),
    /// Validate a config and print every problem.
    #[command(
        after_help = "Examples:\n  mcp-supervisor check --config examples/servers.json\n  mcp-supervisor check --config examples/servers.json --list   # also start the servers and check their tool filters\n\nExit code 0 when valid, 2 with every problem listed otherwise. Warnings (--list) do not change it."
    )]
    Check {
        /// The `mcpServers` JSON file.
        #[arg(long, short)]
        config: PathBuf,
        /// Also start every enabled server, list its tools, and warn about each `tools.allow` or
        /// `tools.deny` pattern that matches nothing the server lists.
        #[arg(long)]
        list: bool,
        /// With --list: how long to wait for the servers to be ready.
        #[arg(long, default_value_t = 30_000, requires = "list")]
        wait_ms: u64,
    },
    /// Ask a running proxy for the state of every server.
    #[command(
        after_help = "Examples:\n  mcp-supervisor status --url http://127.0.0.1:8080\n  mcp-supervisor status --url http://127.0.0.1:9090 --json\n\nThe bearer token, when the proxy requires one, is read from --auth-token-env."
    )]
    Status {
        /// The proxy's HTTP face or admin address.
        #[arg(long)]
        url: String,
        /// Print the raw JSON.
        #[arg(long)]
        json: bool,
        /// Environment variable holding the bearer token.
        #[arg(long, value_name = "VAR")]
        auth_token_env: Option<String>,
    },
    /// Serve one page, on loopback, for every proxy (serve and wrap) this user runs here.
    #[command(
        after_help = "Examples:\n  mcp-supervisor dashboard            # prints http://127.0.0.1:PORT/?token=TOKEN; open it\n  mcp-supervisor dashboard --open     # and opens it in the browser\n\nEvery serve and wrap registers in $XDG_RUNTIME_DIR/mcp-supervisor (else $TMPDIR/mcp-supervisor-UID),\nmode 0700, with a Unix socket for its admin routes. The URL holds a random token: without it the\npage is refused. SIGINT or SIGTERM stops it."
    )]
    Dashboard {
        /// The loopback address to serve on (a random port by default).
        #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:0")]
        listen: std::net::SocketAddr,
        /// Open the URL in the browser (xdg-open or open), when there is one.
        #[arg(long)]
        open: bool,
        /// The registry folder to read (default: the user's, as above).
        #[arg(long, value_name = "PATH")]
        dir: Option<PathBuf>,
    },
    /// Ask a running proxy to reconnect one server now, with a fresh budget.
    #[command(after_help = "Example:\n  mcp-supervisor reconnect fs --url http://127.0.0.1:8080")]
    Reconnect {
        /// The server's name.
        server: String,
        #[arg(long)]
        url: String,
        #[arg(long, value_name = "VAR")]
        auth_token_env: Option<String>,
    },
    /// Start every server of a config and list the aggregate tool list.
    #[command(
        after_help = "Example:\n  mcp-supervisor tools --config examples/servers.json --json"
    )]
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
    #[command(
        after_help = "Example:\n  mcp-supervisor call --config examples/servers.json fault__echo --args '{\"message\":\"hi\"}'\n\nExits non-zero when the call fails or its result has isError: true."
    )]
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
    /// Show the changed tool definitions of a server whose tools are pinned, and accept them.
    #[command(
        after_help = "Examples:\n  mcp-supervisor approve github --config servers.json\n  mcp-supervisor approve github --config servers.json --tool create_issue\n  mcp-supervisor approve --wrap -- npx -y some-server     # the server of `wrap -- npx -y some-server`\n  mcp-supervisor approve --url http://127.0.0.1:3001/mcp  # the server of `wrap --url ...`\n  mcp-supervisor approve some-server                      # a wrap server found by its name\n\nA running proxy publishes the approved tools within a few seconds, without a restart.\nExit code 0 when done (also when nothing was waiting), 1 when there is nothing to approve for --tool or the pins cannot be read or written, 2 for bad usage."
    )]
    Approve {
        /// The server's name in the config (or the --name of `wrap`, found among the pins).
        server: Option<String>,
        /// The `mcpServers` JSON file the server is configured in.
        #[arg(long, short, conflicts_with_all = ["url", "sse", "wrap"])]
        config: Option<PathBuf>,
        /// Where the pins are kept: the --state-dir the proxy was given (default: the user's
        /// cache directory).
        #[arg(long, value_name = "DIR")]
        state_dir: Option<PathBuf>,
        /// Accept only this tool's change (its name on the server).
        #[arg(long, value_name = "NAME")]
        tool: Option<String>,
        /// The server of `wrap --url URL`.
        #[arg(long, conflicts_with_all = ["sse", "wrap"])]
        url: Option<String>,
        /// The server of `wrap --sse URL`.
        #[arg(long, value_name = "URL", conflicts_with = "wrap")]
        sse: Option<String>,
        /// The server of `wrap -- COMMAND`: give the same command and arguments after `--`.
        #[arg(long, requires = "command")]
        wrap: bool,
        /// The command and arguments of the `wrap` server, after `--`.
        #[arg(last = true, value_name = "COMMAND")]
        command: Vec<String>,
    },
    /// Sign in to a protected HTTP server (OAuth) and store its tokens for serve and wrap.
    #[command(
        after_help = "Examples:\n  mcp-supervisor login github --config servers.json\n  mcp-supervisor login linear --url https://mcp.linear.app/mcp   # for wrap --name linear --url … --oauth\n\nOpens the authorization URL in a browser where one exists and always prints it. Tokens go to\n$MCP_SUPERVISOR_TOKEN_FILE, else $XDG_STATE_HOME/mcp-supervisor/tokens.json, else\n~/.local/state/mcp-supervisor/tokens.json (mode 0600). A running proxy whose server waits in\nneeds_auth picks them up by itself."
    )]
    Login {
        /// The server's name in the config (or, with --url, the --name given to `wrap`).
        server: String,
        #[arg(long, short, required_unless_present = "url", conflicts_with = "url")]
        config: Option<PathBuf>,
        /// Sign in to this URL instead of a config's server (for `wrap --url URL --oauth`).
        #[arg(long)]
        url: Option<String>,
        /// Print only the authorization URL, on stdout, and open no browser (for signing in from
        /// another machine, or a script that follows the URL).
        #[arg(long)]
        no_browser: bool,
        /// How long to wait for the browser to come back to the loopback redirect.
        #[arg(long, default_value_t = 300_000)]
        wait_ms: u64,
    },
}

impl Command {
    /// Whether this is `wrap` with the stdio face alone (no `--http`): one client, one server.
    pub fn is_stdio_wrap(&self) -> bool {
        matches!(self, Command::Wrap(args) if args.faces.http.is_none())
    }
}
