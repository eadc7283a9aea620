//! The `sandbox` key of a stdio server or of `defaults` (SPEC §16): which paths the server may
//! read and write, and what of the network it reaches. It owns the typed value, how stage 1 reads
//! it (more methods of the raw walker), and how stage 2 expands its paths (`${VAR}`, then a
//! leading `~/` from the `HOME` the lookup gives) and checks them. It never reads the
//! environment or the filesystem, and never puts a path of the config into a message.

use std::path::PathBuf;

use super::build::{Lookup, expand_text};
use super::json::{Json, Number};
use super::raw::{Given, Text, Walker, child, index};
use super::{Problem, TransportConfig};

const SANDBOX_KEYS: &[&str] = &["read", "write", "network", "bestEffort"];
const NETWORK_KEYS: &[&str] = &["connectPorts"];
const NETWORK_RULE: &str = "must be \"none\" (no network at all, loopback included), \"all\", or { \"connectPorts\": [PORT, ...] } (TCP connects to those ports only)";
const PORT_RULE: &str = "must be a TCP port, a whole number from 1 to 65535";

// === Typed values ===

/// A stdio server's sandbox (`sandbox`): what it may read and write beyond the system, and
/// what of the network it reaches. Paths are absolute (`~/` expanded).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SandboxConfig {
    /// Readable (and executable) besides the system outside home directories (`read`).
    pub read: Vec<PathBuf>,
    /// Readable and writable (`write`).
    pub write: Vec<PathBuf>,
    /// What of the network it reaches (`network`, `"none"` by default).
    pub network: Network,
    /// Run with what the kernel offers instead of not at all (`bestEffort`, false by default).
    pub best_effort: bool,
}

/// What of the network a sandboxed server reaches.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Network {
    /// Nothing, loopback included (`"none"`): the default.
    #[default]
    None,
    /// Everything, as without a sandbox (`"all"`).
    All,
    /// TCP connects to these ports only (`{ "connectPorts": [...] }`); UDP is not covered.
    ConnectPorts(Vec<u16>),
}

impl Network {
    /// The value as a config file writes it, for status and logs.
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Network::None => serde_json::json!("none"),
            Network::All => serde_json::json!("all"),
            Network::ConnectPorts(ports) => serde_json::json!({ "connectPorts": ports }),
        }
    }
}

// === Stage 1 ===

/// `sandbox` as typed: its paths not yet expanded.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct RawSandbox {
    pub(crate) path: String,
    pub(crate) read: Vec<Text>,
    pub(crate) write: Vec<Text>,
    pub(crate) network: Network,
    pub(crate) best_effort: bool,
}

impl Walker<'_> {
    /// `sandbox: { read, write, network, bestEffort }`; `Invalid` only when it is not an
    /// object. As for other lists, its good paths go on to stage 2 (so that their own problems
    /// are found too); a bad item was reported, which alone fails the config.
    pub(super) fn sandbox(&mut self, path: &str, value: &Json) -> Given<RawSandbox> {
        let Some(fields) = self.object(path, value, Some(SANDBOX_KEYS)) else {
            return Given::Invalid;
        };
        let mut raw = RawSandbox {
            path: path.to_owned(),
            ..RawSandbox::default()
        };
        for (key, list) in [("read", &mut raw.read), ("write", &mut raw.write)] {
            if let Some(v) = fields.get(key) {
                *list = self.paths(&child(path, key), v);
            }
        }
        if let Some(v) = fields.get("network")
            && let Some(network) = self.network(&child(path, "network"), v)
        {
            raw.network = network;
        }
        if let Some(v) = fields.get("bestEffort") {
            match v {
                Json::Bool(b) => raw.best_effort = *b,
                other => self.problem(
                    &child(path, "bestEffort"),
                    format!("must be true or false (got {})", other.kind()),
                ),
            }
        }
        Given::Value(raw)
    }

    fn paths(&mut self, path: &str, value: &Json) -> Vec<Text> {
        let Json::Array(items) = value else {
            self.problem(
                path,
                format!(
                    "must be an array of paths, each absolute or starting with ~/ (got {})",
                    value.kind()
                ),
            );
            return Vec::new();
        };
        items
            .iter()
            .enumerate()
            .filter_map(|(i, item)| self.text(&index(path, i), item).value().cloned())
            .collect()
    }

    fn network(&mut self, path: &str, value: &Json) -> Option<Network> {
        match value {
            Json::String(s) if s == "none" => Some(Network::None),
            Json::String(s) if s == "all" => Some(Network::All),
            Json::Object(_) => {
                let fields = self.object(path, value, Some(NETWORK_KEYS))?;
                let ports_path = child(path, "connectPorts");
                let Some(Json::Array(items)) = fields.get("connectPorts") else {
                    self.problem(
                        &ports_path,
                        "is missing or not an array: list the TCP ports the server may connect to, like [443]",
                    );
                    return None;
                };
                let mut ports = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    match port(item) {
                        Ok(port) => ports.push(port),
                        Err(got) => {
                            self.problem(&index(&ports_path, i), format!("{PORT_RULE} (got {got})"))
                        }
                    }
                }
                (ports.len() == items.len()).then_some(Network::ConnectPorts(ports))
            }
            other => {
                let got = match other {
                    Json::String(s) => format!("{s:?}"),
                    other => other.kind().to_string(),
                };
                self.problem(path, format!("{NETWORK_RULE} (got {got})"));
                None
            }
        }
    }
}

