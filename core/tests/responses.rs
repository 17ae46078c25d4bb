//! The OpenAI Responses provider (`openai-responses`): the decoder on the fixture streams
//! of `tests/fixtures/responses/` (written from the documented event stream) under many
//! chunkings, the request body, and whole turns against `panto-testserver` — the
//! encrypted reasoning going back byte for byte, retries, cancel, redaction, history
//! save and restore, transcript, compaction, usage and the `store` option.

use std::path::{Path, PathBuf};

use panto::message::{history_from_json, validate_history};
use panto::provider::{self, PreviousResponse, ProviderKind, RequestOptions, RequestParams};
use panto::{
    Agent, Block, CompactOptions, CompactionConfig, Compat, Config, Dialect, Effort, EntryKind,
    ErrorKind, Event, FnTool, Message, Reasoning, Role, StopReason, ToolOutput, ToolSpec,
    TurnControl,
};
use panto_testkit::decode::{check_invariants, decode, decode_at, decode_sized, Outcome, Rng};
use panto_testkit::{quick_retries, turn, turn_with, API_KEY};
use panto_testserver::TestServer;
use serde_json::{json, Value};

const KIND: ProviderKind = ProviderKind::OpenAiResponses;
/// The encrypted reasoning of the `reasoning-tool` fixture (see its `make.py`).
const SEALED: &str =
    "gAAAAABpANTO+enc/0wQ2tT9yZ3uX1Kp7Lr4Vh8Nm2Bq6Cs5Df0Gj3Hk7Jl1Mn9Pq4Rs8Tu2Vw6Xy0Za5bc==";

fn fixture_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../tests/fixtures/responses/{name}.sse"))
}

fn fixture(name: &str) -> String {
    std::fs::read_to_string(fixture_path(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Decodes a fixture whole, in 1..=7-byte pieces and at random cuts; every chunking must
/// give the same events and result, and keep the ordering invariants.
fn decode_fixture(name: &str) -> Outcome {
    let body = fixture(name);
    let whole = decode(KIND, body.as_bytes());
    check_invariants(&whole, 0).unwrap_or_else(|e| panic!("{name}: {e}"));
    for size in 1..=7 {
        let o = decode_sized(KIND, body.as_bytes(), size);
        assert_eq!(o, whole, "{name}: differs in {size}-byte pieces");
    }
    let mut rng = Rng::seeded_from(name);
    for _ in 0..4 {
        let cuts = rng.cuts(body.len(), 40);
        assert_eq!(
            decode_at(KIND, body.as_bytes(), &cuts),
            whole,
            "{name}: differs cut at {cuts:?}"
        );
    }
    whole
}

fn types(events: &[Event]) -> Vec<&'static str> {
    events.iter().map(Event::type_name).collect()
}

fn deltas(events: &[Event]) -> Vec<(u32, String)> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::ContentDelta { block, text, .. } => Some((*block, text.clone())),
            _ => None,
        })
        .collect()
}

// ---------------------------------------------------------------------------------
// The decoder.

#[test]
fn a_text_answer_decodes_with_its_id_model_and_usage() {
    let o = decode_fixture("text");
    let m = o.result.as_ref().unwrap();
    assert_eq!(
        types(&o.events),
        [
            "message_start",
            "block_start",
            "content_delta",
            "content_delta",
            "content_delta",
            "block_complete",
            "message_end"
        ]
    );
    match &o.events[0] {
        Event::MessageStart {
            model, response_id, ..
        } => {
            assert_eq!(model, "gpt-5-mini-2026-01-01");
            assert_eq!(response_id.as_deref(), Some("resp_text_1"));
        }
        e => panic!("{e:?}"),
    }
    assert_eq!(m.message.text(), "Hello, world!");
    assert_eq!(m.stop_reason, StopReason::EndTurn);
    // Cached input is part of input_tokens, as OpenAI counts it.
    assert_eq!(
        (
            m.usage.input_tokens,
            m.usage.output_tokens,
            m.usage.cache_read_tokens,
            m.usage.reasoning_tokens,
            m.usage.reported
        ),
        (24, 6, 16, 0, true)
    );
    // Message items are not kept verbatim: they go back rebuilt, without their ids.
    assert_eq!(m.message.content, [Block::text("Hello, world!")]);
}

