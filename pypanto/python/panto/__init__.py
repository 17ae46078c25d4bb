"""panto: an embeddable LLM agent runtime, from Python.

A Rust core streams an assistant turn from an LLM provider (OpenAI Chat Completions and
compatible servers, Anthropic Messages, Google Gemini, the OpenAI Responses API), runs the
tools the model asks for, and repeats until the model is done. The whole turn is one stream of events::

    import panto

    @panto.tool
    def weather(city: str) -> str:
        '''Current weather in a city.'''
        return f"18°C and sunny in {city}"

    agent = panto.Agent(provider="openai", model="gpt-4o-mini", tools=[weather])
    with agent.stream("What's the weather in Paris?") as stream:
        for event in stream:
            if isinstance(event, panto.ContentDelta):
                print(event.text, end="")

    async for event in agent.astream("And in Rome?"):   # in a coroutine
        ...

The native module (``panto._native``) holds the agent, the stream and the event
classes; this package adds the configuration, ``@panto.tool``, ``AsyncStream`` and the
exception classes.

Where to read on: ``help(panto.Agent)`` (the configuration, turns, history, compaction),
``help(panto.Stream)`` and ``help(panto.AsyncStream)`` (reading a turn, cancelling it,
answering host tools), ``help(panto.tool)``, ``help(panto.Event)`` and each event class,
``help(panto.PantoError)`` (the error classes), ``help(panto.AgentOptions)`` (every
configuration key). Every public name has its own docstring.

Tables, generated from the core's vocabulary: ``ERROR_CLASSES`` (the class of each error
kind, by kind name), ``STATUS_CLASSES`` (the narrower class of an error with an HTTP
status, by ``(kind, status)``), ``EVENT_CLASSES`` (the class of each event type, by type
name) and ``CONFIG_KEYS`` (every top-level configuration key, in the core's order).
"""

from __future__ import annotations

import atexit
import base64
import concurrent.futures
import json
import sys
import threading
from dataclasses import dataclass
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Dict,
    Iterable,
    List,
    Mapping,
    Optional,
    Protocol,
    Type,
    TypeVar,
    Union,
    cast,
    overload,
)

from . import _native, _vocab
from ._async import WAIT_POOL, AsyncStream, loop_waits, other_async_library, require_asyncio, running_loop
from ._errors import APIError, APIStatusError, PantoError
from ._native import Checkpoint, Stream
from ._durable import Answer, Approve, Reject, ToolOutput, native_answers
from ._tools import TOOL_POOL, ArgumentError, Runner, Tool, as_tool, json_schema, tool
from ._media import Document, Image, Input, Part, native_parts
from ._output import Output, output_schema
from . import _mcp
from ._mcp import MCPPrompt, MCPPromptResult, MCPResource, MCPResourceContents
from ._mcp_sampling import ElicitationAnswer, ElicitationPrompt, SamplingApproval
from . import _mcp_sampling
from ._otel import InstrumentArg, Instrumentation, instrument, uninstrument
from . import _otel

# The event and record classes, the exception class of every error kind, ERROR_CLASSES,
# EVENT_CLASSES and the typed keyword arguments of Agent: generated from the core's
# vocabulary (scripts/gen.sh), listed once, in `_vocab`.
from ._vocab import *  # noqa: F403
from ._vocab import AgentOptions, ConfigError, McpServerOptions, MessageComplete

if sys.version_info >= (3, 11):
    from typing import Unpack
elif TYPE_CHECKING:
    from typing_extensions import Unpack

__version__ = _native.__version__

__all__ = [
    "Agent",
    "Stream",
    "AsyncStream",
    "Checkpoint",
    "Approve",
    "Reject",
    "ToolOutput",
    "Answer",
    "Tool",
    "tool",
    "json_schema",
    "output_schema",
    "ArgumentError",
    "diagnostics",
    "CompactResult",
    "TokenCount",
    "MCPServers",
    "MCPTokenStore",
    "SamplingApproval",
    "ElicitationPrompt",
    "ElicitationAnswer",
    "PantoError",
    "APIError",
    "APIStatusError",
    "Image",
    "Document",
    "Part",
    "Input",
    "Instrumentation",
    "instrument",
    "uninstrument",
]
__all__ += _vocab.__all__

#: Reasoning control: an effort (``"none"``, ``"low"``, ``"medium"``, ``"high"``) or the
#: core's object ``{"effort": ..., "budget_tokens": ...}``.
ReasoningArg = Union[str, Dict[str, Any], None]

T = TypeVar("T")


def _reasoning(value: ReasoningArg) -> Optional[Dict[str, Any]]:
    if value is None or isinstance(value, dict):
        return value
    if isinstance(value, str):
        return {"effort": value}
    raise ConfigError(f"reasoning: must be an effort string or a dict (got {type(value).__name__})", kind="config")


def _reasoning_json(value: ReasoningArg) -> Optional[str]:
    r = _reasoning(value)
    return None if r is None else json.dumps(r, ensure_ascii=False)


#: A turn's ``output_schema``: a JSON Schema ``dict``, a dataclass / ``TypedDict`` /
#: pydantic model (its ``panto.output_schema``), ``False`` (none for this turn), or
#: ``None`` (the agent's).
OutputSchemaArg = Union[Dict[str, Any], Type[Any], bool, None]


