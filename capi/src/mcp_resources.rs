//! Owns the C calls that ask an agent's MCP servers for their resources and prompts
//! outside a turn (`panto_agent_mcp_resources`, `_read_resource`, `_prompts`,
//! `_get_prompt`, ABI 1.3): they check their arguments, then block on
//! `panto_pull::mcp` (the work runs on the agent's worker thread) and answer JSON text
//! owned by the caller. What the JSON holds is the core's.

use std::ffi::c_char;

use panto_core::{CancellationToken, Error};

use crate::agent::{string_out, PantoAgent};
use crate::boundary::input_str;
use crate::cancel::PantoCancelToken;
use crate::error::PantoError;
use crate::types::*;

/// An optional string argument: NULL is none.
///
/// # Safety
/// `ptr` is NULL or points to `len` bytes unchanged during the call.
unsafe fn optional_str<'a>(
    function: &str,
    name: &str,
    ptr: *const c_char,
    len: usize,
) -> Result<Option<&'a str>, Error> {
    if ptr.is_null() {
        return Ok(None);
    }
    // SAFETY: non-NULL, `len` bytes unchanged during the call (this function's contract).
    unsafe { input_str(function, name, ptr, len) }.map(Some)
}

/// The token of `cancel`, or a fresh one for NULL.
///
/// # Safety
/// `cancel` is NULL or a live token that outlives the call.
unsafe fn token(cancel: *const PantoCancelToken) -> CancellationToken {
    // SAFETY: NULL or a live token that outlives the call (this function's contract).
    match unsafe { cancel.as_ref() } {
        Some(c) => c.token.clone(),
        None => CancellationToken::new(),
    }
}

/// The resources of the agent's MCP servers as a JSON array.
///
/// # Safety
/// See `panto.h`.
#[no_mangle]
pub unsafe extern "C" fn panto_agent_mcp_resources(
    agent: *mut PantoAgent,
    server: *const c_char,
    server_len: usize,
    cancel: *const PantoCancelToken,
    out: *mut PantoString,
    err: *mut *mut PantoError,
) -> PantoStatus {
    const F: &str = "panto_agent_mcp_resources";
    let call = |a: &panto_core::Agent| {
        // SAFETY: the pointers are as panto.h documents them.
        let server = unsafe { optional_str(F, "server", server, server_len) }?;
        // SAFETY: NULL or a live token that outlives the call (panto.h).
        let cancel = unsafe { token(cancel) };
        panto_pull::mcp::mcp_resources(a, server, &cancel)
    };
    // SAFETY: the pointers are as panto.h documents them (string_out's contract).
    unsafe { string_out(F, agent, out, err, call) }
}

/// Reads one resource of the agent's MCP servers, as JSON.
///
/// # Safety
/// See `panto.h`.
#[no_mangle]
pub unsafe extern "C" fn panto_agent_mcp_read_resource(
    agent: *mut PantoAgent,
    server: *const c_char,
    server_len: usize,
    uri: *const c_char,
    uri_len: usize,
    cancel: *const PantoCancelToken,
    out: *mut PantoString,
    err: *mut *mut PantoError,
) -> PantoStatus {
    const F: &str = "panto_agent_mcp_read_resource";
    let call = |a: &panto_core::Agent| {
        // SAFETY: the pointers are as panto.h documents them.
        let server = unsafe { optional_str(F, "server", server, server_len) }?;
        // SAFETY: the pointers are as panto.h documents them.
        let uri = unsafe { input_str(F, "uri", uri, uri_len) }?;
        // SAFETY: NULL or a live token that outlives the call (panto.h).
        let cancel = unsafe { token(cancel) };
        panto_pull::mcp::mcp_read_resource(a, server, uri, &cancel)
    };
    // SAFETY: the pointers are as panto.h documents them (string_out's contract).
    unsafe { string_out(F, agent, out, err, call) }
}

/// The prompts of the agent's MCP servers as a JSON array.
///
/// # Safety
/// See `panto.h`.
#[no_mangle]
pub unsafe extern "C" fn panto_agent_mcp_prompts(
    agent: *mut PantoAgent,
    server: *const c_char,
    server_len: usize,
    cancel: *const PantoCancelToken,
    out: *mut PantoString,
    err: *mut *mut PantoError,
) -> PantoStatus {
    const F: &str = "panto_agent_mcp_prompts";
    let call = |a: &panto_core::Agent| {
        // SAFETY: the pointers are as panto.h documents them.
        let server = unsafe { optional_str(F, "server", server, server_len) }?;
        // SAFETY: NULL or a live token that outlives the call (panto.h).
        let cancel = unsafe { token(cancel) };
        panto_pull::mcp::mcp_prompts(a, server, &cancel)
    };
    // SAFETY: the pointers are as panto.h documents them (string_out's contract).
    unsafe { string_out(F, agent, out, err, call) }
}

/// One prompt of the agent's MCP servers, filled in with its arguments, as JSON.
///
/// # Safety
/// See `panto.h`.
#[no_mangle]
pub unsafe extern "C" fn panto_agent_mcp_get_prompt(
    agent: *mut PantoAgent,
    server: *const c_char,
    server_len: usize,
    name: *const c_char,
    name_len: usize,
    arguments_json: *const c_char,
    arguments_len: usize,
    cancel: *const PantoCancelToken,
    out: *mut PantoString,
    err: *mut *mut PantoError,
) -> PantoStatus {
    const F: &str = "panto_agent_mcp_get_prompt";
    let call = |a: &panto_core::Agent| {
        // SAFETY: the pointers are as panto.h documents them.
        let server = unsafe { optional_str(F, "server", server, server_len) }?;
        // SAFETY: the pointers are as panto.h documents them.
        let name = unsafe { input_str(F, "name", name, name_len) }?;
        // SAFETY: the pointers are as panto.h documents them.
        let arguments =
            unsafe { optional_str(F, "arguments_json", arguments_json, arguments_len) }?;
        // SAFETY: NULL or a live token that outlives the call (panto.h).
        let cancel = unsafe { token(cancel) };
        panto_pull::mcp::mcp_get_prompt(a, server, name, arguments, &cancel)
    };
    // SAFETY: the pointers are as panto.h documents them (string_out's contract).
    unsafe { string_out(F, agent, out, err, call) }
}
