//! Owns the OpenAI Chat Completions wire format (and every compatible server: Azure,
//! vLLM, llama.cpp, Ollama, Groq, DeepSeek, OpenRouter, Together, Mistral…): the
//! streaming chunk decoder with its tool-call accumulator, and request encoding.
//!
//! Tolerances, each seen from a real server (core/tests/decoder_edge.rs has one test per
//! case): `choices` empty,
//! null or missing; `delta` missing; `finish_reason` absent; reasoning under
//! `reasoning_content` or `reasoning`; content as an array of typed parts (Mistral);
//! tool-call deltas keyed by `index`, without `index`, or all on index 0 with distinct ids
//! (Ollama); `arguments` as an object; `"id": ""`/`null` on continuations; an `error`
//! object in a 200 stream; `[DONE]` missing after a `finish_reason` (llama-box).
//!
//! Tool-call fragments find their call through a map from the wire `index`, so a
//! response with thousands of parallel calls costs the same per fragment as one call.

use std::borrow::Cow;
use std::collections::HashMap;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};

use super::json_scan::Scanner;
use super::tolerant::{clean, parse_tolerant, Count, Obj};
use super::wire_error::stream_error;
use super::{Assembly, DecodeLimits, Emit, Progress, RequestOptions, RequestParams};
use super::{AuthHeader, Decode, OutputRequest, Wire, WireMode};
use crate::error::{Error, Result};
use crate::event::{BlockKind, DeltaKind};
use crate::media::{Input, Media, MediaSource};
use crate::message::{Block, Message, Role, StopReason};
use crate::request::{Compat, Effort, Reasoning};
use crate::sse::SseEvent;

/// OpenAI's API, the default `base_url` of `openai` and `openai-responses` (the version
/// included, as OpenAI's SDKs write it).
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// Where the API key of `openai` and `openai-responses` is read from by default.
pub const API_KEY_ENV: &str = "OPENAI_API_KEY";

/// OpenAI Chat Completions behind the seam.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Format;

impl Wire for Format {
    fn default_base_url(&self) -> &'static str {
        DEFAULT_BASE_URL
    }

    fn telemetry_name(&self, base_url: &str) -> &'static str {
        // Azure OpenAI speaks Chat Completions at its own hosts.
        if base_url.contains(".openai.azure.com") || base_url.contains(".services.ai.azure.com") {
            "azure.ai.openai"
        } else {
            "openai"
        }
    }

    fn api_key_env(&self) -> &'static str {
        API_KEY_ENV
    }

    fn endpoint_path(&self) -> &'static str {
        "/chat/completions"
    }

    fn auth_headers(&self, api_key: &str) -> Vec<AuthHeader> {
        bearer(api_key)
    }

    /// Chat completions take a PDF only as bytes (`file.file_data`), never by URL.
    fn check_input(&self, input: &Input) -> Result<()> {
        for (i, part) in input.parts().iter().enumerate() {
            if let Block::Document(Media {
                source: MediaSource::Url(_),
                ..
            }) = part
            {
                return Err(Error::config(format!(
                    "input[{i}]: OpenAI chat completions take a PDF as bytes, not by URL; \
                     read the file and give its bytes"
                )));
            }
        }
        Ok(())
    }

    fn forces_output_tool(&self) -> bool {
        true
    }

    /// Strict mode (`json_schema.strict: true`).
    fn native_output_schema(
        &self,
        schema: &Value,
    ) -> std::result::Result<(Value, bool), (String, String)> {
        Ok((super::schema::strict_schema(schema, "")?, true))
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
}

super::wire::decode_by_inherent_methods!(Decoder);

/// OpenAI's credential, `Authorization: Bearer <key>` (none for an empty key); the
/// Responses API takes the same.
pub(crate) fn bearer(api_key: &str) -> Vec<AuthHeader> {
    if api_key.is_empty() {
        return Vec::new();
    }
    vec![AuthHeader::Credential(
        reqwest::header::AUTHORIZATION,
        format!("Bearer {api_key}"),
    )]
}

#[derive(Deserialize)]
struct Chunk<'a> {
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    model: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    choices: Option<FirstChoice<'a>>,
    #[serde(default)]
    usage: Obj<WireUsage>,
    #[serde(borrow, default)]
    error: Option<&'a RawValue>,
}

/// The choice with index 0 of a chunk's `choices` (panto asks for one; extra choices of
/// `n > 1` are skipped). Read without collecting a `Vec`: this runs once per chunk.
struct FirstChoice<'a>(Option<Choice<'a>>);

impl<'de: 'a, 'a> Deserialize<'de> for FirstChoice<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for Visit<'a> {
            type Value = FirstChoice<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an array of choices")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Self::Value, A::Error> {
                let mut first = None;
                while let Some(choice) = seq.next_element::<Choice<'de>>()? {
                    if choice.index == 0 && first.is_none() {
                        first = Some(choice);
                    }
                }
                Ok(FirstChoice(first))
            }
        }
        d.deserialize_seq(Visit(std::marker::PhantomData))
    }
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(default)]
    index: u32,
    #[serde(borrow, default)]
    delta: Option<Delta<'a>>,
    #[serde(borrow, default)]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(borrow, default)]
    content: Option<&'a RawValue>,
    /// `content` when it was a string read by the chunk scanner (`scan_chunk`).
    #[serde(skip)]
    content_text: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    refusal: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    reasoning_content: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    reasoning: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    tool_calls: Option<Vec<ToolCallDelta<'a>>>,
}

