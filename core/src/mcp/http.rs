//! Owns the Streamable HTTP transport: every message is a POST to the server's URL
//! with `Accept: application/json, text/event-stream`; a request's answer comes as one
//! JSON body or as an SSE stream that may carry the server's own requests and
//! notifications first. The session id the server gives at `initialize`
//! (`Mcp-Session-Id`) goes with every later message, as does the negotiated
//! `MCP-Protocol-Version`; a 404 for a session means it expired (the caller
//! initializes again); dropping the session DELETEs it. Header values are secrets:
//! marked sensitive, and never put into a message.
//!
//! After each `initialize`, a GET opens the stream on which the server sends what
//! belongs to no request (its pings, `list_changed`); a server may refuse it (405).
//! An SSE answer that ends before its result, after the server gave it event ids, is
//! resumed with a GET and `Last-Event-ID` after the server's `retry` delay (SEP-1699),
//! bounded in attempts. A redirect is a `config` error: no redirect is followed.
//! Not done: opening the GET stream again when it ends.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, ACCEPT, CONTENT_TYPE};
use serde_json::Value;

use super::oauth::OAuth;
use super::rpc::{Peer, RpcError, Wire};
use super::Limits;
use crate::error::{Error, ErrorKind, Result};

const SESSION_HEADER: &str = "mcp-session-id";
const VERSION_HEADER: &str = "mcp-protocol-version";
/// Most answers to a server's own requests posted at once.
const MAX_REPLIES: usize = 64;
/// The most of an error body shown.
const ERROR_BODY_SHOWN: usize = 500;
/// Most reconnections of a broken SSE answer in a row that bring no message.
const MAX_RESUMES: usize = 5;
/// The wait before resuming when the server gave no `retry`.
const DEFAULT_RETRY_DELAY: Duration = Duration::from_secs(1);
/// The longest wait before resuming, whatever the server's `retry` says.
const MAX_RETRY_DELAY: Duration = Duration::from_secs(30);
const LAST_EVENT_ID: &str = "last-event-id";

struct State {
    name: String,
    url: String,
    headers: HeaderMap,
    client: reqwest::Client,
    session: Mutex<Option<String>>,
    version: Mutex<Option<String>>,
    exchanges: Mutex<HashMap<u64, tokio::task::AbortHandle>>,
    /// The GET stream's task.
    listener: Mutex<Option<tokio::task::AbortHandle>>,
    /// Answers to the server's own requests being posted.
    replies: std::sync::atomic::AtomicUsize,
    max: usize,
    /// The server's OAuth, when it is configured.
    oauth: Option<Arc<OAuth>>,
}

impl State {
    fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
        m.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The request with the OAuth token, if there is one; and the token sent.
    fn authorized(
        &self,
        req: reqwest::RequestBuilder,
    ) -> (reqwest::RequestBuilder, Option<String>) {
        let Some(token) = self.oauth.as_ref().and_then(|o| o.token()) else {
            return (req, None);
        };
        match HeaderValue::from_str(&format!("Bearer {token}")) {
            Ok(mut v) => {
                v.set_sensitive(true);
                (req.header(reqwest::header::AUTHORIZATION, v), Some(token))
            }
            Err(_) => (req, None),
        }
    }
}

/// An HTTP server's session; dropping it ends the session (DELETE).
pub(crate) struct Session {
    state: Arc<State>,
}

impl Session {
    pub fn set_protocol_version(&self, version: &str) {
        *State::lock(&self.state.version) = Some(version.to_owned());
    }

    /// Opens the stream of messages outside requests (GET), replacing an older one.
    pub fn listen(&self, peer: &Arc<Peer>) {
        let task = tokio::spawn(listen(self.state.clone(), Arc::downgrade(peer)));
        if let Some(old) = State::lock(&self.state.listener).replace(task.abort_handle()) {
            old.abort();
        }
    }
}

async fn listen(state: Arc<State>, peer: Weak<Peer>) {
    let Some(session) = State::lock(&state.session).clone() else {
        return;
    };
    let mut req = state
        .client
        .get(&state.url)
        .headers(state.headers.clone())
        .header(ACCEPT, "text/event-stream")
        .header(SESSION_HEADER, session);
    if let Some(v) = State::lock(&state.version).clone() {
        req = req.header(VERSION_HEADER, v);
    }
    let (req, _) = state.authorized(req);
    let Ok(resp) = req.send().await else {
        return;
    };
    let is_sse = resp
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.to_ascii_lowercase().starts_with("text/event-stream"));
    if !resp.status().is_success() || !is_sse {
        // 405: the server offers no such stream.
        return;
    }
    let Some(p) = peer.upgrade() else {
        return;
    };
    let wire: Arc<dyn Wire> = Arc::new(HttpWire {
        state: state.clone(),
        peer: peer.clone(),
    });
    drop(p);
    let _ = read_sse(&state, &peer, &wire, resp, &mut Resume::default()).await;
}

