//! Owns the Anthropic Messages wire format: the streaming event decoder and request
//! encoding (system prompt, thinking blocks with signatures, tool_use / tool_result).
//!
//! Dispatch is on the JSON `type` of each event, not the SSE `event:` line (some proxies
//! omit it) — except that an `event: error` is always a provider error. Blocks panto does
//! not model (server tools, MCP, compaction, and kinds added later) get no events but are
//! kept verbatim as [`Block::Opaque`] — with their streamed `input_json_delta` /
//! `compaction_delta` applied — and sent back as they came; unknown event and delta types
//! are ignored. Citations on text blocks are not kept.
//!
//! The wire `index` of a block is a number the server chooses: it is mapped to panto's
//! own block numbers through a small sorted table, never used as a length, and an index
//! that jumps far ahead of the blocks seen is a protocol error.

use std::borrow::Cow;

use reqwest::header::HeaderName;
use serde::Deserialize;
use serde_json::{json, Value};

use super::tolerant::{clean, parse_tolerant, Count, Obj};
use super::wire_error::stream_error;
use super::{Assembly, DecodeLimits, Emit, Progress, RequestOptions, RequestParams};
use super::{AuthHeader, Decode, OutputRequest, Wire, WireMode};
use crate::error::{Error, Result};
use crate::event::{BlockKind, DeltaKind};
use crate::media::{Media, MediaSource};
use crate::message::{Block, Role, StopReason, Usage};
use crate::request::{Effort, Reasoning};
use crate::sse::SseEvent;

/// Anthropic's API, the default `base_url` of `anthropic` (without the version, as
/// Anthropic's SDKs write it).
pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";

/// The header that carries the API key.
const X_API_KEY: HeaderName = HeaderName::from_static("x-api-key");
/// The header that names the API version ([`API_VERSION`]).
const ANTHROPIC_VERSION: HeaderName = HeaderName::from_static("anthropic-version");

/// Anthropic Messages behind the seam.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Format;

impl Wire for Format {
    fn default_base_url(&self) -> &'static str {
        DEFAULT_BASE_URL
    }

    fn telemetry_name(&self, _base_url: &str) -> &'static str {
        "anthropic"
    }

    fn api_key_env(&self) -> &'static str {
        "ANTHROPIC_API_KEY"
    }

    fn endpoint_path(&self) -> &'static str {
        "/v1/messages"
    }

    /// `POST /v1/messages/count_tokens`: the request's model, system, messages, tools
    /// and thinking, answered with `{"input_tokens": n}`.
    fn token_count_request(
        &self,
        base_url: &str,
        _model: &str,
        body: &Value,
    ) -> Option<(String, Value)> {
        let url = format!(
            "{}/v1/messages/count_tokens",
            base_url.trim_end_matches('/')
        );
        let keep = [
            "model",
            "system",
            "messages",
            "tools",
            "tool_choice",
            "thinking",
        ];
        Some((url, super::wire::only_keys(body, &keep)))
    }

    fn token_count(&self, answer: &Value) -> Option<u64> {
        answer.get("input_tokens")?.as_u64()
    }

    fn auth_headers(&self, api_key: &str) -> Vec<AuthHeader> {
        let mut headers = Vec::with_capacity(2);
        if !api_key.is_empty() {
            headers.push(AuthHeader::Credential(X_API_KEY, api_key.to_owned()));
        }
        headers.push(AuthHeader::Fixed(ANTHROPIC_VERSION, API_VERSION));
        headers
    }

    fn forces_output_tool(&self) -> bool {
        true
    }

    /// Closed objects (its structured output takes no other); optional properties stay
    /// optional.
    fn native_output_schema(
        &self,
        schema: &Value,
    ) -> std::result::Result<(Value, bool), (String, String)> {
        Ok((super::schema::closed_objects(schema), false))
    }

    fn request_body(&self, params: &RequestParams<'_>, options: &RequestOptions<'_>) -> Value {
        request_body(params, options)
    }

    fn decoder(&self, asm: Assembly, _message: u32) -> Box<dyn Decode> {
        Box::new(Decoder::with_assembly(asm))
    }

    fn complete_body_events(&self, body: Value) -> Option<Vec<String>> {
        complete_body_events(body)
    }

    /// Anthropic counts cached input apart from `input_tokens`.
    fn request_tokens(&self, usage: &Usage) -> u64 {
        usage
            .input_tokens
            .saturating_add(usage.cache_read_tokens)
            .saturating_add(usage.cache_write_tokens)
    }
}

