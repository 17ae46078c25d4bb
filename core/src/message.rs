//! Owns the conversation model: messages, content blocks, usage, stop reasons, and the
//! versioned JSON form of a saved history. It knows nothing about any provider's wire
//! format (that is `provider`), only what panto keeps.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::error::{Error, Result};
pub use crate::media::{Media, MediaSource};

/// Version of the saved-history JSON schema; bumped on any incompatible change.
pub const HISTORY_VERSION: u32 = 1;

/// Who wrote a message. Tool results live in their own `tool` message, which each
/// provider renders its own way (OpenAI: one `tool` message per result; Anthropic: a user
/// message of `tool_result` blocks).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The person (or program) talking to the model.
    User,
    /// The model.
    Assistant,
    /// Tool results, answering the assistant message before it.
    Tool,
}

/// One content block, in its canonical JSON form (`{"type":"text","text":…}` …).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Block {
    /// Text.
    Text {
        /// The text.
        text: String,
    },
    /// The model's reasoning (thinking, or its summary).
    Reasoning {
        /// The reasoning text.
        text: String,
        /// The provider's signature of the reasoning, sent back with it (Anthropic).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
    },
    /// Reasoning the provider sent encrypted (Anthropic's redacted thinking).
    RedactedReasoning {
        /// The encrypted data, sent back verbatim.
        data: String,
    },
    /// A tool call. `arguments` holds the parsed JSON; when the model sent arguments that
    /// do not parse, `arguments` is absent and the raw text is kept in `arguments_raw`
    /// (such a call is answered with an error result, never executed).
    ToolCall {
        /// The call's id, which its result names.
        call_id: String,
        /// The tool's name.
        name: String,
        /// The arguments, parsed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        arguments: Option<Value>,
        /// The arguments as the model sent them, when they did not parse.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        arguments_raw: Option<String>,
    },
    /// A tool's result. `output` is the text the model reads; a tool that returned
    /// parts (text and images) keeps them, in order, in `parts` (absent when it returned
    /// plain text), and `output` is then the text of its text parts.
    ToolResult {
        /// The id of the call this answers.
        call_id: String,
        /// The tool's name.
        name: String,
        /// The text the model reads.
        output: String,
        /// Whether this is an error result.
        is_error: bool,
        /// The parts (text and images) the tool returned, in order; empty for plain text.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        parts: Vec<Block>,
    },
    /// An image in the user's input or in a tool result's parts (see [`Media`]).
    Image(Media),
    /// A document (PDF) in the user's input (see [`Media`]).
    Document(Media),
    /// A block of a kind panto does not model, kept exactly as the provider sent it so
    /// it can go back verbatim: Anthropic's server-tool blocks (`server_tool_use`,
    /// `web_search_tool_result`…), MCP blocks (`mcp_tool_use`, `mcp_tool_result`) and
    /// `compaction` blocks; Gemini's parts of kinds panto does not model, and its thought
    /// signatures (`{"thoughtSignature": …}`, right after the block of their part);
    /// OpenAI Responses reasoning items (with their `encrypted_content`, right after the
    /// reasoning block of their summary) and built-in tool items (`web_search_call`…).
    /// `provider` names the wire format it came from (`anthropic`, `gemini`,
    /// `openai-responses`); it is sent back only to that provider, and never announced by
    /// block events.
    Opaque {
        /// The wire format the block came from (`anthropic`, `gemini`, `openai-responses`).
        provider: String,
        /// The block, exactly as the provider sent it.
        block: Value,
    },
}

/// The `type` values of [`Block`]'s canonical JSON, in the vocabulary. A test checks
/// the list against the enum's serde form.
pub const CONTENT_TYPE: crate::vocab::EnumSpec = crate::vocab::EnumSpec {
    name: "content_type",
    variant: "ContentType",
    doc: "The type of a content block's canonical JSON (block_complete content, saved history).",
    open: false,
    values: &[
        content_type("text", "Text", "Text of the answer: {text}."),
        content_type("reasoning", "Reasoning", "Reasoning: {text, signature?}."),
        content_type(
            "redacted_reasoning",
            "RedactedReasoning",
            "Reasoning the provider sent encrypted: {data}.",
        ),
        content_type(
            "tool_call",
            "ToolCall",
            "A tool call: {call_id, name, arguments?, arguments_raw?}.",
        ),
        content_type(
            "tool_result",
            "ToolResult",
            "A tool's result, in history: {call_id, name, output, is_error, parts?}.",
        ),
        content_type(
            "opaque",
            "Opaque",
            "A provider block kept verbatim, in history only: {provider, block}.",
        ),
        content_type(
            "image",
            "Image",
            "An image: {media_type, data} (base64) or {url, media_type?}; name? either way.",
        ),
        content_type(
            "document",
            "Document",
            "A document (PDF): {media_type, data} (base64) or {url, media_type?}; name? either way.",
        ),
    ],
};

