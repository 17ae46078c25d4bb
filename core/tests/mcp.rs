//! MCP servers as tools, against real servers: the fixture server written with the `mcp`
//! package (tests/mcp/fixture_server.py) and `mcp-server-time`, both from a pinned venv
//! (tests/mcp/venv.sh). The model is `panto-testserver`, scripted to call the servers'
//! tools; the tests assert what the tools returned, what panto sent the model, the
//! timeouts, cancellation, crashes, start failures and that no server process outlives
//! its agent.

use std::collections::BTreeMap;
use std::time::Duration;

use panto::{
    Agent, Config, ErrorKind, Event, Flow, McpServer, McpServers, ProviderKind, Receiver,
    TurnControl,
};
use panto_testkit::mcp::{
    fixture_server, group_members, pids_with, python, time_server, unique, HttpFixture,
};
use panto_testkit::{eventually_async, model, offered, turn_with};
use panto_testserver::script;
use panto_testserver::TestServer;
use serde_json::Value;

const HANG_GUARD: Duration = Duration::from_secs(90);

/// An agent on `server` with the fixture server, named `fx`, started with `extra`.
fn fx_agent(server: &TestServer, extra: &[&str]) -> Agent {
    Agent::new(config(server).with_mcp_server("fx", fixture_server(extra))).unwrap()
}

fn config(server: &TestServer) -> Config {
    panto_testkit::config(ProviderKind::OpenAi, server)
}

async fn run(agent: &Agent, control: &TurnControl) -> (Vec<Event>, panto::Result<String>) {
    let (events, r) = turn_with(agent, "go", control, Default::default()).await;
    (events, r.map(|s| s.text))
}

/// `(name, output, is_error)` of every tool result, in the order of the calls' starts.
fn results(events: &[Event]) -> Vec<(String, String, bool)> {
    let order: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            Event::ToolCallStart { call_id, .. } => Some(call_id.clone()),
            _ => None,
        })
        .collect();
    let mut out: Vec<(usize, (String, String, bool))> = events
        .iter()
        .filter_map(|e| match e {
            Event::ToolResult {
                call_id,
                name,
                output,
                is_error,
                ..
            } => Some((
                order
                    .iter()
                    .position(|c| c == call_id)
                    .unwrap_or(usize::MAX),
                (name.clone(), output.clone(), *is_error),
            )),
            _ => None,
        })
        .collect();
    out.sort_by_key(|(i, _)| *i);
    out.into_iter().map(|(_, r)| r).collect()
}

#[tokio::test]
async fn every_page_is_listed_and_names_fit_the_providers() {
    let mut servers = BTreeMap::new();
    servers.insert("fx".to_owned(), fixture_server(&[]));
    servers.insert(
        "only".to_owned(),
        fixture_server(&[])
            .with_tool_prefix("")
            .with_enabled_tools(["echo", "fail", "image"])
            .with_disabled_tools(["fail"]),
    );
    let set = McpServers::new(servers).unwrap();
    let listed = set.list(&Default::default()).await;
    let names = |i: usize| -> Vec<String> {
        listed[i]
            .1
            .as_ref()
            .unwrap()
            .iter()
            .map(|t| t.name.clone())
            .collect()
    };
    assert_eq!(listed[0].0, "fx");
    // Three pages, every tool, `.` sanitized.
    assert_eq!(
        names(0),
        [
            "fx__big",
            "fx__change",
            "fx__crash",
            "fx__dotted_name",
            "fx__echo",
            "fx__env",
            "fx__fail",
            "fx__hang",
            "fx__image",
            "fx__pingback",
            "fx__resource",
            "fx__slow",
            "fx__structured"
        ]
    );
    assert_eq!(names(1), ["echo", "image"]);
    let dotted = &listed[0].1.as_ref().unwrap()[3];
    assert_eq!(dotted.remote_name, "dotted.name");
}

