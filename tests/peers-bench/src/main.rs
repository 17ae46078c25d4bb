//! The Rust rows of `scripts/bench.sh`: panto (push and pull) and the Rust clients its
//! users would otherwise pick, each consuming the same responses from the same
//! `panto-testserver` process. One invocation is one client in a fresh process:
//!
//! ```text
//! panto-peers-bench turns       VARIANT BASE_URL TURNS
//! panto-peers-bench concurrency VARIANT BASE_URL STREAMS PACE_MS [RAMP_MS]
//! ```
//!
//! `turns` variants (each turn is one request whose response is consumed to the end):
//!
//! - `floor`: reqwest reading the body and splitting lines, no JSON (no client does less);
//! - `eventsource-serde`: reqwest + `eventsource-stream` + serde into typed chunk structs
//!   (what a hand-rolled client on the usual crates does);
//! - `async-openai`: `client.chat().create_stream(..)`, the most used Rust OpenAI client;
//! - `panto-push`: `agent.run` with a `Receiver` on a current-thread runtime;
//! - `panto-pull`: `agent.stream(..)` + `Stream::next` until exhausted;
//! - `panto-push-otel`: `panto-push` with the turn's OpenTelemetry spans and metrics on,
//!   exported over OTLP/HTTP by `panto-otel` (as the CLI and a C host export them) to the
//!   server's own receiver (`OTEL_EXPORTER_OTLP_ENDPOINT`, when not set already), and
//!   flushed at the end of every turn, inside its timing: each turn's spans and metrics are
//!   encoded and sent in requests of their own, the most the export can cost a turn (a
//!   host that lets them batch shares a request between turns); `panto-push` is the same
//!   with them off; `panto-push-otel-batched` flushes only once, after the last turn
//!   (untimed), as the CLI does at exit: the spans go in batches, the metrics once;
//! - diagnostics for where time to first event goes (`bench/run.py --ttfe-sweep`):
//!   `panto-push-mt` (push on a two-worker multi-thread runtime, where the turn and the
//!   HTTP connection may run on different threads, as on the pull adapter's pool) and
//!   `panto-pull-try` (a consumer that never parks: it polls `Stream::try_next`, which
//!   also takes what waits in the adapter's outbox).
//!
//! Every variant touches each chunk's text or tool-argument fragment and counts the chunks
//! that carry one ("items"). One JSON line per turn on stdout:
//! `{"turn":0,"wall_us":…,"cpu_us":…,"ttfe_us":…,"items":…,"peak_rss_kib":…}`. Turn 0 is cold: the client
//! (runtime, agent, connection pool) is created inside it; later turns are warm. CPU is
//! `getrusage(RUSAGE_SELF)`, every thread of this process; the server is another process.
//!
//! `concurrency` runs STREAMS turns at once, each on its own connection, against a server
//! that paces its chunks PACE_MS apart, and prints one JSON line: CPU, wall time, the
//! events and the added gaps between consecutive content events (arrival gap minus the
//! pacing; p50 / p99). Variants: `panto-pull` (one thread blocked in `Stream::next` per
//! stream, the way to wait before `next_async` existed), `panto-pull-async` (every
//! stream's `next_async().await` on one current-thread runtime: no thread per stream),
//! `panto-push` (every `agent.run` on one current-thread runtime), `floor` (the same
//! raw line splitter, showing what the server and the OS add without any client work)
//! and `floor-crossing` (the floor's splitter on worker threads, each line sent to its
//! consumer on one current-thread runtime: what crossing between threads costs alone)
//! and `floor-batched` (the same crossing with pull's batching: each worker hands its
//! lines over at most once per millisecond, in one batch, one wake for all of them).
//! With RAMP_MS, stream `i` starts `i × RAMP_MS / STREAMS` after the first, so that the
//! connections arrive at a rate the server's listen queue takes (a burst of 10,000 SYNs
//! overflows it, and the kernel's SYN retries would spread the starts over half a
//! minute). The line also carries `adapter_workers` (the pull adapter's worker threads, 0 when
//! the variant never starts them). Threads and RSS are sampled from outside by the
//! driver (`bench/run.py`).
//!
//! A benchmark program, not library code: any failure (no server, a client error, a wrong
//! chunk count) makes the figures meaningless, so it stops the run with `expect`, naming
//! the step.

