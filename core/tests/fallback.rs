//! Fallback models (`fallback` in the configuration) against the scripted server: a
//! request that fails after its retries with a kind another model may not share goes to
//! the next entry within the same turn (`provider_fallback`), the rest of the turn stays
//! there, and a checkpoint taken after it resumes there; an error of another kind, or one
//! after part of the answer was shown, fails the turn as before. The history the next
//! entry reads has no block only the first provider can read.

use panto::{
    Agent, Answers, Block, Config, ErrorKind, Event, FallbackModel, FnTool, Message, ProviderKind,
    Role, TurnControl, TurnOptions,
};
use panto_testkit::{config, quick_retries, turn, turn_with, API_KEY};
use panto_testserver::script::{self, exchange};
use panto_testserver::TestServer;
use serde_json::{json, Value};

/// The fallback entry's key: tests look for it where it must not appear.
const FALLBACK_KEY: &str = "sk-fallback-SECRET-key-0002";

/// A fallback entry of `kind` for `server`, model `model`, key [`FALLBACK_KEY`].
fn entry(kind: ProviderKind, server: &TestServer, model: &str) -> FallbackModel {
    let base = match kind {
        ProviderKind::OpenAi | ProviderKind::OpenAiResponses => format!("{}/v1", server.url()),
        _ => server.url(),
    };
    FallbackModel::new(kind, model)
        .with_base_url(base)
        .with_api_key(FALLBACK_KEY)
}

/// An agent of `kind` on `server` whose one fallback entry is `fallback` with `model`.
fn agent_with_fallback(
    kind: ProviderKind,
    server: &TestServer,
    fallback: ProviderKind,
    model: &str,
) -> Agent {
    Agent::new(config(kind, server).with_fallback(entry(fallback, server, model))).unwrap()
}

fn fallbacks(events: &[Event]) -> Vec<&Event> {
    events
        .iter()
        .filter(|e| matches!(e, Event::ProviderFallback { .. }))
        .collect()
}

fn http(status: u16, error_type: &str) -> Value {
    exchange(script::http_error(status, error_type, json!({})))
}

#[tokio::test]
async fn a_503_falls_back_to_the_next_provider_within_one_turn() {
    let server = TestServer::start(script::scenario(vec![
        // The agent's own model: 503, and 503 again on its one retry.
        http(503, "server_error"),
        http(503, "server_error"),
        // The fallback entry, another provider on its own path.
        exchange(script::anthropic_text(&["Hello from ", "the fallback"])),
    ]))
    .unwrap();
    let agent = Agent::new(
        config(ProviderKind::OpenAi, &server)
            .with_retry(quick_retries(1))
            .with_fallback(entry(ProviderKind::Anthropic, &server, "claude-fallback")),
    )
    .unwrap();
    let (events, r) = turn(&agent, "hi").await;
    let summary = r.expect("the fallback answers");
    assert_eq!(summary.text, "Hello from the fallback");
    assert_eq!(summary.model, "claude-fallback");

    // Its own retries first, then the fallback, then the answer.
    let kinds: Vec<&str> = events.iter().map(Event::type_name).collect();
    let retry = kinds.iter().position(|k| *k == "provider_retry").unwrap();
    let fell = kinds
        .iter()
        .position(|k| *k == "provider_fallback")
        .unwrap();
    let start = kinds.iter().position(|k| *k == "message_start").unwrap();
    assert!(retry < fell && fell < start, "{kinds:?}");
    let [Event::ProviderFallback {
        message,
        from_provider,
        from_model,
        to_provider,
        to_model,
        error_kind,
        error_message,
        status,
    }] = fallbacks(&events)[..]
    else {
        panic!("one provider_fallback: {kinds:?}")
    };
    assert_eq!(*message, 0);
    assert_eq!(
        (from_provider.as_str(), from_model.as_str()),
        ("openai", "scripted-model")
    );
    assert_eq!(
        (to_provider.as_str(), to_model.as_str()),
        ("anthropic", "claude-fallback")
    );
    assert_eq!((error_kind.as_str(), *status), ("server", Some(503)));
    assert!(error_message.contains("scripted 503"), "{error_message}");
    assert!(matches!(
        events.last(),
        Some(Event::MessageComplete { model, .. }) if model == "claude-fallback"
    ));

    // The step went to the entry's endpoint with its model and its key.
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    assert!(requests.iter().all(|r| r.matched));
    let last = &requests[2];
    assert_eq!(last.path, "/v1/messages");
    assert_eq!(last.body["model"], "claude-fallback");
    assert_eq!(
        last.headers.get("x-api-key").map(String::as_str),
        Some(FALLBACK_KEY)
    );
    // Neither key is shown in any event.
    let shown: String = events.iter().map(Event::to_json).collect();
    assert!(!shown.contains(FALLBACK_KEY) && !shown.contains(API_KEY));

    // The next turn starts on the agent's own model again.
    server.set_scenario(script::scenario(vec![exchange(script::openai_text(&[
        "back home",
    ]))]));
    let (events, r) = turn(&agent, "again").await;
    assert_eq!(r.unwrap().model, "scripted-model");
    assert!(fallbacks(&events).is_empty());
    assert_eq!(server.requests()[0].path, "/v1/chat/completions");
}

