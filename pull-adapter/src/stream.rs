//! The stream: the pull side every binding consumes ([`Stream`], its [`StreamControl`],
//! [`Next`], the [`Events`] iterator), and where the contract is enforced; plus
//! [`compact`], the blocking wrapper over `Agent::compact` on the agent's worker.

use std::collections::VecDeque;
use std::future::Future;
use std::mem::ManuallyDrop;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Receiver, RecvTimeoutError, TryRecvError};
use futures_util::FutureExt;
use panto::{
    Agent, Answers, CancellationToken, Checkpoint, CompactOptions, Compaction, Error, Event, Input,
    NotSteered, TokenCount, ToolOutput, TurnControl, TurnOptions,
};

use crate::handoff::{Forward, Item, Pump, Shared, TurnFuture};
use crate::pool::{fork_generation, forked_error, on_worker, worker_for, ACTIVE};
use crate::queue::{queue, QueueRx};

/// What [`Stream::next_timeout`] saw.
#[derive(Debug, Clone, PartialEq)]
pub enum Next {
    /// The next event.
    Event(Event),
    /// The stream is exhausted (`message_complete` was delivered).
    Done,
    /// Nothing arrived within the timeout; the stream goes on.
    Pending,
}

/// Cancels a stream and answers its host-tool calls from any thread. Cheap to clone.
#[derive(Clone)]
pub struct StreamControl {
    control: TurnControl,
    shared: Arc<Shared>,
    /// The fork generation the stream was started in (see `fork_generation`).
    generation: u64,
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
    /// then fails with `cancelled`. Once `message_complete` was delivered it changes
    /// nothing (and `is_cancelled` stays false).
    pub fn cancel(&self) {
        // In a forked child there is no turn to cancel, and the outbox's lock may have
        // been held by a thread that does not exist here.
        if self.shared.completed.load(Ordering::SeqCst) || self.from_parent_process() {
            return;
        }
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

    /// Whether the turn was cancelled through `cancel` (a `cancel` after
    /// `message_complete` was delivered changes nothing, so this stays false).
    pub fn is_cancelled(&self) -> bool {
        self.shared.cancelled.load(Ordering::SeqCst)
    }

    /// True when the stream was started before this process forked: its turn ran on
    /// threads that do not exist here, so every call on it fails (a `config` error) and
    /// dropping it frees nothing that could wait for them.
    pub fn from_parent_process(&self) -> bool {
        self.generation != fork_generation()
    }

    /// The stream's readiness descriptor, as [`Stream::readiness_fd`] (same descriptor):
    /// for a thread that polls while another owns the stream. It belongs to the stream
    /// and is closed when the stream is dropped, whatever clones of this handle remain;
    /// asking after that is an error (`NotConnected`).
    /// In a forked child, a stream of the parent has none (`from_parent_process`).
    #[cfg(unix)]
    pub fn readiness_fd(&self) -> std::io::Result<std::os::fd::RawFd> {
        if self.from_parent_process() {
            // Its lock may have been held by a thread that does not exist here.
            return Err(std::io::Error::other(forked_error("stream").message));
        }
        self.shared.readiness_fd()
    }

    /// Makes the stream report its readiness to `set` under `token` instead of through a
    /// descriptor of its own (see [`ReadySet`](crate::ReadySet)): from now on, where its
    /// descriptor would turn readable, its token is queued in the set — at once if it
    /// has something to report already. Once per stream, and not with
    /// `readiness_fd` (an `AlreadyExists` error either way); an error after the stream
    /// was dropped (`NotConnected`) and in a forked child for a stream of the parent.
    #[cfg(unix)]
    pub fn attach(&self, set: &crate::ReadySet, token: u64) -> std::io::Result<()> {
        if self.from_parent_process() {
            return Err(std::io::Error::other(forked_error("stream").message));
        }
        self.shared.attach(set, token)
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
        if self.from_parent_process() {
            return Err(forked_error("stream"));
        }
        self.control.host.submit(call_id, output, is_error)
    }

    /// The turn at its latest step boundary (see `panto::TurnControl::checkpoint`):
    /// once the consumer has been given the `tool_result` of a call, or the first event
    /// after a response's `message_end`, the checkpoint includes that result or that
    /// response. `None` before the turn started, and in a forked child for a stream of
    /// the parent.
    pub fn checkpoint(&self) -> Option<Checkpoint> {
        if self.from_parent_process() {
            return None;
        }
        self.control.checkpoint()
    }

    /// Queues a user message into the running turn, from any thread (see
    /// `panto::TurnControl::steer`): delivered at the next step boundary with a
    /// `steering_delivered` event. After the turn ended the input is given back in the
    /// error.
    pub fn steer(&self, input: impl Into<Input>) -> Result<(), NotSteered> {
        let input = input.into();
        if self.from_parent_process() {
            return Err(NotSteered {
                error: Box::new(forked_error("stream")),
                input,
            });
        }
        self.control.steer(input)
    }

    /// The steering messages the turn did not deliver because it ended first (failed,
    /// cancelled, paused or reached a limit); each is given once.
    pub fn take_undelivered(&self) -> Vec<Input> {
        if self.from_parent_process() {
            return Vec::new();
        }
        self.control.take_undelivered()
    }

    /// Answers a host-tool call with text and image parts (see
    /// `panto::HostToolResults::submit_parts`); otherwise as `submit_tool_result`.
    pub fn submit_tool_parts(
        &self,
        call_id: &str,
        parts: Vec<panto::Block>,
        is_error: bool,
    ) -> Result<(), Error> {
        if self.from_parent_process() {
            return Err(forked_error("stream"));
        }
        self.control.host.submit_parts(call_id, parts, is_error)
    }
}

/// What [`Stream::settle`] found.
enum Settled {
    /// Nothing: the readiness descriptor is unreadable now.
    Empty,
    /// What arrived while the consumer looked.
    Took(Received),
    /// A cancel arrived while the consumer looked.
    Cancelled,
}

/// Rounds of [`Stream::settle`] before it gives up (each normally ends it).
const SETTLE_ROUNDS: usize = 4;

enum State {
    Active,
    Completed,
    Failed(Error),
}

/// Where a stream stands in the contract ([`Stream::state`]): what its consumer has been
/// told, so a binding need not keep its own copy.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamState {
    /// Not over: events (perhaps already read ahead), then the end or a failure, follow.
    Running,
    /// `message_complete` was delivered: every later `next` reports exhausted.
    Done,
    /// The stream failed (or was cancelled or closed before `message_complete` was
    /// delivered): every later `next` fails again with this error.
    Failed(Error),
}

