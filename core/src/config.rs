//! Owns the configuration schema — one set of keys for every language (DESIGN.md,
//! "Configuration"): the Rust builder methods and the JSON form the C ABI, Go and
//! Python use. Unknown keys and wrong types are `config` errors naming the key.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde_json::{Map, Value};

use crate::error::{Error, Result};
pub use crate::mcp::{McpServer, McpTransport};
pub use crate::request::{Compat, Effort, OutputMode, ProviderKind, Reasoning, ToolSpec};

use crate::vocab::keys::{key, max, min, required};
use crate::vocab::{Key, KeyType};

/// The keys of `reasoning` (in the configuration and in a turn's options).
pub const REASONING_KEYS: &[Key] = &[
    key(
        "effort",
        KeyType::Enum(&["none", "low", "medium", "high"]),
        "\"medium\"",
        "How hard the model should think; none turns reasoning off where the provider allows it.",
    ),
    key(
        "budget_tokens",
        KeyType::U32,
        "null",
        "Thinking budget in tokens where the provider takes one (Anthropic, Gemini); default follows the effort.",
    ),
];

const RETRY_KEYS: &[Key] = &[
    max(
        key(
            "max_retries",
            KeyType::U32,
            "2",
            "Retries after the first attempt.",
        ),
        100,
    ),
    key(
        "initial_delay_ms",
        KeyType::U64,
        "500",
        "First backoff in milliseconds, doubled per retry.",
    ),
    key(
        "max_delay_ms",
        KeyType::U64,
        "8000",
        "Cap on one backoff in milliseconds.",
    ),
    key(
        "max_elapsed_ms",
        KeyType::U64,
        "300000",
        "No retry starts once this many milliseconds have passed since a message's first attempt.",
    ),
    key(
        "max_retry_after_ms",
        KeyType::U64,
        "60000",
        "Longest wait a server may ask for (retry-after) that is honoured, in milliseconds; a longer one fails at once, with the wait on the error.",
    ),
];

const TIMEOUT_KEYS: &[Key] = &[
    min(
        key(
            "connect_ms",
            KeyType::U64,
            "10000",
            "TCP and TLS connect, in milliseconds.",
        ),
        1,
    ),
    min(
        key(
            "idle_ms",
            KeyType::U64,
            "120000",
            "Longest wait for the provider (headers, or between reads), in milliseconds.",
        ),
        1,
    ),
    min(
        key(
            "request_ms",
            KeyType::U64,
            "600000",
            "One whole attempt, from sending the request to the last byte, in milliseconds.",
        ),
        1,
    ),
];

const TOOL_KEYS: &[Key] = &[
    required(key(
        "name",
        KeyType::String,
        "null",
        "The tool's name, as the model calls it: 1 to 64 ASCII letters, digits, _ or -.",
    )),
    key(
        "description",
        KeyType::String,
        "\"\"",
        "What the tool does, for the model.",
    ),
    key(
        "parameters",
        KeyType::JsonObject,
        "{\"type\":\"object\",\"properties\":{}}",
        "JSON Schema of the tool's arguments object; its \"type\" must be \"object\".",
    ),
];

const COMPACTION_KEYS: &[Key] = &[
    required(min(
        key(
            "threshold_tokens",
            KeyType::U64,
            "null",
            "Compact before a request once the history passes this many input tokens.",
        ),
        1,
    )),
    min(
        key(
            "keep_last",
            KeyType::U64,
            "6",
            "Messages kept verbatim at the end of the history.",
        ),
        1,
    ),
    key(
        "model",
        KeyType::String,
        "null",
        "The model that writes the summary (default: the turn's).",
    ),
    key(
        "prompt",
        KeyType::String,
        "null",
        "Replaces the summarization instructions.",
    ),
];

/// The keys of one MCP server (`mcp_servers.<name>`): `command` (with `args`, `env`,
/// `inherit_env`, `cwd`) or `url` (with `headers`), in the shape MCP clients' files already use.
pub const MCP_SERVER_KEYS: &[Key] = &[
    key(
        "command",
        KeyType::String,
        "null",
        "stdio: the command that starts the server (exactly one of command and url).",
    ),
    key("args", KeyType::StringArray, "[]", "stdio: the command's arguments."),
    key(
        "env",
        KeyType::StringMap,
        "{}",
        "stdio: environment variables set for the server. Of panto's own environment it gets only HOME, LOGNAME, PATH, SHELL, TERM and USER, and inherit_env.",
    ),
    key(
        "inherit_env",
        KeyType::StringArray,
        "[]",
        "stdio: more of panto's environment variables the server gets, by name (API keys reach it only when named here).",
    ),
    key(
        "cwd",
        KeyType::String,
        "null",
        "stdio: the server's working directory (default: panto's).",
    ),
    key(
        "url",
        KeyType::String,
        "null",
        "Streamable HTTP: the server's endpoint (exactly one of command and url).",
    ),
    key(
        "headers",
        KeyType::StringMap,
        "{}",
        "Streamable HTTP: headers sent with every request; their values are secrets.",
    ),
    min(
        key(
            "timeout_ms",
            KeyType::U64,
            "60000",
            "Longest one request may wait for an answer, in milliseconds; each progress notification starts it again.",
        ),
        1,
    ),
    key(
        "tool_prefix",
        KeyType::String,
        "null",
        "What the server's tool names are prefixed with (default: the server's name and __).",
    ),
    key(
        "enabled_tools",
        KeyType::StringArray,
        "null",
        "Only these tools, by the server's names (default: all).",
    ),
    key(
        "disabled_tools",
        KeyType::StringArray,
        "[]",
        "Never these tools, by the server's names.",
    ),
];

