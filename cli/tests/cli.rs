//! End-to-end tests of the `panto` binary against the scripted provider server: event
//! sequences with host tools (both providers), the error → exit-code table, sessions,
//! key secrecy, the stdin prompt, Ctrl-C, chat, concurrent tool commands, control
//! sequences kept off the terminal, the tool output cap, tool processes ending with
//! their turn, and session writes (lock, links, interrupted save).
//!
//! No test sleeps to synchronize: conditions are polled under a generous bound, and
//! every other timeout is a hang guard only.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

mod support;

use panto_testkit::poll_until;
use panto_testserver::TestServer;
use serde_json::{json, Value};
use support::*;

/// A home directory of this test process's own, so no test reads or writes the user's
/// config, conversations or chat history.
fn private_home() -> PathBuf {
    static HOME: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    HOME.get_or_init(|| temp_dir("home")).clone()
}

/// `panto` with a clean environment (no key variables leak in from the developer's
/// shell) and the process's private home.
fn panto_cmd(args: &[&str]) -> Command {
    panto_in(&private_home(), args)
}

fn panto(args: &[&str]) -> Output {
    run(&mut panto_cmd(args))
}

/// `srv`'s address as an OpenAI-compatible provider's base URL.
fn base_of(srv: &TestServer) -> String {
    format!("{}/v1", srv.url())
}

/// `panto <command>` pointed at `srv` as an OpenAI-compatible provider (key `k`), with
/// `rest` after those flags.
fn panto_on(srv: &TestServer, command: &str, rest: &[&str]) -> Command {
    let base = base_of(srv);
    let mut args = vec![command, "--base-url", &base, "--api-key", "k"];
    args.extend_from_slice(rest);
    panto_cmd(&args)
}

/// `panto run …rest` against `srv`, run to its end.
fn run_on(srv: &TestServer, rest: &[&str]) -> Output {
    run(&mut panto_on(srv, "run", rest))
}

/// `panto run --json …rest` against `srv`, run to its end.
fn run_json_on(srv: &TestServer, rest: &[&str]) -> Output {
    run(&mut panto_on(srv, "run", &[&["--json"], rest].concat()))
}

/// `panto chat …rest` against `srv`, with `stdin` as its input.
fn chat_on(srv: &TestServer, rest: &[&str], stdin: &str) -> Output {
    run_with_stdin(&mut panto_on(srv, "chat", rest), stdin)
}

fn types(lines: &[Value]) -> Vec<&str> {
    lines
        .iter()
        .map(|v| v["type"].as_str().unwrap_or("?"))
        .collect()
}

// ---- scenario builders -------------------------------------------------------------

fn openai_usage(input: u32, output: u32) -> Value {
    json!({"data": {"id": "chatcmpl-t", "object": "chat.completion.chunk", "model": "gpt-test",
        "choices": [], "usage": {"prompt_tokens": input, "completion_tokens": output}}})
}

fn openai_text(text: &str) -> Vec<Value> {
    vec![
        openai_chunk(json!({"role": "assistant", "content": ""}), None),
        openai_chunk(json!({"content": text}), None),
        openai_chunk(json!({}), Some("stop")),
        openai_usage(20, 5),
        json!({"data": "[DONE]"}),
    ]
}

/// One message calling `weather` once per id, with `{"city":"Paris"}`.
fn openai_tool_calls(ids: &[&str]) -> Vec<Value> {
    let mut sse = vec![openai_chunk(
        json!({"role": "assistant", "content": null}),
        None,
    )];
    for (i, id) in ids.iter().enumerate() {
        sse.push(openai_chunk(
            json!({"tool_calls": [{"index": i, "id": id, "type": "function",
                "function": {"name": "weather", "arguments": ""}}]}),
            None,
        ));
        sse.push(openai_chunk(
            json!({"tool_calls": [{"index": i, "function": {"arguments": "{\"city\":\"Paris\"}"}}]}),
            None,
        ));
    }
    sse.push(openai_chunk(json!({}), Some("tool_calls")));
    sse.push(openai_usage(10, 7));
    sse.push(json!({"data": "[DONE]"}));
    sse
}

fn openai_exchange(body_contains: &[&str], sse: Vec<Value>) -> Value {
    json!({"match": {"method": "POST", "path": "/v1/chat/completions", "body_contains": body_contains},
           "response": {"status": 200, "sse": sse}})
}

fn anthropic_event(data: Value) -> Value {
    let name = data["type"].clone();
    json!({"event": name, "data": data})
}

fn anthropic_message(blocks: Vec<Vec<Value>>, stop_reason: &str) -> Vec<Value> {
    let mut sse = vec![anthropic_event(
        json!({"type": "message_start", "message": {
        "id": "msg_t", "type": "message", "role": "assistant", "model": "claude-test",
        "content": [], "stop_reason": null, "stop_sequence": null,
        "usage": {"input_tokens": 12, "output_tokens": 1}}}),
    )];
    for block in blocks {
        sse.extend(block);
    }
    sse.push(anthropic_event(json!({"type": "message_delta",
        "delta": {"stop_reason": stop_reason, "stop_sequence": null},
        "usage": {"output_tokens": 9}})));
    sse.push(anthropic_event(json!({"type": "message_stop"})));
    sse
}

