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
                          [--resume (end | K) ANSWERS] [--after-resume NAME]...
                          [--steer-during NAME TEXT]

The tools are declared as dicts (host tools) and answered with ``submit_tool_result``
(``submit_tool_parts`` for --answer-parts): at once, or after DELAY_MS from a timer (a
thread for sync, ``loop.call_later`` for async), or never when DELAY_MS is negative.
PARTS (the input form's JSON) become ``str``, ``panto.Image`` and ``panto.Document``
values, so the turn's input and the tools' images go through the package's own types.

With ``--resume``, the runner takes ``stream.checkpoint()`` when the turn ends, or right
after event K (then cancels that turn and prints no more of it), prints
``{"runner":"resume"}``, and continues the checkpoint with ``Agent.resume`` (``aresume``)
on a new agent of the same configuration, ANSWERS (by call id) made into
``panto.Approve``, ``panto.Reject`` and ``panto.ToolOutput``. ``--after-resume`` tools
are not answered before the resume; ``--steer-during`` calls ``stream.steer`` when the
first turn calls that host tool, before answering it.
"""

from __future__ import annotations

import asyncio
import base64
import json
import sys
import threading
from typing import Any, Dict, List, Optional, Set, Tuple

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


class Plan:
    """What the runner does: the command line, parsed."""

    def __init__(self) -> None:
        self.use_async = False
        self.config: Dict[str, Any] = {}
        self.prompt: Any = None
        self.cancel_after = -1
        self.answers: Dict[str, Answer] = {}
        self.resume: Optional[Tuple[str, Dict[str, Any]]] = None  # (AFTER, answers)
        self.held: Set[str] = set()  # --after-resume
        self.steer: Optional[Tuple[str, str]] = None  # (tool, text)

    def stop_after(self) -> int:
        """The event after which the first turn is abandoned, or -1."""
        if self.resume is None or self.resume[0] == "end":
            return -1
        return int(self.resume[0])

    def resume_answers(self) -> Dict[str, Any]:
        assert self.resume is not None
        out: Dict[str, Any] = {}
        for call_id, a in self.resume[1].items():
            if a.get("approve") is True:
                out[call_id] = panto.Approve()
            elif "reject" in a:
                out[call_id] = panto.Reject(a["reject"])
            else:
                out[call_id] = panto.ToolOutput(a["output"], bool(a.get("is_error", False)))
        return out


def parse(argv: List[str]) -> Plan:
    plan = Plan()
    config = None
    i = 0
    while i < len(argv):
        flag = argv[i]
        if flag == "--async":
            plan.use_async = True
            i += 1
        elif flag == "--config":
            config, i = json.loads(argv[i + 1]), i + 2
        elif flag == "--prompt":
            plan.prompt, i = argv[i + 1], i + 2
        elif flag == "--input":
            plan.prompt, i = parse_parts(argv[i + 1]), i + 2
        elif flag == "--cancel-after":
            plan.cancel_after, i = int(argv[i + 1]), i + 2
        elif flag == "--answer":
            name, delay, is_error, output = argv[i + 1 : i + 5]
            plan.answers[name] = (int(delay), is_error == "true", output)
            i += 5
        elif flag == "--answer-parts":
            name, delay, is_error, parts = argv[i + 1 : i + 5]
            plan.answers[name] = (int(delay), is_error == "true", parse_parts(parts))
            i += 5
        elif flag == "--resume":
            plan.resume, i = (argv[i + 1], json.loads(argv[i + 2])), i + 3
        elif flag == "--after-resume":
            plan.held.add(argv[i + 1])
            i += 2
        elif flag == "--steer-during":
            plan.steer, i = (argv[i + 1], argv[i + 2]), i + 3
        else:
            sys.exit(f"conformance: bad argument {flag}")
    if config is None or plan.prompt is None:
        sys.exit("conformance: --config and --prompt are required")
    plan.config = config
    return plan


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


def on_event(stream: Any, event: Any, plan: Plan, first: bool, later: Any) -> None:
    """Steers and answers a host tool's call, as the event asks (``later`` schedules a
    delayed answer)."""
    if not (isinstance(event, panto.ToolCallStart) and event.host):
        return
    if first and plan.steer is not None and event.name == plan.steer[0]:
        stream.steer(plan.steer[1])
        plan.steer = None
    if event.name not in plan.answers or (first and event.name in plan.held):
        return
    delay, is_error, output = plan.answers[event.name]
    if delay == 0:
        answer(stream, event.call_id, output, is_error)
    elif delay > 0:
        later(delay / 1000, stream, event.call_id, output, is_error)


def sync_later(seconds: float, *args: Any) -> None:
    timer = threading.Timer(seconds, refused_ok, args)
    timer.daemon = True
    timer.start()


def play_sync(stream: Any, plan: Plan, first: bool) -> Any:
    """Prints the stream's events; in the first turn, returns the checkpoint to resume
    from (with --resume), else None."""
    stop_after = plan.stop_after() if first else -1
    with stream:
        try:
            for index, event in enumerate(stream):
                emit(trace_line(event))
                if index == stop_after:
                    # Abandoned here, as if its process died: the checkpoint is what the
                    # turn reached, the rest of it is never seen.
                    checkpoint = stream.checkpoint()
                    stream.cancel()
                    return checkpoint
                on_event(stream, event, plan, first, sync_later)
                if first and index == plan.cancel_after:
                    stream.cancel()
        except panto.PantoError as e:
            emit(error_line(e))
        if first and plan.resume is not None and stop_after < 0:
            return stream.checkpoint()
    return None


def run_sync(plan: Plan) -> None:
    agent = panto.Agent(**plan.config)
    checkpoint = play_sync(agent.stream(plan.prompt), plan, True)
    if checkpoint is None:
        return
    emit({"runner": "resume"})
    resumed = panto.Agent(**plan.config)
    play_sync(resumed.resume(checkpoint, plan.resume_answers()), plan, False)


async def play_async(stream: Any, plan: Plan, first: bool) -> Any:
    """``play_sync`` over an ``AsyncStream``."""
    loop = asyncio.get_running_loop()

    def later(seconds: float, *args: Any) -> None:
        loop.call_later(seconds, refused_ok, *args)

    stop_after = plan.stop_after() if first else -1
    async with stream:
        try:
            index = 0
            async for event in stream:
                emit(trace_line(event))
                if index == stop_after:
                    checkpoint = stream.checkpoint()
                    stream.cancel()
                    return checkpoint
                on_event(stream, event, plan, first, later)
                if first and index == plan.cancel_after:
                    stream.cancel()
                index += 1
        except panto.PantoError as e:
            emit(error_line(e))
        if first and plan.resume is not None and stop_after < 0:
            return stream.checkpoint()
    return None


async def run_async(plan: Plan) -> None:
    agent = panto.Agent(**plan.config)
    checkpoint = await play_async(agent.astream(plan.prompt), plan, True)
    if checkpoint is None:
        return
    emit({"runner": "resume"})
    resumed = panto.Agent(**plan.config)
    await play_async(resumed.aresume(checkpoint, plan.resume_answers()), plan, False)


def main() -> None:
    plan = parse(sys.argv[1:])
    try:
        if plan.use_async:
            asyncio.run(run_async(plan))
        else:
            run_sync(plan)
    except panto.PantoError as e:  # configuration errors, raised before any event
        emit(error_line(e))


if __name__ == "__main__":
    main()
