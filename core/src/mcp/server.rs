//! Owns one MCP server's session: starting it (spawn or connect, `initialize`, the
//! version check, `notifications/initialized`), listing its tools over every page, and
//! the `tools/call` requests of its tools. A [`Slot`] is a configured server and what
//! it currently is: not started, running with its tools, or stopped (started again at
//! the next refresh).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use super::resources::ReadResourceTool;
use super::rpc::{Peer, RpcError, Wire};
use super::sampling::ClientFeatures;
use super::tools::{self, McpTool, McpToolInfo};
use super::{Limits, McpServer, McpTransport, ACCEPTED_VERSIONS, PROTOCOL_VERSION};
use crate::error::{Error, ErrorKind, Result};
use crate::tool::{CallProgress, Tool};

/// The least time a server gets to start (its `initialize` and first listing), whatever
/// its `timeout_ms`: an interpreter importing its SDK on a loaded machine takes seconds,
/// and a short per-call timeout is about calls.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// Most pages of `tools/list` read from one server, and most tools kept.
const MAX_PAGES: usize = 100;
const MAX_TOOLS: usize = 2000;

/// What the servers of a set share: for OAuth, the host's hooks and the tokens learnt;
/// for the servers' own requests (sampling, elicitation), the host's hooks.
#[derive(Default)]
pub(crate) struct AuthContext {
    pub hooks: std::sync::Mutex<super::McpOAuthHooks>,
    pub live: Arc<crate::secret::LiveSecrets>,
    pub client_hooks: Arc<std::sync::Mutex<super::McpClientHooks>>,
}

/// What keeps a server's connection alive; dropping it stops the server.
enum Keep {
    #[cfg(unix)]
    Process(super::stdio::Process),
    Http(super::http::Session),
}

/// A started server.
pub(crate) struct Server {
    pub name: String,
    pub peer: Arc<Peer>,
    wire: Arc<dyn Wire>,
    pub timeout: Duration,
    keep: Keep,
    /// The server's OAuth: its tokens are removed from what it answers.
    oauth: Option<Arc<super::oauth::OAuth>>,
}

impl Server {
    /// Starts the server and completes the handshake. An error names the server, and
    /// for a command, the command and the end of its stderr.
    async fn start(
        name: &str,
        config: &McpServer,
        limits: Limits,
        oauth: Option<Arc<super::oauth::OAuth>>,
        client_hooks: Arc<std::sync::Mutex<super::McpClientHooks>>,
    ) -> Result<Arc<Server>> {
        let mut peer = Peer::new(name);
        peer.log_level = config.log_level;
        peer.client = ClientFeatures::new(
            config.sampling.then_some(config.sampling_max_tokens),
            config.elicitation,
            client_hooks,
        );
        let peer = Arc::new(peer);
        let timeout = Duration::from_millis(config.timeout_ms);
        let (keep, wire) = match &config.transport {
            #[cfg(unix)]
            McpTransport::Stdio {
                command,
                args,
                env,
                inherit_env,
                cwd,
            } => {
                let (p, wire) = super::stdio::spawn(
                    &peer,
                    command,
                    args,
                    &super::stdio::environment(env, inherit_env, |name| std::env::var_os(name)),
                    cwd.as_deref(),
                    limits.max_message_bytes,
                )?;
                (Keep::Process(p), wire)
            }
            #[cfg(not(unix))]
            McpTransport::Stdio { .. } => {
                return Err(Error::config(format!(
                    "mcp_servers.{name}: stdio servers need a Unix system"
                )))
            }
            McpTransport::Http { url, headers } => {
                if let Some(o) = &oauth {
                    o.load().await;
                }
                let (s, wire) = super::http::connect(&peer, url, headers, limits, oauth.clone())?;
                (Keep::Http(s), wire)
            }
        };
        peer.set_wire(&wire);
        let server = Server {
            name: name.to_owned(),
            peer,
            wire,
            timeout,
            keep,
            oauth: oauth.clone(),
        };
        let started = match (server.initialize().await, &oauth) {
            // Refused, and no token could be had without a person: sign in, then again.
            (Err(e), Some(o)) if e.kind == ErrorKind::Authentication => {
                o.authorize().await?;
                server.initialize().await
            }
            (r, _) => r,
        };
        started.map_err(|e| server.start_error(e))?;
        Ok(Arc::new(server))
    }

