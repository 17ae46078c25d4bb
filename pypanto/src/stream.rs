//! Owns the Python `Stream`: one turn as an iterator, over `panto_pull::Stream`.
//!
//! **One GIL release per burst.** Events reach the pull stream's queue in bursts. A
//! `__next__` that finds its native buffer empty first drains, without waiting and
//! without releasing the GIL, whatever is ready (`try_next`). Only when nothing is ready
//! does it release the GIL, wait for the next event, and drain the rest of that burst
//! before taking the GIL back. The events of a burst are then handed out from the
//! buffer, each `__next__` converting one Rust event into its Python object.
//!
//! **Ctrl-C.** A wait on the main thread lasts at most 50 ms before the signal handlers
//! run (`check_signals`); an exception there (`KeyboardInterrupt`) cancels the turn,
//! waits for it to end (the history is then valid) and propagates. No signal handler is
//! installed. Waits on other threads end on `cancel()` instead, which wakes them at once.
//!
//! **Threads.** The class is frozen and every method takes `&self`: `cancel()` and
//! `submit_tool_result()` work from any thread while another is blocked in `__next__`
//! (they use the lock-free `StreamControl`); the consumer state sits behind a mutex that
//! is only ever held briefly with the GIL, or for a bounded wait without it.

use std::collections::HashMap;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError, TryLockError};
use std::time::{Duration, Instant};

use panto::Event;
use panto_pull::{Next, StreamControl};
use pyo3::exceptions::{PyStopAsyncIteration, PyStopIteration};
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::PyTraverseError;

use crate::errors::{to_pyerr, IntoPy};
use crate::events;

/// Most events moved into the native buffer at once.
const BURST: usize = 1024;
/// Longest wait on the main thread before the signal handlers run.
const MAIN_THREAD_SLICE: Duration = Duration::from_millis(50);
/// Longest wait on other threads before the shutdown flag is looked at (a `cancel()`
/// wakes them at once).
const OTHER_THREAD_SLICE: Duration = Duration::from_millis(250);

/// Set by the package's `atexit` hook: the interpreter is about to finalize.
static SHUTTING_DOWN: AtomicBool = AtomicBool::new(false);

/// Every stream that is alive, so the `atexit` hook can cancel them all.
static LIVE: OnceLock<Mutex<HashMap<u64, StreamControl>>> = OnceLock::new();
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn live() -> MutexGuard<'static, HashMap<u64, StreamControl>> {
    LIVE.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
}

/// Cancels every live stream and makes waits that end from now on, off the main
/// thread, park instead of re-entering an interpreter that is finalizing.
pub fn shutdown() {
    SHUTTING_DOWN.store(true, Ordering::SeqCst);
    for control in live().values() {
        control.cancel();
    }
}

/// Waits without the GIL that end after shutdown began never come back to Python: a
/// thread re-attaching to a finalizing interpreter is torn down under our feet.
fn park_if_shutting_down(main: bool) {
    if !main && SHUTTING_DOWN.load(Ordering::SeqCst) {
        loop {
            std::thread::park();
        }
    }
}

thread_local! {
    static IS_MAIN: std::cell::Cell<Option<bool>> = const { std::cell::Cell::new(None) };
}

/// Whether this is Python's main thread (the only one signal handlers run on).
fn is_main_thread(py: Python<'_>) -> bool {
    if let Some(main) = IS_MAIN.with(|m| m.get()) {
        return main;
    }
    let main = (|| -> PyResult<bool> {
        let threading = py.import("threading")?;
        let main = threading.call_method0("main_thread")?.getattr("ident")?;
        let me = threading.call_method0("get_ident")?;
        main.eq(me)
    })()
    .unwrap_or(false);
    IS_MAIN.with(|m| m.set(Some(main)));
    main
}

#[derive(Clone)]
enum End {
    /// `message_complete` is in the buffer or was handed out; then the stream is exhausted.
    Done,
    Failed(panto::Error),
}

/// The consumer side: the pull stream and the burst taken from it.
struct Consumer {
    /// `None` once closed (dropping it ended the turn).
    stream: Option<panto_pull::Stream>,
    buf: VecDeque<Event>,
    end: Option<End>,
    /// The `message_complete` handed out, for `final()`.
    complete: Option<Event>,
}

impl Consumer {
    fn push(&mut self, ev: Event) {
        if ev.is_terminal() {
            self.end = Some(End::Done);
        }
        self.buf.push_back(ev);
    }

    fn take(&mut self, next: Result<Next, panto::Error>) -> bool {
        match next {
            Ok(Next::Event(ev)) => {
                self.push(ev);
                true
            }
            Ok(Next::Pending) => false,
            Ok(Next::Done) => {
                self.end = Some(End::Done);
                true
            }
            Err(e) => {
                self.end = Some(End::Failed(e));
                true
            }
        }
    }

