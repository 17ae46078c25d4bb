"""Checks the hand-written C header (capi/include/panto.h) against the vocabulary.

The header is the C user's manual and stays hand-written; this is its drift check
against the core's description (scripts/check-header.sh checks it against the Rust
crate's layout and symbols). It compares names and values:

- every event has `PANTO_EV_<NAME>` equal to its code, a `Panto<Variant>` struct
  that carries each of its fields by name, and an arm `<name>` in PantoEventPayload;
  every `PANTO_EV_*` of the header (but NONE and ERROR) is an event of the description;
- every error kind has `PANTO_ERR_<NAME>` equal to its code, and the header has no other;
- `PANTO_BLOCK_*`, `PANTO_DELTA_*` and `PANTO_CONTENT_*` are the 1-based positions of
  values of block_kind, delta_kind and content_type;
- `PantoUsage` has exactly the fields of the usage record;
- the Ownership paragraph names every `panto_*_free` function the header declares
  (the list of what the caller frees with what), and only those.
"""
import os
import re

HEADER = "capi/include/panto.h"
class Header:
    """The one reader of panto.h for the generators: structs (member -> C type and the
    first line of its comment, in order), #define'd integer constants, and the arms of
    PantoEventPayload. golang.py reads the C members through it; check() below compares
    it with the description."""

    def __init__(self, text):
        self.text = text
        self.defines = {}
        for m in re.finditer(r"^#define\s+(PANTO_\w+)\s+(\d+)\b", text, re.M):
            self.defines[m.group(1)] = int(m.group(2))
        self.structs = {}
        for m in re.finditer(r"typedef struct (\w+) \{(.*?)\} (\w+);", text, re.S):
            members = {}
            for line in m.group(2).split("\n"):
                d = re.match(r"\s*(?:const\s+)?([\w ]*?\w)\s*(\*?)\s*(\w+)\s*(\[\d+\])?\s*;\s*(?:/\*(.*?)(?:\*/|$))?",
                             line)
                if d:
                    ctype = d.group(1) + (" *" if d.group(2) else "") + (d.group(4) or "")
                    members[d.group(3)] = (ctype, (d.group(5) or "").strip())
            self.structs[m.group(3)] = members
        union = re.search(r"typedef union PantoEventPayload \{(.*?)\} PantoEventPayload;", text, re.S)
        self.arms = re.findall(r"\b(\w+)(?:\[\d+\])?;", re.sub(r"/\*.*?\*/", "", union.group(1), flags=re.S)) if union else []

    def enum_codes(self, prefix):
        return {v: k[len(prefix):].lower() for k, v in self.defines.items() if k.startswith(prefix)}

    def fields(self, struct):
        """A struct's member names in order, reserved padding left out (None if absent)."""
        if struct not in self.structs:
            return None
        return [name for name in self.structs[struct] if not name.startswith("_")]


def check(vocab, root):
    path = os.path.join(root, HEADER)
    with open(path, encoding="utf-8") as f:
        h = Header(f.read())
    constants, arms = h.defines, h.arms
    structs = {name: h.fields(name) for name in h.structs}
    problems = []

    def say(msg):
        problems.append(f"{HEADER}: {msg}")

    events = {e["name"]: e for e in vocab["events"]}
    for e in vocab["events"]:
        macro = "PANTO_EV_" + e["name"].upper()
        if constants.get(macro) != e["code"]:
            say(f"event {e['name']}: {macro} is {constants.get(macro)}, the description says {e['code']}")
        struct = "Panto" + e["variant"]
        if struct not in structs:
            say(f"event {e['name']}: no struct {struct}")
        else:
            for field in e["fields"]:
                if field["name"] not in structs[struct]:
                    say(f"event {e['name']}: {struct} has no field {field['name']}")
        if e["name"] not in arms:
            say(f"event {e['name']}: PantoEventPayload has no arm {e['name']}")
    for macro, value in constants.items():
        if macro.startswith("PANTO_EV_") and macro not in ("PANTO_EV_NONE", "PANTO_EV_ERROR"):
            name = macro[len("PANTO_EV_"):].lower()
            if name not in events:
                say(f"{macro} = {value} is not an event of the description")

    kinds = {k["name"]: k for k in vocab["error_kinds"]}
    for k in vocab["error_kinds"]:
        macro = "PANTO_ERR_" + k["name"].upper()
        if constants.get(macro) != k["code"]:
            say(f"error kind {k['name']}: {macro} is {constants.get(macro)}, the description says {k['code']}")
    for macro, value in constants.items():
        if macro.startswith("PANTO_ERR_") and macro[len("PANTO_ERR_"):].lower() not in kinds:
            say(f"{macro} = {value} is not an error kind of the description")

    enums = {e["name"]: e for e in vocab["enums"]}
    for prefix, enum in (("PANTO_BLOCK_", "block_kind"), ("PANTO_DELTA_", "delta_kind"),
                         ("PANTO_CONTENT_", "content_type")):
        values = [v["name"] for v in enums[enum]["values"]]
        for macro, value in constants.items():
            if not macro.startswith(prefix):
                continue
            name = macro[len(prefix):].lower()
            if name not in values:
                say(f"{macro} is not a value of {enum}")
            elif values.index(name) + 1 != value:
                say(f"{macro} is {value}, but {name} is value {values.index(name) + 1} of {enum}")
        if enum != "content_type":
            for i, name in enumerate(values):
                if constants.get(prefix + name.upper()) != i + 1:
                    say(f"{enum} {name}: no {prefix}{name.upper()} = {i + 1}")

    declared = set(re.findall(r"^PANTO_API\s+void\s+(panto_\w+_free)\s*\(", h.text, re.M))
    ownership = re.search(r"^ \* Ownership\.(.*?)^ \*$", h.text, re.M | re.S)
    if ownership is None:
        say("no Ownership paragraph in the opening comment")
    else:
        named = set(re.findall(r"\bpanto_\w+_free\b", ownership.group(1)))
        for name in sorted(declared - named):
            say(f"the Ownership paragraph does not name {name}")
        for name in sorted(named - declared):
            say(f"the Ownership paragraph names {name}, which the header does not declare")

    usage = next(r for r in vocab["records"] if r["name"] == "usage")
    if structs.get("PantoUsage") != [f["name"] for f in usage["fields"]]:
        say(f"PantoUsage has {structs.get('PantoUsage')}, the usage record {[f['name'] for f in usage['fields']]}")
    return problems
