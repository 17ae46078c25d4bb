//! Owns the turn as a value: an I/O-free state machine (no async, no clock, no network,
//! no tool execution) that holds everything a turn needs between its steps — the
//! conversation with this turn's input, the step count, the usage so far, the
//! output-repair attempts, the turn's options, the calls planned and the results
//! received, the deferred calls, the steering messages queued — says what to do next
//! (`Next`) and takes each outcome back. It also owns the turn's serialized form,
//! [`Checkpoint`], the answers to deferred calls ([`Answers`]) and the steering queue a
//! [`TurnControl`](crate::TurnControl) shares with its turn. It does not send requests
//! or run tools: `agent` drives it, and so does every binding through `agent`.
//!
//! ```text
//!             ┌──────────── Next::Request ◄───────────────┐ (steering delivered here)
//!  input ──►  │ on_response(message) ─► Next::RunCalls ─► on_results(outputs)
//!             │        │                      │                 │
//!             │        ▼                      ▼                 ▼
//!             │  Next::Done / Err       Next::Pause(deferred)   max_steps: Done / Err
//! ```

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::agent::{TurnOptions, TurnSummary};
use crate::error::{Error, ErrorKind, Result};
use crate::event::Event;
use crate::media::Input;
use crate::message::{self, Block, Message, Role, StopReason, Usage};
use crate::output::{self, JsonText, OutputSpec, Rejection, Repair, WireMode};
use crate::provider::DecodedMessage;
use crate::secret::Secrets;
use crate::tool::ToolOutput;

/// The version of the checkpoint document this build writes, and the newest it reads.
pub const CHECKPOINT_VERSION: u32 = 1;

/// The largest checkpoint document accepted, in bytes (64 MiB); a longer one is refused
/// before it is parsed.
pub const MAX_CHECKPOINT_BYTES: usize = 64 << 20;

/// Why a call waits for an answer from outside the turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeferReason {
    /// The tool needs approval before it runs ([`Tool::needs_approval`](crate::Tool::needs_approval)).
    Approval,
    /// The tool runs outside panto: the answer is its result.
    External,
    /// The turn defers every call (`TurnOptions::defer_tools`).
    Deferred,
}

/// A call the turn paused for (`message_complete.deferred`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeferredCall {
    /// The call's id.
    pub call_id: String,
    /// The tool's name.
    pub name: String,
    /// The parsed arguments object.
    pub arguments: Value,
    /// Why it waits: `approval`, `external` or `deferred`.
    pub reason: DeferReason,
}

/// `message_complete.deferred` in the vocabulary: a JSON array of
/// `{call_id, name, arguments, reason}`, absent when empty.
impl crate::vocab::Describe for Vec<DeferredCall> {
    const TYPE: &'static str = "deferred_calls";
    const OPTIONAL: bool = true;
}

/// How a deferred call is answered on resume.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// Run it (a call that needed approval, or one the turn deferred).
    Approve,
    /// Do not run it: the model reads an error result saying it was rejected, and why.
    Reject(String),
    /// Its result, from outside panto (an external or deferred call).
    Result(ToolOutput),
}

/// The answers to a paused turn's deferred calls, by call id.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Answers {
    answers: HashMap<String, Answer>,
}

impl Answers {
    /// No answers (a resume that only continues).
    pub fn new() -> Answers {
        Answers::default()
    }
    /// Approves `call_id`.
    pub fn approve(mut self, call_id: impl Into<String>) -> Answers {
        self.answers.insert(call_id.into(), Answer::Approve);
        self
    }
    /// Rejects `call_id` with `reason` (the model reads it).
    pub fn reject(mut self, call_id: impl Into<String>, reason: impl Into<String>) -> Answers {
        self.answers
            .insert(call_id.into(), Answer::Reject(reason.into()));
        self
    }
    /// Gives `call_id`'s result.
    pub fn result(mut self, call_id: impl Into<String>, output: ToolOutput) -> Answers {
        self.answers.insert(call_id.into(), Answer::Result(output));
        self
    }
    /// The answer to `call_id`, if one was given.
    pub fn get(&self, call_id: &str) -> Option<&Answer> {
        self.answers.get(call_id)
    }
    /// True when no call is answered.
    pub fn is_empty(&self) -> bool {
        self.answers.is_empty()
    }

    /// Parses the JSON form the bindings pass: an object by call id, each value one of
    /// `{"approve": true}`, `{"reject": "<reason>"}`, or `{"output": "<text>",
    /// "is_error"?: bool, "parts"?: [<text and image blocks>]}`. Anything else is a
    /// `config` error naming the call.
    pub fn from_json(json: &str) -> Result<Answers> {
        let v: Value = serde_json::from_str(json)
            .map_err(|e| Error::config(format!("answers: not valid JSON: {e}")))?;
        let obj = v
            .as_object()
            .ok_or_else(|| Error::config("answers: must be a JSON object by call id"))?;
        let mut answers = Answers::new();
        for (id, a) in obj {
            let bad = |why: &str| Error::config(format!("answers.{id}: {why}"));
            let a = a.as_object().ok_or_else(|| {
                bad("must be {\"approve\": true}, {\"reject\": reason} or {\"output\": text}")
            })?;
            let answer = if let Some(approve) = a.get("approve") {
                if a.len() != 1 || approve != &Value::Bool(true) {
                    return Err(bad("\"approve\" must be true and alone"));
                }
                Answer::Approve
            } else if let Some(reason) = a.get("reject") {
                let reason = reason
                    .as_str()
                    .filter(|_| a.len() == 1)
                    .ok_or_else(|| bad("\"reject\" must be a string (the reason) and alone"))?;
                Answer::Reject(reason.to_owned())
            } else if let Some(out) = a.get("output") {
                for k in a.keys() {
                    if !matches!(k.as_str(), "output" | "is_error" | "parts") {
                        return Err(bad(&format!("unknown key {k:?}")));
                    }
                }
                let text = out
                    .as_str()
                    .ok_or_else(|| bad("\"output\" must be a string"))?;
                let is_error = match a.get("is_error") {
                    None | Some(Value::Null) => false,
                    Some(Value::Bool(b)) => *b,
                    Some(_) => return Err(bad("\"is_error\" must be a boolean")),
                };
                match a.get("parts") {
                    None | Some(Value::Null) => Answer::Result(ToolOutput {
                        output: text.to_owned(),
                        is_error,
                        parts: Vec::new(),
                    }),
                    Some(parts) => {
                        let parts: Vec<Block> = serde_json::from_value(parts.clone())
                            .map_err(|e| bad(&format!("\"parts\": {e}")))?;
                        Answer::Result(ToolOutput::with_parts(parts, is_error))
                    }
                }
            } else {
                return Err(bad("must hold \"approve\", \"reject\" or \"output\""));
            };
            answers.answers.insert(id.clone(), answer);
        }
        Ok(answers)
    }
}

/// How a call of the pending step is answered.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Plan {
    /// It runs (or is refused by the dispatch: an unknown tool, bad arguments, a cut-off
    /// call — exactly as before this module existed).
    Run,
    /// It waits for an answer from outside.
    Deferred(DeferReason),
}

/// One tool call of the pending step.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PlannedCall {
    pub call_id: String,
    pub name: String,
    pub plan: Plan,
    /// The result, once it arrived (or was given on resume).
    pub result: Option<ToolOutput>,
}

