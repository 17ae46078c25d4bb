//! HTTP behaviour of scripted exchanges: framing, keep-alive, matching, control endpoints.

mod common;

use std::io::Write;

use common::{post_json, scenario, Client};
use panto_testserver::{Scenario, TestServer};
use serde_json::json;

#[test]
fn sse_body_is_chunked_one_http_chunk_per_event() {
    // Raw JSON text, not `json!`: `serde_json::Value` sorts keys, and this checks that
    // `data` objects keep the key order written in the scenario.
    let server = TestServer::start(
        Scenario::from_json(
            r#"{"exchanges": [{
                "match": {"method": "POST", "path": "/v1/chat/completions"},
                "response": {"sse": [
                    {"data": {"id": "c1", "choices": [{"delta": {"content": "Hi"}}]}},
                    {"event": "ping", "data": "x", "id": 3},
                    {"comment": "keep-alive"},
                    {"data": "[DONE]"}
                ]}
            }]}"#,
        )
        .unwrap(),
    )
    .unwrap();
    let resp = post_json(
        &server,
        "/v1/chat/completions?x=1",
        &json!({"stream": true}),
    );
    assert_eq!(resp.status, 200);
    assert_eq!(resp.header("content-type"), Some("text/event-stream"));
    assert_eq!(resp.header("transfer-encoding"), Some("chunked"));
    assert_eq!(resp.header("content-length"), None);
    let chunks: Vec<String> = resp
        .chunks
        .iter()
        .map(|c| String::from_utf8(c.clone()).unwrap())
        .collect();
    assert_eq!(
        chunks,
        vec![
            "data: {\"id\":\"c1\",\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\n",
            "event: ping\nid: 3\ndata: x\n\n",
            ": keep-alive\n\n",
            "data: [DONE]\n\n",
        ]
    );
    let reqs = server.requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].path, "/v1/chat/completions");
    assert_eq!(reqs[0].query.as_deref(), Some("x=1"));
    assert_eq!(reqs[0].body, json!({"stream": true}));
    assert!(reqs[0].matched);
    assert_eq!(reqs[0].exchange, Some(0));
}

#[test]
fn keep_alive_serves_sequential_requests_on_one_connection() {
    let server = TestServer::start(scenario(json!({"exchanges": [
        {"response": {"sse": [{"data": "one"}]}},
        {"response": {"json": {"n": 2}}},
        {"response": {"body": "three", "framing": "length"}}
    ]})))
    .unwrap();
    let mut c = Client::connect(&server);
    assert_eq!(c.post_json("/a", &json!({})).text(), "data: one\n\n");
    let second = c.post_json("/b", &json!({}));
    assert_eq!(second.json(), json!({"n": 2}));
    assert_eq!(second.header("content-type"), Some("application/json"));
    let third = c.get("/c");
    assert_eq!(third.header("content-length"), Some("5"));
    assert_eq!(third.text(), "three");
    let reqs = server.requests();
    assert_eq!(reqs.len(), 3);
    assert_eq!(reqs[0].connection, reqs[1].connection);
    assert_eq!(reqs[1].connection, reqs[2].connection);
    assert_eq!(reqs[2].body, serde_json::Value::Null);
    assert_eq!(server.connections_total(), 1);

    // A new connection gets a new id.
    server.reset();
    post_json(&server, "/a", &json!({}));
    assert_ne!(server.requests()[0].connection, reqs[0].connection);
}

