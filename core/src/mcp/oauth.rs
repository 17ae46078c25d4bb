//! Owns OAuth 2.1 for Streamable HTTP MCP servers, as the MCP authorization spec
//! describes it: a server's 401 names its protected-resource metadata (RFC 9728,
//! `WWW-Authenticate: Bearer resource_metadata="…"`, else the well-known URIs), which
//! names its authorization server, whose metadata (RFC 8414, or OpenID discovery) gives
//! the endpoints. The client is the configured one or registers itself (RFC 7591). A
//! token comes from the authorization code grant with PKCE (S256) through a loopback
//! redirect listener (the host opens the URL: [`McpOAuthHooks::open_url`]), or from
//! client credentials for unattended use; it is refreshed when it expires or a server
//! refuses it, and every request for a token names the server (RFC 8707 `resource`).
//!
//! Tokens are kept where the host says ([`McpTokenStore`], keyed by the server's URL;
//! [`McpTokenFile`] is a file of mode 0600) and are secrets: sent only as a sensitive
//! header, and removed from every error, event and message panto shows (the agent's
//! redaction learns each one as it is issued). It does not own the HTTP transport
//! (`http`), which asks it for the header and tells it of a 401.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use reqwest::Url;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::error::{Error, ErrorKind, Result};
use crate::secret::LiveSecrets;

/// The longest the authorization code flow waits for the browser's redirect.
pub const AUTHORIZE_TIMEOUT: Duration = Duration::from_secs(300);
/// The longest one request to an authorization server (metadata, registration, token)
/// may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// The most of an authorization server's answer read.
const MAX_ANSWER: usize = 64 * 1024;
/// The most of a redirect request read by the loopback listener.
const MAX_REDIRECT_REQUEST: usize = 16 * 1024;
/// A token this close to its expiry is refreshed before it is sent.
const EXPIRY_MARGIN: u64 = 30;

/// How panto gets a token for an MCP server (`mcp_servers.<name>.oauth.grant`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum McpOAuthGrant {
    /// The authorization code grant with PKCE: a person signs in in a browser, which
    /// the authorization server sends back to a loopback listener of panto's.
    AuthorizationCode,
    /// The client credentials grant: no person; needs a configured client id and
    /// secret.
    ClientCredentials,
}

impl McpOAuthGrant {
    /// The grant's name in the configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            McpOAuthGrant::AuthorizationCode => "authorization_code",
            McpOAuthGrant::ClientCredentials => "client_credentials",
        }
    }

    /// The grant of this name.
    pub fn parse(name: &str) -> Option<McpOAuthGrant> {
        match name {
            "authorization_code" => Some(McpOAuthGrant::AuthorizationCode),
            "client_credentials" => Some(McpOAuthGrant::ClientCredentials),
            _ => None,
        }
    }
}

/// OAuth for one Streamable HTTP MCP server (`mcp_servers.<name>.oauth`).
#[derive(Clone, PartialEq, Eq)]
pub struct McpOAuth {
    /// How the token is obtained.
    pub grant: McpOAuthGrant,
    /// The client's id at the authorization server; without one, panto registers
    /// itself (RFC 7591), which the authorization code grant only allows.
    pub client_id: Option<String>,
    /// The client's secret (a confidential client); a secret.
    pub client_secret: Option<String>,
    /// The scopes asked for, space-separated (default: what the server's 401 or its
    /// metadata names).
    pub scope: Option<String>,
    /// The loopback port the authorization code grant's redirect comes to (0: any free
    /// one; a client registered with a fixed redirect URI needs its port).
    pub redirect_port: u16,
}

impl fmt::Debug for McpOAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpOAuth")
            .field("grant", &self.grant)
            .field("client_id", &self.client_id)
            .field(
                "client_secret",
                &self.client_secret.as_ref().map(|_| "[REDACTED]"),
            )
            .field("scope", &self.scope)
            .field("redirect_port", &self.redirect_port)
            .finish()
    }
}

impl McpOAuth {
    /// The authorization code grant, with a client panto registers.
    pub fn authorization_code() -> McpOAuth {
        McpOAuth {
            grant: McpOAuthGrant::AuthorizationCode,
            client_id: None,
            client_secret: None,
            scope: None,
            redirect_port: 0,
        }
    }

    /// The client credentials grant for this client.
    pub fn client_credentials(
        client_id: impl Into<String>,
        client_secret: impl Into<String>,
    ) -> McpOAuth {
        McpOAuth {
            grant: McpOAuthGrant::ClientCredentials,
            client_id: Some(client_id.into()),
            client_secret: Some(client_secret.into()),
            scope: None,
            redirect_port: 0,
        }
    }

    /// Uses this registered client (the secret: `None` for a public client).
    pub fn with_client(mut self, id: impl Into<String>, secret: Option<String>) -> McpOAuth {
        self.client_id = Some(id.into());
        self.client_secret = secret;
        self
    }