/// What a stream took from its queue but has not delivered yet: an item, or the queue's
/// end (a disconnect, which `deliver` turns into `incomplete` or `cancelled`).
type Received = Result<Item, RecvTimeoutError>;

/// One turn as a pull stream. `Send`; see the crate docs for the contract.
pub struct Stream {
    events: Option<QueueRx<Item>>,
    /// Disconnected when the turn's task has ended (completed, failed or dropped).
    /// Never dropped in a forked child (see `release`).
    task_done: ManuallyDrop<Receiver<()>>,
    control: StreamControl,
    state: State,
    /// The burst read ahead by `drain_ready` / `wait_ready`, delivered by `next` and
    /// `try_next` one at a time with the same checks as anything else (a cancel still wins
    /// over what waits here). Nothing follows an end or a failure in it.
    ahead: VecDeque<Received>,
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
    if on_worker() {
        return Err(Error::config(
            "compact: called on a panto worker thread, which would wait for itself",
        ));
    }
    let worker = worker_for(agent)?;
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

/// Calls one tool of `agent`'s MCP servers outside a turn (see
/// `panto::Agent::call_mcp_tool`), blocking the calling thread until it answers. The
/// call runs on the agent's worker thread, like its turns, and does not reserve the
/// agent (no `busy`). Cancelling `cancel` from another thread ends it with a `cancelled`
/// error. Must not be called from a panto worker thread (a `config` error rather than a
/// deadlock).
pub fn call_mcp_tool(
    agent: &Agent,
    name: &str,
    arguments: serde_json::Value,
    cancel: &CancellationToken,
) -> Result<ToolOutput, Error> {
    if on_worker() {
        return Err(Error::config(
            "call_mcp_tool: called on a panto worker thread, which would wait for itself",
        ));
    }
    if cancel.is_cancelled() {
        return Err(Error::cancelled());
    }
    let worker = worker_for(agent)?;
    let (tx, rx) = bounded::<Result<ToolOutput, Error>>(1);
    let agent = agent.clone();
    let name = name.to_owned();
    let cancel = cancel.clone();
    drop(worker.spawn(async move {
        let run = AssertUnwindSafe(agent.call_mcp_tool(&name, arguments, &cancel))
            .catch_unwind()
            .await;
        let result = run.unwrap_or_else(|_| Err(Error::internal("the MCP tool call panicked")));
        let _ = tx.send(result);
    }));
    rx.recv()
        .unwrap_or_else(|_| Err(Error::internal("the MCP tool call ended without a result")))
}

/// The tokens of the request a turn of `agent` with `input` would send now (see
/// `panto::Agent::count_tokens`: the provider's count where it has a count endpoint,
/// else an estimate marked `estimated`), blocking the calling thread until it is known.
/// The count request runs on the agent's worker thread, like its turns; must not be
/// called from a panto worker thread (a `config` error rather than a deadlock).
pub fn count_tokens(agent: &Agent, input: impl Into<Input>) -> Result<TokenCount, Error> {
    if on_worker() {
        return Err(Error::config(
            "count_tokens: called on a panto worker thread, which would wait for itself",
        ));
    }
    let worker = worker_for(agent)?;
    let (tx, rx) = bounded::<Result<TokenCount, Error>>(1);
    let agent = agent.clone();
    let input = input.into();
    drop(worker.spawn(async move {
        let run = AssertUnwindSafe(agent.count_tokens(input))
            .catch_unwind()
            .await;
        let result = run.unwrap_or_else(|_| Err(Error::internal("the token count panicked")));
        let _ = tx.send(result);
    }));
    rx.recv()
        .unwrap_or_else(|_| Err(Error::internal("the token count ended without a result")))
}

/// `agent.stream(input)`: starts a turn as a pull [`Stream`].
/// The input is text (`&str`, `String`) or a [`panto::Input`] of text and attachments.
pub trait AgentStreamExt {
    /// Starts a turn on `input` (reserving the agent: `busy` if it has a turn running;
    /// `config` for an input past its limits).
    fn stream(&self, input: impl Into<Input>) -> Result<Stream, Error>;
    /// [`AgentStreamExt::stream`] with this turn's options (model, reasoning, …).
    fn stream_with(&self, input: impl Into<Input>, options: TurnOptions) -> Result<Stream, Error>;
}

impl AgentStreamExt for Agent {
    fn stream(&self, input: impl Into<Input>) -> Result<Stream, Error> {
        Stream::start(self, Begin::Run(input.into(), TurnOptions::default()))
    }
    fn stream_with(&self, input: impl Into<Input>, options: TurnOptions) -> Result<Stream, Error> {
        Stream::start(self, Begin::Run(input.into(), options))
    }
}

/// Continues the turn `checkpoint` holds as a pull [`Stream`], with `answers` to its
/// deferred calls (see `panto::Agent::resume`: the agent's history becomes the
/// checkpoint's conversation; a response the checkpoint holds is never requested
/// again; calls without a result run again). `busy` if the agent has a turn running;
/// a `config` error, from this call, for answers that do not fit the checkpoint or a
/// checkpoint past the agent's limits.
pub fn resume(agent: &Agent, checkpoint: Checkpoint, answers: Answers) -> Result<Stream, Error> {
    Stream::start(agent, Begin::Resume(Box::new((checkpoint, answers))))
}

/// How a stream's turn begins.
enum Begin {
    Run(Input, TurnOptions),
    Resume(Box<(Checkpoint, Answers)>),
}

impl Stream {
    fn start(agent: &Agent, begin: Begin) -> Result<Stream, Error> {
        let worker = worker_for(agent)?;
        match &begin {
            Begin::Run(input, options) => {
                // An input past the configured limits is refused by the call that
                // starts the turn (the turn would refuse it first thing anyway).
                agent.check_input(input)?;
                // So is a turn's output schema that is not one the provider can take.
                agent.turn_output(options)?;
            }
            Begin::Resume(resume) => agent.check_resume(&resume.0, &resume.1)?,
        }
        // Reserve on the caller's thread so `busy` is reported synchronously.
        let slot = agent.reserve()?;
        let (tx, rx) = queue::<Item>(agent.config().queue_capacity);
        let (done_tx, done_rx) = bounded::<()>(0);
        let shared = Arc::new(Shared::new(tx));
        let control = StreamControl {
            control: TurnControl::default(),
            shared: shared.clone(),
            generation: fork_generation(),
        };
        let turn_control = control.control.clone();
        let mut forward = Forward {
            shared: shared.clone(),
        };
        // Made on the worker (see `Pump::start`): the closure holds what the turn starts
        // from, the future it makes is several kilobytes.
        let make = move || -> TurnFuture {
            Box::pin(async move {
                let run = match begin {
                    Begin::Run(input, options) => {
                        AssertUnwindSafe(slot.run(input, &mut forward, &turn_control, options))
                            .catch_unwind()
                            .await
                    }
                    Begin::Resume(resume) => {
                        let (checkpoint, answers) = *resume;
                        AssertUnwindSafe(slot.resume(
                            checkpoint,
                            answers,
                            &mut forward,
                            &turn_control,
                        ))
                        .catch_unwind()
                        .await
                    }
                };
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
            })
        };
        ACTIVE.fetch_add(1, Ordering::SeqCst);
        let pump = Pump {
            start: Some(Box::new(make)),
            turn: None,
            shared,
            _task_done: done_tx,
            started: false,
            counted: false,
        };
        // The worker runtimes live as long as the process: the task always runs.
        drop(worker.spawn(pump));
        Ok(Stream {
            events: Some(rx),
            task_done: ManuallyDrop::new(done_rx),
            control,
            state: State::Active,
            ahead: VecDeque::new(),
        })
    }

