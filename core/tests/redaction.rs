//! Where the API key may go and what may echo it: no redirect carries it to another
//! origin, and no error field, event or truncated body shows it or a credential header.
//! (Kept apart from `secrets.rs`, whose tracing capture needs a test binary of its own.)

use panto::{Agent, Collect, Config, ProviderKind, RetryConfig, TurnControl};
use panto_testserver::script::{self, exchange};
use panto_testserver::TestServer;
use serde_json::json;

const KEY: &str = "sk-live-VERY-SECRET-0123456789";

// ---- where the key may go, and what may echo it ---------------------------------------

fn quick(kind: ProviderKind, base: String) -> Config {
    Config::new(kind, "m")
        .with_base_url(base)
        .with_api_key(KEY)
        .with_retry(RetryConfig {
            max_retries: 1,
            initial_delay_ms: 1,
            max_delay_ms: 1,
            ..RetryConfig::default()
        })
}

fn base_of(kind: ProviderKind, server: &TestServer) -> String {
    match kind {
        ProviderKind::OpenAi | ProviderKind::OpenAiResponses => format!("{}/v1", server.url()),
        ProviderKind::Anthropic | ProviderKind::Gemini => server.url(),
    }
}

fn run_once(agent: &Agent) -> (Vec<panto::Event>, panto::Result<panto::TurnSummary>) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut events = Collect::default();
    let r = rt.block_on(agent.run(
        "hello",
        &mut events,
        &TurnControl::default(),
        Default::default(),
    ));
    (events.0, r)
}

fn assert_clean(what: &str, text: &str, secret: &str) {
    // Neither the secret nor any 6-byte piece of it.
    for i in 0..=secret.len() - 6 {
        let piece = &secret[i..i + 6];
        assert!(!text.contains(piece), "{what} leaks {piece:?}: {text}");
    }
}

#[test]
fn no_redirect_to_another_origin_is_followed() {
    for status in [301, 302, 303, 307, 308] {
        for kind in [ProviderKind::OpenAi, ProviderKind::Anthropic] {
            let elsewhere =
                TestServer::start(script::scenario(vec![exchange(script::openai_text(&[
                    "stolen",
                ]))]))
                .unwrap();
            let target = format!("{}{}", elsewhere.url(), "/v1/chat/completions");
            let server = TestServer::start(script::scenario(vec![exchange(
                json!({"status": status, "headers": {"location": target}}),
            )]))
            .unwrap();
            let agent = Agent::new(
                quick(kind, base_of(kind, &server)).with_header("x-proxy-token", "tok-0123456789"),
            )
            .unwrap();
            let (events, r) = run_once(&agent);
            let err = r.unwrap_err();
            assert_eq!(err.kind, panto::ErrorKind::Config, "{status}: {err}");
            assert_eq!(err.status, status);
            assert!(err.message.contains(&target), "{status}: {}", err.message);
            assert!(!err.retryable);
            assert!(events.is_empty());
            assert!(
                elsewhere.requests().is_empty(),
                "{status} {kind:?}: the other origin received the request"
            );
            assert_eq!(server.requests().len(), 1, "a redirect is not retried");
        }
    }
}

#[test]
fn a_redirect_within_the_same_origin_is_followed() {
    let server = TestServer::start(script::scenario(vec![
        exchange(json!({"status": 307, "headers": {"location": "/v1/moved/chat/completions"}})),
        exchange(script::openai_text(&["moved"])),
    ]))
    .unwrap();
    let agent = Agent::new(quick(
        ProviderKind::OpenAi,
        base_of(ProviderKind::OpenAi, &server),
    ))
    .unwrap();
    let (_, r) = run_once(&agent);
    assert_eq!(r.unwrap().text, "moved");
    let reqs = server.requests();
    assert_eq!(reqs[1].path, "/v1/moved/chat/completions");
    // 307 keeps the method and the body.
    assert!(reqs[1].body.to_string().contains("hello"));
}

