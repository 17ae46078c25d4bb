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
use crate::mcp::sampling::{McpSamplingRequest, SampleFuture, Sampled, SampledUsage, Sampler};
use crate::mcp::McpServers;
use crate::media::Input;
use crate::message::{self, Block, Message, Role, StopReason, Usage};
pub use crate::options::{TurnOptions, TurnSchema};
use crate::output::{self, OutputSpec};
use crate::provider::{self, RequestOptions, RequestParams};
use crate::request::{Dialect, ToolSpec};
use crate::telemetry::TurnTelemetry;
use crate::tool::{self, CallRequest, Dispatch, HostToolResults, Outputs, Runner, Tool};
use crate::transcript::{self, TranscriptEntry};
use crate::turn::{
    step_results, Answers, Checkpoint, DeferredCall, Limits, Next, NotSteered, PendingStep, Plan,
    PlannedCall, ToolKind, Turn, TurnShared,
};

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

/// A turn's way to its model for MCP servers' sampling requests: one request of the
/// server's messages through the agent's provider and connection, its events dropped
/// (the server's `mcp_sampling_request` event stands for it) and its usage kept for the
/// turn.
struct TurnSampler {
    agent: Agent,
    model: String,
    cancel: CancellationToken,
    usage: Arc<SampledUsage>,
}

impl Sampler for TurnSampler {
    fn sample(&self, request: McpSamplingRequest) -> SampleFuture {
        let (agent, model, cancel, usage) = (
            self.agent.clone(),
            self.model.clone(),
            self.cancel.clone(),
            self.usage.clone(),
        );
        Box::pin(async move {
            let config = &agent.inner.config;
            let params = RequestParams {
                model: &model,
                system: request.system_prompt.as_deref(),
                max_tokens: Some(request.max_tokens),
                temperature: request.temperature,
                tools: &[],
                messages: &request.messages,
            };
            let options = RequestOptions {
                dialect: agent.inner.dialect,
                ..RequestOptions::default()
            };
            let value = provider::request_body_with(config.provider, &params, &options);
            let body = Bytes::from(
                serde_json::to_vec(&value)
                    .map_err(|e| Error::internal(format!("cannot serialize the request: {e}")))?,
            );
            let secrets = agent.inner.transport.secrets();
            let mut discard = Discard;
            let mut quiet = TurnSink::new(&mut discard, cancel.clone(), secrets);
            let decoded = agent
                .inner
                .transport
                .stream_message(config, &model, body, 0, &cancel, &mut quiet)
                .await?;
            usage.add(&decoded.usage);
            Ok(Sampled {
                text: decoded.message.text(),
                model: decoded.model,
                stop_reason: decoded.stop_reason,
            })
        })
    }
}

impl TurnSummary {
    /// The turn's structured output as a `T`. An `output_invalid` error when the turn had
    /// no output schema, or when the validated output does not fit `T` (a schema and a
    /// type that disagree), with the output's JSON as the error's raw text.
    pub fn output_as<T: serde::de::DeserializeOwned>(&self) -> Result<T> {
        let Some(output) = &self.output else {
            return Err(Error::new(
                ErrorKind::OutputInvalid,
                "the turn had no output schema, so it has no structured output",
            )
            .with_output(Some(self.text.clone())));
        };
        output.parse().map_err(|e| {
            Error::new(
                ErrorKind::OutputInvalid,
                format!(
                    "the output matched the schema but not the Rust type: {}",
                    crate::text::one_line(&e.to_string(), output::MAX_ERROR_BYTES)
                ),
            )
            .with_output(Some(output.as_str().to_owned()))
        })
    }
}

/// The size in tokens of the request a turn would send ([`Agent::count_tokens`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct TokenCount {
    /// Tokens of the request: the history, the tools, the system prompt and the input.
    pub tokens: u64,
    /// True when panto estimated it (the request's bytes divided by 4) because the
    /// provider has no count endpoint (Chat Completions); false for the provider's count.
    pub estimated: bool,
}

impl TokenCount {
    /// The count as JSON (`{"tokens": n, "estimated": bool}`), as the bindings return it.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
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
    /// The validated structured output, when an output schema applied to the turn, its
    /// numbers as the model wrote them (`to_value()` for a `serde_json::Value`).
    pub output: Option<output::JsonText>,
    /// The calls the turn paused for (stop reason `deferred`); empty otherwise.
    pub deferred: Vec<DeferredCall>,
    /// The model that answered the turn's last request, as the configuration names it:
    /// the agent's (or the turn's `model` option), or that of the `fallback` entry the
    /// turn went to.
    pub model: String,
}