const fn content_type(
    name: &'static str,
    variant: &'static str,
    doc: &'static str,
) -> crate::vocab::ValueSpec {
    crate::vocab::ValueSpec { name, variant, doc }
}

impl Block {
    /// A text block.
    pub fn text(text: impl Into<String>) -> Block {
        Block::Text { text: text.into() }
    }
}

/// One complete message of the conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// Who wrote it.
    pub role: Role,
    /// Its blocks, in order.
    pub content: Vec<Block>,
}

impl Message {
    /// A user message of one text block.
    pub fn user(text: impl Into<String>) -> Message {
        Message {
            role: Role::User,
            content: vec![Block::text(text)],
        }
    }

    /// Concatenated text blocks (what `message_complete.text` reports).
    pub fn text(&self) -> String {
        let mut out = String::new();
        for b in &self.content {
            if let Block::Text { text } = b {
                out.push_str(text);
            }
        }
        out
    }

    /// The tool calls of an assistant message, in order.
    pub fn tool_calls(&self) -> impl Iterator<Item = &Block> {
        self.content
            .iter()
            .filter(|b| matches!(b, Block::ToolCall { .. }))
    }
}

/// Token usage. For a message: what the provider reported for that response; for a
/// turn (`message_complete`): the sum over its messages.
///
/// `reported` tells a real zero from an unknown count: it is true when the provider sent
/// a usage report with at least one count for the response. Without one (llama.cpp and
/// others send none in streams, even when asked with `stream_options.include_usage`)
/// every count is 0 and `reported` is false. A turn's total is reported only if every
/// response of the turn was; otherwise its counts cover the responses that were.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Input tokens, as the provider counts them (OpenAI's count includes cached ones,
    /// Anthropic's does not).
    pub input_tokens: u64,
    /// Output tokens, as the provider counts them.
    pub output_tokens: u64,
    /// Input tokens read from the provider's prompt cache.
    pub cache_read_tokens: u64,
    /// Input tokens written to the provider's prompt cache.
    pub cache_write_tokens: u64,
    /// Output tokens spent on reasoning, where the provider reports them.
    pub reasoning_tokens: u64,
    /// Absent in JSON written before it existed: such a count was never known to be real.
    #[serde(default)]
    pub reported: bool,
}

impl crate::vocab::Describe for Usage {
    const TYPE: &'static str = "usage";
}

/// The records event fields use, in the vocabulary ([`crate::vocab`]). A test checks
/// them against the serde form of the structs.
pub const RECORDS: &[crate::vocab::RecordSpec] = &[crate::vocab::RecordSpec {
    name: "usage",
    variant: "Usage",
    doc: "Token counts: of one response in message_end, of the whole turn in message_complete.",
    fields: &[
        usage_field(
            "input_tokens",
            "Input (prompt) tokens, cache reads included.",
        ),
        usage_field("output_tokens", "Output tokens, reasoning included."),
        usage_field(
            "cache_read_tokens",
            "Input tokens read from the provider's prompt cache.",
        ),
        usage_field(
            "cache_write_tokens",
            "Input tokens written to the provider's prompt cache.",
        ),
        usage_field(
            "reasoning_tokens",
            "Output tokens spent on reasoning, where reported.",
        ),
        crate::vocab::FieldSpec {
            name: "reported",
            ty: "bool",
            optional: false,
            doc: "Whether the provider reported usage: false when it sent none (the counts \
                  are then 0 and unknown, not a real zero). For a turn: true only if every \
                  response of the turn reported it.",
        },
    ],
}];

const fn usage_field(name: &'static str, doc: &'static str) -> crate::vocab::FieldSpec {
    crate::vocab::FieldSpec {
        name,
        ty: "u64",
        optional: false,
        doc,
    }
}