/// The configuration schema: every key of the JSON form, with its type, default, bounds
/// and one line of documentation — the one list every binding is generated from
/// (see [`crate::vocab`]). [`Config::from_json`] checks input against it before reading
/// it, and [`Config::validate`] checks a built `Config` through [`Config::to_value`].
pub const CONFIG: &[Key] = &[
    key(
        "provider",
        KeyType::Enum(&["openai", "anthropic", "gemini", "openai-responses"]),
        "\"openai\"",
        "Which wire format the provider speaks.",
    ),
    required(key("model", KeyType::String, "null", "The model to ask.")),
    key(
        "base_url",
        KeyType::String,
        "null",
        "As in the provider's SDK: OpenAI's includes /v1, Anthropic's and Gemini's do not (default: the provider's API).",
    ),
    key(
        "api_key",
        KeyType::String,
        "null",
        "The API key (default: OPENAI_API_KEY, ANTHROPIC_API_KEY or GEMINI_API_KEY); \"\" sends none.",
    ),
    key("system", KeyType::String, "null", "The system prompt."),
    min(
        key("max_tokens", KeyType::U32, "null", "Output limit of one response (default: the provider's)."),
        1,
    ),
    key("temperature", KeyType::F64, "null", "Sampling temperature (default: the provider's)."),
    key(
        "tools",
        KeyType::Array(TOOL_KEYS),
        "[]",
        "Host tools: declared here, answered by the caller.",
    ),
    min(
        key("max_steps", KeyType::U32, "16", "Most model requests in one turn."),
        1,
    ),
    min(
        key("tool_concurrency", KeyType::U32, "4", "Most tool calls running at once."),
        1,
    ),
    min(
        key("tool_timeout_ms", KeyType::U64, "120000", "Longest one tool call may run, in milliseconds."),
        1,
    ),
    key("retry", KeyType::Object(RETRY_KEYS), "{}", "Retry policy for requests that fail before their first byte."),
    key("timeouts", KeyType::Object(TIMEOUT_KEYS), "{}", "Network time limits."),
    max(
        min(
            key("queue_capacity", KeyType::U32, "256", "Events buffered between the turn and a slow consumer."),
            1,
        ),
        MAX_QUEUE_CAPACITY as u64,
    ),
    key("headers", KeyType::StringMap, "{}", "Extra HTTP headers sent with every request."),
    min(
        key("max_event_bytes", KeyType::U64, "16777216", "Cap on one server-sent event; larger is a protocol error."),
        1024,
    ),
    min(
        key(
            "max_message_bytes",
            KeyType::U64,
            "33554432",
            "Cap on one assistant message's text and tool arguments; larger is a protocol error.",
        ),
        1024,
    ),
    min(
        key(
            "max_tool_output_bytes",
            KeyType::U64,
            "102400",
            "Cap on one tool result; longer output is cut with a note the model reads.",
        ),
        256,
    ),
    min(
        key(
            "max_input_bytes",
            KeyType::U64,
            "4194304",
            "Cap on one turn's input (the user message); larger is a config error.",
        ),
        1,
    ),
    min(
        key(
            "max_history_bytes",
            KeyType::U64,
            "33554432",
            "Cap on the conversation (its saved JSON) when a turn starts or a history is loaded; past it is a config error.",
        ),
        1024,
    ),
    key("reasoning", KeyType::Object(REASONING_KEYS), "null", "Reasoning control for every turn (default: the provider's)."),
    key("prompt_caching", KeyType::Bool, "true", "Anthropic: mark prompt cache breakpoints."),
    key(
        "compaction",
        KeyType::Object(COMPACTION_KEYS),
        "null",
        "Automatic compaction of older history (default: never on its own).",
    ),
    key(
        "compat",
        KeyType::Enum(&["auto", "openai", "deepseek", "ollama", "vllm", "generic"]),
        "\"auto\"",
        "Which OpenAI-compatible server this is, for fields only some servers know (auto: from base_url).",
    ),
    key(
        "mcp_servers",
        KeyType::ObjectMap(MCP_SERVER_KEYS),
        "{}",
        "MCP servers whose tools the model may call, by name: started at the agent's first turn, stopped when it is dropped.",
    ),
    key(
        "store",
        KeyType::Bool,
        "false",
        "openai-responses: keep responses on the server (store: true) and send only what follows the last one (previous_response_id); default: stateless, the whole history each time.",
    ),
    key(
        "output_schema",
        KeyType::JsonObject,
        "null",
        "JSON Schema (an object at the root) every turn's final answer must match: the answer is JSON, validated, and message_complete carries it as output (default: plain text).",
    ),
    max(
        key(
            "output_retries",
            KeyType::U32,
            "1",
            "Repair requests after an answer that does not match output_schema; then the turn fails with output_invalid.",
        ),
        MAX_OUTPUT_RETRIES as u64,
    ),
    key(
        "output_mode",
        KeyType::Enum(&["auto", "native", "tool"]),
        "\"auto\"",
        "How the answer is asked for: native uses the provider's structured-output field, tool forces one call of an output tool (for compatible servers that lack the field; no other tool can be used then); auto is native.",
    ),
];

