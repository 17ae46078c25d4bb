"""Async streams wait on the event loop (through the loop's ready set, whose one
descriptor is given to ``loop.add_reader``), not in a thread each: 1,000 waiting streams
leave the process's thread count where it was, and cost no descriptor each. Loops that cannot watch a descriptor still work, through
panto's wait pool; a sync stream can still be stepped from a thread."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading

import pytest

import panto
from conftest import exchange, make_agent, text_exchange, text_sse, wait_until


def os_threads() -> int:
    """The process's threads as the OS counts them (panto's native workers included)."""
    with open(f"/proc/{os.getpid()}/status") as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    raise AssertionError("no Threads: line")


def thread_names():
    names = {}
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm") as f:
                name = f.read().strip()
        except FileNotFoundError:  # the thread ended
            continue
        names[name] = names.get(name, 0) + 1
    return names


def _held(server, times):
    """Responses that send their first text chunk, then hold until the gate opens."""
    sse = text_sse(["first", "second"])
    cut = sum(len(("data: " + json.dumps(i["data"], separators=(",", ":")) + "\n\n").encode()) for i in sse[:2])
    server.scenario(exchange(sse, times=times, fault={"kind": "hold", "after_bytes": cut}))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
async def test_1000_waiting_async_streams_take_no_thread_each(server):
    n = 1000
    # A descriptor per stream for its connection (and room to spare).
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 4 * n:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8 * n), hard))
    # Warm up: panto's worker pool and the loop's own machinery exist before counting.
    server.scenario(text_exchange(["warm"]))
    assert await make_agent(server).arun("warm-up") is not None
    threads0, py_threads0 = os_threads(), threading.active_count()
    wait_threads0 = panto.diagnostics()["wait_threads"]

    _held(server, n)
    waiting = 0
    peak = [threads0]
    all_waiting = asyncio.Event()

    async def one(i):
        nonlocal waiting
        async with make_agent(server).astream(f"q{i}") as s:
            texts = []
            async for ev in s:
                if isinstance(ev, panto.ContentDelta):
                    texts.append(ev.text)
                    if ev.text == "first":
                        waiting += 1
                        if waiting == n:
                            all_waiting.set()
            return "".join(texts)

    fds0 = len(os.listdir("/proc/self/fd"))
    tasks = [asyncio.create_task(one(i)) for i in range(n)]
    await asyncio.wait_for(all_waiting.wait(), 120)
    # Every stream has had its first chunk and now waits for the held rest of it.
    deadline = asyncio.get_running_loop().time() + 120
    while not (server.held() == n and panto.diagnostics()["waits_on_loop"] == n):
        assert asyncio.get_running_loop().time() < deadline, (server.held(), panto.diagnostics())
        await asyncio.sleep(0.01)
        peak[0] = max(peak[0], os_threads())
    d = panto.diagnostics()
    assert d["waits_in_flight"] == n and d["wait_threads"] == wait_threads0
    # A socket per stream and the loop's ready set: no descriptor per waiting stream.
    fds = len(os.listdir("/proc/self/fd"))
    assert fds <= fds0 + n + 8, (fds0, fds)
    peak[0] = max(peak[0], os_threads())
    assert threading.active_count() == py_threads0
    server.open_gate()
    results = await asyncio.wait_for(asyncio.gather(*tasks), 120)
    peak[0] = max(peak[0], os_threads())
    assert results == ["firstsecond"] * n
    print(f"\n{n} waiting async streams: OS threads {threads0} -> peak {peak[0]}: {thread_names()}")
    # No thread per stream: at most a few (a resolver's) beyond what one turn had
    # already started (the main thread and panto's workers).
    assert peak[0] - threads0 <= 4, (threads0, peak[0], thread_names())
    wait_until(lambda: panto.diagnostics()["waits_in_flight"] == 0, what="no wait left")
    wait_until(lambda: panto.diagnostics()["active_streams"] == 0, what="every turn to end")


class _NoReaderLoop(asyncio.SelectorEventLoop):
    """A loop that cannot watch descriptors, like Windows' Proactor loop."""

    def add_reader(self, fd, callback, *args):
        raise NotImplementedError


