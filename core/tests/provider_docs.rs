//! The docs against the code, so that they cannot quietly say less (or more) than it does:
//!
//! - docs/providers.md's table "What each provider is sent" is read cell by cell and
//!   checked against the request body each provider is really built (the agent's own
//!   path, `provider::request_body_with`, with an `OutputSpec` shaped as for a turn): a
//!   field the table names must be in the body and carry the feature, and a feature the
//!   table says is "not sent" must not reach the body;
//! - no page of README.md or docs/ says "not sent yet" of a field a body carries;
//! - README.md's count of conformance scenarios is the number of scenario directories,
//!   over as many providers as there are.

use std::path::{Path, PathBuf};

use base64::Engine;
use panto::provider::{request_body_with, RequestOptions, RequestParams, ToolSpec};
use panto::{Block, Effort, Media, Message, OutputMode, OutputSpec, ProviderKind, Reasoning, Role};
use serde_json::{json, Value};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(rel: &str) -> String {
    let path = root().join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

// ---------------------------------------------------------------- the request

/// Text that marks each feature in the request, so a check can tell which part of the
/// body carries it.
const SYSTEM: &str = "Answer in one line.";
const USER_TEXT: &str = "Compare the chart with the report.";
const TOOL_NAME: &str = "forecast";
const TOOL_PARAM: &str = "city_of_forecast";
const CALL_ARGUMENT: &str = "Reykjavik";
const RESULT_TEXT: &str = "Overcast, 4 degrees";
const OUTPUT_NAME: &str = "forecast_answer";
const OUTPUT_FIELD: &str = "forecast_summary";
const MAX_TOKENS: u32 = 50_000;
const TEMPERATURE: f64 = 0.25;
const MODEL: &str = "model-under-test";

fn png(tail: &[u8]) -> Vec<u8> {
    let mut v = b"\x89PNG\r\n\x1a\n".to_vec();
    v.extend_from_slice(tail);
    v
}

fn pdf() -> Vec<u8> {
    let mut v = b"%PDF-1.4\n".to_vec();
    v.extend_from_slice(b"the quarterly report, page one");
    v
}

fn b64(data: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(data)
}

fn input_image() -> Vec<u8> {
    png(b"the chart the user attached")
}

fn tool_image() -> Vec<u8> {
    png(b"the radar picture the tool returned")
}

/// A conversation with every kind of content: the user's text, image and PDF, the
/// model's call of the tool, and the tool's result of text and an image.
fn history() -> Vec<Message> {
    let media = |data: Vec<u8>| Media::bytes(data, None).expect("known media type");
    vec![
        Message {
            role: Role::User,
            content: vec![
                Block::Text {
                    text: USER_TEXT.into(),
                },
                Block::Image(media(input_image())),
                Block::Document(media(pdf()).with_name("report.pdf")),
            ],
        },
        Message {
            role: Role::Assistant,
            content: vec![Block::ToolCall {
                call_id: "call_1".into(),
                name: TOOL_NAME.into(),
                arguments: Some(json!({ TOOL_PARAM: CALL_ARGUMENT })),
                arguments_raw: None,
            }],
        },
        Message {
            role: Role::Tool,
            content: vec![Block::ToolResult {
                call_id: "call_1".into(),
                name: TOOL_NAME.into(),
                output: RESULT_TEXT.into(),
                is_error: false,
                parts: vec![
                    Block::Text {
                        text: RESULT_TEXT.into(),
                    },
                    Block::Image(media(tool_image())),
                ],
            }],
        },
    ]
}

fn tools() -> Vec<ToolSpec> {
    vec![ToolSpec {
        name: TOOL_NAME.into(),
        description: "The weather forecast of a city".into(),
        parameters: json!({"type": "object", "properties": {TOOL_PARAM: {"type": "string"}},
                           "required": [TOOL_PARAM]}),
        needs_approval: false,
        external: false,
    }]
}

fn output_schema() -> Value {
    json!({"title": OUTPUT_NAME, "type": "object",
           "properties": {OUTPUT_FIELD: {"type": "string"}}, "required": [OUTPUT_FIELD]})
}

/// Which request a row is checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Request {
    /// Everything: reasoning control, prompt caching, a native output schema.
    Full,
    /// The same without reasoning control (Anthropic leaves `temperature` out with it).
    NoReasoning,
    /// The output schema asked with `output_mode: "tool"`; no request when the provider
    /// refuses that mode.
    OutputTool,
}

