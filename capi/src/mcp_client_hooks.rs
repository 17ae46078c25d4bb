//! Owns `panto_agent_set_mcp_client_hooks` (ABI 1.3): how the host answers what an
//! agent's MCP servers ask of it — approving a `sampling/createMessage`, answering an
//! `elicitation/create` — as C callbacks (`PantoMcpClientHooks`) over the core's JSON
//! (`McpSamplingRequest::to_json`, `McpElicitationRequest::to_json`,
//! `McpElicitationAnswer::from_json`). The callbacks run on the library's threads;
//! `user_data` is freed with `free_user_data` once no callback can run any more. It does
//! not own checking the answer against the requested schema: the core does, for every
//! language.

use std::ffi::{c_char, c_int, c_void};
use std::sync::Arc;

use panto_core::{
    McpApproveSampling, McpClientHooks, McpElicit, McpElicitationAnswer, McpElicitationRequest,
    McpSamplingRequest,
};

use crate::agent::{agent_ref, PantoAgent};
use crate::boundary::{invalid, ErrOut};
use crate::types::PantoStatus;

/// `approve_sampling`: nonzero lets the agent's model answer the request.
type PantoApproveSampling = unsafe extern "C" fn(
    user_data: *mut c_void,
    request_json: *const c_char,
    request_json_len: usize,
) -> c_int;

/// `elicit`: writes the answer's JSON into `buf` (at most `cap` bytes) and returns its
/// length; 0 (or more than `cap`) declines.
type PantoElicit = unsafe extern "C" fn(
    user_data: *mut c_void,
    request_json: *const c_char,
    request_json_len: usize,
    buf: *mut c_char,
    cap: usize,
) -> usize;

/// The host's answers to an agent's MCP servers' own requests (see panto.h).
#[repr(C)]
pub struct PantoMcpClientHooks {
    /// Approves a sampling request (nonzero), or NULL: every request is answered.
    pub approve_sampling: Option<
        unsafe extern "C" fn(
            user_data: *mut c_void,
            request_json: *const c_char,
            request_json_len: usize,
        ) -> c_int,
    >,
    /// Answers an elicitation with JSON, or NULL: every elicitation is declined.
    pub elicit: Option<
        unsafe extern "C" fn(
            user_data: *mut c_void,
            request_json: *const c_char,
            request_json_len: usize,
            buf: *mut c_char,
            cap: usize,
        ) -> usize,
    >,
    /// Passed to every callback.
    pub user_data: *mut c_void,
    /// Called once with `user_data` when no callback can run any more, or NULL.
    pub free_user_data: Option<unsafe extern "C" fn(user_data: *mut c_void)>,
}

/// The most bytes of an answer taken from `elicit` (its buffer's size); a longer one
/// declines.
const MAX_ANSWER: usize = 1 << 20;

/// The callbacks and their `user_data`, shared by every place that may call them.
struct Host {
    approve: Option<PantoApproveSampling>,
    elicit: Option<PantoElicit>,
    user_data: *mut c_void,
    free: Option<unsafe extern "C" fn(*mut c_void)>,
}

// SAFETY: panto.h makes the callbacks' contract that they may be called from any of the
// library's threads, with `user_data`, concurrently; the library itself never reads
// through `user_data`.
unsafe impl Send for Host {}
// SAFETY: as for Send: shared use only passes `user_data` to the host's callbacks.
unsafe impl Sync for Host {}

impl Drop for Host {
    fn drop(&mut self) {
        if let Some(free) = self.free {
            // SAFETY: the host's callback (panto.h): called once, when the last holder of
            // the callbacks lets go, so no other callback runs after it.
            unsafe { free(self.user_data) };
        }
    }
}

/// A NUL-terminated copy of `s` (the callbacks get both a length and a terminator).
fn c_copy(s: &str) -> Vec<u8> {
    let mut v = Vec::with_capacity(s.len() + 1);
    v.extend_from_slice(s.as_bytes());
    v.push(0);
    v
}

impl Host {
    fn approve(&self, approve: PantoApproveSampling, request: &McpSamplingRequest) -> bool {
        let json = request.to_json();
        let text = c_copy(&json);
        // SAFETY: the host's callback (panto.h), with a NUL-terminated JSON text and its
        // length, valid during the call.
        let r = unsafe { approve(self.user_data, text.as_ptr().cast(), json.len()) };
        r != 0
    }

