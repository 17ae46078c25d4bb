"""A Temporal worker that runs panto turns (docs/durable-execution.md).

    python worker.py --address 127.0.0.1:7233 --task-queue turns --base-url URL

It registers TurnWorkflow and the activities of one agent, "weather", with one tool.
Kill it at any time: a worker started again (here or on another machine) finishes the
turns it was running.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal

import panto
from panto.temporal import TurnWorkflow, activities, sandbox_runner
from temporalio.client import Client
from temporalio.worker import Worker


@panto.tool
def weather(city: str) -> str:
    """Current weather in a city."""
    return f"18°C and sunny in {city}"


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--address", default="127.0.0.1:7233")
    p.add_argument("--task-queue", default="turns")
    p.add_argument("--base-url", default=None)
    args = p.parse_args()
    agents = {
        # The keyword arguments of panto.Agent; panto's own retries are turned off in
        # activities (Temporal retries them).
        "weather": dict(
            model=os.environ.get("PANTO_MODEL", "gpt-4o-mini"),
            base_url=args.base_url,
            api_key=os.environ.get("OPENAI_API_KEY", "sk-example"),
            tools=[weather],
        ),
    }
    client = await Client.connect(args.address)
    worker = Worker(
        client,
        task_queue=args.task_queue,
        workflows=[TurnWorkflow],
        activities=activities(agents),
        workflow_runner=sandbox_runner(),
    )
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    asyncio.get_running_loop().add_signal_handler(signal.SIGINT, stop.set)
    async with worker:
        print("worker ready", flush=True)
        await stop.wait()


if __name__ == "__main__":
    asyncio.run(main())
