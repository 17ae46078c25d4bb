//! Owns what an MCP server may ask of panto, its client, beyond `ping`:
//! `sampling/createMessage` (one model request through the agent's own provider) and
//! `elicitation/create` (a question for the host), each answered only for a server whose
//! declaration enables it (`sampling`, `elicitation`), which is also when the capability
//! is declared at `initialize`. It owns reading the server's request, the host's hooks
//! ([`McpClientHooks`]: approving a sampling request, answering an elicitation), checking
//! the host's answer against the requested schema, the JSON-RPC answer, and the bound on
//! such requests in flight. It does not own the model request: that is the agent's
//! ([`Sampler`]), reached through the running tool call of the server that asked, whose
//! turn counts the request's usage and carries its `mcp_sampling_request` event (and the
//! `mcp_elicitation_request` event of an elicitation).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::{json, Map, Value};

use crate::error::Result;
use crate::event::Event;
use crate::message::{Block, Message, Role, StopReason, Usage};
use crate::tool::CallProgress;

/// Default of a server's `sampling_max_tokens`: the most output tokens one sampling
/// request of the server may ask for (a request asking more gets this many).
pub const DEFAULT_SAMPLING_MAX_TOKENS: u32 = 1024;

/// Most requests of one server (sampling and elicitation together) being answered at
/// once; more are refused.
const MAX_IN_FLIGHT: usize = 4;
/// Most messages of one sampling request.
const MAX_MESSAGES: usize = 100;
/// Most bytes of text of one sampling request (its messages and system prompt).
const MAX_TEXT: usize = 1 << 20;
/// Most bytes of an event's summary or an elicitation's message.
const MAX_SUMMARY: usize = 200;
const MAX_ELICIT_MESSAGE: usize = 2000;

/// JSON-RPC codes of the answers.
const METHOD_NOT_FOUND: i64 = -32601;
const INVALID_PARAMS: i64 = -32602;
const INTERNAL: i64 = -32603;
/// What the MCP SDKs answer when the user rejects a sampling request.
const USER_REJECTED: i64 = -1;

/// A server's `sampling/createMessage`, as the host's approval hook sees it and as the
/// agent's provider is asked.
#[derive(Debug, Clone, PartialEq)]
pub struct McpSamplingRequest {
    /// The server's name (its key in `mcp_servers`).
    pub server: String,
    /// The server's system prompt, if it gave one.
    pub system_prompt: Option<String>,
    /// The conversation the server wants answered (text only).
    pub messages: Vec<Message>,
    /// The output limit of the request: the server's `maxTokens`, at most the server's
    /// `sampling_max_tokens`.
    pub max_tokens: u32,
    /// The server's temperature, when it gave a usable one.
    pub temperature: Option<f64>,
    /// One line saying what is asked (the start of the last message's text).
    pub summary: String,
}

impl McpSamplingRequest {
    /// The request as JSON, for hooks across a language boundary: `{"server", "summary",
    /// "max_tokens", "system_prompt" (string or null), "temperature" (number or null),
    /// "messages": [{"role": "user" | "assistant", "text"}]}`.
    pub fn to_json(&self) -> String {
        let messages: Vec<Value> = self
            .messages
            .iter()
            .map(|m| {
                let role = if m.role == Role::Assistant {
                    "assistant"
                } else {
                    "user"
                };
                json!({"role": role, "text": m.text()})
            })
            .collect();
        json!({
            "server": self.server,
            "summary": self.summary,
            "max_tokens": self.max_tokens,
            "system_prompt": self.system_prompt,
            "temperature": self.temperature,
            "messages": messages,
        })
        .to_string()
    }
}

/// A server's `elicitation/create` (form mode), as the host's hook sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct McpElicitationRequest {
    /// The server's name (its key in `mcp_servers`).
    pub server: String,
    /// What the server tells the person (at most 2000 bytes).
    pub message: String,
    /// The JSON Schema of the answer: an object of flat properties (strings, numbers,
    /// integers, booleans, enums and arrays of enum strings).
    pub requested_schema: Value,
}

impl McpElicitationRequest {
    /// The request as JSON, for hooks across a language boundary: `{"server",
    /// "message", "requested_schema"}`.
    pub fn to_json(&self) -> String {
        json!({
            "server": self.server,
            "message": self.message,
            "requested_schema": self.requested_schema,
        })
        .to_string()
    }
}

