//! A ready set: one readiness descriptor for many streams. A stream attached to a set
//! (`Stream::attach`) has no descriptor of its own: where it would make its own readable,
//! it puts its token in the set's queue, and the set's one descriptor is readable exactly
//! while that queue holds a token. The consumer waits on the set's descriptor, takes the
//! tokens (`ReadySet::take`), and drains each of those streams until `Pending`.
//!
//! Why: a descriptor per waiting stream costs the process one descriptor per stream on
//! top of its socket (10,000 streams need 20,000, past common limits), and an event loop
//! one registration and one wake-up per stream per burst. With a set, 10,000 streams cost
//! 10,000 sockets and one descriptor, and one wake-up of the loop serves every stream that
//! became ready meanwhile.
//!
//! The rules, the same as a stream's own descriptor's with "readable" read as "reported":
//! - a stream is reported when it turns ready (events handed over, its end, a failure, a
//!   cancel) after its consumer last found it empty — once: until a `try_next` (or any
//!   call that finds nothing) says `Pending` again, it is not reported a second time. So
//!   after taking a token, drain that stream until `Pending` (or its end); a stream not
//!   drained that far is not reported again;
//! - the queue holds each stream at most once, and a stream reported before it was
//!   dropped is never reported after `Stream`'s drop returned;
//! - a token may be reported for a stream that has nothing by the time it is drained (it
//!   was drained meanwhile by its consumer): the drain then answers `Pending` at once.
//!
//! Locks: a stream's outbox lock, then the set's lock (never the other way round).
//!
//! Coalescing: a worker about to go idle hands over every outbox on its list at once
//! (`handoff::flush_pending`); with many streams attached to one set, each report used
//! to find the descriptor just cleared by a consumer that took the previous one, and
//! wrote it again: a system call and a wake-up of the consumer per stream. Inside such a
//! hand-over (`Deferred`, at most 64 outboxes long) a report queues its token at once
//! but leaves the descriptor write to the hand-over's end, which makes the descriptor
//! readable once if a token is still queued then (and not at all if a consumer awake
//! meanwhile took them all: it is known to be awake, and has what it would be woken
//! for). A token queued behind an unreadable descriptor waits at most until that end,
//! tens of microseconds later on the same thread, which no early return or panic skips
//! (the write is in `Deferred`'s `drop`).
//!
//! Fork: a child shares the set's descriptor with its parent (the same eventfd or pipe),
//! and its copy of the set's lock may have been held by a thread that does not exist in
//! the child. So a set made before the fork is inert in the child: `take` answers
//! nothing, `fd` and `attach` fail, and dropping it touches neither the lock nor the
//! shared descriptor (it closes the child's copy only) — else the child's take would
//! read the parent's readiness away (the parent's queued tokens behind an unreadable
//! descriptor, for good) and its drop would make the parent's descriptor readable with
//! nothing queued (a level-triggered loop then spins). The child makes a set of its own.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::readiness::Readiness;

/// Many streams' readiness behind one descriptor (see the module docs). Dropping it
/// makes its descriptor readable (a poller waiting on it returns) and closes it; streams
/// still attached stay usable, and are simply no longer reported.
pub struct ReadySet {
    inner: Arc<SetInner>,
    fd: std::os::fd::RawFd,
    /// The fork generation the set was made in (see the module docs, "Fork").
    generation: u64,
}

impl std::fmt::Debug for ReadySet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadySet").field("fd", &self.fd).finish()
    }
}

struct SetInner {
    state: Mutex<SetState>,
    /// How many times a `Deferred` scope's end made the descriptor readable (tests
    /// check that a wake-up came that way).
    #[cfg(test)]
    deferred_writes: std::sync::atomic::AtomicUsize,
}

struct SetState {
    /// The streams reported and not yet taken, oldest first, each at most once.
    queue: VecDeque<Arc<Member>>,
    /// How many entries of `queue` are streams dropped since they were queued.
    dead: usize,
    /// `None` once the set was dropped: reports are then dropped too.
    readiness: Option<Readiness>,
}

struct Member {
    token: u64,
    /// In the set's queue now (read and written under the set's lock).
    queued: AtomicBool,
    /// The stream exists (cleared under the set's lock when it is dropped).
    alive: AtomicBool,
}

