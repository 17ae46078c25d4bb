"""Conversation controls against the scenarios every language replays
(tests/server/scenarios/conversation-*.json): reasoning control per agent and per turn,
prompt caching, the transcript, manual and automatic compaction."""

from __future__ import annotations

import json

import pytest

import panto

from conftest import REPO


def load(server, name):
    scenario = json.loads((REPO / "tests" / "server" / "scenarios" / name).read_text())
    server._post("/_panto/scenario", scenario)


def test_reasoning_per_turn_caching_and_transcript(server):
    load(server, "conversation-reasoning-caching.json")

    @panto.tool
    def weather(city: str) -> str:
        """Current weather."""
        return "sunny"

    agent = panto.Agent(
        provider="anthropic",
        model="claude-x",
        base_url=server.url,
        api_key="sk-test",
        system="You are terse.",
        reasoning="low",
        retry={"max_retries": 0},
        tools=[weather],
    )
    with pytest.raises(panto.ConfigError, match="reasoning.effort"):
        agent.stream("x", reasoning="max")
    # The scenario answers only requests with the high-effort budget and the breakpoints.
    done = agent.run("Weather in Paris?", reasoning={"effort": "high"})
    assert done.text == "Sunny in Paris."
    assert done.usage.cache_read_tokens == 1500
    assert [e["kind"] for e in agent.transcript()] == [
        "text",
        "reasoning",
        "tool_call",
        "tool_result",
        "text",
    ]
    call, result = agent.transcript()[2:4]
    assert call == {"role": "assistant", "kind": "tool_call", "text": '{"city":"Paris"}', "name": "weather", "call_id": "toolu_1"}
    assert result["text"] == "sunny" and result["is_error"] is False


def test_manual_compaction(server):
    load(server, "conversation-compaction.json")
    agent = panto.Agent(model="gpt-test", base_url=server.base_url, api_key="sk-test", retry={"max_retries": 0})
    agent.run("What is the capital of France?")
    with pytest.raises(panto.ConfigError, match="keep_last"):
        agent.compact(keep_last=0)
    result = agent.compact(keep_last=1)
    assert result.changed
    assert (result.messages_before, result.messages_after, result.tokens_before) == (2, 2, 108)
    assert result.tokens_after > 0
    assert agent.history[0]["content"][0]["text"].startswith("[Summary of the earlier conversation]")
    # The next request must carry the summary (the scenario matches on it).
    assert agent.run("And its population?").text == "About 2.1 million people."


def test_automatic_compaction_is_announced(server):
    load(server, "conversation-compaction.json")
    agent = panto.Agent(
        model="gpt-test",
        base_url=server.base_url,
        api_key="sk-test",
        retry={"max_retries": 0},
        compaction={"threshold_tokens": 50, "keep_last": 1},
    )
    agent.run("What is the capital of France?")
    with agent.stream("And its population?") as s:
        events = list(s)
    first = events[0]
    assert isinstance(first, panto.HistoryCompacted)
    assert (first.messages_before, first.messages_after) == (3, 3)
    assert first.tokens_before >= 108
    assert first.to_dict()["type"] == "history_compacted"
    assert json.loads(first.to_json())["messages_after"] == 3
    assert isinstance(events[1], panto.MessageStart)
    assert events[-1].text == "About 2.1 million people."
