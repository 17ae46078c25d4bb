//! Owns the OpenAI Responses wire format (`POST /v1/responses`, also served by vLLM,
//! Ollama and LiteLLM): the streaming event decoder and the request body, stateless by
//! default.
//!
//! **Decoding.** The stream is SSE with `event:` names; the JSON repeats the name as
//! `type`, which is what dispatch reads (the SSE name is used only when `type` is
//! missing). There is no `[DONE]`: `response.completed`, `response.incomplete`,
//! `response.failed` or an `error` event ends it. The answer is a list of *output
//! items*, each announced by `response.output_item.added` and finished by
//! `response.output_item.done` (which carries the whole item and is its source of
//! truth); deltas name their item by `item_id` (and `output_index`). Items map to
//! panto's blocks:
//! - `message` → a text block (opened at its first text), fed by
//!   `response.output_text.delta` and `response.refusal.delta` (a refusal ends the
//!   message with stop reason `refusal`, as in Chat Completions);
//! - `function_call` → a tool-call block (`id`/`call_id`/`name` at `.added`), fed by
//!   `response.function_call_arguments.delta`; the tool is answered by `call_id`;
//! - `reasoning` → a reasoning block (opened at its first text), fed by
//!   `response.reasoning_summary_text.delta` (summary parts joined by a blank line) and
//!   `response.reasoning_text.delta` (the raw reasoning open-weight servers send); the
//!   item itself — id, summary, `encrypted_content` — is kept verbatim as an opaque block
//!   right after it, and goes back in place with the next request;
//! - every other item (built-in tool calls: `web_search_call`, `mcp_call`…) → kept
//!   verbatim as an opaque block, no events.
//!
//! A `.done` whose text or arguments go past what the deltas brought (a server that
//! sends whole items) adds the rest as one more delta. `response.completed`'s `output`
//! is the whole answer and has the last word: an item the stream did not finish, or
//! never sent (a server that answers only there), is taken from it the same way, and
//! one that contradicts what streamed (less content than the deltas brought, another
//! kind of item) is a `protocol` error. Function calls are told apart by their
//! `call_id`, so two calls that a server gives one item id or one `output_index` stay
//! two calls. Unknown event types, and fields
//! of unexpected types, are ignored. `message_start` goes out with the first block (or
//! at the end), so that a response failing before any output may still be retried.
//!
//! **Encoding.** Stateless by default: `store: false`, the whole history as `input`
//! items, the encrypted reasoning asked for (`include: ["reasoning.encrypted_content"]`)
//! and sent back verbatim in its place; the items panto models (messages, function
//! calls) are rebuilt without their ids, which a server that stored nothing cannot
//! resolve. With [`RequestOptions::store`] the server keeps each response and a request
//! carries only what followed the previous one, with its `previous_response_id`.

use std::borrow::Cow;
use std::collections::HashMap;

use serde::de::{IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

use super::tolerant::{clean, parse_tolerant, Count, Obj};
use super::{Assembly, DecodeLimits, Emit, Progress, ProviderKind, RequestOptions, RequestParams};
use super::{AuthHeader, Decode, OutputRequest, Wire};
use crate::error::{Error, ErrorKind, Result};
use crate::event::{BlockKind, DeltaKind};
use crate::message::{Block, Role, StopReason};
use crate::request::{Compat, Effort};
use crate::sse::SseEvent;

/// What `include` asks for in stateless mode: the reasoning, encrypted, so it can be
/// sent back without the server keeping anything.
pub const INCLUDE_ENCRYPTED_REASONING: &str = "reasoning.encrypted_content";

/// OpenAI Responses behind the seam: OpenAI's base URL, key and credential.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Format;

impl Wire for Format {
    fn default_base_url(&self) -> &'static str {
        super::openai::DEFAULT_BASE_URL
    }

    fn telemetry_name(&self, base_url: &str) -> &'static str {
        if base_url.contains(".openai.azure.com") || base_url.contains(".services.ai.azure.com") {
            "azure.ai.openai"
        } else {
            "openai"
        }
    }

    fn api_key_env(&self) -> &'static str {
        super::openai::API_KEY_ENV
    }

    fn endpoint_path(&self) -> &'static str {
        "/responses"
    }

    fn auth_headers(&self, api_key: &str) -> Vec<AuthHeader> {
        super::openai::bearer(api_key)
    }

    /// `POST /responses/input_tokens`: the request without its streaming and output
    /// settings, answered with `{"object": "response.input_tokens", "input_tokens": n}`.
    fn token_count_request(
        &self,
        base_url: &str,
        _model: &str,
        body: &Value,
    ) -> Option<(String, Value)> {
        let url = format!("{}/responses/input_tokens", base_url.trim_end_matches('/'));
        let keep = [
            "model",
            "instructions",
            "input",
            "tools",
            "tool_choice",
            "reasoning",
            "text",
            "previous_response_id",
        ];
        Some((url, super::wire::only_keys(body, &keep)))
    }

    fn token_count(&self, answer: &Value) -> Option<u64> {
        answer.get("input_tokens")?.as_u64()
    }

    /// Strict mode (`text.format.strict: true`).
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

    /// The `store` configuration key: the server keeps each response, and the next
    /// request names it (`previous_response_id`).
    fn keeps_responses(&self) -> bool {
        true
    }
}