#[test]
fn reasoning_then_a_call_keeps_the_reasoning_item_verbatim_before_the_call() {
    let o = decode_fixture("reasoning-tool");
    let m = o.result.as_ref().unwrap();
    assert_eq!(m.stop_reason, StopReason::ToolUse);
    assert_eq!(m.usage.reasoning_tokens, 128);
    // The summary parts stream as reasoning, a blank line between parts.
    let summary = "**Checking** the weather\n\nParis needs a lookup.";
    assert_eq!(
        deltas(&o.events)
            .iter()
            .filter(|(b, _)| *b == 0)
            .map(|(_, t)| t.as_str())
            .collect::<String>(),
        summary
    );
    assert!(o.events.iter().any(|e| matches!(e,
        Event::ToolDetails { block: 1, call_id, name, .. } if call_id == "call_rt1" && name == "weather")));
    let content = &m.message.content;
    assert_eq!(content.len(), 3, "{content:?}");
    assert_eq!(
        content[0],
        Block::Reasoning {
            text: summary.into(),
            signature: None
        }
    );
    // The `.done` item, not the `.added` one (whose blob was partial).
    match &content[1] {
        Block::Opaque { provider, block } => {
            assert_eq!(provider, "openai-responses");
            assert_eq!(block["id"], "rs_rt1");
            assert_eq!(block["encrypted_content"], SEALED);
            assert_eq!(block["summary"][1]["text"], "Paris needs a lookup.");
        }
        b => panic!("{b:?}"),
    }
    match &content[2] {
        Block::ToolCall {
            call_id,
            name,
            arguments,
            ..
        } => {
            assert_eq!((call_id.as_str(), name.as_str()), ("call_rt1", "weather"));
            assert_eq!(arguments.as_ref().unwrap(), &json!({"city": "Paris"}));
        }
        b => panic!("{b:?}"),
    }
}

#[test]
fn two_parallel_calls_are_two_blocks() {
    let o = decode_fixture("parallel-calls");
    let m = o.result.as_ref().unwrap();
    let calls: Vec<(String, Value)> = m
        .message
        .tool_calls()
        .map(|b| match b {
            Block::ToolCall {
                call_id, arguments, ..
            } => (call_id.clone(), arguments.clone().unwrap()),
            _ => unreachable!(),
        })
        .collect();
    assert_eq!(
        calls,
        [
            ("call_pc1".to_owned(), json!({"city": "Paris"})),
            ("call_pc2".to_owned(), json!({"city": "Rome"}))
        ]
    );
    assert_eq!(m.stop_reason, StopReason::ToolUse);
}

#[test]
fn an_unknown_event_is_skipped_and_an_unknown_item_kept_verbatim() {
    let o = decode_fixture("unknown-event");
    let m = o.result.as_ref().unwrap();
    assert_eq!(m.message.text(), "Still here.");
    assert_eq!(m.stop_reason, StopReason::EndTurn);
    match &m.message.content[0] {
        Block::Opaque { provider, block } => {
            assert_eq!(provider, "openai-responses");
            assert_eq!(block["type"], "web_search_call");
            assert_eq!(block["status"], "completed");
        }
        b => panic!("{b:?}"),
    }
    // No events for the kept item: the text block is block 0.
    assert!(matches!(o.events[1], Event::BlockStart { block: 0, .. }));
}

#[test]
fn incomplete_is_max_tokens_with_the_text_so_far() {
    let o = decode_fixture("incomplete");
    let m = o.result.as_ref().unwrap();
    assert_eq!(m.stop_reason, StopReason::MaxTokens);
    assert_eq!(m.message.text(), "The first three words");
    assert_eq!(m.usage.output_tokens, 16);
}

#[test]
fn a_content_filter_stop_and_an_unknown_reason_are_kept() {
    let body = fixture("incomplete").replace("max_output_tokens", "content_filter");
    let o = decode(KIND, body.as_bytes());
    assert_eq!(
        o.result.unwrap().stop_reason,
        StopReason::ContentFilter,
        "content_filter"
    );
    let body = fixture("incomplete").replace("max_output_tokens", "gremlins");
    let o = decode(KIND, body.as_bytes());
    assert_eq!(o.result.unwrap().stop_reason.as_string(), "other:gremlins");
}

#[test]
fn failed_is_a_retryable_provider_error_with_its_code() {
    let o = decode_fixture("failed");
    let e = o.result.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Provider);
    assert_eq!(e.provider_code.as_deref(), Some("server_error"));
    assert!(e.retryable);
    assert!(
        e.message.contains("The server had an error"),
        "{}",
        e.message
    );
    // Nothing was shown before it: no message_start went out.
    assert!(o.events.is_empty(), "{:?}", o.events);
}

#[test]
fn an_error_event_is_a_provider_error_with_its_code() {
    let o = decode_fixture("error-event");
    let e = o.result.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Provider);
    assert_eq!(e.provider_code.as_deref(), Some("rate_limit_exceeded"));
    assert!(e.message.contains("Rate limit reached"), "{}", e.message);
    assert_eq!(
        types(&o.events)[..3],
        ["message_start", "block_start", "content_delta"]
    );
}

#[test]
fn a_refusal_streams_as_text_and_stops_with_refusal() {
    let o = decode_fixture("refusal");
    let m = o.result.as_ref().unwrap();
    assert_eq!(m.stop_reason, StopReason::Refusal);
    assert_eq!(m.message.text(), "I can't help with that.");
}

#[test]
fn a_stream_without_a_terminal_event_is_incomplete() {
    let body = fixture("text");
    let cut = body.find("event: response.completed").unwrap();
    let o = decode(KIND, &body.as_bytes()[..cut]);
    assert_eq!(o.result.unwrap_err().kind, ErrorKind::Incomplete);
}

