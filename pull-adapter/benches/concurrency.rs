//! Many streams at once: S agents each stream one turn of 200 text chunks that the
//! in-process `panto-testserver` paces 5 ms apart, all at the same time.
//!
//! - `pull`: each stream is consumed by its own thread blocked in `Stream::next` (what Go
//!   does with a goroutine in cgo, and Python with an executor thread).
//! - `push`: every `agent.run` on one current-thread tokio runtime (the cheapest push
//!   setup; no consumer threads at all).
//!
//! Reported per variant and S: client CPU per event (process CPU minus the server's
//! threads, agent setup included), the added gap between consecutive deltas (arrival gap
//! minus the server's 5 ms pacing; p50 / p99), panto's own threads at their peak, and RSS
//! at the end. Figures are printed, never asserted: compare the variants of one run.
//!
//! `cargo bench -p panto-pull --bench concurrency [-- S...]` (default S = 1 64 1000).

use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use panto::{Agent, Config, Event, Flow, ProviderKind, Receiver, TurnControl};
use panto_pull::AgentStreamExt;
use panto_testkit::measure::{process_cpu, server_threads, thread_cpu};
use panto_testkit::threads::panto_threads;
use panto_testserver::{script, TestServer};

const CHUNKS: usize = 200;
const PACE_MS: u64 = 5;

fn rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

/// CPU of panto's worker threads (where the turns run).
fn worker_cpu() -> Duration {
    std::fs::read_dir("/proc/self/task")
        .map(|dir| {
            dir.filter_map(|t| {
                let t = t.ok()?;
                let name = std::fs::read_to_string(t.path().join("comm")).ok()?;
                name.starts_with("panto-worker")
                    .then(|| thread_cpu(&t.file_name().to_string_lossy()))
                    .flatten()
            })
            .sum()
        })
        .unwrap_or_default()
}

fn server_cpu(threads: &[String]) -> Duration {
    threads.iter().filter_map(|t| thread_cpu(t)).sum()
}

struct Result {
    cpu_per_event_us: f64,
    /// The part of it spent on panto's worker threads (pull only).
    worker_per_event_us: Option<f64>,
    gaps_ms: Vec<f64>,
    peak_threads: usize,
    rss: f64,
}

fn agents(server: &TestServer, n: usize) -> Vec<Agent> {
    (0..n)
        .map(|_| {
            Agent::new(
                Config::new(ProviderKind::OpenAi, "m")
                    .with_base_url(format!("{}/v1", server.url()))
                    .with_api_key("sk-bench"),
            )
            .expect("agent")
        })
        .collect()
}

fn gaps(arrivals: &[Instant]) -> impl Iterator<Item = f64> + '_ {
    arrivals.windows(2).map(|w| {
        let gap = w[1].duration_since(w[0]).as_secs_f64() * 1e3;
        (gap - PACE_MS as f64).max(0.0)
    })
}

fn run_pull(server: &TestServer, s: usize, srv: &[String]) -> Result {
    let (cpu0, srv0, w0) = (process_cpu(), server_cpu(srv), worker_cpu());
    let agents = agents(server, s);
    let barrier = Arc::new(Barrier::new(s + 1));
    let all_gaps = Arc::new(Mutex::new(Vec::new()));
    let handles: Vec<_> = agents
        .into_iter()
        .map(|agent| {
            let (barrier, all_gaps) = (barrier.clone(), all_gaps.clone());
            std::thread::Builder::new()
                .stack_size(256 << 10)
                .spawn(move || {
                    barrier.wait();
                    let mut stream = agent.stream("go").expect("stream");
                    let mut arrivals = Vec::with_capacity(CHUNKS);
                    while let Some(ev) = stream.next().expect("event") {
                        if matches!(ev, Event::ContentDelta { .. }) {
                            arrivals.push(Instant::now());
                        }
                    }
                    all_gaps.lock().unwrap().extend(gaps(&arrivals));
                    arrivals.len()
                })
                .expect("consumer thread")
        })
        .collect();
    barrier.wait();
    let mut peak = panto_threads();
    let mut events = 0;
    for h in handles {
        peak = peak.max(panto_threads());
        events += h.join().expect("consumer");
    }
    let cpu = (process_cpu() - cpu0).saturating_sub(server_cpu(srv) - srv0);
    let gaps = std::mem::take(&mut *all_gaps.lock().unwrap());
    let workers = worker_cpu().saturating_sub(w0);
    Result {
        cpu_per_event_us: cpu.as_secs_f64() * 1e6 / events.max(1) as f64,
        worker_per_event_us: Some(workers.as_secs_f64() * 1e6 / events.max(1) as f64),
        gaps_ms: gaps,
        peak_threads: peak,
        rss: rss_mib(),
    }
}

