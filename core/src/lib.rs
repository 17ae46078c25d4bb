//! panto — an embeddable LLM agent runtime. It streams a tool-using turn from four
//! providers: OpenAI Chat Completions and the services compatible with it (Ollama, vLLM,
//! llama.cpp, DeepSeek, Azure…), Anthropic Messages, Google Gemini
//! (`streamGenerateContent`) and OpenAI Responses; [`ProviderKind`] names them.
//!
//! One assistant turn, stage by stage:
//!
//! ```text
//!  Agent::run(input) / Agent::resume(checkpoint)                      (agent)
//!    │ append the user message; loop while the turn's state machine says (turn)
//!    ├─► request body from history + tools          (provider: the kind's seam)
//!    ├─► HTTP POST, retries before the first byte, timeouts, cancel   (http, retry)
//!    ├─► bytes ─► SseParser ─► SSE events                             (sse)
//!    ├─► SSE events ─► provider Decoder ─► Events ─► Receiver         (provider, event)
//!    ├─► complete tool calls ─► concurrent dispatch ─► tool_result    (tool)
//!    │     (tool_progress / server_log of a running call, coalesced, before its result)
//!    └─► append assistant message + results in call order ─► next request
//!  message_complete (once, last)
//! ```
//!
//! Modules:
//! - `text` — cutting a string at a character boundary and onto one line: the leaf every module may use.
//! - [`error`] — the one error type and its kinds.
//! - [`media`] — attachments (images, documents), their media types, and a turn's [`Input`].
//! - [`message`] — messages, blocks, usage, stop reasons, saved-history JSON and its validator.
//! - [`event`] — the event vocabulary with its canonical JSON, and the push [`Receiver`].
//! - [`sse`] — the incremental WHATWG SSE parser.
//! - [`provider`] — every provider behind one seam: its wire format (decoder, request body) and its API's conventions (base URL, key variable, auth headers, endpoint, error bodies, output schema form); [`ProviderKind`] is the registration.
//! - [`request`] — the provider-neutral terms of a request (tools, reasoning, how a structured answer is asked for, the server's dialect): `config` reads them, `provider` encodes them, and it depends on neither.
//! - [`config`] — the configuration schema (builder and JSON), shared by every binding; it asks `provider` for each kind's defaults and rules, and `provider` never depends on it.
//! - [`retry`] — which failures are retried, and how long to wait.
//! - [`http`] — the process's shared HTTP clients (per runtime and settings), streaming a response into a decoder under timeouts, backpressure and cancellation.
//! - `limit` — the process-wide bound on model requests per endpoint (`max_concurrent_requests`, `max_queued_requests`): an asynchronous queue, never a thread.
//! - [`secret`] — the API key and credential headers, and their removal from everything panto reports.
//! - [`tool`] — the `Tool` trait, host tools, concurrent dispatch, and running calls' progress.
//! - [`turn`] — the turn as an I/O-free state machine, its checkpoints, deferred calls and steering.
//! - [`transcript`] — the flat, provider-neutral view of the conversation for a UI.
//! - [`compaction`] — summarizing older history: the cut, the prompt, the rebuilt history.
//! - [`output`] — structured output: schema checks, each provider's form of the schema, and validating the answer.
//! - [`mcp`] — MCP servers (stdio, Streamable HTTP) whose tools the model calls like any other.
//! - [`options`] — the options of one turn and of one compaction, and their JSON form.
//! - [`agent`] — the agent: conversation ownership, the turn loop, compaction.
//!
//! Adding a provider: one module under `src/provider/` (a file, or a folder with its
//! `mod.rs`) whose `Format` implements the seam, `provider::wire::Wire` — the default
//! base URL and key variable, the auth headers, the endpoint, what its error answers
//! mean, how it takes an output schema, its request body and its streaming decoder,
//! each with a default where most providers agree — and one line in the registration,
//! `registry!` in `src/provider/mod.rs` (the [`ProviderKind`] variant, its configuration
//! name and its `Format`). The configuration's `provider` key, `http`, `output`,
//! `config` and `agent` take it from there: none of them names a kind
//! (`tests/provider_seam.rs` fails if one does).
//!
//! A turn, pushed to a [`Receiver`] on any tokio runtime (the `panto-pull` crate gives
//! the pull-shaped `Stream` that every other language has):
//!
//! ```no_run
//! use panto::{Agent, Config, DeltaKind, Event, Flow, FnTool, ProviderKind, Receiver, ToolOutput};
//!
//! struct Print;
//!
//! impl Receiver for Print {
//!     fn on_event(&mut self, event: Event) -> Flow {
//!         match event {
//!             Event::ContentDelta { kind: DeltaKind::Text, text, .. } => print!("{text}"),
//!             Event::ToolCallStart { name, .. } => println!("→ {name}"),
//!             _ => {}
//!         }
//!         Flow::Continue
//!     }
//! }
//!
//! # async fn turn() -> Result<(), panto::Error> {
//! // The key comes from OPENAI_API_KEY; `with_base_url` points at any compatible server.
//! let agent = Agent::new(Config::new(ProviderKind::OpenAi, "gpt-4o-mini"))?;
//! agent.add_tool(FnTool::new(
//!     "weather",
//!     "Current weather of a city",
//!     serde_json::json!({"type": "object", "properties": {"city": {"type": "string"}}}),
//!     |args, _cancel| async move {
//!         ToolOutput::ok(format!("18°C and sunny in {}", args["city"].as_str().unwrap_or("?")))
//!     },
//! ))?;
//! let summary = agent
//!     .run("What's the weather in Paris?", &mut Print, &Default::default(), Default::default())
//!     .await?;
//! println!("\n{:?}, {} tokens in", summary.stop_reason, summary.usage.input_tokens);
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]

