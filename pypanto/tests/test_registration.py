"""Checked at registration, not at the provider's 400: a tool's name must match the
providers' rule (1 to 64 ASCII letters, digits, ``_`` or ``-``) and its parameters be
a JSON Schema with ``"type": "object"`` — ``@panto.tool`` refuses a bad one when it
decorates, the core when the agent is made (host tools declared as dicts)."""

from __future__ import annotations

import pytest

import panto
from conftest import make_agent

BAD_NAMES = ["get weather", "get.weather", "wetter_äöü", "a/b", "x" * 65]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_the_decorator_refuses_a_bad_name(name):
    with pytest.raises(panto.ConfigError) as info:

        @panto.tool(name=name)
        def f(city: str) -> str:
            return city

    assert repr(name) in str(info.value) and "not a valid tool name" in str(info.value)
    assert info.value.kind == "config"


def test_the_decorator_refuses_a_function_whose_own_name_is_not_ascii():
    with pytest.raises(panto.ConfigError, match="wetter_ä"):

        @panto.tool
        def wetter_ä(city: str) -> str:
            return city


def test_a_plain_function_with_a_bad_name_fails_agent_creation(server):
    def wetter_ö(city: str) -> str:
        return city

    with pytest.raises(panto.ConfigError, match="wetter_ö"):
        make_agent(server, tools=[wetter_ö])


@pytest.mark.parametrize("parameters", [{"type": "array"}, {"properties": {}}, ["x"]])
def test_the_decorator_refuses_parameters_that_are_not_an_object_schema(parameters):
    with pytest.raises(panto.ConfigError, match='"type": "object"'):

        @panto.tool(name="lookup", parameters=parameters)
        def f(**kw):
            return ""


def test_good_names_pass():
    for name in ["w", "get_weather", "Get-Weather-2", "x" * 64]:

        @panto.tool(name=name)
        def f(city: str) -> str:
            return city

        assert f.name == name


@pytest.mark.parametrize("name", BAD_NAMES)
def test_a_host_tool_with_a_bad_name_fails_agent_creation_naming_it(server, name):
    with pytest.raises(panto.ConfigError) as info:
        make_agent(server, tools=[{"name": "ok"}, {"name": name}])
    assert str(info.value.message).startswith("tools[1].name: tool ")
    assert "not a valid tool name" in info.value.message


def test_a_host_tool_whose_parameters_are_not_an_object_schema_fails_agent_creation(server):
    with pytest.raises(panto.ConfigError, match=r'tools\[0\].parameters: tool "lookup"'):
        make_agent(server, tools=[{"name": "lookup", "parameters": {"type": "string"}}])
