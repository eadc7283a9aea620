//! A server's `oauth` block: how mcp-supervisor gets tokens for a protected streamable-HTTP
//! server (the MCP authorization spec). It reads the block whole, reporting each problem at its
//! path; it never holds a secret (a client secret is named by its environment variable and read
//! when it is used) and never puts a value of the config into a message.

use super::Problem;
use super::json::Json;
use super::raw::child;

const OAUTH_KEYS: &[&str] = &[
    "grant",
    "clientId",
    "clientSecretEnv",
    "scopes",
    "clientMetadataUrl",
];

/// How tokens are obtained.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Grant {
    /// A person signs in once with `mcp-supervisor login` (authorization code with PKCE); the
    /// supervisor refreshes from then on.
    #[default]
    AuthorizationCode,
    /// A machine: the client id and secret buy a token at the token endpoint, no person involved.
    ClientCredentials,
}

/// A server's validated `oauth` block.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OAuthConfig {
    pub grant: Grant,
    /// A client registered ahead of time; without it, the client registers itself (a client ID
    /// metadata document where the server supports one, else dynamic registration).
    pub client_id: Option<String>,
    /// The environment variable holding the client secret (read when it is used, never stored).
    pub client_secret_env: Option<String>,
    /// The scopes to ask for, over what the server says it needs.
    pub scopes: Option<Vec<String>>,
    /// An https URL where this client's metadata document is published (used as its client id
    /// where the authorization server supports client ID metadata documents).
    pub client_metadata_url: Option<String>,
}

/// Reads the `oauth` block at `path`; `None` (with problems recorded) when it is wrong.
pub(crate) fn walk(path: &str, value: &Json, problems: &mut Vec<Problem>) -> Option<OAuthConfig> {
    let Json::Object(entries) = value else {
        problems.push(Problem::new(
            path,
            format!(
                "must be an object such as {{\"clientId\": \"…\"}} or {{}} (got {})",
                value.kind()
            ),
        ));
        return None;
    };
    let before = problems.len();
    let mut config = OAuthConfig::default();
    for (key, value) in entries {
        let at = child(path, key);
        match key.as_str() {
            "grant" => match value {
                Json::String(s) if s == "authorization_code" => {
                    config.grant = Grant::AuthorizationCode
                }
                Json::String(s) if s == "client_credentials" => {
                    config.grant = Grant::ClientCredentials
                }
                _ => problems.push(Problem::new(
                    at,
                    "must be \"authorization_code\" (a person signs in with `mcp-supervisor login`) \
                     or \"client_credentials\" (a machine, with clientId and clientSecretEnv)",
                )),
            },
            "clientId" => config.client_id = nonempty(&at, value, problems),
            "clientSecretEnv" => {
                config.client_secret_env = nonempty(&at, value, problems);
                if let Some(name) = &config.client_secret_env
                    && !name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_')
                {
                    problems.push(Problem::new(
                        &at,
                        "must be the name of an environment variable (A-Za-z0-9_), not the secret \
                         itself",
                    ));
                }
            }
            "scopes" => match value {
                Json::Array(items) => {
                    let mut scopes = Vec::new();
                    for (i, item) in items.iter().enumerate() {
                        match item {
                            Json::String(s)
                                if !s.is_empty() && !s.contains(char::is_whitespace) =>
                            {
                                scopes.push(s.clone())
                            }
                            _ => problems.push(Problem::new(
                                format!("{at}[{i}]"),
                                "must be one scope: a non-empty string without spaces",
                            )),
                        }
                    }
                    config.scopes = Some(scopes);
                }
                other => problems.push(Problem::new(
                    at,
                    format!("must be an array of scope strings (got {})", other.kind()),
                )),
            },
            "clientMetadataUrl" => {
                config.client_metadata_url = nonempty(&at, value, problems);
                if let Some(url) = &config.client_metadata_url
                    && !(url.starts_with("https://") && url.len() > "https://".len() + 1)
                {
                    problems.push(Problem::new(
                        &at,
                        "must be an https:// URL where the client's metadata document is published",
                    ));
                }
            }
            other => problems.push(Problem::new(
                at,
                format!(
                    "is not a known key of \"oauth\" ({other:?}); known keys: {}",
                    OAUTH_KEYS.join(", ")
                ),
            )),
        }
    }
    if config.grant == Grant::ClientCredentials
        && (config.client_id.is_none() || config.client_secret_env.is_none())
    {
        problems.push(Problem::new(
            path,
            "has grant \"client_credentials\", which needs \"clientId\" and \"clientSecretEnv\" \
             (the environment variable holding the secret)",
        ));
    }
    (problems.len() == before).then_some(config)
}

fn nonempty(path: &str, value: &Json, problems: &mut Vec<Problem>) -> Option<String> {
    match value {
        Json::String(s) if !s.trim().is_empty() => Some(s.clone()),
        Json::String(_) => {
            problems.push(Problem::new(
                path,
                "is empty: give a value or remove the key",
            ));
            None
        }
        other => {
            problems.push(Problem::new(
                path,
                format!("must be a string (got {})", other.kind()),
            ));
            None
        }
    }
}
