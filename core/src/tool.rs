//! Owns tools: the [`Tool`] trait for tools written in Rust, host tools (declared in
//! the configuration, answered from outside the loop through [`HostToolResults`]), the
//! concurrent dispatch of one message's tool calls, and what running calls report on
//! the way ([`CallProgress`]: progress, and MCP servers' log lines), which the dispatch
//! turns into coalesced events before each call's result. It does not decide when tools
//! run (that is `agent`).

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};
use serde_json::Value;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::error::{Error, ErrorKind, Result};
use crate::event::Event;
use crate::message::Block;
use crate::provider::Emit;
use crate::request::ToolSpec;

/// What a tool call produced: text for the model, and whether it is an error. A tool
/// that returns images too gives `parts` (text and images, in order; see
/// [`ToolOutput::with_parts`]); `output` is then the text of its text parts.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    /// The text the model reads.
    pub output: String,
    /// Whether the model reads it as an error result.
    pub is_error: bool,
    /// Text and image parts, in order (empty for plain text).
    pub parts: Vec<Block>,
}

impl ToolOutput {
    /// A successful result of this text.
    pub fn ok(output: impl Into<String>) -> ToolOutput {
        ToolOutput {
            output: output.into(),
            is_error: false,
            parts: Vec::new(),
        }
    }
    /// An error result of this text (the model reads it, and may try again).
    pub fn error(output: impl Into<String>) -> ToolOutput {
        ToolOutput {
            output: output.into(),
            is_error: true,
            parts: Vec::new(),
        }
    }

    /// A result of text and image parts (`Block::Text`, `Block::Image`); `output` is
    /// their text, joined with newlines. Other blocks are not a tool's result: each
    /// becomes a text part saying so.
    pub fn with_parts(parts: Vec<Block>, is_error: bool) -> ToolOutput {
        let parts: Vec<Block> = parts
            .into_iter()
            .map(|p| match p {
                Block::Text { .. } | Block::Image(_) => p,
                _ => Block::text(
                    "[panto: a tool result holds text and images only; a part was dropped]",
                ),
            })
            .collect();
        let output = parts_text(&parts);
        // Plain text stays plain text: only a result with an image needs its parts.
        let parts = if parts.iter().any(|p| matches!(p, Block::Image(_))) {
            parts
        } else {
            Vec::new()
        };
        ToolOutput {
            output,
            is_error,
            parts,
        }
    }
}

impl ToolOutput {
    /// The result as JSON, `{"output": "…", "is_error": bool, "parts"?: […]}`: the form
    /// an answer to a deferred call takes ([`crate::Answers::from_json`]), so a result
    /// got outside the turn (`Agent::call_mcp_tool`) is given back to it as is.
    pub fn to_json(&self) -> String {
        let mut v = serde_json::json!({"output": self.output, "is_error": self.is_error});
        if !self.parts.is_empty() {
            v["parts"] = serde_json::to_value(&self.parts).unwrap_or(serde_json::Value::Null);
        }
        v.to_string()
    }
}

