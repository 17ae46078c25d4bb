//! The rule for a server's wait (`retry-after-ms`, `retry-after`): up to
//! `retry.max_retry_after_ms` (default 60 s) it is the retry's delay, replacing the
//! backoff; longer, the turn fails at once with the response's error; either way the
//! error carries the wait (`Error::retry_after_ms`).

use std::time::Duration;

use panto::{
    Agent, Config, ErrorKind, Event, Flow, ProviderKind, Receiver, RetryConfig, TurnControl,
};
use panto_testkit::turn;
use panto_testserver::script::{self, exchange};
use panto_testserver::TestServer;
use serde_json::{json, Value};

const HANG_GUARD: Duration = Duration::from_secs(30);

fn config(server: &TestServer, retry: RetryConfig) -> Config {
    Config::new(ProviderKind::OpenAi, "scripted-model")
        .with_base_url(format!("{}/v1", server.url()))
        .with_api_key("sk-test-retry-after")
        .with_retry(retry)
}

fn fast_backoff() -> RetryConfig {
    RetryConfig {
        max_retries: 2,
        initial_delay_ms: 1,
        max_delay_ms: 5,
        ..RetryConfig::default()
    }
}

#[tokio::test]
async fn a_wait_past_the_cap_fails_the_turn_at_once_with_the_wait_on_the_error() {
    for (status, kind, header, value, wait_ms) in [
        (429, ErrorKind::RateLimited, "retry-after", "120", 120_000),
        (
            429,
            ErrorKind::RateLimited,
            "retry-after-ms",
            "60001",
            60_001,
        ),
        (503, ErrorKind::Server, "retry-after", "61", 61_000),
    ] {
        // Were the wait ignored (the backoff used instead), the retry would get the
        // second exchange and the turn would succeed.
        let server = TestServer::start(script::scenario(vec![
            exchange(script::http_error(
                status,
                "rate_limit_error",
                json!({ header: value }),
            )),
            exchange(script::openai_text(&["too early"])),
        ]))
        .unwrap();
        let agent = Agent::new(config(&server, fast_backoff())).unwrap();
        let (events, r) = turn(&agent, "x").await;
        let err = r.expect_err("the turn must fail");
        assert_eq!(err.kind, kind, "{header}: {value}");
        assert_eq!(err.status, status);
        assert_eq!(err.retry_after_ms, Some(wait_ms), "{header}: {value}");
        assert!(
            err.message.contains(&format!("wait {wait_ms} ms"))
                && err.message.contains("retry.max_retry_after_ms (60000 ms)"),
            "{}",
            err.message
        );
        assert!(
            !events
                .iter()
                .any(|e| matches!(e, Event::ProviderRetry { .. })),
            "no retry is announced: {events:?}"
        );
        assert_eq!(server.requests().len(), 1, "nothing was sent again");
    }
}

/// Cancels the turn at its first `provider_retry`, after noting its delay: the tests
/// see the wait panto chose without sitting through it.
struct NoteDelay {
    control: TurnControl,
    delay_ms: Option<u64>,
}

impl Receiver for NoteDelay {
    fn on_event(&mut self, event: Event) -> Flow {
        if let Event::ProviderRetry { delay_ms, .. } = event {
            self.delay_ms = Some(delay_ms);
            self.control.cancel.cancel();
        }
        Flow::Continue
    }
}

async fn first_retry_delay(retry: RetryConfig, header: &str, value: &str) -> Option<u64> {
    let server = TestServer::start(script::scenario(vec![
        exchange(script::http_error(
            429,
            "rate_limit_error",
            json!({ header: value }),
        )),
        exchange(script::openai_text(&["late"])),
    ]))
    .unwrap();
    let agent = Agent::new(config(&server, retry)).unwrap();
    let control = TurnControl::default();
    let mut receiver = NoteDelay {
        control: control.clone(),
        delay_ms: None,
    };
    let r = tokio::time::timeout(
        HANG_GUARD,
        agent.run("x", &mut receiver, &control, Default::default()),
    )
    .await
    .expect("the cancel did not end the wait");
    assert_eq!(r.unwrap_err().kind, ErrorKind::Cancelled);
    receiver.delay_ms
}

