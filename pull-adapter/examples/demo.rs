//! The demo turn from Rust, on the pull stream: a Rust `weather` tool, the answer
//! streamed to the terminal. `scripts/demo.sh --all` runs it against panto-testserver.
//!
//! ```sh
//! cargo run -p panto-pull --example demo -- http://127.0.0.1:PORT/v1
//! ```

use panto::{Agent, Config, DeltaKind, Event, FnTool, ProviderKind, ToolOutput};
use panto_pull::AgentStreamExt;
use serde_json::json;

fn main() -> Result<(), panto::Error> {
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

    let mut stream = agent.stream("What's the weather in Paris?")?;
    while let Some(event) = stream.next()? {
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
    }
    println!();
    Ok(())
}