impl Usage {
    /// The start of a total that [`Usage::add`] sums into: no counts, and reported (the
    /// identity of the sum, since a total is reported only if every part was).
    pub const TOTAL: Usage = Usage {
        input_tokens: 0,
        output_tokens: 0,
        cache_read_tokens: 0,
        cache_write_tokens: 0,
        reasoning_tokens: 0,
        reported: true,
    };

    /// Adds `other` field by field, saturating at `u64::MAX`: the counts come from the
    /// server, and an absurd one must not wrap a turn's total or panic. The sum is
    /// reported only if both parts were (start a total from [`Usage::TOTAL`]).
    pub fn add(&mut self, other: &Usage) {
        self.reported &= other.reported;
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.cache_read_tokens = self
            .cache_read_tokens
            .saturating_add(other.cache_read_tokens);
        self.cache_write_tokens = self
            .cache_write_tokens
            .saturating_add(other.cache_write_tokens);
        self.reasoning_tokens = self.reasoning_tokens.saturating_add(other.reasoning_tokens);
    }
}

/// Declares the stop reasons: the enum, its canonical strings both ways, and its entry in
/// the vocabulary. Values outside the list are kept as `Other` (`other:<raw>` in JSON).
macro_rules! stop_reasons {
    ($( #[doc = $doc:literal] $variant:ident = $value:literal, )+) => {
        /// Why a message (or a turn) ended, normalized across providers.
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub enum StopReason {
            $( #[doc = $doc] $variant, )+
            /// A value panto does not know, kept verbatim (`other:<raw>` in JSON).
            Other(String),
        }

        impl StopReason {
            /// The stop reason as written in JSON (`end_turn`, `other:<raw>`).
            pub fn as_string(&self) -> String {
                match self {
                    $( StopReason::$variant => $value.into(), )+
                    StopReason::Other(raw) => format!("other:{raw}"),
                }
            }

            /// Parses the canonical string form (inverse of [`StopReason::as_string`]).
            pub fn parse(s: &str) -> StopReason {
                match s {
                    $( $value => StopReason::$variant, )+
                    other => StopReason::Other(other.strip_prefix("other:").unwrap_or(other).into()),
                }
            }
        }

        /// The description of [`StopReason`] in the vocabulary.
        pub const STOP_REASON: crate::vocab::EnumSpec = crate::vocab::EnumSpec {
            name: "stop_reason",
            variant: "StopReason",
            doc: "Why a message or a turn ended, normalized across providers; other:<raw> for a value panto does not know.",
            open: true,
            values: &[ $( crate::vocab::ValueSpec { name: $value, variant: stringify!($variant), doc: $doc }, )+ ],
        };
    };
}

stop_reasons! {
    /// The model finished its answer.
    EndTurn = "end_turn",
    /// The model asked for tools.
    ToolUse = "tool_use",
    /// The output limit cut the answer off.
    MaxTokens = "max_tokens",
    /// A stop sequence ended the answer.
    StopSequence = "stop_sequence",
    /// The model refused.
    Refusal = "refusal",
    /// The provider's content filter ended the answer.
    ContentFilter = "content_filter",
    /// The turn reached max_steps.
    MaxSteps = "max_steps",
    /// The turn paused for deferred calls (approval, external tools, defer_tools); resume it from its checkpoint.
    Deferred = "deferred",
}

impl crate::vocab::Describe for StopReason {
    const TYPE: &'static str = "stop_reason";
}

impl StopReason {
    /// Maps an OpenAI-compatible `finish_reason`.
    pub fn from_openai(raw: &str) -> StopReason {
        match raw {
            "stop" | "eos" => StopReason::EndTurn,
            "tool_calls" | "function_call" => StopReason::ToolUse,
            "length" => StopReason::MaxTokens,
            "content_filter" => StopReason::ContentFilter,
            other => StopReason::Other(other.into()),
        }
    }

    /// Maps an Anthropic `stop_reason`.
    pub fn from_anthropic(raw: &str) -> StopReason {
        match raw {
            "end_turn" => StopReason::EndTurn,
            "tool_use" => StopReason::ToolUse,
            "max_tokens" | "model_context_window_exceeded" => StopReason::MaxTokens,
            "stop_sequence" => StopReason::StopSequence,
            "refusal" => StopReason::Refusal,
            other => StopReason::Other(other.into()),
        }
    }
}

impl Serialize for StopReason {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(&self.as_string())
    }
}

impl<'de> Deserialize<'de> for StopReason {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Ok(StopReason::parse(&s))
    }
}

