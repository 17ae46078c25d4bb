//! `panto run --schema FILE`: the schema reaches the provider, stdout holds the
//! validated JSON on one line (also after a repair, whose failed answer never reaches
//! stdout), `--json` carries `output` and `output_repair`, and a refusal, an invalid
//! answer or a bad schema file exit non-zero naming the error kind.

mod support;

use std::path::PathBuf;
use std::process::Output;

use panto_testserver::TestServer;
use serde_json::{json, Value};
use support::{describe, json_lines, openai_chunk, panto_in, stderr_of, stdout_of, temp_dir};

fn dir() -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| temp_dir("schema")).clone()
}

fn panto(args: &[&str]) -> Output {
    support::run(&mut panto_in(&dir().join("home"), args))
}

/// An OpenAI response answering `text` (or refusing with it).
fn answer(text: &str, refusal: bool) -> Value {
    let key = if refusal { "refusal" } else { "content" };
    json!({"status": 200, "sse": [
        openai_chunk(json!({"role": "assistant", key: text}), None),
        openai_chunk(json!({}), Some("stop")),
        {"data": "[DONE]"}
    ]})
}

/// A server that answers in turn with each of `answers` (text, refused?), each request
/// required to ask for the schema in strict mode.
fn server(answers: &[(&str, bool)]) -> TestServer {
    let exchanges: Vec<Value> = answers
        .iter()
        .map(|(text, refusal)| {
            json!({"match": {"body": {"/response_format/type": "json_schema",
                                      "/response_format/json_schema/strict": true}},
                   "response": answer(text, *refusal)})
        })
        .collect();
    support::server(json!({ "exchanges": exchanges }))
}

/// A schema file of its own for each run: tests run in parallel, and a file rewritten
/// while another panto reads it would be half a schema.
fn schema_file() -> PathBuf {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let path = dir().join(format!("city-{n}.json"));
    std::fs::write(
        &path,
        json!({"type": "object", "properties": {"city": {"type": "string"},
               "population": {"type": "integer"}}, "required": ["city"]})
        .to_string(),
    )
    .unwrap();
    path
}

