//! Replays every input the fuzzers once crashed on, saved under
//! `tests/fuzz_regressions/<target>/`, through the same code as the fuzz target (the
//! harness in `panto_testkit::fuzz`, compiled here on stable Rust). A file dropped into one
//! of those directories is picked up without touching this file. The targets are the
//! `[[bin]]`s of `fuzz/Cargo.toml`, their one list (scripts/fuzz.sh reads it too):
//! `every_fuzz_target_has_a_replay` fails when one of them has no replay here, so no
//! target's reproducers can sit unreplayed. Also runs the harness
//! over the fuzzers' seeds, so a property that wrongly fails on valid input shows up in
//! `cargo test` rather than as a bogus crash in a nightly fuzz run.
//!
//! Each saved input runs in a child process (this test binary again, see
//! `replay_child`) under a 2 GiB address-space limit, like the fuzzers' `-rss_limit_mb`:
//! some reproducers make panto allocate without bound, which aborts the process instead
//! of panicking.

use std::path::{Path, PathBuf};
use std::process::Command;

use panto::ProviderKind;
use panto_testkit::fuzz as harness;

/// Inputs that still crash, skipped by the directory replay (each kept as an ignored test
/// below until fixed). None today.
const KNOWN_FAILING: &[&str] = &[];

/// Names the input a child process replays.
const CHILD_INPUT: &str = "PANTO_FUZZ_REPLAY_INPUT";

fn regressions_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz_regressions")
}

/// The harness of each fuzz target; `None` for a name that is not one.
fn check_for(target: &str) -> Option<fn(&[u8])> {
    Some(match target {
        "sse" => harness::sse,
        "decoder_openai" => |d| harness::decoder(ProviderKind::OpenAi, d),
        "decoder_anthropic" => |d| harness::decoder(ProviderKind::Anthropic, d),
        "decoder_gemini" => |d| harness::decoder(ProviderKind::Gemini, d),
        "decoder_responses" => |d| harness::decoder(ProviderKind::OpenAiResponses, d),
        "config" => harness::config,
        "history" => harness::history,
        "openai_chunk_scan" => harness::openai_chunk_scan,
        "output_schema" => harness::output_schema,
        "mcp" => harness::mcp,
        _ => return None,
    })
}

fn harness_of(target: &str) -> fn(&[u8]) {
    check_for(target).unwrap_or_else(|| panic!("{target}: not a fuzz target with a replay"))
}

/// The fuzz targets: the `name`s of the `[[bin]]` sections of `fuzz/Cargo.toml`.
fn fuzz_targets() -> Vec<String> {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/Cargo.toml");
    let text = std::fs::read_to_string(&manifest).expect("fuzz/Cargo.toml");
    let mut targets = Vec::new();
    let mut in_bin = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            in_bin = line == "[[bin]]";
        } else if let Some(value) = line.strip_prefix("name").map(str::trim_start) {
            if let (true, Some(v)) = (in_bin, value.strip_prefix('=')) {
                targets.push(v.trim().trim_matches('"').to_string());
            }
        }
    }
    assert!(!targets.is_empty(), "no [[bin]] in {}", manifest.display());
    targets
}

/// Replays `<target>/<file>` in a child process; `Err` holds the end of its output.
fn replay_isolated(name: &str) -> Result<(), String> {
    let out = Command::new(std::env::current_exe().expect("test binary path"))
        .args(["replay_child", "--exact", "--ignored", "--nocapture"])
        .args(["--test-threads", "1"])
        .env(CHILD_INPUT, name)
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("run the test binary again");
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let tail: Vec<&str> = stderr.lines().rev().take(6).collect();
    let tail: Vec<&str> = tail.into_iter().rev().collect();
    Err(format!("{name}: {} ({})", tail.join(" | "), out.status))
}

/// Replays every saved input of `target` except the known failures, reporting all that
/// crash.
fn replay(target: &str) {
    let dir = regressions_dir().join(target);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return;
    };
    let mut files: Vec<String> = entries
        .map(|e| e.expect("readable directory entry").path())
        .filter(|p| p.is_file())
        .map(|p| format!("{target}/{}", p.file_name().unwrap().to_string_lossy()))
        .filter(|name| !KNOWN_FAILING.contains(&name.as_str()))
        .collect();
    files.sort();
    let failures: Vec<String> = files
        .iter()
        .filter_map(|name| replay_isolated(name).err())
        .collect();
    assert!(
        failures.is_empty(),
        "crashing inputs:\n{}",
        failures.join("\n")
    );
}

/// Runs in the child process only (a no-op when started directly).
#[test]
#[ignore = "started by the other tests of this file, in a child process"]
fn replay_child() {
    let Ok(name) = std::env::var(CHILD_INPUT) else {
        return;
    };
    #[cfg(unix)]
    {
        let limit: libc::rlim_t = 2 << 30;
        let rl = libc::rlimit {
            rlim_cur: limit,
            rlim_max: limit,
        };
        // SAFETY: setrlimit only reads the struct it is given.
        assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_AS, &rl) }, 0);
    }
    let target = name.split('/').next().expect("<target>/<file>");
    let data = std::fs::read(regressions_dir().join(&name)).expect("saved input");
    harness_of(target)(&data);
}

