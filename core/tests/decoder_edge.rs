//! Table tests of the Chat Completions and Anthropic Messages decoders on hand-written
//! SSE bodies, one per wire-format edge case real servers produce: tool-call fragments
//! with, without or all on one `index`, empty or null ids on continuations, arguments as
//! a string or an object, usage in its own chunk or never, reasoning under either field
//! name, Mistral's array content, errors inside a 200 stream, a missing `[DONE]` or
//! finish reason; Anthropic pings anywhere, unknown events and blocks, padded JSON,
//! cumulative usage, thinking and redacted thinking, error events. Plus the request
//! bodies those two providers are sent (Gemini's and Responses' are in gemini.rs and
//! responses.rs).
//!
//! Every decoding here also goes through the event-order invariants and must not change
//! when the body arrives one byte at a time.

use panto::provider::{
    request_body, DecodedMessage, Decoder, Progress, ProviderKind, RequestOptions, RequestParams,
    ToolSpec,
};
use panto::sse::SseEvent;
use panto::{Block, BlockKind, Compat, Dialect, ErrorKind, Event, Message, Role, StopReason};
use panto_testkit::decode::sse::{named, unnamed as sse};
use panto_testkit::decode::{check_invariants, decode_checked, decode_message, Outcome};
use panto_testkit::decode::{decode_error as err, decoded as ok};
use serde_json::{json, Value};

const OA: ProviderKind = ProviderKind::OpenAi;
const AN: ProviderKind = ProviderKind::Anthropic;
const DONE: &str = "data: [DONE]\n\n";

// ---------------------------------------------------------------- helpers

/// An OpenAI chunk with one choice-0 delta.
fn delta(d: Value) -> Value {
    json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "gpt-x",
           "choices": [{"index": 0, "delta": d, "finish_reason": null}]})
}

/// An OpenAI chunk carrying tool-call deltas.
fn calls_delta(calls: Value) -> Value {
    delta(json!({"tool_calls": calls}))
}

/// The finishing OpenAI chunk.
fn finish(reason: &str) -> Value {
    json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "gpt-x",
           "choices": [{"index": 0, "delta": {}, "finish_reason": reason}]})
}

/// Decodes `body` whole, checks the invariants, and checks that byte-at-a-time delivery
/// and 5-byte chunks decode identically.
fn run(kind: ProviderKind, body: &str) -> Outcome {
    decode_checked(kind, body, &[1, 5])
}

/// (call_id, name, arguments, arguments_raw) of each tool call, in order.
type Call = (String, String, Option<Value>, Option<String>);

fn calls(m: &DecodedMessage) -> Vec<Call> {
    m.message
        .tool_calls()
        .map(|b| match b {
            Block::ToolCall {
                call_id,
                name,
                arguments,
                arguments_raw,
            } => (
                call_id.clone(),
                name.clone(),
                arguments.clone(),
                arguments_raw.clone(),
            ),
            _ => unreachable!(),
        })
        .collect()
}

fn call(id: &str, name: &str, args: Value) -> Call {
    (id.into(), name.into(), Some(args), None)
}

fn kinds(m: &DecodedMessage) -> Vec<&'static str> {
    m.message
        .content
        .iter()
        .map(|b| match b {
            Block::Text { .. } => "text",
            Block::Reasoning { .. } => "reasoning",
            Block::RedactedReasoning { .. } => "redacted_reasoning",
            Block::ToolCall { .. } => "tool_call",
            Block::ToolResult { .. } => "tool_result",
            Block::Opaque { .. } => "opaque",
            Block::Image(_) => "image",
            Block::Document(_) => "document",
        })
        .collect()
}

