//! Hostile and broken input from servers and models: nothing may panic, abort or grow
//! memory without bound, and defects that do not change an answer's meaning (duplicate
//! keys, a surrogate pair split across events, usage figures that are not counts) must
//! not throw the answer away. Also the request bodies panto sends back, which must stay
//! acceptable to the provider whatever history the earlier answers left.

use std::time::Duration;

use panto::provider::{http_error, request_body, DecodedMessage, ProviderKind, RequestParams};
use panto::retry::{delay, RetryHints};
use panto::{Block, ErrorKind, Event, Message, RetryConfig, Role, Usage};
use panto_testkit::decode::sse::named;
use panto_testkit::decode::sse::{unnamed as sse, unnamed_raw as sse_raw};
use panto_testkit::decode::{check_invariants, decode, Outcome};
use panto_testkit::decode::{decode_checked, decoded as ok};
use reqwest::header::{HeaderMap, HeaderValue};
use serde_json::{json, Value};

const OA: ProviderKind = ProviderKind::OpenAi;
const AN: ProviderKind = ProviderKind::Anthropic;
const RS: ProviderKind = ProviderKind::OpenAiResponses;
const DONE: &str = "data: [DONE]\n\n";

// ---------------------------------------------------------------- helpers

/// Decodes whole, checks the event invariants and that 1-byte and 7-byte chunking give
/// the same outcome.
fn run(kind: ProviderKind, body: &str) -> Outcome {
    decode_checked(kind, body, &[1, 7])
}

fn protocol_error(o: &Outcome) -> String {
    match &o.result {
        Ok(m) => panic!("decoding succeeded: {m:#?}"),
        Err(e) => {
            assert_eq!(e.kind, ErrorKind::Protocol, "{e}");
            e.message.clone()
        }
    }
}

fn deltas(o: &Outcome) -> Vec<&str> {
    o.events
        .iter()
        .filter_map(|e| match e {
            Event::ContentDelta { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

fn call_ids(m: &DecodedMessage) -> Vec<&str> {
    m.message
        .tool_calls()
        .map(|b| match b {
            Block::ToolCall { call_id, .. } => call_id.as_str(),
            _ => unreachable!(),
        })
        .collect()
}

fn text_chunk(t: &str) -> Value {
    json!({"choices": [{"index": 0, "delta": {"content": t}}]})
}

fn finish(reason: &str) -> Value {
    json!({"choices": [{"index": 0, "delta": {}, "finish_reason": reason}]})
}

/// Anthropic events, each named after its `type`.
fn named_raw(datas: &[&str]) -> String {
    datas
        .iter()
        .map(|d| {
            let v: Value = serde_json::from_str(d).unwrap_or(Value::Null);
            let name = v["type"].as_str().unwrap_or("message").to_owned();
            format!("event: {name}\ndata: {d}\n\n")
        })
        .collect()
}

fn msg_start() -> Value {
    json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
        "model": "claude-x", "content": [], "stop_reason": null,
        "usage": {"input_tokens": 10, "output_tokens": 1}}})
}

fn text_start(index: u64) -> Value {
    json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}})
}

fn text_delta(index: u64, t: &str) -> Value {
    json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": t}})
}

fn block_stop(index: u64) -> Value {
    json!({"type": "content_block_stop", "index": index})
}

