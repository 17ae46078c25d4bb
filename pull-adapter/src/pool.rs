//! The worker pool: a small fixed set of threads, each driving its own current-thread
//! tokio runtime for the life of the process, on which every stream's turn (and every
//! compaction) runs as an ordinary task. All work of one agent goes to the same worker.
//! The process's connection pool for a worker's runtime is shared by every agent on that
//! worker, and its connections are always driven, since the worker never stops.
//!
//! Fork: the threads do not survive `fork()`. A child forgets the parent's pool
//! (`pthread_atfork`) and starts its own on its first turn; streams and agents it
//! inherited fail with a `config` error rather than wait for threads that are gone.
//! The pool's threads block SIGPIPE ([`block_sigpipe`]).

use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use panto::{Agent, Error};

/// The pool of this process; NULL until the first turn, and again in a forked child.
/// A pool, once made, is never freed: its threads live as long as the process.
static POOL: AtomicPtr<Result<Pool, Error>> = AtomicPtr::new(std::ptr::null_mut());
/// A thread of this process is making the pool (the others wait for it).
static MAKING: AtomicBool = AtomicBool::new(false);
/// Streams whose turn task has not ended yet (see [`active_streams`]).
pub(crate) static ACTIVE: AtomicUsize = AtomicUsize::new(0);
/// How many times this process's lineage has forked since the library was loaded (see
/// [`fork_generation`]); bumped in the child.
static FORK_GENERATION: AtomicU64 = AtomicU64::new(0);
/// `Agent::next_id()` at the last fork: agents with a smaller id came from the parent.
static FORK_FIRST_AGENT: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static ON_WORKER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The adapter's worker threads.
struct Pool {
    workers: Vec<tokio::runtime::Handle>,
}

fn pool() -> Result<&'static Pool, Error> {
    loop {
        let made = POOL.load(Ordering::Acquire);
        // SAFETY: a non-null POOL points to a leaked, never-freed box (below).
        if let Some(made) = unsafe { made.as_ref() } {
            return made.as_ref().map_err(Error::clone);
        }
        if MAKING
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            // Starting the threads takes well under a millisecond, once per process.
            std::thread::yield_now();
            continue;
        }
        if POOL.load(Ordering::Acquire).is_null() {
            watch_fork();
            let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
            let asked = std::env::var_os(WORKER_THREADS_VAR);
            let made = worker_count(asked.as_deref(), cores).and_then(|n| {
                (0..n)
                    .map(start_worker)
                    .collect::<Result<Vec<_>, String>>()
                    .map(|workers| Pool { workers })
                    .map_err(|e| {
                        Error::internal(format!("cannot start the panto worker threads: {e}"))
                    })
            });
            POOL.store(Box::into_raw(Box::new(made)), Ordering::Release);
        }
        MAKING.store(false, Ordering::Release);
    }
}

/// The environment variable that sets how many worker threads the pool starts.
pub const WORKER_THREADS_VAR: &str = "PANTO_WORKER_THREADS";

/// Most worker threads the pool starts, whatever it is asked.
pub const MAX_WORKER_THREADS: usize = 64;

/// How many worker threads the pool starts on a machine with `cores` cores (what the
/// process may run on), given `asked`, the value of `PANTO_WORKER_THREADS` if set.
///
/// By default one per core but one, at least one: the events the workers make are
/// used by the host's own threads, which need a core too. With a worker per core, a
/// busy host and the workers share the cores with one thread too many, and every
/// worker goes idle and wakes on its own for the network: at 10,000 streams on 2 cores,
/// two workers made twice the context switches of one (0.15 against 0.07 per event)
/// and cost about 0.8 µs more CPU per event in Rust and 1 µs in Go, for no gain in
/// latency (docs/decisions.md, "How many workers"). One worker decodes well over
/// 100,000 events a second, and all turns of one agent run on one worker whatever the
/// count. A host whose own threads stay idle while it holds many fast streams on few
/// cores can ask for more: `PANTO_WORKER_THREADS`, a whole number from 1 to 64, read
/// when the first stream starts. Anything else is a `config` error for every stream.
pub(crate) fn worker_count(asked: Option<&std::ffi::OsStr>, cores: usize) -> Result<usize, Error> {
    let Some(asked) = asked else {
        return Ok(cores.saturating_sub(1).clamp(1, MAX_WORKER_THREADS));
    };
    asked
        .to_str()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|n| (1..=MAX_WORKER_THREADS).contains(n))
        .ok_or_else(|| {
            Error::config(format!(
                "{WORKER_THREADS_VAR}={:?}: expected a whole number of worker threads from 1 to \
                 {MAX_WORKER_THREADS} (unset, panto starts one per core but one)",
                asked.to_string_lossy()
            ))
        })
}