/// What an SSE answer said about resuming it (SEP-1699): the last event id, the
/// `retry` delay, and how many messages it carried.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Resume {
    pub last_id: Option<String>,
    pub retry_ms: Option<u64>,
    pub messages: usize,
}

/// Routes every message of an SSE answer as it arrives; the server's requests are
/// answered with POSTs of their own. `resume` learns the stream's event ids and
/// `retry` as they come, also when the stream breaks.
async fn read_sse(
    state: &State,
    peer: &Weak<Peer>,
    wire: &Arc<dyn Wire>,
    resp: reqwest::Response,
    resume: &mut Resume,
) -> Result<()> {
    let mut parser = crate::sse::SseParser::new(state.max);
    let mut body = resp.bytes_stream();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| {
            Error::new(
                ErrorKind::Connection,
                format!("MCP server {:?}: {}", state.name, without_url(&e)),
            )
        })?;
        let (messages, fed) = sse_chunk(&mut parser, resume, &chunk);
        let Some(peer) = peer.upgrade() else {
            return Ok(());
        };
        for m in messages {
            for reply in peer.route(m) {
                wire.send(reply, None);
            }
        }
        fed.map_err(|e| Error::protocol(format!("MCP server {:?}: {}", state.name, e.message)))?;
    }
    Ok(())
}

/// Reads one chunk of an SSE answer: the messages it completed (routed even when the
/// chunk then broke the stream: they came before), and the parser's error if it did
/// (an event over the message cap, among others). `resume` learns the event ids,
/// `retry` and the count of messages. An event whose data is not JSON is skipped.
pub(crate) fn sse_chunk(
    parser: &mut crate::sse::SseParser,
    resume: &mut Resume,
    chunk: &[u8],
) -> (Vec<Value>, Result<()>) {
    let mut messages = Vec::new();
    let fed = parser.feed(chunk, |ev| {
        if !ev.id.is_empty() {
            resume.last_id = Some(ev.id.to_owned());
        }
        if !ev.data.trim().is_empty() {
            if let Some(v) = super::rpc::parse_message(ev.data.as_bytes()) {
                messages.push(v);
            }
        }
        Ok(())
    });
    if let Some(ms) = parser.retry_ms() {
        resume.retry_ms = Some(ms);
    }
    resume.messages += messages.len();
    (messages, fed.map(|_| ()))
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Some(l) = State::lock(&self.state.listener).take() {
            l.abort();
        }
        let Some(session) = State::lock(&self.state.session).take() else {
            return;
        };
        let state = self.state.clone();
        // Counted until the DELETE is answered or given up on, so that a program about
        // to exit (`panto mcp list`) waits for it with `wait_stopped`.
        let stopping = super::Stopping::start();
        let delete = async move {
            let _stopping = stopping;
            let mut req = state
                .client
                .delete(&state.url)
                .headers(state.headers.clone())
                .header(SESSION_HEADER, session);
            if let Some(v) = State::lock(&state.version).clone() {
                req = req.header(VERSION_HEADER, v);
            }
            let (req, _) = state.authorized(req);
            // Best effort: a server may refuse (405) or be gone.
            let _ = tokio::time::timeout(Duration::from_secs(2), req.send()).await;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(delete);
            }
            Err(_) => {
                let _ = std::thread::Builder::new()
                    .name("panto-mcp-stop".into())
                    .spawn(move || {
                        if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                            .enable_all()
                            .build()
                        {
                            rt.block_on(delete);
                        }
                    });
            }
        }
    }
}

struct HttpWire {
    state: Arc<State>,
    peer: Weak<Peer>,
}

