"""Self-test of the Python package's generation (scripts/gen/python.py).

Issue 19's test, for Python: a field added to one event and a key added to the
configuration in the core's description alone must reach what Python users see — the
event's attribute (the native class, its dict form, its stub, the conformance runner's
field list) and ``Agent``'s typed keyword argument — with no other edit. Likewise a new
event, a new error kind and a new nested configuration key. The changes are made to a
scratch copy of the description; nothing in the tree is written.

It also checks the rule the generation exists for: no hand-written, non-test file of
``pypanto/`` lists the event types or the error kinds (half of either or more, as quoted
snake_case names or class names, in one file are a list).

    python3 scripts/gen/selftest_python.py VOCAB_JSON      # exit 0 when every check holds

``scripts/gen.sh --self-test`` runs these checks too (``gen.py`` calls
``python.selftest``, which calls ``run`` here); VOCAB_JSON is what ``panto-gen`` printed
(``$CARGO_TARGET_DIR/vocab.json`` after ``scripts/gen.sh``).
"""

from __future__ import annotations

import ast
import copy
import json
import os
import re
import sys
from typing import Any, Dict, List, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import python as gen  # noqa: E402  (scripts/gen/python.py, beside this file)

# Names of the additions (gen.py's own self-test adds `selftest_field` / `selftest_key`
# to the description it hands to python.selftest, so these differ).
FIELD = "py_selftest_field"
KEY = "py_selftest_key"
NESTED = "py_selftest_nested"
EVENT = "py_selftest_event"
KIND = "py_selftest_kind"

failures: List[str] = []
verbose = False


def check(ok: bool, what: str) -> None:
    if verbose:
        print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def patched(vocab: Dict[str, Any]) -> Tuple[Dict[str, Any], str, Dict[str, Any]]:
    """The description with the additions; the changed event's class and the object key
    that got a nested key."""
    v = copy.deepcopy(vocab)
    target = next(ev for ev in v["events"] if ev["name"] == "tool_result")
    target["fields"].append({"name": FIELD, "type": "u32", "optional": False, "doc": "Added by the self-test."})
    v["config"].append({"name": KEY, "type": "u32", "default": 7, "min": 1, "doc": "Added by the self-test."})
    obj = next(k for k in v["config"] if k["type"] == "object")
    obj["keys"].append({"name": NESTED, "type": "bool", "default": False, "doc": "Added by the self-test."})
    code = max(ev["code"] for ev in v["events"]) + 1
    v["events"].append(
        {
            "name": EVENT,
            "variant": gen.camel(EVENT),
            "code": code,
            "terminal": False,
            "doc": "Added by the self-test.",
            "fields": [{"name": "message", "type": "u32", "optional": False, "doc": "The message."}],
        }
    )
    v["error_kinds"].append({"name": KIND, "code": len(v["error_kinds"]) + 1, "doc": "Added by the self-test."})
    return v, target["variant"], obj


def class_node(tree: ast.Module, name: str) -> ast.ClassDef:
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    raise KeyError(name)


def annotated_names(cls: ast.ClassDef) -> List[str]:
    return [n.target.id for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)]


def properties(cls: ast.ClassDef) -> List[str]:
    return [
        n.name
        for n in cls.body
        if isinstance(n, ast.FunctionDef) and any(isinstance(d, ast.Name) and d.id == "property" for d in n.decorator_list)
    ]


def literal(tree: ast.Module, name: str) -> Any:
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            return ast.literal_eval(node.value)
    raise KeyError(name)


def rust_struct(rs: str, name: str) -> str:
    m = re.search(r"pub struct " + name + r" \{(.*?)\n\}", rs, re.S)
    return m.group(1) if m else ""


