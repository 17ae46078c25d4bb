"""Owns structured output on the Python side: the JSON Schema of the type a caller asks
a turn to answer with (``agent.run(prompt, output=T)``), and the conversion of the
core's validated ``MessageComplete.output`` into a value of that type.

The core does the rest, the same for every language: it sends the schema to the
provider (normalized for OpenAI's strict mode), validates the answer against it, asks
the model to repair an answer that does not match, and ends the turn with
``OutputInvalidError`` / ``OutputRefusedError`` / ``OutputTruncatedError`` when it
cannot get one.

**Types.** A dataclass, a ``TypedDict`` or a pydantic model (the root must describe a
JSON object). The schema of a dataclass or ``TypedDict`` is panto's own (the rules of
``panto.json_schema``: ``str`` / ``int`` / ``float`` / ``bool`` / ``None``,
``Optional`` and other unions, ``list`` / ``dict[str, T]``, ``Literal``, ``Enum``,
nested dataclasses and ``TypedDict`` s; a field with a default is optional). A pydantic
model's schema and validation are pydantic's; pydantic is never imported for anything
else. The root type's name is the schema's ``title``, which names the output on the
wire (OpenAI's ``json_schema.name``).

**Values.** A dataclass is built from the validated object field by field (nested ones
too, enums as members, a missing optional field as its default); a ``TypedDict`` is the
object with its nested values converted the same way; a pydantic model goes through
``model_validate``. A value the core accepted but the type does not (a pydantic
validator stricter than the schema) raises ``OutputInvalidError`` with the raw text.
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from typing import Any, Callable, Dict, Optional

from ._errors import PantoError
from ._schema import Schemas, _InvalidMany, _Invalid, _is_pydantic_model, _is_typeddict, convert

__all__ = ["output_schema"]

_TITLE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def _is_output_type(tp: Any) -> bool:
    return (
        (dataclasses.is_dataclass(tp) and isinstance(tp, type)) or _is_typeddict(tp) or _is_pydantic_model(tp)
    )


def _without_defaults(node: Any) -> Any:
    """A schema without its ``default`` keywords (at schema positions only, never a
    property that happens to be called "default"): an output's defaults are applied
    when the value is built, and OpenAI's strict mode does not take the keyword."""
    if isinstance(node, list):
        return [_without_defaults(v) for v in node]
    if not isinstance(node, dict):
        return node
    out: Dict[str, Any] = {}
    for key, value in node.items():
        if key == "default":
            continue
        if key in ("properties", "$defs", "definitions", "patternProperties") and isinstance(value, dict):
            out[key] = {name: _without_defaults(sub) for name, sub in value.items()}
        elif key in ("items", "additionalProperties", "not", "contains", "if", "then", "else") or key in (
            "anyOf",
            "oneOf",
            "allOf",
            "prefixItems",
        ):
            out[key] = _without_defaults(value)
        else:
            out[key] = value
    return out


def output_schema(tp: Any) -> Dict[str, Any]:
    """The JSON Schema panto sends for a turn that must answer with a ``tp``: a
    dataclass, a ``TypedDict`` or a pydantic model (a ``dict`` is taken as a JSON
    Schema already and returned as is).

    The root is the type's object schema (not a ``$ref``), titled with the type's name;
    nested named types are under ``$defs``. Fields with a default are optional
    (absent from ``required``); ``default`` keywords are left out. Raises ``TypeError``
    for any other type, naming it.

    .. code-block:: python

        @dataclass
        class City:
            name: str
            population: int | None = None

        panto.output_schema(City)
        # {"type": "object", "title": "City", "properties": {...}, "required": ["name"]}
    """
    if isinstance(tp, dict):
        return tp
    if not _is_output_type(tp):
        raise TypeError(
            f"output: {tp!r} is not a dataclass, a TypedDict or a pydantic model "
            "(a JSON Schema may be given as a dict)"
        )
    if _is_pydantic_model(tp):
        schema: Dict[str, Any] = tp.model_json_schema()
    else:
        schemas = Schemas()
        ref = schemas.of(tp)
        name = ref["$ref"].rsplit("/", 1)[1]
        schema = dict(schemas.defs[name])
        # The root is inlined; its $defs entry stays only if something refers back to it.
        rest = {k: v for k, v in schemas.defs.items() if k != name}
        if f'"#/$defs/{name}"' in json.dumps(list(rest.values()) + [schema]):
            rest[name] = schemas.defs[name]
        if rest:
            schema["$defs"] = rest
    schema = _without_defaults(schema)
    title = getattr(tp, "__name__", "")
    if _TITLE.match(title):
        schema = {"title": title, **{k: v for k, v in schema.items() if k != "title"}}
    return schema


def _raw(value: Any, text: str) -> str:
    return text if text else json.dumps(value, ensure_ascii=False)


def _invalid(message: str, raw: str) -> PantoError:
    from ._vocab import ERROR_CLASSES

    cls = ERROR_CLASSES.get("output_invalid", PantoError)
    err = cls(message, kind="output_invalid")
    err.output = raw
    return err


class Output:
    """What one ``run(output=...)`` asks for: the schema to send and how to turn the
    validated value into the caller's type."""

    __slots__ = ("schema", "_build")

    def __init__(self, spec: Any) -> None:
        self.schema: Dict[str, Any] = output_schema(spec)
        self._build: Optional[Callable[[Any], Any]] = None if isinstance(spec, dict) else _builder(spec)

    def value(self, output: Any, text: str) -> Any:
        """The caller's value for the core's validated ``output`` (``text``: the raw
        answer, for the error if the type refuses it)."""
        if self._build is None:
            return output
        try:
            return self._build(output)
        except _Invalid as e:
            raise _invalid(f"the output does not fit the type: {e.path.lstrip('.') or 'value'}: {e.problem}", _raw(output, text)) from None
        except _InvalidMany as e:
            problems = "; ".join(f"{p.path.lstrip('.') or 'value'}: {p.problem}" for p in e.problems)
            raise _invalid(f"the output does not fit the type: {problems}", _raw(output, text)) from None


def _builder(tp: Any) -> Callable[[Any], Any]:
    if _is_pydantic_model(tp):

        def build_model(value: Any) -> Any:
            pydantic = sys.modules["pydantic"]  # imported: tp is one of its models
            try:
                return tp.model_validate(value)
            except pydantic.ValidationError as e:
                problems = []
                for err in e.errors(include_url=False):
                    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err.get("loc", ()))
                    problems.append(_Invalid(where, str(err.get("msg", "invalid"))))
                raise _InvalidMany(problems) from None

        return build_model

    def build(value: Any) -> Any:
        return convert(value, tp)

    return build