    /// Asks for these scopes (space-separated).
    pub fn with_scope(mut self, scope: impl Into<String>) -> McpOAuth {
        self.scope = Some(scope.into());
        self
    }

    /// Takes the redirect on this loopback port.
    pub fn with_redirect_port(mut self, port: u16) -> McpOAuth {
        self.redirect_port = port;
        self
    }

    /// Checks what the schema cannot (`path`: `mcp_servers.<name>.oauth`).
    pub(crate) fn check(&self, path: &str) -> Result<()> {
        if self.grant == McpOAuthGrant::ClientCredentials
            && (self.client_id.is_none() || self.client_secret.is_none())
        {
            return Err(Error::config(format!(
                "{path}: the client_credentials grant needs client_id and client_secret"
            )));
        }
        if self.client_secret.is_some() && self.client_id.is_none() {
            return Err(Error::config(format!(
                "{path}.client_secret: given without client_id"
            )));
        }
        Ok(())
    }
}

/// Where a host keeps the OAuth tokens of MCP servers between runs, keyed by the
/// server's URL. What is saved is panto's own JSON text (tokens, expiry, the
/// registered client): a secret, to be kept as such and handed back unchanged.
/// Called from a thread of the library's, never while a lock of panto's is held.
pub trait McpTokenStore: Send + Sync {
    /// The text last saved for the server at `server_url`, if any.
    fn load(&self, server_url: &str) -> Option<String>;
    /// Keeps `tokens` for the server at `server_url`, replacing what was there.
    fn save(&self, server_url: &str, tokens: &str);
}

/// Opens an authorization URL for a person (a browser), or shows it. An `Err` ends the
/// authorization with that error.
pub type McpOpenUrl = Arc<dyn Fn(&str) -> Result<()> + Send + Sync>;

/// What a host lends the OAuth of its MCP servers: where tokens are kept, and how an
/// authorization URL reaches a person. Without a store, tokens live as long as the
/// servers; without `open_url`, the authorization code grant fails with an
/// `authentication` error saying so (client credentials need neither).
#[derive(Clone, Default)]
pub struct McpOAuthHooks {
    /// Where tokens are loaded from and saved to.
    pub store: Option<Arc<dyn McpTokenStore>>,
    /// Opens (or shows) the authorization URL.
    pub open_url: Option<McpOpenUrl>,
}

impl fmt::Debug for McpOAuthHooks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpOAuthHooks")
            .field("store", &self.store.is_some())
            .field("open_url", &self.open_url.is_some())
            .finish()
    }
}

/// A [`McpTokenStore`] in one JSON file (an object from server URL to saved text),
/// created with mode 0600 and written whole through a temporary file of the same mode.
#[derive(Debug, Clone)]
pub struct McpTokenFile {
    path: PathBuf,
    lock: Arc<Mutex<()>>,
}

impl McpTokenFile {
    /// The store in the file at `path` (created at the first save, with its folder).
    pub fn new(path: impl Into<PathBuf>) -> McpTokenFile {
        McpTokenFile {
            path: path.into(),
            lock: Arc::new(Mutex::new(())),
        }
    }

    fn read_all(&self) -> BTreeMap<String, String> {
        std::fs::read(&self.path)
            .ok()
            .filter(|b| b.len() <= 16 * 1024 * 1024)
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    }
}

impl McpTokenStore for McpTokenFile {
    fn load(&self, server_url: &str) -> Option<String> {
        let _held = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        self.read_all().remove(server_url)
    }

    fn save(&self, server_url: &str, tokens: &str) {
        let _held = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        let mut all = self.read_all();
        all.insert(server_url.to_owned(), tokens.to_owned());
        let Ok(text) = serde_json::to_vec_pretty(&all) else {
            return;
        };
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            let _ = std::fs::create_dir_all(dir);
        }
        let tmp = self
            .path
            .with_extension(format!("tmp{}", std::process::id()));
        if write_private(&tmp, &text).is_ok() && std::fs::rename(&tmp, &self.path).is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
    }
}

/// Writes `bytes` to a new file at `path` that only its owner may read (0600).
fn write_private(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    let mut f = options.open(path)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    f.write_all(bytes)?;
    f.sync_all()
}

/// What is kept for one server: its tokens and the client they belong to.
#[derive(Clone, Default, Serialize, Deserialize)]
struct Saved {
    access_token: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    refresh_token: Option<String>,
    /// Seconds since the Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    expires_at: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    client_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    client_secret: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    token_endpoint: Option<String>,
}

/// The authorization server's endpoints, as its metadata gives them.
#[derive(Debug, Clone)]
struct Endpoints {
    authorization: Option<String>,
    token: String,
    registration: Option<String>,
    pkce_s256: bool,
    basic_auth: bool,
    scope: Option<String>,
}

