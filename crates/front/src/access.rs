//! Who may do what (SPEC §14): each server's `authorize` rule and `rateLimit`, judged for a
//! client's request once the dispatcher knows which server (and which upstream tool, prompt or
//! resource) it goes to, and for each item of a list the client is shown.
//!
//! It judges and refuses (noting the route and a refusal on the request's audit trail); it
//! never sends anything upstream, and a refused request has not run.
//! Who the caller is comes from the client ([`crate::caller`]); a client with no caller is
//! judged with no claims (and, for the limits, as one anonymous identity).

use std::collections::HashMap;
use std::sync::Arc;

use mcp_supervisor::core::authorize::{Claims, Request, Rule, Target};
use mcp_supervisor::core::config::{AuthConfig, Config, RateLimit};
use mcp_supervisor::link::RpcError;
use serde_json::json;

use crate::audit::Outcome;
use crate::client::Client;
use crate::proxy::Proxy;
use crate::rate::{self, Limits, Rate, RetryAfter};

/// The JSON-RPC error code of a request an `authorize` rule denied (it did not run).
pub const DENIED: i64 = -32003;
/// The JSON-RPC error code of a request past a rate limit (it did not run); its `data` holds
/// `retryAfter` in seconds, which an HTTP face also gives as `429` with `Retry-After`.
pub const RATE_LIMITED: i64 = -32029;

/// The rules of one config: each server's `authorize`, and every rate limit.
#[derive(Default)]
pub struct Rules {
    authorize: HashMap<String, Rule>,
    limits: Option<Arc<Limits>>,
    /// The rates the limits were made from: a reload that keeps them keeps the budgets.
    rates: Rates,
    /// The config's `auth`, as read: a transport reads it once, at start.
    auth: Option<AuthConfig>,
}

type Rates = (Option<RateLimit>, Vec<(String, RateLimit)>);

impl Rules {
    /// The rules `config` sets. A rate that the limiter cannot hold (the config checks the same
    /// bounds first) is left out, with a warning.
    pub fn of(config: &Config) -> Self {
        let authorize = config
            .servers
            .iter()
            .filter_map(|s| Some((s.name.clone(), s.authorize.clone()?)))
            .collect();
        let rate = |limit: &RateLimit, whose: &str| {
            Rate::new(limit.requests_per_second, limit.burst)
                .map_err(|error| tracing::warn!("rateLimit of {whose} left out: {error}"))
                .ok()
        };
        let rates: Rates = (
            config.rate_limit,
            config
                .servers
                .iter()
                .filter_map(|s| Some((s.name.clone(), s.rate_limit?)))
                .collect(),
        );
        let top = rates.0.as_ref().and_then(|l| rate(l, "the proxy"));
        let servers: Vec<(String, Rate)> = rates
            .1
            .iter()
            .filter_map(|(name, limit)| Some((name.clone(), rate(limit, name)?)))
            .collect();
        let limits =
            (top.is_some() || !servers.is_empty()).then(|| Arc::new(Limits::new(top, servers)));
        Self {
            authorize,
            limits,
            rates,
            auth: config.auth.clone(),
        }
    }

    /// These rules, keeping `old`'s budgets when the rates are the same (a reload that did not
    /// change them does not give every caller a fresh budget).
    fn keeping(mut self, old: &Rules) -> Self {
        if self.rates == old.rates {
            self.limits = old.limits.clone();
        }
        if self.auth != old.auth {
            tracing::warn!(
                "the config's \"auth\" changed: it is read at start, and the running one stays; restart the proxy to apply it"
            );
            self.auth = old.auth.clone();
        }
        self
    }

    /// Whether any server has a rule (lists are then filtered per caller).
    pub fn any_rule(&self) -> bool {
        !self.authorize.is_empty()
    }

    /// Spend one request of the caller's top budget (`rateLimit` at the top of the config).
    pub fn check_top(&self, key: &str) -> Result<(), RetryAfter> {
        match &self.limits {
            Some(limits) => limits.check(key, rate::Scope::Top),
            None => Ok(()),
        }
    }
}

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
        if let Some(rule) = rules.authorize.get(server) {
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
        if let Some(limits) = &rules.limits {
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
        let Some(rule) = rules.authorize.get(server) else {
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
