//! A stream's queue: the bounded channel from a turn's outbox to its consumer.
//!
//! Bounded like `crossbeam_channel::bounded(capacity)`, but its memory grows with what it
//! holds rather than being allocated for `capacity` items at once: a `VecDeque` behind a
//! mutex, which allocates room for a few items with the first one and doubles as it
//! fills, and reuses that room from then on. A bounded crossbeam channel allocates and
//! initialises every slot when it is made; at 256 slots of `Result<Event, Error>` (176
//! bytes each) that was about 47 KB per stream, 470 MB of resident memory at 10,000
//! streams, where most streams never hold more than one event at a time. Crossbeam's
//! unbounded (list) channel allocates as items come, but zeroes a block of 31 slots for
//! every 31 items: about 185 instructions per event, 1.5–4 % of a whole event's cost.
//!
//! The lock is taken once per item on each side and is almost never contended: the
//! sender sends only under its stream's outbox lock (one sender at a time), and the
//! consumer takes one item at a time. The length is mirrored in an atomic, so the
//! consumer's and the sender's "is it empty?" cost no lock.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crossbeam_channel::{TryRecvError, TrySendError};

/// Makes a queue that holds at most `capacity` items (at least one).
pub(crate) fn queue<T>(capacity: usize) -> (QueueTx<T>, QueueRx<T>) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            items: VecDeque::new(),
            sender_gone: false,
            receiver_gone: false,
        }),
        len: AtomicUsize::new(0),
        capacity: capacity.max(1),
    });
    (
        QueueTx {
            shared: shared.clone(),
        },
        QueueRx { shared },
    )
}

struct Shared<T> {
    state: Mutex<State<T>>,
    /// `state.items.len()`, written under the lock, read without it.
    len: AtomicUsize,
    capacity: usize,
}

struct State<T> {
    items: VecDeque<T>,
    /// The sender was dropped: once `items` is empty, the queue has ended.
    sender_gone: bool,
    /// The receiver was dropped: items are refused (and those held were dropped).
    receiver_gone: bool,
}

