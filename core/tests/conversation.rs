//! Conversation controls against `panto-testserver` and the real captures: provider
//! blocks kept verbatim across save/restore, prompt-cache breakpoints, byte-stable
//! request prefixes, reasoning control, `reasoning_content` round trips, transcript,
//! and compaction (manual and automatic).

use std::path::{Path, PathBuf};
use std::time::Duration;

use panto::provider::{self, ProviderKind, RequestOptions, RequestParams};
use panto::{
    Agent, Collect, CompactOptions, CompactionConfig, Compat, Dialect, Effort, ErrorKind, Event,
    FnTool, Message, Reasoning, Role, ToolOutput, TurnControl, TurnOptions,
};
use panto_testkit::config;
use panto_testkit::decode;
use panto_testserver::script::{self, exchange};
use panto_testserver::TestServer;
use serde_json::{json, Value};

const HANG_GUARD: Duration = Duration::from_secs(30);

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/real")
}

fn weather_tool() -> impl panto::Tool {
    FnTool::new(
        "weather",
        "Weather for a city",
        json!({"type":"object","properties":{"city":{"type":"string"}}}),
        |args: Value, _| async move {
            ToolOutput::ok(format!("sunny in {}", args["city"].as_str().unwrap_or("?")))
        },
    )
}

async fn run_with(
    agent: &Agent,
    input: &str,
    options: TurnOptions,
) -> (Vec<Event>, panto::Result<panto::TurnSummary>) {
    let mut events = Collect::default();
    let r = tokio::time::timeout(
        HANG_GUARD,
        agent.run(input, &mut events, &TurnControl::default(), options),
    )
    .await
    .expect("the turn hung");
    (events.0, r)
}

async fn run(agent: &Agent, input: &str) -> (Vec<Event>, panto::Result<panto::TurnSummary>) {
    run_with(agent, input, TurnOptions::default()).await
}

// ---------------------------------------------------------------------------------
// Full-fidelity history: the real Anthropic captures.

/// What the Messages API expects back for the assistant message of a capture, computed
/// from the capture's own SSE independently of panto's decoder: every block as started,
/// with its streamed text, thinking, signature, tool input and compaction content
/// applied; empty text dropped (the API rejects it) and citations left out.
fn expected_resent_blocks(sse: &str) -> Vec<Value> {
    let mut blocks: Vec<(u64, Value, String)> = Vec::new();
    for line in sse.lines() {
        let Some(data) = line.strip_prefix("data: ") else {
            continue;
        };
        let Ok(ev) = serde_json::from_str::<Value>(data) else {
            continue;
        };
        let index = ev["index"].as_u64().unwrap_or(0);
        match ev["type"].as_str() {
            Some("content_block_start") => {
                blocks.push((index, ev["content_block"].clone(), String::new()))
            }
            Some("content_block_delta") => {
                let (_, block, json_in) = blocks.iter_mut().find(|b| b.0 == index).unwrap();
                let d = &ev["delta"];
                let append = |block: &mut Value, key: &str, part: &str| {
                    let old = block[key].as_str().unwrap_or("").to_owned();
                    block[key] = json!(old + part);
                };
                match d["type"].as_str() {
                    Some("text_delta") => append(block, "text", d["text"].as_str().unwrap()),
                    Some("thinking_delta") => {
                        append(block, "thinking", d["thinking"].as_str().unwrap())
                    }
                    Some("signature_delta") => {
                        append(block, "signature", d["signature"].as_str().unwrap())
                    }
                    Some("compaction_delta") => {
                        append(block, "content", d["content"].as_str().unwrap())
                    }
                    Some("input_json_delta") => {
                        json_in.push_str(d["partial_json"].as_str().unwrap())
                    }
                    _ => {}
                }
            }
            _ => {}
        }
    }
    blocks
        .into_iter()
        .filter_map(|(_, mut block, json_in)| {
            if !json_in.is_empty() {
                block["input"] = serde_json::from_str(&json_in).unwrap();
            }
            if block["type"] == "text" {
                if block["text"] == "" {
                    return None;
                }
                block = json!({"type": "text", "text": block["text"]});
            }
            Some(block)
        })
        .collect()
}