/// The OAuth of one server while it runs: its current token, and how to get another.
pub(crate) struct OAuth {
    name: String,
    url: String,
    config: McpOAuth,
    hooks: McpOAuthHooks,
    client: reqwest::Client,
    saved: Mutex<Option<Saved>>,
    /// The last 401's `WWW-Authenticate`.
    challenge: Mutex<Option<String>>,
    /// One token request at a time.
    renewing: tokio::sync::Mutex<()>,
    live: Arc<LiveSecrets>,
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Runs a host's hook off the async threads (it may block: a file, a prompt, a lock of
/// the host's, a browser), on a thread of its own that ends with the call: nothing of
/// the host's runs on a pool that outlives it. `None` if the thread could not start or
/// the hook panicked.
async fn off_runtime<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("panto-mcp-oauth".into())
        .spawn(move || {
            let _ = tx.send(f());
        })
        .ok()?;
    rx.await.ok()
}

impl OAuth {
    /// The OAuth of server `name` at `url`; tokens saved by an earlier run are loaded
    /// at the first [`OAuth::load`].
    pub fn new(
        name: &str,
        url: &str,
        config: McpOAuth,
        hooks: McpOAuthHooks,
        live: Arc<LiveSecrets>,
    ) -> Result<OAuth> {
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(REQUEST_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| Error::internal(format!("cannot build an HTTP client: {e}")))?;
        if let Some(s) = &config.client_secret {
            live.add(s);
        }
        Ok(OAuth {
            name: name.to_owned(),
            url: url.to_owned(),
            config,
            hooks,
            client,
            saved: Mutex::new(None),
            challenge: Mutex::new(None),
            renewing: tokio::sync::Mutex::new(()),
            live,
        })
    }

    /// Loads what the host's store holds for this server (once, before the first
    /// request).
    pub async fn load(&self) {
        if lock(&self.saved).is_some() {
            return;
        }
        let Some(store) = self.hooks.store.clone() else {
            return;
        };
        let url = self.url.clone();
        let text = off_runtime(move || store.load(&url)).await.flatten();
        let Some(saved) = text.and_then(|t| serde_json::from_str::<Saved>(&t).ok()) else {
            return;
        };
        self.learn(&saved);
        let mut current = lock(&self.saved);
        if current.is_none() {
            *current = Some(saved);
        }
    }

    fn learn(&self, saved: &Saved) {
        self.live.add(&saved.access_token);
        for s in [&saved.refresh_token, &saved.client_secret]
            .into_iter()
            .flatten()
        {
            self.live.add(s);
        }
    }

    /// Removes every token and secret learnt so far from the strings of `v` (what a
    /// server answered: it never reaches the history, an event or the model).
    pub fn redact_value(&self, v: &mut Value) {
        match v {
            Value::String(s) => self.live.redact_in_place(s),
            Value::Array(items) => items.iter_mut().for_each(|i| self.redact_value(i)),
            Value::Object(o) => o.values_mut().for_each(|i| self.redact_value(i)),
            _ => {}
        }
    }

    /// The access token to send, if there is one.
    pub fn token(&self) -> Option<String> {
        lock(&self.saved).as_ref().map(|s| s.access_token.clone())
    }

    /// Whether the current token expires within the margin (and can be refreshed).
    pub fn expiring(&self) -> bool {
        lock(&self.saved).as_ref().is_some_and(|s| {
            s.refresh_token.is_some() && s.expires_at.is_some_and(|t| t <= now() + EXPIRY_MARGIN)
        })
    }

    /// Notes a 401's `WWW-Authenticate`, for discovery.
    pub fn note_challenge(&self, header: Option<&str>) {
        if let Some(h) = header {
            *lock(&self.challenge) = Some(crate::text::truncate(h, 4000).to_owned());
        }
    }

    /// A new token after the server refused `used` (or it expired): refreshed if
    /// there is a refresh token, else obtained afresh with client credentials. `Ok(false)`
    /// when neither is possible without a person (the authorization code grant), which
    /// [`OAuth::authorize`] then does. A token another request renewed meanwhile counts.
    pub async fn renew(&self, used: Option<&str>) -> Result<bool> {
        let _one = self.renewing.lock().await;
        let current = lock(&self.saved).clone();
        if let Some(c) = &current {
            if used.is_some_and(|u| u != c.access_token) {
                return Ok(true);
            }
            if let Some(refresh) = &c.refresh_token {
                match self.refresh(c, refresh).await {
                    Ok(()) => return Ok(true),
                    Err(e) => tracing::debug!(server = %self.name, error = %e.message,
                                              "refreshing the MCP server's token failed"),
                }
            }
        }
        if self.config.grant == McpOAuthGrant::ClientCredentials {
            self.obtain().await?;
            return Ok(true);
        }
        Ok(false)
    }

    /// Gets a token however the grant says, a person signing in included.
    pub async fn authorize(&self) -> Result<()> {
        let _one = self.renewing.lock().await;
        self.obtain().await
    }