/// The text parts of a tool result, joined with newlines.
pub fn parts_text(parts: &[Block]) -> String {
    let texts: Vec<&str> = parts
        .iter()
        .filter_map(|p| match p {
            Block::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    texts.join("\n")
}

/// The future a tool call returns.
pub type ToolFuture = Pin<Box<dyn Future<Output = ToolOutput> + Send + 'static>>;

/// A tool implemented in Rust. `call` receives the parsed arguments and a token that is
/// cancelled when the turn is cancelled or the call times out; a tool that ignores it is
/// aborted at its next await point.
pub trait Tool: Send + Sync + 'static {
    /// The tool's declaration (name, description, parameters), as the model sees it.
    fn spec(&self) -> ToolSpec;
    /// Runs one call with the model's arguments; the future's output is the result.
    fn call(&self, arguments: Value, cancel: CancellationToken) -> ToolFuture;
    /// Runs one call like [`Tool::call`], with a [`CallProgress`] through which the
    /// running call reports its progress (each report becomes a `tool_progress` event
    /// of the turn, before the call's `tool_result`). The turn's dispatch calls this
    /// one; the default ignores `progress` and calls [`Tool::call`], so a tool that has
    /// no progress to report implements only `call`.
    fn call_with_progress(
        &self,
        arguments: Value,
        cancel: CancellationToken,
        progress: CallProgress,
    ) -> ToolFuture {
        let _ = progress;
        self.call(arguments, cancel)
    }
    /// True when a call must be approved before it runs: the turn pauses with it
    /// (stop reason `deferred`, reason `approval`) and is resumed with an answer.
    fn needs_approval(&self) -> bool {
        false
    }
    /// True for a tool that runs outside panto: `call` is never made; the turn pauses
    /// with the call (reason `external`) and is resumed with its result.
    fn is_external(&self) -> bool {
        false
    }
}

/// Least time between two `tool_progress` events of one call: reports arriving faster
/// are coalesced (the latest wins), so a tool or an MCP server that reports in a tight
/// loop cannot flood the turn's events.
pub(crate) const PROGRESS_INTERVAL: Duration = Duration::from_millis(100);
/// Most bytes of a progress report's text (cut on a character boundary).
pub(crate) const MAX_PROGRESS_TEXT: usize = 500;
/// Most `server_log` events one call carries; later lines are dropped (and counted in
/// the debug log).
pub(crate) const MAX_LOGS_PER_CALL: usize = 100;

/// A log line of an MCP server, routed to a call of that server that is running.
#[derive(Debug, Clone)]
pub(crate) struct LogLine {
    pub server: String,
    pub level: &'static str,
    pub logger: Option<String>,
    pub data: String,
}

/// The latest progress report of a call not yet delivered.
#[derive(Debug, Clone, PartialEq)]
struct Report {
    progress: f64,
    total: Option<f64>,
    text: Option<String>,
}

/// What the calls of one batch reported and the dispatch has not delivered yet.
#[derive(Default)]
struct CallNotes {
    latest: Option<Report>,
    last_emit: Option<tokio::time::Instant>,
    logs: Vec<LogLine>,
    /// Events of an MCP server's own requests (sampling, elicitation) made for the call.
    events: Vec<Event>,
    logs_taken: usize,
    logs_dropped: usize,
    /// The call's result was delivered: later reports are too late.
    done: bool,
}

/// The reports of one batch's calls, shared by their [`CallProgress`] handles and the
/// dispatch that turns them into events.
#[derive(Default)]
pub(crate) struct BatchNotes {
    calls: Mutex<Vec<CallNotes>>,
    wake: tokio::sync::Notify,
}

impl BatchNotes {
    fn new(calls: usize) -> Arc<BatchNotes> {
        Arc::new(BatchNotes {
            calls: Mutex::new((0..calls).map(|_| CallNotes::default()).collect()),
            wake: tokio::sync::Notify::new(),
        })
    }

    /// Runs `f` on call `idx`'s notes, waking the turn if `f` says it added something.
    /// `false` when the call's result was already taken (it takes no more notes).
    fn with_call(&self, idx: usize, f: impl FnOnce(&mut CallNotes) -> bool) -> bool {
        let (open, woke) = {
            let mut calls = self.calls.lock().unwrap_or_else(PoisonError::into_inner);
            match calls.get_mut(idx) {
                Some(c) if !c.done => (true, f(c)),
                _ => (false, false),
            }
        };
        if woke {
            self.wake.notify_one();
        }
        open
    }

    /// The earliest time a coalesced report becomes due, if one waits.
    fn next_due(&self) -> Option<tokio::time::Instant> {
        let calls = self.calls.lock().unwrap_or_else(PoisonError::into_inner);
        calls
            .iter()
            .filter(|c| c.latest.is_some())
            .filter_map(|c| c.last_emit.map(|t| t + PROGRESS_INTERVAL))
            .min()
    }

    /// Takes the events due now: every call's log lines and its latest report unless
    /// one was delivered less than [`PROGRESS_INTERVAL`] ago — or, for the call `last`
    /// whose result is next, everything it has, after which it takes no more.
    fn take_due(&self, last: Option<usize>) -> Vec<Due> {
        let now = tokio::time::Instant::now();
        let mut calls = self.calls.lock().unwrap_or_else(PoisonError::into_inner);
        let mut out = Vec::new();
        for (idx, c) in calls.iter_mut().enumerate() {
            let finishing = last == Some(idx);
            let due = finishing
                || c.last_emit
                    .is_none_or(|t| now.duration_since(t) >= PROGRESS_INTERVAL);
            let report = if due { c.latest.take() } else { None };
            if report.is_some() {
                c.last_emit = Some(now);
            }
            let logs = std::mem::take(&mut c.logs);
            let events = std::mem::take(&mut c.events);
            if finishing {
                c.done = true;
                if c.logs_dropped > 0 {
                    tracing::debug!(
                        dropped = c.logs_dropped,
                        "MCP server log lines beyond {MAX_LOGS_PER_CALL} for one call were dropped"
                    );
                }
            }
            if report.is_some() || !logs.is_empty() || !events.is_empty() {
                out.push((idx, logs, report, events));
            }
        }
        out
    }
}

/// What [`BatchNotes::take_due`] gives of one call: its index, log lines, latest report
/// and other events.
type Due = (usize, Vec<LogLine>, Option<Report>, Vec<Event>);

/// Where a running tool call reports its progress (see [`Tool::call_with_progress`]).
/// Each report becomes a `tool_progress` event of the turn. Reports are coalesced: at
/// most one event per call every 100 ms carries the latest report, and the last report
/// is always delivered before the call's `tool_result`; a report after the result is
/// dropped. Cheap to clone; a call run outside a turn gets one that reports nowhere
/// ([`CallProgress::none`]).
#[derive(Clone)]
pub struct CallProgress {
    notes: Option<Arc<BatchNotes>>,
    idx: usize,
    /// The turn's way to the model, for an MCP server's sampling requests.
    sampler: Option<Arc<dyn crate::mcp::sampling::Sampler>>,
}

impl std::fmt::Debug for CallProgress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallProgress")
            .field("reports", &self.notes.is_some())
            .finish_non_exhaustive()
    }
}

