//! The hand-off: how a turn's events get from its worker to its consumer. The turn's
//! receiver (`Forward`) appends each event to the stream's outbox without ever blocking;
//! the outbox goes to the stream's bounded queue in bursts (`Outbox::flush`), bounded in
//! time rather than by the turn's polls:
//!
//! - when the worker is about to go idle (`flush_pending`, the runtime's
//!   `on_thread_park` hook): a stream whose poll ended with events in its outbox is on
//!   the worker's list of pending outboxes, and the list is emptied before the thread
//!   sleeps;
//! - when the oldest waiting event is `FLUSH_AFTER` old, checked every `CLOCK_EVERY`
//!   events of a turn being polled and at the end of every poll on the worker (for
//!   every stream on its list), so a worker kept busy by other streams still hands this
//!   one's events over;
//! - at `MAX_BATCH` events, at the terminal event, and at the end of the first poll
//!   that produced any (the time to the first event is not traded for batching).
//!
//! A worker busy with many streams (at least `LINGER_TURNS` turns, and idle with events
//! to hand over again within `BUSY_GAP`) lingers instead (see [`Linger`]): its
//! `flusher` task hands every outbox over once the oldest waiting event is `LINGER`
//! old, the first burst and the terminal event included, so each consumer is woken
//! once per millisecond or so rather than once per event.
//!
//! A consumer that ran dry parks on its `Waiter` (or leaves its task's waker there) and
//! is woken by whoever fills or ends the queue. A full outbox parks the turn (not the
//! worker) until the consumer pops.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use crossbeam_channel::{RecvTimeoutError, Sender, TryRecvError, TrySendError};
use panto::{Error, Event, Flow, Receiver};

use crate::pool::ACTIVE;
use crate::queue::{QueueRx, QueueTx};
use crate::readiness::ReadyFd;
#[cfg(unix)]
use crate::readiness::{closed_error, member_error, Readiness};

pub(crate) type Item = Result<Event, Error>;

/// Most events waiting in a stream's outbox before they go to the queue together, and
/// the point at which a turn whose queue is full stops reading the network.
pub(crate) const MAX_BATCH: usize = 64;

/// Longest an event waits in its stream's outbox while the worker stays busy (an idle
/// worker hands everything over before it sleeps). A wake-up costs the worker a system
/// call and the consumer a context switch: once per event that costs more than
/// decoding the chunk, once per poll of the turn (hyper feeds the body about ten chunks
/// at a time) it was still a third of the pull stream's CPU. Once per 100 µs is noise,
/// and 100 µs is far below anything a reader of the stream can tell.
pub(crate) const FLUSH_AFTER: Duration = Duration::from_micros(100);

/// How many events a turn being polled pushes between two looks at the clock (a poll
/// may decode up to 128 chunks; a clock read per event would cost more than it saves).
const CLOCK_EVERY: usize = 8;

/// A stream whose outbox holds events while its turn waits: on its worker's list until
/// the worker goes idle or the oldest of them is `FLUSH_AFTER` old.
struct Listed {
    since: Instant,
    shared: Arc<Shared>,
}

thread_local! {
    /// The streams of this worker with events in their outbox, oldest first.
    static PENDING: RefCell<VecDeque<Listed>> = const { RefCell::new(VecDeque::new()) };
}

/// The worker is about to go idle: hands over every outbox on its list — unless the
/// worker is busy with many streams, when its flusher hands them over within `LINGER`
/// (see [`Linger`]).
pub(crate) fn flush_pending() {
    if !any_pending() || LINGER_STATE.with(|l| l.borrow_mut().lingers(Instant::now())) {
        return;
    }
    hand_over_all();
}

/// Hands over every outbox on this worker's list, writing the ready sets their reports
/// put off once per `COALESCE_AT_MOST` of them.
fn hand_over_all() {
    let listed = PENDING.with(|p| std::mem::take(&mut *p.borrow_mut()));
    if listed.is_empty() {
        return;
    }
    // One ready-set descriptor write per `COALESCE_AT_MOST` of them, at the end of each
    // such run (see `ReadySet`'s docs, "Coalescing").
    let mut listed = listed.into_iter().peekable();
    while listed.peek().is_some() {
        #[cfg(unix)]
        let _coalesce = crate::ready_set::Deferred::begin();
        let _wakes = WakeLater::begin();
        for l in listed.by_ref().take(COALESCE_AT_MOST) {
            l.shared.flush_listed();
        }
    }
}

thread_local! {
    /// Whether a hand-over on this thread gathers the task wakers it takes (`WakeLater`).
    static GATHERING: Cell<bool> = const { Cell::new(false) };
    /// The task wakers a hand-over took, and their streams' waiters.
    static LATER: RefCell<Gathered> = const {
        RefCell::new(Gathered { wakers: Vec::new(), waiters: Vec::new() })
    };
    /// This worker's relays not yet known to be passed on, oldest first (see `Relay`).
    static RELAYS: RefCell<VecDeque<(Instant, Arc<Relay>)>> = const { RefCell::new(VecDeque::new()) };
}

/// What a hand-over in progress gathered (see `WakeLater`).
struct Gathered {
    wakers: Vec<Waker>,
    /// `waiters[i]` is where `wakers[i]` was taken from; the room is kept.
    waiters: Vec<Arc<Waiter>>,
}

/// A hand-over of many outboxes wakes their consumers' tasks together, at its end, and
/// from another thread only one of them: the rest are passed on by that consumer.
///
/// Waking a task from another thread costs its runtime a wake-up (tokio writes the
/// runtime's eventfd), and the woken thread, placed on the waker's core, usually runs at
/// once, ahead of the worker. Woken one by one from the worker, the consumer's thread
/// woke, polled the one task woken so far, went back to sleep and gave the core back,
/// once per stream of the hand-over: at 10,000 streams that was a context switch of the
/// consumer and a preemption of the worker per event. So the consumers' wakers go into
/// a `Relay`, which each of their streams knows of; the worker wakes one of them, and
/// the first consumer to poll its stream wakes the rest from its own thread (on its own
/// runtime that queues them, with no system call). If no consumer passes them on
/// within `RELAY_WAIT` (a task woken that no longer polls its stream), the worker's
/// flusher wakes them itself. Only a worker with a flusher relays.
///
/// The wakes happen in `drop`, so no early return or panic skips them.
struct WakeLater {
    /// This scope started the gathering (scopes do not nest; an inner one is inert).
    outer: bool,
}

/// Longest a relay's wakers wait for a consumer to pass them on before the worker's
/// flusher wakes them itself (a consumer's runtime takes microseconds to wake).
pub(crate) const RELAY_WAIT: Duration = Duration::from_millis(1);

/// Task wakers of one hand-over, passed on by the first of their consumers to poll (see
/// `WakeLater`), or by the worker's flusher after `RELAY_WAIT`.
pub(crate) struct Relay {
    wakers: Mutex<Vec<Waker>>,
    /// The wakers were passed on (or are being): nothing is left to wake.
    passed: AtomicBool,
}