#[tokio::test]
async fn a_turn_calls_mcp_tools_and_their_results_reach_the_model() {
    let server = model(vec![
        script::openai_tool_calls(&[
            ("c1", "fx__echo", r#"{"text":"hi"}"#),
            ("c2", "fx__image", "{}"),
            ("c3", "fx__structured", r#"{"city":"Oslo"}"#),
            ("c4", "fx__fail", "{}"),
            ("c5", "fx__resource", "{}"),
            ("c6", "fx__env", r#"{"name":"PANTO_FIXTURE_VAR"}"#),
            ("c7", "fx__dotted_name", "{}"),
            ("c9", "fx__pingback", "{}"),
            (
                "c8",
                "fx__echo",
                &format!(r#"{{"text":"{}"}}"#, "x".repeat(1000)),
            ),
        ]),
        script::openai_text(&["done"]),
    ]);
    let cwd = std::env::temp_dir().canonicalize().unwrap();
    let agent = Agent::new(
        config(&server)
            .with_max_tool_output_bytes(300)
            .with_mcp_server(
                "fx",
                fixture_server(&[])
                    .with_env("PANTO_FIXTURE_VAR", "value-1")
                    .with_cwd(cwd.to_string_lossy()),
            ),
    )
    .unwrap();
    let (events, r) = run(&agent, &TurnControl::default()).await;
    assert_eq!(r.unwrap(), "done");
    let got = results(&events);
    assert_eq!(got[0], ("fx__echo".into(), "echo: hi".into(), false));
    // The image is an image part of the result: the text is the result's text, the
    // history keeps the picture, and the model gets it (OpenAI: in a user message).
    assert_eq!(got[1].1, "a pixel:");
    let image_result = agent
        .history()
        .iter()
        .flat_map(|m| m.content.clone())
        .find_map(|b| match b {
            panto::Block::ToolResult { call_id, parts, .. } if call_id == "c2" => Some(parts),
            _ => None,
        })
        .expect("the image call's result");
    assert!(
        matches!(image_result.as_slice(), [panto::Block::Text { .. }, panto::Block::Image(m)]
            if m.media_type() == Some("image/png") && m.size() == 70),
        "{image_result:?}"
    );
    assert_eq!(got[2].1, r#"{"city":"Oslo","temperature":21}"#);
    assert_eq!(
        got[3],
        (
            "fx__fail".into(),
            "the fixture failed on purpose".into(),
            true
        )
    );
    assert_eq!(
        got[4].1,
        "[resource link: file:///tmp/report.txt name report]\n\
         [resource: file:///tmp/notes.txt type text/plain]\nthe notes"
    );
    assert_eq!(
        got[5].1,
        format!("PANTO_FIXTURE_VAR=value-1 cwd={}", cwd.display())
    );
    assert_eq!(got[6].1, "dotted");
    assert_eq!(got[7].1, "the client answered a ping");
    assert!(
        got[8].1.starts_with("echo: xxx") && got[8].1.contains("[panto: output truncated"),
        "{}",
        got[8].1
    );
    // The model was offered the server's tools with their schemas, and read the results.
    let reqs = server.requests();
    let tools = reqs[0].body["tools"].as_array().unwrap();
    let echo = tools
        .iter()
        .find(|t| t["function"]["name"] == "fx__echo")
        .unwrap();
    assert_eq!(echo["function"]["description"], "Echoes the text.");
    assert_eq!(
        echo["function"]["parameters"]["properties"]["text"]["type"],
        "string"
    );
    let body = reqs[1].body.to_string();
    assert!(body.contains("echo: hi") && body.contains("the fixture failed on purpose"));
    assert!(body.contains("data:image/png;base64,iVBORw0KGgo"), "{body}");
}

#[tokio::test]
async fn progress_keeps_a_call_alive_and_a_hung_server_costs_one_call() {
    let marker = unique("hang");
    let server = model(vec![
        script::openai_tool_calls(&[
            ("slow", "fx__slow", r#"{"steps":4,"interval_ms":700}"#),
            ("hang", "fx__hang", "{}"),
        ]),
        script::openai_text(&["went on"]),
    ]);
    let agent = Agent::new(config(&server).with_mcp_server(
        "fx",
        fixture_server(&["--cancel-marker", &marker]).with_timeout_ms(1500),
    ))
    .unwrap();
    let (events, r) = run(&agent, &TurnControl::default()).await;
    // 4 × 700 ms is longer than the 1500 ms timeout: progress re-armed it.
    assert_eq!(r.unwrap(), "went on");
    let got = results(&events);
    assert_eq!(
        got[0],
        ("fx__slow".into(), "done after 4 steps".into(), false)
    );
    assert!(got[1].2);
    assert_eq!(
        got[1].1,
        "MCP server \"fx\" did not answer the call of \"hang\" within 1500 ms"
    );
    // The hung call was withdrawn with notifications/cancelled.
    eventually_async("the server saw notifications/cancelled", || {
        std::path::Path::new(&marker).exists()
    })
    .await;
    let _ = std::fs::remove_file(&marker);
    let _ = std::fs::remove_file(format!("{marker}.started"));
}

/// Cancels the turn once the file `started` exists (the server has the call).
struct CancelWhenStarted {
    started: String,
    control: TurnControl,
    events: Vec<Event>,
}

impl Receiver for CancelWhenStarted {
    fn on_event(&mut self, event: Event) -> Flow {
        if let Event::ToolCallStart { .. } = &event {
            let started = self.started.clone();
            let control = self.control.clone();
            std::thread::spawn(move || {
                panto_testkit::eventually("the server got the call", || {
                    std::path::Path::new(&started).exists()
                });
                control.cancel.cancel();
            });
        }
        self.events.push(event);
        Flow::Continue
    }
}

#[tokio::test]
async fn a_cancelled_turn_withdraws_its_calls() {
    let marker = unique("cancel");
    let server = model(vec![script::openai_tool_calls(&[(
        "hang", "fx__hang", "{}",
    )])]);
    let agent = fx_agent(&server, &["--cancel-marker", &marker]);
    let control = TurnControl::default();
    let mut rx = CancelWhenStarted {
        started: format!("{marker}.started"),
        control: control.clone(),
        events: Vec::new(),
    };
    let r = tokio::time::timeout(
        HANG_GUARD,
        agent.run("go", &mut rx, &control, Default::default()),
    )
    .await
    .expect("the turn hung");
    assert_eq!(r.unwrap_err().kind, ErrorKind::Cancelled);
    eventually_async("the server saw notifications/cancelled", || {
        std::path::Path::new(&marker).exists()
    })
    .await;
    let _ = std::fs::remove_file(&marker);
    let _ = std::fs::remove_file(format!("{marker}.started"));
}

#[tokio::test]
async fn a_crash_is_reported_and_the_server_starts_again_for_the_next_step() {
    let server = model(vec![
        script::openai_tool_calls(&[("c", "fx__crash", "{}")]),
        script::openai_tool_calls(&[("e", "fx__echo", r#"{"text":"again"}"#)]),
        script::openai_text(&["ok"]),
    ]);
    let agent = fx_agent(&server, &[]);
    let (events, r) = run(&agent, &TurnControl::default()).await;
    assert_eq!(r.unwrap(), "ok");
    let got = results(&events);
    assert!(got[0].2);
    assert!(
        got[0]
            .1
            .contains("MCP server \"fx\" stopped: it exited (exit status 3)")
            && got[0].1.contains("fixture: crashing on request"),
        "{}",
        got[0].1
    );
    assert_eq!(got[1], ("fx__echo".into(), "echo: again".into(), false));
}

#[tokio::test]
async fn a_server_that_cannot_start_is_an_error_before_the_first_request() {
    let server = model(vec![script::openai_text(&["never"])]);
    let agent =
        Agent::new(config(&server).with_mcp_server("bad", fixture_server(&["--fail-start"])))
            .unwrap();
    let (_, r) = run(&agent, &TurnControl::default()).await;
    let e = r.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Connection);
    assert!(e.message.contains("MCP server \"bad\""), "{}", e.message);
    assert!(e.message.contains("exit status 2"), "{}", e.message);
    assert!(
        e.message
            .contains("fixture: refusing to start (--fail-start)"),
        "{}",
        e.message
    );
    assert!(
        e.message.contains("fixture_server.py --fail-start"),
        "{}",
        e.message
    );
    assert!(server.requests().is_empty(), "nothing may reach the model");
    // A command that does not exist is a config error naming it.
    let agent = Agent::new(config(&server).with_mcp_server(
        "missing",
        McpServer::stdio("/nonexistent/panto-mcp-server", ["x"]),
    ))
    .unwrap();
    let e = run(&agent, &TurnControl::default()).await.1.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Config);
    assert!(
        e.message
            .starts_with("mcp_servers.missing: cannot start `/nonexistent/panto-mcp-server x`"),
        "{}",
        e.message
    );
    assert!(server.requests().is_empty());
}

#[tokio::test]
async fn list_changed_lists_the_tools_again_between_steps() {
    let server = model(vec![
        script::openai_tool_calls(&[("c", "fx__change", "{}")]),
        script::openai_tool_calls(&[("a", "fx__added", "{}")]),
        script::openai_text(&["ok"]),
    ]);
    let agent = fx_agent(&server, &[]);
    let (events, r) = run(&agent, &TurnControl::default()).await;
    assert_eq!(r.unwrap(), "ok");
    assert!(!offered(&server, 0).contains(&"fx__added".to_owned()));
    assert!(offered(&server, 1).contains(&"fx__added".to_owned()));
    assert_eq!(
        results(&events)[1],
        ("fx__added".into(), "added tool called".into(), false)
    );
}

#[tokio::test]
async fn no_server_process_outlives_its_agent() {
    let marker = unique("reap");
    let server = model(vec![
        script::openai_text(&["one"]),
        script::openai_text(&["two"]),
    ]);
    let agent = fx_agent(&server, &["--spawn-child", "--cancel-marker", &marker]);
    assert!(pids_with(&marker).is_empty(), "servers start lazily");
    assert_eq!(run(&agent, &TurnControl::default()).await.1.unwrap(), "one");
    let pids = pids_with(&marker);
    assert_eq!(pids.len(), 1, "one server, shared by the agent's turns");
    let pgid = pids[0];
    // The server and the `sleep` it started, in the server's own process group.
    eventually_async("the server's child started", || group_members(pgid) == 2).await;
    assert_eq!(run(&agent, &TurnControl::default()).await.1.unwrap(), "two");
    assert_eq!(
        pids_with(&marker),
        pids,
        "the second turn reused the server"
    );
    drop(agent);
    eventually_async("every process of the server's group is gone", || {
        group_members(pgid) == 0
    })
    .await;
}

#[tokio::test]
async fn a_server_that_ignores_eof_and_sigterm_is_killed() {
    let marker = unique("linger");
    let server = model(vec![script::openai_text(&["one"])]);
    let agent = fx_agent(&server, &["--linger", "--cancel-marker", &marker]);
    assert_eq!(run(&agent, &TurnControl::default()).await.1.unwrap(), "one");
    let pids = pids_with(&marker);
    assert_eq!(pids.len(), 1);
    drop(agent);
    // Stdin closed, SIGTERM ignored: SIGKILL after the two grace periods.
    eventually_async("the lingering server was killed", || {
        group_members(pids[0]) == 0
    })
    .await;
    assert!(panto::mcp::wait_stopped(Duration::from_secs(30)));
}

#[tokio::test]
async fn collisions_are_config_errors() {
    let server = model(vec![script::openai_text(&["never"])]);
    let agent = Agent::new(
        config(&server)
            .with_mcp_server("a", fixture_server(&[]).with_tool_prefix("x_"))
            .with_mcp_server("b", fixture_server(&[]).with_tool_prefix("x_")),
    )
    .unwrap();
    let e = run(&agent, &TurnControl::default()).await.1.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Config);
    assert!(
        e.message.starts_with(
            "mcp_servers.b: the tool name \"x_big\" is also a tool of the MCP server \"a\""
        ),
        "{}",
        e.message
    );
    let agent = Agent::new(
        config(&server)
            .with_host_tool(panto::ToolSpec {
                name: "fx__echo".into(),
                description: String::new(),
                parameters: serde_json::json!({"type": "object"}),
                needs_approval: false,
                external: false,
            })
            .with_mcp_server("fx", fixture_server(&[])),
    )
    .unwrap();
    let e = run(&agent, &TurnControl::default()).await.1.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Config);
    assert!(e.message.contains("\"fx__echo\""), "{}", e.message);
    assert!(server.requests().is_empty());
}

#[tokio::test]
async fn credentials_in_a_server_environment_are_redacted() {
    let secret = "ghp_panto_secret_token_0123456789";
    let server = model(vec![
        script::openai_tool_calls(&[("c", "fx__env", r#"{"name":"GITHUB_TOKEN"}"#)]),
        script::openai_text(&["ok"]),
    ]);
    let agent = Agent::new(
        config(&server).with_mcp_server("fx", fixture_server(&[]).with_env("GITHUB_TOKEN", secret)),
    )
    .unwrap();
    let (events, r) = run(&agent, &TurnControl::default()).await;
    assert_eq!(r.unwrap(), "ok");
    let out = &results(&events)[0].1;
    assert!(out.starts_with("GITHUB_TOKEN=[REDACTED]"), "{out}");
    for e in &events {
        assert!(!e.to_json().contains(secret));
    }
    assert!(!format!("{:?}", agent.config()).contains(secret));
    assert!(!agent.config().to_value().to_string().contains(secret));
}

/// A variable of this test's own environment that is not one of the defaults a server
/// gets: the test proves it is set here before asserting the server cannot read it.
fn an_unlisted_variable() -> (String, String) {
    std::env::vars()
        .find(|(name, value)| {
            !panto::DEFAULT_INHERITED_ENV.contains(&name.as_str())
                && !value.is_empty()
                && value.chars().all(|c| c.is_ascii_graphic())
        })
        .expect("the test runs with some variable beyond HOME, PATH and the like")
}

/// Runs a turn of `agent` whose model calls the fixture's `env` tool, and returns what
/// each call printed (`NAME=value cwd=…`), in call order.
async fn env_outputs(agent: &Agent) -> Vec<String> {
    let (events, r) = run(agent, &TurnControl::default()).await;
    assert_eq!(r.unwrap(), "done");
    results(&events)
        .into_iter()
        .map(|(_, out, _)| out)
        .collect()
}

#[tokio::test]
async fn a_stdio_server_gets_a_private_environment() {
    let (unlisted, value) = an_unlisted_variable();
    let server = model(vec![
        script::openai_tool_calls(&[
            ("c1", "fx__env", &format!(r#"{{"name":"{unlisted}"}}"#)),
            ("c2", "fx__env", r#"{"name":"PATH"}"#),
            ("c3", "fx__env", r#"{"name":"PANTO_SET"}"#),
        ]),
        script::openai_text(&["done"]),
        script::openai_tool_calls(&[("c4", "fx__env", &format!(r#"{{"name":"{unlisted}"}}"#))]),
        script::openai_text(&["done"]),
    ]);
    let agent = Agent::new(
        config(&server).with_mcp_server("fx", fixture_server(&[]).with_env("PANTO_SET", "set-1")),
    )
    .unwrap();
    let got = env_outputs(&agent).await;
    assert!(
        got[0].starts_with(&format!("{unlisted}=None ")),
        "{unlisted} reached the server: {}",
        got[0]
    );
    let path = std::env::var("PATH").unwrap();
    assert!(got[1].starts_with(&format!("PATH={path} ")), "{}", got[1]);
    assert!(got[2].starts_with("PANTO_SET=set-1 "), "{}", got[2]);
    drop(agent);

    // Named in inherit_env, the same variable reaches the server.
    let agent = Agent::new(config(&server).with_mcp_server(
        "fx",
        fixture_server(&[]).with_inherited_env(unlisted.clone()),
    ))
    .unwrap();
    let got = env_outputs(&agent).await;
    assert!(
        got[0].starts_with(&format!("{unlisted}={value} ")),
        "{}",
        got[0]
    );
}

#[tokio::test]
async fn mcp_server_time_over_stdio() {
    let server = model(vec![
        script::openai_tool_calls(&[("c", "time__get_current_time", r#"{"timezone":"UTC"}"#)]),
        script::openai_text(&["it is now"]),
    ]);
    let agent = Agent::new(config(&server).with_mcp_server(
        "time",
        McpServer::stdio(time_server(), ["--local-timezone", "UTC"]),
    ))
    .unwrap();
    let (events, r) = run(&agent, &TurnControl::default()).await;
    assert_eq!(r.unwrap(), "it is now");
    let offered = offered(&server, 0);
    assert!(offered.contains(&"time__get_current_time".to_owned()));
    assert!(offered.contains(&"time__convert_time".to_owned()));
    let (name, out, is_error) = &results(&events)[0];
    assert_eq!(name, "time__get_current_time");
    assert!(!is_error, "{out}");
    let v: Value = serde_json::from_str(out).unwrap_or_else(|_| panic!("not JSON: {out}"));
    assert_eq!(v["timezone"], "UTC");
    assert!(v["datetime"].as_str().unwrap_or("").contains('T'), "{out}");
}

#[tokio::test]
async fn streamable_http_keeps_the_session_and_routes_progress() {
    let fx = HttpFixture::start(&[]);
    let server = model(vec![
        script::openai_tool_calls(&[
            ("e", "web__echo", r#"{"text":"over http"}"#),
            ("s", "web__slow", r#"{"steps":3,"interval_ms":700}"#),
            ("i", "web__image", "{}"),
            ("f", "web__fail", "{}"),
            ("p", "web__pingback", "{}"),
        ]),
        script::openai_text(&["done"]),
    ]);
    let agent = Agent::new(
        config(&server).with_mcp_server("web", McpServer::http(fx.url()).with_timeout_ms(1500)),
    )
    .unwrap();
    let (events, r) = run(&agent, &TurnControl::default()).await;
    assert_eq!(r.unwrap(), "done");
    let got = results(&events);
    assert_eq!(
        got[0],
        ("web__echo".into(), "echo: over http".into(), false)
    );
    // 3 × 700 ms past a 1500 ms timeout: the progress events on the call's SSE stream
    // re-armed it.
    assert_eq!(
        got[1],
        ("web__slow".into(), "done after 3 steps".into(), false)
    );
    assert_eq!(got[2].1, "a pixel:");
    assert_eq!(
        got[3],
        (
            "web__fail".into(),
            "the fixture failed on purpose".into(),
            true
        )
    );
    // The server pinged panto while the call ran; panto answered.
    assert_eq!(got[4].1, "the client answered a ping");
    let log = fx.log();
    assert!(log.len() >= 4, "{log:?}");
    let session = log[1]["session"].as_str().expect("a session id").to_owned();
    // The stream for messages outside requests (the server's ping came there).
    assert!(
        log.iter().any(|r| r["method"] == "GET"
            && r["accept"] == "text/event-stream"
            && r["session"] == session.as_str()),
        "{log:?}"
    );
    let posts: Vec<&Value> = log.iter().filter(|r| r["method"] == "POST").collect();
    for (i, req) in posts.into_iter().enumerate() {
        assert_eq!(req["accept"], "application/json, text/event-stream");
        if i == 0 {
            // initialize: no session yet, no version negotiated yet.
            assert!(
                req["session"].is_null() && req["version"].is_null(),
                "{req}"
            );
        } else {
            assert_eq!(req["session"], session.as_str(), "{req}");
            assert_eq!(req["version"], "2025-11-25", "{req}");
        }
    }
    drop(agent);
    eventually_async("the session was deleted", || {
        // A blocking read is fine here: the DELETE runs on this runtime, so poll it
        // from another thread.
        let base = fx.base.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let text = reqwest::get(format!("{base}/_log"))
                    .await
                    .unwrap()
                    .text()
                    .await
                    .unwrap();
                serde_json::from_str::<Vec<Value>>(&text).unwrap()
            })
        })
        .join()
        .unwrap()
        .iter()
        .any(|r| r["method"] == "DELETE" && r["session"] == session.as_str())
    })
    .await;
}

#[tokio::test]
async fn an_expired_http_session_is_initialized_again() {
    let fx = HttpFixture::start(&[]);
    let server = model(vec![
        script::openai_tool_calls(&[("a", "web__echo", r#"{"text":"one"}"#)]),
        script::openai_text(&["first"]),
        script::openai_tool_calls(&[("b", "web__echo", r#"{"text":"two"}"#)]),
        script::openai_text(&["second"]),
    ]);
    let agent =
        Agent::new(config(&server).with_mcp_server("web", McpServer::http(fx.url()))).unwrap();
    let (events, r) = run(&agent, &TurnControl::default()).await;
    assert_eq!(r.unwrap(), "first");
    assert_eq!(results(&events)[0].1, "echo: one");
    let first = fx.log()[1]["session"].clone();
    assert!(!first.is_null());
    reqwest::Client::new()
        .post(format!("{}/_expire", fx.base))
        .send()
        .await
        .unwrap();
    let (events, r) = run(&agent, &TurnControl::default()).await;
    assert_eq!(r.unwrap(), "second");
    assert_eq!(
        results(&events)[0],
        ("web__echo".into(), "echo: two".into(), false)
    );
    let log = fx.log();
    let initializes = log
        .iter()
        .filter(|r| r["method"] == "POST" && r["session"].is_null())
        .count();
    assert_eq!(initializes, 2, "a new session after the 404: {log:?}");
    let last = &log[log.len() - 1];
    assert!(
        !last["session"].is_null() && last["session"] != first,
        "{log:?}"
    );
}

#[tokio::test]
async fn http_headers_are_secrets_and_json_answers_work() {
    let token = "tok-http-secret-0123456789";
    let fx = HttpFixture::start(&[
        "--json-response",
        "--require-header",
        &format!("Authorization=Bearer {token}"),
    ]);
    let server = model(vec![
        script::openai_tool_calls(&[("e", "web__echo", &format!(r#"{{"text":"{token}"}}"#))]),
        script::openai_text(&["done"]),
    ]);
    // A wrong credential: the server's 401 is an authentication error naming the server,
    // without the credential.
    let wrong = "tok-wrong-credential-987654";
    let agent = Agent::new(config(&server).with_mcp_server(
        "web",
        McpServer::http(fx.url()).with_header("Authorization", format!("Bearer {wrong}")),
    ))
    .unwrap();
    let e = run(&agent, &TurnControl::default()).await.1.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Authentication, "{e:?}");
    assert!(
        e.message.contains("MCP server \"web\" answered HTTP 401"),
        "{}",
        e.message
    );
    assert!(!format!("{e:?}").contains(wrong));
    assert!(server.requests().is_empty());
    // The right one; the tool echoes it back, and no event shows it.
    let agent = Agent::new(config(&server).with_mcp_server(
        "web",
        McpServer::http(fx.url()).with_header("Authorization", format!("Bearer {token}")),
    ))
    .unwrap();
    let (events, r) = run(&agent, &TurnControl::default()).await;
    assert_eq!(r.unwrap(), "done");
    assert_eq!(results(&events)[0].1, "echo: [REDACTED]");
    for e in &events {
        assert!(!e.to_json().contains(token), "{}", e.to_json());
    }
    assert!(!format!("{:?}", agent.config()).contains(token));
}

#[tokio::test]
async fn a_message_past_the_cap_ends_the_connection_not_memory() {
    let server = model(vec![
        script::openai_tool_calls(&[("c", "fx__big", r#"{"size":5000}"#)]),
        script::openai_text(&["ok"]),
    ]);
    let mut cfg = config(&server).with_mcp_server("fx", fixture_server(&[]));
    cfg.max_event_bytes = 2048;
    let agent = Agent::new(cfg).unwrap();
    let (events, r) = run(&agent, &TurnControl::default()).await;
    assert_eq!(r.unwrap(), "ok");
    let (_, out, is_error) = &results(&events)[0];
    assert!(*is_error);
    assert!(
        out.contains("MCP server \"fx\" stopped: it sent a message larger than 2048 bytes"),
        "{out}"
    );
}

// ---- Hand-written servers, for what the `mcp` package never sends ----

/// The hand-written stdio server (tests/mcp/raw_stdio_server.py) with `flags`.
fn raw_stdio(flags: &[&str]) -> McpServer {
    let script = panto_testkit::mcp::root()
        .join("tests/mcp/raw_stdio_server.py")
        .to_string_lossy()
        .into_owned();
    let mut args = vec![script];
    args.extend(flags.iter().map(|s| s.to_string()));
    McpServer::stdio(python(), args)
}

/// One request to [`RawHttp`]: its method, headers (names in lower case) and body.
#[derive(Debug, Clone)]
struct RawRequest {
    method: String,
    headers: BTreeMap<String, String>,
    body: Value,
}

/// A hand-written Streamable HTTP server on 127.0.0.1, port 0: `answer` gives each
/// request's whole HTTP response (status line, headers, body), which ends with the
/// connection (`Connection: close`). It logs every request.
struct RawHttp {
    url: String,
    log: std::sync::Arc<std::sync::Mutex<Vec<RawRequest>>>,
    task: tokio::task::JoinHandle<()>,
}

impl RawHttp {
    async fn start(answer: impl Fn(&RawRequest) -> Vec<u8> + Send + Sync + 'static) -> RawHttp {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/mcp", listener.local_addr().unwrap());
        let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let answer = std::sync::Arc::new(answer);
        let log2 = log.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                let answer = answer.clone();
                let log = log2.clone();
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    let head_end = loop {
                        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            break i + 4;
                        }
                        match sock.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    };
                    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
                    let mut lines = head.lines();
                    let method = lines
                        .next()
                        .unwrap_or("")
                        .split(' ')
                        .next()
                        .unwrap_or("")
                        .to_owned();
                    let headers: BTreeMap<String, String> = lines
                        .filter_map(|l| l.split_once(':'))
                        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
                        .collect();
                    let len: usize = headers
                        .get("content-length")
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(0);
                    while buf.len() < head_end + len {
                        match sock.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    let body = serde_json::from_slice(&buf[head_end..head_end + len])
                        .unwrap_or(Value::Null);
                    let req = RawRequest {
                        method,
                        headers,
                        body,
                    };
                    log.lock().unwrap().push(req.clone());
                    let _ = sock.write_all(&answer(&req)).await;
                    let _ = sock.shutdown().await;
                });
            }
        });
        RawHttp { url, log, task }
    }

    fn log(&self) -> Vec<RawRequest> {
        self.log.lock().unwrap().clone()
    }
}

impl Drop for RawHttp {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// An HTTP response: `status`, extra `headers` lines, `body`.
fn http_answer(status: &str, headers: &[&str], body: &[u8]) -> Vec<u8> {
    let mut out = format!("HTTP/1.1 {status}\r\nConnection: close\r\n").into_bytes();
    for h in headers {
        out.extend_from_slice(h.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes());
    out.extend_from_slice(body);
    out
}

/// An SSE answer whose body is `events` and ends with the connection.
fn sse_answer(events: &[u8]) -> Vec<u8> {
    let mut out =
        b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Type: text/event-stream\r\n\r\n".to_vec();
    out.extend_from_slice(events);
    out
}

/// What every hand-written HTTP server answers the same way: `initialize` (session
/// "s1"), notifications (202), `tools/list` (one tool, `say`), the GET stream (405)
/// and DELETE (200); `None` for the rest (a `tools/call`, a resuming GET).
fn common_answer(req: &RawRequest) -> Option<Vec<u8>> {
    let json = "Content-Type: application/json";
    match (req.method.as_str(), req.body["method"].as_str()) {
        ("POST", Some("initialize")) => Some(http_answer(
            "200 OK",
            &[json, "Mcp-Session-Id: s1"],
            serde_json::json!({"jsonrpc": "2.0", "id": req.body["id"], "result": {
                "protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                "serverInfo": {"name": "raw", "version": "1"}}})
            .to_string()
            .as_bytes(),
        )),
        ("POST", Some("tools/list")) => Some(http_answer(
            "200 OK",
            &[json],
            serde_json::json!({"jsonrpc": "2.0", "id": req.body["id"], "result": {"tools": [
                {"name": "say", "inputSchema": {"type": "object"}}]}})
            .to_string()
            .as_bytes(),
        )),
        ("POST", _) if req.body.get("id").is_none() => Some(http_answer("202 Accepted", &[], b"")),
        ("GET", _) if !req.headers.contains_key("last-event-id") => {
            Some(http_answer("405 Method Not Allowed", &[], b""))
        }
        ("DELETE", _) => Some(http_answer("200 OK", &[], b"")),
        _ => None,
    }
}

/// A turn in which the model calls `name` once (then says "done"), against the MCP
/// server `server` named `raw`: the tool result `(output, is_error)`.
async fn one_call(name: &str, server: McpServer) -> (String, bool) {
    let model = model(vec![
        script::openai_tool_calls(&[("c", name, r#"{"text":"hi"}"#)]),
        script::openai_text(&["done"]),
    ]);
    let agent = Agent::new(config(&model).with_mcp_server("raw", server)).unwrap();
    let (events, r) = run(&agent, &TurnControl::default()).await;
    assert_eq!(r.unwrap(), "done");
    let (_, out, is_error) = results(&events).remove(0);
    (out, is_error)
}

// ---- Finding 2: a broken character never drops an answer ----

#[tokio::test]
async fn a_lone_surrogate_or_invalid_utf8_in_a_stdio_answer_is_repaired() {
    // Before: the line was not JSON to serde and was skipped; the call waited its
    // whole timeout.
    let slow = 30_000;
    let (out, is_error) = one_call(
        "raw__say",
        raw_stdio(&["--surrogate-call"]).with_timeout_ms(slow),
    )
    .await;
    assert_eq!((out.as_str(), is_error), ("said: hi \u{FFFD}!", false));
    let (out, is_error) = one_call(
        "raw__say",
        raw_stdio(&["--invalid-utf8-call"]).with_timeout_ms(slow),
    )
    .await;
    assert_eq!((out.as_str(), is_error), ("said: hi \u{FFFD}!", false));
}

#[tokio::test]
async fn a_lone_surrogate_in_tools_list_is_repaired() {
    let mut servers = BTreeMap::new();
    servers.insert(
        "raw".to_owned(),
        raw_stdio(&["--surrogate-list"]).with_timeout_ms(30_000),
    );
    let set = McpServers::new(servers).unwrap();
    let listed = set.list(&Default::default()).await;
    let tools = listed[0].1.as_ref().expect("the tools are listed");
    assert_eq!(tools[0].name, "raw__say");
    assert_eq!(tools[0].description, "Says it \u{FFFD} back.");
}

#[tokio::test]
async fn a_lone_surrogate_or_invalid_utf8_in_an_http_answer_is_repaired() {
    for (body, sse) in [
        (&br#"{"jsonrpc":"2.0","id":ID,"result":{"content":[{"type":"text","text":"said \ud800!"}]}}"#[..], false),
        (&b"{\"jsonrpc\":\"2.0\",\"id\":ID,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"said \xff!\"}]}}"[..], false),
        (&br#"{"jsonrpc":"2.0","id":ID,"result":{"content":[{"type":"text","text":"said \ud800!"}]}}"#[..], true),
    ] {
        let body = body.to_vec();
        let http = RawHttp::start(move |req| {
            common_answer(req).unwrap_or_else(|| {
                let id = req.body["id"].to_string();
                let text = String::from_utf8_lossy(&body).into_owned();
                let mut answer = body.clone();
                // Put the request's id in place of ID, keeping the broken bytes.
                let at = text.find("ID").unwrap();
                answer.splice(at..at + 2, id.bytes());
                if sse {
                    let mut ev = b"data: ".to_vec();
                    ev.extend_from_slice(&answer);
                    ev.extend_from_slice(b"\n\n");
                    sse_answer(&ev)
                } else {
                    http_answer("200 OK", &["Content-Type: application/json"], &answer)
                }
            })
        })
        .await;
        let (out, is_error) = one_call("raw__say", McpServer::http(&http.url)).await;
        assert_eq!((out.as_str(), is_error), ("said \u{FFFD}!", false), "sse: {sse}");
    }
}

// ---- Finding 3: a request that cannot be answered fails at once ----

#[tokio::test]
async fn a_stdio_server_that_closed_its_input_fails_the_call_at_once() {
    let started = std::time::Instant::now();
    let (out, is_error) = one_call(
        "raw__say",
        raw_stdio(&["--close-stdin"]).with_timeout_ms(60_000),
    )
    .await;
    assert!(is_error);
    assert!(out.contains("closed its input"), "{out}");
    assert!(!out.contains("did not answer"), "{out}");
    // A hang guard well under the call's 60 s timeout, not a speed assertion.
    assert!(started.elapsed() < Duration::from_secs(50), "{out}");
}

#[tokio::test]
async fn an_http_server_answering_202_to_a_call_fails_it_at_once() {
    let http = RawHttp::start(|req| {
        common_answer(req).unwrap_or_else(|| http_answer("202 Accepted", &[], b""))
    })
    .await;
    let started = std::time::Instant::now();
    let (out, is_error) = one_call(
        "raw__say",
        McpServer::http(&http.url).with_timeout_ms(60_000),
    )
    .await;
    assert!(is_error);
    assert!(out.contains("HTTP 202"), "{out}");
    assert!(!out.contains("did not answer"), "{out}");
    assert!(started.elapsed() < Duration::from_secs(50), "{out}");
}

// ---- Finding 4: a redirect is a config error ----

#[tokio::test]
async fn an_http_servers_redirect_is_a_config_error() {
    let http = RawHttp::start(|_| {
        http_answer(
            "307 Temporary Redirect",
            &["Location: http://elsewhere.example/mcp"],
            b"",
        )
    })
    .await;
    let model = model(vec![script::openai_text(&["never"])]);
    let agent =
        Agent::new(config(&model).with_mcp_server("web", McpServer::http(&http.url))).unwrap();
    let e = run(&agent, &TurnControl::default()).await.1.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Config, "{e:?}");
    assert_eq!(e.status, 307, "{e:?}");
    assert!(
        e.message.contains("http://elsewhere.example/mcp"),
        "{}",
        e.message
    );
    assert!(model.requests().is_empty());
}

// ---- Finding 8: an SSE answer cut after a retry and an id is resumed ----

#[tokio::test]
async fn an_sse_answer_cut_mid_call_is_resumed_with_last_event_id() {
    let call_id = std::sync::Arc::new(std::sync::Mutex::new(Value::Null));
    let http = RawHttp::start(move |req| {
        common_answer(req).unwrap_or_else(|| match req.method.as_str() {
            // The call: a priming event (id, retry), then the stream ends.
            "POST" => {
                *call_id.lock().unwrap() = req.body["id"].clone();
                sse_answer(b"id: ev-1\nretry: 50\ndata: \n\n")
            }
            // The resumption, after the id: the result.
            _ if req.headers.get("last-event-id").map(String::as_str) == Some("ev-1") => {
                let id = call_id.lock().unwrap().clone();
                let result = serde_json::json!({"jsonrpc": "2.0", "id": id, "result": {
                    "content": [{"type": "text", "text": "resumed"}]}});
                sse_answer(format!("id: ev-2\ndata: {result}\n\n").as_bytes())
            }
            _ => http_answer("400 Bad Request", &[], b""),
        })
    })
    .await;
    let (out, is_error) = one_call("raw__say", McpServer::http(&http.url)).await;
    assert_eq!((out.as_str(), is_error), ("resumed", false));
    let resumed: Vec<RawRequest> = http
        .log()
        .into_iter()
        .filter(|r| r.method == "GET" && r.headers.contains_key("last-event-id"))
        .collect();
    assert_eq!(resumed.len(), 1, "{resumed:?}");
    assert_eq!(resumed[0].headers["mcp-session-id"], "s1");
    assert_eq!(resumed[0].headers["accept"], "text/event-stream");
}

#[tokio::test]
async fn sse_resumption_is_bounded() {
    // Every resumption ends at once without an event: panto gives up after the bound
    // instead of reconnecting forever.
    let http = RawHttp::start(|req| {
        common_answer(req).unwrap_or_else(|| match req.method.as_str() {
            "POST" => sse_answer(b"id: ev-1\nretry: 10\ndata: \n\n"),
            _ => sse_answer(b""),
        })
    })
    .await;
    let (out, is_error) = one_call("raw__say", McpServer::http(&http.url)).await;
    assert!(is_error, "{out}");
    assert!(out.contains("without a result"), "{out}");
    let resumed = http
        .log()
        .into_iter()
        .filter(|r| r.method == "GET" && r.headers.contains_key("last-event-id"))
        .count();
    assert_eq!(resumed, 5);
}

// ---- Finding 5: task-required tools are not offered ----

#[tokio::test]
async fn tools_that_require_a_task_are_not_offered() {
    let server = model(vec![
        script::openai_tool_calls(&[("t", "fx__task_optional", "{}")]),
        script::openai_text(&["done"]),
    ]);
    let agent = fx_agent(&server, &["--more-tools"]);
    let (events, r) = run(&agent, &TurnControl::default()).await;
    assert_eq!(r.unwrap(), "done");
    let offered = offered(&server, 0);
    assert!(
        offered.contains(&"fx__task_optional".to_owned()),
        "{offered:?}"
    );
    assert!(
        !offered.contains(&"fx__task_required".to_owned()),
        "{offered:?}"
    );
    assert_eq!(results(&events)[0].1, "ran without a task");
}

// ---- Finding 7: structuredContent that mirrors the text is not sent twice ----

#[tokio::test]
async fn a_plain_value_result_is_sent_once() {
    let server = model(vec![
        script::openai_tool_calls(&[("p", "fx__plain", "{}"), ("t", "fx__plain_text", "{}")]),
        script::openai_text(&["done"]),
    ]);
    let agent = fx_agent(&server, &["--more-tools"]);
    let (events, r) = run(&agent, &TurnControl::default()).await;
    assert_eq!(r.unwrap(), "done");
    let got = results(&events);
    assert_eq!(got[0], ("fx__plain".into(), "42".into(), false));
    assert_eq!(got[1], ("fx__plain_text".into(), "hello".into(), false));
}

/// Keeps every event with the time it arrived.
#[derive(Default)]
struct Timed(Vec<(std::time::Instant, Event)>);

impl Receiver for Timed {
    fn on_event(&mut self, event: Event) -> Flow {
        self.0.push((std::time::Instant::now(), event));
        Flow::Continue
    }
}

/// An agent with the fixture's progress tools (`--progress-tools`), its log level
/// `level`, running a turn that calls `tool` with `arguments` once.
async fn progress_turn(
    tool: &str,
    arguments: &str,
    level: Option<panto::McpLogLevel>,
) -> Vec<(std::time::Instant, Event)> {
    let server = model(vec![
        script::openai_tool_calls(&[("c1", &format!("fx__{tool}"), arguments)]),
        script::openai_text(&["ok"]),
    ]);
    let agent = Agent::new(config(&server).with_mcp_server(
        "fx",
        fixture_server(&["--progress-tools"]).with_log_level(level),
    ))
    .unwrap();
    let mut rx = Timed::default();
    let r = tokio::time::timeout(
        HANG_GUARD,
        agent.run("go", &mut rx, &TurnControl::default(), Default::default()),
    )
    .await
    .expect("the turn hung");
    assert_eq!(r.unwrap().text, "ok");
    rx.0
}

/// The position of the call's tool_result, and its output.
fn result_of(events: &[(std::time::Instant, Event)]) -> (usize, String) {
    events
        .iter()
        .enumerate()
        .find_map(|(i, (_, e))| match e {
            Event::ToolResult { output, .. } => Some((i, output.clone())),
            _ => None,
        })
        .expect("a tool_result")
}

/// `(position, progress, total, text)` of every tool_progress, checked to be the call's.
fn progress_of(
    events: &[(std::time::Instant, Event)],
) -> Vec<(usize, f64, Option<f64>, Option<String>)> {
    events
        .iter()
        .enumerate()
        .filter_map(|(i, (_, e))| match e {
            Event::ToolProgress {
                message,
                call_id,
                name,
                progress,
                total,
                text,
            } => {
                assert_eq!((*message, call_id.as_str()), (0, "c1"));
                assert!(name.starts_with("fx__"), "{name}");
                Some((i, *progress, *total, text.clone()))
            }
            _ => None,
        })
        .collect()
}

/// `(position, level, logger, data)` of every server_log.
fn logs_of(events: &[(std::time::Instant, Event)]) -> Vec<(usize, String, Option<String>, String)> {
    events
        .iter()
        .enumerate()
        .filter_map(|(i, (_, e))| match e {
            Event::ServerLog {
                server,
                level,
                logger,
                data,
            } => {
                assert_eq!(server, "fx");
                Some((i, level.clone(), logger.clone(), data.clone()))
            }
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn progress_and_log_lines_arrive_in_order_before_the_result() {
    let events = progress_turn(
        "report",
        r#"{"steps":3,"interval_ms":150}"#,
        Some(panto::McpLogLevel::Warning),
    )
    .await;
    let (result_at, output) = result_of(&events);
    assert_eq!(output, "reported 3 steps");
    let progress = progress_of(&events);
    // Coalescing may merge reports, never reorder or invent them, and the last one
    // always comes through.
    assert!(!progress.is_empty(), "no tool_progress");
    let mut seen = 0.0;
    for (at, p, total, text) in &progress {
        assert!(*at < result_at, "a tool_progress after the result");
        assert!(*p > seen && [1.0, 2.0, 3.0].contains(p), "{progress:?}");
        assert_eq!(*total, Some(3.0));
        assert_eq!(text.as_deref(), Some(format!("step {p}").as_str()));
        seen = *p;
    }
    assert_eq!(seen, 3.0);
    // Log lines are not coalesced: every one, in order, before the result.
    let logs = logs_of(&events);
    let got: Vec<(&str, Option<&str>, &str)> = logs
        .iter()
        .map(|(at, level, logger, data)| {
            assert!(*at < result_at);
            (level.as_str(), logger.as_deref(), data.as_str())
        })
        .collect();
    assert_eq!(
        got,
        vec![
            ("warning", Some("fixture"), "warn 1"),
            ("warning", Some("fixture"), "warn 2"),
            ("warning", Some("fixture"), "warn 3"),
        ]
    );
    // The canonical JSON of a progress event.
    let json = events
        .iter()
        .find(|(_, e)| matches!(e, Event::ToolProgress { progress, .. } if *progress == 3.0))
        .unwrap()
        .1
        .to_json();
    assert_eq!(
        json,
        r#"{"type":"tool_progress","message":0,"call_id":"c1","name":"fx__report","progress":3.0,"total":3.0,"text":"step 3"}"#
    );
}

#[tokio::test]
async fn log_lines_below_the_level_or_with_logging_off_are_dropped() {
    let events = progress_turn("levels", "{}", Some(panto::McpLogLevel::Warning)).await;
    // The level reached the server (logging/setLevel).
    assert_eq!(result_of(&events).1, "level set: warning");
    let logs: Vec<(String, Option<String>, String)> = logs_of(&events)
        .into_iter()
        .map(|(_, l, g, d)| (l, g, d))
        .collect();
    let want: Vec<(String, Option<String>, String)> =
        ["warning", "error", "critical", "alert", "emergency"]
            .iter()
            .map(|l| (l.to_string(), None, l.to_string()))
            .chain([(
                "error".to_string(),
                Some("obj".to_string()),
                r#"{"code":5,"why":"an object"}"#.to_string(),
            )])
            .collect();
    assert_eq!(logs, want);
    // Off (the default): no setLevel, no server_log.
    let events = progress_turn("levels", "{}", None).await;
    assert_eq!(result_of(&events).1, "level set: None");
    assert!(logs_of(&events).is_empty());
}

#[tokio::test]
async fn a_flood_of_progress_and_log_lines_is_bounded() {
    let count = 3000;
    let events = progress_turn(
        "flood",
        &format!(r#"{{"count":{count}}}"#),
        Some(panto::McpLogLevel::Debug),
    )
    .await;
    let (result_at, output) = result_of(&events);
    assert_eq!(output, "flooded");
    let started = events
        .iter()
        .find(|(_, e)| matches!(e, Event::ToolCallStart { .. }))
        .unwrap()
        .0;
    let elapsed = events[result_at].0.duration_since(started);
    let progress = progress_of(&events);
    // At most one per 100 ms, plus the last one before the result, whatever the server
    // sent: n - 1 events 100 ms apart fit in the call's time.
    let bound = 2 + (elapsed.as_millis() / 100) as usize;
    assert!(
        progress.len() <= bound,
        "{} tool_progress events in {elapsed:?} (bound {bound})",
        progress.len()
    );
    let last = progress.last().expect("the last report");
    assert_eq!(
        (last.1, last.2, last.3.as_deref()),
        (count as f64, Some(count as f64), Some("flood 3000"))
    );
    assert!(last.0 < result_at);
    // The first 100 log lines of the call, in order; the rest dropped.
    let logs = logs_of(&events);
    assert_eq!(logs.len(), 100);
    for (i, (at, level, _, data)) in logs.iter().enumerate() {
        assert!(*at < result_at);
        assert_eq!(
            (level.as_str(), data.as_str()),
            ("error", format!("line {}", i + 1).as_str())
        );
    }
}

/// `Agent::call_mcp_tool`: one MCP tool called outside a turn (what a durable engine
/// does with a deferred call): the result in the answer's JSON form, the tool's own
/// failure as a result, an unknown name or non-object arguments as `config`, the
/// conversation untouched and nothing sent to the model, cancellation reaching the
/// server, and a secret the tool echoes redacted.
#[tokio::test]
async fn an_mcp_tool_is_called_outside_a_turn() {
    let secret = "ghp_panto_secret_token_9876543210";
    let marker = unique("call-cancel");
    let server = model(vec![]);
    let agent = Agent::new(config(&server).with_mcp_server(
        "fx",
        fixture_server(&["--cancel-marker", &marker]).with_env("GITHUB_TOKEN", secret),
    ))
    .unwrap();
    let cancel = panto::CancellationToken::new();

    let out = agent
        .call_mcp_tool("fx__echo", serde_json::json!({"text": "hi"}), &cancel)
        .await
        .unwrap();
    assert_eq!((out.output.as_str(), out.is_error), ("echo: hi", false));
    let answer: Value = serde_json::from_str(&out.to_json()).unwrap();
    assert_eq!(
        answer,
        serde_json::json!({"output": "echo: hi", "is_error": false})
    );

    let image = agent
        .call_mcp_tool("fx__image", serde_json::json!({}), &cancel)
        .await
        .unwrap();
    let answer: Value = serde_json::from_str(&image.to_json()).unwrap();
    assert_eq!(answer["parts"][1]["type"], "image", "{answer}");
    // The JSON form is an answer the core reads back as the same result.
    let answers = panto::Answers::from_json(&format!(r#"{{"c": {}}}"#, image.to_json())).unwrap();
    assert_eq!(
        answers.get("c"),
        Some(&panto::Answer::Result(image.clone()))
    );

    let failed = agent
        .call_mcp_tool("fx__fail", serde_json::json!({}), &cancel)
        .await
        .unwrap();
    assert!(failed.is_error, "{failed:?}");
    assert!(failed.output.contains("failed on purpose"), "{failed:?}");

    let echoed = agent
        .call_mcp_tool(
            "fx__env",
            serde_json::json!({"name": "GITHUB_TOKEN"}),
            &cancel,
        )
        .await
        .unwrap();
    assert!(
        echoed.output.starts_with("GITHUB_TOKEN=[REDACTED]"),
        "{echoed:?}"
    );

    let e = agent
        .call_mcp_tool("fx__nope", serde_json::json!({}), &cancel)
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Config, "{e}");
    assert!(e.message.contains("fx__nope"), "{e}");
    let e = agent
        .call_mcp_tool("fx__echo", serde_json::json!("text"), &cancel)
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Config, "{e}");

    // Cancelled once the server has the call: `cancelled`, and the server is told.
    let hang = {
        let agent = agent.clone();
        let cancel = cancel.clone();
        tokio::spawn(async move {
            agent
                .call_mcp_tool("fx__hang", serde_json::json!({}), &cancel)
                .await
        })
    };
    let started = format!("{marker}.started");
    eventually_async("the server has the call", || {
        std::path::Path::new(&started).exists()
    })
    .await;
    assert!(!hang.is_finished());
    cancel.cancel();
    let r = tokio::time::timeout(HANG_GUARD, hang)
        .await
        .expect("the cancelled call hung")
        .unwrap();
    assert_eq!(r.unwrap_err().kind, ErrorKind::Cancelled);
    eventually_async("the server saw notifications/cancelled", || {
        std::path::Path::new(&marker).exists()
    })
    .await;
    let _ = std::fs::remove_file(&marker);
    let _ = std::fs::remove_file(&started);

    assert!(agent.history().is_empty(), "the conversation is untouched");
    assert_eq!(server.requests().len(), 0, "nothing was sent to the model");
}
