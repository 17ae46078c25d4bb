"""Answers to a paused turn's deferred calls: ``panto.Approve()``, ``panto.Reject(reason)``
and ``panto.ToolOutput(output)``, given to ``Agent.resume`` as a dict by call id.

A turn pauses (``MessageComplete.stop_reason == "deferred"``) when a call needs approval
(``@panto.tool(needs_approval=True)``), runs outside panto (``@panto.tool(external=True)``,
or a declaration with ``"external": True``), or the turn defers every call
(``stream(..., defer_tools=True)``); ``MessageComplete.deferred`` lists those calls and
``Stream.checkpoint()`` holds the rest of the turn.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Mapping, Optional, Sequence, Tuple, Union

from ._media import Image

__all__ = ["Approve", "Reject", "ToolOutput", "Answer"]


@dataclass(frozen=True)
class Approve:
    """Run the call: one that needed approval, or one the turn deferred."""


@dataclass(frozen=True)
class Reject:
    """Do not run the call: the model reads an error result saying it was rejected,
    and ``reason``."""

    reason: str = ""


@dataclass(frozen=True)
class ToolOutput:
    """The call's result, made outside panto (an external or deferred call): ``output``
    is text, or a list of text and ``panto.Image`` parts in order; ``is_error`` marks it
    as the tool's failure (the model reads it as such)."""

    output: Union[str, Sequence[Union[str, Image]]]
    is_error: bool = False


#: One answer to a deferred call.
Answer = Union[Approve, Reject, ToolOutput]


def native_answers(
    answers: Optional[Mapping[str, Answer]],
) -> List[Tuple[str, str, Optional[str], Optional[List[Any]], bool]]:
    """The answers as the native ``Agent.resume`` takes them. ``TypeError`` for a value
    that is not an ``Approve``, ``Reject`` or ``ToolOutput``."""
    native: List[Tuple[str, str, Optional[str], Optional[List[Any]], bool]] = []
    for call_id, answer in (answers or {}).items():
        if isinstance(answer, Approve):
            native.append((call_id, "approve", None, None, False))
        elif isinstance(answer, Reject):
            native.append((call_id, "reject", answer.reason, None, False))
        elif isinstance(answer, ToolOutput):
            if isinstance(answer.output, str):
                native.append((call_id, "result", answer.output, None, answer.is_error))
            else:
                native.append((call_id, "result", None, list(answer.output), answer.is_error))
        else:
            raise TypeError(
                f"answers[{call_id!r}]: panto.Approve(), panto.Reject(reason) or panto.ToolOutput(output), "
                f"not {answer!r:.80}"
            )
    return native


Approve.__init__.__doc__ = """``panto.Approve()``: the answer that runs the call."""
Reject.__init__.__doc__ = """``panto.Reject(reason)``: the answer that refuses the call; the model reads
``reason``."""
ToolOutput.__init__.__doc__ = """``panto.ToolOutput(output, is_error=False)``: the call's result (text, or text
and ``panto.Image`` parts)."""
Answer.__doc__ = """One answer to a deferred call, for ``Agent.resume``: ``panto.Approve()``,
``panto.Reject(reason)`` or ``panto.ToolOutput(output, is_error=False)``."""
