//! The CLI against the MCP reference server, `@modelcontextprotocol/server-everything`
//! (pinned, installed from npm by tests/mcp/everything.sh), over stdio and Streamable
//! HTTP: `panto mcp list` and `panto run` calling its tools, with a long operation's
//! progress. Without node and npm the tests skip, except in CI.

mod support;

use panto_testkit::everything::{self, HttpEverything};
use panto_testserver::script;
use serde_json::{json, Value};
use support::*;

/// The `--mcp` value that starts the server over stdio as `ev`.
fn stdio_flag(entry: &str) -> String {
    format!("ev=node {}", everything::stdio_args(entry).join(" "))
}

/// What `panto mcp list --mcp <flag>` prints for the reference server, checked.
fn list(tag: &str, flag: &str) {
    let home = temp_dir(tag);
    let out = run(&mut panto_in(&home, &["mcp", "list", "--mcp", flag]));
    assert!(out.status.success(), "{}", describe(&out));
    let text = stdout_of(&out);
    assert!(text.starts_with("ev: "), "{text}");
    for tool in [
        "  ev__echo  ",
        "  ev__get-sum  ",
        "  ev__get-tiny-image  ",
        "  ev__trigger-long-running-operation  ",
    ] {
        assert!(text.contains(tool), "{tool} missing: {text}");
    }
    // Registered by the server only for a client that declares sampling or
    // elicitation, which panto does only when the host enables them.
    assert!(!text.contains("ev__trigger-sampling-request"), "{text}");
    assert!(!text.contains("ev__trigger-elicitation-request"), "{text}");
}

/// A `panto run --json` in which the model calls `tool` (name, arguments) of the
/// server given by `flag`, then answers "done": the events printed.
fn tool_run(tag: &str, flag: &str, tool: (&str, &str)) -> Vec<Value> {
    let server = server(json!({"exchanges": [
        script::exchange(script::openai_tool_calls(&[("c", tool.0, tool.1)])),
        script::exchange(script::openai_text(&["done"])),
    ]}));
    let home = temp_dir(tag);
    let base = format!("{}/v1", server.url());
    let out = run(&mut panto_in(
        &home,
        &[
            "run",
            "--base-url",
            &base,
            "--api-key",
            "k",
            "--mcp",
            flag,
            "--json",
            "go",
        ],
    ));
    assert!(out.status.success(), "{}", describe(&out));
    json_lines(&out)
}

fn tool_result(events: &[Value]) -> &Value {
    events
        .iter()
        .find(|e| e["type"] == "tool_result")
        .expect("a tool result")
}

#[test]
fn mcp_list_shows_the_reference_servers_tools_over_stdio() {
    let Some(entry) = everything::entry() else {
        return;
    };
    list("ev-list-stdio", &stdio_flag(&entry));
}

#[test]
fn mcp_list_shows_the_reference_servers_tools_over_streamable_http() {
    let Some(entry) = everything::entry() else {
        return;
    };
    let http = HttpEverything::start(&entry);
    list("ev-list-http", &format!("ev={}", http.url()));
}

#[test]
fn a_run_calls_the_reference_servers_tools_over_streamable_http() {
    let Some(entry) = everything::entry() else {
        return;
    };
    let http = HttpEverything::start(&entry);
    let evs = tool_run(
        "ev-run-http",
        &format!("ev={}", http.url()),
        ("ev__get-sum", r#"{"a":40,"b":2}"#),
    );
    let result = tool_result(&evs);
    assert_eq!(result["name"], "ev__get-sum");
    assert_eq!(result["output"], "The sum of 40 and 2 is 42.");
    assert_eq!(result["is_error"], false);
}

#[test]
fn a_run_shows_a_long_operations_progress_over_stdio() {
    let Some(entry) = everything::entry() else {
        return;
    };
    let evs = tool_run(
        "ev-run-progress",
        &stdio_flag(&entry),
        (
            "ev__trigger-long-running-operation",
            r#"{"duration":0.6,"steps":2}"#,
        ),
    );
    let result_at = evs
        .iter()
        .position(|e| e["type"] == "tool_result")
        .expect("a tool result");
    assert!(
        evs[result_at]["output"]
            .as_str()
            .unwrap_or("")
            .starts_with("Long running operation completed."),
        "{}",
        evs[result_at]
    );
    let last = evs
        .iter()
        .rposition(|e| e["type"] == "tool_progress")
        .expect("tool_progress events");
    assert!(last < result_at);
    assert_eq!(
        evs[last],
        json!({"type": "tool_progress", "message": 0, "call_id": "c",
               "name": "ev__trigger-long-running-operation", "progress": 2.0, "total": 2.0})
    );
}