#[derive(Deserialize)]
struct ToolCallDelta<'a> {
    #[serde(default)]
    index: Option<u32>,
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    function: Option<FunctionDelta<'a>>,
}

#[derive(Deserialize)]
struct FunctionDelta<'a> {
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    arguments: Option<&'a RawValue>,
}

#[derive(Deserialize, Default)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: Count,
    #[serde(default)]
    completion_tokens: Count,
    #[serde(default)]
    prompt_tokens_details: Obj<PromptDetails>,
    #[serde(default)]
    completion_tokens_details: Obj<CompletionDetails>,
    /// DeepSeek's name for cached prompt tokens.
    #[serde(default)]
    prompt_cache_hit_tokens: Count,
}

#[derive(Deserialize, Default)]
struct PromptDetails {
    #[serde(default)]
    cached_tokens: Count,
}

#[derive(Deserialize, Default)]
struct CompletionDetails {
    #[serde(default)]
    reasoning_tokens: Count,
}

/// A text part of Mistral's array-valued `content`.
#[derive(Deserialize)]
struct ContentPart {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    thinking: Option<Value>,
}

/// The channel a sequential (non-tool) block belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Channel {
    Text,
    Reasoning,
}

#[derive(Debug)]
struct OpenCall {
    wire_index: Option<u32>,
    /// The id as the server sent it (fragments are matched on it); the call's id in
    /// events and history may differ when the server repeated an id.
    id: String,
    block: usize,
}

/// Streaming decoder of one Chat Completions response.
#[derive(Debug)]
pub struct Decoder {
    pub(crate) asm: Assembly,
    sequential: Option<(Channel, usize)>,
    /// Open tool calls in order of appearance.
    calls: Vec<OpenCall>,
    /// Wire index → position in `calls` of the latest call with that index.
    by_index: HashMap<u32, usize>,
    finish: Option<StopReason>,
    refused: bool,
    done: bool,
}

impl Decoder {
    /// A decoder with the default [`DecodeLimits`].
    pub fn new(message: u32) -> Decoder {
        Decoder::with_assembly(Assembly::new(message, DecodeLimits::default()))
    }

    pub(crate) fn with_assembly(asm: Assembly) -> Decoder {
        Decoder {
            asm,
            sequential: None,
            calls: Vec::new(),
            by_index: HashMap::new(),
            finish: None,
            refused: false,
            done: false,
        }
    }

    /// Decodes one SSE event of the response.
    pub fn on_sse(&mut self, ev: &SseEvent<'_>, emit: Emit<'_>) -> Result<Progress> {
        if self.done {
            return Ok(Progress::Finished);
        }
        if ev.event == "error" {
            return Err(stream_error(ev.data));
        }
        let data = ev.data.trim_start();
        if data.starts_with("[DONE]") {
            self.complete(emit)?;
            return Ok(Progress::Finished);
        }
        if data.trim().is_empty() {
            return Ok(Progress::Continue);
        }
        let mut scratch = String::new();
        let (chunk, marked): (Chunk<'_>, bool) = match scan_chunk(data) {
            Some(chunk) => (chunk, false),
            None => parse_tolerant(data, &mut scratch, "chunk")?,
        };
        if let Some(err) = chunk.error {
            if err.get() != "null" {
                return Err(stream_error(data));
            }
        }
        if !self.asm.started_flag() {
            // Azure's first chunk has an empty id/model: keep the first non-empty ones.
            if let Some(m) = chunk.model.as_deref().filter(|m| !m.is_empty()) {
                self.asm.model = clean(m, marked).into_owned();
            }
            if let Some(id) = chunk.id.as_deref().filter(|m| !m.is_empty()) {
                self.asm.response_id = Some(clean(id, marked).into_owned());
            }
        }
        if let Some(u) = &chunk.usage.0 {
            self.set_usage(u);
        }
        if let Some(choice) = chunk.choices.and_then(|c| c.0) {
            if self.finish.is_some() {
                return Ok(Progress::Continue);
            }
            if let Some(delta) = choice.delta {
                self.on_delta(delta, marked, emit)?;
            }
            // `"finish_reason": ""` on every intermediate chunk (Ollama #4357, SGLang
            // #3912, some gateways) means "not finished", like null: ending the message
            // there would drop the rest of the answer.
            if let Some(reason) = choice.finish_reason.filter(|r| !r.is_empty()) {
                self.finish = Some(if self.refused {
                    StopReason::Refusal
                } else {
                    StopReason::from_openai(&clean(&reason, marked))
                });
                self.close_at_finish(emit)?;
            }
        }
        Ok(Progress::Continue)
    }

    /// End of body. Complete if the server already sent its `finish_reason` (some
    /// servers omit `[DONE]`); otherwise the response was cut short.
    pub fn on_eof(&mut self, emit: Emit<'_>) -> Result<()> {
        if self.done {
            return Ok(());
        }
        if self.finish.is_some() {
            return self.complete(emit);
        }
        Err(Error::incomplete(
            "the stream ended before the provider finished the message (no finish_reason, no [DONE])",
        ))
    }

