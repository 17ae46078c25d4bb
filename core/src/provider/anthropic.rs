//! Owns the Anthropic Messages wire format: the streaming event decoder and request
//! encoding (system prompt, thinking blocks with signatures, tool_use / tool_result).
//!
//! Dispatch is on the JSON `type` of each event, not the SSE `event:` line (some proxies
//! omit it) — except that an `event: error` is always a provider error. Blocks panto does
//! not model (server tools, MCP, citations, compaction) are skipped without failing the
//! stream; unknown event and delta types are ignored.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::{json, Value};

use super::{protocol_json_error, stream_error, Assembly, Emit, Progress, RequestParams};
use crate::error::{Error, Result};
use crate::event::{BlockKind, DeltaKind};
use crate::message::{Block, Role, StopReason};
use crate::sse::SseEvent;

/// Default `max_tokens`: the Messages API requires one.
pub const DEFAULT_MAX_TOKENS: u32 = 4096;
/// The API version header panto speaks.
pub const API_VERSION: &str = "2023-06-01";

#[derive(Deserialize)]
struct WireEvent<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default)]
    index: Option<usize>,
    #[serde(borrow, default)]
    message: Option<StartMessage<'a>>,
    #[serde(borrow, default)]
    content_block: Option<ContentBlock<'a>>,
    #[serde(borrow, default)]
    delta: Option<WireDelta<'a>>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
struct StartMessage<'a> {
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    model: Option<Cow<'a, str>>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
struct ContentBlock<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    thinking: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    signature: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    data: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(default)]
    input: Option<Value>,
}

#[derive(Deserialize)]
struct WireDelta<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    thinking: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    signature: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    partial_json: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    stop_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize, Default)]
struct WireUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
}

/// Streaming decoder of one Messages response.
#[derive(Debug)]
pub struct Decoder {
    pub(crate) asm: Assembly,
    /// Anthropic block index → panto block index (`None`: a block type panto skips).
    blocks: Vec<Option<usize>>,
    /// A tool_use block whose `input` arrived whole in `content_block_start`.
    preset_input: Vec<(usize, String)>,
    stop: Option<StopReason>,
    done: bool,
}

impl Decoder {
    pub fn new(message: u32) -> Decoder {
        Decoder {
            asm: Assembly::new(message),
            blocks: Vec::new(),
            preset_input: Vec::new(),
            stop: None,
            done: false,
        }
    }

    pub fn on_sse(&mut self, ev: &SseEvent<'_>, emit: Emit<'_>) -> Result<Progress> {
        if self.done {
            return Ok(Progress::Finished);
        }
        // The one place the SSE event name decides: an `event: error` is a provider error
        // whatever its data looks like (a proxy's body may lack `"type":"error"`, or not be
        // JSON at all), as in Anthropic's own SDK; parsing it as an event would misreport
        // it as a protocol error.
        if ev.event == "error" {
            return Err(stream_error(ev.data));
        }
        if ev.data.trim().is_empty() {
            return Ok(Progress::Continue);
        }
        let wire: WireEvent<'_> =
            serde_json::from_str(ev.data).map_err(|e| protocol_json_error("event", e))?;
        match wire.kind.as_ref() {
            "message_start" => {
                if let Some(m) = wire.message {
                    if !self.asm.started_flag() {
                        if let Some(model) = m.model {
                            self.asm.model = model.into_owned();
                        }
                        self.asm.response_id = m.id.map(Cow::into_owned);
                    }
                    if let Some(u) = &m.usage {
                        self.set_usage(u);
                    }
                }
                // `message_start` is emitted with the first block: until then a failed
                // response has shown nothing and may still be retried.
            }
            "content_block_start" => self.block_start(wire.index, wire.content_block, emit)?,
            "content_block_delta" => self.block_delta(wire.index, wire.delta, emit)?,
            "content_block_stop" => {
                if let Some(b) = self.block(wire.index) {
                    self.apply_preset(b, emit)?;
                    self.asm.close(b, false, emit)?;
                }
            }
            "message_delta" => {
                if let Some(r) = wire.delta.as_ref().and_then(|d| d.stop_reason.as_deref()) {
                    self.stop = Some(StopReason::from_anthropic(r));
                }
                if let Some(u) = &wire.usage {
                    self.set_usage(u);
                }
            }
            "message_stop" => {
                self.finish(emit)?;
                return Ok(Progress::Finished);
            }
            "error" => return Err(stream_error(ev.data)),
            _ => {} // ping and event types added after this was written
        }
        Ok(Progress::Continue)
    }

    /// End of body: complete only if the provider already sent its stop reason.
    pub fn on_eof(&mut self, emit: Emit<'_>) -> Result<()> {
        if self.done {
            return Ok(());
        }
        if self.stop.is_some() {
            return self.finish(emit);
        }
        Err(Error::incomplete(
            "the stream ended before the provider finished the message (no stop_reason, no message_stop)",
        ))
    }

    fn finish(&mut self, emit: Emit<'_>) -> Result<()> {
        self.done = true;
        let stop = self.stop.take().unwrap_or(StopReason::EndTurn);
        self.preset_input.clear();
        self.asm.finish(stop, emit)
    }

    fn block(&self, index: Option<usize>) -> Option<usize> {
        index.and_then(|i| self.blocks.get(i).copied().flatten())
    }

    /// Cumulative counts: a later value replaces the earlier one, never adds to it.
    fn set_usage(&mut self, u: &WireUsage) {
        let usage = &mut self.asm.usage;
        if let Some(v) = u.input_tokens {
            usage.input_tokens = v;
        }
        if let Some(v) = u.output_tokens {
            usage.output_tokens = v;
        }
        if let Some(v) = u.cache_read_input_tokens {
            usage.cache_read_tokens = v;
        }
        if let Some(v) = u.cache_creation_input_tokens {
            usage.cache_write_tokens = v;
        }
    }