super::wire::decode_by_inherent_methods!(Decoder);

/// Default `max_tokens`: the Messages API requires one.
pub const DEFAULT_MAX_TOKENS: u32 = 4096;
/// The API version header panto speaks.
pub const API_VERSION: &str = "2023-06-01";

/// How far past the highest block index seen so far (0 before the first block) a new
/// block's index may be. Servers number blocks 0, 1, 2…; a gap this large is not a
/// numbering panto could follow.
pub const MAX_INDEX_GAP: u64 = 64;

#[derive(Deserialize)]
struct WireEvent<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default)]
    index: Option<u64>,
    #[serde(borrow, default)]
    message: Option<StartMessage<'a>>,
    #[serde(borrow, default)]
    content_block: Option<ContentBlock<'a>>,
    #[serde(borrow, default)]
    delta: Option<WireDelta<'a>>,
    #[serde(default)]
    usage: Obj<WireUsage>,
}

#[derive(Deserialize)]
struct StartMessage<'a> {
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    model: Option<Cow<'a, str>>,
    #[serde(default)]
    usage: Obj<WireUsage>,
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
    /// `compaction_delta`: the summary text. A JSON value, so that a later delta type
    /// with a `content` of another shape cannot fail the event.
    #[serde(default)]
    content: Option<Value>,
}

#[derive(Deserialize, Default)]
struct WireUsage {
    #[serde(default)]
    input_tokens: Count,
    #[serde(default)]
    output_tokens: Count,
    #[serde(default)]
    cache_read_input_tokens: Count,
    #[serde(default)]
    cache_creation_input_tokens: Count,
}

/// Streaming decoder of one Messages response.
#[derive(Debug)]
pub struct Decoder {
    pub(crate) asm: Assembly,
    /// Anthropic block index → panto block index (`None`: a block type panto skips),
    /// sorted by the wire index, at most `max_blocks` entries.
    blocks: Vec<(u64, Option<usize>)>,
    /// The highest wire index started so far.
    highest: u64,
    stop: Option<StopReason>,
    done: bool,
    /// Provider blocks being kept verbatim that are still open: wire index, slot in the
    /// assembly, streamed input JSON so far.
    opaque_open: Vec<(u64, usize, String)>,
}

impl Decoder {
    /// A decoder with the default [`DecodeLimits`].
    pub fn new(message: u32) -> Decoder {
        Decoder::with_assembly(Assembly::new(message, DecodeLimits::default()))
    }

    pub(crate) fn with_assembly(asm: Assembly) -> Decoder {
        Decoder {
            asm,
            blocks: Vec::new(),
            highest: 0,
            stop: None,
            done: false,
            opaque_open: Vec::new(),
        }
    }