super::wire::decode_by_inherent_methods!(Decoder);

/// A string field that counts as absent when it is anything else, so an event type
/// added later with a differently shaped field of the same name cannot fail decoding.
#[derive(Default)]
struct Str<'a>(Option<Cow<'a, str>>);

impl<'de: 'a, 'a> Deserialize<'de> for Str<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Str<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> std::result::Result<Str<'a>, E> {
                Ok(Str(Some(Cow::Borrowed(v))))
            }
            fn visit_str<E>(self, v: &str) -> std::result::Result<Str<'a>, E> {
                Ok(Str(Some(Cow::Owned(v.to_owned()))))
            }
            fn visit_string<E>(self, v: String) -> std::result::Result<Str<'a>, E> {
                Ok(Str(Some(Cow::Owned(v))))
            }
            fn visit_u64<E>(self, _: u64) -> std::result::Result<Str<'a>, E> {
                Ok(Str(None))
            }
            fn visit_i64<E>(self, _: i64) -> std::result::Result<Str<'a>, E> {
                Ok(Str(None))
            }
            fn visit_f64<E>(self, _: f64) -> std::result::Result<Str<'a>, E> {
                Ok(Str(None))
            }
            fn visit_bool<E>(self, _: bool) -> std::result::Result<Str<'a>, E> {
                Ok(Str(None))
            }
            fn visit_unit<E>(self) -> std::result::Result<Str<'a>, E> {
                Ok(Str(None))
            }
            fn visit_none<E>(self) -> std::result::Result<Str<'a>, E> {
                Ok(Str(None))
            }
            fn visit_seq<A: SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> std::result::Result<Str<'a>, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Str(None))
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<Str<'a>, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Str(None))
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

impl Str<'_> {
    fn get(&self) -> Option<&str> {
        self.0.as_deref()
    }
}

/// One streamed event, every field read leniently; `item` is parsed only by the item
/// events (two per item), never by the deltas.
#[derive(Deserialize)]
struct WireEvent<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Str<'a>,
    #[serde(borrow, default)]
    item_id: Str<'a>,
    #[serde(default)]
    output_index: Count,
    #[serde(default)]
    summary_index: Count,
    #[serde(borrow, default)]
    delta: Str<'a>,
    #[serde(borrow, default)]
    item: Option<&'a RawValue>,
    #[serde(borrow, default)]
    response: Obj<WireResponse<'a>>,
    /// The `error` event's own fields.
    #[serde(borrow, default)]
    code: Str<'a>,
    #[serde(borrow, default)]
    message: Str<'a>,
    #[serde(borrow, default)]
    error: Obj<WireError<'a>>,
}

/// The response object of the lifecycle events. Its `output` (every item again) is read
/// only from `response.completed`, where it is the truth the streamed items are checked
/// against.
#[derive(Deserialize, Default)]
struct WireResponse<'a> {
    #[serde(borrow, default)]
    id: Str<'a>,
    #[serde(borrow, default)]
    output: Option<&'a RawValue>,
    #[serde(borrow, default)]
    model: Str<'a>,
    #[serde(default)]
    usage: Obj<WireUsage>,
    #[serde(borrow, default)]
    incomplete_details: Obj<Incomplete<'a>>,
    #[serde(borrow, default)]
    error: Obj<WireError<'a>>,
}

#[derive(Deserialize, Default)]
struct Incomplete<'a> {
    #[serde(borrow, default)]
    reason: Str<'a>,
}

#[derive(Deserialize, Default)]
struct WireError<'a> {
    #[serde(borrow, default)]
    code: Str<'a>,
    #[serde(rename = "type", borrow, default)]
    kind: Str<'a>,
    #[serde(borrow, default)]
    message: Str<'a>,
}

#[derive(Deserialize, Default)]
struct WireUsage {
    #[serde(default)]
    input_tokens: Count,
    #[serde(default)]
    output_tokens: Count,
    #[serde(default)]
    input_tokens_details: Obj<InputDetails>,
    #[serde(default)]
    output_tokens_details: Obj<OutputDetails>,
}

#[derive(Deserialize, Default)]
struct InputDetails {
    #[serde(default)]
    cached_tokens: Count,
}

#[derive(Deserialize, Default)]
struct OutputDetails {
    #[serde(default)]
    reasoning_tokens: Count,
}

/// What an output item is to panto.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ItemKind {
    Message,
    FunctionCall,
    Reasoning,
    /// Anything else: kept verbatim, no events.
    Other,
}

