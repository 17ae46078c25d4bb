"""Owns what a tool's signature means on the wire: the JSON Schema of its parameters,
derived from their annotations, and the conversion of the model's JSON arguments into
the annotated Python values, validated.

**Schema.** Scalars, containers, unions, ``Literal``, enums, ``datetime`` / ``date`` /
``time`` / ``UUID`` (strings with a ``format``), ``bytes`` (a string) and named record
types. A named type — a dataclass, a ``TypedDict``, a pydantic model — is described once,
under the parameters schema's top-level ``$defs``, and referred to with ``$ref``; its
docstring's summary is its description, an ``Attributes:`` section describes its fields.
A pydantic model's schema (and that of any other type panto cannot describe itself)
is pydantic's, with its ``$defs`` merged into the tool's.

**Validation.** With pydantic installed, each argument goes through a
``pydantic.TypeAdapter`` of its parameter's annotation, in pydantic's lax mode (``"7"``
is the int 7, ``"2026-01-02"`` a date). Without pydantic, panto converts the plain types
itself, strictly by JSON type: an ``int`` is a JSON integer (or a number with no
fraction: ``7.0``), never a string (``"7"`` is refused); a ``float`` any number; a
``str`` only a string; a ``bool`` only ``true`` / ``false``; ``datetime``, ``date``,
``time`` and ``UUID`` their ISO 8601 / canonical strings; ``bytes`` a string's UTF-8;
containers, unions, literals, enums, dataclasses and ``TypedDict`` s element by element.
Keys of an object that its type does not name are ignored (as pydantic does). Either
way ``null`` for a parameter with a default that does not take ``None`` means the
default. A value that does not fit raises ``ArgumentError`` naming the argument and the
place in it (``points[1].x``): the model reads it as the call's error result.

pydantic is imported only when first needed — by a tool's first call, or at
decoration for a type only pydantic can describe — never by ``import panto``.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import datetime
import enum
import inspect
import json
import re
import sys
import types
import typing
import uuid
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Union

__all__ = ["ArgumentError", "json_schema"]

_NoneType = type(None)


class ArgumentError(ValueError):
    """The model's arguments do not fit the tool's parameters: the message names each
    argument and what is wrong with it."""


# --------------------------------------------------------------------------------------
# pydantic, if installed (imported on first need)
# --------------------------------------------------------------------------------------

_UNSET: Any = object()
#: The pydantic module, ``None`` when it is not installed; ``_UNSET`` until needed.
_PYDANTIC: Any = _UNSET


def pydantic_module() -> Any:
    """The pydantic module, or ``None`` if it cannot be imported."""
    global _PYDANTIC
    if _PYDANTIC is _UNSET:
        try:
            import pydantic
        except ImportError:
            _PYDANTIC = None
        else:
            _PYDANTIC = pydantic
    return _PYDANTIC


def _is_pydantic_model(tp: Any) -> bool:
    # A model's class exists only if pydantic was imported: no import to find out.
    pydantic = sys.modules.get("pydantic")
    return pydantic is not None and isinstance(tp, type) and issubclass(tp, pydantic.BaseModel)


# --------------------------------------------------------------------------------------
# Docstrings: the summary, and per-parameter descriptions (Google or Sphinx style)
# --------------------------------------------------------------------------------------

_SECTION = re.compile(
    r"^\s*(Args|Arguments|Parameters|Params|Returns|Return|Raises|Yields|Examples?|Notes?|Attributes)\s*:\s*$"
)
_PARAM_SECTIONS = {"args", "arguments", "parameters", "params", "attributes"}
_GOOGLE_PARAM = re.compile(r"^\s*(\*{0,2}\w+)\s*(\([^)]*\))?\s*:\s*(.*)$")
_SPHINX_PARAM = re.compile(r"^\s*:param\s+(?:[^:]*\s)?(\w+)\s*:\s*(.*)$")


def doc_summary(doc: str) -> str:
    """A docstring's text before its first section (``Args:``, ``:param``…)."""
    lines = []
    for line in inspect.cleandoc(doc).splitlines():
        if _SECTION.match(line) or line.strip().startswith(":param"):
            break
        lines.append(line)
    return "\n".join(lines).strip()


