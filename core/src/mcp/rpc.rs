//! Owns the JSON-RPC 2.0 layer both transports share: request ids, the table of
//! requests waiting for an answer, routing what a server sends (answers, progress,
//! log lines, `list_changed`, its own requests such as `ping`), the per-request timeout
//! that progress re-arms, and `notifications/cancelled` for a request given up on.
//! Progress and log lines at or above the server's `log_level` go to the
//! [`CallProgress`] of the running `tools/call` they belong to. A
//! transport only moves messages: it implements [`Wire`] and feeds what arrives to
//! [`Peer::route`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::{oneshot, Notify};
use tracing::debug;

use super::sampling::{self, ClientFeatures, InFlight};
use super::McpLogLevel;
use crate::error::{Error, ErrorKind};
use crate::tool::{CallProgress, LogLine};

/// Most requests of one server waiting at once: a bound on the table, far above what
/// `tool_concurrency` lets an agent start.
const MAX_PENDING: usize = 4096;

/// Most bytes of a server log line's `data` that reach a turn.
const MAX_LOG_DATA: usize = 2000;
/// Most bytes of a server log line's `logger`.
const MAX_LOGGER: usize = 100;

/// Why a request got no result.
#[derive(Debug)]
pub(crate) enum RpcError {
    /// The server answered with a JSON-RPC error.
    Remote { code: i64, message: String },
    /// No answer or progress within the timeout.
    Timeout(Duration),
    /// The HTTP session is gone (404): initialize again.
    SessionExpired,
    /// The connection failed or ended; the error says how.
    Failed(Error),
}

/// One message as a server sent it, as JSON: strictly if it parses, else repaired the
/// way panto repairs a provider's text — invalid UTF-8 and lone UTF-16 surrogate
/// escapes (`"\ud800"`, which Node's and Python's JSON writers emit after an emoji was
/// cut) become U+FFFD — so that no answer is dropped for one broken character. `None`
/// if it is not JSON even then.
pub(crate) fn parse_message(bytes: &[u8]) -> Option<Value> {
    if let Ok(v) = serde_json::from_slice::<Value>(bytes) {
        return Some(v);
    }
    crate::provider::parse_value_lossy(&String::from_utf8_lossy(bytes))
}

/// Moves messages to a server. Answers come back through [`Peer::route`].
pub(crate) trait Wire: Send + Sync {
    /// Sends one message. `request` is its id when it is a request (a transport that
    /// answers each request on its own exchange, HTTP, fails that id on error).
    fn send(&self, message: Value, request: Option<u64>);
    /// The request `id` was given up on: stop whatever carries it (HTTP aborts its
    /// exchange). The `notifications/cancelled` is sent separately.
    fn abandon(&self, _id: u64) {}
}

/// Where the answer to one request comes.
pub(crate) type Answer = oneshot::Receiver<Result<Value, RpcError>>;

struct Pending {
    tx: oneshot::Sender<Result<Value, RpcError>>,
    progress: Arc<Notify>,
    /// Where a tool call's progress and the server's log lines go, for `tools/call`.
    reporter: Option<CallProgress>,
}

/// One connection's requests and notifications.
pub(crate) struct Peer {
    /// The server's name, for messages.
    pub name: String,
    next_id: AtomicU64,
    pending: Mutex<HashMap<u64, Pending>>,
    /// Set by `notifications/tools/list_changed`; taken between steps.
    pub list_changed: AtomicBool,
    /// Why the connection ended, once it did.
    closed: Mutex<Option<Error>>,
    /// The least level of the server's log lines that reach a turn (`None`: none do).
    pub log_level: Option<McpLogLevel>,
    /// What the server may ask of panto beyond `ping` (`None`: nothing).
    pub client: Option<Arc<ClientFeatures>>,
    /// Where answers that take time (sampling, elicitation) are sent, once they are ready.
    wire: OnceLock<Weak<dyn Wire>>,
}

impl Peer {
    pub fn new(name: &str) -> Peer {
        Peer {
            name: name.to_owned(),
            next_id: AtomicU64::new(1),
            pending: Mutex::new(HashMap::new()),
            list_changed: AtomicBool::new(false),
            closed: Mutex::new(None),
            log_level: None,
            client: None,
            wire: OnceLock::new(),
        }
    }

