//! The gate and the faults that wait for it (`hold`, `flood`), and `close_idle_connections`.

mod common;

use std::io::{ErrorKind, Read};

use common::{scenario, Client};
use panto_testkit::eventually;
use panto_testserver::TestServer;
use serde_json::json;

fn start(v: serde_json::Value) -> TestServer {
    TestServer::start(scenario(v)).unwrap()
}

/// Asserts that nothing beyond what was already read has arrived: a non-blocking read finds
/// the socket empty. Used once `held()` shows the server waiting, so the check is exact.
fn assert_nothing_more(c: &mut Client) {
    assert!(c.take_buffered().is_empty(), "unexpected buffered bytes");
    c.stream.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 256];
    let r = c.stream.read(&mut buf);
    c.stream.set_nonblocking(false).unwrap();
    match r {
        Ok(n) => panic!(
            "expected nothing more, got {n} bytes: {:?}",
            String::from_utf8_lossy(&buf[..n])
        ),
        Err(e) => assert_eq!(e.kind(), ErrorKind::WouldBlock, "{e}"),
    }
}

#[test]
fn hold_waits_for_the_gate_then_finishes_and_keeps_the_connection() {
    let server = start(json!({"exchanges": [
        {"response": {
            "chunks": ["data: a\n\n", "data: b\n\n"],
            "fault": {"kind": "hold", "after_bytes": 13}
        }},
        {"response": {"body": "next"}}
    ]}));
    let mut c = Client::connect(&server);
    c.send("GET", "/", &[], b"");
    let (status, _) = c.read_head().unwrap();
    assert_eq!(status, 200);
    // Exactly 13 body bytes: the first chunk, then the first 4 bytes of the second as a
    // complete HTTP chunk.
    assert_eq!(c.read_chunk().unwrap().unwrap(), b"data: a\n\n");
    assert_eq!(c.read_chunk().unwrap().unwrap(), b"data");
    eventually("the response to wait at the gate", || server.held() == 1);
    assert_nothing_more(&mut c);

    server.open_gate();
    assert_eq!(c.read_chunk().unwrap().unwrap(), b": b\n\n");
    assert_eq!(c.read_chunk().unwrap(), None, "the response ends normally");
    assert_eq!(server.held(), 0);

    // The keep-alive connection is still usable.
    assert_eq!(c.get("/").text(), "next");
    let reqs = server.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0].connection, reqs[1].connection);
}

#[test]
fn hold_at_the_end_of_the_body_and_the_gate_lifecycle() {
    let body_then_hold = json!({"exchanges": [{"times": 3, "response": {
        "body": "abc", "fault": {"kind": "hold", "after_bytes": 3}
    }}]});
    let server = start(body_then_hold.clone());
    let mut c = Client::connect(&server);

    // at the end of the body: the whole body arrives, the terminating chunk waits.
    c.send("GET", "/", &[], b"");
    c.read_head().unwrap();
    assert_eq!(c.read_chunk().unwrap().unwrap(), b"abc");
    eventually("the response to wait at the gate", || server.held() == 1);
    assert_nothing_more(&mut c);
    server.open_gate();
    assert_eq!(c.read_chunk().unwrap(), None);

    // An open gate lets later holds straight through.
    let r = c.get("/");
    assert_eq!(r.chunks, vec![b"abc".to_vec()]);
    assert_eq!(server.held(), 0);

    // close_gate closes it again.
    server.close_gate();
    c.send("GET", "/", &[], b"");
    c.read_head().unwrap();
    assert_eq!(c.read_chunk().unwrap().unwrap(), b"abc");
    eventually("the response to wait at the gate", || server.held() == 1);
    // Opening and closing again before the waiting response looks still releases it.
    server.open_gate();
    server.close_gate();
    assert_eq!(c.read_chunk().unwrap(), None);
    assert_eq!(server.held(), 0);

    // set_scenario closes the gate (it was closed already: open it first).
    server.open_gate();
    server.set_scenario(scenario(body_then_hold));
    c.send("GET", "/", &[], b"");
    c.read_head().unwrap();
    assert_eq!(c.read_chunk().unwrap().unwrap(), b"abc");
    eventually("the response to wait at the gate", || server.held() == 1);

    // The same over HTTP, from a second connection.
    let mut ctl = Client::connect(&server);
    assert_eq!(ctl.get("/_panto/stats").json()["held"], 1);
    let r = ctl.post_json("/_panto/gate/open", &json!({}));
    assert_eq!(r.status, 200);
    assert_eq!(c.read_chunk().unwrap(), None);
    assert_eq!(ctl.get("/_panto/stats").json()["held"], 0);

    // reset closes the gate too.
    server.reset();
    c.send("GET", "/", &[], b"");
    c.read_head().unwrap();
    assert_eq!(c.read_chunk().unwrap().unwrap(), b"abc");
    eventually("the response to wait at the gate", || server.held() == 1);
    server.open_gate();
    assert_eq!(c.read_chunk().unwrap(), None);

    // POST /_panto/gate/close, and only POST.
    assert_eq!(ctl.post_json("/_panto/gate/close", &json!({})).status, 200);
    assert_eq!(ctl.get("/_panto/gate/open").status, 405);
    assert_eq!(ctl.get("/_panto/close-idle").status, 405);
    c.send("GET", "/", &[], b"");
    c.read_head().unwrap();
    assert_eq!(c.read_chunk().unwrap().unwrap(), b"abc");
    eventually("the response to wait at the gate", || server.held() == 1);
    server.open_gate();
    assert_eq!(c.read_chunk().unwrap(), None);
}

