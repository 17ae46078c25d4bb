//! Owns the agent: its configuration, its tools, its conversation, and the turn loop
//! (stream a message → dispatch its complete tool calls → append results → repeat).
//! Events go to a push [`Receiver`]; the pull adapter (`panto-pull`) runs this same loop
//! on its own worker threads. The core owns no runtime and no thread: a turn runs on
//! whatever tokio runtime polls it, and its tool tasks are spawned there.
//!
//! The conversation only ever holds complete steps. A step (an assistant message and
//! the results of its tool calls) enters the history whole, under one lock, even when
//! the turn's future is dropped half-way through its tools: unfinished calls then get a
//! cancelled result. Another thread reading the history mid-turn sees the last valid
//! state, and a dropped turn leaves a history the provider accepts.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::Duration;

use bytes::Bytes;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info_span, Instrument};

use crate::compaction::{self, CompactOptions, Compaction};
use crate::config::Config;
use crate::error::{Error, ErrorKind, Result};
use crate::event::{Event, Flow, Receiver};
use crate::http::{Transport, TurnSink};
use crate::mcp::McpServers;
use crate::media::Input;
use crate::message::{self, Block, Message, Role, StopReason, Usage};
use crate::output::{self, OutputSpec, Rejection, WireMode};
use crate::provider::{self, RequestOptions, RequestParams};
use crate::request::{Dialect, ProviderKind, Reasoning, ToolSpec};
use crate::tool::{
    self, CallRequest, Dispatch, HostToolResults, Outputs, Runner, Tool, ToolOutput,
};
use crate::transcript::{self, TranscriptEntry};

/// Which output schema a turn uses (`TurnOptions::output_schema`; in JSON: absent or
/// `null`, a schema object, or `false`).
#[derive(Debug, Clone, Default, PartialEq)]
pub enum TurnSchema {
    /// The agent's `output_schema`, if it has one.
    #[default]
    Agent,
    /// This JSON Schema for this turn only.
    Schema(serde_json::Value),
    /// No schema for this turn: a plain text answer.
    Off,
}

/// Options for one turn.
#[derive(Debug, Clone, Default)]
pub struct TurnOptions {
    /// Use this model for this turn only.
    pub model: Option<String>,
    /// Reasoning control for this turn only (replaces the configuration's).
    pub reasoning: Option<Reasoning>,
    /// The output schema of this turn (default: the agent's).
    pub output_schema: TurnSchema,
}

impl TurnOptions {
    /// Parses the JSON form the C ABI takes: `{"model"?: string, "reasoning"?:
    /// {effort, budget_tokens?}, "output_schema"?: object | false}`; unknown keys are
    /// `config` errors.
    pub fn from_json(json: &str) -> Result<TurnOptions> {
        let v: serde_json::Value = serde_json::from_str(json)
            .map_err(|e| Error::config(format!("options: not valid JSON: {e}")))?;
        let obj = v
            .as_object()
            .ok_or_else(|| Error::config("options: must be a JSON object"))?;
        let mut options = TurnOptions::default();
        for (key, value) in obj {
            match (key.as_str(), value) {
                (_, serde_json::Value::Null) => {}
                ("model", serde_json::Value::String(m)) => options.model = Some(m.clone()),
                ("model", _) => return Err(Error::config("options.model: must be a string")),
                ("reasoning", r) => {
                    options.reasoning = Some(Reasoning::from_value(r, "options.reasoning")?)
                }
                ("output_schema", serde_json::Value::Bool(false)) => {
                    options.output_schema = TurnSchema::Off
                }
                ("output_schema", schema @ serde_json::Value::Object(_)) => {
                    options.output_schema = TurnSchema::Schema(schema.clone())
                }
                ("output_schema", _) => {
                    return Err(Error::config(
                        "options.output_schema: must be a JSON Schema object, null (the \
                         agent's) or false (none)",
                    ))
                }
                (other, _) => {
                    return Err(Error::config(format!(
                        "options.{other}: unknown key (known: model, reasoning, output_schema)"
                    )))
                }
            }
        }
        Ok(options)
    }
}

impl CompactOptions {
    /// Parses the JSON form the C ABI takes: `{"keep_last"?, "model"?, "prompt"?}`.
    pub fn from_json(json: &str) -> Result<CompactOptions> {
        let v: serde_json::Value = serde_json::from_str(json)
            .map_err(|e| Error::config(format!("compact options: not valid JSON: {e}")))?;
        let obj = v
            .as_object()
            .ok_or_else(|| Error::config("compact options: must be a JSON object"))?;
        let mut options = CompactOptions::default();
        for (key, value) in obj {
            match (key.as_str(), value) {
                (_, serde_json::Value::Null) => {}
                ("keep_last", v) => {
                    options.keep_last = v
                        .as_u64()
                        .filter(|n| *n >= 1)
                        .and_then(|n| usize::try_from(n).ok())
                        .ok_or_else(|| {
                            Error::config("keep_last: must be an integer of at least 1")
                        })?
                }
                ("model", serde_json::Value::String(m)) => options.model = Some(m.clone()),
                ("prompt", serde_json::Value::String(p)) => options.prompt = Some(p.clone()),
                ("model" | "prompt", _) => {
                    return Err(Error::config(format!("{key}: must be a string")))
                }
                (other, _) => {
                    return Err(Error::config(format!(
                        "{other}: unknown key (known: keep_last, model, prompt)"
                    )))
                }
            }
        }
        Ok(options)
    }
}

/// The provider's count for the history after the last response: the size of the
/// request's input (cached parts included) and of the reply, and how long the history
/// was right after that reply entered it (so a changed history is noticed).
#[derive(Debug, Clone, Copy)]
struct LastUsage {
    history_len: usize,
    input_tokens: u64,
    output_tokens: u64,
}

/// A receiver that drops everything: the compaction request's events are not part of
/// the turn (only `history_compacted` is).
struct Discard;