impl ItemKind {
    fn of(item_type: &str) -> ItemKind {
        match item_type {
            "message" => ItemKind::Message,
            "function_call" => ItemKind::FunctionCall,
            "reasoning" => ItemKind::Reasoning,
            _ => ItemKind::Other,
        }
    }

    fn block_kind(self) -> Option<BlockKind> {
        match self {
            ItemKind::Message => Some(BlockKind::Text),
            ItemKind::FunctionCall => Some(BlockKind::ToolCall),
            ItemKind::Reasoning => Some(BlockKind::Reasoning),
            ItemKind::Other => None,
        }
    }

    fn delta_kind(self) -> DeltaKind {
        match self {
            ItemKind::Message | ItemKind::Other => DeltaKind::Text,
            ItemKind::FunctionCall => DeltaKind::ToolArgs,
            ItemKind::Reasoning => DeltaKind::Reasoning,
        }
    }
}

/// One output item of the response.
#[derive(Debug)]
struct Item {
    id: String,
    output_index: Option<u64>,
    /// A function call's `call_id`, once known: what tells two calls apart when a
    /// server gives them one item id or one `output_index`.
    call_id: String,
    kind: ItemKind,
    /// Its panto block, once opened.
    block: Option<usize>,
    /// Bytes of deltas sent to the block (what a `.done` may go past).
    streamed: usize,
    /// The reasoning summary part the last delta belonged to.
    summary_index: Option<u64>,
    done: bool,
}

/// Streaming decoder of one Responses response.
#[derive(Debug)]
pub struct Decoder {
    pub(crate) asm: Assembly,
    items: Vec<Item>,
    by_id: HashMap<String, usize>,
    by_index: HashMap<u64, usize>,
    refused: bool,
    done: bool,
}

impl Decoder {
    /// A decoder with the default [`DecodeLimits`].
    pub fn new(message: u32) -> Decoder {
        Decoder::with_assembly(Assembly::new(message, DecodeLimits::default()))
    }

    pub(crate) fn with_assembly(mut asm: Assembly) -> Decoder {
        asm.opaque_provider = ProviderKind::OpenAiResponses.as_str();
        Decoder {
            asm,
            items: Vec::new(),
            by_id: HashMap::new(),
            by_index: HashMap::new(),
            refused: false,
            done: false,
        }
    }

    /// Decodes one SSE event of the response.
    pub fn on_sse(&mut self, ev: &SseEvent<'_>, emit: Emit<'_>) -> Result<Progress> {
        if self.done {
            return Ok(Progress::Finished);
        }
        if ev.data.trim().is_empty() {
            return Ok(Progress::Continue);
        }
        let mut scratch = String::new();
        let (wire, marked): (WireEvent<'_>, bool) = parse_tolerant(ev.data, &mut scratch, "event")?;
        let kind = wire.kind.get().unwrap_or(ev.event);
        match kind {
            "response.output_text.delta" | "response.refusal.delta" => {
                if kind == "response.refusal.delta" {
                    self.refused = true;
                }
                self.delta(&wire, ItemKind::Message, marked, emit)?;
            }
            "response.function_call_arguments.delta" => {
                self.delta(&wire, ItemKind::FunctionCall, marked, emit)?;
            }
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                self.delta(&wire, ItemKind::Reasoning, marked, emit)?;
            }
            "response.output_item.added" => self.item_added(&wire, marked, emit)?,
            "response.output_item.done" => self.item_done(&wire, marked, emit)?,
            "response.created" | "response.in_progress" | "response.queued" => {
                if let Some(r) = &wire.response.0 {
                    self.lifecycle(r, marked);
                }
            }
            "response.completed" => {
                self.terminal(&wire, marked);
                let output = wire.response.0.as_ref().and_then(|r| r.output);
                self.reconcile(output, marked, emit)?;
                let stop = if self.refused {
                    StopReason::Refusal
                } else if self.asm.has_tool_calls() {
                    StopReason::ToolUse
                } else {
                    StopReason::EndTurn
                };
                // The server says the response is whole: a block whose item never got
                // its `.done` is complete as streamed, not cut off.
                for i in 0..self.items.len() {
                    if let Some(b) = self.items[i].block {
                        self.asm.close(b, false, emit)?;
                    }
                }
                return self.finish(stop, emit);
            }
            "response.incomplete" => {
                self.terminal(&wire, marked);
                let reason = wire
                    .response
                    .0
                    .as_ref()
                    .and_then(|r| r.incomplete_details.0.as_ref())
                    .and_then(|d| d.reason.get())
                    .map(|r| clean(r, marked).into_owned());
                let stop = match reason.as_deref() {
                    Some("max_output_tokens") => StopReason::MaxTokens,
                    Some("content_filter") => StopReason::ContentFilter,
                    Some(other) => StopReason::Other(other.to_owned()),
                    None => StopReason::Other("incomplete".to_owned()),
                };
                return self.finish(stop, emit);
            }
            "response.failed" => {
                let detail = wire.response.0.as_ref().and_then(|r| r.error.0.as_ref());
                return Err(failure(
                    "the response failed",
                    detail,
                    None,
                    ev.data,
                    marked,
                ));
            }
            "error" => {
                let detail = wire.error.0.as_ref();
                return Err(failure(
                    "the provider reported an error mid-stream",
                    detail,
                    Some((&wire.code, &wire.message)),
                    ev.data,
                    marked,
                ));
            }
            _ => {} // content parts, `.done` of texts, annotations, and later additions
        }
        Ok(Progress::Continue)
    }

