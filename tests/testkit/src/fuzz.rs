//! What each fuzz target does with its input, shared by the libFuzzer binaries in
//! `fuzz/fuzz_targets/` and by `core/tests/fuzz_regressions.rs`, which replays saved
//! crash inputs through exactly the same code on stable Rust. Every function panics when
//! a property fails; errors returned by panto for bad input are expected and ignored.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

use panto::config::Config;
use panto::message::{history_from_json, history_to_json, validate_history};
use panto::provider::{
    http_error, request_body, request_body_with, Decoder, Progress, ProviderKind, RequestOptions,
    RequestParams,
};
use panto::retry::{delay, RetryHints};
use panto::sse::{SseParser, DEFAULT_MAX_EVENT_SIZE};
use panto::{Block, Dialect, Error, ErrorKind, Event, Message, Role};

// The event-order invariants every decoded response must satisfy, as the decoding test
// suites check them.
use crate::decode;

/// One SSE event with owned fields: `(event, data, id)`.
type OwnedEvent = (String, String, String);

/// Everything observable from one pass of the SSE parser over a stream.
#[derive(Debug, PartialEq)]
struct SseRun {
    events: Vec<OwnedEvent>,
    /// Whether any chunk counted as progress.
    progress: bool,
    retry_ms: Option<u64>,
    pending: bool,
    error: Option<ErrorKind>,
}

fn sse_run<'a>(max_event_size: usize, chunks: impl IntoIterator<Item = &'a [u8]>) -> SseRun {
    let mut parser = SseParser::new(max_event_size);
    let mut run = SseRun {
        events: Vec::new(),
        progress: false,
        retry_ms: None,
        pending: false,
        error: None,
    };
    for chunk in chunks {
        let fed = parser.feed(chunk, |e| {
            run.events
                .push((e.event.to_owned(), e.data.to_owned(), e.id.to_owned()));
            Ok(())
        });
        match fed {
            Ok(p) => run.progress |= p,
            Err(e) => {
                // Like http.rs: the first error ends the stream.
                run.error = Some(e.kind);
                break;
            }
        }
    }
    run.retry_ms = parser.retry_ms();
    run.pending = parser.has_pending();
    run
}

/// Splits the fuzz input into chunk sizes and the stream itself. The first byte's low
/// nibble says how many size bytes follow (0 to 15); each size byte is one chunk length
/// (0 = an empty chunk, which must change nothing), used in turn until the stream is
/// used up. A leading 0 byte thus means "the rest, in one piece", which is how seed
/// captures are stored.
pub fn split_sse_input(data: &[u8]) -> (u8, &[u8], &[u8]) {
    let Some((&head, rest)) = data.split_first() else {
        return (0, &[], &[]);
    };
    let n = usize::from(head & 0x0F).min(rest.len());
    let (sizes, body) = rest.split_at(n);
    (head, sizes, body)
}

fn chunk_body<'a>(body: &'a [u8], sizes: &[u8]) -> Vec<&'a [u8]> {
    let mut out = Vec::new();
    let mut rest = body;
    if sizes.iter().all(|&s| s == 0) {
        // Only empty chunks: interleave them once, then the whole stream.
        out.extend(sizes.iter().map(|_| &rest[..0]));
        out.push(rest);
        return out;
    }
    while !rest.is_empty() {
        for &s in sizes {
            let (chunk, tail) = rest.split_at(usize::from(s).min(rest.len()));
            out.push(chunk);
            rest = tail;
        }
    }
    out
}

/// `sse`: the parser must produce the same events, retry value and pending state
/// whatever the chunking; a small size limit may only cut the event sequence short.
pub fn sse(data: &[u8]) {
    let (head, sizes, body) = split_sse_input(data);
    let chunks = chunk_body(body, sizes);
    let whole = sse_run(DEFAULT_MAX_EVENT_SIZE, [body]);
    let split = sse_run(DEFAULT_MAX_EVENT_SIZE, chunks.iter().copied());
    assert_eq!(
        whole, split,
        "chunking changed the result (chunk sizes {sizes:?})"
    );

    // The high nibble picks a small limit so oversized events are hit often.
    let limit = 16 + usize::from(head >> 4) * 64;
    let limited = sse_run(limit, chunks.iter().copied());
    assert!(
        whole.events.starts_with(&limited.events),
        "a size limit of {limit} changed events instead of only stopping early"
    );
    match limited.error {
        None => assert_eq!(limited.events, whole.events),
        Some(kind) => assert_eq!(kind, ErrorKind::Protocol),
    }
}

