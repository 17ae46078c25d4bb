#!/usr/bin/env python3
"""Checks the hand-written C header of panto against the Rust implementation.

The header (capi/include/panto.h) is the contract and is written by hand; cbindgen
generates a second header from the Rust crate into the build directory. This tool
compares the two *semantically* — what the C compiler would see, not how it is spelled:

  diff HAND GEN          function prototypes (every typedef resolved), the fields of
                         every struct and union in order with their types, the targets
                         of the Panto* typedefs, and the value of every PANTO_* constant.
                         A PANTO_* macro only in the hand header must be one of
                         HAND_ONLY_MACROS (helpers with no Rust counterpart).
  symbols HEADER LIB [MAP]
                         the panto_* functions the shared library exports (nm -D) are
                         exactly the functions the header declares; with MAP (the
                         linker version script, capi/panto.map), each is in the node of
                         the ABI version that introduced it (the header's "Since ABI
                         1.N", else 1.0), in the script and in the library.
  version HEADER TOML    PANTO_ABI_VERSION_MAJOR/MINOR equal the crate version's
                         major.minor.
  probe HEADER           prints a C program that prints sizeof, alignof and offsetof of
                         every struct and union field of the header (the Rust test
                         `layout_agrees_with_the_c_compiler` compares it with Rust).
  selftest HAND GEN LIB  mutates copies of the headers (a signature changed on one side,
                         a field reordered, a constant changed, …) and checks that each
                         mutation is caught, and that the unmutated pair passes.
  baseline OLD NEW       NEW is a compatible successor of the released header OLD
                         (baseline/panto.h): every function of OLD with the same
                         signature and the same "Since ABI" version node; every PANTO_*
                         constant with the same value (the minor version may grow, the
                         major may not change); every Panto* typedef with the same
                         target; every field of every struct and union with the same
                         name, type and offset (fields may be appended, and the space of
                         a _reserved* field taken), no struct smaller, the payload union
                         no larger. Offsets and sizes come from the C compiler.
  baseline-selftest OLD  breaks copies of OLD the ways the rules above forbid (a function
                         removed or changed, fields swapped, a field removed or retyped,
                         a constant changed, a function moved to another version node,
                         the payload union grown) and checks each is caught; and that the
                         ways they allow (a function and a constant added, a field
                         appended, a reserved field taken) pass.

Needs a C preprocessor (cc -E) and pycparser. Exit status 0 = agree, 1 = drift, 2 = usage.
"""
import atexit
import functools
import os
import re
import shutil
import subprocess
import sys
import tempfile

from pycparser import c_ast, c_generator, c_parser

HAND_ONLY_MACROS = {"PANTO_H", "PANTO_API", "PANTO_ABI_VERSION", "PANTO_EVENT_INIT"}

# Stand-ins for the system headers, so the parser sees only standard C. LP64 spellings;
# the comparison is between spellings after typedef resolution, and both headers go
# through the same stubs. (Real sizes are checked by the layout probe instead.)
STUBS = {
    "stdint.h": "typedef signed char int8_t; typedef short int16_t; typedef int int32_t;"
    " typedef long long int64_t; typedef unsigned char uint8_t;"
    " typedef unsigned short uint16_t; typedef unsigned int uint32_t;"
    " typedef unsigned long long uint64_t; typedef long intptr_t;"
    " typedef unsigned long uintptr_t;",
    "stddef.h": "typedef unsigned long size_t; typedef long ptrdiff_t;",
    "stdbool.h": "#define bool _Bool\n#define true 1\n#define false 0",
}


def cc():
    return os.environ.get("CC", "cc")


def scratch(prefix):
    """A temporary directory removed when the tool exits."""
    d = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, d, True)
    return d


@functools.lru_cache(maxsize=None)
def stub_dir():
    d = scratch("panto-abi-stubs-")
    for name, text in STUBS.items():
        with open(os.path.join(d, name), "w") as f:
            f.write(text + "\n")
    return d