/// Every saved input of every target (a target with no directory has none yet).
#[test]
fn every_targets_saved_inputs_replay() {
    for target in fuzz_targets() {
        replay(&target);
    }
}

/// A target missing from `check_for` would have its reproducers never replayed (as
/// decoder_gemini's and decoder_responses' were before the replay read the target list).
#[test]
fn every_fuzz_target_has_a_replay() {
    let targets = fuzz_targets();
    let unreplayed: Vec<&String> = targets.iter().filter(|t| check_for(t).is_none()).collect();
    assert!(
        unreplayed.is_empty(),
        "fuzz targets of fuzz/Cargo.toml with no replay in core/tests/fuzz_regressions.rs \
         (add each to check_for): {unreplayed:?}"
    );
}

#[test]
fn every_directory_is_a_target() {
    let targets = fuzz_targets();
    for entry in std::fs::read_dir(regressions_dir()).expect("regressions directory") {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            assert!(
                targets.contains(&name),
                "tests/fuzz_regressions/{name}: not a target of fuzz/Cargo.toml"
            );
        }
    }
    for name in KNOWN_FAILING {
        assert!(
            regressions_dir().join(name).is_file(),
            "{name} is listed but not saved"
        );
    }
}

/// `content_block_start` with `"index":42949672950`: the decoder used to grow its index
/// table to that size (an allocation of ~687 GB); indices are now mapped sparsely and a
/// jump that far is a `protocol` error.
#[test]
fn decoder_anthropic_huge_block_index() {
    replay_isolated("decoder_anthropic/huge-block-index").unwrap();
}

#[test]
fn harness_accepts_the_seeds() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let captures = repo.join("tests/fixtures/real");
    let mut n = 0;
    for provider in std::fs::read_dir(&captures).expect("fixtures directory") {
        let provider = provider.expect("directory entry").path();
        if !provider.is_dir() {
            continue;
        }
        for file in std::fs::read_dir(&provider).expect("provider directory") {
            let path = file.expect("directory entry").path();
            let name = path.to_string_lossy().into_owned();
            let Some(stem) = name.strip_suffix(".sse") else {
                continue;
            };
            let body = std::fs::read(&path).expect("capture body");
            let meta = std::fs::read_to_string(format!("{stem}.meta.json")).expect("meta");
            let meta: serde_json::Value = serde_json::from_str(&meta).expect("meta JSON");
            // As scripts/fuzz.sh seeds it: a 0 chunking header, then the capture.
            let mut framed = vec![0];
            framed.extend_from_slice(&body);
            harness::sse(&framed);
            let kind = ProviderKind::parse(meta["sdk"].as_str().expect("meta.sdk"))
                .expect("known provider");
            harness::decoder(kind, &body);
            n += 1;
        }
    }
    assert!(n > 0, "no captures found in {}", captures.display());
    let gemini = repo.join("tests/fixtures/gemini");
    let mut g = 0;
    for file in std::fs::read_dir(&gemini).expect("gemini fixtures") {
        let path = file.expect("directory entry").path();
        if path.extension().is_some_and(|e| e == "sse") {
            let body = std::fs::read(&path).expect("fixture body");
            let mut framed = vec![0];
            framed.extend_from_slice(&body);
            harness::sse(&framed);
            harness::decoder(ProviderKind::Gemini, &body);
            g += 1;
        }
    }
    assert!(g > 0, "no Gemini fixtures found in {}", gemini.display());
    // The OpenAI Responses streams, seeded as scripts/fuzz.sh seeds them.
    let responses = repo.join("tests/fixtures/responses");
    let mut m = 0;
    for file in std::fs::read_dir(&responses).expect("responses fixtures") {
        let path = file.expect("directory entry").path();
        if path.extension().is_some_and(|e| e == "sse") {
            let body = std::fs::read(&path).expect("fixture body");
            let mut framed = vec![0];
            framed.extend_from_slice(&body);
            harness::sse(&framed);
            harness_of("decoder_responses")(&body);
            m += 1;
        }
    }
    assert!(m > 0, "no streams found in {}", responses.display());
    for target in ["config", "history", "output_schema"] {
        let dir = repo.join("fuzz/seeds").join(target);
        for file in std::fs::read_dir(&dir).expect("seed directory") {
            harness_of(target)(
                &std::fs::read(file.expect("directory entry").path()).expect("seed"),
            );
        }
    }
    // The MCP framings, behind the chunking header scripts/fuzz.sh gives them: one
    // piece, and a message cap of 16 + 4 * 64 bytes (the high nibble).
    let mut k = 0;
    for file in std::fs::read_dir(repo.join("fuzz/seeds/mcp")).expect("mcp seeds") {
        let mut framed = vec![MCP_SEED_HEADER];
        framed.extend(std::fs::read(file.expect("directory entry").path()).expect("seed"));
        harness_of("mcp")(&framed);
        k += 1;
    }
    assert!(k > 0, "no MCP seeds");
}

/// The chunking header scripts/fuzz.sh puts before each MCP seed (octal 100 there).
const MCP_SEED_HEADER: u8 = 0o100;
