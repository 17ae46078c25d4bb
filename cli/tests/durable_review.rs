//! The edges of the conversation's unfinished turn (`CONVERSATION.checkpoint`) and of
//! `panto resume`: every way of going on with a conversation respects the turn it left
//! unfinished (no later resume replaces newer turns with an older checkpoint), a resume
//! refused before it starts keeps the turn, the pause note's command saves the turn in
//! its own conversation, a checkpoint path that is not a regular file is refused
//! without hanging, and `panto resume` with a stray word is not sent as a prompt.

mod support;

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

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

/// The model calls `weather`, then answers `answer` as many times as asked.
fn tool_then_answers(answer: &str) -> Value {
    json!({"exchanges": [
        {"response": {"status": 200, "sse": openai_tool_call("call_1")}},
        answer_text(answer, 10),
    ]})
}

/// The roles and first texts (or tool outputs) of the saved conversation `path`.
fn saved(path: &Path) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(path).expect("the conversation file");
    let doc: Value = serde_json::from_str(&text).expect("JSON");
    doc["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| {
            let first = &m["content"][0];
            let shown = first["text"]
                .as_str()
                .or(first["output"].as_str())
                .unwrap_or_default();
            (
                m["role"].as_str().unwrap_or_default().to_owned(),
                shown.to_owned(),
            )
        })
        .collect()
}

/// `--session s.json --confirm` with no terminal: the turn pauses (exit 8), leaving
/// `s.json.checkpoint`. Returns the session and its checkpoint.
fn paused_session(home: &Path, base: &str) -> (PathBuf, PathBuf) {
    let session = home.join("s.json");
    let s = session.to_str().expect("utf-8 path");
    let out = run(without_terminal(&mut panto_in(
        home,
        &[
            "--confirm",
            "--session",
            s,
            "--base-url",
            base,
            "--tool",
            "weather=echo sunny",
            "w?",
        ],
    )));
    assert_eq!(out.status.code(), Some(8), "{}", describe(&out));
    let checkpoint = home.join("s.json.checkpoint");
    assert!(checkpoint.is_file(), "{}", describe(&out));
    (session, checkpoint)
}

/// `panto chat` and `run --checkpoint F` on a conversation with an unfinished turn are
/// refused as a run with a prompt is: otherwise their turns are saved, and the later
/// `panto -c` that finishes the old turn replaces them with the checkpoint's older
/// conversation.
#[test]
fn chat_and_run_with_checkpoint_respect_the_unfinished_turn() {
    let home = temp_dir("review-unfinished");
    let srv = server(tool_then_answers("Sunny."));
    let base = format!("{}/v1", srv.url());
    let (session, checkpoint) = paused_session(&home, &base);
    let s = session.to_str().expect("utf-8 path");
    let before = std::fs::read_to_string(&session).expect("saved");

    let out = run_with_stdin(
        &mut panto_in(
            &home,
            &[
                "chat",
                "--session",
                s,
                "--base-url",
                &base,
                "--tool",
                "weather=echo sunny",
            ],
        ),
        "another question\n",
    );
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(
        stderr_of(&out).contains(&checkpoint.display().to_string()),
        "{}",
        describe(&out)
    );

    let other = home.join("other.checkpoint");
    let out = run(&mut panto_in(
        &home,
        &[
            "--session",
            s,
            "--checkpoint",
            other.to_str().expect("utf-8 path"),
            "--base-url",
            &base,
            "--tool",
            "weather=echo sunny",
            "another question",
        ],
    ));
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(
        stderr_of(&out).contains(&checkpoint.display().to_string()),
        "{}",
        describe(&out)
    );

    // Nothing was sent, nothing changed.
    assert_eq!(srv.requests().len(), 1);
    assert_eq!(std::fs::read_to_string(&session).expect("saved"), before);
    assert!(checkpoint.is_file());
}

/// A resume of the conversation's unfinished turn refused before it starts (here: the
/// `--tool` flag forgotten) keeps the turn: the file stays for the run with the flag.
#[test]
fn a_refused_resume_keeps_the_unfinished_turn() {
    let home = temp_dir("review-refused");
    let srv = server(tool_then_answers("Sunny."));
    let base = format!("{}/v1", srv.url());
    let (session, checkpoint) = paused_session(&home, &base);
    let s = session.to_str().expect("utf-8 path");
    let kept = std::fs::read_to_string(&checkpoint).expect("checkpoint");

    let out = run(&mut panto_in(&home, &["--session", s, "--base-url", &base]));
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(stderr_of(&out).contains("weather"), "{}", describe(&out));
    assert_eq!(
        std::fs::read_to_string(&checkpoint).ok().as_deref(),
        Some(kept.as_str()),
        "the unfinished turn was dropped"
    );

    // With the flag the turn goes on (still paused: -c gives no answers).
    let out = run(without_terminal(&mut panto_in(
        &home,
        &[
            "--confirm",
            "--session",
            s,
            "--base-url",
            &base,
            "--tool",
            "weather=echo sunny",
        ],
    )));
    assert_eq!(out.status.code(), Some(8), "{}", describe(&out));
    assert_eq!(srv.requests().len(), 1);
}

