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

use crate::config::Config;
use crate::error::{Error, ErrorKind, Result};
use crate::event::{Event, Receiver};
use crate::http::{Transport, TurnSink};
use crate::message::{self, Block, Message, Role, StopReason, Usage};
use crate::provider::{self, RequestParams, ToolSpec};
use crate::tool::{
    self, CallRequest, Dispatch, HostToolResults, Outputs, Runner, Tool, ToolOutput,
};

/// Options for one turn.
#[derive(Debug, Clone, Default)]
pub struct TurnOptions {
    /// Use this model for this turn only.
    pub model: Option<String>,
}

/// How a turn ended, when it ended well (the same data as `message_complete`).
#[derive(Debug, Clone, PartialEq)]
pub struct TurnSummary {
    pub stop_reason: StopReason,
    pub usage: Usage,
    pub messages: u32,
    pub text: String,
}

/// The outside handles of one turn: its cancellation token and where host-tool results
/// are submitted. Create one per turn and keep a clone to cancel or answer from anywhere.
#[derive(Debug, Clone, Default)]
pub struct TurnControl {
    pub cancel: CancellationToken,
    pub host: HostToolResults,
}

static NEXT_AGENT_ID: AtomicU64 = AtomicU64::new(1);

struct Inner {
    config: Config,
    transport: Transport,
    tools: RwLock<HashMap<String, Arc<dyn Tool>>>,
    history: Mutex<Vec<Message>>,
    busy: AtomicBool,
    id: u64,
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
    pub fn new(config: Config) -> Result<Agent> {
        config.validate()?;
        let transport = Transport::new(&config)?;
        Ok(Agent {
            inner: Arc::new(Inner {
                config,
                transport,
                tools: RwLock::new(HashMap::new()),
                history: Mutex::new(Vec::new()),
                busy: AtomicBool::new(false),
                id: NEXT_AGENT_ID.fetch_add(1, Ordering::Relaxed),
            }),
        })
    }

    /// An agent from the JSON configuration (see [`Config::from_json`]).
    pub fn from_json(json: &str) -> Result<Agent> {
        Agent::new(Config::from_json(json)?)
    }

    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// A number that identifies this agent (and its clones) within the process. The
    /// pull adapter uses it to keep all of an agent's turns on one worker thread, where
    /// its pooled connections live.
    pub fn id(&self) -> u64 {
        self.inner.id
    }

    /// Adds a Rust tool. Its name must not clash with another tool or a host tool.
    pub fn add_tool(&self, tool: impl Tool) -> Result<()> {
        let spec = tool.spec();
        if spec.name.is_empty() {
            return Err(Error::config("tool name: required"));
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
        let _slot = self.reserve()?;
        *self.history_lock() = messages;
        Ok(())
    }

    /// Restores a conversation saved with [`Agent::history_json`].
    pub fn load_history_json(&self, json: &str) -> Result<()> {
        self.set_history(message::history_from_json(json)?)
    }

    pub fn clear_history(&self) -> Result<()> {
        self.set_history(Vec::new())
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
        input: &str,
        receiver: &mut dyn Receiver,
        control: &TurnControl,
        options: TurnOptions,
    ) -> Result<TurnSummary> {
        self.reserve()?.run(input, receiver, control, options).await
    }

    async fn turn(
        &self,
        input: &str,
        sink: &mut TurnSink<'_>,
        control: &TurnControl,
        options: TurnOptions,
    ) -> Result<TurnSummary> {
        let config = &self.inner.config;
        let model = options.model.unwrap_or_else(|| config.model.clone());
        self.history_lock().push(Message::user(input));
        let specs = self.tool_specs();
        let mut usage = Usage::default();
        let mut message: u32 = 0;
        loop {
            if control.cancel.is_cancelled() {
                return Err(Error::cancelled());
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
                    max_completion_tokens: provider::uses_max_completion_tokens(&config.base_url),
                };
                let value = provider::request_body(config.provider, &params);
                Bytes::from(
                    serde_json::to_vec(&value).map_err(|e| {
                        Error::internal(format!("cannot serialize the request: {e}"))
                    })?,
                )
            };
            let decoded = self
                .inner
                .transport
                .stream_message(config, body, message, &control.cancel, sink)
                .await?;
            usage.add(&decoded.usage);
            let stop = decoded.stop_reason.clone();
            let text = decoded.message.text();
            message += 1;
            if stop == StopReason::MaxTokens {
                // The output was cut off by the limit: whatever tool calls it holds may be
                // clipped, and asking again would repeat the cut. Nothing runs, nothing is
                // announced; the calls get results saying so, which keeps the history
                // valid for the next turn.
                let results = unrun_results(&decoded.message);
                self.commit(decoded.message, results);
                return self.complete(stop, usage, message, text, sink);
            }
            let calls = self.plan_calls(&decoded.message, &decoded.cut_off_calls);
            if calls.is_empty() {
                self.commit(decoded.message, Vec::new());
                return self.complete(stop, usage, message, text, sink);
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
                host: &control.host,
                cancel: &control.cancel,
            };
            let failure = tool::dispatch(dispatch, &calls, &outputs, &mut |ev| sink.emit(ev)).await;
            // Every call gets its result in call order, even when the turn stops here,
            // so the history stays acceptable to the provider.
            step.commit();
            if let Some(err) = failure {
                return Err(err);
            }
            if message >= config.max_steps {
                return self.complete(StopReason::MaxSteps, usage, message, text, sink);
            }
        }
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
        sink: &mut TurnSink<'_>,
    ) -> Result<TurnSummary> {
        sink.emit(Event::MessageComplete {
            stop_reason: stop_reason.clone(),
            usage,
            messages,
            text: text.clone(),
        })?;
        Ok(TurnSummary {
            stop_reason,
            usage,
            messages,
            text,
        })
    }

    /// Decides how each tool call of a finished message is answered. Decided from the
    /// calls actually received, not from the stop reason.
    fn plan_calls(&self, msg: &Message, cut_off: &[String]) -> Vec<(CallRequest, Runner)> {
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
        input: &str,
        receiver: &mut dyn Receiver,
        control: &TurnControl,
        options: TurnOptions,
    ) -> Result<TurnSummary> {
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
                }
            })
            .collect();
        self.agent.commit(assistant, results);
    }
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
            }),
            _ => None,
        })
        .collect()
}