impl Receiver for Discard {
    fn on_event(&mut self, _: Event) -> Flow {
        Flow::Continue
    }
}

impl TurnSummary {
    /// The turn's structured output as a `T`. An `output_invalid` error when the turn had
    /// no output schema, or when the validated output does not fit `T` (a schema and a
    /// type that disagree), with the output's JSON as the error's raw text.
    pub fn output_as<T: serde::de::DeserializeOwned>(&self) -> Result<T> {
        let Some(value) = &self.output else {
            return Err(Error::new(
                ErrorKind::OutputInvalid,
                "the turn had no output schema, so it has no structured output",
            )
            .with_output(Some(self.text.clone())));
        };
        serde_json::from_value(value.clone()).map_err(|e| {
            Error::new(
                ErrorKind::OutputInvalid,
                format!(
                    "the output matched the schema but not the Rust type: {}",
                    output::one_line(&e.to_string(), output::MAX_ERROR_BYTES)
                ),
            )
            .with_output(Some(value.to_string()))
        })
    }
}

/// How a turn ended, when it ended well (the same data as `message_complete`).
#[derive(Debug, Clone, PartialEq)]
pub struct TurnSummary {
    /// Why the turn ended (`end_turn`, `max_tokens`, `max_steps`, …).
    pub stop_reason: StopReason,
    /// The turn's token usage: the sum over its responses.
    pub usage: Usage,
    /// The number of assistant messages of the turn.
    pub messages: u32,
    /// The final assistant message's text.
    pub text: String,
    /// The validated structured output, when an output schema applied to the turn.
    pub output: Option<serde_json::Value>,
}

/// The outside handles of one turn: its cancellation token and where host-tool results
/// are submitted. Create one per turn and keep a clone to cancel or answer from anywhere.
#[derive(Debug, Clone, Default)]
pub struct TurnControl {
    /// Cancels the turn (and its tools) when cancelled.
    pub cancel: CancellationToken,
    /// Where host-tool results are submitted.
    pub host: HostToolResults,
}

static NEXT_AGENT_ID: AtomicU64 = AtomicU64::new(1);

struct Inner {
    config: Config,
    /// The server's request fields, decided once from `config`.
    dialect: Dialect,
    transport: Transport,
    tools: RwLock<HashMap<String, Arc<dyn Tool>>>,
    history: Mutex<Vec<Message>>,
    last_usage: Mutex<Option<LastUsage>>,
    /// OpenAI Responses with `store`: the last response the server kept, and how many
    /// messages of the history it covers (see `provider::PreviousResponse`). Forgotten
    /// whenever the history is replaced or compacted, so the next request sends it whole.
    stored: Mutex<Option<(String, usize)>>,
    /// After an automatic compaction that could not bring the history under the
    /// threshold (the kept messages alone pass it), the size it must grow past before
    /// the next one: otherwise every step of a tool loop would summarize again. 0: none.
    compaction_floor: AtomicU64,
    busy: AtomicBool,
    id: u64,
    /// The agent's MCP servers (its own, or a set shared with other agents).
    mcp: Option<McpServers>,
    /// The configuration's `output_schema`, checked and compiled once.
    output: Option<OutputSpec>,
}

/// An agent: one conversation with one provider configuration. Cheap to clone (clones
/// share the conversation, the tools and the HTTP connection pool).
#[derive(Clone)]
pub struct Agent {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

/// The right to run one turn on an agent, taken synchronously with [`Agent::reserve`]
/// (so `busy` is known at once) and used later, possibly on another thread, with
/// [`TurnSlot::run`]. At most one exists per agent; dropping it, or the future of its
/// `run`, frees the agent.
#[derive(Debug)]
pub struct TurnSlot {
    agent: Agent,
}

impl Drop for TurnSlot {
    fn drop(&mut self) {
        self.agent.inner.busy.store(false, Ordering::Release);
    }
}

impl Agent {
    /// An agent with this configuration, validated first (a `config` error names the key).
    /// Nothing is sent, and no MCP server starts, before the first turn.
    pub fn new(config: Config) -> Result<Agent> {
        config.validate()?;
        let mcp = if config.mcp_servers.is_empty() {
            None
        } else {
            Some(McpServers::with_limits(
                config.mcp_servers.clone(),
                crate::mcp::Limits {
                    max_message_bytes: config.max_event_bytes,
                },
            )?)
        };
        Agent::build(config, mcp)
    }

    /// An agent that uses `servers`, a set of MCP servers it shares with other agents:
    /// they start at the first turn of any of them and stop when the last one (and
    /// `servers`) is dropped. `config.mcp_servers` must be empty (a `config` error
    /// otherwise); it then shows the set's servers.
    pub fn with_mcp_servers(mut config: Config, servers: McpServers) -> Result<Agent> {
        if !config.mcp_servers.is_empty() {
            return Err(Error::config(
                "mcp_servers: given in the configuration and as a shared set; give one",
            ));
        }
        config.mcp_servers = servers.configs().clone();
        config.validate()?;
        Agent::build(config, Some(servers))
    }

    fn build(config: Config, mcp: Option<McpServers>) -> Result<Agent> {
        let transport = Transport::new(&config)?;
        let output = config
            .output_schema
            .as_ref()
            .map(|s| OutputSpec::new(s, config.provider, config.output_mode, "output_schema"))
            .transpose()?;
        Ok(Agent {
            inner: Arc::new(Inner {
                dialect: Dialect::resolve(config.compat, &config.base_url),
                config,
                transport,
                tools: RwLock::new(HashMap::new()),
                history: Mutex::new(Vec::new()),
                last_usage: Mutex::new(None),
                stored: Mutex::new(None),
                compaction_floor: AtomicU64::new(0),
                busy: AtomicBool::new(false),
                id: NEXT_AGENT_ID.fetch_add(1, Ordering::SeqCst),
                mcp,
                output,
            }),
        })
    }

