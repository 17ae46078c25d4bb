//! `panto run --provider openai-responses` against the scripted server: the request goes
//! to `<base>/responses` with the key as a bearer token, the answer lands on stdout, a
//! shell tool's call goes back with the reasoning item before it byte for byte, and
//! `--compat vllm` / `--store` shape the request as documented.

mod support;

use serde_json::{json, Value};
use support::*;

const PATH: &str = "/v1/responses";
const SEALED: &str =
    "gAAAAABpANTO+enc/0wQ2tT9yZ3uX1Kp7Lr4Vh8Nm2Bq6Cs5Df0Gj3Hk7Jl1Mn9Pq4Rs8Tu2Vw6Xy0Za5bc==";

/// A response of the fixtures written from the documented stream.
fn fixture(name: &str) -> Value {
    let path = format!(
        "{}/../tests/fixtures/responses/{name}.sse",
        env!("CARGO_MANIFEST_DIR")
    );
    let body = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    json!({"headers": {"content-type": "text/event-stream"}, "body": body})
}

fn panto_run(
    home: &std::path::Path,
    base: &str,
    extra: &[&str],
    prompt: &str,
) -> std::process::Output {
    let mut args = vec![
        "run",
        "--provider",
        "openai-responses",
        "--base-url",
        base,
        "--api-key-env",
        "MY_OPENAI_KEY",
        "-m",
        "gpt-5-mini",
    ];
    args.extend_from_slice(extra);
    args.push(prompt);
    run(panto_in(home, &args).env("MY_OPENAI_KEY", "sk-cli-responses-0001"))
}

#[test]
fn run_with_the_responses_provider_streams_the_answer() {
    let home = temp_dir("responses-run");
    let srv = server(json!({"exchanges": [
        {"match": {"method": "POST", "path": PATH,
                   "headers": {"authorization": "Bearer sk-cli-responses-0001"}},
         "response": fixture("text")},
    ]}));
    let base = format!("{}/v1", srv.url());
    let out = panto_run(&home, &base, &["-s", "be brief"], "say hello");
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_eq!(stdout_of(&out), "Hello, world!\n");
    let body = &srv.requests()[0].body;
    assert_eq!(body["instructions"], "be brief");
    assert_eq!(body["store"], false);
    assert_eq!(body["include"], json!(["reasoning.encrypted_content"]));
    assert_eq!(
        body["input"],
        json!([{"type": "message", "role": "user", "content": "say hello"}])
    );
}

#[test]
fn a_shell_tool_runs_and_the_reasoning_goes_back_before_its_call() {
    let home = temp_dir("responses-tool");
    let srv = server(json!({"exchanges": [
        {"match": {"path": PATH}, "response": fixture("reasoning-tool")},
        {"match": {"path": PATH,
                   "body": {"/input/1/id": "rs_rt1", "/input/1/encrypted_content": SEALED,
                            "/input/2/type": "function_call", "/input/2/call_id": "call_rt1",
                            "/input/3/type": "function_call_output", "/input/3/call_id": "call_rt1"},
                   "body_contains": [SEALED]},
         "response": fixture("reasoning-tool-answer")},
    ]}));
    let base = format!("{}/v1", srv.url());
    let out = panto_run(&home, &base, &["--tool", "weather=echo sunny"], "weather?");
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_eq!(stdout_of(&out), "It is 18°C in Paris.\n");
    let reqs = srv.requests();
    assert!(reqs[1].matched, "{:?}", reqs[1].mismatch);
    assert!(
        reqs[1].body["input"][3]["output"]
            .as_str()
            .unwrap()
            .contains("sunny"),
        "{}",
        reqs[1].body
    );
}

#[test]
fn compat_vllm_leaves_out_include_and_store_chains_by_id() {
    let home = temp_dir("responses-flags");
    let srv = server(json!({"exchanges": [
        {"match": {"path": PATH}, "response": fixture("text")},
        {"match": {"path": PATH}, "response": fixture("text")},
    ]}));
    let base = format!("{}/v1", srv.url());
    let out = panto_run(&home, &base, &["--compat", "vllm"], "hi");
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let out = panto_run(&home, &base, &["--store"], "hi");
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let reqs = srv.requests();
    assert!(reqs[0].body.get("include").is_none(), "{}", reqs[0].body);
    assert_eq!(reqs[0].body["store"], false);
    assert_eq!(reqs[1].body["store"], true);
    assert!(reqs[1].body.get("include").is_none(), "{}", reqs[1].body);
}