/// The largest `output_retries` accepted.
pub const MAX_OUTPUT_RETRIES: u32 = 10;

/// The largest `queue_capacity` accepted: the queue is allocated up front, so a larger
/// value would be a multi-gigabyte allocation rather than a setting.
pub const MAX_QUEUE_CAPACITY: usize = 65_536;

/// Custom headers that carry the provider credentials panto sets itself. Setting one in
/// `headers` while `api_key` is also set is a `config` error: two credentials, one of
/// them silently ignored, is never what was meant.
pub const AUTH_HEADERS: [&str; 3] = ["authorization", "x-api-key", "x-goog-api-key"];

/// Retry policy for requests that fail before their first byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryConfig {
    /// Retries after the first attempt (default 2).
    pub max_retries: u32,
    /// First backoff (default 500 ms), doubled per retry.
    pub initial_delay_ms: u64,
    /// Cap on one backoff (default 8000 ms).
    pub max_delay_ms: u64,
    /// The overall deadline of one message's retries (default 300 000 ms): no retry
    /// starts once this much time has passed since the message's first attempt began, or
    /// would pass during its backoff; the last error is reported instead.
    pub max_elapsed_ms: u64,
    /// The longest wait a server may ask for before a retry (`retry-after-ms`,
    /// `retry-after`) that panto honours (default 60 000 ms). Such a wait replaces the
    /// backoff, however long; a longer one ends the turn at once with the response's
    /// error, its [`Error::retry_after_ms`](crate::Error::retry_after_ms) set.
    pub max_retry_after_ms: u64,
}

impl Default for RetryConfig {
    fn default() -> Self {
        RetryConfig {
            max_retries: 2,
            initial_delay_ms: 500,
            max_delay_ms: 8000,
            max_elapsed_ms: 300_000,
            max_retry_after_ms: 60_000,
        }
    }
}

// The type is `request`'s; reading and writing its JSON form is the configuration's.
impl Reasoning {
    /// Parses the JSON form; `path` names the key in errors (`reasoning`,
    /// `options.reasoning`).
    pub fn from_value(v: &Value, path: &str) -> Result<Reasoning> {
        let obj = v.as_object().ok_or_else(|| wrong_type(path, "an object"))?;
        crate::vocab::check(REASONING_KEYS, obj, &format!("{path}."))?;
        let effort = match obj.get("effort").and_then(Value::as_str) {
            Some(s) => Effort::parse(s).unwrap_or(Effort::Medium),
            None => Effort::Medium,
        };
        let budget_tokens = obj
            .get("budget_tokens")
            .and_then(Value::as_u64)
            .map(|v| u32::try_from(v).unwrap_or(u32::MAX));
        Ok(Reasoning {
            effort,
            budget_tokens,
        })
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

/// Automatic compaction (`compaction: {threshold_tokens, keep_last, model?, prompt?}`):
/// when the input tokens of the last request pass `threshold_tokens` (the history's
/// estimate when no request has reported any: a restored conversation, a server without
/// usage), the next request of a turn first summarizes the older history (see
/// `Agent::compact`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompactionConfig {
    /// Compact before a request once the history passes this many input tokens.
    pub threshold_tokens: u64,
    /// Messages kept verbatim at the end of the history (default 6).
    pub keep_last: usize,
    /// The model that writes the summary (default: the turn's model).
    pub model: Option<String>,
    /// Replaces the summarization instructions (default `compaction::DEFAULT_PROMPT`).
    pub prompt: Option<String>,
}

/// Default of `compaction.keep_last` and of `CompactOptions::keep_last`.
pub const DEFAULT_KEEP_LAST: usize = 6;

/// Network timeouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// TCP + TLS connect (default 10 s).
    pub connect_ms: u64,
    /// Longest wait for the provider (default 120 s): for the response headers, and
    /// between any two reads of the body. Anything the server sends re-arms it, keep-alive
    /// comments and empty events included; time spent waiting for a slow consumer does
    /// not count.
    pub idle_ms: u64,
    /// One whole attempt, from sending the request to the provider's last byte (default
    /// 600 s), not counting time spent waiting for a slow consumer.
    pub request_ms: u64,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect_ms: 10_000,
            idle_ms: 120_000,
            request_ms: 600_000,
        }
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

