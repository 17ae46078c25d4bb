//! Decoding as the transport does it, for the decoding test suites and the fuzz harness:
//! drive `SseParser` + `provider::Decoder` over chunked bytes exactly the way `http.rs`
//! does, and check the event-order invariants every decoded response must satisfy.

use std::collections::BTreeMap;

use panto::provider::{DecodeLimits, DecodedMessage, Decoder, Progress, ProviderKind};
use panto::sse::SseParser;
use panto::{Block, BlockKind, DeltaKind, Error, Event};

/// What one replay produced: every emitted event, then the decoded message or the error
/// that ended decoding.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub events: Vec<Event>,
    pub result: Result<DecodedMessage, Error>,
}

/// Decodes `chunks` as one response body, mirroring `http.rs`: feed each chunk to the SSE
/// parser, hand every event to the decoder, stop reading once the decoder says the
/// response is finished, and call `on_eof` if the body ends first.
pub fn decode_chunks<'a>(
    kind: ProviderKind,
    chunks: impl IntoIterator<Item = &'a [u8]>,
) -> Outcome {
    decode_message(kind, 0, chunks)
}

/// [`decode_chunks`] for the assistant message with index `message` in its turn.
pub fn decode_message<'a>(
    kind: ProviderKind,
    message: u32,
    chunks: impl IntoIterator<Item = &'a [u8]>,
) -> Outcome {
    decode_by(Decoder::new(kind, message), chunks)
}

/// [`decode_chunks`] under other limits than the defaults (message bytes, blocks, tool
/// calls).
pub fn decode_limited<'a>(
    kind: ProviderKind,
    limits: DecodeLimits,
    chunks: impl IntoIterator<Item = &'a [u8]>,
) -> Outcome {
    decode_by(Decoder::with_limits(kind, 0, limits), chunks)
}

fn decode_by<'a>(mut decoder: Decoder, chunks: impl IntoIterator<Item = &'a [u8]>) -> Outcome {
    let mut events = Vec::new();
    let mut parser = SseParser::default();
    let mut emit = |ev: Event| -> panto::Result<()> {
        events.push(ev);
        Ok(())
    };
    let mut finished = false;
    let run = || -> panto::Result<()> {
        for chunk in chunks {
            parser.feed(chunk, |ev| {
                if finished {
                    return Ok(());
                }
                if decoder.on_sse(&ev, &mut emit)? == Progress::Finished {
                    finished = true;
                }
                Ok(())
            })?;
            if finished {
                return Ok(());
            }
        }
        decoder.on_eof(&mut emit)
    };
    let r = run();
    let result = r.and_then(|()| {
        decoder
            .into_message()
            .ok_or_else(|| Error::internal("decoding succeeded but the decoder holds no message"))
    });
    Outcome { events, result }
}

/// Decodes `body` as one chunk.
pub fn decode(kind: ProviderKind, body: &[u8]) -> Outcome {
    decode_chunks(kind, [body])
}

/// Decodes `body` cut into pieces of `size` bytes.
pub fn decode_sized(kind: ProviderKind, body: &[u8], size: usize) -> Outcome {
    decode_chunks(kind, body.chunks(size))
}

/// Decodes `body` cut at the given (sorted, in-range) offsets.
pub fn decode_at(kind: ProviderKind, body: &[u8], cuts: &[usize]) -> Outcome {
    let mut pieces = Vec::with_capacity(cuts.len() + 1);
    let mut start = 0;
    for &c in cuts {
        pieces.push(&body[start..c]);
        start = c;
    }
    pieces.push(&body[start..]);
    decode_chunks(kind, pieces)
}

/// A small deterministic generator (xorshift64*) for reproducible "random" splits.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }
    pub fn seeded_from(name: &str) -> Rng {
        // FNV-1a of the name: different captures get different splits, runs are repeatable.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in name.bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        Rng::new(h)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
    /// Sorted cut offsets in `0..=len`, about one per `mean` bytes (duplicates allowed:
    /// they make empty chunks).
    pub fn cuts(&mut self, len: usize, mean: u64) -> Vec<usize> {
        let mut cuts = Vec::new();
        let mut at = 0usize;
        loop {
            at += self.below(2 * mean) as usize;
            if at > len {
                break;
            }
            cuts.push(at);
        }
        cuts
    }
}

fn block_kind_of(content: &Block) -> Option<BlockKind> {
    match content {
        Block::Text { .. } => Some(BlockKind::Text),
        Block::Reasoning { .. } | Block::RedactedReasoning { .. } => Some(BlockKind::Reasoning),
        Block::ToolCall { .. } => Some(BlockKind::ToolCall),
        Block::ToolResult { .. } | Block::Opaque { .. } | Block::Image(_) | Block::Document(_) => {
            None
        }
    }
}

