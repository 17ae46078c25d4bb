"""An MCP server's own requests from Python, against the reference server
(``@modelcontextprotocol/server-everything``, installed by tests/mcp/everything.sh):
``sampling/createMessage`` answered by the agent's model when the host approves (and an
error for the server when it refuses), ``elicitation/create`` answered by the host's
``mcp_elicit`` (accepted with content, declined), each with its event before the call's
result. Without node and npm the tests skip, except in CI."""

from __future__ import annotations

import json
from typing import Any, Dict, List

import panto
from conftest import exchange, make_agent, text_exchange, tool_sse
from test_mcp_everything import everything, results, stdio  # noqa: F401  (the fixture)


def sampling_turn(server, entry: str, approve: bool) -> tuple:
    server.scenario(
        exchange(tool_sse([("c1", "ev__trigger-sampling-request", {"prompt": "name a colour", "maxTokens": 500})])),
        *([text_exchange(["teal"])] if approve else []),
        text_exchange(["done"]),
    )
    seen: List[panto.SamplingApproval] = []

    def approve_sampling(r: panto.SamplingApproval) -> bool:
        seen.append(r)
        return approve

    ev = {**stdio(entry), "sampling": True, "sampling_max_tokens": 64}
    agent = make_agent(server, mcp_servers={"ev": ev}, mcp_approve_sampling=approve_sampling)
    events = list(agent.stream("go"))
    assert events[-1].text == "done"
    return events, seen


def test_sampling_approved_is_answered_by_the_agents_model(server, everything):
    events, seen = sampling_turn(server, everything, True)
    assert len(seen) == 1
    r = seen[0]
    assert (r.server, r.max_tokens, r.system_prompt) == ("ev", 64, "You are a helpful test server.")
    assert r.messages == [{"role": "user", "text": "Resource trigger-sampling-request context: name a colour"}]
    _, out, is_error = results(events)["c1"]
    assert not is_error, out
    answer = json.loads(out.removeprefix("LLM sampling result:").strip())
    assert answer["content"] == {"type": "text", "text": "teal"}
    sampled = [e for e in events if isinstance(e, panto.McpSamplingRequest)]
    assert [(e.server, e.max_tokens, e.outcome) for e in sampled] == [("ev", 64, "answered")]
    assert server.requests()[1]["body"]["max_tokens"] == 64
    # The turn's usage counts the sampling request with its own two (10 + 5 each).
    assert (events[-1].usage.input_tokens, events[-1].usage.output_tokens) == (30, 15)


def test_sampling_refused_is_an_error_for_the_server(server, everything):
    events, seen = sampling_turn(server, everything, False)
    assert len(seen) == 1
    _, out, is_error = results(events)["c1"]
    assert is_error and "declined" in out, out
    sampled = [e for e in events if isinstance(e, panto.McpSamplingRequest)]
    assert [e.outcome for e in sampled] == ["denied"]
    assert len(server.requests()) == 2
    assert events[-1].usage.input_tokens == 20


def elicitation_turn(server, entry: str, answer: panto.ElicitationAnswer) -> tuple:
    server.scenario(
        exchange(tool_sse([("c1", "ev__trigger-elicitation-request", {})])),
        text_exchange(["done"]),
    )
    asked: List[panto.ElicitationPrompt] = []

    def elicit(r: panto.ElicitationPrompt) -> panto.ElicitationAnswer:
        asked.append(r)
        return answer

    ev = {**stdio(entry), "elicitation": True}
    agent = make_agent(server, mcp_servers={"ev": ev}, mcp_elicit=elicit)
    events = list(agent.stream("go"))
    assert events[-1].text == "done"
    assert len(asked) == 1 and asked[0].requested_schema["required"] == ["name"]
    outcomes = [e.outcome for e in events if isinstance(e, panto.McpElicitationRequest)]
    return results(events)["c1"][1], outcomes


def test_elicitation_accepted_with_content(server, everything):
    content: Dict[str, Any] = {"name": "Ada Lovelace", "check": True}
    out, outcomes = elicitation_turn(server, everything, content)
    assert "- Name: Ada Lovelace" in out and "- Agreed to terms: true" in out, out
    assert outcomes == ["accept"]


def test_elicitation_declined(server, everything):
    out, outcomes = elicitation_turn(server, everything, "decline")
    assert "User declined" in out, out
    assert outcomes == ["decline"]
