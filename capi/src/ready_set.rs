//! Owns `PantoReadySet` (ABI 1.2): one readiness descriptor for many streams
//! (`panto_pull::ReadySet`). `panto_stream_attach` makes a stream report to a set under
//! the caller's token instead of through a descriptor of its own; the caller waits on
//! the set's descriptor and takes the tokens of the streams to drain.

use std::sync::atomic::Ordering;

use crate::boundary::guard;
use crate::stream::PantoStream;
use crate::types::{PantoStatus, PANTO_ERROR, PANTO_OK};

/// A set of streams behind one descriptor. Freed with `panto_ready_set_free`; streams
/// attached to it may outlive it (they are then no longer reported).
pub struct PantoReadySet {
    #[cfg(unix)]
    set: panto_pull::ReadySet,
}

/// A new, empty set with its descriptor.
///
/// # Safety
/// `out` is NULL or points to writable storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn panto_ready_set_new(out: *mut *mut PantoReadySet) -> PantoStatus {
    if out.is_null() {
        return PANTO_ERROR;
    }
    // SAFETY: non-NULL (checked above) and writable (this function's contract).
    unsafe { out.write(std::ptr::null_mut()) };
    #[cfg(unix)]
    {
        match guard("panto_ready_set_new", panto_pull::ReadySet::new) {
            Ok(Ok(set)) => {
                // SAFETY: non-NULL and writable (checked and written above).
                unsafe { out.write(Box::into_raw(Box::new(PantoReadySet { set }))) };
                PANTO_OK
            }
            _ => PANTO_ERROR,
        }
    }
    #[cfg(not(unix))]
    PANTO_ERROR
}

/// The set's descriptor: readable exactly while a stream's token waits to be taken.
///
/// # Safety
/// `set` is NULL or a live set; `fd_out` is NULL or points to writable storage.
#[no_mangle]
pub unsafe extern "C" fn panto_ready_set_fd(
    set: *const PantoReadySet,
    fd_out: *mut i64,
) -> PantoStatus {
    if fd_out.is_null() {
        return PANTO_ERROR;
    }
    // SAFETY: non-NULL (checked above) and writable (this function's contract).
    unsafe { fd_out.write(-1) };
    // SAFETY: NULL or a live set (this function's contract); `as_ref` checks NULL.
    let Some(set) = (unsafe { set.as_ref() }) else {
        return PANTO_ERROR;
    };
    #[cfg(unix)]
    {
        // -1: a set made before this process forked (the parent's; inert here).
        let fd = set.set.fd();
        if fd < 0 {
            return PANTO_ERROR;
        }
        // SAFETY: non-NULL and writable (checked and written above).
        unsafe { fd_out.write(i64::from(fd)) };
        PANTO_OK
    }
    #[cfg(not(unix))]
    {
        let _ = set;
        PANTO_ERROR
    }
}

/// Takes up to `cap` tokens of reported streams into `tokens`; returns how many. Fewer
/// than `cap`: the set is empty and its descriptor unreadable now.
///
/// # Safety
/// `set` is NULL or a live set; `tokens` is NULL or points to `cap` writable `u64`s.
#[no_mangle]
pub unsafe extern "C" fn panto_ready_set_take(
    set: *const PantoReadySet,
    tokens: *mut u64,
    cap: usize,
) -> usize {
    // SAFETY: NULL or a live set (this function's contract); `as_ref` checks NULL.
    let (Some(set), false) = (unsafe { set.as_ref() }, tokens.is_null()) else {
        return 0;
    };
    if cap == 0 {
        return 0;
    }
    #[cfg(unix)]
    {
        // SAFETY: `tokens` is non-NULL (checked above) and points to `cap` writable u64s
        // that nothing else uses during the call (this function's contract).
        let buf = unsafe { std::slice::from_raw_parts_mut(tokens, cap) };
        guard("panto_ready_set_take", || set.set.take(buf)).unwrap_or(0)
    }
    #[cfg(not(unix))]
    {
        let _ = set;
        0
    }
}

/// Frees the set: its descriptor is made readable (a poller waiting on it returns) and
/// closed. NULL is a no-op.
///
/// # Safety
/// `set` is NULL or a live set that no other thread is using, not used after.
#[no_mangle]
pub unsafe extern "C" fn panto_ready_set_free(set: *mut PantoReadySet) {
    if !set.is_null() {
        // SAFETY: a live set from `panto_ready_set_new` (a Box) that no other thread uses
        // and nobody uses after (this function's contract): taken back once.
        let set = unsafe { Box::from_raw(set) };
        let _ = guard("panto_ready_set_free", || drop(set));
    }
}

/// Makes `stream` report to `set` under `token` instead of through a descriptor of its
/// own.
///
/// # Safety
/// `stream` and `set` are NULL or live handles.
#[no_mangle]
pub unsafe extern "C" fn panto_stream_attach(
    stream: *const PantoStream,
    set: *const PantoReadySet,
    token: u64,
) -> PantoStatus {
    // SAFETY: each is NULL or a live handle (this function's contract); `as_ref` checks
    // NULL.
    let (Some(stream), Some(set)) = (unsafe { stream.as_ref() }, unsafe { set.as_ref() }) else {
        return PANTO_ERROR;
    };
    if stream.poisoned.load(Ordering::SeqCst) {
        return PANTO_ERROR;
    }
    #[cfg(unix)]
    {
        match guard("panto_stream_attach", || {
            stream.control.attach(&set.set, token)
        }) {
            Ok(Ok(())) => PANTO_OK,
            Ok(Err(_)) => PANTO_ERROR,
            Err(_) => {
                stream.poison();
                PANTO_ERROR
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = (set, token);
        PANTO_ERROR
    }
}
