"""What a host answers when an agent's MCP server asks something of it
(``Agent(mcp_approve_sampling=..., mcp_elicit=...)``): the typed requests, and the
wrapping of the host's functions into the native module's JSON hooks. A server asks
only when its ``mcp_servers`` entry enables it (``"sampling": True``,
``"elicitation": True``); docs/mcp.md says the rest."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Literal, Optional, Tuple, Union


@dataclass(frozen=True)
class SamplingApproval:
    """A server's ``sampling/createMessage`` waiting for the host's approval
    (``mcp_approve_sampling``), as the agent's model would be asked it; the
    ``McpSamplingRequest`` event then reports its outcome.
    ``max_tokens`` is the server's limit, at most its ``sampling_max_tokens``;
    ``messages`` are ``{"role": "user" | "assistant", "text": str}``; ``summary`` is
    the first line of the last message."""

    server: str
    summary: str
    max_tokens: int
    system_prompt: Optional[str]
    temperature: Optional[float]
    messages: List[Dict[str, str]]


@dataclass(frozen=True)
class ElicitationPrompt:
    """A server's ``elicitation/create``, for the host to answer (``mcp_elicit``): a
    message for a person and the JSON Schema of the answer (an object of flat
    properties); the ``McpElicitationRequest`` event then reports the answer's action."""

    server: str
    message: str
    requested_schema: Dict[str, Any]


#: The answer of ``mcp_elicit``: the content (a dict matching the requested schema) to
#: accept, ``"decline"`` (or ``None``) to decline, ``"cancel"`` to cancel.
ElicitationAnswer = Union[Dict[str, Any], Literal["decline", "cancel"], None]
ElicitationAnswer.__doc__ = """What ``mcp_elicit`` returns: the content (a ``dict`` matching the
requested schema) to accept, ``"decline"`` (or ``None``) to decline, ``"cancel"`` to
cancel."""

SamplingApproval.__init__.__doc__ = """Made by panto from the server's request, for ``mcp_approve_sampling``."""
ElicitationPrompt.__init__.__doc__ = """Made by panto from the server's request, for ``mcp_elicit``."""

ApproveSampling = Callable[[SamplingApproval], bool]
Elicit = Callable[[ElicitationPrompt], ElicitationAnswer]


def native_hooks(
    approve: Optional[ApproveSampling], elicit: Optional[Elicit]
) -> Tuple[Optional[Callable[[str], bool]], Optional[Callable[[str], str]]]:
    """The host's functions as the native module's: taking the request's JSON, and
    answering an elicitation as JSON. An exception of either refuses (sampling) or
    cancels (elicitation); it is reported as unraisable."""
    native_approve: Optional[Callable[[str], bool]] = None
    native_elicit: Optional[Callable[[str], str]] = None
    if approve is not None:
        host_approve = approve

        def native_approve(request_json: str) -> bool:
            r = json.loads(request_json)
            return bool(host_approve(SamplingApproval(**r)))

    if elicit is not None:
        host_elicit = elicit

        def native_elicit(request_json: str) -> str:
            r = json.loads(request_json)
            answer = host_elicit(ElicitationPrompt(**r))
            if answer is None or answer == "decline":
                return '{"action":"decline"}'
            if answer == "cancel":
                return '{"action":"cancel"}'
            if isinstance(answer, dict):
                return json.dumps({"action": "accept", "content": answer}, ensure_ascii=False)
            raise TypeError(f"mcp_elicit: an answer is a dict, 'decline', 'cancel' or None, not {answer!r}")

    return native_approve, native_elicit
