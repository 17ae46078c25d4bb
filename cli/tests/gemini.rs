//! `panto run --provider gemini` against the scripted server: the request goes to
//! `/v1beta/models/{model}:streamGenerateContent?alt=sse` with the key in
//! `x-goog-api-key` (never in the URL), the answer lands on stdout, a tool runs through
//! the CLI's shell tools, and the key rule holds for GEMINI_API_KEY / GEMINI_BASE_URL.

mod support;

use std::path::Path;
use std::process::Command;

use serde_json::{json, Value};
use support::*;

const PATH: &str = "/v1beta/models/gemini-2.5-flash:streamGenerateContent";

fn frame(parts: Value, finish: Option<&str>) -> Value {
    let mut candidate = json!({"content": {"role": "model", "parts": parts}, "index": 0});
    if let Some(f) = finish {
        candidate["finishReason"] = json!(f);
    }
    json!({"data": {"candidates": [candidate], "modelVersion": "gemini-2.5-flash",
        "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 2}}})
}

/// `panto run --provider gemini -m gemini-2.5-flash` with `args` after (the prompt last).
fn gemini_run(home: &Path, args: &[&str]) -> Command {
    let mut all = vec!["run", "--provider", "gemini", "-m", "gemini-2.5-flash"];
    all.extend_from_slice(args);
    panto_in(home, &all)
}

fn text_answer(text: &str) -> Value {
    json!({"status": 200, "sse": [
        frame(json!([{"text": text}]), None),
        frame(json!([{"text": "", "thoughtSignature": "c2lnLXRleHQ="}]), Some("STOP")),
    ]})
}

#[test]
fn run_with_the_gemini_provider_streams_the_answer() {
    let home = temp_dir("gemini-run");
    let key = "AIza-cli-test-key-0001";
    let srv = server(json!({"exchanges": [
        {"match": {"method": "POST", "path": PATH, "headers": {"x-goog-api-key": key}},
         "response": text_answer("Paris.")},
    ]}));
    let out = run(gemini_run(
        &home,
        &[
            "--base-url",
            &srv.url(),
            "--api-key-env",
            "MY_GEMINI_KEY",
            "-s",
            "be brief",
            "capital of France?",
        ],
    )
    .env("MY_GEMINI_KEY", key));
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_eq!(stdout_of(&out), "Paris.\n");
    let request = srv.requests().pop().expect("a request");
    assert_eq!(request.query.as_deref(), Some("alt=sse"));
    assert!(!request.path.contains(key) && !request.query.unwrap().contains(key));
    assert_eq!(
        request.body["systemInstruction"],
        json!({"parts": [{"text": "be brief"}]})
    );
    assert_eq!(
        request.body["contents"],
        json!([{"role": "user", "parts": [{"text": "capital of France?"}]}])
    );
}

#[test]
fn a_shell_tool_runs_and_its_signature_goes_back_on_the_call() {
    let home = temp_dir("gemini-tool");
    let call = json!({"status": 200, "sse": [frame(
        json!([{"functionCall": {"name": "echo_city", "args": {"city": "Paris"}},
                "thoughtSignature": "c2lnLWNhbGw="}]),
        Some("STOP"),
    )]});
    let srv = server(json!({"exchanges": [
        {"match": {"path": PATH}, "response": call},
        {"match": {"path": PATH, "body": {"/contents/1/parts/0/thoughtSignature": "c2lnLWNhbGw="}},
         "response": text_answer("Done.")},
    ]}));
    let out = run(&mut gemini_run(
        &home,
        &[
            "--base-url",
            &srv.url(),
            "--tool",
            "echo_city=echo sunny",
            "weather?",
        ],
    ));
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_eq!(stdout_of(&out), "Done.\n");
    let body = &srv.requests()[1].body;
    assert_eq!(
        body["contents"][2]["parts"][0]["functionResponse"]["name"],
        "echo_city"
    );
    assert!(
        body["contents"][2]["parts"][0]["functionResponse"]["response"]["output"]
            .as_str()
            .unwrap()
            .contains("sunny"),
        "{body}"
    );
}

#[test]
fn gemini_api_key_goes_only_with_gemini_base_url() {
    let home = temp_dir("gemini-key");
    let key = "AIza-env-secret-0002";
    let srv = server(json!({"exchanges": [
        {"times": 4, "match": {"path": PATH}, "response": text_answer("Hi.")},
    ]}));
    // A command-line base URL gets no key from the environment.
    let out = run(gemini_run(&home, &["--base-url", &srv.url(), "hi"]).env("GEMINI_API_KEY", key));
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert!(!srv.requests()[0].headers.contains_key("x-goog-api-key"));
    // GEMINI_BASE_URL beside GEMINI_API_KEY ties them.
    let out = run(gemini_run(&home, &["hi"])
        .env("GEMINI_API_KEY", key)
        .env("GEMINI_BASE_URL", srv.url()));
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_eq!(srv.requests()[1].headers["x-goog-api-key"], key);
}