    /// An agent from the JSON configuration (see [`Config::from_json`]).
    pub fn from_json(json: &str) -> Result<Agent> {
        Agent::new(Config::from_json(json)?)
    }

    /// The agent's configuration.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// A number that identifies this agent (and its clones) within the process. The
    /// pull adapter uses it to keep all of an agent's turns on one worker thread, where
    /// its pooled connections live.
    pub fn id(&self) -> u64 {
        self.inner.id
    }

    /// The id the next agent will get: every agent made so far in this process (or in
    /// the process it was forked from) has a smaller one. The pull adapter notes it at
    /// `fork()` to tell the agents a child inherited from the ones it makes itself.
    pub fn next_id() -> u64 {
        NEXT_AGENT_ID.load(Ordering::SeqCst)
    }

    /// Adds a Rust tool. Its name must not clash with another tool or a host tool, and
    /// its declaration must be one the providers accept ([`ToolSpec::check`]): a
    /// `config` error naming the tool otherwise.
    pub fn add_tool(&self, tool: impl Tool) -> Result<()> {
        let spec = tool.spec();
        if spec.name.is_empty() {
            return Err(Error::config("tool name: required"));
        }
        if let Err((field, problem)) = spec.check() {
            return Err(Error::config(format!(
                "tool {:?}: {field}: {problem}",
                crate::provider::truncate(&spec.name, 100)
            )));
        }
        if self.inner.config.tools.iter().any(|t| t.name == spec.name) {
            return Err(Error::config(format!(
                "tool {:?}: already declared as a host tool",
                spec.name
            )));
        }
        let mut tools = self
            .inner
            .tools
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        if tools.contains_key(&spec.name) {
            return Err(Error::config(format!(
                "tool {:?}: already added",
                spec.name
            )));
        }
        tools.insert(spec.name, Arc::new(tool));
        Ok(())
    }

    /// Every tool the model is offered: host tools first, then Rust tools by name.
    pub fn tool_specs(&self) -> Vec<ToolSpec> {
        let tools = self
            .inner
            .tools
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        let mut rust: Vec<ToolSpec> = tools.values().map(|t| t.spec()).collect();
        rust.sort_by(|a, b| a.name.cmp(&b.name));
        let mut all = self.inner.config.tools.clone();
        all.extend(rust);
        all
    }

    fn history_lock(&self) -> MutexGuard<'_, Vec<Message>> {
        self.inner
            .history
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// A copy of the conversation (complete messages only).
    pub fn history(&self) -> Vec<Message> {
        self.history_lock().clone()
    }

    /// The conversation as versioned JSON.
    pub fn history_json(&self) -> String {
        message::history_to_json(&self.history_lock())
    }

    /// Replaces the conversation (validated). Not allowed during a turn (`busy`).
    pub fn set_history(&self, messages: Vec<Message>) -> Result<()> {
        message::validate_history(&messages)?;
        let max = self.inner.config.max_history_bytes;
        let bytes = message::history_json_len(&messages);
        if bytes > max {
            return Err(Error::config(format!(
                "history: {bytes} bytes of saved JSON, more than max_history_bytes ({max})"
            )));
        }
        let _slot = self.reserve()?;
        *self.history_lock() = messages;
        // What the provider counted was another history.
        *self
            .inner
            .last_usage
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = None;
        self.inner.compaction_floor.store(0, Ordering::SeqCst);
        self.set_stored(None);
        Ok(())
    }

    /// Records (or forgets) the last response the server kept (`store`).
    fn set_stored(&self, stored: Option<(String, usize)>) {
        *self
            .inner
            .stored
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = stored;
    }

    /// Restores a conversation saved with [`Agent::history_json`].
    pub fn load_history_json(&self, json: &str) -> Result<()> {
        // Before parsing: a document past the cap is not read into memory at all.
        let max = self.inner.config.max_history_bytes;
        if json.len() > max {
            return Err(Error::config(format!(
                "history: {} bytes, more than max_history_bytes ({max})",
                json.len()
            )));
        }
        self.set_history(message::history_from_json(json)?)
    }

    /// Checks a turn's input against the limits of the configuration before anything is
    /// sent or kept: text past `max_input_bytes`, an attachment past `max_message_bytes`
    /// or of a type panto does not send, an attachment the provider cannot take (a PDF by
    /// URL for OpenAI chat), or a conversation that would pass `max_history_bytes` with
    /// it, is a `config` error, and the history is unchanged. Every turn checks it first;
    /// the pull adapter also calls it before it starts one, so the error comes from the
    /// call that would have started it.
    pub fn check_input(&self, input: &Input) -> Result<()> {
        let config = &self.inner.config;
        let text = input.text_len();
        if text > config.max_input_bytes {
            return Err(Error::config(format!(
                "input: {text} bytes, more than max_input_bytes ({})",
                config.max_input_bytes
            )));
        }
        input.check(config.max_message_bytes)?;
        provider::check_input(config.provider, input)?;
        // The input as the history will hold it (attachments base64-encoded).
        let size = if input.has_attachments() {
            message::history_json_len(&[Message {
                role: Role::User,
                content: input.parts().to_vec(),
            }])
        } else {
            text
        };
        let history = message::history_json_len(&self.history_lock());
        if history.saturating_add(size) > config.max_history_bytes {
            return Err(Error::config(format!(
                "input: the conversation ({history} bytes of saved JSON) with this input ({size} \
                 bytes) would pass max_history_bytes ({}); compact or clear it first",
                config.max_history_bytes
            )));
        }
        Ok(())
    }

    /// The output schema a turn with `options` uses, checked (a `config` error naming
    /// `options.output_schema` otherwise). The pull adapter calls it before it starts a
    /// turn, so a bad schema fails the call that would have started it.
    pub fn turn_output(&self, options: &TurnOptions) -> Result<Option<OutputSpec>> {
        let config = &self.inner.config;
        Ok(match &options.output_schema {
            TurnSchema::Agent => self.inner.output.clone(),
            TurnSchema::Schema(s) => Some(OutputSpec::new(
                s,
                config.provider,
                config.output_mode,
                "options.output_schema",
            )?),
            TurnSchema::Off => None,
        })
    }

