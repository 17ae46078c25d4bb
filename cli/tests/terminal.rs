//! The chat prompt and the terminal-only behaviour, driven through a pseudo-terminal
//! (expectrl): arrows and history across runs, Ctrl-R, a bracketed paste and a `"""`
//! block as one message, Ctrl-C at the prompt and during a turn, `/model`, `exit`, the
//! startup line, `--confirm`, NO_COLOR, and a running tool's progress on the spinner's line.
//!
//! Every step waits for the text it needs (the prompt before typing); the expect
//! timeout is a hang guard only.

mod support;

use std::path::Path;

use expectrl::{Eof, Expect};
use panto_testkit::eventually;
use serde_json::json;
use support::*;

/// The last user message of the last request.
fn last_user_text(srv: &panto_testserver::TestServer) -> String {
    let body = srv.requests().last().expect("a request").body.clone();
    message_texts(&body).pop().unwrap_or_default()
}

const UP: &str = "\x1b[A";
const CTRL_C: &str = "\x03";
const CTRL_R: &str = "\x12";
const CTRL_D: &str = "\x04";

#[test]
fn the_chat_prompt_edits_remembers_and_keeps_going() {
    let home = temp_dir("pty-chat");
    let srv = server(json!({"exchanges": [answer_text("Reply.", 50)]}));
    let base = format!("{}/v1", srv.url());
    let mut p = panto_on_pty(
        &home,
        &["chat", "--base-url", &base, "-m", "first-model"],
        &[],
    );
    p.expect("first-model").unwrap();
    p.expect("new conversation").unwrap();
    p.expect("> ").unwrap();

    p.send("hello there\r").unwrap();
    p.expect("Reply.").unwrap();
    p.expect("> ").unwrap();
    assert_eq!(last_user_text(&srv), "hello there");
    let count = srv.requests().len();

    // Up recalls the line; Enter sends it again.
    p.send(UP).unwrap();
    p.expect("hello there").unwrap();
    p.send("\r").unwrap();
    p.expect("Reply.").unwrap();
    p.expect("> ").unwrap();
    assert_eq!(srv.requests().len(), count + 1);
    assert_eq!(last_user_text(&srv), "hello there");

    // Ctrl-C clears the line and does not quit.
    p.send("thrown away").unwrap();
    p.expect("thrown away").unwrap();
    p.send(CTRL_C).unwrap();
    p.expect("> ").unwrap();
    p.send("kept\r").unwrap();
    p.expect("Reply.").unwrap();
    p.expect("> ").unwrap();
    assert_eq!(last_user_text(&srv), "kept");

    // A bracketed paste is one message, newlines included.
    p.send("\x1b[200~pasted one\npasted two\x1b[201~").unwrap();
    p.expect("pasted two").unwrap();
    p.send("\r").unwrap();
    p.expect("Reply.").unwrap();
    p.expect("> ").unwrap();
    assert_eq!(last_user_text(&srv), "pasted one\npasted two");

    // So is a """ block.
    p.send("\"\"\"\r").unwrap();
    p.send("block a\r").unwrap();
    p.expect("block a").unwrap();
    p.send("block b\r").unwrap();
    p.expect("block b").unwrap();
    p.send("\"\"\"\r").unwrap();
    p.expect("Reply.").unwrap();
    p.expect("> ").unwrap();
    assert_eq!(last_user_text(&srv), "block a\nblock b");

    // /model changes the model of the next turns.
    p.send("/model second-model\r").unwrap();
    p.expect("second-model").unwrap();
    p.expect("> ").unwrap();
    p.send("again\r").unwrap();
    p.expect("Reply.").unwrap();
    p.expect("> ").unwrap();
    assert_eq!(srv.requests().last().unwrap().body["model"], "second-model");

    p.send("exit\r").unwrap();
    p.expect(Eof).unwrap();
    assert_eq!(pty_exit_code(&p), 0);

    // The history outlives the process: Ctrl-R finds an earlier line. --continue
    // resumes the conversation.
    let mut p = panto_on_pty(&home, &["chat", "-c", "--base-url", &base], &[]);
    p.expect("resumed 12 messages").unwrap();
    p.expect("> ").unwrap();
    p.send(CTRL_R).unwrap();
    p.send("pasted").unwrap();
    p.expect("pasted two").unwrap();
    // Enter accepts the found line and sends it.
    p.send("\r").unwrap();
    p.expect("Reply.").unwrap();
    p.expect("> ").unwrap();
    assert_eq!(last_user_text(&srv), "pasted one\npasted two");
    // The whole conversation went along.
    let texts = message_texts(&srv.requests().last().unwrap().body);
    assert_eq!(texts.first().map(String::as_str), Some("hello there"));
    p.send(CTRL_D).unwrap();
    p.expect(Eof).unwrap();
    assert_eq!(pty_exit_code(&p), 0);
}

