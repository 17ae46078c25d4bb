//! The running server: accept loop, per-connection request loop, shared state, control
//! endpoints (`/_panto/...`) and the response body writer with its fault injection.
//!
//! Shared state (scenario cursor, request record) lives behind one `std::sync::Mutex` that is
//! never held across an `.await`: a request takes the lock once to match, consume and record,
//! then streams its response without it, so concurrent connections interleave freely while
//! exchange consumption stays in arrival order.
//!
//! The gate (for the `hold` and `flood` faults) is a `watch` channel; the connection registry
//! (for `connections_open` and `close_idle_connections`) is a second small mutex, also never
//! held across an `.await`.

use std::collections::{BTreeMap, HashMap};
use std::io::{self, Write as _};
use std::net::Shutdown;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::Serialize;
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, watch};

use crate::http::{response_head, Conn, ReadError, Request};
use crate::scenario::{Fault, Framing, RequestView, Response, Scenario};

/// One request as the server saw it, in arrival order.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct RecordedRequest {
    /// Position in the record (0-based; restarts after a reset or a new scenario).
    pub seq: usize,
    /// Which TCP connection carried it (0-based counter over the server's lifetime), so
    /// tests can assert that a client reused a pooled connection.
    pub connection: usize,
    pub method: String,
    /// Path without the query string.
    pub path: String,
    /// The query string without `?`, when there was one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub query: Option<String>,
    /// Lowercased header names; repeated headers joined with ", ".
    pub headers: BTreeMap<String, String>,
    /// The body parsed as JSON when it is JSON, else the body as a (lossy UTF-8) string;
    /// `null` when the request had no body.
    pub body: Value,
    /// Whether the request matched the exchange that was due.
    pub matched: bool,
    /// Index of the exchange that answered it.
    pub exchange: Option<usize>,
    /// Why it did not match (only for `matched: false`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mismatch: Option<String>,
    /// The body exactly as received (Rust API only; `body` above is its parsed form), for
    /// tests of byte-level request properties such as a stable prefix.
    #[serde(skip)]
    pub raw_body: Vec<u8>,
}

/// State shared by the accept loop, every connection task and the `TestServer` handle.
pub(crate) struct Shared {
    state: Mutex<State>,
    conns: Mutex<Conns>,
    connections_total: AtomicUsize,
    gate: watch::Sender<Gate>,
    /// Responses waiting at a `hold` or running a `flood` right now.
    held: AtomicUsize,
    /// Scripted responses being sent right now, and the most ever at once.
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    /// The spans the OTLP receiver took (`otlp`), as JSON.
    otlp_spans: Mutex<Vec<Value>>,
    /// The metric data points the OTLP receiver took (`otlp`), as JSON.
    otlp_metrics: Mutex<Vec<Value>>,
}

/// The gate that `hold` and `flood` faults wait for.
#[derive(Clone, Copy, Debug)]
struct Gate {
    open: bool,
    /// How many times the gate was opened: a waiter that saw the gate closed is released by
    /// any later opening, even one that was closed again before it looked.
    opened: u64,
}

/// The open connections. `open` counts the slots not closed by `close_idle_connections`
/// (those still finish their lingering close in the background but no longer count).
#[derive(Default)]
struct Conns {
    open: usize,
    slots: HashMap<usize, Slot>,
}

struct Slot {
    /// The connection's socket, borrowed, so `close_idle` can send the FIN right away from
    /// any thread. Not a duplicate: one descriptor per connection, so a 10,000-connection
    /// bench fits a 20,000-descriptor limit. Valid while the slot exists: the task's
    /// `Registered` removes the slot (under the `conns` lock, which `close_idle` holds while
    /// it uses this) before the socket is closed, so the number is never a reused one.
    sock: RawSock,
    /// Set while the connection is idle (see `enter_idle`); firing it tells the task that
    /// `close_idle_connections` closed it.
    idle: Option<oneshot::Sender<()>>,
    /// Idle, but the response's last bytes are still being written: then the task, not
    /// `close_idle_connections`, sends the FIN once they are out.
    writing: bool,
    /// Shut down by `close_idle` (and already uncounted from `open`).
    closed: bool,
}

struct State {
    scenario: Scenario,
    /// Index of the exchange due next.
    cursor: usize,
    /// How many requests the due exchange has answered so far.
    used: u64,
    record: Vec<RecordedRequest>,
}

impl Shared {
    pub(crate) fn new(scenario: Scenario) -> Shared {
        Shared {
            state: Mutex::new(State {
                scenario,
                cursor: 0,
                used: 0,
                record: Vec::new(),
            }),
            conns: Mutex::new(Conns::default()),
            connections_total: AtomicUsize::new(0),
            gate: watch::Sender::new(Gate {
                open: false,
                opened: 0,
            }),
            held: AtomicUsize::new(0),
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
            otlp_spans: Mutex::new(Vec::new()),
            otlp_metrics: Mutex::new(Vec::new()),
        }
    }

