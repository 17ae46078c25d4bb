//! Owns the provider wire formats: turning SSE events of one response into panto
//! [`Event`]s (decoding) and the conversation into a request body (encoding), for
//! OpenAI Chat Completions (and compatible servers) and Anthropic Messages. Pure: no
//! I/O, no timers — `http` feeds it bytes, `agent` drives it.
//!
//! One module per job:
//! - [`openai`], [`anthropic`] — each format's decoder and request body.
//! - `assembly` — shared by both decoders: numbers blocks, emits the block lifecycle
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
mod json_scan;
pub mod openai;
mod tolerant;
mod wire_error;

use serde::Deserialize;
use serde_json::Value;

use crate::config::{Compat, Reasoning};
use crate::error::Result;
use crate::event::Event;
use crate::message::Message;
use crate::sse::SseEvent;

pub(crate) use assembly::Assembly;
pub use assembly::{DecodeLimits, DecodedMessage};
pub(crate) use tolerant::parse_value_lossy;
pub use wire_error::http_error;
pub(crate) use wire_error::{describe_error_body, truncate};

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
    let (host, _) = url_host(base_url);
    host == "api.openai.com" || host.ends_with(".openai.azure.com")
}

/// The host of `base_url`, lowercased, and its port if one is written: what decides
/// which server's own request fields apply. Ends where a URL parser ends the authority
/// (`/`, `\`, `?`, `#`) and skips any user info, so `https://API.OpenAI.com` is
/// OpenAI's API and `https://api.openai.com@other.test` is not.
pub(crate) fn url_host(base_url: &str) -> (String, Option<&str>) {
    let rest = base_url.split_once("://").map_or(base_url, |(_, r)| r);
    let authority = rest.split(['/', '\\', '?', '#']).next().unwrap_or("");
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let (host, port) = match host_port.rsplit_once(':') {
        Some((h, p)) if !h.is_empty() && !p.contains(']') => (h, Some(p)),
        _ => (host_port, None),
    };
    (host.to_ascii_lowercase(), port)
}

/// Builds the JSON request body for `kind`, with the [`RequestOptions`] defaults (no
/// reasoning control, no cache breakpoints, a generic OpenAI-compatible server).
pub fn request_body(kind: ProviderKind, params: &RequestParams<'_>) -> Value {
    request_body_with(kind, params, &RequestOptions::default())
}

/// What the agent adds to a request beyond the conversation: the conversation controls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestOptions {
    /// Reasoning control for this request (`None`: send nothing, the provider decides).
    pub reasoning: Option<Reasoning>,
    /// Anthropic: cache breakpoints on the system prompt, the tool list and the latest
    /// message.
    pub prompt_caching: bool,
    /// OpenAI-compatible: which server's own fields to use (resolved, never `Auto`).
    pub compat: Compat,
}

impl Default for RequestOptions {
    fn default() -> Self {
        RequestOptions {
            reasoning: None,
            prompt_caching: false,
            compat: Compat::Generic,
        }
    }
}

/// Builds the JSON request body for `kind` with the conversation controls of `options`.
pub fn request_body_with(
    kind: ProviderKind,
    params: &RequestParams<'_>,
    options: &RequestOptions,
) -> Value {
    match kind {
        ProviderKind::OpenAi => openai::request_body(params, options),
        ProviderKind::Anthropic => anthropic::request_body(params, options),
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

/// The streaming decoder of one response, for either provider.
#[derive(Debug)]
pub enum Decoder {
    OpenAi(openai::Decoder),
    Anthropic(anthropic::Decoder),
}

impl Decoder {
    /// A decoder with the default [`DecodeLimits`].
    pub fn new(kind: ProviderKind, message: u32) -> Decoder {
        Decoder::with_limits(kind, message, DecodeLimits::default())
    }

    pub fn with_limits(kind: ProviderKind, message: u32, limits: DecodeLimits) -> Decoder {
        let asm = Assembly::new(message, limits);
        match kind {
            ProviderKind::OpenAi => Decoder::OpenAi(openai::Decoder::with_assembly(asm)),
            ProviderKind::Anthropic => Decoder::Anthropic(anthropic::Decoder::with_assembly(asm)),
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

/// Decodes a response that arrived as one JSON body although a stream was asked for
/// (LiteLLM's `/v1/messages`, servers that ignore `stream: true`): a complete chat
/// completion (`"object": "chat.completion"`) for [`ProviderKind::OpenAi`], a complete
/// message (`"type": "message"`) for [`ProviderKind::Anthropic`].
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_fields_follow_the_host_whatever_its_spelling() {
        assert!(uses_max_completion_tokens("https://API.OpenAI.com/v1"));
        assert!(uses_max_completion_tokens(
            "https://x.OPENAI.AZURE.COM/openai"
        ));
        assert!(!uses_max_completion_tokens(
            "https://api.openai.com@other.test/v1"
        ));
        assert!(!uses_max_completion_tokens(
            "https://other.test\\@api.openai.com/v1"
        ));
        assert_eq!(url_host("http://user:pw@LOCALHOST:11434/v1").0, "localhost");
        assert_eq!(url_host("http://localhost:11434/v1").1, Some("11434"));
        assert_eq!(
            url_host("http://[::1]:11434/v1"),
            ("[::1]".to_owned(), Some("11434"))
        );
        assert_eq!(url_host("http://[::1]/v1"), ("[::1]".to_owned(), None));
        use crate::config::Compat;
        assert_eq!(
            Compat::Auto.resolve("https://API.DeepSeek.com"),
            Compat::DeepSeek
        );
        assert_eq!(
            Compat::Auto.resolve("http://127.0.0.1:11434/v1"),
            Compat::Ollama
        );
        assert_eq!(
            Compat::Auto.resolve("http://127.0.0.1:8000/v1"),
            Compat::Generic
        );
    }
}
