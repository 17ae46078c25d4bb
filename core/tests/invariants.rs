//! Property test of the turn invariants over random scripted scenarios on
//! `panto-testserver`: random tool batches with random latencies and failures, random
//! transport faults, random cancel points, both providers. Whatever happens:
//! every message_start is closed by one message_end, every block_start by one
//! block_complete, every tool_call_start by one tool_result, message_complete once and
//! last — for a turn that succeeds; and after any failure or cancel, the history is
//! accepted by a strict, independent check of each provider's rules on the request
//! panto would send next.

use std::collections::HashMap;
use std::time::Duration;

use panto::provider::{request_body, RequestParams};
use panto::{
    Agent, Event, Flow, FnTool, ProviderKind, Receiver, Timeouts, ToolOutput, TurnControl,
};
use panto_testkit::{config, quick_retries};
use panto_testserver::script::{self, exchange};
use panto_testserver::TestServer;
use proptest::prelude::*;
use serde_json::{json, Value};

#[derive(Debug, Clone)]
enum Behaviour {
    Ok(u64),
    Fail,
    Panic,
    Hang,
}

fn behaviour() -> impl Strategy<Value = Behaviour> {
    prop_oneof![
        4 => (0u64..15).prop_map(Behaviour::Ok),
        1 => Just(Behaviour::Fail),
        1 => Just(Behaviour::Panic),
        1 => Just(Behaviour::Hang),
    ]
}

#[derive(Debug, Clone)]
enum Fault {
    None,
    Reset(usize),
    Truncate(usize),
    Stall,
    Status(u16),
}

fn fault() -> impl Strategy<Value = Fault> {
    prop_oneof![
        6 => Just(Fault::None),
        1 => (0usize..600).prop_map(Fault::Reset),
        1 => (1usize..6).prop_map(Fault::Truncate),
        1 => Just(Fault::Stall),
        1 => prop_oneof![Just(400u16), Just(429), Just(500), Just(529)].prop_map(Fault::Status),
    ]
}

fn response(kind: ProviderKind, calls: &[(String, String)], fault: &Fault) -> Value {
    let refs: Vec<(&str, &str, &str)> = calls
        .iter()
        .map(|(id, name)| (id.as_str(), name.as_str(), "{\"n\":1}"))
        .collect();
    let mut sse = match (kind, calls.is_empty()) {
        (ProviderKind::OpenAi, true) => script::openai_text_events(&["all ", "done"]),
        (ProviderKind::OpenAi, false) => script::openai_tool_calls_events(&refs),
        (ProviderKind::Anthropic, true) => script::anthropic_text_events(&["all ", "done"]),
        (ProviderKind::Anthropic, false) => script::anthropic_tool_calls_events(&refs),
        (ProviderKind::Gemini, _) => {
            unreachable!("Gemini has tests of its own (core/tests/gemini.rs)")
        }
        (other, _) => unreachable!("{other:?} has its own suite"),
    };
    match fault {
        Fault::None => json!({"sse": sse}),
        Fault::Reset(at) => json!({"sse": sse, "fault": {"kind": "reset", "after_bytes": at}}),
        Fault::Truncate(keep) => {
            sse.truncate((*keep).min(sse.len() - 2));
            json!({"sse": sse})
        }
        Fault::Stall => json!({"sse": sse, "fault": {"kind": "stall", "after_bytes": 50}}),
        Fault::Status(s) => script::http_error(*s, "scripted_error", json!({})),
    }
}

/// Which events count towards the cancel point.
#[derive(Debug, Clone, Copy)]
enum Trigger {
    Any,
    ToolStart,
    Delta,
}

/// Cancels the turn at the k-th event of a kind, and records everything.
struct Recorder {
    events: Vec<Event>,
    cancel_at: Option<(Trigger, usize)>,
    seen: usize,
    cancelled_after: Option<usize>,
    control: TurnControl,
}

impl Receiver for Recorder {
    fn on_event(&mut self, e: Event) -> Flow {
        let counts = match self.cancel_at {
            Some((Trigger::Any, _)) => true,
            Some((Trigger::ToolStart, _)) => matches!(e, Event::ToolCallStart { .. }),
            Some((Trigger::Delta, _)) => matches!(e, Event::ContentDelta { .. }),
            None => false,
        };
        self.events.push(e);
        if counts {
            self.seen += 1;
            if self.cancel_at.map(|(_, k)| k) == Some(self.seen) {
                self.cancelled_after = Some(self.events.len());
                self.control.cancel.cancel();
            }
        }
        Flow::Continue
    }
}