pub mod agent;
pub mod compaction;
pub mod config;
mod config_keys;
pub mod error;
pub mod event;
// Public for panto's own test kit, fuzz targets, benchmarks and code generator (and
// `close_idle_connections`, re-exported below), not for users: hidden from the
// documentation and outside the API that semver (and `cargo semver-checks` in
// scripts/test.sh) covers. docs/rust.md, "What the API covers".
#[doc(hidden)]
pub mod http;
mod limit;
pub mod mcp;
pub mod media;
pub mod message;
pub mod options;
pub mod output;
#[doc(hidden)]
pub mod provider;
pub mod request;
pub mod retry;
pub mod secret;
#[doc(hidden)]
pub mod sse;
pub mod telemetry;
mod text;
pub mod tool;
pub mod transcript;
pub mod turn;
#[doc(hidden)]
pub mod vocab;

pub use agent::{Agent, TokenCount, TurnControl, TurnOptions, TurnSchema, TurnSlot, TurnSummary};
pub use compaction::{CompactOptions, Compaction};
pub use config::{CompactionConfig, Config, FallbackModel, RetryConfig, Timeouts};
pub use error::{Error, ErrorKind, Result};
pub use event::{BlockKind, Collect, DeltaKind, Event, Flow, Receiver};
pub use http::close_idle_connections;
pub use mcp::{
    McpApproveSampling, McpClientHooks, McpElicit, McpElicitationAnswer, McpElicitationRequest,
    McpLogLevel, McpOAuth, McpOAuthGrant, McpOAuthHooks, McpOpenUrl, McpPrompt, McpPromptArgument,
    McpPromptMessage, McpPromptResult, McpResource, McpResourceBody, McpResourceContents,
    McpResourceTemplate, McpSamplingRequest, McpServer, McpServers, McpTokenFile, McpTokenStore,
    McpToolInfo, McpTransport, DEFAULT_INHERITED_ENV,
};
pub use media::{Input, Media, MediaSource};
pub use message::{Block, Message, Role, StopReason, Usage};
pub use output::{JsonText, OutputSpec};
pub use provider::ProviderKind;
pub use request::{Compat, Dialect, Effort, OutputMode, Reasoning, ToolSpec};
pub use secret::Secrets;
pub use tool::{CallProgress, ExternalTool, FnTool, HostToolResults, Tool, ToolFuture, ToolOutput};
pub use transcript::{EntryKind, TranscriptEntry};
pub use turn::{Answer, Answers, Checkpoint, DeferReason, DeferredCall, NotSteered};

pub use tokio_util::sync::CancellationToken;

/// The schemars crate panto's `schemars` feature derives output schemas with, so that
/// `#[derive(panto::schemars::JsonSchema)]` matches the version `Agent::run_typed` takes.
#[cfg(feature = "schemars")]
pub use schemars;
