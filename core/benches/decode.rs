//! Decode throughput of a 100,000-chunk OpenAI text stream, in µs per chunk.
//!
//! Variants (each one turn = one 100k-chunk response; criterion reports elements/s with
//! `Throughput::Elements(100_000)`):
//!
//! - `mem/panto`: `SseParser` + `provider::Decoder` fed the body from memory in 16 KiB
//!   pieces, events into a counting emit closure.
//! - `mem/peer-lines`, `mem/peer-lines+json`, `mem/peer-eventsource+typed`: the peers below,
//!   fed the same pieces from memory (no HTTP), for a transport-free comparison.
//! - `http/panto`: the full `Agent::run` path against an in-process `panto-testserver`, with
//!   a `Receiver` counting events.
//! - `http/panto-parser-loop` (diagnostic): panto's `SseParser` + `Decoder` driven by a bare
//!   `reqwest` read loop (no timers, no cancellation, no agent) — the difference to
//!   `http/panto` is what the transport's per-chunk bookkeeping costs.
//! - PEERS over the same server in the same run: `http/peer-lines` (reqwest + naive line
//!   split, no JSON), `http/peer-lines+json` (the same + `serde_json::Value` per data line),
//!   `http/peer-eventsource+typed` (`eventsource-stream` + serde_json into a typed chunk
//!   struct shaped like async-openai's).
//!
//! All HTTP variants run on one current-thread tokio runtime (the server runs on its own
//! thread). After criterion's groups, an interleaved pass runs every selected variant once
//! per round, round after round (`PANTO_BENCH_ROUNDS`, default 5), so that load changes on
//! a shared machine hit every variant alike; from it come one
//! `[summary] NAME: X.XX µs/chunk (…)` line per variant on stderr (median wall time, with the
//! client's CPU time per chunk: process CPU from `getrusage` minus the server thread's, read
//! from `/proc`), `[ratio]` lines panto / peer and a `[target]` line. Criterion filters
//! (regex, or `--exact`) select variants for both passes. A diagnostic for the decoder
//! (`cargo bench -p panto --bench decode`); the figures the project claims come from
//! `scripts/bench.sh` (`bench/RESULTS.md`), where every client is its own process.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, SamplingMode, Throughput};

use futures_util::StreamExt;
use panto::provider::{Decoder, ProviderKind};
use panto::sse::SseParser;
use panto::{Agent, Config, Event, Flow, Receiver, TurnControl, TurnOptions};
use panto_testkit::measure::{measure, server_threads, Sample, Selection};
use panto_testserver::{Scenario, TestServer};
use serde::Deserialize;

/// Content chunks per response.
const CHUNKS: u64 = 100_000;
/// Size of the pieces the in-memory variants are fed (a realistic network read).
const PIECE: usize = 16 * 1024;

/// One content chunk as OpenAI sends it (minus `system_fingerprint`/`logprobs`).
const CONTENT_CHUNK: &str = r#"{"id":"chatcmpl-B1x2","object":"chat.completion.chunk","created":1735689600,"model":"gpt-4o","choices":[{"index":0,"delta":{"content":" token"},"finish_reason":null}]}"#;
const FINISH_CHUNK: &str = r#"{"id":"chatcmpl-B1x2","object":"chat.completion.chunk","created":1735689600,"model":"gpt-4o","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#;
const USAGE_CHUNK: &str = r#"{"id":"chatcmpl-B1x2","object":"chat.completion.chunk","created":1735689600,"model":"gpt-4o","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":100000,"total_tokens":100012}}"#;
/// What the peers POST (the server matches anything).
const PEER_REQUEST: &str = r#"{"model":"gpt-4o","messages":[{"role":"user","content":"bench"}],"stream":true,"stream_options":{"include_usage":true}}"#;

// ---------------------------------------------------------------------------------------
// Inputs

