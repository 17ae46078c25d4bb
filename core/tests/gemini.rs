//! The Gemini provider (`streamGenerateContent?alt=sse`): the decoder on the fixture
//! streams of `tests/fixtures/gemini/` (written from Google's documented format), the
//! request body, and whole turns against `panto-testserver` — thought signatures sent
//! back byte for byte on their parts (also after save / restore and compaction), tool
//! results as `functionResponse` parts, HTTP errors and `retryDelay`, the key in
//! `x-goog-api-key` and never in the URL.

use std::time::Duration;

use panto::message::validate_history;
use panto::provider::{
    gemini, request_body, request_body_with, DecodedMessage, ProviderKind, RequestOptions,
    RequestParams, ToolSpec,
};
use panto::{
    Agent, Block, BlockKind, CancellationToken, CompactOptions, Config, Effort, ErrorKind, Event,
    FnTool, Message, Reasoning, Role, StopReason, ToolOutput, TurnControl,
};
use panto_testkit::decode::{check_invariants, decode, decode_sized, Outcome};
use panto_testkit::{quick_retries, turn, turn_with, API_KEY};
use panto_testserver::{Scenario, TestServer};
use serde_json::{json, Value};

const GE: ProviderKind = ProviderKind::Gemini;
const MODEL: &str = "gemini-2.5-flash";
const PATH: &str = "/v1beta/models/gemini-2.5-flash:streamGenerateContent";

