//! Owns the agent: its configuration, its tools, its conversation, and the turn loop
//! (stream a message → dispatch its complete tool calls → append results → repeat).
//! Events go to a push [`Receiver`]; the pull adapter (`panto-pull`) runs this same loop
//! on a worker thread.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, RwLock};
use std::time::Duration;

use bytes::Bytes;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info_span, Instrument};

use crate::config::Config;
use crate::error::{Error, ErrorKind, Result};
use crate::event::{Event, Flow, Receiver};
use crate::http::Transport;
use crate::message::{self, Block, Message, Role, StopReason, Usage};
use crate::provider::{self, RequestParams, ToolSpec};
use crate::tool::{self, CallRequest, Dispatch, HostToolResults, Runner, Tool, ToolOutput};

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
    /// Where tool tasks run; the current runtime when `None`. The pull adapter points
    /// this at a shared multi-thread runtime so tools keep running while the loop's own
    /// thread waits for a slow consumer.
    pub tool_runtime: Option<tokio::runtime::Handle>,
}

thread_local! {
    static PARK_HOOK: std::cell::Cell<Option<fn()>> = const { std::cell::Cell::new(None) };
}

/// Registers `hook` to run on the calling thread each time an agent's runtime
/// ([`Agent::runtime`]) driven by this thread is about to block it (nothing left to do
/// until the network, a timer or a tool wakes it). A receiver that buffers events flushes
/// them there: batches then follow the network's own pace without delaying any event
/// past the moment the loop would wait. `None` removes it.
pub fn set_park_hook(hook: Option<fn()>) {
    PARK_HOOK.with(|h| h.set(hook));
}

fn run_park_hook() {
    if let Some(hook) = PARK_HOOK.with(|h| h.get()) {
        hook();
    }
}

/// An agent's own single-threaded runtime, shut down without blocking when the agent
/// goes (an agent may be dropped inside async code, where a blocking shutdown panics).
struct AgentRuntime(Option<tokio::runtime::Runtime>);

impl Drop for AgentRuntime {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

struct Inner {
    config: Config,
    transport: Transport,
    tools: RwLock<HashMap<String, Arc<dyn Tool>>>,
    history: Mutex<Vec<Message>>,
    busy: AtomicBool,
    runtime: OnceLock<std::result::Result<AgentRuntime, String>>,
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

/// The right to run a turn on an agent (one at a time); released when dropped.
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
                runtime: OnceLock::new(),
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

    /// The agent's own single-threaded runtime, created on first use, for callers that
    /// drive turns from plain threads (the pull adapter, the bindings). HTTP connections
    /// live on the runtime that opened them, so driving every turn of this agent on this
    /// runtime keeps its connections pooled between turns, and keeps a turn's network
    /// reads on the thread that drives it (no cross-thread wake-up per chunk).
    pub fn runtime(&self) -> Result<&tokio::runtime::Runtime> {
        let rt = self.inner.runtime.get_or_init(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .on_thread_park(run_park_hook)
                .build()
                .map(|rt| AgentRuntime(Some(rt)))
                .map_err(|e| e.to_string())
        });
        match rt {
            Ok(AgentRuntime(Some(rt))) => Ok(rt),
            Ok(AgentRuntime(None)) => Err(Error::internal("the agent's runtime is shut down")),
            Err(e) => Err(Error::internal(format!(
                "cannot start the agent's runtime: {e}"
            ))),
        }
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
    pub async fn run(
        &self,
        input: &str,
        receiver: &mut dyn Receiver,
        control: &TurnControl,
        options: TurnOptions,
    ) -> Result<TurnSummary> {
        let slot = self.reserve()?;
        self.run_reserved(slot, input, receiver, control, options)
            .await
    }

    /// [`Agent::run`] with a slot already reserved (the pull adapter reserves
    /// synchronously, so `busy` is reported before any thread starts).
    pub async fn run_reserved(
        &self,
        slot: TurnSlot,
        input: &str,
        receiver: &mut dyn Receiver,
        control: &TurnControl,
        options: TurnOptions,
    ) -> Result<TurnSummary> {
        if !Arc::ptr_eq(&slot.agent.inner, &self.inner) {
            return Err(Error::internal("the turn slot belongs to another agent"));
        }
        let span = info_span!("turn", provider = self.inner.config.provider.as_str());
        let cancel = control.cancel.clone();
        let mut emit = |ev: Event| -> Result<()> {
            match receiver.on_event(ev) {
                Flow::Continue => Ok(()),
                Flow::Stop => {
                    cancel.cancel();
                    Err(Error::cancelled())
                }
            }
        };
        let result = self
            .turn(input, &mut emit, control, options)
            .instrument(span)
            .await;
        drop(slot);
        match result {
            // A failure caused by cancelling (a cut read, an aborted tool) is reported
            // as what it is: a cancellation.
            Err(e) if control.cancel.is_cancelled() && e.kind != ErrorKind::Cancelled => {
                debug!(error = %e, "failure after cancel reported as cancelled");
                Err(Error::cancelled())
            }
            other => other,
        }
    }

    async fn turn(
        &self,
        input: &str,
        emit: &mut dyn FnMut(Event) -> Result<()>,
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
                .stream_message(config, body, message, &control.cancel, emit)
                .await?;
            usage.add(&decoded.usage);
            let calls = self.plan_calls(&decoded.message, &decoded.cut_off_calls);
            let stop = decoded.stop_reason.clone();
            let text = decoded.message.text();
            // Only now, complete, does the assistant message enter the history.
            self.history_lock().push(decoded.message);
            message += 1;
            if calls.is_empty() {
                return self.complete(stop, usage, message, text, emit);
            }
            let dispatch = Dispatch {
                message: message - 1,
                concurrency: config.tool_concurrency,
                timeout: Duration::from_millis(config.tool_timeout_ms),
                host: &control.host,
                cancel: &control.cancel,
                runtime: control.tool_runtime.as_ref(),
            };
            let (outputs, failure) = tool::dispatch(dispatch, &calls, emit).await;
            let results = calls
                .iter()
                .zip(outputs)
                .map(|((req, _), out)| {
                    let out =
                        out.unwrap_or_else(|| ToolOutput::error("the tool call was cancelled"));
                    Block::ToolResult {
                        call_id: req.call_id.clone(),
                        name: req.name.clone(),
                        output: out.output,
                        is_error: out.is_error,
                    }
                })
                .collect();
            // Every call gets its result in call order, even when the turn stops here,
            // so the history stays acceptable to the provider.
            self.history_lock().push(Message {
                role: Role::Tool,
                content: results,
            });
            if let Some(err) = failure {
                return Err(err);
            }
            if message >= config.max_steps {
                return self.complete(StopReason::MaxSteps, usage, message, text, emit);
            }
        }
    }

    fn complete(
        &self,
        stop_reason: StopReason,
        usage: Usage,
        messages: u32,
        text: String,
        emit: &mut dyn FnMut(Event) -> Result<()>,
    ) -> Result<TurnSummary> {
        emit(Event::MessageComplete {
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
                    let shown = arguments.clone().unwrap_or_else(|| {
                        Value::String(arguments_raw.clone().unwrap_or_default())
                    });
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
                        },
                        runner,
                    ))
                }
                _ => None,
            })
            .collect()
    }
}
