"""The sync surface: iteration, the end of a stream, text()/final(), run(), history,
events and their canonical JSON, busy, and the configuration."""

from __future__ import annotations

import base64
import json
import pickle
import subprocess
import threading

import pytest

import panto
from conftest import (
    MODEL,
    exchange,
    find_binary,
    make_agent,
    text_exchange,
    tool_sse,
    text_sse,
    wait_until,
)


def test_text_turn_events_in_order(server):
    server.scenario(text_exchange(["Hel", "lo", " world"]))
    agent = make_agent(server)
    with agent.stream("hi") as s:
        events = list(s)
    types = [e.type for e in events]
    assert types[0] == "message_start"
    assert types[-1] == "message_complete"
    assert types.count("message_complete") == 1
    deltas = [e.text for e in events if isinstance(e, panto.ContentDelta)]
    assert deltas == ["Hel", "lo", " world"]
    done = events[-1]
    assert isinstance(done, panto.MessageComplete)
    assert done.text == "Hello world"
    assert done.stop_reason == "end_turn"
    assert done.messages == 1
    assert done.usage.input_tokens == 10 and done.usage.output_tokens == 5
    start = events[0]
    assert isinstance(start, panto.MessageStart) and start.model == MODEL and start.message == 0


def test_stop_iteration_after_message_complete_and_on_every_later_call(server):
    server.scenario(text_exchange(["a"]))
    s = make_agent(server).stream("hi")
    assert repr(s) == "<panto.Stream active>"
    last = None
    for ev in s:
        last = ev
    assert repr(s) == "<panto.Stream completed>"
    assert isinstance(last, panto.MessageComplete)
    for _ in range(3):
        with pytest.raises(StopIteration):
            next(s)
    # Closing or cancelling a completed stream changes nothing.
    s.cancel()
    s.close()
    with pytest.raises(StopIteration):
        next(s)
    assert s.final().text == "a"


def test_text_and_final_drain(server):
    server.scenario(text_exchange(["x", "y"]), text_exchange(["z"]))
    agent = make_agent(server)
    assert agent.stream("one").text() == "xy"
    s = agent.stream("two")
    first = next(s)
    assert isinstance(first, panto.MessageStart)
    final = s.final()
    assert isinstance(final, panto.MessageComplete) and final.text == "z"


def test_run_returns_the_final_result(server):
    server.scenario(text_exchange(["4", "2"]))
    result = make_agent(server).run("question")
    assert isinstance(result, panto.MessageComplete)
    assert (result.text, result.stop_reason, result.messages) == ("42", "end_turn", 1)
    assert result.usage.to_dict() == {
        "input_tokens": 10,
        "output_tokens": 5,
        "cache_read_tokens": 0,
        "cache_write_tokens": 0,
        "reasoning_tokens": 0,
        "reported": True,
    }


def test_history_save_restore_clear(server):
    server.scenario(text_exchange(["first answer"]), text_exchange(["second"], contains=["first answer"]))
    agent = make_agent(server)
    agent.run("first question")
    history = agent.history
    assert [m["role"] for m in history] == ["user", "assistant"]
    assert history[1]["content"] == [{"type": "text", "text": "first answer"}]
    saved = agent.save_history()
    assert json.loads(saved)["version"] == 1

    other = make_agent(server)
    other.restore_history(saved)
    assert other.history == history
    # The restored conversation is sent with the next turn (the scenario matches on it).
    assert other.run("follow-up").text == "second"
    other.clear_history()
    assert other.history == []
    with pytest.raises(panto.ConfigError):
        other.restore_history('{"version": 1, "messages": [{"role": "wizard", "content": []}]}')


def test_busy_while_a_stream_is_active(server):
    from test_cancel import held_stream

    held_stream(server)  # the turn cannot end by itself
    agent = make_agent(server)
    s = agent.stream("one")
    with pytest.raises(panto.BusyError) as info:
        agent.stream("two")
    assert info.value.kind == "busy"
    server.open_gate()
    assert s.text() == "beforeafterafterafter"
    server.scenario(text_exchange(["b"]))
    assert agent.stream("two").text() == "b"


def test_busy_ends_when_a_stream_is_dropped(server):
    server.scenario(text_exchange(["a"]), text_exchange(["b"]))
    agent = make_agent(server)
    s = agent.stream("one")
    next(s)
    del s  # refcounting drops it at once: the turn is cancelled and ended
    assert agent.stream("two").text() == "b"


