//! `panto-pull`: the pull-shaped [`Stream`] over panto's push agent loop — the spine
//! every binding (C, Go, Python, the CLI) stands on.
//!
//! ```text
//!  agent.stream(input) ──► worker k (agent.id() % workers): a thread driving its own
//!                          current-thread runtime; many streams share it
//!                            Pump(turn future) ── Forward::on_event ──► outbox (≤ 64)
//!                                                                          │ flush
//!                                          bounded crossbeam queue (queue_capacity)
//!                                                                          │
//!  Stream::next() ◄────────────────────────────────────────────────────────┘
//!                 enforces the contract (DESIGN.md)
//! ```
//!
//! **Runtime model.** The adapter owns the runtimes; the core never sees them. A small
//! fixed pool of worker threads (one per core, at least two), each driving its own
//! current-thread tokio runtime for the life of the process, runs every stream's turn as
//! an ordinary task — the push loop, unchanged. All turns of one agent go to the same
//! worker, so the connections the agent's pool keeps for that runtime are always driven
//! and reused, and a chunk never crosses threads before it becomes an event. The loop
//! never runs on the caller's thread, and 1,000 streams need no 1,000 threads.
//!
//! **Hand-off.** The turn's receiver (`Forward`) never blocks: it appends each event to
//! the stream's outbox, which goes to the queue in bursts — at the end of every poll of
//! the turn (the `Pump` wrapper, whenever the turn future returns `Pending`), when 16
//! events wait while the consumer waits for them, when 64 wait in any case, and at the
//! terminal event. A poll is short whatever the scheduler does: the core spends tokio's
//! cooperative budget on every chunk, so even a server that never pauses (a flood of
//! pings) ends a poll within 128 chunks. A consumer that runs dry parks at once (a
//! zero-timeout `next_timeout` alone spins briefly for a turn being polled right now):
//! spinning for each burst, and taking events from the outbox one or two at a time while
//! the worker produced them, kept a second core busy for as long as the turn streamed.
//! So no event waits in the worker longer than 16 events' decoding while the consumer
//! waits, and a consumer that keeps up is woken once per burst, not once per event.
//!
//! **Backpressure.** When the queue is full the outbox fills; at 64 waiting events the
//! receiver's `poll_ready` returns `Pending` and the core stops reading the socket until
//! the consumer pops — parking only this turn, never the shared thread. The core does not
//! count that wait against its idle or request timeouts.
//!
//! The contract, enforced here for every binding: `message_complete` once and last;
//! exhausted (`Ok(None)`) only after it; a turn that ends without it is `incomplete`
//! (or `internal` if it panicked); errors are sticky; no event after a failure;
//! `cancel` from any thread wakes a blocked `next`; dropping the stream cancels the
//! turn and waits for its task to end, so no socket or queue outlives it.
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

use std::collections::VecDeque;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use crossbeam_channel::{
    bounded, Receiver as QueueRx, RecvTimeoutError, Sender as QueueTx, TryRecvError, TrySendError,
};
use futures_util::FutureExt;
use panto::{
    Agent, CancellationToken, CompactOptions, Compaction, Error, Event, Flow, Receiver,
    TurnControl, TurnOptions,
};

type Item = Result<Event, Error>;

/// Most events waiting in a stream's outbox before they go to the queue together, and
/// the point at which a turn whose queue is full stops reading the network.
const MAX_BATCH: usize = 64;

/// Events that wait in the outbox of a turn being polled before they go to a consumer
/// that is waiting for them (the rest of the poll's burst follows at the poll's end).
/// A wake-up costs the worker a syscall and the consumer a context switch: per event that
/// would cost more than decoding the chunk, per 16 events it is noise, and 16 chunks take
/// the worker some tens of microseconds.
const WAKE_BATCH: usize = 16;

/// Longest a zero-timeout `next_timeout` spins for the burst of a turn that is running
/// right now (a caller that must not block, such as an event loop, asking again later
/// costs it more than this).
const MAX_SPIN: Duration = Duration::from_micros(20);
/// Spin hints between two looks at the queue.
const SPIN_BATCH: u32 = 16;

static POOL: OnceLock<Result<Pool, String>> = OnceLock::new();
static ACTIVE: AtomicUsize = AtomicUsize::new(0);

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