    async fn obtain(&self) -> Result<()> {
        let (resource, endpoints) = self.discover().await?;
        let saved = match self.config.grant {
            McpOAuthGrant::ClientCredentials => {
                self.client_credentials(&endpoints, &resource).await?
            }
            McpOAuthGrant::AuthorizationCode => {
                self.authorization_code(&endpoints, &resource).await?
            }
        };
        self.keep(saved).await;
        Ok(())
    }

    async fn keep(&self, saved: Saved) {
        self.learn(&saved);
        *lock(&self.saved) = Some(saved.clone());
        if let Some(store) = self.hooks.store.clone() {
            if let Ok(text) = serde_json::to_string(&saved) {
                let url = self.url.clone();
                off_runtime(move || store.save(&url, &text)).await;
            }
        }
    }

    fn error(&self, kind: ErrorKind, what: impl fmt::Display) -> Error {
        let mut message = format!("MCP server {:?}: OAuth: {what}", self.name);
        self.live.redact_in_place(&mut message);
        Error::new(kind, message)
    }

    /// The resource (this server's canonical URL, or what its metadata says) and the
    /// authorization server's endpoints.
    async fn discover(&self) -> Result<(String, Endpoints)> {
        let server = Url::parse(&self.url)
            .map_err(|_| Error::config(format!("mcp_servers.{}.url: not a URL", self.name)))?;
        let challenge = lock(&self.challenge).clone().unwrap_or_default();
        let param = |name: &str| challenge_param(&challenge, name);
        let mut candidates = Vec::new();
        if let Some(u) = param("resource_metadata") {
            candidates.push(u);
        }
        let origin = origin(&server);
        let path = server.path().trim_end_matches('/');
        if !path.is_empty() {
            candidates.push(format!(
                "{origin}/.well-known/oauth-protected-resource{path}"
            ));
        }
        candidates.push(format!("{origin}/.well-known/oauth-protected-resource"));
        let mut resource = canonical(&server);
        let mut issuer = None;
        let mut scope = param("scope");
        for url in candidates {
            if let Some(meta) = self.get_json(&url).await? {
                if let Some(r) = meta.get("resource").and_then(Value::as_str) {
                    resource = r.to_owned();
                }
                issuer = meta
                    .get("authorization_servers")
                    .and_then(Value::as_array)
                    .and_then(|a| a.first())
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                if scope.is_none() {
                    scope = meta
                        .get("scopes_supported")
                        .and_then(Value::as_array)
                        .map(|a| {
                            a.iter()
                                .filter_map(Value::as_str)
                                .collect::<Vec<_>>()
                                .join(" ")
                        })
                        .filter(|s| !s.is_empty());
                }
                break;
            }
        }
        // No protected-resource metadata: the server's origin is its own authorization
        // server (the 2025-03-26 revision's rule).
        let issuer = issuer.unwrap_or(origin);
        let issuer_url = Url::parse(&issuer).map_err(|_| {
            self.error(
                ErrorKind::Protocol,
                format!(
                    "the authorization server {:?} is not a URL",
                    crate::text::truncate(&issuer, 200)
                ),
            )
        })?;
        let io = origin_of(&issuer_url);
        let ipath = issuer_url.path().trim_end_matches('/');
        let tries = if ipath.is_empty() {
            vec![
                format!("{io}/.well-known/oauth-authorization-server"),
                format!("{io}/.well-known/openid-configuration"),
            ]
        } else {
            vec![
                format!("{io}/.well-known/oauth-authorization-server{ipath}"),
                format!("{io}/.well-known/openid-configuration{ipath}"),
                format!("{io}{ipath}/.well-known/openid-configuration"),
            ]
        };
        for url in tries {
            let Some(meta) = self.get_json(&url).await? else {
                continue;
            };
            let s = |k: &str| meta.get(k).and_then(Value::as_str).map(str::to_owned);
            let list = |k: &str| -> Option<Vec<String>> {
                meta.get(k).and_then(Value::as_array).map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
            };
            let Some(token) = s("token_endpoint") else {
                return Err(self.error(
                    ErrorKind::Protocol,
                    "the authorization server's metadata names no token_endpoint",
                ));
            };
            let methods = list("token_endpoint_auth_methods_supported");
            return Ok((
                resource,
                Endpoints {
                    authorization: s("authorization_endpoint"),
                    token,
                    registration: s("registration_endpoint"),
                    pkce_s256: list("code_challenge_methods_supported")
                        .is_some_and(|m| m.iter().any(|m| m == "S256")),
                    basic_auth: methods.as_ref().is_none_or(|m| {
                        m.iter().any(|m| m == "client_secret_basic")
                            || !m.iter().any(|m| m == "client_secret_post")
                    }),
                    scope: self.config.scope.clone().or(scope),
                },
            ));
        }
        Err(self.error(
            ErrorKind::Authentication,
            format!(
                "the server asks for authorization, but the metadata of its authorization \
                 server {:?} was not found",
                crate::text::truncate(&issuer, 200)
            ),
        ))
    }

