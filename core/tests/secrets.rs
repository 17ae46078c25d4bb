//! The API key never appears in an error, a Debug output or a log line — with every
//! tracing level on, across a successful turn and a 401 whose body echoes the key.

use std::io::Write;
use std::sync::{Arc, Mutex};

use panto::{Agent, Collect, Config, ProviderKind, RetryConfig, TurnControl};
use panto_testserver::script::{self, exchange};
use panto_testserver::TestServer;
use serde_json::json;

const KEY: &str = "sk-live-VERY-SECRET-0123456789";

#[derive(Clone, Default)]
struct Buffer(Arc<Mutex<Vec<u8>>>);

impl Write for Buffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn the_key_is_never_logged_or_reported() {
    let logs = Buffer::default();
    let sink = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || sink.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    // A current-thread runtime keeps every log line of the turn on this thread's subscriber.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();

    let echo = exchange(
        json!({"status": 401, "headers": {"www-authenticate": format!("Bearer {KEY}")},
        "json": {"error": {"type": "invalid_api_key", "message": format!("Incorrect API key provided: {KEY}")}}}),
    );
    let server = TestServer::start(script::scenario(vec![
        exchange(script::openai_text(&["hi"])),
        echo,
    ]))
    .unwrap();
    for kind in [ProviderKind::OpenAi, ProviderKind::Anthropic] {
        server.reset();
        let base = match kind {
            ProviderKind::OpenAi | ProviderKind::OpenAiResponses => format!("{}/v1", server.url()),
            ProviderKind::Anthropic | ProviderKind::Gemini => server.url(),
        };
        let config = Config::new(kind, "m")
            .with_base_url(base)
            .with_api_key(KEY)
            .with_retry(RetryConfig {
                max_retries: 0,
                initial_delay_ms: 1,
                max_delay_ms: 1,
                ..RetryConfig::default()
            });
        let agent = Agent::new(config.clone()).unwrap();
        let mut texts = vec![format!("{config:?}"), format!("{agent:?}")];
        let _ = rt.block_on(agent.run(
            "one",
            &mut Collect::default(),
            &TurnControl::default(),
            Default::default(),
        ));
        let err = rt
            .block_on(agent.run(
                "two",
                &mut Collect::default(),
                &TurnControl::default(),
                Default::default(),
            ))
            .unwrap_err();
        assert_eq!(err.kind, panto::ErrorKind::Authentication);
        texts.extend([
            err.message.clone(),
            err.to_string(),
            err.to_json(),
            format!("{err:?}"),
        ]);
        for t in texts {
            assert!(!t.contains(KEY), "key leaked: {t}");
        }
        // The server did receive the key: the test would be vacuous otherwise.
        let req = &server.requests()[0];
        assert!(req.headers.values().any(|v| v.contains(KEY)));
    }
    let logged = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    assert!(
        logged.contains("provider_request"),
        "tracing recorded nothing: {logged}"
    );
    assert!(!logged.contains(KEY), "key in logs");
}
