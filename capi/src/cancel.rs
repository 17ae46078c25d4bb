//! Owns `PantoCancelToken`: the handle that cancels a blocking call which has no handle
//! of its own (today `panto_agent_compact`). A stream is cancelled through its own
//! handle; a blocking call is not, because it only returns once it is over, so the
//! caller makes the token first, hands it to the call, and cancels it from any thread.
//! A token made before the call cannot miss a cancellation that races the call's start,
//! which a "cancel whatever is running on this agent" function could.

use panto_core::CancellationToken;

use crate::boundary::guard;
use crate::types::{PantoStatus, PANTO_ERROR, PANTO_OK};

/// A cancellation token. Cancelling is sticky: every call given the token afterwards
/// fails at once with `cancelled`.
pub struct PantoCancelToken {
    pub(crate) token: CancellationToken,
}

/// Makes a token (NULL only if the allocation panicked, which it does not in practice).
#[no_mangle]
pub extern "C" fn panto_cancel_token_new() -> *mut PantoCancelToken {
    guard("panto_cancel_token_new", || {
        Box::into_raw(Box::new(PantoCancelToken {
            token: CancellationToken::new(),
        }))
    })
    .unwrap_or(std::ptr::null_mut())
}

/// Cancels the token: a call blocked on it on another thread returns `cancelled`.
///
/// # Safety
/// `token` is NULL or a live token from this library.
#[no_mangle]
pub unsafe extern "C" fn panto_cancel_token_cancel(token: *const PantoCancelToken) -> PantoStatus {
    // SAFETY: NULL or a live token (this function's contract); `as_ref` checks NULL.
    let Some(token) = (unsafe { token.as_ref() }) else {
        return PANTO_ERROR;
    };
    let done = guard("panto_cancel_token_cancel", || {
        token.token.cancel();
    });
    if done.is_ok() {
        PANTO_OK
    } else {
        PANTO_ERROR
    }
}

/// Whether the token was cancelled; false for NULL.
///
/// # Safety
/// `token` is NULL or a live token from this library.
#[no_mangle]
pub unsafe extern "C" fn panto_cancel_token_is_cancelled(token: *const PantoCancelToken) -> bool {
    // SAFETY: NULL or a live token (this function's contract); `as_ref` checks NULL.
    unsafe { token.as_ref() }.is_some_and(|t| t.token.is_cancelled())
}

/// Frees a token; NULL is a no-op.
///
/// # Safety
/// `token` is NULL or a live token, not used after this call and not in use by a
/// running call.
#[no_mangle]
pub unsafe extern "C" fn panto_cancel_token_free(token: *mut PantoCancelToken) {
    if !token.is_null() {
        // SAFETY: a live token from `panto_cancel_token_new` (a Box), unused after this
        // call and by no running call (this function's contract): taken back once.
        let token = unsafe { Box::from_raw(token) };
        let _ = guard("panto_cancel_token_free", || drop(token));
    }
}