    /// Empties the conversation; `busy` during a turn.
    pub fn clear_history(&self) -> Result<()> {
        self.set_history(Vec::new())
    }

    /// The flat, user-visible projection of the conversation (see [`transcript`]).
    pub fn transcript(&self) -> Vec<TranscriptEntry> {
        transcript::transcript(&self.history_lock())
    }

    /// [`Agent::transcript`] as a JSON array.
    pub fn transcript_json(&self) -> String {
        transcript::transcript_json(&self.history_lock())
    }

    /// Summarizes the older part of the conversation into one synthetic exchange, with
    /// the agent's provider (and its model, or `options.model`), keeping the last
    /// `options.keep_last` messages verbatim (see [`compaction`]). Not allowed during a
    /// turn (`busy`). On failure — including `cancel` — the history is untouched and the
    /// typed error is returned.
    pub async fn compact(
        &self,
        options: &CompactOptions,
        cancel: &CancellationToken,
    ) -> Result<Compaction> {
        let _slot = self.reserve()?;
        let secrets = self.inner.transport.secrets();
        let mut discard = Discard;
        let mut sink = TurnSink::new(&mut discard, cancel.clone(), secrets);
        let model = options
            .model
            .clone()
            .unwrap_or_else(|| self.inner.config.model.clone());
        let span = info_span!("compact", provider = self.inner.config.provider.as_str());
        let result = self
            .compact_now(options, &model, cancel, &mut sink)
            .instrument(span)
            .await;
        match result {
            Err(e) if cancel.is_cancelled() && e.kind != ErrorKind::Cancelled => {
                Err(Error::cancelled())
            }
            Err(e) => Err(e.redact(secrets)),
            ok => ok,
        }
    }

    /// Tokens of the history as the provider last counted them, if it has not changed
    /// since; else estimated.
    fn history_tokens(&self, history: &[Message]) -> u64 {
        let last = *self
            .inner
            .last_usage
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match last {
            // Counted by the provider, plus an estimate for what was added since (the
            // user message of a turn that is about to compact).
            Some(u) if u.history_len <= history.len() => {
                let added = &history[u.history_len..];
                let estimate = if added.is_empty() {
                    0
                } else {
                    compaction::estimate_tokens(added)
                };
                u.input_tokens
                    .saturating_add(u.output_tokens)
                    .saturating_add(estimate)
            }
            _ => compaction::estimate_tokens(history),
        }
    }

    /// The compaction itself, for a caller that holds the turn slot. The summary
    /// request's events go to `sink` (a discarding one).
    async fn compact_now(
        &self,
        options: &CompactOptions,
        model: &str,
        cancel: &CancellationToken,
        sink: &mut TurnSink<'_>,
    ) -> Result<Compaction> {
        let config = &self.inner.config;
        let before = self.history();
        let tokens_before = self.history_tokens(&before);
        let at = compaction::split_point(&before, options.keep_last);
        let unchanged = Compaction {
            changed: false,
            messages_before: before.len() as u64,
            messages_after: before.len() as u64,
            tokens_before,
            tokens_after: tokens_before,
        };
        if at == 0 {
            return Ok(unchanged);
        }
        let conversation = [Message::user(compaction::render(&before[..at]))];
        let prompt = options
            .prompt
            .as_deref()
            .unwrap_or(compaction::DEFAULT_PROMPT);
        let params = RequestParams {
            model,
            system: Some(prompt),
            max_tokens: config.max_tokens,
            temperature: None,
            tools: &[],
            messages: &conversation,
        };
        let request_options = RequestOptions {
            dialect: self.inner.dialect,
            ..RequestOptions::default()
        };
        let value = provider::request_body_with(config.provider, &params, &request_options);
        let body = Bytes::from(
            serde_json::to_vec(&value)
                .map_err(|e| Error::internal(format!("cannot serialize the request: {e}")))?,
        );
        let decoded = self
            .inner
            .transport
            .stream_message(config, model, body, 0, cancel, sink)
            .await
            .map_err(|mut e| {
                e.message = format!("compacting the history: {}", e.message);
                e
            })?;
        if cancel.is_cancelled() {
            return Err(Error::cancelled());
        }
        let summary = decoded.message.text();
        if summary.trim().is_empty() {
            return Err(Error::new(
                ErrorKind::Provider,
                format!(
                    "compacting the history: the model wrote no summary (stop reason {})",
                    decoded.stop_reason.as_string()
                ),
            ));
        }
        let after = compaction::rebuild(summary.trim(), &before[at..]);
        message::validate_history(&after)?;
        let result = Compaction {
            changed: true,
            messages_before: before.len() as u64,
            messages_after: after.len() as u64,
            tokens_before,
            tokens_after: compaction::scaled_estimate(&before, tokens_before, &after),
        };
        *self.history_lock() = after;
        self.set_stored(None);
        *self
            .inner
            .last_usage
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = None;
        Ok(result)
    }

    /// Whether the last request's input passed the automatic-compaction threshold. With
    /// no request since the history was set (a restored conversation, or one just
    /// compacted) or from a server that did not report usage, the estimate of the
    /// history's tokens stands in for it: a conversation saved past the threshold
    /// compacts before its first request, not after a request its context window may
    /// refuse; one with a server that never counts still compacts.
    fn wants_compaction(&self) -> bool {
        let Some(c) = &self.inner.config.compaction else {
            return false;
        };
        let last = self
            .inner
            .last_usage
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map(|u| u.input_tokens);
        let tokens = match last {
            // A reported count of 0 input tokens for a request that had a history is no
            // count either (a server that fills the fields without counting).
            Some(input_tokens) if input_tokens > 0 => input_tokens,
            _ => compaction::estimate_tokens(&self.history_lock()),
        };
        tokens > c.threshold_tokens && tokens > self.inner.compaction_floor.load(Ordering::SeqCst)
    }

