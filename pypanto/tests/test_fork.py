"""fork: panto's worker threads do not survive it. A child process started with
multiprocessing's "fork" method after the parent ran turns makes its own Agent and runs
turns with it (the child gets a pool of its own); an Agent inherited from the parent
fails there at once with a clear ConfigError instead of hanging."""

from __future__ import annotations

import multiprocessing
import sys

import pytest

import panto
from conftest import make_agent, text_exchange

pytestmark = pytest.mark.skipif(
    sys.platform == "win32" or "fork" not in multiprocessing.get_all_start_methods(),
    reason="needs the fork start method",
)


def _child_new_agent(base_url: str, queue) -> None:
    try:
        agent = panto.Agent(model="gpt-test", base_url=base_url, api_key="sk-test-0123456789",
                            retry={"max_retries": 0})
        texts = [agent.run("hi").text for _ in range(2)]
        queue.put(("ok", texts))
    except BaseException as e:  # reported to the parent, which asserts on it
        queue.put(("error", f"{type(e).__name__}: {e}"))


def _child_parent_agent(agent: panto.Agent, queue) -> None:
    try:
        agent.run("hi")
        queue.put(("ok", None))
    except BaseException as e:
        queue.put(("error", type(e).__name__, str(e)))


def _run_in_fork(target, *args):
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=target, args=(*args, queue))
    proc.start()
    try:
        result = queue.get(timeout=60)  # a hang shows as queue.Empty here
    finally:
        proc.join(timeout=30)
        if proc.is_alive():
            proc.kill()
            proc.join()
    assert proc.exitcode == 0
    return result


def test_a_forked_child_runs_turns_with_a_new_agent(server):
    server.scenario(text_exchange(["Hel", "lo"], times=10))
    parent = make_agent(server)
    assert parent.run("warm up: the worker threads run").text == "Hello"
    assert _run_in_fork(_child_new_agent, server.base_url) == ("ok", ["Hello", "Hello"])
    # The parent is unaffected.
    assert parent.run("again").text == "Hello"


def test_an_agent_of_the_parent_fails_in_the_child_with_a_clear_error(server):
    server.scenario(text_exchange(["Hel", "lo"], times=10))
    parent = make_agent(server)
    assert parent.run("warm up").text == "Hello"
    status, kind, message = _run_in_fork(_child_parent_agent, parent)
    assert (status, kind) == ("error", "ConfigError")
    assert "before the process forked" in message
    assert parent.run("again").text == "Hello"


def _child_with_the_parents_loop_set(loop_set, base_url: str, queue) -> None:
    try:
        import asyncio

        # The parent's set is inert here: no descriptor, nothing to take.
        took, fd = loop_set.native.take(), loop_set.native.fd()

        async def turn():
            agent = panto.Agent(model="gpt-test", base_url=base_url, api_key="sk-test-0123456789",
                                retry={"max_retries": 0})
            return (await agent.arun("hi")).text

        # The child's own loop gets a set of its own and runs a turn through it.
        text = asyncio.run(turn())
        queue.put(("ok", took, fd, text))
    except BaseException as e:
        queue.put(("error", f"{type(e).__name__}: {e}"))


async def test_a_forked_child_leaves_the_parents_loop_set_alone(server):
    """A child forked while the parent's streams wait through the loop's ready set shares
    that set's descriptor: what the child does with its copy (take, on a copy of the
    loop's reader, or drop) must not take the parent's readiness away — before, it did,
    and the parent's streams waited for good — and the child's own asyncio streams work."""
    import asyncio
    import json as _json

    import select

    from conftest import exchange, text_sse, wait_until

    sse = text_sse(["first", "second"])
    cut = sum(len(("data: " + _json.dumps(i["data"], separators=(",", ":")) + "\n\n").encode()) for i in sse[:2])
    server.scenario(
        exchange(sse, times=2, fault={"kind": "hold", "after_bytes": cut}),
        text_exchange(["child"], times=1),
    )
    streams = [make_agent(server).astream(f"q{i}") for i in range(2)]
    got = [[], []]

    async def consume(i):
        async for ev in streams[i]:
            got[i].append(ev.type)

    tasks = [asyncio.create_task(consume(i)) for i in range(2)]
    while not (server.held() == 2 and all("content_delta" in g for g in got)
               and all(s.consumer_waiting() for s in streams)):
        await asyncio.sleep(0.005)
    ls = streams[0]._set
    assert ls is not None
    # The rest of both answers arrives: both are reported.
    server.open_gate()
    wait_until(lambda: select.select([ls.fd], [], [], 0)[0] == [ls.fd], what="the set to turn readable")
    # The loop has not run since (wait_until and the fork block it): the tokens wait in
    # the set while the child forks and runs.
    result = _run_in_fork(_child_with_the_parents_loop_set, ls, server.base_url)
    assert result == ("ok", [], -1, "child"), result
    await asyncio.wait_for(asyncio.gather(*tasks), 30)
    assert all(g[-1] == "message_complete" for g in got)