    /// The stream's readiness descriptor, for `poll`, `epoll`, `select`, kqueue or an
    /// event loop's reader: readable while [`Stream::try_next`] has something to report
    /// (an event, the end, a failure, a cancel), made unreadable by the `try_next` (or
    /// any other call of this stream) that finds nothing. Level-triggered:
    ///
    /// - It becomes readable when the worker hands events over, when the turn ends or
    ///   fails, on [`StreamControl::cancel`] and on [`Stream::close`]. The worker hands a
    ///   stream's events over in bursts, at the latest `FLUSH_AFTER` after the first of
    ///   them was produced, or about 2 ms on a worker busy with many streams (see the
    ///   crate docs, "Hand-off").
    /// - It stays readable until a call finds the stream empty: after each readiness,
    ///   take events with `try_next` until it returns [`Next::Pending`]. (It may stay
    ///   readable after the last ready event was taken, until that `Pending`.)
    /// - Once the stream is over — `message_complete` delivered, a failure, a cancel —
    ///   it stays readable for good: `try_next` answers `Done` or the error at once.
    /// - Never read, write or close it: the stream does. It is non-blocking and
    ///   close-on-exec (an eventfd on Linux and Android, a pipe's read end elsewhere),
    ///   made on the first call (a stream nobody asks pays nothing) and the same
    ///   afterwards. Dropping the stream makes it readable — a `poll` already waiting on
    ///   it returns — and closes it, so remove it from an epoll set or event loop first.
    ///
    /// Fails only if no descriptor can be made (the process is out of them).
    #[cfg(unix)]
    pub fn readiness_fd(&self) -> std::io::Result<std::os::fd::RawFd> {
        self.control.readiness_fd()
    }

