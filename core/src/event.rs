//! Owns the event vocabulary of a turn — defined once here, mapped by every binding —
//! and the push [`Receiver`] trait through which the agent loop delivers them.
//!
//! Every event serializes to its canonical JSON, `{"type":"<snake_case>", …fields}`
//! (see DESIGN.md, "Events"); `Event::to_json` is what the CLI's `--json`, golden traces
//! and the bindings' `to_json` produce.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use std::task::{Context, Poll};

use crate::message::{Block, StopReason, Usage};
use crate::secret::Secrets;
use crate::turn::DeferredCall;

/// Removes secrets from every string of a content block.
pub(crate) fn redact_block(block: &mut Block, secrets: &Secrets) {
    match block {
        Block::Text { text } => secrets.redact_in_place(text),
        Block::Reasoning { text, signature } => {
            secrets.redact_in_place(text);
            if let Some(s) = signature {
                secrets.redact_in_place(s);
            }
        }
        Block::RedactedReasoning { data } => secrets.redact_in_place(data),
        Block::ToolCall {
            call_id,
            name,
            arguments,
            arguments_raw,
        } => {
            secrets.redact_in_place(call_id);
            secrets.redact_in_place(name);
            if let Some(v) = arguments {
                redact_value(v, secrets);
            }
            if let Some(r) = arguments_raw {
                secrets.redact_in_place(r);
            }
        }
        Block::ToolResult {
            call_id,
            name,
            output,
            parts,
            ..
        } => {
            secrets.redact_in_place(call_id);
            secrets.redact_in_place(name);
            secrets.redact_in_place(output);
            parts.iter_mut().for_each(|p| redact_block(p, secrets));
        }
        // The bytes are not text; a URL or a file name may hold a key.
        Block::Image(media) | Block::Document(media) => {
            if let crate::media::MediaSource::Url(url) = &mut media.source {
                secrets.redact_in_place(url);
            }
            if let Some(name) = &mut media.name {
                secrets.redact_in_place(name);
            }
        }
        Block::Opaque { block, .. } => redact_value(block, secrets),
    }
}

/// Removes secrets from every string inside a JSON value (tool arguments).
pub(crate) fn redact_value(v: &mut Value, secrets: &Secrets) {
    match v {
        Value::String(s) => secrets.redact_in_place(s),
        Value::Array(items) => items.iter_mut().for_each(|i| redact_value(i, secrets)),
        Value::Object(map) => map.values_mut().for_each(|i| redact_value(i, secrets)),
        _ => {}
    }
}

/// The canonical JSON of a `tool_result` event's `parts`: each part in its block form
/// (`{"type":"text","text"}`, `{"type":"image","url",…}`), except that an image of bytes
/// also says how many bytes it holds, before its base64 data:
/// `{"type":"image","media_type":"image/png","size":1234,"data":"iVBOR…","name"?}`. The
/// size lets a reader of the JSON decide without decoding; the bytes are there so the
/// JSON carries the whole event (each image is capped at `max_message_bytes`). Reading
/// it back ignores `size`.
pub mod tool_parts {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use serde_json::Value;

    use crate::media::MediaSource;
    use crate::message::Block;

    #[derive(Serialize)]
    #[serde(untagged)]
    enum Part<'a> {
        Bytes {
            #[serde(rename = "type")]
            ty: &'static str,
            media_type: &'a str,
            size: usize,
            data: String,
            #[serde(skip_serializing_if = "Option::is_none")]
            name: Option<&'a str>,
        },
        Block(&'a Block),
    }

    fn part(block: &Block) -> Part<'_> {
        match block {
            Block::Image(m) => match &m.source {
                MediaSource::Bytes { media_type, data } => Part::Bytes {
                    ty: "image",
                    media_type,
                    size: data.len(),
                    data: m.base64().unwrap_or_default(),
                    name: m.name.as_deref(),
                },
                MediaSource::Url(_) => Part::Block(block),
            },
            _ => Part::Block(block),
        }
    }

    /// Writes the parts in the form above (serde's `with`).
    pub fn serialize<S: Serializer>(parts: &[Block], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(parts.iter().map(part))
    }

    /// Reads the parts back (serde's `with`), ignoring `size`.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Block>, D::Error> {
        let items = Vec::<Value>::deserialize(d)?;
        items
            .into_iter()
            .map(|mut v| {
                if let Some(obj) = v.as_object_mut() {
                    obj.remove("size");
                }
                serde_json::from_value(v).map_err(serde::de::Error::custom)
            })
            .collect()
    }

    /// The parts' canonical JSON text (the C ABI's `parts`), in the event's key order.
    pub fn to_json(parts: &[Block]) -> String {
        // Strings and integers only: serializing cannot fail.
        serde_json::to_string(&parts.iter().map(part).collect::<Vec<_>>()).unwrap_or_default()
    }

    /// The parts as their canonical JSON value (what the bindings' dict forms hold).
    pub fn to_value(parts: &[Block]) -> Value {
        // Strings and integers only: serializing cannot fail.
        serde_json::to_value(parts.iter().map(part).collect::<Vec<_>>()).unwrap_or(Value::Null)
    }
}

