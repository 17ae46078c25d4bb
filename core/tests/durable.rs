//! Turns that outlive their process, end to end against `panto-testserver`: deferred
//! calls (approval, rejection, external tools, `defer_tools`), checkpoints and resume
//! in a new agent (the server log shows no response requested twice), steering, and
//! hostile checkpoints and answers.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use panto::message::validate_history;
use panto::{
    Agent, Answers, Checkpoint, Collect, Config, DeferReason, ErrorKind, Event, ExternalTool, Flow,
    FnTool, Input, ProviderKind, Receiver, StopReason, ToolOutput, TurnControl, TurnOptions,
};
use panto_testkit::API_KEY;
use panto_testserver::script::{self, exchange};
use panto_testserver::TestServer;
use serde_json::{json, Value};

const HANG_GUARD: Duration = Duration::from_secs(30);

fn config(server: &TestServer) -> Config {
    panto_testkit::config(ProviderKind::OpenAi, server)
}

/// A weather tool that counts its calls.
fn weather(calls: Arc<AtomicUsize>, needs_approval: bool) -> impl panto::Tool {
    FnTool::new(
        "weather",
        "Weather for a city",
        json!({"type":"object","properties":{"city":{"type":"string"}}}),
        move |args: Value, _| {
            let calls = calls.clone();
            async move {
                calls.fetch_add(1, Ordering::SeqCst);
                ToolOutput::ok(format!("sunny in {}", args["city"].as_str().unwrap_or("?")))
            }
        },
    )
    .needs_approval(needs_approval)
}

fn two_steps() -> TestServer {
    TestServer::start(script::scenario(vec![
        exchange(script::openai_tool_calls(&[(
            "call_1",
            "weather",
            r#"{"city":"Paris"}"#,
        )])),
        exchange(script::openai_text(&["It is ", "sunny."])),
    ]))
    .unwrap()
}

async fn run(
    agent: &Agent,
    input: &str,
    control: &TurnControl,
    options: TurnOptions,
) -> (Vec<Event>, panto::Result<panto::TurnSummary>) {
    let mut events = Collect::default();
    let r = tokio::time::timeout(HANG_GUARD, agent.run(input, &mut events, control, options))
        .await
        .expect("the turn hung");
    (events.0, r)
}

async fn resume(
    agent: &Agent,
    checkpoint: Checkpoint,
    answers: Answers,
) -> (Vec<Event>, panto::Result<panto::TurnSummary>) {
    let mut events = Collect::default();
    let control = TurnControl::default();
    let r = tokio::time::timeout(
        HANG_GUARD,
        agent.resume(checkpoint, answers, &mut events, &control),
    )
    .await
    .expect("the resumed turn hung");
    (events.0, r)
}

fn bodies(server: &TestServer) -> Vec<String> {
    server
        .requests()
        .iter()
        .map(|r| r.body.to_string())
        .collect()
}

/// The checkpoint of a finished `control`, through its JSON form.
fn saved(control: &TurnControl) -> Checkpoint {
    let json = control.checkpoint().expect("a checkpoint").to_json();
    Checkpoint::from_json(&json).expect("the checkpoint reads back")
}