def doc_params(doc: str) -> Dict[str, str]:
    """The descriptions a docstring gives its parameters (or attributes)."""
    out: Dict[str, str] = {}
    if not doc:
        return out
    lines = inspect.cleandoc(doc).splitlines()
    section: Optional[str] = None
    current: Optional[str] = None
    indent = 0
    for line in lines:
        m = _SECTION.match(line)
        if m:
            section = m.group(1).lower()
            current = None
            continue
        sp = _SPHINX_PARAM.match(line)
        if sp:
            current = sp.group(1)
            out[current] = sp.group(2).strip()
            indent = len(line) - len(line.lstrip())
            continue
        if section in _PARAM_SECTIONS:
            if not line.strip():
                current = None
                continue
            gp = _GOOGLE_PARAM.match(line)
            this_indent = len(line) - len(line.lstrip())
            if gp and (current is None or this_indent <= indent):
                current = gp.group(1).lstrip("*")
                out[current] = gp.group(3).strip()
                indent = this_indent
            elif current is not None:
                out[current] = (out[current] + " " + line.strip()).strip()
        elif current is not None and line.strip() and (len(line) - len(line.lstrip())) > indent:
            out[current] = (out[current] + " " + line.strip()).strip()
        else:
            current = None
    return out


def _own_doc(tp: type) -> str:
    """A class's docstring, unless it is the one ``dataclasses`` writes (its signature)."""
    doc = tp.__doc__ or ""
    if dataclasses.is_dataclass(tp) and doc.startswith(tp.__name__ + "("):
        return ""
    return inspect.cleandoc(doc)


# --------------------------------------------------------------------------------------
# JSON Schema from type annotations
# --------------------------------------------------------------------------------------

_FORMATS: Dict[Any, str] = {
    datetime.datetime: "date-time",
    datetime.date: "date",
    datetime.time: "time",
    uuid.UUID: "uuid",
}


def _is_union(origin: Any) -> bool:
    return origin is Union or (hasattr(types, "UnionType") and origin is types.UnionType)


def _is_typeddict(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, dict) and hasattr(tp, "__required_keys__")


def _literal_type(values: Tuple[Any, ...]) -> Optional[str]:
    kinds = set()
    for v in values:
        if isinstance(v, bool):
            kinds.add("boolean")
        elif isinstance(v, int):
            kinds.add("integer")
        elif isinstance(v, float):
            kinds.add("number")
        elif isinstance(v, str):
            kinds.add("string")
        elif v is None:
            kinds.add("null")
        else:
            raise TypeError(f"Literal value {v!r} is not a JSON scalar")
    return kinds.pop() if len(kinds) == 1 else None


def _enum_schema(values: List[Any]) -> Dict[str, Any]:
    schema: Dict[str, Any] = {}
    t = _literal_type(tuple(values))
    if t is not None:
        schema["type"] = t
    schema["enum"] = list(values)
    return schema


_NOT_JSON = object()


def _default_json(value: Any) -> Any:
    """A default value as JSON (what the model sees), or ``_NOT_JSON``."""
    try:
        # Through JSON and back: tuples become lists, as the model will see them.
        return json.loads(json.dumps(value, default=_to_json))
    except (TypeError, ValueError):
        return _NOT_JSON


def _to_json(value: Any) -> Any:
    """``json.dumps``'s ``default``: values of the types the schema knows, as JSON."""
    if isinstance(value, enum.Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, (set, frozenset)):
        return list(value)
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    if _is_pydantic_model(type(value)):
        return value.model_dump(mode="json")
    raise TypeError(f"{type(value).__name__} is not JSON")


def _walk_refs(node: Any, rename: Mapping[str, str]) -> Any:
    """``node`` with every ``$ref`` to a renamed ``#/$defs/`` entry pointed at its new name."""
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            if k == "$ref" and isinstance(v, str) and v.startswith("#/$defs/") and v[8:] in rename:
                out[k] = "#/$defs/" + rename[v[8:]]
            else:
                out[k] = _walk_refs(v, rename)
        return out
    if isinstance(node, list):
        return [_walk_refs(v, rename) for v in node]
    return node


