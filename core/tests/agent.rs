//! The agent loop end to end against `panto-testserver`: two-step tool turns for both
//! providers, tools (Rust and host, concurrency, timeouts, panics, bad calls),
//! max_steps, cancellation, retries and faults — asserting events, errors, what panto
//! sent, and that the history stays valid.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use panto::message::validate_history;
use panto::{
    Agent, Block, Collect, Config, ErrorKind, Event, Flow, FnTool, ProviderKind, Receiver,
    RetryConfig, Role, StopReason, Timeouts, ToolOutput, ToolSpec, TurnControl, Usage,
};
use panto_testkit::{quick_retries, API_KEY};
use panto_testserver::script::{self, exchange};
use panto_testserver::TestServer;
use serde_json::{json, Value};

const HANG_GUARD: Duration = Duration::from_secs(30);

/// This suite's agents retry twice, quickly: the retry paths are part of what it tests.
fn config(kind: ProviderKind, server: &TestServer) -> Config {
    panto_testkit::config(kind, server).with_retry(quick_retries(2))
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

async fn run(
    agent: &Agent,
    input: &str,
    control: &TurnControl,
) -> (Vec<Event>, panto::Result<panto::agent::TurnSummary>) {
    let mut events = Collect::default();
    let r = tokio::time::timeout(
        HANG_GUARD,
        agent.run(input, &mut events, control, Default::default()),
    )
    .await
    .expect("the turn hung");
    (events.0, r)
}

/// The structural invariants of a successful turn.
fn check_invariants(events: &[Event]) {
    use std::collections::HashMap;
    let mut open_msgs = 0i32;
    let mut blocks: HashMap<(u32, u32), i32> = HashMap::new();
    let mut calls: HashMap<String, i32> = HashMap::new();
    for (i, ev) in events.iter().enumerate() {
        match ev {
            Event::MessageStart { .. } => open_msgs += 1,
            Event::MessageEnd { .. } => open_msgs -= 1,
            Event::BlockStart { message, block, .. } => {
                *blocks.entry((*message, *block)).or_default() += 1
            }
            Event::BlockComplete { message, block, .. } => {
                *blocks.entry((*message, *block)).or_default() -= 1
            }
            Event::ToolCallStart { call_id, .. } => *calls.entry(call_id.clone()).or_default() += 1,
            Event::ToolResult { call_id, .. } => *calls.entry(call_id.clone()).or_default() -= 1,
            Event::MessageComplete { .. } => {
                assert_eq!(i, events.len() - 1, "message_complete not last")
            }
            _ => {}
        }
        assert!(
            (0..=1).contains(&open_msgs),
            "message_start/message_end unbalanced at {i}"
        );
    }
    assert_eq!(open_msgs, 0);
    assert!(
        blocks.values().all(|v| *v == 0),
        "block_start/block_complete unbalanced: {blocks:?}"
    );
    assert!(
        calls.values().all(|v| *v == 0),
        "tool_call_start/tool_result unbalanced: {calls:?}"
    );
    assert_eq!(events.iter().filter(|e| e.is_terminal()).count(), 1);
}

fn types(events: &[Event]) -> Vec<&'static str> {
    events.iter().map(|e| e.type_name()).collect()
}

