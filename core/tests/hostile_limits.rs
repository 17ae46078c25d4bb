//! What one response may make panto hold is capped ([`DecodeLimits`]), the OpenAI
//! tool-call accumulator costs the same per fragment however many calls are open, and a
//! response that arrives as one JSON body instead of a stream decodes into the same
//! events as the stream would have ([`decode_complete_body`]).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use panto::provider::{decode_complete_body, DecodeLimits, ProviderKind};
use panto::sse::SseParser;
use panto::{DeltaKind, ErrorKind, Event};
use panto_testkit::decode::sse::{named, unnamed as sse};
use panto_testkit::decode::{self, Outcome};
use serde_json::{json, Value};

const OA: ProviderKind = ProviderKind::OpenAi;
const AN: ProviderKind = ProviderKind::Anthropic;

/// Decodes `body` (fed in `piece`-byte chunks) with `limits`, like `http.rs` does.
fn decode_with(kind: ProviderKind, limits: DecodeLimits, body: &[u8], piece: usize) -> Outcome {
    decode::decode_limited(kind, limits, body.chunks(piece.max(1)))
}

fn limits(max_message_bytes: usize, max_blocks: usize, max_tool_calls: usize) -> DecodeLimits {
    DecodeLimits {
        max_message_bytes,
        max_blocks,
        max_tool_calls,
    }
}

/// The protocol error that ended decoding; it must name `limit`.
fn limit_error(o: &Outcome, limit: &str) {
    match &o.result {
        Ok(_) => panic!("decoding succeeded; expected {limit} to be exceeded"),
        Err(e) => {
            assert_eq!(e.kind, ErrorKind::Protocol, "{e}");
            assert!(e.message.contains(limit), "{e}");
        }
    }
}

fn oa_delta(d: Value) -> Value {
    json!({"choices": [{"index": 0, "delta": d}]})
}

fn oa_call(index: usize, id: &str, args: &str) -> Value {
    oa_delta(
        json!({"tool_calls": [{"index": index, "id": id, "type": "function",
                                    "function": {"name": "f", "arguments": args}}]}),
    )
}

fn oa_args(index: usize, args: &str) -> Value {
    oa_delta(json!({"tool_calls": [{"index": index, "function": {"arguments": args}}]}))
}

fn oa_finish(reason: &str) -> Value {
    json!({"choices": [{"index": 0, "delta": {}, "finish_reason": reason}]})
}

fn an_start() -> Value {
    json!({"type": "message_start", "message": {"id": "msg_1", "model": "claude-x",
           "usage": {"input_tokens": 1, "output_tokens": 1}}})
}

fn an_block(index: usize, block: Value) -> Value {
    json!({"type": "content_block_start", "index": index, "content_block": block})
}

fn an_text(index: usize, t: &str) -> Value {
    json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": t}})
}

fn an_stop(index: usize) -> Value {
    json!({"type": "content_block_stop", "index": index})
}

fn an_end() -> [Value; 2] {
    [
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 2}}),
        json!({"type": "message_stop"}),
    ]
}

// ------------------------------------------------------------------ limits (11)

#[test]
fn content_beyond_max_message_bytes_is_a_protocol_error() {
    // Arguments spread over many small events, each far below the event cap.
    let mut payloads = vec![oa_call(0, "c", "")];
    payloads.extend((0..100).map(|_| oa_args(0, "0123456789")));
    payloads.push(oa_finish("tool_calls"));
    let body = sse(&payloads) + "data: [DONE]\n\n";
    let o = decode_with(OA, limits(999, 8, 8), body.as_bytes(), 64);
    limit_error(&o, "max_message_bytes");
    // Decoding stopped at the limit: what was let through stays under it.
    let held: usize = o
        .events
        .iter()
        .map(|e| match e {
            Event::ContentDelta { text, .. } => text.len(),
            _ => 0,
        })
        .sum();
    assert!(held <= 999, "{held}");
    // Exactly at the limit is fine: 1000 bytes of arguments, the id and the name.
    let ok = decode_with(OA, limits(1002, 8, 8), body.as_bytes(), 64);
    assert!(ok.result.is_ok(), "{:?}", ok.result);

    // Anthropic text, and signatures, which are never shown as deltas but are held.
    let mut payloads = vec![an_start(), an_block(0, json!({"type": "text", "text": ""}))];
    payloads.extend((0..100).map(|_| an_text(0, "0123456789")));
    payloads.push(an_stop(0));
    payloads.extend(an_end());
    limit_error(
        &decode_with(AN, limits(500, 8, 8), named(&payloads).as_bytes(), 4096),
        "max_message_bytes",
    );
    let mut payloads = vec![
        an_start(),
        an_block(
            0,
            json!({"type": "thinking", "thinking": "", "signature": ""}),
        ),
    ];
    payloads.extend((0..100).map(|_| {
        json!({"type": "content_block_delta", "index": 0,
               "delta": {"type": "signature_delta", "signature": "0123456789"}})
    }));
    payloads.push(an_stop(0));
    payloads.extend(an_end());
    limit_error(
        &decode_with(AN, limits(500, 8, 8), named(&payloads).as_bytes(), 4096),
        "max_message_bytes",
    );
}

