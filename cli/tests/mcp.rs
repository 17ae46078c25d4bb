//! The CLI's MCP servers: `--mcp NAME=COMMAND` and `--mcp NAME=URL` in a run, a
//! profile's `[mcp_servers]` table, and `panto mcp list` — against the fixture server
//! (tests/mcp/fixture_server.py) and mcp-server-time from the tests' pinned venv.

mod support;

use std::path::Path;
use std::process::Output;

use panto_testkit::mcp::{fixture, python, time_server};
use panto_testserver::{script, TestServer};
use serde_json::{json, Value};
use support::*;

/// `panto run` against `server` with the MCP server `mcp` (a `--mcp` value) and `extra`
/// arguments (the prompt last).
fn run_with_mcp(home: &Path, server: &TestServer, mcp: &str, extra: &[&str]) -> Output {
    let base = format!("{}/v1", server.url());
    let mut args = vec!["run", "--base-url", &base, "--api-key", "k", "--mcp", mcp];
    args.extend_from_slice(extra);
    run(&mut panto_in(home, &args))
}

/// A successful `--json` run (`prompt`, HOME from `tag`) with the fixture server, in
/// which the model calls `tool` (name, arguments) once, then answers `answer`: the
/// model's server, for its requests, and the events printed.
fn fixture_tool_run(
    tag: &str,
    tool: (&str, &str),
    answer: &str,
    prompt: &str,
) -> (TestServer, Vec<Value>) {
    let server = server(json!({"exchanges": [
        script::exchange(script::openai_tool_calls(&[("c", tool.0, tool.1)])),
        script::exchange(script::openai_text(&[answer])),
    ]}));
    let home = temp_dir(tag);
    let mcp = format!("fx={} {}", python(), fixture());
    let out = run_with_mcp(&home, &server, &mcp, &["--json", prompt]);
    assert!(out.status.success(), "{}", describe(&out));
    (server, json_lines(&out))
}

/// The first `tool_result` event.
fn tool_result(events: &[Value]) -> &Value {
    events
        .iter()
        .find(|e| e["type"] == "tool_result")
        .expect("a tool result")
}

#[test]
fn a_run_calls_the_tools_of_an_mcp_server_given_by_flag() {
    let (server, evs) = fixture_tool_run(
        "mcp-run",
        ("fx__echo", r#"{"text":"from the cli"}"#),
        "done",
        "go",
    );
    let result = tool_result(&evs);
    assert_eq!(result["name"], "fx__echo");
    assert_eq!(result["output"], "echo: from the cli");
    assert_eq!(result["is_error"], false);
    // Offered to the model with its schema; not a host tool.
    let start = evs.iter().find(|e| e["type"] == "tool_call_start").unwrap();
    assert_eq!(start["host"], false);
    let tools = &server.requests()[0].body["tools"];
    assert!(tools.to_string().contains("fx__echo"), "{tools}");
}

/// `--json` prints a tool result's parts when the tool returned an image (an MCP
/// tool's here): the text, then the image with its media type, size and base64 bytes.
#[test]
fn json_output_carries_a_tool_results_image() {
    let (_server, evs) = fixture_tool_run("mcp-image", ("fx__image", "{}"), "a pixel", "look");
    let result = tool_result(&evs);
    assert_eq!(result["output"], "a pixel:");
    let parts = result["parts"].as_array().expect("parts");
    assert_eq!(parts[0], json!({"type": "text", "text": "a pixel:"}));
    let image = &parts[1];
    assert_eq!(image["type"], "image");
    assert_eq!(image["media_type"], "image/png");
    let data = image["data"].as_str().unwrap();
    assert!(data.starts_with("iVBORw0KGgo"), "{image}");
    // size is the decoded byte count: 3 bytes per 4 base64 characters, less the padding.
    let padding = data.bytes().rev().take_while(|&b| b == b'=').count();
    assert_eq!(image["size"], json!(data.len() / 4 * 3 - padding));
}

#[test]
fn no_server_outlives_panto_even_one_that_ignores_sigterm() {
    let server = server(json!({"exchanges": [script::exchange(script::openai_text(&["hi"]))]}));
    let home = temp_dir("mcp-linger");
    let marker = format!("panto-cli-linger-{}", std::process::id());
    let mcp = format!(
        "fx={} {} --linger --cancel-marker {marker}",
        python(),
        fixture()
    );
    let out = run_with_mcp(&home, &server, &mcp, &["go"]);
    assert!(out.status.success(), "{}", describe(&out));
    // panto waited for the stop sequence (stdin closed, SIGTERM ignored, SIGKILL)
    // before it exited.
    assert!(
        panto_testkit::mcp::pids_with(&marker).is_empty(),
        "a server outlived panto"
    );
}

#[test]
fn mcp_list_prints_each_servers_tools_or_its_error() {
    let home = temp_dir("mcp-list");
    let config = home.join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[profiles.t.mcp_servers.time]\ncommand = {:?}\nargs = [\"--local-timezone\", \"UTC\"]\n",
            time_server()
        ),
    )
    .unwrap();
    let fx = format!("fx={} {}", python(), fixture());
    let bad = format!("bad={} {} --fail-start", python(), fixture());
    let cfg = config.to_string_lossy().into_owned();
    let out = run(&mut panto_in(
        &home,
        &[
            "mcp", "list", "--config", &cfg, "-p", "t", "--mcp", &fx, "--mcp", &bad,
        ],
    ));
    let text = stdout_of(&out);
    // A server that could not start: its error, and the exit code of its kind.
    assert_eq!(out.status.code(), Some(5), "{}", describe(&out));
    assert!(
        text.contains(
            "bad: error (connection): MCP server \"bad\" stopped: it exited (exit status 2)"
        ) && text.contains("refusing to start"),
        "{text}"
    );
    assert!(
        text.contains("fx: 13 tools\n  fx__big  Answers size bytes of text.\n  fx__change"),
        "{text}"
    );
    assert!(
        text.contains("  fx__dotted_name  Has a dot in its name.\n"),
        "{text}"
    );
    assert!(text.contains("time: 2 tools\n"), "{text}");
    assert!(text.contains("  time__convert_time"), "{text}");
    assert!(text.contains("  time__get_current_time"), "{text}");
    // Only the profile's server: everything starts, exit 0.
    let out = run(&mut panto_in(
        &home,
        &["mcp", "list", "--config", &cfg, "-p", "t"],
    ));
    assert!(out.status.success(), "{}", describe(&out));
    assert!(stdout_of(&out).starts_with("time: 2 tools\n"));
}