impl CallProgress {
    /// A reporter whose reports go nowhere.
    pub fn none() -> CallProgress {
        CallProgress {
            notes: None,
            idx: 0,
            sampler: None,
        }
    }

    /// Reports `progress` (in the tool's own unit) of `total`, when known, with a short
    /// text saying what the tool is doing. A `progress` that is not a finite number is
    /// ignored; a `total` that is not a positive finite number is left out; the text is
    /// cut to its first line and to 500 bytes.
    pub fn report(&self, progress: f64, total: Option<f64>, text: Option<&str>) {
        let Some(notes) = &self.notes else {
            return;
        };
        if !progress.is_finite() {
            return;
        }
        let report = Report {
            progress,
            total: total.filter(|t| t.is_finite() && *t > 0.0),
            text: text.map(one_line),
        };
        notes.with_call(self.idx, |c| {
            c.latest = Some(report);
            true
        });
    }

    /// Passes a server's log line to the turn (at most [`MAX_LOGS_PER_CALL`] per call).
    pub(crate) fn log(&self, line: LogLine) {
        self.bounded(|c| c.logs.push(line));
    }

    /// Adds to this call's notes with `add`, while the call is under its cap of
    /// [`MAX_LOGS_PER_CALL`] log lines and events; past it, counts what was dropped.
    /// `false` when the call takes no notes (none are reported, or its result was taken).
    fn bounded(&self, add: impl FnOnce(&mut CallNotes)) -> bool {
        let Some(notes) = &self.notes else {
            return false;
        };
        notes.with_call(self.idx, |c| {
            if c.logs_taken >= MAX_LOGS_PER_CALL {
                c.logs_dropped += 1;
                return false;
            }
            c.logs_taken += 1;
            add(c);
            true
        })
    }

    /// Whether reports go anywhere (a call of a turn's dispatch).
    pub(crate) fn reports(&self) -> bool {
        self.notes.is_some()
    }

    /// Passes an event of the MCP server's own requests made for this call (sampling,
    /// elicitation) to the turn, before the call's result; bounded as log lines are.
    /// Gives the event back when the call takes no notes (none are reported, or its
    /// result was already delivered): it was not passed on.
    pub(crate) fn note(&self, event: Event) -> Option<Event> {
        let mut event = Some(event);
        self.bounded(|c| c.events.extend(event.take()));
        event
    }