#[test]
fn whole_items_without_deltas_still_stream_their_content() {
    // A server that sends each item only as `.done` (or a non-streamed response).
    let events = [
        json!({"type":"response.created","response":{"id":"resp_w","model":"m"}}),
        json!({"type":"response.output_item.done","output_index":0,"item":{"type":"reasoning","id":"rs_w","summary":[],"content":[{"type":"reasoning_text","text":"think"}]}}),
        json!({"type":"response.output_item.done","output_index":1,"item":{"type":"function_call","id":"fc_w","call_id":"c1","name":"t","arguments":"{\"a\":1}"}}),
        json!({"type":"response.output_item.done","output_index":2,"item":{"type":"message","id":"m","role":"assistant","content":[{"type":"output_text","text":"hi"}]}}),
        json!({"type":"response.completed","response":{"usage":{"input_tokens":1,"output_tokens":2}}}),
    ];
    let body: String = events.iter().map(|e| format!("data: {e}\n\n")).collect();
    let o = decode(KIND, body.as_bytes());
    check_invariants(&o, 0).unwrap();
    let m = o.result.unwrap();
    assert_eq!(
        deltas(&o.events),
        [
            (0, "think".to_owned()),
            (1, "{\"a\":1}".to_owned()),
            (2, "hi".to_owned())
        ]
    );
    assert_eq!(m.stop_reason, StopReason::ToolUse);
}

/// The SSE body of `events`, one `data:` line each.
fn stream_of(events: &[Value]) -> String {
    events.iter().map(|e| format!("data: {e}\n\n")).collect()
}

/// A message's tool calls as (call_id, arguments).
fn calls_of(m: &Message) -> Vec<(String, Value)> {
    m.tool_calls()
        .map(|b| match b {
            Block::ToolCall {
                call_id, arguments, ..
            } => (call_id.clone(), arguments.clone().unwrap_or(Value::Null)),
            _ => unreachable!(),
        })
        .collect()
}

#[test]
fn text_only_in_the_completed_response_is_the_answer() {
    // No item events at all: the answer is only in `response.completed`'s output.
    let body = stream_of(&[
        json!({"type":"response.created","response":{"id":"resp_c","model":"m","output":[]}}),
        json!({"type":"response.completed","response":{"id":"resp_c","model":"m","status":"completed",
            "output":[{"type":"message","id":"msg_c","role":"assistant",
                       "content":[{"type":"output_text","text":"only here"}]}],
            "usage":{"input_tokens":3,"output_tokens":2}}}),
    ]);
    let o = decode(KIND, body.as_bytes());
    check_invariants(&o, 0).unwrap();
    let m = o.result.unwrap();
    assert_eq!(m.message.text(), "only here");
    assert_eq!(m.stop_reason, StopReason::EndTurn);
    assert_eq!(deltas(&o.events), [(0, "only here".to_owned())]);
    // Deltas that stopped short: the completed output brings the rest.
    let body = stream_of(&[
        json!({"type":"response.output_item.added","output_index":0,"item":{"type":"message","id":"msg_p","role":"assistant","content":[]}}),
        json!({"type":"response.output_text.delta","item_id":"msg_p","output_index":0,"delta":"Hel"}),
        json!({"type":"response.completed","response":{"output":[{"type":"message","id":"msg_p",
            "content":[{"type":"output_text","text":"Hello"}]}]}}),
    ]);
    let o = decode(KIND, body.as_bytes());
    check_invariants(&o, 0).unwrap();
    assert_eq!(o.result.unwrap().message.text(), "Hello");
    // A call the deltas never announced is taken from it too, after the streamed one.
    let body = stream_of(&[
        json!({"type":"response.output_item.added","output_index":0,"item":{"type":"function_call","id":"fc_1","call_id":"call_a","name":"t","arguments":""}}),
        json!({"type":"response.function_call_arguments.delta","item_id":"fc_1","output_index":0,"delta":"{\"n\":1}"}),
        json!({"type":"response.output_item.done","output_index":0,"item":{"type":"function_call","id":"fc_1","call_id":"call_a","name":"t","arguments":"{\"n\":1}"}}),
        json!({"type":"response.completed","response":{"output":[
            {"type":"function_call","id":"fc_1","call_id":"call_a","name":"t","arguments":"{\"n\":1}"},
            {"type":"function_call","id":"fc_2","call_id":"call_b","name":"t","arguments":"{\"n\":2}"}]}}),
    ]);
    let o = decode(KIND, body.as_bytes());
    check_invariants(&o, 0).unwrap();
    let m = o.result.unwrap();
    assert_eq!(
        calls_of(&m.message),
        [
            ("call_a".to_owned(), json!({"n": 1})),
            ("call_b".to_owned(), json!({"n": 2}))
        ]
    );
    assert_eq!(m.stop_reason, StopReason::ToolUse);
}

