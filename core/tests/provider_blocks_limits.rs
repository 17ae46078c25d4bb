//! Provider blocks kept verbatim (`Block::Opaque`) are held under the same caps as
//! everything else in a message: their number counts against `max_blocks`, their bytes
//! (the block itself, streamed tool input, compaction text) against `max_message_bytes`.

use panto::provider::{DecodeLimits, Decoder, Progress, ProviderKind};
use panto::sse::SseParser;
use panto::{Block, ErrorKind, Event};
use serde_json::{json, Value};

fn sse(events: &[Value]) -> Vec<u8> {
    let mut out = String::new();
    for e in events {
        out.push_str(&format!("data: {e}\n\n"));
    }
    out.into_bytes()
}

fn decode(body: &[u8], limits: DecodeLimits) -> panto::Result<Vec<Block>> {
    let mut decoder = Decoder::with_limits(ProviderKind::Anthropic, 0, limits);
    let mut parser = SseParser::default();
    let mut emit = |_: Event| -> panto::Result<()> { Ok(()) };
    let mut finished = false;
    for chunk in body.chunks(5) {
        parser.feed(chunk, |ev| {
            if !finished && decoder.on_sse(&ev, &mut emit)? == Progress::Finished {
                finished = true;
            }
            Ok(())
        })?;
    }
    if !finished {
        decoder.on_eof(&mut emit)?;
    }
    Ok(decoder
        .into_message()
        .map(|m| m.message.content)
        .unwrap_or_default())
}

fn limits(max_message_bytes: usize, max_blocks: usize) -> DecodeLimits {
    DecodeLimits {
        max_message_bytes,
        max_blocks,
        max_tool_calls: 8,
    }
}

fn start() -> Value {
    json!({"type": "message_start", "message": {"id": "m", "model": "c", "usage": {}}})
}

fn end() -> [Value; 2] {
    [
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {}}),
        json!({"type": "message_stop"}),
    ]
}

#[test]
fn kept_blocks_count_against_max_blocks() {
    let mut events = vec![start()];
    for i in 0..5 {
        events.push(json!({"type": "content_block_start", "index": i,
            "content_block": {"type": "mcp_tool_result", "tool_use_id": "x", "content": []}}));
        events.push(json!({"type": "content_block_stop", "index": i}));
    }
    events.extend(end());
    let e = decode(&sse(&events), limits(1 << 20, 3)).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Protocol);
    assert!(e.message.contains("max_blocks"), "{}", e.message);
    // Within the cap they are all kept, in order.
    let kept = decode(&sse(&events), limits(1 << 20, 16)).unwrap();
    assert_eq!(kept.len(), 5);
    assert!(kept.iter().all(|b| matches!(b, Block::Opaque { .. })));
}

#[test]
fn streamed_compaction_text_and_tool_input_count_against_max_message_bytes() {
    let piece = "x".repeat(500);
    for (block, delta) in [
        (
            json!({"type": "compaction", "content": null}),
            json!({"type": "compaction_delta", "content": piece}),
        ),
        (
            json!({"type": "server_tool_use", "id": "s", "name": "web_search", "input": {}}),
            json!({"type": "input_json_delta", "partial_json": piece}),
        ),
    ] {
        let mut events = vec![
            start(),
            json!({"type": "content_block_start", "index": 0, "content_block": block}),
        ];
        for _ in 0..10 {
            events.push(json!({"type": "content_block_delta", "index": 0, "delta": delta}));
        }
        events.push(json!({"type": "content_block_stop", "index": 0}));
        events.extend(end());
        let e = decode(&sse(&events), limits(2048, 16)).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Protocol, "{block}");
        assert!(e.message.contains("max_message_bytes"), "{}", e.message);
    }
}

#[test]
fn a_compaction_block_collects_its_streamed_summary() {
    let mut events = vec![
        start(),
        json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "compaction", "content": null}}),
        json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "compaction_delta", "content": "Summary, "}}),
        json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "compaction_delta", "content": "continued."}}),
        // A later delta type with a `content` of another shape is ignored, not fatal.
        json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "future_delta", "content": [1, 2]}}),
        json!({"type": "content_block_stop", "index": 0}),
    ];
    events.extend(end());
    let kept = decode(&sse(&events), limits(1 << 20, 16)).unwrap();
    assert_eq!(
        kept,
        vec![Block::Opaque {
            provider: "anthropic".into(),
            block: json!({"type": "compaction", "content": "Summary, continued."}),
        }]
    );
}
