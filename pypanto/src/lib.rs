//! `panto._native`: the native half of panto's Python package.
//!
//! ```text
//!  panto (pure Python: Agent, @tool, AsyncStream, exceptions)
//!    │ config JSON, prompt, host-call hook
//!    ▼
//!  _native.Agent ── stream() ──► _native Stream (= panto.Stream) ── __next__ ──► event objects
//!    │                              │ burst drain: try_next without the GIL released,
//!    ▼                              │ one GIL release per wait (next_timeout)
//!  panto::Agent (core)          panto_pull::Stream (worker threads, bounded queue)
//! ```
//!
//! Modules:
//! - [`agent`] — the native `Agent`: configuration from the core's JSON, history, start of a
//!   turn, compaction (cancellable through a `CancelToken`).
//! - [`stream`] — the `Stream` iterator: burst drain, Ctrl-C, cancel from any thread, the async hooks.
//! - [`events`] — one Python class per event kind, with the core's canonical JSON.
//! - [`errors`] — core errors as the Python exception of their kind.
//!
//! Nothing here panics across the boundary: every failure is a `panto::Error`, raised
//! as its Python class, or a Python exception that is propagated as is.

use pyo3::prelude::*;

mod agent;
mod errors;
mod events;
mod stream;

/// Every error kind of the core, in order: `(code, name)` pairs from `ErrorKind::ALL`.
#[pyfunction]
fn error_kinds() -> Vec<(u32, &'static str)> {
    panto::ErrorKind::ALL
        .iter()
        .map(|k| (k.code(), k.as_str()))
        .collect()
}

/// Every event type of the core, in order (`Event::TYPES`).
#[pyfunction]
fn event_types() -> Vec<&'static str> {
    panto::Event::TYPES.to_vec()
}

/// How many turns of pull streams are still running in this process (for leak checks).
#[pyfunction]
fn active_streams() -> usize {
    panto_pull::active_streams()
}

/// The interpreter is about to exit: cancel every live stream, and never let a thread
/// that waits without the GIL come back into a finalizing interpreter.
#[pyfunction]
fn _shutdown() {
    stream::shutdown();
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<agent::Agent>()?;
    m.add_class::<agent::CancelToken>()?;
    m.add_class::<stream::Stream>()?;
    m.add_class::<stream::Control>()?;
    events::register(m)?;
    m.add_function(wrap_pyfunction!(error_kinds, m)?)?;
    m.add_function(wrap_pyfunction!(event_types, m)?)?;
    m.add_function(wrap_pyfunction!(active_streams, m)?)?;
    m.add_function(wrap_pyfunction!(_shutdown, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
