//! A push caller: runs one turn with a Rust tool and prints every event as canonical
//! JSON, one per line — the same lines `panto run --json` prints.
//!
//! ```sh
//! cargo run -p panto --example push -- http://127.0.0.1:PORT/v1 "What's the weather in Paris?"
//! ```
//! (point it at `panto-testserver --scenario tests/server/scenarios/demo-weather.json`,
//! or at any OpenAI-compatible server with `OPENAI_API_KEY` set).

use panto::{Agent, Config, Event, Flow, FnTool, ProviderKind, Receiver, ToolOutput, TurnControl};
use serde_json::json;

struct PrintJson;

impl Receiver for PrintJson {
    fn on_event(&mut self, event: Event) -> Flow {
        println!("{}", event.to_json());
        Flow::Continue
    }
}

// A current-thread runtime keeps the connection and the loop on one thread: on a
// multi-thread runtime every HTTP chunk crosses threads (≈4× the CPU per chunk in
// scripts/bench.sh). `Agent::runtime()` gives such a runtime, owned by the agent.
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let base_url = args
        .next()
        .unwrap_or_else(|| "http://127.0.0.1:8080/v1".into());
    let prompt = args
        .next()
        .unwrap_or_else(|| "What's the weather in Paris?".into());

    let config = Config::new(ProviderKind::OpenAi, "gpt-4o-mini").with_base_url(base_url);
    let agent = Agent::new(config)?;
    agent.add_tool(FnTool::new(
        "weather",
        "Current weather for a city",
        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        |args, _cancel| async move {
            let city = args["city"].as_str().unwrap_or("somewhere").to_owned();
            ToolOutput::ok(format!(
                "{{\"city\":\"{city}\",\"temp_c\":18,\"sky\":\"sunny\"}}"
            ))
        },
    ))?;

    let result = agent
        .run(
            &prompt,
            &mut PrintJson,
            &TurnControl::default(),
            Default::default(),
        )
        .await;
    if let Err(e) = result {
        println!("{}", e.to_json());
        std::process::exit(1);
    }
    Ok(())
}
