"""@panto.tool: schema derivation, and Python tools run automatically in sync and async
turns (sync and async functions, errors, concurrency)."""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import json
import threading
import time
from typing import Annotated, Dict, List, Literal, Optional, Sequence, Tuple, TypedDict

import pytest

import panto
from conftest import exchange, make_agent, text_exchange, tool_sse, wait_until


# --------------------------------------------------------------------------------------
# Schema derivation, against hand-written schemas
# --------------------------------------------------------------------------------------


def test_schema_of_scalars_defaults_and_docstring():
    @panto.tool
    def search(query: str, limit: int = 10, threshold: float = 0.5, exact: bool = False) -> str:
        """Searches the index.

        Longer explanation on a second paragraph.

        Args:
            query: what to look for.
            limit: at most this many hits,
                counted after filtering.
        """
        return ""

    assert search.name == "search"
    assert search.description == "Searches the index.\n\nLonger explanation on a second paragraph."
    assert search.parameters == {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "what to look for."},
            "limit": {"type": "integer", "description": "at most this many hits, counted after filtering.", "default": 10},
            "threshold": {"type": "number", "default": 0.5},
            "exact": {"type": "boolean", "default": False},
        },
        "required": ["query"],
    }
    assert search.is_async is False
    assert search("x") == ""  # still callable


class Colour(enum.Enum):
    RED = "red"
    GREEN = "green"


@dataclasses.dataclass
class Point:
    x: float
    y: float
    label: str = "origin"


class Address(TypedDict):
    street: str
    zip: int


def test_schema_of_containers_unions_literals_and_records():
    @panto.tool(name="plot", description="Plots points.")
    async def plot(
        points: List[Point],
        colour: Colour,
        mode: Literal["line", "scatter"] = "line",
        tags: Optional[list[str]] = None,
        size: int | None = None,
        where: Optional[Address] = None,
        weights: Dict[str, float] = {},
        pair: Tuple[int, str] = (1, "a"),
        note: Annotated[str, "free text"] = "",
        anything=None,
        ids: Sequence[int] = (),
    ) -> None:
        return None

    assert plot.is_async is True
    assert plot.spec() == {
        "name": "plot",
        "description": "Plots points.",
        "parameters": {
            "type": "object",
            "properties": {
                "points": {"type": "array", "items": {"$ref": "#/$defs/Point"}},
                "colour": {"type": "string", "enum": ["red", "green"]},
                "mode": {"type": "string", "enum": ["line", "scatter"], "default": "line"},
                "tags": {"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}], "default": None},
                "size": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None},
                "where": {"anyOf": [{"$ref": "#/$defs/Address"}, {"type": "null"}], "default": None},
                "weights": {"type": "object", "additionalProperties": {"type": "number"}, "default": {}},
                "pair": {
                    "type": "array",
                    "prefixItems": [{"type": "integer"}, {"type": "string"}],
                    "minItems": 2,
                    "maxItems": 2,
                    "default": [1, "a"],
                },
                "note": {"type": "string", "description": "free text", "default": ""},
                "anything": {"default": None},
                "ids": {"type": "array", "items": {"type": "integer"}, "default": []},
            },
            "required": ["points", "colour"],
            # Named types once, under $defs (a dataclass's generated docstring is no
            # description).
            "$defs": {
                "Point": {
                    "type": "object",
                    "properties": {
                        "x": {"type": "number"},
                        "y": {"type": "number"},
                        "label": {"type": "string", "default": "origin"},
                    },
                    "required": ["x", "y"],
                },
                "Address": {
                    "type": "object",
                    "properties": {"street": {"type": "string"}, "zip": {"type": "integer"}},
                    "required": ["street", "zip"],
                },
            },
        },
    }


