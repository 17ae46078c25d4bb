"""Turns that outlive their stream: checkpoints, resume (in a new agent, from JSON),
deferred calls (approval, external tools, defer_tools), steering, hostile checkpoints,
the async variants — against the scripted server."""

from __future__ import annotations

import asyncio
import json
import pickle
import signal
import subprocess
import sys
import textwrap
import threading
from typing import Any, Dict, List

import pytest

import panto
from conftest import exchange, make_agent, text_exchange, tool_sse, wait_until


def tool_exchange(*calls: Any, **kw: Any) -> Dict[str, Any]:
    return exchange(tool_sse(list(calls)), **kw)


def tool_messages(request: Dict[str, Any]) -> List[Dict[str, Any]]:
    return [m for m in request["body"]["messages"] if m["role"] == "tool"]


def events_of(stream: Any) -> List[Any]:
    return list(stream)


# --------------------------------------------------------------------------------------
# Approval
# --------------------------------------------------------------------------------------


def approval_agent(server: Any, ran: List[str]) -> panto.Agent:
    @panto.tool(needs_approval=True)
    def rm(path: str) -> str:
        """Deletes a file."""
        ran.append(path)
        return f"deleted {path}"

    return make_agent(server, tools=[rm])


def test_a_call_that_needs_approval_pauses_the_turn_and_approve_runs_it(server):
    server.scenario(tool_exchange(("c1", "rm", {"path": "/tmp/x"})), text_exchange(["gone"]))
    ran: List[str] = []
    agent = approval_agent(server, ran)
    with agent.stream("delete /tmp/x") as s:
        done = s.final()
        checkpoint = s.checkpoint()
    assert done.stop_reason == "deferred"
    assert done.deferred == [{"call_id": "c1", "name": "rm", "arguments": {"path": "/tmp/x"}, "reason": "approval"}]
    assert ran == []
    assert len(server.requests()) == 1
    assert checkpoint is not None
    assert checkpoint.deferred == done.deferred
    assert checkpoint.steps == 1

    with agent.resume(checkpoint, {"c1": panto.Approve()}) as s:
        evs = events_of(s)
    done = evs[-1]
    assert isinstance(done, panto.MessageComplete)
    assert (done.stop_reason, done.text, done.messages, done.deferred) == ("end_turn", "gone", 2, [])
    assert ran == ["/tmp/x"]
    results = [e for e in evs if isinstance(e, panto.ToolResult)]
    assert [(r.call_id, r.output, r.is_error) for r in results] == [("c1", "deleted /tmp/x", False)]
    reqs = server.requests()
    assert len(reqs) == 2
    assert tool_messages(reqs[1])[0]["content"] == "deleted /tmp/x"
    # The whole turn's usage: both responses.
    assert done.usage.input_tokens == 20


def test_reject_reaches_the_model_as_an_error_result_and_the_tool_never_runs(server):
    server.scenario(tool_exchange(("c1", "rm", {"path": "/"})), text_exchange(["ok, not deleting"]))
    ran: List[str] = []
    agent = approval_agent(server, ran)
    with agent.stream("delete /") as s:
        assert s.final().stop_reason == "deferred"
        saved = s.checkpoint()
    assert saved is not None
    text = agent.resume(saved.to_json(), {"c1": panto.Reject("never the root")}).text()
    assert text == "ok, not deleting"
    assert ran == []
    result = tool_messages(server.requests()[1])[0]["content"]
    assert "rejected" in result and "never the root" in result


def test_an_unanswered_call_pauses_again(server):
    server.scenario(tool_exchange(("c1", "rm", {"path": "/tmp/x"})), text_exchange(["gone"]))
    agent = approval_agent(server, [])
    with agent.stream("delete") as s:
        s.final()
        cp = s.checkpoint()
    assert cp is not None
    with agent.resume(cp) as s:
        done = s.final()
        again = s.checkpoint()
    assert done.stop_reason == "deferred" and [d["call_id"] for d in done.deferred] == ["c1"]
    assert again is not None and again.deferred == cp.deferred
    assert len(server.requests()) == 1


# --------------------------------------------------------------------------------------
# External tools and defer_tools
# --------------------------------------------------------------------------------------