/// An assistant message whose tool calls are being answered.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PendingStep {
    pub assistant: Message,
    pub calls: Vec<PlannedCall>,
    /// Calls the provider never closed (never run).
    pub cut_off: Vec<String>,
    /// The step entered the history (its deferred calls with a note): the turn is
    /// paused on it.
    pub settled: bool,
}

/// What the tool set says about a tool name (the machine knows no tools).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ToolKind {
    /// No such tool: the dispatch refuses the call.
    Unknown,
    /// A tool panto runs (Rust, MCP, host).
    Run,
    /// A tool that needs approval first.
    Approval,
    /// A tool that runs outside panto.
    External,
}

/// What the driver does next.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Next {
    /// Send a request built from the conversation.
    Request,
    /// Run the pending step's calls that have no result and are not deferred.
    RunCalls,
    /// Pause: these calls wait for answers.
    Pause(Vec<DeferredCall>),
    /// The turn is over.
    Done(TurnSummary),
}

/// What applying an outcome asks of the driver, in this order: append `commit` to the
/// history, then emit `event`, then fail with `error` if there is one.
#[derive(Debug, Default)]
pub(crate) struct Applied {
    pub commit: Vec<Message>,
    pub event: Option<Event>,
    pub error: Option<Error>,
}

/// The limits of the agent that drives the turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    pub max_steps: u32,
    pub output_retries: u32,
    /// Most tool calls in one turn (`max_tool_calls`; a turn's option replaces it).
    pub max_tool_calls: Option<u32>,
}

/// Which model of the agent a turn's requests go to: its own, or an entry of its
/// `fallback` list after the models before it failed (`provider_fallback`). A turn stays
/// on the entry that answered until it ends; the next turn starts on the agent's own
/// model again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Route {
    /// 0: the agent's own model; `n`: `fallback[n - 1]`.
    pub entry: usize,
    /// For a fallback entry: the messages of the conversation before this index were
    /// written for an earlier model, and are sent to this one without the blocks only
    /// that model can read ([`message::portable`]).
    pub since: usize,
}

/// The end of a turn, kept until it is reported.
#[derive(Debug, Clone, PartialEq)]
struct Finished {
    stop_reason: StopReason,
    text: String,
    output: Option<JsonText>,
}

/// The turn between two steps.
#[derive(Debug, Clone)]
pub(crate) struct Turn {
    limits: Limits,
    options: TurnOptions,
    /// The conversation before what this turn added since its last rebase (shared, not
    /// copied per step).
    base: Arc<Vec<Message>>,
    /// What the turn added to the conversation after `base`.
    added: Vec<Message>,
    steps: u32,
    /// Tool calls the model asked for so far in this turn (`max_tool_calls`).
    tool_calls: u32,
    usage: Usage,
    repairs: u32,
    text: String,
    pending: Option<PendingStep>,
    finished: Option<Finished>,
    steering: VecDeque<Input>,
    /// Whether an output schema applies to the turn.
    has_output: bool,
    /// The provider refused the first request as malformed: the driver takes the
    /// input back out of the history.
    input_refused: bool,
    /// Calls of the pending step answered on resume with a result (rejected, or an
    /// external or deferred call's result): the resumed stream reports each with a
    /// `tool_result`, as it does an approved call that runs. Not part of a checkpoint.
    answered: Vec<String>,
    /// The model the turn's requests go to.
    route: Route,
}

/// The note a deferred call's result holds in the history while the turn is paused.
pub(crate) fn awaiting_note(reason: DeferReason) -> String {
    let why = match reason {
        DeferReason::Approval => "it needs approval",
        DeferReason::External => "it runs outside panto",
        DeferReason::Deferred => "the turn defers its tool calls",
    };
    format!("not run yet: {why}; the turn is paused until it is answered")
}

/// The results of a step's calls in call order, as they enter the history: the result
/// received, else `missing(call)` (cancelled, or awaiting an answer).
pub(crate) fn step_results(calls: &[PlannedCall]) -> Vec<Block> {
    calls
        .iter()
        .map(|c| {
            let out = c.result.clone().unwrap_or_else(|| match c.plan {
                Plan::Deferred(reason) => ToolOutput::error(awaiting_note(reason)),
                Plan::Run => ToolOutput::error("the tool call was cancelled"),
            });
            Block::ToolResult {
                call_id: c.call_id.clone(),
                name: c.name.clone(),
                output: out.output,
                is_error: out.is_error,
                parts: out.parts,
            }
        })
        .collect()
}

fn step_messages(step: &PendingStep) -> Vec<Message> {
    let mut v = vec![step.assistant.clone()];
    let results = step_results(&step.calls);
    if !results.is_empty() {
        v.push(Message {
            role: Role::Tool,
            content: results,
        });
    }
    v
}

impl Turn {
    /// A new turn over `history`, whose last message is the turn's input.
    pub(crate) fn new(
        limits: Limits,
        options: TurnOptions,
        has_output: bool,
        history: Arc<Vec<Message>>,
    ) -> Turn {
        Turn {
            has_output,
            input_refused: false,
            answered: Vec::new(),
            limits,
            options,
            base: history,
            added: Vec::new(),
            steps: 0,
            tool_calls: 0,
            usage: Usage::TOTAL,
            repairs: 0,
            text: String::new(),
            pending: None,
            finished: None,
            steering: VecDeque::new(),
            route: Route::default(),
        }
    }

    /// Which model the turn's next request goes to.
    pub(crate) fn route(&self) -> Route {
        self.route
    }

    /// The request to the current model failed in a way another model may not
    /// (`provider_fallback`): the step, and the rest of the turn, go to `entry` (an
    /// index of [`Route::entry`]), which reads the conversation so far without the
    /// blocks only the earlier models can read.
    pub(crate) fn on_fallback(&mut self, entry: usize) {
        self.route = Route {
            entry,
            since: self.base.len() + self.added.len(),
        };
    }

    /// A request failed. A `bad_request` for the turn's first request means the
    /// provider refuses its input: it would be refused again, and every later turn with
    /// it, so the input leaves the history.
    pub(crate) fn on_request_error(&mut self, e: &Error) {
        self.input_refused =
            self.steps == 0 && self.pending.is_none() && e.kind == ErrorKind::BadRequest;
    }

    /// Whether the input must leave the history (see [`Turn::on_request_error`]).
    pub(crate) fn input_refused(&self) -> bool {
        self.input_refused
    }

    /// The turn's bound on tool calls: its option, else the agent's.
    fn max_tool_calls(&self) -> Option<u32> {
        self.options.max_tool_calls.or(self.limits.max_tool_calls)
    }

    /// The options of the turn.
    pub(crate) fn options(&self) -> &TurnOptions {
        &self.options
    }

    /// Responses so far (the index the next assistant message gets).
    pub(crate) fn steps(&self) -> u32 {
        self.steps
    }

    /// The pending step, while its calls are answered.
    /// The pending step's calls answered on resume (rejected, or given a result), with
    /// their results, in call order; each is returned once.
    pub(crate) fn take_answered(&mut self) -> Vec<(PlannedCall, ToolOutput)> {
        let answered = std::mem::take(&mut self.answered);
        let Some(step) = &self.pending else {
            return Vec::new();
        };
        step.calls
            .iter()
            .filter(|c| answered.contains(&c.call_id))
            .filter_map(|c| Some((c.clone(), c.result.clone()?)))
            .collect()
    }

    pub(crate) fn pending(&self) -> Option<&PendingStep> {
        self.pending.as_ref()
    }

