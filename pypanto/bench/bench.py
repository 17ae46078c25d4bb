"""CPU per chunk and warm time to first event of panto's Python package, against peers
measured in the same run on the same response from the same local server.

Variants (one 100,000-chunk OpenAI Chat Completions response each run):

- ``openai-python``: ``client.chat.completions.create(stream=True)``, iterating chunks;
- ``httpx+json``: raw ``httpx`` streaming, ``iter_lines`` and ``json.loads`` per chunk;
- ``panto sync``: ``for ev in agent.stream(...)``;
- ``panto async``: ``async for ev in agent.astream(...)``;
- ``panto Rust pull``: panto-pull's ``Stream::next`` in Rust (``pull_cpu``, a separate
  process; the figure the Python package is measured against).

CPU is the client process's (``time.process_time()``: every thread, panto's worker
included; the server is another process). Every variant touches each chunk's text.
Variants run round-robin, so load changes on a shared machine hit all alike; the median
of the rounds is reported. Not a test: figures are printed, never asserted.

    python bench.py --server PATH/panto-testserver --pull PATH/pull_cpu [--rounds 3]

Output lines ``[summary] name: figure``, ``[ratio] …`` and ``[target] …`` are what
``scripts/bench.sh`` collects.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
import urllib.request
from typing import Callable, Dict, List

CHUNKS = 100_000
MODEL = "gpt-4o"
CONTENT = {"id": "chatcmpl-B1x2", "object": "chat.completion.chunk", "created": 1735689600, "model": MODEL,
           "choices": [{"index": 0, "delta": {"content": " token"}, "finish_reason": None}]}
FINISH = {"id": "chatcmpl-B1x2", "object": "chat.completion.chunk", "created": 1735689600, "model": MODEL,
          "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
USAGE = {"id": "chatcmpl-B1x2", "object": "chat.completion.chunk", "created": 1735689600, "model": MODEL,
         "choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": CHUNKS, "total_tokens": CHUNKS + 12}}
TIMES = 1_000_000


class Server:
    def __init__(self, binary: str, scenario: dict) -> None:
        self.proc = subprocess.Popen([binary, "--port", "0", "--exit-on-stdin-eof"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline().strip()
        assert line.startswith("listening on "), line
        self.url = line[len("listening on "):]
        self.base_url = self.url + "/v1"
        req = urllib.request.Request(self.url + "/_panto/scenario", data=json.dumps(scenario).encode(), method="POST")
        urllib.request.urlopen(req, timeout=30).read()

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(10)
        self.proc.stdout.close()


def big_scenario() -> dict:
    return {"exchanges": [{"times": TIMES, "response": {
        "repeat": {"count": CHUNKS, "chunk": {"data": CONTENT}},
        "sse": [{"data": FINISH}, {"data": USAGE}, {"data": "[DONE]"}]}}]}


def small_scenario() -> dict:
    def c(delta, finish=None):
        return {"data": {**FINISH, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}}
    sse = [c({"role": "assistant", "content": ""}), c({"content": "Hello"}), c({"content": ", world."}),
           c({}, "stop"), {"data": USAGE}, {"data": "[DONE]"}]
    return {"exchanges": [{"times": TIMES, "response": {"sse": sse}}]}


BODY = {"model": MODEL, "messages": [{"role": "user", "content": "bench"}], "stream": True}


def make_clients(base_url: str):
    import httpx
    import openai

    import panto

    oa = openai.OpenAI(base_url=base_url, api_key="sk-bench", max_retries=0)
    hx = httpx.Client(timeout=600)
    agent = panto.Agent(provider="openai", model=MODEL, base_url=base_url, api_key="sk-bench")
    ContentDelta = panto.ContentDelta

    def run_openai() -> int:
        n = 0
        for chunk in oa.chat.completions.create(model=MODEL, messages=BODY["messages"], stream=True):
            if chunk.choices:
                text = chunk.choices[0].delta.content
                if text:
                    n += 1
        return n

    def run_httpx() -> int:
        n = 0
        with hx.stream("POST", base_url + "/chat/completions", json=BODY,
                       headers={"authorization": "Bearer sk-bench"}) as r:
            for line in r.iter_lines():
                if not line.startswith("data: "):
                    continue
                data = line[6:]
                if data == "[DONE]":
                    break
                choices = json.loads(data)["choices"]
                if choices and choices[0]["delta"].get("content"):
                    n += 1
        return n

    def run_panto_sync() -> int:
        agent.clear_history()
        n = 0
        with agent.stream("bench") as s:
            for ev in s:
                if type(ev) is ContentDelta:
                    ev.text
                    n += 1
        return n

    async def consume_async() -> int:
        agent.clear_history()
        n = 0
        async with agent.astream("bench") as s:
            async for ev in s:
                if type(ev) is ContentDelta:
                    ev.text
                    n += 1
        return n

    loop = asyncio.new_event_loop()

    def run_panto_async() -> int:
        return loop.run_until_complete(consume_async())

    return {
        "openai-python": run_openai,
        "httpx+json": run_httpx,
        "panto sync": run_panto_sync,
        "panto async": run_panto_async,
    }, (oa, hx, agent, loop)


def cpu_per_chunk(fn: Callable[[], int]) -> float:
    start = time.process_time()
    n = fn()
    used = time.process_time() - start
    assert n == CHUNKS, (n, fn)
    return used * 1e6 / n


def pull_runs(pull: str, mode: str, base_url: str, n: int) -> List[float]:
    out = subprocess.run([pull, mode, base_url, str(n)], capture_output=True, text=True, check=True, timeout=600)
    return [float(x) for x in out.stdout.split()]


def ttfe_python(base_url: str, samples: int) -> Dict[str, float]:
    """Warm time to first event (ms, wall): a client that already made a request."""
    import httpx
    import openai

    import panto

    oa = openai.OpenAI(base_url=base_url, api_key="sk-bench", max_retries=0)
    hx = httpx.Client(timeout=60)
    agent = panto.Agent(provider="openai", model=MODEL, base_url=base_url, api_key="sk-bench")

    def panto_sync() -> float:
        agent.clear_history()
        t = time.perf_counter()
        s = agent.stream("bench")
        next(s)
        dt = time.perf_counter() - t
        s.final()
        return dt

    async def panto_async_once() -> float:
        agent.clear_history()
        t = time.perf_counter()
        s = agent.astream("bench")
        await s.__anext__()
        dt = time.perf_counter() - t
        await s.final()
        await s.aclose()
        return dt

    loop = asyncio.new_event_loop()

    def panto_async() -> float:
        return loop.run_until_complete(panto_async_once())

    def openai_python() -> float:
        t = time.perf_counter()
        stream = oa.chat.completions.create(model=MODEL, messages=BODY["messages"], stream=True)
        it = iter(stream)
        next(it)
        dt = time.perf_counter() - t
        for _ in it:
            pass
        return dt

    def httpx_json() -> float:
        t = time.perf_counter()
        with hx.stream("POST", base_url + "/chat/completions", json=BODY,
                       headers={"authorization": "Bearer sk-bench"}) as r:
            lines = r.iter_lines()
            for line in lines:
                if line.startswith("data: "):
                    json.loads(line[6:])
                    break
            dt = time.perf_counter() - t
            for _ in lines:
                pass
        return dt

    variants = {"panto sync": panto_sync, "panto async": panto_async,
                "openai-python": openai_python, "httpx+json": httpx_json}
    for fn in variants.values():  # warm: connections, worker threads, imports
        fn(), fn()
    results: Dict[str, List[float]] = {k: [] for k in variants}
    # Blocks of consecutive samples per variant (as the Rust side takes its own), the
    # blocks round-robin so load changes hit every variant alike.
    block = 20
    for _ in range(max(1, samples // block)):
        for name, fn in variants.items():
            for _ in range(block):
                results[name].append(fn() * 1e3)
    loop.close()
    hx.close()
    return {k: statistics.median(v) for k, v in results.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--pull", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ttfe-samples", type=int, default=200)
    args = ap.parse_args()

    import openai

    import panto

    print(f"python {sys.version.split()[0]}, panto {panto.__version__}, openai {openai.__version__}", file=sys.stderr)
    big = Server(args.server, big_scenario())
    small = Server(args.server, small_scenario())
    try:
        clients, keep = make_clients(big.base_url)
        for name, fn in clients.items():  # warm-up run of each
            print(f"warm-up {name} ...", file=sys.stderr, flush=True)
            cpu_per_chunk(fn)
        figures: Dict[str, List[float]] = {name: [] for name in clients}
        figures["panto Rust pull"] = []
        for r in range(args.rounds):
            for name, fn in clients.items():
                figures[name].append(cpu_per_chunk(fn))
                print(f"round {r + 1} {name}: {figures[name][-1]:.2f} µs/chunk", file=sys.stderr, flush=True)
            figures["panto Rust pull"].extend(pull_runs(args.pull, "stream", big.base_url, 1))
            print(f"round {r + 1} panto Rust pull: {figures['panto Rust pull'][-1]:.2f} µs/chunk", file=sys.stderr, flush=True)
        cpu = {k: statistics.median(v) for k, v in figures.items()}

        ttfe = ttfe_python(small.base_url, args.ttfe_samples)
        ttfe["panto Rust pull"] = statistics.median(pull_runs(args.pull, "ttfe", small.base_url, args.ttfe_samples))
    finally:
        big.close()
        small.close()

    for name in ("panto Rust pull", "panto sync", "panto async", "httpx+json", "openai-python"):
        print(f"[summary] python: CPU per chunk, {name}: {cpu[name]:.2f} µs")
    for name in ("panto Rust pull", "panto sync", "panto async", "httpx+json", "openai-python"):
        print(f"[summary] python: warm time to first event, {name}: {ttfe[name]:.3f} ms")
    sync, asy, rust, oa, hx = (cpu[k] for k in ("panto sync", "panto async", "panto Rust pull", "openai-python", "httpx+json"))
    print(f"[ratio] python: panto sync / panto Rust pull = {sync / rust:.2f}x (target <= 1.5x)")
    print(f"[ratio] python: openai-python / panto sync = {oa / sync:.1f}x (target >= 30x)")
    print(f"[ratio] python: httpx+json / panto sync = {hx / sync:.1f}x")
    print(f"[ratio] python: panto async / panto sync = {asy / sync:.2f}x (target <= 2x)")
    print(f"[ratio] python: warm TTFE openai-python / panto sync = {ttfe['openai-python'] / ttfe['panto sync']:.1f}x")
    verdict = lambda ok: "met" if ok else "MISSED"  # noqa: E731
    print(f"[target] python: panto sync <= 1.5x Rust pull: {verdict(sync <= 1.5 * rust)}")
    print(f"[target] python: panto sync >= 30x cheaper than openai-python: {verdict(oa >= 30 * sync)}")
    print(f"[target] python: panto async <= 2x panto sync: {verdict(asy <= 2 * sync)}")
    print(f"[target] python: warm time to first event <= 0.5 ms: {verdict(ttfe['panto sync'] <= 0.5)}")


if __name__ == "__main__":
    main()