fn check_success_invariants(events: &[Event]) -> Result<(), TestCaseError> {
    let mut open = false;
    let mut blocks: HashMap<(u32, u32), i32> = HashMap::new();
    let mut calls: HashMap<String, i32> = HashMap::new();
    for (i, e) in events.iter().enumerate() {
        match e {
            Event::MessageStart { .. } => {
                prop_assert!(!open, "nested message_start");
                open = true;
            }
            Event::MessageEnd { .. } => {
                prop_assert!(open, "message_end without message_start");
                open = false;
            }
            Event::BlockStart { message, block, .. } => {
                *blocks.entry((*message, *block)).or_default() += 1
            }
            Event::BlockComplete { message, block, .. } => {
                let n = blocks.entry((*message, *block)).or_default();
                prop_assert_eq!(*n, 1, "block_complete without its block_start");
                *n -= 1;
            }
            Event::ToolCallStart { call_id, .. } => *calls.entry(call_id.clone()).or_default() += 1,
            Event::ToolResult { call_id, .. } => {
                let n = calls.entry(call_id.clone()).or_default();
                prop_assert_eq!(*n, 1, "tool_result without its tool_call_start");
                *n -= 1;
            }
            Event::MessageComplete { .. } => prop_assert_eq!(i, events.len() - 1),
            _ => {}
        }
    }
    prop_assert!(!open);
    prop_assert!(blocks.values().all(|v| *v == 0));
    prop_assert!(calls.values().all(|v| *v == 0));
    prop_assert_eq!(events.iter().filter(|e| e.is_terminal()).count(), 1);
    Ok(())
}

/// Strict check of the request panto would send next, written against each provider's
/// documented rules (independent of panto's own validator).
fn check_provider_rules(kind: ProviderKind, body: &Value) -> Result<(), TestCaseError> {
    let msgs = body["messages"].as_array().cloned().unwrap_or_default();
    match kind {
        ProviderKind::OpenAi => {
            let mut i = 0;
            while i < msgs.len() {
                let m = &msgs[i];
                if m["role"] == "tool" {
                    prop_assert!(
                        false,
                        "tool message {} does not follow an assistant tool call",
                        i
                    );
                }
                if let Some(calls) = m["tool_calls"].as_array() {
                    let want: Vec<&str> = calls
                        .iter()
                        .map(|c| c["id"].as_str().unwrap_or(""))
                        .collect();
                    let got: Vec<&str> = msgs[i + 1..]
                        .iter()
                        .take_while(|r| r["role"] == "tool")
                        .map(|r| r["tool_call_id"].as_str().unwrap_or(""))
                        .collect();
                    prop_assert_eq!(&got, &want, "tool results must answer every call, in order");
                    for c in calls {
                        let args = c["function"]["arguments"].as_str().unwrap_or("");
                        prop_assert!(
                            serde_json::from_str::<Value>(args).is_ok() || !args.is_empty()
                        );
                    }
                    i += got.len();
                }
                i += 1;
            }
        }
        ProviderKind::Anthropic => {
            for (i, m) in msgs.iter().enumerate() {
                // One text block goes as a plain string.
                if let Some(text) = m["content"].as_str() {
                    prop_assert!(!text.is_empty(), "empty text in message {}", i);
                    continue;
                }
                let content = m["content"].as_array().cloned().unwrap_or_default();
                prop_assert!(!content.is_empty(), "empty content in message {}", i);
                let uses: Vec<&str> = content
                    .iter()
                    .filter(|b| b["type"] == "tool_use")
                    .map(|b| b["id"].as_str().unwrap_or(""))
                    .collect();
                if !uses.is_empty() {
                    prop_assert_eq!(&m["role"], "assistant");
                    let next = msgs
                        .get(i + 1)
                        .map(|n| n["content"].clone())
                        .unwrap_or(Value::Null);
                    let results: Vec<&str> = next
                        .as_array()
                        .map(|a| {
                            a.iter()
                                .filter(|b| b["type"] == "tool_result")
                                .map(|b| b["tool_use_id"].as_str().unwrap_or(""))
                                .collect()
                        })
                        .unwrap_or_default();
                    prop_assert_eq!(
                        &results,
                        &uses,
                        "tool_use ids need tool_result blocks in the next user message"
                    );
                }
                for b in &content {
                    if b["type"] == "tool_result" {
                        let prev = i.checked_sub(1).and_then(|p| msgs.get(p));
                        let ok = prev.is_some_and(|p| {
                            p["content"].as_array().is_some_and(|a| {
                                a.iter()
                                    .any(|u| u["type"] == "tool_use" && u["id"] == b["tool_use_id"])
                            })
                        });
                        prop_assert!(ok, "tool_result {} without its tool_use", b["tool_use_id"]);
                    }
                    if b["type"] == "text" {
                        prop_assert!(
                            !b["text"].as_str().unwrap_or("").is_empty(),
                            "empty text block"
                        );
                    }
                }
            }
        }
        ProviderKind::Gemini => unreachable!("Gemini has tests of its own (core/tests/gemini.rs)"),
        other => unreachable!("{other:?} has its own suite"),
    }
    Ok(())
}