fn tool_start(index: u64, id: &str, name: &str) -> Value {
    json!({"type": "content_block_start", "index": index,
           "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}})
}

fn msg_end(reason: &str) -> [Value; 2] {
    [
        json!({"type": "message_delta", "delta": {"stop_reason": reason}, "usage": {"output_tokens": 5}}),
        json!({"type": "message_stop"}),
    ]
}

fn anthropic(events: Vec<Value>) -> String {
    named(&events)
}

// ------------------------------------------------- Anthropic block indices (6)

#[test]
fn anthropic_huge_block_index_is_a_protocol_error_not_an_allocation() {
    // 2^32 made panto allocate 68 GB (abort), 10^8 1.5 GB, u64::MAX overflowed.
    for index in [4_294_967_296u64, 100_000_000, u64::MAX, 65] {
        let mut events = vec![msg_start(), text_start(index), text_delta(index, "x")];
        events.extend(msg_end("end_turn"));
        let o = run(AN, &anthropic(events));
        let why = protocol_error(&o);
        assert!(why.contains(&index.to_string()), "{why}");
    }
    // The gap is measured from the highest index seen so far.
    let mut events = vec![
        msg_start(),
        text_start(10),
        text_delta(10, "a"),
        block_stop(10),
    ];
    events.extend([text_start(75), text_delta(75, "b"), block_stop(75)]);
    events.extend(msg_end("end_turn"));
    assert!(protocol_error(&run(AN, &anthropic(events))).contains("75"));
}

#[test]
fn anthropic_negative_or_fractional_index_is_a_protocol_error() {
    for index in ["-1", "1.5", "\"0\"", "1e3", "18446744073709551616"] {
        let start = format!(
            r#"{{"type":"content_block_start","index":{index},"content_block":{{"type":"text","text":""}}}}"#
        );
        let body = named_raw(&[&msg_start().to_string(), &start]);
        protocol_error(&run(AN, &body));
    }
}

#[test]
fn anthropic_sparse_indices_within_the_gap_decode_in_order() {
    let mut events = vec![msg_start()];
    for (i, index) in [0u64, 64, 100, 164].into_iter().enumerate() {
        events.extend([
            text_start(index),
            text_delta(index, &i.to_string()),
            block_stop(index),
        ]);
    }
    // Deltas and stops for indices never started, however large, are ignored.
    events.extend([
        text_delta(u64::MAX, "no"),
        block_stop(u64::MAX),
        block_stop(7),
    ]);
    events.extend(msg_end("end_turn"));
    let o = run(AN, &anthropic(events));
    assert_eq!(ok(&o).message.text(), "0123");
    assert_eq!(ok(&o).message.content.len(), 4);
}

// ------------------------------------------------------------ retry hints (7)

fn hints(name: &'static str, value: &str) -> RetryHints {
    let mut h = HeaderMap::new();
    h.insert(name, HeaderValue::from_str(value).unwrap());
    RetryHints::from_headers(&h)
}

#[test]
fn absurd_retry_after_values_fall_back_to_the_backoff_without_panicking() {
    let cfg = RetryConfig {
        max_retries: 3,
        initial_delay_ms: 100,
        max_delay_ms: 400,
        ..RetryConfig::default()
    };
    for value in [
        "1e30",
        "99999999999999999999",
        "1e400",
        "inf",
        "-inf",
        "NaN",
        "-5",
        "18446744073709551616",
    ] {
        for header in ["retry-after", "retry-after-ms"] {
            let h = hints(header, value);
            let wait = delay(1, &cfg, &h);
            assert!(
                wait <= Duration::from_millis(100),
                "{header}: {value} → {wait:?}"
            );
        }
    }
    // Sane hints are still honoured.
    assert_eq!(
        delay(1, &cfg, &hints("retry-after", "2")),
        Duration::from_secs(2)
    );
    assert_eq!(
        delay(1, &cfg, &hints("retry-after-ms", "0")),
        Duration::ZERO
    );
}

// ------------------------------------------------------------------ usage (8)

#[test]
fn usage_add_saturates_instead_of_overflowing() {
    let mut total = Usage {
        input_tokens: u64::MAX - 1,
        output_tokens: u64::MAX,
        cache_read_tokens: 1,
        cache_write_tokens: u64::MAX,
        reasoning_tokens: 0,
        reported: true,
    };
    total.add(&Usage {
        input_tokens: 5,
        output_tokens: u64::MAX,
        cache_read_tokens: 2,
        cache_write_tokens: 1,
        reasoning_tokens: 3,
        reported: true,
    });
    assert_eq!(
        total,
        Usage {
            input_tokens: u64::MAX,
            output_tokens: u64::MAX,
            cache_read_tokens: 3,
            cache_write_tokens: u64::MAX,
            reasoning_tokens: 3,
            reported: true,
        }
    );
    // One part the provider did not report makes the sum unknown; its counts are kept.
    total.add(&Usage::default());
    assert!(!total.reported);
    assert_eq!(total.input_tokens, u64::MAX);
    let mut from_start = Usage::TOTAL;
    from_start.add(&Usage {
        output_tokens: 4,
        reported: true,
        ..Usage::default()
    });
    assert!(from_start.reported);
    assert_eq!(from_start.output_tokens, 4);
}

#[test]
fn openai_usage_values_that_are_not_counts_are_ignored() {
    let usage = r#"{"choices":[],"usage":{"prompt_tokens":-1,"completion_tokens":7,
        "prompt_tokens_details":{"cached_tokens":"3"},
        "completion_tokens_details":{"reasoning_tokens":2.5},
        "prompt_cache_hit_tokens":99999999999999999999}}"#
        .replace('\n', "");
    let body = sse(&[text_chunk("hi"), finish("stop")]) + &sse_raw(&[&usage]) + DONE;
    let m = ok(&run(OA, &body)).clone();
    assert_eq!(m.message.text(), "hi");
    assert_eq!(
        m.usage,
        Usage {
            output_tokens: 7,
            reported: true,
            ..Usage::default()
        }
    );
    // Whole objects of the wrong shape, and integral floats, which are counts.
    let odd = r#"{"choices":[],"usage":{"prompt_tokens":12.0,"completion_tokens":{"n":1},"prompt_tokens_details":"n/a","completion_tokens_details":[1]}}"#;
    let body = sse(&[text_chunk("hi"), finish("stop")]) + &sse_raw(&[odd]) + DONE;
    assert_eq!(ok(&run(OA, &body)).usage.input_tokens, 12);
    let not_an_object = r#"{"choices":[],"usage":"unavailable"}"#;
    let body = sse(&[text_chunk("hi"), finish("stop")]) + &sse_raw(&[not_an_object]) + DONE;
    assert_eq!(ok(&run(OA, &body)).usage, Usage::default());
    // A report with no valid input or output count reports nothing: unknown, not zero.
    let no_counts = r#"{"choices":[],"usage":{"prompt_tokens":-1,"completion_tokens":"7","prompt_tokens_details":{"cached_tokens":3}}}"#;
    let body = sse(&[text_chunk("hi"), finish("stop")]) + &sse_raw(&[no_counts]) + DONE;
    let u = ok(&run(OA, &body)).usage;
    assert!(!u.reported, "{u:?}");
    assert_eq!(u.cache_read_tokens, 3);
}

