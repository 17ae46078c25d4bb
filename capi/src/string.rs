//! Owns `PantoString`, the one kind of string the library hands over to the caller (a
//! saved history): allocated here, freed only by `panto_string_free`, never by `free`.

use std::ffi::c_char;

use crate::boundary::guard;
use crate::types::PantoString;

/// Hands `s` to the caller: its bytes plus a NUL, as one boxed slice of `len + 1` bytes.
pub(crate) fn owned(s: String) -> PantoString {
    let mut bytes = s.into_bytes();
    bytes.push(0);
    let len = bytes.len() - 1;
    let raw = Box::into_raw(bytes.into_boxed_slice());
    PantoString {
        ptr: raw.cast::<c_char>(),
        len,
    }
}

/// Frees the string in `*s` and empties `*s` (so freeing it twice is harmless). NULL, or
/// an empty `PantoString` (`ptr` NULL), is a no-op.
///
/// # Safety
/// `s` is NULL or points to a `PantoString` this library filled, unchanged since.
#[no_mangle]
pub unsafe extern "C" fn panto_string_free(s: *mut PantoString) {
    // SAFETY: NULL or a `PantoString` of the caller's, not aliased during the call (this
    // function's contract); `as_mut` checks NULL.
    let Some(s) = (unsafe { s.as_mut() }) else {
        return;
    };
    if s.ptr.is_null() {
        return;
    }
    let (ptr, len) = (s.ptr, s.len);
    s.ptr = std::ptr::null_mut();
    s.len = 0;
    let _ = guard("panto_string_free", || {
        // SAFETY: `owned` allocated exactly `len + 1` bytes at `ptr` as a boxed slice
        // (the string is unchanged since, by contract), and `*s` was emptied above, so
        // it is taken back once.
        drop(unsafe {
            Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                ptr.cast::<u8>(),
                len + 1,
            ))
        })
    });
}