def run(cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def preprocess(path, stubs):
    return run([cc(), "-E", "-P", "-nostdinc", "-I", stubs, "-x", "c", path])


def macros(path, stubs):
    """Object-like PANTO_* macros defined by the file itself -> value (int if integral)."""
    out = run([cc(), "-E", "-dM", "-nostdinc", "-I", stubs, "-x", "c", path])
    found = {}
    for line in out.splitlines():
        m = re.match(r"#define (PANTO_\w*)(\(?)(.*)$", line)
        if not m:
            continue
        name, paren, value = m.group(1), m.group(2), m.group(3).strip()
        if paren:
            found[name] = "<function-like>"
            continue
        try:
            found[name] = int(re.sub(r"[uUlL]+$", "", value), 0)
        except ValueError:
            found[name] = value
    return found


class Model:
    """The declarations of one preprocessed header."""

    def __init__(self, text):
        ast = c_parser.CParser().parse(text)
        self.typedefs, self.records, self.funcs = {}, {}, {}
        for ext in ast.ext:
            if isinstance(ext, c_ast.Typedef):
                self.typedefs[ext.name] = ext.type
                self._collect(ext.type)
            elif isinstance(ext, c_ast.Decl):
                if isinstance(ext.type, c_ast.FuncDecl):
                    self.funcs[ext.name] = ext.type
                else:
                    self._collect(ext.type)

    def _collect(self, t):
        while isinstance(t, (c_ast.TypeDecl, c_ast.PtrDecl, c_ast.ArrayDecl)):
            t = t.type
        if isinstance(t, (c_ast.Struct, c_ast.Union)) and t.decls is not None:
            kind = "struct" if isinstance(t, c_ast.Struct) else "union"
            self.records[f"{kind} {t.name}"] = t
            for d in t.decls:
                self._collect(d.type)

    def canon(self, t):
        """A type as text with every typedef resolved; records by tag."""
        if isinstance(t, c_ast.PtrDecl):
            q = " ".join(t.quals)
            return f"ptr{'[' + q + ']' if q else ''}({self.canon(t.type)})"
        if isinstance(t, c_ast.ArrayDecl):
            dim = c_generator.CGenerator().visit(t.dim) if t.dim is not None else ""
            return f"array[{dim}]({self.canon(t.type)})"
        if isinstance(t, c_ast.FuncDecl):
            params = []
            if t.args is not None:
                for p in t.args.params:
                    if isinstance(p, c_ast.EllipsisParam):
                        params.append("...")
                    else:
                        params.append(self.canon(p.type))
            if params == ["void"]:
                params = []
            return f"fn({', '.join(params)}) -> {self.canon(t.type)}"
        if isinstance(t, c_ast.TypeDecl):
            q = " ".join(sorted(t.quals))
            return f"{q} {self.canon(t.type)}".strip()
        if isinstance(t, c_ast.IdentifierType):
            name = " ".join(t.names)
            if name in self.typedefs:
                return self.canon(self.typedefs[name])
            return name
        if isinstance(t, c_ast.Struct):
            return f"struct {t.name}"
        if isinstance(t, c_ast.Union):
            return f"union {t.name}"
        if isinstance(t, c_ast.Enum):
            return f"enum {t.name}"
        raise TypeError(f"unexpected type node {type(t).__name__}")

    def fields(self, key):
        return [(d.name, self.canon(d.type)) for d in self.records[key].decls]


def compare(hand, gen):
    """Every difference between the hand header and the generated one, as text."""
    stubs = stub_dir()
    a, b = Model(preprocess(hand, stubs)), Model(preprocess(gen, stubs))
    errs = []
    for name in sorted(set(a.funcs) | set(b.funcs)):
        if name not in a.funcs:
            errs.append(f"function {name}: exported by Rust, missing from the header")
        elif name not in b.funcs:
            errs.append(f"function {name}: declared in the header, not exported by Rust")
        elif a.canon(a.funcs[name]) != b.canon(b.funcs[name]):
            errs.append(
                f"function {name} differs:\n    header: {a.canon(a.funcs[name])}\n"
                f"    rust:   {b.canon(b.funcs[name])}"
            )
    for key in sorted(set(a.records) | set(b.records)):
        if key not in a.records:
            errs.append(f"{key}: defined in Rust, missing from the header")
        elif key not in b.records:
            errs.append(f"{key}: defined in the header, not in Rust")
        elif a.fields(key) != b.fields(key):
            errs.append(
                f"{key} layout differs:\n    header: {a.fields(key)}\n"
                f"    rust:   {b.fields(key)}"
            )
    for name in sorted(n for n in set(a.typedefs) | set(b.typedefs) if n.startswith("Panto")):
        if name not in a.typedefs:
            errs.append(f"typedef {name}: in Rust only")
        elif name not in b.typedefs:
            errs.append(f"typedef {name}: in the header only")
        elif a.canon(a.typedefs[name]) != b.canon(b.typedefs[name]):
            errs.append(
                f"typedef {name}: header {a.canon(a.typedefs[name])}, rust {b.canon(b.typedefs[name])}"
            )
    ma = {k: v for k, v in macros(hand, stubs).items() if k not in HAND_ONLY_MACROS}
    mb = {k: v for k, v in macros(gen, stubs).items() if k != "PANTO_GENERATED_H"}
    for name in sorted(set(ma) | set(mb)):
        if name not in ma:
            errs.append(f"#define {name}: in Rust ({mb[name]!r}), missing from the header")
        elif name not in mb:
            errs.append(f"#define {name}: in the header ({ma[name]!r}), not in Rust")
        elif ma[name] != mb[name]:
            errs.append(f"#define {name}: header {ma[name]!r}, rust {mb[name]!r}")
    summary = f"{len(b.funcs)} functions, {len(b.records)} structs/unions, {len(mb)} constants"
    return errs, summary


def header_functions(header):
    return set(Model(preprocess(header, stub_dir())).funcs)


def exported_versions(lib):
    """panto_* function -> its symbol version ("" if unversioned)."""
    out = run(["nm", "-D", "--defined-only", lib])
    syms = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] == "T" and parts[2].startswith("panto_"):
            name, _, version = parts[2].partition("@")
            syms[name] = version.lstrip("@")
    return syms