/// The pause note of a conversation's turn gives a command that finishes the turn in
/// that conversation: following it saves the approved call's result and the answer in
/// the `--session` file, and the next prompt goes on from there.
#[test]
fn the_pause_note_finishes_the_turn_in_its_own_conversation() {
    let home = temp_dir("review-note");
    let srv = server(tool_then_answers("Sunny."));
    let base = format!("{}/v1", srv.url());
    let session = home.join("s.json");
    let s = session.to_str().expect("utf-8 path");
    let flags = [
        "--confirm",
        "--base-url",
        &base,
        "--tool",
        "weather=echo sunny",
    ];
    let mut first = vec!["--session", s, "w?"];
    first.extend(flags);
    let out = run(without_terminal(&mut panto_in(&home, &first)));
    assert_eq!(out.status.code(), Some(8), "{}", describe(&out));
    // "continue with: panto resume …, with the same tool flags"
    let note = stderr_of(&out);
    let command = note
        .split("continue with: panto ")
        .nth(1)
        .and_then(|rest| rest.split(" (or --reject").next())
        .unwrap_or_else(|| panic!("no command in: {note}"));
    let mut words: Vec<&str> = command.split(' ').collect();
    words.extend(flags);
    let out = run(without_terminal(&mut panto_in(&home, &words)));
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_eq!(stdout_of(&out), "Sunny.\n");

    let roles: Vec<(String, String)> = saved(&session);
    assert_eq!(
        roles,
        [
            ("user".to_owned(), "w?".to_owned()),
            ("assistant".to_owned(), "Let me check.".to_owned()),
            ("tool".to_owned(), "sunny".to_owned()),
            ("assistant".to_owned(), "Sunny.".to_owned()),
        ],
        "the session file does not hold the finished turn"
    );
    assert!(!home.join("s.json.checkpoint").exists());

    let mut next = vec!["--session", s, "and tomorrow?"];
    next.extend(flags);
    let out = run(without_terminal(&mut panto_in(&home, &next)));
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let texts = message_texts(&srv.requests().last().expect("a request").body);
    assert!(texts.contains(&"sunny".to_owned()), "{texts:?}");
}

/// A checkpoint path that is a FIFO (or a device) is refused at once, as a directory
/// is: reading it would wait for a writer (or never end).
#[test]
fn a_checkpoint_that_is_not_a_regular_file_is_refused() {
    let home = temp_dir("review-fifo");
    let fifo = home.join("s.json.checkpoint");
    let path = std::ffi::CString::new(fifo.to_str().expect("utf-8 path")).expect("no NUL");
    assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0);
    let session = home.join("s.json");
    let s = session.to_str().expect("utf-8 path");
    let base = "http://127.0.0.1:9/v1";

    let out = run(&mut panto_in(
        &home,
        &["--session", s, "--base-url", base, "hi"],
    ));
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(
        stderr_of(&out).contains("not a regular file"),
        "{}",
        describe(&out)
    );
    for file in [fifo.to_str().expect("utf-8 path"), "/dev/zero"] {
        let out = run(&mut panto_in(&home, &["resume", file, "--base-url", base]));
        assert_eq!(out.status.code(), Some(2), "{file}: {}", describe(&out));
        assert!(
            stderr_of(&out).contains("not a regular file"),
            "{}",
            describe(&out)
        );
    }
}

/// A word after `panto resume FILE` (an answer without its flag) is a usage error, not
/// the prompt of a new run.
#[test]
fn a_stray_word_after_resume_is_a_usage_error() {
    let home = temp_dir("review-stray");
    let srv = server(tool_then_answers("Sunny."));
    let base = format!("{}/v1", srv.url());
    let (_, checkpoint) = paused_session(&home, &base);
    let out = run(&mut panto_in(
        &home,
        &[
            "resume",
            checkpoint.to_str().expect("utf-8 path"),
            "call_1",
            "--base-url",
            &base,
            "--tool",
            "weather=echo sunny",
        ],
    ));
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert_eq!(srv.requests().len(), 1, "a request was sent");
}

