//! `panto run -a FILE` and binary stdin: attachments reach the provider as parts, in
//! order after the prompt's text; an unreadable file, one of no known type and binary
//! stdin of no known type are config errors (exit 2) naming what is wrong, before
//! anything is sent.

mod support;

use std::path::Path;
use std::process::Output;

use base64::Engine;
use panto_testserver::TestServer;
use serde_json::{json, Value};
use support::*;

/// `panto run` against `srv` (model gpt-4o) with HOME under `home`, `extra` arguments
/// (the prompt last) and `stdin` on its standard input (else none).
fn panto(home: &Path, srv: &TestServer, extra: &[&str], stdin: Option<&[u8]>) -> Output {
    let base = format!("{}/v1", srv.url());
    let mut args = vec!["run", "--base-url", &base, "--api-key", "k", "-m", "gpt-4o"];
    args.extend_from_slice(extra);
    let mut cmd = panto_in(home, &args);
    match stdin {
        Some(bytes) => run_with_stdin(&mut cmd, bytes),
        None => run(&mut cmd),
    }
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
    server(json!({"exchanges": [{"response": {"status": 200, "sse": sse}}]}))
}

fn b64(data: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(data)
}

const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\x00\x01\x02\xff";
const PDF: &[u8] = b"%PDF-1.4\n\x00\xfe";

#[test]
fn attached_files_follow_the_prompt_as_parts() {
    let d = temp_dir("attach-parts");
    let (png, pdf) = (d.join("cat.png"), d.join("report.pdf"));
    std::fs::write(&png, PNG).unwrap();
    std::fs::write(&pdf, PDF).unwrap();
    let srv = answering();
    let out = panto(
        &d,
        &srv,
        &[
            "--json",
            "-a",
            png.to_str().unwrap(),
            "--attach",
            pdf.to_str().unwrap(),
            "summarize",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert!(stdout_of(&out).contains("\"message_complete\""));
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
    let d = temp_dir("attach-stdin");
    let srv = answering();
    let out = panto(&d, &srv, &["what is this?"], Some(PNG));
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_eq!(stdout_of(&out), "A cat.\n");
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
    let d = temp_dir("attach-refused");
    let text = d.join("notes.txt");
    std::fs::write(&text, "just text").unwrap();
    let srv = answering();
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
        let out = panto(&d, &srv, &extra, stdin);
        let err = stderr_of(&out);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(want), "{err}");
    }
    assert!(srv.requests().is_empty(), "nothing was sent");
}
