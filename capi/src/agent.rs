//! Owns `PantoAgent`: creating it from the JSON configuration, its history, and
//! starting a turn (a `PantoStream`). Agent calls are thread-safe: the core's `Agent` is
//! internally synchronized, so one handle may be used from many threads at once.

use std::ffi::c_char;
use std::sync::atomic::{AtomicBool, Ordering};

use panto_core::{Agent, CancellationToken, Error};
use panto_pull::AgentStreamExt;

use crate::boundary::{guard, input_str, invalid, maybe_panic, poisoned, ErrOut};
use crate::cancel::PantoCancelToken;
use crate::error::PantoError;
use crate::stream::PantoStream;
use crate::types::*;

/// An agent: one conversation with one provider configuration. Streams keep what they
/// need of it alive, so freeing the agent while a stream is open is safe.
pub struct PantoAgent {
    agent: Agent,
    /// Set when a panic was caught in a call on this handle.
    poisoned: AtomicBool,
}

impl PantoAgent {
    /// Runs `f` on a usable agent, catching a panic (which poisons the handle).
    pub(crate) fn call<T>(
        &self,
        function: &str,
        f: impl FnOnce(&Agent) -> Result<T, Error>,
    ) -> Result<T, Error> {
        if self.poisoned.load(Ordering::SeqCst) {
            return Err(poisoned(function, "agent"));
        }
        // Before anything takes one of the agent's locks: in a forked child, a thread of
        // the parent may have held it, and no thread here will ever release it.
        if panto_pull::agent_from_parent_process(&self.agent) {
            return Err(invalid(function, FORKED_AGENT));
        }
        match guard(function, || {
            maybe_panic();
            f(&self.agent)
        }) {
            Ok(r) => r,
            Err(e) => {
                self.poisoned.store(true, Ordering::SeqCst);
                Err(e)
            }
        }
    }
}

pub(crate) const FORKED_AGENT: &str =
    "this agent was made before the process forked: panto's threads do not survive \
     fork(), so it cannot be used in the child; make a new agent in the child (new agents \
     work there)";

/// # Safety
/// `agent` is NULL or a live agent from this library.
pub(crate) unsafe fn agent_ref<'a>(
    function: &str,
    agent: *const PantoAgent,
) -> Result<&'a PantoAgent, Error> {
    // SAFETY: NULL or a live agent (this function's contract); `as_ref` checks NULL.
    unsafe { agent.as_ref() }.ok_or_else(|| invalid(function, "agent is NULL"))
}

/// Creates an agent from its JSON configuration.
///
/// # Safety
/// See `panto.h`: pointers are NULL or valid for the documented use.
#[no_mangle]
pub unsafe extern "C" fn panto_agent_new(
    config_json: *const c_char,
    len: usize,
    out: *mut *mut PantoAgent,
    err: *mut *mut PantoError,
) -> PantoStatus {
    const F: &str = "panto_agent_new";
    // SAFETY: `err` is NULL or writable during the call (panto.h, "Errors").
    let err = unsafe { ErrOut::new(err) };
    if out.is_null() {
        return err.fail(invalid(F, "out is NULL"));
    }
    // SAFETY: non-NULL (checked above) and writable (panto.h: `out` is the caller's).
    unsafe { out.write(std::ptr::null_mut()) };
    if config_json.is_null() {
        return err.fail(invalid(F, "config_json is NULL"));
    }
    // SAFETY: `config_json` points to `len` bytes that the caller keeps unchanged during
    // the call (panto.h's rule for every input string).
    let json = match unsafe { input_str(F, "config_json", config_json, len) } {
        Ok(s) => s,
        Err(e) => return err.fail(e),
    };
    let made = guard(F, || {
        maybe_panic();
        Agent::from_json(json)
    });
    match made.and_then(|r| r) {
        Ok(agent) => {
            let agent = Box::into_raw(Box::new(PantoAgent {
                agent,
                poisoned: AtomicBool::new(false),
            }));
            // SAFETY: non-NULL and writable (checked and written above).
            unsafe { out.write(agent) };
            PANTO_OK
        }
        Err(e) => err.fail(e),
    }
}