fn anthropic_tool_use(index: u32, id: &str, name: &str, input_json: &str) -> Vec<Value> {
    vec![
        anthropic_event(json!({"type": "content_block_start", "index": index,
            "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}})),
        anthropic_event(json!({"type": "content_block_delta", "index": index,
            "delta": {"type": "input_json_delta", "partial_json": input_json}})),
        anthropic_event(json!({"type": "content_block_stop", "index": index})),
    ]
}

fn anthropic_text(index: u32, text: &str) -> Vec<Value> {
    vec![
        anthropic_event(json!({"type": "content_block_start", "index": index,
            "content_block": {"type": "text", "text": ""}})),
        anthropic_event(json!({"type": "content_block_delta", "index": index,
            "delta": {"type": "text_delta", "text": text}})),
        anthropic_event(json!({"type": "content_block_stop", "index": index})),
    ]
}

/// A server answering every request with `response` (error scenarios).
fn answering(response: Value) -> TestServer {
    server(json!({"exchanges": [{"response": response}]}))
}

// ---- 1. a two-step turn with a host tool -------------------------------------------

const WEATHER_TOOL: &str = r#"weather=cat >/dev/null; echo "{\"temp_c\":18}""#;

/// Checks the JSON lines of a weather turn: tool call, its result, then the answer.
fn assert_weather_turn(out: &Output, call_id: &str, answer: &str) {
    assert_eq!(out.status.code(), Some(0), "{}", describe(out));
    let lines = json_lines(out);
    let milestones: Vec<&str> = types(&lines)
        .into_iter()
        .filter(|t| {
            matches!(
                *t,
                "message_start"
                    | "message_end"
                    | "tool_call_start"
                    | "tool_result"
                    | "message_complete"
            )
        })
        .collect();
    assert_eq!(
        milestones,
        [
            "message_start",
            "message_end",
            "tool_call_start",
            "tool_result",
            "message_start",
            "message_end",
            "message_complete"
        ],
        "{}",
        describe(out)
    );
    assert_eq!(types(&lines).last(), Some(&"message_complete"));
    let start = lines
        .iter()
        .find(|l| l["type"] == "tool_call_start")
        .expect("tool_call_start");
    assert_eq!(start["host"], true);
    assert_eq!(start["name"], "weather");
    assert_eq!(start["call_id"], call_id);
    assert_eq!(start["arguments"], json!({"city": "Paris"}));
    let result = lines
        .iter()
        .find(|l| l["type"] == "tool_result")
        .expect("tool_result");
    assert_eq!(result["call_id"], call_id);
    assert_eq!(result["output"], "{\"temp_c\":18}");
    assert_eq!(result["is_error"], false);
    let complete = lines.last().expect("a last line");
    assert_eq!(complete["text"], answer);
    assert_eq!(complete["messages"], 2);
}

#[test]
fn openai_two_step_turn_runs_the_shell_tool() {
    let srv = server(json!({"exchanges": [
        openai_exchange(&[], openai_tool_calls(&["call_1"])),
        openai_exchange(&["temp_c"], openai_text("It is 18°C in Paris.")),
    ]}));
    let out = run_json_on(&srv, &["--tool", WEATHER_TOOL, "Weather in Paris?"]);
    assert_weather_turn(&out, "call_1", "It is 18°C in Paris.");
    let reqs = srv.requests();
    assert_eq!(reqs.len(), 2);
    let second = reqs[1].body.to_string();
    assert!(second.contains(r#"{\"temp_c\":18}"#), "{second}");
    assert!(second.contains("call_1"), "{second}");
    // The tool was declared to the model, with the default schema.
    let tools = &reqs[0].body["tools"];
    assert_eq!(tools[0]["function"]["name"], "weather");
    assert_eq!(
        tools[0]["function"]["parameters"],
        json!({"type": "object"})
    );
}

#[test]
fn anthropic_two_step_turn_runs_the_shell_tool() {
    let srv = server(json!({"exchanges": [
        {"match": {"method": "POST", "path": "/v1/messages"},
         "response": {"sse": anthropic_message(
             vec![anthropic_tool_use(0, "toolu_1", "weather", "{\"city\": \"Paris\"}")], "tool_use")}},
        {"match": {"method": "POST", "path": "/v1/messages", "body_contains": ["temp_c"]},
         "response": {"sse": anthropic_message(vec![anthropic_text(0, "Mild, 18°C.")], "end_turn")}},
    ]}));
    let out = panto(&[
        "run",
        "--json",
        "--provider",
        "anthropic",
        "--base-url",
        &srv.url(),
        "--api-key",
        "sk-ant-test",
        "--tool",
        WEATHER_TOOL,
        "Weather in Paris?",
    ]);
    assert_weather_turn(&out, "toolu_1", "Mild, 18°C.");
    let reqs = srv.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0].body["model"], "claude-sonnet-4-5");
    assert_eq!(
        reqs[0].headers.get("x-api-key").map(String::as_str),
        Some("sk-ant-test")
    );
    let second = reqs[1].body.to_string();
    assert!(second.contains(r#"{\"temp_c\":18}"#), "{second}");
    assert!(second.contains("toolu_1"), "{second}");
}

#[test]
fn tools_file_describes_the_tool_and_orphans_are_usage_errors() {
    let dir = temp_dir("tools-file");
    let file = dir.join("tools.json");
    let schema =
        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]});
    std::fs::write(
        &file,
        json!([{"name": "weather", "description": "Current weather", "parameters": schema}])
            .to_string(),
    )
    .expect("write tools file");
    let srv =
        server(json!({"exchanges": [openai_exchange(&["Current weather"], openai_text("ok"))]}));
    let file_arg = file.to_string_lossy().into_owned();
    let out = run_json_on(&srv, &["--tool", WEATHER_TOOL, "--tools", &file_arg, "hi"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let tools = &srv.requests()[0].body["tools"];
    assert_eq!(tools[0]["function"]["description"], "Current weather");
    assert_eq!(tools[0]["function"]["parameters"], schema);

    // Described, but no --tool command for it.
    let out = run_json_on(&srv, &["--tools", &file_arg, "hi"]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    let last = json_lines(&out).pop().expect("an error line");
    assert_eq!(last["kind"], "config");
    assert!(
        stderr_of(&out).contains("panto: error[config]:"),
        "{}",
        describe(&out)
    );
}

#[test]
fn concurrent_tool_calls_run_at_the_same_time() {
    // Each call waits until both calls have started: run one after the other, the
    // first would give up and report an error.
    let dir = temp_dir("concurrent");
    let command = format!(
        "weather=cat >/dev/null; d='{}'; touch \"$d/$PANTO_TOOL_CALL_ID\"; i=0; \
         while [ ! -e \"$d/call_a\" ] || [ ! -e \"$d/call_b\" ]; do \
           i=$((i+1)); [ $i -gt 2000 ] && {{ echo alone; exit 1; }}; sleep 0.01; done; \
         echo \"together $PANTO_TOOL_CALL_ID\"",
        dir.display()
    );
    let srv = server(json!({"exchanges": [
        openai_exchange(&[], openai_tool_calls(&["call_a", "call_b"])),
        openai_exchange(&["together call_a", "together call_b"], openai_text("done")),
    ]}));
    let out = run_json_on(&srv, &["--tool", &command, "go"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let results: Vec<Value> = json_lines(&out)
        .into_iter()
        .filter(|l| l["type"] == "tool_result")
        .collect();
    assert_eq!(results.len(), 2);
    for r in &results {
        assert_eq!(r["is_error"], false, "{r}");
        assert_eq!(
            r["output"],
            format!("together {}", r["call_id"].as_str().unwrap_or(""))
        );
    }
}

// ---- 2. errors → exit codes ----------------------------------------------------------

/// Runs a one-turn `--json` request against `srv` and returns (exit code, last line).
fn fail_run(srv: &TestServer, extra: &[&str]) -> (Option<i32>, Value, Output) {
    let out = run_json_on(srv, &[extra, &["hello"]].concat());
    let lines = json_lines(&out);
    let last = lines.last().cloned().unwrap_or(Value::Null);
    assert_eq!(last["type"], "error", "{}", describe(&out));
    // Exactly one error line, and it is the last one.
    assert_eq!(types(&lines).iter().filter(|t| **t == "error").count(), 1);
    (out.status.code(), last, out)
}

#[test]
fn error_kinds_map_to_exit_codes() {
    let first_event = openai_chunk(json!({"role": "assistant", "content": "Hel"}), None);
    let cases: Vec<(&str, Value, Vec<&str>, &str, i32)> = vec![
        (
            "401",
            json!({"status": 401, "json": {"error": {"message": "Incorrect API key provided",
                "type": "invalid_request_error", "code": "invalid_api_key"}}}),
            vec![],
            "authentication",
            3,
        ),
        (
            "429",
            json!({"status": 429, "headers": {"retry-after": "0"},
                "json": {"error": {"message": "Rate limit reached", "type": "rate_limit_error"}}}),
            vec!["--retries", "0"],
            "rate_limited",
            4,
        ),
        (
            "500",
            json!({"status": 500, "json": {"error": {"message": "boom", "type": "server_error"}}}),
            vec!["--retries", "0"],
            "server",
            4,
        ),
        (
            "reset before any byte",
            json!({"sse": [first_event], "fault": {"kind": "reset", "after_bytes": 0}}),
            vec!["--retries", "0"],
            "connection",
            5,
        ),
        (
            "stall",
            json!({"sse": [first_event], "fault": {"kind": "stall", "after_bytes": 0}}),
            vec!["--retries", "0", "--idle-timeout-ms", "300"],
            "timeout",
            5,
        ),
        (
            "truncated stream",
            json!({"sse": [first_event, openai_chunk(json!({"content": "lo"}), None)]}),
            vec!["--retries", "0"],
            "incomplete",
            6,
        ),
        (
            "malformed JSON",
            json!({"sse": [first_event, "data: {\"choices\": [{\"delta\": \n\n"]}),
            vec!["--retries", "0"],
            "protocol",
            6,
        ),
    ];
    for (name, response, extra, kind, code) in cases {
        let srv = answering(response);
        let (got, last, out) = fail_run(&srv, &extra);
        assert_eq!(last["kind"], kind, "{name}: {}", describe(&out));
        assert_eq!(got, Some(code), "{name}: {}", describe(&out));
        assert!(
            stderr_of(&out).contains(&format!("panto: error[{kind}]:")),
            "{name}: {}",
            describe(&out)
        );
    }
}

#[test]
fn usage_errors_exit_2() {
    for args in [
        vec!["run", "--no-such-flag", "hi"],
        vec!["run", "--provider", "gemeni", "hi"],
        vec!["run", "--tool", "no-equals-sign", "hi"],
        vec!["frobnicate"],
    ] {
        let out = panto(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", describe(&out));
        assert!(out.stdout.is_empty(), "{args:?}: {}", describe(&out));
    }
    // Config errors found after parsing: exit 2, and a JSON error line with --json.
    let out = panto(&[
        "run",
        "--json",
        "--base-url",
        "ftp://x",
        "--api-key",
        "k",
        "hi",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert_eq!(json_lines(&out)[0]["kind"], "config");
    let out = panto(&["run", "hi"]); // no key anywhere, the provider's own endpoint
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(
        stderr_of(&out).contains("OPENAI_API_KEY"),
        "{}",
        describe(&out)
    );
}

#[test]
fn help_documents_the_exit_codes() {
    let out = panto(&["run", "--help"]);
    assert_eq!(out.status.code(), Some(0));
    let help = stdout_of(&out);
    for needle in ["Exit codes:", "130", "rate_limited", "incomplete"] {
        assert!(help.contains(needle), "{needle} missing from:\n{help}");
    }
}

// ---- 3. sessions -------------------------------------------------------------------

#[test]
fn session_file_carries_history_between_runs() {
    let dir = temp_dir("session");
    let session = dir.join("conversation.json");
    let session_arg = session.to_string_lossy().into_owned();
    let srv = server(json!({"exchanges": [
        openai_exchange(&["first question"], openai_text("The capital is Paris.")),
        openai_exchange(&["The capital is Paris.", "second question"], openai_text("Yes.")),
    ]}));
    for prompt in ["first question", "second question"] {
        let out = run_on(&srv, &["--session", &session_arg, prompt]);
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    }
    let reqs = srv.requests();
    assert_eq!(reqs.len(), 2);
    assert!(reqs.iter().all(|r| r.matched), "{reqs:?}");
    let messages = saved_messages(&session);
    assert_eq!(messages.len(), 4, "{messages:?}");
}

/// The messages of a saved session, checked by the core's own loader.
fn saved_messages(path: &Path) -> Vec<panto::Message> {
    let text = std::fs::read_to_string(path).expect("session file exists");
    panto::message::history_from_json(&text).expect("the session is a valid history")
}

// ---- 4. the key stays secret -------------------------------------------------------

#[test]
fn api_key_never_appears_in_output() {
    const KEY: &str = "sk-test-SECRET123";
    let echo = json!({"status": 401, "json": {"error": {
        "message": format!("Incorrect API key provided: {KEY}. You can find your API key at https://example.invalid."),
        "type": "invalid_request_error", "code": "invalid_api_key"}}});
    for json_mode in [true, false] {
        let srv = answering(echo.clone());
        let base = base_of(&srv);
        let mut args = vec!["run", "--base-url", &base, "--api-key", KEY, "hello"];
        if json_mode {
            args.insert(1, "--json");
        }
        let out = panto(&args);
        assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
        let all = describe(&out);
        assert!(!all.contains("SECRET123"), "the key leaked:\n{all}");
        // The key did reach the server, so the redaction was really needed.
        let auth = srv.requests()[0].headers.get("authorization").cloned();
        assert_eq!(auth.as_deref(), Some("Bearer sk-test-SECRET123"));
    }
}

// ---- 5. prompt on stdin ------------------------------------------------------------

#[test]
fn prompt_is_read_from_stdin_when_absent() {
    let srv =
        server(json!({"exchanges": [openai_exchange(&["What's up?"], openai_text("Not much."))]}));
    let out = run_with_stdin(&mut panto_on(&srv, "run", &[]), "What's up?\n");
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    // Not a terminal: plain text, no ANSI escape anywhere.
    assert_eq!(stdout_of(&out), "Not much.\n");
    assert!(!stderr_of(&out).contains('\x1b'), "{}", describe(&out));
    let body = &srv.requests()[0].body;
    let last = body["messages"].as_array().and_then(|m| m.last()).cloned();
    assert_eq!(
        last.map(|m| m["content"].clone()),
        Some(json!("What's up?"))
    );

    let out = run_with_stdin(&mut panto_on(&srv, "run", &[]), "\n");
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
}

/// Piped stdout carries only the final answer: the tool trace goes to stderr, or
/// nowhere with -q.
#[test]
fn piped_stdout_is_only_the_answer() {
    let srv = server(json!({"exchanges": [
        openai_exchange(&[], openai_tool_calls(&["call_1"])),
        openai_exchange(&["temp_c"], openai_text("Warm.")),
    ]}));
    let out = run_on(&srv, &["--tool", WEATHER_TOOL, "w?"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_eq!(stdout_of(&out), "Warm.\n");
    assert_eq!(
        stderr_of(&out),
        "→ weather {\"city\":\"Paris\"}\n← weather: {\"temp_c\":18}\n"
    );
    srv.reset();
    let out = run_on(&srv, &["-q", "--tool", WEATHER_TOOL, "w?"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_eq!(stdout_of(&out), "Warm.\n");
    assert_eq!(stderr_of(&out), "", "-q leaves stderr to errors");
}

// ---- 6. Ctrl-C -------------------------------------------------------------------------

#[test]
fn ctrl_c_cancels_the_turn_saves_the_session_and_exits_130() {
    let dir = temp_dir("ctrl-c");
    let session = dir.join("s.json");
    let session_arg = session.to_string_lossy().into_owned();
    // One event, then the server stalls forever (the fault replaces the end of the body).
    let srv = answering(json!({
        "sse": [openai_chunk(json!({"role": "assistant", "content": "Thinking"}), None)],
        "fault": {"kind": "stall", "after_bytes": 1_000_000}
    }));
    let mut child = panto_on(
        &srv,
        "run",
        &["--json", "--session", &session_arg, "long task"],
    )
    .spawn()
    .expect("spawn panto");
    let stdout = child.stdout.take().expect("stdout pipe");
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let first = rx.recv_timeout(HANG_GUARD).expect("a first JSON line");
    let first: Value = serde_json::from_str(&first).expect("JSON");
    assert_eq!(first["type"], "message_start");
    let sent = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("run kill");
    assert!(sent.success());
    let out = finish(child);
    let _ = reader.join();
    let rest: Vec<Value> = rx
        .try_iter()
        .map(|l| serde_json::from_str(&l).expect("JSON line"))
        .collect();
    let last = rest.last().expect("a final error line");
    assert_eq!(last["type"], "error");
    assert_eq!(last["kind"], "cancelled");
    assert_eq!(out.status.code(), Some(130), "stderr: {}", stderr_of(&out));
    // The partial answer is dropped; the user message stays, as a valid history.
    let messages = saved_messages(&session);
    assert_eq!(messages.len(), 1, "{messages:?}");
    assert_eq!(messages[0].text(), "long task");
}

// ---- chat --------------------------------------------------------------------------

#[test]
fn chat_runs_one_turn_per_line_and_clear_forgets() {
    let dir = temp_dir("chat");
    let session = dir.join("chat.json");
    let session_arg = session.to_string_lossy().into_owned();
    let srv = server(json!({"exchanges": [
        openai_exchange(&["remember banana"], openai_text("Noted.")),
        openai_exchange(&["Noted.", "what fruit"], openai_text("Banana.")),
        openai_exchange(&["fresh start"], openai_text("Hello again.")),
    ]}));
    let out = chat_on(
        &srv,
        &["--session", &session_arg],
        "remember banana\nwhat fruit\n/clear\nfresh start\n/exit\nnever sent\n",
    );
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_eq!(stdout_of(&out), "Noted.\nBanana.\nHello again.\n");
    let reqs = srv.requests();
    assert_eq!(reqs.len(), 3);
    assert!(reqs.iter().all(|r| r.matched), "{reqs:?}");
    assert!(!reqs[2].body.to_string().contains("banana"));
    assert_eq!(saved_messages(&session).len(), 2);
}

#[test]
fn chat_from_a_script_stops_at_the_first_failure() {
    let srv = answering(json!({"status": 401, "json": {"error": {"message": "nope"}}}));
    let out = chat_on(&srv, &["--json"], "hello\nagain\n");
    assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
    assert_eq!(json_lines(&out).len(), 1);
    assert_eq!(srv.requests().len(), 1);
}

#[test]
fn calls_with_invalid_arguments_are_never_executed() {
    let dir = temp_dir("bad-args");
    let marker = dir.join("ran");
    let command = format!("weather=touch '{}'; echo ran", marker.display());
    let sse = vec![
        openai_chunk(json!({"role": "assistant", "content": null}), None),
        openai_chunk(
            json!({"tool_calls": [{"index": 0, "id": "call_bad", "type": "function",
                "function": {"name": "weather", "arguments": "{\"city\": Par"}}]}),
            None,
        ),
        openai_chunk(json!({}), Some("tool_calls")),
        json!({"data": "[DONE]"}),
    ];
    let srv = server(json!({"exchanges": [
        openai_exchange(&[], sse),
        openai_exchange(&["call_bad"], openai_text("Sorry.")),
    ]}));
    let out = run_json_on(&srv, &["--tool", &command, "w?"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let lines = json_lines(&out);
    let result = lines
        .iter()
        .find(|l| l["type"] == "tool_result")
        .expect("tool_result");
    assert_eq!(result["is_error"], true, "{result}");
    assert!(!marker.exists(), "the command ran for unparsable arguments");
}

#[test]
fn chat_ctrl_c_cancels_the_turn_then_exits_130_at_the_prompt() {
    let dir = temp_dir("chat-ctrl-c");
    let session = dir.join("s.json");
    let session_arg = session.to_string_lossy().into_owned();
    let srv = answering(json!({
        "sse": [openai_chunk(json!({"role": "assistant", "content": "Hmm"}), None)],
        "fault": {"kind": "stall", "after_bytes": 1_000_000}
    }));
    let mut child = panto_on(&srv, "chat", &["--json", "--session", &session_arg])
        .stdin(Stdio::piped())
        .spawn()
        .expect("spawn panto");
    // Kept open: the chat must not see end of input.
    let mut stdin = child.stdin.take().expect("stdin pipe");
    stdin.write_all(b"long task\n").expect("write stdin");
    stdin.flush().expect("flush stdin");
    let stdout = child.stdout.take().expect("stdout pipe");
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let next_line = || -> Value {
        let line = rx.recv_timeout(HANG_GUARD).expect("a JSON line");
        serde_json::from_str(&line).expect("JSON")
    };
    let sigint = |pid: u32| {
        let sent = Command::new("kill")
            .args(["-INT", &pid.to_string()])
            .status()
            .expect("run kill");
        assert!(sent.success());
    };
    assert_eq!(next_line()["type"], "message_start");
    sigint(child.id());
    // The turn ends as cancelled; the chat goes on (it is waiting for the next line).
    let mut line = next_line();
    while line["type"] != "error" {
        line = next_line();
    }
    assert_eq!(line["kind"], "cancelled");
    assert_eq!(saved_messages(&session).len(), 1);
    // At the prompt, Ctrl-C leaves with 130.
    sigint(child.id());
    let out = finish(child);
    drop(stdin);
    let _ = reader.join();
    assert_eq!(out.status.code(), Some(130), "stderr: {}", stderr_of(&out));
}

// ---- 7. terminal injection (human mode) ---------------------------------------------

/// Nothing a terminal would act on: no C0 control but `\n` and `\t`, no DEL, no C1.
fn assert_inert(text: &str, what: &str) {
    if let Some(c) = text
        .chars()
        .find(|c| c.is_control() && *c != '\n' && *c != '\t')
    {
        panic!("{what}: control {c:?} reached the terminal:\n{text:?}");
    }
}

#[test]
fn human_output_neutralises_control_sequences_even_split_across_deltas() {
    let pieces = [
        "Hello \x1b]52;c;ZXZp",
        "bA==\x07world \x1b",
        "[2Jclear \u{9b}31mred \0nul \x7fdel \x07bell\r",
        "\nnext\n",
    ];
    let mut sse = vec![openai_chunk(
        json!({"role": "assistant", "content": ""}),
        None,
    )];
    for piece in pieces {
        sse.push(openai_chunk(json!({"content": piece}), None));
    }
    sse.push(openai_chunk(json!({}), Some("stop")));
    sse.push(json!({"data": "[DONE]"}));
    let srv = server(json!({"exchanges": [
        {"response": {"sse": sse}, "times": 2},
    ]}));
    let out = run_on(&srv, &["hi"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_eq!(
        stdout_of(&out),
        "Hello world clear red ␀nul ␡del ␇bell\nnext\n"
    );

    // --json keeps every byte: the deltas carry the text exactly as sent.
    let out = run_json_on(&srv, &["hi"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert!(!out.stdout.contains(&0x1b), "raw ESC in --json output");
    let text: String = json_lines(&out)
        .iter()
        .filter(|l| l["type"] == "content_delta")
        .map(|l| l["text"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(text, pieces.concat());
}

#[test]
fn human_output_neutralises_tool_names_arguments_output_and_errors() {
    let mut sse = vec![openai_chunk(
        json!({"role": "assistant", "content": null}),
        None,
    )];
    for (i, id, name, args) in [
        (
            0,
            "call_1",
            "weather",
            "{\"city\":\"Par\\u007fis\\u009b2J\"}",
        ),
        (1, "call_2", "evil\x1b]0;pwned\x07", "{}"),
    ] {
        sse.push(openai_chunk(
            json!({"tool_calls": [{"index": i, "id": id, "type": "function",
                "function": {"name": name, "arguments": args}}]}),
            None,
        ));
    }
    sse.push(openai_chunk(json!({}), Some("tool_calls")));
    sse.push(json!({"data": "[DONE]"}));
    let srv = server(json!({"exchanges": [
        openai_exchange(&[], sse),
        openai_exchange(&[], openai_text("Done.")),
    ]}));
    let tool = r"weather=cat >/dev/null; printf 'ok\033[2J\033]52;c;eA==\007 done\n'";
    let out = run_on(&srv, &["--tool", tool, "w?"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_inert(&stdout_of(&out), "stdout");
    // The tool trace is on stderr.
    let trace = stderr_of(&out);
    assert_inert(&trace, "stderr");
    assert!(
        // DEL shown, the C1 CSI removed with its sequence.
        trace.contains("→ weather {\"city\":\"Par␡is\"}"),
        "{trace}"
    );
    assert!(trace.contains("← weather: ok done"), "{trace}");
    assert!(trace.contains("→ evil {}"), "{trace}");
    assert!(trace.contains("✗ evil:"), "{trace}");

    // A server's error message reaches stderr in both modes.
    let message = "bad \x1b]0;pwned\x07request\x1b[2J";
    for json_mode in [false, true] {
        let srv = answering(json!({"status": 400, "json": {"error": {"message": message}}}));
        let out = if json_mode {
            run_json_on(&srv, &["hi"])
        } else {
            run_on(&srv, &["hi"])
        };
        assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
        let stderr = stderr_of(&out);
        assert_inert(&stderr, "stderr");
        assert!(stderr.contains("bad request"), "{stderr}");
        if json_mode {
            let last = json_lines(&out).pop().expect("an error line");
            assert!(
                last["message"]
                    .as_str()
                    .unwrap_or_default()
                    .contains(message),
                "{last}"
            );
        } else {
            assert_inert(&stdout_of(&out), "stdout");
        }
    }
}

// ---- helpers for processes and files ------------------------------------------------

/// Whether process `pid` is running: it exists and is not a zombie (a zombie is dead;
/// its parent may be an init that never reaps).
fn alive(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !matches!(
            stat.rsplit(')')
                .next()
                .and_then(|s| s.split_whitespace().next()),
            Some("Z" | "X")
        ),
        Err(_) => false,
    }
}

fn assert_gone(pids: &[String], what: &str) {
    for pid in pids {
        assert!(
            poll_until(Duration::from_secs(10), || !alive(pid)),
            "{what}: process {pid} is still running"
        );
    }
}

/// Waits for `path` to appear (written atomically by the tool) and returns its words.
/// Fails early if `child` exits first.
fn wait_for_pids(path: &Path, child: &mut Child) -> Vec<String> {
    let mut text = None;
    let appeared = poll_until(HANG_GUARD, || {
        if let Ok(t) = std::fs::read_to_string(path) {
            text = Some(t);
            return true;
        }
        matches!(child.try_wait(), Ok(Some(_)))
    });
    let text = text.unwrap_or_else(|| {
        let _ = child.kill();
        panic!(
            "the tool never wrote {} (appeared: {appeared})",
            path.display()
        )
    });
    text.split_whitespace().map(str::to_owned).collect()
}

fn signal(pid: u32, name: &str) {
    let sent = Command::new("kill")
        .args([&format!("-{name}"), &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(sent.success(), "kill -{name} {pid}");
}

/// A tool that starts a grandchild (`sleep`) and waits for it, after writing
/// "SHELL_PID GRANDCHILD_PID" to `pid_file`.
fn grandchild_tool(pid_file: &Path) -> String {
    format!(
        "weather=cat >/dev/null; sleep 1000 & echo $$ $! > '{0}.tmp'; mv '{0}.tmp' '{0}'; wait",
        pid_file.display()
    )
}

/// Runs `panto run --json` with `tool` against a server that asks for one weather call,
/// waits until the tool wrote its pids, then applies `interrupt` to the child.
fn run_tool_then(tool: &str, pid_file: &Path, extra: &[&str], signal_name: &str) -> Output {
    let srv = server(json!({"exchanges": [
        openai_exchange(&[], openai_tool_calls(&["call_1"])),
    ]}));
    let args = [&["--json", "--tool", tool], extra, &["w?"]].concat();
    let mut child = panto_on(&srv, "run", &args).spawn().expect("spawn panto");
    let pids = wait_for_pids(pid_file, &mut child);
    signal(child.id(), signal_name);
    let out = finish(child);
    assert_eq!(out.status.code(), Some(130), "{}", describe(&out));
    assert_gone(&pids, &format!("after {signal_name}"));
    out
}

// ---- 8. tool output cap ---------------------------------------------------------------

#[test]
fn tool_output_past_the_cap_is_cut_and_the_command_stopped() {
    let dir = temp_dir("output-cap");
    let done = dir.join("done");
    let tool = format!(
        "weather=cat >/dev/null; head -c 2000000 /dev/zero | tr '\\0' y; touch '{}'",
        done.display()
    );
    let srv = server(json!({"exchanges": [
        openai_exchange(&[], openai_tool_calls(&["call_1"])),
        openai_exchange(&["[output truncated"], openai_text("Too much.")),
    ]}));
    let out = run_json_on(
        &srv,
        &["--max-tool-output-bytes", "1000", "--tool", &tool, "w?"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let result = json_lines(&out)
        .into_iter()
        .find(|l| l["type"] == "tool_result")
        .expect("tool_result");
    let output = result["output"].as_str().unwrap_or_default();
    let (kept, marker) = output.split_once('\n').expect("a marker line");
    assert_eq!(kept, "y".repeat(1000));
    assert!(
        marker.starts_with("[output truncated:") && marker.contains("1000-byte limit"),
        "{marker}"
    );
    assert_eq!(result["is_error"], true);
    assert!(srv.requests().iter().all(|r| r.matched));
    // Stopped at the cap: the command never got to its last step.
    assert!(!done.exists(), "the command ran to its end");

    let out = panto(&["run", "--max-tool-output-bytes", "0", "hi"]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
}

// ---- 9. tool processes end with the turn --------------------------------------------

#[test]
fn ctrl_c_kills_the_tool_and_its_children() {
    let dir = temp_dir("tool-ctrl-c");
    let pid_file = dir.join("pids");
    let out = run_tool_then(&grandchild_tool(&pid_file), &pid_file, &[], "INT");
    let last = json_lines(&out).pop().expect("an error line");
    assert_eq!(last["kind"], "cancelled");
}

#[test]
fn sigterm_kills_the_tool_and_its_children() {
    let dir = temp_dir("tool-sigterm");
    let pid_file = dir.join("pids");
    run_tool_then(&grandchild_tool(&pid_file), &pid_file, &[], "TERM");
}

#[test]
fn a_tool_that_closed_its_pipes_is_killed_too() {
    let dir = temp_dir("tool-closed-pipes");
    let pid_file = dir.join("pids");
    let tool = format!(
        "weather=cat >/dev/null; echo $$ > '{0}.tmp'; mv '{0}.tmp' '{0}'; \
         exec >/dev/null 2>&1; exec sleep 1000",
        pid_file.display()
    );
    run_tool_then(&tool, &pid_file, &[], "INT");
}

#[test]
fn a_timed_out_tool_is_killed_with_its_children() {
    let dir = temp_dir("tool-timeout");
    let pid_file = dir.join("pids");
    let srv = server(json!({"exchanges": [
        openai_exchange(&[], openai_tool_calls(&["call_1"])),
        openai_exchange(&["call_1"], openai_text("It timed out.")),
    ]}));
    let tool = grandchild_tool(&pid_file);
    let out = run_json_on(&srv, &["--tool-timeout-ms", "3000", "--tool", &tool, "w?"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let result = json_lines(&out)
        .into_iter()
        .find(|l| l["type"] == "tool_result")
        .expect("tool_result");
    assert_eq!(result["is_error"], true, "{result}");
    let pids = std::fs::read_to_string(&pid_file).expect("the tool started within 3 s");
    let pids: Vec<String> = pids.split_whitespace().map(str::to_owned).collect();
    assert_eq!(pids.len(), 2, "{pids:?}");
    assert_gone(&pids, "after the tool timeout");
}

// ---- 10. session writes -------------------------------------------------------------

#[cfg(unix)]
fn mode_of(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .expect("metadata")
        .permissions()
        .mode()
        & 0o777
}

/// Files in `dir` whose names say they are temporary.
fn temp_files(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .expect("read dir")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("tmp"))
        .collect()
}

#[cfg(unix)]
#[test]
fn session_saves_are_atomic_and_private() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let dir = temp_dir("session-mode");
    let session = dir.join("s.json");
    let session_arg = session.to_string_lossy().into_owned();
    let srv = server(json!({"exchanges": [
        {"response": {"sse": openai_text("Hi.")}, "times": 2},
    ]}));
    let run = |prompt: &str| {
        let out = run_on(&srv, &["--session", &session_arg, prompt]);
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    };
    run("one");
    assert_eq!(mode_of(&session), 0o600, "a new session is private");
    // A mode the user chose is kept; the file is replaced (a new inode), not rewritten.
    std::fs::set_permissions(&session, std::fs::Permissions::from_mode(0o640)).expect("chmod");
    let inode = std::fs::metadata(&session).expect("metadata").ino();
    run("two");
    assert_eq!(mode_of(&session), 0o640);
    assert_ne!(std::fs::metadata(&session).expect("metadata").ino(), inode);
    assert_eq!(saved_messages(&session).len(), 4);
    assert_eq!(temp_files(&dir), Vec::<String>::new());
}

#[cfg(unix)]
#[test]
fn session_save_never_follows_a_planted_link() {
    use std::os::unix::fs::PermissionsExt;
    let dir = temp_dir("session-planted");
    let session = dir.join("s.json");
    let session_arg = session.to_string_lossy().into_owned();
    let victim = dir.join("victim");
    std::fs::write(&victim, "precious").expect("victim");
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let srv = server(json!({"exchanges": [openai_exchange(&[], openai_text("Hi."))]}));
    let mut child = panto_on(&srv, "chat", &["--session", &session_arg])
        .stdin(Stdio::piped())
        .spawn()
        .expect("spawn panto");
    // Links under every name derived from the pid, planted before the first save.
    for name in [
        format!(".s.json.tmp-{}", child.id()),
        format!("s.json.tmp-{}", child.id()),
        format!(".s.json.tmp.{}", child.id()),
    ] {
        std::os::unix::fs::symlink(&victim, dir.join(name)).expect("plant link");
    }
    let mut stdin = child.stdin.take().expect("stdin pipe");
    stdin.write_all(b"hello\n").expect("write stdin");
    drop(stdin);
    let out = finish(child);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_eq!(
        std::fs::read_to_string(&victim).expect("victim"),
        "precious"
    );
    assert_eq!(mode_of(&victim), 0o644);
    assert_eq!(saved_messages(&session).len(), 2);
    assert!(!std::fs::symlink_metadata(&session)
        .expect("session")
        .file_type()
        .is_symlink());
}

#[cfg(unix)]
#[test]
fn a_session_path_that_is_a_link_updates_its_target() {
    let dir = temp_dir("session-link");
    std::fs::create_dir_all(dir.join("real")).expect("dir");
    let link = dir.join("link.json");
    std::os::unix::fs::symlink("real/s.json", &link).expect("link");
    let link_arg = link.to_string_lossy().into_owned();
    let srv = server(json!({"exchanges": [
        {"response": {"sse": openai_text("Hi.")}, "times": 2},
    ]}));
    for prompt in ["one", "two"] {
        let out = run_on(&srv, &["--session", &link_arg, prompt]);
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    }
    let meta = std::fs::symlink_metadata(&link).expect("link");
    assert!(meta.file_type().is_symlink(), "the link was replaced");
    let target = dir.join("real/s.json");
    assert_eq!(saved_messages(&target).len(), 4);
    assert_eq!(mode_of(&target), 0o600);
    assert_eq!(temp_files(&dir.join("real")), Vec::<String>::new());
}

/// Starts `panto run --json --session SESSION` against a server that stalls after the
/// first event, and returns it once that event arrived, with its stdout lines.
fn stalled_session_run(
    srv: &TestServer,
    session: &Path,
    env: &[(&str, &Path)],
) -> (Child, mpsc::Receiver<String>) {
    let session_arg = session.to_string_lossy().into_owned();
    let mut cmd = panto_on(
        srv,
        "run",
        &["--json", "--session", &session_arg, "long task"],
    );
    for (key, value) in env {
        cmd.env(key, value);
    }
    let mut child = cmd.spawn().expect("spawn panto");
    let stdout = child.stdout.take().expect("stdout pipe");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let first = rx.recv_timeout(HANG_GUARD).expect("a first JSON line");
    assert!(first.contains("message_start"), "{first}");
    (child, rx)
}

fn stalling_server() -> TestServer {
    answering(json!({
        "sse": [openai_chunk(json!({"role": "assistant", "content": "Thinking"}), None)],
        "fault": {"kind": "stall", "after_bytes": 1_000_000}
    }))
}

#[test]
fn a_session_in_use_by_another_process_is_refused() {
    let dir = temp_dir("session-lock");
    let session = dir.join("s.json");
    let srv = stalling_server();
    let (first, _lines) = stalled_session_run(&srv, &session, &[]);
    let session_arg = session.to_string_lossy().into_owned();
    let out = run_json_on(
        &srv,
        &[
            "--idle-timeout-ms",
            "2000",
            "--session",
            &session_arg,
            "second",
        ],
    );
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    let last = json_lines(&out).pop().expect("an error line");
    assert_eq!(last["kind"], "config");
    let message = last["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("in use by another panto process"),
        "{message}"
    );
    assert!(message.contains("s.json"), "{message}");
    signal(first.id(), "INT");
    let out = finish(first);
    assert_eq!(out.status.code(), Some(130), "{}", describe(&out));
    // The first run's turn is what the session holds.
    let messages = saved_messages(&session);
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0].text(), "long task");
}

/// Debug builds only: the pause inside the save is a debug-build test hook.
#[cfg(debug_assertions)]
#[test]
fn a_second_ctrl_c_during_the_save_leaves_no_temporary_file() {
    let dir = temp_dir("session-double-ctrl-c");
    let session = dir.join("s.json");
    let paused = dir.join("paused");
    let srv = stalling_server();
    let (mut child, lines) =
        stalled_session_run(&srv, &session, &[("PANTO_TEST_PAUSE_SAVE", &paused)]);
    signal(child.id(), "INT");
    let saving = poll_until(HANG_GUARD, || {
        paused.exists() || matches!(child.try_wait(), Ok(Some(_)))
    });
    assert!(saving && paused.exists(), "the save never paused");
    assert!(
        !temp_files(&dir).is_empty(),
        "a temporary file is being written"
    );
    signal(child.id(), "INT");
    let out = finish(child);
    assert_eq!(out.status.code(), Some(130), "{}", describe(&out));
    let rest: Vec<Value> = lines
        .iter()
        .map(|l| serde_json::from_str(&l).expect("JSON line"))
        .collect();
    let errors: Vec<&Value> = rest.iter().filter(|l| l["type"] == "error").collect();
    assert_eq!(errors.len(), 1, "{rest:?}");
    assert_eq!(
        rest.last().map(|l| l["kind"].clone()),
        Some(json!("cancelled"))
    );
    assert_eq!(temp_files(&dir), Vec::<String>::new());
    assert!(!session.exists(), "the interrupted save was not completed");
}
