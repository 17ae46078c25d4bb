//! Owns the turn's traces and metrics: `tracing` spans and events named and attributed
//! as OpenTelemetry's GenAI semantic conventions say, which `tracing-opentelemetry`
//! turns into OpenTelemetry spans and metrics (docs/observability.md).
//!
//! One `invoke_agent` span covers a turn (a resumed one too), a child of the caller's
//! current span; under it one `chat {model}` span per model request (retries are its
//! events, the time to its first chunk an attribute) and one `execute_tool {tool}` span
//! per tool call. They are made with `target: "panto::telemetry"` at `INFO`, and only
//! when the subscriber enables them: with no subscriber, or one that filters the target
//! out, a turn makes one disabled span and nothing else. Spans are never entered: the
//! children name their parent, so a turn's polls cost nothing extra.
//!
//! What the spans learn comes from the turn's events as the sink delivers them (after
//! the secrets were removed from them), plus the request's start and end from the loop.
//! Message content is recorded only when asked (`capture_message_content`, or
//! `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`), each value cut to
//! [`MAX_CONTENT_BYTES`], with the secrets removed.
//!
//! Metrics are `tracing` events with no parent that `tracing-opentelemetry`'s
//! `MetricsLayer` records as histograms: `gen_ai.client.operation.duration` (seconds),
//! `gen_ai.client.token.usage` (tokens, by `gen_ai.token.type`) and
//! `gen_ai.client.operation.time_to_first_chunk` (seconds).

use std::collections::HashMap;
use std::time::Instant;

use serde_json::json;
use tracing::field::Empty;
use tracing::{Level, Span};

use crate::config::Config;
use crate::error::Error;
use crate::event::Event;
use crate::message::Usage;
use crate::secret::Secrets;
use crate::turn::DeferReason;

/// The `tracing` target of every span and metric event of a turn.
pub const TARGET: &str = "panto::telemetry";

/// The environment variable of the conventions that turns content capture on.
pub const CAPTURE_CONTENT_ENV: &str = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT";

/// Most bytes of one content attribute (a prompt, an answer, a tool's arguments or
/// result); longer content is cut at a character boundary.
pub const MAX_CONTENT_BYTES: usize = 16 * 1024;

/// The field of the `invoke_agent` span that holds the turn's `traceparent` option, the
/// caller's span as W3C Trace Context writes it. A `tracing` span cannot name an
/// OpenTelemetry parent; an exporter that knows this field (`panto-otel`, which the CLI
/// and the C library use) makes the span that parent's child.
pub const TRACEPARENT_FIELD: &str = "panto.traceparent";

