//! `panto-pull`: the pull-shaped [`Stream`] over panto's push agent loop — the spine
//! every binding (C, Go, Python, the CLI) stands on.
//!
//! ```text
//!  agent.stream(input) ──► worker thread: runtime.block_on(agent.run(…, Forward))
//!                                   │ Forward::on_event = blocking send
//!                                   ▼
//!                       bounded crossbeam queue (queue_capacity)
//!                                   │
//!  Stream::next() ◄─────────────────┘   enforces the contract (DESIGN.md)
//! ```
//!
//! The loop runs unchanged on a dedicated worker thread, driven by the agent's own
//! single-threaded runtime (`Agent::runtime`): the HTTP connection and the loop share that
//! thread, so no chunk crosses threads before it becomes an event, and the connection
//! stays pooled for the agent's next stream. A full queue blocks only that thread — the
//! stream's HTTP read waits (a slow consumer slows the network read; memory stays
//! bounded) — while tool tasks and their timers run on a small shared multi-thread
//! runtime and keep going, as do other agents' streams. The worker hands events over in
//! bursts — when its runtime is about to block (`panto::agent::set_park_hook`), when 64
//! are waiting, or at the terminal event — so no event waits while the loop waits, and a
//! consumer that keeps up is woken once per burst, not once per event.
//!
//! The contract, enforced here for every binding: `message_complete` once and last;
//! exhausted (`Ok(None)`) only after it; a worker that ends without it is `incomplete`
//! (or `internal` if it panicked); errors are sticky; no event after a failure;
//! `cancel` from any thread wakes a blocked `next`; dropping the stream cancels the
//! turn and joins its worker, so no thread, socket or queue outlives it.

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

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{
    bounded, select, Receiver as QueueRx, RecvTimeoutError, Sender as QueueTx, TryRecvError,
    TrySendError,
};
use panto::{Agent, Error, Event, Flow, Receiver, TurnControl, TurnOptions};

type Item = Result<Event, Error>;

static RUNTIME: OnceLock<Result<tokio::runtime::Runtime, String>> = OnceLock::new();
static LIVE_WORKERS: AtomicUsize = AtomicUsize::new(0);

/// The shared runtime on which tool tasks (and their timers) run.
fn runtime() -> Result<tokio::runtime::Handle, Error> {
    let rt = RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("panto-rt")
            .enable_all()
            .build()
            .map_err(|e| e.to_string())
    });
    match rt {
        Ok(rt) => Ok(rt.handle().clone()),
        Err(e) => Err(Error::internal(format!(
            "cannot start the panto runtime: {e}"
        ))),
    }
}

/// How many stream worker threads are alive right now (for leak checks).
pub fn live_workers() -> usize {
    LIVE_WORKERS.load(Ordering::SeqCst)
}

/// What [`Stream::next_timeout`] saw.
#[derive(Debug, Clone, PartialEq)]
pub enum Next {
    Event(Event),
    /// The stream is exhausted (`message_complete` was delivered).
    Done,
    /// Nothing arrived within the timeout; the stream goes on.
    Pending,
}

/// Cancels a stream and answers its host-tool calls from any thread. Cheap to clone.
#[derive(Debug, Clone)]
pub struct StreamControl {
    control: TurnControl,
    cancelled: Arc<AtomicBool>,
    /// Dropping the sender wakes everything selecting on the paired receiver.
    wake: Arc<Mutex<Option<QueueTx<()>>>>,
}

impl StreamControl {
    /// Cancels the turn. Idempotent; wakes a `next` blocked on another thread, which
    /// then fails with `cancelled` (unless `message_complete` was already delivered).
    pub fn cancel(&self) {
        self.cancelled.store(true, Ordering::SeqCst);
        self.control.cancel.cancel();
        self.wake
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
    }

    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::SeqCst)
    }

    /// Answers a host-tool call announced by `tool_call_start{host: true}`. An unknown or
    /// already-answered id is a `tool` error for this call; the stream is unaffected.
    pub fn submit_tool_result(
        &self,
        call_id: &str,
        output: &str,
        is_error: bool,
    ) -> Result<(), Error> {
        self.control.host.submit(call_id, output, is_error)
    }
}

enum State {
    Active,
    Completed,
    Failed(Error),
}

