//! Owns the providers: each one's wire format — turning SSE events of one response into
//! panto [`Event`]s (decoding) and the conversation into a request body (encoding) —
//! and its API conventions (base URL, key variable, authentication, endpoint, error
//! answers, output schemas), for OpenAI Chat Completions (and compatible servers),
//! Anthropic Messages, Google Gemini (`streamGenerateContent`) and OpenAI Responses.
//! Pure: no I/O, no timers — `http` feeds it bytes, `agent` drives it.
//!
//! One module per provider, one per job they share:
//! - [`openai`], [`anthropic`], [`gemini`], [`responses`] — each provider's `Format`,
//!   its implementation of the seam (`wire::Wire`), with its decoder and request body.
//! - `wire` — the seam: what the rest of the core asks of a provider.
//! - `assembly` — shared by the decoders: numbers blocks, emits the block lifecycle
//!   events, enforces [`DecodeLimits`] and assembles the final assistant [`Message`].
//! - `schema` — an output schema in the forms the providers take (OpenAI's strict
//!   mode, Anthropic's closed objects), and which one each gets.
//! - `tolerant` — the repairs of sloppy JSON that keep an answer.
//! - `wire_error` — an HTTP status and error body, or an error inside a stream, as a
//!   typed error.
//!
//! **Adding a provider** is one module here (or a folder: `provider/<name>/mod.rs`)
//! whose `Format` implements `wire::Wire`, and one line in the registration below
//! (`registry!`): its [`ProviderKind`] variant, its configuration name and its `Format`.
//! Nothing outside this folder changes: the configuration's `provider` key takes its
//! values from [`NAMES`], and `config`, `http`, `output` and `agent` only ever ask the
//! seam (`core/tests/provider_seam.rs` fails when code elsewhere names a kind).
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
pub(crate) mod schema;
mod tolerant;
mod wire;
mod wire_error;

use serde_json::Value;

use crate::error::Result;
use crate::event::Event;
use crate::media::Input;
use crate::message::Message;
use crate::request::{Dialect, Reasoning};
pub use crate::request::{OutputRequest, WireMode};
use crate::sse::SseEvent;

pub(crate) use assembly::Assembly;
pub use assembly::{DecodeLimits, DecodedMessage};
pub(crate) use tolerant::parse_value_lossy;
pub(crate) use wire::{AuthHeader, Decode, Wire};
pub(crate) use wire_error::describe_error_body;
pub use wire_error::http_error;

// Kept under `provider::` too, where they were first defined.
pub use crate::request::{uses_max_completion_tokens, ToolSpec};

