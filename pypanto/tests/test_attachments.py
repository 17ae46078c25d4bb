"""A turn's input as text and attachments: ``agent.stream(["…", panto.Image…])``
against tests/server/scenarios/attachments-openai.json, whose server answers only a
request carrying the three parts in order (text, the image's bytes as a data: URL, an
image URL). Mistakes are ``ConfigError`` before anything is sent."""

from __future__ import annotations

import json

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