#[derive(Default)]
struct BlockState {
    kind: Option<BlockKind>,
    deltas: String,
    details: Option<(String, String)>,
    complete: Option<Block>,
}

/// Checks the ordering invariants of one decoded response; returns a description of the
/// first violation. `message` is the message index the decoder was created with.
pub fn check_invariants(outcome: &Outcome, message: u32) -> Result<(), String> {
    let events = &outcome.events;
    let ok = outcome.result.is_ok();
    let mut started = false;
    let mut ended = false;
    let mut blocks: BTreeMap<u32, BlockState> = BTreeMap::new();
    for (i, ev) in events.iter().enumerate() {
        let at = |what: &str| format!("event {i} ({}): {what}", ev.to_json());
        if ended {
            return Err(at("an event follows message_end"));
        }
        if i == 0 && !matches!(ev, Event::MessageStart { .. }) {
            return Err(at("the first event is not message_start"));
        }
        match ev {
            Event::MessageStart { message: m, .. } => {
                if started {
                    return Err(at("a second message_start"));
                }
                if *m != message {
                    return Err(at("wrong message index"));
                }
                started = true;
            }
            Event::BlockStart {
                message: m,
                block,
                kind,
            } => {
                if *m != message {
                    return Err(at("wrong message index"));
                }
                if *block as usize != blocks.len() {
                    return Err(at(&format!(
                        "block index {block} is not the next one ({})",
                        blocks.len()
                    )));
                }
                blocks.insert(
                    *block,
                    BlockState {
                        kind: Some(*kind),
                        ..BlockState::default()
                    },
                );
            }
            Event::ContentDelta {
                message: m,
                block,
                kind,
                text,
            } => {
                if *m != message {
                    return Err(at("wrong message index"));
                }
                let Some(b) = blocks.get_mut(block) else {
                    return Err(at("delta for a block never started"));
                };
                if b.complete.is_some() {
                    return Err(at("delta after block_complete"));
                }
                if text.is_empty() {
                    return Err(at("empty delta"));
                }
                let want = match b.kind {
                    Some(BlockKind::Text) => DeltaKind::Text,
                    Some(BlockKind::Reasoning) => DeltaKind::Reasoning,
                    _ => DeltaKind::ToolArgs,
                };
                if *kind != want {
                    return Err(at("delta kind does not match the block kind"));
                }
                b.deltas.push_str(text);
            }
            Event::ToolDetails {
                message: m,
                block,
                call_id,
                name,
            } => {
                if *m != message {
                    return Err(at("wrong message index"));
                }
                let Some(b) = blocks.get_mut(block) else {
                    return Err(at("tool_details for a block never started"));
                };
                if b.kind != Some(BlockKind::ToolCall) {
                    return Err(at("tool_details for a block that is not a tool call"));
                }
                if b.details.is_some() {
                    return Err(at("a second tool_details for the block"));
                }
                if b.complete.is_some() {
                    return Err(at("tool_details after block_complete"));
                }
                b.details = Some((call_id.clone(), name.clone()));
            }
            Event::BlockComplete {
                message: m,
                block,
                content,
            } => {
                if *m != message {
                    return Err(at("wrong message index"));
                }
                let Some(b) = blocks.get_mut(block) else {
                    return Err(at("block_complete for a block never started"));
                };
                if b.complete.is_some() {
                    return Err(at("a second block_complete"));
                }
                if block_kind_of(content) != b.kind {
                    return Err(at("content type does not match the block kind"));
                }
                match content {
                    Block::Text { text } | Block::Reasoning { text, .. } => {
                        if *text != b.deltas {
                            return Err(at("content differs from the concatenated deltas"));
                        }
                    }
                    Block::RedactedReasoning { .. } => {
                        if !b.deltas.is_empty() {
                            return Err(at("redacted reasoning had deltas"));
                        }
                    }
                    Block::ToolCall {
                        call_id,
                        name,
                        arguments,
                        arguments_raw,
                    } => {
                        if b.details.as_ref() != Some(&(call_id.clone(), name.clone())) {
                            return Err(at("tool_details missing or different from the call"));
                        }
                        if call_id.is_empty() {
                            return Err(at("empty call id"));
                        }
                        match (arguments, arguments_raw) {
                            (Some(v), None) => {
                                let parsed = if b.deltas.trim().is_empty() {
                                    serde_json::json!({})
                                } else {
                                    serde_json::from_str(&b.deltas).map_err(|e| {
                                        at(&format!(
                                            "parsed arguments but deltas are not JSON: {e}"
                                        ))
                                    })?
                                };
                                if *v != parsed {
                                    return Err(at("arguments differ from the deltas"));
                                }
                            }
                            (None, Some(raw)) => {
                                if *raw != b.deltas {
                                    return Err(at("arguments_raw differs from the deltas"));
                                }
                            }
                            _ => return Err(at("exactly one of arguments / arguments_raw")),
                        }
                    }
                    Block::ToolResult { .. } => return Err(at("a tool result in a response")),
                    Block::Opaque { .. } => return Err(at("a provider block announced by events")),
                    Block::Image(_) | Block::Document(_) => {
                        return Err(at("an attachment in a response"))
                    }
                }
                b.complete = Some(content.clone());
            }
            Event::MessageEnd { message: m, .. } => {
                if *m != message {
                    return Err(at("wrong message index"));
                }
                if !ok {
                    return Err(at("message_end in a failed response"));
                }
                if let Some((idx, _)) = blocks.iter().find(|(_, b)| b.complete.is_none()) {
                    return Err(at(&format!(
                        "block {idx} never completed before message_end"
                    )));
                }
                ended = true;
            }
            _ => return Err(at("an agent-level event from a decoder")),
        }
    }
    match &outcome.result {
        Ok(decoded) => {
            if !ended {
                return Err("a successful response without message_end".into());
            }
            let completed: Vec<Block> = blocks.into_values().filter_map(|b| b.complete).collect();
            // Provider blocks kept verbatim (`Block::Opaque`) are never announced.
            let announced: Vec<Block> = decoded
                .message
                .content
                .iter()
                .filter(|b| !matches!(b, Block::Opaque { .. }))
                .cloned()
                .collect();
            if announced != completed {
                return Err("the decoded message differs from the block_complete contents".into());
            }
            if let Some(Event::MessageEnd {
                stop_reason, usage, ..
            }) = events.last()
            {
                if *stop_reason != decoded.stop_reason || *usage != decoded.usage {
                    return Err("message_end differs from the decoded message".into());
                }
            }
        }
        Err(_) => {
            if ended {
                return Err("a failed response has a message_end".into());
            }
        }
    }
    Ok(())
}

