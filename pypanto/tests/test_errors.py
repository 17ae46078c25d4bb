"""Every exception class, each from a scenario that produces it; the attributes, the
stickiness of a failure, and pickling."""

from __future__ import annotations

import pickle
import subprocess
import sys
import textwrap

import pytest

import panto
from conftest import chunk, error_exchange, exchange, make_agent, text_exchange, text_sse, tool_sse, wait_until


def _err(message, type_=None, code=None):
    body = {"error": {"message": message}}
    if type_:
        body["error"]["type"] = type_
    if code:
        body["error"]["code"] = code
    return body


STATUS_CASES = [
    (401, panto.AuthenticationError, "authentication", False),
    (403, panto.PermissionDeniedError, "permission", False),
    (404, panto.NotFoundError, "not_found", False),
    (400, panto.BadRequestError, "bad_request", False),
    (429, panto.RateLimitError, "rate_limited", True),
    (500, panto.ServerError, "server", True),
]


@pytest.mark.parametrize("status,cls,kind,retryable", STATUS_CASES)
def test_http_status_errors(server, status, cls, kind, retryable):
    server.scenario(error_exchange(status, _err(f"failure {status}", "some_type", "some_code")))
    s = make_agent(server).stream("x")
    with pytest.raises(cls) as info:
        list(s)
    e = info.value
    assert isinstance(e, panto.PantoError)
    assert (e.kind, e.status, e.retryable) == (kind, status, retryable)
    assert e.provider_code and ("some_code" in e.provider_code or "some_type" in e.provider_code)
    assert f"failure {status}" in e.message
    # A failure is sticky: the same error on every later call, no event after it.
    for _ in range(2):
        with pytest.raises(cls):
            next(s)


STATUS_CLASSES = [
    # status, class, kind, the classes it must also be
    (400, panto.BadRequestError, "bad_request", ()),
    (413, panto.BadRequestError, "bad_request", ()),
    (422, panto.UnprocessableEntityError, "bad_request", (panto.BadRequestError,)),
    (401, panto.AuthenticationError, "authentication", ()),
    (402, panto.PermissionDeniedError, "permission", ()),
    (404, panto.NotFoundError, "not_found", ()),
    (408, panto.RequestTimeoutError, "timeout", (panto.APITimeoutError, panto.APIConnectionError, TimeoutError)),
    (409, panto.ConflictError, "provider", (panto.ProviderStatusError, panto.ProviderError)),
    (425, panto.ProviderStatusError, "provider", (panto.ProviderError,)),
    (451, panto.ProviderStatusError, "provider", (panto.ProviderError,)),
    (429, panto.RateLimitError, "rate_limited", ()),
    (500, panto.InternalServerError, "server", (panto.ServerError,)),
    (503, panto.InternalServerError, "server", (panto.ServerError,)),
]


@pytest.mark.parametrize("status,cls,kind,also", STATUS_CLASSES)
def test_every_http_status_error_is_an_api_status_error_of_its_class(server, status, cls, kind, also):
    """openai-python's tree: APIStatusError (with .status_code) is the base of every
    HTTP-status error, itself an APIError; the status picks the class, the kind stays
    the core's. The provider's request id and retry-after come along."""
    server.scenario(
        error_exchange(status, _err(f"failure {status}"), headers={"x-request-id": f"req_{status}", "retry-after": "7"})
    )
    with pytest.raises(panto.PantoError) as info:
        make_agent(server).run("x")
    e = info.value
    assert type(e) is cls, type(e)
    assert isinstance(e, panto.APIStatusError) and isinstance(e, panto.APIError)
    assert all(isinstance(e, c) for c in also)
    assert isinstance(e, panto.ERROR_CLASSES[kind]) and e.kind == kind
    assert e.status_code == e.status == status
    assert e.request_id == f"req_{status}" and e.retry_after == 7.0
    assert e.headers["x-request-id"] == f"req_{status}" and e.headers["retry-after"] == "7"
    assert e.headers["content-type"].startswith("application/json")
    assert f"failure {status}" in e.message
    copy = pickle.loads(pickle.dumps(e))
    assert type(copy) is cls and (copy.status_code, copy.request_id, copy.retry_after) == (status, f"req_{status}", 7.0)
    assert copy.headers == e.headers


