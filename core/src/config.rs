//! Owns the configuration schema — one set of keys for every language (DESIGN.md,
//! "Configuration"): the Rust builder methods and the JSON form the C ABI, Go and
//! Python use. Unknown keys and wrong types are `config` errors naming the key.
//!
//! Each key is one row of a `config_keys!` declaration below (see
//! `core/src/config_keys.rs`): the row gives the field, its type, default, bounds, builder
//! and one line of documentation, and the struct, `Debug`, the defaults, the JSON
//! reading and writing and the key tables ([`CONFIG`] and the nested ones) follow from
//! it. Adding a key is adding a row, then running `scripts/gen.sh`.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Map, Value};

use crate::config_keys::{config_keys, enum_key, wrong_type, KeyValue};
use crate::error::{Error, Result};
pub use crate::mcp::{McpServer, McpTransport};
pub use crate::provider::ProviderKind;
pub use crate::request::{Compat, Effort, OutputMode, Reasoning, ToolSpec};

use crate::vocab::{Key, KeyType};

/// The provider is named by the registration's names (`provider::NAMES`), so a new
/// provider needs no edit here.
impl KeyValue for ProviderKind {
    const TYPE: KeyType = KeyType::Enum(crate::provider::NAMES);
    fn read(v: &Value, path: &str) -> Result<Self> {
        v.as_str().and_then(ProviderKind::parse).ok_or_else(|| {
            wrong_type(
                path,
                &format!("one of {}", crate::provider::NAMES.join(" ")),
            )
        })
    }
    fn write(&self) -> Value {
        Value::from(self.as_str())
    }
}

enum_key! {
    Compat: ["auto", "openai", "deepseek", "ollama", "vllm", "generic"];
    OutputMode: ["auto", "native", "tool"];
    Effort: ["none", "low", "medium", "high"];
}

/// The keys of `reasoning` (in the configuration and in a turn's options).
pub const REASONING_KEYS: &[Key] = &[
    Key::new(
        "effort",
        Effort::TYPE,
        || json!("medium"),
        "How hard the model should think; none turns reasoning off where the provider allows it.",
    ),
    Key::new(
        "budget_tokens",
        KeyType::U32,
        || Value::Null,
        "Thinking budget in tokens where the provider takes one (Anthropic, Gemini); default follows the effort.",
    ),
];

/// The keys of one MCP server (`mcp_servers.<name>`): `command` (with `args`, `env`,
/// `inherit_env`, `cwd`) or `url` (with `headers`), in the shape MCP clients' files already use.
pub const MCP_SERVER_KEYS: &[Key] = &[
    Key::new(
        "command",
        KeyType::String,
        || Value::Null,
        "stdio: the command that starts the server (exactly one of command and url).",
    ),
    Key::new(
        "args",
        KeyType::StringArray,
        || json!([]),
        "stdio: the command's arguments.",
    ),
    Key::new(
        "env",
        KeyType::StringMap,
        || json!({}),
        "stdio: environment variables set for the server. Of panto's own environment it gets only HOME, LOGNAME, PATH, SHELL, TERM and USER, and inherit_env.",
    ),
    Key::new(
        "inherit_env",
        KeyType::StringArray,
        || json!([]),
        "stdio: more of panto's environment variables the server gets, by name (API keys reach it only when named here).",
    ),
    Key::new(
        "cwd",
        KeyType::String,
        || Value::Null,
        "stdio: the server's working directory (default: panto's).",
    ),
    Key::new(
        "url",
        KeyType::String,
        || Value::Null,
        "Streamable HTTP: the server's endpoint (exactly one of command and url).",
    ),
    Key::new(
        "headers",
        KeyType::StringMap,
        || json!({}),
        "Streamable HTTP: headers sent with every request; their values are secrets.",
    ),
    Key::new(
        "timeout_ms",
        KeyType::U64,
        || json!(crate::mcp::DEFAULT_TIMEOUT_MS),
        "Longest one request may wait for an answer, in milliseconds; each progress notification starts it again.",
    )
    .min(1),
    Key::new(
        "tool_prefix",
        KeyType::String,
        || Value::Null,
        "What the server's tool names are prefixed with (default: the server's name and __).",
    ),
    Key::new(
        "enabled_tools",
        KeyType::StringArray,
        || Value::Null,
        "Only these tools, by the server's names (default: all).",
    ),
    Key::new(
        "disabled_tools",
        KeyType::StringArray,
        || json!([]),
        "Never these tools, by the server's names.",
    ),
    Key::new(
        "log_level",
        KeyType::Enum(&[
            "off", "debug", "info", "notice", "warning", "error", "critical", "alert", "emergency",
        ]),
        || json!("off"),
        "The least level of the server's log lines that become server_log events while its tools run (off: none); sent to the server as logging/setLevel when it offers logging.",
    ),
    Key::new(
        "oauth",
        KeyType::Object(MCP_OAUTH_KEYS),
        || Value::Null,
        "Streamable HTTP: sign in with OAuth 2.1 when the server asks (discovery, registration, PKCE or client credentials, refresh); tokens are secrets.",
    ),
    Key::new(
        "read_resource",
        KeyType::Bool,
        || json!(false),
        "Offer the model the built-in tool <prefix>read_resource, which reads one of the server's resources by its URI (to follow a resource_link a tool returned).",
    ),
    Key::new(
        "sampling",
        KeyType::Bool,
        || json!(false),
        "Answer the server's sampling/createMessage requests through the agent's own provider while its tools run (each approved by the host's hook when it has one; usage counted in the turn's); declares the sampling capability.",
    ),
    Key::new(
        "sampling_max_tokens",
        KeyType::U32,
        || json!(crate::mcp::DEFAULT_SAMPLING_MAX_TOKENS),
        "The most output tokens one sampling request of the server may ask for (a larger maxTokens is cut to this).",
    )
    .min(1),
    Key::new(
        "elicitation",
        KeyType::Bool,
        || json!(false),
        "Answer the server's elicitation/create requests through the host's hook (the CLI asks on the terminal; declined without one); declares the elicitation capability.",
    ),
];

