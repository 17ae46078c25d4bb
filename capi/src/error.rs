//! Owns `PantoError`, the error handle the non-stream calls hand out through their
//! `PantoError **err` parameter, and its accessors. Errors are values owned by the
//! caller, never thread-local state: goroutines and Python threads move between OS
//! threads, so "the last error of this thread" would be someone else's.

use std::ffi::c_char;

use panto_core::{Error, ErrorKind, Event};

use crate::boundary::guard;
use crate::types::*;

/// An error owned by the caller (`panto_error_free`). Its strings are kept
/// NUL-terminated so the accessors can hand out views.
pub struct PantoError {
    error: Error,
    message: Vec<u8>,
    provider_code: Option<Vec<u8>>,
    json: Vec<u8>,
}

fn terminated(s: &str) -> Vec<u8> {
    let mut v = Vec::with_capacity(s.len() + 1);
    v.extend_from_slice(s.as_bytes());
    v.push(0);
    v
}

fn view(v: &[u8]) -> PantoStr {
    PantoStr {
        ptr: v.as_ptr().cast::<c_char>(),
        len: v.len() - 1,
    }
}

impl PantoError {
    pub(crate) fn new(error: Error) -> Box<PantoError> {
        Box::new(PantoError {
            message: terminated(&error.message),
            provider_code: error.provider_code.as_deref().map(terminated),
            json: terminated(&error.to_json()),
            error,
        })
    }
}

/// The kind (`PANTO_ERR_*`) of `err`; 0 for NULL.
///
/// # Safety
/// `err` is NULL or a live error from this library.
#[no_mangle]
pub unsafe extern "C" fn panto_error_kind(err: *const PantoError) -> u32 {
    // SAFETY: NULL or a live error (this function's contract); `as_ref` checks NULL.
    unsafe { err.as_ref() }.map_or(0, |e| e.error.kind.code())
}

/// The message of `err`, borrowed from it; an empty string for NULL.
///
/// # Safety
/// `err` is NULL or a live error from this library.
#[no_mangle]
pub unsafe extern "C" fn panto_error_message(err: *const PantoError) -> PantoStr {
    // SAFETY: NULL or a live error (this function's contract); `as_ref` checks NULL.
    unsafe { err.as_ref() }.map_or(static_str(""), |e| view(&e.message))
}

/// The HTTP status behind `err`, 0 if none (and for NULL).
///
/// # Safety
/// `err` is NULL or a live error from this library.
#[no_mangle]
pub unsafe extern "C" fn panto_error_status(err: *const PantoError) -> u32 {
    // SAFETY: NULL or a live error (this function's contract); `as_ref` checks NULL.
    unsafe { err.as_ref() }.map_or(0, |e| u32::from(e.error.status))
}

/// Whether repeating the same request could succeed; false for NULL.
///
/// # Safety
/// `err` is NULL or a live error from this library.
#[no_mangle]
pub unsafe extern "C" fn panto_error_retryable(err: *const PantoError) -> bool {
    // SAFETY: NULL or a live error (this function's contract); `as_ref` checks NULL.
    unsafe { err.as_ref() }.is_some_and(|e| e.error.retryable)
}

/// The provider's own error type or code, borrowed from `err`; absent (`ptr` NULL) if
/// the provider sent none, and for NULL.
///
/// # Safety
/// `err` is NULL or a live error from this library.
#[no_mangle]
pub unsafe extern "C" fn panto_error_provider_code(err: *const PantoError) -> PantoStr {
    // SAFETY: NULL or a live error (this function's contract); `as_ref` checks NULL.
    unsafe { err.as_ref() }
        .and_then(|e| e.provider_code.as_deref())
        .map_or(PantoStr::ABSENT, view)
}

/// The canonical JSON of `err` (the final line of `panto run --json`), borrowed from it;
/// an empty string for NULL.
///
/// # Safety
/// `err` is NULL or a live error from this library.
#[no_mangle]
pub unsafe extern "C" fn panto_error_to_json(err: *const PantoError) -> PantoStr {
    // SAFETY: NULL or a live error (this function's contract); `as_ref` checks NULL.
    unsafe { err.as_ref() }.map_or(static_str(""), |e| view(&e.json))
}

/// Frees `err`; NULL is a no-op.
///
/// # Safety
/// `err` is NULL or a live error from this library, not used after this call.
#[no_mangle]
pub unsafe extern "C" fn panto_error_free(err: *mut PantoError) {
    if !err.is_null() {
        // Dropping strings cannot panic in practice; a panic must still not unwind.
        // SAFETY: a live error from this library (a Box), unused after this call (this
        // function's contract): taken back exactly once.
        let err = unsafe { Box::from_raw(err) };
        let _ = guard("panto_error_free", || drop(err));
    }
}

/// The canonical name of an error kind ("config", …), "unknown" for any other code.
#[no_mangle]
pub extern "C" fn panto_error_kind_name(kind: u32) -> PantoStr {
    let name = ErrorKind::from_code(kind).map_or("unknown", |k| k.as_str());
    static_str(name)
}

/// The canonical type name of an event kind ("message_start", …, "error"), "unknown"
/// for any other code (`PANTO_EV_NONE` included).
#[no_mangle]
pub extern "C" fn panto_event_kind_name(kind: u32) -> PantoStr {
    let name = if kind == PANTO_EV_ERROR {
        "error"
    } else {
        Event::type_name_of_code(kind).unwrap_or("unknown")
    };
    static_str(name)
}

/// A view of a static name. The names are ASCII words without NUL, so the NUL after
/// them comes from a table of terminated copies.
fn static_str(s: &'static str) -> PantoStr {
    static NAMES: std::sync::OnceLock<Vec<(&'static str, Vec<u8>)>> = std::sync::OnceLock::new();
    let names = NAMES.get_or_init(|| {
        let mut all: Vec<&'static str> = vec!["", "unknown", "error"];
        all.extend(ErrorKind::ALL.iter().map(|k| k.as_str()));
        all.extend(Event::TYPES.iter().copied());
        all.into_iter().map(|n| (n, terminated(n))).collect()
    });
    names
        .iter()
        .find(|(n, _)| *n == s)
        .map_or(PantoStr::ABSENT, |(_, v)| view(v))
}
