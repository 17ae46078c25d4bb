//! Scenario files: the JSON format, its validation, and the pre-encoded form the server plays.
//!
//! This module owns everything that happens *before* a request arrives: parsing a scenario
//! (`ScenarioSpec`, private, mirrors the JSON), checking it with messages that name the exact
//! place of a mistake (`exchanges[1].response.sse[3]: ...`), and compiling it into a
//! [`Scenario`] whose response bodies are already encoded to bytes. Compiling once means a
//! request only copies slices out of one shared buffer: a 100,000-chunk `repeat` stream is
//! stored as one encoded item plus a count, never as 100,000 allocations.
//!
//! It also owns request matching ([`Exchange::check`]) and [`Scenario::replay_capture`].

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

/// A compiled, validated scenario: the ordered list of scripted exchanges.
///
/// Cheap to clone (the exchanges are shared). Deserializing one with serde validates and
/// compiles it; a relative `body_file` is then resolved against the current directory
/// (use [`Scenario::from_file`] to resolve against the file's own directory).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(try_from = "ScenarioSpec")]
pub struct Scenario {
    pub(crate) exchanges: Arc<[Exchange]>,
}

impl Scenario {
    /// A scenario with no exchanges: every request is answered 404 `testserver_mismatch`.
    pub fn empty() -> Scenario {
        Scenario::default()
    }

    /// Parses and compiles a scenario from JSON text. `body_file` paths resolve against the
    /// current directory.
    pub fn from_json(json: &str) -> Result<Scenario, String> {
        let spec: ScenarioSpec =
            serde_json::from_str(json).map_err(|e| format!("invalid scenario JSON: {e}"))?;
        compile(spec, None)
    }

    /// Like [`Scenario::from_json`], from an already parsed JSON value (handy with `json!`).
    /// Note that `serde_json::Value` objects have sorted keys, so `data` objects are sent
    /// with sorted keys; use [`Scenario::from_json`] when key order matters.
    pub fn from_value(value: &Value) -> Result<Scenario, String> {
        // Through text so that `sse`/`json` bodies keep the RawValue path (key order as written).
        Scenario::from_json(&value.to_string())
    }

    /// Reads, parses and compiles a scenario file. Relative `body_file` paths resolve against
    /// the directory that holds the scenario file.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Scenario, String> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read scenario file {}: {e}", path.display()))?;
        let spec: ScenarioSpec = serde_json::from_str(&text)
            .map_err(|e| format!("{}: invalid scenario JSON: {e}", path.display()))?;
        let base = path.parent().map(Path::to_path_buf);
        compile(spec, base.as_deref()).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// A scenario that answers *every* request with a captured provider response.
    ///
    /// `capture` is a `<name>.sse` or `<name>.error.json` file; its sibling `<name>.meta.json`
    /// gives `status` and `content_type` (defaults: 200 and a type guessed from the extension
    /// when the meta file lacks them; a missing meta file is an error). The body is sent byte
    /// for byte, as one chunk, or re-split into `chunk_size`-byte chunks.
    pub fn replay_capture(
        capture: impl AsRef<Path>,
        chunk_size: Option<usize>,
    ) -> Result<Scenario, String> {
        let capture = capture.as_ref();
        if chunk_size == Some(0) {
            return Err("chunk_size must be at least 1".to_string());
        }
        let body = std::fs::read(capture)
            .map_err(|e| format!("cannot read capture {}: {e}", capture.display()))?;
        let meta_path = capture_meta_path(capture)?;
        let meta_text = std::fs::read_to_string(&meta_path)
            .map_err(|e| format!("cannot read capture meta {}: {e}", meta_path.display()))?;
        let meta: CaptureMeta = serde_json::from_str(&meta_text)
            .map_err(|e| format!("{}: invalid meta JSON: {e}", meta_path.display()))?;
        let content_type = meta
            .content_type
            .or_else(|| content_type_for_path(capture).map(str::to_string));
        let mut headers = Vec::new();
        if let Some(ct) = content_type {
            check_header_value("content_type", &ct)?;
            headers.push(("content-type".to_string(), ct));
        }
        let response = Response {
            status: meta.status.unwrap_or(200),
            headers,
            delay: Duration::ZERO,
            body: Body::single(body),
            framing: Framing::Chunked,
            chunk_size,
            chunk_delay: Duration::ZERO,
            flush_first_chunk: false,
            fault: None,
        };
        Ok(Scenario {
            exchanges: Arc::from(vec![Exchange {
                matcher: Matcher::default(),
                // "Any number of requests": the counter never realistically reaches this.
                times: u64::MAX,
                response: Arc::new(response),
            }]),
        })
    }