#[test]
fn two_calls_sharing_an_item_id_or_an_output_index_are_two_calls() {
    let call = |id: &str, ix: u64, call_id: &str, args: &str, done: bool| {
        json!({"type": if done {"response.output_item.done"} else {"response.output_item.added"},
               "output_index": ix,
               "item": {"type":"function_call","id":id,"call_id":call_id,"name":"t",
                        "arguments": if done {args} else {""}}})
    };
    let args = |id: &str, ix: u64, delta: &str| json!({"type":"response.function_call_arguments.delta","item_id":id,"output_index":ix,"delta":delta});
    let completed = json!({"type":"response.completed","response":{"status":"completed"}});
    // One item id for two calls (at two indexes), each streamed then done.
    let same_id = stream_of(&[
        call("fc_x", 0, "call_a", "", false),
        args("fc_x", 0, "{\"n\":1}"),
        call("fc_x", 0, "call_a", "{\"n\":1}", true),
        call("fc_x", 1, "call_b", "", false),
        args("fc_x", 1, "{\"n\":2}"),
        call("fc_x", 1, "call_b", "{\"n\":2}", true),
        completed.clone(),
    ]);
    // One output_index for two calls of different ids, interleaved.
    let same_index = stream_of(&[
        call("fc_a", 0, "call_a", "", false),
        call("fc_b", 0, "call_b", "", false),
        args("fc_a", 0, "{\"n\":1}"),
        args("fc_b", 0, "{\"n\":2}"),
        call("fc_a", 0, "call_a", "{\"n\":1}", true),
        call("fc_b", 0, "call_b", "{\"n\":2}", true),
        completed.clone(),
    ]);
    // Whole calls only (no `.added`, no deltas), one item id and one index.
    let whole_only = stream_of(&[
        call("fc_w", 0, "call_a", "{\"n\":1}", true),
        call("fc_w", 0, "call_b", "{\"n\":2}", true),
        completed,
    ]);
    for (name, body) in [
        ("same id", same_id),
        ("same index", same_index),
        ("whole", whole_only),
    ] {
        let o = decode(KIND, body.as_bytes());
        check_invariants(&o, 0).unwrap_or_else(|e| panic!("{name}: {e}"));
        let m = o.result.unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            calls_of(&m.message),
            [
                ("call_a".to_owned(), json!({"n": 1})),
                ("call_b".to_owned(), json!({"n": 2}))
            ],
            "{name}"
        );
        assert_eq!(m.stop_reason, StopReason::ToolUse, "{name}");
    }
}

#[test]
fn a_completed_output_that_contradicts_the_stream_is_a_protocol_error() {
    let streamed = [
        json!({"type":"response.output_item.added","output_index":0,"item":{"type":"message","id":"msg_1","content":[]}}),
        json!({"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"delta":"Hello world"}),
    ];
    // Less than the deltas brought.
    let mut shorter = streamed.to_vec();
    shorter.push(json!({"type":"response.completed","response":{"output":[
        {"type":"message","id":"msg_1","content":[{"type":"output_text","text":"Hello"}]}]}}));
    // A finished message that the final output calls a function call.
    let mut other_kind = streamed.to_vec();
    other_kind.push(json!({"type":"response.output_item.done","output_index":0,"item":{"type":"message","id":"msg_1","content":[{"type":"output_text","text":"Hello world"}]}}));
    other_kind.push(json!({"type":"response.completed","response":{"output":[
        {"type":"function_call","id":"msg_1","name":"t","arguments":"{}"}]}}));
    for (name, events) in [("shorter", shorter), ("other kind", other_kind)] {
        let e = decode(KIND, stream_of(&events).as_bytes())
            .result
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Protocol, "{name}: {e}");
        assert!(
            e.message.contains("response.completed's output item 0"),
            "{name}: {}",
            e.message
        );
    }
}

#[test]
fn a_complete_json_body_decodes_as_its_stream_would() {
    let body = json!({
        "id": "resp_j", "object": "response", "status": "completed", "model": "m",
        "output": [{"type":"message","id":"msg_j","role":"assistant",
                    "content":[{"type":"output_text","text":"whole"}]}],
        "usage": {"input_tokens": 3, "output_tokens": 1}
    })
    .to_string();
    let mut events = Vec::new();
    let m = provider::decode_complete_body(
        KIND,
        0,
        &body,
        Default::default(),
        &mut |e: Event| -> panto::Result<()> {
            events.push(e);
            Ok(())
        },
    )
    .unwrap()
    .unwrap();
    assert_eq!(m.message.text(), "whole");
    assert_eq!(m.response_id.as_deref(), Some("resp_j"));
    assert_eq!(m.usage.output_tokens, 1);
    assert_eq!(types(&events).len(), 5);
}

#[test]
fn limits_hold_against_a_flood_of_items() {
    let mut body = String::from("data: {\"type\":\"response.created\",\"response\":{}}\n\n");
    for i in 0..2000 {
        body.push_str(&format!(
            "data: {{\"type\":\"response.output_item.done\",\"output_index\":{i},\"item\":{{\"type\":\"web_search_call\",\"id\":\"ws_{i}\"}}}}\n\n"
        ));
    }
    let e = decode(KIND, body.as_bytes()).result.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Protocol);
    assert!(e.message.contains("max_blocks"), "{}", e.message);
}

// ---------------------------------------------------------------------------------
// The request body.

