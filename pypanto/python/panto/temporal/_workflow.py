"""The turn as a Temporal workflow: ``TurnWorkflow``, its input ``TurnRequest`` and the
data its activities exchange. Deterministic: it holds the latest checkpoint (as text)
and the answers, and calls no panto function; everything that touches a network or a
tool is an activity (``panto.temporal._activities``)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Dict, List, Optional

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

from .._vocab import ERROR_CLASSES

#: The activities' names: stable across deploys (a renamed activity strands running turns).
MODEL_STEP = "panto.model_step"
TOOL_CALL = "panto.tool_call"
#: The workflow's name.
TURN_WORKFLOW = "panto.Turn"

#: Tool calls of one step that run at once; the others wait their turn.
DEFAULT_MAX_CONCURRENT_TOOLS = 4
#: The largest checkpoint a step may hand the workflow (bytes of JSON): under Temporal's
#: default payload limit (2 MB), with room for the rest of the event.
DEFAULT_MAX_CHECKPOINT_BYTES = 1_500_000

#: panto's error kinds a retry may fix (a busy or failing server, a lost connection, a cut
#: or malformed stream, a tool's failure): Temporal retries them with its backoff.
RETRYABLE_KINDS = ("rate_limited", "server", "connection", "timeout", "protocol", "provider", "tool", "incomplete")
#: Every other kind (one added to panto later included) is one no retry can fix: the
#: activity fails at once.
NON_RETRYABLE_KINDS = tuple(kind for kind in ERROR_CLASSES if kind not in RETRYABLE_KINDS)


@dataclass
class TurnRequest:
    """What ``TurnWorkflow`` runs: one turn of the agent registered as ``agent`` (see
    ``panto.temporal.activities``), on ``input`` (text, or a list of text parts).

    ``checkpoint`` (a ``Checkpoint.to_json()`` text) continues that turn instead of
    starting one (``input`` is then ignored); ``history`` (``Agent.save_history()``)
    is the conversation the turn starts from. ``needs_approval`` names tools whose calls
    wait for an approval signal besides those that declare it (MCP tools, for example).
    ``max_concurrent_tools`` bounds a step's fan-out; ``max_checkpoint_bytes`` the
    checkpoint a step may hand back (past it the turn fails with a configuration error).
    The timeouts and the retry policy's first interval are the activities'."""

    agent: str
    input: Any = ""
    checkpoint: Optional[str] = None
    history: Optional[str] = None
    model: Optional[str] = None
    needs_approval: List[str] = field(default_factory=list)
    max_concurrent_tools: int = DEFAULT_MAX_CONCURRENT_TOOLS
    max_checkpoint_bytes: int = DEFAULT_MAX_CHECKPOINT_BYTES
    model_timeout_s: float = 600.0
    tool_timeout_s: float = 600.0
    heartbeat_timeout_s: float = 30.0
    retry_initial_interval_s: float = 1.0
    max_attempts: int = 10


@dataclass
class TurnResult:
    """What a finished turn returns: its final text, stop reason, number of steps and
    last checkpoint (whose ``conversation`` is the whole history)."""

    text: str
    stop_reason: str
    steps: int
    checkpoint: str
    output: Any = None


@dataclass
class StepInput:
    """The model-step activity's input: start the turn (``checkpoint`` None) or resume
    ``checkpoint`` with ``answers`` (by call id, the core's answer JSON form) and
    ``results`` (results of approved calls that ran as their own activities)."""

    agent: str
    workflow_id: str
    step: int
    input: Any = ""
    checkpoint: Optional[str] = None
    history: Optional[str] = None
    model: Optional[str] = None
    answers: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    results: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    max_checkpoint_bytes: int = DEFAULT_MAX_CHECKPOINT_BYTES


@dataclass
class DeferredCall:
    """A call the step left to the workflow: ``reason`` is ``"approval"``,
    ``"external"`` or ``"deferred"``; ``mcp`` says an MCP server's tool runs it."""

    call_id: str
    name: str
    arguments: Any
    reason: str
    mcp: bool = False


@dataclass
class StepOutput:
    """The model-step activity's result: the turn's checkpoint after the step, and
    either the end (``finished``) or the calls it waits for."""

    checkpoint: str
    finished: bool
    text: str
    stop_reason: str
    steps: int
    deferred: List[DeferredCall] = field(default_factory=list)
    output: Any = None


@dataclass
class ToolInput:
    """The tool activity's input: one call, run by the agent's Python tool or, with
    ``mcp``, by its MCP server (``Agent.call_mcp_tool``)."""

    agent: str
    call_id: str
    name: str
    arguments: Any
    mcp: bool = False


@dataclass
class Streamed:
    """What a model step has streamed so far (the ``panto_text`` signal)."""

    step: int
    text: str


@dataclass
class Decision:
    """A signal's answer to a waiting call: ``approve`` (run it) or not (``reason``
    rejects it); for an external call, ``output`` (and ``is_error``) is its result."""

    call_id: str
    approve: bool = True
    reason: str = ""
    output: Optional[str] = None
    is_error: bool = False


@workflow.defn(name=TURN_WORKFLOW)
class TurnWorkflow:
    """One panto turn, durable: a model-step activity per model response (the turn
    resumed from the last checkpoint with every call deferred), a tool activity per
    call (at most ``max_concurrent_tools`` at once), and, for a call that needs approval
    or is external, a wait for the ``decide`` signal. Queries: ``text`` (the text
    streamed so far, for a live view), ``waiting`` (the calls waiting for a decision).
    Cancelling the workflow cancels the model request and the tools in flight."""

    def __init__(self) -> None:
        self._streamed: Dict[int, str] = {}
        self._waiting: Dict[str, DeferredCall] = {}
        self._decisions: Dict[str, Decision] = {}

    @workflow.signal(name="decide")
    def decide(self, decision: Decision) -> None:
        """Approves, rejects or answers a waiting call (ignored for any other call)."""
        if decision.call_id in self._waiting:
            self._decisions[decision.call_id] = decision

    @workflow.signal(name="panto_text")
    def streamed(self, streamed: Streamed) -> None:
        """The model-step activity's text so far (sent while it streams)."""
        self._streamed[streamed.step] = streamed.text

    @workflow.query(name="text")
    def text(self) -> str:
        """The text streamed so far, every step's, in order (not durable: a step that
        ran again streams again)."""
        return "".join(self._streamed[k] for k in sorted(self._streamed))

    @workflow.query(name="waiting")
    def waiting(self) -> List[DeferredCall]:
        """The calls waiting for a ``decide`` signal."""
        return [c for c in self._waiting.values() if c.call_id not in self._decisions]

    @workflow.run
    async def run(self, req: TurnRequest) -> TurnResult:
        retry = RetryPolicy(
            initial_interval=timedelta(seconds=req.retry_initial_interval_s),
            maximum_attempts=req.max_attempts,
            non_retryable_error_types=list(NON_RETRYABLE_KINDS),
        )
        wf_id = workflow.info().workflow_id
        step_in = StepInput(
            agent=req.agent,
            workflow_id=wf_id,
            step=0,
            input=req.input,
            checkpoint=req.checkpoint,
            history=req.history,
            model=req.model,
            max_checkpoint_bytes=req.max_checkpoint_bytes,
        )
        bound = asyncio.Semaphore(max(1, req.max_concurrent_tools))
        while True:
            out: StepOutput = await self._activity(
                MODEL_STEP,
                step_in,
                StepOutput,
                req.model_timeout_s,
                req.heartbeat_timeout_s,
                retry,
            )
            if out.finished:
                return TurnResult(out.text, out.stop_reason, out.steps, out.checkpoint, out.output)
            answers: Dict[str, Dict[str, Any]] = {}
            results: Dict[str, Dict[str, Any]] = {}
            to_run: List[DeferredCall] = []
            for call in out.deferred:
                if call.reason in ("approval", "external") or call.name in req.needs_approval:
                    self._waiting[call.call_id] = call
            # Every call waiting for a decision gets it before any runs: the step's
            # calls then run together, under the bound.
            if self._waiting:
                await workflow.wait_condition(lambda: all(c in self._decisions for c in self._waiting))
            for call in out.deferred:
                d = self._decisions.get(call.call_id)
                if call.reason == "external":
                    assert d is not None
                    if d.output is not None:
                        answers[call.call_id] = {"output": d.output, "is_error": d.is_error}
                    else:
                        answers[call.call_id] = {"reject": d.reason or "rejected"}
                elif d is not None and not d.approve:
                    answers[call.call_id] = {"reject": d.reason}
                else:
                    to_run.append(call)
            self._waiting.clear()
            self._decisions.clear()

            async def run_one(call: DeferredCall) -> None:
                async with bound:
                    result: Dict[str, Any] = await self._activity(
                        TOOL_CALL,
                        ToolInput(req.agent, call.call_id, call.name, call.arguments, call.mcp),
                        dict,
                        req.tool_timeout_s,
                        req.heartbeat_timeout_s,
                        retry,
                    )
                # A call that needed approval takes its result into the checkpoint (a
                # result answer is for deferred calls only); the others as answers.
                if call.reason == "approval":
                    results[call.call_id] = result
                else:
                    answers[call.call_id] = result

            await asyncio.gather(*(run_one(c) for c in to_run))
            step_in = StepInput(
                agent=req.agent,
                workflow_id=wf_id,
                step=out.steps,
                checkpoint=out.checkpoint,
                model=req.model,
                answers=answers,
                results=results,
                max_checkpoint_bytes=req.max_checkpoint_bytes,
            )

    async def _activity(
        self,
        name: str,
        arg: Any,
        result_type: Any,
        timeout_s: float,
        heartbeat_s: float,
        retry: RetryPolicy,
    ) -> Any:
        try:
            return await workflow.execute_activity(
                name,
                arg,
                result_type=result_type,
                start_to_close_timeout=timedelta(seconds=timeout_s),
                heartbeat_timeout=timedelta(seconds=heartbeat_s),
                retry_policy=retry,
                cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
            )
        except ActivityError as e:
            cause = e.cause
            if isinstance(cause, ApplicationError):
                # The turn fails with panto's kind as the error's type.
                raise ApplicationError(cause.message, *cause.details, type=cause.type, non_retryable=True) from None
            if isinstance(cause, CancelledError):
                raise
            raise
