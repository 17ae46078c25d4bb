"""The demo turn from Python: the weather tool is a Python function, the answer streams
to the terminal, once with ``agent.stream()`` and once (``--async``) with
``agent.astream()``. ``scripts/demo.sh --all`` runs it against panto-testserver.

    python demo.py BASE_URL [--async]   (an OpenAI-compatible endpoint with its /v1)
"""

import asyncio
import json
import sys

import panto


@panto.tool
def weather(city: str) -> str:
    """Current weather of a city."""
    return json.dumps({"city": city, "temp_c": 18, "sky": "sunny"}, separators=(",", ":"))


def show(event: panto.ToolCallStart | panto.ToolResult | panto.ContentDelta) -> None:
    if isinstance(event, panto.ContentDelta) and event.kind == "text":
        print(event.text, end="", flush=True)
    elif isinstance(event, panto.ToolCallStart):
        print(f"→ {event.name}({json.dumps(event.arguments)})")
    elif isinstance(event, panto.ToolResult):
        print(f"← {event.output}")


def main(base_url: str) -> None:
    agent = panto.Agent(model="gpt-4o-mini", base_url=base_url, tools=[weather])
    with agent.stream("What's the weather in Paris?") as stream:
        for event in stream:
            show(event)
    print()


async def amain(base_url: str) -> None:
    agent = panto.Agent(model="gpt-4o-mini", base_url=base_url, tools=[weather])
    async for event in agent.astream("What's the weather in Paris?"):
        show(event)
    print()


if __name__ == "__main__":
    url = sys.argv[1] if len(sys.argv) > 1 else "https://api.openai.com/v1"
    if "--async" in sys.argv[2:]:
        asyncio.run(amain(url))
    else:
        main(url)