def test_an_external_tool_is_declared_never_run_and_its_result_taken_on_resume(server):
    server.scenario(
        tool_exchange(("c1", "lookup", {"sku": "A-1"}), ("c2", "ticket", {"title": "t"})),
        text_exchange(["12 in stock, ticket 7"]),
    )

    @panto.tool(external=True)
    def lookup(sku: str) -> str:
        """Stock of a product (answered by the warehouse service)."""
        raise AssertionError("an external tool is never called by panto")

    ticket = {
        "name": "ticket",
        "description": "Opens a ticket.",
        "parameters": {"type": "object", "properties": {"title": {"type": "string"}}},
        "external": True,
    }
    agent = make_agent(server, tools=[lookup, ticket])
    assert "external" not in server.requests()  # nothing sent yet
    with agent.stream("stock of A-1?") as s:
        done = s.final()
        cp = s.checkpoint()
    assert [(d["call_id"], d["reason"]) for d in done.deferred] == [("c1", "external"), ("c2", "external")]
    offered = [t["function"]["name"] for t in server.requests()[0]["body"]["tools"]]
    assert offered == ["lookup", "ticket"]
    assert cp is not None
    answers = {"c1": panto.ToolOutput("12"), "c2": panto.ToolOutput("ticket 7 opened", is_error=False)}
    assert agent.resume(cp, answers).text() == "12 in stock, ticket 7"
    results = tool_messages(server.requests()[1])
    assert [m["content"] for m in results] == ["12", "ticket 7 opened"]


def test_defer_tools_defers_every_call_and_approve_or_a_result_continues(server):
    server.scenario(
        tool_exchange(("c1", "weather", {"city": "Paris"}), ("c2", "weather", {"city": "Rome"})),
        text_exchange(["Paris 18, Rome 25"]),
    )
    ran: List[str] = []

    @panto.tool
    def weather(city: str) -> str:
        ran.append(city)
        return f"{city}: 18"

    agent = make_agent(server, tools=[weather])
    with agent.stream("weather?", defer_tools=True) as s:
        done = s.final()
        cp = s.checkpoint()
    assert [d["reason"] for d in done.deferred] == ["deferred", "deferred"]
    assert ran == []
    assert cp is not None
    text = agent.resume(cp, {"c1": panto.Approve(), "c2": panto.ToolOutput("Rome: 25")}).text()
    assert text == "Paris 18, Rome 25"
    assert ran == ["Paris"]
    assert [m["content"] for m in tool_messages(server.requests()[1])] == ["Paris: 18", "Rome: 25"]


def test_answers_that_do_not_fit_are_config_errors_or_type_errors(server):
    server.scenario(tool_exchange(("c1", "rm", {"path": "/tmp/x"})))
    agent = approval_agent(server, [])
    with agent.stream("delete") as s:
        s.final()
        cp = s.checkpoint()
    assert cp is not None
    with pytest.raises(panto.ConfigError, match="c9"):
        agent.resume(cp, {"c9": panto.Approve()})
    with pytest.raises(panto.ConfigError, match="needs approval"):
        agent.resume(cp, {"c1": panto.ToolOutput("done")})
    with pytest.raises(TypeError, match="panto.Approve"):
        agent.resume(cp, {"c1": "yes"})  # type: ignore[dict-item]
    with pytest.raises(panto.ConfigError, match="external"):
        panto.tool(lambda: None, name="x", needs_approval=True, external=True)
    # None of those started anything: the agent is free.
    assert len(server.requests()) == 1
    agent.clear_history()


# --------------------------------------------------------------------------------------
# Checkpoints: resume in a new agent, no repeated request, history as uninterrupted
# --------------------------------------------------------------------------------------


def scripted_two_steps(server: Any) -> None:
    server.scenario(tool_exchange(("c1", "slow", {"x": 1})), text_exchange(["the answer is 2"]))