class Schemas:
    """Builds the schemas of one tool's parameters, collecting the ``$defs`` of the named
    types they use (one entry per type, however often it appears)."""

    def __init__(self) -> None:
        self.defs: Dict[str, Any] = {}
        self._names: Dict[Any, str] = {}

    def _unique(self, name: str) -> str:
        if name not in self.defs:
            return name
        n = 2
        while f"{name}{n}" in self.defs:
            n += 1
        return f"{name}{n}"

    def _named(self, tp: Any, build: Callable[[], Dict[str, Any]]) -> Dict[str, Any]:
        name = self._names.get(tp)
        if name is None:
            name = self._unique(getattr(tp, "__name__", "Type"))
            self._names[tp] = name
            self.defs[name] = {}  # taken before building: a type may refer to itself
            self.defs[name] = build()
        return {"$ref": f"#/$defs/{name}"}

    def object(
        self,
        hints: Mapping[str, Any],
        required: List[str],
        defaults: Mapping[str, Any],
        descriptions: Mapping[str, str],
    ) -> Dict[str, Any]:
        props: Dict[str, Any] = {}
        for name, annotation in hints.items():
            prop = self.of(annotation)
            if name in descriptions and "description" not in prop:
                prop["description"] = descriptions[name]
            if name in defaults:
                default = _default_json(defaults[name])
                if default is not _NOT_JSON:
                    prop["default"] = default
            props[name] = prop
        return {"type": "object", "properties": props, "required": required}

    def _record(self, tp: type, hints: Mapping[str, Any], required: List[str], defaults: Mapping[str, Any]) -> Dict[str, Any]:
        doc = _own_doc(tp)
        schema = self.object(hints, required, defaults, doc_params(doc))
        summary = doc_summary(doc)
        return {"description": summary, **schema} if summary else schema

    def _dataclass(self, tp: type) -> Dict[str, Any]:
        hints = typing.get_type_hints(tp, include_extras=True)
        fields = [f for f in dataclasses.fields(tp) if f.init]
        required = []
        defaults: Dict[str, Any] = {}
        for f in fields:
            if f.default is not dataclasses.MISSING:
                defaults[f.name] = f.default
            elif f.default_factory is dataclasses.MISSING:
                required.append(f.name)
        return self._record(tp, {f.name: hints.get(f.name, Any) for f in fields}, required, defaults)

    def _typeddict(self, tp: Any) -> Dict[str, Any]:
        hints = typing.get_type_hints(tp, include_extras=True)
        required_keys = tp.__required_keys__
        return self._record(tp, hints, [k for k in hints if k in required_keys], {})

    def _pydantic(self, annotation: Any) -> Dict[str, Any]:
        """pydantic's schema of a type, its ``$defs`` merged into this tool's (renamed
        where a name is taken by another type); a model itself becomes a ``$defs`` entry."""
        pydantic = pydantic_module()
        if pydantic is None:
            raise TypeError(f"cannot derive a JSON Schema for {annotation!r} (without pydantic)")
        try:
            schema = pydantic.TypeAdapter(annotation).json_schema(ref_template="#/$defs/{model}")
        except Exception as e:  # noqa: BLE001 - pydantic's own error, whatever its class
            raise TypeError(f"cannot derive a JSON Schema for {annotation!r}: {e}") from None
        defs = schema.pop("$defs", {})
        rename = {}
        for name, d in defs.items():
            if name in self.defs and self.defs[name] != d:
                rename[name] = self._unique(name)
        for name, d in defs.items():
            self.defs[rename.get(name, name)] = _walk_refs(d, rename)
        schema = _walk_refs(schema, rename)
        if isinstance(annotation, type) and schema.get("type") == "object" and "$ref" not in schema:
            return self._named(annotation, lambda: schema)
        return dict(schema)

    def of(self, annotation: Any) -> Dict[str, Any]:
        """The schema of one annotation (named types as ``$ref`` into ``defs``)."""
        if annotation is inspect.Parameter.empty or annotation is Any:
            return {}
        origin = typing.get_origin(annotation)
        args = typing.get_args(annotation)
        if origin is typing.Annotated:
            schema: Dict[str, Any] = self.of(args[0])
            for meta in args[1:]:
                if isinstance(meta, str):
                    schema["description"] = meta  # beside a $ref too, as pydantic writes it
                    break
            return schema
        if annotation is None or annotation is _NoneType:
            return {"type": "null"}
        if annotation is str:
            return {"type": "string"}
        if annotation is bool:
            return {"type": "boolean"}
        if annotation is int:
            return {"type": "integer"}
        if annotation is float:
            return {"type": "number"}
        if annotation in (bytes, bytearray):
            return {"type": "string", "format": "binary"}
        if annotation in _FORMATS:
            return {"type": "string", "format": _FORMATS[annotation]}
        if _is_union(origin):
            members = [a for a in args if a is not _NoneType]
            nullable = len(members) < len(args)
            if len(members) == 1 and not nullable:
                return self.of(members[0])
            choices = [self.of(m) for m in members]
            if nullable:
                choices.append({"type": "null"})
            return {"anyOf": choices}
        if origin is typing.Literal:
            return _enum_schema(list(args))
        if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
            return _enum_schema([m.value for m in annotation])
        if annotation in (list, set, frozenset, tuple) or origin in (
            list,
            set,
            frozenset,
            collections.abc.Sequence,
        ):
            schema = {"type": "array"}
            if args:
                schema["items"] = self.of(args[0])
            if origin in (set, frozenset) or annotation in (set, frozenset):
                schema["uniqueItems"] = True
            return schema
        if origin is tuple:
            if len(args) == 2 and args[1] is Ellipsis:
                return {"type": "array", "items": self.of(args[0])}
            return {
                "type": "array",
                "prefixItems": [self.of(a) for a in args],
                "minItems": len(args),
                "maxItems": len(args),
            }
        if annotation is dict or origin in (dict, collections.abc.Mapping):
            schema = {"type": "object"}
            if len(args) == 2:
                if args[0] is not str:
                    raise TypeError(f"JSON object keys are strings, not {args[0]!r}")
                value = self.of(args[1])
                if value:
                    schema["additionalProperties"] = value
            return schema
        if dataclasses.is_dataclass(annotation) and isinstance(annotation, type):
            cls = annotation
            return self._named(cls, lambda: self._dataclass(cls))
        if _is_typeddict(annotation):
            td = annotation
            return self._named(td, lambda: self._typeddict(td))
        # A pydantic model, or a type only pydantic knows (if it is installed).
        return self._pydantic(annotation)

    def with_defs(self, schema: Dict[str, Any]) -> Dict[str, Any]:
        return {**schema, "$defs": dict(self.defs)} if self.defs else schema