/// Frees an agent handle; NULL is a no-op. Open streams stay valid.
///
/// # Safety
/// `agent` is NULL or a live agent, not used after this call.
#[no_mangle]
pub unsafe extern "C" fn panto_agent_free(agent: *mut PantoAgent) {
    if !agent.is_null() {
        // SAFETY: a live agent from `panto_agent_new` (a Box), never used after this call
        // (this function's contract): the Box is taken back exactly once.
        let agent = unsafe { Box::from_raw(agent) };
        if panto_pull::agent_from_parent_process(&agent.agent) {
            // A parent's agent in a forked child: freeing its connections could wait for
            // a lock a thread of the parent held. The child's copy of it is left alone.
            std::mem::forget(agent);
            return;
        }
        let _ = guard("panto_agent_free", || drop(agent));
    }
}

/// Saves the conversation as versioned JSON into `*out` (owned by the caller).
///
/// # Safety
/// See `panto.h`.
#[no_mangle]
pub unsafe extern "C" fn panto_agent_save_history(
    agent: *mut PantoAgent,
    out: *mut PantoString,
    err: *mut *mut PantoError,
) -> PantoStatus {
    // SAFETY: the pointers are as panto.h documents them (string_out's contract).
    unsafe {
        string_out("panto_agent_save_history", agent, out, err, |a| {
            Ok(a.history_json())
        })
    }
}

/// Replaces the conversation with one saved by `panto_agent_save_history`.
///
/// # Safety
/// See `panto.h`.
#[no_mangle]
pub unsafe extern "C" fn panto_agent_load_history(
    agent: *mut PantoAgent,
    json: *const c_char,
    len: usize,
    err: *mut *mut PantoError,
) -> PantoStatus {
    const F: &str = "panto_agent_load_history";
    // SAFETY: `err` is NULL or writable during the call (panto.h, "Errors").
    let err = unsafe { ErrOut::new(err) };
    // SAFETY: `agent` is NULL or a live agent (panto.h).
    let agent = match unsafe { agent_ref(F, agent) } {
        Ok(a) => a,
        Err(e) => return err.fail(e),
    };
    if json.is_null() {
        return err.fail(invalid(F, "json is NULL"));
    }
    // SAFETY: `json` points to `len` bytes unchanged during the call (panto.h).
    let json = match unsafe { input_str(F, "json", json, len) } {
        Ok(s) => s,
        Err(e) => return err.fail(e),
    };
    err.status(agent.call(F, |a| a.load_history_json(json)))
}

/// Empties the conversation.
///
/// # Safety
/// See `panto.h`.
#[no_mangle]
pub unsafe extern "C" fn panto_agent_clear_history(
    agent: *mut PantoAgent,
    err: *mut *mut PantoError,
) -> PantoStatus {
    const F: &str = "panto_agent_clear_history";
    // SAFETY: `err` is NULL or writable during the call (panto.h, "Errors").
    let err = unsafe { ErrOut::new(err) };
    // SAFETY: `agent` is NULL or a live agent (panto.h).
    let agent = match unsafe { agent_ref(F, agent) } {
        Ok(a) => a,
        Err(e) => return err.fail(e),
    };
    err.status(agent.call(F, |a| a.clear_history()))
}

/// Starts a turn: appends `input` as the user message and returns its stream.
///
/// # Safety
/// See `panto.h`.
#[no_mangle]
pub unsafe extern "C" fn panto_agent_stream(
    agent: *mut PantoAgent,
    input: *const c_char,
    len: usize,
    out: *mut *mut PantoStream,
    err: *mut *mut PantoError,
) -> PantoStatus {
    const F: &str = "panto_agent_stream";
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
    // SAFETY: `input` is NULL with `len` 0 or points to `len` bytes unchanged during the
    // call (panto.h).
    let input = match unsafe { input_str(F, "input", input, len) } {
        Ok(s) => s,
        Err(e) => return err.fail(e),
    };
    match agent.call(F, |a| Ok((a.stream(input)?, a.config().max_message_bytes))) {
        Ok((stream, max_file_bytes)) => {
            // SAFETY: non-NULL and writable (checked and written above).
            unsafe { out.write(Box::into_raw(PantoStream::new(stream, max_file_bytes))) };
            PANTO_OK
        }
        Err(e) => err.fail(e),
    }
}