#[test]
fn default_limits_stop_an_endless_answer_at_32_mib() {
    let mib = "x".repeat(1 << 20);
    let chunk = format!("data: {}\n\n", oa_delta(json!({"content": mib})));
    let body = chunk.repeat(33) + "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
    let o = decode_with(OA, DecodeLimits::default(), body.as_bytes(), 1 << 16);
    limit_error(&o, "max_message_bytes");
    let deltas = o
        .events
        .iter()
        .filter(|e| matches!(e, Event::ContentDelta { .. }))
        .count();
    assert_eq!(deltas, 32);
    assert_eq!(
        DecodeLimits::default(),
        limits(32 << 20, 1024, 256),
        "documented defaults"
    );
}

#[test]
fn blocks_beyond_max_blocks_are_a_protocol_error() {
    // Anthropic: blocks panto shows and blocks it skips both count.
    for block in [
        json!({"type": "text", "text": "t"}),
        json!({"type": "server_tool_use", "id": "s", "name": "web_search", "input": {}}),
    ] {
        let mut payloads = vec![an_start()];
        for i in 0..9 {
            payloads.extend([an_block(i, block.clone()), an_stop(i)]);
        }
        payloads.extend(an_end());
        let body = named(&payloads);
        limit_error(
            &decode_with(AN, limits(1 << 20, 8, 8), body.as_bytes(), 4096),
            "max_blocks",
        );
        assert!(
            decode_with(AN, limits(1 << 20, 9, 8), body.as_bytes(), 4096)
                .result
                .is_ok()
        );
    }
    // OpenAI: alternating reasoning and text make a new block each time.
    let payloads: Vec<Value> = (0..9)
        .map(|i| {
            if i % 2 == 0 {
                oa_delta(json!({"reasoning_content": "r"}))
            } else {
                oa_delta(json!({"content": "c"}))
            }
        })
        .chain([oa_finish("stop")])
        .collect();
    let body = sse(&payloads) + "data: [DONE]\n\n";
    limit_error(
        &decode_with(OA, limits(1 << 20, 8, 8), body.as_bytes(), 4096),
        "max_blocks",
    );
}

#[test]
fn tool_calls_beyond_max_tool_calls_are_a_protocol_error() {
    let mut payloads: Vec<Value> = (0..5).map(|i| oa_call(i, &format!("c{i}"), "{}")).collect();
    payloads.push(oa_finish("tool_calls"));
    let body = sse(&payloads) + "data: [DONE]\n\n";
    limit_error(
        &decode_with(OA, limits(1 << 20, 64, 4), body.as_bytes(), 4096),
        "max_tool_calls",
    );
    assert!(
        decode_with(OA, limits(1 << 20, 64, 5), body.as_bytes(), 4096)
            .result
            .is_ok()
    );
    // The default allows 256.
    let mut payloads: Vec<Value> = (0..257)
        .map(|i| oa_call(i, &format!("c{i}"), "{}"))
        .collect();
    payloads.push(oa_finish("tool_calls"));
    let body = sse(&payloads) + "data: [DONE]\n\n";
    let o = decode_with(OA, DecodeLimits::default(), body.as_bytes(), 1 << 16);
    limit_error(&o, "max_tool_calls");
    let opened = o
        .events
        .iter()
        .filter(|e| matches!(e, Event::BlockStart { .. }))
        .count();
    assert_eq!(opened, 256);
}

