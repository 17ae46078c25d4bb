#!/usr/bin/env python3
"""The Go generator's own end-to-end test: a field added to one event and a key added to
the configuration in the core's description reach Go with no hand edit, compile, and
work against the real library.

    python3 scripts/gen/selftest_golang.py [VOCAB.json] [--no-compile]

VOCAB.json defaults to what `cargo run -p panto-gen` prints. In a scratch copy of the
Go module (under $CARGO_TARGET_DIR, the tree is not touched) it

1. adds `selftest_field` (u32, optional) to tool_result and `selftest_window_ms` (u64)
   to the configuration, renders with scripts/gen/golang.py and checks the rendered
   text: ToolResult.SelftestField tagged `json:"selftest_field,omitempty"`, decoded
   from the event's JSON (the header does not carry it); Config.SelftestWindow, a
   time.Duration, written as "selftest_window_ms" and read back;
2. unless --no-compile: also renames three members in the scratch copy of the C header
   (same layout) so that a whole event (tool_result), a block's convenience fields
   (block_complete's signature) and an enum code (block_start.kind, its
   PANTO_BLOCK_* comment removed) must come from the JSON fallback; then builds the
   copy with cgo against the release libpanto.a and runs, in it, a test of the new
   field and key plus the binding's own tests that compare every decoded event with the
   library's canonical JSON (TestEventsFromTheCRecordEqualThoseFromTheirJSON,
   TestToolTurnWithGoTool). Needs go, the release libpanto.a and panto-testserver
   (scripts/test.sh builds them).

Exit status 0 when everything holds; 1 naming what did not.
"""
import copy
import json
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
REPO = os.path.dirname(os.path.dirname(HERE))

import golang  # noqa: E402

SELFTEST_GO = '''package panto

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

func TestSelftestFieldAndKeyReachGo(t *testing.T) {
	f, ok := reflect.TypeOf(ToolResult{}).FieldByName("SelftestField")
	if !ok || f.Tag.Get("json") != "selftest_field,omitempty" || f.Type.Kind() != reflect.Uint32 {
		t.Fatalf("ToolResult.SelftestField: %v %+v", ok, f)
	}
	js, err := json.Marshal(Config{Model: "m", SelftestWindow: 1500 * time.Millisecond})
	if err != nil || string(js) != `{"model":"m","selftest_window_ms":1500}` {
		t.Fatalf("Config JSON %s %v", js, err)
	}
	var back Config
	if err := json.Unmarshal(js, &back); err != nil || back.SelftestWindow != 1500*time.Millisecond {
		t.Fatalf("read back %+v %v", back, err)
	}
}
'''


def grow(vocab):
    grown = copy.deepcopy(vocab)
    event = next(e for e in grown["events"] if e["name"] == "tool_result")
    event["fields"].append({"name": "selftest_field", "type": "u32", "optional": True,
                            "doc": "Added by the Go generator's self-test."})
    grown["config"].append({"name": "selftest_window_ms", "type": "u64", "default": None,
                            "doc": "Added by the Go generator's self-test, in milliseconds."})
    return grown


def check_text(files):
    problems = []
    events, config = files["golang/events_gen.go"], files["golang/config_gen.go"]
    if not re.search(r'\tSelftestField +uint32 +`json:"selftest_field,omitempty"`', events):
        problems.append("ToolResult.SelftestField with its json tag is missing")
    case = re.search(r"case 8: // tool_result\n(.*?)return e", events, re.S)
    if not case or "fromJSON(ev, (*plainToolResult)(e))" not in case.group(1):
        problems.append("convert does not decode tool_result's JSON for the field the header lacks")
    if not re.search(r"\tSelftestWindow time\.Duration\n", config):
        problems.append("Config.SelftestWindow time.Duration is missing")
    if 'o.put("selftest_window_ms", c.SelftestWindow.Milliseconds())' not in config:
        problems.append("MarshalJSON does not write selftest_window_ms in milliseconds")
    if 'case "selftest_window_ms":\n\t\t\treturn readMillis(v, &c.SelftestWindow)' not in config:
        problems.append("UnmarshalJSON does not read selftest_window_ms")
    return problems


