#!/usr/bin/env python3
"""Renders every file derived from panto's vocabulary description, or checks them.

    gen.py VOCAB.json               write the generated files
    gen.py VOCAB.json --check       exit 1 naming every stale file, and every place the
                                    hand-written C header disagrees with the description
    gen.py VOCAB.json --self-test   the generators' own test (below)
    --root DIR                      the repository to read and write (default: this one)

VOCAB.json is what the panto-gen binary prints (`panto::vocab::describe()`); its shape
is documented in DESIGN.md, "One vocabulary". Each sibling module named in RENDERERS
exposes `render(vocab) -> {repo-relative path: full text}` (a module that rewrites a
marked part of a hand-written file may take `render(vocab, root)` and read it);
`header.check(vocab, root)` returns the C header's disagreements as strings.

The self-test checks that the machinery can fail: (1) a hand edit to any generated file
makes --check fail naming that file; (2) a field added to an event and a key added to
the configuration in a copy of the description reach every binding's rendered output
(each renderer may add its own precise test as `selftest(vocab, rendered) -> [problems]`);
(3) a changed code in the description makes the header check fail; (4) a free function
left out of the header's Ownership list makes it fail.
"""
import copy
import importlib
import inspect
import json
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
REPO = os.path.dirname(os.path.dirname(HERE))

# Renderers, in order; a missing module is skipped (it is added by its own change).
RENDERERS = ["golang", "python", "docs"]


def renderers():
    mods = []
    for name in RENDERERS:
        if os.path.exists(os.path.join(HERE, name + ".py")):
            mods.append(importlib.import_module(name))
    return mods


def render_all(vocab, root):
    out = {}
    for mod in renderers():
        params = inspect.signature(mod.render).parameters
        files = mod.render(vocab, root) if len(params) >= 2 else mod.render(vocab)
        for path, text in files.items():
            if path in out:
                raise SystemExit(f"gen.py: {path} is rendered twice ({mod.__name__})")
            out[path] = text
    return out


def stale(files, root):
    bad = []
    for path, text in sorted(files.items()):
        full = os.path.join(root, path)
        try:
            with open(full, encoding="utf-8", newline="") as f:
                if f.read() == text:
                    continue
        except FileNotFoundError:
            pass
        bad.append(path)
    return bad


def header_problems(vocab, root):
    import header

    return header.check(vocab, root)


