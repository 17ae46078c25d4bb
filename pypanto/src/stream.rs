//! Owns the Python `Stream`: one turn as an iterator, over `panto_pull::Stream`, which
//! alone decides what is reported (events, the end, a failure, a winning cancel); this
//! module keeps no terminal state of its own and asks the pull stream (`state()`).
//!
//! **One GIL release per burst.** Events reach the pull stream's queue in bursts. A
//! `__next__` takes what is ready without waiting and without releasing the GIL
//! (`try_next`). Only when nothing is ready does it release the GIL and wait until
//! something is (`wait_ready`), which also reads the rest of that burst ahead into the
//! pull stream before the GIL is taken back. The events of a burst are then handed out
//! by `try_next`, each `__next__` converting one Rust event into its Python object.
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
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError, TryLockError};
use std::time::{Duration, Instant};

use panto::Event;
use panto_pull::{Next, StreamControl, StreamState};
use pyo3::exceptions::{PyStopAsyncIteration, PyStopIteration};
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::PyTraverseError;

use crate::durable::{input_to_py, Checkpoint};
use crate::errors::{to_pyerr, IntoPy};
use crate::events;
use crate::text::Text;

/// Most events a wait reads ahead into the pull stream at once.
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

/// The consumer side: the pull stream, and the `message_complete` handed out.
struct Consumer {
    stream: panto_pull::Stream,
    /// The `message_complete` handed out, for `final()`.
    complete: Option<Event>,
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
    /// Called with each `ToolCallStart(host=True)` before it is handed out (the
    /// package's runner of `@panto.tool` functions); its `cancel()` is called once when
    /// the stream fails or is closed before its end.
    on_host_call: Option<Py<PyAny>>,
    hook_cancelled: AtomicBool,
    /// The package's instrumentation of this turn (`panto.instrument`), if any: its
    /// `event(ev)` is called with each event handed out, its `end(error)` when the
    /// stream fails (the exception) or is closed before its end (`None`).
    observer: OnceLock<Py<PyAny>>,
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
                stream,
                complete: None,
            }),
            control,
            on_host_call,
            hook_cancelled: AtomicBool::new(false),
            observer: OnceLock::new(),
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

    /// Takes what the pull stream has ready now, never waiting for the turn: an event,
    /// the end, a failure, or `Pending`.
    fn take(&self, py: Python<'_>) -> Result<Next, panto::Error> {
        self.take_more(py, false).0
    }

    /// `take`, and with `more`, whether anything else is ready after the event taken
    /// (`panto_pull::Stream::ready_now`, under the same lock; false otherwise).
    fn take_more(&self, py: Python<'_>, more: bool) -> (Result<Next, panto::Error>, bool) {
        let mut c = self.lock(py);
        let stream = &mut c.stream;
        // A cancelled stream's answer waits for its turn to end (the history is then
        // whole when the exception reaches the caller): not with the GIL.
        let next = if self.control.is_cancelled() {
            py.detach(|| stream.try_next())
        } else {
            stream.try_next()
        };
        let mut ready = false;
        if let Ok(Next::Event(ev)) = &next {
            if ev.is_terminal() {
                c.complete = Some(ev.clone());
            }
            // Never waits; finding nothing, it leaves the readiness cleared as a
            // `Pending` would.
            ready = more && c.stream.ready_now();
        }
        (next, ready)
    }

    /// Waits without the GIL, up to `timeout`, until the pull stream has something to
    /// report, reading the rest of that burst ahead. Whether something is ready.
    fn wait_ready(&self, timeout: Duration) -> bool {
        self.lock_detached().stream.wait_ready(timeout, BURST)
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
        if let Some(observer) = self.observer.get() {
            // Telemetry never changes the turn: its failure is reported, not raised.
            if let Err(e) = observer.bind(py).call_method1("event", (obj.bind(py),)) {
                e.write_unraisable(py, Some(observer.bind(py)));
            }
        }
        Ok(obj)
    }

    /// `_try_next` and `_try_next_more`: the next event if one is ready now, and (with
    /// `more`) whether anything else is ready after it; raises `StopAsyncIteration` once
    /// exhausted. Never blocks.
    fn try_next_more(&self, py: Python<'_>, more: bool) -> PyResult<Option<(Py<PyAny>, bool)>> {
        let mut took = self.take_more(py, more);
        if matches!(took.0, Ok(Next::Pending)) {
            // Whatever the worker's outbox holds is taken now, without waiting (the
            // pull stream's zero-timeout wait), rather than at its next hand-off.
            self.waits.fetch_add(1, Ordering::Relaxed);
            py.detach(|| self.wait_ready(Duration::ZERO));
            took = self.take_more(py, more);
        }
        match took {
            (Ok(Next::Event(ev)), ready) => Ok(Some((self.deliver(py, ev)?, ready))),
            (Ok(Next::Done), _) => Err(PyStopAsyncIteration::new_err(())),
            (Err(e), _) => Err(self.fail(py, e)),
            (Ok(Next::Pending), _) => Ok(None),
        }
    }

    fn fail(&self, py: Python<'_>, e: panto::Error) -> PyErr {
        self.cancel_hook(py);
        let err = to_pyerr(py, e);
        self.observe_end(py, Some(err.value(py).as_any()));
        err
    }

    /// Tells the observer, if any, that the stream ended without `MessageComplete`.
    fn observe_end(&self, py: Python<'_>, error: Option<&Bound<'_, PyAny>>) {
        if let Some(observer) = self.observer.get() {
            if let Err(e) = observer.bind(py).call_method1("end", (error,)) {
                e.write_unraisable(py, Some(observer.bind(py)));
            }
        }
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
                Ok(Next::Event(ev)) => return self.deliver(py, ev).map(Some),
                Ok(Next::Done) => return Ok(None),
                Err(e) => return Err(self.fail(py, e)),
                Ok(Next::Pending) => {}
            }
            self.waits.fetch_add(1, Ordering::Relaxed);
            let ready = py.detach(|| {
                let ready = self.wait_ready(slice);
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
        self.end(py);
        self.cancel_hook(py);
        self.observe_end(py, None);
    }

    /// Ends the pull stream, waiting for its turn without the GIL: a stream that has not
    /// handed out `message_complete` fails `cancelled` from now on. Whether it completed.
    fn end(&self, py: Python<'_>) -> bool {
        let mut c = self.lock(py);
        let stream = &mut c.stream;
        py.detach(|| stream.close());
        c.stream.state() == StreamState::Done
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        live().remove(&self.id);
        // The pull stream's own drop then cancels the turn (unless it completed) and
        // waits for it to end.
    }
}