/// A stream's side of its set (kept in its outbox, under its lock).
pub(crate) struct Membership {
    set: Arc<SetInner>,
    member: Arc<Member>,
    /// Reported since its consumer last found it empty (a stream's own descriptor's
    /// "readable"): reported once per turn to ready.
    signaled: bool,
}

impl SetInner {
    fn state(&self) -> MutexGuard<'_, SetState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// How many times this process's lineage forked since its first set was made; bumped in
/// the child. Its own count, not the pool's fork generation: a process that made a set
/// but never ran a turn has no pool (and its agents stay usable in a child), yet its
/// child must know the set is the parent's.
static FORKS: AtomicU64 = AtomicU64::new(0);

extern "C" fn after_fork_in_child() {
    FORKS.fetch_add(1, Ordering::SeqCst);
}

/// Registers [`after_fork_in_child`] once, before the first set exists.
fn watch_fork() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    // SAFETY: registers a handler that only adds to an atomic (async-signal-safe, as a
    // handler running in a child forked from a multithreaded process must be).
    ONCE.call_once(|| unsafe {
        libc::pthread_atfork(None, None, Some(after_fork_in_child));
    });
}

thread_local! {
    /// This thread's `Deferred` scope: `NO_SCOPE`, `SCOPE` (open, nothing put off yet)
    /// or `SCOPE_PUT_OFF` (open, and `DEFERRED` holds sets). A `Cell` of its own, so
    /// that a hand-over with no set member costs two flag writes.
    static SCOPE_STATE: Cell<u8> = const { Cell::new(NO_SCOPE) };
    /// The sets whose descriptor a report inside the scope left unreadable, to be made
    /// readable when the scope ends.
    static DEFERRED: RefCell<Vec<Arc<SetInner>>> = const { RefCell::new(Vec::new()) };
}

const NO_SCOPE: u8 = 0;
const SCOPE: u8 = 1;
const SCOPE_PUT_OFF: u8 = 2;

/// A scope in which reports to ready sets queue their tokens but put off the
/// descriptor write to the scope's end (see the module docs, "Coalescing"). Scopes do
/// not nest: an inner one is inert.
pub(crate) struct Deferred {
    active: bool,
}

impl Deferred {
    pub(crate) fn begin() -> Deferred {
        let active = SCOPE_STATE.with(|s| {
            if s.get() != NO_SCOPE {
                return false;
            }
            s.set(SCOPE);
            true
        });
        Deferred { active }
    }
}

impl Drop for Deferred {
    fn drop(&mut self) {
        if !self.active || SCOPE_STATE.with(|s| s.replace(NO_SCOPE)) != SCOPE_PUT_OFF {
            return;
        }
        let sets = DEFERRED.with(|d| std::mem::take(&mut *d.borrow_mut()));
        for set in sets {
            let mut state = set.state();
            if !state.queue.is_empty() {
                if let Some(r) = state.readiness.as_mut() {
                    #[cfg(test)]
                    if !r.is_set() {
                        set.deferred_writes.fetch_add(1, Ordering::SeqCst);
                    }
                    r.set();
                }
            }
        }
    }
}

/// Inside a `Deferred` scope: remembers `set` for the scope's end (true); outside one,
/// false (the caller writes now).
fn defer(set: &Arc<SetInner>) -> bool {
    if SCOPE_STATE.with(|s| s.get()) == NO_SCOPE {
        return false;
    }
    DEFERRED.with(|d| {
        let mut sets = d.borrow_mut();
        if !sets.iter().any(|s| Arc::ptr_eq(s, set)) {
            sets.push(set.clone());
        }
    });
    SCOPE_STATE.with(|s| s.set(SCOPE_PUT_OFF));
    true
}

impl ReadySet {
    /// A new, empty set with its descriptor (non-blocking, close-on-exec: an eventfd on
    /// Linux and Android, a pipe's read end elsewhere). Fails only if the process is out
    /// of descriptors.
    pub fn new() -> io::Result<ReadySet> {
        watch_fork();
        let readiness = Readiness::new()?;
        let fd = readiness.raw();
        Ok(ReadySet {
            inner: Arc::new(SetInner {
                state: Mutex::new(SetState {
                    queue: VecDeque::new(),
                    dead: 0,
                    readiness: Some(readiness),
                }),
                #[cfg(test)]
                deferred_writes: std::sync::atomic::AtomicUsize::new(0),
            }),
            fd,
            generation: FORKS.load(Ordering::SeqCst),
        })
    }

