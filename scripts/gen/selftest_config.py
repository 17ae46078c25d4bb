#!/usr/bin/env python3
"""End-to-end test of the rule "a config key is one edit in the core, then scripts/gen.sh",
and of its twin for push callers: a field added to an event reaches a `Receiver` with no
edit to the trait or to the receiver's other code.

    python3 scripts/gen/selftest_config.py [--no-go] [--break STEP]

In a scratch copy of the repository (under $CARGO_TARGET_DIR/selftest-config; the tree
is not touched) it

1. adds ONE row to the `Config` declaration in core/src/config.rs — a key
   `selftest_window_ms: u64 = 1500, key(min(1)), with set with_selftest_window_ms` —
   and nothing else in the core; and adds a field `selftest_note` to `output_repair` in
   `events!` (where the core constructs that event, the field is set too: an enum
   variant's constructors must name every field);
2. builds the scratch core and runs, in it, a test that reads the key from JSON, writes
   it back (`to_value`), sees its default (`Config::new`), its builder, its bound (0 is a
   `config` error naming it), `Debug`, and its entry in `vocab::describe()` (which the
   test writes out as the description), a test in which a push `Receiver` reads the new
   event field, plus the core's own consistency tests of the schema and the events
   (`config::tests`, `vocab::tests`, `event::tests`);
3. checks that `gen.py --check` now fails naming the generated files (they are stale
   until regenerated), runs `gen.py` (what scripts/gen.sh does), and checks that
   `--check` passes, that the key is in docs/configuration.md, in Go's `Config`
   (`SelftestWindow time.Duration`, written and read as "selftest_window_ms") and in
   Python's `AgentOptions` (the keyword arguments of `Agent`);
4. unless --no-go: builds the Go module of the scratch copy and runs a Go test that
   marshals and unmarshals the new key (needs go and the release libpanto.a, as
   scripts/test.sh builds them; the C ABI does not change).

--break STEP breaks one step on purpose, to show this test fails then (exit 1 naming
what is missing): `gen` skips the regeneration, `golang` makes the Go renderer drop the
key, `read` makes the scratch core's reader skip the key.

Exit status 0 when everything holds; 1 naming what did not.
"""
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

KEY = "selftest_window_ms"
ANCHOR = re.compile(r"\n(\s*)pub output_mode: OutputMode = [^;]*;\n")
ROW = (
    "{i}/// Added by the configuration self-test, in milliseconds.\n"
    "{i}pub selftest_window_ms: u64 = 1500, key(min(1)), with set with_selftest_window_ms;\n"
)

RUST_TEST = r'''//! Written by scripts/gen/selftest_config.py into its scratch copy only.
use panto::{Config, ErrorKind, ProviderKind};

#[test]
fn the_added_key_is_read_written_defaulted_bounded_and_described() {
    let c = Config::from_json(r#"{"model":"m","selftest_window_ms":42}"#).unwrap();
    assert_eq!(c.selftest_window_ms, 42, "read");
    assert_eq!(c.to_value()["selftest_window_ms"], 42, "written");
    let d = Config::new(ProviderKind::OpenAi, "m");
    assert_eq!(d.selftest_window_ms, 1500, "defaulted");
    assert_eq!(d.to_value()["selftest_window_ms"], 1500, "default written");
    assert!(format!("{d:?}").contains("selftest_window_ms: 1500"), "Debug");
    assert_eq!(d.with_selftest_window_ms(7).selftest_window_ms, 7, "builder");
    let e = Config::from_json(r#"{"model":"m","selftest_window_ms":0}"#).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Config);
    assert!(e.message.starts_with("selftest_window_ms: must be at least 1"), "{}", e.message);
    let e = Config::from_json(r#"{"model":"m","selftest_window_ms":"x"}"#).unwrap_err();
    assert!(e.message.starts_with("selftest_window_ms: must be"), "{}", e.message);
    let vocab = panto::vocab::describe();
    let key = vocab["config"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["name"] == "selftest_window_ms")
        .expect("described");
    assert_eq!(key["type"], "u64");
    assert_eq!(key["default"], 1500);
    assert_eq!(key["min"], 1);
    assert_eq!(key["doc"], "Added by the configuration self-test, in milliseconds.");
    std::fs::write(env!("SELFTEST_VOCAB"), vocab.to_string()).unwrap();
}

/// The receiver below was written against `on_event` alone: the new field reaches it.
#[test]
fn the_added_event_field_reaches_a_push_receiver() {
    use panto::{Event, Flow, Receiver};
    struct Note(Option<String>);
    impl Receiver for Note {
        fn on_event(&mut self, event: Event) -> Flow {
            if let Event::OutputRepair { selftest_note, .. } = event {
                self.0 = selftest_note;
            }
            Flow::Continue
        }
    }
    let ev: Event = serde_json::from_str(
        r#"{"type":"output_repair","message":0,"attempt":1,"max_attempts":1,"error":"e","selftest_note":"n"}"#,
    )
    .unwrap();
    let mut r = Note(None);
    assert_eq!(r.on_event(ev.clone()), Flow::Continue);
    assert_eq!(r.0.as_deref(), Some("n"));
    assert!(ev.to_json().ends_with(r#","selftest_note":"n"}"#), "{}", ev.to_json());
}
'''