#[test]
fn ctrl_c_cancels_a_running_turn_and_the_chat_goes_on() {
    let home = temp_dir("pty-cancel");
    let held = vec![openai_chunk(
        json!({"role": "assistant", "content": "Partial"}),
        None,
    )];
    let srv = server(json!({"exchanges": [
        {"response": {"status": 200, "sse": held, "fault": {"kind": "stall", "after_bytes": 0}}},
        answer_text("Afterwards.", 5),
    ]}));
    let base = format!("{}/v1", srv.url());
    let mut p = panto_on_pty(&home, &["chat", "--base-url", &base], &[]);
    p.expect("> ").unwrap();
    p.send("long question\r").unwrap();
    // The turn is running: its request reached the server, which stalls.
    eventually("the request to reach the server", || {
        !srv.requests().is_empty()
    });
    p.send(CTRL_C).unwrap();
    p.expect("cancelled").unwrap();
    p.expect("> ").unwrap();
    p.send("next\r").unwrap();
    p.expect("Afterwards.").unwrap();
    p.expect("> ").unwrap();
    p.send("quit\r").unwrap();
    p.expect(Eof).unwrap();
    assert_eq!(pty_exit_code(&p), 0);
}

#[test]
fn confirm_asks_on_the_terminal() {
    let home = temp_dir("pty-confirm");
    let marker = home.join("ran");
    let srv = server(json!({"exchanges": [
        {"response": {"status": 200, "sse": openai_tool_call("call_1")}},
        {"match": {"body_contains": ["call_1"]}, "response": {"status": 200, "sse": openai_text("Ran it.")}},
        {"response": {"status": 200, "sse": openai_tool_call("call_2")}},
        {"match": {"body_contains": ["declined"]}, "response": {"status": 200, "sse": openai_text("Did not.")}},
    ]}));
    let base = format!("{}/v1", srv.url());
    let tool = format!("weather=touch {}; echo ok", marker.display());
    let mut p = panto_on_pty(
        &home,
        &["--confirm", "--base-url", &base, "--tool", &tool, "w?"],
        &[],
    );
    p.expect("[y/N]").unwrap();
    p.send("y\r").unwrap();
    p.expect("Ran it.").unwrap();
    p.expect(Eof).unwrap();
    assert_eq!(pty_exit_code(&p), 0);
    assert!(marker.exists());
    std::fs::remove_file(&marker).unwrap();

    let mut p = panto_on_pty(
        &home,
        &["--confirm", "--base-url", &base, "--tool", &tool, "w?"],
        &[],
    );
    p.expect("[y/N]").unwrap();
    p.send("n\r").unwrap();
    p.expect("Did not.").unwrap();
    p.expect(Eof).unwrap();
    assert_eq!(pty_exit_code(&p), 0);
    assert!(!marker.exists(), "a declined call ran");
}