use std::hint::black_box;
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use async_openai::config::OpenAIConfig;
use async_openai::types::chat::{
    ChatCompletionRequestUserMessageArgs, CreateChatCompletionRequestArgs,
};
use futures_util::StreamExt;
use panto::{Agent, Config, Event, Flow, ProviderKind, Receiver, TurnControl};
use panto_pull::AgentStreamExt;
use serde::Deserialize;

/// What the non-panto clients POST (the server answers any request).
const REQUEST: &str =
    r#"{"model":"gpt-4o","messages":[{"role":"user","content":"bench"}],"stream":true}"#;

fn cpu() -> Duration {
    // SAFETY: getrusage only writes the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Peak resident set of this process so far (`VmHWM`), in KiB. Not `ru_maxrss`: Linux
/// carries that over `fork` + `exec` from the parent (the Python driver).
fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
            line.split_whitespace().nth(1)?.parse().ok()
        })
        .unwrap_or(0)
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        [_, "turns", variant, base, turns] => {
            run_turns(variant, base, turns.parse().expect("TURNS is a number"))
        }
        [_, "concurrency", variant, base, streams, pace] => run_concurrency(
            variant,
            base,
            streams.parse().expect("STREAMS is a number"),
            Duration::from_millis(pace.parse().expect("PACE_MS is a number")),
            Duration::ZERO,
        ),
        [_, "concurrency", variant, base, streams, pace, ramp] => run_concurrency(
            variant,
            base,
            streams.parse().expect("STREAMS is a number"),
            Duration::from_millis(pace.parse().expect("PACE_MS is a number")),
            Duration::from_millis(ramp.parse().expect("RAMP_MS is a number")),
        ),
        _ => {
            eprintln!(
                "usage: panto-peers-bench turns VARIANT BASE_URL TURNS\n       \
                 panto-peers-bench concurrency VARIANT BASE_URL STREAMS PACE_MS [RAMP_MS]"
            );
            std::process::exit(2);
        }
    }
}

// ---------------------------------------------------------------------------------------
// Sequential turns

/// What one turn saw: the chunks carrying text or argument fragments, and when the first
/// event arrived.
struct Seen {
    items: u64,
    first: Option<Instant>,
}

impl Seen {
    fn new() -> Seen {
        Seen {
            items: 0,
            first: None,
        }
    }

    fn event(&mut self) {
        if self.first.is_none() {
            self.first = Some(Instant::now());
        }
    }
}

/// Sends what the export holds, and checks nothing was lost.
fn flush(export: &panto_otel::Export) {
    assert!(
        export.flush(Duration::from_secs(60)),
        "the turns' spans and metrics are sent"
    );
    assert_eq!(
        export.dropped_spans() + export.failed_spans() + export.failed_metric_exports(),
        0,
        "nothing lost"
    );
}

/// One `agent.run` turn, every event counted.
async fn push_turn(agent: &Agent, seen: &mut Seen) {
    run_counted(agent, &mut Counting { seen, gaps: None }).await;
}

/// One `agent.run` turn into `receiver`.
async fn run_counted(agent: &Agent, receiver: &mut Counting<'_>) {
    agent
        .run(
            "bench",
            receiver,
            &TurnControl::default(),
            Default::default(),
        )
        .await
        .expect("turn");
}

/// A client, created inside the first (cold) turn.
enum Client {
    Floor(tokio::runtime::Runtime, reqwest::Client),
    EventSource(tokio::runtime::Runtime, reqwest::Client),
    AsyncOpenAi(tokio::runtime::Runtime, async_openai::Client<OpenAIConfig>),
    PantoPush(tokio::runtime::Runtime, Agent),
    /// `PantoPush` whose turns are exported, flushed at the end of each turn (`true`) or
    /// once after the last.
    PantoPushExported(
        tokio::runtime::Runtime,
        Agent,
        &'static panto_otel::Export,
        bool,
    ),
    PantoPull(Agent),
    PantoPullTry(Agent),
}

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

fn reqwest_client() -> reqwest::Client {
    // The transport settings panto uses.
    reqwest::Client::builder()
        .tcp_nodelay(true)
        .build()
        .expect("reqwest client")
}