def write(files, root):
    for path, text in sorted(files.items()):
        full = os.path.join(root, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        try:
            with open(full, encoding="utf-8", newline="") as f:
                if f.read() == text:
                    continue
        except FileNotFoundError:
            pass
        with open(full, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        print(f"gen: wrote {path}")


def check(vocab, root):
    files = render_all(vocab, root)
    problems = [f"{p}: stale (run scripts/gen.sh)" for p in stale(files, root)]
    problems += header_problems(vocab, root)
    return problems


def self_test(vocab):
    failures = []
    scratch = tempfile.mkdtemp(prefix="panto-gen-selftest-")
    try:
        # A scratch copy of everything the generators read or write.
        files = render_all(vocab, REPO)
        needed = set(files) | {"capi/include/panto.h", "DESIGN.md", "docs/configuration.md", "docs/errors.md"}
        for path in needed:
            src = os.path.join(REPO, path)
            dst = os.path.join(scratch, path)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            if os.path.exists(src):
                shutil.copyfile(src, dst)
        write(files, scratch)
        if check(vocab, scratch):
            failures.append(f"a fresh scratch copy does not pass: {check(vocab, scratch)}")
        # 1. A hand edit to any generated file is caught and named.
        for path in sorted(files):
            full = os.path.join(scratch, path)
            with open(full, encoding="utf-8", newline="") as f:
                original = f.read()
            with open(full, "w", encoding="utf-8", newline="") as f:
                f.write(hand_edit(original))
            found = check(vocab, scratch)
            if not any(p.startswith(path + ":") for p in found):
                failures.append(f"a hand edit to {path} was not caught")
            with open(full, "w", encoding="utf-8", newline="") as f:
                f.write(original)
        # 2. A field and a config key added in the description reach every binding.
        grown = copy.deepcopy(vocab)
        event = next(e for e in grown["events"] if e["name"] == "tool_result")
        event["fields"].append({"name": "selftest_field", "type": "string", "optional": True,
                                "doc": "Added by the generator self-test."})
        grown["config"].append({"name": "selftest_key", "type": "u64", "default": None,
                                "doc": "Added by the generator self-test."})
        rendered = render_all(grown, scratch)
        for mod in renderers():
            if mod.__name__ not in ("golang", "python"):
                continue
            own = {p: t for p, t in rendered.items() if p in mod_paths(mod, vocab, scratch)}
            text = "\n".join(own.values())
            for spelling in spellings(mod.__name__):
                if spelling not in text:
                    failures.append(f"{mod.__name__}: {spelling!r} missing after adding a field and a key")
            if hasattr(mod, "selftest"):
                failures += [f"{mod.__name__}: {p}" for p in mod.selftest(grown, rendered)]
        # 3. The header check catches a code that differs from the description.
        moved = copy.deepcopy(vocab)
        moved["events"][0]["code"] += 100
        moved["error_kinds"][0]["code"] += 100
        found = header_problems(moved, scratch)
        for want in (moved["events"][0]["name"], moved["error_kinds"][0]["name"]):
            if not any(want in p for p in found):
                failures.append(f"header check missed a changed code of {want}")
        # 4. The header check catches a free function left out of the Ownership list.
        header_path = os.path.join(scratch, "capi/include/panto.h")
        with open(header_path, encoding="utf-8") as f:
            header_text = f.read()
        dropped = header_text.replace(", panto_ready_set_free);", ");", 1)
        if dropped == header_text:
            failures.append("self-test: the Ownership list no longer ends with panto_ready_set_free")
        else:
            with open(header_path, "w", encoding="utf-8") as f:
                f.write(dropped)
            if not any("panto_ready_set_free" in p for p in header_problems(vocab, scratch)):
                failures.append("header check missed panto_ready_set_free left out of the Ownership list")
            with open(header_path, "w", encoding="utf-8") as f:
                f.write(header_text)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return failures


def hand_edit(text):
    """The text with one line added inside its generated part: after the line that
    says it is generated (a whole generated file's first line, or a part's marker)."""
    lines = text.split("\n")
    at = next((i for i, l in enumerate(lines) if "generated by scripts/gen.sh" in l), 0)
    lines.insert(at + 1, "a hand edit")
    return "\n".join(lines)


def mod_paths(mod, vocab, root):
    params = inspect.signature(mod.render).parameters
    return set(mod.render(vocab, root) if len(params) >= 2 else mod.render(vocab))


def spellings(lang):
    """How the self-test's new field and key must appear in each binding's output."""
    if lang == "golang":
        return ["SelftestField", 'json:"selftest_field', "SelftestKey"]
    return ["selftest_field", "selftest_key"]


def main(argv):
    args = list(argv)
    root = REPO
    if "--root" in args:
        i = args.index("--root")
        root = os.path.abspath(args[i + 1])
        del args[i : i + 2]
    mode = "write"
    for flag in ("--check", "--self-test"):
        if flag in args:
            mode = flag
            args.remove(flag)
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    with open(args[0], encoding="utf-8") as f:
        vocab = json.load(f)
    if mode == "--check":
        problems = check(vocab, root)
        for p in problems:
            print(f"gen --check: {p}", file=sys.stderr)
        return 1 if problems else 0
    if mode == "--self-test":
        failures = self_test(vocab)
        for f in failures:
            print(f"gen --self-test: {f}", file=sys.stderr)
        if not failures:
            print("gen --self-test: ok")
        return 1 if failures else 0
    write(render_all(vocab, root), root)
    problems = header_problems(vocab, root)
    for p in problems:
        print(f"gen: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
