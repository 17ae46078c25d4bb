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
            ..
        } => {
            secrets.redact_in_place(call_id);
            secrets.redact_in_place(name);
            secrets.redact_in_place(output);
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

/// The kind of a content block as announced by `block_start`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BlockKind {
    Text,
    /// Reasoning, including redacted reasoning (its `block_complete` content tells them apart).
    Reasoning,
    ToolCall,
}

/// What a `content_delta` fragment extends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeltaKind {
    Text,
    Reasoning,
    ToolArgs,
}

/// One event of a turn. `message` is the 0-based index of the assistant message within
/// the turn; `block` the 0-based index of a block within that message.
///
/// Non-exhaustive: a later version may add an event type, so a `match` keeps a fallback
/// arm that ignores what it does not know.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Event {
    MessageStart {
        message: u32,
        model: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        response_id: Option<String>,
    },
    BlockStart {
        message: u32,
        block: u32,
        kind: BlockKind,
    },
    ContentDelta {
        message: u32,
        block: u32,
        kind: DeltaKind,
        text: String,
    },
    ToolDetails {
        message: u32,
        block: u32,
        call_id: String,
        name: String,
    },
    BlockComplete {
        message: u32,
        block: u32,
        content: Block,
    },
    MessageEnd {
        message: u32,
        stop_reason: StopReason,
        usage: Usage,
    },
    /// Dispatch of one call begins. `arguments` is the parsed arguments object, or
    /// `null` when the model's arguments were not a JSON object; `arguments_raw` then holds
    /// the raw text (the same pair as the call's `tool_call` block).
    ToolCallStart {
        message: u32,
        call_id: String,
        name: String,
        arguments: Option<Value>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        arguments_raw: Option<String>,
        host: bool,
    },
    ToolResult {
        message: u32,
        call_id: String,
        name: String,
        output: String,
        is_error: bool,
    },
    /// A request failed before any of its answer was shown and is tried again after
    /// `delay_ms`. `attempt` is the number of the attempt about to start (2 for the first
    /// retry); `max_attempts` is the most there can be (`1 + retry.max_retries`).
    ProviderRetry {
        message: u32,
        attempt: u32,
        max_attempts: u32,
        delay_ms: u64,
        reason: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        status: Option<u16>,
    },
    /// The history was compacted before the next request (automatic compaction, see
    /// `compaction` in the configuration): `messages_*` count the history's messages,
    /// `tokens_*` its size in tokens (`tokens_before` from the provider's usage when
    /// known, else estimated as bytes / 4; `tokens_after` estimated in the same measure).
    HistoryCompacted {
        messages_before: u64,
        messages_after: u64,
        tokens_before: u64,
        tokens_after: u64,
    },
    /// Terminal: the turn is over. `usage` is the turn total, `messages` the number of
    /// assistant messages, `text` the final assistant message's text.
    MessageComplete {
        stop_reason: StopReason,
        usage: Usage,
        messages: u32,
        text: String,
    },
}

impl Event {
    /// Every event type name, in the order of DESIGN.md; bindings check theirs against it.
    pub const TYPES: [&'static str; 11] = [
        "message_start",
        "block_start",
        "content_delta",
        "tool_details",
        "block_complete",
        "message_end",
        "tool_call_start",
        "tool_result",
        "provider_retry",
        "message_complete",
        "history_compacted",
    ];

    /// The stable numeric code of this event type, as the C ABI reports it
    /// (`PANTO_EV_*`): 1-based, in the order of [`Event::TYPES`], never renumbered.
    pub fn code(&self) -> u32 {
        match self {
            Event::MessageStart { .. } => 1,
            Event::BlockStart { .. } => 2,
            Event::ContentDelta { .. } => 3,
            Event::ToolDetails { .. } => 4,
            Event::BlockComplete { .. } => 5,
            Event::MessageEnd { .. } => 6,
            Event::ToolCallStart { .. } => 7,
            Event::ToolResult { .. } => 8,
            Event::ProviderRetry { .. } => 9,
            Event::MessageComplete { .. } => 10,
            Event::HistoryCompacted { .. } => 11,
        }
    }