#[test]
fn no_color_and_dumb_terminals_get_no_escape_sequences() {
    let home = temp_dir("pty-color");
    let srv = server(json!({"exchanges": [answer_text("Plain.", 10)]}));
    let base = format!("{}/v1", srv.url());
    let output = |env: &[(&str, &str)]| {
        let mut p = panto_on_pty(&home, &["--base-url", &base, "hi"], env);
        let seen = p.expect(Eof).unwrap();
        let text = String::from_utf8_lossy(seen.get(0).unwrap_or_default()).into_owned();
        assert_eq!(pty_exit_code(&p), 0, "{text}");
        text
    };
    // On a colour terminal the usage line is dimmed: the check can tell.
    assert!(output(&[]).contains('\x1b'));
    for env in [[("NO_COLOR", "1")], [("TERM", "dumb")]] {
        let text = output(&env);
        assert!(text.contains("Plain."), "{env:?}: {text}");
        assert!(!text.contains('\x1b'), "{env:?}: {text:?}");
    }
}

/// A line typed while a turn runs steers it: taken at once, sent after the running
/// tool's result and before the model's next answer, which answers it.
#[test]
fn a_line_typed_during_a_turn_steers_it() {
    let home = temp_dir("pty-steer");
    let started = home.join("started");
    let release = home.join("release");
    let srv = server(json!({"exchanges": [
        {"response": {"status": 200, "sse": openai_tool_call("call_1")}},
        {"match": {"body_contains": ["in Celsius please"]},
         "response": {"status": 200, "sse": openai_text("18 degrees Celsius.")}},
    ]}));
    let base = format!("{}/v1", srv.url());
    let tool = format!(
        "weather=touch {}; while [ ! -e {} ]; do sleep 0.02; done; echo sunny",
        started.display(),
        release.display()
    );
    let mut p = panto_on_pty(&home, &["chat", "--base-url", &base, "--tool", &tool], &[]);
    p.expect("> ").unwrap();
    p.send("Weather?\r").unwrap();
    eventually("the tool to start", || started.exists());
    p.send("in Celsius please\r").unwrap();
    // Taken while the tool still runs.
    p.expect("noted").unwrap();
    std::fs::write(&release, "").unwrap();
    p.expect("your message went in: in Celsius please").unwrap();
    p.expect("18 degrees Celsius.").unwrap();
    p.expect("> ").unwrap();
    let requests = srv.requests();
    assert_eq!(requests.len(), 2);
    let messages = requests[1].body["messages"].as_array().unwrap().clone();
    let roles: Vec<&str> = messages.iter().filter_map(|m| m["role"].as_str()).collect();
    assert_eq!(roles, ["user", "assistant", "tool", "user"], "{messages:?}");
    assert_eq!(
        message_texts(&requests[1].body).last().map(String::as_str),
        Some("in Celsius please")
    );
    p.send("exit\r").unwrap();
    p.expect(Eof).unwrap();
    assert_eq!(pty_exit_code(&p), 0);
}

/// A blocking `weather` tool for the steering tests: it announces itself with
/// `started`, waits for `release`, then removes both (so a later call waits again).
fn blocking_tool(home: &Path) -> (String, std::path::PathBuf, std::path::PathBuf) {
    let started = home.join("started");
    let release = home.join("release");
    let tool = format!(
        "weather=touch {s}; while [ ! -e {r} ]; do sleep 0.02; done; rm -f {s} {r}; echo sunny",
        s = started.display(),
        r = release.display()
    );
    (tool, started, release)
}

