//! The hosts adopt knows: their names, where each keeps its config on Linux and macOS, and how to
//! tell which host a given file belongs to. It reads nothing but file names and top-level keys.

use std::path::{Path, PathBuf};

use super::json::Layout;

/// A host whose MCP config adopt can rewrite.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Claude Desktop's claude_desktop_config.json (`mcpServers`).
    ClaudeDesktop,
    /// Cursor's .cursor/mcp.json (`mcpServers`).
    Cursor,
    /// Claude Code's .mcp.json and ~/.claude.json (`mcpServers`, `projects.<path>.mcpServers`).
    ClaudeCode,
    /// VS Code's mcp.json (`servers`).
    Vscode,
    /// Codex's ~/.codex/config.toml (`[mcp_servers.NAME]`).
    Codex,
    /// Zed's settings.json (`context_servers`).
    Zed,
    /// Gemini CLI's .gemini/settings.json (`mcpServers`; streamable HTTP under `httpUrl` or under
    /// `url` with `"type": "http"`, SSE under `url`).
    Gemini,
}

/// How a format's file is read.
pub enum Syntax {
    Json(Layout),
    Toml,
}

impl Format {
    pub const ALL: [Format; 7] = [
        Format::ClaudeDesktop,
        Format::Cursor,
        Format::ClaudeCode,
        Format::Vscode,
        Format::Codex,
        Format::Zed,
        Format::Gemini,
    ];

    pub fn title(self) -> &'static str {
        match self {
            Format::ClaudeDesktop => "Claude Desktop",
            Format::Cursor => "Cursor",
            Format::ClaudeCode => "Claude Code",
            Format::Vscode => "VS Code",
            Format::Codex => "Codex",
            Format::Zed => "Zed",
            Format::Gemini => "Gemini CLI",
        }
    }

    pub fn syntax(self) -> Syntax {
        let layout = |servers, projects, nested_command| Layout {
            servers,
            projects,
            nested_command,
            gemini_urls: false,
        };
        Syntax::Json(match self {
            Format::ClaudeDesktop | Format::Cursor => layout("mcpServers", false, false),
            Format::ClaudeCode => layout("mcpServers", true, false),
            Format::Vscode => layout("servers", false, false),
            Format::Zed => layout("context_servers", false, true),
            Format::Gemini => Layout {
                gemini_urls: true,
                ..layout("mcpServers", false, false)
            },
            Format::Codex => return Syntax::Toml,
        })
    }

    /// The usual places of this host's config, user-wide and (where the host has one) in the
    /// current folder. They may not exist.
    pub fn usual_paths(self, home: &Path, cwd: &Path) -> Vec<PathBuf> {
        let xdg = std::env::var_os("XDG_CONFIG_HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .unwrap_or_else(|| home.join(".config"));
        let app_support = if cfg!(target_os = "macos") {
            home.join("Library/Application Support")
        } else {
            xdg.clone()
        };
        match self {
            Format::ClaudeDesktop => vec![app_support.join("Claude/claude_desktop_config.json")],
            Format::Cursor => vec![home.join(".cursor/mcp.json"), cwd.join(".cursor/mcp.json")],
            Format::ClaudeCode => vec![home.join(".claude.json"), cwd.join(".mcp.json")],
            Format::Vscode => vec![
                app_support.join("Code/User/mcp.json"),
                cwd.join(".vscode/mcp.json"),
            ],
            Format::Codex => {
                let codex = std::env::var_os("CODEX_HOME")
                    .map(PathBuf::from)
                    .unwrap_or_else(|| home.join(".codex"));
                vec![codex.join("config.toml")]
            }
            Format::Zed => vec![xdg.join("zed/settings.json")],
            Format::Gemini => vec![
                home.join(".gemini/settings.json"),
                cwd.join(".gemini/settings.json"),
            ],
        }
    }

    /// The host a file belongs to, from its name and folder, or else from its top-level keys.
    pub fn detect(path: &Path, text: &str) -> Option<Format> {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let parent = path
            .parent()
            .and_then(|p| p.file_name())
            .and_then(|n| n.to_str())
            .unwrap_or("");
        match (name, parent) {
            (_, _) if name.ends_with(".toml") => return Some(Format::Codex),
            ("claude_desktop_config.json", _) => return Some(Format::ClaudeDesktop),
            (".claude.json" | ".mcp.json", _) => return Some(Format::ClaudeCode),
            ("mcp.json", ".cursor") => return Some(Format::Cursor),
            ("mcp.json", ".vscode" | "User") => return Some(Format::Vscode),
            ("settings.json", ".gemini") => return Some(Format::Gemini),
            _ => {}
        }
        let clean = super::json::strip_comments(text);
        let Ok(serde_json::Value::Object(top)) = serde_json::from_str(&clean) else {
            // Not JSON: let the JSON reader name the line that is wrong.
            return Some(Format::Cursor);
        };
        if top.contains_key("context_servers") {
            Some(Format::Zed)
        } else if top.contains_key("projects") {
            Some(Format::ClaudeCode)
        } else if let Some(serde_json::Value::Object(servers)) = top.get("mcpServers") {
            // Only Gemini CLI names a streamable-HTTP server's URL `httpUrl`.
            let gemini = servers
                .values()
                .any(|server| server.get("httpUrl").is_some());
            Some(if gemini {
                Format::Gemini
            } else {
                Format::Cursor
            })
        } else if top.contains_key("mcpServers") {
            Some(Format::Cursor)
        } else if top.contains_key("servers") {
            Some(Format::Vscode)
        } else {
            None
        }
    }
}