/// Starts a turn with per-turn options (`{"model"?, "reasoning"?}`; NULL = none).
///
/// # Safety
/// See `panto.h`.
#[no_mangle]
pub unsafe extern "C" fn panto_agent_stream_with(
    agent: *mut PantoAgent,
    input: *const c_char,
    len: usize,
    options_json: *const c_char,
    options_len: usize,
    out: *mut *mut PantoStream,
    err: *mut *mut PantoError,
) -> PantoStatus {
    const F: &str = "panto_agent_stream_with";
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
    // SAFETY: `input` is NULL with `len` 0 or points to `len` bytes unchanged during the
    // call (panto.h).
    let input = match unsafe { input_str(F, "input", input, len) } {
        Ok(s) => s,
        Err(e) => return err.fail(e),
    };
    // A "path" part is read with the agent's max_message_bytes as its limit.
    let max_file_bytes = match agent.call(F, |a| Ok(a.config().max_message_bytes)) {
        Ok(n) => n,
        Err(e) => return err.fail(e),
    };
    let options = if options_json.is_null() {
        Ok((panto_core::TurnOptions::default(), None))
    } else {
        // SAFETY: non-NULL, `options_len` bytes unchanged during the call (panto.h).
        unsafe { input_str(F, "options_json", options_json, options_len) }
            .and_then(|json| turn_options(json, max_file_bytes))
    };
    let (options, parts) = match options {
        Ok(o) => o,
        Err(e) => return err.fail(e),
    };
    let input = match parts {
        None => panto_core::Input::from(input),
        Some(_) if !input.is_empty() => {
            return err.fail(panto_core::Error::config(
                "panto_agent_stream_with: give the input either as text or as \
                     options \"input\", not both (pass an empty input with \"input\")",
            ))
        }
        Some(parts) => parts,
    };
    match agent.call(F, |a| a.stream_with(input, options)) {
        Ok(stream) => {
            // SAFETY: non-NULL and writable (checked and written above).
            unsafe { out.write(Box::into_raw(PantoStream::new(stream, max_file_bytes))) };
            PANTO_OK
        }
        Err(e) => err.fail(e),
    }
}

/// The options of `panto_agent_stream_with`: the turn options, and `"input"` — the
/// input as text and attachments (`panto::Input::from_value`: a string, or an array
/// of parts, a `"path"` read at most `max_file_bytes`) — taken out before the rest is
/// read as [`panto_core::TurnOptions`].
fn turn_options(
    json: &str,
    max_file_bytes: usize,
) -> Result<(panto_core::TurnOptions, Option<panto_core::Input>), panto_core::Error> {
    let mut value: serde_json::Value = serde_json::from_str(json)
        .map_err(|e| panto_core::Error::config(format!("options: not valid JSON: {e}")))?;
    let parts = match value.as_object_mut().and_then(|o| o.remove("input")) {
        Some(v) => Some(panto_core::Input::from_value_limited(&v, max_file_bytes)?),
        None => None,
    };
    Ok((
        panto_core::TurnOptions::from_json(&value.to_string())?,
        parts,
    ))
}

/// Compacts the conversation (blocking) and reports what it did as JSON; `cancel`
/// (NULL: not cancellable) stops it from another thread.
///
/// # Safety
/// See `panto.h`.
#[no_mangle]
pub unsafe extern "C" fn panto_agent_compact(
    agent: *mut PantoAgent,
    options_json: *const c_char,
    options_len: usize,
    cancel: *const PantoCancelToken,
    out: *mut PantoString,
    err: *mut *mut PantoError,
) -> PantoStatus {
    const F: &str = "panto_agent_compact";
    let compact = |a: &Agent| {
        let options = if options_json.is_null() {
            panto_core::CompactOptions::default()
        } else {
            // SAFETY: non-NULL, `options_len` bytes unchanged during the call (panto.h).
            unsafe { input_str(F, "options_json", options_json, options_len) }
                .and_then(panto_core::CompactOptions::from_json)?
        };
        // SAFETY: NULL or a live token that outlives the call (panto.h).
        let cancel = match unsafe { cancel.as_ref() } {
            Some(c) => c.token.clone(),
            None => CancellationToken::new(),
        };
        // A token cancelled before the call is a cancellation, with nothing sent.
        if cancel.is_cancelled() {
            return Err(Error::cancelled());
        }
        panto_pull::compact_cancellable(a, &options, &cancel).map(|done| done.to_json())
    };
    // SAFETY: the pointers are as panto.h documents them (string_out's contract).
    unsafe { string_out(F, agent, out, err, compact) }
}