fn run(srv: &TestServer, extra: &[&str]) -> Output {
    let base = format!("{}/v1", srv.url());
    let schema = schema_file();
    let mut args = vec![
        "run",
        "--base-url",
        &base,
        "--api-key",
        "k",
        "-m",
        "gpt-4o",
        "--schema",
        schema.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    args.push("The capital of France?");
    panto(&args)
}

#[test]
fn stdout_gets_the_validated_json_on_one_line() {
    let srv = server(&[(r#"{ "city": "Paris", "population": null }"#, false)]);
    let out = run(&srv, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    // Parsed, the strict-mode null removed, printed compactly on one line.
    assert_eq!(stdout_of(&out), "{\"city\":\"Paris\"}\n");
    let sent = &srv.requests()[0].body["response_format"]["json_schema"];
    assert_eq!(sent["name"], "output");
    assert_eq!(sent["schema"]["required"], json!(["city", "population"]));
}

#[test]
fn stdout_and_json_lines_keep_the_models_numbers_as_written() {
    // Past what an f64 holds: printed as 1.2345678901234568e29 before.
    let answer = r#"{"city": "Paris", "population": 123456789012345678901234567890}"#;
    let exact = r#"{"city":"Paris","population":123456789012345678901234567890}"#;
    let srv = server(&[(answer, false)]);
    let out = run(&srv, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_eq!(stdout_of(&out), format!("{exact}\n"));
    let srv = server(&[(answer, false)]);
    let out = run(&srv, &["--json"]);
    let line = stdout_of(&out)
        .lines()
        .find(|l| l.contains("\"message_complete\""))
        .map(str::to_owned)
        .unwrap_or_default();
    assert!(line.contains(&format!("\"output\":{exact}")), "{line}");
}

#[test]
fn a_repaired_answer_replaces_the_failed_one() {
    let srv = server(&[
        (r#"{"town":"Paris"}"#, false),
        (r#"{"city":"Paris"}"#, false),
    ]);
    let out = run(&srv, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_eq!(stdout_of(&out), "{\"city\":\"Paris\"}\n");
    assert!(
        stderr_of(&out).contains("did not match the schema; asking again (repair 1 of 1)"),
        "{}",
        stderr_of(&out)
    );
    assert_eq!(srv.requests().len(), 2);
}

#[test]
fn json_mode_carries_the_output_and_the_repair() {
    let srv = server(&[
        (r#"{"town":"Paris"}"#, false),
        (r#"{"city":"Paris"}"#, false),
    ]);
    let out = run(&srv, &["--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let lines = json_lines(&out);
    let repair = lines
        .iter()
        .find(|l| l["type"] == "output_repair")
        .expect("an output_repair line");
    assert_eq!(
        (
            &repair["message"],
            &repair["attempt"],
            &repair["max_attempts"]
        ),
        (&json!(0), &json!(1), &json!(1))
    );
    let last = lines.last().unwrap();
    assert_eq!(last["type"], "message_complete");
    assert_eq!(last["output"], json!({"city": "Paris"}));
}

#[test]
fn a_refusal_exits_7_naming_the_kind() {
    let srv = server(&[("I won't.", true)]);
    let out = run(&srv, &[]);
    assert_eq!(out.status.code(), Some(7));
    assert!(stdout_of(&out).is_empty(), "{}", stdout_of(&out));
    assert!(
        stderr_of(&out).contains("error[output_refused]"),
        "{}",
        stderr_of(&out)
    );
}

#[test]
fn an_answer_that_stays_invalid_exits_7_with_the_raw_text_in_json_mode() {
    let srv = server(&[("nope", false), ("still nope", false)]);
    let out = run(&srv, &["--json"]);
    assert_eq!(out.status.code(), Some(7));
    let last = json_lines(&out).pop().unwrap();
    assert_eq!(last["type"], "error");
    assert_eq!(last["kind"], "output_invalid");
    assert_eq!(last["output"], "still nope");
}

#[test]
fn a_bad_schema_file_is_a_usage_error_before_anything_is_sent() {
    let srv = server(&[]);
    let base = format!("{}/v1", srv.url());
    let bad = dir().join("bad.json"); // only this test writes it
                                      // Valid JSON, 201 levels deep: past what panto reads, and said so.
    let mut deep = String::from(r#"{"type":"string"}"#);
    for _ in 0..100 {
        deep = format!(r#"{{"type":"object","properties":{{"a":{deep}}}}}"#);
    }
    for (content, says) in [
        ("{not json", "not valid JSON"),
        (
            deep.as_str(),
            "--schema ", // and then the depth, checked below
        ),
        ("[1]", "must be a JSON Schema object"),
        (
            r#"{"type":"object","properties":{"a":{"not":{}}}}"#,
            "options.output_schema.properties.a.not",
        ),
    ] {
        std::fs::write(&bad, content).unwrap();
        let out = panto(&[
            "run",
            "--base-url",
            &base,
            "--api-key",
            "k",
            "-m",
            "gpt-4o",
            "--schema",
            bad.to_str().unwrap(),
            "hi",
        ]);
        assert_eq!(out.status.code(), Some(2), "{content}");
        assert!(
            stderr_of(&out).contains("error[config]") && stderr_of(&out).contains(says),
            "{content}: {}",
            stderr_of(&out)
        );
        if content == deep {
            assert!(
                stderr_of(&out).contains("nests 201 levels deep, more than the 128 panto reads")
                    && !stderr_of(&out).contains("not valid JSON"),
                "{}",
                stderr_of(&out)
            );
        }
    }
    let missing = panto(&["run", "--schema", "/nonexistent/schema.json", "hi"]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(stderr_of(&missing).contains("--schema /nonexistent/schema.json"));
    assert!(srv.requests().is_empty());
}