    /// Reports this stream's readiness to `set` under `token`: one descriptor for many
    /// streams (see [`ReadySet`](crate::ReadySet) and [`StreamControl::attach`]).
    #[cfg(unix)]
    pub fn attach(&self, set: &crate::ReadySet, token: u64) -> std::io::Result<()> {
        self.control.attach(set, token)
    }

    /// The next event, waiting without a thread: `stream.next_async().await` gives what
    /// [`Stream::next`] would — `Ok(Some(ev))`, `Ok(None)` once exhausted, or the
    /// sticky error — but, when nothing is ready, leaves the task's waker with the
    /// stream and returns `Pending` instead of parking the thread. Whoever hands events
    /// over, ends the turn or cancels it wakes the task. Works on any executor (the turn
    /// runs on the adapter's own workers, never on the caller's runtime); many streams
    /// on one single-threaded runtime wait together. Dropping the future before it
    /// finishes (a `select!`, a timeout) consumes nothing.
    pub fn next_async(&mut self) -> NextEvent<'_> {
        NextEvent {
            stream: self,
            registered: false,
        }
    }

    /// The poll behind [`Stream::next_async`] and the `futures` `Stream` impl: the next
    /// event if one is ready, else registers `cx`'s waker and returns `Pending`.
    pub fn poll_next_event(&mut self, cx: &mut Context<'_>) -> Poll<Result<Option<Event>, Error>> {
        // Woken perhaps by a hand-over that left this consumer the other streams' wakes
        // (not in a forked child for a stream of the parent: its lock may be held by a
        // thread gone there).
        if self.control.shared.waiter.relayed.load(Ordering::Relaxed)
            && !self.control.from_parent_process()
        {
            self.control.shared.waiter.pass_on_relay();
        }
        let ready = |next: Result<Next, Error>| match next {
            Ok(Next::Event(ev)) => Some(Ok(Some(ev))),
            Ok(Next::Done) => Some(Ok(None)),
            Ok(Next::Pending) => None,
            Err(e) => Some(Err(e)),
        };
        if let Some(r) = ready(self.try_next()) {
            // Woken (or never waiting): nobody waits any more. (Not in a forked child
            // for a stream of the parent: the lock may be held by a thread gone here.)
            if self.control.shared.waiter.waiting.load(Ordering::Relaxed)
                && !self.control.from_parent_process()
            {
                self.control.shared.waiter.done_waiting();
            }
            return Poll::Ready(r);
        }
        // Register, then look again: an event handed over in between either is seen now
        // or finds the waker (the fences in `register_task` and `Waiter::wake`).
        let waiter = &self.control.shared.waiter;
        waiter.register_task(cx.waker());
        match ready(self.try_next()) {
            Some(r) => {
                self.control.shared.waiter.done_waiting();
                Poll::Ready(r)
            }
            None => Poll::Pending,
        }
    }

