"""The Python rows of ``scripts/bench.sh``: panto's Python package (sync and async) and the
Python clients its users would otherwise pick, consuming the same responses from the same
``panto-testserver`` as the other clients, with the command line and output of
``tests/peers-bench``:

    python client.py turns VARIANT BASE_URL TURNS
    python client.py concurrency VARIANT BASE_URL STREAMS PACE_MS [RAMP_MS]

Variants: ``panto-sync`` (``for ev in agent.stream(...)``), ``panto-async`` (``async for``
over ``agent.astream(...)``), ``openai-python`` (``client.chat.completions.create(
stream=True)``), ``httpx-json`` (raw ``httpx`` streaming, ``iter_lines``, ``json.loads`` per
chunk). One JSON line per turn: wall, CPU (``time.process_time()``: every thread of the
process, panto's worker included), time to first event, the chunks carrying text or
tool-argument fragments, peak RSS. Turn 0 is cold: the client or agent is created inside
it (imports are done before). Every variant touches each fragment.

The concurrency mode runs STREAMS turns at once on one event loop, one task each, and
reports the gaps between consecutive content events minus the server's pacing:
``panto-async`` (one agent, so one connection, per task; ``async for`` over
``agent.astream``) or ``openai-python-async`` (one ``AsyncOpenAI`` shared by every task, as
its users would, over its ``DefaultAsyncHttpxClient`` with limits that allow STREAMS
connections (``httpx2.Limits``: openai-python 3 sends through httpx2, a fork of httpx):
openai-python's default pool stops at 1,000 and would queue the rest; and a 600 s connect
timeout instead of its 5 s). With RAMP_MS, task
``i`` starts ``i × RAMP_MS / STREAMS`` after the first (as in ``tests/peers-bench``).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any, Callable, List, Optional, Tuple

BODY = {"model": "gpt-4o", "messages": [{"role": "user", "content": "bench"}], "stream": True}


def peak_rss_kib() -> int:
    # VmHWM, not ru_maxrss: Linux carries ru_maxrss over fork + exec from the parent.
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


class Seen:
    def __init__(self) -> None:
        self.items = 0
        self.first: Optional[float] = None

    def event(self) -> None:
        if self.first is None:
            self.first = time.perf_counter()


def panto_agent(base_url: str) -> Any:
    import panto

    # max_steps=1: the tool workload's call names no tool of this agent; it gets an error
    # result and the turn ends after this one response, as the peers' does.
    return panto.Agent(provider="openai", model="gpt-4o", base_url=base_url, api_key="sk-bench", max_steps=1)


def nothing() -> None:
    pass


def make_turn(variant: str, base_url: str) -> Tuple[Callable[[Seen], None], Callable[[], None]]:
    """Creates the client (inside the cold turn); returns one turn of it and the untimed
    preparation of the next turn."""
    if variant in ("panto-sync", "panto-async"):
        import panto

        content_delta = panto.ContentDelta
        agent = panto_agent(base_url)

        def sync_turn(seen: Seen) -> None:
            with agent.stream("bench") as stream:
                for ev in stream:
                    seen.event()
                    if type(ev) is content_delta:
                        ev.text
                        seen.items += 1

        # Between turns: the history would otherwise grow by a whole response per turn and
        # be sent back each time; the peers send none.
        if variant == "panto-sync":
            return sync_turn, agent.clear_history
        loop = asyncio.new_event_loop()

        async def consume(seen: Seen) -> None:
            async with agent.astream("bench") as stream:
                async for ev in stream:
                    seen.event()
                    if type(ev) is content_delta:
                        ev.text
                        seen.items += 1

        def async_turn(seen: Seen) -> None:
            loop.run_until_complete(consume(seen))

        return async_turn, agent.clear_history
    if variant == "openai-python":
        import openai

        client = openai.OpenAI(base_url=base_url, api_key="sk-bench", max_retries=0)

        def openai_turn(seen: Seen) -> None:
            for chunk in client.chat.completions.create(model="gpt-4o", messages=BODY["messages"], stream=True):
                seen.event()
                if not chunk.choices:
                    continue
                delta = chunk.choices[0].delta
                text = delta.content
                if delta.tool_calls:
                    text = delta.tool_calls[0].function.arguments
                if text:
                    seen.items += 1

        return openai_turn, nothing
    if variant == "httpx-json":
        import httpx

        http = httpx.Client(timeout=600)

        def httpx_turn(seen: Seen) -> None:
            with http.stream("POST", base_url + "/chat/completions", json=BODY,
                             headers={"authorization": "Bearer sk-bench"}) as r:
                for line in r.iter_lines():
                    seen.event()
                    if not line.startswith("data: "):
                        continue
                    data = line[6:]
                    if data == "[DONE]":
                        continue
                    choices = json.loads(data)["choices"]
                    if not choices:
                        continue
                    delta = choices[0]["delta"]
                    text = delta.get("content")
                    if "tool_calls" in delta:
                        text = delta["tool_calls"][0]["function"].get("arguments")
                    if text:
                        seen.items += 1

        return httpx_turn, nothing
    raise SystemExit(f"unknown variant {variant!r}")


def run_turns(variant: str, base_url: str, turns: int) -> None:
    # Imports are not part of the cold turn: every variant pays its own at startup.
    if variant.startswith("panto"):
        import panto  # noqa: F401
    elif variant == "openai-python":
        import openai  # noqa: F401
    else:
        import httpx  # noqa: F401
    client: Optional[Tuple[Callable[[Seen], None], Callable[[], None]]] = None
    for turn in range(turns):
        if client is not None:
            client[1]()
        seen = Seen()
        cpu0, t0 = time.process_time(), time.perf_counter()
        if client is None:
            client = make_turn(variant, base_url)
        client[0](seen)
        wall, used = time.perf_counter() - t0, time.process_time() - cpu0
        assert seen.first is not None, "no event"
        print(json.dumps({"turn": turn, "wall_us": wall * 1e6, "cpu_us": used * 1e6,
                          "ttfe_us": (seen.first - t0) * 1e6, "items": seen.items,
                          "peak_rss_kib": peak_rss_kib()}), flush=True)


def run_concurrency(variant: str, base_url: str, streams: int, pace_ms: int, ramp_ms: int = 0) -> None:
    pace = pace_ms / 1e3
    gaps: List[int] = []
    items = 0
    t_start = 0.0

    async def ramp_wait(i: int) -> None:
        if ramp_ms:
            await asyncio.sleep(max(0.0, t_start + ramp_ms / 1e3 * i / streams - time.monotonic()))

    def arrived(last: Optional[float]) -> float:
        nonlocal items
        items += 1
        now = time.perf_counter()
        if last is not None:
            gaps.append(max(0, int((now - last - pace) * 1e6)))
        return now

    if variant == "panto-async":
        import panto

        content_delta = panto.ContentDelta

        async def one_panto(i: int, agent: Any, start: asyncio.Event) -> None:
            await start.wait()
            await ramp_wait(i)
            last: Optional[float] = None
            async with agent.astream("bench") as stream:
                async for ev in stream:
                    if type(ev) is content_delta:
                        ev.text
                        last = arrived(last)

        async def main() -> None:
            start = asyncio.Event()
            agents = [panto_agent(base_url) for _ in range(streams)]
            tasks = [asyncio.create_task(one_panto(i, a, start)) for i, a in enumerate(agents)]
            await asyncio.sleep(0)
            nonlocal t_start
            t_start = time.monotonic()
            start.set()
            await asyncio.gather(*tasks)
    elif variant == "openai-python-async":
        import openai

        try:  # openai-python 3 sends through httpx2, a fork; its limits and timeouts are httpx2's
            import httpx2 as hx
        except ImportError:
            import httpx as hx

        async def one_openai(i: int, client: Any, start: asyncio.Event) -> None:
            await start.wait()
            await ramp_wait(i)
            last: Optional[float] = None
            stream = await client.chat.completions.create(model="gpt-4o", messages=BODY["messages"], stream=True)
            async with stream:
                async for chunk in stream:
                    if chunk.choices and chunk.choices[0].delta.content:
                        chunk.choices[0].delta.content
                        last = arrived(last)

        async def main() -> None:
            start = asyncio.Event()
            limits = hx.Limits(max_connections=streams, max_keepalive_connections=streams)
            http = openai.DefaultAsyncHttpxClient(limits=limits)
            # openai-python's connect timeout (5 s) is shorter than a connect can take when
            # thousands start at once on a loaded machine: its one event loop, busy with the
            # streams already open (≈ 0.6 ms of CPU per chunk), gets to a new connection only
            # after minutes. Runs failed on 5 s and on 60 s; this measures the CPU instead.
            async with openai.AsyncOpenAI(base_url=base_url, api_key="sk-bench", max_retries=0,
                                          timeout=hx.Timeout(600, connect=600), http_client=http) as client:
                tasks = [asyncio.create_task(one_openai(i, client, start)) for i in range(streams)]
                await asyncio.sleep(0)
                nonlocal t_start
                t_start = time.monotonic()
                start.set()
                await asyncio.gather(*tasks)
    else:
        raise SystemExit(f"unknown concurrency variant {variant!r}")

    cpu0, t0 = time.process_time(), time.perf_counter()
    asyncio.run(main())
    wall, used = time.perf_counter() - t0, time.process_time() - cpu0
    gaps.sort()

    def pct(p: int) -> int:
        return gaps[min(len(gaps) * p // 100, len(gaps) - 1)] if gaps else 0

    print(json.dumps({"streams": streams, "items": items, "wall_us": wall * 1e6, "cpu_us": used * 1e6,
                      "added_p50_us": pct(50), "added_p99_us": pct(99), "peak_rss_kib": peak_rss_kib()}))


def main() -> None:
    a = sys.argv
    if len(a) == 5 and a[1] == "turns":
        run_turns(a[2], a[3], int(a[4]))
    elif len(a) in (6, 7) and a[1] == "concurrency":
        run_concurrency(a[2], a[3], int(a[4]), int(a[5]), int(a[6]) if len(a) == 7 else 0)
    else:
        raise SystemExit("usage: client.py turns VARIANT BASE_URL TURNS\n"
                         "       client.py concurrency panto-async|openai-python-async BASE_URL STREAMS PACE_MS [RAMP_MS]")


if __name__ == "__main__":
    main()