fn reasoning(m: &DecodedMessage) -> String {
    m.message
        .content
        .iter()
        .filter_map(|b| match b {
            Block::Reasoning { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

fn count(o: &Outcome, type_name: &str) -> usize {
    o.events
        .iter()
        .filter(|e| e.type_name() == type_name)
        .count()
}

// ------------------------------------------------------ OpenAI-compatible

#[test]
fn openai_plain_text_with_usage_chunk() {
    let body = sse(&[
        delta(json!({"role": "assistant", "content": "", "refusal": null})),
        delta(json!({"content": "Hel"})),
        delta(json!({"content": "lo"})),
        finish("stop"),
        json!({"id": "chatcmpl-1", "model": "gpt-x", "choices": [],
               "usage": {"prompt_tokens": 7, "completion_tokens": 2,
                         "prompt_tokens_details": {"cached_tokens": 3},
                         "completion_tokens_details": {"reasoning_tokens": 1}}}),
    ]) + DONE;
    let o = run(OA, &body);
    let m = ok(&o);
    assert_eq!(m.message.text(), "Hello");
    assert_eq!(m.stop_reason, StopReason::EndTurn);
    assert_eq!((m.usage.input_tokens, m.usage.output_tokens), (7, 2));
    assert_eq!(
        (m.usage.cache_read_tokens, m.usage.reasoning_tokens),
        (3, 1)
    );
    assert_eq!(m.model, "gpt-x");
    assert_eq!(m.response_id.as_deref(), Some("chatcmpl-1"));
    // Empty deltas (`content: ""`) open no block and emit nothing.
    assert_eq!(count(&o, "block_start"), 1);
    assert_eq!(count(&o, "content_delta"), 2);
}

#[test]
fn openai_events_carry_the_message_index() {
    let body = sse(&[delta(json!({"content": "x"})), finish("stop")]) + DONE;
    let o = decode_message(OA, 3, [body.as_bytes()]);
    check_invariants(&o, 3).unwrap();
    assert!(matches!(
        o.events[0],
        Event::MessageStart { message: 3, .. }
    ));
}

#[test]
fn openai_ollama_parallel_calls_all_on_index_0() {
    // Ollama labels every parallel call `index: 0`; distinct ids mean distinct calls.
    let body = sse(&[
        calls_delta(json!([{"index": 0, "id": "call_a", "type": "function",
                            "function": {"name": "weather", "arguments": "{\"city\":\"Paris\"}"}}])),
        calls_delta(json!([{"index": 0, "id": "call_b", "type": "function",
                            "function": {"name": "time", "arguments": "{\"tz\":\"CET\"}"}}])),
        finish("tool_calls"),
    ]) + DONE;
    let m = run(OA, &body);
    let m = ok(&m);
    assert_eq!(
        calls(m),
        vec![
            call("call_a", "weather", json!({"city": "Paris"})),
            call("call_b", "time", json!({"tz": "CET"})),
        ]
    );
    assert_eq!(m.stop_reason, StopReason::ToolUse);
}

#[test]
fn openai_tool_call_deltas_without_index() {
    // Gemini's OpenAI layer and some proxies omit `index`: an id opens a call, id-less
    // fragments continue the latest one.
    let body = sse(&[
        calls_delta(
            json!([{"id": "c1", "type": "function", "function": {"name": "f", "arguments": ""}}]),
        ),
        calls_delta(json!([{"function": {"arguments": "{\"a\""}}])),
        calls_delta(json!([{"function": {"arguments": ":1}"}}])),
        calls_delta(json!([{"id": "c2", "function": {"name": "g", "arguments": "{}"}}])),
        calls_delta(json!([{"id": "c2", "function": {"arguments": ""}}])),
        finish("tool_calls"),
    ]) + DONE;
    let o = run(OA, &body);
    assert_eq!(
        calls(ok(&o)),
        vec![call("c1", "f", json!({"a": 1})), call("c2", "g", json!({}))]
    );
}

#[test]
fn openai_empty_and_null_ids_on_continuations() {
    // Qwen/DashScope repeat `"id":""` and `type`; Together sends `"id":null,"name":null`.
    let body = sse(&[
        calls_delta(json!([{"index": 0, "id": "c1", "type": "function",
                            "function": {"name": "f", "arguments": ""}}])),
        calls_delta(json!([{"index": 0, "id": "", "type": "function",
                            "function": {"name": "", "arguments": "{\"a\":"}}])),
        calls_delta(json!([{"index": 0, "id": null, "type": null,
                            "function": {"name": null, "arguments": "2}"}}])),
        calls_delta(json!([{"index": 0, "function": {"arguments": null}}])),
        finish("tool_calls"),
    ]) + DONE;
    let o = run(OA, &body);
    assert_eq!(calls(ok(&o)), vec![call("c1", "f", json!({"a": 2}))]);
    assert_eq!(count(&o, "tool_details"), 1);
}

#[test]
fn openai_tool_call_id_and_name_in_separate_fragments_or_never() {
    // The id first and the name later: tool_details waits until both are known.
    let body = sse(&[
        calls_delta(json!([{"index": 0, "id": "c1", "type": "function"}])),
        calls_delta(json!([{"index": 0, "function": {"name": "f"}}])),
        calls_delta(json!([{"index": 0, "function": {"arguments": "{}"}}])),
        finish("tool_calls"),
    ]) + DONE;
    let o = run(OA, &body);
    assert_eq!(calls(ok(&o)), vec![call("c1", "f", json!({}))]);
    let details = o
        .events
        .iter()
        .position(|e| e.type_name() == "tool_details")
        .unwrap();
    assert!(matches!(&o.events[details - 1], Event::BlockStart { .. }));
    // A server that never sends an id: panto makes one up, unique within the turn.
    let body = sse(&[
        calls_delta(json!([{"index": 0, "function": {"name": "f", "arguments": "{}"}}])),
        calls_delta(json!([{"index": 1, "function": {"name": "g", "arguments": "{}"}}])),
        finish("tool_calls"),
    ]) + DONE;
    let o = decode_message(OA, 2, [body.as_bytes()]);
    check_invariants(&o, 2).unwrap();
    let ids: Vec<String> = calls(ok(&o)).into_iter().map(|c| c.0).collect();
    assert_eq!(ids.len(), 2);
    assert_ne!(ids[0], ids[1]);
}

#[test]
fn openai_interleaved_parallel_calls_by_index() {
    let body = sse(&[
        calls_delta(json!([{"index": 0, "id": "c0", "function": {"name": "f", "arguments": ""}}])),
        calls_delta(
            json!([{"index": 1, "id": "c1", "function": {"name": "g", "arguments": "{\"y\""}}]),
        ),
        calls_delta(json!([{"index": 0, "function": {"arguments": "{\"x\":1}"}}])),
        calls_delta(json!([{"index": 1, "function": {"arguments": ":2}"}}])),
        finish("tool_calls"),
    ]) + DONE;
    let o = run(OA, &body);
    assert_eq!(
        calls(ok(&o)),
        vec![
            call("c0", "f", json!({"x": 1})),
            call("c1", "g", json!({"y": 2}))
        ]
    );
}

#[test]
fn openai_arguments_forms() {
    // (what `function.arguments` carries across fragments, expected arguments / raw)
    let cases: Vec<(Vec<Value>, Option<Value>, Option<&str>)> = vec![
        // Object-valued arguments (some gateways) are taken as JSON.
        (
            vec![json!({"a": [1, 2], "b": {"c": null}})],
            Some(json!({"a": [1, 2], "b": {"c": null}})),
            None,
        ),
        // No-argument tools: "" and an absent field both mean {}.
        (vec![json!("")], Some(json!({})), None),
        (vec![], Some(json!({})), None),
        (vec![json!(""), json!("  ")], Some(json!({})), None),
        // Whitespace and unicode survive.
        (
            vec![json!("{ \"s\" :"), json!(" \"é✓\" }")],
            Some(json!({"s": "é✓"})),
            None,
        ),
        // Not JSON at the end: kept raw, not parsed.
        (vec![json!("{\"a\":"), json!(" 1")], None, Some("{\"a\": 1")),
        (vec![json!("not json")], None, Some("not json")),
    ];
    for (fragments, want_args, want_raw) in cases {
        let mut chunks = vec![calls_delta(
            json!([{"index": 0, "id": "c1", "function": {"name": "f"}}]),
        )];
        for f in &fragments {
            chunks.push(calls_delta(
                json!([{"index": 0, "function": {"arguments": f}}]),
            ));
        }
        chunks.push(finish("tool_calls"));
        let o = run(OA, &(sse(&chunks) + DONE));
        let got = calls(ok(&o));
        assert_eq!(
            got,
            vec![(
                "c1".into(),
                "f".into(),
                want_args.clone(),
                want_raw.map(str::to_owned)
            )],
            "fragments {fragments:?}"
        );
    }
}

#[test]
fn openai_whole_call_and_finish_in_one_chunk() {
    // ZhiPu GLM puts the tool call and finish_reason in the same chunk.
    let chunk = json!({"id": "x", "model": "glm-4", "choices": [{"index": 0,
        "delta": {"role": "assistant", "tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                  "function": {"name": "f", "arguments": "{\"q\":\"x\"}"}}]},
        "finish_reason": "tool_calls"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 9}});
    let o = run(OA, &(sse(&[chunk]) + DONE));
    let m = ok(&o);
    assert_eq!(calls(m), vec![call("call_1", "f", json!({"q": "x"}))]);
    assert_eq!(m.stop_reason, StopReason::ToolUse);
    assert_eq!(m.usage.output_tokens, 9);
}

#[test]
fn openai_empty_string_finish_reason_is_not_a_finish() {
    // Ollama (#4357), SGLang (#3912) and some gateways send `"finish_reason": ""` on every
    // intermediate chunk.
    let mid = |d: Value| json!({"id": "x", "model": "m", "choices": [{"index": 0, "delta": d, "finish_reason": ""}]});
    let body = sse(&[
        mid(json!({"content": "Hi "})),
        mid(
            json!({"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "f", "arguments": "{\"a\""}}]}),
        ),
        mid(json!({"tool_calls": [{"index": 0, "function": {"arguments": ":1}"}}]})),
        finish("tool_calls"),
    ]) + DONE;
    let o = run(OA, &body);
    let m = ok(&o);
    assert_eq!(m.message.text(), "Hi ");
    assert_eq!(calls(m), vec![call("c1", "f", json!({"a": 1}))]);
    assert_eq!(m.stop_reason, StopReason::ToolUse);
}

#[test]
fn openai_usage_chunk_shapes() {
    let usage = json!({"prompt_tokens": 11, "completion_tokens": 4});
    let shapes = [
        json!({"id": "x", "choices": [], "usage": usage}),
        json!({"id": "x", "choices": null, "usage": usage}),
        json!({"id": "x", "usage": usage}),
        // DeepSeek's cache field name.
        json!({"usage": {"prompt_tokens": 11, "completion_tokens": 4, "prompt_cache_hit_tokens": 6}}),
    ];
    for shape in shapes {
        let body = sse(&[
            delta(json!({"content": "a"})),
            finish("stop"),
            shape.clone(),
        ]) + DONE;
        let o = run(OA, &body);
        let m = ok(&o);
        assert_eq!(
            (m.usage.input_tokens, m.usage.output_tokens),
            (11, 4),
            "{shape}"
        );
        assert_eq!(m.message.text(), "a");
    }
    // vLLM with continuous usage stats: usage on every chunk, the last one wins; a later
    // `usage: null` (gpt-5 moderation chunk) does not wipe it.
    let body = sse(&[
        json!({"choices": [{"index": 0, "delta": {"content": "a"}}], "usage": {"prompt_tokens": 3, "completion_tokens": 1}}),
        json!({"choices": [{"index": 0, "delta": {"content": "b"}}], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}),
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": {"prompt_tokens": 3, "completion_tokens": 3}}),
        json!({"choices": [], "usage": null, "moderation": {"flagged": false}}),
    ]) + DONE;
    let o = run(OA, &body);
    assert_eq!(ok(&o).usage.output_tokens, 3);
}

/// The `usage` of the message and of its `message_end` event.
fn usages(o: &Outcome) -> (panto::Usage, panto::Usage) {
    let end = o
        .events
        .iter()
        .find_map(|e| match e {
            Event::MessageEnd { usage, .. } => Some(*usage),
            _ => None,
        })
        .expect("a message_end");
    (ok(o).usage, end)
}

#[test]
fn openai_usage_not_sent_is_unknown_and_a_zero_report_is_a_real_zero() {
    // llama.cpp: no usage chunk at all, even when asked with stream_options; or usage
    // null on every chunk.
    for body in [
        sse(&[delta(json!({"content": "a"})), finish("stop")]) + DONE,
        sse(&[
            json!({"choices": [{"index": 0, "delta": {"content": "a"}}], "usage": null}),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": null}),
        ]) + DONE,
        // An empty report counts nothing.
        sse(&[
            delta(json!({"content": "a"})),
            finish("stop"),
            json!({"choices": [], "usage": {}}),
        ]) + DONE,
    ] {
        let o = run(OA, &body);
        let (m, end) = usages(&o);
        assert_eq!(m, panto::Usage::default(), "{body}");
        assert!(!m.reported && !end.reported, "{body}");
        assert_eq!(end, m);
    }
    // A server that counted zero: reported, and 0.
    let body = sse(&[
        delta(json!({"content": "a"})),
        finish("stop"),
        json!({"choices": [], "usage": {"prompt_tokens": 0, "completion_tokens": 0}}),
    ]) + DONE;
    let o = run(OA, &body);
    let (m, end) = usages(&o);
    assert!(m.reported && end.reported);
    assert_eq!((m.input_tokens, m.output_tokens), (0, 0));
    assert_eq!(end, m);
    // The usual report is reported too.
    let body = sse(&[
        delta(json!({"content": "a"})),
        finish("stop"),
        json!({"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 2}}),
    ]) + DONE;
    assert!(ok(&run(OA, &body)).usage.reported);
}

#[test]
fn openai_missing_delta_and_missing_finish_reason_key() {
    let body = sse(&[
        // Azure's first chunk: no choices content, empty id/model, prompt filter results.
        json!({"id": "", "model": "", "object": "", "choices": [], "prompt_filter_results": []}),
        // xAI: no finish_reason key at all on intermediate chunks.
        json!({"id": "r1", "model": "grok", "choices": [{"index": 0, "delta": {"content": "ok"}}]}),
        // A choice without `delta`.
        json!({"id": "r1", "model": "grok", "choices": [{"index": 0, "finish_reason": "stop"}]}),
        // Azure's content_filter_offsets chunk after the finish: no delta key.
        json!({"id": "r1", "model": "grok", "choices": [{"index": 0, "finish_reason": null,
               "content_filter_offsets": {"check_offset": 0}}]}),
    ]) + DONE;
    let o = run(OA, &body);
    let m = ok(&o);
    assert_eq!(m.message.text(), "ok");
    assert_eq!(m.stop_reason, StopReason::EndTurn);
    // The first non-empty id and model are kept.
    assert_eq!(m.model, "grok");
    assert_eq!(m.response_id.as_deref(), Some("r1"));
}

#[test]
fn openai_reasoning_fields() {
    for field in ["reasoning_content", "reasoning"] {
        let body = sse(&[
            delta(json!({field: "think "})),
            delta(json!({field: "more", "content": null})),
            delta(json!({"content": "answer", field: null})),
            finish("stop"),
        ]) + DONE;
        let o = run(OA, &body);
        let m = ok(&o);
        assert_eq!(kinds(m), ["reasoning", "text"], "{field}");
        assert_eq!(reasoning(m), "think more");
        assert_eq!(m.message.text(), "answer");
    }
}

#[test]
fn openai_reasoning_and_content_in_one_chunk_are_two_blocks() {
    let body = sse(&[
        delta(json!({"reasoning_content": "hmm", "content": "Hi", "tool_calls": []})),
        delta(json!({"content": "!"})),
        finish("stop"),
    ]) + DONE;
    let o = run(OA, &body);
    let m = ok(&o);
    assert_eq!(
        m.message.content,
        vec![
            Block::Reasoning {
                text: "hmm".into(),
                signature: None
            },
            Block::text("Hi!"),
        ]
    );
    // The reasoning block closes as soon as text starts.
    let complete_0 = o
        .events
        .iter()
        .position(|e| matches!(e, Event::BlockComplete { block: 0, .. }))
        .unwrap();
    let start_1 = o
        .events
        .iter()
        .position(|e| matches!(e, Event::BlockStart { block: 1, .. }))
        .unwrap();
    assert!(complete_0 < start_1);
}

#[test]
fn openai_mistral_array_content() {
    let body = sse(&[
        delta(
            json!({"content": [{"type": "thinking", "thinking": [{"type": "text", "text": "Okay"}]}]}),
        ),
        delta(
            json!({"content": [{"type": "thinking", "thinking": [{"type": "text", "text": ", so"}]}]}),
        ),
        delta(
            json!({"content": [{"type": "text", "text": "Yes"}, {"type": "image_url", "image_url": "x"}]}),
        ),
        delta(json!({"content": "."})),
        finish("stop"),
    ]) + DONE;
    let o = run(OA, &body);
    let m = ok(&o);
    assert_eq!(kinds(m), ["reasoning", "text"]);
    assert_eq!(reasoning(m), "Okay, so");
    assert_eq!(m.message.text(), "Yes.");
}

#[test]
fn openai_refusal_streams_as_text() {
    let body = sse(&[
        delta(json!({"role": "assistant", "content": null, "refusal": ""})),
        delta(json!({"refusal": "I can't"})),
        delta(json!({"refusal": " help."})),
        finish("stop"),
    ]) + DONE;
    let o = run(OA, &body);
    let m = ok(&o);
    assert_eq!(m.message.text(), "I can't help.");
    assert_eq!(m.stop_reason, StopReason::Refusal);
}

#[test]
fn openai_finish_reason_mapping() {
    let table = [
        ("stop", StopReason::EndTurn),
        ("tool_calls", StopReason::ToolUse),
        ("function_call", StopReason::ToolUse),
        ("length", StopReason::MaxTokens),
        ("content_filter", StopReason::ContentFilter),
        ("eos", StopReason::EndTurn),
        (
            "insufficient_system_resource",
            StopReason::Other("insufficient_system_resource".into()),
        ),
    ];
    for (raw, want) in table {
        let body = sse(&[delta(json!({"content": "x"})), finish(raw)]) + DONE;
        assert_eq!(ok(&run(OA, &body)).stop_reason, want, "{raw}");
    }
}

#[test]
fn openai_done_without_finish_reason_infers_the_stop() {
    // OpenRouter/kimi-k2: `[DONE]` and never a finish_reason.
    let text_only = sse(&[delta(json!({"content": "x"}))]) + DONE;
    assert_eq!(ok(&run(OA, &text_only)).stop_reason, StopReason::EndTurn);
    let with_call = sse(&[
        delta(json!({"content": ""})),
        calls_delta(json!([{"index": 0, "id": "0", "function": {"name": "f", "arguments": ""}}])),
        calls_delta(json!([{"index": 0, "id": "0", "function": {"name": "f", "arguments": "{}"}}])),
    ]) + DONE;
    let o = run(OA, &with_call);
    let m = ok(&o);
    assert_eq!(m.stop_reason, StopReason::ToolUse);
    // A repeated id and name are not appended (the SDK makes "00" / "ff").
    assert_eq!(calls(m), vec![call("0", "f", json!({}))]);
    assert!(m.cut_off_calls.is_empty());
    // `[DONE]` on an empty response: an empty message, ended normally.
    let o = run(OA, DONE);
    assert_eq!(ok(&o).message.content, vec![]);
    assert_eq!(count(&o, "message_start"), 1);
}

#[test]
fn openai_length_cuts_off_the_last_tool_call() {
    let body = sse(&[
        calls_delta(
            json!([{"index": 0, "id": "c0", "function": {"name": "f", "arguments": "{}"}}]),
        ),
        calls_delta(
            json!([{"index": 1, "id": "c1", "function": {"name": "g", "arguments": "{\"long\": \"tex"}}]),
        ),
        finish("length"),
    ]) + DONE;
    let o = run(OA, &body);
    let m = ok(&o);
    assert_eq!(m.stop_reason, StopReason::MaxTokens);
    assert_eq!(m.cut_off_calls, vec!["c1".to_owned()]);
    assert_eq!(calls(m)[1].3.as_deref(), Some("{\"long\": \"tex"));
}

#[test]
fn openai_second_choice_is_ignored() {
    let body = sse(&[
        json!({"choices": [{"index": 0, "delta": {"content": "A"}}, {"index": 1, "delta": {"content": "B"}}]}),
        json!({"choices": [{"index": 1, "delta": {"content": "B2"}, "finish_reason": "stop"}]}),
        json!({"choices": [{"index": 0, "delta": {"content": "A2"}, "finish_reason": "stop"}]}),
    ]) + DONE;
    assert_eq!(ok(&run(OA, &body)).message.text(), "AA2");
}

#[test]
fn openai_keep_alive_comments_and_unknown_fields() {
    let body = format!(
        ": OPENROUTER PROCESSING\n\n: keep-alive\n\n{}",
        sse(&[
            json!({"id": "x", "obfuscation": "abc", "timings": {"n": 1}, "system_fingerprint": null,
                   "choices": [{"index": 0, "delta": {"content": "a", "audio": null}, "logprobs": null,
                                "content_filter_results": {}}]}),
            finish("stop"),
        ]) + DONE
    );
    assert_eq!(ok(&run(OA, &body)).message.text(), "a");
}

#[test]
fn openai_stream_errors() {
    let data_error = json!({"error": {"message": "The server had an error", "type": "server_error", "code": null}});
    let cases: Vec<(String, Option<&str>, bool)> = vec![
        // In-band error object, with and without a following [DONE].
        (sse(&[delta(json!({"content": "part"})), data_error.clone()]) + DONE, Some("server_error"), true),
        (sse(&[delta(json!({"content": "part"})), data_error.clone()]), Some("server_error"), true),
        // As the very first event.
        (sse(&[data_error]), Some("server_error"), true),
        // OpenRouter: an error next to a normal-looking chunk, numeric code.
        (
            sse(&[delta(json!({"content": "a"})),
                  json!({"id": "g", "error": {"code": 400, "message": "Token limit reached"},
                         "choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": null}]})]) + DONE,
            Some("400"),
            false,
        ),
        // Groq: `event: error`.
        (
            sse(&[delta(json!({"reasoning": "hm"}))])
                + "event: error\ndata: {\"error\":{\"message\":\"Tool call validation failed\",\"type\":\"invalid_request_error\",\"code\":\"tool_use_failed\"}}\n\n",
            Some("tool_use_failed"),
            false,
        ),
        // An error after finish_reason but before [DONE] still fails the stream.
        (
            sse(&[delta(json!({"content": "a"})), finish("length"),
                  json!({"error": {"message": "quota", "type": "insufficient_quota"}})]) + DONE,
            Some("insufficient_quota"),
            false,
        ),
    ];
    for (body, code, retryable) in cases {
        let o = run(OA, &body);
        let e = err(&o);
        assert_eq!(e.kind, ErrorKind::Provider, "{body}");
        assert_eq!(e.provider_code.as_deref(), code, "{body}");
        assert_eq!(e.retryable, retryable, "{body}");
        assert_eq!(count(&o, "message_end"), 0);
    }
    // `"error": null` is not an error.
    let body = sse(&[
        json!({"error": null, "choices": [{"index": 0, "delta": {"content": "a"}, "finish_reason": "stop"}]}),
    ]) + DONE;
    assert_eq!(ok(&run(OA, &body)).message.text(), "a");
}

#[test]
fn openai_end_of_stream_rules() {
    // EOF without finish_reason and without [DONE]: the response was cut short.
    let o = run(OA, &sse(&[delta(json!({"content": "par"}))]));
    assert_eq!(err(&o).kind, ErrorKind::Incomplete);
    // Even with a complete-looking tool call.
    let body = sse(&[calls_delta(
        json!([{"index": 0, "id": "c", "function": {"name": "f", "arguments": "{}"}}]),
    )]);
    assert_eq!(err(&run(OA, &body)).kind, ErrorKind::Incomplete);
    // Nothing at all.
    assert_eq!(err(&run(OA, "")).kind, ErrorKind::Incomplete);
    assert_eq!(
        err(&run(OA, ": keep-alive\n\n")).kind,
        ErrorKind::Incomplete
    );
    // A final event without its blank line is discarded, so this is cut short too.
    let body = format!("{}data: [DONE]", sse(&[delta(json!({"content": "a"}))]));
    assert_eq!(err(&run(OA, &body)).kind, ErrorKind::Incomplete);
    // finish_reason, then EOF without [DONE] (llama-box): complete.
    let o = run(OA, &sse(&[delta(json!({"content": "a"})), finish("stop")]));
    assert_eq!(ok(&o).stop_reason, StopReason::EndTurn);
    // [DONE] with trailing junk in the same data (openai-python checks the prefix).
    assert!(run(OA, &(sse(&[finish("stop")]) + "data: [DONE] \n\n"))
        .result
        .is_ok());
}

#[test]
fn openai_after_done_everything_is_ignored() {
    let body = sse(&[delta(json!({"content": "a"})), finish("stop")])
        + DONE
        + "data: {not json\n\ndata: {\"error\":{\"message\":\"late\"}}\n\nevent: error\ndata: x\n\n";
    let o = run(OA, &body);
    assert_eq!(ok(&o).message.text(), "a");
    // The decoder itself ignores events after [DONE], not only the reader.
    let mut d = Decoder::new(OA, 0);
    let emitted = std::sync::atomic::AtomicUsize::new(0);
    let mut emit = |_: Event| {
        emitted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    };
    let ev = |data: &'static str| SseEvent {
        event: "message",
        data,
        id: "",
    };
    assert_eq!(
        d.on_sse(&ev("[DONE]"), &mut emit).unwrap(),
        Progress::Finished
    );
    let n = emitted.load(std::sync::atomic::Ordering::Relaxed);
    let garbage = [
        ev("{not json"),
        ev("{\"error\":{}}"),
        SseEvent {
            event: "error",
            data: "x",
            id: "",
        },
    ];
    for g in garbage {
        assert_eq!(d.on_sse(&g, &mut emit).unwrap(), Progress::Finished);
    }
    d.on_eof(&mut emit).unwrap();
    assert_eq!(emitted.load(std::sync::atomic::Ordering::Relaxed), n);
    assert!(d.is_finished());
}

