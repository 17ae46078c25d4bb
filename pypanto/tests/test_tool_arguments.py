"""A tool's arguments are validated and converted to its annotations before the
function runs: with pydantic (a TypeAdapter per parameter, lax mode) when it is
installed, by panto's own strict conversion when it is not — every case runs both ways
(`mode`). A value that does not fit is an error result the model reads, naming the
argument; the function is not called."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import json
import subprocess
import sys
import textwrap
import uuid
from typing import Annotated, Dict, List, Literal, Optional, Tuple, TypedDict

import pytest

import panto
import panto._schema
from conftest import exchange, make_agent, text_exchange, tool_sse


@pytest.fixture(params=["pydantic", "plain"])
def mode(request, monkeypatch):
    """Runs a test with pydantic's validation, then with it hidden (panto's own)."""
    if request.param == "pydantic":
        pydantic = pytest.importorskip("pydantic")
        monkeypatch.setattr(panto._schema, "_PYDANTIC", pydantic)
    else:
        monkeypatch.setattr(panto._schema, "_PYDANTIC", None)
    return request.param


class Unit(enum.Enum):
    C = "c"
    F = "f"


@dataclasses.dataclass
class Point:
    """A point of the plane.

    Attributes:
        x: abscissa.
        y: ordinate.
    """

    x: float
    y: float


@dataclasses.dataclass
class Shape:
    """A closed polygon."""

    name: str
    points: List[Point]
    closed: bool = True


class Window(TypedDict):
    start: datetime.date
    days: int


def invalid(t, arguments):
    with pytest.raises(panto.ArgumentError) as info:
        t.arguments(arguments)
    return str(info.value)


def test_plain_types_are_converted_or_refused(mode):
    @panto.tool
    def f(
        count: int,
        ratio: float,
        name: str,
        flag: bool,
        when: datetime.datetime,
        day: datetime.date,
        at: datetime.time,
        ident: uuid.UUID,
        data: bytes,
        unit: Unit,
        mode_: Literal["a", "b"],
        pair: Tuple[int, str],
        tags: set[str],
        nums: List[int] = [],
        opt: Optional[int] = None,
    ) -> None: ...

    args = f.arguments({
        "count": 7, "ratio": 1, "name": "n", "flag": True, "when": "2026-01-02T03:04:05Z",
        "day": "2026-01-02", "at": "03:04:05", "ident": "12345678-1234-5678-1234-567812345678",
        "data": "h\u00e9", "unit": "f", "mode_": "b", "pair": [1, "x"], "tags": ["a", "a"], "nums": [1, 2.0], "opt": None,
    })
    assert args == {
        "count": 7, "ratio": 1.0, "name": "n", "flag": True,
        "when": datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc),
        "day": datetime.date(2026, 1, 2), "at": datetime.time(3, 4, 5),
        "ident": uuid.UUID("12345678-1234-5678-1234-567812345678"), "data": "h\u00e9".encode(),
        "unit": Unit.F, "mode_": "b", "pair": (1, "x"), "tags": {"a"}, "nums": [1, 2], "opt": None,
    }
    assert type(args["ratio"]) is float and type(args["nums"][1]) is int

    base = {"count": 1, "ratio": 1.0, "name": "n", "flag": False, "when": "2026-01-02T03:04:05", "day": "2026-01-02",
            "at": "03:04", "ident": str(uuid.uuid4()), "data": "", "unit": "c", "mode_": "a", "pair": [1, "x"], "tags": []}
    # A list of ints given a string item: refused in both modes, naming the item.
    message = invalid(f, {**base, "nums": ["a"]})
    assert message.startswith("invalid arguments: nums[0]: "), message
    # Wrong types, each named.
    message = invalid(f, {**base, "name": 5, "unit": "k", "pair": [1]})
    for name in ("name: ", "unit: ", "pair"):
        assert name in message, message
    # A required argument missing, an unknown one.
    message = invalid(f, {k: v for k, v in base.items() if k != "count"} | {"extra": 1})
    assert "count: missing (required)" in message and "extra: not a parameter of this tool" in message
    # null for an optional parameter that does not take None: its default.
    assert "nums" not in f.arguments({**base, "nums": None})


def test_a_numeric_string_is_an_int_only_in_pydantics_lax_mode(mode):
    """The one documented difference: pydantic's lax mode reads "7" as 7; panto's own
    conversion is strict by JSON type and refuses it."""

    @panto.tool
    def f(count: int) -> int:
        return count

    if mode == "pydantic":
        assert f.arguments({"count": "7"}) == {"count": 7}
    else:
        assert invalid(f, {"count": "7"}) == "invalid arguments: count: expected an integer, got a string ('7')"
    assert invalid(f, {"count": "seven"}).startswith("invalid arguments: count: ")
    if mode == "plain":  # (pydantic's lax mode reads true as 1)
        assert invalid(f, {"count": True}) == "invalid arguments: count: expected an integer, got a boolean (True)"


def test_records_nested_and_their_schema(mode):
    @panto.tool
    def draw(shape: Shape, window: Optional[Window] = None, weights: Dict[str, float] = {}) -> str:
        """Draws a shape.

        Args:
            shape: what to draw.
        """
        return ""

    # Nested dataclasses under $defs, once each, with their docstrings.
    params = draw.parameters
    assert params["properties"]["shape"] == {"$ref": "#/$defs/Shape", "description": "what to draw."}
    assert params["$defs"]["Shape"] == {
        "description": "A closed polygon.",
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "points": {"type": "array", "items": {"$ref": "#/$defs/Point"}},
            "closed": {"type": "boolean", "default": True},
        },
        "required": ["name", "points"],
    }
    assert params["$defs"]["Point"] == {
        "description": "A point of the plane.",
        "type": "object",
        "properties": {"x": {"type": "number", "description": "abscissa."}, "y": {"type": "number", "description": "ordinate."}},
        "required": ["x", "y"],
    }
    assert params["$defs"]["Window"]["properties"]["start"] == {"type": "string", "format": "date"}

    args = draw.arguments({
        "shape": {"name": "tri", "points": [{"x": 0, "y": 0}, {"x": 1, "y": 0.5}], "ignored": 1},
        "window": {"start": "2026-03-01", "days": 3},
        "weights": {"a": 1},
    })
    assert args["shape"] == Shape("tri", [Point(0.0, 0.0), Point(1.0, 0.5)])
    assert args["window"] == {"start": datetime.date(2026, 3, 1), "days": 3}
    assert args["weights"] == {"a": 1.0}
    message = invalid(draw, {"shape": {"name": "tri", "points": [{"x": 0, "y": 0}, {"x": "far", "y": 0}]}})
    assert message.startswith("invalid arguments: shape.points[1].x: "), message
    message = invalid(draw, {"shape": {"points": []}})
    assert message in (
        "invalid arguments: shape.name: missing (required)",
        "invalid arguments: shape.name: Field required (got an object)",
    ), message


try:
    import pydantic
except ImportError:  # the pydantic-only test is skipped
    pydantic = None
else:

    class Item(pydantic.BaseModel):
        """One line of an order."""

        sku: str
        qty: int = pydantic.Field(ge=1)

    class Order(pydantic.BaseModel):
        """An order to place."""

        items: List[Item]
        rush: bool = False


@pytest.mark.skipif(pydantic is None, reason="pydantic is not installed")
def test_pydantic_models_as_parameters():
    @panto.tool
    def place(order: Order, note: Annotated[str, "for the courier"] = "") -> str:
        """Places an order."""
        return f"{len(order.items)} lines"

    params = place.parameters
    assert params["properties"]["order"] == {"$ref": "#/$defs/Order"}
    assert params["properties"]["note"] == {"type": "string", "description": "for the courier", "default": ""}
    assert set(params["$defs"]) == {"Order", "Item"}
    assert params["$defs"]["Item"]["properties"]["qty"]["minimum"] == 1
    assert params["$defs"]["Order"]["properties"]["items"]["items"] == {"$ref": "#/$defs/Item"}
    assert params["$defs"]["Order"]["description"] == "An order to place."
    args = place.arguments({"order": {"items": [{"sku": "a", "qty": 2}]}})
    assert args["order"] == Order(items=[Item(sku="a", qty=2)])
    message = invalid(place, {"order": {"items": [{"sku": "a", "qty": 0}]}})
    assert message.startswith("invalid arguments: order.items[0].qty: Input should be greater than or equal to 1"), message


def test_a_turn_with_invalid_arguments_answers_the_model_and_never_calls_the_tool(server, mode):
    called = []

    @panto.tool
    def stats(values: List[float], when: datetime.date) -> str:
        """Summary statistics."""
        called.append((values, when))
        return f"{sum(values)} on {when.isoformat()}"

    server.scenario(
        exchange(tool_sse([("c1", "stats", {"values": [1, "x"], "when": "2026-01-02"}), ("c2", "stats", {"values": [1, 2.5], "when": "2026-01-02"})])),
        text_exchange(["done"], contains=["c1", "c2"]),
    )
    events = list(make_agent(server, tools=[stats], tool_concurrency=1).stream("go"))
    results = {e.call_id: (e.output, e.is_error) for e in events if isinstance(e, panto.ToolResult)}
    assert results["c1"][1] and results["c1"][0].startswith("ArgumentError: invalid arguments: values[1]: "), results
    assert results["c2"] == ("3.5 on 2026-01-02", False)
    assert called == [([1.0, 2.5], datetime.date(2026, 1, 2))]
    assert events[-1].text == "done"


def test_without_pydantic_installed():
    """With pydantic impossible to import, `import panto` and its tools work, with
    panto's own conversion (and a pydantic-only type is refused at decoration)."""
    code = textwrap.dedent(
        """
        import sys
        sys.modules["pydantic"] = None  # `import pydantic` raises ImportError
        import datetime, json, panto

        @panto.tool
        def f(n: int, when: datetime.datetime, tags: list[str] = []) -> str:
            return ""

        print(json.dumps(f.parameters["properties"]["when"]))
        print(f.arguments({"n": 2.0, "when": "2026-01-02T03:04:05+01:00"}))
        try:
            f.arguments({"n": "2", "when": "x"})
        except panto.ArgumentError as e:
            print(e)
        class Opaque: ...
        try:
            panto.tool(lambda x: x, name="g").fn
            @panto.tool
            def g(x: Opaque) -> None: ...
        except TypeError as e:
            print("TypeError", "without pydantic" in str(e))
        """
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert json.loads(lines[0]) == {"type": "string", "format": "date-time"}
    assert lines[1] == "{'n': 2, 'when': datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.timezone(datetime.timedelta(seconds=3600)))}"
    assert lines[2] == (
        "invalid arguments: n: expected an integer, got a string ('2'); "
        "when: expected a string in date-time format, got a string ('x')"
    )
    assert lines[3] == "TypeError True"