/// The agent configuration. Build it with [`Config::new`] and the `with_*` methods, or
/// parse the JSON form with [`Config::from_json`].
#[derive(Clone, PartialEq)]
pub struct Config {
    /// Which wire format the provider speaks.
    pub provider: ProviderKind,
    /// The model to ask.
    pub model: String,
    /// As in the provider's official SDK: OpenAI's includes `/v1`, Anthropic's does not.
    pub base_url: String,
    /// The API key (default: the provider's environment variable); `""` sends none.
    pub api_key: String,
    /// The system prompt.
    pub system: Option<String>,
    /// Output limit of one response (default: the provider's).
    pub max_tokens: Option<u32>,
    /// Sampling temperature (default: the provider's).
    pub temperature: Option<f64>,
    /// Host tools: declared here, implemented by the caller (answered through
    /// `submit_tool_result`). Rust tools are added with `Agent::add_tool`.
    pub tools: Vec<ToolSpec>,
    /// Most model requests in one turn (default 16).
    pub max_steps: u32,
    /// Most tool calls running at once (default 4).
    pub tool_concurrency: usize,
    /// Longest one tool call may run, in milliseconds (default 120 s).
    pub tool_timeout_ms: u64,
    /// Retry policy for requests that fail before their first byte.
    pub retry: RetryConfig,
    /// Network time limits.
    pub timeouts: Timeouts,
    /// Events buffered between the turn and a slow consumer (default 256).
    pub queue_capacity: usize,
    /// Extra HTTP headers sent with every request (credential-like ones are secrets).
    pub headers: BTreeMap<String, String>,
    /// Cap on one SSE event (default 16 MiB); larger is a `protocol` error.
    pub max_event_bytes: usize,
    /// Cap on one assistant message's text and tool arguments together (default 32 MiB);
    /// larger is a `protocol` error.
    pub max_message_bytes: usize,
    /// Cap on one tool result (default 100 KiB), for Rust and host tools alike: longer
    /// output is cut at this size and ends with a note saying so, which the model reads.
    pub max_tool_output_bytes: usize,
    /// Cap on one turn's input, the user message (default 4 MiB): a larger one is a
    /// `config` error before anything is sent.
    pub max_input_bytes: usize,
    /// Cap on the conversation, measured as its saved JSON (default 32 MiB): a turn whose
    /// input would take it past this, or a saved history larger than this, is a `config`
    /// error (compact or clear it). Checked when a turn starts and when a history is set;
    /// a turn's own steps are bounded by `max_steps` and the per-message caps instead.
    pub max_history_bytes: usize,
    /// Reasoning control for every turn (a turn's `TurnOptions::reasoning` replaces it);
    /// `None` sends nothing, leaving the provider's default.
    pub reasoning: Option<Reasoning>,
    /// Anthropic: mark cache breakpoints (system prompt, tool list, latest message) so
    /// an agent loop pays full price for each input token once (default on).
    pub prompt_caching: bool,
    /// Automatic compaction; `None` (the default) never compacts on its own.
    pub compaction: Option<CompactionConfig>,
    /// See [`Compat`] (default `Auto`).
    pub compat: Compat,
    /// MCP servers whose tools the model may call, by name (see [`crate::mcp`]).
    pub mcp_servers: BTreeMap<String, McpServer>,
    /// `openai-responses` only: let the server keep each response (`store: true`) and
    /// send only the messages after the last one with its `previous_response_id`,
    /// instead of the stateless default (`store: false`, the whole history with the
    /// encrypted reasoning each time).
    pub store: bool,
    /// The JSON Schema every turn's final answer must match (`None`: plain text). A
    /// turn's `TurnOptions::output_schema` replaces or turns it off.
    pub output_schema: Option<Value>,
    /// Repair requests after an answer that does not match the schema (default 1,
    /// at most [`MAX_OUTPUT_RETRIES`]).
    pub output_retries: u32,
    /// How the structured answer is asked for (default `Auto`).
    pub output_mode: OutputMode,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("provider", &self.provider)
            .field("model", &self.model)
            .field("base_url", &self.base_url)
            .field(
                "api_key",
                &if self.api_key.is_empty() {
                    ""
                } else {
                    "[REDACTED]"
                },
            )
            .field("system", &self.system)
            .field("max_tokens", &self.max_tokens)
            .field("temperature", &self.temperature)
            .field("tools", &self.tools)
            .field("max_steps", &self.max_steps)
            .field("tool_concurrency", &self.tool_concurrency)
            .field("tool_timeout_ms", &self.tool_timeout_ms)
            .field("retry", &self.retry)
            .field("timeouts", &self.timeouts)
            .field("queue_capacity", &self.queue_capacity)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("max_event_bytes", &self.max_event_bytes)
            .field("max_message_bytes", &self.max_message_bytes)
            .field("max_tool_output_bytes", &self.max_tool_output_bytes)
            .field("max_input_bytes", &self.max_input_bytes)
            .field("max_history_bytes", &self.max_history_bytes)
            .field("reasoning", &self.reasoning)
            .field("prompt_caching", &self.prompt_caching)
            .field("compaction", &self.compaction)
            .field("compat", &self.compat)
            .field("mcp_servers", &self.mcp_servers)
            .field("store", &self.store)
            .field("output_schema", &self.output_schema)
            .field("output_retries", &self.output_retries)
            .field("output_mode", &self.output_mode)
            .finish()
    }
}

