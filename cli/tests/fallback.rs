//! `panto run --fallback PROVIDER:MODEL`: a 503 of the run's model goes to the fallback
//! within the turn (of the run's own provider: its endpoint and key; of another: that
//! provider's `*_BASE_URL` and key variable); an authentication error does not fall back;
//! a malformed flag is a usage error.

mod support;

use std::path::PathBuf;
use std::process::Output;

use serde_json::{json, Value};
use support::{describe, json_lines, openai_text, panto_in, stderr_of, stdout_of, temp_dir};

fn dir() -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| temp_dir("fallback")).clone()
}

fn panto(args: &[&str]) -> Output {
    support::run(&mut panto_in(&dir().join("home"), args))
}

fn by_model(path: &str, model: &str, response: Value) -> Value {
    json!({"match": {"method": "POST", "path": path, "body": {"/model": model}}, "response": response})
}

fn failing(status: u16) -> Value {
    json!({"status": status, "json": {"error": {"type": "server_error", "message": "scripted"}}})
}

#[test]
fn a_503_falls_back_to_another_model_of_the_same_endpoint() {
    let srv = support::server(json!({"exchanges": [
        by_model("/v1/chat/completions", "m", failing(503)),
        by_model("/v1/chat/completions", "m-small",
                 json!({"status": 200, "sse": openai_text("from the fallback")})),
    ]}));
    let base = format!("{}/v1", srv.url());
    let args = [
        "run",
        "--base-url",
        &base,
        "--api-key",
        "sk-cli-0123456789",
        "-m",
        "m",
        "--retries",
        "0",
        "--fallback",
        "openai:m-small",
    ];
    let out = panto(&[&args[..], &["--json", "hi"]].concat());
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let lines = json_lines(&out);
    let fell: Vec<&Value> = lines
        .iter()
        .filter(|l| l["type"] == "provider_fallback")
        .collect();
    assert_eq!(fell.len(), 1, "{}", stdout_of(&out));
    assert_eq!(
        (
            &fell[0]["from_model"],
            &fell[0]["to_model"],
            &fell[0]["status"]
        ),
        (&json!("m"), &json!("m-small"), &json!(503))
    );
    let done = lines.last().unwrap();
    assert_eq!(done["type"], "message_complete");
    assert_eq!(
        (&done["text"], &done["model"]),
        (&json!("from the fallback"), &json!("m-small"))
    );
    // The same endpoint and key.
    let requests = srv.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        requests[1].headers.get("authorization").map(String::as_str),
        Some("Bearer sk-cli-0123456789")
    );

    // On a terminal-less stderr, a human run says it fell back.
    srv.set_scenario(
        panto_testserver::Scenario::from_value(&json!({"exchanges": [
            by_model("/v1/chat/completions", "m", failing(503)),
            by_model("/v1/chat/completions", "m-small",
                     json!({"status": 200, "sse": openai_text("again")})),
        ]}))
        .unwrap(),
    );
    let out = panto(&[&args[..], &["hi"]].concat());
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert!(
        stderr_of(&out).contains("falling back to openai:m-small"),
        "{}",
        stderr_of(&out)
    );
}

#[test]
fn another_provider_takes_its_base_url_and_key_variables() {
    let srv = support::server(json!({"exchanges": [
        by_model("/v1/chat/completions", "m", failing(503)),
        by_model("/v1/messages", "claude-x", json!({"status": 200, "sse": [
            {"event": "message_start", "data": {"type": "message_start", "message": {
                "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x",
                "content": [], "stop_reason": null,
                "usage": {"input_tokens": 5, "output_tokens": 1}}}},
            {"event": "content_block_start", "data": {"type": "content_block_start", "index": 0,
                "content_block": {"type": "text", "text": ""}}},
            {"event": "content_block_delta", "data": {"type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": "from claude"}}},
            {"event": "content_block_stop", "data": {"type": "content_block_stop", "index": 0}},
            {"event": "message_delta", "data": {"type": "message_delta",
                "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 2}}},
            {"event": "message_stop", "data": {"type": "message_stop"}}
        ]})),
    ]}));
    let base = format!("{}/v1", srv.url());
    let out = support::run(
        panto_in(
            &dir().join("home"),
            &[
                "run",
                "--base-url",
                &base,
                "--api-key",
                "k-openai",
                "-m",
                "m",
                "--retries",
                "0",
                "--fallback",
                "anthropic:claude-x",
                "--json",
                "hi",
            ],
        )
        .env("ANTHROPIC_BASE_URL", srv.url())
        .env("ANTHROPIC_API_KEY", "sk-ant-0123456789"),
    );
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let done = json_lines(&out).pop().unwrap();
    assert_eq!(
        (&done["text"], &done["model"]),
        (&json!("from claude"), &json!("claude-x"))
    );
    let requests = srv.requests();
    assert_eq!(
        requests[1].headers.get("x-api-key").map(String::as_str),
        Some("sk-ant-0123456789")
    );
    assert!(!stdout_of(&out).contains("sk-ant-0123456789"));
}

#[test]
fn an_authentication_error_does_not_fall_back() {
    let srv = support::server(json!({"exchanges": [
        by_model("/v1/chat/completions", "m",
                 json!({"status": 401, "json": {"error": {"type": "invalid_api_key", "message": "bad key"}}})),
        by_model("/v1/chat/completions", "m-small",
                 json!({"status": 200, "sse": openai_text("never")})),
    ]}));
    let base = format!("{}/v1", srv.url());
    let out = panto(&[
        "run",
        "--base-url",
        &base,
        "--api-key",
        "k",
        "-m",
        "m",
        "--fallback",
        "openai:m-small",
        "--json",
        "hi",
    ]);
    assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
    assert!(!stdout_of(&out).contains("provider_fallback"));
    assert_eq!(srv.requests().len(), 1);
}

#[test]
fn a_malformed_fallback_is_a_usage_error() {
    for bad in ["openai", "mistral:x", "openai:"] {
        let out = panto(&["run", "--api-key", "k", "--fallback", bad, "hi"]);
        assert_eq!(out.status.code(), Some(2), "{bad}: {}", describe(&out));
        assert!(
            stderr_of(&out).contains("--fallback"),
            "{bad}: {}",
            stderr_of(&out)
        );
    }
}
