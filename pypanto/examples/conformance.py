"""The conformance runner for Python: runs one turn described on the command line and
prints its trace, each event as what a Python user reads from it — its attributes
(``ev.kind``, ``ev.stop_reason``, ``ev.arguments``, ``ev.usage.input_tokens``…), never
``to_dict()`` — then the error line built from the raised ``panto.PantoError``'s
attributes. ``--async`` iterates ``agent.astream()`` in an
asyncio loop instead of ``agent.stream()``. ``scripts/conformance.sh`` compares the trace
with the scenario's golden trace; the arguments, shared by every language's runner, are
described in ``tests/conformance/README.md``.

    python conformance.py [--async] --config JSON (--prompt TEXT | --input PARTS)
                          [--cancel-after K]
                          [--answer NAME DELAY_MS IS_ERROR OUTPUT
                           | --answer-parts NAME DELAY_MS IS_ERROR PARTS]...

The tools are declared as dicts (host tools) and answered with ``submit_tool_result``
(``submit_tool_parts`` for --answer-parts): at once, or after DELAY_MS from a timer (a
thread for sync, ``loop.call_later`` for async), or never when DELAY_MS is negative.
PARTS (the input form's JSON) become ``str``, ``panto.Image`` and ``panto.Document``
values, so the turn's input and the tools' images go through the package's own types.
"""

from __future__ import annotations

import asyncio
import base64
import json
import sys
import threading
from typing import Any, Dict, List, Tuple

import panto
from panto import _vocab

#: (delay_ms, is_error, output: a str, or a list of parts for --answer-parts)
Answer = Tuple[int, bool, Any]


def parse_parts(text: str) -> List[Any]:
    """The input form's JSON as the package's parts."""
    parts: List[Any] = []
    for p in json.loads(text):
        if isinstance(p, str):
            parts.append(p)
        elif p["type"] == "text":
            parts.append(p["text"])
        else:
            cls = panto.Image if p["type"] == "image" else panto.Document
            if "url" in p:
                parts.append(cls.from_url(p["url"], p.get("media_type")))
            else:
                parts.append(cls.from_bytes(base64.b64decode(p["data"]), p.get("media_type"), p.get("name")))
    return parts


def part_line(part: Any) -> Dict[str, Any]:
    """A tool result's part (a str or a panto.Image) in the canonical JSON form."""
    if isinstance(part, str):
        return {"type": "text", "text": part}
    if part.url is not None:
        d: Dict[str, Any] = {"type": "image", "url": part.url}
        if part.media_type is not None:
            d["media_type"] = part.media_type
    else:
        d = {"type": "image", "media_type": part.media_type, "size": len(part.data),
             "data": base64.b64encode(part.data).decode()}
    if part.name is not None:
        d["name"] = part.name
    return d


def parse(argv: List[str]) -> Tuple[bool, Dict[str, Any], Any, int, Dict[str, Answer]]:
    use_async, config, prompt, cancel_after = False, None, None, -1
    answers: Dict[str, Answer] = {}
    i = 0
    while i < len(argv):
        flag = argv[i]
        if flag == "--async":
            use_async = True
            i += 1
        elif flag == "--config":
            config, i = json.loads(argv[i + 1]), i + 2
        elif flag == "--prompt":
            prompt, i = argv[i + 1], i + 2
        elif flag == "--input":
            prompt, i = parse_parts(argv[i + 1]), i + 2
        elif flag == "--cancel-after":
            cancel_after, i = int(argv[i + 1]), i + 2
        elif flag == "--answer":
            name, delay, is_error, output = argv[i + 1 : i + 5]
            answers[name] = (int(delay), is_error == "true", output)
            i += 5
        elif flag == "--answer-parts":
            name, delay, is_error, parts = argv[i + 1 : i + 5]
            answers[name] = (int(delay), is_error == "true", parse_parts(parts))
            i += 5
        else:
            sys.exit(f"conformance: bad argument {flag}")
    if config is None or prompt is None:
        sys.exit("conformance: --config and --prompt are required")
    return use_async, config, prompt, cancel_after, answers


def emit(obj: Dict[str, Any]) -> None:
    print(json.dumps(obj, ensure_ascii=False), flush=True)