    /// Moves what is ready into the buffer, never waiting.
    fn drain(&mut self) {
        while self.end.is_none() && self.buf.len() < BURST {
            let Some(stream) = self.stream.as_mut() else {
                return;
            };
            let next = stream.try_next();
            if !self.take(next) {
                return;
            }
        }
    }

    fn ready(&self) -> bool {
        !self.buf.is_empty() || self.end.is_some()
    }

    /// Waits up to `timeout` for the next event, then drains the rest of its burst.
    /// Called without the GIL.
    fn wait(&mut self, timeout: Duration) {
        if self.ready() {
            return;
        }
        let Some(stream) = self.stream.as_mut() else {
            return;
        };
        let next = stream.next_timeout(timeout);
        if self.take(next) {
            self.drain();
        }
    }
}

/// What a look at the buffer gave.
enum Took {
    Event(Event),
    Done,
    Failed(panto::Error),
    Nothing,
}

/// One turn as an iterator of events, and a context manager that closes it. Returned
/// by `Agent.stream()`.
///
/// `MessageComplete` is the last event; every later `__next__` raises `StopIteration`.
/// A failure raises the `PantoError` subclass of its kind, again on every later call.
#[pyclass(frozen, module = "panto", name = "Stream")]
pub struct Stream {
    state: Mutex<Consumer>,
    control: StreamControl,
    /// `message_complete` was handed out: closing or cancelling changes nothing then.
    completed: AtomicBool,
    /// Called with each `ToolCallStart(host=True)` before it is handed out (the
    /// package's runner of `@panto.tool` functions); its `cancel()` is called once when
    /// the stream fails or is closed before its end.
    on_host_call: Option<Py<PyAny>>,
    hook_cancelled: AtomicBool,
    /// How many times a consumer released the GIL to wait (diagnostics: with bursts,
    /// far fewer than the events).
    waits: AtomicU64,
    id: u64,
}

impl Stream {
    pub fn new(stream: panto_pull::Stream, on_host_call: Option<Py<PyAny>>) -> Stream {
        let control = stream.control();
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        live().insert(id, control.clone());
        Stream {
            state: Mutex::new(Consumer {
                stream: Some(stream),
                buf: VecDeque::with_capacity(64),
                end: None,
                complete: None,
            }),
            control,
            completed: AtomicBool::new(false),
            on_host_call,
            hook_cancelled: AtomicBool::new(false),
            waits: AtomicU64::new(0),
            id,
        }
    }