struct Arrivals(Vec<Instant>);

impl Receiver for Arrivals {
    fn on_event(&mut self, event: Event) -> Flow {
        if matches!(event, Event::ContentDelta { .. }) {
            self.0.push(Instant::now());
        }
        Flow::Continue
    }
}

fn run_push(server: &TestServer, s: usize, srv: &[String]) -> Result {
    let (cpu0, srv0) = (process_cpu(), server_cpu(srv));
    let agents = agents(server, s);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let local = tokio::task::LocalSet::new();
    let results = local.block_on(&rt, async {
        let tasks: Vec<_> = agents
            .into_iter()
            .map(|agent| {
                tokio::task::spawn_local(async move {
                    let mut r = Arrivals(Vec::with_capacity(CHUNKS));
                    agent
                        .run("go", &mut r, &TurnControl::default(), Default::default())
                        .await
                        .expect("turn");
                    r.0
                })
            })
            .collect();
        let mut all = Vec::new();
        for t in tasks {
            all.push(t.await.expect("task"));
        }
        all
    });
    let cpu = (process_cpu() - cpu0).saturating_sub(server_cpu(srv) - srv0);
    let events: usize = results.iter().map(Vec::len).sum();
    Result {
        cpu_per_event_us: cpu.as_secs_f64() * 1e6 / events.max(1) as f64,
        worker_per_event_us: None,
        gaps_ms: results.iter().flat_map(|a| gaps(a)).collect(),
        peak_threads: panto_threads(),
        rss: rss_mib(),
    }
}

fn quantile(v: &mut [f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() - 1) as f64 * q).round() as usize]
}

fn main() {
    let sizes: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let sizes = if sizes.is_empty() {
        vec![1, 64, 1000]
    } else {
        sizes
    };
    let words: Vec<String> = (0..CHUNKS).map(|i| format!("w{i} ")).collect();
    let refs: Vec<&str> = words.iter().map(String::as_str).collect();
    let server = TestServer::start(script::scenario(vec![serde_json::json!({
        "times": 1_000_000,
        "response": {"sse": script::openai_text_events(&refs), "chunk_delay_ms": PACE_MS},
    })]))
    .expect("server");
    let srv = server_threads(1);
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    eprintln!(
        "[concurrency] {CHUNKS} chunks per stream, paced {PACE_MS} ms; {cores} cores; \
         columns: CPU µs/event (client, setup included) | added gap p50 / p99 ms | panto threads (peak) | RSS MiB"
    );
    for &s in &sizes {
        for (name, run) in [
            (
                "pull",
                run_pull as fn(&TestServer, usize, &[String]) -> Result,
            ),
            ("push-one-thread", run_push),
        ] {
            let mut r = run(&server, s, &srv);
            let (p50, p99) = (
                quantile(&mut r.gaps_ms, 0.5),
                quantile(&mut r.gaps_ms, 0.99),
            );
            let split = r
                .worker_per_event_us
                .map(|w| format!(" (workers {w:.1}, consumers {:.1})", r.cpu_per_event_us - w))
                .unwrap_or_default();
            eprintln!(
                "[concurrency] S={s:<5} {name:<16} {:>7.1} µs/event{split} | gap {p50:>6.2} / {p99:>6.2} ms | threads {:>4} | RSS {:>6.1} MiB",
                r.cpu_per_event_us, r.peak_threads, r.rss
            );
        }
    }
}