def test_error_headers_are_the_responses_redacted_and_bounded(server):
    """APIStatusError.headers (openai-python's e.response.headers): the failed response's
    headers with lower-case names; a key a proxy echoes back in a header is redacted;
    at most 64 headers of at most 1 KiB each."""
    key = "sk-test-0123456789"
    many = {f"x-extra-{i:03}": "v" * 2000 for i in range(80)}
    server.scenario(error_exchange(500, _err("boom"), headers={"X-Echo-Key": f"Bearer {key}", **many}))
    with pytest.raises(panto.InternalServerError) as info:
        make_agent(server, api_key=key).run("x")
    h = info.value.headers
    assert key not in repr(h) and "x-echo-key" in h and "Bearer" in h["x-echo-key"]
    assert len(h) == 64
    assert all(len(v.encode()) <= 1024 for v in h.values())
    assert h.get("x-extra-000", "").startswith("vvv")


def test_a_stream_that_fails_after_200_carries_the_responses_request_id(server):
    """An error inside a 200 stream is no HTTP status error (no headers), but the id of the
    response it came in is what the provider's support asks for."""
    server.scenario(exchange([{"data": {"error": {"message": "overloaded", "type": "server_error"}}}], headers={"x-request-id": "req_in_stream"}))
    with pytest.raises(panto.APIError) as info:
        make_agent(server).run("x")
    assert info.value.request_id == "req_in_stream" and info.value.headers == {}