#[test]
fn provider_codes_echoing_the_key_are_redacted_everywhere() {
    let echo = json!({"status": 429, "headers": {"retry-after-ms": "1"},
        "json": {"error": {"code": KEY, "type": format!("type-{KEY}"), "message": "slow down"}}});
    let server = TestServer::start(script::scenario(vec![
        exchange(echo.clone()),
        exchange(echo),
    ]))
    .unwrap();
    let agent = Agent::new(quick(
        ProviderKind::OpenAi,
        base_of(ProviderKind::OpenAi, &server),
    ))
    .unwrap();
    let (events, r) = run_once(&agent);
    let err = r.unwrap_err();
    assert_eq!(err.kind, panto::ErrorKind::RateLimited);
    let retry = events
        .iter()
        .find(|e| matches!(e, panto::Event::ProviderRetry { .. }))
        .expect("the first 429 is retried");
    assert_clean("provider_retry", &retry.to_json(), KEY);
    assert_clean("error json", &err.to_json(), KEY);
    assert_clean("error display", &err.to_string(), KEY);
    assert_clean("error debug", &format!("{err:?}"), KEY);
}

#[test]
fn a_key_cut_by_truncation_is_still_redacted() {
    // Not JSON: the body itself becomes the message, cut to a few hundred bytes — the key
    // straddles every possible cut point near there.
    for pad in 250..310 {
        let body = format!("{}{KEY} trailing", "x".repeat(pad));
        let server = TestServer::start(script::scenario(vec![exchange(
            json!({"status": 400, "body": body}),
        )]))
        .unwrap();
        let agent = Agent::new(quick(
            ProviderKind::OpenAi,
            base_of(ProviderKind::OpenAi, &server),
        ))
        .unwrap();
        let (_, r) = run_once(&agent);
        let err = r.unwrap_err();
        assert_eq!(err.kind, panto::ErrorKind::BadRequest);
        assert_clean(&format!("pad {pad}"), &err.to_json(), KEY);
    }
}

#[test]
fn credential_headers_of_the_user_are_secrets_too() {
    const AZURE: &str = "azure-key-ABCDEF0123456789";
    let echo = json!({"status": 401, "json": {"error": {"code": "401",
        "message": format!("Access denied due to invalid subscription key {AZURE}")}}});
    let server = TestServer::start(script::scenario(vec![exchange(echo)])).unwrap();
    let config = quick(ProviderKind::OpenAi, base_of(ProviderKind::OpenAi, &server))
        .with_api_key("")
        .with_header("api-key", AZURE);
    let agent = Agent::new(config.clone()).unwrap();
    let (_, r) = run_once(&agent);
    let err = r.unwrap_err();
    assert_eq!(err.kind, panto::ErrorKind::Authentication);
    for text in [err.to_json(), format!("{config:?}"), format!("{agent:?}")] {
        assert_clean("azure key", &text, AZURE);
    }
    // It did reach the server it was meant for.
    assert_eq!(server.requests()[0].headers["api-key"], AZURE);
}

#[test]
fn auth_headers_cannot_silently_replace_the_api_key() {
    for (kind, header) in [
        (ProviderKind::OpenAi, "Authorization"),
        (ProviderKind::Anthropic, "x-api-key"),
    ] {
        let err = Agent::new(
            Config::new(kind, "m")
                .with_api_key(KEY)
                .with_header(header, "Bearer other"),
        )
        .unwrap_err();
        assert_eq!(err.kind, panto::ErrorKind::Config);
        assert!(
            err.message.starts_with(&format!("headers.{header}")),
            "{}",
            err.message
        );
    }
}

#[test]
fn a_model_echoing_the_key_never_shows_it_in_events() {
    let server = TestServer::start(script::scenario(vec![exchange(script::openai_text(&[
        "your key is ",
        KEY,
    ]))]))
    .unwrap();
    let agent = Agent::new(quick(
        ProviderKind::OpenAi,
        base_of(ProviderKind::OpenAi, &server),
    ))
    .unwrap();
    let (events, r) = run_once(&agent);
    let summary = r.unwrap();
    assert!(!summary.text.contains(KEY) || events.iter().all(|e| !e.to_json().contains(KEY)));
    for e in &events {
        assert!(!e.to_json().contains(KEY), "{}", e.to_json());
    }
}