    /// The consumer state, taken with the GIL held but never blocking with it: if
    /// another thread holds it (in a wait without the GIL), wait for it without the GIL.
    fn lock(&self, py: Python<'_>) -> MutexGuard<'_, Consumer> {
        loop {
            match self.state.try_lock() {
                Ok(g) => return g,
                Err(TryLockError::Poisoned(p)) => return p.into_inner(),
                Err(TryLockError::WouldBlock) => {
                    let main = is_main_thread(py);
                    py.detach(|| {
                        drop(self.state.lock());
                        park_if_shutting_down(main);
                    })
                }
            }
        }
    }

    fn lock_detached(&self) -> MutexGuard<'_, Consumer> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// After a `cancel()` (from any thread) no event is handed out unless
    /// `message_complete` already was: the buffer is dropped and the turn is waited for.
    fn settle_cancel(&self, py: Python<'_>, c: &mut MutexGuard<'_, Consumer>) {
        if !self.control.is_cancelled() || self.completed.load(Ordering::SeqCst) {
            return;
        }
        if matches!(c.end, Some(End::Failed(_))) && c.stream.is_none() {
            return;
        }
        c.buf.clear();
        if !matches!(c.end, Some(End::Failed(_))) {
            c.end = Some(End::Failed(panto::Error::cancelled()));
        }
        if let Some(stream) = c.stream.take() {
            // Dropping waits for the turn's task to end (the history is then whole).
            py.detach(|| drop(stream));
        }
    }

    /// Takes the next item: from the buffer, else whatever is ready now.
    fn take(&self, py: Python<'_>) -> Took {
        let mut c = self.lock(py);
        self.settle_cancel(py, &mut c);
        if c.buf.is_empty() && c.end.is_none() {
            c.drain();
        }
        if let Some(ev) = c.buf.pop_front() {
            if ev.is_terminal() {
                self.completed.store(true, Ordering::SeqCst);
                c.complete = Some(ev.clone());
            }
            return Took::Event(ev);
        }
        match &c.end {
            Some(End::Done) => Took::Done,
            Some(End::Failed(e)) => Took::Failed(e.clone()),
            None => Took::Nothing,
        }
    }

    /// Turns a taken event into its Python object, running the host-call hook first.
    fn deliver(&self, py: Python<'_>, ev: Event) -> PyResult<Py<PyAny>> {
        let host = events::host_call(&ev);
        let obj = events::to_py(py, ev)?;
        if host {
            if let Some(hook) = &self.on_host_call {
                hook.bind(py).call1((obj.bind(py),))?;
            }
        }
        Ok(obj)
    }

    fn fail(&self, py: Python<'_>, e: panto::Error) -> PyErr {
        self.cancel_hook(py);
        to_pyerr(py, e)
    }

    /// Tells the tool runner that no more results will be taken (once).
    fn cancel_hook(&self, py: Python<'_>) {
        if self.hook_cancelled.swap(true, Ordering::SeqCst) {
            return;
        }
        if let Some(hook) = &self.on_host_call {
            if let Err(e) = hook.bind(py).call_method0("cancel") {
                e.write_unraisable(py, Some(hook.bind(py)));
            }
        }
    }

    /// The next event (`None` once exhausted), waiting as long as it takes.
    fn next_event(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        let main = is_main_thread(py);
        let slice = if main {
            MAIN_THREAD_SLICE
        } else {
            OTHER_THREAD_SLICE
        };
        loop {
            match self.take(py) {
                Took::Event(ev) => return self.deliver(py, ev).map(Some),
                Took::Done => return Ok(None),
                Took::Failed(e) => return Err(self.fail(py, e)),
                Took::Nothing => {}
            }
            self.waits.fetch_add(1, Ordering::Relaxed);
            let ready = py.detach(|| {
                let ready = {
                    let mut c = self.lock_detached();
                    c.wait(slice);
                    c.ready()
                };
                // Also when woken by the exit hook's cancel: only daemon threads are
                // left then, and the interpreter may be finalizing by the time this
                // thread would re-attach.
                park_if_shutting_down(main);
                ready
            });
            if !ready {
                if let Err(interrupt) = py.check_signals() {
                    self.interrupt(py);
                    return Err(interrupt);
                }
            }
        }
    }

    /// A signal handler raised (Ctrl-C): cancel the turn and wait for it to end, so the
    /// history is valid when the exception reaches the caller.
    fn interrupt(&self, py: Python<'_>) {
        self.control.cancel();
        let mut c = self.lock(py);
        self.settle_cancel(py, &mut c);
        drop(c);
        self.cancel_hook(py);
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        live().remove(&self.id);
        if !self.completed.load(Ordering::SeqCst) {
            self.control.cancel();
        }
        // The pull stream's own drop then ends the turn; the cancel makes that prompt.
    }
}

#[pymethods]
impl Stream {
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        if let Some(hook) = &self.on_host_call {
            visit.call(hook)?;
        }
        Ok(())
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let c = self.lock(py);
        let state = if self.completed.load(Ordering::SeqCst) {
            "completed".to_owned()
        } else if let Some(End::Failed(e)) = &c.end {
            format!("failed: {}", e.kind)
        } else if c.stream.is_none() {
            "closed".to_owned()
        } else {
            "active".to_owned()
        };
        format!("<panto.Stream {state}>")
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        match self.next_event(py)? {
            Some(ev) => Ok(ev),
            None => Err(PyStopIteration::new_err(())),
        }
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.close(py);
        false
    }

    /// Cancels the turn. Safe from any thread, idempotent; a `__next__` blocked in
    /// another thread wakes and raises `StreamCancelledError` (unless `MessageComplete`
    /// was already handed out).
    fn cancel(&self) {
        if !self.completed.load(Ordering::SeqCst) {
            self.control.cancel();
        }
    }

    /// Ends the stream: cancels the turn if it is still running, waits for it to end and
    /// frees its connection. Idempotent. Later `__next__` calls raise
    /// `StreamCancelledError`, or `StopIteration` if the turn had completed.
    fn close(&self, py: Python<'_>) {
        self.cancel();
        let mut c = self.lock(py);
        let stream = c.stream.take();
        if !self.completed.load(Ordering::SeqCst) {
            c.buf.clear();
            if !matches!(c.end, Some(End::Failed(_))) {
                c.end = Some(End::Failed(panto::Error::cancelled()));
            }
        }
        drop(c);
        if let Some(stream) = stream {
            py.detach(|| drop(stream));
        }
        if !self.completed.load(Ordering::SeqCst) {
            self.cancel_hook(py);
        }
    }