/// Default of `max_message_bytes`.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 32 << 20;
/// Default of `max_tool_output_bytes`.
pub const DEFAULT_MAX_TOOL_OUTPUT_BYTES: usize = 100 << 10;
/// Default of `max_input_bytes`.
pub const DEFAULT_MAX_INPUT_BYTES: usize = 4 << 20;
/// Default of `max_history_bytes`.
pub const DEFAULT_MAX_HISTORY_BYTES: usize = 32 << 20;

/// OpenAI's API, the default `base_url` of `openai` and `openai-responses`.
pub const DEFAULT_OPENAI_BASE_URL: &str = "https://api.openai.com/v1";
/// Anthropic's API, the default `base_url` of `anthropic`.
pub const DEFAULT_ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com";
/// Google's Gemini API, the default `base_url` of `gemini`.
pub const DEFAULT_GEMINI_BASE_URL: &str = crate::provider::gemini::DEFAULT_BASE_URL;

impl ProviderKind {
    /// The provider's own API, the default `base_url`.
    pub fn default_base_url(self) -> &'static str {
        match self {
            ProviderKind::OpenAi | ProviderKind::OpenAiResponses => DEFAULT_OPENAI_BASE_URL,
            ProviderKind::Anthropic => DEFAULT_ANTHROPIC_BASE_URL,
            ProviderKind::Gemini => DEFAULT_GEMINI_BASE_URL,
        }
    }
    /// The environment variable the API key is read from by default.
    pub fn api_key_env(self) -> &'static str {
        match self {
            ProviderKind::OpenAi | ProviderKind::OpenAiResponses => "OPENAI_API_KEY",
            ProviderKind::Anthropic => "ANTHROPIC_API_KEY",
            ProviderKind::Gemini => "GEMINI_API_KEY",
        }
    }
    /// The endpoint path appended to `base_url`. Gemini's names the model (see
    /// [`Config::endpoint_for`]); this is its pattern, for messages.
    pub fn endpoint_path(self) -> &'static str {
        match self {
            ProviderKind::OpenAi => "/chat/completions",
            ProviderKind::Anthropic => "/v1/messages",
            ProviderKind::Gemini => "/v1beta/models/{model}:streamGenerateContent?alt=sse",
            ProviderKind::OpenAiResponses => "/responses",
        }
    }
}

impl Config {
    /// A configuration with every default: base URL of the provider, API key from its
    /// environment variable (`OPENAI_API_KEY` / `ANTHROPIC_API_KEY`).
    pub fn new(provider: ProviderKind, model: impl Into<String>) -> Config {
        Config {
            provider,
            model: model.into(),
            base_url: provider.default_base_url().to_owned(),
            api_key: std::env::var(provider.api_key_env()).unwrap_or_default(),
            system: None,
            max_tokens: None,
            temperature: None,
            tools: Vec::new(),
            max_steps: 16,
            tool_concurrency: 4,
            tool_timeout_ms: 120_000,
            retry: RetryConfig::default(),
            timeouts: Timeouts::default(),
            queue_capacity: 256,
            headers: BTreeMap::new(),
            max_event_bytes: crate::sse::DEFAULT_MAX_EVENT_SIZE,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            max_tool_output_bytes: DEFAULT_MAX_TOOL_OUTPUT_BYTES,
            max_input_bytes: DEFAULT_MAX_INPUT_BYTES,
            max_history_bytes: DEFAULT_MAX_HISTORY_BYTES,
            reasoning: None,
            prompt_caching: true,
            compaction: None,
            compat: Compat::Auto,
            mcp_servers: BTreeMap::new(),
            store: false,
            output_schema: None,
            output_retries: 1,
            output_mode: OutputMode::Auto,
        }
    }