    fn complete(&mut self, emit: Emit<'_>) -> Result<()> {
        self.done = true;
        let stop = match self.finish.take() {
            Some(s) => s,
            // `[DONE]` without any finish_reason (seen on OpenRouter): the server says it
            // is done, so infer the reason from what arrived.
            None if self.refused => StopReason::Refusal,
            None if self.asm.has_tool_calls() => StopReason::ToolUse,
            None => StopReason::EndTurn,
        };
        if self.sequential.is_some() || !self.calls.is_empty() {
            self.close_at_finish_with(&stop, emit)?;
        }
        self.asm.finish(stop, emit)
    }

    /// A later usage report replaces the earlier one, field by field; a field that is
    /// not a valid count is ignored. The usage counts as reported once a report held a
    /// valid input or output count (an empty `{}`, or one of only bad figures, tells
    /// nothing).
    fn set_usage(&mut self, u: &WireUsage) {
        let usage = &mut self.asm.usage;
        if let Some(p) = u.prompt_tokens.0 {
            usage.input_tokens = p;
            usage.reported = true;
        }
        if let Some(c) = u.completion_tokens.0 {
            usage.output_tokens = c;
            usage.reported = true;
        }
        if let Some(c) = u
            .prompt_tokens_details
            .0
            .as_ref()
            .and_then(|d| d.cached_tokens.0)
            .or(u.prompt_cache_hit_tokens.0)
        {
            usage.cache_read_tokens = c;
        }
        if let Some(r) = u
            .completion_tokens_details
            .0
            .as_ref()
            .and_then(|d| d.reasoning_tokens.0)
        {
            usage.reasoning_tokens = r;
        }
    }

    fn on_delta(&mut self, delta: Delta<'_>, marked: bool, emit: Emit<'_>) -> Result<()> {
        if let Some(r) = delta
            .reasoning_content
            .as_deref()
            .or(delta.reasoning.as_deref())
        {
            self.sequential_text(Channel::Reasoning, r, marked, emit)?;
        }
        if let Some(text) = delta.content_text {
            self.sequential_text(Channel::Text, &text, false, emit)?;
        } else if let Some(raw) = delta.content {
            self.on_content(raw, emit)?;
        }
        if let Some(refusal) = delta.refusal.as_deref().filter(|r| !r.is_empty()) {
            self.refused = true;
            self.sequential_text(Channel::Text, refusal, marked, emit)?;
        }
        for call in delta.tool_calls.into_iter().flatten() {
            self.on_tool_call(call, marked, emit)?;
        }
        Ok(())
    }

