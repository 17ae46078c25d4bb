//! Owns the configuration schema — one set of keys for every language (DESIGN.md,
//! "Configuration"): the Rust builder methods and the JSON form the C ABI, Go and
//! Python use. Unknown keys and wrong types are `config` errors naming the key.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::provider::{ProviderKind, ToolSpec};

/// Every top-level key of the JSON configuration.
pub const KEYS: [&str; 22] = [
    "provider",
    "model",
    "base_url",
    "api_key",
    "system",
    "max_tokens",
    "temperature",
    "tools",
    "max_steps",
    "tool_concurrency",
    "tool_timeout_ms",
    "retry",
    "timeouts",
    "queue_capacity",
    "headers",
    "max_event_bytes",
    "max_message_bytes",
    "max_tool_output_bytes",
    "reasoning",
    "prompt_caching",
    "compaction",
    "compat",
];

/// The largest `queue_capacity` accepted: the queue is allocated up front, so a larger
/// value would be a multi-gigabyte allocation rather than a setting.
pub const MAX_QUEUE_CAPACITY: usize = 65_536;

/// Custom headers that carry the provider credentials panto sets itself. Setting one in
/// `headers` while `api_key` is also set is a `config` error: two credentials, one of
/// them silently ignored, is never what was meant.
pub const AUTH_HEADERS: [&str; 2] = ["authorization", "x-api-key"];

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
}

impl Default for RetryConfig {
    fn default() -> Self {
        RetryConfig {
            max_retries: 2,
            initial_delay_ms: 500,
            max_delay_ms: 8000,
            max_elapsed_ms: 300_000,
        }
    }
}

/// How hard the model should think: `none` turns reasoning off where the provider
/// allows it; `low` / `medium` / `high` ask for more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effort {
    None,
    Low,
    Medium,
    High,
}

impl Effort {
    pub fn parse(s: &str) -> Option<Effort> {
        match s {
            "none" => Some(Effort::None),
            "low" => Some(Effort::Low),
            "medium" => Some(Effort::Medium),
            "high" => Some(Effort::High),
            _ => None,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Effort::None => "none",
            Effort::Low => "low",
            Effort::Medium => "medium",
            Effort::High => "high",
        }
    }
}

/// Reasoning control (`reasoning: {effort, budget_tokens?}`), per agent or per turn.
/// `budget_tokens` is the thinking budget where the provider takes one (Anthropic); by
/// default it follows the effort (see `provider::anthropic::thinking_budget`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reasoning {
    pub effort: Effort,
    pub budget_tokens: Option<u32>,
}

impl Reasoning {
    pub fn new(effort: Effort) -> Reasoning {
        Reasoning {
            effort,
            budget_tokens: None,
        }
    }

    /// Parses the JSON form; `path` names the key in errors (`reasoning`,
    /// `options.reasoning`).
    pub fn from_value(v: &Value, path: &str) -> Result<Reasoning> {
        let obj = v.as_object().ok_or_else(|| wrong_type(path, "an object"))?;
        check_keys(obj, &["effort", "budget_tokens"], &format!("{path}."))?;
        let effort = match obj.get("effort") {
            Some(Value::String(s)) => Effort::parse(s).ok_or_else(|| {
                Error::config(format!(
                    "{path}.effort: must be \"none\", \"low\", \"medium\" or \"high\" (got {s:?})"
                ))
            })?,
            None | Some(Value::Null) => Effort::Medium,
            Some(_) => return Err(wrong_type(&format!("{path}.effort"), "a string")),
        };
        let budget_tokens = opt_u64(obj, "budget_tokens", &format!("{path}.budget_tokens"))?
            .map(|v| {
                u32::try_from(v)
                    .map_err(|_| Error::config(format!("{path}.budget_tokens: too large")))
            })
            .transpose()?;
        Ok(Reasoning {
            effort,
            budget_tokens,
        })
    }
}

/// Automatic compaction (`compaction: {threshold_tokens, keep_last, model?, prompt?}`):
/// when the input tokens of the last request pass `threshold_tokens` (the history's
/// estimate when no request has reported any: a restored conversation, a server without
/// usage), the next request of a turn first summarizes the older history (see
/// `Agent::compact`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompactionConfig {
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

/// Which OpenAI-compatible server the agent talks to, for the request fields only some
/// servers know (reasoning switches, re-sent `reasoning_content`). `Auto` decides from
/// `base_url`: OpenAI's and Azure's hosts, `api.deepseek.com`, port 11434 (Ollama);
/// anything else is `Generic`. Ignored for Anthropic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compat {
    Auto,
    OpenAi,
    DeepSeek,
    Ollama,
    Vllm,
    Generic,
}

