"""OAuth for MCP servers from Python: ``Agent(mcp_token_store=..., mcp_open_url=...)``
against the OAuth-protected fixture server (tests/mcp/oauth_server.py: the `mcp`
package's resource and authorization servers on loopback, from the venv
tests/mcp/venv.sh makes). The authorization code flow is driven by the test's URL opener,
which follows the authorization URL itself (blocking, as a host's may)."""

from __future__ import annotations

import json
import subprocess
import threading
import urllib.request
from pathlib import Path
from typing import Dict, Iterator, List, Optional

import pytest

import panto
from conftest import REPO, exchange, make_agent, text_exchange, tool_sse

CC_CLIENT = "panto-cc"
CC_SECRET = "cc-secret-0123456789"


@pytest.fixture(scope="module")
def oauth_server() -> Iterator[str]:
    venv = subprocess.run(["bash", str(REPO / "tests" / "mcp" / "venv.sh")], capture_output=True, text=True, check=True)
    python = str(Path(venv.stdout.strip()) / "bin" / "python")
    proc = subprocess.Popen([python, str(REPO / "tests" / "mcp" / "oauth_server.py")], stdout=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("PORT "), line
        yield f"http://127.0.0.1:{line.split()[1]}"
    finally:
        proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def fixture_get(base: str, path: str) -> List[str]:
    with urllib.request.urlopen(base + path, timeout=30) as r:
        return json.loads(r.read())


def revoke_access(base: str) -> None:
    urllib.request.urlopen(urllib.request.Request(base + "/_revoke_access", method="POST"), timeout=30).close()


class DictStore:
    """A host's token store, counting what it is asked."""

    def __init__(self) -> None:
        self.saved: Dict[str, str] = {}
        self.lock = threading.Lock()
        self.loads = 0

    def load(self, server_url: str) -> Optional[str]:
        with self.lock:
            self.loads += 1
            return self.saved.get(server_url)

    def save(self, server_url: str, tokens: str) -> None:
        with self.lock:
            self.saved[server_url] = tokens


def outputs(events) -> Dict[str, str]:
    out = {}
    for e in events:
        if isinstance(e, panto.ToolResult):
            assert not e.is_error, e.output
            out[e.call_id] = e.output
    return out


def assert_no_token(base: str, *texts: str) -> None:
    for token in fixture_get(base, "/_tokens"):
        for text in texts:
            assert token not in text


def test_client_credentials_and_the_token_store(server, oauth_server):
    url = oauth_server + "/mcp"
    server.scenario(
        exchange(tool_sse([("w", "sec__whoami", {}), ("l", "sec__leak", {})])),
        text_exchange(["done"]),
    )
    store = DictStore()
    agent = make_agent(
        server,
        mcp_servers={"sec": {"url": url, "oauth": {"grant": "client_credentials", "client_id": CC_CLIENT,
                                                    "client_secret": CC_SECRET}}},
        mcp_token_store=store,
    )
    events = list(agent.stream("go"))
    assert events[-1].text == "done"
    out = outputs(events)
    assert out["w"] == f"client {CC_CLIENT} resource {url}"
    assert out["l"] == "your token is [REDACTED]"
    assert fixture_get(oauth_server, "/_grants")[-1] == "client_credentials"
    # The store was asked first, then given the token, keyed by the server's URL.
    assert store.loads >= 1
    assert fixture_get(oauth_server, "/_tokens")[-1] in store.saved[url]
    assert_no_token(oauth_server, *(repr(e) for e in events), json.dumps(server.requests()),
                    agent.save_history())


def test_the_code_flow_through_the_url_opener_then_refresh(server, oauth_server):
    url = oauth_server + "/mcp"
    server.scenario(
        exchange(tool_sse([("w", "sec__whoami", {})])),
        text_exchange(["signed in"]),
        exchange(tool_sse([("w2", "sec__whoami", {})])),
        text_exchange(["refreshed"]),
    )
    opened: List[str] = []

    def browser(auth_url: str) -> None:
        # A host's opener may block until the sign-in is done: panto takes the redirect
        # meanwhile.
        opened.append(auth_url)
        with urllib.request.urlopen(auth_url, timeout=60) as r:
            assert "panto is signed in" in r.read().decode()

    grants_before = len(fixture_get(oauth_server, "/_grants"))
    store = DictStore()
    agent = make_agent(server, mcp_servers={"sec": {"url": url, "oauth": {}}}, mcp_token_store=store,
                       mcp_open_url=browser)
    events = list(agent.stream("go"))
    assert events[-1].text == "signed in"
    who = outputs(events)["w"]
    assert who.startswith("client ") and who.endswith(f" resource {url}") and CC_CLIENT not in who
    assert len(opened) == 1 and "code_challenge_method=S256" in opened[0]
    assert fixture_get(oauth_server, "/_grants")[grants_before:] == ["authorization_code"]

    revoke_access(oauth_server)
    events = list(agent.stream("again"))
    assert events[-1].text == "refreshed"
    assert outputs(events)["w2"] == who
    assert fixture_get(oauth_server, "/_grants")[grants_before:] == ["authorization_code", "refresh_token"]
    assert len(opened) == 1
    assert_no_token(oauth_server, *(repr(e) for e in events), json.dumps(server.requests()))


def test_an_opener_that_raises_and_a_wrong_secret_are_authentication_errors(server, oauth_server):
    url = oauth_server + "/mcp"

    def refuse(auth_url: str) -> None:
        raise RuntimeError("no browser here")

    agent = make_agent(server, mcp_servers={"sec": {"url": url, "oauth": {}}}, mcp_open_url=refuse)
    with pytest.raises(panto.AuthenticationError) as info:
        list(agent.stream("go"))
    assert "no browser here" in str(info.value)

    wrong = "wrong-secret-0123456789"
    agent = make_agent(server, mcp_servers={"sec": {"url": url, "oauth": {
        "grant": "client_credentials", "client_id": CC_CLIENT, "client_secret": wrong}}})
    with pytest.raises(panto.AuthenticationError) as info:
        list(agent.stream("go"))
    assert "invalid_client" in str(info.value) and wrong not in str(info.value)
    assert server.requests() == []

    with pytest.raises(panto.ConfigError):
        make_agent(server, mcp_open_url=refuse)