impl Wire for HttpWire {
    fn send(&self, message: Value, request: Option<u64>) {
        let Some(peer) = self.peer.upgrade() else {
            return;
        };
        let state = self.state.clone();
        if request.is_none() && message.get("id").is_some() {
            // An answer to the server's own request: at most MAX_REPLIES posted at
            // once, so a server flooding requests cannot grow the tasks without bound.
            use std::sync::atomic::Ordering;
            if state.replies.fetch_add(1, Ordering::SeqCst) >= MAX_REPLIES {
                state.replies.fetch_sub(1, Ordering::SeqCst);
                return;
            }
            tokio::spawn(async move {
                exchange(state.clone(), peer, message, None).await;
                state.replies.fetch_sub(1, Ordering::SeqCst);
            });
            return;
        }
        let task = tokio::spawn(exchange(state.clone(), peer, message, request));
        if let Some(id) = request {
            let mut ex = State::lock(&state.exchanges);
            ex.retain(|_, h| !h.is_finished());
            ex.insert(id, task.abort_handle());
        }
    }

    fn abandon(&self, id: u64) {
        if let Some(h) = State::lock(&self.state.exchanges).remove(&id) {
            h.abort();
        }
    }
}

/// Connects nothing yet: the first message (`initialize`) opens the session.
pub(crate) fn connect(
    peer: &Arc<Peer>,
    url: &str,
    headers: &BTreeMap<String, String>,
    limits: Limits,
    oauth: Option<Arc<OAuth>>,
) -> Result<(Session, Arc<dyn Wire>)> {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        let n = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
            Error::config(format!(
                "mcp_servers.{}.headers.{name}: not a valid header name",
                peer.name
            ))
        })?;
        let mut v = HeaderValue::from_str(value).map_err(|_| {
            Error::config(format!(
                "mcp_servers.{}.headers.{name}: not a valid header value",
                peer.name
            ))
        })?;
        v.set_sensitive(true);
        map.insert(n, v);
    }
    let client = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| Error::internal(format!("cannot build an HTTP client: {e}")))?;
    let state = Arc::new(State {
        name: peer.name.clone(),
        url: url.to_owned(),
        headers: map,
        client,
        session: Mutex::new(None),
        version: Mutex::new(None),
        exchanges: Mutex::new(HashMap::new()),
        listener: Mutex::new(None),
        replies: std::sync::atomic::AtomicUsize::new(0),
        max: limits.max_message_bytes,
        oauth,
    });
    let wire = HttpWire {
        state: state.clone(),
        peer: Arc::downgrade(peer),
    };
    Ok((Session { state }, Arc::new(wire)))
}

fn kind_of(status: u16) -> ErrorKind {
    match status {
        401 => ErrorKind::Authentication,
        402 | 403 => ErrorKind::Permission,
        404 => ErrorKind::NotFound,
        429 => ErrorKind::RateLimited,
        500..=599 => ErrorKind::Server,
        _ => ErrorKind::BadRequest,
    }
}