/// `panto chat` without a terminal and `--confirm`: a turn that pauses ends the chat
/// with exit code 8 and the pause note, as `run` does; it used to go on silently to the
/// next line, past a turn a later `panto -c` would resume over it.
#[test]
fn a_scripted_chat_stops_at_a_paused_turn() {
    let home = temp_dir("review-chat-pause");
    let srv = server(tool_then_answers("Sunny."));
    let base = format!("{}/v1", srv.url());
    let session = home.join("s.json");
    let s = session.to_str().expect("utf-8 path");
    let out = run_with_stdin(
        without_terminal(&mut panto_in(
            &home,
            &[
                "chat",
                "--confirm",
                "--session",
                s,
                "--base-url",
                &base,
                "--tool",
                "weather=echo sunny",
            ],
        )),
        "w?\nsecond question\n",
    );
    assert_eq!(out.status.code(), Some(8), "{}", describe(&out));
    let note = stderr_of(&out);
    let checkpoint = home.join("s.json.checkpoint");
    assert!(
        note.contains(&format!("panto resume {}", checkpoint.display())),
        "{note}"
    );
    assert!(checkpoint.is_file());
    assert_eq!(srv.requests().len(), 1, "the chat went on past the pause");
}

/// Without a terminal, `panto chat` reads each line as a message: a line arriving
/// while a turn runs is the next turn's message, never steering.
#[test]
fn a_scripted_chat_does_not_steer() {
    let home = temp_dir("review-chat-no-steer");
    let started = home.join("started");
    let release = home.join("release");
    let srv = server(json!({"exchanges": [
        {"response": {"status": 200, "sse": openai_tool_call("call_1")}},
        answer_text("Sunny.", 1),
        answer_text("In Celsius: 18.", 1),
    ]}));
    let base = format!("{}/v1", srv.url());
    let tool = format!(
        "weather=touch {}; while [ ! -e {} ]; do sleep 0.02; done; echo sunny",
        started.display(),
        release.display()
    );
    let mut child = panto_in(&home, &["chat", "--base-url", &base, "--tool", &tool])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("spawn panto");
    let mut stdin = child.stdin.take().expect("stdin");
    use std::io::Write;
    stdin.write_all(b"Weather?\n").expect("write");
    stdin.flush().expect("flush");
    panto_testkit::eventually("the tool to start", || started.exists());
    stdin.write_all(b"in Celsius please\n").expect("write");
    stdin.flush().expect("flush");
    std::fs::write(&release, "").expect("release");
    drop(stdin);
    let out = finish(child);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_eq!(stdout_of(&out), "Sunny.\nIn Celsius: 18.\n");
    let requests = srv.requests();
    assert_eq!(requests.len(), 3);
    let second = message_texts(&requests[1].body);
    assert!(
        !second.iter().any(|t| t.contains("in Celsius please")),
        "{second:?}"
    );
    assert_eq!(
        message_texts(&requests[2].body).last().map(String::as_str),
        Some("in Celsius please")
    );
}

/// Every file files a paused turn leaves (the `--checkpoint` file, the conversation,
/// its unfinished turn, the state directory) is free of the API key and of a
/// credential header's value.
#[test]
fn no_file_a_paused_turn_leaves_holds_the_key() {
    let home = temp_dir("review-key");
    let srv = server(json!({"exchanges": [
        {"times": 2, "response": {"status": 200, "sse": openai_tool_call("call_1")}},
    ]}));
    let base = format!("{}/v1", srv.url());
    let key = "sk-review-0123456789abcdef";
    let token = "tok-review-fedcba9876543210";
    let header = format!("X-Auth-Token: {token}");
    for checkpoint in [Some("turn.checkpoint"), None] {
        let mut args = vec![
            "--confirm",
            "--api-key",
            key,
            "--header",
            &header,
            "--base-url",
            &base,
            "--tool",
            "weather=echo sunny",
        ];
        let path = home.join("turn.checkpoint");
        if checkpoint.is_some() {
            args.extend(["--checkpoint", path.to_str().expect("utf-8 path")]);
        }
        args.push("w?");
        let out = run(without_terminal(&mut panto_in(&home, &args)));
        assert_eq!(out.status.code(), Some(8), "{}", describe(&out));
    }
    let mut files = Vec::new();
    let mut dirs = vec![home.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("read dir").flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                files.push(path);
            }
        }
    }
    let checkpoints = files
        .iter()
        .filter(|p| p.to_string_lossy().ends_with(".checkpoint"))
        .count();
    assert_eq!(checkpoints, 2, "{files:?}");
    for file in &files {
        let bytes = std::fs::read(file).expect("read");
        let text = String::from_utf8_lossy(&bytes);
        assert!(!text.contains(key), "{} holds the key", file.display());
        assert!(!text.contains(token), "{} holds the header", file.display());
    }
}