/// The host's answer to an elicitation.
#[derive(Debug, Clone, PartialEq)]
pub enum McpElicitationAnswer {
    /// The person answered: the content, an object matching the requested schema.
    Accept(Map<String, Value>),
    /// The person said no.
    Decline,
    /// The person dismissed the question without choosing.
    Cancel,
}

impl McpElicitationAnswer {
    /// The answer's action in MCP (`accept`, `decline`, `cancel`).
    pub fn action(&self) -> &'static str {
        match self {
            McpElicitationAnswer::Accept(_) => "accept",
            McpElicitationAnswer::Decline => "decline",
            McpElicitationAnswer::Cancel => "cancel",
        }
    }
}

impl McpElicitationAnswer {
    /// An answer from its JSON, as a hook across a language boundary gives it:
    /// `{"action": "accept", "content": {…}}`, `{"action": "decline"}` or
    /// `{"action": "cancel"}`. A `config` error says what is wrong with another text.
    pub fn from_json(text: &str) -> Result<McpElicitationAnswer> {
        let v: Value = serde_json::from_str(text).map_err(|e| {
            crate::error::Error::config(format!("an elicitation answer is not JSON: {e}"))
        })?;
        match (v.get("action").and_then(Value::as_str), v.get("content")) {
            (Some("accept"), Some(Value::Object(content))) => {
                Ok(McpElicitationAnswer::Accept(content.clone()))
            }
            (Some("accept"), _) => Err(crate::error::Error::config(
                "an accepted elicitation answer needs a content object",
            )),
            (Some("decline"), _) => Ok(McpElicitationAnswer::Decline),
            (Some("cancel"), _) => Ok(McpElicitationAnswer::Cancel),
            _ => Err(crate::error::Error::config(
                "an elicitation answer's action is accept, decline or cancel",
            )),
        }
    }
}

/// Decides whether a sampling request goes to the model (`true`) or is refused. It may
/// block (to ask a person): it runs on a thread of its own.
pub type McpApproveSampling = Arc<dyn Fn(&McpSamplingRequest) -> bool + Send + Sync>;
/// Answers an elicitation. It may block (to ask a person): it runs on a thread of its
/// own.
pub type McpElicit = Arc<dyn Fn(&McpElicitationRequest) -> McpElicitationAnswer + Send + Sync>;

/// What a host lends the servers of an agent for their own requests. Without
/// `approve_sampling`, a server whose `sampling` is enabled has every request answered;
/// without `elicit`, every elicitation is declined.
#[derive(Clone, Default)]
pub struct McpClientHooks {
    /// Approves or refuses each sampling request.
    pub approve_sampling: Option<McpApproveSampling>,
    /// Answers each elicitation.
    pub elicit: Option<McpElicit>,
}

impl std::fmt::Debug for McpClientHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpClientHooks")
            .field("approve_sampling", &self.approve_sampling.is_some())
            .field("elicit", &self.elicit.is_some())
            .finish()
    }
}

/// What a model request for a server gave back.
pub(crate) struct Sampled {
    pub text: String,
    pub model: String,
    pub stop_reason: StopReason,
}

/// The future of one sampling request.
pub(crate) type SampleFuture = Pin<Box<dyn Future<Output = Result<Sampled>> + Send>>;

/// Runs a server's sampling request through the agent's provider, within a turn (which
/// counts its usage).
pub(crate) trait Sampler: Send + Sync {
    fn sample(&self, request: McpSamplingRequest) -> SampleFuture;
}

/// The usage of a turn's sampling requests, for the turn to add to its own.
#[derive(Default)]
pub(crate) struct SampledUsage(Mutex<Option<Usage>>);

impl SampledUsage {
    pub fn add(&self, usage: &Usage) {
        let mut total = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        total.get_or_insert(Usage::TOTAL).add(usage);
    }

    pub fn take(&self) -> Option<Usage> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).take()
    }
}

/// What one server's declaration enables of its own requests, and the host's hooks
/// (shared by the servers of a set, read at each request).
pub(crate) struct ClientFeatures {
    /// `Some(cap)` when sampling is enabled: the most output tokens of one request.
    pub sampling: Option<u32>,
    pub elicitation: bool,
    pub hooks: Arc<Mutex<McpClientHooks>>,
    in_flight: AtomicUsize,
}