def test_resume_in_a_new_agent_requests_nothing_the_checkpoint_holds(server):
    # The uninterrupted run.
    scripted_two_steps(server)

    @panto.tool
    def slow(x: int) -> str:
        return str(x + 1)

    straight = make_agent(server, tools=[slow])
    expected = straight.run("compute").text
    expected_history = straight.history
    assert len(server.requests()) == 2

    # The interrupted one: the checkpoint is taken once the first response is complete
    # and its call is running; the stream is then cancelled (the process "dies").
    scripted_two_steps(server)
    release = threading.Event()
    started = threading.Event()

    @panto.tool(name="slow")
    def blocking(x: int) -> str:
        started.set()
        release.wait(30)
        return str(x + 1)

    first = make_agent(server, tools=[blocking])
    s = first.stream("compute")
    for ev in s:
        if isinstance(ev, panto.ToolCallStart):
            break
    started.wait(10)
    cp = s.checkpoint()
    assert cp is not None and cp.steps == 1 and cp.deferred == []
    saved = cp.to_json()
    s.close()
    release.set()
    assert len(server.requests()) == 1

    # A new agent with the same tools resumes it: the call runs again, the first
    # response is not requested again.
    fresh = make_agent(server, tools=[slow])
    with fresh.resume(panto.Checkpoint.from_json(saved)) as s:
        done = s.final()
    assert done.text == expected
    assert done.messages == 2
    assert len(server.requests()) == 2
    assert fresh.history == expected_history


def test_the_checkpoint_after_a_tool_result_holds_it_and_it_does_not_run_again(server):
    server.scenario(tool_exchange(("c1", "count", {}), ("c2", "count", {})), text_exchange(["done"]))
    calls: List[str] = []
    gate = threading.Event()

    @panto.tool
    def count() -> str:
        calls.append("x")
        if len(calls) == 2:
            gate.wait(30)
        return str(len(calls))

    agent = make_agent(server, tools=[count], tool_concurrency=1)
    s = agent.stream("count twice")
    for ev in s:
        if isinstance(ev, panto.ToolResult):
            break
    cp = s.checkpoint()
    assert cp is not None
    doc = json.loads(cp.to_json())
    assert [c.get("result", {}).get("output") for c in doc["pending"]["calls"]] == ["1", None]
    s.close()
    gate.set()

    calls.clear()
    again = make_agent(server, tools=[count])
    assert again.resume(cp).text() == "done"
    assert calls == ["x"]  # only the call without a result ran again
    assert [m["content"] for m in tool_messages(server.requests()[1])] == ["1", "1"]


def test_a_checkpoint_pickles_as_its_json_and_holds_no_api_key(server):
    server.scenario(tool_exchange(("c1", "rm", {"path": "/tmp/x"})))
    agent = approval_agent(server, [])
    with agent.stream("delete") as s:
        s.final()
        cp = s.checkpoint()
    assert cp is not None
    assert pickle.loads(pickle.dumps(cp)) == cp
    assert "sk-test-0123456789" not in cp.to_json()
    assert repr(cp) == "<panto.Checkpoint steps=1 deferred=1>"


# --------------------------------------------------------------------------------------
# Hostile checkpoints
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, says",
    [
        ("", "not a JSON object"),
        ("garbage", "not a JSON object"),
        ('{"panto_checkpoint": 1, "conversation": [', "not a JSON object"),
        ("{}", "not a panto checkpoint"),
        ('{"panto_checkpoint": 99}', "newer"),
        ('{"panto_checkpoint": 1}', "checkpoint"),
        ("[" * 200_000 + "]" * 200_000, "checkpoint"),
        ('{"panto_checkpoint": ' + "[" * 100_000, "checkpoint"),
    ],
)
def test_a_hostile_checkpoint_is_a_config_error(text, says):
    with pytest.raises(panto.ConfigError, match=says):
        panto.Checkpoint.from_json(text)


def test_a_checkpoint_over_the_size_limit_is_refused_before_it_is_parsed():
    big = '{"panto_checkpoint": 1, "pad": "' + "x" * (100 << 20) + '"}'
    with pytest.raises(panto.ConfigError, match="more than"):
        panto.Checkpoint.from_json(big)


def test_a_tampered_checkpoint_and_one_needing_a_missing_tool_are_config_errors(server):
    server.scenario(tool_exchange(("c1", "rm", {"path": "/tmp/x"})))
    agent = approval_agent(server, [])
    with agent.stream("delete") as s:
        s.final()
        cp = s.checkpoint()
    assert cp is not None
    doc = json.loads(cp.to_json())
    doc["pending"]["calls"][0]["call_id"] = "forged"
    with pytest.raises(panto.ConfigError, match="forged"):
        panto.Checkpoint.from_json(json.dumps(doc))
    # Whether the agent has the tools is known once its MCP servers started: the
    # resumed stream fails, before any request, and the history is unchanged.
    without_rm = make_agent(server)
    without_rm.restore_history(agent.save_history())
    before = without_rm.history
    with pytest.raises(panto.ConfigError, match="needs the tool \"rm\""):
        without_rm.resume(cp, {"c1": panto.Approve()}).final()
    assert without_rm.history == before
    assert len(server.requests()) == 1
    with pytest.raises(TypeError):
        without_rm.resume(42)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------