#[test]
fn openai_malformed_data_is_a_protocol_error() {
    for bad in [
        "data: {\"choices\": [\n\n",
        "data: not json\n\n",
        "data: {\"choices\": [{\"index\": 0, \"delta\": {\"tool_calls\": {\"index\": 0}}}]}\n\n",
        "data: {\"choices\": \"nope\"}\n\n",
    ] {
        let o = run(OA, bad);
        assert_eq!(err(&o).kind, ErrorKind::Protocol, "{bad}");
    }
    // A lone surrogate is not malformed enough to lose the answer: it decodes as U+FFFD.
    let lone = "data: {\"choices\": [{\"index\": 0, \"delta\": {\"tool_calls\": [{\"index\": 0, \"id\": \"c\", \"function\": {\"name\": \"f\", \"arguments\": \"\\ud800\"}}]}}]}\n\n"
        .to_owned()
        + DONE;
    let o = run(OA, &lone);
    assert_eq!(calls(ok(&o))[0].3.as_deref(), Some("\u{FFFD}"));
}

// --------------------------------------------------------------- Anthropic

fn msg_start() -> Value {
    json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
        "model": "claude-x", "content": [], "stop_reason": null, "stop_sequence": null,
        "usage": {"input_tokens": 10, "output_tokens": 1, "cache_read_input_tokens": 4,
                  "cache_creation_input_tokens": 2}}})
}
fn block_start(index: usize, block: Value) -> Value {
    json!({"type": "content_block_start", "index": index, "content_block": block})
}
fn text_start(index: usize) -> Value {
    block_start(index, json!({"type": "text", "text": ""}))
}
fn block_delta(index: usize, d: Value) -> Value {
    json!({"type": "content_block_delta", "index": index, "delta": d})
}
fn text_delta(index: usize, t: &str) -> Value {
    block_delta(index, json!({"type": "text_delta", "text": t}))
}
fn json_delta(index: usize, t: &str) -> Value {
    block_delta(
        index,
        json!({"type": "input_json_delta", "partial_json": t}),
    )
}
fn block_stop(index: usize) -> Value {
    json!({"type": "content_block_stop", "index": index})
}
fn msg_delta(reason: &str, output_tokens: u64) -> Value {
    json!({"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": null},
           "usage": {"output_tokens": output_tokens}})
}
fn msg_stop() -> Value {
    json!({"type": "message_stop"})
}
fn ping() -> Value {
    json!({"type": "ping"})
}
fn tool_start(index: usize, id: &str, name: &str) -> Value {
    block_start(
        index,
        json!({"type": "tool_use", "id": id, "name": name, "input": {}}),
    )
}

