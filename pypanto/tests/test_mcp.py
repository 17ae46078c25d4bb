"""MCP servers as tools from Python: ``Agent(mcp_servers={...})`` (servers of the agent's
own) and ``panto.MCPServers`` (started once for several agents, stopped by its ``with``
block), against the fixture server (tests/mcp/fixture_server.py) and mcp-server-time,
installed at pinned versions by tests/mcp/venv.sh."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path

import pytest

import panto
from conftest import REPO, exchange, make_agent, text_exchange, tool_sse, wait_until

FIXTURE = str(REPO / "tests" / "mcp" / "fixture_server.py")


@pytest.fixture(scope="session")
def mcp_venv() -> Path:
    out = subprocess.run(["bash", str(REPO / "tests" / "mcp" / "venv.sh")], capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


def fixture_server(venv: Path, *extra: str) -> dict:
    return {"command": str(venv / "bin" / "python"), "args": [FIXTURE, *extra]}


def results(events):
    """(name, output, is_error) of each tool result, in the order of the calls."""
    order = [e.call_id for e in events if isinstance(e, panto.ToolCallStart)]
    done = {e.call_id: (e.name, e.output, e.is_error) for e in events if isinstance(e, panto.ToolResult)}
    return [done[c] for c in order]


def group_members(pgid: int) -> int:
    """Live processes of process group `pgid` (Linux /proc)."""
    n = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 2 and fields[0] != "Z" and int(fields[2]) == pgid:
            n += 1
    return n


def pids_with(marker: str):
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmd:
            out.append(int(pid))
    return out


def test_agent_calls_tools_of_its_own_mcp_servers(server, mcp_venv):
    server.scenario(
        exchange(tool_sse([
            ("c1", "fx__echo", {"text": "from python"}),
            ("c2", "fx__structured", {"city": "Lima"}),
            ("c3", "time__get_current_time", {"timezone": "UTC"}),
            ("c4", "fx__fail", {}),
        ])),
        text_exchange(["done"]),
    )
    agent = make_agent(
        server,
        mcp_servers={
            "fx": fixture_server(mcp_venv),
            "time": {"command": str(mcp_venv / "bin" / "mcp-server-time"), "args": ["--local-timezone", "UTC"]},
        },
    )
    events = list(agent.stream("go"))
    assert events[-1].text == "done"
    got = results(events)
    assert got[0] == ("fx__echo", "echo: from python", False)
    assert got[1] == ("fx__structured", '{"city":"Lima","temperature":21}', False)
    assert got[2][0] == "time__get_current_time" and not got[2][2]
    assert json.loads(got[2][1])["timezone"] == "UTC"
    assert got[3] == ("fx__fail", "the fixture failed on purpose", True)
    # Not host tools: the binding had nothing to answer.
    assert not any(e.host for e in events if isinstance(e, panto.ToolCallStart))
    offered = [t["function"]["name"] for t in server.requests()[0]["body"]["tools"]]
    assert "fx__echo" in offered and "time__convert_time" in offered


def test_a_server_that_cannot_start_raises_before_anything_is_sent(server, mcp_venv):
    server.scenario(text_exchange(["never"]))
    agent = make_agent(server, mcp_servers={"bad": fixture_server(mcp_venv, "--fail-start")})
    with pytest.raises(panto.APIConnectionError) as info:
        list(agent.stream("go"))
    message = str(info.value)
    assert 'MCP server "bad"' in message and "refusing to start" in message
    assert server.requests() == []


def test_bad_mcp_config_names_the_key(server):
    with pytest.raises(panto.ConfigError) as info:
        make_agent(server, mcp_servers={"x": {"command": "a", "colour": 1}})
    assert "mcp_servers.x.colour: unknown key" in str(info.value)
    with pytest.raises(panto.ConfigError):
        panto.MCPServers({"x": {}})


def test_mcp_servers_start_once_for_several_agents_and_stop_with_the_block(server, mcp_venv):
    marker = f"panto-py-{uuid.uuid4().hex}"
    server.scenario(
        exchange(tool_sse([("a", "fx__echo", {"text": "one"})])),
        text_exchange(["first"]),
        exchange(tool_sse([("b", "fx__echo", {"text": "two"})])),
        text_exchange(["second"]),
        text_exchange(["never"]),
    )
    with panto.MCPServers({"fx": fixture_server(mcp_venv, "--spawn-child", "--cancel-marker", marker)}) as servers:
        assert servers.names == ["fx"]
        a = make_agent(server, mcp_servers=servers)
        b = make_agent(server, mcp_servers=servers)
        assert pids_with(marker) == [], "servers start lazily"
        assert list(a.stream("go"))[-1].text == "first"
        pids = pids_with(marker)
        assert len(pids) == 1
        assert list(b.stream("go"))[-1].text == "second"
        assert pids_with(marker) == pids, "the second agent used the same server"
        pgid = pids[0]
        wait_until(lambda: group_members(pgid) == 2, timeout=60, what="the server and its child")
    # The block ended: the server's whole process group is gone, and the agents' next
    # turn says why.
    wait_until(lambda: group_members(pgid) == 0, timeout=60, what="the server's processes to end")
    with pytest.raises(panto.ConfigError) as info:
        list(a.stream("again"))
    assert "closed" in str(info.value)


def test_a_dropped_agent_takes_its_servers_with_it(server, mcp_venv):
    marker = f"panto-py-{uuid.uuid4().hex}"
    server.scenario(text_exchange(["hello"]))
    agent = make_agent(server, mcp_servers={"fx": fixture_server(mcp_venv, "--cancel-marker", marker)})
    assert list(agent.stream("go"))[-1].text == "hello"
    (pgid,) = pids_with(marker)
    assert group_members(pgid) == 1
    agent.close()
    del agent
    import gc

    gc.collect()
    wait_until(lambda: group_members(pgid) == 0, timeout=60, what="the server's processes to end")


def test_progress_and_server_logs_arrive_as_events_before_the_result(server, mcp_venv):
    server.scenario(
        exchange(tool_sse([("c1", "fx__report", {"steps": 2, "interval_ms": 150})])),
        text_exchange(["done"]),
    )
    fx = fixture_server(mcp_venv, "--progress-tools")
    fx["log_level"] = "warning"
    agent = make_agent(server, mcp_servers={"fx": fx})
    events = list(agent.stream("go"))
    assert events[-1].text == "done"
    kinds = [type(e).__name__ for e in events]
    result_at = kinds.index("ToolResult")
    progress = [e for e in events if isinstance(e, panto.ToolProgress)]
    logs = [e for e in events if isinstance(e, panto.ServerLog)]
    # Coalescing may merge reports, never lose the last; every log line comes through.
    last = progress[-1]
    assert (last.message, last.call_id, last.name) == (0, "c1", "fx__report")
    assert (last.progress, last.total, last.text) == (2.0, 2.0, "step 2")
    assert [(e.server, e.level, e.logger, e.data) for e in logs] == [
        ("fx", "warning", "fixture", "warn 1"),
        ("fx", "warning", "fixture", "warn 2"),
    ]
    assert max(i for i, k in enumerate(kinds) if k in ("ToolProgress", "ServerLog")) < result_at
    # The typed event and its canonical JSON agree.
    assert json.loads(last.to_json()) == {
        "type": "tool_progress", "message": 0, "call_id": "c1", "name": "fx__report",
        "progress": 2.0, "total": 2.0, "text": "step 2",
    }
    assert last.to_dict() == json.loads(last.to_json())
    assert json.loads(logs[0].to_json()) == {
        "type": "server_log", "server": "fx", "level": "warning", "logger": "fixture", "data": "warn 1",
    }


def test_an_mcp_tool_is_called_outside_a_turn(server, mcp_venv, tmp_path):
    """``call_mcp_tool`` / ``acall_mcp_tool``: the answer-shaped ``ToolOutput`` (text,
    text and an image, the tool's failure), ``ConfigError`` for an unknown tool, the
    conversation untouched and nothing sent to the model, and a call blocked in the
    server cancelled by cancelling its task (the server is told)."""
    import asyncio

    marker = str(tmp_path / "hang")
    agent = make_agent(server, mcp_servers={"fx": fixture_server(mcp_venv, "--cancel-marker", marker)})
    assert agent.call_mcp_tool("fx__echo", {"text": "hi"}) == panto.ToolOutput("echo: hi")
    image = agent.call_mcp_tool("fx__image")
    assert not image.is_error and isinstance(image.output, list)
    assert image.output[0] == "a pixel:"
    assert isinstance(image.output[1], panto.Image) and image.output[1].media_type == "image/png"
    failed = agent.call_mcp_tool("fx__fail", {})
    assert failed.is_error and "failed on purpose" in str(failed.output)
    with pytest.raises(panto.ConfigError) as info:
        agent.call_mcp_tool("fx__nope")
    assert "fx__nope" in str(info.value)
    with pytest.raises(panto.ConfigError):
        agent.call_mcp_tool("fx__echo", ["not", "a", "mapping"])  # type: ignore[arg-type]

    async def cancelled() -> None:
        assert await agent.acall_mcp_tool("fx__echo", {"text": "async"}) == panto.ToolOutput("echo: async")
        task = asyncio.ensure_future(agent.acall_mcp_tool("fx__hang"))
        while not os.path.exists(marker + ".started"):
            assert not task.done()
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 60)

    asyncio.run(cancelled())
    wait_until(lambda: os.path.exists(marker), timeout=60, what="the server to see the cancellation")
    assert agent.history == []
    assert server.requests() == []
    agent.close()
