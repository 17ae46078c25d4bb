//! An MCP server's own requests against the protocol's reference server,
//! `@modelcontextprotocol/server-everything` (installed by tests/mcp/everything.sh):
//! `sampling/createMessage` answered through the agent's provider (`panto-testserver`,
//! scripted) when the server's `sampling` is enabled — approved or denied by the host's
//! hook, capped at `sampling_max_tokens`, counted in the turn's usage — and
//! `elicitation/create` answered by the host's hook (accept with content, decline), or
//! declined without one. The server offers its sampling and elicitation tools only to a
//! client that declares the capability, so each test also shows the declaration. Without
//! node and npm the tests skip, except in CI.

use std::sync::{Arc, Mutex};

use panto::{
    Agent, Event, McpClientHooks, McpElicitationAnswer, McpElicitationRequest, McpSamplingRequest,
    McpServer, ProviderKind, TurnControl,
};
use panto_testkit::everything::{self, HttpEverything};
use panto_testserver::script::{self, exchange};
use panto_testserver::TestServer;
use serde_json::{json, Value};

fn model(responses: Vec<Value>) -> TestServer {
    TestServer::start(script::scenario(
        responses.into_iter().map(exchange).collect(),
    ))
    .expect("test server starts")
}

/// One turn of an agent with `server` as `ev`, the host's hooks set.
async fn turn(model: &TestServer, server: McpServer, hooks: McpClientHooks) -> Vec<Event> {
    let agent = Agent::new(
        panto_testkit::config(ProviderKind::OpenAi, model).with_mcp_server("ev", server),
    )
    .unwrap();
    agent.mcp_servers().unwrap().set_client_hooks(hooks);
    let (events, r) =
        panto_testkit::turn_with(&agent, "go", &TurnControl::default(), Default::default()).await;
    assert_eq!(r.unwrap().text, "done");
    events
}

fn result(events: &[Event], id: &str) -> (String, bool) {
    events
        .iter()
        .find_map(|e| match e {
            Event::ToolResult {
                call_id,
                output,
                is_error,
                ..
            } if call_id == id => Some((output.clone(), *is_error)),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no result for {id}"))
}

fn turn_usage(events: &[Event]) -> panto::Usage {
    events
        .iter()
        .find_map(|e| match e {
            Event::MessageComplete { usage, .. } => Some(*usage),
            _ => None,
        })
        .expect("message_complete")
}

/// The `mcp_sampling_request` events, as (summary, max_tokens, outcome), each before the
/// call's result.
fn sampling_events(events: &[Event]) -> Vec<(String, u64, String)> {
    let result_at = events
        .iter()
        .position(|e| matches!(e, Event::ToolResult { .. }))
        .unwrap();
    events
        .iter()
        .enumerate()
        .filter_map(|(i, e)| match e {
            Event::McpSamplingRequest {
                server,
                summary,
                max_tokens,
                outcome,
            } => {
                assert_eq!(server, "ev");
                assert!(i < result_at, "the event after the call's result");
                Some((summary.clone(), *max_tokens, outcome.clone()))
            }
            _ => None,
        })
        .collect()
}

fn sampling_call(max_tokens: u64) -> Value {
    script::openai_tool_calls(&[(
        "c1",
        "ev__trigger-sampling-request",
        &json!({"prompt": "name a colour", "maxTokens": max_tokens}).to_string(),
    )])
}

/// The host approves (its hook sees the server's request, capped); the scripted model's
/// answer goes back to the server, whose tool shows it; the sampling request was the
/// second model request, with the server's system prompt, messages and the capped
/// limit; its usage is in the turn's.
async fn approved(server: McpServer) {
    let model = model(vec![
        sampling_call(500),
        script::openai_text(&["teal"]),
        script::openai_text(&["done"]),
    ]);
    let seen: Arc<Mutex<Vec<McpSamplingRequest>>> = Arc::default();
    let hooks = McpClientHooks {
        approve_sampling: Some(Arc::new({
            let seen = seen.clone();
            move |r: &McpSamplingRequest| {
                seen.lock().unwrap().push(r.clone());
                true
            }
        })),
        elicit: None,
    };
    let events = turn(
        &model,
        server.with_sampling(true).with_sampling_max_tokens(64),
        hooks,
    )
    .await;
    let (out, is_error) = result(&events, "c1");
    assert!(!is_error, "{out}");
    assert!(out.starts_with("LLM sampling result:"), "{out}");
    let answer: Value = serde_json::from_str(out.trim_start_matches("LLM sampling result:").trim())
        .unwrap_or_else(|_| panic!("{out}"));
    assert_eq!(answer["role"], "assistant");
    assert_eq!(answer["content"], json!({"type": "text", "text": "teal"}));
    assert_eq!(answer["stopReason"], "endTurn");
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].server, "ev");
    assert_eq!(seen[0].max_tokens, 64, "the server's 500, capped");
    assert_eq!(
        seen[0].system_prompt.as_deref(),
        Some("You are a helpful test server.")
    );
    let summary = "Resource trigger-sampling-request context: name a colour";
    assert_eq!(seen[0].summary, summary);
    assert_eq!(
        sampling_events(&events),
        vec![(summary.to_owned(), 64, "answered".to_owned())]
    );
    let requests = model.requests();
    assert_eq!(requests.len(), 3);
    let sampled = &requests[1].body;
    assert_eq!(sampled["max_tokens"], 64, "{sampled}");
    assert!(sampled.get("tools").is_none(), "{sampled}");
    let messages = sampled["messages"].to_string();
    assert!(
        messages.contains("You are a helpful test server.") && messages.contains(summary),
        "{messages}"
    );
    // Two turn requests (20 + 10 input tokens) and the sampling request (10).
    let usage = turn_usage(&events);
    assert_eq!((usage.input_tokens, usage.output_tokens), (40, 7));
}