#[tokio::test]
async fn approval_pauses_the_turn_and_an_approved_call_runs_on_resume_in_a_new_agent() {
    let server = two_steps();
    let calls = Arc::new(AtomicUsize::new(0));
    let agent = Agent::new(config(&server)).unwrap();
    agent.add_tool(weather(calls.clone(), true)).unwrap();
    let control = TurnControl::default();
    let (events, r) = run(&agent, "Weather?", &control, TurnOptions::default()).await;
    let summary = r.unwrap();
    assert_eq!(summary.stop_reason, StopReason::Deferred);
    assert_eq!(summary.deferred.len(), 1);
    assert_eq!(summary.deferred[0].call_id, "call_1");
    assert_eq!(summary.deferred[0].reason, DeferReason::Approval);
    assert_eq!(summary.deferred[0].arguments, json!({"city": "Paris"}));
    let last = events.last().unwrap().to_json();
    assert!(last.contains(r#""stop_reason":"deferred""#), "{last}");
    assert!(last.contains(r#""deferred":[{"call_id":"call_1","name":"weather","arguments":{"city":"Paris"},"reason":"approval"}]"#), "{last}");
    // No tool_call_start for a deferred call: it did not run.
    assert!(!events
        .iter()
        .any(|e| matches!(e, Event::ToolCallStart { .. })));
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    // The paused agent's history is valid: the call has a result saying it waits.
    let history = agent.history();
    validate_history(&history).unwrap();
    assert!(
        agent.history_json().contains("the turn is paused"),
        "{}",
        agent.history_json()
    );
    assert_eq!(server.requests().len(), 1);

    let checkpoint = saved(&control);
    assert_eq!(checkpoint.deferred(), summary.deferred);
    let fresh = Agent::new(config(&server)).unwrap();
    fresh.add_tool(weather(calls.clone(), true)).unwrap();
    let (events, r) = resume(&fresh, checkpoint, Answers::new().approve("call_1")).await;
    let summary = r.unwrap();
    assert_eq!(summary.stop_reason, StopReason::EndTurn);
    assert_eq!(summary.text, "It is sunny.");
    assert_eq!(summary.messages, 2, "the whole turn's messages");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert!(events
        .iter()
        .any(|e| matches!(e, Event::ToolResult { output, .. } if output == "sunny in Paris")));
    let sent = bodies(&server);
    assert_eq!(sent.len(), 2, "the first response was requested once");
    assert!(sent[1].contains("sunny in Paris"));
    assert!(!sent[1].contains("the turn is paused"));
    validate_history(&fresh.history()).unwrap();
}

#[tokio::test]
async fn a_rejected_call_reaches_the_model_as_an_error_result_with_the_reason() {
    let server = two_steps();
    let calls = Arc::new(AtomicUsize::new(0));
    let agent = Agent::new(config(&server)).unwrap();
    agent.add_tool(weather(calls.clone(), true)).unwrap();
    let control = TurnControl::default();
    let (_, r) = run(&agent, "Weather?", &control, TurnOptions::default()).await;
    assert_eq!(r.unwrap().stop_reason, StopReason::Deferred);
    let (events, r) = resume(
        &agent,
        saved(&control),
        Answers::from_json(r#"{"call_1": {"reject": "not in Paris today"}}"#).unwrap(),
    )
    .await;
    assert_eq!(r.unwrap().text, "It is sunny.");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        0,
        "a rejected call never runs"
    );
    assert!(!events
        .iter()
        .any(|e| matches!(e, Event::ToolCallStart { .. })));
    // The resumed stream reports the rejection as the call's result, once, before the
    // next request's events.
    let results: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            Event::ToolResult {
                call_id,
                output,
                is_error,
                ..
            } => Some((call_id.as_str(), output.as_str(), *is_error)),
            _ => None,
        })
        .collect();
    assert_eq!(
        results,
        [(
            "call_1",
            "rejected: the call was not run: not in Paris today",
            true
        )]
    );
    assert!(matches!(events[0], Event::ToolResult { .. }), "{events:?}");
    let sent = bodies(&server);
    assert_eq!(sent.len(), 2);
    assert!(
        sent[1].contains("rejected: the call was not run: not in Paris today"),
        "{}",
        sent[1]
    );
}

#[tokio::test]
async fn an_external_call_is_answered_with_its_result() {
    let server = two_steps();
    let agent = Agent::new(config(&server)).unwrap();
    agent
        .add_tool(ExternalTool::new(
            "weather",
            "Weather for a city",
            json!({"type":"object","properties":{"city":{"type":"string"}}}),
        ))
        .unwrap();
    let control = TurnControl::default();
    let (_, r) = run(&agent, "Weather?", &control, TurnOptions::default()).await;
    let summary = r.unwrap();
    assert_eq!(summary.deferred[0].reason, DeferReason::External);
    // Approving an external call is the wrong kind of answer.
    let wrong = agent
        .check_resume(&saved(&control), &Answers::new().approve("call_1"))
        .unwrap_err();
    assert_eq!(wrong.kind, ErrorKind::Config);
    assert!(wrong.message.contains("external"), "{wrong}");
    let answers =
        Answers::from_json(r#"{"call_1": {"output": "rain from the service", "is_error": false}}"#)
            .unwrap();
    let (events, r) = resume(&agent, saved(&control), answers).await;
    assert_eq!(r.unwrap().stop_reason, StopReason::EndTurn);
    assert!(bodies(&server)[1].contains("rain from the service"));
    // The result given on resume is the call's tool_result in the resumed stream.
    let results: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            Event::ToolResult {
                call_id,
                name,
                output,
                is_error,
                ..
            } => Some((call_id.as_str(), name.as_str(), output.as_str(), *is_error)),
            _ => None,
        })
        .collect();
    assert_eq!(
        results,
        [("call_1", "weather", "rain from the service", false)]
    );
}

#[tokio::test]
async fn defer_tools_defers_every_call_and_an_unanswered_call_pauses_again() {
    let server = two_steps();
    let calls = Arc::new(AtomicUsize::new(0));
    let agent = Agent::new(config(&server)).unwrap();
    agent.add_tool(weather(calls.clone(), false)).unwrap();
    let control = TurnControl::default();
    let options = TurnOptions::from_json(r#"{"defer_tools": true}"#).unwrap();
    let (_, r) = run(&agent, "Weather?", &control, options).await;
    let summary = r.unwrap();
    assert_eq!(summary.deferred[0].reason, DeferReason::Deferred);
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    // No answer: the turn pauses again, nothing is requested.
    let again = TurnControl::default();
    let mut events = Collect::default();
    let r = agent
        .resume(saved(&control), Answers::new(), &mut events, &again)
        .await
        .unwrap();
    assert_eq!(r.stop_reason, StopReason::Deferred);
    assert_eq!(server.requests().len(), 1);
    // The engine ran it: its result goes to the model.
    let answers = Answers::new().result("call_1", ToolOutput::ok("cloudy (engine)"));
    let (_, r) = resume(&agent, saved(&again), answers).await;
    assert_eq!(r.unwrap().text, "It is sunny.");
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    assert!(bodies(&server)[1].contains("cloudy (engine)"));
}

/// Takes a checkpoint at the first event matching `at` and stops the turn there.
struct StopAt {
    control: TurnControl,
    at: fn(&Event) -> bool,
    taken: Arc<Mutex<Option<Checkpoint>>>,
}

impl Receiver for StopAt {
    fn on_event(&mut self, event: Event) -> Flow {
        if (self.at)(&event) {
            *self.taken.lock().unwrap() = self.control.checkpoint();
            return Flow::Stop;
        }
        Flow::Continue
    }
}

async fn uninterrupted(agent: &Agent) -> (panto::TurnSummary, Vec<panto::Message>) {
    let (_, r) = run(
        agent,
        "Weather?",
        &TurnControl::default(),
        TurnOptions::default(),
    )
    .await;
    (r.unwrap(), agent.history())
}

#[tokio::test]
async fn a_resume_in_a_new_agent_after_the_first_response_never_requests_it_again() {
    let reference_server = two_steps();
    let reference = Agent::new(config(&reference_server)).unwrap();
    reference
        .add_tool(weather(Arc::new(AtomicUsize::new(0)), false))
        .unwrap();
    let (want, want_history) = uninterrupted(&reference).await;

    let server = two_steps();
    let calls = Arc::new(AtomicUsize::new(0));
    let agent = Agent::new(config(&server)).unwrap();
    agent.add_tool(weather(calls.clone(), false)).unwrap();
    let control = TurnControl::default();
    let taken = Arc::new(Mutex::new(None));
    let mut stop = StopAt {
        control: control.clone(),
        // The first event after the response's message_end.
        at: |e| matches!(e, Event::ToolCallStart { .. }),
        taken: taken.clone(),
    };
    let r = agent
        .run("Weather?", &mut stop, &control, TurnOptions::default())
        .await;
    assert_eq!(r.unwrap_err().kind, ErrorKind::Cancelled);
    let checkpoint = taken
        .lock()
        .unwrap()
        .take()
        .expect("a checkpoint at tool_call_start");
    let checkpoint = Checkpoint::from_json(&checkpoint.to_json()).unwrap();
    assert_eq!(checkpoint.steps(), 1, "the response is in it");

    let fresh = Agent::new(config(&server)).unwrap();
    fresh.add_tool(weather(calls.clone(), false)).unwrap();
    let (_, r) = resume(&fresh, checkpoint, Answers::new()).await;
    let got = r.unwrap();
    assert_eq!(
        server.requests().len(),
        2,
        "the first response was requested once"
    );
    assert_eq!(
        got, want,
        "the same summary as an uninterrupted turn (usage of both steps)"
    );
    assert_eq!(fresh.history(), want_history);
}

#[tokio::test]
async fn a_resume_after_the_first_of_two_parallel_results_runs_only_the_second_again() {
    let server = TestServer::start(script::scenario(vec![
        exchange(script::openai_tool_calls(&[
            ("call_fast", "fast", "{}"),
            ("call_slow", "slow", "{}"),
        ])),
        exchange(script::openai_text(&["done"])),
    ]))
    .unwrap();
    let fast_calls = Arc::new(AtomicUsize::new(0));
    let slow_calls = Arc::new(AtomicUsize::new(0));
    let tools = |agent: &Agent, blocking: bool| {
        let f = fast_calls.clone();
        agent
            .add_tool(FnTool::new(
                "fast",
                "",
                json!({"type":"object"}),
                move |_, _| {
                    let f = f.clone();
                    async move {
                        f.fetch_add(1, Ordering::SeqCst);
                        ToolOutput::ok("fast result")
                    }
                },
            ))
            .unwrap();
        let s = slow_calls.clone();
        agent
            .add_tool(FnTool::new(
                "slow",
                "",
                json!({"type":"object"}),
                move |_, cancel: panto::CancellationToken| {
                    let s = s.clone();
                    async move {
                        s.fetch_add(1, Ordering::SeqCst);
                        if blocking {
                            cancel.cancelled().await;
                        }
                        ToolOutput::ok("slow result")
                    }
                },
            ))
            .unwrap();
    };
    let agent = Agent::new(config(&server)).unwrap();
    tools(&agent, true);
    let control = TurnControl::default();
    let taken = Arc::new(Mutex::new(None));
    let mut stop = StopAt {
        control: control.clone(),
        at: |e| matches!(e, Event::ToolResult { call_id, .. } if call_id == "call_fast"),
        taken: taken.clone(),
    };
    let r = agent
        .run("go", &mut stop, &control, TurnOptions::default())
        .await;
    assert_eq!(r.unwrap_err().kind, ErrorKind::Cancelled);
    let checkpoint = taken.lock().unwrap().take().unwrap();
    let json = checkpoint.to_json();
    assert!(
        json.contains("fast result"),
        "the result delivered is in the checkpoint"
    );
    assert!(!json.contains("slow result"));

    let fresh = Agent::new(config(&server)).unwrap();
    tools(&fresh, false);
    let (events, r) = resume(
        &fresh,
        Checkpoint::from_json(&json).unwrap(),
        Answers::new(),
    )
    .await;
    assert_eq!(r.unwrap().text, "done");
    assert_eq!(
        fast_calls.load(Ordering::SeqCst),
        1,
        "the answered call does not run again"
    );
    assert_eq!(
        slow_calls.load(Ordering::SeqCst),
        2,
        "the unanswered call runs again"
    );
    let started: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            Event::ToolCallStart { call_id, .. } => Some(call_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(started, ["call_slow"]);
    let sent = bodies(&server);
    assert_eq!(sent.len(), 2);
    assert!(sent[1].contains("fast result") && sent[1].contains("slow result"));
}

#[tokio::test]
async fn steering_during_a_tool_call_reaches_the_next_request() {
    let server = two_steps();
    let agent = Agent::new(config(&server)).unwrap();
    let control = TurnControl::default();
    let steer = control.clone();
    agent
        .add_tool(FnTool::new(
            "weather",
            "",
            json!({"type":"object"}),
            move |_, _| {
                let steer = steer.clone();
                async move {
                    steer.steer("Also: in Celsius please").unwrap();
                    ToolOutput::ok("sunny, 21 C")
                }
            },
        ))
        .unwrap();
    let (events, r) = run(&agent, "Weather?", &control, TurnOptions::default()).await;
    r.unwrap();
    let pos = |pred: &dyn Fn(&Event) -> bool| events.iter().position(pred).unwrap();
    let delivered = pos(&|e| matches!(e, Event::SteeringDelivered { .. }));
    assert!(pos(&|e| matches!(e, Event::ToolResult { .. })) < delivered);
    assert!(delivered < pos(&|e| matches!(e, Event::MessageStart { message: 1, .. })));
    assert_eq!(
        events[delivered],
        Event::SteeringDelivered {
            message: 1,
            text: "Also: in Celsius please".into()
        }
    );
    let sent = bodies(&server);
    assert!(!sent[0].contains("Celsius please"));
    assert!(sent[1].contains("Also: in Celsius please"));
    validate_history(&agent.history()).unwrap();
    // After the turn, a steer is refused and the input given back.
    let refused = control.steer("too late").unwrap_err();
    assert_eq!(refused.error.kind, ErrorKind::Config);
    assert_eq!(refused.input, Input::from("too late"));
    assert!(control.take_undelivered().is_empty());
}

/// Steers when the final message ends: the turn goes on so the model answers.
struct SteerAtEnd(TurnControl, bool);

impl Receiver for SteerAtEnd {
    fn on_event(&mut self, event: Event) -> Flow {
        if matches!(event, Event::MessageEnd { message: 0, .. }) && !self.1 {
            self.1 = true;
            self.0.steer("one more thing").unwrap();
        }
        Flow::Continue
    }
}

#[tokio::test]
async fn a_steer_racing_the_final_message_is_answered() {
    let server = TestServer::start(script::scenario(vec![
        exchange(script::openai_text(&["first answer"])),
        exchange(script::openai_text(&["second answer"])),
    ]))
    .unwrap();
    let agent = Agent::new(config(&server)).unwrap();
    let control = TurnControl::default();
    let mut receiver = SteerAtEnd(control.clone(), false);
    let summary = agent
        .run("hi", &mut receiver, &control, TurnOptions::default())
        .await
        .unwrap();
    assert_eq!(summary.text, "second answer");
    assert_eq!(summary.messages, 2);
    let sent = bodies(&server);
    assert_eq!(sent.len(), 2);
    assert!(sent[1].contains("one more thing"));
}

#[tokio::test]
async fn steering_not_delivered_before_a_cancel_is_given_back() {
    let server = two_steps();
    let agent = Agent::new(config(&server)).unwrap();
    let control = TurnControl::default();
    let inner = control.clone();
    agent
        .add_tool(FnTool::new(
            "weather",
            "",
            json!({"type":"object"}),
            move |_, _| {
                let inner = inner.clone();
                async move {
                    inner.steer("never sent").unwrap();
                    inner.cancel.cancel();
                    ToolOutput::ok("x")
                }
            },
        ))
        .unwrap();
    let (_, r) = run(&agent, "Weather?", &control, TurnOptions::default()).await;
    assert_eq!(r.unwrap_err().kind, ErrorKind::Cancelled);
    assert_eq!(control.take_undelivered(), vec![Input::from("never sent")]);
    assert!(control.take_undelivered().is_empty(), "given once");
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn a_checkpoint_holds_no_secret() {
    let server = two_steps();
    let agent = Agent::new(config(&server).with_header("x-custom-token", "hdr-SECRET-77")).unwrap();
    agent
        .add_tool(FnTool::new(
            "weather",
            "",
            json!({"type":"object"}),
            |_, _| async { ToolOutput::ok(format!("leaked {API_KEY} and hdr-SECRET-77")) },
        ))
        .unwrap();
    let control = TurnControl::default();
    let (_, r) = run(&agent, "Weather?", &control, TurnOptions::default()).await;
    r.unwrap();
    let json = control.checkpoint().unwrap().to_json();
    assert!(json.contains("leaked"), "the tool's result is in it");
    assert!(!json.contains(API_KEY), "{json}");
    assert!(!json.contains("hdr-SECRET-77"), "{json}");
}

fn checkpoint_json(server: &TestServer) -> (Agent, String) {
    let agent = Agent::new(config(server)).unwrap();
    agent
        .add_tool(weather(Arc::new(AtomicUsize::new(0)), true))
        .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let control = TurnControl::default();
    rt.block_on(agent.run(
        "Weather?",
        &mut Collect::default(),
        &control,
        TurnOptions::default(),
    ))
    .unwrap();
    (agent, control.checkpoint().unwrap().to_json())
}

fn config_error(json: &str) -> String {
    let e = Checkpoint::from_json(json).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Config, "{e}");
    e.message
}

#[test]
fn hostile_checkpoints_are_config_errors() {
    let server = two_steps();
    let (agent, good) = checkpoint_json(&server);
    let mut doc: Value = serde_json::from_str(&good).unwrap();
    assert_eq!(doc["panto_checkpoint"], 1);

    assert!(config_error("not json").contains("checkpoint"));
    assert!(config_error(&good[..good.len() / 2]).contains("checkpoint"));
    assert!(config_error("{}").contains("not a panto checkpoint"));
    let mut newer = doc.clone();
    newer["panto_checkpoint"] = json!(2);
    assert!(config_error(&newer.to_string()).contains("newer"));
    // Past the cap: refused before parsing (a 100 MB document).
    let huge = format!(
        "{{\"panto_checkpoint\":1,\"text\":\"{}\"}}",
        "x".repeat(100 << 20)
    );
    assert!(config_error(&huge).contains("bytes"));
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    config_error(&deep);
    let deep_inside = good.replacen(
        "\"text\":",
        &format!(
            "\"extra\":{}1{},\"text\":",
            "[".repeat(10_000),
            "]".repeat(10_000)
        ),
        1,
    );
    config_error(&deep_inside);
    // Results for a call the step did not make.
    let mut unknown = doc.clone();
    unknown["pending"]["calls"][0]["call_id"] = json!("call_999");
    assert!(config_error(&unknown.to_string()).contains("call_999"));
    // A conversation a provider would refuse.
    let mut broken = doc.clone();
    broken["conversation"] = json!([{"role": "tool", "content": [{"type": "text", "text": "x"}]}]);
    config_error(&broken.to_string());
    // Parsed, but past this agent's limits, or naming a tool it lacks.
    doc["steps"] = json!(1000);
    let past = Checkpoint::from_json(&doc.to_string()).unwrap();
    let e = agent.check_resume(&past, &Answers::new()).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Config);
    assert!(e.message.contains("max_steps"), "{e}");
    let checkpoint = Checkpoint::from_json(&good).unwrap();
    let e = agent
        .check_resume(&checkpoint, &Answers::new().approve("call_404"))
        .unwrap_err();
    assert!(e.message.contains("call_404"), "{e}");
    let toolless = Agent::new(config(&server)).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let before = toolless.history();
    let e = rt
        .block_on(toolless.resume(
            checkpoint,
            Answers::new().approve("call_1"),
            &mut Collect::default(),
            &TurnControl::default(),
        ))
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Config);
    assert!(e.message.contains("weather"), "{e}");
    assert_eq!(toolless.history(), before, "the history is unchanged");
}

#[test]
fn answers_json_forms() {
    let a = Answers::from_json(
        r#"{"a": {"approve": true}, "b": {"reject": "no"}, "c": {"output": "r", "is_error": true},
            "d": {"output": "", "parts": [{"type": "text", "text": "t"}]}}"#,
    )
    .unwrap();
    assert_eq!(a.get("a"), Some(&panto::Answer::Approve));
    assert_eq!(a.get("b"), Some(&panto::Answer::Reject("no".into())));
    assert_eq!(
        a.get("c"),
        Some(&panto::Answer::Result(ToolOutput::error("r")))
    );
    for bad in [
        "[]",
        r#"{"a": true}"#,
        r#"{"a": {"approve": false}}"#,
        r#"{"a": {"reject": 3}}"#,
        r#"{"a": {"output": "x", "extra": 1}}"#,
        r#"{"a": {}}"#,
    ] {
        assert_eq!(
            Answers::from_json(bad).unwrap_err().kind,
            ErrorKind::Config,
            "{bad}"
        );
    }
}

