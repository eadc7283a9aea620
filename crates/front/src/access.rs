//! Who may do what (SPEC §14): each server's `authorize` rule and `rateLimit`, judged for a
//! client's request once the dispatcher knows which server (and which upstream tool, prompt or
//! resource) it goes to, and for each item of a list the client is shown.
//!
//! It judges and refuses (noting the route and a refusal on the request's audit trail); it
//! never sends anything upstream, and a refused request has not run.
//! Who the caller is comes from the client ([`crate::caller`]); a client with no caller is
//! judged with no claims (and, for the limits, as one anonymous identity).

use std::sync::Arc;

use mcp_supervisor::core::authorize::{Claims, Request, Target};
use mcp_supervisor::core::config::Config;
use mcp_supervisor::link::RpcError;
use serde_json::json;

use crate::audit::Outcome;
use crate::client::Client;
use crate::proxy::Proxy;
use crate::rate::{self, RetryAfter};
pub use crate::rules::Rules;

/// The JSON-RPC error code of a request an `authorize` rule denied (it did not run).
pub const DENIED: i64 = -32003;
/// The JSON-RPC error code of a request past a rate limit (it did not run); its `data` holds
/// `retryAfter` in seconds, which an HTTP face also gives as `429` with `Retry-After`.
pub const RATE_LIMITED: i64 = -32029;

/// The error of a request past `retry`.
pub fn rate_limited(retry: &RetryAfter) -> RpcError {
    with_data(
        RpcError::new(RATE_LIMITED, retry.error_text()),
        json!({ "retryAfter": retry.seconds() }),
    )
}

impl Proxy {
    /// Judge a client's request to `server` (`method`, naming `target` by its upstream name):
    /// its `authorize` rule, then its rate limit. A refusal is the error the client gets; the
    /// request did not run.
    pub(crate) fn admit(
        &self,
        client: &Client,
        server: &str,
        method: &str,
        target: Target<'_>,
    ) -> Result<(), RpcError> {
        crate::trail::routed(server, target);
        let rules = self.rules();
        let caller = client.caller();
        if let Some(rule) = rules.rule(server) {
            let no_claims = Claims::default();
            let jwt = caller.as_ref().map_or(&no_claims, |c| &c.claims);
            let request = Request {
                jwt,
                server,
                method,
                target,
            };
            if let Err(why) = rule.check(&request) {
                tracing::info!(
                    server,
                    method,
                    subject = caller.as_ref().map(|c| c.subject.as_str()),
                    "denied: {why}"
                );
                crate::trail::refused(Outcome::Denied);
                return Err(denied(server, method, target));
            }
        }
        if let Some(limits) = rules.limits() {
            let key = caller.as_ref().map_or(rate::ANONYMOUS, |c| c.key());
            limits
                .check(key, rate::Scope::Server(server))
                .map_err(|retry| {
                    crate::trail::refused(Outcome::RateLimited);
                    rate_limited(&retry)
                })?;
        }
        Ok(())
    }

    /// Spend one request of the client's top budget (`rateLimit` at the top of the config):
    /// every request of either era does, before it is routed.
    pub(crate) fn spend_top(&self, scope: &crate::client::Scope) -> Result<(), RpcError> {
        let caller = scope.client.caller();
        self.rules()
            .check_top(caller.as_ref().map_or(rate::ANONYMOUS, |c| c.key()))
            .map_err(|retry| {
                crate::trail::refused(Outcome::RateLimited);
                rate_limited(&retry)
            })
    }

    /// Whether a client may use `target` of `server` by `method` (for the lists it is shown):
    /// the rule alone, no budget spent.
    pub(crate) fn may(
        &self,
        rules: &Rules,
        client: &Client,
        server: &str,
        method: &str,
        target: Target<'_>,
    ) -> bool {
        let Some(rule) = rules.rule(server) else {
            return true;
        };
        let caller = client.caller();
        let no_claims = Claims::default();
        let jwt = caller.as_ref().map_or(&no_claims, |c| &c.claims);
        rule.allows(&Request {
            jwt,
            server,
            method,
            target,
        })
    }

    /// The rules in force (the config's as last loaded).
    pub(crate) fn rules(&self) -> Arc<Rules> {
        crate::json::lock(&self.access).clone()
    }

    /// Put the rules of `config` in force (at start and on reload).
    pub fn set_rules(&self, config: &Config) {
        let mut rules = crate::json::lock(&self.access);
        *rules = Arc::new(Rules::of(config).keeping(&rules));
    }
}

/// The error of a denied request: what was denied, and that it did not run.
fn denied(server: &str, method: &str, target: Target<'_>) -> RpcError {
    let what = match target {
        Target::Tool(name) => format!("tool \"{name}\" of server \"{server}\""),
        Target::Prompt(name) => format!("prompt \"{name}\" of server \"{server}\""),
        Target::Resource(uri) => format!("resource \"{uri}\" of server \"{server}\""),
        Target::None => format!("{method} of server \"{server}\""),
    };
    with_data(
        RpcError::new(
            DENIED,
            format!(
                "Denied: the caller may not use the {what} (its authorize rule); the request did not run"
            ),
        ),
        json!({ "denied": true, "server": server, "method": method }),
    )
}

fn with_data(mut error: RpcError, data: serde_json::Value) -> RpcError {
    error.data = serde_json::value::to_raw_value(&data).ok();
    error
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_denial_names_what_was_denied_and_says_it_did_not_run() {
        let error = denied("gh", "tools/call", Target::Tool("delete_repo"));
        assert_eq!(error.code, DENIED);
        assert!(
            error
                .message
                .contains("tool \"delete_repo\" of server \"gh\"")
        );
        assert!(error.message.contains("did not run"));
    }
}