fn panto_agent(base: &str) -> Agent {
    Agent::new(
        Config::new(ProviderKind::OpenAi, "gpt-4o")
            .with_base_url(base)
            .with_api_key("sk-bench")
            // The tool workload's call names no tool of this agent: it gets an error
            // result and the turn ends after this one response, as the peers' does.
            .with_max_steps(1),
    )
    .expect("agent")
}

impl Client {
    fn new(variant: &str, base: &str) -> Client {
        match variant {
            "floor" => Client::Floor(current_thread(), reqwest_client()),
            "eventsource-serde" => Client::EventSource(current_thread(), reqwest_client()),
            "async-openai" => Client::AsyncOpenAi(
                current_thread(),
                async_openai::Client::with_config(
                    OpenAIConfig::new()
                        .with_api_base(base)
                        .with_api_key("sk-bench"),
                ),
            ),
            "panto-push" => Client::PantoPush(current_thread(), panto_agent(base)),
            "panto-push-otel" | "panto-push-otel-batched" => {
                if std::env::var_os("OTEL_EXPORTER_OTLP_ENDPOINT").is_none() {
                    let root = base.trim_end_matches('/').trim_end_matches("/v1");
                    // Before any thread of this client exists.
                    std::env::set_var("OTEL_EXPORTER_OTLP_ENDPOINT", format!("{root}/_panto/otlp"));
                }
                let export = panto_otel::Export::install("panto-bench")
                    .expect("the OpenTelemetry export starts")
                    .expect("an endpoint is set");
                Client::PantoPushExported(
                    current_thread(),
                    panto_agent(base),
                    export,
                    variant == "panto-push-otel",
                )
            }
            "panto-push-mt" => Client::PantoPush(
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .expect("runtime"),
                panto_agent(base),
            ),
            "panto-pull" => Client::PantoPull(panto_agent(base)),
            "panto-pull-try" => Client::PantoPullTry(panto_agent(base)),
            other => panic!("unknown variant {other:?}"),
        }
    }

    /// Untimed preparation of a turn: panto's history would otherwise grow by a whole
    /// response per turn and be sent back each time; the peers send none either.
    fn prepare(&self) {
        if let Client::PantoPush(_, agent)
        | Client::PantoPushExported(_, agent, _, _)
        | Client::PantoPull(agent)
        | Client::PantoPullTry(agent) = self
        {
            agent.clear_history().expect("clear history");
        }
    }

    fn turn(&self, base: &str, seen: &mut Seen) {
        match self {
            Client::Floor(rt, http) => rt.block_on(floor(http, base, seen, None)),
            Client::EventSource(rt, http) => rt.block_on(eventsource_serde(http, base, seen)),
            Client::AsyncOpenAi(rt, client) => rt.block_on(async_openai_turn(client, seen)),
            Client::PantoPush(rt, agent) => rt.block_on(push_turn(agent, seen)),
            Client::PantoPushExported(rt, agent, export, each_turn) => {
                rt.block_on(push_turn(agent, seen));
                if *each_turn {
                    flush(export);
                }
            }
            Client::PantoPull(agent) => {
                let mut stream = agent.stream("bench").expect("stream");
                while let Some(event) = stream.next().expect("event") {
                    seen.event();
                    if let Event::ContentDelta { text, .. } = &event {
                        black_box(text);
                        seen.items += 1;
                    }
                }
            }
            Client::PantoPullTry(agent) => {
                let mut stream = agent.stream("bench").expect("stream");
                loop {
                    match stream.try_next().expect("event") {
                        panto_pull::Next::Event(event) => {
                            seen.event();
                            if let Event::ContentDelta { text, .. } = &event {
                                black_box(text);
                                seen.items += 1;
                            }
                        }
                        panto_pull::Next::Done => break,
                        panto_pull::Next::Pending => std::hint::spin_loop(),
                    }
                }
            }
        }
    }
}

