//! Replays every real provider capture in `tests/fixtures/real/` through the SSE parser
//! and the provider decoder, under many chunkings, and checks the result against what the
//! official Python SDK decoded from the same bytes (`<name>.expected.json`).
//!
//! Where panto deliberately differs from the SDK (SDK quirks documented in the fixtures
//! README), the intended panto behaviour is asserted instead; see `sdk_quirks`.

use std::path::{Path, PathBuf};

use panto::provider::{http_error, DecodedMessage, ProviderKind};
use panto::{Block, ErrorKind, StopReason};
use panto_testkit::decode::{check_invariants, decode, decode_at, decode_sized, Outcome, Rng};
use serde_json::{json, Value};

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/real")
}

struct Capture {
    /// `<provider>/<name>`, used in every failure message.
    label: String,
    kind: ProviderKind,
    status: u16,
    body: Vec<u8>,
    is_sse: bool,
    expected: Value,
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn load_captures() -> Vec<Capture> {
    let root = fixtures_dir();
    let mut out = Vec::new();
    let mut providers: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("{}: {e}", root.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    providers.sort();
    for dir in providers {
        let mut metas: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.to_string_lossy().ends_with(".meta.json"))
            .collect();
        metas.sort();
        for meta_path in metas {
            let meta = read_json(&meta_path);
            let file = meta["file"].as_str().expect("meta.file");
            let name = file
                .strip_suffix(".sse")
                .or_else(|| file.strip_suffix(".error.json"))
                .unwrap_or_else(|| panic!("{}: unexpected body file {file}", meta_path.display()));
            let label = format!("{}/{name}", dir.file_name().unwrap().to_string_lossy());
            let kind = ProviderKind::parse(meta["sdk"].as_str().expect("meta.sdk"))
                .unwrap_or_else(|| panic!("{label}: unknown sdk {}", meta["sdk"]));
            let body = std::fs::read(dir.join(file)).unwrap();
            assert_eq!(
                body.len() as u64,
                meta["bytes"].as_u64().unwrap(),
                "{label}: body size differs from meta.bytes"
            );
            out.push(Capture {
                label,
                kind,
                status: meta["status"].as_u64().unwrap() as u16,
                is_sse: file.ends_with(".sse"),
                body,
                expected: read_json(&dir.join(format!("{name}.expected.json"))),
            });
        }
    }
    out
}

/// Every chunking the replay is checked under: one chunk, fixed sizes 1..=7, and two
/// pseudo-random splits (with empty chunks).
fn replay_all_splits(c: &Capture) -> Outcome {
    let whole = decode(c.kind, &c.body);
    let mut variants: Vec<(String, Outcome)> = (1..=7)
        .map(|n| (format!("chunks of {n}"), decode_sized(c.kind, &c.body, n)))
        .collect();
    let mut rng = Rng::seeded_from(&c.label);
    for mean in [3, 40] {
        let cuts = rng.cuts(c.body.len(), mean);
        variants.push((
            format!("random cuts {cuts:?}"),
            decode_at(c.kind, &c.body, &cuts),
        ));
    }
    for (how, o) in variants {
        if o != whole {
            let first_diff = whole
                .events
                .iter()
                .zip(&o.events)
                .position(|(a, b)| a != b)
                .unwrap_or(whole.events.len().min(o.events.len()));
            panic!(
                "{}: {how} decodes differently from one chunk (first difference at event {first_diff}; \
                 {} vs {} events; results {:?} vs {:?})",
                c.label,
                whole.events.len(),
                o.events.len(),
                whole.result.as_ref().map(|m| &m.stop_reason),
                o.result.as_ref().map(|m| &m.stop_reason),
            );
        }
    }
    whole
}

/// Where the SDK's view is not what panto should do, returns the corrected expectation.
fn sdk_quirks(label: &str, mut expected: Value) -> Value {
    if label == "openrouter/kimi-k2-tool-call-usage-cost" {
        // The server repeats the whole call (`"id":"0"`, `"name":"llm_version"`) in two
        // chunks. openai-python's accumulator concatenates every string field, giving id
        // "00" and name "llm_versionllm_version"; panto takes a call's id and name from
        // the first fragment that carries them and appends only the arguments of later
        // ones (a repeated id or name is the same call, not more text).
        let call = &mut expected["tool_calls"][0];
        assert_eq!(call["id"], "00", "{label}: fixture changed");
        call["id"] = json!("0");
        call["name"] = json!("llm_version");
    }
    expected
}

fn text_of(m: &DecodedMessage) -> String {
    m.message.text()
}

fn reasoning_of(m: &DecodedMessage) -> String {
    m.message
        .content
        .iter()
        .filter_map(|b| match b {
            Block::Reasoning { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

fn expected_stop(c: &Capture, e: &Value, decoded: &DecodedMessage) -> StopReason {
    match c.kind {
        ProviderKind::Anthropic => StopReason::from_anthropic(e["stop_reason"].as_str().unwrap()),
        ProviderKind::OpenAi => {
            let refusal = e["text"].is_null() && e["refusal"].is_string();
            match e["finish_reason"].as_str() {
                _ if refusal => StopReason::Refusal,
                Some("stop") => StopReason::EndTurn,
                Some("tool_calls") => StopReason::ToolUse,
                Some("length") => StopReason::MaxTokens,
                Some("content_filter") => StopReason::ContentFilter,
                Some(other) => panic!("{}: unmapped finish_reason {other}", c.label),
                // No finish_reason at all (OpenRouter kimi-k2 ends with [DONE] only):
                // panto infers it from what arrived.
                None if decoded.message.tool_calls().next().is_some() => StopReason::ToolUse,
                None => StopReason::EndTurn,
            }
        }
        ProviderKind::Gemini | ProviderKind::OpenAiResponses => {
            unreachable!("{:?} has tests of its own", c.kind)
        }
    }
}

fn check_success(c: &Capture, e: &Value, o: &Outcome) {
    let label = &c.label;
    let decoded = match &o.result {
        Ok(d) => d,
        Err(err) => panic!("{label}: decoding failed: {err}"),
    };

    // Identity. Azure's first chunk has an empty id and model, which the SDK keeps;
    // panto keeps the first non-empty ones.
    match e["model"].as_str().unwrap() {
        "" => assert!(!decoded.model.is_empty(), "{label}: model"),
        m => assert_eq!(decoded.model, m, "{label}: model"),
    }
    match e["id"].as_str().unwrap() {
        "" => assert!(decoded.response_id.is_some(), "{label}: response id"),
        id => assert_eq!(
            decoded.response_id.as_deref(),
            Some(id),
            "{label}: response id"
        ),
    }

    // Text. For n>1 the top-level fields must be choice 0's.
    if let Some(choices) = e["choices"].as_array() {
        assert_eq!(choices[0]["index"], 0, "{label}: choices[0]");
        assert_eq!(choices[0]["text"], e["text"], "{label}: choice 0 text");
    }
    let want_text = match (e["text"].as_str(), e["refusal"].as_str()) {
        (Some(t), _) => t,
        // panto streams an OpenAI refusal as text.
        (None, Some(r)) => r,
        (None, None) => "",
    };
    assert_eq!(text_of(decoded), want_text, "{label}: text");

    // Reasoning.
    let want_reasoning = match c.kind {
        ProviderKind::Anthropic => e["thinking"].as_str(),
        ProviderKind::OpenAi => e["extra_message_fields"]["reasoning_content"]
            .as_str()
            .or(e["extra_message_fields"]["reasoning"].as_str()),
        ProviderKind::Gemini | ProviderKind::OpenAiResponses => {
            unreachable!("{:?} has tests of its own", c.kind)
        }
    };
    let reasoning = reasoning_of(decoded);
    match want_reasoning {
        Some(r) => assert_eq!(reasoning, r, "{label}: reasoning"),
        None if e["non_string_content_deltas"].as_u64().unwrap_or(0) > 0 => {
            // Mistral's typed thinking parts: the SDK drops them, panto keeps them as a
            // reasoning block ahead of the text.
            assert!(
                reasoning.starts_with("Okay, the user"),
                "{label}: reasoning {reasoning:?}"
            );
            assert!(matches!(
                decoded.message.content.first(),
                Some(Block::Reasoning { .. })
            ));
        }
        None => assert_eq!(reasoning, "", "{label}: unexpected reasoning"),
    }

    // Anthropic thinking signatures and redacted thinking, block by block.
    if c.kind == ProviderKind::Anthropic {
        let ours = decoded
            .message
            .content
            .iter()
            .filter(|b| matches!(b, Block::Reasoning { .. } | Block::RedactedReasoning { .. }));
        let theirs = e["content_blocks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|b| matches!(b["type"].as_str(), Some("thinking" | "redacted_thinking")));
        let mut n = 0;
        for (ours, theirs) in ours.zip(theirs) {
            n += 1;
            match (ours, theirs["type"].as_str()) {
                (Block::Reasoning { text, signature }, Some("thinking")) => {
                    assert_eq!(
                        text,
                        theirs["thinking"].as_str().unwrap(),
                        "{label}: thinking"
                    );
                    assert_eq!(
                        signature.as_deref().map_or(0, str::len) as u64,
                        theirs["signature_len"].as_u64().unwrap(),
                        "{label}: signature length"
                    );
                }
                (Block::RedactedReasoning { data }, Some("redacted_thinking")) => {
                    assert_eq!(
                        data.len() as u64,
                        theirs["data_len"].as_u64().unwrap(),
                        "{label}: redacted data length"
                    );
                }
                (b, t) => panic!("{label}: reasoning block {b:?} vs SDK {t:?}"),
            }
        }
        let want_n = e["content_blocks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|b| matches!(b["type"].as_str(), Some("thinking" | "redacted_thinking")))
            .count();
        assert_eq!(n, want_n, "{label}: reasoning block count");
    }

    // Tool calls: id, name, arguments as parsed JSON.
    let ours: Vec<&Block> = decoded.message.tool_calls().collect();
    let theirs = e["tool_calls"].as_array().unwrap();
    assert_eq!(ours.len(), theirs.len(), "{label}: tool call count");
    for (i, (ours, theirs)) in ours.iter().zip(theirs).enumerate() {
        let Block::ToolCall {
            call_id,
            name,
            arguments,
            arguments_raw,
        } = ours
        else {
            unreachable!()
        };
        assert_eq!(
            call_id,
            theirs["id"].as_str().unwrap(),
            "{label}: call {i} id"
        );
        assert_eq!(
            name,
            theirs["name"].as_str().unwrap(),
            "{label}: call {i} name"
        );
        let raw = theirs["arguments"].as_str().unwrap();
        let want: Value = if raw.trim().is_empty() {
            json!({})
        } else {
            serde_json::from_str(raw).unwrap()
        };
        assert_eq!(
            arguments.as_ref(),
            Some(&want),
            "{label}: call {i} arguments"
        );
        assert_eq!(*arguments_raw, None, "{label}: call {i} arguments_raw");
        if let Some(input) = theirs.get("input") {
            assert_eq!(&want, input, "{label}: call {i} SDK input vs arguments");
        }
    }
    assert!(
        decoded.cut_off_calls.is_empty(),
        "{label}: cut-off calls {:?}",
        decoded.cut_off_calls
    );

    // Stop reason.
    assert_eq!(
        decoded.stop_reason,
        expected_stop(c, e, decoded),
        "{label}: stop reason"
    );

    // Usage (the SDK's `usage` is the last non-null one; see gpt-5-moderation).
    let u = &e["usage"];
    let (input, output) = match c.kind {
        ProviderKind::Anthropic => (&u["input_tokens"], &u["output_tokens"]),
        ProviderKind::OpenAi => (&u["prompt_tokens"], &u["completion_tokens"]),
        ProviderKind::Gemini | ProviderKind::OpenAiResponses => {
            unreachable!("{:?} has tests of its own", c.kind)
        }
    };
    assert_eq!(
        decoded.usage.input_tokens,
        input.as_u64().unwrap_or(0),
        "{label}: input tokens"
    );
    assert_eq!(
        decoded.usage.output_tokens,
        output.as_u64().unwrap_or(0),
        "{label}: output tokens"
    );
    if c.kind == ProviderKind::Anthropic {
        assert_eq!(
            decoded.usage.cache_read_tokens,
            u["cache_read_input_tokens"].as_u64().unwrap_or(0),
            "{label}: cache read tokens"
        );
        assert_eq!(
            decoded.usage.cache_write_tokens,
            u["cache_creation_input_tokens"].as_u64().unwrap_or(0),
            "{label}: cache write tokens"
        );
    } else if let Some(r) = u["completion_tokens_details"]["reasoning_tokens"].as_u64() {
        assert_eq!(
            decoded.usage.reasoning_tokens, r,
            "{label}: reasoning tokens"
        );
    }
}

fn check_stream_failure(c: &Capture, e: &Value, o: &Outcome) {
    let label = &c.label;
    let err = match &o.result {
        Ok(_) => panic!(
            "{label}: decoding succeeded but the SDK raised {}",
            e["error"]
        ),
        Err(err) => err,
    };
    assert_eq!(err.kind, ErrorKind::Provider, "{label}: error kind ({err})");
    assert!(
        err.provider_code.is_some(),
        "{label}: no provider code ({err})"
    );
    if let Some(m) = e["error"]["message"].as_str() {
        assert!(
            err.message.contains(m),
            "{label}: error message {:?} lacks {m:?}",
            err.message
        );
    }
    if c.label.starts_with("groq/") {
        assert_eq!(
            err.provider_code.as_deref(),
            Some("tool_use_failed"),
            "{label}"
        );
    }
    // The partial answer the SDK had before the error was also seen by panto's caller.
    let reasoning: String = o
        .events
        .iter()
        .filter_map(|ev| match ev {
            panto::Event::ContentDelta {
                kind: panto::DeltaKind::Reasoning,
                text,
                ..
            } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    if let Some(r) = e["extra_message_fields"]["reasoning"].as_str() {
        assert_eq!(reasoning, r, "{label}: reasoning streamed before the error");
    }
}

fn check_http_error(c: &Capture, e: &Value) {
    let label = &c.label;
    let body = std::str::from_utf8(&c.body).unwrap();
    let err = http_error(c.status, body);
    assert_eq!(
        u64::from(err.status),
        e["http_status"].as_u64().unwrap(),
        "{label}: status"
    );
    assert_eq!(e["ok"], false, "{label}: SDK should have raised");
    match c.status {
        400 => {
            assert_eq!(err.kind, ErrorKind::BadRequest, "{label}: {err}");
            assert_eq!(
                err.provider_code.as_deref(),
                Some("content_filter"),
                "{label}"
            );
            assert!(
                !err.retryable,
                "{label}: a filtered prompt is not retryable"
            );
            assert!(
                err.message.contains("content management policy"),
                "{label}: {err}"
            );
        }
        429 => {
            assert_eq!(err.kind, ErrorKind::RateLimited, "{label}: {err}");
            assert!(err.retryable, "{label}: 429 is retryable");
            assert_eq!(
                err.provider_code.as_deref(),
                Some("rate_limit_error"),
                "{label}"
            );
            assert!(err.message.contains("rate limit"), "{label}: {err}");
        }
        s => panic!("{label}: no expectation for HTTP {s}"),
    }
}

#[test]
fn every_real_capture_decodes_like_the_sdk() {
    let captures = load_captures();
    let sse = captures.iter().filter(|c| c.is_sse).count();
    assert_eq!(captures.len(), 39, "capture count");
    assert_eq!(sse, 37, "SSE capture count");
    let mut stream_errors = 0;
    let mut failed = Vec::new();
    for c in &captures {
        let expected = sdk_quirks(&c.label, c.expected.clone());
        if !c.is_sse {
            check_http_error(c, &expected);
            continue;
        }
        if expected["ok"] != true {
            stream_errors += 1;
        }
        // Check every capture, then report all that failed (each panic names its capture).
        let r = std::panic::catch_unwind(|| {
            assert_eq!(c.status, 200, "{}: SSE captures are HTTP 200", c.label);
            let outcome = replay_all_splits(c);
            if let Err(why) = check_invariants(&outcome, 0) {
                panic!("{}: {why}", c.label);
            }
            if expected["ok"] == true {
                check_success(c, &expected, &outcome);
            } else {
                assert!(
                    !expected["error"].is_null(),
                    "{}: ok=false without error",
                    c.label
                );
                check_stream_failure(c, &expected, &outcome);
            }
        });
        if r.is_err() {
            failed.push(c.label.as_str());
        }
    }
    assert!(failed.is_empty(), "captures that failed: {failed:?}");
    assert_eq!(stream_errors, 2, "in-stream provider errors");
}
