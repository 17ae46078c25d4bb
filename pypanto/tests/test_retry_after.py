"""A server's wait (``retry-after``) past ``retry.max_retry_after_ms`` (default 60 s)
fails the turn at once; the exception carries the wait as ``retry_after`` (seconds)."""

from __future__ import annotations

import pickle

import pytest

import panto
from conftest import error_exchange, make_agent


def test_a_wait_past_the_cap_fails_at_once_with_retry_after(server):
    # 120 s is past the default cap (60 s): no retry, and the wait is on the exception.
    server.scenario(
        error_exchange(429, {"error": {"message": "slow down"}}, headers={"retry-after": "120"}),
    )
    agent = make_agent(server, retry={"max_retries": 2, "initial_delay_ms": 1})
    with pytest.raises(panto.RateLimitError) as info:
        agent.run("x")
    e = info.value
    assert e.retry_after == 120.0 and e.status == 429
    assert "retry.max_retry_after_ms" in e.message
    assert len(server.requests()) == 1
    back = pickle.loads(pickle.dumps(e))
    assert back.retry_after == 120.0


def test_no_wait_is_none(server):
    server.scenario(error_exchange(429, {"error": {"message": "slow down"}}))
    with pytest.raises(panto.RateLimitError) as info:
        make_agent(server).run("x")
    assert info.value.retry_after is None