    /// `content` is kept raw by the chunk parse and decoded here: a string, Mistral's
    /// array of parts, or null. Its own tolerant parse means a lone surrogate in it
    /// marks only this text.
    fn on_content(&mut self, raw: &RawValue, emit: Emit<'_>) -> Result<()> {
        let text = raw.get();
        let mut scratch = String::new();
        match text.as_bytes().first() {
            Some(b'"') => {
                let (s, marked): (Cow<'_, str>, bool) =
                    parse_tolerant(text, &mut scratch, "content")?;
                self.sequential_text(Channel::Text, &s, marked, emit)
            }
            Some(b'[') => {
                let (parts, marked): (Vec<ContentPart>, bool) =
                    parse_tolerant(text, &mut scratch, "content")?;
                for part in parts {
                    match part.kind.as_str() {
                        "text" => {
                            if let Some(t) = part.text {
                                self.sequential_text(Channel::Text, &t, marked, emit)?;
                            }
                        }
                        "thinking" => {
                            let mut t = String::new();
                            collect_text(part.thinking.as_ref(), &mut t);
                            self.sequential_text(Channel::Reasoning, &t, marked, emit)?;
                        }
                        _ => {}
                    }
                }
                Ok(())
            }
            _ => Ok(()), // null
        }
    }

    /// Text and reasoning arrive as runs: a run of one channel closes when another
    /// starts (or a tool call does).
    fn sequential_text(
        &mut self,
        channel: Channel,
        text: &str,
        marked: bool,
        emit: Emit<'_>,
    ) -> Result<()> {
        if text.is_empty() {
            return Ok(());
        }
        let block = match self.sequential {
            Some((c, b)) if c == channel => b,
            previous => {
                if let Some((_, b)) = previous {
                    self.asm.close(b, false, emit)?;
                }
                let kind = match channel {
                    Channel::Text => BlockKind::Text,
                    Channel::Reasoning => BlockKind::Reasoning,
                };
                let b = self.asm.open(kind, emit)?;
                self.sequential = Some((channel, b));
                b
            }
        };
        let kind = match channel {
            Channel::Text => DeltaKind::Text,
            Channel::Reasoning => DeltaKind::Reasoning,
        };
        self.asm.delta(block, kind, text, marked, emit)
    }

    /// The open call a fragment continues, if any: the latest call with the same wire
    /// index (or the last call, for fragments without an index) whose id does not
    /// contradict the fragment's.
    fn find_call(&self, index: Option<u32>, id: &str) -> Option<usize> {
        let last = self.calls.len().checked_sub(1);
        let Some(i) = index else {
            return last.filter(|&l| {
                self.calls
                    .get(l)
                    .is_some_and(|c| id.is_empty() || c.id == id)
            });
        };
        // The common case, a fragment of the call opened last, needs no hashing.
        let pos = match last {
            Some(l) if self.calls.get(l).is_some_and(|c| c.wire_index == Some(i)) => Some(l),
            _ => self.by_index.get(&i).copied(),
        };
        // Ollama labels parallel calls all index 0, with distinct ids.
        pos.filter(|&p| {
            self.calls
                .get(p)
                .is_some_and(|c| id.is_empty() || c.id.is_empty() || c.id == id)
        })
    }

    fn on_tool_call(
        &mut self,
        call: ToolCallDelta<'_>,
        marked: bool,
        emit: Emit<'_>,
    ) -> Result<()> {
        let id = call.id.as_deref().unwrap_or("");
        let pos = match self.find_call(call.index, id) {
            Some(p) => p,
            None => {
                if let Some((_, b)) = self.sequential.take() {
                    self.asm.close(b, false, emit)?;
                }
                let block = self.asm.open(BlockKind::ToolCall, emit)?;
                let pos = self.calls.len();
                self.calls.push(OpenCall {
                    wire_index: call.index,
                    id: String::new(),
                    block,
                });
                if let Some(i) = call.index {
                    self.by_index.insert(i, pos);
                }
                pos
            }
        };
        let Some(open) = self.calls.get_mut(pos) else {
            return Ok(());
        };
        let block = open.block;
        if open.id.is_empty() && !id.is_empty() {
            open.id = id.to_owned();
        }
        let function = call.function;
        let name = function
            .as_ref()
            .and_then(|f| f.name.as_deref())
            .unwrap_or("");
        self.asm.tool_ids(block, id, name, marked, emit)?;
        if let Some(args) = function.and_then(|f| f.arguments) {
            let raw = args.get();
            match raw.as_bytes().first() {
                Some(b'"') => {
                    let mut scratch = String::new();
                    let (s, marked): (Cow<'_, str>, bool) =
                        parse_tolerant(raw, &mut scratch, "tool call arguments")?;
                    self.asm
                        .delta(block, DeltaKind::ToolArgs, &s, marked, emit)?;
                }
                Some(b'n') => {} // null
                // Arguments sent as a JSON object (some gateways): pass the JSON through.
                Some(_) => self
                    .asm
                    .delta(block, DeltaKind::ToolArgs, raw, marked, emit)?,
                None => {}
            }
        }
        Ok(())
    }

    fn close_at_finish(&mut self, emit: Emit<'_>) -> Result<()> {
        let stop = self.finish.clone().unwrap_or(StopReason::EndTurn);
        self.close_at_finish_with(&stop, emit)
    }

    /// At `finish_reason` every block closes. When the response hit the token limit,
    /// the last tool call may be partial: it is marked cut off and never executed.
    fn close_at_finish_with(&mut self, stop: &StopReason, emit: Emit<'_>) -> Result<()> {
        if let Some((_, b)) = self.sequential.take() {
            self.asm.close(b, false, emit)?;
        }
        let last = self.calls.len().checked_sub(1);
        self.by_index.clear();
        for (i, call) in std::mem::take(&mut self.calls).into_iter().enumerate() {
            let cut = *stop == StopReason::MaxTokens && Some(i) == last;
            self.asm.close(call.block, cut, emit)?;
        }
        Ok(())
    }
}

/// Reads the chunk shapes that make up nearly every stream — text, reasoning or a
/// refusal fragment, ids, a finish reason, nulls, fields panto ignores — with the
/// hand-written scanner, about four times cheaper than serde's derived parse. `None` for
/// anything else (tool calls, usage, an error, array-valued content, duplicate keys, a
/// lone surrogate, malformed JSON): the serde path then decides as it always did.
fn scan_chunk(data: &str) -> Option<Chunk<'_>> {
    let mut scan = Scanner::new(data);
    let mut chunk = Chunk {
        id: None,
        model: None,
        choices: None,
        usage: Obj(None),
        error: None,
    };
    let mut seen = Seen::default();
    scan.object(|scan, key| match key {
        "id" => {
            seen.first(1)?;
            chunk.id = nullable_string(scan)?;
            Some(())
        }
        "model" => {
            seen.first(2)?;
            chunk.model = nullable_string(scan)?;
            Some(())
        }
        "choices" => {
            seen.first(4)?;
            if scan.null() {
                return Some(());
            }
            let mut first = None;
            scan.array(|scan| {
                let choice = scan_choice(scan)?;
                if choice.index == 0 && first.is_none() {
                    first = Some(choice);
                }
                Some(())
            })?;
            chunk.choices = Some(FirstChoice(first));
            Some(())
        }
        "usage" => {
            seen.first(8)?;
            scan.null().then_some(())
        }
        "error" => {
            seen.first(16)?;
            scan.null().then_some(())
        }
        _ => scan.skip_value(),
    })?;
    scan.at_end().then_some(chunk)
}

fn scan_choice<'a>(scan: &mut Scanner<'a>) -> Option<Choice<'a>> {
    let mut choice = Choice {
        index: 0,
        delta: None,
        finish_reason: None,
    };
    let mut seen = Seen::default();
    scan.object(|scan, key| match key {
        "index" => {
            seen.first(1)?;
            choice.index = scan.u32()?;
            Some(())
        }
        "finish_reason" => {
            seen.first(2)?;
            choice.finish_reason = nullable_string(scan)?;
            Some(())
        }
        "delta" => {
            seen.first(4)?;
            if !scan.null() {
                choice.delta = Some(scan_delta(scan)?);
            }
            Some(())
        }
        _ => scan.skip_value(),
    })?;
    Some(choice)
}

