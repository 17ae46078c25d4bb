"""OpenTelemetry spans and metrics of every turn, named as the GenAI semantic conventions
say (docs/observability.md), through the host's own OpenTelemetry API.

``opentelemetry-api`` is imported only when instrumentation is made
(``panto.instrument()``, ``Agent(instrument=...)``): ``import panto`` does not import it.
The spans are made from the events as the stream hands them out, so their times are
delivery times.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Union
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.metrics import Histogram, Meter, MeterProvider
    from opentelemetry.trace import Span, Tracer, TracerProvider
    from opentelemetry.util.types import AttributeValue

    Attributes = Dict[str, AttributeValue]

#: One content attribute's bound (a prompt, an answer, a tool's arguments or result),
#: as in the Rust core and Go.
MAX_CONTENT_BYTES = 16 * 1024

_CAPTURE_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"


def _capture_env() -> bool:
    return os.environ.get(_CAPTURE_ENV, "").strip().lower() == "true"


def _bounded(text: str) -> str:
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= MAX_CONTENT_BYTES:
        return text
    return data[:MAX_CONTENT_BYTES].decode("utf-8", "ignore")


def _message_json(role: str, text: str) -> str:
    return json.dumps([{"role": role, "parts": [{"type": "text", "content": text}]}], ensure_ascii=False)


def provider_name(provider: str, base_url: str) -> str:
    """``gen_ai.provider.name`` for panto's provider names."""
    if provider == "anthropic":
        return "anthropic"
    if provider == "gemini":
        return "gcp.gemini"
    if ".openai.azure.com" in base_url or ".services.ai.azure.com" in base_url:
        return "azure.ai.openai"
    return "openai"


#: The conventions' bucket advice for the time histograms (seconds).
_DURATION_BUCKETS: Sequence[float] = (
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
)
#: The conventions' bucket advice for ``gen_ai.client.token.usage`` (tokens).
_TOKEN_BUCKETS: Sequence[float] = (
    1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864,
)


def _histogram(meter: "Meter", name: str, unit: str, description: str, buckets: Sequence[float]) -> "Histogram":
    """A histogram with the conventions' bucket advice, or without it when the meter's
    ``create_histogram`` predates the ``explicit_bucket_boundaries_advisory`` parameter
    (opentelemetry-api before 1.23, or a meter of the host's own that lacks it)."""
    try:
        return meter.create_histogram(
            name, unit=unit, description=description, explicit_bucket_boundaries_advisory=buckets
        )
    except TypeError:
        return meter.create_histogram(name, unit=unit, description=description)


def _server(base_url: str) -> "Attributes":
    try:
        parts = urlsplit(base_url)
        port = parts.port
    except ValueError:
        return {}
    out: "Attributes" = {}
    if parts.hostname:
        out["server.address"] = parts.hostname
        if port is None:
            port = {"https": 443, "http": 80}.get(parts.scheme)
        if port is not None:
            out["server.port"] = port
    return out


class Instrumentation:
    """Where instrumented turns record their spans and metrics: the host's own
    OpenTelemetry tracer and meter providers (``None``: the global ones,
    ``opentelemetry.trace.get_tracer_provider()`` / ``metrics.get_meter_provider()``).
    ``capture_content`` records message content (at most 16 KiB a value); it is also on
    when ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` is ``true``.

    Made by ``panto.instrument()`` (every agent) or given to one agent as
    ``Agent(instrument=...)``."""

    __slots__ = {
        "_tracer": "The tracer of the spans.",
        "_duration": "gen_ai.client.operation.duration",
        "_tokens": "gen_ai.client.token.usage",
        "_ttfc": "gen_ai.client.operation.time_to_first_chunk",
        "capture_content": "Whether message content (prompts, answers, tool arguments and results) is recorded.",
    }

    def __init__(
        self,
        tracer_provider: Optional["TracerProvider"] = None,
        meter_provider: Optional["MeterProvider"] = None,
        capture_content: bool = False,
    ) -> None:
        """Takes the tracer and the three histograms from the providers (imports
        ``opentelemetry``: ``ImportError`` without ``opentelemetry-api``)."""
        from opentelemetry import metrics, trace

        from . import _native

        tp = tracer_provider if tracer_provider is not None else trace.get_tracer_provider()
        self._tracer: Tracer = tp.get_tracer("panto", _native.__version__)
        mp = meter_provider if meter_provider is not None else metrics.get_meter_provider()
        meter = mp.get_meter("panto", _native.__version__)
        self._duration: Histogram = _histogram(
            meter, "gen_ai.client.operation.duration", "s", "GenAI operation duration", _DURATION_BUCKETS
        )
        self._tokens: Histogram = _histogram(
            meter, "gen_ai.client.token.usage", "{token}", "Number of input and output tokens used", _TOKEN_BUCKETS
        )
        self._ttfc: Histogram = _histogram(
            meter,
            "gen_ai.client.operation.time_to_first_chunk",
            "s",
            "Time to the first chunk of a streamed response",
            _DURATION_BUCKETS,
        )
        self.capture_content: bool = bool(capture_content) or _capture_env()

    def __repr__(self) -> str:
        return f"panto.Instrumentation(capture_content={self.capture_content!r})"

    def _observer(self, provider: str, base_url: str, model: str, text: str, resumed: bool) -> "_Observer":
        return _Observer(self, provider_name(provider, base_url), model, _server(base_url), text, resumed)