    fn block_start(
        &mut self,
        index: Option<usize>,
        block: Option<ContentBlock<'_>>,
        emit: Emit<'_>,
    ) -> Result<()> {
        let (Some(index), Some(block)) = (index, block) else {
            return Err(Error::protocol(
                "content_block_start without an index or a content_block",
            ));
        };
        let ours = match block.kind.as_ref() {
            "text" => {
                let b = self.asm.open(BlockKind::Text, emit)?;
                if let Some(t) = &block.text {
                    self.asm.delta(b, DeltaKind::Text, t, emit)?;
                }
                Some(b)
            }
            "thinking" => {
                let b = self.asm.open(BlockKind::Reasoning, emit)?;
                if let Some(t) = &block.thinking {
                    self.asm.delta(b, DeltaKind::Reasoning, t, emit)?;
                }
                if let Some(pb) = self.asm.block_mut(b) {
                    pb.signature = block.signature.map(Cow::into_owned);
                }
                Some(b)
            }
            "redacted_thinking" => {
                let b = self.asm.open(BlockKind::Reasoning, emit)?;
                if let Some(pb) = self.asm.block_mut(b) {
                    pb.redacted = Some(block.data.map(Cow::into_owned).unwrap_or_default());
                }
                Some(b)
            }
            "tool_use" => {
                let b = self.asm.open(BlockKind::ToolCall, emit)?;
                let id = block.id.as_deref().unwrap_or("");
                let name = block.name.as_deref().unwrap_or("");
                self.asm.tool_ids(b, id, name, emit)?;
                if let Some(input) = block
                    .input
                    .filter(|v| v.as_object().is_some_and(|o| !o.is_empty()))
                {
                    self.preset_input.push((b, input.to_string()));
                }
                Some(b)
            }
            _ => None,
        };
        if self.blocks.len() <= index {
            self.blocks.resize(index + 1, None);
        }
        self.blocks[index] = ours;
        Ok(())
    }

    fn block_delta(
        &mut self,
        index: Option<usize>,
        delta: Option<WireDelta<'_>>,
        emit: Emit<'_>,
    ) -> Result<()> {
        let (Some(b), Some(delta)) = (self.block(index), delta) else {
            return Ok(());
        };
        match delta.kind.as_deref() {
            Some("text_delta") => {
                if let Some(t) = &delta.text {
                    self.asm.delta(b, DeltaKind::Text, t, emit)?;
                }
            }
            Some("thinking_delta") => {
                if let Some(t) = &delta.thinking {
                    self.asm.delta(b, DeltaKind::Reasoning, t, emit)?;
                }
            }
            Some("signature_delta") => {
                if let (Some(s), Some(pb)) = (&delta.signature, self.asm.block_mut(b)) {
                    pb.signature.get_or_insert_with(String::new).push_str(s);
                }
            }
            Some("input_json_delta") => {
                // Streamed input supersedes any input given whole at block start.
                self.preset_input.retain(|(pb, _)| *pb != b);
                if let Some(t) = &delta.partial_json {
                    self.asm.delta(b, DeltaKind::ToolArgs, t, emit)?;
                }
            }
            _ => {} // citations_delta and later additions
        }
        Ok(())
    }

    fn apply_preset(&mut self, b: usize, emit: Emit<'_>) -> Result<()> {
        if let Some(pos) = self.preset_input.iter().position(|(pb, _)| *pb == b) {
            let (_, input) = self.preset_input.swap_remove(pos);
            self.asm.delta(b, DeltaKind::ToolArgs, &input, emit)?;
        }
        Ok(())
    }
}

/// The Messages request body for a streamed turn.
pub fn request_body(p: &RequestParams<'_>) -> Value {
    let mut messages: Vec<Value> = Vec::with_capacity(p.messages.len());
    for m in p.messages {
        let (role, content): (&str, Vec<Value>) = match m.role {
            Role::User => ("user", m.content.iter().filter_map(encode_block).collect()),
            Role::Assistant => (
                "assistant",
                m.content.iter().filter_map(encode_block).collect(),
            ),
            Role::Tool => ("user", m.content.iter().filter_map(encode_block).collect()),
        };
        if content.is_empty() {
            continue;
        }
        messages.push(json!({"role": role, "content": content}));
    }
    let mut body = json!({
        "model": p.model,
        "max_tokens": p.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
        "messages": messages,
        "stream": true,
    });
    if let Some(system) = p.system {
        body["system"] = json!(system);
    }
    if let Some(t) = p.temperature {
        body["temperature"] = json!(t);
    }
    if !p.tools.is_empty() {
        body["tools"] = p
            .tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}))
            .collect();
    }
    body
}

fn encode_block(b: &Block) -> Option<Value> {
    Some(match b {
        // The API rejects empty text blocks.
        Block::Text { text } if text.is_empty() => return None,
        Block::Text { text } => json!({"type": "text", "text": text}),
        Block::Reasoning { text, signature } => {
            json!({"type": "thinking", "thinking": text, "signature": signature.clone().unwrap_or_default()})
        }
        Block::RedactedReasoning { data } => json!({"type": "redacted_thinking", "data": data}),
        Block::ToolCall {
            call_id,
            name,
            arguments,
            ..
        } => json!({
            "type": "tool_use",
            "id": call_id,
            "name": name,
            // A call whose arguments never parsed still needs an object here.
            "input": arguments.clone().filter(Value::is_object).unwrap_or_else(|| json!({})),
        }),
        Block::ToolResult {
            call_id,
            output,
            is_error,
            ..
        } => {
            json!({"type": "tool_result", "tool_use_id": call_id, "content": output, "is_error": is_error})
        }
    })
}
