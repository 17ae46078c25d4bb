//! The cost of the pull adapter against the push loop it wraps.
//!
//! - `pull/per-event`: one turn = one 100,000-chunk OpenAI text response from an in-process
//!   `panto-testserver`, consumed three ways:
//!   - `push-current-thread`: `agent.run(..)` with a counting `Receiver` on a current-thread
//!     tokio runtime (the cheapest push setup);
//!   - `push-multi-thread`: the same on a 2-worker multi-thread runtime (the shape the pull
//!     adapter itself uses: the turn future on one thread, connection tasks on the workers);
//!   - `pull`: `agent.stream(..)` + `Stream::next` until exhausted;
//!   - `probe-ct-worker+queue` (a design probe, not panto-pull): a thread per turn running
//!     the turn on a current-thread runtime that also owns the agent's connections, events
//!     sent through a bounded crossbeam queue to the consumer — what a pull adapter costs
//!     when only the event queue crosses threads.
//!
//!   Wall time per chunk, plus CPU time per chunk: the process's (`getrusage(RUSAGE_SELF)`)
//!   and the client's (the process's minus the in-process server thread's, read from
//!   `/proc`), since pull spends CPU on two threads.
//! - `pull/ttfe`: time to first event on a small response: `warm` (one agent whose pool was
//!   warmed by a completed stream; `agent.stream(..)` + first `next()`), `cold` (a new agent
//!   each time, created untimed), and `push-warm` (push `run` until its first event, for
//!   contrast).
//!
//! At the end, `[summary]`, `[ratio]` and `[target]` lines go to stderr for
//! `scripts/bench.sh`.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use criterion::{Criterion, SamplingMode, Throughput};
use panto::{Agent, Config, Event, Flow, ProviderKind, Receiver, TurnControl, TurnOptions};
use panto_pull::AgentStreamExt;
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