def _output_schema_json(value: OutputSchemaArg) -> Optional[str]:
    if value is None:
        return None
    if value is False:
        return "false"
    if value is True:
        raise ConfigError("output_schema: a JSON Schema, a type, False or None (not True)", kind="config")
    try:
        schema = output_schema(value)
    except TypeError as e:
        raise ConfigError(str(e).replace("output:", "output_schema:", 1), kind="config") from None
    try:
        return json.dumps(schema, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"output_schema: not representable as JSON ({e})", kind="config") from None


class MCPTokenStore(Protocol):
    """Where a host keeps the OAuth tokens of its MCP servers between runs
    (``Agent(mcp_token_store=...)``), keyed by the server's URL. What is saved is
    panto's own JSON text (tokens, expiry, the registered client): a secret, to be kept
    as such and handed back unchanged. Called on panto's threads."""

    def __init__(self) -> None:
        """A store is any object with these two methods; nothing to set up here."""

    def load(self, server_url: str) -> Optional[str]:
        """The text last saved for ``server_url``, or ``None``."""
        ...

    def save(self, server_url: str, tokens: str) -> None:
        """Keeps ``tokens`` for ``server_url``, replacing what was there."""
        ...


class MCPServers:
    """MCP servers shared by several agents: ``Agent(mcp_servers=servers)`` for each.
    ``servers`` maps a name to an ``mcp_servers`` entry (``{"command", "args", "env",
    "cwd"}`` or ``{"url", "headers"}``, plus ``timeout_ms``, ``tool_prefix``,
    ``enabled_tools``, ``disabled_tools``). The servers start once, at the first turn of
    any of the agents, and stop when the ``with`` block ends (``close()``), after which
    those agents' turns raise ``ConfigError``. (A dict passed as ``mcp_servers`` gives an
    agent servers of its own, stopped when it is.)

    .. code-block:: python

        with panto.MCPServers({"time": {"command": "mcp-server-time"}}) as servers:
            a = panto.Agent(model="gpt-4o-mini", mcp_servers=servers)
            b = panto.Agent(model="gpt-4o-mini", mcp_servers=servers)
    """

    __slots__ = ("_native",)

    def __init__(self, servers: Dict[str, McpServerOptions]) -> None:
        """Declares the servers (nothing starts yet): ``ConfigError`` for a declaration
        the core refuses, or one that is not representable as JSON."""
        try:
            text = json.dumps(servers, ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"mcp_servers: not representable as JSON ({e})", kind="config") from None
        self._native = _native.McpServers(text)

    @property
    def names(self) -> List[str]:
        """The servers' names."""
        return self._native.names()

    def close(self) -> None:
        """Stops the servers now."""
        self._native.close()

    def __enter__(self) -> "MCPServers":
        """Returns the servers, for ``with panto.MCPServers(...) as servers:``."""
        return self

    def __exit__(self, *exc: object) -> None:
        """Stops the servers (``close()``) when the ``with`` block ends."""
        self.close()

    def __repr__(self) -> str:
        return f"MCPServers({self.names!r})"


@dataclass(frozen=True)
class CompactResult:
    """What ``Agent.compact`` did. ``changed`` is false when nothing was older than the
    kept messages (no request is made then). ``tokens_before`` is the provider's count
    when the history has not changed since its last response; ``tokens_after`` (and
    ``tokens_before`` otherwise) is estimated as bytes / 4."""

    changed: bool
    messages_before: int
    messages_after: int
    tokens_before: int
    tokens_after: int


CompactResult.__init__.__doc__ = """Made by ``Agent.compact`` / ``acompact`` from the core's report (every field
as the class describes it)."""


@dataclass(frozen=True)
class TokenCount:
    """The size of a request in tokens (``Agent.count_tokens``). ``estimated`` is true
    when panto estimated it (the request's bytes / 4) because the provider has no count
    endpoint (Chat Completions); false for the provider's own count."""

    tokens: int
    estimated: bool


TokenCount.__init__.__doc__ = """Made by ``Agent.count_tokens`` / ``acount_tokens`` from the core's answer."""


def _compact_options(keep_last: Optional[int], model: Optional[str], prompt: Optional[str]) -> str:
    options = {k: v for k, v in (("keep_last", keep_last), ("model", model), ("prompt", prompt)) if v is not None}
    return json.dumps(options, ensure_ascii=False)


def _mcp_arguments(name: str, arguments: Optional[Mapping[str, Any]]) -> str:
    if not isinstance(name, str):
        raise ConfigError(f"call_mcp_tool: the name must be a str (got {type(name).__name__})", kind="config")
    if arguments is None:
        return "{}"
    if not isinstance(arguments, Mapping):
        raise ConfigError(
            f"call_mcp_tool: the arguments of {name!r} must be a mapping (got {type(arguments).__name__})",
            kind="config",
        )
    try:
        return json.dumps(dict(arguments), ensure_ascii=False)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"call_mcp_tool: the arguments of {name!r} are not JSON-able: {e}", kind="config") from None