    /// Keeps the provider's count of the request just answered, for compaction; a
    /// response without usage forgets the last count (it was of another history), so the
    /// estimate takes over.
    fn record_usage(&self, usage: &Usage) {
        if !usage.reported {
            *self
                .inner
                .last_usage
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = None;
            return;
        }
        let input = match self.inner.config.provider {
            // Anthropic counts cached input apart from `input_tokens`.
            ProviderKind::Anthropic => usage
                .input_tokens
                .saturating_add(usage.cache_read_tokens)
                .saturating_add(usage.cache_write_tokens),
            // Gemini's promptTokenCount includes its cached part, as OpenAI's (both APIs)
            // input_tokens do.
            ProviderKind::OpenAi | ProviderKind::Gemini | ProviderKind::OpenAiResponses => {
                usage.input_tokens
            }
        };
        let history_len = self.history_lock().len();
        *self
            .inner
            .last_usage
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(LastUsage {
            history_len,
            input_tokens: input,
            output_tokens: usage.output_tokens,
        });
    }

    /// Reserves the agent for one turn; `busy` if a turn is active.
    pub fn reserve(&self) -> Result<TurnSlot> {
        if self
            .inner
            .busy
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return Err(Error::new(
                ErrorKind::Busy,
                "the agent already has an active turn; finish, cancel or drop it first",
            ));
        }
        Ok(TurnSlot {
            agent: self.clone(),
        })
    }

    /// Runs one turn: appends `input` as a user message and streams until the model is
    /// done, delivering every event to `receiver`. The last event is `message_complete`;
    /// on failure the error is returned instead and no `message_complete` is sent.
    ///
    /// The future is `Send`, so it can be `tokio::spawn`ed; dropping it cancels the turn
    /// (its tools are aborted) and leaves the history valid.
    pub async fn run(
        &self,
        input: impl Into<Input>,
        receiver: &mut dyn Receiver,
        control: &TurnControl,
        options: TurnOptions,
    ) -> Result<TurnSummary> {
        let input = input.into();
        self.reserve()?.run(input, receiver, control, options).await
    }

    /// Runs one turn whose answer must match `schema` (replacing the agent's
    /// `output_schema` for this turn) and returns it as a `T`. The turn's events are not
    /// delivered anywhere: use [`Agent::run`] with [`TurnOptions::output_schema`] and
    /// [`TurnSummary::output_as`] to watch them. Failures are the turn's, plus
    /// `output_invalid` when the validated answer does not deserialize into `T`.
    ///
    /// ```no_run
    /// # async fn demo(agent: panto::Agent) -> panto::Result<()> {
    /// #[derive(serde::Deserialize)]
    /// struct Weather { city: String, celsius: Option<i32> }
    /// let schema = serde_json::json!({
    ///     "type": "object",
    ///     "properties": {"city": {"type": "string"}, "celsius": {"type": "integer"}},
    ///     "required": ["city"]
    /// });
    /// let w: Weather = agent.run_output("Weather in Paris?", schema).await?;
    /// println!("{}: {:?}", w.city, w.celsius);
    /// # Ok(()) }
    /// ```
    pub async fn run_output<T: serde::de::DeserializeOwned>(
        &self,
        input: impl Into<Input>,
        schema: serde_json::Value,
    ) -> Result<T> {
        let options = TurnOptions {
            output_schema: TurnSchema::Schema(schema),
            ..TurnOptions::default()
        };
        self.run(input, &mut Discard, &TurnControl::default(), options)
            .await?
            .output_as()
    }