#[tokio::test]
async fn each_entry_is_tried_in_order_and_the_last_error_is_reported() {
    let server = TestServer::start(script::scenario(vec![
        http(429, "rate_limit_error"),
        http(500, "server_error"),
        http(503, "server_error"),
    ]))
    .unwrap();
    let agent = Agent::new(
        config(ProviderKind::OpenAi, &server)
            .with_fallback(entry(ProviderKind::OpenAi, &server, "second"))
            .with_fallback(entry(ProviderKind::OpenAi, &server, "third")),
    )
    .unwrap();
    let (events, r) = turn(&agent, "hi").await;
    let e = r.unwrap_err();
    assert_eq!((e.kind, e.status), (ErrorKind::Server, 503));
    let hops: Vec<(String, String, String)> = fallbacks(&events)
        .into_iter()
        .map(|e| match e {
            Event::ProviderFallback {
                from_model,
                to_model,
                error_kind,
                ..
            } => (from_model.clone(), to_model.clone(), error_kind.clone()),
            _ => unreachable!(),
        })
        .collect();
    assert_eq!(
        hops,
        [
            (
                "scripted-model".into(),
                "second".into(),
                "rate_limited".into()
            ),
            ("second".into(), "third".into(), "server".into()),
        ]
    );
    let models: Vec<Value> = server
        .requests()
        .iter()
        .map(|r| r.body["model"].clone())
        .collect();
    assert_eq!(
        models,
        [json!("scripted-model"), json!("second"), json!("third")]
    );
}

#[tokio::test]
async fn an_error_another_model_would_share_does_not_fall_back() {
    for (status, kind) in [
        (401, ErrorKind::Authentication),
        (400, ErrorKind::BadRequest),
        (404, ErrorKind::NotFound),
    ] {
        let server = TestServer::start(script::scenario(vec![
            http(status, "invalid_request_error"),
            exchange(script::openai_text(&["never asked"])),
        ]))
        .unwrap();
        let agent = agent_with_fallback(
            ProviderKind::OpenAi,
            &server,
            ProviderKind::OpenAi,
            "second",
        );
        let (events, r) = turn(&agent, "hi").await;
        assert_eq!(r.unwrap_err().kind, kind, "HTTP {status}");
        assert!(fallbacks(&events).is_empty(), "HTTP {status}");
        assert_eq!(server.requests().len(), 1, "HTTP {status}");
    }
}