impl Compat {
    pub fn parse(s: &str) -> Option<Compat> {
        match s {
            "auto" => Some(Compat::Auto),
            "openai" => Some(Compat::OpenAi),
            "deepseek" => Some(Compat::DeepSeek),
            "ollama" => Some(Compat::Ollama),
            "vllm" => Some(Compat::Vllm),
            "generic" => Some(Compat::Generic),
            _ => None,
        }
    }

    /// `Auto` made concrete for `base_url`.
    pub fn resolve(self, base_url: &str) -> Compat {
        if self != Compat::Auto {
            return self;
        }
        if crate::provider::uses_max_completion_tokens(base_url) {
            return Compat::OpenAi;
        }
        let (host, port) = crate::provider::url_host(base_url);
        if host == "api.deepseek.com" {
            Compat::DeepSeek
        } else if port == Some("11434") {
            Compat::Ollama
        } else {
            Compat::Generic
        }
    }
}

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
    pub fn connect(&self) -> Duration {
        Duration::from_millis(self.connect_ms)
    }
    pub fn idle(&self) -> Duration {
        Duration::from_millis(self.idle_ms)
    }
    pub fn request(&self) -> Duration {
        Duration::from_millis(self.request_ms)
    }
}

/// The agent configuration. Build it with [`Config::new`] and the `with_*` methods, or
/// parse the JSON form with [`Config::from_json`].
#[derive(Clone, PartialEq)]
pub struct Config {
    pub provider: ProviderKind,
    pub model: String,
    /// As in the provider's official SDK: OpenAI's includes `/v1`, Anthropic's does not.
    pub base_url: String,
    pub api_key: String,
    pub system: Option<String>,
    pub max_tokens: Option<u32>,
    pub temperature: Option<f64>,
    /// Host tools: declared here, implemented by the caller (answered through
    /// `submit_tool_result`). Rust tools are added with `Agent::add_tool`.
    pub tools: Vec<ToolSpec>,
    pub max_steps: u32,
    pub tool_concurrency: usize,
    pub tool_timeout_ms: u64,
    pub retry: RetryConfig,
    pub timeouts: Timeouts,
    pub queue_capacity: usize,
    pub headers: BTreeMap<String, String>,
    /// Cap on one SSE event (default 16 MiB); larger is a `protocol` error.
    pub max_event_bytes: usize,
    /// Cap on one assistant message's text and tool arguments together (default 32 MiB);
    /// larger is a `protocol` error.
    pub max_message_bytes: usize,
    /// Cap on one tool result (default 100 KiB), for Rust and host tools alike: longer
    /// output is cut at this size and ends with a note saying so, which the model reads.
    pub max_tool_output_bytes: usize,
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
            .field("reasoning", &self.reasoning)
            .field("prompt_caching", &self.prompt_caching)
            .field("compaction", &self.compaction)
            .field("compat", &self.compat)
            .finish()
    }
}

/// Default of `max_message_bytes`.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 32 << 20;
/// Default of `max_tool_output_bytes`.
pub const DEFAULT_MAX_TOOL_OUTPUT_BYTES: usize = 100 << 10;

pub const DEFAULT_OPENAI_BASE_URL: &str = "https://api.openai.com/v1";
pub const DEFAULT_ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com";