def test_additions(vocab: Dict[str, Any]) -> None:
    v, variant, obj = patched(vocab)
    base = gen.render(vocab)
    files = gen.render(v)
    rs, py, pyi = files[gen.EVENTS_RS], files[gen.VOCAB_PY], files[gen.NATIVE_PYI]
    py_tree, pyi_tree = ast.parse(py), ast.parse(pyi)

    # -- a field added to one event ---------------------------------------------------------
    check(FIELD not in base[gen.EVENTS_RS], f"before the change, {variant} has no {FIELD}")
    check(f"{FIELD}: u32" in rust_struct(rs, variant), f"the native {variant} holds {FIELD}")
    check(
        re.search(r"#\[pyo3\(get\)\]\n\s+" + FIELD + ": u32", rust_struct(rs, variant)) is not None,
        f"the native {variant} has the attribute {FIELD}",
    )
    check(
        re.search(r"Event::" + variant + r" \{[^}]*\b" + FIELD + r"\b[^}]*\} =>", rs) is not None,
        f"to_py moves the core's {FIELD} into {variant}",
    )
    check(f'd.set_item(intern!(py, "{FIELD}")' in rs, f"{variant}.to_dict() holds {FIELD}")
    check(f"self.{FIELD} == o.{FIELD}" in rs, f"{variant} == compares {FIELD}")
    check(f"{FIELD}: self.{FIELD}.clone()" in rs, f"{variant}.to_json() passes {FIELD} to the core")
    check(FIELD in properties(class_node(pyi_tree, variant)), f"the stub of {variant} has the property {FIELD}")
    fields = literal(py_tree, "EVENT_FIELDS")
    target = next(ev for ev in v["events"] if ev["variant"] == variant)
    check((FIELD, "u32", False) in fields[target["name"]], f"EVENT_FIELDS (the conformance runner's list) has {FIELD}")

    # -- a key added to the configuration (top level and nested) -------------------------------
    check(KEY in annotated_names(class_node(py_tree, "AgentOptions")), f"Agent takes the typed keyword argument {KEY}")
    check(KEY in literal(py_tree, "CONFIG_KEYS"), f"CONFIG_KEYS has {KEY}")
    nested_cls = gen.camel(obj["name"]) + "Options"
    check(NESTED in annotated_names(class_node(py_tree, nested_cls)), f"{nested_cls} has {NESTED}")
    check(KEY not in base[gen.VOCAB_PY], f"before the change, no {KEY}")

    # -- a new event and a new error kind -----------------------------------------------------
    ev_cls = gen.camel(EVENT)
    check(f"pub struct {ev_cls} {{" in rs and f"m.add_class::<{ev_cls}>()" in rs, f"the native module has {ev_cls}")
    check(f"Event::{ev_cls} {{ message }} =>" in rs, f"to_py makes a {ev_cls}")
    check(f'"{EVENT}": {ev_cls},' in py, f"EVENT_CLASSES has {EVENT}")
    check(has_class(pyi_tree, ev_cls), f"the stub declares {ev_cls}")
    err_cls = gen.error_class_name(KIND)
    err_node = class_node(py_tree, err_cls)
    check(any(isinstance(b, ast.Name) and b.id == "PantoError" for b in err_node.bases), f"{err_cls} is a PantoError")
    check(f'"{KIND}": {err_cls},' in py, f"ERROR_CLASSES has {KIND}")
    exported = next(
        ast.literal_eval(n.value)
        for n in py_tree.body
        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in n.targets)
    )
    check({ev_cls, err_cls, "AgentOptions"} <= set(exported), "panto re-exports the new classes (_vocab.__all__)")

    # -- everything, old and new, is there ---------------------------------------------------------
    for problem in check_rendered(vocab, base) + check_rendered(v, files):
        check(False, problem)
    check(True, "the whole description, before and after the change, is in the rendered files")

    # -- everything rendered is valid --------------------------------------------------------------
    for path in (gen.VOCAB_PY, gen.NATIVE_PYI):
        try:
            compile(files[path], path, "exec")
            check(True, f"{path} compiles")
        except SyntaxError as e:
            check(False, f"{path} compiles ({e})")
    check(rs.count("{") == rs.count("}"), f"{gen.EVENTS_RS} has balanced braces")


def has_class(tree: ast.Module, name: str) -> bool:
    try:
        class_node(tree, name)
        return True
    except KeyError:
        return False