    /// Number of exchanges in the scenario.
    pub fn len(&self) -> usize {
        self.exchanges.len()
    }

    /// True when the scenario has no exchanges.
    pub fn is_empty(&self) -> bool {
        self.exchanges.is_empty()
    }
}

/// `foo.sse` / `foo.error.json` / `foo.anything` -> `foo.meta.json` in the same directory.
fn capture_meta_path(capture: &Path) -> Result<PathBuf, String> {
    let name = capture
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| format!("capture path has no file name: {}", capture.display()))?;
    let stem = if let Some(s) = name.strip_suffix(".error.json") {
        s
    } else if let Some(s) = name.strip_suffix(".sse") {
        s
    } else {
        name.rsplit_once('.').map_or(name, |(s, _)| s)
    };
    Ok(capture.with_file_name(format!("{stem}.meta.json")))
}

#[derive(Deserialize)]
struct CaptureMeta {
    status: Option<u16>,
    content_type: Option<String>,
}

fn content_type_for_path(path: &Path) -> Option<&'static str> {
    match path.extension().and_then(|e| e.to_str()) {
        Some("sse") => Some("text/event-stream"),
        Some("json") => Some("application/json"),
        Some("txt") => Some("text/plain; charset=utf-8"),
        _ => None,
    }
}

impl TryFrom<ScenarioSpec> for Scenario {
    type Error = String;

    fn try_from(spec: ScenarioSpec) -> Result<Scenario, String> {
        compile(spec, None)
    }
}

