"""The agent's own lifecycle (``with`` / ``close()``), what ``import panto`` costs, the
async API under another async library, and the messages of a bad saved history."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import panto
from conftest import make_agent, text_exchange


def test_with_block_closes_the_agent_and_cancels_its_turn(server):
    server.scenario(text_exchange(["a", "b", "c"]))
    with make_agent(server) as agent:
        assert repr(agent).startswith("panto.Agent(provider='openai'")
        s = agent.stream("x")
        assert isinstance(next(s), panto.MessageStart)
    # Leaving the block cancelled the running turn and closed the agent.
    with pytest.raises(panto.StreamCancelledError):
        for _ in s:
            pass
    for call in (lambda: agent.stream("y"), lambda: agent.run("y"), lambda: agent.history, agent.save_history, agent.clear_history):
        with pytest.raises(panto.ConfigError, match="this Agent is closed"):
            call()
    agent.close()  # idempotent
    assert repr(agent) == "panto.Agent(closed)"


def test_close_without_a_turn_and_async_with(server):
    import asyncio

    server.scenario(text_exchange(["ok"]))

    async def main() -> str:
        async with make_agent(server) as agent:
            text = (await agent.arun("x")).text
        with pytest.raises(panto.ConfigError, match="closed"):
            await agent.arun("x")
        return text

    assert asyncio.run(main()) == "ok"


def _python(code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args, "-c", code], capture_output=True, text=True, timeout=120)


def test_import_panto_does_not_import_asyncio():
    """asyncio is most of what importing panto used to cost (about 100 ms of 130–190);
    it is imported when the async API is first used."""
    r = _python("import sys, panto; print('asyncio' in sys.modules, 'pydantic' in sys.modules)")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False False"
    # -X importtime lists every module imported: asyncio is not among them.
    r = _python("import panto", "-X", "importtime")
    assert r.returncode == 0
    imported = {line.split("|")[-1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")}
    assert "panto" in imported and "asyncio" not in imported
    # ... and the sync API runs without it.
    code = "import sys, panto; panto.tool(lambda x: x, name='f'); print('asyncio' in sys.modules)"
    assert _python(code).stdout.strip() == "False"


def test_trio_gets_an_asyncio_only_error(server):
    trio = pytest.importorskip("trio")
    agent = make_agent(server)

    async def under_trio(call):
        with pytest.raises(RuntimeError) as info:
            await call()
        return str(info.value)

    async def astream():
        async for _ in agent.astream("x"):
            pass

    for call in (astream, lambda: agent.arun("x"), agent.acompact):
        message = trio.run(under_trio, call)
        assert "asyncio only" in message and "this is trio" in message, message
        assert "trio.to_thread.run_sync" in message
    # The agent was never started: no turn is running.
    assert panto.diagnostics()["active_streams"] == 0


@pytest.mark.parametrize(
    "saved,expected",
    [
        ("{not json", "history: not JSON (line 1, column 2); a saved history is the text save_history returned"),
        ('{"version": 1, "messages": [', "history: the JSON text ends early (line 1, column 28): not the whole of a saved history"),
        ('[{"role": "user", "content": []}]', 'history: an array is not a saved history (a saved history is {"version": 1, "messages": [...]})'),
        ('{"messages": []}', 'history: "version" is missing (a saved history is {"version": 1, "messages": [...]})'),
        ('{"version": 2, "messages": []}', "history: version 2 is not supported (expected 1)"),
        ('{"version": 1, "messages": {}}', 'history: "messages" is an object, not an array of messages'),
        ('{"version": 1, "messages": [{"role": "system", "content": []}]}', 'history: messages[0].role is "system": the roles are user, assistant and tool'),
        ('{"version": 1, "messages": [{"role": "user", "content": "hi"}]}', "history: messages[0].content is a string, not an array of blocks"),
        (
            '{"version": 1, "messages": [{"role": "user", "content": [{"type": "txt", "text": "hi"}]}]}',
            'history: messages[0].content[0].type is "txt": the block types are text, reasoning, redacted_reasoning, tool_call, tool_result, opaque, image, document',
        ),
        (
            '{"version": 1, "messages": [{"role": "user", "content": [{"type": "text", "txt": "hi"}]}]}',
            'history: messages[0].content[0] (a "text" block): missing field "text"',
        ),
        (
            '{"version": 1, "messages": [{"role": "assistant", "content": [{"type": "text", "text": "hi"}]}]}',
            "history: message 0: a conversation must start with a user message",
        ),
    ],
)
def test_a_bad_saved_history_is_explained(server, saved, expected):
    agent = make_agent(server)
    with pytest.raises(panto.ConfigError) as info:
        agent.restore_history(saved)
    assert info.value.message == expected
    assert agent.history == []


def test_restore_history_takes_the_text_or_its_parsed_form(server):
    server.scenario(text_exchange(["ok"]))
    agent = make_agent(server)
    agent.run("x")
    saved = agent.save_history()
    other = make_agent(server)
    other.restore_history(json.loads(saved))  # the parsed document is taken too
    assert other.history == agent.history
    with pytest.raises(TypeError, match="save_history"):
        other.restore_history(agent.history)  # the messages alone are not a saved history
