//! Examples of docs/ that no other test runs: each test holds its page's example line
//! for line (scripts/check-readme-examples.py finds it here) and checks what it shows.

use panto::{Agent, Config, McpServer, ProviderKind};

/// docs/mcp.md: MCP servers declared in the configuration. They start at the agent's
/// first turn, so making the agent starts nothing (no `uvx` is needed here), and the
/// header value is a secret the configuration never shows.
#[test]
fn mcp_servers_in_the_configuration() -> Result<(), panto::Error> {
    let token = "Bearer tok-docs-123456";
    let config = Config::new(ProviderKind::OpenAi, "gpt-4o-mini")
        .with_mcp_server("time", McpServer::stdio("uvx", ["mcp-server-time"]))
        .with_mcp_server(
            "docs",
            McpServer::http("https://mcp.example.com/mcp").with_header("Authorization", token),
        );
    let agent = Agent::new(config)?;
    let servers = agent.mcp_servers().expect("the agent has its servers");
    assert_eq!(
        servers.configs().keys().collect::<Vec<_>>(),
        ["docs", "time"]
    );
    let shown = format!("{:?} {}", agent.config(), agent.config().to_value());
    assert!(!shown.contains("tok-docs-123456"), "{shown}");
    Ok(())
}