fn scenario() -> Scenario {
    let v = serde_json::json!({
        "exchanges": [{
            "times": 1_000_000_000u64,
            "response": {
                "repeat": {"count": CHUNKS, "chunk": {"data": CONTENT_CHUNK}},
                "sse": [{"data": FINISH_CHUNK}, {"data": USAGE_CHUNK}, {"data": "[DONE]"}],
            },
        }],
    });
    Scenario::from_value(&v).expect("valid bench scenario")
}

/// The response body the server plays, built independently (checked against the server).
fn body() -> Vec<u8> {
    let mut out = Vec::with_capacity((CONTENT_CHUNK.len() + 8) * CHUNKS as usize + 1024);
    let mut event = |data: &str| {
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(data.as_bytes());
        out.extend_from_slice(b"\n\n");
    };
    for _ in 0..CHUNKS {
        event(CONTENT_CHUNK);
    }
    event(FINISH_CHUNK);
    event(USAGE_CHUNK);
    event("[DONE]");
    out
}

// ---------------------------------------------------------------------------------------
// CPU accounting: process CPU minus the in-process server thread(s)

// ---------------------------------------------------------------------------------------
// Variants, samples and the summary

/// One way of consuming the 100k-chunk response.
struct Variant<'a> {
    /// `decode/<group>/<id>`.
    name: &'static str,
    /// Runs before each turn, untimed.
    prep: Box<dyn FnMut() + 'a>,
    /// One turn; returns the content chunks it saw.
    turn: Box<dyn FnMut() -> u64 + 'a>,
}

impl Variant<'_> {
    fn run(&mut self, server: &[String]) -> Sample {
        (self.prep)();
        let (n, sample) = measure(server, &mut self.turn);
        assert_eq!(n, CHUNKS, "{}: wrong number of content chunks", self.name);
        sample
    }
}

fn median(mut v: Vec<Duration>) -> Option<Duration> {
    if v.is_empty() {
        return None;
    }
    v.sort();
    Some(v[v.len() / 2])
}

fn per_chunk_us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6 / CHUNKS as f64
}

fn print_summary(samples: &BTreeMap<&'static str, Vec<Sample>>) {
    let mut wall_us = BTreeMap::new();
    for (name, s) in samples {
        let Some(wall) = median(s.iter().map(|x| x.wall).collect()) else {
            continue;
        };
        let proc_cpu = median(s.iter().map(|x| x.process_cpu).collect()).unwrap_or_default();
        let client: Vec<Duration> = s.iter().filter_map(|x| x.client_cpu).collect();
        let cpu = match median(client) {
            Some(c) if name.starts_with("decode/http") => format!(
                ", client cpu {:.2} µs/chunk, process cpu {:.2} µs/chunk",
                per_chunk_us(c),
                per_chunk_us(proc_cpu)
            ),
            _ => format!(", cpu {:.2} µs/chunk", per_chunk_us(proc_cpu)),
        };
        eprintln!(
            "[summary] {name}: {:.2} µs/chunk (wall, median of {} interleaved turns{cpu})",
            per_chunk_us(wall),
            s.len()
        );
        wall_us.insert(*name, per_chunk_us(wall));
    }
    for transport in ["mem", "http"] {
        let Some(panto) = wall_us.get(format!("decode/{transport}/panto").as_str()) else {
            continue;
        };
        for peer in ["peer-lines", "peer-lines+json", "peer-eventsource+typed"] {
            if let Some(p) = wall_us.get(format!("decode/{transport}/{peer}").as_str()) {
                eprintln!(
                    "[ratio] decode/{transport}: panto / {peer} = {:.2}",
                    panto / p
                );
            }
        }
    }
    if let Some(h) = wall_us.get("decode/http/panto") {
        let verdict = if *h <= 1.3 { "met" } else { "NOT met" };
        eprintln!("[target] decode/http/panto <= 1.30 µs/chunk: {h:.2} ({verdict})");
    }
}