fn process_cpu() -> Duration {
    // SAFETY: getrusage only writes the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    if rc != 0 {
        return Duration::ZERO;
    }
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Thread ids of the test servers (threads named `panto-testserver-PORT`, which Linux
/// truncates to 15 bytes). Empty where `/proc` is not available. A thread names itself
/// once it runs, so a server that was just started is waited for (up to a second).
fn server_threads() -> Vec<String> {
    for _ in 0..100 {
        let found = find_server_threads();
        if !found.is_empty() {
            return found;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Vec::new()
}

fn find_server_threads() -> Vec<String> {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    dir.flatten()
        .filter(|e| {
            std::fs::read_to_string(e.path().join("comm"))
                .is_ok_and(|c| c.starts_with("panto-testserv"))
        })
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

/// On-CPU time of one thread: `/proc/self/task/TID/schedstat` (ns), else `stat` ticks.
fn thread_cpu(tid: &str) -> Option<Duration> {
    if let Ok(s) = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")) {
        if let Some(ns) = s.split_whitespace().next().and_then(|v| v.parse().ok()) {
            return Some(Duration::from_nanos(ns));
        }
    }
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
    // Fields after the parenthesised name: state is field 3, utime 14, stime 15.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Some(Duration::from_nanos(ticks * 1_000_000_000 / hz))
}

#[derive(Clone, Copy)]
struct CpuSnap {
    process: Duration,
    server: Option<Duration>,
}

fn cpu_snap(server: &[String]) -> CpuSnap {
    let server_cpu = if server.is_empty() {
        None
    } else {
        server
            .iter()
            .map(|t| thread_cpu(t))
            .sum::<Option<Duration>>()
    };
    CpuSnap {
        process: process_cpu(),
        server: server_cpu,
    }
}

// ---------------------------------------------------------------------------------------
// Samples behind the summary lines

#[derive(Clone, Copy)]
struct Sample {
    wall: Duration,
    process_cpu: Duration,
    client_cpu: Option<Duration>,
}

static TURNS: Mutex<BTreeMap<String, Vec<Sample>>> = Mutex::new(BTreeMap::new());
static TTFE: Mutex<BTreeMap<String, Vec<Duration>>> = Mutex::new(BTreeMap::new());

/// Times `iters` turns (each returning the content deltas it saw), recording each; `prep`
/// runs before each turn, untimed.
fn time_turns(
    name: &str,
    iters: u64,
    server: &[String],
    mut prep: impl FnMut(),
    mut turn: impl FnMut() -> u64,
) -> Duration {
    let mut total = Duration::ZERO;
    let mut samples = Vec::with_capacity(iters as usize);
    for _ in 0..iters {
        prep();
        let c0 = cpu_snap(server);
        let t0 = Instant::now();
        let n = turn();
        let wall = t0.elapsed();
        let c1 = cpu_snap(server);
        assert_eq!(n, CHUNKS, "{name}: wrong number of content deltas");
        total += wall;
        let process_cpu = c1.process.saturating_sub(c0.process);
        let client_cpu = match (c0.server, c1.server) {
            (Some(a), Some(b)) => Some(process_cpu.saturating_sub(b.saturating_sub(a))),
            _ => None,
        };
        samples.push(Sample {
            wall,
            process_cpu,
            client_cpu,
        });
    }
    TURNS
        .lock()
        .unwrap()
        .entry(name.to_owned())
        .or_default()
        .extend(samples);
    total
}

fn record_ttfe(name: &str, d: Duration) {
    TTFE.lock()
        .unwrap()
        .entry(name.to_owned())
        .or_default()
        .push(d);
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

fn print_summary() {
    let turns = TURNS.lock().unwrap();
    // name -> (wall, process cpu, client cpu) in µs/chunk
    let mut figures: BTreeMap<&str, (f64, f64, Option<f64>)> = BTreeMap::new();
    for (name, s) in turns.iter() {
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
            "[summary] {name}: {w:.2} µs/chunk (wall, median of {} turns)",
            s.len()
        );
        eprintln!("[summary] {name} [process cpu]: {p:.2} µs/chunk");
        if let Some(cl) = cl {
            eprintln!("[summary] {name} [client cpu]: {cl:.2} µs/chunk");
        }
        figures.insert(name.as_str(), (w, p, cl));
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
    for (name, v) in TTFE.lock().unwrap().iter() {
        let n = v.len();
        let Some(med) = median(v.clone()) else {
            continue;
        };
        let min = v.iter().min().copied().unwrap_or_default();
        let ms = med.as_secs_f64() * 1e3;
        eprintln!(
            "[summary] {name}: {ms:.3} ms (median of {n}, min {:.3} ms)",
            min.as_secs_f64() * 1e3
        );
        if name == "pull/ttfe/warm" {
            let verdict = if ms <= 0.3 { "met" } else { "NOT met" };
            eprintln!("[target] pull warm time-to-first-event <= 0.3 ms: {ms:.3} ms ({verdict})");
        }
    }
}

// ---------------------------------------------------------------------------------------

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

fn bench_per_event(c: &mut Criterion) {
    let server = TestServer::start(big_scenario()).expect("test server");
    let tids = server_threads();
    if tids.is_empty() {
        eprintln!("note: cannot find the server thread in /proc; client CPU is not reported");
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
    // One agent per runtime: pooled connections belong to the runtime that opened them.
    let agent_ct = agent_for(&server);
    let agent_mt = agent_for(&server);
    let agent_pull = agent_for(&server);
    let rt_probe = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let agent_probe = agent_for(&server);

    let mut g = c.benchmark_group("pull/per-event");
    g.throughput(Throughput::Elements(CHUNKS));
    g.sample_size(10);
    g.sampling_mode(SamplingMode::Flat);
    for (id, rt, agent) in [
        ("push-current-thread", &rt_ct, &agent_ct),
        ("push-multi-thread", &rt_mt, &agent_mt),
    ] {
        g.bench_function(id, |b| {
            b.iter_custom(|iters| {
                time_turns(
                    &format!("pull/per-event/{id}"),
                    iters,
                    &tids,
                    || {
                        agent.clear_history().expect("idle agent");
                        server.reset();
                    },
                    || push_turn(rt, agent).deltas,
                )
            })
        });
    }
    g.bench_function("pull", |b| {
        b.iter_custom(|iters| {
            time_turns(
                "pull/per-event/pull",
                iters,
                &tids,
                || {
                    agent_pull.clear_history().expect("idle agent");
                    server.reset();
                },
                || pull_turn(&agent_pull),
            )
        })
    });
    g.bench_function("probe-ct-worker+queue", |b| {
        b.iter_custom(|iters| {
            time_turns(
                "pull/per-event/probe-ct-worker+queue",
                iters,
                &tids,
                || {
                    agent_probe.clear_history().expect("idle agent");
                    server.reset();
                },
                || probe_turn(&rt_probe, &agent_probe, agent_probe.config().queue_capacity),
            )
        })
    });
    g.finish();
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

fn bench_ttfe(c: &mut Criterion) {
    let server = TestServer::start(small_scenario()).expect("test server");
    let warm = agent_for(&server);
    // Warm the pool (and the adapter's shared runtime) with one complete stream.
    pull_ttfe(&warm);
    let rt_ct = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let push_agent = agent_for(&server);
    push_turn(&rt_ct, &push_agent);

    let mut g = c.benchmark_group("pull/ttfe");
    // Each iteration also drains and resets untimed, several times what is timed: keep
    // criterion's time budget for these small.
    g.warm_up_time(Duration::from_millis(300));
    g.measurement_time(Duration::from_secs(1));
    g.sample_size(20);
    g.bench_function("warm", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                warm.clear_history().expect("idle agent");
                server.reset();
                let d = pull_ttfe(&warm);
                record_ttfe("pull/ttfe/warm", d);
                total += d;
            }
            total
        })
    });
    g.bench_function("cold", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                server.reset();
                let agent = agent_for(&server);
                let d = pull_ttfe(&agent);
                record_ttfe("pull/ttfe/cold", d);
                total += d;
            }
            total
        })
    });
    g.bench_function("push-warm", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                push_agent.clear_history().expect("idle agent");
                server.reset();
                let t0 = Instant::now();
                let count = push_turn(&rt_ct, &push_agent);
                let d = count.first.expect("an event") - t0;
                record_ttfe("pull/ttfe/push-warm", d);
                total += d;
            }
            total
        })
    });
    g.finish();
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    bench_per_event(&mut c);
    bench_ttfe(&mut c);
    c.final_summary();
    print_summary();
}
