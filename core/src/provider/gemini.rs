//! Owns the Google Gemini wire format (`models/{model}:streamGenerateContent?alt=sse`,
//! the Gemini API's own protocol, not its OpenAI-compatible endpoint): the streaming
//! decoder, the request body, the endpoint URL and what an error body says.
//!
//! **Stream.** Every SSE `data:` is a whole `GenerateContentResponse`; there is no
//! `[DONE]`. Only the first candidate is read. Its `content.parts` become blocks: a run
//! of `{text}` parts is one text block, a run of `{text, thought: true}` parts one
//! reasoning block (a part of the other kind closes the run), and each `{functionCall:
//! {id?, name, args}}` — which arrives whole — one tool-call block with its arguments as
//! a single delta (a call without an `id` gets one, [`GENERATED_ID_PREFIX`]). A part of
//! any other kind (`executableCode`, `inlineData`…) is kept verbatim as a
//! [`Block::Opaque`] and sent back as it came. `finishReason` arrives on the last
//! frame, `usageMetadata` on any (the last one counts); the message is complete at the
//! end of the body once a `finishReason` (or a `promptFeedback.blockReason`) was seen,
//! `incomplete` otherwise. An `{"error": …}` frame is a `provider` error.
//!
//! **Stop reasons.** A message with a `functionCall` part is `tool_use` whatever
//! `finishReason` says (Gemini says `STOP`). `MAX_TOKENS` is `max_tokens`; the safety
//! reasons (`SAFETY`, `RECITATION`, `BLOCKLIST`, `PROHIBITED_CONTENT`, `SPII`, the image
//! ones) and a blocked prompt are `content_filter`; anything else is `other:<raw>`.
//! `MALFORMED_FUNCTION_CALL` (the model wrote a call Gemini could not read) becomes a
//! tool call whose arguments did not parse (its `finishMessage` is the raw text), so
//! the agent answers it with an error result the model reads and can correct, instead
//! of the turn ending on it.
//!
//! **Thought signatures.** A part's `thoughtSignature` must go back on exactly that part
//! (Gemini 3 refuses a function call without it). panto's blocks carry no Gemini field,
//! so a signature is kept as an opaque marker block `{"thoughtSignature": …}` right after
//! the block of its part, and that block is closed there (text that follows is a new
//! part). A signature on an empty part belongs to the run it ends (Gemini streams it that
//! way); one with nothing to belong to is kept as its whole part. The request encoder
//! puts each marker back on the part encoded just before it. Markers are `gemini`'s own:
//! no other provider is sent them, and no Gemini signature ever reaches Anthropic as a
//! thinking signature. They are history blocks like any other, so they survive save,
//! restore and compaction (which keeps the latest messages verbatim).

use std::collections::HashSet;
use std::time::Duration;

use reqwest::header::HeaderName;
use serde_json::{json, Map, Value};

use super::{Assembly, DecodeLimits, Emit, Progress, RequestOptions, RequestParams};
use super::{AuthHeader, Decode, OutputRequest, Wire};
use crate::error::{Error, ErrorKind, Result};
use crate::event::{BlockKind, DeltaKind};
use crate::message::{Block, Message, Role, StopReason};
use crate::request::{Effort, Reasoning};
use crate::sse::SseEvent;
use crate::text::truncate;

/// Default base URL: the Gemini API (without the version, as in Google's SDKs).
pub const DEFAULT_BASE_URL: &str = "https://generativelanguage.googleapis.com";

/// The header that carries the API key: never the URL (`?key=`), so no logged URL
/// holds it.
const X_GOOG_API_KEY: HeaderName = HeaderName::from_static("x-goog-api-key");

/// Gemini behind the seam.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Format;