/// One POST and what comes back. Answers to the server's own requests are posted in
/// turn; a failure fails the request it carried.
async fn exchange(state: Arc<State>, peer: Arc<Peer>, message: Value, request: Option<u64>) {
    let fail = |err: RpcError| {
        if let Some(id) = request {
            peer.fail(id, err);
        }
    };
    let initialize = message.get("method").and_then(Value::as_str) == Some("initialize");
    let body = message.to_string();
    let session = if initialize {
        None
    } else {
        State::lock(&state.session).clone()
    };
    if let Some(o) = state.oauth.as_ref().filter(|o| o.expiring()) {
        // Refreshed before it is refused; if that fails, the server's 401 says so.
        let _ = o.renew(o.token().as_deref()).await;
    }
    let mut renewed = false;
    let resp = loop {
        let mut req = state
            .client
            .post(&state.url)
            .headers(state.headers.clone())
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, "application/json, text/event-stream")
            .body(body.clone());
        if let Some(s) = &session {
            req = req.header(SESSION_HEADER, s);
        }
        if !initialize {
            if let Some(v) = State::lock(&state.version).clone() {
                req = req.header(VERSION_HEADER, v);
            }
        }
        let (req, used) = state.authorized(req);
        let resp = match req.send().await {
            Ok(r) => r,
            Err(e) => {
                let e = Error::new(
                    ErrorKind::Connection,
                    format!("MCP server {:?}: {}", state.name, without_url(&e)),
                );
                return fail(RpcError::Failed(e));
            }
        };
        if resp.status().as_u16() == 401 && !renewed {
            if let Some(o) = &state.oauth {
                o.note_challenge(
                    resp.headers()
                        .get(reqwest::header::WWW_AUTHENTICATE)
                        .and_then(|v| v.to_str().ok()),
                );
                renewed = true;
                match o.renew(used.as_deref()).await {
                    Ok(true) => continue,
                    // Only a person can sign in: the server's start does that.
                    Ok(false) => {}
                    Err(e) => return fail(RpcError::Failed(e)),
                }
            }
        }
        break resp;
    };
    let status = resp.status().as_u16();
    if resp.status().is_redirection() {
        return fail(RpcError::Failed(redirect_error(&state.name, &resp)));
    }
    if status == 404 && session.is_some() {
        // The session expired: the next initialize starts a new one.
        let mut current = State::lock(&state.session);
        if *current == session {
            *current = None;
        }
        return fail(RpcError::SessionExpired);
    }
    if !(200..300).contains(&status) {
        let text = read_capped(resp, ERROR_BODY_SHOWN).await;
        let e = Error::new(
            kind_of(status),
            format!(
                "MCP server {:?} answered HTTP {status}{}",
                state.name,
                if text.trim().is_empty() {
                    String::new()
                } else {
                    format!(": {}", text.trim())
                }
            ),
        )
        .with_status(status);
        return fail(RpcError::Failed(e));
    }
    if initialize {
        if let Some(s) = resp
            .headers()
            .get(SESSION_HEADER)
            .and_then(|v| v.to_str().ok())
        {
            *State::lock(&state.session) = Some(s.to_owned());
        }
    }
    let Some(id) = request else {
        return;
    };
    if status == 202 {
        // "Accepted" is an answer for notifications: a server that gives it to a
        // request says the answer will not come on this exchange, the only place a
        // Streamable HTTP server may send it.
        return fail(RpcError::Failed(Error::protocol(format!(
            "MCP server {:?} answered the request with HTTP 202 (accepted, no answer): \
             it will not answer it",
            state.name
        ))));
    }
    let content_type = resp
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    let wire: Arc<dyn Wire> = Arc::new(HttpWire {
        state: state.clone(),
        peer: Arc::downgrade(&peer),
    });
    let deliver = |message: Value| {
        for reply in peer.route(message) {
            wire.send(reply, None);
        }
    };
    if content_type.starts_with("text/event-stream") {
        let mut resume = Resume::default();
        let read = read_sse(&state, &Arc::downgrade(&peer), &wire, resp, &mut resume).await;
        match read {
            // A stream that broke or ended before the answer, after giving an event id:
            // resumed below.
            Err(e) if e.kind == ErrorKind::Connection && resume.last_id.is_some() => {}
            Err(e) => return fail(RpcError::Failed(e)),
            Ok(()) => {}
        }
        if peer.waiting(id) && resume.last_id.is_some() {
            if let Err(e) = resume_sse(&state, &peer, &wire, id, session, resume).await {
                return fail(e);
            }
        }
    } else {
        let text = match read_limited(resp, state.max).await {
            Ok(t) => t,
            Err(e) => return fail(RpcError::Failed(e.prefixed(&state.name))),
        };
        match json_answer(&text) {
            Ok(v) => deliver(v),
            Err(e) => {
                return fail(RpcError::Failed(Error::protocol(format!(
                    "MCP server {:?} answered with invalid JSON: {e}",
                    state.name
                ))))
            }
        }
    }
    // Still waiting after the answer's exchange ended: it never came.
    fail(RpcError::Failed(Error::new(
        ErrorKind::Incomplete,
        format!(
            "MCP server {:?} ended its answer without a result",
            state.name
        ),
    )));
}

/// Resumes the SSE answer to request `id` after its stream ended without the answer
/// (SEP-1699): after the server's `retry` delay (1 s if it gave none, at most
/// [`MAX_RETRY_DELAY`]), a GET with `Last-Event-ID` carries on from the last event
/// id, again until the answer comes, at most [`MAX_RESUMES`] times in a row without a
/// message in between. The request's own timeout bounds it too: the exchange is
/// aborted when the request is given up on. `Ok` when there is nothing more to try
/// (the caller fails the request if it is still waiting).
async fn resume_sse(
    state: &Arc<State>,
    peer: &Arc<Peer>,
    wire: &Arc<dyn Wire>,
    id: u64,
    session: Option<String>,
    mut resume: Resume,
) -> std::result::Result<(), RpcError> {
    let mut misses = 0;
    while peer.waiting(id) && misses < MAX_RESUMES {
        let Some(last_id) = resume.last_id.clone() else {
            return Ok(());
        };
        let delay = resume
            .retry_ms
            .map_or(DEFAULT_RETRY_DELAY, Duration::from_millis)
            .min(MAX_RETRY_DELAY);
        tokio::time::sleep(delay).await;
        let mut req = state
            .client
            .get(&state.url)
            .headers(state.headers.clone())
            .header(ACCEPT, "text/event-stream")
            .header(LAST_EVENT_ID, last_id);
        if let Some(s) = &session {
            req = req.header(SESSION_HEADER, s);
        }
        if let Some(v) = State::lock(&state.version).clone() {
            req = req.header(VERSION_HEADER, v);
        }
        let (req, _) = state.authorized(req);
        misses += 1;
        let Ok(resp) = req.send().await else {
            continue;
        };
        let status = resp.status().as_u16();
        if status == 404 && session.is_some() {
            return Err(RpcError::SessionExpired);
        }
        let is_sse = resp
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|t| t.to_ascii_lowercase().starts_with("text/event-stream"));
        if !resp.status().is_success() || !is_sse {
            return Err(RpcError::Failed(Error::new(
                ErrorKind::Incomplete,
                format!(
                    "MCP server {:?} ended its answer without a result, and refused to \
                     resume it (HTTP {status})",
                    state.name
                ),
            )));
        }
        let before = resume.messages;
        match read_sse(state, &Arc::downgrade(peer), wire, resp, &mut resume).await {
            Err(e) if e.kind != ErrorKind::Connection => return Err(RpcError::Failed(e)),
            _ => {}
        }
        if resume.messages > before {
            misses = 0;
        }
    }
    Ok(())
}