    /// A metadata document: `None` when there is none at `url` (4xx).
    async fn get_json(&self, url: &str) -> Result<Option<Value>> {
        let resp = self
            .client
            .get(url)
            .header(reqwest::header::ACCEPT, "application/json")
            .send()
            .await
            .map_err(|e| self.error(ErrorKind::Connection, transport_words(&e)))?;
        let status = resp.status();
        if status.is_client_error() || status.is_redirection() {
            return Ok(None);
        }
        let (status, body) = read_answer(resp)
            .await
            .map_err(|e| self.error(e.kind, e.message))?;
        if !(200..300).contains(&status) {
            return Err(self.error(ErrorKind::Server, format!("{url} answered HTTP {status}")));
        }
        Ok(serde_json::from_slice::<Value>(&body)
            .ok()
            .filter(Value::is_object))
    }

    /// POSTs a form to the token endpoint and reads the tokens it gives.
    async fn token_request(
        &self,
        endpoint: &str,
        basic_auth: bool,
        client_id: &str,
        client_secret: Option<&str>,
        mut form: Vec<(&str, String)>,
    ) -> Result<Saved> {
        let mut req = self
            .client
            .post(endpoint)
            .header(reqwest::header::ACCEPT, "application/json");
        match client_secret {
            Some(secret) if basic_auth => {
                let enc = |s: &str| url_encode(s);
                let pair = format!("{}:{}", enc(client_id), enc(secret));
                let mut v = reqwest::header::HeaderValue::from_str(&format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD.encode(pair)
                ))
                .map_err(|_| {
                    self.error(
                        ErrorKind::Config,
                        "the client secret is not a valid header value",
                    )
                })?;
                v.set_sensitive(true);
                req = req.header(reqwest::header::AUTHORIZATION, v);
                form.push(("client_id", client_id.to_owned()));
            }
            Some(secret) => {
                form.push(("client_id", client_id.to_owned()));
                form.push(("client_secret", secret.to_owned()));
            }
            None => form.push(("client_id", client_id.to_owned())),
        }
        let body = form
            .iter()
            .map(|(k, v)| format!("{}={}", url_encode(k), url_encode(v)))
            .collect::<Vec<_>>()
            .join("&");
        let resp = req
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .body(body)
            .send()
            .await
            .map_err(|e| self.error(ErrorKind::Connection, transport_words(&e)))?;
        let (status, body) = read_answer(resp)
            .await
            .map_err(|e| self.error(e.kind, e.message))?;
        let json: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        if !(200..300).contains(&status) {
            let code = json.get("error").and_then(Value::as_str).unwrap_or("");
            let words = json
                .get("error_description")
                .and_then(Value::as_str)
                .unwrap_or("");
            let kind = match (status, code) {
                (_, "invalid_client" | "invalid_grant" | "unauthorized_client") | (401, _) => {
                    ErrorKind::Authentication
                }
                (403, _) | (_, "access_denied") => ErrorKind::Permission,
                (500..=599, _) => ErrorKind::Server,
                _ => ErrorKind::Authentication,
            };
            return Err(self.error(
                kind,
                format!(
                    "the authorization server refused the token request (HTTP {status}{}{})",
                    if code.is_empty() {
                        String::new()
                    } else {
                        format!(", {}", crate::text::truncate(code, 100))
                    },
                    if words.is_empty() {
                        String::new()
                    } else {
                        format!(": {}", crate::text::truncate(words, 300))
                    },
                ),
            ));
        }
        let Some(access) = json.get("access_token").and_then(Value::as_str) else {
            return Err(self.error(
                ErrorKind::Protocol,
                "the authorization server's token answer holds no access_token",
            ));
        };
        Ok(Saved {
            access_token: access.to_owned(),
            refresh_token: json
                .get("refresh_token")
                .and_then(Value::as_str)
                .map(str::to_owned),
            expires_at: json
                .get("expires_in")
                .and_then(Value::as_u64)
                .map(|s| now().saturating_add(s)),
            client_id: Some(client_id.to_owned()),
            client_secret: client_secret.map(str::to_owned),
            token_endpoint: Some(endpoint.to_owned()),
        })
    }

    async fn client_credentials(&self, ep: &Endpoints, resource: &str) -> Result<Saved> {
        let (Some(id), Some(secret)) = (&self.config.client_id, &self.config.client_secret) else {
            return Err(Error::config(format!(
                "mcp_servers.{}.oauth: the client_credentials grant needs client_id and client_secret",
                self.name
            )));
        };
        let mut form = vec![
            ("grant_type", "client_credentials".to_owned()),
            ("resource", resource.to_owned()),
        ];
        if let Some(scope) = &ep.scope {
            form.push(("scope", scope.clone()));
        }
        self.token_request(&ep.token, ep.basic_auth, id, Some(secret), form)
            .await
    }

    async fn refresh(&self, current: &Saved, refresh: &str) -> Result<()> {
        let (Some(endpoint), Some(id)) = (&current.token_endpoint, &current.client_id) else {
            return Err(self.error(ErrorKind::Authentication, "no client to refresh with"));
        };
        let resource = canonical(
            &Url::parse(&self.url)
                .map_err(|_| Error::config(format!("mcp_servers.{}.url: not a URL", self.name)))?,
        );
        let form = vec![
            ("grant_type", "refresh_token".to_owned()),
            ("refresh_token", refresh.to_owned()),
            ("resource", resource),
        ];
        let mut saved = self
            .token_request(endpoint, true, id, current.client_secret.as_deref(), form)
            .await?;
        if saved.refresh_token.is_none() {
            saved.refresh_token = Some(refresh.to_owned());
        }
        self.keep(saved).await;
        Ok(())
    }

    /// The configured client, or one registered for `redirect_uri` (RFC 7591).
    async fn client_for(
        &self,
        ep: &Endpoints,
        redirect_uri: &str,
    ) -> Result<(String, Option<String>)> {
        if let Some(id) = &self.config.client_id {
            return Ok((id.clone(), self.config.client_secret.clone()));
        }
        let Some(registration) = &ep.registration else {
            return Err(self.error(
                ErrorKind::Config,
                format!(
                    "the authorization server offers no dynamic client registration; set \
                     mcp_servers.{}.oauth.client_id",
                    self.name
                ),
            ));
        };
        let mut metadata = serde_json::json!({
            "client_name": "panto",
            "redirect_uris": [redirect_uri],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
        });
        if let Some(scope) = &ep.scope {
            metadata["scope"] = scope.clone().into();
        }
        let resp = self
            .client
            .post(registration)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(metadata.to_string())
            .send()
            .await
            .map_err(|e| self.error(ErrorKind::Connection, transport_words(&e)))?;
        let (status, body) = read_answer(resp)
            .await
            .map_err(|e| self.error(e.kind, e.message))?;
        let json: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        if !(200..300).contains(&status) {
            return Err(self.error(
                ErrorKind::Authentication,
                format!(
                    "the authorization server refused to register panto (HTTP {status}): {}",
                    crate::text::truncate(
                        json.get("error_description")
                            .or(json.get("error"))
                            .and_then(Value::as_str)
                            .unwrap_or(""),
                        300
                    )
                ),
            ));
        }
        let Some(id) = json.get("client_id").and_then(Value::as_str) else {
            return Err(self.error(
                ErrorKind::Protocol,
                "the authorization server's registration answer holds no client_id",
            ));
        };
        let secret = json
            .get("client_secret")
            .and_then(Value::as_str)
            .map(str::to_owned);
        if let Some(s) = &secret {
            self.live.add(s);
        }
        Ok((id.to_owned(), secret))
    }

    async fn authorization_code(&self, ep: &Endpoints, resource: &str) -> Result<Saved> {
        let Some(open_url) = self.hooks.open_url.clone() else {
            return Err(self.error(
                ErrorKind::Authentication,
                "the server needs a person to sign in (the authorization code grant), and \
                 this program gave no way to open the authorization URL; sign in with a \
                 program that can (the panto CLI), or use the client_credentials grant",
            ));
        };
        let Some(authorize) = &ep.authorization else {
            return Err(self.error(
                ErrorKind::Protocol,
                "the authorization server's metadata names no authorization_endpoint",
            ));
        };
        if !ep.pkce_s256 {
            return Err(self.error(
                ErrorKind::Protocol,
                "the authorization server does not offer PKCE with S256, which OAuth 2.1 \
                 needs; panto does not sign in without it",
            ));
        }
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", self.config.redirect_port))
            .await
            .map_err(|e| {
                self.error(
                    ErrorKind::Config,
                    format!(
                        "cannot listen for the redirect on 127.0.0.1:{}: {e}",
                        self.config.redirect_port
                    ),
                )
            })?;
        let port = listener
            .local_addr()
            .map_err(|e| self.error(ErrorKind::Internal, e))?
            .port();
        let redirect_uri = format!("http://127.0.0.1:{port}/callback");
        let (client_id, client_secret) = self.client_for(ep, &redirect_uri).await?;
        let verifier = random_text(32)?;
        let challenge = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(
            ring::digest::digest(&ring::digest::SHA256, verifier.as_bytes()),
        );
        let state = random_text(16)?;
        let mut url = Url::parse(authorize).map_err(|_| {
            self.error(
                ErrorKind::Protocol,
                "the authorization_endpoint is not a URL",
            )
        })?;
        {
            let mut q = url.query_pairs_mut();
            q.append_pair("response_type", "code")
                .append_pair("client_id", &client_id)
                .append_pair("redirect_uri", &redirect_uri)
                .append_pair("code_challenge", &challenge)
                .append_pair("code_challenge_method", "S256")
                .append_pair("state", &state)
                .append_pair("resource", resource);
            if let Some(scope) = &ep.scope {
                q.append_pair("scope", scope);
            }
        }
        let shown = url.to_string();
        // The host's hook may wait for the browser (or for the whole sign-in): the
        // redirect is taken while it runs.
        let opening = off_runtime(move || open_url(&shown));
        tokio::pin!(opening);
        let waiting = wait_redirect(listener, &state);
        tokio::pin!(waiting);
        let signed_in = async {
            let mut opened = false;
            loop {
                tokio::select! {
                    r = &mut opening, if !opened => {
                        opened = true;
                        match r {
                            Some(Ok(())) => {}
                            Some(Err(e)) => return Err(e),
                            None => {
                                return Err(self.error(
                                    ErrorKind::Internal,
                                    "the hook that opens the authorization URL failed",
                                ))
                            }
                        }
                    }
                    code = &mut waiting => {
                        return code.map_err(|why| self.error(ErrorKind::Authentication, why));
                    }
                }
            }
        };
        let code = tokio::time::timeout(AUTHORIZE_TIMEOUT, signed_in)
            .await
            .map_err(|_| {
                self.error(
                    ErrorKind::Authentication,
                    format!("no one signed in within {} s", AUTHORIZE_TIMEOUT.as_secs()),
                )
            })??;
        let form = vec![
            ("grant_type", "authorization_code".to_owned()),
            ("code", code),
            ("redirect_uri", redirect_uri),
            ("code_verifier", verifier),
            ("resource", resource.to_owned()),
        ];
        self.token_request(
            &ep.token,
            ep.basic_auth,
            &client_id,
            client_secret.as_deref(),
            form,
        )
        .await
    }
}