// ---------------------------------------------------------------------------------------
// The decoders under test

/// panto's SSE parser + OpenAI decoder over `pieces`; returns content deltas seen.
fn panto_decode<'a>(pieces: impl IntoIterator<Item = &'a [u8]>) -> u64 {
    let mut parser = SseParser::default();
    let mut decoder = Decoder::new(ProviderKind::OpenAi, 0);
    let mut deltas = 0u64;
    let mut emit = |ev: Event| -> panto::Result<()> {
        if matches!(ev, Event::ContentDelta { .. }) {
            deltas += 1;
        }
        black_box(ev);
        Ok(())
    };
    let mut finished = false;
    for piece in pieces {
        parser
            .feed(piece, |ev| {
                if !finished
                    && decoder.on_sse(&ev, &mut emit)? == panto::provider::Progress::Finished
                {
                    finished = true;
                }
                Ok(())
            })
            .expect("decodes");
    }
    assert!(finished, "the decoder did not finish");
    deltas
}

/// Naive peer: split lines on LF, take `data: ` lines, optionally parse each as a
/// `serde_json::Value`. Returns content chunks seen (data lines before `[DONE]`, minus the
/// finish and usage chunks).
#[derive(Default)]
struct LineSplit {
    buf: Vec<u8>,
    data_lines: u64,
    done: bool,
}

impl LineSplit {
    fn feed(&mut self, piece: &[u8], json: bool) {
        self.buf.extend_from_slice(piece);
        let mut start = 0;
        while let Some(pos) = memchr::memchr(b'\n', &self.buf[start..]) {
            let line = &self.buf[start..start + pos];
            start += pos + 1;
            let Some(data) = line.strip_prefix(b"data: ") else {
                continue;
            };
            if self.done {
                continue;
            }
            if data == b"[DONE]" {
                self.done = true;
                continue;
            }
            if json {
                let text = std::str::from_utf8(data).expect("utf-8");
                let v: serde_json::Value = serde_json::from_str(text).expect("json");
                black_box(v);
            }
            self.data_lines += 1;
        }
        self.buf.drain(..start);
    }

    fn content_chunks(&self) -> u64 {
        assert!(self.done, "no [DONE]");
        self.data_lines - 2
    }
}

fn mem_lines(pieces: &[&[u8]], json: bool) -> u64 {
    let mut split = LineSplit::default();
    for p in pieces {
        split.feed(p, json);
    }
    split.content_chunks()
}

/// The typed chunk, shaped like async-openai's `CreateChatCompletionStreamResponse`.
#[allow(dead_code)]
#[derive(Deserialize)]
struct ChatChunk {
    id: String,
    object: String,
    created: u64,
    model: String,
    #[serde(default)]
    system_fingerprint: Option<String>,
    #[serde(default)]
    service_tier: Option<String>,
    choices: Vec<ChatChoice>,
    #[serde(default)]
    usage: Option<ChatUsage>,
}

#[allow(dead_code)]
#[derive(Deserialize)]
struct ChatChoice {
    index: u32,
    delta: ChatDelta,
    #[serde(default)]
    finish_reason: Option<String>,
    #[serde(default)]
    logprobs: Option<serde_json::Value>,
}

#[allow(dead_code)]
#[derive(Deserialize)]
struct ChatDelta {
    #[serde(default)]
    role: Option<String>,
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    refusal: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<serde_json::Value>>,
}

#[allow(dead_code)]
#[derive(Deserialize)]
struct ChatUsage {
    prompt_tokens: u64,
    completion_tokens: u64,
    total_tokens: u64,
}

