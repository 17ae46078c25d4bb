"""Usage a server did not report is unknown, not zero (tests/server/scenarios/
usage-unreported.json): turn 1 is answered with no usage at all, as llama.cpp answers;
turn 2 reports a real zero. ``Usage.reported`` tells them apart."""

from __future__ import annotations

import asyncio
import json

import panto

from conftest import REPO, make_agent


def load(server):
    path = REPO / "tests" / "server" / "scenarios" / "usage-unreported.json"
    server._post("/_panto/scenario", json.loads(path.read_text()))


def usages(events):
    return [ev.usage for ev in events if isinstance(ev, (panto.MessageEnd, panto.MessageComplete))]


def test_unreported_usage_is_unknown_and_a_reported_zero_is_zero(server):
    load(server)
    agent = make_agent(server)
    for want in (False, True):
        events = list(agent.stream("hello"))
        got = usages(events)
        assert len(got) == 2
        for u in got:
            assert u.reported is want
            assert (u.input_tokens, u.output_tokens) == (0, 0)
            assert u.to_dict()["reported"] is want
        assert events[-1].to_dict()["usage"]["reported"] is want
    # Unknown and zero are different values.
    assert got[0] != make_unreported(server)


def make_unreported(server):
    load(server)
    return make_agent(server).run("hello").usage


def test_unreported_usage_async(server):
    load(server)
    agent = make_agent(server)

    async def turn():
        return [ev async for ev in agent.astream("hello")]

    got = usages(asyncio.run(turn()))
    assert [u.reported for u in got] == [False, False]