#[test]
fn requests_consume_exchanges_in_order_and_mismatches_get_404() {
    let server = TestServer::start(scenario(json!({"exchanges": [
        {"match": {"path": "/first"}, "response": {"body": "1"}},
        {"match": {"path": "/second", "method": "POST"}, "response": {"body": "2"}}
    ]})))
    .unwrap();
    let mut c = Client::connect(&server);
    // Out of order: the due exchange is /first, so /second is a mismatch and consumes nothing.
    let miss = c.post_json("/second", &json!({}));
    assert_eq!(miss.status, 404);
    let err = miss.json();
    assert_eq!(err["error"]["type"], "testserver_mismatch");
    let msg = err["error"]["message"].as_str().unwrap();
    assert!(msg.contains("/first") && msg.contains("/second"), "{msg}");

    assert_eq!(c.post_json("/first", &json!({})).text(), "1");
    // Method predicate.
    assert_eq!(c.get("/second").status, 404);
    assert_eq!(c.post_json("/second", &json!({})).text(), "2");
    // All used.
    let after = c.post_json("/first", &json!({}));
    assert_eq!(after.status, 404);
    assert!(after.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("no exchange left"));

    let reqs = server.requests();
    let summary: Vec<(bool, Option<usize>)> =
        reqs.iter().map(|r| (r.matched, r.exchange)).collect();
    assert_eq!(
        summary,
        vec![
            (false, None),
            (true, Some(0)),
            (false, None),
            (true, Some(1)),
            (false, None)
        ]
    );
    assert!(reqs[0]
        .mismatch
        .as_deref()
        .unwrap()
        .contains("expected path"));
    assert_eq!(
        reqs.iter().map(|r| r.seq).collect::<Vec<_>>(),
        vec![0, 1, 2, 3, 4]
    );
}

#[test]
fn times_answers_several_consecutive_requests() {
    let server = TestServer::start(scenario(json!({"exchanges": [
        {"times": 3, "response": {"body": "a"}},
        {"response": {"body": "b"}}
    ]})))
    .unwrap();
    let mut c = Client::connect(&server);
    let bodies: Vec<String> = (0..5)
        .map(|_| {
            let r = c.get("/x");
            if r.status == 200 {
                r.text()
            } else {
                r.status.to_string()
            }
        })
        .collect();
    assert_eq!(bodies, vec!["a", "a", "a", "b", "404"]);
    let ex: Vec<Option<usize>> = server.requests().iter().map(|r| r.exchange).collect();
    assert_eq!(ex, vec![Some(0), Some(0), Some(0), Some(1), None]);
}

#[test]
fn body_pointer_header_and_substring_predicates() {
    let server = TestServer::start(scenario(json!({"exchanges": [{
        "match": {
            "body": {"/model": "gpt-4o", "/stream": true, "/messages/0/role": "user"},
            "body_contains": ["get_weather"],
            "headers": {"Authorization": "Bearer sk-test"}
        },
        "response": {"body": "ok"}
    }]})))
    .unwrap();
    let good = json!({"model": "gpt-4o", "stream": true,
        "messages": [{"role": "user", "content": "hi"}], "tools": [{"name": "get_weather"}]});
    let auth = [("authorization", "Bearer sk-test")];
    let mut c = Client::connect(&server);

    let mut wrong_model = good.clone();
    wrong_model["model"] = json!("gpt-3.5");
    c.send("POST", "/", &auth, wrong_model.to_string().as_bytes());
    let r = c.read_response().unwrap();
    assert_eq!(r.status, 404);
    assert!(r.text().contains("/model"), "{}", r.text());

    let mut no_stream = good.clone();
    no_stream.as_object_mut().unwrap().remove("stream");
    c.send("POST", "/", &auth, no_stream.to_string().as_bytes());
    assert_eq!(c.read_response().unwrap().status, 404);

    let mut no_tool = good.clone();
    no_tool["tools"] = json!([]);
    c.send("POST", "/", &auth, no_tool.to_string().as_bytes());
    assert_eq!(c.read_response().unwrap().status, 404);

    c.send(
        "POST",
        "/",
        &[("authorization", "Bearer other")],
        good.to_string().as_bytes(),
    );
    assert_eq!(c.read_response().unwrap().status, 404);

    c.send("POST", "/", &[], b"not json get_weather");
    assert_eq!(c.read_response().unwrap().status, 404);

    // Header names are case-insensitive on both sides.
    c.send(
        "POST",
        "/",
        &[("AUTHORIZATION", "Bearer sk-test")],
        good.to_string().as_bytes(),
    );
    let r = c.read_response().unwrap();
    assert_eq!((r.status, r.text().as_str()), (200, "ok"));

    let reqs = server.requests();
    assert_eq!(reqs.len(), 6);
    assert_eq!(reqs[4].body, json!("not json get_weather"));
    assert_eq!(reqs[5].headers["authorization"], "Bearer sk-test");
}

