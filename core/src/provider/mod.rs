//! Owns the provider wire formats: turning SSE events of one response into panto
//! [`Event`]s (decoding) and the conversation into a request body (encoding), for
//! OpenAI Chat Completions (and compatible servers) and Anthropic Messages. Pure: no
//! I/O, no timers — `http` feeds it bytes, `agent` drives it.
//!
//! Both decoders share `Assembly`, which numbers blocks, emits the block lifecycle
//! events, enforces [`DecodeLimits`] and assembles the final assistant [`Message`].
//!
//! Whatever a server sends, decoding never panics and never holds more than the limits
//! allow; defects that do not change the meaning of an answer are tolerated rather than
//! thrown away with the answer: duplicate JSON keys (the last one wins), a UTF-16
//! surrogate pair split across two events (joined; a lone surrogate becomes U+FFFD),
//! usage figures that are not counts (ignored). The strict parse stays the fast path;
//! the repair runs only for an event it rejected.

pub mod anthropic;
mod json_scan;
pub mod openai;

use std::borrow::Cow;
use std::collections::HashSet;

use serde::de::{IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::Value;

use crate::config::{Compat, Reasoning};
use crate::error::{Error, ErrorKind, Result};
use crate::event::{BlockKind, DeltaKind, Event};
use crate::message::{Block, Message, Role, StopReason, Usage};
use crate::sse::SseEvent;

/// Which wire format a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderKind {
    OpenAi,
    Anthropic,
}

impl ProviderKind {
    pub fn parse(name: &str) -> Option<ProviderKind> {
        match name {
            "openai" => Some(ProviderKind::OpenAi),
            "anthropic" => Some(ProviderKind::Anthropic),
            _ => None,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::OpenAi => "openai",
            ProviderKind::Anthropic => "anthropic",
        }
    }
}

/// A tool as declared to the model.
#[derive(Debug, Clone, PartialEq, serde::Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default = "empty_object_schema")]
    pub parameters: Value,
}

pub(crate) fn empty_object_schema() -> Value {
    serde_json::json!({"type": "object", "properties": {}})
}

/// Everything one request needs besides transport settings.
#[derive(Debug, Clone, Copy)]
pub struct RequestParams<'a> {
    pub model: &'a str,
    pub system: Option<&'a str>,
    pub max_tokens: Option<u32>,
    pub temperature: Option<f64>,
    pub tools: &'a [ToolSpec],
    pub messages: &'a [Message],
    /// OpenAI only: send the output limit as `max_completion_tokens` (what OpenAI's own
    /// API wants; its reasoning models reject `max_tokens`) instead of `max_tokens` (what
    /// compatible servers know). [`uses_max_completion_tokens`] decides from the URL.
    pub max_completion_tokens: bool,
}

/// Whether an OpenAI base URL is OpenAI's own API (or Azure OpenAI), which take
/// `max_completion_tokens`; compatible servers (vLLM, Ollama, llama.cpp…) keep `max_tokens`.
pub fn uses_max_completion_tokens(base_url: &str) -> bool {
    let (host, _) = url_host(base_url);
    host == "api.openai.com" || host.ends_with(".openai.azure.com")
}

/// The host of `base_url`, lowercased, and its port if one is written: what decides
/// which server's own request fields apply. Ends where a URL parser ends the authority
/// (`/`, `\`, `?`, `#`) and skips any user info, so `https://API.OpenAI.com` is
/// OpenAI's API and `https://api.openai.com@other.test` is not.
pub(crate) fn url_host(base_url: &str) -> (String, Option<&str>) {
    let rest = base_url.split_once("://").map_or(base_url, |(_, r)| r);
    let authority = rest.split(['/', '\\', '?', '#']).next().unwrap_or("");
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let (host, port) = match host_port.rsplit_once(':') {
        Some((h, p)) if !h.is_empty() && !p.contains(']') => (h, Some(p)),
        _ => (host_port, None),
    };
    (host.to_ascii_lowercase(), port)
}

/// Builds the JSON request body for `kind`, with the [`RequestOptions`] defaults (no
/// reasoning control, no cache breakpoints, a generic OpenAI-compatible server).
pub fn request_body(kind: ProviderKind, params: &RequestParams<'_>) -> Value {
    request_body_with(kind, params, &RequestOptions::default())
}

/// What the agent adds to a request beyond the conversation: the conversation controls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestOptions {
    /// Reasoning control for this request (`None`: send nothing, the provider decides).
    pub reasoning: Option<Reasoning>,
    /// Anthropic: cache breakpoints on the system prompt, the tool list and the latest
    /// message.
    pub prompt_caching: bool,
    /// OpenAI-compatible: which server's own fields to use (resolved, never `Auto`).
    pub compat: Compat,
}

impl Default for RequestOptions {
    fn default() -> Self {
        RequestOptions {
            reasoning: None,
            prompt_caching: false,
            compat: Compat::Generic,
        }
    }
}

/// Builds the JSON request body for `kind` with the conversation controls of `options`.
pub fn request_body_with(
    kind: ProviderKind,
    params: &RequestParams<'_>,
    options: &RequestOptions,
) -> Value {
    match kind {
        ProviderKind::OpenAi => openai::request_body(params, options),
        ProviderKind::Anthropic => anthropic::request_body(params, options),
    }
}

/// Where the event callback sends decoded events; an error stops decoding.
pub type Emit<'a> = &'a mut (dyn FnMut(Event) -> Result<()> + Send);

/// Whether a response is over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    Continue,
    Finished,
}