def test_schema_sphinx_docstring_and_unsupported_types():
    @panto.tool
    def f(a: str) -> str:
        """Does f.

        :param a: the a.
        """
        return a

    assert f.description == "Does f."
    assert f.parameters["properties"]["a"] == {"type": "string", "description": "the a."}

    class Opaque:
        """Neither panto nor pydantic can describe it."""

    with pytest.raises(TypeError, match="parameter 'x'"):

        @panto.tool
        def g(x: Opaque) -> None: ...

    with pytest.raises(TypeError, match="needs a name"):
        panto.tool(lambda: None)


def test_arguments_are_converted_to_the_annotated_types():
    @panto.tool
    def f(p: Point, c: Colour, pts: list[Point], pair: tuple[int, int], opt: Optional[Point] = None):
        return (p, c, pts, pair, opt)

    kwargs = f.arguments({"p": {"x": 1, "y": 2}, "c": "red", "pts": [{"x": 0, "y": 0, "label": "o"}], "pair": [1, 2], "opt": None})
    assert f(**kwargs) == (Point(1, 2), Colour.RED, [Point(0, 0, "o")], (1, 2), None)


# --------------------------------------------------------------------------------------
# Running tools
# --------------------------------------------------------------------------------------


def _tool_turn(server, calls, answer="done", contains=()):
    server.scenario(
        exchange(tool_sse(calls)),
        text_exchange([answer], contains=[c[0] for c in calls] + list(contains)),
    )


def _results_sent(server):
    """The tool results of the second request, by call id."""
    body = server.requests()[1]["body"]
    return {m["tool_call_id"]: m["content"] for m in body["messages"] if m["role"] == "tool"}


def test_sync_turn_with_sync_and_async_tools(server):
    calls_seen = []

    @panto.tool
    def add(a: int, b: int) -> int:
        """Adds."""
        calls_seen.append(("add", threading.current_thread().name))
        return a + b

    @panto.tool
    async def greet(name: str) -> dict:
        """Greets."""
        await asyncio.sleep(0)
        calls_seen.append(("greet", threading.current_thread().name))
        return {"greeting": f"hello {name}"}

    _tool_turn(server, [("c1", "add", {"a": 2, "b": 3}), ("c2", "greet", {"name": "Ada"})])
    agent = make_agent(server, tools=[add, greet])
    consumer = threading.current_thread().name
    events = list(agent.stream("go"))
    results = {e.call_id: (e.output, e.is_error) for e in events if isinstance(e, panto.ToolResult)}
    assert results == {"c1": ("5", False), "c2": ('{"greeting": "hello Ada"}', False)}
    starts = [e for e in events if isinstance(e, panto.ToolCallStart)]
    assert all(s.host for s in starts)
    assert events[-1].text == "done"
    assert _results_sent(server) == {"c1": "5", "c2": '{"greeting": "hello Ada"}'}
    # Sync tools run off the consuming thread; async ones on panto's private loop.
    threads = dict(calls_seen)
    assert threads["add"].startswith("panto-tool") and threads["add"] != consumer
    assert threads["greet"] == "panto-tool-loop"


async def test_async_turn_with_sync_and_async_tools(server):
    loop_thread = threading.current_thread().name
    where = {}

    @panto.tool
    def upper(text: str) -> str:
        """Upper-cases."""
        where["upper"] = threading.current_thread().name
        return text.upper()

    @panto.tool
    async def slow_echo(text: str, delay: float = 0.01) -> str:
        """Echoes, later."""
        await asyncio.sleep(delay)
        where["slow_echo"] = threading.current_thread().name
        return text

    _tool_turn(server, [("c1", "upper", {"text": "abc"}), ("c2", "slow_echo", {"text": "xyz"})])
    agent = make_agent(server, tools=[upper, slow_echo])
    events = [ev async for ev in agent.astream("go")]
    results = {e.call_id: e.output for e in events if isinstance(e, panto.ToolResult)}
    assert results == {"c1": "ABC", "c2": "xyz"}
    assert events[-1].text == "done"
    # The async tool ran on the loop that iterates the stream, the sync one off it.
    assert where["slow_echo"] == loop_thread
    assert where["upper"].startswith("panto-tool")