/// The keys of an MCP server's OAuth (`mcp_servers.<name>.oauth`).
pub const MCP_OAUTH_KEYS: &[Key] = &[
    Key::new(
        "grant",
        KeyType::Enum(&["authorization_code", "client_credentials"]),
        || json!("authorization_code"),
        "authorization_code: a person signs in in a browser (PKCE, loopback redirect); client_credentials: unattended, with client_id and client_secret.",
    ),
    Key::new(
        "client_id",
        KeyType::String,
        || Value::Null,
        "The client's id at the authorization server (default: panto registers itself, for authorization_code).",
    ),
    Key::new(
        "client_secret",
        KeyType::String,
        || Value::Null,
        "The client's secret, for a confidential client; a secret.",
    ),
    Key::new(
        "scope",
        KeyType::String,
        || Value::Null,
        "The scopes asked for, space-separated (default: what the server names).",
    ),
    Key::new(
        "redirect_port",
        KeyType::U32,
        || json!(0),
        "The loopback port of the authorization_code redirect (0: any free port).",
    )
    .max(65535),
];

/// The largest `output_retries` accepted.
pub const MAX_OUTPUT_RETRIES: u32 = 10;

/// The largest `queue_capacity` accepted: a queue that full holds that many events, so a
/// larger value would be gigabytes of memory for one slow consumer rather than a setting.
pub const MAX_QUEUE_CAPACITY: usize = 65_536;

/// Custom headers that carry the provider credentials panto sets itself. Setting one in
/// `headers` while `api_key` is also set is a `config` error: two credentials, one of
/// them silently ignored, is never what was meant.
pub const AUTH_HEADERS: [&str; 3] = ["authorization", "x-api-key", "x-goog-api-key"];

config_keys! {
    /// Retry policy for requests that fail before their first byte.
    #[derive(Clone, Copy, PartialEq, Eq)]
    pub struct RetryConfig in const RETRY_KEYS {
        /// Retries after the first attempt.
        pub max_retries: u32 = 2, key(max(100));
        /// First backoff in milliseconds, doubled per retry.
        pub initial_delay_ms: u64 = 500;
        /// Cap on one backoff in milliseconds.
        pub max_delay_ms: u64 = 8000;
        /// No retry starts once this many milliseconds have passed since a message's first attempt.
        ///
        /// The overall deadline of one message's retries: no retry starts once this much
        /// time has passed since the message's first attempt began, or would pass during
        /// its backoff; the last error is reported instead.
        pub max_elapsed_ms: u64 = 300_000;
        /// Longest wait a server may ask for (retry-after) that is honoured, in milliseconds; a longer one fails at once, with the wait on the error.
        ///
        /// Such a wait (`retry-after-ms`, `retry-after`) replaces the backoff, however
        /// long; a longer one ends the turn at once with the response's error, its
        /// [`Error::retry_after_ms`](crate::Error::retry_after_ms) set.
        pub max_retry_after_ms: u64 = 60_000;
    }
}

impl Default for RetryConfig {
    fn default() -> Self {
        RetryConfig::defaults()
    }
}

config_keys! {
    /// Network timeouts.
    #[derive(Clone, Copy, PartialEq, Eq)]
    pub struct Timeouts in const TIMEOUT_KEYS {
        /// TCP and TLS connect, in milliseconds.
        pub connect_ms: u64 = 10_000, key(min(1));
        /// Longest wait for the provider (headers, or between reads), in milliseconds.
        ///
        /// Anything the server sends re-arms it, keep-alive comments and empty events
        /// included; time spent waiting for a slow consumer does not count.
        pub idle_ms: u64 = 120_000, key(min(1));
        /// One whole attempt, from sending the request to the last byte, in milliseconds.
        ///
        /// Time spent waiting for a slow consumer does not count.
        pub request_ms: u64 = 600_000, key(min(1));
    }
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts::defaults()
    }
}

impl Timeouts {
    /// `connect_ms` as a duration.
    pub fn connect(&self) -> Duration {
        Duration::from_millis(self.connect_ms)
    }
    /// `idle_ms` as a duration.
    pub fn idle(&self) -> Duration {
        Duration::from_millis(self.idle_ms)
    }
    /// `request_ms` as a duration.
    pub fn request(&self) -> Duration {
        Duration::from_millis(self.request_ms)
    }
}

/// Default of `compaction.keep_last` and of `CompactOptions::keep_last`.
pub const DEFAULT_KEEP_LAST: usize = 6;

config_keys! {
    /// Automatic compaction (`compaction: {threshold_tokens, keep_last, model?, prompt?}`):
    /// when the input tokens of the last request pass `threshold_tokens` (the history's
    /// estimate when no request has reported any: a restored conversation, a server without
    /// usage), the next request of a turn first summarizes the older history (see
    /// `Agent::compact`).
    #[derive(Clone, PartialEq, Eq)]
    pub struct CompactionConfig in const COMPACTION_KEYS {
        /// Compact before a request once the history passes this many input tokens.
        pub threshold_tokens: u64 = 0, key(required(), min(1));
        /// Messages kept verbatim at the end of the history.
        pub keep_last: usize = DEFAULT_KEEP_LAST, key(min(1));
        /// The model that writes the summary (default: the turn's).
        pub model: Option<String> = None;
        /// Replaces the summarization instructions.
        ///
        /// The default is `compaction::DEFAULT_PROMPT`.
        pub prompt: Option<String> = None;
    }
}

/// Most entries of `fallback`.
pub const MAX_FALLBACK_MODELS: usize = 8;

config_keys! {
    /// One entry of `fallback`: a model of another provider (or another endpoint, key or
    /// model of the same one) that a step is sent to when the models before it failed.
    ///
    /// The entry gets the agent's other settings (system prompt, tools, limits, retry
    /// policy, timeouts), but not its `headers` (they may hold another endpoint's
    /// credentials), nor `store`.
    #[derive(Clone, PartialEq, Eq)]
    pub struct FallbackModel in pub const FALLBACK_KEYS {
        /// Which wire format the entry's provider speaks.
        pub provider: ProviderKind = ProviderKind::default(), key(required());
        /// The model to ask.
        pub model: String = String::new(), key(required());
        /// The entry's API base URL (default: its provider's API).
        pub base_url: Option<String> = None, with some with_base_url(impl Into<String>);
        /// The environment variable its API key is read from when the agent is made (default: the provider's, such as ANTHROPIC_API_KEY).
        pub api_key_env: Option<String> = None, with some with_api_key_env(impl Into<String>);
        /// The entry's API key, instead of api_key_env; "" sends none.
        pub api_key: Option<String> = None, with some with_api_key(impl Into<String>),
            write redacted_optional_key, debug redacted_optional_key;
    }
}

