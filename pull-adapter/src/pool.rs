//! The worker pool: a small fixed set of threads, each driving its own current-thread
//! tokio runtime for the life of the process, on which every stream's turn (and every
//! compaction) runs as an ordinary task. All work of one agent goes to the same worker,
//! so the connections its pool keeps for that runtime are always driven and reused.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use panto::{Agent, Error};

static POOL: OnceLock<Result<Pool, String>> = OnceLock::new();
/// Streams whose turn task has not ended yet (see [`active_streams`]).
pub(crate) static ACTIVE: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static ON_WORKER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The adapter's worker threads.
struct Pool {
    workers: Vec<tokio::runtime::Handle>,
}

fn pool() -> Result<&'static Pool, Error> {
    let pool = POOL.get_or_init(|| {
        let n = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2)
            .clamp(2, 64);
        (0..n)
            .map(start_worker)
            .collect::<Result<Vec<_>, String>>()
            .map(|workers| Pool { workers })
    });
    match pool {
        Ok(p) => Ok(p),
        Err(e) => Err(Error::internal(format!(
            "cannot start the panto worker threads: {e}"
        ))),
    }
}

/// The worker that runs `agent`'s turns and compactions (always the same one).
pub(crate) fn worker_for(agent: &Agent) -> Result<&'static tokio::runtime::Handle, Error> {
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
        .build()
        .map_err(|e| e.to_string())?;
    let handle = rt.handle().clone();
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

/// How many worker threads the adapter runs (fixed once the first stream starts; one
/// per core, at least two). With their name-resolution helpers, the adapter never runs
/// more than twice this many threads, however many streams are open.
pub fn worker_threads() -> usize {
    pool().map(|p| p.workers.len()).unwrap_or(0)
}

/// How many streams' turns are still running (for leak checks: it returns to its
/// earlier value once every stream has ended or been dropped).
pub fn active_streams() -> usize {
    ACTIVE.load(Ordering::SeqCst)
}
