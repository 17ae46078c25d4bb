//! End-to-end tests of the CLI as a daily driver, against the scripted provider server:
//! piped input, clean stdout and a closed pipe, profiles, where the API key may go,
//! error hints, `--continue`, `--no-stream`, inline tool commands, completions and
//! help. The chat prompt is tested through a pseudo-terminal in `terminal.rs`.
//!
//! No test sleeps to synchronize; every timeout is a hang guard only.

mod support;

use std::io::{BufRead, BufReader};
use std::process::Stdio;

use serde_json::{json, Value};
use support::*;

fn last_body(srv: &panto_testserver::TestServer) -> Value {
    srv.requests()
        .last()
        .expect("a request was made")
        .body
        .clone()
}

// ---- 1. piped input ----------------------------------------------------------------

#[test]
fn piped_stdin_comes_first_then_the_prompt_words() {
    let home = temp_dir("pipe");
    let srv = server(json!({"exchanges": [answer_text("Short.", 10)]}));
    let base = format!("{}/v1", srv.url());
    let out = run_with_stdin(
        &mut panto_in(
            &home,
            &["run", "--base-url", &base, "summarize", "this", "please"],
        ),
        "line one\nline two\n",
    );
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_eq!(stdout_of(&out), "Short.\n");
    let texts = message_texts(&last_body(&srv));
    assert_eq!(
        texts.last().map(String::as_str),
        Some("line one\nline two\n\nsummarize this please")
    );

    // `-` reads the whole prompt from stdin.
    let out = run_with_stdin(
        &mut panto_in(&home, &["run", "--base-url", &base, "-"]),
        "from stdin\n",
    );
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_eq!(
        message_texts(&last_body(&srv)).last().unwrap(),
        "from stdin"
    );

    // No subcommand: a bare prompt is a run; options may come first.
    let out = run(&mut panto_in(
        &home,
        &["--base-url", &base, "-m", "bare-model", "hello", "there"],
    ));
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let body = last_body(&srv);
    assert_eq!(body["model"], "bare-model");
    assert_eq!(message_texts(&body).last().unwrap(), "hello there");
}

// ---- 2. clean stdout -----------------------------------------------------------------

#[test]
fn piped_stdout_holds_only_the_final_answer_and_quiet_silences_the_trace() {
    let home = temp_dir("clean");
    let srv = server(json!({"exchanges": [
        {"response": {"status": 200, "sse": openai_tool_call("call_1")}},
        {"match": {"body_contains": ["temp_c"]}, "response": {"status": 200, "sse": openai_text("Warm in Paris.")}},
    ]}));
    let base = format!("{}/v1", srv.url());
    let tool = r#"weather=cat >/dev/null; echo "{\"temp_c\":18}""#;
    let out = run(&mut panto_in(
        &home,
        &["--base-url", &base, "--tool", tool, "weather?"],
    ));
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_eq!(stdout_of(&out), "Warm in Paris.\n");
    // The text written before the tool call is part of the trace.
    let stderr = stderr_of(&out);
    assert!(stderr.contains("Let me check."), "{stderr}");
    assert!(stderr.contains("→ weather"), "{stderr}");

    srv.reset();
    let out = run(&mut panto_in(
        &home,
        &["-q", "--base-url", &base, "--tool", tool, "weather?"],
    ));
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_eq!(stdout_of(&out), "Warm in Paris.\n");
    assert_eq!(stderr_of(&out), "");

    srv.reset();
    let out = run(&mut panto_in(
        &home,
        &[
            "--no-stream",
            "--base-url",
            &base,
            "--tool",
            tool,
            "weather?",
        ],
    ));
    assert_eq!(stdout_of(&out), "Warm in Paris.\n", "{}", describe(&out));
}