#[test]
fn openai_parallel_calls_cost_the_same_per_fragment_however_many_are_open() {
    // 60,000 calls opened, then every call's arguments in a second pass. A fragment
    // that searched the open calls made this quadratic (over a minute here,
    // unoptimized); with a map from the wire index it is linear (a few seconds). The
    // bound is far from both.
    const N: usize = 60_000;
    let mut body = String::with_capacity(N * 250);
    for i in 0..N {
        body.push_str(&format!(
            "data: {}\n\n",
            oa_call(i, &format!("call_{i}"), "")
        ));
    }
    for i in 0..N {
        body.push_str(&format!("data: {}\n\n", oa_args(i, "{}")));
    }
    body.push_str(&format!(
        "data: {}\n\ndata: [DONE]\n\n",
        oa_finish("tool_calls")
    ));
    let many = limits(usize::MAX, N, N);
    let started = Instant::now();
    let o = decode_with(OA, many, body.as_bytes(), 1 << 16);
    let took = started.elapsed();
    let m = o.result.expect("decodes");
    assert_eq!(m.message.tool_calls().count(), N);
    assert!(took < Duration::from_secs(20), "{N} calls took {took:?}");
}

// ------------------------------------------------- complete JSON bodies (17c)

fn fixture(path: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/real")
        .join(path);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn sse_datas(body: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut parser = SseParser::default();
    parser
        .feed(body.as_bytes(), |ev| {
            if ev.event != "ping" {
                out.push(ev.data.to_owned());
            }
            Ok(())
        })
        .unwrap();
    out
}

/// What the provider's non-streaming API would have answered, accumulated from the
/// stream independently of panto: an OpenAI chat completion.
fn openai_complete(stream: &str) -> Value {
    let (mut id, mut model, mut content, mut reasoning, mut refusal) = (
        String::new(),
        String::new(),
        None::<String>,
        None::<String>,
        None::<String>,
    );
    let mut calls: BTreeMap<u64, (String, String, String)> = BTreeMap::new();
    let (mut finish, mut usage) = (Value::Null, Value::Null);
    for data in sse_datas(stream) {
        if data.starts_with("[DONE]") {
            break;
        }
        let c: Value = serde_json::from_str(&data).unwrap();
        if id.is_empty() {
            id = c["id"].as_str().unwrap_or("").into();
        }
        if model.is_empty() {
            model = c["model"].as_str().unwrap_or("").into();
        }
        if !c["usage"].is_null() {
            usage = c["usage"].clone();
        }
        let Some(choice) = c["choices"].as_array().and_then(|a| a.first()) else {
            continue;
        };
        let d = &choice["delta"];
        let append = |field: &mut Option<String>, v: &Value| {
            if let Some(s) = v.as_str() {
                field.get_or_insert_with(String::new).push_str(s);
            }
        };
        append(&mut content, &d["content"]);
        append(&mut refusal, &d["refusal"]);
        append(&mut reasoning, &d["reasoning_content"]);
        append(&mut reasoning, &d["reasoning"]);
        for tc in d["tool_calls"].as_array().into_iter().flatten() {
            let e = calls.entry(tc["index"].as_u64().unwrap()).or_default();
            if e.0.is_empty() {
                e.0 = tc["id"].as_str().unwrap_or("").into();
            }
            if e.1.is_empty() {
                e.1 = tc["function"]["name"].as_str().unwrap_or("").into();
            }
            e.2.push_str(tc["function"]["arguments"].as_str().unwrap_or(""));
        }
        if !choice["finish_reason"].is_null() {
            finish = choice["finish_reason"].clone();
        }
    }
    let mut message = json!({"role": "assistant", "content": content, "refusal": refusal});
    if let Some(r) = reasoning {
        message["reasoning_content"] = json!(r);
    }
    if !calls.is_empty() {
        message["tool_calls"] = calls
            .into_values()
            .map(|(id, name, args)| {
                json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}})
            })
            .collect();
    }
    json!({"id": id, "object": "chat.completion", "created": 1, "model": model,
           "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": finish}],
           "usage": usage})
}