#[test]
fn a_profile_mcp_server_with_an_unknown_key_is_a_config_error() {
    let home = temp_dir("mcp-bad-profile");
    let config = home.join("config.toml");
    std::fs::write(
        &config,
        "[profiles.t.mcp_servers.x]\ncommand = \"true\"\ncolour = 1\n",
    )
    .unwrap();
    let cfg = config.to_string_lossy().into_owned();
    let out = run(&mut panto_in(
        &home,
        &["mcp", "list", "--config", &cfg, "-p", "t"],
    ));
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(
        stderr_of(&out).contains("mcp_servers.x.colour: unknown key"),
        "{}",
        describe(&out)
    );
}

/// A stdio server gets a private environment: panto's API key and any other credential
/// of panto's environment do not reach it (its `env` tool reads them as unset), while
/// PATH does; a variable the profile names in `inherit_env` does.
#[test]
fn a_stdio_server_cannot_read_the_api_key_or_other_variables() {
    let calls = [
        ("c1", "fx__env", r#"{"name":"OPENAI_API_KEY"}"#),
        ("c2", "fx__env", r#"{"name":"AWS_SECRET_ACCESS_KEY"}"#),
        ("c3", "fx__env", r#"{"name":"PATH"}"#),
    ];
    let server = server(json!({"exchanges": [
        script::exchange(script::openai_tool_calls(&calls)),
        script::exchange(script::openai_text(&["done"])),
        script::exchange(script::openai_tool_calls(&[calls[1]])),
        script::exchange(script::openai_text(&["done"])),
    ]}));
    let home = temp_dir("mcp-env");
    let base = format!("{}/v1", server.url());
    let mcp = format!("fx={} {}", python(), fixture());
    let aws = "aws-secret-0123456789abcdef";
    let mut cmd = panto_in(
        &home,
        &["run", "--base-url", &base, "--mcp", &mcp, "--json", "go"],
    );
    cmd.env("OPENAI_API_KEY", "sk-panto-env-test-0123456789")
        .env("AWS_SECRET_ACCESS_KEY", aws);
    let out = run(&mut cmd);
    assert!(out.status.success(), "{}", describe(&out));
    let outputs: Vec<String> = json_lines(&out)
        .iter()
        .filter(|e| e["type"] == "tool_result")
        .map(|e| e["output"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(outputs.len(), 3, "{outputs:?}");
    assert!(
        outputs
            .iter()
            .any(|o| o.starts_with("OPENAI_API_KEY=None ")),
        "{outputs:?}"
    );
    assert!(
        outputs
            .iter()
            .any(|o| o.starts_with("AWS_SECRET_ACCESS_KEY=None ")),
        "{outputs:?}"
    );
    let path = std::env::var("PATH").unwrap();
    assert!(
        outputs
            .iter()
            .any(|o| o.starts_with(&format!("PATH={path} "))),
        "{outputs:?}"
    );

    // A profile's inherit_env passes the variable it names.
    let config = home.join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[profiles.t.mcp_servers.fx]\ncommand = {:?}\nargs = [{:?}]\ninherit_env = [\"AWS_SECRET_ACCESS_KEY\"]\n",
            python(),
            fixture()
        ),
    )
    .unwrap();
    let cfg = config.to_string_lossy().into_owned();
    let mut cmd = panto_in(
        &home,
        &[
            "run",
            "--config",
            &cfg,
            "-p",
            "t",
            "--base-url",
            &base,
            "--json",
            "go",
        ],
    );
    cmd.env("OPENAI_API_KEY", "sk-panto-env-test-0123456789")
        .env("AWS_SECRET_ACCESS_KEY", aws);
    let out = run(&mut cmd);
    assert!(out.status.success(), "{}", describe(&out));
    let result = json_lines(&out)
        .into_iter()
        .find(|e| e["type"] == "tool_result")
        .expect("a tool result");
    assert!(
        result["output"]
            .as_str()
            .unwrap()
            .starts_with(&format!("AWS_SECRET_ACCESS_KEY={aws} ")),
        "{result}"
    );
}

/// `panto mcp list` with a Streamable HTTP server ends the session it opened (DELETE),
/// as a run does: the fixture's log has a DELETE with the session's id once panto exited.
#[test]
fn mcp_list_ends_an_http_servers_session() {
    use std::io::{BufRead, Read, Write};
    let mut fixture_server = std::process::Command::new(python())
        .args([fixture().as_str(), "--http"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("start the fixture server");
    let mut line = String::new();
    std::io::BufReader::new(fixture_server.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = line
        .strip_prefix("PORT ")
        .expect("the port")
        .trim()
        .to_owned();
    let home = temp_dir("mcp-list-http");
    let web = format!("web=http://127.0.0.1:{port}/mcp");
    let out = run(&mut panto_in(&home, &["mcp", "list", "--mcp", &web]));
    // The log of requests to /mcp, read with a bare HTTP/1.0 GET.
    let mut sock =
        std::net::TcpStream::connect(("127.0.0.1", port.parse::<u16>().unwrap())).unwrap();
    sock.write_all(b"GET /_log HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    sock.read_to_string(&mut answer).unwrap();
    let _ = fixture_server.kill();
    let _ = fixture_server.wait();
    assert!(out.status.success(), "{}", describe(&out));
    assert!(
        stdout_of(&out).starts_with("web: 13 tools\n"),
        "{}",
        describe(&out)
    );
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or("");
    let log: Vec<Value> = serde_json::from_str(body).unwrap_or_else(|_| panic!("{answer}"));
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

/// A long MCP tool's progress and its server's log lines (the profile's `log_level`):
/// human output shows both on stderr, before the tool's result line, stdout holding
/// only the answer; `--json` prints them as events, before the tool_result.
#[test]
fn progress_and_server_logs_are_shown_on_stderr_and_printed_with_json() {
    let home = temp_dir("mcp-progress");
    let config = home.join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[profiles.t.mcp_servers.fx]\ncommand = {:?}\nargs = [{:?}, \"--progress-tools\"]\n\
             log_level = \"warning\"\n",
            python(),
            fixture()
        ),
    )
    .unwrap();
    let cfg = config.to_string_lossy().into_owned();
    let turn = |extra: &[&str]| {
        let server = server(json!({"exchanges": [
            script::exchange(script::openai_tool_calls(&[(
                "c", "fx__report", r#"{"steps":2,"interval_ms":150}"#
            )])),
            script::exchange(script::openai_text(&["done"])),
        ]}));
        let base = format!("{}/v1", server.url());
        let mut args = vec![
            "run",
            "--base-url",
            &base,
            "--api-key",
            "k",
            "--config",
            &cfg,
            "-p",
            "t",
        ];
        args.extend_from_slice(extra);
        args.push("go");
        let out = run(&mut panto_in(&home, &args));
        assert!(out.status.success(), "{}", describe(&out));
        out
    };
    let out = turn(&[]);
    assert_eq!(stdout_of(&out), "done\n");
    let err = stderr_of(&out);
    // Not a terminal: one line per update; the last report is always shown.
    let last = err
        .find("fx__report: 100% step 2\n")
        .unwrap_or_else(|| panic!("{err}"));
    let log = err
        .find("fx (fixture) [warning]: warn 2\n")
        .unwrap_or_else(|| panic!("{err}"));
    let result = err
        .find("← fx__report: reported 2 steps")
        .unwrap_or_else(|| panic!("{err}"));
    assert!(last < result && log < result, "{err}");
    let out = turn(&["--json"]);
    let evs = json_lines(&out);
    let at = |ty: &str| evs.iter().rposition(|e| e["type"] == ty).unwrap();
    let progress = &evs[at("tool_progress")];
    assert_eq!(
        progress,
        &json!({"type": "tool_progress", "message": 0, "call_id": "c", "name": "fx__report",
                "progress": 2.0, "total": 2.0, "text": "step 2"})
    );
    assert_eq!(
        evs[at("server_log")],
        json!({"type": "server_log", "server": "fx", "level": "warning", "logger": "fixture",
               "data": "warn 2"})
    );
    assert!(at("tool_progress") < at("tool_result") && at("server_log") < at("tool_result"));
}
