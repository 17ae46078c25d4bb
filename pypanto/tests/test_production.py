"""Production controls from Python: token counts (the provider's count endpoint, the
estimate), ``max_tool_calls``, and a process-wide bound on model requests whose queued
requests wait on the event loop, not in a thread each."""

from __future__ import annotations

import asyncio
import os
from typing import Any, Dict, List

import pytest

import panto
from conftest import exchange, make_agent, text_sse, tool_sse, wait_until


def os_threads() -> int:
    with open(f"/proc/{os.getpid()}/status") as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    raise AssertionError("no Threads: line")


def test_count_tokens_asks_the_provider_and_estimates_without_one(server: Any) -> None:
    server.scenario(
        {
            "match": {"method": "POST", "path": "/v1/messages/count_tokens", "body_contains": ["How long is this?"]},
            "response": {"status": 200, "json": {"input_tokens": 42}},
        }
    )
    agent = panto.Agent(provider="anthropic", model="claude-test", base_url=server.url, api_key="sk-test-0123456789")
    assert agent.count_tokens("How long is this?") == panto.TokenCount(tokens=42, estimated=False)

    chat = make_agent(server)
    short = chat.count_tokens("hi")
    long = chat.count_tokens("word " * 400)
    assert short.estimated and long.estimated
    assert long.tokens >= short.tokens + 400
    assert len(server.requests()) == 1, "an estimate sends nothing"
    assert asyncio.run(chat.acount_tokens("hi")) == short


def test_count_tokens_raises_the_providers_error(server: Any) -> None:
    server.scenario(
        {
            "match": {"method": "POST", "path": "/v1/messages/count_tokens"},
            "response": {"status": 401, "json": {"error": {"type": "authentication_error", "message": "bad key"}}},
        }
    )
    agent = panto.Agent(provider="anthropic", model="claude-test", base_url=server.url, api_key="sk-test-0123456789")
    with pytest.raises(panto.AuthenticationError) as e:
        agent.count_tokens("hi")
    assert "sk-test-0123456789" not in str(e.value)


def test_max_tool_calls_fails_the_turn_with_a_tool_error(server: Any) -> None:
    server.scenario(exchange(tool_sse([("c1", "probe", {}), ("c2", "probe", {}), ("c3", "probe", {})])))
    ran: List[Dict[str, Any]] = []

    @panto.tool
    def probe() -> str:
        """A probe."""
        ran.append({})
        return "ok"

    agent = make_agent(server, tools=[probe], max_tool_calls=2)
    with pytest.raises(panto.ToolError) as e:
        agent.run("go")
    assert "max_tool_calls (2)" in str(e.value)
    assert ran == []


def test_queued_requests_wait_on_the_loop_not_in_threads(server: Any) -> None:
    n = 40
    server.scenario(
        {
            "match": {"method": "POST", "path": "/v1/chat/completions"},
            "times": n,
            "response": {"sse": text_sse(["ok"]), "fault": {"kind": "hold", "after_bytes": 0}},
        }
    )
    agents = [
        make_agent(server, api_key="sk-test-py-bound", max_concurrent_requests=2, max_queued_requests=100)
        for _ in range(n)
    ]

    async def main() -> List[int]:
        async def one(agent: panto.Agent) -> int:
            queued = -1
            async with agent.astream("hi") as s:
                async for ev in s:
                    if isinstance(ev, panto.MessageStart):
                        queued = ev.queued_ms if ev.queued_ms is not None else -1
            return queued

        # Warm up the loop's machinery before counting threads.
        tasks = [asyncio.create_task(one(a)) for a in agents]
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, lambda: wait_until(lambda: server.held() == 2, what="two held"))
        threads = os_threads()
        assert threads < 30, f"{threads} threads for {n} turns"
        server.open_gate()
        return await asyncio.gather(*tasks)

    queued = asyncio.run(main())
    assert all(q >= 0 for q in queued), queued
    assert server.stats()["max_in_flight"] <= 2