# Steering
# --------------------------------------------------------------------------------------


def test_steer_during_a_host_tool_call_is_delivered_before_the_next_request(server):
    server.scenario(tool_exchange(("c1", "slow", {})), text_exchange(["noted: use metric"]))
    in_tool = threading.Event()
    release = threading.Event()

    @panto.tool
    def slow() -> str:
        in_tool.set()
        release.wait(30)
        return "data"

    agent = make_agent(server, tools=[slow])
    evs: List[Any] = []
    with agent.stream("go") as s:
        for ev in s:
            evs.append(ev)
            if isinstance(ev, panto.ToolCallStart):
                in_tool.wait(10)
                # From another thread, as a UI would.
                t = threading.Thread(target=s.steer, args=("use metric units",))
                t.start()
                t.join()
                release.set()
    delivered = [e for e in evs if isinstance(e, panto.SteeringDelivered)]
    assert [(d.message, d.text) for d in delivered] == [(1, "use metric units")]
    kinds = [type(e).__name__ for e in evs]
    assert kinds.index("ToolResult") < kinds.index("SteeringDelivered") < len(kinds) - 1
    body = server.requests()[1]["body"]["messages"]
    assert [m["role"] for m in body[-3:]] == ["assistant", "tool", "user"]
    assert "use metric units" in json.dumps(body[-1])
    assert s.undelivered() == []


def test_a_message_not_delivered_before_the_turn_was_cancelled_is_given_back(server):
    server.scenario(tool_exchange(("c1", "slow", {})))
    in_tool = threading.Event()
    release = threading.Event()

    @panto.tool
    def slow() -> str:
        in_tool.set()
        release.wait(30)
        return "data"

    agent = make_agent(server, tools=[slow])
    s = agent.stream("go")
    for ev in s:
        if isinstance(ev, panto.ToolCallStart):
            in_tool.wait(10)
            s.steer(["first", "second part"])
            s.cancel()
            release.set()
            break
    with pytest.raises(panto.StreamCancelledError):
        s.final()
    assert s.undelivered() == ["first\nsecond part"]
    assert s.undelivered() == []  # given once
    with pytest.raises(panto.ConfigError, match="ended"):
        s.steer("too late")


# --------------------------------------------------------------------------------------
# Async
# --------------------------------------------------------------------------------------


def test_async_approve_and_steer(server):
    server.scenario(
        tool_exchange(("c1", "rm", {"path": "/tmp/x"})),
        tool_exchange(("c2", "slow", {})),
        text_exchange(["all done"]),
    )
    ran: List[str] = []

    @panto.tool(needs_approval=True)
    async def rm(path: str) -> str:
        ran.append(path)
        return "deleted"

    release = asyncio.Event()

    @panto.tool
    async def slow() -> str:
        await release.wait()
        return "slow done"

    async def main() -> None:
        agent = make_agent(server, tools=[rm, slow])
        async with agent.astream("delete") as s:
            done = await s.final()
            cp = s.checkpoint()
        assert done.stop_reason == "deferred" and cp is not None
        evs: List[Any] = []
        async with agent.aresume(cp.to_json(), {"c1": panto.Approve()}) as s:
            async for ev in s:
                evs.append(ev)
                if isinstance(ev, panto.ToolCallStart) and ev.name == "slow":
                    s.steer("hurry")
                    release.set()
        assert ran == ["/tmp/x"]
        assert isinstance(evs[-1], panto.MessageComplete) and evs[-1].text == "all done"
        assert [e.text for e in evs if isinstance(e, panto.SteeringDelivered)] == ["hurry"]
        assert s.undelivered() == []

    asyncio.run(main())
    assert len(server.requests()) == 3


# --------------------------------------------------------------------------------------
# The crash test: a process SIGKILLed while a tool runs, resumed by another
# --------------------------------------------------------------------------------------

