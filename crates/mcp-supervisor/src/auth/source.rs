//! One server's token source at run time: the bearer token each request carries, refreshed
//! before expiry and once on a 401, single-flight (concurrent callers wait for the one refresh
//! in flight and then use its token); client-credentials tokens bought without a person; and the
//! server's "needs a login" status, which flips back by itself when the token file gets a usable
//! token.
//!
//! It never logs a token, never puts one into an error or status text, and never starts an
//! interactive login (only `mcp-supervisor login` does).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use mcp_supervisor_core::classify::Failure;
use mcp_supervisor_core::config::{Grant, OAuthConfig};
use reqwest::Url;
use tokio::sync::{Mutex, watch};

use super::discovery::{self, Challenge};
use super::flow::{self, FlowError, TokenError};
use super::store::{Entry, TokenStore};
use crate::link::BoxFuture;

/// How often the token file is looked at while the server needs a login.
const WATCH_EVERY: Duration = Duration::from_secs(1);

/// Unix seconds now.
pub fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// What the HTTP wire asks of a token source.
pub trait Credentials: Send + Sync + 'static {
    /// The token for the next request (refreshed first when due); `None`: send none.
    fn bearer(&self) -> BoxFuture<'_, Result<Option<String>, Failure>>;
    /// The server refused a request made with `used` (HTTP `status`, its `WWW-Authenticate`).
    /// `Ok`: a new token is ready, send the request once more. `Err`: fail the request.
    fn rejected<'a>(
        &'a self,
        status: u16,
        challenge: Option<&'a str>,
        used: Option<&'a str>,
    ) -> BoxFuture<'a, Result<(), Failure>>;
}

struct State {
    entry: Option<Entry>,
    /// The token file's modification time when `entry` was read.
    seen: Option<SystemTime>,
    /// The last challenge the server sent (its scope and metadata URL), for client credentials.
    challenge: Option<Challenge>,
}

/// Why a server's token source could not be made: OAuth is off for it until the config is
/// fixed.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The server's URL does not parse.
    #[error("`{url}` is not a valid URL: {source}; fix the server's url in the config")]
    InvalidUrl {
        /// The URL as configured.
        url: String,
        /// What the URL parser said.
        source: url::ParseError,
    },
    /// The HTTP client for OAuth could not be built.
    #[error(transparent)]
    Client(#[from] FlowError),
}

/// One server's tokens.
pub struct TokenSource {
    server: String,
    url: Url,
    config: OAuthConfig,
    store: TokenStore,
    http: reqwest::Client,
    state: Mutex<State>,
    /// `Some(why)` while the server needs `mcp-supervisor login`.
    status: watch::Sender<Option<String>>,
    /// Requests made to token endpoints (refresh, client credentials): the refresh-storm figure.
    token_requests: AtomicU64,
    /// The last refusal since the current connection attempt began (see [`TokenSource::escalate`]).
    refused: std::sync::Mutex<Option<String>>,
}

impl TokenSource {
    /// A token source for server `server` at `url`, with its `oauth` config and the store its
    /// tokens are kept in; an error names what is wrong with the URL or the HTTP client.
    pub fn new(
        server: &str,
        url: &str,
        config: OAuthConfig,
        store: TokenStore,
    ) -> Result<Arc<Self>, SourceError> {
        let url = Url::parse(url).map_err(|source| SourceError::InvalidUrl {
            url: url.to_string(),
            source,
        })?;
        let http = flow::client()?;
        let (status, _) = watch::channel(None);
        Ok(Arc::new(Self {
            server: server.to_string(),
            url,
            config,
            store,
            http,
            state: Mutex::new(State {
                entry: None,
                seen: None,
                challenge: None,
            }),
            status,
            token_requests: AtomicU64::new(0),
            refused: std::sync::Mutex::new(None),
        }))
    }

    /// `Some(why)` while the server needs a login; watch it to learn when that ends.
    pub fn status(&self) -> watch::Receiver<Option<String>> {
        self.status.subscribe()
    }

