//! The Rust side of the ABI checks: the header's constants against the core (one source
//! of truth for event and error codes), the layout of every struct as the C compiler
//! sees it against Rust's, `panto_event_to_json` against `Event::to_json`, and the
//! panic and argument rules. Behaviour over a real turn is in the C tests
//! (`capi/tests/c`), which run under valgrind.

use std::collections::BTreeMap;
use std::ffi::c_char;
use std::mem::{align_of, offset_of, size_of};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::ptr;

use panto_core::{Block, BlockKind, DeltaKind, Error, ErrorKind, Event, StopReason, Usage};
use serde_json::json;

use crate::agent::*;
use crate::boundary::PANIC_NEXT;
use crate::error::*;
use crate::record::{block_kind_code, delta_kind_code, Record, Slot};
use crate::stream::*;
use crate::string::*;
use crate::types::*;

fn crate_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Every `#define PANTO_* <integer>` of the committed header.
fn header_constants() -> BTreeMap<String, i64> {
    let text = std::fs::read_to_string(crate_dir().join("include/panto.h")).unwrap();
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        if words.next() != Some("#define") {
            continue;
        }
        let (Some(name), Some(value)) = (words.next(), words.next()) else {
            continue;
        };
        if let Ok(v) = value.parse::<i64>() {
            if name.starts_with("PANTO_") {
                out.insert(name.to_string(), v);
            }
        }
    }
    out
}

fn upper(name: &str) -> String {
    name.to_ascii_uppercase()
}

#[test]
fn header_event_and_error_codes_are_the_cores() {
    let h = header_constants();
    // Every event type of the core, under its name, with its code.
    for code in panto_core::event::EVENTS.iter().map(|e| e.code) {
        let name = Event::type_name_of_code(code).unwrap();
        let key = format!("PANTO_EV_{}", upper(name));
        assert_eq!(h.get(&key), Some(&(code as i64)), "{key}");
    }
    // Nothing else under PANTO_EV_ but the two that are the ABI's own.
    let ev: Vec<_> = h.keys().filter(|k| k.starts_with("PANTO_EV_")).collect();
    assert_eq!(ev.len(), Event::TYPES.len() + 2, "{ev:?}");
    assert_eq!(h["PANTO_EV_NONE"], 0);
    assert!(h["PANTO_EV_ERROR"] > 255, "far from the core's event codes");
    // Every error kind of the core, under its name, with its code.
    for k in ErrorKind::ALL {
        let key = format!("PANTO_ERR_{}", upper(k.as_str()));
        assert_eq!(h.get(&key), Some(&(k.code() as i64)), "{key}");
    }
    let err = h.keys().filter(|k| k.starts_with("PANTO_ERR_")).count();
    assert_eq!(err, ErrorKind::ALL.len());
    // The status codes the issue fixes.
    for (k, v) in [
        ("PANTO_OK", 0),
        ("PANTO_EVENT", 0),
        ("PANTO_DONE", 1),
        ("PANTO_ERROR", 2),
        ("PANTO_PENDING", 3),
    ] {
        assert_eq!(h[k], v, "{k}");
    }
}

#[test]
fn header_block_delta_and_content_codes_match_the_mapping() {
    let h = header_constants();
    for k in [BlockKind::Text, BlockKind::Reasoning, BlockKind::ToolCall] {
        let name = serde_json::to_value(k).unwrap();
        let key = format!("PANTO_BLOCK_{}", upper(name.as_str().unwrap()));
        assert_eq!(h[&key], block_kind_code(k) as i64, "{key}");
    }
    for k in [DeltaKind::Text, DeltaKind::Reasoning, DeltaKind::ToolArgs] {
        let name = serde_json::to_value(k).unwrap();
        let key = format!("PANTO_DELTA_{}", upper(name.as_str().unwrap()));
        assert_eq!(h[&key], delta_kind_code(k) as i64, "{key}");
    }
    // Content types: by the canonical "type" of each block, through a real record.
    for block in sample_blocks() {
        let ty = serde_json::to_value(&block).unwrap()["type"]
            .as_str()
            .unwrap()
            .to_string();
        let record = Slot::holding(Record::event(Event::BlockComplete {
            message: 0,
            block: 0,
            content: block,
        }));
        let mut ev = PantoEvent::zeroed();
        // SAFETY: the slot is this test's alone; nothing replaces its record meanwhile.
        unsafe { record.fill(&mut ev) };
        // SAFETY: `kind` is block_complete, so that arm was written (plain data).
        let got = unsafe { ev.payload.block_complete.content_type };
        assert_eq!(
            h[&format!("PANTO_CONTENT_{}", upper(&ty))],
            got as i64,
            "{ty}"
        );
    }
}

#[test]
fn abi_version_is_the_crate_version() {
    let major: u32 = env!("CARGO_PKG_VERSION_MAJOR").parse().unwrap();
    let minor: u32 = env!("CARGO_PKG_VERSION_MINOR").parse().unwrap();
    assert_eq!(PANTO_ABI_VERSION_MAJOR, major);
    assert_eq!(PANTO_ABI_VERSION_MINOR, minor);
    assert_eq!(crate::panto_abi_version(), (major << 16) | minor);
    let h = header_constants();
    assert_eq!(h["PANTO_ABI_VERSION_MAJOR"], major as i64);
    assert_eq!(h["PANTO_ABI_VERSION_MINOR"], minor as i64);
}

