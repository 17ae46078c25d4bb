"""The driver of ``scripts/bench.sh``: runs every benchmark client against the same local
``panto-testserver`` processes, interleaved, and writes ``bench/RESULTS.md``.

Python standard library only. Each client is a program that takes

    PROG turns VARIANT BASE_URL TURNS                one JSON line per turn on stdout
    PROG concurrency VARIANT BASE_URL STREAMS PACE   one JSON line

(see ``tests/peers-bench/src/main.rs`` for the line format). Every measurement is a fresh
client process, so peak RSS is the process's own (``wait4``), its first turn is cold and
the server's CPU is never charged to it. Rounds are interleaved — every client once per
round — so that load changes on a shared machine hit every client alike, and ratios are
taken between medians of the same run.

    python3 bench/run.py --quick|--full --clients clients.json --testserver PATH --out FILE
    python3 bench/run.py --only-scale ...   only the 10,000-stream workload, merged into FILE
    python3 bench/run.py --charts-only [FILE]   only redraw the charts of FILE (bench/svg.py)

After writing the report it draws its charts (``bench/svg.py``: bench/charts/*.svg) and
embeds them in it.

The scale workload (``--scale-streams``, default 10,000 streams of 20 chunks paced 200 ms
apart) needs a descriptor per connection on both sides (panto's Go and Python streams
wait through one ready set per process or loop, not a descriptor each): this driver
raises ``RLIMIT_NOFILE`` before it starts the server and the clients, which inherit it.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import svg  # bench/svg.py: the report's charts, drawn after every report this writes

MODEL = "gpt-4o"
HEAD = {"id": "chatcmpl-B1x2", "object": "chat.completion.chunk", "created": 1735689600, "model": MODEL}


def chunk(delta: dict, finish: Optional[str] = None) -> dict:
    return {"data": {**HEAD, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}}


def text_response(n: int, pace_ms: int = 0) -> dict:
    body = {"status": 200, "flush_first_chunk": True, "repeat": {"count": n, "chunk": chunk({"content": " token"})},
            "sse": [chunk({}, "stop"), {"data": "[DONE]"}]}
    if pace_ms:
        body["chunk_delay_ms"] = pace_ms
    return body


def tool_response(pieces: int) -> dict:
    """One tool call whose arguments arrive in ``pieces`` chunks, every chunk one piece
    (the first also carries the call's id and name), together a valid JSON object."""
    def args(text: str, first: bool = False) -> dict:
        call = {"index": 0, "function": {"arguments": text}}
        if first:
            call = {"index": 0, "id": "call_bench", "type": "function",
                    "function": {"name": "lookup", "arguments": text}}
        return chunk({"tool_calls": [call]})
    middle = args("lorem ")
    sse = [args('{"text":"', first=True)] + [middle] * (pieces - 2) + [args('end"}')]
    return {"status": 200, "flush_first_chunk": True, "sse": sse + [chunk({}, "tool_calls"), {"data": "[DONE]"}]}


def scenario(response: dict) -> dict:
    return {"exchanges": [{"times": 1_000_000_000, "response": response}]}


@dataclass
class Workload:
    key: str
    title: str
    items: int
    turns: int  # per process; turn 0 is cold
    response: dict


@dataclass
class Row:
    key: str  # e.g. "rust/panto-pull"
    language: str
    label: str
    client: str  # key into the clients file
    variant: str
    peer: Optional[str] = None  # the row this one is compared with
    panto: bool = False


ROWS = [
    Row("rust/floor", "Rust", "floor: reqwest + line split, no JSON", "rust", "floor"),
    Row("rust/eventsource-serde", "Rust", "eventsource-stream + serde (typed)", "rust", "eventsource-serde"),
    Row("rust/async-openai", "Rust", "async-openai 0.43", "rust", "async-openai"),
    Row("rust/panto-push", "Rust", "panto push, current-thread runtime", "rust", "panto-push",
        peer="rust/async-openai", panto=True),
    Row("rust/panto-pull", "Rust", "panto pull, `Stream::next`", "rust", "panto-pull",
        peer="rust/async-openai", panto=True),
    # The turn's OpenTelemetry spans and metrics on (exported over OTLP/HTTP by panto-otel
    # to the server's receiver, flushed at the end of every turn, inside its timing),
    # against the same client with them off.
    Row("rust/panto-push-otel", "Rust", "panto push, spans and metrics exported (OTLP/HTTP), flushed each turn",
        "rust", "panto-push-otel", peer="rust/panto-push", panto=True),
    Row("c/panto", "C", "panto C, `panto_next_event`", "c", "panto-next-event",
        peer="rust/panto-pull", panto=True),
    Row("go/openai-go", "Go", "openai-go v3, `NewStreaming`", "go", "openai-go"),
    Row("go/panto-next", "Go", "panto Go, `Next`", "go", "panto-next", peer="go/openai-go", panto=True),
    Row("go/panto-iter", "Go", "panto Go, `Iter`", "go", "panto-iter", peer="go/openai-go", panto=True),
    Row("py/openai-python", "Python", "openai-python, `create(stream=True)`", "python", "openai-python"),
    Row("py/httpx-json", "Python", "raw httpx + `json.loads`", "python", "httpx-json"),
    Row("py/panto-sync", "Python", "panto Python sync, `for ev in stream`", "python", "panto-sync",
        peer="py/openai-python", panto=True),
    Row("py/panto-async", "Python", "panto Python async, `async for`", "python", "panto-async",
        peer="py/openai-python", panto=True),
]

CONCURRENCY = [
    ("rust/floor", "Rust", "floor: reqwest + line split, one runtime", "rust", "floor"),
    ("rust/panto-push", "Rust", "panto push, every turn on one current-thread runtime", "rust", "panto-push"),
    ("rust/panto-pull", "Rust", "panto pull, one thread per stream in `next()`", "rust", "panto-pull"),
    ("rust/panto-pull-async", "Rust", "panto pull, `next_async().await`, one current-thread runtime", "rust",
     "panto-pull-async"),
    ("go/panto-iter", "Go", "panto Go, one goroutine per stream, `Iter`", "go", "panto-iter"),
    ("py/panto-async", "Python", "panto Python, one asyncio task per stream", "python", "panto-async"),
]


# The scale workload: many slow streams from one process (a slow model, or a tool-heavy
# agent). Peers in the same run are the yardstick for the CPU targets.
SCALE = [
    ("rust/floor", "Rust", "floor: reqwest + line split, one runtime (no client work)", "rust", "floor"),
    ("rust/floor-crossing", "Rust", "crossing floor: the floor on the adapter's worker count of threads, each "
     "content line sent to one current-thread runtime through a `tokio::sync::mpsc` channel (no client work)",
     "rust", "floor-crossing"),
    ("rust/floor-batched", "Rust", "batched crossing floor: the crossing floor with pull's batching at scale (each "
     "worker hands its lines over once per millisecond, one wake per batch; a dispatcher task gives each line to "
     "its stream's task) (no client work)", "rust", "floor-batched"),
    ("rust/panto-push", "Rust", "panto push, every turn on one current-thread runtime", "rust", "panto-push"),
    ("rust/panto-pull-async", "Rust", "panto pull, `next_async().await`, one current-thread runtime", "rust",
     "panto-pull-async"),
    ("go/openai-go", "Go", "openai-go v3, one goroutine per stream, shared client", "go", "openai-go"),
    ("go/panto-iter", "Go", "panto Go, one goroutine per stream, `Iter`", "go", "panto-iter"),
    ("py/openai-python-async", "Python", "openai-python `AsyncOpenAI`, one task per stream, shared client",
     "python", "openai-python-async"),
    ("py/panto-async", "Python", "panto Python, one asyncio task per stream, `async for`", "python", "panto-async"),
]
SCALE_PEER = {"rust/floor-crossing": "rust/floor", "rust/floor-batched": "rust/floor", "rust/panto-pull-async": "rust/panto-push", "go/panto-iter": "go/openai-go",
              "py/panto-async": "py/openai-python-async"}
SCALE_PANTO = {"rust/panto-push", "rust/panto-pull-async", "go/panto-iter", "py/panto-async"}


def adapter_workers_rule() -> int:
    """The pull adapter's worker count by its rule (one per available core but one, 1 to
    64, unless ``PANTO_WORKER_THREADS`` says), for the Go and Python clients, which cannot
    ask; the Rust pull client reports the real one."""
    asked = os.environ.get("PANTO_WORKER_THREADS", "").strip()
    if asked.isdigit() and 1 <= int(asked) <= 64:
        return int(asked)
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 2
    return min(max(n - 1, 1), 64)


def fd_budget_note(streams: int, nofile: int) -> Optional[str]:
    """What does not fit in ``nofile`` descriptors at ``streams`` open streams: every
    process holds one per connection — the server, and the clients: panto Go and Python
    wait through one ready set (one descriptor) for all their streams — plus its own
    few."""
    short = [f"{who} needs ≈ {per * streams + 256:,}" for who, per in
             (("panto-testserver", 1), ("panto Go", 1), ("panto Python", 1)) if per * streams + 256 > nofile]
    if not short:
        return None
    return (f"the descriptor limit is {nofile:,} and cannot be raised here (no CAP_SYS_RESOURCE): at "
            f"{streams:,} streams " + ", ".join(short))


def raise_nofile(streams: int) -> int:
    """Raises this process's descriptor limit (the server and clients inherit it) to what
    ``streams`` connections need (one descriptor each, with room to spare), or as high as
    allowed."""
    want = 2 * streams + 1024
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, want))  # root only
            return want
        except (ValueError, OSError):
            pass
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


