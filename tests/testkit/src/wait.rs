//! Waiting for a condition another thread or process brings about: polled, with a
//! generous deadline that only catches a hang. A test of a wait first establishes that
//! the waiter is blocked; these helpers are for what happens after.

use std::time::{Duration, Instant};

/// How long [`eventually`] waits before it declares a hang: far more than any condition
/// here takes on a loaded machine, so it never decides a passing test.
pub const HANG_GUARD: Duration = Duration::from_secs(60);

/// How often a condition is polled: short next to anything measured, long enough not to
/// starve the threads that make the condition true on a 2-core machine.
const POLL: Duration = Duration::from_millis(2);

/// Polls `cond` until it holds; panics naming `what` after [`HANG_GUARD`].
#[track_caller]
pub fn eventually(what: &str, cond: impl FnMut() -> bool) {
    assert!(
        poll_until(HANG_GUARD, cond),
        "timed out waiting for: {what}"
    );
}

/// Polls `cond` until it holds or `bound` passes; returns whether it held. For a caller
/// that has to clean up (kill a child process) before failing.
pub fn poll_until(bound: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + bound;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(POLL);
    }
}

/// [`eventually`] on tokio's runtime, for a condition the runtime's own tasks bring about
/// (an MCP server's pipes are driven by them): between polls it yields to the runtime
/// instead of blocking its thread.
#[cfg(feature = "server")]
pub async fn eventually_async(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + HANG_GUARD;
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for: {what}"
        );
        tokio::time::sleep(POLL).await;
    }
}