    /// End of body: every response ends with a terminal event, so this one was cut short.
    pub fn on_eof(&mut self, _emit: Emit<'_>) -> Result<()> {
        if self.done {
            return Ok(());
        }
        Err(Error::incomplete(
            "the stream ended before the provider finished the response \
             (no response.completed, response.incomplete or response.failed)",
        ))
    }

    fn finish(&mut self, stop: StopReason, emit: Emit<'_>) -> Result<Progress> {
        self.done = true;
        self.asm.finish(stop, emit)?;
        Ok(Progress::Finished)
    }

    /// `response.created` and its kin: the response id and model, kept for
    /// `message_start` (which has not gone out yet when they come).
    fn lifecycle(&mut self, r: &WireResponse<'_>, marked: bool) {
        if self.asm.started_flag() {
            return;
        }
        if let Some(id) = r.id.get().filter(|s| !s.is_empty()) {
            self.asm.response_id = Some(clean(id, marked).into_owned());
        }
        if let Some(model) = r.model.get().filter(|s| !s.is_empty()) {
            self.asm.model = clean(model, marked).into_owned();
        }
    }

    /// The final response object: its id and model if none came before, and its usage.
    fn terminal(&mut self, wire: &WireEvent<'_>, marked: bool) {
        let Some(r) = &wire.response.0 else { return };
        self.lifecycle(r, marked);
        let Some(u) = &r.usage.0 else { return };
        let usage = &mut self.asm.usage;
        if let Some(v) = u.input_tokens.0 {
            usage.input_tokens = v;
            usage.reported = true;
        }
        if let Some(v) = u.output_tokens.0 {
            usage.output_tokens = v;
            usage.reported = true;
        }
        if let Some(v) = u
            .input_tokens_details
            .0
            .as_ref()
            .and_then(|d| d.cached_tokens.0)
        {
            usage.cache_read_tokens = v;
        }
        if let Some(v) = u
            .output_tokens_details
            .0
            .as_ref()
            .and_then(|d| d.reasoning_tokens.0)
        {
            usage.reasoning_tokens = v;
        }
    }

    /// The item an event names: by `item_id` (the latest item of that id), else by
    /// `output_index` — but never an item with another id: two items sharing an
    /// `output_index` stay two.
    fn find(&self, item_id: Option<&str>, output_index: Option<u64>) -> Option<usize> {
        let id = item_id.filter(|s| !s.is_empty());
        // Deltas nearly always belong to the item opened last: no hashing for them.
        if let Some(last) = self.items.last() {
            let same = match id {
                Some(id) => last.id == id,
                None => output_index.is_some() && last.output_index == output_index,
            };
            if same {
                return Some(self.items.len() - 1);
            }
        }
        if let Some(i) = id.and_then(|id| self.by_id.get(id)) {
            return Some(*i);
        }
        output_index
            .and_then(|ix| self.by_index.get(&ix).copied())
            .filter(|&i| id.is_none() || self.items[i].id.is_empty())
    }

    /// The function call `call_id` names, preferring one not yet done.
    fn find_call(&self, call_id: &str) -> Option<usize> {
        if call_id.is_empty() {
            return None;
        }
        let mut found = None;
        for (i, item) in self.items.iter().enumerate() {
            if item.kind == ItemKind::FunctionCall && item.call_id == call_id {
                if !item.done {
                    return Some(i);
                }
                found.get_or_insert(i);
            }
        }
        found
    }

    /// Whether item `i` is a function call with a `call_id` other than `call_id` (both
    /// known): then an item announced with the same item id or index is another call.
    fn another_call(&self, i: usize, call_id: Option<&str>) -> bool {
        let item = &self.items[i];
        item.kind == ItemKind::FunctionCall
            && !item.call_id.is_empty()
            && call_id.is_some_and(|c| !c.is_empty() && c != item.call_id)
    }

    /// Registers a new item; at most `max_blocks` of them, their ids charged to the
    /// message.
    fn add_item(
        &mut self,
        item_id: Option<&str>,
        output_index: Option<u64>,
        kind: ItemKind,
        marked: bool,
    ) -> Result<usize> {
        let max = self.asm.limits().max_blocks;
        if self.items.len() >= max {
            return Err(Error::protocol(format!(
                "the response has more than max_blocks ({max}) output items"
            )));
        }
        let id = item_id
            .map(|s| clean(s, marked).into_owned())
            .unwrap_or_default();
        self.asm.hold(id.len())?;
        let pos = self.items.len();
        // An id or index given again names the newer item from now on.
        if !id.is_empty() {
            self.by_id.insert(id.clone(), pos);
        }
        if let Some(ix) = output_index {
            self.by_index.insert(ix, pos);
        }
        self.items.push(Item {
            id,
            output_index,
            call_id: String::new(),
            kind,
            block: None,
            streamed: 0,
            summary_index: None,
            done: false,
        });
        Ok(pos)
    }