    /// Sets the base URL, as the provider's SDK writes it.
    pub fn with_base_url(mut self, url: impl Into<String>) -> Config {
        self.base_url = url.into();
        self
    }
    /// Sets the API key (`""` sends none).
    pub fn with_api_key(mut self, key: impl Into<String>) -> Config {
        self.api_key = key.into();
        self
    }
    /// Sets the system prompt.
    pub fn with_system(mut self, system: impl Into<String>) -> Config {
        self.system = Some(system.into());
        self
    }
    /// Sets the output limit of one response.
    pub fn with_max_tokens(mut self, n: u32) -> Config {
        self.max_tokens = Some(n);
        self
    }
    /// Sets the sampling temperature.
    pub fn with_temperature(mut self, t: f64) -> Config {
        self.temperature = Some(t);
        self
    }
    /// Declares a host tool (answered through `submit_tool_result`).
    pub fn with_host_tool(mut self, spec: ToolSpec) -> Config {
        self.tools.push(spec);
        self
    }
    /// Sets the most model requests in one turn.
    pub fn with_max_steps(mut self, n: u32) -> Config {
        self.max_steps = n;
        self
    }
    /// Sets the most tool calls running at once.
    pub fn with_tool_concurrency(mut self, n: usize) -> Config {
        self.tool_concurrency = n;
        self
    }
    /// Sets the longest one tool call may run, in milliseconds.
    pub fn with_tool_timeout_ms(mut self, ms: u64) -> Config {
        self.tool_timeout_ms = ms;
        self
    }
    /// Sets the retry policy.
    pub fn with_retry(mut self, retry: RetryConfig) -> Config {
        self.retry = retry;
        self
    }
    /// Sets the network time limits.
    pub fn with_timeouts(mut self, t: Timeouts) -> Config {
        self.timeouts = t;
        self
    }
    /// Sets the events buffered between the turn and a slow consumer.
    pub fn with_queue_capacity(mut self, n: usize) -> Config {
        self.queue_capacity = n;
        self
    }
    /// Sets the cap on one tool result, in bytes.
    pub fn with_max_tool_output_bytes(mut self, n: usize) -> Config {
        self.max_tool_output_bytes = n;
        self
    }
    /// Sets the cap on one assistant message's text and tool arguments, in bytes.
    pub fn with_max_message_bytes(mut self, n: usize) -> Config {
        self.max_message_bytes = n;
        self
    }
    /// Sets the cap on one turn's input, in bytes.
    pub fn with_max_input_bytes(mut self, n: usize) -> Config {
        self.max_input_bytes = n;
        self
    }
    /// Sets the cap on the conversation's saved JSON, in bytes.
    pub fn with_max_history_bytes(mut self, n: usize) -> Config {
        self.max_history_bytes = n;
        self
    }
    /// Sets reasoning control for every turn.
    pub fn with_reasoning(mut self, reasoning: Reasoning) -> Config {
        self.reasoning = Some(reasoning);
        self
    }
    /// Turns Anthropic's prompt cache breakpoints on or off (default on).
    pub fn with_prompt_caching(mut self, on: bool) -> Config {
        self.prompt_caching = on;
        self
    }
    /// Sets automatic compaction.
    pub fn with_compaction(mut self, compaction: CompactionConfig) -> Config {
        self.compaction = Some(compaction);
        self
    }
    /// Says which OpenAI-compatible server this is (default: decided from `base_url`).
    pub fn with_compat(mut self, compat: Compat) -> Config {
        self.compat = compat;
        self
    }
    /// Adds an MCP server under `name` (its tools are called `<name>__<tool>`).
    pub fn with_mcp_server(mut self, name: impl Into<String>, server: McpServer) -> Config {
        self.mcp_servers.insert(name.into(), server);
        self
    }
    /// `openai-responses`: lets the server keep each response (`store: true`).
    pub fn with_store(mut self, on: bool) -> Config {
        self.store = on;
        self
    }
    /// Every turn's final answer must match `schema` (a JSON Schema object).
    pub fn with_output_schema(mut self, schema: Value) -> Config {
        self.output_schema = Some(schema);
        self
    }
    /// Sets how many times an answer that does not match the output schema is sent back
    /// for repair.
    pub fn with_output_retries(mut self, n: u32) -> Config {
        self.output_retries = n;
        self
    }
    /// Sets how a structured answer is asked for.
    pub fn with_output_mode(mut self, mode: OutputMode) -> Config {
        self.output_mode = mode;
        self
    }
    /// Adds an HTTP header sent with every request.
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Config {
        self.headers.insert(name.into(), value.into());
        self
    }

    /// The full endpoint URL (`base_url` without trailing slash + the provider's path)
    /// for the configured model.
    pub fn endpoint(&self) -> String {
        self.endpoint_for(&self.model)
    }

    /// The endpoint URL of a request to `model` (Gemini's URL names the model; the
    /// other providers' do not).
    pub fn endpoint_for(&self, model: &str) -> String {
        if self.provider == ProviderKind::Gemini {
            return crate::provider::gemini::endpoint(&self.base_url, model);
        }
        format!(
            "{}{}",
            self.base_url.trim_end_matches('/'),
            self.provider.endpoint_path()
        )
    }