fn scan_delta<'a>(scan: &mut Scanner<'a>) -> Option<Delta<'a>> {
    let mut delta = Delta {
        content: None,
        content_text: None,
        refusal: None,
        reasoning_content: None,
        reasoning: None,
        tool_calls: None,
    };
    let mut seen = Seen::default();
    scan.object(|scan, key| match key {
        "content" => {
            seen.first(1)?;
            delta.content_text = nullable_string(scan)?;
            Some(())
        }
        "refusal" => {
            seen.first(2)?;
            delta.refusal = nullable_string(scan)?;
            Some(())
        }
        "reasoning_content" => {
            seen.first(4)?;
            delta.reasoning_content = nullable_string(scan)?;
            Some(())
        }
        "reasoning" => {
            seen.first(8)?;
            delta.reasoning = nullable_string(scan)?;
            Some(())
        }
        "tool_calls" => {
            seen.first(16)?;
            scan.null().then_some(())
        }
        _ => scan.skip_value(),
    })?;
    Some(delta)
}

/// The known keys of one object read so far. Each may come once: serde's derive refuses
/// a repeated field, and the repair path that then runs keeps the last one; such chunks
/// are left to it.
#[derive(Default)]
struct Seen(u8);

impl Seen {
    fn first(&mut self, bit: u8) -> Option<()> {
        let fresh = self.0 & bit == 0;
        self.0 |= bit;
        fresh.then_some(())
    }
}

/// A string or `null` (`Some(None)`); `None` for anything else.
fn nullable_string<'a>(scan: &mut Scanner<'a>) -> Option<Option<Cow<'a, str>>> {
    if scan.null() {
        return Some(None);
    }
    if scan.peek()? != b'"' {
        return None;
    }
    scan.string().map(Some)
}

fn collect_text(v: Option<&Value>, out: &mut String) {
    match v {
        Some(Value::String(s)) => out.push_str(s),
        Some(Value::Array(items)) => items.iter().for_each(|i| collect_text(Some(i), out)),
        Some(Value::Object(o)) => collect_text(o.get("text"), out),
        _ => {}
    }
}

/// The SSE data of the stream equivalent to a complete (non-streamed) chat completion:
/// one chunk whose delta is the whole message (tool calls numbered by position), one
/// with the finish reason and usage, `[DONE]`. `None` when `body` is not a chat
/// completion.
pub(crate) fn complete_body_events(body: Value) -> Option<Vec<String>> {
    let Value::Object(mut body) = body else {
        return None;
    };
    match body.get("object") {
        None => {}
        Some(Value::String(o)) if o == "chat.completion" => {}
        Some(_) => return None,
    }
    let Some(Value::Array(choices)) = body.remove("choices") else {
        return None;
    };
    let mut choice = choices
        .into_iter()
        .find(|c| c.get("index").is_none_or(|i| *i == 0))?;
    let Value::Object(mut delta) = choice.get_mut("message")?.take() else {
        return None;
    };
    if let Some(Value::Array(calls)) = delta.get_mut("tool_calls") {
        for (i, call) in calls.iter_mut().enumerate() {
            if let Value::Object(c) = call {
                c.entry("index").or_insert(json!(i));
            }
        }
    }
    let finish = choice
        .get_mut("finish_reason")
        .map(Value::take)
        .unwrap_or(Value::Null);
    let string = |v: Option<Value>| v.filter(Value::is_string).unwrap_or(Value::Null);
    let id = string(body.remove("id"));
    let model = string(body.remove("model"));
    let usage = body.remove("usage").unwrap_or(Value::Null);
    Some(vec![
        json!({"id": id, "model": model, "choices": [{"index": 0, "delta": delta}]}).to_string(),
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}], "usage": usage})
            .to_string(),
        "[DONE]".to_owned(),
    ])
}

