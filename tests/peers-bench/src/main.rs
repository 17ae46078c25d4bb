//! panto against async-openai, the most used Rust OpenAI client, on the same
//! 100,000-chunk OpenAI stream from the same in-process `panto-testserver`, in one run:
//!
//! - `async-openai`: `client.chat().create_stream(..)` consumed to the end;
//! - `panto-push`: `agent.run` with a counting `Receiver` on a current-thread runtime;
//! - `panto-pull`: `agent.stream(..)` + `Stream::next` until exhausted;
//! - `floor`: reqwest reading the body and splitting lines, no JSON (no client does less).
//!
//! Client CPU per chunk (process CPU minus the server thread), median of interleaved
//! rounds (`PANTO_BENCH_ROUNDS`, default 3). Printed as `[summary]` / `[ratio]` lines for
//! `scripts/bench.sh`; never asserted.
//!
//! A benchmark program, not library code: any failure (no server, a client error, a wrong
//! chunk count) makes the figures meaningless, so it stops the run with `expect`, naming
//! the step.

use std::time::Duration;

use async_openai::config::OpenAIConfig;
use async_openai::types::chat::{
    ChatCompletionRequestUserMessageArgs, CreateChatCompletionRequestArgs,
};
use futures_util::StreamExt;
use panto::{Agent, Config, Event, Flow, ProviderKind, Receiver, TurnControl};
use panto_pull::AgentStreamExt;
use panto_testserver::{Scenario, TestServer};

#[allow(dead_code)]
#[path = "../../bench-support/measure.rs"]
mod measure;

const CHUNKS: u64 = 100_000;
const CONTENT: &str = r#"{"id":"chatcmpl-B1x2","object":"chat.completion.chunk","created":1735689600,"model":"gpt-4o","choices":[{"index":0,"delta":{"content":" token"},"finish_reason":null}]}"#;
const FINISH: &str = r#"{"id":"chatcmpl-B1x2","object":"chat.completion.chunk","created":1735689600,"model":"gpt-4o","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#;

fn scenario() -> Scenario {
    Scenario::from_value(
        &serde_json::json!({"exchanges": [{"times": 1_000_000, "response": {
        "repeat": {"count": CHUNKS, "chunk": {"data": CONTENT}},
        "sse": [{"data": FINISH}, {"data": "[DONE]"}]}}]}),
    )
    .expect("scenario")
}

struct Count(u64);

impl Receiver for Count {
    fn on_event(&mut self, event: Event) -> Flow {
        if matches!(event, Event::ContentDelta { .. }) {
            self.0 += 1;
        }
        Flow::Continue
    }
}

fn main() {
    let server = TestServer::start(scenario()).expect("server");
    let base = format!("{}/v1", server.url());
    let threads = measure::server_threads(1);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let agent = Agent::new(
        Config::new(ProviderKind::OpenAi, "gpt-4o")
            .with_base_url(base.clone())
            .with_api_key("sk-bench"),
    )
    .expect("agent");
    let openai = async_openai::Client::with_config(
        OpenAIConfig::new()
            .with_api_base(base.clone())
            .with_api_key("sk-bench"),
    );
    let http = reqwest_client();
    let rounds: usize = std::env::var("PANTO_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let names = ["async-openai", "panto-push", "panto-pull", "floor"];
    let mut samples: Vec<Vec<Duration>> = vec![Vec::new(); names.len()];
    for _ in 0..rounds {
        for (i, name) in names.iter().enumerate() {
            server.reset();
            let (n, s) = measure::measure(&threads, || match *name {
                "async-openai" => rt.block_on(async {
                    let request = CreateChatCompletionRequestArgs::default()
                        .model("gpt-4o")
                        .messages([ChatCompletionRequestUserMessageArgs::default()
                            .content("bench")
                            .build()
                            .expect("message")
                            .into()])
                        .build()
                        .expect("request");
                    let mut stream = openai.chat().create_stream(request).await.expect("stream");
                    let mut n = 0;
                    while let Some(chunk) = stream.next().await {
                        let chunk = chunk.expect("chunk");
                        if chunk
                            .choices
                            .first()
                            .and_then(|c| c.delta.content.as_ref())
                            .is_some()
                        {
                            n += 1;
                        }
                    }
                    n
                }),
                "panto-push" => rt.block_on(async {
                    let mut count = Count(0);
                    agent
                        .run(
                            "bench",
                            &mut count,
                            &TurnControl::default(),
                            Default::default(),
                        )
                        .await
                        .expect("turn");
                    count.0
                }),
                "panto-pull" => {
                    let mut s = agent.stream("bench").expect("stream");
                    let mut n = 0;
                    while let Some(ev) = s.next().expect("event") {
                        if matches!(ev, Event::ContentDelta { .. }) {
                            n += 1;
                        }
                    }
                    n
                }
                _ => rt.block_on(async {
                    let mut resp = http
                        .post(format!("{base}/chat/completions"))
                        .body("{}")
                        .send()
                        .await
                        .expect("send");
                    let mut n = 0;
                    let mut rest = Vec::new();
                    while let Some(c) = resp.chunk().await.expect("chunk") {
                        rest.extend_from_slice(&c);
                        while let Some(p) = rest.iter().position(|b| *b == b'\n') {
                            if rest.starts_with(b"data: {") {
                                n += 1;
                            }
                            rest.drain(..=p);
                        }
                    }
                    n - 1 // the finish chunk
                }),
            });
            assert!(n >= CHUNKS - 1, "{name}: {n} chunks");
            samples[i].push(s.client_cpu.unwrap_or(s.process_cpu));
        }
    }
    let us: Vec<f64> = samples
        .iter_mut()
        .map(|v| {
            v.sort();
            v[v.len() / 2].as_secs_f64() * 1e6 / CHUNKS as f64
        })
        .collect();
    for (name, u) in names.iter().zip(&us) {
        eprintln!("[summary] peers/{name} [client cpu]: {u:.2} µs/chunk (median of {rounds})");
    }
    eprintln!(
        "[ratio] panto-push / async-openai (client cpu) = {:.2}",
        us[1] / us[0]
    );
    eprintln!(
        "[ratio] panto-pull / async-openai (client cpu) = {:.2}",
        us[2] / us[0]
    );
    eprintln!(
        "[ratio] panto-push / floor (client cpu) = {:.2}",
        us[1] / us[3]
    );
    eprintln!(
        "[ratio] panto-pull / panto-push (client cpu) = {:.2}",
        us[2] / us[1]
    );
}

fn reqwest_client() -> reqwest::Client {
    reqwest::Client::new()
}