/// One turn as a pull stream. `Send`; see the crate docs for the contract.
pub struct Stream {
    events: Option<QueueRx<Item>>,
    wake_rx: QueueRx<()>,
    control: StreamControl,
    worker: Option<JoinHandle<()>>,
    state: State,
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stream").finish_non_exhaustive()
    }
}

/// `agent.stream(input)`: starts a turn as a pull [`Stream`].
pub trait AgentStreamExt {
    fn stream(&self, input: &str) -> Result<Stream, Error>;
    fn stream_with(&self, input: &str, options: TurnOptions) -> Result<Stream, Error>;
}

impl AgentStreamExt for Agent {
    fn stream(&self, input: &str) -> Result<Stream, Error> {
        Stream::start(self, input, TurnOptions::default())
    }
    fn stream_with(&self, input: &str, options: TurnOptions) -> Result<Stream, Error> {
        Stream::start(self, input, options)
    }
}

/// How long `next` spins for an event before parking: 2^0 + … + 2^(n-1) spin hints.
const SPIN_STEPS: u32 = 7;

/// Most events handed to the queue at once; a bound on what waits in the outbox.
const MAX_BATCH: usize = 64;

/// The worker's side of the queue. Events wait here until the worker thread is about to
/// block (the agent runtime's park hook), a batch is full, or the event is terminal —
/// then go into the queue together, so a consumer that keeps up is woken once per burst
/// rather than once per event, and no event waits while the loop itself waits.
struct Outbox {
    tx: QueueTx<Item>,
    wake_rx: QueueRx<()>,
    buffer: Vec<Item>,
    closed: bool,
}

thread_local! {
    static OUTBOX: std::cell::RefCell<Option<Outbox>> = const { std::cell::RefCell::new(None) };
}

impl Outbox {
    /// Queues `item`; false once the consumer is gone or the stream was cancelled.
    fn push(&mut self, item: Item) -> bool {
        if self.closed {
            return false;
        }
        let urgent = match &item {
            Ok(ev) => ev.is_terminal(),
            Err(_) => true,
        };
        self.buffer.push(item);
        if urgent || self.buffer.len() >= MAX_BATCH {
            self.flush()
        } else {
            true
        }
    }

    fn flush(&mut self) -> bool {
        for item in std::mem::take(&mut self.buffer) {
            if self.closed || !self.send(item) {
                self.closed = true;
            }
        }
        !self.closed
    }

    fn send(&self, item: Item) -> bool {
        // Fast path: room in the queue. `select!` (which also watches for a cancel) costs
        // more than a plain send, so it is kept for when the queue is full.
        let item = match self.tx.try_send(item) {
            Ok(()) => return true,
            Err(TrySendError::Disconnected(_)) => return false,
            Err(TrySendError::Full(item)) => item,
        };
        select! {
            send(self.tx, item) -> r => r.is_ok(),
            // Cancelled while the queue is full: give up forwarding at once.
            recv(self.wake_rx) -> _ => false,
        }
    }
}

/// Runs on the worker thread when the agent runtime is about to block it.
fn flush_outbox() {
    OUTBOX.with(|o| {
        // The hook never runs inside `push` (same thread, not re-entrant); `try_` keeps
        // even that impossible case from panicking.
        if let Ok(mut o) = o.try_borrow_mut() {
            if let Some(o) = o.as_mut() {
                o.flush();
            }
        }
    });
}

fn outbox_push(item: Item) -> bool {
    OUTBOX.with(|o| match o.try_borrow_mut() {
        Ok(mut o) => o.as_mut().is_some_and(|o| o.push(item)),
        Err(_) => false,
    })
}

/// The push receiver of the worker: hands each event to the outbox, and stops the loop
/// when the consumer is gone or the stream was cancelled.
struct Forward;

impl Receiver for Forward {
    fn on_event(&mut self, event: Event) -> Flow {
        if outbox_push(Ok(event)) {
            Flow::Continue
        } else {
            Flow::Stop
        }
    }
}