def test_a_loop_without_add_reader_waits_in_panto_threads(server):
    _held(server, 2)

    async def main():
        base = panto.diagnostics()
        s = make_agent(server).astream("q")
        seen = []

        async def consume():
            async for ev in s:
                seen.append(ev.type)
            return seen

        task = asyncio.create_task(consume())
        while not (server.held() == 1 and "content_delta" in seen and s.consumer_waiting()):
            await asyncio.sleep(0.005)
        d = panto.diagnostics()
        assert d["waits_on_loop"] == 0 and d["waits_in_flight"] == base["waits_in_flight"] + 1
        # Cancelling the awaiting task cancels the turn, as on any loop.
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert s.cancelled
        # A second stream runs to its end through the pool.
        t = make_agent(server).astream("q2")
        texts = []

        async def read():
            async for ev in t:
                if isinstance(ev, panto.ContentDelta):
                    texts.append(ev.text)

        reader = asyncio.create_task(read())
        while not (server.held() == 1 and texts == ["first"] and t.consumer_waiting()):
            await asyncio.sleep(0.005)
        server.open_gate()
        await asyncio.wait_for(reader, 30)
        assert texts == ["first", "second"]

    loop = _NoReaderLoop()
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    wait_until(lambda: panto.diagnostics()["waits_in_flight"] == 0, what="the pool's waits to end")


async def test_a_sync_stream_still_steps_in_a_thread(server):
    """The sync iterator is unchanged: `await asyncio.to_thread(next, stream)` waits in
    the default executor's thread, as it always could."""
    _held(server, 1)
    s = make_agent(server).stream("q")
    kinds = []
    while True:
        ev = await asyncio.to_thread(next, s)
        kinds.append(ev.type)
        if isinstance(ev, panto.ContentDelta):
            break
    waiting = asyncio.create_task(asyncio.to_thread(next, s))
    while not (server.held() == 1 and s.consumer_waiting()):
        await asyncio.sleep(0.005)
    assert not waiting.done()
    server.open_gate()
    ev = await asyncio.wait_for(waiting, 30)
    assert isinstance(ev, panto.ContentDelta) and ev.text == "second"
    # With a default: a StopIteration cannot cross into an asyncio future (asyncio
    # refuses it, and the await would never end) — true of any iterator.
    rest = []
    while (ev := await asyncio.to_thread(next, s, None)) is not None:
        rest.append(ev.type)
    assert rest[-1] == "message_complete"


async def test_one_reader_per_loop_serves_every_stream(server):
    """Streams wait through their loop's ready set: one reader on the loop for all of
    them, no descriptor per stream, and a cancelled wait leaves nothing registered for
    its stream."""
    _held(server, 2)
    loop = asyncio.get_running_loop()
    streams = [make_agent(server).astream(f"q{i}") for i in range(2)]
    got = [[], []]

    async def consume(i):
        async for ev in streams[i]:
            got[i].append(ev.type)

    tasks = [asyncio.create_task(consume(i)) for i in range(2)]
    while not (
        server.held() == 2
        and all("content_delta" in g for g in got)
        and all(s.consumer_waiting() for s in streams)
    ):
        await asyncio.sleep(0.005)
    a, b = streams
    assert a._set is not None and a._set is b._set and a._token != b._token
    ls = a._set
    assert set(ls.waiters) == {a._token, b._token}
    assert panto.diagnostics()["waits_on_loop"] == 2
    # Attached streams have no descriptor of their own.
    with pytest.raises(OSError):
        a._stream._readiness_fd()
    # The loop watches the set's descriptor: removing that reader finds it.
    assert loop.remove_reader(ls.fd) is True
    loop.add_reader(ls.fd, ls._ready)
    tasks[0].cancel()
    with pytest.raises(asyncio.CancelledError):
        await tasks[0]
    assert a.cancelled and set(ls.waiters) == {b._token}
    server.open_gate()
    await asyncio.wait_for(tasks[1], 30)
    assert got[1][-1] == "message_complete" and ls.waiters == {}
    assert panto.diagnostics()["waits_on_loop"] == 0


