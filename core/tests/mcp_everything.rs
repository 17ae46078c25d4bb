//! MCP against the protocol's reference server, `@modelcontextprotocol/server-everything`
//! (pinned in tests/mcp/everything/, installed from npm by tests/mcp/everything.sh), over
//! stdio and Streamable HTTP. The model is `panto-testserver`, scripted to call the
//! server's tools; the tests assert what the tools returned and what reached the model,
//! the progress of a long operation (which keeps a call alive past its timeout), the
//! private environment of a stdio server, and that the tools which need a client
//! capability panto does not declare by default (sampling, elicitation, roots) are not
//! offered. Without node and npm the tests skip, except in CI.

use panto::{Agent, Event, McpServer, ProviderKind, TurnControl};
use panto_testkit::everything::{self, HttpEverything};
use panto_testkit::{model, offered};
use panto_testserver::script;
use panto_testserver::TestServer;
use serde_json::Value;

fn stdio_server(entry: &str) -> McpServer {
    McpServer::stdio("node", everything::stdio_args(entry))
}

/// Runs one turn of an agent with `server` as `ev` (under the testkit's hang guard).
async fn turn(model: &TestServer, server: McpServer) -> (Agent, Vec<Event>, String) {
    let agent = Agent::new(
        panto_testkit::config(ProviderKind::OpenAi, model).with_mcp_server("ev", server),
    )
    .unwrap();
    let (events, r) =
        panto_testkit::turn_with(&agent, "go", &TurnControl::default(), Default::default()).await;
    let text = r.unwrap().text;
    (agent, events, text)
}