impl Relay {
    /// Wakes the wakers left (once: a later call finds none).
    pub(crate) fn pass_on(&self) {
        if self.passed.swap(true, Ordering::SeqCst) {
            return;
        }
        let wakers =
            std::mem::take(&mut *self.wakers.lock().unwrap_or_else(PoisonError::into_inner));
        for waker in wakers {
            waker.wake();
        }
    }
}

impl WakeLater {
    fn begin() -> WakeLater {
        WakeLater {
            outer: !GATHERING.with(|g| g.replace(true)),
        }
    }

    /// Gathers `waker`, taken from `waiter`, if a hand-over on this thread gathers them;
    /// else gives it back.
    fn gather(waker: Waker, waiter: &Arc<Waiter>) -> Option<Waker> {
        if !GATHERING.with(Cell::get) || !LINGER_STATE.with(|l| l.borrow().has_flusher) {
            return Some(waker);
        }
        LATER.with(|l| {
            let mut l = l.borrow_mut();
            l.wakers.push(waker);
            l.waiters.push(waiter.clone());
        });
        None
    }
}

impl Drop for WakeLater {
    fn drop(&mut self) {
        if !self.outer {
            return;
        }
        GATHERING.with(|g| g.set(false));
        let (mut wakers, mut waiters) = LATER.with(|l| {
            let mut l = l.borrow_mut();
            (
                std::mem::take(&mut l.wakers),
                std::mem::take(&mut l.waiters),
            )
        });
        // The one woken from here: the last gathered (its stream's events were the last
        // moved). A hand-over with one consumer needs no relay.
        let direct = wakers.pop();
        if !wakers.is_empty() {
            let relay = Arc::new(Relay {
                wakers: Mutex::new(std::mem::take(&mut wakers)),
                passed: AtomicBool::new(false),
            });
            for waiter in &waiters {
                *waiter.relay.lock().unwrap_or_else(PoisonError::into_inner) = Some(relay.clone());
                waiter.relayed.store(true, Ordering::SeqCst);
            }
            keep_relay(relay);
        }
        waiters.clear();
        if let Some(direct) = direct {
            direct.wake();
        }
        LATER.with(|l| {
            let mut l = l.borrow_mut();
            if l.wakers.capacity() < wakers.capacity() {
                l.wakers = wakers;
            }
            if l.waiters.capacity() < waiters.capacity() {
                l.waiters = waiters;
            }
        });
    }
}

/// Keeps `relay` on this worker's list until it is passed on, waking the flusher to
/// watch its time if the list was empty; drops the passed ones at the list's front.
fn keep_relay(relay: Arc<Relay>) {
    let was_empty = RELAYS.with(|r| {
        let mut r = r.borrow_mut();
        while r
            .front()
            .is_some_and(|(_, f)| f.passed.load(Ordering::Relaxed))
        {
            r.pop_front();
        }
        let was_empty = r.is_empty();
        r.push_back((Instant::now(), relay));
        was_empty
    });
    if was_empty {
        LINGER_STATE.with(|l| {
            let mut l = l.borrow_mut();
            l.relays_news = true;
            if let Some(flusher) = l.flusher.take() {
                // On this worker's thread, inside its runtime: queued here.
                flusher.wake();
            }
        });
    }
}

/// Passes on the relays of this worker whose consumers did not within `RELAY_WAIT`,
/// and drops those passed on already. Returns when the next one is due, if any.
fn pass_on_stale_relays(now: Instant) -> Option<Instant> {
    loop {
        let stale = RELAYS.with(|r| {
            let mut r = r.borrow_mut();
            loop {
                let (made, relay) = r.front()?;
                if relay.passed.load(Ordering::Relaxed) {
                    r.pop_front();
                } else if now.saturating_duration_since(*made) >= RELAY_WAIT {
                    return r.pop_front().map(|(_, relay)| Ok(relay));
                } else {
                    return Some(Err(*made + RELAY_WAIT));
                }
            }
        });
        match stale {
            None => return None,
            Some(Err(due)) => return Some(due),
            Some(Ok(relay)) => relay.pass_on(),
        }
    }
}

/// Most outboxes an idle worker hands over before it writes the ready sets their
/// reports put off: a report waits at most for that many flushes (tens of
/// microseconds, well within `FLUSH_AFTER`), however many streams the worker holds.
const COALESCE_AT_MOST: usize = 64;

/// Longest an event waits in its outbox on a worker that lingers (see [`Linger`]).
/// Tokio's timers tick every millisecond, so the flusher's wake-up comes up to a
/// millisecond later still: an event waits 2 ms at most, against the 200 ms or so
/// between two events of one stream that make a worker hold thousands.
pub(crate) const LINGER: Duration = Duration::from_millis(1);

/// Turns a worker must be running before it may linger: a worker with a few streams
/// always hands over as it goes idle, so their events never wait for a timer.
pub(crate) const LINGER_TURNS: usize = 64;

/// Longest gap between two of a worker's idle moments with events to hand over, for it
/// to count as busy: under it the worker goes idle with events for its consumers more
/// than 5,000 times a second.
pub(crate) const BUSY_GAP: Duration = Duration::from_micros(200);

/// Whether a worker lingers: hands over its outboxes when the oldest waiting event is
/// `LINGER` old rather than each time it goes idle.
///
/// A worker holding thousands of slow streams (a gateway: each stream an event every
/// 200 ms or so) goes idle between almost every two events, and handing over at each
/// idle moment costs a wake-up of the consumer per event: its thread's context switch,
/// an eventfd write for its runtime, a netpoller round and a goroutine switch in Go.
/// At 10,000 streams those wake-ups were most of what the pull adapter cost beyond push.
/// Lingering gathers what the worker's streams produce for up to `LINGER`, then wakes
/// each consumer once for the lot.
///
/// It lingers only while both hold: at least `LINGER_TURNS` turns run on it, and it
/// went idle with events to hand over less than `BUSY_GAP` before. One stream, or a
/// handful, or many streams that produce rarely, hand over as the worker goes idle, as
/// before; so does a worker without a flusher (the tests' own workers).
struct Linger {
    /// Turns running on this worker (`Pump`s polled and not yet ended).
    turns: usize,
    /// The last time the worker went idle with outboxes on its list.
    last_idle_with_news: Option<Instant>,
    /// The worker lingered since its flusher last looked: the flusher hands over.
    wanted: bool,
    /// The worker's flusher, while it waits to be wanted.
    flusher: Option<Waker>,
    /// A relay was kept while none was: the flusher watches its time (see `Relay`).
    relays_news: bool,
    /// The worker has a flusher (see [`flusher`]).
    has_flusher: bool,
    /// Tests: count every idle moment as busy.
    #[cfg(test)]
    always_busy: bool,
    /// Tests: hand-overs made by the flusher.
    #[cfg(test)]
    flusher_hand_overs: usize,
}

