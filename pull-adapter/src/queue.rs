//! A stream's queue: the bounded channel from a turn's outbox to its consumer.
//!
//! Bounded like `crossbeam_channel::bounded(capacity)`, but its slots are allocated as
//! events arrive rather than all at once: it is crossbeam's list channel (blocks of a
//! few dozen slots, each allocated when the one before is full and freed once read)
//! with the bound kept here. A bounded crossbeam channel allocates and initialises every
//! slot when it is made; at 256 slots of `Result<Event, Error>` (176 bytes each) that
//! was about 47 KB per stream, 470 MB of resident memory at 10,000 streams, where most
//! streams never hold more than one event at a time.
//!
//! The bound holds because a queue has one sender, which sends only under its stream's
//! outbox lock: between the length check and the send only the consumer runs, and it
//! only takes items out.

use crossbeam_channel::{Receiver, Sender, TryRecvError, TrySendError};

/// Makes a queue that holds at most `capacity` items (at least one).
pub(crate) fn queue<T>(capacity: usize) -> (QueueTx<T>, QueueRx<T>) {
    let capacity = capacity.max(1);
    let (tx, rx) = crossbeam_channel::unbounded();
    (QueueTx { tx, capacity }, QueueRx { rx, capacity })
}

/// The sending end (the stream's outbox). Dropping it ends the queue.
pub(crate) struct QueueTx<T> {
    tx: Sender<T>,
    capacity: usize,
}

impl<T> QueueTx<T> {
    /// Sends `item` unless the queue is full or its receiver is gone (the item comes
    /// back in the error).
    pub(crate) fn try_send(&self, item: T) -> Result<(), TrySendError<T>> {
        if self.tx.len() >= self.capacity {
            return Err(TrySendError::Full(item));
        }
        self.tx.try_send(item)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.tx.is_empty()
    }
}

/// The receiving end (the stream). Items sent before the sender was dropped are still
/// received; then `Disconnected`.
pub(crate) struct QueueRx<T> {
    rx: Receiver<T>,
    capacity: usize,
}

impl<T> QueueRx<T> {
    pub(crate) fn try_recv(&self) -> Result<T, TryRecvError> {
        self.rx.try_recv()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.rx.is_empty()
    }

    pub(crate) fn len(&self) -> usize {
        self.rx.len()
    }

    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    #[cfg(test)]
    pub(crate) fn recv_timeout(
        &self,
        timeout: std::time::Duration,
    ) -> Result<T, crossbeam_channel::RecvTimeoutError> {
        self.rx.recv_timeout(timeout)
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
        // 256 slots would be at least 256 × 176 = 45,056 bytes; a block of the list
        // channel holds 31.
        assert!(per_queue < 8 * 1024, "{per_queue} bytes per queue");
        // A bounded crossbeam channel, for comparison, holds every slot at once (the
        // check above would fail for it).
        let before = crate::test_alloc::held_by_this_thread();
        let bounded = crossbeam_channel::bounded::<[u8; 176]>(256);
        let held = (crate::test_alloc::held_by_this_thread() - before) as usize;
        drop(bounded);
        assert!(held >= 256 * 176, "{held}");
    }
}