    /// The item an event names, registered as `kind` if it was never announced.
    fn item_for(&mut self, wire: &WireEvent<'_>, kind: ItemKind, marked: bool) -> Result<usize> {
        match self.find(wire.item_id.get(), wire.output_index.0) {
            Some(i) => Ok(i),
            None => self.add_item(wire.item_id.get(), wire.output_index.0, kind, marked),
        }
    }

    /// The item's block, opened on first need.
    fn block(&mut self, i: usize, emit: Emit<'_>) -> Result<Option<usize>> {
        let Some(item) = self.items.get(i) else {
            return Ok(None);
        };
        if item.block.is_some() || item.done {
            return Ok(item.block);
        }
        let Some(kind) = item.kind.block_kind() else {
            return Ok(None);
        };
        let b = self.asm.open(kind, emit)?;
        self.items[i].block = Some(b);
        Ok(Some(b))
    }

    /// Sends `text` to item `i`'s block.
    fn push(&mut self, i: usize, text: &str, marked: bool, emit: Emit<'_>) -> Result<()> {
        if text.is_empty() {
            return Ok(());
        }
        let Some(b) = self.block(i, emit)? else {
            return Ok(());
        };
        let kind = self.items[i].kind.delta_kind();
        self.items[i].streamed = self.items[i].streamed.saturating_add(text.len());
        self.asm.delta(b, kind, text, marked, emit)
    }

    fn delta(
        &mut self,
        wire: &WireEvent<'_>,
        kind: ItemKind,
        marked: bool,
        emit: Emit<'_>,
    ) -> Result<()> {
        let Some(text) = wire.delta.get().filter(|t| !t.is_empty()) else {
            return Ok(());
        };
        let i = self.item_for(wire, kind, marked)?;
        let item = &mut self.items[i];
        // A delta of another kind than its item (text for a function call) is dropped,
        // as is one after the item's `.done`.
        if item.kind != kind || item.done {
            return Ok(());
        }
        if kind == ItemKind::Reasoning {
            // Summary parts are separate paragraphs.
            let part = wire.summary_index.0;
            if part.is_some() && item.summary_index != part {
                let first = item.summary_index.is_none();
                item.summary_index = part;
                if !first && item.streamed > 0 {
                    self.push(i, "\n\n", false, emit)?;
                }
            }
        }
        self.push(i, text, marked, emit)
    }

    fn item_added(&mut self, wire: &WireEvent<'_>, marked: bool, emit: Emit<'_>) -> Result<()> {
        let Some(item) = parse_item(wire.item, marked) else {
            return Ok(());
        };
        let kind = ItemKind::of(str_field(&item, "type").unwrap_or(""));
        let id = str_field(&item, "id");
        let call_id = str_field(&item, "call_id").filter(|_| kind == ItemKind::FunctionCall);
        if let Some(i) = self.find(id, wire.output_index.0) {
            if !self.another_call(i, call_id) {
                return Ok(()); // announced twice: the first one stands
            }
        }
        let i = self.add_item(id, wire.output_index.0, kind, false)?;
        if kind == ItemKind::FunctionCall {
            // The call's id and name come first, so the block opens at once.
            self.call_ids(i, &item, emit)?;
        }
        Ok(())
    }

    /// Records a function call's `call_id` and name on its block.
    fn call_ids(&mut self, i: usize, item: &Value, emit: Emit<'_>) -> Result<()> {
        let Some(b) = self.block(i, emit)? else {
            return Ok(());
        };
        let call_id = str_field(item, "call_id").unwrap_or("");
        let name = str_field(item, "name").unwrap_or("");
        if self.items[i].call_id.is_empty() && !call_id.is_empty() {
            self.asm.hold(call_id.len())?;
            self.items[i].call_id = call_id.to_owned();
        }
        self.asm.tool_ids(b, call_id, name, false, emit)
    }

    fn item_done(&mut self, wire: &WireEvent<'_>, marked: bool, emit: Emit<'_>) -> Result<()> {
        let Some(item) = parse_item(wire.item, marked) else {
            return Ok(());
        };
        let size = wire.item.map_or(0, |raw| raw.get().len());
        self.whole_item(item, wire.output_index.0, size, false, emit)
    }