    fn conns(&self) -> MutexGuard<'_, Conns> {
        self.conns.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the state half-updated in a way that
        // matters for a test server, so keep serving instead of cascading the panic.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn requests(&self) -> Vec<RecordedRequest> {
        self.lock().record.clone()
    }

    /// The spans the OTLP receiver took so far.
    pub(crate) fn otlp_spans(&self) -> Vec<Value> {
        self.otlp_spans
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The metric data points the OTLP receiver took so far.
    pub(crate) fn otlp_metrics(&self) -> Vec<Value> {
        self.otlp_metrics
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Takes an OTLP trace export request's body; an error when it is not one, or when
    /// the receiver is full.
    fn receive_otlp(&self, req: &Request) -> Result<(), (u16, String)> {
        let spans = crate::otlp::decode(&req.body, &req.headers).map_err(|e| (400, e))?;
        let mut kept = self.otlp_spans.lock().unwrap_or_else(|e| e.into_inner());
        if kept.len() + spans.len() > crate::otlp::MAX_SPANS {
            return Err((
                507,
                "the receiver holds as many spans as it keeps".to_owned(),
            ));
        }
        kept.extend(spans);
        Ok(())
    }

    /// Takes an OTLP metrics export request's body; an error when it is not one, or when
    /// the receiver is full.
    fn receive_otlp_metrics(&self, req: &Request) -> Result<(), (u16, String)> {
        let points = crate::otlp::decode_metrics(&req.body, &req.headers).map_err(|e| (400, e))?;
        let mut kept = self.otlp_metrics.lock().unwrap_or_else(|e| e.into_inner());
        if kept.len() + points.len() > crate::otlp::MAX_POINTS {
            return Err((
                507,
                "the receiver holds as many metric points as it keeps".to_owned(),
            ));
        }
        kept.extend(points);
        Ok(())
    }

    pub(crate) fn set_scenario(&self, scenario: Scenario) {
        let mut st = self.lock();
        st.scenario = scenario;
        st.cursor = 0;
        st.used = 0;
        st.record.clear();
        drop(st);
        self.restart_max_in_flight();
        self.close_gate();
    }

    /// The high-water mark starts again from what is in flight now.
    fn restart_max_in_flight(&self) {
        self.max_in_flight
            .store(self.in_flight.load(Ordering::SeqCst), Ordering::SeqCst);
    }

    pub(crate) fn reset(&self) {
        let mut st = self.lock();
        st.cursor = 0;
        st.used = 0;
        st.record.clear();
        drop(st);
        self.restart_max_in_flight();
        self.close_gate();
    }

    pub(crate) fn open_gate(&self) {
        self.gate.send_modify(|g| {
            g.open = true;
            g.opened += 1;
        });
    }

    pub(crate) fn close_gate(&self) {
        self.gate.send_modify(|g| g.open = false);
    }

    pub(crate) fn held(&self) -> usize {
        self.held.load(Ordering::SeqCst)
    }

    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::SeqCst)
    }

    pub(crate) fn max_in_flight(&self) -> usize {
        self.max_in_flight.load(Ordering::SeqCst)
    }

    pub(crate) fn connections_open(&self) -> usize {
        self.conns().open
    }

    /// Shuts down (FIN) every idle connection (see `enter_idle`) and returns how many. They
    /// no longer count in `connections_open`, and their FINs are sent before this returns
    /// (right after the response's last bytes for a connection still writing them).
    pub(crate) fn close_idle_connections(&self) -> usize {
        let mut conns = self.conns();
        let mut closed = 0;
        for slot in conns.slots.values_mut() {
            if slot.closed {
                continue;
            }
            // Only idle connections whose task is still there to hear it (not so while the
            // runtime shuts down).
            let Some(wake) = slot.idle.take_if(|w| !w.is_closed()) else {
                continue;
            };
            // FIN now when the response is fully written; otherwise the task sends it as
            // soon as it learns of the close.
            if !slot.writing {
                let _ = slot.sock.shutdown_write();
            }
            let _ = wake.send(());
            slot.closed = true;
            closed += 1;
        }
        conns.open -= closed;
        closed
    }

    /// A new connection: counted open, registered for `close_idle_connections`.
    fn register(&self, id: usize, stream: &TcpStream) {
        let sock = RawSock::of(stream);
        let mut conns = self.conns();
        conns.open += 1;
        conns.slots.insert(
            id,
            Slot {
                sock,
                idle: None,
                writing: false,
                closed: false,
            },
        );
    }

    fn unregister(&self, id: usize) {
        let mut conns = self.conns();
        if let Some(slot) = conns.slots.remove(&id) {
            if !slot.closed {
                conns.open -= 1;
            }
        }
    }

    /// A keep-alive response is complete except for its last write, and nothing of a next
    /// request has arrived: from now on the connection is idle, as the client will see it.
    /// The receiver fires if `close_idle_connections` closes it.
    fn enter_idle(&self, id: usize) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        if let Some(slot) = self.conns().slots.get_mut(&id) {
            slot.idle = Some(tx);
            slot.writing = true;
        }
        rx
    }

    /// The last write of the response is done. `false` when `close_idle_connections` closed
    /// the connection during that write: the task must send the FIN itself.
    fn idle_written(&self, id: usize) -> bool {
        match self.conns().slots.get_mut(&id) {
            Some(slot) => {
                slot.writing = false;
                !slot.closed
            }
            None => true,
        }
    }

    /// The connection got bytes of a new request (or its client left). `false` when it was
    /// shut down as idle before that, so the request must not be served.
    fn leave_idle(&self, id: usize) -> bool {
        match self.conns().slots.get_mut(&id) {
            Some(slot) => {
                slot.idle = None;
                !slot.closed
            }
            None => true,
        }
    }

    pub(crate) fn connections_total(&self) -> usize {
        self.connections_total.load(Ordering::SeqCst)
    }

    /// Matches `req` against the due exchange, consumes it on success, records the request.
    fn take_exchange(&self, connection: usize, req: &Request) -> Result<Arc<Response>, String> {
        let json_body = serde_json::from_slice::<Value>(&req.body).ok();
        let recorded_body = match &json_body {
            Some(v) => v.clone(),
            None if req.body.is_empty() => Value::Null,
            None => Value::String(String::from_utf8_lossy(&req.body).into_owned()),
        };
        let view = RequestView {
            method: &req.method,
            path: &req.path,
            headers: &req.headers,
            raw_body: &req.body,
            json_body: json_body.as_ref(),
        };
        let mut st = self.lock();
        let seq = st.record.len();
        let cursor = st.cursor;
        let outcome = match st.scenario.exchanges.get(cursor) {
            None => Err(format!(
                "no exchange left (all {} used); received {} {}",
                st.scenario.exchanges.len(),
                req.method,
                req.path
            )),
            Some(ex) => match ex.check(&view) {
                Ok(()) => Ok((ex.response.clone(), ex.times)),
                Err(why) => Err(format!(
                    "request {seq} did not match exchange {cursor} ({}): {why}; received {} {}",
                    ex.describe(),
                    req.method,
                    req.path
                )),
            },
        };
        let (result, exchange, mismatch) = match outcome {
            Ok((response, times)) => {
                st.used += 1;
                if st.used >= times {
                    st.cursor += 1;
                    st.used = 0;
                }
                (Ok(response), Some(cursor), None)
            }
            Err(why) => (Err(why.clone()), None, Some(why)),
        };
        st.record.push(RecordedRequest {
            seq,
            connection,
            method: req.method.clone(),
            path: req.path.clone(),
            query: req.query.clone(),
            headers: req.headers.clone(),
            body: recorded_body,
            matched: result.is_ok(),
            exchange,
            mismatch,
            raw_body: req.body.clone(),
        });
        result
    }
}