def check_rendered(vocab: Dict[str, Any], rendered: Dict[str, str]) -> List[str]:
    """Every event with all its fields, every record, error kind and configuration key
    of ``vocab`` is in python.py's files of ``rendered``, in the description's order;
    the problems found (empty when all is there)."""
    problems: List[str] = []
    rs, py, pyi = rendered[gen.EVENTS_RS], rendered[gen.VOCAB_PY], rendered[gen.NATIVE_PYI]
    try:
        py_tree, pyi_tree = ast.parse(py), ast.parse(pyi)
    except SyntaxError as e:
        return [f"a rendered Python file does not parse: {e}"]
    event_fields = literal(py_tree, "EVENT_FIELDS")
    for ev in vocab["events"]:
        name, cls, fields = ev["name"], ev["variant"], ev["fields"]
        names = [f["name"] for f in fields]
        struct = rust_struct(rs, cls)
        missing = [n for n in names if not re.search(r"\n\s+" + n + r": ", "\n" + struct)]
        if not struct or missing:
            problems.append(f"{gen.EVENTS_RS}: the class {cls} lacks {missing or 'its struct'}")
        if f"Event::{cls} {{ {', '.join(names)} }} =>" not in rs:
            problems.append(f"{gen.EVENTS_RS}: to_py does not move {names} into {cls}")
        for n in names:
            if not re.search(r"impl " + cls + r" \{.*?fn to_dict.*?intern!\(py, \"" + n + r"\"\)", rs, re.S):
                problems.append(f"{gen.EVENTS_RS}: {cls}.to_dict() lacks {n}")
        if f"m.add_class::<{cls}>()" not in rs:
            problems.append(f"{gen.EVENTS_RS}: {cls} is not registered")
        if not has_class(pyi_tree, cls) or properties(class_node(pyi_tree, cls)) != names:
            problems.append(f"{gen.NATIVE_PYI}: the stub of {cls} does not have the properties {names}")
        want = tuple((f["name"], f["type"], bool(f.get("optional"))) for f in fields)
        if event_fields.get(name) != want:
            problems.append(f"{gen.VOCAB_PY}: EVENT_FIELDS[{name!r}] is not {want}")
        if f"{gen.py_str(name)}: {cls}," not in py:
            problems.append(f"{gen.VOCAB_PY}: EVENT_CLASSES lacks {name}")
    for kind in vocab["error_kinds"]:
        cls = gen.error_class_name(kind["name"])
        if not has_class(py_tree, cls) or f"kind = {gen.py_str(kind['name'])}" not in py:
            problems.append(f"{gen.VOCAB_PY}: no exception class {cls} for the kind {kind['name']}")
        if f"{gen.py_str(kind['name'])}: {cls}," not in py:
            problems.append(f"{gen.VOCAB_PY}: ERROR_CLASSES lacks {kind['name']}")
    if list(literal(py_tree, "CONFIG_KEYS")) != [k["name"] for k in vocab["config"]]:
        problems.append(f"{gen.VOCAB_PY}: CONFIG_KEYS is not the description's keys")
    want_options = [k["name"] for k in vocab["config"] if k["name"] not in gen.AGENT_PARAMETERS]
    if not has_class(py_tree, "AgentOptions") or annotated_names(class_node(py_tree, "AgentOptions")) != want_options:
        problems.append(f"{gen.VOCAB_PY}: AgentOptions does not have the keys {want_options}")
    for key in vocab["config"]:
        if key["type"] == "object" and key["name"] not in gen.AGENT_PARAMETERS:
            cls = gen.camel(key["name"]) + "Options"
            want = [k["name"] for k in key["keys"]]
            if not has_class(py_tree, cls) or annotated_names(class_node(py_tree, cls)) != want:
                problems.append(f"{gen.VOCAB_PY}: {cls} does not have the keys {want}")
    return problems


def test_no_hand_written_lists(vocab: Dict[str, Any]) -> None:
    """No hand-written, non-test file of pypanto/ lists the events or the error kinds."""
    events = {ev["name"] for ev in vocab["events"]}
    event_classes = {ev["variant"] for ev in vocab["events"]}
    kinds = {k["name"] for k in vocab["error_kinds"]}
    error_classes = {gen.error_class_name(k["name"]) for k in vocab["error_kinds"]}
    generated = {gen.EVENTS_RS, gen.VOCAB_PY}
    pypanto = os.path.join(gen.ROOT, "pypanto")
    for root, dirs, names in os.walk(pypanto):
        dirs[:] = [d for d in dirs if d not in ("tests", "__pycache__", "target")]
        for name in names:
            path = os.path.join(root, name)
            rel = os.path.relpath(path, gen.ROOT)
            if rel in generated or not name.endswith((".rs", ".py", ".pyi")):
                continue
            with open(path, encoding="utf-8") as f:
                text = f.read()
            if rel == gen.NATIVE_PYI:
                text = text[: text.find(gen.PYI_BEGIN)] + text[text.find(gen.PYI_END) :]
            quoted = set(re.findall(r"[\"'`]([a-z_]+)[\"'`]", text))
            words = set(re.findall(r"\b[A-Z][A-Za-z]+\b", text))
            ev = (quoted & events) | (words & event_classes)
            er = (quoted & kinds) | (words & error_classes)
            # A list names most of them; a file naming a few (the terminal event, the
            # config error it raises) is using them, not listing them.
            ev_list, er_list = len(ev) >= max(4, len(events) // 2), len(er) >= max(4, len(kinds) // 2)
            check(not ev_list, f"{rel} lists no event types" + (f" (it names {sorted(ev)})" if ev_list else ""))
            check(not er_list, f"{rel} lists no error kinds" + (f" (it names {sorted(er)})" if er_list else ""))


def run(vocab: Dict[str, Any]) -> List[str]:
    """Every check of this file on ``vocab``; the failures (python.selftest, which
    gen.py --self-test calls, returns them too)."""
    del failures[:]
    test_additions(vocab)
    test_no_hand_written_lists(vocab)
    return list(failures)


def main() -> int:
    global verbose
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[-3], file=sys.stderr)
        return 2
    with open(sys.argv[1], encoding="utf-8") as f:
        vocab = json.load(f)
    verbose = True
    run(vocab)
    if failures:
        print(f"\nselftest_python: {len(failures)} check(s) failed", file=sys.stderr)
        return 1
    print("selftest_python: the description alone reaches the Python package")
    return 0


if __name__ == "__main__":
    sys.exit(main())