/// One assistant response as decoded.
#[derive(Debug, Clone, PartialEq)]
pub struct DecodedMessage {
    pub message: Message,
    pub stop_reason: StopReason,
    pub usage: Usage,
    pub model: String,
    pub response_id: Option<String>,
    /// Tool calls whose block the provider never closed (cut off, e.g. by max_tokens):
    /// they stay in history for the provider's sake but are never executed.
    pub cut_off_calls: Vec<String>,
}

/// Caps on what one response may make panto hold, whatever the server sends. The SSE
/// parser caps one event (`max_event_bytes`); these cap the sum over a response, which a
/// server could otherwise grow without bound with many small events. Exceeding any of
/// them is a `protocol` error naming the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeLimits {
    /// Bytes of text, reasoning, tool-call arguments, ids, names and signatures in one
    /// assistant message.
    pub max_message_bytes: usize,
    /// Content blocks in one message (for Anthropic, also blocks of types panto skips).
    pub max_blocks: usize,
    /// Tool calls in one message.
    pub max_tool_calls: usize,
}

impl Default for DecodeLimits {
    /// 32 MiB of content, 1024 blocks, 256 tool calls: far above any real answer.
    fn default() -> Self {
        DecodeLimits {
            max_message_bytes: 32 * 1024 * 1024,
            max_blocks: 1024,
            max_tool_calls: 256,
        }
    }
}

/// The streaming decoder of one response, for either provider.
#[derive(Debug)]
pub enum Decoder {
    OpenAi(openai::Decoder),
    Anthropic(anthropic::Decoder),
}

impl Decoder {
    /// A decoder with the default [`DecodeLimits`].
    pub fn new(kind: ProviderKind, message: u32) -> Decoder {
        Decoder::with_limits(kind, message, DecodeLimits::default())
    }

    pub fn with_limits(kind: ProviderKind, message: u32, limits: DecodeLimits) -> Decoder {
        let asm = Assembly::new(message, limits);
        match kind {
            ProviderKind::OpenAi => Decoder::OpenAi(openai::Decoder::with_assembly(asm)),
            ProviderKind::Anthropic => Decoder::Anthropic(anthropic::Decoder::with_assembly(asm)),
        }
    }

    /// Decodes one SSE event.
    pub fn on_sse(&mut self, ev: &SseEvent<'_>, emit: Emit<'_>) -> Result<Progress> {
        match self {
            Decoder::OpenAi(d) => d.on_sse(ev, emit),
            Decoder::Anthropic(d) => d.on_sse(ev, emit),
        }
    }

    /// The body ended. Completes the message if the provider had said it was done,
    /// else fails with `incomplete`.
    pub fn on_eof(&mut self, emit: Emit<'_>) -> Result<()> {
        match self {
            Decoder::OpenAi(d) => d.on_eof(emit),
            Decoder::Anthropic(d) => d.on_eof(emit),
        }
    }

    /// True once any event of this response was emitted: from then on a failure must not
    /// be retried silently (the caller has seen part of the answer).
    pub fn emitted_content(&self) -> bool {
        self.assembly().emitted_content()
    }

    pub fn is_finished(&self) -> bool {
        self.assembly().finished
    }

    fn assembly(&self) -> &Assembly {
        match self {
            Decoder::OpenAi(d) => &d.asm,
            Decoder::Anthropic(d) => &d.asm,
        }
    }

    /// The decoded message; `None` until the response finished.
    pub fn into_message(self) -> Option<DecodedMessage> {
        match self {
            Decoder::OpenAi(d) => d.asm.into_decoded(),
            Decoder::Anthropic(d) => d.asm.into_decoded(),
        }
    }
}

/// Decodes a response that arrived as one JSON body although a stream was asked for
/// (LiteLLM's `/v1/messages`, servers that ignore `stream: true`): a complete chat
/// completion (`"object": "chat.completion"`) for [`ProviderKind::OpenAi`], a complete
/// message (`"type": "message"`) for [`ProviderKind::Anthropic`].
///
/// Emits exactly the events a stream of the same message would have produced, with one
/// `content_delta` per block carrying its whole text or arguments, and returns the
/// message. `Ok(None)` when `body` is not such a message (an error body, another
/// provider's format, not JSON): nothing was emitted then.
pub fn decode_complete_body(
    kind: ProviderKind,
    message: u32,
    body: &str,
    limits: DecodeLimits,
    emit: Emit<'_>,
) -> Result<Option<DecodedMessage>> {
    // The body is turned into the SSE events of the equivalent stream and fed to the
    // streaming decoder: one code path, so both forms decode alike.
    let Some(value) = parse_value_lossy(body) else {
        return Ok(None);
    };
    let events = match kind {
        ProviderKind::OpenAi => openai::complete_body_events(value),
        ProviderKind::Anthropic => anthropic::complete_body_events(value),
    };
    let Some(events) = events else {
        return Ok(None);
    };
    let mut decoder = Decoder::with_limits(kind, message, limits);
    for data in &events {
        let ev = SseEvent {
            event: "message",
            data,
            id: "",
        };
        if decoder.on_sse(&ev, emit)? == Progress::Finished {
            break;
        }
    }
    if !decoder.is_finished() {
        decoder.on_eof(emit)?;
    }
    Ok(decoder.into_message())
}

#[derive(Debug, Default)]
struct PartialBlock {
    kind: Option<BlockKind>,
    text: String,
    signature: Option<String>,
    redacted: Option<String>,
    /// Tool-call input given whole at block start (Anthropic proxies), used unless
    /// arguments stream.
    preset: Option<String>,
    call_id: String,
    name: String,
    /// A UTF-16 high surrogate that ended the last delta, waiting for the low half at
    /// the start of the next one.
    pending_high: Option<u16>,
    details_sent: bool,
    closed: bool,
    cut_off: bool,
    content: Option<Block>,
}

