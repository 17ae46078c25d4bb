"""The activities a worker registers for ``TurnWorkflow``: the model step (the turn
resumed from its checkpoint with every call deferred, its text sent live to the
workflow) and one tool call (a Python tool of the agent, or an MCP server's tool through
``Agent.acall_mcp_tool``). ``activities(agents)`` makes them for a mapping of agent
names to factories."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Union

from temporalio import activity
from temporalio.exceptions import ApplicationError

import panto
from panto._tools import render_exception, render_output

from ._workflow import (
    MODEL_STEP,
    NON_RETRYABLE_KINDS,
    TOOL_CALL,
    DeferredCall,
    StepInput,
    StepOutput,
    Streamed,
    ToolInput,
)

#: An agent factory: a function that builds the ``panto.Agent``, or the ``panto.Agent``
#: keyword arguments (then panto's own retries are turned off: Temporal retries).
AgentFactory = Union[Callable[[], panto.Agent], Mapping[str, Any]]

#: How often a running activity heartbeats, and at most how often a model step sends
#: its text to the workflow (each send is a workflow-history event).
HEARTBEAT_INTERVAL_S = 1.0
STREAM_INTERVAL_S = 0.25


def _error(e: panto.PantoError) -> ApplicationError:
    """panto's error as the activity's failure: the kind is the type, and the kinds no
    retry fixes are non-retryable."""
    return ApplicationError(
        f"{e.kind}: {e.message or e}", type=e.kind, non_retryable=e.kind in NON_RETRYABLE_KINDS
    )


def _settle(checkpoint: str, results: Dict[str, Dict[str, Any]]) -> str:
    """The checkpoint with the results of approved calls that ran as their own activities
    taken into its pending step (an answer with a result is for deferred calls only)."""
    if not results:
        return checkpoint
    doc = json.loads(checkpoint)
    for call in (doc.get("pending") or {}).get("calls", []):
        r = results.get(call.get("call_id"))
        if r is not None and call.get("result") is None:
            call.pop("deferred", None)
            call["result"] = {k: v for k, v in r.items() if k in ("output", "is_error", "parts")}
    return json.dumps(doc, ensure_ascii=False)


def _result_json(out: panto.ToolOutput) -> Dict[str, Any]:
    """A ``ToolOutput`` as the core's answer JSON."""
    if isinstance(out.output, str):
        return {"output": out.output, "is_error": out.is_error}
    parts: List[Dict[str, Any]] = []
    texts: List[str] = []
    for p in out.output:
        if isinstance(p, panto.Image):
            if p.data is not None:
                parts.append({"type": "image", "media_type": p.media_type, "data": base64.b64encode(p.data).decode()})
            else:
                parts.append({"type": "image", "url": p.url})
        else:
            parts.append({"type": "text", "text": str(p)})
            texts.append(str(p))
    return {"output": "\n".join(texts), "is_error": out.is_error, "parts": parts}


class _Heartbeat:
    """Heartbeats the running activity every ``HEARTBEAT_INTERVAL_S`` (so that a worker
    that died is noticed within the heartbeat timeout, and a cancel reaches the activity)."""

    def __init__(self) -> None:
        self._task: Optional["asyncio.Task[None]"] = None

    async def _beat(self) -> None:
        while True:
            activity.heartbeat()
            await asyncio.sleep(HEARTBEAT_INTERVAL_S)

    async def __aenter__(self) -> "_Heartbeat":
        self._task = asyncio.ensure_future(self._beat())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)


