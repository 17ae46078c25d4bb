//! Property tests of chunking independence: however the bytes of a stream are split into
//! chunks (including empty ones, and splits inside CRLF, a BOM or a multi-byte
//! character), the SSE parser yields the same events as when fed the whole stream at
//! once — and those events are the ones a straightforward whole-input reading of the
//! WHATWG rules gives. The same holds end to end for the decoders over real captures.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use panto::provider::ProviderKind;
use panto::sse::SseParser;
use panto_testkit::decode;
use proptest::prelude::*;

/// (event type, data, last event id) of each dispatched event.
type Ev = (String, String, String);

#[derive(Debug, PartialEq)]
struct Parsed {
    events: Vec<Ev>,
    retry_ms: Option<u64>,
    pending: bool,
    /// OR of what `feed` returned for each chunk.
    progress: bool,
}

fn parse(chunks: &[&[u8]]) -> Parsed {
    let mut p = SseParser::default();
    let mut events = Vec::new();
    let mut progress = false;
    for c in chunks {
        progress |= p
            .feed(c, |e| {
                events.push((e.event.to_owned(), e.data.to_owned(), e.id.to_owned()));
                Ok(())
            })
            .expect("no event here is near the size limit");
    }
    Parsed {
        events,
        retry_ms: p.retry_ms(),
        pending: p.has_pending(),
        progress,
    }
}

/// Splits `input` at `cuts` (taken modulo `len + 1`, sorted; repeats make empty chunks).
fn split<'a>(input: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
    let mut at: Vec<usize> = cuts.iter().map(|c| c % (input.len() + 1)).collect();
    at.sort_unstable();
    let mut out = Vec::with_capacity(at.len() + 1);
    let mut start = 0;
    for c in at {
        out.push(&input[start..c]);
        start = c;
    }
    out.push(&input[start..]);
    out
}