#[pymethods]
impl Stream {
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        if let Some(hook) = &self.on_host_call {
            visit.call(hook)?;
        }
        if let Some(observer) = self.observer.get() {
            visit.call(observer)?;
        }
        Ok(())
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let state = match self.lock(py).stream.state() {
            StreamState::Done => "completed".to_owned(),
            StreamState::Failed(e) => format!("failed: {}", e.kind),
            StreamState::Running => "active".to_owned(),
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

    /// Returns the stream, for `with agent.stream(...) as stream:`.
    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Ends the turn when the block ends (`close()`): a turn still running is cancelled
    /// and waited for, and the history it leaves is valid. Exceptions propagate.
    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.close(py);
        false
    }

    /// Cancels the turn. Safe from any thread, idempotent; a `__next__` blocked in
    /// another thread wakes and raises `StreamCancelledError` (unless `MessageComplete`
    /// was already handed out).
    fn cancel(&self) {
        self.control.cancel();
    }

    /// Ends the stream: cancels the turn if it is still running, waits for it to end and
    /// frees its connection. Idempotent. Later `__next__` calls raise
    /// `StreamCancelledError`, or `StopIteration` if the turn had completed.
    fn close(&self, py: Python<'_>) {
        // First, so that a `__next__` waiting in another thread wakes and lets go of
        // the stream.
        self.control.cancel();
        if !self.end(py) {
            self.cancel_hook(py);
            self.observe_end(py, None);
        }
    }

    /// Gives the stream its instrumentation (the package's `panto.instrument`): an
    /// object with `event(ev)` and `end(error)`. Once; later calls are ignored.
    fn _observe(&self, observer: Py<PyAny>) {
        let _ = self.observer.set(observer);
    }

    /// Answers the host-tool call `call_id` (announced by `ToolCallStart(host=True)`).
    /// Safe from any thread. An unknown or already answered id raises `ToolError`.
    #[pyo3(signature = (call_id, output, is_error = false))]
    fn submit_tool_result(
        &self,
        py: Python<'_>,
        call_id: Text<'_>,
        output: Text<'_>,
        is_error: bool,
    ) -> PyResult<()> {
        self.control
            .submit_tool_result(&call_id, &output, is_error)
            .py_err(py)
    }

    /// Answers the host-tool call `call_id` with text and images: `parts` is a list of
    /// `str` and `panto.Image`, in order (the model reads the text joined by newlines
    /// and sees the images; `ToolResult.parts` carries them). Safe from any thread. A
    /// part that is not a `str` or a `panto.Image` raises `ToolError`, and so does an
    /// unknown or already answered id.
    #[pyo3(signature = (call_id, parts, is_error = false))]
    fn submit_tool_parts(
        &self,
        py: Python<'_>,
        call_id: Text<'_>,
        parts: Vec<Bound<'_, PyAny>>,
        is_error: bool,
    ) -> PyResult<()> {
        let parts = tool_parts(py, parts)?;
        self.control
            .submit_tool_parts(&call_id, parts, is_error)
            .py_err(py)
    }

