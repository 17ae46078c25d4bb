"""Fallback models from Python: a 503 of the agent's own model goes to the next model of
``fallback`` within the turn (``panto.ProviderFallback``; ``MessageComplete.model`` names
the model that answered); an authentication error does not; a configuration error names
the entry."""

from __future__ import annotations

import asyncio
from typing import Any, Dict, List

import pytest

import panto
from conftest import MODEL, make_agent, text_sse


def by_model(model: str, response: Dict[str, Any]) -> Dict[str, Any]:
    return {"match": {"method": "POST", "path": "/v1/chat/completions", "body": {"/model": model}}, "response": response}


def failing(status: int, error_type: str) -> Dict[str, Any]:
    return {"status": status, "json": {"error": {"type": error_type, "message": "scripted"}}}


def fallback_agent(server: Any) -> panto.Agent:
    return make_agent(
        server,
        fallback=[{"provider": "openai", "model": "gpt-fallback", "base_url": server.base_url, "api_key": "sk-fallback-0123456789"}],
    )


def test_a_503_falls_back_within_the_turn(server: Any) -> None:
    server.scenario(
        by_model(MODEL, failing(503, "server_error")),
        by_model("gpt-fallback", {"sse": text_sse(["from ", "the fallback"])}),
    )
    agent = fallback_agent(server)
    with agent.stream("hi") as s:
        events: List[panto.Event] = list(s)
    fell = [e for e in events if isinstance(e, panto.ProviderFallback)]
    assert len(fell) == 1, [e.type for e in events]
    f = fell[0]
    assert (f.message, f.from_provider, f.from_model, f.to_provider, f.to_model) == (0, "openai", MODEL, "openai", "gpt-fallback")
    assert (f.error_kind, f.status) == ("server", 503)
    done = events[-1]
    assert isinstance(done, panto.MessageComplete)
    assert (done.text, done.model) == ("from the fallback", "gpt-fallback")
    assert "sk-fallback-0123456789" not in "".join(e.to_json() for e in events)

    # The same from asyncio.
    server.scenario(
        by_model(MODEL, failing(503, "server_error")),
        by_model("gpt-fallback", {"sse": text_sse(["again"])}),
    )
    result = asyncio.run(agent.arun("hi"))
    assert (result.text, result.model) == ("again", "gpt-fallback")


def test_an_authentication_error_does_not_fall_back(server: Any) -> None:
    server.scenario(
        by_model(MODEL, failing(401, "invalid_api_key")),
        by_model("gpt-fallback", {"sse": text_sse(["never"])}),
    )
    agent = fallback_agent(server)
    seen: List[str] = []
    with pytest.raises(panto.AuthenticationError):
        with agent.stream("hi") as s:
            for e in s:
                seen.append(e.type)
    assert "provider_fallback" not in seen
    assert len(server.requests()) == 1


def test_a_configuration_error_names_the_entry() -> None:
    with pytest.raises(panto.ConfigError) as e:
        panto.Agent(provider="openai", model="m", api_key="k", fallback=[{"provider": "openai"}])
    assert "fallback[0].model" in str(e.value)
    with pytest.raises(panto.ConfigError) as e:
        panto.Agent(provider="openai", model="m", api_key="k", fallback=[{"provider": "mistral", "model": "x"}])  # type: ignore[typeddict-item]
    assert "fallback[0].provider" in str(e.value)