    /// The type name of numeric code `code` (see [`Event::code`]).
    pub fn type_name_of_code(code: u32) -> Option<&'static str> {
        (code as usize)
            .checked_sub(1)
            .and_then(|i| Event::TYPES.get(i).copied())
    }

    /// Removes the agent's secrets from every string the event carries.
    pub(crate) fn redact(&mut self, secrets: &Secrets) {
        let fix = |s: &mut String| secrets.redact_in_place(s);
        match self {
            Event::MessageStart {
                model, response_id, ..
            } => {
                fix(model);
                if let Some(r) = response_id {
                    fix(r);
                }
            }
            Event::BlockStart { .. }
            | Event::MessageEnd { .. }
            | Event::HistoryCompacted { .. } => {}
            Event::ContentDelta { text, .. } => fix(text),
            Event::ToolDetails { call_id, name, .. } => {
                fix(call_id);
                fix(name);
            }
            Event::BlockComplete { content, .. } => redact_block(content, secrets),
            Event::ToolCallStart {
                call_id,
                name,
                arguments,
                arguments_raw,
                ..
            } => {
                fix(call_id);
                fix(name);
                if let Some(v) = arguments {
                    redact_value(v, secrets);
                }
                if let Some(r) = arguments_raw {
                    fix(r);
                }
            }
            Event::ToolResult {
                call_id,
                name,
                output,
                ..
            } => {
                fix(call_id);
                fix(name);
                fix(output);
            }
            Event::ProviderRetry { reason, .. } => fix(reason),
            Event::MessageComplete { text, .. } => fix(text),
        }
    }

    /// The canonical `type` name of this event.
    pub fn type_name(&self) -> &'static str {
        match self {
            Event::MessageStart { .. } => "message_start",
            Event::BlockStart { .. } => "block_start",
            Event::ContentDelta { .. } => "content_delta",
            Event::ToolDetails { .. } => "tool_details",
            Event::BlockComplete { .. } => "block_complete",
            Event::MessageEnd { .. } => "message_end",
            Event::ToolCallStart { .. } => "tool_call_start",
            Event::ToolResult { .. } => "tool_result",
            Event::ProviderRetry { .. } => "provider_retry",
            Event::MessageComplete { .. } => "message_complete",
            Event::HistoryCompacted { .. } => "history_compacted",
        }
    }

    /// The canonical JSON of this event (one line, no trailing newline).
    pub fn to_json(&self) -> String {
        // Events hold only strings, integers, booleans and JSON values: infallible.
        serde_json::to_string(self).unwrap_or_default()
    }

    pub fn is_terminal(&self) -> bool {
        matches!(self, Event::MessageComplete { .. })
    }
}

/// Whether the loop should go on after delivering an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Continue,
    /// Stop the turn: the loop cancels what is running, leaves the history valid and
    /// ends with a `cancelled` error.
    Stop,
}

/// The push interface of the agent loop. Implement the methods for the events you care
/// about (all default to no-ops that continue); return [`Flow::Stop`] from any of them to
/// end the turn. [`Receiver::on_event`] receives every event by value first; its default
/// dispatches to the per-event methods, so override it instead when you want to own the
/// events (the pull adapter forwards them into its queue this way).
///
/// ```no_run
/// # use panto::{Event, Flow, Receiver};
/// struct Print;
/// impl Receiver for Print {
///     fn on_content_delta(&mut self, _m: u32, _b: u32, _k: panto::DeltaKind, text: &str) -> Flow {
///         print!("{text}");
///         Flow::Continue
///     }
/// }
/// ```
#[allow(unused_variables)]
pub trait Receiver: Send {
    fn on_event(&mut self, event: Event) -> Flow {
        dispatch(self, &event)
    }
    /// Backpressure. The loop polls this before each read from the network; a receiver
    /// that cannot take more events yet returns `Pending` and wakes `cx` when it can (the
    /// pull adapter does this while its queue is full). The read waits, nothing is lost,
    /// and the time spent waiting here counts against no timeout: a slow consumer slows
    /// the turn, it never fails it. `Ready(Flow::Stop)` ends the turn like `on_event`'s.
    /// The default is always ready.
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Flow> {
        Poll::Ready(Flow::Continue)
    }
    fn on_message_start(&mut self, message: u32, model: &str, response_id: Option<&str>) -> Flow {
        Flow::Continue
    }
    fn on_block_start(&mut self, message: u32, block: u32, kind: BlockKind) -> Flow {
        Flow::Continue
    }
    fn on_content_delta(&mut self, message: u32, block: u32, kind: DeltaKind, text: &str) -> Flow {
        Flow::Continue
    }
    fn on_tool_details(&mut self, message: u32, block: u32, call_id: &str, name: &str) -> Flow {
        Flow::Continue
    }
    fn on_block_complete(&mut self, message: u32, block: u32, content: &Block) -> Flow {
        Flow::Continue
    }
    fn on_message_end(&mut self, message: u32, stop_reason: &StopReason, usage: &Usage) -> Flow {
        Flow::Continue
    }
    fn on_tool_call_start(
        &mut self,
        message: u32,
        call_id: &str,
        name: &str,
        arguments: Option<&Value>,
        host: bool,
    ) -> Flow {
        Flow::Continue
    }
    fn on_tool_result(
        &mut self,
        message: u32,
        call_id: &str,
        name: &str,
        output: &str,
        is_error: bool,
    ) -> Flow {
        Flow::Continue
    }
    fn on_provider_retry(
        &mut self,
        message: u32,
        attempt: u32,
        max_attempts: u32,
        delay_ms: u64,
        reason: &str,
        status: Option<u16>,
    ) -> Flow {
        Flow::Continue
    }
    fn on_message_complete(
        &mut self,
        stop_reason: &StopReason,
        usage: &Usage,
        messages: u32,
        text: &str,
    ) -> Flow {
        Flow::Continue
    }
    fn on_history_compacted(
        &mut self,
        messages_before: u64,
        messages_after: u64,
        tokens_before: u64,
        tokens_after: u64,
    ) -> Flow {
        Flow::Continue
    }
}