/// The outside handles of one turn: its cancellation token, where host-tool results
/// are submitted, its latest checkpoint and its steering queue. Create one per turn and
/// keep a clone to cancel, answer, checkpoint or steer from anywhere.
#[derive(Debug, Clone, Default)]
pub struct TurnControl {
    /// Cancels the turn (and its tools) when cancelled.
    pub cancel: CancellationToken,
    /// Where host-tool results are submitted.
    pub host: HostToolResults,
    shared: Arc<TurnShared>,
}

impl TurnControl {
    /// The turn at its latest step boundary: after its input was appended, after each
    /// complete model response, after each tool result, after steering was delivered.
    /// `None` before the turn started. Ordering: once a receiver has been given the
    /// `tool_result` of a call, or the first event after a response's `message_end`,
    /// the checkpoint already includes that result or that response. Built on demand
    /// (the turn keeps a cheap snapshot); holds none of the agent's secrets.
    pub fn checkpoint(&self) -> Option<Checkpoint> {
        self.shared.checkpoint()
    }

    /// Queues a user message into the running turn (any thread). It is delivered at
    /// the next step boundary — after the current step's tool results, before the next
    /// request — with a `steering_delivered` event; if the model's message would have
    /// ended the turn, the turn goes on so the model answers it. Once the turn has
    /// ended the input is given back in the error ([`NotSteered`]). Messages queued
    /// but not delivered when the turn fails, is cancelled or pauses are kept for
    /// [`TurnControl::take_undelivered`].
    pub fn steer(&self, input: impl Into<Input>) -> std::result::Result<(), NotSteered> {
        self.shared.steer(input.into())
    }

    /// The steering messages the turn did not deliver because it ended first (failed,
    /// cancelled, paused, or reached a limit), oldest first; each is given once.
    pub fn take_undelivered(&self) -> Vec<Input> {
        self.shared.take_undelivered()
    }
}

static NEXT_AGENT_ID: AtomicU64 = AtomicU64::new(1);