    /// [`Agent::run_output`] with the schema derived from `T` by schemars (feature
    /// `schemars`; see [`crate::output::schema_for`]).
    ///
    /// ```no_run
    /// # async fn demo(agent: panto::Agent) -> panto::Result<()> {
    /// use panto::schemars::JsonSchema;
    /// #[derive(serde::Deserialize, JsonSchema)]
    /// #[schemars(crate = "panto::schemars")]
    /// struct Weather { city: String, celsius: Option<i32> }
    /// let w: Weather = agent.run_typed("Weather in Paris?").await?;
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "schemars")]
    pub async fn run_typed<T: serde::de::DeserializeOwned + schemars::JsonSchema>(
        &self,
        input: impl Into<Input>,
    ) -> Result<T> {
        self.run_output(input, output::schema_for::<T>()).await
    }

    /// Appends the input and runs the steps. A request the provider refused as
    /// malformed (`bad_request`: a text-only model sent an image, an attachment it does
    /// not take) before anything answered the input takes the input back out: it would
    /// be refused again, and every later turn with it.
    async fn turn(
        &self,
        input: Input,
        sink: &mut TurnSink<'_>,
        control: &TurnControl,
        options: TurnOptions,
    ) -> Result<TurnSummary> {
        self.check_input(&input)?;
        let output = self.turn_output(&options)?;
        // MCP servers start (or fail, naming the server) before anything is sent.
        let mcp = self.mcp_tools(&control.cancel).await?;
        let parts = input.into_parts();
        let user = Message {
            role: Role::User,
            content: if parts.is_empty() {
                vec![Block::text("")]
            } else {
                parts
            },
        };
        self.history_lock().push(user.clone());
        let mut refused = false;
        let result = self
            .steps(sink, control, options, output.as_ref(), mcp, &mut refused)
            .await;
        if refused {
            let mut history = self.history_lock();
            if history.last() == Some(&user) {
                history.pop();
            }
        }
        result
    }

    /// The turn's requests and tools; `refused` is set when the provider refused the
    /// first request as malformed.
    async fn steps(
        &self,
        sink: &mut TurnSink<'_>,
        control: &TurnControl,
        options: TurnOptions,
        output: Option<&OutputSpec>,
        mut mcp: Vec<Arc<dyn Tool>>,
        refused: &mut bool,
    ) -> Result<TurnSummary> {
        let config = &self.inner.config;
        let model = options.model.unwrap_or_else(|| config.model.clone());
        let request_options = RequestOptions {
            reasoning: options.reasoning.or(config.reasoning),
            prompt_caching: config.prompt_caching,
            dialect: self.inner.dialect,
            store: config.store && config.provider == ProviderKind::OpenAiResponses,
            previous_response: None,
            output: output.map(OutputSpec::request),
        };
        let mut usage = Usage::TOTAL;
        let mut message: u32 = 0;
        let mut repairs: u32 = 0;
        loop {
            if control.cancel.is_cancelled() {
                return Err(Error::cancelled());
            }
            if message > 0 {
                // Between steps: a server that said its tools changed is listed again.
                mcp = self.mcp_tools(&control.cancel).await?;
            }
            let mut specs = self.tool_specs();
            specs.extend(mcp.iter().map(|t| t.spec()));
            if self.wants_compaction() {
                self.auto_compact(&model, sink, control).await?;
            }
            let body = {
                let history = self.history_lock();
                let params = RequestParams {
                    model: &model,
                    system: config.system.as_deref(),
                    max_tokens: config.max_tokens,
                    temperature: config.temperature,
                    tools: &specs,
                    messages: &history,
                };
                let stored = if request_options.store {
                    self.inner
                        .stored
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .clone()
                } else {
                    None
                };
                let request_options = RequestOptions {
                    previous_response: stored.as_ref().map(|(id, messages)| {
                        provider::PreviousResponse {
                            id,
                            messages: *messages,
                        }
                    }),
                    ..request_options
                };
                let value = provider::request_body_with(config.provider, &params, &request_options);
                Bytes::from(
                    serde_json::to_vec(&value).map_err(|e| {
                        Error::internal(format!("cannot serialize the request: {e}"))
                    })?,
                )
            };
            let decoded = self
                .inner
                .transport
                .stream_message(config, &model, body, message, &control.cancel, sink)
                .await
                .inspect_err(|e| *refused = message == 0 && e.kind == ErrorKind::BadRequest)?;
            if request_options.store {
                // The answer enters the history next, at its current end: the server now
                // holds everything up to and including it.
                let covered = self.history_lock().len() + 1;
                self.set_stored(decoded.response_id.clone().map(|id| (id, covered)));
            }
            usage.add(&decoded.usage);
            let step_usage = decoded.usage;
            let stop = decoded.stop_reason.clone();
            let text = decoded.message.text();
            message += 1;
            if stop == StopReason::MaxTokens {
                // The output was cut off by the limit: whatever tool calls it holds may be
                // clipped, and asking again would repeat the cut. Nothing runs, nothing is
                // announced; the calls get results saying so, which keeps the history
                // valid for the next turn. A structured answer cut there is never parsed.
                let raw = output.map(|spec| answer_text(&decoded.message, spec));
                let results = unrun_results(&decoded.message);
                self.commit(decoded.message, results);
                self.record_usage(&step_usage);
                if let Some(raw) = raw {
                    return Err(Error::new(
                        ErrorKind::OutputTruncated,
                        format!(
                            "the answer stopped at the output limit (max_tokens) after {} \
                             bytes, before the structured output was complete",
                            raw.len()
                        ),
                    )
                    .with_output(Some(raw)));
                }
                return self.complete(stop, usage, message, text, None, sink);
            }
            // `output_mode: tool`: the forced call is the answer; it is never dispatched.
            let answered = output
                .filter(|spec| spec.mode() == WireMode::Tool)
                .is_some_and(|spec| output_call(&decoded.message, spec.name()).is_some());
            let calls = if answered {
                Vec::new()
            } else {
                self.plan_calls(&decoded.message, &decoded.cut_off_calls, &mcp)
            };
            if calls.is_empty() {
                let Some(spec) = output else {
                    self.commit(decoded.message, Vec::new());
                    self.record_usage(&step_usage);
                    return self.complete(stop, usage, message, text, None, sink);
                };
                let raw = answer_text(&decoded.message, spec);
                if matches!(stop, StopReason::Refusal | StopReason::ContentFilter) {
                    let results = answer_results(&decoded.message, spec, "refused", true);
                    self.commit(decoded.message, results);
                    self.record_usage(&step_usage);
                    return Err(Error::new(
                        ErrorKind::OutputRefused,
                        format!(
                            "the model refused to answer (stop reason {}): {}",
                            stop.as_string(),
                            output::one_line(&raw, 500)
                        ),
                    )
                    .with_output(Some(raw)));
                }
                match spec.accept(&raw) {
                    Ok(value) => {
                        let results = answer_results(&decoded.message, spec, "accepted", false);
                        self.commit(decoded.message, results);
                        self.record_usage(&step_usage);
                        // A forced tool call ended the message; the turn ended with an
                        // answer.
                        let stop = if answered { StopReason::EndTurn } else { stop };
                        return self.complete(stop, usage, message, raw, Some(value), sink);
                    }
                    Err(Rejection(problem)) => {
                        let prompt = output::repair_prompt(&problem);
                        let can_repair =
                            repairs < config.output_retries && message < config.max_steps;
                        let results = answer_results(&decoded.message, spec, &prompt, true);
                        self.commit(decoded.message, results);
                        self.record_usage(&step_usage);
                        if !can_repair {
                            return Err(Error::new(
                                ErrorKind::OutputInvalid,
                                format!(
                                    "the answer did not match the output schema after {repairs} \
                                     repair request(s): {problem}"
                                ),
                            )
                            .with_output(Some(raw)));
                        }
                        repairs += 1;
                        // In tool mode the error went back as the call's result; else it
                        // is a user message after the answer.
                        if !answered {
                            self.history_lock().push(Message::user(prompt));
                        }
                        sink.emit(Event::OutputRepair {
                            message: message - 1,
                            attempt: repairs,
                            max_attempts: config.output_retries,
                            error: problem,
                        })?;
                        continue;
                    }
                }
            }
            let outputs: Outputs = Arc::new(Mutex::new(vec![None; calls.len()]));
            let step = StepGuard {
                agent: self,
                assistant: Some(decoded.message),
                calls: calls
                    .iter()
                    .map(|(r, _)| (r.call_id.clone(), r.name.clone()))
                    .collect(),
                outputs: outputs.clone(),
            };
            let dispatch = Dispatch {
                message: message - 1,
                concurrency: config.tool_concurrency,
                timeout: Duration::from_millis(config.tool_timeout_ms),
                max_output_bytes: config.max_tool_output_bytes,
                max_image_bytes: config.max_message_bytes,
                host: &control.host,
                cancel: &control.cancel,
            };
            let failure = tool::dispatch(dispatch, &calls, &outputs, &mut |ev| sink.emit(ev)).await;
            // Every call gets its result in call order, even when the turn stops here,
            // so the history stays acceptable to the provider.
            step.commit();
            self.record_usage(&step_usage);
            if let Some(err) = failure {
                return Err(err);
            }
            if message >= config.max_steps {
                if output.is_some() {
                    // The turn ran out of requests before a final answer: there is no
                    // output to give.
                    return Err(Error::new(
                        ErrorKind::OutputInvalid,
                        format!(
                            "the turn reached max_steps ({}) before a final answer to parse",
                            config.max_steps
                        ),
                    )
                    .with_output(Some(text)));
                }
                return self.complete(StopReason::MaxSteps, usage, message, text, None, sink);
            }
        }
    }

    /// The tools of the agent's MCP servers for the next step (started if they were
    /// not, listed again if they changed). A name another tool of the agent has is a
    /// `config` error.
    async fn mcp_tools(&self, cancel: &CancellationToken) -> Result<Vec<Arc<dyn Tool>>> {
        let Some(set) = &self.inner.mcp else {
            return Ok(Vec::new());
        };
        let tools = set.tools(cancel).await?;
        let rust = self
            .inner
            .tools
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        for t in &tools {
            let name = t.spec().name;
            if rust.contains_key(&name) || self.inner.config.tools.iter().any(|h| h.name == name) {
                return Err(Error::config(format!(
                    "mcp_servers: an MCP server's tool is called {name:?}, like another tool \
                     of the agent; set the server's tool_prefix or filter its tools"
                )));
            }
        }
        Ok(tools)
    }

    /// The agent's MCP servers, if it has any.
    pub fn mcp_servers(&self) -> Option<&McpServers> {
        self.inner.mcp.as_ref()
    }

    /// Automatic compaction before a request: the summary request is not a message of
    /// the turn (its events are dropped); `history_compacted` announces the result. A
    /// failure fails the turn with its error and leaves the history as it was.
    async fn auto_compact(
        &self,
        turn_model: &str,
        sink: &mut TurnSink<'_>,
        control: &TurnControl,
    ) -> Result<()> {
        let Some(c) = &self.inner.config.compaction else {
            return Ok(());
        };
        let options = CompactOptions {
            keep_last: c.keep_last,
            model: c.model.clone(),
            prompt: c.prompt.clone(),
        };
        let model = c.model.as_deref().unwrap_or(turn_model);
        let secrets = self.inner.transport.secrets();
        let mut discard = Discard;
        let mut quiet = TurnSink::new(&mut discard, control.cancel.clone(), secrets);
        let done = self
            .compact_now(&options, model, &control.cancel, &mut quiet)
            .await?;
        // A result still past the threshold (the kept messages are that large) is not
        // compacted again until it has grown by half the threshold.
        // (Nothing to summarize made no request: looking again next step costs nothing.)
        let floor = if done.changed && done.tokens_after >= c.threshold_tokens {
            done.tokens_after.saturating_add(c.threshold_tokens / 2)
        } else {
            0
        };
        self.inner.compaction_floor.store(floor, Ordering::SeqCst);
        if done.changed {
            sink.emit(Event::HistoryCompacted {
                messages_before: done.messages_before,
                messages_after: done.messages_after,
                tokens_before: done.tokens_before,
                tokens_after: done.tokens_after,
            })?;
        }
        Ok(())
    }

    /// Appends one whole step: the assistant message, then (if it called tools) their
    /// results, under one lock.
    fn commit(&self, assistant: Message, results: Vec<Block>) {
        let mut history = self.history_lock();
        history.push(assistant);
        if !results.is_empty() {
            history.push(Message {
                role: Role::Tool,
                content: results,
            });
        }
    }

    fn complete(
        &self,
        stop_reason: StopReason,
        usage: Usage,
        messages: u32,
        text: String,
        output: Option<serde_json::Value>,
        sink: &mut TurnSink<'_>,
    ) -> Result<TurnSummary> {
        sink.emit(Event::MessageComplete {
            stop_reason: stop_reason.clone(),
            usage,
            messages,
            text: text.clone(),
            output: output.clone(),
        })?;
        Ok(TurnSummary {
            stop_reason,
            usage,
            messages,
            text,
            output,
        })
    }

    /// Decides how each tool call of a finished message is answered. Decided from the
    /// calls actually received, not from the stop reason.
    fn plan_calls(
        &self,
        msg: &Message,
        cut_off: &[String],
        mcp: &[Arc<dyn Tool>],
    ) -> Vec<(CallRequest, Runner)> {
        let tools = self
            .inner
            .tools
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        msg.content
            .iter()
            .filter_map(|b| match b {
                Block::ToolCall {
                    call_id,
                    name,
                    arguments,
                    arguments_raw,
                } => {
                    let (shown, shown_raw) = match arguments {
                        Some(v) if v.is_object() => (Some(v.clone()), None),
                        Some(v) => (None, Some(v.to_string())),
                        None => (None, Some(arguments_raw.clone().unwrap_or_default())),
                    };
                    let parsed = match arguments {
                        Some(v) if v.is_object() => Ok(v.clone()),
                        Some(_) => Err("the tool arguments must be a JSON object".to_owned()),
                        None => Err(format!(
                            "the tool arguments are not valid JSON: {}",
                            provider::truncate(arguments_raw.as_deref().unwrap_or(""), 200)
                        )),
                    };
                    let runner = if cut_off.contains(call_id) {
                        Runner::Refuse(
                            "the tool call was cut off before it was complete and was not run"
                                .to_owned(),
                        )
                    } else if let Some(t) = tools.get(name) {
                        Runner::Rust(t.clone())
                    } else if let Some(t) = mcp.iter().find(|t| &t.spec().name == name) {
                        Runner::Rust(t.clone())
                    } else if self.inner.config.tools.iter().any(|t| &t.name == name) {
                        Runner::Host
                    } else {
                        Runner::Refuse(format!("there is no tool named {name:?}"))
                    };
                    Some((
                        CallRequest {
                            call_id: call_id.clone(),
                            name: name.clone(),
                            arguments: parsed,
                            shown_arguments: shown,
                            shown_raw,
                        },
                        runner,
                    ))
                }
                _ => None,
            })
            .collect()
    }
}