/// The body `kind` is sent for `request`, as the agent builds it; `None` when the
/// configuration is refused before anything is sent.
fn body(kind: ProviderKind, request: Request) -> Option<Value> {
    let schema = output_schema();
    let mode = match request {
        Request::OutputTool => OutputMode::Tool,
        _ => OutputMode::Auto,
    };
    let spec = match OutputSpec::new(&schema, kind, mode, "output_schema") {
        Ok(spec) => spec,
        Err(e) if request == Request::OutputTool => {
            assert_eq!(e.kind, panto::ErrorKind::Config, "{e}");
            return None;
        }
        Err(e) => panic!("{}: the output schema is refused: {e}", kind.as_str()),
    };
    let history = history();
    let tools = tools();
    let params = RequestParams {
        model: MODEL,
        system: Some(SYSTEM),
        max_tokens: Some(MAX_TOKENS),
        temperature: Some(TEMPERATURE),
        tools: &tools,
        messages: &history,
    };
    let options = RequestOptions {
        reasoning: (request != Request::NoReasoning).then_some(Reasoning {
            effort: Effort::High,
            budget_tokens: None,
        }),
        prompt_caching: true,
        output: Some(spec.request()),
        ..RequestOptions::default()
    };
    Some(request_body_with(kind, &params, &options))
}

/// For each row of the table (by its first cell): the request it is checked against,
/// and the text that shows the feature is there. A field named by the table must carry
/// the marker; a feature said "not sent" must leave it out of the whole body.
fn probe(feature: &str) -> Option<(Request, Option<String>)> {
    Some(match feature {
        "system prompt" => (Request::Full, Some(SYSTEM.into())),
        "text" => (Request::Full, Some(USER_TEXT.into())),
        "images" => (Request::Full, Some(b64(&input_image()))),
        "documents (PDF)" => (Request::Full, Some(b64(&pdf()))),
        "tool definitions" => (Request::Full, Some(TOOL_PARAM.into())),
        "tool calls (sent back)" => (Request::Full, Some(CALL_ARGUMENT.into())),
        "tool results" => (Request::Full, Some(RESULT_TEXT.into())),
        "images in tool results" => (Request::Full, Some(b64(&tool_image()))),
        "structured output (`output_schema`)" => (Request::Full, Some(OUTPUT_FIELD.into())),
        "structured output with `output_mode: \"tool\"`" => {
            (Request::OutputTool, Some(OUTPUT_NAME.into()))
        }
        // Each provider spells the effort its own way (an effort name, a budget): the
        // field being there is the check.
        "reasoning control (`reasoning`)" => (Request::Full, None),
        "output limit (`max_tokens`)" => (Request::Full, Some(MAX_TOKENS.to_string())),
        "temperature" => (Request::NoReasoning, Some(TEMPERATURE.to_string())),
        "prompt caching (`prompt_caching`)" => (Request::Full, Some("ephemeral".into())),
        _ => return None,
    })
}

// ---------------------------------------------------------------- reading the table

/// A cell of the table: the field that carries the feature, or "not sent".
#[derive(Debug, Clone, PartialEq, Eq)]
enum Cell {
    Sent(String),
    NotSent,
}

const TABLE_MARK: &str = "<!-- wire table: checked by core/tests/provider_docs.rs -->";

/// The cells of a Markdown table row; a `|` inside backticks is text.
fn cells(line: &str) -> Vec<String> {
    let inner = line.trim().trim_start_matches('|').trim_end_matches('|');
    let mut out = vec![String::new()];
    let mut code = false;
    for c in inner.chars() {
        match c {
            '`' => {
                code = !code;
                out.last_mut().unwrap().push(c);
            }
            '|' if !code => out.push(String::new()),
            _ => out.last_mut().unwrap().push(c),
        }
    }
    out.into_iter().map(|c| c.trim().to_owned()).collect()
}

