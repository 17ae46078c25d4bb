//! What panto's tests, benchmarks, conformance runners and fuzz targets share, written
//! once instead of copied into each file (dev-only, never published):
//!
//! - [`config`] (feature `server`) — an agent configuration for the scripted test server;
//!   [`model`], a test server scripted with answers; [`offered`], the tools it was offered.
//! - [`wait`] — [`eventually`]: polling for a condition under a hang guard (and
//!   `eventually_async`, feature `server`, on tokio's runtime).
//! - [`decode`] — decoding chunked bytes as the transport does, and the event-order
//!   invariants every decoded response satisfies.
//! - [`fuzz`] — what each fuzz target checks, so `core/tests/fuzz_regressions.rs` replays
//!   saved inputs through the fuzzers' own code on stable Rust.
//! - [`measure`] (feature `bench`) — the benchmarks' CPU and wall-time measurement.
//! - [`threads`] — counting panto's own threads, for leak checks and the benchmarks.
//! - [`conformance`] — the command line of the Rust conformance runners.
//! - [`mcp`] — the MCP servers of the tests (a pinned venv), the fixture server, unique
//!   marker paths and process-group counts.
//! - [`everything`] — the MCP reference server (server-everything, pinned, from npm).
//! - [`turn`](mod@turn) (feature `server`) — running one agent turn under a hang guard,
//!   its events collected.

pub mod conformance;
pub mod decode;
pub mod everything;
pub mod fuzz;
pub mod mcp;
#[cfg(feature = "bench")]
pub mod measure;
pub mod threads;
#[cfg(feature = "server")]
pub mod turn;
pub mod wait;

#[cfg(feature = "server")]
pub use turn::{turn, turn_with};
#[cfg(feature = "server")]
pub use wait::eventually_async;
pub use wait::{eventually, poll_until};

#[cfg(feature = "server")]
pub use scripted::{config, model, offered, quick_retries, API_KEY};

#[cfg(feature = "server")]
mod scripted {
    use panto::{Config, ProviderKind, RetryConfig};
    use panto_testserver::script::{self, exchange};
    use panto_testserver::TestServer;
    use serde_json::Value;

    /// The API key of [`config`]: tests look for it where it must not appear.
    pub const API_KEY: &str = "sk-test-SECRET-key-0001";

    /// An agent configuration for `server`, speaking `kind`: the base URL as each
    /// provider's SDK spells it (OpenAI's with `/v1`), model `scripted-model`, key
    /// [`API_KEY`], and no retries, so each scripted exchange answers one request. A test
    /// of retries adds them with [`quick_retries`].
    pub fn config(kind: ProviderKind, server: &TestServer) -> Config {
        let base = match kind {
            ProviderKind::OpenAi | ProviderKind::OpenAiResponses => format!("{}/v1", server.url()),
            ProviderKind::Anthropic | ProviderKind::Gemini => server.url(),
        };
        Config::new(kind, "scripted-model")
            .with_base_url(base)
            .with_api_key(API_KEY)
            .with_retry(quick_retries(0))
    }

    /// A test server scripted to answer each request with the next of `responses` (each
    /// built with `panto_testserver::script`).
    pub fn model(responses: Vec<Value>) -> TestServer {
        TestServer::start(script::scenario(
            responses.into_iter().map(exchange).collect(),
        ))
        .expect("test server starts")
    }

    /// The tool names offered in `server`'s request `i` (Chat Completions' `tools`).
    pub fn offered(server: &TestServer, i: usize) -> Vec<String> {
        server.requests()[i].body["tools"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|t| t["function"]["name"].as_str().unwrap_or("").to_owned())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// `max_retries` retries after a backoff of 1 to 5 ms: a test waits for the retry,
    /// not for the backoff.
    pub fn quick_retries(max_retries: u32) -> RetryConfig {
        RetryConfig {
            max_retries,
            initial_delay_ms: 1,
            max_delay_ms: 5,
            ..RetryConfig::default()
        }
    }
}