/// The same for Anthropic: a complete message.
fn anthropic_complete(stream: &str) -> Value {
    let mut message = Value::Null;
    let mut blocks: BTreeMap<u64, Value> = BTreeMap::new();
    let mut inputs: BTreeMap<u64, String> = BTreeMap::new();
    for data in sse_datas(stream) {
        let ev: Value = serde_json::from_str(&data).unwrap();
        let index = ev["index"].as_u64().unwrap_or(0);
        match ev["type"].as_str().unwrap() {
            "message_start" => message = ev["message"].clone(),
            "content_block_start" => {
                blocks.insert(index, ev["content_block"].clone());
            }
            "content_block_delta" => {
                let b = blocks.get_mut(&index).unwrap();
                let d = &ev["delta"];
                let mut append = |field: &str, v: &Value| {
                    let old = b[field].as_str().unwrap_or("").to_owned();
                    b[field] = json!(old + v.as_str().unwrap());
                };
                match d["type"].as_str().unwrap() {
                    "text_delta" => append("text", &d["text"]),
                    "thinking_delta" => append("thinking", &d["thinking"]),
                    "signature_delta" => append("signature", &d["signature"]),
                    "input_json_delta" => inputs
                        .entry(index)
                        .or_default()
                        .push_str(d["partial_json"].as_str().unwrap()),
                    _ => {}
                }
            }
            "content_block_stop" => {
                if let Some(raw) = inputs.remove(&index).filter(|r| !r.is_empty()) {
                    blocks.get_mut(&index).unwrap()["input"] = serde_json::from_str(&raw).unwrap();
                }
            }
            "message_delta" => {
                message["stop_reason"] = ev["delta"]["stop_reason"].clone();
                for (k, v) in ev["usage"].as_object().into_iter().flatten() {
                    message["usage"][k] = v.clone();
                }
            }
            _ => {}
        }
    }
    message["content"] = blocks.into_values().collect();
    message
}

/// Events with each block's consecutive deltas joined into one, tool arguments
/// compared as JSON (a complete body re-serializes them).
fn normalized(events: &[Event]) -> Vec<Event> {
    let mut out: Vec<Event> = Vec::new();
    for ev in events {
        if let (
            Some(Event::ContentDelta {
                block: b0,
                text: t0,
                ..
            }),
            Event::ContentDelta { block, text, .. },
        ) = (out.last_mut(), ev)
        {
            if b0 == block {
                t0.push_str(text);
                continue;
            }
        }
        out.push(ev.clone());
    }
    for ev in &mut out {
        if let Event::ContentDelta {
            kind: DeltaKind::ToolArgs,
            text,
            ..
        } = ev
        {
            if let Ok(v) = serde_json::from_str::<Value>(text) {
                *text = v.to_string();
            }
        }
    }
    out
}

fn complete(
    kind: ProviderKind,
    body: &str,
) -> (
    Vec<Event>,
    panto::Result<Option<panto::provider::DecodedMessage>>,
) {
    let mut events = Vec::new();
    let r = decode_complete_body(kind, 0, body, DecodeLimits::default(), &mut |ev| {
        events.push(ev);
        Ok(())
    });
    (events, r)
}