/// One entry of the configuration's `fallback` list, ready to send to: its own
/// configuration (the agent's, with the entry's provider, model, endpoint and key), its
/// transport (its endpoint's `max_concurrent_requests` bound is its own) and the fields
/// its server takes.
struct FallbackEntry {
    config: Config,
    transport: Transport,
    dialect: Dialect,
}

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
    /// The `fallback` list, in order.
    fallback: Vec<FallbackEntry>,
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
        Agent::validated(config)
    }

    /// An agent with a configuration already validated.
    fn validated(config: Config) -> Result<Agent> {
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
        let mut transport = Transport::new(&config)?;
        if let Some(m) = &mcp {
            transport.attach_live_secrets(m.live_secrets());
        }
        let output = config
            .output_schema
            .as_ref()
            .map(|s| OutputSpec::new(s, config.provider, config.output_mode, "output_schema"))
            .transpose()?;
        let fallback = config
            .fallback
            .iter()
            .enumerate()
            .map(|(i, entry)| {
                let config = entry.config(&config);
                let transport = Transport::new(&config).map_err(|mut e| {
                    e.message = format!("fallback[{i}].{}", e.message);
                    e
                })?;
                Ok(FallbackEntry {
                    dialect: Dialect::resolve(config.compat, &config.base_url),
                    config,
                    transport,
                })
            })
            .collect::<Result<Vec<_>>>()?;
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
                fallback,
            }),
        })
    }

    /// An agent from the JSON configuration (see [`Config::from_json`]).
    pub fn from_json(json: &str) -> Result<Agent> {
        // `Config::from_json` validates what it reads: not twice per agent made.
        Agent::validated(Config::from_json(json)?)
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
                crate::text::truncate(&spec.name, 100)
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
    async fn wants_compaction(
        &self,
        model: &str,
        specs: &[ToolSpec],
        cancel: &CancellationToken,
    ) -> Result<bool> {
        let Some(c) = &self.inner.config.compaction else {
            return Ok(false);
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
            // No count of this history yet: the provider's, when the agent opts in.
            _ if self.inner.config.provider_token_counts => {
                let history = self.history();
                self.request_tokens(&history, model, specs, true, cancel)
                    .await?
                    .tokens
            }
            _ => compaction::estimate_tokens(&self.history_lock()),
        };
        Ok(tokens > c.threshold_tokens
            && tokens > self.inner.compaction_floor.load(Ordering::SeqCst))
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
        // How the provider counts cached input (Anthropic apart from `input_tokens`).
        let input = self.inner.config.provider.wire().request_tokens(usage);
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

    /// The tokens of the request a turn with `input` would send now: the history, the
    /// tools, the system prompt and the input (nothing enters the history). Asks the
    /// provider's count endpoint where it has one (Anthropic `messages/count_tokens`,
    /// Gemini `countTokens`, OpenAI Responses `input_tokens`); otherwise estimates it
    /// and says so (`estimated`). The input is checked as a turn checks it (`config`);
    /// the provider's errors are typed as a turn's. The tools of MCP servers are not
    /// counted (a count does not start them).
    pub async fn count_tokens(&self, input: impl Into<Input>) -> Result<TokenCount> {
        let input = input.into();
        self.check_input(&input)?;
        let mut messages = self.history();
        messages.push(user_message(input));
        let model = self.inner.config.model.clone();
        let specs = self.tool_specs();
        self.request_tokens(&messages, &model, &specs, true, &CancellationToken::new())
            .await
    }

    /// The tokens of a request with `messages`: the provider's count when `ask` and it
    /// has a count endpoint, else the estimate.
    async fn request_tokens(
        &self,
        messages: &[Message],
        model: &str,
        specs: &[ToolSpec],
        ask: bool,
        cancel: &CancellationToken,
    ) -> Result<TokenCount> {
        let config = &self.inner.config;
        let output = self.inner.output.clone();
        let params = RequestParams {
            model,
            system: config.system.as_deref(),
            max_tokens: config.max_tokens,
            temperature: config.temperature,
            tools: specs,
            messages,
        };
        let request_options = RequestOptions {
            reasoning: config.reasoning,
            prompt_caching: config.prompt_caching,
            dialect: self.inner.dialect,
            store: false,
            previous_response: None,
            output: output.as_ref().map(OutputSpec::request),
        };
        let body = provider::request_body_with(config.provider, &params, &request_options);
        let wire = config.provider.wire();
        if ask {
            if let Some((url, count_body)) =
                wire.token_count_request(&config.base_url, model, &body)
            {
                let tokens = self
                    .inner
                    .transport
                    .count_tokens(config, &url, &count_body, cancel)
                    .await?;
                return Ok(TokenCount {
                    tokens,
                    estimated: false,
                });
            }
        }
        let bytes = serde_json::to_vec(&body).map_or(0, |b| b.len() as u64);
        Ok(TokenCount {
            tokens: bytes.div_ceil(4),
            estimated: true,
        })
    }

    /// Refuses a turn whose first request would pass `max_history_tokens` (before any
    /// model request).
    async fn check_history_tokens(
        &self,
        user: &Message,
        model: &str,
        mcp: &[Arc<dyn Tool>],
        cancel: &CancellationToken,
    ) -> Result<()> {
        let config = &self.inner.config;
        let Some(max) = config.max_history_tokens else {
            return Ok(());
        };
        let mut messages = self.history();
        messages.push(user.clone());
        let mut specs = self.tool_specs();
        specs.extend(mcp.iter().map(|t| t.spec()));
        let count = self
            .request_tokens(
                &messages,
                model,
                &specs,
                config.provider_token_counts,
                cancel,
            )
            .await?;
        if count.tokens > max {
            let how = if count.estimated {
                "estimated"
            } else {
                "counted by the provider"
            };
            return Err(Error::config(format!(
                "input: the request with this input would be {} tokens ({how}), more than \
                 max_history_tokens ({max}); compact or clear the conversation first",
                count.tokens
            )));
        }
        Ok(())
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
        let user = user_message(input);
        if let Some(t) = sink.telemetry() {
            t.input(&user.text());
        }
        let model = options
            .model
            .clone()
            .unwrap_or_else(|| self.inner.config.model.clone());
        self.check_history_tokens(&user, &model, &mcp, &control.cancel)
            .await?;
        let history = {
            let mut history = self.history_lock();
            history.push(user.clone());
            Arc::new(history.clone())
        };
        let mut turn = Turn::new(self.limits(), options, output.is_some(), history);
        let result = self
            .drive(&mut turn, sink, control, output.as_ref(), mcp)
            .await;
        if turn.input_refused() {
            let mut history = self.history_lock();
            if history.last() == Some(&user) {
                history.pop();
            }
        }
        result
    }

    /// The limits the state machine applies, from the configuration.
    fn limits(&self) -> Limits {
        Limits {
            max_steps: self.inner.config.max_steps,
            output_retries: self.inner.config.output_retries,
            max_tool_calls: self.inner.config.max_tool_calls,
        }
    }

    /// What the agent's tool set says about a tool name (for deferral and resume).
    fn tool_kind(&self, name: &str, mcp: &[Arc<dyn Tool>]) -> ToolKind {
        let tools = self
            .inner
            .tools
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(t) = tools.get(name) {
            if t.is_external() {
                ToolKind::External
            } else if t.needs_approval() {
                ToolKind::Approval
            } else {
                ToolKind::Run
            }
        } else if let Some(t) = self.inner.config.tools.iter().find(|t| t.name == name) {
            if t.external {
                ToolKind::External
            } else if t.needs_approval {
                ToolKind::Approval
            } else {
                ToolKind::Run
            }
        } else if mcp.iter().any(|t| t.spec().name == name)
            || self.inner.config.tools.iter().any(|t| t.name == name)
        {
            ToolKind::Run
        } else {
            ToolKind::Unknown
        }
    }

    /// Drives the turn's state machine: sends its requests, runs its calls, delivers
    /// steering at step boundaries, keeps the checkpoint cell current, and closes the
    /// steering queue when the turn ends (what was not delivered is kept for
    /// `TurnControl::take_undelivered`).
    async fn drive(
        &self,
        turn: &mut Turn,
        sink: &mut TurnSink<'_>,
        control: &TurnControl,
        output: Option<&OutputSpec>,
        mcp: Vec<Arc<dyn Tool>>,
    ) -> Result<TurnSummary> {
        let result = self.steps(turn, sink, control, output, mcp).await;
        control.shared.close(turn.take_steering());
        result
    }

    /// The turn's requests and tools, as the state machine directs.
    async fn steps(
        &self,
        turn: &mut Turn,
        sink: &mut TurnSink<'_>,
        control: &TurnControl,
        output: Option<&OutputSpec>,
        mut mcp: Vec<Arc<dyn Tool>>,
    ) -> Result<TurnSummary> {
        let config = &self.inner.config;
        let model = turn
            .options()
            .model
            .clone()
            .unwrap_or_else(|| config.model.clone());
        let request_options = RequestOptions {
            reasoning: turn.options().reasoning.or(config.reasoning),
            prompt_caching: config.prompt_caching,
            dialect: self.inner.dialect,
            store: config.store && config.provider.wire().keeps_responses(),
            previous_response: None,
            output: output.map(OutputSpec::request),
        };
        let secrets = self.inner.transport.secrets();
        let publish = |turn: &Turn, outputs: Option<Outputs>| {
            control.shared.publish(
                turn.snapshot()
                    .with(outputs, secrets.clone())
                    .on_model(&self.route_model(turn, turn.route().entry)),
            );
        };
        publish(turn, None);
        // The usage of the response whose calls are running, recorded once its step
        // enters the history.
        let mut step_usage: Option<Usage> = None;
        // The way to the model of MCP servers whose sampling is enabled.
        let sampler = self
            .inner
            .mcp
            .as_ref()
            .filter(|m| m.configs().values().any(|c| c.sampling))
            .map(|_| {
                Arc::new(TurnSampler {
                    agent: self.clone(),
                    model: model.clone(),
                    cancel: control.cancel.clone(),
                    usage: Arc::new(SampledUsage::default()),
                })
            });
        loop {
            // A step boundary: steering messages queued meanwhile enter the turn.
            for input in control.shared.take_queued() {
                turn.steer(input);
            }
            let delivered = turn.deliver_steering();
            if !delivered.is_empty() {
                self.history_lock().extend(delivered.iter().cloned());
                publish(turn, None);
                for m in &delivered {
                    sink.emit(Event::SteeringDelivered {
                        message: turn.steps(),
                        text: m.text(),
                    })?;
                }
            }
            match turn.next() {
                Next::Done(summary) => {
                    // A message steered in while the turn decided to end is answered.
                    let late = control.shared.close_unless_queued();
                    if !late.is_empty() {
                        late.into_iter().for_each(|i| turn.steer(i));
                        continue;
                    }
                    return self.complete(summary, turn, sink);
                }
                Next::Pause(deferred) => {
                    let summary = turn.paused(deferred);
                    return self.complete(summary, turn, sink);
                }
                Next::Request => {
                    if control.cancel.is_cancelled() {
                        return Err(Error::cancelled());
                    }
                    if turn.steps() > 0 {
                        // Between steps: a server that said its tools changed is listed again.
                        mcp = self.mcp_tools(&control.cancel).await?;
                    }
                    let mut specs = self.tool_specs();
                    specs.extend(mcp.iter().map(|t| t.spec()));
                    if self
                        .wants_compaction(&model, &specs, &control.cancel)
                        .await?
                        && self.auto_compact(&model, sink, control).await?
                    {
                        turn.rebase(Arc::new(self.history()));
                        publish(turn, None);
                    }
                    let route = turn.route();
                    let (route_config, transport, dialect) = self.endpoint(route.entry);
                    let route_model = self.route_model(turn, route.entry);
                    // A fallback entry takes the schema in its provider's form.
                    let route_output = match (route.entry, output) {
                        (0, _) | (_, None) => None,
                        (_, Some(spec)) => Some(OutputSpec::new(
                            spec.schema(),
                            route_config.provider,
                            route_config.output_mode,
                            "output_schema",
                        )?),
                    };
                    let output = if route.entry == 0 {
                        output
                    } else {
                        route_output.as_ref()
                    };
                    let route_options = if route.entry == 0 {
                        request_options
                    } else {
                        RequestOptions {
                            dialect,
                            store: false,
                            previous_response: None,
                            output: output.map(OutputSpec::request),
                            ..request_options
                        }
                    };
                    let portable_until = (route.entry > 0).then_some(route.since);
                    let body = self.request_body(
                        route_config,
                        &route_model,
                        &specs,
                        &route_options,
                        portable_until,
                    )?;
                    if let Some(t) = sink.telemetry() {
                        t.request_start(route_config, turn.steps());
                    }
                    sink.start_response();
                    let decoded = match transport
                        .stream_message(
                            route_config,
                            &route_model,
                            body,
                            turn.steps(),
                            &control.cancel,
                            sink,
                        )
                        .await
                    {
                        Ok(decoded) => {
                            if let Some(t) = sink.telemetry() {
                                t.request_end(None);
                            }
                            decoded
                        }
                        Err(e) => {
                            if let Some(t) = sink.telemetry() {
                                t.request_end(Some(&e));
                            }
                            let next = route.entry + 1;
                            if next <= self.inner.fallback.len()
                                && !sink.shown()
                                && !control.cancel.is_cancelled()
                                && crate::retry::falls_back(&e)
                            {
                                // A step of its own: the checkpoint taken from here on
                                // resumes on the next model.
                                turn.on_fallback(next);
                                publish(turn, None);
                                let (to, _, _) = self.endpoint(next);
                                debug!(kind = %e.kind, to = %to.model, "falling back");
                                sink.emit(Event::ProviderFallback {
                                    message: turn.steps(),
                                    from_provider: route_config.provider.as_str().to_owned(),
                                    from_model: route_model,
                                    to_provider: to.provider.as_str().to_owned(),
                                    to_model: to.model.clone(),
                                    error_kind: e.kind.as_str().to_owned(),
                                    error_message: crate::text::one_line(&e.message, 1000),
                                    status: (e.status != 0).then_some(e.status),
                                })?;
                                continue;
                            }
                            turn.on_request_error(&e);
                            return Err(e);
                        }
                    };
                    if route_options.store {
                        // The answer enters the history next, at its current end: the
                        // server now holds everything up to and including it.
                        let covered = self.history_lock().len() + 1;
                        self.set_stored(decoded.response_id.clone().map(|id| (id, covered)));
                    } else if route.entry > 0 {
                        // The agent's own server does not hold this answer.
                        self.set_stored(None);
                    }
                    let usage = decoded.usage;
                    let applied =
                        turn.on_response(decoded, output, &|name| self.tool_kind(name, &mcp));
                    if applied.commit.is_empty() {
                        step_usage = Some(usage);
                    } else {
                        self.history_lock().extend(applied.commit);
                        self.record_usage(&usage);
                    }
                    publish(turn, None);
                    if let Some(e) = applied.error {
                        return Err(e);
                    }
                    if let Some(ev) = applied.event {
                        sink.emit(ev)?;
                    }
                }
                Next::RunCalls => {
                    let answered = turn.take_answered();
                    let Some(step) = turn.pending() else {
                        return Err(Error::internal("no step to run calls for"));
                    };
                    let calls = self.plan_calls(step, &mcp);
                    if let Some(t) = sink.telemetry() {
                        t.runners(calls.iter().map(|(req, runner)| {
                            let how = match runner {
                                Runner::Rust(tool) if mcp.iter().any(|m| Arc::ptr_eq(m, tool)) => {
                                    "mcp"
                                }
                                Runner::Rust(_) => "rust",
                                Runner::Host => "host",
                                Runner::Refuse(_) => "refused",
                                Runner::Skip => "skipped",
                            };
                            (req.call_id.clone(), how)
                        }));
                    }
                    let outputs: Outputs = Arc::new(Mutex::new(
                        step.calls.iter().map(|c| c.result.clone()).collect(),
                    ));
                    publish(turn, Some(outputs.clone()));
                    let guard = StepGuard {
                        agent: self,
                        assistant: Some(step.assistant.clone()),
                        calls: step.calls.clone(),
                        outputs: outputs.clone(),
                    };
                    // Calls answered on resume (rejected, or given a result) are
                    // reported as an approved call that runs is: by its result (after
                    // the guard, which commits the step if the turn stops here).
                    for (call, out) in answered {
                        sink.emit(Event::ToolResult {
                            message: turn.steps().saturating_sub(1),
                            call_id: call.call_id,
                            name: call.name,
                            output: out.output,
                            is_error: out.is_error,
                            parts: out.parts,
                        })?;
                    }
                    let dispatch = Dispatch {
                        message: turn.steps().saturating_sub(1),
                        concurrency: config.tool_concurrency,
                        timeout: Duration::from_millis(config.tool_timeout_ms),
                        max_output_bytes: config.max_tool_output_bytes,
                        max_image_bytes: config.max_message_bytes,
                        host: &control.host,
                        cancel: &control.cancel,
                        sampler: sampler.clone().map(|s| s as Arc<dyn Sampler>),
                    };
                    let failure =
                        tool::dispatch(dispatch, &calls, &outputs, &mut |ev| sink.emit(ev)).await;
                    if let Some(usage) = sampler.as_ref().and_then(|s| s.usage.take()) {
                        turn.add_usage(&usage);
                    }
                    // Every call gets its result in call order, even when the turn stops
                    // here, so the history stays acceptable to the provider.
                    guard.commit();
                    if let Some(usage) = step_usage.take() {
                        self.record_usage(&usage);
                    }
                    let results = outputs
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .clone();
                    let applied = turn.on_results(results);
                    publish(turn, None);
                    if let Some(err) = failure {
                        return Err(err);
                    }
                    if let Some(e) = applied.error {
                        return Err(e);
                    }
                }
            }
        }
    }

    /// Where requests of route entry `entry` go: the agent's own configuration (0) or
    /// that of `fallback[entry - 1]`, with its transport and server fields.
    fn endpoint(&self, entry: usize) -> (&Config, &Transport, Dialect) {
        match entry
            .checked_sub(1)
            .and_then(|i| self.inner.fallback.get(i))
        {
            Some(f) => (&f.config, &f.transport, f.dialect),
            None => (
                &self.inner.config,
                &self.inner.transport,
                self.inner.dialect,
            ),
        }
    }

    /// The model requests of route entry `entry` ask for: the turn's `model` option or
    /// the agent's (0), else the fallback entry's.
    fn route_model(&self, turn: &Turn, entry: usize) -> String {
        match entry
            .checked_sub(1)
            .and_then(|i| self.inner.fallback.get(i))
        {
            Some(f) => f.config.model.clone(),
            None => turn
                .options()
                .model
                .clone()
                .unwrap_or_else(|| self.inner.config.model.clone()),
        }
    }

    /// The next request's body to the server of `config`, from the history as it is
    /// now; the messages before `portable_until` (a fallback entry's) without the blocks
    /// only the model that wrote them reads ([`message::portable`]).
    fn request_body(
        &self,
        config: &Config,
        model: &str,
        specs: &[ToolSpec],
        request_options: &RequestOptions<'_>,
        portable_until: Option<usize>,
    ) -> Result<Bytes> {
        let history = self.history_lock();
        let converted;
        let messages: &[Message] = match portable_until {
            Some(until) => {
                let until = until.min(history.len());
                let mut v = message::portable(&history[..until]);
                v.extend_from_slice(&history[until..]);
                converted = v;
                &converted
            }
            None => &history,
        };
        let params = RequestParams {
            model,
            system: config.system.as_deref(),
            max_tokens: config.max_tokens,
            temperature: config.temperature,
            tools: specs,
            messages,
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
            previous_response: stored
                .as_ref()
                .map(|(id, messages)| provider::PreviousResponse {
                    id,
                    messages: *messages,
                }),
            ..*request_options
        };
        let value = provider::request_body_with(config.provider, &params, &request_options);
        Ok(Bytes::from(serde_json::to_vec(&value).map_err(|e| {
            Error::internal(format!("cannot serialize the request: {e}"))
        })?))
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

    /// Calls one tool of the agent's MCP servers outside a turn, with `arguments` (a
    /// JSON object, as the model would give them): for an engine that runs each tool
    /// call as its own step (a turn paused with `defer_tools`, then resumed with the
    /// result as the call's answer). The servers are started if they were not. The
    /// agent's conversation is untouched, and no turn is reserved: calls may run
    /// concurrently with each other and with a turn.
    ///
    /// A failure of the tool itself (the server's error result, a timeout, a crashed
    /// server) is a result with `is_error`, as the model would read it in a turn.
    /// Errors: `config` when no MCP server of the agent has a tool of that name (or the
    /// arguments are not an object), a server that cannot start as in a turn, and
    /// `cancelled` once `cancel` is cancelled (the call is abandoned). The agent's
    /// secrets are redacted from the result and the errors, as in a turn's events.
    pub async fn call_mcp_tool(
        &self,
        name: &str,
        arguments: serde_json::Value,
        cancel: &CancellationToken,
    ) -> Result<tool::ToolOutput> {
        if !arguments.is_object() {
            return Err(Error::config(format!(
                "call_mcp_tool: the arguments of {name:?} must be a JSON object"
            )));
        }
        let secrets = self.inner.transport.secrets();
        let tools = self
            .mcp_tools(cancel)
            .await
            .map_err(|e| e.redact(secrets))?;
        let tool = tools
            .into_iter()
            .find(|t| t.spec().name == name)
            .ok_or_else(|| {
                Error::config(format!(
                    "call_mcp_tool: no MCP server of the agent has a tool named {name:?}"
                ))
            })?;
        // The call gets a child token: cancelling it abandons the call (the MCP client
        // sends the server its cancellation), and the token is gone with the call.
        let call = cancel.child_token();
        let run = tool.call(arguments, call.clone());
        tokio::select! {
            biased;
            _ = cancel.cancelled() => {
                call.cancel();
                Err(Error::cancelled())
            }
            out = run => {
                // What a tool echoed of the agent's secrets never leaves the agent.
                let mut out = out;
                secrets.redact_in_place(&mut out.output);
                for part in &mut out.parts {
                    if let Block::Text { text } = part {
                        secrets.redact_in_place(text);
                    }
                }
                Ok(out)
            }
        }
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
    ) -> Result<bool> {
        let Some(c) = &self.inner.config.compaction else {
            return Ok(false);
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
        Ok(done.changed)
    }

    fn complete(
        &self,
        mut summary: TurnSummary,
        turn: &Turn,
        sink: &mut TurnSink<'_>,
    ) -> Result<TurnSummary> {
        summary.model = self.route_model(turn, turn.route().entry);
        sink.emit(Event::MessageComplete {
            stop_reason: summary.stop_reason.clone(),
            usage: summary.usage,
            messages: summary.messages,
            text: summary.text.clone(),
            output: summary.output.clone(),
            deferred: summary.deferred.clone(),
            model: summary.model.clone(),
        })?;
        Ok(summary)
    }

    /// How each call of the pending step is answered: a call with a result, or deferred,
    /// is skipped; the rest run (or are refused: cut off, bad arguments, no such tool).
    fn plan_calls(&self, step: &PendingStep, mcp: &[Arc<dyn Tool>]) -> Vec<(CallRequest, Runner)> {
        let tools = self
            .inner
            .tools
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        step.assistant
            .content
            .iter()
            .filter_map(|b| match b {
                Block::ToolCall {
                    call_id,
                    name,
                    arguments,
                    arguments_raw,
                } => Some((call_id, name, arguments, arguments_raw)),
                _ => None,
            })
            .zip(&step.calls)
            .map(|((call_id, name, arguments, arguments_raw), planned)| {
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
                        crate::text::truncate(arguments_raw.as_deref().unwrap_or(""), 200)
                    )),
                };
                let runner = if planned.result.is_some() || planned.plan != Plan::Run {
                    Runner::Skip
                } else if step.cut_off.contains(call_id) {
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
                (
                    CallRequest {
                        call_id: call_id.clone(),
                        name: name.clone(),
                        arguments: parsed,
                        shown_arguments: shown,
                        shown_raw,
                    },
                    runner,
                )
            })
            .collect()
    }

    /// Checks that `checkpoint` can be resumed by this agent with `answers` (its limits,
    /// and every answer against the deferred calls), without resuming it. The pull
    /// adapter calls it before it starts the resumed turn, so the error comes from the
    /// call that would have started it. Whether the agent has the tools the pending
    /// calls need is checked by the resumed turn (an MCP server's tools are known only
    /// once it started).
    pub fn check_resume(&self, checkpoint: &Checkpoint, answers: &Answers) -> Result<()> {
        self.check_fallback(checkpoint)?;
        let options = checkpoint.options()?;
        let output = self.turn_output(&options)?;
        checkpoint
            .clone()
            .into_turn(self.limits(), output.is_some(), answers, &|_| ToolKind::Run)
            .map(drop)
    }

    /// A checkpoint taken after the turn went to a `fallback` entry resumes on that
    /// entry: this agent must have it, with the same model (a `config` error otherwise).
    fn check_fallback(&self, checkpoint: &Checkpoint) -> Result<()> {
        let Some((entry, model)) = checkpoint.fallback() else {
            return Ok(());
        };
        match self.inner.fallback.get(entry as usize - 1) {
            Some(f) if f.config.model == model => Ok(()),
            Some(f) => Err(Error::config(format!(
                "checkpoint: the turn went to fallback entry {entry} (model {model:?}); this \
                 agent's entry {entry} is model {:?}",
                f.config.model
            ))),
            None => Err(Error::config(format!(
                "checkpoint: the turn went to fallback entry {entry} (model {model:?}); this \
                 agent has {} fallback entries",
                self.inner.fallback.len()
            ))),
        }
    }

    /// Continues the turn `checkpoint` holds, with `answers` to its deferred calls:
    /// the push form of resuming, with the contract of [`Agent::run`] (the last event is
    /// `message_complete`, which reports the whole turn: usage and messages of every
    /// step, those before the checkpoint included).
    ///
    /// The agent's history becomes the checkpoint's conversation (whatever it held),
    /// and then grows as the turn goes on, so that afterwards it equals what an
    /// uninterrupted turn would have left. A model response the checkpoint holds is
    /// never requested again; a call with no result in it runs again (tools are
    /// at-least-once). A deferred call left unanswered stays deferred: the turn pauses
    /// again. An agent with other tools than the checkpoint's calls need, an answer to
    /// a call that is not deferred, an approval of an external call or a result for one
    /// that needs approval, or a checkpoint past this agent's `max_steps` or
    /// `output_retries`, is a `config` error, and the history is unchanged.
    pub async fn resume(
        &self,
        checkpoint: Checkpoint,
        answers: Answers,
        receiver: &mut dyn Receiver,
        control: &TurnControl,
    ) -> Result<TurnSummary> {
        self.reserve()?
            .resume(checkpoint, answers, receiver, control)
            .await
    }

    async fn resume_turn(
        &self,
        checkpoint: Checkpoint,
        answers: Answers,
        sink: &mut TurnSink<'_>,
        control: &TurnControl,
    ) -> Result<TurnSummary> {
        self.check_fallback(&checkpoint)?;
        let options = checkpoint.options()?;
        let output = self.turn_output(&options)?;
        let mcp = self.mcp_tools(&control.cancel).await?;
        let mut turn =
            checkpoint.into_turn(self.limits(), output.is_some(), &answers, &|name| {
                self.tool_kind(name, &mcp)
            })?;
        let conversation = turn.conversation();
        let max = self.inner.config.max_history_bytes;
        let bytes = message::history_json_len(&conversation);
        if bytes > max {
            return Err(Error::config(format!(
                "checkpoint: its conversation has {bytes} bytes of saved JSON, more than \
                 max_history_bytes ({max})"
            )));
        }
        *self.history_lock() = conversation;
        *self
            .inner
            .last_usage
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = None;
        self.inner.compaction_floor.store(0, Ordering::SeqCst);
        self.set_stored(None);
        self.drive(&mut turn, sink, control, output.as_ref(), mcp)
            .await
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
        let config = &agent.inner.config;
        if let Some(traceparent) = &options.traceparent {
            crate::telemetry::check_traceparent(traceparent, "traceparent")?;
        }
        let model = options.model.as_deref().unwrap_or(&config.model);
        let traceparent = options.traceparent.as_deref();
        sink.set_telemetry(TurnTelemetry::start(
            config,
            model,
            false,
            secrets,
            traceparent,
        ));
        let result = agent
            .turn(input, &mut sink, control, options)
            .instrument(span)
            .await;
        drop(self);
        let result = match result {
            // A failure caused by cancelling (a cut read, an aborted tool) is reported
            // as what it is: a cancellation.
            Err(e) if control.cancel.is_cancelled() && e.kind != ErrorKind::Cancelled => {
                debug!(error = %e, "failure after cancel reported as cancelled");
                Err(Error::cancelled())
            }
            Err(e) => Err(e.redact(secrets)),
            ok => ok,
        };
        if let Some(t) = sink.telemetry() {
            t.finish(result.as_ref().err());
        }
        result
    }

    /// Resumes a turn from a checkpoint on the reserved agent (see [`Agent::resume`]).
    pub async fn resume(
        self,
        checkpoint: Checkpoint,
        answers: Answers,
        receiver: &mut dyn Receiver,
        control: &TurnControl,
    ) -> Result<TurnSummary> {
        let agent = self.agent.clone();
        let span = info_span!("resume", provider = agent.inner.config.provider.as_str());
        let secrets = agent.inner.transport.secrets();
        let mut sink = TurnSink::new(receiver, control.cancel.clone(), secrets);
        let config = &agent.inner.config;
        let model = checkpoint.options().ok().and_then(|o| o.model);
        let model = model.as_deref().unwrap_or(&config.model);
        sink.set_telemetry(TurnTelemetry::start(config, model, true, secrets, None));
        let result = agent
            .resume_turn(checkpoint, answers, &mut sink, control)
            .instrument(span)
            .await;
        drop(self);
        let result = match result {
            Err(e) if control.cancel.is_cancelled() && e.kind != ErrorKind::Cancelled => {
                Err(Error::cancelled())
            }
            Err(e) => Err(e.redact(secrets)),
            ok => ok,
        };
        if let Some(t) = sink.telemetry() {
            t.finish(result.as_ref().err());
        }
        result
    }
}

/// One step whose tools are running: on drop — normal or because the turn's future was
/// dropped mid-await — the assistant message and every call's result (cancelled where
/// none arrived, a note where the call is deferred) enter the history together.
struct StepGuard<'a> {
    agent: &'a Agent,
    assistant: Option<Message>,
    calls: Vec<PlannedCall>,
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
        let outputs = self
            .outputs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        for (call, out) in self.calls.iter_mut().zip(outputs) {
            if call.result.is_none() {
                call.result = out;
            }
        }
        let results = step_results(&self.calls);
        let mut history = self.agent.history_lock();
        history.push(assistant);
        if !results.is_empty() {
            history.push(Message {
                role: Role::Tool,
                content: results,
            });
        }
    }
}

/// A turn's input as the user message it enters the history as.
fn user_message(input: Input) -> Message {
    let parts = input.into_parts();
    Message {
        role: Role::User,
        content: if parts.is_empty() {
            vec![Block::text("")]
        } else {
            parts
        },
    }
}