    /// Checks values a request would fail on anyway, so the caller hears it early.
    pub fn validate(&self) -> Result<()> {
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
                        crate::provider::truncate(&tool.name, 100)
                    )
                }));
            }
            if !seen.insert(tool.name.as_str()) {
                return Err(Error::config(format!(
                    "tools[{i}].name: duplicate tool {:?}",
                    tool.name
                )));
            }
            // Gemini's rule is narrower than the others': a function name starts with a
            // letter or '_' (it would answer 400 INVALID_ARGUMENT at the first request).
            if self.provider == ProviderKind::Gemini
                && !tool
                    .name
                    .starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            {
                return Err(Error::config(format!(
                    "tools[{i}].name: tool {:?}: Gemini accepts only names that start \
                     with a letter or '_'",
                    crate::provider::truncate(&tool.name, 100)
                )));
            }
        }
        for (name, server) in &self.mcp_servers {
            server.check(name)?;
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
        if let Value::Object(obj) = self.to_value() {
            crate::vocab::check(CONFIG, &obj, "")?;
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
        let root: Value = serde_json::from_str(json)
            .map_err(|e| Error::config(format!("config: not valid JSON: {e}")))?;
        let obj = root
            .as_object()
            .ok_or_else(|| Error::config("config: must be a JSON object"))?;
        crate::vocab::check(CONFIG, obj, "")?;
        let get = |k: &str| obj.get(k).filter(|v| !v.is_null());
        let string = |k: &str| get(k).and_then(Value::as_str).map(str::to_owned);
        let number = |k: &str| get(k).and_then(Value::as_u64);
        let provider = string("provider")
            .and_then(|p| ProviderKind::parse(&p))
            .unwrap_or(ProviderKind::OpenAi);
        let mut c = Config::new(provider, string("model").unwrap_or_default());
        if let Some(v) = string("base_url") {
            c.base_url = v;
        }
        if let Some(v) = string("api_key") {
            c.api_key = v;
        }
        c.system = string("system");
        c.max_tokens = number("max_tokens").map(saturate_u32);
        c.temperature = get("temperature").and_then(Value::as_f64);
        for item in get("tools").and_then(Value::as_array).into_iter().flatten() {
            let field = |k: &str| item.get(k).filter(|v| !v.is_null());
            c.tools.push(ToolSpec {
                name: field("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
                description: field("description")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
                parameters: field("parameters")
                    .cloned()
                    .unwrap_or_else(crate::request::empty_object_schema),
            });
        }
        if let Some(v) = number("max_steps") {
            c.max_steps = saturate_u32(v);
        }
        if let Some(v) = number("tool_concurrency") {
            c.tool_concurrency = saturate_usize(v);
        }
        if let Some(v) = number("tool_timeout_ms") {
            c.tool_timeout_ms = v;
        }
        if let Some(v) = number("queue_capacity") {
            c.queue_capacity = saturate_usize(v);
        }
        if let Some(v) = number("max_event_bytes") {
            c.max_event_bytes = saturate_usize(v);
        }
        if let Some(v) = number("max_message_bytes") {
            c.max_message_bytes = saturate_usize(v);
        }
        if let Some(v) = number("max_tool_output_bytes") {
            c.max_tool_output_bytes = saturate_usize(v);
        }
        if let Some(v) = number("max_input_bytes") {
            c.max_input_bytes = saturate_usize(v);
        }
        if let Some(v) = number("max_history_bytes") {
            c.max_history_bytes = saturate_usize(v);
        }
        if let Some(r) = get("retry").and_then(Value::as_object) {
            let n = |k: &str| r.get(k).and_then(Value::as_u64);
            if let Some(v) = n("max_retries") {
                c.retry.max_retries = saturate_u32(v);
            }
            if let Some(v) = n("initial_delay_ms") {
                c.retry.initial_delay_ms = v;
            }
            if let Some(v) = n("max_delay_ms") {
                c.retry.max_delay_ms = v;
            }
            if let Some(v) = n("max_elapsed_ms") {
                c.retry.max_elapsed_ms = v;
            }
            if let Some(v) = n("max_retry_after_ms") {
                c.retry.max_retry_after_ms = v;
            }
        }
        if let Some(t) = get("timeouts").and_then(Value::as_object) {
            let n = |k: &str| t.get(k).and_then(Value::as_u64);
            if let Some(v) = n("connect_ms") {
                c.timeouts.connect_ms = v;
            }
            if let Some(v) = n("idle_ms") {
                c.timeouts.idle_ms = v;
            }
            if let Some(v) = n("request_ms") {
                c.timeouts.request_ms = v;
            }
        }
        if let Some(v) = get("reasoning") {
            c.reasoning = Some(Reasoning::from_value(v, "reasoning")?);
        }
        if let Some(b) = get("prompt_caching").and_then(Value::as_bool) {
            c.prompt_caching = b;
        }
        if let Some(s) = string("compat") {
            c.compat = Compat::parse(&s).unwrap_or(Compat::Auto);
        }
        if let Some(b) = get("store").and_then(Value::as_bool) {
            c.store = b;
        }
        c.output_schema = get("output_schema").cloned();
        if let Some(v) = number("output_retries") {
            c.output_retries = saturate_u32(v);
        }
        if let Some(s) = string("output_mode") {
            c.output_mode = OutputMode::parse(&s).unwrap_or_default();
        }
        if let Some(k) = get("compaction").and_then(Value::as_object) {
            let field = |name: &str| k.get(name).filter(|v| !v.is_null());
            c.compaction = Some(CompactionConfig {
                threshold_tokens: field("threshold_tokens")
                    .and_then(Value::as_u64)
                    .unwrap_or_default(),
                keep_last: field("keep_last")
                    .and_then(Value::as_u64)
                    .map(saturate_usize)
                    .unwrap_or(DEFAULT_KEEP_LAST),
                model: field("model").and_then(Value::as_str).map(str::to_owned),
                prompt: field("prompt").and_then(Value::as_str).map(str::to_owned),
            });
        }
        if let Some(h) = get("headers").and_then(Value::as_object) {
            for (name, v) in h {
                c.headers
                    .insert(name.clone(), v.as_str().unwrap_or_default().to_owned());
            }
        }
        if let Some(m) = get("mcp_servers").and_then(Value::as_object) {
            for (name, v) in m {
                c.mcp_servers
                    .insert(name.clone(), mcp_server_from_value(name, v)?);
            }
        }
        c.validate()?;
        Ok(c)
    }

    /// The JSON form of this configuration, every key of [`CONFIG`] present (`null` where
    /// unset). The API key is replaced by `"[REDACTED]"` when one is set: this is for
    /// checking and showing a configuration, never for sending it anywhere.
    pub fn to_value(&self) -> Value {
        let opt = |v: Option<Value>| v.unwrap_or(Value::Null);
        let tools: Vec<Value> = self
            .tools
            .iter()
            .map(|t| {
                serde_json::json!({"name": t.name, "description": t.description,
                                   "parameters": t.parameters})
            })
            .collect();
        let compaction = self.compaction.as_ref().map(|k| {
            serde_json::json!({"threshold_tokens": k.threshold_tokens, "keep_last": k.keep_last,
                               "model": k.model, "prompt": k.prompt})
        });
        serde_json::json!({
            "provider": self.provider.as_str(),
            "model": self.model,
            "base_url": self.base_url,
            "api_key": if self.api_key.is_empty() { "" } else { "[REDACTED]" },
            "system": self.system,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "tools": tools,
            "max_steps": self.max_steps,
            "tool_concurrency": self.tool_concurrency,
            "tool_timeout_ms": self.tool_timeout_ms,
            "retry": {
                "max_retries": self.retry.max_retries,
                "initial_delay_ms": self.retry.initial_delay_ms,
                "max_delay_ms": self.retry.max_delay_ms,
                "max_elapsed_ms": self.retry.max_elapsed_ms,
                "max_retry_after_ms": self.retry.max_retry_after_ms,
            },
            "timeouts": {
                "connect_ms": self.timeouts.connect_ms,
                "idle_ms": self.timeouts.idle_ms,
                "request_ms": self.timeouts.request_ms,
            },
            "queue_capacity": self.queue_capacity,
            "headers": self.headers,
            "max_event_bytes": self.max_event_bytes,
            "max_message_bytes": self.max_message_bytes,
            "max_tool_output_bytes": self.max_tool_output_bytes,
            "max_input_bytes": self.max_input_bytes,
            "max_history_bytes": self.max_history_bytes,
            "reasoning": opt(self.reasoning.map(|r| r.to_value())),
            "prompt_caching": self.prompt_caching,
            "compaction": opt(compaction),
            "compat": self.compat.as_str(),
            "mcp_servers": self.mcp_servers.iter()
                .map(|(name, server)| (name.clone(), mcp_server_to_value(server)))
                .collect::<Map<String, Value>>(),
            "store": self.store,
            "output_schema": self.output_schema,
            "output_retries": self.output_retries,
            "output_mode": self.output_mode.as_str(),
        })
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
    Value::Object(o)
}

fn saturate_u32(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

fn saturate_usize(v: u64) -> usize {
    usize::try_from(v).unwrap_or(usize::MAX)
}

fn wrong_type(key: &str, want: &str) -> Error {
    Error::config(format!("{key}: must be {want}"))
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
        assert_eq!(c.provider, ProviderKind::Anthropic);
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
                        "timeout_ms":5,"tool_prefix":"d_","enabled_tools":["a"],"disabled_tools":["b"]}}}"#,
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
        );
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
        let c = Config::new(ProviderKind::OpenAi, "m").with_api_key("sk-secret-123456");
        assert!(!format!("{c:?}").contains("sk-secret-123456"));
    }

    #[test]
    fn openai_endpoint_keeps_the_version() {
        let c = Config::new(ProviderKind::OpenAi, "m").with_base_url("http://localhost:11434/v1/");
        assert_eq!(c.endpoint(), "http://localhost:11434/v1/chat/completions");
    }

    #[test]
    fn gemini_refuses_a_tool_name_that_does_not_start_with_a_letter_or_underscore() {
        let tool = |name: &str| ToolSpec {
            name: name.to_owned(),
            description: String::new(),
            parameters: serde_json::json!({"type": "object"}),
        };
        for (provider, name, ok) in [
            (ProviderKind::Gemini, "9lives", false),
            (ProviderKind::Gemini, "-x", false),
            (ProviderKind::Gemini, "_private", true),
            (ProviderKind::Gemini, "weather", true),
            (ProviderKind::OpenAi, "9lives", true),
        ] {
            let mut c = Config::new(provider, "m").with_api_key("k");
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