def test_tool_call_events_and_host_tools_by_hand(server):
    server.scenario(
        exchange(tool_sse([("call_1", "lookup", {"q": "x"})])),
        text_exchange(["found it"], contains=["call_1", "by hand"]),
    )
    agent = make_agent(
        server,
        tools=[{"name": "lookup", "description": "Looks up", "parameters": {"type": "object"}}],
    )
    seen = []
    with agent.stream("go") as s:
        for ev in s:
            seen.append(ev)
            if isinstance(ev, panto.ToolCallStart):
                assert ev.host is True
                assert ev.arguments == {"q": "x"}
                assert ev.arguments_raw is None
                s.submit_tool_result(ev.call_id, "answered by hand")
    kinds = [e.type for e in seen]
    assert kinds.count("tool_call_start") == 1 and kinds.count("tool_result") == 1
    details = next(e for e in seen if isinstance(e, panto.ToolDetails))
    assert (details.call_id, details.name) == ("call_1", "lookup")
    block = next(e for e in seen if isinstance(e, panto.BlockComplete) and e.content["type"] == "tool_call")
    assert block.content == {"type": "tool_call", "call_id": "call_1", "name": "lookup", "arguments": {"q": "x"}}
    result = next(e for e in seen if isinstance(e, panto.ToolResult))
    assert (result.output, result.is_error) == ("answered by hand", False)
    end = next(e for e in seen if isinstance(e, panto.MessageEnd))
    assert end.stop_reason == "tool_use" and isinstance(end.usage, panto.Usage)
    assert seen[-1].text == "found it" and seen[-1].messages == 2
    # Answering twice, or an unknown id, is a ToolError (the stream is unaffected).
    with pytest.raises(panto.ToolError):
        s.submit_tool_result("call_1", "again")


def test_events_repr_type_and_equality(server):
    server.scenario(text_exchange(["hi"]))
    events = list(make_agent(server).stream("x"))
    delta = next(e for e in events if isinstance(e, panto.ContentDelta))
    assert repr(delta) == "ContentDelta(message=0, block=0, kind='text', text='hi')"
    assert delta.type == panto.ContentDelta.type == "content_delta"
    assert delta == delta and delta != events[0]
    assert type(delta).__module__ == "panto"
    for ev in events:
        assert ev.to_dict() == json.loads(ev.to_json())
        assert ev.to_dict()["type"] == ev.type
        assert panto.EVENT_CLASSES[ev.type] is type(ev)


def attribute_form(ev):
    """The canonical form of an event, read from its attributes (the way the
    conformance runner reads them): every attribute of its type in the description."""
    out = {"type": ev.type}
    for name, kind, optional in panto._vocab.EVENT_FIELDS[ev.type]:
        value = getattr(ev, name)
        if optional and value is None:
            continue
        if kind == "parts":
            # A list of str and panto.Image; absent when empty.
            if not value:
                continue
            value = [part_dict(p) for p in value]
        if kind == "deferred_calls" and not value:
            # Always a list as an attribute; absent from the canonical form when empty.
            continue
        if kind in panto._vocab.RECORD_FIELDS:
            value = {f: getattr(value, f) for f in panto._vocab.RECORD_FIELDS[kind]}
        out[name] = value
    return out


def part_dict(part):
    """A tool result's part in the canonical JSON form."""
    if isinstance(part, str):
        return {"type": "text", "text": part}
    if part.url is not None:
        d = {"type": "image", "url": part.url}
        if part.media_type is not None:
            d["media_type"] = part.media_type
    else:
        d = {"type": "image", "media_type": part.media_type, "size": len(part.data),
             "data": base64.b64encode(part.data).decode()}
    if part.name is not None:
        d["name"] = part.name
    return d