class _Agents:
    """The worker's agents, by name: a model step takes an idle one (or builds one) and
    gives it back, so MCP servers are started once per agent, not once per step. A tool
    call uses one shared agent per name (MCP calls run at once on it)."""

    def __init__(self, factories: Mapping[str, AgentFactory]) -> None:
        self._factories = dict(factories)
        self._idle: Dict[str, List[panto.Agent]] = {}
        self._shared: Dict[str, panto.Agent] = {}
        self._lock = threading.Lock()

    def _build(self, name: str) -> panto.Agent:
        factory = self._factories.get(name)
        if factory is None:
            raise ApplicationError(
                f"config: this worker has no agent named {name!r} (it has {sorted(self._factories)})",
                type="config",
                non_retryable=True,
            )
        if callable(factory):
            return factory()
        options = dict(factory)
        options.setdefault("retry", {"max_retries": 0})
        return panto.Agent(**options)

    def take(self, name: str) -> panto.Agent:
        with self._lock:
            idle = self._idle.get(name)
            if idle:
                return idle.pop()
        return self._build(name)

    def give_back(self, name: str, agent: panto.Agent) -> None:
        agent.clear_history()
        with self._lock:
            self._idle.setdefault(name, []).append(agent)

    def shared(self, name: str) -> panto.Agent:
        with self._lock:
            agent = self._shared.get(name)
        if agent is None:
            agent = self._build(name)
            with self._lock:
                agent = self._shared.setdefault(name, agent)
        return agent


def activities(agents: Mapping[str, AgentFactory]) -> List[Callable[..., Any]]:
    """The activities of ``TurnWorkflow`` for a worker: ``agents`` maps the names a
    ``TurnRequest`` gives to a factory of the ``panto.Agent`` (a function, or the
    ``panto.Agent`` keyword arguments). Give the list to ``Worker(activities=...)``.

    A factory function should turn panto's own retries off (``retry={"max_retries":
    0}``): Temporal retries the activity, with its backoff, for the kinds that a retry
    may fix (``rate_limited``, ``server``, ``connection``, ``timeout``)."""
    pool = _Agents(agents)

    @activity.defn(name=MODEL_STEP)
    async def model_step(step: StepInput) -> StepOutput:
        """Runs the turn to its next pause (every call deferred) or its end."""
        agent = pool.take(step.agent)
        ok = False
        try:
            async with _Heartbeat():
                out = await _model_step(agent, step)
            ok = True
            return out
        except panto.PantoError as e:
            raise _error(e) from None
        finally:
            if ok:
                pool.give_back(step.agent, agent)
            else:
                agent.close()

    @activity.defn(name=TOOL_CALL)
    async def tool_call(call: ToolInput) -> Dict[str, Any]:
        """Runs one call; returns its result (the core's answer JSON)."""
        try:
            async with _Heartbeat():
                return await _tool_call(pool, call)
        except panto.PantoError as e:
            raise _error(e) from None

    return [model_step, tool_call]


