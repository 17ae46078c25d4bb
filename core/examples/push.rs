//! A push caller: `tokio::spawn`s one turn with a Rust tool on a multi-thread runtime
//! and prints every event as canonical JSON, one per line — the same lines
//! `panto run --json` prints. The turn's future is `Send`; dropping it (or its task)
//! cancels the turn and leaves the conversation valid.
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

// Any tokio runtime drives a turn. A current-thread runtime keeps the connection and the
// loop on one thread, which costs the least CPU per chunk (see scripts/bench.sh); this
// example shows the general case, a task on the default multi-thread runtime.
#[tokio::main]
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

    let turn = tokio::spawn(async move {
        agent
            .run(
                &prompt,
                &mut PrintJson,
                &TurnControl::default(),
                Default::default(),
            )
            .await
    });
    if let Err(e) = turn.await? {
        println!("{}", e.to_json());
        std::process::exit(1);
    }
    Ok(())
}