/// Registers [`after_fork_in_child`] with `pthread_atfork`, once, before the first worker
/// starts: only a process that has workers needs to know it was forked.
fn watch_fork() {
    #[cfg(unix)]
    {
        static ONCE: std::sync::Once = std::sync::Once::new();
        // SAFETY: registers a handler that only stores to atomics (async-signal-safe, as
        // a handler running in a child forked from a multithreaded process must be).
        ONCE.call_once(|| unsafe {
            libc::pthread_atfork(None, None, Some(after_fork_in_child));
        });
    }
}

/// Runs in a forked child, on its only thread, right after `fork()`. None of the
/// parent's threads exist here — not the workers, not a thread that may have held a lock
/// of theirs — so nothing of the parent's pool is touched, not even to free it (that
/// could wait for a thread that is gone): the child forgets it, and its first turn
/// starts a pool of its own. Streams and agents made before the fork tell themselves
/// apart by the generation and the first agent id noted here, and fail with a clear
/// error instead of waiting for workers that will never run them.
#[cfg(unix)]
extern "C" fn after_fork_in_child() {
    POOL.store(std::ptr::null_mut(), Ordering::SeqCst);
    MAKING.store(false, Ordering::SeqCst);
    ACTIVE.store(0, Ordering::SeqCst);
    FORK_FIRST_AGENT.store(Agent::next_id(), Ordering::SeqCst);
    FORK_GENERATION.fetch_add(1, Ordering::SeqCst);
}

/// Which fork of the process this is: 0 in the process that loaded the library, one
/// more in each child forked (after the pool started) since. Something made in one
/// generation cannot run in another: its turn belonged to threads that are gone.
pub fn fork_generation() -> u64 {
    FORK_GENERATION.load(Ordering::SeqCst)
}

/// True for an agent made in a process this one was forked from (after that process
/// had started panto's threads). Such an agent must not be used here: its turns and its
/// locks belonged to threads that do not exist in this process. Agents made after the
/// fork are unaffected.
pub fn agent_from_parent_process(agent: &Agent) -> bool {
    agent.id() < FORK_FIRST_AGENT.load(Ordering::SeqCst)
}

/// The error every use of a parent's object reports in a forked child.
pub(crate) fn forked_error(what: &str) -> Error {
    Error::config(format!(
        "this {what} was made before the process forked: panto's threads do not survive \
         fork(), so it cannot be used in the child; make a new agent in the child (new \
         agents work there)"
    ))
}

/// The worker that runs `agent`'s turns and compactions (always the same one).
pub(crate) fn worker_for(agent: &Agent) -> Result<&'static tokio::runtime::Handle, Error> {
    if agent_from_parent_process(agent) {
        return Err(forked_error("agent"));
    }
    let pool = pool()?;
    Ok(&pool.workers[(agent.id() as usize) % pool.workers.len()])
}

/// True on a panto worker thread, where waiting for a task of the pool may wait for
/// this very thread.
pub(crate) fn on_worker() -> bool {
    ON_WORKER.with(|w| w.get())
}