    /// Answers the host-tool call `call_id` (announced by `ToolCallStart(host=True)`).
    /// Safe from any thread. An unknown or already answered id raises `ToolError`.
    #[pyo3(signature = (call_id, output, is_error = false))]
    fn submit_tool_result(
        &self,
        py: Python<'_>,
        call_id: &str,
        output: &str,
        is_error: bool,
    ) -> PyResult<()> {
        self.control
            .submit_tool_result(call_id, output, is_error)
            .py_err(py)
    }

    /// Consumes the rest of the stream and returns the final `MessageComplete`.
    fn r#final(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        while self.next_event(py)?.is_some() {}
        let c = self.lock(py);
        match &c.complete {
            Some(ev) => {
                let ev = ev.clone();
                drop(c);
                events::to_py(py, ev)
            }
            // Exhausted without a `message_complete` cannot happen (the pull stream
            // reports `incomplete` instead); say so rather than panic.
            None => Err(to_pyerr(
                py,
                panto::Error::internal("the stream ended without message_complete"),
            )),
        }
    }

    /// Consumes the rest of the stream and returns the final assistant message's text.
    fn text(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let complete = self.r#final(py)?;
        complete.bind(py).getattr("text").map(Bound::unbind)
    }

    /// True while the turn's result for this stream has been cancelled.
    #[getter]
    fn cancelled(&self) -> bool {
        self.control.is_cancelled()
    }

    /// Diagnostics: how many times a consumer released the GIL to wait for events.
    #[getter]
    fn waits(&self) -> u64 {
        self.waits.load(Ordering::Relaxed)
    }

    /// Diagnostics: a consumer is blocked waiting for this stream's next event.
    fn consumer_waiting(&self) -> bool {
        self.control.consumer_waiting()
    }

    /// A handle with `cancel()` and `submit_tool_result()` that does not keep the
    /// stream alive (for tool runners).
    fn control(&self) -> Control {
        Control {
            control: self.control.clone(),
        }
    }

    /// The async path, on the event loop thread: the next event if one is ready now (or
    /// within the few microseconds a burst being produced right now takes), else
    /// `None`; raises `StopAsyncIteration` once exhausted. Never blocks.
    fn _try_next(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        let mut took = self.take(py);
        if matches!(took, Took::Nothing) {
            // While the turn is being polled on its worker, its next burst is microseconds
            // away: the pull stream spins for it (at most 20 µs, and only then) when asked
            // with a zero timeout. That costs the loop far less than a hop to a thread.
            self.waits.fetch_add(1, Ordering::Relaxed);
            py.detach(|| self.lock_detached().wait(Duration::ZERO));
            took = self.take(py);
        }
        match took {
            Took::Event(ev) => self.deliver(py, ev).map(Some),
            Took::Done => Err(PyStopAsyncIteration::new_err(())),
            Took::Failed(e) => Err(self.fail(py, e)),
            Took::Nothing => Ok(None),
        }
    }

    /// The async path, on a worker thread: waits without the GIL until something is ready
    /// (an event, the end, a failure, a cancel) or `timeout` seconds pass (`None`: no
    /// limit). Returns whether something is ready.
    #[pyo3(signature = (timeout = None))]
    fn _wait(&self, py: Python<'_>, timeout: Option<f64>) -> bool {
        let deadline = timeout
            .filter(|t| t.is_finite() && *t >= 0.0)
            .and_then(|t| Instant::now().checked_add(Duration::from_secs_f64(t.min(1e9))));
        let main = is_main_thread(py);
        self.waits.fetch_add(1, Ordering::Relaxed);
        py.detach(|| loop {
            let slice = match deadline {
                Some(d) => d
                    .saturating_duration_since(Instant::now())
                    .min(OTHER_THREAD_SLICE),
                None => OTHER_THREAD_SLICE,
            };
            let ready = {
                let mut c = self.lock_detached();
                c.wait(slice);
                c.ready() || c.stream.is_none() || self.control.is_cancelled()
            };
            park_if_shutting_down(main);
            if ready {
                return true;
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return false;
            }
        })
    }
}

/// `cancel()` and `submit_tool_result()` of one stream, without keeping it alive.
#[pyclass(frozen, module = "panto._native", name = "StreamControl")]
pub struct Control {
    control: StreamControl,
}

#[pymethods]
impl Control {
    fn cancel(&self) {
        self.control.cancel();
    }

    #[getter]
    fn cancelled(&self) -> bool {
        self.control.is_cancelled()
    }

    #[pyo3(signature = (call_id, output, is_error = false))]
    fn submit_tool_result(
        &self,
        py: Python<'_>,
        call_id: &str,
        output: &str,
        is_error: bool,
    ) -> PyResult<()> {
        self.control
            .submit_tool_result(call_id, output, is_error)
            .py_err(py)
    }
}