// ---------------------------------------------------------------------------------------
// The JSON format. Unknown fields are errors so that a typo (`"chunk_delay"`) fails loudly
// instead of silently producing a different stream. `description` is accepted (and ignored)
// at the scenario and exchange level so files can document themselves.

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ScenarioSpec {
    #[serde(default, rename = "description")]
    _description: Option<IgnoredAny>,
    #[serde(default)]
    exchanges: Vec<ExchangeSpec>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ExchangeSpec {
    #[serde(default, rename = "description")]
    _description: Option<IgnoredAny>,
    #[serde(default, rename = "match")]
    matcher: MatchSpec,
    times: Option<u64>,
    #[serde(default)]
    response: ResponseSpec,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct MatchSpec {
    method: Option<String>,
    path: Option<String>,
    #[serde(default)]
    body: BTreeMap<String, Value>,
    #[serde(default)]
    body_contains: Vec<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ResponseSpec {
    status: Option<u16>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    delay_ms: u64,
    sse: Option<Vec<Box<RawValue>>>,
    chunks: Option<Vec<String>>,
    json: Option<Box<RawValue>>,
    body: Option<String>,
    body_file: Option<String>,
    chunk_size: Option<usize>,
    #[serde(default)]
    chunk_delay_ms: u64,
    /// Benchmarks: the head and the first body chunk are written at once, as a provider
    /// sends its first token, instead of being gathered with the chunks behind them.
    #[serde(default)]
    flush_first_chunk: bool,
    repeat: Option<RepeatSpec>,
    fault: Option<FaultSpec>,
    framing: Option<Framing>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RepeatSpec {
    count: usize,
    chunk: Box<RawValue>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FaultSpec {
    kind: FaultKind,
    #[serde(default)]
    after_bytes: u64,
    every_ms: Option<u64>,
    bytes: Option<usize>,
    /// `flood` only: the SSE item sent over and over while the gate is closed.
    chunk: Option<Box<RawValue>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum FaultKind {
    Reset,
    Stall,
    Close,
    Trickle,
    Hold,
    Flood,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SseEventSpec {
    comment: Option<String>,
    event: Option<String>,
    id: Option<Value>,
    retry: Option<u64>,
    data: Option<Box<RawValue>>,
}

/// How a response body is delimited on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Framing {
    /// `Transfer-Encoding: chunked`, one HTTP chunk per body chunk (the default).
    Chunked,
    /// No length; the server closes the connection after the body.
    Close,
    /// `Content-Length` of the whole body.
    Length,
}

// ---------------------------------------------------------------------------------------
// The compiled form.

#[derive(Debug)]
pub(crate) struct Exchange {
    pub(crate) matcher: Matcher,
    /// How many consecutive requests this exchange answers (>= 1).
    pub(crate) times: u64,
    pub(crate) response: Arc<Response>,
}

#[derive(Debug, Default)]
pub(crate) struct Matcher {
    method: Option<String>,
    path: Option<String>,
    body: Vec<(String, Value)>,
    body_contains: Vec<String>,
    /// Lowercased names.
    headers: Vec<(String, String)>,
}

/// What the matcher looks at in a request (borrowed from the parsed request).
pub(crate) struct RequestView<'a> {
    pub(crate) method: &'a str,
    pub(crate) path: &'a str,
    /// Lowercased names; repeated headers already joined with ", ".
    pub(crate) headers: &'a BTreeMap<String, String>,
    pub(crate) raw_body: &'a [u8],
    /// `None` when the body is not JSON.
    pub(crate) json_body: Option<&'a Value>,
}

#[derive(Debug)]
pub(crate) struct Response {
    pub(crate) status: u16,
    /// In the order they are sent; lowercased names.
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) delay: Duration,
    pub(crate) body: Body,
    pub(crate) framing: Framing,
    pub(crate) chunk_size: Option<usize>,
    pub(crate) chunk_delay: Duration,
    pub(crate) flush_first_chunk: bool,
    pub(crate) fault: Option<Fault>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    /// RST (SO_LINGER 0) after `after` body bytes.
    Reset { after: u64 },
    /// Send nothing more after `after` body bytes; keep the socket open.
    Stall { after: u64 },
    /// Graceful FIN after `after` body bytes, without finishing the body framing.
    Close { after: u64 },
    /// After `after` body bytes, send the rest `bytes` at a time, `every` apart.
    Trickle {
        after: u64,
        every: Duration,
        bytes: usize,
    },
    /// After `after` body bytes, wait until the server's gate is open, then send the rest.
    Hold { after: u64 },
    /// After `after` body bytes, send `chunk` (one encoded SSE item) again and again, each
    /// copy its own HTTP chunk, until the gate is open; then send the rest.
    Flood { after: u64, chunk: Vec<u8> },
}

/// A response body: one byte buffer and the list of chunks cut from it. A run is a chunk
/// repeated `count` times, which is how `repeat` stays one copy in memory.
pub(crate) struct Body {
    data: Vec<u8>,
    runs: Vec<Run>,
}

#[derive(Clone, Copy, Debug)]
struct Run {
    start: usize,
    end: usize,
    count: usize,
}

impl fmt::Debug for Body {
    // The data can be megabytes; a summary is what a test failure needs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Body")
            .field("len", &self.len())
            .field("runs", &self.runs.len())
            .finish()
    }
}

impl Body {
    fn new() -> Body {
        Body {
            data: Vec::new(),
            runs: Vec::new(),
        }
    }

    fn single(data: Vec<u8>) -> Body {
        let runs = vec![Run {
            start: 0,
            end: data.len(),
            count: 1,
        }];
        Body { data, runs }
    }

    /// Appends `bytes` as one chunk sent `count` times.
    fn push(&mut self, bytes: &[u8], count: usize) {
        let start = self.data.len();
        self.data.extend_from_slice(bytes);
        self.runs.push(Run {
            start,
            end: self.data.len(),
            count,
        });
    }

    /// Total body length in bytes (what `Content-Length` announces).
    pub(crate) fn len(&self) -> u64 {
        self.runs.iter().fold(0u64, |acc, r| {
            acc.saturating_add(((r.end - r.start) as u64).saturating_mul(r.count as u64))
        })
    }

    /// The chunks in sending order, runs expanded lazily (no allocation).
    pub(crate) fn chunks(&self) -> impl Iterator<Item = &[u8]> + '_ {
        self.runs
            .iter()
            .flat_map(move |r| std::iter::repeat_n(&self.data[r.start..r.end], r.count))
    }

    /// The whole body as one buffer (tests and debugging; allocates).
    #[cfg(test)]
    pub(crate) fn to_vec(&self) -> Vec<u8> {
        self.chunks().flatten().copied().collect()
    }
}

impl Exchange {
    /// `Ok(())` when the request satisfies every predicate, else a short reason naming the
    /// first predicate that failed and what the request had instead.
    pub(crate) fn check(&self, req: &RequestView<'_>) -> Result<(), String> {
        let m = &self.matcher;
        if let Some(method) = &m.method {
            if !method.eq_ignore_ascii_case(req.method) {
                return Err(format!("expected method {method}, got {}", req.method));
            }
        }
        if let Some(path) = &m.path {
            if path != req.path {
                return Err(format!("expected path {path:?}, got {:?}", req.path));
            }
        }
        for (name, want) in &m.headers {
            match req.headers.get(name) {
                Some(got) if got == want => {}
                Some(got) => return Err(format!("expected header {name}: {want:?}, got {got:?}")),
                None => return Err(format!("expected header {name}: {want:?}, it is missing")),
            }
        }
        if !m.body.is_empty() {
            let Some(json) = req.json_body else {
                return Err("expected a JSON body, got a body that is not JSON".to_string());
            };
            for (pointer, want) in &m.body {
                match json.pointer(pointer) {
                    Some(got) if got == want => {}
                    Some(got) => {
                        return Err(format!("expected body {pointer} == {want}, got {got}"))
                    }
                    None => {
                        return Err(format!(
                            "expected body {pointer} == {want}, the body has no {pointer}"
                        ))
                    }
                }
            }
        }
        if !m.body_contains.is_empty() {
            // Lossy only allocates when the body is not UTF-8; `str::contains` is a fast
            // substring search, which matters for benchmark-sized bodies.
            let text = String::from_utf8_lossy(req.raw_body);
            for needle in &m.body_contains {
                if !text.contains(needle.as_str()) {
                    return Err(format!("expected the body to contain {needle:?}"));
                }
            }
        }
        Ok(())
    }

    /// Human summary of the predicates, for mismatch messages.
    pub(crate) fn describe(&self) -> String {
        let m = &self.matcher;
        let mut parts = vec![format!(
            "{} {}",
            m.method.as_deref().unwrap_or("<any method>"),
            m.path.as_deref().unwrap_or("<any path>")
        )];
        for (name, value) in &m.headers {
            parts.push(format!("header {name}: {value:?}"));
        }
        for (pointer, value) in &m.body {
            parts.push(format!("body {pointer} == {value}"));
        }
        for needle in &m.body_contains {
            parts.push(format!("body contains {needle:?}"));
        }
        parts.join(", ")
    }
}

// ---------------------------------------------------------------------------------------
// Compilation.

fn compile(spec: ScenarioSpec, base_dir: Option<&Path>) -> Result<Scenario, String> {
    let mut exchanges = Vec::with_capacity(spec.exchanges.len());
    for (i, ex) in spec.exchanges.into_iter().enumerate() {
        let ctx = format!("exchanges[{i}]");
        let times = ex.times.unwrap_or(1);
        if times == 0 {
            return Err(format!("{ctx}.times: must be at least 1"));
        }
        let matcher = compile_matcher(ex.matcher, &ctx)?;
        let response = compile_response(ex.response, base_dir, &format!("{ctx}.response"))?;
        exchanges.push(Exchange {
            matcher,
            times,
            response: Arc::new(response),
        });
    }
    Ok(Scenario {
        exchanges: Arc::from(exchanges),
    })
}

fn compile_matcher(spec: MatchSpec, ctx: &str) -> Result<Matcher, String> {
    for pointer in spec.body.keys() {
        // RFC 6901: "" is the whole document, anything else starts with '/'.
        if !pointer.is_empty() && !pointer.starts_with('/') {
            return Err(format!(
                "{ctx}.match.body: {pointer:?} is not a JSON Pointer (it must start with '/')"
            ));
        }
    }
    if let Some(path) = &spec.path {
        if !path.starts_with('/') && path != "*" {
            return Err(format!("{ctx}.match.path: {path:?} must start with '/'"));
        }
    }
    Ok(Matcher {
        method: spec.method,
        path: spec.path,
        body: spec.body.into_iter().collect(),
        body_contains: spec.body_contains,
        headers: spec
            .headers
            .into_iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), v))
            .collect(),
    })
}