    /// Where the answers to the server's requests that take time are sent.
    pub fn set_wire(&self, wire: &Arc<dyn Wire>) {
        let _ = self.wire.set(Arc::downgrade(wire));
    }

    fn table(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Pending>> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Why the connection ended, if it did.
    pub fn closed(&self) -> Option<Error> {
        self.closed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Ends the connection: every waiting request fails with `why`, and so does every
    /// later one.
    pub fn close(&self, why: Error) {
        {
            let mut closed = self.closed.lock().unwrap_or_else(PoisonError::into_inner);
            if closed.is_none() {
                *closed = Some(why.clone());
            }
        }
        let drained: Vec<Pending> = self.table().drain().map(|(_, p)| p).collect();
        for p in drained {
            let _ = p.tx.send(Err(RpcError::Failed(why.clone())));
        }
    }

    /// Fails one request (its exchange broke).
    pub fn fail(&self, id: u64, err: RpcError) {
        if let Some(p) = self.table().remove(&id) {
            let _ = p.tx.send(Err(err));
        }
    }

    /// Whether request `id` still waits for its answer.
    pub fn waiting(&self, id: u64) -> bool {
        self.table().contains_key(&id)
    }

    /// Routes one message from the server. Returns the answers to send back (to the
    /// server's own requests).
    pub fn route(&self, message: Value) -> Vec<Value> {
        match message {
            Value::Array(items) => items.into_iter().flat_map(|m| self.route(m)).collect(),
            Value::Object(mut o) => {
                let method = o.get("method").and_then(Value::as_str).map(str::to_owned);
                match (method, o.remove("id")) {
                    (Some(method), Some(id)) => self
                        .answer_request(&method, id, o.get("params"))
                        .into_iter()
                        .collect(),
                    (Some(method), None) => {
                        self.notification(&method, o.get("params"));
                        Vec::new()
                    }
                    (None, Some(id)) => {
                        let Some(id) = id.as_u64() else {
                            debug!(server = %self.name, "an answer to an id panto never used");
                            return Vec::new();
                        };
                        let Some(p) = self.table().remove(&id) else {
                            // Late: the request timed out or was cancelled.
                            return Vec::new();
                        };
                        let outcome = if let Some(err) = o.get("error") {
                            Err(RpcError::Remote {
                                code: err.get("code").and_then(Value::as_i64).unwrap_or(0),
                                message: crate::text::truncate(
                                    err.get("message").and_then(Value::as_str).unwrap_or(""),
                                    2000,
                                )
                                .to_owned(),
                            })
                        } else {
                            Ok(o.remove("result").unwrap_or(Value::Null))
                        };
                        let _ = p.tx.send(outcome);
                        Vec::new()
                    }
                    (None, None) => Vec::new(),
                }
            }
            _ => Vec::new(),
        }
    }

    /// The server asked something: `ping` is answered at once; `sampling/createMessage`
    /// and `elicitation/create`, where the server's declaration enables them, are
    /// answered later by a task of their own (`None` here); the rest are "method not
    /// found".
    fn answer_request(&self, method: &str, id: Value, params: Option<&Value>) -> Option<Value> {
        if method == "ping" {
            return Some(json!({"jsonrpc": "2.0", "id": id, "result": {}}));
        }
        let client = self
            .client
            .as_ref()
            .filter(|c| ClientFeatures::handles(Some(c), method));
        let refuse = |error: Value| Some(json!({"jsonrpc": "2.0", "id": id, "error": error}));
        let Some(client) = client else {
            return refuse(sampling::rpc_error(
                -32601,
                "panto does not offer this method",
            ));
        };
        let (Some(wire), Ok(rt)) = (
            self.wire.get().and_then(Weak::upgrade),
            tokio::runtime::Handle::try_current(),
        ) else {
            return refuse(sampling::rpc_error(-32603, "panto cannot answer now"));
        };
        let Some(in_flight) = InFlight::start(client) else {
            return refuse(sampling::too_many());
        };
        // The request belongs to a running tool call of this server that takes reports
        // (the oldest still running when it is answered): its turn reports it and, for
        // sampling, asks the model.
        let calls = self.running_calls();
        let (client, name, method, params) = (
            client.clone(),
            self.name.clone(),
            method.to_owned(),
            params.cloned(),
        );
        let weak = Arc::downgrade(&wire);
        drop(wire);
        rt.spawn(async move {
            let _in_flight = in_flight;
            let outcome = sampling::answer(&name, &client, calls, &method, params.as_ref()).await;
            let reply = match outcome {
                Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
                Err(error) => json!({"jsonrpc": "2.0", "id": id, "error": error}),
            };
            if let Some(wire) = weak.upgrade() {
                wire.send(reply, None);
            }
        });
        None
    }

    /// The reporters of this server's running tool calls that take reports, oldest
    /// first.
    fn running_calls(&self) -> sampling::Calls {
        let mut calls: Vec<(u64, CallProgress)> = self
            .table()
            .iter()
            .filter_map(|(id, p)| p.reporter.as_ref().map(|r| (*id, r.clone())))
            .collect();
        calls.sort_unstable_by_key(|(id, _)| *id);
        sampling::Calls(calls.into_iter().map(|(_, r)| r).collect())
    }

    /// The reporter of this server's oldest running tool call that takes reports.
    fn oldest_call(&self) -> Option<CallProgress> {
        self.table()
            .iter()
            .filter_map(|(id, p)| p.reporter.as_ref().map(|r| (*id, r)))
            .min_by_key(|(id, _)| *id)
            .map(|(_, r)| r.clone())
    }

    fn notification(&self, method: &str, params: Option<&Value>) {
        match method {
            "notifications/progress" => {
                let token = params.and_then(|p| p.get("progressToken"));
                let id = match token {
                    Some(Value::Number(n)) => n.as_u64(),
                    Some(Value::String(s)) => s.parse().ok(),
                    _ => None,
                };
                let found = id.and_then(|id| {
                    self.table()
                        .get(&id)
                        .map(|p| (p.progress.clone(), p.reporter.clone()))
                });
                if let Some((rearm, reporter)) = found {
                    rearm.notify_one();
                    if let (Some(reporter), Some(params)) = (reporter, params) {
                        // Not a number: no report (the timeout is re-armed all the same).
                        if let Some(progress) = params.get("progress").and_then(Value::as_f64) {
                            reporter.report(
                                progress,
                                params.get("total").and_then(Value::as_f64),
                                params.get("message").and_then(Value::as_str),
                            );
                        }
                    }
                }
            }
            "notifications/tools/list_changed" => {
                self.list_changed.store(true, Ordering::SeqCst);
            }
            "notifications/message" => self.log(params),
            _ => {}
        }
    }

    /// Enters a new request into the table of those waiting for an answer: its id, where
    /// its answer will come, what its progress notifications wake, and where a tool
    /// call's progress and log lines are reported.
    pub fn register(
        &self,
        reporter: Option<CallProgress>,
    ) -> Result<(u64, Answer, Arc<Notify>), RpcError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        let progress = Arc::new(Notify::new());
        let mut table = self.table();
        if table.len() >= MAX_PENDING {
            return Err(RpcError::Failed(Error::new(
                ErrorKind::Tool,
                format!(
                    "MCP server {:?}: more than {MAX_PENDING} requests waiting",
                    self.name
                ),
            )));
        }
        table.insert(
            id,
            Pending {
                tx,
                progress: progress.clone(),
                reporter,
            },
        );
        Ok((id, rx, progress))
    }

    /// A log line of the server: to a running tool call of this server that takes
    /// reports (the oldest), when its level is at least `log_level`; else only to the
    /// debug log.
    fn log(&self, params: Option<&Value>) {
        let text = params.map(Value::to_string).unwrap_or_default();
        debug!(server = %self.name, log = crate::text::truncate(&text, 500), "MCP server log");
        let (Some(min), Some(params)) = (self.log_level, params) else {
            return;
        };
        let level = params
            .get("level")
            .and_then(Value::as_str)
            .and_then(McpLogLevel::parse);
        // A level panto does not know ranks as debug.
        let level = level.unwrap_or(McpLogLevel::Debug);
        if level < min {
            return;
        }
        let Some(reporter) = self.oldest_call() else {
            return;
        };
        let data = match params.get("data") {
            Some(Value::String(s)) => s.clone(),
            Some(v) => v.to_string(),
            None => String::new(),
        };
        reporter.log(LogLine {
            server: self.name.clone(),
            level: level.as_str(),
            logger: params
                .get("logger")
                .and_then(Value::as_str)
                .map(|l| crate::text::truncate(l, MAX_LOGGER).to_owned()),
            data: crate::text::truncate(&data, MAX_LOG_DATA).to_owned(),
        });
    }

    /// Sends a request and waits for its answer. The wait fails after `timeout` without
    /// an answer or a progress notification (each one re-arms it); a request given up
    /// on — timed out, or its future dropped because the turn was cancelled — is
    /// withdrawn with `notifications/cancelled` (except `initialize`, which the
    /// protocol does not let a client cancel).
    pub async fn request(
        self: &Arc<Peer>,
        wire: &Arc<dyn Wire>,
        method: &str,
        params: Value,
        timeout: Duration,
    ) -> Result<Value, RpcError> {
        self.request_reporting(wire, method, params, timeout, None)
            .await
    }

    /// [`Peer::request`], with the request's progress notifications (and the server's
    /// log lines while it runs) passed to `reporter`.
    pub async fn request_reporting(
        self: &Arc<Peer>,
        wire: &Arc<dyn Wire>,
        method: &str,
        params: Value,
        timeout: Duration,
        reporter: Option<CallProgress>,
    ) -> Result<Value, RpcError> {
        if let Some(why) = self.closed() {
            return Err(RpcError::Failed(why));
        }
        let (id, mut rx, progress) = self.register(reporter.filter(CallProgress::reports))?;
        let mut params = params;
        if method == "tools/call" {
            if let Value::Object(o) = &mut params {
                let mut meta = json!({"progressToken": id});
                // The per-request form of logging/setLevel (revisions after 2025-11-25).
                if let Some(level) = self.log_level {
                    meta["io.modelcontextprotocol/logLevel"] = level.as_str().into();
                }
                o.insert("_meta".into(), meta);
            }
        }
        let mut guard = Withdraw {
            peer: self,
            wire,
            id,
            done: method == "initialize",
        };
        wire.send(
            json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
            Some(id),
        );
        let mut deadline = tokio::time::Instant::now() + timeout;
        loop {
            tokio::select! {
                biased;
                r = &mut rx => {
                    guard.done = true;
                    return match r {
                        Ok(r) => r,
                        Err(_) => Err(RpcError::Failed(self.closed().unwrap_or_else(|| {
                            Error::new(ErrorKind::Connection, format!(
                                "MCP server {:?}: the connection ended", self.name))
                        }))),
                    };
                }
                _ = progress.notified() => deadline = tokio::time::Instant::now() + timeout,
                _ = tokio::time::sleep_until(deadline) => return Err(RpcError::Timeout(timeout)),
            }
        }
    }

    /// Sends a notification.
    pub fn notify(wire: &Arc<dyn Wire>, method: &str, params: Option<Value>) {
        let mut m = json!({"jsonrpc": "2.0", "method": method});
        if let Some(p) = params {
            m["params"] = p;
        }
        wire.send(m, None);
    }
}

/// A request's way out when its future ends without an answer.
struct Withdraw<'a> {
    peer: &'a Arc<Peer>,
    wire: &'a Arc<dyn Wire>,
    id: u64,
    done: bool,
}