/// Declares the registration: [`ProviderKind`] with one variant per provider, its
/// configuration names ([`NAMES`], [`ProviderKind::parse`], [`ProviderKind::as_str`])
/// and the seam of each ([`ProviderKind::wire`]), all from one line per provider.
macro_rules! registry {
    ($( $(#[$doc:meta])* $kind:ident = $name:literal => $format:expr, )*) => {
        /// Which provider an agent talks to: which wire format it speaks, and the
        /// conventions of its API (see [`provider`](self)).
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum ProviderKind {
            $( $(#[$doc])* $kind, )*
        }

        /// The configuration names of the providers (the values of the `provider` key),
        /// in the order of the registration.
        pub const NAMES: &[&str] = &[$($name),*];

        impl ProviderKind {
            /// Every provider kind, in the order of the registration.
            pub const ALL: &'static [ProviderKind] = &[$(ProviderKind::$kind),*];

            /// The provider kind of its configuration name, or `None`.
            pub fn parse(name: &str) -> Option<ProviderKind> {
                match name {
                    $($name => Some(ProviderKind::$kind),)*
                    _ => None,
                }
            }

            /// The configuration name of the provider kind.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(ProviderKind::$kind => $name,)*
                }
            }

            /// The provider's seam: everything the core asks of it.
            pub(crate) fn wire(self) -> &'static dyn Wire {
                match self {
                    $(ProviderKind::$kind => &$format,)*
                }
            }
        }
    };
}

// The registration: one line per provider.
registry! {
    /// OpenAI Chat Completions and every server compatible with it.
    OpenAi = "openai" => openai::Format,
    /// Anthropic Messages.
    Anthropic = "anthropic" => anthropic::Format,
    /// Google Gemini's own API (`streamGenerateContent`).
    Gemini = "gemini" => gemini::Format,
    /// OpenAI's Responses API (`POST /v1/responses`), also served by vLLM, Ollama and
    /// LiteLLM.
    OpenAiResponses = "openai-responses" => responses::Format,
}

/// The configuration's default provider, `openai`.
impl Default for ProviderKind {
    fn default() -> Self {
        ProviderKind::OpenAi
    }
}

impl ProviderKind {
    /// The provider's own API, the default `base_url`.
    pub fn default_base_url(self) -> &'static str {
        self.wire().default_base_url()
    }

    /// The environment variable the API key is read from by default.
    pub fn api_key_env(self) -> &'static str {
        self.wire().api_key_env()
    }

    /// The provider's name in OpenTelemetry's GenAI conventions (`gen_ai.provider.name`:
    /// `openai`, `anthropic`, `gcp.gemini`, `azure.ai.openai`) for a server at
    /// `base_url`.
    pub fn telemetry_name(self, base_url: &str) -> &'static str {
        self.wire().telemetry_name(base_url)
    }

    /// The endpoint path appended to `base_url`. Gemini's names the model (see
    /// `Config::endpoint_for`); this is its pattern, for messages.
    pub fn endpoint_path(self) -> &'static str {
        self.wire().endpoint_path()
    }
}

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
    kind.wire().request_body(params, options)
}

/// Refuses, before anything is sent, an input `kind`'s wire format cannot carry: OpenAI
/// chat takes a PDF only as bytes (`file.file_data`), never by URL.
pub fn check_input(kind: ProviderKind, input: &Input) -> Result<()> {
    kind.wire().check_input(input)
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

/// The streaming decoder of one response, for any provider.
#[derive(Debug)]
pub struct Decoder(Box<dyn Decode>);

impl Decoder {
    /// A decoder with the default [`DecodeLimits`].
    pub fn new(kind: ProviderKind, message: u32) -> Decoder {
        Decoder::with_limits(kind, message, DecodeLimits::default())
    }

    /// A decoder of the `message`-th response of a turn, with these limits.
    pub fn with_limits(kind: ProviderKind, message: u32, limits: DecodeLimits) -> Decoder {
        Decoder(kind.wire().decoder(Assembly::new(message, limits), message))
    }

    /// Decodes one SSE event.
    pub fn on_sse(&mut self, ev: &SseEvent<'_>, emit: Emit<'_>) -> Result<Progress> {
        self.0.on_sse(ev, emit)
    }

    /// The body ended. Completes the message if the provider had said it was done,
    /// else fails with `incomplete`.
    pub fn on_eof(&mut self, emit: Emit<'_>) -> Result<()> {
        self.0.on_eof(emit)
    }

    /// True once any event of this response was emitted: from then on a failure must not
    /// be retried silently (the caller has seen part of the answer).
    pub fn emitted_content(&self) -> bool {
        self.0.assembly().emitted_content()
    }

    /// True once the provider said the response is complete.
    pub fn is_finished(&self) -> bool {
        self.0.assembly().finished
    }

    /// The decoded message; `None` until the response finished.
    pub fn into_message(self) -> Option<DecodedMessage> {
        self.0.into_assembly().into_decoded()
    }
}

/// Decodes a response that arrived as one JSON body although a stream was asked for
/// (LiteLLM's `/v1/messages`, servers that ignore `stream: true`): a complete chat
/// completion (`"object": "chat.completion"`) for [`ProviderKind::OpenAi`], a complete
/// message (`"type": "message"`) for [`ProviderKind::Anthropic`], one
/// `GenerateContentResponse` or an array of them for [`ProviderKind::Gemini`], a
/// response object (`"object": "response"`) for [`ProviderKind::OpenAiResponses`].
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
    let events = kind.wire().complete_body_events(value);
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
