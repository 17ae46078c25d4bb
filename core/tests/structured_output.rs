//! Structured output against `panto-testserver`: how each provider is asked for the
//! schema (the server matches the request's fields, and the tests compare the whole
//! schema sent), a validated answer with the nulls of strict mode removed, a repair that
//! succeeds and one that runs out, a refusal, an answer clipped at max_tokens, the forced
//! output tool, configuration errors, and a turn's own schema or none.

use std::time::Duration;

use panto::provider::ProviderKind;
use panto::{
    Agent, Collect, Config, Error, ErrorKind, Event, FnTool, JsonText, Message, OutputMode, Role,
    StopReason, ToolOutput, TurnControl, TurnOptions, TurnSchema, TurnSummary,
};
use panto_testkit::{config, API_KEY};
use panto_testserver::script::{self, exchange};
use panto_testserver::TestServer;
use serde_json::{json, Value};

const HANG_GUARD: Duration = Duration::from_secs(30);

/// A schema with a required and an optional property, named by its title.
fn weather_schema() -> Value {
    json!({
        "title": "weather",
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "celsius": {"type": "integer"}
        },
        "required": ["city"]
    })
}

/// `weather_schema` as OpenAI's strict mode takes it.
fn weather_strict() -> Value {
    json!({
        "title": "weather",
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "celsius": {"type": ["integer", "null"]}
        },
        "required": ["celsius", "city"],
        "additionalProperties": false
    })
}

fn schema_agent(
    kind: ProviderKind,
    server: &TestServer,
    tweak: impl FnOnce(Config) -> Config,
) -> Agent {
    let c = config(kind, server)
        .with_prompt_caching(false)
        .with_output_schema(weather_schema());
    Agent::new(tweak(c)).unwrap()
}

async fn run_with(
    agent: &Agent,
    input: &str,
    options: TurnOptions,
) -> (Vec<Event>, panto::Result<TurnSummary>) {
    let mut events = Collect::default();
    let r = tokio::time::timeout(
        HANG_GUARD,
        agent.run(input, &mut events, &TurnControl::default(), options),
    )
    .await
    .expect("the turn hung");
    (events.0, r)
}

async fn run(agent: &Agent) -> (Vec<Event>, panto::Result<TurnSummary>) {
    run_with(agent, "Weather in Paris?", TurnOptions::default()).await
}

fn completed_output(events: &[Event]) -> Option<Value> {
    match events.last() {
        Some(Event::MessageComplete { output, .. }) => output.as_ref().map(JsonText::to_value),
        other => panic!("the last event is {other:?}"),
    }
}

fn repairs(events: &[Event]) -> Vec<(u32, u32, u32, String)> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::OutputRepair {
                message,
                attempt,
                max_attempts,
                error,
            } => Some((*message, *attempt, *max_attempts, error.clone())),
            _ => None,
        })
        .collect()
}

/// An exchange that answers only a request whose body has `fields` (JSON pointer ->
/// value): a request without them gets the server's 404 mismatch.
fn expecting(fields: Value, response: Value) -> Value {
    json!({"match": {"body": fields}, "response": response})
}

fn oa_chunk(delta: Value, finish: Option<&str>) -> Value {
    json!({"data": {"id": "chatcmpl-so", "object": "chat.completion.chunk", "created": 1,
        "model": "scripted-model", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}})
}

/// An OpenAI response whose message is a refusal.
fn openai_refusal(text: &str) -> Value {
    json!({"sse": [
        oa_chunk(json!({"role": "assistant", "content": null, "refusal": ""}), None),
        oa_chunk(json!({"refusal": text}), None),
        oa_chunk(json!({}), Some("stop")),
        {"data": "[DONE]"}
    ]})
}

/// An OpenAI response cut at the output limit after `text`.
fn openai_clipped(text: &str) -> Value {
    json!({"sse": [
        oa_chunk(json!({"role": "assistant", "content": text}), None),
        oa_chunk(json!({}), Some("length")),
        {"data": "[DONE]"}
    ]})
}

/// An Anthropic response streaming `text` that ends with `stop`.
fn anthropic_ending(text: &str, stop: &str) -> Value {
    let mut sse = script::anthropic_text_events(&[text]);
    for item in &mut sse {
        if item["event"] == "message_delta" {
            item["data"]["delta"]["stop_reason"] = json!(stop);
        }
    }
    json!({ "sse": sse })
}