fn weather_spec() -> ToolSpec {
    ToolSpec {
        name: "weather".into(),
        description: "Weather for a city".into(),
        parameters: json!({"type":"object","properties":{"city":{"type":"string"}}}),
        needs_approval: false,
        external: false,
    }
}

/// The conversation after the `reasoning-tool` fixture's call was answered.
fn answered_history() -> Vec<Message> {
    let first = decode(KIND, fixture("reasoning-tool").as_bytes())
        .result
        .unwrap()
        .message;
    vec![
        Message::user("weather in Paris?"),
        first,
        Message {
            role: Role::Tool,
            content: vec![Block::ToolResult {
                call_id: "call_rt1".into(),
                name: "weather".into(),
                output: "18°C".into(),
                is_error: false,
                parts: Vec::new(),
            }],
        },
    ]
}

fn body(messages: &[Message], options: &RequestOptions<'_>) -> Value {
    let tools = [weather_spec()];
    provider::request_body_with(
        KIND,
        &RequestParams {
            model: "gpt-5-mini",
            system: Some("be brief"),
            max_tokens: Some(500),
            temperature: None,
            tools: &tools,
            messages,
        },
        options,
    )
}

#[test]
fn the_stateless_body_resends_everything_with_the_reasoning_in_place() {
    let history = answered_history();
    let b = body(&history, &RequestOptions::default());
    assert_eq!(b["store"], false);
    assert_eq!(b["stream"], true);
    assert_eq!(b["include"], json!(["reasoning.encrypted_content"]));
    assert_eq!(b["instructions"], "be brief");
    assert_eq!(b["max_output_tokens"], 500);
    assert!(b.get("previous_response_id").is_none());
    assert_eq!(
        b["tools"],
        json!([{"type":"function","name":"weather","description":"Weather for a city",
                "parameters":{"type":"object","properties":{"city":{"type":"string"}}},
                "strict":false}])
    );
    assert_eq!(b["tool_choice"], "auto");
    assert_eq!(b["parallel_tool_calls"], true);
    let input = b["input"].as_array().unwrap();
    assert_eq!(
        input[0],
        json!({"type":"message","role":"user","content":"weather in Paris?"})
    );
    // The reasoning item exactly as `.done` gave it, before the call it preceded.
    let done_item = fixture("reasoning-tool")
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str::<Value>(d).unwrap())
        .find(|v| v["type"] == "response.output_item.done" && v["item"]["type"] == "reasoning")
        .unwrap()["item"]
        .clone();
    assert_eq!(input[1], done_item);
    assert_eq!(input[1]["encrypted_content"], SEALED);
    // The call without its item id (a server that stored nothing cannot resolve it).
    assert_eq!(
        input[2],
        json!({"type":"function_call","call_id":"call_rt1","name":"weather",
               "arguments":"{\"city\":\"Paris\"}"})
    );
    assert_eq!(
        input[3],
        json!({"type":"function_call_output","call_id":"call_rt1","output":"18°C"})
    );
    assert_eq!(input.len(), 4);
}

#[test]
fn compat_vllm_and_ollama_leave_out_include() {
    for compat in [Compat::Vllm, Compat::Ollama] {
        let options = RequestOptions {
            dialect: Dialect {
                compat,
                max_completion_tokens: false,
            },
            ..RequestOptions::default()
        };
        let b = body(&answered_history(), &options);
        assert!(b.get("include").is_none(), "{compat:?}: {b}");
        // Their plain reasoning goes back as it came.
        assert_eq!(b["input"][1]["type"], "reasoning");
    }
}

#[test]
fn reasoning_without_its_blob_is_not_sent_to_a_server_that_keeps_nothing() {
    let mut history = answered_history();
    if let Block::Opaque { block, .. } = &mut history[1].content[1] {
        block.as_object_mut().unwrap().remove("encrypted_content");
    }
    let b = body(&history, &RequestOptions::default());
    let input = b["input"].as_array().unwrap();
    assert!(input.iter().all(|i| i["type"] != "reasoning"), "{b}");
    assert_eq!(input[1]["type"], "function_call");
}

#[test]
fn the_store_option_sends_only_what_follows_the_previous_response() {
    let history = answered_history();
    let first = body(
        &history[..1],
        &RequestOptions {
            store: true,
            ..RequestOptions::default()
        },
    );
    assert_eq!(first["store"], true);
    assert!(first.get("include").is_none());
    assert!(first.get("previous_response_id").is_none());
    let chained = RequestOptions {
        store: true,
        previous_response: Some(PreviousResponse {
            id: "resp_rt_1",
            messages: 2,
        }),
        ..RequestOptions::default()
    };
    let next = body(&history, &chained);
    assert_eq!(next["previous_response_id"], "resp_rt_1");
    assert_eq!(
        next["input"],
        json!([{"type":"function_call_output","call_id":"call_rt1","output":"18°C"}])
    );
    // A previous response past the history's end (it was replaced) is not used.
    let stale = body(&history[..1], &chained);
    assert!(stale.get("previous_response_id").is_none());
}

