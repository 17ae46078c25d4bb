//! Owns the C calls of durable turns (ABI 1.3): a stream's checkpoint, resuming a turn
//! from one with answers to its deferred calls, steering a running turn, and the steering
//! messages a turn did not deliver. Each is a thin wrapper over `panto_pull`
//! (`StreamControl::checkpoint` / `steer` / `take_undelivered`, `panto_pull::resume`);
//! what a checkpoint holds and how a resumed turn goes on is the core's (`panto::turn`).

use std::ffi::c_char;
use std::sync::atomic::Ordering;

use panto_core::{Answers, Checkpoint, Error, Input};

use crate::agent::{agent_ref, PantoAgent};
use crate::boundary::{guard, input_str, invalid, maybe_panic, poisoned, ErrOut};
use crate::error::PantoError;
use crate::stream::{PantoStream, FORKED_STREAM};
use crate::types::*;

/// The stream behind a call that is not a next call: NULL, poisoned and forked-child
/// streams refused, as the header's conventions say.
///
/// # Safety
/// `stream` is NULL or a live stream for the returned lifetime (panto.h).
unsafe fn usable<'a>(function: &str, stream: *const PantoStream) -> Result<&'a PantoStream, Error> {
    // SAFETY: NULL or a live stream (this function's contract); `as_ref` checks NULL.
    let stream = unsafe { stream.as_ref() }.ok_or_else(|| invalid(function, "stream is NULL"))?;
    if stream.poisoned.load(Ordering::SeqCst) {
        return Err(poisoned(function, "stream"));
    }
    if stream.control.from_parent_process() {
        return Err(invalid(function, FORKED_STREAM));
    }
    Ok(stream)
}

/// Runs `f` on the stream under the panic guard; a panic poisons the stream.
fn on_stream<T>(
    function: &str,
    stream: &PantoStream,
    f: impl FnOnce(&PantoStream) -> Result<T, Error>,
) -> Result<T, Error> {
    match guard(function, || {
        maybe_panic();
        f(stream)
    }) {
        Ok(r) => r,
        Err(panic) => {
            stream.poison();
            Err(panic)
        }
    }
}

/// The shared body of the functions that hand a stream's text to the caller: checks
/// `out` and clears it, checks `stream`, runs `f` under the panic guard, and writes its
/// text into `*out` (owned by the caller) — `PANTO_PENDING` with `*out` empty when `f`
/// has none yet.
///
/// # Safety
/// `err` is NULL or writable, `out` is NULL or writable, and `stream` is NULL or a live
/// stream, during the call.
unsafe fn string_out(
    function: &str,
    stream: *const PantoStream,
    out: *mut PantoString,
    err: *mut *mut PantoError,
    f: impl FnOnce(&PantoStream) -> Result<Option<String>, Error>,
) -> PantoStatus {
    // SAFETY: `err` is NULL or writable during the call (this function's contract).
    let err = unsafe { ErrOut::new(err) };
    if out.is_null() {
        return err.fail(invalid(function, "out is NULL"));
    }
    // SAFETY: non-NULL (checked above) and writable (this function's contract).
    unsafe {
        out.write(PantoString {
            ptr: std::ptr::null_mut(),
            len: 0,
        })
    };
    // SAFETY: `stream` is NULL or a live stream during the call (this function's contract).
    let stream = match unsafe { usable(function, stream) } {
        Ok(s) => s,
        Err(e) => return err.fail(e),
    };
    match on_stream(function, stream, f) {
        Ok(Some(text)) => {
            // SAFETY: non-NULL and writable (checked and written above).
            unsafe { out.write(crate::string::owned(text)) };
            PANTO_OK
        }
        Ok(None) => PANTO_PENDING,
        Err(e) => err.fail(e),
    }
}

/// The turn's latest checkpoint as JSON text into `*out` (owned by the caller);
/// `PANTO_PENDING` with `*out` empty when the turn has none yet.
///
/// # Safety
/// See `panto.h`.
#[no_mangle]
pub unsafe extern "C" fn panto_stream_checkpoint(
    stream: *const PantoStream,
    out: *mut PantoString,
    err: *mut *mut PantoError,
) -> PantoStatus {
    const F: &str = "panto_stream_checkpoint";
    // SAFETY: the caller's pointers, as panto.h describes them (string_out's contract).
    unsafe {
        string_out(F, stream, out, err, |s| {
            Ok(s.control.checkpoint().map(|c| c.to_json()))
        })
    }
}

