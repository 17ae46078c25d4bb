//! Fault injection and connection lifetime: reset, close, stall, trickle, socket accounting.

mod common;

use std::io::{ErrorKind, Read};
use std::time::Duration;

use common::{scenario, Client};
use panto_testkit::eventually;
use panto_testserver::TestServer;
use serde_json::json;

fn two_events_with_fault(fault: serde_json::Value) -> TestServer {
    TestServer::start(scenario(json!({"exchanges": [{"response": {
        "chunks": ["data: a\n\n", "data: b\n\n"],
        "fault": fault
    }}]})))
    .unwrap()
}

#[test]
fn reset_fault_ends_the_stream_before_the_terminating_chunk() {
    let server = two_events_with_fault(json!({"kind": "reset", "after_bytes": 9}));
    let mut c = Client::connect(&server);
    c.send("POST", "/v1/chat/completions", &[], b"{}");
    let (status, _) = c.read_head().unwrap();
    assert_eq!(status, 200);
    let (bytes, err) = c.read_until_end_or_error();
    let first_chunk = b"9\r\ndata: a\n\n\r\n";
    // The prefix normally arrives whole; RST may in theory eat part of it, never add to it.
    assert!(
        first_chunk.starts_with(&bytes),
        "{:?}",
        String::from_utf8_lossy(&bytes)
    );
    match err {
        None => {} // early EOF
        Some(e) => assert_eq!(e.kind(), ErrorKind::ConnectionReset, "{e}"),
    }
    eventually("the reset connection to be closed", || {
        server.connections_open() == 0
    });
}

#[test]
fn reset_fault_with_zero_bytes_and_length_framing() {
    let server = TestServer::start(scenario(json!({"exchanges": [{"response": {
        "body": "0123456789", "framing": "length",
        "fault": {"kind": "reset", "after_bytes": 4}
    }}]})))
    .unwrap();
    let mut c = Client::connect(&server);
    c.send("GET", "/", &[], b"");
    let (_, headers) = c.read_head().unwrap();
    assert!(headers.contains(&("content-length".to_string(), "10".to_string())));
    let (bytes, err) = c.read_until_end_or_error();
    assert!(b"0123".starts_with(&bytes));
    if let Some(e) = err {
        assert_eq!(e.kind(), ErrorKind::ConnectionReset, "{e}");
    }
}

#[test]
fn close_fault_sends_fin_without_the_terminating_chunk() {
    let server = two_events_with_fault(json!({"kind": "close", "after_bytes": 9}));
    let mut c = Client::connect(&server);
    c.send("GET", "/", &[], b"");
    c.read_head().unwrap();
    let rest = c.read_to_end().expect("graceful EOF, not an error");
    assert_eq!(rest, b"9\r\ndata: a\n\n\r\n");

    // Mid-chunk: exactly after_bytes body bytes arrive, as a complete HTTP chunk.
    let server = two_events_with_fault(json!({"kind": "close", "after_bytes": 13}));
    let mut c = Client::connect(&server);
    c.send("GET", "/", &[], b"");
    c.read_head().unwrap();
    assert_eq!(c.read_chunk().unwrap().unwrap(), b"data: a\n\n");
    assert_eq!(c.read_chunk().unwrap().unwrap(), b"data");
    assert_eq!(c.read_to_end().unwrap(), b"");

    // after_bytes past the end: the whole body, but still no 0-chunk.
    let server = two_events_with_fault(json!({"kind": "close", "after_bytes": 1000}));
    let mut c = Client::connect(&server);
    c.send("GET", "/", &[], b"");
    c.read_head().unwrap();
    assert_eq!(
        c.read_to_end().unwrap(),
        b"9\r\ndata: a\n\n\r\n9\r\ndata: b\n\n\r\n"
    );
}