def test_a_stream_awaited_on_a_second_loop_after_the_first_closed_with_a_waiter(server):
    """A stream that waited through one loop's ready set, whose loop was then closed while
    a task still waited on it, is read to its end on a new loop (there it waits in a
    thread: its token belongs to the first loop's set)."""
    _held(server, 1)
    s = make_agent(server).astream("q")
    first = []

    async def until_waiting():
        async def read():
            async for ev in s:
                first.append(ev.type)

        task = asyncio.create_task(read())
        while not (server.held() == 1 and "content_delta" in first and s.consumer_waiting()):
            await asyncio.sleep(0.005)
        assert s._set is not None and s._token in s._set.waiters
        return task

    loop1 = asyncio.new_event_loop()
    task1 = loop1.run_until_complete(until_waiting())
    assert not task1.done()
    first_set = s._set
    loop1.close()  # the task is left waiting, its loop gone
    # The closed loop's set is dropped at once: its wait counted out, its descriptor
    # closed (nothing will ever resume task1).
    assert panto.diagnostics()["waits_on_loop"] == 0
    assert first_set is not None and first_set.native is None and first_set.waiters == {}

    async def rest():
        texts = []

        async def read():
            async for ev in s:
                if isinstance(ev, panto.ContentDelta):
                    texts.append(ev.text)
                last[0] = ev.type

        last = [None]
        reader = asyncio.create_task(read())
        # Blocked on the new loop (in a thread), before the server lets the rest go.
        while not (panto.diagnostics()["waits_in_flight"] >= 1 and not reader.done()
                   and s._stream.consumer_waiting()):
            await asyncio.sleep(0.005)
        assert texts == []
        server.open_gate()
        await asyncio.wait_for(reader, 30)
        return texts, last[0]

    loop2 = asyncio.new_event_loop()
    try:
        texts, last = loop2.run_until_complete(rest())
    finally:
        loop2.close()
    assert texts == ["second"] and last == "message_complete"
    wait_until(lambda: panto.diagnostics()["active_streams"] == 0, what="the turn to end")
    assert panto.diagnostics()["waits_on_loop"] == 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_loops_closed_with_streams_waiting_leak_no_descriptor_and_no_wait(server):
    """Rounds of 20 streams waiting on a loop that is stopped and closed without
    cancelling them: each closed loop's set is dropped (its descriptor closed, its
    waits counted out), so the stranded tasks are garbage, and collecting them closes
    their streams. Descriptors and waits_in_flight stay where they were."""
    import gc

    def fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    def one_round() -> None:
        _held(server, 20)
        loop = asyncio.new_event_loop()

        async def start_waiting():
            streams = [make_agent(server).astream(f"q{i}") for i in range(20)]
            firsts = []

            async def read(s):
                async for ev in s:
                    if isinstance(ev, panto.ContentDelta):
                        firsts.append(ev.text)

            tasks = [asyncio.create_task(read(s)) for s in streams]
            while not (len(firsts) == 20 and all(s.consumer_waiting() for s in streams)):
                await asyncio.sleep(0.005)
            return tasks

        tasks = loop.run_until_complete(start_waiting())  # the loop stops, tasks pending
        assert panto.diagnostics()["waits_on_loop"] == 20
        loop.close()  # nothing cancelled them
        del tasks
        gc.collect()
        assert panto.diagnostics()["waits_in_flight"] == 0
        wait_until(lambda: panto.diagnostics()["active_streams"] == 0, what="the stranded turns to end")

    one_round()  # warm-up: pools and connections exist before counting
    wait_until(lambda: panto.diagnostics()["active_streams"] == 0, what="the warm-up to end")
    fds0 = fds()
    for _ in range(4):
        one_round()
        assert panto.diagnostics()["waits_in_flight"] == 0
        wait_until(lambda: fds() <= fds0, what=f"descriptors back to {fds0} (now {fds()})")