#[test]
fn reasoning_control_asks_for_summaries() {
    let options = |effort| RequestOptions {
        reasoning: Some(Reasoning::new(effort)),
        ..RequestOptions::default()
    };
    let b = body(&[Message::user("hi")], &options(Effort::High));
    assert_eq!(b["reasoning"], json!({"effort":"high","summary":"auto"}));
    let b = body(&[Message::user("hi")], &options(Effort::None));
    assert_eq!(b["reasoning"], json!({"effort":"none"}));
    let b = body(&[Message::user("hi")], &RequestOptions::default());
    assert!(b.get("reasoning").is_none());
}

#[test]
fn history_of_other_providers_goes_out_without_their_reasoning() {
    let history = vec![
        Message::user("q"),
        Message {
            role: Role::Assistant,
            content: vec![
                Block::Reasoning {
                    text: "hm".into(),
                    signature: Some("anthropic-sig".into()),
                },
                Block::RedactedReasoning { data: "x".into() },
                Block::Opaque {
                    provider: "anthropic".into(),
                    block: json!({"type":"server_tool_use"}),
                },
                Block::text("a"),
                Block::text("b"),
            ],
        },
    ];
    let b = body(&history, &RequestOptions::default());
    assert_eq!(
        b["input"][1],
        json!({"type":"message","role":"assistant","content":"ab"})
    );
    assert_eq!(b["input"].as_array().unwrap().len(), 2);
}

// ---------------------------------------------------------------------------------
// Whole turns against the scripted server.

fn sse(name: &str) -> Value {
    json!({"headers": {"content-type": "text/event-stream"}, "body": fixture(name)})
}

fn serve(responses: Vec<Value>) -> TestServer {
    let exchanges: Vec<Value> = responses
        .into_iter()
        .map(|r| json!({"match": {"path": "/v1/responses"}, "response": r}))
        .collect();
    TestServer::start(
        panto_testserver::Scenario::from_value(&json!({"exchanges": exchanges})).unwrap(),
    )
    .unwrap()
}

fn config(server: &TestServer) -> Config {
    panto_testkit::config(KIND, server).with_system("be brief")
}

fn weather_tool() -> impl panto::Tool {
    FnTool::new(
        "weather",
        "Weather for a city",
        json!({"type":"object","properties":{"city":{"type":"string"}}}),
        |args: Value, _| async move {
            ToolOutput::ok(format!("18°C in {}", args["city"].as_str().unwrap_or("?")))
        },
    )
}

/// The reasoning item the second request must carry: the fixture's `.done` item.
fn reasoning_item() -> Value {
    json!({"id": "rs_rt1", "type": "reasoning", "encrypted_content": SEALED, "summary": [
        {"type": "summary_text", "text": "**Checking** the weather"},
        {"type": "summary_text", "text": "Paris needs a lookup."}]})
}

#[tokio::test]
async fn a_two_step_tool_turn_sends_the_reasoning_back_unchanged() {
    // The second exchange answers only a request whose raw bytes carry the blob as it
    // came (not merely an equal JSON value after re-encoding).
    let server = TestServer::start(
        panto_testserver::Scenario::from_value(&json!({"exchanges": [
            {"match": {"path": "/v1/responses"}, "response": sse("reasoning-tool")},
            {"match": {"path": "/v1/responses", "body_contains": [format!("\"encrypted_content\":\"{SEALED}\"")]},
             "response": sse("reasoning-tool-answer")},
        ]}))
        .unwrap(),
    )
    .unwrap();
    let agent = Agent::new(config(&server)).unwrap();
    agent.add_tool(weather_tool()).unwrap();
    let (events, r) = turn(&agent, "weather in Paris?").await;
    let summary = r.unwrap();
    assert_eq!(summary.stop_reason, StopReason::EndTurn);
    assert_eq!(summary.text, "It is 18°C in Paris.");
    // Usage summed over both responses, cached and reasoning tokens included.
    assert_eq!(
        (
            summary.usage.input_tokens,
            summary.usage.output_tokens,
            summary.usage.cache_read_tokens,
            summary.usage.reasoning_tokens,
            summary.usage.reported
        ),
        (351, 180, 128, 144, true)
    );
    assert!(events.iter().any(|e| matches!(e,
        Event::ToolResult { call_id, output, .. } if call_id == "call_rt1" && output == "18°C in Paris")));
    let reqs = server.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0].path, "/v1/responses");
    assert_eq!(
        reqs[0].headers["authorization"],
        format!("Bearer {API_KEY}")
    );
    let first = &reqs[0].body;
    assert_eq!(first["store"], false);
    assert_eq!(first["include"], json!(["reasoning.encrypted_content"]));
    assert_eq!(first["instructions"], "be brief");
    let second = &reqs[1].body;
    assert_eq!(
        second["input"],
        json!([
            {"type":"message","role":"user","content":"weather in Paris?"},
            reasoning_item(),
            {"type":"function_call","call_id":"call_rt1","name":"weather","arguments":"{\"city\":\"Paris\"}"},
            {"type":"function_call_output","call_id":"call_rt1","output":"18°C in Paris"},
        ])
    );
    assert!(reqs[1].matched);
    validate_history(&agent.history()).unwrap();
}