/// Keeps `connections_open` right however a connection task ends (return, error, or being
/// dropped when the runtime shuts down).
struct OpenGuard(Arc<Shared>, usize);

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.unregister(self.1);
    }
}

/// A connection task's state: the registration first, so that it is dropped (the slot,
/// with its borrowed descriptor number, removed) before the socket is closed — struct
/// fields drop in declaration order, however the task ends.
struct Registered {
    guard: OpenGuard,
    conn: Conn,
}

/// A connection's socket as `close_idle_connections` reaches it: the raw descriptor (or
/// Windows socket) of the `TcpStream` its task owns. See `Slot::sock` for why it is valid.
#[derive(Clone, Copy)]
struct RawSock(
    #[cfg(unix)] std::os::fd::RawFd,
    #[cfg(windows)] std::os::windows::io::RawSocket,
);

impl RawSock {
    fn of(stream: &TcpStream) -> RawSock {
        #[cfg(unix)]
        return RawSock(std::os::fd::AsRawFd::as_raw_fd(stream));
        #[cfg(windows)]
        return RawSock(std::os::windows::io::AsRawSocket::as_raw_socket(stream));
    }

    fn shutdown_write(self) -> io::Result<()> {
        // SAFETY: the descriptor is open while its slot exists (`Slot::sock`), and the
        // caller holds the `conns` lock that keeps the slot there.
        #[cfg(unix)]
        let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(self.0) };
        #[cfg(windows)]
        let fd = unsafe { std::os::windows::io::BorrowedSocket::borrow_raw(self.0) };
        socket2::SockRef::from(&fd).shutdown(Shutdown::Write)
    }
}

