"""panto turns on Temporal: a turn that survives a crashed worker and moves between
machines. ``pip install 'panto[temporal]'`` installs ``temporalio``; ``import panto``
never imports it.

A worker registers the workflow and the activities of its agents::

    from temporalio.client import Client
    from temporalio.worker import Worker
    from panto.temporal import TurnWorkflow, activities, sandbox_runner

    worker = Worker(client, task_queue="turns", workflows=[TurnWorkflow],
                    activities=activities({"helper": make_agent}),
                    workflow_runner=sandbox_runner())

and a client starts a turn::

    result = await client.execute_workflow(
        TurnWorkflow.run, TurnRequest(agent="helper", input="Hello"),
        id="turn-1", task_queue="turns")

Each model response is one activity (``panto.model_step``) and each tool call one
activity (``panto.tool_call``: a Python tool, or an MCP server's tool), at most
``TurnRequest.max_concurrent_tools`` at once. Calls that need approval (and external
calls) wait for the ``decide`` signal. The text streams live to the ``text`` query; the
workflow's result (``TurnResult``) is what is durable. See docs/durable-execution.md."""

from __future__ import annotations

from typing import Any

from ._activities import AgentFactory, activities
from ._workflow import (
    DEFAULT_MAX_CHECKPOINT_BYTES,
    DEFAULT_MAX_CONCURRENT_TOOLS,
    MODEL_STEP,
    NON_RETRYABLE_KINDS,
    TOOL_CALL,
    TURN_WORKFLOW,
    Decision,
    DeferredCall,
    TurnRequest,
    TurnResult,
    TurnWorkflow,
)

__all__ = [
    "AgentFactory",
    "activities",
    "sandbox_runner",
    "Decision",
    "DeferredCall",
    "TurnRequest",
    "TurnResult",
    "TurnWorkflow",
    "MODEL_STEP",
    "TOOL_CALL",
    "TURN_WORKFLOW",
    "NON_RETRYABLE_KINDS",
    "DEFAULT_MAX_CHECKPOINT_BYTES",
    "DEFAULT_MAX_CONCURRENT_TOOLS",
]


def sandbox_runner() -> Any:
    """Temporal's workflow sandbox with panto passed through (its native module is
    loaded once per process, and the workflow calls none of it): give it to
    ``Worker(workflow_runner=...)``."""
    from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

    return SandboxedWorkflowRunner(restrictions=SandboxRestrictions.default.with_passthrough_modules("panto"))
