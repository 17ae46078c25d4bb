//! `panto run -a FILE` and binary stdin: attachments reach the provider as parts, in
//! order after the prompt's text; an unreadable file, one of no known type and binary
//! stdin of no known type are config errors (exit 2) naming what is wrong, before
//! anything is sent.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use base64::Engine;
use panto_testserver::{Scenario, TestServer};
use serde_json::{json, Value};

const HANG_GUARD: Duration = Duration::from_secs(60);

fn dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("panto-cli-attach-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn panto(args: &[&str], stdin: Option<&[u8]>) -> Output {
    let home = dir().join("home");
    let mut child = Command::new(env!("CARGO_BIN_EXE_panto"))
        .args(args)
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("PANTO_PROFILE")
        .env_remove("PANTO_MODEL")
        .env_remove("PANTO_CONFIG")
        .env("HOME", &home)
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env("XDG_STATE_HOME", home.join("state"))
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(bytes) = stdin {
        let mut pipe = child.stdin.take().unwrap();
        pipe.write_all(bytes).unwrap();
    }
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    rx.recv_timeout(HANG_GUARD)
        .expect("panto hung")
        .expect("panto ran")
}

fn answering() -> TestServer {
    let chunk = |delta: Value, finish: Option<&str>| {
        json!({"data": {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}})
    };
    let sse = vec![
        chunk(json!({"role": "assistant", "content": "A cat."}), None),
        chunk(json!({}), Some("stop")),
        json!({"data": "[DONE]"}),
    ];
    let scenario = json!({"exchanges": [{"response": {"status": 200, "sse": sse}}]});
    TestServer::start(Scenario::from_json(&scenario.to_string()).unwrap()).unwrap()
}

fn b64(data: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(data)
}

const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\x00\x01\x02\xff";
const PDF: &[u8] = b"%PDF-1.4\n\x00\xfe";

#[test]
fn attached_files_follow_the_prompt_as_parts() {
    let d = dir();
    let (png, pdf) = (d.join("cat.png"), d.join("report.pdf"));
    std::fs::write(&png, PNG).unwrap();
    std::fs::write(&pdf, PDF).unwrap();
    let srv = answering();
    let base = format!("{}/v1", srv.url());
    let out = panto(
        &[
            "run",
            "--json",
            "--base-url",
            &base,
            "--api-key",
            "k",
            "-m",
            "gpt-4o",
            "-a",
            png.to_str().unwrap(),
            "--attach",
            pdf.to_str().unwrap(),
            "summarize",
        ],
        None,
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("\"message_complete\""));
    let body = &srv.requests()[0].body;
    assert_eq!(
        body["messages"][0]["content"],
        json!([
            {"type": "text", "text": "summarize"},
            {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{}", b64(PNG))}},
            {"type": "file", "file": {"filename": "report.pdf",
                "file_data": format!("data:application/pdf;base64,{}", b64(PDF))}},
        ])
    );
}

#[test]
fn binary_stdin_of_a_known_type_is_an_attachment() {
    let srv = answering();
    let base = format!("{}/v1", srv.url());
    let out = panto(
        &[
            "run",
            "--base-url",
            &base,
            "--api-key",
            "k",
            "-m",
            "gpt-4o",
            "what is this?",
        ],
        Some(PNG),
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "A cat.\n");
    assert_eq!(
        srv.requests()[0].body["messages"][0]["content"],
        json!([
            {"type": "text", "text": "what is this?"},
            {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{}", b64(PNG))}},
        ])
    );
}

#[test]
fn what_cannot_be_attached_is_a_config_error_before_anything_is_sent() {
    let d = dir();
    let text = d.join("notes.txt");
    std::fs::write(&text, "just text").unwrap();
    let srv = answering();
    let base = format!("{}/v1", srv.url());
    let common = ["run", "--base-url", &base, "--api-key", "k", "-m", "gpt-4o"];
    let missing = d.join("no-such.png");
    // Past the default max_message_bytes (32 MiB): sparse, so it costs no disk; the CLI
    // refuses it by its size, before reading it.
    let big = d.join("big.png");
    std::fs::File::create(&big)
        .unwrap()
        .set_len((32 << 20) + 1)
        .unwrap();
    /// Extra arguments, stdin, what the error says.
    type Case<'a> = (Vec<&'a str>, Option<&'a [u8]>, &'a str);
    let cases: Vec<Case> = vec![
        (
            vec!["-a", missing.to_str().unwrap(), "x"],
            None,
            "no-such.png",
        ),
        (
            vec!["-a", big.to_str().unwrap(), "x"],
            None,
            "more than max_message_bytes (33554432)",
        ),
        (
            vec!["-a", text.to_str().unwrap(), "x"],
            None,
            "not a PNG, JPEG, GIF, WebP or PDF",
        ),
        (
            vec!["x"],
            Some(b"\x00\x01\xfe\xffbinary"),
            "binary data that is not a PNG",
        ),
    ];
    for (extra, stdin, want) in cases {
        let args: Vec<&str> = common.iter().copied().chain(extra).collect();
        let out = panto(&args, stdin);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(want), "{err}");
    }
    assert!(srv.requests().is_empty(), "nothing was sent");
}
