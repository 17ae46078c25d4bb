//! Measurement helpers of the benchmarks (`core/benches/decode.rs`,
//! `pull-adapter/benches/{pull,concurrency}.rs`): CPU time of the in-process test
//! server's threads (subtracted to get the client's own CPU), per-turn samples, and
//! criterion's command-line selection for the interleaved pass.

use std::time::{Duration, Instant};

/// Thread ids of the `expected` test servers (threads named `panto-testserver-PORT`,
/// which Linux truncates to 15 bytes); empty where `/proc` does not show them all. A thread
/// names itself once it runs, so servers that were just started are waited for (up to 1 s).
pub fn server_threads(expected: usize) -> Vec<String> {
    for _ in 0..100 {
        let found = find_server_threads();
        if found.len() >= expected {
            return found;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Vec::new()
}

pub fn find_server_threads() -> Vec<String> {
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
pub fn thread_cpu(tid: &str) -> Option<Duration> {
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

/// What the command line selects, as criterion reads it (for the interleaved pass).
pub struct Selection {
    pub filter: Option<regex::Regex>,
    pub exact: Option<String>,
    /// `--test`, or run without `--bench` (`cargo test --benches`): one round only.
    pub test: bool,
    pub list: bool,
}

impl Selection {
    pub fn from_args() -> Selection {
        // Criterion 0.5 flags that take a value.
        const VALUED: &[&str] = &[
            "-c",
            "--color",
            "-s",
            "--save-baseline",
            "-b",
            "--baseline",
            "--baseline-lenient",
            "--load-baseline",
            "--sample-size",
            "--warm-up-time",
            "--measurement-time",
            "--nresamples",
            "--noise-threshold",
            "--confidence-level",
            "--significance-level",
            "--profile-time",
            "--plotting-backend",
            "--output-format",
            "--format",
        ];
        let args: Vec<String> = std::env::args().skip(1).collect();
        let mut positional = None;
        let mut i = 0;
        while i < args.len() {
            let a = &args[i];
            if VALUED.contains(&a.as_str()) {
                i += 1;
            } else if !a.starts_with('-') && positional.is_none() {
                positional = Some(a.clone());
            }
            i += 1;
        }
        let has = |f: &str| args.iter().any(|a| a == f);
        let exact = has("--exact");
        Selection {
            filter: positional
                .as_deref()
                .filter(|_| !exact)
                .map(|f| regex::Regex::new(f).expect("a valid filter regex")),
            exact: positional.filter(|_| exact),
            test: has("--test") || !has("--bench"),
            list: has("--list"),
        }
    }

    pub fn selects(&self, name: &str) -> bool {
        match (&self.filter, &self.exact) {
            (Some(re), _) => re.is_match(name),
            (None, Some(e)) => name == e,
            (None, None) => true,
        }
    }

    pub fn rounds(&self) -> usize {
        if self.test {
            return 1;
        }
        std::env::var("PANTO_BENCH_ROUNDS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(5)
            .max(1)
    }
}

/// CPU time of the whole process (all threads).
pub fn process_cpu() -> Duration {
    process_usage().0
}

/// CPU time of the whole process and its context switches (all threads).
fn process_usage() -> (Duration, u64) {
    // SAFETY: getrusage only writes the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    if rc != 0 {
        return (Duration::ZERO, 0);
    }
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    (
        tv(ru.ru_utime) + tv(ru.ru_stime),
        (ru.ru_nvcsw + ru.ru_nivcsw) as u64,
    )
}

#[derive(Clone, Copy)]
struct CpuSnap {
    process: Duration,
    switches: u64,
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
    let (process, switches) = process_usage();
    CpuSnap {
        process,
        switches,
        server: server_cpu,
    }
}

/// What one measured turn cost.
#[derive(Clone, Copy)]
pub struct Sample {
    pub wall: Duration,
    pub process_cpu: Duration,
    /// Process CPU minus the server threads' (`None` where `/proc` does not tell).
    pub client_cpu: Option<Duration>,
    /// Voluntary + involuntary context switches of the process (server included).
    pub switches: u64,
}

/// Runs `turn`, timing it and charging its CPU to the client (everything but the
/// `server` threads). Returns what `turn` returned and the sample.
pub fn measure(server: &[String], turn: impl FnOnce() -> u64) -> (u64, Sample) {
    let c0 = cpu_snap(server);
    let t0 = Instant::now();
    let n = turn();
    let wall = t0.elapsed();
    let c1 = cpu_snap(server);
    let process_cpu = c1.process.saturating_sub(c0.process);
    let client_cpu = match (c0.server, c1.server) {
        (Some(a), Some(b)) => Some(process_cpu.saturating_sub(b.saturating_sub(a))),
        _ => None,
    };
    let sample = Sample {
        wall,
        process_cpu,
        client_cpu,
        switches: c1.switches.saturating_sub(c0.switches),
    };
    (n, sample)
}