    /// A handle to cancel this stream or answer host tools from other threads.
    pub fn control(&self) -> StreamControl {
        self.control.clone()
    }

    /// Cancels the turn (see [`StreamControl::cancel`]).
    pub fn cancel(&self) {
        self.control.cancel();
    }

    /// The turn at its latest step boundary (see [`StreamControl::checkpoint`]).
    pub fn checkpoint(&self) -> Option<Checkpoint> {
        self.control.checkpoint()
    }

    /// Queues a steering message into the turn (see [`StreamControl::steer`]).
    pub fn steer(&self, input: impl Into<Input>) -> Result<(), NotSteered> {
        self.control.steer(input)
    }

    /// The steering messages the turn did not deliver (see
    /// [`StreamControl::take_undelivered`]).
    pub fn take_undelivered(&self) -> Vec<Input> {
        self.control.take_undelivered()
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
        self.check_process();
        match &self.state {
            State::Completed => return Ok(Next::Done),
            State::Failed(e) => return Err(e.clone()),
            State::Active => {}
        }
        if self.control.is_cancelled() {
            return Err(self.fail(Error::cancelled()));
        }
        if let Some(received) = self.pop_ahead() {
            return self.deliver(received);
        }
        let Some(events) = &self.events else {
            return Err(self.fail(Error::internal("the stream queue is gone")));
        };
        let shared = &self.control.shared;
        let received = match events.try_recv() {
            Ok(item) => Ok(item),
            Err(TryRecvError::Disconnected) => Err(RecvTimeoutError::Disconnected),
            Err(TryRecvError::Empty) => {
                let flushed = shared.outbox_len.load(Ordering::SeqCst) != 0 && {
                    shared.flush_for_consumer();
                    true
                };
                match flushed.then(|| events.try_recv()) {
                    Some(Ok(item)) => Ok(item),
                    Some(Err(TryRecvError::Disconnected)) => Err(RecvTimeoutError::Disconnected),
                    None | Some(Err(TryRecvError::Empty)) => match self.settle() {
                        Settled::Took(received) => received,
                        Settled::Empty => return Ok(Next::Pending),
                        Settled::Cancelled => return Err(self.fail(Error::cancelled())),
                    },
                }
            }
        };
        self.deliver(received)
    }

    /// Nothing was found to report: makes the readiness descriptor unreadable before the
    /// caller says so — or, when something arrived meanwhile (the descriptor then stays
    /// readable, its edge already spent), takes it. Saying `Pending` with the
    /// descriptor left readable would strand an edge-triggered poller.
    fn settle(&self) -> Settled {
        let shared = &self.control.shared;
        // Each round that does not clear found news under the outbox lock, which the
        // flush then hands over; a bound keeps a state that cannot make progress (none
        // is known) from spinning.
        for _ in 0..SETTLE_ROUNDS {
            if shared.clear_ready_if_empty() {
                return Settled::Empty;
            }
            if self.control.is_cancelled() {
                return Settled::Cancelled;
            }
            shared.flush_for_consumer();
            if let Some(events) = &self.events {
                match events.try_recv() {
                    Ok(item) => return Settled::Took(Ok(item)),
                    Err(TryRecvError::Disconnected) => {
                        return Settled::Took(Err(RecvTimeoutError::Disconnected))
                    }
                    Err(TryRecvError::Empty) => {}
                }
            }
        }
        Settled::Empty
    }