/// What one decoding pass produced.
struct DecodeRun {
    events: Vec<Event>,
    result: Result<Option<panto::provider::DecodedMessage>, Error>,
}

/// Decodes `data` the way http.rs does: one SSE parser feeding one decoder, stop at the
/// first error, ignore events after the decoder said the response is finished, `on_eof`
/// when the body ends first. `refuse_at`: the event callback fails on that event (a
/// consumer stopping the turn).
fn decode_run(kind: ProviderKind, data: &[u8], refuse_at: Option<usize>) -> DecodeRun {
    let mut decoder = Decoder::new(kind, 0);
    let mut parser = SseParser::default();
    let mut events = Vec::new();
    // Set once the callback refused an event, and once the decoder returned an error:
    // from either moment on, no event may be emitted.
    let refused = AtomicBool::new(false);
    let failed = AtomicBool::new(false);
    let mut emit = |ev: Event| -> panto::Result<()> {
        assert!(
            !refused.load(Relaxed),
            "event emitted after the callback returned an error: {}",
            ev.to_json()
        );
        assert!(
            !failed.load(Relaxed),
            "event emitted after the decoder returned an error: {}",
            ev.to_json()
        );
        // Serialization of every event is part of the path to the host.
        let _ = ev.to_json();
        events.push(ev);
        if refuse_at == Some(events.len() - 1) {
            refused.store(true, Relaxed);
            return Err(Error::cancelled());
        }
        Ok(())
    };
    let mut finished = false;
    let fed = parser.feed(data, |ev| {
        if finished {
            // http.rs drops these; a decoder fed them anyway must stay finished and quiet.
            let again = decoder.on_sse(&ev, &mut |e: Event| -> panto::Result<()> {
                panic!("event emitted after the response finished: {}", e.to_json())
            });
            assert!(
                matches!(again, Ok(Progress::Finished)),
                "a finished decoder answered {again:?}"
            );
            return Ok(());
        }
        let r = decoder.on_sse(&ev, &mut emit);
        if r.is_err() {
            failed.store(true, Relaxed);
        }
        if r? == Progress::Finished {
            finished = true;
        }
        Ok(())
    });
    let result = match fed {
        Err(e) => Err(e),
        Ok(_) if finished => Ok(()),
        Ok(_) => {
            let r = decoder.on_eof(&mut emit);
            if r.is_err() {
                failed.store(true, Relaxed);
            }
            r
        }
    };
    if refused.load(Relaxed) {
        assert!(
            matches!(&result, Err(e) if e.kind == ErrorKind::Cancelled),
            "the callback's error was not passed on: {:?}",
            result.as_ref().err()
        );
    }
    if result.is_ok() {
        // After success, end of body must be harmless and silent.
        let again = decoder.on_eof(&mut |e: Event| -> panto::Result<()> {
            panic!(
                "event emitted by on_eof after the response finished: {}",
                e.to_json()
            )
        });
        assert!(again.is_ok(), "on_eof after success failed: {again:?}");
    }
    let result = result.map(|()| decoder.into_message());
    DecodeRun { events, result }
}