impl FallbackModel {
    /// An entry for `model` of `provider`, with its provider's base URL and API key
    /// variable.
    pub fn new(provider: ProviderKind, model: impl Into<String>) -> FallbackModel {
        FallbackModel {
            provider,
            model: model.into(),
            ..FallbackModel::defaults()
        }
    }

    /// The configuration of a request to this entry: `primary` with the entry's
    /// provider, model, base URL and API key, without `headers`, `store` and the
    /// compatibility setting of the primary's server.
    pub fn config(&self, primary: &Config) -> Config {
        Config {
            provider: self.provider,
            model: self.model.clone(),
            base_url: self
                .base_url
                .clone()
                .unwrap_or_else(|| self.provider.default_base_url().to_owned()),
            api_key: self.resolved_api_key(),
            headers: BTreeMap::new(),
            store: false,
            compat: Compat::Auto,
            mcp_servers: BTreeMap::new(),
            fallback: Vec::new(),
            ..primary.clone()
        }
    }

    /// The entry's API key: `api_key`, else the value of `api_key_env` (else of its
    /// provider's variable) now, else none.
    pub fn resolved_api_key(&self) -> String {
        match &self.api_key {
            Some(k) => k.clone(),
            None => std::env::var(
                self.api_key_env
                    .as_deref()
                    .unwrap_or(self.provider.api_key_env()),
            )
            .unwrap_or_default(),
        }
    }
}

/// Default of `max_queued_requests`.
pub const DEFAULT_MAX_QUEUED_REQUESTS: u32 = 1024;

/// Default of `max_message_bytes`.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 32 << 20;
/// Default of `max_tool_output_bytes`.
pub const DEFAULT_MAX_TOOL_OUTPUT_BYTES: usize = 100 << 10;
/// Default of `max_input_bytes`.
pub const DEFAULT_MAX_INPUT_BYTES: usize = 4 << 20;
/// Default of `max_history_bytes`.
pub const DEFAULT_MAX_HISTORY_BYTES: usize = 32 << 20;

