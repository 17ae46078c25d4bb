//! Owns the Model Context Protocol client: MCP servers whose tools the model can call
//! like any other tool. What a server is (`McpServer`: a command over stdio, or a
//! Streamable HTTP endpoint), the set of an agent's servers and their lifecycle
//! ([`McpServers`]: started lazily at the first turn, shared by the agent's turns, shut
//! down when the last agent using them is dropped), the JSON-RPC layer (`rpc`), the
//! two transports (`stdio`, `http`), and the tools they become (`tools`: naming,
//! filters, result mapping, timeouts), and what a host asks a server outside a turn
//! (`resources`: resources, resource templates, prompts, and the opt-in
//! `read_resource` tool). The agent sees only [`crate::Tool`]s; no type of this
//! module's dependencies is public.
//!
//! The JSON-RPC layer is panto's own rather than the official SDK's (`rmcp`): see
//! DESIGN.md, "MCP servers as tools", for why, for the lifecycle and for the limits.

// The fuzz target's way in (see the module's doc); not part of the API.
#[doc(hidden)]
pub mod fuzzing;
mod http;
mod oauth;
mod resources;
mod rpc;
pub(crate) mod sampling;
mod server;
#[cfg(unix)]
mod stdio;
mod tools;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use tokio::sync::Mutex as AsyncMutex;
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};
use crate::secret::is_secret_header;
use crate::tool::Tool;

pub use oauth::{
    McpOAuth, McpOAuthGrant, McpOAuthHooks, McpOpenUrl, McpTokenFile, McpTokenStore,
    AUTHORIZE_TIMEOUT,
};
pub use resources::resource_contents_to_value;
pub use resources::{
    McpPrompt, McpPromptArgument, McpPromptMessage, McpPromptResult, McpResource, McpResourceBody,
    McpResourceContents, McpResourceTemplate, READ_RESOURCE_TOOL,
};
pub use sampling::{
    McpApproveSampling, McpClientHooks, McpElicit, McpElicitationAnswer, McpElicitationRequest,
    McpSamplingRequest, DEFAULT_SAMPLING_MAX_TOKENS,
};
pub use tools::McpToolInfo;

/// How many servers are being stopped right now (a stdio server's stop thread, an
/// HTTP session's DELETE), for [`wait_stopped`].
static STOPPING: (std::sync::Mutex<usize>, std::sync::Condvar) =
    (std::sync::Mutex::new(0), std::sync::Condvar::new());

/// One server being stopped, counted by [`wait_stopped`] until it is dropped (also when
/// the future or thread holding it is dropped before it finished).
pub(crate) struct Stopping(());

impl Stopping {
    pub(crate) fn start() -> Stopping {
        *STOPPING
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) += 1;
        Stopping(())
    }
}

impl Drop for Stopping {
    fn drop(&mut self) {
        let (lock, cv) = &STOPPING;
        let mut n = lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *n = n.saturating_sub(1);
        cv.notify_all();
    }
}

/// Waits until every MCP server being stopped (its agents dropped) has exited and been
/// reaped, and every HTTP session being ended has had its DELETE sent and answered (or
/// given up on), at most `bound`; returns whether they all were. Call it before a
/// program exits: stopping a server takes up to a few seconds on a thread of its own,
/// which the process's exit would cut short.
pub fn wait_stopped(bound: std::time::Duration) -> bool {
    let (lock, cv) = &STOPPING;
    let n = lock
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let (n, _) = cv
        .wait_timeout_while(n, bound, |n| *n > 0)
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    *n == 0
}

/// The protocol revision panto speaks.
pub const PROTOCOL_VERSION: &str = "2025-11-25";
/// The revisions panto accepts when a server answers `initialize` with an older one.
pub const ACCEPTED_VERSIONS: [&str; 3] = ["2025-11-25", "2025-06-18", "2025-03-26"];

/// Default of an MCP server's `timeout_ms`: the longest one request may go without an
/// answer or a progress notification.
pub const DEFAULT_TIMEOUT_MS: u64 = 60_000;