    /// The turn's way to the model, for an MCP server's sampling request.
    pub(crate) fn sampler(&self) -> Option<Arc<dyn crate::mcp::sampling::Sampler>> {
        self.sampler.clone()
    }
}

/// The first line of `text`, cut to [`MAX_PROGRESS_TEXT`] bytes.
fn one_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or("");
    crate::text::truncate(line, MAX_PROGRESS_TEXT).to_owned()
}

/// A tool declared to the model but run outside panto (by a durable engine's activity,
/// another service, a person): every call pauses the turn (reason `external`), and the
/// turn is resumed with the call's result (see `Agent::resume`).
#[derive(Debug, Clone)]
pub struct ExternalTool {
    spec: ToolSpec,
}

impl ExternalTool {
    /// An external tool of this name, description and JSON Schema of its parameters.
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        parameters: Value,
    ) -> ExternalTool {
        ExternalTool {
            spec: ToolSpec {
                name: name.into(),
                description: description.into(),
                parameters,
                needs_approval: false,
                external: false,
            },
        }
    }
}

impl Tool for ExternalTool {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }
    fn call(&self, _: Value, _: CancellationToken) -> ToolFuture {
        Box::pin(async { ToolOutput::error("an external tool runs outside panto") })
    }
    fn is_external(&self) -> bool {
        true
    }
}

/// A [`Tool`] made of a spec and an async closure.
pub struct FnTool<F> {
    spec: ToolSpec,
    f: F,
    needs_approval: bool,
}

impl<F, Fut> FnTool<F>
where
    F: Fn(Value, CancellationToken) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ToolOutput> + Send + 'static,
{
    /// A tool of this name, description and JSON Schema of its parameters, running `f`
    /// for each call (with the parsed arguments and the call's cancellation token).
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        parameters: Value,
        f: F,
    ) -> FnTool<F> {
        FnTool {
            spec: ToolSpec {
                name: name.into(),
                description: description.into(),
                parameters,
                needs_approval: false,
                external: false,
            },
            f,
            needs_approval: false,
        }
    }

    /// The same tool, whose calls must be approved before they run (see
    /// [`Tool::needs_approval`]).
    pub fn needs_approval(mut self, yes: bool) -> FnTool<F> {
        self.needs_approval = yes;
        self
    }
}

impl<F, Fut> Tool for FnTool<F>
where
    F: Fn(Value, CancellationToken) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ToolOutput> + Send + 'static,
{
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }
    fn call(&self, arguments: Value, cancel: CancellationToken) -> ToolFuture {
        Box::pin((self.f)(arguments, cancel))
    }
    fn needs_approval(&self) -> bool {
        self.needs_approval
    }
}

#[derive(Default)]
struct HostSlots {
    waiting: HashMap<String, oneshot::Sender<ToolOutput>>,
    answered: HashSet<String>,
}

/// Where results of host-tool calls are submitted from outside the loop (any thread).
/// Cloning shares the same slots.
#[derive(Clone, Default)]
pub struct HostToolResults {
    slots: Arc<Mutex<HostSlots>>,
}

impl std::fmt::Debug for HostToolResults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostToolResults").finish_non_exhaustive()
    }
}

impl HostToolResults {
    /// Answers the host-tool call `call_id`. An id that is not waiting for a result
    /// (unknown, already answered, or given up on after its timeout) is a `tool` error
    /// for this call only; the stream goes on.
    pub fn submit(&self, call_id: &str, output: impl Into<String>, is_error: bool) -> Result<()> {
        self.submit_output(
            call_id,
            ToolOutput {
                output: output.into(),
                is_error,
                parts: Vec::new(),
            },
        )
    }

    /// Answers the host-tool call `call_id` with text and image parts (see
    /// [`ToolOutput::with_parts`]); otherwise as [`HostToolResults::submit`].
    pub fn submit_parts(&self, call_id: &str, parts: Vec<Block>, is_error: bool) -> Result<()> {
        self.submit_output(call_id, ToolOutput::with_parts(parts, is_error))
    }