def exported_symbols(lib):
    return set(exported_versions(lib))


def header_since(header):
    """Function -> "PANTO_1.N": the version the header says introduced it ("Since ABI
    1.N" in the comment right before its declaration), PANTO_1.0 otherwise."""
    with open(header) as f:
        text = f.read()
    since = {}
    for name in header_functions(header):
        m = re.search(r"^PANTO_API[^;]*?\b" + name + r"\s*\(", text, re.M)
        # The comment that documents it: the one that ends right before it.
        start = text.rfind("/*", 0, m.start())
        doc = text[start:m.start()] if text[text.rfind("*/", 0, m.start()):m.start()].strip() == "*/" else ""
        v = re.search(r"[Ss]ince ABI (\d+)\.(\d+)", doc)
        since[name] = f"PANTO_{v.group(1)}.{v.group(2)}" if v else "PANTO_1.0"
    return since


def map_nodes(path):
    """Function -> node of the linker version script."""
    with open(path) as f:
        text = re.sub(r"/\*.*?\*/", "", f.read(), flags=re.S)
    nodes = {}
    for node, body in re.findall(r"(PANTO_[\w.]+)\s*\{(.*?)\}", text, re.S):
        glob = body.split("local:")[0].replace("global:", "")
        for name in re.findall(r"(panto_\w+)\s*;", glob):
            nodes[name] = node
    return nodes


def compare_symbol_versions(header, versions, map_path):
    since, nodes = header_since(header), map_nodes(map_path)
    errs = []
    for f in sorted(since):
        want = since[f]
        if nodes.get(f) != want:
            errs.append(f"function {f}: the header says {want}, {map_path} has it in "
                        f"{nodes.get(f, 'no node')}")
        if versions.get(f) not in (None, want):
            errs.append(f"symbol {f}: exported as {f}@@{versions[f] or '(unversioned)'}, "
                        f"expected {f}@@{want}")
    for f in sorted(set(nodes) - set(since)):
        errs.append(f"{map_path}: {f} is not a function of the header")
    return errs, f"{len(versions)} symbols in {len(set(since.values()))} version nodes"


def compare_symbols(header, symbols):
    funcs = header_functions(header)
    errs = [f"symbol {s}: exported by the library, not declared in the header"
            for s in sorted(symbols - funcs)]
    errs += [f"function {f}: declared in the header, not exported by the library"
             for f in sorted(funcs - symbols)]
    return errs, f"{len(symbols)} exported panto_* symbols"


