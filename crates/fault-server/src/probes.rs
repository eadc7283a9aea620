//! The probe tools (`--probes`): each tries one thing a sandbox rules (read a file, directly and
//! from a child process; write one; connect to a loopback TCP port; read a variable) and says
//! what happened, so that a test runs the same server sandboxed and unsandboxed (the control)
//! and compares. They report; they never retry or work around a refusal.

use std::time::Duration;

use rmcp::model::Tool;
use schemars::JsonSchema;
use serde::Deserialize;

/// How long `probe_connect` waits for a connection.
const CONNECT_LIMIT: Duration = Duration::from_secs(2);

#[derive(Deserialize, JsonSchema)]
pub struct PathArgs {
    /// The file's absolute path.
    pub path: String,
}

#[derive(Deserialize, JsonSchema)]
pub struct PortArgs {
    /// A TCP port on 127.0.0.1.
    pub port: u16,
}

#[derive(Deserialize, JsonSchema)]
pub struct NameArgs {
    /// An environment variable's name.
    pub name: String,
}

/// The probe tools' names and descriptions, with their argument types' schemas.
pub fn tools(schema: impl Fn(&str) -> std::sync::Arc<rmcp::model::JsonObject>) -> Vec<Tool> {
    [
        ("probe_read", "Read the file at path; reply with its content, or an error result with what the system said.", "path"),
        ("probe_read_child", "Read the file at path through a child process (cat); reply with its output, or an error result with the child's stderr.", "path"),
        ("probe_write", "Create (or replace) the file at path with the text \"probe\"; reply \"ok\", or an error result with what the system said.", "path"),
        ("probe_connect", "Open a TCP connection to 127.0.0.1:port (2 s at most); reply \"ok\", or an error result with what the system said.", "port"),
        ("probe_env", "Reply with the environment variable name's value, or an error result when it is not set.", "name"),
    ]
    .into_iter()
    .map(|(name, description, args)| Tool::new(name, description, schema(args)))
    .collect()
}

/// `probe_read`.
pub fn read(path: &str) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| e.to_string())
}

/// `probe_read_child`.
pub async fn read_child(path: &str) -> Result<String, String> {
    let output = tokio::process::Command::new("cat")
        .arg(path)
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .map_err(|e| format!("cat could not start: {e}"))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).trim().to_owned())
    }
}

/// `probe_write`.
pub fn write(path: &str) -> Result<String, String> {
    std::fs::write(path, "probe")
        .map(|()| "ok".to_owned())
        .map_err(|e| e.to_string())
}

/// `probe_connect`.
pub async fn connect(port: u16) -> Result<String, String> {
    match tokio::time::timeout(
        CONNECT_LIMIT,
        tokio::net::TcpStream::connect(("127.0.0.1", port)),
    )
    .await
    {
        Ok(Ok(_)) => Ok("ok".to_owned()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("timed out".to_owned()),
    }
}

/// `probe_env`.
pub fn env(name: &str) -> Result<String, String> {
    std::env::var(name).map_err(|e| format!("{name}: {e}"))
}