#[test]
fn stall_fault_keeps_the_connection_open_and_silent() {
    let server = two_events_with_fault(json!({"kind": "stall", "after_bytes": 9}));
    let mut c = Client::connect(&server);
    c.send("GET", "/", &[], b"");
    c.read_head().unwrap();
    assert_eq!(c.read_chunk().unwrap().unwrap(), b"data: a\n\n");
    assert!(c.take_buffered().is_empty());
    // Asserting absence: a short timeout is enough and keeps the test fast.
    c.stream
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut buf = [0u8; 64];
    match c.stream.read(&mut buf) {
        Ok(n) => panic!("expected silence, got {n} bytes: {:?}", &buf[..n]),
        Err(e) => assert!(
            matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
            "{e}"
        ),
    }
    assert_eq!(server.connections_open(), 1);
    // The client giving up closes the server side too.
    drop(c);
    eventually("the stalled connection to be closed", || {
        server.connections_open() == 0
    });
}

#[test]
fn dropping_the_server_closes_a_stalled_connection() {
    let server = two_events_with_fault(json!({"kind": "stall", "after_bytes": 0}));
    let mut c = Client::connect(&server);
    c.send("GET", "/", &[], b"");
    c.read_head().unwrap();
    drop(server);
    // Must end promptly (EOF or reset), well before the 10 s read timeout.
    let start = std::time::Instant::now();
    let (bytes, err) = c.read_until_end_or_error();
    assert!(bytes.is_empty());
    if let Some(e) = err {
        assert_eq!(e.kind(), ErrorKind::ConnectionReset, "{e}");
    }
    assert!(start.elapsed() < Duration::from_secs(5));
}

#[test]
fn trickle_fault_sends_the_rest_in_small_paced_pieces() {
    let server = TestServer::start(scenario(json!({"exchanges": [{"response": {
        "chunks": ["abcdef", "gh"],
        "fault": {"kind": "trickle", "after_bytes": 2, "bytes": 2, "every_ms": 5}
    }}]})))
    .unwrap();
    let r = Client::connect(&server).get("/");
    assert_eq!(r.text(), "abcdefgh");
    let sizes: Vec<usize> = r.chunks.iter().map(Vec::len).collect();
    assert_eq!(sizes, vec![2, 2, 2, 2]);
    assert_eq!(r.chunks[3], b"gh");

    // One byte at a time (the defaults), and the connection stays usable afterwards.
    server.set_scenario(scenario(json!({"exchanges": [
        {"response": {"body": "xyz", "fault": {"kind": "trickle", "every_ms": 1}}},
        {"response": {"body": "next"}}
    ]})));
    let mut c = Client::connect(&server);
    let r = c.get("/");
    assert_eq!(r.chunks, vec![b"x".to_vec(), b"y".to_vec(), b"z".to_vec()]);
    assert_eq!(c.get("/").text(), "next");
}

#[test]
fn connections_open_returns_to_zero_after_clients_close() {
    let server = TestServer::start(scenario(json!({"exchanges": [
        {"times": 4, "response": {"sse": [{"data": "x"}]}}
    ]})))
    .unwrap();
    let mut a = Client::connect(&server);
    let mut b = Client::connect(&server);
    a.get("/");
    b.get("/");
    eventually("both connections to be counted", || {
        server.connections_open() == 2
    });
    drop(a);
    eventually("one connection to close", || server.connections_open() == 1);
    // Same view over HTTP (the asking connection is open itself).
    let stats = b.get("/_panto/stats").json();
    assert_eq!(stats["connections_open"], 1);
    assert_eq!(stats["connections_total"], 2);
    drop(b);
    eventually("all connections to close", || {
        server.connections_open() == 0
    });
    assert_eq!(server.connections_total(), 2);
}

#[test]
fn client_dropping_mid_stream_frees_the_connection() {
    // A long, slow stream: the server notices the vanished client on its next writes.
    let server = TestServer::start(scenario(json!({"exchanges": [{"response": {
        "repeat": {"count": 1000, "chunk": {"data": "tick"}},
        "sse": [], "chunk_delay_ms": 5
    }}]})))
    .unwrap();
    let mut c = Client::connect(&server);
    c.send("GET", "/", &[], b"");
    c.read_head().unwrap();
    c.read_chunk().unwrap();
    drop(c);
    eventually("the abandoned stream's connection to close", || {
        server.connections_open() == 0
    });
}
