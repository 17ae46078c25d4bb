//! The provider seam holds: outside `core/src/provider/` no code of the core names a
//! provider kind (`ProviderKind::Gemini` and the like). What differs between providers
//! is asked of the seam (`provider::wire::Wire`) and answered in the provider's own
//! module, so a fifth provider is one module and one line of the registration, and no
//! `match` elsewhere has to learn about it.
//!
//! Comment lines are not code: the crate's documentation shows users how to pick a
//! provider. Everything else counts, unit tests included.

use std::path::{Path, PathBuf};

use panto::ProviderKind;

/// Every `ProviderKind::<Variant>` in `source`, as (line number, line), skipping
/// comment lines.
fn kinds_named(source: &str) -> Vec<(usize, String)> {
    let variants: Vec<String> = ProviderKind::ALL
        .iter()
        .map(|k| format!("ProviderKind::{k:?}"))
        .collect();
    let mut found = Vec::new();
    for (i, line) in source.lines().enumerate() {
        if line.trim_start().starts_with("//") {
            continue;
        }
        let names_one = variants.iter().any(|v| {
            line.match_indices(v.as_str()).any(|(at, _)| {
                // `ProviderKind::OpenAi` must not count inside `ProviderKind::OpenAiResponses`
                // twice, nor a longer identifier that merely starts the same.
                !line[at + v.len()..].starts_with(|c: char| c.is_alphanumeric() || c == '_')
            })
        });
        if names_one {
            found.push((i + 1, line.trim().to_owned()));
        }
    }
    found
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read core/src") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_code_outside_the_provider_folder_names_a_provider_kind() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let provider = src.join("provider");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    assert!(files.len() > 10, "core/src has its modules: {files:?}");
    let mut offences = Vec::new();
    for file in files.iter().filter(|f| !f.starts_with(&provider)) {
        let source = std::fs::read_to_string(file).expect("read a source file");
        for (line, text) in kinds_named(&source) {
            let shown = file.strip_prefix(&src).unwrap_or(file).display();
            offences.push(format!("core/src/{shown}:{line}: {text}"));
        }
    }
    assert!(
        offences.is_empty(),
        "code outside core/src/provider/ names a provider kind; ask the provider seam \
         (provider::wire::Wire) instead:\n{}",
        offences.join("\n")
    );
}

#[test]
fn the_check_catches_a_kind_named_in_code_and_ignores_comments() {
    // The check would be worthless if it could not fail: it finds each kind, in a match
    // arm and in a comparison, and not in a comment or a longer name.
    let source = "\
        match kind {\n\
            ProviderKind::Gemini => 1,\n\
            _ => 2,\n\
        }\n\
        if config.provider == ProviderKind::OpenAiResponses {}\n\
        // ProviderKind::Anthropic is fine in a comment\n\
        /// as in ProviderKind::OpenAi docs\n\
        let k = ProviderKind::parse(\"openai\");\n\
        let n = ProviderKind::OpenAiX;\n";
    let found: Vec<usize> = kinds_named(source).into_iter().map(|(l, _)| l).collect();
    assert_eq!(found, [2, 5]);
    for kind in ProviderKind::ALL {
        let line = format!("let k = ProviderKind::{kind:?};");
        assert_eq!(kinds_named(&line).len(), 1, "{line}");
    }
}
