//! Owns the C host's OpenTelemetry export (ABI 1.3): `panto_telemetry_export` opts the
//! process in (`panto-otel`: OTLP/HTTP as the `OTEL_EXPORTER_OTLP_*` variables say) and
//! `panto_telemetry_flush` waits, bounded, until what was queued is sent. The spans, and
//! the `traceparent` turn option that parents them, are the core's.

use std::ffi::c_char;
use std::time::Duration;

use panto_core::{Error, ErrorKind};
use panto_otel::Export;

use crate::boundary::{guard, input_str, ErrOut};
use crate::error::PantoError;
use crate::types::PantoStatus;

/// Starts exporting every turn's spans, when an endpoint variable is set.
///
/// # Safety
/// See `panto.h`.
#[no_mangle]
pub unsafe extern "C" fn panto_telemetry_export(
    service_name: *const c_char,
    len: usize,
    exporting: *mut bool,
    err: *mut *mut PantoError,
) -> PantoStatus {
    const F: &str = "panto_telemetry_export";
    // SAFETY: `err` is NULL or writable during the call (panto.h).
    let out = unsafe { ErrOut::new(err) };
    if !exporting.is_null() {
        // SAFETY: non-NULL, and writable during the call (panto.h).
        unsafe { exporting.write(false) };
    }
    // SAFETY: NULL with len 0, or `len` bytes unchanged during the call (panto.h).
    let name = match unsafe { input_str(F, "service_name", service_name, len) } {
        Ok(name) => name,
        Err(e) => return out.fail(e),
    };
    let name = if name.is_empty() { "panto" } else { name };
    let started = guard(F, || Export::install(name)).and_then(|r| r);
    match started {
        Ok(export) => {
            if !exporting.is_null() {
                // SAFETY: non-NULL, and writable during the call (panto.h).
                unsafe { exporting.write(export.is_some()) };
            }
            out.status(Ok(()))
        }
        Err(e) => out.fail(Error::new(e.kind, format!("{F}: {}", e.message))),
    }
}

/// Waits, at most `timeout_ms`, until the spans finished before the call are sent.
///
/// # Safety
/// See `panto.h`.
#[no_mangle]
pub unsafe extern "C" fn panto_telemetry_flush(
    timeout_ms: u32,
    undelivered: *mut u64,
    err: *mut *mut PantoError,
) -> PantoStatus {
    const F: &str = "panto_telemetry_flush";
    // SAFETY: `err` is NULL or writable during the call (panto.h).
    let out = unsafe { ErrOut::new(err) };
    let flushed = guard(F, || match Export::installed() {
        None => (true, 0),
        Some(export) => {
            let done = export.flush(Duration::from_millis(u64::from(timeout_ms)));
            (done, export.dropped_spans() + export.failed_spans())
        }
    });
    let (done, lost) = match flushed {
        Ok(v) => v,
        Err(e) => return out.fail(e),
    };
    if !undelivered.is_null() {
        // SAFETY: non-NULL, and writable during the call (panto.h).
        unsafe { undelivered.write(lost) };
    }
    if done {
        out.status(Ok(()))
    } else {
        out.fail(Error::new(
            ErrorKind::Timeout,
            format!("{F}: the spans were not all sent within {timeout_ms} ms"),
        ))
    }
}