/// Blocks SIGPIPE on the calling thread, one of panto's own.
///
/// Writing to a connection the server has reset raises SIGPIPE on the writing thread
/// (the HTTP stack writes with `writev`, which has no `MSG_NOSIGNAL`), and its default
/// action kills the process. A Rust program ignores SIGPIPE from `main`, but a C, Go or
/// Python host keeps whatever disposition it chose, and a library must not change it.
/// Every socket panto writes is written on the threads it creates (the workers, and the
/// resolver threads of their runtimes), so blocking the signal on those threads alone
/// makes such a write fail with EPIPE — a `connection` error — whatever the host's
/// setup. The signal then stays pending on this thread, which never unblocks it: it is
/// never delivered, to this thread or to any of the host's.
pub(crate) fn block_sigpipe() {
    #[cfg(unix)]
    // SAFETY: plain libc calls on a local, zero-initialised signal set; changing the
    // calling thread's own signal mask affects no other thread.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGPIPE);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

/// Starts worker `i`: a thread that drives a current-thread runtime forever.
fn start_worker(i: usize) -> Result<tokio::runtime::Handle, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        // Only name resolution uses blocking threads; one per worker, gone when idle.
        .max_blocking_threads(1)
        .thread_name(format!("panto-resolve-{i}"))
        .thread_keep_alive(Duration::from_secs(5))
        // They inherit the worker's mask; this holds even if another thread spawns one.
        .on_thread_start(block_sigpipe)
        // The worker is about to go idle: nothing it holds for a consumer may wait for
        // its next wake-up (see `handoff`).
        .on_thread_park(crate::handoff::flush_pending)
        .build()
        .map_err(|e| e.to_string())?;
    let handle = rt.handle().clone();
    // The worker's flusher, for when it holds many busy streams (see `handoff`).
    drop(handle.spawn(crate::handoff::flusher()));
    std::thread::Builder::new()
        .name(format!("panto-worker-{i}"))
        .spawn(move || {
            block_sigpipe();
            ON_WORKER.with(|w| w.set(true));
            rt.block_on(std::future::pending::<()>());
        })
        .map_err(|e| e.to_string())?;
    Ok(handle)
}

/// How many worker threads the adapter runs (fixed once the first stream starts: one
/// per core but one, at least one, or what `PANTO_WORKER_THREADS` asks; 0 if they cannot
/// start). With their name-resolution helpers, the adapter never runs more than twice
/// this many threads, however many streams are open.
pub fn worker_threads() -> usize {
    pool().map(|p| p.workers.len()).unwrap_or(0)
}

/// How many streams' turns are still running (for leak checks: it returns to its
/// earlier value once every stream has ended or been dropped).
pub fn active_streams() -> usize {
    ACTIVE.load(Ordering::SeqCst)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn the_pool_has_a_worker_per_core_but_one() {
        for (cores, workers) in [
            (1, 1),
            (2, 1),
            (3, 2),
            (8, 7),
            (64, 63),
            (65, 64),
            (512, 64),
        ] {
            assert_eq!(worker_count(None, cores).unwrap(), workers, "{cores} cores");
        }
        // No core reported (cannot happen on a running machine): still one.
        assert_eq!(worker_count(None, 0).unwrap(), 1);
    }

    #[test]
    fn panto_worker_threads_sets_the_count_from_1_to_64() {
        for (asked, workers) in [("1", 1), ("3", 3), (" 4\n", 4), ("64", 64)] {
            assert_eq!(
                worker_count(Some(OsStr::new(asked)), 2).unwrap(),
                workers,
                "{asked:?}"
            );
        }
    }

    #[test]
    fn a_worker_count_out_of_range_or_not_a_number_is_a_config_error_naming_the_variable() {
        for asked in ["0", "65", "-1", "two", "", "2.5"] {
            let e = worker_count(Some(OsStr::new(asked)), 8).unwrap_err();
            assert_eq!(e.kind, panto::ErrorKind::Config, "{asked:?}");
            assert!(e.message.contains("PANTO_WORKER_THREADS"), "{}", e.message);
            assert!(e.message.contains(&format!("{asked:?}")), "{}", e.message);
        }
        #[cfg(unix)]
        {
            use std::os::unix::ffi::OsStrExt;
            let e = worker_count(Some(OsStr::from_bytes(b"4\xff")), 8).unwrap_err();
            assert_eq!(e.kind, panto::ErrorKind::Config);
        }
    }
}