/// Decodes `body` whole, panics (naming the invariant, with the body and the events)
/// if [`check_invariants`] fails, and checks that each chunking of `piece_sizes` (bytes
/// per piece) gives the same outcome: what the decoding test suites run every body
/// through.
pub fn decode_checked(kind: ProviderKind, body: &str, piece_sizes: &[usize]) -> Outcome {
    let o = decode(kind, body.as_bytes());
    if let Err(why) = check_invariants(&o, 0) {
        panic!(
            "invariant violated: {why}\nbody:\n{body}\nevents: {:#?}",
            o.events
        );
    }
    for &size in piece_sizes {
        assert_eq!(
            decode_sized(kind, body.as_bytes(), size),
            o,
            "{size}-byte chunks differ\n{body}"
        );
    }
    o
}

/// The decoded message, or a panic with the error and the events.
pub fn decoded(o: &Outcome) -> &DecodedMessage {
    match &o.result {
        Ok(m) => m,
        Err(e) => panic!("decoding failed: {e}\nevents: {:#?}", o.events),
    }
}

/// The error that ended decoding, or a panic with the message decoded instead.
pub fn decode_error(o: &Outcome) -> &Error {
    match &o.result {
        Ok(m) => panic!("decoding succeeded: {m:#?}"),
        Err(e) => e,
    }
}

/// Response bodies as servers frame them, for the decoding test suites.
pub mod sse {
    use serde_json::Value;

    /// One unnamed SSE event per JSON payload (OpenAI's and Gemini's framing).
    pub fn unnamed(payloads: &[Value]) -> String {
        payloads.iter().map(|p| format!("data: {p}\n\n")).collect()
    }

    /// One unnamed SSE event per raw data string: for JSON that `serde_json::json!`
    /// cannot write (lone surrogates, repeated keys).
    pub fn unnamed_raw(datas: &[&str]) -> String {
        datas.iter().map(|d| format!("data: {d}\n\n")).collect()
    }

    /// One SSE event per JSON payload, named after its `type` (Anthropic's framing).
    pub fn named(payloads: &[Value]) -> String {
        payloads
            .iter()
            .map(|p| {
                format!(
                    "event: {}\ndata: {p}\n\n",
                    p["type"].as_str().unwrap_or("message")
                )
            })
            .collect()
    }
}