/// Counts a response in `held` while it waits at a `hold` or runs a `flood`, however that
/// ends (gate opened, client gone, server stopped).
struct HeldGuard<'a>(&'a Shared);

impl<'a> HeldGuard<'a> {
    fn new(shared: &'a Shared) -> HeldGuard<'a> {
        shared.held.fetch_add(1, Ordering::SeqCst);
        HeldGuard(shared)
    }
}

impl Drop for HeldGuard<'_> {
    fn drop(&mut self) {
        self.0.held.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Counts a scripted response in `in_flight` (and the high-water mark `max_in_flight`)
/// while it is being sent, however that ends.
struct InFlightGuard<'a>(&'a Shared);

impl<'a> InFlightGuard<'a> {
    fn new(shared: &'a Shared) -> InFlightGuard<'a> {
        let now = shared.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        shared.max_in_flight.fetch_max(now, Ordering::SeqCst);
        InFlightGuard(shared)
    }
}

impl Drop for InFlightGuard<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Accepts connections until `shutdown` fires (or its sender is dropped).
pub(crate) async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut shutdown: oneshot::Receiver<()>,
) {
    loop {
        tokio::select! {
            _ = &mut shutdown => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => {
                    let id = shared.connections_total.fetch_add(1, Ordering::SeqCst);
                    shared.register(id, &stream);
                    // Streams are many tiny writes; Nagle would batch them and hide chunk
                    // boundaries.
                    let _ = stream.set_nodelay(true);
                    let mut task = Registered {
                        guard: OpenGuard(shared.clone(), id),
                        conn: Conn::new(stream),
                    };
                    tokio::spawn(async move {
                        handle_connection(&mut task.conn, id, &task.guard.0).await;
                    });
                }
                // EMFILE and friends: back off briefly instead of spinning; the listener
                // stays usable once descriptors are freed.
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            },
        }
    }
}

/// How a connection continues after a response.
enum After {
    KeepAlive,
    /// Send FIN, wait briefly for the client's, then drop.
    Close,
    /// Drop with SO_LINGER 0 already set: the kernel sends RST.
    Reset,
    /// Keep the socket open, send nothing, until the client closes or the server stops.
    Stall,
}

/// Serves one connection until it is done; the caller (its task) then closes the socket.
async fn handle_connection(conn: &mut Conn, id: usize, shared: &Shared) {
    // Set while the connection is idle (see `Shared::enter_idle`).
    let mut idle: Option<oneshot::Receiver<()>> = None;
    loop {
        if let Some(closed) = idle.take() {
            if !wait_while_idle(conn, id, shared, closed).await {
                return;
            }
        }
        let req = match conn.read_request().await {
            Ok(Some(req)) => req,
            Ok(None) | Err(ReadError::Gone) => return,
            Err(ReadError::Bad(msg)) => {
                let body = error_body("testserver_bad_request", &msg);
                let out = simple_response(400, &body, true);
                let _ = conn.stream.write_all(&out).await;
                graceful_close(conn).await;
                return;
            }
        };
        // Every path leaves the response's last bytes unwritten (`tail`), so that a
        // keep-alive connection is marked idle *before* the client can see the end of the
        // response: a test that calls `close_idle_connections` right after reading a
        // response always finds that connection idle.
        let reply = if req.path.starts_with("/_panto/") {
            Ok(control(shared, &req))
        } else {
            match shared.take_exchange(id, &req) {
                Ok(response) => {
                    // Counted until all but the response's last bytes are written: the
                    // client cannot have seen its end yet, so the count never includes a
                    // request the client already considers finished.
                    let _in_flight = InFlightGuard::new(shared);
                    send_response(conn, shared, &response, &req).await
                }
                Err(why) => {
                    let body = error_body("testserver_mismatch", &why);
                    let close = req.wants_close();
                    Ok((close_if(close), simple_response(404, &body, close)))
                }
            }
        };
        let Ok((after, tail)) = reply else { return };
        // Not idle when bytes of a next (pipelined) request were read already.
        if matches!(after, After::KeepAlive) && !conn.has_buffered() {
            idle = Some(shared.enter_idle(id));
        }
        if !tail.is_empty() && conn.stream.write_all(&tail).await.is_err() {
            return;
        }
        match after {
            After::KeepAlive => {}
            After::Close => {
                graceful_close(conn).await;
                return;
            }
            // Dropping the stream with linger 0 sends the RST.
            After::Reset => return,
            After::Stall => {
                conn.drain_until_closed().await;
                return;
            }
        }
    }
}