#[test]
fn reasoning_goes_to_stderr_labelled_and_can_be_hidden() {
    let home = temp_dir("reasoning");
    let sse = vec![
        openai_chunk(
            json!({"role": "assistant", "reasoning_content": "Pondering."}),
            None,
        ),
        openai_chunk(json!({"content": "Answer."}), None),
        openai_chunk(json!({}), Some("stop")),
        json!({"data": "[DONE]"}),
    ];
    let srv = server(json!({"exchanges": [{"times": 2, "response": {"status": 200, "sse": sse}}]}));
    let base = format!("{}/v1", srv.url());
    let out = run(&mut panto_in(&home, &["--base-url", &base, "q"]));
    assert_eq!(stdout_of(&out), "Answer.\n", "{}", describe(&out));
    let stderr = stderr_of(&out);
    assert!(stderr.contains("thinking:\nPondering."), "{stderr}");
    let out = run(&mut panto_in(
        &home,
        &["--hide-reasoning", "--base-url", &base, "q"],
    ));
    assert_eq!(stdout_of(&out), "Answer.\n", "{}", describe(&out));
    assert!(!stderr_of(&out).contains("Pondering"), "{}", describe(&out));
}

/// `panto … | head -1`: the reader goes away mid-answer; panto ends quietly.
#[test]
fn a_closed_stdout_ends_quietly() {
    let home = temp_dir("head");
    let first = vec![openai_chunk(
        json!({"role": "assistant", "content": "first line\n"}),
        None,
    )];
    let held_at = panto_testserver::script::sse_len(&first).expect("length");
    let mut sse = first;
    for _ in 0..2000 {
        sse.push(openai_chunk(
            json!({"content": "more text that nobody reads\n"}),
            None,
        ));
    }
    sse.push(openai_chunk(json!({}), Some("stop")));
    sse.push(json!({"data": "[DONE]"}));
    let srv = server(
        json!({"exchanges": [{"response": {"status": 200, "sse": sse,
        "fault": {"kind": "hold", "after_bytes": held_at}}}]}),
    );
    let base = format!("{}/v1", srv.url());
    let mut child = panto_in(&home, &["--base-url", &base, "write a lot"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut reader = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    reader.read_line(&mut line).expect("first line");
    assert_eq!(line, "first line\n");
    // The reader is gone before the rest of the answer is sent.
    drop(reader);
    srv.open_gate();
    let out = finish(child);
    assert!(
        matches!(out.status.code(), Some(0 | 141)),
        "{}",
        describe(&out)
    );
    assert_eq!(
        stderr_of(&out),
        "",
        "a closed pipe is not an error to report"
    );
}

// ---- 4. profiles ---------------------------------------------------------------------

#[test]
fn a_profiles_settings_land_in_the_request() {
    let home = temp_dir("profile");
    let srv = server(json!({"exchanges": [answer_text("Hi.", 10)]}));
    let config = home.join("config/panto");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(
        config.join("config.toml"),
        format!(
            r#"
[profiles.local]
base_url = "{}/v1"
model = "profile-model"
system = "You are terse."
temperature = 0.25
api_key_env = "LOCAL_SERVER_KEY"
headers = {{ "X-Title" = "panto-test", "X-Team" = "${{TEAM_NAME}}" }}

[[profiles.local.tools]]
name = "clock"
command = "date"
description = "The current time"
"#,
            srv.url()
        ),
    )
    .unwrap();
    let out = run(panto_in(&home, &["-p", "local", "hello"])
        .env("LOCAL_SERVER_KEY", "sk-local-1234")
        .env("TEAM_NAME", "blue"));
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let request = srv.requests().pop().expect("a request");
    assert_eq!(request.body["model"], "profile-model");
    assert_eq!(request.body["temperature"], 0.25);
    assert_eq!(message_texts(&request.body)[0], "You are terse.");
    assert_eq!(request.body["tools"][0]["function"]["name"], "clock");
    assert_eq!(request.headers["authorization"], "Bearer sk-local-1234");
    assert_eq!(request.headers["x-title"], "panto-test");
    assert_eq!(request.headers["x-team"], "blue");

    // PANTO_PROFILE picks it too; flags win over it.
    let out = run(panto_in(
        &home,
        &["-m", "flag-model", "--header", "X-Title: flag", "hello"],
    )
    .env("PANTO_PROFILE", "local")
    .env("LOCAL_SERVER_KEY", "sk-local-1234")
    .env("TEAM_NAME", "blue"));
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let request = srv.requests().pop().expect("a request");
    assert_eq!(request.body["model"], "flag-model");
    assert_eq!(request.headers["x-title"], "flag");

    // An unknown profile and a typo in the file are usage errors that say what is known.
    let out = run(&mut panto_in(&home, &["-p", "nope", "hello"]));
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(stderr_of(&out).contains("known in"), "{}", describe(&out));
    std::fs::write(config.join("config.toml"), "[profiles.x]\nmodle = \"m\"\n").unwrap();
    let out = run(&mut panto_in(&home, &["-p", "x", "hello"]));
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(stderr_of(&out).contains("modle"), "{}", describe(&out));
}

#[test]
fn panto_model_and_the_base_url_variable_fill_in_defaults() {
    let home = temp_dir("env-defaults");
    let srv = server(json!({"exchanges": [answer_text("Hi.", 10)]}));
    let out = run(panto_in(&home, &["hello"])
        .env("OPENAI_BASE_URL", format!("{}/v1", srv.url()))
        .env("OPENAI_API_KEY", "sk-env-tied-5678")
        .env("PANTO_MODEL", "env-model"));
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let request = srv.requests().pop().expect("a request");
    assert_eq!(request.body["model"], "env-model");
    // OPENAI_BASE_URL beside OPENAI_API_KEY ties them, as in OpenAI's SDK.
    assert_eq!(request.headers["authorization"], "Bearer sk-env-tied-5678");
}

// ---- 5. keys go only where they belong ---------------------------------------------------

#[test]
fn an_env_key_is_not_sent_to_a_command_line_base_url() {
    let home = temp_dir("key-rule");
    let secret = "sk-env-secret-0123456789";
    let srv = server(json!({"exchanges": [
        {"times": 10, "response": {"status": 401, "json": {"error": {"message": "no key", "type": "invalid_api_key"}}}},
    ]}));
    let base = format!("{}/v1", srv.url());
    let out = run(panto_in(&home, &["--base-url", &base, "hello"]).env("OPENAI_API_KEY", secret));
    assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
    let request = srv.requests().pop().expect("a request");
    assert!(
        !request.headers.contains_key("authorization"),
        "the env key went to a command-line URL: {:?}",
        request.headers
    );
    let stderr = stderr_of(&out);
    assert!(stderr.contains("--api-key-env OPENAI_API_KEY"), "{stderr}");
    assert!(!stderr.contains(secret), "{stderr}");

    // Tied explicitly, it goes.
    let with_key = json!({"exchanges": [
        {"match": {"headers": {"authorization": format!("Bearer {secret}")}},
         "response": {"status": 200, "sse": openai_text("With key.")}},
    ]});
    srv.set_scenario(panto_testserver::Scenario::from_json(&with_key.to_string()).unwrap());
    let out = run(panto_in(
        &home,
        &[
            "--base-url",
            &base,
            "--api-key-env",
            "OPENAI_API_KEY",
            "hello",
        ],
    )
    .env("OPENAI_API_KEY", secret));
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_eq!(stdout_of(&out), "With key.\n");
}

// ---- 6. errors that say what to do -----------------------------------------------------

#[test]
fn connection_refused_on_this_machine_asks_whether_the_server_runs() {
    let home = temp_dir("refused");
    // A port that was just free: nothing listens there now.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let base = format!("http://127.0.0.1:{port}/v1");
    let out = run(&mut panto_in(&home, &["--base-url", &base, "hello"]));
    assert_eq!(out.status.code(), Some(5), "{}", describe(&out));
    let stderr = stderr_of(&out);
    assert!(stderr.contains("is the server running?"), "{stderr}");
    assert!(
        stderr.contains(&format!("{base}/chat/completions")),
        "{stderr}"
    );
    assert!(
        !stderr.contains("retrying"),
        "a local refusal is not retried: {stderr}"
    );
}

#[test]
fn a_404_names_the_url_and_the_base_url_rule() {
    let home = temp_dir("404");
    let srv = server(
        json!({"exchanges": [{"times": 10, "response": {"status": 404, "body": "404 page not found"}}]}),
    );
    // The usual mistake: an OpenAI-compatible base URL without its /v1.
    let out = run(&mut panto_in(&home, &["--base-url", &srv.url(), "hello"]));
    assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
    let stderr = stderr_of(&out);
    assert!(
        stderr.contains(&format!("{}/chat/completions", srv.url())),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("try --base-url {}/v1", srv.url())),
        "{stderr}"
    );
    // And Anthropic's: a base URL with /v1 (panto appends /v1/messages).
    let base = format!("{}/v1", srv.url());
    let out = run(&mut panto_in(
        &home,
        &["--provider", "anthropic", "--base-url", &base, "hello"],
    ));
    let stderr = stderr_of(&out);
    assert!(stderr.contains(&format!("{base}/v1/messages")), "{stderr}");
    assert!(stderr.contains("has no /v1"), "{stderr}");
}

#[test]
fn a_web_page_or_json_instead_of_a_stream_is_named() {
    let home = temp_dir("html");
    let srv = server(
        json!({"exchanges": [{"times": 10, "response": {"status": 200,
        "headers": {"content-type": "text/html"}, "body": "<html><body>Welcome</body></html>"}}]}),
    );
    let base = format!("{}/v1", srv.url());
    let out = run(&mut panto_in(&home, &["--base-url", &base, "hello"]));
    assert_eq!(out.status.code(), Some(6), "{}", describe(&out));
    let stderr = stderr_of(&out);
    assert!(stderr.contains("web page, not an API"), "{stderr}");
    assert!(stderr.contains(&base), "{stderr}");

    let srv = server(
        json!({"exchanges": [{"times": 10, "response": {"status": 200, "json": {"models": []}}}]}),
    );
    let base = format!("{}/v1", srv.url());
    let out = run(&mut panto_in(&home, &["--base-url", &base, "hello"]));
    let stderr = stderr_of(&out);
    assert!(stderr.contains("JSON but no event stream"), "{stderr}");
}

#[test]
fn a_timeout_names_the_flag_that_sets_it() {
    let home = temp_dir("timeout");
    let srv = server(
        json!({"exchanges": [{"times": 10, "response": {"status": 200,
        "sse": openai_text("never"), "fault": {"kind": "stall", "after_bytes": 0}}}]}),
    );
    let base = format!("{}/v1", srv.url());
    let out = run(&mut panto_in(
        &home,
        &[
            "--base-url",
            &base,
            "--retries",
            "0",
            "--idle-timeout-ms",
            "200",
            "hello",
        ],
    ));
    assert_eq!(out.status.code(), Some(5), "{}", describe(&out));
    assert!(
        stderr_of(&out).contains("--idle-timeout-ms"),
        "{}",
        describe(&out)
    );
}

// ---- 4. --continue ---------------------------------------------------------------------

#[test]
fn continue_resumes_the_last_conversation() {
    let home = temp_dir("continue");
    let srv = server(
        json!({"exchanges": [answer_text("First answer.", 1), answer_text("Second answer.", 1)]}),
    );
    let base = format!("{}/v1", srv.url());
    let out = run(&mut panto_in(
        &home,
        &["--base-url", &base, "first question"],
    ));
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let out = run(&mut panto_in(
        &home,
        &["-c", "--base-url", &base, "second question"],
    ));
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_eq!(
        message_texts(&last_body(&srv)),
        ["first question", "First answer.", "second question"]
    );
    // Without -c, a new conversation.
    srv.reset();
    let out = run(&mut panto_in(&home, &["--base-url", &base, "fresh"]));
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_eq!(message_texts(&last_body(&srv)), ["fresh"]);
    // A fresh home has nothing to continue.
    let empty = temp_dir("continue-empty");
    let out = run(&mut panto_in(&empty, &["-c", "--base-url", &base, "x"]));
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
}

// ---- 7. tools people can write ---------------------------------------------------------

#[test]
fn a_tools_file_can_carry_the_command() {
    let home = temp_dir("tools-file");
    let tools = home.join("tools.json");
    std::fs::write(
        &tools,
        json!([{"name": "weather", "description": "Weather of a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            "command": "echo \"$PANTO_TOOL_NAME $PANTO_TOOL_CALL_ID $(cat)\""}])
        .to_string(),
    )
    .unwrap();
    let srv = server(json!({"exchanges": [
        {"response": {"status": 200, "sse": openai_tool_call("call_9")}},
        {"match": {"body_contains": ["weather call_9"]}, "response": {"status": 200, "sse": openai_text("Done.")}},
    ]}));
    let base = format!("{}/v1", srv.url());
    let out = run(&mut panto_in(
        &home,
        &[
            "--base-url",
            &base,
            "--tools",
            tools.to_str().unwrap(),
            "w?",
        ],
    ));
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_eq!(stdout_of(&out), "Done.\n");
    let first = &srv.requests()[0].body;
    assert_eq!(
        first["tools"][0]["function"]["description"],
        "Weather of a city"
    );
}

#[test]
fn confirm_without_a_terminal_pauses_the_turn() {
    let home = temp_dir("confirm");
    let marker = home.join("ran");
    let srv = server(json!({"exchanges": [
        {"response": {"status": 200, "sse": openai_tool_call("call_1")}},
    ]}));
    let base = format!("{}/v1", srv.url());
    let tool = format!("weather=touch {}", marker.display());
    let mut cmd = panto_in(
        &home,
        &["--confirm", "--base-url", &base, "--tool", &tool, "w?"],
    );
    // No controlling terminal, whatever runs the tests.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let out = run(&mut cmd);
    // Paused (exit code 8), leaving a checkpoint for `panto resume` (tests/durable.rs).
    assert_eq!(out.status.code(), Some(8), "{}", describe(&out));
    assert!(
        stderr_of(&out).contains("--approve call_1"),
        "{}",
        describe(&out)
    );
    assert!(!marker.exists(), "the tool ran without confirmation");
    assert_eq!(srv.requests().len(), 1);
}

// ---- 8. the rest of the surface ----------------------------------------------------------

#[test]
fn help_opens_with_examples_and_names_the_config_file() {
    let home = temp_dir("help");
    let out = run(&mut panto_in(&home, &["--help"]));
    assert_eq!(out.status.code(), Some(0));
    let help = stdout_of(&out);
    assert!(help.starts_with("Examples:"), "{help}");
    assert!(
        help.contains(&home.join("config/panto/config.toml").display().to_string()),
        "{help}"
    );
    let out = run(&mut panto_in(&home, &["run", "--help"]));
    assert!(stdout_of(&out).starts_with("Examples:"));
}

#[test]
fn completions_are_printed_for_each_shell() {
    let home = temp_dir("completions");
    for shell in ["bash", "zsh", "fish"] {
        let out = run(&mut panto_in(&home, &["completions", shell]));
        assert_eq!(out.status.code(), Some(0), "{shell}: {}", describe(&out));
        let script = stdout_of(&out);
        assert!(script.contains("base-url"), "{shell}: {script}");
    }
}