/// The code spans of `text`, in order.
fn code_spans(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// Whether `span` reads as a body path: keys joined by `.`, each optionally `[]`.
fn is_path(span: &str) -> bool {
    !span.is_empty()
        && span.split('.').all(|seg| {
            let key = seg.strip_suffix("[]").unwrap_or(seg);
            key.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
                && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
}

/// The table: the providers of its columns, and each row's feature and cells.
type Table = (Vec<ProviderKind>, Vec<(String, Vec<Cell>)>);

fn parse_table(page: &str) -> Result<Table, String> {
    let mut lines = page
        .lines()
        .skip_while(|l| l.trim() != TABLE_MARK)
        .skip(1)
        .take_while(|l| l.trim_start().starts_with('|'));
    let header = cells(lines.next().ok_or("no table after the mark")?);
    let mut columns = Vec::new();
    for h in &header[1..] {
        let name = code_spans(h)
            .first()
            .copied()
            .ok_or_else(|| format!("column {h:?} names no provider in backticks"))?;
        let kind = ProviderKind::ALL
            .iter()
            .copied()
            .find(|k| k.as_str() == name)
            .ok_or_else(|| format!("column {h:?}: {name:?} is not a provider"))?;
        columns.push(kind);
    }
    lines.next(); // | --- | --- |
    let mut rows = Vec::new();
    for line in lines {
        let row = cells(line);
        if row.len() != header.len() {
            return Err(format!(
                "{} cells, the header has {}: {line}",
                row.len(),
                header.len()
            ));
        }
        let mut parsed = Vec::new();
        for (cell, kind) in row[1..].iter().zip(&columns) {
            parsed.push(if cell.to_lowercase().starts_with("not sent") {
                Cell::NotSent
            } else {
                match code_spans(cell).first() {
                    Some(path) if is_path(path) => Cell::Sent((*path).to_owned()),
                    _ => {
                        return Err(format!(
                            "row {:?}, {}: a cell starts with \"not sent\" or names its field \
                             first, in backticks (`a.b[].c`): {cell:?}",
                            row[0],
                            kind.as_str()
                        ))
                    }
                }
            });
        }
        rows.push((row[0].clone(), parsed));
    }
    Ok((columns, rows))
}

// ---------------------------------------------------------------- reading a body

/// The values at `path` in `v` (`a.b` the key `b` inside `a`, `a[]` every element of
/// the list `a`).
fn find<'a>(v: &'a Value, path: &str) -> Vec<&'a Value> {
    let mut at = vec![v];
    for seg in path.split('.') {
        let (key, each) = match seg.strip_suffix("[]") {
            Some(key) => (key, true),
            None => (seg, false),
        };
        at = at
            .into_iter()
            .filter_map(|v| v.get(key))
            .flat_map(|v| match (each, v) {
                (true, Value::Array(items)) => items.iter().collect(),
                (true, _) => Vec::new(),
                (false, v) => vec![v],
            })
            .collect();
    }
    at
}

/// Whether `path` leads somewhere from any object of `v`, however deep.
fn found_anywhere(v: &Value, path: &str) -> bool {
    if !find(v, path).is_empty() {
        return true;
    }
    match v {
        Value::Object(map) => map.values().any(|v| found_anywhere(v, path)),
        Value::Array(items) => items.iter().any(|v| found_anywhere(v, path)),
        _ => false,
    }
}

/// What is wrong with the table of `page` against the bodies; empty when it agrees.
fn table_problems(page: &str) -> Vec<String> {
    let (columns, rows) = match parse_table(page) {
        Ok(table) => table,
        Err(e) => return vec![format!("docs/providers.md: the table: {e}")],
    };
    let mut problems = Vec::new();
    for kind in ProviderKind::ALL {
        if !columns.contains(kind) {
            problems.push(format!("the table has no column for {}", kind.as_str()));
        }
    }
    for (feature, cells) in &rows {
        let Some((request, marker)) = probe(feature) else {
            problems.push(format!(
                "row {feature:?}: this test has no probe for it (add one to `probe`)"
            ));
            continue;
        };
        for (cell, kind) in cells.iter().zip(&columns) {
            let name = kind.as_str();
            let body = body(*kind, request);
            match (cell, body) {
                (Cell::Sent(path), None) => problems.push(format!(
                    "{feature:?}, {name}: the table names `{path}`, but {name} refuses this \
                     request before sending it"
                )),
                (Cell::Sent(path), Some(body)) => {
                    let at = find(&body, path);
                    if at.is_empty() {
                        problems.push(format!(
                            "{feature:?}, {name}: the table names `{path}`, which is not in \
                             the body: {body}"
                        ));
                    } else if let Some(m) = &marker {
                        if !at.iter().any(|v| v.to_string().contains(m.as_str())) {
                            problems.push(format!(
                                "{feature:?}, {name}: `{path}` is in the body but does not \
                                 carry the feature ({m:?}): {at:?}"
                            ));
                        }
                    }
                }
                (Cell::NotSent, body) => match (&marker, body) {
                    (None, _) => problems.push(format!(
                        "{feature:?}, {name}: \"not sent\" cannot be checked without a marker \
                         (give the row one in `probe`)"
                    )),
                    (Some(m), Some(body)) if body.to_string().contains(m.as_str()) => problems
                        .push(format!(
                            "{feature:?}, {name}: the table says not sent, but the body \
                             carries it ({m:?}): {body}"
                        )),
                    _ => {}
                },
            }
        }
    }
    for feature in [
        "system prompt",
        "text",
        "images",
        "documents (PDF)",
        "tool definitions",
        "tool results",
        "images in tool results",
        "structured output (`output_schema`)",
        "reasoning control (`reasoning`)",
        "prompt caching (`prompt_caching`)",
    ] {
        if !rows.iter().any(|(f, _)| f == feature) {
            problems.push(format!("the table has no row {feature:?}"));
        }
    }
    problems
}

#[test]
fn the_table_of_what_each_provider_is_sent_matches_the_request_bodies() {
    let problems = table_problems(&read("docs/providers.md"));
    assert!(
        problems.is_empty(),
        "docs/providers.md disagrees with the request bodies:\n{}",
        problems.join("\n")
    );
}

/// The check can fail: each wrong edit of a row is caught, naming the row.
#[test]
fn a_wrong_row_of_the_table_is_caught() {
    let page = read("docs/providers.md");
    let edits = [
        // Gemini images said not sent.
        (
            "| `contents[].parts[].inlineData` (bytes), or `fileData` (a URL) | `input[].content[].image_url`",
            "| not sent | `input[].content[].image_url`",
            "\"images\", gemini",
        ),
        // Responses' structured output under a key it does not use.
        (
            "| `text.format.schema`,",
            "| `text.schema`,",
            "\"structured output (`output_schema`)\", openai-responses",
        ),
        // Gemini tool-result images said sent.
        (
            "| not sent (the result's text is) |",
            "| `contents[].parts[].inlineData` |",
            "\"images in tool results\", gemini",
        ),
        // A field that is there, but for another feature (the user's image, not the
        // tool's).
        (
            "| `input[].output[].image_url`:",
            "| `input[].content[].image_url`:",
            "\"images in tool results\", openai-responses",
        ),
    ];
    for (from, to, named) in edits {
        assert!(page.contains(from), "the page no longer has {from:?}");
        let problems = table_problems(&page.replacen(from, to, 1));
        assert!(
            problems.iter().any(|p| p.starts_with(named)),
            "editing {from:?} into {to:?} was not caught as {named}: {problems:?}"
        );
    }
}

// ---------------------------------------------------------------- "not sent yet"

/// Sentences of `page` saying something is not sent yet, with the code spans each names.
fn not_sent_yet_claims(page: &str) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    for paragraph in page.split("\n\n") {
        let flat = paragraph.split_whitespace().collect::<Vec<_>>().join(" ");
        for sentence in flat.split(". ") {
            let lower = sentence.to_lowercase();
            if lower.contains("not sent yet") || lower.contains("not yet sent") {
                let spans = code_spans(sentence)
                    .into_iter()
                    .filter(|s| is_path(s))
                    .map(str::to_owned)
                    .collect();
                out.push((sentence.to_owned(), spans));
            }
        }
    }
    out
}

