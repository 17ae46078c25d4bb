//! Owns the provider seam: [`Wire`], everything the rest of the core asks of a provider
//! — where its API is and how a request proves who sends it, what it refuses before
//! anything is sent, what its error answers mean, how it takes an output schema, how a
//! request is encoded and a response decoded ([`Decode`]). Each provider module
//! implements it once (its `Format`), and `ProviderKind::wire`, the registration in
//! `provider/mod.rs`, is the one place that picks an implementation by kind: `config`,
//! `http`, `output` and `agent` ask the seam and never match on the kind.
//!
//! What most providers share is the trait's default (an OpenAI-style error body, no
//! retry wait in the body, no forced output tool, the schema as written); a provider
//! overrides only where it differs.

use std::time::Duration;

use reqwest::header::HeaderName;
use serde_json::Value;

use super::assembly::Assembly;
use super::{Emit, Progress, RequestOptions, RequestParams};
use crate::error::{Error, Result};
use crate::media::Input;
use crate::message::Usage;
use crate::sse::SseEvent;

/// One provider's wire format and API conventions, as the core uses them.
pub(crate) trait Wire: Sync {
    /// The provider's own API: the default `base_url`, written as its official SDK
    /// writes it (DESIGN.md, "Configuration").
    fn default_base_url(&self) -> &'static str;

    /// The environment variable the API key is read from by default.
    fn api_key_env(&self) -> &'static str;

    /// The provider's `gen_ai.provider.name` in OpenTelemetry's GenAI conventions, for a
    /// server at `base_url`.
    fn telemetry_name(&self, _base_url: &str) -> &'static str;

    /// The path appended to `base_url`; where the URL names the model, its pattern.
    fn endpoint_path(&self) -> &'static str;

    /// The URL of a request to `model`: `base_url` without its trailing slash, then
    /// [`Wire::endpoint_path`]. A provider whose URL names the model overrides it.
    fn endpoint(&self, base_url: &str, _model: &str) -> String {
        format!("{}{}", base_url.trim_end_matches('/'), self.endpoint_path())
    }

    /// The headers every request carries for this provider: the one holding `api_key`
    /// (none when the key is empty: the caller sends its own, or none), and any the API
    /// requires. In order; `http` adds the caller's headers after them.
    fn auth_headers(&self, api_key: &str) -> Vec<AuthHeader>;

    /// Why the provider would refuse a tool named `name` beyond the rule every provider
    /// shares (`ToolSpec::check`), or `None`. `Config::validate` names the tool.
    fn tool_name_problem(&self, _name: &str) -> Option<&'static str> {
        None
    }

    /// Refuses, before anything is sent, an input this wire format cannot carry.
    fn check_input(&self, _input: &Input) -> Result<()> {
        Ok(())
    }

    /// An HTTP error answer (non-2xx status, its body already redacted) as a typed error.
    fn http_error(&self, status: u16, body: &str) -> Error {
        super::wire_error::http_error(status, body)
    }

    /// The wait an error body asks for before a retry, where the provider names it in
    /// the body rather than in a header.
    fn retry_delay(&self, _body: &str) -> Option<Duration> {
        None
    }

    /// Whether the provider takes a forced tool call, so that `output_mode: tool` can ask
    /// for a structured answer through it.
    fn forces_output_tool(&self) -> bool {
        false
    }

    /// The output schema as this provider's structured-output field takes it, and
    /// whether the answer then carries a `null` for an optional property the model left
    /// out (strict mode: it is taken as absent). `Err((path, problem))` names the first
    /// keyword the provider refuses, `path` relative to the schema's root. Default: the
    /// schema as written.
    fn native_output_schema(
        &self,
        schema: &Value,
    ) -> std::result::Result<(Value, bool), (String, String)> {
        Ok((schema.clone(), false))
    }

    /// The JSON request body of one step of the conversation.
    fn request_body(&self, params: &RequestParams<'_>, options: &RequestOptions<'_>) -> Value;

    /// The streaming decoder of the `message`-th response of a turn, assembling into
    /// `asm`.
    fn decoder(&self, asm: Assembly, message: u32) -> Box<dyn Decode>;

    /// The SSE data of the stream equivalent to a response that arrived as one JSON
    /// body, or `None` when `body` is no such response.
    fn complete_body_events(&self, body: Value) -> Option<Vec<String>>;

    /// The size in tokens of the request a response answered, from the usage the
    /// provider reported: what compaction compares with its threshold. Default: the
    /// input tokens, for a provider that counts its cached input among them (OpenAI's
    /// `input_tokens` in both APIs, Gemini's `promptTokenCount`).
    fn request_tokens(&self, usage: &Usage) -> u64 {
        usage.input_tokens
    }

    /// Whether the server can keep a response (`store: true`) so that the next request
    /// sends only what came after it.
    fn keeps_responses(&self) -> bool {
        false
    }

    /// The provider's token-count endpoint for a request `body` (as
    /// [`Wire::request_body`] wrote it): its URL and what to send it. `None` when the
    /// provider has none (the count is then estimated).
    fn token_count_request(
        &self,
        _base_url: &str,
        _model: &str,
        _body: &Value,
    ) -> Option<(String, Value)> {
        None
    }

    /// The count in the token-count endpoint's answer.
    fn token_count(&self, _answer: &Value) -> Option<u64> {
        None
    }
}