impl<T> Shared<T> {
    /// The state; a panic elsewhere while it was held leaves nothing half-done in it
    /// (every change is one `VecDeque` call or one flag).
    fn state(&self) -> MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The sending end (the stream's outbox). Dropping it ends the queue.
pub(crate) struct QueueTx<T> {
    shared: Arc<Shared<T>>,
}

impl<T> QueueTx<T> {
    /// Sends `item` unless the queue is full or its receiver is gone (the item comes
    /// back in the error).
    pub(crate) fn try_send(&self, item: T) -> Result<(), TrySendError<T>> {
        let mut state = self.shared.state();
        if state.receiver_gone {
            return Err(TrySendError::Disconnected(item));
        }
        if state.items.len() >= self.shared.capacity {
            return Err(TrySendError::Full(item));
        }
        state.items.push_back(item);
        self.shared.len.store(state.items.len(), Ordering::SeqCst);
        Ok(())
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.shared.len.load(Ordering::SeqCst) == 0
    }
}

impl<T> Drop for QueueTx<T> {
    fn drop(&mut self) {
        self.shared.state().sender_gone = true;
    }
}

/// The receiving end (the stream). Items sent before the sender was dropped are still
/// received; then `Disconnected`. Dropping it drops the items it did not take.
pub(crate) struct QueueRx<T> {
    shared: Arc<Shared<T>>,
}

impl<T> QueueRx<T> {
    pub(crate) fn try_recv(&self) -> Result<T, TryRecvError> {
        let mut state = self.shared.state();
        match state.items.pop_front() {
            Some(item) => {
                self.shared.len.store(state.items.len(), Ordering::SeqCst);
                Ok(item)
            }
            None if state.sender_gone => Err(TryRecvError::Disconnected),
            None => Err(TryRecvError::Empty),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.shared.len.load(Ordering::SeqCst) == 0
    }

    pub(crate) fn len(&self) -> usize {
        self.shared.len.load(Ordering::SeqCst)
    }

    pub(crate) fn capacity(&self) -> usize {
        self.shared.capacity
    }

    /// Tests: waits up to `timeout` for an item (yielding the thread between looks).
    #[cfg(test)]
    pub(crate) fn recv_timeout(
        &self,
        timeout: std::time::Duration,
    ) -> Result<T, crossbeam_channel::RecvTimeoutError> {
        use crossbeam_channel::RecvTimeoutError;
        let deadline = std::time::Instant::now() + timeout;
        loop {
            match self.try_recv() {
                Ok(item) => return Ok(item),
                Err(TryRecvError::Disconnected) => return Err(RecvTimeoutError::Disconnected),
                Err(TryRecvError::Empty) if std::time::Instant::now() >= deadline => {
                    return Err(RecvTimeoutError::Timeout)
                }
                Err(TryRecvError::Empty) => std::thread::yield_now(),
            }
        }
    }
}

impl<T> Drop for QueueRx<T> {
    fn drop(&mut self) {
        let items = {
            let mut state = self.shared.state();
            state.receiver_gone = true;
            self.shared.len.store(0, Ordering::SeqCst);
            std::mem::take(&mut state.items)
        };
        // Dropped outside the lock: an item's drop may be long (an event's payload).
        drop(items);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queue_refuses_an_item_past_its_capacity_and_takes_it_once_one_is_read() {
        let (tx, rx) = queue::<u32>(2);
        assert_eq!(rx.capacity(), 2);
        tx.try_send(1).unwrap();
        tx.try_send(2).unwrap();
        assert!(matches!(tx.try_send(3), Err(TrySendError::Full(3))));
        assert_eq!(rx.len(), 2);
        assert_eq!(rx.try_recv().unwrap(), 1);
        tx.try_send(3).unwrap();
        assert!(matches!(tx.try_send(4), Err(TrySendError::Full(4))));
        assert_eq!(rx.try_recv().unwrap(), 2);
        assert_eq!(rx.try_recv().unwrap(), 3);
        assert!(rx.is_empty() && tx.is_empty());
        assert!(matches!(rx.try_recv(), Err(TryRecvError::Empty)));
    }

    #[test]
    fn a_capacity_of_zero_holds_one_item() {
        let (tx, rx) = queue::<u32>(0);
        tx.try_send(1).unwrap();
        assert!(matches!(tx.try_send(2), Err(TrySendError::Full(2))));
        assert_eq!(rx.try_recv().unwrap(), 1);
    }

    #[test]
    fn items_sent_before_the_sender_is_dropped_are_received_then_the_end() {
        let (tx, rx) = queue::<u32>(4);
        tx.try_send(7).unwrap();
        drop(tx);
        assert_eq!(rx.try_recv().unwrap(), 7);
        assert!(matches!(rx.try_recv(), Err(TryRecvError::Disconnected)));
        let (tx, rx) = queue::<u32>(4);
        drop(rx);
        assert!(matches!(tx.try_send(1), Err(TrySendError::Disconnected(1))));
    }

    /// The point of this queue: one made for 256 items allocates no slots for them
    /// up front, nor after it held an item once.
    #[test]
    fn queues_hold_no_slots_for_their_capacity_up_front() {
        const N: usize = 100;
        let before = crate::test_alloc::held_by_this_thread();
        let queues: Vec<_> = (0..N)
            .map(|_| {
                let (tx, rx) = queue::<[u8; 176]>(256);
                tx.try_send([0; 176]).unwrap();
                assert!(rx.try_recv().is_ok());
                (tx, rx)
            })
            .collect();
        let per_queue = (crate::test_alloc::held_by_this_thread() - before) as usize / N;
        drop(queues);
        // 256 slots would be at least 256 × 176 = 45,056 bytes; the queue holds room
        // for a few.
        assert!(per_queue < 2 * 1024, "{per_queue} bytes per queue");
        // A bounded crossbeam channel, for comparison, holds every slot at once (the
        // check above would fail for it).
        let before = crate::test_alloc::held_by_this_thread();
        let bounded = crossbeam_channel::bounded::<[u8; 176]>(256);
        let held = (crate::test_alloc::held_by_this_thread() - before) as usize;
        drop(bounded);
        assert!(held >= 256 * 176, "{held}");
    }
    #[test]
    fn a_dropped_receiver_drops_what_it_held_and_refuses_more() {
        let item = Arc::new(());
        let (tx, rx) = queue::<Arc<()>>(4);
        tx.try_send(item.clone()).unwrap();
        tx.try_send(item.clone()).unwrap();
        assert_eq!(Arc::strong_count(&item), 3);
        drop(rx);
        assert_eq!(Arc::strong_count(&item), 1);
        assert!(matches!(
            tx.try_send(item.clone()),
            Err(TrySendError::Disconnected(_))
        ));
        assert!(tx.is_empty());
    }

    /// Once it has room for a burst, a queue allocates nothing more for items that
    /// pass through it (what a stream costs per event).
    #[test]
    fn a_queue_reuses_its_room_from_item_to_item() {
        let (tx, rx) = queue::<[u8; 176]>(256);
        tx.try_send([1; 176]).unwrap();
        assert_eq!(rx.try_recv().unwrap(), [1; 176]);
        let before = crate::test_alloc::held_by_this_thread();
        for i in 0..1000u32 {
            let b = (i % 251) as u8;
            tx.try_send([b; 176]).unwrap();
            tx.try_send([b.wrapping_add(1); 176]).unwrap();
            assert_eq!(rx.try_recv().unwrap(), [b; 176]);
            assert_eq!(rx.try_recv().unwrap(), [b.wrapping_add(1); 176]);
        }
        assert_eq!(crate::test_alloc::held_by_this_thread(), before);
    }

    /// A sender on another thread: every item arrives, in order, and the end only
    /// after the last one.
    #[test]
    fn items_from_another_thread_arrive_in_order_and_then_the_end() {
        const N: u32 = 20_000;
        let (tx, rx) = queue::<u32>(8);
        let sender = std::thread::spawn(move || {
            let mut next = 0;
            while next < N {
                match tx.try_send(next) {
                    Ok(()) => next += 1,
                    Err(TrySendError::Full(_)) => std::thread::yield_now(),
                    Err(TrySendError::Disconnected(_)) => panic!("the receiver is alive"),
                }
            }
        });
        let mut expected = 0;
        loop {
            match rx.try_recv() {
                Ok(n) => {
                    assert_eq!(n, expected);
                    expected += 1;
                }
                Err(TryRecvError::Empty) => std::thread::yield_now(),
                Err(TryRecvError::Disconnected) => break,
            }
        }
        assert_eq!(expected, N);
        sender.join().unwrap();
    }
}