fn dispatch<R: Receiver + ?Sized>(r: &mut R, event: &Event) -> Flow {
    match event {
        Event::MessageStart {
            message,
            model,
            response_id,
        } => r.on_message_start(*message, model, response_id.as_deref()),
        Event::BlockStart {
            message,
            block,
            kind,
        } => r.on_block_start(*message, *block, *kind),
        Event::ContentDelta {
            message,
            block,
            kind,
            text,
        } => r.on_content_delta(*message, *block, *kind, text),
        Event::ToolDetails {
            message,
            block,
            call_id,
            name,
        } => r.on_tool_details(*message, *block, call_id, name),
        Event::BlockComplete {
            message,
            block,
            content,
        } => r.on_block_complete(*message, *block, content),
        Event::MessageEnd {
            message,
            stop_reason,
            usage,
        } => r.on_message_end(*message, stop_reason, usage),
        Event::ToolCallStart {
            message,
            call_id,
            name,
            arguments,
            host,
            ..
        } => r.on_tool_call_start(*message, call_id, name, arguments.as_ref(), *host),
        Event::ToolResult {
            message,
            call_id,
            name,
            output,
            is_error,
        } => r.on_tool_result(*message, call_id, name, output, *is_error),
        Event::ProviderRetry {
            message,
            attempt,
            max_attempts,
            delay_ms,
            reason,
            status,
        } => r.on_provider_retry(
            *message,
            *attempt,
            *max_attempts,
            *delay_ms,
            reason,
            *status,
        ),
        Event::MessageComplete {
            stop_reason,
            usage,
            messages,
            text,
        } => r.on_message_complete(stop_reason, usage, *messages, text),
        Event::HistoryCompacted {
            messages_before,
            messages_after,
            tokens_before,
            tokens_after,
        } => r.on_history_compacted(
            *messages_before,
            *messages_after,
            *tokens_before,
            *tokens_after,
        ),
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
                },
                json!({"type":"message_complete","stop_reason":"other:eos2","usage":{
                    "input_tokens":0,"output_tokens":0,"cache_read_tokens":0,
                    "cache_write_tokens":0,"reasoning_tokens":0},"messages":2,"text":"t"}),
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
    fn codes_follow_the_type_list() {
        let ev = Event::ToolResult {
            message: 0,
            call_id: "c".into(),
            name: "n".into(),
            output: "o".into(),
            is_error: false,
        };
        assert_eq!(Event::type_name_of_code(ev.code()), Some(ev.type_name()));
        assert_eq!(Event::type_name_of_code(0), None);
        assert_eq!(Event::type_name_of_code(12), None);
        let compacted = Event::HistoryCompacted {
            messages_before: 0,
            messages_after: 0,
            tokens_before: 0,
            tokens_after: 0,
        };
        assert_eq!(compacted.code(), 11);
        for (i, name) in Event::TYPES.iter().enumerate() {
            assert_eq!(Event::type_name_of_code(i as u32 + 1), Some(*name));
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

    #[test]
    fn default_dispatch_reaches_specific_methods() {
        struct Stopper(usize);
        impl Receiver for Stopper {
            fn on_tool_result(&mut self, _: u32, _: &str, _: &str, _: &str, _: bool) -> Flow {
                self.0 += 1;
                Flow::Stop
            }
        }
        let mut r = Stopper(0);
        let ev = Event::ToolResult {
            message: 0,
            call_id: "c".into(),
            name: "n".into(),
            output: "o".into(),
            is_error: false,
        };
        assert_eq!(r.on_event(ev), Flow::Stop);
        assert_eq!(r.0, 1);
    }
}