/// Continues the turn a checkpoint holds, with answers to its deferred calls, as a new
/// stream of `agent`.
///
/// # Safety
/// See `panto.h`.
#[no_mangle]
pub unsafe extern "C" fn panto_agent_resume(
    agent: *mut PantoAgent,
    checkpoint_json: *const c_char,
    checkpoint_len: usize,
    answers_json: *const c_char,
    answers_len: usize,
    out: *mut *mut PantoStream,
    err: *mut *mut PantoError,
) -> PantoStatus {
    const F: &str = "panto_agent_resume";
    // SAFETY: `err` is NULL or writable during the call (panto.h, "Errors").
    let err = unsafe { ErrOut::new(err) };
    if out.is_null() {
        return err.fail(invalid(F, "out is NULL"));
    }
    // SAFETY: non-NULL (checked above) and writable (panto.h: `out` is the caller's).
    unsafe { out.write(std::ptr::null_mut()) };
    // SAFETY: `agent` is NULL or a live agent (panto.h).
    let agent = match unsafe { agent_ref(F, agent) } {
        Ok(a) => a,
        Err(e) => return err.fail(e),
    };
    if checkpoint_json.is_null() {
        return err.fail(invalid(F, "checkpoint_json is NULL"));
    }
    // SAFETY: non-NULL, `checkpoint_len` bytes unchanged during the call (panto.h).
    let checkpoint =
        match unsafe { input_str(F, "checkpoint_json", checkpoint_json, checkpoint_len) } {
            Ok(s) => s,
            Err(e) => return err.fail(e),
        };
    // SAFETY: NULL with `answers_len` 0, or `answers_len` bytes unchanged during the
    // call (panto.h).
    let answers = match unsafe { input_str(F, "answers_json", answers_json, answers_len) } {
        Ok(s) => s,
        Err(e) => return err.fail(e),
    };
    let started = agent.call(F, |a| {
        let checkpoint = Checkpoint::from_json(checkpoint)?;
        let answers = if answers.trim().is_empty() {
            Answers::new()
        } else {
            Answers::from_json(answers)?
        };
        Ok((
            panto_pull::resume(a, checkpoint, answers)?,
            a.config().max_message_bytes,
        ))
    });
    match started {
        Ok((stream, max_file_bytes)) => {
            // SAFETY: non-NULL and writable (checked and written above).
            unsafe { out.write(Box::into_raw(PantoStream::new(stream, max_file_bytes))) };
            PANTO_OK
        }
        Err(e) => err.fail(e),
    }
}

/// Queues a user message into the running turn (any thread).
///
/// # Safety
/// See `panto.h`.
#[no_mangle]
pub unsafe extern "C" fn panto_stream_steer(
    stream: *mut PantoStream,
    input: *const c_char,
    len: usize,
    input_json: *const c_char,
    input_json_len: usize,
    err: *mut *mut PantoError,
) -> PantoStatus {
    const F: &str = "panto_stream_steer";
    // SAFETY: `err` is NULL or writable during the call (panto.h, "Errors").
    let err = unsafe { ErrOut::new(err) };
    // SAFETY: `stream` is NULL or a live stream during the call (panto.h).
    let stream = match unsafe { usable(F, stream) } {
        Ok(s) => s,
        Err(e) => return err.fail(e),
    };
    // SAFETY: NULL with `len` 0, or `len` bytes unchanged during the call (panto.h).
    let text = match unsafe { input_str(F, "input", input, len) } {
        Ok(s) => s,
        Err(e) => return err.fail(e),
    };
    let input = if input_json.is_null() {
        Input::from(text)
    } else {
        // SAFETY: non-NULL, `input_json_len` bytes unchanged during the call (panto.h).
        let json = unsafe { input_str(F, "input_json", input_json, input_json_len) };
        let parsed = json.and_then(|json| {
            if !text.is_empty() {
                return Err(Error::config(format!(
                    "{F}: give the input either as text or as input_json, not both \
                     (pass an empty input with input_json)"
                )));
            }
            let value: serde_json::Value = serde_json::from_str(json)
                .map_err(|e| Error::config(format!("{F}: input_json: not valid JSON: {e}")))?;
            Input::from_value_limited(&value, stream.max_file_bytes)
        });
        match parsed {
            Ok(i) => i,
            Err(e) => return err.fail(e),
        }
    };
    match on_stream(F, stream, |s| {
        s.control.steer(input).map_err(|refused| *refused.error)
    }) {
        Ok(()) => PANTO_OK,
        Err(e) => err.fail(e),
    }
}

/// The steering messages the turn did not deliver, as a JSON array into `*out`.
///
/// # Safety
/// See `panto.h`.
#[no_mangle]
pub unsafe extern "C" fn panto_stream_take_undelivered(
    stream: *mut PantoStream,
    out: *mut PantoString,
    err: *mut *mut PantoError,
) -> PantoStatus {
    const F: &str = "panto_stream_take_undelivered";
    // SAFETY: the caller's pointers, as panto.h describes them (string_out's contract).
    unsafe {
        string_out(F, stream, out, err, |s| {
            let inputs: Vec<serde_json::Value> = s
                .control
                .take_undelivered()
                .into_iter()
                .map(|i| serde_json::to_value(i.parts()).unwrap_or(serde_json::Value::Null))
                .collect();
            Ok(Some(serde_json::Value::from(inputs).to_string()))
        })
    }
}
