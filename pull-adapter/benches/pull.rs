//! The cost of the pull adapter against the push loop it wraps.
//!
//! - `pull/per-event`: one turn = one 100,000-chunk OpenAI text response from an in-process
//!   `panto-testserver`, consumed four ways:
//!   - `push-current-thread`: `agent.run(..)` with a counting `Receiver` on a current-thread
//!     tokio runtime (the cheapest push setup);
//!   - `push-multi-thread`: the same on a 2-worker multi-thread runtime (the shape the pull
//!     adapter itself uses: the turn future on the `block_on` thread, connection tasks on
//!     the workers);
//!   - `pull`: `agent.stream(..)` + `Stream::next` until exhausted;
//!   - `probe-ct-worker+queue` (a design probe, not panto-pull): a thread per turn running
//!     the turn on a current-thread runtime that also owns the agent's connections, events
//!     sent through a bounded crossbeam queue to the consumer — what a pull adapter costs
//!     when only the event queue crosses threads.
//!
//!   Wall time per chunk, plus CPU time per chunk: the process's (`getrusage(RUSAGE_SELF)`)
//!   and the client's (the process's minus the in-process server threads', read from
//!   `/proc`), since pull spends CPU on several threads.
//! - `pull/ttfe`: time to first event on a small response: `warm` (one agent whose pool was
//!   warmed by a completed stream; `agent.stream(..)` + first `next()`), `cold` (a new agent
//!   each time, created untimed), and `push-warm` (push `run` on a current-thread runtime
//!   until its first event, for contrast).
//!
//! After criterion's groups, an interleaved pass runs the selected variants round-robin
//! (`PANTO_BENCH_ROUNDS` rounds, default 5; TTFE variants 60 samples per round) so load
//! changes on a shared machine hit every variant alike; from it come the `[summary]`,
//! `[ratio]` and `[target]` lines on stderr. Criterion filters (regex, or `--exact`)
//! select variants for both passes. A diagnostic for the adapter (`cargo bench -p
//! panto-pull --bench pull`); the figures the project claims come from `scripts/bench.sh`
//! (`bench/RESULTS.md`), where every client is its own process.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, SamplingMode, Throughput};

use panto::{Agent, Config, Event, Flow, ProviderKind, Receiver, TurnControl, TurnOptions};
use panto_pull::AgentStreamExt;
use panto_testkit::measure::{measure, server_threads, Sample, Selection};
use panto_testserver::{script, Scenario, TestServer};

/// Content chunks per response.
const CHUNKS: u64 = 100_000;

const CONTENT_CHUNK: &str = r#"{"id":"chatcmpl-B1x2","object":"chat.completion.chunk","created":1735689600,"model":"gpt-4o","choices":[{"index":0,"delta":{"content":" token"},"finish_reason":null}]}"#;
const FINISH_CHUNK: &str = r#"{"id":"chatcmpl-B1x2","object":"chat.completion.chunk","created":1735689600,"model":"gpt-4o","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#;
const USAGE_CHUNK: &str = r#"{"id":"chatcmpl-B1x2","object":"chat.completion.chunk","created":1735689600,"model":"gpt-4o","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":100000,"total_tokens":100012}}"#;

/// Enough for any run; the server is also reset before each turn.
const TIMES: u64 = 1_000_000_000;

fn big_scenario() -> Scenario {
    let v = serde_json::json!({
        "exchanges": [{
            "times": TIMES,
            "response": {
                "repeat": {"count": CHUNKS, "chunk": {"data": CONTENT_CHUNK}},
                "sse": [{"data": FINISH_CHUNK}, {"data": USAGE_CHUNK}, {"data": "[DONE]"}],
            },
        }],
    });
    Scenario::from_value(&v).expect("valid bench scenario")
}

fn small_scenario() -> Scenario {
    script::scenario(vec![serde_json::json!({
        "times": TIMES,
        "response": script::openai_text(&["Hello", ", world."]),
    })])
}

fn agent_for(server: &TestServer) -> Agent {
    let config = Config::new(ProviderKind::OpenAi, "gpt-4o")
        .with_base_url(format!("{}/v1", server.url()))
        .with_api_key("sk-bench");
    Agent::new(config).expect("agent")
}

// ---------------------------------------------------------------------------------------
// CPU accounting: process CPU minus the in-process server thread(s)