    /// Decodes one SSE event of the response.
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
        let mut scratch = String::new();
        let (wire, marked): (WireEvent<'_>, bool) = parse_tolerant(ev.data, &mut scratch, "event")?;
        match wire.kind.as_ref() {
            "message_start" => {
                if let Some(m) = wire.message {
                    if !self.asm.started_flag() {
                        if let Some(model) = m.model {
                            self.asm.model = clean(&model, marked).into_owned();
                        }
                        self.asm.response_id = m.id.map(|id| clean(&id, marked).into_owned());
                    }
                    if let Some(u) = &m.usage.0 {
                        self.set_usage(u);
                    }
                }
                // `message_start` is emitted with the first block: until then a failed
                // response has shown nothing and may still be retried.
            }
            "content_block_start" => {
                let index = wire.index;
                if self.block_start(index, wire.content_block, marked, emit)? {
                    self.keep_opaque(index, ev.data)?;
                }
            }
            "content_block_delta" => self.block_delta(wire.index, wire.delta, marked, emit)?,
            "content_block_stop" => {
                if let Some(b) = self.block(wire.index) {
                    self.asm.use_preset(b, emit)?;
                    self.asm.close(b, false, emit)?;
                } else if !self.opaque_open.is_empty() {
                    self.close_opaque(wire.index);
                }
            }
            "message_delta" => {
                if let Some(r) = wire.delta.as_ref().and_then(|d| d.stop_reason.as_deref()) {
                    self.stop = Some(StopReason::from_anthropic(&clean(r, marked)));
                }
                if let Some(u) = &wire.usage.0 {
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
        self.asm.finish(stop, emit)
    }

    /// The panto block of a wire index, if it was started and is of a modelled type.
    fn block(&self, index: Option<u64>) -> Option<usize> {
        let i = index?;
        // Deltas nearly always belong to the block started last.
        if let Some(&(w, b)) = self.blocks.last() {
            if w == i {
                return b;
            }
        }
        let pos = self.blocks.binary_search_by_key(&i, |e| e.0).ok()?;
        self.blocks.get(pos)?.1
    }

    /// Cumulative counts: a later value replaces the earlier one, never adds to it. A
    /// field that is not a valid count is ignored. The usage counts as reported once a
    /// report held a valid input or output count (an empty `{}` tells nothing).
    fn set_usage(&mut self, u: &WireUsage) {
        let usage = &mut self.asm.usage;
        if let Some(v) = u.input_tokens.0 {
            usage.input_tokens = v;
            usage.reported = true;
        }
        if let Some(v) = u.output_tokens.0 {
            usage.output_tokens = v;
            usage.reported = true;
        }
        if let Some(v) = u.cache_read_input_tokens.0 {
            usage.cache_read_tokens = v;
        }
        if let Some(v) = u.cache_creation_input_tokens.0 {
            usage.cache_write_tokens = v;
        }
    }

    /// Checks a new block's wire index against the numbering so far and the block limit;
    /// returns where it goes in the table and whether it restarts a known index.
    fn place(&self, index: u64) -> Result<std::result::Result<usize, usize>> {
        if index > self.highest.saturating_add(MAX_INDEX_GAP) {
            return Err(Error::protocol(format!(
                "content block index {index} jumps more than {MAX_INDEX_GAP} past the \
                 highest index so far ({})",
                self.highest
            )));
        }
        let slot = self.blocks.binary_search_by_key(&index, |e| e.0);
        let max = self.asm.limits().max_blocks;
        if slot.is_err() && self.blocks.len() >= max {
            return Err(Error::protocol(format!(
                "the response has more than max_blocks ({max}) content blocks"
            )));
        }
        Ok(slot)
    }

    /// Opens a block. Returns `true` for a new block of a kind panto does not model,
    /// which the caller keeps verbatim.
    fn block_start(
        &mut self,
        index: Option<u64>,
        block: Option<ContentBlock<'_>>,
        marked: bool,
        emit: Emit<'_>,
    ) -> Result<bool> {
        let (Some(index), Some(block)) = (index, block) else {
            return Err(Error::protocol(
                "content_block_start without an index or a content_block",
            ));
        };
        let slot = self.place(index)?;
        let ours = match block.kind.as_ref() {
            "text" => {
                let b = self.asm.open(BlockKind::Text, emit)?;
                if let Some(t) = &block.text {
                    self.asm.delta(b, DeltaKind::Text, t, marked, emit)?;
                }
                Some(b)
            }
            "thinking" => {
                let b = self.asm.open(BlockKind::Reasoning, emit)?;
                if let Some(t) = &block.thinking {
                    self.asm.delta(b, DeltaKind::Reasoning, t, marked, emit)?;
                }
                if let Some(sig) = &block.signature {
                    self.asm.signature(b, sig, marked)?;
                }
                Some(b)
            }
            "redacted_thinking" => {
                let b = self.asm.open(BlockKind::Reasoning, emit)?;
                self.asm
                    .redacted(b, block.data.as_deref().unwrap_or(""), marked)?;
                Some(b)
            }
            "tool_use" => {
                let b = self.asm.open(BlockKind::ToolCall, emit)?;
                let id = block.id.as_deref().unwrap_or("");
                let name = block.name.as_deref().unwrap_or("");
                self.asm.tool_ids(b, id, name, marked, emit)?;
                if let Some(input) = block
                    .input
                    .filter(|v| v.as_object().is_some_and(|o| !o.is_empty()))
                {
                    self.asm.preset(b, input.to_string())?;
                }
                Some(b)
            }
            _ => None,
        };
        let keep = ours.is_none() && slot.is_err();
        match slot {
            Ok(pos) => {
                if let Some(e) = self.blocks.get_mut(pos) {
                    e.1 = ours;
                }
            }
            Err(pos) => self.blocks.insert(pos, (index, ours)),
        }
        self.highest = self.highest.max(index);
        Ok(keep)
    }

    /// Keeps the `content_block` of a `content_block_start` event as it came. Only for
    /// block kinds panto does not model, so the second parse is off the hot path.
    fn keep_opaque(&mut self, index: Option<u64>, data: &str) -> Result<()> {
        let Some(index) = index else { return Ok(()) };
        let Some(block) = super::parse_value_lossy(data)
            .and_then(|mut v| v.get_mut("content_block").map(Value::take))
            .filter(Value::is_object)
        else {
            return Ok(());
        };
        let slot = self.asm.opaque(block, data.len())?;
        self.opaque_open.push((index, slot, String::new()));
        Ok(())
    }

    /// Applies a delta to a kept block: streamed tool input is collected until the block
    /// stops; compaction text is appended to its `content`.
    fn opaque_delta(&mut self, index: Option<u64>, delta: &WireDelta<'_>) -> Result<()> {
        let Some(pos) = self.opaque_open.iter().position(|e| Some(e.0) == index) else {
            return Ok(());
        };
        match delta.kind.as_deref() {
            Some("input_json_delta") => {
                if let Some(part) = &delta.partial_json {
                    self.asm.opaque_mut(self.opaque_open[pos].1, part.len())?;
                    self.opaque_open[pos].2.push_str(part);
                }
            }
            Some("compaction_delta") => {
                if let Some(part) = delta.content.as_ref().and_then(Value::as_str) {
                    if let Some(Value::Object(block)) =
                        self.asm.opaque_mut(self.opaque_open[pos].1, part.len())?
                    {
                        match block.get_mut("content") {
                            Some(Value::String(s)) => s.push_str(part),
                            _ => {
                                block.insert("content".to_owned(), Value::String(part.to_owned()));
                            }
                        }
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// A kept block ended: streamed input, if any, replaces the input given at start.
    fn close_opaque(&mut self, index: Option<u64>) {
        let Some(pos) = self.opaque_open.iter().position(|e| Some(e.0) == index) else {
            return;
        };
        let (_, slot, input) = self.opaque_open.swap_remove(pos);
        if input.trim().is_empty() {
            return;
        }
        let Some(parsed) = super::parse_value_lossy(&input) else {
            return;
        };
        if let Ok(Some(Value::Object(block))) = self.asm.opaque_mut(slot, 0) {
            block.insert("input".to_owned(), parsed);
        }
    }

    fn block_delta(
        &mut self,
        index: Option<u64>,
        delta: Option<WireDelta<'_>>,
        marked: bool,
        emit: Emit<'_>,
    ) -> Result<()> {
        let Some(delta) = delta else {
            return Ok(());
        };
        let Some(b) = self.block(index) else {
            if !self.opaque_open.is_empty() {
                self.opaque_delta(index, &delta)?;
            }
            return Ok(());
        };
        match delta.kind.as_deref() {
            Some("text_delta") => {
                if let Some(t) = &delta.text {
                    self.asm.delta(b, DeltaKind::Text, t, marked, emit)?;
                }
            }
            Some("thinking_delta") => {
                if let Some(t) = &delta.thinking {
                    self.asm.delta(b, DeltaKind::Reasoning, t, marked, emit)?;
                }
            }
            Some("signature_delta") => {
                if let Some(s) = &delta.signature {
                    self.asm.signature(b, s, marked)?;
                }
            }
            Some("input_json_delta") => {
                // Streamed input supersedes any input given whole at block start.
                self.asm.drop_preset(b);
                if let Some(t) = &delta.partial_json {
                    self.asm.delta(b, DeltaKind::ToolArgs, t, marked, emit)?;
                }
            }
            _ => {} // citations_delta and later additions
        }
        Ok(())
    }
}

/// The SSE data of the stream equivalent to a complete (non-streamed) message: its
/// blocks are started whole (a `content_block_start` carrying the full text, thinking
/// with signature, or tool input), which the decoder turns into one delta each. `None`
/// when `body` is not a message.
pub(crate) fn complete_body_events(body: Value) -> Option<Vec<String>> {
    let Value::Object(mut body) = body else {
        return None;
    };
    if body.get("type").and_then(Value::as_str) != Some("message") {
        return None;
    }
    let Some(Value::Array(content)) = body.remove("content") else {
        return None;
    };
    let string = |v: Option<Value>| v.filter(Value::is_string).unwrap_or(Value::Null);
    let id = string(body.remove("id"));
    let model = string(body.remove("model"));
    let stop = string(body.remove("stop_reason"));
    let usage = body.remove("usage").unwrap_or(Value::Null);
    let mut out = Vec::with_capacity(2 * content.len() + 3);
    out.push(
        json!({"type": "message_start", "message": {"id": id, "model": model, "usage": usage}})
            .to_string(),
    );
    for (i, block) in content.into_iter().enumerate() {
        out.push(
            json!({"type": "content_block_start", "index": i, "content_block": block}).to_string(),
        );
        out.push(json!({"type": "content_block_stop", "index": i}).to_string());
    }
    out.push(
        json!({"type": "message_delta", "delta": {"stop_reason": stop}, "usage": usage})
            .to_string(),
    );
    out.push(json!({"type": "message_stop"}).to_string());
    Some(out)
}

/// The thinking budget for an effort when the caller gives none (`budget_tokens`):
/// `None` for `none` (thinking stays off). The API's minimum is 1024.
pub fn thinking_budget(reasoning: &Reasoning) -> Option<u32> {
    let default = match reasoning.effort {
        Effort::None => return None,
        Effort::Low => 1024,
        Effort::Medium => 4096,
        Effort::High => 16_384,
    };
    Some(
        reasoning
            .budget_tokens
            .unwrap_or(default)
            .max(MIN_THINKING_BUDGET),
    )
}

/// The smallest `thinking.budget_tokens` the Messages API accepts.
pub const MIN_THINKING_BUDGET: u32 = 1024;

/// The Messages request body for a streamed turn.
///
/// The API rejects empty content, so a message left with none (an empty answer,
/// reasoning that cannot be sent back) is left out, and messages of the same role that
/// then meet are merged into one, as the API itself would: the request stays a valid
/// alternation of user and assistant turns. Tool results merged with a following user
/// message stay first, where the API wants them.
///
/// Conversation controls: reasoning becomes `thinking: {type: enabled, budget_tokens}`
/// (see [`thinking_budget`]); `max_tokens` must then exceed the budget, so one that does
/// not is raised to the budget plus [`DEFAULT_MAX_TOKENS`], and `temperature` is left out
/// (the API refuses it with thinking). With prompt caching, `cache_control` breakpoints
/// go on the system prompt, the last tool and the last block of the latest message
/// (three of the four the API allows): each step of a tool loop then reads the previous
/// step's prefix from the cache. A message of one plain text block is sent as a string
/// (see `plain_single_text`); the latest one keeps its list when it carries a breakpoint.
pub fn request_body(p: &RequestParams<'_>, options: &RequestOptions) -> Value {
    let mut messages: Vec<Value> = Vec::with_capacity(p.messages.len());
    let mut last_role = None;
    for m in p.messages {
        let role = match m.role {
            Role::User | Role::Tool => "user",
            Role::Assistant => "assistant",
        };
        let content: Vec<Value> = m.content.iter().filter_map(encode_block).collect();
        if content.is_empty() {
            continue;
        }
        if last_role == Some(role) {
            if let Some(Value::Array(previous)) =
                messages.last_mut().and_then(|prev| prev.get_mut("content"))
            {
                previous.extend(content);
                continue;
            }
        }
        messages.push(json!({"role": role, "content": content}));
        last_role = Some(role);
    }
    let budget = options.reasoning.as_ref().and_then(thinking_budget);
    let mut max_tokens = p.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS);
    if let Some(budget) = budget {
        if max_tokens <= budget {
            max_tokens = budget.saturating_add(DEFAULT_MAX_TOKENS);
        }
    }
    let cache = options.prompt_caching;
    if cache {
        mark_latest_message(&mut messages);
    }
    messages.iter_mut().for_each(plain_single_text);
    let mut body = json!({
        "model": p.model,
        "max_tokens": max_tokens,
        "messages": messages,
        "stream": true,
    });
    if let Some(system) = p.system {
        body["system"] = if cache && !system.is_empty() {
            json!([{"type": "text", "text": system, "cache_control": ephemeral()}])
        } else {
            json!(system)
        };
    }
    if let Some(budget) = budget {
        body["thinking"] = json!({"type": "enabled", "budget_tokens": budget});
    } else if let Some(t) = p.temperature {
        body["temperature"] = json!(t);
    }
    let mut tools: Vec<Value> = p
        .tools
        .iter()
        .map(
            |t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}),
        )
        .collect();
    match options.output {
        Some(OutputRequest {
            schema,
            mode: WireMode::Native,
            ..
        }) => {
            body["output_config"] = json!({"format": {"type": "json_schema", "schema": schema}});
        }
        Some(OutputRequest {
            name,
            schema,
            mode: WireMode::Tool,
        }) => {
            tools.push(json!({"name": name,
                "description": super::openai::OUTPUT_TOOL_DESCRIPTION, "input_schema": schema}));
            body["tool_choice"] = json!({"type": "tool", "name": name});
        }
        None => {}
    }
    if !tools.is_empty() {
        if cache {
            if let Some(last) = tools.last_mut() {
                last["cache_control"] = ephemeral();
            }
        }
        body["tools"] = Value::Array(tools);
    }
    body
}

fn ephemeral() -> Value {
    json!({"type": "ephemeral"})
}

/// Puts a cache breakpoint on the last block of the latest message that may carry one
/// (thinking blocks may not).
fn mark_latest_message(messages: &mut [Value]) {
    let Some(Value::Array(content)) = messages.last_mut().and_then(|m| m.get_mut("content")) else {
        return;
    };
    let markable = content.iter_mut().rev().find(|b| {
        !matches!(
            b.get("type").and_then(Value::as_str),
            Some("thinking" | "redacted_thinking")
        )
    });
    if let Some(Value::Object(block)) = markable {
        block.insert("cache_control".to_owned(), ephemeral());
    }
}

/// A message whose content is one text block with nothing else on it (no
/// `cache_control`) gets its text as a plain string, the form the official SDKs send
/// for a string: proxies that pass Anthropic requests on to OpenAI-style servers
/// (LiteLLM to llama.cpp) hand a list to chat templates that concatenate strings, which
/// fail on it.
fn plain_single_text(message: &mut Value) {
    let Some(content) = message.get_mut("content") else {
        return;
    };
    let text = match content.as_array().map(Vec::as_slice) {
        Some([Value::Object(block)])
            if block.len() == 2 && block.get("type").and_then(Value::as_str) == Some("text") =>
        {
            match block.get("text") {
                Some(Value::String(text)) => text.clone(),
                _ => return,
            }
        }
        _ => return,
    };
    *content = Value::String(text);
}

/// `{type: base64, media_type, data}` or `{type: url, url}`.
fn media_source(media: &Media) -> Value {
    match &media.source {
        MediaSource::Bytes { media_type, .. } => json!({
            "type": "base64",
            "media_type": media_type,
            "data": media.base64().unwrap_or_default(),
        }),
        MediaSource::Url(url) => json!({"type": "url", "url": url}),
    }
}

fn encode_block(b: &Block) -> Option<Value> {
    Some(match b {
        // The API rejects empty text blocks.
        Block::Text { text } if text.is_empty() => return None,
        Block::Text { text } => json!({"type": "text", "text": text}),
        // Thinking goes back only with the signature that lets the API verify it
        // (reasoning from another provider, or whose signature never arrived, has none).
        Block::Reasoning { text, signature } => match signature.as_deref() {
            Some(sig) if !sig.is_empty() => {
                json!({"type": "thinking", "thinking": text, "signature": sig})
            }
            _ => return None,
        },
        Block::RedactedReasoning { data } if data.is_empty() => return None,
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
            parts,
            ..
        } => {
            // A result with images sends its parts, in order; plain text stays a string.
            let content = if parts.is_empty() {
                json!(output)
            } else {
                Value::Array(parts.iter().filter_map(encode_block).collect())
            };
            json!({"type": "tool_result", "tool_use_id": call_id, "content": content, "is_error": is_error})
        }
        Block::Image(media) => json!({"type": "image", "source": media_source(media)}),
        Block::Document(media) => json!({"type": "document", "source": media_source(media)}),
        // Kept verbatim, but only for the provider that sent it.
        Block::Opaque { provider, block } if provider == "anthropic" => block.clone(),
        Block::Opaque { .. } => return None,
    })
}
