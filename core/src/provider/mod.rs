//! Owns the provider wire formats: turning SSE events of one response into panto
//! [`Event`]s (decoding) and the conversation into a request body (encoding), for
//! OpenAI Chat Completions (and compatible servers) and Anthropic Messages. Pure: no
//! I/O, no timers — `http` feeds it bytes, `agent` drives it.
//!
//! Both decoders share `Assembly`, which numbers blocks, emits the block lifecycle
//! events and assembles the final assistant [`Message`].

pub mod anthropic;
pub mod openai;

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::Value;

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
    let host = base_url
        .split("://")
        .nth(1)
        .unwrap_or(base_url)
        .split(['/', ':'])
        .next()
        .unwrap_or("");
    host == "api.openai.com" || host.ends_with(".openai.azure.com")
}

/// Builds the JSON request body for `kind`.
pub fn request_body(kind: ProviderKind, params: &RequestParams<'_>) -> Value {
    match kind {
        ProviderKind::OpenAi => openai::request_body(params),
        ProviderKind::Anthropic => anthropic::request_body(params),
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

/// The streaming decoder of one response, for either provider.
#[derive(Debug)]
pub enum Decoder {
    OpenAi(openai::Decoder),
    Anthropic(anthropic::Decoder),
}

impl Decoder {
    pub fn new(kind: ProviderKind, message: u32) -> Decoder {
        match kind {
            ProviderKind::OpenAi => Decoder::OpenAi(openai::Decoder::new(message)),
            ProviderKind::Anthropic => Decoder::Anthropic(anthropic::Decoder::new(message)),
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

#[derive(Debug, Default)]
struct PartialBlock {
    kind: Option<BlockKind>,
    text: String,
    signature: Option<String>,
    redacted: Option<String>,
    call_id: String,
    name: String,
    details_sent: bool,
    closed: bool,
    cut_off: bool,
    content: Option<Block>,
}

/// Shared state of one response being assembled: block numbering, block lifecycle
/// events, the final message.
#[derive(Debug, Default)]
pub(crate) struct Assembly {
    message: u32,
    started: bool,
    finished: bool,
    pub(crate) model: String,
    pub(crate) response_id: Option<String>,
    blocks: Vec<PartialBlock>,
    pub(crate) usage: Usage,
    stop: Option<StopReason>,
}

impl Assembly {
    fn new(message: u32) -> Assembly {
        Assembly {
            message,
            ..Assembly::default()
        }
    }

    fn emitted_content(&self) -> bool {
        self.started
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

    fn delta(&mut self, idx: usize, kind: DeltaKind, text: &str, emit: Emit<'_>) -> Result<()> {
        if text.is_empty() {
            return Ok(());
        }
        let Some(b) = self.blocks.get_mut(idx).filter(|b| !b.closed) else {
            return Ok(());
        };
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
        b.text.push_str(text);
        emit(Event::ContentDelta {
            message: self.message,
            block: idx as u32,
            kind,
            text: text.to_owned(),
        })
    }

    /// Records a tool call's id and/or name (never overwriting with later values) and
    /// announces them once both are known.
    fn tool_ids(&mut self, idx: usize, id: &str, name: &str, emit: Emit<'_>) -> Result<()> {
        let message = self.message;
        let Some(b) = self.blocks.get_mut(idx) else {
            return Ok(());
        };
        if b.call_id.is_empty() && !id.is_empty() {
            b.call_id = id.to_owned();
        }
        if b.name.is_empty() && !name.is_empty() {
            b.name = name.to_owned();
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

    fn block_mut(&mut self, idx: usize) -> Option<&mut PartialBlock> {
        self.blocks.get_mut(idx)
    }

    fn close(&mut self, idx: usize, cut_off: bool, emit: Emit<'_>) -> Result<()> {
        let message = self.message;
        let Some(b) = self.blocks.get_mut(idx).filter(|b| !b.closed) else {
            return Ok(());
        };
        b.closed = true;
        b.cut_off = cut_off;
        let content = match b.kind {
            Some(BlockKind::ToolCall) => {
                if b.call_id.is_empty() {
                    // Some servers never send an id; the history still needs one.
                    b.call_id = format!("call_{message}_{idx}");
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

    fn close_all(&mut self, cut_off: bool, emit: Emit<'_>) -> Result<()> {
        for idx in 0..self.blocks.len() {
            self.close(idx, cut_off, emit)?;
        }
        Ok(())
    }

    fn has_tool_calls(&self) -> bool {
        self.blocks
            .iter()
            .any(|b| b.kind == Some(BlockKind::ToolCall))
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
        let mut content = Vec::with_capacity(self.blocks.len());
        for b in self.blocks {
            let Some(block) = b.content else { continue };
            if let Block::ToolCall { call_id, .. } = &block {
                if b.cut_off {
                    cut_off_calls.push(call_id.clone());
                }
            }
            content.push(block);
        }
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

/// `""` (a call without parameters) means `{}`; text that is not JSON is kept raw.
fn parse_arguments(raw: String) -> (Option<Value>, Option<String>) {
    if raw.trim().is_empty() {
        return (Some(Value::Object(Default::default())), None);
    }
    match serde_json::from_str::<Value>(&raw) {
        Ok(v) => (Some(v), None),
        Err(_) => (None, Some(raw)),
    }
}

/// The error object providers put in a failed response or a failed stream:
/// `{"error":{"type":…,"code":…,"message":…}}` (Anthropic adds `"type":"error"` around it).
#[derive(Deserialize, Default)]
struct ErrorBody<'a> {
    #[serde(borrow, default)]
    error: Option<ErrorDetail<'a>>,
    #[serde(borrow, default)]
    message: Option<Cow<'a, str>>,
}

#[derive(Deserialize, Default)]
struct ErrorDetail<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Option<Cow<'a, str>>,
    #[serde(default)]
    code: Option<Value>,
    #[serde(borrow, default)]
    message: Option<Cow<'a, str>>,
}

/// What an error body says: (message, provider code).
pub(crate) fn describe_error_body(body: &str) -> (Option<String>, Option<String>) {
    let Ok(parsed) = serde_json::from_str::<ErrorBody<'_>>(body) else {
        return (None, None);
    };
    let Some(detail) = parsed.error else {
        return (parsed.message.map(Cow::into_owned), None);
    };
    let code = match detail.code {
        Some(Value::String(s)) if !s.is_empty() => Some(s),
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => None,
    }
    .or_else(|| detail.kind.as_deref().map(str::to_owned));
    (detail.message.map(Cow::into_owned), code)
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