#[derive(Debug, Clone)]
struct Case {
    kind: ProviderKind,
    steps: Vec<(Vec<Behaviour>, Fault)>,
    final_fault: Fault,
    cancel_at: Option<(Trigger, usize)>,
    concurrency: usize,
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop_oneof![Just(ProviderKind::OpenAi), Just(ProviderKind::Anthropic)],
        proptest::collection::vec(
            (proptest::collection::vec(behaviour(), 1..4), fault()),
            0..3,
        ),
        fault(),
        proptest::option::weighted(
            0.5,
            (
                prop_oneof![
                    Just(Trigger::Any),
                    Just(Trigger::ToolStart),
                    Just(Trigger::Delta)
                ],
                1usize..8,
            ),
        ),
        1usize..4,
    )
        .prop_map(|(kind, steps, final_fault, cancel_at, concurrency)| Case {
            kind,
            steps,
            final_fault,
            cancel_at,
            concurrency,
        })
}

fn run_case(case: &Case) -> Result<(), TestCaseError> {
    let mut exchanges = Vec::new();
    let mut behaviours: HashMap<String, Behaviour> = HashMap::new();
    for (s, (calls, fault)) in case.steps.iter().enumerate() {
        let named: Vec<(String, String)> = calls
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let name = format!("t{s}_{i}");
                behaviours.insert(name.clone(), b.clone());
                (format!("call_{s}_{i}"), name)
            })
            .collect();
        exchanges.push(exchange(response(case.kind, &named, fault)));
    }
    exchanges.push(exchange(response(case.kind, &[], &case.final_fault)));
    // Spare exchanges so retries of a failed request find an answer.
    exchanges.push(exchange(response(case.kind, &[], &Fault::None)));
    exchanges.push(exchange(response(case.kind, &[], &Fault::None)));
    let server = TestServer::start(script::scenario(exchanges)).unwrap();
    let config = config(case.kind, &server)
        .with_tool_concurrency(case.concurrency)
        .with_tool_timeout_ms(200)
        .with_retry(quick_retries(1))
        .with_timeouts(Timeouts {
            connect_ms: 5_000,
            idle_ms: 300,
            request_ms: 30_000,
        });
    let agent = Agent::new(config).unwrap();
    for (name, b) in behaviours {
        agent
            .add_tool(FnTool::new(
                name,
                "",
                json!({"type":"object"}),
                move |_, _| {
                    let b = b.clone();
                    async move {
                        match b {
                            Behaviour::Ok(ms) => {
                                tokio::time::sleep(Duration::from_millis(ms)).await;
                                ToolOutput::ok("fine")
                            }
                            Behaviour::Fail => ToolOutput::error("failed"),
                            Behaviour::Panic => panic!("tool panic"),
                            Behaviour::Hang => {
                                std::future::pending::<()>().await;
                                ToolOutput::ok("never")
                            }
                        }
                    }
                },
            ))
            .unwrap();
    }
    let control = TurnControl::default();
    let mut rec = Recorder {
        events: Vec::new(),
        cancel_at: case.cancel_at,
        seen: 0,
        cancelled_after: None,
        control: control.clone(),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let result = rt.block_on(async {
        tokio::time::timeout(
            Duration::from_secs(30),
            agent.run("go", &mut rec, &control, Default::default()),
        )
        .await
    });
    let result = result.map_err(|_| TestCaseError::fail("the turn hung"))?;
    match &result {
        Ok(_) => check_success_invariants(&rec.events)?,
        Err(e) => {
            prop_assert!(
                !rec.events.iter().any(Event::is_terminal),
                "message_complete before a failure: {e}"
            );
            if rec.cancelled_after.is_some() {
                prop_assert_eq!(e.kind, panto::ErrorKind::Cancelled);
            }
        }
    }
    let history = agent.history();
    panto::message::validate_history(&history).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let restored = panto::message::history_from_json(&agent.history_json())
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(&restored, &history);
    let specs = agent.tool_specs();
    let params = RequestParams {
        model: "m",
        system: None,
        max_tokens: None,
        temperature: None,
        tools: &specs,
        messages: &history,
    };
    check_provider_rules(case.kind, &request_body(case.kind, &params))?;
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn turn_invariants_hold_under_random_tools_faults_and_cancels(c in case()) {
        run_case(&c)?;
    }
}