def compare_version(header, toml):
    with open(toml) as f:
        text = f.read()
    pkg = re.search(r"^\[package\]\s*$(.*?)(^\[|\Z)", text, re.S | re.M)
    m = re.search(r'^version\s*=\s*"(\d+)\.(\d+)\.(\d+)"', pkg.group(1) if pkg else "", re.M)
    if not m:
        return [f"{toml}: no literal [package] version"], ""
    want = {"PANTO_ABI_VERSION_MAJOR": int(m.group(1)), "PANTO_ABI_VERSION_MINOR": int(m.group(2))}
    got = macros(header, stub_dir())
    errs = [f"#define {k}: header {got.get(k)!r}, {toml} says {v}"
            for k, v in want.items() if got.get(k) != v]
    return errs, f"ABI version {m.group(1)}.{m.group(2)}"


def probe(header):
    """A C program printing the layout of every record of `header`."""
    model = Model(preprocess(header, stub_dir()))
    lines = [
        "#include <stdalign.h>",
        "#include <stddef.h>",
        "#include <stdio.h>",
        '#include "panto.h"',
        "int main(void) {",
    ]
    for key in sorted(model.records):
        name = key.split(" ", 1)[1]
        lines.append(
            f'  printf("{name} size %zu align %zu\\n", sizeof({key}), alignof({key}));'
        )
        for field, _ in model.fields(key):
            lines.append(f'  printf("{name}.{field} offset %zu\\n", offsetof({key}, {field}));')
    lines += ["  return 0;", "}"]
    return "\n".join(lines) + "\n"


# (description, which side, text to replace, replacement). Each must be caught.
MUTATIONS = [
    ("a parameter type changed in the header only", "hand",
     "panto_agent_new(const char *config_json, size_t len,",
     "panto_agent_new(const char *config_json, uint32_t len,"),
    ("a parameter type changed in Rust only", "gen",
     "int32_t timeout_ms);", "int64_t timeout_ms);"),
    ("a return type changed in the header only", "hand",
     "PANTO_API uint32_t panto_error_status(", "PANTO_API uint16_t panto_error_status("),
    ("a parameter lost its const in the header only", "hand",
     "panto_event_to_json(const PantoEvent *event,", "panto_event_to_json(PantoEvent *event,"),
    ("a function missing from the header", "hand",
     "PANTO_API bool panto_stream_turn_paused(const PantoStream *stream);", ""),
    ("two fields swapped in the header", "hand",
     "  uint32_t attempt;      /* the attempt about to start (2 for the first retry) */\n"
     "  uint32_t max_attempts; /* 1 + retry.max_retries */",
     "  uint32_t max_attempts; /* 1 + retry.max_retries */\n"
     "  uint32_t attempt;      /* the attempt about to start (2 for the first retry) */"),
    ("a field type changed in Rust only", "gen",
     "  uint64_t delay_ms;", "  uint32_t delay_ms;"),
    ("a union arm missing from the header", "hand",
     "  PantoErrorInfo error;\n", ""),
    ("a constant changed in the header only", "hand",
     "#define PANTO_ERR_BUSY 13", "#define PANTO_ERR_BUSY 14"),
    ("a constant changed in Rust only", "gen",
     "#define PANTO_EV_ERROR 256", "#define PANTO_EV_ERROR 257"),
    ("a constant only in the header", "hand",
     "#define PANTO_PENDING 3", "#define PANTO_PENDING 3\n#define PANTO_WOULD_BLOCK 4"),
    ("a typedef target changed in the header only", "hand",
     "typedef int32_t PantoStatus;", "typedef uint32_t PantoStatus;"),
]


def replace_once(text, old, new, what):
    if text.count(old) != 1:
        raise SystemExit(f"selftest: the text to mutate for '{what}' occurs "
                         f"{text.count(old)} times (expected once); update MUTATIONS")
    return text.replace(old, new)