CRASH_CHILD = textwrap.dedent(
    """
    import os, sys, threading, time
    import panto

    base_url, checkpoint_path, release_path = sys.argv[1:4]
    stream = None
    have_stream = threading.Event()

    def save():
        cp = stream.checkpoint() if stream is not None else None
        if cp is not None:
            # Atomically replaced: a reader sees the old document or the new one.
            tmp = checkpoint_path + ".tmp"
            with open(tmp, "w") as f:
                f.write(cp.to_json())
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, checkpoint_path)

    @panto.tool
    def measure(x: int) -> str:
        '''Measures x (slowly).'''
        # No event follows the response's message_end until this call's result, so the
        # checkpoint that holds the response is saved here, as the tool starts.
        have_stream.wait()
        save()
        print("in tool", flush=True)
        while not os.path.exists(release_path):   # blocks until killed
            time.sleep(0.01)
        return str(x * 2)

    agent = panto.Agent(model="gpt-test", base_url=base_url, api_key="sk-test-0123456789",
                        retry={"max_retries": 0}, tools=[measure])
    with agent.stream("measure 21") as s:
        stream = s
        have_stream.set()
        for ev in s:
            save()
    print("finished", flush=True)
    """
)


def crash_scenario(server: Any) -> None:
    server.scenario(tool_exchange(("c1", "measure", {"x": 21})), text_exchange(["it measures 42"]))


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_a_turn_killed_while_a_tool_runs_resumes_in_a_new_process_from_its_checkpoint(server, tmp_path):
    @panto.tool
    def measure(x: int) -> str:
        """Measures x (slowly)."""
        return str(x * 2)

    # The uninterrupted run, for comparison.
    crash_scenario(server)
    straight = make_agent(server, tools=[measure])
    expected = straight.run("measure 21")
    expected_history = straight.history
    uninterrupted_requests = [r["body"] for r in server.requests()]
    assert len(uninterrupted_requests) == 2

    # The run that dies: SIGKILLed while its tool blocks.
    crash_scenario(server)
    script = tmp_path / "child.py"
    script.write_text(CRASH_CHILD)
    checkpoint_path = tmp_path / "turn.checkpoint"
    child = subprocess.Popen(
        [sys.executable, str(script), server.base_url, str(checkpoint_path), str(tmp_path / "never")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line == "in tool\n", (line, child.stderr.read() if child.stderr else "")
    finally:
        child.send_signal(signal.SIGKILL)
        out, err = child.communicate(timeout=30)
    assert child.returncode == -signal.SIGKILL
    assert "finished" not in out
    assert len(server.requests()) == 1

    # A new agent (this process) resumes from the file.
    saved = panto.Checkpoint.from_json(checkpoint_path.read_text())
    assert saved.steps == 1
    resumed = make_agent(server, tools=[measure])
    with resumed.resume(saved) as s:
        done = s.final()
    assert (done.text, done.stop_reason, done.messages) == (expected.text, expected.stop_reason, expected.messages)
    assert done.usage == expected.usage
    # No repeated request: the first response came from the checkpoint; the one request
    # made is the uninterrupted run's second.
    bodies = [r["body"] for r in server.requests()]
    assert len(bodies) == 2
    assert bodies[1] == uninterrupted_requests[1]
    assert resumed.history == expected_history


# --------------------------------------------------------------------------------------
# docs/durable-turns.md's Python example, line for line
# --------------------------------------------------------------------------------------


def test_docs_example_approve_later(server, tmp_path):
    server.scenario(
        tool_exchange(("call_1", "delete_file", {"path": str(tmp_path / "old.log")})),
        text_exchange(["Deleted it."]),
    )
    (tmp_path / "old.log").write_text("x")
    base_url = server.base_url
    import os

    @panto.tool(needs_approval=True)
    def delete_file(path: str) -> str:
        """Deletes a file."""
        os.remove(path)
        return f"deleted {path}"

    agent = panto.Agent(model="gpt-4o-mini", base_url=base_url, tools=[delete_file])
    with agent.stream("Clean up old.log") as stream:
        done = stream.final()
        saved = stream.checkpoint().to_json()  # store it anywhere
    assert done.stop_reason == "deferred"

    # Later, in any process, with an agent that has the same tools:
    call = panto.Checkpoint.from_json(saved).deferred[0]
    print(f"approve {call['name']} {call['arguments']}?")
    agent = panto.Agent(model="gpt-4o-mini", base_url=base_url, tools=[delete_file])
    answer = agent.resume(saved, {call["call_id"]: panto.Approve()}).text()

    assert answer == "Deleted it."
    assert not (tmp_path / "old.log").exists()
    assert len(server.requests()) == 2
