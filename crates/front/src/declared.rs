//! What a client declared it can do, as far as routing a server's request to it needs
//! ([`Capabilities`]), and the error a server's request gets when the client did not declare
//! what it needs ([`undeclared`]).
//!
//! Plain values: no I/O, no runtime.

use mcp_supervisor::link::RpcError;
use serde::Deserialize;

/// The error a server's request gets when its client did not declare the capability it needs.
pub(crate) fn undeclared(method: &str) -> RpcError {
    RpcError::new(
        -32601,
        format!("the client did not declare the capability `{method}` needs"),
    )
}

/// What a client declared it can do, as far as routing a server's request needs.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Capabilities {
    pub(crate) roots: bool,
    pub(crate) sampling: bool,
    pub(crate) elicitation: bool,
}

impl Capabilities {
    pub(crate) fn read(text: &str) -> Self {
        #[derive(Deserialize)]
        struct Declared {
            #[serde(default)]
            roots: Option<serde::de::IgnoredAny>,
            #[serde(default)]
            sampling: Option<serde::de::IgnoredAny>,
            #[serde(default)]
            elicitation: Option<serde::de::IgnoredAny>,
        }
        serde_json::from_str::<Declared>(text)
            .map(|d| Self {
                roots: d.roots.is_some(),
                sampling: d.sampling.is_some(),
                elicitation: d.elicitation.is_some(),
            })
            .unwrap_or_default()
    }

    /// Whether a client with these capabilities can answer `method`.
    pub(crate) fn allow(&self, method: &str) -> bool {
        match method {
            "roots/list" => self.roots,
            "sampling/createMessage" => self.sampling,
            "elicitation/create" => self.elicitation,
            _ => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capabilities_gate_the_servers_requests() {
        let some = Capabilities::read(r#"{"roots":{"listChanged":true},"sampling":{}}"#);
        assert!(some.allow("roots/list") && some.allow("sampling/createMessage"));
        assert!(!some.allow("elicitation/create"));
        assert!(some.allow("ping"));
        let none = Capabilities::read("{}");
        assert!(!none.allow("roots/list"));
    }
}