impl Wire for Format {
    fn default_base_url(&self) -> &'static str {
        DEFAULT_BASE_URL
    }

    fn telemetry_name(&self, _base_url: &str) -> &'static str {
        "gcp.gemini"
    }

    fn api_key_env(&self) -> &'static str {
        "GEMINI_API_KEY"
    }

    fn endpoint_path(&self) -> &'static str {
        "/v1beta/models/{model}:streamGenerateContent?alt=sse"
    }

    /// The URL names the model ([`endpoint`]), which a turn or a compaction may choose.
    fn endpoint(&self, base_url: &str, model: &str) -> String {
        endpoint(base_url, model)
    }

    /// `POST /v1beta/models/{model}:countTokens` with the whole request as its
    /// `generateContentRequest`, answered with `{"totalTokens": n}`.
    fn token_count_request(
        &self,
        base_url: &str,
        model: &str,
        body: &Value,
    ) -> Option<(String, Value)> {
        let url =
            endpoint(base_url, model).replace(":streamGenerateContent?alt=sse", ":countTokens");
        let name = model.strip_prefix("models/").unwrap_or(model);
        let mut request = body.clone();
        if let Some(obj) = request.as_object_mut() {
            obj.insert("model".into(), Value::from(format!("models/{name}")));
        }
        Some((
            url,
            serde_json::json!({ "generateContentRequest": request }),
        ))
    }

    fn token_count(&self, answer: &Value) -> Option<u64> {
        answer.get("totalTokens")?.as_u64()
    }

    fn auth_headers(&self, api_key: &str) -> Vec<AuthHeader> {
        if api_key.is_empty() {
            return Vec::new();
        }
        vec![AuthHeader::Credential(X_GOOG_API_KEY, api_key.to_owned())]
    }

    /// Gemini's rule is narrower than the others': a function name starts with a letter
    /// or '_' (it would answer 400 INVALID_ARGUMENT at the first request).
    fn tool_name_problem(&self, name: &str) -> Option<&'static str> {
        (!name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_'))
            .then_some("Gemini accepts only names that start with a letter or '_'")
    }

    fn http_error(&self, status: u16, body: &str) -> Error {
        http_error(status, body)
    }

    /// Google names its wait in the body (`RetryInfo.retryDelay`), not in a header.
    fn retry_delay(&self, body: &str) -> Option<Duration> {
        retry_delay(body)
    }

    fn request_body(&self, params: &RequestParams<'_>, options: &RequestOptions<'_>) -> Value {
        request_body(params, options)
    }

    fn decoder(&self, asm: Assembly, message: u32) -> Box<dyn Decode> {
        Box::new(Decoder::with_assembly(asm, message))
    }

    fn complete_body_events(&self, body: Value) -> Option<Vec<String>> {
        complete_body_events(body)
    }
}

super::wire::decode_by_inherent_methods!(Decoder);

/// The name of the provider in opaque blocks and configuration.
pub const PROVIDER: &str = "gemini";

/// Prefix of the call ids panto makes up for a `functionCall` that came without one.
/// Such an id is Gemini's to never see: it is left out of the `functionCall` and
/// `functionResponse` parts sent back, where Gemini pairs calls and answers by order.
pub const GENERATED_ID_PREFIX: &str = "gemini_call_";

/// The name given to the call made up for a `MALFORMED_FUNCTION_CALL` whose text names
/// no function panto can find.
pub const MALFORMED_CALL_NAME: &str = "malformed_function_call";

/// The key of a thought-signature marker block.
const SIGNATURE: &str = "thoughtSignature";

/// The URL of a streamed request for `model`: `{base}/v1beta/models/{model}:
/// streamGenerateContent?alt=sse`. A `models/` prefix on the name (as Google's model
/// list spells it) is accepted; the name is percent-encoded, so it stays one path
/// segment whatever it holds. The API key never goes in the URL (`x-goog-api-key`).
pub fn endpoint(base_url: &str, model: &str) -> String {
    let model = model.strip_prefix("models/").unwrap_or(model);
    let mut encoded = String::with_capacity(model.len());
    for b in model.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            encoded.push(b as char);
        } else {
            encoded.push_str(&format!("%{b:02X}"));
        }
    }
    format!(
        "{}/v1beta/models/{encoded}:streamGenerateContent?alt=sse",
        base_url.trim_end_matches('/')
    )
}

/// Which kind of text run is open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Run {
    Text,
    Thought,
}

/// Streaming decoder of one `streamGenerateContent` response.
#[derive(Debug)]
pub struct Decoder {
    pub(crate) asm: Assembly,
    message: u32,
    /// The text or thought block being extended, with its kind.
    open: Option<(usize, Run)>,
    finish_reason: Option<String>,
    finish_message: Option<String>,
    block_reason: Option<String>,
    saw_call: bool,
    done: bool,
}