#[derive(Serialize, Deserialize)]
struct SavedHistory {
    version: u32,
    messages: Vec<Message>,
}

/// Serializes a history as versioned JSON: `{"version":1,"messages":[…]}`.
pub fn history_to_json(messages: &[Message]) -> String {
    #[derive(Serialize)]
    struct Borrowed<'a> {
        version: u32,
        messages: &'a [Message],
    }
    serde_json::to_string(&Borrowed {
        version: HISTORY_VERSION,
        messages,
    })
    .unwrap_or_default()
}

/// The length of [`history_to_json`]'s result, counted without building it.
pub fn history_json_len(messages: &[Message]) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    #[derive(Serialize)]
    struct Borrowed<'a> {
        version: u32,
        messages: &'a [Message],
    }
    let mut count = Count(0);
    // Serializing plain data into a counter cannot fail.
    let _ = serde_json::to_writer(
        &mut count,
        &Borrowed {
            version: HISTORY_VERSION,
            messages,
        },
    );
    count.0
}

/// Parses a saved history, rejecting other versions and histories a provider would
/// refuse (see [`validate_history`]).
pub fn history_from_json(json: &str) -> Result<Vec<Message>> {
    let saved: SavedHistory = serde_json::from_str(json)
        .map_err(|e| Error::config(format!("history: {}", explain_history_error(json, &e))))?;
    if saved.version != HISTORY_VERSION {
        return Err(Error::config(format!(
            "history: version {} is not supported (expected {HISTORY_VERSION})",
            saved.version
        )));
    }
    validate_history(&saved.messages)?;
    Ok(saved.messages)
}