    /// The host's answer; one that is empty, too long, not UTF-8 or not an answer's
    /// JSON declines (a content that does not match the schema is the core's to refuse).
    /// One call with room for the longest answer taken: calling again to fetch a longer
    /// one would ask the person twice.
    fn elicit(&self, elicit: PantoElicit, request: &McpElicitationRequest) -> McpElicitationAnswer {
        let json = request.to_json();
        let text = c_copy(&json);
        let mut buf = vec![0u8; MAX_ANSWER];
        // SAFETY: the host's callback (panto.h), with a NUL-terminated JSON text (its
        // length given) and `buf` writable for `buf.len()` bytes during the call.
        let n = unsafe {
            elicit(
                self.user_data,
                text.as_ptr().cast(),
                json.len(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        };
        if n == 0 || n > buf.len() {
            return McpElicitationAnswer::Decline;
        }
        buf.truncate(n);
        answer(&buf)
    }
}

/// The answer `bytes` hold; a decline when they hold none (the turn's
/// `mcp_elicitation_request` event then says "decline").
fn answer(bytes: &[u8]) -> McpElicitationAnswer {
    std::str::from_utf8(bytes)
        .ok()
        .and_then(|text| McpElicitationAnswer::from_json(text).ok())
        .unwrap_or(McpElicitationAnswer::Decline)
}

/// Lends an agent's MCP servers the host's sampling approval and elicitation answers.
///
/// # Safety
/// See `panto.h`.
#[no_mangle]
pub unsafe extern "C" fn panto_agent_set_mcp_client_hooks(
    agent: *mut PantoAgent,
    hooks: *const PantoMcpClientHooks,
    err: *mut *mut crate::error::PantoError,
) -> PantoStatus {
    const F: &str = "panto_agent_set_mcp_client_hooks";
    // SAFETY: `err` is NULL or writable during the call (panto.h, "Errors").
    let err = unsafe { ErrOut::new(err) };
    // SAFETY: `agent` is NULL or a live agent (panto.h).
    let agent = match unsafe { agent_ref(F, agent) } {
        Ok(a) => a,
        Err(e) => return err.fail(e),
    };
    // SAFETY: `hooks` is NULL or points to a readable PantoMcpClientHooks (panto.h).
    let Some(hooks) = (unsafe { hooks.as_ref() }) else {
        return err.fail(invalid(F, "hooks is NULL"));
    };
    let set = agent.call(F, |a| {
        a.mcp_servers()
            .cloned()
            .ok_or_else(|| invalid(F, "the agent has no MCP servers (mcp_servers)"))
    });
    let set = match set {
        Ok(s) => s,
        Err(e) => return err.fail(e),
    };
    // From here the library owns user_data: freed when the last holder lets go.
    let host = Arc::new(Host {
        approve: hooks.approve_sampling,
        elicit: hooks.elicit,
        user_data: hooks.user_data,
        free: hooks.free_user_data,
    });
    let approve_sampling = host.approve.map(|approve| {
        let host = host.clone();
        Arc::new(move |r: &McpSamplingRequest| host.approve(approve, r)) as McpApproveSampling
    });
    let elicit = host.elicit.map(|elicit| {
        let host = host.clone();
        Arc::new(move |r: &McpElicitationRequest| host.elicit(elicit, r)) as McpElicit
    });
    set.set_client_hooks(McpClientHooks {
        approve_sampling,
        elicit,
    });
    err.status(Ok(()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_that_is_not_one_declines() {
        for bad in [
            &b"not json"[..],
            b"{\"action\":\"accept\"}",
            b"{\"action\":\"maybe\"}",
            b"[]",
            b"{\"action\":\"accept\",\"content\":{\"name\":\"\xff\"}}",
        ] {
            assert_eq!(answer(bad), McpElicitationAnswer::Decline, "{bad:?}");
        }
        assert_eq!(
            answer(b"{\"action\":\"cancel\"}"),
            McpElicitationAnswer::Cancel
        );
        let McpElicitationAnswer::Accept(content) =
            answer(br#"{"action":"accept","content":{"name":"Ada"}}"#)
        else {
            panic!("not accepted");
        };
        assert_eq!(content["name"], "Ada");
    }
}