/// Shared state of one response being assembled: block numbering, block lifecycle
/// events, limits, the final message.
#[derive(Debug, Default)]
pub(crate) struct Assembly {
    message: u32,
    limits: DecodeLimits,
    started: bool,
    finished: bool,
    pub(crate) model: String,
    pub(crate) response_id: Option<String>,
    blocks: Vec<PartialBlock>,
    /// Bytes held for the message, checked against `limits.max_message_bytes`.
    bytes: usize,
    tool_calls: usize,
    /// Call ids given out in this message: a repeated id gets a fresh one, so every
    /// call is answered and addressed on its own.
    call_ids: HashSet<String>,
    pub(crate) usage: Usage,
    stop: Option<StopReason>,
    /// Provider blocks kept verbatim ([`Block::Opaque`]), each with the number of
    /// modelled blocks opened before it, which places it in the final message. They get
    /// no events, so the event block numbers stay those of the modelled blocks.
    opaque: Vec<(usize, Value)>,
}

impl Assembly {
    fn new(message: u32, limits: DecodeLimits) -> Assembly {
        Assembly {
            message,
            limits,
            ..Assembly::default()
        }
    }

    pub(crate) fn limits(&self) -> DecodeLimits {
        self.limits
    }

    fn emitted_content(&self) -> bool {
        self.started
    }

    pub(crate) fn started_flag(&self) -> bool {
        self.started
    }

    /// Accounts for `n` more bytes held for this message.
    fn charge(bytes: &mut usize, limit: usize, n: usize) -> Result<()> {
        *bytes = bytes.saturating_add(n);
        if *bytes > limit {
            return Err(Error::protocol(format!(
                "the response exceeds max_message_bytes ({limit} bytes of text, arguments, \
                 ids and signatures in one message)"
            )));
        }
        Ok(())
    }

    fn start(&mut self, emit: Emit<'_>) -> Result<()> {
        if self.started {
            return Ok(());
        }
        self.started = true;
        emit(Event::MessageStart {
            message: self.message,
            model: self.model.clone(),
            response_id: self.response_id.clone(),
        })
    }

    fn open(&mut self, kind: BlockKind, emit: Emit<'_>) -> Result<usize> {
        if self.blocks.len() >= self.limits.max_blocks {
            return Err(Error::protocol(format!(
                "the response has more than max_blocks ({}) content blocks",
                self.limits.max_blocks
            )));
        }
        if kind == BlockKind::ToolCall {
            if self.tool_calls >= self.limits.max_tool_calls {
                return Err(Error::protocol(format!(
                    "the response has more than max_tool_calls ({}) tool calls",
                    self.limits.max_tool_calls
                )));
            }
            self.tool_calls += 1;
        }
        self.start(emit)?;
        let idx = self.blocks.len();
        self.blocks.push(PartialBlock {
            kind: Some(kind),
            ..PartialBlock::default()
        });
        emit(Event::BlockStart {
            message: self.message,
            block: idx as u32,
            kind,
        })?;
        Ok(idx)
    }

    /// Appends a fragment to block `idx`. `marked`: the text comes from a repaired event
    /// and may carry lone-surrogate markers (see [`parse_tolerant`]).
    fn delta(
        &mut self,
        idx: usize,
        kind: DeltaKind,
        text: &str,
        marked: bool,
        emit: Emit<'_>,
    ) -> Result<()> {
        let message = self.message;
        let Some(b) = self.blocks.get_mut(idx).filter(|b| !b.closed) else {
            return Ok(());
        };
        if text.is_empty() {
            return Ok(());
        }
        // A fragment of another kind than its block (a proxy sending a text_delta into a
        // tool_use block, a thinking_delta into redacted thinking) is dropped like an
        // unknown delta type: appending it would corrupt the block and emit a
        // content_delta that contradicts its block_start.
        let fits = match b.kind {
            Some(BlockKind::Text) => kind == DeltaKind::Text,
            Some(BlockKind::Reasoning) => kind == DeltaKind::Reasoning && b.redacted.is_none(),
            Some(BlockKind::ToolCall) => kind == DeltaKind::ToolArgs,
            None => false,
        };
        if !fits {
            return Ok(());
        }
        let resolved;
        let text = if marked || b.pending_high.is_some() {
            let mut out = String::with_capacity(text.len() + 4);
            resolve_markers(text, marked, &mut b.pending_high, &mut out);
            resolved = out;
            if resolved.is_empty() {
                return Ok(());
            }
            resolved.as_str()
        } else {
            text
        };
        Assembly::charge(&mut self.bytes, self.limits.max_message_bytes, text.len())?;
        b.text.push_str(text);
        emit(Event::ContentDelta {
            message,
            block: idx as u32,
            kind,
            text: text.to_owned(),
        })
    }

    /// A high surrogate still waiting for its low half when the block ends is a lone
    /// one: it becomes U+FFFD, sent as a last delta so deltas still add up to the block.
    fn flush_pending(&mut self, idx: usize, emit: Emit<'_>) -> Result<()> {
        let message = self.message;
        let Some(b) = self.blocks.get_mut(idx) else {
            return Ok(());
        };
        if b.pending_high.take().is_none() {
            return Ok(());
        }
        let kind = match b.kind {
            Some(BlockKind::Text) => DeltaKind::Text,
            Some(BlockKind::Reasoning) => DeltaKind::Reasoning,
            _ => DeltaKind::ToolArgs,
        };
        b.text.push(char::REPLACEMENT_CHARACTER);
        emit(Event::ContentDelta {
            message,
            block: idx as u32,
            kind,
            text: char::REPLACEMENT_CHARACTER.to_string(),
        })
    }