/// A TCP port from a JSON value, or what was got instead.
fn port(value: &Json) -> Result<u16, String> {
    match value {
        Json::Number(Number::Unsigned(n)) => u16::try_from(*n)
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| n.to_string()),
        Json::Number(n) => Err(n.to_string()),
        other => Err(other.kind().to_string()),
    }
}

// === Stage 2 ===

/// The sandbox of `defaults`, built once (its problems reported once, at `defaults.sandbox`).
pub(super) fn build_defaults(
    raw: &Given<RawSandbox>,
    env: Lookup<'_>,
    problems: &mut Vec<Problem>,
) -> Option<SandboxConfig> {
    build(raw.value()?, env, problems)
}

/// A server's sandbox: its own (which replaces the default's whole), else the default's; a
/// `url` server's own is a problem, and it never takes the default's.
pub(super) fn for_server(
    raw: &Given<RawSandbox>,
    server_path: &str,
    defaults: Option<&SandboxConfig>,
    transport: &TransportConfig,
    env: Lookup<'_>,
    problems: &mut Vec<Problem>,
) -> Option<SandboxConfig> {
    let stdio = matches!(transport, TransportConfig::Stdio { .. });
    match raw {
        Given::Absent if stdio => defaults.cloned(),
        Given::Absent | Given::Invalid => None,
        Given::Value(_) if !stdio => {
            problems.push(Problem::new(
                child(server_path, "sandbox"),
                "applies only to \"command\" servers (stdio), whose process the proxy starts; this server has \"url\": remove it",
            ));
            None
        }
        Given::Value(raw) => build(raw, env, problems),
    }
}

fn build(raw: &RawSandbox, env: Lookup<'_>, problems: &mut Vec<Problem>) -> Option<SandboxConfig> {
    let home = env("HOME");
    let paths = |texts: &[Text], problems: &mut Vec<Problem>| -> Option<Vec<PathBuf>> {
        let built: Vec<_> = texts
            .iter()
            .map(|text| {
                let value = expand_text(text, env, problems, super::build::check_process_text)?;
                match sandbox_path(&value, home.as_deref()) {
                    Ok(path) => Some(path),
                    Err(why) => {
                        problems.push(Problem::new(&text.path, why));
                        None
                    }
                }
            })
            .collect();
        built.into_iter().collect()
    };
    let read = paths(&raw.read, problems);
    let write = paths(&raw.write, problems);
    Some(SandboxConfig {
        read: read?,
        write: write?,
        network: raw.network.clone(),
        best_effort: raw.best_effort,
    })
}

/// A sandbox path as granted: absolute as given, or `~/…` under `home`. The message of a
/// problem says what to do, never what was given.
pub fn sandbox_path(value: &str, home: Option<&str>) -> Result<PathBuf, String> {
    if value.starts_with('/') {
        return Ok(PathBuf::from(value));
    }
    if let Some(rest) = value.strip_prefix("~/") {
        return match home.filter(|h| h.starts_with('/')) {
            Some(home) => Ok(PathBuf::from(home).join(rest)),
            None => Err(
                "starts with ~/, but HOME is not set to an absolute path here: give an absolute path"
                    .to_owned(),
            ),
        };
    }
    if value.starts_with('~') {
        return Err(
            "must be an absolute path or start with ~/ (~ alone and ~user are not expanded): give /home/... or ~/..."
                .to_owned(),
        );
    }
    Err("must be an absolute path or start with ~/ (a relative path would depend on where the proxy runs): give the full path".to_owned())
}

/// The builder's check of a typed sandbox, at the paths a config file would hold it: each path
/// absolute (the builder expands no `~/`), each port not 0.
pub(super) fn check_typed(path: &str, sandbox: &SandboxConfig, problems: &mut Vec<Problem>) {
    for (key, list) in [("read", &sandbox.read), ("write", &sandbox.write)] {
        for (i, p) in list.iter().enumerate() {
            let text = p.to_string_lossy();
            let why = if text.contains('\0') {
                super::build::check_process_text(&text)
            } else {
                sandbox_path(&text, None)
                    .err()
                    .or_else(|| (!p.is_absolute()).then(|| "must be an absolute path".to_owned()))
            };
            if let Some(why) = why {
                problems.push(Problem::new(index(&child(path, key), i), why));
            }
        }
    }
    if let Network::ConnectPorts(ports) = &sandbox.network {
        let ports_path = child(&child(path, "network"), "connectPorts");
        for (i, p) in ports.iter().enumerate() {
            if *p == 0 {
                problems.push(Problem::new(
                    index(&ports_path, i),
                    format!("{PORT_RULE} (got 0)"),
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_absolute_or_under_home() {
        let home = Some("/home/u");
        assert_eq!(sandbox_path("/srv/x", home), Ok(PathBuf::from("/srv/x")));
        assert_eq!(
            sandbox_path("~/.npm", home),
            Ok(PathBuf::from("/home/u/.npm"))
        );
        for bad in ["rel/x", "./x", "~", "~bob/x", ""] {
            assert!(sandbox_path(bad, home).is_err(), "{bad}");
        }
        assert!(sandbox_path("~/x", None).is_err());
        assert!(sandbox_path("~/x", Some("relative")).is_err());
    }

    #[test]
    fn ports() {
        assert_eq!(port(&Json::Number(Number::Unsigned(443))), Ok(443));
        for bad in [
            Json::Number(Number::Unsigned(0)),
            Json::Number(Number::Unsigned(65536)),
            Json::Number(Number::Signed(-1)),
            Json::Number(Number::Float(80.5)),
            Json::String("80".into()),
        ] {
            assert!(port(&bad).is_err(), "{bad:?}");
        }
    }
}
