"""Conversation controls against the scenarios every language replays
(tests/server/scenarios/conversation-*.json): reasoning control per agent and per turn,
prompt caching, the transcript, manual and automatic compaction."""

from __future__ import annotations

import asyncio
import json
import signal
import threading
import time

import pytest

import panto

from conftest import REPO, exchange, make_agent, text_sse, wait_until


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


# --------------------------------------------------------------------------------------
# Cancelling a compaction: its summary request is held by the server until cancelled.

COMPACTABLE_HISTORY = json.dumps(
    {
        "version": 1,
        "messages": [
            {"role": role, "content": [{"type": "text", "text": text}]}
            for role, text in (("user", "one"), ("assistant", "a"), ("user", "two"), ("assistant", "b"))
        ],
    }
)


def held_summary(server):
    """The summary's response sends nothing and waits for the gate."""
    server.scenario(exchange(text_sse(["summary"]), fault={"kind": "hold", "after_bytes": 0}))


def compactable_agent(server):
    agent = make_agent(server)
    agent.restore_history(COMPACTABLE_HISTORY)
    return agent


def assert_cancelled_cleanly(server, agent, before):
    assert agent.save_history() == before
    # The request was dropped (the server stops counting a held response whose client
    # went away), and the agent is free again.
    wait_until(lambda: server.held() == 0, what="the summary request to be dropped")
    agent.clear_history()


async def test_acompact(server):
    load(server, "conversation-compaction.json")
    agent = make_agent(server)
    await agent.arun("What is the capital of France?")
    result = await agent.acompact(keep_last=1)
    assert result.changed and (result.messages_before, result.messages_after) == (2, 2)
    assert agent.history[0]["content"][0]["text"].startswith("[Summary of the earlier conversation]")
    with pytest.raises(panto.ConfigError, match="keep_last"):
        await agent.acompact(keep_last=0)


async def test_cancelling_the_task_cancels_acompact(server):
    held_summary(server)
    agent = compactable_agent(server)
    before = agent.save_history()
    task = asyncio.ensure_future(agent.acompact(keep_last=1))
    # The loop must run for the task to start; then the request waits at the gate.
    deadline = time.monotonic() + 30
    while server.held() != 1:
        assert time.monotonic() < deadline, "the summary request never arrived"
        await asyncio.sleep(0.002)
    assert not task.done()
    with pytest.raises(panto.BusyError):
        agent.stream("x")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 30)
    assert_cancelled_cleanly(server, agent, before)


def test_ctrl_c_cancels_compact_on_the_main_thread(server):
    assert threading.current_thread() is threading.main_thread()
    held_summary(server)
    agent = compactable_agent(server)
    before = agent.save_history()

    def interrupt_once_held():
        wait_until(lambda: server.held() == 1, timeout=30, what="the summary request to be held")
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    # The test runner may have started with SIGINT ignored (a background job of a
    # non-interactive shell, where Python keeps it ignored): Ctrl-C must arrive here.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    helper = threading.Thread(target=interrupt_once_held, daemon=True)
    helper.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            agent.compact(keep_last=1)
    finally:
        signal.signal(signal.SIGINT, previous)
    helper.join(30)
    assert_cancelled_cleanly(server, agent, before)


def test_compact_off_the_main_thread_returns_the_summary(server):
    # Off the main thread no signal reaches the call: it returns the summary once the
    # server answers.
    held_summary(server)
    agent = compactable_agent(server)
    outcome = []
    worker = threading.Thread(target=lambda: outcome.append(agent.compact(keep_last=1)))
    worker.start()
    wait_until(lambda: server.held() == 1, timeout=30, what="the summary request to be held")
    server.open_gate()
    worker.join(30)
    assert outcome and outcome[0].changed
    assert agent.history[0]["content"][0]["text"].endswith("summary")