impl Decoder {
    /// A decoder with the default [`DecodeLimits`].
    pub fn new(message: u32) -> Decoder {
        Decoder::with_assembly(Assembly::new(message, DecodeLimits::default()), message)
    }

    pub(crate) fn with_assembly(mut asm: Assembly, message: u32) -> Decoder {
        asm.opaque_provider = PROVIDER;
        Decoder {
            asm,
            message,
            open: None,
            finish_reason: None,
            finish_message: None,
            block_reason: None,
            saw_call: false,
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
        let Some(Value::Object(mut frame)) = super::parse_value_lossy(ev.data) else {
            return Err(Error::protocol(format!(
                "malformed Gemini stream event (not a JSON object): {:?}",
                truncate(ev.data.trim(), 200)
            )));
        };
        if let Some(error) = frame.get("error").filter(|e| !e.is_null()) {
            return Err(stream_error(error, ev.data));
        }
        if !self.asm.started_flag() {
            if let Some(Value::String(model)) = frame.get("modelVersion") {
                self.asm.model = model.clone();
            }
            if let Some(Value::String(id)) = frame.get("responseId") {
                self.asm.response_id = Some(id.clone());
            }
        }
        if let Some(Value::Object(u)) = frame.get("usageMetadata") {
            self.set_usage(u);
        }
        if let Some(reason) = frame
            .get("promptFeedback")
            .and_then(|f| f.get("blockReason"))
            .and_then(Value::as_str)
        {
            self.block_reason = Some(reason.to_owned());
        }
        let candidate = match frame.get_mut("candidates") {
            Some(Value::Array(candidates)) if !candidates.is_empty() => candidates.swap_remove(0),
            _ => return Ok(Progress::Continue),
        };
        let Value::Object(mut candidate) = candidate else {
            return Ok(Progress::Continue);
        };
        if let Some(Value::Array(parts)) = candidate
            .get_mut("content")
            .and_then(|c| c.get_mut("parts"))
            .map(Value::take)
        {
            for part in parts {
                self.part(part, emit)?;
            }
        }
        if let Some(Value::String(reason)) = candidate.remove("finishReason") {
            self.finish_reason = Some(reason);
        }
        if let Some(Value::String(message)) = candidate.remove("finishMessage") {
            self.finish_message = Some(message);
        }
        Ok(Progress::Continue)
    }

    /// End of body: the message is complete once Gemini said why it stopped.
    pub fn on_eof(&mut self, emit: Emit<'_>) -> Result<()> {
        if self.done {
            return Ok(());
        }
        if self.finish_reason.is_none() && self.block_reason.is_none() {
            return Err(Error::incomplete(
                "the stream ended before Gemini finished the message (no finishReason)",
            ));
        }
        self.done = true;
        self.close_run(emit)?;
        let stop = if self.finish_reason.as_deref() == Some("MALFORMED_FUNCTION_CALL") {
            self.malformed_call(emit)?;
            StopReason::ToolUse
        } else if self.saw_call {
            StopReason::ToolUse
        } else if let Some(reason) = &self.finish_reason {
            finish_reason(reason)
        } else {
            block_reason(self.block_reason.as_deref().unwrap_or(""))
        };
        self.asm.finish(stop, emit)
    }

    /// Gemini's counts in each frame are the response's so far: a later one replaces an
    /// earlier one. Output is `candidatesTokenCount` plus `thoughtsTokenCount` (Gemini
    /// counts thoughts apart; panto's output includes reasoning).
    fn set_usage(&mut self, u: &Map<String, Value>) {
        let prompt = count(u.get("promptTokenCount"));
        let candidates = count(u.get("candidatesTokenCount"));
        let thoughts = count(u.get("thoughtsTokenCount"));
        let cached = count(u.get("cachedContentTokenCount"));
        let usage = &mut self.asm.usage;
        if let Some(v) = prompt {
            usage.input_tokens = v;
        }
        if candidates.is_some() || thoughts.is_some() {
            usage.output_tokens = candidates
                .unwrap_or(0)
                .saturating_add(thoughts.unwrap_or(0));
        }
        if let Some(v) = thoughts {
            usage.reasoning_tokens = v;
        }
        if let Some(v) = cached {
            usage.cache_read_tokens = v;
        }
        if prompt.is_some() || candidates.is_some() {
            usage.reported = true;
        }
    }

    fn close_run(&mut self, emit: Emit<'_>) -> Result<()> {
        if let Some((idx, _)) = self.open.take() {
            self.asm.close(idx, false, emit)?;
        }
        Ok(())
    }

    fn part(&mut self, part: Value, emit: Emit<'_>) -> Result<()> {
        let Value::Object(part) = part else {
            return Ok(());
        };
        let signature = part
            .get(SIGNATURE)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned);
        if let Some(Value::Object(call)) = part.get("functionCall") {
            self.close_run(emit)?;
            let b = self.asm.open(BlockKind::ToolCall, emit)?;
            let name = call.get("name").and_then(Value::as_str).unwrap_or("");
            let id = match call.get("id").and_then(Value::as_str) {
                Some(id) if !id.is_empty() => id.to_owned(),
                _ => format!("{GENERATED_ID_PREFIX}{}_{b}", self.message),
            };
            self.asm.tool_ids(b, &id, name, false, emit)?;
            let args = match call.get("args") {
                None | Some(Value::Null) => "{}".to_owned(),
                Some(v) => v.to_string(),
            };
            self.asm.delta(b, DeltaKind::ToolArgs, &args, false, emit)?;
            self.asm.close(b, false, emit)?;
            self.saw_call = true;
            return self.signature(signature);
        }
        let textual = match part.get("text") {
            Some(Value::String(_)) => true,
            // A part with nothing but `thought` and a signature: the end of a run.
            None => part.keys().all(|k| k == "thought" || k == SIGNATURE),
            Some(_) => false,
        };
        if !textual {
            // A kind of part panto does not model: kept whole, sent back as it came.
            self.close_run(emit)?;
            let part = Value::Object(part);
            let size = part.to_string().len();
            self.asm.opaque(part, size)?;
            return Ok(());
        }
        let run = if part.get("thought").and_then(Value::as_bool) == Some(true) {
            Run::Thought
        } else {
            Run::Text
        };
        let text = part.get("text").and_then(Value::as_str).unwrap_or("");
        if !text.is_empty() {
            if self.open.is_some_and(|(_, r)| r != run) {
                self.close_run(emit)?;
            }
            let idx = match self.open {
                Some((idx, _)) => idx,
                None => {
                    let kind = match run {
                        Run::Text => BlockKind::Text,
                        Run::Thought => BlockKind::Reasoning,
                    };
                    let idx = self.asm.open(kind, emit)?;
                    self.open = Some((idx, run));
                    idx
                }
            };
            let kind = match run {
                Run::Text => DeltaKind::Text,
                Run::Thought => DeltaKind::Reasoning,
            };
            self.asm.delta(idx, kind, text, false, emit)?;
        }
        if signature.is_none() {
            return Ok(());
        }
        if self.open.is_some_and(|(_, r)| r == run) {
            // The signature ends the run it came with: the part it belongs to is the
            // block just assembled.
            self.close_run(emit)?;
            return self.signature(signature);
        }
        // A signed empty part that ends nothing: kept as the part it is. A bare
        // `{thoughtSignature}` gets its empty text, so that it is not read back as a
        // marker and put on another part.
        self.close_run(emit)?;
        let mut part = part;
        if !part.contains_key("text") {
            part.insert("text".into(), "".into());
        }
        let part = Value::Object(part);
        let size = part.to_string().len();
        self.asm.opaque(part, size)?;
        Ok(())
    }

