//! Owns `panto_agent_set_mcp_oauth` (ABI 1.3): the host's token store and URL opener
//! for the OAuth of an agent's MCP servers, as C callbacks (`PantoMcpOAuthHooks`). The
//! callbacks run on the library's threads; `user_data` is freed with `free_user_data`
//! once no callback can run any more.

use std::ffi::{c_char, c_int, c_void};
use std::sync::Arc;

use panto_core::{McpOAuthHooks, McpTokenStore};

use crate::agent::{agent_ref, PantoAgent};
use crate::boundary::{invalid, ErrOut};
use crate::types::PantoStatus;

/// `load_tokens`: writes the saved text for `server_url` into `buf` (at most `cap`
/// bytes) and returns its whole length; 0 when nothing is saved.
type PantoLoadTokens = unsafe extern "C" fn(
    user_data: *mut c_void,
    server_url: *const c_char,
    server_url_len: usize,
    buf: *mut c_char,
    cap: usize,
) -> usize;

/// `save_tokens`: keeps `tokens` for `server_url`.
type PantoSaveTokens = unsafe extern "C" fn(
    user_data: *mut c_void,
    server_url: *const c_char,
    server_url_len: usize,
    tokens: *const c_char,
    tokens_len: usize,
);

/// `open_url`: opens (or shows) an authorization URL; 0 when it did.
type PantoOpenUrl =
    unsafe extern "C" fn(user_data: *mut c_void, url: *const c_char, url_len: usize) -> c_int;

/// The host's OAuth callbacks for an agent's MCP servers (see panto.h).
#[repr(C)]
pub struct PantoMcpOAuthHooks {
    /// Loads the saved tokens of a server, or NULL: tokens live as long as the servers.
    pub load_tokens: Option<
        unsafe extern "C" fn(
            user_data: *mut c_void,
            server_url: *const c_char,
            server_url_len: usize,
            buf: *mut c_char,
            cap: usize,
        ) -> usize,
    >,
    /// Saves the tokens of a server, or NULL.
    pub save_tokens: Option<
        unsafe extern "C" fn(
            user_data: *mut c_void,
            server_url: *const c_char,
            server_url_len: usize,
            tokens: *const c_char,
            tokens_len: usize,
        ),
    >,
    /// Opens an authorization URL, or NULL: the authorization code grant fails.
    pub open_url: Option<
        unsafe extern "C" fn(user_data: *mut c_void, url: *const c_char, url_len: usize) -> c_int,
    >,
    /// Passed to every callback.
    pub user_data: *mut c_void,
    /// Called once with `user_data` when no callback can run any more, or NULL.
    pub free_user_data: Option<unsafe extern "C" fn(user_data: *mut c_void)>,
}

/// The most bytes of saved tokens taken from `load_tokens`.
const MAX_SAVED: usize = 1 << 20;

/// The callbacks and their `user_data`, shared by every place that may call them.
struct Host {
    load: Option<PantoLoadTokens>,
    save: Option<PantoSaveTokens>,
    open: Option<PantoOpenUrl>,
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

struct Store(Arc<Host>);

impl McpTokenStore for Store {
    fn load(&self, server_url: &str) -> Option<String> {
        let load = self.0.load?;
        let url = c_copy(server_url);
        let mut buf = vec![0u8; 4096];
        for _ in 0..2 {
            // SAFETY: the host's callback (panto.h), with `url` (NUL-terminated, its
            // length given) and `buf` writable for `buf.len()` bytes during the call.
            let n = unsafe {
                load(
                    self.0.user_data,
                    url.as_ptr().cast(),
                    server_url.len(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                )
            };
            if n == 0 || n > MAX_SAVED {
                return None;
            }
            if n <= buf.len() {
                buf.truncate(n);
                return String::from_utf8(buf).ok();
            }
            buf = vec![0u8; n];
        }
        None
    }

    fn save(&self, server_url: &str, tokens: &str) {
        let Some(save) = self.0.save else {
            return;
        };
        let url = c_copy(server_url);
        let text = c_copy(tokens);
        // SAFETY: the host's callback (panto.h), with two NUL-terminated strings and
        // their lengths, valid during the call.
        unsafe {
            save(
                self.0.user_data,
                url.as_ptr().cast(),
                server_url.len(),
                text.as_ptr().cast(),
                tokens.len(),
            )
        };
    }
}

/// Lends an agent's MCP servers the host's OAuth callbacks.
///
/// # Safety
/// See `panto.h`.
#[no_mangle]
pub unsafe extern "C" fn panto_agent_set_mcp_oauth(
    agent: *mut PantoAgent,
    hooks: *const PantoMcpOAuthHooks,
    err: *mut *mut crate::error::PantoError,
) -> PantoStatus {
    const F: &str = "panto_agent_set_mcp_oauth";
    // SAFETY: `err` is NULL or writable during the call (panto.h, "Errors").
    let err = unsafe { ErrOut::new(err) };
    // SAFETY: `agent` is NULL or a live agent (panto.h).
    let agent = match unsafe { agent_ref(F, agent) } {
        Ok(a) => a,
        Err(e) => return err.fail(e),
    };
    // SAFETY: `hooks` is NULL or points to a readable PantoMcpOAuthHooks (panto.h).
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
        load: hooks.load_tokens,
        save: hooks.save_tokens,
        open: hooks.open_url,
        user_data: hooks.user_data,
        free: hooks.free_user_data,
    });
    let store: Option<Arc<dyn McpTokenStore>> = if host.load.is_some() || host.save.is_some() {
        Some(Arc::new(Store(host.clone())))
    } else {
        None
    };
    let open_url: Option<panto_core::McpOpenUrl> = host.open.map(|open| {
        let host = host.clone();
        Arc::new(move |url: &str| {
            let text = c_copy(url);
            // SAFETY: the host's callback (panto.h), with a NUL-terminated URL and its
            // length, valid during the call.
            let r = unsafe { open(host.user_data, text.as_ptr().cast(), url.len()) };
            if r == 0 {
                Ok(())
            } else {
                Err(panto_core::Error::new(
                    panto_core::ErrorKind::Authentication,
                    format!("the host's open_url failed ({r}): no one could sign in"),
                ))
            }
        }) as panto_core::McpOpenUrl
    });
    set.set_oauth_hooks(McpOAuthHooks { store, open_url });
    err.status(Ok(()))
}