/// The host's hook refuses: the server gets an error (its tool fails), the model is
/// not asked, and the event says so.
async fn denied(server: McpServer) {
    let model = model(vec![sampling_call(50), script::openai_text(&["done"])]);
    let hooks = McpClientHooks {
        approve_sampling: Some(Arc::new(|_: &McpSamplingRequest| false)),
        elicit: None,
    };
    let events = turn(&model, server.with_sampling(true), hooks).await;
    let (out, is_error) = result(&events, "c1");
    assert!(is_error, "{out}");
    assert!(out.contains("declined"), "{out}");
    assert_eq!(model.requests().len(), 2, "the model was asked");
    let got = sampling_events(&events);
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].1, got[0].2.as_str()), (50, "denied"));
    let usage = turn_usage(&events);
    assert_eq!(usage.input_tokens, 30);
}

fn elicitation_events(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::McpElicitationRequest {
                server,
                message,
                outcome,
            } => {
                assert_eq!(server, "ev");
                assert_eq!(message, "Please provide inputs for the following fields:");
                Some(outcome.clone())
            }
            _ => None,
        })
        .collect()
}

async fn elicitation(
    server: McpServer,
    hook: Option<Arc<Mutex<Option<McpElicitationAnswer>>>>,
) -> (String, Vec<String>) {
    let model = model(vec![
        script::openai_tool_calls(&[("c1", "ev__trigger-elicitation-request", "{}")]),
        script::openai_text(&["done"]),
    ]);
    let hooks = McpClientHooks {
        approve_sampling: None,
        elicit: hook.map(|answer| {
            Arc::new(move |r: &McpElicitationRequest| {
                assert_eq!(r.requested_schema["required"], json!(["name"]));
                answer.lock().unwrap().take().expect("asked once")
            }) as panto::McpElicit
        }),
    };
    let events = turn(&model, server.with_elicitation(true), hooks).await;
    let (out, is_error) = result(&events, "c1");
    assert!(!is_error, "{out}");
    (out, elicitation_events(&events))
}

async fn elicitation_answers(server: impl Fn() -> McpServer) {
    let content = json!({"name": "Ada Lovelace", "check": true, "integer": 7,
                         "untitledSingleSelectEnum": "Joey"});
    let accept = McpElicitationAnswer::Accept(content.as_object().unwrap().clone());
    let (out, outcomes) = elicitation(server(), Some(Arc::new(Mutex::new(Some(accept))))).await;
    assert!(
        out.contains("User provided the requested information"),
        "{out}"
    );
    assert!(out.contains("- Name: Ada Lovelace"), "{out}");
    assert!(out.contains("- Agreed to terms: true"), "{out}");
    assert_eq!(outcomes, ["accept"]);
    let decline = Some(Arc::new(Mutex::new(Some(McpElicitationAnswer::Decline))));
    let (out, outcomes) = elicitation(server(), decline).await;
    assert!(out.contains("declined"), "{out}");
    assert_eq!(outcomes, ["decline"]);
    // No hook: declined.
    let (out, outcomes) = elicitation(server(), None).await;
    assert!(out.contains("declined"), "{out}");
    assert_eq!(outcomes, ["decline"]);
}

#[tokio::test]
async fn sampling_is_answered_by_the_agents_model_over_stdio() {
    let Some(entry) = everything::entry() else {
        return;
    };
    approved(McpServer::stdio("node", everything::stdio_args(&entry))).await;
}

#[tokio::test]
async fn sampling_is_answered_by_the_agents_model_over_streamable_http() {
    let Some(entry) = everything::entry() else {
        return;
    };
    let http = HttpEverything::start(&entry);
    approved(McpServer::http(http.url())).await;
}

#[tokio::test]
async fn sampling_denied_by_the_host_is_an_error_for_the_server() {
    let Some(entry) = everything::entry() else {
        return;
    };
    denied(McpServer::stdio("node", everything::stdio_args(&entry))).await;
}

#[tokio::test]
async fn elicitation_is_answered_by_the_hosts_hook_over_stdio() {
    let Some(entry) = everything::entry() else {
        return;
    };
    elicitation_answers(|| McpServer::stdio("node", everything::stdio_args(&entry))).await;
}

#[tokio::test]
async fn elicitation_is_answered_by_the_hosts_hook_over_streamable_http() {
    let Some(entry) = everything::entry() else {
        return;
    };
    let http = HttpEverything::start(&entry);
    elicitation_answers(|| McpServer::http(http.url())).await;
}