    /// The conversation as the turn knows it (after a compaction: the compacted one).
    pub(crate) fn conversation(&self) -> Vec<Message> {
        let mut v = Vec::with_capacity(self.base.len() + self.added.len());
        v.extend(self.base.iter().cloned());
        v.extend(self.added.iter().cloned());
        v
    }

    /// The history was replaced (compaction): it is the turn's conversation from now on.
    pub(crate) fn rebase(&mut self, history: Arc<Vec<Message>>) {
        // Compaction keeps the last messages as they were: those the fallback model
        // wrote or read are still the last ones.
        let written_since = (self.base.len() + self.added.len()).saturating_sub(self.route.since);
        self.route.since = history.len().saturating_sub(written_since);
        self.base = history;
        self.added.clear();
    }

    /// Queues a steering message, delivered at the next step boundary.
    pub(crate) fn steer(&mut self, input: Input) {
        self.steering.push_back(input);
    }

    /// The steering messages not delivered (the turn is ending).
    pub(crate) fn take_steering(&mut self) -> Vec<Input> {
        self.steering.drain(..).collect()
    }

    /// At a step boundary: the queued steering messages enter the conversation if a
    /// request may follow (no calls outstanding, `max_steps` not reached); a turn that
    /// would have ended goes on to answer them. Returns the messages to append.
    pub(crate) fn deliver_steering(&mut self) -> Vec<Message> {
        if self.steering.is_empty() || self.pending.is_some() || self.steps >= self.limits.max_steps
        {
            return Vec::new();
        }
        if let Some(f) = &self.finished {
            if matches!(f.stop_reason, StopReason::MaxTokens | StopReason::MaxSteps) {
                return Vec::new();
            }
            self.finished = None;
        }
        let delivered: Vec<Message> = self
            .steering
            .drain(..)
            .map(|input| {
                let parts = input.into_parts();
                Message {
                    role: Role::User,
                    content: if parts.is_empty() {
                        vec![Block::text("")]
                    } else {
                        parts
                    },
                }
            })
            .collect();
        self.added.extend(delivered.iter().cloned());
        delivered
    }

    /// What to do next.
    pub(crate) fn next(&self) -> Next {
        if let Some(f) = &self.finished {
            return Next::Done(self.summary(
                f.stop_reason.clone(),
                f.text.clone(),
                f.output.clone(),
                Vec::new(),
            ));
        }
        if let Some(step) = &self.pending {
            // Every step goes through the dispatch once, even with nothing to run
            // (all deferred, or all answered on resume): that is where it enters the
            // history.
            if !step.settled
                || step
                    .calls
                    .iter()
                    .any(|c| c.result.is_none() && c.plan == Plan::Run)
            {
                return Next::RunCalls;
            }
            return Next::Pause(self.deferred());
        }
        Next::Request
    }

    /// The summary of a turn that ends (or pauses) now.
    pub(crate) fn summary(
        &self,
        stop_reason: StopReason,
        text: String,
        output: Option<JsonText>,
        deferred: Vec<DeferredCall>,
    ) -> TurnSummary {
        TurnSummary {
            stop_reason,
            usage: self.usage,
            messages: self.steps,
            text,
            output,
            deferred,
            // The driver names it (it knows the models of the route).
            model: String::new(),
        }
    }

    /// The summary of a paused turn.
    pub(crate) fn paused(&self, deferred: Vec<DeferredCall>) -> TurnSummary {
        self.summary(StopReason::Deferred, self.text.clone(), None, deferred)
    }

    /// The calls the pending step waits for, with their arguments.
    fn deferred(&self) -> Vec<DeferredCall> {
        let Some(step) = &self.pending else {
            return Vec::new();
        };
        step.calls
            .iter()
            .filter_map(|c| match (&c.plan, &c.result) {
                (Plan::Deferred(reason), None) => Some(DeferredCall {
                    call_id: c.call_id.clone(),
                    name: c.name.clone(),
                    arguments: call_arguments(&step.assistant, &c.call_id),
                    reason: *reason,
                }),
                _ => None,
            })
            .collect()
    }

    /// Takes a complete response. `output` is the turn's output schema; `kind` what the
    /// tool set says about a name.
    pub(crate) fn on_response(
        &mut self,
        decoded: DecodedMessage,
        output: Option<&OutputSpec>,
        kind: &dyn Fn(&str) -> ToolKind,
    ) -> Applied {
        self.usage.add(&decoded.usage);
        let stop = decoded.stop_reason.clone();
        let text = decoded.message.text();
        self.steps += 1;
        self.text = text.clone();
        let msg = decoded.message;
        let mut applied = Applied::default();
        if stop == StopReason::MaxTokens {
            // The output was cut off by the limit: whatever tool calls it holds may be
            // clipped, and asking again would repeat the cut. Nothing runs, nothing is
            // announced; the calls get results saying so, which keeps the history valid
            // for the next turn. A structured answer cut there is never parsed.
            let raw = output.map(|spec| answer_text(&msg, spec));
            let results = unrun_results(&msg);
            self.commit(&mut applied, msg, results);
            if let Some(raw) = raw {
                applied.error = Some(
                    Error::new(
                        ErrorKind::OutputTruncated,
                        format!(
                            "the answer stopped at the output limit (max_tokens) after {} \
                             bytes, before the structured output was complete",
                            raw.len()
                        ),
                    )
                    .with_output(Some(raw)),
                );
            } else {
                self.finish(stop, text, None);
            }
            return applied;
        }
        // `output_mode: tool`: the forced call is the answer; it is never dispatched.
        let answered = output
            .filter(|spec| spec.mode() == WireMode::Tool)
            .is_some_and(|spec| output_call(&msg, spec.name()).is_some());
        let calls = if answered {
            Vec::new()
        } else {
            self.plan(&msg, &decoded.cut_off_calls, kind)
        };
        if !calls.is_empty() {
            let asked = u32::try_from(calls.len()).unwrap_or(u32::MAX);
            let total = self.tool_calls.saturating_add(asked);
            if let Some(max) = self.max_tool_calls().filter(|max| total > *max) {
                // Nothing of this step runs: its calls get results saying why, which
                // keeps the history valid for the next turn.
                let results = refused_results(&msg, max);
                self.commit(&mut applied, msg, results);
                applied.error = Some(Error::new(
                    ErrorKind::Tool,
                    format!(
                        "the model asked for {asked} more tool call(s) after {}, past the \
                         turn's max_tool_calls ({max}); none of them was run",
                        self.tool_calls
                    ),
                ));
                return applied;
            }
            self.tool_calls = total;
            self.pending = Some(PendingStep {
                assistant: msg,
                calls,
                cut_off: decoded.cut_off_calls,
                settled: false,
            });
            return applied;
        }
        let Some(spec) = output else {
            self.commit(&mut applied, msg, Vec::new());
            self.finish(stop, text, None);
            return applied;
        };
        let raw = answer_text(&msg, spec);
        if matches!(stop, StopReason::Refusal | StopReason::ContentFilter) {
            let results = answer_results(&msg, spec, "refused", true);
            self.commit(&mut applied, msg, results);
            applied.error = Some(
                Error::new(
                    ErrorKind::OutputRefused,
                    format!(
                        "the model refused to answer (stop reason {}): {}",
                        stop.as_string(),
                        crate::text::one_line(&raw, 500)
                    ),
                )
                .with_output(Some(raw)),
            );
            return applied;
        }
        match spec.accept(&raw) {
            Ok(value) => {
                let results = answer_results(&msg, spec, "accepted", false);
                self.commit(&mut applied, msg, results);
                // A forced tool call ended the message; the turn ended with an answer.
                let stop = if answered { StopReason::EndTurn } else { stop };
                self.finish(stop, raw, Some(value));
            }
            Err(Rejection(problem, repair)) => {
                let prompt = output::repair_prompt(&problem);
                // A problem a repair cannot fix (an answer nested past the depth panto
                // reads) fails at once, with no useless repair request.
                let can_repair = repair == Repair::Possible
                    && self.repairs < self.limits.output_retries
                    && self.steps < self.limits.max_steps;
                let results = answer_results(&msg, spec, &prompt, true);
                self.commit(&mut applied, msg, results);
                if !can_repair {
                    let message = match repair {
                        Repair::Possible => format!(
                            "the answer did not match the output schema after {} repair \
                             request(s): {problem}",
                            self.repairs
                        ),
                        Repair::Useless => problem,
                    };
                    applied.error =
                        Some(Error::new(ErrorKind::OutputInvalid, message).with_output(Some(raw)));
                    return applied;
                }
                self.repairs += 1;
                // In tool mode the error went back as the call's result; else it is a
                // user message after the answer.
                if !answered {
                    let user = Message::user(prompt);
                    self.added.push(user.clone());
                    applied.commit.push(user);
                }
                applied.event = Some(Event::OutputRepair {
                    message: self.steps - 1,
                    attempt: self.repairs,
                    max_attempts: self.limits.output_retries,
                    error: problem,
                });
            }
        }
        applied
    }