    /// `response.completed`'s `output`, the whole answer: every item the stream did not
    /// finish (or never announced: a server that sends the answer only there) is taken
    /// from it, as its `.done` would have been. An item there that contradicts what was
    /// streamed is a `protocol` error.
    fn reconcile(&mut self, output: Option<&RawValue>, marked: bool, emit: Emit<'_>) -> Result<()> {
        let Some(raw) = output else {
            return Ok(());
        };
        let Ok(items) = serde_json::from_str::<Vec<&RawValue>>(raw.get()) else {
            return Ok(()); // not a list: nothing to take from it
        };
        for (ix, raw) in items.into_iter().enumerate() {
            let Some(item) = parse_item(Some(raw), marked) else {
                continue;
            };
            self.whole_item(item, Some(ix as u64), raw.get().len(), true, emit)?;
        }
        Ok(())
    }

    /// One whole item (a `.done`'s, or one of `response.completed`'s `output` when
    /// `final_word`): the rest of its content beyond what streamed, then its block closed.
    fn whole_item(
        &mut self,
        item: Value,
        output_index: Option<u64>,
        size: usize,
        final_word: bool,
        emit: Emit<'_>,
    ) -> Result<()> {
        let item_type = str_field(&item, "type").unwrap_or("");
        let kind = ItemKind::of(item_type);
        let id = str_field(&item, "id");
        let call_id = str_field(&item, "call_id").filter(|_| kind == ItemKind::FunctionCall);
        let found = match call_id.and_then(|c| self.find_call(c)) {
            Some(i) => Some(i),
            None => self
                .find(id, output_index)
                // The final output's positions are the response's own: an item there
                // with an id the stream did not use (servers that name items anew)
                // is the stream's item at its place.
                .or_else(|| {
                    output_index
                        .filter(|_| final_word)
                        .and_then(|ix| self.by_index.get(&ix).copied())
                })
                .filter(|&i| !self.another_call(i, call_id)),
        };
        let i = match found {
            Some(i) if self.items[i].kind == kind && !self.items[i].done => i,
            Some(i) if self.items[i].done => {
                if final_word && self.items[i].kind != kind {
                    return Err(Error::protocol(format!(
                        "response.completed's output item {} is a {item_type:?} item, but                          the stream finished it as another kind",
                        output_index.unwrap_or_default()
                    )));
                }
                return Ok(());
            }
            // An item that changed its type between `.added` and `.done` (or was never
            // announced) is taken as `.done` describes it.
            _ => self.add_item(id, output_index, kind, false)?,
        };
        let whole = match kind {
            ItemKind::Message => {
                let (text, refusal) = message_text(&item);
                self.refused |= refusal;
                Some(text)
            }
            ItemKind::FunctionCall => {
                self.call_ids(i, &item, emit)?;
                Some(str_field(&item, "arguments").unwrap_or("").to_owned())
            }
            ItemKind::Reasoning => Some(reasoning_text(&item)),
            ItemKind::Other => None,
        };
        if let Some(whole) = whole {
            // What the deltas did not bring (all of it, for a server that sends whole
            // items) goes as one more delta.
            let streamed = self.items[i].streamed;
            if whole.len() > streamed && whole.is_char_boundary(streamed) {
                self.push(i, &whole[streamed..], false, emit)?;
            } else if final_word && whole.len() < streamed {
                return Err(Error::protocol(format!(
                    "response.completed's output item {} holds {} bytes of content, fewer \
                     than the {streamed} its deltas streamed",
                    output_index.unwrap_or_default(),
                    whole.len()
                )));
            }
        }
        if let Some(b) = self.items[i].block {
            self.asm.close(b, false, emit)?;
        }
        self.items[i].done = true;
        if matches!(kind, ItemKind::Reasoning | ItemKind::Other) {
            self.asm.opaque(item, size)?;
        }
        Ok(())
    }
}

/// An item's JSON, with repaired lone surrogates made U+FFFD; `None` if it is not an
/// object.
fn parse_item(raw: Option<&RawValue>, marked: bool) -> Option<Value> {
    let mut item: Value = serde_json::from_str(raw?.get()).ok()?;
    if !item.is_object() {
        return None;
    }
    if marked {
        clean_strings(&mut item);
    }
    Some(item)
}

fn clean_strings(v: &mut Value) {
    match v {
        Value::String(s) => {
            if let Cow::Owned(c) = clean(s, true) {
                *s = c;
            }
        }
        Value::Array(a) => a.iter_mut().for_each(clean_strings),
        Value::Object(o) => o.values_mut().for_each(clean_strings),
        _ => {}
    }
}

fn str_field<'v>(item: &'v Value, key: &str) -> Option<&'v str> {
    item.get(key).and_then(Value::as_str)
}

/// The text of a message item (its `output_text` and `refusal` parts), and whether it
/// refused.
fn message_text(item: &Value) -> (String, bool) {
    let mut text = String::new();
    let mut refused = false;
    for part in item
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        match str_field(part, "type") {
            Some("output_text") => text.push_str(str_field(part, "text").unwrap_or("")),
            Some("refusal") => {
                refused = true;
                text.push_str(str_field(part, "refusal").unwrap_or(""));
            }
            _ => {}
        }
    }
    (text, refused)
}

