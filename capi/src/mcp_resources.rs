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

/// What the four calls share: their checks and hand-off by `string_out`, then the
/// optional `server` (a pointer and its length; NULL is every server) and the token of
/// `cancel` read inside the agent's call, in that order, before `call` blocks on
/// `panto_pull::mcp` with them.
///
/// # Safety
/// As `string_out`; `server` is NULL or points to its length's bytes unchanged during the
/// call, and `cancel` is NULL or a live token that outlives the call.
unsafe fn server_call(
    function: &str,
    agent: *mut PantoAgent,
    server: (*const c_char, usize),
    cancel: *const PantoCancelToken,
    out: *mut PantoString,
    err: *mut *mut PantoError,
    call: impl FnOnce(&panto_core::Agent, Option<&str>, &CancellationToken) -> Result<String, Error>,
) -> PantoStatus {
    let (server, server_len) = server;
    let blocking = |a: &panto_core::Agent| {
        // SAFETY: NULL or `server_len` bytes unchanged during the call (this function's
        // contract).
        let server = unsafe { optional_str(function, "server", server, server_len) }?;
        // SAFETY: NULL or a live token that outlives the call (this function's contract).
        let cancel = unsafe { token(cancel) };
        call(a, server, &cancel)
    };
    // SAFETY: the pointers are as string_out's contract wants (this function's contract).
    unsafe { string_out(function, agent, out, err, blocking) }
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
    let call = panto_pull::mcp::mcp_resources;
    // SAFETY: the pointers are as panto.h documents them (server_call's contract).
    unsafe { server_call(F, agent, (server, server_len), cancel, out, err, call) }
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
    let call = |a: &panto_core::Agent, server: Option<&str>, cancel: &CancellationToken| {
        // SAFETY: the pointers are as panto.h documents them.
        let uri = unsafe { input_str(F, "uri", uri, uri_len) }?;
        panto_pull::mcp::mcp_read_resource(a, server, uri, cancel)
    };
    // SAFETY: the pointers are as panto.h documents them (server_call's contract).
    unsafe { server_call(F, agent, (server, server_len), cancel, out, err, call) }
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
    let call = panto_pull::mcp::mcp_prompts;
    // SAFETY: the pointers are as panto.h documents them (server_call's contract).
    unsafe { server_call(F, agent, (server, server_len), cancel, out, err, call) }
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
    let call = |a: &panto_core::Agent, server: Option<&str>, cancel: &CancellationToken| {
        // SAFETY: the pointers are as panto.h documents them.
        let name = unsafe { input_str(F, "name", name, name_len) }?;
        // SAFETY: the pointers are as panto.h documents them.
        let arguments =
            unsafe { optional_str(F, "arguments_json", arguments_json, arguments_len) }?;
        panto_pull::mcp::mcp_get_prompt(a, server, name, arguments, cancel)
    };
    // SAFETY: the pointers are as panto.h documents them (server_call's contract).
    unsafe { server_call(F, agent, (server, server_len), cancel, out, err, call) }
}