/// Waits for the browser's redirect to `/callback` with this `state`: the code, or why
/// the sign-in failed. Any other request is answered 404 and waited past.
async fn wait_redirect(
    listener: tokio::net::TcpListener,
    state: &str,
) -> std::result::Result<String, String> {
    loop {
        let Ok((mut conn, _)) = listener.accept().await else {
            continue;
        };
        let mut buf = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(10), async {
            let mut chunk = [0u8; 2048];
            while buf.len() < MAX_REDIRECT_REQUEST && !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                match conn.read(&mut chunk).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
        })
        .await;
        if read.is_err() {
            continue;
        }
        let head = String::from_utf8_lossy(&buf);
        let target = head
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("GET "))
            .and_then(|l| l.split(' ').next())
            .unwrap_or("");
        let parsed = Url::parse(&format!("http://127.0.0.1{target}")).ok();
        let Some(url) = parsed.filter(|u| u.path() == "/callback") else {
            let _ = respond(&mut conn, "404 Not Found", "Not found.").await;
            continue;
        };
        let q: BTreeMap<String, String> = url.query_pairs().into_owned().collect();
        if q.get("state").map(String::as_str) != Some(state) {
            let _ = respond(&mut conn, "400 Bad Request", "This sign-in is not panto's.").await;
            continue;
        }
        if let Some(code) = q.get("code") {
            let _ = respond(
                &mut conn,
                "200 OK",
                "panto is signed in. You may close this window.",
            )
            .await;
            return Ok(code.clone());
        }
        let _ = respond(&mut conn, "200 OK", "The sign-in failed; panto says why.").await;
        let error = q.get("error").map_or("no code", String::as_str);
        let words = q.get("error_description").map_or("", String::as_str);
        return Err(format!(
            "the authorization server did not sign panto in: {}{}",
            crate::text::truncate(error, 100),
            if words.is_empty() {
                String::new()
            } else {
                format!(" ({})", crate::text::truncate(words, 300))
            }
        ));
    }
}