def test_attributes_dict_repr_and_equality_agree_for_every_event_of_a_tool_turn(server):
    """to_dict() is built from the fields, not from the JSON: it must still be the
    core's canonical JSON, and say what the attributes say; == compares every field."""
    def play():
        server.scenario(
            exchange(tool_sse([("call_1", "lookup", {"q": "x", "n": [1, 2.5, None]}), ("call_2", "lookup", "{not json")])),
            text_exchange(["done"]),
        )
        spec = {"name": "lookup", "description": "Looks up", "parameters": {"type": "object"}}
        with make_agent(server, tools=[spec]).stream("go") as s:
            events = []
            for ev in s:
                events.append(ev)
                if isinstance(ev, panto.ToolCallStart) and ev.host:
                    s.submit_tool_result(ev.call_id, "ok")
            return events

    events, again = play(), play()
    types = {ev.type for ev in events}
    assert {"block_complete", "message_end", "tool_call_start", "tool_result", "message_complete"} <= types
    assert len(events) == len(again)
    for ev in events:
        d = ev.to_dict()
        assert d == json.loads(ev.to_json())
        assert attribute_form(ev) == d
        # The tool results come in finishing order: the same event of the other turn is
        # found by its dict form.
        same = next(o for o in again if o.to_dict() == d)
        assert ev == same and not (ev != same)
        fields = ", ".join(f"{k}={v!r}" for k, v in d.items() if k != "type")
        assert repr(ev) == f"{type(ev).__name__}({fields})"
    raw = next(e for e in events if isinstance(e, panto.ToolCallStart) and e.call_id == "call_2")
    assert raw.arguments is None and raw.arguments_raw == "{not json"
    assert raw.to_dict()["arguments"] is None
    parsed = next(e for e in events if isinstance(e, panto.ToolCallStart) and e.call_id == "call_1")
    assert parsed.arguments == {"q": "x", "n": [1, 2.5, None]} and "arguments_raw" not in parsed.to_dict()
    assert parsed != raw and parsed != parsed.to_dict()
    end = next(e for e in events if isinstance(e, panto.MessageEnd))
    end_again = next(e for e in again if isinstance(e, panto.MessageEnd))
    assert end.usage == end_again.usage and hash(end.usage) == hash(end_again.usage)
    assert end.usage != end_again and end != events[-1]
    assert repr(end.usage) == "Usage(" + ", ".join(f"{k}={v!r}" for k, v in end.usage.to_dict().items()) + ")"


def test_events_pickle_hash_and_match_positionally(server):
    """Events are immutable: they hash (equal events alike) and pickle as their canonical
    JSON; __match_args__ lists the fields in order, so `case ToolResult(m, id, name, out,
    err)` binds them; records (Usage) construct, pickle and match too."""
    server.scenario(exchange(tool_sse([("c1", "lookup", {"q": "x"})])), text_exchange(["done"]))
    spec = {"name": "lookup", "description": "Looks up", "parameters": {"type": "object"}}
    with make_agent(server, tools=[spec]).stream("go") as s:
        events = []
        for ev in s:
            events.append(ev)
            if isinstance(ev, panto.ToolCallStart) and ev.host:
                s.submit_tool_result(ev.call_id, "found")
    assert len({type(ev) for ev in events}) >= 8
    for ev in events:
        copy = pickle.loads(pickle.dumps(ev))
        assert type(copy) is type(ev) and copy == ev and copy.to_json() == ev.to_json()
        assert hash(copy) == hash(ev)
        assert type(ev).__match_args__ == tuple(f[0] for f in panto._vocab.EVENT_FIELDS[ev.type])
    assert len(set(events) | set(pickle.loads(pickle.dumps(events)))) == len(events)
    result = next(ev for ev in events if isinstance(ev, panto.ToolResult))
    match result:
        case panto.ToolResult(message, call_id, name, output, is_error):
            assert (message, call_id, name, output, is_error) == (0, "c1", "lookup", "found", False)
        case _:
            raise AssertionError("no match")
    usage = next(ev for ev in events if isinstance(ev, panto.MessageEnd)).usage
    match usage:
        case panto.Usage(input_tokens, output_tokens):
            assert (input_tokens, output_tokens) == (usage.input_tokens, usage.output_tokens)
    assert pickle.loads(pickle.dumps(usage)) == usage
    assert panto.Usage(1, 2, 3, 4, 5, True) == panto.Usage(
        input_tokens=1, output_tokens=2, cache_read_tokens=3, cache_write_tokens=4, reasoning_tokens=5, reported=True
    )
    # Unknown (not reported) is not a reported zero.
    assert panto.Usage(0, 0, 0, 0, 0, False) != panto.Usage(0, 0, 0, 0, 0, True)
    # UnknownEvent's type is a constant, like every event class's (a type checker then
    # narrows `ev.type == "..."` on the union of events).
    assert panto.UnknownEvent.type == "unknown" and panto.UnknownEvent.__match_args__ == ()