impl ClientFeatures {
    /// The features of a server, `None` when it enables neither.
    pub fn new(
        sampling: Option<u32>,
        elicitation: bool,
        hooks: Arc<Mutex<McpClientHooks>>,
    ) -> Option<Arc<ClientFeatures>> {
        if sampling.is_none() && !elicitation {
            return None;
        }
        Some(Arc::new(ClientFeatures {
            sampling,
            elicitation,
            hooks,
            in_flight: AtomicUsize::new(0),
        }))
    }

    /// The client capabilities declared at `initialize`.
    pub fn capabilities(features: Option<&ClientFeatures>) -> Value {
        let mut caps = Map::new();
        if let Some(f) = features {
            if f.sampling.is_some() {
                caps.insert("sampling".into(), json!({}));
            }
            if f.elicitation {
                caps.insert("elicitation".into(), json!({"form": {}}));
            }
        }
        Value::Object(caps)
    }

    /// Whether `method` is one of these features, enabled.
    pub fn handles(features: Option<&ClientFeatures>, method: &str) -> bool {
        match (features, method) {
            (Some(f), "sampling/createMessage") => f.sampling.is_some(),
            (Some(f), "elicitation/create") => f.elicitation,
            _ => false,
        }
    }

    fn hooks(&self) -> McpClientHooks {
        self.hooks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// One of the server's requests being answered, counted against [`MAX_IN_FLIGHT`].
pub(crate) struct InFlight(Arc<ClientFeatures>);

impl InFlight {
    pub fn start(features: &Arc<ClientFeatures>) -> Option<InFlight> {
        if features.in_flight.fetch_add(1, Ordering::SeqCst) >= MAX_IN_FLIGHT {
            features.in_flight.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        Some(InFlight(features.clone()))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A JSON-RPC error object.
pub(crate) fn rpc_error(code: i64, message: impl Into<String>) -> Value {
    json!({"code": code, "message": message.into()})
}

/// The answer to a request beyond the bound on those in flight.
pub(crate) fn too_many() -> Value {
    rpc_error(
        INTERNAL,
        format!("panto answers at most {MAX_IN_FLIGHT} requests of one server at once"),
    )
}

/// Runs a blocking host hook on a thread of its own (it may ask a person), detached and
/// ended when the hook returns: not on the runtime's blocking pool, which in a binding
/// is a worker's one name-resolution thread (a hook waiting for a person would hold up
/// every connection of that worker, and two hooks would wait for each other), and whose
/// idle threads outlive the hook. `None` when the hook panicked or no thread could be
/// started.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("panto-mcp-hook".into())
        .spawn(move || {
            let _ = tx.send(f());
        })
        .ok()?;
    rx.await.ok()
}

/// The running tool calls of a server that take reports, oldest first, when one of its
/// own requests arrived. Over stdio nothing on the wire says which call a request was
/// made for, so it belongs to the oldest. Its event goes to the oldest of them whose
/// result is not yet delivered by the time the request is answered: two calls of one
/// server run at once, and the first may end while the person still answers the
/// second's question; the event is then reported before the second's result, never lost.
#[derive(Default)]
pub(crate) struct Calls(pub Vec<CallProgress>);

impl Calls {
    /// Passes `event` to the turn through the oldest call that still takes it.
    pub(crate) fn note(&self, event: Event) {
        let mut event = event;
        for call in &self.0 {
            match call.note(event) {
                Some(back) => event = back,
                None => return,
            }
        }
    }

    /// The turn's way to the model, through the oldest call.
    fn sampler(&self) -> Option<Arc<dyn Sampler>> {
        self.0.first().and_then(CallProgress::sampler)
    }
}

/// Answers one of the server's requests that `features` handles: its `result`
/// (`Ok`) or JSON-RPC `error` object (`Err`). `calls` are the running tool calls of the
/// server the request may belong to: their turn reports the request, and a sampling
/// request needs its model.
pub(crate) async fn answer(
    server: &str,
    features: &ClientFeatures,
    calls: Calls,
    method: &str,
    params: Option<&Value>,
) -> std::result::Result<Value, Value> {
    match method {
        "sampling/createMessage" => match features.sampling {
            Some(cap) => sample(server, features, cap, calls, params).await,
            None => Err(rpc_error(METHOD_NOT_FOUND, "sampling is not enabled")),
        },
        "elicitation/create" if features.elicitation => {
            elicit(server, features, calls, params).await
        }
        _ => Err(rpc_error(
            METHOD_NOT_FOUND,
            "panto does not offer this method",
        )),
    }
}

async fn sample(
    server: &str,
    features: &ClientFeatures,
    cap: u32,
    calls: Calls,
    params: Option<&Value>,
) -> std::result::Result<Value, Value> {
    let request =
        sampling_request(server, params, cap).map_err(|why| rpc_error(INVALID_PARAMS, why))?;
    let note = |outcome: &str| {
        calls.note(Event::McpSamplingRequest {
            server: server.to_owned(),
            summary: request.summary.clone(),
            max_tokens: u64::from(request.max_tokens),
            outcome: outcome.to_owned(),
        });
    };
    let Some(sampler) = calls.sampler() else {
        return Err(rpc_error(
            INTERNAL,
            "panto answers sampling only while a tool of this server runs in a turn",
        ));
    };
    if let Some(approve) = features.hooks().approve_sampling {
        let shown = request.clone();
        if blocking(move || approve(&shown)).await != Some(true) {
            note("denied");
            return Err(rpc_error(
                USER_REJECTED,
                "the host declined the sampling request",
            ));
        }
    }
    match sampler.sample(request.clone()).await {
        Ok(sampled) => {
            note("answered");
            Ok(sampling_result(&sampled))
        }
        Err(e) => {
            note("failed");
            Err(rpc_error(
                INTERNAL,
                format!("the model request failed: {}", e.message),
            ))
        }
    }
}

async fn elicit(
    server: &str,
    features: &ClientFeatures,
    calls: Calls,
    params: Option<&Value>,
) -> std::result::Result<Value, Value> {
    let request =
        elicitation_request(server, params).map_err(|why| rpc_error(INVALID_PARAMS, why))?;
    let note = |outcome: &str| {
        calls.note(Event::McpElicitationRequest {
            server: server.to_owned(),
            message: crate::text::truncate(&request.message, MAX_SUMMARY).to_owned(),
            outcome: outcome.to_owned(),
        });
    };
    let answer = match features.hooks().elicit {
        Some(hook) => {
            let shown = request.clone();
            blocking(move || hook(&shown))
                .await
                .unwrap_or(McpElicitationAnswer::Cancel)
        }
        None => McpElicitationAnswer::Decline,
    };
    if let McpElicitationAnswer::Accept(content) = &answer {
        if let Err(why) = check_content(&request.requested_schema, content) {
            note("invalid");
            return Err(rpc_error(
                INTERNAL,
                format!("the host's answer does not match the requested schema: {why}"),
            ));
        }
    }
    note(answer.action());
    Ok(elicitation_result(&answer))
}

/// Reads a `sampling/createMessage`'s params: text messages of the user and the
/// assistant, the system prompt, `maxTokens` (capped at `cap`; `cap` when absent) and a
/// temperature between 0 and 2. Anything else of MCP's (images, audio, tools,
/// `includeContext`, model preferences) is refused or ignored: the `Err` says which.
pub(crate) fn sampling_request(
    server: &str,
    params: Option<&Value>,
    cap: u32,
) -> std::result::Result<McpSamplingRequest, String> {
    let params = params
        .and_then(Value::as_object)
        .ok_or("the params are not an object")?;
    let items = params
        .get("messages")
        .and_then(Value::as_array)
        .ok_or("messages is not an array")?;
    if items.is_empty() {
        return Err("messages is empty".into());
    }
    if items.len() > MAX_MESSAGES {
        return Err(format!("more than {MAX_MESSAGES} messages"));
    }
    let mut size = 0usize;
    let mut messages = Vec::with_capacity(items.len());
    for (i, m) in items.iter().enumerate() {
        let role = match m.get("role").and_then(Value::as_str) {
            Some("user") => Role::User,
            Some("assistant") => Role::Assistant,
            _ => return Err(format!("messages[{i}].role is neither user nor assistant")),
        };
        let parts: Vec<&Value> = match m.get("content") {
            Some(Value::Array(a)) => a.iter().collect(),
            Some(c @ Value::Object(_)) => vec![c],
            _ => return Err(format!("messages[{i}].content is not content")),
        };
        let mut content = Vec::with_capacity(parts.len());
        for p in parts {
            match (p.get("type").and_then(Value::as_str), p.get("text")) {
                (Some("text"), Some(Value::String(text))) => {
                    size = size.saturating_add(text.len());
                    content.push(Block::text(text.clone()));
                }
                (Some(other), _) => {
                    return Err(format!(
                        "messages[{i}]: panto samples text only, not {:?}",
                        crate::text::truncate(other, 40)
                    ))
                }
                _ => return Err(format!("messages[{i}].content has no type")),
            }
        }
        if content.is_empty() {
            return Err(format!("messages[{i}].content is empty"));
        }
        messages.push(Message { role, content });
    }
    let system_prompt = match params.get("systemPrompt") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.is_empty() => None,
        Some(Value::String(s)) => {
            size = size.saturating_add(s.len());
            Some(s.clone())
        }
        Some(_) => return Err("systemPrompt is not a string".into()),
    };
    if size > MAX_TEXT {
        return Err(format!("more than {MAX_TEXT} bytes of text"));
    }
    let max_tokens = match params.get("maxTokens") {
        None | Some(Value::Null) => cap,
        Some(v) => match v.as_u64() {
            Some(0) | None => return Err("maxTokens is not a positive integer".into()),
            Some(n) => u32::try_from(n).unwrap_or(u32::MAX).min(cap),
        },
    };
    let temperature = params
        .get("temperature")
        .and_then(Value::as_f64)
        .filter(|t| (0.0..=2.0).contains(t));
    let summary = messages
        .last()
        .map(|m| one_line(&m.text(), MAX_SUMMARY))
        .unwrap_or_default();
    Ok(McpSamplingRequest {
        server: server.to_owned(),
        system_prompt,
        messages,
        max_tokens,
        temperature,
        summary,
    })
}

/// The first line of `text`, at most `max` bytes.
fn one_line(text: &str, max: usize) -> String {
    let line = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    crate::text::truncate(line.trim(), max).to_owned()
}

/// The `CreateMessageResult` of a model's answer.
pub(crate) fn sampling_result(sampled: &Sampled) -> Value {
    let stop = match &sampled.stop_reason {
        StopReason::EndTurn => "endTurn".to_owned(),
        StopReason::MaxTokens => "maxTokens".to_owned(),
        StopReason::StopSequence => "stopSequence".to_owned(),
        other => other.as_string(),
    };
    json!({
        "role": "assistant",
        "content": {"type": "text", "text": sampled.text},
        "model": sampled.model,
        "stopReason": stop,
    })
}

/// Reads an `elicitation/create`'s params (form mode: a message and an object schema).
pub(crate) fn elicitation_request(
    server: &str,
    params: Option<&Value>,
) -> std::result::Result<McpElicitationRequest, String> {
    let params = params
        .and_then(Value::as_object)
        .ok_or("the params are not an object")?;
    match params.get("mode").and_then(Value::as_str) {
        None | Some("form") => {}
        Some(_) => return Err("panto answers form elicitation only".into()),
    }
    let message = params
        .get("message")
        .and_then(Value::as_str)
        .ok_or("message is not a string")?;
    let schema = params
        .get("requestedSchema")
        .filter(|s| s.get("properties").is_none_or(Value::is_object))
        .filter(|s| s.is_object())
        .ok_or("requestedSchema is not an object schema")?;
    if schema.to_string().len() > MAX_TEXT {
        return Err(format!("requestedSchema is over {MAX_TEXT} bytes"));
    }
    Ok(McpElicitationRequest {
        server: server.to_owned(),
        message: crate::text::truncate(message, MAX_ELICIT_MESSAGE).to_owned(),
        requested_schema: schema.clone(),
    })
}

/// The `ElicitResult` of the host's answer.
pub(crate) fn elicitation_result(answer: &McpElicitationAnswer) -> Value {
    match answer {
        McpElicitationAnswer::Accept(content) => {
            json!({"action": "accept", "content": content})
        }
        other => json!({"action": other.action()}),
    }
}

/// Checks an accepted answer against the requested schema as MCP restricts it: an
/// object of flat properties; every required one present, no other key, each value of
/// its property's type, within its `enum` / `oneOf` constants, bounds and item counts.
pub(crate) fn check_content(
    schema: &Value,
    content: &Map<String, Value>,
) -> std::result::Result<(), String> {
    let empty = Map::new();
    let properties = schema
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    if let Some(required) = schema.get("required").and_then(Value::as_array) {
        for name in required.iter().filter_map(Value::as_str) {
            if !content.contains_key(name) {
                return Err(format!("{name:?} is required"));
            }
        }
    }
    for (name, value) in content {
        let Some(prop) = properties.get(name) else {
            return Err(format!("{name:?} is not a property of the schema"));
        };
        check_value(prop, value).map_err(|why| format!("{name:?}: {why}"))?;
    }
    Ok(())
}

/// The constants a property allows (`enum`, or the `const` of each `oneOf` / `anyOf`).
fn allowed(prop: &Value) -> Option<Vec<&Value>> {
    if let Some(e) = prop.get("enum").and_then(Value::as_array) {
        return Some(e.iter().collect());
    }
    for key in ["oneOf", "anyOf"] {
        if let Some(a) = prop.get(key).and_then(Value::as_array) {
            return Some(a.iter().filter_map(|o| o.get("const")).collect());
        }
    }
    None
}

fn check_value(prop: &Value, value: &Value) -> std::result::Result<(), String> {
    let ty = prop.get("type").and_then(Value::as_str).unwrap_or("");
    let fits = match ty {
        "string" => value.is_string(),
        "boolean" => value.is_boolean(),
        "number" => value.is_number(),
        "integer" => value.is_i64() || value.is_u64(),
        "array" => value.is_array(),
        // A type MCP does not allow: any single value.
        _ => !value.is_object() && !value.is_array(),
    };
    if !fits {
        return Err(format!("must be of type {ty}"));
    }
    if let Some(n) = value.as_f64() {
        if let Some(min) = prop.get("minimum").and_then(Value::as_f64) {
            if n < min {
                return Err(format!("must be at least {min}"));
            }
        }
        if let Some(max) = prop.get("maximum").and_then(Value::as_f64) {
            if n > max {
                return Err(format!("must be at most {max}"));
            }
        }
    }
    if let Some(s) = value.as_str() {
        let len = s.chars().count() as u64;
        if prop
            .get("minLength")
            .and_then(Value::as_u64)
            .is_some_and(|m| len < m)
            || prop
                .get("maxLength")
                .and_then(Value::as_u64)
                .is_some_and(|m| len > m)
        {
            return Err("has a length out of bounds".into());
        }
        if let Some(allowed) = allowed(prop) {
            if !allowed.contains(&value) {
                return Err("is not one of the allowed values".into());
            }
        }
    }
    if let Some(items) = value.as_array() {
        let n = items.len() as u64;
        if prop
            .get("minItems")
            .and_then(Value::as_u64)
            .is_some_and(|m| n < m)
            || prop
                .get("maxItems")
                .and_then(Value::as_u64)
                .is_some_and(|m| n > m)
        {
            return Err("has a count of items out of bounds".into());
        }
        let item_schema = prop
            .get("items")
            .cloned()
            .unwrap_or(json!({"type": "string"}));
        let item_schema = if item_schema.get("type").is_none() {
            let mut s = item_schema;
            if let Value::Object(o) = &mut s {
                o.insert("type".into(), "string".into());
            }
            s
        } else {
            item_schema
        };
        for item in items {
            check_value(&item_schema, item)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sampling_request_is_read_and_capped() {
        let params = json!({
            "messages": [
                {"role": "user", "content": {"type": "text", "text": "first"}},
                {"role": "assistant", "content": [{"type": "text", "text": "reply"}]},
                {"role": "user", "content": {"type": "text", "text": "\n  last question\nmore"}},
            ],
            "systemPrompt": "be brief",
            "maxTokens": 5000,
            "temperature": 0.7,
            "includeContext": "none",
        });
        let r = sampling_request("s", Some(&params), 100).unwrap();
        assert_eq!(r.max_tokens, 100, "capped");
        assert_eq!(r.system_prompt.as_deref(), Some("be brief"));
        assert_eq!(r.messages.len(), 3);
        assert_eq!(r.messages[1].role, Role::Assistant);
        assert_eq!(r.summary, "last question");
        assert_eq!(r.temperature, Some(0.7));
        let small = json!({"messages": [{"role": "user", "content": {"type": "text", "text": "x"}}],
                           "maxTokens": 7, "temperature": 9});
        let r = sampling_request("s", Some(&small), 100).unwrap();
        assert_eq!(
            (r.max_tokens, r.temperature, r.system_prompt),
            (7, None, None)
        );
        for (bad, why) in [
            (json!(null), "not an object"),
            (json!({"messages": []}), "empty"),
            (
                json!({"messages": [{"role": "system", "content": {"type": "text", "text": "x"}}]}),
                "role",
            ),
            (
                json!({"messages": [{"role": "user", "content": {"type": "image", "data": "AA=="}}]}),
                "text only",
            ),
            (
                json!({"messages": [{"role": "user", "content": 3}]}),
                "not content",
            ),
            (
                json!({"messages": [{"role": "user", "content": {"type": "text", "text": "x"}}], "maxTokens": 0}),
                "maxTokens",
            ),
            (
                json!({"messages": [{"role": "user", "content": {"type": "text", "text": "x"}}], "systemPrompt": 1}),
                "systemPrompt",
            ),
        ] {
            let e = sampling_request("s", Some(&bad), 100).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn requests_and_answers_cross_a_language_boundary_as_json() {
        let params = json!({"messages": [
            {"role": "user", "content": {"type": "text", "text": "q"}},
            {"role": "assistant", "content": {"type": "text", "text": "a"}}],
            "maxTokens": 9});
        let r = sampling_request("s", Some(&params), 100).unwrap();
        let v: Value = serde_json::from_str(&r.to_json()).unwrap();
        assert_eq!(
            v,
            json!({"server": "s", "summary": "a", "max_tokens": 9, "system_prompt": null,
                   "temperature": null,
                   "messages": [{"role": "user", "text": "q"}, {"role": "assistant", "text": "a"}]})
        );
        let e = McpElicitationRequest {
            server: "s".into(),
            message: "m".into(),
            requested_schema: json!({"type": "object"}),
        };
        let v: Value = serde_json::from_str(&e.to_json()).unwrap();
        assert_eq!(v["requested_schema"], json!({"type": "object"}));
        assert_eq!(
            McpElicitationAnswer::from_json(r#"{"action":"accept","content":{"a":1}}"#).unwrap(),
            McpElicitationAnswer::Accept(json!({"a": 1}).as_object().unwrap().clone())
        );
        assert_eq!(
            McpElicitationAnswer::from_json(r#"{"action":"decline"}"#).unwrap(),
            McpElicitationAnswer::Decline
        );
        assert_eq!(
            McpElicitationAnswer::from_json(r#"{"action":"cancel"}"#).unwrap(),
            McpElicitationAnswer::Cancel
        );
        for bad in ["", "[]", r#"{"action":"accept"}"#, r#"{"action":"maybe"}"#] {
            assert!(McpElicitationAnswer::from_json(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_model_answer_becomes_a_create_message_result() {
        let v = sampling_result(&Sampled {
            text: "hello".into(),
            model: "m1".into(),
            stop_reason: StopReason::MaxTokens,
        });
        assert_eq!(
            v,
            json!({"role": "assistant", "content": {"type": "text", "text": "hello"},
                   "model": "m1", "stopReason": "maxTokens"})
        );
    }

    #[test]
    fn elicitation_requests_and_answers_map_both_ways() {
        let schema = json!({"type": "object", "required": ["name"], "properties": {
            "name": {"type": "string", "maxLength": 5},
            "ok": {"type": "boolean"},
            "n": {"type": "integer", "minimum": 1, "maximum": 100},
            "x": {"type": "number"},
            "pick": {"type": "string", "enum": ["a", "b"]},
            "hero": {"type": "string", "oneOf": [{"const": "h1", "title": "H"}]},
            "many": {"type": "array", "minItems": 1, "maxItems": 2,
                     "items": {"anyOf": [{"const": "f1"}, {"const": "f2"}]}},
        }});
        let r = elicitation_request(
            "s",
            Some(&json!({"message": "fill in", "requestedSchema": schema})),
        )
        .unwrap();
        assert_eq!(r.message, "fill in");
        let obj = |v: Value| v.as_object().unwrap().clone();
        let good = obj(
            json!({"name": "Ann", "ok": true, "n": 42, "x": 3.5, "pick": "b",
                              "hero": "h1", "many": ["f2"]}),
        );
        assert_eq!(check_content(&schema, &good), Ok(()));
        for (bad, why) in [
            (json!({"ok": true}), "required"),
            (json!({"name": "Ann", "other": 1}), "not a property"),
            (json!({"name": 3}), "type string"),
            (json!({"name": "toolong"}), "length"),
            (json!({"name": "a", "n": 1.5}), "type integer"),
            (json!({"name": "a", "n": 101}), "at most"),
            (json!({"name": "a", "pick": "c"}), "allowed"),
            (json!({"name": "a", "hero": "h2"}), "allowed"),
            (json!({"name": "a", "many": []}), "items"),
            (json!({"name": "a", "many": ["f3"]}), "allowed"),
        ] {
            let e = check_content(&schema, &obj(bad.clone())).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
        assert_eq!(
            elicitation_result(&McpElicitationAnswer::Accept(obj(json!({"name": "A"})))),
            json!({"action": "accept", "content": {"name": "A"}})
        );
        assert_eq!(
            elicitation_result(&McpElicitationAnswer::Decline),
            json!({"action": "decline"})
        );
        assert_eq!(
            elicitation_result(&McpElicitationAnswer::Cancel),
            json!({"action": "cancel"})
        );
        for bad in [
            json!({"message": "m"}),
            json!({"message": 1, "requestedSchema": {}}),
            json!({"message": "m", "requestedSchema": {"properties": 3}}),
            json!({"mode": "url", "message": "m", "url": "https://x"}),
        ] {
            assert!(elicitation_request("s", Some(&bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn capabilities_are_declared_only_when_enabled() {
        let hooks = Arc::new(Mutex::new(McpClientHooks::default()));
        assert!(ClientFeatures::new(None, false, hooks.clone()).is_none());
        assert_eq!(ClientFeatures::capabilities(None), json!({}));
        let s = ClientFeatures::new(Some(10), false, hooks.clone()).unwrap();
        assert_eq!(
            ClientFeatures::capabilities(Some(&s)),
            json!({"sampling": {}})
        );
        assert!(ClientFeatures::handles(Some(&s), "sampling/createMessage"));
        assert!(!ClientFeatures::handles(Some(&s), "elicitation/create"));
        let e = ClientFeatures::new(None, true, hooks).unwrap();
        assert_eq!(
            ClientFeatures::capabilities(Some(&e)),
            json!({"elicitation": {"form": {}}})
        );
        assert!(!ClientFeatures::handles(None, "elicitation/create"));
        // The bound on requests in flight.
        let held: Vec<_> = (0..MAX_IN_FLIGHT)
            .map(|_| InFlight::start(&e).unwrap())
            .collect();
        assert!(InFlight::start(&e).is_none());
        drop(held);
        assert!(InFlight::start(&e).is_some());
    }

    #[tokio::test]
    async fn without_a_hook_an_elicitation_is_declined_and_sampling_needs_a_turn() {
        let hooks = Arc::new(Mutex::new(McpClientHooks::default()));
        let f = ClientFeatures::new(Some(10), true, hooks.clone()).unwrap();
        let params =
            json!({"message": "m", "requestedSchema": {"type": "object", "properties": {}}});
        let r = answer(
            "s",
            &f,
            Calls::default(),
            "elicitation/create",
            Some(&params),
        )
        .await;
        assert_eq!(r, Ok(json!({"action": "decline"})));
        hooks.lock().unwrap().elicit = Some(Arc::new(|_: &McpElicitationRequest| {
            McpElicitationAnswer::Accept(json!({"nope": 1}).as_object().unwrap().clone())
        }));
        let r = answer(
            "s",
            &f,
            Calls::default(),
            "elicitation/create",
            Some(&params),
        )
        .await;
        assert_eq!(r.unwrap_err()["code"], INTERNAL);
        let sampling =
            json!({"messages": [{"role": "user", "content": {"type": "text", "text": "x"}}]});
        let r = answer(
            "s",
            &f,
            Calls::default(),
            "sampling/createMessage",
            Some(&sampling),
        )
        .await;
        assert!(r.unwrap_err()["message"]
            .as_str()
            .unwrap()
            .contains("while a tool"));
        let r = answer("s", &f, Calls::default(), "roots/list", None).await;
        assert_eq!(r.unwrap_err()["code"], METHOD_NOT_FOUND);
    }
}
