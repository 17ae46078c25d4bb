"""Examples of docs/ that no other test runs: each test holds its page's example line for
line (scripts/check-readme-examples.py finds it here) and checks what it shows."""

import panto


def test_mcp_servers_in_the_configuration():
    # docs/mcp.md: servers start at the first turn (of any agent sharing them), so
    # making the agents starts nothing, and leaving the block stops what was started.
    agent = panto.Agent(model="gpt-4o-mini", mcp_servers={
        "time": {"command": "uvx", "args": ["mcp-server-time"]},
    })

    # Started once for several agents, stopped when the block ends:
    with panto.MCPServers({"time": {"command": "uvx", "args": ["mcp-server-time"]}}) as servers:
        a = panto.Agent(model="gpt-4o-mini", mcp_servers=servers)
        b = panto.Agent(model="gpt-4o-mini", mcp_servers=servers)
    assert servers.names == ["time"]
    for each in (agent, a, b):
        each.close()
