"""``@panto.tool``: typed Python functions as tools, and the runner that answers them.

A Python tool is a *host tool* of the core: it is declared in the configuration's
``tools`` (name, description, JSON Schema), the model calls it, the stream announces the
call as ``ToolCallStart(host=True)``, and the runner here runs the function and hands
the result back with ``submit_tool_result``. Sync functions run on panto's tool thread
pool, never on the thread that iterates; async functions run on the event loop that
iterates the stream (``astream``), or on a private loop thread (``stream``). The core
runs calls concurrently up to ``tool_concurrency``. An exception becomes an error result
that the model reads; the stream goes on.
"""

from __future__ import annotations

import contextvars
import inspect
import json
import logging
import re
import sys
import threading
import time
import typing
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Dict,
    Generic,
    List,
    Mapping,
    Optional,
    ParamSpec,
    Tuple,
    TypeVar,
    Union,
    overload,
)

if TYPE_CHECKING:
    import asyncio
# asyncio itself is imported where it is used: `import panto` does not import it (it
# is most of the package's import time), async tools and sync tools returning an
# awaitable do.

from ._errors import PantoError
from ._media import Image
from ._pool import Pool
from ._schema import ArgumentError, Parameters, Schemas, _to_json, doc_params, doc_summary, json_schema

__all__ = ["Tool", "tool", "json_schema", "ArgumentError"]

#: Sync tools run here (threads are created on demand and go away when idle). A tool
#: still running past its agent's ``tool_timeout_ms`` no longer counts against the 256
#: (see ``_pool``), so tools that block forever cannot starve every other agent's.
TOOL_POOL = Pool("panto-tool", max_threads=256)

_NoneType = type(None)

_log = logging.getLogger("panto")


def _default(value: Any) -> Any:
    try:
        return _to_json(value)
    except TypeError:
        return str(value)


def render_output(result: Any) -> Union[str, List[Any]]:
    """A tool's return value as the text the model reads: a ``str`` as is, ``None`` as
    an empty string, bytes decoded, anything else as JSON — except a list or tuple that
    holds a ``panto.Image``: text and images, handed over as parts (each other item as
    its text)."""
    if isinstance(result, (list, tuple)) and any(isinstance(p, Image) for p in result):
        return [p._native() if isinstance(p, Image) else _as_text(p) for p in result]
    return _as_text(result)


def _as_text(result: Any) -> str:
    if isinstance(result, str):
        return result
    if result is None:
        return ""
    if isinstance(result, (bytes, bytearray)):
        return bytes(result).decode("utf-8", "replace")
    return json.dumps(result, ensure_ascii=False, default=_default)


def render_exception(exc: BaseException) -> str:
    """An exception as the text the model reads: ``Type: message``."""
    try:
        text = str(exc)
    except Exception:  # noqa: BLE001 - a broken __str__ must not lose the result
        text = "(its message could not be rendered)"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# The providers' rule for tool names (the core checks the same at registration).
_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def _config_error(message: str) -> PantoError:
    # Imported here: the generated module imports this package's native module.
    from ._vocab import ConfigError

    return ConfigError(message, kind="config")


def _check_name(name: str) -> None:
    """Refuses at decoration a name the providers would refuse at the first request."""
    if not _TOOL_NAME.fullmatch(name):
        raise _config_error(
            f"tool {name!r}: name: {name!r} is not a valid tool name: providers accept 1 to "
            "64 ASCII letters, digits, '_' or '-' (use @panto.tool(name=...))"
        )


def _check_parameters(name: str, parameters: Any) -> None:
    """A call's arguments are an object: the schema must say so."""
    if not isinstance(parameters, dict) or parameters.get("type") != "object":
        raise _config_error(
            f"tool {name!r}: parameters: must be a JSON Schema object with "
            f'"type": "object" (a call\'s arguments are an object); got {parameters!r:.80}'
        )


P = ParamSpec("P")
R = TypeVar("R")