/// `decoder_openai` / `decoder_anthropic`: any bytes, decoded as a stream (and read as an
/// error body); nothing may panic, the events must keep their ordering invariants, no
/// event may follow an error, and a consumer's error stops decoding at once.
pub fn decoder(kind: ProviderKind, data: &[u8]) {
    // The same bytes as the body of a failed (non-200) response.
    let status = 100 + (data.len() % 500) as u16;
    let _ = http_error(status, &String::from_utf8_lossy(data)).to_string();
    if kind == ProviderKind::Gemini {
        let body = String::from_utf8_lossy(data);
        let _ = panto::provider::gemini::http_error(status, &body).to_string();
        let _ = panto::provider::gemini::retry_delay(&body);
    }

    let full = decode_run(kind, data, None);
    let outcome = decode::Outcome {
        events: full.events.clone(),
        result: match &full.result {
            Ok(m) => m.clone().ok_or_else(|| Error::internal("no message")),
            Err(e) => Err(e.clone()),
        },
    };
    if let Err(why) = decode::check_invariants(&outcome, 0) {
        panic!("event invariant violated: {why}");
    }
    if let Ok(decoded) = &full.result {
        let decoded = decoded
            .as_ref()
            .expect("decoding succeeded but the decoder holds no message");
        assert!(
            matches!(full.events.last(), Some(Event::MessageEnd { .. })),
            "a successful response did not end with message_end"
        );
        saved_history_of_decoded(kind, &decoded.message);
    }
    if !full.events.is_empty() {
        // Refuse one event, picked from the input so mutations move it around.
        let at = data.len() % full.events.len();
        let cut = decode_run(kind, data, Some(at));
        assert_eq!(
            cut.events[..],
            full.events[..=at],
            "refusing event {at} changed the events before it"
        );
        assert!(cut.result.is_err());
    }
}

/// A decoded assistant message, answered and saved, must load back unchanged, and must
/// encode as a request for its provider.
fn saved_history_of_decoded(kind: ProviderKind, assistant: &Message) {
    let results: Vec<Block> = assistant
        .tool_calls()
        .filter_map(|b| match b {
            Block::ToolCall { call_id, name, .. } => Some(Block::ToolResult {
                call_id: call_id.clone(),
                name: name.clone(),
                output: "ok".into(),
                is_error: false,
                parts: Vec::new(),
            }),
            _ => None,
        })
        .collect();
    let mut history = vec![Message::user("q"), assistant.clone()];
    if !results.is_empty() {
        history.push(Message {
            role: Role::Tool,
            content: results,
        });
    }
    encode_requests(kind, &history);
    if validate_history(&history).is_ok() {
        round_trip(&history);
    }
}

fn round_trip(history: &[Message]) {
    let json = history_to_json(history);
    let loaded = history_from_json(&json)
        .unwrap_or_else(|e| panic!("a saved history does not load again: {e}\n{json}"));
    assert_eq!(
        loaded, history,
        "a saved history loaded differently\n{json}"
    );
    assert_eq!(history_to_json(&loaded), json, "saving is not stable");
}

fn encode_requests(kind: ProviderKind, messages: &[Message]) {
    let params = RequestParams {
        model: "m",
        system: Some("s"),
        max_tokens: Some(16),
        temperature: None,
        tools: &[],
        messages,
    };
    let _ = request_body(kind, &params).to_string();
}

/// `config`: the JSON configuration on any text. An accepted config must validate and be
/// usable (endpoint, retry delays, request bodies).
pub fn config(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let Ok(c) = Config::from_json(&text) else {
        return;
    };
    c.validate()
        .unwrap_or_else(|e| panic!("from_json accepted a config that fails validate: {e}"));
    let _ = c.endpoint();
    let _ = format!("{c:?}");
    let hints = RetryHints::default();
    for retry in 1..=c.retry.max_retries {
        let d = delay(retry, &c.retry, &hints);
        assert!(
            d.as_millis() <= u128::from(c.retry.max_delay_ms),
            "retry {retry} waits {d:?}, above max_delay_ms"
        );
    }
    let params = RequestParams {
        model: &c.model,
        system: c.system.as_deref(),
        max_tokens: c.max_tokens,
        temperature: c.temperature,
        tools: &c.tools,
        messages: &[Message::user("q")],
    };
    // An accepted output schema is one every provider's request can carry.
    let output = c.output_schema.as_ref().map(|schema| {
        panto::OutputSpec::new(schema, c.provider, c.output_mode, "output_schema")
            .unwrap_or_else(|e| panic!("validate accepted an output schema that fails: {e}"))
    });
    let options = RequestOptions {
        reasoning: c.reasoning,
        prompt_caching: c.prompt_caching,
        dialect: Dialect::resolve(c.compat, &c.base_url),
        store: c.store,
        previous_response: None,
        output: output.as_ref().map(panto::OutputSpec::request),
    };
    let _ = request_body_with(c.provider, &params, &options).to_string();
}