impl Linger {
    /// The worker is about to go idle with outboxes on its list: true if it leaves them
    /// to its flusher (woken here if it was waiting). Every time this says true, the
    /// flusher hands over afterwards: it was waiting and is woken now, or it is queued
    /// to run, or it sleeps until the oldest outbox is due and hands over then.
    fn lingers(&mut self, now: Instant) -> bool {
        let busy = self
            .last_idle_with_news
            .is_some_and(|t| now.saturating_duration_since(t) < BUSY_GAP);
        #[cfg(test)]
        let busy = busy || self.always_busy;
        self.last_idle_with_news = Some(now);
        if !busy || !self.lingering() {
            return false;
        }
        self.wanted = true;
        if let Some(flusher) = self.flusher.take() {
            // A wake from this thread, inside its runtime: the task is queued here (no
            // system call), and the runtime polls it before it sleeps.
            flusher.wake();
        }
        true
    }

    /// The worker holds enough turns to linger, and has a flusher to linger with.
    fn lingering(&self) -> bool {
        self.has_flusher && self.turns >= LINGER_TURNS
    }
}

thread_local! {
    /// This worker's lingering (see [`Linger`]).
    static LINGER_STATE: RefCell<Linger> = const {
        RefCell::new(Linger {
            turns: 0,
            last_idle_with_news: None,
            wanted: false,
            flusher: None,
            relays_news: false,
            has_flusher: false,
            #[cfg(test)]
            always_busy: false,
            #[cfg(test)]
            flusher_hand_overs: 0,
        })
    };
}

/// A worker's flusher, a task of its runtime for the life of the worker: when the worker
/// lingers, it sleeps until the oldest outbox on the list is `LINGER` old, then hands over
/// every outbox on the list.
pub(crate) async fn flusher() {
    LINGER_STATE.with(|l| l.borrow_mut().has_flusher = true);
    loop {
        // Wanted, or the oldest relay not passed on is due.
        let due = pass_on_stale_relays(Instant::now());
        let mut sleep = std::pin::pin!(due.map(|d| tokio::time::sleep_until(d.into())));
        let wanted = std::future::poll_fn(|cx| {
            let woken = LINGER_STATE.with(|l| {
                let mut l = l.borrow_mut();
                if std::mem::take(&mut l.wanted) {
                    return Some(true);
                }
                if std::mem::take(&mut l.relays_news) {
                    return Some(false);
                }
                l.flusher = Some(cx.waker().clone());
                None
            });
            if let Some(wanted) = woken {
                return Poll::Ready(wanted);
            }
            match sleep.as_mut().as_pin_mut().map(|s| s.poll(cx)) {
                Some(Poll::Ready(())) => Poll::Ready(false),
                _ => Poll::Pending,
            }
        })
        .await;
        if !wanted {
            continue;
        }
        let oldest = PENDING.with(|p| p.borrow().front().map(|l| l.since));
        if let Some(oldest) = oldest {
            tokio::time::sleep_until((oldest + LINGER).into()).await;
        }
        #[cfg(test)]
        if any_pending() {
            LINGER_STATE.with(|l| l.borrow_mut().flusher_hand_overs += 1);
        }
        hand_over_all();
    }
}

/// The worker holds enough turns to linger: a turn's first burst and its end wait for
/// the next hand-over like any other event, rather than waking the consumer on their
/// own.
fn lingering_here() -> bool {
    LINGER_STATE.with(|l| l.borrow().lingering())
}

/// A turn started running on this worker (`Pump`'s first poll).
fn turn_started() {
    LINGER_STATE.with(|l| l.borrow_mut().turns += 1);
}

/// A turn counted by `turn_started` ended or was dropped.
fn turn_ended() {
    let _ = LINGER_STATE.try_with(|l| {
        let mut l = l.borrow_mut();
        l.turns = l.turns.saturating_sub(1);
    });
}

/// How long an outbox may wait on this worker before the checks at each poll hand it
/// over: `LINGER` while the worker lingers, `FLUSH_AFTER` otherwise.
fn hold() -> Duration {
    if lingering_here() {
        LINGER
    } else {
        FLUSH_AFTER
    }
}

/// Hands over the outboxes on this worker's list whose oldest event is `FLUSH_AFTER` old
/// at `now`, or, on a worker that lingers, every outbox once the oldest is `LINGER` old.
fn flush_expired(now: Instant) {
    if lingering_here() {
        // Once the oldest is due, every outbox goes: handing over the due ones alone
        // would wake consumers at every poll, a few at a time, which is what lingering
        // is there to stop.
        let due = PENDING.with(|p| {
            p.borrow()
                .front()
                .is_some_and(|l| now.saturating_duration_since(l.since) >= LINGER)
        });
        if due {
            hand_over_all();
        }
        return;
    }
    loop {
        let next = PENDING.with(|p| {
            let mut p = p.borrow_mut();
            match p.front() {
                Some(l) if now.saturating_duration_since(l.since) >= FLUSH_AFTER => p.pop_front(),
                _ => None,
            }
        });
        match next {
            Some(l) => l.shared.flush_listed(),
            None => return,
        }
    }
}

fn any_pending() -> bool {
    PENDING.with(|p| !p.borrow().is_empty())
}

/// How a consumer that ran dry waits: a thread parks itself at once, an async consumer
/// leaves its task's waker, and whoever puts events into the queue or ends it wakes
/// whichever is there. (The queue's own blocking `recv` spins before it parks; with a
/// worker producing an event every microsecond or two, that spin cost the consumer about
/// as much CPU as decoding the stream.) `waiting` is the consumer's promise to look at
/// the queue again before it parks or returns `Pending`; a fence on each side keeps a
/// wake-up from being lost.
pub(crate) struct Waiter {
    /// The consumer is about to wait (or waits) for an event.
    pub(crate) waiting: AtomicBool,
    /// Who to wake (a stream may be consumed from different threads or tasks in turn).
    pub(crate) wake: Mutex<Option<Wake>>,
    /// The relay this consumer's waker went into at the last hand-over (see `Relay`):
    /// the consumer passes it on when it polls. `relayed` says one is there.
    pub(crate) relay: Mutex<Option<Arc<Relay>>>,
    pub(crate) relayed: AtomicBool,
}

/// A waiting consumer: a parked thread, or an async task.
pub(crate) enum Wake {
    Thread(std::thread::Thread),
    Task(Waker),
}