/// The variables of panto's environment every stdio server gets (where set), as the
/// official MCP SDKs pass them: nothing else of panto's environment reaches a server
/// (API keys included) unless its `inherit_env` names it or its `env` sets it.
pub const DEFAULT_INHERITED_ENV: [&str; 6] = ["HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER"];

/// How panto reaches an MCP server.
#[derive(Clone, PartialEq, Eq)]
pub enum McpTransport {
    /// A command panto starts, speaking newline-delimited JSON-RPC on its stdin and
    /// stdout. Its environment is private: only [`DEFAULT_INHERITED_ENV`] and the
    /// variables named in `inherit_env` are taken from panto's, then `env` is added;
    /// `cwd` defaults to panto's.
    Stdio {
        /// The program that starts the server (run directly, not through a shell).
        command: String,
        /// The command's arguments.
        args: Vec<String>,
        /// Environment variables set for the server.
        env: BTreeMap<String, String>,
        /// More of panto's environment variables the server gets, by name, beyond
        /// [`DEFAULT_INHERITED_ENV`].
        inherit_env: Vec<String>,
        /// The server's working directory (default: panto's).
        cwd: Option<String>,
    },
    /// A Streamable HTTP endpoint; every header value is a secret.
    Http {
        /// The server's endpoint.
        url: String,
        /// Headers sent with every request; their values are secrets.
        headers: BTreeMap<String, String>,
    },
}

/// The level of an MCP server's log line (`notifications/message`), the syslog
/// severities of RFC 5424 that MCP uses, least severe first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum McpLogLevel {
    /// Debugging detail.
    Debug,
    /// Information.
    Info,
    /// A normal but significant event.
    Notice,
    /// A warning.
    Warning,
    /// An error.
    Error,
    /// A critical condition.
    Critical,
    /// Action must be taken at once.
    Alert,
    /// The system is unusable.
    Emergency,
}

impl McpLogLevel {
    /// Every level, least severe first.
    pub const ALL: [McpLogLevel; 8] = [
        McpLogLevel::Debug,
        McpLogLevel::Info,
        McpLogLevel::Notice,
        McpLogLevel::Warning,
        McpLogLevel::Error,
        McpLogLevel::Critical,
        McpLogLevel::Alert,
        McpLogLevel::Emergency,
    ];

    /// The level's name in MCP (`warning`).
    pub fn as_str(self) -> &'static str {
        match self {
            McpLogLevel::Debug => "debug",
            McpLogLevel::Info => "info",
            McpLogLevel::Notice => "notice",
            McpLogLevel::Warning => "warning",
            McpLogLevel::Error => "error",
            McpLogLevel::Critical => "critical",
            McpLogLevel::Alert => "alert",
            McpLogLevel::Emergency => "emergency",
        }
    }

    /// The level of this name, if MCP has it.
    pub fn parse(name: &str) -> Option<McpLogLevel> {
        McpLogLevel::ALL.into_iter().find(|l| l.as_str() == name)
    }
}

/// One MCP server of the configuration (`mcp_servers.<name>`).
#[derive(Clone, PartialEq, Eq)]
pub struct McpServer {
    /// How the server is reached.
    pub transport: McpTransport,
    /// Longest one request may go without an answer or progress (default 60 s).
    pub timeout_ms: u64,
    /// What the server's tool names are prefixed with (default `<name>__`).
    pub tool_prefix: Option<String>,
    /// Only these tools (by the server's own names), when given.
    pub enabled_tools: Option<Vec<String>>,
    /// Never these tools (by the server's own names).
    pub disabled_tools: Vec<String>,
    /// The least level of the server's log lines that become `server_log` events of a
    /// turn (while one of its tools runs); `None` (the default, `"off"` in the
    /// configuration): none do. When set, it is also sent to a server that declares the
    /// logging capability (`logging/setLevel`).
    pub log_level: Option<McpLogLevel>,
    /// OAuth for a Streamable HTTP server that asks for it (see [`McpOAuth`]); `None`:
    /// requests carry only the configured headers.
    pub oauth: Option<McpOAuth>,
    /// Whether the model is offered the built-in tool `<prefix>read_resource`, which
    /// reads one of the server's resources by its URI (`resources/read`), so that it can
    /// follow a `resource_link` a tool gave it (default: off).
    pub read_resource: bool,
    /// Whether the server's `sampling/createMessage` requests are answered through the
    /// agent's provider (while one of its tools runs in a turn, each approved by the
    /// host's hook when there is one, see [`McpClientHooks`]); also declares the
    /// `sampling` capability. Default: off (refused, and not declared).
    pub sampling: bool,
    /// The most output tokens one sampling request may ask for (default
    /// [`DEFAULT_SAMPLING_MAX_TOKENS`]).
    pub sampling_max_tokens: u32,
    /// Whether the server's `elicitation/create` requests are answered by the host's
    /// hook (declined without one, see [`McpClientHooks`]); also declares the
    /// `elicitation` capability. Default: off (refused, and not declared).
    pub elicitation: bool,
}