#[test]
fn anthropic_usage_values_that_are_not_counts_are_ignored() {
    let start = r#"{"type":"message_start","message":{"id":"m","model":"c","usage":{"input_tokens":-3,"output_tokens":1,"cache_read_input_tokens":"x","cache_creation_input_tokens":1e300}}}"#;
    let delta = r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":12.5,"input_tokens":40}}"#;
    let odd_delta = r#"{"type":"message_delta","delta":{},"usage":"n/a"}"#;
    let body = named_raw(&[
        start,
        &text_start(0).to_string(),
        &text_delta(0, "ok").to_string(),
        &block_stop(0).to_string(),
        delta,
        odd_delta,
        r#"{"type":"message_stop"}"#,
    ]);
    let m = ok(&run(AN, &body)).clone();
    assert_eq!(m.message.text(), "ok");
    assert_eq!(
        m.usage,
        Usage {
            input_tokens: 40,
            output_tokens: 1,
            reported: true,
            ..Usage::default()
        }
    );
}

// ------------------------------------------- duplicate keys, surrogates (9)

#[test]
fn duplicate_keys_keep_the_answer_and_the_last_value_wins() {
    let body = sse_raw(&[
        r#"{"id":"x","id":"y","choices":[{"index":0,"delta":{"content":"a","content":"b"}}]}"#,
        r#"{"model":"m","choices":[{"index":0,"delta":{"content":"c"},"delta":{"content":"d"}}],"choices":[{"index":0,"delta":{"content":"e"}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"index":0,"id":"c1","function":{"name":"f","name":"g","arguments":"{\"k\":1,\"k\":2}"}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls","finish_reason":"stop"}]}"#,
    ]) + DONE;
    let o = run(OA, &body);
    let m = ok(&o);
    assert_eq!(m.message.text(), "be");
    assert_eq!(m.response_id.as_deref(), Some("y"));
    assert_eq!(
        m.message.tool_calls().next(),
        Some(&Block::ToolCall {
            call_id: "c1".into(),
            name: "g".into(),
            arguments: Some(json!({"k": 2})),
            arguments_raw: None,
        })
    );
    assert_eq!(m.stop_reason, panto::StopReason::EndTurn);

    let body = named_raw(&[
        &msg_start().to_string(),
        &text_start(0).to_string(),
        r#"{"type":"content_block_delta","index":0,"index":0,"delta":{"type":"text_delta","text":"x","text":"y"}}"#,
        &block_stop(0).to_string(),
        r#"{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_reason":"max_tokens"},"usage":{"output_tokens":1,"output_tokens":2}}"#,
        r#"{"type":"message_stop"}"#,
    ]);
    let o = run(AN, &body);
    let m = ok(&o);
    assert_eq!(m.message.text(), "y");
    assert_eq!(m.stop_reason, panto::StopReason::MaxTokens);
    assert_eq!(m.usage.output_tokens, 2);
}