#[test]
fn complete_json_bodies_decode_to_the_events_of_the_stream() {
    let cases = [
        (OA, "openai/gpt-4o-mini-tool-call-text-in-first-chunk.sse"),
        (OA, "openai/gpt-4o-parallel-tool-calls-usage.sse"),
        (OA, "openai/gpt-4o-refusal-usage.sse"),
        (OA, "openai/gpt-4o-length-usage.sse"),
        (OA, "deepseek/reasoner-reasoning-content.sse"),
        (OA, "groq/gpt-oss-120b-reasoning-tool-call-x-groq.sse"),
        (AN, "anthropic/haiku-4-5-thinking-then-tool-use.sse"),
        (AN, "anthropic/sonnet-4-text-then-parallel-tool-use.sse"),
        (AN, "anthropic/sonnet-4-5-redacted-thinking.sse"),
        (AN, "anthropic/haiku-4-5-text-utf8.sse"),
        (AN, "anthropic/sonnet-4-max-tokens.sse"),
    ];
    for (kind, path) in cases {
        let stream = fixture(path);
        let streamed = decode::decode(kind, stream.as_bytes());
        let want = streamed
            .result
            .as_ref()
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        let body = match kind {
            ProviderKind::OpenAi => openai_complete(&stream),
            ProviderKind::Anthropic => anthropic_complete(&stream),
            ProviderKind::Gemini => {
                unreachable!("Gemini has tests of its own (core/tests/gemini.rs)")
            }
            other => unreachable!("{other:?}: see core/tests/responses.rs"),
        }
        .to_string();
        let (events, got) = complete(kind, &body);
        let got = got
            .unwrap_or_else(|e| panic!("{path}: {e}"))
            .unwrap_or_else(|| panic!("{path}: not recognized as a complete body\n{body}"));
        assert_eq!(&got, want, "{path}: decoded message");
        assert_eq!(
            normalized(&events),
            normalized(&streamed.events),
            "{path}: events\n{body}"
        );
        // One delta per block, as documented.
        let deltas = events
            .iter()
            .filter(|e| matches!(e, Event::ContentDelta { .. }))
            .count();
        assert_eq!(
            deltas,
            normalized(&events)
                .iter()
                .filter(|e| matches!(e, Event::ContentDelta { .. }))
                .count(),
            "{path}"
        );
        decode::check_invariants(
            &Outcome {
                events,
                result: Ok(got),
            },
            0,
        )
        .unwrap_or_else(|why| panic!("{path}: {why}"));
    }
}

#[test]
fn bodies_that_are_not_a_complete_message_are_left_to_the_caller() {
    for (kind, body) in [
        (
            OA,
            r#"{"error":{"message":"bad","type":"invalid_request_error"}}"#,
        ),
        (OA, r#"{"error":"model not loaded"}"#),
        (
            OA,
            r#"{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{}}]}"#,
        ),
        (OA, r#"{"object":"chat.completion","choices":[]}"#),
        (
            OA,
            r#"{"type":"message","content":[],"stop_reason":"end_turn"}"#,
        ),
        (
            AN,
            r#"{"type":"error","error":{"type":"overloaded_error","message":"busy"}}"#,
        ),
        (
            AN,
            r#"{"object":"chat.completion","choices":[{"index":0,"message":{"content":"x"}}]}"#,
        ),
        (AN, "not json"),
        (OA, ""),
        (AN, "[1,2]"),
    ] {
        let (events, r) = complete(kind, body);
        assert!(matches!(r, Ok(None)), "{body}: {r:?}");
        assert!(events.is_empty(), "{body}");
    }
}

#[test]
fn complete_bodies_are_held_to_the_limits() {
    let text = "x".repeat(2000);
    let body = json!({"type": "message", "id": "m", "model": "c", "role": "assistant",
                      "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
                      "usage": {"input_tokens": 1, "output_tokens": 2}})
    .to_string();
    let r = decode_complete_body(AN, 0, &body, limits(1000, 8, 8), &mut |_| Ok(()));
    let e = r.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Protocol);
    assert!(e.message.contains("max_message_bytes"), "{e}");
    let calls: Vec<Value> = (0..3)
        .map(|i| json!({"id": format!("c{i}"), "type": "function", "function": {"name": "f", "arguments": "{}"}}))
        .collect();
    let body = json!({"object": "chat.completion", "choices": [{"index": 0,
        "message": {"role": "assistant", "content": null, "tool_calls": calls}, "finish_reason": "tool_calls"}]})
    .to_string();
    let e = decode_complete_body(OA, 0, &body, limits(1000, 8, 2), &mut |_| Ok(())).unwrap_err();
    assert!(e.message.contains("max_tool_calls"), "{e}");
    let m = decode_complete_body(OA, 4, &body, limits(1000, 8, 3), &mut |_| Ok(()))
        .unwrap()
        .unwrap();
    assert_eq!(m.message.tool_calls().count(), 3);
}