#[test]
fn anthropic_full_flow_with_pings_anywhere() {
    let body = named(&[
        ping(),
        msg_start(),
        ping(),
        text_start(0),
        ping(),
        text_delta(0, "Let me "),
        ping(),
        text_delta(0, "check."),
        block_stop(0),
        ping(),
        tool_start(1, "toolu_1", "weather"),
        json_delta(1, ""),
        json_delta(1, "{\"city\": "),
        ping(),
        json_delta(1, "\"Paris\"}"),
        block_stop(1),
        msg_delta("tool_use", 30),
        ping(),
        msg_stop(),
    ]);
    let o = run(AN, &body);
    let m = ok(&o);
    assert_eq!(m.message.text(), "Let me check.");
    assert_eq!(
        calls(m),
        vec![call("toolu_1", "weather", json!({"city": "Paris"}))]
    );
    assert_eq!(m.stop_reason, StopReason::ToolUse);
    assert_eq!(m.model, "claude-x");
    assert_eq!(m.response_id.as_deref(), Some("msg_1"));
    assert_eq!(
        (
            m.usage.input_tokens,
            m.usage.output_tokens,
            m.usage.cache_read_tokens,
            m.usage.cache_write_tokens
        ),
        (10, 30, 4, 2)
    );
    // tool_details comes right after the tool_call block_start (id and name are known).
    let start = o
        .events
        .iter()
        .position(|e| matches!(e, Event::BlockStart { block: 1, .. }))
        .unwrap();
    assert!(
        matches!(&o.events[start + 1], Event::ToolDetails { call_id, .. } if call_id == "toolu_1")
    );
}

