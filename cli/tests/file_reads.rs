//! Every file the CLI reads by path (`-a`, `--session`, `--schema`, `--tools`,
//! `--config`) is read bounded: a FIFO (whose ordinary open blocks until a writer
//! comes) or a device such as `/dev/zero` (endless, and size 0 by its metadata) is a
//! config error naming the path (exit 2), at once; a sparse file past the flag's cap
//! is refused after reading the cap, whatever the metadata says. Nothing is sent.

mod support;

use std::path::{Path, PathBuf};

use serde_json::json;

use support::*;

fn mkfifo(path: &Path) {
    let status = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap();
    assert!(status.success());
}

/// A sparse file of `len` bytes starting with `head`: its metadata says `len`.
fn sparse(path: &Path, head: &[u8], len: u64) {
    std::fs::write(path, head).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(len)
        .unwrap();
}

#[test]
fn fifos_devices_and_files_past_their_cap_are_refused_at_once() {
    let d = temp_dir("file-reads");
    let srv = server(json!({"exchanges": [answer_text("unused", 1)]}));
    let base = format!("{}/v1", srv.url());
    let fifo = d.join("pipe");
    mkfifo(&fifo);
    let big_png = d.join("big.png");
    sparse(&big_png, b"\x89PNG\r\n\x1a\n", 64 << 30);
    let big_json = d.join("big.json");
    sparse(&big_json, b"[", 64 << 30);
    let big_session = d.join("big-session.json");
    sparse(&big_session, b"[", 64 << 30);
    let big_toml = d.join("big.toml");
    sparse(&big_toml, b"#", 64 << 30);
    let s = |p: &PathBuf| p.to_str().unwrap().to_owned();
    let (fifo, zero) = (s(&fifo), "/dev/zero".to_owned());
    const FIFO: &str = "not a regular file (a FIFO)";
    const DEVICE: &str = "not a regular file (a character device)";
    // (flag, path, what the error says after the path)
    let cases: Vec<(&str, String, &str)> = vec![
        ("-a", fifo.clone(), FIFO),
        ("-a", zero.clone(), DEVICE),
        ("-a", s(&big_png), "more than max_message_bytes (33554432)"),
        ("--session", fifo.clone(), FIFO),
        ("--session", s(&big_session), "more than max_history_bytes"),
        ("--schema", fifo.clone(), FIFO),
        ("--schema", zero.clone(), DEVICE),
        (
            "--schema",
            s(&big_json),
            "more than the --schema cap (1048576)",
        ),
        ("--tools", fifo.clone(), FIFO),
        ("--tools", zero.clone(), DEVICE),
        (
            "--tools",
            s(&big_json),
            "more than the tools file cap (4194304)",
        ),
        ("--config", fifo.clone(), FIFO),
        ("--config", zero.clone(), DEVICE),
        (
            "--config",
            s(&big_toml),
            "more than the config file cap (1048576)",
        ),
    ];
    for (flag, path, why) in &cases {
        let args = [
            "run",
            "--base-url",
            &base,
            "--api-key",
            "k",
            "-m",
            "gpt-4o",
            flag,
            path,
            "x",
        ];
        // `run` puts the hang guard on each: a blocked open or an endless read fails.
        let out = run(&mut panto_in(&d, &args));
        let err = stderr_of(&out);
        assert_eq!(out.status.code(), Some(2), "{flag} {path}: {err}");
        assert!(
            err.contains(&format!("{path}: {why}")),
            "{flag} {path}: {err}"
        );
    }
    assert!(srv.requests().is_empty(), "nothing was sent");
    std::fs::remove_dir_all(d).unwrap();
}