/// eventsource-stream + typed serde over any byte stream; returns chunks with content.
async fn eventsource_typed<S, B, E>(bytes: S) -> u64
where
    S: futures_util::Stream<Item = Result<B, E>> + Unpin,
    B: AsRef<[u8]>,
    E: std::fmt::Debug,
{
    use eventsource_stream::Eventsource;
    let mut events = bytes.eventsource();
    let mut content = 0u64;
    let mut done = false;
    while let Some(ev) = events.next().await {
        let ev = ev.expect("event stream");
        if done {
            continue; // read to the end so the connection goes back to the pool
        }
        if ev.data == "[DONE]" {
            done = true;
            continue;
        }
        let chunk: ChatChunk = serde_json::from_str(&ev.data).expect("chunk");
        if chunk
            .choices
            .first()
            .is_some_and(|c| c.delta.content.is_some())
        {
            content += 1;
        }
        black_box(chunk);
    }
    assert!(done, "no [DONE]");
    content
}

// ---------------------------------------------------------------------------------------
// HTTP clients

struct CountDeltas(u64);

impl Receiver for CountDeltas {
    fn on_event(&mut self, event: Event) -> Flow {
        if matches!(event, Event::ContentDelta { .. }) {
            self.0 += 1;
        }
        black_box(event);
        Flow::Continue
    }
}

fn reqwest_client() -> reqwest::Client {
    // The same transport settings panto uses.
    reqwest::Client::builder()
        .tcp_nodelay(true)
        .build()
        .expect("reqwest client")
}

async fn post(client: &reqwest::Client, url: &str) -> reqwest::Response {
    let resp = client
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "text/event-stream")
        .header("authorization", "Bearer sk-bench")
        .body(PEER_REQUEST)
        .send()
        .await
        .expect("request");
    assert!(resp.status().is_success(), "status {}", resp.status());
    resp
}

async fn http_lines(client: &reqwest::Client, url: &str, json: bool) -> u64 {
    let mut resp = post(client, url).await;
    let mut split = LineSplit::default();
    while let Some(chunk) = resp.chunk().await.expect("body") {
        split.feed(&chunk, json);
    }
    split.content_chunks()
}

async fn http_parser_loop(client: &reqwest::Client, url: &str) -> u64 {
    let mut resp = post(client, url).await;
    let mut parser = SseParser::default();
    let mut decoder = Decoder::new(ProviderKind::OpenAi, 0);
    let mut deltas = 0u64;
    let mut emit = |ev: Event| -> panto::Result<()> {
        if matches!(ev, Event::ContentDelta { .. }) {
            deltas += 1;
        }
        black_box(ev);
        Ok(())
    };
    let mut finished = false;
    while let Some(chunk) = resp.chunk().await.expect("body") {
        parser
            .feed(&chunk, |ev| {
                if !finished
                    && decoder.on_sse(&ev, &mut emit)? == panto::provider::Progress::Finished
                {
                    finished = true;
                }
                Ok(())
            })
            .expect("decodes");
    }
    assert!(finished, "the decoder did not finish");
    deltas
}

// ---------------------------------------------------------------------------------------