async def test_a_stream_dropped_unclosed_with_its_token_queued(server):
    """An async stream nobody closed is collected while attached and reported (its token
    queued in the loop's set): the turn ends, the reader ignores its token, and another
    stream of the same loop still goes to its end through the same set."""
    import gc
    import select

    _held(server, 2)
    streams = [make_agent(server).astream(f"q{i}") for i in range(2)]
    got = [[], []]

    async def consume(i, stop_at_first):
        async for ev in streams[i]:
            got[i].append(ev.type)
            if stop_at_first and ev.type == "content_delta":
                return

    # Stream 0 is attached (as its first wait would, but that wait is skipped when the
    # first burst is there before the first __anext__, as on a fast release build), read
    # up to its first delta, then left.
    assert streams[0]._attached(asyncio.get_running_loop()) is not None
    await asyncio.wait_for(consume(0, True), 30)
    reader = asyncio.create_task(consume(1, False))
    while not (server.held() == 2 and "content_delta" in got[1] and streams[1].consumer_waiting()):
        await asyncio.sleep(0.005)
    ls = streams[0]._set
    assert ls is not None and ls is streams[1]._set
    # Drained to "nothing" (the rule after a report), so the next turn to ready reports it.
    while streams[0]._stream._try_next() is not None:
        pass
    active = panto.diagnostics()["active_streams"]
    streams[0].cancel()  # reported: its token is queued in the set now
    assert select.select([ls.fd], [], [], 0)[0] == [ls.fd]
    import weakref

    dropped = weakref.ref(streams[0])
    streams[0] = None
    gc.collect()
    assert dropped() is None, gc.get_referrers(dropped())
    wait_until(lambda: panto.diagnostics()["active_streams"] == active - 1, what="the dropped turn to end")
    server.open_gate()
    await asyncio.wait_for(reader, 30)
    assert got[1][-1] == "message_complete"
    # Nothing left readable for the loop to spin on.
    assert ls.native.take() == []
    assert select.select([ls.fd], [], [], 0)[0] == []


class _Takes:
    """A loop set's native ``ReadySet`` that records the tokens its reader takes."""

    def __init__(self, native):
        self.native = native
        self.taken = []

    def fd(self):
        return self.native.fd()

    def take(self):
        tokens = self.native.take()
        self.taken.extend(tokens)
        return tokens


async def test_a_report_taken_while_the_consumer_is_elsewhere_still_wakes_it(server):
    """After an event with nothing else ready, ``__anext__`` waits without asking the
    native stream again. The stream's one report for its next event may be taken by the
    loop's reader while the consumer is elsewhere (the body of ``async for`` awaits):
    the next ``__anext__`` must still return that event instead of waiting for a report
    that already came (the lost wake-up that hung the async tool-timeout test)."""
    _held(server, 1)
    loop = asyncio.get_running_loop()
    s = make_agent(server).astream("q")
    ls = s._attached(loop)
    assert ls is not None
    ev = None
    while not (isinstance(ev, panto.ContentDelta) and ev.text == "first"):
        ev = await asyncio.wait_for(s.__anext__(), 30)
    # The server holds the rest: the stream said nothing else was ready with "first".
    assert s._token in ls.armed
    takes = _Takes(ls.native)
    ls.native = takes
    # The consumer is elsewhere while the rest arrives and the loop's reader takes the
    # stream's report: nobody waits for it.
    await loop.run_in_executor(None, server.open_gate)

    async def reported():
        while s._token not in takes.taken:
            await asyncio.sleep(0.001)

    await asyncio.wait_for(reported(), 30)
    assert not s.consumer_waiting()
    try:
        ev = await asyncio.wait_for(s.__anext__(), 30)
    except asyncio.TimeoutError:
        raise AssertionError("the report taken while nobody waited was lost") from None
    assert isinstance(ev, panto.ContentDelta) and ev.text == "second"
    rest = [e async for e in s]
    assert isinstance(rest[-1], panto.MessageComplete)
    assert ls.armed == set()