def mutate_header(text):
    """Same layout, other names: the generator cannot find these members."""
    subs = [
        (r"(typedef struct PantoToolResult \{.*?)bool is_error;", r"\1bool is_error_x;"),
        (r"(typedef struct PantoBlockComplete \{.*?)PantoStr signature;", r"\1PantoStr signature_x;"),
        (r"(typedef struct PantoBlockStart \{.*?uint32_t kind;) /\* PANTO_BLOCK_\* \*/", r"\1"),
    ]
    for pattern, repl in subs:
        text, n = re.subn(pattern, repl, text, count=1, flags=re.S)
        if n != 1:
            raise SystemExit(f"selftest_golang: the header no longer matches {pattern!r}")
    return text


def run(cmd, cwd, env):
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


def compile_and_test(grown, target):
    scratch = os.path.join(target, "selftest-golang")
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(os.path.join(scratch, "capi", "include"))
    with open(os.path.join(REPO, golang.C_HEADER), encoding="utf-8") as f:
        header = mutate_header(f.read())
    with open(os.path.join(scratch, golang.C_HEADER), "w", encoding="utf-8") as f:
        f.write(header)
    shutil.copytree(os.path.join(REPO, "golang"), os.path.join(scratch, "golang"),
                    ignore=shutil.ignore_patterns("bench"))
    os.symlink(os.path.join(REPO, "tests"), os.path.join(scratch, "tests"))
    files = golang.render(grown, scratch)
    problems = []
    case = re.search(r"case 5: // block_complete\n(.*?)return e", files["golang/events_gen.go"], re.S)
    if not case or "e.setBlockParts(e.Content)" not in case.group(1):
        problems.append("with signature missing from the header, BlockComplete's parts do not come from the JSON")
    case = re.search(r"case 2: // block_start\n(.*?)return e", files["golang/events_gen.go"], re.S)
    if not case or "fromJSON(ev, (*plainBlockStart)(e))" not in case.group(1):
        problems.append("with no PANTO_BLOCK_* comment, block_start.kind does not come from the JSON")
    for path, text in files.items():
        with open(os.path.join(scratch, path), "w", encoding="utf-8") as f:
            f.write(text)
    with open(os.path.join(scratch, "golang", "selftest_gen_test.go"), "w", encoding="utf-8") as f:
        f.write(SELFTEST_GO)
    release = os.path.join(target, "release")
    if not os.path.exists(os.path.join(release, "libpanto.a")):
        return problems + [f"no {release}/libpanto.a: build it (cargo build --release -p panto-capi) "
                           "or pass --no-compile"]
    ldflags = subprocess.run([os.path.join(REPO, "scripts", "cgo-ldflags.sh"), release],
                             capture_output=True, text=True, check=True).stdout.strip()
    env = dict(os.environ, CGO_ENABLED="1", CGO_LDFLAGS=ldflags)
    env.setdefault("PANTO_TESTSERVER", os.path.join(target, "debug", "panto-testserver"))
    gomod = os.path.join(scratch, "golang")
    status, out = run(["go", "vet", "."], gomod, env)
    if status != 0:
        return problems + ["go vet of the generated code failed:\n" + out]
    status, out = run(["go", "test", "-count=1", "-run",
                       "TestSelftestFieldAndKeyReachGo|TestEventsFromTheCRecordEqualThoseFromTheirJSON|"
                       "TestToolTurnWithGoTool", "."], gomod, env)
    if status != 0:
        problems.append("go test in the generated copy failed:\n" + out)
    if not problems:
        shutil.rmtree(scratch, ignore_errors=True)
    return problems


def main(argv):
    compile_ = "--no-compile" not in argv
    args = [a for a in argv if not a.startswith("--")]
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(REPO, "target"))
    if args:
        with open(args[0], encoding="utf-8") as f:
            vocab = json.load(f)
    else:
        out = subprocess.run(["cargo", "run", "--quiet", "--locked", "-p", "panto-gen"], cwd=REPO,
                             capture_output=True, text=True, check=True).stdout
        vocab = json.loads(out)
    grown = grow(vocab)
    problems = check_text(golang.render(grown))
    before = golang.render(vocab)
    if "SelftestField" in before["golang/events_gen.go"] or "SelftestWindow" in before["golang/config_gen.go"]:
        problems.append("the unchanged description already renders the self-test's names")
    if compile_ and not problems:
        problems += compile_and_test(grown, target)
    for p in problems:
        print(f"selftest_golang: {p}", file=sys.stderr)
    if not problems:
        print("selftest_golang: ok (a field and a key added in the core reach Go"
              + (", compile and decode against libpanto)" if compile_ else ")"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