#[tokio::test]
async fn a_new_turn_on_a_paused_agent_sees_the_waiting_note() {
    let server = TestServer::start(script::scenario(vec![
        exchange(script::openai_tool_calls(&[(
            "call_1",
            "weather",
            r#"{"city":"Paris"}"#,
        )])),
        exchange(script::openai_text(&["ok, never mind"])),
    ]))
    .unwrap();
    let agent = Agent::new(config(&server)).unwrap();
    agent
        .add_tool(weather(Arc::new(AtomicUsize::new(0)), true))
        .unwrap();
    let (_, r) = run(
        &agent,
        "Weather?",
        &TurnControl::default(),
        TurnOptions::default(),
    )
    .await;
    assert_eq!(r.unwrap().stop_reason, StopReason::Deferred);
    let (_, r) = run(
        &agent,
        "Forget it",
        &TurnControl::default(),
        TurnOptions::default(),
    )
    .await;
    assert_eq!(r.unwrap().text, "ok, never mind");
    let sent = bodies(&server);
    assert!(sent[1].contains("the turn is paused until it is answered"));
    validate_history(&agent.history()).unwrap();
}

/// docs/durable-turns.md: a call that needs approval pauses the turn; the checkpoint,
/// saved as text, is resumed later with the approval.
#[tokio::test]
async fn docs_example_approve_later() -> Result<(), panto::Error> {
    use panto::{Collect, FnTool, StopReason, ToolOutput, TurnControl, TurnOptions};
    let server = TestServer::start(script::scenario(vec![
        exchange(script::openai_tool_calls(&[(
            "call_1",
            "delete_file",
            r#"{"path":"/tmp/old.log"}"#,
        )])),
        exchange(script::openai_text(&["Deleted it."])),
    ]))
    .unwrap();
    let config = config(&server);
    // The example:
    let agent = Agent::new(config)?;
    let delete = FnTool::new(
        "delete_file",
        "Deletes a file",
        json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        |args: Value, _| async move { ToolOutput::ok(format!("deleted {}", args["path"])) },
    );
    agent.add_tool(delete.needs_approval(true))?;
    let control = TurnControl::default();
    let mut events = Collect::default();
    let summary = agent
        .run("Clean up", &mut events, &control, TurnOptions::default())
        .await?;
    assert_eq!(summary.stop_reason, StopReason::Deferred);
    let saved: String = control.checkpoint().expect("a checkpoint").to_json();

    // Later, in any process, with an agent that has the same tools:
    let checkpoint = Checkpoint::from_json(&saved)?;
    let call = &checkpoint.deferred()[0];
    println!("approve {} {}?", call.name, call.arguments);
    let answers = Answers::new().approve(call.call_id.clone());
    let control = TurnControl::default();
    let summary = agent
        .resume(checkpoint, answers, &mut events, &control)
        .await?;
    println!("{}", summary.text);
    // End of the example.
    assert_eq!(summary.text, "Deleted it.");
    assert!(bodies(&server)[1].contains("deleted \\\"/tmp/old.log\\\""));
    Ok(())
}
