"""Starts a panto turn on Temporal and prints its text as it streams, then the final
answer on the last line (docs/durable-execution.md).

    python start.py --address 127.0.0.1:7233 --task-queue turns --base-url URL "question"
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import uuid

from panto.temporal import TurnRequest, TurnWorkflow
from temporalio.client import Client


async def main() -> str:
    p = argparse.ArgumentParser()
    p.add_argument("--address", default="127.0.0.1:7233")
    p.add_argument("--task-queue", default="turns")
    p.add_argument("--base-url", default=None)  # the worker's; accepted for symmetry
    p.add_argument("question", nargs="?", default="What is the weather in Paris?")
    args = p.parse_args()
    client = await Client.connect(args.address)
    handle = await client.start_workflow(
        TurnWorkflow.run,
        TurnRequest(agent="weather", input=args.question),
        id=f"turn-{uuid.uuid4().hex}",
        task_queue=args.task_queue,
    )
    # The live view: the text streamed so far, from the workflow's "text" query. It is
    # not durable (a step that runs again streams again); the result is.
    result_task = asyncio.ensure_future(handle.result())
    shown = ""
    while not result_task.done():
        text = await handle.query(TurnWorkflow.text)
        if text.startswith(shown) and len(text) > len(shown):
            sys.stdout.write(text[len(shown) :])
            sys.stdout.flush()
            shown = text
        await asyncio.wait([result_task], timeout=0.1)
    result = result_task.result()
    return result.text


if __name__ == "__main__":
    answer = asyncio.run(main())
    print()
    print(answer, flush=True)
    # temporalio's client threads may outlive asyncio.run; leaving at once, once the
    # answer is out, keeps the interpreter's shutdown from tripping over them.
    os._exit(0)