/// Why `json` is not a saved history, for a person: where in it (`messages[2].content[0]`)
/// and what is wrong there, rather than the parser's view of the first token it could
/// not place. Walks the document only once the fast parse has failed.
fn explain_history_error(json: &str, parse_error: &serde_json::Error) -> String {
    use serde_json::error::Category;
    let doc: Value = match serde_json::from_str(json) {
        Ok(doc) => doc,
        Err(e) if e.classify() == Category::Eof => {
            return format!(
                "the JSON text ends early (line {}, column {}): not the whole of a saved history",
                e.line(),
                e.column()
            )
        }
        Err(e) => {
            return format!(
                "not JSON (line {}, column {}); a saved history is the text save_history returned",
                e.line(),
                e.column()
            )
        }
    };
    let kind = |v: &Value| match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    };
    let shape = r#"a saved history is {"version": 1, "messages": [...]}"#;
    let Some(top) = doc.as_object() else {
        return format!("{} is not a saved history ({shape})", kind(&doc));
    };
    match top.get("version") {
        None => return format!(r#""version" is missing ({shape})"#),
        Some(v) if v.as_u64() != Some(u64::from(HISTORY_VERSION)) => {
            return match v.as_u64() {
                Some(n) => format!("version {n} is not supported (expected {HISTORY_VERSION})"),
                None => format!(r#""version" is {v}, not {HISTORY_VERSION} ({shape})"#),
            }
        }
        Some(_) => {}
    }
    let messages = match top.get("messages") {
        None => return format!(r#""messages" is missing ({shape})"#),
        Some(Value::Array(messages)) => messages,
        Some(v) => return format!(r#""messages" is {}, not an array of messages"#, kind(v)),
    };
    let one_of = |values: &[&str]| values.join(", ");
    for (i, m) in messages.iter().enumerate() {
        let at = format!("messages[{i}]");
        let Some(m) = m.as_object() else {
            return format!(
                r#"{at} is {}, not a message {{"role": …, "content": [...]}}"#,
                kind(m)
            );
        };
        match m.get("role") {
            Some(Value::String(r)) if ["user", "assistant", "tool"].contains(&r.as_str()) => {}
            Some(r) => return format!("{at}.role is {r}: the roles are user, assistant and tool"),
            None => return format!(r#"{at} has no "role" (user, assistant or tool)"#),
        }
        let blocks = match m.get("content") {
            Some(Value::Array(blocks)) => blocks,
            Some(v) => return format!("{at}.content is {}, not an array of blocks", kind(v)),
            None => return format!(r#"{at} has no "content" (an array of blocks)"#),
        };
        let types: Vec<&str> = CONTENT_TYPE.values.iter().map(|v| v.name).collect();
        for (j, b) in blocks.iter().enumerate() {
            let at = format!("{at}.content[{j}]");
            let ty = match b.get("type") {
                Some(Value::String(t)) if types.contains(&t.as_str()) => t,
                Some(t) => {
                    return format!("{at}.type is {t}: the block types are {}", one_of(&types))
                }
                None => return format!(r#"{at} is {}, not a block with a "type""#, kind(b)),
            };
            if let Err(e) = serde_json::from_value::<Block>(b.clone()) {
                // serde's own words about one block ("missing field `text`"), quoted
                // as the rest of the message quotes names.
                return format!(
                    r#"{at} (a "{ty}" block): {}"#,
                    e.to_string().replace('`', "\"")
                );
            }
        }
    }
    // Nothing found by the walk (it checks what the types need): the parser's words.
    format!("not a saved panto history: {parse_error}")
}

/// The conversation as another model reads it (a `fallback` entry): the blocks only the
/// model that wrote them can read are dropped — encrypted reasoning
/// ([`Block::RedactedReasoning`]), reasoning signatures (the reasoning keeps its text,
/// which a provider sends back only where it takes unsigned reasoning), and opaque
/// provider blocks ([`Block::Opaque`]: Gemini's thought signatures, OpenAI Responses'
/// encrypted reasoning items, Anthropic's server-tool blocks). A message left with no
/// block keeps an empty text block, so the conversation keeps its shape.
pub fn portable(messages: &[Message]) -> Vec<Message> {
    messages
        .iter()
        .map(|m| {
            let mut content: Vec<Block> = m
                .content
                .iter()
                .filter_map(|b| match b {
                    Block::RedactedReasoning { .. } | Block::Opaque { .. } => None,
                    Block::Reasoning { text, .. } => Some(Block::Reasoning {
                        text: text.clone(),
                        signature: None,
                    }),
                    other => Some(other.clone()),
                })
                .collect();
            if content.is_empty() {
                content.push(Block::text(""));
            }
            Message {
                role: m.role,
                content,
            }
        })
        .collect()
}

/// Checks the rules the providers enforce on a conversation: it starts with a user
/// message; every assistant tool call is answered by exactly one result in the tool
/// message that immediately follows it, with matching ids; no result without a call;
/// tool messages hold only results and assistant messages hold no results.
pub fn validate_history(messages: &[Message]) -> Result<()> {
    let bad = |i: usize, why: String| Err(Error::config(format!("history: message {i}: {why}")));
    if let Some(first) = messages.first() {
        if first.role != Role::User {
            return bad(0, "a conversation must start with a user message".into());
        }
    }
    let mut i = 0;
    while i < messages.len() {
        let m = &messages[i];
        match m.role {
            Role::User => {
                if m.content.iter().any(|b| {
                    matches!(
                        b,
                        Block::ToolResult { .. } | Block::ToolCall { .. } | Block::Opaque { .. }
                    )
                }) {
                    return bad(
                        i,
                        "user messages hold no tool calls, results or provider blocks".into(),
                    );
                }
            }
            Role::Tool => return bad(i, "tool results without a preceding tool call".into()),
            Role::Assistant => {
                if m.content
                    .iter()
                    .any(|b| matches!(b, Block::ToolResult { .. }))
                {
                    return bad(i, "assistant messages hold no tool results".into());
                }
                let calls: Vec<&str> = m
                    .content
                    .iter()
                    .filter_map(|b| match b {
                        Block::ToolCall { call_id, .. } => Some(call_id.as_str()),
                        _ => None,
                    })
                    .collect();
                if !calls.is_empty() {
                    let Some(next) = messages.get(i + 1).filter(|n| n.role == Role::Tool) else {
                        return bad(i, "tool calls are not followed by their results".into());
                    };
                    let mut results = Vec::with_capacity(next.content.len());
                    for b in &next.content {
                        match b {
                            Block::ToolResult { parts, .. }
                                if parts.iter().any(|p| {
                                    !matches!(p, Block::Text { .. } | Block::Image(_))
                                }) =>
                            {
                                return bad(
                                    i + 1,
                                    "a tool result's parts are text and images only".into(),
                                )
                            }
                            Block::ToolResult { call_id, .. } => results.push(call_id.as_str()),
                            _ => return bad(i + 1, "tool messages hold only results".into()),
                        }
                    }
                    if results != calls {
                        return bad(
                            i + 1,
                            format!("tool results {results:?} do not answer the calls {calls:?}"),
                        );
                    }
                    i += 1;
                }
            }
        }
        i += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(id: &str) -> Block {
        Block::ToolCall {
            call_id: id.into(),
            name: "t".into(),
            arguments: Some(serde_json::json!({})),
            arguments_raw: None,
        }
    }
    fn result(id: &str) -> Block {
        Block::ToolResult {
            call_id: id.into(),
            name: "t".into(),
            output: "ok".into(),
            is_error: false,
            parts: Vec::new(),
        }
    }

    #[test]
    fn stop_reason_round_trips() {
        for s in [
            "end_turn",
            "tool_use",
            "max_tokens",
            "refusal",
            "other:weird",
        ] {
            assert_eq!(StopReason::parse(s).as_string(), s);
        }
        assert_eq!(StopReason::from_openai("length"), StopReason::MaxTokens);
        assert_eq!(
            StopReason::from_openai("insufficient_system_resource").as_string(),
            "other:insufficient_system_resource"
        );
    }

    #[test]
    fn history_round_trips_and_validates() {
        let h = vec![
            Message::user("hi"),
            Message {
                role: Role::Assistant,
                content: vec![
                    Block::Reasoning {
                        text: "hm".into(),
                        signature: Some("sig".into()),
                    },
                    call("a"),
                    call("b"),
                ],
            },
            Message {
                role: Role::Tool,
                content: vec![result("a"), result("b")],
            },
        ];
        let json = history_to_json(&h);
        assert!(json.starts_with("{\"version\":1,"));
        assert_eq!(history_from_json(&json).unwrap(), h);
    }

    #[test]
    fn validator_rejects_unbalanced_histories() {
        let asst = Message {
            role: Role::Assistant,
            content: vec![call("a"), call("b")],
        };
        let missing = vec![Message::user("x"), asst.clone()];
        assert!(validate_history(&missing).is_err());
        let wrong_order = vec![
            Message::user("x"),
            asst.clone(),
            Message {
                role: Role::Tool,
                content: vec![result("b"), result("a")],
            },
        ];
        assert!(validate_history(&wrong_order).is_err());
        let orphan = vec![
            Message::user("x"),
            Message {
                role: Role::Tool,
                content: vec![result("a")],
            },
        ];
        assert!(validate_history(&orphan).is_err());
        let bad_version = r#"{"version":9,"messages":[]}"#;
        let bad = |json: &str| history_from_json(json).unwrap_err().message;
        assert_eq!(
            bad(
                r#"{"version":1,"messages":[{"role":"user","content":[{"type":"txt","text":"hi"}]}]}"#
            ),
            "history: messages[0].content[0].type is \"txt\": the block types are text, \
             reasoning, redacted_reasoning, tool_call, tool_result, opaque, image, document"
        );
        assert_eq!(
            bad(
                r#"{"version":1,"messages":[{"role":"user","content":[{"type":"text","txt":"hi"}]}]}"#
            ),
            "history: messages[0].content[0] (a \"text\" block): missing field \"text\""
        );
        assert_eq!(
            bad(r#"{"version":1,"messages":[{"role":"system","content":[]}]}"#),
            "history: messages[0].role is \"system\": the roles are user, assistant and tool"
        );
        assert_eq!(
            bad(r#"[{"role":"user","content":[]}]"#),
            r#"history: an array is not a saved history (a saved history is {"version": 1, "messages": [...]})"#
        );
        assert!(bad("{not json").starts_with("history: not JSON (line 1, column 2)"));
        assert!(
            bad(r#"{"version":1,"messages":["#).starts_with("history: the JSON text ends early")
        );
        assert_eq!(
            bad(r#"{"version":2,"messages":"x"}"#),
            "history: version 2 is not supported (expected 1)"
        );
        assert_eq!(
            history_from_json(bad_version).unwrap_err().kind,
            crate::ErrorKind::Config
        );
    }
}