    /// True in a process forked after the set was made: the set is its parent's and
    /// inert here (see the module docs, "Fork").
    pub fn from_parent_process(&self) -> bool {
        self.generation != FORKS.load(Ordering::SeqCst)
    }

    /// The set's descriptor: readable exactly while a stream's token waits to be taken
    /// (it may also be readable with only dropped streams' entries left: `take` then
    /// returns 0 and clears it). Never read, write or close it: the set does. -1 in a
    /// forked child for a set of the parent (its descriptor is the parent's readiness).
    pub fn fd(&self) -> std::os::fd::RawFd {
        if self.from_parent_process() {
            return -1;
        }
        self.fd
    }

    /// Takes the tokens of the streams reported since the last call, oldest first, into
    /// `tokens`; returns how many. When it returns fewer than `tokens.len()` the queue is
    /// empty and the descriptor unreadable (until the next report: an edge).
    /// In a forked child, a set of the parent takes nothing (0).
    pub fn take(&self, tokens: &mut [u64]) -> usize {
        if self.from_parent_process() {
            return 0;
        }
        let mut state = self.inner.state();
        let mut n = 0;
        while n < tokens.len() {
            let Some(member) = state.queue.pop_front() else {
                break;
            };
            member.queued.store(false, Ordering::Relaxed);
            if member.alive.load(Ordering::Relaxed) {
                tokens[n] = member.token;
                n += 1;
            } else {
                state.dead -= 1;
            }
        }
        if state.queue.is_empty() {
            if let Some(r) = state.readiness.as_mut() {
                r.clear();
            }
        }
        n
    }

    /// How many times a `Deferred` scope's end made the descriptor readable.
    #[cfg(test)]
    pub(crate) fn inner_deferred_writes(&self) -> usize {
        self.inner.deferred_writes.load(Ordering::SeqCst)
    }

    /// A stream's membership under `token`.
    pub(crate) fn membership(&self, token: u64) -> Membership {
        Membership {
            set: self.inner.clone(),
            member: Arc::new(Member {
                token,
                queued: AtomicBool::new(false),
                alive: AtomicBool::new(true),
            }),
            signaled: false,
        }
    }
}

impl Drop for ReadySet {
    fn drop(&mut self) {
        if self.from_parent_process() {
            // Neither the lock (maybe held by a thread gone with the fork) nor the
            // parent's descriptor: the child's copy closes when the last reference to
            // the state goes (a close, no write).
            return;
        }
        let mut state = self.inner.state();
        if let Some(mut r) = state.readiness.take() {
            // A poller already waiting returns (POLLIN, or POLLNVAL after the close).
            r.set();
        }
        state.queue.clear();
        state.dead = 0;
    }
}

impl Membership {
    /// The stream has something to report (its outbox lock is held).
    pub(crate) fn set(&mut self) {
        if self.signaled {
            return;
        }
        self.signaled = true;
        let mut state = self.set.state();
        if state.readiness.is_none() || self.member.queued.load(Ordering::Relaxed) {
            return;
        }
        self.member.queued.store(true, Ordering::Relaxed);
        state.queue.push_back(self.member.clone());
        if let Some(r) = state.readiness.as_mut() {
            if !r.is_set() && !defer(&self.set) {
                r.set();
            }
        }
    }

    /// The consumer found the stream empty: the next report is a new one.
    pub(crate) fn clear(&mut self) {
        self.signaled = false;
    }