fn run_turns(variant: &str, base: &str, turns: usize) {
    let mut client: Option<Client> = None;
    for turn in 0..turns {
        if let Some(c) = &client {
            c.prepare();
        }
        let mut seen = Seen::new();
        let cpu0 = cpu();
        let t0 = Instant::now();
        let c = client.get_or_insert_with(|| Client::new(variant, base));
        c.turn(base, &mut seen);
        let wall = t0.elapsed();
        let used = cpu() - cpu0;
        let ttfe = seen.first.expect("no event").duration_since(t0);
        println!(
            r#"{{"turn":{turn},"wall_us":{:.1},"cpu_us":{:.1},"ttfe_us":{:.1},"items":{},"peak_rss_kib":{}}}"#,
            us(wall),
            us(used),
            us(ttfe),
            seen.items,
            peak_rss_kib()
        );
    }
    if let Some(Client::PantoPushExported(_, _, export, false)) = &client {
        flush(export);
    }
}

async fn post(http: &reqwest::Client, base: &str) -> reqwest::Response {
    let resp = http
        .post(format!("{base}/chat/completions"))
        .header("content-type", "application/json")
        .header("accept", "text/event-stream")
        .header("authorization", "Bearer sk-bench")
        .body(REQUEST)
        .send()
        .await
        .expect("request");
    assert!(resp.status().is_success(), "status {}", resp.status());
    resp
}

/// The floor: LF-split lines, `data: {` lines counted, nothing parsed. Every chunk but
/// the finish chunk carries an item in both workloads, so items = JSON data lines - 1.
/// With `gaps`, records the arrival gap between consecutive data lines minus `pace`.
async fn floor(
    http: &reqwest::Client,
    base: &str,
    seen: &mut Seen,
    mut gaps: Option<(&mut Vec<u32>, Duration)>,
) {
    let mut resp = post(http, base).await;
    let mut rest: Vec<u8> = Vec::new();
    let mut data_lines = 0u64;
    let mut last: Option<Instant> = None;
    while let Some(bytes) = resp.chunk().await.expect("body") {
        seen.event();
        rest.extend_from_slice(&bytes);
        let mut start = 0;
        while let Some(pos) = rest[start..].iter().position(|b| *b == b'\n') {
            if rest[start..].starts_with(b"data: {") {
                data_lines += 1;
                if let Some((gaps, pace)) = gaps.as_mut() {
                    record_gap(gaps, &mut last, *pace);
                }
            }
            start += pos + 1;
        }
        rest.drain(..start);
    }
    seen.items = data_lines.saturating_sub(1);
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
    choices: Vec<ChatChoice>,
    #[serde(default)]
    usage: Option<serde_json::Value>,
}

#[allow(dead_code)]
#[derive(Deserialize)]
struct ChatChoice {
    index: u32,
    delta: ChatDelta,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[allow(dead_code)]
#[derive(Deserialize)]
struct ChatDelta {
    #[serde(default)]
    role: Option<String>,
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<ToolCallChunk>>,
}

#[allow(dead_code)]
#[derive(Deserialize)]
struct ToolCallChunk {
    index: u32,
    #[serde(default)]
    id: Option<String>,
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    function: Option<FunctionChunk>,
}

#[allow(dead_code)]
#[derive(Deserialize)]
struct FunctionChunk {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}

async fn eventsource_serde(http: &reqwest::Client, base: &str, seen: &mut Seen) {
    use eventsource_stream::Eventsource;
    let mut events = post(http, base).await.bytes_stream().eventsource();
    let mut done = false;
    while let Some(ev) = events.next().await {
        let ev = ev.expect("event stream");
        seen.event();
        if done {
            continue; // read to the end so the connection goes back to the pool
        }
        if ev.data == "[DONE]" {
            done = true;
            continue;
        }
        let chunk: ChatChunk = serde_json::from_str(&ev.data).expect("chunk");
        if let Some(delta) = chunk.choices.first().map(|c| &c.delta) {
            let args = delta
                .tool_calls
                .as_ref()
                .and_then(|t| t.first()?.function.as_ref()?.arguments.as_ref());
            if let Some(text) = delta.content.as_ref().or(args) {
                black_box(text);
                seen.items += 1;
            }
        }
    }
    assert!(done, "no [DONE]");
}

async fn async_openai_turn(client: &async_openai::Client<OpenAIConfig>, seen: &mut Seen) {
    let request = CreateChatCompletionRequestArgs::default()
        .model("gpt-4o")
        .messages([ChatCompletionRequestUserMessageArgs::default()
            .content("bench")
            .build()
            .expect("message")
            .into()])
        .build()
        .expect("request");
    let mut stream = client.chat().create_stream(request).await.expect("stream");
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.expect("chunk");
        seen.event();
        if let Some(delta) = chunk.choices.first().map(|c| &c.delta) {
            let args = delta
                .tool_calls
                .as_ref()
                .and_then(|t| t.first()?.function.as_ref()?.arguments.as_ref());
            if let Some(text) = delta.content.as_ref().or(args) {
                black_box(text);
                seen.items += 1;
            }
        }
    }
}