    /// How many token requests (refresh or client credentials) this source made.
    pub fn token_requests(&self) -> u64 {
        self.token_requests.load(Ordering::SeqCst)
    }

    fn login_hint(&self) -> String {
        format!("run `mcp-supervisor login {}`", self.server)
    }

    /// A new connection attempt begins: refusals before it no longer count.
    pub fn attempt_started(&self) {
        if let Ok(mut refused) = self.refused.lock() {
            *refused = None;
        }
    }

    /// A connection attempt failed: if the server refused it for authorization, the server
    /// cannot be used until someone signs in (or an operator changes its grants), so it needs a
    /// login; retrying alone would only repeat the refusal. Whether it does.
    pub fn escalate(self: &Arc<Self>) -> bool {
        let refused = self.refused.lock().ok().and_then(|mut r| r.take());
        match refused {
            Some(why) => {
                self.set_needs_login(why);
                true
            }
            None => self.status.borrow().is_some(),
        }
    }

    /// A refusal to hand to the wire, noted for [`TokenSource::escalate`].
    fn refusal(&self, message: String) -> Failure {
        if let Ok(mut refused) = self.refused.lock() {
            *refused = Some(message.clone());
        }
        Failure::Unauthorized { message }
    }

    /// Marks the server as needing a login (once), and watches the token file until a usable
    /// token appears.
    fn needs_login(self: &Arc<Self>, why: String) -> Failure {
        let message = format!("{why}; {}", self.login_hint());
        self.set_needs_login(message.clone());
        Failure::Unauthorized { message }
    }