async fn two_step_turn(kind: ProviderKind) {
    let (first, second) = match kind {
        ProviderKind::OpenAi => (
            script::openai_tool_calls(&[("call_1", "weather", r#"{"city":"Paris"}"#)]),
            script::openai_text(&["It is ", "sunny."]),
        ),
        ProviderKind::Anthropic => (
            script::anthropic_tool_calls(&[("call_1", "weather", r#"{"city":"Paris"}"#)]),
            script::anthropic_text(&["It is ", "sunny."]),
        ),
        ProviderKind::Gemini => unreachable!("Gemini has tests of its own (core/tests/gemini.rs)"),
        other => unreachable!("{other:?} has its own suite"),
    };
    let server =
        TestServer::start(script::scenario(vec![exchange(first), exchange(second)])).unwrap();
    let agent = Agent::new(config(kind, &server).with_system("be brief")).unwrap();
    agent.add_tool(weather_tool()).unwrap();
    let (events, r) = run(&agent, "weather in Paris?", &TurnControl::default()).await;
    let summary = r.unwrap();
    check_invariants(&events);
    assert_eq!(summary.stop_reason, StopReason::EndTurn);
    assert_eq!(summary.messages, 2);
    assert_eq!(summary.text, "It is sunny.");
    assert!(types(&events).contains(&"tool_call_start"));
    let result = events.iter().find_map(|e| match e {
        Event::ToolResult {
            output, is_error, ..
        } => Some((output.clone(), *is_error)),
        _ => None,
    });
    assert_eq!(result, Some(("sunny in Paris".into(), false)));
    match events.last().unwrap() {
        Event::MessageComplete {
            usage,
            messages,
            text,
            ..
        } => {
            assert_eq!(*messages, 2);
            assert_eq!(text, "It is sunny.");
            assert!(
                usage.output_tokens >= 2 && usage.input_tokens >= 20,
                "usage is summed: {usage:?}"
            );
        }
        other => panic!("last event {other:?}"),
    }
    // What panto sent: the second request carries the call and its result.
    let reqs = server.requests();
    assert_eq!(reqs.len(), 2);
    let body = &reqs[1].body;
    let text = body.to_string();
    assert!(
        text.contains("call_1") && text.contains("sunny in Paris"),
        "{text}"
    );
    match kind {
        ProviderKind::OpenAi => {
            assert_eq!(
                body["messages"][0],
                json!({"role":"system","content":"be brief"})
            );
            assert_eq!(body["messages"][3]["role"], "tool");
            assert_eq!(body["messages"][3]["tool_call_id"], "call_1");
            assert_eq!(body["stream_options"]["include_usage"], true);
            assert_eq!(
                reqs[0].headers["authorization"],
                format!("Bearer {API_KEY}")
            );
        }
        ProviderKind::Anthropic => {
            // Prompt caching is on by default: the system prompt is a block with a
            // cache breakpoint.
            assert_eq!(
                body["system"],
                json!([{"type":"text","text":"be brief","cache_control":{"type":"ephemeral"}}])
            );
            assert_eq!(body["messages"][2]["content"][0]["type"], "tool_result");
            assert_eq!(body["messages"][2]["content"][0]["tool_use_id"], "call_1");
            assert_eq!(reqs[0].headers["x-api-key"], API_KEY);
            assert_eq!(reqs[0].headers["anthropic-version"], "2023-06-01");
        }
        ProviderKind::Gemini => unreachable!("Gemini has tests of its own (core/tests/gemini.rs)"),
        other => unreachable!("{other:?} has its own suite"),
    }
    // History: user, assistant(call), tool(result), assistant(text) — valid.
    let h = agent.history();
    assert_eq!(
        h.iter().map(|m| m.role).collect::<Vec<_>>(),
        [Role::User, Role::Assistant, Role::Tool, Role::Assistant]
    );
    validate_history(&h).unwrap();
    // Connections are pooled: both requests used one connection.
    assert_eq!(reqs[0].connection, reqs[1].connection);
}

#[tokio::test]
async fn two_step_tool_turn_openai() {
    two_step_turn(ProviderKind::OpenAi).await;
}

#[tokio::test]
async fn two_step_tool_turn_anthropic() {
    two_step_turn(ProviderKind::Anthropic).await;
}

/// The `usage` of every `message_end` of a turn, and of its `message_complete`.
fn usages(events: &[Event]) -> (Vec<Usage>, Usage) {
    let ends = events
        .iter()
        .filter_map(|e| match e {
            Event::MessageEnd { usage, .. } => Some(*usage),
            _ => None,
        })
        .collect();
    match events.last() {
        Some(Event::MessageComplete { usage, .. }) => (ends, *usage),
        other => panic!("last event {other:?}"),
    }
}

/// A server that reports no usage (llama.cpp) for some responses of a turn: those are
/// unknown, not zero, and the turn's total is reported only if every response was.
async fn unreported_usage(kind: ProviderKind) {
    let (tools, text) = match kind {
        ProviderKind::OpenAi => (
            script::openai_tool_calls_events(&[("call_1", "weather", r#"{"city":"Paris"}"#)]),
            script::openai_text_events(&["sunny"]),
        ),
        ProviderKind::Anthropic => (
            script::anthropic_tool_calls_events(&[("call_1", "weather", r#"{"city":"Paris"}"#)]),
            script::anthropic_text_events(&["sunny"]),
        ),
        ProviderKind::Gemini => unreachable!("Gemini has tests of its own (core/tests/gemini.rs)"),
        other => unreachable!("{other:?} has its own suite"),
    };
    let no_usage = |sse: &Vec<Value>| json!({"sse": script::without_usage(sse.clone())});
    let with_usage = |sse: &Vec<Value>| json!({"sse": sse});
    let server = TestServer::start(script::scenario(vec![
        // Turn 1: nothing reported.
        exchange(no_usage(&tools)),
        exchange(no_usage(&text)),
        // Turn 2: the tool step unreported, the answer reported.
        exchange(no_usage(&tools)),
        exchange(with_usage(&text)),
        // Turn 3: everything reported.
        exchange(with_usage(&tools)),
        exchange(with_usage(&text)),
    ]))
    .unwrap();
    let agent = Agent::new(config(kind, &server)).unwrap();
    agent.add_tool(weather_tool()).unwrap();

    let (events, r) = run(&agent, "weather?", &TurnControl::default()).await;
    let summary = r.unwrap();
    let (ends, total) = usages(&events);
    assert_eq!(ends, vec![Usage::default(); 2], "unknown, all counts 0");
    assert!(!total.reported);
    assert_eq!(total, Usage::default());
    assert_eq!(summary.usage, total);

    let (events, r) = run(&agent, "again?", &TurnControl::default()).await;
    r.unwrap();
    let (ends, total) = usages(&events);
    assert!(!ends[0].reported && ends[1].reported, "{ends:?}");
    assert!(ends[1].input_tokens > 0);
    assert!(!total.reported, "one response of the turn was not reported");
    assert_eq!(
        (total.input_tokens, total.output_tokens),
        (ends[1].input_tokens, ends[1].output_tokens),
        "the counts cover the reported response"
    );

    let (events, r) = run(&agent, "and now?", &TurnControl::default()).await;
    r.unwrap();
    let (ends, total) = usages(&events);
    assert!(ends.iter().all(|u| u.reported), "{ends:?}");
    assert!(total.reported);
    assert_eq!(
        total.input_tokens,
        ends[0].input_tokens + ends[1].input_tokens
    );
}

#[tokio::test]
async fn unreported_usage_is_unknown_openai() {
    unreported_usage(ProviderKind::OpenAi).await;
}

#[tokio::test]
async fn unreported_usage_is_unknown_anthropic() {
    unreported_usage(ProviderKind::Anthropic).await;
}

/// Submits host-tool results from another thread as soon as a call is announced.
struct HostAnswerer {
    control: TurnControl,
    inner: Collect,
}

impl Receiver for HostAnswerer {
    fn on_event(&mut self, event: Event) -> Flow {
        if let Event::ToolCallStart {
            call_id,
            host: true,
            arguments,
            ..
        } = &event
        {
            let host = self.control.host.clone();
            let (id, args) = (
                call_id.clone(),
                arguments.clone().unwrap_or_default().to_string(),
            );
            std::thread::spawn(move || {
                host.submit(&id, format!("host saw {args}"), false).unwrap();
                // Answering twice is an error for this call only.
                assert_eq!(
                    host.submit(&id, "again", false).unwrap_err().kind,
                    ErrorKind::Tool
                );
            });
        }
        self.inner.on_event(event)
    }
}

#[tokio::test]
async fn host_tools_are_answered_from_outside() {
    let server = TestServer::start(script::scenario(vec![
        exchange(script::openai_tool_calls(&[
            ("h1", "lookup", r#"{"q":1}"#),
            ("h2", "lookup", r#"{"q":2}"#),
        ])),
        exchange(script::openai_text(&["done"])),
    ]))
    .unwrap();
    let spec = ToolSpec {
        name: "lookup".into(),
        description: "d".into(),
        parameters: json!({"type":"object"}),
        needs_approval: false,
        external: false,
    };
    let agent = Agent::new(config(ProviderKind::OpenAi, &server).with_host_tool(spec)).unwrap();
    let control = TurnControl::default();
    assert_eq!(
        control.host.submit("nope", "x", false).unwrap_err().kind,
        ErrorKind::Tool
    );
    let mut r = HostAnswerer {
        control: control.clone(),
        inner: Collect::default(),
    };
    let summary = agent
        .run("go", &mut r, &control, Default::default())
        .await
        .unwrap();
    assert_eq!(summary.text, "done");
    check_invariants(&r.inner.0);
    let results: Vec<Block> = agent.history()[2].content.clone();
    assert_eq!(results.len(), 2);
    match &results[0] {
        Block::ToolResult {
            call_id, output, ..
        } => {
            assert_eq!(call_id, "h1");
            assert_eq!(output, r#"host saw {"q":1}"#);
        }
        other => panic!("{other:?}"),
    }
    assert!(server.requests()[1].body.to_string().contains("host saw"));
}

#[tokio::test]
async fn results_stream_live_but_history_keeps_call_order() {
    let server = TestServer::start(script::scenario(vec![
        exchange(script::openai_tool_calls(&[
            ("a", "slow", "{}"),
            ("b", "fast", "{}"),
        ])),
        exchange(script::openai_text(&["ok"])),
    ]))
    .unwrap();
    let agent = Agent::new(config(ProviderKind::OpenAi, &server).with_tool_concurrency(2)).unwrap();
    // `slow` finishes only after `fast` did: completion order is b, a — deterministic.
    let fast_done = Arc::new(tokio::sync::Notify::new());
    let n = fast_done.clone();
    agent
        .add_tool(FnTool::new(
            "slow",
            "",
            json!({"type":"object"}),
            move |_, _| {
                let n = n.clone();
                async move {
                    n.notified().await;
                    ToolOutput::ok("slow result")
                }
            },
        ))
        .unwrap();
    let n = fast_done.clone();
    agent
        .add_tool(FnTool::new(
            "fast",
            "",
            json!({"type":"object"}),
            move |_, _| {
                let n = n.clone();
                async move {
                    n.notify_one();
                    ToolOutput::ok("fast result")
                }
            },
        ))
        .unwrap();
    let (events, r) = run(&agent, "go", &TurnControl::default()).await;
    r.unwrap();
    check_invariants(&events);
    let live: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            Event::ToolResult { call_id, .. } => Some(call_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(live, ["b", "a"]);
    let ids: Vec<String> = agent.history()[2]
        .content
        .iter()
        .map(|b| match b {
            Block::ToolResult { call_id, .. } => call_id.clone(),
            _ => panic!(),
        })
        .collect();
    assert_eq!(ids, ["a", "b"]);
}

#[tokio::test]
async fn concurrency_limit_is_respected() {
    let calls: Vec<(String, &str, &str)> =
        (0..6).map(|i| (format!("c{i}"), "count", "{}")).collect();
    let refs: Vec<(&str, &str, &str)> =
        calls.iter().map(|(a, b, c)| (a.as_str(), *b, *c)).collect();
    let server = TestServer::start(script::scenario(vec![
        exchange(script::openai_tool_calls(&refs)),
        exchange(script::openai_text(&["ok"])),
    ]))
    .unwrap();
    let agent = Agent::new(config(ProviderKind::OpenAi, &server).with_tool_concurrency(2)).unwrap();
    let now = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let (n, p) = (now.clone(), peak.clone());
    agent
        .add_tool(FnTool::new(
            "count",
            "",
            json!({"type":"object"}),
            move |_, _| {
                let (n, p) = (n.clone(), p.clone());
                async move {
                    let cur = n.fetch_add(1, Ordering::SeqCst) + 1;
                    p.fetch_max(cur, Ordering::SeqCst);
                    tokio::task::yield_now().await;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    n.fetch_sub(1, Ordering::SeqCst);
                    ToolOutput::ok("x")
                }
            },
        ))
        .unwrap();
    let (events, r) = run(&agent, "go", &TurnControl::default()).await;
    r.unwrap();
    check_invariants(&events);
    assert!(
        peak.load(Ordering::SeqCst) <= 2,
        "peak {}",
        peak.load(Ordering::SeqCst)
    );
}

#[tokio::test]
async fn failing_tools_become_error_results_and_the_turn_goes_on() {
    let server = TestServer::start(script::scenario(vec![
        exchange(script::openai_tool_calls(&[
            ("p", "panics", "{}"),
            ("t", "sleeps", "{}"),
            ("u", "no_such_tool", "{}"),
            ("j", "weather", "{not json"),
            ("e", "fails", "{}"),
        ])),
        exchange(script::openai_text(&["recovered"])),
    ]))
    .unwrap();
    let agent =
        Agent::new(config(ProviderKind::OpenAi, &server).with_tool_timeout_ms(100)).unwrap();
    agent
        .add_tool(FnTool::new(
            "panics",
            "",
            json!({"type":"object"}),
            |_, _| async { panic!("boom") },
        ))
        .unwrap();
    agent
        .add_tool(FnTool::new(
            "sleeps",
            "",
            json!({"type":"object"}),
            |_, _| async {
                std::future::pending::<()>().await;
                ToolOutput::ok("never")
            },
        ))
        .unwrap();
    let ran = Arc::new(AtomicUsize::new(0));
    let r2 = ran.clone();
    agent
        .add_tool(FnTool::new(
            "weather",
            "",
            json!({"type":"object"}),
            move |_, _| {
                r2.fetch_add(1, Ordering::SeqCst);
                async { ToolOutput::ok("ran") }
            },
        ))
        .unwrap();
    agent
        .add_tool(FnTool::new(
            "fails",
            "",
            json!({"type":"object"}),
            |_, _| async { ToolOutput::error("nope") },
        ))
        .unwrap();
    let (events, r) = run(&agent, "go", &TurnControl::default()).await;
    assert_eq!(r.unwrap().text, "recovered");
    check_invariants(&events);
    let results: Vec<(String, String, bool)> = agent.history()[2]
        .content
        .iter()
        .map(|b| match b {
            Block::ToolResult {
                call_id,
                output,
                is_error,
                ..
            } => (call_id.clone(), output.clone(), *is_error),
            _ => panic!(),
        })
        .collect();
    assert!(results.iter().all(|(_, _, e)| *e), "{results:?}");
    assert!(results[0].1.contains("panicked") && results[0].1.contains("boom"));
    assert!(results[1].1.contains("timed out"));
    assert!(results[2].1.contains("no tool named"));
    assert!(results[3].1.contains("not valid JSON"));
    assert_eq!(results[4].1, "nope");
    assert_eq!(
        ran.load(Ordering::SeqCst),
        0,
        "a call with invalid JSON arguments must never run"
    );
}

#[tokio::test]
async fn max_steps_ends_the_turn() {
    let call = || {
        exchange(script::openai_tool_calls(&[(
            "c",
            "weather",
            r#"{"city":"X"}"#,
        )]))
    };
    let server = TestServer::start(script::scenario(vec![call(), call(), call()])).unwrap();
    let agent = Agent::new(config(ProviderKind::OpenAi, &server).with_max_steps(2)).unwrap();
    agent.add_tool(weather_tool()).unwrap();
    let (events, r) = run(&agent, "loop", &TurnControl::default()).await;
    let s = r.unwrap();
    check_invariants(&events);
    assert_eq!(s.stop_reason, StopReason::MaxSteps);
    assert_eq!(s.messages, 2);
    assert_eq!(server.requests().len(), 2);
    validate_history(&agent.history()).unwrap();
}

#[tokio::test]
async fn busy_while_a_turn_is_active() {
    let agent =
        Agent::new(Config::new(ProviderKind::OpenAi, "m").with_base_url("http://127.0.0.1:9"))
            .unwrap();
    let _slot = agent.reserve().unwrap();
    let mut c = Collect::default();
    let e = agent
        .run("x", &mut c, &TurnControl::default(), Default::default())
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Busy);
    assert_eq!(agent.clear_history().unwrap_err().kind, ErrorKind::Busy);
}

#[tokio::test]
async fn history_saves_restores_and_clears() {
    let server = TestServer::start(script::scenario(vec![
        exchange(script::openai_text(&["one"])),
        exchange(script::openai_text(&["two"])),
    ]))
    .unwrap();
    let agent = Agent::new(config(ProviderKind::OpenAi, &server)).unwrap();
    run(&agent, "first", &TurnControl::default())
        .await
        .1
        .unwrap();
    let saved = agent.history_json();
    let other = Agent::new(config(ProviderKind::OpenAi, &server)).unwrap();
    other.load_history_json(&saved).unwrap();
    assert_eq!(other.history(), agent.history());
    run(&other, "second", &TurnControl::default())
        .await
        .1
        .unwrap();
    let sent = server.requests()[1].body["messages"].clone();
    assert_eq!(sent.as_array().unwrap().len(), 3, "{sent}");
    assert_eq!(sent[1]["content"], "one");
    other.clear_history().unwrap();
    assert!(other.history().is_empty());
    assert_eq!(
        other
            .load_history_json("{\"version\":1,\"messages\":[{\"role\":\"tool\",\"content\":[]}]}")
            .unwrap_err()
            .kind,
        ErrorKind::Config
    );
}

#[tokio::test]
async fn per_turn_model_override() {
    let server = TestServer::start(script::scenario(vec![exchange(script::openai_text(&[
        "x",
    ]))]))
    .unwrap();
    let agent = Agent::new(config(ProviderKind::OpenAi, &server)).unwrap();
    let opts = panto::TurnOptions {
        model: Some("other-model".into()),
        ..Default::default()
    };
    agent
        .run("x", &mut Collect::default(), &TurnControl::default(), opts)
        .await
        .unwrap();
    assert_eq!(server.requests()[0].body["model"], "other-model");
}

// ---- cancellation -------------------------------------------------------------------

#[tokio::test]
async fn cancel_during_a_stalled_stream_is_prompt_and_keeps_history_valid() {
    // Two events (role, "partial"), then the server stalls forever without ending the body.
    let mut sse = script::openai_text_events(&["partial"]);
    sse.truncate(2);
    let stalled = json!({"sse": sse, "fault": {"kind": "stall", "after_bytes": 1_000_000}});
    let server = TestServer::start(script::scenario(vec![exchange(stalled)])).unwrap();
    let agent = Agent::new(config(ProviderKind::OpenAi, &server)).unwrap();
    let control = TurnControl::default();
    struct CancelOnDelta(TurnControl, Collect);
    impl Receiver for CancelOnDelta {
        fn on_event(&mut self, e: Event) -> Flow {
            if matches!(e, Event::ContentDelta { .. }) {
                self.0.cancel.cancel();
            }
            self.1.on_event(e)
        }
    }
    let mut r = CancelOnDelta(control.clone(), Collect::default());
    let res = tokio::time::timeout(
        HANG_GUARD,
        agent.run("x", &mut r, &control, Default::default()),
    )
    .await
    .expect("hang");
    assert_eq!(res.unwrap_err().kind, ErrorKind::Cancelled);
    let h = agent.history();
    assert_eq!(h.len(), 1, "the partial assistant message is dropped");
    validate_history(&h).unwrap();
}

#[tokio::test]
async fn cancel_during_tools_gives_every_call_a_result() {
    let server = TestServer::start(script::scenario(vec![exchange(script::openai_tool_calls(
        &[("q", "quick", "{}"), ("s", "stuck", "{}")],
    ))]))
    .unwrap();
    let agent = Agent::new(config(ProviderKind::OpenAi, &server)).unwrap();
    let control = TurnControl::default();
    let c = control.clone();
    agent
        .add_tool(FnTool::new(
            "quick",
            "",
            json!({"type":"object"}),
            |_, _| async { ToolOutput::ok("q done") },
        ))
        .unwrap();
    agent
        .add_tool(FnTool::new(
            "stuck",
            "",
            json!({"type":"object"}),
            move |_, _| {
                let c = c.clone();
                async move {
                    c.cancel.cancel(); // the user cancels while this tool runs
                    std::future::pending::<()>().await;
                    ToolOutput::ok("never")
                }
            },
        ))
        .unwrap();
    let (_, r) = run(&agent, "go", &control).await;
    assert_eq!(r.unwrap_err().kind, ErrorKind::Cancelled);
    let h = agent.history();
    validate_history(&h).unwrap();
    let tool_msg = &h[2];
    assert_eq!(tool_msg.role, Role::Tool);
    match &tool_msg.content[1] {
        Block::ToolResult {
            call_id,
            is_error,
            output,
            ..
        } => {
            assert_eq!(call_id, "s");
            assert!(*is_error && output.contains("cancelled"));
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn receiver_can_stop_the_loop() {
    let server = TestServer::start(script::scenario(vec![exchange(script::openai_text(&[
        "a", "b", "c",
    ]))]))
    .unwrap();
    let agent = Agent::new(config(ProviderKind::OpenAi, &server)).unwrap();
    struct StopAtFirstDelta;
    impl Receiver for StopAtFirstDelta {
        fn on_event(&mut self, event: Event) -> Flow {
            if matches!(event, Event::ContentDelta { .. }) {
                Flow::Stop
            } else {
                Flow::Continue
            }
        }
    }
    let e = agent
        .run(
            "x",
            &mut StopAtFirstDelta,
            &TurnControl::default(),
            Default::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Cancelled);
    validate_history(&agent.history()).unwrap();
}

// ---- retries and faults ---------------------------------------------------------------

async fn fault_run(
    exchanges: Vec<Value>,
    tweak: impl FnOnce(Config) -> Config,
) -> (Vec<Event>, panto::Error, TestServer, Agent) {
    let server = TestServer::start(script::scenario(exchanges)).unwrap();
    let agent = Agent::new(tweak(config(ProviderKind::OpenAi, &server))).unwrap();
    let (events, r) = run(&agent, "x", &TurnControl::default()).await;
    let err = r.expect_err("the turn should fail");
    validate_history(&agent.history()).unwrap();
    (events, err, server, agent)
}

#[tokio::test]
async fn rate_limit_with_retry_after_then_success() {
    let server = TestServer::start(script::scenario(vec![
        exchange(script::http_error(
            429,
            "rate_limit_error",
            json!({"retry-after": "0"}),
        )),
        exchange(script::openai_text(&["fine"])),
    ]))
    .unwrap();
    let agent = Agent::new(config(ProviderKind::OpenAi, &server)).unwrap();
    let (events, r) = run(&agent, "x", &TurnControl::default()).await;
    assert_eq!(r.unwrap().text, "fine");
    match &events[0] {
        Event::ProviderRetry {
            attempt,
            max_attempts,
            delay_ms,
            status,
            ..
        } => {
            assert_eq!(
                (*attempt, *max_attempts, *delay_ms, *status),
                (2, 3, 0, Some(429)),
                "attempt 2 of at most 1 + max_retries (2)"
            );
        }
        other => panic!("first event {other:?}"),
    }
    check_invariants(&events);
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn server_errors_exhaust_the_retries() {
    let e500 = || exchange(script::http_error(500, "server_error", json!({})));
    let (events, err, server, _) = fault_run(vec![e500(), e500(), e500()], |c| c).await;
    assert_eq!(err.kind, ErrorKind::Server);
    assert_eq!(err.status, 500);
    assert_eq!(server.requests().len(), 3);
    assert_eq!(types(&events), ["provider_retry", "provider_retry"]);
}

#[tokio::test]
async fn quota_exhausted_is_never_retried() {
    let quota = exchange(
        json!({"status": 429, "json": {"error": {"type": "insufficient_quota", "code": "insufficient_quota", "message": "pay"}}}),
    );
    let (_, err, server, _) = fault_run(vec![quota], |c| c).await;
    assert_eq!(err.kind, ErrorKind::RateLimited);
    assert_eq!(err.provider_code.as_deref(), Some("insufficient_quota"));
    assert!(!err.retryable);
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn x_should_retry_false_is_honoured() {
    let e = exchange(script::http_error(
        503,
        "overloaded",
        json!({"x-should-retry": "false"}),
    ));
    let (_, err, server, _) = fault_run(vec![e], |c| c).await;
    assert_eq!(err.kind, ErrorKind::Server);
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn unauthorized_is_typed_and_never_leaks_the_key() {
    let echo = exchange(
        json!({"status": 401, "json": {"error": {"type": "authentication_error",
        "message": format!("Incorrect API key provided: {API_KEY}")}}}),
    );
    let (_, err, server, agent) = fault_run(vec![echo], |c| c).await;
    assert_eq!(err.kind, ErrorKind::Authentication);
    assert_eq!(server.requests().len(), 1);
    for text in [
        err.message.clone(),
        err.to_string(),
        err.to_json(),
        format!("{err:?}"),
        format!("{agent:?}"),
    ] {
        assert!(!text.contains(API_KEY), "key leaked: {text}");
    }
}

#[tokio::test]
async fn reset_mid_stream_is_a_connection_error_without_retry() {
    let mut resp = script::openai_text(&["partial text that streams"]);
    resp["fault"] = json!({"kind": "reset", "after_bytes": 400});
    let (events, err, server, _) = fault_run(vec![exchange(resp)], |c| c).await;
    assert_eq!(err.kind, ErrorKind::Connection, "{err}");
    assert!(
        types(&events).contains(&"content_delta"),
        "content arrived before the reset"
    );
    assert_eq!(server.requests().len(), 1, "no silent retry after content");
}

#[tokio::test]
async fn reset_before_any_byte_is_retried() {
    let mut reset = script::openai_text(&["x"]);
    reset["fault"] = json!({"kind": "reset", "after_bytes": 0});
    let (events, r) = {
        let server = TestServer::start(script::scenario(vec![
            exchange(reset),
            exchange(script::openai_text(&["ok"])),
        ]))
        .unwrap();
        let agent = Agent::new(config(ProviderKind::OpenAi, &server)).unwrap();
        run(&agent, "x", &TurnControl::default()).await
    };
    assert_eq!(r.unwrap().text, "ok");
    assert_eq!(events[0].type_name(), "provider_retry");
}

#[tokio::test]
async fn stall_hits_the_idle_timeout() {
    let mut resp = script::openai_text(&["a"]);
    resp["fault"] = json!({"kind": "stall", "after_bytes": 0});
    let (_, err, _, _) = fault_run(
        vec![
            exchange(resp.clone()),
            exchange(resp.clone()),
            exchange(resp),
        ],
        |c| {
            c.with_timeouts(Timeouts {
                connect_ms: 5000,
                idle_ms: 200,
                request_ms: 60_000,
            })
        },
    )
    .await;
    assert_eq!(err.kind, ErrorKind::Timeout);
    assert!(err.message.contains("idle"), "{}", err.message);
}

fn slow_thinker(keepalive: Value, count: usize) -> Value {
    // A reasoning model behind a gateway: nothing but keep-alives while it thinks (20 ms
    // apart, far longer in total than idle_ms), then the answer.
    let mut sse: Vec<Value> = (0..count).map(|_| keepalive.clone()).collect();
    sse.extend(script::openai_text_events(&["thought it through"]));
    json!({"sse": sse, "chunk_delay_ms": 20})
}

fn short_idle(c: Config, request_ms: u64) -> Config {
    c.with_retry(RetryConfig {
        max_retries: 0,
        initial_delay_ms: 1,
        max_delay_ms: 1,
        ..RetryConfig::default()
    })
    .with_timeouts(Timeouts {
        connect_ms: 5000,
        idle_ms: 300,
        request_ms,
    })
}

#[tokio::test]
async fn keepalive_comments_keep_a_thinking_model_alive() {
    // 50 comments × 20 ms = 1 s of silence but for comments, against idle_ms = 300.
    let resp = slow_thinker(json!({"comment": "OPENROUTER PROCESSING"}), 50);
    let server = TestServer::start(script::scenario(vec![exchange(resp)])).unwrap();
    let agent = Agent::new(short_idle(config(ProviderKind::OpenAi, &server), 60_000)).unwrap();
    let (events, r) = run(&agent, "think", &TurnControl::default()).await;
    assert_eq!(r.unwrap().text, "thought it through");
    check_invariants(&events);
}

#[tokio::test]
async fn empty_events_keep_the_connection_alive_too() {
    let resp = slow_thinker(json!({"data": ""}), 50);
    let server = TestServer::start(script::scenario(vec![exchange(resp)])).unwrap();
    let agent = Agent::new(short_idle(config(ProviderKind::OpenAi, &server), 60_000)).unwrap();
    let (_, r) = run(&agent, "think", &TurnControl::default()).await;
    assert_eq!(r.unwrap().text, "thought it through");
}

#[tokio::test]
async fn request_ms_bounds_a_stream_of_only_keepalives() {
    // Keep-alives forever (200 × 20 ms = 4 s) prove the connection alive, not the
    // answer coming: request_ms (1.5 s) ends the attempt.
    let comments: Vec<Value> = (0..200).map(|_| json!({"comment": "keep-alive"})).collect();
    let resp = json!({"sse": comments, "chunk_delay_ms": 20});
    let (_, err, _, _) = fault_run(vec![exchange(resp)], |c| short_idle(c, 1500)).await;
    assert_eq!(err.kind, ErrorKind::Timeout);
    assert!(err.message.contains("request_ms"), "{}", err.message);
}

#[tokio::test]
async fn truncated_stream_is_incomplete() {
    let mut sse = script::openai_text_events(&["cut", "short"]);
    sse.truncate(3); // no finish_reason, no [DONE]
    let (events, err, _, agent) = fault_run(vec![exchange(json!({"sse": sse}))], |c| c).await;
    assert_eq!(err.kind, ErrorKind::Incomplete);
    assert!(types(&events).contains(&"content_delta"));
    assert_eq!(agent.history().len(), 1);
}

#[tokio::test]
async fn malformed_json_is_a_protocol_error() {
    let resp = json!({"sse": [{"data": "{\"choices\": [oops"}]});
    let (_, err, _, _) = fault_run(vec![exchange(resp)], |c| c).await;
    assert_eq!(err.kind, ErrorKind::Protocol);
}

#[tokio::test]
async fn oversized_line_is_a_protocol_error() {
    let big = "x".repeat(64 * 1024);
    let resp = json!({"sse": [{"data": big}]});
    let (_, err, _, _) = fault_run(vec![exchange(resp)], |mut c| {
        c.max_event_bytes = 16 * 1024;
        c
    })
    .await;
    assert_eq!(err.kind, ErrorKind::Protocol);
    assert!(err.message.contains("maximum size"));
}

#[tokio::test]
async fn anthropic_overloaded_error_event_before_content_is_retried() {
    let overloaded = json!({"sse": [
        {"event": "message_start", "data": {"type":"message_start","message":{"id":"m","model":"c","usage":{"input_tokens":1,"output_tokens":0}}}},
        {"event": "error", "data": {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}}
    ]});
    let server = TestServer::start(script::scenario(vec![
        exchange(overloaded),
        exchange(script::anthropic_text(&["hi"])),
    ]))
    .unwrap();
    let agent = Agent::new(config(ProviderKind::Anthropic, &server)).unwrap();
    let (events, r) = run(&agent, "x", &TurnControl::default()).await;
    assert_eq!(r.unwrap().text, "hi");
    check_invariants(&events);
    match &events[0] {
        Event::ProviderRetry { reason, .. } => {
            assert!(reason.contains("overloaded_error"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn host_calls_panto_rejects_are_not_announced_as_host_calls() {
    let server = TestServer::start(script::scenario(vec![
        exchange(script::openai_tool_calls(&[
            ("bad", "lookup", "{not json"),
            ("arr", "lookup", "[1]"),
        ])),
        exchange(script::openai_text(&["ok"])),
    ]))
    .unwrap();
    let spec = ToolSpec {
        name: "lookup".into(),
        description: "".into(),
        parameters: json!({"type":"object"}),
        needs_approval: false,
        external: false,
    };
    let agent = Agent::new(config(ProviderKind::OpenAi, &server).with_host_tool(spec)).unwrap();
    let (events, r) = run(&agent, "go", &TurnControl::default()).await;
    r.unwrap();
    check_invariants(&events);
    let starts: Vec<bool> = events
        .iter()
        .filter_map(|e| match e {
            Event::ToolCallStart { host, .. } => Some(*host),
            _ => None,
        })
        .collect();
    assert_eq!(
        starts,
        [false, false],
        "the host must not be asked to run rejected calls"
    );
    let errors = events
        .iter()
        .filter(|e| matches!(e, Event::ToolResult { is_error: true, .. }))
        .count();
    assert_eq!(errors, 2);
}

#[tokio::test]
async fn cancel_during_a_retry_backoff_is_prompt() {
    // The server asks for a 30 s wait; the hang guard (30 s) would trip if the sleep were
    // not interrupted by the cancel.
    let slow = exchange(script::http_error(
        429,
        "rate_limit_error",
        json!({"retry-after": "30"}),
    ));
    let server = TestServer::start(script::scenario(vec![
        slow,
        exchange(script::openai_text(&["late"])),
    ]))
    .unwrap();
    let agent = Agent::new(
        config(ProviderKind::OpenAi, &server).with_retry(RetryConfig {
            max_retries: 2,
            initial_delay_ms: 1,
            max_delay_ms: 5,
            ..RetryConfig::default()
        }),
    )
    .unwrap();
    let control = TurnControl::default();
    struct CancelOnRetry(TurnControl);
    impl Receiver for CancelOnRetry {
        fn on_event(&mut self, event: Event) -> Flow {
            if let Event::ProviderRetry { delay_ms, .. } = event {
                assert_eq!(delay_ms, 30_000, "retry-after is honoured");
                self.0.cancel.cancel();
            }
            Flow::Continue
        }
    }
    let started = std::time::Instant::now();
    let r = tokio::time::timeout(
        HANG_GUARD,
        agent.run(
            "x",
            &mut CancelOnRetry(control.clone()),
            &control,
            Default::default(),
        ),
    )
    .await
    .expect("the backoff sleep ignored the cancel");
    assert_eq!(r.unwrap_err().kind, ErrorKind::Cancelled);
    assert!(started.elapsed() < Duration::from_secs(25));
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn a_slow_but_steady_stream_is_not_an_idle_timeout() {
    // 1 byte every 10 ms for the whole body, with a 400 ms idle timeout: progress resets
    // the idle timer, so the turn completes.
    let mut resp = script::openai_text(&["steady"]);
    resp["fault"] = json!({"kind": "trickle", "after_bytes": 0, "every_ms": 10, "bytes": 8});
    let server = TestServer::start(script::scenario(vec![exchange(resp)])).unwrap();
    let agent = Agent::new(
        config(ProviderKind::OpenAi, &server).with_timeouts(Timeouts {
            connect_ms: 5_000,
            idle_ms: 400,
            request_ms: 60_000,
        }),
    )
    .unwrap();
    let (events, r) = run(&agent, "x", &TurnControl::default()).await;
    assert_eq!(r.unwrap().text, "steady");
    check_invariants(&events);
}

/// `max_input_bytes` and `max_history_bytes` bound what a push turn takes and what a
/// history load reads: past them, a `config` error naming the key, nothing sent, the
/// history unchanged. (Before these keys, any input was appended and sent.)
#[tokio::test]
async fn input_and_history_limits_are_config_errors_before_anything_is_sent() {
    let server = TestServer::start(script::scenario(vec![exchange(script::openai_text(&[
        "ok",
    ]))]))
    .unwrap();
    let agent = Agent::new(
        config(ProviderKind::OpenAi, &server)
            .with_max_input_bytes(10)
            .with_max_history_bytes(2048),
    )
    .unwrap();
    let (events, r) = run(&agent, "eleven byte", &TurnControl::default()).await;
    let e = r.expect_err("an input past max_input_bytes");
    assert_eq!(e.kind, ErrorKind::Config);
    assert!(e.message.contains("max_input_bytes (10)"), "{}", e.message);
    assert!(events.is_empty());
    assert!(server.requests().is_empty(), "nothing was sent");
    assert_eq!(agent.history_json(), r#"{"version":1,"messages":[]}"#);
    assert!(agent.check_input(&"ten bytes!".into()).is_ok());

    let long = format!(
        r#"{{"version":1,"messages":[{{"role":"user","content":[{{"type":"text","text":"{}"}}]}}]}}"#,
        "x".repeat(4096)
    );
    let e = agent
        .load_history_json(&long)
        .expect_err("a history past the cap");
    assert_eq!(e.kind, ErrorKind::Config);
    assert!(
        e.message.contains("max_history_bytes (2048)"),
        "{}",
        e.message
    );
    // Under the cap, but not with the next input: refused before it is appended.
    let near = long.replace(&"x".repeat(4096), &"x".repeat(1960));
    agent.load_history_json(&near).unwrap();
    let e = agent
        .check_input(&"0123456789".into())
        .expect_err("past max_history_bytes");
    assert!(e.message.contains("max_history_bytes"), "{}", e.message);
    let (_, r) = run(&agent, "0123456789", &TurnControl::default()).await;
    assert_eq!(r.expect_err("refused").kind, ErrorKind::Config);
    assert_eq!(agent.history_json(), near);
}

/// A Rust tool reporting progress through `Tool::call_with_progress`.
struct Downloader;

impl panto::Tool for Downloader {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "download".into(),
            description: "Downloads".into(),
            parameters: json!({"type":"object"}),
            needs_approval: false,
            external: false,
        }
    }
    fn call(&self, _: Value, _: panto::CancellationToken) -> panto::ToolFuture {
        Box::pin(async { ToolOutput::ok("called without progress") })
    }
    fn call_with_progress(
        &self,
        _: Value,
        _: panto::CancellationToken,
        progress: panto::CallProgress,
    ) -> panto::ToolFuture {
        Box::pin(async move {
            progress.report(f64::NAN, None, Some("ignored"));
            for i in 1..=50 {
                progress.report(f64::from(i), Some(50.0), Some(&format!("chunk {i}\nmore")));
            }
            ToolOutput::ok("downloaded")
        })
    }
}

#[tokio::test]
async fn a_rust_tools_progress_reaches_the_turn_before_its_result() {
    let server = TestServer::start(script::scenario(vec![
        exchange(script::openai_tool_calls(&[
            ("call_1", "download", "{}"),
            ("call_2", "weather", r#"{"city":"Paris"}"#),
        ])),
        exchange(script::openai_text(&["done"])),
    ]))
    .unwrap();
    let agent = Agent::new(config(ProviderKind::OpenAi, &server)).unwrap();
    agent.add_tool(Downloader).unwrap();
    agent.add_tool(weather_tool()).unwrap();
    let (events, r) = run(&agent, "go", &TurnControl::default()).await;
    assert_eq!(r.unwrap().text, "done");
    check_invariants(&events);
    let result_at = events
        .iter()
        .position(|e| matches!(e, Event::ToolResult { call_id, .. } if call_id == "call_1"))
        .unwrap();
    let result = &events[result_at];
    assert!(matches!(result, Event::ToolResult { output, .. } if output == "downloaded"));
    let progress: Vec<(usize, &Event)> = events
        .iter()
        .enumerate()
        .filter(|(_, e)| matches!(e, Event::ToolProgress { .. }))
        .collect();
    // Fifty reports at once: coalesced, the last one delivered, before the result; the
    // weather tool (which has only `call`) reports nothing.
    assert!(!progress.is_empty() && progress.len() < 50, "{progress:?}");
    let (at, last) = progress.last().unwrap();
    assert!(*at < result_at);
    assert_eq!(
        *last,
        &Event::ToolProgress {
            message: 0,
            call_id: "call_1".into(),
            name: "download".into(),
            progress: 50.0,
            total: Some(50.0),
            text: Some("chunk 50".into()),
        }
    );
    assert!(progress
        .iter()
        .all(|(_, e)| matches!(e, Event::ToolProgress { call_id, .. } if call_id == "call_1")));
}