impl fmt::Debug for McpServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("McpServer");
        match &self.transport {
            McpTransport::Stdio {
                command,
                args,
                env,
                inherit_env,
                cwd,
            } => d
                .field("command", command)
                .field("args", args)
                .field("env", &env.keys().collect::<Vec<_>>())
                .field("inherit_env", inherit_env)
                .field("cwd", cwd),
            McpTransport::Http { url, headers } => d
                .field("url", url)
                .field("headers", &headers.keys().collect::<Vec<_>>()),
        };
        d.field("timeout_ms", &self.timeout_ms)
            .field("tool_prefix", &self.tool_prefix)
            .field("enabled_tools", &self.enabled_tools)
            .field("disabled_tools", &self.disabled_tools)
            .field("log_level", &self.log_level)
            .field("oauth", &self.oauth)
            .field("read_resource", &self.read_resource)
            .field("sampling", &self.sampling)
            .field("sampling_max_tokens", &self.sampling_max_tokens)
            .field("elicitation", &self.elicitation)
            .finish()
    }
}

impl McpServer {
    fn with_transport(transport: McpTransport) -> McpServer {
        McpServer {
            transport,
            timeout_ms: DEFAULT_TIMEOUT_MS,
            tool_prefix: None,
            enabled_tools: None,
            disabled_tools: Vec::new(),
            log_level: None,
            oauth: None,
            read_resource: false,
            sampling: false,
            sampling_max_tokens: DEFAULT_SAMPLING_MAX_TOKENS,
            elicitation: false,
        }
    }