#[tokio::test]
async fn a_wait_up_to_the_cap_is_the_delay_even_past_the_backoff() {
    // At the default cap exactly (inclusive), though the backoff is at most 5 ms.
    assert_eq!(
        first_retry_delay(fast_backoff(), "retry-after", "60").await,
        Some(60_000)
    );
    // A raised cap honours what the default one refuses.
    let patient = RetryConfig {
        max_retry_after_ms: 120_000,
        ..fast_backoff()
    };
    assert_eq!(
        first_retry_delay(patient, "retry-after", "90").await,
        Some(90_000)
    );
}

#[tokio::test]
async fn the_last_error_carries_the_servers_wait() {
    // Retries exhausted (and none allowed): the error still says what the server asked.
    for max_retries in [0, 1] {
        let rate_limited = || {
            exchange(script::http_error(
                429,
                "rate_limit_error",
                json!({"retry-after-ms": "2"}),
            ))
        };
        let server =
            TestServer::start(script::scenario(vec![rate_limited(), rate_limited()])).unwrap();
        let agent = Agent::new(config(
            &server,
            RetryConfig {
                max_retries,
                ..fast_backoff()
            },
        ))
        .unwrap();
        let (_, r) = turn(&agent, "x").await;
        let err = r.unwrap_err();
        assert_eq!(err.kind, ErrorKind::RateLimited);
        assert_eq!(err.retry_after_ms, Some(2), "max_retries {max_retries}");
        assert_eq!(server.requests().len(), max_retries as usize + 1);
    }
    // No hint, no wait on the error.
    let server = TestServer::start(script::scenario(vec![exchange(script::http_error(
        429,
        "rate_limit_error",
        json!({}),
    ))]))
    .unwrap();
    let agent = Agent::new(config(
        &server,
        RetryConfig {
            max_retries: 0,
            ..fast_backoff()
        },
    ))
    .unwrap();
    assert_eq!(turn(&agent, "x").await.1.unwrap_err().retry_after_ms, None);
}

#[test]
fn the_cap_is_a_configuration_key() {
    let c = Config::from_json(r#"{"model":"m","retry":{"max_retry_after_ms":5000}}"#).unwrap();
    assert_eq!(c.retry.max_retry_after_ms, 5000);
    assert_eq!(
        Config::from_json(r#"{"model":"m"}"#)
            .unwrap()
            .retry
            .max_retry_after_ms,
        60_000
    );
    let err = Config::from_json(r#"{"model":"m","retry":{"max_retry_after_ms":-1}}"#).unwrap_err();
    assert_eq!(err.kind, ErrorKind::Config);
    assert!(
        err.message.starts_with("retry.max_retry_after_ms"),
        "{}",
        err.message
    );
}

/// The error of a turn whose one response is `response`, with no retries.
async fn failed_turn(response: Value) -> panto::Error {
    let server = TestServer::start(script::scenario(vec![exchange(response)])).unwrap();
    let agent = Agent::new(config(
        &server,
        RetryConfig {
            max_retries: 0,
            ..RetryConfig::default()
        },
    ))
    .unwrap();
    turn(&agent, "x").await.1.expect_err("the turn must fail")
}

/// Beside the wait, an error keeps what a provider's support asks for: the response's
/// request id (also when the stream failed after a 200) and an HTTP error response's
/// headers, redacted like the message.
#[tokio::test]
async fn an_error_carries_the_responses_request_id_and_headers() {
    let err = failed_turn(script::http_error(
        503,
        "overloaded_error",
        json!({ "x-request-id": "req_503", "x-echo": "Bearer sk-test-retry-after" }),
    ))
    .await;
    assert_eq!(err.request_id.as_deref(), Some("req_503"));
    assert_eq!(err.header("X-Request-Id"), Some("req_503"));
    let echo = err.header("x-echo").expect("the echoed header is kept");
    assert!(
        echo.starts_with("Bearer ") && !echo.contains("sk-test-retry-after"),
        "{echo}"
    );
    assert!(err.header("content-type").is_some());

    let err = failed_turn(json!({
        "headers": { "x-request-id": "req_200" },
        "sse": [{ "data": { "error": { "message": "overloaded", "type": "server_error" } } }],
    }))
    .await;
    assert_eq!(err.request_id.as_deref(), Some("req_200"), "{err}");
    assert!(
        err.headers.is_empty(),
        "not an HTTP error status: {:?}",
        err.headers
    );
}
