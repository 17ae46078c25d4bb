//! Replays every input the fuzzers once crashed on, saved under
//! `tests/fuzz_regressions/<target>/`, through the same code as the fuzz target (the
//! harness in `fuzz/src/lib.rs`, compiled here on stable Rust). A file dropped into one
//! of those directories is picked up without touching this file.

#[path = "../../fuzz/src/lib.rs"]
mod harness;

use std::path::{Path, PathBuf};

use panto::ProviderKind;

/// Inputs that still crash on this branch because the fix lives in code being rewritten
/// elsewhere: skipped by the directory replay, each kept as an ignored test below.
const KNOWN_FAILING: &[&str] = &[];

fn inputs(target: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fuzz_regressions")
        .join(target);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.expect("readable directory entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

fn label(path: &Path) -> String {
    let target = path.parent().and_then(Path::file_name).unwrap_or_default();
    let name = path.file_name().unwrap_or_default();
    format!("{}/{}", target.to_string_lossy(), name.to_string_lossy())
}

/// Runs `check` on every saved input of `target`, reporting all that panic.
fn replay(target: &str, check: fn(&[u8])) {
    let mut failures = Vec::new();
    for path in inputs(target) {
        let name = label(&path);
        if KNOWN_FAILING.contains(&name.as_str()) {
            continue;
        }
        let data = std::fs::read(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
        if std::panic::catch_unwind(|| check(&data)).is_err() {
            failures.push(name);
        }
    }
    assert!(failures.is_empty(), "crashing inputs: {failures:?}");
}

fn decoder_openai(data: &[u8]) {
    harness::decoder(ProviderKind::OpenAi, data);
}

fn decoder_anthropic(data: &[u8]) {
    harness::decoder(ProviderKind::Anthropic, data);
}

#[test]
fn sse() {
    replay("sse", harness::sse);
}

#[test]
fn decoder_openai_inputs() {
    replay("decoder_openai", decoder_openai);
}

#[test]
fn decoder_anthropic_inputs() {
    replay("decoder_anthropic", decoder_anthropic);
}

#[test]
fn config() {
    replay("config", harness::config);
}

#[test]
fn history() {
    replay("history", harness::history);
}

#[test]
fn known_failures_are_saved_inputs() {
    for name in KNOWN_FAILING {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fuzz_regressions")
            .join(name);
        assert!(path.is_file(), "{name} is listed but not saved");
    }
}
