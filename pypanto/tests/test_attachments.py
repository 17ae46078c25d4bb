"""A turn's input as text and attachments: ``agent.stream(["…", panto.Image…])``
against tests/server/scenarios/attachments-openai.json, whose server answers only a
request carrying the three parts in order (text, the image's bytes as a data: URL, an
image URL). Mistakes are ``ConfigError`` before anything is sent."""

from __future__ import annotations

import json
import os
import re
import threading

import pytest

import panto

from conftest import REPO, make_agent

PNG = b"\x89PNG\r\n\x1a\ntiny"


def load(server):
    path = REPO / "tests" / "server" / "scenarios" / "attachments-openai.json"
    server._post("/_panto/scenario", json.loads(path.read_text()))


def test_text_and_images_reach_the_server_in_order(server, tmp_path):
    load(server)
    cat = tmp_path / "cat.png"
    cat.write_bytes(PNG)
    agent = make_agent(server)
    final = agent.run(
        ["What is in this picture?", panto.Image.from_path(cat), panto.Image.from_url("https://example.com/cat.png")]
    )
    assert final.text == "A cat."
    [entry] = [e for e in json.loads(agent._native.transcript_json()) if e["kind"] == "attachment" and "size" in e]
    assert entry == {
        "role": "user",
        "kind": "attachment",
        "attachment": "image",
        "name": "cat.png",
        "media_type": "image/png",
        "size": len(PNG),
        "text": "cat.png, image/png, 12 bytes",
    }
    # The history keeps the bytes, base64, and reloads them.
    saved = agent.history
    assert saved[0]["content"][1] == {"type": "image", "media_type": "image/png", "data": "iVBORw0KGgp0aW55", "name": "cat.png"}


def test_async_streams_take_parts_too(server):
    import asyncio

    load(server)
    agent = make_agent(server)

    async def main():
        return await agent.arun(
            ["What is in this picture?", panto.Image.from_bytes(PNG), panto.Image.from_url("https://example.com/cat.png")]
        )

    assert asyncio.run(main()).text == "A cat."


def test_what_cannot_be_sent_is_a_config_error_before_anything_is_sent(server, tmp_path):
    load(server)
    agent = make_agent(server, max_message_bytes=1024)
    with pytest.raises(panto.ConfigError, match="no-such.png"):
        panto.Image.from_path(tmp_path / "no-such.png")
    with pytest.raises(panto.ConfigError, match="cannot tell the type"):
        agent.run(["x", panto.Image.from_bytes(b"not an image")])
    with pytest.raises(panto.ConfigError, match=r"more than max_message_bytes \(1024\)"):
        agent.run([panto.Image.from_bytes(PNG + bytes(2000))])
    with pytest.raises(panto.ConfigError, match="take a PDF as bytes, not by URL"):
        agent.run(["x", panto.Document.from_url("https://example.com/a.pdf")])
    with pytest.raises(panto.ConfigError, match=r"input\[1\]: a part is a str"):
        agent.run(["x", 42])  # type: ignore[list-item]
    assert server.requests() == []
    assert agent.history == []