// ---------------------------------------------------------------------------------------
// Variants, samples and the summary

/// One way of consuming the 100k-chunk response.
struct TurnVariant<'a> {
    /// `pull/per-event/<id>`.
    name: &'static str,
    /// Runs before each turn, untimed.
    prep: Box<dyn FnMut() + 'a>,
    /// One turn; returns the content deltas it saw.
    turn: Box<dyn FnMut() -> u64 + 'a>,
}

impl TurnVariant<'_> {
    fn run(&mut self, server: &[String]) -> Sample {
        (self.prep)();
        let (n, sample) = measure(server, &mut self.turn);
        assert_eq!(n, CHUNKS, "{}: wrong number of content deltas", self.name);
        sample
    }
}

/// One time-to-first-event measurement (untimed preparation and draining inside).
struct TtfeVariant<'a> {
    /// `pull/ttfe/<id>`.
    name: &'static str,
    sample: Box<dyn FnMut() -> Duration + 'a>,
}

fn sorted(mut v: Vec<Duration>) -> Vec<Duration> {
    v.sort();
    v
}

fn median(v: Vec<Duration>) -> Option<Duration> {
    let v = sorted(v);
    v.get(v.len() / 2).copied()
}

fn per_chunk_us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6 / CHUNKS as f64
}

fn print_summary(
    turns: &BTreeMap<&'static str, Vec<Sample>>,
    ttfe: &BTreeMap<&'static str, Vec<Duration>>,
) {
    // name -> (wall, process cpu, client cpu) in µs/chunk
    let mut figures: BTreeMap<&str, (f64, f64, Option<f64>)> = BTreeMap::new();
    for (name, s) in turns {
        let Some(wall) = median(s.iter().map(|x| x.wall).collect()) else {
            continue;
        };
        let process = median(s.iter().map(|x| x.process_cpu).collect()).unwrap_or_default();
        let client = median(s.iter().filter_map(|x| x.client_cpu).collect());
        let (w, p, cl) = (
            per_chunk_us(wall),
            per_chunk_us(process),
            client.map(per_chunk_us),
        );
        eprintln!(
            "[summary] {name}: {w:.2} µs/chunk (wall, median of {} interleaved turns)",
            s.len()
        );
        eprintln!("[summary] {name} [process cpu]: {p:.2} µs/chunk");
        if let Some(cl) = cl {
            eprintln!("[summary] {name} [client cpu]: {cl:.2} µs/chunk");
        }
        let mut switches: Vec<u64> = s.iter().map(|x| x.switches).collect();
        switches.sort_unstable();
        eprintln!(
            "[summary] {name} [context switches]: {:.2} per chunk",
            switches[switches.len() / 2] as f64 / CHUNKS as f64
        );
        figures.insert(name, (w, p, cl));
    }
    for subject in ["pull", "probe-ct-worker+queue"] {
        let Some(&(sw, sp, sc)) = figures.get(format!("pull/per-event/{subject}").as_str()) else {
            continue;
        };
        for push in ["push-current-thread", "push-multi-thread"] {
            let Some(&(w, p, c)) = figures.get(format!("pull/per-event/{push}").as_str()) else {
                continue;
            };
            eprintln!("[ratio] {subject} / {push} (wall) = {:.2}", sw / w);
            eprintln!("[ratio] {subject} / {push} (process cpu) = {:.2}", sp / p);
            if let (Some(sc), Some(c)) = (sc, c) {
                let r = sc / c;
                eprintln!("[ratio] {subject} / {push} (client cpu) = {r:.2}");
                if subject == "pull" {
                    let verdict = if r <= 1.15 { "met" } else { "NOT met" };
                    eprintln!(
                        "[target] pull <= 1.15 x {push} client cpu per chunk: {r:.2} ({verdict})"
                    );
                }
            }
        }
    }
    for (name, v) in ttfe {
        let v = sorted(v.clone());
        if v.is_empty() {
            continue;
        }
        let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize].as_secs_f64() * 1e3;
        let ms = at(0.5);
        eprintln!(
            "[summary] {name}: {ms:.3} ms (median of {} interleaved; p10 {:.3} ms, p90 {:.3} ms)",
            v.len(),
            at(0.1),
            at(0.9)
        );
        if *name == "pull/ttfe/warm" {
            let verdict = if ms <= 0.3 { "met" } else { "NOT met" };
            eprintln!("[target] pull warm time-to-first-event <= 0.3 ms: {ms:.3} ms ({verdict})");
        }
    }
}