/// The Chat Completions request body for a streamed turn.
///
/// The body is a pure function of the conversation, and JSON object keys come out
/// sorted, so the messages of step N are serialized byte for byte the same in the
/// request of step N+1 (and after a save and restore): servers with automatic prefix
/// caching (OpenAI, DeepSeek, vLLM, llama.cpp) find the whole earlier conversation in
/// their cache.
///
/// Conversation controls (`options`): reasoning becomes `reasoning_effort`, plus the
/// server's own switch where it has one (DeepSeek `thinking: {type}`, Ollama `think`,
/// vLLM `chat_template_kwargs.enable_thinking` for Qwen-style templates). The reasoning
/// of an assistant message that called tools goes back as `reasoning_content` to every
/// server but OpenAI's own (DeepSeek requires it within a tool loop; the others ignore
/// it or use it the same way).
pub fn request_body(p: &RequestParams<'_>, options: &RequestOptions) -> Value {
    let resend_reasoning = options.dialect.resends_reasoning();
    let mut messages = Vec::with_capacity(p.messages.len() + 1);
    if let Some(system) = p.system {
        messages.push(json!({"role": "system", "content": system}));
    }
    for m in p.messages {
        match m.role {
            Role::User => messages.push(json!({"role": "user", "content": user_content(m)})),
            Role::Assistant => {
                let mut msg = json!({"role": "assistant"});
                let text = m.text();
                let calls: Vec<Value> = m
                    .content
                    .iter()
                    .filter_map(|b| match b {
                        Block::ToolCall {
                            call_id,
                            name,
                            arguments,
                            arguments_raw,
                        } => Some(json!({
                            "id": call_id,
                            "type": "function",
                            "function": {
                                "name": name,
                                "arguments": match (arguments, arguments_raw) {
                                    (Some(v), _) => v.to_string(),
                                    (None, Some(raw)) => raw.clone(),
                                    (None, None) => "{}".to_owned(),
                                },
                            },
                        })),
                        _ => None,
                    })
                    .collect();
                // `null` content is valid only next to tool calls: an assistant message
                // with neither (an empty answer, reasoning only) is sent as `""`, which
                // keeps the turn order the server expects.
                msg["content"] = if text.is_empty() && !calls.is_empty() {
                    Value::Null
                } else {
                    Value::String(text)
                };
                if !calls.is_empty() {
                    msg["tool_calls"] = Value::Array(calls);
                    if resend_reasoning {
                        let reasoning = reasoning_text(m);
                        if !reasoning.is_empty() {
                            msg["reasoning_content"] = Value::String(reasoning);
                        }
                    }
                }
                messages.push(msg);
            }
            Role::Tool => {
                // Tool messages take text only: the images of the results follow them,
                // in one user message, each after a line naming its call.
                let mut images = Vec::new();
                for b in &m.content {
                    if let Block::ToolResult {
                        call_id,
                        name,
                        output,
                        parts,
                        ..
                    } = b
                    {
                        messages.push(json!({
                            "role": "tool",
                            "tool_call_id": call_id,
                            "content": output,
                        }));
                        let mut first = true;
                        for p in parts {
                            if let Block::Image(media) = p {
                                if first {
                                    images.push(json!({"type": "text", "text": format!(
                                        "The image(s) returned by tool {name} (call {call_id}):")}));
                                    first = false;
                                }
                                images.push(image_part(media));
                            }
                        }
                    }
                }
                if !images.is_empty() {
                    messages.push(json!({"role": "user", "content": images}));
                }
            }
        }
    }
    let mut body = json!({
        "model": p.model,
        "messages": messages,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    if let Some(max) = p.max_tokens {
        let key = if options.dialect.max_completion_tokens {
            "max_completion_tokens"
        } else {
            "max_tokens"
        };
        body[key] = json!(max);
    }
    if let Some(t) = p.temperature {
        body["temperature"] = json!(t);
    }
    let mut tools: Vec<Value> = p
        .tools
        .iter()
        .map(|t| {
            json!({"type": "function", "function": {
                "name": t.name, "description": t.description, "parameters": t.parameters}})
        })
        .collect();
    match options.output {
        Some(OutputRequest {
            name,
            schema,
            mode: WireMode::Native,
        }) => {
            body["response_format"] = json!({"type": "json_schema", "json_schema": {
                "name": name, "schema": schema, "strict": true}});
        }
        Some(OutputRequest {
            name,
            schema,
            mode: WireMode::Tool,
        }) => {
            // The other tools stay declared (the history may call them) but the answer
            // can only be this call.
            tools.push(json!({"type": "function", "function": {
                "name": name, "description": OUTPUT_TOOL_DESCRIPTION, "parameters": schema}}));
            body["tool_choice"] = json!({"type": "function", "function": {"name": name}});
        }
        None => {}
    }
    if !tools.is_empty() {
        body["tools"] = Value::Array(tools);
    }
    if let Some(r) = &options.reasoning {
        add_reasoning(&mut body, r, options.dialect.compat);
    }
    body
}

/// The description of the forced output tool (`output_mode: tool`).
pub(crate) const OUTPUT_TOOL_DESCRIPTION: &str =
    "Give your final answer by calling this tool; its arguments are the answer.";

/// A user message's content: its text as a string when it is only text (what every
/// compatible server takes), else an array of `text`, `image_url` and `file` parts.
fn user_content(m: &Message) -> Value {
    if !m
        .content
        .iter()
        .any(|b| matches!(b, Block::Image(_) | Block::Document(_)))
    {
        return Value::String(m.text());
    }
    let parts = m
        .content
        .iter()
        .filter_map(|b| match b {
            Block::Text { text } => Some(json!({"type": "text", "text": text})),
            Block::Image(media) => Some(image_part(media)),
            Block::Document(media) => Some(document_part(media)),
            _ => None,
        })
        .collect();
    Value::Array(parts)
}

/// `{type: image_url, image_url: {url}}`, the bytes as a `data:` URL.
fn image_part(media: &Media) -> Value {
    json!({"type": "image_url", "image_url": {"url": media.data_url()}})
}

/// `{type: file, file: {filename, file_data}}`, the PDF as a `data:` URL. A document by
/// URL cannot be sent (the input check refuses it for new input); one in a history
/// written for another provider goes as a line of text naming it.
fn document_part(media: &Media) -> Value {
    match &media.source {
        MediaSource::Bytes { .. } => json!({"type": "file", "file": {
            "filename": media.name.as_deref().unwrap_or("document.pdf"),
            "file_data": media.data_url(),
        }}),
        MediaSource::Url(url) => json!({"type": "text", "text": format!("[document: {url}]")}),
    }
}

/// The text of an assistant message's reasoning blocks, joined.
fn reasoning_text(m: &Message) -> String {
    let mut out = String::new();
    for b in &m.content {
        if let Block::Reasoning { text, .. } = b {
            out.push_str(text);
        }
    }
    out
}

/// Maps reasoning control to the fields `compat` documents.
fn add_reasoning(body: &mut Value, r: &Reasoning, compat: Compat) {
    let effort = r.effort.as_str();
    let on = r.effort != Effort::None;
    match compat {
        Compat::DeepSeek => {
            body["thinking"] = json!({"type": if on { "enabled" } else { "disabled" }});
            if on {
                body["reasoning_effort"] = json!(effort);
            }
        }
        Compat::Ollama => {
            body["think"] = json!(on);
            body["reasoning_effort"] = json!(effort);
        }
        Compat::Vllm => {
            body["chat_template_kwargs"] = json!({"enable_thinking": on});
            if on {
                body["reasoning_effort"] = json!(effort);
            }
        }
        Compat::OpenAi | Compat::Generic | Compat::Auto => {
            body["reasoning_effort"] = json!(effort);
        }
    }
}

/// Compares the chunk scanner with serde's derived parse on `data`, for the differential
/// fuzz target and the tests: `Ok(false)` when the scanner declines (serde then decides
/// alone), `Ok(true)` when it read the chunk as serde does, `Err` saying how they differ.
#[doc(hidden)]
pub fn check_chunk_scanner(data: &str) -> std::result::Result<bool, String> {
    let Some(fast) = scan_chunk(data) else {
        return Ok(false);
    };
    let strict = serde_json::from_str::<Chunk<'_>>(data)
        .map_err(|e| format!("the scanner read what serde refuses ({e}): {data:?}"))?;
    let (fast, strict) = (chunk_summary(&fast), chunk_summary(&strict));
    if fast != strict {
        return Err(format!("the scanner read {fast}, serde {strict}: {data:?}"));
    }
    Ok(true)
}

/// Everything the decoder looks at in a chunk, with `content` decoded.
fn chunk_summary(c: &Chunk<'_>) -> String {
    let content = |d: &Delta<'_>| match (&d.content_text, d.content) {
        (Some(t), _) => Some(t.to_string()),
        (None, Some(raw)) => Some(match serde_json::from_str::<Value>(raw.get()) {
            Ok(Value::String(text)) => text,
            Ok(other) => other.to_string(),
            Err(_) => "<not decodable>".into(),
        }),
        (None, None) => None,
    };
    format!(
        "{:?}",
        (
            c.id.as_deref(),
            c.model.as_deref(),
            c.usage.0.is_some(),
            c.error.map(|e| e.get()),
            c.choices.as_ref().map(|f| {
                f.0.as_ref().map(|ch| {
                    (
                        ch.index,
                        ch.finish_reason.as_deref(),
                        ch.delta.as_ref().map(|d| {
                            (
                                content(d),
                                d.refusal.as_deref(),
                                d.reasoning_content.as_deref(),
                                d.reasoning.as_deref(),
                                d.tool_calls.as_ref().map(Vec::len),
                            )
                        }),
                    )
                })
            }),
        )
    )
}

#[cfg(test)]
mod scan_tests {
    //! The chunk scanner must read exactly what serde's derived parse reads, or decline.
    use super::*;
    use proptest::prelude::*;

    /// Checks the scanner against serde on `data`; returns whether the scanner read it.
    fn agrees(data: &str) -> bool {
        check_chunk_scanner(data).unwrap_or_else(|e| panic!("{e}"))
    }

    const OPENAI: &str = r#"{"id":"chatcmpl-B1x2","object":"chat.completion.chunk","created":1735689600,"model":"gpt-4o","system_fingerprint":"fp_1","choices":[{"index":0,"delta":{"role":"assistant","content":" token","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null}"#;

    #[test]
    fn common_chunks_take_the_scanner() {
        for data in [
            OPENAI,
            r#"{"id":"x","choices":[{"index":0,"delta":{"content":"a\n\"b\" \u00e9 \ud83d\ude00 \/"},"finish_reason":null}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
            r#"{"choices":[{"index":0,"delta":{"reasoning_content":"hm"}}]}"#,
            r#" { "choices" : [ { "delta" : { "reasoning" : "hm" , "content" : null } } ] } "#,
            r#"{"choices":[{"index":1,"delta":{"content":"b"}},{"index":0,"delta":{"content":"a"}}],"x":[1,-2.5e3,true,false,null,{"y":[]}]}"#,
            r#"{"choices":[],"error":null}"#,
            r#"{"choices":null}"#,
            r#"{}"#,
        ] {
            assert!(agrees(data), "declined: {data}");
        }
    }

    #[test]
    fn what_serde_decides_differently_is_declined() {
        for data in [
            // Duplicate known keys (serde refuses; the repair path keeps the last).
            r#"{"choices":[],"choices":[]}"#,
            r#"{"choices":[{"delta":{"content":"a","content":"b"}}]}"#,
            r#"{"usage":null,"usage":null}"#,
            // Lone surrogates (repaired by the tolerant path).
            r#"{"choices":[{"delta":{"content":"x\ud83d"}}]}"#,
            r#"{"choices":[{"delta":{"content":"\ude00x"}}]}"#,
            // Shapes the scanner leaves to serde.
            r#"{"choices":[{"delta":{"content":[{"type":"text","text":"a"}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0}]}}]}"#,
            r#"{"usage":{"prompt_tokens":1}}"#,
            r#"{"error":{"message":"boom"}}"#,
            r#"{"choices":[[0,null,null]]}"#,
            r#"{"c\u0068oices":[]}"#,
            r#"[]"#,
            // Malformed.
            r#"{"choices":[{"index":01}]}"#,
            r#"{"choices":[{"index":1.0}]}"#,
            r#"{"choices":[{"index":-0}]}"#,
            r#"{"choices":[{"index":4294967296}]}"#,
            r#"{"x":1.}"#,
            r#"{"x":"a\qb"}"#,
            "{\"x\":\"a\u{1}b\"}",
            r#"{"x":tru}"#,
            r#"{"x":1}x"#,
            r#"{"x":1,}"#,
            r#"{"id":"a""#,
        ] {
            assert!(!agrees(data), "read: {data}");
        }
    }

    const STRINGS: &[&str] = &[
        r#""""#,
        r#""plain""#,
        r#""a\"b\\c""#,
        r#""\n\t\r\b\f\/""#,
        r#""\u00e9\u0000""#,
        r#""\ud83d\ude00""#,
        r#""\ud83d""#,
        r#""\ude00""#,
        r#""\uFFFE""#,
        "\"é😀\u{fffe}\"",
        "\"a\u{1}\"",
        r#""\x""#,
        r#""\u12""#,
    ];
    const SCALARS: &[&str] = &[
        "null",
        "true",
        "false",
        "0",
        "7",
        "-1",
        "1.5",
        "2E-2",
        "1e3",
        "01",
        "-0",
        "1.",
        "4294967296",
        "tru",
        "nul",
    ];

    fn value() -> impl Strategy<Value = String> {
        let leaf = prop_oneof![
            proptest::sample::select(STRINGS).prop_map(str::to_owned),
            proptest::sample::select(SCALARS).prop_map(str::to_owned),
        ];
        leaf.prop_recursive(3, 16, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..3)
                    .prop_map(|v| format!("[{}]", v.join(","))),
                proptest::collection::vec((key(), inner), 0..4).prop_map(|v| {
                    let fields: Vec<String> = v.iter().map(|(k, v)| format!("{k}:{v}")).collect();
                    format!("{{{}}}", fields.join(","))
                }),
            ]
        })
    }

    fn key() -> impl Strategy<Value = String> {
        proptest::sample::select(
            &[
                "id",
                "model",
                "choices",
                "usage",
                "error",
                "index",
                "delta",
                "finish_reason",
                "content",
                "refusal",
                "reasoning",
                "reasoning_content",
                "tool_calls",
                "role",
                "object",
                "x",
            ][..],
        )
        .prop_map(|k| format!("\"{k}\""))
    }

    fn chunk() -> impl Strategy<Value = String> {
        let delta = proptest::collection::vec((key(), value()), 0..4);
        let choice = (delta, proptest::collection::vec((key(), value()), 0..3)).prop_map(
            |(delta, extra)| {
                let d: Vec<String> = delta.iter().map(|(k, v)| format!("{k}:{v}")).collect();
                let mut fields = vec![format!("\"delta\":{{{}}}", d.join(","))];
                fields.extend(extra.iter().map(|(k, v)| format!("{k}:{v}")));
                format!("{{{}}}", fields.join(","))
            },
        );
        (
            proptest::collection::vec(choice, 0..3),
            proptest::collection::vec((key(), value()), 0..4),
        )
            .prop_map(|(choices, extra)| {
                let mut fields = vec![format!("\"choices\":[{}]", choices.join(","))];
                fields.extend(extra.iter().map(|(k, v)| format!("{k}:{v}")));
                format!("{{{}}}", fields.join(","))
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn the_scanner_reads_generated_chunks_as_serde_does(data in chunk()) {
            agrees(&data);
        }

        #[test]
        fn the_scanner_reads_damaged_chunks_as_serde_does_or_declines(
            at in 0usize..400,
            cut in 0usize..3,
            insert in proptest::sample::select(&["", "\"", "\\", "{", "}", "[", "]", ",", ":", " ", "n", "0", "\u{1}", "é"][..]),
        ) {
            let chars: Vec<char> = OPENAI.chars().collect();
            let at = at % (chars.len() + 1);
            let end = (at + cut).min(chars.len());
            let mut data: String = chars[..at].iter().collect();
            data.push_str(insert);
            data.extend(&chars[end..]);
            agrees(&data);
        }
    }
}