#[test]
fn anthropic_unknown_events_and_deltas_are_ignored_and_unknown_blocks_kept_verbatim() {
    let body = named(&[
        msg_start(),
        json!({"type": "brand_new_event", "payload": {"x": 1}}),
        block_start(
            0,
            json!({"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}}),
        ),
        json_delta(0, "{\"query\": \"x\"}"),
        block_stop(0),
        block_start(
            1,
            json!({"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []}),
        ),
        block_stop(1),
        block_start(2, json!({"type": "fancy_future_block", "stuff": true})),
        block_delta(2, json!({"type": "fancy_delta", "x": "y"})),
        block_stop(2),
        text_start(3),
        text_delta(3, "A"),
        block_delta(
            3,
            json!({"type": "citations_delta", "citation": {"type": "web_search_result_location", "url": "u"}}),
        ),
        block_delta(3, json!({"type": "unknown_delta", "text": "IGNORED"})),
        text_delta(3, "B"),
        block_stop(3),
        msg_delta("end_turn", 5),
        msg_stop(),
    ]);
    let o = run(AN, &body);
    let m = ok(&o);
    // Blocks panto does not model are kept verbatim (streamed tool input applied) for
    // re-sending, in their place; citations and unknown deltas are dropped.
    let opaque = |block: Value| Block::Opaque {
        provider: "anthropic".into(),
        block,
    };
    assert_eq!(
        m.message.content,
        vec![
            opaque(
                json!({"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "x"}})
            ),
            opaque(
                json!({"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []})
            ),
            opaque(json!({"type": "fancy_future_block", "stuff": true})),
            Block::text("AB"),
        ]
    );
    // Provider blocks take no panto block index and get no events.
    assert!(matches!(
        o.events[1],
        Event::BlockStart {
            block: 0,
            kind: BlockKind::Text,
            ..
        }
    ));
}

#[test]
fn anthropic_events_without_event_lines() {
    // Some proxies drop the `event:` line: dispatch is on the JSON type.
    let body = sse(&[
        msg_start(),
        text_start(0),
        text_delta(0, "hi"),
        block_stop(0),
        msg_delta("end_turn", 2),
        msg_stop(),
    ]);
    let o = run(AN, &body);
    assert_eq!(ok(&o).message.text(), "hi");
    // A mismatched event name does not matter either (only `error` is special).
    let body = sse(&[msg_start()])
        + "event: ping\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"
        + &named(&[text_delta(0, "x"), block_stop(0), msg_delta("end_turn", 1), msg_stop()]);
    assert_eq!(ok(&run(AN, &body)).message.text(), "x");
}

#[test]
fn anthropic_padded_json() {
    let body = named(&[msg_start(), text_start(0)])
        + "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"x\"}}        \n\n"
        + "event: ping\ndata: {\"type\": \"ping\"}\n\n"
        + &named(&[block_stop(0), msg_delta("end_turn", 1), msg_stop()]);
    assert_eq!(ok(&run(AN, &body)).message.text(), "x");
}

#[test]
fn anthropic_duplicate_message_start() {
    let mut second = msg_start();
    second["message"]["id"] = json!("msg_2");
    // Before any block and after one: either way one message_start event, no failure.
    for at in [1, 3] {
        let mut events = vec![
            msg_start(),
            text_start(0),
            text_delta(0, "a"),
            block_stop(0),
            msg_delta("end_turn", 3),
            msg_stop(),
        ];
        events.insert(at, second.clone());
        let o = run(AN, &named(&events));
        let m = ok(&o);
        assert_eq!(m.message.text(), "a");
        assert_eq!(count(&o, "message_start"), 1);
        assert_eq!(m.usage.output_tokens, 3);
        // Once message_start was emitted, its response id is not changed afterwards.
        let Event::MessageStart { response_id, .. } = &o.events[0] else {
            unreachable!()
        };
        assert_eq!(response_id, &m.response_id);
    }
}

#[test]
fn anthropic_tool_use_clipped_by_max_tokens() {
    let body = named(&[
        msg_start(),
        text_start(0),
        text_delta(0, "Calling."),
        block_stop(0),
        tool_start(1, "toolu_9", "write_file"),
        json_delta(1, "{\"path\": \"a.txt\", \"content\": \"lo"),
        json_delta(1, "rem ipsum"),
        // No content_block_stop.
        msg_delta("max_tokens", 4096),
        msg_stop(),
    ]);
    let o = run(AN, &body);
    let m = ok(&o);
    assert_eq!(m.stop_reason, StopReason::MaxTokens);
    assert_eq!(m.cut_off_calls, vec!["toolu_9".to_owned()]);
    assert_eq!(
        calls(m),
        vec![(
            "toolu_9".into(),
            "write_file".into(),
            None,
            Some("{\"path\": \"a.txt\", \"content\": \"lorem ipsum".into())
        )]
    );
    // The synthesized block_complete comes before message_end.
    let n = o.events.len();
    assert!(matches!(
        o.events[n - 2],
        Event::BlockComplete { block: 1, .. }
    ));
}

#[test]
fn anthropic_error_events() {
    let overloaded =
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}});
    // Before any content, and after deltas: both a provider error, retryable.
    for body in [
        named(&[msg_start(), overloaded.clone()]),
        named(&[msg_start(), ping(), text_start(0), text_delta(0, "par"), overloaded.clone()]),
        // Without the event line: dispatched on the JSON type.
        sse(&[msg_start(), overloaded.clone()]),
        // A proxy's error body without `"type":"error"`, or not JSON at all.
        named(&[msg_start()]) + "event: error\ndata: {\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n",
    ] {
        let o = run(AN, &body);
        let e = err(&o);
        assert_eq!(e.kind, ErrorKind::Provider, "{body}");
        assert!(e.retryable, "{body}");
        assert_eq!(e.provider_code.as_deref(), Some("overloaded_error"), "{body}");
        assert!(e.message.contains("Overloaded"), "{}", e.message);
    }
    let body = named(&[msg_start()]) + "event: error\ndata: upstream exploded\n\n";
    let e = err(&run(AN, &body)).clone();
    assert_eq!(e.kind, ErrorKind::Provider);
    assert!(e.message.contains("upstream exploded"));
    // An invalid_request_error is not retryable.
    let body = named(&[
        json!({"type": "error", "error": {"type": "invalid_request_error", "message": "bad"}}),
    ]);
    let e = err(&run(AN, &body)).clone();
    assert_eq!((e.kind, e.retryable), (ErrorKind::Provider, false));
    assert_eq!(e.provider_code.as_deref(), Some("invalid_request_error"));
}

#[test]
fn anthropic_end_of_stream_rules() {
    // Closed mid-block, no stop reason: incomplete.
    let o = run(
        AN,
        &named(&[msg_start(), text_start(0), text_delta(0, "par")]),
    );
    assert_eq!(err(&o).kind, ErrorKind::Incomplete);
    assert_eq!(count(&o, "message_end"), 0);
    // Closed after the block but before message_delta: still incomplete.
    let o = run(
        AN,
        &named(&[
            msg_start(),
            text_start(0),
            text_delta(0, "a"),
            block_stop(0),
        ]),
    );
    assert_eq!(err(&o).kind, ErrorKind::Incomplete);
    assert_eq!(err(&run(AN, "")).kind, ErrorKind::Incomplete);
    // The stop reason arrived, only message_stop is missing: complete.
    let o = run(
        AN,
        &named(&[
            msg_start(),
            text_start(0),
            text_delta(0, "a"),
            block_stop(0),
            msg_delta("end_turn", 1),
        ]),
    );
    assert_eq!(ok(&o).stop_reason, StopReason::EndTurn);
    // After message_stop, anything is ignored.
    let body = named(&[msg_start(), msg_delta("end_turn", 1), msg_stop()])
        + "data: {garbage\n\nevent: error\ndata: x\n\n";
    assert!(run(AN, &body).result.is_ok());
}

#[test]
fn anthropic_usage_is_cumulative() {
    let body = named(&[
        msg_start(),
        text_start(0),
        text_delta(0, "a"),
        block_stop(0),
        json!({"type": "message_delta", "delta": {"stop_reason": null}, "usage": {"output_tokens": 5}}),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 12}}),
        msg_stop(),
    ]);
    let m = run(AN, &body);
    let m = ok(&m);
    assert_eq!((m.usage.input_tokens, m.usage.output_tokens), (10, 12));
    assert_eq!(m.usage.cache_read_tokens, 4);
    // A message_delta that restates input tokens replaces them too.
    let body = named(&[
        msg_start(),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"},
               "usage": {"input_tokens": 25, "output_tokens": 7, "cache_read_input_tokens": null}}),
        msg_stop(),
    ]);
    let m = run(AN, &body);
    let m = ok(&m);
    assert_eq!(
        (
            m.usage.input_tokens,
            m.usage.output_tokens,
            m.usage.cache_read_tokens
        ),
        (25, 7, 4)
    );
}

