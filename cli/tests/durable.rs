//! Turns that outlive their process: `run --checkpoint FILE`, `panto resume FILE` with
//! `--approve` / `--reject` / `--result`, `--confirm` without a terminal pausing the
//! turn (exit code 8), `--json`'s `deferred` list, and the crash test (panto SIGKILLed
//! while its tool runs, resumed by a new process from the file).

mod support;

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::*;

/// No controlling terminal, whatever runs the tests: `--confirm` has nobody to ask.
fn without_terminal(cmd: &mut Command) -> &mut Command {
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    cmd
}

fn tool_then_answer(answer: &str) -> Value {
    json!({"exchanges": [
        {"response": {"status": 200, "sse": openai_tool_call("call_1")}},
        {"response": {"status": 200, "sse": openai_text(answer)}},
    ]})
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < HANG_GUARD, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The tool results the model was sent, in the request `body`.
fn tool_results(body: &Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}

fn mode_of(path: &Path) -> u32 {
    std::fs::metadata(path)
        .expect("the file")
        .permissions()
        .mode()
        & 0o777
}

#[test]
fn confirm_without_a_terminal_pauses_and_resume_approve_runs_the_call() {
    let home = temp_dir("durable-approve");
    let marker = home.join("ran");
    let file = home.join("turn.checkpoint");
    let srv = server(tool_then_answer("Sunny in Paris."));
    let base = format!("{}/v1", srv.url());
    let tool = format!("weather=touch {} && echo sunny", marker.display());
    let cp = file.to_str().expect("utf-8 path");
    let args = ["--confirm", "--base-url", &base, "--tool", &tool];

    let mut run_args = args.to_vec();
    run_args.extend(["--checkpoint", cp, "--json", "w?"]);
    let out = run(without_terminal(&mut panto_in(&home, &run_args)));
    assert_eq!(out.status.code(), Some(8), "{}", describe(&out));
    assert!(!marker.exists(), "the tool ran without approval");
    // --json: the paused message_complete lists the call.
    let done = json_lines(&out).pop().expect("a last line");
    assert_eq!(done["type"], "message_complete");
    assert_eq!(done["stop_reason"], "deferred");
    assert_eq!(
        done["deferred"],
        json!([{"call_id": "call_1", "name": "weather", "arguments": {"city": "Paris"},
                "reason": "approval"}])
    );
    let note = stderr_of(&out);
    assert!(
        note.contains("call_1 weather") && note.contains(&format!("panto resume {cp}")),
        "{note}"
    );
    assert_eq!(mode_of(&file), 0o600);
    assert_eq!(srv.requests().len(), 1);

    let mut resume_args = vec!["resume", cp, "--approve", "call_1"];
    resume_args.extend(args);
    let out = run(without_terminal(&mut panto_in(&home, &resume_args)));
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_eq!(stdout_of(&out), "Sunny in Paris.\n");
    assert!(marker.exists(), "the approved call did not run");
    let requests = srv.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(tool_results(&requests[1].body), ["sunny"]);
}

#[test]
fn resume_reject_sends_the_reason_and_a_result_for_an_approval_is_refused() {
    let home = temp_dir("durable-reject");
    let marker = home.join("ran");
    let file = home.join("turn.checkpoint");
    let srv = server(tool_then_answer("Understood."));
    let base = format!("{}/v1", srv.url());
    let tool = format!("weather=touch {}", marker.display());
    let cp = file.to_str().expect("utf-8 path");
    let flags = ["--confirm", "--base-url", &base, "--tool", &tool];
    let mut first = flags.to_vec();
    first.extend(["--checkpoint", cp, "w?"]);
    let out = run(without_terminal(&mut panto_in(&home, &first)));
    assert_eq!(out.status.code(), Some(8), "{}", describe(&out));

    // --result answers external calls; a call that needs approval is approved or
    // rejected: a config error (exit 2), nothing sent, the file unchanged.
    let before = std::fs::read_to_string(&file).expect("file");
    let mut wrong = vec!["resume", cp, "--result", "call_1=cloudy"];
    wrong.extend(flags);
    let out = run(without_terminal(&mut panto_in(&home, &wrong)));
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(
        stderr_of(&out).contains("needs approval"),
        "{}",
        describe(&out)
    );
    assert_eq!(std::fs::read_to_string(&file).expect("file"), before);
    assert_eq!(srv.requests().len(), 1);

    let mut reject = vec!["resume", cp, "--reject", "call_1=not today"];
    reject.extend(flags);
    let out = run(without_terminal(&mut panto_in(&home, &reject)));
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_eq!(stdout_of(&out), "Understood.\n");
    assert!(!marker.exists(), "the rejected call ran");
    let results = tool_results(&srv.requests()[1].body);
    assert_eq!(results.len(), 1);
    assert!(
        results[0].contains("rejected") && results[0].contains("not today"),
        "{results:?}"
    );
}

#[test]
fn a_pause_without_checkpoint_names_the_file_it_left() {
    let home = temp_dir("durable-default");
    let srv = server(tool_then_answer("Done."));
    let base = format!("{}/v1", srv.url());
    let out = run(without_terminal(&mut panto_in(
        &home,
        &[
            "--confirm",
            "--base-url",
            &base,
            "--tool",
            "weather=echo x",
            "w?",
        ],
    )));
    assert_eq!(out.status.code(), Some(8), "{}", describe(&out));
    let note = stderr_of(&out);
    let file = note
        .split("panto resume ")
        .nth(1)
        .and_then(|rest| rest.split(" --approve").next())
        .unwrap_or_else(|| panic!("no resume command in: {note}"));
    assert!(Path::new(file).is_file(), "{file}");
    assert_eq!(mode_of(Path::new(file)), 0o600);
    let out = run(without_terminal(&mut panto_in(
        &home,
        &[
            "resume",
            file,
            "--approve",
            "call_1",
            "--confirm",
            "--base-url",
            &base,
            "--tool",
            "weather=echo x",
        ],
    )));
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_eq!(stdout_of(&out), "Done.\n");
}

#[test]
fn a_bad_checkpoint_file_is_a_config_error() {
    let home = temp_dir("durable-bad");
    let file = home.join("bad.checkpoint");
    for text in [
        "garbage",
        "{\"panto_checkpoint\": 99}",
        "{\"panto_checkpoint\": 1",
    ] {
        std::fs::write(&file, text).expect("write");
        let out = run(&mut panto_in(
            &home,
            &[
                "resume",
                file.to_str().expect("utf-8"),
                "--base-url",
                "http://127.0.0.1:9/v1",
            ],
        ));
        assert_eq!(out.status.code(), Some(2), "{text}: {}", describe(&out));
        assert!(
            stderr_of(&out).contains("bad.checkpoint"),
            "{}",
            describe(&out)
        );
    }
}

/// The crash test: `panto run --checkpoint F` with a tool whose command blocks is
/// SIGKILLed while the tool runs; `panto resume F` completes the turn without asking
/// the model again for the response F holds, with the uninterrupted run's answer.
#[test]
fn a_run_killed_while_its_tool_runs_is_completed_by_resume() {
    let home = temp_dir("durable-crash");
    let base_of = |srv: &panto_testserver::TestServer| format!("{}/v1", srv.url());

    // The uninterrupted run.
    let srv = server(tool_then_answer("It is sunny in Paris."));
    let base = base_of(&srv);
    let straight = run(&mut panto_in(
        &home,
        &[
            "--base-url",
            &base,
            "--tool",
            "weather=echo sunny",
            "--json",
            "w?",
        ],
    ));
    assert_eq!(straight.status.code(), Some(0), "{}", describe(&straight));
    let expected = json_lines(&straight).pop().expect("message_complete");
    let expected_second = srv.requests()[1].body.clone();

    // The run that dies.
    let srv = server(tool_then_answer("It is sunny in Paris."));
    let base = base_of(&srv);
    let file = home.join("crash.checkpoint");
    let started = home.join("started");
    let release = home.join("release");
    let blocking = format!(
        "weather=touch {}; while [ ! -e {} ]; do sleep 0.02; done; echo sunny",
        started.display(),
        release.display()
    );
    let cp = file.to_str().expect("utf-8 path");
    let mut child = panto_in(
        &home,
        &[
            "--base-url",
            &base,
            "--tool",
            &blocking,
            "--checkpoint",
            cp,
            "w?",
        ],
    )
    .spawn()
    .expect("spawn panto");
    wait_for("the tool to start", || started.exists());
    // The checkpoint written before the tool started holds the first response.
    let saved: Value =
        serde_json::from_str(&std::fs::read_to_string(&file).expect("the checkpoint file"))
            .expect("JSON");
    assert_eq!(saved["steps"], 1, "{saved}");
    child.kill().expect("SIGKILL panto");
    let status = child.wait().expect("wait");
    assert!(
        status.code().is_none(),
        "panto exited by itself: {status:?}"
    );
    // Let the orphaned tool command end.
    std::fs::write(&release, "").expect("release");
    assert_eq!(srv.requests().len(), 1);

    let out = run(&mut panto_in(
        &home,
        &[
            "resume",
            cp,
            "--base-url",
            &base,
            "--tool",
            "weather=echo sunny",
            "--json",
        ],
    ));
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let done = json_lines(&out).pop().expect("message_complete");
    assert_eq!(done, expected);
    let requests = srv.requests();
    assert_eq!(
        requests.len(),
        2,
        "a response the checkpoint held was requested again"
    );
    assert_eq!(requests[1].body, expected_second);
    // The file now holds the finished turn.
    let finished: Value =
        serde_json::from_str(&std::fs::read_to_string(&file).expect("file")).expect("JSON");
    assert_eq!(finished["steps"], 2);
    assert_eq!(mode_of(&file), 0o600);
}

/// The `.checkpoint` files of the conversation store under `home`.
fn conversation_checkpoints(home: &Path) -> Vec<std::path::PathBuf> {
    let dir = home.join("state/panto/conversations");
    let mut found: Vec<_> = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "checkpoint"))
        .collect();
    found.sort();
    found
}

