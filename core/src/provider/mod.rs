//! Owns the provider wire formats: turning SSE events of one response into panto
//! [`Event`]s (decoding) and the conversation into a request body (encoding), for
//! OpenAI Chat Completions (and compatible servers), Anthropic Messages, Google Gemini
//! (`streamGenerateContent`) and OpenAI Responses. Pure: no I/O, no timers — `http`
//! feeds it bytes, `agent` drives it.
//!
//! One module per job:
//! - [`openai`], [`anthropic`], [`gemini`], [`responses`] — each format's decoder and
//!   request body.
//! - `assembly` — shared by the decoders: numbers blocks, emits the block lifecycle
//!   events, enforces [`DecodeLimits`] and assembles the final assistant [`Message`].
//! - `tolerant` — the repairs of sloppy JSON that keep an answer.
//! - `wire_error` — an HTTP status and error body, or an error inside a stream, as a
//!   typed error.
//!
//! Whatever a server sends, decoding never panics and never holds more than the limits
//! allow; defects that do not change the meaning of an answer are tolerated rather than
//! thrown away with the answer: duplicate JSON keys (the last one wins), a UTF-16
//! surrogate pair split across two events (joined; a lone surrogate becomes U+FFFD),
//! usage figures that are not counts (ignored). The strict parse stays the fast path;
//! the repair runs only for an event it rejected.

pub mod anthropic;
mod assembly;
pub mod gemini;
mod json_scan;
pub mod openai;
pub mod responses;
mod tolerant;
mod wire_error;

use serde_json::Value;

use crate::error::Result;
use crate::event::Event;
use crate::media::{Input, Media, MediaSource};
use crate::message::{Block, Message};
pub use crate::output::{OutputRequest, WireMode};
use crate::request::{Dialect, Reasoning};
use crate::sse::SseEvent;

pub(crate) use assembly::Assembly;
pub use assembly::{DecodeLimits, DecodedMessage};
pub(crate) use tolerant::parse_value_lossy;
pub use wire_error::http_error;
pub(crate) use wire_error::{describe_error_body, truncate};

// Kept under `provider::` too, where they were first defined.
pub use crate::request::{uses_max_completion_tokens, ProviderKind, ToolSpec};

/// Everything one request needs besides transport settings.
#[derive(Debug, Clone, Copy)]
pub struct RequestParams<'a> {
    /// The model to ask.
    pub model: &'a str,
    /// The system prompt.
    pub system: Option<&'a str>,
    /// Output limit of one response (`None`: the provider's).
    pub max_tokens: Option<u32>,
    /// Sampling temperature (`None`: the provider's).
    pub temperature: Option<f64>,
    /// The tools the model may call.
    pub tools: &'a [ToolSpec],
    /// The conversation so far.
    pub messages: &'a [Message],
}

/// Builds the JSON request body for `kind`, with the [`RequestOptions`] defaults (no
/// reasoning control, no cache breakpoints, a generic OpenAI-compatible server).
pub fn request_body(kind: ProviderKind, params: &RequestParams<'_>) -> Value {
    request_body_with(kind, params, &RequestOptions::default())
}

/// What the agent adds to a request beyond the conversation: the conversation controls,
/// and the server's dialect it decided once. The default: none of them, a generic server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RequestOptions<'a> {
    /// Reasoning control for this request (`None`: send nothing, the provider decides).
    pub reasoning: Option<Reasoning>,
    /// Anthropic: cache breakpoints on the system prompt, the tool list and the latest
    /// message.
    pub prompt_caching: bool,
    /// OpenAI-compatible: which server's own fields to use.
    pub dialect: Dialect,
    /// OpenAI Responses: let the server keep the response (`store: true`) instead of
    /// sending the whole history each time (the `store` configuration key).
    pub store: bool,
    /// OpenAI Responses with `store`: the conversation's last stored response, so that
    /// only the messages after it are sent.
    pub previous_response: Option<PreviousResponse<'a>>,
    /// Structured output: the schema the answer must match and how it is asked for
    /// (`None`: a plain text answer).
    pub output: Option<OutputRequest<'a>>,
}

/// A response the server kept (`store: true`), and how many messages of the history it
/// covers: the request then carries `previous_response_id` and only the messages from
/// that index on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PreviousResponse<'a> {
    /// The stored response's id (`previous_response_id`).
    pub id: &'a str,
    /// How many messages of the history the stored response covers.
    pub messages: usize,
}

/// Builds the JSON request body for `kind` with the conversation controls of `options`.
pub fn request_body_with(
    kind: ProviderKind,
    params: &RequestParams<'_>,
    options: &RequestOptions<'_>,
) -> Value {
    match kind {
        ProviderKind::OpenAi => openai::request_body(params, options),
        ProviderKind::Anthropic => anthropic::request_body(params, options),
        ProviderKind::Gemini => gemini::request_body(params, options),
        ProviderKind::OpenAiResponses => responses::request_body(params, options),
    }
}