GO_TEST = '''package panto

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestSelftestConfigKeyReachesGo(t *testing.T) {
	js, err := json.Marshal(Config{Model: "m", SelftestWindow: 1500 * time.Millisecond})
	if err != nil || !strings.Contains(string(js), `"selftest_window_ms":1500`) {
		t.Fatalf("Config JSON %s %v", js, err)
	}
	var back Config
	if err := json.Unmarshal(js, &back); err != nil || back.SelftestWindow != 1500*time.Millisecond {
		t.Fatalf("read back %+v %v", back, err)
	}
}
'''


def run(cmd, cwd, env=None):
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


def copy_repo(scratch):
    shutil.rmtree(scratch, ignore_errors=True)
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True,
                           check=True).stdout.decode().split("\0")
    for path in filter(None, files):
        src = os.path.join(REPO, path)
        if not os.path.isfile(src):
            continue  # deleted in the work tree, or a submodule
        dst = os.path.join(scratch, path)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copy2(src, dst)


def add_row(scratch):
    path = os.path.join(scratch, "core", "src", "config.rs")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    m = ANCHOR.search(text)
    if not m:
        raise SystemExit("selftest_config: the output_mode row of Config is not where expected")
    text = text[: m.end()] + ROW.format(i=m.group(1)) + text[m.end():]
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


EVENT_FIELD = (
    "        /// Added by the configuration self-test.\n"
    "        #[serde(default, skip_serializing_if = \"Option::is_none\")]\n"
    "        selftest_note: Option<String>,\n"
)


def add_event_field(scratch):
    """The field in `events!`, and in every construction of the event in the core (the
    vocabulary's sample sets it, so its test sees every described field)."""
    src = os.path.join(scratch, "core", "src")
    path = os.path.join(src, "event.rs")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    m = re.search(r'OutputRepair "output_repair" \{.*?\n        error: String,\n', text, re.S)
    if not m:
        raise SystemExit("selftest_config: output_repair's declaration is not where expected")
    text = text[: m.end()] + EVENT_FIELD + text[m.end():]
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    sites = 0
    for root, _, names in os.walk(src):
        for name in names:
            if not name.endswith(".rs"):
                continue
            path = os.path.join(root, name)
            with open(path, encoding="utf-8") as f:
                text = f.read()
            value = 'Some("n".into())' if name == "vocab.rs" else "None"
            text, n = re.subn(r"Event::OutputRepair \{(?![^}]*\.\.)",
                              f"Event::OutputRepair {{ selftest_note: {value},", text)
            sites += n
            if n:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(text)
    if sites == 0:
        raise SystemExit("selftest_config: no construction of output_repair found")


def unexpected(out):
    """gen.py's complaints other than the one by design: the hand-written C header lacks
    the new event field until someone writes it there."""
    return [line for line in out.splitlines()
            if line.strip() and not line.startswith("gen: wrote ") and "selftest_note" not in line]


def break_step(scratch, step):
    def patch(rel, old, new):
        path = os.path.join(scratch, rel)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        if old not in text:
            raise SystemExit(f"selftest_config: --break {step}: {old!r} not in {rel}")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text.replace(old, new, 1))

    if step == "read":
        patch("core/src/config_keys.rs", "    match obj.get(name) {",
              "    match obj.get(name).filter(|_| name != \"selftest_window_ms\") {")
    elif step == "golang":
        path = os.path.join(scratch, "scripts", "gen", "golang.py")
        with open(path, "a", encoding="utf-8") as f:
            f.write("\n\n# --break golang: the renderer drops the self-test's key.\n"
                    "import inspect as _inspect\n"
                    "_render = render\n"
                    "_arity = len(_inspect.signature(_render).parameters)\n\n\n"
                    "def render(vocab, root=None):\n"
                    "    vocab = dict(vocab, config=[k for k in vocab['config'] if k['name'] != 'selftest_window_ms'])\n"
                    "    return _render(vocab, root) if _arity >= 2 else _render(vocab)\n")
    elif step != "gen":  # gen: main skips the regeneration
        raise SystemExit(f"selftest_config: --break {step}: not one of gen, golang, read")