_lock = threading.Lock()
_global: Optional[Instrumentation] = None


def instrument(
    tracer_provider: Optional["TracerProvider"] = None,
    meter_provider: Optional["MeterProvider"] = None,
    capture_content: bool = False,
) -> Instrumentation:
    """Makes every turn started afterwards, by any agent not made with
    ``instrument=False``, record OpenTelemetry spans and metrics named as the GenAI
    semantic conventions say (docs/observability.md): an ``invoke_agent`` span, a child
    of the span current when ``stream()`` / ``astream()`` / ``resume()`` is called, with
    a ``chat {model}`` span per model request and an ``execute_tool {tool}`` span per
    tool call. The providers default to OpenTelemetry's global ones. Returns the
    ``Instrumentation`` (also usable as ``Agent(instrument=...)``); ``uninstrument()``
    turns it off. Needs ``opentelemetry-api`` (``pip install panto[otel]``)."""
    global _global
    made = Instrumentation(tracer_provider, meter_provider, capture_content)
    with _lock:
        _global = made
    return made


def uninstrument() -> None:
    """Turns ``instrument()`` off: turns started afterwards record nothing (unless their
    agent was given its own ``Instrumentation``)."""
    global _global
    with _lock:
        _global = None


def current() -> Optional[Instrumentation]:
    """The instrumentation ``instrument()`` set, if any."""
    return _global


#: ``Agent(instrument=...)``: ``None`` follows ``panto.instrument()``, ``True``
#: instruments with the global providers, ``False`` never, or an ``Instrumentation``.
InstrumentArg = Union[bool, Instrumentation, None]


def resolve(arg: InstrumentArg) -> Union[bool, Instrumentation, None]:
    """What an agent keeps of its ``instrument`` argument (checked)."""
    if arg is True:
        return Instrumentation()
    if arg is None or arg is False or isinstance(arg, Instrumentation):
        return arg
    raise TypeError(f"instrument: True, False, None or a panto.Instrumentation, not a {type(arg).__name__}")


def for_agent(kept: Union[bool, Instrumentation, None]) -> Optional[Instrumentation]:
    """The instrumentation of a turn starting now."""
    if isinstance(kept, Instrumentation):
        return kept
    if kept is False:
        return None
    return _global


class _Tool:
    __slots__ = ("span", "at")

    def __init__(self, span: Optional["Span"], at: float) -> None:
        self.span = span
        self.at = at


