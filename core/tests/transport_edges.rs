//! What a server sends besides a clean event stream: a connection reset after the
//! provider said it finished, an HTML page or a compressed body instead of a stream —
//! and that nothing at all is delivered after a cancel.

use std::time::Duration;

use panto::message::validate_history;
use panto::{
    Agent, Collect, Config, ErrorKind, Event, Flow, FnTool, ProviderKind, Receiver, RetryConfig,
    StopReason, ToolOutput, TurnControl,
};
use panto_testkit::config;
use panto_testserver::script::{self, exchange};
use panto_testserver::TestServer;
use serde_json::{json, Value};

async fn run(agent: &Agent) -> (Vec<Event>, panto::Result<panto::TurnSummary>) {
    let mut events = Collect::default();
    let r = tokio::time::timeout(
        Duration::from_secs(30),
        agent.run(
            "x",
            &mut events,
            &TurnControl::default(),
            Default::default(),
        ),
    )
    .await
    .expect("the turn hung");
    (events.0, r)
}

/// The body bytes of SSE items as the test server writes them.
fn sse_len(items: &[Value]) -> usize {
    script::sse_len(items).unwrap()
}

#[tokio::test]
async fn a_reset_after_the_provider_finished_is_a_complete_answer() {
    for kind in [ProviderKind::OpenAi, ProviderKind::Anthropic] {
        for fault in ["reset", "close"] {
            let sse = match kind {
                ProviderKind::OpenAi => script::openai_text_events(&["all ", "here"]),
                ProviderKind::Anthropic => script::anthropic_text_events(&["all ", "here"]),
                ProviderKind::Gemini => {
                    unreachable!("Gemini has tests of its own (core/tests/gemini.rs)")
                }
                other => unreachable!("{other:?} has its own suite"),
            };
            // Everything up to the stop reason (OpenAI: finish_reason + usage; Anthropic:
            // message_delta), then the fault instead of [DONE] / message_stop.
            let keep = sse.len() - 1;
            let after = sse_len(&sse[..keep]);
            let server = TestServer::start(script::scenario(vec![exchange(
                json!({"sse": sse, "fault": {"kind": fault, "after_bytes": after}}),
            )]))
            .unwrap();
            let agent = Agent::new(config(kind, &server)).unwrap();
            let (events, r) = run(&agent).await;
            let summary = r.unwrap_or_else(|e| panic!("{kind:?} {fault}: {e}"));
            assert_eq!(summary.text, "all here");
            assert_eq!(summary.stop_reason, StopReason::EndTurn);
            assert!(events.last().unwrap().is_terminal());
        }
    }
}

#[tokio::test]
async fn a_reset_before_the_stop_reason_is_still_a_failure() {
    let sse = script::openai_text_events(&["cut"]);
    let after = sse_len(&sse[..2]);
    let server = TestServer::start(script::scenario(vec![exchange(
        json!({"sse": sse, "fault": {"kind": "reset", "after_bytes": after}}),
    )]))
    .unwrap();
    let agent = Agent::new(config(ProviderKind::OpenAi, &server)).unwrap();
    let (_, r) = run(&agent).await;
    assert_eq!(r.unwrap_err().kind, ErrorKind::Connection);
}

#[tokio::test]
async fn an_html_page_is_reported_as_what_it_is() {
    let server = TestServer::start(script::scenario(vec![exchange(json!({
        "headers": {"content-type": "text/html; charset=utf-8"},
        "body": "<html><body>Please log in to the captive portal</body></html>"
    }))]))
    .unwrap();
    let agent = Agent::new(config(ProviderKind::OpenAi, &server)).unwrap();
    let (_, r) = run(&agent).await;
    let err = r.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Protocol);
    assert!(err.message.contains("text/html"), "{}", err.message);
    assert!(err.message.contains("captive portal"), "{}", err.message);
    assert_eq!(err.status, 200);
}

#[tokio::test]
async fn a_compressed_body_is_reported_as_what_it_is() {
    let server = TestServer::start(script::scenario(vec![exchange(json!({
        "headers": {"content-encoding": "gzip", "content-type": "text/event-stream"},
        "chunks": ["\u{1f}\u{8b}\u{8}\u{0}binary"]
    }))]))
    .unwrap();
    let agent = Agent::new(config(ProviderKind::OpenAi, &server)).unwrap();
    let (_, r) = run(&agent).await;
    let err = r.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Protocol);
    assert!(err.message.contains("gzip"), "{}", err.message);
}

/// Cancels the turn (through its token, as another thread would) when the first tool
/// result arrives, and keeps every event.
struct CancelOnFirstResult {
    control: TurnControl,
    events: Vec<Event>,
}

impl Receiver for CancelOnFirstResult {
    fn on_event(&mut self, event: Event) -> Flow {
        if matches!(event, Event::ToolResult { .. }) {
            self.control.cancel.cancel();
        }
        self.events.push(event);
        Flow::Continue
    }
}

