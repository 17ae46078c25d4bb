"""OpenTelemetry instrumentation (``panto.instrument()``, ``Agent(instrument=...)``),
checked with the real SDK's in-memory span exporter and metric reader against the
scripted server: the span tree and its attributes, content only when asked, a failure's
``error.type``, a retry, a cancel, the three metrics, and ``import panto`` importing no
OpenTelemetry."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from urllib.parse import urlsplit

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry import trace  # noqa: E402
from opentelemetry.sdk.metrics import MeterProvider  # noqa: E402
from opentelemetry.sdk.metrics.export import InMemoryMetricReader  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from opentelemetry.trace import SpanKind, StatusCode  # noqa: E402

import panto  # noqa: E402
from panto import _otel  # noqa: E402
from conftest import error_exchange, exchange, make_agent, text_exchange, text_sse, tool_sse, wait_until  # noqa: E402

KEY = "sk-test-0123456789"

# The GenAI conventions' bucket advice (gen-ai-metrics.md), written out here rather than
# taken from panto so that a wrong constant fails.
DURATION_BOUNDS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
TOKEN_BOUNDS = tuple(4.0**i for i in range(14))


class Pipeline:
    def __init__(self) -> None:
        self.spans = InMemorySpanExporter()
        self.tp = TracerProvider()
        self.tp.add_span_processor(SimpleSpanProcessor(self.spans))
        self.reader = InMemoryMetricReader()
        self.mp = MeterProvider(metric_readers=[self.reader])

    def named(self, name):
        return [s for s in self.spans.get_finished_spans() if s.name == name]

    def one(self, name):
        found = self.named(name)
        assert len(found) == 1, (name, [s.name for s in self.spans.get_finished_spans()])
        return found[0]

    def text(self) -> str:
        out = []
        for s in self.spans.get_finished_spans():
            out.append(f"{s.name} {s.status.description} {dict(s.attributes)}")
            for e in s.events:
                out.append(f"{e.name} {dict(e.attributes)}")
        return "\n".join(out)

    def metrics(self):
        data = self.reader.get_metrics_data()
        found = {}
        for rm in data.resource_metrics:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    found[m.name] = m
        return found

    def close(self) -> None:
        self.tp.shutdown()
        self.mp.shutdown()


@pytest.fixture
def otel():
    p = Pipeline()
    yield p
    p.close()


@panto.tool
def weather(city: str) -> str:
    """Current weather in a city."""
    return "18°C, sunny"


def weather_scenario(server) -> None:
    server.scenario(
        exchange(tool_sse([("call_1", "weather", {"city": "Paris"})])),
        text_exchange(["It is 18°C and sunny ", "in Paris."]),
    )


def check_tree(p: Pipeline, caller) -> None:
    agent = p.one("invoke_agent")
    assert agent.parent is not None and agent.parent.span_id == caller.span_id
    assert agent.context.trace_id == caller.trace_id
    assert agent.kind == SpanKind.INTERNAL
    a = agent.attributes
    assert a["gen_ai.operation.name"] == "invoke_agent"
    assert a["gen_ai.provider.name"] == "openai"
    assert a["gen_ai.request.model"] == "gpt-test"
    assert a["gen_ai.response.model"] == "gpt-test"
    assert a["server.address"] == "127.0.0.1"
    assert tuple(a["gen_ai.response.finish_reasons"]) == ("end_turn",)
    assert a["gen_ai.usage.input_tokens"] == 20 and a["gen_ai.usage.output_tokens"] == 10
    assert a["panto.turn.resumed"] is False
    assert agent.status.status_code != StatusCode.ERROR
    chats = p.named("chat gpt-test")
    assert len(chats) == 2
    for c in chats:
        assert c.parent.span_id == agent.context.span_id and c.kind == SpanKind.CLIENT
        assert c.attributes["gen_ai.operation.name"] == "chat"
        assert c.attributes["gen_ai.response.model"] == "gpt-test"
        assert c.attributes["gen_ai.usage.input_tokens"] == 10
        assert c.attributes["gen_ai.response.time_to_first_chunk"] >= 0
    assert sorted(c.attributes["gen_ai.response.id"] for c in chats) == ["chatcmpl-1", "chatcmpl-t"]
    assert sorted(tuple(c.attributes["gen_ai.response.finish_reasons"]) for c in chats) == [("end_turn",), ("tool_use",)]
    tool = p.one("execute_tool weather")
    assert tool.parent.span_id == agent.context.span_id
    t = tool.attributes
    assert t["gen_ai.operation.name"] == "execute_tool"
    assert t["gen_ai.tool.name"] == "weather" and t["gen_ai.tool.call.id"] == "call_1"
    assert t["gen_ai.tool.type"] == "function"
    assert t["panto.tool.runner"] == "python"
    # The tool ran between the two requests.
    first, second = sorted(chats, key=lambda c: c.start_time)
    assert first.end_time <= tool.start_time and tool.end_time <= second.start_time
    assert KEY not in p.text()


def test_a_tool_turn_under_the_callers_span_makes_the_documented_tree(server, otel):
    weather_scenario(server)
    agent = make_agent(server, tools=[weather], instrument=panto.Instrumentation(otel.tp, otel.mp))
    with otel.tp.get_tracer("host").start_as_current_span("caller") as caller:
        with agent.stream("weather in Paris?") as s:
            for _ in s:
                pass
    check_tree(otel, caller.get_span_context())
    text = otel.text()
    assert "Paris" not in text and "sunny" not in text, text  # content off by default


async def test_an_async_turn_makes_the_same_tree(server, otel):
    weather_scenario(server)
    agent = make_agent(server, tools=[weather], instrument=panto.Instrumentation(otel.tp, otel.mp))
    with otel.tp.get_tracer("host").start_as_current_span("caller") as caller:
        async with agent.astream("weather in Paris?") as s:
            async for _ in s:
                pass
    check_tree(otel, caller.get_span_context())
    assert "Paris" not in otel.text()


def test_content_is_recorded_when_asked(server, otel):
    weather_scenario(server)
    agent = make_agent(
        server, tools=[weather], instrument=panto.Instrumentation(otel.tp, otel.mp, capture_content=True)
    )
    done = agent.run("weather in Paris?")
    assert done.text == "It is 18°C and sunny in Paris."
    a = otel.one("invoke_agent").attributes
    assert json.loads(a["gen_ai.input.messages"]) == [
        {"role": "user", "parts": [{"type": "text", "content": "weather in Paris?"}]}
    ]
    assert json.loads(a["gen_ai.output.messages"])[0]["parts"][0]["content"] == "It is 18°C and sunny in Paris."
    t = otel.one("execute_tool weather").attributes
    assert json.loads(t["gen_ai.tool.call.arguments"]) == {"city": "Paris"}
    assert t["gen_ai.tool.call.result"] == "18°C, sunny"
    assert KEY not in otel.text()


def test_the_conventions_variable_turns_content_on(server, otel, monkeypatch):
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    server.scenario(text_exchange(["hello"]))
    make_agent(server, instrument=panto.Instrumentation(otel.tp, otel.mp)).run("say hi")
    assert "say hi" in otel.one("invoke_agent").attributes["gen_ai.input.messages"]


def test_content_is_bounded(server, otel):
    server.scenario(text_exchange(["ok"]))
    agent = make_agent(server, instrument=panto.Instrumentation(otel.tp, capture_content=True))
    agent.run("é" * 20_000)
    recorded = json.loads(otel.one("invoke_agent").attributes["gen_ai.input.messages"])
    content = recorded[0]["parts"][0]["content"]
    assert set(content) == {"é"} and len(content.encode()) == 16 * 1024


def test_a_401_sets_error_type_and_status_and_a_retry_is_an_event(server, otel):
    server.scenario(
        error_exchange(503, {"error": {"type": "overloaded", "message": "busy"}}),
        error_exchange(401, {"error": {"type": "invalid_api_key", "message": "no"}}),
    )
    agent = make_agent(
        server,
        retry={"max_retries": 1, "initial_delay_ms": 1},
        instrument=panto.Instrumentation(otel.tp, otel.mp),
    )
    with pytest.raises(panto.AuthenticationError):
        agent.run("hi")
    for name in ("invoke_agent", "chat gpt-test"):
        span = otel.one(name)
        assert span.attributes["error.type"] == "authentication", name
        assert span.status.status_code == StatusCode.ERROR
    chat = otel.one("chat gpt-test")
    assert [e.name for e in chat.events] == ["retry"]
    retry = chat.events[0].attributes
    assert retry["panto.retry.attempt"] == 2 and retry["http.response.status_code"] == 503
    assert KEY not in otel.text()
    durations = otel.metrics()["gen_ai.client.operation.duration"].data.data_points
    assert any(dp.attributes.get("error.type") == "authentication" for dp in durations)


def held(server) -> None:
    """A response that sends its first chunks, then holds."""
    sse = text_sse(["before", "after"])
    cut = sum(len(("data: " + json.dumps(i["data"], separators=(",", ":")) + "\n\n").encode()) for i in sse[:2])
    server.scenario(exchange(sse, fault={"kind": "hold", "after_bytes": cut}))


def test_closing_a_stream_before_its_end_is_a_cancel(server, otel):
    held(server)
    agent = make_agent(server, instrument=panto.Instrumentation(otel.tp, otel.mp))
    s = agent.stream("hi")
    for ev in s:
        if ev.type == "content_delta":
            break
    wait_until(lambda: server.held() == 1, what="the response to be held")
    assert otel.named("invoke_agent") == [] and otel.named("chat gpt-test") == []  # still open
    s.close()
    for name in ("invoke_agent", "chat gpt-test"):
        span = otel.one(name)
        assert span.attributes["error.type"] == "cancelled", name
        assert span.status.status_code == StatusCode.ERROR


def test_a_cancel_from_another_thread_ends_the_spans(server, otel):
    held(server)
    agent = make_agent(server, instrument=panto.Instrumentation(otel.tp, otel.mp))
    s = agent.stream("hi")
    outcome = {}

    def consume():
        try:
            for _ in s:
                pass
        except panto.PantoError as e:
            outcome["error"] = e

    t = threading.Thread(target=consume)
    t.start()
    wait_until(lambda: server.held() == 1 and s.consumer_waiting(), what="the consumer to block")
    s.cancel()
    t.join(10)
    assert not t.is_alive()
    assert isinstance(outcome["error"], panto.StreamCancelledError)
    assert otel.one("invoke_agent").attributes["error.type"] == "cancelled"


async def test_an_async_stream_closed_early_is_a_cancel(server, otel):
    held(server)
    agent = make_agent(server, instrument=panto.Instrumentation(otel.tp, otel.mp))
    async with agent.astream("hi") as s:
        async for ev in s:
            if ev.type == "content_delta":
                break
        assert otel.named("invoke_agent") == []
    span = otel.one("invoke_agent")
    assert span.attributes["error.type"] == "cancelled"
    assert span.status.status_code == StatusCode.ERROR


def test_the_three_metrics(server, otel):
    weather_scenario(server)
    make_agent(server, tools=[weather], instrument=panto.Instrumentation(otel.tp, otel.mp)).run("weather?")
    m = otel.metrics()
    assert set(m) >= {
        "gen_ai.client.operation.duration",
        "gen_ai.client.token.usage",
        "gen_ai.client.operation.time_to_first_chunk",
    }
    assert m["gen_ai.client.operation.duration"].unit == "s"
    assert m["gen_ai.client.token.usage"].unit == "{token}"
    ops = {dp.attributes["gen_ai.operation.name"]: dp for dp in m["gen_ai.client.operation.duration"].data.data_points}
    assert ops["chat"].count == 2 and ops["execute_tool"].count == 1
    assert ops["chat"].attributes["gen_ai.provider.name"] == "openai"
    assert ops["chat"].attributes["gen_ai.request.model"] == "gpt-test"
    tokens = {dp.attributes["gen_ai.token.type"]: dp for dp in m["gen_ai.client.token.usage"].data.data_points}
    assert tokens["input"].sum == 20 and tokens["input"].count == 2
    assert tokens["output"].sum == 10
    ttfc = m["gen_ai.client.operation.time_to_first_chunk"].data.data_points
    assert sum(dp.count for dp in ttfc) == 2
    # The model requests' points carry the server's address and port; a tool call's none.
    port = urlsplit(server.base_url).port
    assert port is not None
    for dp in [ops["chat"], *tokens.values(), *ttfc]:
        assert dp.attributes["server.address"] == "127.0.0.1", dp.attributes
        assert dp.attributes["server.port"] == port, dp.attributes
    assert not any(k.startswith("server.") for k in ops["execute_tool"].attributes)
    # The histograms' boundaries are the conventions' advice.
    assert tuple(ops["chat"].explicit_bounds) == DURATION_BOUNDS
    assert tuple(ops["execute_tool"].explicit_bounds) == DURATION_BOUNDS
    assert all(tuple(dp.explicit_bounds) == DURATION_BOUNDS for dp in ttfc)
    assert all(tuple(dp.explicit_bounds) == TOKEN_BOUNDS for dp in tokens.values())


def test_a_meter_without_bucket_advice_still_makes_the_histograms():
    # A meter whose create_histogram predates explicit_bucket_boundaries_advisory.
    class OldMeter:
        def create_histogram(self, name, unit="", description=""):
            return (name, unit, description)

    assert _otel._histogram(OldMeter(), "h", "s", "d", DURATION_BOUNDS) == ("h", "s", "d")


def test_panto_instrument_covers_every_agent_but_those_that_opt_out(server, otel):
    ins = panto.instrument(tracer_provider=otel.tp, meter_provider=otel.mp)
    try:
        assert isinstance(ins, panto.Instrumentation)
        server.scenario(text_exchange(["one"]), text_exchange(["two"]))
        make_agent(server).run("first")
        assert len(otel.named("invoke_agent")) == 1
        make_agent(server, instrument=False).run("second")
        assert len(otel.named("invoke_agent")) == 1
    finally:
        panto.uninstrument()
    server.scenario(text_exchange(["three"]))
    make_agent(server).run("third")
    assert len(otel.named("invoke_agent")) == 1


def test_the_docs_example(server, otel):
    # docs/observability.md shows these lines.
    weather_scenario(server)
    tp, mp, base_url, key = otel.tp, otel.mp, server.base_url, KEY
    try:
        panto.instrument(tracer_provider=tp, meter_provider=mp)  # every agent
        agent = panto.Agent(model="gpt-test", base_url=base_url, api_key=key, tools=[weather])
        with tp.get_tracer("app").start_as_current_span("handle request"):
            answer = agent.run("Weather in Paris?")  # invoke_agent: this span's child
        panto.uninstrument()
    finally:
        panto.uninstrument()
    assert answer.text == "It is 18°C and sunny in Paris."
    request = otel.one("handle request")
    assert otel.one("invoke_agent").parent.span_id == request.context.span_id


def test_instrument_true_uses_the_global_providers(server):
    # The global tracer provider can be set once per process: in a child process.
    code = """
import sys
sys.path.insert(0, sys.argv[1])
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
import panto
from conftest import Server, text_exchange, make_agent
spans = InMemorySpanExporter()
tp = TracerProvider()
tp.add_span_processor(SimpleSpanProcessor(spans))
trace.set_tracer_provider(tp)
server = Server()
try:
    server.scenario(text_exchange(["hi"]))
    make_agent(server, instrument=True).run("hello")
finally:
    server.close()
print(sorted(s.name for s in spans.get_finished_spans()))
"""
    import os

    here = os.path.dirname(os.path.abspath(__file__))
    r = subprocess.run([sys.executable, "-c", code, here], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "['chat gpt-test', 'invoke_agent']"


def test_a_bad_instrument_argument_is_refused(server):
    with pytest.raises(TypeError, match="instrument"):
        make_agent(server, instrument="yes")


def test_import_panto_imports_no_opentelemetry():
    code = (
        "import sys, panto\n"
        "agent = panto.Agent(model='m', api_key='k', instrument=False)\n"
        "bad = [m for m in sys.modules if m.startswith('opentelemetry')]\n"
        "assert not bad, bad\n"
        "print('ok')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