#[tokio::test]
async fn a_failure_after_part_of_the_answer_was_shown_does_not_fall_back() {
    // The connection breaks after the first text delta was delivered.
    let sse = script::openai_text_events(&["Hello", " world"]);
    let after = script::sse_len(&sse[..2]).unwrap();
    let mut broken = script::openai_text(&["Hello", " world"]);
    broken["fault"] = json!({"kind": "reset", "after_bytes": after});
    let server = TestServer::start(script::scenario(vec![
        exchange(broken),
        exchange(script::openai_text(&["never asked"])),
    ]))
    .unwrap();
    let agent = agent_with_fallback(
        ProviderKind::OpenAi,
        &server,
        ProviderKind::OpenAi,
        "second",
    );
    let (events, r) = turn(&agent, "hi").await;
    assert_eq!(r.unwrap_err().kind, ErrorKind::Connection);
    assert!(events
        .iter()
        .any(|e| matches!(e, Event::ContentDelta { text, .. } if text == "Hello")));
    assert!(fallbacks(&events).is_empty());
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn an_overload_reported_inside_the_stream_before_any_block_falls_back() {
    // Anthropic opens the message, then says it is overloaded: nothing was shown.
    let start = script::anthropic_text_events(&["x"]).remove(0);
    let overloaded = json!({"event": "error", "data": {"type": "error",
        "error": {"type": "overloaded_error", "message": "Overloaded"}}});
    let server = TestServer::start(script::scenario(vec![
        exchange(json!({"sse": [start, overloaded]})),
        exchange(script::openai_text(&["from the fallback"])),
    ]))
    .unwrap();
    let agent = agent_with_fallback(
        ProviderKind::Anthropic,
        &server,
        ProviderKind::OpenAi,
        "gpt-fallback",
    );
    let (events, r) = turn(&agent, "hi").await;
    assert_eq!(r.unwrap().text, "from the fallback");
    assert!(matches!(
        fallbacks(&events)[..],
        [Event::ProviderFallback { error_kind, .. }] if error_kind == "provider"
    ));
}

/// An Anthropic assistant message with blocks only Anthropic reads back.
fn signed_history() -> Vec<Message> {
    vec![
        Message::user("first question"),
        Message {
            role: Role::Assistant,
            content: vec![
                Block::Reasoning {
                    text: "thinking it over".into(),
                    signature: Some("SIG-only-anthropic-reads".into()),
                },
                Block::RedactedReasoning {
                    data: "ENCRYPTED-only-anthropic-reads".into(),
                },
                Block::Opaque {
                    provider: "anthropic".into(),
                    block: json!({"type": "server_tool_use", "id": "OPAQUE-only-anthropic"}),
                },
                Block::text("first answer"),
            ],
        },
    ]
}

#[tokio::test]
async fn the_next_entry_reads_the_history_without_the_first_providers_blocks() {
    let server = TestServer::start(script::scenario(vec![
        http(529, "overloaded_error"),
        exchange(script::anthropic_text(&["second answer"])),
    ]))
    .unwrap();
    // The same provider (another endpoint and key): it would take the blocks, but they
    // were written for the first one.
    let agent = agent_with_fallback(
        ProviderKind::Anthropic,
        &server,
        ProviderKind::Anthropic,
        "claude-other",
    );
    agent.set_history(signed_history()).unwrap();
    let (_, r) = turn(&agent, "second question").await;
    assert_eq!(r.unwrap().text, "second answer");
    let requests = server.requests();
    let first = requests[0].body.to_string();
    let second = requests[1].body.to_string();
    for only_first in [
        "SIG-only-anthropic-reads",
        "ENCRYPTED-only-anthropic-reads",
        "OPAQUE-only-anthropic",
    ] {
        assert!(first.contains(only_first), "{only_first} sent to the first");
        assert!(
            !second.contains(only_first),
            "{only_first} sent to the fallback"
        );
    }
    assert!(second.contains("first answer") && second.contains("second question"));
    // The history itself keeps every block (the agent's own model reads them next turn).
    let history = agent.history();
    assert_eq!(history[1], signed_history()[1]);
}

#[test]
fn portable_drops_what_only_the_writer_reads() {
    let converted = panto::message::portable(&signed_history());
    assert_eq!(converted[0], signed_history()[0]);
    assert_eq!(
        converted[1].content,
        [
            Block::Reasoning {
                text: "thinking it over".into(),
                signature: None
            },
            Block::text("first answer"),
        ]
    );
    // A message of such blocks only keeps its place with an empty text.
    let only = vec![Message {
        role: Role::Assistant,
        content: vec![Block::RedactedReasoning { data: "x".into() }],
    }];
    assert_eq!(
        panto::message::portable(&only)[0].content,
        [Block::text("")]
    );
}

#[tokio::test]
async fn a_checkpoint_after_a_fallback_resumes_on_the_entry_that_answered() {
    let server = TestServer::start(script::scenario(vec![
        http(503, "server_error"),
        // The fallback entry asks for a tool; the turn defers it and pauses.
        exchange(script::openai_tool_calls(&[("c1", "probe", "{}")])),
        // The resumed turn's request: only the fallback's model is answered.
        json!({"match": {"body": {"/model": "fallback-model"}},
               "response": script::openai_text(&["done on the fallback"])}),
    ]))
    .unwrap();
    let make = || {
        let agent = agent_with_fallback(
            ProviderKind::OpenAi,
            &server,
            ProviderKind::OpenAi,
            "fallback-model",
        );
        agent
            .add_tool(FnTool::new(
                "probe",
                "A probe",
                json!({"type": "object"}),
                |_, _| async { panto::ToolOutput::ok("ran") },
            ))
            .unwrap();
        agent
    };
    let agent = make();
    let control = TurnControl::default();
    let options = TurnOptions {
        defer_tools: true,
        ..TurnOptions::default()
    };
    let (events, r) = turn_with(&agent, "go", &control, options).await;
    let paused = r.unwrap();
    assert_eq!(paused.deferred.len(), 1);
    assert_eq!(paused.model, "fallback-model");
    assert_eq!(fallbacks(&events).len(), 1);
    let checkpoint = control.checkpoint().unwrap();
    assert_eq!(checkpoint.fallback(), Some((1, "fallback-model")));
    let json = checkpoint.to_json();
    assert!(!json.contains(FALLBACK_KEY) && !json.contains(API_KEY));

    // A new agent, with the same list, resumes on the fallback entry.
    let resumed = make();
    let answers = Answers::new().result("c1", panto::ToolOutput::ok("42"));
    let mut events = panto::Collect::default();
    let summary = resumed
        .resume(
            panto::Checkpoint::from_json(&json).unwrap(),
            answers,
            &mut events,
            &TurnControl::default(),
        )
        .await
        .unwrap();
    assert_eq!(summary.text, "done on the fallback");
    assert_eq!(summary.model, "fallback-model");
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    assert!(requests[2].matched);
    assert_eq!(requests[2].body["model"], "fallback-model");

    // An agent without that entry refuses the checkpoint, naming it.
    let plain = Agent::new(config(ProviderKind::OpenAi, &server)).unwrap();
    let e = plain
        .check_resume(
            &panto::Checkpoint::from_json(&json).unwrap(),
            &Answers::new(),
        )
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Config);
    assert!(e.message.contains("fallback entry 1"), "{}", e.message);
}