    /// Keeps a signature as a marker right after the block just closed.
    fn signature(&mut self, signature: Option<String>) -> Result<()> {
        if let Some(sig) = signature {
            let size = sig.len() + SIGNATURE.len();
            self.asm.opaque(json!({ SIGNATURE: sig }), size)?;
        }
        Ok(())
    }

    /// `MALFORMED_FUNCTION_CALL`: a tool call whose arguments did not parse, holding
    /// what Gemini said about it, so the model is answered with an error it can act on.
    fn malformed_call(&mut self, emit: Emit<'_>) -> Result<()> {
        let raw = self
            .finish_message
            .clone()
            .filter(|m| !m.trim().is_empty())
            .unwrap_or_else(|| "MALFORMED_FUNCTION_CALL".to_owned());
        let name = called_name(&raw).unwrap_or(MALFORMED_CALL_NAME);
        let b = self.asm.open(BlockKind::ToolCall, emit)?;
        let id = format!("{GENERATED_ID_PREFIX}{}_{b}", self.message);
        self.asm.tool_ids(b, &id, name, false, emit)?;
        // Not JSON, so the call is answered with an error naming what was sent.
        let text = format!("MALFORMED_FUNCTION_CALL: {raw}");
        self.asm.delta(b, DeltaKind::ToolArgs, &text, false, emit)?;
        self.asm.close(b, false, emit)
    }
}