/// The readable reasoning of a reasoning item: its summary parts, else its raw
/// reasoning text, paragraphs joined by a blank line (as the deltas are).
fn reasoning_text(item: &Value) -> String {
    let parts = |key: &str| -> Vec<&str> {
        item.get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|p| str_field(p, "text"))
            .filter(|t| !t.is_empty())
            .collect()
    };
    let summary = parts("summary");
    if summary.is_empty() {
        parts("content").join("\n\n")
    } else {
        summary.join("\n\n")
    }
}

/// `response.failed` or an `error` event as a `provider` error with the provider's code.
fn failure(
    what: &str,
    detail: Option<&WireError<'_>>,
    top: Option<(&Str<'_>, &Str<'_>)>,
    data: &str,
    marked: bool,
) -> Error {
    fn pick<'s>(a: Option<&'s str>, b: Option<&'s str>) -> Option<&'s str> {
        a.or(b).filter(|s| !s.is_empty())
    }
    let code = pick(
        detail.and_then(|d| d.code.get().or(d.kind.get())),
        top.and_then(|t| t.0.get()),
    )
    .map(|c| clean(c, marked).into_owned());
    let message = pick(
        detail.and_then(|d| d.message.get()),
        top.and_then(|t| t.1.get()),
    )
    .map(|m| clean(m, marked).into_owned())
    .unwrap_or_else(|| crate::text::truncate(data, 300).to_owned());
    let retryable = matches!(
        code.as_deref(),
        Some(
            "server_error"
                | "internal_server_error"
                | "api_error"
                | "overloaded_error"
                | "server_is_overloaded"
                | "rate_limit_exceeded"
        )
    );
    Error::new(ErrorKind::Provider, format!("{what}: {message}"))
        .with_retryable(retryable)
        .with_provider_code(code)
}

/// The SSE data of the stream equivalent to a complete (non-streamed) response object:
/// each output item as its `.done`, then the terminal event its `status` names. `None`
/// when `body` is not a response.
pub(crate) fn complete_body_events(body: Value) -> Option<Vec<String>> {
    let Value::Object(mut body) = body else {
        return None;
    };
    if body.get("object").and_then(Value::as_str) != Some("response") {
        return None;
    }
    let Some(Value::Array(output)) = body.remove("output") else {
        return None;
    };
    let status = body
        .get("status")
        .and_then(Value::as_str)
        .unwrap_or("completed")
        .to_owned();
    let response = Value::Object(body);
    let mut out = Vec::with_capacity(output.len() + 2);
    out.push(json!({"type": "response.created", "response": response}).to_string());
    for (i, item) in output.into_iter().enumerate() {
        out.push(
            json!({"type": "response.output_item.done", "output_index": i, "item": item})
                .to_string(),
        );
    }
    let terminal = match status.as_str() {
        "incomplete" => "response.incomplete",
        "failed" => "response.failed",
        _ => "response.completed",
    };
    out.push(json!({"type": terminal, "response": response}).to_string());
    Some(out)
}

/// Whether the server gives its reasoning back encrypted. vLLM refuses the `include`
/// ("Encrypted content is not supported") and Ollama has none: for them the reasoning
/// items go back as they came, in plain text.
pub fn encrypts_reasoning(compat: Compat) -> bool {
    !matches!(compat, Compat::Vllm | Compat::Ollama)
}

/// A user message's content: its text as a string when it is only text, else an array
/// of `input_text`, `input_image` and `input_file` parts.
fn user_content(m: &crate::message::Message) -> Value {
    if !m
        .content
        .iter()
        .any(|b| matches!(b, Block::Image(_) | Block::Document(_)))
    {
        return Value::String(m.text());
    }
    Value::Array(m.content.iter().filter_map(input_part).collect())
}

/// `input_text`; `input_image` with the URL or a `data:` URL; `input_file` with
/// `file_data` (a `data:` URL) or `file_url`.
fn input_part(b: &Block) -> Option<Value> {
    use crate::media::MediaSource;
    Some(match b {
        Block::Text { text } => json!({"type": "input_text", "text": text}),
        Block::Image(media) => json!({"type": "input_image", "image_url": media.data_url()}),
        Block::Document(media) => match &media.source {
            MediaSource::Bytes { .. } => json!({"type": "input_file",
                "filename": media.name.as_deref().unwrap_or("document.pdf"),
                "file_data": media.data_url()}),
            MediaSource::Url(url) => json!({"type": "input_file", "file_url": url}),
        },
        _ => return None,
    })
}