    /// Records a tool call's id and/or name (never overwriting with later values) and
    /// announces them once both are known. An id already used by another call of this
    /// message is replaced by a fresh one.
    fn tool_ids(
        &mut self,
        idx: usize,
        id: &str,
        name: &str,
        marked: bool,
        emit: Emit<'_>,
    ) -> Result<()> {
        let message = self.message;
        let limit = self.limits.max_message_bytes;
        let Some(b) = self.blocks.get_mut(idx) else {
            return Ok(());
        };
        if b.call_id.is_empty() && !id.is_empty() {
            Assembly::charge(&mut self.bytes, limit, id.len())?;
            b.call_id = claim_id(&mut self.call_ids, &clean(id, marked), idx);
        }
        if b.name.is_empty() && !name.is_empty() {
            Assembly::charge(&mut self.bytes, limit, name.len())?;
            b.name = clean(name, marked).into_owned();
        }
        if !b.details_sent && !b.call_id.is_empty() && !b.name.is_empty() {
            b.details_sent = true;
            emit(Event::ToolDetails {
                message,
                block: idx as u32,
                call_id: b.call_id.clone(),
                name: b.name.clone(),
            })?;
        }
        Ok(())
    }

    /// Appends to a reasoning block's signature (never emitted as a delta).
    fn signature(&mut self, idx: usize, part: &str, marked: bool) -> Result<()> {
        let Some(b) = self.blocks.get_mut(idx).filter(|b| !b.closed) else {
            return Ok(());
        };
        if b.kind != Some(BlockKind::Reasoning) || b.redacted.is_some() {
            return Ok(());
        }
        Assembly::charge(&mut self.bytes, self.limits.max_message_bytes, part.len())?;
        b.signature
            .get_or_insert_with(String::new)
            .push_str(&clean(part, marked));
        Ok(())
    }

    /// Marks a reasoning block as redacted, with its opaque data.
    fn redacted(&mut self, idx: usize, data: &str, marked: bool) -> Result<()> {
        Assembly::charge(&mut self.bytes, self.limits.max_message_bytes, data.len())?;
        if let Some(b) = self.blocks.get_mut(idx) {
            b.redacted = Some(clean(data, marked).into_owned());
        }
        Ok(())
    }

    /// Keeps a tool call's input given whole at block start, for [`Assembly::use_preset`].
    fn preset(&mut self, idx: usize, input: String) -> Result<()> {
        Assembly::charge(&mut self.bytes, self.limits.max_message_bytes, input.len())?;
        if let Some(b) = self.blocks.get_mut(idx) {
            b.preset = Some(input);
        }
        Ok(())
    }

    /// Streamed arguments supersede any input given at block start.
    fn drop_preset(&mut self, idx: usize) {
        if let Some(b) = self.blocks.get_mut(idx) {
            b.preset = None;
        }
    }

    /// Sends a preset input as the block's one arguments delta.
    fn use_preset(&mut self, idx: usize, emit: Emit<'_>) -> Result<()> {
        let Some(input) = self.blocks.get_mut(idx).and_then(|b| b.preset.take()) else {
            return Ok(());
        };
        // Already charged when it was kept.
        self.bytes = self.bytes.saturating_sub(input.len());
        self.delta(idx, DeltaKind::ToolArgs, &input, false, emit)
    }

    fn close(&mut self, idx: usize, cut_off: bool, emit: Emit<'_>) -> Result<()> {
        let message = self.message;
        if self.blocks.get(idx).is_none_or(|b| b.closed) {
            return Ok(());
        }
        self.flush_pending(idx, emit)?;
        let Some(b) = self.blocks.get_mut(idx) else {
            return Ok(());
        };
        b.closed = true;
        b.cut_off = cut_off;
        b.preset = None;
        let content = match b.kind {
            Some(BlockKind::ToolCall) => {
                if b.call_id.is_empty() {
                    // Some servers never send an id; the history still needs one.
                    b.call_id = claim_id(&mut self.call_ids, &format!("call_{message}_{idx}"), idx);
                }
                if !b.details_sent {
                    b.details_sent = true;
                    emit(Event::ToolDetails {
                        message,
                        block: idx as u32,
                        call_id: b.call_id.clone(),
                        name: b.name.clone(),
                    })?;
                }
                let (arguments, arguments_raw) = parse_arguments(std::mem::take(&mut b.text));
                Block::ToolCall {
                    call_id: b.call_id.clone(),
                    name: b.name.clone(),
                    arguments,
                    arguments_raw,
                }
            }
            Some(BlockKind::Reasoning) => match b.redacted.take() {
                Some(data) => Block::RedactedReasoning { data },
                None => Block::Reasoning {
                    text: std::mem::take(&mut b.text),
                    signature: b.signature.take().filter(|s| !s.is_empty()),
                },
            },
            _ => Block::Text {
                text: std::mem::take(&mut b.text),
            },
        };
        b.content = Some(content.clone());
        emit(Event::BlockComplete {
            message,
            block: idx as u32,
            content,
        })
    }

    /// Keeps a provider block panto does not model, to be sent back verbatim; returns
    /// its slot for [`Assembly::opaque_mut`].
    pub(crate) fn opaque(&mut self, block: Value, size: usize) -> Result<usize> {
        if self.blocks.len() + self.opaque.len() >= self.limits.max_blocks {
            return Err(Error::protocol(format!(
                "the response has more than max_blocks ({}) content blocks",
                self.limits.max_blocks
            )));
        }
        Assembly::charge(&mut self.bytes, self.limits.max_message_bytes, size)?;
        self.opaque.push((self.blocks.len(), block));
        Ok(self.opaque.len() - 1)
    }

    /// A kept provider block, to extend with its deltas; `more` bytes are charged.
    pub(crate) fn opaque_mut(&mut self, slot: usize, more: usize) -> Result<Option<&mut Value>> {
        Assembly::charge(&mut self.bytes, self.limits.max_message_bytes, more)?;
        Ok(self.opaque.get_mut(slot).map(|(_, v)| v))
    }