def test_to_dict_matches_the_cli_trace_of_the_same_turn(server, tmp_path):
    """The canonical JSON of every event equals what the core prints for the same turn
    (`panto run --json`, the CLI on the same core), tool call included."""
    scenario = [
        exchange(tool_sse([("call_7", "weather", {"city": "Paris"})])),
        text_exchange(["It is ", "18C"], contains=["call_7"]),
    ]
    spec = [{"name": "weather", "description": "Weather", "parameters": {"type": "object"}}]

    server.scenario(*scenario)
    cli = find_binary("panto", "PANTO_CLI")
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps(spec))
    out = subprocess.run(
        [str(cli), "run", "--json", "--base-url", server.base_url, "--model", MODEL, "--api-key", "sk-test",
         "--retries", "0", "--tool", "weather=printf 18C", "--tools", str(tools_file), "weather?"],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )
    assert out.returncode == 0, out.stderr
    cli_trace = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]

    server.scenario(*scenario)

    @panto.tool(name="weather", description="Weather", parameters={"type": "object"})
    def weather(**_: object) -> str:
        return "18C"

    py_trace = [ev.to_dict() for ev in make_agent(server, tools=[weather]).stream("weather?")]
    assert py_trace == cli_trace


def test_events_and_errors_match_the_core_lists():
    # The exception classes follow ErrorKind::ALL (names and order), the event classes
    # follow Event::TYPES: both lists come from the core through the native module.
    kinds = panto._native.error_kinds()
    assert [code for code, _ in kinds] == list(range(1, len(kinds) + 1))
    assert [name for _, name in kinds] == list(panto.ERROR_CLASSES)
    for _, name in kinds:
        cls = panto.ERROR_CLASSES[name]
        assert issubclass(cls, panto.PantoError) and cls.kind == name
        assert getattr(panto, cls.__name__) is cls
    assert panto._native.event_types() == list(panto.EVENT_CLASSES)
    for name, cls in panto.EVENT_CLASSES.items():
        assert cls.type == name and getattr(panto, cls.__name__) is cls


def test_typed_keyword_arguments_are_the_core_configuration_keys(server):
    """AgentOptions (generated) and Agent's own parameters are exactly the core's keys,
    and the core takes every one of them (None leaves a key unset)."""
    import inspect
    import typing

    hints = typing.get_type_hints(panto.AgentOptions)
    # The parameters that configure the Python side, not the core, are no keys.
    host_side = {
        "self", "options", "instrument", "mcp_token_store", "mcp_open_url",
        "mcp_approve_sampling", "mcp_elicit",
    }
    params = set(inspect.signature(panto.Agent.__init__).parameters) - host_side
    assert set(hints) | params == set(panto.CONFIG_KEYS) and not set(hints) & params
    agent = make_agent(server, **{k: None for k in hints if k != "retry"})
    assert agent.model == MODEL
    nested = 0
    for key, hint in hints.items():
        for arg in typing.get_args(hint):
            if typing.is_typeddict(arg):
                nested += 1
                try:
                    make_agent(server, **{key: {k: None for k in typing.get_type_hints(arg)}})
                except panto.ConfigError as e:
                    # A key the core requires may not be None; none may be unknown.
                    assert e.message.endswith(": required") and "unknown" not in e.message, e.message
    assert nested >= 4  # retry, timeouts, reasoning, compaction


def test_config_errors_name_the_key(server):
    cases = [
        (dict(colour="blue"), "colour"),
        (dict(max_steps="3"), "max_steps"),
        (dict(retry={"max_retries": -1}), "retry.max_retries"),
        (dict(timeouts={"idle": 5}), "timeouts.idle"),
        (dict(provider="gemeni"), "provider"),
        (dict(model=""), "model"),
        (dict(queue_capacity=10**12), "queue_capacity"),
        (dict(temperature=float("nan")), "temperature"),
        (dict(headers={"x-a": object()}), "headers"),
        (dict(tools=[{"name": "a", "parameters": 3}]), "tools[0].parameters"),
        (dict(tools=[42]), "tools[0]"),
    ]
    for kwargs, key in cases:
        with pytest.raises(panto.ConfigError) as info:
            make_agent(server, **kwargs)
        err = info.value
        assert err.message.startswith(key), (kwargs, err.message)
        assert err.kind == "config" and isinstance(err, ValueError)


def test_no_api_key_in_reprs_or_errors(server):
    secret = "sk-live-SECRET-abcdef0123456789"
    server.scenario({
        "match": {"method": "POST"},
        "response": {"status": 401, "json": {"error": {"message": f"bad key {secret}", "type": "invalid_request_error", "code": "invalid_api_key"}}},
    })
    agent = make_agent(server, api_key=secret)
    assert secret not in repr(agent)
    with pytest.raises(panto.AuthenticationError) as info:
        agent.run("x")
    err = info.value
    for text in (str(err), repr(err), err.message, str(err.provider_code)):
        assert secret not in text
    assert err.status == 401 and err.provider_code is not None