/// `history`: a saved history on any text. An accepted one must save and load back
/// unchanged, and encode as a request for every provider.
pub fn history(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let Ok(history) = history_from_json(&text) else {
        return;
    };
    round_trip(&history);
    encode_requests(ProviderKind::OpenAi, &history);
    encode_requests(ProviderKind::Anthropic, &history);
    encode_requests(ProviderKind::Gemini, &history);
    encode_requests(ProviderKind::OpenAiResponses, &history);
}

/// The OpenAI chunk scanner against serde: each `data:` line of an SSE body (and the
/// whole input, as one chunk) must be declined by the scanner or read exactly as serde's
/// derived parse reads it. The scanner is a shortcut; it may never change an answer.
pub fn openai_chunk_scan(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let chunks = text
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .map(str::trim_start)
        .chain([text.trim_start()]);
    for chunk in chunks {
        if let Err(divergence) = panto::provider::openai::check_chunk_scanner(chunk) {
            panic!("{divergence}");
        }
    }
}

/// `output_schema`: structured output's checks and normalization on any schema and any
/// answer. The input is a JSON Schema, a 0 byte, then the model's answer (no 0 byte: the
/// whole input is the schema, the answer empty). For every provider and mode,
/// `OutputSpec::new` accepts or refuses without panicking; an accepted spec's name is
/// a valid tool name; for OpenAI's strict mode every object schema of the wire form on
/// the paths the normalization follows is closed (`additionalProperties: false`) with
/// every property required; reading the answer never panics, and a refusal's message
/// is one line.
pub fn output_schema(data: &[u8]) {
    use panto::output::{OutputSpec, WireMode};
    use panto::{OutputMode, ProviderKind};

    let (schema, answer) = match data.iter().position(|b| *b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let Ok(schema) = serde_json::from_slice::<serde_json::Value>(schema) else {
        return;
    };
    let answer = String::from_utf8_lossy(answer);
    let providers = [
        ProviderKind::OpenAi,
        ProviderKind::Anthropic,
        ProviderKind::Gemini,
        ProviderKind::OpenAiResponses,
    ];
    for provider in providers {
        for mode in [OutputMode::Auto, OutputMode::Native, OutputMode::Tool] {
            let Ok(spec) = OutputSpec::new(&schema, provider, mode, "output_schema") else {
                continue;
            };
            let name = spec.name();
            assert!(
                !name.is_empty()
                    && name.len() <= 64
                    && name
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'),
                "output name {name:?} is not a valid tool name"
            );
            let strict = matches!(
                provider,
                ProviderKind::OpenAi | ProviderKind::OpenAiResponses
            ) && spec.mode() == WireMode::Native;
            if strict {
                check_strict(spec.wire_schema(), "");
            }
            let _ = spec.request();
            if let Err(rejection) = spec.accept(&answer) {
                assert!(
                    !rejection.0.contains('\n'),
                    "a rejection of two lines: {:?}",
                    rejection.0
                );
            }
        }
    }
}

/// Every object schema with `properties` reached through `properties`, `items`, `anyOf`,
/// `$defs` and `definitions` is closed and requires every property.
fn check_strict(schema: &serde_json::Value, path: &str) {
    use serde_json::Value;
    let Some(o) = schema.as_object() else {
        return;
    };
    if let Some(Value::Object(props)) = o.get("properties") {
        assert_eq!(
            o.get("additionalProperties"),
            Some(&Value::Bool(false)),
            "{path}: a strict object schema left open"
        );
        let required: Vec<&str> = o
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        for key in props.keys() {
            assert!(
                required.contains(&key.as_str()),
                "{path}: property {key:?} not required"
            );
        }
        for (key, sub) in props {
            check_strict(sub, &format!("{path}.properties.{key}"));
        }
    }
    if let Some(items) = o.get("items") {
        check_strict(items, &format!("{path}.items"));
    }
    if let Some(Value::Array(any)) = o.get("anyOf") {
        for (i, sub) in any.iter().enumerate() {
            check_strict(sub, &format!("{path}.anyOf[{i}]"));
        }
    }
    for defs in ["$defs", "definitions"] {
        if let Some(Value::Object(d)) = o.get(defs) {
            for (key, sub) in d {
                check_strict(sub, &format!("{path}.{defs}.{key}"));
            }
        }
    }
}

/// The stdio framing as a model: the lines of `body` as the transport gives them out
/// (trimmed, empty ones left out) under a cap of `max` bytes, and whether the cap ended
/// the stream. A whole line over `max` bytes ends it; so does an unfinished last line
/// over `max + 1` (one byte more may still be its newline's, a cheap slack).
fn stdio_model(body: &[u8], max: usize) -> (Vec<Vec<u8>>, bool) {
    let mut lines = Vec::new();
    let mut segments = body.split(|b| *b == b'\n').peekable();
    while let Some(segment) = segments.next() {
        let whole = segments.peek().is_some();
        if whole && segment.len() > max || !whole && segment.len() > max.saturating_add(1) {
            return (lines, true);
        }
        let line = segment.trim_ascii();
        if whole && !line.is_empty() {
            lines.push(line.to_vec());
        }
    }
    (lines, false)
}

/// `mcp`: the MCP client's reading of what a server sends, on any bytes. The input is
/// framed as for `sse` (a chunking header, see [`split_sse_input`]; its high nibble
/// also picks a small message cap), the rest read as a stdio server's stdout, as an SSE
/// answer and as a JSON answer of a Streamable HTTP server. Nothing may panic; the stdio
/// framing must give out the same lines whatever the chunking, exactly the lines of a
/// model of it, none over the cap, must refuse a line over the cap and never hold more
/// than the cap and a byte; the SSE answer's messages must not depend on the chunking,
/// and a small cap may only cut them short; a JSON answer over the cap is refused
/// before it is read. Every message is then routed (with requests waiting: only well
/// formed replies, each answer taken once), and read as a tool listing and a tool
/// result, whose names and schemas must be ones the providers take.
pub fn mcp(data: &[u8]) {
    use panto::mcp::fuzzing;

    let (head, sizes, body) = split_sse_input(data);
    let chunks = chunk_body(body, sizes);
    let small = 16 + usize::from(head >> 4) * 64;

    // stdio: newline-delimited messages.
    #[cfg(unix)]
    let lines = {
        let mut lines = Vec::new();
        for max in [DEFAULT_MAX_EVENT_SIZE, small] {
            let run = fuzzing::stdio_lines(chunks.iter().copied(), max);
            let whole = fuzzing::stdio_lines([body], max);
            assert_eq!(
                (&run.lines, &run.error),
                (&whole.lines, &whole.error),
                "chunking changed the stdio lines (chunk sizes {sizes:?})"
            );
            let (expected, refused) = stdio_model(body, max);
            assert_eq!(run.lines, expected, "the stdio lines under a cap of {max}");
            assert_eq!(
                run.error.is_some(),
                refused,
                "a cap of {max}: refused {:?}, expected {refused}",
                run.error
            );
            assert!(
                run.peak_buffered <= max + 1,
                "held {} bytes under a cap of {max}",
                run.peak_buffered
            );
            if max == DEFAULT_MAX_EVENT_SIZE {
                lines = run.lines;
            }
        }
        lines
    };
    #[cfg(not(unix))]
    let lines: Vec<Vec<u8>> = body.split(|b| *b == b'\n').map(<[u8]>::to_vec).collect();
    let mut messages: Vec<serde_json::Value> = lines
        .iter()
        .filter_map(|l| fuzzing::parse_message(l))
        .collect();

    // Streamable HTTP: an SSE answer, then a JSON one.
    let sse = fuzzing::sse_answer(chunks.iter().copied(), DEFAULT_MAX_EVENT_SIZE);
    assert_eq!(
        sse,
        fuzzing::sse_answer([body], DEFAULT_MAX_EVENT_SIZE),
        "chunking changed the SSE answer (chunk sizes {sizes:?})"
    );
    let capped = fuzzing::sse_answer(chunks.iter().copied(), small);
    assert!(
        sse.messages.starts_with(&capped.messages),
        "a cap of {small} changed the SSE answer's messages instead of only stopping early"
    );
    for answer in [&sse, &capped] {
        if let Some((kind, message)) = &answer.error {
            assert_eq!(*kind, ErrorKind::Protocol, "{message}");
        }
    }
    if capped.error.is_none() {
        assert_eq!(capped.messages, sse.messages);
    }
    messages.extend(sse.messages);
    for max in [DEFAULT_MAX_EVENT_SIZE, small] {
        let json = fuzzing::json_answer(chunks.iter().copied(), max);
        if body.len() > max {
            let why = json.expect_err("a JSON answer over the cap was read");
            assert!(why.contains("larger than"), "{why}");
        } else {
            assert_eq!(
                json.as_ref().ok(),
                fuzzing::parse_message(body).as_ref(),
                "the JSON answer was read differently"
            );
            if max == DEFAULT_MAX_EVENT_SIZE {
                messages.extend(json.ok());
            }
        }
    }
    check_mcp_messages(messages);
}

/// Routes `messages` and reads each one as a tool listing and a tool result.
fn check_mcp_messages(messages: Vec<serde_json::Value>) {
    use panto::mcp::{fuzzing, McpServer};
    use serde_json::Value;

    const REQUESTS: usize = 3;
    let routed = fuzzing::route(messages.iter().cloned(), REQUESTS);
    for reply in &routed.replies {
        assert_eq!(reply["jsonrpc"], "2.0", "{reply}");
        assert!(reply.get("id").is_some(), "a reply without id: {reply}");
        assert!(
            reply.get("result").is_some() != reply.get("error").is_some(),
            "a reply with neither or both of result and error: {reply}"
        );
    }
    assert_eq!(routed.answers.len(), REQUESTS);
    for (i, answer) in routed.answers.iter().enumerate() {
        let id = i as u64 + 1;
        assert_eq!(
            routed.waiting.contains(&id),
            answer.is_none(),
            "request {id}: waiting and answered disagree"
        );
        if let Some(Err((_, message))) = answer {
            assert!(
                message.len() <= 2000,
                "an error message of {} bytes",
                message.len()
            );
        }
    }

    let results: Vec<&Value> = messages
        .iter()
        .map(|m| m.get("result").unwrap_or(m))
        .collect();
    for result in &results {
        let out = fuzzing::tool_result(result);
        assert_eq!(
            out.is_error,
            result.get("isError").and_then(Value::as_bool) == Some(true),
            "isError was not carried over"
        );
    }
    let pages: Vec<Value> = results.into_iter().cloned().collect();
    let configs = [
        McpServer::stdio("server", Vec::<String>::new()),
        McpServer::http("http://localhost/mcp")
            .with_tool_prefix("")
            .with_disabled_tools(["a"]),
    ];
    for config in &configs {
        let Ok(tools) = fuzzing::tool_list("srv", config, &pages) else {
            continue;
        };
        for pair in tools.windows(2) {
            assert!(
                pair[0].0.name < pair[1].0.name,
                "tool names not unique and sorted: {:?} {:?}",
                pair[0].0.name,
                pair[1].0.name
            );
        }
        for (spec, remote) in &tools {
            assert!(
                !spec.name.is_empty()
                    && spec.name.len() <= 64
                    && spec
                        .name
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'),
                "a tool name the providers refuse: {:?}",
                spec.name
            );
            assert_eq!(
                spec.name,
                fuzzing::model_name(config.tool_prefix.as_deref().unwrap_or("srv__"), remote)
            );
            assert_eq!(spec.parameters["type"], "object", "{}", spec.parameters);
            assert!(
                spec.parameters["properties"].is_object(),
                "{}",
                spec.parameters
            );
            let names = |r: &Value| r.as_array().is_some_and(|a| a.iter().all(Value::is_string));
            assert!(
                spec.parameters.get("required").is_none_or(names),
                "{}",
                spec.parameters
            );
            assert!(remote != "a" || config.disabled_tools.is_empty());
        }
    }
}