/// An OpenAI Responses stream answering `text`.
fn responses_text(text: &str) -> Value {
    let item = json!({"id": "msg_1", "type": "message", "status": "completed", "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}]});
    let ev = |t: &str, mut data: Value| {
        data["type"] = json!(t);
        json!({"event": t, "data": data})
    };
    json!({"sse": [
        ev("response.created", json!({"response": {"id": "resp_1", "object": "response",
            "status": "in_progress", "model": "scripted-model", "output": []}})),
        ev("response.output_item.added", json!({"output_index": 0, "item": {"id": "msg_1",
            "type": "message", "status": "in_progress", "role": "assistant", "content": []}})),
        ev("response.content_part.added", json!({"item_id": "msg_1", "output_index": 0,
            "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}})),
        ev("response.output_text.delta", json!({"item_id": "msg_1", "output_index": 0,
            "content_index": 0, "delta": text})),
        ev("response.output_item.done", json!({"output_index": 0, "item": item.clone()})),
        ev("response.completed", json!({"response": {"id": "resp_1", "object": "response",
            "status": "completed", "model": "scripted-model", "output": [item],
            "usage": {"input_tokens": 5, "output_tokens": 3, "total_tokens": 8}}}))
    ]})
}

/// A Gemini stream answering `text`.
fn gemini_text(text: &str) -> Value {
    json!({"sse": [{"data": {"candidates": [{"content": {"role": "model", "parts": [{"text": text}]},
        "finishReason": "STOP"}], "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 3}}}]})
}

// ---------------------------------------------------------------------------------------
// How each provider is asked, and a validated answer
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn openai_asks_with_a_strict_json_schema_and_the_answer_loses_strict_nulls() {
    let server = TestServer::start(script::scenario(vec![expecting(
        json!({"/response_format/type": "json_schema",
               "/response_format/json_schema/name": "weather",
               "/response_format/json_schema/strict": true}),
        script::openai_text(&[r#"{"city":"Pa"#, r#"ris","celsius":null}"#]),
    )]))
    .unwrap();
    let agent = schema_agent(ProviderKind::OpenAi, &server, |c| c);
    let (events, r) = run(&agent).await;
    let summary = r.unwrap();
    // The optional property's null (what strict mode made the model write) is absent,
    // as the schema the user wrote says.
    assert_eq!(
        summary.output.as_ref().map(JsonText::to_value),
        Some(json!({"city": "Paris"}))
    );
    assert_eq!(
        completed_output(&events),
        summary.output.as_ref().map(JsonText::to_value)
    );
    assert_eq!(summary.text, r#"{"city":"Paris","celsius":null}"#);
    assert_eq!(summary.stop_reason, StopReason::EndTurn);
    assert_eq!(
        server.requests()[0].body["response_format"]["json_schema"]["schema"],
        weather_strict()
    );
    // The canonical JSON carries the output.
    let last: Value = serde_json::from_str(&events.last().unwrap().to_json()).unwrap();
    assert_eq!(last["output"], json!({"city": "Paris"}));
}

#[tokio::test]
async fn anthropic_asks_with_output_config_and_closed_objects() {
    let server = TestServer::start(script::scenario(vec![expecting(
        json!({"/output_config/format/type": "json_schema"}),
        script::anthropic_text(&[r#"{"city":"Paris","celsius":21}"#]),
    )]))
    .unwrap();
    let agent = schema_agent(ProviderKind::Anthropic, &server, |c| c);
    let (events, r) = run(&agent).await;
    assert_eq!(
        r.unwrap().output.map(|o| o.to_value()),
        Some(json!({"city": "Paris", "celsius": 21}))
    );
    assert_eq!(
        completed_output(&events),
        Some(json!({"city": "Paris", "celsius": 21}))
    );
    let mut closed = weather_schema();
    closed["additionalProperties"] = json!(false);
    assert_eq!(
        server.requests()[0].body["output_config"]["format"]["schema"],
        closed
    );
    assert!(server.requests()[0].body.get("tool_choice").is_none());
}

#[tokio::test]
async fn openai_responses_asks_with_text_format() {
    let server = TestServer::start(script::scenario(vec![expecting(
        json!({"/text/format/type": "json_schema", "/text/format/name": "weather",
               "/text/format/strict": true}),
        responses_text(r#"{"city":"Paris","celsius":null}"#),
    )]))
    .unwrap();
    let agent = schema_agent(ProviderKind::OpenAiResponses, &server, |c| c);
    let (_, r) = run(&agent).await;
    assert_eq!(
        r.unwrap().output.map(|o| o.to_value()),
        Some(json!({"city": "Paris"}))
    );
    assert_eq!(
        server.requests()[0].body["text"]["format"]["schema"],
        weather_strict()
    );
}

#[tokio::test]
async fn gemini_asks_with_a_json_mime_type_and_the_schema() {
    let server = TestServer::start(script::scenario(vec![expecting(
        json!({"/generationConfig/responseMimeType": "application/json",
               "/generationConfig/responseJsonSchema": weather_schema()}),
        gemini_text(r#"{"city":"Paris","celsius":21}"#),
    )]))
    .unwrap();
    let agent = schema_agent(ProviderKind::Gemini, &server, |c| c);
    let (_, r) = run(&agent).await;
    assert_eq!(
        r.unwrap().output.map(|o| o.to_value()),
        Some(json!({"city": "Paris", "celsius": 21}))
    );
}

#[tokio::test]
async fn without_a_schema_nothing_is_asked_and_no_output_is_given() {
    let server = TestServer::start(script::scenario(vec![exchange(script::openai_text(&[
        "plain",
    ]))]))
    .unwrap();
    let agent = Agent::new(config(ProviderKind::OpenAi, &server)).unwrap();
    let (events, r) = run(&agent).await;
    assert_eq!(r.unwrap().output.map(|o| o.to_value()), None);
    assert_eq!(completed_output(&events), None);
    assert!(server.requests()[0].body.get("response_format").is_none());
    let last: Value = serde_json::from_str(&events.last().unwrap().to_json()).unwrap();
    assert!(last.get("output").is_none(), "{last}");
}

// ---------------------------------------------------------------------------------------
// Repair
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn an_invalid_answer_is_repaired_once_and_the_repair_is_announced() {
    let server = TestServer::start(script::scenario(vec![
        exchange(script::openai_text(&[r#"{"city":7}"#])),
        expecting(
            json!({"/messages/1/role": "assistant", "/messages/1/content": r#"{"city":7}"#,
                   "/messages/2/role": "user"}),
            script::openai_text(&[r#"{"city":"Paris"}"#]),
        ),
    ]))
    .unwrap();
    let agent = schema_agent(ProviderKind::OpenAi, &server, |c| c);
    let (events, r) = run(&agent).await;
    let summary = r.unwrap();
    assert_eq!(
        summary.output.as_ref().map(JsonText::to_value),
        Some(json!({"city": "Paris"}))
    );
    assert_eq!(summary.messages, 2);
    let rep = repairs(&events);
    assert_eq!(rep.len(), 1, "{events:?}");
    let (message, attempt, max, error) = &rep[0];
    assert_eq!((*message, *attempt, *max), (0, 1, 1));
    assert!(error.contains("/city") && !error.contains('\n'), "{error}");
    // Announced before the repair request's first event.
    let at = events
        .iter()
        .position(|e| matches!(e, Event::OutputRepair { .. }))
        .unwrap();
    assert!(matches!(
        events[at + 1],
        Event::MessageStart { message: 1, .. }
    ));
    // The repair request tells the model what was wrong.
    let prompt = server.requests()[1].body["messages"][2]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        prompt.starts_with("Your answer did not match the required JSON schema: ")
            && prompt.contains(error.as_str())
            && prompt.ends_with("Answer again with only the JSON."),
        "{prompt}"
    );
    // The history holds the failed answer, the repair request and the answer.
    let roles: Vec<Role> = agent.history().iter().map(|m| m.role).collect();
    assert_eq!(
        roles,
        [Role::User, Role::Assistant, Role::User, Role::Assistant]
    );
}

#[tokio::test]
async fn repairs_that_run_out_fail_with_output_invalid_and_the_raw_text() {
    let server = TestServer::start(script::scenario(vec![
        exchange(script::anthropic_text(&["not json"])),
        exchange(script::anthropic_text(&[r#"{"celsius":"warm"}"#])),
        exchange(script::anthropic_text(&[r#"{"city":"never asked"}"#])),
    ]))
    .unwrap();
    let agent = schema_agent(ProviderKind::Anthropic, &server, |c| {
        c.with_output_retries(1)
    });
    let (events, r) = run(&agent).await;
    let e = r.unwrap_err();
    assert_eq!(e.kind, ErrorKind::OutputInvalid);
    assert!(!e.retryable);
    assert_eq!(e.output(), Some(r#"{"celsius":"warm"}"#));
    assert!(e.message.contains("after 1 repair"), "{}", e.message);
    assert_eq!(server.requests().len(), 2, "one repair only");
    let rep = repairs(&events);
    assert_eq!(rep.len(), 1);
    assert!(
        rep[0].3.starts_with("the answer is not valid JSON"),
        "{}",
        rep[0].3
    );
    assert!(!events
        .iter()
        .any(|e| matches!(e, Event::MessageComplete { .. })));
    // The error's canonical JSON has the raw text; the history stays valid.
    let v: Value = serde_json::from_str(&e.to_json()).unwrap();
    assert_eq!(v["output"], r#"{"celsius":"warm"}"#);
    panto::message::validate_history(&agent.history()).unwrap();
}

#[tokio::test]
async fn an_answer_nested_past_the_depth_limit_is_reported_as_such_without_a_repair() {
    // Valid JSON 200 levels deep: serde_json (and panto) read 128. It is not "not valid
    // JSON", and asking the model again would bring the same answer back.
    let deep = format!(
        r#"{{"city":"Paris","extra":{}1{}}}"#,
        "[".repeat(200),
        "]".repeat(200)
    );
    let server = TestServer::start(script::scenario(vec![
        exchange(script::anthropic_text(&[&deep])),
        exchange(script::anthropic_text(&[r#"{"city":"never asked"}"#])),
    ]))
    .unwrap();
    let agent = schema_agent(ProviderKind::Anthropic, &server, |c| {
        c.with_output_retries(3)
    });
    let (events, r) = run(&agent).await;
    let e = r.unwrap_err();
    assert_eq!(e.kind, ErrorKind::OutputInvalid);
    assert_eq!(
        e.message,
        "the answer nests 201 levels deep, more than the 128 panto reads"
    );
    assert_eq!(e.output(), Some(deep.as_str()));
    assert_eq!(server.requests().len(), 1, "no repair request");
    assert!(repairs(&events).is_empty());
    panto::message::validate_history(&agent.history()).unwrap();
}

#[test]
fn a_schema_nested_past_the_depth_limit_is_reported_as_such() {
    let mut schema = String::from(r#"{"type":"string"}"#);
    for _ in 0..100 {
        schema = format!(r#"{{"type":"object","properties":{{"a":{schema}}}}}"#);
    }
    // 201 levels: each object schema and its `properties` object nest one each.
    let config =
        format!(r#"{{"provider":"anthropic","model":"m","api_key":"k","output_schema":{schema}}}"#);
    let e = Config::from_json(&config).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Config);
    assert!(
        e.message
            .starts_with("config: nests 202 levels deep, more than the 128 panto reads"),
        "{}",
        e.message
    );
    let e = TurnOptions::from_json(&format!(r#"{{"output_schema":{schema}}}"#)).unwrap_err();
    assert!(
        e.message
            .starts_with("options: nests 202 levels deep, more than the 128 panto reads"),
        "{}",
        e.message
    );
    // Invalid JSON stays invalid JSON.
    let e = TurnOptions::from_json(r#"{"output_schema":{"#).unwrap_err();
    assert!(
        e.message.starts_with("options: not valid JSON"),
        "{}",
        e.message
    );
}

#[tokio::test]
async fn no_retries_means_the_first_invalid_answer_fails() {
    let server = TestServer::start(script::scenario(vec![exchange(script::openai_text(&[
        r#"{"town":"Paris"}"#,
    ]))]))
    .unwrap();
    let agent = schema_agent(ProviderKind::OpenAi, &server, |c| c.with_output_retries(0));
    let (events, r) = run(&agent).await;
    let e = r.unwrap_err();
    assert_eq!(e.kind, ErrorKind::OutputInvalid);
    assert_eq!(e.output(), Some(r#"{"town":"Paris"}"#));
    assert!(repairs(&events).is_empty());
    assert_eq!(server.requests().len(), 1);
}

// ---------------------------------------------------------------------------------------
// Refusal and truncation: never parsed
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn an_openai_refusal_is_output_refused_with_the_refusal_text() {
    let server = TestServer::start(script::scenario(vec![exchange(openai_refusal(
        "I can't help with that.",
    ))]))
    .unwrap();
    let agent = schema_agent(ProviderKind::OpenAi, &server, |c| c);
    let (events, r) = run(&agent).await;
    let e = r.unwrap_err();
    assert_eq!(e.kind, ErrorKind::OutputRefused);
    assert_eq!(e.output(), Some("I can't help with that."));
    assert!(
        e.message.contains("I can't help with that."),
        "{}",
        e.message
    );
    assert!(repairs(&events).is_empty(), "a refusal is not repaired");
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn an_anthropic_refusal_is_output_refused() {
    let server = TestServer::start(script::scenario(vec![exchange(anthropic_ending(
        "No.", "refusal",
    ))]))
    .unwrap();
    let agent = schema_agent(ProviderKind::Anthropic, &server, |c| c);
    let e = run(&agent).await.1.unwrap_err();
    assert_eq!(e.kind, ErrorKind::OutputRefused);
    assert_eq!(e.output(), Some("No."));
}

#[tokio::test]
async fn an_answer_clipped_at_max_tokens_is_output_truncated_and_never_parsed() {
    let server = TestServer::start(script::scenario(vec![exchange(openai_clipped(
        r#"{"city":"Par"#,
    ))]))
    .unwrap();
    let agent = schema_agent(ProviderKind::OpenAi, &server, |c| c);
    let (events, r) = run(&agent).await;
    let e = r.unwrap_err();
    assert_eq!(e.kind, ErrorKind::OutputTruncated);
    assert_eq!(e.output(), Some(r#"{"city":"Par"#));
    assert!(
        repairs(&events).is_empty(),
        "a clipped answer is not repaired"
    );
    assert_eq!(server.requests().len(), 1);
    // Even a clipped answer that happens to be valid JSON is not taken.
    let server = TestServer::start(script::scenario(vec![exchange(anthropic_ending(
        r#"{"city":"Paris"}"#,
        "max_tokens",
    ))]))
    .unwrap();
    let agent = schema_agent(ProviderKind::Anthropic, &server, |c| c);
    let e = run(&agent).await.1.unwrap_err();
    assert_eq!(e.kind, ErrorKind::OutputTruncated);
}

// ---------------------------------------------------------------------------------------
// Tools: the schema applies to the final message; output_mode tool
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn tools_run_first_and_the_final_message_is_the_output() {
    let server = TestServer::start(script::scenario(vec![
        exchange(script::openai_tool_calls(&[(
            "call_1",
            "thermometer",
            "{}",
        )])),
        exchange(script::openai_text(&[r#"{"city":"Paris","celsius":21}"#])),
    ]))
    .unwrap();
    let agent = schema_agent(ProviderKind::OpenAi, &server, |c| c);
    agent
        .add_tool(FnTool::new(
            "thermometer",
            "",
            json!({"type": "object"}),
            |_, _| async { ToolOutput::ok("21") },
        ))
        .unwrap();
    let (events, r) = run(&agent).await;
    assert_eq!(
        r.unwrap().output.map(|o| o.to_value()),
        Some(json!({"city": "Paris", "celsius": 21}))
    );
    assert!(events
        .iter()
        .any(|e| matches!(e, Event::ToolResult { output, .. } if output == "21")));
    // Every request asked for the schema.
    for req in server.requests() {
        assert_eq!(req.body["response_format"]["type"], "json_schema");
    }
}

#[tokio::test]
async fn tool_mode_forces_the_output_tool_and_never_runs_it() {
    for kind in [ProviderKind::OpenAi, ProviderKind::Anthropic] {
        let (choice, answer) = if kind == ProviderKind::OpenAi {
            (
                json!({"/tool_choice": {"type": "function", "function": {"name": "weather"}}}),
                script::openai_tool_calls(&[("call_w", "weather", r#"{"city":"Paris"}"#)]),
            )
        } else {
            (
                json!({"/tool_choice": {"type": "tool", "name": "weather"}}),
                script::anthropic_tool_calls(&[("toolu_w", "weather", r#"{"city":"Paris"}"#)]),
            )
        };
        let server = TestServer::start(script::scenario(vec![expecting(choice, answer)])).unwrap();
        let agent = schema_agent(kind, &server, |c| c.with_output_mode(OutputMode::Tool));
        let (events, r) = run(&agent).await;
        let summary = r.unwrap();
        assert_eq!(
            summary.output.as_ref().map(JsonText::to_value),
            Some(json!({"city": "Paris"})),
            "{kind:?}"
        );
        assert_eq!(summary.text, r#"{"city":"Paris"}"#);
        assert_eq!(summary.stop_reason, StopReason::EndTurn);
        assert!(
            !events
                .iter()
                .any(|e| matches!(e, Event::ToolCallStart { .. })),
            "{kind:?}: the output call is never dispatched"
        );
        let body = &server.requests()[0].body;
        let tools = body["tools"].as_array().unwrap();
        let tool = tools.last().unwrap();
        if kind == ProviderKind::OpenAi {
            assert_eq!(tool["function"]["name"], "weather");
            assert_eq!(tool["function"]["parameters"], weather_schema());
            assert!(body.get("response_format").is_none());
        } else {
            assert_eq!(tool["name"], "weather");
            assert_eq!(tool["input_schema"], weather_schema());
            assert!(body.get("output_config").is_none());
        }
        // The call has its result, so the history is one the provider takes.
        let history = agent.history();
        panto::message::validate_history(&history).unwrap();
        assert_eq!(history.last().unwrap().role, Role::Tool);
    }
}

#[tokio::test]
async fn tool_mode_repairs_through_the_calls_result() {
    let server = TestServer::start(script::scenario(vec![
        exchange(script::anthropic_tool_calls(&[(
            "toolu_1",
            "weather",
            r#"{"celsius":1}"#,
        )])),
        expecting(
            json!({"/messages/2/content/0/type": "tool_result",
                   "/messages/2/content/0/is_error": true}),
            script::anthropic_tool_calls(&[("toolu_2", "weather", r#"{"city":"Oslo"}"#)]),
        ),
    ]))
    .unwrap();
    let agent = schema_agent(ProviderKind::Anthropic, &server, |c| {
        c.with_output_mode(OutputMode::Tool)
    });
    let (events, r) = run(&agent).await;
    assert_eq!(
        r.unwrap().output.map(|o| o.to_value()),
        Some(json!({"city": "Oslo"}))
    );
    assert_eq!(repairs(&events).len(), 1);
}

// ---------------------------------------------------------------------------------------
// Configuration and a turn's own schema
// ---------------------------------------------------------------------------------------

#[test]
fn a_keyword_strict_mode_refuses_is_a_config_error_naming_it() {
    let schema = json!({"type": "object", "properties": {
        "when": {"oneOf": [{"type": "string"}, {"type": "integer"}]}}});
    let json = |provider: &str| {
        json!({"provider": provider, "model": "m", "api_key": "k", "output_schema": schema})
            .to_string()
    };
    for provider in ["openai", "openai-responses"] {
        let e = Config::from_json(&json(provider)).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Config);
        assert!(
            e.message
                .starts_with("output_schema.properties.when.oneOf: OpenAI strict mode"),
            "{}",
            e.message
        );
    }
    // Anthropic and Gemini take it (the answer is still validated locally).
    Config::from_json(&json("anthropic")).unwrap();
    Config::from_json(&json("gemini")).unwrap();
}

#[test]
fn schema_and_option_errors_name_the_key() {
    let cases = [
        (
            json!({"output_schema": {"type": "array"}}),
            "output_schema:",
        ),
        (json!({"output_schema": [1]}), "output_schema:"),
        (json!({"output_retries": 11}), "output_retries"),
        (json!({"output_mode": "grammar"}), "output_mode"),
        (
            json!({"provider": "gemini", "output_mode": "tool", "output_schema": {"type": "object"}}),
            "output_mode",
        ),
    ];
    for (extra, key) in cases {
        let mut c = json!({"model": "m", "api_key": "k"});
        for (k, v) in extra.as_object().unwrap() {
            c[k] = v.clone();
        }
        let e = Config::from_json(&c.to_string()).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Config, "{c}");
        assert!(e.message.starts_with(key), "{c}: {}", e.message);
    }
    for (options, ok) in [
        (r#"{"output_schema": null}"#, true),
        (r#"{"output_schema": false}"#, true),
        (r#"{"output_schema": {"type": "object"}}"#, true),
        (r#"{"output_schema": true}"#, false),
        (r#"{"output_schema": "x"}"#, false),
    ] {
        let r = TurnOptions::from_json(options);
        assert_eq!(r.is_ok(), ok, "{options}: {r:?}");
        if let Err(e) = r {
            assert!(
                e.message.starts_with("options.output_schema"),
                "{}",
                e.message
            );
        }
    }
    assert_eq!(
        TurnOptions::from_json(r#"{"output_schema": false}"#)
            .unwrap()
            .output_schema,
        TurnSchema::Off
    );
}

#[tokio::test]
async fn a_turn_can_bring_its_own_schema() {
    let server = TestServer::start(script::scenario(vec![expecting(
        json!({"/response_format/json_schema/name": "output"}),
        script::openai_text(&[r#"{"n":3}"#]),
    )]))
    .unwrap();
    let agent = Agent::new(config(ProviderKind::OpenAi, &server)).unwrap();
    let options = TurnOptions {
        output_schema: TurnSchema::Schema(
            json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}),
        ),
        ..TurnOptions::default()
    };
    let (_, r) = run_with(&agent, "count", options).await;
    assert_eq!(
        r.unwrap().output.map(|o| o.to_value()),
        Some(json!({"n": 3}))
    );
}

#[tokio::test]
async fn a_turns_bad_schema_fails_before_anything_is_sent() {
    let server = TestServer::start(script::scenario(vec![exchange(script::openai_text(&[
        "never",
    ]))]))
    .unwrap();
    let agent = Agent::new(config(ProviderKind::OpenAi, &server)).unwrap();
    let options = TurnOptions {
        output_schema: TurnSchema::Schema(
            json!({"type": "object", "properties": {"a": {"not": {"type": "null"}}}}),
        ),
        ..TurnOptions::default()
    };
    let (events, r) = run_with(&agent, "x", options).await;
    let e = r.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Config);
    assert!(
        e.message
            .starts_with("options.output_schema.properties.a.not"),
        "{}",
        e.message
    );
    assert!(events.is_empty());
    assert!(server.requests().is_empty());
    assert!(agent.history().is_empty(), "the input was not kept");
}

#[tokio::test]
async fn a_turn_can_turn_the_agents_schema_off() {
    let server = TestServer::start(script::scenario(vec![exchange(script::openai_text(&[
        "Just text.",
    ]))]))
    .unwrap();
    let agent = schema_agent(ProviderKind::OpenAi, &server, |c| c);
    let options = TurnOptions {
        output_schema: TurnSchema::Off,
        ..TurnOptions::default()
    };
    let (events, r) = run_with(&agent, "chat", options).await;
    let summary = r.unwrap();
    assert_eq!(summary.text, "Just text.");
    assert_eq!(summary.output.as_ref().map(JsonText::to_value), None);
    assert_eq!(completed_output(&events), None);
    assert!(server.requests()[0].body.get("response_format").is_none());
}

#[tokio::test]
async fn the_raw_output_on_an_error_never_holds_the_api_key() {
    let answer = format!(r#"{{"town":"{API_KEY}"}}"#);
    let server = TestServer::start(script::scenario(vec![exchange(script::openai_text(&[
        &answer,
    ]))]))
    .unwrap();
    let agent = schema_agent(ProviderKind::OpenAi, &server, |c| c.with_output_retries(0));
    let e: Error = run(&agent).await.1.unwrap_err();
    assert_eq!(e.kind, ErrorKind::OutputInvalid);
    let shown = format!("{} {} {:?}", e.to_json(), e.message, e.output());
    assert!(!shown.contains(API_KEY), "{shown}");
    assert!(e.output().unwrap().contains("[REDACTED]"));
}

#[test]
fn the_user_message_of_a_repair_is_a_plain_user_message() {
    // The repair request is history like any other: saved and restored as a user
    // message.
    let m = Message::user(panto::output::repair_prompt("at /city: 7 is not a string"));
    assert_eq!(m.role, Role::User);
    assert!(m.text().contains("at /city: 7 is not a string"));
}

// ---------------------------------------------------------------------------------------
// The typed Rust API
// ---------------------------------------------------------------------------------------

#[derive(Debug, PartialEq, serde::Deserialize)]
#[cfg_attr(feature = "schemars", derive(panto::schemars::JsonSchema))]
#[cfg_attr(feature = "schemars", schemars(crate = "panto::schemars"))]
struct Weather {
    city: String,
    celsius: Option<i32>,
}

#[tokio::test]
async fn run_output_returns_the_answer_as_a_rust_type() {
    let server = TestServer::start(script::scenario(vec![
        exchange(script::openai_text(&[r#"{"city":"Paris","celsius":null}"#])),
        exchange(script::openai_text(&[r#"{"city":"Rome","celsius":"hot"}"#])),
    ]))
    .unwrap();
    let agent = Agent::new(config(ProviderKind::OpenAi, &server)).unwrap();
    let w: Weather = agent
        .run_output("Weather in Paris?", weather_schema())
        .await
        .unwrap();
    assert_eq!(
        w,
        Weather {
            city: "Paris".into(),
            celsius: None
        }
    );
    // A schema that admits what the type does not: the answer validates, but is no
    // `Weather`.
    let loose = json!({"type": "object", "properties": {"city": {"type": "string"}}});
    let e = agent
        .run_output::<Weather>("Weather in Rome?", loose)
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::OutputInvalid);
    assert_eq!(e.output(), Some(r#"{"celsius":"hot","city":"Rome"}"#));
}

#[cfg(feature = "schemars")]
#[tokio::test]
async fn run_typed_derives_the_schema_from_the_type() {
    let server = TestServer::start(script::scenario(vec![expecting(
        json!({"/response_format/json_schema/name": "Weather",
               "/response_format/json_schema/strict": true}),
        script::openai_text(&[r#"{"city":"Oslo","celsius":-3}"#]),
    )]))
    .unwrap();
    let agent = Agent::new(config(ProviderKind::OpenAi, &server)).unwrap();
    let w: Weather = agent.run_typed("Weather in Oslo?").await.unwrap();
    assert_eq!(
        w,
        Weather {
            city: "Oslo".into(),
            celsius: Some(-3)
        }
    );
    // schemars' `int32` format is not one strict mode knows: it is not sent.
    let sent = &server.requests()[0].body["response_format"]["json_schema"]["schema"];
    assert_eq!(
        sent["properties"]["celsius"]["type"],
        json!(["integer", "null"])
    );
    assert!(
        sent["properties"]["celsius"].get("format").is_none(),
        "{sent}"
    );
    assert_eq!(sent["required"], json!(["celsius", "city"]));
}

/// docs/structured-output.md's Rust example, line for line.
#[tokio::test]
async fn the_docs_example() -> Result<(), panto::Error> {
    let server = TestServer::start(script::scenario(vec![exchange(script::openai_text(&[
        r#"{"city":"Paris","celsius":21}"#,
    ]))]))
    .unwrap();
    let agent = Agent::new(config(ProviderKind::OpenAi, &server))?;

    #[derive(serde::Deserialize)]
    struct Weather {
        city: String,
        celsius: Option<i32>,
    }

    let schema = json!({
        "type": "object",
        "properties": {"city": {"type": "string"}, "celsius": {"type": "integer"}},
        "required": ["city"]
    });
    let weather: Weather = agent.run_output("Weather in Paris?", schema).await?;
    println!("{}: {:?} °C", weather.city, weather.celsius);

    assert_eq!(
        (weather.city.as_str(), weather.celsius),
        ("Paris", Some(21))
    );
    Ok(())
}
