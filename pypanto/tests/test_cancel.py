"""Cancel and close from another thread while blocked, Ctrl-C (in subprocesses), and no
leaked turn or thread after leaving a stream early, sync or async."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import panto
from conftest import REPO, chunk, exchange, make_agent, text_exchange, text_sse, wait_until


def held_stream(server, n_first=2):
    """A response that sends a few chunks, then holds until the gate opens."""
    sse = text_sse(["before"] + ["after"] * 3)
    # after_bytes counts body bytes: stop right after the first `n_first` items.
    import json as _json

    def item_bytes(item):
        return len(("data: " + _json.dumps(item["data"], separators=(",", ":")) + "\n\n").encode())

    cut = sum(item_bytes(i) for i in sse[:n_first])
    server.scenario(exchange(sse, fault={"kind": "hold", "after_bytes": cut}))


def os_threads() -> int:
    with open(f"/proc/{os.getpid()}/status") as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    return threading.active_count()


def test_cancel_from_another_thread_while_blocked(server):
    held_stream(server)
    agent = make_agent(server)
    base = panto.diagnostics()["active_streams"]
    s = agent.stream("question")
    outcome = {}
    seen = []

    def consume():
        try:
            for ev in s:
                seen.append(ev.type)
        except BaseException as e:  # noqa: BLE001 - recorded for the assertion
            outcome["error"] = e
        outcome["seen"] = seen

    t = threading.Thread(target=consume)
    t.start()
    # Establish the blocked state: the response is held, the consumer has taken every
    # event before the hold, and it is waiting.
    wait_until(lambda: server.held() == 1, what="the response to be held")
    wait_until(lambda: "content_delta" in seen and s.consumer_waiting(), what="the consumer to block")
    assert t.is_alive()
    started = time.monotonic()
    s.cancel()
    t.join(10)
    assert not t.is_alive()
    assert time.monotonic() - started < 2
    assert isinstance(outcome["error"], panto.StreamCancelledError)
    assert "message_start" in outcome["seen"] and "message_complete" not in outcome["seen"]
    wait_until(lambda: panto.diagnostics()["active_streams"] == base, what="the turn to end")
    # The history is valid (the partial answer is dropped) and the agent is free.
    assert [m["role"] for m in agent.history] == ["user"]
    server.scenario(text_exchange(["again"]))
    assert agent.run("retry").text == "again"


def test_close_from_another_thread_while_blocked(server):
    held_stream(server)
    agent = make_agent(server)
    s = agent.stream("question")
    errors = []
    seen = []

    def consume():
        try:
            for ev in s:
                seen.append(ev.type)
        except panto.PantoError as e:
            errors.append(e)

    t = threading.Thread(target=consume)
    t.start()
    wait_until(lambda: server.held() == 1 and "content_delta" in seen and s.consumer_waiting(), what="a blocked consumer")
    s.close()
    t.join(10)
    assert not t.is_alive()
    assert isinstance(errors[0], panto.StreamCancelledError)
    # close() returned after the turn ended: the agent is free at once.
    server.scenario(text_exchange(["ok"]))
    assert agent.run("next").text == "ok"


def test_with_block_closes_an_unfinished_stream(server):
    held_stream(server)
    agent = make_agent(server)
    with agent.stream("q") as s:
        assert next(s).type == "message_start"
    with pytest.raises(panto.StreamCancelledError):
        next(s)
    server.scenario(text_exchange(["ok"]))
    assert agent.run("next").text == "ok"


def test_breaking_out_early_leaks_no_turn_and_no_thread(server):
    server.scenario(text_exchange(["a", "b", "c"], times=40))
    agent = make_agent(server)
    base = panto.diagnostics()["active_streams"]
    for ev in agent.stream("warm-up"):  # starts the adapter's worker threads
        break
    wait_until(lambda: panto.diagnostics()["active_streams"] == base, what="the warm-up turn to end")
    threads = os_threads()
    for _ in range(30):
        for ev in agent.stream("q"):
            if isinstance(ev, panto.ContentDelta):
                break
    wait_until(lambda: panto.diagnostics()["active_streams"] == base, what="every turn to end")
    assert os_threads() <= threads


async def test_async_break_early_leaks_no_turn_and_no_waiting_thread(server):
    server.scenario(text_exchange(["a", "b", "c"], times=40))
    agent = make_agent(server)
    base = panto.diagnostics()["active_streams"]
    async for ev in agent.astream("warm-up"):
        break
    wait_until(lambda: panto.diagnostics()["active_streams"] == base, what="the warm-up turn to end")
    for _ in range(30):
        async for ev in agent.astream("q"):
            if isinstance(ev, panto.ContentDelta):
                break
    wait_until(lambda: panto.diagnostics()["active_streams"] == base, what="every turn to end")
    wait_until(lambda: panto.diagnostics()["waits_in_flight"] == 0, what="no thread waiting")


async def test_cancelling_the_awaiting_task_cancels_the_turn_and_frees_its_thread(server):
    held_stream(server)
    agent = make_agent(server)
    base = panto.diagnostics()
    s = agent.astream("q")
    seen = []

    async def consume():
        async for ev in s:
            seen.append(ev.type)

    task = asyncio.create_task(consume())
    await asyncio.sleep(0)
    # The task waits for the stream (on the loop, or in a panto thread on a loop
    # without add_reader), counted in waits_in_flight.
    while not (server.held() == 1 and "content_delta" in seen and s.consumer_waiting()):
        await asyncio.sleep(0.005)
    assert panto.diagnostics()["waits_in_flight"] == base["waits_in_flight"] + 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert s.cancelled
    wait_until(lambda: panto.diagnostics()["waits_in_flight"] == base["waits_in_flight"], timeout=5, what="the wait to end")
    wait_until(lambda: panto.diagnostics()["active_streams"] == base["active_streams"], timeout=5, what="the turn to end")
    with pytest.raises(panto.StreamCancelledError):
        await s.__anext__()


async def test_aclose_and_async_with_cancel_the_turn(server):
    held_stream(server)
    agent = make_agent(server)
    base = panto.diagnostics()["active_streams"]
    async with agent.astream("q") as s:
        assert (await s.__anext__()).type == "message_start"
    assert s.cancelled
    assert panto.diagnostics()["active_streams"] == base  # aclose waited for the turn
    server.scenario(text_exchange(["ok"]))
    s2 = agent.astream("again")
    assert await s2.text() == "ok"
    await s2.aclose()  # after the end: changes nothing
    with pytest.raises(StopAsyncIteration):
        await s2.__anext__()


CTRL_C_CHILD = textwrap.dedent(
    """
    import asyncio, signal, sys, threading, time
    import panto

    # Python leaves SIGINT ignored when it starts with it ignored (a job a
    # non-interactive shell put in the background): Ctrl-C must reach this child.
    signal.signal(signal.SIGINT, signal.default_int_handler)

    base_url, history_path, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    agent = panto.Agent(model="gpt-test", base_url=base_url, api_key="k", retry={"max_retries": 0})

    seen = []

    def announce_when_blocked(stream):
        # Blocked for good: the last event before the held part of the response was
        # taken, and the consumer waits (not merely between two bursts).
        def watch():
            while not ("content_delta" in seen and stream.consumer_waiting()):
                time.sleep(0.001)
            print("BLOCKED", flush=True)
        threading.Thread(target=watch, daemon=True).start()

    def sync():
        s = agent.stream("question")
        announce_when_blocked(s)
        for ev in s:  # no `with`: the native wait itself must cancel the turn
            seen.append(ev.type)

    async def main():
        s = agent.astream("question")
        announce_when_blocked(s)
        async for ev in s:
            seen.append(ev.type)

    try:
        if mode == "sync":
            sync()
        else:
            asyncio.run(main())
        print("NOT INTERRUPTED", flush=True)
    except KeyboardInterrupt:
        import traceback
        traceback.print_exc()
        with open(history_path, "w") as f:
            f.write(agent.save_history())
        print("INTERRUPTED", panto.diagnostics()["active_streams"], flush=True)
        sys.exit(130)
    """
)


@pytest.mark.parametrize("mode", ["sync", "asyncio"])
@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a child")
def test_ctrl_c_interrupts_promptly_and_leaves_a_valid_history(server, tmp_path, mode):
    held_stream(server)
    script = tmp_path / "child.py"
    script.write_text(CTRL_C_CHILD)
    history_path = tmp_path / "history.json"
    child = subprocess.Popen(
        [sys.executable, str(script), server.base_url, str(history_path), mode],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline().strip()
        assert line == "BLOCKED", (line, child.stderr.read() if child.poll() is not None else "")
        wait_until(lambda: server.held() == 1, what="the response to be held")
        sent = time.monotonic()
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=10)
        elapsed = time.monotonic() - sent
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 130, (out, err)
    assert out.strip() == "INTERRUPTED 0", (out, err)
    assert elapsed < 2.0, elapsed
    saved = history_path.read_text()
    restored = make_agent(server)
    restored.restore_history(saved)  # validated by the core
    assert [m["role"] for m in restored.history] == ["user"]
    assert restored.history[0]["content"] == [{"type": "text", "text": "question"}]
    server.scenario(text_exchange(["fine"], contains=["question"]))
    assert restored.run("go on").text == "fine"


EXIT_CHILD = textwrap.dedent(
    """
    import asyncio, signal, sys, threading, time
    import panto

    # Python leaves SIGINT ignored when it starts with it ignored (a job a
    # non-interactive shell put in the background): Ctrl-C must reach this child.
    signal.signal(signal.SIGINT, signal.default_int_handler)

    base_url = sys.argv[1]
    blocked = []

    def sync_consumer():
        s = panto.Agent(model="gpt-test", base_url=base_url, api_key="k").stream("q")
        blocked.append(s)
        for ev in s:
            pass

    def async_consumer():
        async def main():
            s = panto.Agent(model="gpt-test", base_url=base_url, api_key="k").astream("q")
            blocked.append(s)
            async for ev in s:
                pass
        asyncio.run(main())

    for target in (sync_consumer, async_consumer):
        threading.Thread(target=target, daemon=True).start()
    deadline = time.monotonic() + 20
    while not (len(blocked) == 2 and all(s.consumer_waiting() for s in blocked)):
        assert time.monotonic() < deadline, "consumers never blocked"
        time.sleep(0.005)
    print("BLOCKED", flush=True)
    # The main thread ends here, with two daemon threads blocked in streams.
    """
)


@pytest.mark.skipif(sys.platform == "win32", reason="subprocess exit")
def test_interpreter_exits_promptly_with_streams_blocked_in_daemon_threads(server, tmp_path):
    """Streams blocked in daemon threads (one sync, one under asyncio.run, which waits
    in panto's pool) do not hold up exit: panto's threads are daemons, its exit hook
    cancels every stream, and a wait that ends after it never re-enters the
    interpreter. The process exits at once and cleanly."""
    server.scenario(exchange(text_sse(["a"]), times=2, fault={"kind": "hold", "after_bytes": 0}))
    script = tmp_path / "child.py"
    script.write_text(EXIT_CHILD)
    for _ in range(3):
        started = time.monotonic()
        out = subprocess.run([sys.executable, str(script), server.base_url], capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "BLOCKED"
        assert "Fatal" not in out.stderr and "panicked" not in out.stderr, out.stderr
        assert time.monotonic() - started < 10
        server.scenario(exchange(text_sse(["a"]), times=2, fault={"kind": "hold", "after_bytes": 0}))


async def test_aclose_from_another_task_while_one_awaits(server):
    held_stream(server)
    agent = make_agent(server)
    s = agent.astream("q")
    seen = []

    async def consume():
        async for ev in s:
            seen.append(ev.type)

    task = asyncio.create_task(consume())
    while not (server.held() == 1 and "content_delta" in seen and s.consumer_waiting()):
        await asyncio.sleep(0.005)
    assert not task.done()
    await s.aclose()  # from this task, while `consume` awaits the next event
    with pytest.raises(panto.StreamCancelledError):
        await asyncio.wait_for(task, 10)
    assert panto.diagnostics()["waits_in_flight"] == 0 or wait_until(
        lambda: panto.diagnostics()["waits_in_flight"] == 0, what="the wait to end"
    )
    server.scenario(text_exchange(["ok"]))
    assert (await agent.arun("next")).text == "ok"