#[test]
fn openai_surrogate_pair_split_across_deltas_is_joined() {
    let body = sse_raw(&[
        r#"{"choices":[{"index":0,"delta":{"content":"ab\ud83d"}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":"\ude00cd"}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":"\ud83d"}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":"\ude01"}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"reasoning_content":"\ud83e"}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"reasoning_content":"\udd14!"}}]}"#,
    ]) + &sse(&[finish("stop")])
        + DONE;
    let o = run(OA, &body);
    let m = ok(&o);
    assert_eq!(m.message.text(), "ab😀cd😁");
    assert_eq!(deltas(&o), vec!["ab", "😀cd", "😁", "🤔!"]);
}

#[test]
fn anthropic_surrogate_pair_split_across_deltas_is_joined() {
    let body = named_raw(&[
        &msg_start().to_string(),
        &text_start(0).to_string(),
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x\ud83d"}}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"\ude00"}}"#,
        &block_stop(0).to_string(),
        &tool_start(1, "toolu_1", "say").to_string(),
        r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"s\":\"\\ud83d"}}"#,
        r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"\\ude00\"}"}}"#,
        &block_stop(1).to_string(),
        r#"{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":5}}"#,
        r#"{"type":"message_stop"}"#,
    ]);
    let o = run(AN, &body);
    let m = ok(&o);
    assert_eq!(m.message.text(), "x😀");
    assert_eq!(
        m.message.tool_calls().next(),
        Some(&Block::ToolCall {
            call_id: "toolu_1".into(),
            name: "say".into(),
            arguments: Some(json!({"s": "😀"})),
            arguments_raw: None,
        })
    );
}