#[test]
fn hold_client_leaving_frees_the_connection() {
    let server = start(json!({"exchanges": [{"response": {
        "body": "abc", "fault": {"kind": "hold", "after_bytes": 1}
    }}]}));
    let mut c = Client::connect(&server);
    c.send("GET", "/", &[], b"");
    c.read_head().unwrap();
    assert_eq!(c.read_chunk().unwrap().unwrap(), b"a");
    eventually("the response to wait at the gate", || server.held() == 1);
    drop(c);
    eventually("the hold to notice the client left", || server.held() == 0);
    eventually("the connection to close", || server.connections_open() == 0);
}

const COPY: &[u8] = b": OPENROUTER PROCESSING\n\n";

#[test]
fn flood_repeats_the_chunk_until_the_gate_opens_then_sends_the_rest() {
    let server = start(json!({"exchanges": [
        {"response": {
            "sse": [{"data": "a"}, {"data": "b"}],
            "fault": {"kind": "flood", "after_bytes": 9,
                      "chunk": {"comment": "OPENROUTER PROCESSING"}}
        }},
        {"response": {"body": "next"}}
    ]}));
    let mut c = Client::connect(&server);
    c.send("POST", "/v1/chat/completions", &[], b"{}");
    c.read_head().unwrap();
    assert_eq!(c.read_chunk().unwrap().unwrap(), b"data: a\n\n");
    // Each copy is its own HTTP chunk, and they keep coming.
    for _ in 0..1000 {
        assert_eq!(c.read_chunk().unwrap().unwrap(), COPY);
    }
    assert_eq!(server.held(), 1);

    server.open_gate();
    let mut more = 0;
    loop {
        let chunk = c.read_chunk().unwrap().unwrap();
        if chunk == COPY {
            more += 1;
            continue;
        }
        assert_eq!(chunk, b"data: b\n\n", "after {more} more copies");
        break;
    }
    assert_eq!(c.read_chunk().unwrap(), None, "the response ends normally");
    assert_eq!(server.held(), 0);
    assert_eq!(c.get("/").text(), "next", "the connection stays usable");
}

#[test]
fn flood_with_an_event_chunk_at_the_end_of_a_close_delimited_body() {
    let server = start(json!({"exchanges": [{"response": {
        "sse": [{"data": "a"}],
        "framing": "close",
        "fault": {"kind": "flood", "after_bytes": 1000,
                  "chunk": {"event": "ping", "data": {"type": "ping"}}}
    }}]}));
    let copy: &[u8] = b"event: ping\ndata: {\"type\":\"ping\"}\n\n";
    let mut c = Client::connect(&server);
    c.send("GET", "/", &[], b"");
    c.read_head().unwrap();
    eventually("the flood to start", || server.held() == 1);
    // Read a good number of copies before opening the gate.
    let mut got = c.take_buffered();
    while got.len() < 9 + 100 * copy.len() {
        let mut buf = [0u8; 4096];
        let n = c.stream.read(&mut buf).unwrap();
        assert!(n > 0, "EOF during the flood");
        got.extend_from_slice(&buf[..n]);
    }
    server.open_gate();
    got.extend(c.read_to_end().unwrap());
    assert_eq!(&got[..9], b"data: a\n\n");
    let rest = &got[9..];
    assert_eq!(rest.len() % copy.len(), 0, "whole copies only");
    assert!(rest.chunks(copy.len()).all(|ch| ch == copy));
    assert_eq!(server.held(), 0);
}