fn not_sent_yet_problems(name: &str, page: &str) -> Vec<String> {
    let bodies: Vec<(ProviderKind, Value)> = ProviderKind::ALL
        .iter()
        .flat_map(|k| {
            [Request::Full, Request::OutputTool]
                .into_iter()
                .filter_map(move |r| body(*k, r).map(|b| (*k, b)))
        })
        .collect();
    let mut problems = Vec::new();
    for (sentence, spans) in not_sent_yet_claims(page) {
        if spans.is_empty() {
            problems.push(format!(
                "{name}: says \"not sent yet\" without naming the field in backticks, so it \
                 cannot be checked: {sentence:?}"
            ));
        }
        for span in spans {
            for (kind, body) in &bodies {
                if found_anywhere(body, &span) {
                    problems.push(format!(
                        "{name}: says `{span}` is not sent yet, but {}'s request carries it: \
                         {sentence:?}",
                        kind.as_str()
                    ));
                }
            }
        }
    }
    problems
}

fn pages() -> Vec<(String, String)> {
    let mut pages = vec![("README.md".to_owned(), read("README.md"))];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("docs/")
        .map(|e| e.expect("docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    for path in docs {
        let text = std::fs::read_to_string(&path).expect("a docs page");
        let name = path
            .strip_prefix(root())
            .unwrap_or(&path)
            .display()
            .to_string();
        pages.push((name, text));
    }
    pages
}

#[test]
fn no_page_says_not_sent_yet_of_a_field_a_request_carries() {
    let problems: Vec<String> = pages()
        .iter()
        .flat_map(|(name, page)| not_sent_yet_problems(name, page))
        .collect();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The check can fail: the two sentences docs/providers.md used to have are caught.
#[test]
fn the_old_not_sent_yet_sentences_are_caught() {
    let old = "Images and documents (`inlineData`) and structured output\n\
               (`responseJsonSchema`) are not sent yet. Structured output (`text.format`)\n\
               waits for rich turns and is not sent yet.";
    let problems = not_sent_yet_problems("old", old);
    for (span, provider) in [
        ("inlineData", "gemini"),
        ("responseJsonSchema", "gemini"),
        ("text.format", "openai-responses"),
    ] {
        assert!(
            problems
                .iter()
                .any(|p| p.contains(&format!("`{span}`")) && p.contains(provider)),
            "{span} not caught: {problems:?}"
        );
    }
    // A field no request carries may be said to be not sent yet.
    assert!(not_sent_yet_problems("new", "The `frobnicate` field is not sent yet.").is_empty());
}

// ---------------------------------------------------------------- README's count

const NUMBER_WORDS: [&str; 11] = [
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
];

/// README's count of scenarios and providers in "plays N scripted turns (all WORD
/// providers", or why it cannot be read.
fn readme_counts(readme: &str) -> Result<(usize, String), String> {
    let flat = readme.split_whitespace().collect::<Vec<_>>().join(" ");
    let at = flat
        .find(" scripted turns (all ")
        .ok_or("README.md no longer says \"plays N scripted turns (all N providers\"")?;
    let count = flat[..at]
        .rsplit(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .ok_or("no number before \"scripted turns\"")?;
    let rest = &flat[at + " scripted turns (all ".len()..];
    let word = rest
        .split(' ')
        .next()
        .filter(|_| {
            rest.split(' ')
                .nth(1)
                .is_some_and(|w| w.starts_with("providers"))
        })
        .ok_or("no \"all N providers\" after \"scripted turns\"")?;
    Ok((count, word.to_owned()))
}

#[test]
fn readme_counts_the_conformance_scenarios_and_their_providers() {
    let dir = root().join("tests/conformance/scenarios");
    let scenarios = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter(|e| e.as_ref().expect("a scenario entry").path().is_dir())
        .count();
    let (count, providers) = readme_counts(&read("README.md")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        count, scenarios,
        "README.md says scripts/conformance.sh plays {count} scripted turns; \
         tests/conformance/scenarios/ has {scenarios}: update README.md"
    );
    assert_eq!(
        providers,
        NUMBER_WORDS[ProviderKind::ALL.len()],
        "README.md's conformance paragraph counts the providers wrong"
    );
    // The check can fail.
    assert!(
        readme_counts("plays 58 scripted turns (all two providers: text")
            .is_ok_and(|(n, w)| n == 58 && w == "two" && n != scenarios)
    );
}
