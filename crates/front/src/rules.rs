//! The rules of one config, as plain values: each server's `authorize` rule and every rate
//! limit (with the budgets they keep), built from the config and kept across a reload that does
//! not change them. [`crate::access`] judges requests by them.
//!
//! It never judges a request itself and never holds a client.

use std::collections::HashMap;
use std::sync::Arc;

use mcp_supervisor::core::authorize::Rule;
use mcp_supervisor::core::config::{AuthConfig, Config, RateLimit};

use crate::rate::{self, Limits, Rate, RetryAfter};

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
    pub(crate) fn keeping(mut self, old: &Rules) -> Self {
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

    /// The `authorize` rule of `server`, if it has one.
    pub(crate) fn rule(&self, server: &str) -> Option<&Rule> {
        self.authorize.get(server)
    }

    /// The rate limits, if the config sets any.
    pub(crate) fn limits(&self) -> Option<&Limits> {
        self.limits.as_deref()
    }
}