#[test]
fn lone_surrogates_decode_as_replacement_characters() {
    let r = "\u{FFFD}";
    let body = sse_raw(&[
        // A high surrogate followed by a delta that does not complete it.
        r#"{"choices":[{"index":0,"delta":{"content":"a\ud83d"}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":"b"}}]}"#,
        // Lone surrogates inside a string, a reversed pair, then a pair split across
        // deltas after all, and a high one left at the end of the block.
        r#"{"choices":[{"index":0,"delta":{"content":"c\udc00d\ud800e\ude00\ud83d"}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":"\udc00\ud83d"}}]}"#,
    ]) + &sse(&[finish("stop")])
        + DONE;
    let o = run(OA, &body);
    assert_eq!(
        ok(&o).message.text(),
        format!("a{r}bc{r}d{r}e{r}\u{1F400}{r}")
    );
    // That last U+FFFD arrives as its own delta when the block closes.
    assert_eq!(deltas(&o).last(), Some(&r));
    // In ids, names and arguments (escaped inside the arguments' JSON).
    let body = sse_raw(&[
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c\ud800","function":{"name":"f\udfff","arguments":"{\"q\":\"\\ud83d\"}"}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
    ]) + DONE;
    let o = decode(OA, body.as_bytes());
    assert_eq!(
        ok(&o).message.tool_calls().next(),
        Some(&Block::ToolCall {
            call_id: format!("c{r}"),
            name: format!("f{r}"),
            arguments: Some(json!({"q": r})),
            arguments_raw: None,
        })
    );
    // Noncharacters the server really sent are kept as U+FFFD in a repaired event, never
    // mistaken for anything else.
    let body = sse_raw(&[
        "{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\u{FFFE}\\ufdd0\\ufdd0x\\ud800\"}}]}",
    ]) + &sse(&[finish("stop")])
        + DONE;
    assert_eq!(
        ok(&run(OA, &body)).message.text(),
        format!("{r}\u{FDD0}\u{FDD0}x{r}")
    );
}

// -------------------------------------------------- duplicate call ids (12)

#[test]
fn repeated_tool_call_ids_get_distinct_ids() {
    let calls = |calls: Value| json!({"choices": [{"index": 0, "delta": {"tool_calls": calls}}]});
    let body = sse(&[
        calls(json!([{"index": 0, "id": "call_x", "function": {"name": "f", "arguments": "{}"}}])),
        calls(json!([{"index": 1, "id": "call_x", "function": {"name": "g", "arguments": "{}"}}])),
        // No id at all: the generated one must not collide with a real id either.
        calls(json!([{"index": 2, "function": {"name": "h", "arguments": "{}"}}])),
        calls(
            json!([{"index": 3, "id": "call_0_2", "function": {"name": "i", "arguments": "{}"}}]),
        ),
        finish("tool_calls"),
    ]) + DONE;
    let o = run(OA, &body);
    let ids = call_ids(ok(&o));
    // An id is generated when its block closes, after the server's own ids were seen.
    assert_eq!(ids, vec!["call_x", "call_x_1", "call_0_2_2", "call_0_2"]);
    let mut announced: Vec<&str> = o
        .events
        .iter()
        .filter_map(|e| match e {
            Event::ToolDetails { call_id, .. } => Some(call_id.as_str()),
            _ => None,
        })
        .collect();
    announced.sort_unstable();
    let mut sorted = ids.clone();
    sorted.sort_unstable();
    assert_eq!(announced, sorted);

    let mut events = vec![msg_start()];
    for i in 0..3 {
        events.extend([tool_start(i, "toolu_1", "f"), block_stop(i)]);
    }
    events.extend(msg_end("tool_use"));
    let o = run(AN, &anthropic(events));
    assert_eq!(call_ids(ok(&o)), vec!["toolu_1", "toolu_1_1", "toolu_1_2"]);
}

// ------------------------------------------------------ request bodies (14, 15)

fn params<'a>(model: &'a str, messages: &'a [Message]) -> RequestParams<'a> {
    RequestParams {
        model,
        system: None,
        max_tokens: None,
        temperature: None,
        tools: &[],
        messages,
    }
}

fn assistant(content: Vec<Block>) -> Message {
    Message {
        role: Role::Assistant,
        content,
    }
}

#[test]
fn openai_empty_assistant_message_is_sent_with_empty_string_content() {
    for empty in [
        vec![],
        vec![Block::text("")],
        vec![Block::Reasoning {
            text: "hm".into(),
            signature: None,
        }],
    ] {
        let history = [Message::user("a"), assistant(empty), Message::user("b")];
        let body = request_body(OA, &params("m", &history));
        assert_eq!(
            body["messages"][1],
            json!({"role": "assistant", "content": ""}),
            "{body}"
        );
    }
}

