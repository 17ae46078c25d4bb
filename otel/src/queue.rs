//! Owns the way finished spans and recorded metrics reach the collector without a turn
//! ever waiting: the span processor [`Queue`] hands each finished span to a bounded queue
//! (full: the span is dropped and counted), and one export thread takes them off in
//! batches and sends them; the same thread collects and sends the metrics
//! ([`crate::metrics::Pipe`]) every export interval and at each flush.
//!
//! The thread is detached: it lives as long as the process, blocked on the queue when
//! idle, and nothing has to join it at exit (a C host under ThreadSanitizer sees no
//! joinable thread left behind). It drives its own current-thread runtime, which the
//! HTTP client runs on, and blocks SIGPIPE as panto's worker threads do (a C host may
//! leave SIGPIPE fatal). A forked child has no such thread: its spans are dropped and
//! counted once the queue is full, and its flushes time out.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, never, Receiver, Sender, TrySendError};
use opentelemetry::Context;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{Span, SpanData, SpanExporter, SpanProcessor};
use panto::Error;

use crate::metrics::Pipe;

/// Most spans sent in one request.
const MAX_BATCH: usize = 512;

/// How long a finished span may wait for more to share its request.
const BATCH_DELAY: Duration = Duration::from_secs(2);

/// Flushes that may wait for the thread at once; more wait for room.
const MAX_PENDING_FLUSHES: usize = 64;

/// What became of the spans, since the export started.
#[derive(Debug, Default)]
struct Counts {
    dropped: AtomicU64,
    failed: AtomicU64,
    exported: AtomicU64,
    metric_exports_failed: AtomicU64,
}

/// The span processor: a finished span goes to the queue, never waiting.
#[derive(Debug)]
pub(crate) struct Queue {
    spans: Sender<SpanData>,
    handle: Handle,
}

/// What the export keeps of the queue: flushing and the counts.
#[derive(Debug, Clone)]
pub(crate) struct Handle {
    flushes: Sender<Sender<()>>,
    counts: Arc<Counts>,
}

impl Queue {
    /// Starts the export thread that sends spans with `exporter` (`None`: no spans, and no
    /// queue) and the metrics through `metrics`; the queue holds at most `capacity` spans.
    pub(crate) fn start<E: SpanExporter + 'static>(
        exporter: Option<E>,
        capacity: usize,
        metrics: Option<Pipe>,
    ) -> Result<(Option<Queue>, Handle), Error> {
        let (spans, span_rx) = bounded(capacity);
        // Without spans to send, the thread waits on nothing rather than on a queue whose
        // sender is gone (which would end it).
        let span_rx = if exporter.is_some() { span_rx } else { never() };
        let (flushes, flush_rx) = bounded(MAX_PENDING_FLUSHES);
        let counts = Arc::new(Counts::default());
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            // Only name resolution uses a blocking thread; one, gone when idle.
            .max_blocking_threads(1)
            .thread_name("panto-otel-resolve")
            .thread_keep_alive(Duration::from_secs(5))
            .on_thread_start(block_sigpipe)
            .build()
            .map_err(|e| Error::internal(format!("OpenTelemetry export: runtime: {e}")))?;
        let worker_has_spans = exporter.is_some();
        let worker = Worker {
            exporter,
            runtime,
            spans: span_rx,
            flushes: flush_rx,
            counts: counts.clone(),
            batch: Vec::new(),
            metrics,
        };
        // Dropping the JoinHandle detaches the thread.
        std::thread::Builder::new()
            .name("panto-otel-export".to_owned())
            .spawn(move || {
                block_sigpipe();
                worker.run();
            })
            .map_err(|e| Error::internal(format!("OpenTelemetry export: thread: {e}")))?;
        let handle = Handle { flushes, counts };
        let queue = worker_has_spans.then(|| Queue {
            spans,
            handle: handle.clone(),
        });
        Ok((queue, handle))
    }
}

impl Handle {
    /// Waits, at most `timeout`, until the spans queued before this call were handled and
    /// the metrics recorded before it were sent.
    pub(crate) fn flush(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let (done, done_rx) = bounded(1);
        if self.flushes.send_deadline(done, deadline).is_err() {
            return false;
        }
        done_rx.recv_deadline(deadline).is_ok()
    }

    pub(crate) fn dropped(&self) -> u64 {
        self.counts.dropped.load(Ordering::Relaxed)
    }

