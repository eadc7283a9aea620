//! The pieces of the face's answers about identity, as pure functions: the protected resource
//! metadata (RFC 9728) and where it lives, the `WWW-Authenticate` challenge (RFC 6750 with
//! RFC 9728's `resource_metadata`), and reading `Authorization: Bearer`.
//!
//! It never checks a token and never does I/O: the routes serve what it writes.

use serde_json::{Value, json};

use super::{AuthSettings, Invalid};

/// The path of the protected resource metadata.
pub const METADATA_PATH: &str = "/.well-known/oauth-protected-resource";
/// Every path that answers the metadata: [`METADATA_PATH`], and the same with the resource's
/// path (`/mcp`) appended, as RFC 9728 §3.1 builds it for a resource at `/mcp`.
pub const METADATA_PATHS: [&str; 2] = [METADATA_PATH, "/.well-known/oauth-protected-resource/mcp"];

/// The metadata URL under `public_base` (scheme, host and any prefix the face is served under,
/// e.g. `https://mcp.example.com`): the URL a challenge points at.
pub fn metadata_url(public_base: &str) -> String {
    format!("{}{METADATA_PATH}", public_base.trim_end_matches('/'))
}

/// The protected resource metadata (RFC 9728 §2): `resource` is the audience, the issuer its
/// only authorization server. `scopes_supported` holds the scopes `/mcp` needs and not the admin
/// ones, since a client asks for all it lists and should not get admin rights by default.
pub fn protected_resource(settings: &AuthSettings) -> Value {
    json!({
        "resource": settings.audience,
        "authorization_servers": [settings.issuer],
        "scopes_supported": settings.scopes,
        "bearer_methods_supported": ["header"],
    })
}

/// The `error` of a challenge (RFC 6750 §3.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BearerError {
    /// `invalid_token`: a token came and failed a check (401).
    InvalidToken,
    /// `insufficient_scope`: a valid token short of scope (403).
    InsufficientScope,
}

impl BearerError {
    /// The code as written in the challenge.
    pub fn code(self) -> &'static str {
        match self {
            Self::InvalidToken => "invalid_token",
            Self::InsufficientScope => "insufficient_scope",
        }
    }
}

/// The `WWW-Authenticate` value: `Bearer resource_metadata="<metadata_url>"`, then the error
/// and its description when there is one, then `scope` when `scopes` is not empty.
pub fn challenge(
    metadata_url: &str,
    error: Option<(BearerError, &str)>,
    scopes: &[String],
) -> String {
    let mut out = format!("Bearer resource_metadata=\"{}\"", quoted(metadata_url));
    if let Some((code, description)) = error {
        out.push_str(&format!(
            ", error=\"{}\", error_description=\"{}\"",
            code.code(),
            description_text(description)
        ));
    }
    if !scopes.is_empty() {
        out.push_str(&format!(", scope=\"{}\"", quoted(&scopes.join(" "))));
    }
    out
}

/// The token of an `Authorization` value: `None` when it is not the `Bearer` scheme (any case)
/// or carries nothing, a refusal when it is `Bearer` with more than one word after it. The
/// token's characters are not checked here: a JWT's parts are base64url, which the token's
/// checks read, so a cached token costs no pass over its text.
pub fn bearer_token(authorization: &str) -> Result<Option<&str>, Invalid> {
    let value = authorization.trim_matches(|c| c == ' ' || c == '\t');
    let Some((scheme, rest)) = value.split_once([' ', '\t']) else {
        return Ok(None);
    };
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Ok(None);
    }
    let token = rest.trim_start_matches([' ', '\t']);
    if memchr::memchr2(b' ', b'\t', token.as_bytes()).is_some() {
        return Err(Invalid::Malformed(
            "the Bearer value is more than one token",
        ));
    }
    Ok(Some(token))
}

/// `text` escaped for a quoted-string.
fn quoted(text: &str) -> String {
    text.replace('\\', "\\\\").replace('"', "\\\"")
}

