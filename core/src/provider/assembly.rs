//! Owns the assembly of one response shared by the decoders of all four wire formats
//! (Chat Completions, Anthropic Messages, Gemini, Responses): block numbering, the block
//! lifecycle events, the [`DecodeLimits`], and the final assistant [`Message`] with its
//! parsed tool-call arguments. The decoders turn wire events into calls on [`Assembly`];
//! they never build blocks themselves.

use std::collections::HashSet;

use serde_json::Value;

use super::tolerant::{clean, parse_value_lossy, resolve_markers};
use super::{Emit, ProviderKind};
use crate::error::{Error, Result};
use crate::event::{BlockKind, DeltaKind, Event};
use crate::message::{Block, Message, Role, StopReason, Usage};

/// One assistant response as decoded.
#[derive(Debug, Clone, PartialEq)]
pub struct DecodedMessage {
    /// The assistant message, complete.
    pub message: Message,
    /// Why the response ended.
    pub stop_reason: StopReason,
    /// What the provider reported the response cost.
    pub usage: Usage,
    /// The model that answered, as the provider named it.
    pub model: String,
    /// The provider's id of the response, when it sent one.
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
    pub(super) finished: bool,
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
    /// The provider named in the opaque blocks of this message (`anthropic` unless the
    /// decoder says otherwise).
    pub(crate) opaque_provider: &'static str,
}

impl Assembly {
    pub(super) fn new(message: u32, limits: DecodeLimits) -> Assembly {
        Assembly {
            message,
            limits,
            opaque_provider: ProviderKind::Anthropic.as_str(),
            ..Assembly::default()
        }
    }

    pub(crate) fn limits(&self) -> DecodeLimits {
        self.limits
    }

    /// Accounts for `n` more bytes a decoder holds for this message (ids of its own).
    pub(super) fn hold(&mut self, n: usize) -> Result<()> {
        Assembly::charge(&mut self.bytes, self.limits.max_message_bytes, n)
    }

    pub(super) fn emitted_content(&self) -> bool {
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
            queued_ms: None,
        })
    }

    pub(super) fn open(&mut self, kind: BlockKind, emit: Emit<'_>) -> Result<usize> {
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
    /// and may carry lone-surrogate markers (see [`parse_tolerant`](super::tolerant::parse_tolerant)).
    pub(super) fn delta(
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
    pub(super) fn tool_ids(
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
    pub(super) fn signature(&mut self, idx: usize, part: &str, marked: bool) -> Result<()> {
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
    pub(super) fn redacted(&mut self, idx: usize, data: &str, marked: bool) -> Result<()> {
        Assembly::charge(&mut self.bytes, self.limits.max_message_bytes, data.len())?;
        if let Some(b) = self.blocks.get_mut(idx) {
            b.redacted = Some(clean(data, marked).into_owned());
        }
        Ok(())
    }

    /// Keeps a tool call's input given whole at block start, for [`Assembly::use_preset`].
    pub(super) fn preset(&mut self, idx: usize, input: String) -> Result<()> {
        Assembly::charge(&mut self.bytes, self.limits.max_message_bytes, input.len())?;
        if let Some(b) = self.blocks.get_mut(idx) {
            b.preset = Some(input);
        }
        Ok(())
    }

    /// Streamed arguments supersede any input given at block start.
    pub(super) fn drop_preset(&mut self, idx: usize) {
        if let Some(b) = self.blocks.get_mut(idx) {
            b.preset = None;
        }
    }

    /// Sends a preset input as the block's one arguments delta.
    pub(super) fn use_preset(&mut self, idx: usize, emit: Emit<'_>) -> Result<()> {
        let Some(input) = self.blocks.get_mut(idx).and_then(|b| b.preset.take()) else {
            return Ok(());
        };
        // Already charged when it was kept.
        self.bytes = self.bytes.saturating_sub(input.len());
        self.delta(idx, DeltaKind::ToolArgs, &input, false, emit)
    }

    pub(super) fn close(&mut self, idx: usize, cut_off: bool, emit: Emit<'_>) -> Result<()> {
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

    pub(super) fn has_tool_calls(&self) -> bool {
        self.tool_calls > 0
    }

    /// Ends the message: every block still open is closed as cut off, then
    /// `message_end`.
    pub(super) fn finish(&mut self, stop: StopReason, emit: Emit<'_>) -> Result<()> {
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

    pub(super) fn into_decoded(self) -> Option<DecodedMessage> {
        if !self.finished {
            return None;
        }
        let mut cut_off_calls = Vec::new();
        let mut content = Vec::with_capacity(self.blocks.len() + self.opaque.len());
        let mut opaque = self.opaque.into_iter().peekable();
        for (i, b) in self.blocks.into_iter().enumerate() {
            while let Some((_, block)) = opaque.next_if(|(at, _)| *at <= i) {
                content.push(Block::Opaque {
                    provider: self.opaque_provider.to_owned(),
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
        let provider = self.opaque_provider;
        content.extend(opaque.map(|(_, block)| Block::Opaque {
            provider: provider.to_owned(),
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
