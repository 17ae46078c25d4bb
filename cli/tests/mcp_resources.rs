//! `panto mcp resources`, `mcp read URI`, `mcp prompts` and `mcp prompt NAME
//! [ARG=VALUE…]` against the fixture server (tests/mcp/fixture_server.py, from the
//! tests' pinned venv), over stdio and Streamable HTTP: what they print, with and without
//! --json, which server they ask, their exit codes, and that an HTTP session is ended.

mod support;

use panto_testkit::mcp::{fixture, python, HttpFixture};
use serde_json::{json, Value};
use support::*;

fn fx() -> String {
    format!("fx={} {}", python(), fixture())
}

/// `panto mcp ARGS…` with the servers `mcp` (values of --mcp).
fn mcp(tag: &str, mcp: &[&str], args: &[&str]) -> std::process::Output {
    let home = temp_dir(tag);
    let mut all = vec!["mcp"];
    all.extend_from_slice(args);
    for m in mcp {
        all.extend(["--mcp", m]);
    }
    run(&mut panto_in(&home, &all))
}

#[test]
fn resources_are_listed_and_read() {
    let fx = fx();
    let out = mcp("mcp-resources", &[&fx], &["resources"]);
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(
        stdout_of(&out),
        "fx: 4 resources\n\
         \x20 fixture://notes  notes (text/plain)  Some notes.\n\
         \x20 fixture://pixel.png  pixel (image/png)\n\
         \x20 file:///tmp/report.txt  report (text/plain)\n\
         \x20 fixture://data.bin  data (application/octet-stream)\n\
         fx: 1 resource templates\n\
         \x20 fixture://greeting/{name}  A greeting for a name.\n"
    );
    let out = mcp("mcp-resources-json", &[&fx], &["resources", "--json"]);
    assert!(out.status.success(), "{}", describe(&out));
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 5);
    assert_eq!(
        lines[1],
        json!({"server": "fx", "uri": "fixture://pixel.png", "name": "pixel",
               "mime_type": "image/png", "size": 70})
    );
    assert_eq!(lines[4]["uri_template"], "fixture://greeting/{name}");

    // Text as it is; bytes as they are (stdout is no terminal here).
    let out = mcp("mcp-read", &[&fx], &["read", "fixture://notes"]);
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(out.stdout, b"the notes");
    let out = mcp("mcp-read-bin", &[&fx], &["read", "fixture://data.bin"]);
    assert_eq!(out.stdout, [0u8, 1, 2], "{}", describe(&out));
    let out = mcp(
        "mcp-read-json",
        &[&fx],
        &["read", "--json", "fixture://greeting/Bo"],
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["contents"][0]["text"], "hello Bo");
    assert_eq!(
        v["contents"][0]["part"],
        json!({"type": "text", "text": "[resource: fixture://greeting/Bo type text/plain]\nhello Bo"})
    );
    // Not there: the server's -32002 is not_found, exit code 3.
    let out = mcp("mcp-read-missing", &[&fx], &["read", "fixture://nothing"]);
    assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
    assert!(
        stderr_of(&out).contains("no resource fixture://nothing"),
        "{}",
        describe(&out)
    );
}

#[test]
fn prompts_are_listed_and_filled_in() {
    let fx = fx();
    let out = mcp("mcp-prompts", &[&fx], &["prompts"]);
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(
        stdout_of(&out),
        "fx: 2 prompts\n  greet  Greets someone.\n    name (required)  Who to greet.\n    \
         style  How.\n  picture  Shows a picture.\n"
    );
    let out = mcp(
        "mcp-prompt",
        &[&fx],
        &["prompt", "greet", "name=Ann", "style=dry"],
    );
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(
        stdout_of(&out),
        "user: Say hello to Ann in a dry way\nassistant: Hello, Ann!\n"
    );
    let out = mcp(
        "mcp-prompt-json",
        &[&fx],
        &["prompt", "--json", "greet", "name=Ann"],
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(
        v["messages"][1],
        json!({"role": "assistant", "content": [{"type": "text", "text": "Hello, Ann!"}]})
    );
    // A missing argument is the server's -32602: bad_request, exit code 3.
    let out = mcp("mcp-prompt-missing", &[&fx], &["prompt", "greet"]);
    assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
    assert!(stderr_of(&out).contains("greet needs the argument name"));
    // An argument that is not NAME=VALUE is a usage error.
    let out = mcp("mcp-prompt-usage", &[&fx], &["prompt", "greet", "Ann"]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
}

#[test]
fn the_server_is_the_one_named_the_only_one_or_the_one_that_lists_it() {
    let fx = fx();
    let other = format!("other={} {}", python(), fixture());
    // Both list the notes: name one.
    let out = mcp("mcp-two", &[&fx, &other], &["read", "fixture://notes"]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(
        stderr_of(&out).contains("the MCP servers fx, other all list \"fixture://notes\""),
        "{}",
        describe(&out)
    );
    let out = mcp(
        "mcp-two-named",
        &[&fx, &other],
        &["read", "-s", "other", "fixture://notes"],
    );
    assert_eq!(out.stdout, b"the notes", "{}", describe(&out));
    // A server failing to start is its error line, and the listing goes on.
    let bad = format!("bad={} {} --fail-start", python(), fixture());
    let out = mcp("mcp-two-bad", &[&bad, &fx], &["prompts"]);
    assert_eq!(out.status.code(), Some(5), "{}", describe(&out));
    let text = stdout_of(&out);
    assert!(text.starts_with("bad: error (connection): "), "{text}");
    assert!(text.contains("fx: 2 prompts\n"), "{text}");
    // An unknown --server names the servers there are.
    let out = mcp("mcp-unknown", &[&fx], &["prompts", "-s", "nope"]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(
        stdout_of(&out).contains("(the servers: fx)"),
        "{}",
        describe(&out)
    );
}

#[test]
fn an_http_servers_session_is_ended() {
    let web = HttpFixture::start(&[]);
    let url = format!("web={}", web.url());
    let out = mcp("mcp-http", &[&url], &["prompt", "greet", "name=Web"]);
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(
        stdout_of(&out),
        "user: Say hello to Web\nassistant: Hello, Web!\n"
    );
    let log = web.log();
    let session = log
        .iter()
        .find_map(|r| r["session"].as_str())
        .expect("a session id")
        .to_owned();
    assert!(
        log.iter()
            .any(|r| r["method"] == "DELETE" && r["session"] == session.as_str()),
        "no DELETE: {log:?}"
    );
}