/// Checks a W3C `traceparent` (version `00`: `00-{trace id}-{span id}-{flags}`, lowercase
/// hex, ids not all zero); `path` names the option in the error.
pub fn check_traceparent(traceparent: &str, path: &str) -> Result<(), Error> {
    let hex = |s: &str, len: usize| {
        s.len() == len
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    let parts: Vec<&str> = traceparent.split('-').collect();
    let ok = matches!(parts.as_slice(), [version, trace, span, flags]
        if *version == "00"
            && hex(trace, 32) && trace.bytes().any(|b| b != b'0')
            && hex(span, 16) && span.bytes().any(|b| b != b'0')
            && hex(flags, 2));
    if ok {
        Ok(())
    } else {
        Err(Error::config(format!(
            "{path}: must be a W3C traceparent (00-<32 hex trace id>-<16 hex span id>-<2 hex flags>, ids not all zero)"
        )))
    }
}

/// Whether content is captured: the configuration key, or the conventions' variable.
fn capture_content(config: &Config) -> bool {
    config.capture_message_content
        || std::env::var(CAPTURE_CONTENT_ENV)
            .map(|v| v.trim().eq_ignore_ascii_case("true"))
            .unwrap_or(false)
}

/// `text` with the secrets removed, cut to [`MAX_CONTENT_BYTES`].
fn bounded(text: &str, secrets: &Secrets) -> String {
    let clean = secrets.redact(text);
    crate::text::truncate(&clean, MAX_CONTENT_BYTES).to_owned()
}

/// A message in the conventions' content form, as JSON text.
fn message_json(role: &str, text: &str) -> String {
    json!([{"role": role, "parts": [{"type": "text", "content": text}]}]).to_string()
}

/// A count as the signed integer OpenTelemetry attributes hold (`tracing-opentelemetry`
/// records an unsigned one as text).
fn int(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Seconds since `since`, for the duration attributes and metrics.
fn secs(since: Instant) -> f64 {
    since.elapsed().as_secs_f64()
}

/// The request attributes every span and metric of the turn shares.
struct Common {
    provider: &'static str,
    model: String,
    server_address: Option<String>,
    server_port: Option<u16>,
}

/// One model request in flight.
struct Chat {
    span: Span,
    message: u32,
    started: Instant,
    first_chunk: bool,
    attempts: u32,
    response_model: Option<String>,
}

/// The spans of one turn, fed by the loop and by the events it delivers.
pub(crate) struct TurnTelemetry {
    agent: Span,
    common: Common,
    content: bool,
    secrets: Secrets,
    chat: Option<Chat>,
    tools: HashMap<String, (Span, Instant)>,
    runners: HashMap<String, &'static str>,
    response_model: Option<String>,
    finished: bool,
}

/// A span of operation `$op` (`invoke_agent`, `chat`) with the attributes both carry
/// declared once, empty until recorded: status, request, server, response, usage and
/// `error.type`. The span's own fields follow the `;` (a `tracing` span declares every
/// field where it is made).
macro_rules! gen_ai_span {
    ($(parent: $parent:expr,)? $op:literal,
     otel.name = $name:expr,
     otel.kind = $kind:literal,
     gen_ai.provider.name = $provider:expr,
     gen_ai.request.model = $model:expr;
     $($own:tt)*) => {
        tracing::span!(
            target: TARGET,
            $(parent: $parent,)?
            Level::INFO,
            $op,
            otel.name = $name,
            otel.kind = $kind,
            otel.status_code = Empty,
            otel.status_description = Empty,
            gen_ai.operation.name = $op,
            gen_ai.provider.name = $provider,
            gen_ai.request.model = $model,
            gen_ai.request.max_tokens = Empty,
            gen_ai.request.temperature = Empty,
            server.address = Empty,
            server.port = Empty,
            gen_ai.response.model = Empty,
            gen_ai.response.finish_reasons = Empty,
            gen_ai.usage.input_tokens = Empty,
            gen_ai.usage.output_tokens = Empty,
            gen_ai.usage.cache_read.input_tokens = Empty,
            gen_ai.usage.cache_creation.input_tokens = Empty,
            gen_ai.usage.reasoning.output_tokens = Empty,
            error.type = Empty,
            $($own)*
        )
    };
}

impl TurnTelemetry {
    /// The `invoke_agent` span of a turn (a child of the caller's current span), or
    /// `None` when no subscriber wants it: then the turn records nothing. `traceparent`
    /// (checked) is recorded in [`TRACEPARENT_FIELD`].
    pub(crate) fn start(
        config: &Config,
        model: &str,
        resumed: bool,
        secrets: &Secrets,
        traceparent: Option<&str>,
    ) -> Option<TurnTelemetry> {
        let agent = gen_ai_span!(
            "invoke_agent",
            otel.name = "invoke_agent",
            otel.kind = "internal",
            gen_ai.provider.name = Empty,
            gen_ai.request.model = model;
            gen_ai.input.messages = Empty,
            gen_ai.output.messages = Empty,
            panto.turn.resumed = resumed,
            panto.turn.messages = Empty,
            panto.tool.deferred = Empty,
            panto.traceparent = traceparent,
        );
        if agent.is_disabled() {
            return None;
        }
        let url = reqwest::Url::parse(&config.endpoint_for(model)).ok();
        let common = Common {
            provider: config.provider.telemetry_name(&config.base_url),
            model: model.to_owned(),
            server_address: url.as_ref().and_then(|u| u.host_str().map(str::to_owned)),
            server_port: url.as_ref().and_then(reqwest::Url::port_or_known_default),
        };
        agent.record("gen_ai.provider.name", common.provider);
        record_request(&agent, config, &common);
        Some(TurnTelemetry {
            agent,
            common,
            content: capture_content(config),
            secrets: secrets.clone(),
            chat: None,
            tools: HashMap::new(),
            runners: HashMap::new(),
            response_model: None,
            finished: false,
        })
    }

    /// The turn's input, recorded when content is captured.
    pub(crate) fn input(&self, text: &str) {
        if self.content {
            let text = bounded(text, &self.secrets);
            self.agent.record(
                "gen_ai.input.messages",
                message_json("user", &text).as_str(),
            );
        }
    }

    /// A model request starts: its `chat {model}` span.
    pub(crate) fn request_start(&mut self, config: &Config, message: u32) {
        let c = &self.common;
        let span = gen_ai_span!(
            parent: &self.agent,
            "chat",
            otel.name = format!("chat {}", c.model).as_str(),
            otel.kind = "client",
            gen_ai.provider.name = c.provider,
            gen_ai.request.model = c.model.as_str();
            gen_ai.response.id = Empty,
            gen_ai.response.time_to_first_chunk = Empty,
            panto.message = i64::from(message),
            panto.attempts = Empty,
        );
        record_request(&span, config, c);
        self.chat = Some(Chat {
            span,
            message,
            started: Instant::now(),
            first_chunk: false,
            attempts: 1,
            response_model: None,
        });
    }

    /// The model request ended: its span closes, with the error when it failed.
    pub(crate) fn request_end(&mut self, error: Option<&Error>) {
        let Some(chat) = self.chat.take() else {
            return;
        };
        chat.span.record("panto.attempts", i64::from(chat.attempts));
        if let Some(e) = error {
            self.fail(&chat.span, e);
        }
        let model = chat.response_model.as_deref().unwrap_or(&self.common.model);
        self.duration_metric("chat", chat.started, model, error);
    }

    /// How each call of the step about to run is answered (`rust`, `host`, `mcp`,
    /// `refused`, or `skipped` when it has its answer or waits for one).
    pub(crate) fn runners(&mut self, runners: impl IntoIterator<Item = (String, &'static str)>) {
        self.runners.extend(runners);
    }

    /// An event the turn delivers (its secrets already removed).
    pub(crate) fn observe(&mut self, event: &Event) {
        match event {
            Event::ProviderRetry {
                attempt,
                delay_ms,
                reason,
                status,
                ..
            } => {
                if let Some(chat) = &mut self.chat {
                    chat.attempts = *attempt;
                    tracing::event!(
                        target: TARGET,
                        parent: &chat.span,
                        Level::INFO,
                        panto.retry.attempt = i64::from(*attempt),
                        panto.retry.delay_ms = int(*delay_ms),
                        panto.retry.reason = reason.as_str(),
                        http.response.status_code = status.map(i64::from),
                        "retry"
                    );
                }
            }
            Event::MessageStart {
                model, response_id, ..
            } => {
                if let Some(chat) = &mut self.chat {
                    chat.span.record("gen_ai.response.model", model.as_str());
                    if let Some(id) = response_id {
                        chat.span.record("gen_ai.response.id", id.as_str());
                    }
                    chat.response_model = Some(model.clone());
                    self.response_model = Some(model.clone());
                }
            }
            Event::BlockStart { message, .. }
            | Event::ContentDelta { message, .. }
            | Event::ToolDetails { message, .. }
            | Event::BlockComplete { message, .. } => self.first_chunk(*message),
            Event::MessageEnd {
                stop_reason, usage, ..
            } => {
                if let Some(chat) = &self.chat {
                    chat.span.record(
                        "gen_ai.response.finish_reasons",
                        stop_reason.as_string().as_str(),
                    );
                    record_usage(&chat.span, usage);
                    let model = chat.response_model.as_deref().unwrap_or(&self.common.model);
                    self.token_metrics("chat", model, usage);
                }
            }
            Event::ToolCallStart {
                call_id,
                name,
                arguments,
                arguments_raw,
                host,
                ..
            } => {
                let runner = self.runners.get(call_id).copied().unwrap_or(if *host {
                    "host"
                } else {
                    "rust"
                });
                let span = self.tool_span(call_id, name, runner);
                if self.content {
                    let args = match (arguments, arguments_raw) {
                        (Some(v), _) => v.to_string(),
                        (None, Some(raw)) => raw.clone(),
                        (None, None) => String::new(),
                    };
                    span.record(
                        "gen_ai.tool.call.arguments",
                        bounded(&args, &self.secrets).as_str(),
                    );
                }
                self.tools.insert(call_id.clone(), (span, Instant::now()));
            }
            Event::ToolResult {
                call_id,
                name,
                output,
                is_error,
                ..
            } => {
                // A call answered on resume (or never started here) gets its span now.
                let (span, started) = self.tools.remove(call_id).unwrap_or_else(|| {
                    let runner = match self.runners.get(call_id) {
                        Some(&"refused") => "refused",
                        _ => "answered",
                    };
                    (self.tool_span(call_id, name, runner), Instant::now())
                });
                if self.content {
                    span.record(
                        "gen_ai.tool.call.result",
                        bounded(output, &self.secrets).as_str(),
                    );
                }
                if *is_error {
                    span.record("error.type", "tool_error");
                    span.record("otel.status_code", "ERROR");
                    span.record("otel.status_description", "the tool reported a failure");
                }
                self.duration_metric_tool(started, *is_error);
            }
            Event::MessageComplete {
                stop_reason,
                usage,
                messages,
                text,
                deferred,
                ..
            } => {
                let agent = &self.agent;
                agent.record(
                    "gen_ai.response.finish_reasons",
                    stop_reason.as_string().as_str(),
                );
                agent.record("panto.turn.messages", i64::from(*messages));
                record_usage(agent, usage);
                if let Some(model) = &self.response_model {
                    agent.record("gen_ai.response.model", model.as_str());
                }
                if self.content {
                    let text = bounded(text, &self.secrets);
                    agent.record(
                        "gen_ai.output.messages",
                        message_json("assistant", &text).as_str(),
                    );
                }
                if !deferred.is_empty() {
                    agent.record("panto.tool.deferred", int(deferred.len() as u64));
                    for call in deferred {
                        let runner = match call.reason {
                            DeferReason::Approval => "deferred:approval",
                            DeferReason::External => "deferred:external",
                            DeferReason::Deferred => "deferred",
                        };
                        let span = self.tool_span(&call.call_id, &call.name, runner);
                        if self.content {
                            span.record(
                                "gen_ai.tool.call.arguments",
                                bounded(&call.arguments.to_string(), &self.secrets).as_str(),
                            );
                        }
                    }
                }
            }
            _ => {}
        }
    }

    /// The first chunk of the request in flight: the time to it.
    fn first_chunk(&mut self, message: u32) {
        let Some(chat) = &mut self.chat else {
            return;
        };
        if chat.first_chunk || chat.message != message {
            return;
        }
        chat.first_chunk = true;
        let ttfc = secs(chat.started);
        chat.span
            .record("gen_ai.response.time_to_first_chunk", ttfc);
        let c = &self.common;
        tracing::event!(
            target: TARGET,
            parent: None,
            Level::INFO,
            histogram.gen_ai.client.operation.time_to_first_chunk = ttfc,
            gen_ai.operation.name = "chat",
            gen_ai.provider.name = c.provider,
            gen_ai.request.model = c.model.as_str(),
            server.address = c.server_address.as_deref().unwrap_or(""),
            server.port = c.server_port.map(i64::from),
        );
    }

    /// An `execute_tool {tool}` span under the turn's.
    fn tool_span(&self, call_id: &str, name: &str, runner: &str) -> Span {
        tracing::span!(
            target: TARGET,
            parent: &self.agent,
            Level::INFO,
            "execute_tool",
            otel.name = format!("execute_tool {name}").as_str(),
            otel.kind = "internal",
            otel.status_code = Empty,
            otel.status_description = Empty,
            gen_ai.operation.name = "execute_tool",
            gen_ai.provider.name = self.common.provider,
            gen_ai.tool.name = name,
            gen_ai.tool.call.id = call_id,
            gen_ai.tool.type = if runner == "mcp" { "extension" } else { "function" },
            panto.tool.runner = runner,
            gen_ai.tool.call.arguments = Empty,
            gen_ai.tool.call.result = Empty,
            error.type = Empty,
        )
    }

    /// The turn ended: its span closes, with the error when it failed (a cancel is a
    /// failure of kind `cancelled`).
    pub(crate) fn finish(&mut self, error: Option<&Error>) {
        if self.finished {
            return;
        }
        self.finished = true;
        if let Some(e) = error {
            if let Some(chat) = self.chat.take() {
                self.fail(&chat.span, e);
            }
            for (_, (span, _)) in std::mem::take(&mut self.tools) {
                self.fail(&span, e);
            }
            self.fail(&self.agent, e);
        }
    }

    /// A failed span: `error.type` is the error's kind, the status an error with its
    /// message (secrets removed).
    fn fail(&self, span: &Span, e: &Error) {
        span.record("error.type", e.kind.as_str());
        span.record("otel.status_code", "ERROR");
        let message = self.secrets.redact(&e.message);
        span.record(
            "otel.status_description",
            crate::text::truncate(&message, MAX_CONTENT_BYTES),
        );
    }

    fn duration_metric(
        &self,
        operation: &str,
        started: Instant,
        model: &str,
        error: Option<&Error>,
    ) {
        let c = &self.common;
        let d = secs(started);
        let server = c.server_address.as_deref().unwrap_or("");
        let port = c.server_port.map(i64::from);
        match error {
            None => tracing::event!(
                target: TARGET,
                parent: None,
                Level::INFO,
                histogram.gen_ai.client.operation.duration = d,
                gen_ai.operation.name = operation,
                gen_ai.provider.name = c.provider,
                gen_ai.request.model = c.model.as_str(),
                gen_ai.response.model = model,
                server.address = server,
                server.port = port,
            ),
            Some(e) => tracing::event!(
                target: TARGET,
                parent: None,
                Level::INFO,
                histogram.gen_ai.client.operation.duration = d,
                gen_ai.operation.name = operation,
                gen_ai.provider.name = c.provider,
                gen_ai.request.model = c.model.as_str(),
                gen_ai.response.model = model,
                server.address = server,
                server.port = port,
                error.type = e.kind.as_str(),
            ),
        }
    }

    fn duration_metric_tool(&self, started: Instant, is_error: bool) {
        let c = &self.common;
        let d = secs(started);
        if is_error {
            tracing::event!(
                target: TARGET,
                parent: None,
                Level::INFO,
                histogram.gen_ai.client.operation.duration = d,
                gen_ai.operation.name = "execute_tool",
                gen_ai.provider.name = c.provider,
                gen_ai.request.model = c.model.as_str(),
                error.type = "tool_error",
            );
        } else {
            tracing::event!(
                target: TARGET,
                parent: None,
                Level::INFO,
                histogram.gen_ai.client.operation.duration = d,
                gen_ai.operation.name = "execute_tool",
                gen_ai.provider.name = c.provider,
                gen_ai.request.model = c.model.as_str(),
            );
        }
    }

    fn token_metrics(&self, operation: &str, model: &str, usage: &Usage) {
        if !usage.reported {
            return;
        }
        let c = &self.common;
        let server = c.server_address.as_deref().unwrap_or("");
        let port = c.server_port.map(i64::from);
        for (kind, n) in [
            ("input", usage.input_tokens),
            ("output", usage.output_tokens),
        ] {
            tracing::event!(
                target: TARGET,
                parent: None,
                Level::INFO,
                histogram.gen_ai.client.token.usage = n,
                gen_ai.token.type = kind,
                gen_ai.operation.name = operation,
                gen_ai.provider.name = c.provider,
                gen_ai.request.model = c.model.as_str(),
                gen_ai.response.model = model,
                server.address = server,
                server.port = port,
            );
        }
    }
}

impl Drop for TurnTelemetry {
    /// A turn whose future was dropped was cancelled.
    fn drop(&mut self) {
        if !self.finished {
            self.finish(Some(&Error::cancelled()));
        }
    }
}

/// The request parameters that were set, and the server.
fn record_request(span: &Span, config: &Config, c: &Common) {
    if let Some(n) = config.max_tokens {
        span.record("gen_ai.request.max_tokens", i64::from(n));
    }
    if let Some(t) = config.temperature {
        span.record("gen_ai.request.temperature", t);
    }
    if let Some(host) = &c.server_address {
        span.record("server.address", host.as_str());
    }
    if let Some(port) = c.server_port {
        span.record("server.port", i64::from(port));
    }
}

/// The usage attributes (the cache and reasoning counts only when not zero).
fn record_usage(span: &Span, usage: &Usage) {
    if !usage.reported {
        return;
    }
    span.record("gen_ai.usage.input_tokens", int(usage.input_tokens));
    span.record("gen_ai.usage.output_tokens", int(usage.output_tokens));
    if usage.cache_read_tokens > 0 {
        span.record(
            "gen_ai.usage.cache_read.input_tokens",
            int(usage.cache_read_tokens),
        );
    }
    if usage.cache_write_tokens > 0 {
        span.record(
            "gen_ai.usage.cache_creation.input_tokens",
            int(usage.cache_write_tokens),
        );
    }
    if usage.reasoning_tokens > 0 {
        span.record(
            "gen_ai.usage.reasoning.output_tokens",
            int(usage.reasoning_tokens),
        );
    }
}
