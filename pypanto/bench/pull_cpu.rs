//! The Rust side of the Python benchmark (`bench.py`): panto-pull's own `Stream::next`
//! consuming the same response from the same server as the Python clients, so the
//! Python figures can be read as a ratio to it.
//!
//! ```text
//! pull_cpu stream BASE_URL RUNS    one line per run: CPU µs per content chunk (whole process)
//! pull_cpu ttfe   BASE_URL SAMPLES one line per sample: warm time to first event, ms
//! ```
//!
//! CPU is `getrusage(RUSAGE_SELF)`: every thread of this process (the adapter's worker
//! included), as `time.process_time()` is for the Python clients.

use std::time::{Duration, Instant};

use panto::{Agent, Config, Event, ProviderKind};
use panto_pull::AgentStreamExt;

fn cpu() -> Duration {
    // SAFETY: rusage is plain old data; all zeroes is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage only writes the struct it is given, which lives on this stack.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, mode, base_url, n] = &args[..] else {
        return Err("usage: pull_cpu stream|ttfe BASE_URL N".into());
    };
    let n: usize = n.parse()?;
    let config = Config::new(ProviderKind::OpenAi, "gpt-4o")
        .with_base_url(base_url.as_str())
        .with_api_key("sk-bench");
    let agent = Agent::new(config)?;
    // Warm up: the worker threads, the connection pool.
    let mut warm = agent.stream("warm up")?;
    while warm.next()?.is_some() {}
    drop(warm);
    for _ in 0..n {
        agent.clear_history()?;
        match mode.as_str() {
            "stream" => {
                let start = cpu();
                let mut stream = agent.stream("bench")?;
                let mut chunks = 0u64;
                while let Some(ev) = stream.next()? {
                    if let Event::ContentDelta { text, .. } = &ev {
                        std::hint::black_box(text);
                        chunks += 1;
                    }
                }
                drop(stream);
                let used = cpu() - start;
                println!("{:.4}", used.as_secs_f64() * 1e6 / chunks.max(1) as f64);
            }
            "ttfe" => {
                let start = Instant::now();
                let mut stream = agent.stream("bench")?;
                let first = stream.next()?;
                let elapsed = start.elapsed();
                std::hint::black_box(first);
                while stream.next()?.is_some() {}
                println!("{:.4}", elapsed.as_secs_f64() * 1e3);
            }
            other => return Err(format!("unknown mode {other:?}").into()),
        }
    }
    Ok(())
}