/// The WHATWG event-stream interpretation over a whole input, written as plainly as
/// possible (an oracle, not an implementation to reuse).
fn reference(input: &[u8]) -> Vec<Ev> {
    let input = input.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(input);
    let mut lines: Vec<&[u8]> = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i < input.len() {
        match input[i] {
            b'\n' => {
                lines.push(&input[start..i]);
                start = i + 1;
            }
            b'\r' => {
                lines.push(&input[start..i]);
                if input.get(i + 1) == Some(&b'\n') {
                    i += 1;
                }
                start = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    // Bytes after the last line end are an unterminated line: never processed.
    let (mut data, mut event, mut id_buf) = (Vec::new(), Vec::new(), Vec::new());
    let mut out = Vec::new();
    for line in lines {
        if line.is_empty() {
            // The last event id is committed at every dispatch, even a data-less one.
            let last_id = String::from_utf8_lossy(&id_buf).into_owned();
            if !data.is_empty() {
                data.pop();
                let ty = String::from_utf8_lossy(&event).into_owned();
                out.push((
                    if ty.is_empty() {
                        "message".to_owned()
                    } else {
                        ty
                    },
                    String::from_utf8_lossy(&data).into_owned(),
                    last_id,
                ));
            }
            data.clear();
            event.clear();
            continue;
        }
        if line[0] == b':' {
            continue;
        }
        let (name, value) = match line.iter().position(|&b| b == b':') {
            Some(p) => {
                let v = &line[p + 1..];
                (&line[..p], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &[][..]),
        };
        match name {
            b"data" => {
                data.extend_from_slice(value);
                data.push(b'\n');
            }
            b"event" => event = value.to_vec(),
            b"id" if !value.contains(&0) => id_buf = value.to_vec(),
            _ => {}
        }
    }
    out
}

/// One line of an SSE-ish stream, without its line ending.
fn line() -> impl Strategy<Value = Vec<u8>> {
    let text = prop::sample::select(vec![
        "",
        "x",
        " x",
        "  two spaces",
        "\ttab",
        "hello world",
        "{\"a\":1}",
        "[DONE]",
        "é",
        "°C",
        "漢字",
        "🙂 emoji",
        "a:b:c",
        "\0",
        "\u{FEFF}",
        "Ünïcödé",
    ]);
    let raw = prop::sample::select(vec![
        &b"\xFF\xFE"[..],
        b"\xC3",
        b"\xE6\xBC",
        b"\xEF\xBB\xBF",
        b"\xF0\x9F\x99",
    ]);
    prop_oneof![
        6 => text.clone().prop_map(|t| format!("data: {t}").into_bytes()),
        2 => text.clone().prop_map(|t| format!("data:{t}").into_bytes()),
        1 => Just(b"data".to_vec()),
        1 => raw.prop_map(|r| [&b"data: "[..], r].concat()),
        2 => prop::sample::select(vec!["message", "ping", "error", "content_block_delta", "", "é"])
            .prop_map(|e| format!("event: {e}").into_bytes()),
        1 => Just(b"event".to_vec()),
        1 => text.clone().prop_map(|t| format!("id: {t}").into_bytes()),
        1 => Just(b"id".to_vec()),
        1 => prop::sample::select(vec!["0", "1000", "02000", "+5", "12x", "", "99999999999999999999999"])
            .prop_map(|r| format!("retry: {r}").into_bytes()),
        2 => prop::sample::select(vec![":", ": keep-alive", ": OPENROUTER PROCESSING", ":data: no", ":\0"])
            .prop_map(|c| c.as_bytes().to_vec()),
        1 => prop::sample::select(vec!["foo: bar", "Data: x", " data: y", "data\0: z", "justtext"])
            .prop_map(|c| c.as_bytes().to_vec()),
        4 => Just(Vec::new()),
    ]
}

fn stream() -> impl Strategy<Value = Vec<u8>> {
    let ending = prop::sample::select(vec![&b"\n"[..], b"\r", b"\r\n"]);
    (
        0usize..3,
        prop::collection::vec((line(), ending), 0..24),
        any::<bool>(),
        prop::collection::vec(any::<u8>(), 0..4),
    )
        .prop_map(|(boms, lines, close, tail)| {
            let mut out = b"\xEF\xBB\xBF".repeat(boms);
            for (l, e) in lines {
                out.extend_from_slice(&l);
                out.extend_from_slice(e);
            }
            if close {
                out.extend_from_slice(b"\n");
            } else {
                // An unterminated tail: must stay pending, never dispatched.
                out.extend_from_slice(&tail);
            }
            out
        })
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 1024,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn sse_chunking_does_not_change_events(
        input in stream(),
        cuts in prop::collection::vec(any::<usize>(), 0..12),
    ) {
        let whole = parse(&[&input]);
        prop_assert_eq!(&whole.events, &reference(&input));
        let chunks = split(&input, &cuts);
        prop_assert_eq!(parse(&chunks), whole);
    }

    #[test]
    fn sse_byte_at_a_time_matches(input in stream()) {
        let bytes: Vec<&[u8]> = input.chunks(1).collect();
        prop_assert_eq!(parse(&bytes), parse(&[&input]));
    }
}

#[test]
fn crlf_split_by_an_empty_chunk_is_one_line_end() {
    // Regression (found by the property above): an empty chunk between the CR and the LF
    // of a CRLF used to turn the LF into a blank line, dispatching an unfinished event.
    let whole = parse(&[b"data: x\r\n"]);
    assert_eq!(parse(&[b"data: x\r", b"", b"\n"]), whole);
    assert!(whole.events.is_empty() && whole.pending);
    let e = parse(&[b"data: x\r", b"", b"", b"\n\r", b"", b"\n"]);
    assert_eq!(
        e.events,
        vec![("message".to_owned(), "x".to_owned(), String::new())]
    );
}

fn sse_captures() -> &'static [(String, ProviderKind, Vec<u8>)] {
    static CAPTURES: OnceLock<Vec<(String, ProviderKind, Vec<u8>)>> = OnceLock::new();
    CAPTURES.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/real");
        let mut out = Vec::new();
        let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        dirs.sort();
        for dir in dirs.into_iter().filter(|d| d.is_dir()) {
            let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
                .unwrap()
                .map(|e| e.unwrap().path())
                .collect();
            files.sort();
            for f in files
                .into_iter()
                .filter(|f| f.extension().is_some_and(|e| e == "sse"))
            {
                let meta_path = f.with_extension("meta.json");
                let meta: serde_json::Value =
                    serde_json::from_slice(&std::fs::read(&meta_path).unwrap()).unwrap();
                let kind = ProviderKind::parse(meta["sdk"].as_str().unwrap()).unwrap();
                out.push((f.display().to_string(), kind, std::fs::read(&f).unwrap()));
            }
        }
        assert_eq!(out.len(), 37, "SSE captures");
        out
    })
}

/// The one-chunk decoding of each capture, computed once.
fn baseline(i: usize) -> &'static decode::Outcome {
    static BASE: OnceLock<Vec<decode::Outcome>> = OnceLock::new();
    &BASE.get_or_init(|| {
        sse_captures()
            .iter()
            .map(|(_, kind, body)| decode::decode(*kind, body))
            .collect()
    })[i]
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 128,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn real_capture_chunking_does_not_change_decoding(
        which in 0usize..37,
        cuts in prop::collection::vec(any::<usize>(), 0..200),
    ) {
        let (name, kind, body) = &sse_captures()[which];
        let chunks = split(body, &cuts);
        let got = decode::decode_chunks(*kind, chunks);
        prop_assert!(&got == baseline(which), "{} decodes differently when split", name);
    }
}