#[test]
fn flood_stops_when_the_client_leaves() {
    let server = start(json!({"exchanges": [{"response": {
        "sse": [{"data": "a"}],
        "fault": {"kind": "flood", "after_bytes": 0, "chunk": ": x\n\n"}
    }}]}));
    let mut c = Client::connect(&server);
    c.send("GET", "/", &[], b"");
    c.read_head().unwrap();
    assert_eq!(c.read_chunk().unwrap().unwrap(), b": x\n\n");
    assert_eq!(server.held(), 1);
    drop(c);
    eventually("the flood to stop", || server.held() == 0);
    eventually("the connection to close", || server.connections_open() == 0);
}

#[test]
fn close_idle_connections_closes_idle_keep_alive_connections_only() {
    let server = start(json!({"exchanges": [
        {"match": {"path": "/idle"}, "response": {"body": "done"}},
        {"match": {"path": "/held"}, "response": {
            "body": "held body", "fault": {"kind": "hold", "after_bytes": 2}
        }},
        {"match": {"path": "/after"}, "response": {"body": "after"}}
    ]}));
    // `idle` has finished a response and waits for the next request.
    let mut idle = Client::connect(&server);
    assert_eq!(idle.get("/idle").text(), "done");
    // `busy` is in the middle of a response, held at the gate.
    let mut busy = Client::connect(&server);
    busy.send("GET", "/held", &[], b"");
    busy.read_head().unwrap();
    assert_eq!(busy.read_chunk().unwrap().unwrap(), b"he");
    eventually("the response to wait at the gate", || server.held() == 1);
    // `fresh` has not sent a request yet: not idle either.
    let fresh = Client::connect(&server);
    eventually("three connections", || server.connections_open() == 3);

    assert_eq!(server.close_idle_connections(), 1);
    // Counted as closed as soon as the call returns; the client sees EOF.
    assert_eq!(server.connections_open(), 2);
    assert_eq!(
        idle.read_to_end().unwrap(),
        b"",
        "EOF on the idle connection"
    );
    assert_eq!(server.close_idle_connections(), 0, "nothing idle left");

    // The busy response carries on after the gate opens, and its connection stays usable.
    server.open_gate();
    assert_eq!(busy.read_chunk().unwrap().unwrap(), b"ld body");
    assert_eq!(busy.read_chunk().unwrap(), None);
    assert_eq!(busy.get("/after").text(), "after");

    // Over HTTP: `busy` is idle now; the asking connection is busy with its own request.
    let mut ctl = Client::connect(&server);
    let r = ctl.post_json("/_panto/close-idle", &json!({}));
    assert_eq!(r.status, 200);
    assert_eq!(r.json(), json!({"ok": true, "closed": 1}));
    assert_eq!(
        busy.read_to_end().unwrap(),
        b"",
        "EOF on the now idle connection"
    );
    let stats = ctl.get("/_panto/stats").json();
    assert_eq!(stats["connections_open"], 2, "ctl and fresh: {stats}");
    assert_eq!(stats["held"], 0);

    drop(fresh);
    drop(ctl);
    eventually("all connections to close", || {
        server.connections_open() == 0
    });
    assert_eq!(server.connections_total(), 4);
    // Every request was served on the connection it came from, none dropped.
    let paths: Vec<String> = server.requests().into_iter().map(|r| r.path).collect();
    assert_eq!(paths, ["/idle", "/held", "/after"]);
}

#[test]
fn close_idle_right_after_each_response_always_finds_it_idle() {
    // The connection counts as idle before the client can see the end of a response, so
    // calling close_idle_connections as soon as a response is read never misses it.
    let server = start(json!({"exchanges": [{"times": 50, "response": {
        "sse": [{"data": "x"}, {"data": "[DONE]"}]
    }}]}));
    for i in 0..50 {
        let mut c = Client::connect(&server);
        assert_eq!(c.get("/").status, 200);
        assert_eq!(server.close_idle_connections(), 1, "round {i}");
        assert_eq!(c.read_to_end().unwrap(), b"");
    }
    eventually("all connections to close", || {
        server.connections_open() == 0
    });
}