#[test]
fn anthropic_usage_not_sent_is_unknown_and_a_zero_report_is_a_real_zero() {
    let start_without_usage = json!({"type": "message_start", "message": {"id": "msg_1",
        "type": "message", "role": "assistant", "model": "claude-x", "content": []}});
    let body = named(&[
        start_without_usage.clone(),
        text_start(0),
        text_delta(0, "a"),
        block_stop(0),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}}),
        msg_stop(),
    ]);
    let o = run(AN, &body);
    let (m, end) = usages(&o);
    assert_eq!(m, panto::Usage::default());
    assert!(!m.reported && !end.reported);
    // Zeros the server sent are a count.
    let body = named(&[
        start_without_usage,
        text_start(0),
        text_delta(0, "a"),
        block_stop(0),
        msg_delta("end_turn", 0),
        msg_stop(),
    ]);
    let o = run(AN, &body);
    let (m, end) = usages(&o);
    assert!(m.reported && end.reported);
    assert_eq!((m.input_tokens, m.output_tokens), (0, 0));
}

#[test]
fn anthropic_thinking_with_signature() {
    let body = named(&[
        msg_start(),
        block_start(
            0,
            json!({"type": "thinking", "thinking": "", "signature": ""}),
        ),
        block_delta(0, json!({"type": "thinking_delta", "thinking": "Let me "})),
        block_delta(0, json!({"type": "thinking_delta", "thinking": "think."})),
        block_delta(
            0,
            json!({"type": "signature_delta", "signature": "EqQBCkYIBx"}),
        ),
        block_delta(
            0,
            json!({"type": "signature_delta", "signature": "gCIkAo=="}),
        ),
        block_stop(0),
        text_start(1),
        text_delta(1, "Done."),
        block_stop(1),
        msg_delta("end_turn", 9),
        msg_stop(),
    ]);
    let o = run(AN, &body);
    let m = ok(&o);
    assert_eq!(
        m.message.content,
        vec![
            Block::Reasoning {
                text: "Let me think.".into(),
                signature: Some("EqQBCkYIBxgCIkAo==".into())
            },
            Block::text("Done."),
        ]
    );
    // Signatures are not streamed as deltas.
    assert_eq!(count(&o, "content_delta"), 3);
}