/// panto's push receiver: counts content events and, in the concurrency run, records the
/// gaps between them.
struct Counting<'a> {
    seen: &'a mut Seen,
    gaps: Option<(Vec<u32>, Duration, Option<Instant>)>,
}

impl Receiver for Counting<'_> {
    fn on_event(&mut self, event: Event) -> Flow {
        self.seen.event();
        if let Event::ContentDelta { text, .. } = &event {
            black_box(text);
            self.seen.items += 1;
            if let Some((gaps, pace, last)) = self.gaps.as_mut() {
                record_gap(gaps, last, *pace);
            }
        }
        Flow::Continue
    }
}

// ---------------------------------------------------------------------------------------
// Concurrent paced streams

/// The arrival gap minus the server's pacing, in µs (never below 0).
/// Records the gap since the last content event (`last`), less the pacing, and makes
/// this event the last.
fn record_gap(gaps: &mut Vec<u32>, last: &mut Option<Instant>, pace: Duration) {
    let now = Instant::now();
    if let Some(prev) = *last {
        gaps.push(added_us(now - prev, pace));
    }
    *last = Some(now);
}

fn added_us(gap: Duration, pace: Duration) -> u32 {
    u32::try_from(gap.saturating_sub(pace).as_micros()).unwrap_or(u32::MAX)
}

fn percentile(sorted: &[u32], p: usize) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[(sorted.len() * p / 100).min(sorted.len() - 1)]
}

/// Stream `i`'s start offset within the ramp.
fn offset(i: usize, streams: usize, ramp: Duration) -> Duration {
    ramp.mul_f64(i as f64 / streams.max(1) as f64)
}

/// Waits until stream `i`'s start (on the runtime's clock).
async fn ramp_wait(start: tokio::time::Instant, i: usize, streams: usize, ramp: Duration) {
    if !ramp.is_zero() {
        tokio::time::sleep_until(start + offset(i, streams, ramp)).await;
    }
}

fn run_concurrency(variant: &str, base: &str, streams: usize, pace: Duration, ramp: Duration) {
    let cpu0 = cpu();
    let t0 = Instant::now();
    let (items, mut gaps) = match variant {
        "panto-pull" => concurrent_pull(base, streams, pace, ramp),
        "panto-pull-async" => concurrent_pull_async(base, streams, pace, ramp),
        "panto-push" => concurrent_push(base, streams, pace, ramp),
        "floor" => concurrent_floor(base, streams, pace, ramp),
        "floor-crossing" => concurrent_floor_crossing(base, streams, pace, ramp),
        "floor-batched" => concurrent_floor_batched(base, streams, pace, ramp),
        other => panic!("unknown concurrency variant {other:?}"),
    };
    let wall = t0.elapsed();
    let used = cpu() - cpu0;
    // Asking starts the pool: only the pull variants have started it already.
    let workers = if variant.starts_with("panto-pull") {
        panto_pull::worker_threads()
    } else {
        0
    };
    gaps.sort_unstable();
    println!(
        r#"{{"streams":{streams},"items":{items},"wall_us":{:.1},"cpu_us":{:.1},"added_p50_us":{},"added_p99_us":{},"peak_rss_kib":{},"adapter_workers":{}}}"#,
        us(wall),
        us(used),
        percentile(&gaps, 50),
        percentile(&gaps, 99),
        peak_rss_kib(),
        workers
    );
}