def test_a_given_media_type_that_the_bytes_contradict_is_refused(server):
    """The bytes decide an attachment's type: PDF bytes given as a PNG, or PNG bytes as
    a JPEG, are refused naming both types — in a turn's input (``ConfigError``, nothing
    sent) and in a host tool's parts (``ConfigError`` as for any part the core refuses,
    the call still waiting)."""
    from conftest import exchange, text_sse, tool_sse

    agent = make_agent(server)
    with pytest.raises(panto.ConfigError, match=r'given as "image/png", but the bytes are "application/pdf"'):
        agent.run(["x", panto.Image.from_bytes(b"%PDF-1.4", media_type="image/png")])
    with pytest.raises(panto.ConfigError, match=r'given as "image/jpeg", but the bytes are "image/png"'):
        agent.run(["x", panto.Image.from_bytes(PNG, media_type="image/jpeg")])
    assert server.requests() == [] and agent.history == []

    server.scenario(exchange(tool_sse([("call_1", "camera", {})])), exchange(text_sse(["A cat."])))
    agent = make_agent(server, tools=[{"name": "camera", "description": "Takes a picture."}])
    with agent.stream("What do you see?") as stream:
        for ev in stream:
            if isinstance(ev, panto.ToolCallStart):
                with pytest.raises(panto.ConfigError, match=r'given as "image/jpeg", but the bytes are "image/png"'):
                    stream.submit_tool_parts(ev.call_id, [panto.Image.from_bytes(PNG, media_type="image/jpeg")])
                stream.submit_tool_parts(ev.call_id, [panto.Image.from_bytes(PNG, media_type="image/png")])
    messages = server.requests()[1]["body"]["messages"]
    assert messages[3]["content"][1] == {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgp0aW55"}}


def test_a_tool_returns_text_and_an_image(server):
    from conftest import exchange, text_sse, tool_sse

    server.scenario(exchange(tool_sse([("call_1", "camera", {})])), exchange(text_sse(["A cat."])))

    @panto.tool
    def camera() -> list:
        """Takes a picture."""
        return ["one picture", panto.Image.from_bytes(PNG)]

    agent = make_agent(server, tools=[camera])
    events = list(agent.stream("What do you see?"))
    [result] = [e for e in events if isinstance(e, panto.ToolResult)]
    assert result.output == "one picture" and not result.is_error
    # The event carries the parts as the tool returned them, and as JSON with the size.
    assert result.parts == ["one picture", panto.Image.from_bytes(PNG, media_type="image/png")]
    image = {"type": "image", "media_type": "image/png", "size": len(PNG), "data": "iVBORw0KGgp0aW55"}
    assert result.to_dict()["parts"] == [{"type": "text", "text": "one picture"}, image]
    assert json.loads(result.to_json())["parts"] == result.to_dict()["parts"]
    assert result.to_json().endswith('"size":12,"data":"iVBORw0KGgp0aW55"}]}')
    text_only = [e for e in events if isinstance(e, panto.ToolResult) and not e.parts]
    assert text_only == []
    messages = server.requests()[1]["body"]["messages"]
    assert messages[2] == {"role": "tool", "tool_call_id": "call_1", "content": "one picture"}
    assert messages[3] == {
        "role": "user",
        "content": [
            {"type": "text", "text": "The image(s) returned by tool camera (call call_1):"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgp0aW55"}},
        ],
    }


def test_a_text_result_has_no_parts():
    from panto import _native

    plain = _native._event_from_json(
        '{"type":"tool_result","message":0,"call_id":"c","name":"n","output":"o","is_error":false}'
    )
    assert plain.parts == [] and "parts" not in plain.to_dict() and "parts" not in plain.to_json()
    url = _native._event_from_json(
        '{"type":"tool_result","message":0,"call_id":"c","name":"n","output":"","is_error":false,'
        '"parts":[{"type":"image","url":"https://example.com/c.png"}]}'
    )
    assert url.parts == [panto.Image.from_url("https://example.com/c.png")]


@pytest.mark.parametrize("use_async", [False, True])
def test_a_host_tool_answered_with_parts(server, use_async):
    """Stream.submit_tool_parts (and AsyncStream's): a refused part is a ToolError and
    leaves the call waiting; the image then reaches the model and the event."""
    import asyncio

    from conftest import exchange, text_sse, tool_sse

    server.scenario(exchange(tool_sse([("call_1", "camera", {})])), exchange(text_sse(["A cat."])))
    agent = make_agent(server, tools=[{"name": "camera", "description": "Takes a picture."}])
    parts = ["one picture", panto.Image.from_bytes(PNG)]

    def answer(stream, event):
        with pytest.raises(panto.ToolError, match=r"parts\[1\]: a tool result's part is a str or a panto.Image"):
            stream.submit_tool_parts(event.call_id, ["x", panto.Document.from_bytes(b"%PDF-1.4")])
        stream.submit_tool_parts(event.call_id, parts)

    async def collect_async():
        events = []
        async with agent.astream("What do you see?") as stream:
            async for ev in stream:
                events.append(ev)
                if isinstance(ev, panto.ToolCallStart):
                    answer(stream, ev)
        return events

    if use_async:
        events = asyncio.run(collect_async())
    else:
        events = []
        with agent.stream("What do you see?") as stream:
            for ev in stream:
                events.append(ev)
                if isinstance(ev, panto.ToolCallStart):
                    answer(stream, ev)
    [result] = [e for e in events if isinstance(e, panto.ToolResult)]
    assert result.output == "one picture"
    assert result.parts == ["one picture", panto.Image.from_bytes(PNG, media_type="image/png")]
    messages = server.requests()[1]["body"]["messages"]
    assert messages[3]["content"][1] == {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgp0aW55"}}


def _guarded(call, *args, **kwargs):
    """Runs ``call`` on a daemon thread under a generous hang guard: a FIFO's open must
    not block, /dev/zero must not be read until memory runs out. Returns what it raised."""
    raised: list = []

    def run() -> None:
        try:
            call(*args, **kwargs)
            raised.append(None)
        except BaseException as e:  # noqa: BLE001 - handed to the test
            raised.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(60)
    assert raised, f"{call.__qualname__}{args} neither returned nor raised within the hang guard"
    return raised[0]


def test_from_path_refuses_fifos_devices_and_files_past_the_limit_without_reading_them(tmp_path):
    fifo = tmp_path / "pipe.png"
    os.mkfifo(fifo)
    sparse = tmp_path / "sparse.png"
    sparse.write_bytes(PNG)
    os.truncate(sparse, 64 << 30)  # 64 GiB by its metadata, no disk
    cases = [
        (fifo, r"not a regular file \(a FIFO\)", {}),
        ("/dev/zero", r"not a regular file \(a character device\)", {}),
        (tmp_path, r"not a regular file \(a directory\)", {}),
        (sparse, r"more than max_message_bytes \(33554432\)", {}),
        (sparse, r"more than max_message_bytes \(1000\)", {"max_bytes": 1000}),
    ]
    for path, why, kw in cases:
        e = _guarded(panto.Image.from_path, path, **kw)
        assert isinstance(e, panto.ConfigError), f"{path}: {e!r}"
        assert e.kind == "config"
        assert str(path) in str(e), str(e)
        assert re.search(why, str(e)), str(e)
    # Within the limit: read whole, named after the file.
    small = tmp_path / "small.png"
    small.write_bytes(PNG)
    img = panto.Image.from_path(small, max_bytes=len(PNG))
    assert img.data == PNG and img.name == "small.png"
    e = _guarded(panto.Image.from_path, small, max_bytes=len(PNG) - 1)
    assert isinstance(e, panto.ConfigError)
