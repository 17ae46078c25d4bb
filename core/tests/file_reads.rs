//! Files named by path are read bounded: `panto::media::read_file`, `Media::from_path`
//! and the input form's `"path"` parts refuse what is not a regular file (a FIFO must
//! not block the open, `/dev/zero` must not be read until memory runs out) and read at
//! most the limit plus one byte, whatever the metadata says (a sparse file).

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use panto::media::read_file;
use panto::{ErrorKind, Input, Media};
use serde_json::json;

/// A generous hang guard: each read here takes milliseconds.
const HANG_GUARD: Duration = Duration::from_secs(60);

/// A fresh directory for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("panto-file-reads-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs `f` on a thread and fails the test if it has not answered within the guard (a
/// read that blocks, on a FIFO, or runs on, on `/dev/zero`).
fn guarded<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(HANG_GUARD)
        .expect("the read neither finished nor failed within the hang guard")
}

fn mkfifo(path: &Path) {
    let status = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap();
    assert!(status.success());
}

/// A sparse file of `len` bytes that starts as a PNG: its metadata says `len`, and a
/// reader that trusted it, or read it whole, would take it.
fn sparse_png(path: &Path, len: u64) {
    std::fs::write(path, b"\x89PNG\r\n\x1a\n").unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(len)
        .unwrap();
}

#[test]
fn a_fifo_is_a_config_error_naming_it_and_the_open_does_not_block() {
    let dir = scratch("fifo");
    let fifo = dir.join("pipe.png");
    mkfifo(&fifo);
    let path = fifo.clone();
    let err = guarded(move || Media::from_path(&path)).unwrap_err();
    assert_eq!(err.kind, ErrorKind::Config);
    assert!(
        err.message.contains(&*fifo.to_string_lossy()),
        "{}",
        err.message
    );
    assert!(
        err.message.contains("not a regular file (a FIFO)"),
        "{}",
        err.message
    );
    let path = fifo.clone();
    let err = guarded(move || read_file(&path, 10, "--schema", "the cap")).unwrap_err();
    assert!(err.message.starts_with("--schema "), "{}", err.message);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn dev_zero_is_refused_not_read_until_memory_runs_out() {
    let err = guarded(|| Media::from_path("/dev/zero")).unwrap_err();
    assert_eq!(err.kind, ErrorKind::Config);
    assert_eq!(
        err.message,
        "attachment /dev/zero: not a regular file (a character device)"
    );
    let err = guarded(|| Input::from_value(&json!([{"type": "image", "path": "/dev/zero"}])))
        .unwrap_err();
    assert!(err.message.contains("/dev/zero"), "{}", err.message);
}

#[test]
fn a_directory_is_refused() {
    let dir = scratch("dir");
    let err = guarded({
        let dir = dir.clone();
        move || Media::from_path(&dir)
    })
    .unwrap_err();
    assert!(err.message.contains("(a directory)"), "{}", err.message);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_sparse_file_past_the_limit_is_refused_after_reading_the_limit() {
    let dir = scratch("sparse");
    let big = dir.join("big.png");
    // 64 GiB apparent size: a whole read would take minutes and all memory.
    sparse_png(&big, 64 << 30);
    let path = big.clone();
    let err = guarded(move || Media::from_path(&path)).unwrap_err();
    assert_eq!(err.kind, ErrorKind::Config);
    assert!(
        err.message.contains(&*big.to_string_lossy()),
        "{}",
        err.message
    );
    assert!(
        err.message
            .ends_with("more than max_message_bytes (33554432)"),
        "{}",
        err.message
    );

    // The input form's "path" parts take the agent's limit.
    let small = dir.join("small.png");
    sparse_png(&small, 2000);
    let value = json!([{"type": "image", "path": small.to_string_lossy()}]);
    let err = Input::from_value_limited(&value, 1999).unwrap_err();
    assert!(
        err.message.ends_with("more than max_message_bytes (1999)"),
        "{}",
        err.message
    );
    let input = Input::from_value_limited(&value, 2000).unwrap();
    assert_eq!(input.parts().len(), 1);
    assert_eq!(Media::from_path_limited(&small, 2000).unwrap().size(), 2000);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn the_limit_holds_whatever_the_metadata_says() {
    // A file within the limit reads whole; one byte more is refused.
    let dir = scratch("exact");
    let file = dir.join("f");
    std::fs::write(&file, vec![7u8; 100]).unwrap();
    assert_eq!(read_file(&file, 100, "x", "cap").unwrap().len(), 100);
    let err = read_file(&file, 99, "--tools", "the --tools cap").unwrap_err();
    assert_eq!(
        err.message,
        format!("--tools {}: more than the --tools cap (99)", file.display())
    );
    let err = read_file(&dir.join("missing"), 99, "x", "cap").unwrap_err();
    assert_eq!(err.kind, ErrorKind::Config);
    std::fs::remove_dir_all(dir).unwrap();
}