    fn close_all(&mut self, cut_off: bool, emit: Emit<'_>) -> Result<()> {
        for idx in 0..self.blocks.len() {
            self.close(idx, cut_off, emit)?;
        }
        Ok(())
    }

    fn has_tool_calls(&self) -> bool {
        self.tool_calls > 0
    }

    /// Ends the message: every block still open is closed as cut off, then
    /// `message_end`.
    fn finish(&mut self, stop: StopReason, emit: Emit<'_>) -> Result<()> {
        if self.finished {
            return Ok(());
        }
        self.start(emit)?;
        self.close_all(true, emit)?;
        self.finished = true;
        self.stop = Some(stop.clone());
        emit(Event::MessageEnd {
            message: self.message,
            stop_reason: stop,
            usage: self.usage,
        })
    }

    fn into_decoded(self) -> Option<DecodedMessage> {
        if !self.finished {
            return None;
        }
        let mut cut_off_calls = Vec::new();
        let mut content = Vec::with_capacity(self.blocks.len() + self.opaque.len());
        let mut opaque = self.opaque.into_iter().peekable();
        for (i, b) in self.blocks.into_iter().enumerate() {
            while let Some((_, block)) = opaque.next_if(|(at, _)| *at <= i) {
                content.push(Block::Opaque {
                    provider: ProviderKind::Anthropic.as_str().to_owned(),
                    block,
                });
            }
            let Some(block) = b.content else { continue };
            if let Block::ToolCall { call_id, .. } = &block {
                if b.cut_off {
                    cut_off_calls.push(call_id.clone());
                }
            }
            content.push(block);
        }
        content.extend(opaque.map(|(_, block)| Block::Opaque {
            provider: ProviderKind::Anthropic.as_str().to_owned(),
            block,
        }));
        Some(DecodedMessage {
            message: Message {
                role: Role::Assistant,
                content,
            },
            stop_reason: self.stop.unwrap_or(StopReason::EndTurn),
            usage: self.usage,
            model: self.model,
            response_id: self.response_id,
            cut_off_calls,
        })
    }
}

/// `id` if no other call of the message has it, else `<id>_<block>` (with a further
/// counter in the unlikely case that is taken too). Records the result as used.
fn claim_id(used: &mut HashSet<String>, id: &str, block: usize) -> String {
    if used.insert(id.to_owned()) {
        return id.to_owned();
    }
    let mut fresh = format!("{id}_{block}");
    let mut n = 0u64;
    while !used.insert(fresh.clone()) {
        n += 1;
        fresh = format!("{id}_{block}_{n}");
    }
    fresh
}

/// `""` (a call without parameters) means `{}`; text that is not JSON is kept raw. Lone
/// UTF-16 surrogates escaped inside otherwise valid arguments become U+FFFD rather than
/// making the call unusable.
fn parse_arguments(raw: String) -> (Option<Value>, Option<String>) {
    if raw.trim().is_empty() {
        return (Some(Value::Object(Default::default())), None);
    }
    match parse_value_lossy(&raw) {
        Some(v) => (Some(v), None),
        None => (None, Some(raw)),
    }
}

/// What an error body says: (message, provider code). Understands
/// `{"error":{"type":…,"code":…,"message":…}}` (Anthropic adds `"type":"error"` around
/// it), `{"error":"…"}` (Ollama, vLLM) and `{"message":"…"}`.
pub(crate) fn describe_error_body(body: &str) -> (Option<String>, Option<String>) {
    let Some(Value::Object(mut parsed)) = parse_value_lossy(body) else {
        return (None, None);
    };
    let text = |v: Option<Value>| match v {
        Some(Value::String(s)) if !s.is_empty() => Some(s),
        _ => None,
    };
    match parsed.remove("error") {
        Some(Value::Object(mut detail)) => {
            let code = match detail.remove("code") {
                Some(Value::String(s)) if !s.is_empty() => Some(s),
                Some(Value::Number(n)) => Some(n.to_string()),
                _ => None,
            }
            .or_else(|| text(detail.remove("type")));
            (text(detail.remove("message")), code)
        }
        Some(Value::String(message)) if !message.is_empty() => (Some(message), None),
        _ => (text(parsed.remove("message")), None),
    }
}

/// An error payload that arrived inside a 200 stream.
pub(crate) fn stream_error(data: &str) -> Error {
    let (message, code) = describe_error_body(data);
    let retryable = matches!(
        code.as_deref(),
        Some("overloaded_error" | "api_error" | "server_error" | "internal_server_error")
    );
    Error::new(
        ErrorKind::Provider,
        format!(
            "the provider reported an error mid-stream: {}",
            message.unwrap_or_else(|| truncate(data, 300).into())
        ),
    )
    .with_retryable(retryable)
    .with_provider_code(code)
}

/// An HTTP error answer (non-2xx) → typed error.
pub fn http_error(status: u16, body: &str) -> Error {
    let (message, code) = describe_error_body(body);
    let kind = ErrorKind::from_status(status);
    let quota = matches!(
        code.as_deref(),
        Some("insufficient_quota" | "enforced_spend_limit_reached" | "billing_hard_limit_reached")
    ) || body.contains("enforced_spend_limit_reached");
    let retryable = matches!(status, 408 | 409 | 429 | 500..=599) && !quota;
    let detail = message.unwrap_or_else(|| {
        if body.trim().is_empty() {
            "no error body".into()
        } else {
            truncate(body.trim(), 300).into()
        }
    });
    Error::new(kind, format!("HTTP {status}: {detail}"))
        .with_status(status)
        .with_retryable(retryable)
        .with_provider_code(code)
}