async def _model_step(agent: panto.Agent, step: StepInput) -> StepOutput:
    client = activity.client()
    handle = client.get_workflow_handle(step.workflow_id)
    if step.checkpoint is not None:
        checkpoint = panto.Checkpoint.from_json(_settle(step.checkpoint, step.results))
        answers: Dict[str, panto.Answer] = {}
        for call_id, a in step.answers.items():
            if a.get("approve"):
                answers[call_id] = panto.Approve()
            elif "reject" in a:
                answers[call_id] = panto.Reject(str(a["reject"]))
            else:
                answers[call_id] = panto.ToolOutput(_output_of(a), bool(a.get("is_error", False)))
        stream = agent.aresume(checkpoint, answers)
    else:
        if step.history is not None:
            agent.restore_history(step.history)
        prompt = step.input if isinstance(step.input, str) else [str(p) for p in step.input]
        stream = agent.astream(prompt, model=step.model, defer_tools=True)
    text = ""
    sent = ""
    last_send = 0.0
    done: Optional[panto.MessageComplete] = None
    async with stream:
        async for ev in stream:
            now = time.monotonic()
            if isinstance(ev, panto.ContentDelta) and ev.kind == "text":
                text += ev.text
                if now - last_send >= STREAM_INTERVAL_S:
                    await _send(handle, step.step, text)
                    sent, last_send = text, now
            elif isinstance(ev, panto.MessageEnd):
                # The next message of the turn streams after a newline of its own.
                text += "\n" if text and not text.endswith("\n") else ""
            elif isinstance(ev, panto.MessageComplete):
                done = ev
        cp = stream.checkpoint()
    if text != sent:
        await _send(handle, step.step, text)
    assert done is not None and cp is not None
    checkpoint_json = cp.to_json()
    if len(checkpoint_json.encode()) > step.max_checkpoint_bytes:
        raise ApplicationError(
            f"config: the turn's checkpoint is {len(checkpoint_json.encode())} bytes, past the bound of "
            f"{step.max_checkpoint_bytes} (TurnRequest.max_checkpoint_bytes; Temporal's payload limit is 2 MB): "
            "keep large attachments out of the conversation (see docs/durable-execution.md)",
            type="config",
            non_retryable=True,
        )
    deferred: List[DeferredCall] = []
    if done.stop_reason == "deferred":
        tools = agent.tools
        for d in done.deferred:
            deferred.append(
                DeferredCall(
                    call_id=d["call_id"],
                    name=d["name"],
                    arguments=d["arguments"],
                    reason=d["reason"],
                    mcp=d["name"] not in tools,
                )
            )
    return StepOutput(
        checkpoint=checkpoint_json,
        finished=done.stop_reason != "deferred",
        text=done.text,
        stop_reason=done.stop_reason,
        steps=cp.steps,
        deferred=deferred,
        output=done.output,
    )


async def _send(handle: Any, step: int, text: str) -> None:
    """Sends the step's text so far to the workflow; a failure to send loses only the
    live view, never the turn."""
    try:
        await handle.signal("panto_text", Streamed(step, text))
    except Exception:  # noqa: BLE001 - the live view is best effort
        activity.logger.debug("panto: the streamed text could not be sent", exc_info=True)


def _output_of(a: Mapping[str, Any]) -> Union[str, List[Union[str, panto.Image]]]:
    parts = a.get("parts")
    if not parts:
        return str(a.get("output", ""))
    out: List[Union[str, panto.Image]] = []
    for p in parts:
        if p.get("type") == "image" and p.get("data") is not None:
            out.append(panto.Image(data=base64.b64decode(p["data"]), media_type=p.get("media_type")))
        elif p.get("type") == "image":
            out.append(panto.Image(url=p["url"], media_type=p.get("media_type")))
        else:
            out.append(str(p.get("text", "")))
    return out


async def _tool_call(pool: _Agents, call: ToolInput) -> Dict[str, Any]:
    arguments = call.arguments if isinstance(call.arguments, dict) else {}
    if call.mcp:
        return _result_json(await pool.shared(call.agent).acall_mcp_tool(call.name, arguments))
    tool = pool.shared(call.agent).tools.get(call.name)
    if tool is None:
        raise ApplicationError(
            f"config: the agent {call.agent!r} has no Python tool {call.name!r}", type="config", non_retryable=True
        )
    try:
        kwargs = tool.arguments(arguments)
        if tool.is_async:
            result = await tool.fn(**kwargs)
        else:
            # Off the event loop, which keeps heartbeating while the tool runs.
            result = await asyncio.to_thread(tool.fn, **kwargs)
        rendered = render_output(result)
    except Exception as exc:  # noqa: BLE001 - the model reads the error, as in a turn
        return {"output": render_exception(exc), "is_error": True}
    if isinstance(rendered, str):
        return {"output": rendered, "is_error": False}
    parts = [
        {"type": "text", "text": p} if isinstance(p, str) else {"type": "image", "media_type": p[3], "data": base64.b64encode(p[1] or b"").decode()}
        for p in rendered
    ]
    return {"output": "\n".join(p for p in rendered if isinstance(p, str)), "is_error": False, "parts": parts}
