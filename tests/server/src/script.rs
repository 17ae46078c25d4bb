//! Builders for scripted provider responses, so Rust tests describe a turn in a line
//! ("the model calls weather, then says X") instead of hand-writing SSE JSON. They produce
//! the same scenario JSON a scenario file holds.

use serde_json::{json, Value};

use crate::Scenario;

/// One exchange answering with `response` (no request predicate).
pub fn exchange(response: Value) -> Value {
    json!({ "response": response })
}

/// A scenario playing `exchanges` in order.
pub fn scenario(exchanges: Vec<Value>) -> Scenario {
    let text = json!({ "exchanges": exchanges }).to_string();
    // The builders only produce valid scenarios; a failure here is a bug in this module.
    Scenario::from_json(&text).unwrap_or_else(|e| panic!("script builds an invalid scenario: {e}"))
}

fn oa_chunk(id: &str, delta: Value, finish: Option<&str>) -> Value {
    json!({"data": {
        "id": id, "object": "chat.completion.chunk", "created": 1, "model": "scripted-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]
    }})
}

fn oa_usage(id: &str, input: u64, output: u64) -> Value {
    json!({"data": {"id": id, "object": "chat.completion.chunk", "created": 1,
        "model": "scripted-model", "choices": [],
        "usage": {"prompt_tokens": input, "completion_tokens": output, "total_tokens": input + output}}})
}

/// The SSE items of an OpenAI response streaming `pieces` of text.
pub fn openai_text_events(pieces: &[&str]) -> Vec<Value> {
    let id = "chatcmpl-text";
    let mut sse = vec![oa_chunk(
        id,
        json!({"role": "assistant", "content": ""}),
        None,
    )];
    for p in pieces {
        sse.push(oa_chunk(id, json!({"content": p}), None));
    }
    sse.push(oa_chunk(id, json!({}), Some("stop")));
    sse.push(oa_usage(id, 10, pieces.len() as u64));
    sse.push(json!({"data": "[DONE]"}));
    sse
}

/// An OpenAI response streaming `pieces` of text.
pub fn openai_text(pieces: &[&str]) -> Value {
    json!({ "sse": openai_text_events(pieces) })
}

/// The SSE items of an OpenAI response calling tools: `(call_id, name, arguments JSON)`,
/// each call's arguments split in two fragments.
pub fn openai_tool_calls_events(calls: &[(&str, &str, &str)]) -> Vec<Value> {
    let id = "chatcmpl-tools";
    let mut sse = vec![oa_chunk(
        id,
        json!({"role": "assistant", "content": null}),
        None,
    )];
    for (i, (call_id, name, args)) in calls.iter().enumerate() {
        let mid = args.len() / 2;
        let mid = (0..=mid)
            .rev()
            .find(|m| args.is_char_boundary(*m))
            .unwrap_or(0);
        sse.push(oa_chunk(
            id,
            json!({"tool_calls": [{"index": i, "id": call_id, "type": "function",
            "function": {"name": name, "arguments": &args[..mid]}}]}),
            None,
        ));
        sse.push(oa_chunk(
            id,
            json!({"tool_calls": [{"index": i, "function": {"arguments": &args[mid..]}}]}),
            None,
        ));
    }
    sse.push(oa_chunk(id, json!({}), Some("tool_calls")));
    sse.push(oa_usage(id, 20, 5 * calls.len() as u64));
    sse.push(json!({"data": "[DONE]"}));
    sse
}

/// An OpenAI response calling tools.
pub fn openai_tool_calls(calls: &[(&str, &str, &str)]) -> Value {
    json!({ "sse": openai_tool_calls_events(calls) })
}

fn an(event: &str, data: Value) -> Value {
    json!({"event": event, "data": data})
}

fn an_start(id: &str) -> Value {
    an(
        "message_start",
        json!({"type": "message_start", "message": {"id": id, "type": "message",
        "role": "assistant", "model": "scripted-claude", "content": [], "stop_reason": null,
        "usage": {"input_tokens": 10, "output_tokens": 1}}}),
    )
}

fn an_end(stop: &str, output: u64) -> Vec<Value> {
    vec![
        an(
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
            "usage": {"output_tokens": output}}),
        ),
        an("message_stop", json!({"type": "message_stop"})),
    ]
}

/// The SSE items of an Anthropic response streaming `pieces` of text.
pub fn anthropic_text_events(pieces: &[&str]) -> Vec<Value> {
    let mut sse = vec![
        an_start("msg_text"),
        an(
            "content_block_start",
            json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "text", "text": ""}}),
        ),
    ];
    for p in pieces {
        sse.push(an(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "text_delta", "text": p}}),
        ));
    }
    sse.push(an(
        "content_block_stop",
        json!({"type": "content_block_stop", "index": 0}),
    ));
    sse.extend(an_end("end_turn", pieces.len() as u64));
    sse
}

/// An Anthropic response streaming `pieces` of text.
pub fn anthropic_text(pieces: &[&str]) -> Value {
    json!({ "sse": anthropic_text_events(pieces) })
}

/// The SSE items of an Anthropic response calling tools `(id, name, arguments JSON)`.
pub fn anthropic_tool_calls_events(calls: &[(&str, &str, &str)]) -> Vec<Value> {
    let mut sse = vec![an_start("msg_tools")];
    for (i, (call_id, name, args)) in calls.iter().enumerate() {
        sse.push(an(
            "content_block_start",
            json!({"type": "content_block_start", "index": i,
            "content_block": {"type": "tool_use", "id": call_id, "name": name, "input": {}}}),
        ));
        sse.push(an(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": i,
            "delta": {"type": "input_json_delta", "partial_json": args}}),
        ));
        sse.push(an(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": i}),
        ));
    }
    sse.extend(an_end("tool_use", 5 * calls.len() as u64));
    sse
}

/// An Anthropic response calling tools.
pub fn anthropic_tool_calls(calls: &[(&str, &str, &str)]) -> Value {
    json!({ "sse": anthropic_tool_calls_events(calls) })
}

/// `sse` (the items of a response built here) as a server that reports no usage sends
/// it, llama.cpp's way: OpenAI's usage chunk is dropped and every `usage` object
/// removed (Anthropic's `message_start` and `message_delta` included).
pub fn without_usage(sse: Vec<Value>) -> Vec<Value> {
    sse.into_iter()
        .filter(|item| !(item["data"]["usage"].is_object() && item["data"]["choices"] == json!([])))
        .map(|mut item| {
            if let Some(data) = item.get_mut("data").and_then(Value::as_object_mut) {
                data.remove("usage");
                if let Some(m) = data.get_mut("message").and_then(Value::as_object_mut) {
                    m.remove("usage");
                }
            }
            item
        })
        .collect()
}

/// An HTTP error answer with a provider-style JSON body and extra headers.
pub fn http_error(status: u16, error_type: &str, headers: Value) -> Value {
    json!({"status": status, "headers": headers,
        "json": {"error": {"type": error_type, "message": format!("scripted {status}")}}})
}

/// How many body bytes the server writes for `items` (SSE items as in a scenario's `sse`),
/// encoded exactly as it encodes them: what a fault's `after_bytes` counts, so a test can
/// place a fault right after a given event.
pub fn sse_len(items: &[Value]) -> Result<usize, String> {
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let raw = serde_json::value::to_raw_value(item).map_err(|e| format!("sse[{i}]: {e}"))?;
        crate::scenario::encode_sse_item(&raw, &mut out, &format!("sse[{i}]"))?;
    }
    Ok(out.len())
}
