"""Many streams: 200 concurrent async streams (half of them held up by slow tools) all
make progress; reference counts and memory stay flat over 5,000 streams."""

from __future__ import annotations

import asyncio
import gc
import os
import sys
import threading
import time

import pytest

import panto
from conftest import Server, exchange, make_agent, text_exchange, tool_sse, wait_until


async def test_200_concurrent_async_streams_progress_while_tools_are_slow(server):
    n_slow = n_quick = 100
    slow_server = Server()  # requests of one server are matched in arrival order
    try:
        slow_server.scenario(
            exchange(tool_sse([("c1", "slow_async", {}), ("c2", "slow_sync", {})]), times=n_slow),
            text_exchange(["after tools"], times=n_slow, contains=["c1", "c2"]),
        )
        server.scenario(text_exchange(["quick"], times=n_quick))

        release_async = asyncio.Event()
        release_sync = threading.Event()
        started = {"async": 0, "sync": 0}
        lock = threading.Lock()

        @panto.tool
        async def slow_async() -> str:
            """Waits until released."""
            started["async"] += 1
            await release_async.wait()
            return "a"

        @panto.tool
        def slow_sync() -> str:
            """Blocks a thread until released."""
            with lock:
                started["sync"] += 1
            if not release_sync.wait(120):
                raise TimeoutError("never released")
            return "s"

        async def one(agent):
            async with agent.astream("go") as s:
                return await s.text()

        slow = [
            asyncio.create_task(one(make_agent(slow_server, tools=[slow_async, slow_sync], tool_timeout_ms=300_000)))
            for _ in range(n_slow)
        ]
        quick = [asyncio.create_task(one(make_agent(server))) for _ in range(n_quick)]

        # Every quick stream completes while all the slow ones are held up in their tools.
        done, _ = await asyncio.wait(quick, timeout=120)
        assert len(done) == n_quick and all(t.result() == "quick" for t in quick)
        deadline = time.monotonic() + 120
        while not (started["async"] == n_slow and started["sync"] == n_slow):
            assert time.monotonic() < deadline, started
            await asyncio.sleep(0.01)
        assert not any(t.done() for t in slow)

        release_async.set()
        release_sync.set()
        done, _ = await asyncio.wait(slow, timeout=120)
        assert len(done) == n_slow and all(t.result() == "after tools" for t in slow)
        wait_until(lambda: panto.diagnostics()["waits_in_flight"] == 0, what="no waiting thread left")
        wait_until(lambda: panto.diagnostics()["tools_in_flight"] == 0, what="no tool running")
    finally:
        slow_server.close()


def _rss_bytes() -> int:
    with open(f"/proc/{os.getpid()}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_refcounts_and_rss_stay_flat_over_5000_streams(server):
    warm, n = 500, 5000

    @panto.tool
    def echo(text: str) -> str:
        """Echoes."""
        return text

    # Every turn: one response calling the Python tool, which runs (on the tool pool),
    # then the turn ends (max_steps=1), so each stream crosses every part of the package.
    server.scenario(exchange(tool_sse([("c1", "echo", {"text": "hi"})]), times=warm + n))
    agent = make_agent(server, tools=[echo], max_steps=1)

    def one_turn() -> None:
        with agent.stream("hi") as s:
            for ev in s:
                if isinstance(ev, panto.ContentDelta):
                    ev.text
                elif isinstance(ev, panto.ToolResult):
                    assert ev.output == "hi"
                elif isinstance(ev, panto.MessageComplete):
                    ev.usage.to_dict()
        agent.clear_history()

    for _ in range(warm):
        one_turn()
    gc.collect()
    rss0 = _rss_bytes()
    objects0 = len(gc.get_objects())
    refs0 = (sys.getrefcount(agent), sys.getrefcount(echo), sys.getrefcount(panto.ContentDelta), sys.getrefcount(None) // 1000)
    started = time.monotonic()
    for _ in range(n):
        one_turn()
    elapsed = time.monotonic() - started
    gc.collect()
    rss1 = _rss_bytes()
    objects1 = len(gc.get_objects())
    refs1 = (sys.getrefcount(agent), sys.getrefcount(echo), sys.getrefcount(panto.ContentDelta), sys.getrefcount(None) // 1000)
    print(f"\n{n} streams in {elapsed:.1f} s; rss {rss0 / 2**20:.1f} -> {rss1 / 2**20:.1f} MiB; gc objects {objects0} -> {objects1}")
    assert (refs1[0], refs1[2]) == (refs0[0], refs0[2])
    # The tool pool's thread that ran the last call may still hold its frame (a
    # reference to ``echo``) a moment after the stream ended, at either count: one
    # reference either way is that; a leak would be one per turn, thousands.
    assert abs(refs1[1] - refs0[1]) <= 1
    assert objects1 - objects0 < 200  # fewer is fine: garbage of earlier tests went away
    assert rss1 - rss0 < 8 * 2**20
    assert panto.diagnostics()["active_streams"] == 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
async def test_async_streams_stay_flat(server):
    warm, n = 200, 1000

    @panto.tool
    async def echo(text: str) -> str:
        """Echoes."""
        return text

    server.scenario(exchange(tool_sse([("c1", "echo", {"text": "hi"})]), times=warm + n))
    agent = make_agent(server, tools=[echo], max_steps=1)

    async def one_turn() -> None:
        async with agent.astream("hi") as s:
            async for ev in s:
                if isinstance(ev, panto.ToolResult):
                    assert ev.output == "hi"
        agent.clear_history()

    for _ in range(warm):
        await one_turn()
    gc.collect()
    rss0, objects0, refs0 = _rss_bytes(), len(gc.get_objects()), sys.getrefcount(agent)
    for _ in range(n):
        await one_turn()
    gc.collect()
    rss1, objects1, refs1 = _rss_bytes(), len(gc.get_objects()), sys.getrefcount(agent)
    print(f"\n{n} async streams; rss {rss0 / 2**20:.1f} -> {rss1 / 2**20:.1f} MiB; gc objects {objects0} -> {objects1}")
    assert refs1 == refs0
    assert objects1 - objects0 < 200  # fewer is fine: garbage of earlier tests went away
    assert rss1 - rss0 < 8 * 2**20
    wait_until(lambda: panto.diagnostics()["active_streams"] == 0, what="every turn to end")
