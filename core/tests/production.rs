//! Production controls against the scripted server: `max_tool_calls`, the process-wide
//! bound on model requests (`max_concurrent_requests`, `max_queued_requests`), token
//! counts (`Agent::count_tokens`, the providers' count endpoints) and
//! `max_history_tokens`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use panto::{
    message, Agent, Config, ErrorKind, Event, FnTool, ProviderKind, TurnControl, TurnOptions,
};
use panto_testkit::{config, turn, turn_with};
use panto_testserver::script::{self, exchange};
use panto_testserver::{Scenario, TestServer};
use serde_json::{json, Value};

const HANG_GUARD: Duration = Duration::from_secs(60);

/// Waits (asynchronously) until `cond` holds, or panics after the hang guard.
async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !cond() {
        assert!(start.elapsed() < HANG_GUARD, "never happened: {what}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

fn counting_tool(agent: &Agent, runs: &Arc<AtomicUsize>) {
    let runs = runs.clone();
    agent
        .add_tool(FnTool::new(
            "probe",
            "A probe",
            json!({"type": "object"}),
            move |_args, _cancel| {
                let runs = runs.clone();
                async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                    panto::ToolOutput::ok("ok")
                }
            },
        ))
        .unwrap();
}

#[tokio::test]
async fn max_tool_calls_fails_the_turn_with_kind_tool_and_runs_none_of_the_step() {
    let three = [
        ("c1", "probe", "{}"),
        ("c2", "probe", "{}"),
        ("c3", "probe", "{}"),
    ];
    let server = TestServer::start(script::scenario(vec![
        exchange(script::openai_tool_calls(&three)),
        exchange(script::openai_tool_calls(&three)),
        exchange(script::openai_text(&["done"])),
    ]))
    .unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let agent = Agent::new(config(ProviderKind::OpenAi, &server).with_max_tool_calls(4)).unwrap();
    counting_tool(&agent, &runs);
    let (events, r) = turn(&agent, "go").await;
    let e = r.expect_err("past max_tool_calls");
    assert_eq!(e.kind, ErrorKind::Tool, "{e}");
    assert!(e.message.contains("max_tool_calls (4)"), "{}", e.message);
    // The first step's three calls ran; none of the second's.
    assert_eq!(runs.load(Ordering::SeqCst), 3);
    assert_eq!(server.requests().len(), 2);
    assert!(!events
        .iter()
        .any(|e| matches!(e, Event::ToolCallStart { message: 1, .. })));
    // The history stays valid: every call of the refused step has its result.
    let history = agent.history();
    message::validate_history(&history).unwrap();
    let last = history.last().unwrap();
    assert!(last.content.iter().all(|b| matches!(
        b,
        panto::Block::ToolResult { is_error: true, output, .. } if output.contains("limit of 4 tool calls")
    )));

    // A turn's option replaces the configuration's: 6 allows both steps.
    server.reset();
    let agent = Agent::new(config(ProviderKind::OpenAi, &server).with_max_tool_calls(1)).unwrap();
    counting_tool(&agent, &runs);
    let options = TurnOptions {
        max_tool_calls: Some(6),
        ..TurnOptions::default()
    };
    let (_, r) = turn_with(&agent, "go", &TurnControl::default(), options).await;
    assert_eq!(r.unwrap().text, "done");
    assert_eq!(runs.load(Ordering::SeqCst), 9);
}

#[test]
fn max_tool_calls_is_a_key_of_the_configuration_and_of_a_turns_options() {
    let c = Config::from_json(
        r#"{"provider":"openai","model":"m","max_tool_calls":3,"max_concurrent_requests":8,
            "max_queued_requests":16,"max_history_tokens":1000,"provider_token_counts":true}"#,
    )
    .unwrap();
    assert_eq!(c.max_tool_calls, Some(3));
    assert_eq!(c.max_concurrent_requests, Some(8));
    assert_eq!(c.max_queued_requests, 16);
    assert_eq!(c.max_history_tokens, Some(1000));
    assert!(c.provider_token_counts);
    let e =
        Config::from_json(r#"{"provider":"openai","model":"m","max_tool_calls":0}"#).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Config);
    assert!(e.message.starts_with("max_tool_calls"), "{}", e.message);
    let o = TurnOptions::from_json(r#"{"max_tool_calls":2}"#).unwrap();
    assert_eq!(o.max_tool_calls, Some(2));
}

fn slow_text(times: usize, delay_ms: u64) -> Scenario {
    let mut response = script::openai_text(&["ok"]);
    response["delay_ms"] = json!(delay_ms);
    Scenario::from_value(&json!({"exchanges": [{"times": times, "response": response}]})).unwrap()
}

/// 200 agents of one endpoint, each with a turn at once: the server never sees more
/// than the bound in flight, every turn succeeds, and the waits show on message_start.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_agents_never_have_more_than_eight_requests_in_flight() {
    let server = TestServer::start(slow_text(200, 20)).unwrap();
    let limited = config(ProviderKind::OpenAi, &server)
        .with_api_key("sk-limit-200")
        .with_max_concurrent_requests(8);
    let mut tasks = Vec::new();
    for _ in 0..200 {
        let agent = Agent::new(limited.clone()).unwrap();
        tasks.push(tokio::spawn(async move { turn(&agent, "hi").await }));
    }
    let mut waited = 0;
    for t in tasks {
        let (events, r) = t.await.unwrap();
        assert_eq!(r.unwrap().text, "ok");
        let Some(Event::MessageStart { queued_ms, .. }) = events.first() else {
            panic!("no message_start: {events:?}");
        };
        let queued = queued_ms.expect("an agent with a bound says how long it waited");
        if queued > 0 {
            waited += 1;
        }
    }
    assert_eq!(server.requests().len(), 200);
    let most = server.max_in_flight();
    assert!(most <= 8, "{most} requests in flight at once");
    assert!(most >= 2, "the requests did overlap: {most}");
    assert!(waited > 0, "some request waited for the bound");

    // The same without a bound: the server sees far more at once (the check can fail).
    let server = TestServer::start(slow_text(200, 20)).unwrap();
    let free = config(ProviderKind::OpenAi, &server);
    let mut tasks = Vec::new();
    for _ in 0..200 {
        let agent = Agent::new(free.clone()).unwrap();
        tasks.push(tokio::spawn(async move { turn(&agent, "hi").await }));
    }
    for t in tasks {
        let (events, r) = t.await.unwrap();
        r.unwrap();
        assert!(matches!(
            events.first(),
            Some(Event::MessageStart {
                queued_ms: None,
                ..
            })
        ));
    }
    assert!(server.max_in_flight() > 8, "{}", server.max_in_flight());
}

/// A held response: the gate decides when it ends.
fn held_then_text(times: usize) -> Scenario {
    let mut response = script::openai_text(&["ok"]);
    response["fault"] = json!({"kind": "hold", "after_bytes": 0});
    Scenario::from_value(&json!({"exchanges": [{"times": times, "response": response}]})).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_fails_at_once_and_a_cancel_leaves_the_queue() {
    let server = TestServer::start(held_then_text(3)).unwrap();
    let c = config(ProviderKind::OpenAi, &server)
        .with_api_key("sk-limit-queue")
        .with_max_concurrent_requests(1)
        .with_max_queued_requests(1);
    let first = Agent::new(c.clone()).unwrap();
    let first = tokio::spawn(async move { turn(&first, "1").await });
    until("the first request is held", || server.held() == 1).await;

    // The second waits in the queue.
    let second = Agent::new(c.clone()).unwrap();
    let control = TurnControl::default();
    let second_control = control.clone();
    let second = tokio::spawn(async move {
        turn_with(&second, "2", &second_control, TurnOptions::default()).await
    });
    until("the second request waits", || {
        panto::http::queued_requests(&c) == 1
    })
    .await;
    assert!(!second.is_finished());

    // The third finds the queue full: rate_limited at once, nothing sent.
    let third = Agent::new(c.clone()).unwrap();
    let (_, r) = turn(&third, "3").await;
    let e = r.expect_err("the queue is full");
    assert_eq!(e.kind, ErrorKind::RateLimited, "{e}");
    assert!(
        e.message.contains("max_queued_requests (1)"),
        "{}",
        e.message
    );
    assert_eq!(server.requests().len(), 1);
    // Its input left no trace in its history.
    assert!(third.history().len() <= 1);

    // A cancel while queued ends the waiter and frees its place in the queue.
    control.cancel.cancel();
    let (_, r) = second.await.unwrap();
    assert_eq!(r.expect_err("cancelled").kind, ErrorKind::Cancelled);
    assert_eq!(panto::http::queued_requests(&c), 0);
    let fourth = Agent::new(c.clone()).unwrap();
    let fourth = tokio::spawn(async move { turn(&fourth, "4").await });
    until("the fourth request waits", || {
        panto::http::queued_requests(&c) == 1
    })
    .await;

    server.open_gate();
    assert_eq!(first.await.unwrap().1.unwrap().text, "ok");
    assert_eq!(fourth.await.unwrap().1.unwrap().text, "ok");
    assert_eq!(server.requests().len(), 2);
}

fn count_scenario(path: &str, answer: Value) -> Scenario {
    Scenario::from_value(&json!({"exchanges": [
        {"match": {"method": "POST", "path": path}, "response": {"status": 200, "json": answer}}
    ]}))
    .unwrap()
}

#[tokio::test]
async fn count_tokens_asks_each_providers_count_endpoint() {
    for (kind, path, answer, want) in [
        (
            ProviderKind::Anthropic,
            "/v1/messages/count_tokens",
            json!({"input_tokens": 42}),
            42,
        ),
        (
            ProviderKind::Gemini,
            "/v1beta/models/scripted-model:countTokens",
            json!({"totalTokens": 17}),
            17,
        ),
        (
            ProviderKind::OpenAiResponses,
            "/v1/responses/input_tokens",
            json!({"object": "response.input_tokens", "input_tokens": 9}),
            9,
        ),
    ] {
        let server = TestServer::start(count_scenario(path, answer)).unwrap();
        let agent = Agent::new(config(kind, &server).with_system("Be brief.")).unwrap();
        let count = agent.count_tokens("How long is this?").await.unwrap();
        assert_eq!(count.tokens, want, "{kind:?}");
        assert!(!count.estimated);
        assert_eq!(
            count.to_json(),
            format!(r#"{{"tokens":{want},"estimated":false}}"#)
        );
        let reqs = server.requests();
        assert_eq!(reqs.len(), 1);
        assert!(reqs[0].matched, "{kind:?}: {:?}", reqs[0].mismatch);
        let body = reqs[0].body.to_string();
        assert!(body.contains("How long is this?"), "{kind:?}: {body}");
        assert!(body.contains("Be brief."), "{kind:?}: {body}");
        assert!(!body.contains("\"stream\""), "{kind:?}: {body}");
        // Nothing entered the history.
        assert!(agent.history().is_empty());
    }
}

#[tokio::test]
async fn count_tokens_estimates_for_chat_completions_and_reports_provider_errors() {
    let server = TestServer::start(Scenario::empty()).unwrap();
    let agent = Agent::new(config(ProviderKind::OpenAi, &server)).unwrap();
    let short = agent.count_tokens("hi").await.unwrap();
    assert!(short.estimated);
    let long = agent.count_tokens("word ".repeat(400)).await.unwrap();
    assert!(long.tokens >= short.tokens + 400, "{short:?} {long:?}");
    assert!(server.requests().is_empty(), "an estimate sends nothing");

    let server = TestServer::start(script::scenario(vec![exchange(script::http_error(
        401,
        "authentication_error",
        json!({}),
    ))]))
    .unwrap();
    let agent = Agent::new(config(ProviderKind::Anthropic, &server)).unwrap();
    let e = agent.count_tokens("hi").await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Authentication);
    assert!(!e.to_string().contains(panto_testkit::API_KEY));
}

#[tokio::test]
async fn max_history_tokens_refuses_a_turn_before_any_request() {
    let server = TestServer::start(script::scenario(vec![exchange(script::openai_text(&[
        "ok",
    ]))]))
    .unwrap();
    let agent =
        Agent::new(config(ProviderKind::OpenAi, &server).with_max_history_tokens(100)).unwrap();
    let (events, r) = turn(&agent, "word ".repeat(200)).await;
    let e = r.expect_err("past max_history_tokens");
    assert_eq!(e.kind, ErrorKind::Config);
    assert!(
        e.message.contains("max_history_tokens (100)"),
        "{}",
        e.message
    );
    assert!(e.message.contains("estimated"), "{}", e.message);
    assert!(events.is_empty());
    assert!(server.requests().is_empty());
    assert!(agent.history().is_empty(), "the input was not kept");
    // A short input fits.
    let (_, r) = turn(&agent, "hi").await;
    assert_eq!(r.unwrap().text, "ok");

    // With provider_token_counts the provider's count decides: 30 tokens fits a cap of
    // 40 that the estimate of this request (well over 40) would pass.
    let server = TestServer::start(
        Scenario::from_value(&json!({"exchanges": [
            {"match": {"path": "/v1/messages/count_tokens"},
             "response": {"status": 200, "json": {"input_tokens": 30}}},
            {"match": {"path": "/v1/messages"}, "response": script::anthropic_text(&["fine"])},
        ]}))
        .unwrap(),
    )
    .unwrap();
    let c = config(ProviderKind::Anthropic, &server)
        .with_max_history_tokens(40)
        .with_provider_token_counts(true);
    let agent = Agent::new(c).unwrap();
    let input = "word ".repeat(100);
    assert!(agent.count_tokens(input.as_str()).await.unwrap().tokens == 30);
    server.reset();
    let (_, r) = turn(&agent, input.as_str()).await;
    assert_eq!(r.unwrap().text, "fine");
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn provider_token_counts_decide_whether_compaction_runs() {
    // The estimate of this history is far past 10 tokens; the provider counts 5, so no
    // summary request is made: the count, then the answer.
    let server = TestServer::start(
        Scenario::from_value(&json!({"exchanges": [
            {"match": {"path": "/v1/messages/count_tokens"},
             "response": {"status": 200, "json": {"input_tokens": 5}}},
            {"match": {"path": "/v1/messages", "body_contains": ["word word"]},
             "response": script::anthropic_text(&["fine"])},
        ]}))
        .unwrap(),
    )
    .unwrap();
    let c = config(ProviderKind::Anthropic, &server)
        .with_provider_token_counts(true)
        .with_compaction(panto::CompactionConfig {
            threshold_tokens: 10,
            keep_last: 1,
            model: None,
            prompt: None,
        });
    let agent = Agent::new(c.clone()).unwrap();
    // An older exchange that compaction could summarize (keep_last 1).
    let earlier = vec![
        panto::Message::user("word ".repeat(100)),
        panto::Message {
            role: panto::Role::Assistant,
            content: vec![panto::Block::text("word ".repeat(100))],
        },
    ];
    agent.set_history(earlier.clone()).unwrap();
    let (_, r) = turn(&agent, "word word").await;
    assert_eq!(r.unwrap().text, "fine");
    let reqs = server.requests();
    assert_eq!(reqs.len(), 2);
    assert!(reqs.iter().all(|r| r.matched), "{reqs:?}");

    // Without the provider's count the estimate passes the threshold: a summary request
    // comes first (the scenario's count exchange does not match it).
    server.reset();
    let agent = Agent::new(c.with_provider_token_counts(false)).unwrap();
    agent.set_history(earlier).unwrap();
    let _ = turn(&agent, "word word").await;
    let reqs = server.requests();
    assert!(
        !reqs[0].matched,
        "the first request is the summary: {:?}",
        reqs[0].path
    );
}
