//! `${VAR}` and `${VAR:-default}` references in config strings, resolved through an injected
//! lookup. It never reads the process environment itself, and its errors never hold the text being
//! expanded (it may be a secret), only variable names.

/// Why a string could not be expanded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ExpandError {
    /// `${NAME}` without a default, and the lookup has no `NAME`.
    Unset(String),
    /// `${…}` whose name is not letters, digits and `_` (not starting with a digit).
    Malformed,
    /// `${` with no closing `}`.
    Unterminated,
}

impl ExpandError {
    /// The message for a problem at the path of the expanded value.
    pub(crate) fn message(&self) -> String {
        match self {
            ExpandError::Unset(name) => format!("references ${{{name}}}, which is not set"),
            ExpandError::Malformed => {
                "contains a malformed \"${...}\" reference: a variable name is \
                 letters, digits and \"_\", not starting with a digit"
                    .to_owned()
            }
            ExpandError::Unterminated => "has a \"${\" with no closing \"}\"".to_owned(),
        }
    }
}

/// Replaces every `${NAME}` by the lookup's value of `NAME`, and every `${NAME:-default}` by that
/// value or, when it is unset or empty (as in a POSIX shell), by `default`. Text outside references,
/// a lone `$` included, is kept as written. Every error in the string is reported.
pub(crate) fn expand(
    text: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<String, Vec<ExpandError>> {
    let mut out = String::with_capacity(text.len());
    let mut errors = Vec::new();
    let mut rest = text;
    while let Some((before, after)) = rest.split_once("${") {
        out.push_str(before);
        let Some((inner, tail)) = after.split_once('}') else {
            errors.push(ExpandError::Unterminated);
            rest = "";
            break;
        };
        rest = tail;
        let (name, default) = match inner.split_once(":-") {
            Some((name, default)) => (name, Some(default)),
            None => (inner, None),
        };
        if !is_var_name(name) {
            errors.push(ExpandError::Malformed);
            continue;
        }
        match (lookup(name), default) {
            (Some(value), None) => out.push_str(&value),
            (Some(value), Some(_)) if !value.is_empty() => out.push_str(&value),
            (_, Some(default)) => out.push_str(default),
            (None, None) => errors.push(ExpandError::Unset(name.to_owned())),
        }
    }
    out.push_str(rest);
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(errors)
    }
}

fn is_var_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(name: &str) -> Option<String> {
        match name {
            "HOME" => Some("/home/u".to_owned()),
            "TOKEN" => Some("s3cret".to_owned()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    fn ok(text: &str) -> String {
        expand(text, &lookup).unwrap()
    }

    fn err(text: &str) -> Vec<ExpandError> {
        expand(text, &lookup).unwrap_err()
    }

    #[test]
    fn plain_text_is_unchanged() {
        for text in ["", "abc", "$HOME", "cost: $5", "{}", "$", "a$", "a}b"] {
            assert_eq!(ok(text), text);
        }
    }

    #[test]
    fn references_are_replaced() {
        assert_eq!(ok("${HOME}"), "/home/u");
        assert_eq!(ok("Bearer ${TOKEN}"), "Bearer s3cret");
        assert_eq!(ok("${HOME}/x:${TOKEN}"), "/home/u/x:s3cret");
        assert_eq!(ok("${EMPTY}"), "");
        assert_eq!(ok("$${HOME}"), "$/home/u");
    }

    #[test]
    fn defaults_apply_when_unset_or_empty() {
        assert_eq!(ok("${NOPE:-fallback}"), "fallback");
        assert_eq!(ok("${EMPTY:-fallback}"), "fallback");
        assert_eq!(ok("${HOME:-fallback}"), "/home/u");
        assert_eq!(ok("${NOPE:-}"), "");
        assert_eq!(ok("${NOPE:-a:-b}"), "a:-b");
        assert_eq!(ok("${NOPE:-http://x}"), "http://x");
    }

    #[test]
    fn every_error_is_reported_without_the_text() {
        assert_eq!(
            err("${A} ${HOME} ${B}"),
            vec![
                ExpandError::Unset("A".into()),
                ExpandError::Unset("B".into())
            ]
        );
        assert_eq!(err("${}"), vec![ExpandError::Malformed]);
        assert_eq!(err("${1X}"), vec![ExpandError::Malformed]);
        assert_eq!(err("${a b}"), vec![ExpandError::Malformed]);
        assert_eq!(err("${:-x}"), vec![ExpandError::Malformed]);
        assert_eq!(err("x ${TOKEN"), vec![ExpandError::Unterminated]);
        assert_eq!(
            err("${NOPE} ${"),
            vec![ExpandError::Unset("NOPE".into()), ExpandError::Unterminated]
        );
        for e in err("s3cret ${bad name} ${") {
            assert!(!e.message().contains("s3cret"));
        }
    }

    #[test]
    fn messages() {
        assert_eq!(
            ExpandError::Unset("API_TOKEN".into()).message(),
            "references ${API_TOKEN}, which is not set"
        );
    }
}
