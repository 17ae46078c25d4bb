//! `panto-testserver`: a real HTTP/1.1 server that plays scripted LLM-provider responses.
//!
//! Tests of every language point their provider base URL at it: Rust in-process through
//! [`TestServer`], other languages through the `panto-testserver` binary. A [`Scenario`]
//! lists the expected requests in order and, for each, the response to play: an OpenAI
//! Chat Completions / Anthropic Messages style SSE stream, raw chunks, JSON, or a captured
//! provider body, with pacing and byte-exact fault injection (reset, stall, close, trickle,
//! and `hold` / `flood` until the test opens the server's gate).
//! The scenario JSON format is documented in `tests/server/README.md`.
//!
//! Module map:
//! - `scenario`: the JSON format, validation, pre-encoding and request matching.
//! - `http`: hand-written HTTP/1.1 request parsing and response framing on raw sockets.
//! - `server`: accept loop, connections, shared state, control endpoints, body writer and
//!   faults.
//! - `otlp`: the OTLP/HTTP trace and metrics receiver (`/_panto/otlp/v1/traces`,
//!   `/_panto/otlp/v1/metrics`), for the tests of panto's own OpenTelemetry export.
//! - this file: [`TestServer`], the in-process handle that owns the server thread.
//!
//! ```no_run
//! use panto_testserver::{Scenario, TestServer};
//! let scenario = Scenario::from_json(r#"{"exchanges":[{"response":{"sse":[{"data":"[DONE]"}]}}]}"#)?;
//! let server = TestServer::start(scenario).map_err(|e| e.to_string())?;
//! let base_url = server.url(); // "http://127.0.0.1:PORT"
//! # Ok::<(), String>(())
//! ```

mod http;
mod otlp;
mod scenario;
pub mod script;
mod server;

use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::Arc;
use std::thread::JoinHandle;

use tokio::sync::oneshot;

pub use scenario::Scenario;
pub use server::RecordedRequest;

use server::Shared;

/// The listen backlog asked for. `std`'s `bind` asks for 128, and a burst of thousands of
/// connects (the 10,000-stream bench) overflows that: the kernel drops the SYNs past it and
/// the client retries them 1, 3, 7… s later. The kernel caps it at `net.core.somaxconn`
/// (4,096 by default on Linux since 5.4).
const LISTEN_BACKLOG: i32 = 4096;

/// A non-blocking, close-on-exec listener on `addr` with [`LISTEN_BACKLOG`].
fn listen(addr: SocketAddrV4) -> io::Result<std::net::TcpListener> {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None)?;
    // As `std` does on Unix: a restarted server can bind a port left in TIME_WAIT.
    #[cfg(unix)]
    socket.set_reuse_address(true)?;
    socket.bind(&SocketAddr::V4(addr).into())?;
    socket.listen(LISTEN_BACKLOG)?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

/// A running server on `127.0.0.1`, served from its own thread and tokio runtime so it works
/// the same from sync tests, async tests and benchmarks. Dropping it stops the thread and
/// closes every socket, including stalled streams.
pub struct TestServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl TestServer {
    /// Starts a server on a free port of 127.0.0.1.
    pub fn start(scenario: Scenario) -> io::Result<TestServer> {
        TestServer::start_on_port(scenario, 0)
    }

