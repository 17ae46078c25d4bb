//! Owns what every exported function does at the border between C and Rust: catching
//! panics, checking pointers, validating input strings, and handing out errors. Nothing
//! here knows about agents or streams.

use std::any::Any;
use std::ffi::c_char;
use std::panic::{catch_unwind, AssertUnwindSafe};

use panto_core::{Error, ErrorKind};

use crate::error::PantoError;
use crate::types::{PantoStatus, PANTO_ERROR, PANTO_OK};

/// Runs `f`, turning a panic into an `internal` error (never an unwind into C).
pub(crate) fn guard<T>(what: &str, f: impl FnOnce() -> T) -> Result<T, Error> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|p| panic_error(what, p.as_ref()))
}

pub(crate) fn panic_error(what: &str, payload: &(dyn Any + Send)) -> Error {
    let why = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string panic payload".into());
    Error::internal(format!(
        "{what}: internal error (a panic was caught): {why}"
    ))
}

/// An invalid argument: the `config` kind (DESIGN.md's class for bad caller input),
/// except where a function says otherwise.
pub(crate) fn invalid(function: &str, message: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::Config, format!("{function}: {message}"))
}

/// A borrowed UTF-8 string from `ptr`/`len`. `ptr` may be NULL only when `len` is 0.
/// Invalid UTF-8 is an error, never replaced.
///
/// # Safety
/// A non-NULL `ptr` points to `len` readable bytes that stay unchanged during the call.
pub(crate) unsafe fn input_str<'a>(
    function: &str,
    name: &str,
    ptr: *const c_char,
    len: usize,
) -> Result<&'a str, Error> {
    if ptr.is_null() {
        if len == 0 {
            return Ok("");
        }
        return Err(invalid(function, format_args!("{name} is NULL")));
    }
    if len > isize::MAX as usize {
        return Err(invalid(
            function,
            format_args!("{name}: length {len} is too large"),
        ));
    }
    // SAFETY: `ptr` is non-NULL and points to `len` readable bytes that stay unchanged
    // during the call (this function's contract); `len` fits an isize (checked above).
    let bytes = unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) };
    std::str::from_utf8(bytes).map_err(|e| {
        invalid(
            function,
            format_args!(
                "{name} is not valid UTF-8 (invalid byte at offset {})",
                e.valid_up_to()
            ),
        )
    })
}

/// The optional error out-pointer of an exported function (`PantoError **err`), checked
/// once on entry: where the call's failure goes. Made by [`ErrOut::new`], whose caller
/// vouches for the pointer, so that reporting a failure is safe code everywhere after.
#[derive(Clone, Copy)]
pub(crate) struct ErrOut(*mut *mut PantoError);

impl ErrOut {
    /// Takes `err` and clears `*err` (so a caller never sees a stale error).
    ///
    /// # Safety
    /// `err` is NULL or points to storage for a pointer that is writable for as long as
    /// the returned value is used (the call).
    pub(crate) unsafe fn new(err: *mut *mut PantoError) -> ErrOut {
        if !err.is_null() {
            // SAFETY: non-NULL, and writable by this function's contract.
            unsafe { err.write(std::ptr::null_mut()) };
        }
        ErrOut(err)
    }

    /// Reports `e` through the out-pointer (if any) and returns `PANTO_ERROR`.
    pub(crate) fn fail(self, e: Error) -> PantoStatus {
        if !self.0.is_null() {
            // SAFETY: non-NULL, and writable while this value is used (`ErrOut::new`).
            unsafe { self.0.write(Box::into_raw(PantoError::new(e))) };
        }
        PANTO_ERROR
    }

    /// `PANTO_OK`, or the error through the out-pointer.
    pub(crate) fn status(self, r: Result<(), Error>) -> PantoStatus {
        match r {
            Ok(()) => PANTO_OK,
            Err(e) => self.fail(e),
        }
    }
}

/// The error every call on a handle reports once a panic left it in an unknown state.
pub(crate) fn poisoned(function: &str, handle: &str) -> Error {
    Error::internal(format!(
        "{function}: this {handle} is unusable: an earlier call on it failed with an internal error (a panic)"
    ))
}

#[cfg(test)]
thread_local! {
    /// Test hook: the next guarded body on this thread panics (see `maybe_panic`).
    pub(crate) static PANIC_NEXT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Panics if a test asked for it; nothing at all outside tests.
#[inline]
pub(crate) fn maybe_panic() {
    #[cfg(test)]
    if PANIC_NEXT.with(|p| p.replace(false)) {
        panic!("injected by a test");
    }
}
