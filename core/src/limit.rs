//! Owns the process-wide bound on model requests: `max_concurrent_requests` and
//! `max_queued_requests` per provider endpoint, shared by every agent of the process
//! that has the same endpoint, API key and limits. A request over the bound waits on an
//! asynchronous semaphore — a future, never a thread, in every binding — and a request
//! that finds the queue full fails at once with `rate_limited`. What a request is and
//! when it is sent is the transport's (`http`); where the table of limits lives (one
//! per process, fork-safe) is `http`'s too.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::error::{Error, ErrorKind, Result};

/// What makes two agents share one bound: the endpoint, the key (as a hash: the table
/// never holds a credential) and the two limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LimitKey {
    base_url: String,
    key_hash: u64,
    max_concurrent: u32,
    max_queued: u32,
}

impl LimitKey {
    /// The key of `config`'s bound, `None` when it sets no `max_concurrent_requests`.
    pub(crate) fn of(config: &Config) -> Option<LimitKey> {
        let max_concurrent = config.max_concurrent_requests?;
        let mut h = DefaultHasher::new();
        config.api_key.hash(&mut h);
        Some(LimitKey {
            base_url: config.base_url.clone(),
            key_hash: h.finish(),
            max_concurrent,
            max_queued: config.max_queued_requests,
        })
    }
}

/// One endpoint's bound.
#[derive(Debug)]
pub(crate) struct RequestLimit {
    permits: Arc<Semaphore>,
    queued: AtomicU32,
    max_concurrent: u32,
    max_queued: u32,
}

/// A request's place among those in flight; the place is given back when it is dropped.
#[derive(Debug)]
pub(crate) struct Slot {
    _permit: OwnedSemaphorePermit,
}

/// Counts a waiting request until it stops waiting, however it stops (a permit, a
/// cancel, the turn's future dropped).
struct Waiting<'a>(&'a AtomicU32);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl RequestLimit {
    fn new(key: &LimitKey) -> RequestLimit {
        RequestLimit {
            permits: Arc::new(Semaphore::new(key.max_concurrent as usize)),
            queued: AtomicU32::new(0),
            max_concurrent: key.max_concurrent,
            max_queued: key.max_queued,
        }
    }

    /// A place among the requests in flight, and how long it was waited for. A full
    /// queue is `rate_limited` at once (not retried: waiting is what the queue is for);
    /// a cancel while waiting is `cancelled`.
    pub(crate) async fn acquire(&self, cancel: &CancellationToken) -> Result<(Slot, Duration)> {
        if let Ok(permit) = self.permits.clone().try_acquire_owned() {
            return Ok((Slot { _permit: permit }, Duration::ZERO));
        }
        let max_queued = self.max_queued;
        if self
            .queued
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max_queued).then_some(n + 1)
            })
            .is_err()
        {
            return Err(Error::new(
                ErrorKind::RateLimited,
                format!(
                    "{max_queued} requests already wait for this endpoint's \
                     max_concurrent_requests ({}); max_queued_requests ({max_queued}) is \
                     reached, so this one fails at once",
                    self.max_concurrent
                ),
            )
            .with_retryable(false));
        }
        let _waiting = Waiting(&self.queued);
        let start = Instant::now();
        tokio::select! {
            biased;
            _ = cancel.cancelled() => Err(Error::cancelled()),
            permit = self.permits.clone().acquire_owned() => {
                let permit = permit.map_err(|_| Error::internal("the request limit was closed"))?;
                Ok((Slot { _permit: permit }, start.elapsed()))
            }
        }
    }

    /// Requests waiting now.
    pub(crate) fn waiting(&self) -> u32 {
        self.queued.load(Ordering::Acquire)
    }
}

/// The table of bounds: each entry lives while an agent holds it.
#[derive(Debug, Default)]
pub(crate) struct LimitTable {
    entries: Vec<(LimitKey, Weak<RequestLimit>)>,
}

impl LimitTable {
    /// The bound of `key` if an agent holds it now.
    pub(crate) fn find(&self, key: &LimitKey) -> Option<Arc<RequestLimit>> {
        self.entries
            .iter()
            .find(|(k, _)| k == key)
            .and_then(|(_, w)| w.upgrade())
    }

    /// The bound of `key`, shared with every agent that holds it now.
    pub(crate) fn get(&mut self, key: LimitKey) -> Arc<RequestLimit> {
        self.entries.retain(|(_, w)| w.strong_count() > 0);
        if let Some(limit) = self.find(&key) {
            return limit;
        }
        let limit = Arc::new(RequestLimit::new(&key));
        self.entries.push((key, Arc::downgrade(&limit)));
        limit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(max_concurrent: u32, max_queued: u32) -> LimitKey {
        LimitKey {
            base_url: "http://x".into(),
            key_hash: 1,
            max_concurrent,
            max_queued,
        }
    }

    #[tokio::test]
    async fn waits_then_overflows_then_cancels() {
        let mut table = LimitTable::default();
        let limit = table.get(key(1, 1));
        assert!(Arc::ptr_eq(&limit, &table.get(key(1, 1))));
        assert!(!Arc::ptr_eq(&limit, &table.get(key(2, 1))));
        let cancel = CancellationToken::new();
        let (first, waited) = limit.acquire(&cancel).await.unwrap();
        assert_eq!(waited, Duration::ZERO);
        // The second waits; the third finds the queue full.
        let l2 = limit.clone();
        let c2 = cancel.clone();
        let second = tokio::spawn(async move { l2.acquire(&c2).await.map(|(s, _)| s) });
        while limit.waiting() == 0 {
            tokio::task::yield_now().await;
        }
        let e = limit.acquire(&cancel).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::RateLimited);
        assert!(!second.is_finished());
        drop(first);
        let slot = second.await.unwrap().unwrap();
        assert_eq!(limit.waiting(), 0);
        // A cancel while waiting leaves the queue.
        let own = CancellationToken::new();
        let l3 = limit.clone();
        let c3 = own.clone();
        let third = tokio::spawn(async move { l3.acquire(&c3).await.map(|(s, _)| s) });
        while limit.waiting() == 0 {
            tokio::task::yield_now().await;
        }
        own.cancel();
        assert_eq!(third.await.unwrap().unwrap_err().kind, ErrorKind::Cancelled);
        assert_eq!(limit.waiting(), 0);
        drop(slot);
        // Dropped by every holder: the entry goes.
        drop(limit);
        let fresh = table.get(key(1, 1));
        assert_eq!(fresh.waiting(), 0);
    }
}