    /// `initialize`, the version check, then `notifications/initialized`.
    pub(crate) async fn initialize(&self) -> Result<()> {
        let timeout = self.timeout.max(START_TIMEOUT);
        let params = json!({
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": ClientFeatures::capabilities(self.peer.client.as_deref()),
            "clientInfo": {"name": "panto", "version": env!("CARGO_PKG_VERSION")},
        });
        let result = self
            .peer
            .request(&self.wire, "initialize", params, timeout)
            .await
            .map_err(|e| self.rpc_error("initialize", e))?;
        let version = result
            .get("protocolVersion")
            .and_then(Value::as_str)
            .unwrap_or("");
        if !ACCEPTED_VERSIONS.contains(&version) {
            return Err(Error::protocol(format!(
                "MCP server {:?} speaks protocol version {:?}; panto speaks {}",
                self.name,
                crate::text::truncate(version, 40),
                ACCEPTED_VERSIONS.join(", ")
            )));
        }
        if let Keep::Http(s) = &self.keep {
            s.set_protocol_version(version);
        }
        Peer::notify(&self.wire, "notifications/initialized", None);
        if let Keep::Http(s) = &self.keep {
            s.listen(&self.peer);
        }
        // Lines below the level would be dropped here anyway: ask the server not to
        // send them. A server without the capability sends what it likes (filtered
        // all the same); a refusal changes nothing else.
        let logging = result.pointer("/capabilities/logging").is_some();
        if let (Some(level), true) = (self.peer.log_level, logging) {
            let set = self
                .peer
                .request(
                    &self.wire,
                    "logging/setLevel",
                    json!({"level": level.as_str()}),
                    self.timeout,
                )
                .await;
            if let Err(e) = set {
                tracing::debug!(server = %self.name, error = ?e, "logging/setLevel failed");
            }
        }
        Ok(())
    }

    /// Adds what a start failure needs: the command and the stderr of a process.
    fn start_error(&self, mut e: Error) -> Error {
        match &self.keep {
            #[cfg(unix)]
            Keep::Process(p) => {
                // The reader's account (exit status and stderr) is the better one.
                if let Some(closed) = self.peer.closed() {
                    e = closed;
                } else if let Some(status) = p.exited() {
                    e.message = format!("{} (it exited: {status})", e.message);
                }
                let note = super::stdio::stderr_note(&p.stderr);
                if !e.message.contains(&note) {
                    e.message = format!("{}; {note}", e.message);
                }
                e.message = format!(
                    "{} [command: `{}`]",
                    e.message,
                    crate::text::truncate(&p.command_line, 500)
                );
                e
            }
            Keep::Http(_) => e,
        }
    }

    /// Words and a kind for a failed request of the handshake or the listing.
    fn rpc_error(&self, method: &str, e: RpcError) -> Error {
        match e {
            RpcError::Remote { code, message } => Error::protocol(format!(
                "MCP server {:?} answered {method} with error {code}: {message}",
                self.name
            )),
            RpcError::Timeout(t) => Error::new(
                ErrorKind::Timeout,
                format!(
                    "MCP server {:?} did not answer {method} within {} ms",
                    self.name,
                    t.as_millis()
                ),
            ),
            RpcError::SessionExpired => Error::new(
                ErrorKind::Connection,
                format!(
                    "MCP server {:?}: the session ended (HTTP 404) during {method}",
                    self.name
                ),
            ),
            RpcError::Failed(e) => e,
        }
    }

    /// Every tool the server lists, page by page.
    async fn list_tools(&self) -> Result<Vec<Value>> {
        let mut tools = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let params = match &cursor {
                Some(c) => json!({"cursor": c}),
                None => json!({}),
            };
            let page = self.request_again_on_404("tools/list", params).await?;
            match take_page(&self.name, &mut tools, &page, cursor.as_deref())? {
                Some(next) => cursor = Some(next),
                None => return Ok(tools),
            }
        }
        Err(too_many_pages(&self.name))
    }

    async fn request_again_on_404(&self, method: &str, params: Value) -> Result<Value> {
        match self
            .peer
            .request(&self.wire, method, params.clone(), self.timeout)
            .await
        {
            Err(RpcError::SessionExpired) => {
                self.initialize().await?;
                self.peer
                    .request(&self.wire, method, params, self.timeout)
                    .await
                    .map_err(|e| self.rpc_error(method, e))
            }
            r => r.map_err(|e| self.rpc_error(method, e)),
        }
    }

    /// One `tools/call`; an HTTP session that expired is initialized again and the
    /// call sent once more.
    pub(crate) async fn call(
        &self,
        tool: &str,
        arguments: Value,
        progress: CallProgress,
    ) -> std::result::Result<Value, RpcError> {
        let params = json!({"name": tool, "arguments": arguments});
        let mut result = match self
            .peer
            .request_reporting(
                &self.wire,
                "tools/call",
                params.clone(),
                self.timeout,
                Some(progress.clone()),
            )
            .await
        {
            Err(RpcError::SessionExpired) => {
                self.initialize().await.map_err(RpcError::Failed)?;
                self.peer
                    .request_reporting(
                        &self.wire,
                        "tools/call",
                        params,
                        self.timeout,
                        Some(progress),
                    )
                    .await
            }
            r => r,
        };
        if let (Ok(v), Some(o)) = (&mut result, &self.oauth) {
            o.redact_value(v);
        }
        result
    }
}