/// An idle connection waits for the first bytes of its next request. Returns `false` when
/// the connection is done: the client left, or `close_idle_connections` shut it down (a
/// request that raced that FIN is dropped, as with a real server's idle timeout).
async fn wait_while_idle(
    conn: &mut Conn,
    id: usize,
    shared: &Shared,
    mut closed: oneshot::Receiver<()>,
) -> bool {
    if !shared.idle_written(id) {
        graceful_close(conn).await;
        return false;
    }
    let got = tokio::select! {
        _ = &mut closed => None,
        r = conn.read_some() => Some(r),
    };
    let open = shared.leave_idle(id);
    match got {
        Some(Ok(0) | Err(_)) => false,
        Some(Ok(_)) if open => true,
        _ => {
            graceful_close(conn).await;
            false
        }
    }
}

fn close_if(close: bool) -> After {
    if close {
        After::Close
    } else {
        After::KeepAlive
    }
}

/// FIN first, then read until the client's FIN (bounded): closing a socket that still has
/// unread input makes the kernel send RST, which can destroy response bytes the client has
/// not read yet.
async fn graceful_close(conn: &mut Conn) {
    let _ = conn.stream.shutdown().await;
    let _ = tokio::time::timeout(Duration::from_millis(500), conn.drain_until_closed()).await;
}

fn error_body(kind: &str, message: &str) -> Vec<u8> {
    json!({"error": {"type": kind, "message": message}})
        .to_string()
        .into_bytes()
}

/// A complete `Content-Length` JSON response, for one write (mismatches, control endpoints,
/// 400s).
fn simple_response(status: u16, json_body: &[u8], close: bool) -> Vec<u8> {
    let mut framing = vec![("content-length", json_body.len().to_string())];
    if close {
        framing.push(("connection", "close".to_string()));
    }
    let mut out = response_head(status, [("content-type", "application/json")], &framing);
    out.extend_from_slice(json_body);
    out
}

/// Answers a `/_panto/...` request: how the connection goes on and the bytes to write.
fn control(shared: &Shared, req: &Request) -> (After, Vec<u8>) {
    let close = req.wants_close();
    let (status, body): (u16, Vec<u8>) = match (req.method.as_str(), req.path.as_str()) {
        ("POST", path @ ("/_panto/otlp/v1/traces" | "/_panto/otlp/v1/metrics")) => {
            let received = if path.ends_with("traces") {
                shared.receive_otlp(req).map(|()| crate::otlp::success())
            } else {
                shared
                    .receive_otlp_metrics(req)
                    .map(|()| crate::otlp::metrics_success())
            };
            let (status, body, kind) = match received {
                Ok(answer) => (200, answer, "application/x-protobuf"),
                Err((status, why)) => (
                    status,
                    error_body("testserver_bad_otlp", &why),
                    "application/json",
                ),
            };
            let mut framing = vec![("content-length", body.len().to_string())];
            if close {
                framing.push(("connection", "close".to_string()));
            }
            let mut out = response_head(status, [("content-type", kind)], &framing);
            out.extend_from_slice(&body);
            return (close_if(close), out);
        }
        ("GET", path @ ("/_panto/otlp/spans" | "/_panto/otlp/metrics")) => {
            let items = if path.ends_with("spans") {
                shared.otlp_spans()
            } else {
                shared.otlp_metrics()
            };
            let mut lines = Vec::new();
            for item in items {
                lines.extend_from_slice(item.to_string().as_bytes());
                lines.push(b'\n');
            }
            let mut framing = vec![("content-length", lines.len().to_string())];
            if close {
                framing.push(("connection", "close".to_string()));
            }
            let mut out = response_head(200, [("content-type", "application/x-ndjson")], &framing);
            out.extend_from_slice(&lines);
            return (close_if(close), out);
        }
        ("GET", "/_panto/requests") => match serde_json::to_vec(&shared.requests()) {
            Ok(b) => (200, b),
            Err(e) => (500, error_body("testserver_internal", &e.to_string())),
        },
        ("GET", "/_panto/stats") => (
            200,
            json!({
                "connections_open": shared.connections_open(),
                "connections_total": shared.connections_total(),
                "held": shared.held(),
                "in_flight": shared.in_flight(),
                "max_in_flight": shared.max_in_flight(),
            })
            .to_string()
            .into_bytes(),
        ),
        ("POST", "/_panto/reset") => {
            shared.reset();
            (200, b"{\"ok\":true}".to_vec())
        }
        ("POST", "/_panto/gate/open") => {
            shared.open_gate();
            (200, b"{\"ok\":true}".to_vec())
        }
        ("POST", "/_panto/gate/close") => {
            shared.close_gate();
            (200, b"{\"ok\":true}".to_vec())
        }
        ("POST", "/_panto/close-idle") => {
            let n = shared.close_idle_connections();
            (
                200,
                json!({"ok": true, "closed": n}).to_string().into_bytes(),
            )
        }
        ("POST", "/_panto/scenario") => {
            match std::str::from_utf8(&req.body)
                .map_err(|e| format!("scenario body is not UTF-8: {e}"))
                .and_then(Scenario::from_json)
            {
                Ok(s) => {
                    let n = s.len();
                    shared.set_scenario(s);
                    (
                        200,
                        json!({"ok": true, "exchanges": n}).to_string().into_bytes(),
                    )
                }
                Err(e) => (400, error_body("testserver_bad_scenario", &e)),
            }
        }
        (
            _,
            "/_panto/requests"
            | "/_panto/stats"
            | "/_panto/reset"
            | "/_panto/scenario"
            | "/_panto/gate/open"
            | "/_panto/gate/close"
            | "/_panto/close-idle"
            | "/_panto/otlp/v1/traces"
            | "/_panto/otlp/spans"
            | "/_panto/otlp/v1/metrics"
            | "/_panto/otlp/metrics",
        ) => (
            405,
            error_body(
                "testserver_method_not_allowed",
                &format!("{} is not allowed on {}", req.method, req.path),
            ),
        ),
        _ => (
            404,
            error_body(
                "testserver_unknown_control",
                &format!(
                    "unknown control endpoint {}; known: GET /_panto/requests, GET /_panto/stats, \
                     POST /_panto/scenario, POST /_panto/reset, POST /_panto/gate/open, \
                     POST /_panto/gate/close, POST /_panto/close-idle, \
                     POST /_panto/otlp/v1/traces, GET /_panto/otlp/spans, \
                     POST /_panto/otlp/v1/metrics, GET /_panto/otlp/metrics",
                    req.path
                ),
            ),
        ),
    };
    (close_if(close), simple_response(status, &body, close))
}