fn check_header_value(ctx: &str, value: &str) -> Result<(), String> {
    // CR/LF would let a scenario split the response head; that is not a fault we model.
    if value.contains(['\r', '\n']) {
        return Err(format!("{ctx}: header values must not contain CR or LF"));
    }
    Ok(())
}

fn compile_response(
    spec: ResponseSpec,
    base_dir: Option<&Path>,
    ctx: &str,
) -> Result<Response, String> {
    let status = spec.status.unwrap_or(200);
    if !(100..=999).contains(&status) {
        return Err(format!(
            "{ctx}.status: {status} is not a 3-digit status code"
        ));
    }
    let forms = [
        ("sse", spec.sse.is_some()),
        ("chunks", spec.chunks.is_some()),
        ("json", spec.json.is_some()),
        ("body", spec.body.is_some()),
        ("body_file", spec.body_file.is_some()),
    ];
    let given: Vec<&str> = forms.iter().filter(|f| f.1).map(|f| f.0).collect();
    if given.len() > 1 {
        return Err(format!(
            "{ctx}: give at most one body form, got {}",
            given.join(" and ")
        ));
    }
    if spec.chunk_size == Some(0) {
        return Err(format!("{ctx}.chunk_size: must be at least 1"));
    }
    if spec.repeat.is_some() && spec.sse.is_none() && spec.chunks.is_none() {
        return Err(format!(
            "{ctx}.repeat: only works with \"sse\" or \"chunks\""
        ));
    }

    let mut body = Body::new();
    let mut default_ct: Option<&str> = None;
    if let Some(items) = spec.sse {
        default_ct = Some("text/event-stream");
        if let Some(rep) = &spec.repeat {
            let mut enc = Vec::new();
            encode_sse_item(&rep.chunk, &mut enc, &format!("{ctx}.repeat.chunk"))?;
            body.push(&enc, rep.count);
        }
        let mut enc = Vec::new();
        for (i, item) in items.iter().enumerate() {
            enc.clear();
            encode_sse_item(item, &mut enc, &format!("{ctx}.sse[{i}]"))?;
            body.push(&enc, 1);
        }
    } else if let Some(chunks) = spec.chunks {
        // Raw chunks are almost always hand-made (often malformed) SSE.
        default_ct = Some("text/event-stream");
        if let Some(rep) = &spec.repeat {
            let chunk: String = serde_json::from_str(rep.chunk.get()).map_err(|_| {
                format!("{ctx}.repeat.chunk: with \"chunks\" the repeated chunk must be a string")
            })?;
            body.push(chunk.as_bytes(), rep.count);
        }
        for chunk in &chunks {
            body.push(chunk.as_bytes(), 1);
        }
    } else if let Some(json) = spec.json {
        default_ct = Some("application/json");
        body.push(compact_json(json.get()).as_bytes(), 1);
    } else if let Some(text) = spec.body {
        default_ct = Some("text/plain; charset=utf-8");
        body.push(text.as_bytes(), 1);
    } else if let Some(file) = spec.body_file {
        let path = match base_dir {
            Some(dir) if Path::new(&file).is_relative() => dir.join(&file),
            _ => PathBuf::from(&file),
        };
        let data = std::fs::read(&path)
            .map_err(|e| format!("{ctx}.body_file: cannot read {}: {e}", path.display()))?;
        default_ct = content_type_for_path(&path);
        body = Body::single(data);
    }

    let mut headers: Vec<(String, String)> = Vec::new();
    for (name, value) in spec.headers {
        if name.is_empty() || !name.bytes().all(is_token_byte) {
            return Err(format!(
                "{ctx}.headers: {name:?} is not a valid header name"
            ));
        }
        check_header_value(&format!("{ctx}.headers.{name}"), &value)?;
        headers.push((name.to_ascii_lowercase(), value));
    }
    if let Some(ct) = default_ct {
        if !headers.iter().any(|(n, _)| n == "content-type") {
            headers.insert(0, ("content-type".to_string(), ct.to_string()));
        }
    }

    let fault = match spec.fault {
        None => None,
        Some(f) => {
            if f.kind != FaultKind::Trickle && (f.every_ms.is_some() || f.bytes.is_some()) {
                return Err(format!(
                    "{ctx}.fault: every_ms and bytes only apply to kind \"trickle\""
                ));
            }
            if f.kind != FaultKind::Flood && f.chunk.is_some() {
                return Err(format!("{ctx}.fault.chunk: only applies to kind \"flood\""));
            }
            Some(match f.kind {
                FaultKind::Reset => Fault::Reset {
                    after: f.after_bytes,
                },
                FaultKind::Stall => Fault::Stall {
                    after: f.after_bytes,
                },
                FaultKind::Close => Fault::Close {
                    after: f.after_bytes,
                },
                FaultKind::Trickle => {
                    let bytes = f.bytes.unwrap_or(1);
                    if bytes == 0 {
                        return Err(format!("{ctx}.fault.bytes: must be at least 1"));
                    }
                    Fault::Trickle {
                        after: f.after_bytes,
                        every: Duration::from_millis(f.every_ms.unwrap_or(50)),
                        bytes,
                    }
                }
                FaultKind::Hold => Fault::Hold {
                    after: f.after_bytes,
                },
                FaultKind::Flood => {
                    let Some(item) = &f.chunk else {
                        return Err(format!(
                            "{ctx}.fault.chunk: required for kind \"flood\" (one sse item, \
                             e.g. {{\"comment\":\"keep-alive\"}})"
                        ));
                    };
                    let mut chunk = Vec::new();
                    encode_sse_item(item, &mut chunk, &format!("{ctx}.fault.chunk"))?;
                    if chunk.is_empty() {
                        // An empty HTTP chunk would end a chunked body.
                        return Err(format!("{ctx}.fault.chunk: must not be empty"));
                    }
                    if spec.framing == Some(Framing::Length) {
                        return Err(format!(
                            "{ctx}.fault: kind \"flood\" sends bytes beyond the body, which \
                             \"length\" framing cannot carry; use \"chunked\" or \"close\""
                        ));
                    }
                    Fault::Flood {
                        after: f.after_bytes,
                        chunk,
                    }
                }
            })
        }
    };

    Ok(Response {
        status,
        headers,
        delay: Duration::from_millis(spec.delay_ms),
        body,
        framing: spec.framing.unwrap_or(Framing::Chunked),
        chunk_size: spec.chunk_size,
        chunk_delay: Duration::from_millis(spec.chunk_delay_ms),
        flush_first_chunk: spec.flush_first_chunk,
        fault,
    })
}