impl TurnSlot {
    /// The agent this slot reserves.
    pub fn agent(&self) -> &Agent {
        &self.agent
    }

    /// Runs the reserved turn (see [`Agent::run`]); the agent is free again when the
    /// returned future completes or is dropped.
    pub async fn run(
        self,
        input: impl Into<Input>,
        receiver: &mut dyn Receiver,
        control: &TurnControl,
        options: TurnOptions,
    ) -> Result<TurnSummary> {
        let input = input.into();
        let agent = self.agent.clone();
        let span = info_span!("turn", provider = agent.inner.config.provider.as_str());
        let secrets = agent.inner.transport.secrets();
        let mut sink = TurnSink::new(receiver, control.cancel.clone(), secrets);
        let result = agent
            .turn(input, &mut sink, control, options)
            .instrument(span)
            .await;
        drop(self);
        match result {
            // A failure caused by cancelling (a cut read, an aborted tool) is reported
            // as what it is: a cancellation.
            Err(e) if control.cancel.is_cancelled() && e.kind != ErrorKind::Cancelled => {
                debug!(error = %e, "failure after cancel reported as cancelled");
                Err(Error::cancelled())
            }
            Err(e) => Err(e.redact(secrets)),
            ok => ok,
        }
    }
}

/// One step whose tools are running: on drop — normal or because the turn's future was
/// dropped mid-await — the assistant message and every call's result (cancelled where
/// none arrived) enter the history together.
struct StepGuard<'a> {
    agent: &'a Agent,
    assistant: Option<Message>,
    calls: Vec<(String, String)>,
    outputs: Outputs,
}