#[test]
fn anthropic_provider_blocks_survive_save_restore_and_go_back_verbatim() {
    for (name, must_hold) in [
        (
            "opus-4-1-web-search-citations",
            &["server_tool_use", "web_search_tool_result"][..],
        ),
        (
            "sonnet-4-5-mcp-tool-use",
            &["thinking", "mcp_tool_use", "mcp_tool_result"][..],
        ),
        ("sonnet-4-6-compaction-block", &["compaction"][..]),
        ("sonnet-4-5-redacted-thinking", &["redacted_thinking"][..]),
    ] {
        let sse =
            std::fs::read_to_string(fixtures().join(format!("anthropic/{name}.sse"))).unwrap();
        // Decoded under a chunking that splits events, as a network would.
        let outcome = decode::decode_sized(ProviderKind::Anthropic, sse.as_bytes(), 7);
        decode::check_invariants(&outcome, 0).unwrap_or_else(|e| panic!("{name}: {e}"));
        let decoded = outcome.result.unwrap_or_else(|e| panic!("{name}: {e}"));
        let history = vec![Message::user("question"), decoded.message];
        let saved = panto::message::history_to_json(&history);
        let restored = panto::message::history_from_json(&saved).unwrap();
        assert_eq!(
            restored, history,
            "{name}: save/restore changed the history"
        );
        let body = provider::request_body_with(
            ProviderKind::Anthropic,
            &RequestParams {
                model: "m",
                system: None,
                max_tokens: None,
                temperature: None,
                tools: &[],
                messages: &restored,
            },
            &RequestOptions::default(),
        );
        let sent = body["messages"][1]["content"].as_array().unwrap().clone();
        let want = expected_resent_blocks(&sse);
        assert_eq!(sent, want, "{name}: the re-sent assistant message differs");
        let types: Vec<&str> = sent.iter().filter_map(|b| b["type"].as_str()).collect();
        for t in must_hold {
            assert!(types.contains(t), "{name}: no {t} block re-sent: {types:?}");
        }
        // Provider blocks are Anthropic's: never sent to an OpenAI-compatible server.
        let openai = provider::request_body(
            ProviderKind::OpenAi,
            &RequestParams {
                model: "m",
                system: None,
                max_tokens: None,
                temperature: None,
                tools: &[],
                messages: &restored,
            },
        );
        let text = openai.to_string();
        for t in [
            "server_tool_use",
            "mcp_tool_use",
            "\"compaction\"",
            "redacted_thinking",
        ] {
            assert!(
                !text.contains(t),
                "{name}: {t} leaked into an OpenAI request"
            );
        }
    }
}

// ---------------------------------------------------------------------------------
// Prompt caching.

fn anthropic_with_cache_read(text: &str, read: u64) -> Value {
    let mut sse = script::anthropic_text_events(&[text]);
    sse[0]["data"]["message"]["usage"] = json!({"input_tokens": 5, "output_tokens": 1, "cache_read_input_tokens": read,
               "cache_creation_input_tokens": 0});
    json!({ "sse": sse })
}

fn has_cache_control(v: &Value) -> bool {
    v.get("cache_control") == Some(&json!({"type": "ephemeral"}))
}