/// The function a malformed call's text names: the identifier before the first `(`
/// that is not `print` (Gemini writes such calls as Python:
/// `print(default_api.get_weather(city="Paris"))`).
fn called_name(text: &str) -> Option<&str> {
    let text = text.split_once(':').map_or(text, |(_, rest)| rest);
    let mut start = None;
    for (i, c) in text.char_indices() {
        if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
            start.get_or_insert(i);
            continue;
        }
        if c == '(' {
            if let Some(s) = start {
                let name = &text[s..i];
                if name != "print" {
                    return Some(name);
                }
            }
        }
        start = None;
    }
    None
}

fn count(v: Option<&Value>) -> Option<u64> {
    match v? {
        Value::Number(n) => n.as_u64().or_else(|| {
            let f = n.as_f64()?;
            (f.is_finite() && f >= 0.0 && f.fract() == 0.0 && f < 18_446_744_073_709_551_616.0)
                .then_some(f as u64)
        }),
        _ => None,
    }
}

/// Maps a `finishReason` (of a message without function calls).
pub fn finish_reason(raw: &str) -> StopReason {
    match raw {
        "STOP" => StopReason::EndTurn,
        "MAX_TOKENS" => StopReason::MaxTokens,
        "SAFETY"
        | "RECITATION"
        | "BLOCKLIST"
        | "PROHIBITED_CONTENT"
        | "SPII"
        | "IMAGE_SAFETY"
        | "IMAGE_PROHIBITED_CONTENT"
        | "IMAGE_RECITATION" => StopReason::ContentFilter,
        other => StopReason::Other(other.to_owned()),
    }
}

/// Maps a `promptFeedback.blockReason` (the prompt was refused; no candidate).
fn block_reason(raw: &str) -> StopReason {
    match raw {
        "SAFETY" | "BLOCKLIST" | "PROHIBITED_CONTENT" | "IMAGE_SAFETY" => StopReason::ContentFilter,
        other => StopReason::Other(other.to_owned()),
    }
}