    /// A server panto starts: `command` with `args`.
    pub fn stdio<I, S>(command: impl Into<String>, args: I) -> McpServer
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        McpServer::with_transport(McpTransport::Stdio {
            command: command.into(),
            args: args.into_iter().map(Into::into).collect(),
            env: BTreeMap::new(),
            inherit_env: Vec::new(),
            cwd: None,
        })
    }

    /// A Streamable HTTP server at `url`.
    pub fn http(url: impl Into<String>) -> McpServer {
        McpServer::with_transport(McpTransport::Http {
            url: url.into(),
            headers: BTreeMap::new(),
        })
    }

    /// Sets an environment variable for the server (stdio servers; ignored for HTTP).
    pub fn with_env(mut self, name: impl Into<String>, value: impl Into<String>) -> McpServer {
        if let McpTransport::Stdio { env, .. } = &mut self.transport {
            env.insert(name.into(), value.into());
        }
        self
    }

    /// Passes one more of panto's environment variables to the server, by name, beyond
    /// [`DEFAULT_INHERITED_ENV`] (stdio servers; ignored for HTTP).
    pub fn with_inherited_env(mut self, name: impl Into<String>) -> McpServer {
        if let McpTransport::Stdio { inherit_env, .. } = &mut self.transport {
            inherit_env.push(name.into());
        }
        self
    }

    /// Sets the working directory (stdio servers; ignored for HTTP).
    pub fn with_cwd(mut self, dir: impl Into<String>) -> McpServer {
        if let McpTransport::Stdio { cwd, .. } = &mut self.transport {
            *cwd = Some(dir.into());
        }
        self
    }

    /// Adds a header (HTTP servers; ignored for stdio). Its value is a secret.
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<String>) -> McpServer {
        if let McpTransport::Http { headers, .. } = &mut self.transport {
            headers.insert(name.into(), value.into());
        }
        self
    }

    /// Sets how long one request may go without an answer or progress, in milliseconds.
    pub fn with_timeout_ms(mut self, ms: u64) -> McpServer {
        self.timeout_ms = ms;
        self
    }

    /// Sets what the server's tool names are prefixed with (default `<name>__`).
    pub fn with_tool_prefix(mut self, prefix: impl Into<String>) -> McpServer {
        self.tool_prefix = Some(prefix.into());
        self
    }

    /// Offers only these tools, by the server's own names (default: all).
    pub fn with_enabled_tools<I, S>(mut self, tools: I) -> McpServer
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.enabled_tools = Some(tools.into_iter().map(Into::into).collect());
        self
    }

    /// Never offers these tools, by the server's own names.
    pub fn with_disabled_tools<I, S>(mut self, tools: I) -> McpServer
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.disabled_tools = tools.into_iter().map(Into::into).collect();
        self
    }

    /// Makes the server's log lines at `level` and above `server_log` events (see
    /// [`McpServer::log_level`]); `None` turns them off.
    pub fn with_log_level(mut self, level: Option<McpLogLevel>) -> McpServer {
        self.log_level = level;
        self
    }

    /// Signs in to the server with OAuth (Streamable HTTP servers; see [`McpOAuth`]).
    pub fn with_oauth(mut self, oauth: McpOAuth) -> McpServer {
        self.oauth = Some(oauth);
        self
    }

    /// Offers the model the built-in tool `<prefix>read_resource` (see
    /// [`McpServer::read_resource`]).
    pub fn with_read_resource(mut self, on: bool) -> McpServer {
        self.read_resource = on;
        self
    }

    /// Answers the server's sampling requests through the agent's provider (see
    /// [`McpServer::sampling`]).
    pub fn with_sampling(mut self, on: bool) -> McpServer {
        self.sampling = on;
        self
    }

    /// Sets the most output tokens one sampling request may ask for.
    pub fn with_sampling_max_tokens(mut self, max: u32) -> McpServer {
        self.sampling_max_tokens = max;
        self
    }

    /// Answers the server's elicitation requests through the host's hook (see
    /// [`McpServer::elicitation`]).
    pub fn with_elicitation(mut self, on: bool) -> McpServer {
        self.elicitation = on;
        self
    }

    /// The values panto must never show: every header value of an HTTP server (and
    /// the token of a `Bearer` one), and environment values whose names look like
    /// credentials.
    pub(crate) fn secret_values(&self) -> Vec<String> {
        let mut out = Vec::new();
        match &self.transport {
            McpTransport::Http { headers, .. } => {
                for value in headers.values() {
                    out.push(value.clone());
                    if let Some(token) = value.strip_prefix("Bearer ") {
                        out.push(token.to_owned());
                    }
                }
            }
            McpTransport::Stdio { env, .. } => {
                for (name, value) in env {
                    if is_secret_header(name) {
                        out.push(value.clone());
                    }
                }
            }
        }
        if let Some(secret) = self.oauth.as_ref().and_then(|o| o.client_secret.clone()) {
            out.push(secret);
        }
        out
    }

    /// Checks what the schema cannot: a name usable in tool names, a command or URL.
    pub(crate) fn check(&self, name: &str) -> Result<()> {
        let path = format!("mcp_servers.{name}");
        if name.is_empty() || name.len() > 64 {
            return Err(Error::config(format!(
                "{path}: a server's name must be 1 to 64 characters"
            )));
        }
        if self.sampling_max_tokens == 0 {
            return Err(Error::config(format!(
                "{path}.sampling_max_tokens: must be at least 1"
            )));
        }
        if self.timeout_ms == 0 {
            return Err(Error::config(format!(
                "{path}.timeout_ms: must be at least 1"
            )));
        }
        if let Some(oauth) = &self.oauth {
            match &self.transport {
                McpTransport::Stdio { .. } => {
                    return Err(Error::config(format!(
                        "{path}.oauth: only for a server with a url"
                    )))
                }
                McpTransport::Http { headers, .. } => {
                    if headers
                        .keys()
                        .any(|h| h.eq_ignore_ascii_case("authorization"))
                    {
                        return Err(Error::config(format!(
                            "{path}.oauth: the headers already set Authorization; give one of them"
                        )));
                    }
                }
            }
            oauth.check(&format!("{path}.oauth"))?;
        }
        match &self.transport {
            McpTransport::Stdio { command, .. } if command.trim().is_empty() => {
                Err(Error::config(format!("{path}.command: must not be empty")))
            }
            McpTransport::Stdio { inherit_env, .. } => {
                match inherit_env
                    .iter()
                    .find(|n| n.is_empty() || n.contains('=') || n.contains('\0'))
                {
                    Some(bad) => Err(Error::config(format!(
                        "{path}.inherit_env: {bad:?} is not an environment variable's name"
                    ))),
                    None => Ok(()),
                }
            }
            McpTransport::Http { url, headers } => {
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(Error::config(format!(
                        "{path}.url: must start with http:// or https://"
                    )));
                }
                for (h, v) in headers {
                    if reqwest::header::HeaderName::from_bytes(h.as_bytes()).is_err() {
                        return Err(Error::config(format!(
                            "{path}.headers.{h}: not a valid header name"
                        )));
                    }
                    if reqwest::header::HeaderValue::from_str(v).is_err() {
                        return Err(Error::config(format!(
                            "{path}.headers.{h}: not a valid header value"
                        )));
                    }
                }
                Ok(())
            }
        }
    }
}