    /// The stream is being dropped: it is never reported again. A queued entry stays
    /// (skipped by `take`) unless dropped streams' entries make up most of the queue, so
    /// a set nobody takes from does not grow with the streams that come and go.
    pub(crate) fn leave(&mut self) {
        let mut state = self.set.state();
        self.member.alive.store(false, Ordering::Relaxed);
        if self.member.queued.load(Ordering::Relaxed) {
            state.dead += 1;
            if state.dead > 64 && state.dead * 2 > state.queue.len() {
                state.queue.retain(|m| {
                    let alive = m.alive.load(Ordering::Relaxed);
                    if !alive {
                        m.queued.store(false, Ordering::Relaxed);
                    }
                    alive
                });
                state.dead = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn readable(fd: std::os::fd::RawFd) -> bool {
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd, zero timeout.
        let n = unsafe { libc::poll(&mut p, 1, 0) };
        n == 1 && p.revents & libc::POLLIN != 0
    }

    #[test]
    fn reports_each_member_once_until_cleared_and_never_after_leaving() {
        let set = ReadySet::new().unwrap();
        let mut a = set.membership(1);
        let mut b = set.membership(2);
        assert!(!readable(set.fd()));
        a.set();
        a.set();
        b.set();
        assert!(readable(set.fd()));
        let mut buf = [0u64; 8];
        assert_eq!(set.take(&mut buf), 2);
        assert_eq!(&buf[..2], &[1, 2]);
        assert!(!readable(set.fd()), "readable with nothing queued");
        // Not cleared by its consumer: not reported again.
        a.set();
        assert!(!readable(set.fd()));
        // Cleared (the consumer found it empty), then ready again: reported again.
        a.clear();
        a.set();
        assert!(readable(set.fd()));
        // Reported, then dropped before anyone took it: never reported.
        a.leave();
        assert_eq!(set.take(&mut buf), 0);
        assert!(!readable(set.fd()));
        // A small buffer takes the oldest first and leaves the set readable.
        let mut c = set.membership(3);
        b.clear();
        b.set();
        c.set();
        let mut one = [0u64; 1];
        assert_eq!(set.take(&mut one), 1);
        assert_eq!(one[0], 2);
        assert!(readable(set.fd()));
        assert_eq!(set.take(&mut one), 1);
        assert_eq!(one[0], 3);
        assert_eq!(set.take(&mut one), 0);
        assert!(!readable(set.fd()));
    }

    #[test]
    fn reports_inside_a_hand_over_make_the_descriptor_readable_once_at_its_end() {
        let set = ReadySet::new().unwrap();
        let mut a = set.membership(1);
        let mut b = set.membership(2);
        {
            let _scope = Deferred::begin();
            a.set();
            b.set();
            // Queued at once, written at the scope's end.
            assert!(!readable(set.fd()));
            assert_eq!(set.inner.state().queue.len(), 2);
        }
        assert!(readable(set.fd()));
        assert_eq!(set.inner.deferred_writes.load(Ordering::SeqCst), 1);
        let mut buf = [0u64; 8];
        assert_eq!(set.take(&mut buf), 2);
        assert!(!readable(set.fd()));

        // A consumer awake during the scope took the token: nothing to write at its end.
        a.clear();
        {
            let _scope = Deferred::begin();
            a.set();
            assert_eq!(set.take(&mut buf), 1);
        }
        assert!(!readable(set.fd()), "readable with nothing queued");

        // An inner scope is inert: the outer one's end writes.
        a.clear();
        {
            let _outer = Deferred::begin();
            {
                let _inner = Deferred::begin();
                a.set();
            }
            assert!(!readable(set.fd()));
        }
        assert!(readable(set.fd()));
        assert_eq!(set.take(&mut buf), 1);

        // A panic inside the scope still writes (the write is in the scope's drop).
        b.clear();
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _scope = Deferred::begin();
            b.set();
            panic!("a waker panicked");
        }));
        assert!(unwound.is_err());
        assert!(readable(set.fd()));
        // The thread's scope state was reset: a report outside any scope writes at once.
        assert_eq!(set.take(&mut buf), 1);
        a.clear();
        a.set();
        assert!(readable(set.fd()));
    }

    /// A thread blocked in `poll` on the set's descriptor (established from the thread's
    /// state, not by sleeping) is woken by the end of a hand-over that reported to the
    /// set: no report inside a scope is left behind an unreadable descriptor.
    #[test]
    #[cfg(target_os = "linux")]
    fn a_poller_blocked_on_the_set_is_woken_by_a_deferred_report() {
        let set = ReadySet::new().unwrap();
        let fd = set.fd();
        let mut m = set.membership(7);
        let poller = crate::test_support::spawn_poller(fd);
        {
            let _scope = Deferred::begin();
            m.set();
        }
        assert!(poller.join().unwrap(), "the poller was not woken");
        let mut buf = [0u64; 4];
        assert_eq!(set.take(&mut buf), 1);
        assert_eq!(buf[0], 7);
    }

    #[test]
    fn dropped_members_do_not_grow_a_set_nobody_takes_from() {
        let set = ReadySet::new().unwrap();
        for token in 0..10_000 {
            let mut m = set.membership(token);
            m.set();
            m.leave();
        }
        let state = set.inner.state();
        assert!(state.queue.len() <= 130, "{} entries", state.queue.len());
    }
}
