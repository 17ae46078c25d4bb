"""MCP from Python against the protocol's reference server,
``@modelcontextprotocol/server-everything`` (pinned in tests/mcp/everything/, installed
from npm by tests/mcp/everything.sh), over stdio and Streamable HTTP: its tools' results,
and a long operation's progress as ``panto.ToolProgress`` events before its result.
Without node and npm the tests skip, except in CI."""

from __future__ import annotations

import json
import os
import subprocess
from typing import Iterator, List

import pytest

import panto
from conftest import REPO, exchange, make_agent, text_exchange, tool_sse


@pytest.fixture(scope="session")
def everything() -> str:
    """The installed server's entry point (dist/index.js)."""
    out = subprocess.run(["bash", str(REPO / "tests" / "mcp" / "everything.sh")], capture_output=True, text=True)
    if out.returncode == 3 and os.environ.get("CI") != "true":
        pytest.skip("node and npm are needed for the server-everything tests")
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


@pytest.fixture
def everything_http(everything: str) -> Iterator[str]:
    """The server over Streamable HTTP on a port of its own: its MCP endpoint."""
    proc = subprocess.Popen(
        ["node", str(REPO / "tests" / "mcp" / "everything_http.mjs"), everything],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("PORT "), line
        yield f"http://127.0.0.1:{line.split()[1]}/mcp"
    finally:
        proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def stdio(entry: str) -> dict:
    return {"command": "node", "args": [entry, "stdio"]}


def results(events: List[panto.Event]) -> dict:
    return {e.call_id: (e.name, e.output, e.is_error) for e in events if isinstance(e, panto.ToolResult)}


def check_tools(server, ev: dict) -> None:
    server.scenario(
        exchange(tool_sse([
            ("c1", "ev__echo", {"message": "from python"}),
            ("c2", "ev__get-sum", {"a": 1, "b": 2}),
            ("c3", "ev__get-structured-content", {"location": "New York"}),
        ])),
        text_exchange(["done"]),
    )
    agent = make_agent(server, mcp_servers={"ev": ev})
    events = list(agent.stream("go"))
    assert events[-1].text == "done"
    got = results(events)
    assert got["c1"] == ("ev__echo", "Echo: from python", False)
    assert got["c2"] == ("ev__get-sum", "The sum of 1 and 2 is 3.", False)
    assert json.loads(got["c3"][1]) == {"temperature": 33, "conditions": "Cloudy", "humidity": 82}
    offered = [t["function"]["name"] for t in server.requests()[0]["body"]["tools"]]
    assert "ev__trigger-long-running-operation" in offered
    # Registered by the server only for clients declaring sampling or elicitation.
    assert "ev__trigger-sampling-request" not in offered
    assert "ev__trigger-elicitation-request" not in offered


def check_progress(server, ev: dict) -> None:
    server.scenario(
        exchange(tool_sse([("c1", "ev__trigger-long-running-operation", {"duration": 0.6, "steps": 2})])),
        text_exchange(["done"]),
    )
    agent = make_agent(server, mcp_servers={"ev": ev})
    events = list(agent.stream("go"))
    assert events[-1].text == "done"
    kinds = [type(e).__name__ for e in events]
    result_at = kinds.index("ToolResult")
    progress = [e for e in events if isinstance(e, panto.ToolProgress)]
    assert progress, kinds
    assert max(i for i, k in enumerate(kinds) if k == "ToolProgress") < result_at
    last = progress[-1]
    assert (last.call_id, last.name, last.progress, last.total) == (
        "c1", "ev__trigger-long-running-operation", 2.0, 2.0,
    )
    assert all(1.0 <= p.progress <= 2.0 and p.total == 2.0 for p in progress)
    assert results(events)["c1"][1].startswith("Long running operation completed.")


def test_the_reference_servers_tools_over_stdio(server, everything):
    check_tools(server, stdio(everything))


def test_the_reference_servers_tools_over_streamable_http(server, everything_http):
    check_tools(server, {"url": everything_http})


def test_a_long_operations_progress_over_stdio(server, everything):
    check_progress(server, stdio(everything))


def test_a_long_operations_progress_over_streamable_http(server, everything_http):
    check_progress(server, {"url": everything_http})
