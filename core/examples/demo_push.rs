//! The demo turn from Rust, pushed: a `Receiver` prints the answer as it streams and a
//! Rust `weather` tool answers the call. `scripts/demo.sh --all` runs it against
//! panto-testserver.
//!
//! ```sh
//! cargo run -p panto --example demo_push -- http://127.0.0.1:PORT/v1
//! ```

use panto::{
    Agent, Config, DeltaKind, Event, Flow, FnTool, ProviderKind, Receiver, ToolOutput, TurnControl,
};
use serde_json::json;

struct Terminal;

impl Receiver for Terminal {
    fn on_event(&mut self, event: Event) -> Flow {
        match event {
            Event::ContentDelta {
                kind: DeltaKind::Text,
                text,
                ..
            } => print!("{text}"),
            Event::ToolCallStart {
                name, arguments, ..
            } => {
                println!("→ {name}({})", arguments.unwrap_or_default())
            }
            Event::ToolResult { output, .. } => println!("← {output}"),
            _ => {}
        }
        Flow::Continue
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), panto::Error> {
    let base_url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "https://api.openai.com/v1".into());
    let agent =
        Agent::new(Config::new(ProviderKind::OpenAi, "gpt-4o-mini").with_base_url(base_url))?;
    agent.add_tool(FnTool::new(
        "weather",
        "Current weather of a city",
        json!({"type": "object", "properties": {"city": {"type": "string"}}}),
        |args, _cancel| async move {
            let city = args["city"].as_str().unwrap_or("nowhere").to_owned();
            ToolOutput::ok(format!(r#"{{"city":"{city}","temp_c":18,"sky":"sunny"}}"#))
        },
    ))?;

    let prompt = "What's the weather in Paris?";
    agent
        .run(
            prompt,
            &mut Terminal,
            &TurnControl::default(),
            Default::default(),
        )
        .await?;
    println!();
    Ok(())
}