    /// The next item read ahead, if any (and whether any is left, for the readiness
    /// descriptor).
    fn pop_ahead(&mut self) -> Option<Received> {
        let received = self.ahead.pop_front()?;
        if self.ahead.is_empty() {
            self.control
                .shared
                .ahead_held
                .store(false, Ordering::SeqCst);
        }
        Some(received)
    }

    /// The events as an `Iterator` of `Result`s: each event, then the end — or a failure
    /// once as `Err`, then the end (the error stays available from [`Stream::next`]).
    pub fn events(&mut self) -> Events<'_> {
        Events { stream: self }
    }

    /// Where the stream stands: `Running` until its consumer has been given
    /// `message_complete` (then `Done`) or a failure (then `Failed`, with the error every
    /// later call repeats). A cancel that will win shows at once as
    /// `Failed(cancelled)`. Never waits.
    pub fn state(&self) -> StreamState {
        if self.control.from_parent_process() && matches!(self.state, State::Active) {
            return StreamState::Failed(forked_error("stream"));
        }
        match &self.state {
            State::Completed => StreamState::Done,
            State::Failed(e) => StreamState::Failed(e.clone()),
            State::Active if self.control.is_cancelled() => StreamState::Failed(Error::cancelled()),
            State::Active => StreamState::Running,
        }
    }

    /// Reads ahead, never waiting: takes what is ready now (the rest of the current
    /// burst, up to the end or a failure) into the stream's own buffer until it holds
    /// `max` items, and returns how many it holds. They are delivered by `next` /
    /// `try_next` one at a time, with every check of the contract applied then: a cancel
    /// still wins over events read ahead, and an end or a failure read ahead is
    /// reported only after the events before it. For bindings that take a whole burst
    /// while they hold a lock they would rather not hold per event (Python's GIL).
    pub fn drain_ready(&mut self, max: usize) -> usize {
        self.check_process();
        if !matches!(self.state, State::Active) || self.control.is_cancelled() {
            return self.ahead.len();
        }
        let shared = &self.control.shared;
        let mut took = false;
        let mut ran_dry = false;
        while self.ahead.len() < max && !self.ahead_ended() {
            let Some(events) = &self.events else {
                break;
            };
            let received = match events.try_recv() {
                Ok(item) => Ok(item),
                Err(TryRecvError::Disconnected) => Err(RecvTimeoutError::Disconnected),
                Err(TryRecvError::Empty) => {
                    if shared.outbox_len.load(Ordering::SeqCst) == 0 {
                        ran_dry = true;
                        break;
                    }
                    shared.flush_for_consumer();
                    match events.try_recv() {
                        Ok(item) => Ok(item),
                        Err(TryRecvError::Disconnected) => Err(RecvTimeoutError::Disconnected),
                        Err(TryRecvError::Empty) => {
                            ran_dry = true;
                            break;
                        }
                    }
                }
            };
            took |= received.is_ok();
            self.ahead.push_back(received);
        }
        if self.ahead.is_empty() && ran_dry {
            if let Settled::Took(received) = self.settle() {
                took |= received.is_ok();
                self.ahead.push_back(received);
                // The rest of what arrived with it is taken by the next call.
            }
        }
        if !self.ahead.is_empty() {
            self.control.shared.ahead_held.store(true, Ordering::SeqCst);
        }
        if took {
            self.wake_producer_at_low_water();
        }
        self.ahead.len()
    }

    /// Waits up to `timeout` until the stream has something to report (an event, the
    /// end, a failure, a cancel), then reads the rest of the burst ahead like
    /// [`Stream::drain_ready`]. True when [`Stream::try_next`] would now answer something
    /// other than `Next::Pending`. A zero timeout takes what is ready, like `try_next`.
    /// Delivers nothing itself.
    pub fn wait_ready(&mut self, timeout: Duration, max: usize) -> bool {
        self.check_process();
        if self.has_ready() {
            return true;
        }
        if self.events.is_none() {
            // Cannot happen while active; `next` reports it as an internal error.
            return true;
        }
        match self.receive(Instant::now().checked_add(timeout)) {
            Err(RecvTimeoutError::Timeout) => self.control.is_cancelled(),
            received => {
                self.ahead.push_back(received);
                self.drain_ready(max.max(1));
                true
            }
        }
    }

    /// Whether [`Stream::try_next`] would now answer something other than
    /// `Next::Pending`, never waiting: for a binding that hands out an event and says in
    /// the same call whether to ask again at once (`panto_next_events`' `more`). Items
    /// already in the queue answer true without being moved; only when it is empty does
    /// this look further (the outbox, the end), and then, answering false, it leaves the
    /// readiness descriptor or ready set cleared as a `try_next` that answered `Pending`
    /// does: the next arrival is reported, so the caller may go straight to waiting.
    pub fn ready_now(&mut self) -> bool {
        self.check_process();
        if self.has_ready() || self.events.as_ref().is_some_and(|q| !q.is_empty()) {
            return true;
        }
        self.wait_ready(Duration::ZERO, 1)
    }

    /// Something to report without waiting: the stream is over, cancelled, or holds
    /// items read ahead.
    fn has_ready(&self) -> bool {
        !matches!(self.state, State::Active)
            || self.control.is_cancelled()
            || !self.ahead.is_empty()
    }

    /// The burst read ahead ends the stream (nothing may be read after it).
    fn ahead_ended(&self) -> bool {
        match self.ahead.back() {
            Some(Ok(Ok(ev))) => ev.is_terminal(),
            Some(_) => true,
            None => false,
        }
    }

    fn next_deadline(&mut self, deadline: Option<Instant>) -> Result<Next, Error> {
        self.check_process();
        match &self.state {
            State::Completed => return Ok(Next::Done),
            State::Failed(e) => return Err(e.clone()),
            State::Active => {}
        }
        if self.control.is_cancelled() {
            return Err(self.fail(Error::cancelled()));
        }
        if let Some(received) = self.pop_ahead() {
            return self.deliver(received);
        }
        if self.events.is_none() {
            return Err(self.fail(Error::internal("the stream queue is gone")));
        }
        let received = self.receive(deadline);
        self.deliver(received)
    }

    /// Takes the next item from the queue, waiting until `deadline` (`None`: no limit).
    fn receive(&self, deadline: Option<Instant>) -> Received {
        let Some(events) = &self.events else {
            return Err(RecvTimeoutError::Disconnected);
        };
        let shared = &self.control.shared;
        // Fast path: an event is waiting (the worker hands them over in bursts).
        match events.try_recv() {
            Ok(item) => return Ok(item),
            Err(TryRecvError::Disconnected) => return Err(RecvTimeoutError::Disconnected),
            Err(TryRecvError::Empty) => {}
        }
        // From here the consumer waits: the worker hands the events over in bursts,
        // bounded in time (see `handoff`). Taking them from the outbox while the worker
        // produces them (one or two at a time, each under its lock) would keep the
        // consumer chasing the producer event by event; between the turn's polls,
        // though, what waits in the outbox is taken now rather than at the worker's
        // next flush. A caller that will not wait takes whatever is there.
        shared.waiter.waiting.store(true, Ordering::SeqCst);
        let no_wait = deadline.is_some_and(|d| d <= Instant::now());
        if shared.outbox_len.load(Ordering::SeqCst) > 0
            && (no_wait || !shared.producer_running.load(Ordering::SeqCst))
        {
            shared.flush_for_consumer();
        }
        if no_wait {
            // A caller that will not wait is told "nothing" only with the descriptor
            // unreadable (see `settle`).
            let settled = self.settle();
            shared.waiter.waiting.store(false, Ordering::SeqCst);
            return match settled {
                Settled::Took(received) => received,
                // A cancel is seen by the caller's next check (`deliver`, `wait_ready`).
                Settled::Empty | Settled::Cancelled => Err(RecvTimeoutError::Timeout),
            };
        }
        shared.clear_ready_if_empty();
        let received = shared.waiter.wait(events, deadline);
        shared.waiter.waiting.store(false, Ordering::SeqCst);
        received
    }

    /// A turn parked on the full queue is woken once the queue has drained to half, not
    /// at every pop: waking it per event would cost a thread wake-up per event.
    fn wake_producer_at_low_water(&self) {
        let shared = &self.control.shared;
        if shared.producer_waiting.load(Ordering::SeqCst) {
            let low_water = self
                .events
                .as_ref()
                .is_none_or(|q| q.len() <= q.capacity() / 2);
            if low_water {
                shared.flush_for_consumer();
            }
        }
    }

    /// Applies the contract to what was received (from the queue or read ahead): the one
    /// place that decides what the consumer is told.
    fn deliver(&mut self, received: Received) -> Result<Next, Error> {
        // A cancel that raced with an event wins: no event is delivered after cancel().
        if self.control.is_cancelled() {
            return Err(self.fail(Error::cancelled()));
        }
        if received.is_ok() {
            self.wake_producer_at_low_water();
        }
        match received {
            Ok(Ok(ev)) => {
                if ev.is_terminal() {
                    self.control.shared.completed.store(true, Ordering::SeqCst);
                    self.state = State::Completed;
                    self.release();
                }
                Ok(Next::Event(ev))
            }
            Ok(Err(e)) => Err(self.fail(e)),
            Err(RecvTimeoutError::Timeout) if self.control.is_cancelled() => {
                Err(self.fail(Error::cancelled()))
            }
            Err(RecvTimeoutError::Timeout) => Ok(Next::Pending),
            Err(RecvTimeoutError::Disconnected) => Err(self.fail(Error::incomplete(
                "the stream's turn ended before message_complete",
            ))),
        }
    }

    /// Ends the stream now, waiting for its turn to stop: a stream that has not
    /// delivered `message_complete` is cancelled and fails `cancelled` from now on (events
    /// read ahead are dropped); a completed or failed one keeps its state. Idempotent.
    /// What dropping the stream does, for bindings that keep the stream's state
    /// queryable after closing it.
    pub fn close(&mut self) {
        self.check_process();
        if matches!(self.state, State::Active) {
            self.control.cancel();
            self.fail(Error::cancelled());
        } else {
            self.release();
        }
    }

    /// In a forked child, a stream of the parent fails for good (before anything takes
    /// a lock a thread of the parent may have held): its turn is not running here.
    fn check_process(&mut self) {
        if matches!(self.state, State::Active) && self.control.from_parent_process() {
            self.state = State::Failed(forked_error("stream"));
            self.ahead.clear();
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
        if self.control.from_parent_process() {
            // Its turn's task and queue belong to threads that do not exist in this
            // process: waiting for the task would wait forever, and closing the queue
            // could take a lock one of them held at fork(). Leave them be.
            if let Some(events) = self.events.take() {
                std::mem::forget(events);
            }
            self.ahead.clear();
            return;
        }
        if !matches!(self.state, State::Completed) {
            self.control.control.cancel.cancel();
        }
        {
            let mut outbox = self.control.shared.outbox();
            outbox.closed = true;
            outbox.items.clear();
            outbox.len.store(0, Ordering::SeqCst);
            // Over: the end (or the failure) is what every later call reports, at once.
            outbox.ready.set();
            if let Some(w) = outbox.producer.take() {
                w.wake();
            }
        }
        self.events.take();
        self.ahead.clear();
        self.control
            .shared
            .ahead_held
            .store(false, Ordering::SeqCst);
        // On a worker thread (a stream dropped inside another turn's tool), waiting for
        // a task that may need this very thread would never end; the cancel suffices.
        if !on_worker() {
            let _ = self.task_done.recv();
        }
    }
}