    fn submit_output(&self, call_id: &str, output: ToolOutput) -> Result<()> {
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(tx) = slots.waiting.remove(call_id) else {
            let why = if slots.answered.contains(call_id) {
                "was already answered"
            } else {
                "is not a pending host-tool call"
            };
            return Err(Error::new(
                ErrorKind::Tool,
                format!("tool call {call_id:?} {why}"),
            ));
        };
        slots.answered.insert(call_id.to_owned());
        // The loop may have given up (timeout, cancel) between our lookup and now; the
        // result is then simply not needed.
        let _ = tx.send(output);
        Ok(())
    }

    fn register(&self, call_id: &str) -> oneshot::Receiver<ToolOutput> {
        let (tx, rx) = oneshot::channel();
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        slots.waiting.insert(call_id.to_owned(), tx);
        rx
    }

    fn forget(&self, call_id: &str) {
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        if slots.waiting.remove(call_id).is_some() {
            slots.answered.insert(call_id.to_owned());
        }
    }
}

/// One call to dispatch, as the model made it.
#[derive(Debug, Clone)]
pub(crate) struct CallRequest {
    pub call_id: String,
    pub name: String,
    /// Parsed arguments, or why the call must not run.
    pub arguments: std::result::Result<Value, String>,
    /// What `tool_call_start` reports: the arguments object, or `None` with the raw
    /// text when the model's arguments were not a JSON object.
    pub shown_arguments: Option<Value>,
    pub shown_raw: Option<String>,
}

/// How a call is answered.
pub(crate) enum Runner {
    Rust(Arc<dyn Tool>),
    Host,
    Refuse(String),
    /// Not dispatched: it has its result already, or waits for an answer (deferred).
    Skip,
}

/// Dispatch settings for one batch.
pub(crate) struct Dispatch<'a> {
    pub message: u32,
    pub concurrency: usize,
    pub timeout: Duration,
    pub max_output_bytes: usize,
    /// Cap on one image of a tool result (`max_message_bytes`).
    pub max_image_bytes: usize,
    pub host: &'a HostToolResults,
    pub cancel: &'a CancellationToken,
    /// The turn's way to the model, for MCP servers' sampling requests.
    pub sampler: Option<Arc<dyn crate::mcp::sampling::Sampler>>,
}

/// The outputs of one batch, in call order, shared with whoever must commit them even
/// if the dispatch itself is dropped half-way (the agent's step guard).
pub(crate) type Outputs = Arc<Mutex<Vec<Option<ToolOutput>>>>;

/// Everything a batch started, stopped when the batch ends for any reason — including
/// its future being dropped mid-await, which is how async Rust cancels: spawned tool
/// tasks are aborted (a dropped `JoinHandle` would only detach them), their cancel token
/// fires, and host calls stop waiting.
struct BatchGuard<'a> {
    cancel: CancellationToken,
    aborts: Vec<tokio::task::AbortHandle>,
    host: &'a HostToolResults,
    call_ids: Vec<&'a str>,
}

impl Drop for BatchGuard<'_> {
    fn drop(&mut self) {
        self.cancel.cancel();
        for a in &self.aborts {
            a.abort();
        }
        for id in &self.call_ids {
            self.host.forget(id);
        }
    }
}

/// Cuts a tool's output at `max` bytes (on a character boundary) and says so at the end,
/// in words the model reads.
pub(crate) fn cap_output(mut out: ToolOutput, max: usize, max_image: usize) -> ToolOutput {
    if !out.parts.is_empty() {
        out = cap_parts(out, max, max_image);
    }
    if out.output.len() <= max {
        return out;
    }
    let total = out.output.len();
    let mut end = max;
    while !out.output.is_char_boundary(end) {
        end -= 1;
    }
    out.output.truncate(end);
    out.output.push_str(&format!(
        "\n[panto: output truncated: the tool produced {total} bytes; only the first {end} are shown]"
    ));
    out
}