pub(crate) fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

pub(crate) fn protocol_json_error(what: &str, e: serde_json::Error) -> Error {
    Error::protocol(format!("malformed {what}: {e}"))
}

// ------------------------------------------------------------- tolerant parsing
//
// The strict, borrowing serde parse is the fast path and runs first. Only when it fails
// is the event repaired and parsed again: JSON gateways written in JavaScript split a
// UTF-16 surrogate pair across two events (`"\ud83d"`, then `"\ude00"`), which the
// official SDKs accept and serde_json refuses; some servers repeat a key, which serde's
// derived structs refuse. Neither should throw away an answer already streamed.

/// Parses `data` as `T`, strictly if possible, else from a repaired copy kept in
/// `scratch`: lone surrogate escapes rewritten (see [`repair_surrogates`]), duplicate
/// keys resolved — the last one wins, as in a `serde_json::Value`. Returns whether the
/// repaired copy was used: its strings may then carry surrogate markers, which
/// [`resolve_markers`] (for deltas) and [`clean`] (for other strings) turn back into
/// text. An event that stays malformed fails with the strict parse's error.
pub(crate) fn parse_tolerant<'a, T: Deserialize<'a>>(
    data: &'a str,
    scratch: &'a mut String,
    what: &str,
) -> Result<(T, bool)> {
    let strict = match serde_json::from_str::<T>(data) {
        Ok(v) => return Ok((v, false)),
        Err(e) => e,
    };
    let repaired = repair_surrogates(data, true);
    let Ok(value) = serde_json::from_str::<Value>(repaired.as_deref().unwrap_or(data)) else {
        return Err(protocol_json_error(what, strict));
    };
    *scratch = value.to_string();
    let scratch: &'a String = scratch;
    serde_json::from_str::<T>(scratch)
        .map(|v| (v, true))
        .map_err(|_| protocol_json_error(what, strict))
}

/// Parses JSON text into a `Value`, lone surrogates decoded as U+FFFD; `None` if it is
/// not JSON.
pub(crate) fn parse_value_lossy(text: &str) -> Option<Value> {
    match serde_json::from_str::<Value>(text) {
        Ok(v) => Some(v),
        Err(_) => serde_json::from_str(&repair_surrogates(text, false)?).ok(),
    }
}

/// Lead of a marker standing for a lone high (leading) surrogate.
const HIGH_MARK: char = '\u{FFFE}';
/// Lead of a marker standing for a lone low (trailing) surrogate.
const LOW_MARK: char = '\u{FFFF}';
/// Marker payload digits: the noncharacters U+FDD0..=U+FDEF, 5 bits each.
const MARK_DIGIT0: u32 = 0xFDD0;

/// Rewrites the lone UTF-16 surrogate escapes of JSON text (a `\uD800`–`\uDBFF` not
/// followed by a `\uDC00`–`\uDFFF`, or such a low one alone) so that serde_json accepts
/// it. With `mark`, a lone high surrogate ending a string and a lone low one starting a
/// string — the halves of a pair split across two events — become a marker (a lead
/// noncharacter and two payload noncharacters encoding the surrogate) so the decoder can
/// join them; every other lone surrogate becomes U+FFFD. The noncharacters U+FFFE and
/// U+FFFF already in the text become U+FFFD, so that every lead in the result is a
/// marker. `None` when there is nothing to rewrite.
fn repair_surrogates(data: &str, mark: bool) -> Option<String> {
    let b = data.as_bytes();
    let mut out: Option<String> = None;
    let mut copied = 0;
    let mut i = 0;
    let mut in_string = false;
    let mut string_start = 0;
    while i < b.len() {
        let replace: Option<(usize, [char; 3], usize)> = match b[i] {
            b'"' => {
                in_string = !in_string;
                string_start = i + 1;
                i += 1;
                continue;
            }
            b'\\' if in_string => {
                let (Some(b'u'), Some(unit)) = (b.get(i + 1), hex4(b, i + 2)) else {
                    i += 2; // a one-character escape, `\"` and `\\` included
                    continue;
                };
                let end = i + 6;
                match unit {
                    0xD800..=0xDBFF => {
                        let low = (b.get(end) == Some(&b'\\') && b.get(end + 1) == Some(&b'u'))
                            .then(|| hex4(b, end + 2))
                            .flatten()
                            .filter(|l| (0xDC00..=0xDFFF).contains(l));
                        if low.is_some() {
                            i = end + 6;
                            continue;
                        }
                        if mark && b.get(end) == Some(&b'"') {
                            Some((i, marker(HIGH_MARK, unit), end))
                        } else {
                            Some((i, replacement(), end))
                        }
                    }
                    0xDC00..=0xDFFF => {
                        if mark && i == string_start {
                            Some((i, marker(LOW_MARK, unit), end))
                        } else {
                            Some((i, replacement(), end))
                        }
                    }
                    0xFFFE | 0xFFFF => Some((i, replacement(), end)),
                    _ => {
                        i = end;
                        continue;
                    }
                }
            }
            // U+FFFE / U+FFFF written as raw UTF-8.
            0xEF if b.get(i + 1) == Some(&0xBF) && matches!(b.get(i + 2), Some(0xBE | 0xBF)) => {
                Some((i, replacement(), i + 3))
            }
            _ => {
                i += 1;
                continue;
            }
        };
        if let Some((at, chars, next)) = replace {
            let o = out.get_or_insert_with(|| String::with_capacity(data.len() + 16));
            // `at` is an ASCII backslash or the lead byte of a char: a char boundary.
            o.push_str(data.get(copied..at).unwrap_or(""));
            for c in chars.into_iter().filter(|c| *c != '\0') {
                o.push(c);
            }
            copied = next;
            i = next;
        }
    }
    let mut o = out?;
    o.push_str(data.get(copied..).unwrap_or(""));
    Some(o)
}