fn concurrent_pull(base: &str, streams: usize, pace: Duration, ramp: Duration) -> (u64, Vec<u32>) {
    let start = Arc::new(Barrier::new(streams));
    let all = Arc::new(Mutex::new((0u64, Vec::new())));
    let threads: Vec<_> = (0..streams)
        .map(|i| {
            let (start, all, base) = (start.clone(), all.clone(), base.to_string());
            std::thread::Builder::new()
                .stack_size(256 * 1024)
                .spawn(move || {
                    let agent = panto_agent(&base);
                    start.wait();
                    std::thread::sleep(offset(i, streams, ramp));
                    let mut stream = agent.stream("bench").expect("stream");
                    let (mut items, mut gaps, mut last) = (0u64, Vec::new(), None);
                    while let Some(event) = stream.next().expect("event") {
                        if let Event::ContentDelta { text, .. } = &event {
                            black_box(text);
                            items += 1;
                            record_gap(&mut gaps, &mut last, pace);
                        }
                    }
                    let mut all = all.lock().expect("lock");
                    all.0 += items;
                    all.1.extend(gaps);
                })
                .expect("thread")
        })
        .collect();
    for t in threads {
        t.join().expect("stream thread");
    }
    let mut all = all.lock().expect("lock");
    (all.0, std::mem::take(&mut all.1))
}

/// Every stream's consumer is a task on one current-thread runtime, waiting in
/// `Stream::next_async` (a registered waker, no parked thread); the turns themselves run
/// on the pull adapter's workers.
fn concurrent_pull_async(
    base: &str,
    streams: usize,
    pace: Duration,
    ramp: Duration,
) -> (u64, Vec<u32>) {
    let agents: Vec<Agent> = (0..streams).map(|_| panto_agent(base)).collect();
    current_thread().block_on(async {
        let start = tokio::time::Instant::now();
        let turns = agents.iter().enumerate().map(|(i, agent)| async move {
            ramp_wait(start, i, streams, ramp).await;
            let mut stream = agent.stream("bench").expect("stream");
            let (mut items, mut gaps, mut last) = (0u64, Vec::new(), None);
            while let Some(event) = stream.next_async().await.expect("event") {
                if let Event::ContentDelta { text, .. } = &event {
                    black_box(text);
                    items += 1;
                    record_gap(&mut gaps, &mut last, pace);
                }
            }
            (items, gaps)
        });
        let results = futures_util::future::join_all(turns).await;
        let items = results.iter().map(|r| r.0).sum();
        (items, results.into_iter().flat_map(|r| r.1).collect())
    })
}

fn concurrent_push(base: &str, streams: usize, pace: Duration, ramp: Duration) -> (u64, Vec<u32>) {
    let agents: Vec<Agent> = (0..streams).map(|_| panto_agent(base)).collect();
    current_thread().block_on(async {
        let start = tokio::time::Instant::now();
        let turns = agents.iter().enumerate().map(|(i, agent)| async move {
            ramp_wait(start, i, streams, ramp).await;
            let mut seen = Seen::new();
            let mut receiver = Counting {
                seen: &mut seen,
                gaps: Some((Vec::new(), pace, None)),
            };
            run_counted(agent, &mut receiver).await;
            let gaps = receiver.gaps.map(|g| g.0).unwrap_or_default();
            (seen.items, gaps)
        });
        let results = futures_util::future::join_all(turns).await;
        let items = results.iter().map(|r| r.0).sum();
        (items, results.into_iter().flat_map(|r| r.1).collect())
    })
}

/// The floor's line splitter run the way the pull adapter runs a turn: on one of as many
/// worker threads as the adapter starts (each a current-thread runtime), every content
/// line sent as an owned buffer through a bounded `tokio::sync::mpsc` channel to its
/// consumer, a task on this thread's current-thread runtime. What this costs above
/// `floor` is the crossing alone (a thread per side, a wake per hand-over, memory made
/// on one side and freed on the other), with none of panto's work.
fn concurrent_floor_crossing(
    base: &str,
    streams: usize,
    pace: Duration,
    ramp: Duration,
) -> (u64, Vec<u32>) {
    let workers: Vec<tokio::runtime::Handle> = (0..crossing_workers())
        .map(|i| {
            let rt = current_thread();
            let handle = rt.handle().clone();
            std::thread::Builder::new()
                .name(format!("crossing-worker-{i}"))
                .spawn(move || rt.block_on(std::future::pending::<()>()))
                .expect("worker thread");
            handle
        })
        .collect();
    let clients: Vec<reqwest::Client> = (0..streams).map(|_| reqwest_client()).collect();
    current_thread().block_on(async {
        let start = tokio::time::Instant::now();
        let turns = clients.iter().enumerate().map(|(i, http)| {
            let worker = &workers[i % workers.len()];
            async move {
                ramp_wait(start, i, streams, ramp).await;
                let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<u8>>(64);
                let (http, base) = (http.clone(), base.to_string());
                worker.spawn(async move { floor_lines(&http, &base, tx).await });
                count_crossed(&mut rx, pace).await
            }
        });
        let results = futures_util::future::join_all(turns).await;
        let items = results.iter().map(|r| r.0).sum();
        (items, results.into_iter().flat_map(|r| r.1).collect())
    })
}