def json_schema(annotation: Any) -> Dict[str, Any]:
    """The JSON Schema of a type annotation (named types under its ``$defs``).

    Supported: ``str``, ``int``, ``float``, ``bool``, ``None``, ``Any`` / no annotation
    (``{}``), ``bytes``, ``datetime`` / ``date`` / ``time`` / ``UUID``, ``list[T]`` (and
    ``List``, ``Sequence``, ``set``, ``tuple[T, ...]``), fixed ``tuple[A, B]``,
    ``dict[str, T]``, ``Optional[T]`` / ``T | None`` and other unions (``anyOf``),
    ``Literal[...]`` and ``Enum`` classes (``enum``), ``Annotated[T, "description"]``,
    dataclasses and ``TypedDict`` (objects under ``$defs``); with pydantic installed,
    pydantic models and whatever else pydantic describes. Anything else raises
    ``TypeError`` naming the type.
    """
    schemas = Schemas()
    return schemas.with_defs(schemas.of(annotation))


# --------------------------------------------------------------------------------------
# Arguments: JSON values to the annotated types
# --------------------------------------------------------------------------------------


class _Invalid(Exception):
    """One value does not fit: ``path`` within the argument, what is wrong."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(path, problem)
        self.path = path
        self.problem = problem


def _show(value: Any) -> str:
    kind = {
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        str: "a string",
        list: "an array",
        dict: "an object",
        _NoneType: "null",
    }.get(type(value), type(value).__name__)
    if value is None or isinstance(value, (list, dict)):
        return kind
    text = repr(value)
    return f"{kind} ({text[:40] + '…' if len(text) > 40 else text})"


def _parse_iso(value: str, tp: Any) -> Any:
    text = value.strip()
    if tp is not datetime.date and text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"  # fromisoformat reads "Z" only from 3.11 on
    if tp is datetime.datetime and " " not in text and "T" not in text and "t" not in text and len(text) == 10:
        text += "T00:00:00"  # a date alone is midnight (as pydantic reads it)
    return tp.fromisoformat(text)


def convert(value: Any, tp: Any, path: str = "") -> Any:
    """``value`` (from JSON) as ``tp``, strictly by JSON type (the module doc has the
    rules); raises ``_Invalid`` at the first place that does not fit."""

    def fail(expected: str) -> Any:
        raise _Invalid(path, f"expected {expected}, got {_show(value)}")

    if tp is inspect.Parameter.empty or tp is Any:
        return value
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Annotated:
        return convert(value, args[0], path)
    if tp is None or tp is _NoneType:
        return None if value is None else fail("null")
    if tp is bool:
        return value if isinstance(value, bool) else fail("a boolean")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        return fail("an integer")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        return fail("a number")
    if tp is str:
        return value if isinstance(value, str) else fail("a string")
    if tp in (bytes, bytearray):
        if not isinstance(value, str):
            return fail("a string")
        return tp(value.encode("utf-8", "surrogatepass"))
    if tp in _FORMATS:
        if isinstance(value, str):
            try:
                return tp(value.strip()) if tp is uuid.UUID else _parse_iso(value, tp)
            except ValueError:
                pass
        return fail(f"a string in {_FORMATS[tp]} format")
    if _is_union(origin):
        if value is None and _NoneType in args:
            return None
        for member in args:
            if member is _NoneType:
                continue
            try:
                return convert(value, member, path)
            except _Invalid:
                continue
        names = " or ".join(getattr(a, "__name__", repr(a)) for a in args)
        return fail(f"one of {names}")
    if origin is typing.Literal:
        for allowed in args:
            if value == allowed and type(value) is type(allowed):
                return allowed
        return fail("one of " + ", ".join(json.dumps(a) for a in args))
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        for member in tp:
            if member.value == value and type(member.value) is type(value):
                return member
        return fail("one of " + ", ".join(json.dumps(m.value) for m in tp))
    if tp in (list, set, frozenset, tuple) or origin in (list, set, frozenset, tuple, collections.abc.Sequence):
        if not isinstance(value, list):
            return fail("an array")
        container = origin or tp
        if container is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
            if len(value) != len(args):
                return fail(f"an array of {len(args)} items")
            return tuple(convert(v, a, f"{path}[{i}]") for i, (v, a) in enumerate(zip(value, args)))
        item = args[0] if args else Any
        items = [convert(v, item, f"{path}[{i}]") for i, v in enumerate(value)]
        if container is collections.abc.Sequence or container is list:
            return items
        return container(items)
    if tp is dict or origin in (dict, collections.abc.Mapping):
        if not isinstance(value, dict):
            return fail("an object")
        item = args[1] if len(args) == 2 else Any
        return {k: convert(v, item, f"{path}.{k}") for k, v in value.items()}
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        if not isinstance(value, dict):
            return fail(f"an object ({tp.__name__})")
        hints = typing.get_type_hints(tp, include_extras=True)
        kwargs = {}
        for f in dataclasses.fields(tp):
            if not f.init:
                continue
            if f.name in value:
                kwargs[f.name] = convert(value[f.name], hints.get(f.name, Any), f"{path}.{f.name}")
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise _Invalid(f"{path}.{f.name}", "missing (required)")
        return tp(**kwargs)
    if _is_typeddict(tp):
        if not isinstance(value, dict):
            return fail(f"an object ({tp.__name__})")
        hints = typing.get_type_hints(tp, include_extras=True)
        out = {}
        for key, annotation in hints.items():
            if key in value:
                out[key] = convert(value[key], annotation, f"{path}.{key}")
            elif key in tp.__required_keys__:
                raise _Invalid(f"{path}.{key}", "missing (required)")
        return out
    # A type panto cannot check itself (its schema was given, not derived): as it came.
    return value


def _pydantic_validator(pydantic: Any, annotation: Any) -> Optional[Callable[[Any], Any]]:
    """A pydantic TypeAdapter's lax validation of ``annotation``, its failures as
    ``_Invalid``; ``None`` if pydantic cannot build one (panto's own then)."""
    try:
        adapter = pydantic.TypeAdapter(annotation)
    except Exception:  # noqa: BLE001 - pydantic's schema error: panto's own conversion
        return None
    validation_error = pydantic.ValidationError

    def validate(value: Any) -> Any:
        try:
            return adapter.validate_python(value)
        except validation_error as e:
            problems = []
            for err in e.errors(include_url=False):
                where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err.get("loc", ()))
                problems.append(_Invalid(where, f"{err.get('msg', 'invalid')} (got {_show(err.get('input'))})"))
            raise _InvalidMany(problems) from None

    return validate