    /// Adds the usage of requests made for the turn's tools (an MCP server's sampling
    /// requests) to the turn's.
    pub(crate) fn add_usage(&mut self, usage: &Usage) {
        self.usage.add(usage);
    }

    /// Takes the pending step's results (call order; `None`: none arrived) once every
    /// call that runs has finished. The step enters the history whole — with a note for
    /// each call still deferred, which keeps the history valid while the turn is
    /// paused; the turn itself keeps the step until its deferred calls are answered.
    pub(crate) fn on_results(&mut self, outputs: Vec<Option<ToolOutput>>) -> Applied {
        let mut applied = Applied::default();
        let Some(step) = &mut self.pending else {
            return applied;
        };
        for (call, out) in step.calls.iter_mut().zip(outputs) {
            if call.result.is_none() {
                call.result = out;
            }
        }
        applied.commit = step_messages(step);
        let waiting = step
            .calls
            .iter()
            .any(|c| c.result.is_none() && matches!(c.plan, Plan::Deferred(_)));
        if waiting {
            step.settled = true;
            return applied;
        }
        // Calls that should have run and have no result were cancelled: the driver
        // fails the turn; the step is complete either way.
        self.added.extend(applied.commit.iter().cloned());
        self.pending = None;
        if self.steps >= self.limits.max_steps {
            if self.has_output {
                applied.error = Some(
                    Error::new(
                        ErrorKind::OutputInvalid,
                        format!(
                            "the turn reached max_steps ({}) before a final answer to parse",
                            self.limits.max_steps
                        ),
                    )
                    .with_output(Some(self.text.clone())),
                );
            } else {
                self.finish(StopReason::MaxSteps, self.text.clone(), None);
            }
        }
        applied
    }

    fn finish(&mut self, stop_reason: StopReason, text: String, output: Option<JsonText>) {
        self.finished = Some(Finished {
            stop_reason,
            text,
            output,
        });
    }

    fn commit(&mut self, applied: &mut Applied, assistant: Message, results: Vec<Block>) {
        self.added.push(assistant.clone());
        applied.commit.push(assistant);
        if !results.is_empty() {
            let tool = Message {
                role: Role::Tool,
                content: results,
            };
            self.added.push(tool.clone());
            applied.commit.push(tool);
        }
    }

    /// Decides how each tool call of a finished message is answered (from the calls
    /// actually received, not from the stop reason).
    fn plan(
        &self,
        msg: &Message,
        cut_off: &[String],
        kind: &dyn Fn(&str) -> ToolKind,
    ) -> Vec<PlannedCall> {
        msg.content
            .iter()
            .filter_map(|b| match b {
                Block::ToolCall {
                    call_id,
                    name,
                    arguments,
                    ..
                } => {
                    let runnable = !cut_off.contains(call_id)
                        && arguments.as_ref().is_some_and(Value::is_object);
                    let plan = match (runnable, kind(name)) {
                        (false, _) | (_, ToolKind::Unknown) => Plan::Run,
                        (true, ToolKind::External) => Plan::Deferred(DeferReason::External),
                        (true, ToolKind::Approval) => Plan::Deferred(DeferReason::Approval),
                        (true, ToolKind::Run) if self.options.defer_tools => {
                            Plan::Deferred(DeferReason::Deferred)
                        }
                        (true, ToolKind::Run) => Plan::Run,
                    };
                    Some(PlannedCall {
                        call_id: call_id.clone(),
                        name: name.clone(),
                        plan,
                        result: None,
                    })
                }
                _ => None,
            })
            .collect()
    }
}

/// The arguments object of a call of `msg`.
fn call_arguments(msg: &Message, id: &str) -> Value {
    msg.content
        .iter()
        .find_map(|b| match b {
            Block::ToolCall {
                call_id, arguments, ..
            } if call_id == id => arguments.clone(),
            _ => None,
        })
        .unwrap_or(Value::Null)
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

/// The results of a message's calls when the turn's `max_tool_calls` refuses them.
fn refused_results(msg: &Message, max: u32) -> Vec<Block> {
    msg.content
        .iter()
        .filter_map(|b| match b {
            Block::ToolCall { call_id, name, .. } => Some(Block::ToolResult {
                call_id: call_id.clone(),
                name: name.clone(),
                output: format!("not run: the turn reached its limit of {max} tool calls"),
                is_error: true,
                parts: Vec::new(),
            }),
            _ => None,
        })
        .collect()
}

/// The turn at its latest step boundary, as the checkpoint cell keeps it: the state
/// plus, while calls run, the slots their results land in (read when a checkpoint is
/// asked for, so a result counts from the moment it arrived).
#[derive(Debug, Clone)]
pub(crate) struct Snapshot {
    turn: Turn,
    outputs: Option<crate::tool::Outputs>,
    secrets: Secrets,
    /// The model of the fallback entry the turn is on (empty on the agent's own).
    fallback_model: String,
}

impl Snapshot {
    /// The same snapshot, reading results from `outputs` (call order of the pending
    /// step) and redacting `secrets` when serialized.
    pub(crate) fn with(
        mut self,
        outputs: Option<crate::tool::Outputs>,
        secrets: Secrets,
    ) -> Snapshot {
        self.outputs = outputs;
        self.secrets = secrets;
        self
    }

    /// The same snapshot, naming the model of the fallback entry the turn is on.
    pub(crate) fn on_model(mut self, model: &str) -> Snapshot {
        if self.turn.route.entry > 0 {
            self.fallback_model = model.to_owned();
        }
        self
    }
}

impl Turn {
    /// A snapshot for the checkpoint cell: cheap (the base is shared; what this turn
    /// added is copied), serialized only when someone asks.
    pub(crate) fn snapshot(&self) -> Snapshot {
        Snapshot {
            turn: self.clone(),
            outputs: None,
            secrets: Secrets::default(),
            fallback_model: String::new(),
        }
    }
}

/// Where a running turn leaves its latest snapshot and its steering messages; shared by
/// the turn and every clone of its [`TurnControl`](crate::TurnControl).
#[derive(Debug, Default)]
pub(crate) struct TurnShared {
    checkpoint: Mutex<Option<Arc<Snapshot>>>,
    steering: Mutex<SteerQueue>,
}

#[derive(Debug, Default)]
struct SteerQueue {
    queued: VecDeque<Input>,
    /// The turn ended: `steer` is refused, and what was not delivered waits here.
    closed: bool,
    undelivered: Vec<Input>,
}

/// A steering message that was not queued: the turn had ended. Holds the input back.
#[derive(Debug, Clone, PartialEq)]
pub struct NotSteered {
    /// Why (a `config` error: the turn has ended). Boxed: the input is the payload.
    pub error: Box<Error>,
    /// The input, given back.
    pub input: Input,
}

impl std::fmt::Display for NotSteered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.error.fmt(f)
    }
}

