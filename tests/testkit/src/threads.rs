//! panto's own threads in this process (stream workers, runtime threads and their
//! resolver helpers, all named `panto-…`), for the tests that check nothing outlives a
//! stream and the benchmarks that report the peak. The test server's threads
//! (`panto-testserver-PORT`, truncated by Linux to `panto-testserv`) and the harness's
//! come and go independently and are not counted. Linux only (`/proc`); elsewhere none
//! are seen.

/// How many of panto's threads are alive.
pub fn panto_threads() -> usize {
    thread_names().iter().filter(|n| is_panto(n)).count()
}

/// The name of every thread of this process, for a failure message.
pub fn thread_names() -> Vec<String> {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    dir.filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|name| name.trim_end().to_owned())
        .collect()
}

fn is_panto(name: &str) -> bool {
    name.starts_with("panto-") && !name.starts_with("panto-testserv")
}