config_keys! {
    /// The agent configuration. Build it with [`Config::new`] and the `with_*` methods, or
    /// parse the JSON form with [`Config::from_json`].
    ///
    /// [`CONFIG`] is its schema: every key of the JSON form, with its type, default,
    /// bounds and one line of documentation — the one list every binding is generated
    /// from (see [`crate::vocab`]). [`Config::from_json`] checks input against it before
    /// reading it, and [`Config::validate`] checks a built `Config` through
    /// [`Config::to_value`].
    #[derive(Clone, PartialEq)]
    pub struct Config in pub const CONFIG {
        /// Which wire format the provider speaks.
        pub provider: ProviderKind = ProviderKind::default();
        /// The model to ask.
        pub model: String = String::new(), key(required());
        /// As in the provider's SDK: OpenAI's includes /v1, Anthropic's and Gemini's do not (default: the provider's API).
        pub base_url: String = String::new(), key(unset()), with into with_base_url;
        /// The API key (default: OPENAI_API_KEY, ANTHROPIC_API_KEY or GEMINI_API_KEY); "" sends none.
        pub api_key: String = String::new(), key(unset()), with into with_api_key,
            write redacted_key, debug redacted_key;
        /// The system prompt.
        pub system: Option<String> = None, with some with_system(impl Into<String>);
        /// Output limit of one response (default: the provider's).
        pub max_tokens: Option<u32> = None, key(min(1)), with some with_max_tokens(u32);
        /// Sampling temperature (default: the provider's).
        pub temperature: Option<f64> = None, with some with_temperature(f64);
        /// Host tools: declared here, answered by the caller.
        ///
        /// They are answered through `submit_tool_result`; Rust tools are added with
        /// `Agent::add_tool`.
        pub tools: Vec<ToolSpec> = Vec::new(), with push with_host_tool(ToolSpec);
        /// Most model requests in one turn.
        pub max_steps: u32 = 16, key(min(1)), with set with_max_steps;
        /// Most tool calls the model may ask for in one turn (default: no bound but max_steps); past it the turn fails with kind tool and none of that step's calls runs.
        pub max_tool_calls: Option<u32> = None, key(min(1)), with some with_max_tool_calls(u32);
        /// Most model requests in flight at once to this endpoint (base URL and API key), shared by every agent of the process with the same limits (default: no limit).
        ///
        /// A request over the limit waits (asynchronously, holding no thread) for one
        /// to finish; `message_start.queued_ms` says how long it waited. Retries and
        /// compaction requests count too.
        pub max_concurrent_requests: Option<u32> = None, key(min(1)),
            with some with_max_concurrent_requests(u32);
        /// Most requests waiting for max_concurrent_requests at once; one more fails at once with kind rate_limited.
        pub max_queued_requests: u32 = DEFAULT_MAX_QUEUED_REQUESTS,
            with set with_max_queued_requests;
        /// Cap on the tokens of the conversation a request sends (the provider's count with provider_token_counts, else the estimate); past it a turn fails with kind config before any request (default: no cap).
        pub max_history_tokens: Option<u64> = None, key(min(1)),
            with some with_max_history_tokens(u64);
        /// Ask the provider's token-count endpoint (where it has one) for compaction's and max_history_tokens' counts, instead of the local estimate.
        pub provider_token_counts: bool = false, with set with_provider_token_counts;
        /// Most tool calls running at once.
        pub tool_concurrency: usize = 4, key(min(1), shown_as(KeyType::U32)),
            with set with_tool_concurrency;
        /// Longest one tool call may run, in milliseconds.
        pub tool_timeout_ms: u64 = 120_000, key(min(1)), with set with_tool_timeout_ms;
        /// Retry policy for requests that fail before their first byte.
        pub retry: RetryConfig = RetryConfig::defaults(), with set with_retry;
        /// Network time limits.
        pub timeouts: Timeouts = Timeouts::defaults(), with set with_timeouts;
        /// Events buffered between the turn and a slow consumer.
        pub queue_capacity: usize = 256,
            key(min(1), max(MAX_QUEUE_CAPACITY as u64), shown_as(KeyType::U32)),
            with set with_queue_capacity;
        /// Extra HTTP headers sent with every request.
        ///
        /// Credential-like ones are secrets; `Debug` shows only their names.
        pub headers: BTreeMap<String, String> = BTreeMap::new(),
            with insert with_header(impl Into<String>), debug header_names;
        /// Cap on one server-sent event; larger is a protocol error.
        pub max_event_bytes: usize = crate::sse::DEFAULT_MAX_EVENT_SIZE, key(min(1024));
        /// Cap on one assistant message's text and tool arguments; larger is a protocol error.
        pub max_message_bytes: usize = DEFAULT_MAX_MESSAGE_BYTES, key(min(1024)),
            with set with_max_message_bytes;
        /// Cap on one tool result; longer output is cut with a note the model reads.
        ///
        /// For Rust and host tools alike: longer output is cut at this size and ends with
        /// a note saying so.
        pub max_tool_output_bytes: usize = DEFAULT_MAX_TOOL_OUTPUT_BYTES, key(min(256)),
            with set with_max_tool_output_bytes;
        /// Cap on one turn's input (the user message); larger is a config error.
        ///
        /// A larger input is refused before anything is sent.
        pub max_input_bytes: usize = DEFAULT_MAX_INPUT_BYTES, key(min(1)),
            with set with_max_input_bytes;
        /// Cap on the conversation (its saved JSON) when a turn starts or a history is loaded; past it is a config error.
        ///
        /// A turn whose input would take the history past this, or a saved history
        /// larger than this, is refused (compact or clear it). A turn's own steps are
        /// bounded by `max_steps` and the per-message caps instead.
        pub max_history_bytes: usize = DEFAULT_MAX_HISTORY_BYTES, key(min(1024)),
            with set with_max_history_bytes;
        /// Reasoning control for every turn (default: the provider's).
        ///
        /// A turn's `TurnOptions::reasoning` replaces it; `None` sends nothing.
        pub reasoning: Option<Reasoning> = None, with some with_reasoning(Reasoning);
        /// Anthropic: mark prompt cache breakpoints.
        ///
        /// The breakpoints (system prompt, tool list, latest message) let an agent loop
        /// pay full price for each input token once.
        pub prompt_caching: bool = true, with set with_prompt_caching;
        /// Automatic compaction of older history (default: never on its own).
        pub compaction: Option<CompactionConfig> = None,
            with some with_compaction(CompactionConfig);
        /// Which OpenAI-compatible server this is, for fields only some servers know (auto: from base_url).
        ///
        /// See [`Compat`].
        pub compat: Compat = Compat::Auto, with set with_compat;
        /// MCP servers whose tools the model may call, by name: started at the agent's first turn, stopped when it is dropped.
        ///
        /// A server's tools are called `<name>__<tool>` (see [`crate::mcp`]).
        pub mcp_servers: BTreeMap<String, McpServer> = BTreeMap::new(),
            with insert with_mcp_server(McpServer);
        /// openai-responses: keep responses on the server (store: true) and send only what follows the last one (previous_response_id); default: stateless, the whole history each time.
        ///
        /// The stateless default sends the whole history with the encrypted reasoning
        /// each time.
        pub store: bool = false, with set with_store;
        /// JSON Schema (an object at the root) every turn's final answer must match: the answer is JSON, validated, and message_complete carries it as output (default: plain text).
        ///
        /// A turn's `TurnOptions::output_schema` replaces it or turns it off.
        pub output_schema: Option<Value> = None, with some with_output_schema(Value);
        /// Repair requests after an answer that does not match output_schema; then the turn fails with output_invalid.
        ///
        /// At most [`MAX_OUTPUT_RETRIES`].
        pub output_retries: u32 = 1, key(max(MAX_OUTPUT_RETRIES as u64)),
            with set with_output_retries;
        /// How the answer is asked for: native uses the provider's structured-output field, tool forces one call of an output tool (for compatible servers that lack the field; no other tool can be used then); auto is native.
        pub output_mode: OutputMode = OutputMode::Auto, with set with_output_mode;
        /// Record message content (prompts, answers, tool arguments and results, each at most 16 KiB, secrets removed) on the turn's OpenTelemetry spans; also on when OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT is true.
        ///
        /// See docs/observability.md. Off by default: spans then carry names, ids,
        /// models, token counts and timings, never content.
        pub capture_message_content: bool = false, with set with_capture_message_content;
        /// Models tried in order, at most 8, when a request fails after its retries with rate_limited, server, connection, timeout or an overloaded provider, before any of its answer was shown: each {provider, model, base_url?, api_key_env?, api_key?}.
        ///
        /// The step goes to the next entry with a `provider_fallback` event, and the
        /// rest of the turn stays on the entry that answered; the next turn starts with
        /// the agent's own model again. See docs/production.md.
        pub fallback: Vec<FallbackModel> = Vec::new(), with push with_fallback(FallbackModel);
    }
}

/// The API key as `Debug` and `to_value` show it.
fn redacted_key(key: &str) -> &'static str {
    if key.is_empty() {
        ""
    } else {
        "[REDACTED]"
    }
}

/// An optional API key as `Debug` and `to_value` show it.
fn redacted_optional_key(key: &Option<String>) -> Option<&'static str> {
    key.as_deref().map(redacted_key)
}

/// The headers as `Debug` shows them: names only.
fn header_names(headers: &BTreeMap<String, String>) -> Vec<&String> {
    headers.keys().collect()
}

// The types are `request`'s; reading and writing their JSON form is the configuration's.
impl Reasoning {
    /// Parses the JSON form; `path` names the key in errors (`reasoning`,
    /// `options.reasoning`).
    pub fn from_value(v: &Value, path: &str) -> Result<Reasoning> {
        let obj = v.as_object().ok_or_else(|| wrong_type(path, "an object"))?;
        crate::vocab::check(REASONING_KEYS, obj, &format!("{path}."))?;
        let mut r = Reasoning::new(Effort::Medium);
        crate::config_keys::read_key(obj, "effort", &format!("{path}."), &mut r.effort)?;
        crate::config_keys::read_key(
            obj,
            "budget_tokens",
            &format!("{path}."),
            &mut r.budget_tokens,
        )?;
        Ok(r)
    }

    /// The JSON form (`{"effort", "budget_tokens"?}`).
    pub fn to_value(&self) -> Value {
        let mut o = Map::new();
        o.insert("effort".into(), self.effort.as_str().into());
        if let Some(b) = self.budget_tokens {
            o.insert("budget_tokens".into(), b.into());
        }
        Value::Object(o)
    }
}