// ---------------------------------------------------------------------------------------
// The consumers under test

/// Counts content deltas; optionally notes when the first event arrived.
struct Count {
    deltas: u64,
    first: Option<Instant>,
}

impl Count {
    fn new() -> Count {
        Count {
            deltas: 0,
            first: None,
        }
    }
}

impl Receiver for Count {
    fn on_event(&mut self, event: Event) -> Flow {
        if self.first.is_none() {
            self.first = Some(Instant::now());
        }
        if matches!(event, Event::ContentDelta { .. }) {
            self.deltas += 1;
        }
        black_box(event);
        Flow::Continue
    }
}

fn push_turn(rt: &tokio::runtime::Runtime, agent: &Agent) -> Count {
    let mut count = Count::new();
    rt.block_on(agent.run(
        "bench",
        &mut count,
        &TurnControl::default(),
        TurnOptions::default(),
    ))
    .expect("turn");
    count
}

fn pull_turn(agent: &Agent) -> u64 {
    let mut stream = agent.stream("bench").expect("stream");
    let mut deltas = 0;
    while let Some(ev) = stream.next().expect("event") {
        if matches!(ev, Event::ContentDelta { .. }) {
            deltas += 1;
        }
        black_box(ev);
    }
    deltas
}

/// Forwards every event into a bounded queue with a plain blocking send.
struct Queue(crossbeam_channel::Sender<Event>);

impl Receiver for Queue {
    fn on_event(&mut self, event: Event) -> Flow {
        match self.0.send(event) {
            Ok(()) => Flow::Continue,
            Err(_) => Flow::Stop,
        }
    }
}

/// Design probe, not panto-pull: a thread per turn like the adapter, but the turn runs
/// on a current-thread runtime that also owns the agent's connection tasks, so only the
/// event queue crosses threads (in the adapter, every HTTP chunk also crosses from the
/// connection task on a runtime worker to the `block_on` thread).
fn probe_turn(rt: &tokio::runtime::Runtime, agent: &Agent, capacity: usize) -> u64 {
    let (tx, rx) = crossbeam_channel::bounded::<Event>(capacity);
    std::thread::scope(|s| {
        let worker = s.spawn(move || {
            let mut queue = Queue(tx);
            rt.block_on(agent.run(
                "bench",
                &mut queue,
                &TurnControl::default(),
                TurnOptions::default(),
            ))
            .expect("turn");
        });
        let mut deltas = 0;
        for ev in rx.iter() {
            if matches!(ev, Event::ContentDelta { .. }) {
                deltas += 1;
            }
            black_box(ev);
        }
        worker.join().expect("worker");
        deltas
    })
}

/// `stream(..)` + first `next()`, timed; the rest of the stream is drained untimed.
fn pull_ttfe(agent: &Agent) -> Duration {
    let t0 = Instant::now();
    let mut stream = agent.stream("hi").expect("stream");
    let first = stream.next().expect("first event");
    let ttfe = t0.elapsed();
    assert!(first.is_some(), "no first event");
    while stream.next().expect("event").is_some() {}
    ttfe
}