impl Server {
    /// One request of the host's own (resources, prompts: see `resources`); an HTTP
    /// session that expired is initialized again and the request sent once more.
    pub(crate) async fn host_request(
        &self,
        method: &str,
        params: Value,
    ) -> std::result::Result<Value, RpcError> {
        match self
            .peer
            .request(&self.wire, method, params.clone(), self.timeout)
            .await
        {
            Err(RpcError::SessionExpired) => {
                self.initialize().await.map_err(RpcError::Failed)?;
                self.peer
                    .request(&self.wire, method, params, self.timeout)
                    .await
            }
            r => r,
        }
    }
}

/// Adds the tools of one `tools/list` page (`cursor`: the one that asked for it) to
/// `tools`: the cursor of the next page, or `None` for the last one (no cursor, or the
/// same again). More than [`MAX_TOOLS`] tools are a `protocol` error.
pub(crate) fn take_page(
    server: &str,
    tools: &mut Vec<Value>,
    page: &Value,
    cursor: Option<&str>,
) -> Result<Option<String>> {
    if let Some(items) = page.get("tools").and_then(Value::as_array) {
        for t in items {
            if tools.len() >= MAX_TOOLS {
                return Err(Error::protocol(format!(
                    "MCP server {server:?} lists more than {MAX_TOOLS} tools"
                )));
            }
            tools.push(t.clone());
        }
    }
    Ok(match page.get("nextCursor").and_then(Value::as_str) {
        Some(next) if !next.is_empty() && cursor != Some(next) => Some(next.to_owned()),
        _ => None,
    })
}

/// The error for a listing longer than [`MAX_PAGES`] pages.
pub(crate) fn too_many_pages(server: &str) -> Error {
    Error::protocol(format!(
        "MCP server {server:?} lists its tools over more than {MAX_PAGES} pages"
    ))
}

/// A configured server and what it is now.
pub(crate) struct Slot {
    name: String,
    config: McpServer,
    auth: Arc<AuthContext>,
    /// The server's OAuth (its tokens outlive a restart of the server).
    oauth: Option<Arc<super::oauth::OAuth>>,
    server: Option<Arc<Server>>,
    tools: Vec<Arc<McpTool>>,
}

impl Slot {
    pub fn new(name: &str, config: McpServer, auth: Arc<AuthContext>) -> Slot {
        Slot {
            name: name.to_owned(),
            config,
            auth,
            oauth: None,
            server: None,
            tools: Vec::new(),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Starts the server if it is not running (again, if it stopped) and lists its
    /// tools, or lists them again if it said they changed.
    pub async fn refresh(&mut self, limits: Limits) -> Result<()> {
        let running = self
            .server
            .as_ref()
            .filter(|s| s.peer.closed().is_none())
            .cloned();
        let server = match running {
            Some(s) => {
                if !s.peer.list_changed.swap(false, Ordering::SeqCst) {
                    return Ok(());
                }
                s
            }
            None => {
                self.server = None;
                self.tools.clear();
                let oauth = self.oauth()?;
                let s = Server::start(
                    &self.name,
                    &self.config,
                    limits,
                    oauth,
                    self.auth.client_hooks.clone(),
                )
                .await?;
                self.server = Some(s.clone());
                s
            }
        };
        let listed = server.list_tools().await?;
        self.tools = tools::adapt(&server, &self.config, listed)?;
        Ok(())
    }

    /// The server's OAuth, made at its first start.
    fn oauth(&mut self) -> Result<Option<Arc<super::oauth::OAuth>>> {
        if self.oauth.is_none() {
            if let (Some(config), McpTransport::Http { url, .. }) =
                (&self.config.oauth, &self.config.transport)
            {
                let hooks = self
                    .auth
                    .hooks
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .clone();
                self.oauth = Some(Arc::new(super::oauth::OAuth::new(
                    &self.name,
                    url,
                    config.clone(),
                    hooks,
                    self.auth.live.clone(),
                )?));
            }
        }
        Ok(self.oauth.clone())
    }

    /// Lets go of the server (stopped once no call of it is running).
    pub fn stop(&mut self) {
        self.server = None;
        self.tools.clear();
    }

    /// The running server, if it is.
    pub fn server(&self) -> Option<Arc<Server>> {
        self.server.clone()
    }

    /// The built-in `read_resource` tool, when the server runs and its declaration
    /// turns it on.
    fn read_tool(&self) -> Option<ReadResourceTool> {
        let server = self.server.as_ref().filter(|_| self.config.read_resource)?;
        Some(ReadResourceTool::new(server, &self.config))
    }

    pub fn tools(&self) -> Vec<Arc<dyn Tool>> {
        let mut out: Vec<Arc<dyn Tool>> = self
            .tools
            .iter()
            .map(|t| t.clone() as Arc<dyn Tool>)
            .collect();
        out.extend(self.read_tool().map(|t| Arc::new(t) as Arc<dyn Tool>));
        out
    }

    pub fn infos(&self) -> Vec<McpToolInfo> {
        let mut out: Vec<McpToolInfo> = self.tools.iter().map(|t| t.info()).collect();
        out.extend(self.read_tool().map(|t| t.info()));
        out
    }
}