#[test]
fn chunk_size_resplits_the_whole_body() {
    let server = TestServer::start(scenario(json!({"exchanges": [
        {"response": {"sse": [{"data": "abc"}, {"data": "defgh"}], "chunk_size": 7}},
        {"response": {"json": {"k": "0123456789"}, "chunk_size": 4}}
    ]})))
    .unwrap();
    let mut c = Client::connect(&server);
    let r = c.get("/");
    let expected = "data: abc\n\ndata: defgh\n\n";
    assert_eq!(r.text(), expected);
    let sizes: Vec<usize> = r.chunks.iter().map(Vec::len).collect();
    assert_eq!(sizes, vec![7, 7, 7, 3]);
    let r = c.get("/");
    assert_eq!(r.text(), "{\"k\":\"0123456789\"}");
    assert!(r.chunks[..r.chunks.len() - 1].iter().all(|c| c.len() == 4));
}

#[test]
fn repeat_streams_many_copies_before_the_rest() {
    let server = TestServer::start(scenario(json!({"exchanges": [{"response": {
        "repeat": {"count": 100000, "chunk": {"data": {"choices": [{"delta": {"content": "x"}}]}}},
        "sse": [{"data": "[DONE]"}]
    }}]})))
    .unwrap();
    let r = Client::connect(&server).get("/");
    assert_eq!(r.chunks.len(), 100_001);
    let one = b"data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n";
    assert!(r.chunks[..100_000].iter().all(|c| c == one));
    assert_eq!(r.chunks[100_000], b"data: [DONE]\n\n");
}

#[test]
fn raw_chunks_status_headers_and_close_framing() {
    let server = TestServer::start(scenario(json!({"exchanges": [
        {"response": {"status": 429, "headers": {"retry-after": "0", "x-request-id": "r1"},
                      "json": {"error": {"type": "rate_limit_error"}}}},
        {"response": {"chunks": ["data: {\"a\"", ":1}\n\n", ""], "framing": "close"}}
    ]})))
    .unwrap();
    let mut c = Client::connect(&server);
    let r = c.get("/");
    assert_eq!(r.status, 429);
    assert_eq!(r.header("retry-after"), Some("0"));
    assert_eq!(r.header("x-request-id"), Some("r1"));
    assert_eq!(r.json()["error"]["type"], "rate_limit_error");
    c.send("GET", "/", &[], b"");
    let (status, headers) = c.read_head().unwrap();
    assert_eq!(status, 200);
    assert!(headers
        .iter()
        .all(|(n, _)| n != "content-length" && n != "transfer-encoding"));
    assert!(headers.contains(&("connection".to_string(), "close".to_string())));
    let body = c.read_to_end().unwrap();
    assert_eq!(body, b"data: {\"a\":1}\n\n");
}

#[test]
fn chunked_request_bodies_and_expect_continue() {
    let server = TestServer::start(scenario(json!({"exchanges": [
        {"match": {"body": {"/a": 1}}, "response": {"body": "chunked ok"}},
        {"match": {"body": {"/b": 2}}, "response": {"body": "continue ok"}}
    ]})))
    .unwrap();
    let mut c = Client::connect(&server);
    c.stream
        .write_all(
            b"POST /x HTTP/1.1\r\nhost: h\r\ntransfer-encoding: chunked\r\n\r\n\
              3;ext=1\r\n{\"a\r\n4\r\n\":1}\r\n0\r\nx-trailer: y\r\n\r\n",
        )
        .unwrap();
    assert_eq!(c.read_response().unwrap().text(), "chunked ok");

    let body = br#"{"b":2}"#;
    c.stream
        .write_all(
            format!(
                "POST /y HTTP/1.1\r\nhost: h\r\nexpect: 100-continue\r\ncontent-length: {}\r\n\r\n",
                body.len()
            )
            .as_bytes(),
        )
        .unwrap();
    let (status, _) = c.read_head().unwrap();
    assert_eq!(status, 100);
    c.stream.write_all(body).unwrap();
    assert_eq!(c.read_response().unwrap().text(), "continue ok");
}

#[test]
fn malformed_request_gets_400_and_close() {
    let server = TestServer::start(Scenario::empty()).unwrap();
    for bad in [
        &b"GARBAGE\r\n\r\n"[..],
        b"GET / HTTP/1.1\r\ncontent-length: nope\r\n\r\n",
        b"GET / HTTP/2.0\r\n\r\n",
        b"POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
    ] {
        let mut c = Client::connect(&server);
        c.stream.write_all(bad).unwrap();
        let r = c.read_response().unwrap();
        assert_eq!(r.status, 400, "{}", String::from_utf8_lossy(bad));
        assert_eq!(r.header("connection"), Some("close"));
        assert_eq!(r.json()["error"]["type"], "testserver_bad_request");
        assert_eq!(c.read_to_end().unwrap(), b"");
    }
    assert!(server.requests().is_empty());
}