impl Drop for Withdraw<'_> {
    fn drop(&mut self) {
        if self.done {
            self.peer.table().remove(&self.id);
            return;
        }
        self.peer.table().remove(&self.id);
        if self.peer.closed().is_some() {
            return;
        }
        self.wire.abandon(self.id);
        Peer::notify(
            self.wire,
            "notifications/cancelled",
            Some(json!({"requestId": self.id, "reason": "panto gave up on the request"})),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Sent(Mutex<Vec<Value>>);
    impl Wire for Sent {
        fn send(&self, message: Value, _: Option<u64>) {
            self.0.lock().unwrap().push(message);
        }
    }

    #[tokio::test]
    async fn answers_progress_and_cancel() {
        let peer = Arc::new(Peer::new("s"));
        let sent = Arc::new(Sent(Mutex::new(Vec::new())));
        let wire: Arc<dyn Wire> = sent.clone();
        // An answer resolves its request.
        let p2 = peer.clone();
        let call = tokio::spawn({
            let wire = wire.clone();
            async move {
                p2.request(
                    &wire,
                    "tools/call",
                    json!({"name": "t"}),
                    Duration::from_secs(60),
                )
                .await
            }
        });
        while sent.0.lock().unwrap().is_empty() {
            tokio::task::yield_now().await;
        }
        let req = sent.0.lock().unwrap()[0].clone();
        assert_eq!(req["params"]["_meta"]["progressToken"], req["id"]);
        let id = req["id"].clone();
        assert!(peer
            .route(json!({"jsonrpc": "2.0", "id": id, "result": {"ok": 1}}))
            .is_empty());
        assert_eq!(call.await.unwrap().unwrap(), json!({"ok": 1}));
        // A ping from the server is answered; an unknown request is refused.
        let replies = peer.route(json!([{"jsonrpc": "2.0", "id": "a", "method": "ping"},
                                        {"jsonrpc": "2.0", "id": 7, "method": "sampling/createMessage"}]));
        assert_eq!(
            replies[0],
            json!({"jsonrpc": "2.0", "id": "a", "result": {}})
        );
        assert_eq!(replies[1]["error"]["code"], -32601);
        // list_changed is noted.
        peer.route(json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}));
        assert!(peer.list_changed.load(Ordering::SeqCst));
    }

    #[test]
    fn whatever_a_server_sends_is_routed_without_panic() {
        let mut peer = Peer::new("s");
        peer.log_level = Some(McpLogLevel::Debug);
        let hostile = [
            json!(null),
            json!(3),
            json!("text"),
            json!([[[1]], {"id": -1}, {"id": "x", "result": 1}]),
            json!({"id": u64::MAX, "error": "not an object"}),
            json!({"id": 1.5, "result": {}}),
            json!({"method": 7, "id": 1}),
            json!({"method": "notifications/progress", "params": {"progressToken": {"a": 1}}}),
            json!({"method": "notifications/progress", "params": "x"}),
            json!({"method": "notifications/message", "params": {"data": "y".repeat(10_000)}}),
            json!({"method": "notifications/message", "params": {"level": 7, "data": {"a": [1]}}}),
            json!({"method": "notifications/message", "params": "not an object"}),
            json!({"method": "notifications/progress", "params": {"progressToken": 1, "progress": "x"}}),
            json!({"method": "notifications/progress", "params": {"progressToken": 1, "progress": 1e308, "total": -1}}),
            json!({"jsonrpc": "2.0", "id": {"nested": true}, "method": "roots/list"}),
        ];
        for m in hostile {
            for reply in peer.route(m) {
                // Only the server's requests get answers, always well-formed.
                assert_eq!(reply["jsonrpc"], "2.0");
                assert!(reply.get("result").is_some() || reply.get("error").is_some());
            }
        }
        assert!(peer.table().is_empty());
    }

    #[tokio::test]
    async fn progress_rearms_the_timeout_and_a_timeout_withdraws() {
        let peer = Arc::new(Peer::new("s"));
        let sent = Arc::new(Sent(Mutex::new(Vec::new())));
        let wire: Arc<dyn Wire> = sent.clone();
        let p2 = peer.clone();
        let w2 = wire.clone();
        let call = tokio::spawn(async move {
            p2.request(&w2, "tools/call", json!({}), Duration::from_millis(2000))
                .await
        });
        // Progress every second for three seconds: without re-arming, the call would
        // have failed at two.
        for _ in 0..3 {
            tokio::time::sleep(Duration::from_millis(1000)).await;
            assert!(!call.is_finished(), "the call timed out despite progress");
            peer.route(json!({"jsonrpc": "2.0", "method": "notifications/progress",
                              "params": {"progressToken": 1, "progress": 1}}));
        }
        let r = call.await.unwrap();
        assert!(matches!(r, Err(RpcError::Timeout(_))));
        let sent = sent.0.lock().unwrap();
        assert_eq!(sent[1]["method"], "notifications/cancelled");
        assert_eq!(sent[1]["params"]["requestId"], 1);
        assert!(peer.table().is_empty());
    }
}