/// Plays one scripted response: optional delay, head, body with framing, chunking,
/// pacing and fault. Returns how the connection goes on and the response's last bytes,
/// which the caller writes.
async fn send_response(
    conn: &mut Conn,
    shared: &Shared,
    resp: &Response,
    req: &Request,
) -> io::Result<(After, Vec<u8>)> {
    if !resp.delay.is_zero() {
        tokio::time::sleep(resp.delay).await;
    }
    // HTTP/1.0 clients cannot decode chunked bodies: close-delimit instead.
    let framing = match resp.framing {
        Framing::Chunked if req.http10 => Framing::Close,
        f => f,
    };
    // A scenario that sets a framing header itself is deliberately describing the wire
    // (e.g. a lying Content-Length): send its header and add none of ours.
    let custom_framing = resp
        .headers
        .iter()
        .any(|(n, _)| n == "content-length" || n == "transfer-encoding");
    let close_after = framing == Framing::Close || req.wants_close();
    let mut extra: Vec<(&str, String)> = Vec::new();
    if !custom_framing {
        match framing {
            Framing::Chunked => extra.push(("transfer-encoding", "chunked".to_string())),
            Framing::Length => extra.push(("content-length", resp.body.len().to_string())),
            Framing::Close => {}
        }
    }
    if close_after {
        extra.push(("connection", "close".to_string()));
    }
    let head = response_head(
        resp.status,
        resp.headers.iter().map(|(n, v)| (n.as_str(), v.as_str())),
        &extra,
    );
    // The head goes out together with the first chunk(s), at the first flush.
    let mut out = Vec::with_capacity(FLUSH_AT + 4096);
    out.extend_from_slice(&head);
    let mut w = BodyWriter {
        stream: &mut conn.stream,
        chunked: framing == Framing::Chunked,
        out,
        sent: 0,
        first: true,
        chunk_delay: resp.chunk_delay,
        flush_first_chunk: resp.flush_first_chunk,
        fault: resp.fault.as_ref(),
        gate_passed: false,
        shared,
    };
    let after = play_body(&mut w, resp, close_after).await?;
    Ok((after, std::mem::take(&mut w.out)))
}