/// Caps a result's parts: their text together at `max` bytes (the rest is cut, with a
/// note), each image at `max_image` bytes (a larger one is replaced by a note).
fn cap_parts(mut out: ToolOutput, max: usize, max_image: usize) -> ToolOutput {
    let mut budget = max;
    for part in &mut out.parts {
        match part {
            Block::Text { text } if text.len() > budget => {
                let total = text.len();
                let mut end = budget;
                while !text.is_char_boundary(end) {
                    end -= 1;
                }
                text.truncate(end);
                text.push_str(&format!(
                    "\n[panto: output truncated: this part had {total} bytes; only the first {end} are shown]"
                ));
                budget = 0;
            }
            Block::Text { text } => budget -= text.len(),
            Block::Image(m) if m.size() > max_image => {
                *part = Block::text(format!(
                    "[panto: an image of {} bytes was left out: more than max_message_bytes ({max_image})]",
                    m.size()
                ));
            }
            _ => {}
        }
    }
    out.output = parts_text(&out.parts);
    out
}

/// Runs one message's calls, at most `concurrency` at a time, emitting `tool_call_start`
/// when a call begins and `tool_result` as each finishes; each output lands in
/// `outputs` (call order) as it arrives. On cancellation (or a receiver asking to stop)
/// the calls that did not finish stay `None` and the error is returned.
pub(crate) async fn dispatch(
    d: Dispatch<'_>,
    calls: &[(CallRequest, Runner)],
    outputs: &Outputs,
    emit: Emit<'_>,
) -> Option<Error> {
    let mut running = FuturesUnordered::new();
    let mut next = 0;
    let mut guard = BatchGuard {
        cancel: d.cancel.child_token(),
        aborts: Vec::new(),
        host: d.host,
        call_ids: calls.iter().map(|(r, _)| r.call_id.as_str()).collect(),
    };
    let notes = BatchNotes::new(calls.len());
    let mut failure = None;
    loop {
        while running.len() < d.concurrency && next < calls.len() && failure.is_none() {
            let (req, runner) = &calls[next];
            if matches!(runner, Runner::Skip) {
                next += 1;
                continue;
            }
            if d.cancel.is_cancelled() {
                failure = Some(Error::cancelled());
                break;
            }
            // A host tool whose arguments panto already rejected is answered by panto
            // itself; announcing it as a host call would invite the host to run it.
            let host = matches!(runner, Runner::Host) && req.arguments.is_ok();
            // Register before announcing, so a host answering immediately finds the slot.
            let host_rx = host.then(|| d.host.register(&req.call_id));
            let started = emit(Event::ToolCallStart {
                message: d.message,
                call_id: req.call_id.clone(),
                name: req.name.clone(),
                arguments: req.shown_arguments.clone(),
                arguments_raw: req.shown_raw.clone(),
                host,
            });
            if let Err(e) = started {
                failure = Some(e);
                break;
            }
            let progress = CallProgress {
                notes: Some(notes.clone()),
                idx: next,
                sampler: d.sampler.clone(),
            };
            let fut = start_call(
                req,
                runner,
                host_rx,
                d.timeout,
                guard.cancel.child_token(),
                progress,
            );
            let handle = tokio::spawn(fut);
            guard.aborts.push(handle.abort_handle());
            let idx = next;
            running.push(async move { (idx, handle.await) });
            next += 1;
        }
        if running.is_empty() || failure.is_some() {
            break;
        }
        let due = notes.next_due();
        let finished = tokio::select! {
            biased;
            _ = d.cancel.cancelled() => {
                failure = Some(Error::cancelled());
                break;
            }
            Some(done) = running.next() => Some(done),
            _ = notes.wake.notified() => None,
            _ = tokio::time::sleep_until(due.unwrap_or_else(tokio::time::Instant::now)), if due.is_some() => None,
        };
        let Some((idx, joined)) = finished else {
            if let Err(e) = deliver_notes(&d, calls, &notes, None, emit) {
                failure = Some(e);
                break;
            }
            continue;
        };
        // The call's last report and log lines come before its result.
        if let Err(e) = deliver_notes(&d, calls, &notes, Some(idx), emit) {
            failure = Some(e);
            break;
        }
        let out = match joined {
            Ok(out) => out,
            Err(e) if e.is_panic() => ToolOutput::error(format!(
                "the tool {:?} panicked: {}",
                calls[idx].0.name,
                panic_message(e.into_panic())
            )),
            Err(_) => ToolOutput::error("the tool was aborted"),
        };
        let out = cap_output(out, d.max_output_bytes, d.max_image_bytes);
        let (req, _) = &calls[idx];
        d.host.forget(&req.call_id);
        if let Some(slot) = outputs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_mut(idx)
        {
            *slot = Some(out.clone());
        }
        if let Err(e) = emit(Event::ToolResult {
            message: d.message,
            call_id: req.call_id.clone(),
            name: req.name.clone(),
            output: out.output,
            is_error: out.is_error,
            parts: out.parts,
        }) {
            failure = Some(e);
            break;
        }
    }
    drop(guard);
    failure
}