impl std::error::Error for NotSteered {}

impl TurnShared {
    pub(crate) fn publish(&self, snapshot: Snapshot) {
        *self
            .checkpoint
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(snapshot));
    }

    pub(crate) fn checkpoint(&self) -> Option<Checkpoint> {
        let snapshot = self
            .checkpoint
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()?;
        Some(Checkpoint::of(&snapshot))
    }

    pub(crate) fn steer(&self, input: Input) -> std::result::Result<(), NotSteered> {
        let mut q = self.steering.lock().unwrap_or_else(PoisonError::into_inner);
        if q.closed {
            return Err(NotSteered {
                error: Box::new(Error::config(
                    "steer: the turn has ended; the message was not delivered (it is given back)",
                )),
                input,
            });
        }
        q.queued.push_back(input);
        Ok(())
    }

    /// The messages queued since the last look.
    pub(crate) fn take_queued(&self) -> Vec<Input> {
        let mut q = self.steering.lock().unwrap_or_else(PoisonError::into_inner);
        q.queued.drain(..).collect()
    }

    /// Closes the queue for a turn that is about to end, unless a message arrived: then
    /// it is returned, and the turn goes on to deliver it.
    pub(crate) fn close_unless_queued(&self) -> Vec<Input> {
        let mut q = self.steering.lock().unwrap_or_else(PoisonError::into_inner);
        if q.queued.is_empty() {
            q.closed = true;
        }
        q.queued.drain(..).collect()
    }

    /// Closes the queue for good (the turn ended); `leftover` were taken but not
    /// delivered.
    pub(crate) fn close(&self, leftover: Vec<Input>) {
        let mut q = self.steering.lock().unwrap_or_else(PoisonError::into_inner);
        q.closed = true;
        q.undelivered.extend(leftover);
        let queued: Vec<Input> = q.queued.drain(..).collect();
        q.undelivered.extend(queued);
    }

    /// The steering messages the turn did not deliver (it ended first).
    pub(crate) fn take_undelivered(&self) -> Vec<Input> {
        let mut q = self.steering.lock().unwrap_or_else(PoisonError::into_inner);
        let mut v = std::mem::take(&mut q.undelivered);
        if q.closed {
            v.extend(q.queued.drain(..));
        }
        v
    }
}

/// A turn at a step boundary, as a versioned JSON document (`{"panto_checkpoint": 1,
/// …}`) that [`Agent::resume`](crate::Agent::resume) continues in any process. See
/// docs/durable-turns.md for its shape, its size and its compatibility promise.
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    doc: Doc,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Doc {
    panto_checkpoint: u32,
    conversation: Vec<Message>,
    options: Value,
    steps: u32,
    /// Absent in checkpoints of builds before `max_tool_calls`.
    #[serde(default, skip_serializing_if = "is_zero")]
    tool_calls: u32,
    usage: Usage,
    repairs: u32,
    text: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pending: Option<DocStep>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    finished: Option<DocFinished>,
    /// Present when the turn went to a model of the agent's `fallback` list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    fallback: Option<DocFallback>,
}

