//! `panto tokens` (the provider's count endpoint, the estimate, `--json`) and
//! `--max-tool-calls` (the turn fails with kind `tool`, none of the calls runs).

mod support;

use std::path::PathBuf;
use std::process::Output;

use serde_json::json;
use support::{describe, openai_chunk, panto_in, stderr_of, stdout_of, temp_dir};

fn dir() -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| temp_dir("production")).clone()
}

fn panto(args: &[&str]) -> Output {
    support::run(&mut panto_in(&dir().join("home"), args))
}

#[test]
fn tokens_asks_the_providers_count_endpoint() {
    let srv = support::server(json!({"exchanges": [
        {"match": {"path": "/v1/messages/count_tokens", "body_contains": ["How long is this?"]},
         "times": 2,
         "response": {"status": 200, "json": {"input_tokens": 42}}}
    ]}));
    let url = srv.url();
    let base = [
        "tokens",
        "--provider",
        "anthropic",
        "--base-url",
        &url,
        "--api-key",
        "k",
    ];
    let out = panto(&[&base[..], &["How", "long", "is", "this?"]].concat());
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_eq!(stdout_of(&out), "42\n");
    let out = panto(&[&base[..], &["--json", "How long is this?"]].concat());
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_eq!(stdout_of(&out), "{\"tokens\":42,\"estimated\":false}\n");
    assert_eq!(srv.requests().len(), 2);
}

#[test]
fn tokens_estimates_for_chat_completions_and_sends_nothing() {
    let srv = support::server(json!({"exchanges": []}));
    let base = format!("{}/v1", srv.url());
    let out = panto(&[
        "tokens",
        "--base-url",
        &base,
        "--api-key",
        "k",
        "-m",
        "m",
        "hello",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let line = stdout_of(&out);
    assert!(line.ends_with(" (estimated)\n"), "{line}");
    assert!(line.split(' ').next().unwrap().parse::<u64>().unwrap() > 0);
    assert!(srv.requests().is_empty());
}

#[test]
fn max_tool_calls_fails_the_turn_with_kind_tool() {
    let calls = |ids: &[&str]| {
        let mut sse = vec![openai_chunk(
            json!({"role": "assistant", "content": ""}),
            None,
        )];
        for (i, id) in ids.iter().enumerate() {
            sse.push(openai_chunk(
                json!({"tool_calls": [{"index": i, "id": id, "type": "function",
                    "function": {"name": "probe", "arguments": "{}"}}]}),
                None,
            ));
        }
        sse.push(openai_chunk(json!({}), Some("tool_calls")));
        sse.push(json!({"data": "[DONE]"}));
        json!({"status": 200, "sse": sse})
    };
    let srv = support::server(json!({"exchanges": [{"response": calls(&["c1", "c2"])}]}));
    let base = format!("{}/v1", srv.url());
    let marker = dir().join("probe-ran");
    let tool = format!("probe=touch {}", marker.display());
    let out = panto(&[
        "run",
        "--base-url",
        &base,
        "--api-key",
        "k",
        "-m",
        "m",
        "--tool",
        &tool,
        "--max-tool-calls",
        "1",
        "go",
    ]);
    assert_eq!(out.status.code(), Some(70), "{}", describe(&out));
    assert!(
        stderr_of(&out).contains("max_tool_calls (1)"),
        "{}",
        stderr_of(&out)
    );
    assert!(!marker.exists(), "no call of the refused step ran");
    assert_eq!(srv.requests().len(), 1);
}