/// Feeds the body's chunks (re-split to `chunk_size` if asked) through the writer.
async fn play_body(
    w: &mut BodyWriter<'_>,
    resp: &Response,
    close_after: bool,
) -> io::Result<After> {
    match resp.chunk_size {
        None => {
            for chunk in resp.body.chunks() {
                if let Some(stop) = w.chunk(chunk).await? {
                    return Ok(stop);
                }
            }
        }
        Some(size) => {
            // Re-split the concatenated body into `size`-byte pieces on the fly; a piece
            // that lies inside one source chunk is written straight from it, only pieces
            // spanning a boundary are assembled in `pending`.
            let mut pending: Vec<u8> = Vec::with_capacity(size);
            for mut chunk in resp.body.chunks() {
                while !chunk.is_empty() {
                    if pending.is_empty() && chunk.len() >= size {
                        let (piece, rest) = chunk.split_at(size);
                        chunk = rest;
                        if let Some(stop) = w.chunk(piece).await? {
                            return Ok(stop);
                        }
                        continue;
                    }
                    let take = (size - pending.len()).min(chunk.len());
                    pending.extend_from_slice(&chunk[..take]);
                    chunk = &chunk[take..];
                    if pending.len() == size {
                        if let Some(stop) = w.chunk(&pending).await? {
                            return Ok(stop);
                        }
                        pending.clear();
                    }
                }
            }
            if let Some(stop) = w.chunk(&pending).await? {
                return Ok(stop);
            }
        }
    }
    w.finish(close_after).await
}

/// Bytes gathered before a write when no pause intervenes.
const FLUSH_AT: usize = 64 * 1024;

/// Approximate size of one `flood` write (whole copies of the chunk).
const FLOOD_BLOCK: usize = 8 * 1024;

/// Writes body chunks with the response's framing, pacing and fault.
///
/// Chunks are gathered in `out` and written when it holds `FLUSH_AT` bytes, and always
/// before any pause (chunk delay, trickle, fault, gate); what is left at the end is written
/// by the connection loop. So every chunk that is followed by a pause is on the wire before
/// the pause starts, exactly as if each chunk were written on its own, while back-to-back
/// chunks (a 100,000-chunk benchmark stream with no delay) cost one syscall per 64 KiB
/// instead of one per chunk. HTTP chunk boundaries are the same either way.
struct BodyWriter<'a> {
    stream: &'a mut TcpStream,
    chunked: bool,
    /// Pending bytes (head, framed chunks) not written yet; reused, never reallocated.
    out: Vec<u8>,
    /// Body bytes written so far (framing excluded): what `after_bytes` counts.
    sent: u64,
    first: bool,
    chunk_delay: Duration,
    flush_first_chunk: bool,
    fault: Option<&'a Fault>,
    /// A `hold` / `flood` has waited for the gate already (it fires once).
    gate_passed: bool,
    shared: &'a Shared,
}