fn fixture(name: &str) -> String {
    let path = format!(
        "{}/../tests/fixtures/gemini/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Decodes a body whole, checks the event invariants, and that 1- and 7-byte chunks
/// decode identically.
fn run(body: &str) -> Outcome {
    let o = decode(GE, body.as_bytes());
    if let Err(why) = check_invariants(&o, 0) {
        panic!("invariant violated: {why}\nevents: {:#?}", o.events);
    }
    assert_eq!(
        decode_sized(GE, body.as_bytes(), 1),
        o,
        "1-byte chunks differ"
    );
    assert_eq!(
        decode_sized(GE, body.as_bytes(), 7),
        o,
        "7-byte chunks differ"
    );
    o
}

fn ok(o: &Outcome) -> &DecodedMessage {
    match &o.result {
        Ok(m) => m,
        Err(e) => panic!("decoding failed: {e}\nevents: {:#?}", o.events),
    }
}

fn marker(sig: &str) -> Block {
    Block::Opaque {
        provider: "gemini".into(),
        block: json!({ "thoughtSignature": sig }),
    }
}

fn call(id: &str, city: &str) -> Block {
    Block::ToolCall {
        call_id: id.into(),
        name: "weather".into(),
        arguments: Some(json!({ "city": city })),
        arguments_raw: None,
    }
}

// ---------------------------------------------------------------- decoder

#[test]
fn text_keeps_the_signature_of_its_last_part() {
    let o = run(&fixture("text.sse"));
    let m = ok(&o);
    assert_eq!(m.stop_reason, StopReason::EndTurn);
    assert_eq!(m.model, "gemini-2.5-flash");
    assert_eq!(m.response_id.as_deref(), Some("resp-text-1"));
    // The signature came on an empty last part: it ends the text run it belongs to.
    assert_eq!(
        m.message.content,
        [
            Block::text("Paris is the capital of France."),
            marker("CtEBAdHtim9+text/sig==")
        ]
    );
    // The last frame's counts replace the earlier ones; thoughts count as output.
    assert_eq!(
        (
            m.usage.input_tokens,
            m.usage.output_tokens,
            m.usage.reasoning_tokens
        ),
        (9, 28, 21)
    );
    assert!(m.usage.reported);
    // Events: one text block, two deltas; the marker has no events.
    let kinds: Vec<&str> = o.events.iter().map(Event::type_name).collect();
    assert_eq!(
        kinds,
        [
            "message_start",
            "block_start",
            "content_delta",
            "content_delta",
            "block_complete",
            "message_end"
        ]
    );
}

#[test]
fn thought_parts_are_reasoning_and_text_follows_in_its_own_block() {
    let o = run(&fixture("thoughts.sse"));
    let m = ok(&o);
    assert_eq!(
        m.message.content,
        [
            Block::Reasoning {
                text: "**Weighing the options**\n\nThe user wants a number. Seven is prime.".into(),
                // Gemini's signatures never become a reasoning signature (which would
                // go to Anthropic as one).
                signature: None,
            },
            Block::text("7"),
            marker("EpQCCpECAdHt/thoughts+sig==")
        ]
    );
    assert!(o.events.iter().any(|e| matches!(
        e,
        Event::BlockStart {
            block: 0,
            kind: BlockKind::Reasoning,
            ..
        }
    )));
    assert_eq!(m.usage.cache_read_tokens, 4);
    assert_eq!(m.usage.output_tokens, 41);
}

#[test]
fn a_function_call_arrives_whole_and_makes_a_tool_use_stop() {
    let o = run(&fixture("tool-call.sse"));
    let m = ok(&o);
    // finishReason is STOP; the call decides.
    assert_eq!(m.stop_reason, StopReason::ToolUse);
    assert_eq!(
        m.message.content,
        [
            call("gemini_call_0_0", "Paris"),
            marker("CiQBcsjafX+call/one/sig==")
        ]
    );
    // One arguments delta with the whole object.
    let args: Vec<&str> = o
        .events
        .iter()
        .filter_map(|e| match e {
            Event::ContentDelta { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(args, [r#"{"city":"Paris"}"#]);
    // Gemini's own id is kept.
    let o = run(&fixture("tool-call-second.sse"));
    assert_eq!(ok(&o).message.content[0], call("fc-7", "Lyon"));
}

#[test]
fn parallel_calls_keep_the_signature_on_the_first_only() {
    let o = run(&fixture("tool-parallel.sse"));
    let m = ok(&o);
    assert_eq!(
        m.message.content,
        [
            call("gemini_call_0_0", "Paris"),
            marker("CiQBparallel+first/only=="),
            call("gemini_call_0_1", "Lyon"),
        ]
    );
    assert_eq!(m.stop_reason, StopReason::ToolUse);
}

#[test]
fn finish_reasons_map_to_stop_reasons() {
    let m = ok(&run(&fixture("max-tokens.sse"))).clone();
    assert_eq!(m.stop_reason, StopReason::MaxTokens);
    assert_eq!(m.message.text(), "Once upon a time, there was");
    let m = ok(&run(&fixture("safety.sse"))).clone();
    assert_eq!(m.stop_reason, StopReason::ContentFilter);
    assert_eq!(m.message.text(), "Here is how");
    let m = ok(&run(&fixture("prompt-blocked.sse"))).clone();
    assert_eq!(m.stop_reason, StopReason::ContentFilter);
    assert!(m.message.content.is_empty());
    for (raw, want) in [
        ("RECITATION", "content_filter"),
        ("LANGUAGE", "other:LANGUAGE"),
        ("UNEXPECTED_TOOL_CALL", "other:UNEXPECTED_TOOL_CALL"),
    ] {
        let body = frame(json!([{"text":"x"}]), Some(raw));
        assert_eq!(ok(&run(&body)).stop_reason.as_string(), want, "{raw}");
    }
    // A function call with MAX_TOKENS is still a tool_use stop: the call came whole.
    let body = frame(
        json!([{"functionCall":{"name":"f","args":{}}}]),
        Some("MAX_TOKENS"),
    );
    assert_eq!(ok(&run(&body)).stop_reason, StopReason::ToolUse);
}

#[test]
fn a_malformed_function_call_becomes_a_call_the_model_is_told_about() {
    let o = run(&fixture("malformed-call.sse"));
    let m = ok(&o);
    assert_eq!(m.stop_reason, StopReason::ToolUse);
    match &m.message.content[..] {
        [Block::ToolCall {
            call_id,
            name,
            arguments: None,
            arguments_raw: Some(raw),
        }] => {
            assert_eq!(call_id, "gemini_call_0_0");
            assert_eq!(name, "weather", "named from the finishMessage");
            assert!(
                raw.contains("print(default_api.weather(city=Paris))"),
                "{raw}"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_error_frame_is_a_provider_error_and_a_truncated_stream_is_incomplete() {
    let o = run(&fixture("error-midstream.sse"));
    let e = o.result.as_ref().unwrap_err();
    assert_eq!(e.kind, ErrorKind::Provider);
    assert_eq!(e.provider_code.as_deref(), Some("INTERNAL"));
    assert!(e.message.contains("An internal error has occurred"), "{e}");
    assert!(e.retryable);
    // No finishReason before the end: incomplete, never a silent success.
    let text = fixture("text.sse");
    let cut = &text[..text.rfind("data:").unwrap()];
    let o = run(cut);
    assert_eq!(o.result.unwrap_err().kind, ErrorKind::Incomplete);
    // Not JSON: protocol.
    let o = run("data: {\"candidates\": [\n\n");
    assert_eq!(o.result.unwrap_err().kind, ErrorKind::Protocol);
}

#[test]
fn unknown_parts_are_kept_verbatim_and_limits_hold() {
    let body = frame(
        json!([
            {"text":"a"},
            {"executableCode":{"language":"PYTHON","code":"print(1)"}},
            {"text":"b"}
        ]),
        Some("STOP"),
    );
    let m = ok(&run(&body)).clone();
    assert_eq!(
        m.message.content,
        [
            Block::text("a"),
            Block::Opaque {
                provider: "gemini".into(),
                block: json!({"executableCode":{"language":"PYTHON","code":"print(1)"}})
            },
            Block::text("b"),
        ]
    );
    // 300 calls in one frame: past max_tool_calls (256) is a protocol error.
    let parts: Vec<Value> = (0..300)
        .map(|i| json!({"functionCall":{"name":"f","args":{"i":i}}}))
        .collect();
    let body = frame(json!(parts), Some("STOP"));
    let o = decode(GE, body.as_bytes());
    assert_eq!(o.result.unwrap_err().kind, ErrorKind::Protocol);
}

#[test]
fn a_signed_empty_part_with_no_run_to_end_stays_its_own_part() {
    // After a call, a part holding only a signature belongs to no run: it must not end
    // up on the call (which came without one) when sent back.
    let body = frame(
        json!([
            {"functionCall":{"name":"weather","args":{"city":"Paris"}}},
            {"thoughtSignature":"bare-sig"}
        ]),
        Some("STOP"),
    );
    let m = ok(&run(&body)).message.clone();
    assert_eq!(
        m.content[1],
        Block::Opaque {
            provider: "gemini".into(),
            block: json!({"text":"","thoughtSignature":"bare-sig"})
        }
    );
    let history = vec![Message::user("q"), m];
    let params = history_only(&history);
    assert_eq!(
        request_body(GE, &params)["contents"][1]["parts"],
        json!([
            {"functionCall":{"name":"weather","args":{"city":"Paris"}}},
            {"text":"","thoughtSignature":"bare-sig"}
        ])
    );
}

#[test]
fn a_message_past_max_message_bytes_is_a_protocol_error() {
    // Many small frames (each under the SSE cap) must not grow a message without bound.
    let one = frame(json!([{"text":"x".repeat(100)}]), None);
    let body = one.repeat(50);
    let limits = panto::provider::DecodeLimits {
        max_message_bytes: 2048,
        ..Default::default()
    };
    let mut decoder = panto::provider::Decoder::with_limits(GE, 0, limits);
    let mut parser = panto::sse::SseParser::default();
    let r = parser.feed(body.as_bytes(), |ev| {
        decoder.on_sse(&ev, &mut |_| Ok(())).map(|_| ())
    });
    let e = r.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Protocol);
    assert!(e.message.contains("max_message_bytes"), "{e}");
}

#[test]
fn a_body_that_arrives_whole_decodes_like_the_stream() {
    // generateContent's single response and streamGenerateContent's JSON array.
    let frames: Vec<Value> = fixture("text.sse")
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let streamed = ok(&run(&fixture("text.sse"))).clone();
    let mut events = Vec::new();
    let whole = panto::provider::decode_complete_body(
        GE,
        0,
        &Value::Array(frames).to_string(),
        Default::default(),
        &mut |e| {
            events.push(e);
            Ok(())
        },
    )
    .unwrap()
    .unwrap();
    assert_eq!(whole.message, streamed.message);
    assert_eq!(whole.stop_reason, StopReason::EndTurn);
}

// ---------------------------------------------------------------- request body

#[test]
fn the_request_body_puts_signatures_back_on_their_parts() {
    let history = vec![
        Message::user("weather in Paris and Lyon?"),
        Message {
            role: Role::Assistant,
            content: vec![
                Block::Reasoning {
                    text: "two cities".into(),
                    signature: None,
                },
                marker("sig-thought"),
                call("gemini_call_0_1", "Paris"),
                marker("sig-call"),
                call("fc-2", "Lyon"),
            ],
        },
        Message {
            role: Role::Tool,
            content: vec![
                Block::ToolResult {
                    call_id: "gemini_call_0_1".into(),
                    name: "weather".into(),
                    output: "sunny".into(),
                    is_error: false,
                    parts: Vec::new(),
                },
                Block::ToolResult {
                    call_id: "fc-2".into(),
                    name: "weather".into(),
                    output: "no such city".into(),
                    is_error: true,
                    parts: Vec::new(),
                },
            ],
        },
        Message::user("thanks"),
    ];
    let tools = [ToolSpec {
        name: "weather".into(),
        description: "Weather".into(),
        parameters: json!({"type":"object","properties":{"city":{"type":"string"}}}),
        needs_approval: false,
        external: false,
    }];
    let params = RequestParams {
        model: MODEL,
        system: Some("be brief"),
        max_tokens: Some(100),
        temperature: Some(0.5),
        tools: &tools,
        messages: &history,
    };
    let body = request_body(GE, &params);
    assert_eq!(
        body["contents"],
        json!([
            {"role":"user","parts":[{"text":"weather in Paris and Lyon?"}]},
            {"role":"model","parts":[
                {"text":"two cities","thought":true,"thoughtSignature":"sig-thought"},
                // panto's own id stays panto's; Gemini's goes back.
                {"functionCall":{"name":"weather","args":{"city":"Paris"}},"thoughtSignature":"sig-call"},
                {"functionCall":{"id":"fc-2","name":"weather","args":{"city":"Lyon"}}}
            ]},
            // Tool results and the next user message meet: one user content, results first.
            {"role":"user","parts":[
                {"functionResponse":{"name":"weather","response":{"output":"sunny"}}},
                {"functionResponse":{"id":"fc-2","name":"weather","response":{"error":"no such city"}}},
                {"text":"thanks"}
            ]}
        ])
    );
    assert_eq!(
        body["systemInstruction"],
        json!({"parts":[{"text":"be brief"}]})
    );
    assert_eq!(
        body["tools"],
        json!([{"functionDeclarations":[{"name":"weather","description":"Weather",
            "parametersJsonSchema":{"type":"object","properties":{"city":{"type":"string"}}}}]}])
    );
    assert_eq!(body["toolConfig"]["functionCallingConfig"]["mode"], "AUTO");
    assert_eq!(
        body["generationConfig"],
        json!({"maxOutputTokens":100,"temperature":0.5})
    );
    assert!(body.get("model").is_none(), "the model goes in the URL");

    // Reasoning control: a budget for 2.x models or when given, a level otherwise.
    let with = |model: &str, r: Reasoning| {
        let p = RequestParams { model, ..params };
        let o = RequestOptions {
            reasoning: Some(r),
            ..RequestOptions::default()
        };
        request_body_with(GE, &p, &o)["generationConfig"]["thinkingConfig"].clone()
    };
    assert_eq!(
        with(MODEL, Reasoning::new(Effort::Low)),
        json!({"thinkingBudget":1024,"includeThoughts":true})
    );
    assert_eq!(
        with("gemini-3-pro-preview", Reasoning::new(Effort::High)),
        json!({"thinkingLevel":"high","includeThoughts":true})
    );
    assert_eq!(
        with(
            "gemini-3-flash",
            Reasoning {
                effort: Effort::Medium,
                budget_tokens: Some(2048)
            }
        ),
        json!({"thinkingBudget":2048,"includeThoughts":true})
    );
    assert_eq!(
        with(MODEL, Reasoning::new(Effort::None)),
        json!({"thinkingBudget":0,"includeThoughts":false})
    );
}

#[test]
fn other_providers_never_see_gemini_signatures_and_broken_calls_go_as_text() {
    let history = vec![
        Message::user("hi"),
        Message {
            role: Role::Assistant,
            content: vec![
                Block::text("ok"),
                marker("sig-text"),
                Block::ToolCall {
                    call_id: "gemini_call_0_2".into(),
                    name: "weather".into(),
                    arguments: None,
                    arguments_raw: Some("MALFORMED_FUNCTION_CALL: print(weather(x))".into()),
                },
            ],
        },
        Message {
            role: Role::Tool,
            content: vec![Block::ToolResult {
                call_id: "gemini_call_0_2".into(),
                name: "weather".into(),
                output: "the tool arguments are not valid JSON".into(),
                is_error: true,
                parts: Vec::new(),
            }],
        },
    ];
    let params = history_only(&history);
    for kind in [ProviderKind::OpenAi, ProviderKind::Anthropic] {
        let text = request_body(kind, &params).to_string();
        assert!(!text.contains("sig-text"), "{kind:?}: {text}");
    }
    let body = request_body(GE, &params);
    assert_eq!(
        body["contents"][1]["parts"][0],
        json!({"text":"ok","thoughtSignature":"sig-text"})
    );
    let call = body["contents"][1]["parts"][1]["text"].as_str().unwrap();
    assert!(call.contains("print(weather(x))"), "{call}");
    let answer = body["contents"][2]["parts"][0]["text"].as_str().unwrap();
    assert!(answer.contains("not valid JSON"), "{answer}");
    assert!(body.get("generationConfig").is_none());
}

#[test]
fn the_endpoint_names_the_model_and_never_the_key() {
    let c = Config::new(GE, "models/gemini-2.5-flash")
        .with_base_url("http://localhost:1/")
        .with_api_key("AIza-secret");
    assert_eq!(
        c.endpoint(),
        "http://localhost:1/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    );
    assert_eq!(
        c.endpoint_for("a b/c"),
        "http://localhost:1/v1beta/models/a%20b%2Fc:streamGenerateContent?alt=sse"
    );
    assert_eq!(
        Config::new(GE, "m").base_url,
        "https://generativelanguage.googleapis.com"
    );
    let c = Config::from_json(r#"{"provider":"gemini","model":"m","api_key":"k"}"#).unwrap();
    assert_eq!(c.provider, GE);
    // A second credential header beside api_key is refused, as for the others.
    let e = Config::from_json(
        r#"{"provider":"gemini","model":"m","api_key":"k","headers":{"x-goog-api-key":"other"}}"#,
    )
    .and_then(|c| c.validate())
    .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Config);
}

#[test]
fn http_errors_map_to_kinds_and_retry_delay_is_read_from_the_body() {
    let body =
        json!({"error":{"code":429,"message":"Resource has been exhausted (e.g. check quota).",
        "status":"RESOURCE_EXHAUSTED","details":[
            {"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[]},
            {"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"1.5s"}]}})
        .to_string();
    let e = gemini::http_error(429, &body);
    assert_eq!(e.kind, ErrorKind::RateLimited);
    assert_eq!(e.provider_code.as_deref(), Some("RESOURCE_EXHAUSTED"));
    assert!(e.retryable);
    assert!(e.message.contains("Resource has been exhausted"), "{e}");
    assert_eq!(
        gemini::retry_delay(&body),
        Some(Duration::from_millis(1500))
    );
    for (status, code, kind) in [
        (400, "INVALID_ARGUMENT", ErrorKind::BadRequest),
        (403, "PERMISSION_DENIED", ErrorKind::Permission),
        (404, "NOT_FOUND", ErrorKind::NotFound),
        (500, "INTERNAL", ErrorKind::Server),
        (503, "UNAVAILABLE", ErrorKind::Server),
    ] {
        let body = json!({"error":{"code":status,"message":"m","status":code}}).to_string();
        let e = gemini::http_error(status, &body);
        assert_eq!((e.kind, e.provider_code.as_deref()), (kind, Some(code)));
        assert_eq!(e.retryable, status >= 500, "{status}");
    }
    // A bad key is a 400 with an ErrorInfo reason: authentication, as a 401 elsewhere.
    let body =
        json!({"error":{"code":400,"message":"API key not valid. Please pass a valid API key.",
        "status":"INVALID_ARGUMENT","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo",
        "reason":"API_KEY_INVALID","domain":"googleapis.com"}]}})
        .to_string();
    let e = gemini::http_error(400, &body);
    assert_eq!(
        (e.kind, e.provider_code.as_deref(), e.retryable),
        (ErrorKind::Authentication, Some("API_KEY_INVALID"), false)
    );
    for bad in [
        "",
        "{}",
        r#"{"error":{"details":[{"@type":"x.google.rpc.RetryInfo","retryDelay":"-1s"}]}}"#,
        r#"{"error":{"details":[{"@type":"x.google.rpc.RetryInfo","retryDelay":"1e300s"}]}}"#,
    ] {
        assert_eq!(gemini::retry_delay(bad), None, "{bad}");
    }
}

// ---------------------------------------------------------------- whole turns

/// The request of `history` alone: no system prompt, limits or tools.
fn history_only(history: &[Message]) -> RequestParams<'_> {
    RequestParams {
        model: MODEL,
        system: None,
        max_tokens: None,
        temperature: None,
        tools: &[],
        messages: history,
    }
}

/// The SSE frame of one candidate with `parts`, ending the message with `finish` if set.
fn frame(parts: Value, finish: Option<&str>) -> String {
    let mut candidate = json!({"content": {"parts": parts}});
    if let Some(finish) = finish {
        candidate["finishReason"] = json!(finish);
    }
    format!("data: {}\n\n", json!({"candidates": [candidate]}))
}

fn sse(name: &str) -> Value {
    json!({"status": 200, "headers": {"content-type": "text/event-stream"}, "body": fixture(name)})
}

fn server(responses: Vec<Value>) -> TestServer {
    let exchanges: Vec<Value> = responses
        .into_iter()
        .map(|r| json!({"match": {"method": "POST", "path": PATH}, "response": r}))
        .collect();
    TestServer::start(Scenario::from_value(&json!({ "exchanges": exchanges })).unwrap()).unwrap()
}

/// The suite's configuration: the scripted server's, for [`MODEL`], no retries.
fn cfg(server: &TestServer) -> Config {
    let mut c = panto_testkit::config(GE, server);
    c.model = MODEL.into();
    c
}

fn agent(server: &TestServer) -> Agent {
    let agent = Agent::new(cfg(server).with_system("be brief")).unwrap();
    agent
        .add_tool(FnTool::new(
            "weather",
            "Weather for a city",
            json!({"type":"object","properties":{"city":{"type":"string"}}}),
            |args: Value, _| async move {
                ToolOutput::ok(format!("sunny in {}", args["city"].as_str().unwrap_or("?")))
            },
        ))
        .unwrap();
    agent
}

/// The model parts of request `n`'s contents, in order.
fn model_parts(body: &Value) -> Vec<Value> {
    body["contents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["role"] == "model")
        .flat_map(|c| c["parts"].as_array().unwrap().clone())
        .collect()
}

#[tokio::test]
async fn a_sequential_tool_turn_sends_each_signature_back_on_its_call() {
    let server = server(vec![
        sse("tool-call.sse"),
        sse("tool-call-second.sse"),
        sse("answer.sse"),
    ]);
    let agent = agent(&server);
    let (events, r) = turn(&agent, "weather in Paris, then Lyon?").await;
    let summary = r.unwrap();
    assert_eq!(summary.stop_reason, StopReason::EndTurn);
    assert_eq!(summary.text, "Sunny in Paris, rainy in Lyon.");
    assert_eq!(summary.messages, 3);
    let results: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            Event::ToolResult { output, .. } => Some(output.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(results, ["sunny in Paris", "sunny in Lyon"]);
    let reqs = server.requests();
    assert_eq!(reqs.len(), 3);
    // The key went in its header, never in the URL.
    for r in &reqs {
        assert_eq!(r.headers["x-goog-api-key"], API_KEY);
        assert_eq!(r.query.as_deref(), Some("alt=sse"));
        assert!(!r.headers.contains_key("authorization"));
    }
    // Request 2 carries call 1 with its signature, byte for byte; request 3 both.
    assert_eq!(
        model_parts(&reqs[1].body),
        [
            json!({"functionCall":{"name":"weather","args":{"city":"Paris"}},
            "thoughtSignature":"CiQBcsjafX+call/one/sig=="})
        ]
    );
    assert_eq!(
        reqs[1].body["contents"][2],
        json!({"role":"user","parts":[{"functionResponse":{"name":"weather","response":{"output":"sunny in Paris"}}}]})
    );
    assert_eq!(
        model_parts(&reqs[2].body)[1],
        json!({"functionCall":{"id":"fc-7","name":"weather","args":{"city":"Lyon"}},
            "thoughtSignature":"CiQBcsjafX+call/two/sig=="})
    );
    assert_eq!(
        reqs[2].body["contents"][4]["parts"][0]["functionResponse"]["id"],
        "fc-7"
    );
    validate_history(&agent.history()).unwrap();
}

#[tokio::test]
async fn a_saved_history_with_signatures_reloads_and_continues() {
    let server = server(vec![
        sse("tool-parallel.sse"),
        sse("text.sse"),
        sse("answer.sse"),
    ]);
    let first = agent(&server);
    turn(&first, "weather in Paris and Lyon?").await.1.unwrap();
    let saved = first.history_json();
    assert!(
        saved.contains("CiQBparallel+first/only==") && saved.contains("CtEBAdHtim9+text/sig==")
    );
    drop(first);

    let second = agent(&server);
    second.load_history_json(&saved).unwrap();
    assert_eq!(second.history_json(), saved);
    let (_, r) = turn(&second, "and tomorrow?").await;
    assert_eq!(r.unwrap().text, "Sunny in Paris, rainy in Lyon.");
    let reqs = server.requests();
    assert_eq!(reqs.len(), 3);
    // The restored conversation goes out as the original one would have: parallel
    // calls with the signature on the first only, the text reply with its signature.
    let parts = model_parts(&reqs[2].body);
    assert_eq!(
        parts,
        [
            json!({"functionCall":{"name":"weather","args":{"city":"Paris"}},"thoughtSignature":"CiQBparallel+first/only=="}),
            json!({"functionCall":{"name":"weather","args":{"city":"Lyon"}}}),
            json!({"text":"Paris is the capital of France.","thoughtSignature":"CtEBAdHtim9+text/sig=="}),
        ]
    );
    // One user content holds both answers, in call order.
    let answers: Vec<&str> = reqs[2].body["contents"][2]["parts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            p["functionResponse"]["response"]["output"]
                .as_str()
                .unwrap()
        })
        .collect();
    assert_eq!(answers, ["sunny in Paris", "sunny in Lyon"]);
}

#[tokio::test]
async fn compaction_keeps_the_signatures_of_the_kept_messages() {
    let server = server(vec![
        sse("text.sse"),
        sse("tool-call.sse"),
        sse("answer.sse"),
        // The summary, then the next answer.
        sse("max-tokens.sse"),
        sse("answer.sse"),
    ]);
    let agent = agent(&server);
    turn(&agent, "capital of France?").await.1.unwrap();
    turn(&agent, "weather in Paris?").await.1.unwrap();
    // Keep the last turn (call, result, answer) and summarize the first.
    let c = agent
        .compact(
            &CompactOptions {
                keep_last: 4,
                ..CompactOptions::default()
            },
            &CancellationToken::new(),
        )
        .await
        .unwrap();
    assert!(c.tokens_before > 0);
    let h = agent.history();
    assert!(h.contains(&Message {
        role: Role::Assistant,
        content: vec![
            call("gemini_call_0_0", "Paris"),
            marker("CiQBcsjafX+call/one/sig==")
        ]
    }));
    turn(&agent, "thanks").await.1.unwrap();
    let reqs = server.requests();
    let last = &reqs.last().unwrap().body;
    assert!(model_parts(last).contains(
        &json!({"functionCall":{"name":"weather","args":{"city":"Paris"}},"thoughtSignature":"CiQBcsjafX+call/one/sig=="})
    ), "{last}");
    // The summarized turn's signature is gone with it.
    assert!(!last.to_string().contains("CtEBAdHtim9+text/sig=="));
}

#[tokio::test]
async fn resource_exhausted_is_retried_after_the_delay_google_names() {
    let limited = json!({"status": 429, "json": {"error": {"code": 429,
        "message": "Resource has been exhausted (e.g. check quota).", "status": "RESOURCE_EXHAUSTED",
        "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "0.2s"}]}}});
    let server = server(vec![limited.clone(), sse("text.sse")]);
    let agent = Agent::new(cfg(&server).with_retry(quick_retries(1))).unwrap();
    let (events, r) = turn(&agent, "capital?").await;
    r.unwrap();
    let retry = events
        .iter()
        .find_map(|e| match e {
            Event::ProviderRetry {
                delay_ms, status, ..
            } => Some((*delay_ms, *status)),
            _ => None,
        })
        .expect("a provider_retry");
    // Google's wait, not the 1–5 ms backoff.
    assert_eq!(retry, (200, Some(429)));

    // With retries off, the error says what Google said, with its wait and code.
    let server2 = server_with(vec![limited]);
    let agent = Agent::new(cfg(&server2)).unwrap();
    let e = turn(&agent, "capital?").await.1.unwrap_err();
    assert_eq!(e.kind, ErrorKind::RateLimited);
    assert_eq!(e.provider_code.as_deref(), Some("RESOURCE_EXHAUSTED"));
    assert_eq!(e.retry_after_ms, Some(200));
}

fn server_with(responses: Vec<Value>) -> TestServer {
    server(responses)
}

#[tokio::test]
async fn the_key_never_reaches_an_error_or_an_event() {
    let leaky = json!({"status": 400, "json": {"error": {"code": 400,
        "message": format!("API key not valid: {API_KEY}"), "status": "INVALID_ARGUMENT"}}});
    let server = server(vec![leaky]);
    let agent = Agent::new(cfg(&server)).unwrap();
    let (events, r) = turn(&agent, "hi").await;
    let e = r.unwrap_err();
    assert_eq!(e.kind, ErrorKind::BadRequest);
    assert_eq!(e.provider_code.as_deref(), Some("INVALID_ARGUMENT"));
    assert!(!e.to_string().contains(API_KEY), "{e}");
    assert!(!format!("{events:?}").contains(API_KEY));
    assert!(!server.requests()[0].path.contains(API_KEY));
}

#[tokio::test]
async fn a_turn_picks_its_model_into_the_url() {
    let other = "/v1beta/models/gemini-3-flash:streamGenerateContent";
    let scenario = json!({"exchanges": [{"match": {"path": other}, "response": sse("text.sse")}]});
    let server = TestServer::start(Scenario::from_value(&scenario).unwrap()).unwrap();
    let agent = Agent::new(cfg(&server)).unwrap();
    let options = panto::TurnOptions {
        model: Some("gemini-3-flash".into()),
        ..Default::default()
    };
    turn_with(&agent, "hi", &TurnControl::default(), options)
        .await
        .1
        .unwrap();
    assert_eq!(server.requests()[0].path, other);
}
