"""Fixtures: the scripted provider server (`panto-testserver`, run as a subprocess) and
helpers that write its scenarios.

The server binary is found through ``PANTO_TESTSERVER``, else in the cargo target dir
(``CARGO_TARGET_DIR`` or the repository's ``target/``), debug or release build.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import pytest

import panto

REPO = Path(__file__).resolve().parents[2]


def _target_dirs() -> List[Path]:
    dirs = []
    if os.environ.get("CARGO_TARGET_DIR"):
        dirs.append(Path(os.environ["CARGO_TARGET_DIR"]))
    dirs.append(REPO / "target")
    return dirs


def find_binary(name: str, env: str) -> Path:
    if os.environ.get(env):
        return Path(os.environ[env])
    for d in _target_dirs():
        for profile in ("debug", "release"):
            p = d / profile / name
            if p.exists():
                return p
    pytest.exit(f"{name} not found: build it (cargo build -p ...) or set {env}", returncode=2)
    raise AssertionError("unreachable")


def wait_until(predicate: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Any:
    """Polls `predicate` until it returns something truthy; fails after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.002)


class Server:
    """A running panto-testserver."""

    def __init__(self) -> None:
        binary = find_binary("panto-testserver", "PANTO_TESTSERVER")
        self.proc = subprocess.Popen(
            [str(binary), "--port", "0", "--exit-on-stdin-eof"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=sys.stderr,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        prefix = "listening on "
        if not line.startswith(prefix):
            self.proc.kill()
            raise RuntimeError(f"unexpected first line from panto-testserver: {line!r}")
        self.url = line[len(prefix) :]
        self.base_url = self.url + "/v1"

    def _post(self, path: str, body: Optional[Any] = None) -> Any:
        data = json.dumps(body).encode() if body is not None else b""
        req = urllib.request.Request(self.url + path, data=data, method="POST")
        req.add_header("content-type", "application/json")
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read() or b"null")

    def _get(self, path: str) -> Any:
        with urllib.request.urlopen(self.url + path, timeout=30) as r:
            return json.loads(r.read())

    def scenario(self, *exchanges: Dict[str, Any]) -> None:
        self._post("/_panto/scenario", {"exchanges": list(exchanges)})

    def requests(self) -> List[Dict[str, Any]]:
        return self._get("/_panto/requests")

    def stats(self) -> Dict[str, Any]:
        return self._get("/_panto/stats")

    def held(self) -> int:
        return self.stats()["held"]

    def open_gate(self) -> None:
        self._post("/_panto/gate/open")

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@pytest.fixture(scope="session")
def server_session() -> Iterable[Server]:
    s = Server()
    yield s
    s.close()


@pytest.fixture
def server(server_session: Server) -> Server:
    server_session.scenario()
    return server_session


# --------------------------------------------------------------------------------------
# OpenAI Chat Completions stream scenarios
# --------------------------------------------------------------------------------------

MODEL = "gpt-test"


def chunk(delta: Optional[Dict[str, Any]] = None, finish: Optional[str] = None, *, rid: str = "chatcmpl-1") -> Dict[str, Any]:
    return {
        "data": {
            "id": rid,
            "object": "chat.completion.chunk",
            "created": 1,
            "model": MODEL,
            "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}],
        }
    }


def usage_chunk(prompt: int = 10, completion: int = 5, *, rid: str = "chatcmpl-1") -> Dict[str, Any]:
    return {
        "data": {
            "id": rid,
            "object": "chat.completion.chunk",
            "created": 1,
            "model": MODEL,
            "choices": [],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
        }
    }


DONE = {"data": "[DONE]"}


def text_sse(parts: Sequence[str], *, rid: str = "chatcmpl-1") -> List[Dict[str, Any]]:
    items = [chunk({"role": "assistant", "content": ""}, rid=rid)]
    items += [chunk({"content": p}, rid=rid) for p in parts]
    items += [chunk({}, "stop", rid=rid), usage_chunk(rid=rid), DONE]
    return items


def tool_sse(calls: Sequence[Tuple[str, str, Any]], *, rid: str = "chatcmpl-t") -> List[Dict[str, Any]]:
    """A response calling tools: (call_id, name, arguments as a dict or raw JSON text)."""
    items = [chunk({"role": "assistant", "content": None}, rid=rid)]
    for i, (call_id, name, args) in enumerate(calls):
        raw = args if isinstance(args, str) else json.dumps(args)
        half = len(raw) // 2
        items.append(
            chunk(
                {"tool_calls": [{"index": i, "id": call_id, "type": "function", "function": {"name": name, "arguments": raw[:half]}}]},
                rid=rid,
            )
        )
        items.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": raw[half:]}}]}, rid=rid))
    items += [chunk({}, "tool_calls", rid=rid), usage_chunk(rid=rid), DONE]
    return items


def exchange(sse: List[Any], *, times: int = 1, contains: Sequence[str] = (), **response: Any) -> Dict[str, Any]:
    ex: Dict[str, Any] = {
        "match": {"method": "POST", "path": "/v1/chat/completions"},
        "response": {"sse": sse, **response},
    }
    if contains:
        ex["match"]["body_contains"] = list(contains)
    if times != 1:
        ex["times"] = times
    return ex


def text_exchange(parts: Sequence[str], **kw: Any) -> Dict[str, Any]:
    return exchange(text_sse(parts), **kw)


def error_exchange(status: int, body: Any, **kw: Any) -> Dict[str, Any]:
    ex = {
        "match": {"method": "POST", "path": "/v1/chat/completions"},
        "response": {"status": status, "json": body, **kw},
    }
    return ex


def make_agent(server: Server, **kw: Any) -> panto.Agent:
    kw.setdefault("model", MODEL)
    kw.setdefault("base_url", server.base_url)
    kw.setdefault("api_key", "sk-test-0123456789")
    kw.setdefault("retry", {"max_retries": 0})
    return panto.Agent(**kw)


def thread_names() -> List[str]:
    import threading

    return sorted(t.name for t in threading.enumerate())
