//! Helpers shared by the CLI's test files: a scripted server, `panto`
//! in an environment of its own (no key variables, a private HOME / XDG directories),
//! and scenario builders.
#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use panto_testserver::{Scenario, TestServer};
use serde_json::{json, Value};

/// How long any single `panto` process may take before the test calls it hung.
pub const HANG_GUARD: Duration = Duration::from_secs(60);

pub fn server(scenario: Value) -> TestServer {
    let scenario = Scenario::from_json(&scenario.to_string()).expect("valid scenario");
    TestServer::start(scenario).expect("test server starts")
}

/// A fresh, empty directory for one test's files.
pub fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("panto-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create temp dir");
    dir
}

/// A `panto` process on a pseudo-terminal of its own (expectrl).
pub type Pty = expectrl::session::OsSession;

/// `panto ARGS` as `panto_in` makes it, on a pseudo-terminal that is its controlling
/// terminal, stdin, stdout and stderr; `TERM` is set (CI may have none), then `env`.
/// Its expect timeout is the hang guard.
pub fn panto_on_pty(home: &Path, args: &[&str], env: &[(&str, &str)]) -> Pty {
    let mut cmd = panto_in(home, args);
    // The pty becomes the three streams before exec; a configured Stdio would replace it.
    cmd.stdin(Stdio::inherit())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .env("TERM", "xterm");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut session = expectrl::Session::spawn(cmd).expect("spawn panto on a pty");
    session.set_expect_timeout(Some(HANG_GUARD));
    session
}

/// The exit code of a `panto` on a pty (after it ended).
pub fn pty_exit_code(p: &Pty) -> i32 {
    match p.get_process().wait().expect("wait") {
        expectrl::process::unix::WaitStatus::Exited(_, code) => code,
        other => panic!("panto did not exit normally: {other:?}"),
    }
}

/// `panto` with nothing from the developer's environment: no key or base-URL variables,
/// HOME and the XDG directories under `home`.
pub fn panto_in(home: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_panto"));
    cmd.args(args);
    for var in [
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "OPENAI_BASE_URL",
        "ANTHROPIC_BASE_URL",
        "GEMINI_API_KEY",
        "GEMINI_BASE_URL",
        "PANTO_PROFILE",
        "PANTO_MODEL",
        "PANTO_CONFIG",
        "NO_COLOR",
    ] {
        cmd.env_remove(var);
    }
    cmd.env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env("XDG_STATE_HOME", home.join("state"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// Waits for `child` to exit under the hang guard (killing it if it hangs).
pub fn finish(child: Child) -> Output {
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(HANG_GUARD) {
        Ok(out) => out.expect("wait for panto"),
        Err(_) => {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            panic!("panto (pid {pid}) hung for {HANG_GUARD:?}");
        }
    }
}

pub fn run(cmd: &mut Command) -> Output {
    finish(cmd.spawn().expect("spawn panto"))
}

/// Runs `cmd` with `stdin` (text or bytes) written to its standard input, then closed.
pub fn run_with_stdin(cmd: &mut Command, stdin: impl AsRef<[u8]>) -> Output {
    let mut child = cmd.stdin(Stdio::piped()).spawn().expect("spawn panto");
    let mut pipe = child.stdin.take().expect("stdin pipe");
    pipe.write_all(stdin.as_ref()).expect("write stdin");
    drop(pipe);
    finish(child)
}

pub fn stdout_of(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn stderr_of(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Every stdout line parsed as JSON (a line that is not JSON fails the test).
pub fn json_lines(out: &Output) -> Vec<Value> {
    stdout_of(out)
        .lines()
        .map(|l| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {l}"))
        })
        .collect()
}

pub fn describe(out: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}--- stderr\n{}",
        out.status.code(),
        stdout_of(out),
        stderr_of(out)
    )
}

pub fn openai_chunk(delta: Value, finish: Option<&str>) -> Value {
    json!({"data": {"id": "chatcmpl-t", "object": "chat.completion.chunk", "model": "gpt-test",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}})
}

pub fn openai_text(text: &str) -> Vec<Value> {
    vec![
        openai_chunk(json!({"role": "assistant", "content": ""}), None),
        openai_chunk(json!({"content": text}), None),
        openai_chunk(json!({}), Some("stop")),
        json!({"data": "[DONE]"}),
    ]
}

/// One message calling `weather` with `{"city":"Paris"}`.
pub fn openai_tool_call(id: &str) -> Vec<Value> {
    vec![
        openai_chunk(
            json!({"role": "assistant", "content": "Let me check."}),
            None,
        ),
        openai_chunk(
            json!({"tool_calls": [{"index": 0, "id": id, "type": "function",
                "function": {"name": "weather", "arguments": "{\"city\":\"Paris\"}"}}]}),
            None,
        ),
        openai_chunk(json!({}), Some("tool_calls")),
        json!({"data": "[DONE]"}),
    ]
}

/// An exchange answering `times` requests with the text `answer`.
pub fn answer_text(answer: &str, times: u32) -> Value {
    json!({"times": times, "response": {"status": 200, "sse": openai_text(answer)}})
}

/// The text of every message of a recorded request body, in order.
pub fn message_texts(body: &Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .map(|messages| {
            messages
                .iter()
                .map(|m| match &m["content"] {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
                .collect()
        })
        .unwrap_or_default()
}