/// The fallback entry a turn went to: its 1-based place in the agent's `fallback` list,
/// its model (checked on resume), and the first message it read as written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct DocFallback {
    entry: u32,
    model: String,
    since: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct DocStep {
    message: Message,
    calls: Vec<DocCall>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    cut_off: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct DocCall {
    call_id: String,
    name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    deferred: Option<DeferReason>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    result: Option<DocResult>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct DocResult {
    output: String,
    is_error: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    parts: Vec<Block>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct DocFinished {
    stop_reason: StopReason,
    text: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    output: Option<JsonText>,
}

impl Checkpoint {
    fn of(s: &Snapshot) -> Checkpoint {
        let t = &s.turn;
        let outputs: Vec<Option<ToolOutput>> = s
            .outputs
            .as_ref()
            .map(|o| o.lock().unwrap_or_else(PoisonError::into_inner).clone())
            .unwrap_or_default();
        let pending = t.pending.as_ref().map(|step| DocStep {
            message: step.assistant.clone(),
            calls: step
                .calls
                .iter()
                .enumerate()
                .map(|(i, c)| DocCall {
                    call_id: c.call_id.clone(),
                    name: c.name.clone(),
                    deferred: match c.plan {
                        Plan::Deferred(r) => Some(r),
                        Plan::Run => None,
                    },
                    result: c
                        .result
                        .clone()
                        .or_else(|| outputs.get(i).cloned().flatten())
                        .map(|o| DocResult {
                            output: o.output,
                            is_error: o.is_error,
                            parts: o.parts,
                        }),
                })
                .collect(),
            cut_off: step.cut_off.clone(),
        });
        let mut doc = Doc {
            panto_checkpoint: CHECKPOINT_VERSION,
            conversation: t.conversation(),
            options: t.options.to_value(),
            steps: t.steps,
            tool_calls: t.tool_calls,
            usage: t.usage,
            repairs: t.repairs,
            text: t.text.clone(),
            pending,
            finished: t.finished.as_ref().map(|f| DocFinished {
                stop_reason: f.stop_reason.clone(),
                text: f.text.clone(),
                output: f.output.clone(),
            }),
            fallback: (t.route.entry > 0).then(|| DocFallback {
                entry: u32::try_from(t.route.entry).unwrap_or(u32::MAX),
                model: s.fallback_model.clone(),
                since: t.route.since,
            }),
        };
        if !s.secrets.is_empty() {
            redact_doc(&mut doc, &s.secrets);
        }
        Checkpoint { doc }
    }

    /// The document as JSON text.
    pub fn to_json(&self) -> String {
        // Strings, numbers and JSON values only: serializing cannot fail.
        serde_json::to_string(&self.doc).unwrap_or_default()
    }

    /// Reads a document written by [`Checkpoint::to_json`] of this or an older version.
    /// A document past [`MAX_CHECKPOINT_BYTES`] (refused before it is parsed), one that
    /// is not JSON or not a checkpoint, one of a newer version, or one whose parts do
    /// not agree (a conversation a provider would refuse, results for calls the step
    /// did not make) is a `config` error naming the problem.
    pub fn from_json(json: &str) -> Result<Checkpoint> {
        if json.len() > MAX_CHECKPOINT_BYTES {
            return Err(Error::config(format!(
                "checkpoint: {} bytes, more than the {MAX_CHECKPOINT_BYTES} a checkpoint may have",
                json.len()
            )));
        }
        #[derive(Deserialize)]
        struct Version {
            panto_checkpoint: Option<Value>,
        }
        let version: Version = serde_json::from_str(json)
            .map_err(|e| Error::config(format!("checkpoint: not a JSON object: {e}")))?;
        match version.panto_checkpoint.as_ref().and_then(Value::as_u64) {
            None => {
                return Err(Error::config(
                    "checkpoint: not a panto checkpoint (no \"panto_checkpoint\" version number)",
                ))
            }
            Some(v) if v > u64::from(CHECKPOINT_VERSION) => {
                return Err(Error::config(format!(
                    "checkpoint: version {v} is newer than this panto reads \
                     (up to {CHECKPOINT_VERSION}); resume it with a newer panto"
                )))
            }
            Some(0) => return Err(Error::config("checkpoint: version 0 does not exist")),
            Some(_) => {}
        }
        let doc: Doc =
            serde_json::from_str(json).map_err(|e| Error::config(format!("checkpoint: {e}")))?;
        let checkpoint = Checkpoint { doc };
        checkpoint.check()?;
        Ok(checkpoint)
    }

    /// The conversation the resumed turn continues (the agent's history becomes it),
    /// without the step whose calls are still being answered.
    pub fn conversation(&self) -> &[Message] {
        &self.doc.conversation
    }

    /// The calls the turn waits for (empty unless it paused).
    pub fn deferred(&self) -> Vec<DeferredCall> {
        let Some(step) = &self.doc.pending else {
            return Vec::new();
        };
        step.calls
            .iter()
            .filter_map(|c| match (c.deferred, &c.result) {
                (Some(reason), None) => Some(DeferredCall {
                    call_id: c.call_id.clone(),
                    name: c.name.clone(),
                    arguments: call_arguments(&step.message, &c.call_id),
                    reason,
                }),
                _ => None,
            })
            .collect()
    }

    /// The number of assistant messages of the turn so far.
    pub fn steps(&self) -> u32 {
        self.doc.steps
    }

    /// Whether the turn had ended (its last checkpoint, taken after `message_complete`
    /// was decided): resuming it requests nothing and ends at once. A turn killed,
    /// failed or cancelled mid-way, or paused for deferred calls, is not finished.
    pub fn is_finished(&self) -> bool {
        self.doc.finished.is_some()
    }

    /// The fallback entry the turn went to, if it went to one: its 1-based place in the
    /// agent's `fallback` list and its model.
    pub fn fallback(&self) -> Option<(u32, &str)> {
        self.doc
            .fallback
            .as_ref()
            .map(|f| (f.entry, f.model.as_str()))
    }

    /// The options of the checkpointed turn.
    pub(crate) fn options(&self) -> Result<TurnOptions> {
        TurnOptions::from_value(&self.doc.options)
            .map_err(|e| Error::config(format!("checkpoint: {}", e.message)))
    }

    /// Its parts agree with each other.
    fn check(&self) -> Result<()> {
        let d = &self.doc;
        message::validate_history(&d.conversation)
            .map_err(|e| Error::config(format!("checkpoint: conversation: {}", e.message)))?;
        if let Some(f) = &d.fallback {
            if f.entry == 0 || f.entry as usize > crate::config::MAX_FALLBACK_MODELS {
                return Err(Error::config(format!(
                    "checkpoint: fallback.entry must be 1 to {} (got {})",
                    crate::config::MAX_FALLBACK_MODELS,
                    f.entry
                )));
            }
            if f.since > d.conversation.len() {
                return Err(Error::config(
                    "checkpoint: fallback.since is past the end of the conversation",
                ));
            }
        }
        self.options()?;
        if d.pending.is_some() && d.finished.is_some() {
            return Err(Error::config(
                "checkpoint: a finished turn cannot have a step waiting for tool results",
            ));
        }
        if let Some(step) = &d.pending {
            if step.message.role != Role::Assistant {
                return Err(Error::config(
                    "checkpoint: pending.message must be an assistant message",
                ));
            }
            let ids: Vec<&str> = step
                .message
                .content
                .iter()
                .filter_map(|b| match b {
                    Block::ToolCall { call_id, .. } => Some(call_id.as_str()),
                    _ => None,
                })
                .collect();
            let listed: Vec<&str> = step.calls.iter().map(|c| c.call_id.as_str()).collect();
            if ids != listed {
                let unknown = listed.iter().find(|id| !ids.contains(id));
                return Err(Error::config(match unknown {
                    Some(id) => format!(
                        "checkpoint: pending.calls names call {id:?}, which the pending message \
                         did not make"
                    ),
                    None => "checkpoint: pending.calls must list the pending message's tool \
                             calls, in order"
                        .to_owned(),
                }));
            }
            for (c, b) in step.calls.iter().zip(
                step.message
                    .content
                    .iter()
                    .filter(|b| matches!(b, Block::ToolCall { .. })),
            ) {
                if let Block::ToolCall { name, .. } = b {
                    if name != &c.name {
                        return Err(Error::config(format!(
                            "checkpoint: pending.calls: call {:?} names tool {:?}, the message {:?}",
                            c.call_id, c.name, name
                        )));
                    }
                }
            }
            if d.steps == 0 {
                return Err(Error::config(
                    "checkpoint: a step is pending, yet no response was counted (steps is 0)",
                ));
            }
            // The conversation with the step must be one a provider takes.
            let mut all = d.conversation.clone();
            all.push(step.message.clone());
            let calls: Vec<PlannedCall> = step
                .calls
                .iter()
                .map(|c| PlannedCall {
                    call_id: c.call_id.clone(),
                    name: c.name.clone(),
                    plan: Plan::Run,
                    result: None,
                })
                .collect();
            all.push(Message {
                role: Role::Tool,
                content: step_results(&calls),
            });
            message::validate_history(&all)
                .map_err(|e| Error::config(format!("checkpoint: pending: {}", e.message)))?;
        }
        Ok(())
    }

    /// Checks the checkpoint against the resuming agent's limits and the answers
    /// against its deferred calls, and makes the turn.
    pub(crate) fn into_turn(
        self,
        limits: Limits,
        has_output: bool,
        answers: &Answers,
        kind: &dyn Fn(&str) -> ToolKind,
    ) -> Result<Turn> {
        let options = self.options()?;
        let d = self.doc;
        if d.steps > limits.max_steps {
            return Err(Error::config(format!(
                "checkpoint: {} steps, more than this agent's max_steps ({})",
                d.steps, limits.max_steps
            )));
        }
        if d.repairs > limits.output_retries {
            return Err(Error::config(format!(
                "checkpoint: {} output repairs, more than this agent's output_retries ({})",
                d.repairs, limits.output_retries
            )));
        }
        let deferred: HashMap<&str, DeferReason> = d
            .pending
            .iter()
            .flat_map(|s| s.calls.iter())
            .filter(|c| c.result.is_none())
            .filter_map(|c| c.deferred.map(|r| (c.call_id.as_str(), r)))
            .collect();
        for (id, answer) in &answers.answers {
            let Some(reason) = deferred.get(id.as_str()) else {
                return Err(Error::config(format!(
                    "answers: call {id:?} is not a deferred call of this checkpoint"
                )));
            };
            match (reason, answer) {
                (DeferReason::External, Answer::Approve) => {
                    return Err(Error::config(format!(
                        "answers: call {id:?} is external: panto cannot run it; give its result \
                         (or reject it)"
                    )))
                }
                (DeferReason::Approval, Answer::Result(_)) => {
                    return Err(Error::config(format!(
                        "answers: call {id:?} needs approval: approve or reject it (a result is \
                         for external or deferred calls)"
                    )))
                }
                _ => {}
            }
        }
        if let Some(step) = &d.pending {
            // A call that will run, or wait again, needs its tool.
            for c in step.calls.iter().filter(|c| c.result.is_none()) {
                let answered = matches!(
                    answers.get(&c.call_id),
                    Some(Answer::Reject(_) | Answer::Result(_))
                );
                if !answered && kind(&c.name) == ToolKind::Unknown {
                    return Err(Error::config(format!(
                        "checkpoint: call {:?} needs the tool {:?}, which this agent does not have",
                        c.call_id, c.name
                    )));
                }
            }
        }
        let answered: Vec<String> = d
            .pending
            .iter()
            .flat_map(|s| s.calls.iter())
            .filter(|c| c.result.is_none())
            .filter(|c| {
                matches!(
                    answers.get(&c.call_id),
                    Some(Answer::Reject(_) | Answer::Result(_))
                )
            })
            .map(|c| c.call_id.clone())
            .collect();
        let pending = d.pending.map(|step| PendingStep {
            calls: step
                .calls
                .into_iter()
                .map(|c| {
                    let mut call = PlannedCall {
                        plan: c.deferred.map_or(Plan::Run, Plan::Deferred),
                        result: c.result.map(|r| ToolOutput {
                            output: r.output,
                            is_error: r.is_error,
                            parts: r.parts,
                        }),
                        call_id: c.call_id,
                        name: c.name,
                    };
                    if call.result.is_none() {
                        match answers.get(&call.call_id) {
                            Some(Answer::Approve) => call.plan = Plan::Run,
                            Some(Answer::Reject(reason)) => {
                                call.result = Some(ToolOutput::error(format!(
                                    "rejected: the call was not run: {reason}"
                                )))
                            }
                            Some(Answer::Result(out)) => call.result = Some(out.clone()),
                            None => {}
                        }
                    }
                    call
                })
                .collect(),
            assistant: step.message,
            cut_off: step.cut_off,
            settled: false,
        });
        Ok(Turn {
            limits,
            options,
            base: Arc::new(d.conversation),
            added: Vec::new(),
            steps: d.steps,
            tool_calls: d.tool_calls,
            usage: d.usage,
            repairs: d.repairs,
            text: d.text,
            pending,
            finished: d.finished.map(|f| Finished {
                stop_reason: f.stop_reason,
                text: f.text,
                output: f.output,
            }),
            steering: VecDeque::new(),
            has_output,
            input_refused: false,
            answered,
            route: d.fallback.map_or(Route::default(), |f| Route {
                entry: f.entry as usize,
                since: f.since,
            }),
        })
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn redact_doc(doc: &mut Doc, secrets: &Secrets) {
    use crate::event::redact_block;
    let msg = |m: &mut Message| m.content.iter_mut().for_each(|b| redact_block(b, secrets));
    doc.conversation.iter_mut().for_each(msg);
    secrets.redact_in_place(&mut doc.text);
    if let Some(step) = &mut doc.pending {
        msg(&mut step.message);
        for c in &mut step.calls {
            if let Some(r) = &mut c.result {
                secrets.redact_in_place(&mut r.output);
                r.parts.iter_mut().for_each(|b| redact_block(b, secrets));
            }
        }
    }
    if let Some(f) = &mut doc.finished {
        secrets.redact_in_place(&mut f.text);
        if let Some(v) = &mut f.output {
            v.redact_strings(secrets);
        }
    }
}

#[cfg(test)]
mod tests {
    //! Every transition, with no server and no runtime.
    use super::*;
    use crate::provider::ProviderKind;
    use crate::request::OutputMode;
    use serde_json::json;

    const LIMITS: Limits = Limits {
        max_steps: 3,
        output_retries: 1,
        max_tool_calls: None,
    };

    fn turn(options: TurnOptions, has_output: bool) -> Turn {
        Turn::new(
            LIMITS,
            options,
            has_output,
            Arc::new(vec![Message::user("hi")]),
        )
    }

    fn usage(n: u64) -> Usage {
        Usage {
            input_tokens: n,
            output_tokens: 1,
            reported: true,
            ..Usage::default()
        }
    }

    fn response(blocks: Vec<Block>, stop: StopReason) -> DecodedMessage {
        DecodedMessage {
            message: Message {
                role: Role::Assistant,
                content: blocks,
            },
            stop_reason: stop,
            usage: usage(10),
            model: "m".into(),
            response_id: None,
            cut_off_calls: Vec::new(),
        }
    }

    fn call(id: &str, name: &str) -> Block {
        Block::ToolCall {
            call_id: id.into(),
            name: name.into(),
            arguments: Some(json!({})),
            arguments_raw: None,
        }
    }

    fn kinds(name: &str) -> ToolKind {
        match name {
            "run" => ToolKind::Run,
            "ask" => ToolKind::Approval,
            "ext" => ToolKind::External,
            _ => ToolKind::Unknown,
        }
    }

    fn spec() -> OutputSpec {
        OutputSpec::new(
            &json!({"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}),
            ProviderKind::parse("openai").expect("a registered provider"),
            OutputMode::Auto,
            "output_schema",
        )
        .unwrap()
    }

    #[test]
    fn a_plain_answer_ends_the_turn() {
        let mut t = turn(TurnOptions::default(), false);
        assert_eq!(t.next(), Next::Request);
        let a = t.on_response(
            response(vec![Block::text("hello")], StopReason::EndTurn),
            None,
            &kinds,
        );
        assert_eq!(a.commit.len(), 1);
        assert!(a.error.is_none() && a.event.is_none());
        let Next::Done(s) = t.next() else {
            panic!("not done")
        };
        assert_eq!(
            (s.stop_reason, s.messages, s.text.as_str()),
            (StopReason::EndTurn, 1, "hello")
        );
        assert_eq!(s.usage.input_tokens, 10);
    }

    #[test]
    fn tool_calls_run_then_the_next_request_follows() {
        let mut t = turn(TurnOptions::default(), false);
        let a = t.on_response(
            response(
                vec![call("a", "run"), call("b", "nope")],
                StopReason::ToolUse,
            ),
            None,
            &kinds,
        );
        assert!(
            a.commit.is_empty(),
            "the step enters the history with its results"
        );
        assert_eq!(t.next(), Next::RunCalls);
        assert_eq!(
            t.pending().unwrap().calls[1].plan,
            Plan::Run,
            "refused by the dispatch"
        );
        let a = t.on_results(vec![
            Some(ToolOutput::ok("1")),
            Some(ToolOutput::error("no")),
        ]);
        assert_eq!(a.commit.len(), 2);
        assert_eq!(a.commit[1].role, Role::Tool);
        assert_eq!(t.next(), Next::Request);
        assert_eq!(t.conversation().len(), 3);
    }

    #[test]
    fn max_tokens_ends_the_turn_and_fails_a_structured_one() {
        let mut t = turn(TurnOptions::default(), false);
        let a = t.on_response(
            response(vec![call("a", "run")], StopReason::MaxTokens),
            None,
            &kinds,
        );
        assert_eq!(a.commit.len(), 2, "the calls get 'not run' results");
        assert!(matches!(t.next(), Next::Done(s) if s.stop_reason == StopReason::MaxTokens));
        let mut t = turn(TurnOptions::default(), true);
        let a = t.on_response(
            response(vec![Block::text("{\"n\":")], StopReason::MaxTokens),
            Some(&spec()),
            &kinds,
        );
        assert_eq!(a.error.unwrap().kind, ErrorKind::OutputTruncated);
    }

    #[test]
    fn a_refusal_fails_a_structured_turn() {
        let mut t = turn(TurnOptions::default(), true);
        let a = t.on_response(
            response(vec![Block::text("no")], StopReason::Refusal),
            Some(&spec()),
            &kinds,
        );
        assert_eq!(a.error.unwrap().kind, ErrorKind::OutputRefused);
        assert_eq!(a.commit.len(), 1);
    }

    #[test]
    fn a_bad_answer_is_repaired_once_then_fails() {
        let mut t = turn(TurnOptions::default(), true);
        let a = t.on_response(
            response(vec![Block::text("{}")], StopReason::EndTurn),
            Some(&spec()),
            &kinds,
        );
        assert!(a.error.is_none());
        assert_eq!(a.commit.len(), 2, "the answer and the repair prompt");
        assert!(matches!(
            a.event,
            Some(Event::OutputRepair { attempt: 1, .. })
        ));
        assert_eq!(t.next(), Next::Request);
        let a = t.on_response(
            response(vec![Block::text("{}")], StopReason::EndTurn),
            Some(&spec()),
            &kinds,
        );
        assert_eq!(a.error.unwrap().kind, ErrorKind::OutputInvalid);
        let a = turn(TurnOptions::default(), true).on_response(
            response(vec![Block::text("{\"n\":1}")], StopReason::EndTurn),
            Some(&spec()),
            &kinds,
        );
        assert!(a.error.is_none());
    }

    #[test]
    fn max_steps_ends_a_tool_loop() {
        let mut t = turn(TurnOptions::default(), false);
        for step in 1..=3 {
            t.on_response(
                response(vec![call(&format!("c{step}"), "run")], StopReason::ToolUse),
                None,
                &kinds,
            );
            let a = t.on_results(vec![Some(ToolOutput::ok("x"))]);
            assert!(a.error.is_none());
        }
        assert!(
            matches!(t.next(), Next::Done(s) if s.stop_reason == StopReason::MaxSteps && s.messages == 3)
        );
        let mut t = turn(TurnOptions::default(), true);
        for step in 1..=3 {
            let a = t.on_response(
                response(vec![call(&format!("c{step}"), "run")], StopReason::ToolUse),
                Some(&spec()),
                &kinds,
            );
            assert!(a.error.is_none());
            let a = t.on_results(vec![Some(ToolOutput::ok("x"))]);
            if step == 3 {
                assert_eq!(a.error.unwrap().kind, ErrorKind::OutputInvalid);
            }
        }
    }

    #[test]
    fn deferred_calls_pause_the_turn_after_the_runnable_ones() {
        let mut t = turn(TurnOptions::default(), false);
        t.on_response(
            response(
                vec![call("a", "run"), call("b", "ask"), call("c", "ext")],
                StopReason::ToolUse,
            ),
            None,
            &kinds,
        );
        assert_eq!(t.next(), Next::RunCalls);
        let a = t.on_results(vec![Some(ToolOutput::ok("1")), None, None]);
        assert_eq!(a.commit.len(), 2, "the step enters the history, with notes");
        assert!(a.commit[1]
            .content
            .iter()
            .any(|b| matches!(b, Block::ToolResult { output, .. } if output.contains("paused"))));
        let Next::Pause(deferred) = t.next() else {
            panic!("not paused")
        };
        let reasons: Vec<_> = deferred
            .iter()
            .map(|d| (d.call_id.as_str(), d.reason))
            .collect();
        assert_eq!(
            reasons,
            [("b", DeferReason::Approval), ("c", DeferReason::External)]
        );
        // defer_tools defers even a tool that runs.
        let mut t = turn(
            TurnOptions {
                defer_tools: true,
                ..TurnOptions::default()
            },
            false,
        );
        t.on_response(
            response(vec![call("a", "run")], StopReason::ToolUse),
            None,
            &kinds,
        );
        assert_eq!(
            t.next(),
            Next::RunCalls,
            "the step still enters the history once"
        );
        t.on_results(vec![None]);
        assert!(matches!(t.next(), Next::Pause(d) if d[0].reason == DeferReason::Deferred));
    }

    #[test]
    fn steering_waits_for_the_step_and_keeps_an_ending_turn_going() {
        let mut t = turn(TurnOptions::default(), false);
        t.on_response(
            response(vec![call("a", "run")], StopReason::ToolUse),
            None,
            &kinds,
        );
        t.steer(Input::from("also this"));
        assert!(t.deliver_steering().is_empty(), "not while calls run");
        t.on_results(vec![Some(ToolOutput::ok("1"))]);
        let delivered = t.deliver_steering();
        assert_eq!(delivered.len(), 1);
        assert_eq!(delivered[0].text(), "also this");
        assert_eq!(t.next(), Next::Request);
        t.on_response(
            response(vec![Block::text("done")], StopReason::EndTurn),
            None,
            &kinds,
        );
        assert!(matches!(t.next(), Next::Done(_)));
        t.steer(Input::from("one more"));
        assert_eq!(t.deliver_steering().len(), 1);
        assert_eq!(t.next(), Next::Request, "the turn goes on to answer it");
        // At max_steps it cannot be delivered: it is given back.
        t.on_response(
            response(vec![Block::text("ok")], StopReason::EndTurn),
            None,
            &kinds,
        );
        t.steer(Input::from("too many"));
        assert!(t.deliver_steering().is_empty());
        assert_eq!(t.take_steering(), vec![Input::from("too many")]);
    }

    #[test]
    fn a_checkpoint_says_whether_its_turn_had_ended() {
        let mut t = turn(TurnOptions::default(), false);
        let unstarted = Checkpoint::of(&t.snapshot().with(None, Secrets::default()));
        assert!(!unstarted.is_finished(), "its request is still to be made");
        t.on_response(
            response(vec![Block::text("done")], StopReason::EndTurn),
            None,
            &kinds,
        );
        assert!(matches!(t.next(), Next::Done(_)));
        let ended = Checkpoint::of(&t.snapshot().with(None, Secrets::default()));
        assert!(ended.is_finished());
        assert!(Checkpoint::from_json(&ended.to_json())
            .unwrap()
            .is_finished());
    }

    #[test]
    fn a_checkpoint_resumes_where_the_turn_stood() {
        let mut t = turn(TurnOptions::default(), false);
        t.on_response(
            response(
                vec![call("a", "run"), call("b", "run")],
                StopReason::ToolUse,
            ),
            None,
            &kinds,
        );
        let outputs: crate::tool::Outputs =
            Arc::new(Mutex::new(vec![Some(ToolOutput::ok("first")), None]));
        let snap = t.snapshot().with(Some(outputs), Secrets::default());
        let json = Checkpoint::of(&snap).to_json();
        let back = Checkpoint::from_json(&json).unwrap();
        assert!(!back.is_finished(), "a step waits for a result");
        let r = back
            .into_turn(LIMITS, false, &Answers::new(), &kinds)
            .unwrap();
        assert_eq!(r.next(), Next::RunCalls);
        let calls = &r.pending().unwrap().calls;
        assert_eq!(calls[0].result, Some(ToolOutput::ok("first")));
        assert_eq!(calls[1].result, None, "runs again");
        assert_eq!(r.steps(), 1);
        assert_eq!(r.usage.input_tokens, 10);
        // A checkpoint past the resuming agent's max_steps is refused.
        let tight = Limits {
            max_steps: 0,
            ..LIMITS
        };
        let e = Checkpoint::from_json(&json)
            .unwrap()
            .into_turn(tight, false, &Answers::new(), &kinds)
            .unwrap_err();
        assert!(e.message.contains("max_steps"));
    }
}