/// RFC 9110 `tchar`.
pub(crate) fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Encodes one `sse` item. A JSON string item is a raw chunk sent as is (for malformed
/// streams); an object is one SSE event: `: comment`, `event:`, `id:`, `retry:`, `data:` lines
/// in that order, then the blank line that ends the event.
pub(crate) fn encode_sse_item(item: &RawValue, out: &mut Vec<u8>, ctx: &str) -> Result<(), String> {
    let text = item.get().trim_start();
    if text.starts_with('"') {
        let raw: String = serde_json::from_str(text).map_err(|e| format!("{ctx}: {e}"))?;
        out.extend_from_slice(raw.as_bytes());
        return Ok(());
    }
    if !text.starts_with('{') {
        return Err(format!(
            "{ctx}: an sse item is an event object or a raw string, got {text}"
        ));
    }
    let ev: SseEventSpec = serde_json::from_str(text).map_err(|e| format!("{ctx}: {e}"))?;
    if let Some(comment) = &ev.comment {
        for line in comment.split('\n') {
            out.extend_from_slice(b": ");
            out.extend_from_slice(line.as_bytes());
            out.push(b'\n');
        }
    }
    if let Some(event) = &ev.event {
        if event.contains(['\r', '\n']) {
            return Err(format!("{ctx}.event: must be one line"));
        }
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(event.as_bytes());
        out.push(b'\n');
    }
    if let Some(id) = &ev.id {
        let id = match id {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            other => return Err(format!("{ctx}.id: must be a string or number, got {other}")),
        };
        if id.contains(['\r', '\n']) {
            return Err(format!("{ctx}.id: must be one line"));
        }
        out.extend_from_slice(b"id: ");
        out.extend_from_slice(id.as_bytes());
        out.push(b'\n');
    }
    if let Some(retry) = ev.retry {
        out.extend_from_slice(format!("retry: {retry}\n").as_bytes());
    }
    if let Some(data) = &ev.data {
        let raw = data.get().trim_start();
        let payload = if raw.starts_with('"') {
            serde_json::from_str::<String>(raw).map_err(|e| format!("{ctx}.data: {e}"))?
        } else {
            compact_json(raw)
        };
        // One `data:` line per line of the payload, as the SSE spec reassembles them.
        for line in payload.split('\n') {
            out.extend_from_slice(b"data: ");
            out.extend_from_slice(line.as_bytes());
            out.push(b'\n');
        }
    }
    out.push(b'\n');
    Ok(())
}

/// Drops the insignificant whitespace of valid JSON text, keeping key order and number
/// spelling exactly as written (which a round trip through `Value` would not).
fn compact_json(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut in_string = false;
    let mut escaped = false;
    for c in raw.chars() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if c == '"' {
            in_string = true;
            out.push(c);
        } else if !matches!(c, ' ' | '\t' | '\n' | '\r') {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body_of(json: &str) -> Vec<u8> {
        let s = Scenario::from_json(json).unwrap();
        s.exchanges[0].response.body.to_vec()
    }

    #[test]
    fn sse_encoding_keeps_key_order_and_splits_lines() {
        let b = body_of(
            r#"{"exchanges":[{"response":{"sse":[
                {"event":"message_start","data":{ "z": 1, "a": [1, 2.50], "s": "x y" }},
                {"data":"line1\nline2","id":7},
                {"comment":"keep-alive"},
                "raw: text\n\n",
                {"data":"[DONE]"}
            ]}}]}"#,
        );
        assert_eq!(
            String::from_utf8(b).unwrap(),
            "event: message_start\ndata: {\"z\":1,\"a\":[1,2.50],\"s\":\"x y\"}\n\n\
             id: 7\ndata: line1\ndata: line2\n\n\
             : keep-alive\n\n\
             raw: text\n\n\
             data: [DONE]\n\n"
        );
    }

    #[test]
    fn repeat_is_one_copy_many_times() {
        let s = Scenario::from_json(
            r#"{"exchanges":[{"response":{"repeat":{"count":100000,"chunk":{"data":{"a":1}}},
                "sse":[{"data":"[DONE]"}]}}]}"#,
        )
        .unwrap();
        let body = &s.exchanges[0].response.body;
        assert_eq!(
            body.data.len(),
            "data: {\"a\":1}\n\n".len() + "data: [DONE]\n\n".len()
        );
        assert_eq!(body.chunks().count(), 100_001);
        assert_eq!(body.len(), 100_000 * 15 + 14);
    }

    #[test]
    fn errors_name_the_place() {
        let e = Scenario::from_json(r#"{"exchanges":[{},{"response":{"sse":[{"dat":1}]}}]}"#)
            .unwrap_err();
        assert!(e.contains("exchanges[1].response.sse[0]"), "{e}");
        assert!(e.contains("dat"), "{e}");
        let e = Scenario::from_json(r#"{"exchanges":[{"response":{"json":{},"body":"x"}}]}"#)
            .unwrap_err();
        assert!(e.contains("json and body"), "{e}");
        let e = Scenario::from_json(r#"{"exchanges":[{"times":0}]}"#).unwrap_err();
        assert!(e.contains("times"), "{e}");
        let e = Scenario::from_json(r#"{"exchanges":[{"respnse":{}}]}"#).unwrap_err();
        assert!(e.contains("respnse"), "{e}");
    }

    #[test]
    fn hold_and_flood_faults() {
        let err = |response: &str| {
            Scenario::from_json(&format!(
                r#"{{"exchanges":[{{}},{{"response":{response}}}]}}"#
            ))
            .unwrap_err()
        };
        let e = err(r#"{"fault":{"kind":"flood"}}"#);
        assert!(
            e.contains("exchanges[1].response.fault.chunk: required"),
            "{e}"
        );
        let e = err(r#"{"fault":{"kind":"hold","chunk":": x\n\n"}}"#);
        assert!(
            e.contains("exchanges[1].response.fault.chunk: only applies"),
            "{e}"
        );
        let e = err(r#"{"fault":{"kind":"flood","chunk":{"dat":1}}}"#);
        assert!(e.contains("exchanges[1].response.fault.chunk"), "{e}");
        assert!(e.contains("dat"), "{e}");
        let e = err(r#"{"fault":{"kind":"flood","chunk":""}}"#);
        assert!(e.contains("fault.chunk: must not be empty"), "{e}");
        let e = err(r#"{"fault":{"kind":"flood","chunk":[1]}}"#);
        assert!(e.contains("fault.chunk: an sse item"), "{e}");
        let e = err(r#"{"framing":"length","fault":{"kind":"flood","chunk":"x"}}"#);
        assert!(e.contains("exchanges[1].response.fault"), "{e}");
        assert!(e.contains("length"), "{e}");
        let e = err(r#"{"fault":{"kind":"hold","every_ms":1}}"#);
        assert!(e.contains("only apply to kind"), "{e}");

        let s = Scenario::from_json(
            r#"{"exchanges":[{"response":{"fault":{"kind":"hold","after_bytes":5}}},
               {"response":{"fault":{"kind":"flood","chunk":{"event":"ping","data":{"type":"ping"}}}}}]}"#,
        )
        .unwrap();
        assert_eq!(
            s.exchanges[0].response.fault,
            Some(Fault::Hold { after: 5 })
        );
        assert_eq!(
            s.exchanges[1].response.fault,
            Some(Fault::Flood {
                after: 0,
                chunk: b"event: ping\ndata: {\"type\":\"ping\"}\n\n".to_vec()
            })
        );
    }

    #[test]
    fn serde_deserialize_compiles_too() {
        let s: Scenario =
            serde_json::from_str(r#"{"exchanges":[{"times":2,"response":{"body":"x"}}]}"#).unwrap();
        assert_eq!(s.len(), 1);
        assert_eq!(s.exchanges[0].times, 2);
        assert!(serde_json::from_str::<Scenario>(r#"{"exchanges":[{"times":0}]}"#).is_err());
    }

    #[test]
    fn meta_path_of_captures() {
        let p = capture_meta_path(Path::new("/x/a/name.error.json")).unwrap();
        assert_eq!(p, Path::new("/x/a/name.meta.json"));
        let p = capture_meta_path(Path::new("b.sse")).unwrap();
        assert_eq!(p, Path::new("b.meta.json"));
    }

    #[test]
    fn content_type_defaults_and_overrides() {
        let s = Scenario::from_json(
            r#"{"exchanges":[{"response":{"json":{"a":1}}},
               {"response":{"sse":[],"headers":{"Content-Type":"text/plain"}}}]}"#,
        )
        .unwrap();
        assert_eq!(
            s.exchanges[0].response.headers,
            vec![("content-type".to_string(), "application/json".to_string())]
        );
        assert_eq!(
            s.exchanges[1].response.headers,
            vec![("content-type".to_string(), "text/plain".to_string())]
        );
    }
}