#[test]
fn control_endpoints() {
    let server = TestServer::start(Scenario::empty()).unwrap();
    let mut c = Client::connect(&server);
    assert_eq!(c.get("/v1/models").status, 404);

    let reqs = c.get("/_panto/requests").json();
    assert_eq!(
        reqs.as_array().unwrap().len(),
        1,
        "control calls are not recorded"
    );
    assert_eq!(reqs[0]["seq"], 0);
    assert_eq!(reqs[0]["method"], "GET");
    assert_eq!(reqs[0]["path"], "/v1/models");
    assert_eq!(reqs[0]["matched"], false);
    assert_eq!(reqs[0]["exchange"], serde_json::Value::Null);
    assert_eq!(reqs[0]["headers"]["host"], "127.0.0.1");
    assert!(reqs[0]["connection"].is_u64());

    let stats = c.get("/_panto/stats").json();
    assert_eq!(
        stats,
        json!({"connections_open": 1, "connections_total": 1, "held": 0, "in_flight": 0, "max_in_flight": 0})
    );

    let new = json!({"exchanges": [{"match": {"path": "/v1/models"}, "response": {"json": {"data": []}}}]});
    let r = c.post_json("/_panto/scenario", &new);
    assert_eq!(r.status, 200);
    assert_eq!(c.get("/_panto/requests").json(), json!([]));
    assert_eq!(c.get("/v1/models").json(), json!({"data": []}));
    assert_eq!(c.get("/v1/models").status, 404, "scenario used up");

    let r = c.post_json("/_panto/reset", &json!({}));
    assert_eq!(r.status, 200);
    assert_eq!(c.get("/_panto/requests").json(), json!([]));
    assert_eq!(
        c.get("/v1/models").status,
        200,
        "reset rewinds the scenario"
    );

    let bad = c.post_json("/_panto/scenario", &json!({"exchanges": [{"times": 0}]}));
    assert_eq!(bad.status, 400);
    assert_eq!(bad.json()["error"]["type"], "testserver_bad_scenario");
    assert_eq!(c.get("/_panto/nope").status, 404);
    assert_eq!(c.get("/_panto/reset").status, 405);

    // The in-process view agrees with the HTTP one.
    assert_eq!(server.requests().len(), 1);
    assert_eq!(server.connections_open(), 1);
}

#[test]
fn set_scenario_replaces_and_clears() {
    let server = TestServer::start(scenario(
        json!({"exchanges": [{"response": {"body": "old"}}]}),
    ))
    .unwrap();
    assert_eq!(Client::connect(&server).get("/").text(), "old");
    server.set_scenario(scenario(
        json!({"exchanges": [{"response": {"body": "new"}}]}),
    ));
    assert!(server.requests().is_empty());
    assert_eq!(Client::connect(&server).get("/").text(), "new");
}

#[test]
fn concurrent_connections_are_served_concurrently() {
    // The first stream stalls forever after one byte; a second connection must still be
    // answered, which only works if connections are served concurrently.
    let server = TestServer::start(scenario(json!({"exchanges": [
        {"match": {"path": "/slow"},
         "response": {"chunks": ["a", "b"], "fault": {"kind": "stall", "after_bytes": 1}}},
        {"match": {"path": "/fast"}, "response": {"body": "fast"}}
    ]})))
    .unwrap();
    let mut slow = Client::connect(&server);
    slow.send("GET", "/slow", &[], b"");
    slow.read_head().unwrap();
    assert_eq!(slow.read_chunk().unwrap().unwrap(), b"a");
    assert_eq!(Client::connect(&server).get("/fast").text(), "fast");
}