async def test_arun_runs_tools(server):
    @panto.tool
    async def double(n: int) -> int:
        """Doubles."""
        return 2 * n

    _tool_turn(server, [("c1", "double", {"n": 21})], answer="42")
    result = await make_agent(server, tools=[double]).arun("go")
    assert result.text == "42" and result.messages == 2
    assert _results_sent(server) == {"c1": "42"}


def test_tool_exception_becomes_an_error_result_the_model_reads(server):
    @panto.tool
    def broken(x: int) -> str:
        """Fails."""
        raise ValueError(f"cannot handle {x}")

    @panto.tool
    async def broken_async() -> str:
        """Fails too."""
        raise RuntimeError("async failure")

    _tool_turn(server, [("c1", "broken", {"x": 7}), ("c2", "broken_async", {}), ("c3", "broken", {"nope": 1})])
    events = list(make_agent(server, tools=[broken, broken_async]).stream("go"))
    results = {e.call_id: e for e in events if isinstance(e, panto.ToolResult)}
    assert results["c1"].is_error and results["c1"].output == "ValueError: cannot handle 7"
    assert results["c2"].is_error and results["c2"].output == "RuntimeError: async failure"
    assert results["c3"].is_error and results["c3"].output == (
        "ArgumentError: invalid arguments: nope: not a parameter of this tool (its parameters: x); x: missing (required)"
    )
    assert events[-1].type == "message_complete"
    sent = _results_sent(server)
    assert "cannot handle 7" in sent["c1"] and "async failure" in sent["c2"]


def test_sync_tools_run_concurrently(server):
    """Both calls are running at once (each waits for the other to start), as the
    core's tool_concurrency allows."""
    barrier = threading.Barrier(2, timeout=20)

    @panto.tool
    def meet(who: str) -> str:
        """Waits for the other call."""
        barrier.wait()
        return who

    _tool_turn(server, [("c1", "meet", {"who": "a"}), ("c2", "meet", {"who": "b"})])
    events = list(make_agent(server, tools=[meet], tool_concurrency=2).stream("go"))
    assert sorted(e.output for e in events if isinstance(e, panto.ToolResult)) == ["a", "b"]


def test_plain_functions_are_made_tools_and_results_rendered(server):
    def stats(values: list[float]) -> dict:
        """Summary statistics."""
        return {"n": len(values), "sum": sum(values), "point": Point(1, 2)}

    _tool_turn(server, [("c1", "stats", {"values": [1, 2.5]})])
    agent = make_agent(server, tools=[stats])
    assert agent.tools["stats"].parameters["properties"]["values"] == {"type": "array", "items": {"type": "number"}}
    events = list(agent.stream("go"))
    out = next(e.output for e in events if isinstance(e, panto.ToolResult))
    assert json.loads(out) == {"n": 2, "sum": 3.5, "point": {"x": 1, "y": 2, "label": "origin"}}
    declared = server.requests()[0]["body"]["tools"]
    assert declared == [{"type": "function", "function": {"name": "stats", "description": "Summary statistics.", "parameters": agent.tools["stats"].parameters}}]


def test_a_cancelled_stream_cancels_its_async_tools(server):
    started = threading.Event()
    cancelled = threading.Event()

    @panto.tool
    async def forever() -> str:
        """Never ends."""
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return ""

    _tool_turn(server, [("c1", "forever", {})])
    s = make_agent(server, tools=[forever]).stream("go")
    for ev in s:
        if isinstance(ev, panto.ToolCallStart):
            break
    assert started.wait(20)
    s.close()
    assert cancelled.wait(20)
    with pytest.raises(panto.StreamCancelledError):
        next(s)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_async_tool_is_cancelled_at_its_timeout(server, mode):
    """The library gives up on a call after tool_timeout_ms and tells the model; the
    coroutine is cancelled then, not left running until the stream ends."""
    cancelled = threading.Event()

    @panto.tool
    async def forever() -> str:
        """Never ends."""
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return ""

    _tool_turn(server, [("c1", "forever", {})])
    agent = make_agent(server, tools=[forever], tool_timeout_ms=100)

    def check(ev):
        if isinstance(ev, panto.ToolResult):
            assert ev.is_error and "timed out" in ev.output
            # The stream goes on only once this returns: the coroutine must already
            # have been cancelled by its timeout.
            assert cancelled.wait(20), "the async tool outlived its timeout"

    if mode == "sync":
        with agent.stream("go") as s:
            for ev in s:
                check(ev)
    else:

        async def run():
            async with agent.astream("go") as s:
                async for ev in s:
                    # The loop's own thread must not block: wait off it.
                    if isinstance(ev, panto.ToolResult):
                        await asyncio.get_running_loop().run_in_executor(None, check, ev)

        asyncio.run(run())
    assert cancelled.is_set()