def selftest(hand, gen, lib):
    with open(hand) as f:
        hand_text = f.read()
    with open(gen) as f:
        gen_text = f.read()
    work = scratch("panto-abi-selftest-")
    failures = []

    def check(what, h_text, g_text, want_drift):
        hp, gp = os.path.join(work, "panto.h"), os.path.join(work, "gen.h")
        with open(hp, "w") as f:
            f.write(h_text)
        with open(gp, "w") as f:
            f.write(g_text)
        errs, _ = compare(hp, gp)
        if bool(errs) != want_drift:
            failures.append(f"{what}: {'not caught' if want_drift else 'reported drift: ' + '; '.join(errs)}")
        else:
            print(f"  ok: {what}" + (f" -> {errs[0].splitlines()[0]}" if errs else ""))

    check("the unmutated headers agree", hand_text, gen_text, False)
    for what, side, old, new in MUTATIONS:
        if side == "hand":
            check(what, replace_once(hand_text, old, new, what), gen_text, True)
        else:
            check(what, hand_text, replace_once(gen_text, old, new, what), True)

    symbols = exported_symbols(lib)
    errs, _ = compare_symbols(hand, symbols)
    if errs:
        failures.append("the real symbol set disagrees: " + "; ".join(errs))
    for what, syms in [
        ("a symbol missing from the library", symbols - {"panto_stream_cancel"}),
        ("an exported symbol missing from the header", symbols | {"panto_debug_dump"}),
    ]:
        errs, _ = compare_symbols(hand, syms)
        if errs:
            print(f"  ok: {what} -> {errs[0]}")
        else:
            failures.append(f"{what}: not caught")

    # Symbol versions: a 1.1 function in the 1.0 node of the script, or exported with
    # another version than the header states.
    map_path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                            "panto.map")
    versions = exported_versions(lib)
    errs, _ = compare_symbol_versions(hand, versions, map_path)
    if errs:
        failures.append("the real symbol versions disagree: " + "; ".join(errs))
    with open(map_path) as f:
        map_text = f.read()
    moved = os.path.join(work, "moved.map")
    with open(moved, "w") as f:
        f.write(replace_once(map_text, "    panto_agent_compact;\n", "", "map")
                .replace("    panto_abi_version;\n",
                         "    panto_abi_version;\n    panto_agent_compact;\n"))
    for what, path, vers in [
        ("a 1.1 function moved to the 1.0 node", moved, versions),
        ("a symbol exported with another version", map_path,
         {**versions, "panto_next_event": "PANTO_1.1"}),
    ]:
        errs, _ = compare_symbol_versions(hand, vers, path)
        if errs:
            print(f"  ok: {what} -> {errs[0]}")
        else:
            failures.append(f"{what}: not caught")

    # Any version the header does not state (this one never will).
    toml = os.path.join(work, "Cargo.toml")
    with open(toml, "w") as f:
        f.write('[package]\nname = "x"\nversion = "1.999.0"\n')
    errs, _ = compare_version(hand, toml)
    if errs:
        print(f"  ok: a version bump in Cargo.toml only -> {errs[0]}")
    else:
        failures.append("a version bump in Cargo.toml only: not caught")

    for f in failures:
        print("SELFTEST FAILED:", f)
    print(f"selftest: {len(MUTATIONS) + 6} cases, {'FAIL' if failures else 'OK'}")
    return 1 if failures else 0


# Constants that may change between compatible versions: the minor version grows with
# every addition; the patch level and the size bound are not part of the contract.
BASELINE_MAY_CHANGE = {"PANTO_ABI_VERSION_MINOR", "PANTO_ABI_VERSION_PATCH"}


def layout(header):
    """{"Record": size, "Record.field": offset} as the C compiler sees `header`."""
    work = scratch("panto-abi-layout-")
    src, exe = os.path.join(work, "probe.c"), os.path.join(work, "probe")
    with open(src, "w") as f:
        f.write(probe(header))
    subprocess.run([cc(), "-std=c11", "-I", os.path.dirname(os.path.abspath(header)), src,
                    "-o", exe], check=True, capture_output=True, text=True)
    out = {}
    for line in run([exe]).splitlines():
        name, what, value = line.split()[:3]
        out[name] = int(value)
    return out