/// Calls one MCP tool of the agent outside a turn (blocking) and reports its result as
/// JSON; `cancel` (NULL: not cancellable) stops it from another thread.
///
/// # Safety
/// See `panto.h`.
#[no_mangle]
pub unsafe extern "C" fn panto_agent_call_mcp_tool(
    agent: *mut PantoAgent,
    name: *const c_char,
    name_len: usize,
    arguments_json: *const c_char,
    arguments_len: usize,
    cancel: *const PantoCancelToken,
    out: *mut PantoString,
    err: *mut *mut PantoError,
) -> PantoStatus {
    const F: &str = "panto_agent_call_mcp_tool";
    let call = |a: &Agent| {
        // SAFETY: `name_len` readable bytes, unchanged during the call (panto.h).
        let name = unsafe { input_str(F, "name", name, name_len) }?;
        let arguments = if arguments_json.is_null() && arguments_len == 0 {
            serde_json::Value::Object(Default::default())
        } else {
            // SAFETY: `arguments_len` readable bytes, unchanged during the call (panto.h).
            let text = unsafe { input_str(F, "arguments_json", arguments_json, arguments_len) }?;
            serde_json::from_str(text)
                .map_err(|e| Error::config(format!("{F}: arguments_json is not valid JSON: {e}")))?
        };
        // SAFETY: NULL or a live token that outlives the call (panto.h).
        let cancel = match unsafe { cancel.as_ref() } {
            Some(c) => c.token.clone(),
            None => CancellationToken::new(),
        };
        panto_pull::call_mcp_tool(a, name, arguments, &cancel).map(|out| out.to_json())
    };
    // SAFETY: the pointers are as panto.h documents them (string_out's contract).
    unsafe { string_out(F, agent, out, err, call) }
}

/// The tokens of the request a turn with `input` would send now, as JSON.
///
/// # Safety
/// See `panto.h`.
#[no_mangle]
pub unsafe extern "C" fn panto_agent_count_tokens(
    agent: *mut PantoAgent,
    input: *const c_char,
    len: usize,
    out: *mut PantoString,
    err: *mut *mut PantoError,
) -> PantoStatus {
    const F: &str = "panto_agent_count_tokens";
    let count = |a: &Agent| {
        // SAFETY: NULL with len 0, or `len` bytes unchanged during the call (panto.h).
        let text = unsafe { input_str(F, "input", input, len) }?;
        panto_pull::count_tokens(a, text).map(|c| c.to_json())
    };
    // SAFETY: the pointers are as panto.h documents them (string_out's contract).
    unsafe { string_out(F, agent, out, err, count) }
}

/// The conversation's transcript as a JSON array.
///
/// # Safety
/// See `panto.h`.
#[no_mangle]
pub unsafe extern "C" fn panto_agent_transcript_json(
    agent: *mut PantoAgent,
    out: *mut PantoString,
    err: *mut *mut PantoError,
) -> PantoStatus {
    // SAFETY: the pointers are as panto.h documents them (string_out's contract).
    unsafe {
        string_out("panto_agent_transcript_json", agent, out, err, |a| {
            Ok(a.transcript_json())
        })
    }
}

/// The shape shared by the calls that answer with a string: `*err` reset, `*out` empty
/// until success, the agent checked, then `f` on it (a panic caught, poisoning the
/// handle) and its string moved into `*out`, owned by the caller.
///
/// # Safety
/// `agent` is NULL or a live agent; `out` is NULL or writable; `err` is NULL or
/// writable during the call.
pub(crate) unsafe fn string_out(
    function: &str,
    agent: *mut PantoAgent,
    out: *mut PantoString,
    err: *mut *mut PantoError,
    f: impl FnOnce(&Agent) -> Result<String, Error>,
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
    // SAFETY: `agent` is NULL or a live agent (this function's contract).
    let agent = match unsafe { agent_ref(function, agent) } {
        Ok(a) => a,
        Err(e) => return err.fail(e),
    };
    match agent.call(function, f) {
        Ok(text) => {
            // SAFETY: non-NULL and writable (checked and written above).
            unsafe { out.write(crate::string::owned(text)) };
            PANTO_OK
        }
        Err(e) => err.fail(e),
    }
}