def test_lone_surrogates_in_tool_outputs_errors_and_async_returns_become_u_fffd(server):
    """A lone surrogate cannot be encoded as UTF-8. In a tool's output, its exception
    message or an async tool's return it used to raise in the pool thread (or the
    task), the result was lost and the turn waited for the tool timeout; now each one
    reaches the model with U+FFFD in its place, and a surrogate pair is joined."""

    @panto.tool
    def sync_out() -> str:
        """Returns a lone surrogate."""
        return "a\ud800b"

    @panto.tool
    def sync_raise() -> str:
        """Raises with one."""
        raise ValueError("bad \udcff byte")

    @panto.tool
    async def async_out() -> str:
        """Returns one, asynchronously."""
        return "pair \ud83d\ude00 lone \udfff"

    calls = [("c1", "sync_out", {}), ("c2", "sync_raise", {}), ("c3", "async_out", {})]
    for consume in ("sync", "async"):
        _tool_turn(server, calls)
        # A short tool timeout: without the fix the calls time out instead of answering.
        agent = make_agent(server, tools=[sync_out, sync_raise, async_out], tool_timeout_ms=10_000)
        if consume == "sync":
            events = list(agent.stream("go"))
        else:
            async def collect():
                return [ev async for ev in agent.astream("go")]

            events = asyncio.run(collect())
        results = {e.call_id: (e.output, e.is_error) for e in events if isinstance(e, panto.ToolResult)}
        assert results == {
            "c1": ("a\ufffdb", False),
            "c2": ("ValueError: bad \ufffd byte", True),
            "c3": ("pair \U0001f600 lone \ufffd", False),
        }, consume
        assert _results_sent(server) == {"c1": "a\ufffdb", "c2": "ValueError: bad \ufffd byte", "c3": "pair \U0001f600 lone \ufffd"}


def test_an_exception_in_a_tool_job_is_never_lost(server):
    """Whatever escapes the handing over of a result is reported and answered with an
    error result, never left in a pool thread's future while the turn waits."""

    class Unprintable(Exception):
        def __str__(self):
            raise RuntimeError("no __str__ today")

    @panto.tool
    def weird() -> str:
        """Raises an exception that cannot be printed."""
        raise Unprintable()

    @panto.tool
    def exits() -> str:
        """Calls sys.exit in the pool thread."""
        raise SystemExit(3)

    _tool_turn(server, [("c1", "weird", {}), ("c2", "exits", {})])
    events = list(make_agent(server, tools=[weird, exits], tool_timeout_ms=10_000).stream("go"))
    results = {e.call_id: (e.output, e.is_error) for e in events if isinstance(e, panto.ToolResult)}
    assert results == {"c1": ("Unprintable: (its message could not be rendered)", True), "c2": ("SystemExit: 3", True)}