# ---------------------------------------------------------------------------------------
# Processes


class Server:
    """One panto-testserver process answering every request with one response."""

    def __init__(self, binary: str, response: dict, tmp: str, name: str) -> None:
        path = os.path.join(tmp, f"{name}.json")
        with open(path, "w") as f:
            json.dump(scenario(response), f)
        self.proc = subprocess.Popen([binary, "--scenario", path, "--port", "0", "--exit-on-stdin-eof"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = (self.proc.stdout.readline() if self.proc.stdout else "").strip()
        if not line.startswith("listening on "):
            raise RuntimeError(f"panto-testserver did not start: {line!r}")
        self.base_url = line[len("listening on "):] + "/v1"

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait(30)


@dataclass
class Outcome:
    lines: List[dict]
    maxrss_kib: int  # the peak the client reports (VmHWM); wait4's ru_maxrss includes ours
    peak_threads: int
    seconds: float
    peak_fds_watched: int = 0  # of the process run_client was asked to watch
    runq_wait_s: float = 0.0  # time its threads spent runnable but not running (last sample)


def status_field(pid: int, key: str) -> Optional[int]:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def runq_wait(pid: int) -> float:
    """Seconds the process's live threads have spent waiting on a run queue (runnable,
    not running: the machine's load), from ``/proc/PID/task/*/schedstat``."""
    total = 0
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                    total += int(f.read().split()[1])
            except (OSError, IndexError, ValueError):
                pass
    except OSError:
        pass
    return total / 1e9


def fd_count(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def run_client(argv: List[str], timeout: float, sample_threads: bool = False,
               watch_fds_of: Optional[int] = None) -> Outcome:
    """Runs one client process to the end; its JSON lines, ``wait4``'s peak RSS and the
    peak thread count seen in ``/proc`` (sampled every 20 ms when asked), and the peak
    descriptor count of another process (the server; every 250 ms) when asked."""
    start = time.monotonic()
    peak_fds, next_fds, runq = 0, start, 0.0
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        peak_threads = 0
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if sample_threads:
                peak_threads = max(peak_threads, status_field(proc.pid, "Threads") or 0)
            if watch_fds_of and time.monotonic() >= next_fds:
                peak_fds = max(peak_fds, fd_count(watch_fds_of))
                runq = max(runq, runq_wait(proc.pid))
                next_fds = time.monotonic() + 0.25
            if time.monotonic() - start > timeout:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                proc.returncode = -9
                raise RuntimeError(f"timed out after {timeout:.0f} s: {shlex.join(argv)}")
            time.sleep(0.02 if sample_threads else 0.005)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if proc.returncode != 0:
            raise RuntimeError(f"exit {proc.returncode}: {shlex.join(argv)}\n{err.read()[-3000:]}")
        lines = [json.loads(line) for line in out.read().splitlines() if line.startswith("{")]
    # Linux keeps ru_maxrss over fork + exec, so a child's is at least this driver's RSS:
    # the clients report their own high-water mark instead.
    peak = max((line.get("peak_rss_kib", 0) for line in lines), default=0)
    return Outcome(lines, peak, peak_threads, time.monotonic() - start, peak_fds, runq)


# ---------------------------------------------------------------------------------------
# Measurement


@dataclass
class Cell:
    """Every sample of one row on one workload."""
    cpu_per_item_us: List[float] = field(default_factory=list)  # warm turns
    wall_ms: List[float] = field(default_factory=list)  # warm turns
    ttfe_warm_ms: List[float] = field(default_factory=list)
    ttfe_cold_ms: List[float] = field(default_factory=list)
    maxrss_mib: List[float] = field(default_factory=list)
    error: Optional[str] = None

    def median(self, name: str) -> Optional[float]:
        values = getattr(self, name)
        return statistics.median(values) if values else None


def measure_turns(rows: List[Row], workloads: List[Workload], clients: Dict[str, List[str]],
                  servers: Dict[str, Server], rounds: int, log) -> Dict[Tuple[str, str], Cell]:
    cells: Dict[Tuple[str, str], Cell] = {(r.key, w.key): Cell() for r in rows for w in workloads}
    for rnd in range(rounds):
        for w in workloads:
            for row in rows:
                cell = cells[(row.key, w.key)]
                if cell.error:
                    continue
                argv = clients[row.client] + ["turns", row.variant, servers[w.key].base_url, str(w.turns)]
                try:
                    out = run_client(argv, timeout=900)
                    if len(out.lines) != w.turns:
                        raise RuntimeError(f"{len(out.lines)} turn lines for {w.turns} turns")
                    for line in out.lines:
                        if line["items"] != w.items:
                            raise RuntimeError(f"turn {line['turn']}: {line['items']} items, expected {w.items}")
                except RuntimeError as e:
                    cell.error = str(e).splitlines()[0]
                    log(f"  {row.key} {w.key}: FAILED: {e}")
                    continue
                for line in out.lines:
                    if line["turn"] == 0:
                        cell.ttfe_cold_ms.append(line["ttfe_us"] / 1e3)
                    else:
                        cell.cpu_per_item_us.append(line["cpu_us"] / w.items)
                        cell.wall_ms.append(line["wall_us"] / 1e3)
                        cell.ttfe_warm_ms.append(line["ttfe_us"] / 1e3)
                cell.maxrss_mib.append(out.maxrss_kib / 1024)
                warm = [x["cpu_us"] / w.items for x in out.lines[1:]]
                log(f"  round {rnd + 1}/{rounds} {w.key:9} {row.key:24} "
                    f"{statistics.median(warm) if warm else float('nan'):8.2f} µs/chunk  "
                    f"({out.seconds:.1f} s)")
    return cells


@dataclass
class ConcCell:
    cpu_s: List[float] = field(default_factory=list)
    cpu_per_event_us: List[float] = field(default_factory=list)
    p50_us: List[float] = field(default_factory=list)
    p99_us: List[float] = field(default_factory=list)
    maxrss_mib: List[float] = field(default_factory=list)
    threads: List[int] = field(default_factory=list)
    wall_s: List[float] = field(default_factory=list)
    extra: Dict[str, int] = field(default_factory=dict)  # gomaxprocs, adapter_workers
    listen_drops: List[int] = field(default_factory=list)  # SYNs the kernel dropped meanwhile
    peak_open: List[int] = field(default_factory=list)  # the server's peak open connections
    runq_s: List[float] = field(default_factory=list)  # the client's run-queue wait
    error: Optional[str] = None


def listen_drops() -> Optional[int]:
    """The kernel's count of SYNs dropped because a listen queue was full (every socket)."""
    try:
        with open("/proc/net/netstat") as f:
            rows = [line.split() for line in f if line.startswith("TcpExt:")]
        return int(dict(zip(rows[0][1:], rows[1][1:]))["ListenDrops"])
    except (OSError, IndexError, KeyError, ValueError):
        return None


def measure_concurrency(streams: List[int], chunks: int, pace_ms: int, clients: Dict[str, List[str]],
                        base_url: str, rounds: int, log, table=None,
                        only: Optional[set] = None, ramp_ms: int = 0,
                        server_pid: Optional[int] = None) -> Dict[Tuple[str, int], ConcCell]:
    table = CONCURRENCY if table is None else table
    table = [c for c in table if not only or c[0] in only]
    cells = {(c[0], s): ConcCell() for c in table for s in streams}
    for rnd in range(rounds):
        for s in streams:
            for key, _lang, _label, client, variant in table:
                cell = cells[(key, s)]
                if cell.error or client not in clients:
                    continue
                argv = clients[client] + ["concurrency", variant, base_url, str(s), str(pace_ms)]
                if ramp_ms:
                    argv.append(str(ramp_ms))
                drops0 = listen_drops()
                fds0 = fd_count(server_pid) if server_pid else 0
                try:
                    # openai-python's one event loop needs about 1.7 ms of CPU per event: at
                    # 10,000 streams of 20 events, over 5 minutes on a loaded machine.
                    out = run_client(argv, timeout=1200, sample_threads=True, watch_fds_of=server_pid)
                    line = out.lines[-1]
                    if line["items"] != s * chunks:
                        raise RuntimeError(f"{line['items']} items, expected {s * chunks}")
                except (RuntimeError, IndexError) as e:
                    # The last line of the client's stderr says why (its exception).
                    cell.error = ([x for x in str(e).splitlines() if x.strip()] or ["?"])[-1]
                    log(f"  concurrency {key} x{s}: FAILED: {e}")
                    continue
                cell.cpu_s.append(line["cpu_us"] / 1e6)
                cell.cpu_per_event_us.append(line["cpu_us"] / line["items"])
                cell.p50_us.append(line["added_p50_us"])
                cell.p99_us.append(line["added_p99_us"])
                cell.maxrss_mib.append(out.maxrss_kib / 1024)
                cell.threads.append(out.peak_threads)
                cell.wall_s.append(line["wall_us"] / 1e6)
                for extra in ("gomaxprocs", "adapter_workers"):
                    if extra in line:
                        cell.extra[extra] = line[extra]
                drops1 = listen_drops()
                if drops0 is not None and drops1 is not None:
                    cell.listen_drops.append(drops1 - drops0)
                if server_pid:
                    # The server holds one descriptor per connection (see fd_budget_note).
                    cell.peak_open.append(max(0, out.peak_fds_watched - fds0))
                    cell.runq_s.append(out.runq_wait_s)
                log(f"  round {rnd + 1}/{rounds} concurrency {key:18} x{s:<5} cpu {line['cpu_us'] / 1e6:6.2f} s, "
                    f"p99 added {line['added_p99_us'] / 1e3:7.2f} ms, rss {out.maxrss_kib / 1024:6.1f} MiB, "
                    f"threads {out.peak_threads}, wall {out.seconds:.1f} s, "
                    f"SYN drops {cell.listen_drops[-1] if cell.listen_drops else '?'}, "
                    f"peak open {cell.peak_open[-1] if cell.peak_open else '?'}, "
                    f"run-queue wait {cell.runq_s[-1] if cell.runq_s else 0:.1f} s")
    return cells


def server_rate(base_url: str, items: int, samples: int = 3) -> Optional[float]:
    """Wall µs per chunk of ``curl -o /dev/null`` reading the response (median)."""
    times = []
    for _ in range(samples):
        out = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{time_total}", "-X", "POST",
                              "-H", "content-type: application/json", "-d", "{}",
                              base_url + "/chat/completions"], capture_output=True, text=True, timeout=300)
        if out.returncode != 0:
            return None
        times.append(float(out.stdout) * 1e6 / items)
    return statistics.median(times)


# ---------------------------------------------------------------------------------------
# The report


def fmt(v: Optional[float], digits: int = 2) -> str:
    return "–" if v is None else f"{v:.{digits}f}"


def machine_facts(versions: Dict[str, str]) -> List[str]:
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = status_like("/proc/meminfo", "MemTotal")
    facts = [f"- CPU: {cpu}, `nproc` = {os.cpu_count()}",
             f"- memory: {mem / 1024 / 1024:.1f} GiB" if mem else "- memory: ?",
             f"- kernel: {platform.system()} {platform.release()}"]
    for name, version in versions.items():
        facts.append(f"- {name}: {version}")
    return facts


def status_like(path: str, key: str) -> Optional[int]:
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


@dataclass
class Target:
    text: str
    value: Optional[float]
    limit: float
    unit: str  # "×" or "ms" or "MiB"
    met: Optional[bool]
    where: str


def check(text: str, value: Optional[float], limit: float, unit: str, where: str, smaller: bool = True) -> Target:
    met = None if value is None else (value <= limit if smaller else value >= limit)
    return Target(text, value, limit, unit, met, where)


def ratio(cells, a: str, b: str, w: str, metric: str = "cpu_per_item_us") -> Optional[float]:
    x, y = cells.get((a, w)), cells.get((b, w))
    if not x or not y:
        return None
    mx, my = x.median(metric), y.median(metric)
    if mx is None or not my:
        return None
    return mx / my


def targets(cells, workloads: List[Workload], conc, streams: List[int]) -> List[Target]:
    out: List[Target] = []
    for w in workloads:
        if w.items < 100:
            continue  # CPU per chunk of a 3-chunk response is its setup cost
        out.append(check("Rust pull ≤ 1.15× push CPU", ratio(cells, "rust/panto-pull", "rust/panto-push", w.key),
                         1.15, "×", w.key))
        out.append(check("Rust pull within 1.5× of the raw floor",
                         ratio(cells, "rust/panto-pull", "rust/floor", w.key), 1.5, "×", w.key))
        out.append(check("Rust pull ahead of async-openai (< 1×)",
                         ratio(cells, "rust/panto-pull", "rust/async-openai", w.key), 1.0, "×", w.key))
        out.append(check("C within 1.1× of Rust pull", ratio(cells, "c/panto", "rust/panto-pull", w.key),
                         1.1, "×", w.key))
        out.append(check("spans on ≤ 1.05× off, CPU per chunk (Rust push)",
                         ratio(cells, "rust/panto-push-otel", "rust/panto-push", w.key), 1.05, "×", w.key))
        for go in ("go/panto-next", "go/panto-iter"):
            name = go.split("-")[-1].capitalize()
            out.append(check(f"Go `{name}` ≤ 1/5 of openai-go's CPU (≤ 0.2×)",
                             ratio(cells, go, "go/openai-go", w.key), 0.2, "×", w.key))
        r = ratio(cells, "py/openai-python", "py/panto-sync", w.key)
        out.append(check("Python sync ≥ 30× cheaper than openai-python", r, 30.0, "×", w.key, smaller=False))
    for key, limit in (("rust/panto-pull", 0.3), ("rust/panto-push", 0.3), ("c/panto", 0.3),
                       ("py/panto-sync", 0.5), ("py/panto-async", 0.5)):
        for w in workloads:
            if w.key not in ("text-3", "text-1k"):
                continue
            cell = cells.get((key, w.key))
            out.append(check(f"warm time to first event ≤ {limit} ms ({key})",
                             cell.median("ttfe_warm_ms") if cell else None, limit, "ms", w.key))
    if 1000 in streams:
        for key, *_ in CONCURRENCY:
            if key == "rust/floor":
                continue
            cell = conc.get((key, 1000))
            value = statistics.median(cell.maxrss_mib) if cell and cell.maxrss_mib else None
            out.append(check(f"1,000 paced streams under 300 MiB RSS ({key})", value, 300.0, "MiB",
                             "concurrency"))
    return out


def scale_targets(scale: Dict[Tuple[str, int], ConcCell], n: int) -> List[Target]:
    """Issues 21's and 38's targets at ``n`` streams, each against a figure of the same run."""
    med = statistics.median
    where = f"{n:,} streams"

    def cell(key: str) -> Optional[ConcCell]:
        c = scale.get((key, n))
        return c if c and c.cpu_s and not c.error else None

    def value(key: str, metric: str) -> Optional[float]:
        c = cell(key)
        return med(getattr(c, metric)) if c else None

    def cpu_ratio(a: str, b: str) -> Optional[float]:
        x, y = value(a, "cpu_per_event_us"), value(b, "cpu_per_event_us")
        return x / y if x is not None and y else None

    rust = cell("rust/panto-pull-async")
    workers = (rust.extra.get("adapter_workers") if rust else None) or adapter_workers_rule()
    out: List[Target] = []
    go = cell("go/panto-iter")
    if go:
        gmp = go.extra.get("gomaxprocs", os.cpu_count() or 1)
        limit = gmp + workers + 8
        out.append(check(f"Go peak OS threads ≤ GOMAXPROCS + adapter workers + 8 = {gmp} + {workers} + 8",
                         value("go/panto-iter", "threads"), limit, "threads", where))
    else:
        out.append(check("Go peak OS threads ≤ GOMAXPROCS + adapter workers + 8", None, 0, "threads", where))
    out.append(check(f"Python peak threads ≤ adapter workers + 4 = {workers} + 4",
                     value("py/panto-async", "threads"), workers + 4, "threads", where))
    for key in ("rust/panto-push", "rust/panto-pull-async", "go/panto-iter"):
        p99 = value(key, "p99_us")
        out.append(check(f"p99 added gap ≤ 25 ms ({key})", None if p99 is None else p99 / 1e3, 25.0, "ms", where))
    p99 = value("py/panto-async", "p99_us")
    out.append(check("p99 added gap ≤ 50 ms (py/panto-async)", None if p99 is None else p99 / 1e3, 50.0, "ms",
                     where))
    for key in sorted(SCALE_PANTO):
        out.append(check(f"peak RSS < 1.5 GiB ({key})", value(key, "maxrss_mib"), 1536.0, "MiB", where))
    for key in ("go/panto-iter", "rust/panto-pull-async"):
        out.append(check(f"CPU per event ≤ 2× Rust push ({key})", cpu_ratio(key, "rust/panto-push"), 2.0, "×",
                         where))
    out.append(check("Go CPU per event ≤ 0.25× openai-go", cpu_ratio("go/panto-iter", "go/openai-go"), 0.25, "×",
                     where))
    out.append(check("Python CPU per event ≤ 0.1× openai-python `AsyncOpenAI`",
                     cpu_ratio("py/panto-async", "py/openai-python-async"), 0.1, "×", where))

    def overhead_ratio(a: str, b: str) -> Optional[float]:
        """``a``'s CPU per event above the floor row's, over ``b``'s above it."""
        x, y, f = (value(k, "cpu_per_event_us") for k in (a, b, "rust/floor"))
        return (x - f) / (y - f) if x is not None and y is not None and f is not None and y > f else None

    # Issue 38's, against the same run.
    out.append(check("issue 38: Go `Iter` CPU per event ≤ 0.8× openai-go",
                     cpu_ratio("go/panto-iter", "go/openai-go"), 0.8, "×", where))
    out.append(check("issue 38: Go `Iter` CPU above the floor ≤ 0.6× openai-go's",
                     overhead_ratio("go/panto-iter", "go/openai-go"), 0.6, "×", where))
    out.append(check("issue 38: Python `async for` CPU per event ≤ 0.05× `AsyncOpenAI`",
                     cpu_ratio("py/panto-async", "py/openai-python-async"), 0.05, "×", where))
    out.append(check("issue 38: Rust pull CPU above the floor ≤ 2× push's",
                     overhead_ratio("rust/panto-pull-async", "rust/panto-push"), 2.0, "×", where))
    return out


def target_lines(tlist: List[Target]) -> List[str]:
    L = ["| target | measured on | measured | verdict |", "| --- | --- | ---: | --- |"]
    for t in tlist:
        value = "–" if t.value is None else (f"{t.value:.3f} ms" if t.unit == "ms" else
                                              f"{t.value:.1f} MiB" if t.unit == "MiB" else
                                              f"{t.value:.0f}" if t.unit == "threads" else f"{t.value:.2f}×")
        L.append(f"| {t.text} | {t.where} | {value} | {verdict(t)} |")
    return L


SCALE_BEGIN, SCALE_END = "<!-- scale:begin -->", "<!-- scale:end -->"
TARGETS_BEGIN, TARGETS_END = "<!-- scale-targets:begin -->", "<!-- scale-targets:end -->"


def render_scale(scale: Dict[Tuple[str, int], ConcCell], n: int, chunks: int, pace_ms: int, rounds: int,
                 nofile: int, provenance: str, ramp_ms: int) -> Tuple[List[str], List[str]]:
    """The 10,000-stream section and its targets, each between markers so that a run of
    this workload alone (``--only-scale``) can replace them in an existing report."""
    med = statistics.median
    L = [SCALE_BEGIN, f"## {n:,} concurrent streams ({chunks} chunks each, {pace_ms} ms apart)", ""]
    L.append(provenance)
    L.append("")
    L.append(f"{n:,} streams at once from one process, against one `panto-testserver` that paces every "
             f"stream's chunks {pace_ms} ms apart (a slow model, or a tool-heavy agent): the streams spend "
             "almost all their time waiting, which is what this workload measures. Every panto row makes one "
             "agent per stream (so one connection each); the Rust and Go panto rows wait without a thread per "
             "stream (a waker; Go: one dispatcher goroutine in the netpoller on the process's ready set, "
             "whose one descriptor reports every stream) and Python's on the event loop (one "
             "`loop.add_reader` on the loop's ready set). The peers share one client, as their users would: openai-go's "
             "transport opens a connection per concurrent stream (no per-host limit by default); "
             "openai-python's `AsyncOpenAI` gets `http_client=DefaultAsyncHttpxClient(limits=httpx2.Limits("
             f"max_connections={n}, max_keepalive_connections={n}))`, because its default pool (1,000 "
             "connections) would queue the rest and count the queueing as gaps, and "
             "`timeout=httpx2.Timeout(600, connect=600)` (openai-python 3 sends through httpx2, a fork of httpx): "
             "with its default 5 s connect timeout, and with 60 s, runs failed (`APITimeoutError`): its one "
             "event loop, busy with the streams already open, reaches new connections only after minutes. "
             "**Added latency** is the gap between consecutive content events minus the pacing (p50 / p99 "
             f"over all {n * (chunks - 1):,} gaps); the floor row is what the server and the OS add with no "
             "client work. The measure only sees a client that keeps up: one that falls behind finds its "
             "backlog buffered and reads it in a burst (gaps near 0), so a row whose wall time is far above "
             "the streams' own life (openai-python's in the committed run) shows small added gaps while "
             f"every event is late; read its wall column instead. Every client starts its streams evenly over {ramp_ms / 1e3:g} s (stream i at "
             f"i × {ramp_ms} ms / {n:,}), so all {n:,} are open together for the last "
             f"{max(0.0, (chunks - 1) * pace_ms - ramp_ms) / 1e3:g} s of the first stream's life: "
             "`panto-testserver` listens with a backlog of 4,096 (before: Rust's `std` default of 128, which "
             "a burst of thousands of connects overflowed; the kernel then retried the dropped SYNs 1, 3, 7, "
             "15 and 31 s later, which spread the starts over half a minute and the connection storms over "
             "every stream's gaps in a first, unramped version of this workload). **SYN drops** is the kernel's "
             "`ListenDrops` count over the run (any socket on the machine), to show whether that still "
             "happened; **peak conns** is the most connections the server held at once (its descriptors, "
             "one per connection, sampled every 250 ms); a finished stream's connection stays open, idle in its client's pool, "
             "until the client exits, so it is an upper bound of the streams open together. **Wall** is the "
             "client process's life, agent setup included; **run-queue s** is how long its threads were "
             "runnable but waiting for a core (`/proc/PID/task/*/schedstat`, threads alive at the last "
             "250 ms sample): on a loaded machine the gaps are mostly this wait, and the floor row shows "
             "how much of them no client can avoid. **CPU** is the whole process's user + system time, agent and client setup "
             "included; **CPU µs/event** divides it by the content events; **vs peer** divides that by the "
             "peer's in this run (Rust pull async against Rust push). **Threads** is the peak OS thread "
             "count (`/proc`, sampled every 20 ms), **RSS** the peak resident set (`VmHWM`). "
             f"Descriptor limit (`RLIMIT_NOFILE`) of the server and every client: {nofile:,}. "
             f"Median of {rounds} run(s) per row, rows interleaved.")
    L.append("")
    L.append("| language | client | streams | CPU ms | CPU µs/event | vs peer | added p50 ms | added p99 ms "
             "| peak RSS MiB | threads | wall s | run-queue s | peak conns | SYN drops |")
    L.append("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    labels = {k: label for k, _l, label, *_ in SCALE}
    for key, lang, label, _client, _variant in SCALE:
        c = scale.get((key, n))
        if c is None:
            continue
        name = f"**{label}**" if key in SCALE_PANTO else label
        if c.error:
            L.append(f"| {lang} | {name} | {n:,} | failed: {c.error[:80]} | | | | | | | | | | |")
            continue
        if not c.cpu_s:
            continue
        peer = ""
        pk = SCALE_PEER.get(key)
        pc = scale.get((pk, n)) if pk else None
        if pc and pc.cpu_per_event_us:
            r = med(c.cpu_per_event_us) / med(pc.cpu_per_event_us)
            peer = f"{r:.2f}× {labels[pk].split(',')[0].split(' `')[0]}"
        L.append(f"| {lang} | {name} | {n:,} | {med(c.cpu_s) * 1e3:.0f} | {med(c.cpu_per_event_us):.1f} | {peer} | "
                 f"{med(c.p50_us) / 1e3:.2f} | {med(c.p99_us) / 1e3:.2f} | {med(c.maxrss_mib):.1f} | "
                 f"{int(med(c.threads))} | {med(c.wall_s):.1f} | "
                 f"{fmt(med(c.runq_s) if c.runq_s else None, 1)} | "
                 f"{int(med(c.peak_open)) if c.peak_open else '–'} | "
                 f"{int(med(c.listen_drops)) if c.listen_drops else '–'} |")
    L.append("")
    crossing = crossing_lines(scale, n)
    if crossing:
        L.extend(crossing)
        L.append("")
    L.append(SCALE_END)
    tlist = scale_targets(scale, n)
    T = [TARGETS_BEGIN, f"### Targets at {n:,} streams (issues 21 and 38)", ""]
    T.extend(target_lines(tlist))
    T.append("")
    missed = [t for t in tlist if t.met is False]
    T.append(f"{len(missed)} of {len(tlist)} checks at {n:,} streams missed in this run.")
    T.append("")
    T.append(TARGETS_END)
    return L, T


def crossing_lines(scale: Dict[Tuple[str, int], ConcCell], n: int) -> List[str]:
    """What the pull adapter's crossing costs, against a crossing with no client work
    (issue 38), from the medians of this run; empty without the four rows it needs."""
    med = statistics.median
    keys = ("rust/floor", "rust/floor-crossing", "rust/panto-push", "rust/panto-pull-async")
    cells = [scale.get((k, n)) for k in keys]
    if any(c is None or c.error or not c.cpu_per_event_us for c in cells):
        return []
    floor, crossing, push, pull = (med(c.cpu_per_event_us) for c in cells if c is not None)
    bare, own, work = crossing - floor, pull - push, push - floor
    batched = scale.get(("rust/floor-batched", n))
    least = []
    if batched is not None and not batched.error and batched.cpu_per_event_us:
        b = med(batched.cpu_per_event_us) - floor
        least = [f"The batched crossing floor, which hands lines over the way pull does at scale (once per "
                 f"millisecond per worker) and does nothing else, costs {b:.1f} µs per event above the floor: "
                 f"{b / work:.2f}× push's whole work, and pull's crossing is {own / b:.2f}× it."]
    return [f"**The crossing.** The design puts the turn on a worker thread and its consumer on another, with "
            f"a channel between: a cost push never pays. The crossing floor pays it with no client work: "
            f"{bare:.1f} µs per event above the floor. Rust pull pays {own:.1f} µs per event above push "
            f"({own / bare:.2f}× the bare crossing, when both are medians of this run), on top of push's own "
            f"work ({work:.1f} µs above the floor). Pull's overhead is within 2× push's only when its crossing "
            f"costs no more than push's whole work: here {own:.1f} against {work:.1f} µs."] + least


def merge_scale(path: str, section: List[str], targets_block: List[str], misses: Optional[str]) -> str:
    """The report at ``path`` with its scale section and scale targets replaced by these
    (inserted before "## Targets" and at the end of the targets when it has none yet), and
    its misses section replaced by the current misses file."""
    with open(path) as f:
        lines = f.read().rstrip("\n").split("\n")

    def replace(lines: List[str], begin: str, end: str, new: List[str], before: str) -> List[str]:
        if begin in lines and end in lines:
            a, b = lines.index(begin), lines.index(end)
            return lines[:a] + new + lines[b + 1:]
        at = next((i for i, x in enumerate(lines) if x.startswith(before)), len(lines))
        return lines[:at] + new + [""] + lines[at:]

    miss_text = open(misses).read().rstrip() if misses and os.path.exists(misses) else None
    miss_head = miss_text.split("\n", 1)[0] if miss_text else "## Misses"
    lines = replace(lines, SCALE_BEGIN, SCALE_END, section, "## Targets")
    lines = replace(lines, TARGETS_BEGIN, TARGETS_END, targets_block, miss_head)
    if miss_text:
        at = next((i for i, x in enumerate(lines) if x == miss_head), len(lines))
        lines = lines[:at] + miss_text.split("\n")
    return "\n".join(lines) + "\n"


def verdict(t: Target) -> str:
    if t.met is None:
        return "not measured"
    return "met" if t.met else "**MISSED**"


def render(args, facts: List[str], workloads: List[Workload], cells, conc, streams: List[int],
           rate: Optional[float], started: str, load: Tuple[str, str], seconds: float,
           conc_chunks: int, pace_ms: int, rounds: int, conc_rounds: int,
           scale_block: Optional[Tuple[List[str], List[str]]] = None) -> str:
    tlist = targets(cells, workloads, conc, streams)
    L: List[str] = []
    L.append("# panto benchmark results")
    L.append("")
    L.append(f"Written by `scripts/bench.sh{' --quick' if args.quick else ''}` on {started} "
             f"({seconds / 60:.1f} min). Regenerate with the same command; the file is overwritten.")
    L.append("")
    L.append("## Machine")
    L.append("")
    L.extend(facts)
    L.append(f"- load average (1/5/15 min) at the start: {load[0]}; at the end: {load[1]}")
    if args.note:
        L.append(f"- conditions: {args.note}")
    L.append("")
    L.append("## How to read this")
    L.append("")
    L.append("Every client is a fresh process reading the same bytes from the same local "
             "`panto-testserver` (a separate process, so its CPU is never the client's). "
             f"Each client runs {rounds} times per workload, round-robin with all the others, so "
             "that load changes hit every row alike; figures are medians. **CPU** is the client "
             "process's user + system time (every thread: panto's worker, Go's runtime, Python's "
             "interpreter) per chunk, over the warm turns. **Wall** is one warm turn. **RSS** is "
             "the process's peak resident set (`VmHWM`, as the client reports it). **Cold TTFE** is the first turn of a "
             "process: creating the client or agent (runtime, pool, connection) up to the first "
             "event; **warm TTFE** is a later turn of the same client, from the call that starts "
             "the stream to the first event it yields. **vs peer** is this row's CPU per chunk "
             "divided by the peer's in the same run (below 1 favours panto). Absolute times "
             "drift on a shared machine; the ratios are the claims.")
    L.append("")
    if rate is not None:
        fastest = min((c.median("wall_ms") for (k, w), c in cells.items()
                       if w == "text-100k" and c.median("wall_ms") is not None), default=None)
        L.append(f"Server raw rate: `curl -o /dev/null` reads the 100,000-chunk response at "
                 f"{rate:.2f} µs per chunk (wall)" +
                 (f"; the fastest client row needs {fastest * 1e3 / 100_000:.2f} µs per chunk, so the "
                  f"server is not the bottleneck." if fastest else "."))
        L.append("")
    rows_by_key = {r.key: r for r in ROWS}
    for w in workloads:
        L.append(f"## {w.title}")
        L.append("")
        L.append("| language | client | CPU µs/chunk | vs peer | wall ms/turn | peak RSS MiB | cold TTFE ms | warm TTFE ms |")
        L.append("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
        for row in ROWS:
            c = cells.get((row.key, w.key))
            if c is None:
                continue
            if c.error:
                L.append(f"| {row.language} | {row.label} | failed: {c.error[:80]} | | | | | |")
                continue
            peer = ""
            if row.peer:
                r = ratio(cells, row.key, row.peer, w.key)
                peer = f"{fmt(r)}× {rows_by_key[row.peer].label.split(',')[0].split(':')[0]}" if r else ""
            name = f"**{row.label}**" if row.panto else row.label
            L.append(f"| {row.language} | {name} | {fmt(c.median('cpu_per_item_us'))} | {peer} | "
                     f"{fmt(c.median('wall_ms'), 1)} | {fmt(c.median('maxrss_mib'), 1)} | "
                     f"{fmt(c.median('ttfe_cold_ms'), 2)} | {fmt(c.median('ttfe_warm_ms'), 3)} |")
        L.append("")
    if streams:
        L.append(f"## Concurrent paced streams ({conc_chunks} chunks each, {pace_ms} ms apart)")
        L.append("")
        L.append("S streams at once from one process, each its own agent and connection; the server "
                 f"paces every stream's chunks {pace_ms} ms apart. **Added latency** is the gap between "
                 "two consecutive content events minus the pacing (p50 / p99 over every gap of every "
                 "stream); the floor row shows what the server and the OS add with no client work. "
                 "A stream that fell behind gets its backlog in a burst (gaps near 0), so p50 can be 0 "
                 "under overload; p99 shows the stalls. "
                 "The pacing is a fast model's (50 chunks/s per stream): at 1 chunk per ms, 1,000 streams "
                 "would ask for a million chunks per second, more than the server alone can write on "
                 "this machine (`--pace-ms` changes it). "
                 "**CPU** is the whole process's, agent setup included. **Threads** is the peak OS "
                 f"thread count of the process (sampled every 20 ms). Median of {conc_rounds} run(s).")
        L.append("")
        L.append("| language | client | streams | CPU ms | CPU µs/event | added p50 ms | added p99 ms | peak RSS MiB | threads |")
        L.append("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for key, lang, label, _client, _variant in CONCURRENCY:
            for s in streams:
                c = conc.get((key, s))
                if c is None:
                    continue
                if c.error:
                    L.append(f"| {lang} | {label} | {s} | failed: {c.error[:80]} | | | | | |")
                    continue
                if not c.cpu_s:
                    continue
                med = statistics.median
                L.append(f"| {lang} | {label} | {s} | {med(c.cpu_s) * 1e3:.0f} | {med(c.cpu_per_event_us):.1f} | "
                         f"{med(c.p50_us) / 1e3:.2f} | {med(c.p99_us) / 1e3:.2f} | {med(c.maxrss_mib):.1f} | "
                         f"{int(med(c.threads))} |")
        L.append("")
    if scale_block:
        L.extend(scale_block[0])
        L.append("")
    L.append("## Targets")
    L.append("")
    L.extend(target_lines(tlist))
    L.append("")
    missed = [t for t in tlist if t.met is False]
    L.append(f"{len(missed)} of {len(tlist)} target checks missed in this run.")
    L.append("")
    if scale_block:
        L.extend(scale_block[1])
        L.append("")
    if args.misses and os.path.exists(args.misses):
        with open(args.misses) as f:
            L.append(f.read().rstrip())
        L.append("")
    return "\n".join(L)


CATEGORIES = [
    ("kernel (syscalls, TCP receive, scheduling)", ("[k]",)),
    ("JSON decoding (serde_json, encoding/json, json.loads, pydantic)",
     ("serde_json", "serde_core", "serde::", "Deserialize", "deserialize", "visit_", "FirstChoice",
      "encoding/json", "json.", "pydantic", "jiter")),
    ("memory copies and compares", ("memmove", "memcpy", "memcmp", "memchr", "memset", "bcmp")),
    ("allocation", ("malloc", "_int_free", "free", "realloc", "mallocgc", "runtime.mallocgc")),
    ("HTTP (hyper, reqwest, bytes, net/http)", ("hyper", "reqwest", "bytes::", "h1::", "http::", "http_body",
                                                "net/http", "bufio", "httpx", "httpcore")),
    ("panto SSE parser and decoder", ("panto::sse", "panto::provider", "SseParser")),
    ("panto pull hand-off (outbox, queue, wake-ups)", ("panto_pull", "crossbeam", "futex", "parking", "Condvar", "Mutex")),
    ("panto turn loop and transport", ("panto::",)),
    ("async runtime (tokio, futures, tracing, clocks)", ("tokio", "futures", "waker", "Waker", "poll_fn",
                                                         "atomic_waker", "tracing", "clock_gettime")),
    ("Go runtime", ("runtime.",)),
    ("Python interpreter", ("_PyEval", "Py", "_Py")),
]


def category(symbol: str) -> str:
    for name, needles in CATEGORIES:
        if any(n in symbol for n in needles):
            return name
    return "other"


def profile(spec: str, clients: Dict[str, List[str]], testserver: str, workloads: List[Workload],
            top: int = 25, scale: Tuple[int, int, int, int] = (10_000, 20, 200, 2000)) -> None:
    """``--profile ROW:WORKLOAD``: one client process under ``perf record`` (cpu-clock
    samples with call graphs), then the symbols it spent its time in, self time first.
    ``ROW:scale`` profiles a row of the scale workload (``scale`` = streams, chunks,
    pace in ms, ramp in ms)."""
    key, _, wkey = spec.partition(":")
    if wkey == "scale":
        srow = next((r for r in SCALE if r[0] == key), None)
        row = Row(srow[0], srow[1], srow[2], srow[3], srow[4]) if srow else None
        streams, chunks, pace_ms, _ramp = scale
        w: Optional[Workload] = Workload("scale", "scale", streams * chunks, 1, text_response(chunks, pace_ms))
    else:
        row = next((r for r in ROWS if r.key == key), None)
        w = next((x for x in workloads if x.key == wkey), None)
    if row is None or w is None or row.client not in clients:
        raise SystemExit(f"--profile ROW:WORKLOAD, e.g. rust/panto-pull:text-100k or go/panto-iter:scale "
                         f"(got {spec!r})")
    with tempfile.TemporaryDirectory() as tmp:
        server = Server(testserver, w.response, tmp, w.key)
        data = os.path.join(tmp, "perf.data")
        try:
            if wkey == "scale":
                argv = clients[row.client] + ["concurrency", row.variant, server.base_url, str(scale[0]),
                                              str(scale[2]), str(scale[3])]
            else:
                argv = clients[row.client] + ["turns", row.variant, server.base_url, str(w.turns)]
            subprocess.run(["perf", "record", "-q", "-F", "2000", "-g", "-o", data, "--"] + argv,
                           check=True, stdout=subprocess.DEVNULL)
        finally:
            server.close()
        report = subprocess.run(["perf", "report", "-i", data, "--stdio", "--no-children", "-g", "none",
                                 "--sort", "symbol", "-F", "overhead,sym"],
                                capture_output=True, text=True, check=True).stdout
        symbols = []
        for line in report.splitlines():
            parts = line.split(None, 1)
            if len(parts) == 2 and parts[0].endswith("%") and not line.startswith("#"):
                # perf appends empty "-" columns (no branch data) to each line.
                name = parts[1].strip()
                while name.endswith(" -"):
                    name = name[:-2].rstrip()
                symbols.append((float(parts[0].rstrip("%")), name))
        # The same symbol can be listed once per inlined copy: merge, then sort.
        merged: Dict[str, float] = {}
        for pct, sym in symbols:
            merged[sym] = merged.get(sym, 0.0) + pct
        symbols = sorted(((p, s) for s, p in merged.items()), reverse=True)
        what = f"{scale[0]:,} streams" if wkey == "scale" else f"{w.turns} turns"
        print(f"== {spec}: self time by symbol (perf, cpu-clock samples, every thread, {what})")
        for pct, sym in symbols[:top]:
            print(f"{pct:6.2f}%  {sym[:150]}")
        totals: Dict[str, float] = {}
        for pct, sym in symbols:
            totals[category(sym)] = totals.get(category(sym), 0.0) + pct
        print(f"== {spec}: self time by kind")
        for name, pct in sorted(totals.items(), key=lambda kv: -kv[1]):
            print(f"{pct:6.2f}%  {name}")
        print(f"== {spec}: largest symbols of kind other")
        for pct, sym in [x for x in symbols if category(x[1]) == "other"][:10]:
            print(f"{pct:6.2f}%  {sym[:150]}")


SWEEP_VARIANTS = ["floor", "panto-push", "panto-push-mt", "panto-pull", "panto-pull-try"]


def ttfe_sweep(rust: List[str], testserver: str, sizes: List[int], turns: int = 40) -> str:
    """``--ttfe-sweep``: warm time to first event of the Rust clients against responses of
    growing length (the first chunk written at once, the rest right behind it), as a
    markdown table. Shows whether the first event waits for what follows it."""
    lines = ["| N chunks | " + " | ".join(SWEEP_VARIANTS) + " |",
             "| ---: | " + " | ".join("---:" for _ in SWEEP_VARIANTS) + " |"]
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            server = Server(testserver, text_response(n), tmp, f"sweep-{n}")
            try:
                cells = []
                for variant in SWEEP_VARIANTS:
                    out = run_client(rust + ["turns", variant, server.base_url, str(turns)], timeout=300)
                    cells.append(f"{statistics.median(x['ttfe_us'] for x in out.lines[1:]):.0f}")
            finally:
                server.close()
            lines.append(f"| {n:,} | " + " | ".join(cells) + " |")
            print(lines[-1], file=sys.stderr, flush=True)
    return "\n".join(lines)


def main() -> None:
    if "--charts-only" in sys.argv[1:]:
        # `run.py --charts-only [REPORT]`: redraw the charts of a written report (the
        # committed one by default) without measuring.
        sys.exit(svg.main(sys.argv[1:]))
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--clients", required=True, help="JSON: {client: argv prefix}")
    ap.add_argument("--testserver", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--json-out", help="also write every sample here")
    ap.add_argument("--versions", help="JSON: {tool: version} for the machine facts")
    ap.add_argument("--note", default="", help="load conditions, for the report")
    ap.add_argument("--misses", help="a markdown file appended as the misses section")
    ap.add_argument("--only", default="", help="comma-separated row keys (default: all)")
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--streams", default="1,64,1000")
    ap.add_argument("--pace-ms", type=int, default=20)
    ap.add_argument("--paced-chunks", type=int, default=50)
    ap.add_argument("--scale-streams", type=int,
                    help="streams of the scale workload (0: leave it out; default 10,000, or the most "
                         "thousands the descriptor limit holds)")
    ap.add_argument("--scale-chunks", type=int, default=20)
    ap.add_argument("--scale-pace-ms", type=int, default=200)
    ap.add_argument("--scale-ramp-ms", type=int, default=2000,
                    help="the scale clients start their streams evenly over this long")
    ap.add_argument("--scale-rounds", type=int, help="runs per scale row (default 3, --quick 1)")
    ap.add_argument("--only-scale", action="store_true",
                    help="run only the scale workload and merge its section and targets into --out")
    ap.add_argument("--profile", help="ROW:WORKLOAD: profile one client with perf instead of measuring")
    ap.add_argument("--ttfe-sweep", action="store_true",
                    help="warm time to first event (µs) of the Rust clients by response length, instead of measuring")
    args = ap.parse_args()

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    with open(args.clients) as f:
        clients: Dict[str, List[str]] = json.load(f)
    versions: Dict[str, str] = {}
    if args.versions:
        with open(args.versions) as f:
            versions = json.load(f)
    quick = args.quick
    rounds = args.rounds or (3 if quick else 5)
    conc_rounds = 1 if quick else 3
    workloads = [
        Workload("text-3", "3 text chunks (time to first event without a long response behind it)", 3,
                 10 if quick else 30, text_response(3)),
        Workload("text-1k", "1,000 text chunks", 1_000, 10 if quick else 30, text_response(1_000)),
        Workload("text-100k", "100,000 text chunks", 100_000, 2 if quick else 3, text_response(100_000)),
        Workload("tool-10k", "One tool call, arguments in 10,000 pieces", 10_000, 4 if quick else 6,
                 tool_response(10_000)),
    ]
    if args.profile:
        raise_nofile(args.scale_streams or 10_000)
        profile(args.profile, clients, args.testserver, workloads,
                scale=(args.scale_streams or 10_000, args.scale_chunks, args.scale_pace_ms, args.scale_ramp_ms))
        return
    if args.ttfe_sweep:
        print(ttfe_sweep(clients["rust"], args.testserver, [3, 30, 100, 300, 1000]))
        return
    only = {k for k in args.only.split(",") if k}
    rows = [r for r in ROWS if r.client in clients and (not only or r.key in only)]
    streams = [int(s) for s in args.streams.split(",") if s]
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    load0 = " / ".join(open("/proc/loadavg").read().split()[:3])
    t0 = time.monotonic()
    nofile = raise_nofile(max(args.scale_streams or 10_000, max(streams, default=0)))
    scale_rounds = args.scale_rounds or (1 if quick else 3)
    lowered = None
    if args.scale_streams is None:
        # The 10,000, unless the descriptor limit cannot hold it (one per stream
        # and process): then the most whole thousands it holds, said in the report.
        n = 10_000
        if fd_budget_note(n, nofile):
            n = max(1_000, (nofile - 256) // 1_000 * 1_000)
            lowered = (f"{n:,} streams instead of 10,000: " + (fd_budget_note(10_000, nofile) or "") +
                       f" (`--scale-streams` sets the count)")
            log(f"scale workload: {lowered}")
    else:
        n = args.scale_streams
    short = lowered or (fd_budget_note(n, nofile) if n else None)
    if short and not lowered:
        log(f"warning: {short}; rows that run out fail (--scale-streams lowers the count)")

    def run_scale(tmp: str) -> Dict[Tuple[str, int], ConcCell]:
        if not n:
            return {}
        server = Server(args.testserver, text_response(args.scale_chunks, args.scale_pace_ms), tmp, "scale")
        try:
            return measure_concurrency([n], args.scale_chunks, args.scale_pace_ms, clients, server.base_url,
                                       scale_rounds, log, table=SCALE, only=only, ramp_ms=args.scale_ramp_ms,
                                       server_pid=server.proc.pid)
        finally:
            server.close()

    if args.only_scale:
        with tempfile.TemporaryDirectory() as tmp:
            scale = run_scale(tmp)
        load1 = " / ".join(open("/proc/loadavg").read().split()[:3])
        provenance = (f"Measured by `scripts/bench.sh --only-scale` on {started} "
                      f"({(time.monotonic() - t0) / 60:.1f} min; load average {load0} at its start, {load1} at "
                      f"its end{'; ' + args.note if args.note else ''}), merged into this file: the other tables "
                      "are from the run named at the top." + (f" **Warning:** {short}." if short else ""))
        section, tblock = render_scale(scale, n, args.scale_chunks, args.scale_pace_ms, scale_rounds, nofile,
                                       provenance, args.scale_ramp_ms)
        if os.path.exists(args.out):
            report = merge_scale(args.out, section, tblock, args.misses)
        else:
            report = "\n".join(section + [""] + tblock) + "\n"
        with open(args.out, "w") as f:
            f.write(report)
        svg.update(args.out)
        if args.json_out:
            with open(args.json_out, "w") as f:
                json.dump({"scale": {f"{k[0]} x{k[1]}": vars(v) for k, v in scale.items()}}, f, indent=1)
        print(report)
        return
    with tempfile.TemporaryDirectory() as tmp:
        servers = {w.key: Server(args.testserver, w.response, tmp, w.key) for w in workloads}
        paced = Server(args.testserver, text_response(args.paced_chunks, args.pace_ms), tmp, "paced")
        try:
            rate = server_rate(servers["text-100k"].base_url, 100_000)
            log(f"server raw rate (curl -o /dev/null): {fmt(rate)} µs/chunk")
            cells = measure_turns(rows, workloads, clients, servers, rounds, log)
            # With --only, only those rows' concurrency runs are made.
            conc = measure_concurrency(streams, args.paced_chunks, args.pace_ms,
                                       {k: v for k, v in clients.items()}, paced.base_url, conc_rounds, log,
                                       only=only or None) \
                if streams else {}
        finally:
            for s in list(servers.values()) + [paced]:
                s.close()
        scale = run_scale(tmp)
    load1 = " / ".join(open("/proc/loadavg").read().split()[:3])
    scale_block = render_scale(scale, n, args.scale_chunks, args.scale_pace_ms, scale_rounds, nofile,
                               "Measured in the same run as the tables above." +
                               (f" **Warning:** {short}." if short else ""), args.scale_ramp_ms) if n else None
    report = render(args, machine_facts(versions), workloads, cells, conc, streams, rate, started,
                    (load0, load1), time.monotonic() - t0, args.paced_chunks, args.pace_ms, rounds, conc_rounds,
                    scale_block)
    with open(args.out, "w") as f:
        f.write(report + "\n")
    svg.update(args.out)
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"turns": {f"{k[0]} {k[1]}": vars(v) for k, v in cells.items()},
                       "concurrency": {f"{k[0]} x{k[1]}": vars(v) for k, v in conc.items()},
                       "scale": {f"{k[0]} x{k[1]}": vars(v) for k, v in scale.items()}}, f, indent=1)
    print(report)


if __name__ == "__main__":
    main()