impl StepGuard<'_> {
    fn commit(self) {
        drop(self);
    }
}

impl Drop for StepGuard<'_> {
    fn drop(&mut self) {
        let Some(assistant) = self.assistant.take() else {
            return;
        };
        let outputs =
            std::mem::take(&mut *self.outputs.lock().unwrap_or_else(PoisonError::into_inner));
        let results = self
            .calls
            .iter()
            .enumerate()
            .map(|(i, (call_id, name))| {
                let out = outputs
                    .get(i)
                    .cloned()
                    .flatten()
                    .unwrap_or_else(|| ToolOutput::error("the tool call was cancelled"));
                Block::ToolResult {
                    call_id: call_id.clone(),
                    name: name.clone(),
                    output: out.output,
                    is_error: out.is_error,
                    parts: out.parts,
                }
            })
            .collect();
        self.agent.commit(assistant, results);
    }
}

/// The forced output call of `output_mode: tool` in a message, if it made one.
fn output_call<'m>(msg: &'m Message, name: &str) -> Option<&'m Block> {
    msg.content
        .iter()
        .find(|b| matches!(b, Block::ToolCall { name: n, .. } if n == name))
}

/// The raw answer of a message: the forced call's arguments as sent (`output_mode:
/// tool`), else its text.
fn answer_text(msg: &Message, spec: &OutputSpec) -> String {
    if spec.mode() == WireMode::Tool {
        if let Some(Block::ToolCall {
            arguments,
            arguments_raw,
            ..
        }) = output_call(msg, spec.name())
        {
            return match (arguments_raw, arguments) {
                (Some(raw), _) => raw.clone(),
                (None, Some(v)) => v.to_string(),
                (None, None) => String::new(),
            };
        }
    }
    msg.text()
}

/// Results for the tool calls of a final answer, which keep the history valid: the
/// forced output call gets `outcome` (what became of the answer: accepted, or the
/// repair request), any other call a note that it did not run.
fn answer_results(msg: &Message, spec: &OutputSpec, outcome: &str, is_error: bool) -> Vec<Block> {
    msg.content
        .iter()
        .filter_map(|b| match b {
            Block::ToolCall { call_id, name, .. } => {
                let (output, is_error) = if spec.mode() == WireMode::Tool && name == spec.name() {
                    (outcome.to_owned(), is_error)
                } else {
                    (
                        "not run: the turn's answer was given in the same message".to_owned(),
                        true,
                    )
                };
                Some(Block::ToolResult {
                    call_id: call_id.clone(),
                    name: name.clone(),
                    output,
                    is_error,
                    parts: Vec::new(),
                })
            }
            _ => None,
        })
        .collect()
}

/// Results for the tool calls of a message that ended at the output limit: none ran.
fn unrun_results(msg: &Message) -> Vec<Block> {
    msg.content
        .iter()
        .filter_map(|b| match b {
            Block::ToolCall { call_id, name, .. } => Some(Block::ToolResult {
                call_id: call_id.clone(),
                name: name.clone(),
                output: "not run: the reply was cut off by the output limit (max_tokens) \
                         before this call was known to be complete"
                    .to_owned(),
                is_error: true,
                parts: Vec::new(),
            }),
            _ => None,
        })
        .collect()
}