#[test]
fn the_configuration_names_each_problem_of_an_entry() {
    let ok = Config::from_json(
        r#"{"provider":"openai","model":"m","fallback":[
            {"provider":"anthropic","model":"claude","api_key":"sk-entry-SECRET-1"},
            {"provider":"gemini","model":"g","base_url":"http://localhost:1","api_key_env":"MY_KEY"}]}"#,
    )
    .unwrap();
    assert_eq!(ok.fallback.len(), 2);
    assert_eq!(ok.fallback[0].provider, ProviderKind::Anthropic);
    assert_eq!(ok.fallback[1].api_key_env.as_deref(), Some("MY_KEY"));
    let shown = format!("{ok:?} {}", ok.to_value());
    assert!(!shown.contains("sk-entry-SECRET-1"), "{shown}");
    assert_eq!(ok.to_value()["fallback"][0]["api_key"], "[REDACTED]");

    let eight: Vec<Value> = (0..9)
        .map(|i| json!({"provider": "openai", "model": format!("m{i}")}))
        .collect();
    let cases = [
        (
            json!([{"provider": "mistral", "model": "x"}]),
            "fallback[0].provider",
        ),
        (
            json!([{"provider": "openai"}]),
            "fallback[0].model: required",
        ),
        (
            json!([{"provider": "openai", "model": "x"}, {"model": "y"}]),
            "fallback[1].provider: required",
        ),
        (json!(eight), "fallback: at most 8 entries"),
        (
            json!([{"provider": "openai", "model": "x", "colour": 1}]),
            "fallback[0].colour",
        ),
        (
            json!([{"provider": "openai", "model": "x", "base_url": "ftp://h"}]),
            "fallback[0].base_url",
        ),
        (json!({"provider": "openai"}), "fallback: must be an array"),
    ];
    for (fallback, want) in cases {
        let json = json!({"provider": "openai", "model": "m", "fallback": fallback}).to_string();
        let e = Config::from_json(&json).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Config, "{json}");
        assert!(e.message.starts_with(want), "{json}: {}", e.message);
    }
}