/// Refuses, before anything is sent, an input `kind`'s wire format cannot carry: OpenAI
/// chat takes a PDF only as bytes (`file.file_data`), never by URL.
pub fn check_input(kind: ProviderKind, input: &Input) -> Result<()> {
    if kind == ProviderKind::OpenAi {
        for (i, part) in input.parts().iter().enumerate() {
            if let Block::Document(Media {
                source: MediaSource::Url(_),
                ..
            }) = part
            {
                return Err(crate::error::Error::config(format!(
                    "input[{i}]: OpenAI chat completions take a PDF as bytes, not by URL; \
                     read the file and give its bytes"
                )));
            }
        }
    }
    Ok(())
}

/// Where the event callback sends decoded events; an error stops decoding.
pub type Emit<'a> = &'a mut (dyn FnMut(Event) -> Result<()> + Send);

/// Whether a response is over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// The response goes on: more events may follow.
    Continue,
    /// The provider said the response is complete.
    Finished,
}

/// The streaming decoder of one response, for either provider.
#[derive(Debug)]
pub enum Decoder {
    /// An OpenAI Chat Completions (or compatible) stream.
    OpenAi(openai::Decoder),
    /// An Anthropic Messages stream.
    Anthropic(anthropic::Decoder),
    /// A Gemini `streamGenerateContent` stream.
    Gemini(gemini::Decoder),
    /// An OpenAI Responses stream.
    OpenAiResponses(responses::Decoder),
}

impl Decoder {
    /// A decoder with the default [`DecodeLimits`].
    pub fn new(kind: ProviderKind, message: u32) -> Decoder {
        Decoder::with_limits(kind, message, DecodeLimits::default())
    }

    /// A decoder of the `message`-th response of a turn, with these limits.
    pub fn with_limits(kind: ProviderKind, message: u32, limits: DecodeLimits) -> Decoder {
        let asm = Assembly::new(message, limits);
        match kind {
            ProviderKind::OpenAi => Decoder::OpenAi(openai::Decoder::with_assembly(asm)),
            ProviderKind::Anthropic => Decoder::Anthropic(anthropic::Decoder::with_assembly(asm)),
            ProviderKind::Gemini => Decoder::Gemini(gemini::Decoder::with_assembly(asm, message)),
            ProviderKind::OpenAiResponses => {
                Decoder::OpenAiResponses(responses::Decoder::with_assembly(asm))
            }
        }
    }

    /// Decodes one SSE event.
    pub fn on_sse(&mut self, ev: &SseEvent<'_>, emit: Emit<'_>) -> Result<Progress> {
        match self {
            Decoder::OpenAi(d) => d.on_sse(ev, emit),
            Decoder::Anthropic(d) => d.on_sse(ev, emit),
            Decoder::Gemini(d) => d.on_sse(ev, emit),
            Decoder::OpenAiResponses(d) => d.on_sse(ev, emit),
        }
    }

    /// The body ended. Completes the message if the provider had said it was done,
    /// else fails with `incomplete`.
    pub fn on_eof(&mut self, emit: Emit<'_>) -> Result<()> {
        match self {
            Decoder::OpenAi(d) => d.on_eof(emit),
            Decoder::Anthropic(d) => d.on_eof(emit),
            Decoder::Gemini(d) => d.on_eof(emit),
            Decoder::OpenAiResponses(d) => d.on_eof(emit),
        }
    }

    /// True once any event of this response was emitted: from then on a failure must not
    /// be retried silently (the caller has seen part of the answer).
    pub fn emitted_content(&self) -> bool {
        self.assembly().emitted_content()
    }

    /// True once the provider said the response is complete.
    pub fn is_finished(&self) -> bool {
        self.assembly().finished
    }

    fn assembly(&self) -> &Assembly {
        match self {
            Decoder::OpenAi(d) => &d.asm,
            Decoder::Anthropic(d) => &d.asm,
            Decoder::Gemini(d) => &d.asm,
            Decoder::OpenAiResponses(d) => &d.asm,
        }
    }

    /// The decoded message; `None` until the response finished.
    pub fn into_message(self) -> Option<DecodedMessage> {
        match self {
            Decoder::OpenAi(d) => d.asm.into_decoded(),
            Decoder::Anthropic(d) => d.asm.into_decoded(),
            Decoder::Gemini(d) => d.asm.into_decoded(),
            Decoder::OpenAiResponses(d) => d.asm.into_decoded(),
        }
    }
}

/// Decodes a response that arrived as one JSON body although a stream was asked for
/// (LiteLLM's `/v1/messages`, servers that ignore `stream: true`): a complete chat
/// completion (`"object": "chat.completion"`) for [`ProviderKind::OpenAi`], a complete
/// message (`"type": "message"`) for [`ProviderKind::Anthropic`], one
/// `GenerateContentResponse` or an array of them for [`ProviderKind::Gemini`].
/// message (`"type": "message"`) for [`ProviderKind::Anthropic`], a response object
/// (`"object": "response"`) for [`ProviderKind::OpenAiResponses`].
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
        ProviderKind::Gemini => gemini::complete_body_events(value),
        ProviderKind::OpenAiResponses => responses::complete_body_events(value),
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