/// Starts worker `i`: a thread that drives a current-thread runtime forever.
fn start_worker(i: usize) -> Result<tokio::runtime::Handle, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        // Only name resolution uses blocking threads; one per worker, gone when idle.
        .max_blocking_threads(1)
        .thread_name(format!("panto-resolve-{i}"))
        .thread_keep_alive(Duration::from_secs(5))
        .build()
        .map_err(|e| e.to_string())?;
    let handle = rt.handle().clone();
    std::thread::Builder::new()
        .name(format!("panto-worker-{i}"))
        .spawn(move || {
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

/// What [`Stream::next_timeout`] saw.
#[derive(Debug, Clone, PartialEq)]
pub enum Next {
    Event(Event),
    /// The stream is exhausted (`message_complete` was delivered).
    Done,
    /// Nothing arrived within the timeout; the stream goes on.
    Pending,
}

/// How a consumer that ran dry waits: it parks its own thread at once, and whoever puts
/// events into the queue or ends it unparks it. (The queue's own blocking `recv` spins
/// before it parks; with a worker producing an event every microsecond or two, that spin
/// cost the consumer about as much CPU as decoding the stream.) `waiting` is the
/// consumer's promise to look at the queue again before it parks; a fence on each side
/// keeps a wake-up from being lost.
struct Waiter {
    /// The consumer is about to park (or parked) in `next`.
    waiting: AtomicBool,
    /// The thread to unpark (a stream may be consumed from different threads in turn).
    thread: Mutex<Option<std::thread::Thread>>,
}

impl Waiter {
    /// Unparks the consumer if it waits (called after new items or the queue's end).
    fn wake(&self) {
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.waiting.load(Ordering::SeqCst) {
            if let Some(thread) = self
                .thread
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .as_ref()
            {
                thread.unpark();
            }
        }
    }

    /// Waits for the next item of `events` until `deadline`; the caller has set
    /// `waiting`. A spurious unpark only makes it look again.
    fn wait(
        &self,
        events: &QueueRx<Item>,
        deadline: Option<Instant>,
    ) -> Result<Item, RecvTimeoutError> {
        *self.thread.lock().unwrap_or_else(PoisonError::into_inner) = Some(std::thread::current());
        loop {
            std::sync::atomic::fence(Ordering::SeqCst);
            match events.try_recv() {
                Ok(item) => return Ok(item),
                Err(TryRecvError::Disconnected) => return Err(RecvTimeoutError::Disconnected),
                Err(TryRecvError::Empty) => {}
            }
            match deadline {
                None => std::thread::park(),
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        return Err(RecvTimeoutError::Timeout);
                    }
                    std::thread::park_timeout(d - now);
                }
            }
        }
    }
}

/// The events on their way from a turn to its consumer, beyond what the queue holds.
struct Outbox {
    /// `None` once the consumer has everything (the consumer then sees the queue end).
    tx: Option<QueueTx<Item>>,
    items: VecDeque<Item>,
    /// The consumer is gone or the stream was cancelled: events are dropped.
    closed: bool,
    /// The turn is over; the queue ends once the outbox is empty.
    finished: bool,
    /// The turn's task, parked until the outbox has room again.
    producer: Option<Waker>,
    /// `items.len()`, readable without the lock: the consumer checks it before parking,
    /// so an empty outbox costs it no lock.
    len: Arc<AtomicUsize>,
    /// The consumer to wake when items reach the queue or the queue ends.
    waiter: Arc<Waiter>,
}

impl Outbox {
    /// Moves what fits from the outbox into the queue.
    fn flush(&mut self) {
        self.move_to_queue();
        self.len.store(self.items.len(), Ordering::SeqCst);
        self.waiter.wake();
    }

    /// Ends the queue now (cancel, or a turn that went away): a waiting consumer wakes
    /// and sees the end.
    fn end(&mut self) {
        self.tx = None;
        self.waiter.wake();
    }

    fn move_to_queue(&mut self) {
        while let Some(item) = self.items.pop_front() {
            let Some(tx) = &self.tx else {
                self.items.clear();
                return;
            };
            match tx.try_send(item) {
                Ok(()) => {}
                Err(TrySendError::Full(item)) => {
                    self.items.push_front(item);
                    return;
                }
                Err(TrySendError::Disconnected(_)) => {
                    self.closed = true;
                    self.items.clear();
                    self.tx = None;
                    return;
                }
            }
        }
        if self.finished {
            // Everything was handed over: dropping the sender ends the queue.
            self.tx = None;
        }
    }