fn hex4(b: &[u8], at: usize) -> Option<u16> {
    let digits = b.get(at..at.checked_add(4)?)?;
    let s = std::str::from_utf8(digits).ok()?;
    if !s.bytes().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    u16::from_str_radix(s, 16).ok()
}

fn replacement() -> [char; 3] {
    [char::REPLACEMENT_CHARACTER, '\0', '\0']
}

fn marker(lead: char, unit: u16) -> [char; 3] {
    let digit = |bits: u16| char::from_u32(MARK_DIGIT0 + u32::from(bits & 0x1F)).unwrap_or('\0');
    [lead, digit(unit >> 5), digit(unit)]
}

/// Reads a marker at the start of `s`: (is high, surrogate, rest).
fn take_marker(s: &str) -> Option<(bool, u16, &str)> {
    let mut it = s.chars();
    let high = match it.next()? {
        HIGH_MARK => true,
        LOW_MARK => false,
        _ => return None,
    };
    let digit = |c: char| {
        let v = u32::from(c).checked_sub(MARK_DIGIT0).filter(|v| *v < 32)?;
        Some(v as u16)
    };
    let hi = digit(it.next()?)?;
    let lo = digit(it.next()?)?;
    let base: u16 = if high { 0xD800 } else { 0xDC00 };
    Some((high, base | (hi << 5) | lo, it.as_str()))
}

fn join_surrogates(high: u16, low: u16) -> char {
    let c = 0x1_0000 + ((u32::from(high) - 0xD800) << 10) + (u32::from(low) - 0xDC00);
    char::from_u32(c).unwrap_or(char::REPLACEMENT_CHARACTER)
}

/// Appends `text` to `out`. A high surrogate left `pending` by the previous delta joins
/// a low-surrogate marker starting `text` into one character, or becomes U+FFFD. With
/// `marked` (text from a repaired event), a high-surrogate marker ending `text` is left
/// pending for the next delta, and every other marker becomes U+FFFD.
fn resolve_markers(text: &str, marked: bool, pending: &mut Option<u16>, out: &mut String) {
    let mut rest = text;
    if let Some(high) = pending.take() {
        match take_marker(rest).filter(|_| marked) {
            Some((false, low, after)) => {
                out.push(join_surrogates(high, low));
                rest = after;
            }
            _ => out.push(char::REPLACEMENT_CHARACTER),
        }
    }
    if !marked {
        out.push_str(rest);
        return;
    }
    while let Some(at) = rest.find([HIGH_MARK, LOW_MARK]) {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        match take_marker(tail) {
            Some((true, high, "")) => {
                *pending = Some(high);
                return;
            }
            Some((_, _, after)) => {
                out.push(char::REPLACEMENT_CHARACTER);
                rest = after;
            }
            None => {
                // Not a marker after all (cannot happen in repaired text): keep it.
                let lead_len = tail.chars().next().map_or(tail.len(), char::len_utf8);
                out.push_str(&tail[..lead_len]);
                rest = &tail[lead_len..];
            }
        }
    }
    out.push_str(rest);
}

/// A string from a repaired event that is not a delta (an id, a name, a model): its
/// markers become U+FFFD.
pub(crate) fn clean(s: &str, marked: bool) -> Cow<'_, str> {
    if !marked || !s.contains([HIGH_MARK, LOW_MARK]) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len());
    let mut pending = None;
    resolve_markers(s, true, &mut pending, &mut out);
    if pending.is_some() {
        out.push(char::REPLACEMENT_CHARACTER);
    }
    Cow::Owned(out)
}

/// A token count as a server reports it. Anything that is not a non-negative integer
/// within `u64` (a negative or fractional number, a string, an object) counts as absent:
/// a bad usage figure is no reason to fail an answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Count(pub(crate) Option<u64>);

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        d.deserialize_any(CountVisitor)
    }
}

struct CountVisitor;

impl<'de> Visitor<'de> for CountVisitor {
    type Value = Count;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a token count")
    }
    fn visit_u64<E>(self, v: u64) -> std::result::Result<Count, E> {
        Ok(Count(Some(v)))
    }
    fn visit_i64<E>(self, v: i64) -> std::result::Result<Count, E> {
        Ok(Count(u64::try_from(v).ok()))
    }
    fn visit_f64<E>(self, v: f64) -> std::result::Result<Count, E> {
        // 2^64 is exactly representable; every smaller integral float fits in u64.
        let fits =
            v.is_finite() && v >= 0.0 && v.fract() == 0.0 && v < 18_446_744_073_709_551_616.0;
        Ok(Count(fits.then_some(v as u64)))
    }
    fn visit_bool<E>(self, _: bool) -> std::result::Result<Count, E> {
        Ok(Count(None))
    }
    fn visit_str<E>(self, _: &str) -> std::result::Result<Count, E> {
        Ok(Count(None))
    }
    fn visit_unit<E>(self) -> std::result::Result<Count, E> {
        Ok(Count(None))
    }
    fn visit_none<E>(self) -> std::result::Result<Count, E> {
        Ok(Count(None))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<Count, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Count(None))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Count, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Count(None))
    }
}

/// An object field that counts as absent when it is not an object (`"usage": "n/a"`),
/// instead of failing the event.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Obj<T>(pub(crate) Option<T>);