#[tokio::test]
async fn nothing_is_delivered_after_a_cancel() {
    let server = TestServer::start(script::scenario(vec![
        exchange(script::openai_tool_calls(&[
            ("a", "quick", "{}"),
            ("b", "quick", "{}"),
            ("c", "quick", "{}"),
        ])),
        exchange(script::openai_text(&["never"])),
    ]))
    .unwrap();
    let agent = Agent::new(config(ProviderKind::OpenAi, &server).with_tool_concurrency(1)).unwrap();
    agent
        .add_tool(FnTool::new(
            "quick",
            "",
            json!({"type":"object"}),
            |_: Value, _| async { ToolOutput::ok("ok") },
        ))
        .unwrap();
    let control = TurnControl::default();
    let mut receiver = CancelOnFirstResult {
        control: control.clone(),
        events: Vec::new(),
    };
    let r = agent
        .run("x", &mut receiver, &control, Default::default())
        .await;
    assert_eq!(r.unwrap_err().kind, ErrorKind::Cancelled);
    let last = receiver.events.last().unwrap();
    assert!(
        matches!(last, Event::ToolResult { .. }),
        "an event followed the cancel: {}",
        last.to_json()
    );
    let starts = receiver
        .events
        .iter()
        .filter(|e| matches!(e, Event::ToolCallStart { .. }))
        .count();
    assert_eq!(starts, 1, "a tool started after the cancel");
    assert_eq!(server.requests().len(), 1);
    validate_history(&agent.history()).unwrap();
}

#[tokio::test]
async fn a_whole_message_in_one_json_body_is_decoded_like_a_stream() {
    let openai = json!({"id": "chatcmpl-1", "object": "chat.completion", "created": 1,
        "model": "scripted-model",
        "choices": [{"index": 0, "finish_reason": "stop",
            "message": {"role": "assistant", "content": "whole answer"}}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}});
    let anthropic = json!({"id": "msg_1", "type": "message", "role": "assistant",
        "model": "scripted-model", "stop_reason": "end_turn",
        "content": [{"type": "text", "text": "whole answer"}],
        "usage": {"input_tokens": 3, "output_tokens": 2}});
    for (kind, body) in [
        (ProviderKind::OpenAi, openai),
        (ProviderKind::Anthropic, anthropic),
    ] {
        let server =
            TestServer::start(script::scenario(vec![exchange(json!({ "json": body }))])).unwrap();
        let agent = Agent::new(config(kind, &server)).unwrap();
        let (events, r) = run(&agent).await;
        let summary = r.unwrap_or_else(|e| panic!("{kind:?}: {e}"));
        assert_eq!(summary.text, "whole answer");
        let types: Vec<&str> = events.iter().map(|e| e.type_name()).collect();
        assert_eq!(
            types,
            [
                "message_start",
                "block_start",
                "content_delta",
                "block_complete",
                "message_end",
                "message_complete"
            ],
            "{kind:?}"
        );
        validate_history(&agent.history()).unwrap();
    }
}

#[tokio::test]
async fn an_error_body_with_a_string_error_keeps_its_message() {
    for status in [200, 503] {
        let server = TestServer::start(script::scenario(vec![exchange(
            json!({"status": status, "json": {"error": "model not loaded"}}),
        )]))
        .unwrap();
        let agent = Agent::new(config(ProviderKind::OpenAi, &server)).unwrap();
        let (_, r) = run(&agent).await;
        let err = r.unwrap_err();
        assert!(
            err.message.contains("model not loaded"),
            "{status}: {}",
            err.message
        );
    }
}

/// A server on this machine that refuses the connection is not running: the failure is
/// reported at once, not retried (retries are configured here), and marked not
/// retryable (a refusal from a remote address stays retryable: a restart or a load
/// balancer's hiccup can end).
#[tokio::test]
async fn a_refused_local_connection_is_not_retried() {
    // A port that was just free: nothing listens there now.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    for host in ["127.0.0.1", "localhost"] {
        let config = Config::new(ProviderKind::OpenAi, "scripted-model")
            .with_base_url(format!("http://{host}:{port}/v1"))
            .with_api_key("sk-test-edges-0001")
            .with_retry(RetryConfig {
                max_retries: 3,
                initial_delay_ms: 1,
                max_delay_ms: 1,
                ..RetryConfig::default()
            });
        let agent = Agent::new(config).unwrap();
        let (events, r) = run(&agent).await;
        let err = r.unwrap_err();
        assert_eq!(err.kind, ErrorKind::Connection, "{err}");
        assert!(!err.retryable, "{host}: {err}");
        assert!(
            !events
                .iter()
                .any(|e| matches!(e, Event::ProviderRetry { .. })),
            "{host}: a local refusal was retried: {events:?}"
        );
    }
}