def compare_baseline(old, new):
    """Every way `new` breaks a program built against `old`, as text."""
    stubs = stub_dir()
    a, b = Model(preprocess(old, stubs)), Model(preprocess(new, stubs))
    errs = []
    ma, mb = macros(old, stubs), macros(new, stubs)
    if ma.get("PANTO_ABI_VERSION_MAJOR") != mb.get("PANTO_ABI_VERSION_MAJOR"):
        return [f"the ABI major changed ({ma.get('PANTO_ABI_VERSION_MAJOR')} -> "
                f"{mb.get('PANTO_ABI_VERSION_MAJOR')}): a new major is a new baseline "
                "(record the released header in baseline/, see baseline/README.md)"], ""
    if (mb.get("PANTO_ABI_VERSION_MINOR") or 0) < (ma.get("PANTO_ABI_VERSION_MINOR") or 0):
        errs.append("PANTO_ABI_VERSION_MINOR went down")
    for name, value in sorted(ma.items()):
        if name in BASELINE_MAY_CHANGE:
            continue
        if name not in mb:
            errs.append(f"#define {name}: removed (was {value!r})")
        elif mb[name] != value:
            errs.append(f"#define {name}: changed from {value!r} to {mb[name]!r}")
    since_a, since_b = header_since(old), header_since(new)
    for name in sorted(a.funcs):
        if name not in b.funcs:
            errs.append(f"function {name}: removed")
        elif a.canon(a.funcs[name]) != b.canon(b.funcs[name]):
            errs.append(f"function {name}: signature changed\n    was: {a.canon(a.funcs[name])}"
                        f"\n    now: {b.canon(b.funcs[name])}")
        elif since_a[name] != since_b[name]:
            errs.append(f"function {name}: moved from version node {since_a[name]} to "
                        f"{since_b[name]} (programs linked to {name}@{since_a[name]} would "
                        "no longer load)")
    for name in sorted(n for n in a.typedefs if n.startswith("Panto")):
        if name not in b.typedefs:
            errs.append(f"typedef {name}: removed")
        elif a.canon(a.typedefs[name]) != b.canon(b.typedefs[name]):
            errs.append(f"typedef {name}: was {a.canon(a.typedefs[name])}, now "
                        f"{b.canon(b.typedefs[name])}")
    la, lb = layout(old), layout(new)
    for key in sorted(a.records):
        rec = key.split(" ", 1)[1]
        if key not in b.records:
            errs.append(f"{key}: removed")
            continue
        new_fields = dict(b.fields(key))
        for field, ftype in a.fields(key):
            if field.startswith("_reserved"):
                continue
            where = f"{rec}.{field}"
            if field not in new_fields:
                errs.append(f"{where}: removed")
            elif new_fields[field] != ftype:
                errs.append(f"{where}: type changed from {ftype} to {new_fields[field]}")
            elif la[where] != lb[where]:
                errs.append(f"{where}: moved from offset {la[where]} to {lb[where]}")
        if lb[rec] < la[rec]:
            errs.append(f"{key}: shrank from {la[rec]} to {lb[rec]} bytes")
        if rec == "PantoEventPayload" and lb[rec] != la[rec]:
            errs.append(f"{key}: its size is fixed ({la[rec]} bytes), now {lb[rec]}")
    summary = (f"{len(a.funcs)} functions, {len(a.records)} structs/unions, {len(ma)} "
               f"constants of {os.path.basename(old)} kept in {new}")
    return errs, summary


# (what, text of the baseline header, replacement): each must be reported as a break.
BASELINE_BREAKS = [
    ("a function removed",
     "PANTO_API bool panto_stream_turn_paused(const PantoStream *stream);", ""),
    ("a parameter type changed",
     "int32_t timeout_ms);", "int64_t timeout_ms);"),
    ("two fields swapped",
     "  uint32_t attempt;      /* the attempt about to start (2 for the first retry) */\n"
     "  uint32_t max_attempts; /* 1 + retry.max_retries */",
     "  uint32_t max_attempts; /* 1 + retry.max_retries */\n"
     "  uint32_t attempt;      /* the attempt about to start (2 for the first retry) */"),
    ("a field removed", "  uint64_t retry_after_ms;\n", ""),
    ("a field retyped", "  uint64_t delay_ms;", "  uint32_t delay_ms;"),
    ("a field inserted before others",
     "typedef struct PantoOutputRepair {\n  uint32_t message;",
     "typedef struct PantoOutputRepair {\n  uint32_t version;\n  uint32_t message;"),
    ("a constant changed", "#define PANTO_ERR_BUSY 13", "#define PANTO_ERR_BUSY 20"),
    ("a constant removed",
     "#define PANTO_PENDING 3 /* next with a timeout: nothing arrived in time */\n", ""),
    ("a function moved to another version node",
     "/* Since ABI 1.1. A new, uncancelled token", "/* A new, uncancelled token"),
    ("the payload union grown", "  uint64_t _reserved[32];", "  uint64_t _reserved[33];"),
]