#[test]
fn anthropic_request_never_has_empty_content_or_unsigned_thinking() {
    let history = [
        Message::user("a"),
        assistant(vec![
            Block::Reasoning {
                text: "unsigned".into(),
                signature: None,
            },
            Block::Reasoning {
                text: "empty signature".into(),
                signature: Some(String::new()),
            },
            Block::RedactedReasoning {
                data: String::new(),
            },
            Block::text(""),
        ]),
        Message::user("b"),
        assistant(vec![
            Block::Reasoning {
                text: "signed".into(),
                signature: Some("sig".into()),
            },
            Block::RedactedReasoning {
                data: "opaque".into(),
            },
            Block::text("answer"),
        ]),
        Message::user("c"),
    ];
    let body = request_body(AN, &params("m", &history));
    assert_eq!(
        body["messages"],
        json!([
            // The assistant message left empty is dropped; its neighbours merge.
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "signed", "signature": "sig"},
                {"type": "redacted_thinking", "data": "opaque"},
                {"type": "text", "text": "answer"},
            ]},
            {"role": "user", "content": "c"},
        ])
    );
    // Tool results followed by a user message (a turn cancelled after its tools ran):
    // one user message, results first.
    let history = [
        Message::user("a"),
        assistant(vec![Block::ToolCall {
            call_id: "t1".into(),
            name: "f".into(),
            arguments: Some(json!({})),
            arguments_raw: None,
        }]),
        Message {
            role: Role::Tool,
            content: vec![Block::ToolResult {
                call_id: "t1".into(),
                name: "f".into(),
                output: "cancelled".into(),
                is_error: true,
                parts: Vec::new(),
            }],
        },
        Message::user("b"),
    ];
    let body = request_body(AN, &params("m", &history));
    assert_eq!(body["messages"].as_array().unwrap().len(), 3, "{body}");
    assert_eq!(
        body["messages"][2]["content"],
        json!([
            {"type": "tool_result", "tool_use_id": "t1", "content": "cancelled", "is_error": true},
            {"type": "text", "text": "b"},
        ])
    );
}

// ------------------------------------------------------------ error bodies (17a)

#[test]
fn string_valued_error_bodies_keep_their_message() {
    let e = http_error(
        404,
        r#"{"error":"model 'llama9' not found, try pulling it first"}"#,
    );
    assert_eq!(e.kind, ErrorKind::NotFound);
    assert_eq!(
        e.message,
        "HTTP 404: model 'llama9' not found, try pulling it first"
    );
    // The other shapes still work.
    let e = http_error(
        429,
        r#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#,
    );
    assert_eq!(
        (e.message.as_str(), e.provider_code.as_deref()),
        ("HTTP 429: slow down", Some("rate_limit_error"))
    );
    assert_eq!(
        http_error(500, r#"{"message":"boom"}"#).message,
        "HTTP 500: boom"
    );
    // In a stream too.
    let body = sse(&[text_chunk("a")]) + "event: error\ndata: {\"error\":\"model not loaded\"}\n\n";
    let o = run(OA, &body);
    let e = o.result.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Provider);
    assert!(e.message.ends_with(": model not loaded"), "{}", e.message);
}

// ------------------------------------------------------------- anything at all

mod never_panics {
    use super::*;
    use panto::provider::{decode_complete_body, DecodeLimits};
    use proptest::prelude::*;