/// `body` with only the keys `keep` names: what a count endpoint takes of a request.
pub(crate) fn only_keys(body: &Value, keep: &[&str]) -> Value {
    let mut out = serde_json::Map::new();
    if let Some(obj) = body.as_object() {
        for (k, v) in obj {
            if keep.contains(&k.as_str()) {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    Value::Object(out)
}

/// A header [`Wire::auth_headers`] asks for. Names are constants (`HeaderName::
/// from_static` in a `const`), not strings parsed at run time: http's parser compares
/// names a word at a time past their end, which memcheck reports on every agent made in
/// an optimized build (capi/tests/c/valgrind.supp).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AuthHeader {
    /// A credential: sent marked sensitive (redacted from every `Debug`), and an invalid
    /// value is a `config` error naming `api_key`.
    Credential(HeaderName, String),
    /// A fixed value the API requires on every request.
    Fixed(HeaderName, &'static str),
}

/// The streaming decoder of one response, whatever its format: SSE events in, panto
/// events out through the shared [`Assembly`].
pub(crate) trait Decode: Send + std::fmt::Debug {
    /// Decodes one SSE event.
    fn on_sse(&mut self, ev: &SseEvent<'_>, emit: Emit<'_>) -> Result<Progress>;

    /// The body ended: completes the message if the provider had said it was done, else
    /// fails with `incomplete`.
    fn on_eof(&mut self, emit: Emit<'_>) -> Result<()>;

    /// The blocks, events and limits of the response so far.
    fn assembly(&self) -> &Assembly;

    /// The assembly, once decoding is over.
    fn into_assembly(self: Box<Self>) -> Assembly;
}

/// Implements [`Decode`] for a format's `Decoder`, whose inherent `on_sse` and `on_eof`
/// do the work and whose `asm` field is its assembly.
macro_rules! decode_by_inherent_methods {
    ($decoder:ty) => {
        impl $crate::provider::wire::Decode for $decoder {
            fn on_sse(
                &mut self,
                ev: &$crate::sse::SseEvent<'_>,
                emit: $crate::provider::Emit<'_>,
            ) -> $crate::error::Result<$crate::provider::Progress> {
                <$decoder>::on_sse(self, ev, emit)
            }

            fn on_eof(&mut self, emit: $crate::provider::Emit<'_>) -> $crate::error::Result<()> {
                <$decoder>::on_eof(self, emit)
            }

            fn assembly(&self) -> &$crate::provider::assembly::Assembly {
                &self.asm
            }

            fn into_assembly(self: Box<Self>) -> $crate::provider::assembly::Assembly {
                self.asm
            }
        }
    };
}
pub(crate) use decode_by_inherent_methods;
