//! End-to-end tests of the conversation controls in the CLI, against the scripted
//! provider server: `--reasoning` (and a profile's `reasoning`) in the request,
//! `/compact` in `chat`, and `chat`'s automatic compaction with its note.
//!
//! No test sleeps to synchronize; every timeout is a hang guard only.

mod support;

use std::path::PathBuf;

use panto_testserver::{Scenario, TestServer};
use serde_json::{json, Value};
use support::*;

fn scenario_file(name: &str) -> TestServer {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/server/scenarios")
        .join(name);
    TestServer::start(Scenario::from_file(&path).expect("scenario loads")).expect("server starts")
}

fn anthropic_text(text: &str) -> Value {
    json!({"times": 4, "response": {"status": 200, "sse": [
        {"event": "message_start", "data": {"type": "message_start", "message": {
            "id": "msg_1", "type": "message", "role": "assistant", "model": "m",
            "content": [], "stop_reason": null, "usage": {"input_tokens": 3, "output_tokens": 1}}}},
        {"event": "content_block_start", "data": {"type": "content_block_start", "index": 0,
            "content_block": {"type": "text", "text": ""}}},
        {"event": "content_block_delta", "data": {"type": "content_block_delta", "index": 0,
            "delta": {"type": "text_delta", "text": text}}},
        {"event": "content_block_stop", "data": {"type": "content_block_stop", "index": 0}},
        {"event": "message_delta", "data": {"type": "message_delta",
            "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 2}}},
        {"event": "message_stop", "data": {"type": "message_stop"}}
    ]}})
}

#[test]
fn reasoning_flag_reaches_each_providers_request_shape() {
    let home = temp_dir("reasoning");
    let srv = server(json!({"exchanges": [answer_text("Done.", 4)]}));
    let base = format!("{}/v1", srv.url());
    let out = run(&mut panto_in(
        &home,
        &["run", "--base-url", &base, "--reasoning", "low", "think"],
    ));
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let body = srv.requests().pop().expect("a request").body;
    assert_eq!(body["reasoning_effort"], "low", "{body}");

    // Without the flag nothing is sent.
    let out = run(&mut panto_in(&home, &["run", "--base-url", &base, "plain"]));
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let body = srv.requests().pop().expect("a request").body;
    assert!(body.get("reasoning_effort").is_none(), "{body}");

    // A word that is not a level is refused before any request.
    let before = srv.requests().len();
    let out = run(&mut panto_in(
        &home,
        &["run", "--base-url", &base, "--reasoning", "extreme", "x"],
    ));
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert_eq!(srv.requests().len(), before);

    // Anthropic: a thinking budget, with max_tokens above it.
    let srv = server(json!({"exchanges": [anthropic_text("Done.")]}));
    let out = run(&mut panto_in(
        &home,
        &[
            "run",
            "--provider",
            "anthropic",
            "--base-url",
            &srv.url(),
            "--reasoning",
            "high",
            "think hard",
        ],
    ));
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let body = srv.requests().pop().expect("a request").body;
    assert_eq!(body["thinking"]["type"], "enabled", "{body}");
    assert_eq!(body["thinking"]["budget_tokens"], 16384, "{body}");
    assert!(body["max_tokens"].as_u64().unwrap() > 16384, "{body}");

    // --reasoning-budget sets the budget (and implies a level); a profile's level too.
    let out = run(&mut panto_in(
        &home,
        &[
            "run",
            "--provider",
            "anthropic",
            "--base-url",
            &srv.url(),
            "--reasoning-budget",
            "2000",
            "think",
        ],
    ));
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let body = srv.requests().pop().expect("a request").body;
    assert_eq!(body["thinking"]["budget_tokens"], 2000, "{body}");

    std::fs::create_dir_all(home.join("config/panto")).unwrap();
    std::fs::write(
        home.join("config/panto/config.toml"),
        format!(
            "[profiles.deep]\nprovider = \"anthropic\"\nbase_url = \"{}\"\nreasoning = \"low\"\n",
            srv.url()
        ),
    )
    .unwrap();
    let out = run(&mut panto_in(&home, &["run", "-p", "deep", "think"]));
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let body = srv.requests().pop().expect("a request").body;
    assert_eq!(body["thinking"]["budget_tokens"], 1024, "{body}");
}

#[test]
fn compact_command_summarizes_and_the_next_turn_carries_the_summary() {
    let home = temp_dir("compact-cmd");
    let srv = scenario_file("conversation-compaction.json");
    let base = format!("{}/v1", srv.url());
    let session = home.join("talk.json");
    let out = run_with_stdin(
        &mut panto_in(
            &home,
            &[
                "chat",
                "--base-url",
                &base,
                "--session",
                session.to_str().unwrap(),
            ],
        ),
        "What is the capital of France?\n/compact 1\nAnd then?\n",
    );
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let err = stderr_of(&out);
    assert!(
        err.contains("compacted the conversation: 2 → "),
        "no compaction note: {}",
        describe(&out)
    );
    // Three requests: turn 1, the summary, turn 2 (which the server matched only if it
    // carried the summary).
    let requests = srv.requests();
    assert_eq!(requests.len(), 3, "{}", describe(&out));
    // The saved conversation is the compacted one.
    let saved = std::fs::read_to_string(&session).unwrap();
    assert!(
        saved.contains("[Summary of the earlier conversation]"),
        "{saved}"
    );
    assert!(!saved.contains("What is the capital of France?"), "{saved}");
}

#[test]
fn compact_with_nothing_older_says_so_and_sends_nothing() {
    let home = temp_dir("compact-nothing");
    let srv = server(json!({"exchanges": [answer_text("Hi.", 2)]}));
    let base = format!("{}/v1", srv.url());
    let out = run_with_stdin(
        &mut panto_in(&home, &["chat", "--base-url", &base]),
        "hello\n/compact\n/compact zero\n",
    );
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let err = stderr_of(&out);
    assert!(err.contains("nothing to compact (2 messages"), "{err}");
    assert!(err.contains("/compact takes a number"), "{err}");
    assert_eq!(srv.requests().len(), 1);
}

#[test]
fn chat_compacts_automatically_past_the_threshold_and_says_so() {
    let home = temp_dir("compact-auto");
    let srv = scenario_file("conversation-compaction.json");
    let base = format!("{}/v1", srv.url());
    // Turn 1 reports 100 input tokens; the threshold is below it, so the second turn
    // compacts first.
    let out = run_with_stdin(
        &mut panto_in(
            &home,
            &[
                "chat",
                "--base-url",
                &base,
                "--compact-at",
                "50",
                "--compact-keep",
                "1",
            ],
        ),
        "What is the capital of France?\nAnd then?\n",
    );
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert!(
        stderr_of(&out).contains("panto: compacted the conversation: "),
        "{}",
        describe(&out)
    );
    assert_eq!(srv.requests().len(), 3, "{}", describe(&out));

    // `--compact-at 0` turns it off: the second turn is sent uncompacted, which this
    // scenario does not answer (its third exchange wants the summary).
    let srv = scenario_file("conversation-compaction.json");
    let base = format!("{}/v1", srv.url());
    let out = run_with_stdin(
        &mut panto_in(
            &home,
            &[
                "chat",
                "--base-url",
                &base,
                "--compact-at",
                "0",
                "--compact-keep",
                "1",
            ],
        ),
        "What is the capital of France?\nAnd then?\n",
    );
    assert!(!stderr_of(&out).contains("compacted"), "{}", describe(&out));
    let second = srv.requests().pop().expect("requests");
    assert!(
        !second
            .body
            .to_string()
            .contains("[Summary of the earlier conversation]"),
        "{}",
        second.body
    );
}

#[test]
fn run_json_prints_history_compacted_as_its_canonical_line() {
    let home = temp_dir("compact-json");
    let srv = scenario_file("conversation-compaction.json");
    let base = format!("{}/v1", srv.url());
    let session = home.join("s.json");
    let s = session.to_str().unwrap();
    let first = run(&mut panto_in(
        &home,
        &[
            "run",
            "--base-url",
            &base,
            "--session",
            s,
            "What is the capital of France?",
        ],
    ));
    assert_eq!(first.status.code(), Some(0), "{}", describe(&first));
    let out = run(&mut panto_in(
        &home,
        &[
            "run",
            "--json",
            "--base-url",
            &base,
            "--session",
            s,
            "--compact-at",
            "50",
            "--compact-keep",
            "1",
            "And then?",
        ],
    ));
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let line = stdout_of(&out)
        .lines()
        .find(|l| l.contains("history_compacted"))
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .unwrap_or_else(|| panic!("no history_compacted line: {}", describe(&out)));
    assert_eq!(line["type"], "history_compacted");
    assert_eq!(line["messages_before"], 3, "{line}");
    assert!(line["tokens_before"].as_u64().unwrap() > 0, "{line}");
}