def trace_line(event: Any) -> Dict[str, Any]:
    """The event's line, read attribute by attribute. Which attributes an event type has
    (and which records they hold) comes from the core's description, through the
    generated ``panto._vocab``; the values come from the binding's own accessors. An
    attribute the binding lacks is left out (and said on stderr), so the trace shows the
    field as missing."""
    fields = _vocab.EVENT_FIELDS.get(event.type)
    if fields is None:  # UnknownEvent: a core newer than the package; nothing to read
        return dict(event.to_dict())
    line: Dict[str, Any] = {"type": event.type}
    for name, kind, optional in fields:
        try:
            value = getattr(event, name)
        except AttributeError as e:
            print(f"conformance: {type(event).__name__}: {e}", file=sys.stderr)
            continue
        if optional and value is None:
            continue
        if kind == "parts":  # str and panto.Image values; absent when there are none
            if not value:
                continue
            value = [part_line(p) for p in value]
        if kind == "deferred_calls" and not value:  # a list always; absent when empty
            continue
        if kind in _vocab.RECORD_FIELDS:
            record = value
            value = {}
            for field in _vocab.RECORD_FIELDS[kind]:
                try:
                    value[field] = getattr(record, field)
                except AttributeError as e:
                    print(f"conformance: {type(record).__name__}: {e}", file=sys.stderr)
        line[name] = value
    return line


def error_line(e: panto.PantoError) -> Dict[str, Any]:
    line = {
        "type": "error",
        "kind": e.kind,
        "message": e.message,
        "status": e.status,
        "retryable": e.retryable,
        "provider_code": e.provider_code,
    }
    if e.output is not None:  # the structured-output kinds' raw answer
        line["output"] = e.output
    return line


def answer(stream: Any, call_id: str, output: Any, is_error: bool) -> None:
    if isinstance(output, list):
        stream.submit_tool_parts(call_id, output, is_error)
    else:
        stream.submit_tool_result(call_id, output, is_error)


def refused_ok(stream: Any, call_id: str, output: Any, is_error: bool) -> None:
    # A late answer to a call the turn gave up on is refused: what a slow tool gets.
    try:
        answer(stream, call_id, output, is_error)
    except panto.ToolError:
        pass


def run_sync(config: Dict[str, Any], prompt: Any, cancel_after: int, answers: Dict[str, Answer]) -> None:
    agent = panto.Agent(**config)
    with agent.stream(prompt) as stream:
        try:
            for index, event in enumerate(stream):
                emit(trace_line(event))
                if isinstance(event, panto.ToolCallStart) and event.host and event.name in answers:
                    delay, is_error, output = answers[event.name]
                    if delay == 0:
                        answer(stream, event.call_id, output, is_error)
                    elif delay > 0:
                        timer = threading.Timer(
                            delay / 1000,
                            refused_ok,
                            (stream, event.call_id, output, is_error),
                        )
                        timer.daemon = True
                        timer.start()
                if index == cancel_after:
                    stream.cancel()
        except panto.PantoError as e:
            emit(error_line(e))


async def run_async(config: Dict[str, Any], prompt: Any, cancel_after: int, answers: Dict[str, Answer]) -> None:
    agent = panto.Agent(**config)
    loop = asyncio.get_running_loop()
    async with agent.astream(prompt) as stream:
        try:
            index = 0
            async for event in stream:
                emit(trace_line(event))
                if isinstance(event, panto.ToolCallStart) and event.host and event.name in answers:
                    delay, is_error, output = answers[event.name]
                    if delay == 0:
                        answer(stream, event.call_id, output, is_error)
                    elif delay > 0:
                        loop.call_later(
                            delay / 1000,
                            refused_ok,
                            stream,
                            event.call_id,
                            output,
                            is_error,
                        )
                if index == cancel_after:
                    stream.cancel()
                index += 1
        except panto.PantoError as e:
            emit(error_line(e))


def main() -> None:
    use_async, config, prompt, cancel_after, answers = parse(sys.argv[1:])
    try:
        if use_async:
            asyncio.run(run_async(config, prompt, cancel_after, answers))
        else:
            run_sync(config, prompt, cancel_after, answers)
    except panto.PantoError as e:  # configuration errors, raised before any event
        emit(error_line(e))


if __name__ == "__main__":
    main()