fn main() {
    let selection = Selection::from_args();
    let big = TestServer::start(big_scenario()).expect("test server");
    let small = TestServer::start(small_scenario()).expect("test server");
    let tids = server_threads(2);
    if tids.is_empty() {
        eprintln!("note: cannot find the server threads in /proc; client CPU is not reported");
    }
    let rt_ct = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let rt_mt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let rt_probe = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    // One agent per runtime: pooled connections belong to the runtime that opened them.
    let agent_ct = agent_for(&big);
    let agent_mt = agent_for(&big);
    let agent_pull = agent_for(&big);
    let agent_probe = agent_for(&big);
    // Time to first event: warm agents completed one turn first (pool and runtimes warm).
    let warm = agent_for(&small);
    pull_ttfe(&warm);
    let push_warm = agent_for(&small);
    push_turn(&rt_ct, &push_warm);

    let (big, small) = (&big, &small);
    let (rt_ct, rt_mt, rt_probe) = (&rt_ct, &rt_mt, &rt_probe);
    let prep = |agent: &'static str| -> Box<dyn FnMut() + '_> {
        let agent = match agent {
            "ct" => &agent_ct,
            "mt" => &agent_mt,
            "pull" => &agent_pull,
            _ => &agent_probe,
        };
        Box::new(move || {
            agent.clear_history().expect("idle agent");
            big.reset();
        })
    };
    let mut turns: Vec<TurnVariant<'_>> = vec![
        TurnVariant {
            name: "pull/per-event/push-current-thread",
            prep: prep("ct"),
            turn: Box::new(|| push_turn(rt_ct, &agent_ct).deltas),
        },
        TurnVariant {
            name: "pull/per-event/push-multi-thread",
            prep: prep("mt"),
            turn: Box::new(|| push_turn(rt_mt, &agent_mt).deltas),
        },
        TurnVariant {
            name: "pull/per-event/pull",
            prep: prep("pull"),
            turn: Box::new(|| pull_turn(&agent_pull)),
        },
        TurnVariant {
            name: "pull/per-event/probe-ct-worker+queue",
            prep: prep("probe"),
            turn: Box::new(|| {
                probe_turn(rt_probe, &agent_probe, agent_probe.config().queue_capacity)
            }),
        },
    ];
    let mut ttfes: Vec<TtfeVariant<'_>> = vec![
        TtfeVariant {
            name: "pull/ttfe/warm",
            sample: Box::new(|| {
                warm.clear_history().expect("idle agent");
                small.reset();
                pull_ttfe(&warm)
            }),
        },
        TtfeVariant {
            name: "pull/ttfe/cold",
            sample: Box::new(|| {
                small.reset();
                let agent = agent_for(small);
                pull_ttfe(&agent)
            }),
        },
        TtfeVariant {
            name: "pull/ttfe/push-warm",
            sample: Box::new(|| {
                push_warm.clear_history().expect("idle agent");
                small.reset();
                let t0 = Instant::now();
                let count = push_turn(rt_ct, &push_warm);
                count.first.expect("an event") - t0
            }),
        },
    ];

    let mut c = Criterion::default().configure_from_args();
    {
        let mut g = c.benchmark_group("pull/per-event");
        g.throughput(Throughput::Elements(CHUNKS));
        g.sample_size(10);
        g.sampling_mode(SamplingMode::Flat);
        for v in turns.iter_mut() {
            let id = &v.name["pull/per-event/".len()..];
            g.bench_function(id, |b| {
                b.iter_custom(|iters| (0..iters).map(|_| v.run(&[]).wall).sum())
            });
        }
        g.finish();
    }
    {
        let mut g = c.benchmark_group("pull/ttfe");
        // Each iteration also drains and resets untimed, several times what is timed: keep
        // criterion's time budget for these small.
        g.warm_up_time(Duration::from_millis(300));
        g.measurement_time(Duration::from_secs(1));
        g.sample_size(20);
        for v in ttfes.iter_mut() {
            let id = &v.name["pull/ttfe/".len()..];
            g.bench_function(id, |b| {
                b.iter_custom(|iters| (0..iters).map(|_| (v.sample)()).sum())
            });
        }
        g.finish();
    }
    c.final_summary();

    if selection.list {
        return;
    }
    let rounds = selection.rounds();
    let per_round = if selection.test { 3 } else { 60 };
    let mut turns: Vec<&mut TurnVariant<'_>> = turns
        .iter_mut()
        .filter(|v| selection.selects(v.name))
        .collect();
    let mut ttfes: Vec<&mut TtfeVariant<'_>> = ttfes
        .iter_mut()
        .filter(|v| selection.selects(v.name))
        .collect();
    eprintln!(
        "interleaved pass: {rounds} round(s) of {} turn variant(s) and {} time-to-first-event variant(s) x {per_round}",
        turns.len(),
        ttfes.len()
    );
    let mut turn_samples: BTreeMap<&'static str, Vec<Sample>> = BTreeMap::new();
    let mut ttfe_samples: BTreeMap<&'static str, Vec<Duration>> = BTreeMap::new();
    for _ in 0..rounds {
        for v in turns.iter_mut() {
            let s = v.run(&tids);
            turn_samples.entry(v.name).or_default().push(s);
        }
        for v in ttfes.iter_mut() {
            for _ in 0..per_round {
                let d = (v.sample)();
                ttfe_samples.entry(v.name).or_default().push(d);
            }
        }
    }
    print_summary(&turn_samples, &ttfe_samples);
}
