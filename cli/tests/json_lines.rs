//! Every line of JSON the CLI prints (`--json` events and its error line, `run --schema`'s
//! answer) escapes U+2028 and U+2029: raw, they are valid JSON, but a consumer that
//! splits lines with Unicode's line breaks (Python's `str.splitlines`, older
//! JavaScript) would cut an event in two. The parsed values keep them.

mod support;

use std::process::Output;

use serde_json::{json, Value};
use support::*;

/// Text with both separators, as a model may send it.
const TEXT: &str = "one\u{2028}two\u{2029}three";

/// Python's `str.splitlines` boundaries (and JavaScript's before ES2019, a subset).
fn unicode_lines(s: &str) -> Vec<&str> {
    s.split([
        '\n', '\r', '\u{0b}', '\u{0c}', '\u{1c}', '\u{1d}', '\u{1e}', '\u{85}', '\u{2028}',
        '\u{2029}',
    ])
    .filter(|l| !l.is_empty())
    .collect()
}

/// Each stream's printed lines split the same under Unicode's line breaks as under
/// `\n`, and parse as JSON.
fn assert_lines_survive_splitlines(text: &str, what: &str) -> Vec<Value> {
    assert!(
        !text.contains(['\u{2028}', '\u{2029}']),
        "{what} holds a raw U+2028/U+2029: {text:?}"
    );
    let lines: Vec<&str> = text.lines().filter(|l| !l.is_empty()).collect();
    assert_eq!(unicode_lines(text), lines, "{what}");
    lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{what}: {e}: {l}")))
        .collect()
}

fn panto_run(home: &str, srv: &panto_testserver::TestServer, extra: &[&str]) -> Output {
    let home = temp_dir(home);
    let base = format!("{}/v1", srv.url());
    let mut args = vec!["run", "--base-url", &base, "--api-key", "k", "-m", "gpt-4o"];
    args.extend_from_slice(extra);
    run(&mut panto_in(&home, &args))
}

#[test]
fn json_events_escape_the_unicode_line_separators() {
    let srv = server(json!({"exchanges": [answer_text(TEXT, 1)]}));
    let out = panto_run("json-lines-events", &srv, &["--json", "hi"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let stdout = stdout_of(&out);
    assert!(stdout.contains(r"one\u2028two\u2029three"), "{stdout}");
    let events = assert_lines_survive_splitlines(&stdout, "stdout");
    let last = events.last().expect("events");
    assert_eq!(last["type"], "message_complete");
    assert_eq!(last["text"], TEXT, "the parsed text keeps them");
}

#[test]
fn the_json_error_line_escapes_them() {
    let srv = server(json!({"exchanges": [{"response": {"status": 400,
        "json": {"error": {"message": TEXT}}}}]}));
    let out = panto_run("json-lines-error", &srv, &["--json", "hi"]);
    assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
    for (text, what) in [(stdout_of(&out), "stdout"), (stderr_of(&out), "stderr")] {
        if text.trim_start().starts_with('{') {
            let lines = assert_lines_survive_splitlines(&text, what);
            let error = lines
                .iter()
                .find(|v| v["type"] == "error")
                .expect("error line");
            assert!(error["message"].as_str().unwrap().contains(TEXT), "{error}");
        }
    }
    assert!(
        stdout_of(&out).contains(r"one\u2028two\u2029three")
            || stderr_of(&out).contains(r"one\u2028two\u2029three"),
        "{}",
        describe(&out)
    );
}

#[test]
fn the_schema_answer_line_escapes_them() {
    let home = temp_dir("json-lines-schema");
    let schema = home.join("schema.json");
    std::fs::write(
        &schema,
        json!({"type": "object", "properties": {"note": {"type": "string"}}}).to_string(),
    )
    .unwrap();
    let answer = json!({"note": TEXT}).to_string();
    let srv = server(json!({"exchanges": [answer_text(&answer, 1)]}));
    let out = panto_run(
        "json-lines-schema-run",
        &srv,
        &["--schema", schema.to_str().unwrap(), "hi"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let lines = assert_lines_survive_splitlines(&stdout_of(&out), "stdout");
    assert_eq!(lines, vec![json!({"note": TEXT})]);
}