#[test]
fn anthropic_redacted_thinking() {
    let body = named(&[
        msg_start(),
        block_start(
            0,
            json!({"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"}),
        ),
        // Redacted thinking has no deltas; a stray one is ignored.
        block_delta(0, json!({"type": "thinking_delta", "thinking": "leak"})),
        block_stop(0),
        text_start(1),
        text_delta(1, "ok"),
        block_stop(1),
        msg_delta("end_turn", 3),
        msg_stop(),
    ]);
    let o = run(AN, &body);
    assert_eq!(
        ok(&o).message.content,
        vec![
            Block::RedactedReasoning {
                data: "EmwKAhgBEgy3va3pzix".into()
            },
            Block::text("ok"),
        ]
    );
    assert!(matches!(
        o.events[1],
        Event::BlockStart {
            kind: BlockKind::Reasoning,
            ..
        }
    ));
}

#[test]
fn anthropic_refusal_without_blocks_and_other_stops() {
    let body = named(&[
        msg_start(),
        ping(),
        json!({"type": "message_delta", "delta": {"stop_reason": "refusal", "stop_details": {"type": "refusal"}},
               "usage": {"output_tokens": 0}}),
        msg_stop(),
    ]);
    let o = run(AN, &body);
    let m = ok(&o);
    assert_eq!(m.stop_reason, StopReason::Refusal);
    assert!(m.message.content.is_empty());
    assert_eq!(o.events.len(), 2); // message_start, message_end
    for (raw, want) in [
        ("stop_sequence", StopReason::StopSequence),
        ("pause_turn", StopReason::Other("pause_turn".into())),
        ("max_tokens", StopReason::MaxTokens),
    ] {
        let body = named(&[
            msg_start(),
            text_start(0),
            text_delta(0, "x"),
            block_stop(0),
            msg_delta(raw, 1),
            msg_stop(),
        ]);
        assert_eq!(ok(&run(AN, &body)).stop_reason, want, "{raw}");
    }
}

#[test]
fn anthropic_tool_use_inputs() {
    let body = named(&[
        msg_start(),
        // No-argument tool: the only delta is "".
        tool_start(0, "toolu_a", "now"),
        json_delta(0, ""),
        block_stop(0),
        // No delta at all.
        tool_start(1, "toolu_b", "now"),
        block_stop(1),
        // Input given whole at block start (some proxies), no deltas.
        block_start(
            2,
            json!({"type": "tool_use", "id": "toolu_c", "name": "f", "input": {"k": [1]}}),
        ),
        block_stop(2),
        // Whole input at start and streamed input: the stream wins.
        block_start(
            3,
            json!({"type": "tool_use", "id": "toolu_d", "name": "g", "input": {"old": 1}}),
        ),
        json_delta(3, "{\"new\":"),
        json_delta(3, " 2}"),
        block_stop(3),
        msg_delta("tool_use", 8),
        msg_stop(),
    ]);
    let o = run(AN, &body);
    assert_eq!(
        calls(ok(&o)),
        vec![
            call("toolu_a", "now", json!({})),
            call("toolu_b", "now", json!({})),
            call("toolu_c", "f", json!({"k": [1]})),
            call("toolu_d", "g", json!({"new": 2})),
        ]
    );
}

#[test]
fn anthropic_deltas_of_the_wrong_kind_are_ignored() {
    // A confused proxy sending a delta type that does not belong to the block: dropped,
    // like an unknown delta type, so the block and the event contract stay intact.
    let body = named(&[
        msg_start(),
        text_start(0),
        text_delta(0, "a"),
        json_delta(0, "{\"x\":1}"),
        block_delta(0, json!({"type": "thinking_delta", "thinking": "no"})),
        block_stop(0),
        tool_start(1, "toolu_1", "f"),
        text_delta(1, "not json"),
        json_delta(1, "{}"),
        block_stop(1),
        msg_delta("tool_use", 1),
        msg_stop(),
    ]);
    let o = run(AN, &body);
    let m = ok(&o);
    assert_eq!(m.message.text(), "a");
    assert_eq!(calls(m), vec![call("toolu_1", "f", json!({}))]);
}

#[test]
fn anthropic_malformed_events_are_protocol_errors() {
    for bad in [
        named(&[msg_start()])
            + "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\n\n",
        "data: {\"no_type\": true}\n\n".to_owned(),
        named(&[
            msg_start(),
            json!({"type": "content_block_start", "content_block": {"type": "text", "text": ""}}),
        ]),
    ] {
        assert_eq!(err(&run(AN, &bad)).kind, ErrorKind::Protocol, "{bad}");
    }
}

// ------------------------------------------------------------ request bodies

fn tool_specs() -> Vec<ToolSpec> {
    vec![ToolSpec {
        name: "weather".into(),
        description: "Current weather".into(),
        parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        needs_approval: false,
        external: false,
    }]
}

fn history() -> Vec<Message> {
    vec![
        Message::user("Weather in Paris and Rome?"),
        Message {
            role: Role::Assistant,
            content: vec![
                Block::Reasoning {
                    text: "Two cities.".into(),
                    signature: Some("sig-123".into()),
                },
                Block::RedactedReasoning {
                    data: "opaque".into(),
                },
                Block::text(""),
                Block::text("Checking."),
                Block::ToolCall {
                    call_id: "call_1".into(),
                    name: "weather".into(),
                    arguments: Some(json!({"city": "Paris"})),
                    arguments_raw: None,
                },
                Block::ToolCall {
                    call_id: "call_2".into(),
                    name: "weather".into(),
                    arguments: None,
                    arguments_raw: Some("{\"city\": \"Ro".into()),
                },
            ],
        },
        Message {
            role: Role::Tool,
            content: vec![
                Block::ToolResult {
                    call_id: "call_1".into(),
                    name: "weather".into(),
                    output: "sunny".into(),
                    is_error: false,
                    parts: Vec::new(),
                },
                Block::ToolResult {
                    call_id: "call_2".into(),
                    name: "weather".into(),
                    output: "invalid arguments".into(),
                    is_error: true,
                    parts: Vec::new(),
                },
            ],
        },
        Message {
            role: Role::Assistant,
            content: vec![Block::text("Paris is sunny.")],
        },
        Message::user("Thanks"),
    ]
}