    fn has_room(&self) -> bool {
        self.items.len() < MAX_BATCH
    }

    fn push(&mut self, item: Item) {
        self.items.push_back(item);
        self.len.store(self.items.len(), Ordering::SeqCst);
    }
}

/// State shared by a stream's consumer, its control handles and its turn.
struct Shared {
    outbox: Mutex<Outbox>,
    /// The consumer is about to block (or blocked) in `next` (`waiter.waiting`): events
    /// go to it `WAKE_BATCH` at a time, and it is woken.
    waiter: Arc<Waiter>,
    /// The outbox's length (see `Outbox::len`).
    outbox_len: Arc<AtomicUsize>,
    /// The turn is parked on a full outbox: the consumer wakes it when it pops.
    producer_waiting: AtomicBool,
    /// The turn is being polled on its worker right now.
    producer_running: AtomicBool,
    cancelled: AtomicBool,
}

impl Shared {
    fn outbox(&self) -> MutexGuard<'_, Outbox> {
        self.outbox.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The consumer's flush: moves waiting events into the queue and, if that made room,
    /// wakes a turn parked on a full outbox.
    fn flush_for_consumer(&self) {
        let mut outbox = self.outbox();
        outbox.flush();
        if outbox.has_room() || outbox.closed {
            if let Some(w) = outbox.producer.take() {
                self.producer_waiting.store(false, Ordering::SeqCst);
                w.wake();
            }
        }
    }
}

/// Cancels a stream and answers its host-tool calls from any thread. Cheap to clone.
#[derive(Clone)]
pub struct StreamControl {
    control: TurnControl,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for StreamControl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamControl")
            .field("cancelled", &self.is_cancelled())
            .finish_non_exhaustive()
    }
}

impl StreamControl {
    /// Cancels the turn. Idempotent; wakes a `next` blocked on another thread, which
    /// then fails with `cancelled` (unless `message_complete` was already delivered).
    pub fn cancel(&self) {
        self.shared.cancelled.store(true, Ordering::SeqCst);
        self.control.cancel.cancel();
        // Ending the queue (its only sender lives in the outbox) wakes a blocked `next`,
        // which sees the cancel flag first; what was queued is no longer wanted.
        let mut outbox = self.shared.outbox();
        outbox.closed = true;
        outbox.items.clear();
        outbox.len.store(0, Ordering::SeqCst);
        outbox.end();
        if let Some(w) = outbox.producer.take() {
            w.wake();
        }
    }

    pub fn is_cancelled(&self) -> bool {
        self.shared.cancelled.load(Ordering::SeqCst)
    }

    /// True while a `next` on this stream is waiting for an event (parked, or about to
    /// park). For diagnostics, and for tests that must know the consumer is blocked.
    pub fn consumer_waiting(&self) -> bool {
        self.shared.waiter.waiting.load(Ordering::SeqCst)
    }

    /// True while the turn is paused because the consumer has not taken its events (the
    /// queue is full): the network is not being read. For diagnostics ("the consumer is
    /// the bottleneck"), and for tests that must know the turn is held back.
    pub fn turn_paused(&self) -> bool {
        self.shared.producer_waiting.load(Ordering::SeqCst)
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
    /// Disconnected when the turn's task has ended (completed, failed or dropped).
    task_done: QueueRx<()>,
    control: StreamControl,
    state: State,
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stream").finish_non_exhaustive()
    }
}

/// Compacts `agent`'s history (see `Agent::compact`), blocking the calling thread until
/// it is done. The summary request runs on the agent's worker thread, like its turns.
/// `busy` while the agent has an active stream; must not be called from a panto worker
/// thread (that is a `config` error rather than a deadlock).
pub fn compact(agent: &Agent, options: &CompactOptions) -> Result<Compaction, Error> {
    compact_cancellable(agent, options, &CancellationToken::new())
}