/// Declares a closed string set: the Rust enum (serde as its snake_case names), its
/// `as_str`, and its entry in the vocabulary ([`crate::vocab`]).
macro_rules! string_enum {
    (
        $(#[doc = $doc:literal])+
        $spec:ident $vocab_name:literal
        pub enum $name:ident {
            $( #[doc = $vdoc:literal] $variant:ident = $value:literal, )+
        }
    ) => {
        $(#[doc = $doc])+
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum $name {
            $( #[doc = $vdoc] #[serde(rename = $value)] $variant, )+
        }

        impl $name {
            /// The canonical snake_case name.
            pub fn as_str(self) -> &'static str {
                match self { $( $name::$variant => $value, )+ }
            }
        }

        #[doc = concat!("The description of [`", stringify!($name), "`] in the vocabulary.")]
        pub const $spec: crate::vocab::EnumSpec = crate::vocab::EnumSpec {
            name: $vocab_name,
            variant: stringify!($name),
            doc: concat!($($doc, "\n"),+),
            open: false,
            values: &[ $( crate::vocab::ValueSpec { name: $value, variant: stringify!($variant), doc: $vdoc }, )+ ],
        };
    };
}

string_enum! {
    /// The kind of a content block as announced by `block_start`.
    BLOCK_KIND "block_kind"
    pub enum BlockKind {
        /// Text of the answer.
        Text = "text",
        /// Reasoning, including redacted reasoning (its `block_complete` content tells them apart).
        Reasoning = "reasoning",
        /// A tool call.
        ToolCall = "tool_call",
    }
}

string_enum! {
    /// What a `content_delta` fragment extends.
    DELTA_KIND "delta_kind"
    pub enum DeltaKind {
        /// Text of the answer.
        Text = "text",
        /// Reasoning text.
        Reasoning = "reasoning",
        /// A fragment of a tool call's arguments (JSON text).
        ToolArgs = "tool_args",
    }
}

impl crate::vocab::Describe for BlockKind {
    const TYPE: &'static str = "block_kind";
}
impl crate::vocab::Describe for DeltaKind {
    const TYPE: &'static str = "delta_kind";
}

/// Removes the agent's secrets from every string an event field holds.
trait Redact {
    fn redact(&mut self, secrets: &Secrets);
}
impl Redact for String {
    fn redact(&mut self, secrets: &Secrets) {
        secrets.redact_in_place(self);
    }
}
impl Redact for Value {
    fn redact(&mut self, secrets: &Secrets) {
        redact_value(self, secrets);
    }
}
impl Redact for crate::output::JsonText {
    fn redact(&mut self, secrets: &Secrets) {
        self.redact_strings(secrets);
    }
}
impl Redact for Block {
    fn redact(&mut self, secrets: &Secrets) {
        redact_block(self, secrets);
    }
}
impl Redact for Vec<Block> {
    fn redact(&mut self, secrets: &Secrets) {
        self.iter_mut().for_each(|b| redact_block(b, secrets));
    }
}
impl<T: Redact> Redact for Option<T> {
    fn redact(&mut self, secrets: &Secrets) {
        if let Some(v) = self {
            v.redact(secrets);
        }
    }
}
macro_rules! no_strings {
    ($($t:ty),*) => { $(impl Redact for $t { fn redact(&mut self, _: &Secrets) {} })* };
}
no_strings!(bool, u16, u32, u64, f64, BlockKind, DeltaKind, StopReason, Usage);
impl Redact for Vec<DeferredCall> {
    fn redact(&mut self, secrets: &Secrets) {
        for c in self {
            secrets.redact_in_place(&mut c.call_id);
            secrets.redact_in_place(&mut c.name);
            redact_value(&mut c.arguments, secrets);
        }
    }
}

/// Declares the events: the [`Event`] enum (serde's canonical JSON), its stable codes
/// and names, its redaction, and [`EVENTS`], its entry in the vocabulary. Each field's
/// first doc line is its one-line description there.
macro_rules! events {
    (
        $(
            $(#[doc = $doc:literal])+
            $code:literal $variant:ident $name:literal {
                $( #[doc = $fdoc:literal] $(#[$fattr:meta])* $field:ident : $fty:ty, )*
            }
        )+
    ) => {
        /// One event of a turn. `message` is the 0-based index of the assistant message
        /// within the turn; `block` the 0-based index of a block within that message.
        ///
        /// Non-exhaustive: a later version may add an event type, so a `match` keeps a
        /// fallback arm that ignores what it does not know.
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
        #[serde(tag = "type")]
        #[non_exhaustive]
        pub enum Event {
            $(
                $(#[doc = $doc])+
                #[serde(rename = $name)]
                $variant { $( #[doc = $fdoc] $(#[$fattr])* $field: $fty, )* },
            )+
        }

        /// Every event of the vocabulary, in code order.
        pub const EVENTS: &[crate::vocab::EventSpec] = &[
            $(
                crate::vocab::EventSpec {
                    name: $name,
                    variant: stringify!($variant),
                    code: $code,
                    doc: concat!($($doc, "\n"),+),
                    fields: &[ $(
                        crate::vocab::FieldSpec {
                            name: stringify!($field),
                            ty: <$fty as crate::vocab::Describe>::TYPE,
                            optional: <$fty as crate::vocab::Describe>::OPTIONAL
                                || crate::vocab::skipped_when_empty(stringify!($($fattr)*)),
                            doc: $fdoc,
                        },
                    )* ],
                },
            )+
        ];

        impl Event {
            /// Every event type name, in code order; bindings check theirs against it.
            pub const TYPES: [&'static str; [$($code),+].len()] = [$($name),+];

            /// The stable numeric code of this event type, as the C ABI reports it
            /// (`PANTO_EV_*`): 1-based, increasing in the order of [`Event::TYPES`] (a
            /// code reserved by work not yet merged may be skipped), never renumbered.
            pub fn code(&self) -> u32 {
                match self { $( Event::$variant { .. } => $code, )+ }
            }

            /// The canonical `type` name of this event.
            pub fn type_name(&self) -> &'static str {
                match self { $( Event::$variant { .. } => $name, )+ }
            }

            /// Removes the agent's secrets from every string the event carries.
            pub(crate) fn redact(&mut self, secrets: &Secrets) {
                match self {
                    $( Event::$variant { $($field,)* } => { $( Redact::redact($field, secrets); )* } )+
                }
            }
        }
    };
}

events! {
    /// A provider response begins.
    1 MessageStart "message_start" {
        /// 0-based index of the assistant message within the turn.
        message: u32,
        /// The model answering, as the provider names it.
        model: String,
        /// The provider's id of the response, when it sent one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        response_id: Option<String>,
        /// Milliseconds the request waited for the endpoint's max_concurrent_requests (absent when the agent sets none).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        queued_ms: Option<u64>,
    }
    /// A content block opens.
    2 BlockStart "block_start" {
        /// 0-based index of the assistant message within the turn.
        message: u32,
        /// 0-based index of the block within its message.
        block: u32,
        /// What the block holds.
        kind: BlockKind,
    }
    /// A fragment of a block arrives.
    3 ContentDelta "content_delta" {
        /// 0-based index of the assistant message within the turn.
        message: u32,
        /// 0-based index of the block within its message.
        block: u32,
        /// What the fragment extends.
        kind: DeltaKind,
        /// The fragment.
        text: String,
    }
    /// The id and name of a tool_call block, once both are known.
    4 ToolDetails "tool_details" {
        /// 0-based index of the assistant message within the turn.
        message: u32,
        /// 0-based index of the block within its message.
        block: u32,
        /// The call's id, unique within the message.
        call_id: String,
        /// The tool's name.
        name: String,
    }
    /// A block closed; `content` is the assembled block (a tool call with parsed arguments).
    5 BlockComplete "block_complete" {
        /// 0-based index of the assistant message within the turn.
        message: u32,
        /// 0-based index of the block within its message.
        block: u32,
        /// The block's canonical content.
        content: Block,
    }
    /// One assistant message ended (not the turn).
    6 MessageEnd "message_end" {
        /// 0-based index of the assistant message within the turn.
        message: u32,
        /// Why the message ended.
        stop_reason: StopReason,
        /// Token usage of this message's request.
        usage: Usage,
    }
    /// Dispatch of one call begins. `arguments` is the parsed arguments object, or
    /// `null` when the model's arguments were not a JSON object; `arguments_raw` then holds
    /// the raw text (the same pair as the call's `tool_call` block).
    7 ToolCallStart "tool_call_start" {
        /// 0-based index of the assistant message within the turn.
        message: u32,
        /// The call's id, unique within the message.
        call_id: String,
        /// The tool's name.
        name: String,
        /// The parsed arguments object, or null when they were not a JSON object.
        arguments: Option<Value>,
        /// The arguments as sent, when they were not a JSON object.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        arguments_raw: Option<String>,
        /// True for a tool the caller implements (answered with submit_tool_result).
        host: bool,
    }
    /// A tool call finished (reported as each one finishes).
    8 ToolResult "tool_result" {
        /// 0-based index of the assistant message within the turn.
        message: u32,
        /// The call's id.
        call_id: String,
        /// The tool's name.
        name: String,
        /// The result the model reads.
        output: String,
        /// True when the result reports a failure.
        is_error: bool,
        /// The result's text and image parts in order, present only when the tool returned an image (an image of bytes with its size and base64 data).
        #[serde(default, skip_serializing_if = "Vec::is_empty", with = "tool_parts")]
        parts: Vec<Block>,
    }
    /// A request failed before any of its answer was shown and is tried again after
    /// `delay_ms`. `attempt` is the number of the attempt about to start (2 for the first
    /// retry); `max_attempts` is the most there can be (`1 + retry.max_retries`).
    9 ProviderRetry "provider_retry" {
        /// 0-based index of the assistant message within the turn.
        message: u32,
        /// The attempt about to start (2 for the first retry).
        attempt: u32,
        /// The most attempts there can be (1 + retry.max_retries).
        max_attempts: u32,
        /// The wait before the attempt, in milliseconds.
        delay_ms: u64,
        /// One line saying what failed.
        reason: String,
        /// The HTTP status of the failure, when there was one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        status: Option<u16>,
    }
    /// Terminal: the turn is over. `usage` is the turn total, `messages` the number of
    /// assistant messages, `text` the final assistant message's text, `output` its parsed
    /// and validated JSON when an output schema applied to the turn.
    10 MessageComplete "message_complete" {
        /// Why the turn ended.
        stop_reason: StopReason,
        /// Token usage of the whole turn.
        usage: Usage,
        /// The number of assistant messages of the turn.
        messages: u32,
        /// The final assistant message's text.
        text: String,
        /// The parsed, validated structured output, present only when an output schema applied. Its numbers are exactly as the model wrote them.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        output: Option<crate::output::JsonText>,
        /// The calls the turn paused for (stop reason deferred), each {call_id, name, arguments, reason: approval|external|deferred}; present only then.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        deferred: Vec<DeferredCall>,
        /// The model that answered the turn's last request, as the configuration names it (the agent's, the turn's model option, or a fallback entry's).
        #[serde(default)]
        model: String,
    }
    /// The history was compacted before the next request (automatic compaction, see
    /// `compaction` in the configuration): `messages_*` count the history's messages,
    /// `tokens_*` its size in tokens (`tokens_before` from the provider's usage when
    /// known, else estimated as bytes / 4; `tokens_after` estimated in the same measure).
    11 HistoryCompacted "history_compacted" {
        /// Messages in the history before.
        messages_before: u64,
        /// Messages in the history after.
        messages_after: u64,
        /// The history's size in tokens before.
        tokens_before: u64,
        /// The history's size in tokens after (estimated in the same measure).
        tokens_after: u64,
    }
    /// An answer did not match the output schema: it stays in the history, the
    /// validation error goes back to the model in a user message, and another request
    /// follows (emitted before that request starts).
    12 OutputRepair "output_repair" {
        /// 0-based index of the assistant message that failed validation.
        message: u32,
        /// The repair about to be asked for (1 for the first).
        attempt: u32,
        /// The most repairs there can be (output_retries).
        max_attempts: u32,
        /// The validation error sent back to the model (one line, bounded).
        error: String,
    }
    /// A steering message (`steer`) entered the conversation at a step boundary; the
    /// next request carries it (emitted before that request starts).
    13 SteeringDelivered "steering_delivered" {
        /// 0-based index of the assistant message that will answer it.
        message: u32,
        /// The message's text (its text parts, joined).
        text: String,
    }
    /// A running tool call reported progress (an MCP server's `notifications/progress`
    /// for the call, or a Rust tool through its `CallProgress`). Coalesced: at
    /// most one per call every 100 ms, and the latest report is always delivered before
    /// the call's `tool_result`.
    14 ToolProgress "tool_progress" {
        /// 0-based index of the assistant message within the turn.
        message: u32,
        /// The call's id.
        call_id: String,
        /// The tool's name.
        name: String,
        /// Progress so far, in the tool's own unit (a finite number).
        progress: f64,
        /// The total the progress goes to, when the tool knows it (a positive finite number).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        total: Option<f64>,
        /// What the tool is doing, when it said (one line, at most 500 bytes).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        text: Option<String>,
    }
    /// An MCP server sent a log line (`notifications/message`) at or above its
    /// `log_level`, while one of its tools ran in this turn.
    15 ServerLog "server_log" {
        /// The MCP server's name (its key in mcp_servers).
        server: String,
        /// The line's level: debug, info, notice, warning, error, critical, alert or emergency.
        level: String,
        /// The logger's name, when the server gave one (at most 100 bytes).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        logger: Option<String>,
        /// The line (a string as sent, anything else as its JSON; at most 2000 bytes).
        data: String,
    }
    /// An MCP server asked the agent's model for a message (`sampling/createMessage`,
    /// answered only for a server whose `sampling` is enabled) while one of its tools ran
    /// in this turn; its usage is counted in the turn's. Emitted once the request is
    /// settled, before the `tool_result` of a call of that server still running then.
    16 McpSamplingRequest "mcp_sampling_request" {
        /// The MCP server's name (its key in mcp_servers).
        server: String,
        /// What was asked: the first line of the last message's text (at most 200 bytes).
        summary: String,
        /// The output limit of the request (the server's maxTokens, at most sampling_max_tokens).
        max_tokens: u64,
        /// answered (the model's answer went to the server), denied (the host's hook refused it) or failed (the model request failed).
        outcome: String,
    }
    /// An MCP server asked the host a question (`elicitation/create`, answered only for
    /// a server whose `elicitation` is enabled) while one of its tools ran in this turn.
    /// Emitted once the question is settled, before the `tool_result` of a call of that
    /// server still running then.
    17 McpElicitationRequest "mcp_elicitation_request" {
        /// The MCP server's name (its key in mcp_servers).
        server: String,
        /// The server's message to the person (at most 200 bytes).
        message: String,
        /// accept, decline or cancel (the host's answer; decline without a hook), or invalid (an accepted answer did not match the requested schema: the server got an error).
        outcome: String,
    }
    /// A request failed after its retries, before any of its answer was shown, in a way
    /// another model may not (rate_limited, server, connection, timeout, or a provider
    /// that said it is overloaded): the step goes to the next model of the agent's
    /// `fallback` list, which the rest of the turn keeps (emitted before that request).
    18 ProviderFallback "provider_fallback" {
        /// 0-based index of the assistant message the failed request was for.
        message: u32,
        /// The provider that failed (its configuration name).
        from_provider: String,
        /// The model that failed, as the configuration names it.
        from_model: String,
        /// The provider the step goes to.
        to_provider: String,
        /// The model the step goes to.
        to_model: String,
        /// The kind of the error that caused it (rate_limited, server, connection, timeout or provider).
        error_kind: String,
        /// The error's message (one line).
        error_message: String,
        /// The HTTP status of the failure, when there was one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        status: Option<u16>,
    }
}

impl Event {
    /// The type name of numeric code `code` (see [`Event::code`]).
    pub fn type_name_of_code(code: u32) -> Option<&'static str> {
        EVENTS.iter().find(|e| e.code == code).map(|e| e.name)
    }

    /// The canonical JSON of this event (one line, no trailing newline; U+2028 and
    /// U+2029 escaped, see [`escape_line_separators`]).
    pub fn to_json(&self) -> String {
        // Events hold only strings, integers, booleans and JSON values: infallible.
        escape_line_separators(serde_json::to_string(self).unwrap_or_default())
    }

    /// True for `message_complete`, the last event of every turn.
    pub fn is_terminal(&self) -> bool {
        matches!(self, Event::MessageComplete { .. })
    }
}

/// Escapes U+2028 (LINE SEPARATOR) and U+2029 (PARAGRAPH SEPARATOR) in a line of JSON
/// as `\u2028` and `\u2029`. Raw, they are valid inside a JSON string, but consumers
/// that split a stream into lines with Unicode's line breaks (Python's
/// `str.splitlines`, JavaScript before ES2019) cut the line there; escaped, the parsed
/// value is the same. Go's `encoding/json` escapes them the same way. Outside strings
/// JSON has no place for them, so replacing every one is exact.
pub fn escape_line_separators(json: String) -> String {
    if !json.contains(['\u{2028}', '\u{2029}']) {
        return json;
    }
    json.replace('\u{2028}', "\\u2028")
        .replace('\u{2029}', "\\u2029")
}

/// Whether the loop should go on after delivering an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Go on with the turn.
    Continue,
    /// Stop the turn: the loop cancels what is running, leaves the history valid and
    /// ends with a `cancelled` error.
    Stop,
}

/// The push interface of the agent loop: [`Receiver::on_event`] receives every event of
/// the turn, in order, by value; return [`Flow::Stop`] to end the turn.
///
/// There is one method for all events, not one per event: a receiver matches on the
/// [`Event`] it is given, so every field of every event reaches it, and a field added to
/// the vocabulary (`events!`) reaches it with no change to this trait (DESIGN.md, "One
/// vocabulary"). `Event` is non-exhaustive: keep an arm that ignores what you do not
/// handle.
///
/// ```no_run
/// # use panto::{DeltaKind, Event, Flow, Receiver};
/// struct Print;
/// impl Receiver for Print {
///     fn on_event(&mut self, event: Event) -> Flow {
///         match event {
///             Event::ContentDelta { kind: DeltaKind::Text, text, .. } => print!("{text}"),
///             Event::ToolResult { name, output, parts, .. } => {
///                 println!("{name}: {output} ({} parts)", parts.len())
///             }
///             _ => {}
///         }
///         Flow::Continue
///     }
/// }
/// ```
pub trait Receiver: Send {
    /// Receives every event of the turn, in order; [`Flow::Stop`] ends the turn like a
    /// cancel.
    fn on_event(&mut self, event: Event) -> Flow;
    /// Backpressure. The loop polls this before each read from the network; a receiver
    /// that cannot take more events yet returns `Pending` and wakes `cx` when it can (the
    /// pull adapter does this while its queue is full). The read waits, nothing is lost,
    /// and the time spent waiting here counts against no timeout: a slow consumer slows
    /// the turn, it never fails it. `Ready(Flow::Stop)` ends the turn like `on_event`'s.
    /// The default is always ready.
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Flow> {
        let _ = cx;
        Poll::Ready(Flow::Continue)
    }
}

/// A receiver that keeps every event (tests, and callers that want the whole turn).
#[derive(Debug, Default)]
pub struct Collect(pub Vec<Event>);

impl Receiver for Collect {
    fn on_event(&mut self, event: Event) -> Flow {
        self.0.push(event);
        Flow::Continue
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn canonical_json_forms() {
        let cases = vec![
            (
                Event::MessageStart {
                    message: 0,
                    model: "m".into(),
                    response_id: None,
                    queued_ms: None,
                },
                json!({"type":"message_start","message":0,"model":"m"}),
            ),
            (
                Event::ContentDelta {
                    message: 1,
                    block: 2,
                    kind: DeltaKind::ToolArgs,
                    text: "{\"a".into(),
                },
                json!({"type":"content_delta","message":1,"block":2,"kind":"tool_args","text":"{\"a"}),
            ),
            (
                Event::BlockComplete {
                    message: 0,
                    block: 0,
                    content: Block::ToolCall {
                        call_id: "c".into(),
                        name: "n".into(),
                        arguments: Some(json!({"x":1})),
                        arguments_raw: None,
                    },
                },
                json!({"type":"block_complete","message":0,"block":0,
                       "content":{"type":"tool_call","call_id":"c","name":"n","arguments":{"x":1}}}),
            ),
            (
                Event::MessageComplete {
                    stop_reason: StopReason::Other("eos2".into()),
                    usage: Usage::default(),
                    messages: 2,
                    text: "t".into(),
                    output: None,
                    deferred: Vec::new(),
                    model: "m".into(),
                },
                json!({"type":"message_complete","stop_reason":"other:eos2","usage":{
                    "input_tokens":0,"output_tokens":0,"cache_read_tokens":0,
                    "cache_write_tokens":0,"reasoning_tokens":0,"reported":false},
                       "messages":2,"text":"t","model":"m"}),
            ),
            (
                Event::MessageComplete {
                    stop_reason: StopReason::EndTurn,
                    usage: Usage::default(),
                    messages: 1,
                    text: "{\"a\":1}".into(),
                    output: Some(crate::output::JsonText::from_value(&json!({"a": 1}))),
                    deferred: Vec::new(),
                    model: "m".into(),
                },
                json!({"type":"message_complete","stop_reason":"end_turn","usage":{
                    "input_tokens":0,"output_tokens":0,"cache_read_tokens":0,
                    "cache_write_tokens":0,"reasoning_tokens":0,"reported":false},
                       "messages":1,"text":"{\"a\":1}","output":{"a":1},"model":"m"}),
            ),
            (
                Event::OutputRepair {
                    message: 0,
                    attempt: 1,
                    max_attempts: 2,
                    error: "missing property".into(),
                },
                json!({"type":"output_repair","message":0,"attempt":1,"max_attempts":2,
                       "error":"missing property"}),
            ),
            (
                Event::MessageComplete {
                    stop_reason: StopReason::Deferred,
                    usage: Usage::default(),
                    messages: 1,
                    text: "".into(),
                    output: None,
                    deferred: vec![crate::DeferredCall {
                        call_id: "c1".into(),
                        name: "rm".into(),
                        arguments: json!({"path": "/tmp/x"}),
                        reason: crate::DeferReason::Approval,
                    }],
                    model: "m".into(),
                },
                json!({"type":"message_complete","stop_reason":"deferred","usage":{
                    "input_tokens":0,"output_tokens":0,"cache_read_tokens":0,
                    "cache_write_tokens":0,"reasoning_tokens":0,"reported":false},
                       "messages":1,"text":"","deferred":[{"call_id":"c1","name":"rm",
                       "arguments":{"path":"/tmp/x"},"reason":"approval"}],"model":"m"}),
            ),
            (
                Event::ProviderFallback {
                    message: 0,
                    from_provider: "openai".into(),
                    from_model: "a".into(),
                    to_provider: "anthropic".into(),
                    to_model: "b".into(),
                    error_kind: "server".into(),
                    error_message: "HTTP 503".into(),
                    status: Some(503),
                },
                json!({"type":"provider_fallback","message":0,"from_provider":"openai",
                       "from_model":"a","to_provider":"anthropic","to_model":"b",
                       "error_kind":"server","error_message":"HTTP 503","status":503}),
            ),
            (
                Event::SteeringDelivered {
                    message: 2,
                    text: "stop".into(),
                },
                json!({"type":"steering_delivered","message":2,"text":"stop"}),
            ),
            (
                Event::HistoryCompacted {
                    messages_before: 12,
                    messages_after: 5,
                    tokens_before: 9000,
                    tokens_after: 700,
                },
                json!({"type":"history_compacted","messages_before":12,"messages_after":5,
                       "tokens_before":9000,"tokens_after":700}),
            ),
        ];
        for (ev, want) in cases {
            let got: Value = serde_json::from_str(&ev.to_json()).unwrap();
            assert_eq!(got, want);
            assert_eq!(got["type"], ev.type_name());
            let back: Event = serde_json::from_value(got).unwrap();
            assert_eq!(back, ev);
        }
    }

    #[test]
    fn tool_result_parts_carry_size_and_data() {
        let png = b"\x89PNG\r\n\x1a\nIMG".to_vec();
        let ev = Event::ToolResult {
            message: 0,
            call_id: "c".into(),
            name: "camera".into(),
            output: "a cat".into(),
            is_error: false,
            parts: vec![
                Block::text("a cat"),
                Block::Image(crate::Media::bytes(png.clone(), None).unwrap()),
                Block::Image(crate::Media::url("https://x/c.png")),
            ],
        };
        let json = ev.to_json();
        assert_eq!(
            json,
            r#"{"type":"tool_result","message":0,"call_id":"c","name":"camera","output":"a cat","is_error":false,"parts":[{"type":"text","text":"a cat"},{"type":"image","media_type":"image/png","size":11,"data":"iVBORw0KGgpJTUc="},{"type":"image","url":"https://x/c.png"}]}"#
        );
        let back: Event = serde_json::from_str(&json).unwrap();
        assert_eq!(back, ev);
        let Event::ToolResult { parts, .. } = &ev else {
            unreachable!()
        };
        assert_eq!(
            tool_parts::to_value(parts),
            serde_json::from_str::<Value>(&json).unwrap()["parts"]
        );
        assert!(json.ends_with(&format!(",\"parts\":{}}}", tool_parts::to_json(parts))));
        // Plain text results keep their old form: no `parts` key.
        let plain = Event::ToolResult {
            message: 0,
            call_id: "c".into(),
            name: "n".into(),
            output: "o".into(),
            is_error: false,
            parts: Vec::new(),
        };
        assert!(!plain.to_json().contains("parts"));
    }

    #[test]
    fn codes_follow_the_type_list() {
        let ev = Event::ToolResult {
            message: 0,
            call_id: "c".into(),
            name: "n".into(),
            output: "o".into(),
            is_error: false,
            parts: Vec::new(),
        };
        assert_eq!(Event::type_name_of_code(ev.code()), Some(ev.type_name()));
        assert_eq!(Event::type_name_of_code(0), None);
        assert_eq!(
            Event::type_name_of_code(Event::TYPES.len() as u32 + 1),
            None
        );
        assert_eq!(Event::type_name_of_code(99), None);
        let compacted = Event::HistoryCompacted {
            messages_before: 0,
            messages_after: 0,
            tokens_before: 0,
            tokens_after: 0,
        };
        assert_eq!(compacted.code(), 11);
        for (spec, name) in EVENTS.iter().zip(Event::TYPES) {
            assert_eq!(Event::type_name_of_code(spec.code), Some(name));
        }
    }

    #[test]
    fn tool_call_start_mirrors_the_tool_call_block() {
        let parsed = Event::ToolCallStart {
            message: 0,
            call_id: "c".into(),
            name: "n".into(),
            arguments: Some(json!({"a": 1})),
            arguments_raw: None,
            host: true,
        };
        let v: Value = serde_json::from_str(&parsed.to_json()).unwrap();
        assert_eq!(v["arguments"], json!({"a": 1}));
        assert!(v.get("arguments_raw").is_none());
        let raw = Event::ToolCallStart {
            message: 0,
            call_id: "c".into(),
            name: "n".into(),
            arguments: None,
            arguments_raw: Some("{oops".into()),
            host: false,
        };
        let v: Value = serde_json::from_str(&raw.to_json()).unwrap();
        assert_eq!(v["arguments"], Value::Null);
        assert_eq!(v["arguments_raw"], "{oops");
    }

    /// A receiver sees each event whole: every field the vocabulary declares, the ones
    /// the old per-event methods left out (`arguments_raw`, `parts`) included.
    #[test]
    fn a_receiver_gets_every_field_of_every_event() {
        struct StopAtResult(Vec<Event>);
        impl Receiver for StopAtResult {
            fn on_event(&mut self, event: Event) -> Flow {
                let stop = matches!(event, Event::ToolResult { .. });
                self.0.push(event);
                if stop {
                    Flow::Stop
                } else {
                    Flow::Continue
                }
            }
        }
        let call = Event::ToolCallStart {
            message: 0,
            call_id: "c".into(),
            name: "n".into(),
            arguments: None,
            arguments_raw: Some("{oops".into()),
            host: false,
        };
        let result = Event::ToolResult {
            message: 0,
            call_id: "c".into(),
            name: "n".into(),
            output: "o".into(),
            is_error: false,
            parts: vec![Block::text("p")],
        };
        let mut r = StopAtResult(Vec::new());
        assert_eq!(r.on_event(call.clone()), Flow::Continue);
        assert_eq!(r.on_event(result.clone()), Flow::Stop);
        assert_eq!(r.0, vec![call, result]);
    }
}