/// The future of [`Stream::next_async`].
pub struct NextEvent<'a> {
    stream: &'a mut Stream,
    registered: bool,
}

impl std::fmt::Debug for NextEvent<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NextEvent").finish_non_exhaustive()
    }
}

impl Future for NextEvent<'_> {
    type Output = Result<Option<Event>, Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let r = this.stream.poll_next_event(cx);
        this.registered = r.is_pending();
        r
    }
}

impl Drop for NextEvent<'_> {
    fn drop(&mut self) {
        if self.registered && !self.stream.control.from_parent_process() {
            // Nobody waits any more: no stale waker is left with the stream.
            self.stream.control.shared.waiter.done_waiting();
        }
    }
}

/// The events as an async stream: each event, then the end — or a failure once as
/// `Err`, then the end (like [`Stream::events`]); waits like [`Stream::next_async`].
impl futures_util::Stream for Stream {
    type Item = Result<Event, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        let already_failed = matches!(this.state, State::Failed(_));
        match this.poll_next_event(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Ok(Some(ev))) => Poll::Ready(Some(Ok(ev))),
            Poll::Ready(Ok(None)) => Poll::Ready(None),
            Poll::Ready(Err(_)) if already_failed => Poll::Ready(None),
            Poll::Ready(Err(e)) => Poll::Ready(Some(Err(e))),
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
        if !self.control.from_parent_process() {
            self.control.shared.waiter.done_waiting();
            self.control.shared.close_ready();
            // SAFETY: dropped once, here, and never used again.
            unsafe { ManuallyDrop::drop(&mut self.task_done) };
        }
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