def _tool_output(result_json: str) -> ToolOutput:
    """The core's result JSON as a ``panto.ToolOutput`` (text, or text and images)."""
    result = json.loads(result_json)
    parts = result.get("parts")
    if not parts:
        return ToolOutput(result["output"], bool(result["is_error"]))
    out: List[Union[str, Image]] = []
    for p in parts:
        if p.get("type") == "image" and p.get("data") is not None:
            out.append(Image(data=base64.b64decode(p["data"]), media_type=p.get("media_type"), name=p.get("name")))
        elif p.get("type") == "image":
            out.append(Image(url=p["url"], media_type=p.get("media_type")))
        else:
            out.append(str(p.get("text", "")))
    return ToolOutput(out, bool(result["is_error"]))


def _compact_result(result_json: str) -> "CompactResult":
    return CompactResult(**json.loads(result_json))


class Agent:
    """One conversation with one provider configuration.

    ``provider`` is ``"openai"`` (Chat Completions and every compatible server),
    ``"anthropic"``, ``"gemini"`` or ``"openai-responses"`` (the OpenAI Responses API). ``base_url`` is what the provider's official SDK calls
    it (OpenAI's includes ``/v1``, Anthropic's and Gemini's do not); ``api_key`` defaults to
    ``OPENAI_API_KEY`` / ``ANTHROPIC_API_KEY`` / ``GEMINI_API_KEY``. ``tools`` are ``@panto.tool`` functions (run automatically),
    plain functions (made tools), or dicts ``{"name", "description", "parameters"}``
    declaring host tools you answer by hand with ``Stream.submit_tool_result``.

    Other keyword arguments are the core's other configuration keys, typed and
    documented by ``panto.AgentOptions`` (generated from the core's description, like
    the table of docs/configuration.md); ``reasoning`` may also be just an effort (``"high"``). A bad
    one raises ``ConfigError`` naming the key.

    One stream at a time: starting another while one is active raises ``BusyError``.

    ``close()`` (or leaving ``with agent:`` / ``async with agent:``) cancels the running
    turn, if any, and lets go of the conversation; later calls raise ``ConfigError``.
    """

    __slots__ = ("_native", "_tools", "_control", "_instrument", "__weakref__")

    def __init__(
        self,
        provider: str = "openai",
        model: Optional[str] = None,
        base_url: Optional[str] = None,
        api_key: Optional[str] = None,
        system: Optional[str] = None,
        tools: Iterable[Any] = (),
        mcp_servers: Union[Dict[str, McpServerOptions], "MCPServers", None] = None,
        mcp_token_store: Optional[MCPTokenStore] = None,
        mcp_open_url: Optional[Callable[[str], object]] = None,
        mcp_approve_sampling: Optional[Callable[[SamplingApproval], bool]] = None,
        mcp_elicit: Optional[Callable[[ElicitationPrompt], ElicitationAnswer]] = None,
        instrument: InstrumentArg = None,
        **options: Unpack[AgentOptions],
    ) -> None:
        """Makes the agent; nothing is sent until its first turn. ``model`` is required
        (``ConfigError`` without it). ``system`` is the system prompt. ``tools``: see the
        class. ``mcp_servers`` is a dict of MCP servers of this agent's own (started at
        its first turn, stopped with it) or a shared ``panto.MCPServers``. For MCP servers
        that sign in with OAuth (their ``oauth`` key), ``mcp_token_store`` keeps the tokens
        between runs (``panto.MCPTokenStore``; without one they live as long as the
        servers) and ``mcp_open_url`` is called with the authorization URL a person must
        open (the authorization code grant fails without it); both run on panto's
        threads, and the URL opener may block until the sign-in is done. For MCP
        servers whose entry enables ``"sampling"``, ``mcp_approve_sampling`` sees each
        ``panto.SamplingApproval`` and returns whether the agent's model answers it
        (without it, each is answered); for those that enable ``"elicitation"``,
        ``mcp_elicit`` answers each ``panto.ElicitationPrompt`` with the content (a
        dict), ``"decline"`` or ``"cancel"`` (without it, each is declined). Both run on
        panto's threads and may block to ask a person. Every other
        keyword is a configuration key (``max_steps=4``, ``retry={"max_retries": 1}``,
        ``timeouts={"idle_ms": 30_000}``, ``reasoning="high"``…: ``panto.AgentOptions``
        lists them with their types). The core validates the whole configuration here:
        ``ConfigError`` names the first bad key, or the tool whose declaration is not
        one the providers accept.

        ``instrument`` records OpenTelemetry spans and metrics of this agent's turns
        (docs/observability.md): ``None`` (the default) follows ``panto.instrument()``,
        ``True`` uses OpenTelemetry's global providers, a ``panto.Instrumentation`` its
        own, ``False`` never."""
        kept_instrument = _otel.resolve(instrument)
        config: Dict[str, Any] = {"provider": provider, "model": model}
        shared: Optional[MCPServers] = None
        if isinstance(mcp_servers, MCPServers):
            shared = mcp_servers
        elif mcp_servers is not None:
            config["mcp_servers"] = mcp_servers
        for key, value in (("base_url", base_url), ("api_key", api_key), ("system", system)):
            if value is not None:
                config[key] = value
        specs: List[Dict[str, Any]] = []
        python_tools: Dict[str, Tool[..., Any]] = {}
        for i, item in enumerate(tools):
            try:
                t = as_tool(item)
            except TypeError as e:
                raise ConfigError(f"tools[{i}]: {e}", kind="config") from None
            if isinstance(t, Tool):
                specs.append(t.spec())
                python_tools[t.name] = t
            else:
                specs.append(t)
        if specs:
            config["tools"] = specs
        config.update(options)
        if "reasoning" in config:
            config["reasoning"] = _reasoning(config["reasoning"])
        # One source of truth: the core parses and validates the JSON and names the key.
        # Not ASCII-escaped: a lone surrogate stays a character, which the native module
        # replaces with U+FFFD (as an escape, JSON would refuse it).
        parts = []
        for key, value in config.items():
            try:
                parts.append(f"{json.dumps(key, ensure_ascii=False)}:{json.dumps(value, ensure_ascii=False, allow_nan=False)}")
            except (TypeError, ValueError) as e:
                raise ConfigError(f"{key}: not representable as JSON ({e})", kind="config") from None
        self._native = _native.Agent("{" + ",".join(parts) + "}", shared._native if shared else None)
        if mcp_token_store is not None or mcp_open_url is not None:
            self._native.set_mcp_oauth(mcp_token_store, mcp_open_url)
        if mcp_approve_sampling is not None or mcp_elicit is not None:
            self._native.set_mcp_client_hooks(*_mcp_sampling.native_hooks(mcp_approve_sampling, mcp_elicit))
        self._tools = python_tools
        self._instrument = kept_instrument
        # The latest stream's control handle (it keeps no stream alive): what close()
        # cancels. One stream at a time, so the latest is the only one that may run.
        self._control: Optional[_native.StreamControl] = None

    # -- streams ---------------------------------------------------------------------
    def _start(
        self,
        prompt: Input,
        model: Optional[str],
        reasoning: ReasoningArg,
        output_schema: OutputSchemaArg,
        runner: Optional[Runner],
        defer_tools: bool = False,
    ) -> Stream:
        parts = native_parts(prompt)
        stream = self._native.stream(
            prompt if isinstance(prompt, str) else "",
            model,
            runner,
            _reasoning_json(reasoning),
            parts,
            _output_schema_json(output_schema),
            defer_tools,
        )
        text = prompt if isinstance(prompt, str) else " ".join(p for p in prompt if isinstance(p, str))
        return self._started(stream, runner, model, text, False)

    def _started(self, stream: Stream, runner: Optional[Runner], model: Optional[str], text: str, resumed: bool) -> Stream:
        ins = _otel.for_agent(self._instrument)
        if ins is not None:
            stream._observe(ins._observer(self.provider, self.base_url, model or self.model, text, resumed))
        self._control = control = stream.control()
        if runner is not None:
            runner.bind(control)
        return stream

    def _resume(
        self, checkpoint: Union[Checkpoint, str], answers: Optional[Mapping[str, Answer]], runner: Optional[Runner]
    ) -> Stream:
        if isinstance(checkpoint, str):
            checkpoint = Checkpoint.from_json(checkpoint)
        elif not isinstance(checkpoint, Checkpoint):
            raise TypeError(f"resume takes a panto.Checkpoint or its JSON text, not a {type(checkpoint).__name__}")
        stream = self._native.resume(checkpoint, native_answers(answers), runner)
        return self._started(stream, runner, None, "", True)

    def resume(self, checkpoint: Union[Checkpoint, str], answers: Optional[Mapping[str, Answer]] = None) -> Stream:
        """Continues the turn ``checkpoint`` holds (a ``panto.Checkpoint``, or its
        ``to_json()`` text), in this process or another, and returns its ``Stream``,
        like ``stream()``. The agent needs the tools the turn's pending calls name.

        ``answers`` answers the calls the turn paused for (``MessageComplete.deferred``),
        by call id: ``panto.Approve()`` runs a call that needed approval (or one
        ``defer_tools`` deferred), ``panto.Reject(reason)`` gives the model an error
        result saying the call was rejected and why, ``panto.ToolOutput(output,
        is_error=False)`` is the result of an external or deferred call. A paused call
        left unanswered stays paused: the resumed turn pauses again.

        The agent's history becomes the checkpoint's conversation, then grows as the turn
        goes on, so that afterwards it equals what an uninterrupted turn would have left.
        A model response the checkpoint holds is never requested again; a call with no
        result in it runs again (tools are at-least-once). The stream's
        ``MessageComplete`` reports the whole turn (usage and messages of every step).

        ``ConfigError`` for a checkpoint that is not one (``Checkpoint.from_json``), that
        needs a tool this agent lacks or is past its ``max_steps``, and for answers that
        do not fit its deferred calls; ``BusyError`` while a stream of this agent is
        active.

        .. code-block:: python

            with agent.stream("Delete /tmp/x") as s:
                done = s.final()
                saved = s.checkpoint().to_json()
            # later, maybe in another process, with an agent of the same tools:
            call = done.deferred[0]["call_id"]
            print(agent.resume(saved, {call: panto.Approve()}).text())
        """
        return self._resume(checkpoint, answers, self._runner(None))

    def aresume(self, checkpoint: Union[Checkpoint, str], answers: Optional[Mapping[str, Answer]] = None) -> AsyncStream:
        """``resume()`` as an ``AsyncStream`` (``async for`` / ``async with``), like
        ``astream()``: async tools run on the loop that iterates it."""
        loop = running_loop()
        if loop is None and other_async_library() is not None:
            require_asyncio("aresume()")  # raises: says asyncio only
        runner = self._runner(loop)
        if runner is not None and loop is None:
            raise RuntimeError("aresume() with Python tools needs a running event loop")
        return AsyncStream(self._resume(checkpoint, answers, runner), runner)

    def stream(
        self,
        prompt: Input,
        *,
        model: Optional[str] = None,
        reasoning: ReasoningArg = None,
        output_schema: OutputSchemaArg = None,
        defer_tools: bool = False,
    ) -> Stream:
        """Starts a turn and returns its ``Stream`` (an iterator and context manager).
        ``model`` and ``reasoning`` (an effort such as ``"high"``, or
        ``{"effort", "budget_tokens"}``) apply to this turn only. ``prompt`` is text, or
        a list of text and attachments in order (``["What is this?",
        panto.Image.from_path("cat.png")]``).

        ``output_schema`` makes this turn answer with JSON matching a schema: a JSON
        Schema ``dict``, or a dataclass, ``TypedDict`` or pydantic model (its
        ``panto.output_schema``); ``False`` turns the agent's ``output_schema`` off for
        this turn; ``None`` keeps the agent's. The turn's ``MessageComplete.output`` is
        then the parsed, validated JSON value (``run(output=...)`` also builds the
        type's instance).

        ``defer_tools=True`` defers every tool call: the turn pauses with them
        (``MessageComplete.stop_reason == "deferred"``, the calls in ``.deferred``)
        instead of running them, for an engine that runs each call as its own step and
        continues the turn with ``resume(stream.checkpoint(), answers)``."""
        return self._start(prompt, model, reasoning, output_schema, self._runner(None), defer_tools)

    def astream(
        self,
        prompt: Input,
        *,
        model: Optional[str] = None,
        reasoning: ReasoningArg = None,
        output_schema: OutputSchemaArg = None,
        defer_tools: bool = False,
    ) -> AsyncStream:
        """Starts a turn and returns its ``AsyncStream`` (``async for`` /
        ``async with``). Async tools run on the loop that iterates it. The keyword
        arguments are ``stream()``'s."""
        loop = running_loop()
        if loop is None and other_async_library() is not None:
            require_asyncio("astream()")  # raises: says asyncio only
        runner = self._runner(loop)
        if runner is not None and loop is None:
            raise RuntimeError("astream() with Python tools needs a running event loop")
        stream = self._start(prompt, model, reasoning, output_schema, runner, defer_tools)
        return AsyncStream(stream, runner)

    @overload
    def run(
        self, prompt: Input, *, model: Optional[str] = None, reasoning: ReasoningArg = None, output: None = None
    ) -> MessageComplete: ...

    @overload
    def run(self, prompt: Input, *, model: Optional[str] = None, reasoning: ReasoningArg = None, output: Type[T]) -> T: ...

    @overload
    def run(
        self, prompt: Input, *, model: Optional[str] = None, reasoning: ReasoningArg = None, output: Dict[str, Any]
    ) -> Any: ...

    def run(
        self,
        prompt: Input,
        *,
        model: Optional[str] = None,
        reasoning: ReasoningArg = None,
        output: Union[Type[Any], Dict[str, Any], None] = None,
    ) -> Any:
        """Runs a whole turn and returns its ``MessageComplete`` (``.text``,
        ``.stop_reason``, ``.usage``, ``.messages``, ``.output``).

        With ``output``, the turn must answer with structured output and ``run``
        returns it: given a dataclass, a ``TypedDict`` or a pydantic model, an instance
        of it (a ``TypedDict`` is a dict); given a JSON Schema ``dict``, the parsed JSON
        value. The core validates the answer against the schema and asks the model to
        repair a mismatch (``output_retries`` times); then ``OutputInvalidError``
        (a refusal and an answer cut at ``max_tokens`` have error classes of their
        own: docs/python.md), each with the model's raw text as ``.output``.

        .. code-block:: python

            @dataclass
            class City:
                name: str
                country: str
                population: int | None = None

            city = agent.run("The largest city of Japan?", output=City)
        """
        wanted = None if output is None else Output(output)
        with self.stream(
            prompt, model=model, reasoning=reasoning, output_schema=None if wanted is None else wanted.schema
        ) as s:
            done: MessageComplete = s.final()
        return done if wanted is None else wanted.value(done.output, done.text)

    @overload
    async def arun(
        self, prompt: Input, *, model: Optional[str] = None, reasoning: ReasoningArg = None, output: None = None
    ) -> MessageComplete: ...

    @overload
    async def arun(
        self, prompt: Input, *, model: Optional[str] = None, reasoning: ReasoningArg = None, output: Type[T]
    ) -> T: ...

    @overload
    async def arun(
        self, prompt: Input, *, model: Optional[str] = None, reasoning: ReasoningArg = None, output: Dict[str, Any]
    ) -> Any: ...

    async def arun(
        self,
        prompt: Input,
        *,
        model: Optional[str] = None,
        reasoning: ReasoningArg = None,
        output: Union[Type[Any], Dict[str, Any], None] = None,
    ) -> Any:
        """``run()`` for coroutines (``output`` as there)."""
        wanted = None if output is None else Output(output)
        async with self.astream(
            prompt, model=model, reasoning=reasoning, output_schema=None if wanted is None else wanted.schema
        ) as s:
            done: MessageComplete = await s.final()
        return done if wanted is None else wanted.value(done.output, done.text)

    def _runner(self, loop: Any) -> Optional[Runner]:
        return Runner(self._tools, loop, self._native.tool_timeout_ms / 1000) if self._tools else None

    # -- conversation ----------------------------------------------------------------
    @property
    def history(self) -> List[Dict[str, Any]]:
        """The conversation: a list of messages in the core's canonical JSON form."""
        messages: List[Dict[str, Any]] = json.loads(self._native.history_json())["messages"]
        return messages

    def save_history(self) -> str:
        """The conversation as versioned JSON, for ``restore_history``."""
        return self._native.history_json()

    def restore_history(self, saved: Union[str, Dict[str, Any]]) -> None:
        """Replaces the conversation with one saved by ``save_history`` (the text, or the
        document ``json.loads`` makes of it). Validated: ``ConfigError`` saying where and
        what is wrong if it is not a valid history; ``BusyError`` during a turn."""
        if isinstance(saved, dict):
            saved = json.dumps(saved, ensure_ascii=False)
        elif not isinstance(saved, str):
            hint = " (agent.history is the messages alone)" if isinstance(saved, list) else ""
            raise TypeError(
                f"restore_history takes the text save_history() returned, not a {type(saved).__name__}{hint}"
            )
        self._native.load_history_json(saved)

    def clear_history(self) -> None:
        """Empties the conversation (the configuration and tools stay). ``BusyError``
        during a turn."""
        self._native.clear_history()

    def compact(
        self,
        *,
        keep_last: Optional[int] = None,
        model: Optional[str] = None,
        prompt: Optional[str] = None,
    ) -> CompactResult:
        """Summarizes the older part of the conversation into one synthetic exchange,
        with this agent's provider (and ``model``, default the agent's), keeping the last
        ``keep_last`` messages (default 6) verbatim; a tool call and its results are never
        separated. ``prompt`` replaces the summarization instructions. Blocks (without
        the GIL) for the provider's answer; on failure the conversation is untouched and
        the ``PantoError`` is raised. ``BusyError`` during a turn.

        On the main thread, Ctrl-C (``KeyboardInterrupt``, or any exception a signal
        handler raises) cancels the compaction, waits for it to end, and propagates;
        the conversation is then untouched."""
        options = _compact_options(keep_last, model, prompt)
        if threading.current_thread() is not threading.main_thread():
            return _compact_result(self._native.compact(options))
        # Signal handlers run only on the main thread, and only between bytecodes or in
        # an interruptible wait: so the main thread waits here, in a lock that a signal
        # interrupts, while a thread of the wait pool makes the native call.
        token = _native.CancelToken()
        job: Optional["concurrent.futures.Future[str]"] = None
        try:
            job = WAIT_POOL.submit(self._native.compact, options, token)
            return _compact_result(job.result())
        except BaseException:
            # Also when the signal came before `job` was assigned: a job that starts
            # with its token cancelled sends nothing.
            token.cancel()
            if job is not None:
                concurrent.futures.wait([job])
            raise

    async def acompact(
        self,
        *,
        keep_last: Optional[int] = None,
        model: Optional[str] = None,
        prompt: Optional[str] = None,
    ) -> CompactResult:
        """``compact()`` for coroutines: the wait happens in a thread of panto's own
        wait pool, never on the event loop. Cancelling the awaiting task cancels the
        compaction, and the cancellation propagates once it has ended, with the
        conversation untouched."""
        require_asyncio("acompact()")
        import asyncio

        options = _compact_options(keep_last, model, prompt)
        token = _native.CancelToken()
        job = WAIT_POOL.submit(self._native.compact, options, token)
        try:
            result = await asyncio.wrap_future(job)
        except BaseException:
            if not job.done():
                token.cancel()
                # Waits in the pool, not on the loop; the cancel ends the call promptly.
                # Its outcome (a cancelled error) is taken here: the task's own
                # cancellation is what propagates.
                await asyncio.gather(asyncio.wrap_future(job), return_exceptions=True)
            raise
        return _compact_result(result)

    def call_mcp_tool(self, name: str, arguments: Optional[Mapping[str, Any]] = None) -> ToolOutput:
        """Calls one tool of this agent's MCP servers outside a turn: ``name`` as the
        model sees it (with the server's prefix, e.g. ``"fx__echo"``), ``arguments`` a
        JSON-able mapping (default ``{}``). For an engine that runs each tool call as its
        own step (a turn paused with ``defer_tools=True``): the result is a
        ``panto.ToolOutput``, the answer to give ``Agent.resume`` for that call. The
        servers are started if they were not; the conversation is untouched, and calls
        may run while a turn runs. The tool's own failure (its error result, a timeout,
        a crashed server) is a result with ``is_error=True``. ``ConfigError`` when no MCP
        server of the agent has the tool; blocks (without the GIL) until the server
        answers. On the main thread, Ctrl-C cancels the call (the server is told), waits
        for it to end, and propagates."""
        arguments_json = _mcp_arguments(name, arguments)
        if threading.current_thread() is not threading.main_thread():
            return _tool_output(self._native.call_mcp_tool(name, arguments_json))
        token = _native.CancelToken()
        job: Optional["concurrent.futures.Future[str]"] = None
        try:
            job = WAIT_POOL.submit(self._native.call_mcp_tool, name, arguments_json, token)
            return _tool_output(job.result())
        except BaseException:
            token.cancel()
            if job is not None:
                concurrent.futures.wait([job])
            raise

    async def acall_mcp_tool(self, name: str, arguments: Optional[Mapping[str, Any]] = None) -> ToolOutput:
        """``call_mcp_tool()`` for coroutines: the wait happens in a thread of panto's
        own wait pool, never on the event loop. Cancelling the awaiting task cancels the
        call (the server is told), and the cancellation propagates once it has ended."""
        require_asyncio("acall_mcp_tool()")
        import asyncio

        arguments_json = _mcp_arguments(name, arguments)
        token = _native.CancelToken()
        job = WAIT_POOL.submit(self._native.call_mcp_tool, name, arguments_json, token)
        try:
            result = await asyncio.wrap_future(job)
        except BaseException:
            if not job.done():
                token.cancel()
                await asyncio.gather(asyncio.wrap_future(job), return_exceptions=True)
            raise
        return _tool_output(result)

    def _open(self) -> "_native.Agent":
        """The native agent; ``ConfigError`` once the agent is closed."""
        if isinstance(self._native, _Closed):
            raise ConfigError("this Agent is closed", kind="config")
        return self._native

    def mcp_resources(self, server: Optional[str] = None) -> List[MCPResource]:
        """The resources the agent's MCP server ``server`` lists (every server's, in
        order, when ``None``), starting the servers if they are not running. Blocks
        (without the GIL) for the servers' answers; Ctrl-C on the main thread cancels.
        ``ConfigError`` for an agent without MCP servers or an unknown server."""
        native = self._open()
        return cast(
            List[MCPResource],
            _mcp.blocking(lambda token: _native.mcp_resources(native, server, token)),
        )

    async def amcp_resources(self, server: Optional[str] = None) -> List[MCPResource]:
        """``mcp_resources()`` for coroutines: cancelling the awaiting task cancels the call."""
        native = self._open()
        return cast(
            List[MCPResource],
            await _mcp.ablocking(
                "amcp_resources()", lambda token: _native.mcp_resources(native, server, token)
            ),
        )

    def mcp_read_resource(self, uri: str, *, server: Optional[str] = None) -> MCPResourceContents:
        """Reads the resource ``uri`` from ``server`` (default: the only server, else the
        one that lists it): ``{"contents": [{"uri", "mime_type"?, "text" | "blob",
        "part"}]}``, ``part`` a ``str``, ``panto.Image`` or ``panto.Document`` that
        attaches the content to a turn:
        ``agent.run(["Summarize this:", read["contents"][0]["part"]])``.
        A resource the server does not have raises the error of kind not_found."""
        native = self._open()
        return cast(
            MCPResourceContents,
            _mcp.read_parts(_mcp.blocking(lambda token: _native.mcp_read_resource(native, uri, server, token))),
        )

    async def amcp_read_resource(self, uri: str, *, server: Optional[str] = None) -> MCPResourceContents:
        """``mcp_read_resource()`` for coroutines."""
        native = self._open()
        return cast(
            MCPResourceContents,
            _mcp.read_parts(
                await _mcp.ablocking(
                    "amcp_read_resource()",
                    lambda token: _native.mcp_read_resource(native, uri, server, token),
                )
            ),
        )

    def mcp_prompts(self, server: Optional[str] = None) -> List[MCPPrompt]:
        """The prompts the agent's MCP server ``server`` lists (every server's when
        ``None``), with their arguments."""
        native = self._open()
        return cast(
            List[MCPPrompt],
            _mcp.blocking(lambda token: _native.mcp_prompts(native, server, token)),
        )

    async def amcp_prompts(self, server: Optional[str] = None) -> List[MCPPrompt]:
        """``mcp_prompts()`` for coroutines."""
        native = self._open()
        return cast(
            List[MCPPrompt],
            await _mcp.ablocking("amcp_prompts()", lambda token: _native.mcp_prompts(native, server, token)),
        )

    def mcp_get_prompt(
        self, name: str, arguments: Optional[Dict[str, str]] = None, *, server: Optional[str] = None
    ) -> MCPPromptResult:
        """The prompt ``name`` filled in with ``arguments`` (from ``server``; default: the
        only server, else the one that lists it): ``{"description"?, "messages":
        [{"role", "content": [parts]}]}``. Arguments the server refuses raise the error of
        kind bad_request."""
        native = self._open()
        args = _mcp.arguments_json(arguments)
        return cast(
            MCPPromptResult,
            _mcp.prompt_parts(_mcp.blocking(lambda token: _native.mcp_get_prompt(native, name, args, server, token))),
        )

    async def amcp_get_prompt(
        self, name: str, arguments: Optional[Dict[str, str]] = None, *, server: Optional[str] = None
    ) -> MCPPromptResult:
        """``mcp_get_prompt()`` for coroutines."""
        native = self._open()
        args = _mcp.arguments_json(arguments)
        return cast(
            MCPPromptResult,
            _mcp.prompt_parts(
                await _mcp.ablocking(
                    "amcp_get_prompt()",
                    lambda token: _native.mcp_get_prompt(native, name, args, server, token),
                )
            ),
        )

    def count_tokens(self, input: str) -> TokenCount:
        """How many tokens the request of a turn with ``input`` would be now: the
        conversation, the tools, the system prompt and the input. The provider counts
        where it has a count endpoint (Anthropic, Gemini, OpenAI Responses); otherwise it
        is an estimate (``estimated``) and nothing is sent. Nothing enters the
        conversation. Blocks (without the GIL) for the provider's answer, bounded by the
        agent's timeouts; errors are raised as a turn's."""
        return TokenCount(**json.loads(self._native.count_tokens(input)))

    async def acount_tokens(self, input: str) -> TokenCount:
        """``count_tokens()`` for coroutines: the wait happens in a thread of panto's
        own wait pool, never on the event loop."""
        require_asyncio("acount_tokens()")
        import asyncio

        job = WAIT_POOL.submit(self._native.count_tokens, input)
        return TokenCount(**json.loads(await asyncio.wrap_future(job)))

    def transcript(self) -> List[Dict[str, Any]]:
        """A flat, provider-neutral view of the conversation for repainting a UI:
        ``{"role", "kind": "text"|"reasoning"|"tool_call"|"tool_result", "text",
        "name"?, "call_id"?, "is_error"?}`` in order."""
        entries: List[Dict[str, Any]] = json.loads(self._native.transcript_json())
        return entries

    # -- description -----------------------------------------------------------------
    @property
    def tools(self) -> Dict[str, Tool[..., Any]]:
        """The Python tools this agent runs by itself, by name."""
        return dict(self._tools)

    @property
    def provider(self) -> str:
        """The wire format this agent speaks: ``"openai"``, ``"anthropic"``, ``"gemini"``
        or ``"openai-responses"``."""
        return self._native.provider

    @property
    def model(self) -> str:
        """The model every turn asks, unless the turn names its own (``stream(...,
        model=...)``)."""
        return self._native.model

    @property
    def base_url(self) -> str:
        """The base URL requests go to, as the provider's SDK writes it (the provider's
        own API when none was given)."""
        return self._native.base_url

    def __repr__(self) -> str:
        if isinstance(self._native, _Closed):
            return "panto.Agent(closed)"
        # Never the API key.
        return f"panto.Agent(provider={self.provider!r}, model={self.model!r}, base_url={self.base_url!r})"

    # -- lifecycle -------------------------------------------------------------------
    def close(self) -> None:
        """Ends this agent: cancels its running turn, if any (its stream then raises
        ``StreamCancelledError``; the history it leaves is valid), and lets go of the
        conversation and the tools. Every later call raises ``ConfigError``. Never
        blocks; idempotent; safe from any thread."""
        control, self._control = self._control, None
        if control is not None:
            control.cancel()
        # Every use then raises ConfigError (typed as the agent it replaces).
        self._native = cast(_native.Agent, _Closed())
        self._tools = {}

    def __enter__(self) -> "Agent":
        """Returns the agent, for ``with panto.Agent(...) as agent:``."""
        return self

    def __exit__(self, *exc: object) -> None:
        """Closes the agent (``close()``) when the ``with`` block ends."""
        self.close()

    async def __aenter__(self) -> "Agent":
        """Returns the agent, for ``async with panto.Agent(...) as agent:``."""
        return self

    async def __aexit__(self, *exc: object) -> None:
        """Closes the agent (``close()``) when the ``async with`` block ends."""
        self.close()