class _Observer:
    """One instrumented turn: its spans, fed by the events the stream hands out
    (``event``) and its end without ``MessageComplete`` (``end``)."""

    def __init__(
        self, ins: Instrumentation, provider: str, model: str, server: "Attributes", text: str, resumed: bool
    ) -> None:
        from opentelemetry import context, trace

        self._trace = trace
        self._mu = threading.Lock()
        self._ins = ins
        self._provider = provider
        self._model = model
        self._server = server
        self._response_model = ""
        self._chat: Optional["Span"] = None
        self._chat_msg = -1
        self._chat_at = 0.0
        self._first = False
        self._tools: Dict[str, _Tool] = {}
        self._done = False
        attrs: "Attributes" = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.provider.name": provider,
            "gen_ai.request.model": model,
            "panto.turn.resumed": resumed,
            **server,
        }
        if ins.capture_content and not resumed:
            attrs["gen_ai.input.messages"] = _message_json("user", _bounded(text))
        parent = context.get_current()
        self._agent: Span = ins._tracer.start_span(
            "invoke_agent", context=parent, kind=trace.SpanKind.INTERNAL, attributes=attrs
        )
        self._ctx: Context = trace.set_span_in_context(self._agent, parent)

    # -- helpers ---------------------------------------------------------------------
    def _metric_attrs(self, op: str, **extra: str) -> "Attributes":
        out: "Attributes" = {
            "gen_ai.operation.name": op,
            "gen_ai.provider.name": self._provider,
            "gen_ai.request.model": self._model,
        }
        if op == "chat":
            # A model request's: the server's address and port (a tool call has none).
            out.update(self._server)
        for k, v in extra.items():
            out[k.replace("__", ".")] = v
        return out

    def _fail(self, span: "Span", kind: str, message: str) -> None:
        from opentelemetry.trace import Status, StatusCode

        span.set_attribute("error.type", kind)
        span.set_status(Status(StatusCode.ERROR, message))

    def _chat_span(self, message: int) -> None:
        if self._chat is not None and self._chat_msg == message:
            return
        self._end_chat(None)
        self._chat_msg, self._chat_at, self._first = message, time.monotonic(), False
        attrs: "Attributes" = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": self._provider,
            "gen_ai.request.model": self._model,
            "panto.message": message,
            **self._server,
        }
        self._chat = self._ins._tracer.start_span(
            f"chat {self._model}", context=self._ctx, kind=self._trace.SpanKind.CLIENT, attributes=attrs
        )

    def _end_chat(self, error: Optional[Sequence[str]]) -> None:
        chat = self._chat
        if chat is None:
            return
        self._chat = None
        if error is not None:
            self._fail(chat, error[0], error[1])
        chat.end()
        extra = {"gen_ai__response__model": self._response_model}
        if error is not None:
            extra["error__type"] = error[0]
        self._ins._duration.record(
            time.monotonic() - self._chat_at, self._metric_attrs("chat", **extra), context=self._ctx
        )

    def _first_chunk(self, message: int) -> None:
        if self._chat is None or self._chat_msg != message or self._first:
            return
        self._first = True
        d = time.monotonic() - self._chat_at
        self._chat.set_attribute("gen_ai.response.time_to_first_chunk", d)
        self._ins._ttfc.record(d, self._metric_attrs("chat"), context=self._ctx)

    @staticmethod
    def _usage(usage: Any) -> "Attributes":
        if not usage.reported:
            return {}
        out: "Attributes" = {
            "gen_ai.usage.input_tokens": usage.input_tokens,
            "gen_ai.usage.output_tokens": usage.output_tokens,
        }
        if usage.cache_read_tokens > 0:
            out["gen_ai.usage.cache_read.input_tokens"] = usage.cache_read_tokens
        if usage.cache_write_tokens > 0:
            out["gen_ai.usage.cache_creation.input_tokens"] = usage.cache_write_tokens
        if usage.reasoning_tokens > 0:
            out["gen_ai.usage.reasoning.output_tokens"] = usage.reasoning_tokens
        return out

    # -- what the stream calls -------------------------------------------------------
    def event(self, ev: Any) -> None:
        """One event the stream handed out."""
        with self._mu:
            if not self._done:
                self._event(ev)

    def _event(self, ev: Any) -> None:
        # One method per event type this records, ``_on_<type>``; the others pass by.
        handler = getattr(self, "_on_" + ev.type, None)
        if handler is not None:
            handler(ev)

    def _on_provider_retry(self, ev: Any) -> None:
        self._chat_span(ev.message)
        attrs: "Attributes" = {
            "panto.retry.attempt": ev.attempt,
            "panto.retry.delay_ms": ev.delay_ms,
            "panto.retry.reason": ev.reason,
        }
        if ev.status:
            attrs["http.response.status_code"] = ev.status
        assert self._chat is not None
        self._chat.add_event("retry", attrs)

    def _on_message_start(self, ev: Any) -> None:
        self._chat_span(ev.message)
        assert self._chat is not None
        self._response_model = ev.model
        self._chat.set_attribute("gen_ai.response.model", ev.model)
        if ev.response_id:
            self._chat.set_attribute("gen_ai.response.id", ev.response_id)

    def _on_block_start(self, ev: Any) -> None:
        self._first_chunk(ev.message)

    def _on_content_delta(self, ev: Any) -> None:
        self._first_chunk(ev.message)

    def _on_message_end(self, ev: Any) -> None:
        if self._chat is not None and self._chat_msg == ev.message:
            self._chat.set_attribute("gen_ai.response.finish_reasons", [ev.stop_reason])
            self._chat.set_attributes(self._usage(ev.usage))
            if ev.usage.reported:
                rm = self._response_model
                for token_type, n in (("input", ev.usage.input_tokens), ("output", ev.usage.output_tokens)):
                    self._ins._tokens.record(
                        n,
                        self._metric_attrs("chat", gen_ai__response__model=rm, gen_ai__token__type=token_type),
                        context=self._ctx,
                    )
            self._end_chat(None)

    def _on_tool_call_start(self, ev: Any) -> None:
        attrs = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.provider.name": self._provider,
            "gen_ai.tool.name": ev.name,
            "gen_ai.tool.call.id": ev.call_id,
            "gen_ai.tool.type": "function",
            "panto.tool.runner": "python" if ev.host else "rust",
        }
        if self._ins.capture_content:
            args = ev.arguments_raw
            if ev.arguments is not None:
                args = json.dumps(ev.arguments, ensure_ascii=False)
            attrs["gen_ai.tool.call.arguments"] = _bounded(args or "")
        span = self._ins._tracer.start_span(
            f"execute_tool {ev.name}", context=self._ctx, kind=self._trace.SpanKind.INTERNAL, attributes=attrs
        )
        self._tools[ev.call_id] = _Tool(span, time.monotonic())

    def _on_tool_result(self, ev: Any) -> None:
        tool = self._tools.pop(ev.call_id, None)
        if tool is None:
            tool = _Tool(
                self._ins._tracer.start_span(
                    f"execute_tool {ev.name}",
                    context=self._ctx,
                    attributes={
                        "gen_ai.operation.name": "execute_tool",
                        "gen_ai.provider.name": self._provider,
                        "gen_ai.tool.name": ev.name,
                        "gen_ai.tool.call.id": ev.call_id,
                        "gen_ai.tool.type": "function",
                        "panto.tool.runner": "answered",
                    },
                ),
                time.monotonic(),
            )
        assert tool.span is not None
        if self._ins.capture_content:
            tool.span.set_attribute("gen_ai.tool.call.result", _bounded(ev.output))
        if ev.is_error:
            self._fail(tool.span, "tool_error", "the tool reported a failure")
        tool.span.end()
        extra = {"error__type": "tool_error"} if ev.is_error else {}
        self._ins._duration.record(
            time.monotonic() - tool.at, self._metric_attrs("execute_tool", **extra), context=self._ctx
        )

    def _on_message_complete(self, ev: Any) -> None:
        self._end_chat(None)
        self._agent.set_attribute("gen_ai.response.finish_reasons", [ev.stop_reason])
        self._agent.set_attribute("panto.turn.messages", ev.messages)
        if self._response_model:
            self._agent.set_attribute("gen_ai.response.model", self._response_model)
        self._agent.set_attributes(self._usage(ev.usage))
        if self._ins.capture_content:
            self._agent.set_attribute("gen_ai.output.messages", _message_json("assistant", _bounded(ev.text)))
        self._done = True
        self._agent.end()

    def end(self, error: Optional[BaseException]) -> None:
        """The stream ended without ``MessageComplete``: ``error`` is its exception, or
        ``None`` when it was closed (or interrupted) before its end (a cancel)."""
        with self._mu:
            if self._done:
                return
            self._done = True
            if error is None:
                failure: List[str] = ["cancelled", "the stream was closed before the turn ended"]
            else:
                failure = [str(getattr(error, "kind", "") or "internal"), str(error)]
            self._end_chat(failure)
            for tool in self._tools.values():
                if tool.span is not None:
                    self._fail(tool.span, failure[0], failure[1])
                    tool.span.end()
            self._tools.clear()
            self._fail(self._agent, failure[0], failure[1])
            self._agent.end()