def test_anthropic_request_id_header(server):
    server.scenario({
        "match": {"method": "POST", "path": "/v1/messages"},
        "response": {
            "status": 529,
            "json": {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
            "headers": {"request-id": "req_011abc"},
        },
    })
    agent = panto.Agent(provider="anthropic", model="claude-test", base_url=server.url, api_key="k", retry={"max_retries": 0})
    with pytest.raises(panto.InternalServerError) as info:
        agent.run("x")
    assert info.value.request_id == "req_011abc" and info.value.status_code == 529
    assert info.value.retry_after is None


def test_errors_without_a_status_are_not_status_errors(server):
    """An error inside a 200 stream, a connection failure and a timeout are APIErrors
    but not APIStatusErrors; APITimeoutError is an APIConnectionError (openai-python's
    tree); config and cancellation are neither."""
    server.scenario(exchange([{"data": {"error": {"message": "something odd", "type": "weird_error"}}}]))
    with pytest.raises(panto.ProviderError) as info:
        make_agent(server).run("x")
    assert type(info.value) is panto.ProviderError and not isinstance(info.value, panto.APIStatusError)
    assert isinstance(info.value, panto.APIError) and info.value.request_id is None
    assert info.value.headers == {}
    server.scenario(exchange(text_sse(["a"]), fault={"kind": "stall", "after_bytes": 0}))
    with pytest.raises(panto.APIConnectionError) as timeout:
        make_agent(server, timeouts={"idle_ms": 150}).run("x")
    assert type(timeout.value) is panto.APITimeoutError and not isinstance(timeout.value, panto.APIStatusError)
    assert issubclass(panto.APITimeoutError, panto.APIConnectionError)
    assert not issubclass(panto.ConfigError, panto.APIError) and not issubclass(panto.StreamCancelledError, panto.APIError)


def test_config_error_from_a_redirect_to_another_origin(server):
    server.scenario({
        "match": {"method": "POST"},
        "response": {"status": 307, "headers": {"location": "http://127.0.0.2:9/elsewhere"}, "body": ""},
    })
    with pytest.raises(panto.ConfigError) as info:
        make_agent(server).run("x")
    assert info.value.status == 307


def test_connection_error(server):
    server.scenario(exchange(text_sse(["a"]), fault={"kind": "reset", "after_bytes": 0}))
    with pytest.raises(panto.APIConnectionError) as info:
        make_agent(server).run("x")
    assert info.value.kind == "connection"


def test_timeout_error_is_also_a_timeout_error(server):
    server.scenario(exchange(text_sse(["a"]), fault={"kind": "stall", "after_bytes": 0}))
    agent = make_agent(server, timeouts={"idle_ms": 150})
    with pytest.raises(TimeoutError) as info:
        agent.run("x")
    assert isinstance(info.value, panto.APITimeoutError) and info.value.kind == "timeout"


def test_protocol_error(server):
    server.scenario(exchange([chunk({"role": "assistant", "content": "a"}), "data: {not json\n\n"]))
    with pytest.raises(panto.ProtocolError):
        make_agent(server).run("x")


def test_provider_error_inside_a_200_stream(server):
    server.scenario(exchange([{"data": {"error": {"message": "model overloaded", "type": "server_error", "code": "overloaded"}}}]))
    with pytest.raises(panto.PantoError) as info:
        make_agent(server).run("x")
    # An error payload inside a 200 stream: the provider's own class of error.
    assert info.value.kind in ("provider", "server")
    assert type(info.value) is panto.ERROR_CLASSES[info.value.kind]
    assert "model overloaded" in info.value.message


def test_provider_error_kind(server):
    server.scenario(exchange([{"data": {"error": {"message": "something odd", "type": "weird_error"}}}]))
    with pytest.raises(panto.ProviderError) as info:
        make_agent(server).run("x")
    assert info.value.kind == "provider"


def test_incomplete_stream(server):
    # The body ends (cleanly, by its length) before a finish_reason or [DONE].
    server.scenario(exchange([chunk({"role": "assistant", "content": "partial"})], framing="length"))
    with pytest.raises(panto.IncompleteStreamError):
        make_agent(server).run("x")


def test_stream_cancelled_error(server):
    server.scenario(text_exchange(["a", "b"]))
    s = make_agent(server).stream("x")
    next(s)
    s.cancel()
    with pytest.raises(panto.StreamCancelledError) as info:
        next(s)
    assert info.value.kind == "cancelled"
    assert repr(s) == "<panto.Stream failed: cancelled>"
    with pytest.raises(panto.StreamCancelledError):
        next(s)


def test_busy_error(server):
    from test_cancel import held_stream

    held_stream(server)  # the first turn cannot end before the second starts
    agent = make_agent(server)
    with agent.stream("x"):
        with pytest.raises(panto.BusyError):
            agent.stream("y")


def test_tool_error_for_an_unknown_call_id(server):
    server.scenario(exchange(tool_sse([("call_1", "t", {})])), text_exchange(["ok"], contains=["call_1"]))
    agent = make_agent(server, tools=[{"name": "t", "parameters": {"type": "object"}}])
    with agent.stream("x") as s:
        for ev in s:
            if isinstance(ev, panto.ToolCallStart):
                with pytest.raises(panto.ToolError) as info:
                    s.submit_tool_result("no-such-call", "x")
                assert info.value.kind == "tool"
                s.submit_tool_result(ev.call_id, "fine")
        assert ev.text == "ok"


CHILD = textwrap.dedent(
    """
    import os, sys, warnings
    warnings.simplefilter("ignore")
    import panto
    sys.path.insert(0, sys.argv[2])
    agent = panto.Agent(model="m", base_url=sys.argv[1], api_key="k", retry={"max_retries": 0})
    agent.run("x")          # starts panto's worker threads in this process
    pid = os.fork()
    if pid == 0:
        try:
            fresh = panto.Agent(model="m", base_url=sys.argv[1], api_key="k",
                                retry={"max_retries": 0})
            code = 0 if fresh.run("x").text == "a" else 1
        except BaseException:
            code = 2
        try:
            agent.run("x")
            code = code or 3
        except panto.ConfigError as e:
            code = code or (0 if "before the process forked" in str(e) else 4)
        except BaseException:
            code = code or 5
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    print(os.waitstatus_to_exitcode(status))
    """
)


@pytest.mark.skipif(sys.platform == "win32", reason="fork")
def test_a_forked_child_runs_new_agents_and_refuses_inherited_ones(server, tmp_path):
    """A child forked (os.fork) after panto's worker threads started gets a pool of its
    own: a new Agent runs a turn there. The Agent it inherited fails at once with a
    ConfigError saying why (not a hang). (Before, any turn in such a child was refused
    with an InternalError.)"""
    server.scenario(text_exchange(["a"], times=3))
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    out = subprocess.run(
        [sys.executable, str(script), server.base_url, str(tmp_path)],
        capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "0"


@pytest.mark.parametrize("cls", [panto.PantoError, *panto.ERROR_CLASSES.values()])
def test_exceptions_pickle_with_their_attributes(cls):
    e = cls("msg", kind=cls.kind, status=429, retryable=True, provider_code="rate_limit_error")
    back = pickle.loads(pickle.dumps(e))
    assert type(back) is cls
    assert (back.kind, back.message, back.status, back.retryable, back.provider_code) == (
        cls.kind, "msg", 429, True, "rate_limit_error"
    )
    assert str(back) == str(e)