impl KeyValue for Reasoning {
    const TYPE: KeyType = KeyType::Object(REASONING_KEYS);
    fn read(v: &Value, path: &str) -> Result<Self> {
        Reasoning::from_value(v, path)
    }
    fn write(&self) -> Value {
        self.to_value()
    }
}

/// `mcp_servers`: each entry read by [`mcp_server_from_value`] (its checks, naming
/// `mcp_servers.<name>.<key>`, are [`McpServer::check`]'s, run by `validate`).
impl KeyValue for BTreeMap<String, McpServer> {
    const TYPE: KeyType = KeyType::ObjectMap(MCP_SERVER_KEYS);
    fn read(v: &Value, path: &str) -> Result<Self> {
        let o = v.as_object().ok_or_else(|| wrong_type(path, "an object"))?;
        o.iter()
            .map(|(name, v)| Ok((name.clone(), mcp_server_from_value(name, v)?)))
            .collect()
    }
    fn write(&self) -> Value {
        Value::Object(
            self.iter()
                .map(|(name, server)| (name.clone(), mcp_server_to_value(server)))
                .collect(),
        )
    }
}

// Each provider's own API, as `ProviderKind::default_base_url` gives it (the
// provider's module owns it); kept here, where they were first defined.
/// OpenAI's API, the default `base_url` of `openai` and `openai-responses`.
pub const DEFAULT_OPENAI_BASE_URL: &str = crate::provider::openai::DEFAULT_BASE_URL;
/// Anthropic's API, the default `base_url` of `anthropic`.
pub const DEFAULT_ANTHROPIC_BASE_URL: &str = crate::provider::anthropic::DEFAULT_BASE_URL;
/// Google's Gemini API, the default `base_url` of `gemini`.
pub const DEFAULT_GEMINI_BASE_URL: &str = crate::provider::gemini::DEFAULT_BASE_URL;

impl Config {
    /// A configuration with every default: base URL of the provider, API key from its
    /// environment variable (`OPENAI_API_KEY` / `ANTHROPIC_API_KEY`).
    pub fn new(provider: ProviderKind, model: impl Into<String>) -> Config {
        Config {
            provider,
            model: model.into(),
            base_url: provider.default_base_url().to_owned(),
            api_key: std::env::var(provider.api_key_env()).unwrap_or_default(),
            ..Config::defaults()
        }
    }

    /// The full endpoint URL (`base_url` without trailing slash + the provider's path)
    /// for the configured model.
    pub fn endpoint(&self) -> String {
        self.endpoint_for(&self.model)
    }

    /// The endpoint URL of a request to `model` (Gemini's URL names the model; the
    /// other providers' do not).
    pub fn endpoint_for(&self, model: &str) -> String {
        self.provider.wire().endpoint(&self.base_url, model)
    }

    /// Checks values a request would fail on anyway, so the caller hears it early.
    pub fn validate(&self) -> Result<()> {
        self.validate_with(true)
    }

    /// `validate`, with or without the schema's types and bounds. A configuration read
    /// by `from_json` has had its JSON checked against the schema already, and what it
    /// did not set holds the defaults: checking its JSON form again (written out whole,
    /// then checked key by key) would only repeat that, once per agent made.
    fn validate_with(&self, schema: bool) -> Result<()> {
        if self.model.trim().is_empty() {
            return Err(Error::config("model: required"));
        }
        if !(self.base_url.starts_with("http://") || self.base_url.starts_with("https://")) {
            return Err(Error::config(format!(
                "base_url: must start with http:// or https:// (got {:?})",
                self.base_url
            )));
        }
        // The tools first: what the providers accept of a declaration, with the tool named
        // (the schema below would also refuse parameters that are not an object, by path
        // only).
        let mut seen = std::collections::HashSet::new();
        for (i, tool) in self.tools.iter().enumerate() {
            if let Err((field, problem)) = tool.check() {
                return Err(Error::config(if tool.name.is_empty() {
                    format!("tools[{i}].{field}: {problem}")
                } else {
                    format!(
                        "tools[{i}].{field}: tool {:?}: {problem}",
                        crate::text::truncate(&tool.name, 100)
                    )
                }));
            }
            if !seen.insert(tool.name.as_str()) {
                return Err(Error::config(format!(
                    "tools[{i}].name: duplicate tool {:?}",
                    tool.name
                )));
            }
            // A provider's own rule, narrower than the one every provider shares.
            if let Some(problem) = self.provider.wire().tool_name_problem(&tool.name) {
                return Err(Error::config(format!(
                    "tools[{i}].name: tool {:?}: {problem}",
                    crate::text::truncate(&tool.name, 100)
                )));
            }
        }
        for (name, server) in &self.mcp_servers {
            server.check(name)?;
        }
        if self.fallback.len() > MAX_FALLBACK_MODELS {
            return Err(Error::config(format!(
                "fallback: at most {MAX_FALLBACK_MODELS} entries (got {})",
                self.fallback.len()
            )));
        }
        for (i, entry) in self.fallback.iter().enumerate() {
            if entry.model.trim().is_empty() {
                return Err(Error::config(format!("fallback[{i}].model: required")));
            }
            if let Some(url) = &entry.base_url {
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(Error::config(format!(
                        "fallback[{i}].base_url: must start with http:// or https:// (got {url:?})"
                    )));
                }
            }
            if let Some(var) = &entry.api_key_env {
                if var.is_empty() || var.contains('=') || var.contains('\0') {
                    return Err(Error::config(format!(
                        "fallback[{i}].api_key_env: not an environment variable name"
                    )));
                }
            }
            if let Some(schema) = &self.output_schema {
                crate::output::OutputSpec::new(
                    schema,
                    entry.provider,
                    self.output_mode,
                    &format!("fallback[{i}]: output_schema"),
                )?;
            }
            for (t, tool) in self.tools.iter().enumerate() {
                if let Some(problem) = entry.provider.wire().tool_name_problem(&tool.name) {
                    return Err(Error::config(format!(
                        "fallback[{i}].provider: tools[{t}] {:?}: {problem}",
                        crate::text::truncate(&tool.name, 100)
                    )));
                }
            }
        }
        if let Some(schema) = &self.output_schema {
            crate::output::OutputSpec::new(
                schema,
                self.provider,
                self.output_mode,
                "output_schema",
            )?;
        }
        // Types and bounds, from the schema: the same checks as the JSON form gets.
        if schema {
            if let Value::Object(obj) = self.to_value() {
                crate::vocab::check(CONFIG, &obj, "")?;
            }
        }
        for (name, value) in &self.headers {
            if reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_err() {
                return Err(Error::config(format!(
                    "headers.{name}: not a valid header name"
                )));
            }
            if reqwest::header::HeaderValue::from_str(value).is_err() {
                return Err(Error::config(format!(
                    "headers.{name}: not a valid header value"
                )));
            }
            let lower = name.to_ascii_lowercase();
            if AUTH_HEADERS.contains(&lower.as_str()) && !self.api_key.is_empty() {
                return Err(Error::config(format!(
                    "headers.{name}: would replace the credential panto sends for api_key; \
                     to send your own, set api_key to \"\" (an empty string)"
                )));
            }
        }
        Ok(())
    }

    /// Parses the JSON form. Every key is optional except `model`; `api_key` defaults to
    /// the provider's environment variable. The input is checked against [`CONFIG`]
    /// first, so everything below reads values of the right type.
    pub fn from_json(json: &str) -> Result<Config> {
        let root: Value = serde_json::from_str(json).map_err(|e| {
            Error::config(format!("config: {}", crate::output::json_problem(json, &e)))
        })?;
        let obj = root
            .as_object()
            .ok_or_else(|| Error::config("config: must be a JSON object"))?;
        crate::vocab::check(CONFIG, obj, "")?;
        // The provider decides the defaults of base_url and api_key.
        let mut provider = ProviderKind::default();
        crate::config_keys::read_key(obj, "provider", "", &mut provider)?;
        let mut c = Config::new(provider, "");
        c.read_keys(obj, "")?;
        // The schema's checks ran on `obj` above.
        c.validate_with(false)?;
        Ok(c)
    }

    /// The JSON form of this configuration, every key of [`CONFIG`] present (`null` where
    /// unset). The API key is replaced by `"[REDACTED]"` when one is set: this is for
    /// checking and showing a configuration, never for sending it anywhere.
    pub fn to_value(&self) -> Value {
        self.write_keys()
    }
}

