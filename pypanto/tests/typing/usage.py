"""A typed program written against panto, as a user would: ``mypy --strict`` must
accept it, and every ``assert_type`` must hold (test_typing.py runs mypy on it; it is
never imported or run)."""

from __future__ import annotations

import dataclasses
import pickle
from typing import Any, Coroutine, Dict, List, Optional, Set, TypedDict, Union

from typing_extensions import assert_type

import panto
from panto import (
    Agent,
    APIConnectionError,
    APITimeoutError,
    AsyncStream,
    ContentDelta,
    Event,
    MessageComplete,
    MessageEnd,
    PantoError,
    RateLimitError,
    Stream,
    ToolResult,
    Usage,
)


@panto.tool
def add(a: int, b: int = 0) -> int:
    """Adds."""
    return a + b


@panto.tool(name="mul", description="Multiplies.")
async def mul(a: float, b: float) -> float:
    return a * b


def tools_keep_their_signature() -> None:
    assert_type(add(1, b=2), int)
    product = assert_type(mul(1.0, 2.0), Coroutine[Any, Any, float])
    product.close()
    assert_type(add.name, str)
    Agent(model="m", tools=[add, mul, {"name": "by_hand", "parameters": {}}])


def sync_turn(agent: Agent) -> str:
    with agent.stream("hi", reasoning="high") as s:
        assert_type(s, Stream)
        for ev in s:
            assert_type(ev, Event)
            if ev.type == "content_delta":
                assert_type(ev, ContentDelta)
                print(ev.text)
            match ev:
                case ToolResult(call_id=call_id, output=output):
                    assert_type(output, str)
                    print(call_id)
                case MessageEnd(_, stop_reason, usage):
                    assert_type(usage, Usage)
                    print(stop_reason)
                case _:
                    pass
        done = s.final()
    assert_type(done, MessageComplete)
    return done.text


async def async_turn(agent: Agent) -> int:
    async with agent.astream("hi") as s:
        assert_type(s, AsyncStream)
        first = await anext(s)
        assert_type(first, Event)
        async for ev in s:
            if ev.type == "tool_result":
                assert_type(ev, ToolResult)
        done = await s.final()
        assert_type(done, MessageComplete)
    assert_type(await agent.arun("again"), MessageComplete)
    return done.usage.output_tokens


def errors(agent: Agent) -> Optional[float]:
    try:
        agent.run("hi")
    except panto.UnprocessableEntityError as e:
        assert_type(e.status_code, int)
        assert_type(e.request_id, Optional[str])
        assert_type(e.headers, Dict[str, str])
    except panto.APIStatusError as e:
        assert_type(e.status_code, int)
    except RateLimitError as e:
        assert_type(e.status, int)
        return e.retry_after
    except APITimeoutError as e:
        assert isinstance(e, TimeoutError)
    except APIConnectionError:
        pass
    except PantoError as e:
        assert_type(e.kind, str)
    return None


def lifecycle() -> None:
    with Agent(model="m", max_steps=3, retry={"max_retries": 1}, reasoning="low") as agent:
        agent.restore_history(agent.save_history())
        assert_type(agent.history, list[dict[str, Any]])
    agent.close()


def events_hash_and_pickle(ev: Event, usage: Usage) -> Set[Event]:
    again: Event = pickle.loads(pickle.dumps(ev))
    assert_type(Usage(1, 2, 0, 0, 0, True), Usage)
    return {ev, again}


def attachments(agent: Agent) -> str:
    cat = panto.Image.from_path("cat.png")
    assert_type(cat, panto.Image)
    assert_type(panto.Document.from_bytes(b"%PDF-1.4"), panto.Document)
    parts: list[panto.Part] = ["What is in this picture?", cat, panto.Image.from_url("https://x/c.png")]
    return agent.run(parts).text


@dataclasses.dataclass
class City:
    name: str
    population: Optional[int] = None


class CityDict(TypedDict):
    name: str


def structured_output(agent: Agent) -> str:
    city = agent.run("Largest city of Japan?", output=City)
    assert_type(city, City)
    assert_type(agent.run("A city?", output=CityDict), CityDict)
    value = agent.run("A city?", output={"type": "object"})
    assert_type(value, Any)
    assert_type(agent.run("hi"), MessageComplete)
    assert_type(agent.run("hi").output, Optional[Dict[str, Any]])
    assert_type(panto.output_schema(City), Dict[str, Any])
    with agent.stream("hi", output_schema=City) as s:
        s.final()
    with agent.stream("hi", output_schema=False) as s:
        s.final()
    try:
        agent.run("A city?", output=City)
    except panto.OutputInvalidError as e:
        assert_type(e.output, Optional[str])
    return city.name


async def structured_output_async(agent: Agent) -> City:
    return await agent.arun("Largest city of Japan?", output=City)


def durable_turns(agent: Agent) -> str:
    @panto.tool(needs_approval=True)
    def rm(path: str) -> str:
        return path

    @panto.tool(external=True)
    def lookup(sku: str) -> str:
        raise NotImplementedError

    assert_type(rm.needs_approval, bool)
    with agent.stream("hi", defer_tools=True) as s:
        done = s.final()
        cp = s.checkpoint()
        s.steer("also this")
        s.steer(["and", panto.Image(data=b"\x89PNG\r\n\x1a\n")])
        assert_type(s.undelivered(), List[Union[str, List[Any]]])
    assert_type(done.deferred, List[Dict[str, Any]])
    assert cp is not None
    assert_type(cp, panto.Checkpoint)
    text: str = cp.to_json()
    again = panto.Checkpoint.from_json(text)
    assert_type(again.steps, int)
    answers: Dict[str, panto.Answer] = {
        "c1": panto.Approve(),
        "c2": panto.Reject("no"),
        "c3": panto.ToolOutput("42"),
        "c4": panto.ToolOutput(["seen", panto.Image(data=b"\x89PNG\r\n\x1a\n")], is_error=False),
    }
    return agent.resume(again, answers).text() + agent.resume(text).text()


async def durable_turns_async(agent: Agent, cp: panto.Checkpoint) -> str:
    async with agent.aresume(cp, {"c1": panto.Approve()}) as s:
        s.steer("hurry")
        assert_type(s.checkpoint(), Optional[panto.Checkpoint])
        return await s.text()


def mcp_client_hooks() -> Agent:
    def approve(r: panto.SamplingApproval) -> bool:
        assert_type(r.max_tokens, int)
        assert_type(r.system_prompt, Optional[str])
        return r.server == "ev" and all(m["role"] == "user" for m in r.messages)

    def elicit(p: panto.ElicitationPrompt) -> panto.ElicitationAnswer:
        assert_type(p.requested_schema, Dict[str, Any])
        return {"name": "Ada"} if p.message else "decline"

    return Agent(
        model="m",
        mcp_servers={"ev": {"command": "node", "args": ["server.js"], "sampling": True, "elicitation": True}},
        mcp_approve_sampling=approve,
        mcp_elicit=elicit,
    )