/// `name -> (size, align)` and `name.field -> offset`, as Rust lays them out.
fn rust_layout() -> BTreeMap<String, (usize, usize)> {
    use crate::mcp_client_hooks::PantoMcpClientHooks;
    use crate::mcp_oauth::PantoMcpOAuthHooks;
    let mut out = BTreeMap::new();
    macro_rules! layout {
        ($($ty:ident { $($field:ident),* $(,)? })*) => {$(
            out.insert(stringify!($ty).to_string(), (size_of::<$ty>(), align_of::<$ty>()));
            $(
                out.insert(
                    format!("{}.{}", stringify!($ty), stringify!($field)),
                    (offset_of!($ty, $field), 0),
                );
            )*
        )*};
    }
    layout! {
        PantoStr { ptr, len }
        PantoString { ptr, len }
        PantoUsage { input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, reasoning_tokens, reported, _reserved0 }
        PantoMessageStart { message, _reserved0, model, response_id, queued_ms }
        PantoBlockStart { message, block, kind, _reserved0 }
        PantoContentDelta { message, block, kind, _reserved0, text }
        PantoToolDetails { message, block, call_id, name }
        PantoBlockComplete { message, block, content_type, _reserved0, content, text, signature, call_id, name, arguments, arguments_raw }
        PantoMessageEnd { message, _reserved0, stop_reason, usage }
        PantoToolCallStart { message, host, _reserved0, call_id, name, arguments, arguments_raw }
        PantoToolResult { message, is_error, _reserved0, call_id, name, output, parts }
        PantoProviderRetry { message, attempt, max_attempts, status, delay_ms, reason }
        PantoMessageComplete { messages, _reserved0, stop_reason, text, usage, output, deferred, model }
        PantoOutputRepair { message, attempt, max_attempts, _reserved0, error }
        PantoSteeringDelivered { message, _reserved0, text }
        PantoToolProgress { message, _reserved0, call_id, name, progress, total, text }
        PantoServerLog { server, level, logger, data }
        PantoMcpSamplingRequest { server, summary, max_tokens, outcome }
        PantoMcpElicitationRequest { server, message, outcome }
        PantoProviderFallback { message, status, from_provider, from_model, to_provider, to_model, error_kind, error_message }
        PantoErrorInfo { kind, status, retryable, _reserved0, message, provider_code, retry_after_ms, output }
        PantoHistoryCompacted { messages_before, messages_after, tokens_before, tokens_after }
        PantoEventPayload { message_start, block_start, content_delta, tool_details, block_complete, message_end, tool_call_start, tool_result, provider_retry, message_complete, error, history_compacted, output_repair, steering_delivered, tool_progress, server_log, mcp_sampling_request, mcp_elicitation_request, provider_fallback, _reserved }
        PantoEvent { struct_size, kind, flags, _private_gen, _private, payload }
        PantoMcpOAuthHooks { load_tokens, save_tokens, open_url, user_data, free_user_data }
        PantoMcpClientHooks { approve_sampling, elicit, user_data, free_user_data }
    }
    out
}

fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("panto-capi-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Compiles a probe generated from the header (every struct and union, every field)
/// with the system C compiler and compares what it prints with Rust's layout, both ways:
/// a field only one side has fails too.
#[test]
fn layout_agrees_with_the_c_compiler() {
    let dir = scratch_dir("probe");
    let header = crate_dir().join("include/panto.h");
    let probe = Command::new("python3")
        .arg(crate_dir().join("tools/abi_check.py"))
        .arg("probe")
        .arg(&header)
        .output()
        .expect("python3 runs");
    assert!(
        probe.status.success(),
        "{}",
        String::from_utf8_lossy(&probe.stderr)
    );
    std::fs::write(dir.join("probe.c"), &probe.stdout).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let built = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(crate_dir().join("include"))
        .arg(dir.join("probe.c"))
        .arg("-o")
        .arg(dir.join("probe"))
        .output()
        .expect("the C compiler runs");
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let ran = Command::new(dir.join("probe")).output().unwrap();
    assert!(ran.status.success());
    let mut c = BTreeMap::new();
    for line in String::from_utf8(ran.stdout).unwrap().lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        match w.as_slice() {
            [name, "size", size, "align", align] => {
                c.insert(
                    name.to_string(),
                    (size.parse().unwrap(), align.parse().unwrap()),
                );
            }
            [name, "offset", off] => {
                c.insert(name.to_string(), (off.parse().unwrap(), 0));
            }
            _ => panic!("unexpected probe line {line:?}"),
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    let rust = rust_layout();
    for (k, v) in &c {
        assert_eq!(
            rust.get(k),
            Some(v),
            "{k}: C says {v:?}, Rust {:?}",
            rust.get(k)
        );
    }
    for k in rust.keys() {
        assert!(c.contains_key(k), "{k}: in Rust, not in the header");
    }
    assert!(c.len() > 80, "the probe saw every field ({})", c.len());
}

fn sample_blocks() -> Vec<Block> {
    vec![
        Block::text("plain \u{0} text with a NUL, \"quotes\" and ünïcödé"),
        Block::Reasoning {
            text: "hm".into(),
            signature: Some("sig".into()),
        },
        Block::RedactedReasoning {
            data: "opaque".into(),
        },
        Block::ToolCall {
            call_id: "call_1".into(),
            name: "weather".into(),
            arguments: Some(json!({"city": "Paris", "n": 1.5e3})),
            arguments_raw: None,
        },
        Block::ToolCall {
            call_id: "call_2".into(),
            name: "weather".into(),
            arguments: None,
            arguments_raw: Some("{oops".into()),
        },
    ]
}

fn sample_events() -> Vec<Event> {
    let usage = Usage {
        input_tokens: 1,
        output_tokens: 2,
        cache_read_tokens: 3,
        cache_write_tokens: 4,
        reasoning_tokens: u64::MAX,
        reported: true,
    };
    let mut v = vec![
        Event::MessageStart {
            message: 0,
            model: "gpt-4o".into(),
            response_id: Some("resp_1".into()),
            queued_ms: Some(7),
        },
        Event::MessageStart {
            message: 1,
            model: String::new(),
            response_id: None,
            queued_ms: None,
        },
        Event::BlockStart {
            message: 0,
            block: 1,
            kind: BlockKind::ToolCall,
        },
        Event::ContentDelta {
            message: 0,
            block: 1,
            kind: DeltaKind::ToolArgs,
            text: "{\"ci".into(),
        },
        Event::ToolDetails {
            message: 0,
            block: 1,
            call_id: "call_1".into(),
            name: "weather".into(),
        },
        Event::MessageEnd {
            message: 0,
            stop_reason: StopReason::Other("eos2".into()),
            usage,
        },
        Event::ToolCallStart {
            message: 0,
            call_id: "call_1".into(),
            name: "weather".into(),
            arguments: Some(json!({"city": "Paris"})),
            arguments_raw: None,
            host: true,
        },
        Event::ToolCallStart {
            message: 0,
            call_id: "call_2".into(),
            name: "weather".into(),
            arguments: None,
            arguments_raw: Some("{oops".into()),
            host: false,
        },
        Event::ToolResult {
            message: 0,
            call_id: "call_1".into(),
            name: "weather".into(),
            output: "18°C".into(),
            is_error: true,
            parts: Vec::new(),
        },
        Event::ToolResult {
            message: 0,
            call_id: "call_3".into(),
            name: "camera".into(),
            output: "a cat".into(),
            is_error: false,
            parts: vec![
                Block::text("a cat"),
                Block::Image(
                    panto_core::Media::bytes(b"\x89PNG\r\n\x1a\n..".to_vec(), None).unwrap(),
                ),
            ],
        },
        Event::ProviderRetry {
            message: 0,
            attempt: 2,
            max_attempts: 3,
            delay_ms: 500,
            reason: "server: overloaded".into(),
            status: Some(529),
        },
        Event::MessageComplete {
            stop_reason: StopReason::EndTurn,
            usage,
            messages: 2,
            text: "done".into(),
            // The C text holds the numbers as the model wrote them (no f64 in between).
            output: Some(
                panto_core::JsonText::from_json(r#"{"city":"Paris","n":123456789012345678901234567890,"x":0.12345678901234567890123}"#)
                    .unwrap(),
            ),
            deferred: vec![panto_core::DeferredCall {
                call_id: "call_9".into(),
                name: "delete_file".into(),
                arguments: json!({"path": "/tmp/x"}),
                reason: panto_core::DeferReason::Approval,
            }],
            model: "gpt-4o-mini".into(),
        },
        Event::ProviderFallback {
            message: 1,
            from_provider: "anthropic".into(),
            from_model: "claude-sonnet-4-5".into(),
            to_provider: "openai".into(),
            to_model: "gpt-4o-mini".into(),
            error_kind: "server".into(),
            error_message: "HTTP 503: overloaded".into(),
            status: Some(503),
        },
        Event::ProviderFallback {
            message: 0,
            from_provider: "openai".into(),
            from_model: "a".into(),
            to_provider: "openai".into(),
            to_model: "b".into(),
            error_kind: "connection".into(),
            error_message: "connection refused".into(),
            status: None,
        },
        Event::OutputRepair {
            message: 0,
            attempt: 1,
            max_attempts: 2,
            error: "missing property \"city\"".into(),
        },
        Event::HistoryCompacted {
            messages_before: 40,
            messages_after: 3,
            tokens_before: 120_000,
            tokens_after: u64::MAX,
        },
        Event::SteeringDelivered {
            message: 2,
            text: "stop after this".into(),
        },
        Event::ToolProgress {
            message: 1,
            call_id: "call_4".into(),
            name: "fx__slow".into(),
            progress: 2.5,
            total: Some(10.0),
            text: Some("fetching".into()),
        },
        Event::ToolProgress {
            message: 0,
            call_id: "call_5".into(),
            name: "fx__slow".into(),
            progress: 7.0,
            total: None,
            text: None,
        },
        Event::ServerLog {
            server: "fx".into(),
            level: "warning".into(),
            logger: Some("db".into()),
            data: "disk almost full".into(),
        },
        Event::ServerLog {
            server: "fx".into(),
            level: "error".into(),
            logger: None,
            data: "{\"code\":5}".into(),
        },
        Event::McpSamplingRequest {
            server: "fx".into(),
            summary: "name a colour".into(),
            max_tokens: 64,
            outcome: "answered".into(),
        },
        Event::McpElicitationRequest {
            server: "fx".into(),
            message: "Your name?".into(),
            outcome: "decline".into(),
        },
    ];
    for (i, b) in sample_blocks().into_iter().enumerate() {
        v.push(Event::BlockComplete {
            message: 0,
            block: i as u32,
            content: b,
        });
    }
    v
}

/// # Safety
/// `s` is absent or views a live string of `len` bytes followed by a NUL.
unsafe fn text(s: PantoStr) -> Option<String> {
    if s.ptr.is_null() {
        assert_eq!(s.len, 0);
        return None;
    }
    // SAFETY: a live string of `len` bytes and its NUL (this function's contract).
    let bytes = unsafe { std::slice::from_raw_parts(s.ptr.cast::<u8>(), s.len + 1) };
    assert_eq!(bytes[s.len], 0, "NUL-terminated");
    Some(String::from_utf8(bytes[..s.len].to_vec()).unwrap())
}

fn to_json(ev: &PantoEvent) -> String {
    let mut out = PantoStr::ABSENT;
    // SAFETY: `ev` was filled from a live slot; `out` is a local.
    assert_eq!(unsafe { panto_event_to_json(ev, &mut out) }, PANTO_OK);
    // SAFETY: `out` views the record's JSON, NUL-terminated, alive with `ev`'s slot.
    unsafe { text(out) }.unwrap()
}

#[test]
fn event_to_json_is_byte_identical_to_the_cores() {
    for event in sample_events() {
        let want = event.to_json();
        let record = Slot::holding(Record::event(event.clone()));
        let mut ev = PantoEvent::zeroed();
        ev.struct_size = size_of::<PantoEvent>() as u32;
        // SAFETY: the slot is this test's alone; nothing replaces its record meanwhile.
        unsafe { record.fill(&mut ev) };
        assert_eq!(ev.kind, event.code());
        assert_eq!(to_json(&ev), want);
        // Twice: the JSON is computed once and kept.
        assert_eq!(to_json(&ev), want);
    }
    let e = Error::new(ErrorKind::RateLimited, "slow down")
        .with_status(429)
        .with_retryable(true)
        .with_provider_code(Some("rate_limit_error".into()));
    let record = Slot::holding(Record::error(e.clone()));
    let mut ev = PantoEvent::zeroed();
    ev.struct_size = size_of::<PantoEvent>() as u32;
    // SAFETY: the slot is this test's alone; nothing replaces its record meanwhile.
    unsafe { record.fill(&mut ev) };
    assert_eq!(ev.kind, PANTO_EV_ERROR);
    assert_eq!(to_json(&ev), e.to_json());
}

/// A JSON value for a field of the vocabulary's type `ty`, never a zero or empty one
/// (so a filled payload cannot be all zero).
fn sample_field(vocab: &serde_json::Value, ty: &str) -> Option<serde_json::Value> {
    let first_of = |name: &str| {
        vocab["enums"]
            .as_array()?
            .iter()
            .find(|e| e["name"] == name)
            .map(|e| e["values"][0]["name"].clone())
    };
    Some(match ty {
        "u16" | "u32" | "u64" => json!(1),
        "f64" => json!(1.5),
        "bool" => json!(true),
        "string" => json!("s"),
        "json" => json!({"k": 1}),
        "json_text" => json!({"n": 12345678901234567890u64}),
        "block" => json!({"type": "text", "text": "t"}),
        "parts" => json!([{"type": "text", "text": "p"}]),
        "deferred_calls" => {
            json!([{"call_id": "c", "name": "n", "arguments": {}, "reason": "approval"}])
        }
        "usage" => {
            let record = vocab["records"]
                .as_array()?
                .iter()
                .find(|r| r["name"] == ty)?;
            let mut out = serde_json::Map::new();
            for f in record["fields"].as_array()? {
                let name = f["name"].as_str()?.to_string();
                out.insert(name, sample_field(vocab, f["type"].as_str()?)?);
            }
            serde_json::Value::Object(out)
        }
        other => first_of(other)?,
    })
}

/// One event of every type the vocabulary describes, each field set from its described
/// type: what the core can emit, whatever this crate's own samples cover.
fn one_event_of_each_type() -> Vec<Event> {
    let vocab = panto_core::vocab::describe();
    let mut out = Vec::new();
    for e in vocab["events"].as_array().unwrap() {
        let name = e["name"].as_str().unwrap();
        let mut obj = serde_json::Map::new();
        obj.insert("type".into(), json!(name));
        for f in e["fields"].as_array().unwrap() {
            let ty = f["type"].as_str().unwrap();
            let value = sample_field(&vocab, ty).unwrap_or_else(|| {
                panic!(
                    "event {name}: no sample value for a field of type {ty}: extend sample_field"
                )
            });
            obj.insert(f["name"].as_str().unwrap().into(), value);
        }
        let ev: Event = serde_json::from_value(serde_json::Value::Object(obj.clone()))
            .unwrap_or_else(|err| panic!("event {name}: {obj:?} does not read back: {err}"));
        out.push(ev);
    }
    assert_eq!(out.len(), Event::TYPES.len());
    out
}

/// The `_ => return false` arm of `record::fill_event` exists only because `Event` is
/// non-exhaustive: an event added to the core without its C payload would reach C with
/// an all-zero payload, indistinguishable from real zeros. This names such an event.
#[test]
fn every_event_of_the_vocabulary_has_a_c_payload() {
    let mut unmapped = Vec::new();
    for event in one_event_of_each_type() {
        let record = Record::event(event.clone());
        assert_eq!(record.kind(), event.code());
        if !record.mapped() {
            unmapped.push(event.type_name());
            continue;
        }
        let slot = Slot::holding(record);
        let mut ev = new_event();
        // SAFETY: the slot is this test's alone; nothing replaces its record meanwhile.
        unsafe { slot.fill(&mut ev) };
        // SAFETY: every arm is plain data, so the union may be read as its words.
        let words: [u64; 32] = unsafe { ev.payload._reserved };
        assert!(
            words.iter().any(|w| *w != 0),
            "{}: mapped, but its payload is all zero",
            event.type_name()
        );
        assert!(arm_size(event.code()) <= size_of::<[u64; 32]>());
    }
    assert!(
        unmapped.is_empty(),
        "events with no C payload in capi/src/record.rs (fill_event), delivered to C as \
         all zeros: {unmapped:?}; map each to its Panto* struct (and declare it in \
         include/panto.h)"
    );
}

/// The hand-written samples below (byte-identical JSON, every field in the payload)
/// hold one event of every type, so a new event gets its byte-level tests too.
#[test]
fn the_samples_hold_every_event_type() {
    let have: std::collections::BTreeSet<_> =
        sample_events().iter().map(|e| e.type_name()).collect();
    let missing: Vec<_> = Event::TYPES.iter().filter(|t| !have.contains(*t)).collect();
    assert!(
        missing.is_empty(),
        "sample_events() has no {missing:?}: add one of each"
    );
}

#[test]
fn payloads_carry_every_field() {
    // SAFETY: every handle passed is this test's own and live until it frees it; every
    // other pointer is a local's address or a string of the test.
    unsafe {
        for event in sample_events() {
            let record = Slot::holding(Record::event(event.clone()));
            let mut ev = PantoEvent::zeroed();
            record.fill(&mut ev);
            let p = &ev.payload;
            match &event {
                Event::MessageStart {
                    message,
                    model,
                    response_id,
                    queued_ms,
                } => {
                    assert_eq!(p.message_start.queued_ms, queued_ms.unwrap_or(0));
                    assert_eq!(p.message_start.message, *message);
                    assert_eq!(text(p.message_start.model).as_ref(), Some(model));
                    assert_eq!(text(p.message_start.response_id), *response_id);
                }
                Event::BlockStart { block, kind, .. } => {
                    assert_eq!(p.block_start.block, *block);
                    assert_eq!(p.block_start.kind, block_kind_code(*kind));
                }
                Event::ContentDelta { text: t, kind, .. } => {
                    assert_eq!(p.content_delta.kind, delta_kind_code(*kind));
                    assert_eq!(text(p.content_delta.text).as_ref(), Some(t));
                }
                Event::ToolDetails { call_id, name, .. } => {
                    assert_eq!(text(p.tool_details.call_id).as_ref(), Some(call_id));
                    assert_eq!(text(p.tool_details.name).as_ref(), Some(name));
                }
                Event::BlockComplete { content, .. } => {
                    let b = p.block_complete;
                    assert_eq!(
                        text(b.content).unwrap(),
                        serde_json::to_string(content).unwrap()
                    );
                    match content {
                        Block::Text { text: t } => assert_eq!(text(b.text).as_ref(), Some(t)),
                        Block::Reasoning { text: t, signature } => {
                            assert_eq!(text(b.text).as_ref(), Some(t));
                            assert_eq!(text(b.signature), *signature);
                        }
                        Block::RedactedReasoning { data } => {
                            assert_eq!(text(b.text).as_ref(), Some(data))
                        }
                        Block::ToolCall {
                            call_id,
                            arguments,
                            arguments_raw,
                            ..
                        } => {
                            assert_eq!(text(b.call_id).as_ref(), Some(call_id));
                            assert_eq!(
                                text(b.arguments),
                                arguments.as_ref().map(|a| a.to_string())
                            );
                            assert_eq!(text(b.arguments_raw), *arguments_raw);
                            assert!(text(b.text).is_none());
                        }
                        _ => unreachable!(),
                    }
                }
                Event::MessageEnd {
                    stop_reason, usage, ..
                } => {
                    assert_eq!(
                        text(p.message_end.stop_reason).unwrap(),
                        stop_reason.as_string()
                    );
                    assert_eq!(p.message_end.usage.reasoning_tokens, usage.reasoning_tokens);
                    assert_eq!(p.message_end.usage.reported, usage.reported);
                    assert_eq!(p.message_end.usage._reserved0, [0; 7]);
                    assert_eq!(
                        p.message_end.usage.cache_write_tokens,
                        usage.cache_write_tokens
                    );
                }
                Event::ToolCallStart {
                    arguments,
                    arguments_raw,
                    host,
                    ..
                } => {
                    let t = p.tool_call_start;
                    assert_eq!(t.host, *host);
                    assert_eq!(text(t.arguments), arguments.as_ref().map(|a| a.to_string()));
                    assert_eq!(text(t.arguments_raw), *arguments_raw);
                }
                Event::ToolResult {
                    output,
                    is_error,
                    parts,
                    ..
                } => {
                    assert_eq!(p.tool_result.is_error, *is_error);
                    assert_eq!(text(p.tool_result.output).as_ref(), Some(output));
                    let want =
                        (!parts.is_empty()).then(|| panto_core::event::tool_parts::to_json(parts));
                    assert_eq!(text(p.tool_result.parts), want);
                    if let Some(json) = &want {
                        assert!(
                            json.ends_with(
                                r#"{"type":"image","media_type":"image/png","size":10,"data":"iVBORw0KGgouLg=="}]"#
                            ),
                            "{json}"
                        );
                    }
                }
                Event::ProviderRetry {
                    attempt,
                    max_attempts,
                    delay_ms,
                    reason,
                    status,
                    ..
                } => {
                    let r = p.provider_retry;
                    assert_eq!(
                        (r.attempt, r.max_attempts, r.delay_ms),
                        (*attempt, *max_attempts, *delay_ms)
                    );
                    assert_eq!(r.status, status.map_or(0, u32::from));
                    assert_eq!(text(r.reason).as_ref(), Some(reason));
                }
                Event::MessageComplete {
                    messages,
                    text: t,
                    usage,
                    output,
                    deferred,
                    model,
                    ..
                } => {
                    assert_eq!(text(p.message_complete.model).as_ref(), Some(model));
                    assert_eq!(
                        text(p.message_complete.deferred).as_deref(),
                        Some(
                            r#"[{"call_id":"call_9","name":"delete_file","arguments":{"path":"/tmp/x"},"reason":"approval"}]"#
                        )
                    );
                    assert_eq!(deferred.len(), 1);
                    assert_eq!(
                        text(p.message_complete.output),
                        output.as_ref().map(|v| v.to_string())
                    );
                    assert_eq!(
                        text(p.message_complete.output).as_deref(),
                        Some(
                            r#"{"city":"Paris","n":123456789012345678901234567890,"x":0.12345678901234567890123}"#
                        )
                    );
                    assert_eq!(p.message_complete.messages, *messages);
                    assert_eq!(p.message_complete.usage.reported, usage.reported);
                    assert_eq!(p.message_complete.usage.input_tokens, usage.input_tokens);
                    assert_eq!(text(p.message_complete.text).as_ref(), Some(t));
                    assert_eq!(text(p.message_complete.stop_reason).unwrap(), "end_turn");
                }
                Event::OutputRepair {
                    message,
                    attempt,
                    max_attempts,
                    error,
                } => {
                    let r = p.output_repair;
                    assert_eq!(
                        (r.message, r.attempt, r.max_attempts),
                        (*message, *attempt, *max_attempts)
                    );
                    assert_eq!(text(r.error).as_ref(), Some(error));
                }
                Event::HistoryCompacted {
                    messages_before,
                    messages_after,
                    tokens_before,
                    tokens_after,
                } => {
                    let h = p.history_compacted;
                    assert_eq!(
                        (
                            h.messages_before,
                            h.messages_after,
                            h.tokens_before,
                            h.tokens_after
                        ),
                        (
                            *messages_before,
                            *messages_after,
                            *tokens_before,
                            *tokens_after
                        )
                    );
                }
                Event::SteeringDelivered { message, text: t } => {
                    let d = p.steering_delivered;
                    assert_eq!(d.message, *message);
                    assert_eq!(text(d.text).as_ref(), Some(t));
                }
                Event::ToolProgress {
                    message,
                    call_id,
                    name,
                    progress,
                    total,
                    text: t,
                } => {
                    let g = p.tool_progress;
                    assert_eq!(g.message, *message);
                    assert_eq!(text(g.call_id).as_ref(), Some(call_id));
                    assert_eq!(text(g.name).as_ref(), Some(name));
                    assert_eq!(g.progress, *progress);
                    assert_eq!(g.total, total.unwrap_or(0.0));
                    assert_eq!(text(g.text), *t);
                }
                Event::ServerLog {
                    server,
                    level,
                    logger,
                    data,
                } => {
                    let l = p.server_log;
                    assert_eq!(text(l.server).as_ref(), Some(server));
                    assert_eq!(text(l.level).as_ref(), Some(level));
                    assert_eq!(text(l.logger), *logger);
                    assert_eq!(text(l.data).as_ref(), Some(data));
                }
                Event::McpSamplingRequest {
                    server,
                    summary,
                    max_tokens,
                    outcome,
                } => {
                    let r = p.mcp_sampling_request;
                    assert_eq!(text(r.server).as_ref(), Some(server));
                    assert_eq!(text(r.summary).as_ref(), Some(summary));
                    assert_eq!(r.max_tokens, *max_tokens);
                    assert_eq!(text(r.outcome).as_ref(), Some(outcome));
                }
                Event::McpElicitationRequest {
                    server,
                    message,
                    outcome,
                } => {
                    let r = p.mcp_elicitation_request;
                    assert_eq!(text(r.server).as_ref(), Some(server));
                    assert_eq!(text(r.message).as_ref(), Some(message));
                    assert_eq!(text(r.outcome).as_ref(), Some(outcome));
                }
                Event::ProviderFallback {
                    message,
                    from_provider,
                    from_model,
                    to_provider,
                    to_model,
                    error_kind,
                    error_message,
                    status,
                } => {
                    let f = p.provider_fallback;
                    assert_eq!(f.message, *message);
                    assert_eq!(f.status, status.map_or(0, u32::from));
                    assert_eq!(text(f.from_provider).as_ref(), Some(from_provider));
                    assert_eq!(text(f.from_model).as_ref(), Some(from_model));
                    assert_eq!(text(f.to_provider).as_ref(), Some(to_provider));
                    assert_eq!(text(f.to_model).as_ref(), Some(to_model));
                    assert_eq!(text(f.error_kind).as_ref(), Some(error_kind));
                    assert_eq!(text(f.error_message).as_ref(), Some(error_message));
                }
                other => panic!("{}: add the checks of its payload here", other.type_name()),
            }
            // Nothing past the arm is set: the rest of the union is zero.
            let words = p._reserved;
            let arm_end = arm_size(ev.kind).div_ceil(8);
            assert!(words[arm_end..].iter().all(|w| *w == 0), "kind {}", ev.kind);
        }
    }
}

fn arm_size(kind: u32) -> usize {
    match kind {
        PANTO_EV_MESSAGE_START => size_of::<PantoMessageStart>(),
        PANTO_EV_BLOCK_START => size_of::<PantoBlockStart>(),
        PANTO_EV_CONTENT_DELTA => size_of::<PantoContentDelta>(),
        PANTO_EV_TOOL_DETAILS => size_of::<PantoToolDetails>(),
        PANTO_EV_BLOCK_COMPLETE => size_of::<PantoBlockComplete>(),
        PANTO_EV_MESSAGE_END => size_of::<PantoMessageEnd>(),
        PANTO_EV_TOOL_CALL_START => size_of::<PantoToolCallStart>(),
        PANTO_EV_TOOL_RESULT => size_of::<PantoToolResult>(),
        PANTO_EV_PROVIDER_RETRY => size_of::<PantoProviderRetry>(),
        PANTO_EV_MESSAGE_COMPLETE => size_of::<PantoMessageComplete>(),
        PANTO_EV_HISTORY_COMPACTED => size_of::<PantoHistoryCompacted>(),
        PANTO_EV_OUTPUT_REPAIR => size_of::<PantoOutputRepair>(),
        PANTO_EV_STEERING_DELIVERED => size_of::<PantoSteeringDelivered>(),
        PANTO_EV_TOOL_PROGRESS => size_of::<PantoToolProgress>(),
        PANTO_EV_SERVER_LOG => size_of::<PantoServerLog>(),
        PANTO_EV_MCP_SAMPLING_REQUEST => size_of::<PantoMcpSamplingRequest>(),
        PANTO_EV_MCP_ELICITATION_REQUEST => size_of::<PantoMcpElicitationRequest>(),
        PANTO_EV_PROVIDER_FALLBACK => size_of::<PantoProviderFallback>(),
        _ => size_of::<PantoErrorInfo>(),
    }
}

#[test]
fn every_payload_fits_the_reserved_union() {
    for kind in panto_core::event::EVENTS.iter().map(|e| e.code) {
        assert!(arm_size(kind) <= size_of::<[u64; 32]>());
    }
    assert_eq!(size_of::<PantoEventPayload>(), 256);
}

#[test]
fn names_of_kinds() {
    // SAFETY: every handle passed is this test's own and live until it frees it; every
    // other pointer is a local's address or a string of the test.
    unsafe {
        assert_eq!(
            text(panto_error_kind_name(PANTO_ERR_RATE_LIMITED)).unwrap(),
            "rate_limited"
        );
        assert_eq!(text(panto_error_kind_name(0)).unwrap(), "unknown");
        assert_eq!(text(panto_error_kind_name(999)).unwrap(), "unknown");
        assert_eq!(
            text(panto_event_kind_name(PANTO_EV_TOOL_CALL_START)).unwrap(),
            "tool_call_start"
        );
        assert_eq!(
            text(panto_event_kind_name(PANTO_EV_ERROR)).unwrap(),
            "error"
        );
        assert_eq!(
            text(panto_event_kind_name(PANTO_EV_NONE)).unwrap(),
            "unknown"
        );
        for k in ErrorKind::ALL {
            assert_eq!(text(panto_error_kind_name(k.code())).unwrap(), k.as_str());
        }
    }
}

// ---- turns against the in-process test server -------------------------------------

fn server(name: &str) -> panto_testserver::TestServer {
    let path = crate_dir().join("tests/scenarios").join(name);
    panto_testserver::TestServer::start(panto_testserver::Scenario::from_file(path).unwrap())
        .unwrap()
}

fn new_agent(url: &str) -> *mut PantoAgent {
    let cfg = json!({"provider": "openai", "model": "gpt-4o-mini", "base_url": format!("{url}/v1"),
                     "api_key": "sk-test"})
    .to_string();
    let mut agent = ptr::null_mut();
    let mut err = ptr::null_mut();
    // SAFETY: the config is `len` bytes of a live string; the out-pointers are locals.
    let st = unsafe { panto_agent_new(cfg.as_ptr().cast(), cfg.len(), &mut agent, &mut err) };
    assert_eq!(st, PANTO_OK);
    assert!(err.is_null());
    agent
}

/// # Safety
/// `agent` is a live agent.
unsafe fn start(agent: *mut PantoAgent) -> *mut PantoStream {
    let mut stream = ptr::null_mut();
    // SAFETY: a live agent (this function's contract), 2 bytes of a C string literal, a
    // local out-pointer.
    let st = unsafe { panto_agent_stream(agent, c"hi".as_ptr(), 2, &mut stream, ptr::null_mut()) };
    assert_eq!(st, PANTO_OK);
    stream
}

fn new_event() -> PantoEvent {
    let mut ev = PantoEvent::zeroed();
    ev.struct_size = size_of::<PantoEvent>() as u32;
    ev
}

#[test]
fn a_panic_is_reported_as_internal_and_poisons_the_stream() {
    let srv = server("text.json");
    // SAFETY: every handle passed is this test's own and live until it frees it; every
    // other pointer is a local's address or a string of the test.
    unsafe {
        let agent = new_agent(&srv.url());
        let stream = start(agent);
        let mut ev = new_event();
        PANIC_NEXT.with(|p| p.set(true));
        assert_eq!(panto_next_event(stream, &mut ev), PANTO_ERROR);
        assert_eq!(ev.kind, PANTO_EV_ERROR);
        assert_eq!(ev.payload.error.kind, PANTO_ERR_INTERNAL);
        assert!(text(ev.payload.error.message).unwrap().contains("panic"));
        // Poisoned: every later call fails the same way, without touching the turn.
        for _ in 0..2 {
            assert_eq!(panto_next_event_timeout(stream, &mut ev, 0), PANTO_ERROR);
            assert_eq!(ev.payload.error.kind, PANTO_ERR_INTERNAL);
            assert!(text(ev.payload.error.message).unwrap().contains("unusable"));
        }
        let mut err = ptr::null_mut();
        assert_eq!(
            panto_stream_submit_tool_result(
                stream,
                c"x".as_ptr(),
                1,
                ptr::null(),
                0,
                false,
                &mut err
            ),
            PANTO_ERROR
        );
        assert_eq!(panto_error_kind(err), PANTO_ERR_INTERNAL);
        panto_error_free(err);
        panto_stream_free(stream);
        // The agent is unaffected and free again once the stream is gone.
        let stream = start(agent);
        let mut done = false;
        while !done {
            match panto_next_event(stream, &mut ev) {
                PANTO_EVENT => {}
                PANTO_DONE => done = true,
                st => panic!("status {st}: {:?}", text(ev.payload.error.message)),
            }
        }
        panto_stream_free(stream);

        // A panic in an agent call poisons the agent.
        PANIC_NEXT.with(|p| p.set(true));
        let mut err = ptr::null_mut();
        assert_eq!(panto_agent_clear_history(agent, &mut err), PANTO_ERROR);
        assert_eq!(panto_error_kind(err), PANTO_ERR_INTERNAL);
        panto_error_free(err);
        let mut err = ptr::null_mut();
        let mut out = ptr::null_mut();
        assert_eq!(
            panto_agent_stream(agent, ptr::null(), 0, &mut out, &mut err),
            PANTO_ERROR
        );
        assert!(out.is_null());
        assert_eq!(panto_error_kind(err), PANTO_ERR_INTERNAL);
        assert!(text(panto_error_message(err)).unwrap().contains("unusable"));
        panto_error_free(err);
        panto_agent_free(agent);

        // A panic while creating an agent: an error, no agent.
        PANIC_NEXT.with(|p| p.set(true));
        let cfg = "{}";
        let mut agent = ptr::null_mut();
        let mut err = ptr::null_mut();
        assert_eq!(
            panto_agent_new(cfg.as_ptr().cast(), cfg.len(), &mut agent, &mut err),
            PANTO_ERROR
        );
        assert!(agent.is_null());
        assert_eq!(panto_error_kind(err), PANTO_ERR_INTERNAL);
        panto_error_free(err);
    }
}

#[test]
fn struct_size_is_checked_and_extra_room_is_zeroed() {
    let srv = server("text.json");
    // SAFETY: every handle passed is this test's own and live until it frees it; every
    // other pointer is a local's address or a string of the test.
    unsafe {
        let agent = new_agent(&srv.url());
        let stream = start(agent);
        let v1 = PANTO_EVENT_SIZE_1_0 as usize;
        // Not the size of a released PantoEvent: zero, too small, too large — and the
        // plausible garbage of a forgotten PANTO_EVENT_INIT between 1.0's size and the
        // old upper bound, which used to be accepted and zero-filled (up to 4 KiB of the
        // caller's stack). Nothing is written, the stream is not touched.
        for bad in [
            0,
            8,
            v1 as u32 - 1,
            v1 as u32 + 1,
            v1 as u32 + 64,
            1000,
            PANTO_EVENT_MAX_STRUCT_SIZE,
            PANTO_EVENT_MAX_STRUCT_SIZE + 1,
            u32::MAX,
        ] {
            let mut buf = vec![0xAAu8; 8192];
            buf[..4].copy_from_slice(&bad.to_ne_bytes());
            let out = buf.as_mut_ptr().cast::<PantoEvent>();
            assert_eq!(panto_next_event(stream, out), PANTO_ERROR, "size {bad}");
            assert!(
                buf[4..].iter().all(|b| *b == 0xAA),
                "size {bad}: nothing written"
            );
            let mut json = PantoStr::ABSENT;
            assert_eq!(panto_event_to_json(out, &mut json), PANTO_ERROR);
        }
        // A caller built against ABI 1.0 passes 1.0's size (a literal, 280): exactly
        // those bytes are written, whatever size this library's struct has.
        #[repr(C, align(8))]
        struct Buf([u8; 1024]);
        let mut buf = Buf([0xAA; 1024]);
        buf.0[..4].copy_from_slice(&PANTO_EVENT_SIZE_1_0.to_ne_bytes());
        let out = buf.0.as_mut_ptr().cast::<PantoEvent>();
        assert_eq!(panto_next_event(stream, out), PANTO_EVENT);
        assert_eq!(
            (*out).struct_size,
            PANTO_EVENT_SIZE_1_0,
            "struct_size is kept"
        );
        assert_eq!(
            (*out).kind,
            PANTO_EV_MESSAGE_START,
            "the first event was not consumed before"
        );
        assert!(
            buf.0[v1..].iter().all(|b| *b == 0xAA),
            "nothing past struct_size"
        );
        panto_stream_free(stream);
        panto_agent_free(agent);
    }
}

/// ABI 1.0's size is pinned, not derived from the struct: the set of accepted sizes
/// holds it as a literal, so appending a field to `PantoEvent` (which must add the new
/// size) can never make a 1.0 caller fail.
#[test]
fn the_1_0_event_size_is_pinned() {
    assert_eq!(PANTO_EVENT_SIZE_1_0, 280);
    assert!(accepted_size(280));
    assert!(accepted_size(size_of::<PantoEvent>() as u32));
    // What the header says in C.
    let h = header_constants();
    assert_eq!(h["PANTO_EVENT_SIZE_1_0"], 280);
}

#[test]
fn invalid_input_strings_are_errors_never_replaced() {
    // SAFETY: every handle passed is this test's own and live until it frees it; every
    // other pointer is a local's address or a string of the test.
    unsafe {
        let bad = b"{\"model\":\"\xff\"}";
        let mut agent = ptr::null_mut();
        let mut err = ptr::null_mut();
        let st = panto_agent_new(
            bad.as_ptr().cast::<c_char>(),
            bad.len(),
            &mut agent,
            &mut err,
        );
        assert_eq!(st, PANTO_ERROR);
        assert!(agent.is_null());
        assert_eq!(panto_error_kind(err), PANTO_ERR_CONFIG);
        let msg = text(panto_error_message(err)).unwrap();
        assert!(msg.contains("UTF-8") && msg.contains("offset 10"), "{msg}");
        panto_error_free(err);
        // NULL with a length is an error; NULL with 0 is the empty string.
        let mut err = ptr::null_mut();
        assert_eq!(
            panto_agent_new(ptr::null(), 5, &mut agent, &mut err),
            PANTO_ERROR
        );
        assert_eq!(panto_error_kind(err), PANTO_ERR_CONFIG);
        panto_error_free(err);
    }
}

#[test]
fn owned_strings_are_freed_once_and_emptied() {
    // SAFETY: every handle passed is this test's own and live until it frees it; every
    // other pointer is a local's address or a string of the test.
    unsafe {
        let mut s = owned("{\"version\":1}".into());
        assert_eq!(s.len, 13);
        assert_eq!(*s.ptr.add(13), 0);
        panto_string_free(&mut s);
        assert!(s.ptr.is_null());
        assert_eq!(s.len, 0);
        panto_string_free(&mut s); // emptied: a no-op
        panto_string_free(ptr::null_mut());
        let mut empty = owned(String::new());
        assert!(!empty.ptr.is_null());
        panto_string_free(&mut empty);
    }
}

#[test]
fn handles_may_be_shared_across_threads() {
    // Cancel, submit and the diagnostics run on a stream from any thread while another
    // thread is in a next call; agents are used from many threads at once.
    fn shared<T: Send + Sync>() {}
    shared::<PantoStream>();
    shared::<PantoAgent>();
    shared::<PantoError>();
}

#[test]
fn derived_strings_are_kept_by_the_record() {
    let record = Record::event(Event::MessageEnd {
        message: 0,
        stop_reason: StopReason::ToolUse,
        usage: Usage::default(),
    });
    assert_eq!(record.derived_len(), 1);
}

#[test]
fn an_error_event_carries_the_servers_wait() {
    // The wait a response asked for reaches C in the error payload; 0 when it named none.
    for (wait, want) in [
        (Some(120_000), 120_000),
        (Some(u64::MAX), u64::MAX),
        (None, 0),
    ] {
        let e = Error::new(ErrorKind::RateLimited, "slow down")
            .with_status(429)
            .with_retry_after_ms(wait);
        let record = Slot::holding(Record::error(e));
        let mut ev = PantoEvent::zeroed();
        ev.struct_size = size_of::<PantoEvent>() as u32;
        // SAFETY: the slot is this test's alone; nothing replaces its record meanwhile.
        unsafe { record.fill(&mut ev) };
        assert_eq!(ev.kind, PANTO_EV_ERROR);
        // SAFETY: `kind` is error, so that arm was written (plain data).
        assert_eq!(unsafe { ev.payload.error.retry_after_ms }, want);
    }
}

/// A tool call's content JSON is assembled around its arguments' text (serialized once);
/// it must be byte for byte what serde writes for the block, and `arguments` the same
/// text as the value serializes to.
#[test]
fn tool_call_content_is_serdes_json_with_arguments_serialized_once() {
    let blocks = [
        Block::ToolCall {
            call_id: "call_1".into(),
            name: "weather".into(),
            arguments: Some(json!({"city": "Paris", "n": [1, 2.5, null], "q": "a\"b\\c\u{1}é"})),
            arguments_raw: None,
        },
        Block::ToolCall {
            call_id: "id \"quoted\"\n".into(),
            name: "ñame".into(),
            arguments: Some(json!({})),
            arguments_raw: Some("{raw".into()),
        },
        Block::ToolCall {
            call_id: "c".into(),
            name: "n".into(),
            arguments: None,
            arguments_raw: Some("not json".into()),
        },
        Block::text("plain"),
    ];
    for block in &blocks {
        let (content, args) = crate::record::content_and_arguments_json(block);
        assert_eq!(content, serde_json::to_string(block).unwrap(), "{block:?}");
        match block {
            Block::ToolCall {
                arguments: Some(v), ..
            } => assert_eq!(args.as_deref(), Some(v.to_string().as_str())),
            _ => assert!(args.is_none()),
        }
    }
}