impl Waiter {
    fn wake_slot(&self) -> MutexGuard<'_, Option<Wake>> {
        self.wake.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Wakes the consumer if it waits (called after new items or the queue's end). A
    /// task's waker is used once: the task registers again if it still has to wait.
    pub(crate) fn wake(self: &Arc<Self>) {
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.waiting.load(Ordering::SeqCst) {
            // The wake-up itself (a futex system call) happens after the lock is let go:
            // the consumer takes the same lock on its way to parking.
            let mut slot = self.wake_slot();
            match &*slot {
                Some(Wake::Thread(thread)) => {
                    let thread = thread.clone();
                    drop(slot);
                    thread.unpark();
                }
                Some(Wake::Task(_)) => {
                    if let Some(Wake::Task(waker)) = slot.take() {
                        drop(slot);
                        if let Some(waker) = WakeLater::gather(waker, self) {
                            waker.wake();
                        }
                    }
                }
                None => {}
            }
        }
    }

    /// An async consumer is being polled: wakes the other consumers of the relay its
    /// waker went into, if any (see `Relay`). Cheap when there is none.
    pub(crate) fn pass_on_relay(&self) {
        if !self.relayed.load(Ordering::Relaxed) {
            return;
        }
        let relay = {
            let mut slot = self.relay.lock().unwrap_or_else(PoisonError::into_inner);
            self.relayed.store(false, Ordering::SeqCst);
            slot.take()
        };
        if let Some(relay) = relay {
            relay.pass_on();
        }
    }

    /// An async consumer is about to return `Pending`: its task is woken by the next
    /// flush or end. The caller looks at the queue again afterwards.
    pub(crate) fn register_task(&self, waker: &Waker) {
        {
            let mut slot = self.wake_slot();
            match &*slot {
                Some(Wake::Task(w)) if w.will_wake(waker) => {}
                _ => *slot = Some(Wake::Task(waker.clone())),
            }
        }
        self.waiting.store(true, Ordering::SeqCst);
        std::sync::atomic::fence(Ordering::SeqCst);
    }

    /// The consumer stopped waiting (an event came, or the future waiting for it was
    /// dropped): nobody is left to wake.
    pub(crate) fn done_waiting(&self) {
        self.waiting.store(false, Ordering::SeqCst);
        let mut slot = self.wake_slot();
        if matches!(&*slot, Some(Wake::Task(_))) {
            *slot = None;
        }
    }

    /// Waits for the next item of `events` until `deadline`; the caller has set
    /// `waiting`. A spurious unpark only makes it look again.
    pub(crate) fn wait(
        &self,
        events: &QueueRx<Item>,
        deadline: Option<Instant>,
    ) -> Result<Item, RecvTimeoutError> {
        *self.wake_slot() = Some(Wake::Thread(std::thread::current()));
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
pub(crate) struct Outbox {
    /// `None` once the consumer has everything (the consumer then sees the queue end).
    pub(crate) tx: Option<QueueTx<Item>>,
    pub(crate) items: VecDeque<Item>,
    /// The consumer is gone or the stream was cancelled: events are dropped.
    pub(crate) closed: bool,
    /// When the oldest event in `items` was pushed (`None` while it is empty).
    pub(crate) since: Option<Instant>,
    /// On its worker's list of pending outboxes (`PENDING`).
    pub(crate) listed: bool,
    /// The turn is over; the queue ends once the outbox is empty.
    pub(crate) finished: bool,
    /// The turn's task, parked until the outbox has room again.
    pub(crate) producer: Option<Waker>,
    /// `items.len()`, readable without the lock: the consumer checks it before parking,
    /// so an empty outbox costs it no lock.
    pub(crate) len: Arc<AtomicUsize>,
    /// The consumer to wake when items reach the queue or the queue ends.
    pub(crate) waiter: Arc<Waiter>,
    /// The stream's readiness descriptor, if anyone asked for it: set here, under this
    /// lock, whenever the queue gets items or ends; cleared by the consumer (also under
    /// this lock) when it finds nothing (`Shared::clear_ready_if_empty`).
    pub(crate) ready: ReadyFd,
}

impl Outbox {
    /// Moves what fits from the outbox into the queue.
    pub(crate) fn flush(&mut self) {
        self.move_to_queue();
        self.len.store(self.items.len(), Ordering::SeqCst);
        if self.has_news() {
            self.ready.set();
        }
        self.waiter.wake();
    }

    /// Ends the queue now (cancel, or a turn that went away): a waiting consumer wakes
    /// and sees the end.
    pub(crate) fn end(&mut self) {
        self.tx = None;
        self.ready.set();
        self.waiter.wake();
    }

    /// Something for the consumer to take or to report: items in the queue or the
    /// outbox, the queue's end, or a stream closed by cancel, completion or failure.
    pub(crate) fn has_news(&self) -> bool {
        self.closed || !self.items.is_empty() || self.tx.as_ref().is_none_or(|tx| !tx.is_empty())
    }

    fn move_to_queue(&mut self) {
        self.move_items();
        if self.items.is_empty() {
            self.since = None;
        }
    }

    fn move_items(&mut self) {
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

    pub(crate) fn has_room(&self) -> bool {
        self.items.len() < MAX_BATCH
    }

    pub(crate) fn push(&mut self, item: Item) {
        if self.items.is_empty() {
            self.since = Some(Instant::now());
        }
        self.items.push_back(item);
        self.len.store(self.items.len(), Ordering::SeqCst);
    }
}

/// State shared by a stream's consumer, its control handles and its turn.
pub(crate) struct Shared {
    pub(crate) outbox: Mutex<Outbox>,
    /// The consumer waits (`waiter.waiting`), and how to wake it.
    pub(crate) waiter: Arc<Waiter>,
    /// The outbox's length (see `Outbox::len`).
    pub(crate) outbox_len: Arc<AtomicUsize>,
    /// The turn is parked on a full outbox: the consumer wakes it when it pops.
    pub(crate) producer_waiting: AtomicBool,
    /// The turn is being polled on its worker right now.
    pub(crate) producer_running: AtomicBool,
    pub(crate) cancelled: AtomicBool,
    /// `message_complete` was delivered: a cancel changes nothing any more.
    pub(crate) completed: AtomicBool,
    /// A readiness descriptor was made (`Outbox::ready`): the consumer clears it when it
    /// runs dry. Without one, running dry costs no lock.
    pub(crate) ready_asked: AtomicBool,
    /// The consumer holds items read ahead (`Stream::drain_ready`): the stream is ready
    /// whatever the queue holds.
    pub(crate) ahead_held: AtomicBool,
}

impl Shared {
    /// The state of a new stream whose turn hands its events to `tx`.
    pub(crate) fn new(tx: QueueTx<Item>) -> Shared {
        let outbox_len = Arc::new(AtomicUsize::new(0));
        let waiter = Arc::new(Waiter {
            waiting: AtomicBool::new(false),
            wake: Mutex::new(None),
            relay: Mutex::new(None),
            relayed: AtomicBool::new(false),
        });
        Shared {
            outbox: Mutex::new(Outbox {
                tx: Some(tx),
                // Grown as events come (to `MAX_BATCH` at most, then kept): a stream
                // whose events come one at a time never holds 64 slots of events. At
                // 10,000 streams up-front slots were ≈ 113 MB of the process's RSS.
                items: VecDeque::new(),
                closed: false,
                since: None,
                listed: false,
                finished: false,
                producer: None,
                len: outbox_len.clone(),
                waiter: waiter.clone(),
                ready: ReadyFd::NotAsked,
            }),
            waiter,
            outbox_len,
            producer_waiting: AtomicBool::new(false),
            producer_running: AtomicBool::new(false),
            cancelled: AtomicBool::new(false),
            completed: AtomicBool::new(false),
            ready_asked: AtomicBool::new(false),
            ahead_held: AtomicBool::new(false),
        }
    }

    /// The stream's readiness descriptor, made on first request and readable at once if
    /// the stream already has something to report.
    #[cfg(unix)]
    pub(crate) fn readiness_fd(&self) -> std::io::Result<std::os::fd::RawFd> {
        let mut outbox = self.outbox();
        match &outbox.ready {
            ReadyFd::Open(r) => return Ok(r.raw()),
            ReadyFd::Closed => return Err(closed_error()),
            ReadyFd::Member(_) => return Err(member_error()),
            ReadyFd::NotAsked => {}
        }
        let r = Readiness::new()?;
        let fd = r.raw();
        outbox.ready = ReadyFd::Open(r);
        self.ready_made(&mut outbox);
        Ok(fd)
    }

    /// Makes the stream report to `set` under `token` (see `crate::ReadySet`), at once
    /// if it already has something to report.
    #[cfg(unix)]
    pub(crate) fn attach(&self, set: &crate::ReadySet, token: u64) -> std::io::Result<()> {
        if set.from_parent_process() {
            return Err(std::io::Error::other(
                "the ready set was made before the process forked: it is the parent's \
                 (its descriptor is shared with it), so no stream can join it here; make \
                 a new set in the child",
            ));
        }
        let mut outbox = self.outbox();
        match &outbox.ready {
            ReadyFd::NotAsked => {}
            ReadyFd::Closed => return Err(closed_error()),
            ReadyFd::Open(_) | ReadyFd::Member(_) => return Err(member_error()),
        }
        outbox.ready = ReadyFd::Member(set.membership(token));
        self.ready_made(&mut outbox);
        Ok(())
    }

    /// A descriptor or a set membership was just made: it reports what the stream holds
    /// already, and from now on the consumer clears it when it runs dry.
    #[cfg(unix)]
    fn ready_made(&self, outbox: &mut Outbox) {
        if outbox.has_news()
            || self.cancelled.load(Ordering::SeqCst)
            || self.ahead_held.load(Ordering::SeqCst)
        {
            outbox.ready.set();
        }
        self.ready_asked.store(true, Ordering::SeqCst);
    }

    /// The consumer found nothing to report (its caller is about to say `Pending` or to
    /// wait): makes the readiness descriptor unreadable — unless, checked under the lock
    /// that every hand-off takes to set it, something did arrive, so no wake-up is lost.
    /// False in that case: the descriptor stays readable, and a caller about to say
    /// `Pending` must take what arrived first (`Stream::settle`), or a poller waiting
    /// for the next edge (epoll's `EPOLLET`, Go's netpoller) would wait for good.
    pub(crate) fn clear_ready_if_empty(&self) -> bool {
        if !self.ready_asked.load(Ordering::SeqCst) {
            return true;
        }
        let mut outbox = self.outbox();
        if !outbox.has_news()
            && !self.cancelled.load(Ordering::SeqCst)
            && !self.ahead_held.load(Ordering::SeqCst)
        {
            outbox.ready.clear();
            return true;
        }
        false
    }

    /// The stream is gone: its descriptor is made readable (a poller blocked on it
    /// returns) and closed.
    pub(crate) fn close_ready(&self) {
        self.outbox().ready.close();
    }

    pub(crate) fn outbox(&self) -> MutexGuard<'_, Outbox> {
        self.outbox.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The worker took this stream off its list: hand over what waits.
    fn flush_listed(&self) {
        let mut outbox = self.outbox();
        outbox.listed = false;
        if !outbox.items.is_empty() {
            outbox.flush();
        }
    }

    /// The consumer's flush: moves waiting events into the queue and, if that made room,
    /// wakes a turn parked on a full outbox.
    pub(crate) fn flush_for_consumer(&self) {
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

/// The push receiver of a turn: appends to the outbox, never blocks.
pub(crate) struct Forward {
    pub(crate) shared: Arc<Shared>,
}

impl Receiver for Forward {
    fn on_event(&mut self, event: Event) -> Flow {
        let urgent = event.is_terminal() && !lingering_here();
        let mut outbox = self.shared.outbox();
        if outbox.closed {
            return Flow::Stop;
        }
        // Otherwise it waits for a flush (see the module docs), or for a consumer that
        // runs dry and takes it first (`Stream::try_next`, `Stream::receive`).
        outbox.push(Ok(event));
        let n = outbox.items.len();
        let now = (n % CLOCK_EVERY == 0).then(Instant::now);
        let old = now.is_some_and(|now| {
            outbox
                .since
                .is_some_and(|t| now.saturating_duration_since(t) >= hold())
        });
        if urgent || old || n >= MAX_BATCH {
            outbox.flush();
        }
        let closed = outbox.closed;
        drop(outbox);
        // A long poll of this turn must not hold back other streams of this worker.
        if let Some(now) = now {
            flush_expired(now);
        }
        if closed {
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
    pub(crate) fn push_final(&mut self, item: Item) {
        let mut outbox = self.shared.outbox();
        if !outbox.closed {
            outbox.push(item);
        }
    }
}

/// A turn's future, as a worker runs it.
pub(crate) type TurnFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Wraps a turn's task: puts its outbox on the worker's list when the turn waits with
/// events in it (handing over the first burst at once), ends the queue when the turn
/// ends, and tells `Stream::drop` (through `task_done`) that it is gone.
pub(crate) struct Pump {
    /// Makes the turn's future, at the first poll: on the worker, which runs it to the
    /// end and frees it. The future is several kilobytes (6.8 KB for a chat turn); made
    /// by the thread that starts the stream, it was written there, read on the worker
    /// and freed on the worker into the starting thread's allocator arena. The maker
    /// holds only what the future starts from.
    pub(crate) start: Option<Box<dyn FnOnce() -> TurnFuture + Send>>,
    /// The turn's future once made; `None` (with `start` taken) once it ended.
    pub(crate) turn: Option<TurnFuture>,
    pub(crate) shared: Arc<Shared>,
    pub(crate) _task_done: Sender<()>,
    /// Some event was handed over already (the first burst goes at once).
    pub(crate) started: bool,
    /// Counted in its worker's running turns (see `Linger`).
    pub(crate) counted: bool,
}

impl Future for Pump {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        if let Some(make) = this.start.take() {
            this.turn = Some(make());
        }
        let Some(turn) = this.turn.as_mut() else {
            return Poll::Ready(());
        };
        if !this.counted {
            this.counted = true;
            turn_started();
        }
        this.shared.producer_running.store(true, Ordering::SeqCst);
        let done = turn.as_mut().poll(cx).is_ready();
        if done {
            // Cleared before the last hand-off, not after: a consumer that saw the turn
            // running went to wait and is woken by this flush; one that looks after it
            // finds the turn stopped and takes what the queue could not hold itself.
            // Cleared after the flush, a consumer could see the turn running just
            // before it stopped for good, and wait with events left in the outbox.
            this.shared.producer_running.store(false, Ordering::SeqCst);
        }
        let mut outbox = this.shared.outbox();
        let linger = lingering_here();
        if done && (outbox.items.is_empty() || !linger) {
            outbox.finished = true;
            outbox.flush();
        } else if !outbox.items.is_empty() {
            // The end goes with the last events, by the next hand-over.
            outbox.finished |= done;
            if !this.started {
                this.started = true;
                if !linger {
                    outbox.flush();
                }
            }
            // Whatever the queue could not take (the first burst included, on a full
            // queue) waits on the worker's list: a consumer that saw the turn running
            // is waiting for the flush that list guarantees, and the turn may not be
            // polled again for a long time (a slow tool, a quiet network).
            if !outbox.items.is_empty() && !outbox.listed {
                outbox.listed = true;
                let since = outbox.since.unwrap_or_else(Instant::now);
                let shared = this.shared.clone();
                PENDING.with(|p| p.borrow_mut().push_back(Listed { since, shared }));
            }
        }
        drop(outbox);
        if !done {
            this.shared.producer_running.store(false, Ordering::SeqCst);
        }
        if any_pending() {
            flush_expired(Instant::now());
        }
        if done {
            self.turn = None;
            if std::mem::take(&mut self.counted) {
                turn_ended();
            }
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

impl Drop for Pump {
    fn drop(&mut self) {
        if self.turn.take().is_some() | self.start.take().is_some() {
            // Dropped before its turn ended (the runtime went away): end the queue, so a
            // consumer sees `incomplete` rather than waiting forever.
            let mut outbox = self.shared.outbox();
            outbox.finished = true;
            outbox.flush();
            outbox.end();
        }
        if self.counted {
            turn_ended();
        }
        ACTIVE.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossbeam_channel::bounded;
    use panto::DeltaKind;

    /// Far more than anything here takes; only catches a hang.
    const HANG: std::time::Duration = std::time::Duration::from_secs(60);

    fn delta(i: u32) -> Event {
        Event::ContentDelta {
            message: 0,
            block: 0,
            kind: DeltaKind::Text,
            text: i.to_string(),
        }
    }

    /// A worker as the pool makes one: a thread driving a current-thread runtime with
    /// the park hook, until `stop` is sent.
    fn worker() -> (tokio::runtime::Handle, tokio::sync::oneshot::Sender<()>) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .on_thread_park(flush_pending)
            .build()
            .unwrap();
        let handle = rt.handle().clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        std::thread::spawn(move || rt.block_on(stopped));
        (handle, stop)
    }

    /// Runs `turn` on `worker` as the stream of `shared`, the way `Stream` starts one.
    fn spawn_turn(
        worker: &tokio::runtime::Handle,
        shared: Arc<Shared>,
        turn: impl Future<Output = ()> + Send + 'static,
    ) {
        let (task_done, _) = bounded(0);
        drop(worker.spawn(pump(shared, task_done, move || Box::pin(turn))));
    }

    /// A turn's task as `Stream` makes one (counted as active), its future made by
    /// `start` at the first poll.
    fn pump(
        shared: Arc<Shared>,
        task_done: Sender<()>,
        start: impl FnOnce() -> TurnFuture + Send + 'static,
    ) -> Pump {
        ACTIVE.fetch_add(1, Ordering::SeqCst);
        Pump {
            start: Some(Box::new(start)),
            turn: None,
            shared,
            _task_done: task_done,
            started: false,
            counted: false,
        }
    }

    /// A stream's turn that hands over one event, waits for `go`, then hands over
    /// `1..=n` in that later poll and waits forever (like a turn waiting for a host
    /// tool's answer). Returns the consumer's end of its queue.
    fn turn(
        worker: &tokio::runtime::Handle,
        n: u32,
    ) -> (QueueRx<Item>, tokio::sync::oneshot::Sender<()>) {
        let (rx, go, _) = turn_with(worker, n, |_| {});
        (rx, go)
    }

    /// `turn`, with `setup` run on the stream's state before the turn starts; also
    /// returns that state.
    fn turn_with(
        worker: &tokio::runtime::Handle,
        n: u32,
        setup: impl FnOnce(&Shared),
    ) -> (QueueRx<Item>, tokio::sync::oneshot::Sender<()>, Arc<Shared>) {
        let (tx, rx) = crate::queue::queue(256);
        let shared = Arc::new(Shared::new(tx));
        setup(&shared);
        let state = shared.clone();
        let mut forward = Forward {
            shared: shared.clone(),
        };
        let (go, went) = tokio::sync::oneshot::channel::<()>();
        let turn = async move {
            forward.on_event(delta(0));
            let _ = went.await;
            for i in 1..=n {
                forward.on_event(delta(i));
            }
            std::future::pending::<()>().await;
        };
        spawn_turn(worker, shared, turn);
        (rx, go, state)
    }

    fn received(rx: &QueueRx<Item>, i: u32) {
        match rx.recv_timeout(HANG) {
            Ok(Ok(ev)) => assert_eq!(ev, delta(i)),
            other => panic!("expected event {i}, got {other:?}"),
        }
    }

    #[test]
    fn the_first_burst_goes_at_once_and_an_idle_worker_hands_over_the_rest() {
        let (worker, stop) = worker();
        let (rx, go) = turn(&worker, 3);
        // The first burst ends its poll and goes at once.
        received(&rx, 0);
        // The rest (fewer than the clock is looked at for, produced in no time) is left
        // in the outbox at the end of its poll; nothing else runs on the worker, which
        // hands it over as it goes idle.
        go.send(()).unwrap();
        for i in 1..=3 {
            received(&rx, i);
        }
        let _ = stop.send(());
    }

    #[test]
    fn a_worker_kept_busy_by_another_turn_hands_over_within_the_bound() {
        let (worker, stop) = worker();
        let (rx, go) = turn(&worker, 3);
        received(&rx, 0);
        // Another turn that is always ready: the worker never goes idle, so only the
        // age of the waiting events (checked at the end of every poll of a turn on this
        // worker) gets them out.
        let (tx, _busy_rx) = crate::queue::queue(1);
        spawn_turn(&worker, Arc::new(Shared::new(tx)), async {
            loop {
                tokio::task::yield_now().await;
            }
        });
        go.send(()).unwrap();
        for i in 1..=3 {
            received(&rx, i);
        }
        let _ = stop.send(());
    }

    /// A turn's future is made by its worker, at the first poll, not by the thread that
    /// starts the stream.
    #[test]
    fn a_turns_future_is_made_on_its_worker() {
        let (worker, _stop) = worker();
        let (tx, _rx) = crate::queue::queue::<Item>(4);
        let (made, made_on) = crossbeam_channel::bounded(1);
        let (task_done, _) = bounded(0);
        drop(
            worker.spawn(pump(Arc::new(Shared::new(tx)), task_done, move || {
                let _ = made.send(std::thread::current().id());
                Box::pin(std::future::pending())
            })),
        );
        let worker_thread = on_worker(&worker, || std::thread::current().id());
        assert_eq!(made_on.recv_timeout(HANG).unwrap(), worker_thread);
        assert_ne!(worker_thread, std::thread::current().id());
    }

    /// A turn whose task is dropped before its first poll (its worker's runtime went
    /// away) still ends its queue: the consumer is told, not left waiting.
    #[test]
    fn a_turn_dropped_before_it_was_made_ends_its_queue() {
        let (tx, rx) = crate::queue::queue::<Item>(4);
        let (task_done, done) = bounded::<()>(0);
        // The stream holds its state too (so dropping the task alone ends nothing).
        let stream_state = Arc::new(Shared::new(tx));
        let task = pump(stream_state.clone(), task_done, || {
            Box::pin(std::future::pending())
        });
        assert!(matches!(rx.try_recv(), Err(TryRecvError::Empty)));
        drop(task);
        assert!(matches!(rx.try_recv(), Err(TryRecvError::Disconnected)));
        assert!(matches!(done.try_recv(), Err(TryRecvError::Disconnected)));
        drop(stream_state);
    }

    /// A new stream's outbox holds no slots until events come: its memory is what
    /// 10,000 streams that are waiting for their first event cost.
    #[test]
    fn a_new_outbox_allocates_nothing_until_it_holds_events() {
        let (tx, _rx) = crate::queue::queue(8);
        let shared = Shared::new(tx);
        assert_eq!(shared.outbox.lock().unwrap().items.capacity(), 0);
    }

    /// The idle worker's hand-over reports to a ready set once, at its end
    /// (`ready_set::Deferred`): a poller blocked on the set's descriptor (established
    /// from its thread's state) is still woken, by that deferred write.
    #[test]
    #[cfg(target_os = "linux")]
    fn a_poller_blocked_on_a_ready_set_is_woken_by_the_idle_workers_hand_over() {
        let set = crate::ReadySet::new().unwrap();
        let (worker, stop) = worker();
        let (rx, go, shared) = turn_with(&worker, 3, |s| s.attach(&set, 9).unwrap());
        // The first burst goes at once (not deferred): take its report, then the event,
        // and find the stream empty, as a consumer does before it waits. (The other way
        // round, a consumer that takes the event while the worker is still handing it
        // over makes the report needless, and the worker rightly skips it.)
        let mut tokens = [0u64; 4];
        let deadline = Instant::now() + HANG;
        while set.take(&mut tokens) == 0 {
            assert!(
                Instant::now() < deadline,
                "the first burst was not reported"
            );
            std::thread::yield_now();
        }
        assert_eq!(tokens[0], 9);
        received(&rx, 0);
        assert!(shared.clear_ready_if_empty());
        let fd = set.fd();
        let poller = crate::test_support::spawn_poller(fd);
        // The rest is produced in a later poll and handed over when the worker idles.
        go.send(()).unwrap();
        assert!(poller.join().unwrap(), "the poller was not woken");
        assert_eq!(set.take(&mut tokens), 1);
        assert_eq!(tokens[0], 9);
        assert!(
            set.inner_deferred_writes() >= 1,
            "the report did not come through the hand-over's deferred write"
        );
        for i in 1..=3 {
            received(&rx, i);
        }
        let _ = stop.send(());
    }
    /// Runs `f` on the worker's thread (where its lingering state lives) and returns
    /// what it returns.
    fn on_worker<T: Send + 'static>(
        worker: &tokio::runtime::Handle,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> T {
        let (tx, rx) = std::sync::mpsc::channel();
        drop(worker.spawn(async move {
            let _ = tx.send(f());
        }));
        rx.recv_timeout(HANG)
            .expect("the worker did not run the task")
    }

    /// A worker as the pool makes one, flusher included, running `LINGER_TURNS` turns
    /// that wait forever, so it lingers whenever it is busy; with `always_busy`, every
    /// idle moment counts as busy. Returns the quiet turns' queues (to keep them open).
    fn lingering_worker(
        always_busy: bool,
    ) -> (
        tokio::runtime::Handle,
        tokio::sync::oneshot::Sender<()>,
        Vec<QueueRx<Item>>,
    ) {
        let (worker, stop) = worker();
        drop(worker.spawn(flusher()));
        let quiet = (0..LINGER_TURNS)
            .map(|_| {
                let (tx, rx) = crate::queue::queue(4);
                spawn_turn(&worker, Arc::new(Shared::new(tx)), std::future::pending());
                rx
            })
            .collect();
        // Every turn is counted at its first poll, which comes before a task spawned
        // after them all; wait for it all the same rather than rely on the order.
        let deadline = Instant::now() + HANG;
        while !on_worker(&worker, lingering_here) {
            assert!(Instant::now() < deadline, "the worker never lingered");
        }
        on_worker(&worker, move || {
            LINGER_STATE.with(|l| l.borrow_mut().always_busy = always_busy);
        });
        (worker, stop, quiet)
    }

    /// A worker as the pool makes one, with its flusher running.
    fn worker_with_flusher() -> (tokio::runtime::Handle, tokio::sync::oneshot::Sender<()>) {
        let (worker, stop) = worker();
        drop(worker.spawn(flusher()));
        let deadline = Instant::now() + HANG;
        while !on_worker(&worker, || LINGER_STATE.with(|l| l.borrow().has_flusher)) {
            assert!(Instant::now() < deadline, "the flusher never ran");
        }
        (worker, stop)
    }

    /// A task waker that reports its wakes, by index, on a channel.
    struct Report(usize, crossbeam_channel::Sender<usize>);

    impl std::task::Wake for Report {
        fn wake(self: Arc<Self>) {
            let _ = self.1.send(self.0);
        }
    }

    /// `n` streams' waiters, each with an async consumer waiting (its task's waker left
    /// there), and the channel their wakes are reported on.
    fn waiting_consumers(n: usize) -> (Vec<Arc<Waiter>>, crossbeam_channel::Receiver<usize>) {
        let (woke, wakes) = crossbeam_channel::unbounded();
        let waiters = (0..n)
            .map(|i| {
                let (tx, _) = crate::queue::queue::<Item>(1);
                let waiter = Shared::new(tx).waiter.clone();
                waiter.register_task(&Waker::from(Arc::new(Report(i, woke.clone()))));
                waiter
            })
            .collect();
        (waiters, wakes)
    }

    /// What was reported so far.
    fn reported(wakes: &crossbeam_channel::Receiver<usize>) -> Vec<usize> {
        let mut seen: Vec<usize> = wakes.try_iter().collect();
        seen.sort_unstable();
        seen
    }

    /// A hand-over that takes many consumers' wakers wakes them at its end, not one by
    /// one; from the worker only one of them, and the first consumer to poll wakes the
    /// rest (here, on the worker's thread, the flusher cannot run in between).
    #[test]
    fn a_hand_over_wakes_one_consumer_which_passes_the_rest_on() {
        let (worker, _stop) = worker_with_flusher();
        let (waiters, wakes) = waiting_consumers(5);
        let (during, first, rest, after) = on_worker(&worker, move || {
            let gathering = WakeLater::begin();
            for w in &waiters {
                w.wake();
            }
            let during = reported(&wakes);
            drop(gathering);
            let first = reported(&wakes);
            // Any consumer of the hand-over may be the first to poll.
            let woken = first.first().copied().unwrap_or(0);
            waiters[(woken + 1) % waiters.len()].pass_on_relay();
            let rest = reported(&wakes);
            waiters[woken].pass_on_relay();
            (during, first, rest, reported(&wakes))
        });
        assert!(
            during.is_empty(),
            "woken before the hand-over's end: {during:?}"
        );
        assert_eq!(first.len(), 1, "woken from the worker: {first:?}");
        let mut all = first.clone();
        all.extend(&rest);
        all.sort_unstable();
        assert_eq!(all, vec![0, 1, 2, 3, 4], "the rest, passed on: {rest:?}");
        assert!(after.is_empty(), "passed on twice: {after:?}");
    }

    /// A relay nobody passes on (the woken task no longer polls its stream) is passed on
    /// by the worker's flusher within `RELAY_WAIT`: no consumer is left waiting.
    #[test]
    fn a_relay_no_consumer_passes_on_is_passed_on_by_the_flusher() {
        let (worker, _stop) = worker_with_flusher();
        let (waiters, wakes) = waiting_consumers(4);
        let woke = on_worker(&worker, {
            let wakes = wakes.clone();
            move || {
                let _gathering = WakeLater::begin();
                for w in &waiters {
                    w.wake();
                }
                drop(_gathering);
                // The flusher runs on this thread: it cannot have passed anything on yet.
                reported(&wakes)
            }
        });
        assert_eq!(woke.len(), 1, "woken from the worker: {woke:?}");
        let mut all = woke;
        for _ in 0..3 {
            all.push(
                wakes
                    .recv_timeout(HANG)
                    .expect("the flusher passed the relay on"),
            );
        }
        all.sort_unstable();
        assert_eq!(all, vec![0, 1, 2, 3]);
        assert!(on_worker(&worker, || RELAYS.with(|r| r.borrow().is_empty())));
    }

    /// A hand-over with one consumer wakes it from the worker and makes no relay (one
    /// stream, or a few that produce at different times, pay nothing for relaying).
    #[test]
    fn a_hand_over_with_one_consumer_makes_no_relay() {
        let (worker, _stop) = worker_with_flusher();
        let (waiters, wakes) = waiting_consumers(1);
        let waiter = waiters[0].clone();
        let (woke, relays) = on_worker(&worker, move || {
            let gathering = WakeLater::begin();
            waiters[0].wake();
            drop(gathering);
            (reported(&wakes), RELAYS.with(|r| r.borrow().len()))
        });
        assert_eq!(woke, vec![0]);
        assert_eq!(relays, 0);
        assert!(!waiter.relayed.load(Ordering::SeqCst));
    }

    /// A worker without a flusher (nothing would pass a relay on) wakes every consumer
    /// itself at the hand-over's end.
    #[test]
    fn a_worker_without_a_flusher_wakes_every_consumer_itself() {
        let (worker, _stop) = worker();
        let (waiters, wakes) = waiting_consumers(3);
        let woke = on_worker(&worker, move || {
            let gathering = WakeLater::begin();
            for w in &waiters {
                w.wake();
            }
            drop(gathering);
            reported(&wakes)
        });
        assert_eq!(woke, vec![0, 1, 2]);
    }

    fn flusher_hand_overs(worker: &tokio::runtime::Handle) -> usize {
        on_worker(worker, || {
            LINGER_STATE.with(|l| l.borrow().flusher_hand_overs)
        })
    }

    /// A worker busy with many turns leaves its outboxes to its flusher instead of
    /// handing them over each time it goes idle, and the flusher hands every event
    /// over: the first burst and the later ones.
    #[test]
    fn a_busy_worker_with_many_turns_leaves_the_hand_over_to_its_flusher() {
        let (worker, stop, _quiet) = lingering_worker(true);
        assert_eq!(flusher_hand_overs(&worker), 0);
        let (rx, go) = turn(&worker, 3);
        received(&rx, 0);
        assert_eq!(
            flusher_hand_overs(&worker),
            1,
            "the first burst did not go by the flusher"
        );
        go.send(()).unwrap();
        for i in 1..=3 {
            received(&rx, i);
        }
        assert_eq!(flusher_hand_overs(&worker), 2);
        let _ = stop.send(());
    }

    /// A turn that ends on a lingering worker: its last events and its end go together
    /// by the flusher, and the consumer sees the queue end after the last event.
    #[test]
    fn a_turn_that_ends_on_a_lingering_worker_still_ends_its_queue() {
        let (worker, stop, _quiet) = lingering_worker(true);
        let (tx, rx) = crate::queue::queue(256);
        let shared = Arc::new(Shared::new(tx));
        let mut forward = Forward {
            shared: shared.clone(),
        };
        spawn_turn(&worker, shared, async move {
            for i in 0..3 {
                forward.on_event(delta(i));
            }
        });
        for i in 0..3 {
            received(&rx, i);
        }
        assert!(
            matches!(rx.recv_timeout(HANG), Err(RecvTimeoutError::Disconnected)),
            "the queue did not end"
        );
        assert_eq!(flusher_hand_overs(&worker), 1);
        let _ = stop.send(());
    }

    /// Many turns alone do not make a worker linger: one that goes idle with events
    /// rarely (here, once) hands them over as it goes idle, without its flusher.
    #[test]
    fn a_worker_with_many_turns_that_idles_rarely_hands_over_as_it_goes_idle() {
        let (worker, stop, _quiet) = lingering_worker(false);
        let (rx, go) = turn(&worker, 3);
        received(&rx, 0);
        // The first idle moment with events is never busy (there was none before it).
        assert_eq!(flusher_hand_overs(&worker), 0);
        // The next may or may not come within `BUSY_GAP` (that depends on the
        // consumer's round trip): either way, every event arrives.
        go.send(()).unwrap();
        for i in 1..=3 {
            received(&rx, i);
        }
        let _ = stop.send(());
    }

    /// When a worker lingers, decided at each idle moment with events to hand over.
    #[test]
    fn a_worker_lingers_only_when_busy_with_many_turns_and_a_flusher() {
        let fresh = |turns, has_flusher| Linger {
            turns,
            last_idle_with_news: None,
            wanted: false,
            flusher: None,
            relays_news: false,
            has_flusher,
            always_busy: false,
            flusher_hand_overs: 0,
        };
        let t0 = Instant::now();
        let soon = t0 + BUSY_GAP / 2;
        let later = soon + BUSY_GAP * 2;

        // Busy (two idle moments close together) with many turns and a flusher.
        let mut l = fresh(LINGER_TURNS, true);
        assert!(!l.lingers(t0), "the first idle moment is not busy");
        assert!(l.lingers(soon));
        assert!(l.wanted, "the flusher was not asked to hand over");
        assert!(!l.lingers(later), "a long gap is not busy");

        // A waiting flusher is woken.
        let woken = Arc::new(AtomicBool::new(false));
        struct Flag(Arc<AtomicBool>);
        impl std::task::Wake for Flag {
            fn wake(self: Arc<Self>) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        let mut l = fresh(LINGER_TURNS, true);
        l.flusher = Some(Waker::from(Arc::new(Flag(woken.clone()))));
        l.lingers(t0);
        assert!(!woken.load(Ordering::SeqCst));
        assert!(l.lingers(soon));
        assert!(woken.load(Ordering::SeqCst), "the flusher was not woken");
        assert!(l.flusher.is_none());

        // Too few turns, or no flusher: never.
        for (turns, has_flusher) in [(LINGER_TURNS - 1, true), (LINGER_TURNS, false)] {
            let mut l = fresh(turns, has_flusher);
            assert!(!l.lingers(t0));
            assert!(!l.lingers(soon));
            assert!(!l.wanted);
        }
    }
}
