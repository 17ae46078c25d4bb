//! `panto-capi`: the C ABI of panto, built as `libpanto.so` and `libpanto.a`.
//!
//! The contract is the hand-written `include/panto.h`; it is the manual (ownership,
//! blocking and threads, per function). This crate implements it over the pull adapter:
//!
//! ```text
//!  panto_agent_new(json) ──► Agent::from_json                       (agent)
//!  panto_agent_stream ─────► panto_pull::Stream (turn on a worker)  (agent → stream)
//!  panto_next_event ───────► Stream::next ─► Record ─► PantoEvent   (stream, record)
//!       PantoEvent views point into the Record, which the stream keeps until its next call
//!  panto_stream_cancel / submit_tool_result / readiness_fd ─► StreamControl (any thread)
//!  panto_stream_checkpoint / steer / take_undelivered ──────► StreamControl (any thread)
//!  panto_agent_resume(checkpoint, answers) ─► panto_pull::resume        (agent → stream)
//!  panto_telemetry_export / flush ─► panto_otel::Export (the turns' spans, OTLP/HTTP)
//! ```
//!
//! Modules:
//! - [`types`] — every `#[repr(C)]` type and constant of the header.
//! - [`boundary`] — panics caught at every export, pointer and UTF-8 checks, errors out.
//! - [`error`] — `PantoError` and its accessors; kind and event names.
//! - [`agent`] — `PantoAgent`: configuration, history, starting a turn, compaction.
//! - [`cancel`] — `PantoCancelToken`: cancels a blocking call (compaction) from any thread.
//! - [`stream`] — `PantoStream`: next (blocking, timed, polled), the readiness
//!   descriptor, cancel, host tools, free.
//! - [`ready_set`] — `PantoReadySet` (ABI 1.2): one readiness descriptor for many
//!   streams (`panto_stream_attach`).
//! - [`durable`] — durable turns (ABI 1.3): checkpoint, resume with answers, steering.
//! - [`mcp_oauth`] — the host's OAuth callbacks for MCP servers (ABI 1.3).
//! - [`mcp_client_hooks`] — the host's answers to MCP servers' sampling and
//!   elicitation requests (ABI 1.3).
//! - [`record`] — the memory behind a delivered event, and its canonical JSON.
//! - [`string`] — `PantoString`, the owned string the caller frees.
//! - [`telemetry`] — OTLP/HTTP export of the turns' spans (ABI 1.3), opted into by the
//!   host.
//!
//! `cbindgen` reads this crate only to check the header for drift
//! (`scripts/check-header.sh`); it never writes `include/panto.h`.

pub mod agent;
pub mod boundary;
pub mod cancel;
pub mod durable;
pub mod error;
pub mod mcp_client_hooks;
pub mod mcp_oauth;
pub mod mcp_resources;
pub mod ready_set;
pub mod record;
pub mod stream;
pub mod string;
pub mod telemetry;
pub mod types;

use types::{PANTO_ABI_VERSION_MAJOR, PANTO_ABI_VERSION_MINOR};

/// The ABI version of the loaded library: `(major << 16) | minor`.
#[no_mangle]
pub extern "C" fn panto_abi_version() -> u32 {
    (PANTO_ABI_VERSION_MAJOR << 16) | PANTO_ABI_VERSION_MINOR
}

#[cfg(test)]
mod tests;