impl<T> Default for Obj<T> {
    fn default() -> Self {
        Obj(None)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Obj<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = Obj<T>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> std::result::Result<Obj<T>, A::Error> {
                T::deserialize(serde::de::value::MapAccessDeserializer::new(map))
                    .map(|t| Obj(Some(t)))
            }
            fn visit_seq<A: SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> std::result::Result<Obj<T>, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Obj(None))
            }
            fn visit_u64<E>(self, _: u64) -> std::result::Result<Obj<T>, E> {
                Ok(Obj(None))
            }
            fn visit_i64<E>(self, _: i64) -> std::result::Result<Obj<T>, E> {
                Ok(Obj(None))
            }
            fn visit_f64<E>(self, _: f64) -> std::result::Result<Obj<T>, E> {
                Ok(Obj(None))
            }
            fn visit_bool<E>(self, _: bool) -> std::result::Result<Obj<T>, E> {
                Ok(Obj(None))
            }
            fn visit_str<E>(self, _: &str) -> std::result::Result<Obj<T>, E> {
                Ok(Obj(None))
            }
            fn visit_unit<E>(self) -> std::result::Result<Obj<T>, E> {
                Ok(Obj(None))
            }
            fn visit_none<E>(self) -> std::result::Result<Obj<T>, E> {
                Ok(Obj(None))
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn server_fields_follow_the_host_whatever_its_spelling() {
        assert!(uses_max_completion_tokens("https://API.OpenAI.com/v1"));
        assert!(uses_max_completion_tokens(
            "https://x.OPENAI.AZURE.COM/openai"
        ));
        assert!(!uses_max_completion_tokens(
            "https://api.openai.com@other.test/v1"
        ));
        assert!(!uses_max_completion_tokens(
            "https://other.test\\@api.openai.com/v1"
        ));
        assert_eq!(url_host("http://user:pw@LOCALHOST:11434/v1").0, "localhost");
        assert_eq!(url_host("http://localhost:11434/v1").1, Some("11434"));
        assert_eq!(
            url_host("http://[::1]:11434/v1"),
            ("[::1]".to_owned(), Some("11434"))
        );
        assert_eq!(url_host("http://[::1]/v1"), ("[::1]".to_owned(), None));
        use crate::config::Compat;
        assert_eq!(
            Compat::Auto.resolve("https://API.DeepSeek.com"),
            Compat::DeepSeek
        );
        assert_eq!(
            Compat::Auto.resolve("http://127.0.0.1:11434/v1"),
            Compat::Ollama
        );
        assert_eq!(
            Compat::Auto.resolve("http://127.0.0.1:8000/v1"),
            Compat::Generic
        );
    }

    use super::*;

    #[test]
    fn truncate_cuts_at_char_boundaries() {
        let s = "aé😀z";
        for max in 0..=s.len() + 1 {
            let t = truncate(s, max);
            assert!(t.len() <= max && s.starts_with(t), "{max}: {t:?}");
        }
        assert_eq!(truncate(s, 2), "a");
        assert_eq!(truncate(s, 7), "aé😀");
    }

    #[test]
    fn surrogate_repair_touches_only_lone_surrogate_escapes() {
        // Pairs, escaped backslashes and other escapes stay; nothing to repair.
        for fine in [
            r#""\ud83d\ude00""#,
            r#""a\\ud83d""#,
            r#""\\\ud83d\ude00""#,
            r#""\u00e9\n\"""#,
            r#"{"k":"v"}"#,
        ] {
            assert_eq!(repair_surrogates(fine, true), None, "{fine}");
        }
        let fixed = |s: &str, mark: bool| repair_surrogates(s, mark).unwrap_or_default();
        assert_eq!(fixed(r#""a\ud83db""#, true), "\"a\u{FFFD}b\"");
        assert_eq!(fixed(r#""\\\ud83d""#, false), "\"\\\\\u{FFFD}\"");
        // With markers, only the halves at a string's edges are marked.
        let high = fixed(r#"["x\ud83d","\ude00y"]"#, true);
        assert!(
            high.starts_with("[\"x\u{FFFE}") && high.contains(",\"\u{FFFF}"),
            "{high}"
        );
        assert_eq!(fixed(r#"["x\ud83d"]"#, false), "[\"x\u{FFFD}\"]");
        // Truncated or malformed escapes are left for the strict parse to reject.
        for broken in [r#""\ud8"#, r#""\u"#, r#""\"#, r#""\uzzzz\ud800"#] {
            let _ = repair_surrogates(broken, true);
        }
    }

    #[test]
    fn markers_join_across_deltas_and_never_leak() {
        let marked = |s: &str| {
            let v: String = serde_json::from_str(&repair_surrogates(s, true).unwrap()).unwrap();
            v
        };
        let (a, b) = (marked(r#""x\ud83d""#), marked(r#""\ude00y""#));
        let mut pending = None;
        let mut out = String::new();
        resolve_markers(&a, true, &mut pending, &mut out);
        assert_eq!((out.as_str(), pending), ("x", Some(0xD83D)));
        resolve_markers(&b, true, &mut pending, &mut out);
        assert_eq!((out.as_str(), pending), ("x😀y", None));
        assert_eq!(clean(&a, true), "x\u{FFFD}");
        assert_eq!(clean(&b, true), "\u{FFFD}y");
        assert_eq!(clean(&a, false), a);
    }

    #[test]
    fn counts_accept_only_non_negative_integers() {
        let count = |s: &str| serde_json::from_str::<Count>(s).map(|c| c.0).ok().flatten();
        assert_eq!(count("7"), Some(7));
        assert_eq!(count("12.0"), Some(12));
        assert_eq!(count("18446744073709551615"), Some(u64::MAX));
        for bad in [
            "-1",
            "2.5",
            "1e30",
            "18446744073709551616",
            "\"3\"",
            "null",
            "[1]",
            "{\"n\":1}",
            "true",
        ] {
            assert_eq!(count(bad), None, "{bad}");
        }
    }
}
