package panto_test

import (
	"fmt"

	"github.com/panto/panto/panto"
)

// MCP servers declared in the configuration (docs/mcp.md): they start at the agent's
// first turn, so making the agent starts nothing.
func ExampleConfig_mcpServers() {
	token := "Bearer tok-docs-123456"
	agent, err := panto.NewAgent(panto.Config{
		Model: "gpt-4o-mini",
		MCPServers: map[string]panto.MCPServer{
			"time": {Command: "uvx", Args: []string{"mcp-server-time"}},
			"docs": {URL: "https://mcp.example.com/mcp", Headers: map[string]string{"Authorization": token}},
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer agent.Close()
	fmt.Println("declared; started at the first turn")
	// Output: declared; started at the first turn
}
