//! `panto-pull`: the pull-shaped [`Stream`] over panto's push agent loop — the spine
//! every binding (C, Go, Python, the CLI) stands on.
//!
//! ```text
//!  agent.stream(input) ──► worker k (agent.id() % workers): a thread driving its own
//!                          current-thread runtime; many streams share it
//!                            Pump(turn future) ── Forward::on_event ──► outbox (≤ 64)
//!                                                                          │ flush
//!                                          bounded queue (queue_capacity)
//!                                                                          │
//!  Stream::next() ◄────────────────────────────────────────────────────────┘
//!                 enforces the contract (DESIGN.md)
//! ```
//!
//! **Runtime model.** The adapter owns the runtimes; the core never sees them. A small
//! fixed pool of worker threads (one per core but one, at least one, or
//! `PANTO_WORKER_THREADS`), each driving its own
//! current-thread tokio runtime for the life of the process, runs every stream's turn as
//! an ordinary task — the push loop, unchanged. All turns of one agent go to the same
//! worker, so the connections the agent's pool keeps for that runtime are always driven
//! and reused, and a chunk never crosses threads before it becomes an event. The loop
//! never runs on the caller's thread, and 1,000 streams need no 1,000 threads.
//!
//! **Hand-off.** The turn's receiver (`Forward`) never blocks: it appends each event to
//! the stream's outbox, which goes to the queue in bursts bounded in time, not by the
//! turn's polls: when the worker is about to go idle (a tokio `on_thread_park` hook on
//! the worker's runtime), when the oldest waiting event is `FLUSH_AFTER` (100 µs) old
//! while the worker stays busy, at 64 events, at the terminal event, and at the end of
//! the first poll that produced any (the first event is not kept waiting). Whoever
//! hands events over wakes a waiting consumer — a parked thread, an async task's waker,
//! the readiness descriptor. A consumer that runs dry waits at once, taking first what
//! the outbox holds between two polls of the turn. So no event waits in the worker
//! longer than about `FLUSH_AFTER` while the consumer waits, and a consumer that keeps
//! up is woken about once per 64 events or 100 µs, not once per poll (hyper feeds the
//! body about ten chunks per poll) or per event: each wake-up is a system call for the
//! worker and a context switch for the consumer. A worker busy with many streams (64
//! turns or more, going idle with events to hand over more than 5,000 times a second)
//! lingers: a task of its own hands every outbox over once the oldest waiting event is
//! 1 ms old (2 ms at most with tokio's timer tick), so thousands of slow streams wake
//! their consumers once per millisecond rather than once per event. A hand-over that
//! wakes several async consumers wakes one of them from the worker; the first to poll
//! its stream wakes the rest from its own thread (queued on its runtime without a system
//! call), or the worker does after 1 ms if none did.
//!
//! **Backpressure.** When the queue is full the outbox fills; at 64 waiting events the
//! receiver's `poll_ready` returns `Pending` and the core stops reading the socket until
//! the consumer pops — parking only this turn, never the shared thread. The core does not
//! count that wait against its idle or request timeouts.
//!
//! The contract, enforced here for every binding: `message_complete` once and last;
//! exhausted (`Ok(None)`) only after it; a turn that ends without it is `incomplete`
//! (or `internal` if it panicked); errors are sticky; no event after a failure;
//! `cancel` from any thread wakes a blocked `next` (and changes nothing once
//! `message_complete` was delivered); dropping the stream cancels the turn and waits for
//! its task to end, so no socket or queue outlives it. Bindings keep no copy of this
//! state machine: [`Stream::state`] tells where a stream stands, [`Stream::close`] ends
//! it while keeping that answer, and [`Stream::drain_ready`] / [`Stream::wait_ready`]
//! read a whole burst ahead into the stream, whose events `next` / `try_next` then
//! deliver under the same rules.
//!
//! The code: `pool` owns the worker threads, `handoff` how events get from a turn to
//! its queue (the receiver, the outbox and its flushes, the consumer's parking), and
//! `stream` the pull side and the contract.
//!
//! ```no_run
//! use panto::{Agent, Config, Event, ProviderKind};
//! use panto_pull::AgentStreamExt;
//!
//! let agent = Agent::new(Config::new(ProviderKind::OpenAi, "gpt-4o-mini"))?;
//! let mut stream = agent.stream("Hello")?;
//! while let Some(event) = stream.next()? {
//!     if let Event::ContentDelta { text, .. } = &event {
//!         print!("{text}");
//!     }
//! }
//! # Ok::<(), panto::Error>(())
//! ```

#![warn(missing_docs)]

mod blocking;
mod handoff;
pub mod mcp;
mod pool;
mod queue;
mod readiness;
#[cfg(unix)]
mod ready_set;
mod stream;
#[cfg(test)]
mod test_alloc;
#[cfg(all(test, target_os = "linux"))]
mod test_support;

pub use blocking::block_on_worker;
pub use pool::{
    active_streams, agent_from_parent_process, fork_generation, worker_threads, MAX_WORKER_THREADS,
    WORKER_THREADS_VAR,
};
#[cfg(unix)]
pub use ready_set::ReadySet;
pub use stream::{
    call_mcp_tool, compact, compact_cancellable, count_tokens, resume, AgentStreamExt, Events,
    Next, NextEvent, Stream, StreamControl, StreamState,
};