async fn respond(
    conn: &mut tokio::net::TcpStream,
    status: &str,
    text: &str,
) -> std::io::Result<()> {
    let body = format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>panto</title></head>\
         <body><p>{text}</p></body></html>"
    );
    let answer = format!(
        "HTTP/1.1 {status}\r\ncontent-type: text/html; charset=utf-8\r\ncontent-length: {}\r\n\
         connection: close\r\ncache-control: no-store\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(answer.as_bytes()).await?;
    conn.shutdown().await
}

/// `n` random bytes as unpadded base64url.
fn random_text(n: usize) -> Result<String> {
    use ring::rand::SecureRandom as _;
    let mut bytes = vec![0u8; n];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| Error::internal("the system's random number source failed"))?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
}

/// A status and at most [`MAX_ANSWER`] bytes of the body.
async fn read_answer(resp: reqwest::Response) -> Result<(u16, Vec<u8>)> {
    use futures_util::StreamExt as _;
    let status = resp.status().as_u16();
    let mut out = Vec::new();
    let mut body = resp.bytes_stream();
    while let Some(chunk) = body.next().await {
        let chunk = chunk
            .map_err(|_| Error::new(ErrorKind::Connection, "the answer broke off".to_owned()))?;
        if out.len() + chunk.len() > MAX_ANSWER {
            return Err(Error::protocol(format!(
                "an answer larger than {MAX_ANSWER} bytes"
            )));
        }
        out.extend_from_slice(&chunk);
    }
    Ok((status, out))
}