#[tokio::test]
async fn anthropic_requests_carry_cache_breakpoints_and_step_two_reads_the_cache() {
    let server = TestServer::start(script::scenario(vec![
        exchange(script::anthropic_tool_calls(&[(
            "call_1",
            "weather",
            r#"{"city":"Paris"}"#,
        )])),
        exchange(anthropic_with_cache_read("Sunny.", 1200)),
    ]))
    .unwrap();
    let agent =
        Agent::new(config(ProviderKind::Anthropic, &server).with_system("be brief")).unwrap();
    agent.add_tool(weather_tool()).unwrap();
    let (events, r) = run(&agent, "Weather in Paris?").await;
    r.unwrap();
    let reqs = server.requests();
    assert_eq!(reqs.len(), 2);
    for (i, req) in reqs.iter().enumerate() {
        let body = &req.body;
        assert!(has_cache_control(&body["system"][0]), "request {i}: system");
        let tools = body["tools"].as_array().unwrap();
        assert!(
            has_cache_control(tools.last().unwrap()),
            "request {i}: tools"
        );
        let last = body["messages"].as_array().unwrap().last().unwrap();
        let last_block = last["content"].as_array().unwrap().last().unwrap();
        assert!(has_cache_control(last_block), "request {i}: latest message");
        // Only the three breakpoints: nothing else is marked.
        assert_eq!(
            req.raw_body
                .windows(13)
                .filter(|w| w == b"cache_control")
                .count(),
            3
        );
    }
    // Step 2's breakpoint is on the tool result, the new end of the prefix.
    let last = reqs[1].body["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["content"][0]["type"], "tool_result");
    // The question, no longer the latest message and so without a breakpoint, is one
    // text block: a plain string, as the official SDK sends it. In step 1 it carried the
    // breakpoint and stayed a list (asserted above).
    assert_eq!(reqs[1].body["messages"][0]["content"], "Weather in Paris?");
    // And the scripted provider reports the cached read, which panto passes on.
    let read: Vec<u64> = events
        .iter()
        .filter_map(|e| match e {
            Event::MessageEnd { usage, .. } => Some(usage.cache_read_tokens),
            _ => None,
        })
        .collect();
    assert_eq!(read, vec![0, 1200]);
}

#[tokio::test]
async fn prompt_caching_can_be_turned_off() {
    let server = TestServer::start(script::scenario(vec![exchange(script::anthropic_text(&[
        "hi",
    ]))]))
    .unwrap();
    let agent = Agent::new(
        config(ProviderKind::Anthropic, &server)
            .with_system("be brief")
            .with_prompt_caching(false),
    )
    .unwrap();
    run(&agent, "hello").await.1.unwrap();
    let req = &server.requests()[0];
    assert_eq!(req.body["system"], "be brief");
    assert!(!String::from_utf8_lossy(&req.raw_body).contains("cache_control"));
    // Without a breakpoint, a one-text-block user message is a plain string.
    assert_eq!(req.body["messages"][0]["content"], "hello");
}

#[tokio::test]
async fn openai_requests_repeat_the_earlier_messages_byte_for_byte() {
    let server = TestServer::start(script::scenario(vec![
        exchange(script::openai_tool_calls(&[(
            "call_1",
            "weather",
            r#"{"city":"Paris","units":{"temp":"C","wind":"kmh"}}"#,
        )])),
        exchange(script::openai_text(&["Sunny."])),
        exchange(script::openai_text(&["Bye."])),
    ]))
    .unwrap();
    let agent = Agent::new(config(ProviderKind::OpenAi, &server).with_system("be brief")).unwrap();
    agent.add_tool(weather_tool()).unwrap();
    run(&agent, "Weather in Paris?").await.1.unwrap();
    // A restored conversation must produce the same bytes as the live one.
    let restored =
        Agent::new(config(ProviderKind::OpenAi, &server).with_system("be brief")).unwrap();
    restored.add_tool(weather_tool()).unwrap();
    restored.load_history_json(&agent.history_json()).unwrap();
    run(&restored, "Thanks").await.1.unwrap();
    let reqs = server.requests();
    assert_eq!(reqs.len(), 3);
    let raw: Vec<String> = reqs
        .iter()
        .map(|r| String::from_utf8(r.raw_body.clone()).unwrap())
        .collect();
    for pair in raw.windows(2) {
        let (earlier, later) = (&pair[0], &pair[1]);
        let start = earlier.find("\"messages\":[").unwrap();
        let end = earlier[start..].find("],\"model\"").unwrap() + start;
        let prefix = &earlier[..end];
        assert!(
            later.starts_with(prefix),
            "the later request does not start with the earlier one's messages:\n{prefix}\n{later}"
        );
    }
}

// ---------------------------------------------------------------------------------
// Reasoning control.

fn body_with(kind: ProviderKind, options: RequestOptions, max_tokens: Option<u32>) -> Value {
    let messages = [Message::user("hi")];
    provider::request_body_with(
        kind,
        &RequestParams {
            model: "m",
            system: None,
            max_tokens,
            temperature: Some(0.2),
            tools: &[],
            messages: &messages,
        },
        &options,
    )
}

fn reasoning(effort: Effort, budget: Option<u32>) -> Option<Reasoning> {
    Some(Reasoning {
        effort,
        budget_tokens: budget,
    })
}

#[test]
fn reasoning_maps_to_each_servers_fields() {
    let opts = |r, compat| RequestOptions {
        reasoning: r,
        prompt_caching: false,
        dialect: Dialect {
            compat,
            max_completion_tokens: false,
        },
        ..RequestOptions::default()
    };
    // Anthropic: the shape of the real captures' `thinking`.
    let capture: Value = serde_json::from_str(
        &std::fs::read_to_string(
            fixtures().join("anthropic/sonnet-4-5-redacted-thinking.request.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let b = body_with(
        ProviderKind::Anthropic,
        opts(reasoning(Effort::Low, None), Compat::Generic),
        Some(4096),
    );
    assert_eq!(b["thinking"], capture["thinking"]);
    assert_eq!(b["max_tokens"], capture["max_tokens"]);
    assert!(
        b.get("temperature").is_none(),
        "temperature is refused with thinking"
    );
    let capture: Value = serde_json::from_str(
        &std::fs::read_to_string(fixtures().join("anthropic/sonnet-4-5-mcp-tool-use.request.json"))
            .unwrap(),
    )
    .unwrap();
    let b = body_with(
        ProviderKind::Anthropic,
        opts(reasoning(Effort::High, Some(3000)), Compat::Generic),
        Some(4096),
    );
    assert_eq!(b["thinking"], capture["thinking"]);
    // max_tokens must exceed the budget: raised when it does not.
    let b = body_with(
        ProviderKind::Anthropic,
        opts(reasoning(Effort::High, None), Compat::Generic),
        Some(1000),
    );
    assert_eq!(
        b["thinking"],
        json!({"type":"enabled","budget_tokens":16384})
    );
    assert_eq!(b["max_tokens"], 16384 + 4096);
    let b = body_with(
        ProviderKind::Anthropic,
        opts(reasoning(Effort::None, None), Compat::Generic),
        None,
    );
    assert!(b.get("thinking").is_none());
    assert_eq!(b["temperature"], 0.2);

    let oa = |r, compat| body_with(ProviderKind::OpenAi, opts(r, compat), None);
    let b = oa(reasoning(Effort::Medium, None), Compat::OpenAi);
    assert_eq!(b["reasoning_effort"], "medium");
    let b = oa(reasoning(Effort::None, None), Compat::DeepSeek);
    assert_eq!(b["thinking"], json!({"type":"disabled"}));
    assert!(b.get("reasoning_effort").is_none());
    let b = oa(reasoning(Effort::High, None), Compat::DeepSeek);
    assert_eq!(b["thinking"], json!({"type":"enabled"}));
    assert_eq!(b["reasoning_effort"], "high");
    let b = oa(reasoning(Effort::None, None), Compat::Ollama);
    assert_eq!(b["think"], false);
    let b = oa(reasoning(Effort::Low, None), Compat::Vllm);
    assert_eq!(b["chat_template_kwargs"], json!({"enable_thinking": true}));
    assert_eq!(b["reasoning_effort"], "low");
    let b = oa(None, Compat::Generic);
    assert!(b.get("reasoning_effort").is_none() && b.get("think").is_none());

    assert_eq!(
        Compat::Auto.resolve("https://api.deepseek.com/v1"),
        Compat::DeepSeek
    );
    assert_eq!(
        Compat::Auto.resolve("http://localhost:11434/v1"),
        Compat::Ollama
    );
    assert_eq!(
        Compat::Auto.resolve("https://api.openai.com/v1"),
        Compat::OpenAi
    );
    assert_eq!(
        Compat::Auto.resolve("http://127.0.0.1:8000/v1"),
        Compat::Generic
    );
}

#[tokio::test]
async fn a_turn_overrides_the_agents_reasoning() {
    let server = TestServer::start(script::scenario(vec![
        exchange(script::openai_text(&["a"])),
        exchange(script::openai_text(&["b"])),
    ]))
    .unwrap();
    let agent = Agent::new(
        config(ProviderKind::OpenAi, &server).with_reasoning(Reasoning::new(Effort::Low)),
    )
    .unwrap();
    run(&agent, "one").await.1.unwrap();
    let per_turn = TurnOptions::from_json(r#"{"reasoning":{"effort":"high"}}"#).unwrap();
    run_with(&agent, "two", per_turn).await.1.unwrap();
    let reqs = server.requests();
    assert_eq!(reqs[0].body["reasoning_effort"], "low");
    assert_eq!(reqs[1].body["reasoning_effort"], "high");
    let e = TurnOptions::from_json(r#"{"reasoning":{"effort":"max"}}"#).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Config);
    assert!(
        e.message.starts_with("options.reasoning.effort"),
        "{}",
        e.message
    );
}

#[tokio::test]
async fn reasoning_content_goes_back_within_a_tool_loop() {
    let id = "chatcmpl-r";
    let chunk = |delta: Value, finish: Value| {
        json!({"data": {"id": id, "object": "chat.completion.chunk", "created": 1,
            "model": "deepseek-v4-flash", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}})
    };
    let tool_step = json!({"sse": [
        chunk(json!({"role": "assistant", "content": null, "reasoning_content": "Need the "}), Value::Null),
        chunk(json!({"reasoning_content": "weather tool."}), Value::Null),
        chunk(json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
            "function": {"name": "weather", "arguments": "{\"city\":\"Paris\"}"}}]}), Value::Null),
        chunk(json!({}), json!("tool_calls")),
        {"data": "[DONE]"},
    ]});
    let server = TestServer::start(script::scenario(vec![
        exchange(tool_step),
        exchange(script::openai_text(&["Sunny."])),
    ]))
    .unwrap();
    let agent = Agent::new(config(ProviderKind::OpenAi, &server)).unwrap();
    agent.add_tool(weather_tool()).unwrap();
    run(&agent, "Weather?").await.1.unwrap();
    let reqs = server.requests();
    let assistant = &reqs[1].body["messages"][1];
    assert_eq!(assistant["role"], "assistant");
    assert_eq!(assistant["reasoning_content"], "Need the weather tool.");
    assert_eq!(assistant["tool_calls"][0]["id"], "call_1");
    // OpenAI's own API gets no such field.
    let body = provider::request_body_with(
        ProviderKind::OpenAi,
        &RequestParams {
            model: "m",
            system: None,
            max_tokens: None,
            temperature: None,
            tools: &[],
            messages: &agent.history(),
        },
        &RequestOptions {
            reasoning: None,
            prompt_caching: false,
            dialect: Dialect::resolve(Compat::Auto, "https://api.openai.com/v1"),
            ..RequestOptions::default()
        },
    );
    assert!(!body.to_string().contains("reasoning_content"));
}

#[tokio::test]
async fn the_agent_sends_the_fields_of_the_server_its_config_names() {
    // The test server's URL says nothing about the server, so `Auto` gives the generic
    // fields; a compat set by hand picks that server's own, on every request of the agent.
    let server = TestServer::start(script::scenario(vec![
        exchange(script::openai_text(&["One."])),
        exchange(script::openai_text(&["Two."])),
    ]))
    .unwrap();
    let high = Reasoning::new(Effort::High);
    let auto = Agent::new(config(ProviderKind::OpenAi, &server).with_reasoning(high)).unwrap();
    let vllm = Agent::new(
        config(ProviderKind::OpenAi, &server)
            .with_reasoning(high)
            .with_max_tokens(100)
            .with_compat(Compat::Vllm),
    )
    .unwrap();
    run(&auto, "one").await.1.unwrap();
    run(&vllm, "two").await.1.unwrap();
    let reqs = server.requests();
    assert_eq!(reqs[0].body["reasoning_effort"], "high");
    assert!(reqs[0].body.get("chat_template_kwargs").is_none());
    assert_eq!(
        reqs[1].body["chat_template_kwargs"],
        json!({"enable_thinking": true})
    );
    // A local server keeps `max_tokens` whatever the compat says.
    assert_eq!(reqs[1].body["max_tokens"], 100);
    assert!(reqs[1].body.get("max_completion_tokens").is_none());
}

// ---------------------------------------------------------------------------------
// Transcript.

#[tokio::test]
async fn transcript_lists_the_conversation_flat() {
    let server = TestServer::start(script::scenario(vec![
        exchange(script::openai_tool_calls(&[(
            "call_1",
            "weather",
            r#"{"city":"Paris"}"#,
        )])),
        exchange(script::openai_text(&["Sunny."])),
    ]))
    .unwrap();
    let agent = Agent::new(config(ProviderKind::OpenAi, &server)).unwrap();
    agent.add_tool(weather_tool()).unwrap();
    run(&agent, "Weather?").await.1.unwrap();
    let t: Value = serde_json::from_str(&agent.transcript_json()).unwrap();
    assert_eq!(
        t,
        json!([
            {"role":"user","kind":"text","text":"Weather?"},
            {"role":"assistant","kind":"tool_call","text":"{\"city\":\"Paris\"}","name":"weather","call_id":"call_1"},
            {"role":"tool","kind":"tool_result","text":"sunny in Paris","name":"weather","call_id":"call_1","is_error":false},
            {"role":"assistant","kind":"text","text":"Sunny."}
        ])
    );
}

// ---------------------------------------------------------------------------------
// Compaction.

fn summary_exchange(summary: &str) -> Value {
    json!({"match": {"body_contains": ["<conversation>"]}, "response": script::openai_text(&[summary])})
}

#[tokio::test]
async fn compact_summarizes_older_history_and_keeps_the_tail() {
    let server = TestServer::start(script::scenario(vec![
        exchange(script::openai_text(&["first answer"])),
        exchange(script::openai_text(&["second answer"])),
        summary_exchange("The user asked two things."),
    ]))
    .unwrap();
    let agent = Agent::new(config(ProviderKind::OpenAi, &server)).unwrap();
    run(&agent, "first").await.1.unwrap();
    run(&agent, "second").await.1.unwrap();
    let before = agent.history();
    let options = CompactOptions {
        keep_last: 2,
        ..CompactOptions::default()
    };
    let done = agent.compact(&options, &Default::default()).await.unwrap();
    assert!(done.changed);
    assert_eq!((done.messages_before, done.messages_after), (4, 4));
    // The provider's count for the history (10 in + 1 out of the last response).
    assert_eq!(done.tokens_before, 11);
    // The estimate of the new history, in the provider's measure: scaled by how the
    // count of the old history (11) compares with the old history's estimate.
    let (est_before, est_after) = (
        panto::compaction::estimate_tokens(&before),
        panto::compaction::estimate_tokens(&agent.history()),
    );
    assert_eq!(done.tokens_after, (est_after * 11).div_ceil(est_before));
    assert!(
        done.tokens_after < est_after,
        "bytes / 4 over-counts this short history"
    );
    let after = agent.history();
    assert_eq!(after[0].role, Role::User);
    assert_eq!(
        after[0].text(),
        format!(
            "{}The user asked two things.",
            panto::compaction::SUMMARY_PREFIX
        )
    );
    assert_eq!(after[1].role, Role::Assistant);
    assert_eq!(&after[2..], &before[2..], "the kept tail is verbatim");
    panto::message::validate_history(&after).unwrap();
    let req = &server.requests()[2].body;
    assert_eq!(
        req["messages"][0]["content"],
        panto::compaction::DEFAULT_PROMPT
    );
    assert!(req.get("tools").is_none());
    let asked = req["messages"][1]["content"].as_str().unwrap();
    assert!(asked.contains("User: first") && asked.contains("Assistant: first answer"));
    assert!(
        !asked.contains("second answer"),
        "the kept tail is not summarized"
    );

    // Nothing older than the tail: no request, nothing changes.
    let again = agent
        .compact(
            &CompactOptions {
                keep_last: 10,
                ..Default::default()
            },
            &Default::default(),
        )
        .await
        .unwrap();
    assert!(!again.changed);
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn a_failed_compaction_leaves_the_history_untouched() {
    let server = TestServer::start(script::scenario(vec![
        exchange(script::openai_text(&["a"])),
        exchange(script::openai_text(&["b"])),
        exchange(script::http_error(400, "invalid_request_error", json!({}))),
    ]))
    .unwrap();
    let agent = Agent::new(config(ProviderKind::OpenAi, &server)).unwrap();
    run(&agent, "one").await.1.unwrap();
    run(&agent, "two").await.1.unwrap();
    let before = agent.history_json();
    let options = CompactOptions {
        keep_last: 1,
        prompt: Some("Summarize tersely.".into()),
        ..Default::default()
    };
    let e = agent
        .compact(&options, &Default::default())
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::BadRequest);
    assert!(
        e.message.starts_with("compacting the history"),
        "{}",
        e.message
    );
    assert_eq!(agent.history_json(), before);
    assert_eq!(
        server.requests()[2].body["messages"][0]["content"],
        "Summarize tersely."
    );
}

fn auto(threshold: u64, keep_last: usize) -> CompactionConfig {
    CompactionConfig {
        threshold_tokens: threshold,
        keep_last,
        model: None,
        prompt: None,
    }
}

#[tokio::test]
async fn automatic_compaction_runs_before_the_next_request_and_is_announced() {
    let server = TestServer::start(script::scenario(vec![
        exchange(script::openai_text(&["first answer"])),
        summary_exchange("Earlier: the user said first."),
        exchange(script::openai_text(&["second answer"])),
    ]))
    .unwrap();
    let agent =
        Agent::new(config(ProviderKind::OpenAi, &server).with_compaction(auto(5, 1))).unwrap();
    // Input tokens 10 > 5: the next request compacts first.
    run(&agent, "first").await.1.unwrap();
    let (events, r) = run(&agent, "second").await;
    r.unwrap();
    let first_two: Vec<&str> = events.iter().take(2).map(|e| e.type_name()).collect();
    assert_eq!(first_two, ["history_compacted", "message_start"]);
    match &events[0] {
        Event::HistoryCompacted {
            messages_before,
            messages_after,
            tokens_before,
            tokens_after,
        } => {
            assert_eq!((*messages_before, *messages_after), (3, 3));
            assert!(*tokens_before >= 12, "{tokens_before}");
            assert!(*tokens_after > 0);
        }
        other => panic!("{other:?}"),
    }
    // The summary request's own events are not part of the turn.
    assert!(!events
        .iter()
        .any(|e| matches!(e, Event::ContentDelta { text, .. } if text.contains("Earlier"))));
    assert_eq!(
        events
            .iter()
            .filter(|e| e.type_name() == "message_start")
            .count(),
        1
    );
    let h = agent.history();
    assert_eq!(h.len(), 4);
    assert!(h[0].text().ends_with("Earlier: the user said first."));
    assert_eq!(h[2].text(), "second");
    assert_eq!(h[3].text(), "second answer");
    // The model's request carried the compacted history.
    let body = &server.requests()[2].body;
    assert_eq!(body["messages"].as_array().unwrap().len(), 3);
}

#[tokio::test]
async fn a_restored_history_past_the_threshold_compacts_before_its_first_request() {
    // No request has reported usage on this agent: the history's estimate decides.
    let server = TestServer::start(script::scenario(vec![
        exchange(script::openai_text(&["first answer"])),
        summary_exchange("Earlier: the user said first."),
        exchange(script::openai_text(&["second answer"])),
    ]))
    .unwrap();
    let saved = {
        let agent = Agent::new(config(ProviderKind::OpenAi, &server)).unwrap();
        run(&agent, "first").await.1.unwrap();
        agent.history_json()
    };
    let estimate =
        panto::compaction::estimate_tokens(&panto::message::history_from_json(&saved).unwrap());
    let restored =
        Agent::new(config(ProviderKind::OpenAi, &server).with_compaction(auto(estimate - 1, 1)))
            .unwrap();
    restored.load_history_json(&saved).unwrap();
    let (events, r) = run(&restored, "second").await;
    r.unwrap();
    assert_eq!(events[0].type_name(), "history_compacted", "{events:?}");
    assert!(restored.history()[0]
        .text()
        .ends_with("Earlier: the user said first."));

    // Below the estimate nothing happens.
    let server = TestServer::start(script::scenario(vec![exchange(script::openai_text(&[
        "plain answer",
    ]))]))
    .unwrap();
    let restored =
        Agent::new(config(ProviderKind::OpenAi, &server).with_compaction(auto(estimate * 10, 1)))
            .unwrap();
    restored.load_history_json(&saved).unwrap();
    let (events, r) = run(&restored, "second").await;
    r.unwrap();
    assert_eq!(events[0].type_name(), "message_start", "{events:?}");
}

#[tokio::test]
async fn without_reported_usage_the_estimate_decides_and_sizes_the_compaction() {
    // A server that never reports usage (llama.cpp): the history's estimate stands in
    // for the provider's count, both for the trigger and for `tokens_before`.
    let no_usage =
        |pieces: &[&str]| json!({"sse": script::without_usage(script::openai_text_events(pieces))});
    let long = "a long answer that fills the context. ".repeat(20);
    let server = TestServer::start(script::scenario(vec![
        exchange(no_usage(&[long.as_str()])),
        json!({"match": {"body_contains": ["<conversation>"]},
               "response": no_usage(&["Earlier: a long answer."])}),
        exchange(no_usage(&["second answer"])),
    ]))
    .unwrap();
    let probe = [
        Message::user("first"),
        Message {
            role: Role::Assistant,
            content: vec![panto::Block::text(long.as_str())],
        },
        Message::user("second"),
    ];
    let estimate = panto::compaction::estimate_tokens(&probe);
    let agent =
        Agent::new(config(ProviderKind::OpenAi, &server).with_compaction(auto(estimate - 1, 1)))
            .unwrap();
    let (events, r) = run(&agent, "first").await;
    r.unwrap();
    assert!(
        !events.iter().any(|e| e.type_name() == "history_compacted"),
        "nothing to compact before the first answer"
    );
    let before_second = {
        let mut h = agent.history();
        h.push(Message::user("second"));
        h
    };
    assert_eq!(panto::compaction::estimate_tokens(&before_second), estimate);
    let (events, r) = run(&agent, "second").await;
    r.unwrap();
    match &events[0] {
        Event::HistoryCompacted { tokens_before, .. } => {
            // The whole history's estimate, not 0 for the unreported count plus the
            // estimate of the new user message.
            assert_eq!(*tokens_before, estimate);
        }
        other => panic!("expected history_compacted first, got {other:?}"),
    }
    assert!(agent.history()[0]
        .text()
        .ends_with("Earlier: a long answer."));
    assert_eq!(server.requests().len(), 3);
}

/// A step calling `weather` whose request the provider counts as `input_tokens`.
fn tool_step(call_id: &str, input_tokens: u64) -> Value {
    let mut sse = script::openai_tool_calls_events(&[(call_id, "weather", r#"{"city":"Paris"}"#)]);
    let usage = sse
        .iter_mut()
        .find(|e| e["data"]["usage"].is_object())
        .expect("a usage chunk");
    usage["data"]["usage"]["prompt_tokens"] = json!(input_tokens);
    json!({ "sse": sse })
}

#[tokio::test]
async fn a_compaction_that_cannot_get_under_the_threshold_is_not_repeated_every_step() {
    // The kept messages alone are past the threshold: after one compaction the next
    // steps must not summarize again (the scenario has no second summary to give).
    let server = TestServer::start(script::scenario(vec![
        exchange(tool_step("call_1", 100)),
        summary_exchange("Earlier: the user asked for the weather."),
        exchange(tool_step("call_2", 120)),
        exchange(script::openai_text(&["done"])),
    ]))
    .unwrap();
    let agent =
        Agent::new(config(ProviderKind::OpenAi, &server).with_compaction(auto(50, 1))).unwrap();
    agent.add_tool(weather_tool()).unwrap();
    let (events, r) = run(&agent, "go").await;
    r.unwrap();
    let compactions = events
        .iter()
        .filter(|e| e.type_name() == "history_compacted")
        .count();
    assert_eq!(compactions, 1, "{events:?}");
    assert_eq!(server.requests().len(), 4);
    panto::message::validate_history(&agent.history()).unwrap();
}

#[tokio::test]
async fn a_failed_automatic_compaction_fails_the_turn_and_keeps_the_history() {
    let server = TestServer::start(script::scenario(vec![
        exchange(script::openai_text(&["first answer"])),
        exchange(script::http_error(400, "invalid_request_error", json!({}))),
    ]))
    .unwrap();
    let agent =
        Agent::new(config(ProviderKind::OpenAi, &server).with_compaction(auto(5, 1))).unwrap();
    run(&agent, "first").await.1.unwrap();
    let (events, r) = run(&agent, "second").await;
    assert_eq!(r.unwrap_err().kind, ErrorKind::BadRequest);
    assert!(events.is_empty(), "{events:?}");
    let h = agent.history();
    assert_eq!(
        h.len(),
        3,
        "the history keeps the turn's input and nothing else changed"
    );
    assert_eq!(h[1].text(), "first answer");
    panto::message::validate_history(&h).unwrap();
}

#[tokio::test]
async fn compaction_respects_cancel() {
    let server = TestServer::start(script::scenario(vec![
        exchange(script::openai_text(&["a"])),
        exchange(script::openai_text(&["b"])),
        json!({"response": {"sse": script::openai_text_events(&["summary"]),
            "fault": {"kind": "hold", "after_bytes": 0}}}),
    ]))
    .unwrap();
    let agent = Agent::new(config(ProviderKind::OpenAi, &server)).unwrap();
    run(&agent, "one").await.1.unwrap();
    run(&agent, "two").await.1.unwrap();
    let before = agent.history_json();
    let cancel = panto::CancellationToken::new();
    let task = {
        let agent = agent.clone();
        let cancel = cancel.clone();
        tokio::spawn(async move {
            let options = CompactOptions {
                keep_last: 1,
                ..Default::default()
            };
            agent.compact(&options, &cancel).await
        })
    };
    // Cancel only once the summary request is waiting at the server.
    tokio::time::timeout(HANG_GUARD, async {
        while server.held() == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the summary request never arrived");
    assert_eq!(agent.clear_history().unwrap_err().kind, ErrorKind::Busy);
    cancel.cancel();
    let r = tokio::time::timeout(HANG_GUARD, task)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(r.unwrap_err().kind, ErrorKind::Cancelled);
    assert_eq!(agent.history_json(), before);
}

// ---------------------------------------------------------------------------------
// The shared scenarios (tests/server/scenarios/conversation-*.json), which the other
// languages' tests replay too.

fn shared_scenario(name: &str) -> panto_testserver::Scenario {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/server/scenarios")
        .join(name);
    panto_testserver::Scenario::from_file(path).unwrap()
}

#[tokio::test]
async fn shared_scenario_reasoning_and_caching() {
    let server = TestServer::start(shared_scenario("conversation-reasoning-caching.json")).unwrap();
    let agent = Agent::new(
        config(ProviderKind::Anthropic, &server)
            .with_system("You are terse.")
            .with_reasoning(Reasoning::new(Effort::Low)),
    )
    .unwrap();
    agent.add_tool(weather_tool()).unwrap();
    let options = TurnOptions {
        reasoning: Some(Reasoning::new(Effort::High)),
        ..Default::default()
    };
    let (events, r) = run_with(&agent, "Weather in Paris?", options).await;
    let summary = r.unwrap();
    assert_eq!(summary.text, "Sunny in Paris.");
    assert_eq!(summary.usage.cache_read_tokens, 1500);
    assert!(server.requests().iter().all(|r| r.matched));
    let t = agent.transcript();
    let kinds: Vec<_> = t.iter().map(|e| e.kind).collect();
    use panto::EntryKind;
    assert_eq!(
        kinds,
        [
            EntryKind::Text,
            EntryKind::Reasoning,
            EntryKind::ToolCall,
            EntryKind::ToolResult,
            EntryKind::Text
        ]
    );
    assert!(events.iter().any(|e| e.type_name() == "tool_result"));
}

#[tokio::test]
async fn shared_scenario_compaction_manual_and_automatic() {
    // Manual, between two turns.
    let server = TestServer::start(shared_scenario("conversation-compaction.json")).unwrap();
    let agent = Agent::new(config(ProviderKind::OpenAi, &server)).unwrap();
    run(&agent, "What is the capital of France?")
        .await
        .1
        .unwrap();
    let done = agent
        .compact(
            &CompactOptions {
                keep_last: 1,
                ..Default::default()
            },
            &Default::default(),
        )
        .await
        .unwrap();
    assert!(done.changed);
    assert_eq!((done.messages_before, done.messages_after), (2, 2));
    assert_eq!(done.tokens_before, 108);
    run(&agent, "And its population?").await.1.unwrap();
    assert!(server.requests().iter().all(|r| r.matched));

    // Automatic, announced in the second turn.
    let server = TestServer::start(shared_scenario("conversation-compaction.json")).unwrap();
    let agent =
        Agent::new(config(ProviderKind::OpenAi, &server).with_compaction(auto(50, 1))).unwrap();
    run(&agent, "What is the capital of France?")
        .await
        .1
        .unwrap();
    let (events, r) = run(&agent, "And its population?").await;
    assert_eq!(r.unwrap().text, "About 2.1 million people.");
    assert_eq!(events[0].type_name(), "history_compacted");
    assert!(server.requests().iter().all(|r| r.matched));
}

#[tokio::test]
async fn cancelling_during_automatic_compaction_ends_the_turn_cancelled() {
    let server = TestServer::start(script::scenario(vec![
        exchange(script::openai_text(&["first answer"])),
        json!({"match": {"body_contains": ["<conversation>"]},
            "response": {"sse": script::openai_text_events(&["summary"]),
                "fault": {"kind": "hold", "after_bytes": 0}}}),
    ]))
    .unwrap();
    let agent =
        Agent::new(config(ProviderKind::OpenAi, &server).with_compaction(auto(5, 1))).unwrap();
    run(&agent, "first").await.1.unwrap();
    let control = TurnControl::default();
    let task = {
        let agent = agent.clone();
        let control = control.clone();
        tokio::spawn(async move {
            let mut events = Collect::default();
            let r = agent
                .run("second", &mut events, &control, TurnOptions::default())
                .await;
            (events.0, r)
        })
    };
    tokio::time::timeout(HANG_GUARD, async {
        while server.held() == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the summary request never arrived");
    control.cancel.cancel();
    let (events, r) = tokio::time::timeout(HANG_GUARD, task)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(r.unwrap_err().kind, ErrorKind::Cancelled);
    assert!(events.is_empty(), "{events:?}");
    let h = agent.history();
    assert_eq!(
        h.len(),
        3,
        "not compacted: the first exchange and the new input"
    );
    assert_eq!(h[1].text(), "first answer");
}