class _InvalidMany(Exception):
    def __init__(self, problems: List[_Invalid]) -> None:
        super().__init__(problems)
        self.problems = problems


class Parameters:
    """How one function's parameters take the model's arguments: which exist, which are
    required, and each one's validator (made on first use)."""

    def __init__(self, fn: Callable[..., Any], hints: Mapping[str, Any]) -> None:
        sig = inspect.signature(fn)
        self.annotations: Dict[str, Any] = {}
        self.defaults: Dict[str, Any] = {}
        self.required: List[str] = []
        self.var_keyword = False
        for p in sig.parameters.values():
            if p.kind is p.VAR_KEYWORD:
                self.var_keyword = True
                continue
            if p.kind in (p.VAR_POSITIONAL, p.POSITIONAL_ONLY):
                continue
            self.annotations[p.name] = hints.get(p.name, p.annotation)
            if p.default is p.empty:
                self.required.append(p.name)
            else:
                self.defaults[p.name] = p.default
        self._validators: Optional[Dict[str, Callable[[Any], Any]]] = None

    def _make_validators(self) -> Dict[str, Callable[[Any], Any]]:
        pydantic = pydantic_module()
        validators: Dict[str, Callable[[Any], Any]] = {}
        for name, annotation in self.annotations.items():
            if annotation is inspect.Parameter.empty or annotation is Any:
                continue
            check = _pydantic_validator(pydantic, annotation) if pydantic is not None else None
            if check is None:
                check = _plain_validator(annotation)
            validators[name] = check
        return validators

    def _accepts_none(self, name: str) -> bool:
        annotation = self.annotations.get(name, Any)
        if typing.get_origin(annotation) is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
        if annotation in (Any, inspect.Parameter.empty, None, _NoneType):
            return True
        return _is_union(typing.get_origin(annotation)) and _NoneType in typing.get_args(annotation)

    def arguments(self, arguments: Any) -> Dict[str, Any]:
        """The model's JSON arguments as the function's keyword arguments, converted;
        ``ArgumentError`` naming every argument that does not fit."""
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            raise ArgumentError(f"the arguments are {_show(arguments)}, not a JSON object")
        if self._validators is None:
            self._validators = self._make_validators()
        validators = self._validators
        out: Dict[str, Any] = {}
        problems: List[str] = []
        for name, value in arguments.items():
            if name not in self.annotations:
                if self.var_keyword:
                    out[name] = value
                else:
                    known = ", ".join(self.annotations) or "none"
                    problems.append(f"{name}: not a parameter of this tool (its parameters: {known})")
                continue
            if value is None and name in self.defaults and not self._accepts_none(name):
                continue  # null for an optional parameter: its default
            check = validators.get(name)
            if check is None:
                out[name] = value
                continue
            try:
                out[name] = check(value)
            except _Invalid as e:
                problems.append(f"{name}{e.path}: {e.problem}")
            except _InvalidMany as e:
                problems.extend(f"{name}{p.path}: {p.problem}" for p in e.problems)
        problems.extend(f"{name}: missing (required)" for name in self.required if name not in arguments)
        if problems:
            raise ArgumentError("invalid arguments: " + "; ".join(problems))
        return out


def _plain_validator(annotation: Any) -> Callable[[Any], Any]:
    def validate(value: Any) -> Any:
        return convert(value, annotation)

    return validate