/// A steering line the turn takes but never delivers (Ctrl-C cancels the turn while
/// its tool runs) is said to be lost, not dropped in silence after "noted".
#[test]
fn a_noted_line_the_turn_did_not_deliver_is_reported() {
    let home = temp_dir("pty-steer-undelivered");
    let (tool, started, _release) = blocking_tool(&home);
    let srv = server(json!({"exchanges": [
        {"response": {"status": 200, "sse": openai_tool_call("call_1")}},
        answer_text("Afterwards.", 5),
    ]}));
    let base = format!("{}/v1", srv.url());
    let mut p = panto_on_pty(&home, &["chat", "--base-url", &base, "--tool", &tool], &[]);
    p.expect("> ").unwrap();
    p.send("Weather?\r").unwrap();
    eventually("the tool to start", || started.exists());
    p.send("in Celsius please\r").unwrap();
    p.expect("noted").unwrap();
    p.send(CTRL_C).unwrap();
    p.expect("not delivered").unwrap();
    p.expect("in Celsius please").unwrap();
    p.expect("cancelled").unwrap();
    p.expect("> ").unwrap();
    assert_eq!(srv.requests().len(), 1);
    p.send("exit\r").unwrap();
    p.expect(Eof).unwrap();
    assert_eq!(pty_exit_code(&p), 0);
}

/// Ctrl-D typed while a turn runs does not end steering: a line typed after it still
/// steers the turn.
#[test]
fn ctrl_d_during_a_turn_leaves_steering_on() {
    let home = temp_dir("pty-steer-ctrl-d");
    let (tool, started, release) = blocking_tool(&home);
    let srv = server(json!({"exchanges": [
        {"response": {"status": 200, "sse": openai_tool_call("call_1")}},
        {"match": {"body_contains": ["in Celsius please"]},
         "response": {"status": 200, "sse": openai_text("18 degrees Celsius.")}},
    ]}));
    let base = format!("{}/v1", srv.url());
    let mut p = panto_on_pty(&home, &["chat", "--base-url", &base, "--tool", &tool], &[]);
    p.expect("> ").unwrap();
    p.send("Weather?\r").unwrap();
    eventually("the tool to start", || started.exists());
    p.send(CTRL_D).unwrap();
    p.send("in Celsius please\r").unwrap();
    p.expect("noted").unwrap();
    std::fs::write(&release, "").unwrap();
    p.expect("18 degrees Celsius.").unwrap();
    p.expect("> ").unwrap();
    p.send("exit\r").unwrap();
    p.expect(Eof).unwrap();
    assert_eq!(pty_exit_code(&p), 0);
}

/// On a terminal, a running MCP tool's progress replaces the spinner's label on one
/// line of stderr ("fx__report: 50% step 1"), redrawn in place, and the result line
/// follows.
#[test]
fn a_running_tools_progress_is_drawn_on_the_spinners_line() {
    let home = temp_dir("pty-progress");
    let srv = server(json!({"exchanges": [
        {"response": {"status": 200, "sse": panto_testserver::script::openai_tool_calls_events(
            &[("c", "fx__report", r#"{"steps":2,"interval_ms":300}"#)])}},
        {"response": {"status": 200, "sse": openai_text("Reported.")}},
    ]}));
    let base = format!("{}/v1", srv.url());
    let mcp = format!(
        "fx={} {} --progress-tools",
        panto_testkit::mcp::python(),
        panto_testkit::mcp::fixture()
    );
    let mut p = panto_on_pty(&home, &["--base-url", &base, "--mcp", &mcp, "go"], &[]);
    let seen = p.expect(Eof).unwrap();
    let text = String::from_utf8_lossy(seen.get(0).unwrap_or_default()).into_owned();
    // Each report is drawn right after a clear-line, as the spinner is: one line,
    // redrawn in place, never a new line per update.
    for report in ["fx__report: 50% step 1", "fx__report: 100% step 2"] {
        let at = text
            .find(report)
            .unwrap_or_else(|| panic!("{report}: {text:?}"));
        let line_start = text[..at].rfind("\r\x1b[2K").expect("a clear-line");
        assert!(
            !text[line_start..at].contains('\n'),
            "{report} not on the spinner's line: {text:?}"
        );
    }
    let last = text.find("fx__report: 100% step 2").unwrap();
    let result = text.find("reported 2 steps").expect("the result line");
    assert!(
        last < result && result < text.find("Reported.").unwrap(),
        "{text:?}"
    );
    assert_eq!(pty_exit_code(&p), 0);
}
