"""The agent's MCP servers' resources and prompts from Python: ``Agent.mcp_resources()``,
``mcp_read_resource()``, ``mcp_prompts()``, ``mcp_get_prompt()`` and their async
variants, against the fixture server (tests/mcp/fixture_server.py) from the pinned venv
of tests/mcp/venv.sh: what they answer, the errors as their exception classes, a read
part attached to a turn, and cancellation (a cancelled task withdraws the request)."""

from __future__ import annotations

import asyncio
import subprocess
import uuid
from pathlib import Path

import pytest

import panto
from conftest import REPO, make_agent, text_exchange

FIXTURE = str(REPO / "tests" / "mcp" / "fixture_server.py")


@pytest.fixture(scope="session")
def mcp_venv() -> Path:
    out = subprocess.run(["bash", str(REPO / "tests" / "mcp" / "venv.sh")], capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


def fixture_server(venv: Path, *extra: str) -> dict:
    return {"command": str(venv / "bin" / "python"), "args": [FIXTURE, *extra]}


def fixture_agent(venv: Path, *extra: str) -> panto.Agent:
    return panto.Agent(model="m", api_key="sk-test", mcp_servers={"fx": fixture_server(venv, *extra)})


def test_resources_are_listed_and_read(mcp_venv):
    with fixture_agent(mcp_venv) as agent:
        resources = agent.mcp_resources()
        assert [r["uri"] for r in resources] == [
            "fixture://notes",
            "fixture://pixel.png",
            "file:///tmp/report.txt",
            "fixture://data.bin",
        ]
        assert resources[0] == {
            "server": "fx",
            "uri": "fixture://notes",
            "name": "notes",
            "title": "The notes",
            "description": "Some notes.",
            "mime_type": "text/plain",
        }
        assert agent.mcp_resources("fx") == resources
        notes = agent.mcp_read_resource("fixture://notes")
        assert notes["contents"][0]["text"] == "the notes"
        assert notes["contents"][0]["part"] == "[resource: fixture://notes type text/plain]\nthe notes"
        pixel = agent.mcp_read_resource("fixture://pixel.png", server="fx")
        image = pixel["contents"][0]["part"]
        assert isinstance(image, panto.Image)
        assert image.media_type == "image/png"
        assert agent.mcp_read_resource("fixture://data.bin")["contents"][0]["blob"] == "AAEC"
        with pytest.raises(panto.NotFoundError, match="no resource fixture://nothing"):
            agent.mcp_read_resource("fixture://nothing")
        with pytest.raises(panto.ConfigError, match=r"\(the servers: fx\)"):
            agent.mcp_resources("nope")


def test_prompts_are_listed_and_filled_in(mcp_venv):
    with fixture_agent(mcp_venv) as agent:
        prompts = agent.mcp_prompts()
        assert [p["name"] for p in prompts] == ["greet", "picture"]
        assert prompts[0]["arguments"] == [
            {"name": "name", "description": "Who to greet.", "required": True},
            {"name": "style", "description": "How.", "required": False},
        ]
        got = agent.mcp_get_prompt("greet", {"name": "Py", "style": "calm"})
        assert got == {
            "description": "A greeting.",
            "messages": [
                {"role": "user", "content": ["Say hello to Py in a calm way"]},
                {"role": "assistant", "content": ["Hello, Py!"]},
            ],
        }
        picture = agent.mcp_get_prompt("picture")
        assert isinstance(picture["messages"][0]["content"][0], panto.Image)
        assert picture["messages"][1]["content"] == ["[resource: fixture://notes type text/plain]\nthe notes"]
        with pytest.raises(panto.BadRequestError, match="greet needs the argument name"):
            agent.mcp_get_prompt("greet")


def test_a_read_part_is_attached_to_a_turn(mcp_venv, server):
    server.scenario(text_exchange(["a pixel"]))
    agent = make_agent(server, mcp_servers={"fx": fixture_server(mcp_venv)})
    try:
        part = agent.mcp_read_resource("fixture://pixel.png")["contents"][0]["part"]
        assert agent.run(["What is this?", part]).text == "a pixel"
        sent = server.requests()[0]["body"]["messages"][-1]["content"]
        assert sent[1]["type"] == "image_url"
        assert sent[1]["image_url"]["url"].startswith("data:image/png;base64,iVBOR")
    finally:
        agent.close()


def test_without_servers_or_closed_it_is_a_config_error(mcp_venv):
    plain = panto.Agent(model="m", api_key="sk-test")
    with pytest.raises(panto.ConfigError, match="no MCP servers"):
        plain.mcp_prompts()
    agent = fixture_agent(mcp_venv)
    agent.close()
    with pytest.raises(panto.ConfigError, match="closed"):
        agent.mcp_resources()
    # A shared set answers through every agent that uses it.
    with panto.MCPServers({"fx": fixture_server(mcp_venv)}) as servers:
        a = panto.Agent(model="m", api_key="sk-test", mcp_servers=servers)
        assert len(a.mcp_prompts("fx")) == 2


async def test_the_async_variants(mcp_venv):
    with fixture_agent(mcp_venv) as agent:
        assert len(await agent.amcp_resources()) == 4
        read = await agent.amcp_read_resource("fixture://greeting/Async")
        assert read["contents"][0]["text"] == "hello Async"
        assert [p["name"] for p in await agent.amcp_prompts("fx")] == ["greet", "picture"]
        got = await agent.amcp_get_prompt("greet", {"name": "A"})
        assert got["messages"][1]["content"] == ["Hello, A!"]
        with pytest.raises(panto.NotFoundError):
            await agent.amcp_read_resource("fixture://nothing")


async def test_a_cancelled_task_withdraws_its_read(mcp_venv, tmp_path):
    marker = tmp_path / f"cancel-{uuid.uuid4().hex}"
    started = Path(f"{marker}.started")
    with fixture_agent(mcp_venv, "--cancel-marker", str(marker)) as agent:
        task = asyncio.create_task(agent.amcp_read_resource("fixture://hang"))
        deadline = asyncio.get_running_loop().time() + 60
        while not started.exists():
            assert asyncio.get_running_loop().time() < deadline, "the server never got the read"
            await asyncio.sleep(0.01)
        assert not task.done()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 60)
        # The request was withdrawn: the server saw notifications/cancelled.
        while not marker.exists():
            assert asyncio.get_running_loop().time() < deadline, "the server was not told"
            await asyncio.sleep(0.01)
        # The agent's servers still answer.
        assert len(agent.mcp_prompts()) == 2