class Tool(Generic[P, R]):
    """A Python function the model can call. Made by ``@panto.tool``; calling the
    ``Tool`` calls the function, with its signature (``Tool[P, R]`` keeps it for type
    checkers)."""

    __slots__ = {
        "fn": "The function the tool calls.",
        "name": "The tool's name, as the model calls it (the function's name by default).",
        "description": "What the tool does, for the model (the docstring's summary by default).",
        "parameters": "The JSON Schema of the arguments object (derived from the signature by default).",
        "is_async": "Whether the function is a coroutine function (run on the stream's event loop).",
        "needs_approval": "Whether a call pauses the turn until it is approved (Agent.resume with panto.Approve()).",
        "external": "Whether the tool runs outside panto: a call pauses the turn until its result is given on resume.",
        "_params": "How arguments are validated and converted (panto._schema).",
        "__dict__": "",
    }

    def __init__(
        self,
        fn: Callable[P, R],
        *,
        name: Optional[str] = None,
        description: Optional[str] = None,
        parameters: Optional[Dict[str, Any]] = None,
        needs_approval: bool = False,
        external: bool = False,
    ) -> None:
        """Makes ``fn`` a tool (``@panto.tool`` and ``@panto.tool(name=...)`` call this).
        ``name``, ``description`` and ``parameters`` replace what is derived from the
        function: its name, its docstring's summary, and the JSON Schema of its
        signature (with its docstring's parameter descriptions). Raises ``TypeError``
        for what cannot be a tool (not callable, a lambda without a name, a
        positional-only parameter) and ``ConfigError`` for a name or schema the
        providers do not accept."""
        if not callable(fn):
            raise TypeError(f"a tool must be a function, not {fn!r}")
        self.fn: Callable[P, R] = fn
        self.name: str = name or getattr(fn, "__name__", None) or ""
        if not self.name or self.name == "<lambda>":
            raise TypeError("a tool needs a name: use @panto.tool(name=...)")
        _check_name(self.name)
        doc = inspect.getdoc(fn) or ""
        self.description: str = description if description is not None else doc_summary(doc)
        self.is_async: bool = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
            getattr(fn, "__call__", None)
        )
        try:
            hints = typing.get_type_hints(fn, include_extras=True)
        except Exception:  # noqa: BLE001 - unresolvable annotations: treat as untyped
            hints = {}
        for p in inspect.signature(fn).parameters.values():
            if p.kind is p.POSITIONAL_ONLY:
                raise TypeError(
                    f"tool {self.name!r}: positional-only parameter {p.name!r} cannot be "
                    "passed by name"
                )
        self._params = Parameters(fn, hints)
        if parameters is None:
            parameters = self._derive_parameters(doc)
        _check_parameters(self.name, parameters)
        self.parameters = parameters
        if needs_approval and external:
            raise _config_error(
                f"tool {self.name!r}: external: an external tool is answered on resume; it cannot "
                "also need approval (needs_approval)"
            )
        self.needs_approval: bool = needs_approval
        self.external: bool = external
        try:
            self.__doc__ = fn.__doc__
            self.__wrapped__ = fn
        except AttributeError:
            pass

    def _derive_parameters(self, doc: str) -> Dict[str, Any]:
        """The JSON Schema of the parameters: named types once, under ``$defs``."""
        params = self._params
        schemas = Schemas()
        for name, annotation in params.annotations.items():
            try:
                schemas.of(annotation)
            except TypeError as e:
                raise TypeError(f"tool {self.name!r}, parameter {name!r}: {e}") from None
        schema = schemas.object(params.annotations, params.required, params.defaults, doc_params(doc))
        return schemas.with_defs(schema)

    def spec(self) -> Dict[str, Any]:
        """The declaration the core sends to the model, with ``needs_approval`` /
        ``external`` when set."""
        spec: Dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "parameters": self.parameters,
        }
        if self.needs_approval:
            spec["needs_approval"] = True
        if self.external:
            spec["external"] = True
        return spec

    def arguments(self, arguments: Optional[Dict[str, Any]]) -> Dict[str, Any]:
        """The model's JSON arguments as keyword arguments of the function, validated
        and converted to the annotated types (with pydantic if it is installed; see
        ``panto._schema``). Raises ``ArgumentError`` naming each argument that does not
        fit; the model reads that as the call's error result."""
        return self._params.arguments(arguments)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Calls the function itself, unchanged: a tool stays usable as the function."""
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        kind = "async " if self.is_async else ""
        return f"<panto {kind}tool {self.name!r}>"


@overload
def tool(fn: Callable[P, R], /) -> Tool[P, R]: ...


@overload
def tool(
    fn: None = None,
    /,
    *,
    name: Optional[str] = None,
    description: Optional[str] = None,
    parameters: Optional[Dict[str, Any]] = None,
    needs_approval: bool = False,
    external: bool = False,
) -> Callable[[Callable[P, R]], Tool[P, R]]: ...


def tool(
    fn: Optional[Callable[P, R]] = None,
    /,
    *,
    name: Optional[str] = None,
    description: Optional[str] = None,
    parameters: Optional[Dict[str, Any]] = None,
    needs_approval: bool = False,
    external: bool = False,
) -> Union[Tool[P, R], Callable[[Callable[P, R]], Tool[P, R]]]:
    """Turns a typed function (sync or async) into a ``Tool``.

    The JSON Schema of its arguments comes from the signature (see ``json_schema``), its
    description from the docstring (the text before an ``Args:`` section; parameters
    described there, or with ``:param x:``, get that description). ``name``,
    ``description`` and ``parameters`` override what is derived. The name (the
    function's, or ``name``) must be 1 to 64 ASCII letters, digits, ``_`` or ``-``, and
    ``parameters`` a schema with ``"type": "object"``, as the providers require; anything
    else raises ``ConfigError`` here, not at the first request.

    ``needs_approval=True``: a call pauses the turn (``MessageComplete.stop_reason ==
    "deferred"``) until ``Agent.resume`` answers it with ``panto.Approve()`` (then it
    runs) or ``panto.Reject(reason)``. ``external=True``: the function only declares the
    tool (its signature gives the schema); panto never calls it: a call pauses the turn
    until ``Agent.resume`` gives its result (``panto.ToolOutput(output)``), made by a
    durable engine's activity, another service or a person.

        @panto.tool
        def weather(city: str, unit: Literal["c", "f"] = "c") -> str:
            '''Current weather in a city.

            Args:
                city: the city name, e.g. "Paris".
            '''
    """

    def wrap(f: Callable[P, R]) -> Tool[P, R]:
        return Tool(
            f,
            name=name,
            description=description,
            parameters=parameters,
            needs_approval=needs_approval,
            external=external,
        )

    if fn is not None:
        return wrap(fn)
    return wrap


def as_tool(item: Any) -> Union["Tool[..., Any]", Dict[str, Any]]:
    """A ``Tool``, a plain function (made a ``Tool``), or a dict declaring a host tool
    answered by hand (``{"name", "description", "parameters"}``)."""
    if isinstance(item, Tool):
        return item
    if isinstance(item, dict):
        return item
    if callable(item):
        return Tool(item)
    raise TypeError(f"tools: {item!r} is not a tool, a function or a tool declaration")


# --------------------------------------------------------------------------------------
# Running tools for a stream
# --------------------------------------------------------------------------------------

_private_loop: Optional[asyncio.AbstractEventLoop] = None
_private_lock = threading.Lock()


def private_loop() -> asyncio.AbstractEventLoop:
    """The event loop (on its own daemon thread) that runs async tools of sync streams."""
    import asyncio

    global _private_loop
    with _private_lock:
        if _private_loop is None or _private_loop.is_closed():
            loop = asyncio.new_event_loop()
            started = threading.Event()

            def run() -> None:
                asyncio.set_event_loop(loop)
                loop.call_soon(started.set)
                loop.run_forever()

            threading.Thread(target=run, name="panto-tool-loop", daemon=True).start()
            started.wait()
            _private_loop = loop
        return _private_loop


class Runner:
    """The host-call hook of one stream: runs the ``Tool`` a ``ToolCallStart(host=True)``
    names and submits its result. Calls of tools it does not know are left to the caller.
    It holds the stream's control handle, never the stream, so it keeps nothing alive."""

    __slots__ = ("_tools", "_loop", "_timeout", "_control", "_pending", "_cancelled", "_lock")

    def __init__(
        self,
        tools: Mapping[str, "Tool[..., Any]"],
        loop: Optional[asyncio.AbstractEventLoop],
        timeout: Optional[float] = None,
    ) -> None:
        self._tools = tools
        self._loop = loop  # None: a sync stream
        # The agent's tool_timeout_ms in seconds: the core gives up on a call then, and
        # an async tool is cancelled then rather than left running until the stream ends.
        self._timeout = timeout
        self._control: Any = None
        self._pending: "set[Any]" = set()
        self._cancelled = False
        self._lock = threading.Lock()

    def bind(self, control: Any) -> None:
        self._control = control

    def __call__(self, event: Any) -> None:
        t = self._tools.get(event.name)
        if t is None or self._cancelled:
            return
        call_id = event.call_id
        arguments = event.arguments
        if t.is_async:
            coro = self._run_async(t, call_id, arguments)
            if self._loop is not None:
                fut: Any = self._loop.create_task(coro)
            else:
                import asyncio

                fut = asyncio.run_coroutine_threadsafe(coro, private_loop())
        else:
            ctx = contextvars.copy_context()
            fut = TOOL_POOL.submit_job(
                None if self._timeout is None else time.monotonic() + self._timeout,
                f"tool {t.name!r} (call {call_id})",
                ctx.run,
                self._run_sync,
                t,
                call_id,
                arguments,
            )
        with self._lock:
            self._pending.add(fut)
        fut.add_done_callback(self._done)

    def _done(self, fut: Any) -> None:
        with self._lock:
            self._pending.discard(fut)
        # The jobs below hand every outcome to the turn themselves; anything that still
        # escapes one is a bug in this module, and is reported rather than left in a
        # future nobody reads.
        if not fut.cancelled() and fut.exception() is not None:
            exc = fut.exception()
            _log.error("panto: a tool job failed: %s", render_exception(exc), exc_info=exc)

    def _submit(self, call_id: str, output: Union[str, List[Any]], is_error: bool) -> None:
        """Hands a result to the turn. Never raises: an exception here would be lost in
        the pool thread (or the task), and the turn would wait for this call until its
        tool timeout. (Text is never refused: the native module replaces lone
        surrogates with U+FFFD.)"""
        try:
            if isinstance(output, str):
                self._control.submit_tool_result(call_id, output, is_error)
            else:
                self._control.submit_tool_parts(call_id, output, is_error)
        except PantoError:
            # The turn no longer waits for this call (cancelled, timed out): nothing to do.
            pass
        except Exception as exc:  # noqa: BLE001 - see the docstring
            _log.error("panto: the result of tool call %s could not be handed over", call_id, exc_info=exc)
            try:
                self._control.submit_tool_result(
                    call_id, f"panto could not hand over the tool's result: {render_exception(exc)}", True
                )
            except Exception:  # noqa: BLE001 - reported above; the tool timeout ends the call
                pass

    def _run_sync(self, t: "Tool[..., Any]", call_id: str, arguments: Any) -> None:
        try:
            result = t.fn(**t.arguments(arguments))
            if inspect.isawaitable(result):
                import asyncio

                result = asyncio.run_coroutine_threadsafe(_await(result), private_loop()).result()
            output, is_error = render_output(result), False
        except BaseException as exc:  # noqa: BLE001 - the model reads the error
            # BaseException too: a tool's SystemExit must end its call, not this thread's
            # job unseen.
            output, is_error = render_exception(exc), True
        self._submit(call_id, output, is_error)

    async def _run_async(self, t: "Tool[..., Any]", call_id: str, arguments: Any) -> None:
        import asyncio

        call: Optional["asyncio.Future[Any]"] = None
        try:
            call = asyncio.ensure_future(t.fn(**t.arguments(arguments)))
            done, _ = await asyncio.wait((call,), timeout=self._timeout)
            if not done:
                # The core gives up on the call at this same timeout and answers it
                # itself ("timed out"): the coroutine is cancelled, and answers nothing.
                call.cancel()
                call.add_done_callback(_retrieve)
                return
            output, is_error = render_output(call.result()), False
        except asyncio.CancelledError:
            if call is not None:
                call.cancel()
            self._submit(call_id, "the tool was cancelled", True)
            raise
        except Exception as exc:  # noqa: BLE001 - the model reads the error
            output, is_error = render_exception(exc), True
        self._submit(call_id, output, is_error)

    def cancel(self) -> None:
        """The stream ended early: cancel the async tools still running (sync ones finish
        on their own; their results are then ignored)."""
        self._cancelled = True
        with self._lock:
            pending = list(self._pending)
        # A task exists only if asyncio was imported; sync streams never import it here.
        asyncio = sys.modules.get("asyncio")
        for fut in pending:
            if asyncio is not None and isinstance(fut, asyncio.Task):
                loop = fut.get_loop()
                try:
                    loop.call_soon_threadsafe(fut.cancel)
                except RuntimeError:  # the loop is closed
                    pass
            else:
                fut.cancel()

    @property
    def pending(self) -> int:
        return len(self._pending)


async def _await(awaitable: Any) -> Any:
    return await awaitable


def _retrieve(fut: "asyncio.Future[Any]") -> None:
    """Takes a cancelled tool's outcome, so asyncio logs nothing about it."""
    if not fut.cancelled():
        fut.exception()