impl McpServer {
    /// One server from the JSON form of an `mcp_servers` entry (as a profile of the CLI
    /// holds it): checked against [`MCP_SERVER_KEYS`], errors naming
    /// `mcp_servers.<name>.<key>`.
    pub fn from_value(name: &str, v: &Value) -> Result<McpServer> {
        let path = format!("mcp_servers.{name}");
        let o = v
            .as_object()
            .ok_or_else(|| wrong_type(&path, "an object"))?;
        crate::vocab::check(MCP_SERVER_KEYS, o, &format!("{path}."))?;
        let server = mcp_server_from_value(name, v)?;
        server.check(name)?;
        Ok(server)
    }
}

/// One `mcp_servers` entry, already checked against [`MCP_SERVER_KEYS`].
fn mcp_server_from_value(name: &str, v: &Value) -> Result<McpServer> {
    let get = |k: &str| v.get(k).filter(|v| !v.is_null());
    let string = |k: &str| get(k).and_then(Value::as_str).map(str::to_owned);
    let strings = |k: &str| -> Option<Vec<String>> {
        get(k).and_then(Value::as_array).map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
    };
    let map = |k: &str| -> BTreeMap<String, String> {
        get(k)
            .and_then(Value::as_object)
            .map(|o| {
                o.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                    .collect()
            })
            .unwrap_or_default()
    };
    let path = format!("mcp_servers.{name}");
    let transport = match (string("command"), string("url")) {
        (Some(command), None) => {
            if get("headers").is_some() {
                return Err(Error::config(format!(
                    "{path}.headers: only for a server with a url"
                )));
            }
            McpTransport::Stdio {
                command,
                args: strings("args").unwrap_or_default(),
                env: map("env"),
                inherit_env: strings("inherit_env").unwrap_or_default(),
                cwd: string("cwd"),
            }
        }
        (None, Some(url)) => {
            for k in ["args", "env", "inherit_env", "cwd"] {
                if get(k).is_some() {
                    return Err(Error::config(format!(
                        "{path}.{k}: only for a server with a command"
                    )));
                }
            }
            McpTransport::Http {
                url,
                headers: map("headers"),
            }
        }
        (Some(_), Some(_)) => {
            return Err(Error::config(format!(
                "{path}: give either command or url, not both"
            )))
        }
        (None, None) => {
            return Err(Error::config(format!(
                "{path}: needs a command (stdio) or a url (Streamable HTTP)"
            )))
        }
    };
    Ok(McpServer {
        transport,
        timeout_ms: get("timeout_ms")
            .and_then(Value::as_u64)
            .unwrap_or(crate::mcp::DEFAULT_TIMEOUT_MS),
        tool_prefix: string("tool_prefix"),
        enabled_tools: strings("enabled_tools"),
        disabled_tools: strings("disabled_tools").unwrap_or_default(),
        log_level: string("log_level")
            .as_deref()
            .and_then(crate::mcp::McpLogLevel::parse),
        oauth: get("oauth").map(|o| {
            let s = |k: &str| {
                o.get(k)
                    .and_then(Value::as_str)
                    .filter(|v| !v.is_empty())
                    .map(str::to_owned)
            };
            crate::mcp::McpOAuth {
                grant: s("grant")
                    .as_deref()
                    .and_then(crate::mcp::McpOAuthGrant::parse)
                    .unwrap_or(crate::mcp::McpOAuthGrant::AuthorizationCode),
                client_id: s("client_id"),
                client_secret: s("client_secret"),
                scope: s("scope"),
                redirect_port: o
                    .get("redirect_port")
                    .and_then(Value::as_u64)
                    .and_then(|p| u16::try_from(p).ok())
                    .unwrap_or(0),
            }
        }),
        read_resource: get("read_resource").and_then(Value::as_bool) == Some(true),
        sampling: get("sampling").and_then(Value::as_bool) == Some(true),
        sampling_max_tokens: get("sampling_max_tokens")
            .and_then(Value::as_u64)
            .map_or(crate::mcp::DEFAULT_SAMPLING_MAX_TOKENS, |n| {
                u32::try_from(n).unwrap_or(u32::MAX)
            }),
        elicitation: get("elicitation").and_then(Value::as_bool) == Some(true),
    })
}