/// The receiving end of a crossing floor's channel (bounded or not).
trait Crossing {
    async fn next_line(&mut self) -> Option<Vec<u8>>;
}

impl Crossing for tokio::sync::mpsc::Receiver<Vec<u8>> {
    async fn next_line(&mut self) -> Option<Vec<u8>> {
        self.recv().await
    }
}

impl Crossing for tokio::sync::mpsc::UnboundedReceiver<Vec<u8>> {
    async fn next_line(&mut self) -> Option<Vec<u8>> {
        self.recv().await
    }
}

/// A crossing floor's consumer: counts the lines that cross and the gaps between them.
/// The last data line is the finish chunk, not content (as in `floor`).
async fn count_crossed(rx: &mut impl Crossing, pace: Duration) -> (u64, Vec<u32>) {
    let (mut items, mut gaps, mut last) = (0u64, Vec::new(), None);
    while let Some(line) = rx.next_line().await {
        black_box(line);
        items += 1;
        record_gap(&mut gaps, &mut last, pace);
    }
    (items.saturating_sub(1), gaps)
}

/// What a content line crossing in a batch is: its stream and the line, or `None` once
/// the stream's response ended.
type Crossed = (usize, Option<Vec<u8>>);

/// The crossing floor with the batching the pull adapter does at scale (a worker that
/// holds thousands of streams lingers: it hands everything over once per millisecond).
/// Each worker's splitters gather their lines in one list; a task of the worker hands
/// the list over every millisecond, in one message through an unbounded
/// `tokio::sync::mpsc` channel: one wake of this thread per worker and millisecond, not
/// one per line. Here a dispatcher task gives each line to its stream's task through
/// that stream's own channel (a wake on this thread: no system call). What this costs
/// above `floor` is the least a crossing batched like panto's costs, with none of
/// panto's work: two threads, memory made on one side and freed on the other, each
/// line read on the other core, a wake per batch, a task poll per line.
fn concurrent_floor_batched(
    base: &str,
    streams: usize,
    pace: Duration,
    ramp: Duration,
) -> (u64, Vec<u32>) {
    type Gathered = std::sync::Arc<std::sync::Mutex<Vec<Crossed>>>;
    let (batch_tx, mut batch_rx) = tokio::sync::mpsc::unbounded_channel::<Vec<Crossed>>();
    let workers: Vec<(tokio::runtime::Handle, Gathered)> = (0..crossing_workers())
        .map(|i| {
            let rt = current_thread();
            let handle = rt.handle().clone();
            let gathered = Gathered::default();
            let (list, tx) = (gathered.clone(), batch_tx.clone());
            handle.spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_millis(1));
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tick.tick().await;
                    let batch = std::mem::take(&mut *list.lock().expect("list"));
                    if !batch.is_empty() && tx.send(batch).is_err() {
                        return;
                    }
                }
            });
            std::thread::Builder::new()
                .name(format!("batched-worker-{i}"))
                .spawn(move || rt.block_on(std::future::pending::<()>()))
                .expect("worker thread");
            (handle, gathered)
        })
        .collect();
    drop(batch_tx);
    let clients: Vec<reqwest::Client> = (0..streams).map(|_| reqwest_client()).collect();
    current_thread().block_on(async {
        let (senders, receivers): (Vec<_>, Vec<_>) = (0..streams)
            .map(|_| tokio::sync::mpsc::unbounded_channel::<Vec<u8>>())
            .map(|(tx, rx)| (Some(tx), rx))
            .unzip();
        tokio::spawn(async move {
            let mut senders = senders;
            while let Some(batch) = batch_rx.recv().await {
                for (i, line) in batch {
                    match line {
                        Some(line) => {
                            if let Some(tx) = &senders[i] {
                                tx.send(line).expect("consumer");
                            }
                        }
                        None => senders[i] = None,
                    }
                }
            }
        });
        let start = tokio::time::Instant::now();
        let turns =
            receivers
                .into_iter()
                .zip(clients.iter())
                .enumerate()
                .map(|(i, (mut rx, http))| {
                    let (worker, gathered) = &workers[i % workers.len()];
                    async move {
                        ramp_wait(start, i, streams, ramp).await;
                        let (http, base, list) = (http.clone(), base.to_string(), gathered.clone());
                        worker.spawn(
                            async move { floor_lines_gathered(&http, &base, i, &list).await },
                        );
                        count_crossed(&mut rx, pace).await
                    }
                });
        let results = futures_util::future::join_all(turns).await;
        let items = results.iter().map(|r| r.0).sum();
        (items, results.into_iter().flat_map(|r| r.1).collect())
    })
}