#[tokio::test]
async fn history_saved_and_restored_sends_the_same_reasoning() {
    let server = serve(vec![
        sse("reasoning-tool"),
        sse("reasoning-tool-answer"),
        sse("text"),
    ]);
    let agent = Agent::new(config(&server)).unwrap();
    agent.add_tool(weather_tool()).unwrap();
    turn(&agent, "weather in Paris?").await.1.unwrap();
    let saved = agent.history_json();
    assert!(saved.contains(SEALED));
    assert_eq!(history_from_json(&saved).unwrap(), agent.history());
    // A new agent (another process, say) restores it and goes on.
    let restored = Agent::new(config(&server)).unwrap();
    restored.add_tool(weather_tool()).unwrap();
    restored.load_history_json(&saved).unwrap();
    turn(&restored, "thanks").await.1.unwrap();
    let reqs = server.requests();
    let third = &reqs[2].body;
    assert_eq!(third["input"][1], reasoning_item());
    // The answer's own reasoning item too, before its message.
    assert_eq!(third["input"][4]["id"], "rs_rt2");
    assert_eq!(
        third["input"][5],
        json!({"type":"message","role":"assistant","content":"It is 18°C in Paris."})
    );
    assert_eq!(
        third["input"][6],
        json!({"type":"message","role":"user","content":"thanks"})
    );
    // The transcript shows the summaries as reasoning, never the blob.
    let transcript = restored.transcript();
    assert!(transcript.iter().any(|e| e.kind == EntryKind::Reasoning
        && e.text == "**Checking** the weather\n\nParis needs a lookup."));
    assert!(!restored.transcript_json().contains(SEALED));
}