class _Closed:
    """What a closed ``Agent`` holds instead of its native agent."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        raise ConfigError("this Agent is closed", kind="config")


def diagnostics() -> Dict[str, int]:
    """Counters for leak checks: turns still running, and panto's own threads.
    ``waits_in_flight`` counts async streams waiting for their next event, on an event
    loop's reader (``waits_on_loop``: no thread) or in a ``wait_threads`` thread (loops
    without ``add_reader``), and the async API's blocking calls in those threads.
    ``tool_threads_stuck`` counts sync tools still running past their agent's
    ``tool_timeout_ms`` (the turn answered the model with a timeout; a Python function
    cannot be interrupted): they do not count against the pool's limit, and each one is
    logged as a warning on the ``panto`` logger. ``tools_queued`` wait for a thread."""
    return {
        "active_streams": _native.active_streams(),
        "wait_threads": WAIT_POOL.threads,
        "waits_in_flight": WAIT_POOL.busy + loop_waits(),
        "waits_on_loop": loop_waits(),
        "tool_threads": TOOL_POOL.threads,
        "tools_in_flight": TOOL_POOL.busy,
        "tool_threads_stuck": TOOL_POOL.stuck,
        "tools_queued": TOOL_POOL.queued,
    }


@atexit.register
def _at_exit() -> None:
    # Every stream is cancelled (which ends every wait), and a thread whose wait ends
    # from now on never re-enters the finalizing interpreter.
    _native._shutdown()