fn transport_words(e: &reqwest::Error) -> &'static str {
    if e.is_timeout() {
        "the authorization server timed out"
    } else if e.is_connect() {
        "could not connect to the authorization server"
    } else {
        "the request to the authorization server failed"
    }
}

/// Form encoding (`application/x-www-form-urlencoded`) of one value.
fn url_encode(s: &str) -> String {
    reqwest::Url::parse_with_params("http://x/", [("v", s)])
        .ok()
        .and_then(|u| u.query().map(|q| q[2..].to_owned()))
        .unwrap_or_default()
}

fn origin_of(url: &Url) -> String {
    let mut s = format!("{}://{}", url.scheme(), url.host_str().unwrap_or(""));
    if let Some(p) = url.port() {
        s.push_str(&format!(":{p}"));
    }
    s
}

fn origin(url: &Url) -> String {
    origin_of(url)
}

/// The canonical URI of the server (RFC 8707, as the MCP spec uses it): without
/// fragment or query, without a trailing slash.
fn canonical(url: &Url) -> String {
    let path = url.path().trim_end_matches('/');
    format!("{}{path}", origin_of(url))
}

/// A parameter of a `WWW-Authenticate: Bearer …` challenge (`resource_metadata`,
/// `scope`), quoted or not.
pub(crate) fn challenge_param(header: &str, name: &str) -> Option<String> {
    let mut rest = header.trim();
    if rest.len() >= 6 && rest[..6].eq_ignore_ascii_case("bearer") {
        rest = &rest[6..];
    }
    while !rest.is_empty() {
        rest = rest.trim_start_matches([' ', ',', '\t']);
        let eq = rest.find('=')?;
        let key = rest[..eq].trim();
        rest = &rest[eq + 1..];
        let value;
        if let Some(quoted) = rest.strip_prefix('"') {
            let mut v = String::new();
            let mut chars = quoted.char_indices();
            let mut end = quoted.len();
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => {
                        if let Some((_, n)) = chars.next() {
                            v.push(n);
                        }
                    }
                    '"' => {
                        end = i + 1;
                        break;
                    }
                    c => v.push(c),
                }
            }
            value = v;
            rest = &quoted[end.min(quoted.len())..];
        } else {
            let end = rest.find(',').unwrap_or(rest.len());
            value = rest[..end].trim().to_owned();
            rest = &rest[end..];
        }
        if key.eq_ignore_ascii_case(name) {
            return Some(value);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenge_parameters_quoted_or_not() {
        let h = r#"Bearer error="invalid_token", error_description="Authentication required", resource_metadata="http://h/.well-known/oauth-protected-resource/mcp", scope=read"#;
        assert_eq!(
            challenge_param(h, "resource_metadata").as_deref(),
            Some("http://h/.well-known/oauth-protected-resource/mcp")
        );
        assert_eq!(challenge_param(h, "scope").as_deref(), Some("read"));
        assert_eq!(challenge_param(h, "realm"), None);
        assert_eq!(
            challenge_param(r#"Bearer a="x\"y", b=z"#, "a").as_deref(),
            Some("x\"y")
        );
        assert_eq!(challenge_param("Bearer", "a"), None);
        assert_eq!(
            challenge_param("Bearer a=\"unterminated", "a").as_deref(),
            Some("unterminated")
        );
    }

    #[test]
    fn canonical_resource_and_form_encoding() {
        let u = Url::parse("http://127.0.0.1:8080/mcp/?x=1#f").unwrap();
        assert_eq!(canonical(&u), "http://127.0.0.1:8080/mcp");
        assert_eq!(url_encode("a b&c=d/é"), "a+b%26c%3Dd%2F%C3%A9");
    }

    #[test]
    fn the_token_file_is_private_and_keyed_by_url() {
        let dir = std::env::temp_dir().join(format!("panto-oauth-{}", std::process::id()));
        let path = dir.join("sub").join("tokens.json");
        let store = McpTokenFile::new(&path);
        assert_eq!(store.load("http://a/mcp"), None);
        store.save("http://a/mcp", "one");
        store.save("http://b/mcp", "two");
        assert_eq!(store.load("http://a/mcp").as_deref(), Some("one"));
        assert_eq!(store.load("http://b/mcp").as_deref(), Some("two"));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_secret_is_not_in_debug_output() {
        let o = McpOAuth::client_credentials("id", "s3cr3t-value");
        assert!(!format!("{o:?}").contains("s3cr3t"));
        assert!(o.check("p").is_ok());
        assert!(McpOAuth {
            client_secret: None,
            ..o
        }
        .check("p")
        .is_err());
    }
}