/// The Responses request body for a streamed turn.
///
/// `input` is the conversation as items: user messages, the assistant's text as
/// assistant messages and its calls as `function_call` items (both without ids), the
/// reasoning and built-in items it received kept verbatim in their places, and tool
/// results as `function_call_output` items. Reasoning and redacted reasoning from
/// another provider are not sent (the server could not read them); neither is a
/// reasoning item without its `encrypted_content` in stateless mode on a server that
/// encrypts (it would name an item the server never kept: "Item with id 'rs_…' not
/// found").
///
/// Stateless (the default): `store: false`, with `include` asking for the encrypted
/// reasoning unless the server has none ([`encrypts_reasoning`]). With
/// [`RequestOptions::store`]: `store: true`, and once a response of this conversation is
/// known ([`RequestOptions::previous_response`]), only the messages after it with its
/// `previous_response_id`.
///
/// Reasoning control becomes `reasoning: {effort, summary: "auto"}` (just `{effort:
/// "none"}` for none), so summaries stream as reasoning.
pub fn request_body(p: &RequestParams<'_>, options: &RequestOptions<'_>) -> Value {
    let encrypted = encrypts_reasoning(options.dialect.compat);
    let (start, previous) = match options.previous_response {
        Some(prev) if options.store && prev.messages <= p.messages.len() => {
            (prev.messages, Some(prev.id))
        }
        _ => (0, None),
    };
    let mut input: Vec<Value> = Vec::with_capacity(p.messages.len().saturating_sub(start) + 1);
    for m in p.messages.iter().skip(start) {
        match m.role {
            Role::User => {
                input.push(json!({"type": "message", "role": "user", "content": user_content(m)}));
            }
            Role::Assistant => {
                let mut text = String::new();
                let flush = |text: &mut String, input: &mut Vec<Value>| {
                    if !text.is_empty() {
                        input.push(json!({"type": "message", "role": "assistant",
                                          "content": std::mem::take(text)}));
                    }
                };
                for b in &m.content {
                    match b {
                        Block::Text { text: t } => text.push_str(t),
                        Block::ToolCall {
                            call_id,
                            name,
                            arguments,
                            arguments_raw,
                        } => {
                            flush(&mut text, &mut input);
                            input.push(json!({
                                "type": "function_call",
                                "call_id": call_id,
                                "name": name,
                                "arguments": match (arguments, arguments_raw) {
                                    (Some(v), _) => v.to_string(),
                                    (None, Some(raw)) => raw.clone(),
                                    (None, None) => "{}".to_owned(),
                                },
                            }));
                        }
                        Block::Opaque { provider, block }
                            if provider == ProviderKind::OpenAiResponses.as_str() =>
                        {
                            let is_reasoning = str_field(block, "type") == Some("reasoning");
                            let sealed = str_field(block, "encrypted_content")
                                .is_some_and(|s| !s.is_empty());
                            if is_reasoning && encrypted && !options.store && !sealed {
                                continue;
                            }
                            flush(&mut text, &mut input);
                            input.push(block.clone());
                        }
                        // Reasoning is sent back only as the verbatim item above.
                        _ => {}
                    }
                }
                flush(&mut text, &mut input);
            }
            Role::Tool => {
                for b in &m.content {
                    if let Block::ToolResult {
                        call_id,
                        output,
                        parts,
                        ..
                    } = b
                    {
                        // A result with images sends its parts, in order.
                        let output = if parts.is_empty() {
                            json!(output)
                        } else {
                            Value::Array(parts.iter().filter_map(input_part).collect())
                        };
                        input.push(json!({
                            "type": "function_call_output",
                            "call_id": call_id,
                            "output": output,
                        }));
                    }
                }
            }
        }
    }
    let mut body = Map::new();
    body.insert("model".into(), json!(p.model));
    body.insert("input".into(), Value::Array(input));
    body.insert("stream".into(), json!(true));
    body.insert("store".into(), json!(options.store));
    if let Some(id) = previous {
        body.insert("previous_response_id".into(), json!(id));
    }
    if !options.store && encrypted {
        body.insert("include".into(), json!([INCLUDE_ENCRYPTED_REASONING]));
    }
    if let Some(system) = p.system {
        body.insert("instructions".into(), json!(system));
    }
    if let Some(max) = p.max_tokens {
        body.insert("max_output_tokens".into(), json!(max));
    }
    if let Some(t) = p.temperature {
        body.insert("temperature".into(), json!(t));
    }
    if !p.tools.is_empty() {
        let tools: Vec<Value> = p
            .tools
            .iter()
            .map(|t| {
                // Not strict: strict mode wants every property required and no
                // additional ones, which a tool's own schema rarely says.
                json!({"type": "function", "name": t.name, "description": t.description,
                       "parameters": t.parameters, "strict": false})
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
        body.insert("tool_choice".into(), json!("auto"));
        body.insert("parallel_tool_calls".into(), json!(true));
    }
    if let Some(OutputRequest { name, schema, .. }) = options.output {
        body.insert(
            "text".into(),
            json!({"format": {"type": "json_schema", "name": name, "schema": schema,
                              "strict": true}}),
        );
    }
    if let Some(r) = &options.reasoning {
        body.insert(
            "reasoning".into(),
            if r.effort == Effort::None {
                json!({"effort": "none"})
            } else {
                json!({"effort": r.effort.as_str(), "summary": "auto"})
            },
        );
    }
    Value::Object(body)
}