/// [`compact`] with a token that cancels it from another thread (the history is then
/// untouched and the result is a `cancelled` error).
pub fn compact_cancellable(
    agent: &Agent,
    options: &CompactOptions,
    cancel: &CancellationToken,
) -> Result<Compaction, Error> {
    if ON_WORKER.with(|w| w.get()) {
        return Err(Error::config(
            "compact: called on a panto worker thread, which would wait for itself",
        ));
    }
    let pool = pool()?;
    let worker = &pool.workers[(agent.id() as usize) % pool.workers.len()];
    let (tx, rx) = bounded::<Result<Compaction, Error>>(1);
    let agent = agent.clone();
    let options = options.clone();
    let cancel = cancel.clone();
    drop(worker.spawn(async move {
        let run = AssertUnwindSafe(agent.compact(&options, &cancel))
            .catch_unwind()
            .await;
        let result = run.unwrap_or_else(|_| Err(Error::internal("compaction panicked")));
        let _ = tx.send(result);
    }));
    rx.recv().unwrap_or_else(|_| {
        Err(Error::internal(
            "the compaction task ended without a result",
        ))
    })
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

/// The push receiver of a turn: appends to the outbox, never blocks.
struct Forward {
    shared: Arc<Shared>,
}

impl Receiver for Forward {
    fn on_event(&mut self, event: Event) -> Flow {
        let urgent = event.is_terminal();
        let mut outbox = self.shared.outbox();
        if outbox.closed {
            return Flow::Stop;
        }
        // The rest goes at the end of this poll of the turn (`Pump`), or to a consumer
        // that runs dry first and takes it (`Stream::next_deadline`).
        outbox.push(Ok(event));
        let waited_for =
            outbox.items.len() >= WAKE_BATCH && self.shared.waiter.waiting.load(Ordering::SeqCst);
        if urgent || waited_for || outbox.items.len() >= MAX_BATCH {
            outbox.flush();
        }
        if outbox.closed {
            Flow::Stop
        } else {
            Flow::Continue
        }
    }

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Flow> {
        let mut outbox = self.shared.outbox();
        if outbox.closed {
            return Poll::Ready(Flow::Stop);
        }
        if outbox.has_room() {
            return Poll::Ready(Flow::Continue);
        }
        outbox.flush();
        if outbox.has_room() || outbox.closed {
            return Poll::Ready(if outbox.closed {
                Flow::Stop
            } else {
                Flow::Continue
            });
        }
        // Full: park this turn (not the thread) until the consumer pops.
        outbox.producer = Some(cx.waker().clone());
        self.shared.producer_waiting.store(true, Ordering::SeqCst);
        Poll::Pending
    }
}

impl Forward {
    fn push_final(&mut self, item: Item) {
        let mut outbox = self.shared.outbox();
        if !outbox.closed {
            outbox.push(item);
        }
    }
}

/// Wraps a turn's task: hands the outbox over each time the turn waits, ends the queue
/// when the turn ends, and tells `Stream::drop` (through `task_done`) that it is gone.
struct Pump {
    turn: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    shared: Arc<Shared>,
    _task_done: QueueTx<()>,
}

impl Future for Pump {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        let Some(turn) = this.turn.as_mut() else {
            return Poll::Ready(());
        };
        this.shared.producer_running.store(true, Ordering::SeqCst);
        let done = turn.as_mut().poll(cx).is_ready();
        let mut outbox = self.shared.outbox();
        if done {
            outbox.finished = true;
        }
        if !outbox.items.is_empty() || done {
            outbox.flush();
        }
        drop(outbox);
        self.shared.producer_running.store(false, Ordering::SeqCst);
        // A consumer that started waiting while this poll ran, and saw it running, left
        // what the flush above could not place (a full queue) to this poll's end.
        if self.shared.waiter.waiting.load(Ordering::SeqCst)
            && self.shared.outbox_len.load(Ordering::SeqCst) > 0
        {
            self.shared.outbox().flush();
        }
        if done {
            self.turn = None;
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

impl Drop for Pump {
    fn drop(&mut self) {
        if self.turn.take().is_some() {
            // Dropped before its turn ended (the runtime went away): end the queue, so a
            // consumer sees `incomplete` rather than waiting forever.
            let mut outbox = self.shared.outbox();
            outbox.finished = true;
            outbox.flush();
            outbox.end();
        }
        ACTIVE.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Stream {
    fn start(agent: &Agent, input: &str, options: TurnOptions) -> Result<Stream, Error> {
        let pool = pool()?;
        // Reserve on the caller's thread so `busy` is reported synchronously.
        let slot = agent.reserve()?;
        let (tx, rx) = bounded::<Item>(agent.config().queue_capacity);
        let (done_tx, done_rx) = bounded::<()>(0);
        let outbox_len = Arc::new(AtomicUsize::new(0));
        let waiter = Arc::new(Waiter {
            waiting: AtomicBool::new(false),
            thread: Mutex::new(None),
        });
        let shared = Arc::new(Shared {
            outbox: Mutex::new(Outbox {
                tx: Some(tx),
                items: VecDeque::with_capacity(MAX_BATCH),
                closed: false,
                finished: false,
                producer: None,
                len: outbox_len.clone(),
                waiter: waiter.clone(),
            }),
            waiter,
            outbox_len,
            producer_waiting: AtomicBool::new(false),
            producer_running: AtomicBool::new(false),
            cancelled: AtomicBool::new(false),
        });
        let control = StreamControl {
            control: TurnControl::default(),
            shared: shared.clone(),
        };
        let turn_control = control.control.clone();
        let input = input.to_owned();
        let mut forward = Forward {
            shared: shared.clone(),
        };
        let turn = async move {
            let run = AssertUnwindSafe(slot.run(&input, &mut forward, &turn_control, options))
                .catch_unwind()
                .await;
            match run {
                Ok(Ok(_summary)) => {} // message_complete already went to the outbox
                Ok(Err(e)) => forward.push_final(Err(e)),
                Err(panic) => {
                    turn_control.cancel.cancel();
                    let what = panic
                        .downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| panic.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "a non-string panic payload".into());
                    forward.push_final(Err(Error::internal(format!(
                        "the stream's turn panicked: {what}"
                    ))));
                }
            }
        };
        let worker = &pool.workers[(agent.id() as usize) % pool.workers.len()];
        ACTIVE.fetch_add(1, Ordering::SeqCst);
        let pump = Pump {
            turn: Some(Box::pin(turn)),
            shared,
            _task_done: done_tx,
        };
        // The worker runtimes live as long as the process: the task always runs.
        drop(worker.spawn(pump));
        Ok(Stream {
            events: Some(rx),
            task_done: done_rx,
            control,
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
    /// Blocks until one of those is known. (The contract's `Result<Option<_>>` shape;
    /// [`Stream::events`] gives an `Iterator` view.)
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Option<Event>, Error> {
        match self.next_deadline(None) {
            Ok(Next::Event(ev)) => Ok(Some(ev)),
            Ok(Next::Done) => Ok(None),
            Ok(Next::Pending) => Err(Error::internal("no deadline, yet the wait timed out")),
            Err(e) => Err(e),
        }
    }

    /// Like [`Stream::next`], but gives up after `timeout` with [`Next::Pending`]. A
    /// timeout too large to represent (`Duration::MAX`) waits without a limit.
    pub fn next_timeout(&mut self, timeout: Duration) -> Result<Next, Error> {
        self.next_deadline(Instant::now().checked_add(timeout))
    }

    /// The next event if one is ready now, without waiting at all: `Next::Pending` when
    /// nothing is. For bindings that take a whole burst at once (drain what is ready, then
    /// hand it out without crossing back into Rust).
    pub fn try_next(&mut self) -> Result<Next, Error> {
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
        let received = match events.try_recv() {
            Ok(item) => Ok(item),
            Err(TryRecvError::Disconnected) => Err(RecvTimeoutError::Disconnected),
            Err(TryRecvError::Empty) => {
                let shared = &self.control.shared;
                if shared.outbox_len.load(Ordering::SeqCst) == 0 {
                    return Ok(Next::Pending);
                }
                shared.flush_for_consumer();
                match events.try_recv() {
                    Ok(item) => Ok(item),
                    Err(TryRecvError::Disconnected) => Err(RecvTimeoutError::Disconnected),
                    Err(TryRecvError::Empty) => return Ok(Next::Pending),
                }
            }
        };
        self.deliver(received)
    }

    /// The events as an `Iterator` of `Result`s: each event, then the end — or a failure
    /// once as `Err`, then the end (the error stays available from [`Stream::next`]).
    pub fn events(&mut self) -> Events<'_> {
        Events { stream: self }
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
        let shared = &self.control.shared;
        // Fast path: an event is waiting (the worker hands them over in bursts).
        match events.try_recv() {
            Ok(item) => return self.deliver(Ok(item)),
            Err(TryRecvError::Disconnected) => {
                return self.deliver(Err(RecvTimeoutError::Disconnected))
            }
            Err(TryRecvError::Empty) => {}
        }
        // From here the consumer waits: the worker hands the events over at the end of
        // the poll it is in, or once `WAKE_BATCH` of them wait, whichever comes first.
        // Spinning for them instead (and taking them from the outbox one or two at a
        // time) kept a core busy for as long as the worker produced.
        shared.waiter.waiting.store(true, Ordering::SeqCst);
        if deadline.is_some_and(|d| d <= Instant::now()) {
            // A caller that must not block (an event loop) asks again later at a higher
            // price than a brief spin for the burst of a turn being polled right now.
            let spin_end = Instant::now() + MAX_SPIN;
            let mut spins = 0u32;
            while shared.producer_running.load(Ordering::SeqCst) {
                for _ in 0..SPIN_BATCH {
                    std::hint::spin_loop();
                }
                match events.try_recv() {
                    Ok(item) => {
                        shared.waiter.waiting.store(false, Ordering::SeqCst);
                        return self.deliver(Ok(item));
                    }
                    Err(TryRecvError::Disconnected) => {
                        shared.waiter.waiting.store(false, Ordering::SeqCst);
                        return self.deliver(Err(RecvTimeoutError::Disconnected));
                    }
                    Err(TryRecvError::Empty) => {}
                }
                spins += 1;
                if spins % 8 == 0 && Instant::now() >= spin_end {
                    break;
                }
            }
            if shared.outbox_len.load(Ordering::SeqCst) > 0 {
                shared.flush_for_consumer();
            }
        } else if shared.outbox_len.load(Ordering::SeqCst) > 0
            && !shared.producer_running.load(Ordering::SeqCst)
        {
            // Events left in the outbox between polls (the queue was full when the poll
            // ended): the worker will not flush again before its next poll.
            shared.flush_for_consumer();
        }
        let received = shared.waiter.wait(events, deadline);
        shared.waiter.waiting.store(false, Ordering::SeqCst);
        self.deliver(received)
    }

    fn deliver(&mut self, received: Result<Item, RecvTimeoutError>) -> Result<Next, Error> {
        // A cancel that raced with an event wins: no event is delivered after cancel().
        if self.control.is_cancelled() {
            return Err(self.fail(Error::cancelled()));
        }
        let shared = &self.control.shared;
        // A turn parked on the full queue is woken once the queue has drained to half,
        // not at every pop: waking it per event would cost a thread wake-up per event.
        if received.is_ok() && shared.producer_waiting.load(Ordering::SeqCst) {
            let low_water = self
                .events
                .as_ref()
                .is_none_or(|q| q.len() <= q.capacity().unwrap_or(0) / 2);
            if low_water {
                shared.flush_for_consumer();
            }
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
            Err(RecvTimeoutError::Disconnected) => Err(self.fail(Error::incomplete(
                "the stream's turn ended before message_complete",
            ))),
        }
    }

    fn fail(&mut self, e: Error) -> Error {
        self.state = State::Failed(e.clone());
        self.release();
        e
    }

    /// Stops the turn (if still running) and waits for its task to end: after this no
    /// socket or queue of this stream is left.
    fn release(&mut self) {
        if !matches!(self.state, State::Completed) {
            self.control.control.cancel.cancel();
        }
        {
            let mut outbox = self.control.shared.outbox();
            outbox.closed = true;
            outbox.items.clear();
            outbox.len.store(0, Ordering::SeqCst);
            if let Some(w) = outbox.producer.take() {
                w.wake();
            }
        }
        self.events.take();
        // On a worker thread (a stream dropped inside another turn's tool), waiting for
        // a task that may need this very thread would never end; the cancel suffices.
        if !ON_WORKER.with(|w| w.get()) {
            let _ = self.task_done.recv();
        }
    }
}

/// The iterator of [`Stream::events`].
pub struct Events<'a> {
    stream: &'a mut Stream,
}

impl Iterator for Events<'_> {
    type Item = Result<Event, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        let already_failed = matches!(self.stream.state, State::Failed(_));
        match self.stream.next() {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send<T: Send>() {}

    #[test]
    fn stream_and_control_are_send() {
        assert_send::<Stream>();
        assert_send::<StreamControl>();
        fn assert_sync<T: Sync>() {}
        assert_sync::<StreamControl>();
    }
}