#[test]
fn body_file_resolves_relative_to_the_scenario_file() {
    let dir = std::env::temp_dir().join(format!("panto-ts-bodyfile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("body.sse"), b"data: from file\n\n").unwrap();
    std::fs::write(
        dir.join("s.json"),
        br#"{"exchanges":[{"response":{"body_file":"body.sse"}}]}"#,
    )
    .unwrap();
    let s = Scenario::from_file(dir.join("s.json")).unwrap();
    let server = TestServer::start(s).unwrap();
    let r = Client::connect(&server).get("/");
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    assert_eq!(r.text(), "data: from file\n\n");
    let missing =
        Scenario::from_json(r#"{"exchanges":[{"response":{"body_file":"/nonexistent/x"}}]}"#)
            .unwrap_err();
    assert!(missing.contains("body_file"), "{missing}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn demo_weather_scenario_plays_a_tool_call_then_text() {
    let s = Scenario::from_file(common::tests_path("server/scenarios/demo-weather.json")).unwrap();
    let server = TestServer::start(s).unwrap();
    let mut c = Client::connect(&server);
    let first = c.post_json(
        "/v1/chat/completions",
        &json!({"model": "gpt-4o", "stream": true, "messages": [{"role": "user", "content": "Weather in Paris?"}]}),
    );
    assert_eq!(first.status, 200);
    let (args, finish) = openai_tool_args(&first.text());
    assert_eq!(args, r#"{"city":"Paris"}"#);
    assert_eq!(finish, "tool_calls");

    let second = c.post_json(
        "/v1/chat/completions",
        &json!({"model": "gpt-4o", "stream": true, "messages": [
            {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp_c\":18}"}]}),
    );
    assert_eq!(second.status, 200);
    let text: String = events(&second.text())
        .iter()
        .filter_map(|e| {
            e["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_string)
        })
        .collect();
    assert_eq!(text, "It is 18°C and sunny in Paris.");
    assert!(second.text().ends_with("data: [DONE]\n\n"));
}

fn events(body: &str) -> Vec<serde_json::Value> {
    body.split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

fn openai_tool_args(body: &str) -> (String, String) {
    let mut args = String::new();
    let mut finish = String::new();
    let mut saw_usage = false;
    for e in events(body) {
        if e["choices"].as_array().is_some_and(|c| c.is_empty()) {
            saw_usage = e["usage"].is_object();
            continue;
        }
        let choice = &e["choices"][0];
        for call in choice["delta"]["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
        {
            if let Some(id) = call["id"].as_str() {
                assert_eq!(id, "call_1");
                assert_eq!(call["function"]["name"], "weather");
            }
            args.push_str(call["function"]["arguments"].as_str().unwrap_or(""));
        }
        if let Some(f) = choice["finish_reason"].as_str() {
            finish = f.to_string();
        }
    }
    assert!(saw_usage, "usage chunk present");
    (args, finish)
}

#[test]
fn each_chunk_is_on_the_wire_before_the_pause_that_follows_it() {
    // With a one-minute delay, the head and first chunk can only arrive in time if they are
    // flushed before the pause (the server batches writes only between pause-free chunks).
    let server = TestServer::start(scenario(json!({"exchanges": [{"response": {
        "chunks": ["first", "second"], "chunk_delay_ms": 60000
    }}]})))
    .unwrap();
    let mut c = Client::connect(&server);
    c.stream
        .set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    c.send("GET", "/", &[], b"");
    assert_eq!(c.read_head().unwrap().0, 200);
    assert_eq!(c.read_chunk().unwrap().unwrap(), b"first");
    drop(server); // ends the pending pause promptly
}

#[test]
fn flush_first_chunk_changes_when_bytes_are_written_not_which() {
    // Benchmarks set it so the first token is not held back behind a 64 KiB write; the
    // client must see the same HTTP chunks either way.
    let chunks_with = |flush: bool| {
        let server = TestServer::start(
            Scenario::from_value(&json!({"exchanges": [{"response": {
                "flush_first_chunk": flush,
                "repeat": {"count": 2000, "chunk": {"data": {"choices": [{"delta": {"content": "x"}}]}}},
                "sse": [{"data": "[DONE]"}],
            }}]}))
            .unwrap(),
        )
        .unwrap();
        let resp = post_json(&server, "/v1/chat/completions", &json!({"stream": true}));
        assert_eq!(resp.status, 200);
        resp.chunks
    };
    let flushed = chunks_with(true);
    assert_eq!(flushed.len(), 2001);
    assert_eq!(flushed, chunks_with(false));
}