def test_tools_stuck_past_their_timeout_do_not_starve_the_pool(server, monkeypatch, caplog):
    """Sync tools that never return hold their threads for good. Once their turn stopped
    waiting for them (tool_timeout_ms), they no longer count against the pool's limit:
    another agent's tool still runs at once, the stuck threads are logged, and
    diagnostics() counts them. (With the limit reached by stuck threads, every later sync
    tool of the process used to queue until its own timeout.)"""
    import panto._pool
    import panto._tools

    pool = panto._pool.Pool("panto-tool", max_threads=2)
    monkeypatch.setattr(panto._tools, "TOOL_POOL", pool)
    monkeypatch.setattr(panto, "TOOL_POOL", pool)
    release = threading.Event()
    hanging = threading.Semaphore(0)

    @panto.tool
    def hang(n: int) -> str:
        """Blocks until the test ends."""
        hanging.release()
        release.wait(120)
        return "late"

    @panto.tool
    def quick() -> str:
        """Answers at once."""
        return "quick"

    try:
        # Two calls fill the pool's limit and time out; the turn goes on without them.
        _tool_turn(server, [("c1", "hang", {"n": 1}), ("c2", "hang", {"n": 2})])
        events = list(make_agent(server, tools=[hang], tool_timeout_ms=300, tool_concurrency=2).stream("go"))
        assert [e.is_error for e in events if isinstance(e, panto.ToolResult)] == [True, True]
        assert hanging.acquire(timeout=20) and hanging.acquire(timeout=20)
        assert pool.threads == 2

        # Another agent's tool runs, well within its own timeout.
        _tool_turn(server, [("c3", "quick", {})])
        events = list(make_agent(server, tools=[quick], tool_timeout_ms=20_000).stream("go"))
        assert [(e.output, e.is_error) for e in events if isinstance(e, panto.ToolResult)] == [("quick", False)]

        # The quick tool's thread counts as busy until just after its result was taken.
        wait_until(lambda: pool.busy == 2, what="the quick tool's job to end")
        d = panto.diagnostics()
        assert d["tool_threads_stuck"] == 2 and d["tools_in_flight"] == 2 and d["tools_queued"] == 0
        stuck_logs = [r for r in caplog.records if r.name == "panto" and "still running after its deadline" in r.getMessage()]
        assert len(stuck_logs) == 2 and all(r.levelname == "WARNING" for r in stuck_logs)
        assert {"tool 'hang' (call c1)", "tool 'hang' (call c2)"} == {
            m for r in stuck_logs for m in ("tool 'hang' (call c1)", "tool 'hang' (call c2)") if m in r.getMessage()
        }
    finally:
        release.set()
    wait_until(lambda: pool.stuck == 0 and pool.busy == 0, what="the stuck tools to end")


def test_a_queued_tool_job_past_its_deadline_is_dropped():
    """A job that waited in the queue past its deadline is not run (its turn answered the
    call with a timeout already): its future is cancelled."""
    import panto._pool

    pool = panto._pool.Pool("panto-test", max_threads=1, hard_max_threads=1)
    started, release = threading.Event(), threading.Event()

    def block() -> bool:
        started.set()
        return release.wait(60)

    blocker = pool.submit(block)
    assert started.wait(20)
    late = pool.submit_job(time.monotonic() + 0.05, "late job", lambda: "ran")
    assert pool.queued == 1 and not late.done()
    time.sleep(0.1)  # past the queued job's deadline (the blocker holds the only thread)
    release.set()
    assert blocker.result(20) is True
    wait_until(late.done, what="the late job to be dropped")
    assert late.cancelled()


def test_the_pool_starts_one_thread_per_job_beyond_its_idle_ones():
    import panto._pool

    pool = panto._pool.Pool("panto-test", max_threads=50)
    started, release = threading.Semaphore(0), threading.Event()

    def job() -> bool:
        started.release()
        return release.wait(60)

    futures = [pool.submit(job) for _ in range(3)]
    for _ in range(3):
        assert started.acquire(timeout=20)
    assert pool.threads == 3 and pool.busy == 3
    release.set()
    assert all(f.result(20) for f in futures)
    wait_until(lambda: pool.busy == 0, what="the jobs to end")
    # The three idle threads take the next three jobs: no thread is added.
    assert all(f.result(20) for f in [pool.submit(job) for _ in range(3)])
    assert pool.threads == 3