impl Stream {
    fn start(agent: &Agent, input: &str, options: TurnOptions) -> Result<Stream, Error> {
        let tools = runtime()?;
        // Creates the agent's runtime now, so a failure is reported synchronously.
        agent.runtime()?;
        // Reserve on the caller's thread so `busy` is reported synchronously.
        let slot = agent.reserve()?;
        let (tx, rx) = bounded::<Item>(agent.config().queue_capacity);
        let (wake_tx, wake_rx) = bounded::<()>(0);
        let control = StreamControl {
            control: TurnControl {
                tool_runtime: Some(tools),
                ..TurnControl::default()
            },
            cancelled: Arc::new(AtomicBool::new(false)),
            wake: Arc::new(Mutex::new(Some(wake_tx))),
        };
        let turn = control.control.clone();
        let agent = agent.clone();
        let input = input.to_owned();
        let forward_wake = wake_rx.clone();
        LIVE_WORKERS.fetch_add(1, Ordering::SeqCst);
        let spawned = std::thread::Builder::new()
            .name("panto-stream".into())
            .spawn(move || {
                let _live = LiveWorker;
                OUTBOX.with(|o| {
                    *o.borrow_mut() = Some(Outbox {
                        tx,
                        wake_rx: forward_wake,
                        buffer: Vec::with_capacity(MAX_BATCH),
                        closed: false,
                    })
                });
                panto::agent::set_park_hook(Some(flush_outbox));
                let mut forward = Forward;
                let run = catch_unwind(AssertUnwindSafe(|| {
                    let rt = agent.runtime()?;
                    let result =
                        rt.block_on(agent.run_reserved(slot, &input, &mut forward, &turn, options));
                    // Let the connection tasks react to what the turn left behind (a
                    // response dropped mid-body closes its socket now, not at the next turn).
                    rt.block_on(async {
                        for _ in 0..8 {
                            tokio::task::yield_now().await;
                        }
                    });
                    result
                }));
                match run {
                    Ok(Ok(_summary)) => {} // message_complete already went through the queue
                    Ok(Err(e)) => {
                        outbox_push(Err(e));
                    }
                    Err(panic) => {
                        turn.cancel.cancel();
                        let what = panic
                            .downcast_ref::<&str>()
                            .map(|s| s.to_string())
                            .or_else(|| panic.downcast_ref::<String>().cloned())
                            .unwrap_or_else(|| "a non-string panic payload".into());
                        outbox_push(Err(Error::internal(format!(
                            "the stream worker panicked: {what}"
                        ))));
                    }
                }
                flush_outbox();
                panto::agent::set_park_hook(None);
                // Dropping the outbox drops the sender: the consumer sees the end.
                OUTBOX.with(|o| o.borrow_mut().take());
            });
        let worker = match spawned {
            Ok(w) => w,
            Err(e) => {
                LIVE_WORKERS.fetch_sub(1, Ordering::SeqCst);
                return Err(Error::internal(format!(
                    "cannot start the stream worker: {e}"
                )));
            }
        };
        Ok(Stream {
            events: Some(rx),
            wake_rx,
            control,
            worker: Some(worker),
            state: State::Active,
        })
    }

    /// A handle to cancel this stream or answer host tools from other threads.
    pub fn control(&self) -> StreamControl {
        self.control.clone()
    }

    /// Cancels the turn (see [`StreamControl::cancel`]).
    pub fn cancel(&self) {
        self.control.cancel();
    }

    /// Answers a host-tool call (see [`StreamControl::submit_tool_result`]).
    pub fn submit_tool_result(
        &self,
        call_id: &str,
        output: &str,
        is_error: bool,
    ) -> Result<(), Error> {
        self.control.submit_tool_result(call_id, output, is_error)
    }