/// The JSON form of one MCP server, header values and credential-like environment
/// values redacted (as `Config::to_value` does the API key).
fn mcp_server_to_value(s: &McpServer) -> Value {
    let mut o = Map::new();
    match &s.transport {
        McpTransport::Stdio {
            command,
            args,
            env,
            inherit_env,
            cwd,
        } => {
            o.insert("command".into(), command.clone().into());
            o.insert("args".into(), args.clone().into());
            let env: Map<String, Value> = env
                .iter()
                .map(|(k, v)| {
                    let shown = if crate::secret::is_secret_header(k) {
                        "[REDACTED]"
                    } else {
                        v.as_str()
                    };
                    (k.clone(), shown.into())
                })
                .collect();
            o.insert("env".into(), env.into());
            o.insert("inherit_env".into(), inherit_env.clone().into());
            o.insert("cwd".into(), cwd.clone().into());
        }
        McpTransport::Http { url, headers } => {
            o.insert("url".into(), url.clone().into());
            let headers: Map<String, Value> = headers
                .keys()
                .map(|k| (k.clone(), "[REDACTED]".into()))
                .collect();
            o.insert("headers".into(), headers.into());
        }
    }
    o.insert("timeout_ms".into(), s.timeout_ms.into());
    o.insert("tool_prefix".into(), s.tool_prefix.clone().into());
    o.insert("enabled_tools".into(), s.enabled_tools.clone().into());
    o.insert("disabled_tools".into(), s.disabled_tools.clone().into());
    o.insert(
        "log_level".into(),
        s.log_level.map_or("off", |l| l.as_str()).into(),
    );
    if let Some(oauth) = &s.oauth {
        o.insert(
            "oauth".into(),
            json!({
                "grant": oauth.grant.as_str(),
                "client_id": oauth.client_id,
                "client_secret": oauth.client_secret.as_ref().map(|_| "[REDACTED]"),
                "scope": oauth.scope,
                "redirect_port": oauth.redirect_port,
            }),
        );
    }
    o.insert("read_resource".into(), s.read_resource.into());
    o.insert("sampling".into(), s.sampling.into());
    o.insert("sampling_max_tokens".into(), s.sampling_max_tokens.into());
    o.insert("elicitation".into(), s.elicitation.into());
    Value::Object(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_json_config_parses() {
        let c = Config::from_json(
            r#"{"provider":"anthropic","model":"claude","base_url":"http://localhost:1/",
                "api_key":"k","system":"s","max_tokens":100,"temperature":0.5,
                "tools":[{"name":"w","description":"d","parameters":{"type":"object"}}],
                "max_steps":3,"tool_concurrency":2,"tool_timeout_ms":50,
                "retry":{"max_retries":1,"initial_delay_ms":1,"max_delay_ms":2},
                "timeouts":{"connect_ms":1,"idle_ms":2,"request_ms":3},
                "queue_capacity":8,"headers":{"x-a":"b"}}"#,
        )
        .unwrap();
        assert_eq!(c.provider.as_str(), "anthropic");
        assert_eq!(c.endpoint(), "http://localhost:1/v1/messages");
        assert_eq!(c.tools[0].name, "w");
        assert_eq!(c.retry.max_retries, 1);
        assert_eq!(c.timeouts.request_ms, 3);
        assert_eq!(c.queue_capacity, 8);
        assert_eq!(c.headers["x-a"], "b");
    }

    #[test]
    fn errors_name_the_key() {
        let cases = [
            (r#"{"model":"m","colour":1}"#, "colour"),
            (r#"{"model":"m","max_steps":"3"}"#, "max_steps"),
            (
                r#"{"model":"m","retry":{"max_retries":-1}}"#,
                "retry.max_retries",
            ),
            (r#"{"model":"m","timeouts":{"idle":5}}"#, "timeouts.idle"),
            (
                r#"{"model":"m","tools":[{"name":"a","parameters":3}]}"#,
                "tools[0].parameters",
            ),
            (r#"{"model":"m","provider":"gemma"}"#, "provider"),
            (r#"{"model":""}"#, "model"),
            (r#"{"model":"m","headers":{"x":1}}"#, "headers.x"),
            (
                r#"{"model":"m","retry":{"max_retries":1000}}"#,
                "retry.max_retries",
            ),
            (r#"[1]"#, "config"),
            (
                r#"{"model":"m","queue_capacity":100000000000}"#,
                "queue_capacity",
            ),
            (
                r#"{"model":"m","api_key":"k","headers":{"Authorization":"Bearer x"}}"#,
                "headers.Authorization",
            ),
            (
                r#"{"model":"m","api_key":"k","headers":{"x-api-key":"x"}}"#,
                "headers.x-api-key",
            ),
            (
                r#"{"model":"m","max_tool_output_bytes":3}"#,
                "max_tool_output_bytes",
            ),
            (
                r#"{"model":"m","headers":{"x-a":"line\nbreak"}}"#,
                "headers.x-a",
            ),
            (
                r#"{"model":"m","reasoning":{"effort":"max"}}"#,
                "reasoning.effort",
            ),
            (
                r#"{"model":"m","reasoning":{"effort":"low","budget":5}}"#,
                "reasoning.budget",
            ),
            (r#"{"model":"m","prompt_caching":"no"}"#, "prompt_caching"),
            (
                r#"{"model":"m","compaction":{"keep_last":2}}"#,
                "compaction.threshold_tokens",
            ),
            (
                r#"{"model":"m","compaction":{"threshold_tokens":10,"keep_last":0}}"#,
                "compaction.keep_last",
            ),
            (r#"{"model":"m","compat":"lmstudio"}"#, "compat"),
            (
                r#"{"model":"m","mcp_servers":{"x":{}}}"#,
                "mcp_servers.x: needs a command",
            ),
            (
                r#"{"model":"m","mcp_servers":{"x":{"command":"a","url":"http://h"}}}"#,
                "mcp_servers.x: give either",
            ),
            (
                r#"{"model":"m","mcp_servers":{"x":{"command":"a","timeout_ms":0}}}"#,
                "mcp_servers.x.timeout_ms",
            ),
            (
                r#"{"model":"m","mcp_servers":{"x":{"command":"a","colour":1}}}"#,
                "mcp_servers.x.colour",
            ),
            (
                r#"{"model":"m","mcp_servers":{"x":{"url":"ftp://h"}}}"#,
                "mcp_servers.x.url",
            ),
            (
                r#"{"model":"m","mcp_servers":{"x":{"url":"http://h","args":["a"]}}}"#,
                "mcp_servers.x.args",
            ),
            (
                r#"{"model":"m","mcp_servers":{"x":{"command":"a","args":[1]}}}"#,
                "mcp_servers.x.args[0]",
            ),
        ];
        for (json, key) in cases {
            let e = Config::from_json(json).unwrap_err();
            assert_eq!(e.kind, crate::ErrorKind::Config);
            assert!(e.message.starts_with(key), "{json}: {}", e.message);
        }
    }

    #[test]
    fn conversation_controls_parse() {
        let c = Config::from_json(
            r#"{"model":"m","reasoning":{"effort":"high","budget_tokens":2048},
                "prompt_caching":false,"compat":"vllm",
                "compaction":{"threshold_tokens":1000,"model":"small","prompt":"p"}}"#,
        )
        .unwrap();
        assert_eq!(
            c.reasoning,
            Some(Reasoning {
                effort: Effort::High,
                budget_tokens: Some(2048)
            })
        );
        assert!(!c.prompt_caching);
        assert_eq!(c.compat, Compat::Vllm);
        let k = c.compaction.unwrap();
        assert_eq!((k.threshold_tokens, k.keep_last), (1000, DEFAULT_KEEP_LAST));
        assert_eq!(k.model.as_deref(), Some("small"));
        let d = Config::from_json(r#"{"model":"m"}"#).unwrap();
        assert!(d.prompt_caching && d.reasoning.is_none() && d.compaction.is_none());
        assert_eq!(d.compat, Compat::Auto);
    }

    #[test]
    fn mcp_servers_parse_and_show_no_secret() {
        let c = Config::from_json(
            r#"{"model":"m","mcp_servers":{
                "time":{"command":"uvx","args":["mcp-server-time"],"env":{"GH_TOKEN":"tok-123456","LANG":"C"},"inherit_env":["TZ"],"cwd":"/tmp"},
                "docs":{"url":"https://h/mcp","headers":{"Authorization":"Bearer sec-123456"},
                        "timeout_ms":5,"tool_prefix":"d_","enabled_tools":["a"],"disabled_tools":["b"],
                        "log_level":"warning","read_resource":true}}}"#,
        )
        .unwrap();
        assert_eq!(
            c.mcp_servers["time"],
            McpServer::stdio("uvx", ["mcp-server-time"])
                .with_env("GH_TOKEN", "tok-123456")
                .with_env("LANG", "C")
                .with_inherited_env("TZ")
                .with_cwd("/tmp")
        );
        assert_eq!(
            c.mcp_servers["docs"],
            McpServer::http("https://h/mcp")
                .with_header("Authorization", "Bearer sec-123456")
                .with_timeout_ms(5)
                .with_tool_prefix("d_")
                .with_enabled_tools(["a"])
                .with_disabled_tools(["b"])
                .with_log_level(Some(crate::McpLogLevel::Warning))
                .with_read_resource(true)
        );
        assert_eq!(c.mcp_servers["time"].log_level, None);
        assert!(!c.mcp_servers["time"].read_resource);
        assert_eq!(c.to_value()["mcp_servers"]["docs"]["read_resource"], true);
        assert_eq!(c.to_value()["mcp_servers"]["docs"]["log_level"], "warning");
        let shown = format!("{:?} {}", c, c.to_value());
        assert!(
            !shown.contains("tok-123456") && !shown.contains("sec-123456"),
            "{shown}"
        );
        assert!(shown.contains("\"LANG\":\"C\""));
        assert_eq!(
            c.to_value()["mcp_servers"]["time"]["inherit_env"],
            serde_json::json!(["TZ"])
        );
        let bad = Config::from_json(
            r#"{"model":"m","mcp_servers":{"t":{"command":"x","inherit_env":["A=B"]}}}"#,
        )
        .unwrap_err();
        assert!(
            bad.message.contains("mcp_servers.t.inherit_env"),
            "{}",
            bad.message
        );
        let http = Config::from_json(
            r#"{"model":"m","mcp_servers":{"t":{"url":"http://h/mcp","inherit_env":["TZ"]}}}"#,
        )
        .unwrap_err();
        assert!(
            http.message.contains("only for a server with a command"),
            "{}",
            http.message
        );
    }

    #[test]
    fn own_auth_header_is_allowed_without_api_key() {
        let c = Config::from_json(
            r#"{"model":"m","api_key":"","headers":{"Authorization":"Bearer mine"}}"#,
        )
        .unwrap();
        assert_eq!(c.headers["Authorization"], "Bearer mine");
    }

    #[test]
    fn debug_never_shows_the_key() {
        let c = Config::new(ProviderKind::default(), "m").with_api_key("sk-secret-123456");
        assert!(!format!("{c:?}").contains("sk-secret-123456"));
    }

    #[test]
    fn openai_endpoint_keeps_the_version() {
        let c = Config::from_json(
            r#"{"provider":"openai","model":"m","base_url":"http://localhost:11434/v1/"}"#,
        )
        .unwrap();
        assert_eq!(c.endpoint(), "http://localhost:11434/v1/chat/completions");
    }

    #[test]
    fn gemini_refuses_a_tool_name_that_does_not_start_with_a_letter_or_underscore() {
        let tool = |name: &str| ToolSpec {
            name: name.to_owned(),
            description: String::new(),
            parameters: serde_json::json!({"type": "object"}),
            needs_approval: false,
            external: false,
        };
        for (provider, name, ok) in [
            ("gemini", "9lives", false),
            ("gemini", "-x", false),
            ("gemini", "_private", true),
            ("gemini", "weather", true),
            ("openai", "9lives", true),
        ] {
            let kind = ProviderKind::parse(provider).unwrap();
            let mut c = Config::new(kind, "m").with_api_key("k");
            c.tools = vec![tool(name)];
            let r = c.validate();
            assert_eq!(r.is_ok(), ok, "{provider:?} {name}: {r:?}");
            if let Err(e) = r {
                assert_eq!(e.kind, crate::ErrorKind::Config);
                assert!(
                    e.message.contains("tools[0].name") && e.message.contains(name),
                    "{e}"
                );
            }
        }
    }
}