# Changes the compatibility rules allow: each must pass.
BASELINE_ALLOWED = [
    ("a function added",
     "PANTO_API bool panto_stream_turn_paused(const PantoStream *stream);",
     "PANTO_API bool panto_stream_turn_paused(const PantoStream *stream);\n"
     "/* Since ABI 1.3. */\nPANTO_API bool panto_stream_is_new(const PantoStream *stream);"),
    ("a constant added", "#define PANTO_PENDING 3 ", "#define PANTO_LATER 9\n#define PANTO_PENDING 3 "),
    ("a field appended to a payload struct",
     "  PantoStr error; /* the validation error sent back (one line, bounded) */\n"
     "} PantoOutputRepair;",
     "  PantoStr error; /* the validation error sent back (one line, bounded) */\n"
     "  uint64_t deferred;\n} PantoOutputRepair;"),
    ("a reserved field taken", "  uint8_t _reserved0[7];\n} PantoUsage;",
     "  bool estimated;\n  uint8_t _reserved0[6];\n} PantoUsage;"),
]


def baseline_selftest(old):
    with open(old) as f:
        text = f.read()
    work = scratch("panto-abi-baseline-selftest-")
    new = os.path.join(work, "panto.h")
    failures = []

    def check(what, new_text, want_break):
        with open(new, "w") as f:
            f.write(new_text)
        errs, _ = compare_baseline(old, new)
        if bool(errs) != want_break:
            failures.append(f"{what}: " + ("not caught" if want_break else
                                           "reported as a break: " + "; ".join(errs)))
        else:
            print(f"  ok: {what}" + (f" -> {errs[0].splitlines()[0]}" if errs else " passes"))

    check("the baseline against itself", text, False)
    for what, before, after in BASELINE_BREAKS:
        check(what, replace_once(text, before, after, what), True)
    for what, before, after in BASELINE_ALLOWED:
        check(what, replace_once(text, before, after, what), False)
    for f in failures:
        print("BASELINE SELFTEST FAILED:", f)
    total = 1 + len(BASELINE_BREAKS) + len(BASELINE_ALLOWED)
    print(f"baseline selftest: {total} cases, {'FAIL' if failures else 'OK'}")
    return 1 if failures else 0


def report(errs, summary, label):
    for e in errs:
        print("ABI DRIFT:", e)
    print(f"{label}: {summary}: {'FAIL' if errs else 'OK'}")
    return 1 if errs else 0


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    cmd, args = argv[1], argv[2:]
    if cmd == "diff" and len(args) == 2:
        return report(*compare(*args), "header vs Rust")
    if cmd == "symbols" and len(args) in (2, 3):
        status = report(*compare_symbols(args[0], exported_symbols(args[1])), "symbols")
        if len(args) == 3:
            versions = exported_versions(args[1])
            status |= report(*compare_symbol_versions(args[0], versions, args[2]),
                             "symbol versions")
        return status
    if cmd == "version" and len(args) == 2:
        return report(*compare_version(*args), "version")
    if cmd == "probe" and len(args) == 1:
        sys.stdout.write(probe(args[0]))
        return 0
    if cmd == "selftest" and len(args) == 3:
        return selftest(*args)
    if cmd == "baseline" and len(args) == 2:
        return report(*compare_baseline(*args), "header vs the released baseline")
    if cmd == "baseline-selftest" and len(args) == 1:
        return baseline_selftest(args[0])
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
