"""What ``Agent.mcp_resources()``, ``mcp_read_resource()``, ``mcp_prompts()`` and
``mcp_get_prompt()`` (and their ``a…`` variants) share: running one blocking native call
cancellably, and the JSON it answers parsed. The calls themselves are the native
module's (``_native.mcp_resources`` and the rest); what the JSON holds is the core's."""

from __future__ import annotations

import base64
import concurrent.futures
import json
import threading
from typing import Any, Callable, Dict, List, Optional

from . import _native
from ._async import WAIT_POOL, require_asyncio
from ._media import Document, Image, Part

#: One resource an MCP server lists: ``{"server", "uri", "name", "title"?,
#: "description"?, "mime_type"?, "size"?}``.
MCPResource = Dict[str, Any]
#: A read resource: ``{"contents": [{"uri", "mime_type"?, "text" | "blob", "part"}]}``,
#: ``blob`` in base64, ``part`` the content as a part of a turn's input, as
#: ``agent.run([...])`` takes it: a ``str`` (text headed by ``[resource: URI]``, or
#: a line naming bytes no model takes), a ``panto.Image`` or a ``panto.Document``.
MCPResourceContents = Dict[str, Any]
#: One prompt an MCP server lists: ``{"server", "name", "title"?, "description"?,
#: "arguments": [{"name", "description"?, "required"}]}``.
MCPPrompt = Dict[str, Any]
#: A prompt filled in: ``{"description"?, "messages": [{"role": "user" | "assistant",
#: "content": [parts]}]}``, each part a ``str``, ``panto.Image`` or ``panto.Document``.
MCPPromptResult = Dict[str, Any]

Call = Callable[[Optional["_native.CancelToken"]], str]


def blocking(call: Call) -> Any:
    """Runs ``call`` (given a cancel token) and parses its JSON. On the main thread, the
    wait happens in a lock a signal interrupts: Ctrl-C (``KeyboardInterrupt``, or any
    exception a signal handler raises) cancels the call, waits for it to end, and
    propagates."""
    if threading.current_thread() is not threading.main_thread():
        return json.loads(call(None))
    token = _native.CancelToken()
    job: Optional["concurrent.futures.Future[str]"] = None
    try:
        job = WAIT_POOL.submit(call, token)
        return json.loads(job.result())
    except BaseException:
        # Also when the signal came before `job` was assigned: a call that starts with
        # its token cancelled sends nothing.
        token.cancel()
        if job is not None:
            concurrent.futures.wait([job])
        raise


async def ablocking(what: str, call: Call) -> Any:
    """``blocking`` for coroutines: the wait happens in a thread of panto's wait pool,
    never on the event loop. Cancelling the awaiting task cancels the call, and the
    cancellation propagates once it has ended."""
    require_asyncio(what)
    import asyncio

    token = _native.CancelToken()
    job = WAIT_POOL.submit(call, token)
    try:
        result = await asyncio.wrap_future(job)
    except BaseException:
        if not job.done():
            token.cancel()
            await asyncio.gather(asyncio.wrap_future(job), return_exceptions=True)
        raise
    return json.loads(result)


def part(value: Dict[str, Any]) -> Part:
    """One part of the core's input JSON (``{"type": "text" | "image" | "document"}``) as
    the Python part a turn takes."""
    kind = value.get("type")
    if kind in ("image", "document"):
        cls = Image if kind == "image" else Document
        data = base64.b64decode(value.get("data", ""))
        return cls.from_bytes(data, value.get("media_type"), value.get("name"))
    return str(value.get("text", ""))


def read_parts(result: Any) -> Any:
    """A read resource, each content's ``part`` made a Python part."""
    for content in result.get("contents", []):
        if isinstance(content.get("part"), dict):
            content["part"] = part(content["part"])
    return result


def prompt_parts(result: Any) -> Any:
    """A filled-in prompt, each message's content made Python parts."""
    for message in result.get("messages", []):
        message["content"] = [part(p) for p in message.get("content", [])]
    return result


def arguments_json(arguments: Optional[Dict[str, str]]) -> Optional[str]:
    """A prompt's arguments as the JSON object the native call takes."""
    return None if arguments is None else json.dumps(dict(arguments))


__all__: List[str] = ["MCPResource", "MCPResourceContents", "MCPPrompt", "MCPPromptResult"]