impl ProviderKind {
    pub fn default_base_url(self) -> &'static str {
        match self {
            ProviderKind::OpenAi => DEFAULT_OPENAI_BASE_URL,
            ProviderKind::Anthropic => DEFAULT_ANTHROPIC_BASE_URL,
        }
    }
    pub fn api_key_env(self) -> &'static str {
        match self {
            ProviderKind::OpenAi => "OPENAI_API_KEY",
            ProviderKind::Anthropic => "ANTHROPIC_API_KEY",
        }
    }
    /// The endpoint path appended to `base_url`.
    pub fn endpoint_path(self) -> &'static str {
        match self {
            ProviderKind::OpenAi => "/chat/completions",
            ProviderKind::Anthropic => "/v1/messages",
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
            reasoning: None,
            prompt_caching: true,
            compaction: None,
            compat: Compat::Auto,
        }
    }

    pub fn with_base_url(mut self, url: impl Into<String>) -> Config {
        self.base_url = url.into();
        self
    }
    pub fn with_api_key(mut self, key: impl Into<String>) -> Config {
        self.api_key = key.into();
        self
    }
    pub fn with_system(mut self, system: impl Into<String>) -> Config {
        self.system = Some(system.into());
        self
    }
    pub fn with_max_tokens(mut self, n: u32) -> Config {
        self.max_tokens = Some(n);
        self
    }
    pub fn with_temperature(mut self, t: f64) -> Config {
        self.temperature = Some(t);
        self
    }
    /// Declares a host tool (answered through `submit_tool_result`).
    pub fn with_host_tool(mut self, spec: ToolSpec) -> Config {
        self.tools.push(spec);
        self
    }
    pub fn with_max_steps(mut self, n: u32) -> Config {
        self.max_steps = n;
        self
    }
    pub fn with_tool_concurrency(mut self, n: usize) -> Config {
        self.tool_concurrency = n;
        self
    }
    pub fn with_tool_timeout_ms(mut self, ms: u64) -> Config {
        self.tool_timeout_ms = ms;
        self
    }
    pub fn with_retry(mut self, retry: RetryConfig) -> Config {
        self.retry = retry;
        self
    }
    pub fn with_timeouts(mut self, t: Timeouts) -> Config {
        self.timeouts = t;
        self
    }
    pub fn with_queue_capacity(mut self, n: usize) -> Config {
        self.queue_capacity = n;
        self
    }
    pub fn with_max_tool_output_bytes(mut self, n: usize) -> Config {
        self.max_tool_output_bytes = n;
        self
    }
    pub fn with_max_message_bytes(mut self, n: usize) -> Config {
        self.max_message_bytes = n;
        self
    }
    pub fn with_reasoning(mut self, reasoning: Reasoning) -> Config {
        self.reasoning = Some(reasoning);
        self
    }
    pub fn with_prompt_caching(mut self, on: bool) -> Config {
        self.prompt_caching = on;
        self
    }
    pub fn with_compaction(mut self, compaction: CompactionConfig) -> Config {
        self.compaction = Some(compaction);
        self
    }
    pub fn with_compat(mut self, compat: Compat) -> Config {
        self.compat = compat;
        self
    }
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Config {
        self.headers.insert(name.into(), value.into());
        self
    }

    /// The full endpoint URL (`base_url` without trailing slash + the provider's path).
    pub fn endpoint(&self) -> String {
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
        if self.retry.max_retries > 100 {
            return Err(Error::config("retry.max_retries: at most 100"));
        }
        if self.max_steps == 0 {
            return Err(Error::config("max_steps: must be at least 1"));
        }
        if self.tool_concurrency == 0 {
            return Err(Error::config("tool_concurrency: must be at least 1"));
        }
        if self.queue_capacity == 0 {
            return Err(Error::config("queue_capacity: must be at least 1"));
        }
        if self.queue_capacity > MAX_QUEUE_CAPACITY {
            return Err(Error::config(format!(
                "queue_capacity: at most {MAX_QUEUE_CAPACITY} (got {})",
                self.queue_capacity
            )));
        }
        if self.max_message_bytes < 1024 {
            return Err(Error::config("max_message_bytes: must be at least 1024"));
        }
        if self.max_tool_output_bytes < 256 {
            return Err(Error::config("max_tool_output_bytes: must be at least 256"));
        }
        if self.max_event_bytes < 1024 {
            return Err(Error::config("max_event_bytes: must be at least 1024"));
        }
        let t = &self.timeouts;
        for (key, v) in [
            ("timeouts.connect_ms", t.connect_ms),
            ("timeouts.idle_ms", t.idle_ms),
            ("timeouts.request_ms", t.request_ms),
            ("tool_timeout_ms", self.tool_timeout_ms),
        ] {
            if v == 0 {
                return Err(Error::config(format!("{key}: must be at least 1")));
            }
        }
        if let Some(c) = &self.compaction {
            if c.threshold_tokens == 0 {
                return Err(Error::config(
                    "compaction.threshold_tokens: must be at least 1",
                ));
            }
            if c.keep_last == 0 {
                return Err(Error::config("compaction.keep_last: must be at least 1"));
            }
        }
        let mut seen = std::collections::HashSet::new();
        for (i, tool) in self.tools.iter().enumerate() {
            if tool.name.is_empty() {
                return Err(Error::config(format!("tools[{i}].name: required")));
            }
            if !seen.insert(tool.name.as_str()) {
                return Err(Error::config(format!(
                    "tools[{i}].name: duplicate tool {:?}",
                    tool.name
                )));
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
    /// the provider's environment variable.
    pub fn from_json(json: &str) -> Result<Config> {
        let root: Value = serde_json::from_str(json)
            .map_err(|e| Error::config(format!("config: not valid JSON: {e}")))?;
        let obj = root
            .as_object()
            .ok_or_else(|| Error::config("config: must be a JSON object"))?;
        check_keys(obj, &KEYS, "")?;
        let provider = match obj.get("provider") {
            None | Some(Value::Null) => ProviderKind::OpenAi,
            Some(v) => {
                let s = v
                    .as_str()
                    .ok_or_else(|| wrong_type("provider", "a string"))?;
                ProviderKind::parse(s).ok_or_else(|| {
                    Error::config(format!(
                        "provider: must be \"openai\" or \"anthropic\" (got {s:?})"
                    ))
                })?
            }
        };
        let model = opt_str(obj, "model")?.unwrap_or_default();
        let mut c = Config::new(provider, model);
        if let Some(v) = opt_str(obj, "base_url")? {
            c.base_url = v;
        }
        if let Some(v) = opt_str(obj, "api_key")? {
            c.api_key = v;
        }
        c.system = opt_str(obj, "system")?;
        c.max_tokens = opt_u64(obj, "max_tokens", "max_tokens")?
            .map(|v| u32::try_from(v).map_err(|_| Error::config("max_tokens: too large")))
            .transpose()?;
        c.temperature = match obj.get("temperature") {
            None | Some(Value::Null) => None,
            Some(v) => Some(
                v.as_f64()
                    .ok_or_else(|| wrong_type("temperature", "a number"))?,
            ),
        };
        if let Some(v) = obj.get("tools").filter(|v| !v.is_null()) {
            let items = v
                .as_array()
                .ok_or_else(|| wrong_type("tools", "an array"))?;
            for (i, item) in items.iter().enumerate() {
                c.tools.push(parse_tool(item, i)?);
            }
        }
        if let Some(v) = opt_u64(obj, "max_steps", "max_steps")? {
            c.max_steps = u32::try_from(v).map_err(|_| Error::config("max_steps: too large"))?;
        }
        if let Some(v) = opt_u64(obj, "tool_concurrency", "tool_concurrency")? {
            c.tool_concurrency = usize::try_from(v).unwrap_or(usize::MAX);
        }
        if let Some(v) = opt_u64(obj, "tool_timeout_ms", "tool_timeout_ms")? {
            c.tool_timeout_ms = v;
        }
        if let Some(v) = opt_u64(obj, "queue_capacity", "queue_capacity")? {
            c.queue_capacity = usize::try_from(v).unwrap_or(usize::MAX);
        }
        if let Some(v) = opt_u64(obj, "max_event_bytes", "max_event_bytes")? {
            c.max_event_bytes = usize::try_from(v).unwrap_or(usize::MAX);
        }
        if let Some(v) = opt_u64(obj, "max_message_bytes", "max_message_bytes")? {
            c.max_message_bytes = usize::try_from(v).unwrap_or(usize::MAX);
        }
        if let Some(v) = opt_u64(obj, "max_tool_output_bytes", "max_tool_output_bytes")? {
            c.max_tool_output_bytes = usize::try_from(v).unwrap_or(usize::MAX);
        }
        if let Some(r) = opt_object(obj, "retry")? {
            check_keys(
                r,
                &[
                    "max_retries",
                    "initial_delay_ms",
                    "max_delay_ms",
                    "max_elapsed_ms",
                ],
                "retry.",
            )?;
            if let Some(v) = opt_u64(r, "max_elapsed_ms", "retry.max_elapsed_ms")? {
                c.retry.max_elapsed_ms = v;
            }
            if let Some(v) = opt_u64(r, "max_retries", "retry.max_retries")? {
                c.retry.max_retries = u32::try_from(v).unwrap_or(u32::MAX);
            }
            if let Some(v) = opt_u64(r, "initial_delay_ms", "retry.initial_delay_ms")? {
                c.retry.initial_delay_ms = v;
            }
            if let Some(v) = opt_u64(r, "max_delay_ms", "retry.max_delay_ms")? {
                c.retry.max_delay_ms = v;
            }
        }
        if let Some(t) = opt_object(obj, "timeouts")? {
            check_keys(t, &["connect_ms", "idle_ms", "request_ms"], "timeouts.")?;
            if let Some(v) = opt_u64(t, "connect_ms", "timeouts.connect_ms")? {
                c.timeouts.connect_ms = v;
            }
            if let Some(v) = opt_u64(t, "idle_ms", "timeouts.idle_ms")? {
                c.timeouts.idle_ms = v;
            }
            if let Some(v) = opt_u64(t, "request_ms", "timeouts.request_ms")? {
                c.timeouts.request_ms = v;
            }
        }
        if let Some(v) = obj.get("reasoning").filter(|v| !v.is_null()) {
            c.reasoning = Some(Reasoning::from_value(v, "reasoning")?);
        }
        match obj.get("prompt_caching") {
            None | Some(Value::Null) => {}
            Some(Value::Bool(b)) => c.prompt_caching = *b,
            Some(_) => return Err(wrong_type("prompt_caching", "a boolean")),
        }
        if let Some(s) = opt_str(obj, "compat")? {
            c.compat = Compat::parse(&s).ok_or_else(|| {
                Error::config(format!(
                    "compat: must be \"auto\", \"openai\", \"deepseek\", \"ollama\", \"vllm\" \
                     or \"generic\" (got {s:?})"
                ))
            })?;
        }
        if let Some(k) = opt_object(obj, "compaction")? {
            check_keys(
                k,
                &["threshold_tokens", "keep_last", "model", "prompt"],
                "compaction.",
            )?;
            let threshold_tokens =
                opt_u64(k, "threshold_tokens", "compaction.threshold_tokens")?
                    .ok_or_else(|| Error::config("compaction.threshold_tokens: required"))?;
            let keep_last = opt_u64(k, "keep_last", "compaction.keep_last")?
                .map(|v| usize::try_from(v).unwrap_or(usize::MAX))
                .unwrap_or(DEFAULT_KEEP_LAST);
            let model = match k.get("model") {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) => Some(s.clone()),
                Some(_) => return Err(wrong_type("compaction.model", "a string")),
            };
            let prompt = match k.get("prompt") {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) => Some(s.clone()),
                Some(_) => return Err(wrong_type("compaction.prompt", "a string")),
            };
            c.compaction = Some(CompactionConfig {
                threshold_tokens,
                keep_last,
                model,
                prompt,
            });
        }
        if let Some(h) = opt_object(obj, "headers")? {
            for (name, v) in h {
                let v = v
                    .as_str()
                    .ok_or_else(|| wrong_type(&format!("headers.{name}"), "a string"))?;
                c.headers.insert(name.clone(), v.to_owned());
            }
        }
        c.validate()?;
        Ok(c)
    }
}