def test_stream_from_several_threads_one_at_a_time(server):
    """The stream is usable from another thread than the one that started it."""
    server.scenario(text_exchange(["a", "b"]))
    s = make_agent(server).stream("x")
    out = []
    t = threading.Thread(target=lambda: out.extend(ev.type for ev in s))
    t.start()
    t.join(30)
    assert out[-1] == "message_complete"


def test_model_override_for_one_turn(server):
    server.scenario(
        {"match": {"method": "POST", "body": {"/model": "other-model"}}, "response": {"sse": text_sse(["ok"])}}
    )
    assert make_agent(server).run("x", model="other-model").text == "ok"
    assert server.requests()[0]["body"]["model"] == "other-model"


def test_lone_surrogates_in_text_sent_to_the_core_become_u_fffd(server):
    """A prompt, a system prompt, a tool's description, a model override and a history
    with a lone surrogate are not refused (it used to be a bare UnicodeEncodeError, or a
    ConfigError from the JSON escape): each surrogate is sent as U+FFFD."""
    server.scenario(text_exchange(["ok"], times=2))

    @panto.tool(description="desc \udc80")
    def t() -> str:
        return ""

    agent = make_agent(server, system="sys \ud800", tools=[t])
    assert agent.run("hi \udfff there").text == "ok"
    body = server.requests()[0]["body"]
    assert body["messages"][0] == {"role": "system", "content": "sys \ufffd"}
    assert body["messages"][1]["content"] == "hi \ufffd there"
    assert body["tools"][0]["function"]["description"] == "desc \ufffd"
    saved = json.loads(agent.save_history())
    saved["messages"][0]["content"][0]["text"] = "restored \ud800"
    agent.restore_history(json.dumps(saved, ensure_ascii=False))
    assert agent.history[0]["content"][0]["text"] == "restored \ufffd"
    agent.clear_history()
    agent.stream("x", model="m\ud800").close()


def _long_response(n):
    from conftest import chunk, usage_chunk, DONE

    return {
        "match": {"method": "POST"},
        "response": {
            "repeat": {"count": n, "chunk": chunk({"content": "t"})},
            "sse": [chunk({}, "stop"), usage_chunk(), DONE],
        },
    }


def test_ready_events_are_taken_without_releasing_the_gil(server):
    """Events that are ready are drained into the stream's buffer and handed out
    without waiting: once the whole turn is queued, iterating it never releases the GIL
    to wait. (Each wait, when one is needed, takes a whole burst the same way.)"""
    n = 5_000
    server.scenario(_long_response(n))
    base = panto.diagnostics()["active_streams"]
    s = make_agent(server, queue_capacity=8192).stream("x")
    wait_until(lambda: panto.diagnostics()["active_streams"] == base, what="the turn to be queued whole")
    count = sum(1 for ev in s if isinstance(ev, panto.ContentDelta))
    assert count == n
    assert s.waits == 0


async def test_async_takes_ready_events_on_the_loop_without_a_thread_hop(server):
    n = 5_000
    server.scenario(_long_response(n))
    base = panto.diagnostics()["active_streams"]
    s = make_agent(server, queue_capacity=8192).astream("x")
    wait_until(lambda: panto.diagnostics()["active_streams"] == base, what="the turn to be queued whole")
    count = 0
    async for ev in s:
        count += isinstance(ev, panto.ContentDelta)
    assert count == n
    assert s.waits == 0


def _bursty_response(bursts, per_burst):
    """Deltas that arrive in bursts: each burst is one chunk on the wire holding
    `per_burst` events, so the events of a burst are ready together whatever the relative
    speed of the two threads (with one event per chunk, a consumer faster than the
    network waits once per event, correctly)."""
    from conftest import chunk, usage_chunk, DONE

    one = "data: " + json.dumps(chunk({"content": "t"})["data"], separators=(",", ":")) + "\n\n"
    return {
        "match": {"method": "POST"},
        "response": {
            "repeat": {"count": bursts, "chunk": one * per_burst},
            "sse": [chunk({}, "stop"), usage_chunk(), DONE],
        },
    }


def test_a_streaming_turn_waits_far_less_often_than_it_yields(server):
    bursts, per_burst = 100, 200
    n = bursts * per_burst
    server.scenario(_bursty_response(bursts, per_burst))
    s = make_agent(server).stream("x")
    count = sum(1 for ev in s if isinstance(ev, panto.ContentDelta))
    assert count == n
    assert 1 <= s.waits < n // 2, s.waits
