//! `Scenario::replay_capture` against the real captures in tests/fixtures/real.

mod common;

use common::{tests_path, Client};
use panto_testserver::{Scenario, TestServer};
use serde_json::json;

#[test]
fn replays_an_sse_capture_byte_for_byte() {
    let capture = tests_path("fixtures/real/openai/gpt-4o-text-usage.sse");
    let expected = std::fs::read(&capture).unwrap();
    let server = TestServer::start(Scenario::replay_capture(&capture, None).unwrap()).unwrap();
    let mut c = Client::connect(&server);
    let r = c.post_json("/v1/chat/completions", &json!({"stream": true}));
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    assert_eq!(r.body, expected);
    // Any number of requests, on the same connection.
    let again = c.post_json("/anything", &json!({}));
    assert_eq!(again.body, expected);

    let split = Scenario::replay_capture(&capture, Some(7)).unwrap();
    server.set_scenario(split);
    let r = c.post_json("/v1/chat/completions", &json!({}));
    assert_eq!(r.body, expected);
    assert!(r.chunks.iter().all(|ch| ch.len() <= 7));
    assert_eq!(r.chunks.len(), expected.len().div_ceil(7));
}

#[test]
fn replays_an_error_capture_with_its_status() {
    for (file, status) in [
        (
            "fixtures/real/anthropic/sonnet-4-5-http429-rate-limit.error.json",
            429,
        ),
        (
            "fixtures/real/azure/gpt-4o-mini-prompt-filtered-http400.error.json",
            400,
        ),
    ] {
        let capture = tests_path(file);
        let expected = std::fs::read(&capture).unwrap();
        let server = TestServer::start(Scenario::replay_capture(&capture, None).unwrap()).unwrap();
        let r = Client::connect(&server).post_json("/v1/messages", &json!({"stream": true}));
        assert_eq!(r.status, status, "{file}");
        assert_eq!(r.header("content-type"), Some("application/json"));
        assert_eq!(r.body, expected);
    }
}

#[test]
fn replay_capture_reports_missing_files() {
    let e = Scenario::replay_capture("/nonexistent/x.sse", None).unwrap_err();
    assert!(e.contains("/nonexistent/x.sse"), "{e}");
}