#[tokio::test]
async fn a_429_before_the_stream_is_retried_with_a_provider_retry_event() {
    let server = serve(vec![
        json!({"status": 429, "headers": {"retry-after": "0"},
               "json": {"error": {"type": "requests", "code": "rate_limit_exceeded", "message": "slow down"}}}),
        sse("text"),
    ]);
    let agent = Agent::new(config(&server).with_retry(quick_retries(2))).unwrap();
    let (events, r) = turn(&agent, "hi").await;
    assert_eq!(r.unwrap().text, "Hello, world!");
    assert!(events.iter().any(|e| matches!(
        e,
        Event::ProviderRetry {
            status: Some(429),
            attempt: 2,
            ..
        }
    )));
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn a_failed_response_before_any_output_is_retried() {
    let server = serve(vec![sse("failed"), sse("text")]);
    let agent = Agent::new(config(&server).with_retry(quick_retries(1))).unwrap();
    let (events, r) = turn(&agent, "hi").await;
    assert_eq!(r.unwrap().text, "Hello, world!");
    assert!(events
        .iter()
        .any(|e| matches!(e, Event::ProviderRetry { .. })));
    // Without retries it is the turn's error, and the history stays as it was.
    let server = server_once("failed");
    let agent = Agent::new(config(&server)).unwrap();
    let (_, r) = turn(&agent, "hi").await;
    let e = r.unwrap_err();
    assert_eq!(
        (e.kind, e.provider_code.as_deref()),
        (ErrorKind::Provider, Some("server_error"))
    );
    validate_history(&agent.history()).unwrap();
}

fn server_once(name: &str) -> TestServer {
    serve(vec![sse(name)])
}

#[tokio::test]
async fn the_api_key_never_reaches_an_error() {
    let leak = format!("key {API_KEY} was refused");
    let server = serve(vec![json!({"status": 401,
        "json": {"error": {"code": "invalid_api_key", "message": leak}}})]);
    let agent = Agent::new(config(&server)).unwrap();
    let e = turn(&agent, "hi").await.1.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Authentication);
    assert!(!e.to_string().contains(API_KEY), "{e}");
    assert!(!e.to_json().contains(API_KEY));
    // Inside the stream too (an `error` event quoting the key).
    let body = fixture("error-event").replace("Rate limit reached for requests", &leak);
    let server = serve(vec![
        json!({"headers": {"content-type": "text/event-stream"}, "body": body}),
    ]);
    let agent = Agent::new(config(&server)).unwrap();
    let e = turn(&agent, "hi").await.1.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Provider);
    assert!(!e.to_string().contains(API_KEY), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_in_the_middle_of_a_held_stream_is_prompt() {
    let body = fixture("text");
    let at = body.find("event: response.output_text.delta").unwrap();
    let server = serve(vec![
        json!({"headers": {"content-type": "text/event-stream"},
        "body": body, "fault": {"kind": "hold", "after_bytes": at}}),
    ]);
    let agent = Agent::new(config(&server)).unwrap();
    let control = TurnControl::default();
    let cancel = control.cancel.clone();
    let turn = {
        let agent = agent.clone();
        let control = control.clone();
        tokio::spawn(async move { turn_with(&agent, "hi", &control, Default::default()).await })
    };
    // The response is waiting at the hold: the turn is blocked in the stream.
    panto_testkit::eventually("the response to wait at its hold", || server.held() == 1);
    assert!(!turn.is_finished());
    cancel.cancel();
    let (_, r) = turn.await.unwrap();
    assert_eq!(r.unwrap_err().kind, ErrorKind::Cancelled);
    // The history holds only the user message: nothing half-answered.
    assert_eq!(
        agent.history().iter().map(|m| m.role).collect::<Vec<_>>(),
        [Role::User]
    );
}

#[tokio::test]
async fn compaction_summarizes_through_the_responses_endpoint() {
    let summary = fixture("text")
        .replace("Hello", "SUMMARY")
        .replace(", wor", " of")
        .replace("ld!", " it");
    let server = serve(vec![
        sse("reasoning-tool"),
        sse("reasoning-tool-answer"),
        json!({"headers": {"content-type": "text/event-stream"}, "body": summary}),
    ]);
    let agent = Agent::new(config(&server)).unwrap();
    agent.add_tool(weather_tool()).unwrap();
    turn(&agent, "weather in Paris?").await.1.unwrap();
    let done = agent
        .compact(
            &CompactOptions {
                keep_last: 1,
                ..CompactOptions::default()
            },
            &panto::CancellationToken::new(),
        )
        .await
        .unwrap();
    assert!(done.changed);
    let reqs = server.requests();
    assert_eq!(reqs[2].path, "/v1/responses");
    // The summary request is a plain request: the transcript as one user message.
    let input = reqs[2].body["input"].as_array().unwrap();
    assert_eq!(input.len(), 1);
    assert!(input[0]["content"]
        .as_str()
        .unwrap()
        .contains("weather in Paris?"));
    assert!(agent.history_json().contains("SUMMARY of it"));
    validate_history(&agent.history()).unwrap();
}

#[tokio::test]
async fn automatic_compaction_uses_the_same_provider() {
    let server = serve(vec![sse("text"), sse("text"), sse("text")]);
    let agent = Agent::new(config(&server).with_compaction(CompactionConfig {
        threshold_tokens: 20,
        keep_last: 1,
        model: None,
        prompt: None,
    }))
    .unwrap();
    turn(&agent, "first").await.1.unwrap();
    // The first response reported 24 input tokens: the next turn compacts first.
    let (events, r) = turn(&agent, "second").await;
    r.unwrap();
    // Counted from the provider's report of 24 input tokens (and what followed it).
    assert!(
        events.iter().any(|e| matches!(e,
            Event::HistoryCompacted { tokens_before, messages_before: 3, .. } if *tokens_before >= 24)),
        "{events:?}"
    );
    let reqs = server.requests();
    assert_eq!(reqs.len(), 3);
    assert!(reqs.iter().all(|r| r.path == "/v1/responses"));
}

#[tokio::test]
async fn the_store_option_chains_responses_by_id() {
    let server = serve(vec![
        sse("reasoning-tool"),
        sse("reasoning-tool-answer"),
        sse("text"),
    ]);
    let agent = Agent::new(config(&server).with_store(true)).unwrap();
    agent.add_tool(weather_tool()).unwrap();
    turn(&agent, "weather in Paris?").await.1.unwrap();
    turn(&agent, "thanks").await.1.unwrap();
    let reqs = server.requests();
    assert_eq!(reqs[0].body["store"], true);
    assert!(reqs[0].body.get("previous_response_id").is_none());
    assert!(reqs[0].body.get("include").is_none());
    assert_eq!(reqs[1].body["previous_response_id"], "resp_rt_1");
    assert_eq!(
        reqs[1].body["input"],
        json!([{"type":"function_call_output","call_id":"call_rt1","output":"18°C in Paris"}])
    );
    assert_eq!(reqs[2].body["previous_response_id"], "resp_rt_2");
    assert_eq!(
        reqs[2].body["input"],
        json!([{"type":"message","role":"user","content":"thanks"}])
    );
}

#[tokio::test]
async fn the_store_option_forgets_the_chain_when_the_history_is_replaced() {
    let server = serve(vec![sse("text"), sse("text")]);
    let agent = Agent::new(config(&server).with_store(true)).unwrap();
    turn(&agent, "one").await.1.unwrap();
    let history = agent.history();
    agent.set_history(history).unwrap();
    turn(&agent, "two").await.1.unwrap();
    let reqs = server.requests();
    assert!(reqs[1].body.get("previous_response_id").is_none());
    assert_eq!(reqs[1].body["input"].as_array().unwrap().len(), 3);
}

#[test]
fn the_provider_name_parses_and_the_endpoint_is_openais_convention() {
    let c =
        Config::from_json(r#"{"provider":"openai-responses","model":"m","api_key":""}"#).unwrap();
    assert_eq!(c.provider, KIND);
    assert_eq!(c.base_url, "https://api.openai.com/v1");
    assert_eq!(c.endpoint(), "https://api.openai.com/v1/responses");
    let c = Config::from_json(
        r#"{"provider":"openai-responses","model":"m","api_key":"","base_url":"http://localhost:11434/v1/","store":true}"#,
    )
    .unwrap();
    assert_eq!(c.endpoint(), "http://localhost:11434/v1/responses");
    assert!(c.store);
    assert_eq!(c.to_value()["provider"], "openai-responses");
}