fn wrong_type(key: &str, want: &str) -> Error {
    Error::config(format!("{key}: must be {want}"))
}

fn check_keys(obj: &Map<String, Value>, known: &[&str], prefix: &str) -> Result<()> {
    for k in obj.keys() {
        if !known.contains(&k.as_str()) {
            return Err(Error::config(format!(
                "{prefix}{k}: unknown key (known: {})",
                known.join(", ")
            )));
        }
    }
    Ok(())
}

fn opt_str(obj: &Map<String, Value>, key: &str) -> Result<Option<String>> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(wrong_type(key, "a string")),
    }
}

fn opt_u64(obj: &Map<String, Value>, key: &str, path: &str) -> Result<Option<u64>> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| wrong_type(path, "a non-negative integer")),
    }
}

fn opt_object<'a>(
    obj: &'a Map<String, Value>,
    key: &str,
) -> Result<Option<&'a Map<String, Value>>> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(o)) => Ok(Some(o)),
        Some(_) => Err(wrong_type(key, "an object")),
    }
}

fn parse_tool(item: &Value, i: usize) -> Result<ToolSpec> {
    let obj = item
        .as_object()
        .ok_or_else(|| wrong_type(&format!("tools[{i}]"), "an object"))?;
    check_keys(
        obj,
        &["name", "description", "parameters"],
        &format!("tools[{i}]."),
    )?;
    let name = match obj.get("name") {
        Some(Value::String(s)) => s.clone(),
        _ => return Err(wrong_type(&format!("tools[{i}].name"), "a string")),
    };
    let description = match obj.get("description") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err(wrong_type(&format!("tools[{i}].description"), "a string")),
    };
    let parameters = match obj.get("parameters") {
        None | Some(Value::Null) => crate::provider::empty_object_schema(),
        Some(v @ Value::Object(_)) => v.clone(),
        Some(_) => {
            return Err(wrong_type(
                &format!("tools[{i}].parameters"),
                "a JSON Schema object",
            ))
        }
    };
    Ok(ToolSpec {
        name,
        description,
        parameters,
    })
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
            (r#"{"model":"m","provider":"gemini"}"#, "provider"),
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
}