/// `floor`'s splitter, adding each data line of stream `i` to its worker's `list`, and
/// the stream's end after the last.
async fn floor_lines_gathered(
    http: &reqwest::Client,
    base: &str,
    i: usize,
    list: &std::sync::Mutex<Vec<Crossed>>,
) {
    let mut resp = post(http, base).await;
    let mut rest: Vec<u8> = Vec::new();
    while let Some(bytes) = resp.chunk().await.expect("body") {
        rest.extend_from_slice(&bytes);
        let mut start = 0;
        while let Some(pos) = rest[start..].iter().position(|b| *b == b'\n') {
            let line = &rest[start..start + pos];
            if line.starts_with(b"data: {") {
                list.lock().expect("list").push((i, Some(line.to_vec())));
            }
            start += pos + 1;
        }
        rest.drain(..start);
    }
    list.lock().expect("list").push((i, None));
}

/// As many workers as the pull adapter runs by default: one per core but one, at least
/// one (or `PANTO_WORKER_THREADS`, as the adapter reads it).
fn crossing_workers() -> usize {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    std::env::var(panto_pull::WORKER_THREADS_VAR)
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|n| (1..=panto_pull::MAX_WORKER_THREADS).contains(n))
        .unwrap_or_else(|| {
            cores
                .saturating_sub(1)
                .clamp(1, panto_pull::MAX_WORKER_THREADS)
        })
}

/// `floor`'s splitter, sending each data line to `tx` instead of counting it.
async fn floor_lines(http: &reqwest::Client, base: &str, tx: tokio::sync::mpsc::Sender<Vec<u8>>) {
    let mut resp = post(http, base).await;
    let mut rest: Vec<u8> = Vec::new();
    while let Some(bytes) = resp.chunk().await.expect("body") {
        rest.extend_from_slice(&bytes);
        let mut start = 0;
        while let Some(pos) = rest[start..].iter().position(|b| *b == b'\n') {
            let line = &rest[start..start + pos];
            if line.starts_with(b"data: {") {
                tx.send(line.to_vec()).await.expect("consumer");
            }
            start += pos + 1;
        }
        rest.drain(..start);
    }
}

fn concurrent_floor(base: &str, streams: usize, pace: Duration, ramp: Duration) -> (u64, Vec<u32>) {
    // One client per stream, so that each has its own connection, as the agents do.
    let clients: Vec<reqwest::Client> = (0..streams).map(|_| reqwest_client()).collect();
    current_thread().block_on(async {
        let start = tokio::time::Instant::now();
        let turns = clients.iter().enumerate().map(|(i, http)| async move {
            ramp_wait(start, i, streams, ramp).await;
            let mut seen = Seen::new();
            let mut gaps = Vec::new();
            floor(http, base, &mut seen, Some((&mut gaps, pace))).await;
            (seen.items, gaps)
        });
        let results = futures_util::future::join_all(turns).await;
        let items = results.iter().map(|r| r.0).sum();
        (items, results.into_iter().flat_map(|r| r.1).collect())
    })
}
