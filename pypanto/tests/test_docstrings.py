"""Every public name of ``panto`` has a docstring, so that ``help(panto.Agent)`` (and
``help`` on any other name ``panto.__all__`` lists) is a manual: the name itself, and for
a class every public method, property and field it defines, and the special methods a
caller uses directly (``__init__``, ``__enter__``, ``__iter__``, …). A name added without
one fails here, naming it.
"""

import inspect
import pydoc

import panto

# Special methods a caller uses by name or by syntax: each is part of the manual.
USED_DUNDERS = {
    "__init__",
    "__call__",
    "__enter__",
    "__exit__",
    "__aenter__",
    "__aexit__",
    "__iter__",
    "__next__",
    "__aiter__",
    "__anext__",
    "__await__",
}


def own_doc(obj):
    """The object's docstring, or "" when it has none of its own (only its type's). A
    ``__slots__`` field's is the value of a dict ``__slots__`` (what ``help`` shows)."""
    if inspect.ismemberdescriptor(obj):
        return (inspect.getdoc(obj) or "").strip()
    doc = getattr(obj, "__doc__", None) or ""
    if not inspect.isclass(obj) and not callable(obj) and doc == (type(obj).__doc__ or ""):
        return ""
    return doc.strip()


def members(cls):
    """(name, object) of what the class defines itself that a caller sees."""
    for name, value in vars(cls).items():
        if name.startswith("_") and name not in USED_DUNDERS:
            continue
        if isinstance(value, (staticmethod, classmethod)):
            value = value.__func__
        if inspect.isfunction(value) or inspect.isbuiltin(value) or inspect.ismethoddescriptor(value):
            yield name, value
        elif isinstance(value, property) or inspect.isgetsetdescriptor(value):
            yield name, value
        elif inspect.ismemberdescriptor(value):
            yield name, value


def is_data(obj):
    """A table (a dict, a tuple…), which cannot carry a docstring of its own: the
    package's docstring (``help(panto)``) describes it by name instead."""
    return isinstance(obj, (dict, list, tuple, frozenset, set, str, int))


def missing():
    out = []
    for name in panto.__all__:
        obj = getattr(panto, name)
        if is_data(obj):
            if f"``{name}``" not in (panto.__doc__ or ""):
                out.append(f"panto.{name} (a table: describe it in the package's docstring)")
            continue
        if not own_doc(obj):
            out.append(f"panto.{name}")
        if not inspect.isclass(obj) or not obj.__module__.startswith("panto"):
            continue
        for member, value in members(obj):
            if not own_doc(value):
                out.append(f"panto.{name}.{member}")
    return out


def test_every_public_name_has_a_docstring():
    assert missing() == []


def test_the_walk_finds_what_it_checks():
    # The walk sees methods, properties, native fields and the special methods a caller
    # uses, so an undocumented one of each kind would be reported.
    seen = {(n, m) for n in ("Agent", "Stream", "ContentDelta") for m, _ in members(getattr(panto, n))}
    assert ("Agent", "__init__") in seen
    assert ("Agent", "stream") in seen
    assert ("Stream", "__enter__") in seen
    assert ("Stream", "cancel") in seen
    assert ("ContentDelta", "text") in seen

    class Undocumented:
        __slots__ = ("field",)

        def method(self):
            pass

        @property
        def prop(self):
            return 1

    assert {m for m, v in members(Undocumented) if not own_doc(v)} == {"field", "method", "prop"}


def test_help_of_the_agent_is_a_manual():
    text = pydoc.render_doc(panto.Agent, renderer=pydoc.plaintext)
    for method in ("stream", "astream", "run", "arun", "compact", "transcript", "save_history", "close"):
        assert method in text
    assert "One stream at a time" in text