    /// Starts a server on `127.0.0.1:port` (`0` picks a free port).
    pub fn start_on_port(scenario: Scenario, port: u16) -> io::Result<TestServer> {
        // Bind and build the runtime here, not in the thread, so failures reach the caller
        // and the port is known before `start` returns.
        let listener = listen(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port))?;
        let addr = listener.local_addr()?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()?;
        let shared = Arc::new(Shared::new(scenario));
        let (tx, rx) = oneshot::channel();
        let thread_shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name(format!("panto-testserver-{}", addr.port()))
            .spawn(move || {
                runtime.block_on(async move {
                    // `from_std` only fails outside a runtime with IO enabled, which this is
                    // not; were it to fail, connections are refused and tests see a clear
                    // connect error.
                    if let Ok(listener) = tokio::net::TcpListener::from_std(listener) {
                        server::serve(listener, thread_shared, rx).await;
                    }
                });
                // Dropping the runtime here, in the server's own thread, cancels every
                // connection task and so closes their sockets (stalled ones included).
                drop(runtime);
            })?;
        Ok(TestServer {
            addr,
            shared,
            shutdown: Some(tx),
            thread: Some(thread),
        })
    }

    /// `http://127.0.0.1:PORT` (no trailing slash).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every request recorded since the start, the last reset or the last scenario change.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.requests()
    }

    /// The spans its OTLP receiver took so far (set `OTEL_EXPORTER_OTLP_ENDPOINT` to
    /// [`TestServer::otlp_endpoint`]), as `GET /_panto/otlp/spans` gives them.
    pub fn otlp_spans(&self) -> Vec<serde_json::Value> {
        self.shared.otlp_spans()
    }

    /// The metric data points its OTLP receiver took so far, as
    /// `GET /_panto/otlp/metrics` gives them (one object per data point).
    pub fn otlp_metrics(&self) -> Vec<serde_json::Value> {
        self.shared.otlp_metrics()
    }

    /// The base URL of its OTLP/HTTP receiver, for `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub fn otlp_endpoint(&self) -> String {
        format!("{}/_panto/otlp", self.url())
    }

    /// Replaces the scenario, rewinds to its first exchange and clears the record.
    pub fn set_scenario(&self, scenario: Scenario) {
        self.shared.set_scenario(scenario);
    }

    /// Rewinds the scenario to its first exchange and clears the record.
    pub fn reset(&self) {
        self.shared.reset();
    }

    /// TCP connections currently open.
    pub fn connections_open(&self) -> usize {
        self.shared.connections_open()
    }

    /// TCP connections accepted since the start.
    pub fn connections_total(&self) -> usize {
        self.shared.connections_total()
    }

    /// Opens the gate: responses waiting at a `hold` fault, or running a `flood` fault,
    /// go on with the rest of their body, and later ones pass straight through. The gate is
    /// closed when the server starts and on every [`set_scenario`](Self::set_scenario) and
    /// [`reset`](Self::reset).
    pub fn open_gate(&self) {
        self.shared.open_gate();
    }

    /// Closes the gate again: `hold` / `flood` faults reached from now on wait for the next
    /// [`open_gate`](Self::open_gate).
    pub fn close_gate(&self) {
        self.shared.close_gate();
    }

    /// Responses waiting at a `hold` fault or running a `flood` fault right now. A `hold`
    /// or `flood` counts from the moment the bytes before it have been written to the socket.
    pub fn held(&self) -> usize {
        self.shared.held()
    }

    /// Scripted responses being sent right now (from the request's match until all but
    /// the response's last bytes are written; control requests and mismatches are not
    /// counted).
    pub fn in_flight(&self) -> usize {
        self.shared.in_flight()
    }

    /// The most scripted responses sent at once (see [`in_flight`](Self::in_flight)) since
    /// the server started or the last [`set_scenario`](Self::set_scenario) /
    /// [`reset`](Self::reset).
    pub fn max_in_flight(&self) -> usize {
        self.shared.max_in_flight()
    }

    /// Shuts down (sends FIN on) every keep-alive connection that is idle right now, i.e.
    /// has finished a response and has not received any byte of a next request, and returns
    /// how many. Connections in the middle of a request or response, and new connections
    /// that have not sent a request yet, are left alone. The FINs are sent before this
    /// returns and [`connections_open`](Self::connections_open) no longer counts the closed
    /// connections.
    pub fn close_idle_connections(&self) -> usize {
        self.shared.close_idle_connections()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        // Sending (or just dropping the sender) ends the accept loop; joining waits for the
        // runtime drop that closes the connections, so sockets are gone when drop returns.
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl std::fmt::Debug for TestServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestServer")
            .field("addr", &self.addr)
            .finish()
    }
}