impl BodyWriter<'_> {
    /// Sends one scenario chunk. `Some(after)` means a fault ended the response.
    async fn chunk(&mut self, data: &[u8]) -> io::Result<Option<After>> {
        // An empty HTTP chunk would terminate a chunked body early.
        if data.is_empty() {
            return Ok(None);
        }
        if !self.first && !self.chunk_delay.is_zero() {
            self.pause(self.chunk_delay).await?;
        }
        let first = std::mem::replace(&mut self.first, false);
        match self.fault {
            None => {
                self.emit(data).await?;
                if first && self.flush_first_chunk {
                    self.flush().await?;
                }
            }
            Some(&Fault::Trickle {
                after,
                every,
                bytes,
            }) => {
                let room = after.saturating_sub(self.sent);
                let (normal, slow) = data.split_at(clamp_len(room, data.len()));
                if !normal.is_empty() {
                    self.emit(normal).await?;
                }
                for (i, bit) in slow.chunks(bytes).enumerate() {
                    // Pause before every trickled piece except one that directly follows
                    // the chunk delay (or the head) so the pacing stays `every`.
                    if i > 0 || !normal.is_empty() {
                        self.pause(every).await?;
                    }
                    self.emit(bit).await?;
                }
            }
            Some(Fault::Hold { .. } | Fault::Flood { .. }) if self.gate_passed => {
                self.emit(data).await?
            }
            Some(&(Fault::Hold { after } | Fault::Flood { after, .. })) => {
                let room = after.saturating_sub(self.sent);
                let n = clamp_len(room, data.len());
                if n > 0 {
                    self.emit(&data[..n]).await?;
                }
                if n < data.len() {
                    self.wait_for_gate().await?;
                    self.emit(&data[n..]).await?;
                }
            }
            Some(&(Fault::Reset { after } | Fault::Stall { after } | Fault::Close { after })) => {
                let room = after.saturating_sub(self.sent);
                let n = clamp_len(room, data.len());
                if n > 0 {
                    self.emit(&data[..n]).await?;
                }
                if n < data.len() {
                    return self.trigger().await.map(Some);
                }
            }
        }
        Ok(None)
    }

    /// Frames `data` into the pending buffer (written once it is large enough).
    async fn emit(&mut self, data: &[u8]) -> io::Result<()> {
        if self.chunked {
            // `write!` into a Vec cannot fail and does not allocate per chunk.
            let _ = write!(self.out, "{:x}\r\n", data.len());
            self.out.extend_from_slice(data);
            self.out.extend_from_slice(b"\r\n");
        } else {
            self.out.extend_from_slice(data);
        }
        self.sent += data.len() as u64;
        if self.out.len() >= FLUSH_AT {
            self.flush().await?;
        }
        Ok(())
    }

    async fn flush(&mut self) -> io::Result<()> {
        if !self.out.is_empty() {
            self.stream.write_all(&self.out).await?;
            self.out.clear();
        }
        Ok(())
    }

    /// Everything emitted so far reaches the socket before the pause begins.
    async fn pause(&mut self, d: Duration) -> io::Result<()> {
        self.flush().await?;
        tokio::time::sleep(d).await;
        Ok(())
    }

    /// End of the body: a fault whose `after_bytes` reached the body's end still fires here
    /// (the body is complete but its framing is not); otherwise the terminating chunk, left
    /// in `out` for the caller to write.
    async fn finish(&mut self, close_after: bool) -> io::Result<After> {
        if matches!(
            self.fault,
            Some(Fault::Reset { .. } | Fault::Stall { .. } | Fault::Close { .. })
        ) {
            return self.trigger().await;
        }
        if matches!(self.fault, Some(Fault::Hold { .. } | Fault::Flood { .. })) && !self.gate_passed
        {
            self.wait_for_gate().await?;
        }
        if self.chunked {
            self.out.extend_from_slice(b"0\r\n\r\n");
        }
        Ok(close_if(close_after))
    }

    /// `hold` / `flood`: puts everything so far on the wire, then waits until the gate is
    /// open (or has been opened since this call), flooding meanwhile for `flood`. Counted in
    /// `held` while waiting. An error means the client went away.
    async fn wait_for_gate(&mut self) -> io::Result<()> {
        self.gate_passed = true;
        self.flush().await?;
        let mut gate = self.shared.gate.subscribe();
        let start = *gate.borrow_and_update();
        if start.open {
            return Ok(());
        }
        let passed = move |g: &Gate| g.open || g.opened != start.opened;
        let _held = HeldGuard::new(self.shared);
        if let Some(Fault::Flood { chunk, .. }) = self.fault {
            // Copies are framed once into a block of about FLOOD_BLOCK bytes (each copy its
            // own HTTP chunk) that is written again and again: back to back, as fast as the
            // client reads, yielding between writes so the gate and other connections are
            // served. A vanished client ends it with a write error.
            let mut one = Vec::with_capacity(chunk.len() + 12);
            if self.chunked {
                let _ = write!(one, "{:x}\r\n", chunk.len());
                one.extend_from_slice(chunk);
                one.extend_from_slice(b"\r\n");
            } else {
                one.extend_from_slice(chunk);
            }
            let block = one.repeat((FLOOD_BLOCK / one.len()).max(1));
            while !passed(&gate.borrow()) {
                self.stream.write_all(&block).await?;
                tokio::task::yield_now().await;
            }
            return Ok(());
        }
        // `hold`: wait for the gate, and notice a client that closes meanwhile (peek sees
        // EOF) so it does not stay counted in `held` until the gate opens. Once the client
        // has sent anything (a pipelined request), only the gate is watched.
        let mut probe = [0u8; 1];
        let mut watch_client = true;
        loop {
            tokio::select! {
                r = gate.wait_for(passed) => {
                    return r.map(|_| ()).map_err(|_| {
                        io::Error::new(io::ErrorKind::Interrupted, "server stopping")
                    });
                }
                r = self.stream.peek(&mut probe), if watch_client => match r {
                    Ok(0) => {
                        return Err(io::Error::new(
                            io::ErrorKind::ConnectionAborted,
                            "client closed during hold",
                        ))
                    }
                    Ok(_) => watch_client = false,
                    Err(e) => return Err(e),
                },
            }
        }
    }

    async fn trigger(&mut self) -> io::Result<After> {
        self.flush().await?;
        match self.fault {
            Some(Fault::Reset { .. }) => {
                // RST discards whatever is still in our send queue; give loopback a moment
                // to deliver the bytes already written so the client sees them before the
                // reset.
                tokio::time::sleep(Duration::from_millis(20)).await;
                socket2::SockRef::from(&*self.stream).set_linger(Some(Duration::ZERO))?;
                Ok(After::Reset)
            }
            Some(Fault::Stall { .. }) => Ok(After::Stall),
            _ => Ok(After::Close),
        }
    }
}

/// `min(room, len)` without truncating a u64 on 32-bit targets.
fn clamp_len(room: u64, len: usize) -> usize {
    usize::try_from(room).map_or(len, |r| r.min(len))
}