    fn set_needs_login(self: &Arc<Self>, message: String) {
        let was = self.status.send_replace(Some(message.clone()));
        if was.is_none() {
            tracing::warn!(server = %self.server, "needs a login: {message}");
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(self.clone().watch_file());
            }
        }
    }

    /// While a login is needed: look at the token file every second; a new usable entry ends it.
    async fn watch_file(self: Arc<Self>) {
        let mut closed = self.status.subscribe();
        loop {
            tokio::select! {
                () = tokio::time::sleep(WATCH_EVERY) => {}
                changed = closed.wait_for(Option::is_none) => {
                    let _ = changed;
                    return;
                }
            }
            if self.status.receiver_count() == 0 && Arc::strong_count(&self) <= 1 {
                return;
            }
            let mut state = self.state.lock().await;
            let modified = self.store.modified();
            if modified.is_none() || modified == state.seen {
                continue;
            }
            state.seen = modified;
            match self.store.load(&self.server, self.url.as_str()) {
                Ok(Some(entry))
                    if state.entry.as_ref().map(|e| &e.access_token)
                        != Some(&entry.access_token) =>
                {
                    state.entry = Some(entry);
                    drop(state);
                    tracing::info!(server = %self.server, "a new token is in the token file; resuming");
                    self.status.send_replace(None);
                    return;
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(server = %self.server, "{e}"),
            }
        }
    }

    /// Reads the token file when it changed since the last read.
    fn reload(&self, state: &mut State) {
        let modified = self.store.modified();
        if modified.is_some() && modified == state.seen && state.entry.is_some() {
            return;
        }
        state.seen = modified;
        match self.store.load(&self.server, self.url.as_str()) {
            Ok(Some(entry)) => state.entry = Some(entry),
            Ok(None) => {}
            Err(e) => tracing::warn!(server = %self.server, "{e}"),
        }
    }

    fn save(&self, state: &mut State) {
        if let Err(e) = self.store.save(&self.server, state.entry.as_ref()) {
            tracing::warn!(server = %self.server, "{e}");
        }
        state.seen = self.store.modified();
    }

    /// Refreshes `state`'s token (its refresh token, or client credentials). Called under the
    /// state lock: that is the single flight.
    async fn renew(
        self: &Arc<Self>,
        state: &mut State,
        scope: Option<&str>,
    ) -> Result<(), Failure> {
        if self.config.grant == Grant::ClientCredentials {
            return self.client_credentials(state, scope).await;
        }
        let Some(entry) = state.entry.clone() else {
            return Err(self.needs_login(format!(
                "server \"{}\" needs authorization and has no token",
                self.server
            )));
        };
        let Some(refresh) = entry.refresh_token.clone() else {
            return Err(self.needs_login(format!(
                "the token for server \"{}\" expired and there is no refresh token",
                self.server
            )));
        };
        let client = flow::Client {
            id: entry.client_id.clone(),
            secret: entry.client_secret.clone(),
            method: entry.auth_method.unwrap_or(discovery::AuthMethod::None),
        };
        let mut params = vec![
            ("grant_type", "refresh_token"),
            ("refresh_token", refresh.as_str()),
        ];
        if let Some(resource) = &entry.resource {
            params.push(("resource", resource.as_str()));
        }
        self.token_requests.fetch_add(1, Ordering::SeqCst);
        match flow::token(&self.http, &entry.token_endpoint, &client, &params).await {
            Ok(token) => {
                let now = now_unix();
                let mut next = entry;
                next.access_token = token.access_token;
                if token.refresh_token.is_some() {
                    next.refresh_token = token.refresh_token;
                }
                next.expires_at = discovery::expires_at(now, token.expires_in);
                next.lifetime = token.expires_in;
                if token.scope.is_some() {
                    next.scope = token.scope;
                }
                state.entry = Some(next);
                self.save(state);
                tracing::info!(server = %self.server, "token refreshed");
                Ok(())
            }
            Err(TokenError::Refused(why)) => {
                Err(self.needs_login(format!("refreshing the token failed: {why}")))
            }
            Err(TokenError::Other(why)) => Err(Failure::Unauthorized {
                message: format!("refreshing the token failed: {why}"),
            }),
        }
    }

    /// A token for a machine client: discovery (once), then the client-credentials grant.
    async fn client_credentials(
        self: &Arc<Self>,
        state: &mut State,
        scope: Option<&str>,
    ) -> Result<(), Failure> {
        let fail = |message: String| Failure::Unauthorized { message };
        let (Some(id), Some(var)) = (&self.config.client_id, &self.config.client_secret_env) else {
            return Err(fail(format!(
                "server \"{}\" uses client_credentials without clientId and clientSecretEnv",
                self.server
            )));
        };
        let secret = std::env::var(var).map_err(|_| {
            fail(format!(
                "the client secret for server \"{}\" is not in the environment: set {var}",
                self.server
            ))
        })?;
        let found = flow::discover(&self.http, &self.url, state.challenge.as_ref())
            .await
            .map_err(|e| fail(e.to_string()))?;
        let method = discovery::auth_method(
            None,
            true,
            found
                .metadata
                .token_endpoint_auth_methods_supported
                .as_deref(),
        );
        let client = flow::Client {
            id: id.clone(),
            secret: Some(secret),
            method,
        };
        let wanted = discovery::union_scopes(
            discovery::choose_scope(
                self.config.scopes.as_deref(),
                state.challenge.as_ref().and_then(|c| c.scope.as_deref()),
                found.resource_scopes.as_deref(),
                None,
            )
            .as_deref(),
            scope,
        );
        let mut params = vec![
            ("grant_type", "client_credentials"),
            ("resource", found.resource.as_str()),
        ];
        if let Some(scope) = &wanted {
            params.push(("scope", scope.as_str()));
        }
        self.token_requests.fetch_add(1, Ordering::SeqCst);
        let token = flow::token(&self.http, &found.metadata.token_endpoint, &client, &params)
            .await
            .map_err(|e| {
                fail(format!(
                    "the client-credentials grant failed: {}",
                    e.message()
                ))
            })?;
        let now = now_unix();
        state.entry = Some(Entry {
            server_url: self.url.to_string(),
            resource: Some(found.resource),
            issuer: found.issuer,
            token_endpoint: found.metadata.token_endpoint,
            client_id: id.clone(),
            client_secret: None,
            auth_method: Some(method),
            access_token: token.access_token,
            refresh_token: None,
            expires_at: discovery::expires_at(now, token.expires_in),
            lifetime: token.expires_in,
            scope: token.scope.or(wanted),
            wanted_scope: None,
        });
        // Machine tokens are kept in memory only: the secret buys a new one at each start.
        tracing::info!(server = %self.server, "client-credentials token obtained");
        Ok(())
    }

    async fn bearer_now(self: &Arc<Self>) -> Result<Option<String>, Failure> {
        if let Some(why) = self.status.borrow().clone() {
            return Err(Failure::Unauthorized { message: why });
        }
        let mut state = self.state.lock().await;
        if self.config.grant == Grant::AuthorizationCode {
            self.reload(&mut state);
        }
        let due = match &state.entry {
            None => self.config.grant == Grant::ClientCredentials,
            Some(e) => discovery::refresh_due(e.expires_at, e.lifetime, now_unix()),
        };
        if due {
            self.renew(&mut state, None).await?;
        }
        Ok(state.entry.as_ref().map(|e| e.access_token.clone()))
    }

    async fn rejected_now(
        self: &Arc<Self>,
        status: u16,
        header: Option<&str>,
        used: Option<&str>,
    ) -> Result<(), Failure> {
        let challenge = header
            .and_then(discovery::parse_challenge)
            .unwrap_or_default();
        let mut state = self.state.lock().await;
        if self.config.grant == Grant::AuthorizationCode {
            self.reload(&mut state);
        }
        let current = state.entry.as_ref().map(|e| e.access_token.clone());
        if status == 403 {
            let Some(needed) = challenge
                .scope
                .clone()
                .filter(|_| challenge.insufficient_scope())
            else {
                return Err(self.refusal("the server refused the request (HTTP 403)".to_string()));
            };
            let granted = state.entry.as_ref().and_then(|e| e.scope.clone());
            if discovery::scopes_include(granted.as_deref(), &needed) {
                // Asking again would bring the same answer: no loop.
                return Err(self.refusal(format!(
                    "the server refused the request for lack of scope \"{needed}\", which the \
                     token already has; signing in again would not help: ask the server's operator"
                )));
            }
            state.challenge = Some(challenge.clone());
            if self.config.grant == Grant::ClientCredentials {
                let scope = discovery::union_scopes(granted.as_deref(), Some(&needed));
                return self.client_credentials(&mut state, scope.as_deref()).await;
            }
            if let Some(entry) = state.entry.as_mut() {
                entry.wanted_scope =
                    discovery::union_scopes(entry.wanted_scope.as_deref(), Some(&needed));
            }
            self.save(&mut state);
            return Err(self.refusal(format!(
                "this request needs scope \"{needed}\", which the token lacks; {} to grant it",
                self.login_hint()
            )));
        }
        // 401: someone else already renewed while we waited for the lock.
        if current.is_some() && current.as_deref() != used {
            return Ok(());
        }
        state.challenge = Some(challenge.clone());
        // The server may have moved to another authorization server (SEP-2352): then the old
        // one's refresh token must not be used.
        if self.config.grant == Grant::AuthorizationCode
            && let (Some(entry), Some(_)) = (&state.entry, &challenge.resource_metadata)
            && let Ok(found) = flow::discover(&self.http, &self.url, Some(&challenge)).await
            && found.issuer != entry.issuer
        {
            return Err(self.needs_login(format!(
                "server \"{}\" now uses another authorization server ({})",
                self.server, found.issuer
            )));
        }
        self.renew(&mut state, None).await
    }
}

impl Credentials for Arc<TokenSource> {
    fn bearer(&self) -> BoxFuture<'_, Result<Option<String>, Failure>> {
        Box::pin(self.bearer_now())
    }

    fn rejected<'a>(
        &'a self,
        status: u16,
        challenge: Option<&'a str>,
        used: Option<&'a str>,
    ) -> BoxFuture<'a, Result<(), Failure>> {
        Box::pin(self.rejected_now(status, challenge, used))
    }
}