/// Emits the progress and log events due now (see [`BatchNotes::take_due`]).
fn deliver_notes(
    d: &Dispatch<'_>,
    calls: &[(CallRequest, Runner)],
    notes: &BatchNotes,
    finishing: Option<usize>,
    emit: Emit<'_>,
) -> Result<()> {
    for (idx, logs, report, events) in notes.take_due(finishing) {
        let Some((req, _)) = calls.get(idx) else {
            continue;
        };
        for event in events {
            emit(event)?;
        }
        for line in logs {
            emit(Event::ServerLog {
                server: line.server,
                level: line.level.to_owned(),
                logger: line.logger,
                data: line.data,
            })?;
        }
        if let Some(r) = report {
            emit(Event::ToolProgress {
                message: d.message,
                call_id: req.call_id.clone(),
                name: req.name.clone(),
                progress: r.progress,
                total: r.total,
                text: r.text,
            })?;
        }
    }
    Ok(())
}

fn start_call(
    req: &CallRequest,
    runner: &Runner,
    host_rx: Option<oneshot::Receiver<ToolOutput>>,
    timeout: Duration,
    cancel: CancellationToken,
    progress: CallProgress,
) -> impl Future<Output = ToolOutput> + Send + 'static {
    let name = req.name.clone();
    let work: ToolFuture = match (runner, &req.arguments, host_rx) {
        (Runner::Refuse(why), _, _) => {
            let why = why.clone();
            Box::pin(async move { ToolOutput::error(why) })
        }
        (_, Err(why), _) => {
            let why = why.clone();
            Box::pin(async move { ToolOutput::error(why) })
        }
        (Runner::Host, Ok(_), Some(rx)) => Box::pin(async move {
            rx.await
                .unwrap_or_else(|_| ToolOutput::error("the host-tool call was abandoned"))
        }),
        (Runner::Host, Ok(_), None) => {
            Box::pin(async { ToolOutput::error("the host-tool call has no result slot") })
        }
        (Runner::Rust(tool), Ok(args), _) => {
            tool.call_with_progress(args.clone(), cancel.clone(), progress)
        }
        (Runner::Skip, _, _) => Box::pin(async { ToolOutput::error("the call was not run") }),
    };
    async move {
        tokio::select! {
            biased;
            _ = cancel.cancelled() => ToolOutput::error("the tool call was cancelled"),
            r = tokio::time::timeout(timeout, work) => match r {
                Ok(out) => out,
                Err(_) => {
                    cancel.cancel();
                    ToolOutput::error(format!(
                        "the tool {name:?} timed out after {} ms",
                        timeout.as_millis()
                    ))
                }
            },
        }
    }
}