/// Limits a set of servers applies to what its servers send.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Cap on one JSON-RPC message (a stdio line, an HTTP body or SSE event).
    pub max_message_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_message_bytes: crate::sse::DEFAULT_MAX_EVENT_SIZE,
        }
    }
}

/// A set of MCP servers and their tools. Cheap to clone: clones share the servers.
/// Servers start at the first [`McpServers::tools`] (an agent's first turn) and are
/// shut down when the last clone is dropped: stdin closed, then SIGTERM and SIGKILL
/// to the server's process group (stdio), or the session deleted (HTTP).
#[derive(Clone)]
pub struct McpServers {
    inner: Arc<SetInner>,
}

struct SetInner {
    configs: BTreeMap<String, McpServer>,
    limits: Limits,
    /// What the host lends OAuth, and the tokens it learnt (shared with the agents'
    /// redaction).
    auth: Arc<server::AuthContext>,
    closed: std::sync::atomic::AtomicBool,
    state: AsyncMutex<Vec<server::Slot>>,
}

impl fmt::Debug for McpServers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpServers")
            .field("servers", &self.inner.configs.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl McpServers {
    /// A set of servers (none started). A `config` error names a server whose
    /// declaration cannot work.
    pub fn new(configs: BTreeMap<String, McpServer>) -> Result<McpServers> {
        McpServers::with_limits(configs, Limits::default())
    }

    pub(crate) fn with_limits(
        configs: BTreeMap<String, McpServer>,
        limits: Limits,
    ) -> Result<McpServers> {
        for (name, server) in &configs {
            server.check(name)?;
        }
        let auth = Arc::new(server::AuthContext::default());
        let slots = configs
            .iter()
            .map(|(name, config)| server::Slot::new(name, config.clone(), auth.clone()))
            .collect();
        Ok(McpServers {
            inner: Arc::new(SetInner {
                configs,
                limits,
                auth,
                closed: std::sync::atomic::AtomicBool::new(false),
                state: AsyncMutex::new(slots),
            }),
        })
    }

    /// Lends the servers' OAuth a token store and a way to open an authorization URL
    /// (see [`McpOAuthHooks`]). Call it before the first turn: a server keeps the hooks
    /// it was first started with.
    pub fn set_oauth_hooks(&self, hooks: McpOAuthHooks) {
        *self
            .inner
            .auth
            .hooks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = hooks;
    }

    /// The OAuth tokens learnt so far, for an agent's redaction.
    pub(crate) fn live_secrets(&self) -> Arc<crate::secret::LiveSecrets> {
        self.inner.auth.live.clone()
    }

    /// Lends the servers a way to approve sampling requests and to answer elicitations
    /// (see [`McpClientHooks`]). Read at each request: it may be set at any time.
    pub fn set_client_hooks(&self, hooks: McpClientHooks) {
        *self
            .inner
            .auth
            .client_hooks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = hooks;
    }

    /// Stops the servers now (rather than when the last clone is dropped); a later turn
    /// of an agent using them fails with a `config` error.
    pub fn close(&self) {
        self.inner
            .closed
            .store(true, std::sync::atomic::Ordering::SeqCst);
        // A turn starting the servers holds the lock: it sees the flag when it is done.
        if let Ok(mut slots) = self.inner.state.try_lock() {
            for slot in slots.iter_mut() {
                slot.stop();
            }
        }
    }

    fn check_open(&self, slots: &mut [server::Slot]) -> Result<()> {
        if !self.inner.closed.load(std::sync::atomic::Ordering::SeqCst) {
            return Ok(());
        }
        for slot in slots.iter_mut() {
            slot.stop();
        }
        Err(Error::config("mcp_servers: the MCP servers were closed"))
    }

    /// Whether the set has no server.
    pub fn is_empty(&self) -> bool {
        self.inner.configs.is_empty()
    }

    /// The servers' declarations, by name.
    pub fn configs(&self) -> &BTreeMap<String, McpServer> {
        &self.inner.configs
    }

    /// Every tool of every server, started first if they were not (concurrently), and
    /// listed again where a server said its list changed. A server that cannot start
    /// is an error naming it (with its command and the end of its stderr); it is tried
    /// again at the next call. Tool names that collide are a `config` error.
    pub async fn tools(&self, cancel: &CancellationToken) -> Result<Vec<Arc<dyn Tool>>> {
        let mut slots = self.inner.state.lock().await;
        self.check_open(&mut slots)?;
        let limits = self.inner.limits;
        let work = slots.iter_mut().map(|slot| slot.refresh(limits));
        let results = tokio::select! {
            biased;
            _ = cancel.cancelled() => return Err(Error::cancelled()),
            r = futures_util::future::join_all(work) => r,
        };
        for r in results {
            r?;
        }
        self.check_open(&mut slots)?;
        let mut all: Vec<Arc<dyn Tool>> = Vec::new();
        let mut seen: BTreeMap<String, String> = BTreeMap::new();
        for slot in slots.iter() {
            for t in slot.tools() {
                let name = t.spec().name;
                if let Some(other) = seen.insert(name.clone(), slot.name().to_owned()) {
                    return Err(Error::config(format!(
                        "mcp_servers.{}: the tool name {name:?} is also a tool of the MCP server \
                         {other:?}; set tool_prefix or filter the tools",
                        slot.name()
                    )));
                }
                all.push(t);
            }
        }
        Ok(all)
    }

    /// What `panto mcp list` shows: each server's tools, or why it could not start.
    pub async fn list(
        &self,
        cancel: &CancellationToken,
    ) -> Vec<(String, std::result::Result<Vec<McpToolInfo>, Error>)> {
        let mut slots = self.inner.state.lock().await;
        if let Err(e) = self.check_open(&mut slots) {
            return slots
                .iter()
                .map(|s| (s.name().to_owned(), Err(e.clone())))
                .collect();
        }
        let limits = self.inner.limits;
        let work = slots.iter_mut().map(|slot| slot.refresh(limits));
        let results = tokio::select! {
            biased;
            _ = cancel.cancelled() => slots.iter().map(|_| Err(Error::cancelled())).collect(),
            r = futures_util::future::join_all(work) => r,
        };
        slots
            .iter()
            .zip(results)
            .map(|(slot, r)| (slot.name().to_owned(), r.map(|()| slot.infos())))
            .collect()
    }
}