    pub(crate) fn failed(&self) -> u64 {
        self.counts.failed.load(Ordering::Relaxed)
    }

    pub(crate) fn exported(&self) -> u64 {
        self.counts.exported.load(Ordering::Relaxed)
    }

    pub(crate) fn metric_exports_failed(&self) -> u64 {
        self.counts.metric_exports_failed.load(Ordering::Relaxed)
    }
}

impl SpanProcessor for Queue {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        match self.spans.try_send(span) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.handle.counts.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        let timeout = crate::DEFAULT_FLUSH_TIMEOUT;
        if self.handle.flush(timeout) {
            Ok(())
        } else {
            Err(OTelSdkError::Timeout(timeout))
        }
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        // The thread stays (detached); shutting down sends what is queued.
        if self.handle.flush(timeout) {
            Ok(())
        } else {
            Err(OTelSdkError::Timeout(timeout))
        }
    }
}

/// The export thread's state.
struct Worker<E> {
    exporter: Option<E>,
    runtime: tokio::runtime::Runtime,
    spans: Receiver<SpanData>,
    flushes: Receiver<Sender<()>>,
    counts: Arc<Counts>,
    batch: Vec<SpanData>,
    metrics: Option<Pipe>,
}

impl<E: SpanExporter> Worker<E> {
    fn run(mut self) {
        let mut due: Option<Instant> = None;
        let interval = self.metrics.as_ref().map(|m| m.interval);
        let mut metrics_due = interval.map(|i| Instant::now() + i);
        loop {
            let next = due.into_iter().chain(metrics_due).min();
            let wait = next.map_or(Duration::from_secs(3600), |d| {
                d.saturating_duration_since(Instant::now())
            });
            crossbeam_channel::select! {
                recv(self.spans) -> span => match span {
                    Ok(span) => {
                        self.batch.push(span);
                        due.get_or_insert_with(|| Instant::now() + BATCH_DELAY);
                        if self.batch.len() >= MAX_BATCH {
                            self.send();
                            due = None;
                        }
                    }
                    // The processor is gone (its provider was dropped).
                    Err(_) => {
                        self.send();
                        self.send_metrics();
                        return;
                    }
                },
                recv(self.flushes) -> done => match done {
                    Ok(done) => {
                        // Everything queued before the flush was asked is in the queue.
                        while let Ok(span) = self.spans.try_recv() {
                            self.batch.push(span);
                            if self.batch.len() >= MAX_BATCH {
                                self.send();
                            }
                        }
                        self.send();
                        due = None;
                        self.send_metrics();
                        metrics_due = interval.map(|i| Instant::now() + i);
                        let _ = done.send(());
                    }
                    Err(_) => {
                        self.send();
                        self.send_metrics();
                        return;
                    }
                },
                default(wait) => {
                    let now = Instant::now();
                    if due.is_some_and(|d| d <= now) {
                        self.send();
                        due = None;
                    }
                    if metrics_due.is_some_and(|d| d <= now) {
                        self.send_metrics();
                        metrics_due = interval.map(|i| Instant::now() + i);
                    }
                }
            }
        }
    }

    /// Sends the metrics when something was recorded since the last time.
    fn send_metrics(&mut self) {
        let Some(metrics) = &self.metrics else {
            return;
        };
        if metrics.export(&self.runtime) == Some(false) {
            self.counts
                .metric_exports_failed
                .fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Sends the batch; the exporter's and the client's timeouts bound it.
    fn send(&mut self) {
        if self.batch.is_empty() {
            return;
        }
        let batch = std::mem::take(&mut self.batch);
        let n = batch.len() as u64;
        let Some(exporter) = &self.exporter else {
            return;
        };
        // The error is not logged: it may quote the collector's answer, and this thread
        // has nowhere to report to but the counts.
        match self.runtime.block_on(exporter.export(batch)) {
            Ok(()) => self.counts.exported.fetch_add(n, Ordering::Relaxed),
            Err(_) => self.counts.failed.fetch_add(n, Ordering::Relaxed),
        };
    }
}

/// Blocks SIGPIPE on this thread: a write to a collector that closed its connection
/// fails with `EPIPE` instead of ending a C host whose SIGPIPE is fatal.
fn block_sigpipe() {
    // SAFETY: a zeroed sigset_t is a valid argument to sigemptyset, which initializes
    // it; pthread_sigmask only changes this thread's mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGPIPE);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}