fn panic_message(p: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "a non-string panic payload".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_request_event_goes_to_the_oldest_call_still_running() {
        use crate::mcp::sampling::Calls;
        let notes = BatchNotes::new(2);
        let call = |idx| CallProgress {
            notes: Some(notes.clone()),
            idx,
            sampler: None,
        };
        let calls = Calls(vec![call(0), call(1)]);
        let event = |outcome: &str| Event::McpElicitationRequest {
            server: "ev".into(),
            message: "m".into(),
            outcome: outcome.into(),
        };
        // Both run: the oldest takes it.
        calls.note(event("accept"));
        // The oldest's result is delivered (it takes no more): the next one takes it.
        let first = notes.take_due(Some(0));
        assert_eq!(first[0].3, vec![event("accept")]);
        assert_eq!(call(0).note(event("late")), Some(event("late")));
        calls.note(event("decline"));
        let second = notes.take_due(Some(1));
        assert_eq!(
            second.iter().find(|d| d.0 == 1).unwrap().3,
            vec![event("decline")]
        );
        // None is left to take it: the event goes nowhere, and nothing fails.
        calls.note(event("cancel"));
        assert!(notes.take_due(None).iter().all(|d| d.3.is_empty()));
        assert_eq!(CallProgress::none().note(event("x")), Some(event("x")));
    }

    #[tokio::test]
    async fn progress_reports_are_checked_coalesced_and_end_with_the_result() {
        let notes = BatchNotes::new(2);
        let p = CallProgress {
            notes: Some(notes.clone()),
            idx: 1,
            sampler: None,
        };
        // Not a finite number: no report.
        p.report(f64::NAN, Some(1.0), None);
        p.report(f64::INFINITY, None, None);
        assert!(notes.take_due(None).is_empty());
        // A total that is not positive is left out; the text is one line, bounded.
        let long = format!("{}\nsecond line", "é".repeat(400));
        p.report(1.0, Some(-3.0), Some(&long));
        let started = tokio::time::Instant::now();
        let due = notes.take_due(None);
        assert_eq!(due.len(), 1);
        let (idx, logs, report, _) = &due[0];
        let report = report.clone().unwrap();
        assert_eq!(
            (*idx, logs.len(), report.progress, report.total),
            (1, 0, 1.0, None)
        );
        let text = report.text.unwrap();
        assert!(text.len() <= MAX_PROGRESS_TEXT && !text.contains('\n') && text.starts_with('é'));
        // Reports within the interval are coalesced: the latest waits, then wins.
        p.report(2.0, Some(f64::INFINITY), None);
        p.report(3.0, Some(4.0), Some("three"));
        let early = notes.take_due(None);
        if started.elapsed() < PROGRESS_INTERVAL {
            assert!(early.is_empty(), "a report within 100 ms of the last one");
            assert!(notes.next_due().is_some());
        }
        // The call's result is next: its latest report goes now, then nothing more.
        let last = notes.take_due(Some(1));
        let report = last
            .iter()
            .chain(&early)
            .find_map(|(_, _, r, _)| r.clone())
            .unwrap();
        assert_eq!(
            (report.progress, report.total, report.text.as_deref()),
            (3.0, Some(4.0), Some("three"))
        );
        p.report(5.0, None, None);
        p.log(LogLine {
            server: "s".into(),
            level: "error",
            logger: None,
            data: "late".into(),
        });
        assert!(notes.take_due(None).is_empty());
        assert!(notes.next_due().is_none());
        // A reporter outside a turn reports nowhere.
        CallProgress::none().report(1.0, None, None);
        assert!(!CallProgress::none().reports());
    }

    #[test]
    fn log_lines_of_a_call_are_bounded() {
        let notes = BatchNotes::new(1);
        let p = CallProgress {
            notes: Some(notes.clone()),
            idx: 0,
            sampler: None,
        };
        for i in 0..MAX_LOGS_PER_CALL + 50 {
            p.log(LogLine {
                server: "s".into(),
                level: "error",
                logger: None,
                data: i.to_string(),
            });
        }
        let due = notes.take_due(Some(0));
        let logs = &due[0].1;
        assert_eq!(logs.len(), MAX_LOGS_PER_CALL);
        assert_eq!(
            logs.last().unwrap().data,
            (MAX_LOGS_PER_CALL - 1).to_string()
        );
    }

    #[test]
    fn submit_unknown_or_twice_is_a_tool_error() {
        let host = HostToolResults::default();
        assert_eq!(
            host.submit("nope", "x", false).unwrap_err().kind,
            ErrorKind::Tool
        );
        let _rx = host.register("a");
        host.submit("a", "x", false).unwrap();
        let again = host.submit("a", "x", false).unwrap_err();
        assert_eq!(again.kind, ErrorKind::Tool);
        assert!(again.message.contains("already answered"));
    }
}