/// A run of the conversation store killed while its tool runs leaves the conversation's
/// unfinished turn; `panto -c` without a prompt resumes it (no response asked for
/// twice), a prompt is refused until then, and a finished turn leaves no file.
#[test]
fn c_resumes_the_unfinished_turn_of_a_killed_run() {
    let home = temp_dir("durable-continue");
    let base_of = |srv: &panto_testserver::TestServer| format!("{}/v1", srv.url());

    // The uninterrupted run (its own home: it becomes nobody's last conversation).
    let reference_home = temp_dir("durable-continue-reference");
    let srv = server(tool_then_answer("It is sunny in Paris."));
    let straight = run(&mut panto_in(
        &reference_home,
        &[
            "--base-url",
            &base_of(&srv),
            "--tool",
            "weather=echo sunny",
            "--json",
            "w?",
        ],
    ));
    assert_eq!(straight.status.code(), Some(0), "{}", describe(&straight));
    let expected = json_lines(&straight).pop().expect("message_complete");
    let expected_second = srv.requests()[1].body.clone();
    assert!(
        conversation_checkpoints(&reference_home).is_empty(),
        "a finished turn leaves no checkpoint next to its conversation"
    );

    // The run that dies, in a new conversation of the store.
    let srv = server(tool_then_answer("It is sunny in Paris."));
    let base = base_of(&srv);
    let started = home.join("started");
    let release = home.join("release");
    let blocking = format!(
        "weather=touch {}; while [ ! -e {} ]; do sleep 0.02; done; echo sunny",
        started.display(),
        release.display()
    );
    let mut child = panto_in(&home, &["--base-url", &base, "--tool", &blocking, "w?"])
        .spawn()
        .expect("spawn panto");
    wait_for("the tool to start", || started.exists());
    child.kill().expect("SIGKILL panto");
    assert!(child.wait().expect("wait").code().is_none());
    std::fs::write(&release, "").expect("release");
    let left = conversation_checkpoints(&home);
    assert_eq!(left.len(), 1, "{left:?}");
    assert_eq!(mode_of(&left[0]), 0o600);

    // A new prompt is refused while the turn is unfinished: nothing is sent, nothing lost.
    let refused = run(&mut panto_in(
        &home,
        &[
            "-c",
            "--base-url",
            &base,
            "--tool",
            "weather=echo sunny",
            "other?",
        ],
    ));
    assert_eq!(refused.status.code(), Some(2), "{}", describe(&refused));
    let said = stderr_of(&refused);
    assert!(said.contains("did not finish"), "{said}");
    assert!(said.contains(&left[0].display().to_string()), "{said}");
    assert_eq!(srv.requests().len(), 1);
    assert!(left[0].exists());

    // `panto -c` resumes it.
    let out = run(&mut panto_in(
        &home,
        &[
            "-c",
            "--base-url",
            &base,
            "--tool",
            "weather=echo sunny",
            "--json",
        ],
    ));
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_eq!(json_lines(&out).pop().expect("message_complete"), expected);
    let requests = srv.requests();
    assert_eq!(
        requests.len(),
        2,
        "a response the checkpoint held was requested again"
    );
    assert_eq!(requests[1].body, expected_second);
    assert!(!left[0].exists(), "the finished turn's file is removed");
    // The conversation holds the whole turn.
    let conversation = left[0].with_extension("");
    let saved: Value =
        serde_json::from_str(&std::fs::read_to_string(&conversation).expect("saved")).unwrap();
    let roles: Vec<&str> = saved["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["role"].as_str())
        .collect();
    assert_eq!(roles, ["user", "assistant", "tool", "assistant"], "{saved}");
    assert_eq!(saved["messages"][0]["content"][0]["text"], "w?");
    assert_eq!(saved["messages"][2]["content"][0]["output"], "sunny");
}
