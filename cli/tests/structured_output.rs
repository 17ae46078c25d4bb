//! `panto run --schema FILE`: the schema reaches the provider, stdout holds the
//! validated JSON on one line (also after a repair, whose failed answer never reaches
//! stdout), `--json` carries `output` and `output_repair`, and a refusal, an invalid
//! answer or a bad schema file exit non-zero naming the error kind.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use panto_testserver::{Scenario, TestServer};
use serde_json::{json, Value};

const HANG_GUARD: Duration = Duration::from_secs(60);

fn dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("panto-cli-schema-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn panto(args: &[&str]) -> Output {
    let home = dir().join("home");
    let child = Command::new(env!("CARGO_BIN_EXE_panto"))
        .args(args)
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("PANTO_PROFILE")
        .env_remove("PANTO_MODEL")
        .env_remove("PANTO_CONFIG")
        .env("HOME", &home)
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env("XDG_STATE_HOME", home.join("state"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    rx.recv_timeout(HANG_GUARD)
        .expect("panto hung")
        .expect("panto ran")
}

fn chunk(delta: Value, finish: Option<&str>) -> Value {
    json!({"data": {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}})
}

/// An OpenAI response answering `text` (or refusing with it).
fn answer(text: &str, refusal: bool) -> Value {
    let key = if refusal { "refusal" } else { "content" };
    json!({"status": 200, "sse": [
        chunk(json!({"role": "assistant", key: text}), None),
        chunk(json!({}), Some("stop")),
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
    let scenario = json!({ "exchanges": exchanges });
    TestServer::start(Scenario::from_json(&scenario.to_string()).unwrap()).unwrap()
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

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn stdout_gets_the_validated_json_on_one_line() {
    let srv = server(&[(r#"{ "city": "Paris", "population": null }"#, false)]);
    let out = run(&srv, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // Parsed, the strict-mode null removed, printed compactly on one line.
    assert_eq!(text(&out.stdout), "{\"city\":\"Paris\"}\n");
    let sent = &srv.requests()[0].body["response_format"]["json_schema"];
    assert_eq!(sent["name"], "output");
    assert_eq!(sent["schema"]["required"], json!(["city", "population"]));
}

#[test]
fn a_repaired_answer_replaces_the_failed_one() {
    let srv = server(&[
        (r#"{"town":"Paris"}"#, false),
        (r#"{"city":"Paris"}"#, false),
    ]);
    let out = run(&srv, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "{\"city\":\"Paris\"}\n");
    assert!(
        text(&out.stderr).contains("did not match the schema; asking again (repair 1 of 1)"),
        "{}",
        text(&out.stderr)
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
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let lines: Vec<Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
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
    assert!(text(&out.stdout).is_empty(), "{}", text(&out.stdout));
    assert!(
        text(&out.stderr).contains("error[output_refused]"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn an_answer_that_stays_invalid_exits_7_with_the_raw_text_in_json_mode() {
    let srv = server(&[("nope", false), ("still nope", false)]);
    let out = run(&srv, &["--json"]);
    assert_eq!(out.status.code(), Some(7));
    let last: Value = serde_json::from_str(text(&out.stdout).lines().last().unwrap()).unwrap();
    assert_eq!(last["type"], "error");
    assert_eq!(last["kind"], "output_invalid");
    assert_eq!(last["output"], "still nope");
}

#[test]
fn a_bad_schema_file_is_a_usage_error_before_anything_is_sent() {
    let srv = server(&[]);
    let base = format!("{}/v1", srv.url());
    let bad = dir().join("bad.json"); // only this test writes it
    for (content, says) in [
        ("{not json", "not valid JSON"),
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
            text(&out.stderr).contains("error[config]") && text(&out.stderr).contains(says),
            "{content}: {}",
            text(&out.stderr)
        );
    }
    let missing = panto(&["run", "--schema", "/nonexistent/schema.json", "hi"]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(text(&missing.stderr).contains("--schema /nonexistent/schema.json"));
    assert!(srv.requests().is_empty());
}
