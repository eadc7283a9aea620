//! `Secret`, the wrapper for config values that may hold credentials (`env` and `headers` values).
//! It must never let its contents reach Debug or Display output; only `expose` reads them.

use std::fmt;

/// A string that is never shown: Debug and Display print `<redacted>`. Equality compares the
/// contents, so a reload can tell a changed secret from an unchanged one.
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The contents, for handing to a process or a request. Never log them.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Self {
        Self(value)
    }
}

impl From<&str> for Secret {
    fn from(value: &str) -> Self {
        Self(value.to_owned())
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_and_display_never_show_the_contents() {
        let secret = Secret::new("hunter2");
        assert_eq!(format!("{secret:?}"), "<redacted>");
        assert_eq!(format!("{secret}"), "<redacted>");
        assert_eq!(
            format!("{:?}", vec![("K", secret.clone())]),
            r#"[("K", <redacted>)]"#
        );
        assert_eq!(secret.expose(), "hunter2");
    }

    #[test]
    fn equality_compares_contents() {
        assert_eq!(Secret::new("a"), Secret::from("a"));
        assert_ne!(Secret::new("a"), Secret::from("b".to_owned()));
    }
}
