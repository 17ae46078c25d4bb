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
