"""The Temporal worker the tests of panto.temporal run as a process of its own (so that
a test can SIGKILL it): TurnWorkflow and the activities of a few agents against the
scripted provider. Each tool call appends a line to --log, read by the tests.

    temporal_worker.py --address HOST:PORT --task-queue Q --base-url URL --log FILE
                       [--mcp-python PY --mcp-fixture PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import threading
import time
from typing import Any, Dict

import panto
from panto.temporal import TurnWorkflow, activities, sandbox_runner
from temporalio.client import Client
from temporalio.worker import Worker


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--address", required=True)
    p.add_argument("--task-queue", required=True)
    p.add_argument("--base-url", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--mcp-python")
    p.add_argument("--mcp-fixture")
    args = p.parse_args()
    lock = threading.Lock()
    running = {"now": 0, "max": 0}

    def log(line: str) -> None:
        with lock, open(args.log, "a") as f:
            f.write(line + "\n")

    @panto.tool
    def slow_add(a: int, b: int) -> str:
        """Adds two numbers, slowly."""
        log(f"slow_add start {a} {b}")
        time.sleep(2)
        log(f"slow_add end {a} {b}")
        return str(a + b)

    @panto.tool(needs_approval=True)
    def delete_file(path: str) -> str:
        """Deletes a file."""
        log(f"delete_file {path}")
        return f"deleted {path}"

    @panto.tool
    def work(i: int) -> str:
        """Does one piece of work."""
        with lock:
            running["now"] += 1
            running["max"] = max(running["max"], running["now"])
        time.sleep(0.1)
        with lock:
            running["now"] -= 1
            peak = running["max"]
        log(f"work {i} max {peak}")
        return f"done {i}"

    @panto.tool(external=True)
    def lookup(key: str) -> str:
        """Looks a key up in the host's records."""
        raise AssertionError("an external tool never runs")

    def agent(*tools: Any, **extra: Any) -> Dict[str, Any]:
        return dict(model="gpt-test", base_url=args.base_url, api_key="sk-test-0123456789", tools=list(tools), **extra)

    mcp: Dict[str, Any] = {}
    if args.mcp_python:
        mcp = {"fx": {"command": args.mcp_python, "args": [args.mcp_fixture]}}
    agents = {
        "plain": agent(),
        "crash": agent(slow_add),
        "approval": agent(delete_file),
        "fanout": agent(work, max_steps=4),
        "external": agent(lookup),
        "mcp": agent(mcp_servers=mcp) if mcp else agent(),
    }

    async def run() -> None:
        client = await Client.connect(args.address)
        worker = Worker(
            client,
            task_queue=args.task_queue,
            workflows=[TurnWorkflow],
            activities=activities(agents),
            workflow_runner=sandbox_runner(),
            max_concurrent_activities=100,
        )
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        async with worker:
            log(f"worker ready {os.getpid()}")
            await stop.wait()

    asyncio.run(run())


if __name__ == "__main__":
    main()