    /// The next event: `Ok(Some(ev))`, `Ok(None)` once exhausted (only after
    /// `message_complete`), or `Err` — and the same error again on every later call.
    /// Blocks until one of those is known.
    // The contract's shape (`Result<Option<_>>`, sticky errors) differs from
    // `Iterator::next`; the `Iterator` impl below offers the `Option<Result<_>>` view.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Option<Event>, Error> {
        match self.next_deadline(None) {
            Ok(Next::Event(ev)) => Ok(Some(ev)),
            Ok(Next::Done) => Ok(None),
            Ok(Next::Pending) => Err(Error::internal("no deadline, yet the wait timed out")),
            Err(e) => Err(e),
        }
    }

    /// Like [`Stream::next`], but gives up after `timeout` with [`Next::Pending`].
    pub fn next_timeout(&mut self, timeout: Duration) -> Result<Next, Error> {
        self.next_deadline(Some(Instant::now() + timeout))
    }

    fn next_deadline(&mut self, deadline: Option<Instant>) -> Result<Next, Error> {
        match &self.state {
            State::Completed => return Ok(Next::Done),
            State::Failed(e) => return Err(e.clone()),
            State::Active => {}
        }
        if self.control.is_cancelled() {
            return Err(self.fail(Error::cancelled()));
        }
        let Some(events) = &self.events else {
            return Err(self.fail(Error::internal("the stream queue is gone")));
        };
        // Fast path: an event is waiting (the worker hands them over in bursts), or
        // arrives within a very short spin. Only then park in `select!`, which costs a
        // context switch on each side.
        for step in 0..SPIN_STEPS {
            match events.try_recv() {
                Ok(item) => return self.deliver(Ok(item)),
                Err(TryRecvError::Disconnected) => {
                    return self.deliver(Err(RecvTimeoutError::Disconnected))
                }
                Err(TryRecvError::Empty) => {
                    for _ in 0..(1u32 << step) {
                        std::hint::spin_loop();
                    }
                }
            }
        }
        let received = match deadline {
            None => select! {
                recv(events) -> r => r.map_err(|_| RecvTimeoutError::Disconnected),
                recv(self.wake_rx) -> _ => return Err(self.fail(Error::cancelled())),
            },
            Some(d) => select! {
                recv(events) -> r => r.map_err(|_| RecvTimeoutError::Disconnected),
                recv(self.wake_rx) -> _ => return Err(self.fail(Error::cancelled())),
                default(d.saturating_duration_since(Instant::now())) => Err(RecvTimeoutError::Timeout),
            },
        };
        self.deliver(received)
    }

    fn deliver(&mut self, received: Result<Item, RecvTimeoutError>) -> Result<Next, Error> {
        // A cancel that raced with an event wins: no event is delivered after cancel().
        if self.control.is_cancelled() {
            return Err(self.fail(Error::cancelled()));
        }
        match received {
            Ok(Ok(ev)) => {
                if ev.is_terminal() {
                    self.state = State::Completed;
                    self.release();
                }
                Ok(Next::Event(ev))
            }
            Ok(Err(e)) => Err(self.fail(e)),
            Err(RecvTimeoutError::Timeout) => Ok(Next::Pending),
            Err(RecvTimeoutError::Disconnected) => {
                let panicked = self.join_worker();
                let e = if panicked {
                    Error::internal("the stream worker died without reporting")
                } else {
                    Error::incomplete("the stream worker ended before message_complete")
                };
                Err(self.fail(e))
            }
        }
    }

    fn fail(&mut self, e: Error) -> Error {
        self.state = State::Failed(e.clone());
        self.release();
        e
    }

    /// Stops the worker (if still running) and waits for it: after this no thread,
    /// socket or queue of this stream is left.
    fn release(&mut self) {
        if !matches!(self.state, State::Completed) {
            self.control.control.cancel.cancel();
        }
        self.events.take();
        self.join_worker();
    }

    /// Joins the worker; true if it panicked outside the guarded run.
    fn join_worker(&mut self) -> bool {
        match self.worker.take() {
            Some(w) => w.join().is_err(),
            None => false,
        }
    }
}

impl Iterator for Stream {
    type Item = Result<Event, Error>;

    /// Yields each event, then ends; a failure is yielded once as `Err`, then the
    /// iterator ends (the error stays available from [`Stream::next`]).
    fn next(&mut self) -> Option<Self::Item> {
        let already_failed = matches!(self.state, State::Failed(_));
        match Stream::next(self) {
            Ok(Some(ev)) => Some(Ok(ev)),
            Ok(None) => None,
            Err(_) if already_failed => None,
            Err(e) => Some(Err(e)),
        }
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        if matches!(self.state, State::Active) {
            self.control.cancel();
        }
        self.release();
    }
}

struct LiveWorker;

impl Drop for LiveWorker {
    fn drop(&mut self) {
        LIVE_WORKERS.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send<T: Send>() {}

    #[test]
    fn stream_and_control_are_send() {
        assert_send::<Stream>();
        assert_send::<StreamControl>();
    }
}