    /// The turn at its latest step boundary, as a `panto.Checkpoint` (`None` before the
    /// turn started). Once `__next__` has handed out a call's `ToolResult`, or the first
    /// event after a response's `MessageEnd`, the checkpoint includes that result or that
    /// response. Never waits; safe from any thread.
    fn checkpoint(&self) -> Option<Checkpoint> {
        self.control.checkpoint().map(|inner| Checkpoint { inner })
    }

    /// Queues a user message into the running turn (safe from any thread; never
    /// waits): delivered at the next step boundary, after the current step's tool
    /// results and before the next request, with an event saying so; if the
    /// model's message would have ended the turn, the turn goes on so the model
    /// answers it. `input` is text, or a list of text, `panto.Image` and
    /// `panto.Document` parts (as `Agent.stream` takes it). `ConfigError` once the turn
    /// has ended (the message was not queued).
    fn steer(&self, py: Python<'_>, input: &Bound<'_, PyAny>) -> PyResult<()> {
        steer(py, &self.control, input)
    }

    /// The steering messages the turn did not deliver because it ended first (failed,
    /// cancelled, paused or reached a limit), oldest first; each is given once. A
    /// message is its text, or its parts when it has attachments.
    fn undelivered<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyAny>>> {
        undelivered(py, &self.control)
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

    /// Where the stream stands, for the async path's `aclose`: `"running"`, `"done"`
    /// (`message_complete` handed out), `"cancelled"` or `"failed"` (another error
    /// handed out or about to be). Never waits.
    #[getter]
    fn _state(&self, py: Python<'_>) -> &'static str {
        match self.lock(py).stream.state() {
            StreamState::Running => "running",
            StreamState::Done => "done",
            StreamState::Failed(e) if e.kind == panto::ErrorKind::Cancelled => "cancelled",
            StreamState::Failed(_) => "failed",
        }
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
        Ok(self.try_next_more(py, false)?.map(|(ev, _)| ev))
    }

    /// The async path's one call per event: what `_try_next` returns, with whether
    /// anything else is ready right after it (more events, the end, a failure, a
    /// cancel), as `(event, more)`; `None` when nothing is ready. After `more` is false,
    /// as after `None`, the stream's ready set (or descriptor) reports the next arrival
    /// — once: a caller that goes straight to waiting must not lose that report if
    /// the loop's reader takes it before the wait begins (`AsyncStream`'s `armed`).
    fn _try_next_more(&self, py: Python<'_>) -> PyResult<Option<(Py<PyAny>, bool)>> {
        self.try_next_more(py, true)
    }

    /// Makes the stream report its readiness to `set` under `token` (the async path's way
    /// to wait: one `ReadySet` per event loop, watched with one `add_reader`) instead of
    /// through a descriptor of its own. `OSError` if it cannot (attached before, or it
    /// has its own descriptor; not a Unix system).
    fn _attach(&self, set: &ReadySet, token: u64) -> PyResult<()> {
        #[cfg(unix)]
        {
            self.control.attach(&set.set, token).map_err(|e| {
                pyo3::exceptions::PyOSError::new_err(format!(
                    "panto: cannot attach this stream to the ready set: {e}"
                ))
            })
        }
        #[cfg(not(unix))]
        {
            let _ = (set, token);
            Err(pyo3::exceptions::PyOSError::new_err(
                "panto: no ready sets on this system",
            ))
        }
    }

    /// The async path's readiness descriptor (`panto_pull::Stream::readiness_fd`): readable
    /// exactly while `_try_next` would return something; an event loop watches it
    /// (`add_reader`) instead of a thread waiting in `_wait`. Owned by the stream, which
    /// closes it when it is dropped: remove it from the loop first. `None` where there
    /// is none (not a Unix system); `OSError` if none can be made.
    fn _readiness_fd(&self) -> PyResult<Option<i64>> {
        #[cfg(unix)]
        {
            match self.control.readiness_fd() {
                Ok(fd) => Ok(Some(i64::from(fd))),
                Err(e) => Err(pyo3::exceptions::PyOSError::new_err(format!(
                    "panto: no readiness descriptor for this stream: {e}"
                ))),
            }
        }
        #[cfg(not(unix))]
        {
            Ok(None)
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
            let ready = self.wait_ready(slice);
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
/// One readiness descriptor for many streams (`panto_pull::ReadySet`): the async API
/// keeps one per event loop and gives its descriptor to the loop's `add_reader` once;
/// streams attached to it (`Stream._attach`) cost no descriptor each.
#[pyclass(frozen, module = "panto._native", name = "ReadySet")]
pub struct ReadySet {
    #[cfg(unix)]
    set: panto_pull::ReadySet,
}

#[pymethods]
impl ReadySet {
    /// A new set; `OSError` when no descriptor can be made (or not a Unix system).
    #[new]
    fn new() -> PyResult<ReadySet> {
        #[cfg(unix)]
        {
            panto_pull::ReadySet::new()
                .map(|set| ReadySet { set })
                .map_err(|e| {
                    pyo3::exceptions::PyOSError::new_err(format!("panto: no ready set: {e}"))
                })
        }
        #[cfg(not(unix))]
        {
            Err(pyo3::exceptions::PyOSError::new_err(
                "panto: no ready sets on this system",
            ))
        }
    }

    /// The set's descriptor: readable exactly while a stream's token waits to be taken.
    /// Owned by the set (closed when it is dropped).
    fn fd(&self) -> i64 {
        #[cfg(unix)]
        {
            i64::from(self.set.fd())
        }
        #[cfg(not(unix))]
        {
            -1
        }
    }

    /// Takes the tokens of every stream reported since the last call (each stream at
    /// most once); the descriptor is unreadable afterwards until the next report.
    fn take(&self) -> Vec<u64> {
        let mut all = Vec::new();
        #[cfg(unix)]
        {
            let mut buf = [0u64; 256];
            loop {
                let n = self.set.take(&mut buf);
                all.extend_from_slice(&buf[..n]);
                if n < buf.len() {
                    break;
                }
            }
        }
        all
    }
}

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
        call_id: Text<'_>,
        output: Text<'_>,
        is_error: bool,
    ) -> PyResult<()> {
        self.control
            .submit_tool_result(&call_id, &output, is_error)
            .py_err(py)
    }

    fn steer(&self, py: Python<'_>, input: &Bound<'_, PyAny>) -> PyResult<()> {
        steer(py, &self.control, input)
    }

    fn checkpoint(&self) -> Option<Checkpoint> {
        self.control.checkpoint().map(|inner| Checkpoint { inner })
    }

    fn undelivered<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyAny>>> {
        undelivered(py, &self.control)
    }

    /// Answers a host-tool call with text and image parts, in the form
    /// `Agent.stream(parts=…)` takes.
    #[pyo3(signature = (call_id, parts, is_error = false))]
    fn submit_tool_parts(
        &self,
        py: Python<'_>,
        call_id: Text<'_>,
        parts: Vec<Bound<'_, PyAny>>,
        is_error: bool,
    ) -> PyResult<()> {
        let parts = crate::agent::input_parts(py, &parts)?.into_parts();
        self.control
            .submit_tool_parts(&call_id, parts, is_error)
            .py_err(py)
    }
}

/// A steering message from a turn's input form: a `str`, or a sequence of `str`,
/// `panto.Image` and `panto.Document` (through their `_native()` form).
fn steer(py: Python<'_>, control: &StreamControl, input: &Bound<'_, PyAny>) -> PyResult<()> {
    let input = if input.is_instance_of::<pyo3::types::PyString>() {
        panto::Input::from(&*input.extract::<Text<'_>>()?)
    } else {
        let mut native = Vec::new();
        for part in input.try_iter()? {
            let part = part?;
            if part.is_instance_of::<pyo3::types::PyString>() || !part.hasattr("_native")? {
                native.push(part);
            } else {
                native.push(part.call_method0("_native")?);
            }
        }
        crate::agent::input_parts(py, &native)?
    };
    control.steer(input).map_err(|e| to_pyerr(py, *e.error))
}

fn undelivered<'py>(py: Python<'py>, control: &StreamControl) -> PyResult<Vec<Bound<'py, PyAny>>> {
    control
        .take_undelivered()
        .into_iter()
        .map(|input| input_to_py(py, input))
        .collect()
}

/// A tool result's parts from Python: `str` and `panto.Image` (through its `_native()`
/// form); anything else, a `panto.Document` included, is a `ToolError` naming its place.
pub(crate) fn tool_parts(
    py: Python<'_>,
    parts: Vec<Bound<'_, PyAny>>,
) -> PyResult<Vec<panto::Block>> {
    let image = py.import("panto._media")?.getattr("Image")?;
    let mut native = Vec::with_capacity(parts.len());
    for (i, part) in parts.into_iter().enumerate() {
        if part.is_instance_of::<pyo3::types::PyString>() {
            native.push(part);
        } else if part.is_instance(&image)? {
            native.push(part.call_method0("_native")?);
        } else {
            let e = panto::Error::new(
                panto::ErrorKind::Tool,
                format!("parts[{i}]: a tool result's part is a str or a panto.Image"),
            );
            return Err(crate::errors::to_pyerr(py, e));
        }
    }
    let input = crate::agent::input_parts(py, &native)?;
    Ok(input.into_parts())
}