/// A 3xx answer: panto follows no redirect of an MCP server (its requests carry the
/// server's headers, credentials among them), so the configured URL is wrong — a
/// `config` error, as a provider's refused redirect is.
fn redirect_error(name: &str, resp: &reqwest::Response) -> Error {
    let status = resp.status().as_u16();
    let what = match resp
        .headers()
        .get(reqwest::header::LOCATION)
        .and_then(|v| v.to_str().ok())
    {
        Some(to) => format!("a redirect to {:?}", crate::text::truncate(to, 300)),
        None => "a redirect without a target".to_owned(),
    };
    Error::config(format!(
        "mcp_servers.{name}.url: the MCP server answered HTTP {status}, {what}; panto \
         follows no redirect of an MCP server (its requests carry the server's headers); \
         set url to the address you mean"
    ))
    .with_status(status)
}

/// A reqwest error's words without the URL (which may hold a token of the user's).
fn without_url(e: &reqwest::Error) -> String {
    let mut s = e.without_url_ref();
    if let Some(source) = std::error::Error::source(e) {
        s = format!("{s}: {source}");
    }
    s
}

trait WithoutUrl {
    fn without_url_ref(&self) -> String;
}

impl WithoutUrl for reqwest::Error {
    fn without_url_ref(&self) -> String {
        if self.is_timeout() {
            "timed out".to_owned()
        } else if self.is_connect() {
            "could not connect".to_owned()
        } else if self.is_body() || self.is_decode() {
            "the answer broke off".to_owned()
        } else {
            "the request failed".to_owned()
        }
    }
}

trait Prefixed {
    fn prefixed(self, name: &str) -> Error;
}

impl Prefixed for Error {
    fn prefixed(mut self, name: &str) -> Error {
        self.message = format!("MCP server {name:?}: {}", self.message);
        self
    }
}

async fn read_limited(resp: reqwest::Response, max: usize) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut body = resp.bytes_stream();
    while let Some(chunk) = body.next().await {
        let chunk = chunk
            .map_err(|_| Error::new(ErrorKind::Connection, "the answer broke off".to_owned()))?;
        append_capped(&mut out, &chunk, max)?;
    }
    Ok(out)
}

/// Adds one chunk of a JSON answer to `out`, refusing an answer larger than `max`
/// bytes before holding it.
pub(crate) fn append_capped(out: &mut Vec<u8>, chunk: &[u8], max: usize) -> Result<()> {
    if out.len() + chunk.len() > max {
        return Err(Error::protocol(format!(
            "an answer larger than {max} bytes"
        )));
    }
    out.extend_from_slice(chunk);
    Ok(())
}

/// A whole JSON answer (`application/json`) as the message it carries; `Err` says why
/// it is not JSON.
pub(crate) fn json_answer(body: &[u8]) -> std::result::Result<Value, String> {
    super::rpc::parse_message(body).ok_or_else(|| {
        serde_json::from_slice::<Value>(body)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    })
}

async fn read_capped(resp: reqwest::Response, max: usize) -> String {
    let mut out = Vec::new();
    let mut body = resp.bytes_stream();
    while let Some(Ok(chunk)) = body.next().await {
        let room = max.saturating_sub(out.len());
        out.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if out.len() >= max {
            break;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}