    /// Keys and strings the decoders look at, so that random trees reach their paths.
    const KEYS: &[&str] = &[
        "type",
        "index",
        "message",
        "content_block",
        "delta",
        "usage",
        "id",
        "model",
        "choices",
        "content",
        "text",
        "thinking",
        "signature",
        "data",
        "name",
        "input",
        "partial_json",
        "stop_reason",
        "finish_reason",
        "tool_calls",
        "function",
        "arguments",
        "reasoning_content",
        "refusal",
        "error",
        "input_tokens",
        "output_tokens",
        "prompt_tokens",
        "object",
    ];
    const STRINGS: &[&str] = &[
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
        "text",
        "thinking",
        "tool_use",
        "redacted_thinking",
        "text_delta",
        "thinking_delta",
        "signature_delta",
        "input_json_delta",
        "end_turn",
        "tool_use",
        "stop",
        "length",
        "tool_calls",
        "message",
        "chat.completion",
        "{",
        "}",
        "{\"a\":",
        "SURR_HI",
        "SURR_LO",
        "xSURR_HISURR_LO",
        "\u{FFFE}",
        "\u{FDD0}\u{FDEF}",
        "é",
        "",
    ];

    fn leaf() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            prop_oneof![
                Just(0i64),
                Just(1),
                Just(-1),
                Just(64),
                Just(65),
                Just(i64::MAX),
                0i64..4
            ]
            .prop_map(Value::from),
            prop_oneof![Just(u64::MAX), Just(4_294_967_296u64)].prop_map(Value::from),
            prop_oneof![Just(1e30f64), Just(0.5), Just(-0.0)].prop_map(Value::from),
            proptest::sample::select(STRINGS).prop_map(Value::from),
        ]
    }

    fn value() -> impl Strategy<Value = Value> {
        leaf().prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::vec((proptest::sample::select(KEYS), inner), 0..6).prop_map(
                    |kv| {
                        Value::Object(kv.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
                    }
                ),
            ]
        })
    }

    /// Serializes, then plants lone surrogates and duplicate keys where the tree asked
    /// for them.
    fn hostile_text(v: &Value) -> String {
        v.to_string()
            .replace("SURR_HI", "\\ud83d")
            .replace("SURR_LO", "\\ude00")
            .replacen("{\"", "{\"index\":1,\"", 1)
    }

    /// Well-formed streams of each provider, with text, reasoning and parallel calls.
    fn skeleton(kind: ProviderKind) -> Vec<Value> {
        match kind {
            ProviderKind::OpenAi => vec![
                json!({"id": "c", "model": "m", "choices": [{"index": 0, "delta": {"reasoning_content": "r"}}]}),
                json!({"choices": [{"index": 0, "delta": {"content": "hi"}}]}),
                json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "a", "function": {"name": "f", "arguments": "{\"x\""}}]}}]}),
                json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 1, "id": "b", "function": {"name": "g", "arguments": ""}}]}}]}),
                json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": ":1}"}}]}}]}),
                json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
                json!({"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 2,
                       "prompt_tokens_details": {"cached_tokens": 1}}}),
            ],
            ProviderKind::Anthropic => vec![
                json!({"type": "message_start", "message": {"id": "m", "model": "c", "usage": {"input_tokens": 1}}}),
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "hm"}}),
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "s"}}),
                json!({"type": "content_block_stop", "index": 0}),
                json!({"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}}),
                json!({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "a"}}),
                json!({"type": "content_block_stop", "index": 1}),
                json!({"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "t", "name": "f", "input": {}}}),
                json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "{\"x\":1}"}}),
                json!({"type": "content_block_stop", "index": 2}),
                json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 3}}),
                json!({"type": "message_stop"}),
            ],
            ProviderKind::Gemini => {
                unreachable!("Gemini has tests of its own (core/tests/gemini.rs)")
            }
            RS => vec![
                json!({"type": "response.created", "response": {"id": "r", "model": "m"}}),
                json!({"type": "response.output_item.added", "output_index": 0, "item": {"type": "reasoning", "id": "rs", "summary": []}}),
                json!({"type": "response.reasoning_summary_text.delta", "item_id": "rs", "output_index": 0, "summary_index": 0, "delta": "hm"}),
                json!({"type": "response.output_item.done", "output_index": 0, "item": {"type": "reasoning", "id": "rs", "summary": [{"type": "summary_text", "text": "hm"}], "encrypted_content": "e"}}),
                json!({"type": "response.output_item.added", "output_index": 1, "item": {"type": "message", "id": "m1", "role": "assistant", "content": []}}),
                json!({"type": "response.output_text.delta", "item_id": "m1", "output_index": 1, "content_index": 0, "delta": "hi"}),
                json!({"type": "response.output_item.added", "output_index": 2, "item": {"type": "function_call", "id": "fc", "call_id": "a", "name": "f", "arguments": ""}}),
                json!({"type": "response.function_call_arguments.delta", "item_id": "fc", "output_index": 2, "delta": "{\"x\":1}"}),
                json!({"type": "response.output_item.done", "output_index": 2, "item": {"type": "function_call", "id": "fc", "call_id": "a", "name": "f", "arguments": "{\"x\":1}"}}),
                json!({"type": "response.completed", "response": {"usage": {"input_tokens": 1, "output_tokens": 2, "input_tokens_details": {"cached_tokens": 1}}}}),
            ],
        }
    }

    /// Replaces the value at a path chosen by `choices` (one choice per level; a path
    /// that ends early replaces the value where it ends).
    fn mutate(v: &mut Value, choices: &[usize], with: Value) {
        let Some((c, rest)) = choices.split_first() else {
            *v = with;
            return;
        };
        match v {
            Value::Object(o) if !o.is_empty() => {
                let key = o.keys().nth(c % o.len()).cloned().unwrap_or_default();
                if let Some(n) = o.get_mut(&key) {
                    mutate(n, rest, with);
                }
            }
            Value::Array(a) if !a.is_empty() => {
                let n = a.len();
                if let Some(item) = a.get_mut(c % n) {
                    mutate(item, rest, with);
                }
            }
            _ => *v = with,
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        #[test]
        fn no_mutated_stream_panics_a_decoder(
            mutations in proptest::collection::vec(
                (any::<usize>(), proptest::collection::vec(any::<usize>(), 1..6), leaf()),
                1..6,
            ),
            drop_from in proptest::option::of(any::<usize>()),
        ) {
            for kind in [OA, AN, RS] {
                let mut events = skeleton(kind);
                for (which, path, with) in &mutations {
                    let n = events.len();
                    if let Some(ev) = events.get_mut(which % n) {
                        mutate(ev, path, with.clone());
                    }
                }
                if let Some(d) = drop_from {
                    let n = events.len();
                    events.remove(d % n);
                }
                let datas: Vec<String> = events.iter().map(hostile_text).collect();
                let refs: Vec<&str> = datas.iter().map(String::as_str).collect();
                let body = match kind {
                    ProviderKind::OpenAi => sse_raw(&refs) + DONE,
                    ProviderKind::Anthropic => named_raw(&refs),
                    ProviderKind::Gemini => unreachable!("Gemini has tests of its own (core/tests/gemini.rs)"),
                    _ => sse_raw(&refs),
                };
                let o = decode(kind, body.as_bytes());
                // Whatever came through still obeys the event contract.
                if let Err(why) = check_invariants(&o, 0) {
                    // Arguments that are not JSON after lossy repair are checked
                    // strictly by the invariant checker; anything else is a bug.
                    prop_assert!(why.contains("arguments"), "{why}\n{body}");
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        #[test]
        fn no_event_sequence_panics_a_decoder(events in proptest::collection::vec(value(), 1..12)) {
            let datas: Vec<String> = events.iter().map(hostile_text).collect();
            let refs: Vec<&str> = datas.iter().map(String::as_str).collect();
            let body = sse_raw(&refs) + DONE;
            for kind in [OA, AN, RS] {
                let _ = decode(kind, body.as_bytes());
                for data in &datas {
                    let _ = decode_complete_body(kind, 0, data, DecodeLimits::default(), &mut |_| Ok(()));
                }
            }
        }
    }
}