def main(argv):
    go = "--no-go" not in argv
    broken = argv[argv.index("--break") + 1] if "--break" in argv else None
    target = os.path.abspath(os.environ.get("CARGO_TARGET_DIR", os.path.join(REPO, "target")))
    scratch = os.path.join(target, "selftest-config")
    problems = []
    copy_repo(scratch)
    add_row(scratch)
    add_event_field(scratch)
    if broken:
        break_step(scratch, broken)
    with open(os.path.join(scratch, "core", "tests", "selftest_config.rs"), "w") as f:
        f.write(RUST_TEST)

    # 2. The core, with the one row: its own tests of the schema, and the new key's.
    vocab_path = os.path.join(scratch, "vocab.json")
    env = dict(os.environ, CARGO_TARGET_DIR=target, SELFTEST_VOCAB=vocab_path)
    status, out = run(["cargo", "test", "--quiet", "-p", "panto", "--test", "selftest_config"],
                      scratch, env)
    if status != 0:
        problems.append("the scratch core's test of the new key failed:\n" + out[-4000:])
    status, out = run(["cargo", "test", "--quiet", "-p", "panto", "--lib", "--", "config::",
                       "vocab::", "event::"], scratch, env)
    if status != 0:
        problems.append("the scratch core's schema tests failed with the new key:\n" + out[-4000:])
    if problems:
        return report(problems)

    # 3. The generated files: stale until regenerated, then fresh and carrying the key.
    gen = [sys.executable, os.path.join(scratch, "scripts", "gen", "gen.py"), vocab_path,
           "--root", scratch]
    status, out = run(gen + ["--check"], scratch)
    for path in ("docs/configuration.md", "golang/config_gen.go", "pypanto/python/panto/_vocab.py"):
        if status == 0 or path not in out:
            problems.append(f"gen --check did not name {path} as stale after the key was added:\n{out}")
    if broken != "gen":
        status, out = run(gen, scratch)
        if status != 0 and unexpected(out):
            problems.append("gen.py failed:\n" + out)
    status, out = run(gen + ["--check"], scratch)
    if status != 0 and unexpected(out):
        problems.append("gen --check fails after regenerating:\n" + out)

    def text(rel):
        with open(os.path.join(scratch, rel), encoding="utf-8") as f:
            return f.read()

    if not re.search(r"\| `selftest_window_ms` \|[^\n]*1500[^\n]*Added by the configuration self-test",
                     text("docs/configuration.md")):
        problems.append("docs/configuration.md has no row of selftest_window_ms with its default and doc")
    go_config = text("golang/config_gen.go")
    if not re.search(r"\tSelftestWindow time\.Duration\n", go_config) or \
            'o.put("selftest_window_ms"' not in go_config or 'case "selftest_window_ms":' not in go_config:
        problems.append("golang/config_gen.go: Config.SelftestWindow is not declared, written and read")
    if "SelftestNote" not in text("golang/events_gen.go"):
        problems.append("golang/events_gen.go: OutputRepair has no SelftestNote")
    if not re.search(r"\n    selftest_window_ms: Optional\[int\]\n", text("pypanto/python/panto/_vocab.py")):
        problems.append("pypanto/python/panto/_vocab.py: AgentOptions has no selftest_window_ms")

    # 4. Go compiles the generated code and reads and writes the key.
    if go and not problems:
        problems += go_test(scratch, target)
    if not problems:
        shutil.rmtree(scratch, ignore_errors=True)
    return report(problems)


def go_test(scratch, target):
    release = os.path.join(target, "release")
    if not os.path.exists(os.path.join(release, "libpanto.a")):
        return [f"no {release}/libpanto.a: build it (cargo build --release -p panto-capi) or pass --no-go"]
    ldflags = subprocess.run([os.path.join(REPO, "scripts", "cgo-ldflags.sh"), release],
                             capture_output=True, text=True, check=True).stdout.strip()
    env = dict(os.environ, CGO_ENABLED="1", CGO_LDFLAGS=ldflags)
    gomod = os.path.join(scratch, "golang")
    with open(os.path.join(gomod, "selftest_config_test.go"), "w", encoding="utf-8") as f:
        f.write(GO_TEST)
    status, out = run(["gofmt", "-l", "."], gomod)
    if status != 0 or out.strip():
        return ["gofmt of the generated Go:\n" + out]
    status, out = run(["go", "vet", "."], gomod, env)
    if status != 0:
        return ["go vet of the generated Go failed:\n" + out]
    status, out = run(["go", "test", "-count=1", "-run", "TestSelftestConfigKeyReachesGo", "."], gomod, env)
    if status != 0:
        return ["go test of the new key failed:\n" + out]
    return []


def report(problems):
    for p in problems:
        print(f"selftest_config: {p}", file=sys.stderr)
    if not problems:
        print("selftest_config: ok (one row in the core: read, written, defaulted, bounded, "
              "described, and in the generated docs, Go and Python; a new event field reached "
              "a push Receiver)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