/// What a Google error object says: (message, status such as `RESOURCE_EXHAUSTED`, or
/// the numeric code when there is no status).
fn describe(error: &Value) -> (Option<String>, Option<String>) {
    let text = |k: &str| {
        error
            .get(k)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    let code = text("status").or_else(|| match error.get("code") {
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => None,
    });
    match error {
        Value::String(s) if !s.is_empty() => (Some(s.clone()), None),
        _ => (text("message"), code),
    }
}

/// An `{"error": …}` frame inside a 200 stream: a `provider` error, retryable (before
/// any content) when Google's status says the service failed rather than the request.
fn stream_error(error: &Value, data: &str) -> Error {
    let (message, code) = describe(error);
    let retryable = matches!(
        code.as_deref(),
        Some("INTERNAL" | "UNAVAILABLE" | "DEADLINE_EXCEEDED")
    );
    Error::new(
        ErrorKind::Provider,
        format!(
            "Gemini reported an error mid-stream: {}",
            message.unwrap_or_else(|| truncate(data.trim(), 300).to_owned())
        ),
    )
    .with_retryable(retryable)
    .with_provider_code(code)
}

/// An HTTP error answer from the Gemini API → typed error. The kind follows the status
/// (400 `INVALID_ARGUMENT` → `bad_request`, 403 `PERMISSION_DENIED` → `permission`,
/// 429 `RESOURCE_EXHAUSTED` → `rate_limited`, 500 / 503 → `server`); the provider code
/// is Google's status name. One exception: Google refuses a bad API key with a 400
/// whose `ErrorInfo` reason is `API_KEY_INVALID`, which is `authentication` (what a 401
/// is elsewhere), with that reason as the code. The wait Google asks for sits in the
/// body ([`retry_delay`]), not in a header.
pub fn http_error(status: u16, body: &str) -> Error {
    let error = super::parse_value_lossy(body)
        .and_then(|mut v| v.get_mut("error").map(Value::take))
        .filter(|e| !e.is_null());
    let (message, mut code) = match &error {
        Some(e) => describe(e),
        None => (None, None),
    };
    let mut kind = ErrorKind::from_status(status);
    let bad_key = error
        .as_ref()
        .and_then(|e| e.get("details"))
        .and_then(Value::as_array)
        .is_some_and(|details| {
            details
                .iter()
                .any(|d| d.get("reason").and_then(Value::as_str) == Some("API_KEY_INVALID"))
        });
    if bad_key {
        kind = ErrorKind::Authentication;
        code = Some("API_KEY_INVALID".to_owned());
    }
    let retryable = matches!(status, 408 | 409 | 429 | 500..=599);
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

/// The wait an error body asks for: `error.details[]` entry of type
/// `google.rpc.RetryInfo`, whose `retryDelay` is a duration in seconds such as `"20s"`
/// or `"1.5s"`. `None` without one, or when it is not a sane duration.
pub fn retry_delay(body: &str) -> Option<Duration> {
    let v = super::parse_value_lossy(body)?;
    let details = v.get("error")?.get("details")?.as_array()?;
    details.iter().find_map(|d| {
        let ty = d.get("@type")?.as_str()?;
        if !ty.ends_with("google.rpc.RetryInfo") {
            return None;
        }
        let secs: f64 = d
            .get("retryDelay")?
            .as_str()?
            .trim()
            .strip_suffix('s')?
            .parse()
            .ok()?;
        if !secs.is_finite() || !(0.0..1e12).contains(&secs) {
            return None;
        }
        Duration::try_from_secs_f64(secs).ok()
    })
}

/// The SSE data of the stream equivalent to a body that arrived whole: one
/// `GenerateContentResponse` (what `generateContent` answers) or an array of them (what
/// `streamGenerateContent` answers without `alt=sse`). `None` for anything else (an
/// error body is reported as such by the caller).
pub(crate) fn complete_body_events(body: Value) -> Option<Vec<String>> {
    let is_response = |v: &Value| {
        v.get("candidates").is_some()
            || v.get("promptFeedback").is_some()
            || v.get("usageMetadata").is_some()
    };
    match body {
        Value::Object(_) if is_response(&body) => Some(vec![body.to_string()]),
        Value::Array(items) if !items.is_empty() && items.iter().all(Value::is_object) => {
            Some(items.iter().map(Value::to_string).collect())
        }
        _ => None,
    }
}

/// The thinking budget for an effort on Gemini 2.x models (which take a budget, not a
/// level): 0 turns thinking off where the model allows it.
fn thinking_budget(effort: Effort) -> u32 {
    match effort {
        Effort::None => 0,
        Effort::Low => 1024,
        Effort::Medium => 8192,
        Effort::High => 24_576,
    }
}

/// `generationConfig.thinkingConfig` for the reasoning control: `thinkingBudget` when a
/// budget is given or the model is a Gemini 2.x (which know no level), else
/// `thinkingLevel` (Gemini 3: `minimal`, `low`, `medium`, `high`; Gemini 3 Pro knows
/// only `low` and `high`). Never both: the API refuses that. Thoughts are included
/// unless the effort is `none`.
pub fn thinking_config(model: &str, reasoning: &Reasoning) -> Value {
    let model = model.strip_prefix("models/").unwrap_or(model);
    let mut config = Map::new();
    let legacy = model.starts_with("gemini-2") || model.starts_with("gemini-1");
    if let Some(budget) = reasoning.budget_tokens {
        config.insert("thinkingBudget".into(), budget.into());
    } else if legacy {
        config.insert(
            "thinkingBudget".into(),
            thinking_budget(reasoning.effort).into(),
        );
    } else {
        let level = match reasoning.effort {
            Effort::None => "minimal",
            Effort::Low => "low",
            Effort::Medium => "medium",
            Effort::High => "high",
        };
        config.insert("thinkingLevel".into(), level.into());
    }
    config.insert(
        "includeThoughts".into(),
        (reasoning.effort != Effort::None).into(),
    );
    Value::Object(config)
}

/// Whether `block` is a thought-signature marker (see the module doc).
fn marker(block: &Value) -> Option<&str> {
    let obj = block.as_object()?;
    if obj.len() != 1 {
        return None;
    }
    obj.get(SIGNATURE)?.as_str()
}

/// Whether a call goes to Gemini as a `functionCall` part: a name, and arguments that
/// are an object. Anything else (the call made up for `MALFORMED_FUNCTION_CALL`, a
/// foreign history's broken call) goes as text, with its answer.
fn sendable_call(name: &str, arguments: &Option<Value>) -> bool {
    !name.is_empty() && arguments.as_ref().is_some_and(Value::is_object)
}

/// The id of a call as Gemini may see it: none for an id panto made up.
fn wire_id(call_id: &str) -> Option<&str> {
    (!call_id.is_empty() && !call_id.starts_with(GENERATED_ID_PREFIX)).then_some(call_id)
}

/// The parts of an assistant message, signatures back on their parts.
fn model_parts(m: &Message) -> Vec<Value> {
    let mut parts: Vec<Value> = Vec::with_capacity(m.content.len());
    // The part encoded from the block just before, which a marker attaches to.
    let mut last: Option<usize> = None;
    for (i, b) in m.content.iter().enumerate() {
        let next_is_marker = matches!(
            m.content.get(i + 1),
            Some(Block::Opaque { provider, block }) if provider == PROVIDER && marker(block).is_some()
        );
        let part = match b {
            Block::Text { text } if !text.is_empty() => json!({ "text": text }),
            // Thought summaries tell Gemini nothing without their signature (and cost
            // input tokens): only signed ones go back.
            Block::Reasoning { text, .. } if next_is_marker => {
                json!({ "text": text, "thought": true })
            }
            Block::ToolCall {
                call_id,
                name,
                arguments,
                arguments_raw,
            } => {
                if sendable_call(name, arguments) {
                    let mut call = Map::new();
                    if let Some(id) = wire_id(call_id) {
                        call.insert("id".into(), id.into());
                    }
                    call.insert("name".into(), name.as_str().into());
                    call.insert("args".into(), arguments.clone().unwrap_or_default());
                    json!({ "functionCall": call })
                } else {
                    let raw = arguments_raw
                        .clone()
                        .or_else(|| arguments.as_ref().map(Value::to_string))
                        .unwrap_or_default();
                    json!({ "text": format!("[a call of {name:?} that could not be read: {raw}]") })
                }
            }
            Block::Opaque { provider, block } if provider == PROVIDER => {
                match (marker(block), last) {
                    (Some(sig), Some(at)) if parts[at].get(SIGNATURE).is_none() => {
                        parts[at][SIGNATURE] = sig.into();
                        last = None;
                        continue;
                    }
                    (Some(sig), _) => json!({ "text": "", SIGNATURE: sig }),
                    (None, _) => block.clone(),
                }
            }
            _ => {
                last = None;
                continue;
            }
        };
        parts.push(part);
        last = Some(parts.len() - 1);
    }
    parts
}

/// The parts of a tool message: one `functionResponse` per result (`{"output": text}`
/// or `{"error": text}`), or text for the answer to a call that went as text.
fn result_parts(m: &Message, textual: &HashSet<&str>) -> Vec<Value> {
    m.content
        .iter()
        .filter_map(|b| match b {
            Block::ToolResult {
                call_id,
                name,
                output,
                is_error,
                ..
            } => Some(if textual.contains(call_id.as_str()) {
                json!({ "text": format!("[the answer to the call of {name:?} that could not be read: {output}]") })
            } else {
                let key = if *is_error { "error" } else { "output" };
                let mut response = Map::new();
                if let Some(id) = wire_id(call_id) {
                    response.insert("id".into(), id.into());
                }
                response.insert("name".into(), name.as_str().into());
                response.insert("response".into(), json!({ key: output }));
                json!({ "functionResponse": response })
            }),
            _ => None,
        })
        .collect()
}

/// An attachment: `inlineData` for bytes, `fileData` for a URL (with its media type
/// when the caller gave one).
fn media_part(media: &crate::media::Media) -> Value {
    match &media.source {
        crate::media::MediaSource::Bytes { media_type, .. } => json!({ "inlineData": {
            "mimeType": media_type, "data": media.base64().unwrap_or_default() } }),
        crate::media::MediaSource::Url(url) => {
            let mut file = Map::new();
            if let Some(t) = media.media_type() {
                file.insert("mimeType".into(), t.into());
            }
            file.insert("fileUri".into(), url.as_str().into());
            json!({ "fileData": file })
        }
    }
}

/// The `streamGenerateContent` request body (the model goes in the URL, see
/// [`endpoint`]).
///
/// `contents` alternates `user` and `model`: tool results go as a `user` content of
/// `functionResponse` parts; a message left with no parts is left out, and contents of
/// the same role that then meet are merged (tool results first). The system prompt is
/// `systemInstruction`; tools are `functionDeclarations` with their schema as
/// `parametersJsonSchema` (JSON Schema as written, not Gemini's OpenAPI subset), with
/// `toolConfig` mode `AUTO`; `max_tokens`, `temperature` and the reasoning control go in
/// `generationConfig` ([`thinking_config`]).
pub fn request_body(p: &RequestParams<'_>, options: &RequestOptions) -> Value {
    let mut contents: Vec<Value> = Vec::with_capacity(p.messages.len());
    let mut last_role = None;
    for (i, m) in p.messages.iter().enumerate() {
        let (role, parts) = match m.role {
            Role::User => (
                "user",
                m.content
                    .iter()
                    .filter_map(|b| match b {
                        Block::Text { text } if !text.is_empty() => Some(json!({ "text": text })),
                        Block::Image(media) | Block::Document(media) => Some(media_part(media)),
                        _ => None,
                    })
                    .collect(),
            ),
            Role::Assistant => ("model", model_parts(m)),
            Role::Tool => {
                let textual: HashSet<&str> = i
                    .checked_sub(1)
                    .and_then(|j| p.messages.get(j))
                    .filter(|prev| prev.role == Role::Assistant)
                    .map(|prev| {
                        prev.content
                            .iter()
                            .filter_map(|b| match b {
                                Block::ToolCall {
                                    call_id,
                                    name,
                                    arguments,
                                    ..
                                } if !sendable_call(name, arguments) => Some(call_id.as_str()),
                                _ => None,
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                ("user", result_parts(m, &textual))
            }
        };
        let parts: Vec<Value> = parts;
        if parts.is_empty() {
            continue;
        }
        if last_role == Some(role) {
            if let Some(Value::Array(previous)) =
                contents.last_mut().and_then(|c| c.get_mut("parts"))
            {
                previous.extend(parts);
                continue;
            }
        }
        contents.push(json!({ "role": role, "parts": parts }));
        last_role = Some(role);
    }
    let mut body = json!({ "contents": contents });
    if let Some(system) = p.system.filter(|s| !s.is_empty()) {
        body["systemInstruction"] = json!({ "parts": [{ "text": system }] });
    }
    if !p.tools.is_empty() {
        let declarations: Vec<Value> = p
            .tools
            .iter()
            .map(|t| {
                json!({
                    "name": t.name,
                    "description": t.description,
                    "parametersJsonSchema": t.parameters,
                })
            })
            .collect();
        body["tools"] = json!([{ "functionDeclarations": declarations }]);
        body["toolConfig"] = json!({ "functionCallingConfig": { "mode": "AUTO" } });
    }
    let mut generation = Map::new();
    if let Some(n) = p.max_tokens {
        generation.insert("maxOutputTokens".into(), n.into());
    }
    if let Some(t) = p.temperature {
        generation.insert("temperature".into(), json!(t));
    }
    if let Some(r) = &options.reasoning {
        generation.insert("thinkingConfig".into(), thinking_config(p.model, r));
    }
    if let Some(OutputRequest { schema, .. }) = options.output {
        generation.insert("responseMimeType".into(), json!("application/json"));
        generation.insert("responseJsonSchema".into(), schema.clone());
    }
    if !generation.is_empty() {
        body["generationConfig"] = Value::Object(generation);
    }
    body
}
