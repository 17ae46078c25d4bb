"""Misuses that ``mypy --strict`` must report, each on the line whose ``E:`` comment
names its error code (test_typing.py checks that these and only these are reported)."""

from __future__ import annotations

import panto


@panto.tool
def add(a: int, b: int = 0) -> int:
    """Adds."""
    return a + b


add("one", 2)  # E: arg-type
add(1, c=3)  # E: call-arg
panto.Agent(model="m", max_stepz=3)  # E: call-arg
panto.Agent(model="m", max_steps="3")  # E: arg-type


def narrowed(ev: panto.Event) -> None:
    if ev.type == "content_delta":
        print(ev.output)  # E: attr-defined


async def final(s: panto.AsyncStream) -> None:
    done = await s.final()
    print(done.outputs)  # E: attr-defined


class Point:
    x: int


def output_types(agent: panto.Agent) -> None:
    p: Point = agent.run("p", output=Point)
    p.y  # E: attr-defined
    agent.run("hi").x  # E: attr-defined
    agent.run("p", output=3)  # E: call-overload
