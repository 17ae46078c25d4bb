"""Structured output: ``agent.run(prompt, output=T)`` against the scripted OpenAI server.

Each test checks both directions: the schema panto derives from the Python type reaches
the provider (the server answers only a request whose body carries it), and the
validated answer comes back as an instance of the type. Then the repair loop
(``OutputRepair`` then the fixed answer), and the three failure kinds with the raw text
on ``.output``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import json
import sys
from dataclasses import dataclass
from typing import Any, Dict, List, Literal, Optional, TypedDict

import pytest

import panto

from conftest import chunk, exchange, make_agent, text_sse, usage_chunk, DONE


class Kind(enum.Enum):
    CAPITAL = "capital"
    OTHER = "other"


@dataclasses.dataclass
class Landmark:
    name: str
    year: Optional[int] = None


@dataclasses.dataclass
class City:
    """A city."""

    name: str
    population: int
    kind: Kind
    landmarks: List[Landmark]
    climate: Literal["dry", "wet"] = "wet"
    nickname: Optional[str] = None


class CityDict(TypedDict):
    name: str
    population: int
    districts: List[str]


def body_of(server: Any, i: int = 0) -> Dict[str, Any]:
    body: Dict[str, Any] = server.requests()[i]["body"]
    return body


def answer(obj: Any, **kw: Any) -> Dict[str, Any]:
    text = obj if isinstance(obj, str) else json.dumps(obj)
    return exchange(text_sse([text[: len(text) // 2], text[len(text) // 2 :]]), **kw)


TOKYO = {
    "name": "Tokyo",
    "population": 14000000,
    "kind": "capital",
    "landmarks": [{"name": "Tokyo Tower", "year": 1958}, {"name": "Senso-ji", "year": None}],
    "climate": "wet",
    "nickname": None,
}


def test_dataclass_schema_goes_out_and_an_instance_comes_back(server):
    # The server answers only a request whose response_format names the dataclass.
    server.scenario(answer(TOKYO, contains=['"response_format"', '"City"', '"landmarks"']))
    agent = make_agent(server)
    city = agent.run("Largest city of Japan?", output=City)
    assert city == City(
        name="Tokyo",
        population=14000000,
        kind=Kind.CAPITAL,
        landmarks=[Landmark("Tokyo Tower", 1958), Landmark("Senso-ji")],
        climate="wet",
        nickname=None,
    )
    sent = body_of(server)["response_format"]
    assert sent["type"] == "json_schema"
    assert sent["json_schema"]["name"] == "City"
    assert sent["json_schema"]["strict"] is True
    schema = sent["json_schema"]["schema"]
    # OpenAI strict mode: every property listed as required, no extra properties.
    assert set(schema["required"]) == set(schema["properties"]) == {
        "name", "population", "kind", "landmarks", "climate", "nickname"
    }
    assert schema["additionalProperties"] is False
    # The history keeps the answer as the assistant's text.
    assert json.loads(agent.history[-1]["content"][0]["text"]) == TOKYO


def test_optional_fields_may_be_left_out_and_take_their_defaults(server):
    server.scenario(answer({"name": "Oslo", "population": 700000, "kind": "capital", "landmarks": [],
                            "climate": None, "nickname": None}))
    city = make_agent(server).run("Capital of Norway?", output=City)
    assert city == City("Oslo", 700000, Kind.CAPITAL, [], "wet", None)


def test_typeddict(server):
    server.scenario(answer({"name": "Lyon", "population": 520000, "districts": ["Presqu'île"]},
                           contains=['"CityDict"']))
    got = make_agent(server).run("A French city?", output=CityDict)
    assert got == {"name": "Lyon", "population": 520000, "districts": ["Presqu'île"]}
    assert type(got) is dict
    schema = body_of(server)["response_format"]["json_schema"]["schema"]
    assert schema["properties"]["districts"] == {"type": "array", "items": {"type": "string"}}


def test_pydantic_model(server):
    pydantic = pytest.importorskip("pydantic")

    class Person(pydantic.BaseModel):
        name: str
        age: int
        email: Optional[str] = None

    server.scenario(answer({"name": "Ada", "age": 36, "email": None}, contains=['"Person"']))
    person = make_agent(server).run("Who wrote the first program?", output=Person)
    assert isinstance(person, Person)
    assert person == Person(name="Ada", age=36)


def test_a_pydantic_validator_stricter_than_the_schema_is_output_invalid(server):
    pydantic = pytest.importorskip("pydantic")

    class Even(pydantic.BaseModel):
        n: int

        @pydantic.field_validator("n")
        @classmethod
        def even(cls, v: int) -> int:
            if v % 2:
                raise ValueError("n must be even")
            return v

    server.scenario(answer('{"n": 3}'))
    with pytest.raises(panto.OutputInvalidError, match="n must be even") as info:
        make_agent(server).run("An even number?", output=Even)
    assert info.value.output == '{"n": 3}'


def test_a_dict_schema_returns_the_parsed_value(server):
    schema = {
        "title": "answer",
        "type": "object",
        "properties": {"ok": {"type": "boolean"}, "items": {"type": "array", "items": {"type": "integer"}}},
        "required": ["ok", "items"],
    }
    server.scenario(answer({"ok": True, "items": [1, 2, 3]}, contains=['"name":"answer"']))
    assert make_agent(server).run("Numbers?", output=schema) == {"ok": True, "items": [1, 2, 3]}


def test_stream_output_schema_and_message_complete_output(server):
    server.scenario(answer({"name": "Kyoto", "population": 1460000, "districts": []}, contains=['"CityDict"']))
    agent = make_agent(server)
    with agent.stream("A city?", output_schema=CityDict) as s:
        events = list(s)
    done = events[-1]
    assert isinstance(done, panto.MessageComplete)
    assert done.output == {"name": "Kyoto", "population": 1460000, "districts": []}
    # A plain turn has no output.
    server.scenario(exchange(text_sse(["plain"])))
    assert agent.run("hi").output is None
    assert "response_format" not in body_of(server)


def test_the_models_numbers_come_back_exactly(server):
    """An integer past 64 bits is an exact ``int`` (it was the float
    1.2345678901234568e+29); the canonical JSON keeps every number as written."""
    schema = {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "number"}},
        "required": ["a", "b"],
    }
    text = '{"a": 123456789012345678901234567890, "b": 0.12345678901234567890123}'
    server.scenario(answer(text))
    agent = make_agent(server)
    with agent.stream("Numbers?", output_schema=schema) as s:
        done = list(s)[-1]
    assert done.output["a"] == 123456789012345678901234567890
    assert isinstance(done.output["a"], int)
    assert '"output":{"a":123456789012345678901234567890,"b":0.12345678901234567890123}' in done.to_json()
    server.scenario(answer(text))
    assert agent.run("Numbers?", output=schema)["a"] == 123456789012345678901234567890


def test_agent_level_schema_and_turning_it_off_for_one_turn(server):
    agent = make_agent(server, output_schema=panto.output_schema(CityDict))
    server.scenario(answer({"name": "Nara", "population": 350000, "districts": []}, contains=['"CityDict"']))
    assert agent.run("A city?").output == {"name": "Nara", "population": 350000, "districts": []}
    server.scenario(exchange(text_sse(["just text"])))
    with agent.stream("hi", output_schema=False) as s:
        done = s.final()
    assert done.text == "just text" and done.output is None
    assert "response_format" not in body_of(server)


def test_repair_then_valid_answer(server):
    server.scenario(
        answer({"name": "Tokyo"}),
        # The repair request must carry the validation error back to the model.
        answer(TOKYO, contains=["did not match the required JSON schema"]),
    )
    agent = make_agent(server, output_retries=1)
    with agent.stream("Largest city of Japan?", output_schema=City) as s:
        events = list(s)
    repairs = [e for e in events if isinstance(e, panto.OutputRepair)]
    assert len(repairs) == 1
    assert (repairs[0].attempt, repairs[0].max_attempts) == (1, 1)
    assert "population" in repairs[0].error
    # The core drops the nulls strict mode made the model write for optional fields.
    assert events[-1].output == {
        "name": "Tokyo",
        "population": 14000000,
        "kind": "capital",
        "landmarks": [{"name": "Tokyo Tower", "year": 1958}, {"name": "Senso-ji"}],
        "climate": "wet",
    }
    assert len(server.requests()) == 2


def test_output_invalid_after_the_repairs_carries_the_raw_text(server):
    bad = '{"name": "Tokyo"}'
    server.scenario(answer(bad, times=2))
    agent = make_agent(server, output_retries=1)
    with pytest.raises(panto.OutputInvalidError) as info:
        agent.run("Largest city of Japan?", output=City)
    assert info.value.kind == "output_invalid"
    assert info.value.output == bad
    assert not info.value.retryable
    assert len(server.requests()) == 2


def test_not_json_is_output_invalid(server):
    server.scenario(answer("Tokyo, of course."))
    with pytest.raises(panto.OutputInvalidError) as info:
        make_agent(server, output_retries=0).run("Largest city of Japan?", output=City)
    assert info.value.output == "Tokyo, of course."


def test_refusal_is_output_refused(server):
    sse = [chunk({"role": "assistant", "content": None, "refusal": ""})]
    sse += [chunk({"refusal": "I can't help "}), chunk({"refusal": "with that."})]
    sse += [chunk({}, "stop"), usage_chunk(), DONE]
    server.scenario(exchange(sse))
    with pytest.raises(panto.OutputRefusedError) as info:
        make_agent(server).run("Something bad", output=City)
    assert info.value.kind == "output_refused"
    assert info.value.output == "I can't help with that."


def test_max_tokens_is_output_truncated(server):
    sse = [chunk({"role": "assistant", "content": ""}), chunk({"content": '{"name": "Tok'}), chunk({}, "length")]
    sse += [usage_chunk(), DONE]
    server.scenario(exchange(sse))
    with pytest.raises(panto.OutputTruncatedError) as info:
        make_agent(server, max_tokens=5).run("Largest city of Japan?", output=City)
    assert info.value.output == '{"name": "Tok'


def test_arun_returns_the_instance(server):
    server.scenario(answer(TOKYO))
    agent = make_agent(server)

    async def main() -> City:
        return await agent.arun("Largest city of Japan?", output=City)

    assert asyncio.run(main()).landmarks[0] == Landmark("Tokyo Tower", 1958)


def test_a_type_that_is_not_an_object_is_refused_before_any_request(server):
    with pytest.raises(panto.ConfigError, match="output_schema"):
        make_agent(server).stream("hi", output_schema=int)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not a dataclass"):
        make_agent(server).run("hi", output=int)
    assert server.requests() == []


def test_schema_of_nested_types():
    schema = panto.output_schema(City)
    assert schema["title"] == "City"
    assert schema["type"] == "object"
    assert schema["required"] == ["name", "population", "kind", "landmarks"]
    assert schema["properties"]["kind"] == {"type": "string", "enum": ["capital", "other"]}
    assert schema["properties"]["climate"] == {"type": "string", "enum": ["dry", "wet"]}
    assert schema["properties"]["landmarks"] == {"type": "array", "items": {"$ref": "#/$defs/Landmark"}}
    assert schema["$defs"]["Landmark"]["required"] == ["name"]
    assert "default" not in json.dumps(schema)


def test_schema_without_pydantic_does_not_import_it():
    import subprocess

    code = (
        "import sys, dataclasses, panto\n"
        "@dataclasses.dataclass\n"
        "class A:\n    x: int\n"
        "panto.output_schema(A)\n"
        "print('pydantic' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_docs_example(server, monkeypatch):
    # docs/python.md's example, line for line.
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-docs")
    base_url = server.base_url
    server.scenario(answer({"name": "Tokyo", "country": "Japan", "population": 14000000}, contains=['"City"']))

    @dataclass
    class City:
        name: str
        country: str
        population: Optional[int] = None

    agent = panto.Agent(model="gpt-4o-mini", base_url=base_url)
    city = agent.run("The largest city of Japan?", output=City)
    assert city == City(name="Tokyo", country="Japan", population=14000000)