#[test]
fn openai_request_body() {
    let tools = tool_specs();
    let messages = history();
    let params = RequestParams {
        model: "gpt-x",
        system: Some("Be brief."),
        max_tokens: Some(300),
        temperature: Some(0.2),
        tools: &tools,
        messages: &messages,
    };
    let body = request_body(OA, &params);
    assert_eq!(
        body,
        json!({
            "model": "gpt-x",
            "stream": true,
            "stream_options": {"include_usage": true},
            "max_tokens": 300,
            "temperature": 0.2,
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Weather in Paris and Rome?"},
                // The reasoning of a message that called tools goes back as
                // `reasoning_content` (DeepSeek requires it within a tool loop); redacted
                // reasoning has no text to send.
                {"role": "assistant", "content": "Checking.", "reasoning_content": "Two cities.", "tool_calls": [
                    {"id": "call_1", "type": "function",
                     "function": {"name": "weather", "arguments": "{\"city\":\"Paris\"}"}},
                    {"id": "call_2", "type": "function",
                     "function": {"name": "weather", "arguments": "{\"city\": \"Ro"}},
                ]},
                {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
                {"role": "tool", "tool_call_id": "call_2", "content": "invalid arguments"},
                {"role": "assistant", "content": "Paris is sunny."},
                {"role": "user", "content": "Thanks"},
            ],
            "tools": [{"type": "function", "function": {
                "name": "weather", "description": "Current weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}],
        })
    );
    // Optional fields are omitted, not null.
    let minimal = request_body(
        OA,
        &RequestParams {
            model: "m",
            system: None,
            max_tokens: None,
            temperature: None,
            tools: &[],
            messages: &[Message::user("hi")],
        },
    );
    assert_eq!(
        minimal,
        json!({"model": "m", "stream": true, "stream_options": {"include_usage": true},
               "messages": [{"role": "user", "content": "hi"}]})
    );
    // An assistant message of tool calls only has `content: null`.
    let only_call = vec![
        Message::user("x"),
        Message {
            role: Role::Assistant,
            content: vec![Block::ToolCall {
                call_id: "c".into(),
                name: "f".into(),
                arguments: Some(json!({})),
                arguments_raw: None,
            }],
        },
    ];
    let b = request_body(
        OA,
        &RequestParams {
            messages: &only_call,
            ..params
        },
    );
    assert_eq!(b["messages"][2]["content"], Value::Null);
    assert_eq!(
        b["messages"][2]["tool_calls"][0]["function"]["arguments"],
        "{}"
    );
}

#[test]
fn anthropic_request_body() {
    let tools = tool_specs();
    let messages = history();
    let params = RequestParams {
        model: "claude-x",
        system: Some("Be brief."),
        max_tokens: Some(300),
        temperature: Some(0.2),
        tools: &tools,
        messages: &messages,
    };
    let body = request_body(AN, &params);
    assert_eq!(
        body,
        json!({
            "model": "claude-x",
            "stream": true,
            "max_tokens": 300,
            "temperature": 0.2,
            "system": "Be brief.",
            "messages": [
                // One text block goes as a plain string, as the official SDK sends it.
                {"role": "user", "content": "Weather in Paris and Rome?"},
                {"role": "assistant", "content": [
                    // Thinking goes back with its signature; empty text blocks are dropped.
                    {"type": "thinking", "thinking": "Two cities.", "signature": "sig-123"},
                    {"type": "redacted_thinking", "data": "opaque"},
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "call_1", "name": "weather", "input": {"city": "Paris"}},
                    // Arguments that never parsed still go as an object.
                    {"type": "tool_use", "id": "call_2", "name": "weather", "input": {}},
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "call_1", "content": "sunny", "is_error": false},
                    {"type": "tool_result", "tool_use_id": "call_2", "content": "invalid arguments", "is_error": true},
                ]},
                {"role": "assistant", "content": "Paris is sunny."},
                {"role": "user", "content": "Thanks"},
            ],
            "tools": [{"name": "weather", "description": "Current weather",
                       "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}],
        })
    );
    // max_tokens is required by the API: 4096 by default; optional fields are omitted.
    let minimal = request_body(
        AN,
        &RequestParams {
            model: "m",
            system: None,
            max_tokens: None,
            temperature: None,
            tools: &[],
            messages: &[Message::user("hi")],
        },
    );
    assert_eq!(
        minimal,
        json!({"model": "m", "stream": true, "max_tokens": 4096,
               "messages": [{"role": "user", "content": "hi"}]})
    );
}

#[test]
fn decoded_message_round_trips_through_the_request_body() {
    // What the Anthropic decoder assembles is what the encoder sends back, signature
    // included.
    let body = named(&[
        msg_start(),
        block_start(
            0,
            json!({"type": "thinking", "thinking": "", "signature": ""}),
        ),
        block_delta(0, json!({"type": "thinking_delta", "thinking": "hmm"})),
        block_delta(0, json!({"type": "signature_delta", "signature": "SIG"})),
        block_stop(0),
        tool_start(1, "toolu_1", "weather"),
        json_delta(1, "{\"city\":\"Oslo\"}"),
        block_stop(1),
        msg_delta("tool_use", 5),
        msg_stop(),
    ]);
    let decoded = ok(&run(AN, &body)).message.clone();
    let messages = vec![Message::user("q"), decoded];
    let req = request_body(
        AN,
        &RequestParams {
            model: "m",
            system: None,
            max_tokens: None,
            temperature: None,
            tools: &[],
            messages: &messages,
        },
    );
    assert_eq!(
        req["messages"][1]["content"],
        json!([
            {"type": "thinking", "thinking": "hmm", "signature": "SIG"},
            {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Oslo"}},
        ])
    );
}

#[test]
fn openai_output_limit_field_follows_the_server() {
    use panto::provider::uses_max_completion_tokens;
    assert!(uses_max_completion_tokens("https://api.openai.com/v1"));
    assert!(uses_max_completion_tokens(
        "https://myres.openai.azure.com/openai/v1/"
    ));
    assert!(!uses_max_completion_tokens("http://localhost:11434/v1"));
    assert!(!uses_max_completion_tokens(
        "https://api.openai.com.evil.example/v1"
    ));
    let messages = [Message::user("hi")];
    let params = RequestParams {
        model: "m",
        system: None,
        max_tokens: Some(64),
        temperature: None,
        tools: &[],
        messages: &messages,
    };
    let body_for = |base_url| {
        let options = RequestOptions {
            dialect: Dialect::resolve(Compat::Auto, base_url),
            ..RequestOptions::default()
        };
        panto::provider::request_body_with(OA, &params, &options)
    };
    let official = body_for("https://api.openai.com/v1");
    assert_eq!(official["max_completion_tokens"], 64);
    assert!(official.get("max_tokens").is_none());
    // The field follows the host even when the compat is set by hand.
    let options = RequestOptions {
        dialect: Dialect::resolve(Compat::Generic, "https://myres.openai.azure.com/openai/v1/"),
        ..RequestOptions::default()
    };
    let azure = panto::provider::request_body_with(OA, &params, &options);
    assert_eq!(azure["max_completion_tokens"], 64);
    assert_eq!(request_body(OA, &params)["max_tokens"], 64);
    let compatible = body_for("http://localhost:11434/v1");
    assert_eq!(compatible["max_tokens"], 64);
    assert!(compatible.get("max_completion_tokens").is_none());
}