fn main() {
    let selection = Selection::from_args();
    let body = body();
    let pieces: Vec<&[u8]> = body.chunks(PIECE).collect();
    eprintln!(
        "decode bench: {CHUNKS} content chunks of {} bytes on the wire ({} bytes of JSON), body {} bytes",
        CONTENT_CHUNK.len() + 8,
        CONTENT_CHUNK.len(),
        body.len()
    );

    let mem_rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let server = TestServer::start(scenario()).expect("test server");
    let url = format!("{}/v1/chat/completions", server.url());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let client = reqwest_client();
    // The server must play exactly the bytes the in-memory variants decode.
    let served = rt.block_on(async { post(&client, &url).await.bytes().await.expect("body") });
    assert!(
        served.as_ref() == body.as_slice(),
        "the server's body differs from the in-memory body ({} vs {} bytes)",
        served.len(),
        body.len()
    );
    let tids = server_threads(1);
    if tids.is_empty() {
        eprintln!("note: cannot find the server thread in /proc; client CPU is not reported");
    }
    let config = Config::new(ProviderKind::OpenAi, "gpt-4o")
        .with_base_url(format!("{}/v1", server.url()))
        .with_api_key("sk-bench");
    let agent = Agent::new(config).expect("agent");

    let (pieces, mem_rt, server, url, rt, client, agent) =
        (&pieces, &mem_rt, &server, &url, &rt, &client, &agent);
    let nothing = || Box::new(|| {}) as Box<dyn FnMut()>;
    let reset = || Box::new(|| server.reset()) as Box<dyn FnMut()>;
    let mut variants: Vec<Variant<'_>> = vec![
        Variant {
            name: "decode/mem/panto",
            prep: nothing(),
            turn: Box::new(|| panto_decode(pieces.iter().copied())),
        },
        Variant {
            name: "decode/mem/peer-lines",
            prep: nothing(),
            turn: Box::new(|| mem_lines(pieces, false)),
        },
        Variant {
            name: "decode/mem/peer-lines+json",
            prep: nothing(),
            turn: Box::new(|| mem_lines(pieces, true)),
        },
        Variant {
            name: "decode/mem/peer-eventsource+typed",
            prep: nothing(),
            turn: Box::new(|| {
                let stream = futures_util::stream::iter(
                    pieces
                        .iter()
                        .map(|p| Ok::<&[u8], std::convert::Infallible>(*p)),
                );
                mem_rt.block_on(eventsource_typed(stream))
            }),
        },
        Variant {
            name: "decode/http/panto",
            prep: Box::new(|| {
                agent.clear_history().expect("idle agent");
                server.reset();
            }),
            turn: Box::new(|| {
                let mut count = CountDeltas(0);
                rt.block_on(agent.run(
                    "bench",
                    &mut count,
                    &TurnControl::default(),
                    TurnOptions::default(),
                ))
                .expect("turn");
                count.0
            }),
        },
        Variant {
            name: "decode/http/panto-parser-loop",
            prep: reset(),
            turn: Box::new(|| rt.block_on(http_parser_loop(client, url))),
        },
        Variant {
            name: "decode/http/peer-lines",
            prep: reset(),
            turn: Box::new(|| rt.block_on(http_lines(client, url, false))),
        },
        Variant {
            name: "decode/http/peer-lines+json",
            prep: reset(),
            turn: Box::new(|| rt.block_on(http_lines(client, url, true))),
        },
        Variant {
            name: "decode/http/peer-eventsource+typed",
            prep: reset(),
            turn: Box::new(|| {
                rt.block_on(async {
                    let resp = post(client, url).await;
                    eventsource_typed(resp.bytes_stream()).await
                })
            }),
        },
    ];

    let mut c = Criterion::default().configure_from_args();
    for group in ["decode/mem", "decode/http"] {
        let mut g = c.benchmark_group(group);
        g.throughput(Throughput::Elements(CHUNKS));
        g.sample_size(10);
        g.sampling_mode(SamplingMode::Flat);
        for v in variants.iter_mut().filter(|v| v.name.starts_with(group)) {
            let id = &v.name[group.len() + 1..];
            g.bench_function(id, |b| {
                b.iter_custom(|iters| (0..iters).map(|_| v.run(&[]).wall).sum())
            });
        }
        g.finish();
    }
    c.final_summary();

    if selection.list {
        return;
    }
    let mut selected: Vec<&mut Variant<'_>> = variants
        .iter_mut()
        .filter(|v| selection.selects(v.name))
        .collect();
    let rounds = selection.rounds();
    eprintln!(
        "interleaved pass: {rounds} round(s) of {} variant(s)",
        selected.len()
    );
    let mut samples: BTreeMap<&'static str, Vec<Sample>> = BTreeMap::new();
    for _ in 0..rounds {
        for v in selected.iter_mut() {
            let s = v.run(&tids);
            samples.entry(v.name).or_default().push(s);
        }
    }
    print_summary(&samples);
}