/// `text` as an `error_description` may hold it (RFC 6750 §3: printable ASCII without `"` and
/// `\`), cut to 200 characters.
fn description_text(text: &str) -> String {
    text.chars()
        .take(200)
        .map(|c| match c {
            '"' => '\'',
            '\\' => '/',
            c if c == ' ' || c.is_ascii_graphic() => c,
            _ => '?',
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> AuthSettings {
        let mut settings =
            AuthSettings::new("https://issuer.example.com", "https://mcp.example.com/mcp");
        settings.scopes = vec!["mcp:use".to_owned(), "mcp:tools".to_owned()];
        settings.admin_scopes = vec!["mcp:admin".to_owned()];
        settings
    }

    #[test]
    fn metadata_names_the_audience_the_issuer_and_the_mcp_scopes() {
        assert_eq!(
            protected_resource(&settings()),
            json!({
                "resource": "https://mcp.example.com/mcp",
                "authorization_servers": ["https://issuer.example.com"],
                "scopes_supported": ["mcp:use", "mcp:tools"],
                "bearer_methods_supported": ["header"],
            })
        );
    }

    #[test]
    fn the_metadata_url_is_under_the_public_base_and_both_paths_answer() {
        assert_eq!(
            metadata_url("https://mcp.example.com/"),
            "https://mcp.example.com/.well-known/oauth-protected-resource"
        );
        assert_eq!(
            metadata_url("http://127.0.0.1:8080"),
            "http://127.0.0.1:8080/.well-known/oauth-protected-resource"
        );
        assert_eq!(
            METADATA_PATHS,
            [
                "/.well-known/oauth-protected-resource",
                "/.well-known/oauth-protected-resource/mcp"
            ]
        );
    }

    #[test]
    fn a_challenge_without_a_token_names_the_metadata_and_the_scopes() {
        let scopes = vec!["a".to_owned(), "b".to_owned()];
        assert_eq!(
            challenge(
                "https://x/.well-known/oauth-protected-resource",
                None,
                &scopes
            ),
            "Bearer resource_metadata=\"https://x/.well-known/oauth-protected-resource\", scope=\"a b\""
        );
        assert_eq!(
            challenge("https://x/m", None, &[]),
            "Bearer resource_metadata=\"https://x/m\""
        );
    }

    #[test]
    fn a_challenge_after_a_token_says_invalid_token_or_insufficient_scope() {
        let scopes = vec!["a".to_owned()];
        assert_eq!(
            challenge(
                "https://x/m",
                Some((BearerError::InvalidToken, "it expired \"now\"\n")),
                &scopes
            ),
            "Bearer resource_metadata=\"https://x/m\", error=\"invalid_token\", \
             error_description=\"it expired 'now'?\", scope=\"a\""
        );
        let forbidden = challenge(
            "https://x/m",
            Some((BearerError::InsufficientScope, "short")),
            &scopes,
        );
        assert!(
            forbidden.contains("error=\"insufficient_scope\""),
            "{forbidden}"
        );
        assert!(forbidden.ends_with("scope=\"a\""), "{forbidden}");
    }

    #[test]
    fn the_bearer_scheme_is_read_in_any_case() {
        assert_eq!(bearer_token("Bearer abc.def.ghi"), Ok(Some("abc.def.ghi")));
        assert_eq!(bearer_token("bearer abc"), Ok(Some("abc")));
        assert_eq!(bearer_token("BEARER   abc==  "), Ok(Some("abc==")));
        assert_eq!(bearer_token("Basic dXNlcjpwYXNz"), Ok(None));
        assert_eq!(bearer_token("Bearer"), Ok(None));
        assert_eq!(bearer_token("Bearer "), Ok(None));
        assert_eq!(bearer_token(""), Ok(None));
        assert!(bearer_token("Bearer abc def").is_err());
        assert!(bearer_token("Bearer abc\tdef").is_err());
    }
}