/// `(name, output, is_error)` of every tool result, by call id.
fn result(events: &[Event], id: &str) -> (String, String, bool) {
    events
        .iter()
        .find_map(|e| match e {
            Event::ToolResult {
                call_id,
                name,
                output,
                is_error,
                ..
            } if call_id == id => Some((name.clone(), output.clone(), *is_error)),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no result for {id}"))
}

/// One turn calling the server's plain tools, and what must hold of it, whatever the
/// transport.
async fn plain_tools(server: McpServer) {
    let model = model(vec![
        script::openai_tool_calls(&[
            ("c1", "ev__echo", r#"{"message":"hi there"}"#),
            ("c2", "ev__get-sum", r#"{"a":2,"b":40}"#),
            ("c3", "ev__get-tiny-image", "{}"),
            (
                "c4",
                "ev__get-structured-content",
                r#"{"location":"Chicago"}"#,
            ),
            ("c5", "ev__get-sum", r#"{"a":"not a number"}"#),
        ]),
        script::openai_text(&["done"]),
    ]);
    let (agent, events, text) = turn(&model, server).await;
    assert_eq!(text, "done");
    let offered = offered(&model, 0);
    for tool in [
        "ev__echo",
        "ev__get-sum",
        "ev__get-tiny-image",
        "ev__get-env",
        "ev__trigger-long-running-operation",
    ] {
        assert!(offered.contains(&tool.to_owned()), "{tool} in {offered:?}");
    }
    // The server registers these only for a client that declares sampling, elicitation
    // or roots: panto declares none of them unless the host enables it.
    for tool in [
        "ev__trigger-sampling-request",
        "ev__trigger-elicitation-request",
        "ev__get-roots-list",
    ] {
        assert!(!offered.contains(&tool.to_owned()), "{tool} in {offered:?}");
    }
    assert_eq!(
        result(&events, "c1"),
        ("ev__echo".into(), "Echo: hi there".into(), false)
    );
    assert_eq!(result(&events, "c2").1, "The sum of 2 and 40 is 42.");
    let (_, image_text, is_error) = result(&events, "c3");
    assert!(!is_error);
    assert!(
        image_text.contains("Here's the image you requested:")
            && image_text.contains("The image above is the MCP logo."),
        "{image_text}"
    );
    let image = agent
        .history()
        .iter()
        .flat_map(|m| m.content.clone())
        .find_map(|b| match b {
            panto::Block::ToolResult { call_id, parts, .. } if call_id == "c3" => Some(parts),
            _ => None,
        })
        .expect("the image call's result");
    assert!(
        image
            .iter()
            .any(|b| matches!(b, panto::Block::Image(m) if m.media_type() == Some("image/png"))),
        "{image:?}"
    );
    // The structured content mirrors the text: sent once.
    let (_, weather, _) = result(&events, "c4");
    let v: Value = serde_json::from_str(&weather).unwrap_or_else(|_| panic!("{weather}"));
    assert_eq!(v["temperature"], 36);
    assert_eq!(v["conditions"], "Light rain / drizzle");
    // Bad arguments are the server's error, told to the model as a failed call.
    let (_, bad, is_error) = result(&events, "c5");
    assert!(is_error, "{bad}");
    let body = model.requests()[1].body.to_string();
    assert!(body.contains("The sum of 2 and 40 is 42."), "{body}");
    assert!(body.contains("data:image/png;base64,"), "{body}");
}

/// A long operation of three steps of 1.5 s under a 3 s timeout: only its
/// progress notifications keep the call alive, and each becomes a tool_progress event
/// before the call's tool_result.
async fn long_operation(server: McpServer) {
    let model = model(vec![
        script::openai_tool_calls(&[(
            "c1",
            "ev__trigger-long-running-operation",
            r#"{"duration":4.5,"steps":3}"#,
        )]),
        script::openai_text(&["done"]),
    ]);
    let (_agent, events, text) = turn(&model, server.with_timeout_ms(3000)).await;
    assert_eq!(text, "done");
    let (_, out, is_error) = result(&events, "c1");
    assert!(!is_error, "{out}");
    assert!(
        out.starts_with("Long running operation completed. Duration: 4.5 seconds, Steps: 3."),
        "{out}"
    );
    let result_at = events
        .iter()
        .position(|e| matches!(e, Event::ToolResult { .. }))
        .unwrap();
    let progress: Vec<(usize, f64, Option<f64>)> = events
        .iter()
        .enumerate()
        .filter_map(|(i, e)| match e {
            Event::ToolProgress {
                call_id,
                progress,
                total,
                ..
            } => {
                assert_eq!(call_id, "c1");
                Some((i, *progress, *total))
            }
            _ => None,
        })
        .collect();
    assert!(!progress.is_empty(), "no tool_progress: {events:?}");
    for (i, p, total) in &progress {
        assert!(*i < result_at, "progress after the result");
        assert_eq!(*total, Some(3.0));
        assert!((1.0..=3.0).contains(p), "{p}");
    }
    assert!(progress.windows(2).all(|w| w[0].1 < w[1].1), "{progress:?}");
    assert_eq!(progress.last().map(|p| p.1), Some(3.0), "{progress:?}");
}

#[tokio::test]
async fn the_reference_servers_tools_over_stdio() {
    let Some(entry) = everything::entry() else {
        return;
    };
    plain_tools(stdio_server(&entry)).await;
}

#[tokio::test]
async fn the_reference_servers_tools_over_streamable_http() {
    let Some(entry) = everything::entry() else {
        return;
    };
    let http = HttpEverything::start(&entry);
    plain_tools(McpServer::http(http.url())).await;
}

#[tokio::test]
async fn a_long_operation_reports_progress_over_stdio() {
    let Some(entry) = everything::entry() else {
        return;
    };
    long_operation(stdio_server(&entry)).await;
}

#[tokio::test]
async fn a_long_operation_reports_progress_over_streamable_http() {
    let Some(entry) = everything::entry() else {
        return;
    };
    let http = HttpEverything::start(&entry);
    long_operation(McpServer::http(http.url())).await;
}

#[tokio::test]
async fn the_reference_servers_get_env_sees_only_the_private_environment() {
    let Some(entry) = everything::entry() else {
        return;
    };
    // A variable of this test's environment beyond the defaults a server gets.
    let (unlisted, _) = std::env::vars()
        .find(|(name, value)| {
            !panto::DEFAULT_INHERITED_ENV.contains(&name.as_str())
                && value.len() >= 4
                && value.chars().all(|c| c.is_ascii_graphic())
        })
        .expect("the test runs with some variable beyond HOME, PATH and the like");
    let model = model(vec![
        script::openai_tool_calls(&[("c1", "ev__get-env", "{}")]),
        script::openai_text(&["done"]),
    ]);
    let (_agent, events, _) =
        turn(&model, stdio_server(&entry).with_env("PANTO_SET", "set-1")).await;
    let (_, out, is_error) = result(&events, "c1");
    assert!(!is_error, "{out}");
    let env: Value = serde_json::from_str(&out).unwrap_or_else(|_| panic!("{out}"));
    assert_eq!(env["PANTO_SET"], "set-1", "{out}");
    assert_eq!(env["PATH"], std::env::var("PATH").unwrap().as_str());
    assert!(
        env.get(&unlisted).is_none(),
        "{unlisted} reached the server"
    );
}
